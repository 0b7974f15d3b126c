// Predicted vs measured: the rows, the summaries, and their printing.
#include "commscope/report/validation.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace commscope {

std::string gpu_band(int gpus) {
  return gpus <= 64 ? "gpus <=64" : gpus <= 512 ? "gpus 65-512" : "gpus >512";
}

namespace {
// The order the summary prints in: per file, the whole file first, then strategies, then the
// bands in increasing GPU count; within each, fit, heldout, all (or even, odd, all).
using Key = std::tuple<std::string, int, std::string, int, std::string>;
Key key(const std::string& file, const std::string& group, const std::string& split) {
  int rank = group == "(all)"         ? 0
             : group == "gpus <=64"   ? 2
             : group == "gpus 65-512" ? 3
             : group == "gpus >512"   ? 4
                                      : 1;
  int srank = split == "fit" || split == "even" ? 0 : split == "heldout" || split == "odd" ? 1 : 2;
  return {file == "(all files)" ? "\x7f" : file, rank, group, srank, split};
}
}  // namespace

Validation validate_runs(const std::vector<PreparedRun>& runs, const std::string& split,
                         const std::function<void(std::size_t)>& progress) {
  Validation v;
  std::map<Key, std::pair<ValidationSummary, std::vector<double>>> errors;
  auto add = [&](const std::string& file, const std::string& group, const std::string& sp,
                 const double* e) {
    auto& slot = errors[key(file, group, sp)];
    slot.first.file = file;
    slot.first.group = group;
    slot.first.split = sp;
    if (e) slot.second.push_back(*e);
  };
  // Files by their base name, unless two given files share one (a/x.csv and b/x.csv were summed
  // as one "x.csv", found by probing, 2026-11-30): then by the path given.
  auto base_of = [](const std::string& p) { return p.substr(p.find_last_of('/') + 1); };
  std::map<std::string, std::set<std::string>> sources;
  for (const auto& r : runs) sources[base_of(r.source)].insert(r.source);
  for (const auto& r : runs) {
    if (!in_split(r, split)) continue;
    const Scenario& sc = r.workload.scenario;
    ValidationRow row;
    row.file = sources[base_of(r.source)].size() > 1 ? r.source : base_of(r.source);
    row.line = r.line;
    row.scenario = &sc;
    row.measured_s = r.measured_s;
    row.predicted_s = predicted_time(r, sc.system.calibration);
    row.out_of_memory = r.out_of_memory;
    row.error = r.out_of_memory ? 0.0 : row.predicted_s / r.measured_s - 1.0;
    row.id = r.id;
    row.group = r.group;
    row.assumed = r.assumed;
    // The memory verdict, as predict computes it (report/predict.cpp): the fullest rank.
    for (const Role& role : r.workload.roles)
      row.memory_per_gpu =
          std::max(row.memory_per_gpu, memory_per_rank(r.workload, role).total().value());
    row.fits = row.memory_per_gpu <= sc.system.gpu.memory.value();
    row.measured_memory = r.measured_memory_gib * 1073741824.0;
    ++v.verdicts;
    if (row.fits != row.out_of_memory)
      ++v.verdicts_agree;
    else
      v.verdicts_disagree.push_back(fmt::format("{}:{}", row.file, row.line));
    // A run that ran out of memory has no time to compare: it enters no error summary.
    const double* e = r.out_of_memory ? nullptr : &row.error;
    if (!r.split.empty()) {  // the corpus: both halves, per strategy and per GPU-count band
      row.split = r.split;
      for (const std::string& g : {std::string("(all)"), r.group, gpu_band(sc.gpus())}) {
        add(row.file, g, r.split, e);
        if (split == "all") {
          add(row.file, g, "all", e);
          add(row.file, g, r.split == "fit" ? "heldout" : "fit", nullptr);  // both, always
        }
      }
    } else {
      row.split = r.index % 2 ? "odd" : "even";
      add(row.file, "(all)", row.split, e);
      if (split == "all") add(row.file, "(all)", "all", e);  // (--rows odd was labelled all too)
    }
    // Every file's rows, the corpus's among them (they were left out of it), under the rows
    // asked for.
    add("(all files)", "(all)", split, e);
    v.rows.push_back(std::move(row));
    if (progress) progress(v.rows.size());
  }
  // Every band of every corpus file, so an empty band shows as n = 0 rather than not at all.
  std::set<std::string> corpus_files;
  for (const auto& row : v.rows)
    if (row.split == "fit" || row.split == "heldout") corpus_files.insert(row.file);
  for (const auto& file : corpus_files)
    for (const char* band : {"gpus <=64", "gpus 65-512", "gpus >512"})
      for (const char* sp : {"fit", "heldout", "all"})
        if (split == "all" || split == sp) add(file, band, sp, nullptr);
  for (auto& [k, slot] : errors) {
    slot.first.errors = summarize(slot.second);
    v.summary.push_back(std::move(slot.first));
  }
  return v;
}

std::string render_validation(const Validation& v, Format f, const std::string& system,
                              bool summary_only) {
  // CSV: a fixed header whatever the input (the memory and outcome columns always, empty where
  // the input has none) and numbers under *_pct names, where the text table says "+1.5%" and
  // adds those columns only where the input has them (until 2026-12-02 the CSV was the text
  // table's cells, its header depending on the input).
  const bool csv = f == Format::csv;
  Table rows;
  rows.header = {"file",    "line", "id",         "split",       "group",
                 "model",   "gpus", "tp",         "pp",          "dp",
                 "mbs",     "gbs",  "measured_s", "predicted_s", csv ? "error_pct" : "error",
                 "mem_gib", "fits", "assumed"};
  rows.right = {false, true, false, false, false, false, true, true,  true,
                true,  true, true,  true,  true,  true,  true, false, false};
  // Runs with a measured peak memory (commscope CSV's measured_memory_gib) add it and the
  // memory's error, and rows that ran out of memory (its outcome) the outcome: columns inserted
  // before `fits`, in the header here and in each row below.
  const bool memory = csv || std::any_of(v.rows.begin(), v.rows.end(), [](const ValidationRow& r) {
                        return r.measured_memory > 0;
                      });
  const bool outcomes = csv || std::any_of(v.rows.begin(), v.rows.end(),
                                           [](const ValidationRow& r) { return r.out_of_memory; });
  // A missing number: "-" in the text table, empty in CSV.
  const std::string none = csv ? "" : "-";
  auto percent = [&](double x) {
    return csv ? fmt::format("{:.2f}", 100 * x) : fmt::format("{:+.1f}%", 100 * x);
  };
  const auto fits_at = static_cast<std::ptrdiff_t>(
      std::find(rows.header.begin(), rows.header.end(), "fits") - rows.header.begin());
  auto insert = [&](std::vector<std::string>& cells, std::vector<std::string> extra) {
    cells.insert(cells.begin() + fits_at, extra.begin(), extra.end());
  };
  std::vector<std::string> extra_header;
  std::vector<bool> extra_right;
  if (memory)
    extra_header = {"measured_mem_gib", csv ? "mem_error_pct" : "mem_error"},
    extra_right = {true, true};
  if (outcomes) extra_header.push_back("outcome"), extra_right.push_back(false);
  insert(rows.header, extra_header);
  rows.right.insert(rows.right.begin() + fits_at, extra_right.begin(), extra_right.end());
  nlohmann::json jrows = nlohmann::json::array();
  for (const auto& r : v.rows) {
    const Scenario& sc = *r.scenario;
    rows.add({r.file, std::to_string(r.line), r.id.empty() ? "-" : r.id, r.split,
              r.group.empty() ? "-" : r.group, sc.model.name, std::to_string(sc.gpus()),
              std::to_string(sc.plan.tp), std::to_string(sc.plan.pp), std::to_string(sc.plan.dp),
              std::to_string(sc.plan.micro_batch), std::to_string(sc.plan.global_batch),
              r.out_of_memory ? none : fmt::format("{:.4f}", r.measured_s),
              fmt::format("{:.4f}", r.predicted_s), r.out_of_memory ? none : percent(r.error),
              fmt::format("{:.1f}", r.memory_per_gpu / 1073741824.0), r.fits ? "yes" : "NO",
              r.assumed.empty() ? "-" : r.assumed});
    std::vector<std::string> extra;
    if (memory) {
      const bool m = r.measured_memory > 0;
      extra = {m ? fmt::format("{:.1f}", r.measured_memory / 1073741824.0) : none,
               m ? percent(r.memory_per_gpu / r.measured_memory - 1) : none};
    }
    if (outcomes) extra.push_back(r.out_of_memory ? "oom" : "ran");
    insert(rows.rows.back(), extra);
    jrows.push_back({{"file", r.file},
                     {"line", r.line},
                     {"id", r.id},
                     {"split", r.split},
                     {"group", r.group},
                     {"model", sc.model.name},
                     {"system", sc.system.name},
                     {"gpus", sc.gpus()},
                     {"plan", to_json(sc.plan)},
                     {"measured_s", r.measured_s},
                     {"predicted_s", r.predicted_s},
                     {"error", r.error},
                     {"memory_per_gpu", r.memory_per_gpu},
                     {"fits", r.fits},
                     {"assumed", r.assumed}});
    if (r.out_of_memory) {
      jrows.back()["outcome"] = "oom";
      jrows.back().erase("error");
      // no time was measured: null, as the table's "-" (it said 0.0, found by probing)
      if (!(r.measured_s > 0)) jrows.back()["measured_s"] = nullptr;
    }
    if (r.measured_memory > 0) {
      jrows.back()["measured_memory_per_gpu"] = r.measured_memory;
      jrows.back()["memory_error"] = r.memory_per_gpu / r.measured_memory - 1;
    }
  }
  Table summary;
  summary.header = {"file", "group", "rows", "n", "MAPE", "median", "max", "bias"};
  if (csv)
    summary.header = {"file",     "group",      "rows",    "n",
                      "mape_pct", "median_pct", "max_pct", "bias_pct"};
  summary.right = {false, false, false, true, true, true, true, true};
  nlohmann::json jsum = nlohmann::json::array();
  for (const auto& sr : v.summary) {
    const ErrorSummary& s = sr.errors;
    auto pct = [&](double x, const char* spec) {
      if (s.rows == 0) return none;
      return csv ? fmt::format("{:.2f}", 100 * x) : fmt::format(fmt::runtime(spec), 100 * x);
    };
    summary.add({sr.file, sr.group, sr.split, std::to_string(s.rows), pct(s.mape, "{:.1f}%"),
                 pct(s.median, "{:.1f}%"), pct(s.max, "{:.1f}%"), pct(s.bias, "{:+.1f}%")});
    // (no rows: null, as the table's "-", not 0)
    auto num = [&](double x) { return s.rows == 0 ? nlohmann::json() : nlohmann::json(x); };
    jsum.push_back({{"file", sr.file},
                    {"group", sr.group},
                    {"rows", sr.split},
                    {"n", s.rows},
                    {"mape", num(s.mape)},
                    {"median_ape", num(s.median)},
                    {"max_ape", num(s.max)},
                    {"bias", num(s.bias)}});
  }
  // The memory verdicts against what happened (every row ran, or ran out of memory); the text
  // names the first 20 rows that disagree (the JSON all of them).
  const std::size_t named = std::min<std::size_t>(v.verdicts_disagree.size(), 20);
  const std::string verdicts = fmt::format(
      "memory verdicts: {} of {} agree with what happened (a run that ran fits, one "
      "that ran out of memory does not){}{}{}\n",
      v.verdicts_agree, v.verdicts, v.verdicts_disagree.empty() ? "" : "; not: ",
      fmt::join(v.verdicts_disagree.begin(), v.verdicts_disagree.begin() + named, ", "),
      v.verdicts_disagree.size() > named
          ? fmt::format(" and {} more", v.verdicts_disagree.size() - named)
          : "");
  switch (f) {
    case Format::json:
      return nlohmann::json{{"system", system},
                            {"rows", summary_only ? nlohmann::json::array() : jrows},
                            {"summary", jsum},
                            {"memory_verdicts",
                             {{"checked", v.verdicts},
                              {"agree", v.verdicts_agree},
                              {"disagree", v.verdicts_disagree}}}}
                 .dump(2) +
             "\n";
    case Format::csv:  // the rows, or with --summary-only the summary
      return render_csv(summary_only ? summary : rows);
    case Format::md:
      return (summary_only ? "" : render_markdown(rows) + "\n") + render_markdown(summary) + "\n" +
             verdicts;
    case Format::table:
      break;
  }
  return (summary_only ? "" : render_text(rows, "") + "\n") + render_text(summary, "") + "\n" +
         verdicts;
}

}  // namespace commscope
