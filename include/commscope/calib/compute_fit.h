// The compute calibration of `commscope characterize` (step 2): the trainer's kernels, timed on
// the model's own shapes (gpt/measure.h measures them), turned into a system preset's peak and
// calibration, so that `predict` prices the same model's ops as this host runs them. Fitted on
// kernel timings only, never on training runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "commscope/spec/model.h"
#include "commscope/spec/system.h"
#include "commscope/util/result.h"

namespace commscope {

// One kernel of the CPU GPT (gpt.h: "qkv", "softmax", ...; forward or backward), per
// micro-batch over all layers.
struct KernelTiming {
  std::string name;
  bool backward = false;
  std::int64_t m = 0, n = 0, k = 0;  // the forward GEMM's shape (0 for non-GEMMs)
  int calls = 0;                     // calls per micro-batch (one per layer, or one)
  double flops = 0;                  // matrix-product FLOPs per micro-batch (all calls)
  double seconds = 0;                // per micro-batch (all calls), mean over repetitions
};

struct ComputeMeasurement {
  int concurrency = 1;                // processes that measured at the same time on this host
  int batch = 1;                      // micro-batch (sequences)
  std::vector<KernelTiming> kernels;  // forward then backward program order
  double forward_backward_s = 0;      // one micro-batch's forward + backward, wall
  double optimizer_s = 0;             // one AdamW step over every parameter, with the grad norm
  std::int64_t parameters = 0;
};

nlohmann::json to_json(const ComputeMeasurement& m);
Result<ComputeMeasurement> compute_measurement_from_json(const nlohmann::json& j,
                                                         const std::string& where);

// One GEMM point of the fit: op, shape and the throughput it reached (TFLOP/s).
struct GemmPoint {
  std::string op;  // "qkv", "mlp_in.backward", ...
  std::int64_t m = 0, n = 0, k = 0;
  double tflops = 0;
};

struct ComputeFit {
  SystemSpec system;               // `base` with the fitted peak and calibration
  double gemm_tflops = 0;          // the highest GEMM throughput measured
  std::vector<GemmPoint> points;   // every GEMM kernel measured
  double predicted_compute_s = 0;  // the fitted system's compute for one micro-batch + step
  double measured_compute_s = 0;   // what the kernels took (forward, backward, optimizer)
};

// Fits `base` (the cpu-host preset) to the measurement of `model` (micro-batch m.batch, one
// rank): peak = 1.25 x the fastest GEMM; the GEMM efficiency curve (maximum and half-point,
// steepness 1) by least squares on log time over the GEMM kernels; attention efficiency and
// memory bandwidth (memory efficiency 1) by bisection so that the workload's attention and
// other compute ops of one micro-batch and step take what the kernels took; per-micro-batch
// overhead = forward + backward wall minus the kernels' sum (the trainer's host work between
// kernels); kernel overhead 0. Error when the measurement has no GEMM kernel.
Result<ComputeFit> fit_compute(const ComputeMeasurement& m, const ModelSpec& model,
                               SystemSpec base);

}  // namespace commscope
