// ZeRO-3 at scale (issue 11): the collectives of a DP group of 384 to 1,536 A100s on DGX A100
// nodes against NCCL's closed forms. NCCL 2.7-2.10 (src/graph/tuning.cc, ncclTopoTuneModel)
// runs all-gather and reduce-scatter as rings only (`if (coll != ncclFuncAllReduce && a !=
// NCCL_ALGO_RING) continue;`), with n - 1 steps of which nNodes - 1 cross the network:
// latency = baseLat + (nsteps - nInterSteps) x intraLat + nInterSteps x interLat.
#include <gtest/gtest.h>

#include <algorithm>

#include "commscope/cost/collective.h"
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

}  // namespace
}  // namespace commscope
