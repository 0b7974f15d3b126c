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
  double error = 0;   // predicted / measured - 1
  std::string id;     // the corpus row id, else empty
  std::string split;  // "fit"|"heldout" (corpus) or "even"|"odd" (the row's index)
  std::string group;  // "framework/strategy" (corpus), else empty
  // The memory verdict as `predict` gives it: the largest rank's bytes and whether they fit
  // in the GPU's memory; and the corpus's `assumed` column (empty: nothing assumed).
  double memory_per_gpu = 0;
  bool fits = true;
  double measured_memory = 0;  // bytes, the run's measured peak (commscope CSV), 0 when unknown
  // The plan ran out of GPU memory (commscope CSV's outcome = oom): no time, so no error; its
  // memory verdict (fits) is what is checked.
  bool out_of_memory = false;
  std::string assumed;
};

// The summary of a set of rows' errors.
struct ValidationSummary {
  std::string file;   // the CSV's name or "(all files)"
  std::string group;  // "(all)", "framework/strategy" or a GPU-count band "gpus <=64",
                      // "gpus 65-512", "gpus >512" (the corpus)
  std::string split;  // "all", "even", "odd", "fit" or "heldout"
  ErrorSummary errors;
};

struct Validation {
  std::vector<ValidationRow> rows;
  // vTrain and commscope files: per file and split, and over all files. The corpus: per file,
  // split (fit and heldout, both always when the split asked for is "all"), strategy and band.
  std::vector<ValidationSummary> summary;
  // Memory verdicts against what happened: every row ran (it must fit) or ran out of memory
  // (outcome oom: it must not); the rows whose verdict disagrees, as "file:line".
  std::size_t verdicts = 0, verdicts_agree = 0;
  std::vector<std::string> verdicts_disagree;
};

// The GPU-count band of a corpus row: "gpus <=64", "gpus 65-512" or "gpus >512".
std::string gpu_band(int gpus);

// Predicts the runs of the split ("all", "even", "odd", "fit", "heldout") with their systems'
// calibrations.
// `progress(done)` is called after each row; it may be empty.
Validation validate_runs(const std::vector<PreparedRun>& runs, const std::string& split,
                         const std::function<void(std::size_t)>& progress = {});

// The rows and the summary; with summary_only the rows are left out (text and Markdown).
// CSV holds the rows, JSON both ("system", "rows", "summary").
std::string render_validation(const Validation& v, Format f, const std::string& system,
                              bool summary_only);

}  // namespace commscope
