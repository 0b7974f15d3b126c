// `commscope predict`: iteration time and where it goes, for one scenario or a sweep.
#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

#include "common/scenario_options.h"
#include "commscope/report/predict.h"
#include "commscope/timeline/chrome.h"
#include "commscope/util/atomic_file.h"
#include "verbs.h"

namespace commscope::cli {

Verb add_predict(CLI::App& app) {
  struct State {
    ScenarioOptions scenario;
    OutputOptions out;
    std::string trace, scaling;
  };
  auto st = std::make_shared<State>();
  CLI::App* cmd = app.add_subcommand("predict",
                                     "Predict one training iteration: time, tokens/s, TFLOP/s per "
                                     "GPU, MFU, communication and bubble "
                                     "shares, memory per GPU. Numeric flags, --model, --system and "
                                     "--network take comma lists: every "
                                     "combination is predicted.");
  add_scenario_options(*cmd, st->scenario);
  add_output_options(*cmd, st->out);
  cmd->add_option("--trace", st->trace,
                  "write the predicted timeline as a Chrome trace (Perfetto) to this file");
  cmd->add_option(
      "--scaling", st->scaling,
      "strong (fixed global batch) or weak (fixed per-GPU batch): speedup, scaling efficiency and "
      "the seeds' projection against the first point");
  return {cmd, [st]() -> int {
            auto format = output_format(st->out);
            if (!format) return fail(format.error().message);
            Scaling scaling = Scaling::none;
            if (st->scaling == "strong")
              scaling = Scaling::strong;
            else if (st->scaling == "weak")
              scaling = Scaling::weak;
            else if (!st->scaling.empty())
              return fail(fmt::format("--scaling: expected strong or weak, got '{}'", st->scaling));
            auto inputs = scenario_inputs(st->scenario);
            if (!inputs) return fail(inputs.error().message);
            if (!st->trace.empty() && inputs->size() != 1)
              return fail(fmt::format("--trace: expected a single scenario, got {} combinations",
                                      inputs->size()));
            if (scaling == Scaling::strong && st->scenario.global_batch.empty()) {
              // Strong scaling keeps one global batch for every point: the largest point's default
              // (micro-batch x DP), so that the smaller points accumulate gradients.
              std::int64_t global = 0;
              for (const auto& in : *inputs)
                if (auto sc = resolve_scenario(in))
                  global = std::max(global, sc->plan.global_batch);
              if (global > 0)
                for (auto& in : inputs.value()) in.plan.global_batch = global;
            }
            const bool progress = inputs->size() > 20 && ::isatty(STDERR_FILENO);
            std::vector<PredictRow> rows;
            std::vector<std::string> skipped;
            std::string trace_json;
            for (std::size_t i = 0; i < inputs->size(); ++i) {
              if (progress)
                std::fprintf(stderr, "\rcommscope: predicting %zu/%zu", i + 1, inputs->size());
              auto sc = resolve_scenario((*inputs)[i]);
              if (!sc) {
                if (inputs->size() == 1) return fail(sc.error().message);
                skipped.push_back(sc.error().message);
                continue;
              }
              Workload w = build_workload(*sc);
              SimOptions so;
              so.timeline = !st->trace.empty();
              if (so.timeline)
                if (Status s = check_timeline_size(w); !s.ok()) return fail(s.error().message);
              Prediction p = simulate(w, so);
              rows.push_back(predict_row(w, p));
              if (inputs->size() == 1) print_warnings(sc->warnings);
              if (!rows.back().fits && inputs->size() == 1)
                print_warnings({fmt::format("does not fit: {} per GPU needed, {} available",
                                            human_bytes(Bytes(rows.back().memory_per_gpu)),
                                            human_bytes(sc->system.gpu.memory))});
              if (so.timeline) trace_json = chrome_trace_json(p.timeline);
            }
            if (progress) std::fprintf(stderr, "\r\033[K");
            for (const auto& s : skipped) print_warnings({"skipped: " + s});
            if (rows.empty())
              return fail(fmt::format("no valid scenario among {} combinations", inputs->size()));
            if (scaling != Scaling::none) add_scaling(rows);
            if (!st->trace.empty()) {
              Status s = write_file_atomic(st->trace, trace_json);
              if (!s.ok()) return fail(s.error().message);
            }
            return emit(render_predictions(rows, *format, scaling != Scaling::none), st->out.path);
          }};
}

}  // namespace commscope::cli
