// The seed studies as a scenario: their runs (models, plans, networks, node counts, systems)
// predicted through the normal predict path, and their headline numbers set beside what
// commscope predicts, with the difference and a reason computed from the rows. The runs and
// the headlines are data (presets/scenarios/seeds.json); nothing here is fitted to them.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "commscope/report/predict.h"
#include "commscope/report/table.h"
#include "commscope/spec/scenario.h"
#include "commscope/util/result.h"

namespace commscope {

// One run of a seed study: which group of the scenario it belongs to, and its input.
struct SeedRun {
  std::string group;  // the group's id ("micro-dp")
  ScenarioInput input;
};

// How a headline's predicted figure is computed from the rows of its groups.
enum class HeadlineKind {
  speedup,               // mean over matched runs of t(baseline network) / t(network)
  peak_rate,             // highest per-NIC rate of a data-parallel gradient bucket, Gb/s
  allreduce_share,       // highest all-reduce time / iteration time, %
  recv_embedding_share,  // highest (pipeline receives + embedding all-reduce) / iteration, %
  comm_ratio,            // highest comm(group) / comm(baseline group) over matched runs, x
  throughput_loss,       // highest 1 - tokens/s(group) / tokens/s(baseline group), %
};
std::string_view to_string(HeadlineKind k);

struct SeedHeadline {
  std::string id, study, says, unit;
  HeadlineKind kind = HeadlineKind::speedup;
  std::vector<std::string> groups;
  std::string network, baseline;  // speedup, peak_rate: network names
  std::string baseline_group;     // comm_ratio, throughput_loss
  double seed = 0;                // the study's published figure, in `unit`
};

struct SeedsScenario {
  std::string name;
  std::vector<SeedRun> runs;
  std::vector<SeedHeadline> headlines;
};

// Reads the scenario format (docs/seeds.md). Strict: unknown fields, unknown groups in a
// headline, empty lists and bad values are errors naming the field.
Result<SeedsScenario> seeds_scenario_from_json(const nlohmann::json& j, const std::string& where);
// A name ("seeds") is looked up as <preset root>/scenarios/<name>.json; a path is read as is.
Result<SeedsScenario> load_seeds_scenario(const std::string& name_or_path);

struct SeedComparison {
  SeedHeadline headline;
  double predicted = 0;   // in the headline's unit
  double difference = 0;  // predicted - seed
  std::size_t basis = 0;  // rows or matched pairs the figure rests on
  std::string where;      // the run that gave a maximum ("gpt2-large, 8 nodes"), or "mean"
  std::string reason;     // why they differ, from the numbers
};

struct SeedsResult {
  std::vector<PredictRow> rows;
  std::vector<std::string> row_group;  // the group of each row
  std::vector<SeedComparison> comparisons;
  std::size_t do_not_fit = 0;  // rows that need more memory than the GPU has (left out)
};

// Predicts every run (each through predict_sweep, as `predict` does) and compares.
Result<SeedsResult> predict_seeds(const SeedsScenario& s);

// One headline from rows and their groups. Rows that do not fit in memory are left out.
// Error when no row (or pair) of its groups qualifies.
Result<SeedComparison> compare_headline(const SeedHeadline& h, const std::vector<PredictRow>& rows,
                                        const std::vector<std::string>& row_group);

// The per-NIC rate (Gb/s) the cost model gives a row's data-parallel gradient bucket across
// nodes: bus_factor(nodes) x bucket x concurrent groups / time / NICs. 0 when the
// data-parallel group stays inside one node.
double bucket_nic_rate_gbps(const PredictRow& r);

std::string render_seed_comparisons(const std::vector<SeedComparison>& c, Format f);
// The whole document `predict --scenario` prints: table and md, the rows then the comparisons;
// csv, the rows only; json, seeds_json.
std::string render_seeds(const SeedsResult& r, Format f);
// {"predictions": [... each with "seed_group"], "seeds": [comparisons]}
nlohmann::json seeds_json(const SeedsResult& r);

}  // namespace commscope
