// `commscope fit`: alpha-beta fits of commscope-bench results, and the network profile that
// `predict --network profile.json` accepts.
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commscope/calib/alpha_beta.h"
#include "commscope/report/table.h"
#include "verbs.h"

namespace commscope::cli {

Verb add_fit(CLI::App& app) {
  struct State {
    std::string input, output, name = "measured", transport = "tcp";
    int nics = 1;
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
                  "network profile JSON to write (from the all-reduce fit)");
  cmd->add_option("--name", st->name, "profile name [measured]");
  cmd->add_option("--transport", st->transport, "tcp|ipoib|rdma|roce|slingshot [tcp]");
  cmd->add_option("--nics-per-node", st->nics,
                  "NICs the measured node used (bandwidth is per NIC port) [1]");
  cmd->add_option("--line-rate-gbps", st->line_rate_gbps, "NIC line rate [the measured rate]");
  return {cmd, [st]() -> int {
            auto measured = read_bench_json(st->input);
            if (!measured) return fail(measured.error().message);
            Table t;
            t.header = {"group",    "collective", "ranks", "sizes",
                        "alpha_us", "busbw_GBps", "r2",    "max_residual"};
            t.right = {false, false, true, true, true, true, true, true};
            const AlphaBetaFit* all_reduce = nullptr;
            bool all_reduce_inter = false;
            int ar_ranks = 0;
            std::vector<AlphaBetaFit> fits;
            fits.reserve(measured->size());
            for (const auto& m : *measured) {
              auto f = fit_alpha_beta(m.samples);
              if (!f) {
                print_warnings({fmt::format("{} over {} ranks: {}", to_string(m.collective),
                                            m.ranks, f.error().message)});
                continue;
              }
              fits.push_back(*f);
              if (f->clamped)
                print_warnings({fmt::format(
                    "{} {} over {} ranks: the unconstrained fit gave a negative {}; refitted "
                    "with it at 0 (a latency below what the sweep resolves, or small sizes faster "
                    "than the network: a shaper's burst, a cache)",
                    m.group, to_string(m.collective), m.ranks,
                    f->alpha == 0 ? "latency" : "time per byte")});
              double worst = 0;
              for (std::size_t i = 0; i < m.samples.size(); ++i)
                worst = std::max(worst, std::fabs(f->residuals[i]) / m.samples[i].seconds);
              t.add({m.group, std::string(to_string(m.collective)), std::to_string(m.ranks),
                     std::to_string(m.samples.size()), fmt::format("{:.2f}", f->alpha * 1e6),
                     fmt::format("{:.3f}", f->busbw(m.collective, m.ranks) / 1e9),
                     fmt::format("{:.4f}", f->r2), fmt::format("{:.1f}%", 100 * worst)});
              // The profile describes the network: the inter-node all-reduce when there is one,
              // else the all-reduce over the most ranks.
              const bool inter = m.group == "inter-node";
              if (m.collective == Collective::all_reduce &&
                  (inter ? !all_reduce_inter || m.ranks >= ar_ranks
                         : !all_reduce_inter && m.ranks >= ar_ranks)) {
                all_reduce = &fits.back(), ar_ranks = m.ranks;
                all_reduce_inter = all_reduce_inter || inter;
              }
            }
            std::string out = render_text(t, "");
            if (!st->output.empty()) {
              if (!all_reduce)
                return fail(
                    "--output: expected an all_reduce sweep in the results to make a profile from");
              if (st->nics < 1)
                return fail(
                    fmt::format("--nics-per-node: expected a positive integer, got {}", st->nics));
              const double gbps =
                  all_reduce->busbw(Collective::all_reduce, ar_ranks) * 8 / 1e9 / st->nics;
              // A ring all-reduce pays alpha over 2(n-1) steps: the per-step latency.
              const double latency_us =
                  std::max(all_reduce->alpha, 0.0) * 1e6 / std::max(2 * (ar_ranks - 1), 1);
              nlohmann::json p = {
                  {"name", st->name},
                  {"transport", st->transport},
                  {"line_rate_gbps", std::max(st->line_rate_gbps, gbps)},
                  {"achievable_gbps", gbps},
                  {"latency_us", std::max(latency_us, 0.01)},
                  {"sources",
                   {fmt::format("fitted by commscope fit from {} (all_reduce over {} ranks)",
                                st->input, ar_ranks)}}};
              auto fail_or = emit(p.dump(2) + "\n", st->output);
              if (fail_or != 0) return fail_or;
            }
            return emit(out, "");
          }};
}

}  // namespace commscope::cli
