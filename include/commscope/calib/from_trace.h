// `commscope calibrate --from-trace`: a system profile fitted on one traced training run. The
// trace's kernels are matched to the workload's ops (commscope's own traces by op name, GPU
// traces by kernel name: GEMM, attention, element-wise, NCCL collective); per op class the
// efficiency is fitted so that the modelled time equals the traced time, and each collective's
// achieved bus bandwidth per size becomes a curve of the network profile. The fitted profile is
// then used to predict the traced run, and the error is reported.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commscope/spec/scenario.h"
#include "commscope/timeline/trace_reader.h"
#include "commscope/util/result.h"

namespace commscope {

// One op class of the fit: "gemm" (Calibration::gemm_efficiency, the curve's maximum),
// "attention" (attention_efficiency) or "elementwise" (memory_efficiency; norms, embeddings,
// loss and optimizer ops too).
struct ClassFit {
  std::string op_class;
  std::size_t kernels = 0;     // traced kernels of the class
  double traced_s = 0;         // per iteration and rank
  double base_s = 0;           // what the starting preset models for them
  double base_efficiency = 0;  // the starting preset's
  double efficiency = 0;       // fitted (the base one when not identifiable)
  bool fitted = false;         // false: no kernels, or the time does not depend on it
};

struct TraceCalibration {
  SystemSpec system;        // the starting system with the fitted calibration
  NetworkProtocol network;  // the scenario's network with the fitted curves (when any)
  std::vector<ClassFit> classes;
  double peak_scale = 1;             // the preset's peaks raised by this (a class faster than them)
  double bandwidth_scale = 1;        // the preset's memory bandwidth raised by this
  std::vector<BusBwCurve> curves;    // achieved bus bandwidth per collective, group and size
  int iterations = 0;                // iterations traced (ProfilerStep windows, else 1 per file)
  int ranks = 0;                     // ranks (or pipeline stages) traced
  std::size_t unmatched = 0;         // compute kernels of an own trace no workload op is named
  double traced_iteration_s = 0;     // mean over files of the mean iteration (window or span)
  double predicted_iteration_s = 0;  // `predict` with the fitted system and network
  double error = 0;                  // (predicted - traced) / traced
  std::vector<std::string> warnings;
};

// The class of a GPU kernel by its name: "gemm", "attention", "elementwise" ("comm" for NCCL).
std::string_view kernel_class(std::string_view kernel_name);

// Fits `sc` (resolved: the model, plan, system and network the trace ran) to the traces. Error
// when the traces hold no compute kernel of the run's classes.
Result<TraceCalibration> calibrate_from_trace(const std::vector<TraceFile>& traces,
                                              const Scenario& sc);

// The starting system's JSON (as its preset file reads) with the fitted calibration, `note` as
// its source, and the peaks and memory bandwidth scaled as the fit raised them.
nlohmann::json trace_calibrated_system_json(nlohmann::json raw, const TraceCalibration& c,
                                            const std::string& note);

// Per class: kernels, traced time, the preset's and the fitted efficiency; the curves; traced
// vs predicted iteration time and the error.
std::string render_trace_calibration(const TraceCalibration& c);

}  // namespace commscope
