// `commscope fit`: alpha-beta fits and measured bus-bandwidth curves of commscope-bench results
// or nccl-tests/rccl-tests logs, and the network profile that `predict --network` accepts.
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commscope/calib/alpha_beta.h"
#include "commscope/calib/nccl_tests.h"
#include "commscope/report/table.h"
#include "commscope/spec/limits.h"
#include "commscope/util/atomic_file.h"
#include "commscope/util/input_file.h"
#include "verbs.h"

namespace commscope::cli {

Verb add_fit(CLI::App& app) {
  struct State {
    std::vector<std::string> inputs;
    std::string output, format = "auto", collective;
    ProfileOptions profile;
    double line_rate_gbps = 0;
    OsuRun osu;
  };
  auto st = std::make_shared<State>();
  CLI::App* cmd = app.add_subcommand("fit",
                                     "Fit latency and bandwidth (t = alpha + beta x size) to each "
                                     "collective of commscope-bench --format json runs, "
                                     "nccl-tests/rccl-tests logs or OSU Micro-Benchmarks logs, "
                                     "print the fits and their "
                                     "residuals, and write a network profile (the all-reduce fit "
                                     "and every measured busbw curve) for predict --network.");
  cmd->add_option("results", st->inputs,
                  "commscope-bench --format json output, nccl-tests/rccl-tests text output "
                  "(all_reduce_perf ...) or OSU Micro-Benchmarks text output (osu_allreduce, "
                  "osu_allgather, osu_reduce_scatter, osu_alltoall, osu_bcast, osu_reduce, "
                  "osu_latency, osu_bw, osu_bibw, osu_mbw_mr -p 1), one or more files")
      ->required();
  cmd->add_option("--format", st->format,
                  "auto|bench-json|nccl-tests|osu: how to read the inputs [auto: by content]");
  cmd->add_option("--collective", st->collective,
                  "collective of nccl-tests logs that do not name their program "
                  "(all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all, send)");
  CLI::Option* ranks =
      cmd->add_option("--ranks", st->osu.ranks,
                      "processes of the OSU collective runs (mpirun -np N), which OSU does not "
                      "print (the point-to-point tests: 2)");
  CLI::Option* nodes = cmd->add_option(
      "--nodes", st->osu.nodes,
      "nodes the OSU runs spanned: 1 is intra-node, more inter-node (curves for predict "
      "--network need it) [not known]");
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
      cmd, [st, line, ranks, nodes]() -> int {
        ProfileOptions& po = st->profile;
        for (const auto& in : st->inputs) po.source += (po.source.empty() ? "" : ", ") + in;
        if (line->count() > 0) po.line_rate_gbps = st->line_rate_gbps;
        if (Status s = check_profile_options(po); !s.ok()) return fail(s.error().message);
        const auto format = measured_format_from_name(st->format);
        if (!format)
          return fail("fit: --format: expected auto, bench-json, nccl-tests or osu, got '" +
                      st->format + "'");
        if (ranks->count() > 0 && (st->osu.ranks < 2 || st->osu.ranks > limits::kMaxGpus))
          return fail(fmt::format("fit: --ranks: expected an integer from 2 to {}, got '{}'",
                                  limits::kMaxGpus, st->osu.ranks));
        if (nodes->count() > 0 &&
            (st->osu.nodes < 1 || (st->osu.ranks > 0 && st->osu.nodes > st->osu.ranks) ||
             st->osu.nodes > limits::kMaxGpus))
          return fail(
              fmt::format("fit: --nodes: expected an integer from 1 to the ranks ({}), got '{}'",
                          st->osu.ranks > 0 ? st->osu.ranks : limits::kMaxGpus, st->osu.nodes));
        std::optional<Collective> collective;
        if (!st->collective.empty()) {
          Collective c;
          if (!collective_from_name(st->collective, c) || to_string(c) != st->collective)
            return fail(
                "fit: --collective: expected a collective (all_reduce, all_gather, "
                "reduce_scatter, broadcast, reduce, all_to_all, send), got '" +
                st->collective + "'");
          collective = c;
        }
        if (!st->output.empty())
          if (Status s = check_outputs({{"-o/--output", st->output}}); !s.ok())
            return fail(s.error().message);
        if (Status s = check_distinct_files(st->inputs, "log"); !s.ok())
          return fail(s.error().message);
        std::vector<MeasuredCollective> all;
        for (const auto& in : st->inputs) {
          auto measured = read_measured(in, *format, collective, st->osu);
          if (!measured) return fail(measured.error().message);
          for (auto& m : *measured) {
            print_notes(m.notes);
            all.push_back(std::move(m));
          }
        }
        // A flag that no log took is said, not ignored in silence (--collective beside
        // logs that name their program, --ranks and --nodes beside logs that state them;
        // found by probing, 2026-12-02).
        std::vector<std::string> unused;
        if (collective && std::none_of(all.begin(), all.end(), [&](const MeasuredCollective& m) {
              return m.collective == *collective;
            }))
          unused.push_back(
              fmt::format("--collective {}: taken by no log (each names its program or its columns "
                          "say)",
                          st->collective));
        if (ranks->count() > 0 &&
            std::none_of(all.begin(), all.end(),
                         [&](const MeasuredCollective& m) { return m.ranks == st->osu.ranks; }))
          unused.push_back(fmt::format("--ranks {}: taken by no log (each states its own ranks)",
                                       st->osu.ranks));
        if (nodes->count() > 0 &&
            std::none_of(all.begin(), all.end(),
                         [&](const MeasuredCollective& m) { return m.nodes == st->osu.nodes; }))
          unused.push_back(fmt::format("--nodes {}: taken by no log (each states its own nodes)",
                                       st->osu.nodes));
        print_warnings(unused);
        const BenchFits fits = fit_bench(all);
        print_warnings(fits.warnings);
        // Nothing fitted is a failure, not an empty table (an empty results array, or no
        // collective with two sizes, exited 0).
        if (fits.rows.empty())
          return fail(fmt::format(
              "fit: expected a collective measured at two or more sizes in {}, got none{}",
              fmt::join(st->inputs, ", "),
              fits.warnings.empty() ? "" : " (the warnings above say why)"));
        Table t;
        t.header = {"group",    "collective", "ranks",          "nodes", "sizes",
                    "alpha_us", "busbw_GBps", "max_busbw_GBps", "r2",    "max_residual"};
        t.right = {false, false, true, true, true, true, true, true, true, true};
        for (const auto& r : fits.rows) {
          const auto& m = r.measured;
          double peak = 0;  // the highest measured busbw, from the times
          for (const auto& s : m.samples)
            peak = std::max(peak, s.bytes * bus_factor(m.collective, m.ranks) / s.seconds);
          t.add({m.group, std::string(to_string(m.collective)), std::to_string(m.ranks),
                 m.nodes > 0 ? std::to_string(m.nodes) : "-", std::to_string(m.samples.size()),
                 fmt::format("{:.2f}", r.fit.alpha * 1e6),
                 fmt::format("{:.3f}", r.fit.busbw(m.collective, m.ranks) / 1e9),
                 fmt::format("{:.3f}", peak / 1e9), fmt::format("{:.4f}", r.fit.r2),
                 fmt::format("{:.1f}%", 100 * r.worst_residual)});
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
