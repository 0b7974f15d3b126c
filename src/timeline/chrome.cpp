// Chrome trace writer. Written with fmt rather than a JSON DOM: a predicted timeline can hold
// hundreds of thousands of events.
#include "commscope/timeline/chrome.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "commscope/util/result.h"

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

namespace {
// Tracks per thread that hold slices overlapping without nesting: lane k > 0 of thread `tid` is
// thread tid + k x kLaneStride, named "<thread> (k + 1)".
constexpr std::int32_t kLaneStride = 1000;

// Each event's slice in whole nanoseconds, rounded once (its end is its start plus the duration
// written, so slices that abut on a thread do not overlap by a rounding), and its lane: Perfetto's
// JSON importer keeps the slices of one thread only where they nest or are disjoint, so a slice
// that overlaps another without nesting (a stage's send beside its receive) goes to the first
// lane of its thread where it nests or is disjoint.
struct Slice {
  std::int64_t ts = 0, end = 0;
  std::int32_t lane = 0;
};
bool within_chrome_trace(const Event& e) {
  const double ts = e.start - e.wait, end = e.end();
  return std::isfinite(ts) && std::isfinite(end) && std::fabs(ts) < kMaxChromeTraceS &&
         std::fabs(end) < kMaxChromeTraceS;
}

std::vector<Slice> slices_of(const Timeline& t) {
  std::vector<Slice> out(t.events.size());
  std::vector<std::size_t> order(t.events.size());
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    CS_CHECK(within_chrome_trace(e));
    const double ts = (e.start - e.wait) * 1e9, end = e.end() * 1e9;
    out[i].ts = std::llround(ts);
    out[i].end = std::max<std::int64_t>(out[i].ts, std::llround(end));
    order[i] = i;
  }
  // Per thread, in start order (the longer first where two start together, so that it holds
  // the other): each lane a stack of the open slices.
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const Event &x = t.events[a], &y = t.events[b];
    if (x.rank != y.rank) return x.rank < y.rank;
    if (x.stream != y.stream) return x.stream < y.stream;
    if (out[a].ts != out[b].ts) return out[a].ts < out[b].ts;
    return out[a].end > out[b].end;
  });
  std::vector<std::vector<std::int64_t>> lanes;  // per lane: the ends of its open slices
  for (std::size_t k = 0; k < order.size(); ++k) {
    const std::size_t i = order[k];
    const Event& e = t.events[i];
    if (k == 0 || t.events[order[k - 1]].rank != e.rank ||
        t.events[order[k - 1]].stream != e.stream)
      lanes.clear();
    std::size_t lane = 0;
    for (; lane < lanes.size(); ++lane) {
      auto& open = lanes[lane];
      while (!open.empty() && open.back() <= out[i].ts) open.pop_back();
      if (open.empty() || out[i].end <= open.back()) break;
    }
    if (lane == lanes.size()) lanes.emplace_back();
    lanes[lane].push_back(out[i].end);
    out[i].lane = static_cast<std::int32_t>(lane);
  }
  return out;
}
}  // namespace

Status check_chrome_trace(const Timeline& t, std::string_view what) {
  for (const Event& e : t.events)
    if (!within_chrome_trace(e))
      return Error{fmt::format(
          "{}: expected a timeline a Chrome trace can hold (every time within {:g} s: whole "
          "nanoseconds in 64 bits that commscope's reader takes back), got an event '{}' from "
          "{:.4g} s to {:.4g} s",
          what, kMaxChromeTraceS, e.name, e.start - e.wait, e.end())};
  return {};
}

std::string chrome_trace_json(const Timeline& t) {
  const std::vector<Slice> slices = slices_of(t);
  // the extra lanes each thread needed
  std::map<std::pair<std::int32_t, std::int32_t>, std::int32_t> lanes;
  for (std::size_t i = 0; i < slices.size(); ++i)
    if (slices[i].lane > 0) {
      auto& n = lanes[{t.events[i].rank, t.events[i].stream}];
      n = std::max(n, slices[i].lane);
    }
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
  for (const auto& [key, extra] : lanes) {
    auto named = t.stream_names.find(key);
    const std::string base =
        named != t.stream_names.end() ? named->second : fmt::format("stream {}", key.second);
    for (std::int32_t k = 1; k <= extra; ++k) {
      sep();
      fmt::format_to(
          std::back_inserter(out),
          R"x({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":"{} ({})"}}}})x",
          key.first, key.second + k * kLaneStride, escaped(base), k + 1);
    }
  }
  // microseconds with three decimals, from whole nanoseconds
  auto us = [](std::int64_t ns) { return static_cast<double>(ns) / 1e3; };
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    const Slice& sl = slices[i];
    sep();
    fmt::format_to(
        std::back_inserter(out),
        R"({{"ph":"X","name":"{}","cat":"{}","pid":{},"tid":{},"ts":{:.3f},"dur":{:.3f},"args":{{)",
        escaped(t.name(e)),
        e.marker == Event::Marker::range  ? std::string_view("range")
        : e.marker == Event::Marker::step ? std::string_view("user_annotation")
                                          : to_string(e.kind),
        e.rank, e.stream + sl.lane * kLaneStride, us(sl.ts), us(sl.end - sl.ts));
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

std::string trace_file_bytes(const std::string& path, std::string json) {
  if (path.size() < 3 || path.compare(path.size() - 3, 3, ".gz") != 0) return json;
  z_stream z{};
  // windowBits 15 + 16: a gzip header and trailer (RFC 1952), not a bare zlib stream.
  CS_CHECK(deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) ==
           Z_OK);
  std::string out;
  out.resize(deflateBound(&z, static_cast<uLong>(json.size())) + 64);
  std::size_t in_done = 0;
  int rc = Z_OK;
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(std::min<std::size_t>(out.size(), 1u << 30));
  while (rc != Z_STREAM_END) {
    // Input in pieces a uInt holds (a trace may pass 4 GiB).
    if (z.avail_in == 0 && in_done < json.size()) {
      const std::size_t n = std::min<std::size_t>(json.size() - in_done, 1u << 30);
      z.next_in = reinterpret_cast<Bytef*>(json.data() + in_done);
      z.avail_in = static_cast<uInt>(n);
      in_done += n;
    }
    if (z.avail_out == 0) {
      const std::size_t used = z.total_out;
      if (used == out.size()) out.resize(out.size() * 2);
      z.next_out = reinterpret_cast<Bytef*>(out.data() + used);
      z.avail_out = static_cast<uInt>(std::min<std::size_t>(out.size() - used, 1u << 30));
    }
    rc = deflate(&z, in_done < json.size() || z.avail_in > 0 ? Z_NO_FLUSH : Z_FINISH);
    CS_CHECK(rc == Z_OK || rc == Z_STREAM_END || rc == Z_BUF_ERROR);
  }
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

}  // namespace commscope
