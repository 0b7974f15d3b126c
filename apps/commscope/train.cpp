// `commscope train`: runs commscope-train, the MPI trainer beside this binary. With --ranks N it
// launches mpirun itself (optionally over emulated nodes, once per --emulate profile, then
// compares them); under mpirun or srun it runs as launched. docs/train.md.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include "commscope/launch/compare.h"
#include "commscope/launch/mpirun.h"
#include "commscope/launch/process.h"
#include "commscope/report/html_pages.h"
#include "commscope/util/atomic_file.h"
#include "commscope/util/flag_error.h"
#ifdef COMMSCOPE_HAVE_TRAIN
#include "common/train_flags.h"
#endif
#include "verbs.h"

namespace commscope::cli {

namespace {
bool under_mpi_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_STEP_ID"})
    if (std::getenv(v)) return true;
  return false;
}

#ifdef COMMSCOPE_HAVE_TRAIN
// The trainer's flags parsed and checked here, as every rank of commscope-train will, so that a
// bad flag fails at once instead of from inside the MPI job behind Open MPI's banner. -1 after
// printing the trainer's help (nothing to launch), else the exit status of a failure, or 0.
int check_trainer_flags(const std::vector<std::string>& args, int ranks) {
  CLI::App app;
  app.name("commscope-train");
  TrainFlags f;
  add_train_flags(app, f);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {  // `train -- --help`: the trainer's flags (it said "This
    std::fputs(app.help().c_str(), stdout);  // should be caught in your main function")
    return -1;
  } catch (const CLI::ParseError& e) {
    std::string msg = util::flag_error(app, e);
    for (auto& c : msg)
      if (c == '\n') c = ' ';
    const auto dash = msg.find("--");
    const bool ours = e.get_name() == "ValidationError" && dash != std::string::npos;
    return fail((ours ? msg.substr(dash) : msg) + " (see --help)");
  }
  auto o = train_options(f, nullptr);  // the trainer's rank 0 prints the deprecation warnings
  if (!o.ok()) return fail(o.error().message);
  if (Status st = train::validate(*o, ranks, ranks); !st.ok()) return fail(st.error().message);
  // Its outputs against each other and its inputs, as every verb checks its own: -o and each
  // rank's trace; the files the checks read (the model), --data and the checkpoint folder's
  // files (each was replaced with status 0, found by probing, 2026-12-02).
  std::vector<std::pair<std::string, std::string>> outputs = {{"-o/--output", o->output}};
  if (!o->trace.empty())
    for (int r = 0; r < ranks; ++r) outputs.push_back({"--trace", train::trace_path(o->trace, r)});
  std::vector<std::string> inputs;
  if (!o->data.empty()) inputs.push_back(o->data);
  std::error_code ec;
  if (!o->checkpoint_dir.empty() && std::filesystem::is_directory(o->checkpoint_dir, ec)) {
    std::size_t seen = 0;  // bounded: a folder of a million files is not listed whole
    for (auto it = std::filesystem::directory_iterator(o->checkpoint_dir, ec);
         !ec && it != std::filesystem::directory_iterator() && seen++ < 100000; it.increment(ec))
      inputs.push_back(it->path().string());
  }
  if (Status s = check_outputs(outputs, inputs); !s.ok()) return fail(s.error().message);
  return 0;
}
#endif

// Where `train --html` finds the trainer's json document: the -o/--output the user gave, or a
// temporary file added to the trainer's arguments and removed afterwards.
struct HtmlJson {
  std::string path;
  bool temporary = false;
  Status open(std::vector<std::string>& args) {
    for (std::size_t i = 0; i < args.size(); ++i) {  // the last one wins, as in the trainer
      if ((args[i] == "-o" || args[i] == "--output") && i + 1 < args.size()) path = args[i + 1];
      if (args[i].rfind("--output=", 0) == 0) path = args[i].substr(9);
    }
    if (!path.empty()) return {};
    std::error_code ec;
    std::string tmpl =
        (std::filesystem::temp_directory_path(ec) / "commscope-train-XXXXXX.json").string();
    const int fd = ::mkstemps(tmpl.data(), 5);
    if (fd < 0) return Error{tmpl + ": cannot create a temporary file: " + std::strerror(errno)};
    ::close(fd);
    path = tmpl;
    temporary = true;
    args.push_back("-o");
    args.push_back(path);
    return {};
  }
  ~HtmlJson() {
    if (temporary) std::remove(path.c_str());
  }
};
}  // namespace

Verb add_train(CLI::App& app) {
  struct State {
    launch::JobOptions job;
    std::vector<std::string> emulate;
    std::vector<std::string> args;
    std::string html;
#ifdef COMMSCOPE_HAVE_TRAIN
    TrainFlags flags;  // for --help and the check before launch; forwarded as given
#endif
  };
  auto st = std::make_shared<State>();
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Train a CPU GPT-2, BERT or T5 (--model) over MPI with DDP or ZeRO-1/2/3, or tensor/sequence/"
      "pipeline parallel "
      "(--tp, --sequence-parallel, --pp, --schedule), and record its timeline: per-step loss, "
      "time, tokens/s, GFLOP/s and the compute/communication breakdown, the communication "
      "checked against the workload (`commscope describe --system cpu-host` with the same plan "
      "flags). Launches `mpirun -np N commscope-train ARGS`, after checking ARGS here.");
  cmd->add_option("--ranks", st->job.ranks, "ranks to launch on this machine [2]");
  cmd->add_option("--transport", st->job.transport, launch::kTransportHelp);
  cmd->add_option("--emulate", st->emulate,
                  std::string(launch::kEmulateHelp) +
                      "; repeat it (--emulate tcp-10g --emulate rdma-100g) to compare profiles");
#ifdef COMMSCOPE_HAVE_TRAIN
  add_train_flags(*cmd, st->flags);
#endif
  cmd->add_option("--html", st->html,
                  "also write a self-contained HTML report of the run (per-rank breakdown, "
                  "collectives, step time and payload rate over time; docs/report.md) to this "
                  "file; one run (--ranks, at most one --emulate)");
  cmd->add_option("args", st->args, "more commscope-train flags (after --)");
  return {
      cmd, [st, cmd]() -> int {
#ifdef COMMSCOPE_HAVE_TRAIN
        std::vector<std::string> args =
            parsed_args(*cmd, {"ranks", "transport", "emulate", "html"});
#else
        std::vector<std::string> args;
#endif
        args.insert(args.end(), st->args.begin(), st->args.end());
        const std::string prog = launch::self_dir() + "/commscope-train";
        // --html: the trainer's json document (-o, or a temporary file) rendered after the run.
        HtmlJson html_json;
        if (!st->html.empty()) {
          if (under_mpi_launcher() && cmd->count("--ranks") == 0 && st->emulate.empty())
            return fail("--html: needs --ranks (under mpirun or srun, write -o run.json instead)");
          if (st->emulate.size() > 1)
            return fail("--html: expected one run, got " + std::to_string(st->emulate.size()) +
                        " --emulate profiles");
        // -o with it: the two must be two files (the HTML would replace the JSON; found by
        // probing, 2026-12-02)
#ifdef COMMSCOPE_HAVE_TRAIN
          const std::string json_out = st->flags.o.output;
#else
          const std::string json_out;
#endif
          if (Status s = check_outputs({{"-o/--output", json_out}, {"--html", st->html}}); !s.ok())
            return fail(s.error().message);
          auto j = html_json.open(args);
          if (!j.ok()) return fail("--html: " + j.error().message);
        }
        if (under_mpi_launcher() && cmd->count("--ranks") == 0 && st->emulate.empty()) {
          // Launched by mpirun or srun: this process is a rank; become the trainer.
          std::vector<std::string> argv = {prog};
          argv.insert(argv.end(), args.begin(), args.end());
          std::vector<char*> c;
          for (auto& a : argv) c.push_back(a.data());
          c.push_back(nullptr);
          ::execv(prog.c_str(), c.data());
          return fail(fmt::format("{}: cannot be started (built without MPI or OpenBLAS?)", prog));
        }
#ifdef COMMSCOPE_HAVE_TRAIN
        if (Status r = train::check_ranks(st->job.ranks); !r.ok()) return fail(r.error().message);
        if (int rc = check_trainer_flags(args, st->job.ranks); rc != 0) return rc < 0 ? 0 : rc;
#endif
        // The ranks' stderr is mpirun's pipe: rank 0 shows its progress line when ours is a
        // terminal (one run: the comparison of several profiles prints its own lines).
        if (::isatty(STDERR_FILENO) == 1 && st->emulate.size() <= 1) args.push_back("--progress");
        if (st->emulate.size() <= 1) {
          st->job.emulate = st->emulate.empty() ? "" : st->emulate.front();
          auto rc = launch::run_mpi_job(prog, args, st->job, stdout);
          if (!rc.ok()) return fail(rc.error().message);
          if (*rc > 2)
            return fail(fmt::format(
                "train: the MPI job ended with status {}: a rank failed or died (see mpirun's "
                "message above)",
                *rc));
          if (!st->html.empty() && *rc <= 1)  // 1: the run finished, its communication differed
            if (Status s = html::write_train_report(html_json.path, st->html); !s.ok())
              return fail("--html: " + s.error().message);
          return *rc;
        }
        // Several profiles: one run each, then the comparison the seeds make.
        auto runs = launch::run_per_profile(prog, args, st->job, st->emulate, stdout);
        if (!runs.ok()) return fail("train " + runs.error().message);
        std::fputs(launch::render_profile_comparison(*runs).c_str(), stdout);
        return 0;
      }};
}

}  // namespace commscope::cli
