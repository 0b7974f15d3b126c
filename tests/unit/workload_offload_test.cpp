// DeepSpeed ZeRO-Offload (docs/workload.md, "Optimizer offload"), against closed forms written
// here from what DeepSpeed's ZeRO-1/2 optimizer moves per step (stage_1_and_2.py's cpu_offload
// path) and the preset's bandwidths:
// - each rank's reduced gradient shard goes to the host as fp32 (4 bytes a parameter) over its
//   host link, and under gradient accumulation every micro-batch after the first brings the
//   running sum back and every one before the last sends it out again (16-bit, each way);
//   ZeRO-3 (stage3.py) sends each micro-batch's shard in its own type and, after several, the
//   sum as fp32;
// - DeepSpeedCPUAdam streams 28 bytes a parameter through host memory (fp32 weight, gradient
//   and two moments in; weight and moments out), 6 more under mixed precision for the cast
//   of the weights to 16 bits, and under ZeRO-3 without accumulation w + 4 more for the cast of
//   the gradient to fp32, every rank of the node at once;
// - the 16-bit weights come back over the host link (4 bytes under fp32);
// - GPU memory loses the optimizer states (12 bytes a parameter of the shard, mixed precision)
//   and, under ZeRO-2, the gradient shard (ZeRO paper's 2 + 2 + 12 accounting).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "commscope/cost/compute.h"
#include "commscope/report/describe.h"
#include "commscope/search/plan_search.h"
#include "commscope/sim/simulator.h"
#include "commscope/workload/params.h"
#include "test_util.h"

namespace commscope {
namespace {

using testing::named;
using testing::plan;
using testing::scenario;

// gpt2-xl on two DGX A100 80GB nodes, DeepSpeed's pattern, micro-batch 4.
PlanInput deepspeed(int zero, std::int64_t global, bool offload,
                    Precision precision = Precision::bf16) {
  PlanInput p = plan(16, 1, 1, 4, global);
  p.framework = Framework::deepspeed;
  p.zero = zero;
  p.precision = precision;
  if (offload) p.offload_optimizer = true;
  return p;
}

// A search candidate of `dp` data-parallel ranks, micro-batch 1, one micro-batch each.
search::PlanPoint candidate(int dp, Framework framework, int zero) {
  search::PlanPoint pt;
  pt.dp = dp;
  pt.framework = framework;
  pt.zero = zero;
  pt.micro_batch = 1;
  pt.global_batch = dp;
  return pt;
}

double host_seconds(const OpList& step, std::string_view name) {
  const auto ops = named(step, name);
  EXPECT_EQ(ops.size(), 1u) << name;
  if (ops.size() != 1) return 0;
  EXPECT_EQ(ops[0].compute, ComputeClass::host) << name;
  return ops[0].host_seconds;
}

TEST(Offload, StepPartsAreTheClosedForms) {
  // The preset's figures, as its file states them (GB/s).
  const double link = 26.2e9, host = 409.6e9;
  for (Precision precision : {Precision::bf16, Precision::fp32}) {
    SCOPED_TRACE(std::string(to_string(precision)));
    const bool mixed = precision != Precision::fp32;
    const Scenario sc = scenario("gpt2-xl", "dgx-a100-80gb", deepspeed(2, 64, true, precision));
    ASSERT_EQ(sc.gpus_per_node, 8);
    const double owned = static_cast<double>(count_params(sc.model).total) / 16;
    const Workload w = build_workload(sc);
    ASSERT_EQ(w.roles.size(), 1u);
    const OpList& step = w.roles[0].step;
    EXPECT_TRUE(named(step, "adam").empty());                     // no step on the GPU
    EXPECT_TRUE(named(step, "offload_grad_accumulate").empty());  // one micro-batch
    EXPECT_NEAR(host_seconds(step, "offload_grad_copy"), 4 * owned / link, 1e-12);
    EXPECT_NEAR(host_seconds(step, "cpu_adam"), (mixed ? 34 : 28) * owned * 8 / host, 1e-12);
    EXPECT_NEAR(host_seconds(step, "offload_param_copy"), (mixed ? 2 : 4) * owned / link, 1e-12);
    // in that order, the parameters' all-gather after them
    std::vector<std::string_view> order;
    for (const Op& op : step.ops())
      if (op.compute == ComputeClass::host || op.name == "zero_param_all_gather")
        order.push_back(op.name);
    ASSERT_GE(order.size(), 4u);
    EXPECT_EQ(order[0], "offload_grad_copy");
    EXPECT_EQ(order[1], "cpu_adam");
    EXPECT_EQ(order[2], "offload_param_copy");
    EXPECT_EQ(order[3], "zero_param_all_gather");
    // describe's host memory: the shard's states and fp32 gradients
    EXPECT_DOUBLE_EQ(offload_host_bytes(sc, owned).value(), owned * ((mixed ? 12 : 8) + 4));
  }
  // Gradient accumulation: 4 micro-batches send the sum out 3 times and bring it back 3 times.
  const Scenario ga = scenario("gpt2-xl", "dgx-a100-80gb", deepspeed(2, 256, true));
  ASSERT_EQ(ga.plan.grad_accum, 4);
  const double owned = static_cast<double>(count_params(ga.model).total) / 16;
  EXPECT_NEAR(host_seconds(build_workload(ga).roles[0].step, "offload_grad_accumulate"),
              2 * 3 * 2 * owned / link, 1e-12);
  EXPECT_NEAR(host_seconds(build_workload(ga).roles[0].step, "offload_grad_copy"), 4 * owned / link,
              1e-12);
  // ZeRO-3: the shard out in bf16 each micro-batch, the sum as fp32 after several; without
  // accumulation the host casts it (2 bytes in, 4 out).
  for (std::int64_t global : {64, 256}) {
    SCOPED_TRACE(global);
    const Scenario z3 = scenario("gpt2-xl", "dgx-a100-80gb", deepspeed(3, global, true));
    const bool several = z3.plan.grad_accum > 1;
    const Workload w3 = build_workload(z3);
    const OpList& step = w3.roles[0].step;
    EXPECT_EQ(named(step, "offload_grad_accumulate").size(), several ? 1u : 0u);
    EXPECT_NEAR(host_seconds(step, "offload_grad_copy"), (2 + (several ? 4 : 0)) * owned / link,
                1e-12);
    EXPECT_NEAR(host_seconds(step, "cpu_adam"), (34 + (several ? 0 : 6)) * owned * 8 / host, 1e-12);
    EXPECT_NEAR(host_seconds(step, "offload_param_copy"), 2 * owned / link, 1e-12);
  }
}

// The step's host parts replace the GPU's Adam on the critical path: the iteration grows by
// exactly their sum less the GPU step's time (DeepSpeed ZeRO-2 without overlap_comm steps
// after the last backward, the all-gather after it).
TEST(Offload, IterationGrowsByTheHostStep) {
  const Scenario on = scenario("gpt2-xl", "dgx-a100-80gb", deepspeed(2, 64, true));
  const Scenario off = scenario("gpt2-xl", "dgx-a100-80gb", deepspeed(2, 64, false));
  const Workload w_on = build_workload(on), w_off = build_workload(off);
  double host = 0;
  for (const Op& op : w_on.roles[0].step.ops())
    if (op.compute == ComputeClass::host) host += op.host_seconds;
  const auto adam = named(w_off.roles[0].step, "adam");
  ASSERT_EQ(adam.size(), 1u);
  const double gpu_step = compute_time(adam[0], off.system.gpu, off.system.calibration).value();
  ASSERT_GT(gpu_step, 0);
  const Prediction p_on = simulate(w_on), p_off = simulate(w_off);
  // The step's all-gather waits for stragglers in proportion to the work since the last
  // collective (docs/cost-model.md), which the host step lengthens: that wait aside.
  EXPECT_NEAR(
      (p_on.iteration_time - p_on.straggler_wait) - (p_off.iteration_time - p_off.straggler_wait),
      host - gpu_step, 1e-9);
  EXPECT_GT(host, 10 * gpu_step);  // the host step is the slower (64.6 ms of CPU Adam alone)
  // The copies are memory copies in the breakdown, CPU Adam the step's compute.
  const OpList& step = w_on.roles[0].step;
  EXPECT_NEAR(p_on.mean.memcpy,
              host_seconds(step, "offload_grad_copy") + host_seconds(step, "offload_param_copy"),
              1e-12);
  EXPECT_EQ(p_off.mean.memcpy, 0);
  EXPECT_NEAR(p_on.mean.compute - p_off.mean.compute, host_seconds(step, "cpu_adam") - gpu_step,
              1e-9);
}

TEST(Offload, GpuMemoryLosesTheStatesAndUnderZero2TheGradientShard) {
  for (int zero : {1, 2, 3}) {
    SCOPED_TRACE(zero);
    const Scenario on = scenario("gpt2-xl", "dgx-a100-80gb", deepspeed(zero, 64, true));
    const Scenario off = scenario("gpt2-xl", "dgx-a100-80gb", deepspeed(zero, 64, false));
    const Workload w_on = build_workload(on), w_off = build_workload(off);
    const MemoryBreakdown a = memory_per_rank(w_on, w_on.roles[0]),
                          b = memory_per_rank(w_off, w_off.roles[0]);
    const double P = static_cast<double>(w_off.roles[0].params);
    EXPECT_NEAR(b.optimizer.value(), 12 * P / 16, 1);  // mixed-precision Adam, sharded
    EXPECT_EQ(a.optimizer.value(), 0);
    EXPECT_NEAR(b.gradients.value(), zero >= 2 ? 2 * P / 16 : 2 * P, 1);
    EXPECT_EQ(a.gradients.value(), zero >= 2 ? 0 : b.gradients.value());
    EXPECT_EQ(a.weights.value(), b.weights.value());
    EXPECT_EQ(a.activations.value(), b.activations.value());
    // The plan search's bound stays below what the plan holds.
    EXPECT_LE(search::memory_lower_bound(on), a.total().value());
  }
}

// The host holds every rank's shard of the node: 16 bytes a parameter (12 of states, 4 of fp32
// gradients) of the node's share. Llama 2 70B on one DGX A100 40GB node holds all of it, 16 P =
// 1,027.8 GiB, above the node's 1,024 GiB (its datasheet's 1 TB): the plan does not fit; on two
// nodes each holds half.
TEST(Offload, HostMemoryMustHoldTheNodesShards) {
  PlanInput p = deepspeed(3, 8, true);
  p.gpus = 8;
  p.micro_batch = 1;
  const Scenario one = scenario("llama2-70b", "dgx-a100-40gb", p);
  const double P = static_cast<double>(count_params(one.model).total);
  const Workload w1 = build_workload(one);
  EXPECT_NEAR(offload_host_bytes_per_node(w1).value(), 16 * P, 1e-6 * P);
  EXPECT_FALSE(offload_fits_host(w1));
  const Description d = describe(w1);
  EXPECT_FALSE(d.fits);
  ASSERT_FALSE(d.warnings.empty());
  EXPECT_EQ(d.warnings.back().rfind("does not fit: offload holds 1027.8 GiB", 0), 0u)
      << d.warnings.back();
  p.gpus = 16;
  p.global_batch = 16;
  const Workload w2 = build_workload(scenario("llama2-70b", "dgx-a100-40gb", p));
  EXPECT_NEAR(offload_host_bytes_per_node(w2).value(), 8 * P, 1e-6 * P);
  EXPECT_TRUE(offload_fits_host(w2));
  // Without offload the host holds nothing of it; a preset without host_memory_gib checks none.
  EXPECT_EQ(offload_host_bytes_per_node(
                build_workload(scenario("llama2-70b", "dgx-a100-40gb", deepspeed(3, 64, false))))
                .value(),
            0);
  PlanInput tg = p;
  tg.gpus = 8;
  tg.global_batch = 8;
  EXPECT_TRUE(offload_fits_host(build_workload(scenario("llama2-70b", "thetagpu-tg80", tg))));
}

TEST(Offload, PlansThatCannotOffloadAreRefused) {
  EXPECT_EQ(testing::scenario_error("gpt2-xl", "dgx-a100-80gb", deepspeed(0, 64, true)),
            "--offload-optimizer: expected ZeRO stage 1, 2 or 3 (DeepSpeed offloads the "
            "optimizer of its ZeRO optimizers), got ZeRO-0");
  PlanInput megatron = deepspeed(0, 64, true);
  megatron.zero.reset();
  megatron.framework = Framework::megatron;
  megatron.use_distributed_optimizer = true;
  EXPECT_EQ(testing::scenario_error("gpt2-xl", "dgx-a100-80gb", megatron),
            "--offload-optimizer: expected --framework deepspeed or none (ZeRO-Offload is "
            "DeepSpeed's optimizer path), got --framework megatron");
  PlanInput narrow = deepspeed(2, 64, true);
  narrow.framework = Framework::none;
  narrow.precision_aware_optimizer = true;
  EXPECT_EQ(testing::scenario_error("gpt2-xl", "dgx-a100-80gb", narrow),
            "--offload-optimizer: expected plain Adam (DeepSpeedCPUAdam keeps fp32 master weights "
            "and moments), got --use-precision-aware-optimizer");
  // vtrain-a100 states no host figures.
  EXPECT_EQ(testing::scenario_error("gpt2-xl", "vtrain-a100", deepspeed(2, 64, true)),
            "--offload-optimizer: expected a system whose preset gives node.host_copy_pinned_gbs "
            "and node.host_memory_bandwidth_gbs (the host link's and the host memory's "
            "bandwidths), got vtrain-a100, which gives no host_copy_pinned_gbs");
  // The plan's JSON says it.
  EXPECT_EQ(to_json(scenario("gpt2-xl", "dgx-a100-80gb", deepspeed(2, 64, true)).plan)
                .value("offload_optimizer", ""),
            "cpu");
  EXPECT_FALSE(to_json(scenario("gpt2-xl", "dgx-a100-80gb", deepspeed(2, 64, false)).plan)
                   .contains("offload_optimizer"));
}

// DeepSpeed ZeRO-3's parameter offload (docs/workload.md, "Parameter offload"), against closed
// forms written here from DeepSpeed's stage-3 code paths (partition_parameters.py, stage3.py):
// - every all-gather of the coordinator is preceded by a copy of the rank's partition of what
//   it gathers (its padded elements / DP, 2 bytes each under bf16) from the host over the rank's
//   host link, on the gathers' stream, and the module whose hook issued it waits for the copy
//   (a blocking .to(device));
// - the GPU holds none of the 16-bit partition (2 P / DP bytes fewer); the host holds it;
// - with ZeRO-Offload the step's updated weights stay on the host (no copy back); without it
//   the GPU's fp32 master goes out (4 bytes a parameter) and is cast on the host (4 in, 2 out,
//   every rank of the node at once).
// The one op a gather waits for, which must be the copy of its shard to the GPU (the gather
// itself where it waits for none, failing the test).
const Op& copy_before(const OpList& l, std::uint32_t gather) {
  const auto deps = l.deps_of(gather);
  EXPECT_EQ(deps.size(), 1u);
  const Op& copy = deps.size() == 1 ? l[deps[0]] : l[gather];
  EXPECT_EQ(copy.name, std::string_view("offload_param_fetch"));
  return copy;
}

PlanInput param_offload(bool optimizer, Precision precision = Precision::bf16) {
  PlanInput p = deepspeed(3, 64, optimizer, precision);
  p.offload_param = true;
  return p;
}

TEST(ParamOffload, EachGatherIsPrecededByACopyOfItsPartition) {
  const double link = 26.2e9;  // dgx-a100-80gb's host_copy_pinned_gbs
  const Scenario sc = scenario("gpt2-xl", "dgx-a100-80gb", param_offload(false));
  const Scenario plain = scenario("gpt2-xl", "dgx-a100-80gb", deepspeed(3, 64, false));
  const Workload w = build_workload(sc), w0 = build_workload(plain);
  ASSERT_EQ(w.roles.size(), 1u);
  int gathers = 0, fetches = 0, waited = 0;
  double bytes = 0;
  for (std::size_t c = 0; c < w.roles[0].chunks.size(); ++c) {
    for (auto list : {&Chunk::forward, &Chunk::backward}) {
      const OpList& l = w.roles[0].chunks[c].*list;
      const OpList& l0 = w0.roles[0].chunks[c].*list;
      // the same gathers as without the offload, each after its own copy
      std::vector<std::int64_t> with, without;
      for (std::uint32_t i = 0; i < l.size(); ++i) {
        const Op& op = l[i];
        if (op.name == "offload_param_fetch") {
          ++fetches;
          EXPECT_EQ(op.compute, ComputeClass::host);
          EXPECT_EQ(stream_of(op), kDataStream);
          bytes += op.host_seconds * link;
          // the next op of the compute chain waits for it
          bool needed = false;
          for (std::uint32_t k = i + 1; k < l.size() && !needed; ++k)
            for (auto d : l.deps_of(k)) needed |= d == i && l[k].kind == OpKind::compute;
          waited += needed;
        }
        if (op.name != "ds_param_all_gather") continue;
        ++gathers;
        with.push_back(op.elements);
        const Op& fetch = copy_before(l, i);
        EXPECT_NEAR(fetch.host_seconds, static_cast<double>(op.elements) / 16 * 2 / link, 1e-15);
      }
      for (std::uint32_t i = 0; i < l0.size(); ++i)
        if (l0[i].name == "ds_param_all_gather") without.push_back(l0[i].elements);
      EXPECT_EQ(with, without);
      EXPECT_TRUE(named(l0, "offload_param_fetch").empty());
    }
  }
  EXPECT_GT(gathers, 0);
  EXPECT_EQ(fetches, gathers);
  EXPECT_EQ(waited, fetches);
  // describe's figures are these copies'
  const ParamFetches f = param_fetches(w);
  EXPECT_EQ(f.copies, fetches);
  EXPECT_NEAR(f.bytes, bytes, 1e-6 * bytes);
  // Each micro-batch fetches at least the whole partition (forward) once.
  EXPECT_GE(f.bytes, 2.0 * static_cast<double>(count_params(sc.model).total) / 16 * 0.999);
}

// One rank (DeepSpeed's NoGatherHandle): the coordinator's replay is the same, each fetch copies
// the parameters whole (DP 16's gathered elements, without the padding to 16), nothing is
// gathered or reduced, and the module waits for its copy; the GPU holds no weights.
TEST(ParamOffload, OneRankFetchesWholeParametersWithoutGathers) {
  const double link = 26.2e9;
  PlanInput one = param_offload(false);
  one.gpus = 1;
  one.global_batch = 4;
  const Scenario sc = scenario("gpt2-xl", "dgx-a100-80gb", one);
  ASSERT_EQ(sc.plan.dp, 1);
  const Workload w = build_workload(sc),
                 w16 = build_workload(scenario("gpt2-xl", "dgx-a100-80gb", param_offload(false)));
  double bytes = 0, gathered = 0;
  int fetches = 0, waited = 0, gathers = 0;
  for (const Chunk& ch : w.roles[0].chunks) {
    for (const OpList* l : {&ch.forward, &ch.backward}) {
      for (std::uint32_t i = 0; i < l->size(); ++i) {
        const Op& op = (*l)[i];
        EXPECT_NE(op.kind, OpKind::comm) << op.name;
        if (op.name != "offload_param_fetch") continue;
        ++fetches;
        bytes += op.host_seconds * link;
        bool needed = false;
        for (std::uint32_t k = i + 1; k < l->size() && !needed; ++k)
          for (auto d : l->deps_of(k)) needed |= d == i && (*l)[k].kind == OpKind::compute;
        waited += needed;
      }
    }
  }
  for (const Chunk& ch : w16.roles[0].chunks)
    for (const OpList* l : {&ch.forward, &ch.backward})
      for (const Op& op : l->ops())
        if (op.name == "ds_param_all_gather") {
          ++gathers;
          gathered += static_cast<double>(op.elements) * 2;
        }
  EXPECT_GT(fetches, 0);
  EXPECT_EQ(fetches, gathers);
  EXPECT_EQ(waited, fetches);
  EXPECT_LE(bytes, gathered * (1 + 1e-12));
  EXPECT_GE(bytes, gathered - gathers * 16 * 2 - 1);  // the padding to a multiple of 16
  const ParamFetches f = param_fetches(w);
  EXPECT_EQ(f.copies, fetches);
  EXPECT_NEAR(f.bytes, bytes, 1e-6 * bytes);
  EXPECT_EQ(memory_per_rank(w, w.roles[0]).weights.value(), 0);
  PlanInput plain = one;
  plain.offload_param.reset();
  EXPECT_GT(simulate(w).iteration_time,
            simulate(build_workload(scenario("gpt2-xl", "dgx-a100-80gb", plain))).iteration_time);
  // The search keeps it at DP 1.
  const search::PlanPoint pt = candidate(1, Framework::deepspeed, 3);
  EXPECT_TRUE(search::to_plan_input(pt, 1, one).offload_param.value_or(false));
}

TEST(ParamOffload, CopiesAreMemoryCopiesOnTheDataStreamAndCostTime) {
  const Scenario sc = scenario("gpt2-xl", "dgx-a100-80gb", param_offload(false));
  const Scenario plain = scenario("gpt2-xl", "dgx-a100-80gb", deepspeed(3, 64, false));
  const Workload w = build_workload(sc);
  SimOptions o;
  o.timeline = true;
  const Prediction on = simulate(w, o), off = simulate(build_workload(plain));
  const ParamFetches f = param_fetches(w);
  ASSERT_EQ(sc.plan.grad_accum, 1);
  double copied = 0;
  int copies = 0;
  for (const Event& e : on.timeline.events)
    if (on.timeline.name(e) == "offload_param_fetch") {
      EXPECT_EQ(e.kind, EventKind::memcpy);
      EXPECT_EQ(e.stream, kDataStream);
      copied += e.dur;
      ++copies;
    }
  EXPECT_EQ(copies, f.copies);  // one micro-batch
  EXPECT_NEAR(copied, f.seconds, 1e-12);
  // The module waits for each copy, and each copy is issued after the op before the hook: the
  // compute (CPU cast included), the copies and the step's copy out follow one another, none
  // beside another.
  const double out = host_seconds(w.roles[0].step, "offload_param_out");
  EXPECT_GT(on.iteration_time, off.iteration_time);
  EXPECT_GE(on.iteration_time - on.straggler_wait, on.mean.compute + copied + out - 1e-9);
  EXPECT_LT(off.iteration_time - off.straggler_wait, off.mean.compute + copied + out);
  EXPECT_NEAR(on.mean.compute + on.mean.exposed + on.mean.memcpy + on.mean.idle, on.mean.wall,
              1e-9 * on.mean.wall);
}

TEST(ParamOffload, TheStepWritesTheWeightsToTheHost) {
  const double link = 26.2e9, host = 409.6e9;
  for (Precision precision : {Precision::bf16, Precision::fp32}) {
    SCOPED_TRACE(std::string(to_string(precision)));
    const bool mixed = precision != Precision::fp32;
    const Scenario gpu = scenario("gpt2-xl", "dgx-a100-80gb", param_offload(false, precision));
    const double owned = static_cast<double>(count_params(gpu.model).total) / 16;
    const OpList& step = build_workload(gpu).roles[0].step;
    EXPECT_EQ(named(step, "adam").size(), 1u);  // Adam on the GPU
    EXPECT_NEAR(host_seconds(step, "offload_param_out"), 4 * owned / link, 1e-12);
    if (mixed)
      EXPECT_NEAR(host_seconds(step, "cpu_param_cast"), 6 * owned * 8 / host, 1e-12);
    else
      EXPECT_TRUE(named(step, "cpu_param_cast").empty());
    // With ZeRO-Offload: the host steps and casts into the host partition; nothing comes back.
    const Scenario both = scenario("gpt2-xl", "dgx-a100-80gb", param_offload(true, precision));
    const Scenario opt = scenario("gpt2-xl", "dgx-a100-80gb", deepspeed(3, 64, true, precision));
    const OpList& s2 = build_workload(both).roles[0].step;
    EXPECT_TRUE(named(s2, "offload_param_copy").empty());
    EXPECT_TRUE(named(s2, "offload_param_out").empty());
    EXPECT_DOUBLE_EQ(host_seconds(s2, "cpu_adam"),
                     host_seconds(build_workload(opt).roles[0].step, "cpu_adam"));
  }
}

TEST(ParamOffload, TheGpuHoldsNoPartitionAndTheHostDoes) {
  for (bool optimizer : {false, true}) {
    SCOPED_TRACE(optimizer);
    const Scenario on = scenario("gpt2-xl", "dgx-a100-80gb", param_offload(optimizer));
    const Scenario off = scenario("gpt2-xl", "dgx-a100-80gb", deepspeed(3, 64, optimizer));
    const Workload w_on = build_workload(on), w_off = build_workload(off);
    const MemoryBreakdown a = memory_per_rank(w_on, w_on.roles[0]),
                          b = memory_per_rank(w_off, w_off.roles[0]);
    const double P = static_cast<double>(w_off.roles[0].params);
    EXPECT_NEAR(b.weights.value(), 2 * P / 16, 16);  // partitions padded to DP
    EXPECT_EQ(a.weights.value(), 0);
    EXPECT_EQ(a.gradients.value(), b.gradients.value());
    EXPECT_EQ(a.optimizer.value(), b.optimizer.value());
    EXPECT_EQ(a.comm_buffers.value(), b.comm_buffers.value());  // the gathered working set stays
    EXPECT_EQ(a.activations.value(), b.activations.value());
    // host: 2 bytes a parameter of each of the node's 8 ranks' partitions, with ZeRO-Offload's
    // 16 beside them
    const double owned = optimizer_shard_params(on, w_on.roles[0]);
    EXPECT_NEAR(offload_host_bytes_per_node(w_on).value(), (optimizer ? 18 : 2) * owned * 8, 1);
    EXPECT_LE(search::memory_lower_bound(on), a.total().value());
  }
}

TEST(ParamOffload, PlansThatCannotOffloadParametersAreRefused) {
  using testing::scenario_error;
  PlanInput none = param_offload(false);
  none.framework = Framework::none;
  EXPECT_EQ(scenario_error("gpt2-xl", "dgx-a100-80gb", none),
            "--offload-param: expected --framework deepspeed (the partitions are fetched by "
            "DeepSpeed's ZeRO-3 coordinator), got --framework none");
  PlanInput two = param_offload(false);
  two.zero = 2;
  EXPECT_EQ(scenario_error("gpt2-xl", "dgx-a100-80gb", two),
            "--offload-param: expected ZeRO stage 3 (DeepSpeed offloads parameters only there), "
            "got ZeRO-2");
  PlanInput hpz = param_offload(false);
  hpz.zeropp_hpz = 8;
  EXPECT_EQ(scenario_error("gpt2-xl", "dgx-a100-80gb", hpz),
            "--offload-param: expected no ZeRO++ qwZ or hpZ (not modelled with parameter "
            "offload), got --zero-hpz-partition-size");
  EXPECT_EQ(scenario_error("gpt2-xl", "vtrain-a100", param_offload(false))
                .rfind("--offload-param: expected a system whose preset gives "
                       "node.host_copy_pinned_gbs",
                       0),
            0u);
  EXPECT_EQ(to_json(scenario("gpt2-xl", "dgx-a100-80gb", param_offload(false)).plan)
                .value("offload_param", ""),
            "cpu");
  // The search applies it to DeepSpeed's ZeRO-3 only.
  EXPECT_TRUE(search::param_offload_applies(3, Framework::deepspeed));
  EXPECT_FALSE(search::param_offload_applies(3, Framework::none));
  EXPECT_FALSE(search::param_offload_applies(2, Framework::deepspeed));
}

// PyTorch FSDP's CPU offload (docs/workload.md, "FSDP CPU offload"), against closed forms
// written here from FSDP1's FlatParamHandle and FSDP2's FSDPParam / foreach_reduce:
// - every all-gather is preceded by a copy of the rank's fp32 shard of what it gathers (its
//   padded elements / DP x 4 bytes) over the host link, and every reduce-scatter followed by a
//   copy of the reduced shard out, as fp32 (the same bytes);
// - torch's AdamW steps on the CPU: 80 bytes a parameter of the shard through host memory
//   (_single_tensor_adamw's passes), every rank of the node at once; no Adam on the GPU;
// - the GPU holds no parameter shard, gradient shard or optimizer state; the host holds 16
//   bytes a parameter of the shard (fp32 weight, gradient and two moments).
PlanInput fsdp(bool offload, Precision precision = Precision::bf16) {
  PlanInput p = plan(16, 1, 1, 4, 64);
  p.framework = Framework::fsdp;
  p.precision = precision;
  if (offload) p.fsdp_cpu_offload = true;
  return p;
}

TEST(FsdpOffload, EachGatherAndReductionHasItsCopy) {
  const double link = 26.2e9;
  const Scenario sc = scenario("gpt2-xl", "dgx-a100-80gb", fsdp(true));
  const Workload w = build_workload(sc),
                 w0 = build_workload(scenario("gpt2-xl", "dgx-a100-80gb", fsdp(false)));
  int gathers = 0, fetches = 0, reductions = 0, outs = 0;
  for (std::size_t c = 0; c < w.roles[0].chunks.size(); ++c) {
    for (auto list : {&Chunk::forward_first, &Chunk::forward, &Chunk::backward}) {
      const OpList& l = w.roles[0].chunks[c].*list;
      const OpList& l0 = w0.roles[0].chunks[c].*list;
      std::vector<std::int64_t> with, without;
      for (std::uint32_t i = 0; i < l.size(); ++i) {
        const Op& op = l[i];
        fetches += op.name == "offload_param_fetch";
        if (op.name == "offload_grad_copy") {
          ++outs;
          EXPECT_EQ(stream_of(op), kDataStream);
          const auto deps = l.deps_of(i);
          ASSERT_EQ(deps.size(), 1u);
          const Op& rs = l[deps[0]];
          EXPECT_EQ(rs.name, std::string_view("fsdp_reduce_scatter"));
          EXPECT_NEAR(op.host_seconds, static_cast<double>(rs.elements) / 16 * 4 / link, 1e-15);
        }
        reductions += op.name == "fsdp_reduce_scatter";
        if (op.name != "fsdp_all_gather") continue;
        ++gathers;
        with.push_back(op.elements);
        const Op& fetch = copy_before(l, i);
        EXPECT_EQ(stream_of(fetch), kDataStream);
        // the fp32 shard, whatever the gathered type (bf16 here)
        EXPECT_NEAR(fetch.host_seconds, static_cast<double>(op.elements) / 16 * 4 / link, 1e-15);
        EXPECT_EQ(fetch.first_microbatch_only, op.first_microbatch_only);
      }
      for (std::uint32_t i = 0; i < l0.size(); ++i)
        if (l0[i].name == "fsdp_all_gather") without.push_back(l0[i].elements);
      EXPECT_EQ(with, without);
    }
  }
  EXPECT_GT(gathers, 0);
  EXPECT_EQ(fetches, gathers);
  EXPECT_GT(reductions, 0);
  EXPECT_EQ(outs, reductions);
}

TEST(FsdpOffload, TheStepIsTorchsAdamWOnTheHost) {
  const double host = 409.6e9;
  for (Precision precision : {Precision::bf16, Precision::fp32}) {
    SCOPED_TRACE(std::string(to_string(precision)));
    const Scenario sc = scenario("gpt2-xl", "dgx-a100-80gb", fsdp(true, precision));
    const Workload w = build_workload(sc);
    const double owned = optimizer_shard_params(sc, w.roles[0]);
    EXPECT_NEAR(owned, static_cast<double>(count_params(sc.model).total) / 16, 1);
    const OpList& step = w.roles[0].step;
    EXPECT_TRUE(named(step, "adam").empty());
    EXPECT_NEAR(host_seconds(step, "cpu_adamw"), 80 * owned * 8 / host, 1e-12);
  }
  // The copies are memory copies on the data-parallel stream; the iteration grows.
  SimOptions o;
  o.timeline = true;
  const Prediction on = simulate(build_workload(scenario("gpt2-xl", "dgx-a100-80gb", fsdp(true))),
                                 o),
                   off =
                       simulate(build_workload(scenario("gpt2-xl", "dgx-a100-80gb", fsdp(false))));
  int copies = 0;
  for (const Event& e : on.timeline.events) {
    const std::string& n = on.timeline.name(e);
    if (n != "offload_param_fetch" && n != "offload_grad_copy") continue;
    ++copies;
    EXPECT_EQ(e.kind, EventKind::memcpy) << n;
    EXPECT_EQ(e.stream, kDataStream) << n;
  }
  EXPECT_GT(copies, 0);
  EXPECT_GT(on.iteration_time, off.iteration_time);
  EXPECT_NEAR(on.mean.compute + on.mean.exposed + on.mean.memcpy + on.mean.idle, on.mean.wall,
              1e-9 * on.mean.wall);
}

TEST(FsdpOffload, TheGpuHoldsNoShardAndTheHostHoldsSixteenBytes) {
  const Scenario on = scenario("gpt2-xl", "dgx-a100-80gb", fsdp(true));
  const Scenario off = scenario("gpt2-xl", "dgx-a100-80gb", fsdp(false));
  const Workload w_on = build_workload(on), w_off = build_workload(off);
  const MemoryBreakdown a = memory_per_rank(w_on, w_on.roles[0]),
                        b = memory_per_rank(w_off, w_off.roles[0]);
  EXPECT_GT(b.weights.value(), 0);
  EXPECT_GT(b.gradients.value(), 0);
  EXPECT_GT(b.optimizer.value(), 0);
  EXPECT_EQ(a.weights.value(), 0);
  EXPECT_EQ(a.gradients.value(), 0);
  EXPECT_EQ(a.optimizer.value(), 0);
  EXPECT_EQ(a.comm_buffers.value(), b.comm_buffers.value());  // the gathered units stay
  EXPECT_EQ(a.activations.value(), b.activations.value());
  const double owned = optimizer_shard_params(on, w_on.roles[0]);
  EXPECT_NEAR(offload_host_bytes_per_node(w_on).value(), 16 * owned * 8, 1);
  EXPECT_EQ(offload_host_bytes_per_node(w_off).value(), 0);
  EXPECT_LE(search::memory_lower_bound(on), a.total().value());
}

// HSDP over two nodes (a shard group a node, 8 ranks, replicated twice): each copy in is the
// shard group's fp32 shard, each gradient shard goes out after the replicate group's all-reduce
// (FSDP2's foreach_reduce copies on the all-reduce's stream; FSDP1 offloads after its
// _all_reduce_hook), and the host holds 16 bytes a parameter of the 8-way shard. Without the
// offload the GPU's Adam steps that shard too.
TEST(FsdpOffload, UnderHsdpTheShardIsTheShardGroupsAndTheCopyFollowsTheAllReduce) {
  const double link = 26.2e9;
  PlanInput in = fsdp(true);
  in.fsdp_sharding = FsdpSharding::hybrid_shard;
  const Scenario sc = scenario("gpt2-xl", "dgx-a100-80gb", in);
  const Workload w = build_workload(sc);
  int gathers = 0, outs = 0;
  for (const Chunk& ch : w.roles[0].chunks) {
    for (const OpList* l : {&ch.forward_first, &ch.forward, &ch.backward}) {
      for (std::uint32_t i = 0; i < l->size(); ++i) {
        const Op& op = (*l)[i];
        if (op.name == "fsdp_all_gather") {
          ++gathers;
          EXPECT_EQ(op.group_size, 8);
          EXPECT_NEAR(copy_before(*l, i).host_seconds,
                      static_cast<double>(op.elements) / 8 * 4 / link, 1e-15);
        }
        if (op.name != "offload_grad_copy") continue;
        ++outs;
        const auto deps = l->deps_of(i);
        ASSERT_EQ(deps.size(), 1u);
        const Op& ar = (*l)[deps[0]];
        EXPECT_EQ(ar.name, std::string_view("fsdp_replicate_all_reduce"));
        EXPECT_EQ(ar.group_size, 2);
        EXPECT_NEAR(op.host_seconds, static_cast<double>(ar.elements) * 4 / link, 1e-15);
      }
    }
  }
  EXPECT_GT(gathers, 0);
  EXPECT_GT(outs, 0);
  const double owned = optimizer_shard_params(sc, w.roles[0]);
  EXPECT_NEAR(owned, static_cast<double>(count_params(sc.model).total) / 8, 8);
  EXPECT_NEAR(offload_host_bytes_per_node(w).value(), 16 * owned * 8, 1);
  const MemoryBreakdown m = memory_per_rank(w, w.roles[0]);
  EXPECT_EQ(m.weights.value() + m.gradients.value() + m.optimizer.value(), 0);
  EXPECT_LE(search::memory_lower_bound(sc), m.total().value());
  // Without the offload every replica's Adam steps the same 8-way shard whose states its GPU
  // holds (it was priced over all 16 ranks until 2026-12-03).
  in.fsdp_cpu_offload.reset();
  const Scenario gpu = scenario("gpt2-xl", "dgx-a100-80gb", in);
  const Workload wg = build_workload(gpu);
  const auto adam = named(wg.roles[0].step, "adam");
  ASSERT_EQ(adam.size(), 1u);
  EXPECT_NEAR(adam[0].mem_bytes, owned * gpu.plan.adam_step_bytes(), 64);
  EXPECT_NEAR(memory_per_rank(wg, wg.roles[0]).optimizer.value(),
              owned * gpu.plan.optimizer_state_bytes(), 64);
}

// Gradient accumulation with a reduction every micro-batch (FSDP2's foreach_reduce, a gradient
// already on the host): each copy out blocks the thread that launches the backward, which then
// adds the shard to the host's fp32 gradient (8 bytes in, 4 out a parameter, the node's 8 ranks
// at once over the host's bandwidth); the next backward kernel waits for both. Reduced once at
// the end (--fsdp-grad-sync last-micro-batch) nothing is added.
TEST(FsdpOffload, AccumulatingOnTheHostBlocksTheBackward) {
  const double host = 409.6e9;
  PlanInput in = fsdp(true);
  in.global_batch = 256;  // 4 micro-batches of 4 on 16 ranks
  const Scenario sc = scenario("gpt2-xl", "dgx-a100-80gb", in);
  ASSERT_EQ(sc.plan.grad_accum, 4);
  const Workload w = build_workload(sc);
  int adds = 0, copies = 0;
  for (const Chunk& ch : w.roles[0].chunks) {
    const OpList& l = ch.backward;
    for (std::uint32_t i = 0; i < l.size(); ++i) {
      copies += l[i].name == "offload_grad_copy";
      if (l[i].name != "cpu_grad_add") continue;
      ++adds;
      EXPECT_EQ(stream_of(l[i]), kComputeStream);
      // it waits for its copy, which waits for its reduce-scatter
      const Op* copy = nullptr;
      for (auto d : l.deps_of(i))
        if (l[d].name == "offload_grad_copy") {
          copy = &l[d];
          const auto cd = l.deps_of(d);
          ASSERT_EQ(cd.size(), 1u);
          const Op& rs = l[cd[0]];
          EXPECT_EQ(rs.name, std::string_view("fsdp_reduce_scatter"));
          EXPECT_NEAR(l[i].host_seconds, 12.0 * static_cast<double>(rs.elements) / 16 * 8 / host,
                      1e-15);
        }
      EXPECT_NE(copy, nullptr);
      // and the next compute op of the backward waits for the add
      for (std::uint32_t k = i + 1; k < l.size(); ++k) {
        if (l[k].kind != OpKind::compute || stream_of(l[k]) != kComputeStream) continue;
        const auto kd = l.deps_of(k);
        EXPECT_NE(std::find(kd.begin(), kd.end(), i), kd.end()) << l[k].name;
        break;
      }
    }
  }
  EXPECT_GT(adds, 0);
  EXPECT_EQ(adds, copies);
  // describe's figures: a micro-batch adds the rank's whole shard, 12 bytes a parameter (the
  // units' padding aside).
  const ParamFetches a = grad_adds(w);
  EXPECT_EQ(a.copies, adds);
  const double owned = optimizer_shard_params(sc, w.roles[0]);
  EXPECT_NEAR(a.bytes, 12 * owned, 12.0 * adds);
  EXPECT_NEAR(a.seconds, 12 * owned * 8 / host, 12.0 * adds * 8 / host);
  // In the timeline every add starts after the copy of its unit and micro-batch ends.
  SimOptions o;
  o.timeline = true;
  const Prediction p = simulate(w, o);
  std::map<std::pair<int, int>, double> copied;  // (layer, micro-batch) -> the copy's end
  for (const Event& e : p.timeline.events)
    if (e.rank == 0 && p.timeline.name(e) == "offload_grad_copy")
      copied[{e.layer, e.microbatch}] = e.start + e.dur;
  int timed = 0;
  for (const Event& e : p.timeline.events) {
    if (e.rank != 0 || p.timeline.name(e) != "cpu_grad_add") continue;
    ++timed;
    EXPECT_EQ(e.kind, EventKind::compute);  // the CPU's work, not a copy
    const auto c = copied.find({e.layer, e.microbatch});
    ASSERT_NE(c, copied.end()) << e.layer << " " << e.microbatch;
    EXPECT_GE(e.start, c->second - 1e-12);
  }
  EXPECT_GT(timed, 0);
  // Reduced once at the end: no add, and a faster iteration.
  in.fsdp_grad_sync = FsdpGradSync::last_micro_batch;
  const Workload once = build_workload(scenario("gpt2-xl", "dgx-a100-80gb", in));
  EXPECT_EQ(grad_adds(once).copies, 0);
  for (const Chunk& ch : once.roles[0].chunks)
    EXPECT_TRUE(named(ch.backward, "cpu_grad_add").empty());
  EXPECT_LT(simulate(once).iteration_time, p.iteration_time);
}

TEST(FsdpOffload, PlansThatCannotOffloadAreRefused) {
  using testing::scenario_error;
  PlanInput ds = fsdp(true);
  ds.framework = Framework::deepspeed;
  ds.zero = 3;
  EXPECT_EQ(scenario_error("gpt2-xl", "dgx-a100-80gb", ds),
            "--fsdp-cpu-offload: expected --framework fsdp (PyTorch FSDP's CPU offload), got "
            "--framework deepspeed");
  PlanInput ns = fsdp(true);
  ns.fsdp_sharding = FsdpSharding::no_shard;
  EXPECT_EQ(scenario_error("gpt2-xl", "dgx-a100-80gb", ns)
                .rfind("--fsdp-cpu-offload: expected a sharded strategy", 0),
            0u);
  EXPECT_EQ(scenario_error("gpt2-xl", "vtrain-a100", fsdp(true))
                .rfind("--fsdp-cpu-offload: expected a system whose preset gives", 0),
            0u);
  EXPECT_EQ(to_json(scenario("gpt2-xl", "dgx-a100-80gb", fsdp(true)).plan)
                .value("fsdp_cpu_offload", false),
            true);
  // The search gives it to FSDP candidates that shard (HSDP too), reducing once or not.
  PlanInput base;
  base.fsdp_cpu_offload = true;
  search::PlanPoint pt = candidate(8, Framework::fsdp, 3);
  EXPECT_TRUE(search::to_plan_input(pt, 8, base).fsdp_cpu_offload.value_or(false));
  pt.global_batch = 16;  // two micro-batches, each reduced (FSDP2 accumulates on the host)
  EXPECT_TRUE(search::to_plan_input(pt, 8, base).fsdp_cpu_offload.value_or(false));
  pt.fsdp_sharding = FsdpSharding::hybrid_shard;  // HSDP too
  EXPECT_TRUE(search::to_plan_input(pt, 8, base).fsdp_cpu_offload.value_or(false));
  pt.fsdp_sharding = FsdpSharding::no_shard;
  EXPECT_FALSE(search::to_plan_input(pt, 8, base).fsdp_cpu_offload.has_value());
  pt.fsdp_sharding = FsdpSharding::full_shard;
  pt.framework = Framework::deepspeed;
  EXPECT_FALSE(search::to_plan_input(pt, 8, base).fsdp_cpu_offload.has_value());
}

// Megatron-Core's optimizer CPU offload (--optimizer-cpu-offload; docs/workload.md, "Megatron
// optimizer CPU offload"), against closed forms written here from
// megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py and the preset's bandwidths
// (DGX H100: PCIe Gen5 64 GB/s a GPU, host DRAM 614.4 GB/s a node):
// - the fraction f of the distributed optimizer's shard is stepped on the host: each gradient
//   copied out into a pinned fp32 buffer (4 bytes a parameter over the host link), torch's
//   single-tensor AdamW on the fp32 master (80 bytes a parameter through host memory), the fp32
//   weight cast to 16 bits on the CPU (4 in, 2 out) and copied back (2 bytes over the link);
//   the CPU parts count every rank of the node at once;
// - the rest (1 - f) keeps Adam on the GPU;
// - GPU memory keeps the gradient buffer and the 16-bit weights and loses f of the optimizer
//   states; the host holds 16 bytes a parameter of the fraction (fp32 master, gradient, moments).
PlanInput megatron_offload(double fraction, bool overlap) {
  PlanInput p = plan(8, 1, 1, 1, 8);
  p.framework = Framework::megatron;
  p.use_distributed_optimizer = true;
  p.precision = Precision::bf16;
  p.precision_aware_optimizer = true;
  if (fraction > 0) {
    p.optimizer_cpu_offload = true;
    p.optimizer_offload_fraction = fraction;
    if (overlap) p.overlap_cpu_optimizer_d2h_h2d = true;
  }
  return p;
}

TEST(MegatronOffload, StepPartsAreTheClosedForms) {
  const double link = 64e9, host = 614.4e9;
  for (double f : {1.0, 0.25}) {
    SCOPED_TRACE(f);
    const Scenario sc = scenario("llama3-8b", "dgx-h100", megatron_offload(f, false));
    const Workload w = build_workload(sc);
    const double owned = optimizer_shard_params(sc, w.roles[0]);
    EXPECT_NEAR(owned, static_cast<double>(count_params(sc.model).total) / 8, 1);
    const OpList& step = w.roles[0].step;
    EXPECT_NEAR(host_seconds(step, "offload_grad_copy"), 4 * f * owned / link, 1e-12);
    EXPECT_NEAR(host_seconds(step, "cpu_adamw"), 80 * f * owned * 8 / host, 1e-12);
    EXPECT_NEAR(host_seconds(step, "cpu_param_cast"), 6 * f * owned * 8 / host, 1e-12);
    EXPECT_NEAR(host_seconds(step, "offload_param_copy"), 2 * f * owned / link, 1e-12);
    // The GPU's Adam over the rest: its bytes the plan's per parameter (30 under bf16 with
    // fp32 states), over (1 - f) of the shard.
    const auto adam = named(step, "adam");
    if (f == 1.0) {
      EXPECT_TRUE(adam.empty());
    } else {
      ASSERT_EQ(adam.size(), 1u);
      EXPECT_NEAR(adam[0].mem_bytes, (1 - f) * owned * sc.plan.adam_step_bytes(), 64);
    }
  }
}

// The step is the iteration's tail (no --overlap-param-gather): without the overlap flag the
// iteration grows by d2h + max(GPU Adam, CPU step) + h2d - the whole GPU Adam it replaces; with
// it, by the slowest of the three host stages beside the GPU's part. Without stragglers (the
// preset's straggler_cv would add the groups' wait for their slowest rank, which grows with
// the compute stream's work between collectives: docs/cost-model.md).
TEST(MegatronOffload, IterationGrowsByTheHostPath) {
  const double link = 64e9, host = 614.4e9;
  SimOptions o;
  o.timeline = true;
  auto adam_seconds = [](const Prediction& p) {
    double s = 0;
    for (const Event& e : p.timeline.events)
      if (e.rank == 0 && p.timeline.name(e) == "adam") s += e.dur;
    return s;
  };
  auto steady = [](double f, bool overlap) {
    Scenario sc = scenario("llama3-8b", "dgx-h100", megatron_offload(f, overlap));
    sc.system.scale.straggler_cv = 0;
    return sc;
  };
  const Scenario base = steady(0, false);
  const Prediction off = simulate(build_workload(base), o);
  const double adam = adam_seconds(off);
  ASSERT_GT(adam, 0);
  const double owned = optimizer_shard_params(base, build_workload(base).roles[0]);
  for (double f : {1.0, 0.5}) {
    SCOPED_TRACE(f);
    const double d2h = 4 * f * owned / link, cpu = 86 * f * owned * 8 / host,
                 h2d = 2 * f * owned / link;
    const Prediction serial = simulate(build_workload(steady(f, false)), o);
    const double gpu = adam_seconds(serial);  // the GPU's Adam over the rest of the shard
    if (f == 1.0) EXPECT_EQ(gpu, 0);
    EXPECT_NEAR(serial.iteration_time - off.iteration_time, d2h + std::max(gpu, cpu) + h2d - adam,
                1e-6 * off.iteration_time);
    const Prediction piped = simulate(build_workload(steady(f, true)), o);
    EXPECT_NEAR(piped.iteration_time - off.iteration_time,
                std::max(gpu, std::max({d2h, cpu, h2d})) - adam, 1e-6 * off.iteration_time);
    EXPECT_LT(piped.iteration_time, serial.iteration_time);
  }
}

TEST(MegatronOffload, TheGpuLosesTheFractionsStatesAndTheHostHoldsSixteenBytes) {
  const Scenario off = scenario("llama3-8b", "dgx-h100", megatron_offload(0, false));
  const Workload w_off = build_workload(off);
  const MemoryBreakdown b = memory_per_rank(w_off, w_off.roles[0]);
  EXPECT_GT(b.optimizer.value(), 0);
  for (double f : {1.0, 0.3}) {
    SCOPED_TRACE(f);
    const Scenario on = scenario("llama3-8b", "dgx-h100", megatron_offload(f, false));
    const Workload w_on = build_workload(on);
    const MemoryBreakdown a = memory_per_rank(w_on, w_on.roles[0]);
    EXPECT_NEAR(a.optimizer.value(), b.optimizer.value() * (1 - f), 1);
    EXPECT_EQ(a.weights.value(), b.weights.value());
    EXPECT_EQ(a.gradients.value(), b.gradients.value());
    EXPECT_EQ(a.activations.value(), b.activations.value());
    const double owned = optimizer_shard_params(on, w_on.roles[0]);
    EXPECT_NEAR(offload_host_bytes_per_node(w_on).value(), 16 * f * owned * 8, 8);
    EXPECT_LE(search::memory_lower_bound(on), a.total().value());
  }
  EXPECT_EQ(offload_host_bytes_per_node(w_off).value(), 0);
}

TEST(MegatronOffload, PlansThatCannotOffloadAreRefused) {
  using testing::scenario_error;
  PlanInput ds = megatron_offload(1, false);
  ds.framework = Framework::deepspeed;
  ds.use_distributed_optimizer.reset();
  ds.precision_aware_optimizer.reset();  // Megatron's own (refused first outside it)
  ds.zero = 1;
  EXPECT_EQ(scenario_error("llama3-8b", "dgx-h100", ds),
            "--optimizer-cpu-offload: expected --framework megatron (Megatron-Core's "
            "HybridDeviceOptimizer), got --framework deepspeed");
  PlanInput plain = megatron_offload(1, false);
  plain.precision_aware_optimizer.reset();
  EXPECT_EQ(scenario_error("llama3-8b", "dgx-h100", plain)
                .rfind("--optimizer-cpu-offload: expected --use-precision-aware-optimizer", 0),
            0u);
  PlanInput alone = megatron_offload(0, false);
  alone.optimizer_offload_fraction = 0.5;
  EXPECT_EQ(scenario_error("llama3-8b", "dgx-h100", alone),
            "--optimizer-offload-fraction: expected --optimizer-cpu-offload beside it, got no "
            "--optimizer-cpu-offload");
  PlanInput piped = megatron_offload(0, false);
  piped.overlap_cpu_optimizer_d2h_h2d = true;
  EXPECT_EQ(scenario_error("llama3-8b", "dgx-h100", piped)
                .rfind("--overlap-cpu-optimizer-d2h-h2d: expected --optimizer-cpu-offload", 0),
            0u);
  EXPECT_EQ(scenario_error("llama3-8b", "vtrain-a100", megatron_offload(1, false))
                .rfind("--optimizer-cpu-offload: expected a system whose preset gives", 0),
            0u);
  const nlohmann::json j =
      to_json(scenario("llama3-8b", "dgx-h100", megatron_offload(0.5, true)).plan);
  EXPECT_EQ(j.value("optimizer_cpu_offload", false), true);
  EXPECT_EQ(j.value("optimizer_offload_fraction", 0.0), 0.5);
  EXPECT_EQ(j.value("overlap_cpu_optimizer_d2h_h2d", false), true);
  // The search keeps it for Megatron candidates only.
  PlanInput base = megatron_offload(1, false);
  search::PlanPoint pt = candidate(8, Framework::megatron, 1);  // the distributed optimizer
  EXPECT_TRUE(search::to_plan_input(pt, 8, base).optimizer_cpu_offload.value_or(false));
  pt.framework = Framework::deepspeed;
  EXPECT_FALSE(search::to_plan_input(pt, 8, base).optimizer_cpu_offload.has_value());
}

// A Megatron-LM script's flags are read as commscope's: the same prediction.
using MegatronOffloadScript = testing::TestFolder;
TEST_F(MegatronOffloadScript, FlagsPredictAsTheCommandLines) {
  const std::string dir = dir_.string();
  const std::string script = dir + "/offload.sh";
  std::ofstream(script) << "torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py "
                           "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
                           "--seq-length 4096 --micro-batch-size 1 --global-batch-size 8 --bf16 "
                           "--use-distributed-optimizer --use-precision-aware-optimizer "
                           "--optimizer-cpu-offload --optimizer-offload-fraction 0.5 "
                           "--overlap-cpu-optimizer-d2h-h2d\n";
  const std::string bin = COMMSCOPE_BIN;
  const testing::Outcome a = testing::run_shell(bin + " predict --megatron-args " + script +
                                                " --system dgx-h100 --format json");
  ASSERT_EQ(a.status, 0) << a.err;
  EXPECT_EQ(a.err.find("optimizer-cpu-offload"), std::string::npos) << a.err;  // not skipped
  const nlohmann::json pa = nlohmann::json::parse(a.out)["predictions"][0];
  EXPECT_EQ(pa["plan"]["optimizer_cpu_offload"], true);
  EXPECT_EQ(pa["plan"]["optimizer_offload_fraction"], 0.5);
  EXPECT_EQ(pa["plan"]["overlap_cpu_optimizer_d2h_h2d"], true);
  const std::string same = dir + "/same.sh";
  std::ofstream(same) << "torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py "
                         "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
                         "--seq-length 4096 --micro-batch-size 1 --global-batch-size 8 --bf16 "
                         "--use-distributed-optimizer --use-precision-aware-optimizer\n";
  const testing::Outcome b = testing::run_shell(
      bin + " predict --megatron-args " + same +
      " --system dgx-h100 --format json --optimizer-cpu-offload --optimizer-offload-fraction 0.5 "
      "--overlap-cpu-optimizer-d2h-h2d");
  ASSERT_EQ(b.status, 0) << b.err;
  const nlohmann::json pb = nlohmann::json::parse(b.out)["predictions"][0];
  EXPECT_EQ(pa["iteration_time_s"], pb["iteration_time_s"]);
  const testing::Outcome c = testing::run_shell(bin + " predict --megatron-args " + same +
                                                " --system dgx-h100 --format json");
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(nlohmann::json::parse(c.out)["predictions"][0]["iteration_time_s"],
            pa["iteration_time_s"]);
}

}  // namespace
}  // namespace commscope
