// Child processes for the launchers: a command run to completion with its output captured
// (ip, tc), and a job (mpirun) run in the foreground with Ctrl-C and termination forwarded to
// it, so that the caller's cleanup always runs afterwards.
#pragma once

#include <csignal>
#include <string>
#include <vector>

namespace commscope::launch {

struct CommandResult {
  int status = -1;     // exit status, 128 + signal, or -1 when it could not start
  std::string output;  // stdout and stderr together
};

// Runs argv[0] (searched on PATH) with no shell in between.
CommandResult run_command(const std::vector<std::string>& argv);

// Runs argv in the foreground, its output going where ours goes. SIGINT, SIGTERM and SIGHUP
// received meanwhile are passed on to it; returns its exit status (128 + signal when killed).
// `interrupted` tells whether one of those signals arrived.
int run_job(const std::vector<std::string>& argv, bool* interrupted = nullptr);

// While it lives, SIGINT, SIGTERM and SIGHUP set a flag and are passed on to the job run_job
// runs, instead of ending this process: for work that must not be cut in half (creating
// emulated nodes, which then cleans up and stops; waiting for a job, whose cleanup follows).
class SignalGuard {
 public:
  SignalGuard();
  ~SignalGuard();
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;
  bool caught() const;
  void restore() const;  // the handlers from before (a forked child calls it before exec)

 private:
  struct sigaction old_int_ {
  }, old_term_{}, old_hup_{};
};

// Whether `prog` is an executable on PATH; the folder of the running executable, where
// commscope-train and commscope-bench lie beside commscope, unless set_program_dir named
// another (a host program such as the Python module, whose executable is the interpreter).
bool on_path(const std::string& prog);
std::string self_dir();
void set_program_dir(std::string dir);

}  // namespace commscope::launch
