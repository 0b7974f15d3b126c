// The flags of the trainer (commscope-train, and `commscope train`, which checks them before it
// launches mpirun): the shared scenario options (the plan as describe and predict spell it)
// plus the trainer's own, and the deprecated spellings of earlier releases.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "commscope/train/options.h"
#include "scenario_options.h"

namespace commscope::cli {

struct TrainFlags {
  ScenarioOptions scenario;
  train::TrainOptions o;
  std::optional<int> layers, hidden, heads, vocab;
  std::optional<std::int64_t> zero_bucket;
  std::string seed;  // --seed as given, read into o.seed by train_options
  // Deprecated spellings (one warning each): --micro-batch, --global-batch, --strategy,
  // --bucket-mb, --summary, --seq.
  std::optional<std::int64_t> old_micro_batch, old_global_batch, old_seq;
  std::optional<double> old_bucket_mb;
  std::string old_strategy, old_summary;
};

// Registers the scenario options (add_scenario_options) and the trainer's flags on `app`.
void add_train_flags(CLI::App& app, TrainFlags& f);

// The TrainOptions the parsed flags say (defaults < DeepSpeed config < flags); `warnings`
// receives one line per deprecated spelling used. Errors name the flag.
Result<train::TrainOptions> train_options(const TrainFlags& f, std::vector<std::string>* warnings);

// The flags of the options parsed into `app`, as arguments (--name value ...), for
// forwarding; options in `skip` (names without dashes) are left out.
std::vector<std::string> parsed_args(const CLI::App& app, const std::vector<std::string>& skip);

}  // namespace commscope::cli
