// The trainer's options and the checks that run before MPI starts (options.h). No MPI here.
#include "commscope/train/options.h"

#include "commscope/gpt/parallel.h"
#include "commscope/sim/simulator.h"
#include "commscope/train/checkpoint.h"
#include "commscope/util/atomic_file.h"
#include "commscope/util/input_file.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace commscope::train {

std::string_view to_string(Strategy s) {
  switch (s) {
    case Strategy::ddp:
      return "ddp";
    case Strategy::zero1:
      return "zero1";
    case Strategy::zero2:
      return "zero2";
    case Strategy::zero3:
      return "zero3";
  }
  return "?";
}

std::optional<Strategy> strategy_from_name(std::string_view name) {
  for (Strategy s : {Strategy::ddp, Strategy::zero1, Strategy::zero2, Strategy::zero3})
    if (to_string(s) == name) return s;
  return std::nullopt;
}

ModelSpec model_spec(const GptConfig& c, const std::string& name) {
  ModelSpec m;
  m.name = name;
  const bool bert = c.arch == ModelArch::bert;
  m.kind = bert ? ArchKind::bert : ArchKind::gpt;
  (bert ? m.encoder_layers : m.decoder_layers) = c.layers;
  m.type_vocab = bert ? c.type_vocab : 0;
  m.pooler = false;  // BERT: masked-LM only (no next-sentence head)
  m.hidden = c.hidden;
  m.heads = c.heads;
  m.vocab = c.vocab;
  m.seq_length = c.seq;
  m.max_positions = c.max_positions;
  m.tied_embeddings = true;
  m.bias = true;
  m.dropout = false;
  m.position = PositionEmbedding::learned;
  m.norm = NormKind::layernorm;
  m.mlp = MlpKind::gelu;
  m.experts = c.experts;
  m.experts_per_token = c.experts_per_token;
  apply_model_defaults(m);
  m.ffn = 4 * static_cast<std::int64_t>(c.hidden);
  return m;
}

Result<GptConfig> config_from_model(const ModelSpec& m) {
  const std::string where = "--model " + m.name;
  // What the model has that GPT-2's shape (a BERT's too) does not, the first of them (the line
  // said only "got kind gpt" whatever differed, until 2026-12-01).
  const std::string differs =
      m.kind != ArchKind::gpt && m.kind != ArchKind::bert
          ? fmt::format("kind {}", to_string(m.kind))
      : m.position != PositionEmbedding::learned
          ? fmt::format("position embedding {}", to_string(m.position))
      : m.norm != NormKind::layernorm ? fmt::format("norm {}", to_string(m.norm))
      : m.mlp != MlpKind::gelu        ? fmt::format("MLP {}", to_string(m.mlp))
      : !m.tied_embeddings            ? std::string("an untied LM head")
      : !m.bias                       ? std::string("no biases")
      // (the norms were not checked until 2026-12-02: a GPT-2 JSON with them trained without)
      : m.shared_norm         ? std::string("one norm a block (shared_norm)")
      : m.post_norms          ? std::string("norms after the sublayers (post_norms)")
      : m.qk_norm             ? std::string("per-head query and key norms (qk_norm)")
      : m.kv_heads != m.heads ? fmt::format("{} key-value heads for {} heads", m.kv_heads, m.heads)
      : m.ffn != 4 * m.hidden ? fmt::format("MLP width {} (4h is {})", m.ffn, 4 * m.hidden)
      : m.head_dim * m.heads != m.hidden
          ? fmt::format("{} heads of {} channels for hidden {}", m.heads, m.head_dim, m.hidden)
          : std::string();
  if (m.kind == ArchKind::bert && (!differs.empty() || m.pooler || m.type_vocab > 2))
    return Error{fmt::format(
        "{}: expected a BERT the trainer has (learned positions, LayerNorm, GELU MLP of 4h, "
        "biases, tied LM head, at most 2 token types, \"pooler\": false: masked-LM only, "
        "presets/models/bert-tiny-cpu.json); got pooler {}, type_vocab {}",
        where, m.pooler, m.type_vocab)};
  if (m.kind == ArchKind::t5)
    return Error{fmt::format(
        "{}: expected a GPT-2-shaped model or a BERT; T5 trains only in commscope train's "
        "model-parallel trainer (src/gpt/t5.cpp, docs/train.md \"T5\"), got kind t5",
        where)};
  if (!differs.empty())
    return Error{fmt::format(
        "{}: expected a GPT-2-shaped model (learned positions, LayerNorm, GELU MLP of 4h, biases, "
        "tied LM head, no GQA); got {}",
        where, differs)};
  constexpr std::int64_t kInt = 1 << 30;
  if (m.hidden > kInt || m.heads > kInt || m.vocab > kInt || m.seq_length > kInt ||
      m.max_positions > kInt)
    return Error{fmt::format("{}: expected sizes below 2^30, got hidden {}, vocab {}, seq {}",
                             where, m.hidden, m.vocab, m.seq_length)};
  if (m.moe() &&
      (m.kind != ArchKind::gpt || m.shared_experts > 0 || (m.moe_ffn > 0 && m.moe_ffn != m.ffn) ||
       m.first_dense_layers > 0 || m.moe_layer_step != 1))
    return Error{fmt::format(
        "{}: expected the trainer's mixture of experts (a GPT whose every MLP is routed GELU "
        "experts of width 4h, no shared experts, presets/models/gpt2-moe-tiny-cpu.json); got "
        "{} shared experts, moe_ffn {}, {} dense layers first, MoE every {} layers",
        where, m.shared_experts, m.moe_ffn, m.first_dense_layers, m.moe_layer_step)};
  GptConfig c;
  c.experts = static_cast<int>(m.experts);
  c.experts_per_token = static_cast<int>(m.experts_per_token);
  c.layers = m.kind == ArchKind::bert ? m.encoder_layers : m.decoder_layers;
  if (m.kind == ArchKind::bert) {
    c.arch = ModelArch::bert;
    c.type_vocab = static_cast<int>(m.type_vocab);
  }
  c.hidden = static_cast<int>(m.hidden);
  c.heads = static_cast<int>(m.heads);
  c.vocab = static_cast<int>(m.vocab);
  c.seq = static_cast<int>(m.seq_length);
  c.max_positions = static_cast<int>(m.max_positions ? m.max_positions : m.seq_length);
  return c;
}

Status apply_plan(const ScenarioInput& in, TrainOptions& o) {
  const PlanInput& p = in.plan;
  auto refuse = [](std::string_view flag, std::string_view got, std::string_view why) {
    return Error{fmt::format("{}: {}, got {}", flag, why, got)};
  };
  if (p.tp) o.tp = *p.tp;
  if (p.pp) o.pp = *p.pp;
  if (p.virtual_stages) o.vpp = *p.virtual_stages;
  if (p.sequence_parallel) o.sequence_parallel = *p.sequence_parallel;
  if (p.schedule) o.schedule = *p.schedule;
  if (p.rank_order) o.rank_order = *p.rank_order;
  if (p.precision && *p.precision != Precision::fp32)
    return refuse("--precision", std::string(to_string(*p.precision)),
                  "expected fp32: the CPU trainer has no mixed precision (--fp16, --bf16 and "
                  "DeepSpeed's fp16/bf16 sections are refused)");
  if (p.recompute && *p.recompute != Recompute::none)
    return refuse("--recompute-granularity", std::string(to_string(*p.recompute)),
                  "expected none: the CPU trainer keeps every activation");
  if (p.recompute_block || p.recompute_num_layers)
    return Error{
        fmt::format("{}: the CPU trainer keeps every activation (describe and predict model it)",
                    p.recompute_block ? "--recompute-method" : "--recompute-num-layers")};
  if (p.overlap_grad_reduce && !*p.overlap_grad_reduce)
    return Error{
        "--no-overlap-grad-reduce: the CPU trainer always overlaps the gradient "
        "reduction with backward"};
  if (p.overlap_param_gather && !*p.overlap_param_gather)
    return Error{"--no-overlap-param-gather: the CPU trainer always prefetches one module"};
  if (p.cpu_offload_layers && *p.cpu_offload_layers > 0)
    return Error{
        "--cpu-offloading-num-layers: the CPU trainer keeps activations where they are (describe "
        "and predict model the offloading)"};
  if (p.offload_optimizer.value_or(false))
    return Error{
        "--offload-optimizer: the CPU trainer's optimizer already steps in host memory, beside "
        "its weights (describe and predict model DeepSpeed's offload to a GPU's host)"};
  if (p.fsdp_cpu_offload.value_or(false))
    return Error{
        "--fsdp-cpu-offload: the CPU trainer's shards are in host memory already (describe and "
        "predict model PyTorch FSDP's CPU offload)"};
  if (p.offload_param.value_or(false))
    return Error{
        "--offload-param: the CPU trainer's parameters are in host memory already (describe "
        "and predict model DeepSpeed's ZeRO-3 parameter offload)"};
  if (p.mtp_layers && *p.mtp_layers > 0)
    return Error{fmt::format(
        "--mtp-num-layers: expected 0 (the CPU trainer has no multi-token prediction; describe "
        "and predict model it), got {}",
        *p.mtp_layers)};
  if (p.pipe_partitioned && *p.pipe_partitioned)
    return Error{
        "--scatter-gather-tensors-in-pipeline: the CPU trainer sends whole pipeline tensors "
        "(describe and predict model the partitioned ones)"};
  if (p.decoder_seq_length)
    return Error{"--decoder-seq-length: the CPU trainer trains decoder-only GPTs"};
  // Compressed communication: bf16/fp16 data-parallel gradient reductions (both trainers); ZeRO++
  // and PowerSGD / 1-bit Adam are modelled by describe and predict, not run.
  if (p.grad_comm_dtype) {
    if (*p.grad_comm_dtype == DType::fp8)
      return refuse("--grad-comm-dtype", "fp8",
                    "expected fp32, bf16 or fp16: the CPU trainer has no fp8 wire format");
    o.grad_comm_dtype = *p.grad_comm_dtype;
  }
  if (p.zeropp_qwz.value_or(false) || p.zeropp_qgz.value_or(false) || p.zeropp_hpz.value_or(1) > 1)
    return Error{
        "--zero-quantized-weights/--zero-hpz-partition-size/--zero-quantized-gradients: the CPU "
        "trainer does not run ZeRO++ (describe and predict model it)"};
  if (p.grad_compression && *p.grad_compression != GradCompression::none)
    return refuse("--grad-compression", std::string(to_string(*p.grad_compression)),
                  "expected none: the CPU trainer does not run PowerSGD or 1-bit Adam (describe "
                  "and predict model them)");
  // Modern-training plan fields (issue 15) the CPU trainer cannot honour.
  if (p.fp8 && *p.fp8) return Error{"--fp8: the CPU trainer computes in fp32 (no FP8 GEMMs)"};
  // (it was read past, found by probing, 2026-12-02)
  if (p.fp8_param_gather && *p.fp8_param_gather)
    return Error{
        "--fp8-param-gather: the CPU trainer computes in fp32 (no FP8 weights to gather; "
        "describe and predict model it)"};
  if (p.tp_comm_overlap && *p.tp_comm_overlap)
    return Error{
        "--tp-comm-overlap: the CPU trainer runs each tensor-parallel collective between its "
        "GEMMs (describe and predict model the overlap)"};
  // Megatron-LM's asynchronous TP all-reduce: GptShard::column_backward (T5 refuses it below).
  if (p.tp_async_allreduce) o.tp_async_allreduce = *p.tp_async_allreduce;
  // A fused backend given makes the kernel flash, as in describe (it was ignored until
  // 2026-12-01: --attention-backend flash trained the unfused kernels).
  if (p.attention)
    o.flash = *p.attention == AttentionKernel::flash;
  else if (p.attention_backend)
    o.flash = true;
  for (const auto& [given, flag] :
       {std::pair{p.account_embedding.value_or(false), "--account-for-embedding-in-pipeline-split"},
        std::pair{p.account_loss.value_or(false), "--account-for-loss-in-pipeline-split"},
        std::pair{p.layers_per_virtual_stage.has_value(),
                  "--num-layers-per-virtual-pipeline-stage"},
        std::pair{p.pipeline_layout.has_value(), "--pipeline-model-parallel-layout"}})
    if (given)
      return Error{
          fmt::format("{}: the CPU trainer splits its layers by --pipeline-stage-layers or "
                      "--decoder-first/last-pipeline-num-layers (describe and predict take it)",
                      flag)};
  o.stage_layers = p.stage_layers;
  o.first_stage_layers = p.first_stage_layers;
  o.last_stage_layers = p.last_stage_layers;
  // Context parallelism runs as the ring (p2p), all-gather or all-to-all CP; expert parallelism
  // dropless, without expert TP (the capacity factor and a routing imbalance are describe's and
  // predict's).
  if (p.cp) {
    if (*p.cp < 1)
      return refuse("--context-parallel-size", std::to_string(*p.cp), "expected a positive size");
    o.cp = *p.cp;
  }
  if (p.cp_comm_type) o.cp_comm_type = *p.cp_comm_type;
  o.hierarchical_cp_sizes = p.hierarchical_cp_sizes;
  if (p.ep) {
    if (*p.ep < 1)
      return refuse("--expert-model-parallel-size", std::to_string(*p.ep),
                    "expected a positive size");
    o.ep = *p.ep;
  }
  if (p.expert_tp && *p.expert_tp != 1)
    return refuse("--expert-tensor-parallel-size", std::to_string(*p.expert_tp),
                  "expected 1: the CPU trainer's experts are not tensor-parallel");
  // Token dropping: only padded to the capacity, whose all-to-alls have the workload's size
  // whatever the routing (without padding they carry the kept rows, which follow it).
  if (p.moe_capacity_factor && !p.moe_pad_to_capacity.value_or(false))
    return refuse("--moe-expert-capacity-factor", fmt::format("{}", *p.moe_capacity_factor),
                  "expected it with --moe-pad-expert-input-to-capacity: the CPU trainer checks "
                  "its all-to-alls against the workload's size, which only padding makes "
                  "independent of the routing");
  if (p.moe_capacity_factor) o.moe_capacity_factor = *p.moe_capacity_factor;
  if (p.moe_aux_loss_coeff) o.moe_aux_loss_coeff = static_cast<float>(*p.moe_aux_loss_coeff);
  o.moe_pad_to_capacity = p.moe_pad_to_capacity.value_or(false);
  if (p.moe_routing_imbalance)
    return refuse("--moe-routing-imbalance", fmt::format("{}", *p.moe_routing_imbalance),
                  "expected none: the CPU trainer's imbalance is its router's own");
  if (p.moe_dispatcher && *p.moe_dispatcher != MoeDispatcher::alltoall)
    return refuse("--moe-token-dispatcher-type", std::string(to_string(*p.moe_dispatcher)),
                  "expected alltoall: the CPU trainer dispatches with MPI's all-to-allv");
  if (p.overlap_moe_ep_comm.value_or(false) || p.delay_wgrad_compute.value_or(false))
    return refuse(p.overlap_moe_ep_comm.value_or(false) ? "--overlap-moe-expert-parallel-comm"
                                                        : "--delay-wgrad-compute",
                  "on",
                  "expected off: the CPU trainer runs one micro-batch at a time, each "
                  "all-to-all between its layers' compute (describe and predict model the "
                  "combined 1F1B)");
  if (p.moe_router_groups || p.moe_router_group_topk)
    return refuse(p.moe_router_groups ? "--moe-router-num-groups" : "--moe-router-group-topk",
                  std::to_string(p.moe_router_groups.value_or(p.moe_router_group_topk.value_or(0))),
                  "expected none: the CPU trainer's router is not group-limited");
  if (p.zero) {
    if (*p.zero < 0 || *p.zero > 3)
      return refuse("--zero", std::to_string(*p.zero), "expected 0, 1, 2 or 3");
    o.strategy = static_cast<Strategy>(*p.zero);
  }
  // The trainer runs commscope's own collective pattern, its ZeRO stages by --zero (a framework's
  // pattern is refused by train_options). Megatron-LM's distributed optimizer is its ZeRO-1:
  // gradients reduce-scattered and parameters all-gathered over DP, as describe reads ZeRO-1
  // under --framework megatron. A framework's own options were accepted and not applied until
  // 2026-12-01; they are refused, as describe refuses them without their framework.
  if (p.use_distributed_optimizer.value_or(false)) {
    if (p.zero && *p.zero != 1)
      return refuse("--use-distributed-optimizer", fmt::format("--zero {}", *p.zero),
                    "expected ZeRO-1 beside it (Megatron-LM's distributed optimizer is the CPU "
                    "trainer's ZeRO-1)");
    o.strategy = Strategy::zero1;
  }
  // Other plan fields the trainer does not apply (accepted and ignored until 2026-12-01; describe
  // refuses most of them without their framework or mode). FSDP's options stand beside a
  // torchtitan file's FSDP2, which train_options vetted.
  const bool fsdp = p.framework == Framework::fsdp;
  constexpr const char* kFsdp =
      "the CPU trainer does not run FSDP (its own pattern: ZeRO stages by --zero; describe and "
      "predict model FSDP under --framework fsdp)";
  constexpr const char* kDeepSpeed =
      "a term of DeepSpeed's ZeRO-3 under --framework deepspeed, which the CPU trainer does not "
      "run (describe and predict model it)";
  constexpr const char* kAdam =
      "the CPU trainer's AdamW keeps fp32 weights, gradients and moments (describe and predict "
      "model Megatron-Core's precision-aware optimizer)";
  auto not_fp32 = [](const std::optional<DType>& t) { return t && *t != DType::fp32; };
  struct Unrun {
    bool given;
    const char* flag;
    const char* why;
  };
  for (const Unrun& u :
       {Unrun{p.recompute_modules.has_value(), "--recompute-modules",
              "the CPU trainer keeps every activation (describe and predict model recompute)"},
        Unrun{p.optimizer_cpu_offload.value_or(false) || p.optimizer_offload_fraction ||
                  p.overlap_cpu_optimizer_d2h_h2d.value_or(false),
              "--optimizer-cpu-offload",
              "the CPU trainer's optimizer already steps in host memory (describe and predict "
              "model Megatron-Core's HybridDeviceOptimizer)"},
        Unrun{p.precision_aware_optimizer.value_or(false), "--use-precision-aware-optimizer",
              kAdam},
        Unrun{not_fp32(p.exp_avg_dtype), "--exp-avg-dtype", kAdam},
        Unrun{not_fp32(p.exp_avg_sq_dtype), "--exp-avg-sq-dtype", kAdam},
        Unrun{not_fp32(p.main_params_dtype), "--main-params-dtype", kAdam},
        Unrun{not_fp32(p.main_grads_dtype), "--main-grads-dtype", kAdam},
        Unrun{p.nccl_algo.has_value(), "--nccl-algo",
              "the CPU trainer's collectives are Open MPI's, which NCCL_ALGO does not choose "
              "(describe and predict price NCCL's algorithms)"},
        Unrun{!fsdp && p.fsdp_sharding, "--fsdp-sharding", kFsdp},
        Unrun{!fsdp && p.fsdp_wrap, "--fsdp-wrap", kFsdp},
        Unrun{!fsdp && p.fsdp_prefetch, "--fsdp-prefetch", kFsdp},
        Unrun{!fsdp && p.fsdp_grad_sync, "--fsdp-grad-sync", kFsdp},
        Unrun{!fsdp && p.fsdp_limit_all_gathers, "--fsdp-limit-all-gathers", kFsdp},
        Unrun{!fsdp && p.fsdp_shard_size, "--fsdp-shard-size", kFsdp},
        Unrun{!fsdp && p.fsdp_replicate_size, "--fsdp-replicate-size", kFsdp},
        Unrun{p.deepspeed_version.has_value(), "--deepspeed-version", kDeepSpeed},
        Unrun{p.moe_min_capacity.has_value(), "--moe-min-capacity",
              "DeepSpeed-MoE's floor of the capacity under --framework deepspeed, which the CPU "
              "trainer does not run (its capacity is Megatron-LM's)"},
        Unrun{p.zero3_host_s_per_rank_per_call.has_value(), "--zero3-host-per-rank-call",
              kDeepSpeed},
        Unrun{p.zero3_nics_per_group.has_value(), "--zero3-nics-per-group", kDeepSpeed}})
    if (u.given) return Error{fmt::format("{}: {}", u.flag, u.why)};
  if (p.micro_batch) {
    if (*p.micro_batch < 1 || *p.micro_batch > (1 << 20))
      return refuse("--micro-batch-size", std::to_string(*p.micro_batch),
                    "expected a positive integer up to 1048576");
    o.micro_batch = static_cast<int>(*p.micro_batch);
  }
  // 0 is the options' "not given"; given, each must be positive.
  if (p.global_batch && *p.global_batch < 1)
    return refuse("--global-batch-size", std::to_string(*p.global_batch),
                  "expected a positive integer");
  if (p.grad_accum && *p.grad_accum < 1)
    return refuse("--gradient-accumulation-steps", std::to_string(*p.grad_accum),
                  "expected a positive integer");
  if (p.global_batch) o.global_batch = *p.global_batch;
  if (p.local_batch) o.local_batch = *p.local_batch;
  if (p.grad_accum) o.grad_accum = *p.grad_accum;
  if (p.ddp_bucket_mb) o.bucket_mb = *p.ddp_bucket_mb;
  if (p.zero_reduce_bucket) o.zero_reduce_bucket = *p.zero_reduce_bucket;
  if (p.zero_allgather_bucket) o.zero_allgather_bucket = *p.zero_allgather_bucket;
  o.gpus = p.gpus;
  o.dp = p.dp;
  o.nodes = p.nodes;
  o.system = in.system.empty() ? kDefaultSystem : in.system;
  o.network = in.network;

  // Megatron-LM's model flags change the model as they change describe's (they were accepted
  // and not applied until 2026-12-01); the trainer's shape checks below then apply.
  CS_ASSIGN_OR_RETURN(ModelSpec m, load_model(in.model.empty() ? kDefaultModel : in.model,
                                              in.model_flags, p.seq_length.value_or(0)));
  if (m.kind == ArchKind::t5) {  // the model-parallel trainer's T5 (gpt/t5.h)
    Result<T5Config> t5 = t5_config(m);
    if (!t5.ok()) return Error{"--model " + m.name + ": " + t5.error().message};
    o.t5 = *t5;
    GptConfig c;  // T5's sizes, for what reports them (the model itself is o.t5)
    c.layers = t5->encoder_layers + t5->decoder_layers;
    c.hidden = t5->hidden;
    c.heads = t5->heads;
    c.vocab = t5->vocab;
    c.seq = c.max_positions = t5->encoder_seq;
    o.model = c;
  } else {
    CS_ASSIGN_OR_RETURN(GptConfig c, config_from_model(m));
    o.model = c;
  }
  o.model_name = m.name;
  if (p.seq_length) {
    if (*p.seq_length < 1 || *p.seq_length > (1 << 30))
      return refuse("--seq-length", std::to_string(*p.seq_length), "expected a positive integer");
    o.model.seq = static_cast<int>(*p.seq_length);
    // Longer than the preset's positions: the position table grows (the trainer's own model).
    o.model.max_positions = std::max(o.model.max_positions, o.model.seq);
    if (o.t5) o.t5->encoder_seq = o.model.seq;  // T5: the encoder's (decoder_seq_length stays)
  }
  if (!o.warmup_given) o.warmup = std::clamp(o.warmup, 0, std::max(o.steps - 1, 0));
  return ok_status();
}

Status check_ranks(int ranks) {
  if (ranks < 1 || ranks > kMaxRanks)
    return Error{
        fmt::format("--ranks: expected 1 to {} ranks on one machine, got {}", kMaxRanks, ranks)};
  return ok_status();
}

int activations_in_flight(const TrainOptions& o, int world, int stage) {
  const int dp = data_parallel(o, world);
  const std::int64_t m =
      std::max<std::int64_t>(global_batch(o, world) / (std::int64_t{o.micro_batch} * dp), 1);
  if (o.pp <= 1 || m > (1 << 20)) return 1;
  const Schedule s = o.schedule.value_or(o.vpp > 1 ? Schedule::interleaved : Schedule::one_f_one_b);
  const auto order = pipeline_order(s, o.pp, o.vpp, static_cast<int>(m));
  int most = 1;
  for (int p = 0; p < o.pp; ++p) {
    if (stage >= 0 && p != stage) continue;
    std::vector<int> open(static_cast<std::size_t>(o.vpp), 0);
    for (const PipelineTask& t : order[static_cast<std::size_t>(p)]) {
      int& k = open[static_cast<std::size_t>(t.chunk)];
      k += t.backward ? -1 : 1;
      most = std::max(most, k);
    }
  }
  return most;
}

CpForm cp_form(const TrainOptions& o) {
  if (o.cp_comm_type != CpCommType::a2a_p2p) return {o.cp_comm_type, 1};
  const std::vector<int>& hs = o.hierarchical_cp_sizes;
  if (hs.size() != 2 || hs[0] < 1 || hs[1] < 1 || hs[0] * static_cast<std::int64_t>(hs[1]) != o.cp)
    return {};
  if (hs[0] == 1) return {CpCommType::p2p, 1};
  if (hs[1] == 1) return {CpCommType::a2a, 1};
  return {CpCommType::a2a_p2p, hs[0]};
}

int data_parallel(const TrainOptions& o, int world) {
  const int mp = std::max(o.tp, 1) * std::max(o.pp, 1) * std::max(o.cp, 1);
  return std::max(world / mp, 1);
}

std::int64_t global_batch(const TrainOptions& o, int world) {
  const std::int64_t per = static_cast<std::int64_t>(o.micro_batch) * data_parallel(o, world);
  if (o.global_batch) return o.global_batch;
  return per * std::max<std::int64_t>(o.grad_accum, 1);
}

namespace {

double params_of(const GptConfig& c) {
  const double h = c.hidden, v = c.vocab, p = c.max_positions, l = c.layers;
  return v * h + p * h + l * (12 * h * h + 13 * h) + 2 * h + c.type_vocab * h;
}

bool writable_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  return std::filesystem::is_directory(dir.empty() ? "." : dir, ec) &&
         ::access((dir.empty() ? std::filesystem::path(".") : dir).c_str(), W_OK | X_OK) == 0;
}

// A file the run will write, checked by the routine every verb's outputs use
// (check_output_path: a folder, a dangling link or an unwritable place refused). A missing
// folder is made when the file is written (write_file_atomic), as for every other verb's
// outputs (the trainer refused one, found 2026-11-29).
Status check_file(const std::string& flag, const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return Error{fmt::format("{}: expected a file to write, got the folder '{}'", flag, path)};
  if (Status s = check_output_path(path); !s.ok())
    return Error{fmt::format("{}: {}", flag, s.error().message)};
  return ok_status();
}

// A folder the run will write into: created now, then checked.
Status check_folder(const std::string& flag, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (!writable_dir(dir))
    return Error{fmt::format("{}: cannot write into '{}': {}", flag, dir,
                             ec ? ec.message() : "not a writable folder")};
  return ok_status();
}

std::string gib(double bytes) {
  return fmt::format("{:.1f} GiB", bytes / (1024.0 * 1024 * 1024));
}

}  // namespace

double memory_per_rank_bytes(const TrainOptions& o, int world) {
  const GptConfig& c = o.model;
  if (model_parallel(o)) {
    // A stage's shard: its blocks split over TP, the embedding and the tied copy, DDP's 4
    // floats per parameter; activations of the micro-batches the schedule holds at once (all
    // of them under GPipe, at most PP under 1F1B), the logits split over TP; setup holds the
    // whole initialisation once.
    const double t = std::max(o.tp, 1), stages = std::max(o.pp, 1);
    // Context parallelism: s / cp positions per rank, their scores against all s keys, and
    // the gathered K and V.
    const double h = c.hidden, v = c.vocab, b = o.micro_batch, cp = std::max(o.cp, 1);
    const double s = c.seq / cp, keys = c.seq;
    const double l = std::ceil(c.layers / stages);
    // Experts: E / EP of them (8 h^2 + 5 h each) and the router in place of the dense MLP.
    const double ex = c.experts > 0 ? c.experts / std::max(o.ep, 1) * (8 * h * h + 5 * h) +
                                          c.experts * h - (8 * h * h + 5 * h)
                                    : 0;
    const double P =
        l * (12 * h * h / t + 13 * h + ex) + 2 * v * h / t + c.max_positions * h + 2 * h;
    const double accum = activations_in_flight(o, world);  // micro-batches held at once
    // FlashAttention keeps a logsumexp per query row instead of the s x keys probabilities.
    const double scores = o.flash ? b * c.heads / t * s : b * c.heads / t * s * keys;
    // All-to-all CP keeps Q, K, V of its heads' positions, hierarchical CP their output too,
    // and the ring the K,V block its forward held last (backward's start).
    const CpForm form = cp_form(o);
    const double heads_layout = cp <= 1                            ? 0
                                : form.type == CpCommType::a2a     ? 3 * b * s * h / t
                                : form.type == CpCommType::a2a_p2p ? 6 * b * s * h / t
                                : form.type == CpCommType::p2p     ? 2 * b * s * h / t
                                                                   : 0;
    const double acts = accum * (l * (16 * b * s * h + scores + heads_layout) + 2 * b * s * v / t) +
                        8 * b * s * h + (cp > 1 ? 4 * b * keys * h / t : 0);
    // ZeRO-2/3 (PP 1): besides the parameters and the backward's working gradient buffer, the
    // parts (moments, gradients, ZeRO-3's parameters: at most 4 P / DP <= 2 P) and the bucket
    // copies in flight on the stream (at most P): one P more than DDP's four.
    const double zero = o.strategy == Strategy::zero2 || o.strategy == Strategy::zero3 ? P : 0;
    return 4 * (4 * P + zero + params_of(c) + acts);
  }
  const double n = std::max(world, 1);
  const double P = params_of(c), shard = std::ceil(P / n);
  const double h = c.hidden, v = c.vocab, l = c.layers;
  const double largest_module = std::max({v * h + c.max_positions * h, 12 * h * h + 13 * h});
  const double zero_bucket = std::min<double>(static_cast<double>(o.zero_reduce_bucket), P);
  double state = 0;  // floats
  switch (o.strategy) {
    case Strategy::ddp:
      state = 4 * P;
      break;
    case Strategy::zero1:
      state = 2 * P + 4 * shard;
      break;
    case Strategy::zero2:
      state = P + 4 * shard + zero_bucket + largest_module;
      break;
    case Strategy::zero3:
      state = 4 * shard + zero_bucket + 4 * largest_module;
      break;
  }
  state = std::max(state, P + 3 * shard);  // setup holds the whole initialisation once
  // Gpt's activations (gpt.h): about 16 B T h + B heads T^2 floats per block, the logits and
  // probabilities B T V, and the scratch of a few B T 4h.
  const double b = o.micro_batch, t = c.seq;
  const double acts = l * (16 * b * t * h + b * c.heads * t * t) + 2 * b * t * v + 8 * b * t * h;
  return 4 * (state + acts);
}

namespace {

// What the trainer's T5 runs (docs/train.md "T5"): TP dividing heads, ffn and vocabulary, PP 1
// or 2 split at the encoder/decoder boundary, GPipe or 1F1B, DDP or ZeRO-1.
Status validate_t5(const TrainOptions& o) {
  const T5Config& c = *o.t5;
  if (Status s = validate(c); !s.ok())
    return Error{"--model " + o.model_name + ": " + s.error().message};
  if (o.tp < 1 || c.heads % o.tp != 0 || c.ffn % o.tp != 0 || c.vocab % o.tp != 0)
    return Error{fmt::format(
        "--tensor-model-parallel-size: expected a divisor of T5's heads ({}), ffn ({}) and "
        "vocabulary ({}), got {}",
        c.heads, c.ffn, c.vocab, o.tp)};
  if (o.vpp > 1 || (o.schedule && *o.schedule == Schedule::interleaved))
    return Error{fmt::format(
        "{}: expected no virtual pipeline for T5: Megatron-LM refuses interleaving for "
        "encoder-decoder models (\"Interleaving is not supported with an encoder and decoder "
        "model.\", core/pipeline_parallel/schedules.py); got {}",
        o.vpp > 1 ? "--virtual-pipeline-stages" : "--schedule",
        o.vpp > 1 ? std::to_string(o.vpp) : std::string("interleaved"))};
  if (o.pp > 2 || (o.pp == 2 && c.encoder_layers != c.decoder_layers))
    return Error{fmt::format(
        "--pipeline-model-parallel-size: expected 1, or 2 with as many encoder as decoder layers "
        "(T5 split at the encoder/decoder boundary, Megatron's pipeline_model_parallel_split_rank "
        "1; encoder {}, decoder {}), got {}",
        c.encoder_layers, c.decoder_layers, o.pp)};
  if (o.sequence_parallel && o.tp > 1 && (c.encoder_seq % o.tp != 0 || c.decoder_seq % o.tp != 0))
    return Error{fmt::format(
        "--sequence-parallel: expected encoder and decoder sequence lengths ({} and {}) "
        "divisible by the tensor-parallel size {}",
        c.encoder_seq, c.decoder_seq, o.tp)};
  if (o.stage_layers || o.first_stage_layers || o.last_stage_layers)
    return Error{
        "--pipeline-stage-layers: expected none for T5 (its stages split at the encoder/decoder "
        "boundary)"};
  if (o.flash)
    return Error{
        "--attention: expected standard for T5 (its trainer runs the unfused attention with "
        "relative position biases), got flash"};
  if (o.tp_async_allreduce && o.tp > 1)
    return Error{
        "--async-tensor-model-parallel-allreduce: expected it off for T5 (its trainer runs each "
        "tensor-parallel all-reduce after its GEMM; GPT and BERT run it beside the weight "
        "gradient), got on"};
  if (o.strategy == Strategy::zero2 || o.strategy == Strategy::zero3)
    return Error{fmt::format("--zero: expected 0 or 1 for T5 (DDP or ZeRO-1 over DP), got {}",
                             static_cast<int>(o.strategy))};
  if (!o.data.empty())
    return Error{fmt::format(
        "--data: expected none for T5 (its task is the synthetic sequence-to-sequence one, "
        "t5_synthetic_batch), got '{}'",
        o.data)};
  return ok_status();
}

}  // namespace

Status validate(const TrainOptions& o, int world, int ranks_here) {
  CS_RETURN_IF_ERROR(check_ranks(world));
  if (Status s = validate(o.model); !s.ok()) return s;
  {
    ShardSpec s;  // the load-balancing loss's coefficient, against the model
    s.layers = o.model.layers;
    s.moe_aux_loss_coeff = o.moe_aux_loss_coeff;
    s.moe_capacity_factor = o.moe_capacity_factor;
    s.moe_pad_to_capacity = o.moe_pad_to_capacity;
    CS_RETURN_IF_ERROR(validate(o.model, s));
  }
  if (o.micro_batch < 1)
    return Error{
        fmt::format("--micro-batch-size: expected a positive integer, got {}", o.micro_batch)};
  if (o.tp < 1 || world % o.tp != 0)
    return Error{
        fmt::format("--tensor-model-parallel-size: expected a divisor of the rank count {}, got {}",
                    world, o.tp)};
  if (o.pp < 1 || world % (o.tp * o.pp) != 0)
    return Error{fmt::format(
        "--pipeline-model-parallel-size: expected TP x PP to divide the rank count {} (TP {}), "
        "got {}",
        world, o.tp, o.pp)};
  if (o.model.experts > 0 || o.ep > 1) {
    // Experts: TP 1, CP 1, DDP over DP with EP a divisor of it (expert parallelism inside data
    // parallelism, as Megatron places it).
    ShardSpec s;
    s.tp = o.tp;
    s.ep = o.ep;
    s.layers = o.model.layers;
    CS_RETURN_IF_ERROR(validate(o.model, s));
    if (o.cp > 1)
      return Error{fmt::format(
          "--context-parallel-size: expected 1 for a model with experts, got {}", o.cp)};
    if (o.strategy != Strategy::ddp && o.strategy != Strategy::zero1)
      return Error{fmt::format(
          "--zero: expected 0 or 1 for a model with experts (describe models no ZeRO-2/3 "
          "expert sharding), got {}",
          static_cast<int>(o.strategy))};
    const int dp = world / std::max(o.tp * o.pp, 1);
    if (world % (o.tp * o.pp) == 0 && dp % o.ep != 0)
      return Error{fmt::format(
          "--expert-model-parallel-size: expected a divisor of the data-parallel size {} "
          "(experts split over data-parallel ranks), got {}",
          dp, o.ep)};
  }
  if (o.cp > 1) {
    if (world % (o.tp * o.pp * o.cp) != 0)
      return Error{fmt::format(
          "--context-parallel-size: expected TP x CP x PP to divide the rank count {} (TP {}, "
          "PP {}), got {}",
          world, o.tp, o.pp, o.cp)};
    if (o.t5 || o.model.arch != ModelArch::gpt)
      return Error{fmt::format(
          "--context-parallel-size: expected 1 for {} (the trainer's context parallelism is "
          "causal GPT's), got {}",
          o.t5 ? "T5" : "BERT", o.cp)};
    ShardSpec s;
    s.tp = o.tp;
    s.cp = o.cp;
    s.layers = o.model.layers;
    s.sequence_parallel = o.sequence_parallel;
    CS_RETURN_IF_ERROR(validate(o.model, s));
  }
  // ZeRO-2/3 with tensor parallelism (or BERT) run in the model-parallel trainer; with pipeline
  // parallelism resolve_scenario (train_scenario, below) refuses them as describe does.
  if (model_parallel(o)) {
    if (o.model.heads % o.tp != 0 || o.model.vocab % o.tp != 0)
      return Error{fmt::format(
          "--tensor-model-parallel-size: expected a divisor of the heads ({}) and the vocabulary "
          "({}), got {}",
          o.model.heads, o.model.vocab, o.tp)};
  }
  if (o.t5) CS_RETURN_IF_ERROR(validate_t5(o));
  if (o.gpus && *o.gpus != world)
    return Error{fmt::format("--gpus: expected the rank count {}, got {}", world, *o.gpus)};
  for (auto [flag, v] : {std::pair{"--data-parallel-size", o.dp}})
    if (v && *v != data_parallel(o, world))
      return Error{fmt::format("{}: expected the rank count / (TP x CP x PP) = {}, got {}", flag,
                               data_parallel(o, world), *v)};
  if (o.nodes && (*o.nodes < 1 || *o.nodes > world))
    return Error{fmt::format("--nodes: expected 1 to the rank count {}, got {}", world, *o.nodes)};
  const int dp = data_parallel(o, world);
  const std::int64_t per_step = static_cast<std::int64_t>(o.micro_batch) * dp;
  if (o.grad_accum < 0)
    return Error{fmt::format("--gradient-accumulation-steps: expected a positive integer, got {}",
                             o.grad_accum)};
  const std::int64_t g = global_batch(o, world);
  if (g < 1 || g % per_step != 0)
    return Error{fmt::format(
        "--global-batch-size: expected a multiple of micro-batch x {} = {} x {} = {}, got {}",
        model_parallel(o) ? "data-parallel ranks" : "ranks", o.micro_batch, dp, per_step, g)};
  if (o.grad_accum > 0 && o.global_batch && g / per_step != o.grad_accum)
    return Error{fmt::format(
        "--gradient-accumulation-steps: expected global batch / (micro-batch x data-parallel "
        "ranks) = {}, got {}",
        g / per_step, o.grad_accum)};
  if (o.local_batch && o.pp > 1 && g > *o.local_batch * dp)
    return Error{fmt::format(
        "--torchtitan-config: expected a global batch of local batch x data-parallel ranks = {} "
        "x {} = {} under PP (the CPU trainer runs an iteration as one pipeline schedule; "
        "torchtitan runs each of its accumulation steps as one), got {}",
        *o.local_batch, dp, *o.local_batch * dp, g)};
  if (o.sequence_parallel && o.tp > 1 && o.model.seq % o.tp != 0)
    return Error{fmt::format(
        "--sequence-parallel: expected a sequence length ({}) divisible by the tensor-parallel "
        "size {}",
        o.model.seq, o.tp)};
  // resolve_scenario's checks, as every rank makes them (Trainer::plan). The trainer names
  // DeepSpeed's two bucket fields by its own flag (a ds_config's are its too).
  auto resolved = [&]() -> Status {
    Result<Scenario> sc = train_scenario(o, world);
    if (sc.ok()) return ok_status();
    std::string m = sc.error().message;
    for (std::string_view field : {"reduce_bucket_size: ", "allgather_bucket_size: "})
      if (m.rfind(field, 0) == 0)
        m = fmt::format("--zero-bucket ({}): {}", field.substr(0, field.size() - 2),
                        m.substr(field.size()));
    return Error{m};
  };
  // Layers per stage, the schedule, sequence parallelism without TP.
  const bool shaped = model_parallel(o) || o.vpp != 1 || o.schedule || o.sequence_parallel;
  if (shaped) {
    CS_RETURN_IF_ERROR(resolved());
  } else {
    // The system and network the communication is checked against, here and not in the ranks
    // behind Open MPI's banner.
    if (auto system = load_system(o.system); !system.ok()) return system.error();
    if (!o.network.empty())
      if (auto net = load_network(o.network); !net.ok()) return net.error();
  }
  // The text data every rank opens: a regular, readable, non-empty file (a FIFO would block
  // every rank's open, a missing file fail in each behind the banner).
  if (!o.data.empty()) {
    CS_RETURN_IF_ERROR(check_flag_file("--data", o.data));
    std::error_code ec;
    const auto size = std::filesystem::file_size(o.data, ec);
    if (ec || size == 0 || ::access(o.data.c_str(), R_OK) != 0)
      return Error{
          fmt::format("--data: expected a readable, non-empty text file, got '{}'", o.data)};
    // Byte-level tokens need 256 ids: here, not in the ranks behind Open MPI's banner.
    if (o.model.vocab < 256)
      return Error{fmt::format(
          "--vocab: expected at least 256 with --data (byte-level tokens), got {}", o.model.vocab)};
  }
  // Pipeline messages are tagged by (virtual stage, micro-batch, direction); MPI guarantees
  // tags up to 32767.
  if (o.pp > 1 && 2 * static_cast<std::int64_t>(o.pp) * o.vpp * (g / per_step) > 32767)
    return Error{fmt::format(
        "--global-batch-size: expected at most {} micro-batches per step with {} pipeline stages "
        "x {} virtual stages (MPI message tags), got {}",
        32767 / (2 * o.pp * o.vpp), o.pp, o.vpp, g / per_step)};
  if (o.steps < 1)
    return Error{fmt::format("--steps: expected a positive integer, got {}", o.steps)};
  if (o.warmup < 0 || o.warmup >= o.steps)
    return Error{
        fmt::format("--warmup: expected 0 to steps - 1 = {}, got {}", o.steps - 1, o.warmup)};
  // (inf was taken: the loss went to NaN and the run exited 0, found by probing, 2026-11-30)
  // The optimizer's floats must hold them: 1e-50 became 0 (probing, 2026-12-02).
  const auto as_float = [](double x) { return static_cast<float>(x); };
  if (!(as_float(o.lr) >= std::numeric_limits<float>::min()) || !std::isfinite(as_float(o.lr)))
    return Error{fmt::format(
        "--lr: expected a positive finite number a 32-bit float holds (1.2e-38 to 3.4e38), got {}",
        o.lr)};
  // inf was accepted (probing, 2026-12-02)
  if (!(o.clip == 0 || as_float(o.clip) >= std::numeric_limits<float>::min()) ||
      !std::isfinite(as_float(o.clip)))
    return Error{fmt::format(
        "--clip: expected 0 or a positive finite number a 32-bit float holds (1.2e-38 to "
        "3.4e38), got {}",
        o.clip)};
  if (!(o.bucket_mb > 0))
    return Error{
        fmt::format("--ddp-bucket-size: expected a positive number (MiB), got {}", o.bucket_mb)};
  if (o.zero_reduce_bucket < 1 || o.zero_allgather_bucket < 1)
    return Error{fmt::format("--zero-bucket: expected a positive integer, got {}",
                             std::min(o.zero_reduce_bucket, o.zero_allgather_bucket))};
  if (o.threads < 1 || o.threads > 1024)
    return Error{fmt::format("--threads: expected 1 to 1024, got {}", o.threads)};
  if (o.format != "table" && o.format != "json")
    return Error{fmt::format("--format: expected table or json, got '{}'", o.format)};
  if (o.checkpoint_every < 0)
    return Error{fmt::format("--checkpoint-every: expected 0 or more, got {}", o.checkpoint_every)};
  if ((o.checkpoint_every > 0 || o.resume) && o.checkpoint_dir.empty())
    return Error{"--checkpoint: expected a folder with --checkpoint-every or --resume"};
  // Checkpoints at steps K, 2K, ... up to --steps: K above it wrote none, in silence (found by
  // probing, 2026-12-02).
  if (o.checkpoint_every > o.steps)
    return Error{fmt::format(
        "--checkpoint-every: expected at most --steps ({}): checkpoints are written at steps K, "
        "2K, ..., got {}, so none would be",
        o.steps, o.checkpoint_every)};
  // A folder alone wrote nothing, in silence (found by probing, 2026-11-30).
  if (!o.checkpoint_dir.empty() && o.checkpoint_every == 0 && !o.resume)
    return Error{fmt::format(
        "--checkpoint-every: expected a step count K >= 1 with --checkpoint '{}' (or --resume), "
        "got {}",
        o.checkpoint_dir, o.checkpoint_every)};

  // Memory, before anything is allocated.
  const double need = memory_per_rank_bytes(o, world);
  const double have = static_cast<double>(commscope::available_memory_bytes());
  const int here = std::clamp(ranks_here, 1, world);
  if (have > 0 && need * here > have) {
    const GptConfig& c = o.model;
    const double h = c.hidden, b = o.micro_batch, t = c.seq;
    const double acts =
        4 * (c.layers * (16 * b * t * h + b * c.heads * t * t) + 2 * b * t * c.vocab);
    const std::string what =
        acts > need / 2
            ? fmt::format("--seq-length {} with --micro-batch-size {}", c.seq, o.micro_batch)
            : fmt::format("--model {} (layers {}, hidden {}, vocab {})", o.model_name, c.layers,
                          c.hidden, c.vocab);
    return Error{fmt::format(
        "{}: needs {:.3g} bytes ({}) per rank for parameters, gradients, optimizer state and "
        "activations, x {} ranks on this machine; it has {:.3g} bytes ({}) available",
        what, need, gib(need), here, have, gib(have))};
  }

  // A data-parallel plan's too, after the sizes and memory above: its bucket sizes and
  // micro-batches per iteration (a --zero-bucket of 1 or 100,000 accumulation steps were refused
  // in the ranks behind Open MPI's banner, found by probing, 2026-11-30).
  if (!shaped) CS_RETURN_IF_ERROR(resolved());

  // Outputs, before training: a run must not train for an hour and then fail to write.
  if (!o.output.empty()) CS_RETURN_IF_ERROR(check_file("-o/--output", o.output));
  if (!o.trace.empty()) {
    // One file per rank beside the given name: a device or FIFO cannot be written through, and
    // /dev/null.rank0 was created in /dev (found by probing, 2026-11-30); nor a link whose
    // target is missing (the files were written beside the link, found by probing again).
    std::error_code tec;
    if (std::filesystem::is_symlink(std::filesystem::symlink_status(o.trace, tec)) &&
        !std::filesystem::exists(o.trace, tec))
      return Error{fmt::format(
          "--trace: expected a file name or a folder, got '{}', a symbolic link to a missing "
          "file",
          o.trace)};
    const auto st = std::filesystem::status(o.trace, tec);
    if (!tec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st) &&
        !std::filesystem::is_directory(st))
      return Error{fmt::format(
          "--trace: expected a file name or a folder (one trace per rank is written beside it), "
          "got '{}', which is neither",
          o.trace)};
    if (trace_is_folder(o.trace))
      CS_RETURN_IF_ERROR(check_folder("--trace", o.trace));
    else
      CS_RETURN_IF_ERROR(check_file("--trace", trace_path(o.trace, 0)));
  }
  if (o.checkpoint_every > 0) CS_RETURN_IF_ERROR(check_folder("--checkpoint", o.checkpoint_dir));
  if (o.resume) {
    CS_ASSIGN_OR_RETURN(nlohmann::json j, read_manifest(o.checkpoint_dir));
    const std::string manifest = manifest_file(o.checkpoint_dir);
    const auto step = j["step"].get<std::int64_t>();
    if (o.steps <= step)
      return Error{fmt::format(
          "--steps: expected more than the checkpoint's step {} (--steps counts every step, the "
          "resumed ones included; {} continues at step {}), got {}: nothing to do",
          step, manifest, step + 1, o.steps)};
    // The checkpoint is this run's and its rank files are there: here, not in the ranks.
    CS_RETURN_IF_ERROR(check_manifest(j, o, world, manifest));
    CS_RETURN_IF_ERROR(check_rank_files(o.checkpoint_dir, step, world));
  }
  return ok_status();
}

Result<Scenario> train_scenario(const TrainOptions& o, int world) {
  CS_ASSIGN_OR_RETURN(SystemSpec system, load_system(o.system));
  CS_ASSIGN_OR_RETURN(NetworkProtocol net,
                      load_network(o.network.empty() ? system.network : o.network));
  PlanInput p;
  if (o.ep > 1) p.ep = o.ep;
  p.attention = o.flash ? AttentionKernel::flash : AttentionKernel::standard;
  p.stage_layers = o.stage_layers;
  p.first_stage_layers = o.first_stage_layers;
  p.last_stage_layers = o.last_stage_layers;
  if (o.model.experts > 0) p.expert_tp = 1;
  if (o.moe_capacity_factor > 0) p.moe_capacity_factor = o.moe_capacity_factor;
  if (o.moe_pad_to_capacity) p.moe_pad_to_capacity = true;
  if (o.model.experts > 0 && o.moe_aux_loss_coeff > 0) p.moe_aux_loss_coeff = o.moe_aux_loss_coeff;
  if (o.cp > 1) {  // DP follows from the GPUs (resolve_scenario refuses both)
    p.cp = o.cp;
    p.cp_comm_type = o.cp_comm_type;
  } else {
    p.dp = data_parallel(o, world);
  }
  p.hierarchical_cp_sizes = o.hierarchical_cp_sizes;  // resolve_scenario checks them
  p.gpus = world;
  p.tp = o.tp;
  p.pp = o.pp;
  p.virtual_stages = o.vpp;
  if (o.schedule) p.schedule = *o.schedule;
  p.rank_order = o.rank_order;
  p.sequence_parallel = o.sequence_parallel;
  if (o.tp_async_allreduce) p.tp_async_allreduce = true;
  // Ranks per node: as the rank count fits the system's nodes; a rank count the node size does
  // not divide runs as one node of that many ranks (the communication ops do not depend on it).
  const int gpn = system.node.gpus;
  if (o.nodes) {
    p.nodes = *o.nodes;
    if (world % *o.nodes != 0 || world / *o.nodes > gpn)
      system.node.gpus = std::max(gpn, (world + *o.nodes - 1) / *o.nodes);
  } else if (world > gpn && world % gpn != 0) {
    system.node.gpus = world;
    p.nodes = 1;
  }
  p.zero = static_cast<int>(o.strategy);
  p.micro_batch = o.micro_batch;
  p.grad_accum =
      global_batch(o, world) / (static_cast<std::int64_t>(o.micro_batch) * data_parallel(o, world));
  p.precision = Precision::fp32;
  p.recompute = Recompute::none;
  p.ddp_bucket_mb = o.bucket_mb;
  p.zero_reduce_bucket = o.zero_reduce_bucket;
  p.zero_allgather_bucket = o.zero_allgather_bucket;
  if (o.grad_comm_dtype) p.grad_comm_dtype = *o.grad_comm_dtype;
  return resolve_scenario(
      o.t5 ? t5_model_spec(*o.t5, o.model_name) : model_spec(o.model, o.model_name), system, net,
      p);
}

bool trace_is_folder(const std::string& trace) {
  std::error_code ec;
  return !trace.empty() && (trace.back() == '/' || std::filesystem::is_directory(trace, ec));
}

std::string trace_path(const std::string& trace, int rank) {
  if (trace_is_folder(trace)) {
    std::string dir = trace;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    return fmt::format("{}/rank{}.json", dir, rank);
  }
  // t.json.gz: t.rank0.json.gz (it was t.json.rank0.gz, which analyze of the folder did not
  // take for a trace; found by probing, 2026-12-02).
  const bool gz = trace.size() > 8 && trace.compare(trace.size() - 8, 8, ".json.gz") == 0;
  const std::filesystem::path p(gz ? trace.substr(0, trace.size() - 3) : trace);
  const std::string ext = p.extension().string() + (gz ? ".gz" : "");
  std::filesystem::path out = p;
  out.replace_extension();
  return fmt::format("{}.rank{}{}", out.string(), rank, ext);
}

}  // namespace commscope::train
