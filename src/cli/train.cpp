// `commscope train`: runs commscope-train, the MPI trainer beside this binary. With --ranks N it
// launches mpirun itself (optionally over emulated nodes, once per --emulate profile, then
// compares them); under mpirun or srun it runs as launched. docs/train.md.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commscope/launch/mpirun.h"
#include "commscope/launch/process.h"
#include "verbs.h"

namespace commscope::cli {

namespace {
bool under_mpi_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_STEP_ID"})
    if (std::getenv(v)) return true;
  return false;
}
}  // namespace

Verb add_train(CLI::App& app) {
  struct State {
    launch::JobOptions job;
    std::vector<std::string> emulate;
    std::vector<std::string> args;
  };
  auto st = std::make_shared<State>();
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Train a CPU GPT-2 over MPI with DDP or ZeRO-1/2/3 and record its timeline: per-step loss, "
      "time, tokens/s, GFLOP/s and the compute/communication breakdown, the communication "
      "checked against the workload. Launches `mpirun -np N commscope-train ARGS`; "
      "commscope-train's flags: --model --layers --hidden --heads --vocab --seq --strategy "
      "--micro-batch --global-batch --steps --lr --data --bucket-mb --trace --format "
      "--checkpoint --checkpoint-every --resume (commscope-train --help).");
  cmd->add_option("--ranks", st->job.ranks, "ranks to launch on this machine [2]");
  cmd->add_option("--transport", st->job.transport, launch::kTransportHelp);
  cmd->add_option("--emulate", st->emulate,
                  std::string(launch::kEmulateHelp) +
                      "; repeat it (--emulate tcp-10g --emulate rdma-100g) to compare profiles");
  cmd->allow_extras();
  cmd->prefix_command();
  return {
      cmd, [st, cmd]() -> int {
        std::vector<std::string> args = st->args;
        for (const auto& a : cmd->remaining()) args.push_back(a);
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
        };
        std::vector<Row> rows;
        for (const std::string& e : st->emulate) {
          char tmpl[] = "/tmp/commscope-train-XXXXXX";
          const int fd = ::mkstemp(tmpl);
          if (fd < 0) return fail("cannot create a temporary file in /tmp");
          ::close(fd);
          std::vector<std::string> a = args;
          a.push_back("--summary");
          a.push_back(tmpl);
          std::printf("# ---- --emulate %s ----\n", e.c_str());
          st->job.emulate = e;
          auto rc = launch::run_mpi_job(prog, a, st->job, stdout);
          nlohmann::json j;
          std::ifstream f(tmpl);
          if (f) j = nlohmann::json::parse(f, nullptr, false);
          std::remove(tmpl);
          if (!rc.ok()) return fail(rc.error().message);
          if (*rc != 0 || j.is_discarded() || j.is_null())
            return fail(
                fmt::format("train --emulate {}: the MPI job ended with status {}", e, *rc));
          rows.push_back({e, j});
        }
        std::printf("# comparison (averages after warm-up, rank 0):\n");
        std::printf("# %-24s %12s %12s %10s\n", "profile", "step (ms)", "tokens/s", "comm %");
        for (const Row& r : rows) {
          const auto& a = r.summary["average"];
          std::printf("# %-24s %12.2f %12.0f %9.1f%%\n", r.profile.c_str(),
                      a["time_s"].get<double>() * 1e3, a["tokens_per_s"].get<double>(),
                      a["comm_share"].get<double>() * 100);
        }
        return 0;
      }};
}

}  // namespace commscope::cli
