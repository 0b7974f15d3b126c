// Measured iteration times to validate and calibrate predictions against: the vTrain CSVs
// (data/vtrain, Megatron-DeepSpeed on A100), commscope's own CSV format and the
// communication-bound validation corpus (data/validation-comm/training.csv), docs/validate.md. Not
// the fitting (fit.h) nor the comparison (validate.h).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "commscope/spec/scenario.h"

namespace commscope {

struct MeasuredRun {
  std::string source;   // file
  int line = 0;         // 1-based line in the file
  ScenarioInput input;  // model (preset, path or built in), system, network, plan
  ModelSpec model;      // the model when the file defines it inline (vTrain), else empty name
  double measured_s = 0;
  // commscope CSV's optional `measured_memory_gib`: the run's measured peak memory per GPU in GiB
  // (PyTorch's max_memory_allocated), 0 when not given.
  double measured_memory_gib = 0;
  // commscope CSV's optional `outcome`: `oom` for a plan that ran out of GPU memory (measured_s
  // then empty, 0 here): validate checks the memory verdict on it and nothing fits on it.
  bool out_of_memory = false;
  // The validation corpus only (empty otherwise): its row id, its `split` column ("fit" or
  // "heldout") and "framework/strategy" as the row states them (e.g. "deepspeed/zero3").
  std::string id, split, group;
  // The corpus's `assumed` column: what the row takes from a documented framework default
  // rather than from its source (e.g. "attention flash: ..."), else empty.
  std::string assumed;
  // The corpus's `unmodelled` column: what the row's run does that commscope does not model
  // and that bears on its time (e.g. Megatron's MoE all-to-all overlap), else empty. Such a row
  // is predicted and validated, never fitted on (calibrate, docs/validate.md).
  std::string unmodelled;
};

// Rows of a validation-corpus file that could not become a scenario, counted per reason
// ("no micro_batch", "no system preset for gpu 'X'", ...).
using SkipCounts = std::map<std::string, int>;

// The shipped system preset for a corpus `gpu` cell (A100-40GB -> dgx-a100-40gb, A100-80GB
// and A100-SXM4-80GB -> dgx-a100-80gb, H100... -> dgx-h100 but an H100 with 96 GB of HBM2e), or
// "" when there is none.
std::string system_for_gpu(const std::string& gpu);

// Reads any of the three formats, told apart by the header. A UTF-8 byte-order mark is
// skipped. Errors name the file, the line and the column. Corpus rows that cannot become a
// scenario (a field the source does not state, a GPU without a preset) are left out and
// counted in `skipped` per reason; a malformed cell is an error.
Result<std::vector<MeasuredRun>> read_measured_csv(const std::string& path,
                                                   const std::string& system,
                                                   SkipCounts* skipped = nullptr);

// Resolves a run into a scenario (inline model or preset).
Result<Scenario> resolve_run(const MeasuredRun& run);

}  // namespace commscope
