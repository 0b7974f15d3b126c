// commscope train end to end over real MPI (mpirun, oversubscribed): the same loss on 1, 2 and
// 4 ranks under every strategy, communication equal to the workload's, DDP overlap, traces,
// kill-and-resume, bad flags.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "commscope/spec/scenario.h"
#include "commscope/workload/workload.h"
#include "test_util.h"

namespace {

using commscope::testing::Outcome;

Outcome train(int ranks, const std::string& args) {
  return commscope::testing::run_shell(
      std::string(MPIEXEC) + " -np " + std::to_string(ranks) + " --oversubscribe " +
      (::geteuid() == 0 ? "--allow-run-as-root " : "") + COMMSCOPE_TRAIN_BIN + " " + args);
}

const std::string kSmall =
    " --layers 2 --hidden 64 --heads 4 --vocab 256 --seq 32 --micro-batch 2 --global-batch 8 "
    "--bucket-mb 0.05 --zero-bucket 20000 --format json ";

std::vector<double> losses(const nlohmann::json& j) {
  std::vector<double> l;
  for (const auto& s : j["steps"]) l.push_back(s["loss"].get<double>());
  return l;
}

// Same global batch, same seed: 1 rank vs 2 and 4 ranks, DDP and ZeRO-1/2/3, the same loss for
// 20 steps. Tolerance: 1e-4 absolute on losses near 5 (fp32 sums in another order: the
// all-reduce adds the ranks' partial gradients, one rank adds the micro-batches).
TEST(Train, SameLossOnAnyRankCountAndStrategy) {
  Outcome ref = train(1, kSmall + "--steps 20 --strategy ddp");
  ASSERT_EQ(ref.status, 0) << ref.err;
  const auto want = losses(nlohmann::json::parse(ref.out));
  ASSERT_EQ(want.size(), 20u);
  EXPECT_LT(want.back(), want.front() - 0.2);  // it learns the synthetic stream
  for (const char* s : {"ddp", "zero1", "zero2", "zero3"})
    for (int ranks : {1, 2, 4}) {
      Outcome o = train(ranks, kSmall + "--steps 20 --strategy " + s);
      ASSERT_EQ(o.status, 0) << s << " " << ranks << o.err;
      const auto j = nlohmann::json::parse(o.out);
      const auto got = losses(j);
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t i = 0; i < got.size(); ++i)
        EXPECT_NEAR(got[i], want[i], 1e-4) << s << " on " << ranks << " ranks, step " << i + 1;
      EXPECT_TRUE(j["communication_matches_workload"].get<bool>()) << s << " " << ranks;
    }
}

// Measured bytes per group and collective equal the workload's (comm_volume, what describe
// prints), for every strategy, with gradient accumulation and uneven ZeRO partitions.
TEST(Train, CommunicationEqualsTheWorkload) {
  for (const char* s : {"ddp", "zero1", "zero2", "zero3"}) {
    Outcome o = train(3,
                      " --layers 2 --hidden 48 --heads 4 --vocab 250 --seq 16 --micro-batch 1 "
                      "--global-batch 6 --bucket-mb 0.03 --zero-bucket 7777 --steps 3 "
                      "--warmup 1 --format json --strategy " +
                          std::string(s));
    ASSERT_EQ(o.status, 0) << s << o.err;
    const auto j = nlohmann::json::parse(o.out);
    ASSERT_FALSE(j["communication"].empty()) << s;
    for (const auto& c : j["communication"]) {
      EXPECT_EQ(c["bytes_per_iteration"], c["workload_bytes"]) << s << " " << c["collective"];
      EXPECT_EQ(c["calls_per_iteration"], c["workload_calls"]) << s << " " << c["collective"];
      EXPECT_GT(c["bytes_per_iteration"].get<double>(), 0);
    }
    EXPECT_TRUE(j["communication_matches_workload"].get<bool>());
  }
}

// DDP with several buckets: some all-reduce time runs while backward computes.
TEST(Train, DdpOverlapsBucketsWithBackward) {
  Outcome o = train(2,
                    " --layers 4 --hidden 128 --heads 4 --vocab 512 --seq 64 --micro-batch 2 "
                    "--bucket-mb 0.1 --steps 6 --warmup 1 --format json --strategy ddp");
  ASSERT_EQ(o.status, 0) << o.err;
  const auto j = nlohmann::json::parse(o.out);
  ASSERT_GT(j["communication"][0]["calls_per_iteration"].get<double>(), 3);  // several buckets
  EXPECT_GT(j["average"]["breakdown"]["overlapped_comm_s"].get<double>(), 0);
  // Every rank's averages reach rank 0's report.
  ASSERT_EQ(j["per_rank"].size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(j["per_rank"][r]["rank"], r);
    EXPECT_GT(j["per_rank"][r]["compute_s"].get<double>(), 0);
  }
  EXPECT_EQ(j["per_rank"][0]["compute_s"], j["average"]["breakdown"]["compute_s"]);
  const auto& b = j["average"]["breakdown"];
  EXPECT_NEAR(b["overlapped_comm_s"].get<double>() + b["exposed_comm_s"].get<double>(),
              b["comm_s"].get<double>(), 1e-9);
}

TEST(Train, TracesOpenAsChromeJson) {
  const std::string dir = ::testing::TempDir() + "train_traces";
  std::filesystem::remove_all(dir);
  Outcome o = train(2, kSmall + "--steps 3 --warmup 1 --strategy zero3 --trace " + dir);
  ASSERT_EQ(o.status, 0) << o.err;
  for (int r : {0, 1}) {
    std::ifstream f(dir + "/rank" + std::to_string(r) + ".json");
    ASSERT_TRUE(f) << r;
    const auto j = nlohmann::json::parse(f);
    int comm = 0, compute = 0;
    for (const auto& e : j["traceEvents"]) {
      if (e.value("ph", "") != "X") continue;
      const std::string name = e.value("name", "");
      if (name == "zero3_param_all_gather") ++comm;
      if (name == "mlp_in") ++compute;
    }
    // 3 steps x 2 micro-batches (8 sequences = 2 x 2 ranks x 2) x 2 gathers per module x
    // (2 blocks + embedding + head)
    EXPECT_EQ(comm, 3 * 2 * 2 * 4) << r;
    EXPECT_EQ(compute, 3 * 2 * 2 * 2) << r;  // forward and backward of 2 blocks
  }
}

// A run killed after its step-5 checkpoint, resumed, gives exactly the losses of a run that
// was never interrupted.
TEST(Train, KillAndResumeReproducesTheTrajectory) {
  for (const char* s : {"ddp", "zero2"}) {
    const std::string dir = ::testing::TempDir() + "train_ckpt_" + s;
    std::filesystem::remove_all(dir);
    const std::string common = kSmall + "--steps 9 --strategy " + s;
    Outcome full = train(2, common);
    ASSERT_EQ(full.status, 0) << full.err;
    Outcome killed = train(2, common + " --checkpoint " + dir +
                                  " --checkpoint-every 5 --kill-rank 1 "
                                  "--kill-at-step 7");
    EXPECT_NE(killed.status, 0);
    ASSERT_TRUE(std::filesystem::exists(dir + "/latest.json"));
    Outcome resumed = train(2, common + " --checkpoint " + dir + " --resume");
    ASSERT_EQ(resumed.status, 0) << resumed.err;
    const auto a = nlohmann::json::parse(full.out)["steps"];
    const auto b = nlohmann::json::parse(resumed.out)["steps"];
    ASSERT_EQ(b.size(), 4u);  // steps 6..9
    for (std::size_t i = 0; i < b.size(); ++i) {
      EXPECT_EQ(b[i]["step"], a[i + 5]["step"]);
      EXPECT_EQ(b[i]["loss"].get<double>(), a[i + 5]["loss"].get<double>())
          << s << " step " << i + 6;
    }
  }
}

TEST(Train, BadFlagsAreOneLineErrors) {
  struct Case {
    int ranks;
    std::string args, expect;
  };
  const Case cases[] = {
      {2, "--micro-batch 2 --global-batch 6",
       "--global-batch: expected a multiple of micro-batch x ranks = 2 x 2 = 4, got 6"},
      {1, "--hidden 100 --heads 3", "hidden"},
      {1, "--strategy zero4", "--strategy: expected ddp, zero1, zero2 or zero3, got 'zero4'"},
      {1, "--model bert-base", "expected a GPT-2-shaped model"},
      {1, "--data /nonexistent/file.txt", "/nonexistent/file.txt"},
      {1, "--resume", "--checkpoint"},
      {1, "--steps 0", "--steps: expected a positive integer, got 0"},
  };
  for (const Case& c : cases) {
    Outcome o = train(c.ranks, c.args);
    EXPECT_EQ(o.status, 2) << c.args << ": " << o.err;
    EXPECT_NE(o.err.find(c.expect), std::string::npos) << c.args << ": " << o.err;
    EXPECT_EQ(o.err.rfind("commscope: ", 0), 0u) << o.err;
  }
}

}  // namespace

namespace {

// The trainer's measured communication against `commscope describe` run as a user would, for
// the same model (a commscope model JSON) and plan: calls and bytes per group and collective.
TEST(Train, DescribeSaysTheSameBytes) {
  const std::string model = ::testing::TempDir() + "train_tiny_model.json";
  {
    std::ofstream f(model);
    f << R"({"name": "tiny", "kind": "gpt", "layers": 2, "hidden": 64, "heads": 4, "ffn": 256,
             "vocab": 256, "seq_length": 32, "max_positions": 32})";
  }
  for (int zero = 0; zero <= 3; ++zero) {
    const std::string strategy = zero == 0 ? "ddp" : "zero" + std::to_string(zero);
    Outcome t = train(2,
                      " --layers 2 --hidden 64 --heads 4 --vocab 256 --seq 32 --micro-batch 2 "
                      "--global-batch 8 --bucket-mb 0.05 --steps 2 --warmup 1 --format json "
                      "--strategy " +
                          strategy);
    ASSERT_EQ(t.status, 0) << strategy << t.err;
    Outcome d = commscope::testing::run_shell(
        std::string(COMMSCOPE_BIN) + " describe --model " + model +
        " --system polaris --gpus 2 --nodes 1 --zero " + std::to_string(zero) +
        " --micro-batch-size 2 --global-batch-size 8 --precision fp32 --ddp-bucket-size 0.05 "
        "--format json");
    ASSERT_EQ(d.status, 0) << d.err;
    const auto described = nlohmann::json::parse(d.out)["comm"];
    const auto measured = nlohmann::json::parse(t.out)["communication"];
    ASSERT_EQ(described.size(), measured.size()) << strategy << d.out;
    for (const auto& c : described) {
      bool found = false;
      for (const auto& m : measured)
        if (m["group"] == c["group"] && m["collective"] == c["collective"]) {
          found = true;
          EXPECT_EQ(m["bytes_per_iteration"].get<double>(), c["bytes_per_rank"].get<double>())
              << strategy << " " << c["collective"];
          EXPECT_EQ(m["calls_per_iteration"].get<double>(), c["calls"].get<double>())
              << strategy << " " << c["collective"];
        }
      EXPECT_TRUE(found) << strategy << " " << c["collective"];
    }
  }
}

}  // namespace

namespace {

// A damaged checkpoint is refused with one line, and so is one from another run.
TEST(Train, DamagedOrForeignCheckpointsAreRefused) {
  const std::string dir = ::testing::TempDir() + "train_ckpt_damaged";
  std::filesystem::remove_all(dir);
  const std::string common = kSmall + "--warmup 1 --strategy zero1 --checkpoint " + dir;
  ASSERT_EQ(train(2, common + " --steps 2 --checkpoint-every 2").status, 0);
  const std::string file = dir + "/step2.rank1.bin";
  ASSERT_TRUE(std::filesystem::exists(file));
  // Another seed: the manifest says which field differs.
  Outcome o = train(2, common + " --steps 4 --resume --seed 7");
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("seed is 1234, this run has 7"), std::string::npos) << o.err;
  // Another rank count.
  o = train(1, kSmall + "--steps 4 --warmup 1 --strategy zero1 --checkpoint " + dir + " --resume");
  EXPECT_NE(o.status, 0);
  EXPECT_NE(o.err.find("ranks is 2, this run has 1"), std::string::npos) << o.err;
  // A truncated rank file.
  std::filesystem::resize_file(file, std::filesystem::file_size(file) / 2);
  o = train(2, common + " --steps 4 --resume");
  EXPECT_NE(o.status, 0);
  EXPECT_NE(o.err.find("step2.rank1.bin: truncated"), std::string::npos) << o.err;
}

}  // namespace

namespace {

// Trained on a text Debian ships (byte-level), over 2 ranks, the loss falls well below the
// uniform ln 256 = 5.55: 40 steps take it from about 5.4 to about 3.2 here.
TEST(Train, LossFallsOnARealText) {
  const std::string text = "/usr/share/common-licenses/GPL-3";
  if (!std::filesystem::exists(text)) GTEST_SKIP() << text << " is not on this machine";
  Outcome o = train(2, " --data " + text +
                           " --vocab 256 --layers 2 --hidden 64 --heads 4 --seq 32 --micro-batch "
                           "4 --steps 40 --format json");
  ASSERT_EQ(o.status, 0) << o.err;
  const auto l = losses(nlohmann::json::parse(o.out));
  ASSERT_EQ(l.size(), 40u);
  EXPECT_NEAR(l.front(), std::log(256.0), 0.3);
  double last5 = 0;
  for (std::size_t i = l.size() - 5; i < l.size(); ++i) last5 += l[i] / 5;
  EXPECT_LT(last5, l.front() - 1.5);
}

}  // namespace

namespace {

// `commscope train` started by mpirun (as srun would) becomes the rank it was started as.
TEST(Train, RunsAsLaunchedUnderMpirun) {
  Outcome o = commscope::testing::run_shell(
      std::string(MPIEXEC) + " -np 2 --oversubscribe " +
      (::geteuid() == 0 ? "--allow-run-as-root " : "") + COMMSCOPE_BIN +
      " train --steps 2 --warmup 0 --layers 2 --hidden 64 --vocab 256 --seq 32 --format json");
  ASSERT_EQ(o.status, 0) << o.err;
  const auto j = nlohmann::json::parse(o.out);  // one document: only rank 0 prints
  EXPECT_EQ(j["ranks"], 2);
  EXPECT_TRUE(j["communication_matches_workload"].get<bool>());
}

}  // namespace

namespace {

// The trainer runs the workload's compute ops, not ops of its own: every (op, layer) of the
// workload's forward and backward lists appears in the trainer's trace once per micro-batch
// and direction, and nothing else does (plus the optimizer step, once per step).
TEST(Train, RunsTheWorkloadsComputeOps) {
  const std::string dir = ::testing::TempDir() + "train_ops_trace";
  std::filesystem::remove_all(dir);
  const int steps = 2;
  Outcome o = train(2,
                    " --layers 2 --hidden 64 --heads 4 --vocab 256 --seq 32 --micro-batch 2 "
                    "--global-batch 8 --steps " +
                        std::to_string(steps) + " --warmup 1 --trace " + dir);
  ASSERT_EQ(o.status, 0) << o.err;

  using commscope::OpKind;
  commscope::ScenarioInput in;
  in.model = ::testing::TempDir() + "train_ops_model.json";
  {
    std::ofstream f(in.model);
    f << R"({"name": "tiny", "kind": "gpt", "layers": 2, "hidden": 64, "heads": 4, "ffn": 256,
             "vocab": 256, "seq_length": 32, "max_positions": 32, "dropout": false})";
  }
  in.system = "polaris";
  in.plan.gpus = 2;
  in.plan.nodes = 1;
  in.plan.micro_batch = 2;
  in.plan.global_batch = 8;
  in.plan.precision = commscope::Precision::fp32;
  auto sc = commscope::resolve_scenario(in);
  ASSERT_TRUE(sc.ok()) << sc.error().message;
  const auto w = commscope::build_workload(*sc);
  const int micro = w.microbatches;  // 2: 8 sequences = 2 per rank x 2 ranks x 2
  std::map<std::pair<std::string, int>, int> want;
  const auto& chunk = w.roles[0].chunks[0];
  for (const auto* list : {&chunk.forward, &chunk.backward})
    for (const auto& op : list->ops())
      if (op.kind == OpKind::compute)
        want[{std::string(op.name), std::max(op.layer, -1)}] += steps * micro;
  for (const auto& op : w.roles[0].step.ops())
    if (op.kind == OpKind::compute) want[{std::string(op.name), -1}] += steps;

  std::ifstream f(dir + "/rank0.json");
  ASSERT_TRUE(f);
  std::map<std::pair<std::string, int>, int> got;
  const auto trace = nlohmann::json::parse(f);
  for (const auto& e : trace["traceEvents"])
    if (e.value("ph", "") == "X" && e.value("tid", -1) == 0)
      got[{e["name"].get<std::string>(), e["args"].value("layer", -1)}] += 1;
  EXPECT_EQ(got, want);
}

}  // namespace

namespace {

// What a rank holds between steps, by strategy (ZeRO paper, Rajbhandari et al. 2020, Fig. 1:
// stage 1 partitions the optimizer state, 2 also the gradients, 3 also the parameters). The
// tiny model has V h + P h + L (12 h^2 + 13 h) + 2 h = 118,528 parameters; rank 0 of 2 owns half.
TEST(Train, ZeroPartitionsWhatEachStageSays) {
  const double all = 118528.0 * 4, half = all / 2;
  struct Expect {
    const char* strategy;
    double params, grads, optimizer;
  };
  // ZeRO-1/2 keep the full parameters for forward and backward and their fp32 shard for AdamW.
  const Expect cases[] = {{"ddp", all, all, 2 * all},
                          {"zero1", all + half, all + half, 2 * half},
                          {"zero2", all + half, half, 2 * half},
                          {"zero3", half, half, 2 * half}};
  for (const Expect& e : cases) {
    Outcome o = train(2, kSmall + "--steps 1 --warmup 0 --strategy " + e.strategy);
    ASSERT_EQ(o.status, 0) << o.err;
    const auto m = nlohmann::json::parse(o.out)["memory_per_rank_bytes"];
    EXPECT_EQ(m["parameters"].get<double>(), e.params) << e.strategy;
    EXPECT_EQ(m["gradients"].get<double>(), e.grads) << e.strategy;
    EXPECT_EQ(m["optimizer_state"].get<double>(), e.optimizer) << e.strategy;
    EXPECT_GT(m["peak_resident"].get<double>(), 0);
  }
}

}  // namespace

namespace {

// One breakdown routine: `commscope analyze` on the trainer's traces finds the compute and the
// overlapped and exposed communication the trainer reported, summed over its steps.
TEST(Train, AnalyzeOfItsTracesAgreesWithItsReport) {
  const std::string dir = ::testing::TempDir() + "train_analyze_traces";
  std::filesystem::remove_all(dir);
  Outcome t = train(2,
                    " --layers 2 --hidden 128 --heads 4 --vocab 512 --seq 64 --micro-batch 2 "
                    "--bucket-mb 0.1 --steps 3 --warmup 0 --format json --trace " +
                        dir);
  ASSERT_EQ(t.status, 0) << t.err;
  double compute = 0, overlapped = 0, exposed = 0;
  const auto report = nlohmann::json::parse(t.out);
  for (const auto& s : report["steps"]) {
    compute += s["breakdown"]["compute_s"].get<double>();
    overlapped += s["breakdown"]["overlapped_comm_s"].get<double>();
    exposed += s["breakdown"]["exposed_comm_s"].get<double>();
  }
  Outcome a = commscope::testing::run_shell(std::string(COMMSCOPE_BIN) + " analyze " + dir +
                                            " --format json");
  ASSERT_EQ(a.status, 0) << a.err;
  const auto doc = nlohmann::json::parse(a.out);
  bool found = false;
  for (const auto& r : doc["ranks"]) {
    if (r["rank"] != 0) continue;
    found = true;
    // The trace stores microseconds with 3 decimals: nanosecond rounding per event.
    EXPECT_NEAR(r["breakdown"]["compute_s"].get<double>(), compute, 1e-6);
    EXPECT_NEAR(r["breakdown"]["overlapped_comm_s"].get<double>(), overlapped, 1e-6);
    EXPECT_NEAR(r["breakdown"]["exposed_comm_s"].get<double>(), exposed, 1e-6);
  }
  EXPECT_TRUE(found) << a.out;
}

}  // namespace
