// Collective cost: a measured busbw curve where the network profile has one, else NCCL's
// model: ring or tree, LL / LL128 / Simple with their bandwidth fractions and per-hop
// latencies by link kind (NVLink, PCIe, network), the channels a size fills, ring latency
// growing with ranks and tree latency with log2(nodes), fat-tree switch hops; the node's NICs
// shared by the groups that use them at once and the fabric's oversubscription
// (docs/cost-model.md).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "commscope/spec/placement.h"
#include "commscope/spec/scenario.h"
#include "commscope/workload/op.h"

namespace commscope {

// automatic: NCCL's choice (the fastest enabled algorithm and protocol); hierarchical is
// commscope's two-level form, priced only when asked for; p2p is what send/receive and
// all-to-all report. nvls, nvls_tree, collnet_direct, collnet_chain: NCCL's NVLink SHARP and IB
// SHARP algorithms (Simple only), where the system has them (docs/cost-model.md, "NVLS and
// CollNet").
enum class CollectiveAlgorithm : std::uint8_t {
  automatic,
  ring,
  tree,
  hierarchical,
  p2p,
  nvls,
  nvls_tree,
  collnet_direct,
  collnet_chain
};
std::string_view to_string(CollectiveAlgorithm a);  // "auto", "ring", "tree", "nvls", ...
// NCCL's protocols (automatic: the fastest).
enum class CollectiveProtocol : std::uint8_t { automatic, ll, ll128, simple };
std::string_view to_string(CollectiveProtocol p);  // "auto", "LL", "LL128", "Simple"

// The bandwidths and latencies the model uses for a scenario, and the network profile's
// measured bus-bandwidth curves (docs/cost-model.md, "Measured curves").
struct LinkModel {
  BytesPerSecond intra;   // per GPU inside a node (NVLink x efficiency)
  BytesPerSecond node;    // per node across nodes (NICs x protocol's achievable rate)
  Seconds intra_latency;  // per step inside a node
  Seconds net_latency;    // per step across nodes (the protocol's)
  // The curves of the scenario's network (sc.network.curves): they must outlive this model.
  std::span<const BusBwCurve> curves;
  // Bit (collective x 2 + scope) set when some curve covers that collective and scope: the
  // model's path costs one test when none does.
  std::uint32_t curve_mask = 0;

  // NCCL's model (NcclTuning, system preset): per-call base latency, per-hop latency inside
  // the node and across nodes, bandwidth fractions [ring, tree][LL, LL128, Simple]; the
  // bytes that fill one channel per protocol; channels at full bandwidth; LL128 enabled.
  double base[2][3] = {};
  double intra_hop[2][3] = {};
  double net_hop[2][3] = {};
  double fraction[2][3] = {};
  double channel_bytes[3] = {};
  int max_channels = 1;
  bool ll128 = true;
  // Contention (ScaleEffects): oversubscription above a leaf switch of leaf_nodes nodes; the
  // latency of each switch an inter-node hop crosses beyond the first.
  double oversubscription = 1;
  // One NIC's bandwidth and the NICs a group's collective spreads over (0: all).
  BytesPerSecond nic;
  int nics_per_group = 0;
  int leaf_nodes = 1;
  Seconds switch_latency;

  // NCCL_ALGO: per NCCL function (nccl_function) the enabled algorithms (bits of NcclAlgo),
  // those the system lacks already removed; sharp: some NVLS or CollNet algorithm enabled (the
  // model's path costs one test when none is).
  std::uint8_t algos[5] = {3, 3, 3, 3, 3};
  bool sharp = false;
  bool collnet = false;  // CollNet enabled (IB SHARP and --nccl-algo naming it)
  // NVLS: per-GPU bandwidth intra x nvls_efficiency x (C - 1) / C over C channels; the NVLS
  // tree's caps, C x per-channel maximum, for 2 nodes and more (bytes/s); CollNet Direct's
  // factor from sm90.
  double nvls_bw = 0;
  double nvls_tree_cap[2] = {};
  double collnet_direct_efficiency = 1;
  // Hop latencies (s) of [CollNetDirect, CollNetChain, NVLS, NVLSTree] x [NVLink, network] and
  // the network hop with one GPU per node (tree's, tuning.cc), scaled as the ring's are.
  double sharp_hop[4][2] = {};
  double sharp_net_ppn1 = 0;
  int nics = 1;  // NICs of a node the job drives (CollNet Direct's GPU-to-NIC ratio)
};
// The NICs of a node the job's GPUs drive: all of the preset's where the job fills its nodes;
// on part of a node (fewer GPUs per node than it holds: Slurm's --segment on GB200 NVL72
// racks, fewer tasks per node) the GPUs' own share, nics x used / node GPUs rounded, at least
// one (a node's NICs belong to its GPUs by PCIe affinity, as NCCL picks them).
int job_nics_per_node(const Scenario& sc);
LinkModel link_model(const Scenario& sc);
// The same with curves taken from `curves` (a profile's), kept by reference.
void attach_curves(LinkModel& l, std::span<const BusBwCurve> curves);

// Depth of a binary tree over n ranks: the least k with 2^k >= n (0 for n <= 1), for every
// 64-bit n (a shifting loop over int never ended above 2^30).
int ceil_log2(std::uint64_t n);

// Where a collective's time came from: a measured curve of the network profile, or the model.
enum class CostSource : std::uint8_t { model, curve };
std::string_view to_string(CostSource s);  // "model", "curve"

struct CollectiveCost {
  Seconds time;
  CostSource source = CostSource::model;
  // The model's path (what the model would pick, also when a curve priced it).
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring;
  CollectiveProtocol protocol = CollectiveProtocol::simple;
};
// "curve", or "model:ring/LL128", "model:tree/Simple", "model:p2p/Simple" ...
std::string cost_path(const CollectiveCost& c);

// Switches an inter-node hop crosses in a fat tree of leaf switches of `leaf_nodes` nodes:
// 1 within one leaf, 3 through a spine, 5 through a core ... (2 levels - 1).
int fat_tree_switches(int nodes, int leaf_nodes);

// The inter-node bandwidth one group gets per node: the node's NICs shared by the concurrent
// groups, over the oversubscription once the group spans more than one leaf switch.
double group_net_bandwidth(const GroupPlacement& g, const LinkModel& l);

// Time of one collective of `bytes` (nccl-tests "size") over a placed group. With the automatic
// algorithm and a curve for the collective and the group's scope (inside one node or across
// nodes), the time is bytes x bus_factor(c, group size) / busbw(bytes), busbw interpolated in
// log(size) on the curve nearest in nodes, then ranks, and divided by the groups that share the
// node's NICs (inter-node); otherwise the alpha-beta model.
CollectiveCost collective_cost(Collective c, double bytes, const GroupPlacement& g,
                               const LinkModel& l,
                               CollectiveAlgorithm a = CollectiveAlgorithm::automatic,
                               CollectiveProtocol p = CollectiveProtocol::automatic);
Seconds collective_time(Collective c, double bytes, const GroupPlacement& g, const LinkModel& l,
                        CollectiveAlgorithm a = CollectiveAlgorithm::automatic);

// `messages` collectives of bytes / messages each, one after another (Op::messages: a CP
// ring's passes, each with its own latency): messages x collective_time of one.
Seconds collective_time(Collective c, double bytes, int messages, const GroupPlacement& g,
                        const LinkModel& l);

// The curve collective_cost uses for this collective over this group, or nullptr (the model).
const BusBwCurve* curve_for(Collective c, const GroupPlacement& g, const LinkModel& l);

// Bus bandwidth of a curve at `bytes`: piecewise linear in log(size) between its points, the
// largest point's beyond it; below the smallest, the smallest point's (the caller scales time).
double curve_busbw(const BusBwCurve& curve, double bytes);

// The flex dispatcher's dispatch or combine (--moe-token-dispatcher-type flex: DeepEP's or
// HybridEP's fused kernels) of `payload` bytes, this rank's tokens each once: the node's ranks
// send per_node x payload x copies.network through the group's share of the node's NICs while
// each forwards payload x copies.nvlink over NVLink, pipelined (the time is the larger), after
// one network hop (when the group crosses nodes) and one NVLink hop (docs/cost-model.md).
Seconds forwarded_time(double payload, const ForwardedCopies& c, const GroupPlacement& g,
                       const LinkModel& l);

// Convenience: the op's collective over its group in this scenario (an OpTag::ep_forwarded
// op by forwarded_time with the model's experts and top-k).
Seconds comm_time(const Op& op, const Scenario& sc);

}  // namespace commscope
