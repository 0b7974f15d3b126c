// `predict`: one row of figures per scenario (iteration time, throughput, MFU, where the time
// goes, memory), scaling against the first row, and the seeds' projection from the first
// row's breakdown. Gathers and prints; the numbers come from the simulator.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "commscope/cost/collective.h"
#include "commscope/report/table.h"
#include "commscope/sim/simulator.h"
#include "commscope/spec/limits.h"
#include "commscope/spec/scenario.h"

namespace commscope {

enum class Scaling { none, strong, weak };

struct PredictRow {
  Scenario scenario;
  double iteration_time = 0;  // s
  double tokens_per_s = 0;
  double tflops_per_gpu = 0;  // model FLOPs / s / GPU, in TFLOP/s
  double mfu = 0;             // model FLOPs utilisation: achieved / peak of the precision
  Breakdown breakdown;        // s, mean over stages (idle includes the bubble)
  double memory_per_gpu = 0;  // bytes, the fullest rank
  bool fits = true;
  std::vector<double> stage_times;  // when each stage finished
  // against the first row of a sweep
  double speedup = 0, scaling_efficiency = 0;
  double projected_time = 0, projection_error = 0;  // the seeds' projection
  double network_efficiency = 0;                    // eff(g -> n) used by the projection
  // Per collective the workload uses: bit 1 when some op's cost came from the alpha-beta model,
  // bit 2 when some came from a measured curve of the network profile (0: not used).
  std::array<std::uint8_t, kCollectiveCount> cost_sources{};
  // Per collective, the paths of NCCL's model that priced its ops (bit i: cost_path_name(i):
  // ring LL/LL128/Simple, tree LL/LL128/Simple, p2p, hierarchical, then NVLS, NVLS tree,
  // CollNet Direct, CollNet Chain: kCostPathCount in all), beside cost_sources.
  std::array<std::uint16_t, kCollectiveCount> cost_paths{};
  double straggler_wait = 0;  // s per iteration a rank's collectives waited for stragglers

  double share(double part) const { return iteration_time > 0 ? part / iteration_time : 0; }
};

PredictRow predict_row(const Workload& w, const Prediction& p);

// The bit of PredictRow::cost_paths a model path sets, and its name ("model:ring/LL128" ...).
int cost_path_index(const CollectiveCost& c);
std::string_view cost_path_name(int i);
inline constexpr int kCostPathCount = 12;
// The scale effects that priced a row: straggler spread and the wait it caused, the fabric's
// oversubscription, NIC sharing of each inter-node group (docs/cost-model.md).
nlohmann::json scale_effects_json(const PredictRow& r);

// Fills speedup, scaling efficiency and the projection of every row from the first row of its
// series: the rows alike in all but their scale (nodes, GPUs, DP, micro-batches per iteration,
// and under weak scaling the global batch).
// Projection (ExaComm'24 panel, 003 seed): t(n) = t_compute(g) x work(n)/work(g) +
// t_comm(g) / eff(g -> n), with t_comm the exposed communication, work the model FLOPs per
// GPU, and eff(g -> n) the ratio of the modelled times of the data-parallel gradient
// all-reduce at g and at n ranks.
void add_scaling(std::vector<PredictRow>& rows, Scaling scaling);

// ---- sweeps: every combination resolved, built and simulated ----

// How `predict --sort` orders rows: iteration time and memory ascending, tokens/s and MFU
// descending (the best first).
enum class SortKey { none, time, tokens, mfu, memory };
std::optional<SortKey> sort_key_from_name(std::string_view s);  // time|tokens|mfu|memory

struct SweepOptions {
  Scaling scaling = Scaling::none;
  bool trace = false;            // one scenario only: its Chrome trace in SweepResult::trace_json
  SortKey sort = SortKey::none;  // none keeps the sweep's order
  std::int64_t top = 0;          // keep the first `top` rows after sorting (0: all); with no
                                 // sort key given, rows are sorted by iteration time
  // Called after each plan with (plans done, plans in all); may be empty.
  std::function<void(std::size_t, std::size_t)> progress;
  // The pipeline tasks the sweep may simulate in all (limits::simulated_tasks summed).
  std::int64_t max_tasks = limits::kMaxSimulatedTasks;
};

struct SweepResult {
  std::vector<PredictRow> rows;  // sorted and cut as asked
  std::size_t plans = 0;         // combinations tried
  std::size_t skipped = 0;       // combinations that were not a valid plan
  // Reasons for skipping ("--tp: expected a divisor of the 20 attention heads of gpt2-large")
  // and how many plans each skipped, most frequent first.
  std::vector<std::pair<std::string, std::size_t>> skip_reasons;
  std::size_t do_not_fit = 0;  // predicted plans that need more memory than a GPU has
  // A sweep's predicted plans that came with warnings of their own (beyond the model's notes,
  // listed once), and those warnings, each once, in the order first seen.
  std::size_t warned = 0;
  std::vector<std::string> plan_warnings;
  std::vector<std::string> warnings;  // a single scenario's warnings (a sweep's: the summary)
  std::string trace_json;             // with SweepOptions::trace
};

// Predicts every input. A single input that is not a valid plan is an error; in a sweep it is
// skipped and counted. Strong scaling without a global batch gives every point the largest
// point's default global batch, so that the smaller points accumulate gradients. Scaling and
// the projection are computed against the first valid row, before sorting.
Result<SweepResult> predict_sweep(const std::vector<ScenarioInput>& inputs, const SweepOptions& o);

// The sweep's warnings as at most three lines: "N of M plans skipped: reasons with counts",
// "K plans do not fit in GPU memory" and "J plans came with warnings, e.g. the first".
std::vector<std::string> sweep_summary(const SweepResult& r);

std::string render_predictions(const std::vector<PredictRow>& rows, Format f, bool scaling);
nlohmann::json predictions_json(const std::vector<PredictRow>& rows, bool scaling);

}  // namespace commscope
