// `commscope validate` (predicted vs measured iteration times) and `commscope calibrate`
// (fit a system's cost-model efficiencies to measured runs).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commscope/calib/from_trace.h"
#include "commscope/calib/validate.h"
#include "commscope/report/table.h"
#include "commscope/report/validation.h"
#include "commscope/spec/framework_config.h"
#include "commscope/spec/preset.h"
#include "commscope/util/atomic_file.h"
#include "commscope/util/input_file.h"
#include "commscope/util/json_fields.h"
#include "embed.h"
#include "verbs.h"

namespace commscope::cli {

namespace {

Result<std::vector<PreparedRun>> load_runs(const std::vector<std::string>& files,
                                           const std::string& system,
                                           std::vector<std::string>& skipped,
                                           const std::string& framework = "") {
  CS_RETURN_IF_ERROR(check_distinct_files(files, "measured-run file"));
  std::vector<MeasuredRun> all;
  for (const auto& f : files) {
    SkipCounts skips;
    CS_ASSIGN_OR_RETURN(auto runs, read_measured_csv(f, system, &skips));
    // The corpus rows that are no scenario: one line per file, the count per reason.
    if (!skips.empty()) {
      int n = 0;
      std::vector<std::string> parts;
      for (const auto& [reason, count] : skips) {
        n += count;
        parts.push_back(fmt::format("{} {}", count, reason));
      }
      skipped.push_back(fmt::format("{}: skipped {} of {} rows: {}", f, n,
                                    n + static_cast<int>(runs.size()), fmt::join(parts, ", ")));
    }
    all.insert(all.end(), runs.begin(), runs.end());
  }
  // --framework: every row's plan in that framework's pattern (docs/workload.md), or with
  // `row` the framework each corpus row states; a row it cannot apply to is skipped.
  if (!framework.empty()) {
    std::vector<MeasuredRun> kept;
    for (auto& r : all) {
      const Framework f = framework == "row"
                              ? framework_of_name(r.group.substr(0, r.group.find('/')))
                              : framework_of_name(framework);
      if (auto s = apply_framework(f, r.input.plan); !s.ok()) {
        skipped.push_back(r.source + ": line " + std::to_string(r.line) + ": " + s.error().message);
        continue;
      }
      kept.push_back(std::move(r));
    }
    all = std::move(kept);
  }
  // Check the system once, for a clear error before any row.
  CS_RETURN_IF_ERROR(load_system(system).ok() ? Status() : Status(load_system(system).error()));
  return prepare_runs(all, skipped);
}

bool valid_split(const std::string& s) {
  return s == "all" || s == "even" || s == "odd" || s == "fit" || s == "heldout";
}

// fit|heldout select by the corpus's split column, even|odd by row index in the other formats.
Status check_split(const std::vector<PreparedRun>& runs, const std::string& rows) {
  for (const auto& r : runs) {
    if (!r.split.empty() && (rows == "even" || rows == "odd"))
      return Error{fmt::format(
          "--rows: expected fit, heldout or all for the validation corpus ({} has a split "
          "column), got '{}'",
          r.source, rows)};
    if (r.split.empty() && (rows == "fit" || rows == "heldout"))
      return Error{fmt::format(
          "--rows: expected even, odd or all for {} (no split column), got '{}'", r.source, rows)};
  }
  return {};
}

}  // namespace

Verb add_validate(CLI::App& app) {
  struct State {
    std::vector<std::string> files;
    std::string system = "vtrain-a100", rows = "all", framework;
    OutputOptions out;
    bool quiet = false;
    bool fit_overhead = false;  // --fit-framework-overhead
  };
  auto st = std::make_shared<State>();
  CLI::App* cmd =
      app.add_subcommand("validate",
                         "Predict measured runs and report the error per row and as MAPE, median "
                         "and maximum, and the memory's error where a run's peak was measured. "
                         "Reads vTrain's ground-truth CSVs, commscope's CSV format (e.g. "
                         "data/validation-gpu/h100-runs.csv) and the validation corpus "
                         "(data/validation-comm/training.csv; summary per split, strategy and GPU "
                         "band), docs/validate.md.");
  cmd->add_option("files", st->files, "measured-run CSV files")->required();
  CLI::Option* system = cmd->add_option("--system", st->system,
                                        "system profile for every row (vTrain rows) [vtrain-a100]");
  cmd->add_option("--rows", st->rows,
                  "all|even|odd|fit|heldout: rows 0,2,4... or 1,3,5... of each file; fit or "
                  "heldout by the validation corpus's split column [all]");
  add_output_options(*cmd, st->out);
  cmd->add_flag("--summary-only", st->quiet, "only the error summary, not every row");
  cmd->add_option("--framework", st->framework,
                  "predict every row with this framework's collective pattern: "
                  "megatron|deepspeed|fsdp, or row (each corpus row's own framework) "
                  "[commscope's own]");
  cmd->add_flag("--fit-framework-overhead", st->fit_overhead,
                "fit DeepSpeed 0.3's host seconds per rank per call and NICs per group on the "
                "corpus's fit rows "
                "('deepspeed 0.3' rows of split fit; held-out rows never enter) and print it "
                "with its provenance as JSON for presets/frameworks/deepspeed.json");
  return {
      cmd, [st, system]() -> int {
        auto format = output_format(st->out);
        if (!format) return fail(format.error().message);
        if (!st->framework.empty() && st->framework != "row" &&
            framework_of_name(st->framework) == Framework::none)
          return fail(fmt::format(
              "--framework: expected one of megatron|deepspeed|fsdp|row, got '{}'", st->framework));
        if (!valid_split(st->rows))
          return fail(
              fmt::format("--rows: expected all, even, odd, fit or heldout, got '{}'", st->rows));
        std::vector<std::string> skipped;
        auto runs = load_runs(st->files, st->system, skipped, st->framework);
        if (!runs) return fail(runs.error().message);
        if (auto s = check_split(*runs, st->rows); !s.ok()) return fail(s.error().message);
        // --system given where every row names its own system changes nothing: said, not
        // ignored in silence (found by probing, 2026-12-02).
        // (the preset is read again only when the flag was given)
        auto corpus_row = [](const PreparedRun& r) { return !r.split.empty(); };
        auto unused_system = [&] {
          auto sys = load_system(st->system);
          return sys && (std::all_of(runs->begin(), runs->end(), corpus_row) ||
                         std::none_of(runs->begin(), runs->end(), [&](const PreparedRun& r) {
                           return r.workload.scenario.system.name == sys->name;
                         }));
        };
        if (system->count() > 0 && unused_system())
          print_warnings({fmt::format(
              "--system {}: used by no row (each names its own system: corpus rows by their "
              "gpu, commscope rows by their system column); it is for vTrain's rows and "
              "commscope rows without a system",
              st->system)});
        if (st->fit_overhead) {
          // It prints one JSON document: the flags that shape validate's tables do not apply
          // (they were accepted and ignored, found by probing, 2026-11-30).
          if (*format != Format::json && *format != Format::table)
            return fail(fmt::format(
                "--format: expected json (or none) with --fit-framework-overhead, which prints "
                "its fit as JSON, got '{}'",
                st->out.format));
          if (st->quiet)
            return fail(
                "--summary-only: expected none with --fit-framework-overhead (it prints no "
                "rows)");
          if (st->rows != "all" && st->rows != "fit")
            return fail(fmt::format(
                "--rows: expected fit (or all) with --fit-framework-overhead, which fits on "
                "the fit rows alone, got '{}'",
                st->rows));
          auto fit = fit_framework_overhead(*runs);
          if (!fit) return fail(fit.error().message);
          print_warnings(skipped);
          nlohmann::json j;
          j["host_s_per_rank_per_call"] = fit->host_s_per_rank_per_call;
          j["nics_per_group"] = fit->nics_per_group;
          for (std::size_t i = 0; i < fit->by_nics.size(); ++i) {
            const std::string k = std::to_string(fit->by_nics[i].first);
            j["objective_by_nics_per_group"][k] = fit->by_nics[i].second;
            j["host_s_per_rank_per_call_by_nics_per_group"][k] = fit->host_by_nics[i];
          }
          j["fitted_on"] = fit->ids;
          j["objective_mean_abs_log_error"] = fit->objective;
          j["files"] = st->files;
          return emit(j.dump(2) + "\n", st->out.path);
        }
        const bool progress = ::isatty(STDERR_FILENO);
        Validation v = validate_runs(*runs, st->rows, [&](std::size_t done) {
          check_interrupt();  // Ctrl-C in Python (embed.h)
          if (progress && done % 20 == 0)
            std::fprintf(stderr, "\rcommscope: validating %zu rows", done);
        });
        if (progress) std::fprintf(stderr, "\r\033[K");
        print_warnings(skipped);
        if (v.rows.empty())
          return fail(fmt::format(
              "--rows {}: expected at least one row to predict, got none{}", st->rows,
              skipped.empty() ? "" : " (the warnings above say why rows were skipped)"));
        const std::string out = render_validation(v, *format, st->system, st->quiet);
        return emit(out, st->out.path);
      }};
}

namespace {

// `calibrate --from-trace`: the traced run's scenario, the fit, the fitted system (and network)
// written, the report printed.
template <class State>
int run_from_trace(const CLI::App& cmd, const State& st) {
  if (!st.files.empty())
    return fail(fmt::format("--from-trace: cannot be combined with measured-run files ('{}')",
                            st.files.front()));
  if (st.output.empty())
    return fail("--output: expected a file for the fitted system preset with --from-trace");
  for (const char* f : {"--rows", "--evaluations"})
    if (cmd.count(f) > 0)
      return fail(fmt::format("{}: not used with --from-trace (it fits on the trace)", f));
  for (const auto& [flag, v] : {std::pair{"--nodes", st.nodes},
                                {"--gpus", st.gpus},
                                {"--tp", st.tp},
                                {"--pp", st.pp},
                                {"--dp", st.dp}})
    if (cmd.count(flag) > 0 && v < 1)
      return fail(fmt::format("{}: expected a positive integer, got '{}'", flag, v));
  for (const auto& [flag, v] :
       {std::pair{"--micro-batch-size", st.micro_batch}, {"--global-batch-size", st.global_batch}})
    if (cmd.count(flag) > 0 && v < 1)
      return fail(fmt::format("{}: expected a positive integer, got '{}'", flag, v));
  // Both checked, and not one file (two spellings of a new file kept only the second written,
  // found by probing, 2026-11-30), before anything is read.
  if (Status s = check_outputs({{"--output", st.output}, {"--network-output", st.network_output}});
      !s.ok())
    return fail(s.error().message);
  ScenarioInput in = default_scenario_input();
  in.model = st.model;
  in.system = st.system;
  in.network = st.network;
  if (st.nodes > 0) in.plan.nodes = st.nodes;
  if (st.gpus > 0) in.plan.gpus = st.gpus;
  if (st.tp > 0) in.plan.tp = st.tp;
  if (st.pp > 0) in.plan.pp = st.pp;
  if (st.dp > 0) in.plan.dp = st.dp;
  if (st.micro_batch > 0) in.plan.micro_batch = st.micro_batch;
  if (st.global_batch > 0) in.plan.global_batch = st.global_batch;
  if (!st.precision.empty()) {
    auto p = precision_from_name(st.precision);
    if (!p)
      return fail(
          fmt::format("--precision: expected one of fp32|fp16|bf16, got '{}'", st.precision));
    in.plan.precision = *p;
  }
  if (!st.attention.empty()) {
    auto k = attention_kernel_from_name(st.attention);
    if (!k)
      return fail(fmt::format("--attention: expected flash or standard, got '{}'", st.attention));
    in.plan.attention = *k;
  }
  if (!st.recompute.empty()) {
    auto r = recompute_from_name(st.recompute);
    if (!r)
      return fail(fmt::format(
          "--recompute-granularity: expected none, selective, full or op, got '{}'", st.recompute));
    in.plan.recompute = *r;
  }
  if (cmd.count("--seq-length") > 0) {
    if (st.seq_length < 1)
      return fail(
          fmt::format("--seq-length: expected a positive integer, got '{}'", st.seq_length));
    in.plan.seq_length = st.seq_length;
  }
  auto sc = resolve_scenario(in);
  if (!sc) return fail(sc.error().message);
  auto path = find_preset(PresetKind::system, st.system);
  if (!path) return fail(path.error().message);
  auto raw = read_json_file(*path);
  if (!raw) return fail(raw.error().message);
  TraceReadOptions ro;
  ro.strict = true;
  auto traces = read_traces({st.from_trace}, ro);
  if (!traces) return fail("--from-trace: " + traces.error().message);
  // The traces a folder held are inputs too (-o naming one replaced it, found by probing,
  // 2026-12-02).
  if (Status s = check_outputs({{"--output", st.output}, {"--network-output", st.network_output}},
                               read_paths(*traces));
      !s.ok())
    return fail(s.error().message);
  print_warnings(traces->warnings);
  auto c = calibrate_from_trace(traces->files, *sc);
  if (!c) return fail(c.error().message);
  print_warnings(c->warnings);
  nlohmann::json j = trace_calibrated_system_json(
      raw.value(), *c,
      fmt::format(
          "calibration fitted by `commscope calibrate --from-trace` on {} ({} iteration(s), "
          "{} rank(s)); the traced iteration predicted with {:+.2f}% error",
          st.from_trace.substr(st.from_trace.find_last_of('/') + 1), c->iterations, c->ranks,
          c->error * 100));
  // The system first: where -o cannot be written (a FIFO nobody reads), nothing is (the network
  // profile was written before it, found by probing, 2026-11-30).
  if (int rc = write_outputs(
          {{"--output", st.output, j.dump(2) + "\n"},
           {"--network-output", st.network_output, to_json(c->network).dump(2) + "\n"}});
      rc != 0)
    return rc;
  return emit(render_trace_calibration(*c), "");
}

}  // namespace

Verb add_calibrate(CLI::App& app) {
  struct State {
    std::vector<std::string> files;
    std::string system = "vtrain-a100", rows = "even", output;
    int evaluations = 400;
    bool compute_only = false;       // issue 15: fit the compute terms alone, bounded
    bool hold_gemm_shape = false;    // --compute-only: the start's GEMM half-point and steepness
    std::string start = "defaults";  // or "preset": refine the preset's own calibration
    // --from-trace: the traced run's scenario (-1: the built-in default)
    std::string from_trace, model = "gpt2-large", network, network_output, precision;
    std::string attention, recompute;  // empty: the model preset's / none
    int nodes = -1, gpus = -1, tp = -1, pp = -1, dp = -1;
    std::int64_t micro_batch = -1, global_batch = -1, seq_length = -1;
  };
  auto st = std::make_shared<State>();
  CLI::App* cmd = app.add_subcommand("calibrate",
                                     "Fit a system's cost-model efficiencies (GEMM, attention, "
                                     "memory, kernel overhead, NVLink) to measured "
                                     "runs and write the system preset with the fitted "
                                     "calibration. Fit on one split, validate on the other.");
  cmd->add_option("files", st->files, "measured-run CSV files (or --from-trace)");
  cmd->add_option("--system", st->system, "the system preset to start from [vtrain-a100]");
  const char* g_trace = "From a trace (docs/calibrate.md)";
  cmd->add_option("--from-trace", st->from_trace,
                  "fit on a traced run instead: a Kineto/Chrome trace file or a directory of "
                  "them (predict --trace, train --trace, PyTorch profiler); needs -o")
      ->group(g_trace);
  cmd->add_option("--model", st->model, "the traced run's model [gpt2-large]")->group(g_trace);
  cmd->add_option("--network", st->network, "its network profile [the system's own]")
      ->group(g_trace);
  cmd->add_option("--nodes", st->nodes, "its nodes [4]")->group(g_trace);
  cmd->add_option("--gpus", st->gpus, "its GPUs in all [nodes x GPUs per node]")->group(g_trace);
  cmd->add_option("--tp", st->tp, "its tensor-parallel size [1]")->group(g_trace);
  cmd->add_option("--pp", st->pp, "its pipeline-parallel size [1]")->group(g_trace);
  cmd->add_option("--dp", st->dp, "its data-parallel size [the rest]")->group(g_trace);
  cmd->add_option("--micro-batch-size", st->micro_batch, "its micro-batch [4]")->group(g_trace);
  cmd->add_option("--global-batch-size", st->global_batch, "its global batch [micro x DP]")
      ->group(g_trace);
  cmd->add_option("--precision", st->precision, "its precision: fp32|fp16|bf16 [bf16]")
      ->group(g_trace);
  cmd->add_option("--seq-length", st->seq_length, "its tokens per sample [the model's]")
      ->group(g_trace);
  cmd->add_option("--attention", st->attention,
                  "its attention kernel: flash|standard [the model preset's, else standard]")
      ->group(g_trace);
  cmd->add_option("--recompute-granularity", st->recompute,
                  "its activation recompute: none|selective|full|op [none]")
      ->group(g_trace);
  cmd->add_option("--network-output", st->network_output,
                  "write the network profile with the fitted bus-bandwidth curves here")
      ->group(g_trace);
  cmd->add_option("--rows", st->rows,
                  "all|even|odd: the rows to fit on [even]; fit for the validation corpus (its "
                  "held-out rows are never fitted on)");
  cmd->add_option("--evaluations", st->evaluations, "objective evaluations at most [400]");
  cmd->add_option("-o,--output", st->output, "the system JSON to write (stdout when omitted)");
  cmd->add_option("--start", st->start,
                  "defaults|preset: start the fit from the built-in defaults, or refine the "
                  "--system preset's own calibration (after a change to the cost model) "
                  "[defaults]");
  cmd->add_flag("--compute-only", st->compute_only,
                "fit only the compute terms (GEMM curve, attention, memory efficiency <= 0.9, "
                "kernel overhead 1-10 us); NVLink and host overheads keep their defaults");
  cmd->add_flag("--hold-gemm-shape", st->hold_gemm_shape,
                "with --compute-only: keep the start's GEMM half-point and steepness, where the "
                "fit rows do not determine them (docs/cost-model.md)");
  return {
      cmd, [cmd, st]() -> int {
        if (!st->from_trace.empty() && st->compute_only)
          return fail("--compute-only: not with --from-trace");
        if (st->hold_gemm_shape && !st->compute_only)
          return fail("--hold-gemm-shape: expected --compute-only with it");
        if (!st->from_trace.empty() && cmd->count("--start") > 0)
          return fail("--start: not with --from-trace (a trace's fit has its own start)");
        if (!st->from_trace.empty()) return run_from_trace(*cmd, *st);
        for (const char* f :
             {"--model", "--network", "--nodes", "--gpus", "--tp", "--pp", "--dp",
              "--micro-batch-size", "--global-batch-size", "--network-output", "--precision",
              "--seq-length", "--attention", "--recompute-granularity"})
          if (cmd->count(f) > 0) return fail(fmt::format("{}: only with --from-trace", f));
        if (st->files.empty())
          return fail("files: expected measured-run CSV files (or --from-trace DIR), got none");
        if (!valid_split(st->rows))
          return fail(fmt::format("--rows: expected all, even, odd or fit, got '{}'", st->rows));
        if (st->start != "defaults" && st->start != "preset")
          return fail(fmt::format("--start: expected defaults or preset, got '{}'", st->start));
        if (st->evaluations < 10)
          return fail(fmt::format("--evaluations: expected at least 10, got {}", st->evaluations));
        // -o before the fit (a folder was refused after 12 s of fitting, found by probing,
        // 2026-12-02).
        if (Status s = check_outputs({{"-o/--output", st->output}}); !s.ok())
          return fail(s.error().message);
        auto path = find_preset(PresetKind::system, st->system);
        if (!path) return fail(path.error().message);
        auto raw = read_json_file(*path);
        if (!raw) return fail(raw.error().message);
        std::vector<std::string> skipped;
        auto runs = load_runs(st->files, st->system, skipped);
        if (!runs) return fail(runs.error().message);
        // The corpus's held-out rows are never for fitting: only --rows fit fits on it.
        for (const auto& r : *runs)
          if (!r.split.empty() && st->rows != "fit")
            return fail(fmt::format(
                "--rows: {} is the validation corpus, whose held-out rows are never fitted on: "
                "expected fit, got '{}'",
                r.source, st->rows));
        if (auto s = check_split(*runs, st->rows); !s.ok()) return fail(s.error().message);
        print_warnings(skipped);
        // The system whose calibration is fitted: its own rows only (a corpus names each row's
        // system by its GPU; rows of other systems were fitted into --system's calibration
        // without a word, found by probing, 2026-11-30).
        auto sys = load_system(st->system);
        if (!sys) return fail(sys.error().message);
        std::map<std::string, int> elsewhere;  // rows of other systems, by system
        std::vector<const PreparedRun*> fit;
        int unmodelled = 0, framework_fitted = 0;
        // A run that ran out of memory has no time to fit on; a corpus row whose run does what
        // commscope does not model (its `unmodelled` cell) is validated, not fitted on; nor is
        // one predicted with a framework release whose own terms are fitted on such rows given
        // the system's calibration (DeepSpeed 0.3, presets/frameworks/deepspeed.json): fitting
        // the calibration on them would go round in a circle.
        for (const auto& r : *runs)
          if (in_split(r, st->rows) && !r.out_of_memory) {
            if (r.workload.scenario.system.name != sys->name)
              ++elsewhere[r.workload.scenario.system.name];
            else if (!r.unmodelled.empty())
              ++unmodelled;
            else if (!r.workload.scenario.plan.deepspeed_version.empty())
              ++framework_fitted;
            else
              fit.push_back(&r);
          }
        if (unmodelled > 0)
          print_notes(
              {fmt::format("{} row{} not fitted on: {} run{} what commscope does not model (column "
                           "unmodelled)",
                           unmodelled, unmodelled == 1 ? "" : "s", unmodelled == 1 ? "it" : "they",
                           unmodelled == 1 ? "s" : "")});
        if (framework_fitted > 0)
          print_notes({fmt::format(
              "{} row{} not fitted on: predicted with a framework release whose terms are fitted "
              "on the calibration (column framework, 'deepspeed 0.3'; validate "
              "--fit-framework-overhead)",
              framework_fitted, framework_fitted == 1 ? "" : "s")});
        if (!elsewhere.empty()) {
          std::string which;
          int n = 0;
          for (const auto& [name, k] : elsewhere) {
            which += fmt::format("{}{} on {}", which.empty() ? "" : ", ", k, name);
            n += k;
          }
          print_notes({fmt::format(
              "{} row{} not fitted on: {} (--system {}'s calibration is fitted on its own rows)", n,
              n == 1 ? "" : "s", which, sys->name)});
        }
        if (fit.empty())
          return fail(fmt::format("--rows: no rows of --system {} to fit on", sys->name));
        // One row fitted all the terms in silence (found by probing, 2026-11-30): each row
        // constrains one iteration time, so fewer rows than terms leave some of them free.
        if (const int terms = fitted_terms(st->compute_only, st->hold_gemm_shape);
            static_cast<int>(fit.size()) < terms)
          print_warnings({fmt::format(
              "{} row{} to fit {} terms: the fit is underdetermined (some terms move without "
              "changing any prediction); fit on at least {} rows, and validate on others",
              fit.size(), fit.size() == 1 ? "" : "s", terms, terms)});
        const bool tty = ::isatty(STDERR_FILENO);
        // The defaults, so that a fit does not depend on an earlier one; or, with --start
        // preset, the preset's own calibration, refined on the same rows.
        Calibration start;
        if (st->start == "preset") start = sys->calibration;
        // A measured term, not a fitted one: the preset's, whatever the start (the fit rows'
        // FlashAttention kernels are priced at it, and the written preset keeps it).
        start.flash_attention_efficiency = sys->calibration.flash_attention_efficiency;
        auto progress = [&](int n, double f) {
          check_interrupt();  // Ctrl-C in Python (embed.h)
          if (tty) std::fprintf(stderr, "\rcommscope: evaluation %d: mean |log error| %.4f", n, f);
        };
        Calibration c =
            st->compute_only
                ? fit_compute_calibration(fit, start, st->evaluations,
                                          ComputeFitBounds{.hold_gemm_shape = st->hold_gemm_shape},
                                          progress)
                : fit_calibration(fit, start, st->evaluations, progress);
        if (tty) std::fprintf(stderr, "\n");
        std::vector<std::string> files;
        for (const auto& f : st->files) files.push_back(f.substr(f.find_last_of('/') + 1));
        std::string note = fmt::format(
            "calibration fitted by `commscope calibrate --rows {}{}{}` on {} rows of {} "
            "(Nelder-Mead, "
            "mean |log "
            "error|); validate on the other rows",
            st->rows,
            st->compute_only
                ? (st->hold_gemm_shape ? " --compute-only --hold-gemm-shape" : " --compute-only")
                : "",
            st->start == "preset" ? " --start preset" : "", fit.size(), fmt::join(files, ", "));
        nlohmann::json j = with_calibration(raw.value(), c, note);
        // The --system preset is the template the fit fills in: writing the fitted preset over
        // it is how a calibration is shipped (docs/validate.md: `--system vtrain-a100 -o
        // presets/systems/vtrain-a100.json`), so it is no input -o must spare. A --system
        // path that -o also names on the command line is still refused by its word.
        forget_input_read(*path);
        return emit(j.dump(2) + "\n", st->output);
      }};
}

}  // namespace commscope::cli
