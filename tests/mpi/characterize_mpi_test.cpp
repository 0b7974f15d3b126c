// `commscope characterize` end to end: --quick on one emulated profile with a small matrix
// (2 and 4 ranks, DDP; TP 2 x PP 2 on 4), the folder complete, every document parsed to the schema,
// an error recomputed from the folder's numbers, resume without re-measuring, emulated nodes
// removed, and bad flags as one line with exit status 2. The emulated run needs root; skipped
// otherwise.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <fmt/format.h>
#include "commscope/launch/emulate.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using commscope::testing::Outcome;
using commscope::testing::scratch;
using nlohmann::json;

Outcome characterize(const std::string& args) {
  return commscope::testing::run_shell(std::string("'") + COMMSCOPE_BIN + "' characterize " + args);
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

// Runs commscope characterize with `args` as a child whose pid is known, so that its emulated
// nodes (named cs<pid>...) can be looked for afterwards. Output goes to `log`.
int run_child(const std::vector<std::string>& args, const std::string& log, pid_t* pid_out) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(COMMSCOPE_BIN));
    argv.push_back(const_cast<char*>("characterize"));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(COMMSCOPE_BIN, argv.data());
    std::_Exit(127);
  }
  *pid_out = pid;
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::map<std::string, fs::file_time_type> mtimes(const fs::path& dir) {
  std::map<std::string, fs::file_time_type> m;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) m[e.path().string()] = e.last_write_time();
  return m;
}

TEST(Characterize, BadFlagsAreOneLineAndStatus2) {
  const std::string file = scratch() + "a-file";
  std::ofstream(file) << "x";
  for (const std::string& args :
       {std::string("--quick"), std::string("--emulate tcp-10g --ranks 0"),
        std::string("--emulate tcp-10g --strategies zero9"), std::string("--emulate bogus-net"),
        std::string("--emulate tcp-10g,nodes=3 --ranks 2,4"), "--emulate tcp-10g -o '" + file + "'",
        std::string("--emulate tcp-10g --steps 1"), std::string("--emulate tcp-10g --ranks x"),
        // 0 given is no "not given" (found by probing, 2026-11-30: it ran at the defaults)
        std::string("--compute-only --micro-batch-size 0"),
        std::string("--emulate tcp-10g --steps 0"), std::string("--emulate tcp-10g --warmup -1"),
        // it runs no training (found by probing, 2026-12-02: --steps was ignored)
        std::string("--compute-only --steps 4"),
        // the trainer's memory check, before anything is measured (as root; otherwise the
        // privileges line)
        std::string("--emulate tcp-10g --model gpt2-xl")}) {
    const Outcome o = characterize(args);
    EXPECT_EQ(o.status, 2) << args;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << args << ": " << o.err;
    EXPECT_EQ(o.err.rfind("commscope: ", 0), 0u) << o.err;
    EXPECT_TRUE(o.out.empty()) << o.out;
  }
  // Refused by the trainer's memory check (as root, past the privileges check): the folder it
  // had created is gone again.
  if (::geteuid() == 0) {
    const fs::path out = scratch() + "refused";
    const Outcome o = characterize("--emulate tcp-10g --model gpt2-xl -o '" + out.string() + "'");
    EXPECT_EQ(o.status, 2) << o.err;
    EXPECT_FALSE(fs::exists(out)) << out;
  }
}

// The cluster mode: mpirun --hostfile (this machine's four slots, as the bench_hostfile test
// uses), no emulation and no root needed.
TEST(Characterize, ClusterModeWithAHostfile) {
  const fs::path out = scratch() + "cluster";
  const Outcome o = characterize("--quick --hostfile '" COMMSCOPE_SOURCE_DIR
                                 "/tests/data/mpi/hostfile' --nodes 1 --ranks 2 --strategies ddp "
                                 "--steps 3 --warmup 1 -o '" +
                                 out.string() + "'");
  ASSERT_EQ(o.status, 0) << o.err;
  const json doc = read_json(out / "characterize.json");
  EXPECT_EQ(doc["host"]["mode"], "cluster");
  ASSERT_EQ(doc["runs"].size(), 1u);
  EXPECT_EQ(doc["runs"][0]["id"], "cluster-ddp-r2");
  EXPECT_EQ(doc["runs"][0]["nodes"], 1);
  EXPECT_TRUE(fs::is_regular_file(out / "network-cluster.json"));
  EXPECT_TRUE(fs::is_regular_file(out / "traces/cluster-ddp-r2/rank1.json"));
  EXPECT_GT(doc["runs"][0]["measured"]["iteration_s"].get<double>(), 0);
  // The data-parallel trainer separates each call's wait for its peers from the transfer, as
  // the model-parallel one does: of two ranks entering a collective, the first waits for the
  // second (their entries never coincide to the nanosecond), so the profiler's view (calls from
  // entry) is longer than the causal one summed over the ranks. Before, the two were equal.
  const json rec = read_json(out / "runs/cluster-ddp-r2/run.json");
  double waits = 0;
  for (const json& e : rec["summary"]["per_rank"]) {
    EXPECT_GE(e["profiler_comm_s"].get<double>(), e["comm_s"].get<double>());
    waits += e["profiler_comm_s"].get<double>() - e["comm_s"].get<double>();
  }
  EXPECT_GT(waits, 0);
  EXPECT_GE(doc["runs"][0]["measured"]["profiler_comm_s"].get<double>(),
            doc["runs"][0]["measured"]["exposed_comm_s"].get<double>());
  // A refused run into the folder leaves it as it was: its model.json (a refused run wrote its
  // own over the completed steps' model) and no run folder of its own (found by probing,
  // 2026-12-02).
  const std::string model_before = commscope::testing::slurp(out / "model.json");
  for (const std::string more :
       {"--ranks 2 --strategies ddp --model gpt2-large", "--ranks 8 --strategies pp8"}) {
    SCOPED_TRACE(more);
    const Outcome refused = characterize("--hostfile '" COMMSCOPE_SOURCE_DIR
                                         "/tests/data/mpi/hostfile' --nodes 1 --steps 3 "
                                         "--warmup 1 -o '" +
                                         out.string() + "' " + more);
    EXPECT_EQ(refused.status, 2) << refused.err;
    // the run refused is named: the flag may be one the strategy set, not the user
    EXPECT_EQ(refused.err.rfind("commscope: --strategies ", 0), 0u) << refused.err;
    EXPECT_EQ(commscope::testing::slurp(out / "model.json"), model_before);
    EXPECT_FALSE(fs::exists(out / "runs/cluster-pp8-r8"));
  }
}

TEST(Characterize, QuickOneProfileEndToEndAndResume) {
  if (::geteuid() != 0) GTEST_SKIP() << "emulated nodes need root";
  const fs::path out = scratch() + "char";
  const std::vector<std::string> args = {
      "--quick", "--emulate", "rdma-100g,nodes=2", "--ranks", "2,4", "--strategies", "ddp,tp2pp2",
      "--steps", "4",         "--warmup",          "1",       "-o",  out.string()};
  pid_t pid = 0;
  const std::string log = scratch() + "char.log";
  const int rc = run_child(args, log, &pid);
  std::ifstream lf(log);
  const std::string text((std::istreambuf_iterator<char>(lf)), {});
  ASSERT_EQ(rc, 0) << text;
  // The emulated nodes are gone.
  EXPECT_TRUE(commscope::launch::emulation_leftovers("cs" + std::to_string(pid)).empty());

  // The folder is complete.
  for (const char* f :
       {"characterize.json", "runs.csv", "collectives.csv", "model.json", "network-rdma-100g.json",
        "system-cpu-host.json", "runs/rdma-100g-ddp-r2/run.json", "runs/rdma-100g-ddp-r4/run.json",
        "runs/rdma-100g-tp2pp2-r4/run.json", "report.html"})
    EXPECT_TRUE(fs::is_regular_file(out / f)) << f;
  // The report is the folder's, as `commscope report DIR` renders it (the browser test opens
  // such pages): it names every run.
  const std::string page = commscope::testing::slurp(out / "report.html");
  EXPECT_NE(page.find("rdma-100g-ddp-r4"), std::string::npos);
  EXPECT_NE(page.find("<canvas"), std::string::npos);
  // Both views' errors per collective, and the summary's time-weighted error.
  EXPECT_NE(page.find("profiler error %"), std::string::npos);
  EXPECT_NE(page.find("collective error weighted by time"), std::string::npos);
  for (int r : {2, 4})
    for (int k = 0; k < r; ++k)
      EXPECT_TRUE(
          fs::is_regular_file(out / fmt::format("traces/rdma-100g-ddp-r{}/rank{}.json", r, k)));

  // The document and its schema.
  const json doc = read_json(out / "characterize.json");
  EXPECT_EQ(doc["schema"], "commscope.characterize/1");
  EXPECT_EQ(doc["host"]["mode"], "emulate");
  EXPECT_TRUE(doc["quick"].get<bool>());
  ASSERT_EQ(doc["network"].size(), 1u);
  const json& net = doc["network"][0];
  EXPECT_EQ(net["profile"], "rdma-100g");
  EXPECT_EQ(net["nodes"], 2);
  EXPECT_EQ(net["file"], "network-rdma-100g.json");
  ASSERT_FALSE(net["curves"].empty());
  for (const json& c : net["curves"]) {
    EXPECT_TRUE(c["group"] == "inter" || c["group"] == "intra");
    for (const json& p : c["points"]) {
      EXPECT_GT(p["bytes"].get<double>(), 0);
      EXPECT_GT(p["measured_busbw_gbps"].get<double>(), 0);
      EXPECT_GE(p["model_busbw_gbps"].get<double>(), 0);
    }
  }
  EXPECT_EQ(doc["compute"]["file"], "system-cpu-host.json");
  EXPECT_GT(doc["compute"]["gemm_tflops"].get<double>(), 0);
  ASSERT_FALSE(doc["compute"]["points"].empty());
  // TP 2 x PP 2 runs on 4 ranks only (4 does not divide 2).
  ASSERT_EQ(doc["runs"].size(), 3u);
  EXPECT_FALSE(fs::exists(out / "runs/rdma-100g-tp2pp2-r2"));
  const char* terms[] = {"iteration_s",       "compute_s", "exposed_comm_s",
                         "overlapped_comm_s", "bubble_s",  "profiler_comm_s"};
  for (const json& run : doc["runs"]) {
    EXPECT_TRUE(fs::is_regular_file(out / run["system_file"].get<std::string>()));
    EXPECT_TRUE(fs::is_regular_file(out / run["network_file"].get<std::string>()));
    for (const char* k :
         {"id", "strategy", "ranks", "nodes", "network", "trace_dir", "measured", "predicted",
          "iteration_error_pct", "collectives", "throughput_gbps_per_node"})
      EXPECT_TRUE(run.contains(k)) << k;
    for (const char* t : terms) {
      EXPECT_TRUE(run["measured"][t].is_number()) << t;
      EXPECT_TRUE(run["predicted"][t].is_number()) << t;
    }
    EXPECT_GT(run["measured"]["iteration_s"].get<double>(), 0);
    EXPECT_GT(run["predicted"]["iteration_s"].get<double>(), 0);
    // The emulated NICs' rate over time: some window carried the gradients.
    double peak = 0;
    for (const json& w : run["throughput_gbps_per_node"])
      peak = std::max(peak, w["gbps"].get<double>());
    EXPECT_GT(peak, 0);
    // The error recomputed from the run's own files: the trainer's summary and predict run on
    // the folder's fitted files.
    // The measurement is the mean over every rank's averages (the trainer's per_rank).
    const json rec = read_json(out / "runs" / run["id"].get<std::string>() / "run.json");
    const json& per_rank = rec["summary"]["per_rank"];
    ASSERT_EQ(per_rank.size(), run["ranks"].get<std::size_t>());
    double meas = 0, compute = 0;
    for (const json& e : per_rank) {
      meas += e["time_s"].get<double>() / per_rank.size();
      compute += e["compute_s"].get<double>() / per_rank.size();
    }
    EXPECT_NEAR(run["measured"]["iteration_s"].get<double>(), meas, meas * 1e-12);
    EXPECT_NEAR(run["measured"]["compute_s"].get<double>(), compute, compute * 1e-12);
    // The kernels timed just before the run, fitted into the run's own system file, and the
    // prediction with it beside the one with step 2's system.
    const std::string id = run["id"].get<std::string>();
    EXPECT_TRUE(fs::is_regular_file(out / "runs" / id / "kernels.json")) << id;
    EXPECT_EQ(run["run_kernels_system_file"], "runs/" + id + "/system.json");
    EXPECT_TRUE(fs::is_regular_file(out / "runs" / id / "system.json")) << id;
    EXPECT_EQ(run["system_file"].get<std::string>().rfind("system-cpu-host", 0), 0u);
    EXPECT_NEAR(run["run_kernels_iteration_error_pct"].get<double>(),
                (run["run_kernels_predicted_iteration_s"].get<double>() - meas) / meas * 100, 1e-6);
    const bool mp = run["strategy"] == "tp2pp2";
    EXPECT_EQ(run["tp"], mp ? 2 : 1);
    EXPECT_EQ(run["pp"], mp ? 2 : 1);
    // A pipeline's stages differ: the measured bubble is their receives' waits.
    if (mp) {
      EXPECT_GT(run["predicted"]["bubble_s"].get<double>(), 0);
    }
    const Outcome pr = commscope::testing::run_shell(
        std::string("'") + COMMSCOPE_BIN + "' predict --format json --model '" +
        (out / "model.json").string() + "' --system '" +
        (out / run["system_file"].get<std::string>()).string() + "' --network '" +
        (out / run["network_file"].get<std::string>()).string() + "' --gpus " +
        std::to_string(run["ranks"].get<int>()) + " --nodes 2 --zero 0 --micro-batch-size 4 " +
        "--precision fp32" +
        (mp ? " --tp 2 --pp 2 --schedule 1f1b --gradient-accumulation-steps 4" : ""));
    ASSERT_EQ(pr.status, 0) << pr.err;
    const double pred = json::parse(pr.out)["predictions"][0]["iteration_time_s"].get<double>();
    EXPECT_NEAR(run["predicted"]["iteration_s"].get<double>(), pred, pred * 1e-9);
    EXPECT_NEAR(run["iteration_error_pct"].get<double>(), (pred - meas) / meas * 100, 1e-6);
    ASSERT_FALSE(run["collectives"].empty());
    for (const json& c : run["collectives"]) {
      const double m = c["measured_s"].get<double>(), p = c["predicted_s"].get<double>();
      if (m > 0) {
        EXPECT_NEAR(c["error_pct"].get<double>(), (p - m) / m * 100, 1e-6);
      }
      const double mp_s = c["measured_profiler_s"].get<double>();
      if (mp_s > 0) {
        EXPECT_NEAR(c["profiler_error_pct"].get<double>(),
                    (c["predicted_profiler_s"].get<double>() - mp_s) / mp_s * 100, 1e-6);
      }
      EXPECT_EQ(c["group"], mp ? "all" : "data");
    }
  }
  ASSERT_EQ(doc["projection"].size(), 1u);
  EXPECT_EQ(doc["projection"][0]["run"], "rdma-100g-ddp-r4");
  EXPECT_EQ(doc["projection"][0]["base_run"], "rdma-100g-ddp-r2");
  EXPECT_EQ(doc["summary"]["runs"], 3);
  double mape = 0;
  for (const json& run : doc["runs"])
    mape += std::fabs(run["iteration_error_pct"].get<double>()) / 3;
  EXPECT_NEAR(doc["summary"]["iteration_mape_pct"].get<double>(), mape, 1e-9);
  // The CSVs: a header and one row per run, per collective.
  std::ifstream csv(out / "runs.csv");
  std::string line;
  int lines = 0;
  while (std::getline(csv, line)) ++lines;
  EXPECT_EQ(lines, 4);

  // Run again: everything is in the folder, nothing is measured again.
  const auto before = mtimes(out / "runs");
  const auto bench_before = mtimes(out / "bench");
  const auto compute_before = mtimes(out / "compute");
  const int rc2 = run_child(args, log, &pid);
  ASSERT_EQ(rc2, 0);
  EXPECT_EQ(mtimes(out / "runs"), before);
  EXPECT_EQ(mtimes(out / "bench"), bench_before);
  EXPECT_EQ(mtimes(out / "compute"), compute_before);
  EXPECT_EQ(read_json(out / "characterize.json")["runs"].size(), 3u);
}

}  // namespace

namespace {

// The trainer's model-parallel runs against predict with a host fitted on this machine
// (scripts/train-vs-predict.py, docs/train.md "Measured against predict"): `characterize
// --compute-only` fits the host, a tiny PP 2 plan trains, and predict's schedule-level
// quantities, which hold whatever the timings, are checked with the fitted host. Nothing here
// compares a measured time with a predicted one (tests never fail on timing).
TEST(Characterize, ComputeOnlyFitsTheHostForPredictOfAPipeline) {
  const fs::path out = scratch() + "compute-only";
  Outcome o = characterize("--compute-only --no-progress --quick --micro-batch-size 2 -o '" +
                           out.string() + "'");
  ASSERT_EQ(o.status, 0) << o.err;
  const fs::path sys = out / "system-cpu-host.json";
  ASSERT_TRUE(fs::is_regular_file(sys));
  EXPECT_FALSE(fs::exists(out / "characterize.json"));  // no runs, no network
  const json doc = read_json(out / "compute.json");
  EXPECT_GT(doc["compute"]["gemm_tflops"].get<double>(), 0);
  // With an emulation it is refused with one line naming the flag.
  Outcome bad = characterize("--compute-only --emulate tcp-10g -o '" + out.string() + "'");
  EXPECT_EQ(bad.status, 2);
  EXPECT_EQ(bad.err.rfind("commscope: --compute-only: expected no --emulate/--hostfile", 0), 0u)
      << bad.err;

  // The fitted model (--quick cuts the preset to 2 layers: one per stage, or one per chunk of
  // PP 2 x 2 would need 4) is written to the folder; a PP 2 plan of it trains.
  const std::string model = (out / "model.json").string();
  const std::string flags = " --model '" + model +
                            "' --precision fp32 --micro-batch-size 2 --global-batch-size 8 "
                            "--ddp-bucket-size 0.05 --gpus 2 --pp 2";
  Outcome t =
      commscope::testing::run_shell(commscope::testing::mpiexec(2) + COMMSCOPE_TRAIN_BIN + flags +
                                    " --schedule 1f1b --steps 3 --warmup 1 --format json");
  ASSERT_EQ(t.status, 0) << t.err;
  const json measured = json::parse(t.out);
  for (const json& r : measured["per_rank"]) {
    EXPECT_GE(r["bubble_s"].get<double>(), 0);
    EXPECT_LE(r["bubble_s"].get<double>(), r["time_s"].get<double>());
  }

  auto predict = [&](const std::string& schedule) {
    Outcome p = commscope::testing::run_shell(std::string("'") + COMMSCOPE_BIN + "' predict" +
                                              flags + " --schedule " + schedule + " --system '" +
                                              sys.string() + "' --format json");
    EXPECT_EQ(p.status, 0) << p.err;
    return p.status == 0 ? json::parse(p.out)["predictions"][0] : json();
  };
  const json gpipe = predict("gpipe"), f1b = predict("1f1b");
  ASSERT_TRUE(gpipe.is_object() && f1b.is_object());
  EXPECT_EQ(f1b["system"], "cpu-host-measured");
  // 4 micro-batches over 2 stages: GPipe's and 1F1B's bubble is (p-1)/(m+p-1) = 1/5 of the
  // iteration for equal stages. The fitted stages differ (the embedding on the first, the LM
  // head and loss on the second): with per-micro-batch times c0, c1 the iteration is about
  // m max(c) + min(c) and the mean idle (m |c1 - c0| + 2 min(c)) / 2, a share from 1/5 (equal)
  // towards 1/2 (one stage empty). (The transfers and the optimizer step move it by less than
  // 0.01 here.)
  const double share = f1b["bubble_share"].get<double>();
  EXPECT_NEAR(gpipe["bubble_share"].get<double>(), share, 1e-3);
  EXPECT_GE(share, 0.2 - 0.01);
  EXPECT_LE(share, 0.5);
  // The profiler's view holds the receive waits the trainer's bubble_s measures: at least the
  // causal bubble's order, never more than the iteration.
  EXPECT_GE(f1b["profiler_comm_s"].get<double>(), f1b["comm_s"].get<double>());
  EXPECT_LE(f1b["profiler_comm_s"].get<double>(), f1b["iteration_time_s"].get<double>());
}

}  // namespace
