// Writing a Timeline as a Chrome trace (the JSON Perfetto and chrome://tracing open): one
// process per rank (or pipeline stage), one thread per stream, one complete ("X") event per
// event, times in microseconds. A communication event with a wait (Event::wait) spans the
// call as a profiler records it, from entry; its args carry wait_us.
#pragma once

#include <string>

#include "commscope/timeline/timeline.h"
#include "commscope/util/result.h"

namespace commscope {

// The writer's times are whole nanoseconds in 64 bits (up to 9.2e9 s), and the trace reader
// takes times within 2^52 us (kMaxAbsTimestampUs, 4.5e9 s): every event's start (less its wait)
// and end must lie within +-kMaxChromeTraceS seconds, so that what commscope writes it reads
// back (the writer allowed 9e9 s until 2026-12-02). check_chrome_trace says, naming `what` (the
// flag), whether `t` does; chrome_trace_json requires it.
inline constexpr double kMaxChromeTraceS = 4.5e9;
Status check_chrome_trace(const Timeline& t, std::string_view what);
std::string chrome_trace_json(const Timeline& t);

// A trace file's bytes: `json` gzip-compressed when `path` ends in ".gz" (as PyTorch's profiler
// writes trace.json.gz, and as analyze reads it), else `json` itself. (A ".gz" name held plain
// JSON, which zcat, Python's gzip and Perfetto's loader refuse; found by probing, 2026-12-02.)
std::string trace_file_bytes(const std::string& path, std::string json);

}  // namespace commscope
