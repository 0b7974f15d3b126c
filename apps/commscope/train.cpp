// `commscope train`: runs commscope-train, the MPI trainer beside this binary. With --ranks N it
// launches mpirun itself (optionally over emulated nodes, once per --emulate profile, then
// compares them); under mpirun or srun it runs as launched. docs/train.md.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commscope/launch/mpirun.h"
#include "commscope/launch/process.h"
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
// bad flag fails at once instead of from inside the MPI job behind Open MPI's banner.
int check_trainer_flags(const std::vector<std::string>& args, int ranks) {
  CLI::App app;
  TrainFlags f;
  add_train_flags(app, f);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    for (auto& c : msg)
      if (c == '\n') c = ' ';
    const auto dash = msg.find("--");
    const bool ours = e.get_name() == "ValidationError" && dash != std::string::npos;
    return fail((ours ? msg.substr(dash) : msg) + " (see --help)");
  }
  auto o = train_options(f, nullptr);  // the trainer's rank 0 prints the deprecation warnings
  if (!o.ok()) return fail(o.error().message);
  if (Status st = train::validate(*o, ranks, ranks); !st.ok()) return fail(st.error().message);
  return 0;
}
#endif
}  // namespace

Verb add_train(CLI::App& app) {
  struct State {
    launch::JobOptions job;
    std::vector<std::string> emulate;
    std::vector<std::string> args;
#ifdef COMMSCOPE_HAVE_TRAIN
    TrainFlags flags;  // for --help and the check before launch; forwarded as given
#endif
  };
  auto st = std::make_shared<State>();
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Train a CPU GPT-2 over MPI with DDP or ZeRO-1/2/3 and record its timeline: per-step loss, "
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
  cmd->add_option("args", st->args, "more commscope-train flags (after --)");
  return {
      cmd, [st, cmd]() -> int {
#ifdef COMMSCOPE_HAVE_TRAIN
        std::vector<std::string> args = parsed_args(*cmd, {"ranks", "transport", "emulate"});
#else
        std::vector<std::string> args;
#endif
        args.insert(args.end(), st->args.begin(), st->args.end());
        const std::string prog = launch::self_dir() + "/commscope-train";
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
        if (int rc = check_trainer_flags(args, st->job.ranks); rc != 0) return rc;
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
          return *rc;
        }
        // Several profiles: one run each, then the comparison the seeds make.
        struct Row {
          std::string profile;
          nlohmann::json summary;
          double peak_gbps = 0, busy_gbps = 0;  // full scale, the busiest node
        };
        std::vector<Row> rows;
        for (const std::string& e : st->emulate) {
          char tmpl[] = "/tmp/commscope-train-XXXXXX";
          const int fd = ::mkstemp(tmpl);
          if (fd < 0) return fail("cannot create a temporary file in /tmp");
          ::close(fd);
          std::vector<std::string> a = args;
          a.push_back("--output");
          a.push_back(tmpl);
          std::printf("# ---- --emulate %s ----\n", e.c_str());
          std::fflush(stdout);
          st->job.emulate = e;
          std::vector<launch::NodeTraffic> traffic;
          auto rc = launch::run_mpi_job(prog, a, st->job, stdout, &traffic);
          nlohmann::json j;
          std::ifstream f(tmpl);
          if (f) j = nlohmann::json::parse(f, nullptr, false);
          std::remove(tmpl);
          if (!rc.ok()) return fail(rc.error().message);
          if (*rc != 0 || j.is_discarded() || j.is_null())
            return fail(
                fmt::format("train --emulate {}: the MPI job ended with status {}", e, *rc));
          Row row{e, j};
          auto spec = launch::parse_emulation(e);
          const double scale = spec.ok() ? spec->scale : 1.0;
          for (const auto& t : traffic) {
            row.peak_gbps = std::max(row.peak_gbps, t.peak_tx_bps * scale / 1e9);
            row.busy_gbps = std::max(row.busy_gbps, t.mean_busy_bps * scale / 1e9);
          }
          rows.push_back(row);
        }
        std::printf(
            "# comparison (averages after warm-up, rank 0; Gb/s per node at full scale, "
            "from the emulated NICs' byte counters):\n");
        std::printf("# %-24s %12s %12s %10s %12s %12s\n", "profile", "step (ms)", "tokens/s",
                    "comm %", "peak Gb/s", "busy Gb/s");
        for (const Row& r : rows) {
          const auto& a = r.summary["average"];
          std::printf("# %-24s %12.2f %12.0f %9.1f%% %12.2f %12.2f\n", r.profile.c_str(),
                      a["time_s"].get<double>() * 1e3, a["tokens_per_s"].get<double>(),
                      a["comm_share"].get<double>() * 100, r.peak_gbps, r.busy_gbps);
        }
        return 0;
      }};
}

}  // namespace commscope::cli
