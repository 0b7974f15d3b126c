// Helpers shared by the unit tests.
#pragma once

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "commscope/spec/scenario.h"
#include "commscope/workload/workload.h"

namespace commscope::testing {

// A folder of this test process's own under the temporary folder ("…/commscope_test_<pid>/"),
// created on first use and removed when the process exits, whether its tests passed or not.
// Tests put what they write here, so that a run leaves nothing behind.
inline const std::string& scratch() {
  // Never freed: the exit handler still reads it after static destructors have run.
  static const std::string* dir = [] {
    auto* d = new std::string(::testing::TempDir() + "commscope_test_" +
                              std::to_string(::getpid()) + "/");
    std::filesystem::create_directories(*d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch(), ec);
    });
    return d;
  }();
  return *dir;
}

#ifdef MPIEXEC
// The start of an mpirun command line for `ranks` ranks on this machine, as the MPI tests run
// their programs directly (as a user's launcher would). Open MPI's session folders go under
// scratch(), not into the $TMPDIR/ompi.<host>.<uid> every job of the machine shares: Open MPI
// 4.1 fails to start ("A call to mkdir was unable to create the desired directory") when a
// job of another test, ending at that moment, removes that folder.
// `tag` names a session folder of the launch's own, for launches that run at the same time
// in one test (run_mpi_all): for the same reason, one job's end must not remove another's.
inline std::string mpiexec(int ranks, const std::string& tag = "") {
  return std::string(MPIEXEC) + " -np " + std::to_string(ranks) + " --oversubscribe " +
         (::geteuid() == 0 ? "--allow-run-as-root " : "") + "--mca orte_tmpdir_base '" + scratch() +
         "ompi" + tag + "' ";
}
#endif

inline ModelSpec model(const std::string& name) {
  auto m = load_model(name);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
  return m.ok() ? m.value() : ModelSpec{};
}

// Resolves a scenario that must be valid.
inline Scenario scenario(const std::string& model_name, const std::string& system,
                         const PlanInput& plan, const std::string& network = "") {
  ScenarioInput in;
  in.model = model_name;
  in.system = system;
  in.network = network;
  in.plan = plan;
  auto sc = resolve_scenario(in);
  EXPECT_TRUE(sc.ok()) << (sc.ok() ? "" : sc.error().message);
  return sc.ok() ? sc.value() : Scenario{};
}

// The error message of a scenario that must be invalid.
inline std::string scenario_error(const std::string& model_name, const std::string& system,
                                  const PlanInput& plan) {
  ScenarioInput in;
  in.model = model_name;
  in.system = system;
  in.plan = plan;
  auto sc = resolve_scenario(in);
  EXPECT_FALSE(sc.ok()) << "expected an error";
  return sc.ok() ? std::string() : sc.error().message;
}

// All ops of the given name in one op list, in order.
inline std::vector<Op> named(const OpList& list, std::string_view name) {
  std::vector<Op> out;
  for (const Op& o : list.ops())
    if (o.name == name) out.push_back(o);
  return out;
}

inline PlanInput plan(int gpus, int tp = 1, int pp = 1, std::int64_t micro = 1,
                      std::int64_t global = 0) {
  PlanInput p;
  p.gpus = gpus;
  p.tp = tp;
  p.pp = pp;
  p.micro_batch = micro;
  if (global) p.global_batch = global;
  return p;
}

// A file's whole text ("" when it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A fixture whose each test has its own empty folder dir_ (inside scratch()), removed after it.
class TestFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(scratch()) /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::filesystem::path dir_;
};

// A shell command's exit status, stdout and stderr (stderr through a file in the test's
// temporary folder).
struct Outcome {
  int status = -1;
  std::string out, err;
};
inline Outcome run_shell(const std::string& cmd) {
  // One file per process and call: tests run in parallel processes, and run_shell_all runs
  // calls in parallel threads.
  static std::atomic<int> calls = 0;
  const std::string err_path = ::testing::TempDir() + "commscope_stderr_" +
                               std::to_string(::getpid()) + "_" + std::to_string(++calls) + ".txt";
  Outcome o;
  FILE* p = ::popen((cmd + " 2>" + err_path).c_str(), "r");
  if (!p) return o;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) o.out.append(buf, n);
  const int rc = ::pclose(p);
  o.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  {
    std::ifstream f(err_path);
    o.err.assign(std::istreambuf_iterator<char>(f), {});
  }
  std::remove(err_path.c_str());
  return o;
}

// The outcomes of `cmds`, in their order, run `at_once` at a time. For many short launches
// that mostly wait (an mpirun that refuses a bad plan takes about 1 s of wall time and 0.2 s
// of CPU here): the test's assertions stay in its own thread, on the results.
inline std::vector<Outcome> run_shell_all(const std::vector<std::string>& cmds, int at_once = 4) {
  std::vector<Outcome> out(cmds.size());
  std::atomic<std::size_t> next = 0;
  std::vector<std::thread> workers;
  for (int w = 0; w < std::max(1, at_once); ++w)
    workers.emplace_back([&] {
      for (std::size_t i = next++; i < cmds.size(); i = next++) out[i] = run_shell(cmds[i]);
    });
  for (auto& t : workers) t.join();
  return out;
}

#ifdef MPIEXEC
// The outcomes of mpirun launches, each (ranks, the program and its arguments), run as
// run_shell_all runs them, each with a session folder of its own (mpiexec's tag).
inline std::vector<Outcome> run_mpi_all(const std::vector<std::pair<int, std::string>>& launches) {
  std::vector<std::string> cmds;
  for (const auto& [ranks, program] : launches)
    cmds.push_back(mpiexec(ranks, "_" + std::to_string(cmds.size())) + program);
  return run_shell_all(cmds);
}
#endif

}  // namespace commscope::testing
