// The OSU Micro-Benchmarks reader on the logs of tests/data/osu/ (measured with OMB 7.4, its
// README.md): every row checked against the file read independently here, the sizes and bus
// bandwidths against nccl-tests' definitions (nccl-tests doc/PERFORMANCE.md: busbw = algbw x
// 2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all, 1 for
// broadcast and reduce), OMB's other header spellings, malformed logs, and `commscope fit`.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "commscope/calib/alpha_beta.h"
#include "commscope/calib/nccl_tests.h"
#include "commscope/calib/osu.h"
#include "commscope/spec/system.h"
#include "test_util.h"

namespace commscope {
namespace {

namespace fs = std::filesystem;

std::string data(const std::string& name) {
  return std::string(COMMSCOPE_SOURCE_DIR) + "/tests/data/osu/" + name;
}
std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
const std::string kColl = "omb-7.4-openmpi-1x4-collectives.txt";
const std::string kP2p = "omb-7.4-openmpi-1x2-pt2pt.txt";

// The file's numeric rows read here without the reader: (size, first value) per log, a log
// starting at each "# OSU" line.
std::vector<std::vector<std::pair<double, double>>> rows_of(const std::string& text) {
  std::vector<std::vector<std::pair<double, double>>> logs;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# OSU", 0) == 0) logs.emplace_back();
    if (line.empty() || !std::isdigit(static_cast<unsigned char>(line[0]))) continue;
    std::istringstream f(line);
    double size = 0, value = 0;
    f >> size >> value;
    logs.back().emplace_back(size, value);
  }
  return logs;
}

TEST(Osu, RealCollectiveLogsRowByRow) {
  const std::string text = slurp(data(kColl));
  ASSERT_TRUE(looks_like_osu(text));
  EXPECT_FALSE(looks_like_nccl_tests(text));
  std::vector<std::string> notes;
  auto logs = parse_osu(text, kColl, &notes);
  ASSERT_TRUE(logs.ok()) << logs.error().message;
  // osu_gather, the seventh log, is skipped with a note naming its line.
  ASSERT_EQ(logs->size(), 6u);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find(kColl + ":164: OSU MPI Gather Latency Test v7.4: skipped"),
            std::string::npos)
      << notes[0];
  const Collective want[] = {Collective::all_reduce,     Collective::all_gather,
                             Collective::reduce_scatter, Collective::all_to_all,
                             Collective::broadcast,      Collective::reduce};
  const auto independent = rows_of(text);
  ASSERT_EQ(independent.size(), 7u);
  for (std::size_t i = 0; i < logs->size(); ++i) {
    const OsuLog& l = (*logs)[i];
    SCOPED_TRACE(l.benchmark);
    EXPECT_EQ(l.collective, want[i]);
    EXPECT_FALSE(l.bandwidth);
    EXPECT_EQ(l.datatype, "MPI_CHAR");
    ASSERT_EQ(l.rows.size(), 23u);  // 1 B to 4 MiB
    ASSERT_EQ(l.rows.size(), independent[i].size());
    for (std::size_t k = 0; k < l.rows.size(); ++k) {
      EXPECT_EQ(l.rows[k].bytes, independent[i][k].first);
      EXPECT_EQ(l.rows[k].value, independent[i][k].second);
    }
    EXPECT_EQ(l.rows.front().bytes, 1);
    EXPECT_EQ(l.rows.back().bytes, 4194304);
  }
  EXPECT_EQ(logs->front().benchmark, "OSU MPI Allreduce Latency Test v7.4");
  EXPECT_EQ(logs->front().first_line, 2);
}

// nccl-tests' size and busbw from OMB's: the all-gather and all-to-all block times the ranks,
// the time in seconds, busbw = size x factor / time.
TEST(Osu, MeasuredInNcclTestsTerms) {
  const std::string text = slurp(data(kColl));
  auto logs = parse_osu(text, kColl);
  ASSERT_TRUE(logs.ok());
  const int n = 4;
  auto m = osu_to_measured(*logs, {n, 1}, kColl);
  ASSERT_TRUE(m.ok()) << m.error().message;
  ASSERT_EQ(m->size(), 6u);
  const auto independent = rows_of(text);
  const double block[] = {1, n, 1, n, 1, 1};  // OMB's size is one rank's block for these
  const double factor[] = {
      2.0 * (n - 1) / n, double(n - 1) / n, double(n - 1) / n, double(n - 1) / n, 1, 1};
  for (std::size_t i = 0; i < m->size(); ++i) {
    const MeasuredCollective& c = (*m)[i];
    SCOPED_TRACE(to_string(c.collective));
    EXPECT_EQ(c.ranks, n);
    EXPECT_EQ(c.nodes, 1);
    EXPECT_EQ(c.group, "intra-node");
    ASSERT_EQ(c.samples.size(), 23u);
    for (std::size_t k = 0; k < c.samples.size(); ++k) {
      const auto [size, us] = independent[i][k];
      EXPECT_DOUBLE_EQ(c.samples[k].bytes, size * block[i]);
      EXPECT_DOUBLE_EQ(c.samples[k].seconds, us * 1e-6);
      EXPECT_NEAR(c.samples[k].busbw, size * block[i] * factor[i] / (us * 1e-6),
                  1e-9 * c.samples[k].busbw);
    }
  }
  // Without the ranks the collectives are refused; the nodes unknown are the world group.
  auto none = osu_to_measured(*logs, {}, kColl);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().message,
            kColl +
                ":2: OSU MPI Allreduce Latency Test v7.4: expected --ranks N, the processes of "
                "the run (OSU does not print them; mpirun -np N), got none");
  auto world = osu_to_measured(*logs, {8, 0}, kColl);
  ASSERT_TRUE(world.ok());
  EXPECT_EQ(world->front().group, "world");
  EXPECT_EQ((*world)[1].samples.back().bytes, 8 * 4194304.0);
}

// osu_latency is one-way microseconds, osu_bw megabytes (1e6 B) per second: both `send` over
// 2 ranks, the bandwidth's time a message's share of the window.
TEST(Osu, PointToPointLatencyAndBandwidth) {
  const std::string text = slurp(data(kP2p));
  auto logs = parse_osu(text, kP2p);
  ASSERT_TRUE(logs.ok()) << logs.error().message;
  ASSERT_EQ(logs->size(), 2u);
  EXPECT_EQ((*logs)[0].collective, Collective::send);
  EXPECT_FALSE((*logs)[0].bandwidth);
  EXPECT_EQ((*logs)[1].collective, Collective::send);
  EXPECT_TRUE((*logs)[1].bandwidth);
  auto m = osu_to_measured(*logs, {}, kP2p);  // no --ranks needed
  ASSERT_TRUE(m.ok()) << m.error().message;
  const auto independent = rows_of(text);
  for (int i : {0, 1}) {
    const auto& c = (*m)[static_cast<std::size_t>(i)];
    EXPECT_EQ(c.ranks, 2);
    ASSERT_EQ(c.samples.size(), independent[static_cast<std::size_t>(i)].size());
    for (std::size_t k = 0; k < c.samples.size(); ++k) {
      const auto [size, v] = independent[static_cast<std::size_t>(i)][k];
      EXPECT_DOUBLE_EQ(c.samples[k].seconds, i == 0 ? v * 1e-6 : size / (v * 1e6));
      EXPECT_DOUBLE_EQ(c.samples[k].bytes, size);
    }
  }
  // The pair spans at most two of the nodes the collective runs did.
  auto across = osu_to_measured(*logs, {16, 4}, kP2p);
  ASSERT_TRUE(across.ok());
  EXPECT_EQ(across->front().nodes, 2);
  EXPECT_EQ(across->front().group, "inter-node");
  // The largest message's bandwidth as printed comes back from the time.
  const auto& bw = (*m)[1].samples.back();
  EXPECT_NEAR(bw.bytes / bw.seconds / 1e6, independent[1].back().second, 1e-9);
}

// osu_bibw's MB/s count both directions, so a message's time is size / (MB/s / 2); osu_mbw_mr
// with one pair is osu_bw (its message-rate column left out); with two pairs it is skipped with
// a note naming the pairs (their MB/s is shared, not one pair's). On OMB 7.4 logs measured here.
TEST(Osu, BidirectionalAndMultiplePairBandwidth) {
  const std::string name = "omb-7.4-openmpi-1x2-bibw-mbw.txt";
  const std::string text = slurp(data(name));
  std::vector<std::string> notes;
  auto logs = parse_osu(text, name, &notes);
  ASSERT_TRUE(logs.ok()) << logs.error().message;
  ASSERT_EQ(logs->size(), 2u);
  EXPECT_EQ((*logs)[0].benchmark, "OSU MPI Bi-Directional Bandwidth Test v7.4");
  EXPECT_EQ((*logs)[0].streams, 2);
  EXPECT_EQ((*logs)[1].benchmark, "OSU MPI Multiple Bandwidth / Message Rate Test v7.4");
  EXPECT_EQ((*logs)[1].streams, 1);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find(name + ":55: OSU MPI Multiple Bandwidth / Message Rate Test v7.4: "
                                 "skipped: 2 pairs share the links"),
            std::string::npos)
      << notes[0];
  auto m = osu_to_measured(*logs, {}, name);
  ASSERT_TRUE(m.ok()) << m.error().message;
  const auto independent = rows_of(text);  // the three logs, the skipped one last
  ASSERT_EQ(independent.size(), 3u);
  for (int i : {0, 1}) {
    const auto& c = (*m)[static_cast<std::size_t>(i)];
    EXPECT_EQ(c.collective, Collective::send);
    EXPECT_EQ(c.ranks, 2);
    ASSERT_EQ(c.samples.size(), independent[static_cast<std::size_t>(i)].size());
    for (std::size_t k = 0; k < c.samples.size(); ++k) {
      const auto [size, mbs] = independent[static_cast<std::size_t>(i)][k];
      EXPECT_DOUBLE_EQ(c.samples[k].seconds, size / ((i == 0 ? mbs / 2 : mbs) * 1e6));
      EXPECT_DOUBLE_EQ(c.samples[k].busbw, size / c.samples[k].seconds);
    }
  }
  // The pairs line: required before the column header, a whole count.
  const std::string mbw = "# OSU MPI Multiple Bandwidth / Message Rate Test v7.4\n";
  for (auto [t, want] : std::vector<std::pair<std::string, std::string>>{
           {mbw + "# Size  MB/s  Messages/s\n8 1 1\n",
            "x.txt:2: OSU MPI Multiple Bandwidth / Message Rate Test v7.4: expected its "
            "'# [ pairs: N ] ...' line before the column header, got none"},
           {mbw + "# [ pairs: 1.5 ] [ window size: 64 ]\n# Size  MB/s  Messages/s\n8 1 1\n",
            "x.txt:2: OSU MPI Multiple Bandwidth / Message Rate Test v7.4: expected "
            "'[ pairs: N ]' with a whole N >= 1, got '[ pairs: 1.5 ] [ window size: 64 ]'"},
           {mbw + "# [ pairs: 2 ] [ window size: 64 ]\n# Size  MB/s  Messages/s\n8 1 1\n",
            "x.txt: expected OSU Micro-Benchmarks output of"}}) {
    SCOPED_TRACE(t);
    auto bad = parse_osu(t, "x.txt");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find(want), std::string::npos) << bad.error().message;
  }
}

// OMB's other spellings: before 7 (no datatype line, `Latency (us)`), a device family
// (MPI-CUDA, with its buffer line), an xCCL family, the persistent forms, -c's validation column.
TEST(Osu, HeaderSpellingsOfOtherVersionsAndFamilies) {
  const std::string text =
      "# OSU MPI Latency Test v5.6.3\n"
      "# Size          Latency (us)\n"
      "0                       0.20\n"
      "1                       0.25\n"
      "2                       0.26\n"
      "\n"
      "# OSU MPI-CUDA Allreduce Latency Test v7.4\n"
      "# Send Buffer on DEVICE (D) and Receive Buffer on DEVICE (D)\n"
      "# Datatype: MPI_FLOAT.\n"
      "# Size       Avg Latency(us)        Validation\n"
      "4                      29.36              Pass\n"
      "8                      24.90              Pass\n"
      "# OSU NCCL Allgather Latency Test v7.4\n"
      "# Size       Avg Latency(us)\n"
      "4                      12.00\n"
      "# OSU MPI Reduce_scatter_block Latency Test v7.4\n"
      "# Size       Avg Latency(us)\n"
      "1024                   30.00\n"
      "# OSU MPI Bandwidth Persistent Test v7.4\n"
      "# Size      Bandwidth (MB/s)\n"
      "1024                 100.00\n"
      "# OSU MPI Non-blocking Allreduce Latency Test v7.4\n"
      "# Overall = Coll. Init + Compute + MPI_Test + MPI_Wait\n"
      "# Size           Overall(us)       Compute(us)    Pure Comm.(us)        Overlap(%)\n"
      "4                      50.00             20.00             30.00             10.00\n";
  std::vector<std::string> notes;
  auto logs = parse_osu(text, "v.txt", &notes);
  ASSERT_TRUE(logs.ok()) << logs.error().message;
  ASSERT_EQ(logs->size(), 5u);
  EXPECT_EQ((*logs)[0].collective, Collective::send);
  EXPECT_EQ((*logs)[0].rows.size(), 3u);  // size 0 read; osu_to_measured leaves it out
  EXPECT_EQ((*logs)[1].collective, Collective::all_reduce);
  EXPECT_EQ((*logs)[1].datatype, "MPI_FLOAT");
  EXPECT_EQ((*logs)[1].rows[1].value, 24.90);
  EXPECT_EQ((*logs)[2].collective, Collective::all_gather);
  EXPECT_EQ((*logs)[3].collective, Collective::reduce_scatter);
  EXPECT_TRUE((*logs)[4].bandwidth);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("v.txt:22: OSU MPI Non-blocking Allreduce Latency Test v7.4: skipped"),
            std::string::npos);
  auto m = osu_to_measured(*logs, {2, 1}, "v.txt");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)[0].samples.size(), 2u);
}

TEST(Osu, MalformedLogsNameTheLine) {
  const std::string head = "# OSU MPI Allreduce Latency Test v7.4\n# Size       Avg Latency(us)\n";
  for (auto [text, want] : std::vector<std::pair<std::string, std::string>>{
           {head + "4096\n",
            "x.txt:3: expected a row 'size us' with a whole size and a positive "
            "value, got '4096'"},
           {head + "4096  abc\n", "x.txt:3: expected a row"},
           {head + "4.5  10.0\n", "x.txt:3: expected a row"},
           {head + "8  -1.0\n", "x.txt:3: expected a row"},
           {head + "8  10.0  Fail\n",
            "x.txt:3: OSU MPI Allreduce Latency Test v7.4: the row of "
            "size 8 failed OSU's validation (-c)"},
           {head,
            "x.txt:1: OSU MPI Allreduce Latency Test v7.4: expected rows of size and "
            "latency after its header, got none"},
           {"# OSU MPI Allreduce Latency Test v7.4\n8  10.0\n",
            "x.txt:2: OSU MPI Allreduce Latency Test v7.4: expected its '# Size ...' column "
            "header before the rows"},
           {"# OSU MPI Bandwidth Test v7.4\n# Size       Avg Latency(us)\n8 1\n",
            "x.txt:2: column header: expected 'Size' and 'Bandwidth (MB/s)' or 'MB/s'"},
           {"# OSU MPI Gather Latency Test v7.4\n# Size       Avg Latency(us)\n8 1\n",
            "x.txt: expected OSU Micro-Benchmarks output of osu_allreduce"},
           {"", "x.txt: expected OSU Micro-Benchmarks output"},
           // a row cut short among rows of -f's five columns (it was read as 28 us and bent the
           // curve), and a size past nccl-tests' bound
           {"# OSU MPI Allreduce Latency Test v7.4\n# Size  Avg Latency(us)  Min Latency(us)  "
            "Max Latency(us)  Iterations\n8  10.0  9.0  11.0  100\n16  28\n",
            "x.txt:4: expected 5 columns, as the log's first row (line 3) has, got 2: '16  28'"},
           {head + "4194304000000000000000  10.0\n",
            "x.txt:3: size: expected a byte count from 0 to 1e15, got '4194304000000000000000'"}}) {
    SCOPED_TRACE(text);
    auto logs = parse_osu(text, "x.txt");
    ASSERT_FALSE(logs.ok());
    EXPECT_NE(logs.error().message.find(want), std::string::npos) << logs.error().message;
  }
  // Bounded: at most kMaxNcclTestsRows rows in one log.
  std::string big = head;
  for (std::size_t i = 0; i <= kMaxNcclTestsRows; ++i) big += std::to_string(i + 1) + " 1.0\n";
  auto bounded = parse_osu(big, "x.txt");
  ASSERT_FALSE(bounded.ok());
  EXPECT_NE(bounded.error().message.find("expected at most"), std::string::npos);
}

// stderr merged into the log: an MPI banner before the column header and a UCX warning between
// the rows are no rows, skipped with a note (they were refused; found by probing, 2026-12-02).
// A line that starts with a number is still a row, and checked as one.
TEST(Osu, MessagesBetweenTheRowsAreSkipped) {
  const std::string text =
      "# OSU MPI Allreduce Latency Test v7.4\n"
      "--------------------------------------------------------------------------\n"
      "WARNING: There was an error initializing an OpenFabrics device.\n"
      "--------------------------------------------------------------------------\n"
      "# Size       Avg Latency(us)\n"
      "8                       1.50\n"
      "[1701234567.123456] [node1:1234:0]    ucp_context.c:1234 UCX  WARN  unused env var\n"
      "16                      1.60\n";
  std::vector<std::string> notes;
  auto logs = parse_osu(text, "x.txt", &notes);
  ASSERT_TRUE(logs.ok()) << logs.error().message;
  ASSERT_EQ(logs->size(), 1u);
  ASSERT_EQ(logs->front().rows.size(), 2u);
  EXPECT_DOUBLE_EQ(logs->front().rows[1].bytes, 16);
  EXPECT_DOUBLE_EQ(logs->front().rows[1].value, 1.6);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0],
            "x.txt: 4 line(s) that start with no number skipped as no rows (the first at x.txt:2: "
            "an MPI or UCX message in the log?)");
}

// A log cut anywhere (a run killed mid-sweep, a partial copy) parses or is refused with the
// file and line; no prefix crashes or is read as more rows than it holds.
TEST(Osu, EveryPrefixOfARealLogIsReadOrRefused) {
  for (const std::string& name : {kColl, std::string("omb-7.4-openmpi-1x2-bibw-mbw.txt")}) {
    SCOPED_TRACE(name);
    const std::string text = slurp(data(name));
    const std::size_t total = rows_of(text).size();
    for (std::size_t cut = 0; cut <= text.size(); cut += 5) {
      const std::string prefix = text.substr(0, cut);
      auto logs = parse_osu(prefix, "cut.txt");
      if (!logs.ok()) {
        EXPECT_EQ(logs.error().message.rfind("cut.txt", 0), 0u) << logs.error().message;
        continue;
      }
      std::size_t rows = 0;
      for (const auto& l : *logs) rows += l.rows.size();
      std::size_t independent = 0;
      for (const auto& l : rows_of(prefix)) independent += l.size();
      EXPECT_LE(logs->size(), total);
      // the gather log's rows are not read; a last row cut inside its value is read as printed
      EXPECT_LE(rows, independent) << cut;
    }
  }
}

// `commscope fit` of the logs: the format found by content, the ranks and nodes from the flags,
// the curves written for predict --network with the log's bus bandwidth at each size; the errors
// are one line, status 2, nothing written.
TEST(Osu, FitReadsTheLogsAndWritesTheCurves) {
  const fs::path dir = fs::temp_directory_path() / ("cs_fit_osu_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string out = (dir / "p.json").string();
  const std::string bin = COMMSCOPE_BIN;
  auto r = testing::run_shell(bin + " fit " + data(kColl) + " " + data(kP2p) +
                              " --ranks 4 --nodes 1 -o " + out);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("OSU MPI Gather Latency Test v7.4: skipped"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("intra-node  all_to_all"), std::string::npos) << r.out;
  auto p = load_network(out);
  ASSERT_TRUE(p.ok()) << p.error().message;
  // six collectives over 4 ranks and send over 2, all on one node (both send logs in one curve)
  ASSERT_EQ(p->curves.size(), 7u);
  const auto independent = rows_of(slurp(data(kColl)));
  for (const auto& c : p->curves) {
    SCOPED_TRACE(to_string(c.collective));
    EXPECT_EQ(c.scope, CurveScope::intra_node);
    EXPECT_EQ(c.nodes, 1);
    if (c.collective != Collective::all_gather) continue;
    EXPECT_EQ(c.ranks, 4);
    ASSERT_EQ(c.points.size(), 23u);
    const auto [size, us] = independent[1].back();
    EXPECT_EQ(c.points.back().bytes, 4 * size);
    EXPECT_NEAR(c.points.back().busbw.value(), 4 * size * 0.75 / (us * 1e-6), 1e3);
  }
  // --format osu, and auto on the point-to-point log alone (no --ranks needed).
  auto p2p = testing::run_shell(bin + " fit --format osu " + data(kP2p));
  ASSERT_EQ(p2p.status, 0) << p2p.err;
  EXPECT_NE(p2p.out.find("send"), std::string::npos);
  fs::remove(out);
  for (auto [args, want] : std::vector<std::pair<std::string, std::string>>{
           {data(kColl), ":2: OSU MPI Allreduce Latency Test v7.4: expected --ranks N"},
           {data(kColl) + " --ranks 1", "fit: --ranks: expected an integer from 2 to"},
           {data(kColl) + " --ranks 4 --nodes 5",
            "fit: --nodes: expected an integer from 1 to "
            "the ranks (4), got '5'"},
           {"--format osu " + data("README.md"), "expected OSU Micro-Benchmarks output"},
           {data("README.md"), "or OSU Micro-Benchmarks output (a '# OSU ... Test' header)"}}) {
    SCOPED_TRACE(args);
    auto e = testing::run_shell(bin + " fit " + args + " -o " + out);
    EXPECT_EQ(e.status, 2);
    EXPECT_EQ(std::count(e.err.begin(), e.err.end(), '\n'), 1) << e.err;
    EXPECT_NE(e.err.find(want), std::string::npos) << e.err;
    EXPECT_FALSE(fs::exists(out));
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace commscope
