// commscope train end to end over real MPI (mpirun, oversubscribed): the same loss on 1, 2 and
// 4 ranks under every strategy, communication equal to the workload's, DDP overlap, traces,
// kill-and-resume, bad flags.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commscope/spec/scenario.h"
#include "commscope/workload/workload.h"
#include "test_util.h"

namespace {

using commscope::testing::Outcome;

Outcome train(int ranks, const std::string& args) {
  return commscope::testing::run_shell(commscope::testing::mpiexec(ranks) + COMMSCOPE_TRAIN_BIN +
                                       " " + args);
}

const std::string kSmall =
    " --layers 2 --hidden 64 --heads 4 --vocab 256 --seq-length 32 --micro-batch-size 2 "
    "--global-batch-size 8 --ddp-bucket-size 0.05 --zero-bucket 20000 --format json ";

// The ZeRO stage flag of a strategy name: "ddp" -> "--zero 0", "zero2" -> "--zero 2".
std::string zero(const std::string& strategy) {
  return " --zero " + std::string(strategy == "ddp" ? "0" : strategy.substr(4)) + " ";
}

std::vector<double> losses(const nlohmann::json& j) {
  std::vector<double> l;
  for (const auto& s : j["steps"]) l.push_back(s["loss"].get<double>());
  return l;
}

// Same global batch, same seed: 1 rank vs 2 and 4 ranks, DDP and ZeRO-1/2/3, the same loss for
// 20 steps. Tolerance: 1e-4 absolute on losses near 5 (fp32 sums in another order: the
// all-reduce adds the ranks' partial gradients, one rank adds the micro-batches).
TEST(Train, SameLossOnAnyRankCountAndStrategy) {
  Outcome ref = train(1, kSmall + "--steps 20 --zero 0");
  ASSERT_EQ(ref.status, 0) << ref.err;
  const auto want = losses(nlohmann::json::parse(ref.out));
  ASSERT_EQ(want.size(), 20u);
  EXPECT_LT(want.back(), want.front() - 0.2);  // it learns the synthetic stream
  for (const char* s : {"ddp", "zero1", "zero2", "zero3"})
    for (int ranks : {1, 2, 4}) {
      Outcome o = train(ranks, kSmall + "--steps 20" + zero(s));
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
                      " --layers 2 --hidden 48 --heads 4 --vocab 250 --seq-length 16 "
                      "--micro-batch-size 1 --global-batch-size 6 --ddp-bucket-size 0.03 "
                      "--zero-bucket 7777 --steps 3 --warmup 1 --format json" +
                          zero(s));
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
                    " --layers 4 --hidden 128 --heads 4 --vocab 512 --seq-length 64 "
                    "--micro-batch-size 2 --ddp-bucket-size 0.1 --steps 6 --warmup 1 --format json "
                    "--zero 0");
  ASSERT_EQ(o.status, 0) << o.err;
  const auto j = nlohmann::json::parse(o.out);
  const double buckets = j["communication"][0]["calls_per_iteration"].get<double>();
  ASSERT_GT(buckets, 3);  // several buckets
  // Every bucket but the last is handed to the communication stream while backward still has
  // gradients to compute (program order: deterministic). How much of that time really overlaps
  // depends on the scheduler of this shared 2-core machine, so it is bounded, not required:
  // a test never fails on timing.
  for (const auto& step : j["steps"]) {
    EXPECT_GE(step["buckets_issued_during_backward"].get<double>(), buckets - 1) << step;
    const auto& sb = step["breakdown"];
    EXPECT_GE(sb["overlapped_comm_s"].get<double>(), 0);
    EXPECT_LE(sb["overlapped_comm_s"].get<double>(), sb["comm_s"].get<double>() + 1e-12);
  }
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
  const std::string dir = commscope::testing::scratch() + "train_traces";
  std::filesystem::remove_all(dir);
  Outcome o = train(2, kSmall + "--steps 3 --warmup 1 --zero 3 --trace " + dir + "/");
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
    const std::string dir = commscope::testing::scratch() + "train_ckpt_" + s;
    std::filesystem::remove_all(dir);
    const std::string common = kSmall + "--steps 9" + zero(s);
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
      {2, "--micro-batch-size 2 --global-batch-size 6",
       "--global-batch-size: expected a multiple of micro-batch x ranks = 2 x 2 = 4, got 6"},
      {1, "--hidden 100 --heads 3", "hidden"},
      {1, "--zero 4", "--zero: expected 0, 1, 2 or 3, got 4"},
      {1, "--model bert-base", "--model bert-base: expected a BERT the trainer has"},
      // T5 trains in the model-parallel trainer (train_parallel_test); what it does not run is
      // refused before anything is allocated.
      {1, "--model t5-small --zero 2", "--zero: expected 0 or 1 for T5"},
      {1, "--data /nonexistent/file.txt", "/nonexistent/file.txt"},
      {1, "--resume", "--checkpoint"},
      {1, "--steps 0", "--steps: expected a positive integer, got 0"},
      {2, "--gpus 4", "--gpus: expected the rank count 2"},
      // Plan flags of describe and predict the CPU trainer cannot honour name themselves.
      {1, "--tp 2", "--tensor-model-parallel-size: expected a divisor of the rank count 1, got 2"},
      {1, "--pipeline-model-parallel-size 2",
       "--pipeline-model-parallel-size: expected TP x PP to divide the rank count 1"},
      {1, "--bf16", "--precision: expected fp32"},
      {1, "--recompute-activations", "--recompute-granularity: expected none"},
      {2, "--model gpt2-moe-tiny-cpu --ep 2 --moe-token-dispatcher-type flex",
       "--moe-token-dispatcher-type: expected alltoall: the CPU trainer dispatches with MPI's"},
      {2, "--model gpt2-moe-tiny-cpu --ep 2 --moe-router-num-groups 2",
       "--moe-router-num-groups: expected none: the CPU trainer's router is not group-limited"},
      // Memory is computed before anything is allocated (these once ate the machine or threw
      // std::bad_alloc).
      {1, "--layers 1000000000", "layers 1000000000"},
      {1, "--seq-length 100000", "--seq-length 100000 with --micro-batch-size 4: needs"},
      // Outputs are checked before training, not after it.
      // (a folder that does not exist yet is made when written, as for every verb; one below
      // a device cannot be)
      {1, "-o /dev/null/dir/summary.json --steps 1", "-o/--output: /dev/null/dir/summary.json"},
      {2, "--trace /dev/null/dir/run.json --steps 1", "--trace: /dev/null/dir/run"},
      {1, "--steps 2 --warmup 2", "--warmup: expected 0 to steps - 1 = 1, got 2"},
  };
  // Launched four at a time: each mostly waits for mpirun to start.
  std::vector<std::pair<int, std::string>> launches;
  for (const Case& c : cases) launches.emplace_back(c.ranks, COMMSCOPE_TRAIN_BIN " " + c.args);
  const auto outcomes = commscope::testing::run_mpi_all(launches);
  for (std::size_t i = 0; i < std::size(cases); ++i) {
    const Case& c = cases[i];
    const Outcome& o = outcomes[i];
    EXPECT_EQ(o.status, 2) << c.args << ": " << o.err;
    EXPECT_NE(o.err.find(c.expect), std::string::npos) << c.args << ": " << o.err;
    EXPECT_EQ(o.err.rfind("commscope: ", 0), 0u) << o.err;
  }
}

// `commscope train --help` and `commscope predict --help` share their plan flags.
TEST(Train, TrainAndPredictShareThePlanFlags) {
  Outcome t = commscope::testing::run_shell(std::string(COMMSCOPE_BIN) + " train --help");
  Outcome p = commscope::testing::run_shell(std::string(COMMSCOPE_BIN) + " predict --help");
  ASSERT_EQ(t.status, 0);
  ASSERT_EQ(p.status, 0);
  for (const char* flag :
       {"--model", "--system", "--seq-length", "--zero,--zero-stage", "--micro-batch-size",
        "--global-batch-size", "--ddp-bucket-size", "--deepspeed-config",
        "--gradient-accumulation-steps", "--tp,--tensor-model-parallel-size"}) {
    EXPECT_NE(t.out.find(flag), std::string::npos) << flag;
    EXPECT_NE(p.out.find(flag), std::string::npos) << flag;
  }
}

// `commscope train` parses and checks the trainer's flags itself before it launches mpirun: a
// bad flag is one line (no Open MPI banner: nothing was launched), status 2.
TEST(Train, TheLauncherRefusesBadFlagsBeforeMpirun) {
  struct Case {
    std::string args, expect;
  };
  const Case cases[] = {
      {"--ranks 2 --tp 3", "--tensor-model-parallel-size: expected a divisor of the rank count 2"},
      {"--ranks 100000", "--ranks: expected 1 to 1024 ranks on one machine, got 100000"},
      {"--ranks 2 --layers 1000000000", "layers 1000000000"},
      {"--ranks 2 --seq-length 100000", "--seq-length 100000 with --micro-batch-size 4: needs"},
      {"--ranks 2 --micro-batch-size 2 --global-batch-size 6",
       "--global-batch-size: expected a multiple of micro-batch x ranks = 2 x 2 = 4, got 6"},
      // (a folder that does not exist yet is made when written, as for every verb; one below
      // a device cannot be)
      {"--ranks 2 -o /dev/null/dir/summary.json", "-o/--output: /dev/null/dir/summary.json: "},
      {"--ranks 2 --trace /dev/null/dir/run.json", "--trace: /dev/null/dir/run"},
      {"--ranks 2 --steps 2 --warmup 2", "--warmup: expected 0 to steps - 1 = 1, got 2"},
      {"--ranks 2 --resume --checkpoint /nonexistent/ckpt", "latest.json: missing"},
      {"--ranks 2 --zero 5", "--zero: expected 0, 1, 2 or 3, got 5"},
      {"--ranks 2 -- --no-such-flag", "--no-such-flag"},
      // in the order given (CLI11 lists them last first), and a value without its flag's
      // conversion said the commscope way
      {"--ranks 2 -- --checkpoint-dir /x",
       "expected flags commscope-train has, got '--checkpoint-dir /x'"},
      {"--ranks 2 -- --steps 1.5", "--steps: expected an integer, got '1.5'"},
  };
  for (const Case& c : cases) {
    Outcome o = commscope::testing::run_shell(std::string(COMMSCOPE_BIN) + " train " + c.args);
    EXPECT_EQ(o.status, 2) << c.args << ": " << o.err;
    EXPECT_NE(o.err.find(c.expect), std::string::npos) << c.args << ": " << o.err;
    EXPECT_EQ(o.err.rfind("commscope: ", 0), 0u) << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << c.args << ": " << o.err;
  }
  // `train -- --help` is the trainer's help (it said "This should be caught in your main
  // function"), and launches nothing.
  Outcome help = commscope::testing::run_shell(std::string(COMMSCOPE_BIN) + " train -- --help");
  EXPECT_EQ(help.status, 0) << help.err;
  EXPECT_EQ(help.out.rfind("Usage: commscope-train", 0), 0u) << help.out;
  EXPECT_TRUE(help.err.empty()) << help.err;
}

// The spellings of earlier releases still work, give the same run, and each warns once (rank 0).
TEST(Train, OldSpellingsStillWorkAndWarnOnce) {
  const std::string dir = commscope::testing::scratch() + "train_old_spellings";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string sizes = " --layers 2 --hidden 64 --heads 4 --vocab 256 --steps 2 --warmup 1 ";
  Outcome now = train(2, sizes +
                             "--seq-length 32 --micro-batch-size 2 --global-batch-size 8 "
                             "--zero 2 --ddp-bucket-size 0.05 --format json -o " +
                             dir + "/new.json");
  ASSERT_EQ(now.status, 0) << now.err;
  EXPECT_EQ(now.err, "");
  Outcome old = train(2, sizes +
                             "--seq 32 --micro-batch 2 --global-batch 8 --strategy zero2 "
                             "--bucket-mb 0.05 --format json --summary " +
                             dir + "/old.json");
  ASSERT_EQ(old.status, 0) << old.err;
  for (const char* flag : {"--micro-batch ", "--global-batch ", "--strategy ", "--bucket-mb ",
                           "--summary ", "--seq "}) {
    const std::string line = std::string("commscope: warning: ") + flag + "is deprecated";
    const auto at = old.err.find(line);
    EXPECT_NE(at, std::string::npos) << flag << old.err;
    EXPECT_EQ(old.err.find(line, at + 1), std::string::npos) << flag << " warned twice" << old.err;
  }
  EXPECT_EQ(losses(nlohmann::json::parse(old.out)), losses(nlohmann::json::parse(now.out)));
  // No progress line when stderr is not a terminal (above: nothing on stderr); the line
  // `commscope train` asks for on a terminal is overwritten in place.
  Outcome shown = train(2, sizes + "--seq-length 32 --micro-batch-size 2 --progress");
  ASSERT_EQ(shown.status, 0) << shown.err;
  EXPECT_NE(shown.err.find("\r\033[Kstep 2/2  loss "), std::string::npos) << shown.err;
  EXPECT_EQ(shown.err.find('\n'), std::string::npos) << shown.err;
  std::ifstream a(dir + "/new.json"), b(dir + "/old.json");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(nlohmann::json::parse(a)["strategy"], nlohmann::json::parse(b)["strategy"]);
}

}  // namespace

namespace {

// The trainer's measured communication against `commscope describe` run as a user would, for
// the same model (a commscope model JSON) and plan: calls and bytes per group and collective.
TEST(Train, DescribeSaysTheSameBytes) {
  for (int zero = 0; zero <= 3; ++zero) {
    // One set of flags, given to both: the plan language is the same.
    const std::string plan =
        " --model gpt2-tiny-cpu --system cpu-host --gpus 2 --zero " + std::to_string(zero) +
        " --seq-length 32 --micro-batch-size 2 --global-batch-size 8 --precision fp32 "
        "--ddp-bucket-size 0.5 --format json";
    Outcome t = train(2, plan + " --steps 2 --warmup 1");
    ASSERT_EQ(t.status, 0) << zero << t.err;
    Outcome d = commscope::testing::run_shell(std::string(COMMSCOPE_BIN) + " describe" + plan);
    ASSERT_EQ(d.status, 0) << d.err;
    const auto described = nlohmann::json::parse(d.out)["comm"];
    const auto measured = nlohmann::json::parse(t.out)["communication"];
    ASSERT_FALSE(described.empty()) << zero;
    ASSERT_EQ(described.size(), measured.size()) << zero << d.out;
    for (const auto& c : described) {
      bool found = false;
      for (const auto& m : measured)
        if (m["group"] == c["group"] && m["collective"] == c["collective"]) {
          found = true;
          EXPECT_EQ(m["bytes_per_iteration"].get<double>(), c["bytes_per_rank"].get<double>())
              << zero << " " << c["collective"];
          EXPECT_EQ(m["calls_per_iteration"].get<double>(), c["calls"].get<double>())
              << zero << " " << c["collective"];
        }
      EXPECT_TRUE(found) << zero << " " << c["collective"];
    }
  }
}

}  // namespace

namespace {

// A damaged checkpoint is refused with one line, and so is one from another run.
TEST(Train, DamagedOrForeignCheckpointsAreRefused) {
  const std::string dir = commscope::testing::scratch() + "train_ckpt_damaged";
  std::filesystem::remove_all(dir);
  const std::string common = kSmall + "--warmup 1 --zero 1 --checkpoint " + dir;
  ASSERT_EQ(train(2, common + " --steps 2 --checkpoint-every 2").status, 0);
  const std::string file = dir + "/step2.rank1.bin";
  ASSERT_TRUE(std::filesystem::exists(file));
  // Another seed: the manifest says which field differs.
  Outcome o = train(2, common + " --steps 4 --resume --seed 7");
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("seed is 1234, this run has 7"), std::string::npos) << o.err;
  // Another head count: the DDP manifest was not compared on it (found by probing, 2026-11-30).
  std::string eight = common;
  eight.replace(eight.find("--heads 4"), 9, "--heads 8");
  o = train(2, eight + " --steps 4 --resume");
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("heads is 4, this run has 8"), std::string::npos) << o.err;
  // Another rank count (refused before launch since 2026-12-01, with status 2).
  o = train(1, kSmall + "--steps 4 --warmup 1 --zero 1 --checkpoint " + dir + " --resume");
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("ranks is 2, this run has 1"), std::string::npos) << o.err;
  // --steps at or below the checkpoint's step: nothing to do, said before training (it used to
  // run nothing and report a false communication mismatch).
  o = train(2, common + " --steps 2 --resume");
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("--steps: expected more than the checkpoint's step 2"), std::string::npos)
      << o.err;
  EXPECT_EQ(o.out, "");
  // One flipped byte: the checksum refuses the file, naming it.
  const std::string file0 = dir + "/step2.rank0.bin";
  std::filesystem::copy_file(file0, file0 + ".good");
  {
    std::fstream f(file0, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x01);
    f.seekp(100);
    f.write(&c, 1);
  }
  o = train(2, common + " --steps 4 --resume");
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("step2.rank0.bin: damaged"), std::string::npos) << o.err;
  // A missing rank file is said to be missing.
  std::filesystem::remove(file0);
  o = train(2, common + " --steps 4 --resume");
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("step2.rank0.bin: missing"), std::string::npos) << o.err;
  std::filesystem::rename(file0 + ".good", file0);
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
                           " --vocab 256 --layers 2 --hidden 64 --heads 4 --seq-length 32 "
                           "--micro-batch-size 4 --steps 40 --format json");
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
      commscope::testing::mpiexec(2) + COMMSCOPE_BIN +
      " train --steps 2 --warmup 0 --layers 2 --hidden 64 --vocab 256 --seq-length 32 --format "
      "json");
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
  const std::string dir = commscope::testing::scratch() + "train_ops_trace";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const int steps = 2;
  Outcome o = train(2,
                    " --layers 2 --hidden 64 --heads 4 --vocab 256 --seq-length 32 "
                    "--micro-batch-size 2 --global-batch-size 8 --steps " +
                        std::to_string(steps) + " --warmup 1 --trace " + dir + "/run.json");
  ASSERT_EQ(o.status, 0) << o.err;

  using commscope::OpKind;
  commscope::ScenarioInput in;
  in.model = commscope::testing::scratch() + "train_ops_model.json";
  {
    std::ofstream f(in.model);
    f << R"({"name": "tiny", "kind": "gpt", "layers": 2, "hidden": 64, "heads": 4, "ffn": 256,
             "vocab": 256, "seq_length": 32, "max_positions": 32, "dropout": false})";
  }
  in.system = "cpu-host";
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

  // --trace FILE: rank r writes FILE with .rank<r> before the extension.
  EXPECT_TRUE(std::filesystem::exists(dir + "/run.rank1.json"));
  std::ifstream f(dir + "/run.rank0.json");
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
// tiny model (gpt2-tiny-cpu resized: its 128 positions kept) has V h + P h + L (12 h^2 + 13 h)
// + 2 h = 256 x 64 + 128 x 64 + 2 x (12 x 64^2 + 13 x 64) + 128 = 124,672 parameters; rank 0 of
// 2 owns half.
TEST(Train, ZeroPartitionsWhatEachStageSays) {
  const double all = 124672.0 * 4, half = all / 2;
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
    Outcome o =
        train(2, kSmall + "--steps 1" + zero(e.strategy));  // the default warm-up clamps to 0
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
  const std::string dir = commscope::testing::scratch() + "train_analyze_traces";
  std::filesystem::remove_all(dir);
  Outcome t = train(2,
                    " --layers 2 --hidden 128 --heads 4 --vocab 512 --seq-length 64 "
                    "--micro-batch-size 2 --ddp-bucket-size 0.1 --steps 3 --warmup 0 --format json "
                    "--trace " +
                        dir + "/");
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
    // Each step is marked as PyTorch's profiler marks it (ProfilerStep#N): analyze gives each
    // the trainer's own step time and breakdown (the trace had no steps until 2026-12-02).
    ASSERT_EQ(r["steps"].size(), report["steps"].size());
    for (std::size_t k = 0; k < r["steps"].size(); ++k) {
      const auto &mine = r["steps"][k], &theirs = report["steps"][k];
      EXPECT_EQ(mine["name"], fmt::format("ProfilerStep#{}", theirs["step"].get<int>()));
      EXPECT_NEAR(mine["breakdown"]["wall_s"].get<double>(), theirs["time_s"].get<double>(), 2e-6);
      for (const char* key : {"compute_s", "overlapped_comm_s", "exposed_comm_s"})
        EXPECT_NEAR(mine["breakdown"][key].get<double>(), theirs["breakdown"][key].get<double>(),
                    1e-6)
            << k << " " << key;
    }
  }
  EXPECT_TRUE(found) << a.out;
}

}  // namespace
