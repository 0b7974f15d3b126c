// Scenario: a model, a system with its network protocol, and a parallel plan, resolved and
// checked against each other. The single entry point every verb uses to turn user input
// into something the workload builder can trust.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "commscope/spec/model.h"
#include "commscope/spec/plan.h"
#include "commscope/spec/system.h"

namespace commscope {

struct ScenarioInput {
  std::string model = "gpt2-large";  // empty: the model of model_flags alone
  ModelFlags model_flags;            // Megatron-LM's model flags, applied to `model`
  std::string system = "polaris";
  std::string network;  // empty: the system's own
  PlanInput plan;
  // Plan fields a configuration file set and no flag replaced: (the flag an error names, where
  // the file has it: "ds.json: zero_optimization.stage"). resolve_scenario's errors that begin
  // with such a flag name the file's field, the flag after it in brackets; a name without "--"
  // (a field no flag sets, "local_batch_size") is replaced by the file's.
  std::vector<std::pair<std::string, std::string>> file_fields;
};

struct Scenario {
  ModelSpec model;
  SystemSpec system;
  NetworkProtocol network;
  ParallelPlan plan;
  int nodes = 1;
  int gpus_per_node = 1;  // GPUs used per node (<= system.node.gpus)
  std::vector<std::string> warnings;

  int gpus() const { return plan.gpus(); }
};

// Built-in defaults: GPT-2 Large, data parallel on 4 Polaris nodes, micro-batch 4, bf16.
ScenarioInput default_scenario_input();

// Loads the presets and resolves the plan. Every error names the field, the value and what
// was expected. Rules of thumb from the seeds are warnings, not errors.
Result<Scenario> resolve_scenario(const ScenarioInput& in);

// Why torchtitan's op-level checkpointing (--recompute-granularity op) is not modelled for this
// model's blocks, as (what the policy needs, what the model is): an encoder-decoder; nothing
// when it is. resolve_scenario refuses such a plan with it; the plan search leaves such
// candidates out.
std::optional<std::pair<std::string, std::string>> op_recompute_model_gap(const ModelSpec& m);

// The attention kernel a plan runs: --attention, else flash where --attention-backend names a
// flash kernel, else the model preset's (flash where the model trains with it).
// resolve_scenario sets ParallelPlan::attention with it; the plan search asks it before any
// scenario is resolved.
AttentionKernel attention_kernel(const PlanInput& in, const ModelSpec& model);

// Megatron-Core's rules for --use-precision-aware-optimizer and its state dtypes under a plan's
// precision: non-fp32 states need the flag, the flag mixed precision, bf16 main gradients bf16
// and no --grad-comm-dtype fp32. resolve_scenario applies them; the plan search checks its base
// with them before any candidate.
Status check_optimizer_precision(const PlanInput& in, Precision precision);

// Resolves with specs already loaded (used by sweeps and tests).
Result<Scenario> resolve_scenario(ModelSpec model, SystemSpec system, NetworkProtocol network,
                                  const PlanInput& plan);

}  // namespace commscope
