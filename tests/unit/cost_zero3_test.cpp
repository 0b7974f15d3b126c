// ZeRO-3 at scale (issue 11): the collectives of a DP group of 384 to 1,536 A100s on DGX A100
// nodes against NCCL's closed forms. NCCL 2.7-2.10 (src/graph/tuning.cc, ncclTopoTuneModel)
// runs all-gather and reduce-scatter as rings only (`if (coll != ncclFuncAllReduce && a !=
// NCCL_ALGO_RING) continue;`), with n - 1 steps of which nNodes - 1 cross the network:
// latency = baseLat + (nsteps - nInterSteps) x intraLat + nInterSteps x interLat.
#include <gtest/gtest.h>

#include <algorithm>

#include "commscope/cost/collective.h"
#include "commscope/sim/simulator.h"
#include "commscope/spec/framework_config.h"
#include "commscope/workload/workload.h"
#include "test_util.h"

namespace commscope {
namespace {

using testing::plan;
using testing::scenario;

// The ring's latency for a collective of n ranks over N nodes, protocol p, as tuning.cc writes it
// (with commscope's calibrated hops and the fat tree's extra switches per network hop).
double ring_latency(const LinkModel& l, int n, int N, int p, int leaf_nodes) {
  const int steps = n - 1, inter = N - 1;
  const double extra = (fat_tree_switches(N, leaf_nodes) - 1) * l.switch_latency.value();
  return l.base[0][p] + (steps - inter) * l.intra_hop[0][p] + inter * (l.net_hop[0][p] + extra);
}

TEST(CostZero3, AllGatherAndReduceScatterAreRingsWithNMinusOneSteps) {
  for (int gpus : {384, 768, 1536}) {
    Scenario sc = scenario("gpt3-175b", "dgx-a100-80gb", plan(gpus, 1, 1, 1, gpus));
    const LinkModel l = link_model(sc);
    const GroupPlacement g = place_group(sc, CommGroup::data);
    ASSERT_EQ(g.size, gpus);
    ASSERT_EQ(g.per_node, 8);
    ASSERT_EQ(g.nodes, gpus / 8);
    const int leaf = sc.system.scale.leaf_nodes;
    for (Collective c : {Collective::all_gather, Collective::reduce_scatter}) {
      // Every size NCCL could pick: the ring (never the tree), at each protocol's closed form.
      for (double bytes : {2.0 * 1536, 2.0 * 12288 * 1536, 2.0 * 12288 * 12288 * 4}) {
        const CollectiveCost best = collective_cost(c, bytes, g, l);
        EXPECT_EQ(best.algorithm, CollectiveAlgorithm::ring) << gpus << " " << bytes;
        for (int p = 0; p < 3; ++p) {
          const auto proto = static_cast<CollectiveProtocol>(p + 1);
          const CollectiveCost ring =
              collective_cost(c, bytes, g, l, CollectiveAlgorithm::ring, proto);
          const CollectiveCost tree =
              collective_cost(c, bytes, g, l, CollectiveAlgorithm::tree, proto);
          // Asking for a tree still runs the ring: NCCL has none for these collectives.
          EXPECT_EQ(tree.algorithm, CollectiveAlgorithm::ring);
          EXPECT_DOUBLE_EQ(tree.time.value(), ring.time.value());
          // Time minus the bandwidth term is the ring's latency, (n - 1) steps.
          const double beta = std::min(l.intra.value(), group_net_bandwidth(g, l));
          const double per = l.channel_bytes[p] * (p == 0 ? gpus : 1);
          const double share =
              std::clamp(bytes / per, 1.0, static_cast<double>(l.max_channels)) / l.max_channels;
          const double bw_term = bus_factor(c, gpus) * bytes / (beta * l.fraction[0][p] * share);
          EXPECT_NEAR(ring.time.value() - bw_term, ring_latency(l, gpus, gpus / 8, p, leaf), 1e-12)
              << gpus << " " << p;
          // NCCL's choice is the fastest protocol: no ring protocol beats it.
          EXPECT_LE(best.time.value(), ring.time.value());
          if (best.protocol == proto) {
            EXPECT_DOUBLE_EQ(best.time.value(), ring.time.value());
          }
        }
      }
    }
  }
}

// The latency term grows linearly with the ranks at a fixed per-rank byte count per step: twice
// the GPUs, (about) twice the small-message all-gather time, while the per-rank bandwidth term
// of a fixed buffer (what ZeRO-3 gathers: the full parameters) stays the same.
TEST(CostZero3, RingLatencyGrowsLinearlyWithRanks) {
  Scenario a = scenario("gpt3-175b", "dgx-a100-80gb", plan(768, 1, 1, 1, 1536));
  Scenario b = scenario("gpt3-175b", "dgx-a100-80gb", plan(1536, 1, 1, 1, 1536));
  const LinkModel la = link_model(a), lb = link_model(b);
  const GroupPlacement ga = place_group(a, CommGroup::data), gb = place_group(b, CommGroup::data);
  const auto simple = CollectiveProtocol::simple;
  const double ta =
      collective_cost(Collective::all_gather, 8, ga, la, CollectiveAlgorithm::ring, simple)
          .time.value();
  const double tb =
      collective_cost(Collective::all_gather, 8, gb, lb, CollectiveAlgorithm::ring, simple)
          .time.value();
  const double base = la.base[0][2];
  // (1535 - 191) intra + 191 net hops against (767 - 95) intra + 95 net hops.
  const double expect_delta = ring_latency(lb, 1536, 192, 2, b.system.scale.leaf_nodes) -
                              ring_latency(la, 768, 96, 2, a.system.scale.leaf_nodes);
  EXPECT_NEAR(tb - ta, expect_delta, 1e-9);
  EXPECT_NEAR((tb - base) / (ta - base), 2.0, 0.02);
  // A 1 GiB gather (ring Simple at both sizes): the bandwidth term is the same at both sizes
  // (within the (n-1)/n factor), so the time grows by the latency term alone.
  const double S = 1024.0 * 1024 * 1024;
  const double big_a =
      collective_cost(Collective::all_gather, S, ga, la, CollectiveAlgorithm::ring, simple)
          .time.value();
  const double big_b =
      collective_cost(Collective::all_gather, S, gb, lb, CollectiveAlgorithm::ring, simple)
          .time.value();
  EXPECT_NEAR(big_b - big_a, (tb - ta), 0.05 * (tb - ta) + 1e-3 * big_a);
}

// The premise of the ZeRO-3 rows: DeepSpeed's replay (--framework deepspeed, its defaults) of
// GPT-3 175B at DP 384, 768 and 1,536 issues the same calls per rank at every DP size (one
// gather per sub-module in forward and in backward; norms and biases, under
// stage3_param_persistence_threshold 1e5 elements, persistent), and each rank gathers the same
// bytes: the four weight matrices of every block plus the word and position embeddings, the
// tied head's word embedding again, each padded to a multiple of DP, in bf16.
TEST(CostZero3, DeepSpeedGathersTheSameBytesPerRankAtEveryScale) {
  std::int64_t calls_f = -1, calls_b = -1;
  for (int gpus : {384, 768, 1536}) {
    PlanInput p = plan(gpus, 1, 1, 1, 1536);
    p.framework = Framework::deepspeed;
    p.zero = 3;
    Scenario sc = scenario("gpt3-175b", "dgx-a100-80gb", p);
    const ModelSpec& m = sc.model;
    const std::int64_t h = m.hidden, f = m.ffn, n = gpus;
    auto pad = [n](std::int64_t e) { return static_cast<double>((e + n - 1) / n * n); };
    const double block = pad(h * 3 * h) + pad(h * h) + pad(h * f) + pad(f * h);
    const double wte = pad(m.vocab * h), wpe = pad(m.seq_length * h);
    const double forward = 2.0 * (wte + wpe + m.layers() * block + wte);
    Workload w = build_workload(sc);
    const Chunk& ch = w.roles[0].chunks[0];
    std::int64_t cf = 0, cb = 0;
    double bf = 0, rs = 0;
    for (const Op& op : ch.forward.ops())
      if (op.name == "ds_param_all_gather") ++cf, bf += op.bytes;
    for (const Op& op : ch.backward.ops()) {
      if (op.name == "ds_param_all_gather") ++cb;
      if (op.name == "ds_grad_reduce_scatter") rs += static_cast<double>(op.elements);
    }
    EXPECT_EQ(cf, 4 * m.layers() + 2) << gpus;  // embedding, 4 Linears per block, the head
    EXPECT_DOUBLE_EQ(bf, forward) << gpus;
    EXPECT_EQ(rs, static_cast<double>(w.roles[0].params)) << gpus;  // every gradient, once
    if (calls_f >= 0) {
      EXPECT_EQ(cf, calls_f);
      EXPECT_EQ(cb, calls_b);
    }
    calls_f = cf, calls_b = cb;
  }
}

// ---- DeepSpeed 0.3-0.5 (--deepspeed-version 0.3; presets/frameworks/deepspeed.json) ----
// DeepSpeed v0.3.13-v0.5.0, partition_parameters.py: _allgather_param calls
// torch.cuda.synchronize() before each parameter's all-gather and fills a list of world_size
// views; _reduce_scatter_gradients reduce-scatters the bucket's gradients one parameter per call.

PlanInput ds03(int gpus, std::int64_t micro, std::int64_t global, double host, int nics = -1) {
  PlanInput p = plan(gpus, 1, 1, micro, global);
  p.framework = Framework::deepspeed;
  p.zero = 3;
  p.deepspeed_version = "0.3";
  p.zero3_host_s_per_rank_per_call = host;
  if (nics >= 0) p.zero3_nics_per_group = nics;
  return p;
}

// The calls a rank issues per micro-batch, counted from the model's tensors: one gather per
// parameter tensor above stage3_param_persistence_threshold (1e5 elements) in forward and again
// in backward, one reduce-scatter per parameter tensor; each call after its host work of
// c x DP seconds, in line on the compute stream.
TEST(CostZero3, DeepSpeed03IssuesOneCallPerParameterAfterHostWorkOfDpTimesC) {
  const double c = 7e-6;
  for (int gpus : {64, 128}) {
    Scenario sc = scenario("gpt2-xl", "dgx-a100-80gb", ds03(gpus, 1, gpus, c));
    ASSERT_EQ(sc.plan.deepspeed_version, "0.3");
    ASSERT_TRUE(sc.plan.zero3_sync_gathers);
    ASSERT_TRUE(sc.plan.zero3_per_param_calls);
    const ModelSpec& m = sc.model;
    ASSERT_TRUE(m.bias);
    const std::int64_t h = m.hidden;
    // Per block 12 tensors reduced (4 weights, 4 biases, 2 norms x weight and bias); the
    // biases (h to 4h) and norms (h) are persistent, never gathered.
    const std::int64_t reduced = 12 * m.layers() + 2 + 2;  // + embeddings, final norm
    ASSERT_LT(4 * h, 100000);  // the biases are persistent at this width
    Workload w = build_workload(sc);
    const Chunk& ch = w.roles[0].chunks[0];
    std::int64_t gf = 0, gb = 0, rs = 0, hosts = 0;
    double host_s = 0;
    auto count = [&](const OpList& l, std::int64_t& g) {
      for (std::uint32_t i = 0; i < l.size(); ++i) {
        const Op& op = l[i];
        if (op.compute == ComputeClass::host && op.kind == OpKind::compute) {
          ++hosts;
          host_s += op.host_seconds;
          EXPECT_DOUBLE_EQ(op.host_seconds, c * gpus);
          // The host work precedes a call of this rank's DP group, the next op on the chain.
          ASSERT_LT(i + 1, l.size());
          EXPECT_EQ(l[i + 1].kind, OpKind::comm);
          EXPECT_EQ(l[i + 1].group_size, gpus);
        }
        if (op.name == "ds_param_all_gather") ++g;
        if (op.name == "ds_grad_reduce_scatter") ++rs;
        if (op.kind == OpKind::comm && op.group == CommGroup::data) {
          // In line: the call depends on the op before it (nothing runs beside it).
          ASSERT_GT(i, 0u);
          auto deps = l.deps_of(i);
          EXPECT_NE(std::find(deps.begin(), deps.end(), i - 1), deps.end()) << op.name;
        }
      }
    };
    count(ch.forward, gf);
    count(ch.backward, gb);
    // Forward: each non-persistent tensor once (the tied head's word embedding again unless
    // still held); backward: those stage3_max_reuse_distance (1e9 elements, in 0.3 too) did not
    // keep since forward.
    EXPECT_GE(gf, 4 * m.layers() + 2) << gpus;
    EXPECT_LE(gf, 4 * m.layers() + 3) << gpus;
    EXPECT_GT(gb, 0) << gpus;
    EXPECT_LE(gb, gf) << gpus;
    EXPECT_EQ(rs, reduced) << gpus;
    EXPECT_EQ(hosts, gf + gb + rs);
    EXPECT_NEAR(host_s, c * gpus * static_cast<double>(gf + gb + rs), 1e-12);
  }
}

// Simulated: with every call in line, every gather and reduce-scatter is exposed (exposed ==
// total), and the host term adds exactly c x DP x calls x micro-batches to the iteration.
TEST(CostZero3, DeepSpeed03ExposesAllCommunicationAndAddsTheHostTermExactly) {
  ScaleEffects off;  // no stragglers, no contention: the closed form holds exactly
  off.straggler_cv = 0;
  SimOptions o;
  o.scale = &off;
  const int gpus = 64;
  // One micro-batch per iteration (as in every corpus row), so that no reduce-scatter of one
  // micro-batch's backward is counted behind the next one's forward.
  const std::int64_t micro = 2, global = 128;
  Scenario a = scenario("gpt2-xl", "dgx-a100-80gb", ds03(gpus, micro, global, 0));
  Scenario b = scenario("gpt2-xl", "dgx-a100-80gb", ds03(gpus, micro, global, 1e-5));
  ASSERT_EQ(a.plan.grad_accum, 1);
  Workload wa = build_workload(a), wb = build_workload(b);
  const Prediction pa = simulate(wa, o), pb = simulate(wb, o);
  for (Collective c : {Collective::all_gather, Collective::reduce_scatter}) {
    const CommShare& s = pa.mean.by_collective[c];
    EXPECT_GT(s.total, 0);
    EXPECT_NEAR(s.exposed, s.total, 1e-9 * s.total) << to_string(c);
  }
  std::int64_t calls = 0;
  for (const OpList* l : {&wb.roles[0].chunks[0].forward, &wb.roles[0].chunks[0].backward})
    for (const Op& op : l->ops())
      if (op.compute == ComputeClass::host && op.kind == OpKind::compute) ++calls;
  ASSERT_GT(calls, 0);
  EXPECT_NEAR(pb.iteration_time - pa.iteration_time, 1e-5 * gpus * calls, 1e-9 * pb.iteration_time);
  // Today's DeepSpeed overlaps its prefetched gathers: less exposed than in 0.3.
  PlanInput cur = plan(gpus, 1, 1, micro, global);
  cur.framework = Framework::deepspeed;
  cur.zero = 3;
  const Prediction pc = simulate(build_workload(scenario("gpt2-xl", "dgx-a100-80gb", cur)), o);
  EXPECT_LT(pc.mean.by_collective[Collective::all_gather].exposed,
            pa.mean.by_collective[Collective::all_gather].exposed);
}

// The release's NIC count replaces the system's for its collectives; 0 keeps the system's.
TEST(CostZero3, DeepSpeed03NicsPerGroupReplacesTheSystems) {
  Scenario one = scenario("gpt2-xl", "dgx-a100-80gb", ds03(64, 1, 64, 0, 1));
  Scenario all = scenario("gpt2-xl", "dgx-a100-80gb", ds03(64, 1, 64, 0, 0));
  EXPECT_EQ(link_model(one).nics_per_group, 1);
  EXPECT_EQ(link_model(all).nics_per_group, all.system.scale.nics_per_group);
  const GroupPlacement g = place_group(one, CommGroup::data);
  EXPECT_DOUBLE_EQ(group_net_bandwidth(g, link_model(one)), link_model(one).nic.value());
  EXPECT_GT(group_net_bandwidth(g, link_model(all)), link_model(one).nic.value());
}

// The preset file as shipped, and the errors of the flags' checks.
TEST(CostZero3, DeepSpeedVersionsPresetAndErrors) {
  auto v = load_deepspeed_versions();
  ASSERT_TRUE(v.ok()) << v.error().message;
  ASSERT_GE(v->size(), 2u);
  EXPECT_EQ((*v)[0].version, "0.3");
  EXPECT_TRUE((*v)[0].zero3_sync_gathers);
  EXPECT_TRUE((*v)[0].zero3_per_param_calls);
  EXPECT_NE((*v)[0].provenance.find("on the fit rows t100, t102, t104 of"), std::string::npos);
  PlanInput p = ds03(64, 1, 64, 0);
  p.deepspeed_version = "9.9";
  EXPECT_NE(testing::scenario_error("gpt2-xl", "dgx-a100-80gb", p)
                .find("--deepspeed-version: expected one of 0.3|current, got '9.9'"),
            std::string::npos);
  p = ds03(64, 1, 64, 0);
  p.framework = Framework::fsdp;
  p.zero.reset();
  EXPECT_NE(testing::scenario_error("gpt2-xl", "dgx-a100-80gb", p)
                .find("--deepspeed-version: expected --framework deepspeed"),
            std::string::npos);
  p = ds03(64, 1, 64, 0);
  p.deepspeed_version.reset();
  p.zero3_host_s_per_rank_per_call = 2.0;
  EXPECT_NE(testing::scenario_error("gpt2-xl", "dgx-a100-80gb", p)
                .find("--zero3-host-per-rank-call: expected a number of seconds in [0, 1], got 2"),
            std::string::npos);
  // Without a release nothing changes: today's pattern, no host ops.
  PlanInput cur = plan(64, 1, 1, 1, 64);
  cur.framework = Framework::deepspeed;
  cur.zero = 3;
  Scenario sc = scenario("gpt2-xl", "dgx-a100-80gb", cur);
  EXPECT_FALSE(sc.plan.zero3_sync_gathers);
  const Workload w = build_workload(sc);  // held: a temporary's member would dangle
  for (const Op& op : w.roles[0].chunks[0].backward.ops())
    EXPECT_NE(op.compute == ComputeClass::host && op.kind == OpKind::compute, true);
}

}  // namespace
}  // namespace commscope
