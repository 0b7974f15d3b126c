// Scenario options: flag names follow Megatron-LM (and DeepSpeed where it has the term).
#include "scenario_options.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <type_traits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commscope/spec/limits.h"
#include "commscope/spec/shell_words.h"
#include "commscope/spec/torchtitan_config.h"
#include "commscope/util/input_file.h"
#include "commscope/util/json_fields.h"

namespace commscope::cli {

namespace {
NoteSink g_note_sink = nullptr;
}  // namespace

void set_note_sink(NoteSink sink) {
  g_note_sink = sink;
}

void print_note(const std::string& note) {
  if (g_note_sink)
    g_note_sink(note);
  else
    fmt::print(stderr, "commscope: note: {}\n", note);
}

Status attention_flags(const std::string& kernel, const std::string& backend, PlanInput& flags) {
  CS_RETURN_IF_ERROR(named_value("--attention", kernel, attention_kernel_from_name,
                                 "flash or standard", flags.attention));
  // Megatron-Core's --attention-backend: flash and fused are Transformer Engine's fused kernels
  // (so the kernel is flash unless --attention says), unfused and local its and Megatron's own
  // s x s attention (--attention standard), auto Transformer Engine's choice (the framework's
  // default, as when not given).
  if (backend == "unfused" || backend == "local") {
    if (flags.attention == AttentionKernel::flash)
      return Error{fmt::format(
          "--attention-backend: '{}' (s x s attention) contradicts --attention flash", backend)};
    flags.attention = AttentionKernel::standard;
    return {};
  }
  if (backend == "auto") return {};
  return named_value("--attention-backend", backend, attention_backend_from_name,
                     "fused, flash, unfused, local or auto", flags.attention_backend);
}

namespace {

// One item of a comma list. Integers may be written as exact decimal exponents ("1e9"), as
// configs often are; "1.5" or "1e-3" are not integers.
template <class T>
std::optional<T> parse_number(const std::string& item) {
  const char* first = item.data();
  const char* last = first + item.size();
  T v{};
  auto [end, ec] = std::from_chars(first, last, v);
  if constexpr (std::is_integral_v<T>) {
    if (ec == std::errc() && end == last) return v;
    double d = 0;
    auto [dend, dec] = std::from_chars(first, last, d);
    if (dec == std::errc() && dend == last && std::isfinite(d) && d == std::floor(d) &&
        d >= static_cast<double>(std::numeric_limits<T>::min()) &&
        d < -static_cast<double>(std::numeric_limits<T>::min()))
      return static_cast<T>(d);
  } else {
    if (ec == std::errc() && end == last && std::isfinite(v)) return v;
  }
  return std::nullopt;
}

// A flag that takes a comma list ("--tp 1,2,4"); values are checked as they are parsed.
template <class T>
CLI::Option* list(CLI::App& cmd, const std::string& names, std::vector<T>& target,
                  const std::string& help) {
  return cmd.add_option_function<std::string>(
      names,
      [&target, names](const std::string& text) {
        target.clear();
        std::string flag = "--" + names.substr(names.rfind("--") + 2);
        // "--zero --tp 2" took "--tp" for ZeRO's value and called it no integer (Python's
        // zero=True did the same with its --format=json, found by probing, 2026-11-30).
        if (text.size() > 2 && text.compare(0, 2, "--") == 0)
          throw CLI::ValidationError(flag + ": expected a value, got the flag '" + text + "'");
        std::size_t pos = 0;
        while (pos <= text.size()) {
          std::size_t comma = text.find(',', pos);
          std::string item =
              text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
          if constexpr (std::is_same_v<T, std::string>) {
            if (item.empty())
              throw CLI::ValidationError(flag + ": expected a name, got an empty item in '" + text +
                                         "'");
            target.push_back(item);
          } else {
            auto v = parse_number<T>(item);
            if (!v) {
              // A whole number too large for the flag says so; anything else is not a number
              // of the flag's kind.
              double d = 0;
              auto [dend, dec] = std::from_chars(item.data(), item.data() + item.size(), d);
              const bool whole = dend == item.data() + item.size() &&
                                 (dec == std::errc::result_out_of_range ||
                                  (dec == std::errc() && std::isfinite(d) && d == std::floor(d)));
              std::string expected = "a finite number";
              if constexpr (std::is_integral_v<T>)
                expected =
                    whole ? "an integer of at most " + std::to_string(std::numeric_limits<T>::max())
                          : "an integer";
              throw CLI::ValidationError(flag + ": expected " + expected + ", got '" + item + "'");
            }
            target.push_back(*v);
          }
          if (comma == std::string::npos) break;
          pos = comma + 1;
        }
      },
      help + " (comma list)");
}

// Every combination of the values of one flag with the inputs so far.
template <class T, class Set>
std::vector<ScenarioInput> times(const std::vector<ScenarioInput>& in, const std::vector<T>& values,
                                 Set&& set) {
  if (values.empty()) return in;
  std::vector<ScenarioInput> out;
  for (const auto& base : in)
    for (const auto& v : values) {
      ScenarioInput x = base;
      set(x, v);
      out.push_back(std::move(x));
    }
  return out;
}

// The compressed-communication flags into `flags` (resolve_compression checks them against
// the plan).
Status compression_flags(const ScenarioOptions& o, PlanInput& flags) {
  CS_RETURN_IF_ERROR(grad_comm_dtype_flags(o.grad_comm_dtype, o.grad_reduce_in_bf16, flags));
  return compression_option_flags(o.compression, flags);
}

// ---- modern training (issue 15): attention kernel, FP8, uneven pipeline stages ----
void add_modern_training_options(CLI::App& cmd, ScenarioOptions& o, const char* g_plan,
                                 const char* g_batch) {
  cmd.add_option("--attention", o.attention,
                 "attention kernel: flash (FlashAttention-2, no s x s scores in memory) | "
                 "standard [flash with --attention-backend fused or flash, else the model "
                 "preset's `attention`, else standard]")
      ->group(g_plan);
  cmd.add_option("--attention-backend", o.attention_backend,
                 "whose flash attention kernel (its speed; given, the kernel is flash): fused "
                 "(cuDNN's, Transformer Engine's choice on Hopper) | flash (FlashAttention's "
                 "own, as PyTorch SDPA and flash-attn run it); Megatron-Core's unfused and local "
                 "are --attention standard, auto the default [flash under --framework fsdp or "
                 "deepspeed, else fused]")
      ->group(g_plan);
  cmd.add_option("--pipeline-stage-layers", o.pipeline_stage_layers,
                 "transformer layers of each pipeline stage, e.g. 7,8,8,...,8,7 (one per stage, "
                 "or per virtual stage in Megatron's order with --vp; the first and last may be "
                 "0; summing to the model's layers) [an even split]")
      ->group(g_plan);
  cmd.add_option("--pipeline-model-parallel-layout", o.pipeline_layout,
                 "Megatron-Core's layout: virtual stages in layer order split by '|', E "
                 "embedding, t transformer layer, m MTP layer (in the last stage), L loss, "
                 "(...)*n and x*n repeats, e.g. \"Et|(tt|)*30mL\" (the virtual stages from its "
                 "stage count over --pp unless --vp says)")
      ->group(g_plan);
  cmd.add_option("--decoder-first-pipeline-num-layers", o.first_stage_layers,
                 "Megatron-LM: layers of the first pipeline stage (the rest split evenly)")
      ->group(g_plan);
  cmd.add_option("--decoder-last-pipeline-num-layers", o.last_stage_layers,
                 "Megatron-LM: layers of the last pipeline stage (the rest split evenly)")
      ->group(g_plan);
  cmd.add_flag("--account-for-embedding-in-pipeline-split", o.account_embedding,
               "Megatron-Core: the embedding counts as a layer in the split over the PP x VP "
               "model chunks (the first holds one layer fewer)")
      ->group(g_plan);
  cmd.add_flag("--account-for-loss-in-pipeline-split", o.account_loss,
               "Megatron-Core: the output layer and loss count as a layer in the split (the last "
               "chunk holds one layer fewer)")
      ->group(g_plan);
  cmd.add_option("--num-layers-per-virtual-pipeline-stage", o.layers_per_virtual_stage,
                 "Megatron-LM: layers per model chunk; the virtual stages are the layers per "
                 "pipeline stage over it (instead of --vp)")
      ->group(g_plan);
  cmd.add_flag("--fp8", o.fp8,
               "Transformer Engine FP8 GEMMs (the system's fp8 peak; same as --precision fp8)")
      ->group(g_batch);
  cmd.add_flag("--fp8-param-gather", o.fp8_param_gather,
               "Megatron-Core: FP8 weights (no 16-bit copy, no FP8 cache), all-gathered in FP8 "
               "by the distributed optimizer or Megatron-FSDP (needs --fp8 and ZeRO >= 1)")
      ->group(g_batch);
  cmd.add_flag("--tp-comm-overlap", o.tp_comm_overlap,
               "Megatron-Core/Transformer Engine: overlap the sequence-parallel all-gathers and "
               "reduce-scatters with their GEMMs (needs --sequence-parallel)")
      ->group(g_plan);
  cmd.add_flag("--async-tensor-model-parallel-allreduce", o.async_tp_allreduce,
               "Megatron-LM: without sequence parallelism, the input gradient's TP all-reduce "
               "runs beside the weight-gradient GEMM [on under --framework megatron, else off]")
      ->group(g_plan);
  cmd.add_flag("--no-async-tensor-model-parallel-allreduce", o.no_async_tp_allreduce,
               "Megatron-LM: the TP all-reduce after the backward GEMM, as before 2021-09")
      ->group(g_plan);
  cmd.add_flag("--cross-entropy-loss-fusion", o.cross_entropy_fusion,
               "Megatron-LM: the fused (Transformer Engine) cross entropy, which keeps the logits "
               "in the compute type, not an fp32 softmax (memory of the last stage); as "
               "--cross-entropy fused")
      ->group(g_plan);
  cmd.add_option("--cross-entropy", o.cross_entropy,
                 "the loss's cross entropy (memory of the last stage): vocab-parallel "
                 "(Megatron-Core's: an fp32 softmax kept) | fused (Transformer Engine's: the "
                 "logits in the compute type) | torch (torch.nn.functional.cross_entropy on fp32 "
                 "logits, as torchtitan: the log-softmax kept, two fp32 gradients beside it in "
                 "backward) | flash-attn (FlashAttention's CrossEntropyLoss, llm-foundry's "
                 "default: the logits kept, their gradient beside them) [vocab-parallel; torch "
                 "for a torchtitan job file]")
      ->group(g_plan);
  cmd.add_option("--cpu-offloading-num-layers", o.cpu_offload_layers,
                 "Megatron-Core --cpu-offloading: the activations of the first N layers go to "
                 "host memory and back (copies beside the compute; PP 1) [0: off]")
      ->group(g_plan);
  cmd.add_flag("--offload-optimizer", o.offload_optimizer,
               "DeepSpeed ZeRO-Offload (offload_optimizer.device cpu): Adam's states and the "
               "fp32 gradient shard in host memory, the step on the CPU; each step copies the "
               "gradient shard out and the 16-bit weights back (ZeRO >= 1)")
      ->group(g_plan);
  cmd.add_flag("--offload-param", o.offload_param,
               "DeepSpeed ZeRO-3 parameter offload (offload_param.device cpu): each rank's "
               "16-bit parameter partition in host memory, copied to the GPU before each of the "
               "coordinator's all-gathers (--framework deepspeed --zero 3)")
      ->group(g_plan);
  cmd.add_flag("--fsdp-cpu-offload", o.fsdp_cpu_offload,
               "PyTorch FSDP CPU offload (CPUOffload(offload_params=True), FSDP2's "
               "CPUOffloadPolicy, torchtitan's enable_cpu_offload): each rank's fp32 shard, "
               "gradients and Adam's states in host memory, copied in before each all-gather and "
               "out after each reduction, torch's AdamW on the CPU (--framework fsdp)")
      ->group(g_plan);
  cmd.add_option("--mtp-num-layers", o.mtp_layers,
                 "Megatron-Core: multi-token-prediction depths on the last pipeline stage, each "
                 "a block, a projection and a second loss [the model's mtp_layers]")
      ->group(g_plan);
}

// The modern-training flags into the plan input; each bad value is one error naming its flag.
Status modern_training_flags(const ScenarioOptions& o, PlanInput& flags) {
  CS_RETURN_IF_ERROR(attention_flags(o.attention, o.attention_backend, flags));
  if (o.tp_comm_overlap) flags.tp_comm_overlap = true;
  if (o.async_tp_allreduce && o.no_async_tp_allreduce)
    return Error{
        "--async-tensor-model-parallel-allreduce: expected it or "
        "--no-async-tensor-model-parallel-allreduce, not both"};
  if (o.async_tp_allreduce) flags.tp_async_allreduce = true;
  if (o.no_async_tp_allreduce) flags.tp_async_allreduce = false;
  CS_RETURN_IF_ERROR(cross_entropy_flags(o.cross_entropy, o.cross_entropy_fusion, flags));
  if (o.moe_pad_to_capacity) flags.moe_pad_to_capacity = true;
  if (o.fp8 || o.precision == "fp8") {
    flags.fp8 = true;  // the precision around the FP8 GEMMs stays bf16 unless given
  }
  if (o.fp8_param_gather) flags.fp8_param_gather = true;
  auto one = [](const char* flag, const std::string& text, std::optional<int>& into) -> Status {
    if (text.empty()) return {};
    auto v = parse_number<int>(text);
    if (!v || *v < 1)
      return Error{fmt::format("{}: expected a positive layer count, got '{}'", flag, text)};
    into = *v;
    return {};
  };
  CS_RETURN_IF_ERROR(
      one("--decoder-first-pipeline-num-layers", o.first_stage_layers, flags.first_stage_layers));
  CS_RETURN_IF_ERROR(
      one("--decoder-last-pipeline-num-layers", o.last_stage_layers, flags.last_stage_layers));
  CS_RETURN_IF_ERROR(one("--num-layers-per-virtual-pipeline-stage", o.layers_per_virtual_stage,
                         flags.layers_per_virtual_stage));
  if (o.account_embedding) flags.account_embedding = true;
  if (o.offload_optimizer) flags.offload_optimizer = true;
  if (o.offload_param) flags.offload_param = true;
  if (o.fsdp_cpu_offload) flags.fsdp_cpu_offload = true;
  if (o.account_loss) flags.account_loss = true;
  if (!o.cpu_offload_layers.empty()) {
    auto v = parse_number<int>(o.cpu_offload_layers);
    if (!v || *v < 0)
      return Error{fmt::format("--cpu-offloading-num-layers: expected a layer count, got '{}'",
                               o.cpu_offload_layers)};
    flags.cpu_offload_layers = *v;
  }
  if (!o.recompute_method.empty()) {
    if (o.recompute_method != "uniform" && o.recompute_method != "block")
      return Error{fmt::format("--recompute-method: expected uniform or block, got '{}'",
                               o.recompute_method)};
    flags.recompute_block = o.recompute_method == "block";
  }
  if (!o.recompute_num_layers.empty()) {
    auto v = parse_number<int>(o.recompute_num_layers);
    if (!v || *v < 1)
      return Error{
          fmt::format("--recompute-num-layers: expected a block count of at least 1, "
                      "got '{}'",
                      o.recompute_num_layers)};
    flags.recompute_num_layers = *v;
  }
  if (!o.mtp_layers.empty()) {
    auto v = parse_number<int>(o.mtp_layers);
    if (!v || *v < 0)
      return Error{fmt::format("--mtp-num-layers: expected a layer count (0: none), got '{}'",
                               o.mtp_layers)};
    flags.mtp_layers = *v;
  }
  if (!o.pipeline_layout.empty()) flags.pipeline_layout = o.pipeline_layout;
  if (!o.pipeline_stage_layers.empty()) {
    std::vector<int> split;
    std::size_t pos = 0;
    const std::string& text = o.pipeline_stage_layers;
    while (pos <= text.size()) {
      std::size_t comma = text.find(',', pos);
      std::string item =
          text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      auto v = parse_number<int>(item);
      if (!v || *v < 0)
        return Error{fmt::format(
            "--pipeline-stage-layers: expected a comma list of layer counts, got '{}' in '{}'",
            item, text)};
      if (split.size() >= static_cast<std::size_t>(limits::kMaxPipelineTasks))
        return Error{fmt::format("--pipeline-stage-layers: expected at most {} stages, got more",
                                 limits::kMaxPipelineTasks)};
      split.push_back(*v);
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
    flags.stage_layers = std::move(split);
  }
  return {};
}
}  // namespace

void add_scenario_options(CLI::App& cmd, ScenarioOptions& o) {
  const char* g_model = "Model and system";
  const char* g_plan = "Parallel plan (Megatron-LM spellings)";
  const char* g_batch = "Batch and precision";
  list(cmd, "--model", o.model,
       "model preset name or JSON file (own format or Hugging Face config.json) [gpt2-large]")
      ->group(g_model);
  list(cmd, "--system", o.system, "system preset name or JSON file [polaris]")->group(g_model);
  list(cmd, "--network", o.network, "network protocol preset name or JSON file [the system's own]")
      ->group(g_model);
  list(cmd, "--nodes", o.nodes, "nodes [4 with the defaults]")->group(g_model);
  list(cmd, "--gpus", o.gpus, "GPUs in all (default: nodes x GPUs per node)")->group(g_model);
  list(cmd, "--seq-length", o.seq_length, "tokens per sample (the model's unless given)")
      ->group(g_model);
  list(cmd, "--decoder-seq-length", o.decoder_seq_length, "decoder tokens per sample (T5)")
      ->group(g_model);
  add_model_flag_options(cmd, o.model_flags, "Model (Megatron-LM's flags; docs/predict.md)");
  add_megatron_args_option(cmd, o.megatron_args, g_model);

  list(cmd, "--tp,--tensor-model-parallel-size", o.tp, "tensor-parallel size [1]")->group(g_plan);
  list(cmd, "--pp,--pipeline-model-parallel-size", o.pp, "pipeline-parallel size [1]")
      ->group(g_plan);
  list(cmd, "--dp,--data-parallel-size", o.dp,
       "data-parallel size, without CP [GPUs / (TP x CP x PP)]")
      ->group(g_plan);
  list(cmd, "--vp,--virtual-pipeline-stages,--num-virtual-stages-per-pipeline-rank", o.vp,
       "model chunks per pipeline rank (interleaved 1F1B) [1]")
      ->group(g_plan);
  cmd.add_flag(
         "--sequence-parallel",
         // --sequence-parallel=false (or 0, no) counts below 1: off (it turned it on)
         [&o](std::int64_t n) { o.flags.sequence_parallel = n > 0; },
         "Megatron sequence parallelism (with TP > 1)")
      ->group(g_plan);
  list(cmd, "--zero,--zero-stage", o.zero, "ZeRO stage 0, 1, 2 or 3 [0]")->group(g_plan);
  cmd.add_option("--schedule", o.schedule, "pipeline schedule: gpipe|1f1b|interleaved [1f1b]")
      ->group(g_plan);
  cmd.add_option("--rank-order", o.rank_order,
                 "how ranks map to nodes: tp-dp-pp (Megatron's default) or tp-pp-dp [tp-dp-pp]")
      ->group(g_plan);
  cmd.add_option("--recompute-granularity", o.recompute,
                 "activation recompute: none|selective|full (Megatron-LM's), or op (torchtitan's "
                 "op-level selective checkpointing: every other matrix product's output and "
                 "attention's kept, the rest replayed) [none]")
      ->group(g_plan);
  cmd.add_flag("--recompute-activations", o.recompute_activations,
               "same as --recompute-granularity selective")
      ->group(g_plan);
  cmd.add_option("--recompute-modules", o.recompute_modules,
                 "Megatron-Core: what selective recompute replays, comma list of core_attn, "
                 "mla_up_proj, mlp, moe_act, layernorm [core_attn]")
      ->group(g_plan);
  cmd.add_option("--recompute-method", o.recompute_method,
                 "Megatron-LM, with --recompute-granularity full: uniform (every block replays "
                 "its forward) | block (only the first --recompute-num-layers blocks of each "
                 "model chunk do; the others keep their activations) [uniform]")
      ->group(g_plan);
  cmd.add_option("--recompute-num-layers", o.recompute_num_layers,
                 "Megatron-LM: blocks per chunk that --recompute-method block replays, or "
                 "(uniform) blocks a group replays at once, keeping one input a group [1]")
      ->group(g_plan);
  list(cmd, "--ddp-bucket-size", o.ddp_bucket_mb,
       "DDP gradient bucket in MiB (PyTorch bucket_cap_mb) [25]")
      ->group(g_plan);
  cmd.add_flag("--no-overlap-grad-reduce", o.no_overlap_grad_reduce,
               "gradient reduction waits for the end of backward")
      ->group(g_plan);
  cmd.add_flag("--no-overlap-param-gather", o.no_overlap_param_gather,
               "ZeRO-3 gathers without prefetch")
      ->group(g_plan);
  const char* g_fw = "Framework collective patterns (docs/workload.md)";
  cmd.add_option("--framework", o.framework,
                 "whose collective pattern: megatron|deepspeed|fsdp [commscope's own]")
      ->group(g_fw);
  cmd.add_option("--fsdp-sharding", o.fsdp_sharding,
                 "FSDP ShardingStrategy: full_shard|shard_grad_op|hybrid_shard|no_shard|"
                 "hybrid_shard_zero2 (HSDP keeping the parameters after forward) [full_shard]")
      ->group(g_fw);
  cmd.add_option("--fsdp-wrap", o.fsdp_wrap,
                 "FSDP units: block (transformer_auto_wrap_policy: one per block + root) | model "
                 "(one unit) [block]")
      ->group(g_fw);
  cmd.add_option("--fsdp-prefetch", o.fsdp_prefetch,
                 "FSDP backward_prefetch: backward_pre|backward_post|none [backward_pre]")
      ->group(g_fw);
  cmd.add_option("--fsdp-grad-sync", o.fsdp_grad_sync,
                 "when FSDP reduces gradients under accumulation: micro-batch (every one) | "
                 "last-micro-batch (no_sync() before it) | step (after the last backward, as "
                 "torch.distributed.pipelining does) [micro-batch]")
      ->group(g_fw);
  cmd.add_option("--fsdp-shard-size", o.fsdp_shard_size,
                 "HSDP's shard group: N data-parallel ranks, the model replicated DP / N times "
                 "(torchtitan's data_parallel_shard_degree) [the DP ranks of a node]")
      ->group(g_fw);
  cmd.add_option("--fsdp-replicate-size", o.fsdp_replicate_size,
                 "HSDP's replicate group instead: N replicas, each sharded over DP / N ranks "
                 "(torchtitan's data_parallel_replicate_degree)")
      ->group(g_fw);
  o.fsdp_limit_all_gathers_flag = cmd.add_flag("--fsdp-limit-all-gathers", o.fsdp_limit_all_gathers,
                                               "FSDP limit_all_gathers (=false to lift it) [true]")
                                      ->type_name("BOOLEAN")
                                      ->group(g_fw);
  o.pipe_partitioned_flag =
      cmd.add_flag("--scatter-gather-tensors-in-pipeline,--pipe-partitioned", o.pipe_partitioned,
                   "pipeline tensors sent as 1/TP slices, all-gathered over TP at the receiver "
                   "(DeepSpeed pipeline.pipe_partitioned; Megatron-LM before Core) (=false to "
                   "send them whole) [true under deepspeed, else false]")
          ->type_name("BOOLEAN")
          ->group(g_fw);
  cmd.add_flag("--use-distributed-optimizer", o.use_distributed_optimizer,
               "Megatron-LM's distributed optimizer: gradient reduce-scatter and parameter "
               "all-gather over DP")
      ->group(g_fw);
  add_optimizer_precision_options(cmd, o.optimizer_precision, g_fw);
  cmd.add_flag("--overlap-grad-reduce", o.overlap_grad_reduce,
               "Megatron-LM: reduce gradient buckets during backward [off under megatron]")
      ->group(g_fw);
  cmd.add_flag("--overlap-param-gather", o.overlap_param_gather,
               "Megatron-LM: gather parameter buckets during the next forward [off]")
      ->group(g_fw);
  // ---- context and expert parallelism ----
  const char* g_moe = "Context and expert parallelism (Megatron-LM spellings)";
  list(cmd, "--cp,--context-parallel-size", o.cp,
       "context-parallel size: each sequence split over CP ranks, ring attention [1]")
      ->group(g_moe);
  cmd.add_option("--cp-comm-type", o.cp_comm_type,
                 "how CP exchanges K and V: p2p (ring beside the attention blocks) | all_gather "
                 "(all-gather before attention, reduce-scatter of dK and dV after) | a2a "
                 "(all-to-all of Q, K, V and the output: heads scattered, as DeepSpeed-Ulysses) "
                 "| a2a+p2p (all-to-alls over the first level of "
                 "--hierarchical-context-parallel-sizes, the ring over the second) [p2p]")
      ->group(g_moe);
  cmd.add_option("--hierarchical-context-parallel-sizes", o.hierarchical_cp_sizes,
                 "a2a+p2p: the all-to-all level's CP size, then the ring's (product: CP), as "
                 "Megatron-LM spells them ('2 4')")
      ->expected(1, 8)
      ->type_name("INT INT")
      ->group(g_moe);
  list(cmd, "--ep,--expert-model-parallel-size", o.ep,
       "expert-parallel size: a MoE layer's experts split over EP ranks [1]")
      ->group(g_moe);
  cmd.add_option("--expert-tensor-parallel-size", o.expert_tp,
                 "tensor-parallel size inside each expert: 1 or TP [TP]")
      ->group(g_moe);
  cmd.add_option("--moe-expert-capacity-factor,--moe-capacity-factor", o.moe_capacity_factor,
                 "tokens an expert takes at most, over its even share (tokens beyond are "
                 "dropped) [no limit]")
      ->group(g_moe);
  cmd.add_flag("--moe-pad-expert-input-to-capacity", o.moe_pad_to_capacity,
               "with a capacity factor: every expert takes exactly its capacity of each rank's "
               "tokens (padded), so the all-to-all's size does not follow the routing")
      ->group(g_moe);
  cmd.add_option("--moe-min-capacity", o.moe_min_capacity,
                 "DeepSpeed-MoE (--framework deepspeed): the capacity's floor in tokens, "
                 "Megatron-DeepSpeed's flag [4]")
      ->group(g_moe);
  cmd.add_option("--moe-token-dispatcher-type", o.moe_dispatcher,
                 "how MoE tokens reach the experts: alltoall (NCCL's all-to-all, a copy per "
                 "routed expert) | flex (DeepEP/HybridEP: a token crosses the network once per "
                 "node holding its experts, then NVLink) [alltoall]")
      ->group(g_moe);
  cmd.add_flag("--overlap-moe-expert-parallel-comm", o.overlap_moe_ep_comm,
               "Megatron-Core: in 1F1B's steady state run one micro-batch's forward with "
               "another's backward, layer by layer, each one's all-to-alls beside the other's "
               "compute (combined 1F1B; with PP it needs virtual stages)")
      ->group(g_moe);
  cmd.add_flag("--delay-wgrad-compute", o.delay_wgrad_compute,
               "Megatron-Core, with the overlap above: the weight-gradient GEMMs after the "
               "all-to-all that waits for the data gradient")
      ->group(g_moe);
  cmd.add_option("--moe-router-num-groups", o.moe_router_groups,
                 "group-limited routing: the experts in this many groups (DeepSeek-V3's "
                 "node-limited routing: n_group); the flex dispatcher's network copies follow it "
                 "[the model's]")
      ->group(g_moe);
  cmd.add_option("--moe-router-group-topk", o.moe_router_group_topk,
                 "group-limited routing: the groups each token's experts come from (topk_group) "
                 "[the model's]")
      ->group(g_moe);
  cmd.add_option("--moe-routing-imbalance", o.moe_routing_imbalance,
                 "the busiest EP rank's routed tokens over the mean, 1 to EP [1: even]")
      ->group(g_moe);
  cmd.add_option("--moe-aux-loss-coeff", o.moe_aux_loss_coeff,
                 "the load-balancing loss's weight (Megatron-LM's; the Switch Transformer's "
                 "loss): train adds it to the objective and reports it; describe and predict "
                 "count no cost for it [0]")
      ->group(g_moe);
  // ---- DeepSpeed's release (issue 11) ----
  cmd.add_option(
         "--deepspeed-version", o.deepspeed_version,
         "DeepSpeed release whose ZeRO-3 to replay, from presets/frameworks/deepspeed.json: "
         "0.3 (v0.3.13-v0.5.x, 2021: no gather overlap, one call per parameter, host "
         "cost per call, NICs per group) | current [current]")
      ->group(g_fw);
  cmd.add_option("--zero3-host-per-rank-call", o.zero3_host_per_rank_call,
                 "DeepSpeed ZeRO-3 host seconds per rank of the group per collective call, "
                 "0 = off [the --deepspeed-version preset's]")
      ->group(g_fw);
  cmd.add_option("--zero3-nics-per-group", o.zero3_nics_per_group,
                 "DeepSpeed ZeRO-3: NICs of a node one collective spreads over, 0 = the "
                 "system's scale.nics_per_group [the --deepspeed-version preset's]")
      ->group(g_fw);
  // ---- NCCL's algorithms (issue 11; docs/cost-model.md, "NVLS and CollNet") ----
  cmd.add_option_function<std::string>(
         "--nccl-algo", [&o](const std::string& v) { o.flags.nccl_algo = v; },
         "NCCL's algorithms the model may pick, in NCCL_ALGO's syntax: ring,tree,nvls,nvlstree,"
         "collnet (CollNet only where named, as NCCL_COLLNET_ENABLE), ^nvls to exclude, "
         "allreduce:nvls;allgather:ring per function [every one the system has]")
      ->group(g_plan);
  cmd.add_option(
         "--deepspeed-config,--deepspeed_config", o.deepspeed_config,
         "DeepSpeed ds_config.json: batch sizes, ZeRO stage and buckets, fp16/bf16 (flags win)")
      ->group(g_plan);
  cmd.add_option("--torchtitan-config,--job.config_file", o.torchtitan_config,
                 "torchtitan job file (TOML): [model] name and flavor, [training] batch, seq_len "
                 "and precision, [parallelism] degrees and schedule, [activation_checkpoint]; "
                 "FSDP2 with FlashAttention (flags win; docs/predict.md)")
      ->group(g_plan);

  const char* g_cc = "Compressed communication (docs/workload.md)";
  add_grad_comm_dtype_options(cmd, o.grad_comm_dtype, o.grad_reduce_in_bf16, g_cc);
  add_compression_options(cmd, o.compression, g_cc);

  list(cmd, "--micro-batch-size", o.micro_batch,
       "samples per GPU per micro-batch [4 with the defaults]")
      ->group(g_batch);
  list(cmd, "--global-batch-size", o.global_batch, "samples per iteration [micro-batch x DP]")
      ->group(g_batch);
  list(cmd, "--gradient-accumulation-steps", o.grad_accum, "micro-batches per iteration")
      ->group(g_batch);
  cmd.add_option("--precision", o.precision,
                 "fp32|fp16|bf16|fp8 (fp16/bf16: mixed with fp32 master; fp8: bf16 with FP8 "
                 "GEMMs, as --fp8) [bf16]")
      ->group(g_batch);
  cmd.add_flag("--fp16", o.fp16, "same as --precision fp16")->group(g_batch);
  cmd.add_flag("--bf16", o.bf16, "same as --precision bf16")->group(g_batch);
  add_modern_training_options(cmd, o, g_plan, g_batch);
}

namespace {
// A ds_config.json's batch fields beside the batch flags. Flags win: of train_batch_size,
// train_micro_batch_size_per_gpu and gradient_accumulation_steps two fix the third, so the
// file's fields give way, the accumulation first and the global batch last, until the flags and
// the file name at most two of them (--micro-batch-size 8 keeps the file's train_batch_size and
// drops its accumulation).
void deepspeed_batch(PlanInput& ds, bool micro_flag, bool global_flag, bool accum_flag) {
  const int flags = int{micro_flag} + int{global_flag} + int{accum_flag};
  if (flags == 0) return;
  if (micro_flag) ds.micro_batch.reset();
  if (global_flag) ds.global_batch.reset();
  if (accum_flag) ds.grad_accum.reset();
  int named = flags;
  for (std::optional<std::int64_t>* field : {&ds.global_batch, &ds.micro_batch, &ds.grad_accum})
    if (field->has_value()) {
      if (named < 2)
        ++named;
      else
        field->reset();
    }
}

// The plan fields a configuration file set and no flag replaced, for errors that name the
// file's field (ScenarioInput::file_fields): each as the flag resolve_scenario's errors name,
// where a ds_config.json has it, and where a torchtitan job file has it.
void note_file_fields(const ScenarioOptions& o, const PlanInput& flags, const PlanInput& file,
                      bool deepspeed, ScenarioInput& in) {
  const std::string& path = deepspeed ? o.deepspeed_config : o.torchtitan_config;
  struct Field {
    const char* flag;
    const char* ds;  // nullptr: a ds_config does not set it
    const char* tt;  // nullptr: a torchtitan file does not set it
    bool in_file, by_flag;
  };
  const bool pipelined = file.pp.value_or(1) > 1;
  const Field fields[] = {
      {"--zero", "zero_optimization.stage", nullptr, file.zero.has_value(), !o.zero.empty()},
      {"--micro-batch-size", "train_micro_batch_size_per_gpu",
       pipelined ? "[parallelism] pipeline_parallel_microbatch_size"
                 : "[training] local_batch_size",
       file.micro_batch.has_value(), !o.micro_batch.empty()},
      {"--global-batch-size", "train_batch_size", "[training] global_batch_size",
       file.global_batch.has_value(), !o.global_batch.empty()},
      {"--gradient-accumulation-steps", "gradient_accumulation_steps", nullptr,
       file.grad_accum.has_value(), !o.grad_accum.empty()},
      {"--precision", "fp16.enabled / bf16.enabled", "[training] mixed_precision_param",
       file.precision.has_value(), flags.precision.has_value()},
      {"--tensor-model-parallel-size", nullptr, "[parallelism] tensor_parallel_degree",
       file.tp.has_value(), !o.tp.empty()},
      {"--pipeline-model-parallel-size", nullptr, "[parallelism] pipeline_parallel_degree",
       file.pp.has_value(), !o.pp.empty()},
      {"--dp", nullptr, "[parallelism] data_parallel_shard_degree", file.dp.has_value(),
       !o.dp.empty()},
      {"--context-parallel-size", nullptr, "[parallelism] context_parallel_degree",
       file.cp.has_value(), !o.cp.empty()},
      {"--expert-model-parallel-size", nullptr, "[parallelism] expert_parallel_degree",
       file.ep.has_value(), !o.ep.empty()},
      {"--expert-tensor-parallel-size", nullptr, "[parallelism] expert_tensor_parallel_degree",
       file.expert_tp.has_value(), flags.expert_tp.has_value()},
      {"--seq-length", nullptr, "[training] seq_len", file.seq_length.has_value(),
       !o.seq_length.empty()},
      {"--recompute-granularity", nullptr, "[activation_checkpoint] mode",
       file.recompute.has_value(), flags.recompute.has_value()},
      {"--schedule", nullptr, "[parallelism] pipeline_parallel_schedule", file.schedule.has_value(),
       !o.schedule.empty()},
      {"--sequence-parallel", nullptr,
       "[parallelism] tensor_parallel_degree (torchtitan's TP is sequence parallel)",
       file.sequence_parallel.value_or(false), flags.sequence_parallel.has_value()},
      // the fields named as written, not as a flag
      {"local_batch_size", nullptr, "[training] local_batch_size", file.local_batch.has_value(),
       false},
      {"reduce_bucket_size", "zero_optimization.reduce_bucket_size", nullptr,
       file.zero_reduce_bucket.has_value(), false},
      {"allgather_bucket_size", "zero_optimization.allgather_bucket_size", nullptr,
       file.zero_allgather_bucket.has_value(), false},
      {"--offload-optimizer", "zero_optimization.offload_optimizer", nullptr,
       file.offload_optimizer.value_or(false), flags.offload_optimizer.has_value()},
      {"--offload-param", "zero_optimization.offload_param", nullptr,
       file.offload_param.value_or(false), flags.offload_param.has_value()},
  };
  for (const Field& f : fields) {
    const char* where = deepspeed ? f.ds : f.tt;
    if (where && f.in_file && !f.by_flag)
      in.file_fields.emplace_back(f.flag, fmt::format("{}: {}", path, where));
  }
}
}  // namespace

Result<std::vector<ScenarioInput>> scenario_inputs(const ScenarioOptions& o) {
  ScenarioInput in = default_scenario_input();
  PlanInput flags = o.flags;
  // The default of 4 nodes gives way when the user sizes the job another way.
  if (!o.gpus.empty() || !o.dp.empty()) in.plan.nodes.reset();
  if (!o.torchtitan_config.empty() && !o.deepspeed_config.empty())
    return Error{"--torchtitan-config: expected it or --deepspeed-config, got both"};
  bool micro_given = !o.micro_batch.empty();
  PlanInput file_plan;  // what a configuration file set (ScenarioInput::file_fields)
  if (!o.deepspeed_config.empty()) {
    std::vector<std::string> ds_notes;
    CS_ASSIGN_OR_RETURN(PlanInput ds, read_deepspeed_config(o.deepspeed_config, &ds_notes));
    for (const std::string& note : ds_notes)
      print_note(fmt::format("{}: {}", o.deepspeed_config, note));
    // DeepSpeed's _set_batch_related_parameters asserts "Either train_batch_size or
    // train_micro_batch_size_per_gpu needs to be provided" where the accumulation is the only
    // batch field: so does commscope, unless a batch flag provides one.
    if (ds.grad_accum && !ds.micro_batch && !ds.global_batch && o.micro_batch.empty() &&
        o.global_batch.empty())
      return Error{fmt::format(
          "{}: gradient_accumulation_steps: expected train_batch_size or "
          "train_micro_batch_size_per_gpu beside it (DeepSpeed asserts one of them), got {} "
          "alone",
          o.deepspeed_config, *ds.grad_accum)};
    deepspeed_batch(ds, !o.micro_batch.empty(), !o.global_batch.empty(), !o.grad_accum.empty());
    in.plan.merge(ds);
    file_plan = ds;
    micro_given = micro_given || ds.micro_batch.has_value();
  }
  // A torchtitan job file: its model (unless --model names one) and plan; its batch gives way
  // to --micro-batch-size or --global-batch-size.
  bool file_accum = false;
  if (!o.torchtitan_config.empty()) {
    CS_RETURN_IF_ERROR(check_flag_file("--torchtitan-config", o.torchtitan_config));
    CS_ASSIGN_OR_RETURN(TorchtitanJob job, load_torchtitan_config(o.torchtitan_config));
    // --recompute-granularity replaces the file's checkpointing, its every-k-th block with it;
    // --recompute-method or --recompute-num-layers replaces the file's interval.
    if (!o.recompute.empty() || o.recompute_activations) {
      job.plan.recompute_block.reset();
      job.plan.recompute_num_layers.reset();
      job.plan.recompute_layer_interval.reset();
    }
    if (!o.recompute_method.empty() || !o.recompute_num_layers.empty())
      job.plan.recompute_layer_interval.reset();
    // The file's stage split is for its own PP and schedule (torchtitan's pipeline_llm weighs
    // the embedding and output as layers): a flag that changes either, or splits the layers
    // itself, replaces it (it was kept and blamed on --pipeline-stage-layers, found by probing,
    // 2026-11-30); so does a schedule flag the file's virtual stages.
    const bool resplit = !o.pp.empty() || !o.vp.empty() || !o.schedule.empty() ||
                         !o.pipeline_stage_layers.empty() || !o.first_stage_layers.empty() ||
                         !o.last_stage_layers.empty() || !o.pipeline_layout.empty() ||
                         !o.layers_per_virtual_stage.empty() || o.account_embedding ||
                         o.account_loss;
    if (resplit && job.plan.stage_layers) {
      job.plan.stage_layers.reset();
      job.notes.push_back(
          "its pipeline stage split (torchtitan's pipeline_llm, for the file's PP and schedule) "
          "gives way to the pipeline flags; the layers split as commscope splits them unless "
          "--pipeline-stage-layers says");
    }
    // A schedule flag replaces the file's virtual stages; torchtitan's multi-stage schedules
    // have 2 stages per rank where nothing says (pipeline_module_split's default), so
    // --schedule interleaved does too (it asked for --vp, 2026-11-30).
    if (!o.schedule.empty() && o.vp.empty()) {
      if (schedule_from_name(o.schedule) == Schedule::interleaved) {
        job.plan.virtual_stages = 2;
        job.notes.push_back(
            "--schedule interleaved: 2 virtual stages per pipeline rank, torchtitan's default "
            "for a multi-stage schedule (--vp says otherwise)");
      } else {
        job.plan.virtual_stages.reset();
      }
    }
    // torchtitan's tensor parallelism is sequence parallel: a --tp flag's TP is too (and a TP
    // of 1 has none, without the warning for turning it off).
    if (!o.tp.empty()) {
      const bool all_tp = std::all_of(o.tp.begin(), o.tp.end(), [](int t) { return t > 1; });
      if (all_tp)
        job.plan.sequence_parallel = true;
      else
        job.plan.sequence_parallel.reset();
    }
    in.plan.merge(job.plan);
    file_plan = job.plan;
    in.model = job.model;
    file_accum = job.plan.grad_accum.has_value();
    micro_given = micro_given || job.plan.micro_batch.has_value();
    for (const std::string& note : job.notes)
      print_note(fmt::format("{}: {}", o.torchtitan_config, note));
  }
  if (o.fp16 && o.bf16) return Error{"--fp16/--bf16: expected at most one of them, got both"};
  if (o.fp16) flags.precision = Precision::fp16;
  if (o.bf16) flags.precision = Precision::bf16;
  if (!o.precision.empty() && o.precision != "fp8") {
    auto p = precision_from_name(o.precision);
    if (!p)
      return Error{
          fmt::format("--precision: expected one of fp32|fp16|bf16|fp8, got '{}'", o.precision)};
    if ((o.fp16 || o.bf16) && *p != *flags.precision)
      return Error{
          fmt::format("--precision: '{}' contradicts --{}", o.precision, o.fp16 ? "fp16" : "bf16")};
    flags.precision = *p;
  }
  if (o.recompute_activations) flags.recompute = Recompute::selective;
  if (!o.recompute_modules.empty()) {
    auto m = parse_recompute_modules(o.recompute_modules);
    if (!m) return Error{"--recompute-modules: " + m.error().message};
    flags.recompute_modules = *m;
  }
  if (!o.recompute.empty()) {
    auto r = recompute_from_name(o.recompute);
    if (!r)
      return Error{
          fmt::format("--recompute-granularity: expected one of none|selective|full|op, got '{}'",
                      o.recompute)};
    flags.recompute = *r;
  }
  if (!o.schedule.empty()) {
    auto s = schedule_from_name(o.schedule);
    if (!s)
      return Error{
          fmt::format("--schedule: expected one of gpipe|1f1b|interleaved, got '{}'", o.schedule)};
    flags.schedule = *s;
  }
  if (!o.rank_order.empty()) {
    auto r = rank_order_from_name(o.rank_order);
    if (!r)
      return Error{
          fmt::format("--rank-order: expected tp-dp-pp or tp-pp-dp, got '{}'", o.rank_order)};
    flags.rank_order = *r;
  }
  if (o.no_overlap_grad_reduce) flags.overlap_grad_reduce = false;
  if (o.no_overlap_param_gather) flags.overlap_param_gather = false;
  if (o.overlap_grad_reduce && o.no_overlap_grad_reduce)
    return Error{
        "--overlap-grad-reduce: expected at most one of it and --no-overlap-grad-reduce, "
        "got both"};
  if (o.overlap_param_gather && o.no_overlap_param_gather)
    return Error{
        "--overlap-param-gather: expected at most one of it and "
        "--no-overlap-param-gather, got both"};
  if (o.overlap_grad_reduce) flags.overlap_grad_reduce = true;
  if (o.overlap_param_gather) flags.overlap_param_gather = true;
  if (o.use_distributed_optimizer) flags.use_distributed_optimizer = true;
  if (Status st = optimizer_precision_flags(o.optimizer_precision, flags); !st.ok())
    return st.error();
  if (!o.framework.empty()) {
    auto f = framework_from_name(o.framework);
    if (!f || *f == Framework::none)
      return Error{fmt::format("--framework: expected one of megatron|deepspeed|fsdp, got '{}'",
                               o.framework)};
    flags.framework = *f;
  }
  CS_RETURN_IF_ERROR(
      named_value("--fsdp-sharding", o.fsdp_sharding, fsdp_sharding_from_name,
                  "one of full_shard|shard_grad_op|hybrid_shard|no_shard|hybrid_shard_zero2",
                  flags.fsdp_sharding));
  CS_RETURN_IF_ERROR(named_value("--fsdp-wrap", o.fsdp_wrap, fsdp_wrap_from_name, "block or model",
                                 flags.fsdp_wrap));
  CS_RETURN_IF_ERROR(named_value("--fsdp-prefetch", o.fsdp_prefetch, fsdp_prefetch_from_name,
                                 "one of backward_pre|backward_post|none", flags.fsdp_prefetch));
  CS_RETURN_IF_ERROR(named_value("--fsdp-grad-sync", o.fsdp_grad_sync, fsdp_grad_sync_from_name,
                                 "one of micro-batch|last-micro-batch|step", flags.fsdp_grad_sync));
  if (o.fsdp_limit_all_gathers_flag && o.fsdp_limit_all_gathers_flag->count() > 0)
    flags.fsdp_limit_all_gathers = o.fsdp_limit_all_gathers;
  if (o.pipe_partitioned_flag && o.pipe_partitioned_flag->count() > 0)
    flags.pipe_partitioned = o.pipe_partitioned;
  CS_RETURN_IF_ERROR(compression_flags(o, flags));
  CS_RETURN_IF_ERROR(modern_training_flags(o, flags));
  {
    // A positive integer, or with zero_ok also 0 (as `factor` below).
    auto whole = [](const char* flag, const std::string& text, std::optional<int>& into,
                    bool zero_ok = false) -> Status {
      if (text.empty()) return {};
      auto v = parse_number<int>(text);
      if (!v || !(zero_ok ? *v >= 0 : *v > 0))
        return Error{fmt::format("{}: expected {}a positive integer, got '{}'", flag,
                                 zero_ok ? "0 or " : "", text)};
      into = *v;
      return {};
    };
    // A positive number, or with zero_ok also 0 (an off switch that is a value).
    auto factor = [](const char* flag, const std::string& text, std::optional<double>& into,
                     bool zero_ok = false) -> Status {
      if (text.empty()) return {};
      auto v = parse_number<double>(text);
      if (!v || !(zero_ok ? *v >= 0 : *v > 0))
        return Error{fmt::format("{}: expected {}a positive number, got '{}'", flag,
                                 zero_ok ? "0 or " : "", text)};
      into = *v;
      return {};
    };
    CS_RETURN_IF_ERROR(named_value("--cp-comm-type", o.cp_comm_type, cp_comm_type_from_name,
                                   "p2p, all_gather, a2a or a2a+p2p", flags.cp_comm_type));
    for (const std::string& text : o.hierarchical_cp_sizes) {
      auto v = parse_number<int>(text);
      if (!v || *v < 1)
        return Error{fmt::format(
            "--hierarchical-context-parallel-sizes: expected positive integers, got '{}'", text)};
      flags.hierarchical_cp_sizes.push_back(*v);
    }
    CS_RETURN_IF_ERROR(whole("--fsdp-shard-size", o.fsdp_shard_size, flags.fsdp_shard_size));
    CS_RETURN_IF_ERROR(
        whole("--fsdp-replicate-size", o.fsdp_replicate_size, flags.fsdp_replicate_size));
    CS_RETURN_IF_ERROR(
        whole("--moe-router-num-groups", o.moe_router_groups, flags.moe_router_groups));
    CS_RETURN_IF_ERROR(whole("--moe-min-capacity", o.moe_min_capacity, flags.moe_min_capacity,
                             /*zero_ok=*/true));  // 0 is DeepSpeed's "no floor"
    CS_RETURN_IF_ERROR(
        whole("--moe-router-group-topk", o.moe_router_group_topk, flags.moe_router_group_topk));
    if (o.overlap_moe_ep_comm) flags.overlap_moe_ep_comm = true;
    if (o.delay_wgrad_compute) flags.delay_wgrad_compute = true;
    CS_RETURN_IF_ERROR(named_value("--moe-token-dispatcher-type", o.moe_dispatcher,
                                   moe_dispatcher_from_name, "alltoall or flex",
                                   flags.moe_dispatcher));
    CS_RETURN_IF_ERROR(whole("--expert-tensor-parallel-size", o.expert_tp, flags.expert_tp));
    CS_RETURN_IF_ERROR(
        factor("--moe-expert-capacity-factor", o.moe_capacity_factor, flags.moe_capacity_factor));
    CS_RETURN_IF_ERROR(
        factor("--moe-routing-imbalance", o.moe_routing_imbalance, flags.moe_routing_imbalance));
    CS_RETURN_IF_ERROR(
        factor("--moe-aux-loss-coeff", o.moe_aux_loss_coeff, flags.moe_aux_loss_coeff, true));
  }
  if (!o.deepspeed_version.empty()) flags.deepspeed_version = o.deepspeed_version;
  if (!o.zero3_host_per_rank_call.empty()) {
    auto v = parse_number<double>(o.zero3_host_per_rank_call);
    if (!v || !(*v >= 0) || !(*v <= 1))
      return Error{fmt::format(
          "--zero3-host-per-rank-call: expected a number of seconds in [0, 1], got '{}'",
          o.zero3_host_per_rank_call)};
    flags.zero3_host_s_per_rank_per_call = *v;
  }
  if (!o.zero3_nics_per_group.empty()) {
    auto v = parse_number<int>(o.zero3_nics_per_group);
    if (!v || *v < 0 || *v > 1024)
      return Error{fmt::format(
          "--zero3-nics-per-group: expected an integer from 0 (the system's) to 1024, got '{}'",
          o.zero3_nics_per_group)};
    flags.zero3_nics_per_group = *v;
  }
  in.plan.merge(flags);
  if (!o.deepspeed_config.empty() || !o.torchtitan_config.empty())
    note_file_fields(o, flags, file_plan, !o.deepspeed_config.empty(), in);
  if (file_accum && (!o.micro_batch.empty() || !o.global_batch.empty()) && o.grad_accum.empty())
    in.plan.grad_accum.reset();
  // A precision flag is the user's word, not torchtitan's AMP rule.
  if (flags.precision) in.plan.amp_needs_fsdp.reset();
  // The file's local batch (torchtitan's samples per data-parallel rank and accumulation step)
  // stays beside a global batch flag, as beside torchtitan's --training.global_batch_size: the
  // steps, and under PP the pipeline schedules, follow from both. It goes with an accumulation
  // flag, which sets the steps itself, and with a micro-batch flag without PP, where the local
  // batch is the micro-batch (under PP the micro-batch is pipeline_parallel_microbatch_size's).
  if (!o.grad_accum.empty() || (!o.micro_batch.empty() && in.plan.pp.value_or(1) <= 1))
    in.plan.local_batch.reset();
  // A micro-batch no flag or file names, beside a global batch and an accumulation that fix it,
  // is derived (resolve_scenario: global batch / (accumulation x DP), as DeepSpeed derives it),
  // not the default's 4.
  const bool global_known = in.plan.global_batch || !o.global_batch.empty();
  bool accum_known = in.plan.grad_accum || !o.grad_accum.empty();
  // Under a ds_config.json, DeepSpeed's own rule (deepspeed/runtime/config.py,
  // _set_batch_related_parameters): a global batch alone means one accumulation step.
  if (!o.deepspeed_config.empty() && !micro_given && global_known && !accum_known) {
    in.plan.grad_accum = 1;
    accum_known = true;
  }
  if (!micro_given && global_known && accum_known) in.plan.micro_batch.reset();

  // The sweep's size before it is built: the product of the comma lists' lengths.
  double plans = 1;
  for (std::size_t n :
       {o.model.size(), o.system.size(), o.network.size(), o.nodes.size(), o.gpus.size(),
        o.tp.size(), o.pp.size(), o.dp.size(), o.vp.size(), o.cp.size(), o.ep.size(), o.zero.size(),
        o.micro_batch.size(), o.global_batch.size(), o.seq_length.size(),
        o.decoder_seq_length.size(), o.grad_accum.size(), o.ddp_bucket_mb.size()})
    plans *= static_cast<double>(std::max<std::size_t>(n, 1));
  if (plans > static_cast<double>(limits::kMaxSweepPlans))
    return Error{fmt::format(
        "sweep: expected at most {} plans (the product of the comma lists' lengths; commscope's "
        "limit), got {:.0f}",
        limits::kMaxSweepPlans, plans)};
  // A list's name that is no preset and no readable file is an error, as it is alone: it was
  // skipped like a plan whose sizes do not fit together, and a sweep with one plan left looked
  // like a prediction that exited 0 (found by probing, 2026-11-30).
  if (o.model.size() > 1)
    for (const std::string& m : o.model)
      if (auto r = load_model(m); !r) return r.error();
  if (o.system.size() > 1)
    for (const std::string& m : o.system)
      if (auto r = load_system(m); !r) return r.error();
  if (o.network.size() > 1)
    for (const std::string& m : o.network)
      if (auto r = load_network(m); !m.empty() && !r) return r.error();
  // Megatron-LM's model flags: a model of their own without --model (or a job file's model),
  // else each model of --model changed by them.
  CS_RETURN_IF_ERROR(model_flag_options(o.model_flags, in.model_flags));
  if (in.model_flags.any() && o.model.empty() && o.torchtitan_config.empty()) in.model.clear();
  std::vector<ScenarioInput> all = {in};
  all = times(all, o.model, [](ScenarioInput& x, const std::string& v) { x.model = v; });
  all = times(all, o.system, [](ScenarioInput& x, const std::string& v) { x.system = v; });
  all = times(all, o.network, [](ScenarioInput& x, const std::string& v) { x.network = v; });
  all = times(all, o.nodes, [](ScenarioInput& x, int v) { x.plan.nodes = v; });
  all = times(all, o.gpus, [](ScenarioInput& x, int v) { x.plan.gpus = v; });
  all = times(all, o.tp, [](ScenarioInput& x, int v) { x.plan.tp = v; });
  all = times(all, o.pp, [](ScenarioInput& x, int v) { x.plan.pp = v; });
  all = times(all, o.dp, [](ScenarioInput& x, int v) { x.plan.dp = v; });
  all = times(all, o.vp, [](ScenarioInput& x, int v) { x.plan.virtual_stages = v; });
  all = times(all, o.cp, [](ScenarioInput& x, int v) { x.plan.cp = v; });
  all = times(all, o.ep, [](ScenarioInput& x, int v) { x.plan.ep = v; });
  all = times(all, o.zero, [](ScenarioInput& x, int v) { x.plan.zero = v; });
  all = times(all, o.micro_batch, [](ScenarioInput& x, std::int64_t v) { x.plan.micro_batch = v; });
  all =
      times(all, o.global_batch, [](ScenarioInput& x, std::int64_t v) { x.plan.global_batch = v; });
  all = times(all, o.seq_length, [](ScenarioInput& x, std::int64_t v) { x.plan.seq_length = v; });
  all = times(all, o.decoder_seq_length,
              [](ScenarioInput& x, std::int64_t v) { x.plan.decoder_seq_length = v; });
  all = times(all, o.grad_accum, [](ScenarioInput& x, std::int64_t v) { x.plan.grad_accum = v; });
  all = times(all, o.ddp_bucket_mb, [](ScenarioInput& x, double v) { x.plan.ddp_bucket_mb = v; });
  return all;
}

Result<ScenarioInput> scenario_input(const ScenarioOptions& o) {
  CS_ASSIGN_OR_RETURN(auto all, scenario_inputs(o));
  if (all.size() != 1) {
    // The first flag given a list names the error (it said only "got 2 combinations").
    const std::pair<const char*, std::size_t> lists[] = {
        {"--model", o.model.size()},
        {"--system", o.system.size()},
        {"--network", o.network.size()},
        {"--nodes", o.nodes.size()},
        {"--gpus", o.gpus.size()},
        {"--tensor-model-parallel-size", o.tp.size()},
        {"--pipeline-model-parallel-size", o.pp.size()},
        {"--data-parallel-size", o.dp.size()},
        {"--virtual-pipeline-stages", o.vp.size()},
        {"--context-parallel-size", o.cp.size()},
        {"--expert-model-parallel-size", o.ep.size()},
        {"--zero", o.zero.size()},
        {"--micro-batch-size", o.micro_batch.size()},
        {"--global-batch-size", o.global_batch.size()},
        {"--seq-length", o.seq_length.size()},
        {"--decoder-seq-length", o.decoder_seq_length.size()},
        {"--gradient-accumulation-steps", o.grad_accum.size()},
        {"--ddp-bucket-size", o.ddp_bucket_mb.size()}};
    const char* flag = "a flag";
    for (const auto& [name, n] : lists)
      if (n > 1) {
        flag = name;
        break;
      }
    return Error{fmt::format(
        "{}: expected one value (this verb does not sweep), got a list; the flags' lists make {} "
        "combinations: use `commscope predict` for sweeps",
        flag, all.size())};
  }
  return all.front();
}

void add_model_flag_options(CLI::App& cmd, ModelFlagOptions& o, const std::string& group) {
  static const std::map<std::string, std::string> kHelp = {
      {"--num-layers", "transformer blocks (without --model: a GPT of these flags)"},
      {"--hidden-size", "model width"},
      {"--ffn-hidden-size", "MLP inner width [4 x hidden; with --swiglu 8/3 x hidden, to 64]"},
      {"--num-attention-heads", "attention heads"},
      {"--num-query-groups", "key/value heads, with --group-query-attention"},
      {"--kv-channels", "channels per head [hidden / heads]"},
      {"--max-position-embeddings", "learned position table [the sequence length]"},
      {"--vocab-size", "vocabulary, as padded [50304 without --model]"},
      {"--num-experts", "routed experts per MoE layer"},
      {"--moe-router-topk", "experts per token [2]"},
      {"--moe-ffn-hidden-size", "one expert's inner width [--ffn-hidden-size]"},
      {"--moe-shared-expert-intermediate-size", "the shared experts' inner width in all"},
      {"--expert-interval",
       "Megatron-DeepSpeed: MoE in blocks k, 2k, ... (1-based), dense between [1]"}};
  for (auto& size : o.sizes)
    size.option = cmd.add_option(size.flag, size.value, kHelp.at(size.flag))->group(group);
  cmd.add_flag("--group-query-attention", o.group_query_attention,
               "grouped-query attention (--num-query-groups)")
      ->group(group);
  cmd.add_flag("--swiglu", o.swiglu, "SwiGLU MLP (gated)")->group(group);
  cmd.add_option("--normalization", o.normalization, "LayerNorm | RMSNorm [LayerNorm]")
      ->group(group);
  cmd.add_option("--position-embedding-type", o.position_embedding,
                 "learned_absolute | rope | none [learned_absolute]")
      ->group(group);
  cmd.add_flag("--untie-embeddings-and-output-weights", o.untie,
               "an output layer of its own, not the input embedding's")
      ->group(group);
  cmd.add_flag("--disable-bias-linear", o.disable_bias, "linear layers without biases")
      ->group(group);
  cmd.add_flag("--add-qkv-bias", o.add_qkv_bias,
               "biases on the QKV projection alone (with --disable-bias-linear: Qwen2's)")
      ->group(group);
  cmd.add_flag("--qk-layernorm", o.qk_layernorm,
               "a norm on each query and key head (Qwen3's q_norm and k_norm)")
      ->group(group);
  o.attention_dropout_option =
      cmd.add_option("--attention-dropout", o.attention_dropout,
                     "dropout on the attention probabilities; with --hidden-dropout, 0 for both "
                     "stores no masks [0.1 without --model]")
          ->group(group);
  o.hidden_dropout_option = cmd.add_option("--hidden-dropout", o.hidden_dropout,
                                           "dropout on the block outputs [0.1 without --model]")
                                ->group(group);
  cmd.add_flag("--use-flash-attn", o.flash,
               "FlashAttention, as the model's own kernel (--attention flash)")
      ->group(group);
}

Status model_flag_options(const ModelFlagOptions& o, ModelFlags& flags) {
  std::optional<std::int64_t>* into[] = {&flags.num_layers,
                                         &flags.hidden_size,
                                         &flags.ffn_hidden_size,
                                         &flags.num_attention_heads,
                                         &flags.num_query_groups,
                                         &flags.kv_channels,
                                         &flags.max_position_embeddings,
                                         &flags.vocab_size,
                                         &flags.num_experts,
                                         &flags.moe_router_topk,
                                         &flags.moe_ffn_hidden_size,
                                         &flags.moe_shared_expert_intermediate_size,
                                         &flags.expert_interval};
  static_assert(std::size(into) == 13);
  for (std::size_t i = 0; i < o.sizes.size() && i < std::size(into); ++i)
    if (o.sizes[i].option && o.sizes[i].option->count() > 0) *into[i] = o.sizes[i].value;
  flags.group_query_attention = o.group_query_attention;
  flags.swiglu = o.swiglu;
  flags.untie_embeddings = o.untie;
  flags.disable_bias_linear = o.disable_bias;
  flags.add_qkv_bias = o.add_qkv_bias;
  flags.qk_layernorm = o.qk_layernorm;
  flags.use_flash_attn = o.flash;
  if (o.attention_dropout_option && o.attention_dropout_option->count() > 0)
    flags.attention_dropout = o.attention_dropout;
  if (o.hidden_dropout_option && o.hidden_dropout_option->count() > 0)
    flags.hidden_dropout = o.hidden_dropout;
  CS_RETURN_IF_ERROR(named_value("--normalization", o.normalization, megatron_normalization,
                                 "LayerNorm or RMSNorm", flags.normalization));
  return named_value("--position-embedding-type", o.position_embedding, megatron_position_embedding,
                     "learned_absolute, rope or none", flags.position_embedding);
}

void add_compression_options(CLI::App& cmd, CompressionOptions& o, const std::string& group,
                             const std::string& zeropp_where,
                             const std::string& compression_where) {
  cmd.add_flag("--zero-quantized-weights", o.zero_quantized_weights,
               "ZeRO++ qwZ: ZeRO-3 parameter all-gather in int8 with per-block fp32 scales" +
                   zeropp_where)
      ->group(group);
  o.zero_hpz_flag =
      cmd.add_option("--zero-hpz-partition-size", o.zero_hpz_partition_size,
                     "ZeRO++ hpZ: secondary parameter shard over this many ranks of a node; the "
                     "backward all-gather stays within it" +
                         zeropp_where + " [1: off]")
          ->group(group);
  cmd.add_flag("--zero-quantized-gradients", o.zero_quantized_gradients,
               "ZeRO++ qgZ: gradient reduce-scatter as int4 all-to-all, intra-node then "
               "inter-node" +
                   zeropp_where)
      ->group(group);
  cmd.add_option("--grad-compression", o.grad_compression,
                 "DDP gradient compression: powersgd:rank=R (PowerSGD) | onebit (1-bit Adam) | "
                 "none" +
                     compression_where + " [none]")
      ->group(group);
}

Status compression_option_flags(const CompressionOptions& o, PlanInput& flags) {
  if (o.zero_quantized_weights) flags.zeropp_qwz = true;
  if (o.zero_quantized_gradients) flags.zeropp_qgz = true;
  if (o.zero_hpz_flag && o.zero_hpz_flag->count() > 0) {
    if (o.zero_hpz_partition_size < 1)
      return Error{fmt::format("--zero-hpz-partition-size: expected a positive integer, got '{}'",
                               o.zero_hpz_partition_size)};
    flags.zeropp_hpz = o.zero_hpz_partition_size;
  }
  const std::string& c = o.grad_compression;
  if (!c.empty()) {
    const std::string prefix = "powersgd:rank=";
    if (c == "none") {
      flags.grad_compression = GradCompression::none;
    } else if (c == "onebit" || c == "1bit") {
      flags.grad_compression = GradCompression::onebit;
    } else if (c.rfind(prefix, 0) == 0) {
      auto r = parse_number<int>(c.substr(prefix.size()));
      if (!r || *r < 1 || *r > 1 << 20)
        return Error{fmt::format(
            "--grad-compression: expected powersgd:rank=R with R an integer from 1 to {}, got "
            "'{}'",
            1 << 20, c)};
      flags.grad_compression = GradCompression::powersgd;
      flags.powersgd_rank = *r;
    } else {
      return Error{
          fmt::format("--grad-compression: expected powersgd:rank=R, onebit or none, got '{}'", c)};
    }
  }
  return {};
}

void add_grad_comm_dtype_options(CLI::App& cmd, std::string& dtype, bool& in_bf16,
                                 const std::string& group, const std::string& where) {
  cmd.add_option(
         "--grad-comm-dtype,--communication-data-type", dtype,
         "data-parallel gradient all-reduce/reduce-scatter on the wire: fp32|bf16|fp16|fp8, "
         "summed in fp32 (DeepSpeed communication_data_type)" +
             where + " [the gradients' type]")
      ->group(group);
  cmd.add_flag("--grad-reduce-in-bf16", in_bf16, "Megatron-LM's spelling of --grad-comm-dtype bf16")
      ->group(group);
}

Status cross_entropy_flags(const std::string& name, bool fusion, PlanInput& flags) {
  std::optional<CrossEntropy> given;
  CS_RETURN_IF_ERROR(named_value("--cross-entropy", name, cross_entropy_from_name,
                                 "vocab-parallel, fused, torch or flash-attn", given));
  if (fusion && given && *given != CrossEntropy::fused)
    return Error{fmt::format(
        "--cross-entropy: expected fused or nothing with --cross-entropy-loss-fusion, got '{}'",
        name)};
  if (fusion) given = CrossEntropy::fused;
  if (given) flags.cross_entropy = given;
  return {};
}

Status grad_comm_dtype_flags(const std::string& dtype, bool in_bf16, PlanInput& flags) {
  if (in_bf16) flags.grad_comm_dtype = DType::bf16;
  if (dtype.empty()) return {};
  auto d = grad_comm_dtype_from_name(dtype);
  if (!d)
    return Error{
        fmt::format("--grad-comm-dtype: expected one of fp32|bf16|fp16|fp8, got '{}'", dtype)};
  if (in_bf16 && *d != DType::bf16)
    return Error{fmt::format("--grad-comm-dtype: '{}' contradicts --grad-reduce-in-bf16", dtype)};
  flags.grad_comm_dtype = *d;
  return {};
}

void add_optimizer_precision_options(CLI::App& cmd, OptimizerPrecisionOptions& o,
                                     const std::string& group, const std::string& where) {
  cmd.add_flag("--use-precision-aware-optimizer", o.precision_aware_optimizer,
               "Megatron-Core: Transformer Engine's FusedAdam with the state dtypes below (fp32 "
               "master weights over bf16 parameters kept as 16-bit remainders)" +
                   where)
      ->group(group);
  cmd.add_option("--exp-avg-dtype", o.exp_avg_dtype,
                 "Adam's first moment under --use-precision-aware-optimizer: fp32|fp16|bf16|fp8 "
                 "[fp32]")
      ->group(group);
  cmd.add_option("--exp-avg-sq-dtype", o.exp_avg_sq_dtype,
                 "Adam's second moment under --use-precision-aware-optimizer: fp32|fp16|bf16|fp8 "
                 "[fp32]")
      ->group(group);
  cmd.add_option("--main-params-dtype", o.main_params_dtype,
                 "the master weights under --use-precision-aware-optimizer: fp32|fp16 [fp32]")
      ->group(group);
  cmd.add_option("--main-grads-dtype", o.main_grads_dtype,
                 "the gradients the optimizer takes under --use-precision-aware-optimizer: "
                 "fp32|bf16; bf16 keeps Megatron's gradient buffer and its reduction in bf16 "
                 "[fp32]")
      ->group(group);
  cmd.add_flag("--optimizer-cpu-offload", o.optimizer_cpu_offload,
               "Megatron-Core's HybridDeviceOptimizer: a fraction of the distributed "
               "optimizer's shard keeps its fp32 master, moments and gradients in host memory "
               "and steps with torch's AdamW on the CPU (needs --use-precision-aware-optimizer)")
      ->group(group);
  cmd.add_option("--optimizer-offload-fraction", o.optimizer_offload_fraction,
                 "under --optimizer-cpu-offload, the share of the shard's elements stepped on "
                 "the CPU, in (0, 1] [1]")
      ->group(group);
  cmd.add_flag("--overlap-cpu-optimizer-d2h-h2d", o.overlap_cpu_optimizer_d2h_h2d,
               "under --optimizer-cpu-offload, one CPU optimizer a parameter, its copies on "
               "streams of their own: the gradients out, the CPU steps and the weights back "
               "pipelined")
      ->group(group);
}

Status optimizer_precision_flags(const OptimizerPrecisionOptions& o, PlanInput& flags) {
  if (o.precision_aware_optimizer) flags.precision_aware_optimizer = true;
  for (auto [flag, text, into, fp8_ok] :
       {std::tuple{"--exp-avg-dtype", &o.exp_avg_dtype, &flags.exp_avg_dtype, true},
        std::tuple{"--exp-avg-sq-dtype", &o.exp_avg_sq_dtype, &flags.exp_avg_sq_dtype, true},
        std::tuple{"--main-params-dtype", &o.main_params_dtype, &flags.main_params_dtype, false}}) {
    if (text->empty()) continue;
    const auto d = grad_comm_dtype_from_name(*text);  // fp32, bf16, fp16, fp8 and aliases
    const bool allowed = d && (*d == DType::fp32 || *d == DType::fp16 ||
                               (fp8_ok && (*d == DType::bf16 || *d == DType::fp8)));
    if (!allowed)
      return Error{fmt::format("{}: expected one of {}, got '{}'", flag,
                               fp8_ok ? "fp32|fp16|bf16|fp8" : "fp32|fp16", *text)};
    *into = *d;
  }
  if (!o.main_grads_dtype.empty()) {  // Megatron-LM's choices: fp32, bf16
    const auto d = grad_comm_dtype_from_name(o.main_grads_dtype);
    if (!d || (*d != DType::fp32 && *d != DType::bf16))
      return Error{fmt::format("--main-grads-dtype: expected one of fp32|bf16, got '{}'",
                               o.main_grads_dtype)};
    flags.main_grads_dtype = *d;
  }
  if (o.optimizer_cpu_offload) flags.optimizer_cpu_offload = true;
  if (o.overlap_cpu_optimizer_d2h_h2d) flags.overlap_cpu_optimizer_d2h_h2d = true;
  if (!o.optimizer_offload_fraction.empty()) {
    const auto f = parse_number<double>(o.optimizer_offload_fraction);
    if (!f || !(*f > 0) || *f > 1)
      return Error{fmt::format("--optimizer-offload-fraction: expected a share in (0, 1], got '{}'",
                               o.optimizer_offload_fraction)};
    flags.optimizer_offload_fraction = *f;
  }
  return {};
}

std::string first_scenario_flag_given(const CLI::App& cmd) {
  for (const CLI::Option* opt : cmd.get_options()) {
    const std::string& g = opt->get_group();
    // (every group of the scenario options: the framework and compression flags were accepted
    // and ignored beside --scenario, found by probing, 2026-11-30)
    if ((g == "Model and system" || g == "Parallel plan (Megatron-LM spellings)" ||
         g == "Batch and precision" ||
         g == "Context and expert parallelism (Megatron-LM spellings)" ||
         g == "Framework collective patterns (docs/workload.md)" ||
         g == "Compressed communication (docs/workload.md)") &&
        opt->count() > 0)
      return opt->get_name(false, true).substr(0, opt->get_name(false, true).find(','));
  }
  return "";
}

}  // namespace commscope::cli

namespace commscope::cli {

void add_megatron_args_option(CLI::App& cmd, std::string& path, const std::string& group) {
  cmd.add_option("--megatron-args", path,
                 "a Megatron-LM launch script or argument file: the flags this verb has are "
                 "read from it (the command line's win), the rest skipped with a note "
                 "(docs/predict.md)")
      ->group(group);
}

namespace {

// The DeepSpeed configurations the --megatron-args script writes and names with its own
// --deepspeed_config: by script_file_key, as written, or why commscope could not read them.
struct ScriptConfigs {
  std::map<std::string, ScriptFile> files;
  std::map<std::string, std::string> unread;
};
ScriptConfigs& script_configs() {
  static ScriptConfigs configs;
  return configs;
}

}  // namespace

Result<PlanInput> read_deepspeed_config(const std::string& path, std::vector<std::string>* notes) {
  const ScriptConfigs& s = script_configs();
  const std::string key = script_file_key(path);
  if (const auto it = s.files.find(key); it != s.files.end()) {
    const ScriptFile& f = it->second;
    const std::string where = fmt::format("{} (as {}:{} writes it)", path, f.where, f.line);
    if (!f.unresolved.empty())
      return Error{fmt::format(
          "{}: expected the values the script writes into it, got '{}', which the script takes "
          "from what commscope does not know (its arguments, the environment, a command): set it "
          "in the script, or give --deepspeed-config a file",
          where, f.unresolved)};
    print_note(fmt::format(
        "{}: read as {} writes it at line {} ({}) before it launches, not from disk{}{}", path,
        f.where, f.line, f.how,
        f.defaults.empty()
            ? std::string()
            : fmt::format("; with the script's defaults for {}", fmt::join(f.defaults, ", ")),
        f.unknown_if ? fmt::format("; written in a branch whose condition commscope does not "
                                   "decide (the if on line {})",
                                   f.unknown_if)
                     : std::string()));
    CS_ASSIGN_OR_RETURN(auto j, parse_json_text(f.text, where));
    return plan_from_deepspeed(j, where, notes);
  }
  if (const auto it = s.unread.find(key); it != s.unread.end()) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
      return Error{
          fmt::format("--deepspeed-config: {}: cannot open: No such file or directory; the "
                      "script writes it at {}: give --deepspeed-config the file the script would "
                      "write",
                      path, it->second)};
  }
  CS_RETURN_IF_ERROR(check_flag_file("--deepspeed-config", path));
  return load_deepspeed_config(path, notes);
}

Result<std::vector<std::string>> expand_megatron_args(const CLI::App& verb,
                                                      const std::vector<std::string>& args) {
  script_configs() = ScriptConfigs{};
  // Where the option is, and whether the command line names it at all.
  std::string path;
  for (std::size_t i = 0; i < args.size() && args[i] != "--"; ++i) {
    if (args[i] == "--megatron-args" && i + 1 < args.size()) path = args[i + 1];
    if (args[i].rfind("--megatron-args=", 0) == 0) path = args[i].substr(16);
  }
  if (path.empty()) return args;
  auto option = [&](std::string_view name) { return verb.get_option_no_throw(std::string(name)); };
  // The options the command line gives (by option, so that --tp and
  // --tensor-model-parallel-size are one).
  std::vector<const CLI::Option*> given;
  for (const std::string& a : args) {
    if (a == "--") break;
    if (a.rfind("--", 0) != 0) continue;
    if (const CLI::Option* o = option(a.substr(0, a.find('=')))) given.push_back(o);
  }
  auto on_command_line = [&](const CLI::Option* o) {
    return o && std::find(given.begin(), given.end(), o) != given.end();
  };
  CS_RETURN_IF_ERROR(check_flag_file("--megatron-args", path));
  CS_ASSIGN_OR_RETURN(auto text, read_small_file(path, 1u << 20, "a Megatron-LM argument file"));
  CS_ASSIGN_OR_RETURN(auto script, read_shell_script(text, path));
  // A quoted array element holding a flag and its value ("--fp8-format hybrid"), or a variable
  // holding several (OPTIONS=" --num-layers 32 ..." passed as ${OPTIONS}), is split as bash
  // splits the unquoted expansion that passes it (`${ARGS[@]}`, `$OPTIONS`).
  // So is an unquoted expansion anywhere (`eval ${run_cmd}`, where run_cmd="deepspeed
  // pretrain_gpt.py ${megatron_options}"), as bash's field splitting splits it; an assignment's
  // value is not split (nor passed).
  std::vector<ShellWord> words;
  bool in_eval = false;  // the words of `eval ...`, which bash parses again: split, quoted or not
  for (auto& w : script.words) {
    if (w.command_start) in_eval = !w.quoted && w.text == "eval";
    const std::size_t first = w.text.find_first_not_of(" \t\n");
    const bool field_split = (in_eval || (!w.quoted && !w.expansions.empty())) && !w.assignment;
    if (first == std::string::npos || (w.text.compare(first, 2, "--") != 0 && !field_split) ||
        w.text.find_first_of(" \t\n", first) == std::string::npos) {
      words.push_back(std::move(w));
      continue;
    }
    std::size_t at = 0;
    while ((at = w.text.find_first_not_of(" \t\n", at)) != std::string::npos) {
      if (words.size() >= kMaxShellWords)
        return Error{fmt::format("{}:{}: expected at most {} words, got more", path, w.line,
                                 kMaxShellWords)};
      const std::size_t end = std::min(w.text.find_first_of(" \t\n", at), w.text.size());
      ShellWord part;  // the word's marks, not a copy of all its text
      part.text = w.text.substr(at, end - at);
      part.line = w.line;
      part.source = w.source;
      // what was left as written stays so in its own part only
      part.unresolved = w.unresolved && part.text.find_first_of("$`") != std::string::npos;
      part.defaults = w.defaults;
      part.unknown_if = w.unknown_if;
      words.push_back(std::move(part));
      at = end;
    }
  }
  // Megatron-DeepSpeed (`--deepspeed`): DeepSpeed's engine runs the data parallelism, with the
  // ZeRO stage of its --deepspeed_config; the script's --zero-stage only tells Megatron-DeepSpeed
  // how to build the model (gather_params_on_init under stage 3, megatron/model/*.py).
  bool deepspeed = false, deepspeed_config = false;  // the first --zero-stage is named
  bool dropless = false;                             // DeepSpeed-MoE's --disable-moe-token-dropping
  bool experts = false;                              // --num-experts above 1
  // Megatron-Core's attention (megatron/core/transformer/transformer_config.py at d98e8a64:
  // transformer_impl 'transformer_engine' and attention_backend auto by default, Transformer
  // Engine then running its fused or flash kernel; the local spec runs Megatron's own s x s
  // attention): read where the script runs Megatron-Core and names no attention of its own.
  std::string mcore;  // the flag that says the script runs Megatron-Core
  bool local_impl = false, names_attention = false;
  for (std::size_t k = 0; k < words.size(); ++k) {
    const std::string& t = words[k].text;
    const std::size_t eq = t.find('=');
    const std::string name = t.substr(0, eq);
    const std::string value = eq != std::string::npos ? t.substr(eq + 1)
                              : k + 1 < words.size()  ? words[k + 1].text
                                                      : "";
    deepspeed = deepspeed || t == "--deepspeed";
    dropless = dropless || t == "--disable-moe-token-dropping";
    experts = experts || (name == "--num-experts" && value != "1");
    deepspeed_config = deepspeed_config || (t.rfind("--", 0) == 0 && option(name) &&
                                            option(name) == option("--deepspeed-config"));
    if (name == "--use-mcore-models" && mcore.empty()) mcore = name;
    if (name == "--transformer-impl" && value == "transformer_engine" && mcore.empty())
      mcore = "--transformer-impl transformer_engine";
    local_impl = local_impl || (name == "--transformer-impl" && value == "local");
    names_attention = names_attention || name == "--attention-backend" || name == "--attention" ||
                      name.rfind("--use-flash-attn", 0) == 0;
  }
  const CLI::Option* ds_config_option = option("--deepspeed-config");
  std::vector<std::string> taken, skipped, own, kept_own, defaults, undecided, engine, dense;
  const bool moe = deepspeed && experts;  // DeepSpeed-MoE (Megatron-DeepSpeed's experts)
  std::vector<std::string> moe_unpriced, moe_defaults;  // its flags read and not priced
  std::vector<const CLI::Option*> seen;  // the file's: its first occurrence of a flag is kept
  int job_nodes = 0, job_per_node = 0;   // the launcher's job size (0: not given)
  std::vector<std::string> job_from;
  // the flags read, each once (an echoed and an evaluated command, or a flag given twice, are
  // one flag's words twice)
  std::set<std::string> read;
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i].text;
    if (w.size() < 3 || w.rfind("--", 0) != 0) continue;  // the program, values, bash's own
    const ShellWord& flag_word = words[i];
    const int line = flag_word.line;
    // the file the flag is in: the script, or one it sources
    const std::string& at = script.sources.at(static_cast<std::size_t>(flag_word.source));
    const std::size_t eq = w.find('=');
    std::string name = w.substr(0, eq);
    std::optional<std::string> value;
    const ShellWord* value_word = eq != std::string::npos ? &flag_word : nullptr;
    if (eq != std::string::npos) value = w.substr(eq + 1);
    std::size_t next = i + 1;
    bool as_flag = false;
    std::optional<std::string> implied;     // the value a differently spelled flag stands for
    std::string with;                       // a flag it stands for as well
    std::optional<std::string> with_value;  // and that flag's value
    if (name == "--fp8-format") {           // Megatron-LM's FP8 recipe: commscope's --fp8
      name = "--fp8";
      as_flag = true;
    } else if (name == "--num-key-value-heads") {  // Megatron-DeepSpeed's grouped-query attention
      name = "--num-query-groups";
      with = "--group-query-attention";
    } else if (name == "--use-rotary-position-embeddings") {  // Megatron-DeepSpeed's RoPE
      name = "--position-embedding-type";
      implied = "rope";
    } else if (name == "--checkpoint-activations") {
      // Megatron-DeepSpeed's (and 2021 Megatron-LM's) full recompute of each layer:
      // transformer.py's _checkpointed_forward, checkpoint_num_layers 1
      name = "--recompute-granularity";
      implied = "full";
    } else if (name == "--use-flash-attn-v1" || name == "--use-flash-attn-v2" ||
               name == "--use-flash-attn-triton") {  // Megatron-DeepSpeed's FlashAttention kernels
      name = "--use-flash-attn";
    } else if (name == "--ds-sequence-parallel-size") {
      // Megatron-DeepSpeed's DeepSpeed-Ulysses: the sequence split over SP ranks, heads
      // scattered by all-to-alls around attention (megatron/model/transformer.py wraps its core
      // attention in deepspeed.sequence.layer.DistributedAttention): all-to-all CP.
      name = "--context-parallel-size";
      with = "--cp-comm-type";
      with_value = "a2a";
    }
    // Megatron-DeepSpeed's mixture of experts (DeepSpeed-MoE) is another model than
    // Megatron-LM's of the same flag: experts in every --expert-interval-th block (2 by
    // default), top-1 gating by default (--topk), tokens dropped beyond and padded to the
    // capacity (--moe-train-capacity-factor, 1.0) unless --disable-moe-token-dropping, a list
    // of expert counts per MoE block, PR-MoE's --mlp-type residual (megatron/arguments.py).
    // Its `--num-experts 1` (its default) is a dense model, not Megatron-LM's MoE of one expert.
    // The flag's value as written (its own `=value`, else the next word); for Megatron's
    // nargs='+' flags, the first of the values after it that differs from it (one a block or a
    // layer: read while `accept` takes the word, within the flag's command).
    const std::string written = value ? *value : next < words.size() ? words[next].text : "";
    auto differing = [&](auto accept) -> const ShellWord* {
      for (std::size_t k = next + (value ? 0 : 1);
           k < words.size() && !words[k].command_start && accept(words[k].text); ++k)
        if (words[k].text != written) return &words[k];
      return nullptr;
    };
    // The launcher's job size: torchrun's (and torch.distributed.launch's) --nnodes and
    // --nproc_per_node, the deepspeed launcher's --num_nodes and --num_gpus. It was skipped, and
    // the plan priced on the default node count (found by probing, 2026-12-02). Taken below as
    // --nodes and --gpus where the command line gives neither; a value that is no plain count
    // (torchrun's elastic "1:4", "gpu") is left out.
    if (name == "--nnodes" || name == "--nproc_per_node" || name == "--nproc-per-node" ||
        name == "--num_nodes" || name == "--num_gpus" || name == "--num-nodes" ||
        name == "--num-gpus") {
      const bool nodes = name.find("nodes") != std::string::npos;
      const bool whole = !written.empty() && written.size() < 7 &&
                         written.find_first_not_of("0123456789") == std::string::npos &&
                         std::stoi(written) > 0;
      const ShellWord* vw = value ? value_word : next < words.size() ? &words[next] : nullptr;
      if (whole && !(vw && vw->unresolved) && (nodes ? job_nodes : job_per_node) == 0) {
        (nodes ? job_nodes : job_per_node) = std::stoi(written);
        job_from.push_back(fmt::format("{} {} (line {})", name, written, line));
      }
      i = value ? i : next;
      continue;
    }
    if (name == "--num-experts") {
      const std::string& n = written;
      if (n == "1") {
        if (dense.empty()) dense.push_back(fmt::format("{} 1 (line {})", name, line));
        i = value ? i : next;
        continue;
      }
      // its nargs='+': one count for every MoE block, or one a block (PR-MoE's pyramid)
      const ShellWord* other = deepspeed ? differing([](const std::string& t) {
        return !t.empty() && t.find_first_not_of("0123456789") == std::string::npos;
      })
                                         : nullptr;
      if (other)
        return Error{fmt::format(
            "{}:{}: --num-experts: expected one expert count for every MoE block, got '{}' "
            "then '{}' (PR-MoE's per-block counts are not modelled)",
            at, line, n, other->text)};
    }
    if (name == "--cp-comm-type") {  // Megatron-LM's nargs='+': one type, or one a layer
      static const std::vector<std::string_view> kTypes = {"p2p", "a2a", "allgather", "all_gather",
                                                           "a2a+p2p"};
      if (const ShellWord* other = differing([](const std::string& t) {
            return std::find(kTypes.begin(), kTypes.end(), t) != kTypes.end();
          }))
        return Error{fmt::format(
            "{}:{}: --cp-comm-type: expected one type for every layer, got '{}' then '{}' "
            "(per-layer types are not modelled)",
            at, line, written, other->text)};
    }
    if (moe && name == "--mlp-type" && written != "standard")
      return Error{fmt::format(
          "{}:{}: --mlp-type: expected standard, got '{}' (PR-MoE's residual MoE is not "
          "modelled)",
          at, line, written)};
    // Read, not passed: a dense model's --moe-min-capacity (Megatron-DeepSpeed's dense examples
    // pass it; a dense model has no capacity); under --disable-moe-token-dropping the switch and
    // the capacity factor (DeepSpeed then pads every expert to the busiest one's load, not to a
    // capacity), the factor named in the note.
    if ((!moe && name == "--moe-min-capacity") ||
        (moe && (name == "--disable-moe-token-dropping" ||
                 (dropless && name == "--moe-train-capacity-factor")))) {
      if (name != "--disable-moe-token-dropping" && !value && next < words.size()) ++next;
      if (name == "--moe-train-capacity-factor" &&
          std::none_of(moe_unpriced.begin(), moe_unpriced.end(),
                       [&](const std::string& u) { return u.starts_with(name + " "); }))
        moe_unpriced.push_back(fmt::format("{} {} (line {})", name, written, line));
      read.insert(name);
      i = next - 1;
      continue;
    }
    if (moe) {  // DeepSpeed-MoE's flags in Megatron-LM's (and commscope's) spelling
      if (name == "--topk") {
        name = "--moe-router-topk";
      } else if (name == "--moe-expert-parallel-size") {
        name = "--expert-model-parallel-size";
      } else if (name == "--moe-loss-coeff") {
        name = "--moe-aux-loss-coeff";
      } else if (name == "--moe-train-capacity-factor") {  // not dropless (above)
        name = "--moe-expert-capacity-factor";
      }
    }
    if (deepspeed && deepspeed_config && option(name) && option(name) == option("--zero")) {
      if (engine.empty()) engine.push_back(fmt::format("{} (line {})", name, line));
      if (!value && next < words.size() && words[next].text.rfind("--", 0) != 0) ++next;
      i = next - 1;
      continue;
    }
    // Megatron-LM flags that change the architecture, which commscope reads from a model (a
    // preset or a Hugging Face config.json) and not from flags: skipped, the model was counted
    // without them (DeepSeek-V3's script: 721B for 671B; found by probing, 2026-12-02). With
    // --model on the command line the model has them, and they are skipped as before.
    static const std::vector<std::pair<std::string_view, std::string_view>> kArchitecture = {
        {"--multi-latent-attention", "multi-latent attention"},
        {"--q-lora-rank", "multi-latent attention"},
        {"--kv-lora-rank", "multi-latent attention"},
        {"--qk-head-dim", "multi-latent attention"},
        {"--qk-pos-emb-head-dim", "multi-latent attention"},
        {"--v-head-dim", "multi-latent attention"},
        {"--moe-layer-freq", "dense and MoE blocks mixed"},
        {"--window-size", "sliding-window attention"},
        {"--hybrid-override-pattern", "Mamba blocks"}};
    if (const auto arch = std::find_if(kArchitecture.begin(), kArchitecture.end(),
                                       [&](const auto& a) { return a.first == name; });
        arch != kArchitecture.end() && !on_command_line(option("--model")) &&
        !(name == "--moe-layer-freq" && written == "1"))
      return Error{fmt::format(
          "{}:{}: {}: expected the architecture from --model (a preset or a Hugging Face "
          "config.json) for a model with {}: commscope does not read it from Megatron-LM's flags, "
          "and without it the model would be counted wrong",
          at, line, name, arch->second)};
    // commscope's own flags of what to write and how (a script's `--output` is some other
    // program's: taken, commscope would write where the script says), never a script's.
    static const std::vector<std::string_view> kOwn = {
        "--megatron-args", "--output",  "--format",   "--trace",   "--html", "--sort",
        "--top",           "--threads", "--scenario", "--scaling", "--help"};
    const CLI::Option* o = option(name);
    if (o && std::find(kOwn.begin(), kOwn.end(), name) != kOwn.end()) {
      if (std::find(own.begin(), own.end(), name) == own.end()) own.push_back(name);
      o = nullptr;
    } else if (!o && std::find(skipped.begin(), skipped.end(), name) == skipped.end()) {
      skipped.push_back(name);
    }
    if (!o) {
      // what an unknown flag takes is not known: every word up to the next flag
      if (!value)
        while (next < words.size() && words[next].text.rfind("--", 0) != 0) ++next;
      i = next - 1;
      continue;
    }
    const bool flag = as_flag || o->get_expected_max() == 0;
    bool spaced = false;  // its value the next word (not `=value`)
    if (implied) {
      value = implied;
      value_word = nullptr;
    } else if (as_flag) {
      if (!value && next < words.size() && words[next].text.rfind("--", 0) != 0)
        ++next;  // --fp8-format's own value (hybrid, e4m3)
      value.reset();
      value_word = nullptr;
    } else if (!flag && !value) {
      if (next >= words.size() || words[next].text.rfind("--", 0) == 0)
        return Error{fmt::format("{}:{}: {}: expected a value after it, got none", at, line, name)};
      value_word = &words[next];
      value = words[next++].text;
      spaced = true;
    } else if (flag) {
      value.reset();
      value_word = nullptr;
    }
    if (value_word && value_word->unresolved)
      return Error{fmt::format(
          "{}:{}: {}: expected a value, got '{}' (an expansion the script does not set: write "
          "its value in the file, or give {} on the command line)",
          at, line, name, *value, name)};
    // A flag of several values (Megatron's nargs='+' --hierarchical-context-parallel-sizes):
    // the words after the first, up to the next flag or command.
    std::vector<std::string> more;
    if (spaced && o->get_expected_max() > 1)
      while (next < words.size() && !words[next].command_start &&
             words[next].text.rfind("--", 0) != 0) {
        if (words[next].unresolved)
          return Error{
              fmt::format("{}:{}: {}: expected a value, got '{}' (an expansion the "
                          "script does not set)",
                          at, line, name, words[next].text)};
        more.push_back(words[next++].text);
      }
    i = next - 1;
    read.insert(name);
    if (on_command_line(o)) {
      kept_own.push_back(fmt::format("{} (line {})", name, line));
      continue;
    }
    if (std::find(seen.begin(), seen.end(), o) != seen.end()) continue;
    seen.push_back(o);
    taken.push_back(name);
    if (value) taken.push_back(*value);
    taken.insert(taken.end(), more.begin(), more.end());
    if (const CLI::Option* also = with.empty() ? nullptr : option(with);
        also && !on_command_line(also) && std::find(seen.begin(), seen.end(), also) == seen.end()) {
      seen.push_back(also);
      taken.push_back(with);
      if (with_value) taken.push_back(*with_value);
    }
    // A ds_config.json the script writes before it launches is read as written.
    if (o == ds_config_option && value) {
      ScriptConfigs& configs = script_configs();
      const std::string key = script_file_key(*value);
      if (const auto f = script.files.find(key); f != script.files.end())
        configs.files[key] = f->second;
      else if (const auto u = script.unread.find(key); u != script.unread.end())
        configs.unread[key] = u->second;
    }
    // What the flag took that the environment or the script's conditions may change.
    const int unknown_if = std::max(flag_word.unknown_if, value_word ? value_word->unknown_if : 0);
    if (unknown_if) undecided.push_back(fmt::format("{} (the if on line {})", name, unknown_if));
    for (const ShellWord* from : {&flag_word, value_word})
      if (from)
        for (const auto& d : from->defaults)
          if (std::find(defaults.begin(), defaults.end(), d) == defaults.end())
            defaults.push_back(d);
  }
  // The launcher's job size, where neither the command line nor the script's own flags give
  // one: --nodes N (torchrun's default --nnodes 1 where only the GPUs per node are given) and
  // --gpus N x per-node (a part of each node when fewer than its GPUs), with a note.
  if (job_nodes > 0 || job_per_node > 0) {
    const CLI::Option* gpus = option("--gpus");
    const CLI::Option* nodes = option("--nodes");
    auto given = [&](const CLI::Option* o) {
      return o && (on_command_line(o) || std::find(seen.begin(), seen.end(), o) != seen.end());
    };
    if (!given(gpus) && !given(nodes) && (job_nodes > 0 || gpus)) {
      const int n = std::max(job_nodes, 1);
      std::vector<std::string> size;
      if (nodes) size.insert(size.end(), {"--nodes", std::to_string(n)});
      if (gpus && job_per_node > 0)
        size.insert(size.end(), {"--gpus", std::to_string(n * job_per_node)});
      if (!size.empty()) {
        taken.insert(taken.end(), size.begin(), size.end());
        print_note(fmt::format("{}: the job's size from the launcher's {}: {}", path,
                               fmt::join(job_from, ", "), fmt::join(size, " ")));
      }
    }
  }
  // DeepSpeed-MoE's defaults where the script leaves them (megatron/arguments.py): top-1 gating,
  // MoE every second block, tokens beyond 1.0 x the even share dropped and the rest padded to
  // it (deepspeed/moe/sharded_moe.py: drop_tokens, capacity_factor).
  if (moe) {
    auto fill = [&](const char* flag, const char* v, std::string what) {
      const CLI::Option* o = option(flag);
      if (!o || on_command_line(o) || std::find(seen.begin(), seen.end(), o) != seen.end()) return;
      seen.push_back(o);
      taken.push_back(flag);
      if (v) taken.push_back(v);
      if (!what.empty()) moe_defaults.push_back(std::move(what));
    };
    fill("--moe-router-topk", "1", "--topk 1");
    fill("--expert-interval", "2", "--expert-interval 2");
    if (!dropless) {
      fill("--moe-expert-capacity-factor", "1.0", "--moe-train-capacity-factor 1.0");
      fill("--moe-pad-expert-input-to-capacity", nullptr, "");
    }
  }
  const bool attention_given = on_command_line(option("--attention")) ||
                               on_command_line(option("--attention-backend")) ||
                               on_command_line(option("--use-flash-attn"));
  std::string attention_note;
  if (!deepspeed && !names_attention && !attention_given && option("--attention")) {
    if (local_impl) {
      taken.insert(taken.end(), {"--attention", "standard"});
      attention_note =
          "attention priced as s x s attention (--attention standard): the script runs "
          "Megatron-Core's local spec (--transformer-impl local), whose attention is Megatron's "
          "own unfused kernel";
    } else if (!mcore.empty()) {
      taken.insert(taken.end(), {"--attention", "flash"});
      attention_note = fmt::format(
          "attention priced as FlashAttention (--attention flash): the script runs Megatron-Core "
          "({}) and names no --attention-backend, whose default (auto) lets Transformer "
          "Engine run its fused or flash kernel",
          mcore);
    }
  }
  // The file is Megatron-LM's, or Megatron-DeepSpeed's under --deepspeed: its collective
  // pattern, unless the command line says otherwise.
  const CLI::Option* framework = option("--framework");
  // (train runs its own pattern, and refuses a framework's)
  const bool pattern = framework && !on_command_line(framework) && verb.get_name() != "train";
  if (pattern) {
    taken.push_back("--framework");
    taken.push_back(deepspeed ? "deepspeed" : "megatron");
  }
  if (read.empty())
    return Error{fmt::format(
        "{}: expected Megatron-LM flags that {} has (--num-layers, --tensor-model-parallel-size, "
        "...), got none{}",
        path, verb.get_name(),
        skipped.empty()
            ? std::string()
            : fmt::format(" (only others: {}{})",
                          fmt::join(skipped.begin(),
                                    skipped.begin() + static_cast<std::ptrdiff_t>(
                                                          std::min<std::size_t>(skipped.size(), 4)),
                                    ", "),
                          skipped.size() > 4 ? ", ..." : ""))};
  // A script without the model (Megatron-LM's post-training scripts take it from a file named by
  // their argument) would price commscope's default model under the script's plan.
  bool model = false;
  for (const char* flag : {"--model", "--num-layers", "--hidden-size", "--num-attention-heads",
                           "--torchtitan-config", "--scenario"}) {
    const CLI::Option* o = option(flag);
    model = model ||
            (o && (std::find(seen.begin(), seen.end(), o) != seen.end() || on_command_line(o)));
  }
  if (!model)
    return Error{fmt::format(
        "{}: expected the model, in the script (--num-layers, --hidden-size, "
        "--num-attention-heads) or on the command line (--model, --torchtitan-config), got "
        "neither: "
        "the {} flags it gives would otherwise be priced on commscope's default model{}",
        path, read.size(),
        script.unfollowed.empty()
            ? std::string()
            : fmt::format(" (not followed: {})", fmt::join(script.unfollowed, "; ")))};
  if (!dense.empty())
    print_note(
        fmt::format("{}: {} read as a dense model (Megatron-DeepSpeed's default, not "
                    "Megatron-LM's mixture of one expert)",
                    path, fmt::join(dense, ", ")));
  if (moe)
    print_note(fmt::format(
        "{}: Megatron-DeepSpeed's mixture of experts (DeepSpeed-MoE) read{}{}{}", path,
        moe_defaults.empty() ? std::string()
                             : fmt::format(", with its defaults {}", fmt::join(moe_defaults, ", ")),
        dropless ? "; --disable-moe-token-dropping: no capacity, the all-to-alls priced with "
                   "the routed tokens (--moe-routing-imbalance for the busiest expert's pad)"
                 : "; tokens beyond the capacity dropped, the rest padded to it",
        moe_unpriced.empty() ? std::string()
                             : fmt::format("; not priced: {}", fmt::join(moe_unpriced, ", "))));
  if (!engine.empty())
    print_note(fmt::format(
        "{}: {} not read: under --deepspeed, DeepSpeed runs its --deepspeed_config's "
        "zero_optimization.stage (Megatron-DeepSpeed reads the flag to build the model only)",
        path, fmt::join(engine, ", ")));
  print_note(fmt::format(
      "{}: {} of Megatron-LM's flags read{}{}{}", path, read.size(),
      !pattern    ? ""
      : deepspeed ? " (Megatron-DeepSpeed's --deepspeed: with DeepSpeed's collective pattern, "
                    "--framework deepspeed)"
                  : " (with Megatron-LM's collective pattern, --framework megatron)",
      skipped.empty() ? std::string()
                      : fmt::format("; skipped, not flags of {}: {}", verb.get_name(),
                                    fmt::join(skipped, ", ")),
      own.empty() ? std::string()
                  : fmt::format("; skipped, commscope's own, never read from a script: {}",
                                fmt::join(own, ", "))));
  if (!script.sourced.empty())
    print_note(
        fmt::format("{}: read the files it sources: {}", path, fmt::join(script.sourced, ", ")));
  if (!script.unfollowed.empty())
    print_note(fmt::format("{}: not followed, as bash would go on without them: {}", path,
                           fmt::join(script.unfollowed, "; ")));
  if (!attention_note.empty()) print_note(fmt::format("{}: {}", path, attention_note));
  if (!kept_own.empty())
    print_note(fmt::format("{}: {} given on the command line too: the command line's kept", path,
                           fmt::join(kept_own, ", ")));
  if (!defaults.empty())
    print_note(
        fmt::format("{}: the script's defaults taken for {} (the environment or the "
                    "script's arguments may set others when it runs)",
                    path, fmt::join(defaults, ", ")));
  if (!undecided.empty())
    print_note(fmt::format("{}: read from a branch whose condition commscope does not decide: {}",
                           path, fmt::join(undecided, ", ")));
  // The file's flags first, then the command line's.
  std::vector<std::string> out = taken;
  out.insert(out.end(), args.begin(), args.end());
  return out;
}

}  // namespace commscope::cli
