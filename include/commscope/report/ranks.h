// Across ranks, from one trace per rank: the clocks aligned (per-rank traces come from different
// hosts), who arrived last at each collective and by how much, and the critical path through
// one iteration. The clock of each rank is aligned on the end times of collective kernels
// (a collective ends on all its ranks together; its start is when each rank arrived), so a rank
// that is late at every collective (a DDP straggler whose kernels look like everyone else's)
// is still found: its kernels start last once the clocks agree.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "commscope/timeline/trace_reader.h"

namespace commscope {

// A rank's clock against the reference rank's: reference time = own time - offset_s.
struct ClockOffset {
  int rank = 0;
  double offset_s = 0;        // median over the shared calls of (own end - reference end); 0 for
                              // the reference and for ranks of the reference's own file
  double residual_s = 0;      // RMS of the end times left after the offset: the alignment's error
  double max_residual_s = 0;  // largest of them
  std::size_t calls = 0;      // collective calls shared with the reference rank
};

// The k-th call of one collective and size, on every rank that made it, in aligned time.
struct Arrival {
  std::string collective;
  double bytes = 0;
  std::size_t call = 0;
  int last_rank = -1;    // arrived last (its kernel started last): the others waited for it
  double late_by_s = 0;  // last arrival - the one before it: what that rank alone held back
  double spread_s = 0;   // last arrival - first arrival: the longest wait it caused
  int ranks = 0;
};

// Arrivals closer than this (0.1 us, below a profiler's resolution) are a tie: nobody was last.
inline constexpr double kLateEpsilon = 1e-7;

// How often and by how much each rank arrived last (ties not counted).
struct StragglerStat {
  int rank = 0;
  std::size_t times_last = 0;
  double total_late_s = 0, max_late_s = 0;  // sums and largest late_by_s
};

struct PathSegment {
  int rank = 0;
  std::string what;  // kernel name, or "idle" (no GPU work on the path: host, launch, data)
  bool idle = false;
  EventKind kind = EventKind::compute;
  double start = 0, end = 0;  // aligned seconds
};

// The chain of work that set the iteration's length, walked back from its last end: on a rank
// through the latest event before the current time (a gap is idle), and at a collective to the
// rank that arrived last.
struct CriticalPath {
  double start = 0, end = 0;          // the window (aligned seconds)
  bool whole_trace = false;           // no step window: all ranks' whole traces
  std::vector<PathSegment> segments;  // in time order
  double compute_s = 0, comm_s = 0, memcpy_s = 0, idle_s = 0;  // sum to end - start
  std::vector<std::pair<int, double>> per_rank_s;              // time on the path per rank
};

struct CrossRank {
  int reference_rank = -1;
  std::vector<ClockOffset> clocks;        // per rank, ranks in order
  std::vector<Arrival> arrivals;          // per call
  std::vector<StragglerStat> stragglers;  // most total lateness first
  CriticalPath path;                      // through `step` (or the whole trace)
  std::size_t step = 0;
};

// Needs two or more Kineto ranks (one file each) with collective kernels; else reference_rank
// is -1 and the lists are empty. commscope's own Chrome traces are skipped: their processes are
// pipeline stages on one clock, whose collectives belong to different groups.
// `step`: which ProfilerStep window (of the reference rank) the critical path covers.
CrossRank analyze_across_ranks(const std::vector<TraceFile>& files, std::size_t step = 0);

std::string render_across_ranks(const CrossRank& c);
nlohmann::json across_ranks_json(const CrossRank& c);

}  // namespace commscope
