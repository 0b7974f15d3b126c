// `commscope characterize`: the closed loop on the cluster at hand or on emulated nodes. It
// measures the network (collective sweeps, fitted into a profile with curves), the compute (the
// trainer's kernels on the model's shapes, fitted into a cpu-host system preset), and training
// runs (DDP, ZeRO-1/2/3 over rank counts and network profiles, with traces); then predicts the
// same runs from what it fitted alone, projects the larger runs from the smallest as the seeds
// do, and writes one folder (docs/characterize.md). Spawns mpirun with commscope-bench and
// commscope-train; links no MPI.
#pragma once

#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "commscope/calib/compute_fit.h"
#include "commscope/launch/emulate.h"
#include "commscope/spec/model.h"
#include "commscope/timeline/timeline.h"
#include "commscope/util/result.h"

namespace commscope::launch {

inline constexpr const char* kCharacterizeSchema = "commscope.characterize/1";
inline constexpr const char* kRunSchema = "commscope.characterize.run/1";
// The file characterize leaves in its output folder, by which a later run knows the folder is
// its own to write into again (any other non-empty folder is refused).
inline constexpr const char* kCharacterizeMarker = ".commscope-characterize";

struct CharacterizeOptions {
  std::string out;                   // the output folder
  std::vector<std::string> emulate;  // --emulate specs (emulate mode), each with nodes=K
  std::string hostfile;              // cluster mode: mpirun --hostfile
  int nodes = 0;                     // cluster mode: nodes in the hostfile
  bool quick = false;
  std::string model = "gpt2-tiny-cpu";
  std::vector<int> ranks;               // empty: {2, 4}
  std::vector<std::string> strategies;  // empty: kDefaultStrategies
  // Unset: by --quick. A value given is checked as given (a 0 that stood for "unset" ran at
  // the default).
  std::optional<int> steps, warmup, micro_batch;
  bool progress = false;  // one updating line on `progress_to`
  std::string bin_dir;    // where commscope-bench and commscope-train are
  // Step 2's measurement (the gpt library, which this layer does not link): the model's
  // kernels at `batch`, `reps` repetitions, `concurrency` processes at once.
  std::function<Result<ComputeMeasurement>(const ModelSpec&, int batch, int reps, int concurrency)>
      measure_compute;
  // The trainer's own checks of one run's commscope-train arguments for `ranks` ranks (flags,
  // batch arithmetic, memory), made for every run before anything is measured; may be empty.
  std::function<Status(const std::vector<std::string>& args, int ranks)> check_train;
  // --compute-only: step 2 alone (the kernels on this host, one process, fitted into
  // OUT/system-cpu-host.json); no network, no runs, no --emulate/--hostfile needed.
  bool compute_only = false;
};

// A strategy of the run matrix: "ddp", "zero1".."zero3" (data parallel, ZeRO stage), or Megatron's
// model parallelism "tp<N>", "pp<M>", "tp<N>pp<M>" (N, M from 2 to 64; the rest of the ranks data
// parallel; pipelines run 1F1B over 2 x PP micro-batches per step).
struct Strategy {
  std::string name;
  int zero = 0, tp = 1, pp = 1;
  int model_parallel() const { return tp * pp; }
  // Micro-batches per step (gradient accumulation): 2 x PP with a pipeline, else 1.
  int micro_batches() const { return pp > 1 ? 2 * pp : 1; }
};
std::optional<Strategy> parse_strategy(const std::string& name);
// The default matrix: DDP, ZeRO-1/2/3, TP 2, PP 2 and TP 2 x PP 2 (each where the rank count
// is a multiple of TP x PP).
inline const std::vector<std::string> kDefaultStrategies = {"ddp", "zero1", "zero2", "zero3",
                                                            "tp2", "pp2",   "tp2pp2"};

// The checks made before anything runs: folder path, profiles (parseable, nodes dividing each
// rank count), rank counts 1..256, strategy names, steps. Errors name the flag.
Status check_characterize_options(const CharacterizeOptions& o);

// Runs everything not already in the folder and writes characterize.json, runs.csv,
// collectives.csv. Child programs' output goes to OUT/logs/. Returns the document.
Result<nlohmann::json> characterize(const CharacterizeOptions& o, std::FILE* progress_to);

// ---- pure parts (unit-tested) ----

// (predicted - measured) / measured x 100; 0 when measured is 0.
double error_pct(double measured, double predicted);

// {"iteration_s","compute_s","exposed_comm_s","overlapped_comm_s","bubble_s","profiler_comm_s"}
nlohmann::json breakdown_terms(double iteration_s, const Breakdown& b);

// Per collective with time on either side: measured and predicted totals and profiler views,
// the error of the total (error_pct, the causal view: the transfer without the waits for
// peers) and of the profiler view (profiler_error_pct). `group`: the rows' group column.
nlohmann::json collective_rows(const Breakdown& measured, const Breakdown& predicted,
                               const std::string& group = "data");

// The mean over ranks of the trainer's per-rank averages (train.json's `per_rank`: each rank's
// `time_s` beside breakdown_to_json's keys): the step time and every term of the breakdown,
// groups and collectives included. An error names the entry that does not parse.
Result<std::pair<double, Breakdown>> mean_over_ranks(const nlohmann::json& per_rank,
                                                     const std::string& where);

// The seeds' projection: t(n) = compute(g) x work(n)/work(g) + exposed(g) / eff(g -> n), with
// eff = modelled data-parallel communication at g over that at n.
double project_iteration(double base_iteration_s, double base_exposed_s, double work_ratio,
                         double base_model_comm_s, double model_comm_s);

// summary of a document's runs: mean and max |iteration error|, mean |collective error| (causal
// view; collective_profiler_mape_pct the profiler view's), and the collectives' error weighted by
// their time, sum |predicted - measured| / sum measured (collective_weighted_error_pct: a row of
// a millisecond counts for what it weighs).
nlohmann::json summarize(const nlohmann::json& runs);

// Per-node sending rate over time from the emulated NICs' byte counters (NodeTraffic::samples,
// one window of about 200 ms each): the mean over nodes of each window's rate, in Gb/s x `scale`
// (the emulation's full-scale factor): [{"t_s", "gbps"}] (t_s: the window's end).
nlohmann::json throughput_series(const std::vector<NodeTraffic>& traffic, double scale);

// The "file-safe" label of an --emulate spec: "tcp-10g,nodes=2" -> "tcp-10g", "rate=200M" ->
// "rate-200M".
std::string profile_label(const std::string& spec);

}  // namespace commscope::launch
