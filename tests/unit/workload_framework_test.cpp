// The frameworks' collective patterns (--framework deepspeed|fsdp|megatron) against each
// framework's documented rules, computed here independently from the model's tensor shapes:
// - DeepSpeed ZeRO-3: deepspeed/runtime/zero/partitioned_param_coordinator.py (fetch_sub_module,
//   __params_to_release), stage3.py (reduce buckets), config.py (the stage3_* defaults);
// - PyTorch FSDP: torch/distributed/fsdp/_runtime_utils.py (_unshard with limit_all_gathers,
//   _pre_backward_hook / _post_backward_hook prefetch, _reduce_grad, HYBRID_SHARD's all-reduce);
// - Megatron-LM: megatron/core/distributed/param_and_grad_buffer.py and
//   distributed_data_parallel.py (bucket_size default, reduce-scatter under the distributed
//   optimizer, the parameter all-gather).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "commscope/report/describe.h"
#include "commscope/sim/simulator.h"
#include "commscope/spec/framework_config.h"
#include "commscope/workload/params.h"
#include "test_util.h"

namespace commscope {
namespace {

using testing::plan;
using testing::scenario;

// Each tensor's elements padded to a multiple of n (DeepSpeed partitions and FSDP's flat
// parameter both pad so that n ranks hold equal shards).
std::int64_t pad(std::int64_t e, std::int64_t n) {
  return (e + n - 1) / n * n;
}

// GPT-2's parameter tensors (LayerNorm with bias, biased Linears, tied head), from the model's
// shapes: one block's, in module order, each module a list of tensors.
std::vector<std::vector<std::int64_t>> gpt2_block_modules(const ModelSpec& m) {
  const std::int64_t h = m.hidden, f = m.ffn;
  return {{h, h}, {h * 3 * h, 3 * h}, {h * h, h}, {h, h}, {h * f, f}, {f * h, h}};
}

struct Gathers {
  std::int64_t calls = 0;
  double bytes = 0;
};
Gathers named(const OpList& l, std::string_view name) {
  Gathers g;
  for (const Op& op : l.ops())
    if (op.kind == OpKind::comm && op.name == name) ++g.calls, g.bytes += op.bytes;
  return g;
}

PlanInput ds_plan(int gpus) {
  PlanInput p = plan(gpus);
  p.framework = Framework::deepspeed;
  p.zero = 3;
  return p;
}

// ---- DeepSpeed ZeRO-3 ----

// Without prefetch, releasing everything at once (stage3_max_reuse_distance 0) and without
// persistent parameters, every module's pre-forward and pre-backward hook gathers exactly that
// module's tensors, each padded to a multiple of DP (DP 3 pads the 50257-row embedding).
TEST(DeepSpeedZero3, EveryModuleUseGathersItsPaddedTensors) {
  const int d = 3;
  PlanInput p = ds_plan(d);
  p.zero3_prefetch_bucket = 0;
  p.zero3_max_reuse_distance = 0;
  p.zero3_persistence_threshold = 0;
  Scenario sc = scenario("gpt2-large", "dgx-a100-80gb", p);
  const ModelSpec& m = sc.model;
  const int L = m.layers();
  double block = 0;
  std::int64_t block_numel = 0;
  for (const auto& mod : gpt2_block_modules(m))
    for (auto t : mod) block += static_cast<double>(pad(t, d)), block_numel += t;
  ASSERT_EQ(block_numel, block_params(m, 0));  // the shapes above are GPT-2's
  const double wte = static_cast<double>(pad(m.vocab * m.hidden, d));
  const double wpe = static_cast<double>(pad(m.seq_length * m.hidden, d));
  const double final_norm = 2.0 * static_cast<double>(pad(m.hidden, d));
  // forward: embedding (wte, wpe), 6 modules per block, final norm, the tied head (wte again)
  const double expected = (wte + wpe + L * block + final_norm + wte) * 2 /*bf16*/;
  Workload w = build_workload(sc);
  const Chunk& ch = w.roles[0].chunks[0];
  Gathers fwd = named(ch.forward, "ds_param_all_gather");
  Gathers bwd = named(ch.backward, "ds_param_all_gather");
  EXPECT_EQ(fwd.calls, 6 * L + 3);
  EXPECT_DOUBLE_EQ(fwd.bytes, expected);
  EXPECT_EQ(bwd.calls, 6 * L + 3);
  EXPECT_DOUBLE_EQ(bwd.bytes, expected);

  // Under full recompute each block's modules fire their pre-forward hooks again before their
  // backward: one more gather per module (the head is not recomputed).
  p.recompute = Recompute::full;
  Workload wr = build_workload(scenario("gpt2-large", "dgx-a100-80gb", p));
  Gathers bwd_r = named(wr.roles[0].chunks[0].backward, "ds_param_all_gather");
  EXPECT_EQ(bwd_r.calls, 12 * L + 3);
  EXPECT_DOUBLE_EQ(bwd_r.bytes, expected + L * block * 2);
}

// stage3_param_persistence_threshold: tensors of at most that many elements (norms, biases of
// GPT-2 Large) are never gathered again; modules with only such tensors gather nothing.
TEST(DeepSpeedZero3, PersistentParametersAreNotGathered) {
  PlanInput p = ds_plan(16);
  p.zero3_prefetch_bucket = 0;
  p.zero3_max_reuse_distance = 0;  // the default threshold, 1e5, stays
  Scenario sc = scenario("gpt2-large", "dgx-a100-80gb", p);
  const ModelSpec& m = sc.model;
  const double h = static_cast<double>(m.hidden), f = static_cast<double>(m.ffn);
  ASSERT_LT(f, 1e5);  // every norm and bias is persistent
  const double wte = static_cast<double>(m.vocab) * h;
  const double wpe = static_cast<double>(m.seq_length) * h;
  const double weights = 3 * h * h + h * h + 2 * h * f;  // qkv, out, fc, proj
  Workload w = build_workload(sc);
  Gathers fwd = named(w.roles[0].chunks[0].forward, "ds_param_all_gather");
  EXPECT_EQ(fwd.calls, 4 * m.layers() + 2);  // embedding, 4 Linears per block, tied head
  EXPECT_DOUBLE_EQ(fwd.bytes, (wte + wpe + m.layers() * weights + wte) * 2);
}

// A prefetch budget past the whole model (stage3_max_live_parameters too): the first hook
// fetches the embedding and prefetches every other parameter in one call; a prefetch that has
// passed a parameter's next use keeps it (__params_to_release), so backward gathers nothing.
// With stage3_max_live_parameters 0 nothing may be prefetched: one gather per module use.
TEST(DeepSpeedZero3, PrefetchBoundedByBucketAndLiveParameters) {
  PlanInput p = ds_plan(16);
  p.zero3_prefetch_bucket = std::int64_t{1} << 40;
  p.zero3_max_live_params = std::int64_t{1} << 40;
  // 1: a module used again right away (the tied head, forward then backward) keeps its
  // tensors; with 0 DeepSpeed's traversal stops before looking at that next use.
  p.zero3_max_reuse_distance = 1;
  p.zero3_persistence_threshold = 0;
  Scenario sc = scenario("gpt2-large", "dgx-a100-80gb", p);
  Workload w = build_workload(sc);
  const Chunk& ch = w.roles[0].chunks[0];
  Gathers fwd = named(ch.forward, "ds_param_all_gather");
  EXPECT_EQ(fwd.calls, 2);
  EXPECT_DOUBLE_EQ(fwd.bytes, static_cast<double>(count_params(sc.model).total) * 2);
  EXPECT_EQ(named(ch.backward, "ds_param_all_gather").calls, 0);

  p.zero3_max_live_params = 0;
  Workload w0 = build_workload(scenario("gpt2-large", "dgx-a100-80gb", p));
  EXPECT_EQ(named(w0.roles[0].chunks[0].forward, "ds_param_all_gather").calls,
            6 * sc.model.layers() + 3);
  EXPECT_EQ(named(w0.roles[0].chunks[0].backward, "ds_param_all_gather").calls,
            6 * sc.model.layers() + 2);  // the head's kept from its forward
}

// A prefetch call adds upcoming parameters while fewer than stage3_prefetch_bucket_size
// elements are on their way: each call but the last is at least the bucket and less than the
// bucket plus the largest module.
TEST(DeepSpeedZero3, PrefetchCallsFillTheBucket) {
  PlanInput p = ds_plan(16);  // 16 divides every GPT-2 Large tensor: no padding
  p.zero3_persistence_threshold = 0;
  p.zero3_max_reuse_distance = 1;  // as above: the tied head is not fetched again
  Scenario sc = scenario("gpt2-large", "dgx-a100-80gb", p);
  const std::int64_t h = sc.model.hidden;
  const std::int64_t largest = sc.model.vocab * h + sc.model.seq_length * h;  // the embedding
  const std::int64_t bucket = 3 * 4 * h * h;
  p.zero3_prefetch_bucket = bucket;
  p.zero3_max_live_params = std::int64_t{1} << 40;
  Workload w = build_workload(scenario("gpt2-large", "dgx-a100-80gb", p));
  std::vector<std::pair<std::int32_t, std::int64_t>> by_index;  // issue order, elements
  const Chunk& ch = w.roles[0].chunks[0];
  for (const OpList* l : {&ch.forward, &ch.backward})
    for (const Op& op : l->ops())
      if (op.name == "ds_param_all_gather") by_index.emplace_back(op.index, op.elements);
  std::sort(by_index.begin(), by_index.end());
  ASSERT_GE(by_index.size(), 3u);
  EXPECT_EQ(by_index[0].second, largest);  // the first hook fetches the embedding
  for (std::size_t i = 1; i + 1 < by_index.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_GE(by_index[i].second, bucket);
    EXPECT_LT(by_index[i].second, bucket + largest);
  }
}

// stage3_max_reuse_distance: a parameter used again within that many elements of the trace is
// kept. Past the whole trace nothing is gathered twice: not the tied head, not in backward.
TEST(DeepSpeedZero3, ReuseDistanceKeepsParameters) {
  PlanInput p = ds_plan(16);
  p.zero3_prefetch_bucket = 0;
  p.zero3_persistence_threshold = 0;
  p.zero3_max_reuse_distance = std::int64_t{1} << 40;
  Scenario sc = scenario("gpt2-large", "dgx-a100-80gb", p);
  Workload w = build_workload(sc);
  Gathers fwd = named(w.roles[0].chunks[0].forward, "ds_param_all_gather");
  EXPECT_EQ(fwd.calls, 6 * sc.model.layers() + 2);
  EXPECT_DOUBLE_EQ(fwd.bytes, static_cast<double>(count_params(sc.model).total) * 2);
  EXPECT_EQ(named(w.roles[0].chunks[0].backward, "ds_param_all_gather").calls, 0);
}

// Gradients: DeepSpeed reduces the bucket before a gradient that would take it past
// reduce_bucket_size, every micro-batch; recomputed here from the order backward completes
// gradients.
TEST(DeepSpeedZero3, GradientsReduceScatterInReduceBuckets) {
  PlanInput p = ds_plan(16);
  p.global_batch = 64;  // 4 micro-batches
  const std::int64_t cap = 50000000;
  p.zero_reduce_bucket = cap;
  Scenario sc = scenario("gpt2-large", "dgx-a100-80gb", p);
  Workload w = build_workload(sc);
  const OpList& bw = w.roles[0].chunks[0].backward;
  std::vector<std::int64_t> expected;
  std::int64_t acc = 0;
  for (const Op& op : bw.ops()) {
    if (op.kind != OpKind::compute || op.grad_params <= 0) continue;
    if (acc > 0 && acc + op.grad_params > cap) expected.push_back(acc), acc = 0;
    acc += op.grad_params;
  }
  expected.push_back(acc);
  std::vector<std::int64_t> got;
  for (const Op& op : bw.ops())
    if (op.name == "ds_grad_reduce_scatter") {
      got.push_back(op.elements);
      EXPECT_EQ(op.collective, Collective::reduce_scatter);
      EXPECT_FALSE(op.last_microbatch_only);
    }
  EXPECT_EQ(got, expected);
  std::int64_t sum = 0;
  for (auto g : got) sum += g;
  EXPECT_EQ(sum, w.roles[0].params);
  EXPECT_EQ(w.microbatches, 4);
}

// DeepSpeed below ZeRO-3 keeps commscope's pattern, which already follows stages 0-2.
TEST(DeepSpeedZero3, LowerStagesUnchanged) {
  for (int z = 0; z <= 2; ++z) {
    PlanInput p = plan(16);
    p.zero = z;
    Workload a = build_workload(scenario("gpt2-large", "dgx-a100-80gb", p));
    p.framework = Framework::deepspeed;
    Workload b = build_workload(scenario("gpt2-large", "dgx-a100-80gb", p));
    auto va = comm_volume(a, a.roles[0]), vb = comm_volume(b, b.roles[0]);
    // Without --framework (commscope-train), ZeRO adds its gradient-norm all-reduce: one call
    // of one fp64 scalar; the rest is DeepSpeed's pattern.
    if (z >= 1) {
      auto it = std::find_if(va.begin(), va.end(), [](const CommVolume& v) {
        return v.group == CommGroup::data && v.collective == Collective::all_reduce;
      });
      ASSERT_NE(it, va.end());
      EXPECT_EQ(it->calls, 1);
      EXPECT_DOUBLE_EQ(it->bytes, 8.0);
      va.erase(it);
    }
    ASSERT_EQ(va.size(), vb.size());
    for (std::size_t i = 0; i < va.size(); ++i) {
      EXPECT_EQ(va[i].calls, vb[i].calls);
      EXPECT_DOUBLE_EQ(va[i].bytes, vb[i].bytes);
    }
  }
}

// ---- PyTorch FSDP ----

PlanInput fsdp_plan(int gpus, FsdpSharding s) {
  PlanInput p = plan(gpus);
  p.framework = Framework::fsdp;
  p.fsdp_sharding = s;
  return p;
}

struct FsdpForm {
  double root = 0;                 // root unit: embedding, final norm (tied head)
  std::vector<std::int64_t> unit;  // one per block
  // The flat parameters padded to a multiple of the shard group d: the root's, the blocks' sum.
  double padded_root(int d) const {
    return static_cast<double>(pad(static_cast<std::int64_t>(root), d));
  }
  double padded_units(int d) const {
    double sum = 0;
    for (auto u : unit) sum += static_cast<double>(pad(u, d));
    return sum;
  }
};
FsdpForm fsdp_units(const ModelSpec& m) {
  FsdpForm f;
  const OuterParams o = outer_params(m);
  f.root = static_cast<double>(o.word_embedding + o.position_embedding + o.final_norm);
  for (int l = 0; l < m.layers(); ++l) f.unit.push_back(block_params(m, l));
  return f;
}

// FULL_SHARD: per unit an all-gather before forward, again before backward, a reduce-scatter
// after backward; the root unit is gathered once (FSDP does not reshard the root after
// forward). SHARD_GRAD_OP keeps the gathered parameters for backward. Flat parameters padded to
// a multiple of the shard group.
TEST(Fsdp, FullShardAndShardGradOpCallsAndBytes) {
  const int d = 16;
  for (auto s : {FsdpSharding::full_shard, FsdpSharding::shard_grad_op}) {
    SCOPED_TRACE(to_string(s));
    Scenario sc = scenario("gpt2-large", "dgx-a100-80gb", fsdp_plan(d, s));
    const FsdpForm f = fsdp_units(sc.model);
    const double units = f.padded_units(d), root = f.padded_root(d);
    const int L = sc.model.layers();
    Workload w = build_workload(sc);
    const Chunk& ch = w.roles[0].chunks[0];
    Gathers fwd = named(ch.forward, "fsdp_all_gather");
    Gathers bwd = named(ch.backward, "fsdp_all_gather");
    Gathers rs = named(ch.backward, "fsdp_reduce_scatter");
    EXPECT_EQ(fwd.calls, L + 1);
    EXPECT_DOUBLE_EQ(fwd.bytes, (root + units) * 2);
    const bool regather = s == FsdpSharding::full_shard;
    EXPECT_EQ(bwd.calls, regather ? L : 0);
    EXPECT_DOUBLE_EQ(bwd.bytes, regather ? units * 2 : 0.0);
    EXPECT_EQ(rs.calls, L + 1);
    EXPECT_DOUBLE_EQ(rs.bytes, (root + units) * 2);
  }
}

// HYBRID_SHARD on Polaris (4 GPUs a node), 4 nodes: all-gather and reduce-scatter over the 4
// GPUs of a node, then the reduced shard (1/4) all-reduced over the 4 nodes. NO_SHARD: one
// all-reduce of each unit's gradient. Without auto-wrap: one unit, the whole model.
TEST(Fsdp, HybridNoShardAndOneUnit) {
  Scenario sc = scenario("gpt2-large", "polaris", fsdp_plan(16, FsdpSharding::hybrid_shard));
  FsdpForm f = fsdp_units(sc.model);
  const int L = sc.model.layers();
  Workload w = build_workload(sc);
  const OpList& bw = w.roles[0].chunks[0].backward;
  double shard_sum = 0;
  for (auto u : f.unit) shard_sum += static_cast<double>(pad(u, 4) / 4);
  shard_sum += static_cast<double>(pad(static_cast<std::int64_t>(f.root), 4) / 4);
  Gathers ar = named(bw, "fsdp_replicate_all_reduce");
  EXPECT_EQ(ar.calls, L + 1);
  EXPECT_DOUBLE_EQ(ar.bytes, shard_sum * 2);
  for (const Op& op : bw.ops()) {
    if (op.name == "fsdp_all_gather" || op.name == "fsdp_reduce_scatter") {
      EXPECT_EQ(op.group_size, 4);
      EXPECT_EQ(op.span, GroupSpan::intra_node);
    }
    if (op.name == "fsdp_replicate_all_reduce") {
      EXPECT_EQ(op.group_size, 4);
      EXPECT_EQ(op.span, GroupSpan::inter_node);
    }
  }

  Scenario ns = scenario("gpt2-large", "dgx-a100-80gb", fsdp_plan(16, FsdpSharding::no_shard));
  Workload wn = build_workload(ns);
  Gathers nar = named(wn.roles[0].chunks[0].backward, "fsdp_all_reduce");
  EXPECT_EQ(nar.calls, L + 1);
  EXPECT_DOUBLE_EQ(nar.bytes, static_cast<double>(count_params(ns.model).total) * 2);
  EXPECT_EQ(named(wn.roles[0].chunks[0].forward, "fsdp_all_gather").calls, 0);

  // _HYBRID_SHARD_ZERO2: the same groups, the parameters kept from forward (no backward
  // gather), gradients as HYBRID_SHARD's; memory as ZeRO-2.
  Scenario z2 = scenario("gpt2-large", "polaris", fsdp_plan(16, FsdpSharding::hybrid_shard_zero2));
  EXPECT_EQ(z2.plan.zero, 2);
  Workload wz = build_workload(z2);
  const Chunk& cz = wz.roles[0].chunks[0];
  EXPECT_EQ(named(cz.forward, "fsdp_all_gather").calls, L + 1);
  EXPECT_EQ(named(cz.backward, "fsdp_all_gather").calls, 0);
  Gathers zar = named(cz.backward, "fsdp_replicate_all_reduce");
  EXPECT_EQ(zar.calls, L + 1);
  EXPECT_DOUBLE_EQ(zar.bytes, shard_sum * 2);
  for (const OpList* list : {&cz.forward, &cz.backward})
    for (const Op& op : list->ops())
      if (op.name == "fsdp_all_gather" || op.name == "fsdp_reduce_scatter") {
        EXPECT_EQ(op.group_size, 4);
        EXPECT_EQ(op.span, GroupSpan::intra_node);
      }

  PlanInput one = fsdp_plan(16, FsdpSharding::full_shard);
  one.fsdp_wrap = FsdpWrap::model;
  Workload wm = build_workload(scenario("gpt2-large", "dgx-a100-80gb", one));
  EXPECT_EQ(named(wm.roles[0].chunks[0].forward, "fsdp_all_gather").calls, 1);
  EXPECT_EQ(named(wm.roles[0].chunks[0].backward, "fsdp_all_gather").calls, 0);
  EXPECT_EQ(named(wm.roles[0].chunks[0].backward, "fsdp_reduce_scatter").calls, 1);
}

// HSDP's shard group as the plan sizes it (--fsdp-shard-size, torchtitan's
// data_parallel_shard_degree; --fsdp-replicate-size the other way round): 64 H100s, 8 to a node.
// Shard 16: the shard group's gathers and reduce-scatters over 2 nodes x 8, the replicate
// all-reduce over 4 nodes, one rank each; shard 4: the shard group inside a node, the replicate
// group 2 ranks on each of 8 nodes; by default a node's 8 ranks, one rank per node across.
// Bytes from the units' padded sizes; weights, gradients and optimizer states cut over the
// shard group; a shard group spanning more nodes costs more time.
TEST(Fsdp, HsdpShardGroupSize) {
  struct Case {
    std::optional<int> shard, replicate;
    int size, shard_nodes, rep_per_node;
  };
  double gather_time_8 = 0, gather_time_16 = 0;
  for (const Case c : {Case{16, {}, 16, 2, 1}, Case{{}, 4, 16, 2, 1}, Case{4, {}, 4, 1, 2},
                       Case{{}, {}, 8, 1, 1}}) {
    SCOPED_TRACE(c.size);
    PlanInput p = fsdp_plan(64, FsdpSharding::hybrid_shard);
    p.fsdp_shard_size = c.shard, p.fsdp_replicate_size = c.replicate;
    Scenario sc = scenario("llama3-8b", "dgx-h100", p);
    const int S = c.size, R = 64 / S;
    Workload w = build_workload(sc);
    const Role& r = w.roles[0];
    const Chunk& ch = r.chunks[0];
    double reduced = 0, replicated = 0;
    std::int64_t blocks = 0;
    for (const Op& op : ch.backward.ops()) {
      if (op.name == "fsdp_all_gather" || op.name == "fsdp_reduce_scatter") {
        EXPECT_EQ(op.group_size, S);
        const int per_node = S / c.shard_nodes;
        EXPECT_EQ(op.span, c.shard_nodes == 1 ? GroupSpan::intra_node : GroupSpan::nodes);
        if (op.span == GroupSpan::nodes) {
          EXPECT_EQ(op.per_node, per_node);
        }
      }
      if (op.name == "fsdp_reduce_scatter") {
        reduced += static_cast<double>(op.elements);
        blocks += op.layer >= 0;
        EXPECT_EQ(op.elements % S, 0);
      }
      if (op.name == "fsdp_replicate_all_reduce") {
        EXPECT_EQ(op.group_size, R);
        EXPECT_EQ(op.span, c.rep_per_node == 1 ? GroupSpan::inter_node : GroupSpan::nodes);
        if (op.span == GroupSpan::nodes) {
          EXPECT_EQ(op.per_node, c.rep_per_node);
        }
        replicated += static_cast<double>(op.elements);
      }
    }
    EXPECT_EQ(blocks, sc.model.layers());
    EXPECT_DOUBLE_EQ(replicated, reduced / S);  // each shard's 1/S, all-reduced over R
    const double P = static_cast<double>(r.params);
    const MemoryBreakdown mem = memory_per_rank(w, r);
    EXPECT_DOUBLE_EQ(mem.weights.value(), P * 2 / S);
    EXPECT_DOUBLE_EQ(mem.optimizer.value(), P * 12 / S);
    const double gathers = simulate(w).mean.by_collective[Collective::all_gather].total;
    if (S == 8) gather_time_8 = gathers;
    if (S == 16 && c.shard) gather_time_16 = gathers;
  }
  EXPECT_GT(gather_time_16, gather_time_8);

  // what is refused, naming the flag
  auto error = [](std::optional<int> shard, std::optional<int> replicate, FsdpSharding s,
                  int gpus) {
    PlanInput p = fsdp_plan(gpus, s);
    p.fsdp_shard_size = shard, p.fsdp_replicate_size = replicate;
    return testing::scenario_error("llama3-8b", "dgx-h100", p);
  };
  EXPECT_NE(error(16, {}, FsdpSharding::full_shard, 64)
                .find("--fsdp-shard-size: expected --fsdp-sharding hybrid_shard or "
                      "hybrid_shard_zero2 with it"),
            std::string::npos);
  EXPECT_NE(error(5, {}, FsdpSharding::hybrid_shard, 64)
                .find("--fsdp-shard-size: expected a divisor of the data-parallel size 64, got 5"),
            std::string::npos);
  EXPECT_NE(error(12, {}, FsdpSharding::hybrid_shard, 48)
                .find("--fsdp-shard-size: expected a divisor or a multiple of the 8 data-parallel "
                      "ranks of a node, got 12"),
            std::string::npos);
  EXPECT_NE(error({}, 4, FsdpSharding::hybrid_shard, 48)
                .find("--fsdp-replicate-size: expected replicas whose shard groups are a divisor "
                      "or a multiple of the 8 data-parallel ranks of a node, got 4 (shard groups "
                      "of 12)"),
            std::string::npos);
  EXPECT_NE(error(16, 4, FsdpSharding::hybrid_shard, 64)
                .find("--fsdp-replicate-size: expected it or --fsdp-shard-size, got both"),
            std::string::npos);
  PlanInput ddp = plan(64);
  ddp.fsdp_shard_size = 8;
  EXPECT_NE(testing::scenario_error("llama3-8b", "dgx-h100", ddp)
                .find("--fsdp-shard-size: expected --framework fsdp"),
            std::string::npos);
}

// Where backward gathers are issued: backward_pre before this unit's gradient computation,
// backward_post after it and before its reduce-scatter, none after its reduce-scatter.
TEST(Fsdp, BackwardPrefetchIssuePoints) {
  for (auto pf : {FsdpPrefetch::backward_pre, FsdpPrefetch::backward_post, FsdpPrefetch::none}) {
    SCOPED_TRACE(to_string(pf));
    PlanInput p = fsdp_plan(16, FsdpSharding::full_shard);
    p.fsdp_prefetch = pf;
    Workload w = build_workload(scenario("gpt2-large", "dgx-a100-80gb", p));
    const OpList& bw = w.roles[0].chunks[0].backward;
    const int l = 20;  // a middle block: where is block l-1's gather among block l's ops?
    std::size_t gather = 0, first_compute = 0, last_compute = 0, rs = 0;
    bool seen_compute = false;
    for (std::size_t i = 0; i < bw.size(); ++i) {
      const Op& op = bw[i];
      if (op.layer == l - 1 && op.name == "fsdp_all_gather") gather = i;
      if (op.layer == l && op.kind == OpKind::compute) {
        if (!seen_compute) first_compute = i, seen_compute = true;
        last_compute = i;
      }
      if (op.layer == l && op.name == "fsdp_reduce_scatter") rs = i;
    }
    ASSERT_TRUE(seen_compute && gather && rs);
    switch (pf) {
      case FsdpPrefetch::backward_pre:
        EXPECT_LT(gather, first_compute);
        break;
      case FsdpPrefetch::backward_post:
        EXPECT_GT(gather, last_compute);
        EXPECT_LT(gather, rs);
        break;
      case FsdpPrefetch::none:
        EXPECT_GT(gather, rs);
        break;
    }
  }
}

// limit_all_gathers: a unit's forward all-gather waits for the unit two before it to finish
// (at most two units' gathers in flight); without it the gathers wait for nothing.
TEST(Fsdp, LimitAllGathersBoundsGathersInFlight) {
  for (bool limit : {true, false}) {
    SCOPED_TRACE(limit);
    PlanInput p = fsdp_plan(16, FsdpSharding::full_shard);
    p.fsdp_limit_all_gathers = limit;
    Workload w = build_workload(scenario("gpt2-large", "dgx-a100-80gb", p));
    const OpList& f = w.roles[0].chunks[0].forward;
    int checked = 0;
    for (std::uint32_t i = 0; i < f.size(); ++i) {
      if (f[i].name != "fsdp_all_gather" || f[i].layer < 0) continue;
      auto deps = f.deps_of(i);
      if (!limit || f[i].layer < 2) {
        EXPECT_TRUE(deps.empty());
        continue;
      }
      ASSERT_EQ(deps.size(), 1u);
      EXPECT_EQ(f[deps[0]].layer, f[i].layer - 2);
      EXPECT_EQ(f[deps[0]].kind, OpKind::compute);
      ++checked;
    }
    if (limit) {
      EXPECT_EQ(checked, w.scenario.model.layers() - 2);
    }
  }
}

// The limit only adds dependencies, so the simulated iteration cannot get shorter.
TEST(Fsdp, SimulatorHonoursTheLimit) {
  PlanInput p = fsdp_plan(32, FsdpSharding::full_shard);
  p.fsdp_limit_all_gathers = false;
  const double free =
      simulate(build_workload(scenario("llama2-7b", "dgx-a100-80gb", p))).iteration_time;
  p.fsdp_limit_all_gathers = true;
  const double limited =
      simulate(build_workload(scenario("llama2-7b", "dgx-a100-80gb", p))).iteration_time;
  EXPECT_GT(free, 0);
  EXPECT_GE(limited, free);
}

// --fsdp-grad-sync: with M micro-batches, FSDP reduces each unit's gradients every micro-batch
// (M reduce-scatters of each), in the last micro-batch's backward (no_sync before it), or once
// after the last backward, before the optimizer (PyTorch's pipelining). SHARD_GRAD_OP then
// gathers each unit once, in the first forward: the other forwards are the same compute without
// the gathers. FULL_SHARD gathers every micro-batch, twice, but once a step it is kept after
// each backward (set_reshard_after_backward(False)): the first forward and every backward
// gather, 1 + M gathers of each unit, and the stage holds its weights whole as SHARD_GRAD_OP
// does. Byte counts from the units' padded sizes (fsdp_units, as above); the unsharded
// gradients stay in memory until reduced.
TEST(Fsdp, GradSyncOnceAStep) {
  const int d = 16, M = 4;
  for (auto s : {FsdpSharding::full_shard, FsdpSharding::shard_grad_op})
    for (auto sync :
         {FsdpGradSync::micro_batch, FsdpGradSync::last_micro_batch, FsdpGradSync::step}) {
      SCOPED_TRACE(std::string(to_string(s)) + " " + std::string(to_string(sync)));
      PlanInput p = fsdp_plan(d, s);
      p.micro_batch = 1, p.global_batch = d * M;
      p.fsdp_grad_sync = sync;
      Scenario sc = scenario("gpt2-large", "dgx-a100-80gb", p);
      ASSERT_EQ(sc.plan.grad_accum, M);
      const FsdpForm f = fsdp_units(sc.model);
      const double units = f.padded_units(d), root = f.padded_root(d);
      const int L = sc.model.layers();
      Workload w = build_workload(sc);
      const Role& r = w.roles[0];
      const Chunk& ch = r.chunks[0];
      const bool once = sync != FsdpGradSync::micro_batch;
      const bool gathers_once = once && s == FsdpSharding::shard_grad_op;
      // FULL_SHARD kept after each backward: forwards after the first gather nothing
      const bool kept = sync == FsdpGradSync::step && s == FsdpSharding::full_shard;
      EXPECT_EQ(sc.plan.fsdp_unsharded_after_backward(), kept);

      // per iteration, by collective
      double gathered = 0, reduced = 0;
      std::int64_t gather_calls = 0, rs_calls = 0;
      for (const CommVolume& v : comm_volume(w, r)) {
        if (v.collective == Collective::all_gather) gathered += v.bytes, gather_calls += v.calls;
        if (v.collective == Collective::reduce_scatter) reduced += v.bytes, rs_calls += v.calls;
      }
      const double per_mb_gather = (root + units + (s == FsdpSharding::full_shard ? units : 0)) * 2;
      EXPECT_DOUBLE_EQ(gathered, gathers_once ? per_mb_gather
                                 : kept       ? (root + units) * 2 + M * units * 2
                                              : M * per_mb_gather);
      EXPECT_EQ(gather_calls, gathers_once ? L + 1
                              : kept       ? L + 1 + M * L
                                           : M * (L + 1 + (s == FsdpSharding::full_shard ? L : 0)));
      EXPECT_DOUBLE_EQ(reduced, (root + units) * 2 * (once ? 1 : M));
      EXPECT_EQ(rs_calls, (L + 1) * (once ? 1 : M));

      // where they are
      const Gathers in_bwd = named(ch.backward, "fsdp_reduce_scatter");
      const Gathers in_step = named(r.step, "fsdp_reduce_scatter");
      EXPECT_EQ(in_bwd.calls, sync == FsdpGradSync::step ? 0 : L + 1);
      EXPECT_EQ(in_step.calls, sync == FsdpGradSync::step ? L + 1 : 0);
      for (const Op& op : ch.backward.ops()) {
        if (op.name == "fsdp_reduce_scatter") {
          EXPECT_EQ(op.last_microbatch_only, sync == FsdpGradSync::last_micro_batch);
        }
      }
      std::size_t adam = r.step.size(), last_rs = 0;
      for (std::size_t i = 0; i < r.step.size(); ++i) {
        if (r.step[i].name == "adam") adam = std::min(adam, i);
        if (r.step[i].name == "fsdp_reduce_scatter") {
          last_rs = i;
          EXPECT_EQ(r.step[i].phase, Phase::backward);
        }
      }
      if (sync == FsdpGradSync::step) {
        EXPECT_LT(last_rs, adam);
      }

      // the forwards: the first gathers, the others are the same compute without the gathers
      EXPECT_EQ(ch.forward_first.empty(), !gathers_once && !kept);
      if (gathers_once || kept) {
        EXPECT_EQ(named(ch.forward_first, "fsdp_all_gather").calls, L + 1);
        EXPECT_EQ(named(ch.forward, "fsdp_all_gather").calls, 0);
        EXPECT_EQ(ch.forward.size() + L + 1, ch.forward_first.size());
        std::vector<const Op*> a, b;
        for (const Op& op : ch.forward.ops()) a.push_back(&op);
        for (const Op& op : ch.forward_first.ops())
          if (!op.first_microbatch_only) b.push_back(&op);
        ASSERT_EQ(a.size(), b.size());
        for (std::size_t i = 0; i < a.size(); ++i) {
          EXPECT_EQ(a[i]->name, b[i]->name);
          EXPECT_EQ(a[i]->flops, b[i]->flops);
        }
        // every forward op after the first still waits for the op before it on the chain
        for (std::uint32_t i = 1; i < ch.forward.size(); ++i) {
          if (ch.forward[i].kind == OpKind::compute) {
            EXPECT_FALSE(ch.forward.deps_of(i).empty());
          }
        }
      }

      // memory: the unsharded gradients (bf16) until reduced, else a 1/d shard; the weights
      // (bf16) whole where they are kept, and then no gathered block counted beside them
      const double P = static_cast<double>(r.params);
      const MemoryBreakdown mem = memory_per_rank(w, r);
      EXPECT_DOUBLE_EQ(mem.gradients.value(), once ? P * 2 : P * 2 / d);
      const bool whole = s == FsdpSharding::shard_grad_op || kept;
      EXPECT_DOUBLE_EQ(mem.weights.value(), whole ? P * 2 : P * 2 / d);
      if (kept) {  // against FULL_SHARD freed after backward: no gathered blocks beside
        PlanInput freed = p;
        freed.fsdp_grad_sync = FsdpGradSync::last_micro_batch;
        Workload wf = build_workload(scenario("gpt2-large", "dgx-a100-80gb", freed));
        EXPECT_LT(mem.comm_buffers.value(), memory_per_rank(wf, wf.roles[0]).comm_buffers.value());
      }
      if (once) {  // accumulated in the reduce type where one is set (FSDP2)
        PlanInput q = p;
        q.grad_comm_dtype = DType::fp32;
        Workload w32 = build_workload(scenario("gpt2-large", "dgx-a100-80gb", q));
        EXPECT_DOUBLE_EQ(memory_per_rank(w32, w32.roles[0]).gradients.value(), P * 4);
      }

      // simulated: under SHARD_GRAD_OP, the data group's transfers once instead of M times
      if (s == FsdpSharding::shard_grad_op) {
        const Prediction pr = simulate(w);
        PlanInput every = p;
        every.fsdp_grad_sync = FsdpGradSync::micro_batch;
        const Prediction pe =
            simulate(build_workload(scenario("gpt2-large", "dgx-a100-80gb", every)));
        const double data = pr.mean.by_group[CommGroup::data].total;
        const double data_every = pe.mean.by_group[CommGroup::data].total;
        EXPECT_GT(data, 0);
        EXPECT_NEAR(data * (once ? M : 1), data_every, 1e-9 * data_every);
      }
    }
}

// FSDP2 over a MoE model as torchtitan shards it (torchtitan/distributed/fsdp.py,
// apply_fsdp_to_decoder): under expert parallelism a block's routed experts are sharded over the
// expert-data group ("efsdp": DP x TP / EP ranks), its other parameters over DP. Mixtral 8x7B on
// 64 GPUs, EP 8: each block gathers its dense part over 64 ranks and its rank's 1/8 of the
// experts over 8, before forward and again before backward (FULL_SHARD), and reduce-scatters
// both; the step reduces nothing more. Sizes from the Hugging Face config's shapes, here:
// attention with grouped KV heads, two RMSNorms and the router as the dense part, 8 SwiGLU
// experts of 3 x hidden x 14336 as the routed part.
// FSDP's buffers (docs/workload.md, "Memory per rank"): no buckets; the root unit gathered
// from its forward to its backward's end and, under FULL_SHARD, a block's unit and the one
// prefetched; and one block's reduction, the previous block's reduce input (the reduce type)
// beside the block's unsharded gradients (bf16; whole already under NO_SHARD), of which only
// what exceeds the loss's transient at the start of backward is counted; and the root's own
// reduction, last, once no activation is held (PP 1), where it outweighs the activations and the
// block's reduction. Llama 3 8B on 8 GPUs, gradients reduced in fp32, counted by hand: a block is
// q and o (h x h each), k and v (h x 1024 each), w1, w2, w3 (h x 14336 each) and two norms; the
// root the embedding, the untied head and the final norm. At 1,024 tokens a sample the root's
// reduction (6.3 GB) outweighs the activations; at 8,192 it does not.
TEST(Fsdp, BuffersAreTheGatheredUnitsAndOneReduction) {
  const double h = 4096, V = 128256, s = 1024;
  const double block = 2 * h * h + 2 * h * 1024 + 3 * h * 14336 + 2 * h;  // 218,112,000
  const double root = 2 * V * h + h;                                      // 1,050,677,248
  ASSERT_EQ(block, 218112000.0);
  const double reduce = block * (4 + 2);  // the fp32 reduce input and the bf16 gradients
  double act = 0, seq = s;                // the last call's activations and sequence length
  auto buffers = [&](FsdpSharding sh, FsdpWrap wrap, CrossEntropy ce) {
    PlanInput p = fsdp_plan(8, sh);
    p.fsdp_wrap = wrap;
    p.seq_length = static_cast<std::int64_t>(seq);
    p.micro_batch = 1;
    p.grad_comm_dtype = DType::fp32;
    p.cross_entropy = ce;
    Workload w = build_workload(scenario("llama3-8b", "dgx-h100", p));
    EXPECT_EQ(w.roles.size(), 1u);
    EXPECT_EQ(w.roles[0].fsdp_root_params,
              wrap == FsdpWrap::model ? w.roles[0].params : static_cast<std::int64_t>(root));
    const MemoryBreakdown mem = memory_per_rank(w, w.roles[0]);
    act = mem.activations.value();
    return mem.comm_buffers.value();
  };
  // What the root's reduction adds beyond what it replaces (`held` beside the activations).
  auto root_end = [&](double bytes_per_param, double held) {
    return std::max(0.0, root * bytes_per_param - (act + held));
  };
  const auto blk = FsdpWrap::block;
  const auto fused = CrossEntropy::fused;  // no loss transient
  double b = buffers(FsdpSharding::full_shard, blk, fused);
  EXPECT_GT(root_end(6, reduce), 0.0);
  EXPECT_DOUBLE_EQ(b, 2 * root + 2 * 2 * block + reduce + root_end(6, reduce));
  b = buffers(FsdpSharding::shard_grad_op, blk, fused);
  EXPECT_DOUBLE_EQ(b, reduce + root_end(6, reduce));
  b = buffers(FsdpSharding::no_shard, blk, fused);  // gradients whole: only the fp32 copies
  EXPECT_DOUBLE_EQ(b, 4 * block + root_end(4, 4 * block));
  // Megatron's unfused loss makes 2 bytes a logit (the bf16 logits beside their fp32 cast).
  b = buffers(FsdpSharding::full_shard, blk, CrossEntropy::vocab_parallel);
  const double beyond_loss = reduce - 2 * s * V;
  EXPECT_DOUBLE_EQ(b, 2 * root + 2 * 2 * block + beyond_loss + root_end(6, beyond_loss));
  // One unit: the whole model gathered and reduced once its activations are gone.
  const double all = root + 32 * block;
  b = buffers(FsdpSharding::full_shard, FsdpWrap::model, fused);
  EXPECT_DOUBLE_EQ(b, 2 * all + std::max(0.0, 6 * all - act));
  EXPECT_GT(6 * all, act);
  // At 8,192 tokens the activations outweigh the root's reduction.
  seq = 8192;
  b = buffers(FsdpSharding::full_shard, blk, fused);
  EXPECT_EQ(root_end(6, reduce), 0.0);
  EXPECT_DOUBLE_EQ(b, 2 * root + 2 * 2 * block + reduce);
}

TEST(Fsdp, ExpertsShardOverTheExpertDataGroup) {
  const int d = 64, ep = 8, M = 2;
  PlanInput p = fsdp_plan(d, FsdpSharding::full_shard);
  p.ep = ep;
  p.micro_batch = 1, p.global_batch = d * M;
  Scenario sc = scenario("mixtral-8x7b", "dgx-h100", p);
  const ModelSpec& m = sc.model;
  ASSERT_EQ(sc.plan.expert_dp(), d / ep);
  const std::int64_t h = m.hidden, kv = std::int64_t{m.kv_heads} * (h / m.heads);
  const std::int64_t dense = 2 * h * h + 2 * h * kv + 2 * h + h * m.experts;
  const std::int64_t experts = std::int64_t{m.experts} * 3 * h * m.ffn;
  const std::int64_t held = experts / ep;
  const int L = m.layers(), edp = d / ep;
  Workload w = build_workload(sc);
  const Role& r = w.roles[0];
  const Chunk& ch = r.chunks[0];
  EXPECT_EQ(r.expert_params, L * held);
  for (const OpList* list : {&ch.forward, &ch.backward})
    for (const Op& op : list->ops()) {
      if (op.name == "fsdp_expert_all_gather" || op.name == "fsdp_expert_reduce_scatter") {
        EXPECT_EQ(op.group, CommGroup::expert_data);
        EXPECT_EQ(op.group_size, edp);
        EXPECT_EQ(op.elements, pad(held, edp));
      }
      if ((op.name == "fsdp_all_gather" || op.name == "fsdp_reduce_scatter") && op.layer >= 0) {
        EXPECT_EQ(op.group, CommGroup::data);
        EXPECT_EQ(op.group_size, d);
        EXPECT_EQ(op.elements, pad(dense, d));
      }
    }
  EXPECT_EQ(named(ch.forward, "fsdp_expert_all_gather").calls, L);
  EXPECT_EQ(named(ch.backward, "fsdp_expert_all_gather").calls, L);
  EXPECT_EQ(named(ch.backward, "fsdp_expert_reduce_scatter").calls, L);
  for (const Op& op : r.step.ops()) EXPECT_EQ(op.name.find("expert"), std::string::npos);
  // per iteration: the expert-data group's bytes, M micro-batches, bf16
  double expert_bytes = 0;
  for (const CommVolume& v : comm_volume(w, r))
    if (v.group == CommGroup::expert_data) expert_bytes += v.bytes;
  EXPECT_DOUBLE_EQ(expert_bytes, 3.0 * M * L * static_cast<double>(pad(held, edp)) * 2);
  // memory: the experts' shards over 8 ranks, the rest over 64 (bf16 weights and gradients)
  const MemoryBreakdown mem = memory_per_rank(w, r);
  const double P = static_cast<double>(r.params), E = static_cast<double>(r.expert_params);
  EXPECT_DOUBLE_EQ(mem.weights.value(), (P - E) * 2 / d + E * 2 / edp);
  EXPECT_DOUBLE_EQ(mem.gradients.value(), (P - E) * 2 / d + E * 2 / edp);
  const Prediction pr = simulate(w);
  EXPECT_GT(pr.mean.by_group[CommGroup::expert_data].total, 0);

  // without EP every parameter is in the block's one flat parameter over DP
  PlanInput one = p;
  one.ep = 1;
  Workload w1 = build_workload(scenario("mixtral-8x7b", "dgx-h100", one));
  const Chunk& c1 = w1.roles[0].chunks[0];
  EXPECT_EQ(named(c1.forward, "fsdp_expert_all_gather").calls, 0);
  for (const Op& op : c1.forward.ops())
    if (op.name == "fsdp_all_gather" && op.layer >= 0) {
      EXPECT_EQ(op.elements, pad(dense + experts, d));
    }

  // under pipelining, reduced once a step: each stage's step reduce-scatters its blocks' experts
  PlanInput piped = p;
  piped.gpus = 2 * d, piped.pp = 2, piped.fsdp_grad_sync = FsdpGradSync::step;
  Workload wp = build_workload(scenario("mixtral-8x7b", "dgx-h100", piped));
  for (const Role& role : wp.roles) {
    EXPECT_EQ(named(role.step, "fsdp_expert_reduce_scatter").calls, L / 2);
    EXPECT_EQ(named(role.chunks[0].backward, "fsdp_expert_reduce_scatter").calls, 0);
  }

  // the expert patterns commscope does not model are refused, naming the flag
  PlanInput ddp = p;
  ddp.fsdp_sharding = FsdpSharding::no_shard;
  EXPECT_NE(testing::scenario_error("mixtral-8x7b", "dgx-h100", ddp).find("--fsdp-sharding"),
            std::string::npos);
  PlanInput ds = p;  // DeepSpeed-MoE: data and expert parallelism only
  ds.framework = Framework::deepspeed, ds.fsdp_sharding.reset();
  ds.tp = 2, ds.sequence_parallel = true;
  EXPECT_NE(testing::scenario_error("mixtral-8x7b", "dgx-h100", ds)
                .find("--tensor-model-parallel-size: expected 1 with experts under --framework "
                      "deepspeed"),
            std::string::npos);
}

// HSDP over a MoE model as torchtitan v0.2.2 meshes it (parallel_dims.py: the sparse mesh
// pp x dp_replicate x efsdp x ep x etp; parallelize.py shards the routed experts over
// dp_replicate x efsdp): Qwen3-30B-A3B (48 MoE blocks, 128 experts of 3 x 2048 x 768, Hugging
// Face config) on 64 H100s (8 nodes of 8), EP 8. The experts' shard group is efsdp = S x CP x
// TP / (EP x expert TP) consecutive ranks of the expert-data group (8 ranks, one per node: EP
// fills a node), replicated over R = 64 / S; the dense part is HSDP over S as for a dense model.
TEST(Fsdp, HsdpWithExperts) {
  struct Case {
    std::optional<int> shard, replicate;
    int S, efsdp;
  };
  const std::int64_t held = 128 / 8 * std::int64_t{3} * 2048 * 768;  // a block's, per EP rank
  for (const Case c : {Case{{}, {}, 8, 1}, Case{32, {}, 32, 4}, Case{{}, 2, 32, 4}}) {
    SCOPED_TRACE("S " + std::to_string(c.S));
    PlanInput p = fsdp_plan(64, FsdpSharding::hybrid_shard);
    p.ep = 8;
    p.fsdp_shard_size = c.shard, p.fsdp_replicate_size = c.replicate;
    const Scenario sc = scenario("qwen3-30b-a3b", "dgx-h100", p);
    ASSERT_EQ(sc.plan.expert_dp(), 8);
    EXPECT_EQ(hsdp_expert_shard_ranks(sc.plan, sc.gpus_per_node), c.efsdp);
    const int R = 64 / c.S;
    const Workload w = build_workload(sc);
    const Role& r = w.roles[0];
    const Chunk& ch = r.chunks[0];
    const int L = sc.model.layers();
    ASSERT_EQ(L, 48);
    EXPECT_EQ(r.expert_params, L * held);
    int gathers = 0, scatters = 0, replicas = 0;
    for (const OpList* list : {&ch.forward, &ch.backward})
      for (const Op& op : list->ops()) {
        if (op.name == "fsdp_expert_all_gather" || op.name == "fsdp_expert_reduce_scatter") {
          (op.name == "fsdp_expert_all_gather" ? gathers : scatters) += 1;
          EXPECT_EQ(op.group, CommGroup::expert_data);
          EXPECT_EQ(op.group_size, c.efsdp);
          EXPECT_EQ(op.elements, pad(held, c.efsdp));
          EXPECT_EQ(op.span, GroupSpan::inter_node);  // one expert-data rank per node
        }
        if (op.name == "fsdp_expert_replicate_all_reduce") {
          ++replicas;
          EXPECT_EQ(op.group, CommGroup::expert_data);
          EXPECT_EQ(op.group_size, R);
          EXPECT_EQ(op.elements, pad(held, c.efsdp) / c.efsdp);  // each shard, over R
          EXPECT_EQ(op.span, GroupSpan::inter_node);
          EXPECT_TRUE(op.tag == OpTag::grad_bucket);
        }
        if (op.name == "fsdp_all_gather" || op.name == "fsdp_reduce_scatter") {
          EXPECT_EQ(op.group_size, c.S);
          EXPECT_EQ(op.span, c.S == 8 ? GroupSpan::intra_node : GroupSpan::nodes);
        }
      }
    // efsdp 1: each rank holds its experts whole, nothing to gather or scatter.
    EXPECT_EQ(gathers, c.efsdp > 1 ? 2 * L : 0);  // forward and backward
    EXPECT_EQ(scatters, c.efsdp > 1 ? L : 0);
    EXPECT_EQ(replicas, L);
    // Memory: the dense part over S, the experts over efsdp (bf16 weights, Adam's 12 bytes).
    const double P = static_cast<double>(r.params), E = static_cast<double>(r.expert_params);
    const MemoryBreakdown mem = memory_per_rank(w, r);
    EXPECT_DOUBLE_EQ(mem.weights.value(), (P - E) * 2 / c.S + E * 2 / c.efsdp);
    EXPECT_DOUBLE_EQ(mem.gradients.value(), (P - E) * 2 / c.S + E * 2 / c.efsdp);
    EXPECT_DOUBLE_EQ(mem.optimizer.value(), (P - E) * 12 / c.S + E * 12 / c.efsdp);
    EXPECT_GT(simulate(w).iteration_time, 0);
  }
  // what is refused, naming the flag that set the shard group
  auto error = [](int ep, std::optional<int> shard, FsdpSharding s) {
    PlanInput p = fsdp_plan(64, s);
    p.ep = ep;
    p.fsdp_shard_size = shard;
    return testing::scenario_error("qwen3-30b-a3b", "dgx-h100", p);
  };
  EXPECT_NE(error(16, {}, FsdpSharding::hybrid_shard)
                .find("--expert-model-parallel-size: expected a shard group holding whole expert "
                      "groups (torchtitan's efsdp): its shard x CP x TP ranks divisible by EP x "
                      "expert TP, got 8 ranks, EP x expert TP 16"),
            std::string::npos);
  EXPECT_NE(error(16, 8, FsdpSharding::hybrid_shard_zero2).find("--fsdp-shard-size: expected"),
            std::string::npos);
  EXPECT_NE(error(8, {}, FsdpSharding::no_shard).find("--fsdp-sharding: expected"),
            std::string::npos);
}

// ---- Megatron-LM ----

PlanInput megatron_plan(int gpus, bool dist_opt, bool overlap) {
  PlanInput p = plan(gpus);
  p.framework = Framework::megatron;
  p.use_distributed_optimizer = dist_opt;
  p.overlap_grad_reduce = overlap;
  p.global_batch = 4 * gpus;  // 4 micro-batches
  return p;
}

// Buckets of at least bucket_size = max(40M, 1M x DP) parameters in backward order, reduced
// on the last micro-batch only, in fp32 under bf16; the distributed optimizer reduce-scatters
// them and all-gathers the parameters bucket by bucket in bf16 after the step.
TEST(Megatron, DistributedOptimizerBuckets) {
  for (int d : {16, 64}) {
    SCOPED_TRACE(d);
    Scenario sc = scenario("llama2-7b", "dgx-a100-80gb", megatron_plan(d, true, true));
    const std::int64_t cap = std::max<std::int64_t>(40000000, std::int64_t{1000000} * d);
    EXPECT_EQ(sc.plan.megatron_bucket, cap);
    Workload w = build_workload(sc);
    const Role& r = w.roles[0];
    std::vector<std::int64_t> expected;
    std::int64_t acc = 0;
    for (const Op& op : r.chunks[0].backward.ops()) {
      if (op.kind != OpKind::compute || op.grad_params <= 0) continue;
      acc += op.grad_params;
      if (acc >= cap) expected.push_back(acc), acc = 0;
    }
    if (acc) expected.push_back(acc);
    std::vector<std::int64_t> rs, ag;
    for (const Op& op : r.chunks[0].backward.ops())
      if (op.name == "megatron_grad_bucket") {
        rs.push_back(op.elements);
        EXPECT_TRUE(op.last_microbatch_only);
        EXPECT_EQ(op.collective, Collective::reduce_scatter);
        EXPECT_EQ(op.dtype, DType::fp32);
      }
    for (const Op& op : r.step.ops())
      if (op.name == "megatron_param_all_gather") {
        ag.push_back(op.elements);
        EXPECT_EQ(op.dtype, DType::bf16);
      }
    EXPECT_EQ(rs, expected);
    EXPECT_EQ(ag, expected);
  }
}

// Megatron-LM reduces and gathers in place in its contiguous gradient and parameter buffers:
// no bucket buffers beside them (PP 1: no pipeline buffers either), where commscope's own
// ZeRO-1 pattern, DeepSpeed's, holds its reduce and all-gather buckets (500M elements each by
// default, at most the parameters).
TEST(Megatron, NoBucketBuffersOfItsOwn) {
  for (bool dist_opt : {false, true}) {
    SCOPED_TRACE(dist_opt);
    Workload w =
        build_workload(scenario("llama2-7b", "dgx-a100-80gb", megatron_plan(16, dist_opt, true)));
    EXPECT_EQ(memory_per_rank(w, w.roles[0]).comm_buffers.value(), 0.0);
  }
  PlanInput own = plan(16);
  own.zero = 1;
  own.global_batch = 64;
  Workload w = build_workload(scenario("llama2-7b", "dgx-a100-80gb", own));
  const double P = static_cast<double>(w.roles[0].params);
  EXPECT_DOUBLE_EQ(memory_per_rank(w, w.roles[0]).comm_buffers.value(),
                   2.0 * 2 * std::min(5e8, P));  // bf16, both buckets
}

// --ddp-bucket-size counts MiB of the gradient buffer: fp32 under bf16 (4 bytes a parameter),
// bf16 with --grad-reduce-in-bf16 or --main-grads-dtype bf16 (2 bytes), so the same MiB hold
// twice the parameters there; the reduce-scatters then carry the same bytes per bucket.
TEST(Megatron, BucketSizeInMibOfTheGradientBuffer) {
  auto bucket = [](std::optional<DType> wire, bool bf16_main_grads) {
    PlanInput p = megatron_plan(16, true, true);
    p.ddp_bucket_mb = 100;
    p.grad_comm_dtype = wire;
    if (bf16_main_grads) {
      p.precision_aware_optimizer = true;
      p.main_grads_dtype = DType::bf16;
    }
    Scenario sc = scenario("llama2-7b", "dgx-a100-80gb", p);
    std::vector<double> bytes;
    const Workload w = build_workload(sc);
    for (const Op& op : w.roles[0].chunks[0].backward.ops())
      if (op.name == "megatron_grad_bucket") bytes.push_back(op.bytes);
    return std::pair{sc.plan.megatron_bucket, bytes};
  };
  const std::int64_t mib100 = 100 * 1024 * 1024;
  const auto [fp32_params, fp32_bytes] = bucket(std::nullopt, false);
  const auto [bf16_params, bf16_bytes] = bucket(DType::bf16, false);
  const auto [main_params, main_bytes] = bucket(std::nullopt, true);
  EXPECT_EQ(fp32_params, mib100 / 4);
  EXPECT_EQ(bf16_params, mib100 / 2);
  EXPECT_EQ(main_params, mib100 / 2);
  // twice the parameters a bucket (buckets close at whole ops, so fewer of them), half the
  // bytes in all
  auto sum = [](const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); };
  ASSERT_FALSE(fp32_bytes.empty());
  EXPECT_LT(bf16_bytes.size(), fp32_bytes.size());
  EXPECT_EQ(bf16_bytes, main_bytes);
  EXPECT_DOUBLE_EQ(sum(bf16_bytes), sum(fp32_bytes) / 2);
  EXPECT_EQ(bucket(DType::fp32, false).first, mib100 / 4);
}

// Without --overlap-grad-reduce one bucket of everything after backward; without the
// distributed optimizer an all-reduce and no parameter gather.
TEST(Megatron, WithoutOverlapOrDistributedOptimizer) {
  Workload w =
      build_workload(scenario("llama2-7b", "dgx-a100-80gb", megatron_plan(16, true, false)));
  const Role& r = w.roles[0];
  Gathers rs = named(r.step, "megatron_grad_reduce");
  EXPECT_EQ(rs.calls, 1);
  EXPECT_DOUBLE_EQ(rs.bytes, static_cast<double>(r.params) * 4);
  Gathers ag = named(r.step, "megatron_param_all_gather");
  EXPECT_EQ(ag.calls, 1);
  EXPECT_DOUBLE_EQ(ag.bytes, static_cast<double>(r.params) * 2);
  EXPECT_EQ(named(r.chunks[0].backward, "megatron_grad_bucket").calls, 0);

  Workload d =
      build_workload(scenario("llama2-7b", "dgx-a100-80gb", megatron_plan(16, false, true)));
  for (const auto& v : comm_volume(d, d.roles[0])) {
    if (v.group == CommGroup::data) {
      EXPECT_EQ(v.collective, Collective::all_reduce);
    }
  }
  EXPECT_EQ(named(d.roles[0].step, "megatron_param_all_gather").calls, 0);
}

// ---- pipeline tensors partitioned over TP (DeepSpeed PipelineEngine) ----

// DeepSpeed's PipelineEngine (pipe/engine.py, _exec_forward_pass / _exec_backward_pass with
// pipeline.pipe_partitioned and grad_partitioned, both true in runtime/config.py) sends each TP
// rank's 1/TP slice of the boundary tensor (b x s x h) and the receiver rebuilds it with an
// all-gather over the TP group (PartitionedTensor.full()); Megatron-Core sends it whole. Sequence
// parallelism already splits the tensor: nothing to gather.
TEST(PipePartitioned, SlicesSentAndGatheredOverTp) {
  const int t = 2, b = 2;
  auto p2p = [&](Framework f, std::optional<bool> partitioned, bool sp) {
    PlanInput p = plan(16, t, 2, b);
    p.framework = f;
    p.pipe_partitioned = partitioned;
    if (sp) p.sequence_parallel = true;
    Scenario sc = scenario("gpt2-large", "dgx-a100-80gb", p);
    return std::pair{build_workload(sc), sc};
  };
  auto [whole, sc] = p2p(Framework::none, std::nullopt, false);
  const double tensor = 1.0 * b * sc.model.seq_length * sc.model.hidden * 2;  // bf16 bytes
  EXPECT_FALSE(sc.plan.pipe_partitioned);
  for (const Role& r : whole.roles) {
    const Chunk& c = r.chunks[0];
    const char* out = r.stage == 0 ? "pp_send_activation" : "pp_recv_activation";
    const char* back = r.stage == 0 ? "pp_recv_gradient" : "pp_send_gradient";
    EXPECT_EQ(named(c.forward, out).calls, 1);
    EXPECT_DOUBLE_EQ(named(c.forward, out).bytes, tensor);
    EXPECT_DOUBLE_EQ(named(c.backward, back).bytes, tensor);
    EXPECT_EQ(named(c.forward, "pp_gather_activation").calls, 0);
    EXPECT_EQ(named(c.backward, "pp_gather_gradient").calls, 0);
  }
  for (auto [f, given] : {std::pair{Framework::deepspeed, std::optional<bool>{}},
                          std::pair{Framework::none, std::optional<bool>{true}}}) {
    auto [w, s] = p2p(f, given, false);
    EXPECT_TRUE(s.plan.pipe_partitioned);
    const Role& first = w.roles[0].stage == 0 ? w.roles[0] : w.roles[1];
    const Role& last = w.roles[0].stage == 0 ? w.roles[1] : w.roles[0];
    EXPECT_DOUBLE_EQ(named(first.chunks[0].forward, "pp_send_activation").bytes, tensor / t);
    EXPECT_DOUBLE_EQ(named(last.chunks[0].forward, "pp_recv_activation").bytes, tensor / t);
    EXPECT_DOUBLE_EQ(named(last.chunks[0].backward, "pp_send_gradient").bytes, tensor / t);
    EXPECT_DOUBLE_EQ(named(first.chunks[0].backward, "pp_recv_gradient").bytes, tensor / t);
    // The receiver gathers the whole tensor over TP, right after its receive.
    for (auto [list, recv, gather] :
         {std::tuple{&last.chunks[0].forward, "pp_recv_activation", "pp_gather_activation"},
          std::tuple{&first.chunks[0].backward, "pp_recv_gradient", "pp_gather_gradient"}}) {
      Gathers g = named(*list, gather);
      EXPECT_EQ(g.calls, 1);
      EXPECT_DOUBLE_EQ(g.bytes, tensor);
      const auto& ops = list->ops();
      auto at = std::find_if(ops.begin(), ops.end(), [&](const Op& o) { return o.name == recv; });
      ASSERT_NE(at, ops.end());
      ASSERT_NE(at + 1, ops.end());
      EXPECT_EQ((at + 1)->name, gather);
      EXPECT_EQ((at + 1)->collective, Collective::all_gather);
      EXPECT_EQ((at + 1)->group, CommGroup::tensor);
      EXPECT_EQ((at + 1)->group_size, t);
    }
    EXPECT_EQ(named(first.chunks[0].forward, "pp_gather_activation").calls, 0);
  }
  // Turned off under DeepSpeed: whole tensors; under sequence parallelism: already split.
  auto [off, so] = p2p(Framework::deepspeed, false, false);
  EXPECT_FALSE(so.plan.pipe_partitioned);
  auto [split, ss] = p2p(Framework::deepspeed, true, true);
  EXPECT_TRUE(ss.plan.sequence_parallel);
  for (auto [w, bytes] : {std::pair{&off, tensor}, std::pair{&split, tensor / t}}) {
    for (const Role& r : w->roles) {
      const Chunk& c = r.chunks[0];
      EXPECT_DOUBLE_EQ(
          named(c.forward, r.stage == 0 ? "pp_send_activation" : "pp_recv_activation").bytes,
          bytes);
      EXPECT_EQ(named(c.forward, "pp_gather_activation").calls, 0);
      EXPECT_EQ(named(c.backward, "pp_gather_gradient").calls, 0);
    }
  }
}

// ---- plan checks ----

TEST(FrameworkPlan, OptionsOfAnotherFrameworkAreErrors) {
  PlanInput p = plan(16);
  p.fsdp_sharding = FsdpSharding::hybrid_shard;
  EXPECT_EQ(testing::scenario_error("gpt2-large", "dgx-a100-80gb", p),
            "--fsdp-sharding: expected --framework fsdp, got --framework none");
  PlanInput q = plan(16);
  q.framework = Framework::fsdp;
  q.zero = 3;
  EXPECT_NE(testing::scenario_error("gpt2-large", "dgx-a100-80gb", q).find("--zero:"),
            std::string::npos);
  PlanInput r = plan(16);
  r.framework = Framework::megatron;
  r.overlap_param_gather = true;
  EXPECT_NE(
      testing::scenario_error("gpt2-large", "dgx-a100-80gb", r).find("--overlap-param-gather"),
      std::string::npos);
  PlanInput g = plan(16);
  g.fsdp_grad_sync = FsdpGradSync::step;
  EXPECT_EQ(testing::scenario_error("gpt2-large", "dgx-a100-80gb", g),
            "--fsdp-grad-sync: expected --framework fsdp, got --framework none");
  PlanInput s = plan(16);
  s.use_distributed_optimizer = true;
  EXPECT_NE(testing::scenario_error("gpt2-large", "dgx-a100-80gb", s)
                .find("--use-distributed-optimizer: expected --framework megatron"),
            std::string::npos);
}

// The DeepSpeed config's zero_optimization keys reach the plan.
TEST(FrameworkPlan, DeepSpeedConfigKeys) {
  auto ds = plan_from_deepspeed(nlohmann::json::parse(R"({"zero_optimization": {
      "stage": 3, "stage3_prefetch_bucket_size": 2e7, "stage3_max_live_parameters": 3e8,
      "stage3_max_reuse_distance": 4e8, "stage3_param_persistence_threshold": "auto",
      "reduce_bucket_size": 6e7, "contiguous_gradients": false, "overlap_comm": false}})"),
                                "ds.json");
  ASSERT_TRUE(ds.ok()) << ds.error().message;
  EXPECT_EQ(*ds->zero3_prefetch_bucket, 20000000);
  EXPECT_EQ(*ds->zero3_max_live_params, 300000000);
  EXPECT_EQ(*ds->zero3_max_reuse_distance, 400000000);
  EXPECT_FALSE(ds->zero3_persistence_threshold.has_value());
  EXPECT_FALSE(*ds->contiguous_gradients);
  auto bad = plan_from_deepspeed(
      nlohmann::json::parse(R"({"zero_optimization": {"stage3_prefetch_bucket_size": -1}})"),
      "ds.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("stage3_prefetch_bucket_size"), std::string::npos);
  // The pipeline section: both partitioned (DeepSpeed's default), neither, or an error.
  auto pipe = [](const char* j) {
    return plan_from_deepspeed(nlohmann::json::parse(j), "ds.json");
  };
  EXPECT_FALSE(pipe("{}")->pipe_partitioned.has_value());
  EXPECT_FALSE(*pipe(R"({"pipeline": {"pipe_partitioned": false, "grad_partitioned": false}})")
                    ->pipe_partitioned);
  EXPECT_TRUE(*pipe(R"({"pipeline": {"pipe_partitioned": true}})")->pipe_partitioned);
  auto mixed = pipe(R"({"pipeline": {"pipe_partitioned": true, "grad_partitioned": false}})");
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.error().message.find("grad_partitioned"), std::string::npos);
  EXPECT_NE(mixed.error().message.find("false"), std::string::npos);
}

// A measured run's ZeRO stage in each framework's terms (validate --framework).
TEST(FrameworkPlan, ApplyFrameworkToAZeroPlan) {
  PlanInput p;
  p.zero = 3;
  ASSERT_TRUE(apply_framework(Framework::fsdp, p).ok());
  EXPECT_EQ(*p.fsdp_sharding, FsdpSharding::full_shard);
  EXPECT_FALSE(p.zero.has_value());
  EXPECT_EQ(*p.framework, Framework::fsdp);
  PlanInput q;
  q.zero = 2;
  ASSERT_TRUE(apply_framework(Framework::fsdp, q).ok());
  EXPECT_EQ(*q.fsdp_sharding, FsdpSharding::shard_grad_op);
  PlanInput r;
  r.zero = 1;
  ASSERT_TRUE(apply_framework(Framework::megatron, r).ok());
  EXPECT_TRUE(*r.use_distributed_optimizer);
  EXPECT_FALSE(r.zero.has_value());
  PlanInput s;
  s.zero = 3;
  auto st = apply_framework(Framework::megatron, s);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message.rfind("--framework: expected", 0), 0u);
  PlanInput d;
  d.zero = 3;
  ASSERT_TRUE(apply_framework(Framework::deepspeed, d).ok());
  EXPECT_EQ(*d.zero, 3);
  EXPECT_EQ(framework_of_name("fsdp"), Framework::fsdp);
  EXPECT_EQ(framework_of_name("-"), Framework::none);
}

// ---- describe ----

double pattern_bytes(const Description& d, std::string_view name, Phase phase) {
  double sum = 0;
  for (const auto& s : d.stages)
    for (const auto& c : s.pattern)
      if (c.name == name && c.phase == phase) sum += c.bytes;
  return sum;
}

// describe lists each collective of the pattern; its bytes per iteration against the closed
// forms above, for each framework, with 2 micro-batches.
TEST(FrameworkDescribe, BytesPerCollectiveMatchClosedForms) {
  const int d = 16, mb = 2;
  {
    PlanInput p = ds_plan(d);
    p.global_batch = mb * d;
    p.zero3_prefetch_bucket = 0;
    p.zero3_max_reuse_distance = 0;
    p.zero3_persistence_threshold = 0;
    Scenario sc = scenario("gpt2-large", "dgx-a100-80gb", p);
    Workload w = build_workload(sc);
    Description desc = describe(w);
    const double total = static_cast<double>(count_params(sc.model).total);
    const double wte = static_cast<double>(outer_params(sc.model).word_embedding);
    EXPECT_DOUBLE_EQ(pattern_bytes(desc, "ds_param_all_gather", Phase::forward),
                     mb * (total + wte) * 2);
    EXPECT_DOUBLE_EQ(pattern_bytes(desc, "ds_param_all_gather", Phase::backward),
                     mb * (total + wte) * 2);
    EXPECT_DOUBLE_EQ(pattern_bytes(desc, "ds_grad_reduce_scatter", Phase::backward),
                     mb * total * 2);
  }
  {
    PlanInput p = fsdp_plan(d, FsdpSharding::full_shard);
    p.global_batch = mb * d;
    Scenario sc = scenario("gpt2-large", "dgx-a100-80gb", p);
    FsdpForm f = fsdp_units(sc.model);
    double units = 0;
    for (auto u : f.unit) units += static_cast<double>(pad(u, d));
    const double root = static_cast<double>(pad(static_cast<std::int64_t>(f.root), d));
    Description desc = describe(build_workload(sc));
    EXPECT_DOUBLE_EQ(pattern_bytes(desc, "fsdp_all_gather", Phase::forward),
                     mb * (root + units) * 2);
    EXPECT_DOUBLE_EQ(pattern_bytes(desc, "fsdp_all_gather", Phase::backward), mb * units * 2);
    EXPECT_DOUBLE_EQ(pattern_bytes(desc, "fsdp_reduce_scatter", Phase::backward),
                     mb * (root + units) * 2);
  }
  {
    PlanInput p = megatron_plan(d, true, true);
    Scenario sc = scenario("llama2-7b", "dgx-a100-80gb", p);
    Workload w = build_workload(sc);
    Description desc = describe(w);
    const double params = static_cast<double>(count_params(sc.model).total);
    // last micro-batch only: once per iteration whatever the micro-batch count
    EXPECT_DOUBLE_EQ(pattern_bytes(desc, "megatron_grad_bucket", Phase::backward), params * 4);
    EXPECT_DOUBLE_EQ(pattern_bytes(desc, "megatron_param_all_gather", Phase::optimizer),
                     params * 2);
  }
  // Without a framework describe lists no pattern.
  Description none = describe(build_workload(scenario("gpt2-large", "dgx-a100-80gb", plan(d))));
  EXPECT_TRUE(none.stages[0].pattern.empty());
}

// describe's FSDP line says what memory holds sharded, as memory_per_rank counts it: the
// weights whole under SHARD_GRAD_OP or where they are kept after each backward (step), the
// gradients whole until a reduction once a step.
TEST(FrameworkDescribe, FsdpMemoryAsMemoryCountsIt) {
  const int d = 16, M = 4;
  struct Case {
    FsdpSharding s;
    FsdpGradSync sync;
    const char* label;
    bool weights_whole, grads_whole;
  };
  for (const Case& c :
       {Case{FsdpSharding::full_shard, FsdpGradSync::micro_batch, "memory as ZeRO-3)", false,
             false},
        Case{FsdpSharding::full_shard, FsdpGradSync::last_micro_batch,
             "memory as ZeRO-3 with whole gradients until their reduction)", false, true},
        Case{FsdpSharding::full_shard, FsdpGradSync::step, "memory as ZeRO-1)", true, true},
        Case{FsdpSharding::shard_grad_op, FsdpGradSync::micro_batch, "memory as ZeRO-2)", true,
             false},
        Case{FsdpSharding::shard_grad_op, FsdpGradSync::step, "memory as ZeRO-1)", true, true}}) {
    SCOPED_TRACE(std::string(to_string(c.s)) + " " + std::string(to_string(c.sync)));
    PlanInput p = fsdp_plan(d, c.s);
    p.micro_batch = 1, p.global_batch = d * M;
    p.fsdp_grad_sync = c.sync;
    Workload w = build_workload(scenario("gpt2-large", "dgx-a100-80gb", p));
    const std::string text = render_describe(w, describe(w), Format::table);
    EXPECT_NE(text.find(c.label), std::string::npos) << text.substr(0, 600);
    EXPECT_EQ(text.find("parameters kept after each backward") != std::string::npos,
              c.s == FsdpSharding::full_shard && c.sync == FsdpGradSync::step);
    const MemoryBreakdown mem = memory_per_rank(w, w.roles[0]);
    const double P = static_cast<double>(w.roles[0].params);
    EXPECT_DOUBLE_EQ(mem.weights.value(), c.weights_whole ? P * 2 : P * 2 / d);
    EXPECT_DOUBLE_EQ(mem.gradients.value(), c.grads_whole ? P * 2 : P * 2 / d);
  }
}

// ---- the command line ----

struct CliRun {
  int status = -1;
  std::string out, err;
};
CliRun run(const std::string& args) {
  auto o = testing::run_shell(std::string(COMMSCOPE_BIN) + " " + args + " </dev/null");
  return {o.status, o.out, o.err};
}

TEST(FrameworkCli, DescribeJsonCarriesThePattern) {
  CliRun r = run("describe --framework fsdp --fsdp-sharding hybrid_shard --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["plan"]["framework"], "fsdp");
  EXPECT_EQ(j["plan"]["fsdp_sharding"], "hybrid_shard");
  ASSERT_TRUE(j.contains("pattern"));
  bool replicate = false;
  for (const auto& c : j["pattern"])
    if (c["name"] == "fsdp_replicate_all_reduce") {
      replicate = true;
      EXPECT_EQ(c["span"], "inter-node");
      EXPECT_GT(c["bytes_per_rank"].get<double>(), 0);
    }
  EXPECT_TRUE(replicate);
  CliRun none = run("describe --format json");
  ASSERT_EQ(none.status, 0);
  EXPECT_FALSE(nlohmann::json::parse(none.out).contains("pattern"));
  EXPECT_FALSE(nlohmann::json::parse(none.out)["plan"].contains("framework"));
}

// validate --framework row predicts each corpus row with its own framework's pattern; an
// unknown framework is a one-line error.
TEST(FrameworkCli, ValidateTakesTheRowsFramework) {
  const std::string corpus =
      std::string(COMMSCOPE_SOURCE_DIR) + "/data/validation-comm/training.csv";
  CliRun own = run("validate " + corpus + " --format json");
  CliRun row = run("validate " + corpus + " --framework row --format json");
  ASSERT_EQ(own.status, 0) << own.err;
  ASSERT_EQ(row.status, 0) << row.err;
  auto a = nlohmann::json::parse(own.out), b = nlohmann::json::parse(row.out);
  ASSERT_EQ(a["rows"].size(), b["rows"].size());
  bool differs = false;  // the FSDP rows' predictions change with FSDP's pattern
  for (std::size_t i = 0; i < a["rows"].size(); ++i)
    differs |= a["rows"][i]["predicted_s"] != b["rows"][i]["predicted_s"];
  EXPECT_TRUE(differs);
  // NeMo 24.07's and 25.04's FP8 runs ran: with Megatron's pattern, gradients in their
  // recipes' bf16 and NeMo 25.04's FP8 parameters (the corpus's sourced grad_comm_dtype and
  // fp8_param_gather columns), every one of them fits.
  int nemo = 0;
  for (const auto& r : b["rows"]) {
    const std::string id = r["id"];
    if ((id < "t107" || id > "t113") && (id < "t122" || id > "t126")) continue;
    ++nemo;
    EXPECT_TRUE(r["fits"].get<bool>()) << id << " " << r["memory_per_gpu"];
  }
  EXPECT_EQ(nemo, 12);
  CliRun bad = run("validate " + corpus + " --framework pytorch");
  EXPECT_EQ(bad.status, 2);
  EXPECT_EQ(bad.err,
            "commscope: --framework: expected one of megatron|deepspeed|fsdp|row, got "
            "'pytorch'\n");
}

TEST(FrameworkCli, LimitAllGathersIsABooleanFlag) {
  CliRun bad = run("describe --framework fsdp --fsdp-limit-all-gathers=maybe");
  EXPECT_EQ(bad.status, 2);
  EXPECT_EQ(bad.err, "commscope: --fsdp-limit-all-gathers: expected true or false, got 'maybe'\n");
  CliRun off = run("describe --framework fsdp --fsdp-limit-all-gathers=false --format json");
  ASSERT_EQ(off.status, 0) << off.err;
  EXPECT_FALSE(nlohmann::json::parse(off.out)["plan"]["fsdp_limit_all_gathers"].get<bool>());
  CliRun on = run("describe --framework fsdp --fsdp-limit-all-gathers --format json");
  ASSERT_EQ(on.status, 0) << on.err;
  EXPECT_TRUE(nlohmann::json::parse(on.out)["plan"]["fsdp_limit_all_gathers"].get<bool>());
}

// --scatter-gather-tensors-in-pipeline (also --pipe-partitioned): a boolean flag, in the plan
// JSON when on; the CPU trainer, which sends whole tensors, refuses it.
TEST(FrameworkCli, PipePartitionedIsABooleanFlag) {
  const std::string base = "describe --gpus 8 --tp 2 --pp 2 --format json ";
  CliRun on = run(base + "--scatter-gather-tensors-in-pipeline");
  ASSERT_EQ(on.status, 0) << on.err;
  EXPECT_TRUE(nlohmann::json::parse(on.out)["plan"]["pipe_partitioned"].get<bool>());
  CliRun ds = run(base + "--framework deepspeed");
  ASSERT_EQ(ds.status, 0) << ds.err;
  EXPECT_TRUE(nlohmann::json::parse(ds.out)["plan"]["pipe_partitioned"].get<bool>());
  CliRun off = run(base + "--framework deepspeed --pipe-partitioned=false");
  ASSERT_EQ(off.status, 0) << off.err;
  EXPECT_FALSE(nlohmann::json::parse(off.out)["plan"].contains("pipe_partitioned"));
  CliRun bad = run(base + "--pipe-partitioned=maybe");
  EXPECT_EQ(bad.status, 2);
  EXPECT_EQ(
      bad.err,
      "commscope: --scatter-gather-tensors-in-pipeline: expected true or false, got 'maybe'\n");
  CliRun train = run("train --model gpt2-tiny-cpu --ranks 4 --tp 2 --pp 2 --pipe-partitioned");
  EXPECT_EQ(train.status, 2);
  EXPECT_EQ(train.err.rfind("commscope: --scatter-gather-tensors-in-pipeline: the CPU trainer", 0),
            0u)
      << train.err;
  EXPECT_TRUE(train.out.empty());
}

TEST(FrameworkCli, BadValuesAreOneLineErrors) {
  for (const char* args :
       {"--framework pytorch", "--framework fsdp --fsdp-sharding everything",
        "--framework fsdp --fsdp-prefetch sideways", "--framework fsdp --fsdp-wrap layer",
        "--framework fsdp --fsdp-limit-all-gathers=maybe", "--framework fsdp --fsdp-grad-sync once",
        "--use-distributed-optimizer", "--overlap-grad-reduce --no-overlap-grad-reduce",
        "--framework megatron --zero 1"}) {
    SCOPED_TRACE(args);
    CliRun r = run(std::string("describe ") + args);
    EXPECT_EQ(r.status, 2);
    EXPECT_TRUE(r.out.empty());
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("commscope: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("--"), std::string::npos) << r.err;  // names the flag
  }
}

}  // namespace
}  // namespace commscope
