// The pure parts of `commscope characterize`: errors, the seeds' projection, the summary, the
// option checks, and the compute calibration's fit (calib/compute_fit.h).
#include <gtest/gtest.h>

#include <fstream>

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "commscope/calib/compute_fit.h"
#include "commscope/cost/compute.h"
#include "commscope/launch/characterize.h"
#include "commscope/spec/preset.h"
#include "commscope/spec/scenario.h"
#include "commscope/timeline/breakdown_json.h"
#include "commscope/workload/workload.h"
#include "test_util.h"

namespace {

using namespace commscope;
using namespace commscope::launch;
using nlohmann::json;

TEST(Characterize, ErrorIsRelativeToTheMeasurement) {
  EXPECT_NEAR(error_pct(2.0, 2.2), 10.0, 1e-12);
  EXPECT_NEAR(error_pct(2.0, 1.5), -25.0, 1e-12);
  EXPECT_DOUBLE_EQ(error_pct(0.0, 1.0), 0.0);
}

// The seeds' equation (ExaComm'24 panel, 003 seed), computed by hand: t(g) = 1.0 s of which
// 0.4 s exposed communication; the modelled communication grows from 0.3 s to 0.45 s, so
// eff = 0.3 / 0.45 = 2/3 and t(n) = 0.6 x 1 + 0.4 / (2/3) = 1.2 s.
TEST(Characterize, ProjectionIsTheSeedsEquation) {
  EXPECT_NEAR(project_iteration(1.0, 0.4, 1.0, 0.3, 0.45), 1.2, 1e-12);
  // Twice the work per rank doubles the compute part only.
  EXPECT_NEAR(project_iteration(1.0, 0.4, 2.0, 0.3, 0.3), 1.6, 1e-12);
  // No modelled communication at n: the exposed part is kept as it was.
  EXPECT_NEAR(project_iteration(1.0, 0.4, 1.0, 0.3, 0.0), 1.0, 1e-12);
}

TEST(Characterize, SummaryAveragesAbsoluteErrors) {
  json runs = json::array();
  runs.push_back({{"iteration_error_pct", -4.0},
                  {"collectives", {{{"measured_s", 1.0}, {"error_pct", -10.0}}}}});
  runs.push_back(
      {{"iteration_error_pct", 2.0},
       {"collectives",
        {{{"measured_s", 1.0}, {"error_pct", 20.0}}, {{"measured_s", 0.0}, {"error_pct", 0.0}}}}});
  const json s = summarize(runs);
  EXPECT_EQ(s["runs"], 2);
  EXPECT_DOUBLE_EQ(s["iteration_mape_pct"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(s["iteration_max_error_pct"].get<double>(), 4.0);
  // The collective measured at 0 s has no relative error and is left out.
  EXPECT_DOUBLE_EQ(s["collective_mape_pct"].get<double>(), 15.0);
  // Weighted by time: |0.9 - 1| + |1.2 - 1| over 2 s measured (the rows carry predicted_s).
  runs[0]["collectives"][0]["predicted_s"] = 0.9;
  runs[1]["collectives"][0]["predicted_s"] = 1.2;
  EXPECT_NEAR(summarize(runs)["collective_weighted_error_pct"].get<double>(), 15.0, 1e-9);
  // The profiler view's, where rows have it.
  runs[0]["collectives"][0]["measured_profiler_s"] = 2.0;
  runs[0]["collectives"][0]["profiler_error_pct"] = -30.0;
  EXPECT_DOUBLE_EQ(summarize(runs)["collective_profiler_mape_pct"].get<double>(), 30.0);
}

TEST(Characterize, CollectiveRowsCarryBothViews) {
  Breakdown m, p;
  m.by_collective[Collective::all_reduce] = {0.5, 0.2, 0.6};
  p.by_collective[Collective::all_reduce] = {0.4, 0.1, 0.45};
  p.by_collective[Collective::all_gather] = {0.1, 0.0, 0.1};
  const json rows = collective_rows(m, p);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["collective"], "all_reduce");
  EXPECT_DOUBLE_EQ(rows[0]["measured_profiler_s"].get<double>(), 0.6);
  EXPECT_DOUBLE_EQ(rows[0]["predicted_profiler_s"].get<double>(), 0.45);
  EXPECT_NEAR(rows[0]["error_pct"].get<double>(), -20.0, 1e-9);
  EXPECT_EQ(rows[1]["collective"], "all_gather");
  EXPECT_DOUBLE_EQ(rows[1]["error_pct"].get<double>(), 0.0);  // not measured
  // A pipeline's transfers: the trainer's time is in its receives (the sends are posts), the
  // simulator's on the send; one send_recv row holds both sides.
  Breakdown mp, pp;
  mp.by_collective[Collective::send] = {0.001, 0.001, 0.001};
  mp.by_collective[Collective::recv] = {0.199, 0.1, 0.299};
  pp.by_collective[Collective::send] = {0.25, 0.2, 0.3};
  const json p2p = collective_rows(mp, pp);
  ASSERT_EQ(p2p.size(), 1u);
  EXPECT_EQ(p2p[0]["collective"], "send_recv");
  EXPECT_NEAR(p2p[0]["measured_s"].get<double>(), 0.2, 1e-12);
  EXPECT_NEAR(p2p[0]["measured_profiler_s"].get<double>(), 0.3, 1e-12);
  EXPECT_NEAR(p2p[0]["error_pct"].get<double>(), 25.0, 1e-9);
  EXPECT_NEAR(p2p[0]["profiler_error_pct"].get<double>(), 0.0, 1e-9);
}

TEST(Characterize, StrategyNames) {
  auto st = parse_strategy("ddp");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->zero, 0);
  EXPECT_EQ(st->model_parallel(), 1);
  EXPECT_EQ(st->micro_batches(), 1);
  st = parse_strategy("zero3");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->zero, 3);
  st = parse_strategy("tp2");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->tp, 2);
  EXPECT_EQ(st->pp, 1);
  EXPECT_EQ(st->micro_batches(), 1);
  st = parse_strategy("pp4");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->pp, 4);
  EXPECT_EQ(st->micro_batches(), 8);  // 1F1B over 2 x PP micro-batches
  st = parse_strategy("tp2pp2");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->tp, 2);
  EXPECT_EQ(st->pp, 2);
  EXPECT_EQ(st->model_parallel(), 4);
  EXPECT_EQ(st->name, "tp2pp2");
  for (const char* bad : {"", "zero0", "zero4", "tp", "tp1", "tp02", "tp65", "pp2tp2", "tp2pp",
                          "tp2x", "dp2", "tp99999999999", "zero12"})
    EXPECT_FALSE(parse_strategy(bad)) << bad;
  for (const std::string& name : kDefaultStrategies) EXPECT_TRUE(parse_strategy(name)) << name;
}

// The measurement is the mean over ranks of each rank's averages: two ranks whose step times,
// compute and all-reduce shares differ give their means, per collective too, and the profiler
// view (waits included) separately from the causal one.
TEST(Characterize, MeanOverRanks) {
  Breakdown a, b;
  a.wall = 1.0, a.compute = 0.6, a.comm = 0.3, a.exposed = 0.2, a.overlapped = 0.1;
  a.profiler_comm = 0.5;
  a.by_collective[Collective::all_reduce] = {0.3, 0.2, 0.5};  // rank 0 waited 0.2 s
  a.by_group[CommGroup::data] = {0.3, 0.2, 0.5};
  b.wall = 1.2, b.compute = 0.8, b.comm = 0.3, b.exposed = 0.1, b.overlapped = 0.2;
  b.profiler_comm = 0.3;
  b.by_collective[Collective::all_reduce] = {0.3, 0.1, 0.3};  // rank 1 did not wait
  b.by_collective[Collective::send] = {0.1, 0.1, 0.1};
  json ranks = json::array();
  for (auto [br, t] : {std::pair{a, 1.0}, std::pair{b, 1.4}}) {
    json e = breakdown_to_json(br);
    e["rank"] = ranks.size();
    e["time_s"] = t;
    e["tp_rank"] = 0;
    ranks.push_back(e);
  }
  auto m = mean_over_ranks(ranks, "x");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_NEAR(m->first, 1.2, 1e-12);
  const Breakdown& r = m->second;
  EXPECT_NEAR(r.compute, 0.7, 1e-12);
  EXPECT_NEAR(r.exposed, 0.15, 1e-12);
  EXPECT_NEAR(r.profiler_comm, 0.4, 1e-12);
  EXPECT_NEAR(r.by_collective[Collective::all_reduce].total, 0.3, 1e-12);
  EXPECT_NEAR(r.by_collective[Collective::all_reduce].profiler, 0.4, 1e-12);
  EXPECT_NEAR(r.by_collective[Collective::send].total, 0.05, 1e-12);
  EXPECT_NEAR(r.by_group[CommGroup::data].total, 0.15, 1e-12);
  // Rows from it carry the error of each view.
  Breakdown p;
  p.by_collective[Collective::all_reduce] = {0.27, 0.1, 0.36};
  const json rows = collective_rows(r, p, "all");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["group"], "all");
  EXPECT_NEAR(rows[0]["error_pct"].get<double>(), -10.0, 1e-9);
  EXPECT_NEAR(rows[0]["profiler_error_pct"].get<double>(), -10.0, 1e-9);
  // Bad entries name where they are.
  EXPECT_FALSE(mean_over_ranks(json::array(), "x").ok());
  EXPECT_FALSE(mean_over_ranks(json(), "x").ok());
  json bad = ranks;
  bad[1].erase("time_s");
  auto e = mean_over_ranks(bad, "run.json");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("run.json: per_rank[1]: time_s"), std::string::npos);
  bad = ranks;
  bad[0]["compute_s"] = "x";
  EXPECT_FALSE(mean_over_ranks(bad, "x").ok());
}

// The mean over nodes of each window's sending rate, at full scale: nodes at 50 and 70 Mb/s in
// a window make 60 Mb/s, x100 = 6 Gb/s; windows only as far as every node has one.
TEST(Characterize, ThroughputSeriesIsTheMeanOverNodes) {
  std::vector<NodeTraffic> t(2);
  t[0].samples = {{0.2, 50e6}, {0.4, 10e6}, {0.6, 5e6}};
  t[1].samples = {{0.2, 70e6}, {0.4, 30e6}};
  const json s = throughput_series(t, 100);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_DOUBLE_EQ(s[0]["t_s"].get<double>(), 0.2);
  EXPECT_NEAR(s[0]["gbps"].get<double>(), 6.0, 1e-12);
  EXPECT_NEAR(s[1]["gbps"].get<double>(), 2.0, 1e-12);
  EXPECT_TRUE(throughput_series({}, 100).empty());
}

TEST(Characterize, ProfileLabels) {
  EXPECT_EQ(profile_label("tcp-10g,nodes=2"), "tcp-10g");
  EXPECT_EQ(profile_label("rate=200M"), "rate-200M");
}

TEST(Characterize, OptionsAreCheckedWithTheFlagNamed) {
  CharacterizeOptions o;
  o.out = commscope::testing::scratch() + "out";
  auto msg = [&] {
    Status s = check_characterize_options(o);
    return s.ok() ? std::string() : s.error().message;
  };
  EXPECT_NE(msg().find("--emulate/--hostfile"), std::string::npos);
  o.emulate = {"tcp-10g,nodes=2"};
  EXPECT_EQ(msg(), "");
  o.ranks = {2, 3};
  EXPECT_NE(msg().find("--emulate: expected nodes=K dividing every rank count"), std::string::npos);
  o.ranks = {0};
  EXPECT_NE(msg().find("--ranks"), std::string::npos);
  o.ranks = {};
  o.strategies = {"zero4"};
  EXPECT_NE(msg().find("--strategies: expected ddp|zero1|zero2|zero3|tp<N>|pp<M>|tp<N>pp<M> (N, "
                       "M from 2 to 64), got 'zero4'"),
            std::string::npos);
  // Model parallelism: TP x PP must divide some rank count; each name once.
  o.strategies = {"tp2pp2"};
  o.ranks = {2};
  EXPECT_NE(msg().find("--strategies: expected a strategy whose TP x PP divides some rank count "
                       "of --ranks, got 'tp2pp2' (TP x PP = 4)"),
            std::string::npos);
  o.ranks = {2, 4};
  EXPECT_EQ(msg(), "");
  o.strategies = {"tp2", "ddp", "tp2"};
  EXPECT_NE(msg().find("distinct strategies, got 'tp2' twice"), std::string::npos);
  o.strategies = {"tp1"};
  EXPECT_NE(msg().find("got 'tp1'"), std::string::npos);
  o.ranks = {};
  o.strategies = {};
  o.emulate = {"tcp-10g", "tcp-10g,nodes=2"};
  EXPECT_NE(msg().find("distinct"), std::string::npos);
  o.emulate = {"nonsense"};
  EXPECT_EQ(msg().rfind("--emulate: expected", 0), 0u) << msg();  // once ("--emulate: --emulate:")
  o.emulate = {"tcp-10g"};
  o.steps = 3;
  o.warmup = 3;
  EXPECT_NE(msg().find("--warmup"), std::string::npos);
  o.warmup = -2;
  EXPECT_NE(msg().find("--warmup: expected a non-negative integer, got -2"), std::string::npos);
  // Negative values were replaced by the defaults (found by probing, 2026-11-30); a hostfile
  // that does not exist was found only by mpirun, after the folder was made.
  o.warmup = 1;
  o.steps = -7;
  EXPECT_EQ(msg(), "--steps: expected 2 to 10000, got -7");
  o.steps = 3;
  o.micro_batch = -5;
  EXPECT_EQ(msg(), "--micro-batch-size: expected 1 to 4096, got -5");
  o.micro_batch.reset();
  o.emulate = {};
  o.hostfile = commscope::testing::scratch() + "no-such-hostfile";
  EXPECT_EQ(msg().rfind("--hostfile: ", 0), 0u) << msg();
  // A hostfile naming no host, and a rank count given twice, reached mpirun (found by probing,
  // 2026-12-02).
  o.hostfile = commscope::testing::scratch() + "empty-hostfile";
  std::ofstream(o.hostfile) << "# no hosts\n\n";
  o.nodes = 1;
  EXPECT_EQ(msg(),
            "--hostfile: expected a file naming the nodes (one host a line, mpirun's "
            "format), got '" +
                o.hostfile + "' with none");
  std::ofstream(o.hostfile) << "# one host\nlocalhost slots=4\n";
  EXPECT_EQ(msg(), "");
  o.ranks = {2, 4, 2};
  EXPECT_EQ(msg(), "--ranks: expected distinct rank counts, got 2 twice");
}

// --compute-only needs no --emulate/--hostfile and refuses either, naming the flag.
TEST(Characterize, ComputeOnlyNeedsNoNetwork) {
  CharacterizeOptions o;
  o.out = commscope::testing::scratch() + "out";
  o.compute_only = true;
  EXPECT_TRUE(check_characterize_options(o).ok());
  o.emulate = {"tcp-10g"};
  Status s = check_characterize_options(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message.rfind("--compute-only: expected no --emulate/--hostfile", 0), 0u);
  o.emulate = {};
  o.hostfile = "hosts";
  EXPECT_FALSE(check_characterize_options(o).ok());
  o.hostfile = "";
  // It runs no training: the runs' flags were ignored in silence (found by probing, 2026-12-02).
  o.steps = 4;
  s = check_characterize_options(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message,
            "--compute-only: expected no --strategies/--steps/--warmup (it measures kernels and "
            "runs no training), got --steps");
  o.steps.reset();
  o.strategies = {"ddp"};
  EXPECT_FALSE(check_characterize_options(o).ok());
  o.strategies = {};
  o.warmup = 1;
  EXPECT_FALSE(check_characterize_options(o).ok());
  o.warmup.reset();
  EXPECT_TRUE(check_characterize_options(o).ok());
  // --model naming the folder's model.json, which characterize writes: the user's file was
  // replaced by the model made of it (found by probing, 2026-12-02).
  std::filesystem::create_directories(o.out);
  std::ofstream(o.out + "/model.json") << "{}";
  o.model = o.out + "/./model.json";
  s = check_characterize_options(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message,
            "--model: expected a file outside the -o folder's model.json (characterize writes "
            "it), got '" +
                o.model + "'");
  o.model = "gpt2-tiny-cpu";
  o.hostfile = "hosts";
  o.compute_only = false;  // the full loop still needs one of them
  o.hostfile = "";
  EXPECT_FALSE(check_characterize_options(o).ok());
  // --nodes counts a hostfile's nodes: elsewhere it was accepted and ignored (found by probing,
  // 2026-11-30).
  o.compute_only = true;
  o.nodes = 2;
  s = check_characterize_options(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message.rfind("--nodes: expected it only with --hostfile", 0), 0u)
      << s.error().message;
  // An unknown model is refused before the output folder is made: nothing is left behind.
  o.nodes = 0;
  o.model = "no-such-model";
  o.out = commscope::testing::scratch() + "unknown-model-out";
  std::filesystem::remove_all(o.out);
  auto r = characterize(o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("no-such-model"), std::string::npos) << r.error().message;
  EXPECT_FALSE(std::filesystem::exists(o.out));
}

// The output folder is new, empty or characterize's own: a folder of other files is refused
// before anything is written into it (it wrote model.json, CSVs and report.html into any
// existing folder until 2026-12-02), and so is a file.
TEST(Characterize, OutputFolderOfOtherFilesIsRefused) {
  namespace fs = std::filesystem;
  CharacterizeOptions o;
  o.compute_only = true;
  o.model = "gpt2-tiny-cpu";
  o.out = commscope::testing::scratch() + "someone-elses-folder";
  fs::remove_all(o.out);
  fs::create_directories(o.out);
  std::ofstream(o.out + "/model.json") << "{\"mine\": true}\n";
  auto r = characterize(o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message,
            "-o/--output: expected a new or empty folder, or one characterize wrote before (it "
            "holds .commscope-characterize), got '" +
                o.out + "', which holds other files");
  // untouched: the one file, as it was
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(o.out)) names.push_back(e.path().filename());
  EXPECT_EQ(names, std::vector<std::string>{"model.json"});
  EXPECT_EQ(commscope::testing::slurp(o.out + "/model.json"), "{\"mine\": true}\n");
  // a file named as the folder
  o.out += "/model.json";
  r = characterize(o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message,
            "-o/--output: expected a folder, got '" + o.out + "' (not a folder)");
  EXPECT_EQ(commscope::testing::slurp(o.out), "{\"mine\": true}\n");
}

// The fit reproduces a host that behaves exactly as the cost model says: kernels timed from a
// known calibration (one per op of the one-rank workload) are fitted back so that the fitted
// system prices the same ops within 1% of the kernels' total, and the fastest GEMM is found.
TEST(Characterize, ComputeFitReproducesAModelledHost) {
  ModelSpec model = commscope::testing::model("gpt2-tiny-cpu");
  auto base = load_system("cpu-host");
  ASSERT_TRUE(base.ok());
  SystemSpec truth = *base;
  truth.gpu.peak.fp32 = FlopsPerSecond(1e11);
  truth.gpu.memory_bandwidth = BytesPerSecond(3e9);
  truth.calibration.gemm_efficiency = 0.6;
  truth.calibration.gemm_half_flops = 5e7;
  truth.calibration.attention_efficiency = 0.2;
  truth.calibration.memory_efficiency = 1;
  truth.calibration.kernel_overhead = Seconds(0);
  PlanInput plan;
  plan.gpus = 1;
  plan.nodes = 1;
  plan.micro_batch = 2;
  plan.precision = Precision::fp32;
  auto net = load_network("tcp-10g");
  ASSERT_TRUE(net.ok());
  auto sc = resolve_scenario(model, truth, *net, plan);
  ASSERT_TRUE(sc.ok()) << sc.error().message;
  const Workload w = build_workload(*sc);
  ComputeMeasurement m;
  m.batch = 2;
  double total = 0, fastest = 0;
  auto add = [&](const Op& op, bool backward) {
    if (op.kind != OpKind::compute) return;
    KernelTiming k;
    k.name = std::string(op.name);
    k.backward = backward;
    k.calls = 1;
    k.seconds = compute_time(op, truth.gpu, truth.calibration).value();
    if (op.compute == ComputeClass::gemm) {
      k.m = op.m, k.n = op.n, k.k = op.k;
      k.flops = op.flops;
      fastest = std::max(fastest, op.flops / k.seconds / 1e12);
    } else if (op.compute == ComputeClass::attention) {
      k.name = "attn_scores";
      k.flops = op.flops;
    } else if (op.phase == Phase::optimizer) {
      m.optimizer_s += k.seconds;
      total += k.seconds;
      return;
    }
    total += k.seconds;
    m.forward_backward_s += k.seconds;
    m.kernels.push_back(k);
  };
  for (const Op& op : w.roles[0].chunks[0].forward.ops()) add(op, false);
  for (const Op& op : w.roles[0].chunks[0].backward.ops()) add(op, true);
  for (const Op& op : w.roles[0].step.ops()) add(op, false);
  auto fit = fit_compute(m, model, *base);
  ASSERT_TRUE(fit.ok()) << fit.error().message;
  EXPECT_NEAR(fit->gemm_tflops, fastest, 1e-12);
  EXPECT_NEAR(fit->measured_compute_s, total, total * 1e-9);
  EXPECT_NEAR(fit->predicted_compute_s, total, total * 0.01);
  EXPECT_NEAR(fit->system.calibration.microbatch_overhead.value(), 0.0, 1e-12);
  // What predict reads back is the same system.
  auto again = system_from_json(to_json(fit->system), "fit");
  ASSERT_TRUE(again.ok()) << again.error().message;
  // A measurement without a GEMM is refused.
  ComputeMeasurement none;
  none.forward_backward_s = 1;
  EXPECT_FALSE(fit_compute(none, model, *base).ok());
}

// The trainer's ZeRO plans compute the global gradient norm from every rank's shard: one
// all-reduce of one fp64 scalar over the data-parallel group per step, after the gradients
// are reduced and before the optimizer. DDP holds the whole gradient and issues none.
TEST(Characterize, ZeroPlansAllReduceTheGradientNorm) {
  ModelSpec model = commscope::testing::model("gpt2-tiny-cpu");
  auto sys = load_system("cpu-host");
  auto net = load_network("tcp-10g");
  ASSERT_TRUE(sys.ok() && net.ok());
  for (int zero = 0; zero <= 3; ++zero) {
    for (int gpus : {1, 4}) {
      PlanInput plan;
      plan.gpus = gpus;
      plan.nodes = 1;
      plan.zero = zero;
      plan.micro_batch = 2;
      plan.precision = Precision::fp32;
      auto sc = resolve_scenario(model, *sys, *net, plan);
      ASSERT_TRUE(sc.ok()) << sc.error().message;
      const Workload w = build_workload(*sc);
      int norms = 0, adam_at = -1, norm_at = -1, i = 0;
      for (const Op& op : w.roles[0].step.ops()) {
        if (op.kind == OpKind::comm && op.name == "grad_norm_all_reduce") {
          ++norms;
          norm_at = i;
          EXPECT_EQ(op.collective, Collective::all_reduce);
          EXPECT_EQ(op.group, CommGroup::data);
          EXPECT_EQ(op.group_size, gpus);
          EXPECT_DOUBLE_EQ(op.bytes, 8.0);
        }
        if (op.kind == OpKind::compute && op.name == "adam") adam_at = i;
        ++i;
      }
      const bool expected = zero >= 1 && gpus > 1;
      EXPECT_EQ(norms, expected ? 1 : 0) << "zero " << zero << ", " << gpus << " ranks";
      if (expected) {
        EXPECT_LT(norm_at, adam_at) << "zero " << zero;
      }
    }
  }
}

}  // namespace
