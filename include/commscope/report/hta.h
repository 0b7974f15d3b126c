// Holistic Trace Analysis's conventions (`analyze --convention hta`): the temporal breakdown
// (idle, compute, non-compute, kernel time) and the computation-communication overlap exactly
// as HTA 0.6.1 defines them, so that users who move from HTA see HTA's numbers. Definitions
// (facebookresearch/HolisticTraceAnalysis, tag v0.6.1):
//  - events: those with a numeric args.stream other than -1; a GPU kernel has stream >= 0 and a
//    correlation id >= 0 (hta/common/trace_filter.py, GPUKernelFilter);
//  - with two or more distinct ProfilerStep#N names in the traces, the last step is dropped:
//    a GPU kernel is kept only when a host event with its correlation id started before the
//    last ProfilerStep started (hta/common/trace.py, _filter_irrelevant_gpu_kernels); host
//    events with a stream other than -1 are kept when they started before it;
//  - times are rounded to whole microseconds: start up, end down (hta/common/trace_parser.py,
//    round_down_time_stamps);
//  - kernel time = last end - first start of the events; idle = kernel time - their union;
//    compute = union of COMPUTATION kernels; non-compute = kernel time - compute - idle
//    (hta/analyzers/breakdown_analysis.py, get_temporal_breakdown);
//  - kernel types by name (hta/common/types.py, hta/utils/utils.py get_kernel_type):
//    communication, then memory, then computation, else other;
//  - overlap = |union(computation) ∩ union(communication)| / |union(communication)|
//    (hta/analyzers/communication_analysis.py, get_comm_comp_overlap).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "commscope/report/table.h"
#include "commscope/timeline/trace_reader.h"

namespace commscope {

enum class HtaKernelType { communication, memory, computation, other };
std::string_view to_string(HtaKernelType t);
// HTA's kernel type of a kernel name.
HtaKernelType hta_kernel_type(std::string_view name);

struct HtaOptions {
  bool include_last_step = false;  // HTA's include_last_profiler_step
};

// One rank's figures as HTA's get_temporal_breakdown and get_comm_comp_overlap report them.
struct HtaBreakdown {
  int rank = 0;
  std::string file;
  double idle_us = 0, compute_us = 0, non_compute_us = 0, kernel_time_us = 0;
  double comm_us = 0;      // union of communication kernels (the overlap's denominator)
  double overlap_us = 0;   // computation and communication at once
  std::size_t events = 0;  // events counted
  bool last_step_dropped = false;
  bool from_timeline = false;  // a commscope Chrome trace: its events, typed by kind
  // percent of kernel time, as HTA rounds them (2 decimals); NaN without kernel time (as HTA)
  double idle_pctg() const;
  double compute_pctg() const;
  double non_compute_pctg() const;
  double overlap_pctg() const;  // NaN without communication (HTA divides by zero)
};

// Per rank, ranks in order. The last-step rule counts distinct ProfilerStep names over all
// files, as HTA's symbol table does.
std::vector<HtaBreakdown> hta_breakdowns(const std::vector<TraceFile>& files,
                                         const HtaOptions& options = {});

Table hta_table(const std::vector<HtaBreakdown>& ranks);
nlohmann::json hta_json(const std::vector<HtaBreakdown>& ranks);

}  // namespace commscope
