// Speed work must not change a prediction: a few hundred varied plans (DDP, ZeRO 1-3,
// Megatron, DeepSpeed, FSDP with every sharding, TP, PP with every schedule, virtual stages,
// sequence parallel, recompute, curves, stragglers on and off) predicted by today's code and
// compared field by field with tests/data/sim/golden_predictions.csv, which the code BEFORE the
// speed work wrote (commit "sim: golden predictions of 300 varied plans", built from that
// commit's parent's simulator with COMMSCOPE_WRITE_GOLDEN=<file> set when running this test).
// Each value must agree within 1e-12 of itself (plus 1e-15 of the iteration time, for
// differences of nearly equal sums).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "commscope/sim/evaluator.h"
#include "commscope/sim/simulator.h"
#include "test_util.h"

namespace commscope {
namespace {

// Deterministic choices (a 64-bit LCG), the same on every platform.
struct Lcg {
  std::uint64_t s = 0x2545F4914F6CDD1DULL;
  int pick(int n) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<int>((s >> 33) % static_cast<std::uint64_t>(n));
  }
  template <class T>
  T of(std::initializer_list<T> l) {
    return *(l.begin() + pick(static_cast<int>(l.size())));
  }
};

// A network with measured curves of the shape of a nccl-tests sweep (as perf/bench_predict).
NetworkProtocol with_curves(NetworkProtocol net) {
  std::vector<BusBwCurve> curves;
  for (Collective c : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter,
                       Collective::send})
    for (int nodes : {1, 2, 4, 8}) {
      BusBwCurve cv;
      cv.collective = c;
      cv.scope = nodes > 1 ? CurveScope::inter_node : CurveScope::intra_node;
      cv.nodes = nodes, cv.ranks = nodes * 8;
      const double peak = nodes > 1 ? net.achievable.value() * 8 : 200e9;
      for (double b = 8; b <= 8.6e9; b *= 2)
        cv.points.push_back({b, BytesPerSecond(peak * b / (b + 4e6))});
      curves.push_back(std::move(cv));
    }
  net.curves = std::move(curves);
  return net;
}

struct Case {
  std::string model, system;
  bool curves = false, stragglers = true;
  PlanInput plan;
  std::string key() const {
    const PlanInput& p = plan;
    std::ostringstream o;
    o << model << '/' << system << (curves ? "/curves" : "") << (stragglers ? "" : "/still")
      << " gpus=" << *p.gpus << " tp=" << *p.tp << " pp=" << *p.pp << " v=" << *p.virtual_stages
      << " zero=" << *p.zero << " mb=" << *p.micro_batch << " gb=" << *p.global_batch
      << " sched=" << to_string(*p.schedule) << " fw=" << to_string(*p.framework)
      << " rc=" << to_string(*p.recompute) << " sp=" << *p.sequence_parallel
      << " ogr=" << *p.overlap_grad_reduce << " opg=" << *p.overlap_param_gather
      << " fsdp=" << to_string(*p.fsdp_sharding) << " dopt=" << *p.use_distributed_optimizer
      << " order=" << static_cast<int>(*p.rank_order);
    return o.str();
  }
};

struct Specs {
  ModelSpec model;
  SystemSpec system;
  NetworkProtocol network;
};

Specs specs_of(const Case& c) {
  Specs s;
  s.model = testing::model(c.model);
  auto sys = load_system(c.system);
  EXPECT_TRUE(sys.ok());
  s.system = *sys;
  if (!c.stragglers) s.system.scale.straggler_cv = 0;
  auto net = load_network(s.system.network);
  EXPECT_TRUE(net.ok());
  s.network = c.curves ? with_curves(*net) : *net;
  return s;
}

// The plans: drawn until `want` of them resolve.
std::vector<Case> cases(std::size_t want) {
  Lcg r;
  std::vector<Case> out;
  for (int tries = 0; tries < 200000 && out.size() < want; ++tries) {
    Case c;
    c.model = r.of({"gpt2-medium", "llama2-13b", "llama2-7b", "t5-base", "gpt2-large"});
    c.system = r.of({"dgx-a100-80gb", "polaris", "dgx-h100"});
    c.curves = r.pick(3) == 0;
    c.stragglers = r.pick(4) != 0;
    PlanInput& p = c.plan;
    p.gpus = r.of({8, 16, 32, 64});
    p.tp = r.of({1, 2, 4, 8});
    p.pp = r.of({1, 1, 2, 4, 8});
    p.virtual_stages = r.of({1, 1, 2, 3});
    p.schedule = r.of({Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved});
    if (*p.virtual_stages > 1) p.schedule = Schedule::interleaved;
    if (*p.schedule == Schedule::interleaved && *p.virtual_stages == 1) p.virtual_stages = 2;
    p.zero = r.of({0, 1, 2, 3});
    p.micro_batch = r.of<std::int64_t>({1, 2, 4});
    p.global_batch = r.of<std::int64_t>({32, 64, 128, 256});
    p.framework = r.of({Framework::none, Framework::none, Framework::megatron, Framework::deepspeed,
                        Framework::fsdp});
    p.recompute = r.of({Recompute::none, Recompute::selective, Recompute::full});
    p.sequence_parallel = r.pick(2) == 0;
    p.overlap_grad_reduce = r.pick(3) != 0;
    p.overlap_param_gather = r.pick(3) != 0;
    p.fsdp_sharding = r.of({FsdpSharding::full_shard, FsdpSharding::shard_grad_op,
                            FsdpSharding::hybrid_shard, FsdpSharding::no_shard});
    p.use_distributed_optimizer = r.pick(2) == 0;
    p.rank_order = r.of({RankOrder::tp_dp_pp, RankOrder::tp_pp_dp});
    p.precision = Precision::bf16;
    // Keep only the fields a framework reads, so resolve does not reject the rest.
    PlanInput q = p;
    if (*p.framework != Framework::fsdp) q.fsdp_sharding.reset();
    if (*p.framework == Framework::fsdp) q.zero.reset();
    if (*p.framework != Framework::megatron) q.use_distributed_optimizer.reset();
    if (*p.tp == 1) q.sequence_parallel.reset();
    if (*p.pp == 1) q.schedule.reset(), q.virtual_stages.reset();
    const Specs s = specs_of(c);
    if (!resolve_scenario(s.model, s.system, s.network, q).ok()) continue;
    c.plan = p;  // the key names every field; the resolved plan is q's
    out.push_back(c);
  }
  return out;
}

PlanInput resolved_input(const Case& c) {
  const PlanInput& p = c.plan;
  PlanInput q = p;
  if (*p.framework != Framework::fsdp) q.fsdp_sharding.reset();
  if (*p.framework == Framework::fsdp) q.zero.reset();
  if (*p.framework != Framework::megatron) q.use_distributed_optimizer.reset();
  if (*p.tp == 1) q.sequence_parallel.reset();
  if (*p.pp == 1) q.schedule.reset(), q.virtual_stages.reset();
  return q;
}

void push(std::vector<double>& v, const Breakdown& b) {
  for (double x : {b.wall, b.compute, b.comm, b.overlapped, b.exposed, b.memcpy, b.idle, b.bubble,
                   b.profiler_comm})
    v.push_back(x);
  // The golden file was written when there were four communication groups (data, tensor,
  // pipeline, embedding); the groups added since (expert, context, expert-data) carry nothing
  // in these dense plans without CP, and must stay empty.
  constexpr std::size_t kGoldenGroups = 4;
  for (std::size_t g = 0; g < b.by_group.v.size(); ++g) {
    const auto& s = b.by_group.v[g];
    if (g < kGoldenGroups)
      v.insert(v.end(), {s.total, s.exposed, s.profiler});
    else
      EXPECT_EQ(s.total + s.profiler, 0.0) << "group " << g;
  }
  for (const auto& s : b.by_collective.v) v.insert(v.end(), {s.total, s.exposed, s.profiler});
}

// Every number of a prediction, in a fixed order.
std::vector<double> fields(const Prediction& p) {
  std::vector<double> v = {p.iteration_time, p.straggler_wait,
                           static_cast<double>(p.stages.size())};
  push(v, p.mean);
  for (const auto& s : p.stages) {
    v.push_back(s.stage);
    v.push_back(s.end);
    push(v, s.breakdown);
  }
  return v;
}

std::vector<double> straightforward(const Case& c) {
  const Specs s = specs_of(c);
  auto sc = resolve_scenario(s.model, s.system, s.network, resolved_input(c));
  EXPECT_TRUE(sc.ok());
  return fields(simulate(build_workload(*sc)));
}

constexpr std::size_t kCases = 300;

std::string golden_path() {
  return COMMSCOPE_SOURCE_DIR "/tests/data/sim/golden_predictions.csv";
}

struct Golden {
  std::string key;
  std::vector<double> v;
};

std::vector<Golden> read_golden() {
  std::ifstream in(golden_path());
  EXPECT_TRUE(in) << golden_path();
  std::vector<Golden> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    Golden g;
    std::istringstream row(line);
    std::getline(row, g.key, ',');
    std::string cell;
    while (std::getline(row, cell, ',')) g.v.push_back(std::strtod(cell.c_str(), nullptr));
    out.push_back(std::move(g));
  }
  return out;
}

void expect_same(const std::vector<double>& got, const Golden& want, const char* path) {
  ASSERT_EQ(got.size(), want.v.size()) << path << ": " << want.key;
  const double scale = std::abs(want.v[0]);  // the iteration time
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double a = got[i], b = want.v[i];
    const double tol = 1e-12 * std::max(std::abs(a), std::abs(b)) + 1e-15 * scale;
    ASSERT_LE(std::abs(a - b), tol) << path << ": field " << i << " of " << want.key;
  }
}

// Writes the golden file (run once, by the code before a speed change).
TEST(Golden, WriteWhenAsked) {
  const char* to = std::getenv("COMMSCOPE_WRITE_GOLDEN");
  if (!to) GTEST_SKIP() << "set COMMSCOPE_WRITE_GOLDEN=<file> to write the golden predictions";
  std::FILE* f = std::fopen(to, "w");
  ASSERT_NE(f, nullptr);
  std::fprintf(f,
               "# Predictions of %zu plans (tests/unit/sim_evaluator_test.cpp): key, then "
               "iteration time, straggler wait, stages, mean breakdown, each stage's\n",
               kCases);
  for (const Case& c : cases(kCases)) {
    std::fprintf(f, "%s", c.key().c_str());
    for (double x : straightforward(c)) std::fprintf(f, ",%.17g", x);
    std::fprintf(f, "\n");
  }
  std::fclose(f);
}

TEST(Golden, SimulateMatchesThePredictionsBeforeTheSpeedWork) {
  const auto golden = read_golden();
  const auto all = cases(kCases);
  ASSERT_EQ(golden.size(), all.size());
  // Every kind of plan is in the set (so the comparison covers them).
  int pipelined = 0, interleaved = 0, gpipe = 0, zero3 = 0, fsdp = 0, curves = 0, still = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const Case& c = all[i];
    ASSERT_EQ(c.key(), golden[i].key);
    const PlanInput q = resolved_input(c);
    pipelined += *c.plan.pp > 1;
    interleaved += q.schedule == Schedule::interleaved;
    gpipe += q.schedule == Schedule::gpipe;
    zero3 += *c.plan.framework != Framework::fsdp && *c.plan.zero == 3;
    fsdp += *c.plan.framework == Framework::fsdp;
    curves += c.curves;
    still += !c.stragglers;
    expect_same(straightforward(c), golden[i], "simulate");
  }
  EXPECT_GT(pipelined, 30);
  EXPECT_GT(interleaved, 10);
  EXPECT_GT(gpipe, 10);
  EXPECT_GT(zero3, 20);
  EXPECT_GT(fsdp, 20);
  EXPECT_GT(curves, 30);
  EXPECT_GT(still, 30);
}

// The Evaluator predicts the same plans as the straightforward path, within the golden file's
// tolerance.
TEST(Golden, EvaluatorMatchesThePredictionsBeforeTheSpeedWork) {
  const auto golden = read_golden();
  const auto all = cases(kCases);
  ASSERT_EQ(golden.size(), all.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    const Specs s = specs_of(all[i]);
    Evaluator ev(s.model, s.system, s.network);
    auto p = ev.evaluate(resolved_input(all[i]));
    ASSERT_TRUE(p.ok()) << all[i].key();
    expect_same(fields(*p), golden[i], "Evaluator::evaluate");
  }
}

// Variants of a plan (other global batches and schedules) share its workload and chunk runs:
// each must equal the straightforward prediction of that plan exactly, and the plan's own
// variant the golden file.
TEST(Golden, EvaluatorVariantsEqualEachPlanPredictedAlone) {
  const auto golden = read_golden();
  const auto all = cases(kCases);
  ASSERT_EQ(golden.size(), all.size());
  int compared = 0, rejected = 0;
  for (std::size_t i = 0; i < all.size(); i += 3) {
    const Case& c = all[i];
    const Specs s = specs_of(c);
    Evaluator ev(s.model, s.system, s.network);
    const PlanInput base = resolved_input(c);
    std::vector<Evaluator::Variant> vs = {{base.global_batch, base.schedule, std::nullopt}};
    for (std::int64_t gb : {*c.plan.global_batch / 2, *c.plan.global_batch * 2, std::int64_t{7}})
      for (Schedule sch : {Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved})
        vs.push_back({gb, base.schedule ? std::optional<Schedule>(sch) : std::nullopt, {}});
    auto got = ev.evaluate_variants(base, vs);
    ASSERT_EQ(got.size(), vs.size());
    ASSERT_TRUE(got[0].ok()) << c.key();
    expect_same(fields(*got[0]), golden[i], "Evaluator::evaluate_variants");
    for (std::size_t k = 0; k < vs.size(); ++k) {
      PlanInput p = base;
      p.global_batch = vs[k].global_batch;
      if (vs[k].schedule) p.schedule = vs[k].schedule;
      auto sc = resolve_scenario(s.model, s.system, s.network, p);
      ASSERT_EQ(sc.ok(), got[k].ok()) << c.key() << " variant " << k;
      if (!sc.ok()) {
        EXPECT_EQ(sc.error().message, got[k].error().message);
        ++rejected;
        continue;
      }
      const auto want = fields(simulate(build_workload(*sc)));
      const auto have = fields(*got[k]);
      ASSERT_EQ(want.size(), have.size());
      for (std::size_t f = 0; f < want.size(); ++f)
        ASSERT_EQ(want[f], have[f]) << c.key() << " variant " << k << " field " << f;
      ++compared;
    }
  }
  EXPECT_GT(compared, 300);
  EXPECT_GT(rejected, 10);  // batch 7 and some schedules do not resolve: errors pass through
}

}  // namespace
}  // namespace commscope
