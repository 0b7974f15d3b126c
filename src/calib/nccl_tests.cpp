// nccl-tests / rccl-tests text output: a line-by-line state machine over the header, the
// column header and the rows of each log in a file.
#include "commscope/calib/nccl_tests.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commscope/spec/limits.h"
#include "commscope/util/input_file.h"
#include "commscope/util/text.h"

namespace commscope {

namespace {

using util::split_words;

struct ProgramName {
  std::string_view name;
  Collective collective;
};
constexpr ProgramName kPrograms[] = {{"all_reduce_perf", Collective::all_reduce},
                                     {"all_gather_perf", Collective::all_gather},
                                     {"reduce_scatter_perf", Collective::reduce_scatter},
                                     {"broadcast_perf", Collective::broadcast},
                                     {"reduce_perf", Collective::reduce},
                                     {"alltoall_perf", Collective::all_to_all},
                                     {"sendrecv_perf", Collective::send}};

// The program named on a line, as a whole word ("reduce_perf" is not found in
// "all_reduce_perf"; "all_reduce_perf_mpi" is all_reduce_perf).
std::optional<ProgramName> program_on(std::string_view line) {
  for (const auto& p : kPrograms) {
    for (std::size_t at = line.find(p.name); at != std::string_view::npos;
         at = line.find(p.name, at + 1)) {
      const char before = at == 0 ? ' ' : line[at - 1];
      if (std::isalnum(static_cast<unsigned char>(before)) || before == '_') continue;
      return p;
    }
  }
  return std::nullopt;
}

// The line without the tag a launcher puts before each line of a job's output: Open MPI's
// mpirun --tag-output "[1,0]<stdout>:" (with or without a blank after it), Slurm's srun
// --label "0: " (the task, padded with blanks), MPICH's -prepend-rank and Intel MPI's -l "[0] ".
// Such logs were refused as "none of them" (found by probing, 2026-12-02). No line of
// nccl-tests' own starts so: its rows start with blanks and a size, which no colon follows.
std::string_view untagged(std::string_view line) {
  auto digits = [](std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
  };
  if (!line.empty() && line.front() == '[') {
    const std::size_t close = line.find(']');
    if (close == std::string_view::npos) return line;
    const std::string_view inner = line.substr(1, close - 1), rest = line.substr(close + 1);
    const std::size_t comma = inner.find(',');
    if (comma != std::string_view::npos && digits(inner.substr(0, comma)) &&
        digits(inner.substr(comma + 1))) {
      for (std::string_view stream : {"<stdout>:", "<stderr>:"})
        if (rest.rfind(stream, 0) == 0) {
          const std::string_view after = rest.substr(stream.size());
          return !after.empty() && after.front() == ' ' ? after.substr(1) : after;
        }
    } else if (digits(inner) && !rest.empty() && rest.front() == ' ') {
      return rest.substr(1);
    }
    return line;
  }
  const std::size_t first = line.find_first_not_of(' ');
  if (first == std::string_view::npos) return line;
  const std::size_t colon = line.find(':', first);
  if (colon == std::string_view::npos || !digits(line.substr(first, colon - first))) return line;
  if (colon + 1 == line.size()) return line.substr(colon + 1);
  return line[colon + 1] == ' ' ? line.substr(colon + 2) : line;
}

// The line without leading blanks and comment marks.
std::string_view body(std::string_view line) {
  std::size_t i = 0;
  while (i < line.size() && (line[i] == '#' || std::isspace(static_cast<unsigned char>(line[i]))))
    ++i;
  return line.substr(i);
}

// Where each field of a row is, from the column header.
struct Layout {
  std::size_t columns = 0;
  int size = -1, redop = -1, root = -1, type = -1;
  struct Group {
    bool in_place = false;
    int time = -1, algbw = -1, busbw = -1;
    // "#wrong": the results nccl-tests found wrong (older builds print "error", the largest
    // deviation, which float reductions leave above 0: not read)
    int wrong = -1;
  };
  std::vector<Group> groups;
};

Layout layout_of(const std::vector<std::string_view>& cols, const std::vector<bool>& labels) {
  Layout l;
  l.columns = cols.size();
  for (std::size_t i = 0; i < cols.size(); ++i) {
    const auto c = cols[i];
    const int at = static_cast<int>(i);
    if (c == "size") l.size = at;
    if (c == "redop") l.redop = at;
    if (c == "root") l.root = at;
    if (c == "type") l.type = at;
    if (c == "time") {
      Layout::Group g;
      g.time = at;
      // Without the "out-of-place  in-place" line: out-of-place first, as nccl-tests prints.
      const std::size_t k = l.groups.size();
      g.in_place = k < labels.size() ? labels[k] : k > 0;
      l.groups.push_back(g);
    }
    if (!l.groups.empty() && c == "algbw") l.groups.back().algbw = at;
    if (!l.groups.empty() && c == "busbw") l.groups.back().busbw = at;
    if (!l.groups.empty() && (c == "#wrong" || c == "wrong")) l.groups.back().wrong = at;
  }
  return l;
}

// A log of several datatypes (nccl-tests `-d all`, or `-d` given a list) repeats every size per
// type, and one curve through all of them mixes what the reductions cost in each: the log keeps
// the rows of the type gradients are reduced in (bfloat16, else half, else float, else its first
// type), and a note names the others (they were merged into one curve without a word).
void keep_one_datatype(NcclTestsLog& log, const std::string& where) {
  std::vector<std::string> types;
  for (const auto& r : log.rows)
    if (std::find(types.begin(), types.end(), r.type) == types.end()) types.push_back(r.type);
  if (types.size() < 2) return;
  std::string keep = types.front();
  for (const char* preferred : {"float", "half", "bfloat16"})  // the last found wins
    if (std::find(types.begin(), types.end(), preferred) != types.end()) keep = preferred;
  const auto before = log.rows.size();
  log.rows.erase(std::remove_if(log.rows.begin(), log.rows.end(),
                                [&](const NcclTestsRow& r) { return r.type != keep; }),
                 log.rows.end());
  types.erase(std::find(types.begin(), types.end(), keep));
  log.notes.push_back(
      fmt::format("{}:{}: {} rows of {} datatypes; fitted the {} {} rows, left out {} ({} rows)",
                  where, log.first_line, before, types.size() + 1, log.rows.size(), keep,
                  fmt::join(types, ", "), before - log.rows.size()));
}

bool complete(const Layout& l) {
  if (l.size != 0 || l.groups.empty()) return false;
  return std::all_of(l.groups.begin(), l.groups.end(),
                     [](const auto& g) { return g.time > 0 && g.algbw > 0 && g.busbw > 0; });
}

// The collective a log's columns and bandwidth ratio imply, when one does.
std::optional<Collective> infer(const NcclTestsLog& log, const std::string& redop,
                                const std::string& root) {
  if (!root.empty() && root != "-1") {
    if (redop.empty()) return std::nullopt;
    return redop == "none" ? Collective::broadcast : Collective::reduce;
  }
  if (redop.empty() || redop == "none" || log.ranks < 2) return std::nullopt;
  // all_reduce prints busbw = 2(n-1)/n algbw, reduce_scatter (n-1)/n: the largest row says which.
  const NcclTestsRow* big = nullptr;
  for (const auto& r : log.rows)
    if (r.has_out_of_place && r.oop_algbw > 0) big = &r;
  if (!big) return std::nullopt;
  const double ratio = big->oop_busbw / big->oop_algbw;
  const double n = log.ranks;
  if (std::fabs(ratio - 2 * (n - 1) / n) < 0.05 * 2 * (n - 1) / n) return Collective::all_reduce;
  if (std::fabs(ratio - (n - 1) / n) < 0.05 * (n - 1) / n) return Collective::reduce_scatter;
  return std::nullopt;
}

}  // namespace

bool looks_like_nccl_tests(std::string_view text) {
  bool header = false;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view b = body(untagged(text.substr(start, end - start)));
    if (b.rfind("nThread", 0) == 0 && b.find("nGpus") != std::string_view::npos) header = true;
    if (header && b.rfind("size", 0) == 0 && b.find("busbw") != std::string_view::npos &&
        b.find("algbw") != std::string_view::npos)
      return true;
    start = end + 1;
  }
  return false;
}

Result<std::vector<NcclTestsLog>> parse_nccl_tests(std::string_view text, const std::string& where,
                                                   std::optional<Collective> fallback) {
  std::vector<NcclTestsLog> logs;
  // State of the log being read.
  bool in_log = false, rows_started = false;
  NcclTestsLog cur;
  std::set<std::string, std::less<>> hosts;
  int rank_lines = 0;
  std::map<std::string, int, std::less<>> rank_ids;  // a Rank line's rank -> its line
  int header_ranks = 0;                              // nThread x nGpus
  std::optional<ProgramName> pending;
  std::vector<bool> labels;  // in-place flags of the groups the label line names
  Layout layout;
  bool have_layout = false;
  std::string redop, root;  // of the first row

  auto finish = [&]() -> Status {
    if (!in_log) return {};
    in_log = false;
    have_layout = false;
    if (cur.rows.empty()) return {};  // a header without rows (a failed run): nothing to keep
    cur.ranks = rank_lines > 0 ? rank_lines : std::max(header_ranks, 1);
    cur.nodes = hosts.empty() ? 1 : static_cast<int>(hosts.size());
    if (!cur.program.empty()) {
      // set from the program name when the rows started
    } else if (fallback) {
      cur.collective = *fallback;
    } else if (auto c = infer(cur, redop, root)) {
      cur.collective = *c;
    } else {
      return Error{fmt::format(
          "{}:{}: collective: expected the program name (all_reduce_perf, ...) before the rows "
          "or --collective, got neither (columns redop '{}' root '{}')",
          where, cur.first_line, redop, root)};
    }
    // The rank count against the log's own figures: nccl-tests prints busbw = algbw x the
    // collective's bus factor of its ranks (its doc/PERFORMANCE.md). A log whose Rank lines were
    // cut (3 of 32 kept) or left out gave that many ranks, with busbw fits to match (found by
    // probing, 2026-12-02). The row of the largest algbw, where two decimals resolve the ratio.
    {
      const NcclTestsRow* best = nullptr;
      double algbw = 0, busbw = 0;
      for (const NcclTestsRow& r : cur.rows)
        for (auto [a, b] : {std::pair{r.oop_algbw, r.oop_busbw}, std::pair{r.ip_algbw, r.ip_busbw}})
          if (a > algbw) best = &r, algbw = a, busbw = b;
      const double expect = bus_factor(cur.collective, std::max(cur.ranks, 1));
      if (best && algbw >= 1 && std::fabs(busbw / algbw - expect) > 0.02 * expect + 0.01 / algbw)
        return Error{fmt::format(
            "{}:{}: ranks: expected busbw / algbw = {:.4g}, the {} bus factor of the {} ranks "
            "the log lists ({}), got {:.4g} (busbw {} / algbw {}): a log whose Rank lines were "
            "cut or left out, or another collective's; give the whole log",
            where, best->line, expect, to_string(cur.collective), cur.ranks,
            rank_lines > 0 ? "Rank lines" : "nThread x nGpus, no Rank lines", busbw / algbw, busbw,
            algbw)};
    }
    keep_one_datatype(cur, where);
    if (logs.size() >= kMaxNcclTestsLogs)
      return Error{fmt::format("{}:{}: expected at most {} logs in one file, got more", where,
                               cur.first_line, kMaxNcclTestsLogs)};
    logs.push_back(std::move(cur));
    return {};
  };
  auto start_log = [&](int line) {
    cur = NcclTestsLog{};
    cur.first_line = line;
    hosts.clear();
    rank_lines = 0;
    rank_ids.clear();
    header_ranks = 0;
    labels.clear();
    have_layout = false;
    rows_started = false;
    redop.clear(), root.clear();
    in_log = true;
  };

  int line_no = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    line = untagged(line);
    const std::string_view b = body(line);
    const bool comment = line.find_first_not_of(" \t") != std::string_view::npos &&
                         line[line.find_first_not_of(" \t")] == '#';
    // A data row: inside a table, a line that starts with a digit. One that starts with a
    // sign and a digit is a row gone wrong (a negative size), not another program's line.
    if (!comment && have_layout && b.size() > 1 && (b[0] == '-' || b[0] == '+') &&
        std::isdigit(static_cast<unsigned char>(b[1])))
      return Error{fmt::format("{}:{}: size: expected a byte count from 0 to 1e15, got '{}'", where,
                               line_no, split_words(b).front())};
    if (!comment && have_layout && !b.empty() && std::isdigit(static_cast<unsigned char>(b[0]))) {
      const auto f = split_words(b);
      auto bad = [&](std::string_view what, std::string_view expected, std::string_view got) {
        return Error{
            fmt::format("{}:{}: {}: expected {}, got '{}'", where, line_no, what, expected, got)};
      };
      if (f.size() != layout.columns)
        return bad("row", fmt::format("{} columns as the header names", layout.columns),
                   fmt::format("{} columns: {}", f.size(), b));
      NcclTestsRow r;
      r.line = line_no;
      if (layout.type >= 0) r.type = std::string(f[static_cast<std::size_t>(layout.type)]);
      if (!util::finite_number(f[0], r.bytes) || r.bytes < 0 || r.bytes != std::floor(r.bytes) ||
          r.bytes > 1e15)
        return bad("size", "a byte count from 0 to 1e15", f[0]);
      for (const auto& g : layout.groups) {
        double t = 0, a = 0, bw = 0;
        const auto ft = f[static_cast<std::size_t>(g.time)];
        if (ft == "N/A") continue;  // not run (some builds print N/A for in-place)
        if (!util::finite_number(ft, t) || !(t > 0))
          return bad("time", "a positive number of us", ft);
        const auto fa = f[static_cast<std::size_t>(g.algbw)];
        const auto fb = f[static_cast<std::size_t>(g.busbw)];
        if (!util::finite_number(fa, a) || a < 0)
          return bad("algbw", "a non-negative number of GB/s", fa);
        if (!util::finite_number(fb, bw) || bw < 0)
          return bad("busbw", "a non-negative number of GB/s", fb);
        // The row's own columns agree, as nccl-tests computes them: algbw is size over time, and
        // busbw is algbw times a factor below 2 (both printed to 0.01 GB/s, the time rounded).
        const double expect = r.bytes / (t * 1e3);  // GB/s
        if (std::fabs(a - expect) > 0.011 + 0.05 * expect)
          return bad("algbw",
                     fmt::format("size / time = {:.2f} GB/s, as nccl-tests computes it", expect),
                     fa);
        if (bw > 2 * a + 0.011)
          return bad("busbw", "at most twice algbw (nccl-tests' factors are below 2)", fb);
        // Results nccl-tests found wrong time a broken run: not fitted (commscope bench fails
        // on them too).
        if (g.wrong >= 0) {
          const auto fw = f[static_cast<std::size_t>(g.wrong)];
          double wrong = 0;
          if (fw != "N/A" && (!util::finite_number(fw, wrong) || wrong != 0))
            return bad("#wrong", "0 (nccl-tests checked the results and found them wrong)", fw);
        }
        (g.in_place ? r.has_in_place : r.has_out_of_place) = true;
        (g.in_place ? r.ip_seconds : r.oop_seconds) = t * 1e-6;
        (g.in_place ? r.ip_algbw : r.oop_algbw) = a * 1e9;
        (g.in_place ? r.ip_busbw : r.oop_busbw) = bw * 1e9;
      }
      if (!r.has_in_place && !r.has_out_of_place) return bad("time", "a number of us", "N/A");
      if (!rows_started) {
        rows_started = true;
        if (pending) {
          cur.program = std::string(pending->name);
          cur.collective = pending->collective;
          pending.reset();
        }
        if (layout.redop >= 0) redop = std::string(f[static_cast<std::size_t>(layout.redop)]);
        if (layout.root >= 0) root = std::string(f[static_cast<std::size_t>(layout.root)]);
      }
      if (cur.rows.size() >= kMaxNcclTestsRows)
        return Error{fmt::format("{}:{}: expected at most {} rows in one log, got more", where,
                                 line_no, kMaxNcclTestsRows)};
      cur.rows.push_back(r);
      continue;
    }
    if (auto p = program_on(line)) pending = p;
    if (b.rfind("nThread", 0) == 0 && b.find("nGpus") != std::string_view::npos) {
      CS_RETURN_IF_ERROR(finish());
      start_log(line_no);
      const auto f = split_words(b);
      int threads = 1, gpus = 1;
      for (std::size_t i = 0; i + 1 < f.size(); ++i) {
        double v = 0;
        if (f[i] == "nThread" && util::finite_number(f[i + 1], v) && v >= 1 && v <= 1 << 20)
          threads = int(v);
        if (f[i] == "nGpus" && util::finite_number(f[i + 1], v) && v >= 1 && v <= 1 << 20)
          gpus = int(v);
      }
      header_ranks = threads * gpus;
      continue;
    }
    if (b.rfind("Rank", 0) == 0 && in_log && !rows_started) {
      const auto f = split_words(b);
      for (std::size_t i = 0; i + 1 < f.size(); ++i)
        if (f[i] == "on") {
          hosts.emplace(f[i + 1]);
          break;
        }
      if (++rank_lines > limits::kMaxGpus)
        return Error{fmt::format("{}:{}: expected at most {} Rank lines, got more", where, line_no,
                                 limits::kMaxGpus)};
      // Each rank once: the ranks are counted from these lines, and a line pasted twice made 17
      // of 16, with a bus factor to match (found by probing, 2026-12-02).
      if (f.size() > 1)
        if (auto [at, fresh] = rank_ids.emplace(std::string(f[1]), line_no); !fresh)
          return Error{
              fmt::format("{}:{}: expected each rank's line once, got Rank {} again "
                          "(line {})",
                          where, line_no, f[1], at->second)};
      continue;
    }
    if (b.find("out-of-place") != std::string_view::npos ||
        (b.rfind("in-place", 0) == 0 && b.find("time") == std::string_view::npos)) {
      labels.clear();
      for (const auto w : split_words(b))
        if (w == "out-of-place" || w == "in-place") labels.push_back(w == "in-place");
      continue;
    }
    if (b.rfind("size", 0) == 0 && b.find("busbw") != std::string_view::npos) {
      Layout l = layout_of(split_words(b), labels);
      if (!complete(l))
        return Error{fmt::format(
            "{}:{}: column header: expected size ... time algbw busbw columns, got '{}'", where,
            line_no, b)};
      if (rows_started) CS_RETURN_IF_ERROR(finish());  // a second table without a new header
      if (!in_log) start_log(line_no);
      layout = l;
      have_layout = true;
      continue;
    }
    if (b.rfind("Avg bus bandwidth", 0) == 0 && in_log) {
      const auto colon = b.find(':');
      double v = 0;
      if (colon != std::string_view::npos) {
        const auto f = split_words(b.substr(colon + 1));
        if (!f.empty() && util::finite_number(f[0], v)) cur.avg_busbw = v * 1e9;
      }
      CS_RETURN_IF_ERROR(finish());
      continue;
    }
  }
  CS_RETURN_IF_ERROR(finish());
  if (logs.empty())
    return Error{fmt::format(
        "{}: expected nccl-tests output (a '# nThread ... nGpus' header, a column header "
        "with size, time, algbw and busbw, and rows), got no rows",
        where)};
  return logs;
}

Result<std::vector<NcclTestsLog>> read_nccl_tests(const std::string& path,
                                                  std::optional<Collective> fallback) {
  CS_ASSIGN_OR_RETURN(auto text, read_small_file(path, 64ull << 20, "nccl-tests output"));
  return parse_nccl_tests(text, path, fallback);
}

std::optional<MeasuredFormat> measured_format_from_name(std::string_view name) {
  if (name == "auto") return MeasuredFormat::automatic;
  if (name == "bench-json") return MeasuredFormat::bench_json;
  if (name == "nccl-tests") return MeasuredFormat::nccl_tests;
  if (name == "osu") return MeasuredFormat::osu;
  return std::nullopt;
}

Result<std::vector<MeasuredCollective>> read_measured(const std::string& path, MeasuredFormat f,
                                                      std::optional<Collective> collective,
                                                      const OsuRun& osu) {
  if (f == MeasuredFormat::bench_json) return read_bench_json(path);
  CS_ASSIGN_OR_RETURN(auto text, read_small_file(path, 64ull << 20, "benchmark output"));
  if (f == MeasuredFormat::automatic) {
    const auto first = text.find_first_not_of(" \t\r\n\xef\xbb\xbf");
    if (first != std::string::npos && text[first] == '{') return read_bench_json(path);
    if (looks_like_nccl_tests(text))
      f = MeasuredFormat::nccl_tests;
    else if (looks_like_osu(text))
      f = MeasuredFormat::osu;
    else
      return Error{fmt::format(
          "{}: expected commscope-bench JSON, nccl-tests output (a '# nThread ... nGpus' header "
          "and a 'size ... time algbw busbw' column header) or OSU Micro-Benchmarks output (a "
          "'# OSU ... Test' header), got none of them (--format)",
          path)};
  }
  if (f == MeasuredFormat::osu) {
    std::vector<std::string> skipped;
    CS_ASSIGN_OR_RETURN(auto logs, parse_osu(text, path, &skipped));
    CS_ASSIGN_OR_RETURN(auto measured, osu_to_measured(logs, osu, path));
    measured.front().notes.insert(measured.front().notes.begin(), skipped.begin(), skipped.end());
    return measured;
  }
  CS_ASSIGN_OR_RETURN(auto logs, parse_nccl_tests(text, path, collective));
  return to_measured(logs);
}

std::vector<MeasuredCollective> to_measured(const std::vector<NcclTestsLog>& logs) {
  std::vector<MeasuredCollective> out;
  for (const auto& log : logs) {
    MeasuredCollective m;
    m.collective = log.collective;
    m.ranks = log.ranks;
    m.nodes = log.nodes;
    m.group = log.nodes > 1 ? "inter-node" : "intra-node";
    m.notes = log.notes;
    for (const auto& r : log.rows) {
      if (r.bytes <= 0) continue;
      if (r.has_out_of_place)
        m.samples.push_back({r.bytes, r.oop_seconds, r.oop_busbw});
      else
        m.samples.push_back({r.bytes, r.ip_seconds, r.ip_busbw});
    }
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace commscope
