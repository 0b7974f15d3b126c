// Resolving a scenario: GPU count, data-parallel size, batch sizes and the checks that make
// a plan possible for a model on a system.
#include "commscope/spec/scenario.h"

#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commscope/spec/framework_config.h"
#include "commscope/spec/limits.h"
#include "commscope/spec/placement.h"

namespace commscope {

namespace {
Error bad(std::string_view field, std::string_view expected, std::string_view got) {
  return Error{fmt::format("{}: expected {}, got {}", field, expected, got)};
}
// The layers the pipeline split counts beyond the transformer layers: one each for the
// embedding and the loss where Megatron-Core's --account-for-*-in-pipeline-split say so.
int split_extra_layers(const PlanInput& in) {
  return (in.account_embedding.value_or(false) ? 1 : 0) + (in.account_loss.value_or(false) ? 1 : 0);
}

// A value as the user wrote it: integers as integers, factors with their fraction (a double
// through an int64_t parameter printed 0.5 as "0").
template <class T>
std::string num(T v) {
  return fmt::format("{}", v);
}

// Modern training (issue 15, docs/workload.md): the attention kernel (the flag, else the model
// preset's), FP8 (only where the system has an fp8 peak), uneven pipeline stages.
// `layout`: --pipeline-model-parallel-layout's transformer layers per stage and its MTP layers,
// parsed once where the virtual stages are inferred from it.
Status resolve_modern_training(const PlanInput& in, const ModelSpec& model,
                               const SystemSpec& system, ParallelPlan& plan,
                               const std::optional<PipelineLayout>& layout) {
  plan.attention = attention_kernel(in, model);
  // PyTorch's and DeepSpeed's runs call FlashAttention's kernels; Transformer Engine (Megatron)
  // picks cuDNN's fused attention on the GPUs where their speeds differ in the presets.
  const bool pytorch = plan.framework == Framework::fsdp || plan.framework == Framework::deepspeed;
  plan.attention_backend =
      in.attention_backend.value_or(pytorch ? AttentionBackend::flash : AttentionBackend::fused);
  plan.fp8 = in.fp8.value_or(false);
  if (plan.fp8) {
    if (system.gpu.peak.fp8.value() <= 0)
      return bad("--fp8",
                 fmt::format("a system with an FP8 peak (H100 or later; {} has no fp8 figure "
                             "in its preset)",
                             system.gpu.name),
                 "fp8 on " + system.name);
    if (plan.precision == Precision::fp32)
      return bad("--fp8", "bf16 or fp16 mixed precision around the FP8 GEMMs", "--precision fp32");
  }
  // Megatron-LM asserts "--fp8-param-gather only supported with distributed optimizer, torch
  // fsdp2, megatron fsdp" (arguments.py) and turns it off under FSDP2 with Transformer Engine
  // 2.x; DeepSpeed has no such path.
  plan.fp8_param_gather = in.fp8_param_gather.value_or(false);
  if (plan.fp8_param_gather) {
    if (!plan.fp8) return bad("--fp8-param-gather", "--fp8 with it", "no FP8 GEMMs");
    if (plan.framework == Framework::fsdp || plan.framework == Framework::deepspeed)
      return bad("--fp8-param-gather",
                 "Megatron's distributed optimizer or Megatron-FSDP (Megatron-LM's flag)",
                 "--framework " + std::string(to_string(plan.framework)));
    if (plan.zero < 1)
      return bad("--fp8-param-gather",
                 "a sharded optimizer (--use-distributed-optimizer or --zero 1/2/3)",
                 "ZeRO 0 (Megatron-LM refuses it without the distributed optimizer)");
  }
  const int layers = model.layers();
  // Multi-token prediction: the flag, else the model's depths. A layout carries exactly that
  // many m layers, as Megatron-Core checks ("Number of mtp layers in layout must match
  // mtp_num_layers").
  plan.mtp_layers = in.mtp_layers.value_or(model.mtp_layers);
  if (plan.mtp_layers < 0 || plan.mtp_layers > limits::kMaxMtpLayers)
    return bad("--mtp-num-layers",
               fmt::format("0 to {} (commscope's limit)", limits::kMaxMtpLayers),
               num(plan.mtp_layers));
  if (plan.mtp_layers > 0 && model.encoder_layers > 0)
    return bad("--mtp-num-layers", "0 on a model with an encoder (MTP is a decoder-only head)",
               num(plan.mtp_layers));
  if (layout && layout->mtp_layers != plan.mtp_layers)
    return bad("--pipeline-model-parallel-layout",
               fmt::format("{} multi-token-prediction layers (m), the {}", plan.mtp_layers,
                           in.mtp_layers ? "--mtp-num-layers given"
                                         : fmt::format("model's mtp_layers ({})", model.name)),
               fmt::format("{} m", layout->mtp_layers));
  plan.cpu_offload_layers = in.cpu_offload_layers.value_or(0);
  if (plan.cpu_offload_layers != 0) {
    // megatron/core/transformer/transformer_config.py: 0 <= N < num_layers, and no pipeline
    // parallelism with CPU offloading.
    if (plan.cpu_offload_layers < 0 || plan.cpu_offload_layers >= layers)
      return bad("--cpu-offloading-num-layers",
                 fmt::format("0 to {} (fewer than the model's {} layers)", layers - 1, layers),
                 num(plan.cpu_offload_layers));
    if (plan.pp > 1)
      return bad("--cpu-offloading-num-layers",
                 "pipeline-parallel size 1 (Megatron-Core has no CPU offloading with pipeline "
                 "parallelism)",
                 fmt::format("--pp {}", plan.pp));
    if (system.node.host_copy_pinned.value() <= 0)
      return bad("--cpu-offloading-num-layers",
                 fmt::format("a system whose preset gives node.host_copy_pinned_gbs (the host "
                             "copy bandwidth); {} has none",
                             system.name),
                 num(plan.cpu_offload_layers));
  }
  // An offload's figures of the system: the host link, and where the host steps or casts, its
  // memory's bandwidth.
  auto host_figures = [&](std::string_view flag, bool memory) -> Status {
    const bool link = system.node.host_copy_pinned.value() > 0;
    if (link && (!memory || system.node.host_memory_bandwidth.value() > 0)) return {};
    return bad(flag,
               "a system whose preset gives node.host_copy_pinned_gbs and "
               "node.host_memory_bandwidth_gbs (the host link's and the host memory's "
               "bandwidths)",
               fmt::format("{}, which gives no {}", system.name,
                           link ? "host_memory_bandwidth_gbs" : "host_copy_pinned_gbs"));
  };
  // DeepSpeed ZeRO-Offload: its ZeRO optimizers' cpu_offload path, under ZeRO 1-3 only.
  plan.offload_optimizer = in.offload_optimizer.value_or(false);
  if (plan.offload_optimizer) {
    if (plan.framework == Framework::megatron || plan.framework == Framework::fsdp)
      return bad("--offload-optimizer",
                 "--framework deepspeed or none (ZeRO-Offload is DeepSpeed's optimizer path)",
                 "--framework " + std::string(to_string(plan.framework)));
    if (plan.zero < 1)
      return bad("--offload-optimizer",
                 "ZeRO stage 1, 2 or 3 (DeepSpeed offloads the optimizer of its ZeRO optimizers)",
                 "ZeRO-0");
    if (plan.precision_aware_optimizer)
      return bad("--offload-optimizer",
                 "plain Adam (DeepSpeedCPUAdam keeps fp32 master weights and moments)",
                 "--use-precision-aware-optimizer");
    CS_RETURN_IF_ERROR(host_figures("--offload-optimizer", true));
  }
  // DeepSpeed ZeRO-3's parameter offload: the partitions its coordinator fetches.
  plan.offload_param = in.offload_param.value_or(false);
  if (plan.offload_param) {
    if (plan.framework != Framework::deepspeed)
      return bad("--offload-param",
                 "--framework deepspeed (the partitions are fetched by DeepSpeed's ZeRO-3 "
                 "coordinator)",
                 "--framework " + std::string(to_string(plan.framework)));
    if (plan.zero != 3)
      return bad("--offload-param", "ZeRO stage 3 (DeepSpeed offloads parameters only there)",
                 fmt::format("ZeRO-{}", plan.zero));
    if (plan.zeropp_qwz || plan.zeropp_hpz > 1)
      return bad("--offload-param", "no ZeRO++ qwZ or hpZ (not modelled with parameter offload)",
                 plan.zeropp_qwz ? "--zero-quantized-weights" : "--zero-hpz-partition-size");
    // Without ZeRO-Offload the step's 16-bit cast of the weights runs on the host (PyTorch's
    // blocking copy_ converts there) and needs the host memory's bandwidth.
    CS_RETURN_IF_ERROR(host_figures("--offload-param",
                                    !plan.offload_optimizer && plan.precision != Precision::fp32));
  }
  // PyTorch FSDP's CPU offload: every sharded unit's shard on the host.
  plan.fsdp_cpu_offload = in.fsdp_cpu_offload.value_or(false);
  if (plan.fsdp_cpu_offload) {
    if (plan.framework != Framework::fsdp)
      return bad("--fsdp-cpu-offload", "--framework fsdp (PyTorch FSDP's CPU offload)",
                 "--framework " + std::string(to_string(plan.framework)));
    if (plan.fsdp_sharding == FsdpSharding::no_shard || plan.grad_dp() < 2)
      return bad(
          "--fsdp-cpu-offload",
          "a sharded strategy over 2 or more data-parallel ranks (the offload moves the "
          "shards)",
          plan.fsdp_sharding == FsdpSharding::no_shard ? "NO_SHARD" : "data-parallel size 1");
    CS_RETURN_IF_ERROR(host_figures("--fsdp-cpu-offload", true));
  }
  // Megatron-Core's HybridDeviceOptimizer: the part of the distributed optimizer's shard it steps
  // on the host.
  plan.optimizer_cpu_offload = in.optimizer_cpu_offload.value_or(false);
  plan.optimizer_offload_fraction = in.optimizer_offload_fraction.value_or(1.0);
  plan.overlap_cpu_optimizer_d2h_h2d = in.overlap_cpu_optimizer_d2h_h2d.value_or(false);
  if (!plan.optimizer_cpu_offload &&
      (in.optimizer_offload_fraction || in.overlap_cpu_optimizer_d2h_h2d.value_or(false)))
    return bad(in.optimizer_offload_fraction ? "--optimizer-offload-fraction"
                                             : "--overlap-cpu-optimizer-d2h-h2d",
               "--optimizer-cpu-offload beside it", "no --optimizer-cpu-offload");
  if (plan.optimizer_cpu_offload) {
    if (plan.framework != Framework::megatron)
      return bad("--optimizer-cpu-offload",
                 "--framework megatron (Megatron-Core's HybridDeviceOptimizer)",
                 "--framework " + std::string(to_string(plan.framework)));
    // arguments.py: "The optimizer cpu offload must be used in conjunction with
    // --use-precision-aware-optimizer" (which needs the distributed optimizer, checked above).
    if (!plan.precision_aware_optimizer)
      return bad("--optimizer-cpu-offload",
                 "--use-precision-aware-optimizer beside it (Megatron-LM asserts it: the hybrid "
                 "optimizer reuses its code path)",
                 "none");
    if (plan.fp8_param_gather)
      return bad("--optimizer-cpu-offload",
                 "no --fp8-param-gather (its FP8 parameters with the CPU offload are not "
                 "modelled)",
                 "--fp8-param-gather");
    CS_RETURN_IF_ERROR(host_figures("--optimizer-cpu-offload", true));
  }
  if (in.pipeline_layout && (in.stage_layers || in.first_stage_layers || in.last_stage_layers))
    return bad("--pipeline-model-parallel-layout",
               "either a layout or per-stage layer counts (--pipeline-stage-layers, "
               "--decoder-first/last-pipeline-num-layers), not both",
               "both");
  if (in.stage_layers && (in.first_stage_layers || in.last_stage_layers))
    return bad("--pipeline-stage-layers",
               "either a per-stage list or --decoder-first/last-pipeline-num-layers, not both",
               "both");
  const bool account = split_extra_layers(in) > 0;
  const char* account_flag = in.account_embedding.value_or(false)
                                 ? "--account-for-embedding-in-pipeline-split"
                                 : "--account-for-loss-in-pipeline-split";
  // Megatron-Core refuses the two with a layout or first/last counts (TransformerConfig);
  // commscope's per-stage list is a layout of its own.
  if (account &&
      (in.pipeline_layout || in.stage_layers || in.first_stage_layers || in.last_stage_layers))
    return bad(account_flag,
               "no layout or per-stage layer counts beside it (--pipeline-model-parallel-layout, "
               "--pipeline-stage-layers, --decoder-first/last-pipeline-num-layers)",
               "both");
  if (account && plan.pp > 1) {
    // The embedding and the loss count as a layer each: the layers + 1 or 2 split evenly over
    // the PP x VP chunks, the first and the last holding one fewer (Megatron-Core's
    // TransformerConfig checks, and its get_transformer_layer_offset).
    const std::int64_t units = std::int64_t{layers} + split_extra_layers(in);
    const int n = plan.pp * plan.virtual_stages;
    if (units % n != 0)
      return bad(account_flag,
                 fmt::format("the {} layers + {} (the embedding and loss counted) split evenly "
                             "over PP x VP = {} x {} model chunks",
                             layers, split_extra_layers(in), plan.pp, plan.virtual_stages),
                 fmt::format("{} over {} chunks", units, n));
    std::vector<int> split(static_cast<std::size_t>(n), static_cast<int>(units / n));
    split.front() -= in.account_embedding.value_or(false) ? 1 : 0;
    split.back() -= in.account_loss.value_or(false) ? 1 : 0;
    plan.stage_layers = std::move(split);
    return {};
  }
  // A layout is parsed whenever the flag is given (resolve_scenario).
  const std::optional<std::vector<int>>& listed =
      layout ? std::optional(layout->stages) : in.stage_layers;
  if (!listed && !in.first_stage_layers && !in.last_stage_layers) return {};
  const char* flag = in.pipeline_layout      ? "--pipeline-model-parallel-layout"
                     : in.stage_layers       ? "--pipeline-stage-layers"
                     : in.first_stage_layers ? "--decoder-first-pipeline-num-layers"
                                             : "--decoder-last-pipeline-num-layers";
  if (model.encoder_layers > 0)
    return bad(flag,
               "a decoder-only model (uneven stages of encoder-decoder models are not "
               "modelled)",
               model.name);
  // One count per virtual stage (PP x virtual stages, in Megatron's order: chunk c of stage s is
  // virtual stage c x PP + s); the first and the last may be 0, a chunk holding only the
  // embedding or only the head and loss (Llama 3 405B, Meta 2024 section 3.3.2).
  const int n = plan.pp * plan.virtual_stages;
  std::vector<int> split;
  if (listed) {
    split = *listed;
    if (static_cast<int>(split.size()) != n)
      return bad(flag,
                 fmt::format("one layer count per pipeline stage ({} stages x {} virtual)", plan.pp,
                             plan.virtual_stages),
                 fmt::format("{} counts", split.size()));
  } else {
    if (plan.pp < 2) return bad(flag, "pipeline parallelism (PP 2 or more)", "PP 1");
    const int first = in.first_stage_layers.value_or(-1), last = in.last_stage_layers.value_or(-1);
    if (in.first_stage_layers && (first < 1 || first > layers))
      return bad("--decoder-first-pipeline-num-layers",
                 fmt::format("a layer count from 1 to the {} layers", layers), num(first));
    if (in.last_stage_layers && (last < 1 || last > layers))
      return bad("--decoder-last-pipeline-num-layers",
                 fmt::format("a layer count from 1 to the {} layers", layers), num(last));
    // Megatron-Core (TransformerConfig, get_transformer_layer_offset): the counts are the first
    // and the last pipeline *rank*'s layers, split evenly over its model chunks (so a multiple
    // of the virtual stages); the remaining layers split evenly over the other ranks and their
    // chunks. (They were put on the first and last virtual stage alone: with --vp the first
    // rank's other chunks got a middle share, found by probing, 2026-11-30.)
    const int v = plan.virtual_stages;
    for (const auto& [f, count] : {std::pair{"--decoder-first-pipeline-num-layers", first},
                                   std::pair{"--decoder-last-pipeline-num-layers", last}})
      if (count > 0 && count % v != 0)
        return bad(f,
                   fmt::format("a layer count the {} virtual stages divide (the first or last "
                               "pipeline rank's layers, split over its model chunks)",
                               v),
                   num(count));
    const int fixed = (first > 0 ? first : 0) + (last > 0 ? last : 0);
    const int middle = plan.pp - (first > 0 ? 1 : 0) - (last > 0 ? 1 : 0);  // ranks
    const int rest = layers - fixed;
    if (rest < middle * v || (middle > 0 && rest % (middle * v) != 0) || (middle == 0 && rest != 0))
      return bad(flag,
                 fmt::format("first/last stage layers leaving the other {} pipeline stages x {} "
                             "virtual an equal, positive share of the {} layers",
                             middle, v, layers),
                 fmt::format("{} layers left for {} stages x {} virtual", rest, middle, v));
    split.assign(static_cast<std::size_t>(n), middle > 0 ? rest / (middle * v) : 0);
    for (int c = 0; c < v; ++c) {  // chunk c of stage s: virtual stage c x PP + s
      if (first > 0) split[static_cast<std::size_t>(c * plan.pp)] = first / v;
      if (last > 0) split[static_cast<std::size_t>(c * plan.pp + plan.pp - 1)] = last / v;
    }
  }
  long long sum = 0;
  for (std::size_t i = 0; i < split.size(); ++i) {
    const bool end = i == 0 || i + 1 == split.size();
    if (split[i] < (end ? 0 : 1))
      return bad(flag,
                 end ? "a non-negative layer count for the first and last stage"
                     : "a positive layer count for every stage but the first and last",
                 num(split[i]));
    sum += split[i];
  }
  if (sum != layers)
    return bad(flag,
               fmt::format("stage layer counts summing to the {} layers of {}", layers, model.name),
               fmt::format("a sum of {}", sum));
  plan.stage_layers = std::move(split);
  return {};
}

}  // namespace

AttentionKernel attention_kernel(const PlanInput& in, const ModelSpec& model) {
  // A flash kernel named (--attention-backend fused or flash) runs one.
  return in.attention.value_or(in.attention_backend || model.flash_attention
                                   ? AttentionKernel::flash
                                   : AttentionKernel::standard);
}

// torchtitan's op-level selective checkpointing (--recompute-granularity op) is modelled on
// the blocks torchtitan's models have (separate q, k, v projections or DeepSeek-V3's latent
// attention, a gated or plain MLP, or its MoE module with the policy of its MoE models): its
// save list and matrix-product count are those ops'. Cross attention adds ops whose policy is
// not modelled.
std::optional<std::pair<std::string, std::string>> op_recompute_model_gap(const ModelSpec& m) {
  if (m.kind == ArchKind::t5)
    return std::pair{std::string("a decoder-only or encoder-only model"),
                     "encoder-decoder " + m.name};
  return std::nullopt;
}

namespace {

// The plan's side of the same: context parallelism and FP8 add ring exchanges and amax
// reductions to the list; DeepSpeed's ZeRO-3 hooks replay whole modules.
Status resolve_op_recompute(const ModelSpec& model, const ParallelPlan& plan) {
  if (plan.recompute != Recompute::op) return {};
  constexpr const char* kFlag = "--recompute-granularity";
  auto refuse = [&](std::string_view expected, std::string got) {
    return bad(kFlag,
               fmt::format("op (torchtitan's op-level selective checkpointing) with {}", expected),
               got);
  };
  if (auto gap = op_recompute_model_gap(model)) return refuse(gap->first, gap->second);
  if (plan.cp > 1) return refuse("context-parallel size 1", fmt::format("--cp {}", plan.cp));
  if (plan.fp8) return refuse("bf16 or fp16 GEMMs", "--fp8");
  if (plan.mtp_layers > 0)
    return refuse("no multi-token prediction", fmt::format("--mtp-num-layers {}", plan.mtp_layers));
  if (plan.cpu_offload_layers > 0)
    return refuse("no activation offloading",
                  fmt::format("--cpu-offloading-num-layers {}", plan.cpu_offload_layers));
  if (plan.framework == Framework::deepspeed && plan.zero == 3)
    return refuse("PyTorch's checkpoint (not DeepSpeed's ZeRO-3 module hooks)",
                  "--framework deepspeed with ZeRO-3");
  return {};
}

// Megatron-Core's EP all-to-all overlap (combined 1F1B), with TransformerConfig's checks
// (transformer_config.py, __post_init__); after the schedule, recompute and MTP are resolved.
Status resolve_ep_overlap(const PlanInput& in, ParallelPlan& plan) {
  plan.overlap_moe_ep_comm = in.overlap_moe_ep_comm.value_or(false);
  plan.delay_wgrad_compute = in.delay_wgrad_compute.value_or(false);
  if (plan.delay_wgrad_compute && !plan.overlap_moe_ep_comm)
    return bad("--delay-wgrad-compute", "it with --overlap-moe-expert-parallel-comm", "without it");
  if (plan.overlap_moe_ep_comm) {
    constexpr const char* kFlag = "--overlap-moe-expert-parallel-comm";
    if (plan.ep <= 1) return bad(kFlag, "--expert-model-parallel-size above 1", num(plan.ep));
    if (plan.pp > 1 && plan.schedule != Schedule::interleaved)
      return bad(kFlag,
                 "virtual pipeline stages with PP > 1 (Megatron-Core's combined 1F1B runs in "
                 "the interleaved schedule)",
                 fmt::format("PP {} with the {} schedule", plan.pp, to_string(plan.schedule)));
    if (plan.recompute == Recompute::full)
      return bad(kFlag, "no full recompute (selective or none)", "--recompute-granularity full");
    if (plan.precision == Precision::fp32)
      return bad(kFlag, "a bf16 or fp16 model", std::string(to_string(plan.precision)));
    if (plan.mtp_layers > 1)
      return bad(kFlag, "at most one multi-token-prediction layer",
                 fmt::format("--mtp-num-layers {}", plan.mtp_layers));
    if (plan.cpu_offload_layers > 0)
      return bad(kFlag,
                 "no --cpu-offloading-num-layers (activation offloading in the combined 1F1B "
                 "is not modelled)",
                 fmt::format("--cpu-offloading-num-layers {}", plan.cpu_offload_layers));
  }
  return {};
}
}  // namespace

ScenarioInput default_scenario_input() {
  ScenarioInput in;
  in.model = "gpt2-large";
  in.system = "polaris";
  in.plan.nodes = 4;
  in.plan.micro_batch = 4;
  return in;
}

Result<Scenario> resolve_scenario(const ScenarioInput& in) {
  CS_ASSIGN_OR_RETURN(auto model,
                      load_model(in.model, in.model_flags, in.plan.seq_length.value_or(0)));
  CS_ASSIGN_OR_RETURN(auto system, load_system(in.system));
  CS_ASSIGN_OR_RETURN(auto network, load_network(in.network.empty() ? system.network : in.network));
  auto sc = resolve_scenario(std::move(model), std::move(system), std::move(network), in.plan);
  if (sc.ok()) return sc;
  // An error about a value a configuration file set names the file's field: the user wrote
  // zero_optimization.stage in ds.json, not --zero.
  const std::string& message = sc.error().message;
  for (const auto& [flag, field] : in.file_fields)
    if (message.rfind(flag + ": ", 0) == 0)
      return Error{flag.rfind("--", 0) == 0
                       ? fmt::format("{} ({}){}", field, flag, message.substr(flag.size()))
                       : fmt::format("{}{}", field, message.substr(flag.size()))};
  return sc;
}

// Context and expert parallelism (Megatron-LM's --context-parallel-size,
// --expert-model-parallel-size, --expert-tensor-parallel-size, --moe-expert-capacity-factor):
// CP takes its share of the data-parallel ranks found so far (world = TP x CP x DP x PP); EP x
// expert TP must divide the TP x CP x DP ranks of a stage and EP the experts.
static Status resolve_context_expert(const PlanInput& in, const ModelSpec& model,
                                     ParallelPlan& plan) {
  auto bad = [](std::string_view flag, std::string_view expected, std::string_view got) {
    return Error{fmt::format("{}: expected {}, got {}", flag, expected, got)};
  };
  auto num = [](auto v) { return fmt::format("{}", v); };
  plan.cp = in.cp.value_or(1);
  plan.cp_comm_type = in.cp_comm_type.value_or(CpCommType::p2p);
  if (plan.cp < 1) return bad("--context-parallel-size", "a positive integer", num(plan.cp));
  // Hierarchical CP (Megatron-LM's a2a+p2p): --hierarchical-context-parallel-sizes, whose
  // product Megatron asserts is CP and which a2a+p2p requires; Transformer Engine takes two
  // levels, [a2a group, p2p group], and runs a level of one rank as the other form alone
  // (attn_forward_func_with_cp).
  const std::vector<int>& hs = in.hierarchical_cp_sizes;
  auto sizes = [&] { return fmt::format("{}", fmt::join(hs, " ")); };  // as given, for errors
  if (!hs.empty()) {
    constexpr const char* kFlag = "--hierarchical-context-parallel-sizes";
    std::int64_t product = 1;
    for (int v : hs) {
      if (v < 1) return bad(kFlag, "positive integers", sizes());
      product *= v;
      if (product > plan.cp) break;
    }
    if (product != plan.cp)
      return bad(kFlag, fmt::format("sizes whose product is the context-parallel size {}", plan.cp),
                 sizes());
    if (plan.cp_comm_type == CpCommType::a2a_p2p && hs.size() != 2)
      return bad(kFlag,
                 "two sizes with --cp-comm-type a2a+p2p (Transformer Engine's all-to-all level, "
                 "then its ring's)",
                 sizes());
  }
  if (plan.cp_comm_type == CpCommType::a2a_p2p) {
    if (hs.empty())
      return bad("--cp-comm-type",
                 "--hierarchical-context-parallel-sizes beside a2a+p2p (its all-to-all and ring "
                 "levels, as Megatron-LM requires)",
                 "a2a+p2p without it");
    plan.cp_a2a = hs[0];
    if (hs[0] == 1 || hs[1] == 1) {  // one level: the ring alone, or the all-to-alls alone
      plan.cp_comm_type = hs[0] == 1 ? CpCommType::p2p : CpCommType::a2a;
      plan.cp_a2a = 1;
    }
  }
  if (plan.cp > 1) {
    if (plan.dp % plan.cp != 0)
      return bad("--context-parallel-size",
                 fmt::format("a divisor of GPUs / (TP x PP) = {}", plan.dp), num(plan.cp));
    plan.dp /= plan.cp;
    // Load-balanced causal chunking: the sequence in 2 x CP chunks (Megatron-LM, whatever the
    // exchange). DeepSpeed-Ulysses (all-to-all CP under DeepSpeed) cuts it in CP contiguous
    // chunks: after its all-to-all every rank attends over whole sequences, balanced as they are.
    const bool ulysses = plan.cp_comm_type == CpCommType::a2a &&
                         in.framework.value_or(Framework::none) == Framework::deepspeed;
    for (std::int64_t s : {model.seq_length, model.dec_seq()})
      if (s % (ulysses ? plan.cp : 2 * plan.cp) != 0)
        return bad("--context-parallel-size",
                   ulysses ? fmt::format("CP to divide the sequence length {} "
                                         "(DeepSpeed-Ulysses' contiguous chunks)",
                                         s)
                           : fmt::format("2 x CP to divide the sequence length {} (load-balanced "
                                         "causal chunks, as Megatron-LM requires)",
                                         s),
                   num(plan.cp));
    if (model.kind == ArchKind::t5 || model.kind == ArchKind::bert)
      return bad("--context-parallel-size",
                 "1 for encoder models (ring attention is modelled "
                 "for decoder-only models)",
                 num(plan.cp));
    // All-to-all CP gives each CP rank whole heads (Transformer Engine asserts that CP divides
    // the query and the key-value heads of a TP rank; so does DeepSpeed-Ulysses).
    // Under a2a+p2p the all-to-all level does.
    const bool a2a = plan.cp_comm_type == CpCommType::a2a;
    if (a2a || plan.cp_comm_type == CpCommType::a2a_p2p)
      for (auto [what, n] :
           {std::pair{"attention heads", model.heads},
            std::pair{"key-value heads", model.mla() ? model.heads : model.kv_heads}})
        if ((n / plan.tp) % (a2a ? plan.cp : plan.cp_a2a) != 0)
          return a2a ? bad("--context-parallel-size",
                           fmt::format("a divisor of the {} per TP rank, {} (--cp-comm-type a2a "
                                       "scatters the heads over the CP ranks)",
                                       what, n / plan.tp),
                           num(plan.cp))
                     : bad("--hierarchical-context-parallel-sizes",
                           fmt::format("an all-to-all level that divides the {} per TP rank, {} "
                                       "(a2a+p2p scatters the heads over it)",
                                       what, n / plan.tp),
                           sizes());
  }
  plan.ep = in.ep.value_or(1);
  plan.expert_tp = in.expert_tp.value_or(plan.tp);
  if (plan.ep < 1) return bad("--expert-model-parallel-size", "a positive integer", num(plan.ep));
  if (plan.expert_tp < 1)
    return bad("--expert-tensor-parallel-size", "a positive integer", num(plan.expert_tp));
  if (!model.moe() && plan.ep > 1)
    return bad("--expert-model-parallel-size",
               fmt::format("1 for {}, which has no experts", model.name), num(plan.ep));
  if (!model.moe() && in.expert_tp && plan.expert_tp != plan.tp)
    return bad("--expert-tensor-parallel-size",
               fmt::format("the TP size {} for {}, which has no experts", plan.tp, model.name),
               num(plan.expert_tp));
  if (model.moe()) {
    if (model.experts % plan.ep != 0)
      return bad("--expert-model-parallel-size",
                 fmt::format("a divisor of the {} experts of {}", model.experts, model.name),
                 num(plan.ep));
    if (plan.expert_tp != 1 && plan.expert_tp != plan.tp)
      return bad(
          "--expert-tensor-parallel-size",
          fmt::format("1 or the tensor-parallel size {} (commscope models those two)", plan.tp),
          num(plan.expert_tp));
    if (plan.tp > 1 && !in.sequence_parallel.value_or(false))
      return bad("--sequence-parallel",
                 "it with experts and TP > 1 (Megatron-LM requires sequence parallelism for MoE "
                 "with tensor parallelism)",
                 "TP " + num(plan.tp) + " without it");
    const std::int64_t ranks = std::int64_t{plan.tp} * plan.cp * plan.dp;
    if (ranks % (std::int64_t{plan.ep} * plan.expert_tp) != 0)
      return bad("--expert-model-parallel-size",
                 fmt::format("EP x expert TP to divide TP x CP x DP = {} ranks of a stage", ranks),
                 fmt::format("{} x {}", plan.ep, plan.expert_tp));
    if (in.zero && *in.zero >= 2)
      return bad("--zero",
                 "0 or 1 with experts (expert-parallel sharding under ZeRO-2/3 is not modelled)",
                 num(*in.zero));
    // DeepSpeed-MoE (deepspeed.moe.layer.MoE, as Megatron-DeepSpeed builds it), ZeRO 0 or 1
    // (above): its dense gradients over DP, its experts' over the expert-data group, its tokens
    // all-to-all over EP. Its de-duplication of the tokens over TP, MoE under its pipeline
    // engine (Megatron-DeepSpeed runs MoE with --no-pipeline-parallel) and with its sequence
    // parallelism are not modelled.
    if (in.framework && *in.framework == Framework::deepspeed)
      for (auto [flag, size] : {std::pair{"--tensor-model-parallel-size", plan.tp},
                                std::pair{"--pipeline-model-parallel-size", plan.pp},
                                std::pair{"--context-parallel-size", plan.cp}})
        if (size > 1)
          return bad(flag,
                     "1 with experts under --framework deepspeed (DeepSpeed-MoE is modelled "
                     "with data and expert parallelism only)",
                     num(size));
    // FSDP2 as torchtitan applies it to MoE models: a unit per block, its routed experts
    // sharded over the expert-data group (torchtitan's efsdp), the rest over DP x CP; under
    // HSDP each over its shard group, replicated over the replicas (checked below).
    if (in.framework && *in.framework == Framework::fsdp) {
      const FsdpSharding sh = in.fsdp_sharding.value_or(FsdpSharding::full_shard);
      if (sh == FsdpSharding::no_shard)
        return bad("--fsdp-sharding",
                   "full_shard, shard_grad_op, hybrid_shard or hybrid_shard_zero2 with experts "
                   "(DDP's expert pattern is not modelled)",
                   std::string(to_string(sh)));
      if (in.fsdp_wrap.value_or(FsdpWrap::block) != FsdpWrap::block)
        return bad("--fsdp-wrap",
                   "block with experts (torchtitan wraps each block; one unit of the whole "
                   "model with experts is not modelled)",
                   std::string(to_string(*in.fsdp_wrap)));
    }
  }
  if (in.moe_capacity_factor) {
    plan.moe_capacity_factor = *in.moe_capacity_factor;
    if (!(plan.moe_capacity_factor > 0) || plan.moe_capacity_factor > 1e3)
      return bad("--moe-expert-capacity-factor", "a positive factor of at most 1000",
                 num(plan.moe_capacity_factor));
    if (!model.moe())
      return bad("--moe-expert-capacity-factor",
                 fmt::format("none for {}, which has no experts", model.name),
                 num(plan.moe_capacity_factor));
  }
  plan.moe_aux_loss_coeff = in.moe_aux_loss_coeff.value_or(0);
  if (!(plan.moe_aux_loss_coeff >= 0) || plan.moe_aux_loss_coeff > 1e3)
    return bad("--moe-aux-loss-coeff", "0 to 1000", num(plan.moe_aux_loss_coeff));
  if (plan.moe_aux_loss_coeff > 0 && !model.moe())
    return bad("--moe-aux-loss-coeff", fmt::format("0 for {}, which has no experts", model.name),
               num(plan.moe_aux_loss_coeff));
  plan.moe_pad_to_capacity = in.moe_pad_to_capacity.value_or(false);
  if (plan.moe_pad_to_capacity && plan.moe_capacity_factor <= 0)  // as Megatron-LM asserts
    return bad("--moe-pad-expert-input-to-capacity", "a --moe-expert-capacity-factor with it",
               "none");
  // DeepSpeed-MoE's floor of the capacity (min_capacity, 4 unless given): Megatron-LM's
  // capacity has none.
  const bool deepspeed_moe =
      model.moe() && in.framework.value_or(Framework::none) == Framework::deepspeed;
  if (in.moe_min_capacity && !deepspeed_moe)
    return bad("--moe-min-capacity",
               "--framework deepspeed with experts (DeepSpeed-MoE's floor of the capacity; "
               "Megatron-LM's has none)",
               num(*in.moe_min_capacity));
  plan.moe_min_capacity = in.moe_min_capacity.value_or(deepspeed_moe ? 4 : 0);
  if (plan.moe_min_capacity < 0 || plan.moe_min_capacity > limits::kMaxSeqLength)
    return bad("--moe-min-capacity", fmt::format("0 to {} tokens", limits::kMaxSeqLength),
               num(plan.moe_min_capacity));
  // Group-limited routing: the plan's flags, else the model's (DeepSeek-V3's n_group 8,
  // topk_group 4), checked as the model's are.
  if ((in.moe_router_groups || in.moe_router_group_topk) && !model.moe())
    return bad(in.moe_router_groups ? "--moe-router-num-groups" : "--moe-router-group-topk",
               fmt::format("none for {}, which has no experts", model.name),
               num(in.moe_router_groups.value_or(in.moe_router_group_topk.value_or(0))));
  plan.moe_router_groups = in.moe_router_groups.value_or(static_cast<int>(model.expert_groups));
  // Groups given without their top-k take none (refused below), not the model's.
  plan.moe_router_group_topk = in.moe_router_group_topk.value_or(
      in.moe_router_groups ? 0 : static_cast<int>(model.expert_groups_per_token));
  if (auto g = check_expert_groups(model.experts, model.experts_per_token, plan.moe_router_groups,
                                   plan.moe_router_group_topk))
    return bad(g->per_token ? "--moe-router-group-topk" : "--moe-router-num-groups", g->expected,
               num(g->got));
  plan.moe_dispatcher = in.moe_dispatcher.value_or(MoeDispatcher::alltoall);
  if (plan.moe_dispatcher == MoeDispatcher::flex) {
    if (!model.moe())
      return bad("--moe-token-dispatcher-type",
                 fmt::format("alltoall for {}, which has no experts", model.name), "flex");
    // Megatron-LM's flex dispatcher runs over the expert-TP x EP group with top-k x expert TP
    // destinations; commscope's form is the EP group's alone.
    if (plan.expert_tp > 1)
      return bad("--moe-token-dispatcher-type",
                 fmt::format("alltoall with --expert-tensor-parallel-size {} (the flex "
                             "dispatcher is modelled without expert TP)",
                             plan.expert_tp),
                 "flex");
    // Megatron-LM refuses padding with DeepEP; commscope prices every token routed once.
    if (plan.moe_pad_to_capacity)
      return bad("--moe-token-dispatcher-type",
                 "alltoall with --moe-pad-expert-input-to-capacity (DeepEP does not pad)", "flex");
  }
  if (in.moe_routing_imbalance) {
    plan.moe_routing_imbalance = *in.moe_routing_imbalance;
    if (!(plan.moe_routing_imbalance >= 1) || plan.moe_routing_imbalance > plan.ep)
      return bad("--moe-routing-imbalance",
                 fmt::format("a factor from 1 (even) to EP = {} (all tokens on one rank)", plan.ep),
                 num(plan.moe_routing_imbalance));
  }
  return {};
}

Status check_optimizer_precision(const PlanInput& in, Precision precision) {
  // The state dtypes need the flag (Megatron-Core's OptimizerConfig asserts fp32 otherwise), and
  // the flag mixed precision around them.
  const bool on = in.precision_aware_optimizer.value_or(false);
  const std::pair<const char*, const std::optional<DType>*> state_flags[] = {
      {"--exp-avg-dtype", &in.exp_avg_dtype},
      {"--exp-avg-sq-dtype", &in.exp_avg_sq_dtype},
      {"--main-params-dtype", &in.main_params_dtype},
      {"--main-grads-dtype", &in.main_grads_dtype}};
  for (const auto& [flag, value] : state_flags)
    if (value->has_value() && **value != DType::fp32 && !on)
      return bad(flag, "fp32 without --use-precision-aware-optimizer",
                 std::string(to_string(**value)));
  if (on && precision == Precision::fp32)
    return bad("--use-precision-aware-optimizer", "bf16 or fp16 mixed precision", "fp32");
  // Megatron-LM's rules (arguments.py): bf16 main gradients only under bf16, and not with the
  // fp32 accumulation and reduction that --grad-comm-dtype fp32 stands for
  // (--accumulate-allreduce-grads-in-fp32 asserts fp32 main gradients).
  const DType main_grads = in.main_grads_dtype.value_or(DType::fp32);
  if (main_grads != DType::fp32) {
    if (precision != Precision::bf16)
      return bad("--main-grads-dtype", "fp32 unless --precision bf16",
                 std::string(to_string(main_grads)));
    if (in.grad_comm_dtype && *in.grad_comm_dtype == DType::fp32)
      return bad("--main-grads-dtype",
                 "fp32 with --grad-comm-dtype fp32 (Megatron-LM's "
                 "--accumulate-allreduce-grads-in-fp32 asserts it)",
                 std::string(to_string(main_grads)));
  }
  return {};
}

Result<Scenario> resolve_scenario(ModelSpec model, SystemSpec system, NetworkProtocol network,
                                  const PlanInput& in) {
  Scenario sc;
  auto& plan = sc.plan;
  auto& warn = sc.warnings;
  const int gpn = system.node.gpus;
  warn = model.notes;  // what the model's loader assumed (transformers' defaults)

  // ---- model overrides ----
  if (in.seq_length) {
    if (*in.seq_length <= 0) return bad("--seq-length", "a positive integer", num(*in.seq_length));
    model.seq_length = *in.seq_length;
  }
  if (in.decoder_seq_length) {
    if (*in.decoder_seq_length <= 0 || model.kind != ArchKind::t5)
      return bad("--decoder-seq-length", "a positive integer, for an encoder-decoder model",
                 num(*in.decoder_seq_length));
    model.decoder_seq_length = *in.decoder_seq_length;
  }
  if (Status st = validate_model(model, "model '" + model.name + "'"); !st.ok()) {
    // A length a flag gave is the flag's error (it was blamed on the model's field: "model
    // 'bert-base': field 'seq_length': expected at most max_positions (512)", found by probing,
    // 2026-11-30).
    const std::string& msg = st.error().message;
    for (auto [field, flag, given] :
         {std::tuple{"field 'seq_length': ", "--seq-length", in.seq_length.has_value()},
          std::tuple{"field 'decoder_seq_length': ", "--decoder-seq-length",
                     in.decoder_seq_length.has_value()}})
      if (const auto at = msg.find(field); given && at != std::string::npos)
        return Error{fmt::format("{}: {} (model {})", flag,
                                 msg.substr(at + std::string_view(field).size()), model.name)};
    return st.error();
  }

  // ---- sizes ----
  plan.tp = in.tp.value_or(1);
  plan.pp = in.pp.value_or(1);
  plan.virtual_stages = in.virtual_stages.value_or(1);
  // Megatron infers the virtual stages from a layout: its stages over PP.
  std::optional<PipelineLayout> layout;
  if (in.pipeline_layout) {
    auto parsed = parse_pipeline_layout(*in.pipeline_layout);
    if (!parsed) return Error{"--pipeline-model-parallel-layout: " + parsed.error().message};
    layout = std::move(*parsed);
  }
  if (layout && !in.virtual_stages && plan.pp >= 1) {
    const auto stages = static_cast<std::int64_t>(layout->stages.size());
    if (stages % plan.pp != 0)
      return bad(
          "--pipeline-model-parallel-layout",
          fmt::format("a number of stages divisible by the pipeline-parallel size {}", plan.pp),
          fmt::format("{} stages", stages));
    plan.virtual_stages = static_cast<int>(std::min<std::int64_t>(stages / plan.pp, INT32_MAX));
  }
  // Megatron-LM's layers per model chunk: the virtual stages are the layers (the embedding and
  // loss counted where the split counts them) per pipeline stage over it (arguments.py).
  if (in.layers_per_virtual_stage) {
    const char* flag = "--num-layers-per-virtual-pipeline-stage";
    const int per = *in.layers_per_virtual_stage;
    if (in.virtual_stages || in.pipeline_layout)
      return bad(flag,
                 "no --vp (--num-virtual-stages-per-pipeline-rank) or "
                 "--pipeline-model-parallel-layout beside it (Megatron-LM takes one of the three)",
                 "both");
    if (in.stage_layers || in.first_stage_layers || in.last_stage_layers)
      return bad(flag,
                 "no per-stage layer counts beside it (Megatron-LM asks for "
                 "--num-virtual-stages-per-pipeline-rank with uneven stages)",
                 "both");
    const std::int64_t units = std::int64_t{model.layers()} + split_extra_layers(in);
    if (per < 1 || plan.pp < 1 || units % plan.pp != 0 || (units / plan.pp) % per != 0)
      return bad(
          flag,
          fmt::format("a divisor of the {} layers per pipeline stage ({} layers{} over "
                      "PP {})",
                      plan.pp >= 1 && units % plan.pp == 0 ? units / plan.pp : 0, units,
                      units != model.layers() ? ", the embedding and loss counted" : "", plan.pp),
          num(per));
    plan.virtual_stages = static_cast<int>(units / plan.pp / per);
  }
  if (plan.tp < 1) return bad("--tensor-model-parallel-size", "a positive integer", num(plan.tp));
  if (plan.pp < 1) return bad("--pipeline-model-parallel-size", "a positive integer", num(plan.pp));
  if (plan.virtual_stages < 1)
    return bad("--virtual-pipeline-stages", "a positive integer", num(plan.virtual_stages));
  // Sizes within the limits (spec/limits.h) before any product of them is formed.
  constexpr std::string_view gpu_why = "GPUs in one job, commscope's limit";
  CS_RETURN_IF_ERROR(
      limits::check_at_most("--tensor-model-parallel-size", plan.tp, limits::kMaxGpus, gpu_why));
  CS_RETURN_IF_ERROR(limits::check_at_most("--pipeline-model-parallel-size", plan.pp,
                                           model.layers(), "the model's layer count"));
  CS_RETURN_IF_ERROR(limits::check_at_most("--virtual-pipeline-stages", plan.virtual_stages,
                                           model.layers(), "the model's layer count"));
  if (in.gpus)
    CS_RETURN_IF_ERROR(limits::check_at_most("--gpus", *in.gpus, limits::kMaxGpus, gpu_why));
  if (in.nodes)
    CS_RETURN_IF_ERROR(limits::check_at_most("--nodes", *in.nodes, limits::kMaxGpus, gpu_why));
  if (in.dp) CS_RETURN_IF_ERROR(limits::check_at_most("--dp", *in.dp, limits::kMaxGpus, gpu_why));
  if (in.micro_batch)
    CS_RETURN_IF_ERROR(limits::check_at_most("--micro-batch-size", *in.micro_batch,
                                             limits::kMaxMicroBatch,
                                             "samples per micro-batch, commscope's limit"));
  if (in.global_batch)
    CS_RETURN_IF_ERROR(limits::check_at_most("--global-batch-size", *in.global_batch,
                                             limits::kMaxGlobalBatch,
                                             "samples per iteration, commscope's limit"));
  if (in.grad_accum)
    CS_RETURN_IF_ERROR(limits::check_at_most("--gradient-accumulation-steps", *in.grad_accum,
                                             limits::kMaxMicroBatches,
                                             "micro-batches per iteration, commscope's limit"));

  // TP must split the heads: checked before the GPU count, which TP also enters.
  if (model.heads % plan.tp != 0)
    return bad("--tensor-model-parallel-size",
               fmt::format("a divisor of the {} attention heads of {}", model.heads, model.name),
               num(plan.tp));
  if (model.kv_heads % plan.tp != 0)
    return bad("--tensor-model-parallel-size",
               fmt::format("a divisor of the {} key/value heads of {}", model.kv_heads, model.name),
               num(plan.tp));
  int gpus = 0, nodes = 0;
  // A given DP is the data-parallel size without CP (world = DP x TP x CP x PP, as Megatron-LM
  // and torchtitan count it; --dp beside --cp was refused, and torchtitan's shard degree with
  // CP with it, found 2026-11-30). Checked for its sign in resolve_context_expert.
  const int cp_given = std::max(1, in.cp.value_or(1));
  if (in.nodes && *in.nodes < 1) return bad("--nodes", "a positive integer", num(*in.nodes));
  if (in.gpus && *in.gpus < 1) return bad("--gpus", "a positive integer", num(*in.gpus));
  // before the GPU count is derived from it (a DP of 0 would make no nodes)
  if (in.dp && *in.dp < 1) return bad("--dp", "a positive integer", num(*in.dp));
  if (in.gpus && in.nodes) {
    gpus = *in.gpus;
    nodes = *in.nodes;
    if (gpus % nodes != 0 || gpus / nodes > gpn)
      return bad("--gpus",
                 fmt::format("a multiple of --nodes {} with at most {} GPUs per node on {}", nodes,
                             gpn, system.name),
                 num(gpus));
  } else if (in.gpus) {
    gpus = *in.gpus;
    nodes = (gpus + gpn - 1) / gpn;
    if (gpus > gpn && gpus % gpn != 0)
      return bad(
          "--gpus",
          fmt::format("at most {} or a multiple of {} (GPUs per {} node)", gpn, gpn, system.name),
          num(gpus));
  } else if (in.dp) {
    const std::int64_t product = std::int64_t{*in.dp} * plan.tp * plan.pp * cp_given;
    if (product > limits::kMaxGpus)
      return bad(
          "--dp",
          fmt::format("DP x TP x CP x PP at most {} GPUs (commscope's limit)", limits::kMaxGpus),
          fmt::format("{} x {} x {} x {} = {}", *in.dp, plan.tp, cp_given, plan.pp, product));
    gpus = static_cast<int>(product);
    nodes = in.nodes.value_or((gpus + gpn - 1) / gpn);
    // As --gpus with --nodes: whole GPUs per node, at most the node's (DP 3 on 2 nodes was
    // "2 nodes x 1 GPU = 3", DP 12 on 2 four-GPU nodes "2 nodes x 6 GPUs"; found 2026-11-30).
    if (in.nodes && (gpus % nodes != 0 || gpus / nodes > gpn))
      return bad("--dp",
                 fmt::format("DP x TP x {}PP a multiple of --nodes {} with at most {} GPUs per "
                             "node on {}",
                             cp_given > 1 ? "CP x " : "", nodes, gpn, system.name),
                 fmt::format("{} GPUs", gpus));
  } else {
    nodes = in.nodes.value_or(1);
    const std::int64_t all = std::int64_t{nodes} * gpn;
    if (all > limits::kMaxGpus)
      return bad("--nodes",
                 fmt::format("at most {} GPUs in all (commscope's limit; {} GPUs per {} node)",
                             limits::kMaxGpus, gpn, system.name),
                 fmt::format("{} nodes = {} GPUs", nodes, all));
    gpus = static_cast<int>(all);
  }
  if (system.max_nodes > 0 && nodes > system.max_nodes)
    warn.push_back(
        fmt::format("{} nodes requested; {} has {} nodes", nodes, system.name, system.max_nodes));
  sc.nodes = nodes;
  sc.gpus_per_node = gpus / nodes;

  if (in.dp) {
    plan.dp = *in.dp;
    if (plan.dp < 1) return bad("--dp", "a positive integer", num(plan.dp));
    if (std::int64_t{plan.dp} * plan.tp * plan.pp * cp_given != gpus)
      return bad("--dp",
                 cp_given > 1 ? fmt::format("DP x TP x CP x PP = the GPU count {} (TP {} x CP {} "
                                            "x PP {})",
                                            gpus, plan.tp, cp_given, plan.pp)
                              : fmt::format("DP x TP x PP = the GPU count {} (TP {} x PP {})", gpus,
                                            plan.tp, plan.pp),
                 fmt::format("DP {} (product {})", plan.dp,
                             std::int64_t{plan.dp} * plan.tp * plan.pp * cp_given));
    plan.dp *= cp_given;  // the DP x CP ranks; resolve_context_expert takes CP's share
  } else {
    if (gpus % (plan.tp * plan.pp) != 0)
      return bad(
          "--gpus",
          fmt::format("a multiple of TP x PP = {} x {} = {}", plan.tp, plan.pp, plan.tp * plan.pp),
          fmt::format("{} GPUs", gpus));
    plan.dp = gpus / (plan.tp * plan.pp);
  }

  CS_RETURN_IF_ERROR(resolve_context_expert(in, model, plan));

  // ---- tensor parallel ----
  // Megatron pads the vocabulary to a multiple of 128 x TP (--make-vocab-size-divisible-by 128,
  // megatron/training/tokenizer _vocab_size_with_padding) at any TP: under --framework megatron
  // always, otherwise where TP would not divide it (the frameworks that shard the embedding
  // without padding need a vocabulary TP divides).
  const bool megatron_pads = in.framework.value_or(Framework::none) == Framework::megatron &&
                             model.vocab % (128LL * plan.tp) != 0;
  if (model.vocab % plan.tp != 0 || megatron_pads) {
    std::int64_t unit = 128LL * plan.tp;
    std::int64_t padded = (model.vocab + unit - 1) / unit * unit;
    warn.push_back(
        fmt::format("vocabulary {} padded to {} (a multiple of 128 x TP {}), as Megatron does",
                    model.vocab, padded, plan.tp));
    model.vocab = padded;
  }
  plan.sequence_parallel = in.sequence_parallel.value_or(false);
  if (plan.sequence_parallel && plan.tp == 1) {
    warn.push_back("--sequence-parallel has no effect with tensor-parallel size 1; turned off");
    plan.sequence_parallel = false;
  }
  // Sequence parallelism splits each rank's sequence (s / CP) evenly over the TP ranks
  // (Megatron-Core's _split_along_first_dim asserts "First dimension of the tensor should be
  // divisible by tensor parallel size"); one TP does not divide was accepted and its shard
  // floored (t5-base's 114-token decoder at TP 4, found 2026-11-30).
  if (plan.sequence_parallel)
    for (std::int64_t s : {model.seq_length, model.dec_seq()})
      if (s % (std::int64_t{plan.cp} * plan.tp) != 0)
        return bad("--sequence-parallel",
                   fmt::format("TP x CP = {} x {} to divide the sequence length {} (each TP rank "
                               "holds an equal shard, as Megatron-Core asserts)",
                               plan.tp, plan.cp, s),
                   fmt::format("{} tokens", s));
  // Megatron-LM refuses --tp-comm-overlap without sequence parallelism (arguments.py:
  // "Tensor parallel communication/GEMM overlap can happen only when sequence parallelism is
  // enabled"); with TP 1 there is nothing to overlap.
  plan.tp_comm_overlap = in.tp_comm_overlap.value_or(false);
  plan.cross_entropy = in.cross_entropy.value_or(CrossEntropy::vocab_parallel);
  if (plan.tp_comm_overlap && plan.tp > 1 && !plan.sequence_parallel)
    return bad("--tp-comm-overlap",
               "--sequence-parallel with it (Megatron-LM overlaps only "
               "sequence-parallel all-gathers and reduce-scatters)",
               "TP " + num(plan.tp) + " without sequence parallelism");
  if (plan.tp_comm_overlap && plan.tp == 1) {
    warn.push_back("--tp-comm-overlap has no effect with tensor-parallel size 1; turned off");
    plan.tp_comm_overlap = false;
  }
  if (plan.tp > sc.gpus_per_node)
    warn.push_back(fmt::format(
        "tensor-parallel size {} exceeds the {} GPUs per node: every TP all-reduce crosses the "
        "network (the seeds advise TP within a node)",
        plan.tp, sc.gpus_per_node));

  // ---- pipeline ----
  const int layers = model.layers();
  plan.schedule =
      in.schedule.value_or(plan.virtual_stages > 1 ? Schedule::interleaved : Schedule::one_f_one_b);
  if (plan.schedule == Schedule::interleaved && plan.virtual_stages < 2)
    return bad("--virtual-pipeline-stages", "2 or more for the interleaved schedule",
               num(plan.virtual_stages));
  if (plan.schedule != Schedule::interleaved && plan.virtual_stages > 1)
    return bad("--schedule", "interleaved when --virtual-pipeline-stages is above 1",
               std::string(to_string(plan.schedule)));
  if (plan.virtual_stages > 1 && plan.pp < 2)
    return bad("--virtual-pipeline-stages", "1 without pipeline parallelism (PP 1)",
               num(plan.virtual_stages));
  const bool uneven_stages = in.stage_layers || in.pipeline_layout || in.first_stage_layers ||
                             in.last_stage_layers || (plan.pp > 1 && split_extra_layers(in) > 0);
  if (!uneven_stages && layers % (plan.pp * plan.virtual_stages) != 0)
    return bad(
        plan.virtual_stages > 1 ? "--virtual-pipeline-stages" : "--pipeline-model-parallel-size",
        fmt::format("PP x virtual stages to divide the {} layers of {}", layers, model.name),
        fmt::format("{} x {} = {}", plan.pp, plan.virtual_stages, plan.pp * plan.virtual_stages));
  // The seeds' rule for model parallelism: PP at least the number of nodes a model replica
  // spans (which keeps TP inside a node).
  const int replica_nodes = (plan.tp * plan.pp + sc.gpus_per_node - 1) / sc.gpus_per_node;
  if (replica_nodes > 1 && plan.pp < replica_nodes)
    warn.push_back(fmt::format(
        "pipeline-parallel size {} is smaller than the {} nodes one model replica spans: the seeds "
        "advise PP of at least that node count, with TP inside a node",
        plan.pp, replica_nodes));

  // ---- ZeRO ----
  plan.zero = in.zero.value_or(0);
  if (plan.zero < 0 || plan.zero > 3) return bad("--zero", "0, 1, 2 or 3", num(plan.zero));
  if (plan.zero >= 2 && plan.pp > 1)
    return bad("--zero",
               "0 or 1 with pipeline parallelism (DeepSpeed allows ZeRO-2/3 only without PP)",
               num(plan.zero));
  if (plan.zero > 0 && plan.dp == 1)
    warn.push_back(fmt::format("ZeRO-{} with data-parallel size 1 shards nothing", plan.zero));

  // ---- batch ----
  plan.micro_batch = in.micro_batch.value_or(1);
  // No micro-batch, but a global batch and an accumulation: the micro-batch they fix, as
  // DeepSpeed derives train_micro_batch_size_per_gpu (deepspeed/runtime/config.py).
  if (!in.micro_batch && in.global_batch && in.grad_accum && *in.grad_accum >= 1) {
    const std::int64_t per_micro = *in.grad_accum * plan.dp;
    if (*in.global_batch < 1 || *in.global_batch % per_micro != 0)
      return bad("--global-batch-size",
                 fmt::format("a multiple of gradient accumulation x data-parallel size = {} x {} "
                             "= {} (no micro-batch given: it is derived from them)",
                             *in.grad_accum, plan.dp, per_micro),
                 num(*in.global_batch));
    plan.micro_batch = *in.global_batch / per_micro;
  }
  if (plan.micro_batch < 1)
    return bad("--micro-batch-size", "a positive integer", num(plan.micro_batch));
  if (plan.micro_batch * model.seq_length > limits::kMaxTokensPerMicroBatch)  // messages only then
    return limits::check_at_most(
               "--micro-batch-size", plan.micro_batch * model.seq_length,
               limits::kMaxTokensPerMicroBatch,
               fmt::format("tokens per micro-batch: micro-batch x sequence length {}, "
                           "commscope's limit",
                           model.seq_length))
        .error();
  // (torchtitan's pipeline splits each accumulation step's local batch into micro-batches:
  // checked before the global batch against them, which a micro-batch flag would fail first)
  if (in.local_batch && in.framework.value_or(Framework::none) == Framework::fsdp && plan.pp > 1 &&
      *in.local_batch % plan.micro_batch != 0)
    return bad("--micro-batch-size",
               fmt::format("a divisor of the local batch of {} (torchtitan splits each "
                           "accumulation step's local batch into the pipeline's micro-batches)",
                           *in.local_batch),
               num(plan.micro_batch));
  const std::int64_t per_step = plan.micro_batch * plan.dp;
  if (in.global_batch) {
    plan.global_batch = *in.global_batch;
    if (plan.global_batch < 1 || plan.global_batch % per_step != 0)
      return bad("--global-batch-size",
                 fmt::format("a multiple of micro-batch x data-parallel size = {} x {} = {}",
                             plan.micro_batch, plan.dp, per_step),
                 num(plan.global_batch));
    plan.grad_accum = plan.global_batch / per_step;
    if (in.grad_accum && *in.grad_accum != plan.grad_accum)
      return bad("--gradient-accumulation-steps",
                 fmt::format("global batch / (micro-batch x DP) = {} / {} = {}", plan.global_batch,
                             per_step, plan.grad_accum),
                 num(*in.grad_accum));
  } else {
    plan.grad_accum = in.grad_accum.value_or(1);
    if (plan.grad_accum < 1)
      return bad("--gradient-accumulation-steps", "a positive integer", num(plan.grad_accum));
    plan.global_batch = per_step * plan.grad_accum;
  }
  if (plan.global_batch > limits::kMaxGlobalBatch)
    return limits::check_at_most(
               "--global-batch-size", plan.global_batch, limits::kMaxGlobalBatch,
               fmt::format("samples per iteration, micro-batch {} x DP {} x {} micro-batches; "
                           "commscope's limit",
                           plan.micro_batch, plan.dp, plan.grad_accum))
        .error();
  CS_RETURN_IF_ERROR(limits::check_at_most(
      in.global_batch ? "--global-batch-size" : "--gradient-accumulation-steps", plan.grad_accum,
      limits::kMaxMicroBatches, "micro-batches per iteration, commscope's limit"));
  {
    const std::int64_t tasks = std::int64_t{plan.pp} * plan.virtual_stages * plan.grad_accum;
    if (tasks > limits::kMaxPipelineTasks)
      return bad(
          in.global_batch ? "--global-batch-size" : "--gradient-accumulation-steps",
          fmt::format("PP x virtual stages x micro-batches at most {} (commscope's limit)",
                      limits::kMaxPipelineTasks),
          fmt::format("{} x {} x {} = {}", plan.pp, plan.virtual_stages, plan.grad_accum, tasks));
  }
  // A torchtitan job's local batch (PlanInput::local_batch): its train.py asserts the global
  // batch a multiple of local x DP, and runs global / (local x DP) accumulation steps, each
  // under PP a pipeline schedule of its own (pipeline_parallel.py: one pp_schedule.step() a
  // step, of local / micro-batch micro-batches): ParallelPlan::pipeline_rounds. torchtitan's
  // rules, for its FSDP2 runs: a --framework flag other than fsdp beside the file runs as that
  // framework does (one schedule).
  if (in.local_batch && in.framework.value_or(Framework::none) == Framework::fsdp) {
    const std::int64_t local_step = *in.local_batch * plan.dp;
    if (plan.global_batch % local_step != 0)
      return bad("--global-batch-size",
                 fmt::format("a multiple of local_batch_size x data-parallel size = {} x {} = {} "
                             "(torchtitan's rule)",
                             *in.local_batch, plan.dp, local_step),
                 num(plan.global_batch));
    if (plan.pp > 1) plan.pipeline_rounds = plan.global_batch / local_step;
  }
  // torchtitan's interleaved schedule is PyTorch's ScheduleInterleaved1F1B: of a schedule's n
  // micro-batches it runs max(1, n / PP) rounds of n / rounds (n a multiple of the rounds, or
  // it raises), each chunk taking its turn for a round's micro-batches; Megatron's order with
  // that group in place of PP (ParallelPlan::interleave_group).
  const bool pytorch_interleaved = plan.schedule == Schedule::interleaved && in.local_batch &&
                                   in.framework.value_or(Framework::none) == Framework::fsdp;
  if (pytorch_interleaved) {
    const std::int64_t n = plan.microbatches_per_round();
    const std::int64_t turns = std::max<std::int64_t>(1, n / plan.pp);
    if (n % turns != 0)
      return bad("local_batch_size",
                 fmt::format("micro-batches per pipeline schedule a multiple of their round count "
                             "max(1, n / PP) = {} (PyTorch's ScheduleInterleaved1F1B raises "
                             "otherwise)",
                             turns),
                 fmt::format("{} ({} micro-batches of {})", *in.local_batch, n, plan.micro_batch));
    if (n / turns != plan.pp) plan.interleave_group = static_cast<int>(n / turns);
  }
  if (plan.schedule == Schedule::interleaved && !pytorch_interleaved &&
      plan.grad_accum % plan.pp != 0)
    return bad(
        "--global-batch-size",
        fmt::format("a multiple of micro-batch x DP x PP = {} x {} x {} = {} for the "
                    "interleaved schedule (micro-batches per iteration a multiple of PP, "
                    "as Megatron requires)",
                    plan.micro_batch, plan.dp, plan.pp, plan.micro_batch * plan.dp * plan.pp),
        fmt::format("{} (micro-batches per iteration: {})", plan.global_batch, plan.grad_accum));
  if (plan.pp > 1 && plan.microbatches_per_round() < plan.pp)
    warn.push_back(fmt::format("{} micro-batch{} {}for {} pipeline stages: the bubble dominates",
                               plan.microbatches_per_round(),
                               plan.microbatches_per_round() == 1 ? "" : "es",
                               plan.pipeline_rounds > 1 ? "per schedule " : "", plan.pp));

  // ---- the rest ----
  plan.precision = in.precision.value_or(Precision::bf16);
  // torchtitan (distributed/utils.py maybe_enable_amp): mixed precision only under FSDP or CP;
  // TP or PP alone trains in fp32, with its warning "Mixed precision training with TP or PP is
  // only supported when FSDP/HSDP/CP is enabled".
  if (in.amp_needs_fsdp.value_or(false) && plan.precision != Precision::fp32 && plan.dp == 1 &&
      plan.cp == 1 && (plan.tp > 1 || plan.pp > 1)) {
    warn.push_back(fmt::format(
        "torchtitan trains this plan in fp32: its mixed precision needs FSDP (a shard degree "
        "above 1) or CP, and TP {} x PP {} has neither (maybe_enable_amp)",
        plan.tp, plan.pp));
    plan.precision = Precision::fp32;
  }
  if (plan.precision == Precision::bf16 && system.gpu.peak.bf16.value() <= 0)
    return bad("--precision", fmt::format("fp16 or fp32 ({} has no bfloat16)", system.gpu.name),
               "bf16");
  plan.recompute = in.recompute.value_or(Recompute::none);
  // Megatron-Core's --recompute-modules: read under selective granularity only, and
  // mla_up_proj only with latent attention (transformer_config.py raises otherwise).
  if (in.recompute_modules) {
    if (plan.recompute != Recompute::selective)
      return bad("--recompute-modules", "--recompute-granularity selective",
                 std::string(to_string(plan.recompute)));
    if ((*in.recompute_modules & recompute_module::mla_up_proj) && !model.mla())
      return bad("--recompute-modules",
                 "mla_up_proj only with multi-latent attention (kv_lora_rank in the model)",
                 model.name);
    plan.recompute_modules = *in.recompute_modules;
  }
  // torchtitan's layer interval k (selective_ac_option): every k-th block of each model chunk,
  // counted against this plan's chunk of layers / (PP x VP) as Megatron's block method; no block
  // where the chunk has fewer than k, and every block at k 1.
  if (in.recompute_layer_interval) {
    const int k = *in.recompute_layer_interval;
    if (in.recompute_block || in.recompute_num_layers)
      return bad("--recompute-num-layers",
                 "no torchtitan layer interval (selective_ac_option) beside it",
                 fmt::format("selective_ac_option \"{}\"", k));
    if (k < 1 || k > limits::kMaxLayers)
      return bad("selective_ac_option",
                 fmt::format("a layer interval from 1 to {}", limits::kMaxLayers), num(k));
    if (plan.recompute != Recompute::full)
      return bad("selective_ac_option", "full recompute of the blocks it names",
                 std::string(to_string(plan.recompute)));
    const int per_chunk = layers / (plan.pp * plan.virtual_stages);
    const int every = per_chunk / k;
    if (every == 0)
      plan.recompute = Recompute::none;
    else if (every < per_chunk)
      plan.recompute_block_layers = every;
  }
  // Megatron's --recompute-method and --recompute-num-layers: read under full granularity
  // only. uniform replays every block, grouped N at a time, keeping one input per group;
  // block replays the first N blocks of each model chunk.
  if (in.recompute_block || in.recompute_num_layers) {
    const char* flag = in.recompute_block ? "--recompute-method" : "--recompute-num-layers";
    if (plan.recompute != Recompute::full)
      return bad(flag, "--recompute-granularity full", std::string(to_string(plan.recompute)));
    const int n = in.recompute_num_layers.value_or(1);
    if (n < 1) return bad("--recompute-num-layers", "a number of blocks of at least 1", num(n));
    if (!in.recompute_block.value_or(false)) {
      if (n > limits::kMaxLayers)
        return bad("--recompute-num-layers",
                   fmt::format("at most {} blocks a group", limits::kMaxLayers), num(n));
      plan.recompute_uniform_layers = n;
    } else {
      plan.recompute_block_layers = n;
    }
  }
  if (Status st = check_optimizer_precision(in, plan.precision); !st.ok()) return st.error();
  plan.precision_aware_optimizer = in.precision_aware_optimizer.value_or(false);
  plan.exp_avg_dtype = in.exp_avg_dtype.value_or(DType::fp32);
  plan.exp_avg_sq_dtype = in.exp_avg_sq_dtype.value_or(DType::fp32);
  plan.main_params_dtype = in.main_params_dtype.value_or(DType::fp32);
  plan.main_grads_dtype = in.main_grads_dtype.value_or(DType::fp32);
  if (in.ddp_bucket_mb) {
    if (!(*in.ddp_bucket_mb > 0))
      return bad("--ddp-bucket-size", "a positive size in MiB",
                 fmt::format("{}", *in.ddp_bucket_mb));
    plan.ddp_bucket = units::mib(*in.ddp_bucket_mb);
  }
  // Buckets: each one collective, so the model's parameters in at most kMaxBuckets of them
  // (an allgather_bucket_size of 1 built 6.7e9 collectives for Llama 2 7B and ran out of memory).
  // (the model's size over-counted only where a bucket is given: resolve is on the sweeps' path)
  auto few_enough = [&](const char* field, double elements, const std::string& got,
                        bool mib = false) -> Status {
    const double most_params = parameters_at_most(model);
    const double least_bucket = std::ceil(most_params / static_cast<double>(limits::kMaxBuckets));
    if (elements >= least_bucket) return {};
    return bad(field,
               fmt::format("at least {} (a bound of {:.3g} on the model's parameters in at "
                           "most {} buckets, commscope's limit)",
                           mib ? fmt::format("{:.3g} MiB", least_bucket * 4 / (1 << 20))
                               : fmt::format("{:.0f} elements", least_bucket),
                           most_params, limits::kMaxBuckets),
               got);
  };
  if (in.ddp_bucket_mb)
    CS_RETURN_IF_ERROR(few_enough("--ddp-bucket-size", plan.ddp_bucket.value() / 4,  // fp32
                                  fmt::format("{} MiB", *in.ddp_bucket_mb), /*mib=*/true));
  if (in.zero_reduce_bucket) {
    if (*in.zero_reduce_bucket < 1)
      return bad("reduce_bucket_size", "a positive element count", num(*in.zero_reduce_bucket));
    CS_RETURN_IF_ERROR(few_enough("reduce_bucket_size", static_cast<double>(*in.zero_reduce_bucket),
                                  num(*in.zero_reduce_bucket)));
    plan.zero_reduce_bucket = *in.zero_reduce_bucket;
  }
  if (in.zero_allgather_bucket) {
    if (*in.zero_allgather_bucket < 1)
      return bad("allgather_bucket_size", "a positive element count",
                 num(*in.zero_allgather_bucket));
    CS_RETURN_IF_ERROR(few_enough("allgather_bucket_size",
                                  static_cast<double>(*in.zero_allgather_bucket),
                                  num(*in.zero_allgather_bucket)));
    plan.zero_allgather_bucket = *in.zero_allgather_bucket;
  }
  // DeepSpeed's overlap_comm defaults to on at stage 3 only (DeepSpeedZeroConfig
  // overlap_comm_valid: stage == weights); it was on at every stage (found by probing,
  // 2026-11-30). Elsewhere, as Megatron-LM's --overlap-grad-reduce and PyTorch's DDP/FSDP, on.
  plan.overlap_grad_reduce = in.overlap_grad_reduce.value_or(
      !(in.framework.value_or(Framework::none) == Framework::deepspeed && plan.zero < 3));
  plan.overlap_param_gather = in.overlap_param_gather.value_or(true);
  plan.rank_order = in.rank_order.value_or(RankOrder::tp_dp_pp);
  // The gradients' wire type first: Megatron's buffer holds its gradients in it
  // (megatron_grad_buffer_dtype, which sizes --ddp-bucket-size's buckets); resolve_compression
  // checks it below.
  plan.grad_comm_dtype = in.grad_comm_dtype;
  CS_RETURN_IF_ERROR(resolve_framework(in, plan, warn));
  // Megatron-Core's precision-aware optimizer exists only beside its distributed optimizer
  // (megatron/core/optimizer/__init__.py raises otherwise): commscope's ZeRO or Megatron's, not
  // DeepSpeed's or FSDP's optimizers.
  if (plan.precision_aware_optimizer) {
    if (plan.framework == Framework::deepspeed || plan.framework == Framework::fsdp)
      return bad("--use-precision-aware-optimizer",
                 "Megatron-Core's distributed optimizer (commscope's pattern or --framework "
                 "megatron)",
                 fmt::format("--framework {}", to_string(plan.framework)));
    if (plan.zero < 1)
      return bad("--use-precision-aware-optimizer",
                 "a sharded optimizer (--use-distributed-optimizer, or ZeRO 1 or more)",
                 fmt::format("ZeRO {}", plan.zero));
    if (in.main_grads_dtype && plan.framework != Framework::megatron)
      warn.push_back(fmt::format(
          "--main-grads-dtype {} has no effect outside --framework megatron: commscope's own "
          "pattern keeps 16-bit gradients (their wire type is --grad-comm-dtype's)",
          to_string(plan.main_grads_dtype)));
  }
  if (plan.fsdp_shard_size > 0) {
    // HSDP's shard groups lie on whole nodes, or a node holds whole shard groups: a shard
    // group of consecutive data-parallel ranks that split a node unevenly is not modelled.
    const int node = grad_dp_ranks_per_node(plan, sc.gpus_per_node);
    const int shard = hsdp_shard_ranks(plan, sc.gpus_per_node);
    if (shard % node != 0 && node % shard != 0)
      return in.fsdp_replicate_size
                 ? bad("--fsdp-replicate-size",
                       fmt::format("replicas whose shard groups are a divisor or a multiple of "
                                   "the {} data-parallel ranks of a node",
                                   node / plan.cp),
                       fmt::format("{} (shard groups of {})", *in.fsdp_replicate_size,
                                   plan.fsdp_shard_size))
                 : bad("--fsdp-shard-size",
                       fmt::format(
                           "a divisor or a multiple of the {} data-parallel ranks of a node",
                           node / plan.cp),
                       num(plan.fsdp_shard_size));
  }
  // HSDP over a MoE model (torchtitan v0.2.2 parallel_dims.py: the sparse mesh pp x
  // dp_replicate x efsdp x ep x etp): EP x expert TP lie inside one shard group's ranks (shard
  // x CP x TP), and the experts' shard group, efsdp of them, lies on whole nodes or a node
  // holds whole ones, as the dense shard group does.
  if (plan.hsdp() && model.moe()) {
    const int ranks = hsdp_shard_ranks(plan, sc.gpus_per_node) * plan.tp;
    const int groups = plan.ep * plan.expert_tp;
    const std::string flag = in.fsdp_replicate_size ? "--fsdp-replicate-size"
                             : in.fsdp_shard_size   ? "--fsdp-shard-size"
                                                    : "--expert-model-parallel-size";
    if (ranks % groups != 0)
      return bad(flag,
                 "a shard group holding whole expert groups (torchtitan's efsdp): its shard x "
                 "CP x TP ranks divisible by EP x expert TP",
                 fmt::format("{} ranks, EP x expert TP {}", ranks, groups));
    const int es = hsdp_expert_shard_ranks(plan, sc.gpus_per_node);
    const int node = expert_dp_ranks_per_node(plan, sc.gpus_per_node);
    if (es % node != 0 && node % es != 0)
      return bad(flag,
                 fmt::format("an expert shard group (efsdp) that is a divisor or a multiple of "
                             "the {} expert-data-parallel ranks of a node",
                             node),
                 fmt::format("efsdp {}", es));
  }
  // Megatron-LM's asynchronous TP all-reduce: its default under --framework megatron.
  plan.tp_async_allreduce =
      plan.tp > 1 && in.tp_async_allreduce.value_or(plan.framework == Framework::megatron);
  CS_RETURN_IF_ERROR(resolve_compression(in, plan, sc.gpus_per_node));  // compressed comm
  CS_RETURN_IF_ERROR(resolve_modern_training(in, model, system, plan, layout));
  // Whose flash kernel says nothing without one (found by probing, 2026-11-30: accepted and
  // ignored in silence). A warning, not an error: CSV rows carry the column for every run.
  if (in.attention_backend && plan.attention == AttentionKernel::standard)
    warn.push_back(fmt::format(
        "--attention-backend {} has no effect with --attention standard (no flash kernel runs)",
        to_string(*in.attention_backend)));
  CS_RETURN_IF_ERROR(resolve_ep_overlap(in, plan));
  CS_RETURN_IF_ERROR(resolve_op_recompute(model, plan));
  // Several pipeline schedules an iteration are torchtitan's; Megatron-Core's combined 1F1B
  // and its interleaved gathers ahead run in one schedule.
  if (plan.pipeline_rounds > 1 && (plan.overlap_moe_ep_comm || plan.megatron_gathers_ahead()))
    return bad(
        plan.overlap_moe_ep_comm ? "--overlap-moe-expert-parallel-comm" : "--overlap-param-gather",
        "one pipeline schedule an iteration (Megatron-Core's)",
        fmt::format("a torchtitan local batch that makes {} schedules", plan.pipeline_rounds));
  // NCCL_ALGO (--nccl-algo; docs/cost-model.md, "NVLS and CollNet").
  if (in.nccl_algo) CS_RETURN_IF_ERROR(apply_nccl_algo(*in.nccl_algo, system.name, system.nccl));

  sc.model = std::move(model);
  sc.system = std::move(system);
  sc.network = std::move(network);
  // The flex dispatcher's copies under group-limited routing need every node's and GPU's
  // experts to be whole groups or inside one (spec/placement.h).
  if (plan.moe_dispatcher == MoeDispatcher::flex && plan.ep > 1 && plan.moe_router_groups > 0) {
    const GroupPlacement g = place_group(sc, CommGroup::expert);
    const std::int64_t E = sc.model.experts;
    if (!expert_groups_align(static_cast<int>(E), plan.moe_router_groups, g))
      return bad("--moe-router-num-groups",
                 fmt::format("groups whose {} experts are a multiple or a divisor of a GPU's {} "
                             "and a node's {} with the flex dispatcher",
                             E / plan.moe_router_groups, E / g.size, E / g.size * g.per_node),
                 num(plan.moe_router_groups));
  }
  return sc;
}

}  // namespace commscope
