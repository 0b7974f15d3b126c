#include "commscope/launch/process.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace commscope::launch {

namespace {
std::vector<char*> c_argv(std::vector<std::string>& argv) {
  std::vector<char*> out;
  out.reserve(argv.size() + 1);
  for (auto& a : argv) out.push_back(a.data());
  out.push_back(nullptr);
  return out;
}

int decode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

volatile std::sig_atomic_t g_child = 0;
volatile std::sig_atomic_t g_signalled = 0;

// SIGINT, SIGTERM, SIGHUP while a SignalGuard lives: noted, and passed on to the job if one runs.
extern "C" void note_and_forward(int sig) {
  g_signalled = 1;
  if (g_child > 0) ::kill(static_cast<pid_t>(g_child), sig);
}
}  // namespace

CommandResult run_command(const std::vector<std::string>& argv_in) {
  CommandResult r;
  std::vector<std::string> argv = argv_in;
  int fds[2];
  if (argv.empty() || ::pipe2(fds, O_CLOEXEC) != 0) return r;
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return r;
  }
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    auto cargv = c_argv(argv);
    ::execvp(cargv[0], cargv.data());
    std::_Exit(127);
  }
  ::close(fds[1]);
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof(buf));
    if (n > 0) {
      r.output.append(buf, static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;
    }
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.status = decode(status);
  return r;
}

int run_job(const std::vector<std::string>& argv_in, bool* interrupted) {
  std::vector<std::string> argv = argv_in;
  SignalGuard guard;  // Ctrl-C goes to the job, and we wait for it to end
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  int rc = -1;
  if (pid == 0) {
    guard.restore();  // the job gets the default handling
    auto cargv = c_argv(argv);
    ::execvp(cargv[0], cargv.data());
    std::_Exit(127);
  }
  if (pid > 0) {
    g_child = pid;
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    g_child = 0;
    rc = decode(status);
  }
  if (interrupted) *interrupted = guard.caught();
  return rc;
}

SignalGuard::SignalGuard() {
  g_signalled = 0;
  struct sigaction sa = {};
  sa.sa_handler = note_and_forward;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &old_int_);
  ::sigaction(SIGTERM, &sa, &old_term_);
  ::sigaction(SIGHUP, &sa, &old_hup_);
}

SignalGuard::~SignalGuard() {
  restore();
}

void SignalGuard::restore() const {
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
  ::sigaction(SIGHUP, &old_hup_, nullptr);
}

bool SignalGuard::caught() const {
  return g_signalled != 0;
}

bool on_path(const std::string& prog) {
  const char* path = std::getenv("PATH");
  if (!path) return false;
  const std::string p = path;
  for (std::size_t a = 0; a <= p.size();) {
    const std::size_t b = p.find(':', a);
    const std::string dir = p.substr(a, b == std::string::npos ? std::string::npos : b - a);
    if (!dir.empty() && ::access((dir + "/" + prog).c_str(), X_OK) == 0) return true;
    if (b == std::string::npos) break;
    a = b + 1;
  }
  return false;
}

namespace {
std::string& program_dir() {
  static std::string dir;
  return dir;
}
}  // namespace

void set_program_dir(std::string dir) {
  program_dir() = std::move(dir);
}

std::string self_dir() {
  if (!program_dir().empty()) return program_dir();
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  buf[n] = 0;
  return std::filesystem::path(buf).parent_path().string();
}

}  // namespace commscope::launch
