// Where a process group's ranks sit on the nodes (a fact of the plan and the system, read by
// the workload's MoE routing and by the cost of every collective), and where a routed MoE
// token's copies go under the flex dispatcher (docs/workload.md, "The flex dispatcher").
#pragma once

#include "commscope/spec/scenario.h"

namespace commscope {

// Where a process group's ranks sit, under Megatron's rank order (tensor fastest, then data,
// then pipeline: rank = t + TP x (d + DP x p)) with GPUs filled node by node.
struct GroupPlacement {
  int size = 1;        // ranks in the group
  int nodes = 1;       // nodes it spans
  int per_node = 1;    // its ranks on each node
  int concurrent = 1;  // groups of this kind that use a node's NICs at the same time
};
GroupPlacement place_group(const Scenario& sc, CommGroup g);

// The copies of one token that DeepEP's or HybridEP's dispatch makes (and its combine
// returns), for a token routed to top_k distinct experts drawn uniformly from `experts`
// spread evenly over the EP group `ep` (Megatron-LM's force-balanced router draws them so):
// `network`, the other nodes it is sent to once each over the network (RDMA), and `nvlink`,
// the copies forwarded over NVLink inside the nodes, one to each GPU of a node that holds one
// of its experts other than the GPU it arrives at. With P(no expert in a set of m) =
// C(experts - m, top_k) / C(experts, top_k) (hypergeometric): network = (nodes - 1) x
// (1 - P(m = experts per node)), nvlink = nodes x (per_node - 1) x (1 - P(m = experts per
// GPU)). NCCL's all-to-all instead sends top_k x (size - per_node) / size copies across nodes.
// Under group-limited routing (groups > 0: the experts in `groups` contiguous groups, a token
// choosing group_topk of them uniformly, then its top_k uniformly among their experts), P(no
// expert in a node's or GPU's set) sums over how many of the set's groups were chosen (a set
// of whole groups) or is P(its group not chosen) + P(chosen) x the hypergeometric in the
// chosen pool (a set inside one group); every set must be one or the other
// (expert_groups_align says whether they are).
struct ForwardedCopies {
  double network = 0;
  double nvlink = 0;
};
ForwardedCopies forwarded_copies(int experts, int top_k, const GroupPlacement& ep, int groups = 0,
                                 int group_topk = 0);
// The same for a scenario's model and routing groups over its EP group placed at `ep`
// (place_group(sc, CommGroup::expert), passed in where the caller has it already).
ForwardedCopies forwarded_copies(const Scenario& sc, const GroupPlacement& ep);
// Whether every node's and every GPU's experts of the EP group are whole groups or lie inside
// one group (the sets forwarded_copies prices under group-limited routing).
bool expert_groups_align(int experts, int groups, const GroupPlacement& ep);

}  // namespace commscope
