// Framework options: defaults from each framework's own code, and the checks between them.
#include "commscope/spec/framework_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "commscope/spec/preset.h"
#include "commscope/util/json_fields.h"

namespace commscope {

namespace {
Error bad(std::string_view field, std::string_view expected, std::string_view got) {
  return Error{fmt::format("{}: expected {}, got {}", field, expected, got)};
}
}  // namespace

DType megatron_grad_dtype(const ParallelPlan& plan) {
  if (plan.precision != Precision::bf16) return plan.dtype();
  return plan.main_grads_dtype == DType::bf16 ? DType::bf16 : DType::fp32;
}

DType megatron_grad_buffer_dtype(const ParallelPlan& plan) {
  return plan.grad_comm_dtype.value_or(megatron_grad_dtype(plan));
}

Result<std::string> deepspeed_versions_path() {
  for (const auto& root : preset_roots()) {
    const auto p = root / "frameworks" / "deepspeed.json";
    std::error_code ec;
    if (std::filesystem::is_regular_file(p, ec)) return p.string();
  }
  return Error{
      "--deepspeed-version: expected presets/frameworks/deepspeed.json in a preset "
      "folder (COMMSCOPE_PRESETS), got none"};
}

Result<std::vector<DeepSpeedVersion>> load_deepspeed_versions(const std::string& path) {
  std::string file = path;
  if (file.empty()) {
    CS_ASSIGN_OR_RETURN(file, deepspeed_versions_path());
  }
  CS_ASSIGN_OR_RETURN(auto j, read_json_file(file));
  if (!j.is_object() || !j.contains("versions") || !j["versions"].is_array() ||
      j["versions"].empty() || j["versions"].size() > 64)
    return Error{fmt::format("{}: field 'versions': expected an array of 1 to 64 objects, got {}",
                             file, j.contains("versions") ? json_excerpt(j["versions"]) : "none")};
  std::vector<DeepSpeedVersion> out;
  for (std::size_t i = 0; i < j["versions"].size(); ++i) {
    const auto& o = j["versions"][i];
    if (!o.is_object())
      return Error{
          fmt::format("{}: versions[{}]: expected an object, got {}", file, i, json_excerpt(o))};
    FieldReader r(o, file, fmt::format("versions[{}]", i));
    DeepSpeedVersion v;
    r.require("version", v.version);
    r.read("releases", v.releases);
    r.read("provenance", v.provenance);
    r.read("zero3_sync_gathers", v.zero3_sync_gathers);
    r.read("zero3_per_param_calls", v.zero3_per_param_calls);
    r.read("zero3_double_reduce_bucket", v.zero3_double_reduce_bucket);
    r.read("host_s_per_rank_per_call", v.host_s_per_rank_per_call);
    r.read("nics_per_group", v.nics_per_group);
    r.check(v.nics_per_group >= 0 && v.nics_per_group <= 1024, "nics_per_group",
            "an integer from 0 (the system's) to 1024", std::to_string(v.nics_per_group));
    r.check(std::isfinite(v.host_s_per_rank_per_call) && v.host_s_per_rank_per_call >= 0 &&
                v.host_s_per_rank_per_call <= 1,
            "host_s_per_rank_per_call", "a number of seconds in [0, 1]",
            fmt::format("{}", v.host_s_per_rank_per_call));
    CS_RETURN_IF_ERROR(r.status());
    out.push_back(std::move(v));
  }
  return out;
}

Framework framework_of_name(std::string_view name) {
  auto f = framework_from_name(name);
  return f ? *f : Framework::none;
}

Status apply_framework(Framework f, PlanInput& p) {
  if (f == Framework::none) return Status{};
  if (f != Framework::deepspeed) {  // a DeepSpeed release means nothing to another framework
    p.deepspeed_version.reset();
    p.zero3_host_s_per_rank_per_call.reset();
    p.zero3_nics_per_group.reset();
  }
  const int zero = p.zero.value_or(0);
  switch (f) {
    case Framework::none:
    case Framework::deepspeed:
      break;
    case Framework::fsdp:
      p.fsdp_sharding = zero >= 3   ? FsdpSharding::full_shard
                        : zero == 2 ? FsdpSharding::shard_grad_op
                                    : FsdpSharding::no_shard;
      p.zero.reset();
      break;
    case Framework::megatron:
      if (zero >= 2)
        return bad("--framework", "a plan Megatron-LM runs (ZeRO 0 or 1)",
                   fmt::format("megatron with ZeRO-{}", zero));
      if (zero == 1) p.use_distributed_optimizer = true;
      p.zero.reset();
      break;
  }
  p.framework = f;
  return Status{};
}

Status resolve_framework(const PlanInput& in, ParallelPlan& plan, std::vector<std::string>& warn) {
  plan.framework = in.framework.value_or(Framework::none);
  const Framework f = plan.framework;
  const std::string fw(to_string(f));
  // Options of one framework given for another: say so rather than ignore them.
  if (f != Framework::fsdp) {
    const char* given = in.fsdp_sharding            ? "--fsdp-sharding"
                        : in.fsdp_wrap              ? "--fsdp-wrap"
                        : in.fsdp_prefetch          ? "--fsdp-prefetch"
                        : in.fsdp_limit_all_gathers ? "--fsdp-limit-all-gathers"
                        : in.fsdp_grad_sync         ? "--fsdp-grad-sync"
                        : in.fsdp_shard_size        ? "--fsdp-shard-size"
                        : in.fsdp_replicate_size    ? "--fsdp-replicate-size"
                                                    : nullptr;
    if (given) return bad(given, "--framework fsdp", fmt::format("--framework {}", fw));
  }
  if (f != Framework::megatron && in.use_distributed_optimizer)
    return bad("--use-distributed-optimizer", "--framework megatron",
               fmt::format("--framework {}", fw));

  // DeepSpeed's ZeRO-3 keys (read from a config whatever the framework; used by deepspeed).
  auto count = [](const std::optional<std::int64_t>& v, std::int64_t& into, const char* key,
                  std::int64_t min) -> Status {
    if (!v) return Status{};
    if (*v < min)
      return bad(key, min > 0 ? "a positive element count" : "a non-negative element count",
                 std::to_string(*v));
    into = *v;
    return Status{};
  };
  CS_RETURN_IF_ERROR(count(in.zero3_prefetch_bucket, plan.zero3_prefetch_bucket,
                           "stage3_prefetch_bucket_size", 0));
  CS_RETURN_IF_ERROR(
      count(in.zero3_max_live_params, plan.zero3_max_live_params, "stage3_max_live_parameters", 0));
  CS_RETURN_IF_ERROR(count(in.zero3_max_reuse_distance, plan.zero3_max_reuse_distance,
                           "stage3_max_reuse_distance", 0));
  CS_RETURN_IF_ERROR(count(in.zero3_persistence_threshold, plan.zero3_persistence_threshold,
                           "stage3_param_persistence_threshold", 0));
  plan.contiguous_gradients = in.contiguous_gradients.value_or(true);

  // DeepSpeed's release (presets/frameworks/deepspeed.json), and its host cost per call.
  if ((in.deepspeed_version || in.zero3_host_s_per_rank_per_call || in.zero3_nics_per_group) &&
      f != Framework::deepspeed)
    return bad(in.deepspeed_version                ? "--deepspeed-version"
               : in.zero3_host_s_per_rank_per_call ? "--zero3-host-per-rank-call"
                                                   : "--zero3-nics-per-group",
               "--framework deepspeed", fmt::format("--framework {}", fw));
  if (in.deepspeed_version) {
    CS_ASSIGN_OR_RETURN(auto versions, load_deepspeed_versions());
    auto it = std::find_if(versions.begin(), versions.end(), [&](const DeepSpeedVersion& v) {
      return v.version == *in.deepspeed_version;
    });
    if (it == versions.end()) {
      std::string known;
      for (const auto& v : versions) known += (known.empty() ? "" : "|") + v.version;
      return bad("--deepspeed-version", fmt::format("one of {}", known),
                 fmt::format("'{}'", *in.deepspeed_version));
    }
    plan.deepspeed_version = it->version;
    plan.zero3_sync_gathers = it->zero3_sync_gathers;
    plan.zero3_per_param_calls = it->zero3_per_param_calls;
    plan.zero3_double_reduce_bucket = it->zero3_double_reduce_bucket;
    plan.zero3_host_s_per_rank_per_call = it->host_s_per_rank_per_call;
    plan.zero3_nics_per_group = it->nics_per_group;
  }
  if (in.zero3_nics_per_group) {
    if (*in.zero3_nics_per_group < 0 || *in.zero3_nics_per_group > 1024)
      return bad("--zero3-nics-per-group", "an integer from 0 (the system's) to 1024",
                 std::to_string(*in.zero3_nics_per_group));
    plan.zero3_nics_per_group = *in.zero3_nics_per_group;
  }
  if (in.zero3_host_s_per_rank_per_call) {
    const double c = *in.zero3_host_s_per_rank_per_call;
    if (!(c >= 0 && c <= 1))
      return bad("--zero3-host-per-rank-call", "a number of seconds in [0, 1]",
                 fmt::format("{}", c));
    plan.zero3_host_s_per_rank_per_call = c;
  }

  // DeepSpeed's PipelineEngine partitions pipeline tensors over TP by default; Megatron-Core,
  // FSDP and commscope's own pattern send them whole unless asked.
  plan.pipe_partitioned = in.pipe_partitioned.value_or(f == Framework::deepspeed);
  switch (f) {
    case Framework::none:
    case Framework::deepspeed:
      break;
    case Framework::fsdp:
      if (in.zero)
        return bad("--zero",
                   "no ZeRO stage with --framework fsdp (FSDP's sharding is --fsdp-sharding)",
                   std::to_string(*in.zero));
      plan.fsdp_sharding = in.fsdp_sharding.value_or(FsdpSharding::full_shard);
      plan.fsdp_wrap = in.fsdp_wrap.value_or(FsdpWrap::block);
      plan.fsdp_prefetch = in.fsdp_prefetch.value_or(FsdpPrefetch::backward_pre);
      // FullyShardedDataParallel(limit_all_gathers=True) is PyTorch 2.x's default.
      plan.fsdp_limit_all_gathers = in.fsdp_limit_all_gathers.value_or(true);
      plan.fsdp_grad_sync = in.fsdp_grad_sync.value_or(FsdpGradSync::micro_batch);
      switch (plan.fsdp_sharding) {
        case FsdpSharding::full_shard:
        case FsdpSharding::hybrid_shard:
          plan.zero = 3;
          break;
        case FsdpSharding::shard_grad_op:
        case FsdpSharding::hybrid_shard_zero2:
          plan.zero = 2;
          break;
        case FsdpSharding::no_shard:
          plan.zero = 0;
          break;
      }
      if (plan.dp == 1 && plan.fsdp_sharding != FsdpSharding::no_shard)
        warn.push_back("FSDP with data-parallel size 1 shards nothing");
      if (in.fsdp_shard_size || in.fsdp_replicate_size) {
        const char* flag = in.fsdp_shard_size ? "--fsdp-shard-size" : "--fsdp-replicate-size";
        if (in.fsdp_shard_size && in.fsdp_replicate_size)
          return bad("--fsdp-replicate-size", "it or --fsdp-shard-size", "both");
        const int n = in.fsdp_shard_size ? *in.fsdp_shard_size : *in.fsdp_replicate_size;
        if (!plan.hsdp())
          return bad(flag,
                     "--fsdp-sharding hybrid_shard or hybrid_shard_zero2 with it (HSDP's "
                     "groups)",
                     fmt::format("--fsdp-sharding {}", to_string(plan.fsdp_sharding)));
        if (n < 1 || plan.dp % n != 0)
          return bad(flag, fmt::format("a divisor of the data-parallel size {}", plan.dp),
                     std::to_string(n));
        plan.fsdp_shard_size = in.fsdp_shard_size ? n : plan.dp / n;
      }
      break;
    case Framework::megatron:
      if (in.zero && *in.zero != 0)
        return bad("--zero",
                   "0 with --framework megatron (Megatron-LM shards the optimizer with "
                   "--use-distributed-optimizer)",
                   std::to_string(*in.zero));
      plan.use_distributed_optimizer = in.use_distributed_optimizer.value_or(false);
      plan.zero = plan.use_distributed_optimizer ? 1 : 0;
      // Megatron-LM's --overlap-grad-reduce and --overlap-param-gather are off by default.
      plan.overlap_grad_reduce = in.overlap_grad_reduce.value_or(false);
      plan.overlap_param_gather = in.overlap_param_gather.value_or(false);
      if (plan.overlap_param_gather && !plan.use_distributed_optimizer)
        return Error{
            "--overlap-param-gather: expected --use-distributed-optimizer with it (Megatron-LM "
            "gathers parameters only under the distributed optimizer), got neither"};
      // megatron/core/distributed/distributed_data_parallel.py: bucket_size defaults to
      // max(40000000, 1000000 x DP) parameters; --ddp-bucket-size (here in MiB of the gradient
      // buffer, bf16 under --grad-reduce-in-bf16) overrides it.
      plan.megatron_bucket = std::max<std::int64_t>(40000000, std::int64_t{1000000} * plan.dp);
      if (in.ddp_bucket_mb)
        plan.megatron_bucket = std::max<std::int64_t>(
            1, static_cast<std::int64_t>(plan.ddp_bucket.value() /
                                         dtype_bytes(megatron_grad_buffer_dtype(plan))));
      break;
  }
  return Status{};
}

}  // namespace commscope
