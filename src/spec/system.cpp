// System and network-protocol presets. Units in the files are named in the field (…_gbs is
// GB/s, …_gbps is Gbit/s, …_gib is GiB, …_tflops is TFLOP/s, …_us is microseconds) and
// converted here, once.
#include "commscope/spec/system.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commscope/spec/preset.h"
#include "commscope/util/json_fields.h"

namespace commscope {

namespace {
constexpr EnumName<IntraNodeTopology> kTopoNames[] = {
    {IntraNodeTopology::nvswitch, "nvswitch"},
    {IntraNodeTopology::nvlink_mesh, "nvlink-mesh"},
    {IntraNodeTopology::pcie, "pcie"}};
constexpr EnumName<Transport> kTransportNames[] = {{Transport::tcp, "tcp"},
                                                   {Transport::ipoib, "ipoib"},
                                                   {Transport::rdma, "rdma"},
                                                   {Transport::roce, "roce"},
                                                   {Transport::slingshot, "slingshot"}};

// Reads a required positive number.
double positive(FieldReader& r, std::string_view key, bool required = true) {
  double v = 0;
  bool present = r.read(key, v);
  if (!present && required) r.fail(key, "a positive number", "nothing (missing)");
  if (present && !(v > 0)) r.fail(key, "a positive number", fmt::format("{}", v));
  return v;
}
}  // namespace

std::string_view to_string(IntraNodeTopology t) {
  return enum_to_name(kTopoNames, t);
}
std::string_view to_string(Transport t) {
  return enum_to_name(kTransportNames, t);
}

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

Result<SystemSpec> system_from_json(const nlohmann::json& j, const std::string& where) {
  SystemSpec s;
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

  auto nic = r.object("nics");
  nic.require("count", s.nics.count);
  nic.check(s.nics.count > 0, "count", "a positive integer", std::to_string(s.nics.count));
  s.nics.line_rate = units::gbit_per_s(positive(nic, "line_rate_gbps"));
  nic.read("model", s.nics.model);

  auto cal = r.object("calibration");
  if (r.has("calibration")) {
    Calibration& c = s.calibration;
    auto fraction = [&](std::string_view key, double& out) {
      if (cal.read(key, out))
        cal.check(out > 0 && out <= 1, key, "a fraction in (0, 1]", fmt::format("{}", out));
    };
    fraction("gemm_efficiency", c.gemm_efficiency);
    fraction("attention_efficiency", c.attention_efficiency);
    fraction("memory_efficiency", c.memory_efficiency);
    fraction("intra_node_efficiency", c.intra_node_efficiency);
    double v = 0;
    if (cal.read("gemm_half_gflops", v)) c.gemm_half_flops = v * 1e9;
    if (cal.read("gemm_steepness", v)) c.gemm_steepness = v;
    if (cal.read("kernel_overhead_us", v)) c.kernel_overhead = units::us(v);
    if (cal.read("intra_node_latency_us", v)) c.intra_node_latency = units::us(v);
    if (cal.read("iteration_overhead_ms", v)) c.iteration_overhead = Seconds(v * 1e-3);
    if (cal.read("microbatch_overhead_us", v)) c.microbatch_overhead = units::us(v);
    cal.check(c.gemm_half_flops >= 0 && c.gemm_steepness > 0 && c.kernel_overhead.value() >= 0 &&
                  c.intra_node_latency.value() >= 0,
              "gemm_half_gflops", "non-negative values", "a negative one");
  }
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
  FieldReader r(j, where);
  r.require("name", p.name);
  std::string transport;
  r.require("transport", transport);
  if (auto t = enum_from_name(kTransportNames, transport))
    p.transport = *t;
  else if (!transport.empty())
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
  if (s.max_nodes > 0) j["max_nodes"] = s.max_nodes;
  if (!s.sources.empty()) j["sources"] = s.sources;
  return j;
}

nlohmann::json to_json(const NetworkProtocol& p) {
  return {{"name", p.name},
          {"transport", to_string(p.transport)},
          {"line_rate_gbps", units::for_file(units::to_gbit_per_s(p.line_rate))},
          {"achievable_gbps", units::for_file(units::to_gbit_per_s(p.achievable))},
          {"latency_us", units::for_file(units::to_us(p.latency))},
          {"sources", p.sources}};
}

}  // namespace commscope
