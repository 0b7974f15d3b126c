// libFuzzer target for the trace reader and the analysis of what it reads: any input must give
// a TraceFile or an Error, never a crash, a hang or a sanitizer report. Build and run with
// scripts/fuzz-trace-reader.sh (clang from Debian).
#include <cstddef>
#include <cstdint>
#include <string>

#include "commscope/report/analyze.h"
#include "commscope/timeline/trace_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  commscope::ReadLimits limits;  // small bounds: the fuzzer also checks that they hold
  limits.max_event_bytes = 1 << 20;
  limits.max_kept_bytes = 64 << 20;
  auto r = commscope::read_trace_text(
      "fuzz.json", std::string(reinterpret_cast<const char*>(data), size), limits);
  if (r.ok()) {
    commscope::Analysis a = commscope::analyze({r.value()}, 5);
    (void)commscope::render_analysis(a, commscope::Format::table);
  }
  return 0;
}
