// `predict`: one row of figures per scenario (iteration time, throughput, MFU, where the time
// goes, memory), scaling against the first row, and the seeds' projection from the first
// row's breakdown. Gathers and prints; the numbers come from the simulator.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "commscope/report/table.h"
#include "commscope/sim/simulator.h"

namespace commscope {

enum class Scaling { none, strong, weak };

struct PredictRow {
  Scenario scenario;
  double iteration_time = 0;  // s
  double tokens_per_s = 0;
  double tflops_per_gpu = 0;  // model FLOPs / s / GPU, in TFLOP/s
  double mfu = 0;             // model FLOPs utilisation: achieved / peak of the precision
  double compute = 0, comm = 0, overlapped = 0, exposed = 0, bubble = 0,
         idle = 0;            // s, mean over stages
  double memory_per_gpu = 0;  // bytes, the fullest rank
  bool fits = true;
  GroupShares by_group;
  CollectiveShares by_collective;
  std::vector<double> stage_times;  // when each stage finished
  // against the first row of a sweep
  double speedup = 0, scaling_efficiency = 0;
  double projected_time = 0, projection_error = 0;  // the seeds' projection
  double network_efficiency = 0;                    // eff(g -> n) used by the projection

  double share(double part) const { return iteration_time > 0 ? part / iteration_time : 0; }
};

PredictRow predict_row(const Workload& w, const Prediction& p);

// Fills speedup, scaling efficiency and the projection of every row from rows[0].
// Projection (ExaComm'24 panel, 003 seed): t(n) = t_compute(g) x work(n)/work(g) +
// t_comm(g) / eff(g -> n), with t_comm the exposed communication, work the model FLOPs per
// GPU, and eff(g -> n) the ratio of the modelled times of the data-parallel gradient
// all-reduce at g and at n ranks.
void add_scaling(std::vector<PredictRow>& rows);

std::string render_predictions(const std::vector<PredictRow>& rows, Format f, bool scaling);
nlohmann::json predictions_json(const std::vector<PredictRow>& rows, bool scaling);

}  // namespace commscope
