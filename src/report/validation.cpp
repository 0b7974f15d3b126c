// Predicted vs measured: the rows, the summaries, and their printing.
#include "commscope/report/validation.h"

#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace commscope {

Validation validate_runs(const std::vector<PreparedRun>& runs, const std::string& split,
                         const std::function<void(std::size_t)>& progress) {
  Validation v;
  std::map<std::pair<std::string, std::string>, std::vector<double>> errors;  // (file, split)
  for (const auto& r : runs) {
    if (!in_split(r, split)) continue;
    const Scenario& sc = r.workload.scenario;
    ValidationRow row;
    row.file = r.source.substr(r.source.find_last_of('/') + 1);
    row.line = r.line;
    row.scenario = &sc;
    row.measured_s = r.measured_s;
    row.predicted_s = predicted_time(r, sc.system.calibration);
    row.error = row.predicted_s / r.measured_s - 1.0;
    errors[{row.file, "all"}].push_back(row.error);
    errors[{row.file, r.index % 2 ? "odd" : "even"}].push_back(row.error);
    errors[{"(all files)", "all"}].push_back(row.error);
    v.rows.push_back(std::move(row));
    if (progress) progress(v.rows.size());
  }
  for (const auto& [key, e] : errors) v.summary.emplace_back(key, summarize(e));
  return v;
}

std::string render_validation(const Validation& v, Format f, const std::string& system,
                              bool summary_only) {
  Table rows;
  rows.header = {"file", "line", "model", "gpus",       "tp",          "pp",
                 "dp",   "mbs",  "gbs",   "measured_s", "predicted_s", "error"};
  rows.right = {false, true, false, true, true, true, true, true, true, true, true, true};
  nlohmann::json jrows = nlohmann::json::array();
  for (const auto& r : v.rows) {
    const Scenario& sc = *r.scenario;
    rows.add({r.file, std::to_string(r.line), sc.model.name, std::to_string(sc.gpus()),
              std::to_string(sc.plan.tp), std::to_string(sc.plan.pp), std::to_string(sc.plan.dp),
              std::to_string(sc.plan.micro_batch), std::to_string(sc.plan.global_batch),
              fmt::format("{:.4f}", r.measured_s), fmt::format("{:.4f}", r.predicted_s),
              fmt::format("{:+.1f}%", 100 * r.error)});
    jrows.push_back({{"file", r.file},
                     {"line", r.line},
                     {"model", sc.model.name},
                     {"gpus", sc.gpus()},
                     {"plan", to_json(sc.plan)},
                     {"measured_s", r.measured_s},
                     {"predicted_s", r.predicted_s},
                     {"error", r.error}});
  }
  Table summary;
  summary.header = {"file", "rows", "n", "MAPE", "median", "max", "bias"};
  summary.right = {false, false, true, true, true, true, true};
  nlohmann::json jsum = nlohmann::json::array();
  for (const auto& [key, s] : v.summary) {
    summary.add({key.first, key.second, std::to_string(s.rows),
                 fmt::format("{:.1f}%", 100 * s.mape), fmt::format("{:.1f}%", 100 * s.median),
                 fmt::format("{:.1f}%", 100 * s.max), fmt::format("{:+.1f}%", 100 * s.bias)});
    jsum.push_back({{"file", key.first},
                    {"rows", key.second},
                    {"n", s.rows},
                    {"mape", s.mape},
                    {"median_ape", s.median},
                    {"max_ape", s.max},
                    {"bias", s.bias}});
  }
  switch (f) {
    case Format::json:
      return nlohmann::json{{"system", system}, {"rows", jrows}, {"summary", jsum}}.dump(2) + "\n";
    case Format::csv:
      return render_csv(rows);
    case Format::md:
      return (summary_only ? "" : render_markdown(rows) + "\n") + render_markdown(summary);
    case Format::table:
      break;
  }
  return (summary_only ? "" : render_text(rows, "") + "\n") + render_text(summary, "");
}

}  // namespace commscope
