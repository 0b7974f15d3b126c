// `commscope bench`: runs commscope-bench, the MPI program beside this binary. With --ranks N it
// launches mpirun itself for a quick local run (optionally over emulated nodes); otherwise run
// commscope-bench under mpirun, mpiexec or srun directly (docs/bench.md).
#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

#include "commscope/launch/bench_flags.h"
#include "commscope/launch/mpirun.h"
#include "commscope/launch/process.h"
#include "commscope/util/flag_error.h"
#include "verbs.h"

namespace commscope::cli {

Verb add_bench(CLI::App& app) {
  struct State {
    launch::JobOptions job;
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
                                     "--collectives ... --format table|json|csv; `bench -- --help` "
                                     "lists them). They are checked before mpirun starts.");
  cmd->add_option("--ranks", st->job.ranks, "ranks to launch on this machine, 1 to 256 [2]");
  cmd->add_option("--transport", st->job.transport, launch::kTransportHelp);
  cmd->add_option("--emulate", st->job.emulate, launch::kEmulateHelp);
  // commscope-bench's flags, with or without `--` before them, in the order given: the flags
  // before the first value are CLI11's extras, and from the first value on (a flag's value, or
  // `--`) everything is the positional list. (The list took the values and CLI11 the flags, so
  // `bench -b 8 -e 1K` ran commscope-bench with "-b -e 8 1K": found by probing, 2026-12-01.)
  cmd->add_option("args", st->args, "commscope-bench's flags (after --, or after this verb's)");
  cmd->allow_extras();
  cmd->positionals_at_end();
  return {cmd, [st, cmd]() -> int {
            std::vector<std::string> args = cmd->remaining();
            args.insert(args.end(), st->args.begin(), st->args.end());
            std::erase(args, "--");
            // This verb's own flags go first: after commscope-bench's they would be its.
            for (const std::string& a : args)
              for (const char* own : {"--ranks", "--transport", "--emulate"})
                if (a == own || a.rfind(std::string(own) + "=", 0) == 0)
                  return fail(fmt::format(
                      "bench: {}: expected before commscope-bench's flags (bench {} ... -- "
                      "-b 8 -e 128M), got it among them",
                      own, own));
            // commscope-bench's flags, parsed and checked here by the same definition before
            // anything is launched (launch/bench_flags.h).
            launch::BenchFlags flags;
            CLI::App program{"commscope-bench: collective benchmarks over MPI"};
            program.name("commscope-bench");
            launch::add_bench_flags(program, flags);
            try {
              std::vector<std::string> reversed(args.rbegin(), args.rend());
              program.parse(reversed);
            } catch (const CLI::CallForHelp&) {
              std::fputs(program.help().c_str(), stdout);
              return 0;
            } catch (const CLI::ParseError& ex) {
              return fail(fmt::format("bench: {} (commscope-bench's flags, see bench -- --help)",
                                      util::flag_error(program, ex)));
            }
            if (Status s = launch::check_job_options(st->job); !s.ok())
              return fail(s.error().message);
            auto sweep = launch::check_bench_flags(flags, st->job.ranks);
            if (!sweep) return fail(sweep.error().message);
            // Every rank runs on this machine: their buffers together must fit its memory.
            if (Status s = launch::check_bench_memory(flags, *sweep, st->job.ranks, st->job.ranks);
                !s.ok())
              return fail(s.error().message);
            if (::isatty(STDERR_FILENO) == 1 && !flags.progress)
              args.insert(args.begin(), "--progress");
            // The traffic report goes with the table, or beside a json/csv document.
            std::FILE* report = flags.format == "table" ? stdout : stderr;
            auto rc =
                launch::run_mpi_job(launch::self_dir() + "/commscope-bench", args, st->job, report);
            if (!rc.ok()) return fail(rc.error().message);
            if (*rc > 1)  // 1: wrong values, reported by commscope-bench itself
              return fail(
                  fmt::format("bench: the MPI job ended with status {}: a rank failed or died (see "
                              "mpirun's message above)",
                              *rc));
            return *rc;
          }};
}

}  // namespace commscope::cli
