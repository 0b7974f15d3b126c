// libFuzzer target for the trace reader and the analysis of what it reads: any input must give
// a TraceFile or an Error, never a crash, a hang or a sanitizer report. Build and run with
// scripts/fuzz-trace-reader.sh (clang from Debian). The input is read twice: as `analyze`
// reads it, and with HTA's view (`--convention hta`); the second reading is also split in two
// ranks (each event kept by its index's parity) so that the cross-rank analyses and the diff
// see several ranks.
#include <cstddef>
#include <cstdint>
#include <string>

#include "commscope/report/analyze.h"
#include "commscope/report/diff.h"
#include "commscope/report/hta.h"
#include "commscope/report/ranks.h"
#include "commscope/timeline/trace_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  commscope::ReadLimits limits;  // small bounds: the fuzzer also checks that they hold
  limits.max_event_bytes = 1 << 20;
  limits.max_kept_bytes = 64 << 20;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto r = commscope::read_trace_text("fuzz.json", text, limits);
  if (r.ok()) {
    commscope::Analysis a = commscope::analyze({r.value()}, 5);
    (void)commscope::render_analysis(a, commscope::Format::table);
  }
  auto h = commscope::read_trace_text("fuzz.json", text, limits, true);
  if (h.ok()) {
    std::vector<commscope::TraceFile> files{h.value(), h.value()};
    files[1].rank = files[0].rank + 1;
    for (int f = 0; f < 2; ++f) {
      auto& ev = files[f].timeline.events;
      std::vector<commscope::Event> kept;
      for (std::size_t i = 0; i < ev.size(); ++i)
        if (static_cast<int>(i % 2) == f) kept.push_back(ev[i]);
      ev = std::move(kept);
    }
    (void)commscope::hta_table(commscope::hta_breakdowns(files));
    (void)commscope::render_across_ranks(commscope::analyze_across_ranks(files));
    (void)commscope::render_diff(commscope::diff_traces({h.value()}, files),
                                 commscope::Format::table);
  }
  return 0;
}
