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

struct TraceFile {
  std::string path;
  int rank = -1;                 // distributedInfo.rank, else from the file name, else assigned
  int world_size = 0;            // distributedInfo.world_size (0: unknown)
  bool own_format = false;       // a commscope Chrome trace (its pids are ranks or stages)
  std::uint64_t json_bytes = 0;  // uncompressed size
  Timeline timeline;             // GPU events; times in seconds from the trace's own origin
  std::vector<StepWindow> steps;
  std::vector<CommArgs> comm_args;       // parallel to the comm events, by index (see comm_index)
  std::vector<std::int32_t> comm_index;  // per event: index into comm_args, or -1
};

// Whether a kernel name is an NCCL/RCCL communication kernel (every NCCL generation's names:
// ncclKernel_*, ncclDevKernel_*, ncclSymkDevKernel_*, and RCCL's).
bool is_comm_kernel(std::string_view name);
// Bytes of one element of a profiler dtype name ("Float", "BFloat16", ...); 0 when unknown.
int profiler_dtype_bytes(std::string_view dtype);

// Reads one .json or .json.gz trace. Errors name the file and the byte offset or the event
// index: "trace.json: byte 1234: ...", "trace.json: event 17: field 'dur': expected ...".
Result<TraceFile> read_trace(const std::string& path);

// Reads a trace from memory (for tests and the fuzzer); `name` stands in for the path.
Result<TraceFile> read_trace_text(const std::string& name, std::string text);

// The rank a file name states (rank-3, rank_3, rank3), or -1.
int rank_from_file_name(const std::string& path);

}  // namespace commscope
