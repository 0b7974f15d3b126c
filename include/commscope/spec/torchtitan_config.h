// torchtitan's job configuration (the TOML file its train.py takes as --job.config_file), read
// into a model preset name and plan flags: docs/predict.md, "torchtitan job files".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "commscope/spec/plan.h"
#include "commscope/util/result.h"

namespace commscope {

struct TorchtitanJob {
  std::string model;  // commscope's preset for [model] name and flavor ("llama3-8b")
  PlanInput plan;     // the flags the file sets; the rest stay unset (the defaults or the CLI's)
  // What the file asks for that commscope reads but does not model, one line each
  // ("[compile] enable: torch.compile is not modelled; ..."), for a warning.
  std::vector<std::string> notes;
};

// Reads a torchtitan job file: its [model], [training], [parallelism] and
// [activation_checkpoint] tables as torchtitan wrote them from mid-2024 (batch_size,
// data_parallel_degree in [training]) to 2025 (local_batch_size, global_batch_size,
// [parallelism]). A field of the wrong type, a model or schedule commscope has no counterpart
// for, and a malformed file are one-line errors naming the file and the field.
Result<TorchtitanJob> load_torchtitan_config(const std::string& path);
Result<TorchtitanJob> torchtitan_from_toml(std::string_view text, const std::string& path);

}  // namespace commscope
