// Reading PyTorch profiler (Kineto) traces and commscope's own Chrome traces into Timelines:
// simdjson On-Demand in one forward pass over the (gunzipped) text, each event copied into a
// plain record at once. Keeps the GPU timeline: kernels (compute, or communication when NCCL or
// RCCL), memory copies and sets, and ProfilerStep#N windows. Not the CPU ops.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "commscope/timeline/timeline.h"
#include "commscope/util/result.h"

namespace commscope {

// A ProfilerStep#N window.
struct StepWindow {
  std::string name;  // "ProfilerStep#4"
  double start = 0, end = 0;
  bool on_gpu = false;  // from a gpu_user_annotation (else the CPU-side annotation)
};

// What a communication kernel's args say (NCCL's profiler args), kept per comm event.
struct CommArgs {
  std::string collective;  // "Collective name" as written, or from the kernel name
  std::int64_t in_nelems = 0, out_nelems = 0;
  std::string dtype;
  int group_size = 0;
};

// What Holistic Trace Analysis (HTA 0.6.1) reads of a Kineto trace, kept beside the timeline so
// that `analyze --convention hta` counts as HTA does (report/hta.h). Times are microseconds as
// written in the trace (HTA rounds them itself).
struct HtaEvent {
  double ts = 0, dur = 0;         // microseconds
  std::int64_t correlation = -1;  // args.correlation; -1 when absent
  std::uint32_t name = 0;         // Timeline::names index
  std::int32_t stream = -1;       // args.stream as a number (HTA: -1 when absent or not numeric)
};
struct HtaLaunch {
  std::int64_t correlation = -1;  // a host event's args.correlation (a runtime call's)
  double ts = 0;                  // its start, microseconds
};
struct HtaStep {
  std::string name;  // "ProfilerStep#4", any category (older PyTorch writes them as cpu_op)
  double ts = 0, dur = 0;
};
struct HtaView {
  std::vector<HtaEvent> device;     // events with a numeric args.stream other than -1
  std::vector<HtaLaunch> launches;  // host events (not device) with args.correlation >= 0
  std::vector<HtaStep> steps;       // ProfilerStep#N events on the host side
};

struct TraceFile {
  std::string path;
  int rank = -1;       // distributedInfo.rank, else from the file name, else assigned
  int world_size = 0;  // distributedInfo.world_size (0: unknown)
  // distributedInfo.rank / world_size as written where they are no rank or size (read_traces
  // warns naming them; the rank is then taken as if missing).
  std::string bad_rank, bad_world_size;
  bool own_format = false;       // a commscope Chrome trace (its pids are ranks or stages)
  std::uint64_t json_bytes = 0;  // uncompressed size
  Timeline timeline;             // GPU events; times in seconds from the trace's own origin
  std::vector<StepWindow> steps;
  std::vector<CommArgs> comm_args;       // parallel to the comm events, by index (see comm_index)
  std::vector<std::int32_t> comm_index;  // per event: index into comm_args, or -1
  HtaView hta;  // Kineto only, when read with hta_view: what HTA's conventions need
  // Names of kernels that look like communication but match no NCCL/RCCL row (counted as
  // communication; read_traces warns about them). At most 64 names, then only the count.
  std::vector<std::string> unknown_comm_kernels;
  std::size_t unknown_comm_names = 0;  // distinct such names in all
  // NCCL kernels without the collective's arguments that took those of their
  // record_param_comms CPU op (the same External id; older PyTorch releases)
  std::size_t comm_args_from_cpu_ops = 0;
  // A Kineto trace's GPU events come from these devices (their pid); more than one is a process
  // driving several GPUs, whose events are read as one rank (read_traces warns).
  std::vector<std::int64_t> devices;
};

// The communication kernels of every NCCL and RCCL release, one row per naming generation (from
// the naming macros of NVIDIA/nccl and ROCm/rccl at the versions named). A kernel name matches
// a row when, after an optional "void ", it starts with `prefix` (or holds it, with `anywhere`)
// and holds `also` (when not empty). The first matching row wins.
struct CommKernelFamily {
  std::string_view library;   // "NCCL", "RCCL", "NCCL/RCCL"
  std::string_view releases;  // "NCCL 2.19+, RCCL ROCm 6.2+"
  std::string_view prefix, also;
  bool anywhere = false;
  std::string_view example;  // a kernel name of that generation
};
const std::vector<CommKernelFamily>& comm_kernel_families();
// The row of comm_kernel_families() a kernel name matches, or -1.
int comm_kernel_family(std::string_view name);
// Whether a kernel name is an NCCL/RCCL communication kernel of any release (a row matches).
bool is_comm_kernel(std::string_view name);
// Whether a kernel name looks like communication (nccl, rccl, msccl, hccl, userbuffers, an
// all-reduce/all-gather/reduce-scatter/all-to-all/send-recv spelling, vLLM's
// cross_device_reduce). The reader counts such a kernel that no row matches as communication
// and reports it in TraceFile::unknown_comm_kernels, never silently as compute.
bool looks_like_comm_kernel(std::string_view name);
// Bytes of one element of a profiler dtype name ("Float", "BFloat16", ...); 0 when unknown.
int profiler_dtype_bytes(std::string_view dtype);

// What one file may cost in memory. The reader holds a few chunks of events (1 MB each, four per
// parsing thread) and the event being cut, plus what it keeps; each bound is refused with one
// message naming the file and the limit, before the memory is taken.
struct ReadLimits {
  static constexpr std::uint64_t kDefaultMaxEventBytes = 64ull << 20;
  std::uint64_t max_event_bytes = kDefaultMaxEventBytes;  // JSON text of one event or value
  std::uint64_t max_events = 0;      // events kept (kernels, copies, steps); 0: no count limit
  std::uint64_t max_kept_bytes = 0;  // memory kept (vector capacities, strings); 0: none
};

// Bounds of the sane values of an event (microseconds): |ts| <= 2^52 (4.5e15: 142 years from
// the epoch, where a double still resolves 1 us; at 1e17 it resolved 16 us, and a kernel at ts
// 9e16 measured 0.607 ms for 0.600, found by probing, 2026-12-01), 0 <= dur <= 8.64e10 (a day).
// Values outside are refused with the event's index.
inline constexpr double kMaxAbsTimestampUs = 4503599627370496.0;
inline constexpr double kMaxDurationUs = 8.64e10;

// The window a trace's ranks are measured over when it has no ProfilerStep. A commscope trace
// (predict --trace, train --trace): its processes are pipeline stages or ranks of one iteration
// on one clock, each measured over the whole iteration, from the first call's entry (start -
// wait) to the last event's end, as predict measures them. Any other trace, or an empty one:
// {0, -1}, each rank's own first to last event (breakdown's t1 <= t0). analyze and analyze
// --diff both use it (--diff started a later stage after its first receive's wait, found by
// probing, 2026-12-02).
std::pair<double, double> whole_trace_window(const TraceFile& tf);

// Reads one .json or .json.gz trace. Errors name the file and the byte offset or the event
// index: "trace.json: byte 1234: ...", "trace.json: event 17: field 'dur': expected ...".
// Anything but a regular file is refused (a FIFO would block forever). With hta_view the reader
// also keeps TraceFile::hta (runtime calls' correlation ids: slower, so only when asked).
// `threads` parse the event array's chunks (1 MB of whole events each) while the calling
// thread reads (and inflates) the file and cuts the chunks; 0: one per core (at most 8), 1: all
// in the calling thread. The result is the same for any number of threads (chunks are merged in
// file order); memory holds at most four chunks per thread, whatever the file's size.
Result<TraceFile> read_trace(const std::string& path, const ReadLimits& limits = {},
                             bool hta_view = false, int threads = 0);

// Reads a trace from memory (for tests and the fuzzer); `name` stands in for the path.
Result<TraceFile> read_trace_text(const std::string& name, std::string text,
                                  const ReadLimits& limits = {}, bool hta_view = false,
                                  int threads = 0);

// Sets the rank of a Kineto trace: on the file and on every one of its events.
void set_rank(TraceFile& tf, int rank);

// The trace files named by `inputs`: files as given, directories expanded to their .json and
// .json.gz entries (sorted; other than directories, whatever their kind: read_trace refuses a
// FIFO or a dangling link in a directory, and the caller reports it). Refused: a missing path, a
// FIFO/device/socket named as an input, a directory with no traces ("d: a directory with no
// .json or .json.gz traces").
Result<std::vector<std::string>> list_traces(const std::vector<std::string>& inputs);

struct TraceReadOptions {
  int jobs = 0;   // threads: files read in parallel, the rest parse within a file; 0: all cores
  int rank = -1;  // the rank of a single trace that states none; -1: none given
  bool strict = false;    // any unreadable file is an error (else it is listed in `bad`)
  ReadLimits limits;      // max_kept_bytes 0: derived from available memory (see read_traces)
  bool hta_view = false;  // keep TraceFile::hta too (for `analyze --convention hta`)
};

struct TraceSet {
  std::vector<TraceFile> files;
  std::vector<std::string> bad;       // one message per unreadable file (skipped)
  std::vector<std::string> warnings;  // ranks claimed twice, ranks assigned
};

// The paths of the files read, of one set or two (a verb's outputs must name none of them).
std::vector<std::string> read_paths(const TraceSet& a, const TraceSet* b = nullptr);

// Lists and reads traces in parallel threads and gives every Kineto file a rank:
// distributedInfo, else its name, else options.rank (one file only), else the first free one.
// Without a limit in options.limits, each file may keep an eighth of the available
// memory (available_memory_bytes()) divided by the files read at once. Fails when no file is
// readable, with options.strict when any is not, or when --rank is given for several files.
Result<TraceSet> read_traces(const std::vector<std::string>& inputs,
                             const TraceReadOptions& options);

// The rank a file name states (rank-3, rank_3, rank3), or -1.
int rank_from_file_name(const std::string& path);

}  // namespace commscope
