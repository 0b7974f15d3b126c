// A system profile fitted on one traced run (calib/from_trace.h).
#include "commscope/calib/from_trace.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "commscope/calib/validate.h"
#include "commscope/cost/collective.h"
#include "commscope/cost/compute.h"
#include "commscope/sim/simulator.h"
#include "commscope/workload/workload.h"

namespace commscope {

namespace {

enum Cls { kGemm = 0, kAttention = 1, kElementwise = 2, kNone = 3 };
constexpr const char* kClassNames[] = {"gemm", "attention", "elementwise"};

Cls class_of(ComputeClass c) {
  if (c == ComputeClass::gemm) return kGemm;
  if (c == ComputeClass::attention) return kAttention;
  return kElementwise;
}

bool has(std::string_view s, std::string_view k) {
  return std::search(s.begin(), s.end(), k.begin(), k.end(), [](char a, char b) {
           return std::tolower(static_cast<unsigned char>(a)) == b;
         }) != s.end();
}

// The efficiency a class's fit sets.
double& field(Calibration& c, int cls) {
  return cls == kGemm        ? c.gemm_efficiency
         : cls == kAttention ? c.attention_efficiency
                             : c.memory_efficiency;
}

struct WeightedOp {
  const Op* op;
  double runs;  // per iteration, averaged over roles
};

double modelled(const std::vector<WeightedOp>& ops, const GpuSpec& gpu, const Calibration& cal) {
  double t = 0;
  for (const auto& w : ops) t += w.runs * compute_time(*w.op, gpu, cal).value();
  return t;
}

}  // namespace

std::string_view kernel_class(std::string_view n) {
  if (is_comm_kernel(n) || looks_like_comm_kernel(n)) return "comm";
  if (has(n, "flash") || has(n, "fmha") || has(n, "attention") || has(n, "attn") ||
      has(n, "sdpa") || has(n, "_mha"))
    return "attention";
  // nvjet: cuBLAS 12.x's own Hopper GEMM kernels (nvjet_sm90_tst_192x192_64x3_..., most of a
  // PyTorch 2.x bf16 run's GEMMs on an H100, data/validation-gpu).
  if (has(n, "gemm") || has(n, "cutlass") || has(n, "xmma") || has(n, "cublas") ||
      has(n, "nvjet") || has(n, "matmul") || has(n, "16816") || has(n, "1688"))
    return "gemm";
  return "elementwise";
}

Result<TraceCalibration> calibrate_from_trace(const std::vector<TraceFile>& traces,
                                              const Scenario& sc) {
  TraceCalibration out;
  const Workload w = build_workload(sc);
  // The workload's ops per class, each with its runs per iteration averaged over the roles.
  std::vector<WeightedOp> ops[3];
  std::unordered_map<std::string, Cls> op_class;  // own traces: op name -> class
  const double roles = std::max<std::size_t>(1, w.roles.size());
  // Own traces without ProfilerStep windows (train --trace): iterations counted by the
  // optimizer step's ops, which run once per iteration.
  std::unordered_map<std::string, double> step_ops;  // name -> calls per iteration and role
  for (const auto& r : w.roles) {
    for (const auto& ch : r.chunks)
      for (const OpList* l : {&ch.forward, &ch.backward})
        for (const auto& op : l->ops())
          if (op.kind == OpKind::compute) {
            ops[class_of(op.compute)].push_back(
                {&op, static_cast<double>(
                          runs_per_iteration(op, w.microbatches, w.scenario.plan.pipeline_rounds)) /
                          roles});
            op_class.emplace(std::string(op.name), class_of(op.compute));
          }
    for (const auto& op : r.step.ops())
      if (op.kind == OpKind::compute) {
        ops[class_of(op.compute)].push_back({&op, 1.0 / roles});
        step_ops[std::string(op.name)] += 1.0 / roles;
        op_class.emplace(std::string(op.name), class_of(op.compute));
      }
  }

  // Traced time per class, per iteration and rank.
  double traced[3] = {0, 0, 0};
  std::size_t kernels[3] = {0, 0, 0};
  // (collective, group size) -> bytes -> (wire bytes, seconds)
  std::map<std::tuple<Collective, int, CommGroup>, std::map<double, std::pair<double, double>>>
      comm;
  int rank_files = 0, files = 0;
  double iteration_sum = 0;
  for (const auto& tf : traces) {
    const auto& tl = tf.timeline;
    std::vector<std::pair<double, double>> windows;
    for (const auto& s : tf.steps)
      if (s.on_gpu && s.end > s.start) windows.emplace_back(s.start, s.end);
    if (windows.empty())
      for (const auto& s : tf.steps)
        if (s.end > s.start) windows.emplace_back(s.start, s.end);
    auto inside = [&](const Event& e) {
      if (windows.empty()) return true;
      for (const auto& [a, b] : windows)
        if (e.start >= a && e.start < b) return true;
      return false;
    };
    std::set<std::int32_t> ranks;
    std::unordered_map<std::string, double> step_calls;
    double lo = INFINITY, hi = -INFINITY;
    double t[3] = {0, 0, 0};
    for (const auto& e : tl.events) {
      if (!inside(e)) continue;
      lo = std::min(lo, e.start - e.wait);
      hi = std::max(hi, e.end());
      if (e.kind == EventKind::compute) {
        Cls c = kNone;
        const std::string& n = tl.name(e);
        if (tf.own_format) {
          auto it = op_class.find(n);
          if (it == op_class.end()) {
            ++out.unmatched;
            continue;
          }
          c = it->second;
        } else {
          const auto k = kernel_class(n);
          c = k == "gemm" ? kGemm : k == "attention" ? kAttention : kElementwise;
        }
        t[c] += e.dur;
        ++kernels[c];
        if (tf.own_format && step_ops.count(n)) step_calls[n] += 1;
        ranks.insert(e.rank);
      } else if (e.kind == EventKind::comm && e.has_collective && e.bytes > 0 &&
                 e.group_size >= 2 && e.dur > 0) {
        auto& p = comm[{e.collective, e.group_size, e.group}][e.bytes];
        p.first += e.bytes * bus_factor(e.collective, e.group_size);
        p.second += e.dur;
      }
    }
    if (ranks.empty()) continue;
    int iters = windows.empty() ? 1 : static_cast<int>(windows.size());
    if (windows.empty() && !step_calls.empty()) {
      // The optimizer op seen most often, per rank, over its calls per iteration.
      double most = 0;
      for (const auto& [n, k] : step_calls)
        most = std::max(most, k / static_cast<double>(ranks.size()) / step_ops[n]);
      iters = std::max(1, static_cast<int>(std::lround(most)));
    }
    for (int c = 0; c < 3; ++c) traced[c] += t[c] / iters;
    rank_files += static_cast<int>(ranks.size());
    out.iterations = std::max(out.iterations, iters);
    double it_s = 0;
    if (windows.empty())
      it_s = (hi - lo) / iters;
    else
      for (const auto& [a, b] : windows) it_s += (b - a) / iters;
    iteration_sum += it_s;
    ++files;
  }
  if (rank_files == 0)
    return Error{"--from-trace: expected GPU compute kernels of the traced run, got none"};
  out.ranks = rank_files;
  for (double& x : traced) x /= rank_files;

  // Fit: element-wise first (its memory efficiency also bounds GEMMs by the roofline), then
  // GEMM and attention. Bisection on log efficiency: modelled time falls as efficiency rises.
  // A class faster than its model at efficiency 1 says the preset's peak (or memory bandwidth)
  // is below this machine's: a first pass with efficiencies up to 1000 finds by how much, the
  // peaks (bandwidth) are raised so that the fastest class runs at efficiency 1, and the second
  // pass fits within (0, 1].
  auto fit_all = [&](const GpuSpec& gpu, double hi_e, std::vector<ClassFit>& classes,
                     std::vector<std::string>& warnings) {
    Calibration cal = sc.system.calibration;
    for (int c : {kElementwise, kGemm, kAttention}) {
      ClassFit f;
      f.op_class = kClassNames[c];
      f.kernels = kernels[c];
      f.traced_s = traced[c];
      f.base_efficiency = field(cal, c);
      f.efficiency = f.base_efficiency;
      f.base_s = modelled(ops[c], gpu, cal);
      if (kernels[c] > 0 && !ops[c].empty() && traced[c] > 0) {
        Calibration k = cal;
        auto at = [&](double x) {
          field(k, c) = x;
          return modelled(ops[c], gpu, k);
        };
        const double lo_e = 1e-3;
        const double t_hi = at(hi_e), t_lo = at(lo_e);
        if (t_lo - t_hi <= 1e-9 * t_lo) {
          warnings.push_back(fmt::format(
              "{}: the modelled time does not depend on its efficiency (memory-bound or launch "
              "overhead only); kept the preset's {:.3f}",
              f.op_class, f.efficiency));
        } else if (traced[c] <= t_hi * (1 + 1e-6) && at(f.base_efficiency) <= t_hi * (1 + 1e-6)) {
          // Flat above some efficiency (memory-bound or launch overhead only): the trace says
          // only that the efficiency is at least that; the preset's is kept.
          warnings.push_back(fmt::format(
              "{}: the traced time is what the roofline's memory or launch bound gives at any "
              "efficiency from the preset's {:.3f} up: kept it (not identifiable from this trace)",
              f.op_class, f.base_efficiency));
        } else if (traced[c] <= t_hi) {
          f.efficiency = hi_e;
          f.fitted = true;
          if (traced[c] < t_hi * (1 - 1e-3))  // (equal: the peak was raised to this class)
            warnings.push_back(fmt::format(
                "{}: traced {:.3f} ms is at or below the model at efficiency 1 ({:.3f} ms): the "
                "trace may not be of this model and plan",
                f.op_class, traced[c] * 1e3, t_hi * 1e3));
        } else if (traced[c] >= t_lo) {
          f.efficiency = lo_e;
          f.fitted = true;
          warnings.push_back(fmt::format(
              "{}: traced {:.3f} ms needs an efficiency below {}: the trace may not be of this "
              "model and plan",
              f.op_class, traced[c] * 1e3, lo_e));
        } else {
          double a = std::log(lo_e), b = std::log(hi_e);
          for (int i = 0; i < 60; ++i) {
            const double m = 0.5 * (a + b);
            (at(std::exp(m)) > traced[c] ? a : b) = m;
          }
          f.efficiency = std::exp(0.5 * (a + b));
          f.fitted = true;
        }
        field(cal, c) = f.efficiency;
      }
      classes.push_back(f);
    }
    return cal;
  };
  GpuSpec gpu = sc.system.gpu;
  {
    std::vector<ClassFit> first;
    std::vector<std::string> ignored;
    fit_all(gpu, 1e3, first, ignored);
    double matmul = 1, memory = 1;
    for (const auto& f : first) {
      // At the first pass's bound the trace is below what any peak explains (launch overhead
      // alone, or another model): no scaling for it.
      if (!f.fitted || f.efficiency <= 1 || f.efficiency >= 1e3 * (1 - 1e-9)) continue;
      (f.op_class == "elementwise" ? memory : matmul) =
          std::max(f.op_class == "elementwise" ? memory : matmul, f.efficiency);
    }
    if (matmul > 1) {
      out.peak_scale = matmul;
      for (FlopsPerSecond* p : {&gpu.peak.fp64, &gpu.peak.fp32, &gpu.peak.tf32, &gpu.peak.fp16,
                                &gpu.peak.bf16, &gpu.peak.fp8})
        *p = FlopsPerSecond(p->value() * matmul);
      out.warnings.push_back(fmt::format(
          "the traced matrix products (GEMM or attention) run faster than the preset's peak "
          "allows: peaks raised x{:.3f}",
          matmul));
    }
    if (memory > 1) {
      out.bandwidth_scale = memory;
      gpu.memory_bandwidth = BytesPerSecond(gpu.memory_bandwidth.value() * memory);
      out.warnings.push_back(fmt::format(
          "the traced element-wise kernels run faster than the preset's memory bandwidth "
          "allows: bandwidth raised x{:.3f}",
          memory));
    }
  }
  Calibration cal = fit_all(gpu, 1.0, out.classes, out.warnings);
  // Where the traced attention kernels set the attention's efficiency, whichever backend a later
  // plan names is priced at it (the preset's separate FlashAttention figure no longer applies);
  // where the preset's was kept (not identifiable from the trace), so is its FlashAttention one.
  for (const auto& f : out.classes)
    if (f.op_class == kClassNames[kAttention] && f.efficiency != f.base_efficiency)
      cal.flash_attention_efficiency = 0;
  for (const auto& f : out.classes)
    if (f.kernels == 0 && f.base_s > 0)
      out.warnings.push_back(fmt::format(
          "{}: the workload has {:.3f} ms of it per iteration and rank, the trace no kernel: the "
          "trace may not be of this model and plan (kept the preset's efficiency)",
          f.op_class, f.base_s * 1e3));
  // The printed order: gemm, attention, elementwise.
  std::rotate(out.classes.begin(), out.classes.begin() + 1, out.classes.end());

  // Curves: achieved bus bandwidth per collective and group, one point per size. The group's
  // nodes are where the model places it (cost/collective.h); an inter-node curve is read as
  // shared by the groups that use a node's NICs at once, so the traced rate is scaled by them.
  std::map<std::tuple<Collective, int, int>, std::map<double, std::pair<double, double>>> merged;
  for (const auto& [key, sizes] : comm) {
    const auto [coll, ranks, group] = key;
    GroupPlacement g = place_group(sc, group);
    if (g.size != ranks) {  // a sub-group (FSDP's hybrid shard): within a node when it fits
      g.size = ranks;
      g.nodes = ranks <= sc.gpus_per_node ? 1 : std::min(sc.nodes, ranks);
      g.concurrent = 1;
    }
    const double share = g.nodes > 1 ? std::max(1, g.concurrent) : 1;
    auto& m = merged[{coll, ranks, std::max(1, g.nodes)}];
    for (const auto& [bytes, p] : sizes) {
      m[bytes].first += p.first * share;
      m[bytes].second += p.second;
    }
  }
  for (const auto& [key, sizes] : merged) {
    if (out.curves.size() >= kMaxCurves) break;
    BusBwCurve cv;
    std::tie(cv.collective, cv.ranks, cv.nodes) = key;
    cv.scope = cv.nodes > 1 ? CurveScope::inter_node : CurveScope::intra_node;
    for (const auto& [bytes, p] : sizes) {
      if (cv.points.size() >= kMaxCurvePoints) break;
      if (p.second > 0 && p.first > 0)
        cv.points.push_back({bytes, BytesPerSecond(p.first / p.second)});
    }
    if (!cv.points.empty()) out.curves.push_back(std::move(cv));
  }

  out.system = sc.system;
  out.system.gpu = gpu;
  out.system.calibration = cal;
  out.network = sc.network;
  if (!out.curves.empty()) out.network.curves = out.curves;

  // Predict the traced run with the fitted profile.
  Scenario fitted = sc;
  fitted.system = out.system;
  fitted.network = out.network;
  out.predicted_iteration_s = simulate(build_workload(fitted)).iteration_time;
  out.traced_iteration_s = files > 0 ? iteration_sum / files : 0;
  out.error = out.traced_iteration_s > 0
                  ? (out.predicted_iteration_s - out.traced_iteration_s) / out.traced_iteration_s
                  : 0;
  return out;
}

nlohmann::json trace_calibrated_system_json(nlohmann::json raw, const TraceCalibration& c,
                                            const std::string& note) {
  nlohmann::json j = with_calibration(std::move(raw), c.system.calibration, note);
  if (j.contains("gpu") && j["gpu"].is_object()) {
    auto& g = j["gpu"];
    if (c.peak_scale != 1 && g.contains("peak_tflops") && g["peak_tflops"].is_object())
      for (auto& [k, v] : g["peak_tflops"].items())
        if (v.is_number()) v = v.get<double>() * c.peak_scale;
    if (c.bandwidth_scale != 1 && g.contains("memory_bandwidth_gbs") &&
        g["memory_bandwidth_gbs"].is_number())
      g["memory_bandwidth_gbs"] = g["memory_bandwidth_gbs"].get<double>() * c.bandwidth_scale;
  }
  return j;
}

std::string render_trace_calibration(const TraceCalibration& c) {
  std::string s = fmt::format("{:<12} {:>8} {:>14} {:>14} {:>10} {:>10}\n", "class", "kernels",
                              "traced_ms", "model_ms", "preset_eff", "fitted_eff");
  for (const auto& f : c.classes)
    s += fmt::format("{:<12} {:>8} {:>14.4f} {:>14.4f} {:>10.4f} {:>10}\n", f.op_class, f.kernels,
                     f.traced_s * 1e3, f.base_s * 1e3, f.base_efficiency,
                     f.fitted ? fmt::format("{:.4f}", f.efficiency) : std::string("-"));
  s += fmt::format("(per iteration and rank; {} iteration(s), {} rank(s)", c.iterations, c.ranks);
  if (c.unmatched) s += fmt::format("; {} kernels matched no op of the workload", c.unmatched);
  s += ")\n";
  if (!c.curves.empty()) {
    s += fmt::format("\n{:<16} {:>6} {:>6} {:>14} {:>12}\n", "collective", "ranks", "nodes",
                     "size_B", "busbw_GB/s");
    for (const auto& cv : c.curves)
      for (const auto& p : cv.points)
        s += fmt::format("{:<16} {:>6} {:>6} {:>14.0f} {:>12.4g}\n", to_string(cv.collective),
                         cv.ranks, cv.nodes, p.bytes, p.busbw.value() / 1e9);
  }
  s += fmt::format("\ntraced iteration    {:.6f} s\npredicted iteration {:.6f} s\nerror {:+.2f}%\n",
                   c.traced_iteration_s, c.predicted_iteration_s,
                   std::abs(c.error) < 5e-5 ? 0.0 : c.error * 100);
  return s;
}

}  // namespace commscope
