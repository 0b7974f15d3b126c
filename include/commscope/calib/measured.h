// Measured iteration times to validate and calibrate predictions against: the vTrain CSVs
// (data/vtrain, Megatron-DeepSpeed on A100) and commscope's own CSV format
// (docs/validate.md). Not the fitting (fit.h) nor the comparison (validate.h).
#pragma once

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
};

// Reads either format, told apart by the header. A UTF-8 byte-order mark is skipped. Errors
// name the file, the line and the column.
Result<std::vector<MeasuredRun>> read_measured_csv(const std::string& path,
                                                   const std::string& system);

// Resolves a run into a scenario (inline model or preset).
Result<Scenario> resolve_run(const MeasuredRun& run);

}  // namespace commscope
