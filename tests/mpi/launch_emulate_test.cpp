// Emulated nodes (network namespaces, veth, bridge, tc tbf) under `commscope bench --emulate`:
// a shaped link delivers its rate, collectives are correct across nodes, and nothing is left
// behind: not after success, not after a rank dies, not after Ctrl-C. Needs root (CI runs as
// root); skipped otherwise, except the checks that need no privileges.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "commscope/launch/emulate.h"
#include "commscope/launch/mpirun.h"
#include "commscope/launch/process.h"
#include "commscope/spec/system.h"
#include "commscope/util/units.h"
#include "test_util.h"

namespace {

using commscope::launch::emulation_leftovers;
using commscope::launch::run_command;

using commscope::testing::Outcome;

Outcome bench(const std::vector<std::string>& args) {
  std::string cmd = std::string("'") + COMMSCOPE_BIN + "' bench";
  for (const auto& a : args) cmd += " '" + a + "'";
  return commscope::testing::run_shell(cmd);
}

// The "cs<pid>" prefix of the nodes a run reported ("#      cs603n0   ...").
std::string prefix_in(const std::string& report) {
  std::smatch m;
  static const std::regex re(R"(\b(cs\d+)n0\b)");
  return std::regex_search(report, m, re) ? m[1].str() : "";
}

// Starts `commscope bench --emulate SPEC --ranks N -- --p2p` (a long run: 100 passes of 4 MiB)
// in the background, its output discarded; returns its pid.
pid_t spawn_long_bench(const char* spec, const char* ranks) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    ::execl(COMMSCOPE_BIN, COMMSCOPE_BIN, "bench", "--emulate", spec, "--ranks", ranks, "--",
            "--p2p", "-b", "4M", "-e", "4M", "-n", "100", nullptr);
    std::_Exit(127);
  }
  return pid;
}

// Waits (up to `seconds`) until the namespace `name` exists.
bool wait_for_namespace(const std::string& name, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (run_command({"ip", "netns", "list"}).output.find(name) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

bool is_root() {
  return ::geteuid() == 0;
}

// The temporary folders /tmp/commscope-emulate-<pid>-* of process `pid`.
std::vector<std::string> emulate_tmp_folders(long pid) {
  std::vector<std::string> out;
  const std::string start = "commscope-emulate-" + std::to_string(pid) + "-";
  for (const auto& e : std::filesystem::directory_iterator("/tmp"))
    if (e.path().filename().string().rfind(start, 0) == 0) out.push_back(e.path().string());
  return out;
}

// The stale cleanup removes the temporary folders of processes that are gone (a SIGKILLed
// run's) and keeps those of live ones; it needs no privileges for that.
TEST(Emulate, StaleTemporaryFoldersOfDeadProcessesAreRemoved) {
  const pid_t dead = ::fork();
  if (dead == 0) std::_Exit(0);
  ASSERT_GT(dead, 0);
  ::waitpid(dead, nullptr, 0);
  const std::filesystem::path gone = "/tmp/commscope-emulate-" + std::to_string(dead) + "-aB3xYz";
  const std::filesystem::path live =
      "/tmp/commscope-emulate-" + std::to_string(::getpid()) + "-aB3xYz";
  std::filesystem::create_directories(gone);
  std::ofstream(gone / "hostfile") << "localhost\n";
  std::filesystem::create_directories(live);
  commscope::launch::remove_stale_emulations();
  EXPECT_FALSE(std::filesystem::exists(gone));
  EXPECT_TRUE(std::filesystem::exists(live));
  std::filesystem::remove_all(live);
  std::filesystem::remove_all(gone);
}

TEST(Emulate, ParsesProfilesAndKeepsTheirRatios) {
  auto tcp = commscope::launch::parse_emulation("tcp-10g");
  auto ipoib = commscope::launch::parse_emulation("ipoib-100g,nodes=2");
  auto rdma = commscope::launch::parse_emulation("rdma-100g");
  ASSERT_TRUE(tcp.ok() && ipoib.ok() && rdma.ok());
  // The presets' achievable rates (data/seeds/protocols.csv), divided by one factor.
  auto gbps = [](const char* name) {
    return commscope::units::to_gbit_per_s(commscope::load_network(name)->achievable);
  };
  EXPECT_DOUBLE_EQ(tcp->full_rate_bps, gbps("tcp-10g") * 1e9);
  EXPECT_DOUBLE_EQ(tcp->shaped_rate_bps,
                   gbps("tcp-10g") * 1e9 / commscope::launch::kEmulationScale);
  EXPECT_DOUBLE_EQ(rdma->shaped_rate_bps / tcp->shaped_rate_bps,
                   gbps("rdma-100g") / gbps("tcp-10g"));
  EXPECT_DOUBLE_EQ(ipoib->shaped_rate_bps / tcp->shaped_rate_bps,
                   gbps("ipoib-100g") / gbps("tcp-10g"));
  EXPECT_EQ(ipoib->nodes, 2);
  auto rate = commscope::launch::parse_emulation("rate=1.5e8,nodes=4");
  ASSERT_TRUE(rate.ok());
  EXPECT_DOUBLE_EQ(rate->shaped_rate_bps, 1.5e8);
  EXPECT_EQ(rate->nodes, 4);
  // The documented range of shaped rates: its ends are accepted.
  EXPECT_TRUE(commscope::launch::parse_emulation("rate=100k").ok());
  EXPECT_TRUE(commscope::launch::parse_emulation("rate=100G,nodes=64").ok());
  for (const char* bad :
       {"", "rate=", "rate=-5M", "rate=10X", "nope-1g", "tcp-10g,nodes=0", "tcp-10g,nodes=x",
        "tcp-10g,speed=1", "rate=1e30", "rate=99k", "rate=100.1G", "rate=1e400", "tcp-10g,nodes=65",
        "tcp-10g,nodes=99999999999999999999"}) {
    auto r = commscope::launch::parse_emulation(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().message.find('\n'), std::string::npos);
    EXPECT_NE(r.error().message.find("--emulate"), std::string::npos) << r.error().message;
  }
}

TEST(Emulate, BadFlagsAreOneLineErrors) {
  Outcome o = bench({"--emulate", "tcp-10g,nodes=3", "--ranks", "2", "--", "--p2p"});
  EXPECT_EQ(o.status, 2);
  if (is_root()) {
    EXPECT_NE(o.err.find("nodes: expected a divisor of the rank count 2, got 3"), std::string::npos)
        << o.err;
  }
  o = bench({"--emulate", "rdma-100g", "--transport", "rdma", "--", "--p2p"});
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("--emulate runs MPI over TCP"), std::string::npos) << o.err;
  o = bench({"--transport", "carrier-pigeon", "--", "--p2p"});
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("--transport: expected tcp, shm or rdma, got 'carrier-pigeon'"),
            std::string::npos)
      << o.err;
  std::error_code ec;
  const bool rdma_here = std::filesystem::directory_iterator("/sys/class/infiniband", ec) !=
                         std::filesystem::directory_iterator();
  if (!rdma_here || ec) {
    o = bench({"--transport", "rdma", "--", "--p2p"});
    EXPECT_EQ(o.status, 2);
    EXPECT_NE(o.err.find("no RDMA device"), std::string::npos) << o.err;
  }
}

TEST(Emulate, TransportsTcpAndShmRunCorrectly) {
  for (const char* t : {"tcp", "shm"}) {
    Outcome o = bench({"--transport", t, "--ranks", "2", "--", "-b", "0", "-e", "12", "-f", "-4",
                       "-n", "1", "-w", "0", "--format", "csv"});
    EXPECT_EQ(o.status, 0) << t << o.err;
  }
}

TEST(Emulate, WithoutPrivilegesOneClearError) {
  if (!is_root() || !commscope::launch::on_path("setpriv"))
    GTEST_SKIP() << "needs root and setpriv";
  Outcome o = commscope::testing::run_shell(
      std::string("setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all ") +
      COMMSCOPE_BIN + " bench --emulate tcp-10g -- --p2p");
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN)"), std::string::npos)
      << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;  // one line
  EXPECT_TRUE(o.out.empty()) << o.out;
}

TEST(Emulate, ShapedLinkDeliversItsRateAndLeavesNothing) {
  if (!is_root()) GTEST_SKIP() << "needs root";
  constexpr double kRate = 200e6;  // bits/s
  Outcome o = bench({"--emulate", "rate=200M,nodes=2", "--ranks", "2", "--", "--p2p", "-b", "4M",
                     "-e", "4M", "-n", "5", "-w", "1", "--window", "4", "--format", "json"});
  ASSERT_EQ(o.status, 0) << o.err;
  const double mbps = nlohmann::json::parse(o.out)["p2p"][0]["bandwidth_MBps"].get<double>();
  const double bits = mbps * 1e6 * 8;
  EXPECT_NEAR(bits, kRate, 0.15 * kRate) << "measured " << bits / 1e6 << " Mb/s";
  // The NIC counters saw the sender near the rate too (and never far above it).
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(o.err, m, std::regex(R"(cs\d+n0\s+([\d.]+)\s+([\d.]+)\s+([\d.]+))")))
      << o.err;
  const double sent_mb = std::stod(m[1]), peak_gbps = std::stod(m[3]);
  EXPECT_GT(sent_mb, 4.0 * 4 * 6 * 0.99);  // 6 passes of 4 messages of 4 MiB at least
  EXPECT_NEAR(peak_gbps * 1e9, kRate, 0.15 * kRate);
  const std::string prefix = prefix_in(o.err);
  ASSERT_FALSE(prefix.empty()) << o.err;
  EXPECT_TRUE(emulation_leftovers(prefix).empty());
}

// An all-to-all of S bytes per rank over 4 ranks on 2 emulated nodes: each node's 2 ranks send
// 2 x 2/4 x S through its shaped link, so it takes at least S / rate (commscope's cost model
// since this round: per_node x (n - per_node) / n x S over the node's bandwidth,
// tests/unit/cost_models_test.cpp Cost.AllToAllAcrossNodesIsTheNodesEgress). The form it
// replaced, a ring's crossing of (n - 1) / n x S, says 3/4 of that: below what the link can
// carry. Measured here at 8 MiB and 400 Mb/s: 0.18-0.20 s against 0.168 s (and 0.126 s).
TEST(Emulate, AllToAllAcrossNodesIsBoundByTheNodesEgress) {
  if (!is_root()) GTEST_SKIP() << "needs root";
  constexpr double kRate = 400e6 / 8;  // bytes/s per node
  constexpr double kSize = 8.0 * 1024 * 1024;
  Outcome o =
      bench({"--emulate", "rate=400M,nodes=2", "--ranks", "4", "--", "--collectives", "all_to_all",
             "-b", "8M", "-e", "8M", "-n", "3", "-w", "1", "--format", "json"});
  ASSERT_EQ(o.status, 0) << o.err;
  const auto r = nlohmann::json::parse(o.out)["results"][0];
  ASSERT_EQ(r["collective"], "all_to_all");
  ASSERT_EQ(r["size_bytes"].get<double>(), kSize);
  // The collective's time is its slowest rank's (`time_us`, as nccl-tests reports it): the
  // fastest rank's (`time_min_us`) can start late out of the barrier and finish with the rest,
  // and so read below what the link carries (0.156 s against 0.168 s once, in CI).
  const double best =
      std::min(r["out_of_place"]["time_us"].get<double>(), r["in_place"]["time_us"].get<double>()) *
      1e-6;
  const double egress = 2.0 * 2 / 4 * kSize / kRate, ring = 3.0 / 4 * kSize / kRate;
  std::printf(
      "all-to-all of 8 MiB over 2 emulated nodes at 400 Mb/s: best %.3f s; node egress "
      "%.3f s, ring crossing %.3f s\n",
      best, egress, ring);
  EXPECT_GT(best, 0.95 * egress);  // tbf lets a burst through: a little below, not 3/4
  EXPECT_LT(best, 2.0 * egress);   // and it is the link that sets it
  const std::string prefix = prefix_in(o.err);
  ASSERT_FALSE(prefix.empty()) << o.err;
  EXPECT_TRUE(emulation_leftovers(prefix).empty());
}

TEST(Emulate, CollectivesAreCorrectAcrossNodes) {
  if (!is_root()) GTEST_SKIP() << "needs root";
  // 4 ranks on 2 nodes: shared memory inside a node, TCP over the shaped links between them.
  Outcome o = bench({"--emulate", "rdma-100g,nodes=2", "--ranks", "4", "--", "-b", "0", "-e", "28",
                     "-f", "-4", "-n", "1", "-w", "0", "--format", "csv"});
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("all_to_all"), std::string::npos);
  const std::string prefix = prefix_in(o.err);
  ASSERT_FALSE(prefix.empty()) << o.err;
  EXPECT_TRUE(emulation_leftovers(prefix).empty());
}

TEST(Emulate, ARankThatDiesLeavesNothing) {
  if (!is_root()) GTEST_SKIP() << "needs root";
  const auto t0 = std::chrono::steady_clock::now();
  Outcome o = bench({"--emulate", "rate=500M", "--ranks", "2", "--", "-b", "1K", "-e", "64K", "-n",
                     "200", "--kill-rank", "1"});
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(o.status, 2) << o.err;
  EXPECT_LT(secs, 30);
  // The run failed, so it printed no traffic: look for any namespace of a dead commscope.
  const std::string ns = run_command({"ip", "netns", "list"}).output;
  std::smatch m;
  std::string rest = ns;
  static const std::regex re(R"(cs(\d+)n\d+)");
  while (std::regex_search(rest, m, re)) {
    EXPECT_TRUE(std::filesystem::exists("/proc/" + m[1].str())) << "left behind: " << m[0];
    rest = m.suffix();
  }
}

TEST(Emulate, CtrlCRemovesEverything) {
  if (!is_root()) GTEST_SKIP() << "needs root";
  const pid_t pid = spawn_long_bench("rate=50M", "2");
  ASSERT_GT(pid, 0);
  EXPECT_TRUE(wait_for_namespace("cs" + std::to_string(pid) + "n1", 10))
      << "the emulated nodes never appeared";
  std::this_thread::sleep_for(std::chrono::seconds(2));  // the job is running
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_TRUE(emulation_leftovers("cs" + std::to_string(pid)).empty());
}

}  // namespace

namespace {

// The same training under two emulated networks, compared: each profile's row has the traffic
// its nodes really sent, never above the shaped rate (plus the bucket's burst).
TEST(Emulate, TrainComparesProfiles) {
  if (!is_root()) GTEST_SKIP() << "needs root";
  const std::string cmd =
      std::string("'") + COMMSCOPE_BIN +
      "' train --ranks 2 --emulate rate=400M --emulate rate=100M,nodes=2 --steps 3 --warmup 1 "
      "--layers 2 --hidden 64 --heads 4 --vocab 256 --seq-length 32 --micro-batch-size 2 "
      "--ddp-bucket-size 0.05";
  Outcome o = commscope::testing::run_shell(cmd);
  ASSERT_EQ(o.status, 0) << o.err;
  ASSERT_NE(o.out.find("# comparison"), std::string::npos) << o.out;
  static const std::regex row(
      R"(# (rate=\S+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)%\s+([\d.]+)\s+([\d.]+))");
  std::map<std::string, double> peak;
  for (auto it = std::sregex_iterator(o.out.begin(), o.out.end(), row);
       it != std::sregex_iterator(); ++it) {
    const double comm_share = std::stod((*it)[4]);
    EXPECT_GT(comm_share, 0);
    EXPECT_LE(comm_share, 100);
    peak[(*it)[1]] = std::stod((*it)[5]);
  }
  ASSERT_EQ(peak.size(), 2u) << o.out;
  EXPECT_GT(peak["rate=400M"], 0);
  EXPECT_LE(peak["rate=400M"], 0.4 * 1.15);
  EXPECT_GT(peak["rate=100M,nodes=2"], 0);
  EXPECT_LE(peak["rate=100M,nodes=2"], 0.1 * 1.15);
  // Both runs' nodes are gone.
  std::smatch m;
  std::string rest = run_command({"ip", "netns", "list"}).output;
  static const std::regex ns(R"(cs(\d+)n\d+)");
  while (std::regex_search(rest, m, ns)) {
    EXPECT_TRUE(std::filesystem::exists("/proc/" + m[1].str())) << "left behind: " << m[0];
    rest = m.suffix();
  }
}

}  // namespace

namespace {

// commscope killed outright (SIGKILL: no cleanup can run) leaves its nodes behind; the next
// --emulate run removes them, and the processes still inside them.
TEST(Emulate, LeftoversOfAKilledRunAreRemovedByTheNext) {
  if (!is_root()) GTEST_SKIP() << "needs root";
  const pid_t pid = spawn_long_bench("rate=50M", "2");
  ASSERT_GT(pid, 0);
  const std::string prefix = "cs" + std::to_string(pid);
  ASSERT_TRUE(wait_for_namespace(prefix + "n1", 10)) << "the emulated nodes never appeared";
  std::this_thread::sleep_for(std::chrono::seconds(1));
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_FALSE(emulation_leftovers(prefix).empty());  // nothing could clean up
  EXPECT_FALSE(emulate_tmp_folders(pid).empty());     // nor its temporary folder
  Outcome o = bench({"--emulate", "rate=500M", "--ranks", "2", "--", "-b", "8", "-e", "8", "-n",
                     "1", "-w", "0", "--collectives", "all_reduce"});
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_TRUE(emulation_leftovers(prefix).empty());
  EXPECT_TRUE(emulate_tmp_folders(pid).empty());
  // The orphaned job (mpirun outside the namespaces, whose command line names the killed run's
  // folder) is gone too: it would otherwise wait forever for its dead daemons.
  const std::string folder = "commscope-emulate-" + std::to_string(pid) + "-";
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = run_command({"pgrep", "-f", folder}).status != 0;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(gone) << "an mpirun of the killed run is still running";
  if (!gone) run_command({"pkill", "-KILL", "-f", folder});  // the test leaves nothing behind
}

}  // namespace

namespace {

// Ctrl-C while the nodes are still being created (as soon as the first namespace exists, of
// 8): commscope finishes or abandons the creation, removes everything and stops with status 2.
TEST(Emulate, CtrlCDuringSetupRemovesEverything) {
  if (!is_root()) GTEST_SKIP() << "needs root";
  const pid_t pid = spawn_long_bench("rate=50M,nodes=8", "8");
  ASSERT_GT(pid, 0);
  const std::string prefix = "cs" + std::to_string(pid);
  wait_for_namespace(prefix + "n0", 10);
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_TRUE(emulation_leftovers(prefix).empty());
}

}  // namespace

namespace {

// Per-direction rates (bits/s) of send/receive and all-reduce between 2 ranks on 2 emulated
// nodes, each rank sending 4 MiB to the other while receiving 4 MiB from it: for both, 4 MiB
// over the timed average is what each direction carried at least (all-reduce on 2 ranks sends
// the whole buffer each way, by halves in a ring or whole in recursive doubling). 0 when the
// run failed or its output could not be read.
std::map<std::string, double> bidirectional_rates(const std::string& spec, std::string& report) {
  Outcome o =
      bench({"--emulate", spec, "--ranks", "2", "--", "--collectives", "sendrecv,all_reduce", "-b",
             "4M", "-e", "4M", "-n", "8", "-w", "1", "--format", "json"});
  report = o.err;
  std::map<std::string, double> out;
  if (o.status != 0) return out;
  const auto doc = nlohmann::json::parse(o.out, nullptr, false);
  if (doc.is_discarded() || !doc.contains("results")) return out;
  for (const auto& r : doc["results"]) {
    const double t = r["out_of_place"]["time_us"].get<double>() * 1e-6;
    if (t > 0) out[r["collective"].get<std::string>()] = r["size_bytes"].get<double>() * 8 / t;
  }
  return out;
}

// A NIC is full duplex: while one node sends at the shaped rate, the other gets its rate too.
// Open MPI's TCP BTL with its default "put" protocol made the two directions take turns
// (96 Mb/s each way at 200 Mb/s); the bound, 75% of the rate each way, fails half duplex by
// far, and the typical figure is 94% (docs/bench.md). A slow first run (2 shared cores) is
// measured again once.
TEST(Emulate, BothDirectionsAtOnceEachGetTheRate) {
  if (!is_root()) GTEST_SKIP() << "needs root";
  constexpr double kRate = 200e6;  // bits/s
  std::map<std::string, double> best;
  std::string report;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const auto rates = bidirectional_rates("rate=200M,nodes=2", report);
    for (const auto& [name, bps] : rates) best[name] = std::max(best[name], bps);
    if (best["sendrecv"] >= 0.75 * kRate && best["all_reduce"] >= 0.75 * kRate) break;
  }
  EXPECT_GE(best["sendrecv"], 0.75 * kRate)
      << "send/receive: " << best["sendrecv"] / 1e6 << " Mb/s\n"
      << report;
  EXPECT_GE(best["all_reduce"], 0.75 * kRate)
      << "all-reduce: " << best["all_reduce"] / 1e6 << " Mb/s\n"
      << report;
  // Never faster than the link (plus the bucket's burst): the shaping still holds.
  EXPECT_LE(best["sendrecv"], 1.05 * kRate);
  // Both nodes sent and received about as much: the traffic really went both ways.
  static const std::regex node_row(R"((cs\d+n\d)\s+([\d.]+)\s+([\d.]+))");
  int nodes = 0;
  for (auto it = std::sregex_iterator(report.begin(), report.end(), node_row);
       it != std::sregex_iterator(); ++it, ++nodes) {
    const double sent = std::stod((*it)[2]), recv = std::stod((*it)[3]);
    // At least 8 timed exchanges of 4 MiB, out-of-place and in-place, for each collective.
    EXPECT_GT(sent, 4.194304 * 8 * 2 * 2) << (*it)[1];
    EXPECT_NEAR(recv, sent, 0.1 * sent) << (*it)[1];
  }
  EXPECT_EQ(nodes, 2) << report;
  const std::string prefix = prefix_in(report);
  ASSERT_FALSE(prefix.empty()) << report;
  EXPECT_TRUE(emulation_leftovers(prefix).empty());
}

}  // namespace
