// `analyze --diff BASE NEW`: two runs' traces aligned rank by rank, step by step (the k-th
// ProfilerStep window of each, or the whole trace when there are none) and collective by
// collective (by kind, size and order within the step), and the iteration-time change
// explained as compute, exposed communication per collective call, memcpy and idle deltas;
// the kernels whose total time changed; both runs on one Chrome timeline.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "commscope/report/table.h"
#include "commscope/timeline/trace_reader.h"

namespace commscope {

// One aligned window (a step, or the whole trace) of one rank in both runs.
struct StepDiff {
  int rank = 0;
  std::size_t step = 0;  // index among the rank's windows
  std::string base_name, new_name;
  Breakdown base, next;  // wall = iteration time; compute + exposed + memcpy + idle = wall
};

// One collective call, aligned by (collective, bytes, k-th such call in the window).
struct CallDiff {
  int rank = 0;
  std::size_t step = 0;
  std::string collective;  // "all_reduce", or the kernel name when the trace names none
  double bytes = 0;
  std::size_t order = 0;  // k-th call of this collective and size in the window
  bool in_base = false, in_new = false;
  double base_s = 0, new_s = 0;                  // kernel time
  double base_exposed_s = 0, new_exposed_s = 0;  // the part not under compute
};

struct KernelDiff {
  std::string name;
  bool comm = false;
  std::size_t base_calls = 0, new_calls = 0;
  double base_s = 0, new_s = 0;
};

struct TraceDiff {
  std::vector<StepDiff> steps;      // aligned windows, by rank then step
  Breakdown base_total, new_total;  // sums over the aligned windows
  std::vector<CallDiff> calls;      // every aligned (or unmatched) collective call, in order
  std::vector<KernelDiff> kernels;  // changed kernels, largest |change| first, the first k
  std::vector<std::string> notes;   // ranks or steps present in one run only
  std::vector<int> base_ranks, new_ranks, common_ranks;  // the runs' ranks, and those in both
  // The calls whose time or exposed time changed (or that one run lacks), largest first.
  std::vector<CallDiff> changed_calls(std::size_t max = 0) const;
};

// A change below this many seconds (a picosecond) is no change: the same trace gives zeros.
inline constexpr double kDiffEpsilon = 1e-12;

TraceDiff diff_traces(const std::vector<TraceFile>& base, const std::vector<TraceFile>& next,
                      std::size_t top_kernels = 15);

// Both runs on one timeline: each rank of the base run as process "base rank R", of the new
// run as "new rank R", each run's first window starting at 0 (for chrome_trace_json).
Timeline diff_timeline(const std::vector<TraceFile>& base, const std::vector<TraceFile>& next);

std::string render_diff(const TraceDiff& d, Format f);
nlohmann::json diff_json(const TraceDiff& d);

}  // namespace commscope
