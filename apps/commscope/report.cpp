// `commscope report DIR`: the HTML report of an output folder of `commscope characterize`
// (DIR/characterize.json) as one self-contained file; `commscope report seeds`: the seed
// studies' scenario as commscope predicts it. Flags -> report/html_pages.h -> file.
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "commscope/report/html_pages.h"
#include "commscope/util/atomic_file.h"
#include "verbs.h"

namespace commscope::cli {

Verb add_report(CLI::App& app) {
  struct State {
    std::string dir, output;
  };
  auto st = std::make_shared<State>();
  CLI::App* cmd = app.add_subcommand(
      "report",
      "Write the HTML report of a `commscope characterize` output folder: time distribution "
      "per strategy and network, network ratios, per-collective shares, achieved Gb/s per node "
      "over time, predicted against measured, busbw measured against modelled, the projection "
      "against measurement. One self-contained file that opens offline (docs/report.md).");
  cmd->add_option("dir", st->dir,
                  "the folder holding characterize.json, or `seeds`: the seed studies as "
                  "commscope predicts them (as `predict --scenario seeds --html`)")
      ->required();
  cmd->add_option("-o,--output", st->output,
                  "write the report to this file (whole or not at all) [DIR/report.html; "
                  "seeds: seeds-report.html]");
  return {cmd, [st]() -> int {
            // A scenario name that is not a folder here: the scenario's report.
            std::error_code ec;
            if (st->dir == "seeds" && !std::filesystem::is_directory(st->dir, ec)) {
              const std::string out = st->output.empty() ? "seeds-report.html" : st->output;
              if (Status s = check_outputs({{"-o/--output", out}}); !s.ok())
                return fail(s.error().message);
              auto scenario = load_seeds_scenario(st->dir);
              if (!scenario) return fail(scenario.error().message);
              auto result = predict_seeds(*scenario);
              if (!result) return fail(result.error().message);
              auto page = html::render(html::seeds_page(*result));
              if (!page) return fail(page.error().message);
              if (int rc = write_outputs({{"-o/--output", out, *page}}); rc != 0) return rc;
              std::fprintf(stderr, "commscope: wrote %s\n", out.c_str());
              return 0;
            }
            const std::string out = st->output.empty()
                                        ? (std::filesystem::path(st->dir) / "report.html").string()
                                        : st->output;
            // The folder's characterize.json is an input too.
            if (Status s = check_outputs(
                    {{"-o/--output", out}},
                    {(std::filesystem::path(st->dir) / "characterize.json").string()});
                !s.ok())
              return fail(s.error().message);
            auto text = html::render_characterize_dir(st->dir);
            if (!text) return fail(text.error().message);
            if (int rc = write_outputs({{"-o/--output", out, *text}}); rc != 0) return rc;
            std::fprintf(stderr, "commscope: wrote %s\n", out.c_str());
            return 0;
          }};
}

}  // namespace commscope::cli
