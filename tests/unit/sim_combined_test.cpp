// Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm, --delay-wgrad-compute):
// one pair's timeline against the one worked out by hand from Megatron-Core's stream order
// (TransformerLayerSchedulePlan.run), the pipeline order against schedules.py's warm-up count,
// and predict end to end: what the overlap hides, where its events go, the memory of the extra
// warm-up forward and the plan checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "commscope/sim/evaluator.h"
#include "commscope/sim/simulator.h"
#include "test_util.h"

namespace commscope {
namespace {

using testing::plan;
using testing::scenario;
using testing::scenario_error;

// One MoE block's forward or backward, its ops chained: the op's duration in seconds is its
// `flops` (compute) or `bytes` (the all-to-alls), so a split GEMM's halves take half each.
Op kernel(std::string_view name, double seconds, bool weights) {
  Op op;
  op.kind = OpKind::compute;
  op.compute = ComputeClass::gemm;
  op.name = name;
  op.layer = 0;
  op.flops = seconds;
  op.grad_params = weights ? 1 : 0;
  return op;
}
Op a2a(std::string_view name, double seconds) {
  Op op;
  op.kind = OpKind::comm;
  op.collective = Collective::all_to_all;
  op.group = CommGroup::expert;
  op.name = name;
  op.layer = 0;
  op.bytes = seconds;
  return op;
}
OpList chain(std::initializer_list<Op> ops) {
  OpList l;
  for (const Op& op : ops) l.empty() ? l.add(op) : l.add(op, {l.last()});
  return l;
}
double seconds_of(const Op& op) {
  return op.kind == OpKind::compute ? op.flops : op.bytes;
}

// Forward: attention 3, dispatch 2, experts 2, combine 2. Backward: combine 2, experts 8,
// dispatch 6, attention 6. In Megatron-Core's order (comm stream: combine_bwd | dispatch_fwd,
// dispatch_bwd | combine_fwd; comp stream: attention_fwd | experts_bwd, experts_fwd |
// attention_bwd), by hand:
//   combine_bwd 0-2, attention_fwd 0-3, experts_bwd 3-11, dispatch_fwd 3-5, dispatch_bwd 11-17,
//   experts_fwd 11-13, combine_fwd 17-19, attention_bwd 17-23: 23 s, against 31 s one after
//   the other.
// With the weight gradients delayed (each backward GEMM half data, half weight gradient):
//   experts dgrad 3-7, wgrad 7-11; dispatch_bwd 7-13 (it waits for the data gradient alone);
//   experts_fwd 11-13; combine_fwd 13-15; attention dgrad 13-16, wgrad 16-19: 19 s.
TEST(CombinedOneFOneB, PairRunsAsMegatronIssuesIt) {
  const OpList f = chain({kernel("attention", 3, true), a2a("moe_dispatch", 2),
                          kernel("experts", 2, true), a2a("moe_combine", 2)});
  const OpList b = chain({a2a("moe_combine_backward", 2), kernel("experts", 8, true),
                          a2a("moe_dispatch_backward", 6), kernel("attention", 6, true)});
  for (const auto& [delay, want, ops] :
       {std::tuple{false, 23.0, 8u}, std::tuple{true, 19.0, 10u}}) {
    SCOPED_TRACE(delay ? "delayed weight gradients" : "weight gradients with the data's");
    std::vector<CombinedOp> from;
    const OpList l = combined_list(f, b, delay, from);
    ASSERT_EQ(l.size(), ops);
    ASSERT_EQ(from.size(), ops);
    // each op's time: its original's, half for half a GEMM (and the half's FLOPs are half)
    std::vector<double> dur;
    int backward = 0;
    for (std::size_t i = 0; i < l.size(); ++i) {
      const Op& orig = (from[i].backward ? b : f)[from[i].op];
      backward += from[i].backward;
      EXPECT_EQ(l[i].name, orig.name);
      EXPECT_DOUBLE_EQ(seconds_of(l[i]), seconds_of(orig) * (from[i].half ? 0.5 : 1.0));
      dur.push_back(seconds_of(orig) * (from[i].half ? 0.5 : 1.0));
    }
    EXPECT_EQ(backward, static_cast<int>(ops) - 4);
    RunDetail d;
    d.combined = true;
    const ListRun r = run_list(l, dur, ParallelPlan{}, false, nullptr, nullptr, &d);
    EXPECT_DOUBLE_EQ(r.blocking_end, want);
    EXPECT_DOUBLE_EQ(r.end, want);
    // The all-to-alls on the expert stream, nothing else there.
    for (std::size_t k = 0; k < r.events.size(); ++k)
      EXPECT_EQ(r.events[k].stream == kExpertStream, l[d.event_op[k]].kind == OpKind::comm);
  }
  // Without the overlap the two run as two tasks, one after the other: 9 s + 22 s.
  auto alone = [](const OpList& l) {
    std::vector<double> dur;
    for (const Op& op : l.ops()) dur.push_back(seconds_of(op));
    return run_list(l, dur, ParallelPlan{}, false).blocking_end;
  };
  EXPECT_DOUBLE_EQ(alone(f) + alone(b), 31.0);
}

// f and b as one combined step, run with each op's time its seconds_of.
struct Pair {
  Pair(const OpList& f, const OpList& b, bool delay) {
    std::vector<CombinedOp> from;
    list = combined_list(f, b, delay, from);
    for (const Op& op : list.ops()) dur.push_back(seconds_of(op));
    detail.combined = true;
    run = run_list(list, dur, ParallelPlan{}, false, nullptr, nullptr, &detail);
  }
  OpList list;
  std::vector<double> dur;
  RunDetail detail;
  ListRun run;
};

// A block without all-to-alls (a dense layer) runs whole: the backward's, then the forward's
// (one compute stream: the same time in either order).
TEST(CombinedOneFOneB, DenseBlocksRunOneAfterTheOther) {
  const OpList f = chain({kernel("attention", 3, true), kernel("mlp", 2, true)});
  const OpList b = chain({kernel("mlp", 4, true), kernel("attention", 6, true)});
  EXPECT_DOUBLE_EQ(Pair(f, b, true).run.end, 15.0);
}

// A tensor-parallel collective is issued in the compute stream in Megatron-Core, so the other
// micro-batch's kernels wait for it (and it for them): the all-reduce (2 s) and the backward's
// GEMM (3 s) take 5 s; on a stream of its own they would overlap (3 s).
TEST(CombinedOneFOneB, TensorCollectivesWaitInTheComputeQueue) {
  Op ar = a2a("tp_all_reduce", 2);
  ar.collective = Collective::all_reduce;
  ar.group = CommGroup::tensor;
  const OpList f = chain({ar});
  const OpList b = chain({kernel("mlp", 3, true)});
  const Pair p(f, b, false);
  EXPECT_DOUBLE_EQ(p.run.end, 5.0);
  EXPECT_DOUBLE_EQ(run_list(p.list, p.dur, ParallelPlan{}, false).end, 3.0);
  // its event stays on the tensor-parallel stream in a trace
  ASSERT_EQ(p.run.events.size(), 2u);
  for (std::size_t k = 0; k < 2; ++k)
    EXPECT_EQ(p.run.events[k].stream,
              p.list[p.detail.event_op[k]].kind == OpKind::comm ? kTensorStream : kComputeStream);
}

// schedules.py (get_pp_rank_microbatches): with the overlap the interleaved schedule warms up
// (PP - stage - 1) x 2 + (v - 1) x PP + 1 forwards; every later forward runs with the backward
// after it. The tasks are those of the plain schedule; the pipeline places them all.
TEST(CombinedOneFOneB, OrderPairsTheSteadyState) {
  const int pp = 4, v = 2, m = 8;
  const auto plain = pipeline_order(Schedule::interleaved, pp, v, m);
  auto order = pipeline_order(Schedule::interleaved, pp, v, m, true);
  ASSERT_EQ(order.size(), static_cast<std::size_t>(pp));
  for (int s = 0; s < pp; ++s) {
    SCOPED_TRACE(s);
    const auto& o = order[static_cast<std::size_t>(s)];
    using Key = std::tuple<int, int, bool>;
    std::map<Key, int> have, want;
    for (const auto& t : o) ++have[{t.chunk, t.microbatch, t.backward}];
    for (const auto& t : plain[static_cast<std::size_t>(s)])
      ++want[{t.chunk, t.microbatch, t.backward}];
    EXPECT_EQ(have, want);
    const int warmup = (pp - s - 1) * 2 + (v - 1) * pp + 1;
    for (int k = 0; k < warmup; ++k) {
      EXPECT_FALSE(o[static_cast<std::size_t>(k)].backward);
      EXPECT_EQ(o[static_cast<std::size_t>(k)].pair, 0);
    }
    int pairs = 0;
    for (std::size_t k = 0; k < o.size(); ++k) {
      if (o[k].pair != kPairHead) continue;
      ++pairs;
      ASSERT_LT(k + 1, o.size());
      EXPECT_FALSE(o[k].backward);
      EXPECT_TRUE(o[k + 1].backward);
      EXPECT_EQ(o[k + 1].pair, kPairTail);
      EXPECT_EQ(o[k].other, o[k + 1].chunk);
      EXPECT_EQ(o[k + 1].other, o[k].chunk);
    }
    EXPECT_EQ(pairs, m * v - warmup);
  }
  // Placed with unit tasks: every task runs, a pair's two at once.
  schedule_pipeline(
      order, pp, v, [](const PipelineTask&) { return 1.0; },
      [](const PipelineTask&) { return 0.0; });
  for (const auto& o : order)
    for (std::size_t k = 0; k < o.size(); ++k) {
      EXPECT_GT(o[k].end, o[k].start);
      if (o[k].pair == kPairHead) {
        EXPECT_EQ(o[k].start, o[k + 1].start);
      }
    }
  // Without PP (combined_1f1b_schedule_for_no_pipelining): F0, (F1, B0), ..., (F7, B6), B7.
  const auto one = pipeline_order(Schedule::one_f_one_b, 1, 1, m, true)[0];
  ASSERT_EQ(one.size(), static_cast<std::size_t>(2 * m));
  EXPECT_FALSE(one.front().backward);
  EXPECT_EQ(one.front().pair, 0);
  EXPECT_TRUE(one.back().backward);
  EXPECT_EQ(one.back().microbatch, m - 1);
  for (int i = 1; i < m; ++i) {
    const auto& head = one[static_cast<std::size_t>(2 * i - 1)];
    const auto& tail = one[static_cast<std::size_t>(2 * i)];
    EXPECT_EQ(head.pair, kPairHead);
    EXPECT_EQ(head.microbatch, i);
    EXPECT_EQ(tail.microbatch, i - 1);
  }
}

PlanInput overlap_plan(bool overlap, bool delay = false) {
  // Mixtral 8x7B on 64 H100s: EP 8 over the network (EP x TP = 16 ranks span two nodes),
  // PP 2 x VP 2, 16 micro-batches.
  PlanInput p = plan(64, 2, 2, 1, 128);
  p.ep = 8;
  p.sequence_parallel = true;
  p.virtual_stages = 2;
  p.attention = AttentionKernel::flash;
  if (overlap) p.overlap_moe_ep_comm = true;
  if (delay) p.delay_wgrad_compute = true;
  return p;
}

// predict: the overlap hides expert all-to-all time behind the other micro-batch's compute, so
// the iteration is shorter and less of the expert group's time is exposed; it cannot beat the
// compute stream's own work.
TEST(CombinedOneFOneB, PredictHidesTheAllToAll) {
  const Scenario off = scenario("mixtral-8x7b", "dgx-h100", overlap_plan(false));
  const Scenario on = scenario("mixtral-8x7b", "dgx-h100", overlap_plan(true));
  const Scenario delayed = scenario("mixtral-8x7b", "dgx-h100", overlap_plan(true, true));
  const Prediction a = simulate(build_workload(off));
  SimOptions o;
  o.timeline = true;
  const Prediction b = simulate(build_workload(on), o);
  const Prediction c = simulate(build_workload(delayed));
  const auto& ea = a.mean.by_group[CommGroup::expert];
  const auto& eb = b.mean.by_group[CommGroup::expert];
  EXPECT_GT(ea.exposed, 0);
  EXPECT_LT(b.iteration_time, a.iteration_time);
  EXPECT_LT(eb.exposed, ea.exposed);
  EXPECT_NEAR(eb.total, ea.total, 1e-9 * ea.total);  // the same all-to-alls, hidden or not
  EXPECT_LE(c.iteration_time, b.iteration_time * (1 + 1e-12));
  // The compute stream's busy time per stage is a floor.
  std::vector<double> busy(2, 0.0);
  for (const Event& e : b.timeline.events)
    if (e.stream == kComputeStream) busy[static_cast<std::size_t>(e.rank)] += e.dur;
  for (double x : busy) EXPECT_LE(x, b.iteration_time);
  // The pairs' events: the all-to-alls on the expert stream, named in the trace, and both
  // micro-batches' ops overlapping on the stage.
  bool expert_stream = false;
  for (const Event& e : b.timeline.events)
    expert_stream |= e.stream == kExpertStream && e.group == CommGroup::expert;
  EXPECT_TRUE(expert_stream);
  EXPECT_EQ(b.timeline.stream_names.at({0, kExpertStream}), "expert-parallel comm");
  // Without the combined steps the all-to-alls run on the tensor stream; the trace draws them
  // on the expert track all the same (they were drawn as tensor-parallel comm, found by
  // probing, 2026-12-02), and names only the tracks that hold events.
  const Prediction at = simulate(build_workload(off), o);
  bool a_expert = false;
  for (const Event& e : at.timeline.events) {
    if (e.group == CommGroup::expert) EXPECT_EQ(e.stream, kExpertStream);
    a_expert |= e.group == CommGroup::expert;
    EXPECT_EQ(at.timeline.stream_names.count({e.rank, e.stream}), 1u) << e.stream;
  }
  EXPECT_TRUE(a_expert);
  EXPECT_EQ(at.timeline.stream_names.at({0, kExpertStream}), "expert-parallel comm");
}

// The Evaluator (the search's path) shares chunk and pair runs across global batches: each
// equals simulate() of its own plan, and the search's bound never exceeds the time.
TEST(CombinedOneFOneB, EvaluatorEqualsSimulate) {
  const PlanInput base = overlap_plan(true, true);
  const Scenario sc = scenario("mixtral-8x7b", "dgx-h100", base);
  Evaluator ev(sc.model, sc.system, sc.network);
  std::vector<Evaluator::Variant> vs;
  for (std::int64_t gb : {64, 128, 512}) vs.push_back({gb, std::nullopt, std::nullopt});
  auto got = ev.evaluate_variants(base, vs);
  ASSERT_EQ(got.size(), vs.size());
  for (std::size_t k = 0; k < vs.size(); ++k) {
    SCOPED_TRACE(k);
    ASSERT_TRUE(got[k].ok()) << got[k].error().message;
    PlanInput p = base;
    p.global_batch = vs[k].global_batch;
    const Prediction want = simulate(build_workload(scenario("mixtral-8x7b", "dgx-h100", p)));
    EXPECT_EQ(got[k]->iteration_time, want.iteration_time);
    EXPECT_EQ(got[k]->mean.by_group[CommGroup::expert].exposed,
              want.mean.by_group[CommGroup::expert].exposed);
  }
  // Times alone, with a bound asked for: the same times, none skipped below them.
  const Workload w = build_workload(sc);
  const Scenario* one[] = {&w.scenario};
  const auto fast = ev.evaluate_resolved(w, one, false, [&](std::size_t) { return 0.0; });
  ASSERT_EQ(fast.size(), 1u);
  if (fast[0].skipped_bound > 0) {
    EXPECT_LE(fast[0].skipped_bound, simulate(w).iteration_time);
  } else {
    EXPECT_EQ(fast[0].iteration_time, simulate(w).iteration_time);
  }
  // The search's bound from the blocks counts the kernels alone under the overlap: below the
  // time, though the exposed all-to-alls no longer add up.
  const double bound = compute_lower_bound(w.scenario, w, block_graphs(w));
  EXPECT_GT(bound, 0);
  EXPECT_LE(bound, simulate(w).iteration_time);
}

// The extra warm-up forward holds one chunk's activations more on every stage.
TEST(CombinedOneFOneB, WarmupHoldsOneChunkMore) {
  const Scenario off = scenario("mixtral-8x7b", "dgx-h100", overlap_plan(false));
  const Scenario on = scenario("mixtral-8x7b", "dgx-h100", overlap_plan(true));
  for (int s = 0; s < 2; ++s)
    EXPECT_EQ(inflight_microbatches(on, s), inflight_microbatches(off, s) + 1);
  PlanInput p1 = overlap_plan(true);
  p1.pp = 1;
  p1.virtual_stages.reset();
  EXPECT_EQ(inflight_microbatches(scenario("mixtral-8x7b", "dgx-h100", p1), 0), 2);
}

// Megatron-Core's checks (transformer_config.py), each naming the flag.
TEST(CombinedOneFOneB, PlanChecksNameTheFlag) {
  PlanInput p = overlap_plan(true);
  p.ep = 1;
  EXPECT_NE(scenario_error("mixtral-8x7b", "dgx-h100", p).find("above 1"), std::string::npos);
  p = overlap_plan(true);
  p.virtual_stages.reset();
  EXPECT_NE(scenario_error("mixtral-8x7b", "dgx-h100", p).find("virtual pipeline stages"),
            std::string::npos);
  p = overlap_plan(true);
  p.recompute = Recompute::full;
  EXPECT_NE(
      scenario_error("mixtral-8x7b", "dgx-h100", p).find("--overlap-moe-expert-parallel-comm"),
      std::string::npos);
  p = overlap_plan(true);
  p.precision = Precision::fp32;
  EXPECT_NE(scenario_error("mixtral-8x7b", "dgx-h100", p).find("bf16 or fp16"), std::string::npos);
  p = overlap_plan(false, true);
  EXPECT_NE(scenario_error("mixtral-8x7b", "dgx-h100", p).find("--delay-wgrad-compute"),
            std::string::npos);
  p = overlap_plan(true);
  p.pp = 1;
  p.virtual_stages.reset();
  p.cpu_offload_layers = 4;
  EXPECT_NE(scenario_error("mixtral-8x7b", "dgx-h100", p).find("--cpu-offloading-num-layers"),
            std::string::npos);
}

}  // namespace
}  // namespace commscope

namespace commscope {
namespace {
// The trace puts each call on the track of what it is: the CP ring ran on the pipeline stream
// and was drawn as "pipeline comm", a stage's receives nested its sends on one track (found by
// probing, 2026-12-02). Llama 3 8B, TP 2, CP 2, PP 2 on 8 GPUs: context, send and receive calls
// each on their own named track.
TEST(Trace, ContextAndPipelineCallsAreOnTracksOfTheirOwn) {
  PlanInput p = plan(8, 2, 2, 1, 8);
  p.cp = 2;
  p.attention = AttentionKernel::flash;
  SimOptions o;
  o.timeline = true;
  const Prediction pr = simulate(build_workload(scenario("llama3-8b", "dgx-h100", p)), o);
  int context = 0, sends = 0, recvs = 0;
  for (const Event& e : pr.timeline.events) {
    if (e.kind != EventKind::comm) continue;
    const std::string& track = pr.timeline.stream_names.at({e.rank, e.stream});
    if (e.group == CommGroup::context) {
      ++context;
      EXPECT_EQ(track, "context-parallel comm");
    } else if (e.group == CommGroup::pipeline) {
      const bool recv = e.collective == Collective::recv;
      (recv ? recvs : sends)++;
      EXPECT_EQ(track, recv ? "pipeline receive" : "pipeline send");
    } else {
      EXPECT_NE(track.find("comm"), std::string::npos) << track;
    }
  }
  EXPECT_GT(context, 0);
  EXPECT_GT(sends, 0);
  EXPECT_GT(recvs, 0);
}
}  // namespace
}  // namespace commscope
