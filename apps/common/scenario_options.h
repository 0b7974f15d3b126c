// The options every scenario verb shares (model, system, network, plan), with Megatron's
// and DeepSpeed's spellings, and their resolution: defaults < DeepSpeed config < flags.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "commscope/spec/scenario.h"

namespace commscope::cli {

// A flag naming one value of an enum: unset when not given, an error naming the flag when
// the name is none of `expected` ("--attention: expected flash or standard, got 'fused'").
template <class E>
Status named_value(const char* flag, const std::string& text,
                   std::optional<E> (*parse)(std::string_view), const char* expected,
                   std::optional<E>& into) {
  if (text.empty()) return {};
  auto v = parse(text);
  if (!v) return Error{fmt::format("{}: expected {}, got '{}'", flag, expected, text)};
  into = *v;
  return {};
}

// --attention and --attention-backend into the plan input (the scenario verbs and plan take
// them alike): Megatron-Core's backend names fused, flash, unfused, local and auto; one error
// naming the flag.
Status attention_flags(const std::string& kernel, const std::string& backend, PlanInput& flags);

// Megatron-Core's --use-precision-aware-optimizer and its state dtypes, as given: the scenario
// verbs and plan take them alike.
struct OptimizerPrecisionOptions {
  bool precision_aware_optimizer = false;
  std::string exp_avg_dtype, exp_avg_sq_dtype, main_params_dtype, main_grads_dtype;
  // Megatron-Core's optimizer CPU offload (HybridDeviceOptimizer)
  bool optimizer_cpu_offload = false, overlap_cpu_optimizer_d2h_h2d = false;
  std::string optimizer_offload_fraction;
};
// `where`, when given, ends --use-precision-aware-optimizer's help (plan: which candidates).
void add_optimizer_precision_options(CLI::App& cmd, OptimizerPrecisionOptions& o,
                                     const std::string& group, const std::string& where = "");
// Into the PlanInput (only what was given); an unknown dtype is an error naming the flag.
Status optimizer_precision_flags(const OptimizerPrecisionOptions& o, PlanInput& flags);

// --grad-comm-dtype (--communication-data-type) and --grad-reduce-in-bf16, for the scenario
// verbs and plan; `where` ends the first's help before its default.
void add_grad_comm_dtype_options(CLI::App& cmd, std::string& dtype, bool& in_bf16,
                                 const std::string& group, const std::string& where = "");
// Into the PlanInput (only what was given); errors name the flag.
Status grad_comm_dtype_flags(const std::string& dtype, bool in_bf16, PlanInput& flags);
// --cross-entropy and --cross-entropy-loss-fusion (its spelling of fused), for the scenario verbs
// and plan: into the PlanInput only what was given (a job file's loss stays otherwise); errors
// name the flag.
Status cross_entropy_flags(const std::string& name, bool fusion, PlanInput& flags);

// ZeRO++ (qwZ, hpZ, qgZ) and DDP gradient compression (PowerSGD, 1-bit Adam), as given: the
// scenario verbs and plan take them alike.
struct CompressionOptions {
  bool zero_quantized_weights = false, zero_quantized_gradients = false;
  int zero_hpz_partition_size = 1;
  CLI::Option* zero_hpz_flag = nullptr;  // given or not
  std::string grad_compression;
};
// `zeropp_where` ends the ZeRO++ flags' help, `compression_where` --grad-compression's (plan:
// which candidates).
void add_compression_options(CLI::App& cmd, CompressionOptions& o, const std::string& group,
                             const std::string& zeropp_where = "",
                             const std::string& compression_where = "");
// Into the PlanInput (only what was given); errors name the flag.
Status compression_option_flags(const CompressionOptions& o, PlanInput& flags);

// Megatron-LM's model-architecture flags (--num-layers, --hidden-size, ...), as given: the
// scenario verbs and plan take them alike (docs/predict.md, "Megatron-LM's model flags").
struct ModelFlagOptions {
  struct Size {
    const char* flag;
    std::int64_t value = 0;
    CLI::Option* option = nullptr;  // given or not
  };
  std::vector<Size> sizes = {{"--num-layers"},
                             {"--hidden-size"},
                             {"--ffn-hidden-size"},
                             {"--num-attention-heads"},
                             {"--num-query-groups"},
                             {"--kv-channels"},
                             {"--max-position-embeddings"},
                             {"--vocab-size"},
                             {"--num-experts"},
                             {"--moe-router-topk"},
                             {"--moe-ffn-hidden-size"},
                             {"--moe-shared-expert-intermediate-size"},
                             {"--expert-interval"}};
  bool group_query_attention = false, swiglu = false, untie = false, disable_bias = false,
       add_qkv_bias = false, qk_layernorm = false, flash = false;
  std::string normalization, position_embedding;
  double attention_dropout = 0, hidden_dropout = 0;
  CLI::Option *attention_dropout_option = nullptr, *hidden_dropout_option = nullptr;
};
void add_model_flag_options(CLI::App& cmd, ModelFlagOptions& o, const std::string& group);
// Into `flags` (only what was given); a bad name is an error naming the flag.
Status model_flag_options(const ModelFlagOptions& o, ModelFlags& flags);

struct ScenarioOptions {
  // Sweepable: each takes a comma list; predict runs every combination.
  std::vector<std::string> model, system, network;
  ModelFlagOptions model_flags;
  std::vector<int> nodes, gpus, tp, pp, dp, vp, cp, ep, zero;
  std::vector<std::int64_t> micro_batch, global_batch, seq_length, decoder_seq_length, grad_accum;
  std::vector<double> ddp_bucket_mb;
  std::string deepspeed_config;
  std::string torchtitan_config;  // --torchtitan-config / --job.config_file (TOML)
  std::string megatron_args;      // read before parsing (expand_megatron_args)
  PlanInput flags;
  std::string precision, recompute, schedule, rank_order;
  bool fp16 = false, bf16 = false, recompute_activations = false;
  bool no_overlap_grad_reduce = false, no_overlap_param_gather = false;
  // framework patterns (docs/workload.md)
  std::string framework, fsdp_sharding, fsdp_wrap, fsdp_prefetch, fsdp_grad_sync, fsdp_shard_size,
      fsdp_replicate_size;
  bool use_distributed_optimizer = false, overlap_grad_reduce = false, overlap_param_gather = false,
       fsdp_limit_all_gathers = true, pipe_partitioned = false;
  CLI::Option* fsdp_limit_all_gathers_flag = nullptr;  // given or not
  CLI::Option* pipe_partitioned_flag = nullptr;        // given or not
  // compressed communication (docs/workload.md, "Compressed communication")
  std::string grad_comm_dtype;
  bool grad_reduce_in_bf16 = false;
  CompressionOptions compression;
  // modern training (issue 15; docs/workload.md)
  OptimizerPrecisionOptions optimizer_precision;
  std::string attention, attention_backend, pipeline_stage_layers, pipeline_layout,
      first_stage_layers, last_stage_layers, cpu_offload_layers, mtp_layers, recompute_modules,
      recompute_method, recompute_num_layers, layers_per_virtual_stage;
  bool account_embedding = false, account_loss = false;  // in the pipeline split
  bool offload_optimizer = false;                        // DeepSpeed ZeRO-Offload
  bool offload_param = false;                            // DeepSpeed ZeRO-3 parameter offload
  bool fsdp_cpu_offload = false;  // PyTorch FSDP CPUOffload(offload_params=True)
  bool fp8 = false;
  bool fp8_param_gather = false;  // Megatron-Core --fp8-param-gather
  bool tp_comm_overlap = false;
  bool async_tp_allreduce = false, no_async_tp_allreduce = false;
  bool cross_entropy_fusion = false;
  std::string cross_entropy;
  bool moe_pad_to_capacity = false;
  bool overlap_moe_ep_comm = false, delay_wgrad_compute = false;
  // context and expert parallelism (docs/workload.md, "Mixture of experts, EP and CP"): as
  // given, checked in scenario_inputs
  std::string cp_comm_type, expert_tp, moe_capacity_factor, moe_routing_imbalance,
      moe_aux_loss_coeff, moe_dispatcher, moe_router_groups, moe_router_group_topk,
      moe_min_capacity;
  std::vector<std::string> hierarchical_cp_sizes;
  // DeepSpeed's release (issue 11; docs/cost-model.md, "DeepSpeed 0.3-0.5"): as given
  std::string deepspeed_version, zero3_host_per_rank_call, zero3_nics_per_group;
};

void add_scenario_options(CLI::App& cmd, ScenarioOptions& o);

// `--megatron-args FILE` (predict, describe, plan): the flags of a Megatron-LM launch script or
// argument file that `verb` has, put before the command line's own (which win: a flag given on
// both keeps the command line's); Megatron-LM's `--fp8-format` is `--fp8`. The others (learning
// rate, data, checkpointing, ...) are skipped, named in a note. `args` are the arguments after
// the verb; the result replaces them. A known flag whose value is a shell variable, or a file
// that cannot be read, is an error naming the file and line.
//
// Megatron-DeepSpeed's scripts (`--deepspeed`) take DeepSpeed's collective pattern; their
// `--deepspeed_config` may name a file the script writes before it launches (a here-document,
// sed over a template: spec/shell_words.h), which read_deepspeed_config then reads as the script
// writes it. Their spellings `--num-key-value-heads` and `--use-rotary-position-embeddings` are
// `--num-query-groups` with `--group-query-attention` and `--position-embedding-type rope`.
Result<std::vector<std::string>> expand_megatron_args(const CLI::App& verb,
                                                      const std::vector<std::string>& args);
void add_megatron_args_option(CLI::App& cmd, std::string& path, const std::string& group);

// A DeepSpeed configuration (spec/plan.h, load_deepspeed_config): as the --megatron-args
// script writes it where the script's own --deepspeed_config names a file it writes, else
// from disk.
Result<PlanInput> read_deepspeed_config(const std::string& path, std::vector<std::string>* notes);

// A note for the user ("commscope: note: ..." on stderr): what a configuration file's reading
// assumed or set aside. A host that captures the verbs' output (the `commscope` program's
// run_command for the Python module) installs a sink; without one it goes to stderr.
using NoteSink = void (*)(const std::string& note);
void set_note_sink(NoteSink sink);
void print_note(const std::string& note);

// Builds the ScenarioInputs from the built-in defaults, the DeepSpeed config and the flags:
// one per combination of the comma lists, the last flag varying fastest.
Result<std::vector<ScenarioInput>> scenario_inputs(const ScenarioOptions& o);

// The first scenario flag (model, system, plan, batch) given on the command line, as the user
// spelled its long name ("--model"), or empty when none was: for options that replace them all.
std::string first_scenario_flag_given(const CLI::App& cmd);

// The same for verbs that take one scenario: more than one value of a flag is an error.
Result<ScenarioInput> scenario_input(const ScenarioOptions& o);

}  // namespace commscope::cli
