// Validation and fitting.
#include "commscope/calib/validate.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>

#include <fmt/format.h>

#include "commscope/sim/simulator.h"

namespace commscope {

std::int64_t workload_ops(const Workload& w) {
  std::int64_t n = 0;
  for (const Role& r : w.roles) {
    n += static_cast<std::int64_t>(r.step.size());
    for (const Chunk& c : r.chunks)
      n += static_cast<std::int64_t>(c.forward.size() + c.backward.size() + c.forward_first.size());
  }
  return n;
}

Result<std::vector<PreparedRun>> prepare_runs(const std::vector<MeasuredRun>& runs,
                                              std::vector<std::string>& skipped,
                                              std::int64_t max_ops) {
  std::vector<PreparedRun> out;
  std::map<std::string, int> index;
  std::int64_t ops = 0;
  for (const auto& r : runs) {
    int i = index[r.source]++;
    auto sc = resolve_run(r);
    if (!sc) {
      skipped.push_back(r.source + ": line " + std::to_string(r.line) + ": " + sc.error().message);
      continue;
    }
    PreparedRun p;
    p.source = r.source;
    p.line = r.line;
    p.index = i;
    p.id = r.id;
    p.split = r.split;
    p.group = r.group;
    p.assumed = r.assumed;
    p.unmodelled = r.unmodelled;
    p.workload = build_workload(*sc);
    ops += workload_ops(p.workload);
    if (ops > max_ops)
      return Error{fmt::format(
          "{}: line {}: expected measured runs whose workloads hold at most {} ops in all "
          "(commscope's limit, docs/limits.md: each run's is kept), got {} with this row, after "
          "{} runs; validate fewer rows at once",
          r.source, r.line, max_ops, ops, out.size())};
    p.measured_s = r.measured_s;
    p.measured_memory_gib = r.measured_memory_gib;
    p.out_of_memory = r.out_of_memory;
    out.push_back(std::move(p));
  }
  return out;
}

double predicted_time(const PreparedRun& run, const Calibration& cal) {
  SimOptions o;
  o.calibration = &cal;
  return simulate(run.workload, o).iteration_time;
}

ErrorSummary summarize(const std::vector<double>& e) {
  ErrorSummary s;
  s.rows = e.size();
  if (e.empty()) return s;
  std::vector<double> a(e.size());
  std::transform(e.begin(), e.end(), a.begin(), [](double x) { return std::fabs(x); });
  s.mape = std::accumulate(a.begin(), a.end(), 0.0) / a.size();
  s.bias = std::accumulate(e.begin(), e.end(), 0.0) / e.size();
  s.max = *std::max_element(a.begin(), a.end());
  std::sort(a.begin(), a.end());
  s.median = a.size() % 2 ? a[a.size() / 2] : 0.5 * (a[a.size() / 2 - 1] + a[a.size() / 2]);
  return s;
}

bool in_split(const PreparedRun& r, const std::string& split) {
  if (split == "even") return r.index % 2 == 0;
  if (split == "odd") return r.index % 2 == 1;
  if (split == "fit" || split == "heldout") return r.split == split;
  return true;
}

namespace {
constexpr int kParams = 10;
using Vec = std::array<double, kParams>;

double logistic(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}
double logit(double p) {
  return std::log(p / (1.0 - p));
}

// Unconstrained coordinates: efficiencies through a logistic, sizes and times through exp,
// clamped to the ranges a system file accepts (system.cpp), so that the preset written loads.
Calibration decode(const Vec& x, Calibration c) {
  c.gemm_efficiency = logistic(x[0]);
  c.gemm_half_flops = std::min(std::exp(x[1]), 1e18);
  c.attention_efficiency = logistic(x[2]);
  c.memory_efficiency = logistic(x[3]);
  c.kernel_overhead = Seconds(std::min(std::exp(x[4]), 1.0));
  c.intra_node_efficiency = logistic(x[5]);
  c.iteration_overhead = Seconds(std::min(std::exp(x[6]), 1e3));
  c.microbatch_overhead = Seconds(std::min(std::exp(x[7]), 1e3));
  c.intra_node_latency = Seconds(std::min(std::exp(x[8]), 1.0));
  c.gemm_steepness = std::clamp(std::exp(x[9]), 0.01, 16.0);
  return c;
}
Vec encode(const Calibration& c) {
  return {logit(std::clamp(c.gemm_efficiency, 1e-3, 0.999)),
          std::log(std::max(c.gemm_half_flops, 1.0)),
          logit(std::clamp(c.attention_efficiency, 1e-3, 0.999)),
          logit(std::clamp(c.memory_efficiency, 1e-3, 0.999)),
          std::log(std::max(c.kernel_overhead.value(), 1e-7)),
          logit(std::clamp(c.intra_node_efficiency, 1e-3, 0.999)),
          std::log(std::max(c.iteration_overhead.value(), 1e-4)),
          std::log(std::max(c.microbatch_overhead.value(), 1e-5)),
          std::log(std::max(c.intra_node_latency.value(), 1e-6)),
          std::log(c.gemm_steepness)};
}

// Nelder-Mead (Lagarias et al. 1998 coefficients: reflection 1, expansion 2, contraction 0.5,
// shrink 0.5) from x0, the initial simplex step(i) along each coordinate i; stops when the
// simplex's values span less than tol or `evaluations` (counted by the objective) reaches max.
// Returns the best vertex. Serves both the full and the compute-only calibration.
template <std::size_t N, class Step, class F>
std::array<double, N> nelder_mead(const std::array<double, N>& x0, Step step, double tol,
                                  int max_evaluations, const int& evaluations, F&& objective) {
  using V = std::array<double, N>;
  constexpr int n = static_cast<int>(N);
  std::array<V, N + 1> p;
  std::array<double, N + 1> f;
  p[0] = x0;
  for (int i = 0; i < n; ++i) {
    p[i + 1] = p[0];
    p[i + 1][i] += step(i);
  }
  for (int i = 0; i <= n; ++i) f[i] = objective(p[i]);
  while (evaluations < max_evaluations) {
    std::array<int, N + 1> idx;
    std::iota(idx.begin(), idx.end(), 0);
    std::sort(idx.begin(), idx.end(), [&](int a, int c) { return f[a] < f[c]; });
    auto points = p;
    auto values = f;
    for (int i = 0; i <= n; ++i) p[i] = points[idx[i]], f[i] = values[idx[i]];
    if (f[n] - f[0] < tol) break;
    V centroid{};
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < n; ++k) centroid[k] += p[i][k] / n;
    auto along = [&](double t) {
      V v;
      for (int k = 0; k < n; ++k) v[k] = centroid[k] + t * (p[n][k] - centroid[k]);
      return v;
    };
    V xr = along(-1.0);
    double fr = objective(xr);
    if (fr < f[0]) {
      V xe = along(-2.0);
      double fe = objective(xe);
      if (fe < fr)
        p[n] = xe, f[n] = fe;
      else
        p[n] = xr, f[n] = fr;
    } else if (fr < f[n - 1]) {
      p[n] = xr, f[n] = fr;
    } else {
      V xc = fr < f[n] ? along(-0.5) : along(0.5);
      double fc = objective(xc);
      if (fc < std::min(fr, f[n])) {
        p[n] = xc, f[n] = fc;
      } else {
        for (int i = 1; i <= n; ++i) {
          for (int k = 0; k < n; ++k) p[i][k] = p[0][k] + 0.5 * (p[i][k] - p[0][k]);
          f[i] = objective(p[i]);
        }
      }
    }
  }
  return p[static_cast<std::size_t>(std::min_element(f.begin(), f.end()) - f.begin())];
}
}  // namespace

namespace {
// The fits' objective: the mean |log(predicted / measured)| of a calibration over the runs, each
// file weighing the same, so that 109 multi-node runs are not drowned by 1,440 single-node ones.
class MeanLogError {
 public:
  explicit MeanLogError(const std::vector<const PreparedRun*>& runs) : runs_(runs) {
    for (const auto* r : runs) per_file_[r->source]++;
  }
  double operator()(const Calibration& c) const {
    double s = 0;
    for (const auto* r : runs_)
      s += std::fabs(std::log(predicted_time(*r, c) / r->measured_s)) /
           static_cast<double>(per_file_.at(r->source));
    return s / static_cast<double>(std::max<std::size_t>(per_file_.size(), 1));
  }

 private:
  const std::vector<const PreparedRun*>& runs_;
  std::map<std::string, std::size_t> per_file_;
};
}  // namespace

Calibration fit_calibration(const std::vector<const PreparedRun*>& runs, Calibration start,
                            int max_evaluations, const std::function<void(int, double)>& progress) {
  int evaluations = 0;
  double best_seen = 1e300;
  const MeanLogError score(runs);
  auto objective = [&](const Vec& x) {
    ++evaluations;
    double f = score(decode(x, start));
    if (f < best_seen) {
      best_seen = f;
      if (progress) progress(evaluations, f);
    }
    return f;
  };
  auto step = [](int i) { return i == 1 ? 1.5 : 0.7; };
  return decode(nelder_mead(encode(start), step, 1e-6, max_evaluations, evaluations, objective),
                start);
}

// --- compute-only, bounded fit (issue 15) ---
namespace {
constexpr int kComputeParams = 6;
using CVec = std::array<double, kComputeParams>;
double bounded(double x, double lo, double hi) {
  return lo + (hi - lo) * logistic(x);
}
double unbounded(double v, double lo, double hi) {
  const double p = std::clamp((v - lo) / (hi - lo), 1e-3, 0.999);
  return logit(p);
}
Calibration decode_compute(const CVec& x, Calibration c, const ComputeFitBounds& b) {
  c.gemm_efficiency = bounded(x[0], b.efficiency_min, b.efficiency_max);
  c.gemm_half_flops =
      std::exp(bounded(x[1], std::log(b.half_flops_min), std::log(b.half_flops_max)));
  c.attention_efficiency = bounded(x[2], b.efficiency_min, b.efficiency_max);
  c.memory_efficiency = bounded(x[3], b.efficiency_min, b.efficiency_max);
  c.kernel_overhead = Seconds(bounded(x[4], b.kernel_overhead_min_s, b.kernel_overhead_max_s));
  c.gemm_steepness = std::exp(bounded(x[5], std::log(b.steepness_min), std::log(b.steepness_max)));
  return c;
}
CVec encode_compute(const Calibration& c, const ComputeFitBounds& b) {
  return {
      unbounded(c.gemm_efficiency, b.efficiency_min, b.efficiency_max),
      unbounded(std::log(std::max(c.gemm_half_flops, 1.0)), std::log(b.half_flops_min),
                std::log(b.half_flops_max)),
      unbounded(c.attention_efficiency, b.efficiency_min, b.efficiency_max),
      unbounded(c.memory_efficiency, b.efficiency_min, b.efficiency_max),
      unbounded(c.kernel_overhead.value(), b.kernel_overhead_min_s, b.kernel_overhead_max_s),
      unbounded(std::log(c.gemm_steepness), std::log(b.steepness_min), std::log(b.steepness_max))};
}
}  // namespace

int fitted_terms(bool compute_only, bool hold_gemm_shape) {
  return !compute_only ? kParams : hold_gemm_shape ? 4 : kComputeParams;
}

Calibration fit_compute_calibration(const std::vector<const PreparedRun*>& runs, Calibration start,
                                    int max_evaluations, const ComputeFitBounds& b,
                                    const std::function<void(int, double)>& progress) {
  int evaluations = 0;
  double best_seen = 1e300;
  const MeanLogError score(runs);
  auto objective = [&](const CVec& x) {
    Calibration c = decode_compute(x, start, b);
    if (b.hold_gemm_shape)
      c.gemm_half_flops = start.gemm_half_flops, c.gemm_steepness = start.gemm_steepness;
    ++evaluations;
    double f = score(c);
    if (f < best_seen) {
      best_seen = f;
      if (progress) progress(evaluations, f);
    }
    return f;
  };
  if (b.hold_gemm_shape) {
    // The four free terms (0, 2, 3, 4); the shape's coordinates stay at start's. A
    // degenerate bound (min = max) would not do: its encoding divides by zero.
    const CVec x0 = encode_compute(start, b);
    auto full = [&](const std::array<double, 4>& y) {
      CVec x = x0;
      x[0] = y[0], x[2] = y[1], x[3] = y[2], x[4] = y[3];
      return x;
    };
    Calibration c =
        decode_compute(full(nelder_mead(
                           std::array<double, 4>{x0[0], x0[2], x0[3], x0[4]},
                           [](int) { return 0.7; }, 1e-7, max_evaluations, evaluations,
                           [&](const std::array<double, 4>& y) { return objective(full(y)); })),
                       start, b);
    c.gemm_half_flops = start.gemm_half_flops;  // exactly, not through the encoding
    c.gemm_steepness = start.gemm_steepness;
    return score(c) <= score(start) ? c : start;
  }
  const Calibration c = decode_compute(nelder_mead(
                                           encode_compute(start, b), [](int) { return 0.7; }, 1e-7,
                                           max_evaluations, evaluations, objective),
                                       start, b);
  // Never worse than the start: a start outside the bounds is clamped into them where the
  // search begins, and the search may not find its way back (found by probing, 2026-11-30:
  // --start preset ended at 0.0576 from 0.0571).
  return score(c) <= score(start) ? c : start;
}

nlohmann::json with_calibration(nlohmann::json j, const Calibration& c, const std::string& note) {
  j["calibration"] = {{"gemm_efficiency", c.gemm_efficiency},
                      {"gemm_half_gflops", c.gemm_half_flops / 1e9},
                      {"gemm_steepness", c.gemm_steepness},
                      {"attention_efficiency", c.attention_efficiency},
                      {"memory_efficiency", c.memory_efficiency},
                      {"kernel_overhead_us", units::to_us(c.kernel_overhead)},
                      {"intra_node_efficiency", c.intra_node_efficiency},
                      {"intra_node_latency_us", units::to_us(c.intra_node_latency)},
                      {"iteration_overhead_ms", c.iteration_overhead.value() * 1e3},
                      {"microbatch_overhead_us", units::to_us(c.microbatch_overhead)}};
  if (c.flash_attention_efficiency > 0)
    j["calibration"]["flash_attention_efficiency"] = c.flash_attention_efficiency;
  auto& sources = j["sources"];
  if (!sources.is_array()) sources = nlohmann::json::array();
  // The old fit's notes go with it: "calibration fitted by ..." (this writer's), "calibration:
  // ..." (the shipped presets' spelling, kept until 2026-11-30 beside the new note), and the
  // measured FlashAttention figure's note where the figure is no longer in the calibration.
  auto superseded = [&](const std::string& t) {
    return t.rfind("calibration fitted by", 0) == 0 || t.rfind("calibration: ", 0) == 0 ||
           (c.flash_attention_efficiency <= 0 &&
            t.rfind("calibration.flash_attention_efficiency", 0) == 0);
  };
  nlohmann::json kept = nlohmann::json::array();
  for (const auto& s : sources)
    if (!(s.is_string() && superseded(s.get<std::string>()))) kept.push_back(s);
  kept.push_back(note);
  j["sources"] = kept;
  return j;
}

double predicted_time_with_host_overhead(const PreparedRun& run, double c, int nics_per_group) {
  Scenario sc = run.workload.scenario;
  sc.plan.zero3_host_s_per_rank_per_call = c;
  if (nics_per_group >= 0) sc.plan.zero3_nics_per_group = nics_per_group;
  return simulate(build_workload(sc), SimOptions{}).iteration_time;
}

Result<FrameworkOverheadFit> fit_framework_overhead(const std::vector<PreparedRun>& runs,
                                                    double max_s) {
  std::vector<const PreparedRun*> fit;
  std::vector<std::string> ids;
  for (const auto& r : runs) {
    const ParallelPlan& p = r.workload.scenario.plan;
    if (r.split != "fit" || p.framework != Framework::deepspeed || !p.zero3_per_param_calls)
      continue;
    fit.push_back(&r);
    ids.push_back(r.id);
  }
  if (fit.empty())
    return Error{
        "--fit-framework-overhead: expected fit rows predicted with a DeepSpeed release of "
        "per-parameter calls (framework 'deepspeed 0.3', split fit), got none"};
  if (!(max_s > 0) || !std::isfinite(max_s))
    return Error{fmt::format("max_s: expected a positive number of seconds, got {}", max_s)};
  std::optional<FrameworkOverheadFit> best_fit;
  for (int nics : {0, 1, 2, 4, 8}) {
    auto objective = [&](double c) {
      double sum = 0;
      for (const PreparedRun* r : fit)
        sum += std::fabs(std::log(predicted_time_with_host_overhead(*r, c, nics) / r->measured_s));
      return sum / static_cast<double>(fit.size());
    };
    // A grid, then golden-section search in the best cell's neighbours.
    constexpr int kGrid = 200;
    int best = 0;
    double best_f = objective(0);
    for (int i = 1; i <= kGrid; ++i) {
      const double f = objective(max_s * i / kGrid);
      if (f < best_f) best_f = f, best = i;
    }
    double lo = max_s * std::max(0, best - 1) / kGrid;
    double hi = max_s * std::min(kGrid, best + 1) / kGrid;
    const double g = (std::sqrt(5.0) - 1) / 2;
    double x1 = hi - g * (hi - lo), x2 = lo + g * (hi - lo);
    double f1 = objective(x1), f2 = objective(x2);
    while (hi - lo > 1e-12) {
      if (f1 <= f2) {
        hi = x2, x2 = x1, f2 = f1;
        x1 = hi - g * (hi - lo);
        f1 = objective(x1);
      } else {
        lo = x1, x1 = x2, f1 = f2;
        x2 = lo + g * (hi - lo);
        f2 = objective(x2);
      }
    }
    FrameworkOverheadFit f;
    f.nics_per_group = nics;
    f.host_s_per_rank_per_call = 0.5 * (lo + hi);
    f.objective = objective(f.host_s_per_rank_per_call);
    if (best_f <= f.objective) {  // the grid point (0 included) is at least as good: keep it
      f.host_s_per_rank_per_call = max_s * best / kGrid;
      f.objective = best_f;
    }
    f.by_nics.emplace_back(nics, f.objective);
    f.host_by_nics.push_back(f.host_s_per_rank_per_call);
    if (best_fit) {
      f.by_nics.insert(f.by_nics.begin(), best_fit->by_nics.begin(), best_fit->by_nics.end());
      f.host_by_nics.insert(f.host_by_nics.begin(), best_fit->host_by_nics.begin(),
                            best_fit->host_by_nics.end());
      if (f.objective >= best_fit->objective) {
        best_fit->by_nics = f.by_nics;
        best_fit->host_by_nics = f.host_by_nics;
        continue;
      }
    }
    best_fit = f;
  }
  best_fit->ids = ids;
  return *best_fit;
}

}  // namespace commscope
