// Stragglers: the expected maximum of n standard normals against its integral and closed
// forms, Blom's approximation against the integral, and the simulator's per-collective wait.
#include <gtest/gtest.h>

#include <cmath>

#include "commscope/cost/straggler.h"
#include "commscope/sim/simulator.h"
#include "commscope/workload/workload.h"
#include "test_util.h"

namespace commscope {
namespace {

using testing::plan;
using testing::scenario;

// E[max of 2] = 1/sqrt(pi), E[max of 3] = 3/(2 sqrt(pi)) (David & Nagaraja, Order Statistics,
// 3rd ed., Section 3.2); the integral reproduces both.
TEST(Straggler, ExactExpectedMaximumMatchesClosedForms) {
  EXPECT_EQ(expected_max_normal_exact(1), 0.0);
  EXPECT_NEAR(expected_max_normal_exact(2), 1 / std::sqrt(M_PI), 1e-9);
  EXPECT_NEAR(expected_max_normal_exact(3), 1.5 / std::sqrt(M_PI), 1e-9);
  // Increasing in n, and below sqrt(2 ln n) (the Gumbel bound) for large n.
  double prev = 0;
  for (long long n : {2LL, 4LL, 16LL, 256LL, 4096LL, 1LL << 20}) {
    const double e = expected_max_normal_exact(n);
    EXPECT_GT(e, prev) << n;
    EXPECT_LT(e, std::sqrt(2 * std::log(static_cast<double>(n)))) << n;
    prev = e;
  }
}

TEST(Straggler, BlomIsWithinFivePercentOfTheIntegral) {
  for (long long n : {2LL, 3LL, 4LL, 5LL, 8LL, 10LL, 16LL, 64LL, 100LL, 512LL, 1000LL, 4096LL,
                      10000LL, 1LL << 20}) {
    const double exact = expected_max_normal_exact(n), blom = expected_max_normal(n);
    EXPECT_NEAR(blom / exact, 1.0, 0.05) << n;
  }
  EXPECT_EQ(expected_max_normal(1), 0.0);
  EXPECT_EQ(expected_max_normal(0), 0.0);
}

TEST(Straggler, InverseNormalCdf) {
  EXPECT_NEAR(inverse_normal_cdf(0.5), 0.0, 1e-12);
  EXPECT_NEAR(inverse_normal_cdf(0.975), 1.959963984540054, 1e-9);
  EXPECT_NEAR(inverse_normal_cdf(0.001), -3.090232306167813, 1e-9);
  EXPECT_NEAR(inverse_normal_cdf(1 - 1e-9), 5.997807015, 1e-6);
}

// TP 8 inside a node: every tensor-parallel collective waits cv x E[max of 8] x (the compute
// since the previous one), and the waits are Event::wait in the timeline, so the profiler's
// communication exceeds the causal one by their sum. Off (cv 0): no wait.
TEST(Straggler, EveryCollectiveWaitsForTheSlowestRank) {
  Scenario sc = scenario("megatron-1.7b", "dgx-a100-80gb", plan(8, 8, 1, 1, 4));
  sc.system.scale.straggler_cv = 0;
  const Workload w0 = build_workload(sc);
  SimOptions o;
  o.timeline = true;
  const Prediction off = simulate(w0, o);
  EXPECT_EQ(off.straggler_wait, 0.0);
  for (const Event& e : off.timeline.events) EXPECT_EQ(e.wait, 0.0);

  sc.system.scale.straggler_cv = 0.05;
  const Workload w = build_workload(sc);
  const Prediction on = simulate(w, o);
  EXPECT_GT(on.iteration_time, off.iteration_time);
  EXPECT_GT(on.straggler_wait, 0.0);
  // The first tensor collective of the first forward: the compute before it, times cv E[max 8].
  double compute = 0;
  const Event* first = nullptr;
  for (const Event& e : on.timeline.events) {
    if (e.rank != 0 || e.microbatch != 0) continue;
    if (e.kind == EventKind::compute && !first) compute += e.dur;
    if (e.kind == EventKind::comm && e.group == CommGroup::tensor) {
      first = &e;
      break;
    }
  }
  ASSERT_NE(first, nullptr);
  EXPECT_NEAR(first->wait, 0.05 * expected_max_normal(8) * compute, 1e-12);
  // Per collective, not once: the waits of the timeline add up to the reported wait, and
  // the profiler's view holds them.
  double waits = 0;
  for (const Event& e : on.timeline.events) waits += e.wait;
  EXPECT_NEAR(waits, on.straggler_wait, 1e-9 * waits);
  int waited = 0;
  for (const Event& e : on.timeline.events) waited += e.wait > 0;
  EXPECT_GT(waited, 4 * sc.model.layers());  // every layer's collectives, every micro-batch
  EXPECT_GT(on.mean.profiler_comm, on.mean.comm);
  // Doubling the spread doubles the wait (to first order: the chain shifts, its compute not).
  sc.system.scale.straggler_cv = 0.10;
  const Prediction twice = simulate(build_workload(sc), o);
  EXPECT_NEAR(twice.straggler_wait / on.straggler_wait, 2.0, 1e-6);
}

// More ranks in the group, a longer wait: E[max of n] grows with n.
TEST(Straggler, LargerGroupsWaitLonger) {
  auto wait_for = [](int gpus) {
    PlanInput p = plan(gpus, 1, 1, 1, gpus);
    p.zero = 3;
    Scenario sc = scenario("gpt2-large", "dgx-a100-80gb", p);
    sc.system.scale.straggler_cv = 0.02;
    return simulate(build_workload(sc)).straggler_wait;
  };
  const double w8 = wait_for(8), w64 = wait_for(64), w512 = wait_for(512);
  EXPECT_GT(w8, 0.0);
  EXPECT_GT(w64, w8);
  EXPECT_GT(w512, w64);
}

}  // namespace
}  // namespace commscope

#include <nlohmann/json.hpp>

#include "commscope/report/predict.h"

namespace commscope {
namespace {

// predict's JSON row names the path that priced each collective, the scale effects and the
// profiler's communication beside the causal one; the text of one prediction lists them.
TEST(Straggler, PredictShowsPathsScaleEffectsAndProfilerView) {
  ScenarioInput in;
  in.model = "megatron-1.7b";
  in.system = "dgx-a100-80gb";
  in.plan = testing::plan(32, 8, 2, 1, 16);
  auto r = predict_sweep({in}, {});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto j = predictions_json(r->rows, false)[0];
  ASSERT_TRUE(j.contains("cost_path"));
  for (const auto& [c, paths] : j["cost_path"].items()) {
    ASSERT_TRUE(paths.is_array()) << c;
    EXPECT_FALSE(paths.empty()) << c;
    for (const auto& p : paths) EXPECT_EQ(p.get<std::string>().rfind("model:", 0), 0u) << p;
  }
  EXPECT_TRUE(j["cost_path"].contains("all_reduce"));
  EXPECT_EQ(j["cost_path"]["send"], nlohmann::json::array({"model:p2p/Simple"}));
  const auto& e = j["scale_effects"];
  EXPECT_EQ(e["straggler_cv"], 0.01);
  EXPECT_GT(e["straggler_wait_s"].get<double>(), 0.0);
  EXPECT_EQ(e["oversubscription"], 1.0);
  EXPECT_TRUE(e["inter_node_groups"].contains("data"));
  // Profiler's view: at least the causal communication, and the pipeline's receives waited.
  EXPECT_GE(j["profiler_comm_s"].get<double>(), j["comm_s"].get<double>());
  const auto& pg = j["comm_by_group"]["pipeline"];
  EXPECT_GT(pg["profiler_s"].get<double>(), pg["total_s"].get<double>());
  const std::string text = render_predictions(r->rows, Format::table, false);
  EXPECT_NE(text.find("prof comm"), std::string::npos);
  EXPECT_NE(text.find("collective paths: "), std::string::npos);
  EXPECT_NE(text.find("scale effects: stragglers cv 0.01"), std::string::npos);
}

}  // namespace
}  // namespace commscope

namespace commscope {
namespace {

// A strong-scaling sweep (global batch fixed, GPUs doubling) of ZeRO-3 as in Narayanan et al.'s
// Table 2 (GPT-3 175B, 384 to 1,536 A100s): the predicted efficiency falls with every doubling
// (per-rank communication stays while compute halves; ring latency grows with the ranks), with
// the stragglers off and on. (On, it need not fall faster: the wait is a share of compute,
// which shrinks per GPU, while E[max of n] grows only as sqrt(2 ln n).)
TEST(Straggler, StrongScalingEfficiencyFalls) {
  auto sweep = [](double cv) {
    std::vector<ScenarioInput> in;
    for (int gpus : {384, 768, 1536}) {
      ScenarioInput s;
      s.model = "gpt3-175b";
      s.system = "dgx-a100-80gb";
      s.plan = testing::plan(gpus, 1, 1, 1536 / gpus, 1536);
      s.plan.zero = 3;
      in.push_back(s);
    }
    SweepOptions o;
    o.scaling = Scaling::strong;
    auto r = predict_sweep(in, o);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    std::vector<double> eff;
    if (!r.ok()) return eff;
    for (auto row : r->rows) {
      // The same rows with the preset's spread replaced: simulate again.
      row.scenario.system.scale.straggler_cv = cv;
      const Prediction p = simulate(build_workload(row.scenario));
      eff.push_back(p.iteration_time);
    }
    // Efficiency against the first point: t(384) x 384 / (t(n) x n).
    std::vector<double> out;
    for (std::size_t i = 0; i < eff.size(); ++i)
      out.push_back(eff[0] * 384 / (eff[i] * (384 << i)));
    return out;
  };
  const auto off = sweep(0), on = sweep(0.02);
  ASSERT_EQ(off.size(), 3u);
  ASSERT_EQ(on.size(), 3u);
  EXPECT_LT(off[1], 1.0);
  EXPECT_LT(off[2], off[1]);
  EXPECT_LT(on[1], 1.0);
  EXPECT_LT(on[2], on[1]);
}

}  // namespace
}  // namespace commscope
