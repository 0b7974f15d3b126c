// `commscope report DIR`: the HTML report of an output folder of `commscope characterize`
// (DIR/characterize.json) as one self-contained file. Flags -> report/html_pages.h -> file.
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
  cmd->add_option("dir", st->dir, "the folder holding characterize.json")->required();
  cmd->add_option("-o,--output", st->output,
                  "write the report to this file (whole or not at all) [DIR/report.html]");
  return {cmd, [st]() -> int {
            const std::string out = st->output.empty()
                                        ? (std::filesystem::path(st->dir) / "report.html").string()
                                        : st->output;
            if (Status s = check_output_path(out); !s.ok()) return fail(s.error().message);
            auto text = html::render_characterize_dir(st->dir);
            if (!text) return fail(text.error().message);
            if (Status s = write_file_atomic(out, *text); !s.ok()) return fail(s.error().message);
            std::fprintf(stderr, "commscope: wrote %s\n", out.c_str());
            return 0;
          }};
}

}  // namespace commscope::cli
