// Predicted vs measured iteration times, error metrics, and the fit of a system's cost-model
// efficiencies to measured runs (Nelder-Mead on the mean absolute log error).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commscope/calib/measured.h"
#include "commscope/workload/workload.h"

namespace commscope {

// A measured run with its workload built once (calibration changes costs, not ops).
struct PreparedRun {
  std::string source;
  int line = 0;
  int index = 0;                 // 0-based data row in its file
  std::string id, split, group;  // the validation corpus's (MeasuredRun), else empty
  std::string assumed;           // the corpus's `assumed` column (MeasuredRun), else empty
  Workload workload;
  double measured_s = 0;
};

// Builds the workloads; runs whose plan is invalid are reported in `skipped`.
std::vector<PreparedRun> prepare_runs(const std::vector<MeasuredRun>& runs,
                                      std::vector<std::string>& skipped);

// Simulated iteration time of a run under a calibration.
double predicted_time(const PreparedRun& run, const Calibration& cal);

struct ErrorSummary {
  std::size_t rows = 0;
  double mape = 0;    // mean |predicted/measured - 1|
  double median = 0;  // median of the same
  double max = 0;
  double bias = 0;  // mean of predicted/measured - 1
};
ErrorSummary summarize(const std::vector<double>& signed_errors);

// Which rows a split keeps: "all", "even" (rows 0, 2, 4, ... of each file), "odd", or for
// the validation corpus "fit" or "heldout" (its `split` column).
bool in_split(const PreparedRun& r, const std::string& split);

// Fits gemm_efficiency, gemm_half_flops, attention_efficiency, memory_efficiency,
// kernel_overhead and intra_node_efficiency to the runs, starting from `start`. `progress`
// is called after each improvement with the evaluation count and the objective.
Calibration fit_calibration(const std::vector<const PreparedRun*>& runs, Calibration start,
                            int max_evaluations,
                            const std::function<void(int, double)>& progress = {});

// Bounds of the compute-only fit (issue 15). Efficiencies are physical fractions of the
// datasheet peak / HBM bandwidth, at most 0.9; the per-kernel overhead stays within the range of
// measured CUDA launch + tail overheads (1-10 us); the GEMM curve's half-point and steepness stay
// within the ranges the A100 fits landed in.
struct ComputeFitBounds {
  double efficiency_min = 0.05;
  double efficiency_max = 0.9;
  double half_flops_min = 1e7;
  double half_flops_max = 1e11;
  double kernel_overhead_min_s = 1e-6;
  double kernel_overhead_max_s = 10e-6;
  double steepness_min = 0.25;
  double steepness_max = 2.0;
};

// Fits ONLY the compute terms (gemm_efficiency, gemm_half_flops, gemm_steepness,
// attention_efficiency, memory_efficiency, kernel_overhead) within `bounds`; the network
// (intra_node_efficiency, intra_node_latency) and host overheads (iteration, micro-batch) keep
// their values from `start`. Deterministic: the same runs and start give the same result.
Calibration fit_compute_calibration(const std::vector<const PreparedRun*>& runs, Calibration start,
                                    int max_evaluations, const ComputeFitBounds& bounds = {},
                                    const std::function<void(int, double)>& progress = {});

// A system JSON with the fitted calibration in its "calibration" object (the units of the
// system files: GFLOP/s, us, ms) and `note` as its only "calibration fitted by" source.
nlohmann::json with_calibration(nlohmann::json system, const Calibration& c,
                                const std::string& note);

}  // namespace commscope
