// Group placement and the flex dispatcher's token copies (spec/placement.h).
#include "commscope/spec/placement.h"

#include <algorithm>
#include <cmath>

namespace commscope {

namespace {
int ceil_div(int a, int b) {
  return (a + b - 1) / b;
}

// P(none of top_k distinct experts drawn from `experts` falls among m of them):
// C(experts - m, top_k) / C(experts, top_k), as a product of top_k ratios.
double none_among(int experts, int top_k, double m) {
  double p = 1;
  for (int i = 0; i < top_k; ++i) {
    const double left = experts - m - i;
    if (left <= 0) return 0;
    p *= left / (experts - i);
  }
  return p;
}
}  // namespace

GroupPlacement place_group(const Scenario& sc, CommGroup g) {
  const auto& p = sc.plan;
  const int gpn = sc.gpus_per_node;
  GroupPlacement out;
  // Ranks of the group are `size` ranks `stride` apart in Megatron's order.
  int size = 1, stride = 1;
  const bool dp_before_pp = p.rank_order == RankOrder::tp_dp_pp;
  const int dp_stride = dp_before_pp ? p.tp : p.tp * p.pp;
  const int pp_stride = dp_before_pp ? p.tp * p.dp : p.tp;
  // Context parallelism sits between TP and DP (Megatron's tp-cp-ep-dp-pp): the CP ring is cp
  // ranks tp apart, the data group DP x CP ranks, the pipeline stride cp times longer.
  const int cp_pp_stride = pp_stride * p.cp;
  switch (g) {
    case CommGroup::tensor:
      size = p.tp, stride = 1;
      break;
    case CommGroup::data:
      size = p.dp * p.cp, stride = dp_stride;
      break;
    case CommGroup::pipeline:
      size = 2, stride = cp_pp_stride;
      break;
    case CommGroup::embedding:
      size = 2, stride = cp_pp_stride * std::max(1, p.pp - 1);
      break;
    case CommGroup::context:
      size = p.cp, stride = p.tp;
      break;
    // Experts: rank = expert-TP + ETP x (EP + EP x expert-DP) inside a stage (Megatron).
    case CommGroup::expert:
      size = p.ep, stride = p.expert_tp;
      break;
    case CommGroup::expert_data:
      size = p.expert_dp(), stride = p.expert_tp * p.ep;
      break;
  }
  out.size = size;
  if (stride >= gpn) {
    out.per_node = 1;
  } else {
    out.per_node = std::min(size, gpn / stride);
  }
  out.nodes = ceil_div(size, out.per_node);
  // Every GPU of a node runs its own group's collective at the same time (all TP ranks do
  // their DP all-reduce together), so a node's NICs are shared by gpn / per_node groups.
  out.concurrent = std::max(1, std::min(gpn, sc.gpus()) / out.per_node);
  if (!sc.system.scale.nic_sharing) out.concurrent = 1;
  return out;
}

namespace {
double binomial(double n, double r) {
  if (r < 0 || r > n) return 0;
  return std::exp(std::lgamma(n + 1) - std::lgamma(r + 1) - std::lgamma(n - r + 1));
}

// P(a token's top_k experts miss a set of `set` experts that is whole groups or lies inside one
// group; forwarded_copies' comment).
double miss(int experts, int top_k, int groups, int group_topk, int set) {
  if (groups <= 0) return none_among(experts, top_k, set);
  const int g = experts / groups, pool = group_topk * g;
  if (set % g == 0) {
    const int c = set / g;  // the set's groups: j of them chosen, hypergeometrically
    double p = 0;
    for (int j = 0; j <= std::min(c, group_topk); ++j)
      p += binomial(c, j) * binomial(groups - c, group_topk - j) / binomial(groups, group_topk) *
           none_among(pool, top_k, static_cast<double>(j) * g);
    return p;
  }
  const double chosen = static_cast<double>(group_topk) / groups;
  return (1 - chosen) + chosen * none_among(pool, top_k, set);
}

bool aligned(int set, int g) {
  return set > 0 && g > 0 && (set % g == 0 || g % set == 0);
}
}  // namespace

bool expert_groups_align(int experts, int groups, const GroupPlacement& ep) {
  if (groups <= 0) return true;
  if (ep.size <= 0 || experts % ep.size != 0 || experts % groups != 0) return false;
  const int per_gpu = experts / ep.size, g = experts / groups;
  return aligned(per_gpu, g) && aligned(per_gpu * ep.per_node, g);
}

ForwardedCopies forwarded_copies(int experts, int top_k, const GroupPlacement& ep, int groups,
                                 int group_topk) {
  ForwardedCopies c;
  if (experts <= 0 || top_k <= 0 || ep.size <= 1) return c;
  const int k = std::min(top_k, experts);
  const int per_gpu = experts / ep.size;
  c.network = (ep.nodes - 1) * (1 - miss(experts, k, groups, group_topk, per_gpu * ep.per_node));
  c.nvlink = static_cast<double>(ep.nodes) * (ep.per_node - 1) *
             (1 - miss(experts, k, groups, group_topk, per_gpu));
  return c;
}

ForwardedCopies forwarded_copies(const Scenario& sc, const GroupPlacement& ep) {
  return forwarded_copies(static_cast<int>(sc.model.experts),
                          static_cast<int>(sc.model.experts_per_token), ep,
                          sc.plan.moe_router_groups, sc.plan.moe_router_group_topk);
}

}  // namespace commscope
