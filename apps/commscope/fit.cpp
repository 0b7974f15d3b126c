// `commscope fit`: alpha-beta fits of commscope-bench results, and the network profile that
// `predict --network profile.json` accepts.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commscope/calib/alpha_beta.h"
#include "commscope/report/table.h"
#include "commscope/util/atomic_file.h"
#include "verbs.h"

namespace commscope::cli {

Verb add_fit(CLI::App& app) {
  struct State {
    std::string input, output;
    ProfileOptions profile;
    double line_rate_gbps = 0;
  };
  auto st = std::make_shared<State>();
  CLI::App* cmd = app.add_subcommand("fit",
                                     "Fit latency and bandwidth (t = alpha + beta x size) to each "
                                     "collective of a commscope-bench --format json "
                                     "run, print the fits and their residuals, and write a network "
                                     "profile for predict --network.");
  cmd->add_option("results", st->input, "commscope-bench --format json output")->required();
  cmd->add_option("-o,--output", st->output,
                  "network profile JSON to write (from the all-reduce fit); missing folders are "
                  "created");
  cmd->add_option("--name", st->profile.name, "profile name [measured]");
  cmd->add_option("--transport", st->profile.transport, "tcp|ipoib|rdma|roce|slingshot [tcp]");
  cmd->add_option("--nics-per-node", st->profile.nics_per_node,
                  "NICs the measured node used (bandwidth is per NIC port), 1 to 1024 [1]");
  CLI::Option* line = cmd->add_option("--line-rate-gbps", st->line_rate_gbps,
                                      "NIC line rate, Gbit/s [the measured rate]");
  return {
      cmd, [st, line]() -> int {
        ProfileOptions& po = st->profile;
        po.source = st->input;
        if (line->count() > 0) po.line_rate_gbps = st->line_rate_gbps;
        if (Status s = check_profile_options(po); !s.ok()) return fail(s.error().message);
        if (!st->output.empty())
          if (Status s = check_output_path(st->output); !s.ok()) return fail(s.error().message);
        auto measured = read_bench_json(st->input);
        if (!measured) return fail(measured.error().message);
        const BenchFits fits = fit_bench(*measured);
        print_warnings(fits.warnings);
        Table t;
        t.header = {"group",    "collective", "ranks", "sizes",
                    "alpha_us", "busbw_GBps", "r2",    "max_residual"};
        t.right = {false, false, true, true, true, true, true, true};
        for (const auto& r : fits.rows) {
          const auto& m = r.measured;
          t.add({m.group, std::string(to_string(m.collective)), std::to_string(m.ranks),
                 std::to_string(m.samples.size()), fmt::format("{:.2f}", r.fit.alpha * 1e6),
                 fmt::format("{:.3f}", r.fit.busbw(m.collective, m.ranks) / 1e9),
                 fmt::format("{:.4f}", r.fit.r2), fmt::format("{:.1f}%", 100 * r.worst_residual)});
        }
        if (!st->output.empty()) {
          auto profile = network_profile(fits, po);
          if (!profile) return fail(profile.error().message);
          if (int rc = emit(profile->dump(2) + "\n", st->output); rc != 0) return rc;
        }
        return emit(render_text(t, ""), "");
      }};
}

}  // namespace commscope::cli
