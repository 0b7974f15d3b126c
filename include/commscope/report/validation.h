// `validate`: each measured run predicted, its error, and the error summaries per file and
// split, as one document (text, CSV, Markdown or JSON). The analysis is one function; the CLI
// only parses flags and prints.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "commscope/calib/validate.h"
#include "commscope/report/table.h"

namespace commscope {

struct ValidationRow {
  std::string file;  // the CSV's name, without its folder
  int line = 0;
  Scenario const* scenario = nullptr;  // the run's (owned by the PreparedRun)
  double measured_s = 0, predicted_s = 0;
  double error = 0;  // predicted / measured - 1
};

struct Validation {
  std::vector<ValidationRow> rows;
  // (file or "(all files)", split "all"|"even"|"odd") and the summary of its rows' errors.
  std::vector<std::pair<std::pair<std::string, std::string>, ErrorSummary>> summary;
};

// Predicts the runs of the split ("all", "even", "odd") with their systems' calibrations.
// `progress(done)` is called after each row; it may be empty.
Validation validate_runs(const std::vector<PreparedRun>& runs, const std::string& split,
                         const std::function<void(std::size_t)>& progress = {});

// The rows and the summary; with summary_only the rows are left out (text and Markdown).
// CSV holds the rows, JSON both ("system", "rows", "summary").
std::string render_validation(const Validation& v, Format f, const std::string& system,
                              bool summary_only);

}  // namespace commscope
