// Gathering and printing a workload's description.
#include "commscope/report/describe.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commscope/cost/collective.h"
#include "commscope/spec/framework_config.h"
#include "commscope/spec/placement.h"

namespace commscope {

Description describe(const Workload& w) {
  Description d;
  const Scenario& sc = w.scenario;
  d.params = count_params(sc.model);
  d.flops = iteration_flops(w);
  d.warnings = sc.warnings;
  for (const Role& r : w.roles) {
    StageDescription s;
    s.stage = r.stage;
    s.params = r.params;
    s.memory = memory_per_rank(w, r);
    s.fits = s.memory.total() <= sc.system.gpu.memory;
    s.comm = comm_volume(w, r);
    if (sc.plan.framework != Framework::none) s.pattern = comm_pattern(w, r);
    d.max_memory = std::max(d.max_memory, s.memory.total());
    d.max_params = std::max(d.max_params, s.params);
    d.fits = d.fits && s.fits;
    d.stages.push_back(std::move(s));
  }
  if (!offload_fits_host(w)) {
    d.fits = false;
    d.warnings.push_back(fmt::format(
        "does not fit: offload holds {:.1f} GiB of {} in each node's host memory, {} has {:.1f} "
        "GiB (on more nodes each holds less)",
        units::to_gib(offload_host_bytes_per_node(w)), offload_host_contents(sc.plan),
        sc.system.name, units::to_gib(sc.system.node.host_memory)));
  } else if (!d.fits)
    d.warnings.push_back(fmt::format(
        "does not fit: {} per rank needed at the fullest stage, {} has {} per GPU (try ZeRO, TP, "
        "PP, "
        "recompute or a smaller micro-batch)",
        human_bytes(d.max_memory), sc.system.gpu.name, human_bytes(sc.system.gpu.memory)));
  return d;
}

namespace {

// Stages with identical rows print once, as a range "0-62".
std::string stage_ranges(const std::vector<int>& stages) {
  std::string out;
  for (std::size_t i = 0; i < stages.size();) {
    std::size_t j = i;
    while (j + 1 < stages.size() && stages[j + 1] == stages[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += j == i ? std::to_string(stages[i]) : fmt::format("{}-{}", stages[i], stages[j]);
    i = j + 1;
  }
  return out;
}

Table memory_table(const Description& d, bool human) {
  Table t;
  t.header = {"stage",       "params",  "weights", "gradients", "optimizer",
              "activations", "buffers", "total",   "fits"};
  t.right = {false, true, true, true, true, true, true, true, false};
  auto bytes = [&](Bytes b) { return human ? human_bytes(b) : fmt::format("{:.0f}", b.value()); };
  std::map<std::vector<std::string>, std::vector<int>> merged;
  std::vector<std::vector<std::string>> order;
  for (const auto& s : d.stages) {
    std::vector<std::string> row = {with_commas(s.params),       bytes(s.memory.weights),
                                    bytes(s.memory.gradients),   bytes(s.memory.optimizer),
                                    bytes(s.memory.activations), bytes(s.memory.comm_buffers),
                                    bytes(s.memory.total()),     s.fits ? "yes" : "NO"};
    if (!merged.count(row)) order.push_back(row);
    merged[row].push_back(s.stage);
  }
  for (auto& row : order) {
    std::vector<std::string> r = {stage_ranges(merged[row])};
    r.insert(r.end(), row.begin(), row.end());
    t.add(std::move(r));
  }
  // A deep pipeline in a terminal: the first stages, the last, and where to find the rest.
  if (human && t.rows.size() > 8) {
    std::size_t hidden = t.rows.size() - 5;
    t.rows.erase(t.rows.begin() + 3, t.rows.end() - 2);
    t.rows.insert(t.rows.begin() + 3, {fmt::format("({} more)", hidden)});
  }
  return t;
}

// Rows keyed by their content, each printed once with the stages that have it ("0-62").
class MergedRows {
 public:
  void add(int stage, std::vector<std::string> row) {
    if (!stages_.count(row)) order_.push_back(row);
    stages_[row].push_back(stage);
  }
  void into(Table& t) {
    for (auto& row : order_) {
      std::vector<std::string> r = {stage_ranges(stages_[row])};
      r.insert(r.end(), row.begin(), row.end());
      t.add(std::move(r));
    }
  }

 private:
  std::map<std::vector<std::string>, std::vector<int>> stages_;
  std::vector<std::vector<std::string>> order_;
};

// A collective's type; float8+bfloat16 for a parameter all-gather whose GEMM weights travel in
// FP8 and the rest in 16 bits (--fp8-param-gather).
std::string dtype_label(DType dtype, bool fp8_weights) {
  return fp8_weights ? fmt::format("{}+{}", to_string(DType::fp8), to_string(dtype))
                     : std::string(to_string(dtype));
}

Table comm_table(const Description& d, bool human) {
  Table t;
  t.header = {"stage", "group", "collective", "ranks",
              "dtype", "calls", "bytes/rank", "wire bytes/rank"};
  t.right = {false, false, false, true, false, true, true, true};
  auto bytes = [&](double b) { return human ? human_bytes(Bytes(b)) : fmt::format("{:.0f}", b); };
  MergedRows merged;
  for (const auto& s : d.stages)
    for (const auto& c : s.comm)
      merged.add(s.stage, {std::string(to_string(c.group)), std::string(to_string(c.collective)),
                           std::to_string(c.group_size), dtype_label(c.dtype, c.fp8_weights),
                           with_commas(c.calls), bytes(c.bytes), bytes(c.wire_bytes)});
  merged.into(t);
  return t;
}

// The framework's collective pattern, stage by stage (stages with identical rows merged).
Table pattern_table(const Description& d, bool human) {
  Table t;
  t.header = {"stage",  "collective op", "collective", "group",      "ranks",     "dtype",
              "issued", "every",         "calls",      "bytes/call", "bytes/rank"};
  t.right = {false, false, false, false, true, false, false, false, true, true, true};
  auto bytes = [&](double b) { return human ? human_bytes(Bytes(b)) : fmt::format("{:.0f}", b); };
  MergedRows merged;
  for (const auto& s : d.stages)
    for (const auto& c : s.pattern) {
      std::string group(to_string(c.group));
      if (c.span == GroupSpan::nodes)
        group +=
            fmt::format(" ({} nodes x {})", c.group_size / std::max(1, c.per_node), c.per_node);
      else if (c.span != GroupSpan::whole)
        group += fmt::format(" ({})", to_string(c.span));
      std::string per_call = c.min_call == c.max_call
                                 ? bytes(c.max_call)
                                 : bytes(c.min_call) + " - " + bytes(c.max_call);
      // A call of several messages (the CP ring's steps, priced each with its latency).
      if (human && c.messages > 1) per_call += fmt::format(" in {} messages", c.messages);
      merged.add(s.stage, {std::string(c.name), std::string(to_string(c.collective)), group,
                           std::to_string(c.group_size), dtype_label(c.dtype, c.fp8_weights),
                           std::string(to_string(c.phase)), std::string(to_string(c.every)),
                           with_commas(c.calls), per_call, bytes(c.bytes)});
    }
  merged.into(t);
  return t;
}

// The flex dispatcher's copies of a token on the headline (spec/placement.h), with the routing
// groups when limited: " (flex dispatcher: 1.00 network and 5.79 NVLink copies a token)".
std::string flex_note(const Scenario& sc) {
  const ParallelPlan& p = sc.plan;
  if (p.moe_dispatcher != MoeDispatcher::flex) return "";
  const ForwardedCopies c = forwarded_copies(sc, place_group(sc, CommGroup::expert));
  return fmt::format(
      " (flex dispatcher: {:.2f} network and {:.2f} NVLink copies a token{})", c.network, c.nvlink,
      p.moe_router_groups > 0 ? fmt::format(", its experts from {} of {} groups",
                                            p.moe_router_group_topk, p.moe_router_groups)
                              : "");
}

std::string headline(const Workload& w) {
  const Scenario& sc = w.scenario;
  const ParallelPlan& p = sc.plan;
  // On part of each node the job drives its GPUs' share of the node's NICs (cost/collective.h).
  const int nics = job_nics_per_node(sc);
  std::string out = fmt::format(
      "{} on {}: {} node{} x {} GPU{} = {} x {}; network {} ({} NIC{} per node{} at {:g} Gbps)\n",
      sc.model.name, sc.system.name, sc.nodes, sc.nodes == 1 ? "" : "s", sc.gpus_per_node,
      sc.gpus_per_node == 1 ? "" : "s", sc.gpus(), sc.system.gpu.name, sc.network.name, nics,
      nics == 1 ? "" : "s",
      nics != sc.system.nics.count
          ? fmt::format(", the job's GPUs' share of the node's {}", sc.system.nics.count)
          : "",
      units::to_gbit_per_s(sc.network.line_rate));
  out += fmt::format(
      "plan: DP {} x TP {}{}{} x PP {}{}{}, ZeRO-{}; micro-batch {}, global batch {} ({} "
      "micro-batch{} per iteration{}); {}, recompute {}, schedule {}\n",
      p.dp, p.tp, p.sequence_parallel ? " (SP)" : "",
      // Context and expert parallelism, only when used (the line stays as before otherwise).
      p.cp > 1 ? fmt::format(" x CP {} ({})", p.cp, cp_form_text(p.cp_comm_type, p.cp, p.cp_a2a))
               : "",
      p.pp, p.virtual_stages > 1 ? fmt::format(" (x{} virtual)", p.virtual_stages) : "",
      p.ep > 1 ? fmt::format(", EP {}{}", p.ep, flex_note(sc)) : "", p.zero, p.micro_batch,
      p.global_batch, p.grad_accum, p.grad_accum == 1 ? "" : "es",
      // torchtitan under PP: one pipeline schedule per accumulation step
      p.pipeline_rounds > 1 ? fmt::format(", as {} pipeline schedules of {}", p.pipeline_rounds,
                                          p.microbatches_per_round())
                            : "",
      // (with --fp8 the GEMMs run in FP8 beside the precision: the line said only "fp16")
      p.fp8 ? fmt::format("{} with FP8 GEMMs{}", to_string(p.precision),
                          p.fp8_param_gather ? " and FP8 weights" : "")
            : std::string(to_string(p.precision)),
      p.recompute == Recompute::selective && p.recompute_modules != recompute_module::core_attn
          ? fmt::format("selective ({})", recompute_modules_string(p.recompute_modules))
      : p.recompute == Recompute::full && p.recompute_block_layers > 0
          ? fmt::format("full (block: the first {} blocks of each chunk)", p.recompute_block_layers)
      : p.recompute == Recompute::full && p.recompute_uniform_layers > 1
          ? fmt::format("full (uniform: groups of {} blocks, one input kept a group)",
                        p.recompute_uniform_layers)
      : p.recompute == Recompute::op
          ? std::string("op (torchtitan: every other matrix product's output and attention's "
                        "kept, the rest replayed)")
          : std::string(to_string(p.recompute)),
      to_string(p.schedule));
  // Modern training (issue 15), only when a plan uses it: the attention kernel, FP8, the
  // layers of each (virtual) stage, repeats folded ("7, 8 x14, 7").
  const bool async_ar = p.tp_async_allreduce && !p.sequence_parallel;
  if (p.attention != AttentionKernel::standard || p.fp8 || p.tp_comm_overlap ||
      p.cross_entropy != CrossEntropy::vocab_parallel || async_ar || !p.stage_layers.empty() ||
      p.mtp_layers > 0) {
    std::string stages;
    for (std::size_t i = 0; i < p.stage_layers.size();) {
      std::size_t j = i;
      while (j < p.stage_layers.size() && p.stage_layers[j] == p.stage_layers[i]) ++j;
      // a run of equal stages as plan's layers column writes it: (stages)x(layers)
      stages += fmt::format("{}{}{}", i ? ", " : "", j - i > 1 ? fmt::format("{}x", j - i) : "",
                            p.stage_layers[i]);
      i = j;
    }
    double mtp_params = 0;  // the plan's depths, which may differ from the model's
    for (int d = 0; d < p.mtp_layers; ++d)
      mtp_params += static_cast<double>(mtp_depth_params(sc.model, d));
    out += fmt::format(
        "kernels: attention {}{}{}{}{}{}{}{}{}\n", to_string(p.attention),
        p.attention != AttentionKernel::flash            ? ""
        : p.attention_backend == AttentionBackend::flash ? " (FlashAttention's own kernel)"
                                                         : " (cuDNN's fused kernel)",
        p.attention == AttentionKernel::flash && p.replays_fused_attention()
            ? " (replayed in backward: Megatron-Core's selective recompute checkpoints the "
              "fused kernel too)"
            : "",
        !p.fp8               ? ""
        : p.fp8_param_gather ? ", FP8 GEMMs (Transformer Engine) on FP8 weights, all-gathered in 1 "
                               "byte (--fp8-param-gather)"
                             : ", FP8 GEMMs (Transformer Engine)",
        p.tp_comm_overlap ? ", TP all-gathers and reduce-scatters beside their GEMMs" : "",
        async_ar ? ", TP input-gradient all-reduce beside the weight-gradient GEMM (asynchronous)"
                 : "",
        p.cross_entropy == CrossEntropy::fused
            ? ", fused cross entropy (the logits kept in the compute type)"
        : p.cross_entropy == CrossEntropy::torch
            ? ", PyTorch's cross entropy (fp32 log-softmax kept, its backward's two fp32 "
              "gradients beside it)"
        : p.cross_entropy == CrossEntropy::flash_attn
            ? ", FlashAttention's cross entropy (the logits kept in the compute type, their "
              "gradient made beside them)"
            : "",
        stages.empty() ? "" : "; layers per stage " + stages,
        p.mtp_layers > 0
            ? fmt::format("; multi-token prediction: {} depth{} on the last stage ({:.2f}B "
                          "parameters beside the model's)",
                          p.mtp_layers, p.mtp_layers == 1 ? "" : "s", mtp_params / 1e9)
            : "");
  }
  if (p.overlap_moe_ep_comm)
    out += fmt::format(
        "schedule: combined 1F1B (Megatron-Core's EP all-to-all overlap): each steady-state "
        "forward runs with a backward, layer by layer, each one's dispatch and combine "
        "all-to-alls beside the other's compute{}{}\n",
        p.pp > 1 ? "; one more warm-up forward" : "; the first forward and the last backward alone",
        p.delay_wgrad_compute ? "; weight gradients after the data gradient's all-to-all" : "");
  if (p.cpu_offload_layers > 0) {
    double bytes = 0;
    for (int l = 0; l < p.cpu_offload_layers; ++l)  // PP 1: one chunk from layer 0
      bytes += block_activation_bytes(sc, l, p.full_recompute_at(l)).value();
    const double bw = sc.system.node.host_copy_pinned.value();
    out += fmt::format(
        "activation offloading: layers 0-{} ({:.2f} GiB per micro-batch out after the forward and "
        "back before the backward, {:.1f} ms each way over the host copy bandwidth of {:.0f} GB/s, "
        "beside the compute)\n",
        p.cpu_offload_layers - 1, bytes / (1024.0 * 1024 * 1024), bytes / bw * 1e3, bw / 1e9);
  }
  if (p.offload_optimizer) {
    // The largest shard sets the node's step: every rank of a node steps its shard at once.
    const double owned = largest_optimizer_shard(w);
    constexpr double gib = 1024.0 * 1024 * 1024;
    std::string parts;
    double seconds = 0;
    for (const OffloadPart& part : offload_step(sc, owned)) {
      const std::string what = part.name == "offload_grad_accumulate"
                                   ? "accumulated gradients through the GPU"
                               : part.name == "offload_grad_copy" ? "fp32 gradients out"
                               : part.name == "cpu_adam"          ? "CPU Adam through host memory"
                                                                  : "weights back";
      parts += fmt::format("{}{} {:.2f} GiB, {:.1f} ms at {:.1f} GB/s", parts.empty() ? "" : "; ",
                           what, part.bytes / gib, part.seconds() * 1e3, part.bandwidth / 1e9);
      seconds += part.seconds();
    }
    out += fmt::format(
        "optimizer offload (ZeRO-Offload): {:.1f}M parameters a rank stepped on the host, {} "
        "ranks a node at once; {} ({:.1f} ms a step, the GPU waiting)\n",
        owned / 1e6, sc.gpus_per_node, parts, seconds * 1e3);
  }
  if (p.offload_param) {
    constexpr double gib = 1024.0 * 1024 * 1024;
    const ParamFetches f = param_fetches(w);
    std::string step;
    for (const OffloadPart& part : param_offload_step(sc, largest_optimizer_shard(w)))
      step += fmt::format("; {} {:.2f} GiB, {:.1f} ms at {:.1f} GB/s",
                          part.name == "offload_param_out" ? "step: the fp32 weights out"
                                                           : "their cast on the host",
                          part.bytes / gib, part.seconds() * 1e3, part.bandwidth / 1e9);
    out += fmt::format(
        "parameter offload (ZeRO-3 offload_param): each rank's 16-bit partition in pinned host "
        "memory; a micro-batch's {} fetches copy {:.2f} GiB to the GPU {}, {:.1f} ms at {:.1f} "
        "GB/s on the gathers' stream (the module waits for each copy){}\n",
        f.copies, f.bytes / gib,
        p.dp > 1 ? "before their all-gathers" : "(one rank: the parameters whole, no gather)",
        f.seconds * 1e3, sc.system.node.host_copy_pinned.value() / 1e9, step);
  }
  if (p.fsdp_cpu_offload) {
    constexpr double gib = 1024.0 * 1024 * 1024;
    const ParamFetches f = param_fetches(w), adds = grad_adds(w);
    const double owned = largest_optimizer_shard(w);
    std::string step;
    for (const OffloadPart& part : fsdp_offload_step(sc, owned))
      step = fmt::format(
          "torch's AdamW on the CPU {:.2f} GiB through host memory, {:.1f} ms at "
          "{:.1f} GB/s, the node's {} ranks at once",
          part.bytes / gib, part.seconds() * 1e3, part.bandwidth / 1e9, sc.gpus_per_node);
    out += fmt::format(
        "FSDP CPU offload: each rank's fp32 shard of {:.1f}M parameters, its gradients and "
        "Adam's moments in pinned host memory; the first micro-batch's {} copies of shards to the "
        "GPU before their all-gathers {:.2f} GiB, {:.1f} ms at {:.1f} GB/s; each reduced "
        "gradient shard copied out as fp32{}; the step: {}\n",
        owned / 1e6, f.copies, f.bytes / gib, f.seconds * 1e3,
        sc.system.node.host_copy_pinned.value() / 1e9,
        adds.copies > 0
            ? fmt::format(", blocking, and added to the host's on the CPU (FSDP2's accumulation "
                          "over {} micro-batches: the backward waits for each reduction, copy "
                          "and add; {} adds a micro-batch, {:.2f} GiB a rank through host "
                          "memory, {:.1f} ms)",
                          p.grad_accum, adds.copies, adds.bytes / gib, adds.seconds * 1e3)
            : std::string(),
        step);
  }
  if (p.optimizer_cpu_offload) {
    constexpr double gib = 1024.0 * 1024 * 1024;
    const double owned = largest_optimizer_shard(w);
    const MegatronOffloadStep st = megatron_offload_step(sc, owned);
    std::string parts;
    for (const OffloadPart& part : st.parts) {
      const std::string what = part.name == "offload_grad_copy" ? "fp32 gradients out"
                               : part.name == "cpu_adamw"       ? "torch's AdamW on the CPU"
                               : part.name == "cpu_param_cast"  ? "the weights' cast on the CPU"
                                                                : "16-bit weights back";
      parts += fmt::format("; {} {:.2f} GiB, {:.1f} ms at {:.1f} GB/s", what, part.bytes / gib,
                           part.seconds() * 1e3, part.bandwidth / 1e9);
    }
    const bool pipelined = p.overlap_cpu_optimizer_d2h_h2d;
    out += fmt::format(
        "optimizer CPU offload (Megatron HybridDeviceOptimizer): {:.1f}M of the shard's {:.1f}M "
        "parameters a rank stepped on the host ({:.0f}%), the node's {} ranks at once{}; {:.1f} "
        "ms a step {}\n",
        (owned - st.gpu_params) / 1e6, owned / 1e6, p.optimizer_offload_fraction * 100,
        sc.gpus_per_node, parts, megatron_offload_seconds(st, pipelined) * 1e3,
        pipelined ? "(pipelined a parameter at a time: the slowest part)"
                  : "(one after another, the GPU's Adam beside the CPU's)");
  }
  if (p.offload_optimizer || p.offload_param || p.fsdp_cpu_offload || p.optimizer_cpu_offload) {
    const double host = sc.system.node.host_memory.value();
    constexpr double gib = 1024.0 * 1024 * 1024;
    out += fmt::format("host memory: {:.2f} GiB a node ({}){}\n",
                       offload_host_bytes_per_node(w).value() / gib, offload_host_contents(p),
                       host > 0 ? fmt::format(" of the node's {:.0f} GiB", host / gib) : "");
  }
  if (p.pipe_partitioned && p.tp > 1 && p.pp > 1 && !p.sequence_parallel)
    out += fmt::format(
        "pipeline tensors: partitioned over TP (each rank sends 1/{} of the boundary tensor, the "
        "receiver all-gathers it over TP)\n",
        p.tp);
  switch (p.framework) {  // the framework's pattern, when one is chosen
    case Framework::none:
      break;
    case Framework::deepspeed:
      // ZeRO-3's fetch rules only where the plan runs ZeRO-3 (they were listed for every stage)
      out +=
          p.zero == 3
              ? fmt::format(
                    "framework: DeepSpeed (stage3 prefetch bucket {}, max live {}, reuse "
                    "distance {}, persistence threshold {}, reduce bucket {}, overlap_comm {})\n",
                    p.zero3_prefetch_bucket, p.zero3_max_live_params, p.zero3_max_reuse_distance,
                    p.zero3_persistence_threshold, p.zero_reduce_bucket, p.overlap_grad_reduce)
              : fmt::format("framework: DeepSpeed ZeRO-{} (reduce bucket {}, overlap_comm {})\n",
                            p.zero, p.zero_reduce_bucket, p.overlap_grad_reduce);
      if (!p.deepspeed_version.empty()) {  // the release (presets/frameworks/deepspeed.json)
        std::int64_t calls = 0;            // host calls per micro-batch, summed over the chunks
        for (const auto& ch : w.roles.front().chunks)
          for (const OpList* l : {&ch.forward, &ch.backward})
            for (const Op& op : l->ops())
              calls += op.kind == OpKind::comm &&
                       (op.name == "ds_param_all_gather" || op.name == "ds_grad_reduce_scatter");
        const double per_call = p.zero3_host_s_per_rank_per_call * p.dp;
        out += fmt::format(
            "DeepSpeed {}: {}{}host {:g} s per rank per call ({:.3g} ms per call over {} ranks, "
            "{} calls, {:.3g} s per micro-batch{}); NICs per group {}\n",
            p.deepspeed_version,
            p.zero3_sync_gathers ? "synchronize before every all-gather (no overlap), " : "",
            p.zero3_per_param_calls ? "one call per parameter, " : "",
            p.zero3_host_s_per_rank_per_call, per_call * 1e3, p.dp, calls, per_call * calls,
            p.zero3_host_s_per_rank_per_call > 0 ? "" : ": off",
            p.zero3_nics_per_group > 0 ? std::to_string(p.zero3_nics_per_group)
                                       : std::string("the system's"));
      }
      break;
    case Framework::fsdp: {
      std::string hsdp;
      if (p.hsdp()) {
        const int shard = hsdp_shard_ranks(p, sc.gpus_per_node);
        hsdp = fmt::format(": shard groups of {} ranks, {} replicas", shard, p.grad_dp() / shard);
      }
      // What memory holds sharded (workload/summary.cpp): ZeRO-k's where that names it, the
      // weights sharded beside whole gradients otherwise.
      const bool whole_grads = p.fsdp_whole_gradients();
      const bool whole_weights = !p.weights_sharded();
      const int as_zero = p.zero == 0                    ? 0
                          : whole_grads && whole_weights ? 1
                          : whole_weights                ? 2
                                                         : 3;
      const std::string memory =
          whole_grads && !whole_weights
              ? std::string("memory as ZeRO-3 with whole gradients until their reduction")
              : fmt::format("memory as ZeRO-{}", as_zero);
      out += fmt::format(
          "framework: PyTorch FSDP ({}{}, wrap {}, backward prefetch {}, limit_all_gathers {}{}{}; "
          "{})\n",
          to_string(p.fsdp_sharding), hsdp, to_string(p.fsdp_wrap), to_string(p.fsdp_prefetch),
          p.fsdp_limit_all_gathers,
          p.fsdp_grad_sync == FsdpGradSync::step ? ", gradients reduced after the last backward"
          : p.fsdp_grad_sync == FsdpGradSync::last_micro_batch
              ? ", gradients reduced in the last micro-batch's backward"
              : "",
          p.fsdp_unsharded_after_backward() ? ", parameters kept after each backward" : "", memory);
      break;
    }
    case Framework::megatron:
      out += fmt::format(
          "framework: Megatron-LM (distributed optimizer {}, overlap grad reduce {}, overlap param "
          "gather {}, bucket {} parameters)\n",
          p.use_distributed_optimizer, p.overlap_grad_reduce, p.overlap_param_gather,
          p.megatron_bucket);
      break;
  }
  if (p.precision_aware_optimizer) {
    out += fmt::format(
        "optimizer: Megatron-Core's precision-aware Adam (Transformer Engine FusedAdam): master "
        "weights {}, moments {} and {}, main gradients {}; {:g} bytes of state a parameter "
        "(plain mixed-precision Adam: 12)\n",
        p.keeps_param_remainders() ? std::string("fp32 kept as their 16 low bits")
                                   : std::string(to_string(p.main_params_dtype)),
        to_string(p.exp_avg_dtype), to_string(p.exp_avg_sq_dtype),
        // the gradients as memory counts them: Megatron's buffer, else the 16-bit gradients
        // commscope's pattern keeps whatever --main-grads-dtype says
        to_string(p.framework == Framework::megatron ? megatron_grad_buffer_dtype(p) : p.dtype()),
        p.optimizer_state_bytes());
  }
  out += fmt::format(
      "sequence {} tokens{}, vocabulary {}\n", sc.model.seq_length,
      sc.model.kind == ArchKind::t5 ? fmt::format(" (decoder {})", sc.model.dec_seq()) : "",
      sc.model.vocab);
  return out;
}

Table summary_table(const Workload& w, const Description& d) {
  const Scenario& sc = w.scenario;
  // predict's tokens (T5: the encoder's and the decoder's; describe counted the encoder's
  // alone, so the two did not multiply back to FLOP/s; found by checking, 2026-12-02)
  const double tokens = iteration_tokens(sc);
  Table t;
  t.header = {"quantity", "value", "note"};
  t.right = {false, true, false};
  t.add({"parameters", with_commas(d.params.total),
         human_count(static_cast<double>(d.params.total))});
  // A MoE model's published figures come in pairs (Mixtral 8x7B: 46.7B total, 12.9B active);
  // the table gave only the first (found by probing, 2026-12-02).
  if (sc.model.moe())
    t.add({"active parameters", with_commas(d.params.active),
           fmt::format("{} per token: {} of {} routed experts",
                       human_count(static_cast<double>(d.params.active)),
                       sc.model.experts_per_token, sc.model.experts)});
  t.add({"parameters per rank (max)", with_commas(d.max_params), "TP shard of the fullest stage"});
  t.add({"model FLOPs / iteration", human_si(d.flops.model, "FLOP"),
         fmt::format("{} per token", human_si(d.flops.model / tokens, "FLOP"))});
  // FlashAttention on a causal model computes half the scores PaLM's model FLOPs count: hardware
  // FLOPs can then be the smaller figure, which the note says rather than leave as a puzzle.
  t.add({"hardware FLOPs / iteration", human_si(d.flops.hardware, "FLOP"),
         d.flops.hardware < d.flops.model
             ? "with recomputation; below model FLOPs: the attention kernel skips the causal "
               "half that model FLOPs (PaLM's count) include"
             : "with recomputation"});
  t.add({"memory per rank (max)", human_bytes(d.max_memory),
         fmt::format("of {} on {}: {}", human_bytes(sc.system.gpu.memory), sc.system.gpu.name,
                     d.fits ? "fits" : "DOES NOT FIT")});
  return t;
}

}  // namespace

nlohmann::json describe_json(const Workload& w, const Description& d) {
  const Scenario& sc = w.scenario;
  nlohmann::json j;
  j["model"] = to_json(sc.model);
  j["system"] = to_json(sc.system);
  j["network"] = to_json(sc.network);
  j["plan"] = to_json(sc.plan);
  j["nodes"] = sc.nodes;
  j["gpus"] = sc.gpus();
  j["params_total"] = d.params.total;
  j["params"] = {{"blocks", d.params.blocks},         {"embedding", d.params.embedding},
                 {"final_norm", d.params.final_norm}, {"lm_head", d.params.lm_head},
                 {"pooler", d.params.pooler},         {"experts", d.params.experts}};
  j["params_active"] = d.params.active;
  j["params_per_rank"] = d.max_params;
  j["flops_per_iteration"] = d.flops.model;
  j["hardware_flops_per_iteration"] = d.flops.hardware;
  j["memory_per_rank_bytes"] = d.max_memory.value();
  j["gpu_memory_bytes"] = sc.system.gpu.memory.value();
  j["fits"] = d.fits;
  j["stages"] = nlohmann::json::array();
  j["comm"] = nlohmann::json::array();
  for (const auto& s : d.stages) {
    j["stages"].push_back({{"stage", s.stage},
                           {"params", s.params},
                           {"memory",
                            {{"weights_bytes", s.memory.weights.value()},
                             {"gradients_bytes", s.memory.gradients.value()},
                             {"optimizer_bytes", s.memory.optimizer.value()},
                             {"activations_bytes", s.memory.activations.value()},
                             {"comm_buffers_bytes", s.memory.comm_buffers.value()},
                             {"total_bytes", s.memory.total().value()}}},
                           {"fits", s.fits}});
    for (const auto& c : s.pattern) {
      if (!j.contains("pattern")) j["pattern"] = nlohmann::json::array();
      j["pattern"].push_back({{"stage", s.stage},
                              {"name", c.name},
                              {"collective", to_string(c.collective)},
                              {"group", to_string(c.group)},
                              {"span", c.span == GroupSpan::whole ? "whole" : to_string(c.span)},
                              {"group_size", c.group_size},
                              {"dtype", to_string(c.dtype)},
                              {"phase", to_string(c.phase)},
                              {"every", to_string(c.every)},
                              {"calls", c.calls},
                              {"bytes_per_rank", c.bytes},
                              {"min_bytes_per_call", c.min_call},
                              {"max_bytes_per_call", c.max_call}});
      if (c.span == GroupSpan::nodes) j["pattern"].back()["ranks_per_node"] = c.per_node;
      if (c.messages > 1) j["pattern"].back()["messages_per_call"] = c.messages;
      if (c.fp8_weights) j["pattern"].back()["fp8_weights"] = true;
    }
    for (const auto& c : s.comm) {
      j["comm"].push_back({{"stage", s.stage},
                           {"group", to_string(c.group)},
                           {"collective", to_string(c.collective)},
                           {"group_size", c.group_size},
                           {"dtype", to_string(c.dtype)},
                           {"calls", c.calls},
                           {"messages", c.messages},
                           {"bytes_per_rank", c.bytes},
                           {"wire_bytes_per_rank", c.wire_bytes}});
      if (c.fp8_weights) j["comm"].back()["fp8_weights"] = true;
    }
  }
  if (sc.plan.offload_optimizer || sc.plan.offload_param || sc.plan.fsdp_cpu_offload ||
      sc.plan.optimizer_cpu_offload) {
    // ZeRO-Offload's step, the parameter offload's and FSDP's, as the text's lines say them
    // (the fullest role's shard); the parameter fetches of a micro-batch.
    const double owned = largest_optimizer_shard(w);
    nlohmann::json parts = nlohmann::json::array();
    for (const auto& step : {offload_step(sc, owned), param_offload_step(sc, owned),
                             fsdp_offload_step(sc, owned), megatron_offload_step(sc, owned).parts})
      for (const OffloadPart& part : step)
        parts.push_back({{"name", part.name},
                         {"bytes", part.bytes},
                         {"bytes_per_s", part.bandwidth},
                         {"seconds", part.seconds()}});
    j["offload"] = {{"optimizer", sc.plan.offload_optimizer},
                    {"param", sc.plan.offload_param},
                    {"fsdp", sc.plan.fsdp_cpu_offload},
                    {"megatron", sc.plan.optimizer_cpu_offload},
                    {"params_per_rank", owned},
                    {"parts", parts},
                    {"host_bytes_per_node", offload_host_bytes_per_node(w).value()},
                    {"host_memory_bytes", sc.system.node.host_memory.value()},
                    {"fits_host", offload_fits_host(w)}};
    if (sc.plan.offload_param || sc.plan.fsdp_cpu_offload) {
      const ParamFetches f = param_fetches(w);
      j["offload"]["param_fetches_per_microbatch"] = {
          {"copies", f.copies}, {"bytes", f.bytes}, {"seconds", f.seconds}};
    }
    if (const ParamFetches a = grad_adds(w); a.copies > 0)
      j["offload"]["grad_adds_per_microbatch"] = {
          {"adds", a.copies}, {"bytes", a.bytes}, {"seconds", a.seconds}};
  }
  j["warnings"] = d.warnings;
  return j;
}

std::string render_describe(const Workload& w, const Description& d, Format f) {
  switch (f) {
    case Format::json:
      return describe_json(w, d).dump(2) + "\n";
    case Format::csv: {
      // One row per pipeline stage, self-describing so that rows of many runs concatenate.
      const Scenario& sc = w.scenario;
      const auto& p = sc.plan;
      Table t;
      t.header = {"model",
                  "system",
                  "network",
                  "nodes",
                  "gpus",
                  "dp",
                  "tp",
                  "pp",
                  "vp",
                  "cp",
                  "ep",
                  "expert_tp",
                  "zero",
                  "micro_batch",
                  "global_batch",
                  "stage",
                  "params",
                  "weights_bytes",
                  "gradients_bytes",
                  "optimizer_bytes",
                  "activations_bytes",
                  "comm_buffers_bytes",
                  "memory_bytes",
                  "fits",
                  "comm_data_bytes",
                  "comm_tensor_bytes",
                  "comm_pipeline_bytes",
                  "comm_embedding_bytes",
                  "comm_expert_bytes",
                  "comm_context_bytes",
                  "comm_expert_data_bytes",
                  "wire_bytes"};
      // (a column per group: the expert, context and expert-data groups were left out)
      static_assert(kCommGroupCount == 7, "a comm_<group>_bytes column per CommGroup");
      for (const auto& s : d.stages) {
        double by_group[kCommGroupCount] = {}, wire = 0;
        for (const auto& c : s.comm) {
          by_group[static_cast<int>(c.group)] += c.bytes;
          wire += c.wire_bytes;
        }
        auto num = [](double v) { return fmt::format("{:.0f}", v); };
        t.add({sc.model.name,
               sc.system.name,
               sc.network.name,
               std::to_string(sc.nodes),
               std::to_string(sc.gpus()),
               std::to_string(p.dp),
               std::to_string(p.tp),
               std::to_string(p.pp),
               std::to_string(p.virtual_stages),
               std::to_string(p.cp),
               std::to_string(p.ep),
               std::to_string(p.expert_tp),
               std::to_string(p.zero),
               std::to_string(p.micro_batch),
               std::to_string(p.global_batch),
               std::to_string(s.stage),
               std::to_string(s.params),
               num(s.memory.weights.value()),
               num(s.memory.gradients.value()),
               num(s.memory.optimizer.value()),
               num(s.memory.activations.value()),
               num(s.memory.comm_buffers.value()),
               num(s.memory.total().value()),
               s.fits ? "true" : "false",
               num(by_group[0]),
               num(by_group[1]),
               num(by_group[2]),
               num(by_group[3]),
               num(by_group[4]),
               num(by_group[5]),
               num(by_group[6]),
               num(wire)});
      }
      return render_csv(t);
    }
    case Format::md:
      return "## " + headline(w) + "\n" + render_markdown(summary_table(w, d)) +
             "\n### Memory per rank\n\n" + render_markdown(memory_table(d, true)) +
             "\n### Communication per iteration, per rank\n\n" +
             render_markdown(comm_table(d, true)) +
             (w.scenario.plan.framework == Framework::none
                  ? std::string()
                  : fmt::format("\n### Collective pattern ({}), per rank\n\n",
                                to_string(w.scenario.plan.framework)) +
                        render_markdown(pattern_table(d, true)));
    case Format::table: {
      std::string out = headline(w) + "\n" + render_text(summary_table(w, d)) +
                        "\nMemory per rank\n" + render_text(memory_table(d, true)) +
                        "\nCommunication per iteration, per rank\n";
      Table c = comm_table(d, true);
      out += c.rows.empty() ? "  none: a single rank does not communicate\n" : render_text(c);
      if (w.scenario.plan.framework != Framework::none) {
        Table p = pattern_table(d, true);
        out += fmt::format("\nCollective pattern ({}), per rank\n",
                           to_string(w.scenario.plan.framework));
        out += p.rows.empty() ? "  none: a single rank does not communicate\n" : render_text(p);
      }
      return out;
    }
  }
  return {};
}

}  // namespace commscope
