// Several pipeline schedules an iteration (ParallelPlan::pipeline_rounds): torchtitan under PP
// runs each accumulation step as a pp_schedule.step() of its own, each with its fill and drain,
// its first forward's parameter gathers and, through PyTorch's REDUCE_GRAD, its gradient
// reduction before the next; the optimizer steps once.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "commscope/sim/simulator.h"
#include "commscope/spec/scenario.h"
#include "commscope/spec/torchtitan_config.h"
#include "commscope/workload/workload.h"
#include "test_util.h"

namespace commscope {
namespace {

// Llama 3 8B on 16 H100s, PP 4 x FSDP 4 (1F1B, micro-batch 1): each accumulation step a local
// batch of `local` on every data-parallel rank, `steps` of them an iteration.
Scenario torchtitan_plan(int local, int steps, int shard = 4, const char* schedule = "1F1B") {
  const std::string toml = fmt::format(
      "[model]\nname = \"llama3\"\nflavor = \"8B\"\n"
      "[training]\nlocal_batch_size = {}\nglobal_batch_size = {}\nseq_len = 4096\n"
      "[parallelism]\ndata_parallel_shard_degree = {}\npipeline_parallel_degree = 4\n"
      "pipeline_parallel_schedule = \"{}\"\n"
      "[activation_checkpoint]\nmode = \"full\"\n",
      local, local * shard * steps, shard, schedule);
  auto job = torchtitan_from_toml(toml, "job.toml");
  EXPECT_TRUE(job.ok()) << job.error().message;
  PlanInput p = job->plan;
  p.gpus = 4 * shard;
  return testing::scenario(job->model, "dgx-h100", p);
}

Prediction predict(const Scenario& sc, bool timeline = false) {
  SimOptions o;
  o.timeline = timeline;
  return simulate(build_workload(sc), o);
}

// Each schedule is the same: every schedule added adds the same time (the iterations of 1, 2
// and 3 schedules of one local batch are in arithmetic progression), and that time is more
// than the one schedule's compute alone, less than a whole iteration of it; with FSDP and
// without (shard 1: one replica a stage, nothing to reduce).
TEST(PipelineRounds, EachScheduleAddsTheSameTime) {
  for (int shard : {1, 4}) {
    SCOPED_TRACE(shard);
    std::vector<double> t;
    for (int steps : {1, 2, 3}) {
      const Scenario sc = torchtitan_plan(8, steps, shard);
      ASSERT_EQ(sc.plan.pipeline_rounds, steps);
      ASSERT_EQ(sc.plan.microbatches_per_round(), 8);
      t.push_back(predict(sc).iteration_time);
    }
    const double period = t[1] - t[0];
    EXPECT_NEAR(t[2] - t[1], period, 1e-9 * t[2]);
    EXPECT_GT(period, 0.5 * t[0]);
    EXPECT_LT(period, t[0]);
  }
}

// Against one schedule of all the micro-batches (the same global batch, local batch x steps).
// A 1F1B schedule of m micro-batches over stages whose micro-batch takes c_s (forward and
// backward) lasts about (m - 1) max c + sum c (the slowest stage runs every micro-batch, the
// others' one each fills and drains); R schedules of m / R last (m - R) max c + R sum c, longer
// by (R - 1)(sum c - max c). Llama 3 8B splits 8, 9, 8, 7 layers (with the embedding and the
// output weighing one each), so the stages differ: c_s from the one-schedule plan's compute.
// The compute is the same; the bubble grows.
TEST(PipelineRounds, EachScheduleFillsAndDrainsThePipeline) {
  const Scenario one = torchtitan_plan(32, 1);
  const Scenario four = torchtitan_plan(8, 4);
  ASSERT_EQ(one.plan.grad_accum, four.plan.grad_accum);
  ASSERT_EQ(one.plan.pipeline_rounds, 1);
  const Prediction a = predict(one), b = predict(four);
  double sum = 0, most = 0;
  for (const auto& st : a.stages) {
    const double c = st.breakdown.compute / 32;
    sum += c;
    most = std::max(most, c);
  }
  const double extra = b.iteration_time - a.iteration_time;
  EXPECT_NEAR(extra, 3 * (sum - most), 0.05 * extra);
  EXPECT_NEAR(b.mean.compute, a.mean.compute, 1e-6 * a.mean.compute);
  EXPECT_GT(b.mean.bubble, a.mean.bubble + 0.9 * extra);
}

// The trace: on every stage each schedule's first compute begins after the previous schedule's
// gradient reduce-scatters are done (PyTorch's REDUCE_GRAD, then the next step()); each
// schedule gathers and reduces every FSDP unit once, so an iteration's calls and bytes are the
// one schedule's times the schedules, in the trace and in describe's volumes alike.
TEST(PipelineRounds, TheTraceRunsTheSchedulesOneAfterAnother) {
  const Scenario one = torchtitan_plan(8, 1);
  const Scenario three = torchtitan_plan(8, 3);
  const Prediction p1 = predict(one, true), p3 = predict(three, true);
  const int mr = 8;
  for (int s = 0; s < 4; ++s) {
    SCOPED_TRACE(s);
    std::vector<double> reduced(3, 0.0), began(3, 1e300);
    int rs1 = 0, rs3 = 0, ag1 = 0, ag3 = 0;
    for (const Event& e : p1.timeline.events)
      if (e.rank == s && e.has_collective) {
        rs1 += e.collective == Collective::reduce_scatter;
        ag1 += e.collective == Collective::all_gather;
      }
    for (const Event& e : p3.timeline.events) {
      if (e.rank != s) continue;
      if (e.has_collective) {
        rs3 += e.collective == Collective::reduce_scatter;
        ag3 += e.collective == Collective::all_gather;
      }
      if (e.kind == EventKind::compute && e.microbatch >= 0) {
        const int r = e.microbatch / mr;
        began[r] = std::min(began[r], e.start);
      }
    }
    // each schedule's reduce-scatters: the ones that end before the next schedule begins
    for (const Event& e : p3.timeline.events)
      if (e.rank == s && e.has_collective && e.collective == Collective::reduce_scatter)
        for (int r = 0; r < 3; ++r)
          if (r == 2 || e.start < began[r + 1]) {
            reduced[r] = std::max(reduced[r], e.start + e.dur);
            break;
          }
    ASSERT_GT(rs1, 0);
    EXPECT_EQ(rs3, 3 * rs1);
    EXPECT_EQ(ag3, 3 * ag1);
    for (int r = 0; r + 1 < 3; ++r) {
      EXPECT_GT(reduced[r], 0);
      EXPECT_GE(began[r + 1], reduced[r] - 1e-12) << "schedule " << r + 1;
    }
  }
  const Workload w1 = build_workload(one), w3 = build_workload(three);
  for (std::size_t r = 0; r < w1.roles.size(); ++r)
    for (const CommVolume& v : comm_volume(w3, w3.roles[r])) {
      if (v.group != CommGroup::data) continue;
      double single = 0;
      for (const CommVolume& u : comm_volume(w1, w1.roles[r]))
        if (u.group == v.group && u.collective == v.collective) single += u.bytes;
      EXPECT_NEAR(v.bytes, 3 * single, 1e-9 * v.bytes) << to_string(v.collective);
    }
}

// The composed breakdown against the trace it predicts, schedules and all: compute to the
// rounding, exposed and idle as close as for one schedule
// (Sim.BreakdownAddsUpAndMatchesTheTimeline), and the parts add up to the iteration.
TEST(PipelineRounds, BreakdownMatchesTheTimeline) {
  for (const char* schedule : {"1F1B", "GPipe"}) {
    SCOPED_TRACE(schedule);
    const Prediction p = predict(torchtitan_plan(8, 3, 4, schedule), true);
    for (const auto& st : p.stages) {
      const Breakdown& b = st.breakdown;
      EXPECT_NEAR(b.compute + b.exposed + b.memcpy + b.idle, p.iteration_time,
                  1e-9 * p.iteration_time);
      EXPECT_NEAR(b.overlapped + b.exposed, b.comm, 1e-9 * p.iteration_time);
      const Breakdown full = breakdown(p.timeline, st.stage, 0, p.iteration_time);
      EXPECT_NEAR(full.compute, b.compute, 1e-9 * p.iteration_time);
      EXPECT_NEAR(full.comm, b.comm, 1e-9 * p.iteration_time);
      EXPECT_NEAR(full.exposed, b.exposed, 0.02 * p.iteration_time);
      EXPECT_NEAR(full.idle, b.idle, 0.02 * p.iteration_time);
      EXPECT_GE(b.bubble, 0);
      EXPECT_LE(b.bubble, b.idle + 1e-12);
    }
  }
}

// Memory: a stage holds the activations of one schedule's micro-batches in flight, the 1F1B
// warm-up of min(PP - stage, micro-batches per schedule); with 2 micro-batches a schedule, the
// first stage holds 2, as one schedule of 2 would, not 4 as one schedule of all 8.
TEST(PipelineRounds, ActivationsInFlightAreOneSchedules) {
  const Scenario four = torchtitan_plan(2, 4);
  const Scenario two = torchtitan_plan(2, 1);
  const Scenario eight = torchtitan_plan(8, 1);
  EXPECT_EQ(inflight_microbatches(four, 0), 2);
  EXPECT_EQ(inflight_microbatches(two, 0), 2);
  EXPECT_EQ(inflight_microbatches(eight, 0), 4);
}

// torchtitan's Interleaved1F1B is PyTorch's ScheduleInterleaved1F1B: of n micro-batches,
// max(1, n / PP) rounds of g = n / rounds, each chunk taking its turn for g micro-batches
// (_get_1f1b_rank_ops: forward_stage_index (step // g) % v, each stage's micro-batches in
// order; warm-up (v - 1) g + 2 (PP - 1 - rank)). The order with g = PP is Megatron's; with any
// g every stage runs each (chunk, micro-batch) once each way, each chunk's micro-batches in
// order, the k-th forward on chunk (k / g) % v; the schedule places every task (no deadlock);
// and the activations describe counts in flight on the first stage are the order's own peak of
// forwards whose backward has not run.
TEST(PipelineRounds, PyTorchsInterleavedGroups) {
  const int pp = 4, v = 2;
  EXPECT_EQ(pipeline_order(Schedule::interleaved, pp, v, 8, false, 1, 0)[0].size(),
            pipeline_order(Schedule::interleaved, pp, v, 8, false, 1, pp)[0].size());
  {
    const auto a = pipeline_order(Schedule::interleaved, pp, v, 8, false, 1, 0);
    const auto b = pipeline_order(Schedule::interleaved, pp, v, 8, false, 1, pp);
    for (int st = 0; st < pp; ++st)
      for (std::size_t k = 0; k < a[st].size(); ++k) {
        EXPECT_EQ(a[st][k].chunk, b[st][k].chunk);
        EXPECT_EQ(a[st][k].microbatch, b[st][k].microbatch);
        EXPECT_EQ(a[st][k].backward, b[st][k].backward);
      }
  }
  for (const auto& [m, g] : {std::pair{6, 6}, std::pair{10, 5}, std::pair{2, 2}}) {
    SCOPED_TRACE(fmt::format("{} micro-batches in groups of {}", m, g));
    auto order = pipeline_order(Schedule::interleaved, pp, v, m, false, 1, g);
    for (int st = 0; st < pp; ++st) {
      ASSERT_EQ(order[st].size(), static_cast<std::size_t>(2 * v * m));
      std::vector<int> next_fwd(v, 0), next_bwd(v, 0);
      int k = 0;
      for (const PipelineTask& t : order[st]) {
        if (t.backward) {
          EXPECT_EQ(t.microbatch, next_bwd[t.chunk]++);
        } else {
          EXPECT_EQ(t.chunk, (k / g) % v) << "forward " << k;
          EXPECT_EQ(t.microbatch, next_fwd[t.chunk]++);
          ++k;
        }
      }
      for (int c = 0; c < v; ++c) {
        EXPECT_EQ(next_fwd[c], m);
        EXPECT_EQ(next_bwd[c], m);
      }
    }
    schedule_pipeline(
        order, pp, v, [](const PipelineTask& t) { return t.backward ? 2.0 : 1.0; },
        [](const PipelineTask&) { return 0.0; });
    for (const auto& stage : order)
      for (const PipelineTask& t : stage) EXPECT_GT(t.end, 0) << "a task was not placed";
  }
  // In flight on the first stage: torchtitan's local batch 6 at PP 4 (one round of 6).
  const std::string toml =
      "[model]\nname = \"llama3\"\nflavor = \"8B\"\n[training]\nlocal_batch_size = 6\n"
      "global_batch_size = 24\nseq_len = 4096\n[parallelism]\ndata_parallel_shard_degree = 4\n"
      "pipeline_parallel_degree = 4\npipeline_parallel_schedule = \"Interleaved1F1B\"\n"
      "[activation_checkpoint]\nmode = \"full\"\n";
  auto job = torchtitan_from_toml(toml, "job.toml");
  ASSERT_TRUE(job.ok()) << job.error().message;
  PlanInput p = job->plan;
  p.gpus = 16;
  const Scenario sc = testing::scenario(job->model, "dgx-h100", p);
  ASSERT_EQ(sc.plan.interleave_group, 6);
  const auto order = pipeline_order(Schedule::interleaved, pp, sc.plan.virtual_stages, 6, false, 1,
                                    sc.plan.interleave_group);
  std::int64_t held = 0, peak = 0;
  for (const PipelineTask& t : order[0]) {
    held += t.backward ? -1 : 1;
    peak = std::max(peak, held);
  }
  EXPECT_EQ(inflight_microbatches(sc, 0), peak);
  // and the iteration runs (two schedules of 6)
  EXPECT_GT(predict(sc).iteration_time, 0);
}

}  // namespace
}  // namespace commscope
