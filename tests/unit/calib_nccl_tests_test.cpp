// The nccl-tests / rccl-tests reader on the real logs of tests/data/nccl-tests/ (sources in its
// README.md): numbers checked against the printed tables, and on variants of those logs
// (columns left out, in-place only, concatenated, truncated) and `commscope fit` of a log.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commscope/calib/alpha_beta.h"
#include "commscope/calib/nccl_tests.h"
#include "commscope/spec/system.h"
#include "test_util.h"

namespace commscope {
namespace {

namespace fs = std::filesystem;

std::string data(const std::string& name) {
  return std::string(COMMSCOPE_SOURCE_DIR) + "/tests/data/nccl-tests/" + name;
}
std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
const std::string kA3 = "a3mega-h100-2x8-all_reduce.txt";
const std::string kRccl = "rccl-mi300x-1x8-all_reduce.txt";

// The lines of a text, with f applied to each (returning "" drops the line).
template <class F>
std::string edit_lines(const std::string& text, F f) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line)) {
    std::string e = f(line);
    if (!e.empty()) out += e + "\n";
  }
  return out;
}

TEST(NcclTests, RealTwoNodeH100Log) {
  auto logs = read_nccl_tests(data(kA3));
  ASSERT_TRUE(logs.ok()) << logs.error().message;
  ASSERT_EQ(logs->size(), 1u);
  const NcclTestsLog& l = logs->front();
  EXPECT_EQ(l.collective, Collective::all_reduce);
  EXPECT_EQ(l.program, "all_reduce_perf");
  EXPECT_EQ(l.ranks, 16);  // 16 Rank lines
  EXPECT_EQ(l.nodes, 2);   // ztan-mig-235z, ztan-mig-gq73
  ASSERT_EQ(l.rows.size(), 31u);
  const auto& first = l.rows.front();
  EXPECT_EQ(first.bytes, 8);
  EXPECT_DOUBLE_EQ(first.oop_seconds, 135.8e-6);
  EXPECT_DOUBLE_EQ(first.ip_seconds, 123.5e-6);
  const auto& last = l.rows.back();
  EXPECT_EQ(last.bytes, 8589934592.0);
  EXPECT_DOUBLE_EQ(last.oop_seconds, 47535e-6);
  EXPECT_DOUBLE_EQ(last.oop_algbw, 180.71e9);
  EXPECT_DOUBLE_EQ(last.oop_busbw, 338.82e9);
  EXPECT_DOUBLE_EQ(last.ip_busbw, 337.35e9);
  ASSERT_TRUE(l.avg_busbw.has_value());
  EXPECT_DOUBLE_EQ(*l.avg_busbw, 70.742e9);
  // Every row: busbw = algbw x 2(n-1)/n as nccl-tests prints them (each rounded to 0.01).
  for (const auto& r : l.rows)
    EXPECT_NEAR(r.oop_busbw, r.oop_algbw * 2 * 15 / 16, 0.02e9) << "line " << r.line;
}

// A log saved from a launcher that tags each line (Open MPI's mpirun --tag-output, in its 4.x
// and 5.x forms, Slurm's srun --label, MPICH's -prepend-rank) reads as the untagged log: the
// same ranks, nodes and rows. Such logs were refused (found by probing, 2026-12-02).
TEST(NcclTests, LauncherTagsAreRead) {
  const std::string text = slurp(data(kA3));
  auto plain = parse_nccl_tests(text, "a.txt");
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  for (const std::string tag : {"[1,0]<stdout>:", "[1,0]<stdout>: ", "0: ", " 0: ", "[0] "}) {
    SCOPED_TRACE("'" + tag + "'");
    const std::string tagged = edit_lines(text, [&](const std::string& l) { return tag + l; });
    EXPECT_TRUE(looks_like_nccl_tests(tagged));
    auto logs = parse_nccl_tests(tagged, "a.txt");
    ASSERT_TRUE(logs.ok()) << logs.error().message;
    ASSERT_EQ(logs->size(), 1u);
    EXPECT_EQ(logs->front().ranks, plain->front().ranks);
    EXPECT_EQ(logs->front().nodes, plain->front().nodes);
    ASSERT_EQ(logs->front().rows.size(), plain->front().rows.size());
    for (std::size_t i = 0; i < plain->front().rows.size(); ++i) {
      EXPECT_EQ(logs->front().rows[i].bytes, plain->front().rows[i].bytes);
      EXPECT_EQ(logs->front().rows[i].oop_seconds, plain->front().rows[i].oop_seconds);
      EXPECT_EQ(logs->front().rows[i].ip_busbw, plain->front().rows[i].ip_busbw);
    }
  }
  // Lines from other ranks (stderr warnings) between the tagged rows are other lines, as
  // untagged.
  const std::string mixed = edit_lines(text, [](const std::string& l) {
    return "[1,0]<stdout>:" + l + "\n[1,3]<stderr>:NCCL WARN something on rank 3";
  });
  auto logs = parse_nccl_tests(mixed, "a.txt");
  ASSERT_TRUE(logs.ok()) << logs.error().message;
  EXPECT_EQ(logs->front().rows.size(), plain->front().rows.size());
}

// The ranks are counted from the Rank lines, each rank once: a line given twice made 17 ranks
// of 16 and a bus factor to match (found by probing, 2026-12-02).
TEST(NcclTests, ARankLineGivenTwiceIsRefused) {
  const std::string text = slurp(data(kA3));
  const std::string line =
      "#  Rank  1 Group  0 Pid   6900 on ztan-mig-235z device  1 [0000:05:00] NVIDIA H100 80GB "
      "HBM3\n";
  const std::size_t at = text.find(line);
  ASSERT_NE(at, std::string::npos);
  const std::size_t line_no = static_cast<std::size_t>(
      std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n') + 1);
  auto logs = parse_nccl_tests(text.substr(0, at) + line + text.substr(at), "dup.txt");
  ASSERT_FALSE(logs.ok());
  EXPECT_EQ(logs.error().message,
            fmt::format("dup.txt:{}: expected each rank's line once, got Rank 1 again (line {})",
                        line_no + 1, line_no));
}

TEST(NcclTests, RealRcclLogOneNodeEightGpusOneProcess) {
  auto logs = read_nccl_tests(data(kRccl));
  ASSERT_TRUE(logs.ok()) << logs.error().message;
  ASSERT_EQ(logs->size(), 1u);
  const NcclTestsLog& l = logs->front();
  EXPECT_EQ(l.collective, Collective::all_reduce);
  EXPECT_EQ(l.ranks, 8);  // -g 8: eight Rank lines of one process
  EXPECT_EQ(l.nodes, 1);
  ASSERT_EQ(l.rows.size(), 25u);
  EXPECT_EQ(l.rows.front().bytes, 8);
  EXPECT_DOUBLE_EQ(l.rows.front().oop_seconds, 45.92e-6);
  EXPECT_EQ(l.rows.back().bytes, 134217728.0);
  EXPECT_DOUBLE_EQ(l.rows.back().oop_seconds, 801.4e-6);
  EXPECT_DOUBLE_EQ(l.rows.back().oop_busbw, 293.07e9);
  EXPECT_DOUBLE_EQ(l.rows.back().ip_seconds, 811.1e-6);
  const auto m = to_measured(*logs);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].group, "intra-node");
  EXPECT_EQ(m[0].nodes, 1);
  EXPECT_EQ(m[0].samples.size(), 25u);
}

TEST(NcclTests, ConcatenatedLogsAreReadInOrder) {
  const std::string both = slurp(data(kA3)) + "\n" + slurp(data(kRccl));
  auto logs = parse_nccl_tests(both, "both");
  ASSERT_TRUE(logs.ok()) << logs.error().message;
  ASSERT_EQ(logs->size(), 2u);
  EXPECT_EQ((*logs)[0].nodes, 2);
  EXPECT_EQ((*logs)[0].rows.size(), 31u);
  EXPECT_EQ((*logs)[1].nodes, 1);
  EXPECT_EQ((*logs)[1].rows.size(), 25u);
  EXPECT_GT((*logs)[1].first_line, (*logs)[0].rows.back().line);
}

// nccl-tests -d all: every size once per datatype in one table. The log keeps the rows of the
// type gradients are reduced in (bfloat16 here) and a note names the others; before, all of
// them went into one curve (three points at every size).
TEST(NcclTests, SeveralDatatypesKeepOneWithANote) {
  const std::string log = slurp(data(kA3));
  std::string int8_rows, bf16_rows;
  edit_lines(log, [&](const std::string& line) {
    if (line.find("     float     sum") == std::string::npos) return std::string();
    std::string b = line;
    b.replace(b.find("     float"), 10, "  bfloat16");
    bf16_rows += b + "\n";
    std::string i = line;
    i.replace(i.find("     float"), 10, "      int8");
    int8_rows += i + "\n";
    return std::string();
  });
  // the rows of float, then int8, then bfloat16, in one table as -d all prints them
  const std::size_t end = log.find("# Out of bounds");
  ASSERT_NE(end, std::string::npos);
  const std::string all = log.substr(0, end) + int8_rows + bf16_rows + log.substr(end);
  auto logs = parse_nccl_tests(all, "all.txt");
  ASSERT_TRUE(logs.ok()) << logs.error().message;
  ASSERT_EQ(logs->size(), 1u);
  const NcclTestsLog& l = (*logs)[0];
  EXPECT_EQ(l.rows.size(), 31u);
  for (const auto& r : l.rows) EXPECT_EQ(r.type, "bfloat16");
  ASSERT_EQ(l.notes.size(), 1u);
  EXPECT_EQ(l.notes[0],
            "all.txt:" + std::to_string(l.first_line) +
                ": 93 rows of 3 datatypes; fitted the 31 bfloat16 rows, left out float, int8 (62 "
                "rows)");
  // and they reach fit's input
  const auto measured = to_measured(*logs);
  ASSERT_EQ(measured.size(), 1u);
  EXPECT_EQ(measured[0].notes, l.notes);
  // one datatype: no note
  auto one = parse_nccl_tests(log, "one.txt");
  ASSERT_TRUE(one.ok());
  EXPECT_TRUE((*one)[0].notes.empty());
}

TEST(NcclTests, CollectiveFromProgramColumnsOrFlag) {
  // Without the command line, the columns (redop sum, root -1) and busbw/algbw = 2(n-1)/n say
  // all_reduce.
  const std::string bare = edit_lines(slurp(data(kA3)), [](const std::string& l) {
    return l.find("all_reduce_perf") != std::string::npos ? std::string() : l;
  });
  auto inferred = parse_nccl_tests(bare, "bare");
  ASSERT_TRUE(inferred.ok()) << inferred.error().message;
  EXPECT_EQ(inferred->front().collective, Collective::all_reduce);
  EXPECT_EQ(inferred->front().program, "");
  // A reduce op of none and no root do not decide (all_gather or alltoall): an error that asks
  // for --collective, unless the flag gives it.
  const std::string none = edit_lines(bare, [](std::string l) {
    const auto at = l.find("     sum ");
    if (at != std::string::npos) l.replace(at, 9, "    none ");
    return l;
  });
  auto ambiguous = parse_nccl_tests(none, "none.txt");
  ASSERT_FALSE(ambiguous.ok());
  EXPECT_NE(ambiguous.error().message.find("--collective"), std::string::npos);
  EXPECT_EQ(ambiguous.error().message.rfind("none.txt:", 0), 0u);
  // An all-gather's busbw is algbw x (n-1)/n, half an all-reduce's: the rows made so.
  const std::string gathered = edit_lines(none, [](const std::string& l) {
    std::istringstream in(l);
    std::vector<std::string> f;
    for (std::string w; in >> w;) f.push_back(w);
    if (f.size() != 13 || f[0].find_first_not_of("0123456789") != std::string::npos) return l;
    for (std::size_t k : {7u, 11u}) f[k] = fmt::format("{:.2f}", std::stod(f[k]) / 2);
    return fmt::format("{}", fmt::join(f, "  "));
  });
  auto given = parse_nccl_tests(gathered, "none.txt", Collective::all_gather);
  ASSERT_TRUE(given.ok()) << given.error().message;
  EXPECT_EQ(given->front().collective, Collective::all_gather);
  // The flag naming another collective than the rows' figures is refused (checked since
  // 2026-12-02: busbw / algbw is the bus factor of the collective and the ranks).
  auto wrong = parse_nccl_tests(none, "none.txt", Collective::all_gather);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().message.find("ranks: expected busbw / algbw = 0.9375, the all_gather "
                                       "bus factor of the 16 ranks the log lists (Rank lines)"),
            std::string::npos)
      << wrong.error().message;
  // The program name wins over the flag; "reduce_perf" is not read inside "all_reduce_perf".
  auto named = parse_nccl_tests(slurp(data(kA3)), "a3", Collective::reduce);
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named->front().collective, Collective::all_reduce);
  auto gather = parse_nccl_tests("$ ./build/all_gather_perf -b 8 -e 128M\n" + gathered, "g");
  ASSERT_TRUE(gather.ok()) << gather.error().message;
  EXPECT_EQ(gather->front().collective, Collective::all_gather);
}

// Rank lines cut from a log (3 of 32 kept) or all left out gave that many ranks and busbw fits
// to match (found by probing, 2026-12-02): busbw / algbw, nccl-tests' bus factor of the ranks,
// says so.
TEST(NcclTests, RankLinesCutAreRefused) {
  const std::string log = slurp(data(kA3));
  int kept = 0;
  const std::string cut = edit_lines(log, [&](const std::string& l) {
    if (l.find("#  Rank") == std::string::npos) return l;
    return kept++ < 3 ? l : std::string();
  });
  auto r = parse_nccl_tests(cut, "cut.txt");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("the all_reduce bus factor of the 3 ranks the log lists (Rank "
                                   "lines), got 1.875"),
            std::string::npos)
      << r.error().message;
  auto whole = parse_nccl_tests(log, "a3.txt");
  ASSERT_TRUE(whole.ok()) << whole.error().message;
  EXPECT_EQ(whole->front().ranks, 16);
}

// Older nccl-tests builds print no redop and root columns and call #wrong "error".
TEST(NcclTests, ColumnsWithoutRedopAndRoot) {
  const std::string old = edit_lines(slurp(data(kA3)), [](std::string l) {
    for (const char* drop : {"   redop    root", "     sum      -1"}) {
      const auto at = l.find(drop);
      if (at != std::string::npos) l.erase(at, std::string(drop).size());
    }
    for (auto at = l.find("#wrong"); at != std::string::npos; at = l.find("#wrong"))
      l.replace(at, 6, " error");
    return l;
  });
  ASSERT_EQ(old.find("redop"), std::string::npos);
  auto logs = parse_nccl_tests(old, "old");
  ASSERT_TRUE(logs.ok()) << logs.error().message;
  ASSERT_EQ(logs->front().rows.size(), 31u);
  EXPECT_DOUBLE_EQ(logs->front().rows.back().oop_busbw, 338.82e9);
  EXPECT_DOUBLE_EQ(logs->front().rows.back().ip_busbw, 337.35e9);
}

TEST(NcclTests, InPlaceOnlyTable) {
  // Keep the in-place group alone: label line, header and rows cut after the first 4 fields.
  const std::string text = edit_lines(slurp(data(kRccl)), [](std::string l) {
    if (l.find("out-of-place") != std::string::npos) return std::string("#   in-place");
    if (l.find("size         count") != std::string::npos || (!l.empty() && l[0] == ' ')) {
      std::istringstream in(l);
      std::vector<std::string> f{std::istream_iterator<std::string>(in), {}};
      const bool header = f[0] == "#";
      std::string out = header ? "#" : "";
      const std::size_t base = header ? 1 : 0;
      for (std::size_t i = base; i < f.size(); ++i)
        if (i - base < 5 || i - base >= 9) out += " " + f[i];
      return out;
    }
    return l;
  });
  auto logs = parse_nccl_tests(text, "ip");
  ASSERT_TRUE(logs.ok()) << logs.error().message;
  const auto& last = logs->front().rows.back();
  EXPECT_FALSE(last.has_out_of_place);
  EXPECT_TRUE(last.has_in_place);
  EXPECT_DOUBLE_EQ(last.ip_seconds, 811.1e-6);
  // The measured samples fall back to the in-place times.
  EXPECT_DOUBLE_EQ(to_measured(*logs)[0].samples.back().seconds, 811.1e-6);
}

TEST(NcclTests, MalformedRowsNameTheLine) {
  const std::string text = slurp(data(kRccl));
  // Line 35 of the file is the 1 MiB row: truncate it after the out-of-place time.
  std::istringstream in(text);
  std::string line, cut;
  int n = 0;
  while (std::getline(in, line)) {
    if (++n == 35) {
      ASSERT_EQ(line.find("1048576"), 5u);
      line = line.substr(0, line.find("65.38") + 5);
    }
    cut += line + "\n";
  }
  auto r = parse_nccl_tests(cut, "cut.txt");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message.rfind("cut.txt:35: row: expected 13 columns", 0), 0u)
      << r.error().message;
  EXPECT_EQ(r.error().message.find('\n'), std::string::npos);
  // A field that is not a number.
  std::string bad = text;
  bad.replace(bad.find("801.4"), 5, "80x.4");
  auto b = parse_nccl_tests(bad, "bad.txt");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message.find("bad.txt:42: time: expected a positive number"),
            std::string::npos)
      << b.error().message;
  // Found by probing, 2026-11-30: rows nccl-tests marked wrong were fitted, and a row whose size
  // is negative was skipped without a word.
  const std::string a3 = slurp(data(kA3));
  const std::string row =
      "     1048576        262144     float     sum      -1    203.2    5.16    9.68      0    "
      "207.2    5.06    9.49      0";
  ASSERT_NE(a3.find(row), std::string::npos);
  std::string wrong = a3;
  wrong.replace(wrong.find(row), row.size(),
                "     1048576        262144     float     sum      -1    203.2    5.16    9.68     "
                "12    207.2    5.06    9.49      0");
  auto w = parse_nccl_tests(wrong, "wrong.txt");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().message.find("wrong.txt:49: #wrong: expected 0 (nccl-tests checked the "
                                   "results and found them wrong), got '12'"),
            std::string::npos)
      << w.error().message;
  std::string negative = a3;
  negative.replace(negative.find(row), 12, "    -1048576");
  auto neg = parse_nccl_tests(negative, "neg.txt");
  ASSERT_FALSE(neg.ok());
  EXPECT_EQ(neg.error().message,
            "neg.txt:49: size: expected a byte count from 0 to 1e15, got '-1048576'");
  // No table at all.
  EXPECT_FALSE(parse_nccl_tests("hello\nworld\n", "x").ok());
  EXPECT_FALSE(looks_like_nccl_tests("{\"results\": []}"));
  EXPECT_TRUE(looks_like_nccl_tests(text));
}

TEST(NcclTests, RowAndLogCountsAreBounded) {
  std::string text = "# nThread 1 nGpus 2\n# size count type redop root time algbw busbw #wrong\n";
  for (std::size_t i = 0; i <= kMaxNcclTestsRows; ++i)
    text += std::to_string(i + 1) + " 1 float sum -1 1000.0 0.0 0.0 0\n";
  auto r = parse_nccl_tests(text, "many", Collective::all_reduce);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("at most 4096 rows"), std::string::npos) << r.error().message;
}

// A row whose bandwidth columns contradict its size and time is refused, naming the line
// (found by probing, 2026-11-30: 8 GiB in 0.0001 us was fitted, and failed only when the
// profile was written, with an unrelated message). The shipped logs' rows all agree.
TEST(NcclTests, BandwidthColumnsAgreeWithSizeAndTime) {
  const std::string head =
      "# nThread 1 nGpus 2\n# size count type redop root time algbw busbw #wrong\n"
      "1048576 262144 float sum -1 100.0 10.49 10.49 0\n";
  ASSERT_TRUE(parse_nccl_tests(head, "ok", Collective::all_reduce).ok());
  auto fast = parse_nccl_tests(head + "8589934592 2147483648 float sum -1 0.0001 180.71 338.82 0\n",
                               "fast", Collective::all_reduce);
  ASSERT_FALSE(fast.ok());
  EXPECT_NE(fast.error().message.find("fast:4: algbw: expected size / time = 85899345920.00 GB/s"),
            std::string::npos)
      << fast.error().message;
  auto bus = parse_nccl_tests(head + "2097152 524288 float sum -1 100.0 20.97 50.00 0\n", "bus",
                              Collective::all_reduce);
  ASSERT_FALSE(bus.ok());
  EXPECT_NE(bus.error().message.find("bus:4: busbw: expected at most twice algbw"),
            std::string::npos)
      << bus.error().message;
  for (const std::string& log : {kA3, kRccl}) {
    auto ok = parse_nccl_tests(slurp(data(log)), log, std::nullopt);
    EXPECT_TRUE(ok.ok()) << ok.error().message;
  }
}

// `commscope fit` of the real log writes a profile whose curve holds every size's busbw.
TEST(NcclTests, FitWritesTheCurves) {
  const fs::path dir = fs::temp_directory_path() / ("cs_fit_nccl_" + std::to_string(::getpid()));
  const std::string out = (dir / "p.json").string();
  const std::string bin = COMMSCOPE_BIN;
  auto r = testing::run_shell(bin + " fit " + data(kA3) + " " + data(kRccl) + " -o " + out);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("inter-node"), std::string::npos);
  auto p = load_network(out);
  ASSERT_TRUE(p.ok()) << p.error().message;
  ASSERT_EQ(p->curves.size(), 2u);
  const BusBwCurve* inter = nullptr;
  for (const auto& c : p->curves)
    if (c.scope == CurveScope::inter_node) inter = &c;
  ASSERT_NE(inter, nullptr);
  EXPECT_EQ(inter->ranks, 16);
  EXPECT_EQ(inter->nodes, 2);
  ASSERT_EQ(inter->points.size(), 31u);
  EXPECT_NEAR(inter->points.back().busbw.value(), 338.82e9, 0.01e9);
  // predict --network uses the curves and says so per collective: TP 8 inside each node (the
  // intra-node rccl curve) and DP 2 across the two nodes (the inter-node curve).
  const std::string predict =
      bin + " predict --model llama2-13b --system dgx-h100 --gpus 16 --tp 8 --network ";
  auto js = testing::run_shell(predict + out + " --format json");
  ASSERT_EQ(js.status, 0) << js.err;
  const auto row = nlohmann::json::parse(js.out)["predictions"][0];
  EXPECT_EQ(row["cost_source"], nlohmann::json({{"all_reduce", "curve"}})) << row["cost_source"];
  auto text = testing::run_shell(predict + out);
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("collective costs: all_reduce from measured curves"), std::string::npos)
      << text.out;
  // Without curves: the model, and no footnote.
  auto plain = testing::run_shell(predict + "ib-ndr-400 --format json");
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_EQ(nlohmann::json::parse(plain.out)["predictions"][0]["cost_source"],
            nlohmann::json({{"all_reduce", "model"}}));
  EXPECT_EQ(testing::run_shell(predict + "ib-ndr-400").out.find("collective costs"),
            std::string::npos);
  // Neither format, and a bad --format: one line, status 2, nothing written.
  fs::remove_all(dir);
  auto neither = testing::run_shell(bin + " fit " + data("README.md") + " -o " + out);
  EXPECT_EQ(neither.status, 2);
  EXPECT_NE(neither.err.find("expected commscope-bench JSON, nccl-tests output (a '# nThread ... "
                             "nGpus' header"),
            std::string::npos)
      << neither.err;
  auto fmt = testing::run_shell(bin + " fit --format csv " + data(kA3) + " -o " + out);
  EXPECT_EQ(fmt.status, 2);
  EXPECT_NE(fmt.err.find("--format: expected auto, bench-json, nccl-tests or osu, got 'csv'"),
            std::string::npos)
      << fmt.err;
  EXPECT_FALSE(fs::exists(out));
  // A truncated row: one line naming file and line, status 2, nothing written.
  fs::create_directories(dir);
  const std::string cut = (dir / "cut.txt").string();
  std::ofstream(cut) << "# nThread 1 nGpus 2\n#  size count type redop root time algbw busbw "
                        "#wrong\n   8  2  float  sum  -1  5.0\n";
  auto trunc = testing::run_shell(bin + " fit " + cut + " -o " + out);
  EXPECT_EQ(trunc.status, 2);
  EXPECT_NE(trunc.err.find(cut + ":3: row: expected 9 columns"), std::string::npos) << trunc.err;
  EXPECT_EQ(std::count(trunc.err.begin(), trunc.err.end(), '\n'), 1);
  EXPECT_FALSE(fs::exists(out));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace commscope
