// OSU Micro-Benchmarks text output: a line-by-line reader of each log's header, column header
// and rows (calib/osu.h).
#include "commscope/calib/osu.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include <fmt/format.h>

#include "commscope/calib/nccl_tests.h"  // kMaxNcclTestsLogs, kMaxNcclTestsRows
#include "commscope/spec/limits.h"
#include "commscope/util/text.h"

namespace commscope {

namespace {

using util::split_words;

// The benchmarks commscope fits, by the name between the family (MPI, MPI-CUDA, NCCL, ...) and
// "Test" in OMB's header; the persistent forms (MPI 4's MPI_*_init) run the same operation.
struct Known {
  std::string_view name;
  Collective collective;
  bool bandwidth;
  int streams = 1;  // OsuLog::streams; 0: osu_mbw_mr's pairs, from its pairs line
};
constexpr Known kKnown[] = {
    {"Allreduce Latency", Collective::all_reduce, false},
    {"Allreduce Persistent Latency", Collective::all_reduce, false},
    {"Allgather Latency", Collective::all_gather, false},
    {"Allgather Persistent Latency", Collective::all_gather, false},
    {"Reduce_scatter Latency", Collective::reduce_scatter, false},
    {"Reduce_scatter Persistent Latency", Collective::reduce_scatter, false},
    {"Reduce_scatter_block Latency", Collective::reduce_scatter, false},
    {"All-to-All Personalized Exchange Latency", Collective::all_to_all, false},
    {"Broadcast Latency", Collective::broadcast, false},
    {"Broadcast Persistent Latency", Collective::broadcast, false},
    {"Reduce Latency", Collective::reduce, false},
    {"Reduce Persistent Latency", Collective::reduce, false},
    {"Latency", Collective::send, false},
    {"Latency Persistent", Collective::send, false},
    {"Bandwidth", Collective::send, true},
    {"Bandwidth Persistent", Collective::send, true},
    {"Bi-Directional Bandwidth", Collective::send, true, 2},
    {"Bi-Directional Bandwidth Persistent", Collective::send, true, 2},
    {"Multiple Bandwidth / Message Rate", Collective::send, true, 0},
};
constexpr std::string_view kFitted =
    "osu_allreduce, osu_allgather, osu_reduce_scatter[_block], osu_alltoall, osu_bcast, "
    "osu_reduce, osu_latency, osu_bw, osu_bibw and osu_mbw_mr";

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// An OMB header line, "# OSU MPI-CUDA Allreduce Latency Test v7.4": the benchmark's name
// without the family and the version ("Allreduce Latency"), or nullopt when the line is none.
std::optional<std::string_view> header_name(std::string_view line) {
  std::string_view b = trim(line);
  if (b.empty() || b.front() != '#') return std::nullopt;
  b = trim(b.substr(1));
  if (b.rfind("OSU ", 0) != 0) return std::nullopt;
  b = trim(b.substr(4));
  const std::size_t test = b.rfind(" Test");
  if (test == std::string_view::npos) return std::nullopt;
  const std::size_t family_end = b.find(' ');  // MPI, MPI-CUDA, NCCL, MPI_Get, ...
  if (family_end == std::string_view::npos || family_end >= test) return std::nullopt;
  return trim(b.substr(family_end + 1, test - family_end - 1));
}

}  // namespace

bool looks_like_osu(std::string_view text) {
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    if (header_name(text.substr(start, end - start))) return true;
    start = end + 1;
  }
  return false;
}

Result<std::vector<OsuLog>> parse_osu(std::string_view text, const std::string& where,
                                      std::vector<std::string>* notes) {
  std::vector<OsuLog> logs;
  OsuLog cur;
  // reading: a log commscope fits; skipping: one it does not (its rows are passed over)
  bool reading = false, skipping = false, columns = false;
  int skipped_lines = 0;  // inside a log, lines that start with no number
  std::string first_skipped;
  auto finish = [&]() -> Status {
    if (!reading) return {};
    reading = false;
    if (cur.rows.empty())
      return Error{fmt::format("{}:{}: {}: expected rows of size and {} after its header, got none",
                               where, cur.first_line, cur.benchmark,
                               cur.bandwidth ? "bandwidth" : "latency")};
    if (logs.size() >= kMaxNcclTestsLogs)
      return Error{
          fmt::format("{}: expected at most {} OSU logs, got more", where, kMaxNcclTestsLogs)};
    logs.push_back(std::move(cur));
    return {};
  };
  int line_no = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    const std::string_view b = trim(line);
    if (b.empty()) continue;
    if (auto name = header_name(b)) {
      CS_RETURN_IF_ERROR(finish());
      const std::string benchmark(trim(trim(b).substr(1)));
      const auto known = std::find_if(std::begin(kKnown), std::end(kKnown),
                                      [&](const Known& k) { return k.name == *name; });
      if (known == std::end(kKnown)) {
        skipping = true;
        if (notes)
          notes->push_back(fmt::format("{}:{}: {}: skipped (commscope fits {})", where, line_no,
                                       benchmark, kFitted));
        continue;
      }
      skipping = false;
      reading = true;
      columns = false;
      cur = OsuLog{};
      cur.benchmark = benchmark;
      cur.collective = known->collective;
      cur.bandwidth = known->bandwidth;
      cur.streams = known->streams;
      cur.first_line = line_no;
      continue;
    }
    if (!reading || skipping) continue;
    if (b.front() == '#') {
      const std::string_view c = trim(b.substr(1));
      if (cur.streams == 0 && c.rfind("[ pairs:", 0) == 0) {
        // osu_mbw_mr's "[ pairs: N ] [ window size: W ]"
        const auto f = split_words(c.substr(8));
        double pairs = 0;
        if (f.empty() || !util::finite_number(f[0], pairs) || pairs < 1 ||
            pairs != std::floor(pairs) || pairs > limits::kMaxGpus)
          return Error{
              fmt::format("{}:{}: {}: expected '[ pairs: N ]' with a whole N >= 1, got '{}'", where,
                          line_no, cur.benchmark, c)};
        if (pairs > 1) {
          // The pairs share the links: their MB/s together is not one pair's.
          reading = false;
          skipping = true;
          if (notes)
            notes->push_back(fmt::format(
                "{}:{}: {}: skipped: {} pairs share the links, so its MB/s is theirs together, "
                "not one pair's (commscope reads osu_mbw_mr with -p 1, as osu_bw)",
                where, cur.first_line, cur.benchmark, f[0]));
          continue;
        }
        cur.streams = 1;
        continue;
      }
      if (c.rfind("Datatype:", 0) == 0) {
        std::string_view t = trim(c.substr(9));
        if (!t.empty() && t.back() == '.') t.remove_suffix(1);
        cur.datatype = std::string(t);
      } else if (c.rfind("Size", 0) == 0) {
        const bool bw = c.find("MB/s") != std::string_view::npos;
        const bool lat =
            c.find("Latency") != std::string_view::npos && c.find("us)") != std::string_view::npos;
        if (bw != cur.bandwidth || (!bw && !lat))
          return Error{fmt::format("{}:{}: column header: expected 'Size' and {} for {}, got '{}'",
                                   where, line_no,
                                   cur.bandwidth ? "'Bandwidth (MB/s)' or 'MB/s'"
                                                 : "'Avg Latency(us)' or 'Latency (us)'",
                                   cur.benchmark, c)};
        if (cur.streams == 0)
          return Error{
              fmt::format("{}:{}: {}: expected its '# [ pairs: N ] ...' line before the "
                          "column header, got none",
                          where, line_no, cur.benchmark)};
        columns = true;
      }
      continue;
    }
    // A line that starts with no number is no row: a warning of the MPI library or UCX
    // between the rows (stderr merged into the log), skipped as the nccl-tests reader skips
    // NCCL's, and counted in a note (they were refused as bad rows, found by probing,
    // 2026-12-02).
    {
      const auto w = split_words(b);
      double first = 0;
      if (w.empty() || !util::finite_number(w[0], first)) {
        if (skipped_lines++ == 0) first_skipped = fmt::format("{}:{}", where, line_no);
        continue;
      }
    }
    // A row: the size, the value, then (-f) min, max, iterations and (-c) Pass or Fail.
    if (!columns)
      return Error{
          fmt::format("{}:{}: {}: expected its '# Size ...' column header before the "
                      "rows, got '{}'",
                      where, line_no, cur.benchmark, b)};
    const auto f = split_words(b);
    OsuRow r;
    r.line = line_no;
    if (f.size() < 2 || !util::finite_number(f[0], r.bytes) ||
        !util::finite_number(f[1], r.value) || r.bytes < 0 || r.bytes != std::floor(r.bytes) ||
        !(r.value > 0))
      return Error{fmt::format(
          "{}:{}: expected a row 'size {}' with a whole size and a positive value, got '{}'", where,
          line_no, cur.bandwidth ? "MB/s" : "us", b)};
    // Every row of a log has its first row's columns (a row cut short, "4194304  28" in a log
    // of five columns, was read as 28 us and bent the whole curve), and nccl-tests' bound on
    // sizes (found by probing, 2026-12-02).
    if (r.bytes > 1e15)
      return Error{fmt::format("{}:{}: size: expected a byte count from 0 to 1e15, got '{}'", where,
                               line_no, f[0])};
    if (!cur.rows.empty() && f.size() != cur.fields)
      return Error{fmt::format(
          "{}:{}: expected {} columns, as the log's first row (line {}) has, got {}: '{}'", where,
          line_no, cur.fields, cur.rows.front().line, f.size(), b)};
    cur.fields = f.size();
    if (f.back() == "Fail")
      return Error{
          fmt::format("{}:{}: {}: the row of size {} failed OSU's validation (-c): its "
                      "result was wrong, so its time is not a measurement to fit",
                      where, line_no, cur.benchmark, f[0])};
    if (cur.rows.size() >= kMaxNcclTestsRows)
      return Error{fmt::format("{}:{}: expected at most {} rows in one log, got more", where,
                               line_no, kMaxNcclTestsRows)};
    cur.rows.push_back(r);
  }
  CS_RETURN_IF_ERROR(finish());
  if (skipped_lines > 0 && notes)
    notes->push_back(fmt::format(
        "{}: {} line(s) that start with no number skipped as no rows (the first at {}: an MPI "
        "or UCX message in the log?)",
        where, skipped_lines, first_skipped));
  if (logs.empty())
    return Error{fmt::format(
        "{}: expected OSU Micro-Benchmarks output of {} (a '# OSU ... Test' header, a '# Size "
        "...' column header and rows), got none",
        where, kFitted)};
  return logs;
}

Result<std::vector<MeasuredCollective>> osu_to_measured(const std::vector<OsuLog>& logs,
                                                        const OsuRun& run,
                                                        const std::string& where) {
  std::vector<MeasuredCollective> out;
  for (const auto& log : logs) {
    MeasuredCollective m;
    m.collective = log.collective;
    const bool p2p = log.collective == Collective::send;
    if (!p2p && run.ranks < 2)
      return Error{fmt::format(
          "{}:{}: {}: expected --ranks N, the processes of the run (OSU does not print them; "
          "mpirun -np N), got {}",
          where, log.first_line, log.benchmark,
          run.ranks > 0 ? std::to_string(run.ranks) : std::string("none"))};
    m.ranks = p2p ? 2 : run.ranks;
    m.nodes = std::min(run.nodes, m.ranks);  // the point-to-point pair spans at most 2
    m.group = m.nodes <= 0 ? "world" : m.nodes > 1 ? "inter-node" : "intra-node";
    // nccl-tests' size: the whole buffer where OMB counts one rank's block
    const double scale =
        log.collective == Collective::all_gather || log.collective == Collective::all_to_all
            ? m.ranks
            : 1.0;
    for (const auto& r : log.rows) {
      if (r.bytes <= 0) continue;
      Sample s;
      s.bytes = r.bytes * scale;
      // osu_bibw: both directions' MB/s, each direction's message at half of it.
      s.seconds = log.bandwidth ? r.bytes * log.streams / (r.value * 1e6) : r.value * 1e-6;
      s.busbw = s.bytes * bus_factor(m.collective, m.ranks) / s.seconds;
      m.samples.push_back(s);
    }
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace commscope
