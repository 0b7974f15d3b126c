// Alpha-beta costs of collectives. Bandwidth terms use nccl-tests' bus factors: a ring
// all-reduce moves 2(n-1)/n of the buffer over each rank's link, all-gather and reduce-scatter
// (n-1)/n, broadcast, reduce and send/receive the whole buffer.
#include "commscope/cost/collective.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace commscope {

namespace {
int ceil_div(int a, int b) {
  return (a + b - 1) / b;
}
}  // namespace

int ceil_log2(std::uint64_t n) {
  // Bits needed to count n - 1: 0 for n <= 1, 64 for n above 2^63. No loop, no overflow.
  return n <= 1 ? 0 : std::bit_width(n - 1);
}

namespace {
// Latency steps of a ring algorithm over n ranks.
int ring_steps(Collective c, int n) {
  switch (c) {
    case Collective::all_reduce:
      return 2 * (n - 1);
    case Collective::send:
    case Collective::recv:
      return 1;
    default:
      return n - 1;
  }
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
  switch (g) {
    case CommGroup::tensor:
      size = p.tp, stride = 1;
      break;
    case CommGroup::data:
      size = p.dp, stride = dp_stride;
      break;
    case CommGroup::pipeline:
      size = 2, stride = pp_stride;
      break;
    case CommGroup::embedding:
      size = 2, stride = pp_stride * std::max(1, p.pp - 1);
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
  return out;
}

LinkModel link_model(const Scenario& sc) {
  const auto& cal = sc.system.calibration;
  LinkModel l;
  l.intra = sc.system.node.topology == IntraNodeTopology::pcie
                ? sc.system.node.p2p_bandwidth
                : sc.system.node.link_bandwidth * cal.intra_node_efficiency;
  l.node = sc.network.achievable * static_cast<double>(sc.system.nics.count);
  l.intra_latency = cal.intra_node_latency;
  l.net_latency = sc.network.latency;
  attach_curves(l, sc.network.curves.span());
  return l;
}

namespace {
// Curves are keyed by send for both halves of a send/receive pair (nccl-tests sendrecv_perf).
Collective curve_key(Collective c) {
  return c == Collective::recv ? Collective::send : c;
}
std::uint32_t mask_bit(Collective c, CurveScope s) {
  return std::uint32_t{1} << (static_cast<unsigned>(curve_key(c)) * 2 + static_cast<unsigned>(s));
}
}  // namespace

void attach_curves(LinkModel& l, std::span<const BusBwCurve> curves) {
  l.curves = curves;
  l.curve_mask = 0;
  for (const auto& c : curves)
    if (!c.points.empty()) l.curve_mask |= mask_bit(c.collective, c.scope);
}

std::string_view to_string(CostSource s) {
  return s == CostSource::curve ? "curve" : "model";
}

const BusBwCurve* curve_for(Collective c, const GroupPlacement& g, const LinkModel& l) {
  const CurveScope scope = g.nodes > 1 ? CurveScope::inter_node : CurveScope::intra_node;
  if (!(l.curve_mask & mask_bit(c, scope))) return nullptr;
  const Collective key = curve_key(c);
  // Nearest in nodes first (what the NICs see), then in ranks, on a log scale; the first of equals.
  const BusBwCurve* best = nullptr;
  double best_nodes = 0, best_ranks = 0;
  for (const auto& cv : l.curves) {
    if (cv.collective != key || cv.scope != scope || cv.points.empty()) continue;
    // max(a/b, b/a) orders as |log(a/b)| does, without a logarithm on the hot path.
    auto far = [](double a, double b) { return a > b ? a / b : b / a; };
    const double dn = far(cv.nodes, std::max(g.nodes, 1));
    const double dr = far(cv.ranks, std::max(g.size, 1));
    if (!best || dn < best_nodes || (dn == best_nodes && dr < best_ranks)) {
      best = &cv;
      best_nodes = dn, best_ranks = dr;
    }
  }
  return best;
}

double curve_busbw(const BusBwCurve& curve, double bytes) {
  const auto& p = curve.points;
  if (bytes <= p.front().bytes) return p.front().busbw.value();
  if (bytes >= p.back().bytes) return p.back().busbw.value();
  // First point above bytes; sizes strictly increase (the loader checks).
  const auto hi = std::upper_bound(p.begin(), p.end(), bytes,
                                   [](double b, const CurvePoint& q) { return b < q.bytes; });
  const auto lo = hi - 1;
  const double x = std::log(bytes / lo->bytes) / std::log(hi->bytes / lo->bytes);
  return lo->busbw.value() + x * (hi->busbw.value() - lo->busbw.value());
}

namespace {
Seconds model_time(Collective c, double bytes, const GroupPlacement& g, const LinkModel& l,
                   CollectiveAlgorithm a);
}  // namespace

CollectiveCost collective_cost(Collective c, double bytes, const GroupPlacement& g,
                               const LinkModel& l, CollectiveAlgorithm a) {
  const int n = g.size;
  if (n <= 1 && c != Collective::send && c != Collective::recv) return {Seconds(0)};
  if (bytes <= 0) return {Seconds(0)};
  if (l.curve_mask && a == CollectiveAlgorithm::automatic) {
    if (const BusBwCurve* cv = curve_for(c, g, l)) {
      // The curve was measured with one group on the node's NICs; concurrent groups share them.
      const double share = g.nodes > 1 ? 1.0 / g.concurrent : 1.0;
      const double bus = bus_factor(c, std::max(n, 2));
      const CurvePoint& first = cv->points.front();
      double t;
      if (bytes >= cv->points.back().bytes) {
        t = bus * bytes / (cv->points.back().busbw.value() * share);
      } else if (bytes >= first.bytes) {
        // Between two points, busbw is linear in log(size), so log(time) is convex in log(size):
        // below the lower point's time only before its minimum. That floor keeps time
        // non-decreasing in size wherever the points' times are (fit makes them so).
        const auto hi = std::upper_bound(cv->points.begin(), cv->points.end(), bytes,
                                         [](double b, const CurvePoint& q) { return b < q.bytes; });
        const CurvePoint& lo = *(hi - 1);
        const double x = std::log(bytes / lo.bytes) / std::log(hi->bytes / lo.bytes);
        const double bw = lo.busbw.value() + x * (hi->busbw.value() - lo.busbw.value());
        t = std::max(bus * bytes / (bw * share), bus * lo.bytes / (lo.busbw.value() * share));
      } else {
        // Below the smallest measured size: its time, scaled as the alpha-beta model scales.
        const double t0 = bus * first.bytes / (first.busbw.value() * share);
        const double m = model_time(c, bytes, g, l, a).value();
        const double m0 = model_time(c, first.bytes, g, l, a).value();
        t = m0 > 0 ? t0 * m / m0 : t0;
      }
      return {Seconds(t), CostSource::curve};
    }
  }
  return {model_time(c, bytes, g, l, a), CostSource::model};
}

Seconds collective_time(Collective c, double bytes, const GroupPlacement& g, const LinkModel& l,
                        CollectiveAlgorithm a) {
  return collective_cost(c, bytes, g, l, a).time;
}

namespace {
Seconds model_time(Collective c, double bytes, const GroupPlacement& g, const LinkModel& l,
                   CollectiveAlgorithm a) {
  const int n = g.size;
  if (n <= 1 && c != Collective::send && c != Collective::recv) return Seconds(0);
  if (bytes <= 0) return Seconds(0);
  const bool crosses = g.nodes > 1;
  // A ring that crosses nodes carries bus x bytes over each node boundary; rings spread over
  // the node's NICs, which the concurrent groups share.
  const double net_per_group = l.node.value() / g.concurrent;
  const double alpha = crosses ? l.net_latency.value() : l.intra_latency.value();
  const double beta_rank = crosses ? std::min(l.intra.value(), net_per_group) : l.intra.value();
  const double bus = bus_factor(c, n);

  // Flat ring: every rank's link carries bus x bytes.
  const double ring = ring_steps(c, n) * alpha + bus * bytes / beta_rank;
  if (a == CollectiveAlgorithm::ring || !crosses || c == Collective::send ||
      c == Collective::recv || c == Collective::broadcast || c == Collective::reduce ||
      c == Collective::all_to_all)
    return Seconds(ring);

  // Tree (NCCL's double binary tree, all-reduce only): log-depth latency, ring bandwidth.
  const double tree =
      c == Collective::all_reduce ? 2.0 * ceil_log2(n) * alpha + bus * bytes / beta_rank : ring;
  // Hierarchical: inside each node over NVLink (bus factor of per_node ranks), across nodes
  // each node moves the whole buffer share through its NICs (bus factor of the node count).
  const int k = g.per_node, N = g.nodes;
  const double intra = k > 1 ? ring_steps(c, k) * l.intra_latency.value() +
                                   bus_factor(c, k) * bytes / l.intra.value()
                             : 0.0;
  const double inter =
      ring_steps(c, N) * l.net_latency.value() + bus_factor(c, N) * bytes / net_per_group;
  const double hier = intra + inter;
  switch (a) {
    case CollectiveAlgorithm::tree:
      return Seconds(tree);
    case CollectiveAlgorithm::hierarchical:
      return Seconds(hier);
    default:
      return Seconds(std::min({ring, tree, hier}));
  }
}
}  // namespace

Seconds comm_time(const Op& op, const Scenario& sc) {
  return collective_time(op.collective, op.bytes, place_group(sc, op.group), link_model(sc));
}

}  // namespace commscope
