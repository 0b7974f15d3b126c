// Plans: names of the enums, merging of plan inputs, and the DeepSpeed config loader.
#include "commscope/spec/plan.h"

#include <algorithm>
#include <cctype>
#include <numeric>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commscope/spec/framework_config.h"
#include "commscope/spec/limits.h"
#include "commscope/util/json_fields.h"

namespace commscope {

namespace {
int dp_ranks_on_node(int dp, int tp, int pp, RankOrder order, int gpus_per_node) {
  const int gpn = std::max(1, gpus_per_node);
  const int stride = order == RankOrder::tp_dp_pp ? tp : tp * pp;
  const int per_node = stride >= gpn ? 1 : std::min(dp, gpn / stride);
  return std::gcd(dp, per_node);
}
}  // namespace

int dp_ranks_per_node(const ParallelPlan& p, int gpus_per_node) {
  return dp_ranks_on_node(p.dp, p.tp, p.pp, p.rank_order, gpus_per_node);
}

int grad_dp_ranks_per_node(const ParallelPlan& p, int gpus_per_node) {
  return dp_ranks_on_node(p.grad_dp(), p.tp, p.pp, p.rank_order, gpus_per_node);
}

int hsdp_shard_ranks(const ParallelPlan& p, int gpus_per_node) {
  return p.fsdp_shard_size > 0 ? p.fsdp_shard_size * p.cp
                               : grad_dp_ranks_per_node(p, gpus_per_node);
}

int expert_dp_ranks_per_node(const ParallelPlan& p, int gpus_per_node) {
  const int stride = p.ep * p.expert_tp;
  return stride >= gpus_per_node ? 1 : std::min(p.expert_dp(), gpus_per_node / stride);
}

int hsdp_expert_shard_ranks(const ParallelPlan& p, int gpus_per_node) {
  if (!p.hsdp()) return p.expert_dp();
  return hsdp_shard_ranks(p, gpus_per_node) * p.tp / (p.ep * p.expert_tp);
}

namespace {
constexpr EnumName<Precision> kPrecisionNames[] = {
    {Precision::fp32, "fp32"}, {Precision::fp16, "fp16"}, {Precision::bf16, "bf16"}};
constexpr EnumName<Recompute> kRecomputeNames[] = {{Recompute::none, "none"},
                                                   {Recompute::selective, "selective"},
                                                   {Recompute::full, "full"},
                                                   {Recompute::op, "op"}};
constexpr EnumName<Schedule> kScheduleNames[] = {{Schedule::gpipe, "gpipe"},
                                                 {Schedule::one_f_one_b, "1f1b"},
                                                 {Schedule::interleaved, "interleaved"}};

constexpr EnumName<RankOrder> kRankOrderNames[] = {{RankOrder::tp_dp_pp, "tp-dp-pp"},
                                                   {RankOrder::tp_pp_dp, "tp-pp-dp"}};

constexpr EnumName<Framework> kFrameworkNames[] = {{Framework::none, "none"},
                                                   {Framework::megatron, "megatron"},
                                                   {Framework::deepspeed, "deepspeed"},
                                                   {Framework::fsdp, "fsdp"}};
constexpr EnumName<FsdpSharding> kFsdpShardingNames[] = {
    {FsdpSharding::full_shard, "full_shard"},
    {FsdpSharding::shard_grad_op, "shard_grad_op"},
    {FsdpSharding::hybrid_shard, "hybrid_shard"},
    {FsdpSharding::no_shard, "no_shard"},
    {FsdpSharding::hybrid_shard_zero2, "hybrid_shard_zero2"}};
constexpr EnumName<FsdpPrefetch> kFsdpPrefetchNames[] = {
    {FsdpPrefetch::backward_pre, "backward_pre"},
    {FsdpPrefetch::backward_post, "backward_post"},
    {FsdpPrefetch::none, "none"}};
constexpr EnumName<FsdpWrap> kFsdpWrapNames[] = {{FsdpWrap::block, "block"},
                                                 {FsdpWrap::model, "model"}};
constexpr EnumName<FsdpGradSync> kFsdpGradSyncNames[] = {
    {FsdpGradSync::micro_batch, "micro-batch"},
    {FsdpGradSync::last_micro_batch, "last-micro-batch"},
    {FsdpGradSync::step, "step"}};
constexpr EnumName<CrossEntropy> kCrossEntropyNames[] = {
    {CrossEntropy::vocab_parallel, "vocab-parallel"},
    {CrossEntropy::fused, "fused"},
    {CrossEntropy::torch, "torch"},
    {CrossEntropy::flash_attn, "flash-attn"}};
constexpr EnumName<AttentionKernel> kAttentionKernelNames[] = {
    {AttentionKernel::standard, "standard"}, {AttentionKernel::flash, "flash"}};
constexpr EnumName<AttentionBackend> kAttentionBackendNames[] = {
    {AttentionBackend::fused, "fused"}, {AttentionBackend::flash, "flash"}};
constexpr EnumName<CpCommType> kCpCommTypeNames[] = {{CpCommType::p2p, "p2p"},
                                                     {CpCommType::all_gather, "all_gather"},
                                                     {CpCommType::a2a, "a2a"},
                                                     {CpCommType::a2a_p2p, "a2a+p2p"}};
constexpr EnumName<MoeDispatcher> kMoeDispatcherNames[] = {{MoeDispatcher::alltoall, "alltoall"},
                                                           {MoeDispatcher::flex, "flex"}};
constexpr EnumName<GradCompression> kGradCompressionNames[] = {
    {GradCompression::none, "none"},
    {GradCompression::powersgd, "powersgd"},
    {GradCompression::onebit, "onebit"}};

template <class T>
void take(std::optional<T>& into, const std::optional<T>& from) {
  if (from) into = from;
}

bool is_auto(const FieldReader& r, std::string_view key) {
  const auto& j = r.raw();
  auto it = j.find(std::string(key));
  return it != j.end() && it->is_string() && it->get<std::string>() == "auto";
}

// A DeepSpeed field that may say "auto".
template <class T>
void read_or_auto(FieldReader& r, std::string_view key, std::optional<T>& out) {
  if (is_auto(r, key)) return;
  r.read(key, out);
}

bool enabled(FieldReader& parent, std::string_view key) {
  auto o = parent.object(key);
  o.allow_unknown();
  if (is_auto(o, "enabled")) return false;
  bool on = false;
  // A nested reader's error is its own (status()): "enabled": "true" was read as off, and the
  // plan ran in fp32 without a word (found by probing, 2026-12-02).
  if (o.has("enabled") && !o.raw().at("enabled").is_boolean())
    parent.fail(fmt::format("{}.enabled", key), "true, false or \"auto\"",
                json_excerpt(o.raw().at("enabled")));
  o.read("enabled", on);
  return on;
}
}  // namespace

std::string_view to_string(Precision p) {
  return enum_to_name(kPrecisionNames, p);
}
std::string_view to_string(Recompute r) {
  return enum_to_name(kRecomputeNames, r);
}
std::string_view to_string(Schedule s) {
  return enum_to_name(kScheduleNames, s);
}
std::optional<Precision> precision_from_name(std::string_view s) {
  return enum_from_name(kPrecisionNames, s);
}
std::optional<Recompute> recompute_from_name(std::string_view s) {
  return enum_from_name(kRecomputeNames, s);
}
std::optional<Schedule> schedule_from_name(std::string_view s) {
  return enum_from_name(kScheduleNames, s);
}

std::string_view to_string(RankOrder o) {
  return enum_to_name(kRankOrderNames, o);
}
std::optional<RankOrder> rank_order_from_name(std::string_view s) {
  return enum_from_name(kRankOrderNames, s);
}

std::string_view to_string(Framework f) {
  return enum_to_name(kFrameworkNames, f);
}
std::string_view to_string(FsdpSharding s) {
  return enum_to_name(kFsdpShardingNames, s);
}
std::string_view to_string(FsdpPrefetch p) {
  return enum_to_name(kFsdpPrefetchNames, p);
}
std::string_view to_string(FsdpWrap w) {
  return enum_to_name(kFsdpWrapNames, w);
}
std::optional<Framework> framework_from_name(std::string_view s) {
  return enum_from_name(kFrameworkNames, s);
}
std::optional<FsdpSharding> fsdp_sharding_from_name(std::string_view s) {
  return enum_from_name(kFsdpShardingNames, s);
}
std::optional<FsdpPrefetch> fsdp_prefetch_from_name(std::string_view s) {
  return enum_from_name(kFsdpPrefetchNames, s);
}
std::optional<FsdpWrap> fsdp_wrap_from_name(std::string_view s) {
  return enum_from_name(kFsdpWrapNames, s);
}
std::string_view to_string(FsdpGradSync s) {
  return enum_to_name(kFsdpGradSyncNames, s);
}
std::optional<FsdpGradSync> fsdp_grad_sync_from_name(std::string_view s) {
  return enum_from_name(kFsdpGradSyncNames, s);
}
std::string_view to_string(CrossEntropy c) {
  return enum_to_name(kCrossEntropyNames, c);
}
std::optional<CrossEntropy> cross_entropy_from_name(std::string_view s) {
  return enum_from_name(kCrossEntropyNames, s);
}
std::string_view to_string(AttentionKernel a) {
  return enum_to_name(kAttentionKernelNames, a);
}
std::optional<AttentionKernel> attention_kernel_from_name(std::string_view s) {
  return enum_from_name(kAttentionKernelNames, s);
}

std::string_view to_string(AttentionBackend b) {
  return enum_to_name(kAttentionBackendNames, b);
}
std::optional<AttentionBackend> attention_backend_from_name(std::string_view s) {
  return enum_from_name(kAttentionBackendNames, s);
}

std::string_view to_string(CpCommType c) {
  return enum_to_name(kCpCommTypeNames, c);
}
std::string cp_form_text(CpCommType c, int cp, int cp_a2a) {
  switch (c) {
    case CpCommType::all_gather:
      return "all-gather";
    case CpCommType::a2a:
      return "all-to-all";
    case CpCommType::a2a_p2p:
      return fmt::format("all-to-all over {}, ring over {}", cp_a2a, cp / std::max(cp_a2a, 1));
    case CpCommType::p2p:
      break;
  }
  return "ring";
}
std::optional<CpCommType> cp_comm_type_from_name(std::string_view s) {
  if (s == "allgather") return CpCommType::all_gather;  // Megatron-LM's --help spelling
  return enum_from_name(kCpCommTypeNames, s);
}

std::string_view to_string(MoeDispatcher d) {
  return enum_to_name(kMoeDispatcherNames, d);
}
std::optional<MoeDispatcher> moe_dispatcher_from_name(std::string_view s) {
  return enum_from_name(kMoeDispatcherNames, s);
}

std::string_view to_string(GradCompression c) {
  return enum_to_name(kGradCompressionNames, c);
}

std::optional<DType> grad_comm_dtype_from_name(std::string_view s) {
  std::string l(s);
  for (char& c : l) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (l == "fp32" || l == "float32") return DType::fp32;
  if (l == "bf16" || l == "bfp16" || l == "bfloat16") return DType::bf16;
  if (l == "fp16" || l == "float16") return DType::fp16;
  if (l == "fp8") return DType::fp8;
  return std::nullopt;
}

Status resolve_compression(const PlanInput& in, ParallelPlan& plan, int gpus_per_node) {
  plan.grad_comm_dtype = in.grad_comm_dtype;
  plan.zeropp_qwz = in.zeropp_qwz.value_or(false);
  plan.zeropp_qgz = in.zeropp_qgz.value_or(false);
  plan.zeropp_hpz = in.zeropp_hpz.value_or(1);
  plan.grad_compression = in.grad_compression.value_or(GradCompression::none);
  plan.powersgd_rank = in.powersgd_rank.value_or(0);
  if (plan.zeropp_hpz < 1)
    return Error{
        fmt::format("zero_hpz_partition_size: expected a positive number of ranks (1: off), got {}",
                    plan.zeropp_hpz)};
  const bool zeropp = plan.zeropp_qwz || plan.zeropp_qgz || plan.zeropp_hpz > 1;
  if (zeropp && plan.zero != 3)
    return Error{fmt::format("{}: expected ZeRO stage 3 (ZeRO++ extends ZeRO-3), got ZeRO-{}",
                             plan.zeropp_qwz ? "--zero-quantized-weights (zero_quantized_weights)"
                             : plan.zeropp_qgz
                                 ? "--zero-quantized-gradients (zero_quantized_gradients)"
                                 : "--zero-hpz-partition-size (zero_hpz_partition_size)",
                             plan.zero)};
  if (zeropp && plan.framework == Framework::fsdp)
    return Error{
        "--zero-quantized-weights/--zero-hpz-partition-size/--zero-quantized-gradients: "
        "expected --framework deepspeed or none (ZeRO++ is DeepSpeed's), got fsdp"};
  if (plan.zeropp_hpz > 1) {
    // The data-parallel ranks of one node (as FSDP's HYBRID_SHARD counts them, builder.cpp).
    const int stride = plan.rank_order == RankOrder::tp_dp_pp ? plan.tp : plan.tp * plan.pp;
    const int per_node = stride >= gpus_per_node ? 1 : std::min(plan.dp, gpus_per_node / stride);
    if (plan.dp % plan.zeropp_hpz != 0 || plan.zeropp_hpz > per_node)
      return Error{fmt::format(
          "--zero-hpz-partition-size (zero_hpz_partition_size): expected a divisor of the "
          "data-parallel size {} of at most "
          "the {} data-parallel ranks on one node, got {}",
          plan.dp, per_node, plan.zeropp_hpz)};
  }
  if (plan.grad_compression == GradCompression::powersgd && plan.powersgd_rank < 1)
    return Error{
        fmt::format("--grad-compression: expected powersgd:rank=R with R >= 1, got rank {}",
                    plan.powersgd_rank)};
  if (plan.grad_compression != GradCompression::none) {
    if (plan.zero != 0)
      return Error{fmt::format(
          "--grad-compression: expected ZeRO stage 0 (PowerSGD and 1-bit Adam replace the DDP "
          "all-reduce), got ZeRO-{}",
          plan.zero)};
    CS_RETURN_IF_ERROR(check_compressed_wire(plan.grad_compression, plan.grad_comm_dtype));
  }
  return Status{};
}

Status check_compressed_wire(GradCompression c, const std::optional<DType>& wire) {
  if (c == GradCompression::none || !wire) return Status{};
  return Error{fmt::format(
      "--grad-comm-dtype: expected none with --grad-compression {} (the compressed gradient has "
      "its own wire format), got {}",
      to_string(c), to_string(*wire))};
}

DType compute_dtype(Precision p) {
  switch (p) {
    case Precision::fp32:
      return DType::fp32;
    case Precision::fp16:
      return DType::fp16;
    case Precision::bf16:
      return DType::bf16;
  }
  return DType::fp32;
}

void PlanInput::merge(const PlanInput& o) {
  take(dp, o.dp);
  take(tp, o.tp);
  take(pp, o.pp);
  take(virtual_stages, o.virtual_stages);
  take(zero, o.zero);
  take(sequence_parallel, o.sequence_parallel);
  take(overlap_grad_reduce, o.overlap_grad_reduce);
  take(overlap_param_gather, o.overlap_param_gather);
  take(micro_batch, o.micro_batch);
  take(global_batch, o.global_batch);
  take(grad_accum, o.grad_accum);
  take(local_batch, o.local_batch);
  take(amp_needs_fsdp, o.amp_needs_fsdp);
  take(precision, o.precision);
  take(recompute, o.recompute);
  take(schedule, o.schedule);
  take(ddp_bucket_mb, o.ddp_bucket_mb);
  take(rank_order, o.rank_order);
  take(zero_reduce_bucket, o.zero_reduce_bucket);
  take(zero_allgather_bucket, o.zero_allgather_bucket);
  take(gpus, o.gpus);
  take(nodes, o.nodes);
  take(seq_length, o.seq_length);
  take(decoder_seq_length, o.decoder_seq_length);
  take(framework, o.framework);
  take(zero3_prefetch_bucket, o.zero3_prefetch_bucket);
  take(zero3_max_live_params, o.zero3_max_live_params);
  take(zero3_max_reuse_distance, o.zero3_max_reuse_distance);
  take(zero3_persistence_threshold, o.zero3_persistence_threshold);
  take(contiguous_gradients, o.contiguous_gradients);
  take(fsdp_sharding, o.fsdp_sharding);
  take(fsdp_wrap, o.fsdp_wrap);
  take(fsdp_prefetch, o.fsdp_prefetch);
  take(fsdp_grad_sync, o.fsdp_grad_sync);
  take(fsdp_shard_size, o.fsdp_shard_size);
  take(fsdp_replicate_size, o.fsdp_replicate_size);
  take(fsdp_limit_all_gathers, o.fsdp_limit_all_gathers);
  take(use_distributed_optimizer, o.use_distributed_optimizer);
  take(pipe_partitioned, o.pipe_partitioned);
  take(grad_comm_dtype, o.grad_comm_dtype);
  take(zeropp_qwz, o.zeropp_qwz);
  take(zeropp_qgz, o.zeropp_qgz);
  take(zeropp_hpz, o.zeropp_hpz);
  take(grad_compression, o.grad_compression);
  take(powersgd_rank, o.powersgd_rank);
  take(attention, o.attention);
  take(attention_backend, o.attention_backend);
  take(fp8, o.fp8);
  take(fp8_param_gather, o.fp8_param_gather);
  take(tp_comm_overlap, o.tp_comm_overlap);
  take(tp_async_allreduce, o.tp_async_allreduce);
  take(cross_entropy, o.cross_entropy);
  take(cpu_offload_layers, o.cpu_offload_layers);
  take(offload_optimizer, o.offload_optimizer);
  take(offload_param, o.offload_param);
  take(fsdp_cpu_offload, o.fsdp_cpu_offload);
  take(optimizer_cpu_offload, o.optimizer_cpu_offload);
  take(optimizer_offload_fraction, o.optimizer_offload_fraction);
  take(overlap_cpu_optimizer_d2h_h2d, o.overlap_cpu_optimizer_d2h_h2d);
  take(mtp_layers, o.mtp_layers);
  take(recompute_modules, o.recompute_modules);
  take(recompute_block, o.recompute_block);
  take(recompute_num_layers, o.recompute_num_layers);
  take(recompute_layer_interval, o.recompute_layer_interval);
  take(precision_aware_optimizer, o.precision_aware_optimizer);
  take(exp_avg_dtype, o.exp_avg_dtype);
  take(exp_avg_sq_dtype, o.exp_avg_sq_dtype);
  take(main_params_dtype, o.main_params_dtype);
  take(main_grads_dtype, o.main_grads_dtype);
  take(stage_layers, o.stage_layers);
  take(pipeline_layout, o.pipeline_layout);
  take(first_stage_layers, o.first_stage_layers);
  take(last_stage_layers, o.last_stage_layers);
  take(account_embedding, o.account_embedding);
  take(account_loss, o.account_loss);
  take(layers_per_virtual_stage, o.layers_per_virtual_stage);
  take(cp, o.cp);
  take(cp_comm_type, o.cp_comm_type);
  if (!o.hierarchical_cp_sizes.empty()) hierarchical_cp_sizes = o.hierarchical_cp_sizes;
  take(ep, o.ep);
  take(expert_tp, o.expert_tp);
  take(moe_capacity_factor, o.moe_capacity_factor);
  take(moe_routing_imbalance, o.moe_routing_imbalance);
  take(moe_pad_to_capacity, o.moe_pad_to_capacity);
  take(moe_min_capacity, o.moe_min_capacity);
  take(moe_dispatcher, o.moe_dispatcher);
  take(overlap_moe_ep_comm, o.overlap_moe_ep_comm);
  take(delay_wgrad_compute, o.delay_wgrad_compute);
  take(moe_router_groups, o.moe_router_groups);
  take(moe_router_group_topk, o.moe_router_group_topk);
  take(moe_aux_loss_coeff, o.moe_aux_loss_coeff);
  take(deepspeed_version, o.deepspeed_version);
  take(zero3_host_s_per_rank_per_call, o.zero3_host_s_per_rank_per_call);
  take(zero3_nics_per_group, o.zero3_nics_per_group);
  take(nccl_algo, o.nccl_algo);
}

Result<PlanInput> plan_from_deepspeed(const nlohmann::json& j, const std::string& where,
                                      std::vector<std::string>* notes) {
  PlanInput p;
  auto note = [&](std::string text) {
    if (notes) notes->push_back(std::move(text));
  };
  FieldReader r(j, where);
  r.allow_unknown();
  read_or_auto(r, "train_batch_size", p.global_batch);
  read_or_auto(r, "train_micro_batch_size_per_gpu", p.micro_batch);
  read_or_auto(r, "gradient_accumulation_steps", p.grad_accum);
  // The legacy spelling `"zero_optimization": true|false` is stage 1 or 0 (DeepSpeed's
  // read_zero_config_deprecated; it was refused as "expected an object").
  const bool legacy =
      j.is_object() && j.contains("zero_optimization") && j.at("zero_optimization").is_boolean();
  if (legacy) p.zero = j.at("zero_optimization").get<bool>() ? 1 : 0;
  static const nlohmann::json kNoFields = nlohmann::json::object();
  auto z =
      legacy ? FieldReader(kNoFields, where, "zero_optimization") : r.object("zero_optimization");
  z.allow_unknown();
  read_or_auto(z, "stage", p.zero);
  read_or_auto(z, "reduce_bucket_size", p.zero_reduce_bucket);
  read_or_auto(z, "allgather_bucket_size", p.zero_allgather_bucket);
  read_or_auto(z, "overlap_comm", p.overlap_grad_reduce);
  // ZeRO-3's fetch and release rules (deepspeed/runtime/zero/config.py, DeepSpeedZeroConfig):
  // element counts, often written as 5e7.
  read_or_auto(z, "stage3_prefetch_bucket_size", p.zero3_prefetch_bucket);
  read_or_auto(z, "stage3_max_live_parameters", p.zero3_max_live_params);
  read_or_auto(z, "stage3_max_reuse_distance", p.zero3_max_reuse_distance);
  read_or_auto(z, "stage3_param_persistence_threshold", p.zero3_persistence_threshold);
  read_or_auto(z, "contiguous_gradients", p.contiguous_gradients);
  // ZeRO++ (deepspeed/runtime/zero/config.py): qwZ, hpZ, qgZ.
  read_or_auto(z, "zero_quantized_weights", p.zeropp_qwz);
  read_or_auto(z, "zero_hpz_partition_size", p.zeropp_hpz);
  read_or_auto(z, "zero_quantized_gradients", p.zeropp_qgz);
  // DeepSpeed declares it Field(1, ge=0): 0 and 1 both leave hpZ off.
  if (p.zeropp_hpz && *p.zeropp_hpz == 0) p.zeropp_hpz = 1;
  if (p.zeropp_hpz && *p.zeropp_hpz < 0)
    z.fail("zero_hpz_partition_size", "a non-negative number of ranks (0 or 1: off)",
           std::to_string(*p.zeropp_hpz));
  for (auto [key, val] :
       {std::pair{"reduce_bucket_size", p.zero_reduce_bucket},
        std::pair{"allgather_bucket_size", p.zero_allgather_bucket},
        std::pair{"stage3_prefetch_bucket_size", p.zero3_prefetch_bucket},
        std::pair{"stage3_max_live_parameters", p.zero3_max_live_params},
        std::pair{"stage3_max_reuse_distance", p.zero3_max_reuse_distance},
        std::pair{"stage3_param_persistence_threshold", p.zero3_persistence_threshold}})
    if (val && *val < 0) z.fail(key, "a non-negative element count", std::to_string(*val));
  if (p.zero && (*p.zero < 0 || *p.zero > 3))
    z.fail("stage", "0, 1, 2 or 3", std::to_string(*p.zero));
  bool fp16 = enabled(r, "fp16");
  // DeepSpeed's get_bfloat16_enabled reads "bf16", else its older spelling "bfloat16": the
  // first of them present decides (it was ignored: the plan ran in fp32, found by probing,
  // 2026-11-30; then either enabled counted, where a "bf16" section disabled wins).
  bool bf16 = j.is_object() && j.contains("bf16") ? enabled(r, "bf16") : enabled(r, "bfloat16");
  if (fp16 && bf16) r.fail("bf16.enabled", "not both fp16 and bf16 enabled", "true");
  // NVIDIA Apex AMP ("amp": {"enabled": true, "opt_level": ...}): fp16 mixed precision, which
  // DeepSpeed runs beside neither its own fp16/bf16 nor ZeRO (its engine asserts both); it was
  // read as fp32 (found by probing, 2026-12-02).
  const bool amp = enabled(r, "amp");
  if (amp && (fp16 || bf16))
    r.fail("amp.enabled", "false beside fp16 or bf16 enabled (DeepSpeed runs one of them)", "true");
  if (amp && p.zero.value_or(0) > 0)
    r.fail("amp.enabled", "false with ZeRO (DeepSpeed runs Apex AMP at ZeRO stage 0 only)",
           fmt::format("true with zero_optimization.stage {}", *p.zero));
  if (amp) {
    fp16 = true;
    note(
        "amp.enabled (NVIDIA Apex AMP): priced as fp16 mixed precision; its opt_level's casts "
        "are not priced");
  }
  // DeepSpeed trains in fp32 unless fp16 or bf16 is enabled. "auto" (Hugging Face's Trainer
  // fills it from its --fp16/--bf16) decides nothing: the precision is left to --precision and
  // its default, with a note (it was fp32, in silence: a bf16 run priced twice as slow, found by
  // probing, 2026-12-02).
  auto section_auto = [&](const char* key) {
    const auto it = j.is_object() ? j.find(key) : j.end();
    return it != j.end() && it->is_object() && it->contains("enabled") &&
           it->at("enabled").is_string() && it->at("enabled").get<std::string>() == "auto";
  };
  const bool precision_auto =
      !fp16 && !bf16 &&
      (section_auto("fp16") ||
       section_auto(j.is_object() && j.contains("bf16") ? "bf16" : "bfloat16"));
  if (precision_auto)
    note(
        "fp16.enabled/bf16.enabled \"auto\" (Hugging Face's Trainer sets them from its --fp16 or "
        "--bf16): the precision is --precision's (bf16 unless given)");
  else
    p.precision = fp16 ? Precision::fp16 : bf16 ? Precision::bf16 : Precision::fp32;
  // deepspeed/runtime/config.py get_communication_data_type: the value lower-cased, then fp32,
  // fp16 or bf16, anything else a ValueError (bfp16 and float32 were accepted here).
  std::optional<std::string> comm_type;
  read_or_auto(r, "communication_data_type", comm_type);
  if (comm_type) {
    std::string l = *comm_type;
    for (char& c : l) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (l == "fp32" || l == "fp16" || l == "bf16")
      p.grad_comm_dtype = *grad_comm_dtype_from_name(l);
    else
      r.fail("communication_data_type", "one of fp32|fp16|bf16", "'" + *comm_type + "'");
  }
  for (auto [key, val] : {std::pair{"train_batch_size", p.global_batch},
                          std::pair{"train_micro_batch_size_per_gpu", p.micro_batch},
                          std::pair{"gradient_accumulation_steps", p.grad_accum}})
    if (val && *val <= 0) r.fail(key, "a positive integer", std::to_string(*val));
  // PipelineEngine's tensor partitioning over TP (deepspeed/runtime/config.py, pipeline
  // section: pipe_partitioned and grad_partitioned, both true by default). commscope models
  // both directions partitioned or neither.
  auto pipe = r.object("pipeline");
  pipe.allow_unknown();
  std::optional<bool> act, grad;
  read_or_auto(pipe, "pipe_partitioned", act);
  read_or_auto(pipe, "grad_partitioned", grad);
  if (act.value_or(true) != grad.value_or(true))
    pipe.fail("grad_partitioned",
              fmt::format("the same as pipe_partitioned ({})", act.value_or(true)),
              fmt::format("{}", grad.value_or(true)));
  if (act || grad) p.pipe_partitioned = act.value_or(true) && grad.value_or(true);
  // The optimizer: DeepSpeed lower-cases its type and compares it with its own names
  // (deepspeed/runtime/config.py, DEEPSPEED_OPTIMIZERS). Its 1-bit optimizers are commscope's
  // --grad-compression onebit; the others (Adam, AdamW, Lamb, a client's own) are priced as Adam.
  auto opt = r.object("optimizer");
  opt.allow_unknown();
  std::optional<std::string> type;
  read_or_auto(opt, "type", type);
  if (type) {
    std::string l = *type;
    for (char& c : l) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (l == "onebitadam" || l == "onebitlamb" || l == "zerooneadam") {
      // DeepSpeed's engine asserts it ("1bit-Adam is not compatible with ZeRO")
      if (p.zero.value_or(0) > 0)
        opt.fail("type",
                 fmt::format("ZeRO stage 0 beside {} (DeepSpeed runs its 1-bit "
                             "optimizers without ZeRO)",
                             *type),
                 fmt::format("zero_optimization.stage {}", *p.zero));
      p.grad_compression = GradCompression::onebit;
      note(fmt::format(
          "optimizer.type {}: the gradients' all-reduce is priced as 1-bit Adam's compressed "
          "stage (--grad-compression onebit){}; the uncompressed warm-up before freeze_step is "
          "not",
          *type,
          l == "onebitlamb"    ? " (1-bit LAMB's momentum signs and scales)"
          : l == "zerooneadam" ? " every step (0/1 Adam's local steps, which skip it, are not)"
                               : ""));
    }
  }
  // Where the optimizer states, parameters or checkpointed activations live off the GPU
  // (deepspeed/runtime/zero/offload_config.py, activation_checkpointing/config.py). The
  // optimizer and, under ZeRO-3, the parameters on the host (ZeRO-Offload) are modelled; NVMe
  // (ZeRO-Infinity) is said, not guessed at.
  for (auto [key, legacy_key, what] :
       {std::tuple{"offload_optimizer", "cpu_offload", "the optimizer states and step"},
        std::tuple{"offload_param", "cpu_offload_params", "the parameters"}}) {
    auto off = z.object(key);
    off.allow_unknown();
    std::optional<std::string> device;
    read_or_auto(off, "device", device);
    std::optional<bool> legacy_on;  // DeepSpeed's deprecated spelling: the host
    read_or_auto(z, legacy_key, legacy_on);
    CS_RETURN_IF_ERROR(off.status());
    std::string field;  // the setting as written, where it moves them off the GPU
    if (device == "cpu" || device == "nvme")
      field = fmt::format("{}.device {}", key, *device);
    else if (!z.raw().contains(key) && legacy_on.value_or(false))
      field = fmt::format("{} true", legacy_key);
    const bool optimizer = std::string_view(key) == "offload_optimizer";
    const bool host = device == "cpu" || field == fmt::format("{} true", legacy_key);
    if (host && optimizer) {
      // DeepSpeed offloads only under ZeRO (stage 0 leaves the optimizer alone).
      if (p.zero.value_or(0) >= 1)
        p.offload_optimizer = true;
      else
        note(fmt::format("zero_optimization.{}: no effect without ZeRO (stage 0)", field));
    } else if (host) {
      // Only stage 3's optimizer reads offload_param; stages 1-2 ignore it in silence.
      if (p.zero.value_or(0) == 3)
        p.offload_param = true;
      else
        note(fmt::format("zero_optimization.{}: no effect below ZeRO-3 (stage {})", field,
                         p.zero.value_or(0)));
    } else if (!field.empty())
      note(fmt::format(
          "zero_optimization.{}: {} off the GPU ({}) are not modelled: commscope keeps them on "
          "the GPU, in its memory and in its time",
          field, what, device == "nvme" ? "ZeRO-Infinity" : "ZeRO-Offload"));
  }
  auto ac = r.object("activation_checkpointing");
  ac.allow_unknown();
  for (auto [key, what] :
       {std::pair{"partition_activations",
                  "checkpointed activations split over the model-"
                  "parallel ranks"},
        std::pair{"cpu_checkpointing", "checkpointed activations kept on the host"}}) {
    std::optional<bool> on;
    read_or_auto(ac, key, on);
    if (on.value_or(false))
      note(
          fmt::format("activation_checkpointing.{}: {} are not modelled (the checkpointing "
                      "itself is --recompute-granularity's)",
                      key, what));
  }
  CS_RETURN_IF_ERROR(ac.status());
  CS_RETURN_IF_ERROR(opt.status());
  CS_RETURN_IF_ERROR(z.status());
  CS_RETURN_IF_ERROR(pipe.status());
  CS_RETURN_IF_ERROR(r.status());
  return p;
}

Result<PlanInput> load_deepspeed_config(const std::string& path, std::vector<std::string>* notes) {
  CS_ASSIGN_OR_RETURN(auto j, read_json_file(path));
  return plan_from_deepspeed(j, path, notes);
}

nlohmann::json to_json(const ParallelPlan& p) {
  nlohmann::json j = {{"dp", p.dp},
                      {"tp", p.tp},
                      {"pp", p.pp},
                      {"virtual_stages", p.virtual_stages},
                      {"sequence_parallel", p.sequence_parallel},
                      {"zero", p.zero},
                      {"micro_batch", p.micro_batch},
                      {"global_batch", p.global_batch},
                      {"grad_accum", p.grad_accum},
                      {"precision", to_string(p.precision)},
                      {"recompute", to_string(p.recompute)},
                      {"schedule", to_string(p.schedule)},
                      {"ddp_bucket_bytes", p.ddp_bucket.value()},
                      {"overlap_grad_reduce", p.overlap_grad_reduce},
                      {"overlap_param_gather", p.overlap_param_gather},
                      {"rank_order", to_string(p.rank_order)}};
  // Several pipeline schedules an iteration (torchtitan under PP) only where there are.
  if (p.pipeline_rounds > 1) j["pipeline_schedules"] = p.pipeline_rounds;
  // Compressed communication only when chosen: the default plan's JSON is as before.
  if (p.grad_comm_dtype) j["grad_comm_dtype"] = to_string(*p.grad_comm_dtype);
  if (p.zeropp_qwz) j["zero_quantized_weights"] = true;
  if (p.zeropp_hpz > 1) j["zero_hpz_partition_size"] = p.zeropp_hpz;
  if (p.zeropp_qgz) j["zero_quantized_gradients"] = true;
  if (p.grad_compression != GradCompression::none) {
    j["grad_compression"] = to_string(p.grad_compression);
    if (p.grad_compression == GradCompression::powersgd) j["powersgd_rank"] = p.powersgd_rank;
  }
  // Context and expert parallelism only when used: the default plan's JSON is as before.
  if (p.cp > 1) j["context_parallel_size"] = p.cp;
  if (p.ep > 1 || p.expert_tp != p.tp) {
    j["expert_model_parallel_size"] = p.ep;
    j["expert_tensor_parallel_size"] = p.expert_tp;
  }
  if (p.moe_capacity_factor > 0) j["moe_expert_capacity_factor"] = p.moe_capacity_factor;
  if (p.moe_capacity_factor > 0 && p.moe_min_capacity > 0)
    j["moe_min_capacity"] = p.moe_min_capacity;
  if (p.moe_routing_imbalance != 1) j["moe_routing_imbalance"] = p.moe_routing_imbalance;
  if (p.moe_pad_to_capacity) j["moe_pad_expert_input_to_capacity"] = true;
  if (p.ep > 1 && p.moe_dispatcher != MoeDispatcher::alltoall)
    j["moe_token_dispatcher_type"] = to_string(p.moe_dispatcher);
  if (p.moe_router_groups > 0) {
    j["moe_router_num_groups"] = p.moe_router_groups;
    j["moe_router_group_topk"] = p.moe_router_group_topk;
  }
  if (p.moe_aux_loss_coeff > 0) j["moe_aux_loss_coeff"] = p.moe_aux_loss_coeff;
  // The framework and its options only when one is chosen: the default plan's JSON is as before.
  switch (p.framework) {
    case Framework::none:
      break;
    case Framework::deepspeed:
      j["framework"] = to_string(p.framework);
      j["reduce_bucket_size"] = p.zero_reduce_bucket;
      j["allgather_bucket_size"] = p.zero_allgather_bucket;
      j["stage3_prefetch_bucket_size"] = p.zero3_prefetch_bucket;
      j["stage3_max_live_parameters"] = p.zero3_max_live_params;
      j["stage3_max_reuse_distance"] = p.zero3_max_reuse_distance;
      j["stage3_param_persistence_threshold"] = p.zero3_persistence_threshold;
      j["contiguous_gradients"] = p.contiguous_gradients;
      if (!p.deepspeed_version.empty()) {
        j["deepspeed_version"] = p.deepspeed_version;
        j["zero3_sync_gathers"] = p.zero3_sync_gathers;
        j["zero3_per_param_calls"] = p.zero3_per_param_calls;
        j["zero3_double_reduce_bucket"] = p.zero3_double_reduce_bucket;
        j["zero3_host_s_per_rank_per_call"] = p.zero3_host_s_per_rank_per_call;
        j["zero3_nics_per_group"] = p.zero3_nics_per_group;
      }
      break;
    case Framework::fsdp:
      j["framework"] = to_string(p.framework);
      j["fsdp_sharding"] = to_string(p.fsdp_sharding);
      j["fsdp_wrap"] = to_string(p.fsdp_wrap);
      j["fsdp_prefetch"] = to_string(p.fsdp_prefetch);
      j["fsdp_limit_all_gathers"] = p.fsdp_limit_all_gathers;
      j["fsdp_grad_sync"] = to_string(p.fsdp_grad_sync);
      if (p.fsdp_shard_size > 0) j["fsdp_shard_size"] = p.fsdp_shard_size;
      break;
    case Framework::megatron:
      j["framework"] = to_string(p.framework);
      j["use_distributed_optimizer"] = p.use_distributed_optimizer;
      j["ddp_bucket_params"] = p.megatron_bucket;
      break;
  }
  // Modern-training fields only when they differ from the defaults (the JSON stays as before).
  if (p.attention != AttentionKernel::standard) {
    j["attention"] = to_string(p.attention);
    j["attention_backend"] = to_string(p.attention_backend);
  }
  if (p.fp8) j["fp8"] = true;
  if (p.fp8_param_gather) j["fp8_param_gather"] = true;
  if (p.tp_comm_overlap) j["tp_comm_overlap"] = true;
  if (p.tp_async_allreduce) j["async_tensor_model_parallel_allreduce"] = true;
  if (p.cross_entropy == CrossEntropy::fused) j["cross_entropy_loss_fusion"] = true;
  if (p.cross_entropy == CrossEntropy::torch || p.cross_entropy == CrossEntropy::flash_attn)
    j["cross_entropy"] = to_string(p.cross_entropy);
  if (p.cp > 1 && p.cp_comm_type != CpCommType::p2p) j["cp_comm_type"] = to_string(p.cp_comm_type);
  if (p.cp > 1 && p.cp_comm_type == CpCommType::a2a_p2p)
    j["hierarchical_context_parallel_sizes"] = {p.cp_a2a, p.cp_ring()};
  if (p.pipe_partitioned) j["pipe_partitioned"] = true;
  if (p.cpu_offload_layers > 0) j["cpu_offloading_num_layers"] = p.cpu_offload_layers;
  if (p.offload_optimizer) j["offload_optimizer"] = "cpu";
  if (p.offload_param) j["offload_param"] = "cpu";
  if (p.fsdp_cpu_offload) j["fsdp_cpu_offload"] = true;
  if (p.optimizer_cpu_offload) {
    j["optimizer_cpu_offload"] = true;
    j["optimizer_offload_fraction"] = p.optimizer_offload_fraction;
    j["overlap_cpu_optimizer_d2h_h2d"] = p.overlap_cpu_optimizer_d2h_h2d;
  }
  if (p.mtp_layers > 0) j["mtp_num_layers"] = p.mtp_layers;
  if (p.overlap_moe_ep_comm) j["overlap_moe_expert_parallel_comm"] = true;
  if (p.delay_wgrad_compute) j["delay_wgrad_compute"] = true;
  if (p.precision_aware_optimizer) {
    j["use_precision_aware_optimizer"] = true;
    j["exp_avg_dtype"] = to_string(p.exp_avg_dtype);
    j["exp_avg_sq_dtype"] = to_string(p.exp_avg_sq_dtype);
    j["main_params_dtype"] = to_string(p.main_params_dtype);
    j["main_grads_dtype"] = to_string(p.main_grads_dtype);
  }
  if (p.recompute == Recompute::selective && p.recompute_modules != recompute_module::core_attn)
    j["recompute_modules"] = recompute_modules_string(p.recompute_modules);
  if (p.recompute == Recompute::full && p.recompute_block_layers > 0) {
    j["recompute_method"] = "block";
    j["recompute_num_layers"] = p.recompute_block_layers;
  } else if (p.recompute == Recompute::full && p.recompute_uniform_layers > 1) {
    j["recompute_method"] = "uniform";
    j["recompute_num_layers"] = p.recompute_uniform_layers;
  }
  if (!p.stage_layers.empty()) j["stage_layers"] = p.stage_layers;
  return j;
}

}  // namespace commscope

namespace commscope {

double ParallelPlan::optimizer_state_bytes() const {
  if (precision == Precision::fp32) return 8;  // fp32 Adam: two fp32 moments, no master copy
  if (!precision_aware_optimizer) return 12;   // ZeRO paper: fp32 master weights and moments
  // TE FusedAdam keeps only the 16 low bits of an fp32 master weight over a bf16 parameter.
  const double main = keeps_param_remainders() ? 2.0 : dtype_bytes(main_params_dtype);
  return main + dtype_bytes(exp_avg_dtype) + dtype_bytes(exp_avg_sq_dtype);
}
double ParallelPlan::adam_step_bytes() const {
  // Read and write every state, read the gradient, write the 16-bit weight: 2 x 12 + 2 + 2 = 28
  // without the precision-aware optimizer, as commscope has always counted (fp32 too). Megatron-LM
  // reads its gradients from its buffer, in the type it reduced them in (fp32 under bf16).
  const double grad =
      framework == Framework::megatron ? dtype_bytes(megatron_grad_buffer_dtype(*this)) : 2.0;
  if (!precision_aware_optimizer) return 24 + grad + 2.0;
  return 2.0 * optimizer_state_bytes() + grad + 2.0;
}

namespace {
constexpr std::pair<std::string_view, std::uint8_t> kRecomputeModules[] = {
    {"core_attn", recompute_module::core_attn},
    {"mla_up_proj", recompute_module::mla_up_proj},
    {"mlp", recompute_module::mlp},
    {"moe_act", recompute_module::moe_act},
    {"layernorm", recompute_module::layernorm}};
// Megatron-Core's other choices: known, not modelled.
constexpr std::string_view kUnmodelledRecomputeModules[] = {
    "moe", "shared_experts", "gdn_norm_out", "gdp_in_proj", "gdp_qkv", "mhc"};
}  // namespace

Result<std::uint8_t> parse_recompute_modules(std::string_view names) {
  std::uint8_t bits = 0;
  std::size_t i = 0;
  while (i < names.size()) {
    if (names[i] == ',' || names[i] == ' ') {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < names.size() && names[j] != ',' && names[j] != ' ') ++j;
    const std::string_view name = names.substr(i, j - i);
    i = j;
    bool known = false;
    for (const auto& [n, bit] : kRecomputeModules)
      if (n == name) {
        bits = static_cast<std::uint8_t>(bits | bit);
        known = true;
      }
    if (known) continue;
    const std::string shown =
        name.size() > 40 ? std::string(name.substr(0, 40)) + "..." : std::string(name);
    for (std::string_view n : kUnmodelledRecomputeModules)
      if (n == name)
        return Error{fmt::format(
            "expected core_attn, mla_up_proj, mlp, moe_act or layernorm (Megatron-Core's '{}' is "
            "not modelled), got '{}'",
            shown, shown)};
    return Error{fmt::format(
        "expected core_attn, mla_up_proj, mlp, moe_act or layernorm (Megatron-Core's names), "
        "got '{}'",
        shown)};
  }
  if (bits == 0) return Error{"expected at least one module name, got none"};
  return bits;
}

std::string recompute_modules_string(std::uint8_t modules) {
  std::string out;
  for (const auto& [n, bit] : kRecomputeModules)
    if (modules & bit) out += fmt::format("{}{}", out.empty() ? "" : ", ", n);
  return out.empty() ? "none" : out;
}

Result<PipelineLayout> parse_pipeline_layout(std::string_view layout) {
  auto bad = [&](std::string_view what) -> Error {
    return Error{fmt::format(
        "expected {}, got '{}'", what,
        layout.size() > 80 ? std::string(layout.substr(0, 80)) + "..." : std::string(layout))};
  };
  // Pieces: a run of layer and stage characters, repeated n times (a parenthesised group or a
  // single character followed by *n; otherwise once). Sizes are counted before unrolling.
  struct Piece {
    std::string text;
    std::int64_t times = 1;
  };
  std::vector<Piece> pieces;
  std::int64_t total = 0;
  auto is_layer = [](char c) { return c == 'E' || c == 't' || c == 'L' || c == 'm' || c == '|'; };
  auto count = [&](std::size_t& i) -> std::optional<std::int64_t> {
    // after '*': decimal digits, a positive count within the layer limit
    std::int64_t n = 0;
    const std::size_t from = i;
    while (i < layout.size() && std::isdigit(static_cast<unsigned char>(layout[i]))) {
      n = n * 10 + (layout[i] - '0');
      if (n > limits::kMaxLayers + 1) return std::nullopt;
      ++i;
    }
    if (i == from || n < 1) return std::nullopt;
    return n;
  };
  const std::int64_t cap = limits::kMaxLayers + limits::kMaxLayers + 2;  // layers and '|'s
  for (std::size_t i = 0; i < layout.size();) {
    const char c = layout[i];
    if (c == ',' || c == ' ') {
      ++i;
      continue;
    }
    Piece piece;
    if (c == '(') {
      const std::size_t close = layout.find(')', i + 1);
      if (close == std::string_view::npos) return bad("a ')' closing every '('");
      // Inside: layers, '|' and x*n (Megatron unrolls the group, then every x*n).
      for (std::size_t k = i + 1; k < close;) {
        const char g = layout[k];
        if (g == ',' || g == ' ') {
          ++k;
          continue;
        }
        if (!is_layer(g))
          return bad(
              "layers E, t, L, m, '|' and x*n inside parentheses (Megatron's layouts do "
              "not nest)");
        std::int64_t n = 1;
        ++k;
        if (k < close && layout[k] == '*') {
          ++k;
          auto reps = count(k);
          if (!reps || k > close)
            return bad(fmt::format("a repeat count from 1 to {}", limits::kMaxLayers + 1));
          n = *reps;
        }
        if (total + static_cast<std::int64_t>(piece.text.size()) + n > cap)
          return bad(
              fmt::format("at most {} layers once the repeats are unrolled", limits::kMaxLayers));
        piece.text.append(static_cast<std::size_t>(n), g);
      }
      if (piece.text.empty()) return bad("a non-empty group in parentheses");
      i = close + 1;
      if (i >= layout.size() || layout[i] != '*') return bad("'*' and a count after ')'");
      ++i;
      auto n = count(i);
      if (!n) return bad(fmt::format("a repeat count from 1 to {}", limits::kMaxLayers + 1));
      piece.times = *n;
    } else if (is_layer(c)) {
      piece.text = std::string(1, c);
      ++i;
      if (i < layout.size() && layout[i] == '*') {
        ++i;
        auto n = count(i);
        if (!n) return bad(fmt::format("a repeat count from 1 to {}", limits::kMaxLayers + 1));
        piece.times = *n;
      }
    } else {
      return bad(
          "a layout of E (embedding), t (transformer layer), L (loss), m (MTP), '|' "
          "between stages, (...)*n and x*n");
    }
    total += static_cast<std::int64_t>(piece.text.size()) * piece.times;
    if (total > cap)
      return bad(
          fmt::format("at most {} layers once the repeats are unrolled", limits::kMaxLayers));
    pieces.push_back(std::move(piece));
  }
  std::vector<int> stages{0};
  std::size_t mtp_stage = 0;  // stages.size() at the first m: 1 + its stage
  int embeddings = 0, losses = 0, mtp = 0;
  bool first_layer = true, after_loss = false, embedding_not_first = false;
  for (const Piece& piece : pieces)
    for (std::int64_t r = 0; r < piece.times; ++r)
      for (char c : piece.text) {
        if (c == '|') {
          if (static_cast<std::int64_t>(stages.size()) >= limits::kMaxPipelineTasks)
            return bad(fmt::format("at most {} stages", limits::kMaxPipelineTasks));
          stages.push_back(0);
          continue;
        }
        if (after_loss) return bad("the loss (L) as the last layer");
        if (c == 'E') {
          ++embeddings;
          embedding_not_first |= !first_layer;
        } else if (c == 'L') {
          ++losses;
          after_loss = true;
        } else if (c == 'm') {
          ++mtp;
          if (mtp == 1) mtp_stage = stages.size();
        } else {
          ++stages.back();
        }
        first_layer = false;
      }
  if (embeddings != 1 || embedding_not_first)
    return bad("the embedding (E) exactly once, as the first layer");
  if (losses != 1) return bad("the loss (L) exactly once, as the last layer");
  if (mtp > 0 && mtp_stage != stages.size())
    return bad(
        "multi-token-prediction layers (m) in the last stage, with the loss (where commscope "
        "models them, Megatron's default)");
  return PipelineLayout{std::move(stages), mtp};
}

}  // namespace commscope
