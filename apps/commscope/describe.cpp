// `commscope describe`: parameters, FLOPs, memory per rank and communication volume of one
// (model, plan, system), before anything runs.
#include <fmt/format.h>

#include "common/scenario_options.h"
#include "commscope/report/describe.h"
#include "verbs.h"

namespace commscope::cli {

Verb add_describe(CLI::App& app) {
  struct State {
    ScenarioOptions scenario;
    OutputOptions out;
  };
  auto st = std::make_shared<State>();
  CLI::App* cmd = app.add_subcommand("describe",
                                     "Parameters, FLOPs, memory per rank (and whether it fits) and "
                                     "communication per iteration of a model "
                                     "under a parallel plan on a system. Defaults: GPT-2 Large, "
                                     "data parallel on 4 Polaris nodes.");
  add_scenario_options(*cmd, st->scenario);
  add_output_options(*cmd, st->out);
  return {cmd, [st]() -> int {
            auto format = output_format(st->out);
            if (!format) return fail(format.error().message);
            auto input = scenario_input(st->scenario);
            if (!input) return fail(input.error().message);
            auto sc = resolve_scenario(*input);
            if (!sc) return fail(sc.error().message);
            Workload w = build_workload(*sc);
            Description d = describe(w);
            print_warnings(d.warnings);
            return emit(render_describe(w, d, *format), st->out.path);
          }};
}

}  // namespace commscope::cli
