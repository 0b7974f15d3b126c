// `commscope characterize`: measure the network, the compute and training runs on the cluster
// at hand or on emulated nodes, predict the same runs from the first two alone, and write one
// folder (docs/characterize.md). The logic is launch/characterize.h.
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "commscope/launch/characterize.h"
#include "commscope/launch/mpirun.h"
#include "commscope/launch/process.h"
#include "commscope/report/html_pages.h"
#include "commscope/util/atomic_file.h"
#include "commscope/util/flag_error.h"
#ifdef COMMSCOPE_HAVE_TRAIN
#include "common/train_flags.h"
#include "commscope/gpt/measure.h"
#include "commscope/train/options.h"
#endif
#include "verbs.h"

namespace commscope::cli {

Verb add_characterize(CLI::App& app) {
  auto o = std::make_shared<launch::CharacterizeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "characterize",
      "The closed loop: measure the network (collective sweeps -> a fitted profile with curves), "
      "the compute (the trainer's kernels on the model's shapes -> a cpu-host system preset) and "
      "training runs (DDP, ZeRO-1/2/3, tensor and pipeline parallel over rank counts and "
      "profiles, with traces); predict the "
      "same runs from the first two alone and report the errors, and project the larger runs "
      "from the smallest as the seeds do. Everything goes into one folder (-o); completed steps "
      "are kept and skipped when run again. The folder's HTML report is written as report.html "
      "(`commscope report DIR` rebuilds it).");
  cmd->add_option("-o,--output", o->out, "the output folder [characterize-out]");
  cmd->add_option("--emulate", o->emulate,
                  std::string(launch::kEmulateHelp) +
                      "; repeat it for several profiles (nodes=2 unless given)");
  cmd->add_option("--hostfile", o->hostfile,
                  "the cluster mode: an Open MPI hostfile whose nodes the runs use (with --nodes)");
  cmd->add_option("--nodes", o->nodes, "nodes of the hostfile (cluster mode)");
  cmd->add_flag("--quick", o->quick,
                "a smaller model (2 layers, hidden 128), fewer steps and repetitions: minutes");
  cmd->add_option("--model", o->model, "a GPT-2-shaped model preset or file [gpt2-tiny-cpu]");
  cmd->add_option("--ranks", o->ranks, "rank counts of the runs, comma list [2,4]")->delimiter(',');
  cmd->add_option("--strategies", o->strategies,
                  "ddp|zero1|zero2|zero3|tp<N>|pp<M>|tp<N>pp<M> (Megatron's tensor and pipeline "
                  "parallelism, 1F1B over 2 x PP micro-batches; each run where TP x PP divides "
                  "the rank count), comma list [ddp,zero1,zero2,zero3,tp2,pp2,tp2pp2]")
      ->delimiter(',');
  cmd->add_option("--steps", o->steps, "training steps per run [5 with --quick, else 8]");
  cmd->add_option("--warmup", o->warmup, "steps left out of the averages [2 with --quick, else 3]");
  cmd->add_option("--micro-batch-size", o->micro_batch, "sequences per rank per step [4]");
  cmd->add_flag("--compute-only", o->compute_only,
                "step 2 alone: time the trainer's kernels on this host (one process) and write "
                "the fitted cpu-host preset OUT/system-cpu-host.json for predict --system; no "
                "network, no runs, no --emulate/--hostfile");
  auto no_progress = std::make_shared<bool>(false);
  cmd->add_flag("--no-progress", *no_progress, "no progress line on a terminal");
  return {cmd, [o, no_progress]() -> int {
            if (o->out.empty()) o->out = "characterize-out";
            o->progress = !*no_progress && ::isatty(STDERR_FILENO) == 1;
            o->bin_dir = launch::self_dir();
#ifdef COMMSCOPE_HAVE_TRAIN
            o->measure_compute = [](const ModelSpec& m, int batch, int reps,
                                    int concurrency) -> Result<ComputeMeasurement> {
              if (m.kind == ArchKind::t5) {  // T5's own kernels (t5.h)
                CS_ASSIGN_OR_RETURN(train::T5Config t5, train::t5_config(m));
                return train::measure_t5_compute(t5, batch, reps, concurrency);
              }
              CS_ASSIGN_OR_RETURN(train::GptConfig cfg, train::config_from_model(m));
              return train::measure_compute(cfg, batch, reps, concurrency);
            };
            // As `commscope train` checks before it launches (train.cpp).
            o->check_train = [](const std::vector<std::string>& args, int ranks) -> Status {
              CLI::App flags_app;
              flags_app.name("commscope-train");
              TrainFlags f;
              add_train_flags(flags_app, f);
              std::vector<std::string> reversed(args.rbegin(), args.rend());
              try {
                flags_app.parse(reversed);
              } catch (const CLI::ParseError& e) {
                return Error{"trainer flags: " + util::flag_error(flags_app, e)};
              }
              CS_ASSIGN_OR_RETURN(train::TrainOptions t, train_options(f, nullptr));
              return train::validate(t, ranks, ranks);
            };
#endif
            if (Status s = launch::check_characterize_options(*o); !s.ok())
              return fail(s.error().message);
            auto doc = launch::characterize(*o, stderr);
            if (!doc.ok()) return fail(doc.error().message);
            if (o->compute_only) {
              const auto& c = (*doc)["compute"]["systems"]["1"];
              return emit(
                  fmt::format("# commscope characterize --compute-only: {}/{} (GEMM "
                              "{:.4f} TFLOP/s; micro-batch compute measured {:.4f} s, "
                              "fitted {:.4f} s)\n",
                              o->out, c["file"].get<std::string>(), c["gemm_tflops"].get<double>(),
                              c["measured_compute_s"].get<double>(),
                              c["predicted_compute_s"].get<double>()),
                  "");
            }
            // The report of the folder, as `commscope report DIR` writes it.
            const std::string report = (std::filesystem::path(o->out) / "report.html").string();
            auto page = html::render_characterize_dir(o->out);
            if (!page.ok()) return fail(page.error().message);
            if (Status s = write_file_atomic(report, *page); !s.ok())
              return fail(s.error().message);
            const auto& sum = (*doc)["summary"];
            std::string text = fmt::format(
                "# commscope characterize: {} runs in {}; iteration time error: mean {:.1f}%, "
                "max {:.1f}% (with each run's kernels timed just before it: mean {:.1f}%); per "
                "collective, mean over ranks: {:.1f}% (profiler's view, waits included: {:.1f}%; "
                "weighted by time: {:.1f}%)\n",
                sum["runs"].get<int>(), o->out, sum["iteration_mape_pct"].get<double>(),
                sum["iteration_max_error_pct"].get<double>(),
                sum["run_kernels_iteration_mape_pct"].get<double>(),
                sum["collective_mape_pct"].get<double>(),
                sum["collective_profiler_mape_pct"].get<double>(),
                sum["collective_weighted_error_pct"].get<double>());
            text += fmt::format("# {:<28} {:>12} {:>12} {:>8}\n", "run", "measured ms",
                                "predicted ms", "err %");
            for (const auto& r : (*doc)["runs"])
              text +=
                  fmt::format("# {:<28} {:>12.2f} {:>12.2f} {:>8.1f}\n", r["id"].get<std::string>(),
                              r["measured"]["iteration_s"].get<double>() * 1e3,
                              r["predicted"]["iteration_s"].get<double>() * 1e3,
                              r["iteration_error_pct"].get<double>());
            for (const auto& p : (*doc)["projection"])
              text += fmt::format(
                  "# projection {:<28} from {:<20} err {:.1f}% (simulation {:.1f}%)\n",
                  p["run"].get<std::string>(), p["base_run"].get<std::string>(),
                  p["projection_error_pct"].get<double>(), p["simulation_error_pct"].get<double>());
            text += fmt::format("# report: {}\n", report);
            return emit(text, "");
          }};
}

}  // namespace commscope::cli
