// System and network-protocol presets. Units in the files are named in the field (…_gbs is
// GB/s, …_gbps is Gbit/s, …_gib is GiB, …_tflops is TFLOP/s, …_us is microseconds) and
// converted here, once.
#include "commscope/spec/system.h"

#include <algorithm>

#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commscope/spec/limits.h"
#include "commscope/spec/preset.h"
#include "commscope/util/json_fields.h"

namespace commscope {

namespace {
constexpr EnumName<IntraNodeTopology> kTopoNames[] = {
    {IntraNodeTopology::nvswitch, "nvswitch"},
    {IntraNodeTopology::nvlink_mesh, "nvlink-mesh"},
    {IntraNodeTopology::pcie, "pcie"}};
constexpr EnumName<CurveScope> kScopeNames[] = {{CurveScope::intra_node, "intra_node"},
                                                {CurveScope::inter_node, "inter_node"}};
constexpr EnumName<Transport> kTransportNames[] = {{Transport::tcp, "tcp"},
                                                   {Transport::ipoib, "ipoib"},
                                                   {Transport::rdma, "rdma"},
                                                   {Transport::roce, "roce"},
                                                   {Transport::slingshot, "slingshot"}};

// Reads a required positive number, bounded so that no product of the cost model overflows
// (a latency of 1e308 us printed a 300-digit iteration, 1e-300 Gb/s an infinite one): every
// rate, size and latency of a system or network lies in [1e-6, 1e9] of its unit.
double positive(FieldReader& r, std::string_view key, bool required = true) {
  constexpr double kLow = 1e-6, kHigh = 1e9;
  double v = 0;
  bool present = r.read(key, v);
  if (!present && required) r.fail(key, "a positive number", "nothing (missing)");
  if (present && !(v >= kLow && v <= kHigh))
    r.fail(key, "a positive number from 1e-6 to 1e9", fmt::format("{}", v));
  return v;
}
}  // namespace

std::string_view to_string(IntraNodeTopology t) {
  return enum_to_name(kTopoNames, t);
}
std::string_view to_string(Transport t) {
  return enum_to_name(kTransportNames, t);
}
std::string_view to_string(CurveScope s) {
  return enum_to_name(kScopeNames, s);
}

namespace {
// A curve's "points": [[size_bytes, busbw_gbs], ...], sizes strictly increasing.
Status curve_points(const nlohmann::json* j, const std::string& where, const std::string& at,
                    std::vector<CurvePoint>& out) {
  const std::string field = at + ".points";
  if (!j || !j->is_array() || j->empty())
    return Error{
        fmt::format("{}: field '{}': expected a non-empty array of [size_bytes, "
                    "busbw_gbs] pairs, got {}",
                    where, field, j ? json_excerpt(*j) : "nothing (missing)")};
  if (j->size() > kMaxCurvePoints)
    return Error{fmt::format("{}: field '{}': expected at most {} points, got {}", where, field,
                             kMaxCurvePoints, j->size())};
  out.reserve(j->size());
  for (std::size_t k = 0; k < j->size(); ++k) {
    const auto& p = (*j)[k];
    const bool pair = p.is_array() && p.size() == 2 && p[0].is_number() && p[1].is_number();
    const double bytes = pair ? p[0].get<double>() : 0, gbs = pair ? p[1].get<double>() : 0;
    if (!pair || !(bytes > 0 && bytes <= 1e15) || !(gbs >= 1e-6 && gbs <= 1e6))
      return Error{fmt::format(
          "{}: field '{}[{}]': expected [size_bytes in (0, 1e15], busbw_gbs in [1e-6, 1e6]], got "
          "{}",
          where, field, k, json_excerpt(p))};
    if (!out.empty() && !(bytes > out.back().bytes))
      return Error{
          fmt::format("{}: field '{}[{}]': expected a size above the previous point's {}, "
                      "got {}",
                      where, field, k, out.back().bytes, bytes)};
    out.push_back({bytes, units::gb_per_s(gbs)});
  }
  return {};
}

// "curves": [{"collective", "scope", "ranks", "nodes", "points": [[size_bytes, busbw_gbs], ...]}]
Result<std::vector<BusBwCurve>> curves_from_json(const nlohmann::json& j,
                                                 const std::string& where) {
  std::vector<BusBwCurve> out;
  if (!j.is_array())
    return Error{fmt::format("{}: field 'curves': expected an array of curves, got {}", where,
                             json_excerpt(j))};
  if (j.size() > kMaxCurves)
    return Error{fmt::format("{}: field 'curves': expected at most {} curves, got {}", where,
                             kMaxCurves, j.size())};
  out.reserve(j.size());
  for (std::size_t i = 0; i < j.size(); ++i) {
    const std::string at = fmt::format("curves[{}]", i);
    if (!j[i].is_object())
      return Error{
          fmt::format("{}: field '{}': expected an object, got {}", where, at, json_excerpt(j[i]))};
    BusBwCurve c;
    FieldReader r(j[i], where, at);
    std::string name, scope;
    r.require("collective", name);
    if (r.has("collective") &&
        !(collective_from_name(name, c.collective) && to_string(c.collective) == name))
      r.fail("collective", "a collective (all_reduce, all_gather, ...)", "'" + name + "'");
    r.require("scope", scope);
    if (auto s = enum_from_name(kScopeNames, scope))
      c.scope = *s;
    else if (r.has("scope"))
      r.fail("scope", "one of " + enum_choices(kScopeNames), "'" + scope + "'");
    r.require("ranks", c.ranks);
    r.require("nodes", c.nodes);
    r.check(c.ranks >= 2 && c.ranks <= limits::kMaxGpus, "ranks",
            fmt::format("an integer from 2 to {}", limits::kMaxGpus), std::to_string(c.ranks));
    r.check(c.nodes >= 1 && c.nodes <= c.ranks, "nodes",
            fmt::format("an integer from 1 to ranks ({})", c.ranks), std::to_string(c.nodes));
    r.check((c.scope == CurveScope::intra_node) == (c.nodes == 1), "scope",
            c.nodes == 1 ? "intra_node for a curve on 1 node" : "inter_node for nodes > 1",
            "'" + scope + "'");
    const nlohmann::json* pts = r.raw().contains("points") ? &r.raw()["points"] : nullptr;
    CS_RETURN_IF_ERROR(curve_points(pts, where, at, c.points));
    r.allow_unknown();
    for (auto it = j[i].begin(); it != j[i].end(); ++it) {
      const std::string& k = it.key();
      if (k != "collective" && k != "scope" && k != "ranks" && k != "nodes" && k != "points")
        r.fail(k, "one of collective, scope, ranks, nodes, points", "an unknown field");
    }
    CS_RETURN_IF_ERROR(r.status());
    out.push_back(std::move(c));
  }
  return out;
}

// Reads a numeric array of a fixed shape (nested arrays, row-major) into out, each value
// checked by ok; the field named in the error.
Status numeric_array(const nlohmann::json& j, const std::string& where, const std::string& field,
                     std::span<const std::size_t> shape, double* out, bool (*ok)(double),
                     std::string_view expected) {
  std::string dims;
  for (auto d : shape) dims += fmt::format("{}{}", dims.empty() ? "" : " x ", d);
  const std::size_t total = [&] {
    std::size_t t = 1;
    for (auto d : shape) t *= d;
    return t;
  }();
  std::vector<double> flat;
  flat.reserve(total);
  // Depth-first walk checking each level's length.
  auto walk = [&](auto&& self, const nlohmann::json& v, std::size_t level) -> bool {
    if (level == shape.size()) {
      if (!v.is_number()) return false;
      const double x = v.get<double>();
      if (!ok(x)) return false;
      flat.push_back(x);
      return true;
    }
    if (!v.is_array() || v.size() != shape[level]) return false;
    for (const auto& e : v)
      if (!self(self, e, level + 1)) return false;
    return true;
  };
  if (!walk(walk, j, 0))
    return Error{fmt::format("{}: field '{}': expected a {} array of {}, got {}", where, field,
                             dims, expected, json_excerpt(j))};
  std::copy(flat.begin(), flat.end(), out);
  return {};
}

// The optional "nccl" object of a system preset: NCCL's tuning constants (NcclTuning).
Status nccl_from_json(const nlohmann::json& j, const std::string& where, NcclTuning& t) {
  if (!j.is_object())
    return Error{
        fmt::format("{}: field 'nccl': expected an object, got {}", where, json_excerpt(j))};
  auto nonneg = [](double x) { return x >= 0 && x <= 1e6; };
  auto fraction = [](double x) { return x >= 1e-4 && x <= 1; };  // as calibration's fractions
  auto positive_bytes = [](double x) { return x >= 1 && x <= 1e12; };
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const std::string field = "nccl." + k;
    const nlohmann::json& v = it.value();
    if (k == "base_latency_us") {
      const std::size_t shape[] = {2, 3};
      CS_RETURN_IF_ERROR(
          numeric_array(v, where, field, shape, &t.base_latency_us[0][0], nonneg,
                        "microseconds in [0, 1e6] ([ring, tree] x [LL, LL128, Simple])"));
    } else if (k == "hop_latency_us") {
      const std::size_t shape[] = {3, 2, 3};
      CS_RETURN_IF_ERROR(numeric_array(
          v, where, field, shape, &t.hop_latency_us[0][0][0],
          [](double x) { return x > 0 && x <= 1e6; },
          "positive microseconds ([NVLink, PCIe, network] x [ring, tree] x [LL, LL128, Simple])"));
    } else if (k == "bandwidth_fraction") {
      const std::size_t shape[] = {2, 3};
      CS_RETURN_IF_ERROR(
          numeric_array(v, where, field, shape, &t.bandwidth_fraction[0][0], fraction,
                        "fractions in [1e-4, 1] ([ring, tree] x [LL, LL128, Simple])"));
    } else if (k == "channel_bytes") {
      const std::size_t shape[] = {3};
      CS_RETURN_IF_ERROR(numeric_array(v, where, field, shape, t.channel_bytes, positive_bytes,
                                       "byte counts in [1, 1e12] ([LL, LL128, Simple])"));
    } else if (k == "max_channels") {
      if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > 64)
        return Error{fmt::format("{}: field '{}': expected an integer from 1 to 64, got {}", where,
                                 field, json_excerpt(v))};
      t.max_channels = v.get<int>();
    } else if (k == "ll128") {
      if (!v.is_boolean())
        return Error{fmt::format("{}: field '{}': expected true or false, got {}", where, field,
                                 json_excerpt(v))};
      t.ll128 = v.get<bool>();
    } else if (k == "nvls" || k == "collnet") {
      if (!v.is_boolean())
        return Error{fmt::format("{}: field '{}': expected true or false, got {}", where, field,
                                 json_excerpt(v))};
      (k == "nvls" ? t.nvls : t.collnet) = v.get<bool>();
    } else if (k == "nvls_efficiency" || k == "collnet_direct_efficiency") {
      if (!v.is_number() || !fraction(v.get<double>()))
        return Error{fmt::format("{}: field '{}': expected a fraction in [1e-4, 1], got {}", where,
                                 field, json_excerpt(v))};
      (k == "nvls_efficiency" ? t.nvls_efficiency : t.collnet_direct_efficiency) = v.get<double>();
    } else if (k == "nvls_channels") {
      if (!v.is_number_integer() || v.get<std::int64_t>() < 2 || v.get<std::int64_t>() > 64)
        return Error{fmt::format("{}: field '{}': expected an integer from 2 to 64, got {}", where,
                                 field, json_excerpt(v))};
      t.nvls_channels = v.get<int>();
    } else if (k == "nvls_tree_channel_gbs") {
      const std::size_t shape[] = {2};
      CS_RETURN_IF_ERROR(numeric_array(
          v, where, field, shape, t.nvls_tree_channel_gbs,
          [](double x) { return x > 0 && x <= 1e6; }, "positive GB/s ([2 nodes, more nodes])"));
    } else if (k == "sharp_hop_latency_us") {
      const std::size_t shape[] = {4, 2};
      CS_RETURN_IF_ERROR(numeric_array(
          v, where, field, shape, &t.sharp_hop_latency_us[0][0],
          [](double x) { return x > 0 && x <= 1e6; },
          "positive microseconds ([CollNetDirect, CollNetChain, NVLS, NVLSTree] x [NVLink, "
          "network])"));
    } else if (k != "sources") {
      return Error{fmt::format(
          "{}: field '{}': unknown field; expected one of: base_latency_us, hop_latency_us, "
          "bandwidth_fraction, channel_bytes, max_channels, ll128, nvls, nvls_efficiency, "
          "nvls_channels, nvls_tree_channel_gbs, collnet, collnet_direct_efficiency, "
          "sharp_hop_latency_us, sources",
          where, field)};
    }
  }
  return {};
}
}  // namespace

FlopsPerSecond PeakFlops::for_dtype(DType d) const {
  switch (d) {
    case DType::fp16:
      return fp16;
    case DType::bf16:
      return bf16;
    case DType::fp8:
      return fp8;
    case DType::fp64:
      return fp64;
    default:
      return tf32.value() > 0 ? tf32 : fp32;  // fp32 training runs GEMMs on TF32
  }
}

Result<SystemSpec> system_from_json(const nlohmann::json& j_in, const std::string& where) {
  SystemSpec s;
  // NCCL's tuning tables are read on their own (nested arrays); the strict reader sees the rest.
  const nlohmann::json* jp = &j_in;
  nlohmann::json rest;
  if (j_in.is_object() && j_in.contains("nccl")) {
    CS_RETURN_IF_ERROR(nccl_from_json(j_in["nccl"], where, s.nccl));
    rest = j_in;
    rest.erase("nccl");
    jp = &rest;
  }
  const nlohmann::json& j = *jp;
  FieldReader r(j, where);
  r.require("name", s.name);
  r.read("network", s.network);
  if (!r.has("network")) r.fail("network", "the name of a network preset", "nothing (missing)");
  r.read("max_nodes", s.max_nodes);
  r.read("sources", s.sources);

  auto g = r.object("gpu");
  g.require("name", s.gpu.name);
  s.gpu.memory = units::gib(positive(g, "memory_gib"));
  s.gpu.memory_bandwidth = units::gb_per_s(positive(g, "memory_bandwidth_gbs"));
  auto p = g.object("peak_tflops");
  s.gpu.peak.fp32 = units::tflop_per_s(positive(p, "fp32"));
  s.gpu.peak.fp64 = units::tflop_per_s(positive(p, "fp64", false));
  s.gpu.peak.tf32 = units::tflop_per_s(positive(p, "tf32", false));
  s.gpu.peak.fp16 = units::tflop_per_s(positive(p, "fp16"));
  s.gpu.peak.bf16 = units::tflop_per_s(positive(p, "bf16", false));
  s.gpu.peak.fp8 = units::tflop_per_s(positive(p, "fp8", false));

  auto n = r.object("node");
  n.require("gpus", s.node.gpus);
  n.check(s.node.gpus > 0, "gpus", "a positive integer", std::to_string(s.node.gpus));
  std::string topo = "nvswitch";
  n.read("topology", topo);
  if (auto t = enum_from_name(kTopoNames, topo))
    s.node.topology = *t;
  else
    n.fail("topology", "one of " + enum_choices(kTopoNames), "'" + topo + "'");
  s.node.link_bandwidth = units::gb_per_s(positive(n, "link_bandwidth_gbs"));
  s.node.p2p_bandwidth = units::gb_per_s(positive(n, "p2p_bandwidth_gbs"));
  s.node.host_copy_pinned = units::gb_per_s(positive(n, "host_copy_pinned_gbs", false));
  s.node.host_copy_pageable = units::gb_per_s(positive(n, "host_copy_pageable_gbs", false));
  s.node.host_memory_bandwidth = units::gb_per_s(positive(n, "host_memory_bandwidth_gbs", false));
  s.node.host_memory = units::gib(positive(n, "host_memory_gib", false));

  if (r.has("economics")) {
    // Its reader's errors are returned (a price written "12.29" was dropped without a word, and
    // plan --objective cost then said the system had none; found by probing, 2026-12-02).
    auto e = r.object("economics");
    if (e.read("price_per_gpu_hour_usd", s.price_per_gpu_hour))
      e.check(s.price_per_gpu_hour >= 1e-6 && s.price_per_gpu_hour <= 1e6, "price_per_gpu_hour_usd",
              "a price in US dollars from 1e-6 to 1e6", fmt::format("{}", s.price_per_gpu_hour));
    if (e.read("power_per_gpu_w", s.power_per_gpu_w))
      e.check(s.power_per_gpu_w >= 1e-3 && s.power_per_gpu_w <= 1e6, "power_per_gpu_w",
              "a power in watts from 1e-3 to 1e6", fmt::format("{}", s.power_per_gpu_w));
    e.read("sources", s.economics_sources);
    CS_RETURN_IF_ERROR(e.status());
  }

  auto nic = r.object("nics");
  nic.require("count", s.nics.count);
  nic.check(s.nics.count > 0, "count", "a positive integer", std::to_string(s.nics.count));
  s.nics.line_rate = units::gbit_per_s(positive(nic, "line_rate_gbps"));
  nic.read("model", s.nics.model);

  auto cal = r.object("calibration");
  if (r.has("calibration")) {
    Calibration& c = s.calibration;
    auto fraction = [&](std::string_view key, double& out) {
      // At least 1e-4, compute_fit's floor (an efficiency of 1e-300 printed a 300-digit
      // iteration, found by probing, 2026-12-02).
      if (cal.read(key, out))
        cal.check(out >= 1e-4 && out <= 1, key, "a fraction in [1e-4, 1]", fmt::format("{}", out));
    };
    fraction("gemm_efficiency", c.gemm_efficiency);
    fraction("attention_efficiency", c.attention_efficiency);
    fraction("flash_attention_efficiency", c.flash_attention_efficiency);
    fraction("memory_efficiency", c.memory_efficiency);
    fraction("intra_node_efficiency", c.intra_node_efficiency);
    // Each term within a range no fit or measurement leaves (a steepness of 150 overflowed
    // the GEMM curve into NaN; a negative overhead gave an MFU of 188%).
    auto bounded = [&](std::string_view key, double lo, double hi, const char* what) {
      double v = 0;
      if (!cal.read(key, v)) return std::optional<double>();
      cal.check(v >= lo && v <= hi, key, what, fmt::format("{}", v));
      return std::optional<double>(v);
    };
    if (auto v = bounded("gemm_half_gflops", 0, 1e9, "GFLOP from 0 to 1e9"))
      c.gemm_half_flops = *v * 1e9;
    if (auto v = bounded("gemm_steepness", 0.01, 16, "an exponent from 0.01 to 16"))
      c.gemm_steepness = *v;
    if (auto v = bounded("kernel_overhead_us", 0, 1e6, "microseconds from 0 to 1e6"))
      c.kernel_overhead = units::us(*v);
    if (auto v = bounded("intra_node_latency_us", 0, 1e6, "microseconds from 0 to 1e6"))
      c.intra_node_latency = units::us(*v);
    if (auto v = bounded("iteration_overhead_ms", 0, 1e6, "milliseconds from 0 to 1e6"))
      c.iteration_overhead = Seconds(*v * 1e-3);
    if (auto v = bounded("microbatch_overhead_us", 0, 1e9, "microseconds from 0 to 1e9"))
      c.microbatch_overhead = units::us(*v);
  }
  auto sc = r.object("scale");
  if (r.has("scale")) {
    ScaleEffects& e = s.scale;
    if (sc.read("straggler_cv", e.straggler_cv))
      sc.check(e.straggler_cv >= 0 && e.straggler_cv <= 1, "straggler_cv",
               "a coefficient of variation in [0, 1] (0: off)", fmt::format("{}", e.straggler_cv));
    if (sc.read("oversubscription", e.oversubscription))
      sc.check(e.oversubscription >= 1 && e.oversubscription <= 1000, "oversubscription",
               "a ratio in [1, 1000] (1: non-blocking)", fmt::format("{}", e.oversubscription));
    if (sc.read("leaf_nodes", e.leaf_nodes))
      sc.check(e.leaf_nodes >= 1 && e.leaf_nodes <= limits::kMaxGpus, "leaf_nodes",
               fmt::format("an integer from 1 to {}", limits::kMaxGpus),
               std::to_string(e.leaf_nodes));
    if (sc.read("switch_latency_us", e.switch_latency_us))
      sc.check(e.switch_latency_us >= 0 && e.switch_latency_us <= 1e3, "switch_latency_us",
               "microseconds in [0, 1000]", fmt::format("{}", e.switch_latency_us));
    sc.read("nic_sharing", e.nic_sharing);
    if (sc.read("nics_per_group", e.nics_per_group))
      sc.check(e.nics_per_group >= 0 && e.nics_per_group <= 1024, "nics_per_group",
               "an integer from 0 (all of the node's) to 1024", std::to_string(e.nics_per_group));
  }
  // NCCL enables LL128 on NVLink systems only (tuning.cc); a PCIe node runs LL and Simple.
  if (s.node.topology == IntraNodeTopology::pcie) s.nccl.ll128 = false;
  CS_RETURN_IF_ERROR(sc.status());
  CS_RETURN_IF_ERROR(cal.status());
  CS_RETURN_IF_ERROR(p.status());
  CS_RETURN_IF_ERROR(g.status());
  CS_RETURN_IF_ERROR(n.status());
  CS_RETURN_IF_ERROR(nic.status());
  CS_RETURN_IF_ERROR(r.status());
  return s;
}

Result<SystemSpec> load_system(const std::string& name_or_path) {
  CS_ASSIGN_OR_RETURN(auto path, find_preset(PresetKind::system, name_or_path));
  CS_ASSIGN_OR_RETURN(auto j, read_json_file(path));
  return system_from_json(j, path.string());
}

Result<NetworkProtocol> network_from_json(const nlohmann::json& j, const std::string& where) {
  NetworkProtocol p;
  // The curves are read on their own; the strict reader sees the rest.
  nlohmann::json rest = j;
  if (j.is_object() && j.contains("curves")) {
    CS_ASSIGN_OR_RETURN(p.curves, curves_from_json(j["curves"], where));
    rest.erase("curves");
  }
  FieldReader r(rest, where);
  r.require("name", p.name);
  std::string transport;
  r.require("transport", transport);
  if (auto t = enum_from_name(kTransportNames, transport))
    p.transport = *t;
  else if (r.has("transport"))
    r.fail("transport", "one of " + enum_choices(kTransportNames), "'" + transport + "'");
  double line = positive(r, "line_rate_gbps");
  double achievable = positive(r, "achievable_gbps");
  r.check(achievable <= line, "achievable_gbps", fmt::format("at most line_rate_gbps ({})", line),
          fmt::format("{}", achievable));
  p.line_rate = units::gbit_per_s(line);
  p.achievable = units::gbit_per_s(achievable);
  p.latency = units::us(positive(r, "latency_us"));
  r.read("sources", p.sources);
  CS_RETURN_IF_ERROR(r.status());
  return p;
}

Result<NetworkProtocol> load_network(const std::string& name_or_path) {
  CS_ASSIGN_OR_RETURN(auto path, find_preset(PresetKind::network, name_or_path));
  CS_ASSIGN_OR_RETURN(auto j, read_json_file(path));
  return network_from_json(j, path.string());
}

// The preset format system_from_json reads: every field it knows, optional ones when set.
nlohmann::json to_json(const SystemSpec& s) {
  using namespace units;
  nlohmann::json peak = {{"fp32", for_file(to_tflop_per_s(s.gpu.peak.fp32))},
                         {"fp16", for_file(to_tflop_per_s(s.gpu.peak.fp16))}};
  auto optional = [](nlohmann::json& j, const char* key, double v) {
    if (v > 0) j[key] = v;
  };
  optional(peak, "fp64", for_file(to_tflop_per_s(s.gpu.peak.fp64)));
  optional(peak, "tf32", for_file(to_tflop_per_s(s.gpu.peak.tf32)));
  optional(peak, "bf16", for_file(to_tflop_per_s(s.gpu.peak.bf16)));
  optional(peak, "fp8", for_file(to_tflop_per_s(s.gpu.peak.fp8)));
  nlohmann::json node = {{"gpus", s.node.gpus},
                         {"topology", to_string(s.node.topology)},
                         {"link_bandwidth_gbs", for_file(to_gb_per_s(s.node.link_bandwidth))},
                         {"p2p_bandwidth_gbs", for_file(to_gb_per_s(s.node.p2p_bandwidth))}};
  optional(node, "host_copy_pinned_gbs", for_file(to_gb_per_s(s.node.host_copy_pinned)));
  optional(node, "host_copy_pageable_gbs", for_file(to_gb_per_s(s.node.host_copy_pageable)));
  optional(node, "host_memory_bandwidth_gbs", for_file(to_gb_per_s(s.node.host_memory_bandwidth)));
  optional(node, "host_memory_gib", for_file(units::to_gib(s.node.host_memory)));
  nlohmann::json nics = {{"count", s.nics.count},
                         {"line_rate_gbps", for_file(to_gbit_per_s(s.nics.line_rate))}};
  if (!s.nics.model.empty()) nics["model"] = s.nics.model;
  const Calibration& c = s.calibration;
  nlohmann::json j = {{"name", s.name},
                      {"network", s.network},
                      {"gpu",
                       {{"name", s.gpu.name},
                        {"memory_gib", for_file(to_gib(s.gpu.memory))},
                        {"memory_bandwidth_gbs", for_file(to_gb_per_s(s.gpu.memory_bandwidth))},
                        {"peak_tflops", peak}}},
                      {"node", node},
                      {"nics", nics},
                      {"calibration",
                       {{"gemm_efficiency", c.gemm_efficiency},
                        {"gemm_half_gflops", for_file(c.gemm_half_flops / 1e9)},
                        {"gemm_steepness", c.gemm_steepness},
                        {"attention_efficiency", c.attention_efficiency},
                        {"memory_efficiency", c.memory_efficiency},
                        {"kernel_overhead_us", for_file(to_us(c.kernel_overhead))},
                        {"intra_node_efficiency", c.intra_node_efficiency},
                        {"intra_node_latency_us", for_file(to_us(c.intra_node_latency))},
                        {"iteration_overhead_ms", for_file(c.iteration_overhead.value() * 1e3)},
                        {"microbatch_overhead_us", for_file(to_us(c.microbatch_overhead))}}}};
  if (c.flash_attention_efficiency > 0)
    j["calibration"]["flash_attention_efficiency"] = c.flash_attention_efficiency;
  if (s.max_nodes > 0) j["max_nodes"] = s.max_nodes;
  if (!s.sources.empty()) j["sources"] = s.sources;
  if (s.price_per_gpu_hour > 0 || s.power_per_gpu_w > 0) {
    nlohmann::json econ = nlohmann::json::object();
    if (s.price_per_gpu_hour > 0) econ["price_per_gpu_hour_usd"] = s.price_per_gpu_hour;
    if (s.power_per_gpu_w > 0) econ["power_per_gpu_w"] = s.power_per_gpu_w;
    if (!s.economics_sources.empty()) econ["sources"] = s.economics_sources;
    j["economics"] = std::move(econ);
  }
  const ScaleEffects& e = s.scale;
  j["scale"] = {{"straggler_cv", e.straggler_cv}, {"oversubscription", e.oversubscription},
                {"leaf_nodes", e.leaf_nodes},     {"switch_latency_us", e.switch_latency_us},
                {"nic_sharing", e.nic_sharing},   {"nics_per_group", e.nics_per_group}};
  // NCCL's tables only where they differ from the defaults (NcclTuning).
  const NcclTuning& t = s.nccl;
  const NcclTuning d;
  nlohmann::json nccl = nlohmann::json::object();
  auto rows = [](const double* v, std::size_t n, std::size_t width) {
    nlohmann::json out = nlohmann::json::array();
    for (std::size_t i = 0; i < n; i += width)
      out.push_back(std::vector<double>(v + i, v + i + width));
    return out;
  };
  auto differs = [](const double* a, const double* b, std::size_t n) {
    return !std::equal(a, a + n, b);
  };
  if (differs(&t.base_latency_us[0][0], &d.base_latency_us[0][0], 6))
    nccl["base_latency_us"] = rows(&t.base_latency_us[0][0], 6, 3);
  if (differs(&t.hop_latency_us[0][0][0], &d.hop_latency_us[0][0][0], 18)) {
    nlohmann::json h = nlohmann::json::array();
    for (int k = 0; k < 3; ++k) h.push_back(rows(&t.hop_latency_us[k][0][0], 6, 3));
    nccl["hop_latency_us"] = std::move(h);
  }
  if (differs(&t.bandwidth_fraction[0][0], &d.bandwidth_fraction[0][0], 6))
    nccl["bandwidth_fraction"] = rows(&t.bandwidth_fraction[0][0], 6, 3);
  if (differs(t.channel_bytes, d.channel_bytes, 3))
    nccl["channel_bytes"] = std::vector<double>(t.channel_bytes, t.channel_bytes + 3);
  if (t.max_channels != d.max_channels) nccl["max_channels"] = t.max_channels;
  if (t.ll128 != d.ll128 && s.node.topology != IntraNodeTopology::pcie) nccl["ll128"] = t.ll128;
  if (t.nvls != d.nvls) nccl["nvls"] = t.nvls;
  if (t.nvls_efficiency != d.nvls_efficiency) nccl["nvls_efficiency"] = t.nvls_efficiency;
  if (t.nvls_channels != d.nvls_channels) nccl["nvls_channels"] = t.nvls_channels;
  if (differs(t.nvls_tree_channel_gbs, d.nvls_tree_channel_gbs, 2))
    nccl["nvls_tree_channel_gbs"] =
        std::vector<double>(t.nvls_tree_channel_gbs, t.nvls_tree_channel_gbs + 2);
  if (t.collnet != d.collnet) nccl["collnet"] = t.collnet;
  if (t.collnet_direct_efficiency != d.collnet_direct_efficiency)
    nccl["collnet_direct_efficiency"] = t.collnet_direct_efficiency;
  if (differs(&t.sharp_hop_latency_us[0][0], &d.sharp_hop_latency_us[0][0], 8))
    nccl["sharp_hop_latency_us"] = rows(&t.sharp_hop_latency_us[0][0], 8, 2);
  if (!nccl.empty()) j["nccl"] = std::move(nccl);
  return j;
}

nlohmann::json to_json(const NetworkProtocol& p) {
  nlohmann::json j = {{"name", p.name},
                      {"transport", to_string(p.transport)},
                      {"line_rate_gbps", units::for_file(units::to_gbit_per_s(p.line_rate))},
                      {"achievable_gbps", units::for_file(units::to_gbit_per_s(p.achievable))},
                      {"latency_us", units::for_file(units::to_us(p.latency))},
                      {"sources", p.sources}};
  if (p.curves.empty()) return j;
  nlohmann::json curves = nlohmann::json::array();
  for (const auto& c : p.curves) {
    nlohmann::json points = nlohmann::json::array();
    for (const auto& pt : c.points)
      points.push_back({units::for_file(pt.bytes), units::for_file(units::to_gb_per_s(pt.busbw))});
    curves.push_back({{"collective", to_string(c.collective)},
                      {"scope", to_string(c.scope)},
                      {"ranks", c.ranks},
                      {"nodes", c.nodes},
                      {"points", std::move(points)}});
  }
  j["curves"] = std::move(curves);
  return j;
}

int nccl_function(Collective c) {
  switch (c) {
    case Collective::all_reduce:
      return 0;
    case Collective::all_gather:
      return 1;
    case Collective::reduce_scatter:
      return 2;
    case Collective::broadcast:
      return 3;
    case Collective::reduce:
      return 4;
    default:
      return -1;
  }
}

namespace {
constexpr std::uint8_t algo_bit(NcclAlgo a) {
  return static_cast<std::uint8_t>(1u << static_cast<unsigned>(a));
}
constexpr std::uint8_t kAllAlgos = 0x3f;
constexpr std::uint8_t kNvlsBits = algo_bit(NcclAlgo::nvls) | algo_bit(NcclAlgo::nvls_tree);
constexpr std::uint8_t kCollnetBits =
    algo_bit(NcclAlgo::collnet_direct) | algo_bit(NcclAlgo::collnet_chain);

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& ch : out)
    if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
  return out;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (std::size_t start = 0;;) {
    const std::size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string_view::npos ? at : at - start));
    if (at == std::string_view::npos) return out;
    start = at + 1;
  }
}
}  // namespace

Status apply_nccl_algo(std::string_view text, const std::string& system_name, NcclTuning& t) {
  const std::string got = fmt::format("'{}'", text);
  auto refuse = [&](std::string_view expected) {
    return Error{fmt::format("--nccl-algo: expected {}, got {}", expected, got)};
  };
  static constexpr std::string_view kFunctions[5] = {"allreduce", "allgather", "reducescatter",
                                                     "broadcast", "reduce"};
  static constexpr std::string_view kFunctionNames[5] = {"AllReduce", "AllGather", "ReduceScatter",
                                                         "Broadcast", "Reduce"};
  constexpr std::string_view kNames =
      "NCCL_ALGO's syntax: [FUNC:][^]ALGO,... with ALGO one of ring, tree, collnet, "
      "collnetdirect, collnetchain, nvls, nvlstree and FUNC one of allreduce, allgather, "
      "reducescatter, broadcast, reduce, entries separated by ';'";
  if (text.empty() || text.size() > 1000) return refuse(kNames);
  std::uint8_t mask[5];
  std::copy(t.algorithms, t.algorithms + 5, mask);
  std::uint8_t named = 0;  // algorithms enabled by name (NCCL_COLLNET_ENABLE for CollNet)
  bool named_function[5] = {};
  const auto entries = split(text, ';');
  for (std::size_t i = 0; i < entries.size(); ++i) {
    std::string_view entry = entries[i], list = entry;
    int function = -1;  // all
    if (const auto colon = entry.find(':'); colon != std::string_view::npos) {
      const std::string prefix = lower(entry.substr(0, colon));
      const auto f = std::find(std::begin(kFunctions), std::end(kFunctions), prefix);
      if (f == std::end(kFunctions)) return refuse(kNames);
      function = static_cast<int>(f - std::begin(kFunctions));
      named_function[function] = true;
      list = entry.substr(colon + 1);
    } else if (i > 0) {
      return refuse(std::string(kNames) + " (only the first entry may lack FUNC:)");
    }
    const bool exclude = !list.empty() && list.front() == '^';
    if (exclude) list.remove_prefix(1);
    std::uint8_t bits = 0;
    for (std::string_view name : split(list, ',')) {
      const std::string n = lower(name);
      if (n == "ring") {
        bits |= algo_bit(NcclAlgo::ring);
      } else if (n == "tree") {
        bits |= algo_bit(NcclAlgo::tree);
      } else if (n == "collnet") {
        bits |= kCollnetBits;
      } else if (n == "collnetdirect" || n == "collnet_direct") {
        bits |= algo_bit(NcclAlgo::collnet_direct);
      } else if (n == "collnetchain" || n == "collnet_chain") {
        bits |= algo_bit(NcclAlgo::collnet_chain);
      } else if (n == "nvls") {
        bits |= algo_bit(NcclAlgo::nvls);
      } else if (n == "nvlstree" || n == "nvls_tree") {
        bits |= algo_bit(NcclAlgo::nvls_tree);
      } else if (n == "pat") {
        return refuse(
            "an algorithm commscope models (PAT, NCCL's one-GPU-per-node AllGather "
            "and ReduceScatter, is not modelled)");
      } else {
        return refuse(kNames);
      }
    }
    if (!exclude) named |= bits;
    for (int f = 0; f < 5; ++f)
      if (function < 0 || function == f)
        mask[f] = exclude ? static_cast<std::uint8_t>(kAllAlgos & ~bits) : bits;
  }
  if ((named & kNvlsBits) && !t.nvls)
    return refuse(fmt::format(
        "algorithms system '{}' has: NVLS and NVLSTree need NVLink SHARP (an NVSwitch-3 node: "
        "H100/H200 DGX, GB200 NVL72; the system preset's nccl.nvls)",
        system_name));
  if ((named & kCollnetBits) && !t.collnet)
    return refuse(fmt::format(
        "algorithms system '{}' has: CollNet needs IB SHARP in the fabric (the system preset's "
        "nccl.collnet)",
        system_name));
  const bool collnet_enable = (named & kCollnetBits) != 0;
  // What the system can run at all, and what NCCL runs each function with (tuning.cc).
  const std::uint8_t capable =
      static_cast<std::uint8_t>(algo_bit(NcclAlgo::ring) | algo_bit(NcclAlgo::tree) |
                                (t.nvls ? kNvlsBits : 0) | (collnet_enable ? kCollnetBits : 0));
  static constexpr std::uint8_t kSupported[5] = {
      kAllAlgos,
      algo_bit(NcclAlgo::ring) | algo_bit(NcclAlgo::nvls) | algo_bit(NcclAlgo::collnet_direct),
      algo_bit(NcclAlgo::ring) | algo_bit(NcclAlgo::nvls) | algo_bit(NcclAlgo::collnet_direct),
      algo_bit(NcclAlgo::ring), algo_bit(NcclAlgo::ring)};
  static constexpr std::string_view kSupportedNames[5] = {
      "Ring, Tree, CollNetDirect, CollNetChain, NVLS or NVLSTree", "Ring, NVLS or CollNetDirect",
      "Ring, NVLS or CollNetDirect", "Ring", "Ring"};
  // A function named with FUNC: must keep an algorithm that can run it; so must AllReduce
  // (every training step has one). Other functions without one are priced as Ring (the cost
  // path says so), where NCCL would stop at the first such call.
  for (int f = 0; f < 5; ++f)
    if ((named_function[f] || f == 0) && !(mask[f] & capable & kSupported[f]))
      return refuse(fmt::format("an algorithm left for {} on system '{}' (NCCL runs it with {})",
                                kFunctionNames[f], system_name, kSupportedNames[f]));
  std::copy(mask, mask + 5, t.algorithms);
  t.collnet_enable = collnet_enable;
  return {};
}

}  // namespace commscope
