// Collective cost: latency/bandwidth (alpha-beta) time of a collective over a process group
// placed on a cluster: flat ring, tree, or hierarchical (inside the node over NVLink, across
// nodes over the NICs), the node's NICs shared by the groups that use them at once, and the
// network protocol's achievable rate and per-message latency.
#pragma once

#include <cstdint>

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

// The bandwidths and latencies the model uses for a scenario.
struct LinkModel {
  BytesPerSecond intra;   // per GPU inside a node (NVLink x efficiency)
  BytesPerSecond node;    // per node across nodes (NICs x protocol's achievable rate)
  Seconds intra_latency;  // per step inside a node
  Seconds net_latency;    // per step across nodes (the protocol's)
};
LinkModel link_model(const Scenario& sc);

// Depth of a binary tree over n ranks: the least k with 2^k >= n (0 for n <= 1), for every
// 64-bit n (a shifting loop over int never ended above 2^30).
int ceil_log2(std::uint64_t n);

// Time of one collective of `bytes` (nccl-tests "size") over a placed group.
Seconds collective_time(Collective c, double bytes, const GroupPlacement& g, const LinkModel& l,
                        CollectiveAlgorithm a = CollectiveAlgorithm::automatic);

// Convenience: the op's collective over its group in this scenario.
Seconds comm_time(const Op& op, const Scenario& sc);

}  // namespace commscope
