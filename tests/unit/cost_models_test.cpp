// Cost models against closed forms: alpha-beta ring collectives with nccl-tests' bus factors,
// hierarchical collectives, NIC sharing, the roofline of compute ops; monotonicity.
#include <gtest/gtest.h>

#include "commscope/cost/collective.h"
#include "commscope/cost/compute.h"
#include "commscope/report/describe.h"
#include "commscope/sim/simulator.h"
#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

namespace commscope {
namespace {

using testing::plan;
using testing::scenario;

TEST(Cost, BusFactorsAreNcclTests) {
  // nccl-tests doc/PERFORMANCE.md: all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n,
  // broadcast and reduce 1; alltoall (n-1)/n; send/recv 1.
  EXPECT_DOUBLE_EQ(bus_factor(Collective::all_reduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::all_gather, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::reduce_scatter, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::all_to_all, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::broadcast, 16), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::send, 2), 1.0);
  // One rank: the same formulas (nccl-tests' broadcast.cu and reduce.cu set factor 1 whatever
  // the rank count); analyze printed busbw 0 for a one-rank broadcast until 2026-11-30.
  EXPECT_DOUBLE_EQ(bus_factor(Collective::all_reduce, 1), 0.0);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::all_gather, 1), 0.0);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::broadcast, 1), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::reduce, 1), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::recv, 1), 1.0);
}

// Inside one node a ring all-reduce of S bytes over n ranks takes 2(n-1) alpha +
// 2(n-1)/n S / B (Thakur, Rabenseifner, Gropp 2005, Section 4).
TEST(Cost, RingAllReduceInsideANode) {
  Scenario sc = scenario("megatron-1.7b", "dgx-a100-80gb", plan(8, 8));
  LinkModel l = link_model(sc);
  GroupPlacement g = place_group(sc, CommGroup::tensor);
  EXPECT_EQ(g.size, 8);
  EXPECT_EQ(g.nodes, 1);
  const double S = 64e6, n = 8;
  // Ring Simple (NCCL's base latency per call, then the ring's hops) at full channels.
  const double base = sc.system.nccl.base_latency_us[0][2] * 1e-6;
  const double expect =
      base + 2 * (n - 1) * l.intra_latency.value() + 2 * (n - 1) / n * S / l.intra.value();
  const CollectiveCost ar = collective_cost(Collective::all_reduce, S, g, l,
                                            CollectiveAlgorithm::ring, CollectiveProtocol::simple);
  EXPECT_NEAR(ar.time.value(), expect, 1e-15);
  // NCCL's choice at 64 MB: the ring with Simple, and nothing slower.
  const CollectiveCost best = collective_cost(Collective::all_reduce, S, g, l);
  EXPECT_EQ(cost_path(best), "model:ring/Simple");
  EXPECT_NEAR(best.time.value(), expect, 1e-15);
  EXPECT_NEAR(collective_time(Collective::all_gather, S, g, l).value(),
              base + (n - 1) * l.intra_latency.value() + (n - 1) / n * S / l.intra.value(), 1e-15);
}

// NCCL's protocols (tuning.cc): LL moves a quarter of the bandwidth at the smallest per-hop
// latency, LL128 92% at a middling one, Simple all of it at the largest. Small messages take LL,
// large ones Simple, and each path is the closed form of its protocol.
TEST(Cost, ProtocolsBySize) {
  Scenario sc = scenario("megatron-1.7b", "dgx-a100-80gb", plan(8, 8));
  LinkModel l = link_model(sc);
  GroupPlacement g = place_group(sc, CommGroup::tensor);
  const NcclTuning& t = sc.system.nccl;
  const double n = 8, a = l.intra_latency.value();
  EXPECT_EQ(cost_path(collective_cost(Collective::all_reduce, 1024, g, l)), "model:ring/LL");
  EXPECT_EQ(cost_path(collective_cost(Collective::all_reduce, 1e9, g, l)), "model:ring/Simple");
  // LL at 1 MB over 8 ranks: its channels fill at channel_bytes x n each.
  const double S = 1 << 20;
  const double ch = std::min<double>(t.max_channels, S / (t.channel_bytes[0] * n));
  const double ll =
      t.base_latency_us[0][0] * 1e-6 +
      2 * (n - 1) * a * t.hop_latency_us[0][0][0] / t.hop_latency_us[0][0][2] +
      2 * (n - 1) / n * S / (l.intra.value() * t.bandwidth_fraction[0][0] * ch / t.max_channels);
  EXPECT_NEAR(collective_cost(Collective::all_reduce, S, g, l, CollectiveAlgorithm::ring,
                              CollectiveProtocol::ll)
                  .time.value(),
              ll, 1e-15);
  // Fewer bytes than one Simple channel holds: one channel of max_channels.
  const double small = 1000;
  const double simple1 = t.base_latency_us[0][2] * 1e-6 + 2 * (n - 1) * a +
                         2 * (n - 1) / n * small / (l.intra.value() / t.max_channels);
  EXPECT_NEAR(collective_cost(Collective::all_reduce, small, g, l, CollectiveAlgorithm::ring,
                              CollectiveProtocol::simple)
                  .time.value(),
              simple1, 1e-15);
  // Time never falls as the size grows, whatever the choice.
  double prev = 0;
  for (double b = 8; b < 4e9; b *= 1.5) {
    const double x = collective_time(Collective::all_reduce, b, g, l).value();
    EXPECT_GE(x, prev * (1 - 1e-12)) << b;
    prev = x;
  }
}

// Tree (all-reduce only): 2 ((k - 1) intra hops + log2(N) network hops) + 2 S / (0.9 B). Over
// many nodes with one rank each, small all-reduces take the tree (log2 depth) and large ones
// the ring (the ring's 2(n-1)/n beats the tree's 2).
TEST(Cost, TreeAcrossManyNodes) {
  Scenario sc = scenario("megatron-1.7b", "dgx-a100-80gb", plan(512, 8));  // DP 64 over 64 nodes
  LinkModel l = link_model(sc);
  GroupPlacement g = place_group(sc, CommGroup::data);
  ASSERT_EQ(g.nodes, 64);
  ASSERT_EQ(g.per_node, 1);
  const NcclTuning& t = sc.system.nccl;
  const double S = 1e9;
  const double B = std::min(l.intra.value(), group_net_bandwidth(g, l));
  const double hop = l.net_latency.value() * t.hop_latency_us[2][1][2] / t.hop_latency_us[2][0][2] +
                     (fat_tree_switches(64, sc.system.scale.leaf_nodes) - 1) *
                         sc.system.scale.switch_latency_us * 1e-6;
  const double tree = t.base_latency_us[1][2] * 1e-6 + 2.0 * (0 + 6 * hop) +
                      2 * S / (B * t.bandwidth_fraction[1][2]);
  EXPECT_NEAR(collective_cost(Collective::all_reduce, S, g, l, CollectiveAlgorithm::tree,
                              CollectiveProtocol::simple)
                  .time.value(),
              tree, 1e-12);
  EXPECT_EQ(collective_cost(Collective::all_reduce, 64 * 1024, g, l).algorithm,
            CollectiveAlgorithm::tree);
  EXPECT_EQ(collective_cost(Collective::all_reduce, 1e9, g, l).algorithm,
            CollectiveAlgorithm::ring);
  // The ring's latency grows with the ranks: twice the nodes, about twice the small-message time.
  const CollectiveCost r64 = collective_cost(Collective::all_reduce, 8, g, l,
                                             CollectiveAlgorithm::ring, CollectiveProtocol::ll);
  Scenario wide = scenario("megatron-1.7b", "dgx-a100-80gb", plan(1024, 8));
  const CollectiveCost r128 =
      collective_cost(Collective::all_reduce, 8, place_group(wide, CommGroup::data),
                      link_model(wide), CollectiveAlgorithm::ring, CollectiveProtocol::ll);
  EXPECT_GT(r128.time.value(), 1.9 * r64.time.value() - 2 * t.base_latency_us[0][0] * 1e-6);
}

// Fat-tree hops and oversubscription: a group within one leaf switch crosses one switch and
// gets the full NIC bandwidth; beyond it, three switches (leaf, spine, leaf) and the bandwidth
// over the oversubscription ratio. NIC sharing off: each group has all of the node's NICs.
TEST(Cost, ContentionAndFatTreeHops) {
  EXPECT_EQ(fat_tree_switches(1, 32), 0);
  EXPECT_EQ(fat_tree_switches(2, 32), 1);
  EXPECT_EQ(fat_tree_switches(32, 32), 1);
  EXPECT_EQ(fat_tree_switches(33, 32), 3);
  EXPECT_EQ(fat_tree_switches(1024, 32), 3);
  EXPECT_EQ(fat_tree_switches(1025, 32), 5);
  Scenario sc = scenario("megatron-1.7b", "dgx-a100-80gb", plan(512, 8));  // DP 64 over 64 nodes
  sc.system.scale.oversubscription = 2;
  LinkModel l = link_model(sc);
  GroupPlacement g = place_group(sc, CommGroup::data);
  EXPECT_EQ(g.concurrent, 8);
  EXPECT_DOUBLE_EQ(group_net_bandwidth(g, l), l.node.value() / 8 / 2);
  GroupPlacement within = g;
  within.nodes = 32;
  EXPECT_DOUBLE_EQ(group_net_bandwidth(within, l), l.node.value() / 8);
  // Oversubscription makes the large all-reduce slower, about by the ratio.
  Scenario flat = sc;
  flat.system.scale.oversubscription = 1;
  const double slow = collective_time(Collective::all_reduce, 4e9, g, l).value();
  const double fast = collective_time(Collective::all_reduce, 4e9, g, link_model(flat)).value();
  EXPECT_NEAR(slow / fast, 2.0, 0.05);
  // One NIC per group: the group's share is capped at one NIC's achievable rate.
  Scenario one = flat;
  one.system.scale.nics_per_group = 1;
  GroupPlacement whole = place_group(one, CommGroup::tensor);  // 8 per node, all of the NICs
  whole.nodes = 2;
  whole.concurrent = 1;
  EXPECT_DOUBLE_EQ(group_net_bandwidth(whole, link_model(one)), one.network.achievable.value());
  EXPECT_DOUBLE_EQ(group_net_bandwidth(whole, link_model(flat)), link_model(flat).node.value());
  // NIC sharing off.
  sc.system.scale.nic_sharing = false;
  EXPECT_EQ(place_group(sc, CommGroup::data).concurrent, 1);
}

// The scale and nccl objects of a system preset: read, written back, bad values named.
TEST(Cost, PresetScaleAndNcclFields) {
  auto base = load_system("dgx-a100-80gb");
  ASSERT_TRUE(base.ok());
  nlohmann::json j = to_json(*base);
  j["scale"]["straggler_cv"] = 0.03;
  j["scale"]["oversubscription"] = 4;
  j["nccl"] = {{"max_channels", 8}, {"channel_bytes", {1024, 2048, 65536}}};
  auto s = system_from_json(j, "x.json");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->scale.straggler_cv, 0.03);
  EXPECT_EQ(s->scale.oversubscription, 4);
  EXPECT_EQ(s->nccl.max_channels, 8);
  EXPECT_EQ(s->nccl.channel_bytes[2], 65536);
  auto again = system_from_json(to_json(*s), "y.json");
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(to_json(*again), to_json(*s));
  auto bad = [&](nlohmann::json k, std::string_view expect) {
    auto r = system_from_json(k, "x.json");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find(expect), std::string::npos) << r.error().message;
  };
  nlohmann::json b1 = j;
  b1["scale"]["straggler_cv"] = -1;
  bad(b1, "field 'scale.straggler_cv'");
  nlohmann::json b2 = j;
  b2["scale"]["oversubscription"] = 0.5;
  bad(b2, "field 'scale.oversubscription'");
  nlohmann::json b3 = j;
  b3["nccl"]["channel_bytes"] = {1, 2};
  bad(b3, "field 'nccl.channel_bytes': expected a 3 array");
  nlohmann::json b4 = j;
  b4["nccl"]["hop_latency"] = 1;
  bad(b4, "field 'nccl.hop_latency': unknown field");
}

// Every number of a system or network file is bounded where the cost model stays finite and
// the breakdown's identity holds (found by probing, 2026-11-30): a GEMM steepness of 150 gave
// NaN shares and a trace that was not JSON, a latency of 1e308 us a 300-digit iteration, a
// negative micro-batch overhead an MFU of 188%.
TEST(Cost, SystemAndNetworkValuesAreBounded) {
  auto base = load_system("dgx-a100-80gb");
  ASSERT_TRUE(base.ok());
  const nlohmann::json j = to_json(*base);
  for (const auto& [path, value, expect] :
       std::vector<std::tuple<std::vector<std::string>, double, std::string>>{
           {{"calibration", "gemm_steepness"}, 150, "calibration.gemm_steepness"},
           {{"calibration", "gemm_half_gflops"}, 1e308, "calibration.gemm_half_gflops"},
           {{"calibration", "microbatch_overhead_us"}, -1e6, "calibration.microbatch_overhead_us"},
           {{"calibration", "iteration_overhead_ms"}, -1, "calibration.iteration_overhead_ms"},
           {{"calibration", "kernel_overhead_us"}, 1e300, "calibration.kernel_overhead_us"},
           {{"gpu", "memory_bandwidth_gbs"}, 1e-300, "gpu.memory_bandwidth_gbs"},
           {{"nics", "line_rate_gbps"}, 1e300, "nics.line_rate_gbps"}}) {
    nlohmann::json k = j;
    k[path[0]][path[1]] = value;
    auto r = system_from_json(k, "x.json");
    ASSERT_FALSE(r.ok()) << expect;
    EXPECT_NE(r.error().message.find(expect), std::string::npos) << r.error().message;
  }
  auto net = load_network("ib-hdr-200");
  ASSERT_TRUE(net.ok());
  nlohmann::json n = {{"name", "n"},
                      {"transport", "rdma"},
                      {"line_rate_gbps", 100},
                      {"achievable_gbps", 90},
                      {"latency_us", 1e308}};
  auto r = network_from_json(n, "n.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("field 'latency_us': expected a positive number from 1e-6 to "
                                   "1e9, got 1e+308"),
            std::string::npos)
      << r.error().message;
  n["latency_us"] = 2;
  n["achievable_gbps"] = 1e-300;
  EXPECT_FALSE(network_from_json(n, "n.json").ok());
  // The GEMM curve far above its half point is its plateau, not NaN.
  EXPECT_EQ(matmul_efficiency(1e15, 0.8, 1e-300, 16), 0.8);
}

// A system's iteration_overhead_ms (host time per iteration: framework, launch gaps) ends each
// iteration: the prediction grows by exactly it, as idle time, and no stage's bubble grows (it
// was read and fitted by calibrate but priced nowhere, found by probing, 2026-11-30).
TEST(Cost, IterationOverheadEndsTheIteration) {
  for (int pp : {1, 4}) {
    SCOPED_TRACE(pp);
    PlanInput p = testing::plan(32, 2, pp, 1, 64);
    Scenario sc = testing::scenario("megatron-1.7b", "dgx-a100-80gb", p);
    const Prediction a = simulate(build_workload(sc));
    sc.system.calibration.iteration_overhead = Seconds(5e-3);
    const Prediction b = simulate(build_workload(sc));
    EXPECT_NEAR(b.iteration_time - a.iteration_time, 5e-3, 1e-12);
    EXPECT_NEAR(b.mean.idle - a.mean.idle, 5e-3, 1e-9);
    EXPECT_NEAR(b.mean.bubble, a.mean.bubble, 1e-12);
    EXPECT_NEAR(b.mean.compute, a.mean.compute, 1e-12);
    EXPECT_NEAR(b.mean.wall, b.iteration_time, 1e-12);
  }
}

// Across nodes: NCCL's ring or tree; hierarchical (asked for, not NCCL's) is intra-node
// reduce-scatter + all-gather (bus factor of k ranks over NVLink) plus an all-reduce among the
// N nodes through the node's NICs, shared by the groups running at the same time.
TEST(Cost, HierarchicalAcrossNodes) {
  Scenario sc = scenario("gpt2-large", "dgx-a100-80gb", plan(32));  // DP 32 over 4 nodes
  LinkModel l = link_model(sc);
  GroupPlacement g = place_group(sc, CommGroup::data);
  EXPECT_EQ(g.nodes, 4);
  EXPECT_EQ(g.per_node, 8);
  EXPECT_EQ(g.concurrent, 1);
  const double S = 1e9;
  const double hier = 2 * 7 * l.intra_latency.value() + 2.0 * 7 / 8 * S / l.intra.value() +
                      2 * 3 * l.net_latency.value() + 2.0 * 3 / 4 * S / l.node.value();
  EXPECT_NEAR(
      collective_time(Collective::all_reduce, S, g, l, CollectiveAlgorithm::hierarchical).value(),
      hier, 1e-12);
  const double best = collective_time(Collective::all_reduce, S, g, l).value();
  EXPECT_LE(best,
            collective_time(Collective::all_reduce, S, g, l, CollectiveAlgorithm::ring).value());
  // The node's bandwidth: 8 NICs x the protocol's achievable 180 Gbps.
  EXPECT_DOUBLE_EQ(units::to_gbit_per_s(l.node), 8 * 180);
}

// Megatron's rank order (tensor fastest): with TP 2 on Polaris's 4-GPU nodes each node holds
// two DP groups' ranks, so two groups share the node's two NICs.
TEST(Cost, PlacementAndNicSharing) {
  Scenario sc = scenario("gpt2-large", "polaris", plan(16, 2));
  GroupPlacement t = place_group(sc, CommGroup::tensor), d = place_group(sc, CommGroup::data);
  EXPECT_EQ(t.nodes, 1);
  EXPECT_EQ(t.per_node, 2);
  EXPECT_EQ(d.size, 8);
  EXPECT_EQ(d.per_node, 2);
  EXPECT_EQ(d.nodes, 4);
  EXPECT_EQ(d.concurrent, 2);
  // TP 8 on 4-GPU nodes: the tensor group spans two nodes.
  Scenario wide = scenario("megatron-18.4b", "polaris", plan(16, 8, 1, 1));
  EXPECT_EQ(place_group(wide, CommGroup::tensor).nodes, 2);
  // Send/receive between pipeline stages: one message of S bytes, alpha + S / B.
  Scenario pp = scenario("megatron-1.7b", "dgx-a100-80gb", plan(16, 8, 2, 1, 8));
  GroupPlacement p = place_group(pp, CommGroup::pipeline);
  EXPECT_EQ(p.nodes, 2);
  LinkModel l = link_model(pp);
  EXPECT_NEAR(collective_time(Collective::send, 1e8, p, l).value(),
              l.net_latency.value() + 1e8 / (l.node.value() / p.concurrent), 1e-15);
}

// Qwen3-30B-A3B with EP 16 (expert TP 1) over two DGX H100s: the all-to-all tests' scenario.
Scenario qwen3_ep16() {
  PlanInput in = plan(16, 1, 1, 1, 1024);
  in.ep = 16;
  in.expert_tp = 1;
  return scenario("qwen3-30b-a3b", "dgx-h100", in);
}

// All-to-all across nodes: every rank sends S / n to each peer, so the per_node ranks of a node
// push per_node x (n - per_node) / n x S through the node's NICs (its share among the groups
// running at once), their intra-node share going over NVLink beside it. A ring's boundary
// crossing carries only one rank's (n - 1) / n x S: the all-to-all is per_node x (n -
// per_node) / (n - 1) times it. Inside a node it stays (n - 1) / n x S at NVLink's rate.
// (Measured on two emulated nodes: tests/mpi/bench_collectives_test.cpp,
// Bench.AllToAllAcrossEmulatedNodesIsBoundByTheNodesEgress.)
TEST(Cost, AllToAllAcrossNodesIsTheNodesEgress) {
  // EP 16 over two DGX H100s (Qwen3-30B-A3B's plan): one group of 8 ranks per node.
  Scenario sc = qwen3_ep16();
  LinkModel l = link_model(sc);
  GroupPlacement g = place_group(sc, CommGroup::expert);
  ASSERT_EQ(g.size, 16);
  ASSERT_EQ(g.nodes, 2);
  ASSERT_EQ(g.per_node, 8);
  ASSERT_EQ(g.concurrent, 1);
  const double S = 134217728;  // 4096 tokens x top-8 x h 2048 x 2 bytes
  const double hops = 15 * l.net_hop[0][2];
  const double egress = 8.0 * 8 / 16 * S / l.node.value();
  EXPECT_NEAR(collective_time(Collective::all_to_all, S, g, l).value(), hops + egress, 1e-12);
  // 64 / 15 (4.3) times the ring-crossing form's 15/16 S / node bandwidth, the form it replaced.
  EXPECT_NEAR(egress / (15.0 / 16 * S / l.node.value()), 64.0 / 15, 1e-12);
  // Inside one node (EP 8): (n - 1) / n x S at NVLink's rate, unchanged.
  PlanInput in = plan(16, 1, 1, 1, 1024);
  in.ep = 8;
  in.expert_tp = 1;
  Scenario one = scenario("qwen3-30b-a3b", "dgx-h100", in);
  GroupPlacement e8 = place_group(one, CommGroup::expert);
  ASSERT_EQ(e8.nodes, 1);
  LinkModel l8 = link_model(one);
  EXPECT_NEAR(collective_time(Collective::all_to_all, S, e8, l8).value(),
              7 * l8.intra_hop[0][2] + 7.0 / 8 * S / l8.intra.value(), 1e-12);
}

// A job on part of each node drives its GPUs' share of the node's NICs (one per GPU on DGX H100
// and GB200 NVL72): 64 of a 72-GPU NVL72 rack's (NVIDIA's 128-GPU GB200 runs, Slurm's --segment
// 16 trays), 4 of a DGX H100's 8 with 4 GPUs a node; full nodes keep all of them. The
// all-to-all across two such nodes is the egress of those NICs: 72/64 of the full rack's time.
TEST(Cost, PartOfANodeDrivesItsGpusNics) {
  PlanInput in = plan(128, 1, 1, 1, 128);
  in.nodes = 2;
  in.ep = 8;
  Scenario seg = scenario("mixtral-8x7b", "gb200-nvl72", in);
  ASSERT_EQ(seg.gpus_per_node, 64);
  EXPECT_EQ(job_nics_per_node(seg), 64);
  in.gpus = 144;
  in.global_batch = 144;
  Scenario full = scenario("mixtral-8x7b", "gb200-nvl72", in);
  ASSERT_EQ(full.gpus_per_node, 72);
  EXPECT_EQ(job_nics_per_node(full), 72);
  const LinkModel ls = link_model(seg), lf = link_model(full);
  EXPECT_NEAR(ls.node.value() / lf.node.value(), 64.0 / 72, 1e-12);
  EXPECT_EQ(ls.nics, 64);
  // describe's headline says which NICs the job drives.
  const Workload ws = build_workload(seg);
  EXPECT_NE(render_describe(ws, describe(ws), Format::table)
                .find("(64 NICs per node, the job's GPUs' share of the node's 72 at 400 Gbps)"),
            std::string::npos);
  PlanInput h = plan(16);
  h.nodes = 4;
  Scenario four = scenario("gpt2-large", "dgx-h100", h);
  ASSERT_EQ(four.gpus_per_node, 4);
  EXPECT_EQ(job_nics_per_node(four), 4);
  h.gpus = 4;  // one GPU on each of 4 nodes: its own NIC
  EXPECT_EQ(job_nics_per_node(scenario("gpt2-large", "dgx-h100", h)), 1);
  // An all-to-all of one group of 64 + 64 ranks across the two segments: each node pushes
  // 64 x 64 / 128 x S through its 64 NICs.
  GroupPlacement g;
  g.size = 128, g.nodes = 2, g.per_node = 64, g.concurrent = 1;
  const double S = 64e6;
  const double t = collective_time(Collective::all_to_all, S, g, ls).value();
  const double egress = 64.0 * 64 / 128 * S / ls.node.value();
  EXPECT_GE(t, egress);
  EXPECT_LE(t, egress + 127 * ls.net_hop[0][2] + 1e-12);
}

// The flex dispatcher's copies of a token (spec/placement.h) against an independent count:
// draw top-k distinct experts uniformly (Megatron-LM's force-balanced router) or, under
// group-limited routing, group_topk distinct groups uniformly and then top-k distinct experts
// among theirs; place expert e on GPU e / (E / G) and that GPU on node gpu / per_node; and
// count, as DeepEP's internode dispatch sends them, the other nodes the token goes to once over
// RDMA and the GPUs of each node holding one of its experts other than the GPU it lands on (its
// own GPU on its own node, the same local rank on a remote one), forwarded over NVLink.
// 200,000 draws a case, seeded: within 4 standard errors of the closed form. Exact identities
// beside it: top-1 crosses (N - 1) / N, the all-to-all's cross-node share; a group on one node
// crosses nothing; one group of all the experts is no grouping.
TEST(Cost, FlexDispatchCopiesAreTheHypergeometricForm) {
  struct Case {
    int experts, top_k, size, per_node, groups = 0, group_topk = 0;
  };
  std::uint64_t seed = 12345;
  auto next = [&](std::uint64_t n) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (seed >> 33) % n;
  };
  auto distinct = [&](int count, int of, std::vector<int>& out) {
    out.clear();
    while (static_cast<int>(out.size()) < count) {
      const int e = static_cast<int>(next(static_cast<std::uint64_t>(of)));
      if (std::find(out.begin(), out.end(), e) == out.end()) out.push_back(e);
    }
  };
  for (const Case& c :
       {Case{128, 8, 16, 8}, Case{128, 8, 32, 8}, Case{256, 8, 64, 8}, Case{8, 2, 8, 4},
        Case{64, 6, 16, 4},
        // group-limited: DeepSeek-V3's 8 groups of 32, 4 a token, one a node;
        // groups smaller than a GPU's experts; a GPU's and a node's inside one
        Case{256, 8, 64, 8, 8, 4}, Case{128, 8, 16, 8, 32, 4}, Case{64, 6, 16, 4, 2, 1}}) {
    SCOPED_TRACE(::testing::Message()
                 << c.experts << " experts top-" << c.top_k << " over " << c.size << " ranks, "
                 << c.per_node << " a node, groups " << c.groups << " top-" << c.group_topk);
    GroupPlacement g;
    g.size = c.size;
    g.per_node = c.per_node;
    g.nodes = c.size / c.per_node;
    ASSERT_TRUE(expert_groups_align(c.experts, c.groups, g));
    const ForwardedCopies want = forwarded_copies(c.experts, c.top_k, g, c.groups, c.group_topk);
    const int per_gpu = c.experts / c.size, draws = 200000;
    const int per_group = c.groups > 0 ? c.experts / c.groups : c.experts;
    double net = 0, net2 = 0, nvl = 0, nvl2 = 0;
    std::vector<int> picked, groups, pool;
    for (int d = 0; d < draws; ++d) {
      const int src = static_cast<int>(next(static_cast<std::uint64_t>(c.size)));
      if (c.groups > 0) {
        distinct(c.group_topk, c.groups, groups);
        distinct(c.top_k, c.group_topk * per_group, pool);
        picked.clear();
        for (int i : pool)  // the i-th expert of the chosen groups' pool
          picked.push_back(groups[static_cast<std::size_t>(i / per_group)] * per_group +
                           i % per_group);
      } else {
        distinct(c.top_k, c.experts, picked);
      }
      std::vector<char> gpu_hit(static_cast<std::size_t>(c.size), 0);
      for (int e : picked) gpu_hit[static_cast<std::size_t>(e / per_gpu)] = 1;
      double n_net = 0, n_nvl = 0;
      for (int node = 0; node < g.nodes; ++node) {
        const int lands = node * c.per_node + src % c.per_node;  // own GPU, or same local rank
        bool any = false;
        for (int q = node * c.per_node; q < (node + 1) * c.per_node; ++q)
          if (gpu_hit[static_cast<std::size_t>(q)]) {
            any = true;
            if (q != lands) n_nvl += 1;
          }
        if (any && node != src / c.per_node) n_net += 1;
      }
      net += n_net, net2 += n_net * n_net, nvl += n_nvl, nvl2 += n_nvl * n_nvl;
    }
    auto check = [&](double sum, double sq, double closed) {
      const double mean = sum / draws, var = sq / draws - mean * mean;
      EXPECT_NEAR(mean, closed, 4 * std::sqrt(var / draws) + 1e-12);
    };
    check(net, net2, want.network);
    check(nvl, nvl2, want.nvlink);
  }
  GroupPlacement two;
  two.size = 16, two.per_node = 8, two.nodes = 2;
  EXPECT_NEAR(forwarded_copies(128, 1, two).network, 1.0 / 2, 1e-15);
  two.size = 32, two.nodes = 4;
  EXPECT_NEAR(forwarded_copies(128, 1, two).network, 3.0 / 4, 1e-15);
  EXPECT_NEAR(forwarded_copies(128, 128, two).network, 3.0, 1e-15);  // every node has one
  const ForwardedCopies plain = forwarded_copies(128, 8, two),
                        one_group = forwarded_copies(128, 8, two, 1, 1);
  EXPECT_NEAR(one_group.network, plain.network, 1e-12);
  EXPECT_NEAR(one_group.nvlink, plain.nvlink, 1e-12);
  // Node-limited (4 groups of 32, each a node's, 2 a token): at most 2 nodes, fewer crossings.
  EXPECT_LT(forwarded_copies(128, 8, two, 4, 2).network, plain.network);
  EXPECT_LE(forwarded_copies(128, 8, two, 4, 2).network, 2.0);
  GroupPlacement one;
  one.size = 8, one.per_node = 8, one.nodes = 1;
  EXPECT_EQ(forwarded_copies(128, 8, one).network, 0.0);
  // A node of 6 GPUs x 4 experts (24) against groups of 32: neither whole groups nor inside one.
  GroupPlacement six;
  six.size = 66, six.per_node = 6, six.nodes = 11;
  EXPECT_FALSE(expert_groups_align(264, 8, six));
  EXPECT_TRUE(expert_groups_align(264, 0, six));
}

// The flex dispatch's time: the node's 8 ranks push 8 x payload x network copies through the
// node's NICs while each forwards payload x nvlink copies over NVLink, pipelined (the larger),
// after one network and one NVLink hop. For Qwen3-30B-A3B's EP 16 on two DGX H100s a token
// crosses to the other node with probability 1 - C(64, 8) / C(128, 8) (0.9966), against the
// all-to-all's 8 x 8 / 16 = 4 copies: about a quarter of its network bytes.
TEST(Cost, FlexDispatchTimeIsTheLargerOfNicsAndNvlink) {
  Scenario sc = qwen3_ep16();
  LinkModel l = link_model(sc);
  GroupPlacement g = place_group(sc, CommGroup::expert);
  const ForwardedCopies c = forwarded_copies(128, 8, g);
  double none = 1;
  for (int i = 0; i < 8; ++i) none *= (64.0 - i) / (128.0 - i);
  EXPECT_NEAR(c.network, 1 - none, 1e-12);
  const double payload = 4096.0 * 2048 * 2;  // 4,096 tokens of h 2048 in bf16, each once
  const double net = 8 * payload * c.network / l.node.value();
  const double nvl = payload * c.nvlink / l.intra.value();
  EXPECT_NEAR(forwarded_time(payload, c, g, l).value(),
              l.net_hop[0][2] + l.intra_hop[0][2] + std::max(net, nvl), 1e-12);
  const double nccl_net = 8.0 * 8 / 16 * 8 * payload / l.node.value();
  EXPECT_NEAR(net / nccl_net, (1 - none) / 4, 1e-12);
  EXPECT_EQ(forwarded_time(0, c, g, l).value(), 0.0);
}

// Roofline: a large GEMM is compute-bound at peak x efficiency; an element-wise op is
// memory-bound; both pay the kernel overhead.
// Megatron's --use-tp-pp-dp-mapping: data-parallel peers TP x PP ranks apart. With TP 2,
// PP 4, DP 2 on two 8-GPU nodes the DP group then crosses nodes and the pipeline stays inside.
TEST(Cost, RankOrder) {
  PlanInput p = plan(16, 2, 4, 1, 16);
  Scenario dp_first = scenario("megatron-1.7b", "dgx-a100-80gb", p);
  EXPECT_EQ(place_group(dp_first, CommGroup::data).nodes, 1);
  EXPECT_EQ(place_group(dp_first, CommGroup::pipeline).nodes, 1);
  p.rank_order = RankOrder::tp_pp_dp;
  Scenario pp_first = scenario("megatron-1.7b", "dgx-a100-80gb", p);
  EXPECT_EQ(place_group(pp_first, CommGroup::data).nodes, 2);
  EXPECT_EQ(place_group(pp_first, CommGroup::data).per_node, 1);
  EXPECT_EQ(place_group(pp_first, CommGroup::pipeline).nodes, 1);
}

TEST(Cost, ComputeRoofline) {
  auto sys = load_system("dgx-a100-80gb");
  ASSERT_TRUE(sys.ok());
  const Calibration& c = sys->calibration;
  Op gemm;
  gemm.compute = ComputeClass::gemm;
  gemm.dtype = DType::bf16;
  gemm.flops = 2.0 * 8192 * 8192 * 8192;
  gemm.mem_bytes = 3.0 * 8192 * 8192 * 2;
  const double eff =
      matmul_efficiency(gemm.flops, c.gemm_efficiency, c.gemm_half_flops, c.gemm_steepness);
  EXPECT_NEAR(compute_time(gemm, sys->gpu, c).value(),
              gemm.flops / (312e12 * eff) + c.kernel_overhead.value(), 1e-12);
  Op ew;
  ew.compute = ComputeClass::elementwise;
  ew.flops = 1e6;
  ew.mem_bytes = 1e9;
  EXPECT_NEAR(compute_time(ew, sys->gpu, c).value(),
              1e9 / (2039e9 * c.memory_efficiency) + c.kernel_overhead.value(), 1e-12);
  // The efficiency curve: half of the maximum at the half-point, rising with size.
  EXPECT_NEAR(matmul_efficiency(5e9, 0.8, 5e9, 1.3), 0.4, 1e-12);
  EXPECT_LT(matmul_efficiency(1e8, 0.8, 5e9, 1.3), matmul_efficiency(1e10, 0.8, 5e9, 1.3));
}

TEST(Cost, MoreBandwidthNeverSlower) {
  Scenario sc = scenario("gpt2-large", "polaris", plan(32, 2));
  LinkModel l = link_model(sc);
  for (auto c : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter,
                 Collective::send}) {
    for (auto grp : {CommGroup::data, CommGroup::tensor, CommGroup::pipeline}) {
      GroupPlacement g = place_group(sc, grp);
      double base = collective_time(c, 3e8, g, l).value();
      LinkModel faster = l;
      faster.node = l.node * 2.0;
      EXPECT_LE(collective_time(c, 3e8, g, faster).value(), base);
      faster.intra = l.intra * 2.0;
      EXPECT_LE(collective_time(c, 3e8, g, faster).value(), base);
    }
  }
}

}  // namespace
}  // namespace commscope

namespace commscope {
namespace {

// The tree depth for every 64-bit rank count: the old `while ((1 << k) < n)` over int never
// ended above 2^30. Checked against the definition 2^(k-1) < n <= 2^k.
TEST(Cost, CeilLog2CoversAll64BitInputs) {
  EXPECT_EQ(ceil_log2(0), 0);
  EXPECT_EQ(ceil_log2(1), 0);
  EXPECT_EQ(ceil_log2(2), 1);
  EXPECT_EQ(ceil_log2(3), 2);
  for (int k = 1; k < 64; ++k) {
    const std::uint64_t p = std::uint64_t{1} << k;
    EXPECT_EQ(ceil_log2(p), k) << p;
    EXPECT_EQ(ceil_log2(p + 1), k + 1) << p;
    EXPECT_EQ(ceil_log2(p - 1), k == 1 ? 0 : k) << p;
  }
  EXPECT_EQ(ceil_log2(1073741828u), 31);
  EXPECT_EQ(ceil_log2(~std::uint64_t{0}), 64);
}

}  // namespace
}  // namespace commscope
