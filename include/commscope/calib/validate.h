// Predicted vs measured iteration times, error metrics, and the fit of a system's cost-model
// efficiencies to measured runs (Nelder-Mead on the mean absolute log error).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "commscope/calib/measured.h"
#include "commscope/spec/limits.h"
#include "commscope/workload/workload.h"

namespace commscope {

// A measured run with its workload built once (calibration changes costs, not ops).
struct PreparedRun {
  std::string source;
  int line = 0;
  int index = 0;                 // 0-based data row in its file
  std::string id, split, group;  // the validation corpus's (MeasuredRun), else empty
  std::string assumed;           // the corpus's `assumed` column (MeasuredRun), else empty
  std::string unmodelled;        // the corpus's `unmodelled` column: never fitted on if set
  Workload workload;
  double measured_s = 0;
  double measured_memory_gib = 0;  // MeasuredRun's, 0 when not measured
  bool out_of_memory = false;      // MeasuredRun's: no time, only a memory verdict to check
};

// Builds the workloads; runs whose plan is invalid are reported in `skipped`. The workloads
// are kept, so their ops are bounded in all (limits::kMaxPreparedOps): runs beyond that are
// an error naming the row, not gigabytes (175 KB a vTrain row).
Result<std::vector<PreparedRun>> prepare_runs(const std::vector<MeasuredRun>& runs,
                                              std::vector<std::string>& skipped,
                                              std::int64_t max_ops = limits::kMaxPreparedOps);
// The ops of a workload's lists (chunks' forward, backward, first forward; roles' step).
std::int64_t workload_ops(const Workload& w);

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

// How many terms a fit adjusts: fit_calibration's, or fit_compute_calibration's (fewer with the
// GEMM curve's shape held). Fewer rows than terms leave the fit underdetermined.
int fitted_terms(bool compute_only, bool hold_gemm_shape);

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
  // Hold the GEMM curve's shape (gemm_half_flops and gemm_steepness) at `start`'s and fit the
  // other four terms (`calibrate --hold-gemm-shape`), where the fit rows do not determine how
  // small GEMMs slow down (docs/cost-model.md, "Calibration parameters").
  bool hold_gemm_shape = false;
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

// DeepSpeed 0.3-0.5's two calibratable terms (presets/frameworks/deepspeed.json; docs/
// validate.md, "ZeRO-3 at scale"): the host seconds per rank per collective call and the NICs
// of a node one collective spreads over (0: the system's; tried 0, 1, 2, 4, 8), fitted on the
// validation corpus's FIT rows alone: the rows whose split is "fit" and whose plan replays a
// DeepSpeed release with per-parameter calls. Each is rebuilt with trial values and simulated;
// the values minimise their mean |log(predicted / measured)|: for each NIC count a grid of 200
// steps over [0, max_s] then golden-section search to 1e-12 s; the best NIC count wins (the
// smaller on a tie). Held-out rows never enter (nothing of theirs is read). Error when no row
// qualifies.
struct FrameworkOverheadFit {
  double host_s_per_rank_per_call = 0;
  int nics_per_group = 0;
  double objective = 0;                         // mean |log(predicted/measured)| at the values
  std::vector<std::pair<int, double>> by_nics;  // and its best host cost:
  std::vector<double> host_by_nics;             // each NIC count's best objective
  std::vector<std::string> ids;                 // the fit rows used, in file order
};
Result<FrameworkOverheadFit> fit_framework_overhead(const std::vector<PreparedRun>& runs,
                                                    double max_s = 1e-4);
// A run's iteration time with DeepSpeed's host seconds per rank per call set to `c` and, when
// nics_per_group >= 0, its NICs per group set to that.
double predicted_time_with_host_overhead(const PreparedRun& run, double c, int nics_per_group = -1);

}  // namespace commscope
