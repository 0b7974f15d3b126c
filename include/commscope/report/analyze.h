// `analyze`: where the time went in real traces, per rank and across ranks: the temporal
// breakdown of the GPU timeline (per ProfilerStep when annotated), per-collective statistics
// with nccl-tests' algbw and busbw, stragglers, top kernels. Reads with timeline/trace_reader.h,
// breaks down with the timeline layer's one breakdown routine.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "commscope/report/hta.h"
#include "commscope/report/ranks.h"
#include "commscope/report/table.h"
#include "commscope/timeline/trace_reader.h"

namespace commscope {

struct StepBreakdown {
  std::string name;
  Breakdown breakdown;
};

struct RankAnalysis {
  int rank = 0;
  std::string file;
  Breakdown total;  // window: the rank's first to last GPU event
  std::vector<StepBreakdown> steps;
  std::size_t kernels = 0, comm_kernels = 0;
};

// Summary of a list of values.
struct Distribution {
  std::size_t n = 0;
  double min = 0, p50 = 0, mean = 0, p90 = 0, max = 0;
};
Distribution distribution(std::vector<double> v);

struct CollectiveStats {
  Collective collective = Collective::all_reduce;
  // false: a collective commscope has no kind for (PyTorch's gather, scatter, barrier,
  // coalesced): its row has the trace's name, kind "other", no bus bandwidth.
  bool known = true;
  std::string name;  // as the trace calls it ("allreduce")
  std::size_t calls = 0;
  double total_s = 0;
  Distribution time_s, bytes, algbw, busbw;  // algbw/busbw in bytes/s, over calls with sizes
};

// The k-th call of a collective on every rank that made it.
struct CallSpread {
  std::string collective;
  std::size_t call = 0;
  double min_s = 0, max_s = 0;
  int late_rank = 0;     // the shortest kernel: it arrived last, the others waited for it
  int waiting_rank = 0;  // the longest kernel: it waited the longest
};

struct KernelStat {
  std::string name;
  bool comm = false;
  std::size_t calls = 0;
  double total_s = 0;
};

struct Analysis {
  std::vector<RankAnalysis> ranks;
  std::vector<CollectiveStats> collectives;
  std::vector<CallSpread> spreads;  // largest spread first
  std::vector<KernelStat> top_kernels;
  int slowest_rank = -1;  // the most compute: the rank the others wait for in collectives
  std::vector<std::string> bad_files;
  // "commscope" (the breakdown above) or "hta": the per-rank figures as Holistic Trace Analysis
  // defines them (report/hta.h), shown in place of the per-rank table.
  std::string convention = "commscope";
  std::vector<HtaBreakdown> hta;
  // Clocks aligned, last arrivals and the critical path of the first step (two or more ranks).
  CrossRank across;
};

// algbw = bytes / time; busbw = algbw x nccl-tests' factor for the collective and group size.
double algbw(double bytes, double seconds);
double busbw(Collective c, int group_size, double bytes, double seconds);

// One analyzer per question (as Holistic Trace Analysis has one per question):
// Where the time went per rank and per ProfilerStep window, ranks in order.
std::vector<RankAnalysis> analyze_breakdowns(const std::vector<TraceFile>& files);
// Per collective over all ranks: calls, time, sizes, algbw/busbw; most total time first.
std::vector<CollectiveStats> analyze_collectives(const std::vector<TraceFile>& files);
// The k-th call of each collective on every rank: the spread of its kernel times and the late
// (shortest kernel) and waiting (longest kernel) ranks; largest spread first.
std::vector<CallSpread> analyze_stragglers(const std::vector<TraceFile>& files);
// Compute and communication kernels by total time over all ranks, the first k.
std::vector<KernelStat> analyze_top_kernels(const std::vector<TraceFile>& files, std::size_t k);
// The rank with the most compute time (-1 when none).
int slowest_rank(const std::vector<RankAnalysis>& ranks);

// All of the above.
Analysis analyze(const std::vector<TraceFile>& files, std::size_t top_kernels = 15);

std::string render_analysis(const Analysis& a, Format f);
nlohmann::json analysis_json(const Analysis& a);

}  // namespace commscope
