// Chrome trace writer. Written with fmt rather than a JSON DOM: a predicted timeline can hold
// hundreds of thousands of events.
#include "commscope/timeline/chrome.h"

#include <fmt/format.h>

namespace commscope {

namespace {
std::string escaped(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (char ch : s) {
    switch (ch) {
      case '"':
        o += "\\\"";
        break;
      case '\\':
        o += "\\\\";
        break;
      case '\n':
        o += "\\n";
        break;
      case '\t':
        o += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20)
          o += fmt::format("\\u{:04x}", static_cast<int>(ch));
        else
          o += ch;
    }
  }
  return o;
}
}  // namespace

std::string chrome_trace_json(const Timeline& t) {
  fmt::memory_buffer out;
  fmt::format_to(std::back_inserter(out), "{{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
  bool first = true;
  auto sep = [&] {
    if (!first) fmt::format_to(std::back_inserter(out), ",\n");
    first = false;
  };
  for (const auto& [rank, name] : t.rank_names) {
    sep();
    fmt::format_to(std::back_inserter(out),
                   R"({{"ph":"M","name":"process_name","pid":{},"tid":0,"args":{{"name":"{}"}}}})",
                   rank, escaped(name));
  }
  for (const auto& [key, name] : t.stream_names) {
    sep();
    fmt::format_to(std::back_inserter(out),
                   R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":"{}"}}}})",
                   key.first, key.second, escaped(name));
  }
  for (const auto& e : t.events) {
    sep();
    fmt::format_to(
        std::back_inserter(out),
        R"({{"ph":"X","name":"{}","cat":"{}","pid":{},"tid":{},"ts":{:.3f},"dur":{:.3f},"args":{{)",
        escaped(t.name(e)), to_string(e.kind), e.rank, e.stream, (e.start - e.wait) * 1e6,
        (e.dur + e.wait) * 1e6);
    bool a = false;
    auto arg = [&](std::string_view k, auto v) {
      fmt::format_to(std::back_inserter(out), "{}\"{}\":{}", a ? "," : "", k, v);
      a = true;
    };
    if (e.has_collective) {
      arg("collective", fmt::format("\"{}\"", to_string(e.collective)));
      arg("group", fmt::format("\"{}\"", to_string(e.group)));
      arg("bytes", fmt::format("{:.0f}", e.bytes));
      if (e.group_size) arg("group_size", e.group_size);
      // The slice spans the call as a profiler records it; wait_us of it before the transfer.
      if (e.wait > 0) arg("wait_us", fmt::format("{:.3f}", e.wait * 1e6));
    }
    if (e.microbatch >= 0) arg("microbatch", e.microbatch);
    if (e.layer >= 0) arg("layer", e.layer);
    fmt::format_to(std::back_inserter(out), "}}}}");
  }
  fmt::format_to(std::back_inserter(out), "\n]}}\n");
  return fmt::to_string(out);
}

}  // namespace commscope
