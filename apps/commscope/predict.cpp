// `commscope predict`: iteration time and where it goes, for one scenario or a sweep.
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "common/scenario_options.h"
#include "commscope/report/html_pages.h"
#include "commscope/report/predict.h"
#include "commscope/report/seeds.h"
#include "commscope/timeline/chrome.h"
#include "commscope/util/atomic_file.h"
#include "embed.h"
#include "verbs.h"

namespace commscope::cli {

namespace {
// `predict --scenario seeds`: every run of the scenario, then the comparison with the headlines.
int run_seeds_scenario(const CLI::App& cmd, const std::string& name, Format format,
                       const std::string& path, const std::string& html_path) {
  const std::string given = first_scenario_flag_given(cmd);
  if (!given.empty())
    return fail(
        fmt::format("--scenario: cannot be combined with {} (the scenario sets the runs)", given));
  for (const char* other : {"--trace", "--scaling", "--sort", "--top"})
    if (cmd.count(other) > 0)
      return fail(fmt::format("--scenario: cannot be combined with {}", other));
  if (Status s = check_outputs({{"-o/--output", path}, {"--html", html_path}}); !s.ok())
    return fail(s.error().message);
  auto scenario = load_seeds_scenario(name);
  if (!scenario) return fail(scenario.error().message);
  auto result = predict_seeds(*scenario);
  if (!result) return fail(result.error().message);
  if (result->do_not_fit > 0)
    print_warnings(
        {fmt::format("{} of {} seed runs do not fit in GPU memory (their fits column "
                     "says no; the comparisons leave them out)",
                     result->do_not_fit, result->rows.size())});
  auto page = html_output(html_path, [&] { return html::seeds_page(*result); });
  if (!page) return fail(page.error().message);
  return emit_with(render_seeds(*result, format), path, {{"--html", html_path, *page}});
}
}  // namespace

Verb add_predict(CLI::App& app) {
  struct State {
    ScenarioOptions scenario;
    OutputOptions out;
    std::string trace, scaling, sort;
    std::int64_t top = 0;
    std::string scenario_name;  // --scenario
    std::string html;
  };
  auto st = std::make_shared<State>();
  CLI::App* cmd = app.add_subcommand("predict",
                                     "Predict one training iteration: time, tokens/s, TFLOP/s per "
                                     "GPU, MFU, communication and bubble "
                                     "shares, memory per GPU. The flags marked (comma list) "
                                     "below take comma lists: every "
                                     "combination is predicted.");
  add_scenario_options(*cmd, st->scenario);
  add_output_options(*cmd, st->out);
  cmd->add_option("--trace", st->trace,
                  "write the predicted timeline as a Chrome trace (Perfetto) to this file");
  cmd->add_option(
      "--scaling", st->scaling,
      "strong (fixed global batch) or weak (fixed per-GPU batch): speedup, scaling efficiency and "
      "the seeds' projection against the first point");
  cmd->add_option("--sort", st->sort,
                  "order a sweep's rows: time|memory (ascending), tokens|mfu (descending) "
                  "[the sweep's order]");
  cmd->add_option("--top", st->top,
                  "keep the first K rows after sorting (by time unless --sort says) [0: all]");
  cmd->add_option("--scenario", st->scenario_name,
                  "seeds: the seed studies' runs (UC Merced TCP/IPoIB/RDMA; Polaris vs ThetaGPU "
                  "ZeRO), their rows and a comparison with the studies' headline numbers "
                  "(docs/seeds.md); replaces the scenario flags");
  cmd->add_option("--html", st->html,
                  "also write a self-contained HTML report (time distribution, collectives, "
                  "tokens/s: charts beside their tables; docs/report.md) to this file");
  return {cmd, [st, cmd]() -> int {
            auto format = output_format(st->out);
            if (!format) return fail(format.error().message);
            if (cmd->count("--scenario") > 0)
              return run_seeds_scenario(*cmd, st->scenario_name, *format, st->out.path, st->html);
            SweepOptions so;
            if (st->scaling == "strong")
              so.scaling = Scaling::strong;
            else if (st->scaling == "weak")
              so.scaling = Scaling::weak;
            else if (!st->scaling.empty())
              return fail(fmt::format("--scaling: expected strong or weak, got '{}'", st->scaling));
            if (!st->sort.empty()) {
              auto key = sort_key_from_name(st->sort);
              if (!key)
                return fail(fmt::format("--sort: expected time, tokens, mfu or memory, got '{}'",
                                        st->sort));
              so.sort = *key;
            }
            so.top = st->top;
            so.trace = !st->trace.empty();
            auto inputs = scenario_inputs(st->scenario);
            if (!inputs) return fail(inputs.error().message);
            if (Status s = check_outputs(
                    {{"-o/--output", st->out.path}, {"--trace", st->trace}, {"--html", st->html}});
                !s.ok())
              return fail(s.error().message);
            // Progress on a terminal once a sweep has run for 2 s, at most ten updates a second.
            const bool tty = ::isatty(STDERR_FILENO);
            const auto t0 = std::chrono::steady_clock::now();
            auto last = t0;
            bool shown = false;
            if (tty)
              so.progress = [&](std::size_t done, std::size_t total) {
                const auto now = std::chrono::steady_clock::now();
                if (now - t0 < std::chrono::seconds(2) ||
                    (now - last < std::chrono::milliseconds(100) && done < total))
                  return;
                last = now;
                shown = true;
                std::fprintf(stderr, "\rcommscope: predicting %zu/%zu", done, total);
              };
            so.progress = with_interrupt_check(std::move(so.progress));  // Ctrl-C in Python
            auto result = predict_sweep(*inputs, so);
            if (shown) std::fprintf(stderr, "\r\033[K");
            if (!result) return fail(result.error().message);
            print_warnings(result->warnings);
            auto page = html_output(st->html, [&] {
              return html::predict_page(result->rows, so.scaling != Scaling::none);
            });
            if (!page) return fail(page.error().message);
            // All the files or none (-o /dev/full replaced --html and --trace, found by
            // probing, 2026-12-02).
            return emit_with(
                render_predictions(result->rows, *format, so.scaling != Scaling::none),
                st->out.path,
                {{"--trace", so.trace ? st->trace : std::string(),
                  so.trace ? trace_file_bytes(st->trace, result->trace_json) : std::string()},
                 {"--html", st->html, *page}});
          }};
}

}  // namespace commscope::cli
