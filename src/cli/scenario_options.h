// The options every scenario verb shares (model, system, network, plan), with Megatron's
// and DeepSpeed's spellings, and their resolution: defaults < DeepSpeed config < flags.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "commscope/spec/scenario.h"

namespace commscope::cli {

struct ScenarioOptions {
  std::string model, system, network, deepspeed_config;
  PlanInput flags;
  std::string precision, recompute, schedule;
  bool fp16 = false, bf16 = false, recompute_activations = false;
  bool no_overlap_grad_reduce = false, no_overlap_param_gather = false;
};

void add_scenario_options(CLI::App& cmd, ScenarioOptions& o);

// Builds the ScenarioInput from the built-in defaults, the DeepSpeed config and the flags.
Result<ScenarioInput> scenario_input(const ScenarioOptions& o);

}  // namespace commscope::cli
