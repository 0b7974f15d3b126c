// The HTML reports commscope writes (docs/report.md), each built as a report/html.h Document
// from a verb's results: `predict --html`, `analyze --html`, `train --html`, and
// `commscope report DIR` from the folder `commscope characterize` writes.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "commscope/report/analyze.h"
#include "commscope/report/html.h"
#include "commscope/report/predict.h"
#include "commscope/report/seeds.h"

namespace commscope::html {

// At most this many plans, ranks or runs are drawn as bars (a sweep's first rows, ranks in
// order); the page says how many were left out. Tables list the same rows.
inline constexpr std::size_t kMaxBars = 64;

// predict: per plan, the stacked time distribution of the iteration (compute alone, compute
// with overlapped communication, exposed communication, memory copies, pipeline bubble, other
// idle), each collective's share of the iteration, tokens/s; with scaling, the projection.
Document predict_page(const std::vector<PredictRow>& rows, bool scaling);

// `predict --scenario seeds --html` and `commscope report seeds`: the studies' headline figures
// beside commscope's, one chart per unit, then each group's runs as stacked time distributions.
Document seeds_page(const SeedsResult& r);

// analyze: the breakdown per rank, per collective its time and achieved algbw/busbw, the
// largest spreads between ranks and the top kernels.
Document analysis_page(const Analysis& a);

// train: the json document commscope-train writes (-o, docs/train.md): per-rank breakdown,
// communication per collective against the workload, per-step time and the collective payload
// rate over the run. Errors name the field that is missing or of the wrong type.
Result<Document> train_page(const nlohmann::json& doc, const std::string& where);

// `commscope report DIR`: DIR/characterize.json (schema commscope.characterize/1, written by
// `commscope characterize`): the seeds' figures for the cluster, predicted against measured,
// bus bandwidth measured against modelled, the projection against measurement. Every field
// is checked; an error names it ("characterize.json: field 'runs[1].measured.iteration_s':
// expected a non-negative number, got -1").
Result<Document> characterize_page(const nlohmann::json& doc, const std::string& where);

// Reads the json document commscope-train wrote to `json_path` and writes its report to
// `html_path` (the `train --html` verb's work).
Status write_train_report(const std::string& json_path, const std::string& html_path);

// Reads DIR/characterize.json and renders it (the `report` verb's work).
Result<std::string> render_characterize_dir(const std::string& dir);

}  // namespace commscope::html
