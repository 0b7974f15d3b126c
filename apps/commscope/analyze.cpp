// `commscope analyze`: where the time went in PyTorch profiler (Kineto) and Chrome traces.
// Flags -> read_traces (timeline) -> analyze (report) -> print.
#include <fmt/format.h>

#include "commscope/report/analyze.h"
#include "verbs.h"

namespace commscope::cli {

Verb add_analyze(CLI::App& app) {
  struct State {
    std::vector<std::string> inputs;
    OutputOptions out;
    long long rank = -1, jobs = 0, top = 15, max_events = 0;
    bool strict = false;
    std::string convention = "commscope";
    bool include_last_step = false;
  };
  auto st = std::make_shared<State>();
  CLI::App* cmd = app.add_subcommand(
      "analyze",
      "Where the time went in PyTorch profiler (Kineto) or commscope Chrome traces, one file per "
      "rank (.json or .json.gz) or a directory of them: compute, exposed and overlapped "
      "communication, memory copies, idle; per ProfilerStep; per collective with algbw/busbw; "
      "stragglers across ranks; top kernels.");
  cmd->add_option("traces", st->inputs, "trace files or directories")->required();
  add_output_options(*cmd, st->out);
  cmd->add_option("--rank", st->rank,
                  "rank of a single trace without distributedInfo or rank in its name");
  cmd->add_option("-j,--jobs", st->jobs, "files read in parallel (at least 1) [all cores]");
  cmd->add_option("--top", st->top, "kernels listed [15]");
  cmd->add_option("--max-events", st->max_events,
                  "events kept per file (kernels, copies, steps) before the file is refused "
                  "[derived from available memory]");
  cmd->add_flag("--strict", st->strict,
                "any unreadable file is fatal (by default it is reported and skipped)");
  cmd->add_option("--convention", st->convention,
                  "commscope: compute/exposed/overlapped comm/memcpy/idle over the GPU timeline; "
                  "hta: Holistic Trace Analysis 0.6.1's temporal breakdown (idle, compute, "
                  "non-compute, kernel time) and comm-comp overlap [commscope]");
  cmd->add_flag("--include-last-step", st->include_last_step,
                "with --convention hta: keep the last ProfilerStep (HTA's "
                "include_last_profiler_step)");
  return {cmd, [st, cmd]() -> int {
            auto format = output_format(st->out);
            if (!format) return fail(format.error().message);
            auto bad = [](const char* flag, const char* expected, long long v) {
              return fail(fmt::format("{}: expected {}, got '{}'", flag, expected, v));
            };
            if (st->top < 0) return bad("--top", "a non-negative integer", st->top);
            if (st->convention != "commscope" && st->convention != "hta")
              return fail(
                  fmt::format("--convention: expected hta or commscope, got '{}'", st->convention));
            if (cmd->count("--jobs") && st->jobs < 1)
              return bad("--jobs", "a positive integer", st->jobs);
            if (cmd->count("--rank") && (st->rank < 0 || st->rank >= (1 << 24)))
              return bad("--rank", "a non-negative integer below 2^24", st->rank);
            if (cmd->count("--max-events") && st->max_events < 1)
              return bad("--max-events", "a positive integer", st->max_events);
            TraceReadOptions o;
            o.jobs = static_cast<int>(std::min<long long>(st->jobs, 1024));
            o.rank = static_cast<int>(st->rank);
            o.strict = st->strict;
            o.hta_view = st->convention == "hta";
            o.limits.max_events = static_cast<std::uint64_t>(st->max_events);
            auto set = read_traces(st->inputs, o);
            if (!set) return fail(set.error().message);
            for (const auto& b : set->bad) print_warnings({"skipped " + b});
            print_warnings(set->warnings);
            Analysis a = analyze(set->files, static_cast<std::size_t>(st->top));
            a.bad_files = set->bad;
            a.convention = st->convention;
            if (a.convention == "hta") a.hta = hta_breakdowns(set->files, {st->include_last_step});
            return emit(render_analysis(a, *format), st->out.path);
          }};
}

}  // namespace commscope::cli
