// The HTML reports (report/html.h, report/html_pages.h, docs/report.md): escaping, bounds,
// determinism, what each page shows, the one-line errors of `commscope report` and --html.
// Whether the charts really draw is the browser test's (tests/browser/).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "commscope/report/html.h"
#include "commscope/report/html_pages.h"
#include "commscope/timeline/breakdown_json.h"
#include "commscope/util/json_fields.h"
#include "test_util.h"

namespace commscope {
namespace {

using testing::run_shell;
using testing::slurp;

const std::string kFixture = std::string(COMMSCOPE_SOURCE_DIR) + "/tests/data/characterize";

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// The JSON description of the charts the page script draws.
nlohmann::json chart_specs(const std::string& page) {
  const std::string open = "<script type=\"application/json\" id=\"commscope-charts\">";
  const auto a = page.find(open);
  const auto b = page.find("</script>", a);
  EXPECT_NE(a, std::string::npos);
  return nlohmann::json::parse(page.substr(a + open.size(), b - a - open.size()));
}

html::Document hostile_document() {
  const std::string evil = "</script><script>alert('x')</script><b onload=\"y\">&amp;";
  html::Document d;
  d.title = evil;
  d.facts = {{evil, evil}};
  d.notes = {evil};
  html::Section s{evil, {evil}, {}, {}};
  html::Chart c;
  c.title = evil;
  c.caption = evil;
  c.x_label = evil;
  c.categories = {evil, "b"};
  c.series = {{evil, {1, 2}, {}, "", false, "red;background:url(http://x)"}};
  c.table.header = {evil};
  c.table.add({evil});
  s.charts.push_back(c);
  s.tables.push_back({evil, evil, c.table});
  d.sections.push_back(s);
  return d;
}

TEST(Html, EscapesEveryNameSoNoneBecomesMarkup) {
  EXPECT_EQ(html::escape("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
  auto page = html::render(hostile_document());
  ASSERT_TRUE(page.ok()) << page.error().message;
  // Exactly the page's three scripts: the chart data, Chart.js and the page script.
  EXPECT_EQ(occurrences(*page, "<script"), 3u);
  EXPECT_EQ(occurrences(*page, "</script>"), 3u);
  // The markup (all before the chart data) holds the names as text only; the data block holds
  // them as JSON strings with '<', '>' and '&' escaped.
  const std::string markup = page->substr(0, page->find("<script"));
  EXPECT_EQ(markup.find("alert('x')"), std::string::npos);
  EXPECT_EQ(markup.find("onload=\""), std::string::npos);
  EXPECT_NE(markup.find("&lt;/script&gt;&lt;script&gt;alert(&#39;x&#39;)"), std::string::npos);
  EXPECT_EQ(page->find("<script>alert"), std::string::npos);
  // The data block parses back to the names as given.
  const auto specs = chart_specs(*page);
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0]["title"], hostile_document().title);
  EXPECT_EQ(specs[0]["categories"][0], hostile_document().title);
  // A colour that is not #rrggbb is dropped (the palette's is used).
  EXPECT_EQ(specs[0]["series"][0]["color"], "");
}

TEST(Html, SelfContainedDeterministicAndOffline) {
  ASSERT_FALSE(html::chart_library().empty()) << "built without Chart.js";
  auto a = html::render(hostile_document());
  auto b = html::render(hostile_document());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_NE(a->find(html::chart_library()), std::string::npos);
  EXPECT_NE(a->find("Content-Security-Policy\" content=\"default-src 'none'"), std::string::npos);
  // Nothing is loaded from anywhere: no src= or href= leaves the page.
  EXPECT_FALSE(std::regex_search(*a, std::regex("(src|href)=\"(https?:|//)")));
}

TEST(Html, ChartsWithoutDataAreSaidNotDrawn) {
  html::Document d;
  html::Section s{"s", {}, {}, {}};
  html::Chart empty;
  empty.title = "nothing here";
  empty.kind = html::ChartKind::line;
  empty.series = {{"a", {}, {{0, NAN}}, "", false, ""}};
  html::Chart logzero;  // a log axis cannot show zero
  logzero.title = "zero on log";
  logzero.kind = html::ChartKind::line;
  logzero.x_axis = html::Axis::log;
  logzero.series = {{"a", {}, {{0, 1}}, "", false, ""}};
  html::Chart one;
  one.title = "one bar";
  one.categories = {"x"};
  one.series = {{"a", {3}, {}, "", false, ""}};
  s.charts = {empty, logzero, one};
  d.sections.push_back(s);
  auto page = html::render(d);
  ASSERT_TRUE(page.ok());
  EXPECT_NE(page->find("data-charts=\"1\""), std::string::npos);
  EXPECT_NE(page->find("nothing here: no data."), std::string::npos);
  EXPECT_NE(page->find("zero on log: no data."), std::string::npos);
  EXPECT_EQ(chart_specs(*page).size(), 1u);
  EXPECT_EQ(occurrences(*page, "<canvas"), 1u);
}

TEST(Html, RefusesADocumentOverItsBounds) {
  html::Document d;
  html::Section s{"s", {}, {}, {}};
  html::Chart c;
  c.kind = html::ChartKind::line;
  c.series = {
      {"a", {}, std::vector<html::Point>(html::kMaxChartPoints + 1, {1, 1}), "", false, ""}};
  s.charts.push_back(c);
  d.sections.push_back(s);
  auto page = html::render(d);
  ASSERT_FALSE(page.ok());
  EXPECT_NE(page.error().message.find("chart values; a report holds at most"), std::string::npos);
  html::Document t;
  html::Section ts{"t", {}, {}, {}};
  html::TableBlock tb;
  tb.table.rows.assign(html::kMaxTableCells / 2 + 1, {"a", "b"});
  ts.tables.push_back(tb);
  t.sections.push_back(ts);
  EXPECT_FALSE(html::render(t).ok());
}

// ---- the pages ----

// The sum of the stacked series of category i (one stack).
double stack_sum(const html::Chart& c, std::size_t i, const std::string& stack) {
  double s = 0;
  for (const auto& se : c.series)
    if (se.stack == stack && std::isfinite(se.values.at(i))) s += se.values[i];
  return s;
}

TEST(HtmlPages, PredictStacksAddUpToTheIterationAndEveryPlanIsShown) {
  std::vector<ScenarioInput> inputs;
  for (int dp : {1, 2, 4, 8}) {
    ScenarioInput in;
    in.plan.dp = dp;
    in.plan.pp = dp >= 4 ? 2 : 1;
    in.plan.micro_batch = 2;
    inputs.push_back(in);
  }
  auto sweep = predict_sweep(inputs, {});
  ASSERT_TRUE(sweep.ok()) << sweep.error().message;
  const auto& rows = sweep->rows;
  ASSERT_EQ(rows.size(), 4u);
  const html::Document d = html::predict_page(rows, false);
  const html::Chart& dist = d.sections.at(0).charts.at(0);
  ASSERT_EQ(dist.categories.size(), rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i)
    EXPECT_NEAR(stack_sum(dist, i, "time"), rows[i].breakdown.wall * 1e3,
                1e-9 * rows[i].breakdown.wall * 1e3)
        << dist.categories[i];
  // Plans with a pipeline show their bubble.
  for (const auto& se : dist.series)
    if (se.label == "bubble") {
      EXPECT_GT(se.values.back(), 0);
    }
  // Every collective the plans use has its share series; tokens/s as predicted.
  const html::Chart& share = d.sections.at(1).charts.at(0);
  std::size_t used = 0;
  rows.back().breakdown.by_collective.for_each([&](Collective, const CommShare&) { ++used; });
  EXPECT_GE(share.series.size(), used);
  const html::Chart& tok = d.sections.at(2).charts.at(0);
  for (std::size_t i = 0; i < rows.size(); ++i)
    EXPECT_EQ(tok.series.at(0).values.at(i), rows[i].tokens_per_s);
  auto page = html::render(d);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(chart_specs(*page).size(), 3u);
}

TEST(HtmlPages, PredictWithScalingShowsTheProjection) {
  std::vector<ScenarioInput> inputs;
  for (int nodes : {1, 2, 4}) {
    ScenarioInput in;
    in.plan.nodes = nodes;
    inputs.push_back(in);
  }
  SweepOptions so;
  so.scaling = Scaling::weak;
  auto sweep = predict_sweep(inputs, so);
  ASSERT_TRUE(sweep.ok()) << sweep.error().message;
  const auto& rows = sweep->rows;
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(html::predict_page(rows, false).sections.size(), 3u);
  const html::Document d = html::predict_page(rows, true);
  ASSERT_EQ(d.sections.size(), 4u);
  const html::Chart& c = d.sections[3].charts.at(0);
  ASSERT_EQ(c.series.size(), 2u);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_DOUBLE_EQ(c.series[0].values[i], rows[i].iteration_time * 1e3);
    EXPECT_DOUBLE_EQ(c.series[1].values[i], rows[i].projected_time * 1e3);
  }
  EXPECT_GT(rows[2].projected_time, 0);
}

// A sweep's labels name what differs between its plans (a sweep over recompute and the network
// gave labels told apart by "#1", "#2" only, and a subtitle naming the first network alone;
// found by probing, 2026-12-02); what is the same in every plan is named once, in the subtitle.
TEST(HtmlPages, PredictLabelsNameWhatTheSweepVaries) {
  std::vector<ScenarioInput> inputs;
  for (const char* network : {"roce-100", "ib-hdr-200"})
    for (Recompute r : {Recompute::none, Recompute::full}) {
      ScenarioInput in;
      in.network = network;
      in.plan.recompute = r;
      inputs.push_back(in);
    }
  auto sweep = predict_sweep(inputs, {});
  ASSERT_TRUE(sweep.ok()) << sweep.error().message;
  const html::Document d = html::predict_page(sweep->rows, false);
  const auto& labels = d.sections.at(0).charts.at(0).categories;
  ASSERT_EQ(labels.size(), 4u);
  const ParallelPlan& p0 = sweep->rows[0].scenario.plan;
  const std::string plan = fmt::format("dp{} tp1 pp1 mbs{}", p0.dp, p0.micro_batch);
  EXPECT_EQ(labels[0], "roce-100 " + plan + " recompute-none");
  EXPECT_EQ(labels[1], "roce-100 " + plan + " recompute-full");
  EXPECT_EQ(labels[3], "ib-hdr-200 " + plan + " recompute-full");
  EXPECT_EQ(d.subtitle, "gpt2-large on polaris over roce-100, ib-hdr-200: 4 plans");
  std::vector<ScenarioInput> one(2, inputs[0]);
  auto same = predict_sweep(one, {});
  ASSERT_TRUE(same.ok());
  const html::Document twin_page = html::predict_page(same->rows, false);
  const auto& twins = twin_page.sections.at(0).charts.at(0).categories;
  EXPECT_EQ(twins[0], plan + " #1");  // nothing differs: numbered
  EXPECT_EQ(twins[1], plan + " #2");
}

TEST(HtmlPages, PredictCutsLongSweepsAndSaysSo) {
  std::vector<PredictRow> rows(html::kMaxBars + 5);
  for (auto& r : rows) r.iteration_time = 1, r.breakdown.wall = 1, r.breakdown.compute = 1;
  const html::Document d = html::predict_page(rows, false);
  EXPECT_EQ(d.sections.at(0).charts.at(0).categories.size(), html::kMaxBars);
  ASSERT_FALSE(d.notes.empty());
  EXPECT_NE(d.notes[0].find(fmt::format("first {} of {} plans", html::kMaxBars, rows.size())),
            std::string::npos);
}

TEST(HtmlPages, AnalysisShowsEveryRankAndCollective) {
  TraceReadOptions o;
  o.jobs = 1;
  auto set =
      read_traces({std::string(COMMSCOPE_SOURCE_DIR) + "/data/traces/"
                                                       "trace_filter_sampled_rank-0.json.gz",
                   std::string(COMMSCOPE_SOURCE_DIR) + "/data/traces/"
                                                       "trace_filter_sampled_rank-1.json.gz"},
                  o);
  ASSERT_TRUE(set.ok()) << set.error().message;
  const Analysis a = analyze(set->files);
  const html::Document d = html::analysis_page(a);
  const html::Chart& dist = d.sections.at(0).charts.at(0);
  ASSERT_EQ(dist.categories.size(), a.ranks.size());
  for (std::size_t i = 0; i < a.ranks.size(); ++i) {
    EXPECT_NEAR(stack_sum(dist, i, "time"), a.ranks[i].total.wall * 1e3,
                1e-9 * a.ranks[i].total.wall * 1e3);
    // The table adds the profiler's view of communication (waits included).
    EXPECT_EQ(dist.table.header.back(), "profiler comm ms");
    EXPECT_EQ(dist.table.rows.at(i).back(),
              fmt::format("{:.3f}", a.ranks[i].total.profiler_comm * 1e3));
  }
  if (!a.collectives.empty()) {
    const html::Chart& t = d.sections.at(1).charts.at(0);
    ASSERT_EQ(t.categories.size(), a.collectives.size());
    for (std::size_t i = 0; i < a.collectives.size(); ++i)
      EXPECT_DOUBLE_EQ(t.series[0].values[i], a.collectives[i].total_s * 1e3);
  }
}

nlohmann::json train_doc() {
  Breakdown b;
  b.wall = 0.5, b.compute = 0.3, b.overlapped = 0.05, b.comm = 0.15, b.exposed = 0.1, b.idle = 0.1;
  nlohmann::json per_rank = nlohmann::json::array();
  for (int r = 0; r < 2; ++r) {
    nlohmann::json x = {{"rank", r}, {"time_s", 0.5}};
    x.update(breakdown_to_json(b));
    per_rank.push_back(x);
  }
  nlohmann::json steps = nlohmann::json::array();
  for (int s = 0; s < 3; ++s)
    steps.push_back({{"step", s},
                     {"time_s", 0.5},
                     {"tokens_per_s", 2048.0},
                     {"breakdown", breakdown_to_json(b)}});
  return {{"model", {{"name", "gpt2-tiny-cpu"}, {"parameters", 4.5e6}}},
          {"strategy", "ddp"},
          {"ranks", 2},
          {"global_batch", 8},
          {"average", {{"time_s", 0.5}, {"tokens_per_s", 2048.0}, {"gflops", 3.1}}},
          {"communication",
           {{{"group", "data"},
             {"collective", "all_reduce"},
             {"calls_per_iteration", 2.0},
             {"bytes_per_iteration", 18e6},
             {"workload_calls", 2.0},
             {"workload_bytes", 18e6}}}},
          {"communication_matches_workload", true},
          {"per_rank", per_rank},
          {"steps", steps}};
}

TEST(HtmlPages, TrainShowsRanksCollectivesAndTheRateOverTime) {
  auto d = html::train_page(train_doc(), "run.json");
  ASSERT_TRUE(d.ok()) << d.error().message;
  ASSERT_EQ(d->sections.size(), 3u);
  EXPECT_EQ(d->sections[0].charts[0].categories.size(), 2u);
  EXPECT_NEAR(stack_sum(d->sections[0].charts[0], 1, "time"), 500, 1e-9);
  // 18 MB per iteration in 0.5 s: 0.288 Gb/s at each step's end (0.5, 1.0, 1.5 s).
  const html::Chart& rate = d->sections[2].charts.at(1);
  ASSERT_EQ(rate.series.at(0).points.size(), 3u);
  EXPECT_DOUBLE_EQ(rate.series[0].points[2].x, 1.5);
  EXPECT_NEAR(rate.series[0].points[2].y, 18e6 * 8 / 0.5 / 1e9, 1e-12);
  // Whole call counts are written whole (they read "2.0"); the rate chart, whose numbers are the
  // step table's last column, has no table and so no empty box on the page.
  const auto& calls = d->sections[1].charts.at(0).table;
  ASSERT_FALSE(calls.rows.empty());
  EXPECT_EQ(calls.rows[0][2], "2");
  EXPECT_EQ(calls.rows[0][4], "2");
  EXPECT_TRUE(rate.table.header.empty());
  auto page = html::render(*d);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->find("<div class=\"table-box\"></div>"), std::string::npos);
  EXPECT_NE(page->find("<div class=\"figure-body alone\">"), std::string::npos);
  auto bad = train_doc();
  bad["per_rank"][1].erase("compute_s");
  auto e = html::train_page(bad, "run.json");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("per_rank[1]"), std::string::npos) << e.error().message;
  EXPECT_NE(e.error().message.find("compute_s"), std::string::npos) << e.error().message;
  bad = train_doc();
  bad["steps"][2]["time_s"] = "fast";
  e = html::train_page(bad, "run.json");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().message,
            "run.json: field 'steps[2].time_s': expected a non-negative number, got \"fast\"");
}

nlohmann::json fixture() {
  auto j = read_json_file(kFixture + "/characterize.json");
  EXPECT_TRUE(j.ok());
  return j.ok() ? *j : nlohmann::json();
}

TEST(HtmlPages, CharacterizeShowsEveryFigureFromTheFile) {
  const nlohmann::json j = fixture();
  auto d = html::characterize_page(j, "characterize.json");
  ASSERT_TRUE(d.ok()) << d.error().message;
  auto page = html::render(*d);
  ASSERT_TRUE(page.ok());
  // Charts: time distribution, network ratios, collective shares, Gb/s over time, predicted vs
  // measured, one busbw chart per network profile, the projection.
  const auto specs = chart_specs(*page);
  EXPECT_EQ(specs.size(), 6 + j["network"].size());
  std::set<std::string> kinds;
  for (const auto& s : specs) kinds.insert(s["kind"].get<std::string>());
  EXPECT_EQ(kinds, (std::set<std::string>{"bar", "stacked_bar", "line", "scatter"}));
  // Every run with its measured and predicted iteration, as the file says.
  for (const auto& r : j["runs"]) {
    EXPECT_NE(page->find(html::escape(r["id"].get<std::string>())), std::string::npos);
    EXPECT_NE(page->find(fmt::format("{:.3f}", r["measured"]["iteration_s"].get<double>() * 1e3)),
              std::string::npos);
  }
  // The scatter holds one point per run and per collective of a run; the band is the MAPE.
  for (const auto& s : specs)
    if (s["kind"] == "scatter") {
      EXPECT_EQ(s["series"][0]["points"].size(), j["runs"].size());
      EXPECT_DOUBLE_EQ(s["band"].get<double>(),
                       j["summary"]["iteration_mape_pct"].get<double>() / 100);
    }
  // Each busbw curve: measured and model series with the file's points.
  std::size_t curves = 0;
  for (const auto& n : j["network"]) curves += n["curves"].size();
  std::size_t dashed = 0;
  for (const auto& s : specs)
    for (const auto& se : s["series"]) dashed += se["dashed"].get<bool>() ? 1 : 0;
  EXPECT_EQ(dashed, curves);
  // Network ratios: the fastest network of each strategy is 1.
  for (const auto& s : specs)
    if (s["title"].get<std::string>().rfind("Network ratios", 0) == 0)
      for (std::size_t g = 0; g < s["categories"].size(); ++g) {
        double best = INFINITY;
        for (const auto& se : s["series"])
          if (se["values"][g].is_number()) best = std::min(best, se["values"][g].get<double>());
        EXPECT_DOUBLE_EQ(best, 1.0);
      }
}

TEST(HtmlPages, CharacterizeWithoutRunsSaysWhatIsMissing) {
  nlohmann::json j = fixture();
  j["runs"] = nlohmann::json::array();
  j["projection"] = nlohmann::json::array();
  j["summary"]["runs"] = 0;
  j.erase("compute");
  auto d = html::characterize_page(j, "c");
  ASSERT_TRUE(d.ok()) << d.error().message;
  auto page = html::render(*d);
  ASSERT_TRUE(page.ok());
  // Only the busbw curves draw; the run charts say they have no data.
  EXPECT_EQ(chart_specs(*page).size(), j["network"].size());
  EXPECT_NE(page->find("Achieved Gb/s per node over time: no data."), std::string::npos);
  EXPECT_NE(page->find("Predicted against measured time: no data."), std::string::npos);
}

struct BadCase {
  std::string pointer;   // JSON pointer of the field changed
  nlohmann::json value;  // null: removed
  std::string message;   // the error after "characterize.json: "
};

TEST(HtmlPages, CharacterizeErrorsNameTheField) {
  const std::vector<BadCase> cases = {
      {"/schema", "commscope.characterize/2",
       "field 'schema': expected 'commscope.characterize/1', got \"commscope.characterize/2\""},
      {"/runs/1/measured/iteration_s", -1,
       "field 'runs[1].measured.iteration_s': expected a non-negative number, got -1"},
      {"/runs/0/collectives/0/error_pct", "x",
       "field 'runs[0].collectives[0].error_pct': expected a number, got \"x\""},
      {"/host/mode", "lab", "field 'host.mode': expected emulate or cluster, got \"lab\""},
      {"/network/1/curves/0/points/3/bytes", nullptr,
       "field 'network[1].curves[0].points[3].bytes': expected a non-negative number, got "
       "nothing (the field is missing)"},
      {"/runs/2/ranks", 0, "field 'runs[2].ranks': expected a positive integer, got 0"},
      {"/runs/1/id", "ddp-rdma-100g-2x2",
       "field 'runs[1].id': expected a run id not used before, got \"ddp-rdma-100g-2x2\""},
      {"/projection/0/base_run", "nope",
       "field 'projection[0].base_run': expected the id of a run in 'runs', got \"nope\""},
      {"/summary/runs", 3, "field 'summary.runs': expected 7 (the entries of 'runs'), got 3"},
      {"/quick", "yes", "field 'quick': expected true or false, got \"yes\""},
      {"/runs/0", 3, "field 'runs[0]': expected an object, got 3"},
      {"/network/0/curves", "all",
       "field 'network[0].curves': expected an array of at most 256 entries, got \"all\""},
      // the parts of an iteration fit in it (found by probing, 2026-11-30)
      {"/runs/0/measured/exposed_comm_s", 5.0,
       "field 'runs[0].measured.exposed_comm_s': expected at most iteration_s (0.4421), got 5"},
      {"/runs/0/predicted/compute_s", 1.0,
       "field 'runs[0].predicted.compute_s': expected at most iteration_s (0.45978), got 1"},
      {"/runs/0/measured/profiler_comm_s", 50.0,
       "field 'runs[0].measured.profiler_comm_s': expected at most iteration_s (0.4421), got 50"},
      {"/runs/0/measured/overlapped_comm_s", 0.3,
       "field 'runs[0].measured.overlapped_comm_s': expected at most profiler_comm_s (0.0638), got "
       "0.3"},
      {"/runs/0/measured/iteration_s", 1e308,
       "field 'runs[0].measured.iteration_s': expected at most 1e6 seconds, got 1e+308"},
      // figures that contradict the others (found by probing, 2026-11-30)
      {"/runs/0/collectives/0/measured_s", 3.0,
       "field 'runs[0].collectives[0].measured_s': expected at most the run's iteration (0.4421 "
       "s), got 3"},
      {"/runs/0/iteration_error_pct", -90.0,
       "field 'runs[0].iteration_error_pct': expected the iterations' error, 100 x (predicted - "
       "measured) / measured = 4.00, got -90"},
      {"/summary/iteration_mape_pct", 55.0,
       "field 'summary.iteration_mape_pct': expected the mean of the runs' |iteration_error_pct| "
       "(7.24), got 55"},
      {"/runs/0/nodes", 9, "field 'runs[0].nodes': expected at most the run's ranks (4), got 9"},
      {"/runs/0/collectives/0/error_pct", 50.0,
       "field 'runs[0].collectives[0].error_pct': expected 100 x (predicted_s - measured_s) / "
       "measured_s = 6.00, got 50"},
      {"/summary/collective_mape_pct", 99.0,
       "field 'summary.collective_mape_pct': expected the mean |error_pct| of the runs' "
       "collectives with a measured time (11.26), got 99"},
      {"/projection/0/projection_error_pct", 40.0,
       "field 'projection[0].projection_error_pct': expected 100 x (projected - measured) / "
       "measured = -14.31, got 40"},
      {"/projection/0/simulation_error_pct", -70.0,
       "field 'projection[0].simulation_error_pct': expected the iteration_error_pct of run "
       "'ddp-tcp-10g-4x2' (7.00), got -70"},
      {"/projection/0/base_run", "ddp-tcp-10g-4x2",
       "field 'projection[0].base_run': expected another run than the one projected, got "
       "\"ddp-tcp-10g-4x2\""},
      {"/network/0/curves/0/points/1/bytes", 1.0,
       "field 'network[0].curves[0].points[1].bytes': expected a size above the point before's "
       "(1024), got 1"},
  };
  for (const auto& c : cases) {
    nlohmann::json j = fixture();
    const nlohmann::json::json_pointer p(c.pointer);
    if (c.value.is_null())
      j[p.parent_pointer()].erase(p.back());
    else
      j[p] = c.value;
    auto d = html::characterize_page(j, "characterize.json");
    ASSERT_FALSE(d.ok()) << c.pointer;
    EXPECT_EQ(d.error().message, "characterize.json: " + c.message);
  }
  // Sizes are checked before anything is built.
  nlohmann::json j = fixture();
  j["network"][0]["curves"][0]["points"] = nlohmann::json::array_t(
      4097, {{"bytes", 1}, {"measured_busbw_gbps", 1}, {"model_busbw_gbps", 1}});
  auto d = html::characterize_page(j, "c");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().message.substr(0, 57),
            "c: field 'network[0].curves[0].points': expected an array");
}

// ---- the command line ----

class HtmlCli : public testing::TestFolder {
 protected:
  testing::Outcome cli(const std::string& args) {
    return run_shell(std::string("COMMSCOPE_PRESETS=") + COMMSCOPE_SOURCE_DIR + "/presets " +
                     COMMSCOPE_BIN + " " + args + " </dev/null");
  }
};

TEST_F(HtmlCli, ReportWritesTheFolderReport) {
  std::filesystem::copy(kFixture, dir_ / "run");
  auto o = cli("report " + (dir_ / "run").string());
  ASSERT_EQ(o.status, 0) << o.err;
  const std::string page = slurp(dir_ / "run" / "report.html");
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(page, *html::render_characterize_dir((dir_ / "run").string()));
  o = cli("report " + (dir_ / "run").string() + " -o " + (dir_ / "elsewhere.html").string());
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_EQ(slurp(dir_ / "elsewhere.html"), page);
}

TEST_F(HtmlCli, ReportErrorsAreOneLineAndWriteNothing) {
  auto o = cli("report " + (dir_ / "missing").string());
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err, "commscope: " + (dir_ / "missing").string() +
                       ": expected a folder written by commscope characterize\n");
  std::filesystem::create_directories(dir_ / "bad");
  nlohmann::json j = fixture();
  j["runs"][0]["measured"]["compute_s"] = "slow";
  std::ofstream(dir_ / "bad" / "characterize.json") << j.dump();
  o = cli("report " + (dir_ / "bad").string());
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err, "commscope: " + (dir_ / "bad" / "characterize.json").string() +
                       ": field 'runs[0].measured.compute_s': expected a non-negative number, "
                       "got \"slow\"\n");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "bad" / "report.html"));
  // An output that is a folder: refused before reading anything.
  o = cli("report " + kFixture + " -o " + dir_.string());
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1);
}

TEST_F(HtmlCli, PredictAndAnalyzeWriteHtmlBesideTheirOutput) {
  const auto p = dir_ / "predict.html";
  auto o = cli("predict --dp 1,2 --html " + p.string());
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("tokens/s"), std::string::npos);  // the table still goes to stdout
  EXPECT_EQ(chart_specs(slurp(p)).size(), 3u);
  const auto a = dir_ / "analyze.html";
  o = cli("analyze " + std::string(COMMSCOPE_SOURCE_DIR) +
          "/data/traces/trace_filter_sampled_rank-0.json.gz --html " + a.string());
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_GE(chart_specs(slurp(a)).size(), 1u);
}

TEST_F(HtmlCli, HtmlPathIsCheckedBeforeTheWork) {
  for (const std::string& verb :
       std::vector<std::string>{"predict --dp 1", "analyze " + std::string(COMMSCOPE_SOURCE_DIR) +
                                                      "/data/traces/"
                                                      "trace_filter_sampled_rank-0.json.gz"}) {
    auto o = cli(verb + " --html " + dir_.string());
    EXPECT_EQ(o.status, 2) << verb;
    EXPECT_EQ(o.err.rfind("commscope: --html: " + dir_.string(), 0), 0u) << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
    EXPECT_TRUE(o.out.empty()) << verb;
  }
  auto o = cli("train --ranks 2 --html " + dir_.string());
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err.rfind("commscope: --html: " + dir_.string() + ": ", 0), 0u) << o.err;
  o = cli("train --ranks 2 --emulate tcp-10g --emulate rdma-100g --html " +
          (dir_ / "t.html").string());
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err, "commscope: --html: expected one run, got 2 --emulate profiles\n");
}

}  // namespace
}  // namespace commscope
