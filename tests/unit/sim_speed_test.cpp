// The prediction-speed shortcuts keep every number: the pipeline orders reused from the
// per-thread cache (plans of many (schedule, PP, virtual stages, micro-batch count) keys
// predicted in an order that evicts and reuses them give the same predictions, bit for bit, as
// each plan predicted first), and the four-way union_and_overlap sweep against the plain
// merge-then-overlap arithmetic on random lists.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commscope/search/plan_search.h"
#include "commscope/sim/evaluator.h"
#include "commscope/sim/simulator.h"
#include "commscope/timeline/intervals.h"

namespace commscope {
namespace {

struct Lcg {
  std::uint64_t s = 0x9E3779B97F4A7C15ULL;
  double uniform() {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(s >> 11) / static_cast<double>(std::uint64_t{1} << 53);
  }
};

// Every number of a prediction that a schedule's task times feed.
std::vector<double> numbers(const Prediction& p) {
  std::vector<double> v = {p.iteration_time, p.straggler_wait,    p.mean.wall,       p.mean.compute,
                           p.mean.comm,      p.mean.exposed,      p.mean.overlapped, p.mean.idle,
                           p.mean.bubble,    p.mean.profiler_comm};
  for (const auto& s : p.stages) {
    const Breakdown& b = s.breakdown;
    for (double x : {s.end, b.wall, b.compute, b.comm, b.exposed, b.overlapped, b.idle, b.bubble,
                     b.profiler_comm})
      v.push_back(x);
    for (const auto& c : b.by_group.v) v.insert(v.end(), {c.total, c.exposed, c.profiler});
    for (const auto& c : b.by_collective.v) v.insert(v.end(), {c.total, c.exposed, c.profiler});
  }
  return v;
}

TEST(PipelineOrderCache, PlansPredictedInAnyOrderKeepTheirNumbers) {
  auto model = load_model("gpt2-medium");
  auto system = load_system("dgx-a100-80gb");
  auto network = load_network("ib-hdr-200");
  ASSERT_TRUE(model.ok() && system.ok() && network.ok());
  // More distinct (schedule, PP, v, micro-batches) keys than the cache holds.
  std::vector<PlanInput> plans;
  for (int pp : {2, 4})
    for (std::int64_t gb : {64, 128, 256})
      for (Schedule s : {Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved}) {
        PlanInput p;
        p.gpus = 16, p.tp = 2, p.pp = pp, p.micro_batch = 2, p.global_batch = gb;
        p.schedule = s;
        p.virtual_stages = s == Schedule::interleaved ? 2 : 1;
        plans.push_back(p);
      }
  // And more large orders (PP x v x micro-batches above 16,384) than their 4 entries hold.
  for (std::int64_t gb : {16384, 18432, 20480})
    for (Schedule s : {Schedule::gpipe, Schedule::one_f_one_b}) {
      PlanInput p;
      p.gpus = 16, p.tp = 2, p.pp = 4, p.micro_batch = 1, p.global_batch = gb;
      p.schedule = s;
      plans.push_back(p);
    }
  auto predict = [&](const PlanInput& p) {
    auto sc = resolve_scenario(*model, *system, *network, p);
    EXPECT_TRUE(sc.ok()) << (sc.ok() ? "" : sc.error().message);
    return sc.ok() ? numbers(simulate(build_workload(*sc))) : std::vector<double>{};
  };
  std::vector<std::vector<double>> first;
  for (const auto& p : plans) first.push_back(predict(p));
  // Again, backwards and then every other plan: orders evicted, rebuilt and reused.
  for (std::size_t k = plans.size(); k-- > 0;)
    EXPECT_EQ(predict(plans[k]), first[k]) << "plan " << k << " (backwards)";
  for (std::size_t k = 0; k < plans.size(); k += 2)
    EXPECT_EQ(predict(plans[k]), first[k]) << "plan " << k << " (every other)";
  // The schedules differ (a cache that handed one schedule's order to another would not).
  EXPECT_NE(first[0], first[2]);    // GPipe and interleaved of one layout
  EXPECT_NE(first[18], first[19]);  // GPipe and 1F1B of a large order
}

// Evaluator::evaluate_resolved (the plan search's path): scenarios resolved once, alike but for
// the batch and schedule, predicted from one workload equal simulate() of each, bit for bit.
TEST(EvaluateResolved, EqualsEachScenarioSimulatedAlone) {
  auto model = load_model("gpt2-medium");
  auto system = load_system("dgx-a100-80gb");
  auto network = load_network("ib-hdr-200");
  ASSERT_TRUE(model.ok() && system.ok() && network.ok());
  const Evaluator ev(*model, *system, *network);
  int compared = 0;
  for (int pp : {1, 2, 4})
    for (int zero : {0, 1}) {
      std::vector<Scenario> scs;
      for (std::int64_t gb : {32, 128})
        for (Schedule s : {Schedule::gpipe, Schedule::one_f_one_b}) {
          PlanInput p;
          p.gpus = 16, p.tp = 2, p.pp = pp, p.zero = zero, p.micro_batch = 2, p.global_batch = gb;
          p.schedule = s;
          auto sc = resolve_scenario(*model, *system, *network, p);
          ASSERT_TRUE(sc.ok()) << sc.error().message;
          scs.push_back(std::move(*sc));
        }
      std::vector<const Scenario*> members;
      for (const auto& sc : scs) members.push_back(&sc);
      // The workload of the last member (its batch and schedule are not the others').
      const Workload w = build_workload(scs.back());
      const auto got = ev.evaluate_resolved(w, members);
      ASSERT_EQ(got.size(), scs.size());
      for (std::size_t i = 0; i < scs.size(); ++i, ++compared)
        EXPECT_EQ(numbers(got[i]), numbers(simulate(build_workload(scs[i]))))
            << "pp " << pp << " zero " << zero << " member " << i;
    }
  EXPECT_EQ(compared, 24);
}

// The search's time bound (sim_detail::lower_bound through evaluate_resolved's skip_above): a
// bound on the iteration time from the runs alone, never above the simulated time, over plans
// with pipelines of 1 to 8 stages, interleaving, every ZeRO stage, the frameworks' patterns,
// CP, T5 and Megatron's overlapped parameter gather. Asked to skip everything (skip_above 0),
// evaluate_resolved returns the bound of each scenario instead of its prediction.
TEST(LowerBound, NeverAboveTheIterationTime) {
  auto network = load_network("ib-hdr-200");
  ASSERT_TRUE(network.ok());
  int checked = 0;
  double tightest = 0;
  for (const char* name : {"gpt2-medium", "llama2-7b", "t5-base"}) {
    auto model = load_model(name);
    auto system = load_system("dgx-a100-80gb");
    ASSERT_TRUE(model.ok() && system.ok());
    const Evaluator ev(*model, *system, *network);
    for (int pp : {1, 2, 4, 8})
      for (int v : {1, 2})
        for (int zero : {0, 1, 3})
          for (Framework f : {Framework::none, Framework::megatron, Framework::deepspeed})
            for (Schedule sched : {Schedule::gpipe, Schedule::one_f_one_b}) {
              PlanInput p;
              p.gpus = 32, p.tp = 2, p.pp = pp, p.micro_batch = 2, p.global_batch = 128;
              p.virtual_stages = v;
              p.schedule = v > 1 ? Schedule::interleaved : sched;
              p.framework = f;
              if (f == Framework::megatron) {
                if (zero > 1) continue;
                p.use_distributed_optimizer = zero == 1;
                p.overlap_param_gather = zero == 1;
                p.overlap_grad_reduce = true;
              } else {
                p.zero = zero;
              }
              if (pp == 1 && std::string(name) == "llama2-7b") p.cp = 2;
              auto sc = resolve_scenario(*model, *system, *network, p);
              if (!sc.ok()) continue;
              const Workload w = build_workload(*sc);
              const Scenario* one[] = {&w.scenario};
              const Prediction bound =
                  ev.evaluate_resolved(w, one, false, [](std::size_t) { return 0.0; }).front();
              const double t = simulate(w).iteration_time;
              ASSERT_GT(bound.skipped_bound, 0) << name << " " << to_json(sc->plan).dump();
              EXPECT_EQ(bound.iteration_time, 0);
              EXPECT_LE(bound.skipped_bound, t * (1 + 1e-12))
                  << name << " " << to_json(sc->plan).dump();
              tightest = std::max(tightest, bound.skipped_bound / t);
              ++checked;
            }
  }
  EXPECT_GT(checked, 150);
  EXPECT_GT(tightest, 0.9);  // the bound is close somewhere (a compute-bound plan)
}

// The plan search predicts iteration times alone and breakdowns for the plans it prints: every
// printed plan (the top K) and every rule's best other plan carry exactly evaluate()'s figures,
// and the ranking equals the one by evaluate()'s times (same order, same numbers).
TEST(SearchTimesOnly, PrintedPlansCarryEvaluatesFigures) {
  search::SearchSpace s;
  s.model = *load_model("gpt2-medium");
  s.system = *load_system("dgx-a100-80gb");
  s.network = *load_network(s.system.network);
  s.gpus = 16, s.global_batch = 64, s.fixed_global_batch = true;
  search::SearchOptions o;
  o.top = 6;
  auto r = search::search(s, o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->top.size(), 6u);
  auto same = [](const search::Evaluated& a, const search::Evaluated& b, const std::string& what) {
    EXPECT_TRUE(a.breakdown) << what;
    EXPECT_EQ(a.iteration_time, b.iteration_time) << what;
    EXPECT_EQ(a.score_time, b.score_time) << what;
    EXPECT_EQ(a.memory, b.memory) << what;
    EXPECT_EQ(a.compute, b.compute) << what;
    EXPECT_EQ(a.comm, b.comm) << what;
    EXPECT_EQ(a.exposed, b.exposed) << what;
    EXPECT_EQ(a.bubble, b.bubble) << what;
  };
  for (const auto& t : r->top)
    same(t.result, search::evaluate(s, t.plan), "top " + search::describe(t.plan));
  EXPECT_GT(r->top.front().result.compute, 0.0);
  int others = 0;
  for (const auto& rule : r->rules)
    if (rule.best_other) {
      ++others;
      same(rule.best_other->result, search::evaluate(s, rule.best_other->plan),
           "rule " + rule.rule);
    }
  EXPECT_GT(others, 0);
  // Every fitting plan's time is evaluate()'s: the ranking is the same.
  std::size_t checked = 0;
  for (std::size_t i = 0; i < r->fitting.size(); i += 7, ++checked)
    EXPECT_EQ(r->fitting[i].result.iteration_time,
              search::evaluate(s, r->fitting[i].plan).iteration_time);
  EXPECT_GT(checked, 3u);
}

// build_workload copies a middle pipeline stage's lists from the stage before, the layers
// renumbered, where its blocks are the same: every op (each field), every dependency, the step
// and the parameter counts equal those of every stage built afresh, and so the predictions, over
// dense, MoE (dense first layers, MTP) and BERT models, even and uneven splits, virtual stages,
// every framework pattern and recompute method. Some plans must have been copied at all.
void expect_same_list(const OpList& a, const OpList& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::uint32_t i = 0; i < a.size(); ++i) {
    const Op &x = a[i], &y = b[i];
    SCOPED_TRACE(std::string(x.name) + " at " + std::to_string(i));
    EXPECT_EQ(x.name, y.name);
    EXPECT_TRUE(x.kind == y.kind && x.phase == y.phase && x.compute == y.compute &&
                x.collective == y.collective && x.group == y.group && x.dtype == y.dtype &&
                x.last_microbatch_only == y.last_microbatch_only &&
                x.first_microbatch_only == y.first_microbatch_only && x.tag == y.tag &&
                x.span == y.span);
    EXPECT_EQ(x.layer, y.layer);
    EXPECT_EQ(x.index, y.index);
    EXPECT_EQ(x.flops, y.flops);
    EXPECT_EQ(x.mem_bytes, y.mem_bytes);
    EXPECT_TRUE(x.m == y.m && x.n == y.n && x.k == y.k && x.grad_params == y.grad_params);
    EXPECT_EQ(x.host_seconds, y.host_seconds);
    EXPECT_TRUE(x.group_size == y.group_size && x.peer == y.peer && x.elements == y.elements);
    EXPECT_EQ(x.bytes, y.bytes);
    auto da = a.deps_of(i), db = b.deps_of(i);
    EXPECT_TRUE(std::equal(da.begin(), da.end(), db.begin(), db.end()));
  }
}

TEST(StageCopies, EqualEveryStageBuilt) {
  auto dgx = load_system("dgx-h100");
  auto ib = load_network("ib-ndr-400");
  ASSERT_TRUE(dgx.ok() && ib.ok());
  struct Case {
    const char* model;
    int gpus, tp, pp, v;
    std::function<void(PlanInput&)> set;
  };
  const std::vector<Case> cases = {
      {"llama2-13b", 64, 2, 4, 1, [](PlanInput&) {}},
      {"llama2-13b", 64, 1, 8, 1, [](PlanInput& p) { p.recompute = Recompute::selective; }},
      {"llama2-13b", 64, 1, 8, 1, [](PlanInput& p) { p.zero = 1; }},
      {"llama2-13b", 64, 2, 4, 2, [](PlanInput& p) { p.schedule = Schedule::interleaved; }},
      {"gpt2-large", 32, 1, 4, 1, [](PlanInput& p) { p.recompute = Recompute::full; }},
      {"gpt3-175b", 1024, 8, 16, 1,
       [](PlanInput& p) {
         p.recompute = Recompute::full, p.recompute_block = true;
         p.recompute_num_layers = 2;
       }},
      {"llama3-70b", 256, 4, 8, 1,
       [](PlanInput& p) {
         p.framework = Framework::megatron, p.use_distributed_optimizer = true;
         p.overlap_grad_reduce = true, p.overlap_param_gather = true;
       }},
      {"llama3-70b", 256, 4, 4, 2,
       [](PlanInput& p) {
         p.framework = Framework::megatron, p.use_distributed_optimizer = true;
         p.overlap_grad_reduce = true, p.overlap_param_gather = true;
         p.schedule = Schedule::interleaved;
       }},
      {"llama2-13b", 64, 1, 4, 1,
       [](PlanInput& p) {
         p.framework = Framework::fsdp, p.fsdp_sharding = FsdpSharding::shard_grad_op;
         p.fsdp_grad_sync = FsdpGradSync::step;
       }},
      {"llama2-13b", 64, 1, 4, 1, [](PlanInput& p) { p.framework = Framework::fsdp; }},
      {"llama2-13b", 64, 2, 4, 1, [](PlanInput& p) { p.framework = Framework::deepspeed; }},
      {"llama3-405b", 2048, 8, 16, 1,
       [](PlanInput& p) { p.stage_layers = {7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7}; }},
      {"mixtral-8x7b", 128, 2, 4, 1, [](PlanInput& p) { p.ep = 8, p.sequence_parallel = true; }},
      {"mixtral-8x7b", 128, 1, 4, 1,
       [](PlanInput& p) {
         p.framework = Framework::fsdp, p.fsdp_sharding = FsdpSharding::shard_grad_op;
         p.fsdp_grad_sync = FsdpGradSync::step, p.ep = 8;
       }},
      {"deepseek-v3", 1024, 2, 8, 1,
       [](PlanInput& p) {
         p.ep = 16, p.fp8 = true, p.sequence_parallel = true;
         p.stage_layers = {7, 8, 8, 8, 8, 8, 8, 6};
       }},
      // MoE on every second block: stages of an odd block count alternate in kind (3 blocks:
      // dense-MoE-dense, then MoE-dense-MoE), of an even one repeat
      {"llama4-maverick", 512, 2, 16, 1,
       [](PlanInput& p) { p.ep = 8, p.sequence_parallel = true; }},
      {"llama4-maverick", 512, 2, 8, 1, [](PlanInput& p) { p.ep = 8, p.sequence_parallel = true; }},
      {"bert-large", 32, 1, 4, 1, [](PlanInput&) {}},
      {"llama3-8b", 64, 1, 4, 1, [](PlanInput& p) { p.grad_comm_dtype = DType::bf16; }},
  };
  int copied = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.model) + " TP " + std::to_string(c.tp) + " PP " +
                 std::to_string(c.pp) + " v " + std::to_string(c.v));
    auto model = load_model(c.model);
    ASSERT_TRUE(model.ok());
    PlanInput p;
    p.gpus = c.gpus, p.tp = c.tp, p.pp = c.pp, p.micro_batch = 1;
    p.global_batch = 4 * c.gpus / (c.tp * c.pp) * c.pp;
    if (c.v > 1) p.virtual_stages = c.v;
    c.set(p);
    auto sc = resolve_scenario(*model, *dgx, *ib, p);
    ASSERT_TRUE(sc.ok()) << sc.error().message;
    const Workload a = build_workload(*sc), b = build_workload_every_stage(*sc);
    copied += stages_copied(*sc);
    ASSERT_EQ(a.roles.size(), b.roles.size());
    for (std::size_t s = 0; s < a.roles.size(); ++s) {
      SCOPED_TRACE("stage " + std::to_string(s));
      const Role &x = a.roles[s], &y = b.roles[s];
      EXPECT_EQ(x.params, y.params);
      EXPECT_EQ(x.expert_params, y.expert_params);
      ASSERT_EQ(x.chunks.size(), y.chunks.size());
      for (std::size_t k = 0; k < x.chunks.size(); ++k) {
        EXPECT_EQ(x.chunks[k].first_layer, y.chunks[k].first_layer);
        expect_same_list(x.chunks[k].forward, y.chunks[k].forward);
        expect_same_list(x.chunks[k].backward, y.chunks[k].backward);
        expect_same_list(x.chunks[k].forward_first, y.chunks[k].forward_first);
      }
      expect_same_list(x.step, y.step);
    }
    EXPECT_EQ(numbers(simulate(a)), numbers(simulate(b)));
  }
  EXPECT_GT(copied, 40);
}

// FSDP under PP, gradients once a step (the search's torchtitan-like plans): the variants of
// one plan by global batch (one micro-batch and several) and schedule, predicted on one shared
// workload, equal each predicted alone, bit for bit (the workload does not depend on the
// micro-batch count).
TEST(EvaluateVariants, FsdpOnceAStepEqualsEachAlone) {
  auto model = load_model("llama2-7b");
  auto system = load_system("dgx-a100-80gb");
  auto network = load_network("ib-hdr-200");
  ASSERT_TRUE(model.ok() && system.ok() && network.ok());
  PlanInput base;
  base.gpus = 16, base.tp = 2, base.pp = 2, base.micro_batch = 1, base.global_batch = 4;
  base.sequence_parallel = true;
  base.framework = Framework::fsdp, base.fsdp_sharding = FsdpSharding::shard_grad_op;
  base.fsdp_grad_sync = FsdpGradSync::step;
  const std::vector<Evaluator::Variant> variants = {{4, Schedule::one_f_one_b, std::nullopt},
                                                    {16, Schedule::one_f_one_b, std::nullopt},
                                                    {16, Schedule::gpipe, std::nullopt},
                                                    {4, Schedule::gpipe, std::nullopt}};
  Evaluator ev(*model, *system, *network);
  const auto shared = ev.evaluate_variants(base, variants);
  ASSERT_EQ(shared.size(), variants.size());
  for (std::size_t i = 0; i < variants.size(); ++i) {
    SCOPED_TRACE(i);
    PlanInput p = base;
    p.global_batch = variants[i].global_batch, p.schedule = variants[i].schedule;
    auto sc = resolve_scenario(*model, *system, *network, p);
    ASSERT_TRUE(sc.ok()) << sc.error().message;
    ASSERT_TRUE(shared[i].ok()) << shared[i].error().message;
    EXPECT_EQ(shared[i]->iteration_time, simulate(build_workload(*sc)).iteration_time);
  }
}

TEST(UnionAndOverlap, MatchesMergingThenOverlapping) {
  Lcg rng;
  for (int trial = 0; trial < 500; ++trial) {
    std::array<Intervals, 4> lists;
    Intervals all;
    for (auto& l : lists) {
      const int n = static_cast<int>(rng.uniform() * 12);
      double t = rng.uniform();
      for (int i = 0; i < n; ++i) {
        t += rng.uniform() * 0.5;  // sorted by start; may overlap itself and the others
        const double len = rng.uniform() < 0.1 ? 0.0 : rng.uniform();
        l.emplace_back(t, t + len);
        all.emplace_back(t, t + len);
      }
    }
    Intervals busy;
    for (double t = rng.uniform(); t < 8; t += 0.2 + rng.uniform()) {
      busy.emplace_back(t, t + rng.uniform() * 0.5);
      t = busy.back().second;
    }
    const Intervals u = merged(all);
    const double total = length(u), hidden = overlap(u, busy);
    const auto [got_total, got_hidden] = union_and_overlap(lists, busy);
    EXPECT_NEAR(got_total, total, 1e-12 * (1 + total)) << "trial " << trial;
    EXPECT_NEAR(got_hidden, hidden, 1e-12 * (1 + total)) << "trial " << trial;
    EXPECT_LE(got_hidden, got_total + 1e-12);
  }
}

}  // namespace
}  // namespace commscope
