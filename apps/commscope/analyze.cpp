// `commscope analyze`: where the time went in PyTorch profiler (Kineto) and Chrome traces.
// Flags -> read_traces (timeline) -> analyze (report) -> print.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commscope/report/analyze.h"
#include "commscope/report/diff.h"
#include "commscope/report/html_pages.h"
#include "commscope/timeline/chrome.h"
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
    std::string convention = "commscope";
    bool include_last_step = false;
    std::vector<std::string> diff;  // BASE NEW
    std::string diff_trace;
  };
  auto st = std::make_shared<State>();
  CLI::App* cmd = app.add_subcommand(
      "analyze",
      "Where the time went in PyTorch profiler (Kineto) or commscope Chrome traces, one file per "
      "rank (.json or .json.gz) or a directory of them: compute, exposed and overlapped "
      "communication, memory copies, idle; per ProfilerStep; per collective with algbw/busbw; "
      "stragglers across ranks; top kernels. With several ranks: clocks aligned on collective end "
      "times, last arrivals, the critical path of the first step. --convention hta: Holistic "
      "Trace Analysis 0.6.1's figures; --diff BASE NEW: what changed between two runs.");
  cmd->add_option("traces", st->inputs, "trace files or directories");
  add_output_options(*cmd, st->out);
  cmd->add_option("--rank", st->rank,
                  "rank of a single trace without distributedInfo or rank in its name");
  cmd->add_option("-j,--jobs", st->jobs, "files read in parallel (at least 1) [all cores]");
  cmd->add_option("--top", st->top, "kernels listed [15]");
  cmd->add_option(
      "--max-events", st->max_events,
      "events kept per file (kernels, copies, steps; with --convention hta also runtime calls) "
      "before the file is refused "
      "[derived from available memory]");
  cmd->add_flag("--strict", st->strict,
                "any unreadable file is fatal (by default it is reported and skipped)");
  cmd->add_option("--html", st->html,
                  "also write a self-contained HTML report (breakdown per rank, time and "
                  "bandwidth per collective: charts beside their tables; docs/report.md) to this "
                  "file");
  cmd->add_option("--convention", st->convention,
                  "commscope: compute/exposed/overlapped comm/memcpy/idle over the GPU timeline; "
                  "hta: Holistic Trace Analysis 0.6.1's temporal breakdown (idle, compute, "
                  "non-compute, kernel time) and comm-comp overlap [commscope]");
  cmd->add_flag("--include-last-step", st->include_last_step,
                "with --convention hta: keep the last ProfilerStep (HTA's "
                "include_last_profiler_step)");
  cmd->add_option("--diff", st->diff,
                  "BASE NEW: compare two runs (each a trace or a directory of them) step by step "
                  "and collective by collective")
      ->expected(2);
  cmd->add_option("--diff-trace", st->diff_trace,
                  "with --diff: write both runs on one Chrome trace timeline to FILE");
  return {
      cmd, [st, cmd]() -> int {
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
        if (st->diff.empty() && st->inputs.empty())
          return fail("analyze: expected trace files or directories (or --diff BASE NEW)");
        if (!st->diff.empty() && !st->inputs.empty())
          return fail(fmt::format("--diff: expected two runs and no other traces, got '{}' besides",
                                  st->inputs[0]));
        if (st->include_last_step && st->convention != "hta")
          return fail("--include-last-step: expected --convention hta with it");
        if (!st->diff_trace.empty() && st->diff.empty())
          return fail("--diff-trace: expected --diff BASE NEW with it");
        if (st->convention == "hta" && !st->diff.empty())
          return fail(
              "--convention: expected no --diff with hta (a diff compares commscope's own "
              "breakdowns)");
        if (!st->html.empty() && !st->diff.empty())
          return fail(
              "--html: expected no --diff with it (a diff is reported as text, csv or json)");
        const std::vector<std::pair<std::string, std::string>> outputs = {
            {"-o/--output", st->out.path}, {"--html", st->html}, {"--diff-trace", st->diff_trace}};
        if (Status s = check_outputs(outputs); !s.ok()) return fail(s.error().message);
        TraceReadOptions o;
        o.jobs = static_cast<int>(std::min<long long>(st->jobs, 1024));
        o.rank = static_cast<int>(st->rank);
        o.strict = st->strict;
        o.hta_view = st->convention == "hta";
        o.limits.max_events = static_cast<std::uint64_t>(st->max_events);
        if (!st->diff.empty()) {
          auto base = read_traces({st->diff[0]}, o);
          if (!base) return fail(base.error().message);
          auto next = read_traces({st->diff[1]}, o);
          if (!next) return fail(next.error().message);
          for (const auto* s : {&*base, &*next}) {
            for (const auto& b : s->bad) print_warnings({"skipped " + b});
            print_warnings(s->warnings);
          }
          if (Status s = check_outputs(outputs, read_paths(*base, &*next)); !s.ok())
            return fail(s.error().message);
          const TraceDiff d =
              diff_traces(base->files, next->files, static_cast<std::size_t>(st->top));
          // Runs with no rank in common compare nothing (an all-zero table, status 0, found by
          // probing, 2026-11-30).
          if (d.common_ranks.empty())
            return fail(fmt::format(
                "--diff: expected two runs with a rank in common, got ranks {} in {} and {} in {} "
                "(a single trace's rank can be set with --rank)",
                fmt::join(d.base_ranks, ","), st->diff[0], fmt::join(d.new_ranks, ","),
                st->diff[1]));
          if (!st->diff_trace.empty()) {
            const Timeline t = diff_timeline(base->files, next->files);
            if (Status s = check_chrome_trace(t, "--diff-trace"); !s.ok())
              return fail(s.error().message);
            return emit_with(render_diff(d, *format), st->out.path,
                             {{"--diff-trace", st->diff_trace,
                               trace_file_bytes(st->diff_trace, chrome_trace_json(t))}});
          }
          return emit(render_diff(d, *format), st->out.path);
        }
        auto set = read_traces(st->inputs, o);
        if (!set) return fail(set.error().message);
        // The traces a folder held are inputs too: -o naming one replaced it (found by
        // probing, 2026-12-02).
        if (Status s = check_outputs(outputs, read_paths(*set)); !s.ok())
          return fail(s.error().message);
        for (const auto& b : set->bad) print_warnings({"skipped " + b});
        print_warnings(set->warnings);
        Analysis a = analyze(set->files, static_cast<std::size_t>(st->top));
        a.bad_files = set->bad;
        a.convention = st->convention;
        if (a.convention == "hta") a.hta = hta_breakdowns(set->files, {st->include_last_step});
        auto page = html_output(st->html, [&] { return html::analysis_page(a); });
        if (!page) return fail(page.error().message);
        return emit_with(render_analysis(a, *format), st->out.path, {{"--html", st->html, *page}});
      }};
}

}  // namespace commscope::cli
