// `commscope bench`: runs commscope-bench, the MPI program beside this binary. With --ranks N it
// launches mpirun itself for a quick local run; otherwise run commscope-bench under mpirun,
// mpiexec or srun directly (docs/bench.md).
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "verbs.h"

namespace commscope::cli {

namespace {
std::string self_dir() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  buf[n] = 0;
  return std::filesystem::path(buf).parent_path().string();
}
bool on_path(const std::string& prog) {
  const char* path = std::getenv("PATH");
  if (!path) return false;
  std::string p = path;
  for (std::size_t a = 0; a <= p.size();) {
    std::size_t b = p.find(':', a);
    std::string dir = p.substr(a, b == std::string::npos ? std::string::npos : b - a);
    if (!dir.empty() && ::access((dir + "/" + prog).c_str(), X_OK) == 0) return true;
    if (b == std::string::npos) break;
    a = b + 1;
  }
  return false;
}
}  // namespace

Verb add_bench(CLI::App& app) {
  struct State {
    int ranks = 2;
    std::vector<std::string> args;
  };
  auto st = std::make_shared<State>();
  CLI::App* cmd = app.add_subcommand("bench",
                                     "Collective benchmarks over MPI (all-reduce, all-gather, "
                                     "reduce-scatter, broadcast, reduce, all-to-all, "
                                     "send/receive), printed as nccl-tests prints them. Launches "
                                     "`mpirun -np N commscope-bench ARGS`; "
                                     "commscope-bench's flags follow nccl-tests (-b 8 -e 128M -f 2 "
                                     "-n 20 -w 5 -d float -o sum -r 0 "
                                     "--collectives ... --format table|json|csv).");
  cmd->add_option("--ranks", st->ranks, "ranks to launch on this machine [2]");
  cmd->add_option("args", st->args, "arguments for commscope-bench (after --)");
  cmd->allow_extras();
  return {
      cmd, [st, cmd]() -> int {
        if (st->ranks < 1)
          return fail(fmt::format("--ranks: expected a positive integer, got {}", st->ranks));
        const std::string bench = self_dir() + "/commscope-bench";
        if (::access(bench.c_str(), X_OK) != 0)
          return fail(
              fmt::format("{}: not found: commscope was built without MPI (install libopenmpi-dev "
                          "openmpi-bin with scripts/install-deps.sh and rebuild)",
                          bench));
        if (!on_path("mpirun"))
          return fail("mpirun: not found on PATH: install openmpi-bin (scripts/install-deps.sh)");
        std::vector<std::string> argv = {"mpirun", "-np", std::to_string(st->ranks),
                                         "--oversubscribe"};
        if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
        argv.push_back(bench);
        for (const auto& a : st->args) argv.push_back(a);
        for (const auto& a : cmd->remaining()) argv.push_back(a);
        std::vector<char*> cargv;
        for (auto& a : argv) cargv.push_back(a.data());
        cargv.push_back(nullptr);
        std::fflush(stdout);
        const pid_t pid = ::fork();
        if (pid < 0) return fail("fork failed");
        if (pid == 0) {
          ::execvp("mpirun", cargv.data());
          std::_Exit(127);
        }
        int status = 0;
        if (::waitpid(pid, &status, 0) < 0) return fail("waitpid failed");
        const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (rc > 1)  // 1: wrong values, reported by commscope-bench itself
          return fail(
              fmt::format("bench: the MPI job ended with status {}: a rank failed or died (see "
                          "mpirun's message above)",
                          rc));
        return rc;
      }};
}

}  // namespace commscope::cli
