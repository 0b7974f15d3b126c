// NCCL's NVLS, NVLS_TREE and CollNet against their closed forms in NCCL 2.30.7
// src/graph/tuning.cc (ncclTopoTuneModel: busBw per algorithm, hwLatencies, nvlsEfficiency),
// the automatic choice, NCCL_ALGO-style forcing (--nccl-algo) and its refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "commscope/cost/collective.h"
#include "test_util.h"

#include <nlohmann/json.hpp>

namespace commscope {
namespace {

using testing::plan;
using testing::scenario;
using testing::scenario_error;

PlanInput with_algo(PlanInput p, const std::string& algo) {
  p.nccl_algo = algo;
  return p;
}

// tuning.cc: NVLS busBw = C x bwIntra x nvlsEfficiency x (C-1)/C, x 2 for AllReduce, then
// algorithm bandwidth x n / (2(n-1)); latency the NVLink NVLS hop only (no base latency).
TEST(Nvls, AllReduceInsideANodeIsTuningCcClosedForm) {
  Scenario sc = scenario("megatron-1.7b", "dgx-h100", with_algo(plan(8, 8), "nvls"));
  const LinkModel l = link_model(sc);
  const GroupPlacement g = place_group(sc, CommGroup::tensor);
  ASSERT_EQ(g.nodes, 1);
  const NcclTuning& t = sc.system.nccl;
  const double bn = l.intra.value() * t.nvls_efficiency * (t.nvls_channels - 1) / t.nvls_channels;
  const double lat = l.intra_latency.value() * t.sharp_hop_latency_us[2][0] / 3.4;
  for (double S : {1e6, 64e6, 1e9}) {
    const CollectiveCost c = collective_cost(Collective::all_reduce, S, g, l);
    EXPECT_EQ(c.algorithm, CollectiveAlgorithm::nvls) << S;
    EXPECT_EQ(cost_path(c), "model:nvls/Simple");
    const double n = 8;
    EXPECT_NEAR(c.time.value(), lat + 2 * (n - 1) / n * S / (2 * bn), 1e-12 + 1e-9 * S / bn);
  }
}

// tuning.cc: NVLS AllGather busBw x (ppn-1)/ppn with no bus-to-algorithm conversion.
TEST(Nvls, AllGatherInsideANodeIsTuningCcClosedForm) {
  Scenario sc = scenario("megatron-1.7b", "dgx-h100", with_algo(plan(8, 8), "nvls"));
  const LinkModel l = link_model(sc);
  const GroupPlacement g = place_group(sc, CommGroup::tensor);
  const double bn = l.nvls_bw, lat = l.sharp_hop[2][0];
  for (double S : {4e6, 256e6}) {
    const CollectiveCost c = collective_cost(Collective::all_gather, S, g, l);
    EXPECT_EQ(c.algorithm, CollectiveAlgorithm::nvls);
    EXPECT_NEAR(c.time.value(), lat + S / (bn * 7.0 / 8.0), 1e-9 * c.time.value());
  }
}

// NVLS_TREE across nodes: min(2 Bn, net x (2 with 2 nodes), C x per-channel cap); latency
// NVLS hop + 2 log2(N) network NVLSTree hops.
TEST(Nvls, TreeAcrossNodesIsTuningCcClosedForm) {
  for (int nodes : {2, 4}) {
    Scenario sc = scenario("megatron-1.7b", "dgx-h100", with_algo(plan(8 * nodes, 1), "nvlstree"));
    const LinkModel l = link_model(sc);
    const GroupPlacement g = place_group(sc, CommGroup::data);
    ASSERT_EQ(g.nodes, nodes);
    ASSERT_EQ(g.per_node, 8);
    const double net = group_net_bandwidth(g, l);
    const double bw = std::min(
        {2 * l.nvls_bw, net * (nodes <= 2 ? 2.0 : 1.0), l.nvls_tree_cap[nodes <= 2 ? 0 : 1]});
    const double extra = (fat_tree_switches(nodes, l.leaf_nodes) - 1) * l.switch_latency.value();
    const double lat = l.sharp_hop[3][0] + 2.0 * ceil_log2(nodes) * (l.sharp_hop[3][1] + extra);
    const double n = g.size, S = 128e6;
    const CollectiveCost c = collective_cost(Collective::all_reduce, S, g, l);
    EXPECT_EQ(c.algorithm, CollectiveAlgorithm::nvls_tree);
    EXPECT_NEAR(c.time.value(), lat + 2 * (n - 1) / n * S / bw, 1e-9 * c.time.value());
  }
}

// CollNet (named, on a fabric with SHARP): Direct 2 S / (beta / f x 0.85), Chain 2 S / beta.
TEST(CollNet, DirectAndChainAreTuningCcClosedForms) {
  Scenario sc = scenario("megatron-1.7b", "dgx-h100", with_algo(plan(32, 8), "collnet"));
  const LinkModel l = link_model(sc);
  const GroupPlacement g = place_group(sc, CommGroup::data);  // 4 nodes, 1 GPU each
  ASSERT_EQ(g.nodes, 4);
  ASSERT_EQ(g.per_node, 1);
  const double beta = std::min(l.intra.value(), group_net_bandwidth(g, l));
  const double extra = (fat_tree_switches(4, l.leaf_nodes) - 1) * l.switch_latency.value();
  const double S = 64e6;
  const double direct = l.sharp_net_ppn1 + extra + 2 * S / (beta * 0.85);
  const double chain = l.sharp_net_ppn1 + extra + 2 * S / beta;
  auto d = collective_cost(Collective::all_reduce, S, g, l, CollectiveAlgorithm::collnet_direct);
  auto c = collective_cost(Collective::all_reduce, S, g, l, CollectiveAlgorithm::collnet_chain);
  EXPECT_NEAR(d.time.value(), direct, 1e-9 * direct);
  EXPECT_NEAR(c.time.value(), chain, 1e-9 * chain);
  // Automatic among the named ones: the cheaper.
  EXPECT_EQ(collective_cost(Collective::all_reduce, S, g, l).algorithm,
            CollectiveAlgorithm::collnet_chain);
}

TEST(Nvls, AutoPicksNvlsForLargeIntraNodeAllReduceOnH100NeverOnA100) {
  Scenario h = scenario("megatron-1.7b", "dgx-h100", plan(8, 8));
  const CollectiveCost big = collective_cost(Collective::all_reduce, 256e6,
                                             place_group(h, CommGroup::tensor), link_model(h));
  EXPECT_EQ(big.algorithm, CollectiveAlgorithm::nvls);
  // Small messages: NVLS's 25 us hop loses to the ring/tree.
  const CollectiveCost small = collective_cost(Collective::all_reduce, 4096,
                                               place_group(h, CommGroup::tensor), link_model(h));
  EXPECT_NE(small.algorithm, CollectiveAlgorithm::nvls);
  Scenario a = scenario("megatron-1.7b", "dgx-a100-80gb", plan(8, 8));
  for (double S : {4096.0, 1e6, 256e6, 4e9})
    EXPECT_NE(
        collective_cost(Collective::all_reduce, S, place_group(a, CommGroup::tensor), link_model(a))
            .algorithm,
        CollectiveAlgorithm::nvls);
}

TEST(Nvls, NcclAlgoForcesAndExcludes) {
  // ^nvls on H100: ring or tree, as on a system without NVLS.
  Scenario sc = scenario("megatron-1.7b", "dgx-h100", with_algo(plan(8, 8), "^nvls,nvlstree"));
  const auto g = place_group(sc, CommGroup::tensor);
  const auto c = collective_cost(Collective::all_reduce, 256e6, g, link_model(sc));
  EXPECT_TRUE(c.algorithm == CollectiveAlgorithm::ring || c.algorithm == CollectiveAlgorithm::tree);
  // ring only, per function: all-reduce forced to Ring even where NVLS is cheaper.
  Scenario r = scenario("megatron-1.7b", "dgx-h100", with_algo(plan(8, 8), "allreduce:ring"));
  EXPECT_EQ(collective_cost(Collective::all_reduce, 256e6, g, link_model(r)).algorithm,
            CollectiveAlgorithm::ring);
  // nvls only, on a group of one GPU per node: NCCL cannot run it; Ring, as the path says.
  Scenario dp = scenario("megatron-1.7b", "dgx-h100", with_algo(plan(32, 8), "nvls"));
  EXPECT_EQ(collective_cost(Collective::all_reduce, 256e6, place_group(dp, CommGroup::data),
                            link_model(dp))
                .algorithm,
            CollectiveAlgorithm::ring);
  // Without --nccl-algo CollNet is never picked (NCCL_COLLNET_ENABLE=0 by default).
  Scenario none = scenario("megatron-1.7b", "dgx-h100", plan(32, 8));
  const auto a = collective_cost(Collective::all_reduce, 256e6, place_group(none, CommGroup::data),
                                 link_model(none));
  EXPECT_NE(a.algorithm, CollectiveAlgorithm::collnet_direct);
  EXPECT_NE(a.algorithm, CollectiveAlgorithm::collnet_chain);
}

TEST(Nvls, UnsupportedCombinationsAreRefusedWithOneLine) {
  for (const char* bad : {"nvls", "nvlstree"}) {
    const std::string e = scenario_error("megatron-1.7b", "dgx-a100-80gb", with_algo(plan(8), bad));
    EXPECT_NE(e.find("--nccl-algo"), std::string::npos) << e;
    EXPECT_NE(e.find("NVLink SHARP"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos);
  }
  const std::string pcie =
      scenario_error("megatron-1.7b", "polaris", with_algo(plan(8), "collnet"));
  EXPECT_NE(pcie.find("SHARP"), std::string::npos) << pcie;
  for (const char* bad : {"allgather:tree", "pat", "ring;tree", "bogus",
                          "allreduce:^ring,tree,nvls,nvlstree", "foo:ring"}) {
    const std::string e = scenario_error("megatron-1.7b", "dgx-h100", with_algo(plan(8), bad));
    EXPECT_EQ(e.rfind("--nccl-algo: expected", 0), 0u) << bad << ": " << e;
    EXPECT_NE(e.find(bad), std::string::npos) << e;
  }
}

// Measured curves still win over the model on NVLS systems.
TEST(Nvls, CurvesStillWin) {
  Scenario sc = scenario("megatron-1.7b", "dgx-h100", plan(8, 8));
  BusBwCurve cv;
  cv.collective = Collective::all_reduce;
  cv.scope = CurveScope::intra_node;
  cv.nodes = 1;
  cv.ranks = 8;
  cv.points = {{1e6, BytesPerSecond(100e9)}, {1e9, BytesPerSecond(100e9)}};
  LinkModel l = link_model(sc);
  std::vector<BusBwCurve> curves = {cv};
  attach_curves(l, curves);
  const auto c =
      collective_cost(Collective::all_reduce, 256e6, place_group(sc, CommGroup::tensor), l);
  EXPECT_EQ(c.source, CostSource::curve);
  EXPECT_NEAR(c.time.value(), 2.0 * 7 / 8 * 256e6 / 100e9, 1e-12);
}

// The preset fields round-trip through JSON and bad values are refused naming the field.
TEST(Nvls, PresetFieldsRoundTripAndAreChecked) {
  auto s = load_system("gb200-nvl72");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_TRUE(s.value().nccl.nvls);
  EXPECT_DOUBLE_EQ(s.value().nccl.nvls_efficiency, 0.74);
  auto back = system_from_json(to_json(s.value()), "round trip");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back.value().nccl.nvls, true);
  EXPECT_EQ(back.value().nccl.nvls_channels, s.value().nccl.nvls_channels);
  EXPECT_DOUBLE_EQ(back.value().nccl.nvls_tree_channel_gbs[1],
                   s.value().nccl.nvls_tree_channel_gbs[1]);
  EXPECT_EQ(back.value().nccl.collnet, true);
  nlohmann::json j = to_json(s.value());
  j["nccl"]["nvls_efficiency"] = 1.5;
  auto bad = system_from_json(j, "x.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("nccl.nvls_efficiency"), std::string::npos)
      << bad.error().message;
  j["nccl"]["nvls_efficiency"] = 0.8;
  j["nccl"]["nvls"] = 3;
  bad = system_from_json(j, "x.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("nccl.nvls"), std::string::npos) << bad.error().message;
}

}  // namespace
}  // namespace commscope
