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
  // describe takes one value a flag, so its help says no "(comma list)" (a list is refused:
  // "this verb does not sweep"; the mark misled, found by probing, 2026-12-02).
  for (CLI::Option* o : cmd->get_options()) {
    const std::string mark = " (comma list)";
    if (const std::string& d = o->get_description(); d.ends_with(mark))
      o->description(d.substr(0, d.size() - mark.size()));
  }
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
