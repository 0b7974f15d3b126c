// Costs of collectives: measured curves, else NCCL's algorithm/protocol model (its structure
// after NCCL's src/graph/tuning.cc, own code; constants in the system preset's NcclTuning).
// Bandwidth terms use nccl-tests' bus factors: a ring all-reduce moves 2(n-1)/n of the buffer
// over each rank's link, all-gather and reduce-scatter (n-1)/n, broadcast, reduce and
// send/receive the whole buffer.
#include "commscope/cost/collective.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include <fmt/format.h>

namespace commscope {

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

int job_nics_per_node(const Scenario& sc) {
  const int node_gpus = std::max(1, sc.system.node.gpus);
  const int used = std::clamp(sc.gpus_per_node, 1, node_gpus);
  return std::max(1, static_cast<int>(std::lround(static_cast<double>(sc.system.nics.count) * used /
                                                  node_gpus)));
}

LinkModel link_model(const Scenario& sc) {
  const auto& cal = sc.system.calibration;
  LinkModel l;
  l.intra = sc.system.node.topology == IntraNodeTopology::pcie
                ? sc.system.node.p2p_bandwidth
                : sc.system.node.link_bandwidth * cal.intra_node_efficiency;
  l.node = sc.network.achievable * static_cast<double>(job_nics_per_node(sc));
  l.intra_latency = cal.intra_node_latency;
  l.net_latency = sc.network.latency;
  attach_curves(l, sc.network.curves.span());
  // NCCL's tables. The calibrated per-step latencies are the ring Simple hops of their link;
  // the other algorithms and protocols scale by NCCL's ratios for that link kind.
  const NcclTuning& t = sc.system.nccl;
  const int intra_kind = sc.system.node.topology == IntraNodeTopology::pcie ? 1 : 0;
  const double intra_ref = t.hop_latency_us[intra_kind][0][2], net_ref = t.hop_latency_us[2][0][2];
  for (int a = 0; a < 2; ++a)
    for (int p = 0; p < 3; ++p) {
      l.base[a][p] = t.base_latency_us[a][p] * 1e-6;
      l.intra_hop[a][p] = l.intra_latency.value() * t.hop_latency_us[intra_kind][a][p] / intra_ref;
      l.net_hop[a][p] = l.net_latency.value() * t.hop_latency_us[2][a][p] / net_ref;
      l.fraction[a][p] = t.bandwidth_fraction[a][p];
    }
  for (int p = 0; p < 3; ++p) l.channel_bytes[p] = t.channel_bytes[p];
  l.max_channels = t.max_channels;
  l.ll128 = t.ll128 && sc.system.node.topology != IntraNodeTopology::pcie;
  l.oversubscription = sc.system.scale.oversubscription;
  l.nic = sc.network.achievable;
  l.nics_per_group = sc.system.scale.nics_per_group;
  // DeepSpeed 0.3-0.5's fitted NIC count (presets/frameworks/deepspeed.json) replaces it.
  if (sc.plan.framework == Framework::deepspeed && sc.plan.zero3_nics_per_group > 0)
    l.nics_per_group = sc.plan.zero3_nics_per_group;
  l.leaf_nodes = sc.system.scale.leaf_nodes;
  l.switch_latency = units::us(sc.system.scale.switch_latency_us);
  // NVLS and CollNet: what the system has and --nccl-algo enables.
  const bool nvswitch = sc.system.node.topology == IntraNodeTopology::nvswitch;
  const bool nvls = t.nvls && nvswitch;
  l.collnet = t.collnet && t.collnet_enable && nvswitch;
  constexpr std::uint8_t kNvls =
      (1u << static_cast<int>(NcclAlgo::nvls)) | (1u << static_cast<int>(NcclAlgo::nvls_tree));
  constexpr std::uint8_t kCollnet = (1u << static_cast<int>(NcclAlgo::collnet_direct)) |
                                    (1u << static_cast<int>(NcclAlgo::collnet_chain));
  const std::uint8_t capable = 3 | (nvls ? kNvls : 0) | (l.collnet ? kCollnet : 0);
  for (int f = 0; f < 5; ++f) {
    l.algos[f] = t.algorithms[f] & capable;
    l.sharp |= (l.algos[f] & ~3) != 0;
  }
  if (nvls)
    l.nvls_bw = l.intra.value() * t.nvls_efficiency * (t.nvls_channels - 1) / t.nvls_channels;
  for (int i = 0; i < 2; ++i)
    l.nvls_tree_cap[i] = t.nvls_channels * t.nvls_tree_channel_gbs[i] * 1e9;
  l.collnet_direct_efficiency = t.collnet_direct_efficiency;
  // NCCL 2.30.7's ring Simple hops (tuning.cc hwLatencies): 3.4 us NVLink, 14.0 us network;
  // its tree Simple network hop (used with one GPU per node) is 14.0 us as well.
  constexpr double kRefNvlinkUs = 3.4, kRefNetUs = 14.0;
  for (int a = 0; a < 4; ++a) {
    l.sharp_hop[a][0] = l.intra_latency.value() * t.sharp_hop_latency_us[a][0] / kRefNvlinkUs;
    l.sharp_hop[a][1] = l.net_latency.value() * t.sharp_hop_latency_us[a][1] / kRefNetUs;
  }
  l.sharp_net_ppn1 = l.net_latency.value();
  l.nics = job_nics_per_node(sc);
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

std::string_view to_string(CollectiveAlgorithm a) {
  switch (a) {
    case CollectiveAlgorithm::automatic:
      return "auto";
    case CollectiveAlgorithm::ring:
      return "ring";
    case CollectiveAlgorithm::tree:
      return "tree";
    case CollectiveAlgorithm::hierarchical:
      return "hierarchical";
    case CollectiveAlgorithm::p2p:
      return "p2p";
    case CollectiveAlgorithm::nvls:
      return "nvls";
    case CollectiveAlgorithm::nvls_tree:
      return "nvls_tree";
    case CollectiveAlgorithm::collnet_direct:
      return "collnet_direct";
    case CollectiveAlgorithm::collnet_chain:
      return "collnet_chain";
  }
  return "auto";
}

std::string_view to_string(CollectiveProtocol p) {
  switch (p) {
    case CollectiveProtocol::automatic:
      return "auto";
    case CollectiveProtocol::ll:
      return "LL";
    case CollectiveProtocol::ll128:
      return "LL128";
    case CollectiveProtocol::simple:
      return "Simple";
  }
  return "auto";
}

std::string cost_path(const CollectiveCost& c) {
  if (c.source == CostSource::curve) return "curve";
  return fmt::format("model:{}/{}", to_string(c.algorithm), to_string(c.protocol));
}

int fat_tree_switches(int nodes, int leaf_nodes) {
  if (nodes <= 1) return 0;
  const double leaf = std::max(1, leaf_nodes);
  int levels = 1;
  for (double reach = leaf; reach < nodes && levels < 8; reach *= std::max(2.0, leaf)) ++levels;
  return 2 * levels - 1;
}

double group_net_bandwidth(const GroupPlacement& g, const LinkModel& l) {
  double bw = l.node.value() / std::max(1, g.concurrent);
  if (l.nics_per_group > 0) bw = std::min(bw, l.nic.value() * l.nics_per_group);
  if (g.nodes > l.leaf_nodes) bw /= std::max(1.0, l.oversubscription);
  return bw;
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
CollectiveCost model_cost(Collective c, double bytes, const GroupPlacement& g, const LinkModel& l,
                          CollectiveAlgorithm a, CollectiveProtocol p);
}  // namespace

CollectiveCost collective_cost(Collective c, double bytes, const GroupPlacement& g,
                               const LinkModel& l, CollectiveAlgorithm a, CollectiveProtocol p) {
  const int n = g.size;
  if (n <= 1 && c != Collective::send && c != Collective::recv) return {Seconds(0)};
  if (bytes <= 0) return {Seconds(0)};
  if (l.curve_mask && a == CollectiveAlgorithm::automatic && p == CollectiveProtocol::automatic) {
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
        const double m = model_cost(c, bytes, g, l, a, p).time.value();
        const double m0 = model_cost(c, first.bytes, g, l, a, p).time.value();
        t = m0 > 0 ? t0 * m / m0 : t0;
      }
      return {Seconds(t), CostSource::curve};
    }
  }
  return model_cost(c, bytes, g, l, a, p);
}

Seconds collective_time(Collective c, double bytes, const GroupPlacement& g, const LinkModel& l,
                        CollectiveAlgorithm a) {
  return collective_cost(c, bytes, g, l, a).time;
}

Seconds collective_time(Collective c, double bytes, int messages, const GroupPlacement& g,
                        const LinkModel& l) {
  if (messages <= 1) return collective_time(c, bytes, g, l);
  return Seconds(messages * collective_time(c, bytes / messages, g, l).value());
}

namespace {
// Share of the bandwidth the channels NCCL runs for `bytes` with protocol p reach: one
// channel per channel_bytes (LL's ring threshold grows with the ranks), from 1 to
// max_channels. Counted continuously, so that below full channels the transfer takes one
// channel's chunk time and time never falls as the size grows.
double channel_share(double bytes, int p, int n, const LinkModel& l) {
  const double per = l.channel_bytes[p] * (p == 0 ? n : 1);
  return std::clamp(bytes / per, 1.0, static_cast<double>(l.max_channels)) / l.max_channels;
}

// NCCL's NVLS, NVLS_TREE, CollNet Direct and CollNet Chain (Simple only), after NCCL 2.30.7
// src/graph/tuning.cc (docs/cost-model.md, "NVLS and CollNet"): `use` holds the enabled
// algorithms' NcclAlgo bits when automatic, else `a` names the one asked for. beta is the
// per-rank bandwidth the ring uses (NVLink, or the NICs' share across nodes), net the node's
// NIC bandwidth one group gets, extra the fat tree's further switches per network hop.
template <class Consider>
void sharp_cost(Collective c, double bytes, const GroupPlacement& g, const LinkModel& l,
                std::uint8_t use, CollectiveAlgorithm a, double beta, double net, double extra,
                Consider&& consider) {
  auto wanted = [&](NcclAlgo x, CollectiveAlgorithm ca) {
    return a == CollectiveAlgorithm::automatic ? (use >> static_cast<int>(x)) & 1 : a == ca;
  };
  const int n = g.size, k = std::max(1, g.per_node), N = g.nodes;
  constexpr int kSimple = 2;
  const bool all_reduce = c == Collective::all_reduce;
  const double bus = 2.0 * (n - 1) / n;  // all-reduce's bus factor (n > 1 here)
  // With one GPU per node the network hop is the tree's (tuning.cc).
  auto net_hop = [&](int alg) { return (k == 1 ? l.sharp_net_ppn1 : l.sharp_hop[alg][1]) + extra; };
  // NVLS: the switch reduces (multimem); all-reduce pipelines two operations (busBw x 2).
  // Across nodes only with IB SHARP (NVLS + CollNet). AllGather / ReduceScatter inside a node,
  // priced as tuning.cc does: busBw x (ppn - 1) / ppn, no bus-to-algorithm conversion.
  if (l.nvls_bw > 0 && k >= 2 && wanted(NcclAlgo::nvls, CollectiveAlgorithm::nvls)) {
    const double lat = l.sharp_hop[2][0];
    if (all_reduce && (N == 1 || l.collnet)) {
      const double bw = N == 1 ? 2 * l.nvls_bw : std::min(2 * l.nvls_bw, net);
      consider(CollectiveAlgorithm::nvls, kSimple,
               lat + (N > 1 ? net_hop(2) : 0.0) + bus * bytes / bw);
    } else if ((c == Collective::all_gather || c == Collective::reduce_scatter) && N == 1) {
      consider(CollectiveAlgorithm::nvls, kSimple,
               lat + bytes / (l.nvls_bw * (k - 1) / static_cast<double>(k)));
    }
  }
  // NVLS_TREE: NVLS inside each node, a tree of log2(nodes) levels across them, up and down;
  // the network's bandwidth doubled with 2 nodes, capped per channel.
  if (l.nvls_bw > 0 && k >= 2 && N > 1 && all_reduce &&
      wanted(NcclAlgo::nvls_tree, CollectiveAlgorithm::nvls_tree)) {
    const double bw =
        std::min({2 * l.nvls_bw, net * (N <= 2 ? 2.0 : 1.0), l.nvls_tree_cap[N <= 2 ? 0 : 1]});
    const double lat = l.sharp_hop[3][0] + 2.0 * ceil_log2(N) * net_hop(3);
    consider(CollectiveAlgorithm::nvls_tree, kSimple, lat + bus * bytes / bw);
  }
  // CollNet (IB SHARP reduces in the switches): all-reduce across nodes, algorithm bandwidth
  // half the bus bandwidth as the tree's. Direct: every GPU to its own NIC, slowed by the
  // GPU-to-NIC ratio r as (r - (r - 1) / 2), x 0.85 from sm90, 0.4 us per local rank; Chain:
  // a chain of the node's GPUs to one NIC.
  if (l.collnet && N > 1 && all_reduce) {
    if (wanted(NcclAlgo::collnet_direct, CollectiveAlgorithm::collnet_direct)) {
      const double r = std::max(1.0, static_cast<double>(k) / l.nics);
      const double bw = beta / (r - (r - 1) / 2) * l.collnet_direct_efficiency;
      const double lat =
          2.0 * (std::min(1, k - 1) * l.sharp_hop[0][0] + (k - 1) * 0.4e-6) + net_hop(0);
      consider(CollectiveAlgorithm::collnet_direct, kSimple, lat + 2.0 * bytes / bw);
    }
    if (wanted(NcclAlgo::collnet_chain, CollectiveAlgorithm::collnet_chain)) {
      const double lat = 2.0 * (k - 1) * l.sharp_hop[1][0] + net_hop(1);
      consider(CollectiveAlgorithm::collnet_chain, kSimple, lat + 2.0 * bytes / beta);
    }
  }
}

CollectiveCost model_cost(Collective c, double bytes, const GroupPlacement& g, const LinkModel& l,
                          CollectiveAlgorithm a, CollectiveProtocol proto) {
  const int n = g.size;
  if (n <= 1 && c != Collective::send && c != Collective::recv) return {Seconds(0)};
  if (bytes <= 0) return {Seconds(0)};
  const bool crosses = g.nodes > 1;
  // A ring that crosses nodes carries bus x bytes over each node boundary; rings spread over
  // the node's NICs, which the concurrent groups share (and the spine, when oversubscribed).
  const double net_per_group = group_net_bandwidth(g, l);
  const double beta_rank = crosses ? std::min(l.intra.value(), net_per_group) : l.intra.value();
  const double bus = bus_factor(c, n);
  // Each inter-node hop: the network's latency through one switch, plus the further switches
  // of the fat tree the group spans.
  const double extra =
      crosses ? (fat_tree_switches(g.nodes, l.leaf_nodes) - 1) * l.switch_latency.value() : 0.0;

  // Point-to-point (send/receive, all-to-all): one message per peer, Simple, no protocol choice.
  if (c == Collective::send || c == Collective::recv || c == Collective::all_to_all) {
    const double hop = crosses ? l.net_hop[0][2] + extra : l.intra_hop[0][2];
    double move = bus * bytes / beta_rank;
    if (c == Collective::all_to_all && crosses) {
      // Unlike a ring, whose boundary crossing carries one rank's bus x S over the node's NICs,
      // every rank of an all-to-all sends S / n to each peer: the per_node ranks on a node push
      // per_node x (n - per_node) / n x S through the node's share of the NICs, while their
      // (per_node - 1) / n x S each to the node's other ranks goes over NVLink beside it.
      const int k = std::max(1, g.per_node);
      const double inter = k * static_cast<double>(n - k) / n * bytes / net_per_group;
      const double intra = static_cast<double>(k - 1) / n * bytes / l.intra.value();
      move = std::max(inter, intra);
    }
    return {Seconds(ring_steps(c, n) * hop + move), CostSource::model, CollectiveAlgorithm::p2p,
            CollectiveProtocol::simple};
  }

  if (a == CollectiveAlgorithm::hierarchical) {
    // commscope's two-level form: inside each node over NVLink (bus factor of per_node
    // ranks), across nodes each node moves the whole buffer through its NICs (bus factor of
    // the node count). Not an NCCL algorithm; priced only when asked for.
    const int k = g.per_node, N = g.nodes;
    const double intra = k > 1 ? ring_steps(c, k) * l.intra_latency.value() +
                                     bus_factor(c, k) * bytes / l.intra.value()
                               : 0.0;
    const double inter = N > 1 ? ring_steps(c, N) * (l.net_latency.value() + extra) +
                                     bus_factor(c, N) * bytes / net_per_group
                               : 0.0;
    return {Seconds(intra + inter), CostSource::model, CollectiveAlgorithm::hierarchical,
            CollectiveProtocol::simple};
  }

  CollectiveCost best{Seconds(-1)};
  auto consider = [&](CollectiveAlgorithm alg, int p, double t) {
    if (best.time.value() < 0 || t < best.time.value())
      best = {Seconds(t), CostSource::model, alg, static_cast<CollectiveProtocol>(p + 1)};
  };
  const int p_lo = proto == CollectiveProtocol::automatic ? 0 : static_cast<int>(proto) - 1;
  const int p_hi = proto == CollectiveProtocol::automatic ? 2 : p_lo;
  // The algorithms this call may use: NCCL_ALGO's for the function when automatic (ring and
  // tree unless --nccl-algo says otherwise), else the one asked for.
  const bool automatic = a == CollectiveAlgorithm::automatic;
  const std::uint8_t use = automatic ? l.algos[nccl_function(c)] : 0;
  // Ring: NCCL's 2(n-1) steps for all-reduce (n-1 for the others), 2(N-1) (N-1) of them
  // across nodes at the network's hop latency, the rest inside nodes.
  auto price_ring = [&] {
    const int steps = ring_steps(c, n);
    const int inter = crosses ? std::min(steps, ring_steps(c, g.nodes)) : 0;
    for (int p = p_lo; p <= p_hi; ++p) {
      if (p == 1 && !l.ll128 && proto == CollectiveProtocol::automatic) continue;
      const double lat =
          l.base[0][p] + (steps - inter) * l.intra_hop[0][p] + inter * (l.net_hop[0][p] + extra);
      const double bw = beta_rank * l.fraction[0][p] * channel_share(bytes, p, n, l);
      consider(CollectiveAlgorithm::ring, p, lat + bus * bytes / bw);
    }
  };
  if (automatic ? (use & 1) != 0 : a == CollectiveAlgorithm::ring || c != Collective::all_reduce)
    price_ring();
  // Tree (all-reduce only, NCCL's double binary tree): a chain of per_node ranks inside each
  // node and log2(nodes) levels across them, up and down; algorithm bandwidth half the bus
  // bandwidth (time 2 S / busbw).
  if (c == Collective::all_reduce &&
      (automatic ? (use & 2) != 0 : a == CollectiveAlgorithm::tree)) {
    const int k = std::max(1, g.per_node);
    for (int p = p_lo; p <= p_hi; ++p) {
      if (p == 1 && !l.ll128 && proto == CollectiveProtocol::automatic) continue;
      const double lat = l.base[1][p] + 2.0 * ((k - 1) * l.intra_hop[1][p] +
                                               ceil_log2(g.nodes) * (l.net_hop[1][p] + extra));
      const double bw = beta_rank * l.fraction[1][p] * channel_share(bytes, p, 1, l);
      consider(CollectiveAlgorithm::tree, p, lat + 2.0 * bytes / bw);
    }
  }
  if ((l.sharp || !automatic) && p_lo <= 2 && p_hi >= 2)
    sharp_cost(c, bytes, g, l, automatic ? use : 0, a, beta_rank, net_per_group, extra, consider);
  // NCCL_ALGO left no algorithm that can run this call (NVLS on one GPU per node, an
  // algorithm asked for where it cannot run): Ring, as the cost path shows.
  if (best.time.value() < 0) price_ring();
  return best;
}
}  // namespace

Seconds forwarded_time(double payload, const ForwardedCopies& c, const GroupPlacement& g,
                       const LinkModel& l) {
  if (payload <= 0 || g.size <= 1) return Seconds(0);
  const bool crosses = g.nodes > 1;
  const double extra =
      crosses ? (fat_tree_switches(g.nodes, l.leaf_nodes) - 1) * l.switch_latency.value() : 0.0;
  const double hop = (crosses ? l.net_hop[0][2] + extra : 0.0) + l.intra_hop[0][2];
  const double net = crosses ? g.per_node * payload * c.network / group_net_bandwidth(g, l) : 0.0;
  const double nvlink = payload * c.nvlink / l.intra.value();
  return Seconds(hop + std::max(net, nvlink));
}

Seconds comm_time(const Op& op, const Scenario& sc) {
  const GroupPlacement g = place_group(sc, op.group);
  if (op.tag == OpTag::ep_forwarded)
    return forwarded_time(op.bytes, forwarded_copies(sc, g), g, link_model(sc));
  return collective_time(op.collective, op.bytes, op.messages, g, link_model(sc));
}

}  // namespace commscope
