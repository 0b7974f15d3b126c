// The compute calibration fitted to kernel timings (compute_fit.h).
#include "commscope/calib/compute_fit.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commscope/cost/compute.h"
#include "commscope/spec/scenario.h"
#include "commscope/workload/workload.h"

namespace commscope {

nlohmann::json to_json(const ComputeMeasurement& m) {
  nlohmann::json k = nlohmann::json::array();
  for (const auto& t : m.kernels)
    k.push_back({{"name", t.name},
                 {"backward", t.backward},
                 {"m", t.m},
                 {"n", t.n},
                 {"k", t.k},
                 {"calls", t.calls},
                 {"flops", t.flops},
                 {"seconds", t.seconds}});
  return {{"concurrency", m.concurrency},
          {"batch", m.batch},
          {"forward_backward_s", m.forward_backward_s},
          {"optimizer_s", m.optimizer_s},
          {"parameters", m.parameters},
          {"kernels", k}};
}

Result<ComputeMeasurement> compute_measurement_from_json(const nlohmann::json& j,
                                                         const std::string& where) {
  try {
    ComputeMeasurement m;
    m.concurrency = j.at("concurrency").get<int>();
    m.batch = j.at("batch").get<int>();
    m.forward_backward_s = j.at("forward_backward_s").get<double>();
    m.optimizer_s = j.at("optimizer_s").get<double>();
    m.parameters = j.at("parameters").get<std::int64_t>();
    for (const auto& k : j.at("kernels")) {
      KernelTiming t;
      t.name = k.at("name").get<std::string>();
      t.backward = k.at("backward").get<bool>();
      t.m = k.at("m").get<std::int64_t>();
      t.n = k.at("n").get<std::int64_t>();
      t.k = k.at("k").get<std::int64_t>();
      t.calls = k.at("calls").get<int>();
      t.flops = k.at("flops").get<double>();
      t.seconds = k.at("seconds").get<double>();
      if (!(t.seconds >= 0) || !(t.flops >= 0) || t.calls < 0)
        return Error{fmt::format("{}: kernels: expected non-negative times and FLOPs", where)};
      m.kernels.push_back(std::move(t));
    }
    if (m.batch < 1 || !(m.forward_backward_s > 0) || !(m.optimizer_s >= 0))
      return Error{fmt::format("{}: expected a positive batch and times", where)};
    return m;
  } catch (const std::exception& e) {
    return Error{fmt::format("{}: not a compute measurement ({})", where, e.what())};
  }
}

namespace {

bool is_attention_kernel(const KernelTiming& k) {
  return k.name == "attn_scores" || k.name == "attn_values";
}

enum class Kind { gemm, attention, other };

Kind kind_of(const Op& op) {
  if (op.compute == ComputeClass::gemm) return Kind::gemm;
  if (op.compute == ComputeClass::attention) return Kind::attention;
  return Kind::other;
}

// Bisection in log space on a parameter that makes `f` (decreasing in it) equal `target`.
double solve_log(const std::function<double(double)>& f, double target, double lo, double hi) {
  if (f(hi) >= target) return hi;
  if (f(lo) <= target) return lo;
  for (int i = 0; i < 80; ++i) {
    const double mid = std::sqrt(lo * hi);
    (f(mid) > target ? lo : hi) = mid;
  }
  return std::sqrt(lo * hi);
}

}  // namespace

Result<ComputeFit> fit_compute(const ComputeMeasurement& m, const ModelSpec& model,
                               SystemSpec base) {
  // Measured times per class.
  double meas[3] = {0, 0, m.optimizer_s};
  double kernels_sum = 0;
  ComputeFit fit;
  struct Pt {
    double flops, seconds;
  };
  std::vector<Pt> pts;
  for (const auto& k : m.kernels) {
    kernels_sum += k.seconds;
    if (k.m > 0) {
      meas[0] += k.seconds;
      if (k.seconds > 0 && k.calls > 0 && k.flops > 0) {
        pts.push_back({k.flops / k.calls, k.seconds / k.calls});
        fit.points.push_back({k.backward ? k.name + ".backward" : k.name, k.m, k.n, k.k,
                              k.flops / k.seconds / 1e12});
        fit.gemm_tflops = std::max(fit.gemm_tflops, fit.points.back().tflops);
      }
    } else if (is_attention_kernel(k)) {
      meas[1] += k.seconds;
    } else {
      meas[2] += k.seconds;
    }
  }
  if (pts.empty()) return Error{"compute measurement: no GEMM kernel was timed"};

  // The workload of one rank at this micro-batch, on the base system.
  SystemSpec sys = std::move(base);
  sys.node.gpus = std::max(sys.node.gpus, 1);
  const double peak = fit.gemm_tflops * 1.25 * 1e12;
  sys.gpu.peak.fp32 = sys.gpu.peak.tf32 = sys.gpu.peak.fp16 = sys.gpu.peak.bf16 =
      FlopsPerSecond(peak);
  PlanInput plan;
  plan.gpus = 1;
  plan.nodes = 1;
  plan.micro_batch = m.batch;
  plan.precision = Precision::fp32;
  plan.zero = 0;
  NetworkProtocol net;
  net.name = "none";
  net.transport = Transport::tcp;
  net.line_rate = net.achievable = units::gbit_per_s(1);
  auto sc = resolve_scenario(model, sys, net, plan);
  if (!sc.ok()) return sc.error();
  const Workload w = build_workload(*sc);
  std::vector<const Op*> ops;
  for (const Role& r : w.roles) {
    for (const Chunk& c : r.chunks) {
      for (const Op& op : c.forward.ops())
        if (op.kind == OpKind::compute) ops.push_back(&op);
      for (const Op& op : c.backward.ops())
        if (op.kind == OpKind::compute) ops.push_back(&op);
    }
    for (const Op& op : r.step.ops())
      if (op.kind == OpKind::compute) ops.push_back(&op);
    break;  // one rank
  }
  Calibration cal = sys.calibration;
  cal.kernel_overhead = Seconds(0);
  cal.memory_efficiency = 1;
  cal.gemm_steepness = 1;
  auto predicted = [&](Kind kind) {
    double t = 0;
    for (const Op* op : ops)
      if (kind_of(*op) == kind) t += compute_time(*op, sys.gpu, cal).value();
    return t;
  };

  // GEMM curve: least squares of log time over the kernels' per-call FLOPs.
  double best = 1e300, best_e = 0.5, best_half = 1e9;
  for (int ie = 1; ie <= 100; ++ie) {
    const double e = ie / 100.0;
    for (int ih = 0; ih <= 140; ++ih) {
      const double half = std::pow(10.0, 4 + ih * 0.05);
      double sse = 0;
      for (const Pt& p : pts) {
        const double t = p.flops / (peak * matmul_efficiency(p.flops, e, half, 1.0));
        const double d = std::log(t / p.seconds);
        sse += d * d;
      }
      if (sse < best) {
        best = sse;
        best_e = e;
        best_half = half;
      }
    }
  }
  cal.gemm_efficiency = best_e;
  cal.gemm_half_flops = best_half;
  cal.attention_efficiency = 0.5;
  for (int round = 0; round < 3; ++round) {
    // The workload's GEMMs (backward split as the workload splits it) to the kernels' total:
    // their time is inversely proportional to the maximum efficiency.
    const double pg = predicted(Kind::gemm);
    if (pg > 0 && meas[0] > 0) {
      double e = cal.gemm_efficiency * pg / meas[0];
      if (e > 1) {
        for (FlopsPerSecond* p :
             {&sys.gpu.peak.fp32, &sys.gpu.peak.tf32, &sys.gpu.peak.fp16, &sys.gpu.peak.bf16})
          *p = FlopsPerSecond(p->value() * e);
        e = 1;
      }
      cal.gemm_efficiency = std::clamp(e, 1e-4, 1.0);
    }
    if (meas[1] > 0)
      cal.attention_efficiency = solve_log(
          [&](double e) {
            Calibration c = cal;
            c.attention_efficiency = e;
            std::swap(c, cal);
            const double t = predicted(Kind::attention);
            std::swap(c, cal);
            return t;
          },
          meas[1], 1e-4, 1.0);
    if (meas[2] > 0) {
      const double bw = solve_log(
          [&](double b) {
            const auto old = sys.gpu.memory_bandwidth;
            sys.gpu.memory_bandwidth = BytesPerSecond(b);
            const double t = predicted(Kind::other);
            sys.gpu.memory_bandwidth = old;
            return t;
          },
          meas[2], 1e6, 1e14);
      sys.gpu.memory_bandwidth = BytesPerSecond(bw);
    }
  }
  cal.microbatch_overhead = Seconds(std::max(0.0, m.forward_backward_s - kernels_sum));
  sys.calibration = cal;
  sys.sources.push_back(fmt::format(
      "calibration fitted by commscope characterize to the CPU GPT's own kernels on this host "
      "({} process(es) measuring at once, micro-batch {}): GEMM peak 1.25 x the fastest GEMM "
      "({:.4f} TFLOP/s), efficiency curve by least squares over {} GEMM kernels, attention "
      "efficiency and memory bandwidth so that the workload's ops take the kernels' time, "
      "micro-batch overhead = forward+backward wall minus the kernels' sum",
      m.concurrency, m.batch, fit.gemm_tflops, pts.size()));
  fit.measured_compute_s = meas[0] + meas[1] + meas[2];
  fit.predicted_compute_s =
      predicted(Kind::gemm) + predicted(Kind::attention) + predicted(Kind::other);
  fit.system = std::move(sys);
  return fit;
}

}  // namespace commscope
