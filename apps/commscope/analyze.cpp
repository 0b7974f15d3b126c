// `commscope analyze`: where the time went in PyTorch profiler (Kineto) and Chrome traces.
// Flags -> read_traces (timeline) -> analyze (report) -> print.
#include <fmt/format.h>

#include "commscope/report/analyze.h"
#include "commscope/report/html_pages.h"
#include "commscope/util/atomic_file.h"
#include "verbs.h"

namespace commscope::cli {

Verb add_analyze(CLI::App& app) {
  struct State {
    std::vector<std::string> inputs;
    OutputOptions out;
    long long rank = -1, jobs = 0, top = 15, max_events = 0;
    bool strict = false;
    std::string html;
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
  cmd->add_option("--html", st->html,
                  "also write a self-contained HTML report (breakdown per rank, time and "
                  "bandwidth per collective: charts beside their tables; docs/report.md) to this "
                  "file");
  return {cmd, [st, cmd]() -> int {
            auto format = output_format(st->out);
            if (!format) return fail(format.error().message);
            auto bad = [](const char* flag, const char* expected, long long v) {
              return fail(fmt::format("{}: expected {}, got '{}'", flag, expected, v));
            };
            if (st->top < 0) return bad("--top", "a non-negative integer", st->top);
            if (cmd->count("--jobs") && st->jobs < 1)
              return bad("--jobs", "a positive integer", st->jobs);
            if (cmd->count("--rank") && (st->rank < 0 || st->rank >= (1 << 24)))
              return bad("--rank", "a non-negative integer below 2^24", st->rank);
            if (cmd->count("--max-events") && st->max_events < 1)
              return bad("--max-events", "a positive integer", st->max_events);
            if (Status s = st->html.empty() ? Status{} : check_output_path(st->html); !s.ok())
              return fail("--html: " + s.error().message);
            TraceReadOptions o;
            o.jobs = static_cast<int>(std::min<long long>(st->jobs, 1024));
            o.rank = static_cast<int>(st->rank);
            o.strict = st->strict;
            o.limits.max_events = static_cast<std::uint64_t>(st->max_events);
            auto set = read_traces(st->inputs, o);
            if (!set) return fail(set.error().message);
            for (const auto& b : set->bad) print_warnings({"skipped " + b});
            print_warnings(set->warnings);
            Analysis a = analyze(set->files, static_cast<std::size_t>(st->top));
            a.bad_files = set->bad;
            if (!st->html.empty())
              if (Status s = html::write(st->html, html::analysis_page(a)); !s.ok())
                return fail("--html: " + s.error().message);
            return emit(render_analysis(a, *format), st->out.path);
          }};
}

}  // namespace commscope::cli
