// Collective cost: latency/bandwidth (alpha-beta) time of a collective over a process group
// placed on a cluster: flat ring, tree, or hierarchical (inside the node over NVLink, across
// nodes over the NICs), the node's NICs shared by the groups that use them at once, and the
// network protocol's achievable rate and per-message latency.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "commscope/spec/scenario.h"
#include "commscope/workload/op.h"

namespace commscope {

enum class CollectiveAlgorithm : std::uint8_t { automatic, ring, tree, hierarchical };

// Where a process group's ranks sit, under Megatron's rank order (tensor fastest, then data,
// then pipeline: rank = t + TP x (d + DP x p)) with GPUs filled node by node.
struct GroupPlacement {
  int size = 1;        // ranks in the group
  int nodes = 1;       // nodes it spans
  int per_node = 1;    // its ranks on each node
  int concurrent = 1;  // groups of this kind that use a node's NICs at the same time
};
GroupPlacement place_group(const Scenario& sc, CommGroup g);

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
};
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
};

// Time of one collective of `bytes` (nccl-tests "size") over a placed group. With the automatic
// algorithm and a curve for the collective and the group's scope (inside one node or across
// nodes), the time is bytes x bus_factor(c, group size) / busbw(bytes), busbw interpolated in
// log(size) on the curve nearest in nodes, then ranks, and divided by the groups that share the
// node's NICs (inter-node); otherwise the alpha-beta model.
CollectiveCost collective_cost(Collective c, double bytes, const GroupPlacement& g,
                               const LinkModel& l,
                               CollectiveAlgorithm a = CollectiveAlgorithm::automatic);
Seconds collective_time(Collective c, double bytes, const GroupPlacement& g, const LinkModel& l,
                        CollectiveAlgorithm a = CollectiveAlgorithm::automatic);

// The curve collective_cost uses for this collective over this group, or nullptr (the model).
const BusBwCurve* curve_for(Collective c, const GroupPlacement& g, const LinkModel& l);

// Bus bandwidth of a curve at `bytes`: piecewise linear in log(size) between its points, the
// largest point's beyond it; below the smallest, the smallest point's (the caller scales time).
double curve_busbw(const BusBwCurve& curve, double bytes);

// Convenience: the op's collective over its group in this scenario.
Seconds comm_time(const Op& op, const Scenario& sc);

}  // namespace commscope
