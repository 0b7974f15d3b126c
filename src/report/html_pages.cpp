// The HTML reports of report/html_pages.h: which figures each verb's results make.
#include "commscope/report/html_pages.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commscope/timeline/breakdown_json.h"
#include "commscope/util/json_fields.h"

namespace commscope::html {

namespace {

// The parts of an iteration, stacked so that they add up to it: compute alone, compute with
// communication overlapped, exposed communication, memory copies, pipeline bubble, other idle.
struct Part {
  const char* label;
  const char* colour;
  const char* light;  // the same part of a prediction beside a measurement
};
constexpr Part kParts[] = {
    // "compute alone": compute less the overlapped part, so the parts add up; the CLI's
    // compute is the whole (the two were both "compute", found by probing, 2026-12-02).
    {"compute alone", "#4e79a7", "#a0cbe8"}, {"overlapped comm", "#f28e2b", "#ffbe7d"},
    {"exposed comm", "#e15759", "#ff9d9a"},  {"memcpy", "#76b7b2", "#b7e0dc"},
    {"bubble", "#9c755f", "#d4b9a6"},        {"idle", "#bab0ac", "#e0dbd8"}};
constexpr std::size_t kPartCount = std::size(kParts);

// A breakdown's parts in seconds, in kParts order (never negative).
std::array<double, kPartCount> parts(const Breakdown& b) {
  auto pos = [](double v) { return std::max(0.0, v); };
  return {pos(b.compute - b.overlapped),
          pos(b.overlapped),
          pos(b.exposed),
          pos(b.memcpy),
          pos(b.bubble),
          pos(b.idle - b.bubble)};
}

std::string ms(double s) {
  return fmt::format("{:.3f}", s * 1e3);
}
std::string pct(double f) {
  return fmt::format("{:.1f}", f * 100);
}
std::string num(double v, int digits = 2) {
  return fmt::format("{:.{}f}", v, digits);
}
double gbps(double bytes_per_s) {
  return bytes_per_s * 8 / 1e9;
}

// A table with its header; the first `text_columns` columns are text, the others numbers
// (right-aligned).
Table table(std::vector<std::string> header, std::size_t text_columns) {
  Table t;
  t.right.assign(header.size(), true);
  for (std::size_t i = 0; i < std::min(text_columns, header.size()); ++i) t.right[i] = false;
  t.header = std::move(header);
  return t;
}

// A chart with its kind, title, caption and axis titles (with units).
Chart chart(ChartKind kind, std::string title, std::string caption, std::string x_label,
            std::string y_label) {
  Chart c;
  c.kind = kind;
  c.title = std::move(title);
  c.caption = std::move(caption);
  c.x_label = std::move(x_label);
  c.y_label = std::move(y_label);
  return c;
}

// A stacked chart of breakdowns (ms), one bar per label, with its table.
Chart breakdown_chart(const std::string& title, const std::string& caption,
                      const std::vector<std::string>& labels,
                      const std::vector<Breakdown>& breakdowns, const std::string& what) {
  Chart c = chart(ChartKind::stacked_bar, title, caption, what, "time (ms)");
  c.categories = labels;
  for (std::size_t p = 0; p < kPartCount; ++p) {
    Series s{kParts[p].label, {}, {}, "time", false, kParts[p].colour};
    for (const auto& b : breakdowns) s.values.push_back(parts(b)[p] * 1e3);
    c.series.push_back(std::move(s));
  }
  // The parts, then communication as a profiler records it (calls from entry, waits for
  // peers included).
  std::vector<std::string> header = {what, "total ms"};
  for (const auto& p : kParts) header.push_back(std::string(p.label) + " ms");
  header.push_back("profiler comm ms");
  c.table = table(std::move(header), 1);
  for (std::size_t i = 0; i < labels.size(); ++i) {
    std::vector<std::string> row = {labels[i], ms(breakdowns[i].wall)};
    for (double v : parts(breakdowns[i])) row.push_back(ms(v));
    row.push_back(ms(breakdowns[i].profiler_comm));
    c.table.add(std::move(row));
  }
  return c;
}

std::string plan_label(const PredictRow& r) {
  const auto& p = r.scenario.plan;
  std::string s = fmt::format("dp{} tp{} pp{}", p.dp, p.tp, p.pp);
  if (p.zero > 0) s += fmt::format(" zero{}", p.zero);
  s += fmt::format(" mbs{}", p.micro_batch);
  return s;
}

// Labels that tell the rows apart: the plan, and the model, system, network, node count or
// other plan field (CP, EP, SP, virtual stages, recompute, precision, FP8, attention kernel,
// schedule, global batch, sequence) where the rows differ in it. (A sweep over one of the
// latter gave labels told apart only by "#1", "#2"; found by probing, 2026-12-02.)
std::vector<std::string> predict_labels(const std::vector<PredictRow>& rows) {
  using Field = std::string (*)(const PredictRow&);
  static const Field kFields[] = {
      [](const PredictRow& r) { return r.scenario.model.name; },
      [](const PredictRow& r) { return r.scenario.system.name; },
      [](const PredictRow& r) { return r.scenario.network.name; },
      [](const PredictRow& r) {
        return fmt::format("{} node{}", r.scenario.nodes, r.scenario.nodes == 1 ? "" : "s");
      },
  };
  static const Field kPlanFields[] = {
      [](const PredictRow& r) { return fmt::format("cp{}", r.scenario.plan.cp); },
      [](const PredictRow& r) { return fmt::format("ep{}", r.scenario.plan.ep); },
      [](const PredictRow& r) {
        return std::string(r.scenario.plan.sequence_parallel ? "sp" : "no-sp");
      },
      [](const PredictRow& r) { return fmt::format("vpp{}", r.scenario.plan.virtual_stages); },
      [](const PredictRow& r) {
        return fmt::format("recompute-{}", to_string(r.scenario.plan.recompute));
      },
      [](const PredictRow& r) { return std::string(to_string(r.scenario.plan.precision)); },
      [](const PredictRow& r) { return std::string(r.scenario.plan.fp8 ? "fp8" : "no-fp8"); },
      [](const PredictRow& r) {
        return fmt::format("{}-attention", to_string(r.scenario.plan.attention));
      },
      [](const PredictRow& r) { return std::string(to_string(r.scenario.plan.schedule)); },
      [](const PredictRow& r) { return fmt::format("gbs{}", r.scenario.plan.global_batch); },
      [](const PredictRow& r) { return fmt::format("seq{}", r.scenario.model.seq_length); },
  };
  auto varies = [&](Field f) {
    for (const auto& r : rows)
      if (f(r) != f(rows.front())) return true;
    return false;
  };
  std::vector<Field> before, after;
  for (Field f : kFields)
    if (varies(f)) before.push_back(f);
  for (Field f : kPlanFields)
    if (varies(f)) after.push_back(f);
  std::vector<std::string> out;
  for (const auto& r : rows) {
    std::string s;
    for (Field f : before) s += f(r) + " ";
    s += plan_label(r);
    for (Field f : after) s += " " + f(r);
    out.push_back(s);
  }
  // Identical labels (a sweep over a flag not shown): number them, all of them (the count was
  // taken after the first was numbered, which left the last one bare).
  std::map<std::string, int> count, seen;
  for (const auto& l : out) ++count[l];
  for (auto& l : out)
    if (count[l] > 1) {
      const std::string base = l;
      l += fmt::format(" #{}", ++seen[base]);
    }
  return out;
}

std::string left_out_note(std::size_t shown, std::size_t all, const char* what) {
  return fmt::format(
      "The charts show the first {} of {} {}; the JSON output (--format json) has "
      "them all.",
      shown, all, what);
}

// ---- characterize.json: a strict reader that names the field ----

struct FieldError {
  std::string message;
};

class Reader {
 public:
  explicit Reader(std::string where) : where_(std::move(where)) {}

  [[noreturn]] void fail(const std::string& path, std::string_view expected,
                         const std::string& got) const {
    throw FieldError{
        fmt::format("{}: field '{}': expected {}, got {}", where_, path, expected, got)};
  }
  const nlohmann::json& at(const nlohmann::json& obj, const std::string& path, std::string_view key,
                           std::string_view expected) const {
    const std::string p = path.empty() ? std::string(key) : path + "." + std::string(key);
    if (!obj.is_object()) fail(path, "an object", json_excerpt(obj));
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) fail(p, expected, "nothing (the field is missing)");
    return *it;
  }
  static std::string join(const std::string& path, std::string_view key) {
    return path.empty() ? std::string(key) : path + "." + std::string(key);
  }
  double number(const nlohmann::json& obj, const std::string& path, std::string_view key,
                bool non_negative = true) const {
    const char* expected = non_negative ? "a non-negative number" : "a number";
    const auto& v = at(obj, path, key, expected);
    const double x = v.is_number() ? v.get<double>() : NAN;
    if (!std::isfinite(x) || (non_negative && x < 0))
      fail(join(path, key), expected, json_excerpt(v));
    return x;
  }
  int count(const nlohmann::json& obj, const std::string& path, std::string_view key) const {
    const auto& v = at(obj, path, key, "a positive integer");
    if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > (1 << 24))
      fail(join(path, key), "a positive integer", json_excerpt(v));
    return static_cast<int>(v.get<std::int64_t>());
  }
  int index(const nlohmann::json& obj, const std::string& path, std::string_view key) const {
    const auto& v = at(obj, path, key, "a non-negative integer");
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > (1 << 24))
      fail(join(path, key), "a non-negative integer", json_excerpt(v));
    return static_cast<int>(v.get<std::int64_t>());
  }
  std::string text(const nlohmann::json& obj, const std::string& path, std::string_view key) const {
    const auto& v = at(obj, path, key, "a string");
    if (!v.is_string() || v.get_ref<const std::string&>().size() > 4096)
      fail(join(path, key), "a string of at most 4096 bytes", json_excerpt(v));
    return v.get<std::string>();
  }
  bool boolean(const nlohmann::json& obj, const std::string& path, std::string_view key) const {
    const auto& v = at(obj, path, key, "true or false");
    if (!v.is_boolean()) fail(join(path, key), "true or false", json_excerpt(v));
    return v.get<bool>();
  }
  const nlohmann::json& array(const nlohmann::json& obj, const std::string& path,
                              std::string_view key, std::size_t max, bool required = true) const {
    static const nlohmann::json empty = nlohmann::json::array();
    const std::string expected = fmt::format("an array of at most {} entries", max);
    if (!required && (!obj.is_object() || !obj.contains(key) || obj.at(key).is_null()))
      return empty;
    const auto& v = at(obj, path, key, expected);
    if (!v.is_array() || v.size() > max) fail(join(path, key), expected, json_excerpt(v));
    return v;
  }

 private:
  std::string where_;
};

struct Times {  // B of the schema
  double iteration = 0, compute = 0, exposed = 0, overlapped = 0, bubble = 0, profiler = 0;
  Breakdown breakdown() const {
    Breakdown b;
    b.wall = iteration;
    b.compute = compute;
    b.overlapped = std::min(overlapped, compute);
    b.exposed = exposed;
    b.bubble = bubble;
    b.idle = std::max(0.0, iteration - compute - exposed);
    b.bubble = std::min(bubble, b.idle);
    b.comm = overlapped + exposed;
    b.profiler_comm = profiler;
    return b;
  }
};
struct CurvePoint {
  double bytes, measured, model;
};
struct Curve {
  std::string collective, group;
  int ranks = 0;
  std::vector<CurvePoint> points;
};
struct NetworkEntry {
  std::string profile, file;
  int nodes = 0, ranks_per_node = 0;
  std::vector<Curve> curves;
};
struct RunCollective {
  std::string collective, group;
  double measured = 0, predicted = 0, measured_profiler = 0, predicted_profiler = 0, error_pct = 0;
  std::optional<double> profiler_error_pct;  // absent in folders written before it
};
struct Run {
  std::string id, strategy, network, trace_dir;
  int ranks = 0, nodes = 0;
  Times measured, predicted;
  double error_pct = 0;
  std::vector<RunCollective> collectives;
  std::vector<Point> throughput;
};
struct Projection {
  std::string run, base_run;
  double measured = 0, projected = 0, projection_error_pct = 0, simulation_error_pct = 0;
};
struct Characterization {
  std::string created, hostname, mode, model;
  int cores = 0;
  bool quick = false;
  std::vector<NetworkEntry> networks;
  bool has_compute = false;
  std::string compute_file;
  double gemm_tflops = 0;
  std::vector<std::vector<std::string>> gemm_points;
  std::vector<Run> runs;
  std::vector<Projection> projection;
  double mape = 0, max_error = 0, collective_mape = 0;
  std::optional<double> collective_profiler_mape, collective_weighted;  // keys added later
};

Times read_times(const Reader& r, const nlohmann::json& o, const std::string& path) {
  Times t;
  t.iteration = r.number(o, path, "iteration_s");
  t.compute = r.number(o, path, "compute_s");
  t.exposed = r.number(o, path, "exposed_comm_s");
  t.overlapped = r.number(o, path, "overlapped_comm_s");
  t.bubble = r.number(o, path, "bubble_s");
  t.profiler = r.number(o, path, "profiler_comm_s");
  // Parts of one iteration (found by probing, 2026-11-30: an exposed time above the iteration
  // rendered as an 1131% share). The slack is the rounding of the times written.
  if (t.iteration > 1e6)
    r.fail(path + ".iteration_s", "at most 1e6 seconds", fmt::format("{}", t.iteration));
  const double slack = 1e-6 * t.iteration + 1e-9;
  for (const auto& [key, v] : {std::pair{"compute_s", t.compute},
                               {"exposed_comm_s", t.exposed},
                               {"bubble_s", t.bubble},
                               {"overlapped_comm_s", t.overlapped},
                               {"profiler_comm_s", t.profiler}})
    if (v > t.iteration + slack)
      r.fail(path + "." + key, fmt::format("at most iteration_s ({})", t.iteration),
             fmt::format("{}", v));
  // Overlapped communication is part of all communication, which the profiler's view holds
  // (its calls include their waits): found by probing, 2026-11-30, 0.3 s overlapped of 0.064.
  if (t.overlapped > t.profiler + slack)
    r.fail(path + ".overlapped_comm_s", fmt::format("at most profiler_comm_s ({})", t.profiler),
           fmt::format("{}", t.overlapped));
  if (t.compute + t.exposed + t.bubble > t.iteration + slack)
    r.fail(path + ".compute_s", "compute + exposed_comm_s + bubble_s at most iteration_s",
           fmt::format("{} + {} + {} > {}", t.compute, t.exposed, t.bubble, t.iteration));
  return t;
}

// A stated percentage against the one the other figures give (written to 0.1 points):
// "expected <what> (<want>)".
void check_agrees(const Reader& r, const std::string& where, double given, double want,
                  const std::string& what) {
  if (std::fabs(given - want) > 0.1 + 1e-3 * std::fabs(want))
    r.fail(where, fmt::format("{} ({:.2f})", what, want), fmt::format("{}", given));
}

// A stated error against the one its two times give, 100 x (predicted - measured) / measured;
// none where nothing was measured (characterize writes 0 there).
void check_error(const Reader& r, const std::string& where, double given, double measured,
                 double predicted, const char* formula) {
  if (!(measured > 0)) return;
  const double e = 100 * (predicted - measured) / measured;
  if (std::fabs(given - e) > 0.1 + 1e-3 * std::fabs(e))
    r.fail(where, fmt::format("{} = {:.2f}", formula, e), fmt::format("{}", given));
}

Characterization read_characterization(const nlohmann::json& j, const Reader& r) {
  Characterization c;
  const std::string schema = r.text(j, "", "schema");
  if (schema != "commscope.characterize/1")
    r.fail("schema", "'commscope.characterize/1'", json_excerpt(j.at("schema")));
  c.created = r.text(j, "", "created");
  const auto& host = r.at(j, "", "host", "an object");
  c.hostname = r.text(host, "host", "hostname");
  c.cores = r.count(host, "host", "cores");
  c.mode = r.text(host, "host", "mode");
  if (c.mode != "emulate" && c.mode != "cluster")
    r.fail("host.mode", "emulate or cluster", json_excerpt(host.at("mode")));
  c.model = r.text(j, "", "model");
  c.quick = r.boolean(j, "", "quick");

  const auto& nets = r.array(j, "", "network", 256);
  for (std::size_t i = 0; i < nets.size(); ++i) {
    const std::string p = fmt::format("network[{}]", i);
    NetworkEntry n;
    n.profile = r.text(nets[i], p, "profile");
    n.nodes = r.count(nets[i], p, "nodes");
    n.ranks_per_node = r.count(nets[i], p, "ranks_per_node");
    n.file = r.text(nets[i], p, "file");
    const auto& curves = r.array(nets[i], p, "curves", 256);
    for (std::size_t k = 0; k < curves.size(); ++k) {
      const std::string cp = fmt::format("{}.curves[{}]", p, k);
      Curve cv;
      cv.collective = r.text(curves[k], cp, "collective");
      cv.group = r.text(curves[k], cp, "group");
      cv.ranks = r.count(curves[k], cp, "ranks");
      const auto& pts = r.array(curves[k], cp, "points", 4096);
      for (std::size_t q = 0; q < pts.size(); ++q) {
        const std::string pp = fmt::format("{}.points[{}]", cp, q);
        cv.points.push_back({r.number(pts[q], pp, "bytes"),
                             r.number(pts[q], pp, "measured_busbw_gbps"),
                             r.number(pts[q], pp, "model_busbw_gbps")});
        // a curve's sizes rise (the chart draws the points in order)
        if (q > 0 && !(cv.points[q].bytes > cv.points[q - 1].bytes))
          r.fail(pp + ".bytes",
                 fmt::format("a size above the point before's ({})", cv.points[q - 1].bytes),
                 fmt::format("{}", cv.points[q].bytes));
      }
      n.curves.push_back(std::move(cv));
    }
    c.networks.push_back(std::move(n));
  }

  if (j.contains("compute") && !j.at("compute").is_null()) {
    const auto& comp = j.at("compute");
    c.has_compute = true;
    c.compute_file = r.text(comp, "compute", "file");
    c.gemm_tflops = r.number(comp, "compute", "gemm_tflops");
    const auto& pts = r.array(comp, "compute", "points", 4096);
    for (std::size_t q = 0; q < pts.size(); ++q) {
      const std::string pp = fmt::format("compute.points[{}]", q);
      c.gemm_points.push_back({r.text(pts[q], pp, "op"), num(r.number(pts[q], pp, "m"), 0),
                               num(r.number(pts[q], pp, "n"), 0), num(r.number(pts[q], pp, "k"), 0),
                               num(r.number(pts[q], pp, "tflops"), 3)});
    }
  }

  const auto& runs = r.array(j, "", "runs", 4096);
  std::set<std::string> ids;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const std::string p = fmt::format("runs[{}]", i);
    Run run;
    run.id = r.text(runs[i], p, "id");
    if (!ids.insert(run.id).second)
      r.fail(p + ".id", "a run id not used before", json_excerpt(runs[i].at("id")));
    run.strategy = r.text(runs[i], p, "strategy");
    run.ranks = r.count(runs[i], p, "ranks");
    run.nodes = r.count(runs[i], p, "nodes");
    if (run.nodes > run.ranks)
      r.fail(p + ".nodes", fmt::format("at most the run's ranks ({})", run.ranks),
             std::to_string(run.nodes));
    run.network = r.text(runs[i], p, "network");
    run.trace_dir = r.text(runs[i], p, "trace_dir");
    run.measured = read_times(r, r.at(runs[i], p, "measured", "an object"), p + ".measured");
    run.predicted = read_times(r, r.at(runs[i], p, "predicted", "an object"), p + ".predicted");
    run.error_pct = r.number(runs[i], p, "iteration_error_pct", false);
    // The error the two iterations give (found by probing, 2026-11-30: -90% was drawn beside
    // times 4% apart).
    check_error(r, p + ".iteration_error_pct", run.error_pct, run.measured.iteration,
                run.predicted.iteration,
                "the iterations' error, 100 x (predicted - measured) / measured");
    const auto& cols = r.array(runs[i], p, "collectives", 256);
    for (std::size_t k = 0; k < cols.size(); ++k) {
      const std::string cp = fmt::format("{}.collectives[{}]", p, k);
      RunCollective rc;
      rc.collective = r.text(cols[k], cp, "collective");
      rc.group = r.text(cols[k], cp, "group");
      rc.measured = r.number(cols[k], cp, "measured_s");
      rc.predicted = r.number(cols[k], cp, "predicted_s");
      rc.measured_profiler = r.number(cols[k], cp, "measured_profiler_s");
      rc.predicted_profiler = r.number(cols[k], cp, "predicted_profiler_s");
      rc.error_pct = r.number(cols[k], cp, "error_pct", false);
      if (cols[k].contains("profiler_error_pct"))
        rc.profiler_error_pct = r.number(cols[k], cp, "profiler_error_pct", false);
      // One collective's time lies inside its run's iteration (a measured_s of 3 s in a 0.44 s
      // iteration was drawn as a 679% share).
      for (const auto& [key, v, of] :
           {std::tuple{"measured_s", rc.measured, run.measured.iteration},
            std::tuple{"predicted_s", rc.predicted, run.predicted.iteration},
            std::tuple{"measured_profiler_s", rc.measured_profiler, run.measured.iteration},
            std::tuple{"predicted_profiler_s", rc.predicted_profiler, run.predicted.iteration}})
        if (v > of + 1e-6 * of + 1e-9)
          r.fail(cp + "." + key, fmt::format("at most the run's iteration ({} s)", of),
                 fmt::format("{}", v));
      // Its errors are its times' (an error_pct of 50 beside times 6% apart was drawn as it
      // stood, found by probing, 2026-11-30).
      check_error(r, cp + ".error_pct", rc.error_pct, rc.measured, rc.predicted,
                  "100 x (predicted_s - measured_s) / measured_s");
      if (rc.profiler_error_pct)
        check_error(r, cp + ".profiler_error_pct", *rc.profiler_error_pct, rc.measured_profiler,
                    rc.predicted_profiler,
                    "100 x (predicted_profiler_s - measured_profiler_s) / measured_profiler_s");
      run.collectives.push_back(std::move(rc));
    }
    const auto& tp = r.array(runs[i], p, "throughput_gbps_per_node", 100000);
    for (std::size_t k = 0; k < tp.size(); ++k) {
      const std::string cp = fmt::format("{}.throughput_gbps_per_node[{}]", p, k);
      run.throughput.push_back({r.number(tp[k], cp, "t_s"), r.number(tp[k], cp, "gbps")});
      if (k > 0 && run.throughput[k].x < run.throughput[k - 1].x)
        r.fail(cp + ".t_s",
               fmt::format("a time at or after the window before's ({})", run.throughput[k - 1].x),
               fmt::format("{}", run.throughput[k].x));
    }
    c.runs.push_back(std::move(run));
  }

  const auto& proj = r.array(j, "", "projection", 4096, /*required=*/false);
  for (std::size_t i = 0; i < proj.size(); ++i) {
    const std::string p = fmt::format("projection[{}]", i);
    Projection pr;
    pr.run = r.text(proj[i], p, "run");
    pr.base_run = r.text(proj[i], p, "base_run");
    if (!ids.count(pr.run)) r.fail(p + ".run", "the id of a run in 'runs'", json_excerpt(pr.run));
    if (!ids.count(pr.base_run))
      r.fail(p + ".base_run", "the id of a run in 'runs'", json_excerpt(pr.base_run));
    if (pr.base_run == pr.run)
      r.fail(p + ".base_run", "another run than the one projected", json_excerpt(pr.base_run));
    pr.measured = r.number(proj[i], p, "measured_iteration_s");
    pr.projected = r.number(proj[i], p, "projected_iteration_s");
    pr.projection_error_pct = r.number(proj[i], p, "projection_error_pct", false);
    pr.simulation_error_pct = r.number(proj[i], p, "simulation_error_pct", false);
    check_error(r, p + ".projection_error_pct", pr.projection_error_pct, pr.measured, pr.projected,
                "100 x (projected - measured) / measured");
    for (const Run& run : c.runs)
      if (run.id == pr.run)
        check_agrees(r, p + ".simulation_error_pct", pr.simulation_error_pct, run.error_pct,
                     fmt::format("the iteration_error_pct of run '{}'", run.id));
    c.projection.push_back(std::move(pr));
  }

  const auto& sum = r.at(j, "", "summary", "an object");
  const int nruns = r.index(sum, "summary", "runs");
  if (static_cast<std::size_t>(nruns) != c.runs.size())
    r.fail("summary.runs", fmt::format("{} (the entries of 'runs')", c.runs.size()),
           json_excerpt(sum.at("runs")));
  c.mape = r.number(sum, "summary", "iteration_mape_pct");
  c.max_error = r.number(sum, "summary", "iteration_max_error_pct");
  // The summary is the runs' (a MAPE of 55% printed over runs whose errors average 7%).
  if (!c.runs.empty()) {
    double mean = 0, most = 0;
    for (const Run& run : c.runs) {
      mean += std::fabs(run.error_pct) / static_cast<double>(c.runs.size());
      most = std::max(most, std::fabs(run.error_pct));
    }
    check_agrees(r, "summary.iteration_mape_pct", c.mape, mean,
                 "the mean of the runs' |iteration_error_pct|");
    check_agrees(r, "summary.iteration_max_error_pct", c.max_error, most,
                 "the largest of the runs' |iteration_error_pct|");
  }
  c.collective_mape = r.number(sum, "summary", "collective_mape_pct");
  if (sum.contains("collective_profiler_mape_pct"))
    c.collective_profiler_mape = r.number(sum, "summary", "collective_profiler_mape_pct");
  if (sum.contains("collective_weighted_error_pct"))
    c.collective_weighted = r.number(sum, "summary", "collective_weighted_error_pct");
  // The collective summary is the collectives' too, as characterize computes it over the rows
  // that measured a time (a collective MAPE of 99% was drawn over errors averaging 11%).
  if (!c.runs.empty()) {
    double abs_sum = 0, prof_sum = 0, w_abs = 0, w_meas = 0;
    int n = 0, pn = 0;
    for (const Run& run : c.runs)
      for (const RunCollective& rc : run.collectives) {
        if (!(rc.measured > 0)) continue;
        abs_sum += std::fabs(rc.error_pct), ++n;
        w_abs += std::fabs(rc.predicted - rc.measured), w_meas += rc.measured;
        if (rc.measured_profiler > 0 && rc.profiler_error_pct)
          prof_sum += std::fabs(*rc.profiler_error_pct), ++pn;
      }
    auto agree = [&](const char* key, double given, double want, const char* what) {
      check_agrees(r, std::string("summary.") + key, given, want, what);
    };
    agree("collective_mape_pct", c.collective_mape, n ? abs_sum / n : 0.0,
          "the mean |error_pct| of the runs' collectives with a measured time");
    if (c.collective_profiler_mape)
      agree("collective_profiler_mape_pct", *c.collective_profiler_mape, pn ? prof_sum / pn : 0.0,
            "the mean |profiler_error_pct| of the runs' collectives with a measured profiler time");
    if (c.collective_weighted)
      agree("collective_weighted_error_pct", *c.collective_weighted,
            w_meas > 0 ? w_abs / w_meas * 100 : 0.0,
            "100 x the sum of |predicted_s - measured_s| over the sum of measured_s");
  }
  return c;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

Document predict_page(const std::vector<PredictRow>& all_rows, bool scaling) {
  Document d;
  d.title = "commscope predict";
  const std::size_t n = std::min(all_rows.size(), kMaxBars);
  const std::vector<PredictRow> rows(all_rows.begin(), all_rows.begin() + static_cast<long>(n));
  const auto labels = predict_labels(rows);
  if (!rows.empty()) {
    // Each of model, system and network: its name, or its names where the rows differ (the
    // subtitle named the first row's alone).
    auto names = [&](auto field) {
      std::vector<std::string> seen;
      for (const auto& r : all_rows)
        if (std::find(seen.begin(), seen.end(), field(r)) == seen.end()) seen.push_back(field(r));
      return seen.size() <= 3 ? fmt::format("{}", fmt::join(seen, ", "))
                              : fmt::format("{} and {} more", seen.front(), seen.size() - 1);
    };
    d.subtitle = fmt::format("{} on {} over {}: {} plan{}",
                             names([](const PredictRow& r) { return r.scenario.model.name; }),
                             names([](const PredictRow& r) { return r.scenario.system.name; }),
                             names([](const PredictRow& r) { return r.scenario.network.name; }),
                             all_rows.size(), all_rows.size() == 1 ? "" : "s");
    const auto best = std::max_element(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
      return a.tokens_per_s < b.tokens_per_s;
    });
    d.facts = {{"plans", std::to_string(all_rows.size())},
               {"most tokens/s", labels[static_cast<std::size_t>(best - rows.begin())]},
               {"its tokens/s", with_commas(std::llround(best->tokens_per_s))},
               {"its iteration", fmt::format("{} ms", ms(best->iteration_time))},
               {"its MFU", fmt::format("{} %", pct(best->mfu))}};
  }
  if (n < all_rows.size()) d.notes.push_back(left_out_note(n, all_rows.size(), "plans"));

  Section time{"Where the iteration goes", {}, {}, {}};
  std::vector<Breakdown> bds;
  for (const auto& r : rows) bds.push_back(r.breakdown);
  time.charts.push_back(breakdown_chart(
      "Time distribution per plan",
      "One bar per plan: the predicted iteration split into compute alone, compute with "
      "communication overlapped (hidden), exposed communication, memory copies, pipeline "
      "bubble and other idle time, mean over pipeline stages; the parts add up to the "
      "iteration.",
      labels, bds, "plan"));
  d.sections.push_back(std::move(time));

  Section comm{"Communication per collective", {}, {}, {}};
  {
    Chart c = chart(
        ChartKind::bar, "Share of the iteration per collective",
        "Per plan, the time each collective runs (the union of its calls, overlapped or not) as "
        "a percentage of the iteration; the exposed part is in the table. Collectives run "
        "beside one another (a pipeline send beside its receive, a gradient reduce beside a "
        "parameter gather), so the shares may add up to more than 100 %.",
        "plan", "share of the iteration (%)");
    c.categories = labels;
    std::set<Collective> used;
    for (const auto& r : rows)
      r.breakdown.by_collective.for_each([&](Collective k, const CommShare&) { used.insert(k); });
    c.table = table({"plan", "collective", "time ms", "exposed ms", "profiler ms", "share %"}, 2);
    for (Collective k : used) {
      Series s{std::string(to_string(k)), {}, {}, "", false, ""};
      for (const auto& r : rows)
        s.values.push_back(r.share(r.breakdown.by_collective[k].total) * 100);
      c.series.push_back(std::move(s));
    }
    for (std::size_t i = 0; i < rows.size(); ++i)
      rows[i].breakdown.by_collective.for_each([&](Collective k, const CommShare& s) {
        c.table.add({labels[i], std::string(to_string(k)), ms(s.total), ms(s.exposed),
                     ms(s.profiler), pct(rows[i].share(s.total))});
      });
    comm.charts.push_back(std::move(c));
  }
  d.sections.push_back(std::move(comm));

  Section thr{"Throughput", {}, {}, {}};
  {
    Chart c =
        chart(ChartKind::bar, "Tokens per second per plan",
              "Predicted training throughput of the whole job (global batch x sequence length "
              "/ iteration time), with MFU and memory per GPU in the table.",
              "plan", "tokens/s");
    c.categories = labels;
    Series s{"tokens/s", {}, {}, "", false, "#59a14f"};
    c.table.header = {"plan",  "iteration ms", "tokens/s", "TFLOP/s/GPU",
                      "MFU %", "mem/GPU",      "fits"};
    c.table.right = {false, true, true, true, true, true, false};
    for (std::size_t i = 0; i < rows.size(); ++i) {
      s.values.push_back(rows[i].tokens_per_s);
      c.table.add({labels[i], ms(rows[i].iteration_time),
                   with_commas(std::llround(rows[i].tokens_per_s)), num(rows[i].tflops_per_gpu, 1),
                   pct(rows[i].mfu), human_bytes(Bytes(rows[i].memory_per_gpu)),
                   rows[i].fits ? "yes" : "no"});
    }
    c.series.push_back(std::move(s));
    thr.charts.push_back(std::move(c));
  }
  d.sections.push_back(std::move(thr));

  if (scaling && rows.size() > 1) {
    Section sc{"Scaling and the seeds' projection", {}, {}, {}};
    Chart c =
        chart(ChartKind::bar, "Predicted against projected iteration time",
              "Per plan, the simulated iteration and the seeds' projection from the first plan's "
              "breakdown (compute scaled by work, exposed communication by the all-reduce's "
              "efficiency); their difference is the projection error in the table.",
              "plan", "iteration time (ms)");
    c.categories = labels;
    Series sim{"simulated", {}, {}, "", false, "#4e79a7"};
    Series proj{"projected", {}, {}, "", false, "#f28e2b"};
    c.table = table(
        {"plan", "simulated ms", "projected ms", "proj err %", "speedup", "scaling eff %"}, 1);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      sim.values.push_back(rows[i].iteration_time * 1e3);
      proj.values.push_back(rows[i].projected_time * 1e3);
      c.table.add({labels[i], ms(rows[i].iteration_time), ms(rows[i].projected_time),
                   pct(rows[i].projection_error), num(rows[i].speedup),
                   pct(rows[i].scaling_efficiency)});
    }
    c.series = {std::move(sim), std::move(proj)};
    sc.charts.push_back(std::move(c));
    d.sections.push_back(std::move(sc));
  }
  return d;
}

Document seeds_page(const SeedsResult& r) {
  Document d;
  d.title = "The seed studies as commscope predicts them";
  d.subtitle = fmt::format(
      "{} runs, {} headline figures (presets/scenarios/seeds.json, "
      "docs/seeds.md)",
      r.rows.size(), r.comparisons.size());
  d.facts = {{"runs", std::to_string(r.rows.size())},
             {"headlines", std::to_string(r.comparisons.size())},
             {"runs that do not fit", std::to_string(r.do_not_fit)}};
  if (r.do_not_fit > 0)
    d.notes.push_back(fmt::format(
        "{} runs need more GPU memory than their system has; the comparisons leave them out.",
        r.do_not_fit));

  Section head{"The studies' headline numbers against commscope's", {}, {}, {}};
  head.paragraphs.push_back(
      "Each headline as the study states it, the same figure computed from commscope's rows "
      "below (nothing is fitted to the studies' numbers), their difference and the reason "
      "derived from the rows.");
  // One chart per unit, so that bars on one axis are comparable.
  std::vector<std::string> units;
  for (const auto& c : r.comparisons)
    if (std::find(units.begin(), units.end(), c.headline.unit) == units.end())
      units.push_back(c.headline.unit);
  for (const auto& unit : units) {
    Chart c = chart(ChartKind::bar, fmt::format("Headlines in {}", unit),
                    "Per headline, the study's published figure beside commscope's prediction "
                    "of it; the table gives the difference and what it rests on.",
                    "headline", unit);
    Series seed{"seed study", {}, {}, "", false, "#bab0ac"};
    Series pred{"commscope", {}, {}, "", false, "#4e79a7"};
    c.table = table({"headline", "seed", "commscope", "difference"}, 1);
    for (const auto& k : r.comparisons) {
      if (k.headline.unit != unit) continue;
      c.categories.push_back(k.headline.id);
      seed.values.push_back(k.headline.seed);
      pred.values.push_back(k.predicted);
      c.table.add({k.headline.id, num(k.headline.seed), num(k.predicted), num(k.difference)});
    }
    c.series = {std::move(seed), std::move(pred)};
    head.charts.push_back(std::move(c));
  }
  // Every headline in full, below the charts: what the study says, where commscope's figure
  // comes from and why the two differ.
  TableBlock all{"Every headline, its basis and the reason for the difference",
                 "basis: the rows or matched pairs the predicted figure rests on; where: the run "
                 "that gave a maximum, or the mean over pairs.",
                 table({"headline", "study", "says", "unit", "seed", "commscope", "difference",
                        "where", "basis", "reason"},
                       4)};
  for (const auto& k : r.comparisons)
    all.table.add({k.headline.id, k.headline.study, k.headline.says, k.headline.unit,
                   num(k.headline.seed), num(k.predicted), num(k.difference), k.where,
                   std::to_string(k.basis), k.reason});
  head.tables.push_back(std::move(all));
  d.sections.push_back(std::move(head));

  // The runs, group by group: where each run's iteration goes.
  std::vector<std::string> groups;
  for (const auto& g : r.row_group)
    if (std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
  for (const auto& g : groups) {
    std::vector<PredictRow> rows;
    for (std::size_t i = 0; i < r.rows.size() && i < r.row_group.size(); ++i)
      if (r.row_group[i] == g && rows.size() < kMaxBars) rows.push_back(r.rows[i]);
    std::vector<Breakdown> bds;
    for (const auto& row : rows) bds.push_back(row.breakdown);
    Section sec{fmt::format("Runs of group {}", g), {}, {}, {}};
    const std::size_t in_group =
        static_cast<std::size_t>(std::count(r.row_group.begin(), r.row_group.end(), g));
    if (rows.size() < in_group)
      sec.paragraphs.push_back(left_out_note(rows.size(), in_group, "runs"));
    sec.charts.push_back(breakdown_chart(
        fmt::format("Time distribution, {}", g),
        "One bar per run: the predicted iteration split into compute alone, compute with "
        "communication overlapped, exposed communication, memory copies, pipeline bubble and "
        "other idle; the table adds communication as a profiler records it.",
        predict_labels(rows), bds, "run"));
    d.sections.push_back(std::move(sec));
  }
  return d;
}

Document analysis_page(const Analysis& a) {
  Document d;
  d.title = "commscope analyze";
  d.subtitle = fmt::format("{} trace file{}", a.ranks.size(), a.ranks.size() == 1 ? "" : "s");
  double comm_total = 0;
  for (const auto& c : a.collectives) comm_total += c.total_s;
  d.facts = {{"ranks", std::to_string(a.ranks.size())},
             {"collectives", std::to_string(a.collectives.size())},
             {"communication kernel time", fmt::format("{} ms", ms(comm_total))}};
  if (a.slowest_rank >= 0) d.facts.push_back({"slowest rank", std::to_string(a.slowest_rank)});
  for (const auto& b : a.bad_files) d.notes.push_back("skipped " + b);
  const std::size_t n = std::min(a.ranks.size(), kMaxBars);
  if (n < a.ranks.size()) d.notes.push_back(left_out_note(n, a.ranks.size(), "ranks"));

  Section time{"Where the time went, per rank", {}, {}, {}};
  std::vector<std::string> labels;
  std::vector<Breakdown> bds;
  for (std::size_t i = 0; i < n; ++i) {
    labels.push_back(fmt::format("rank {}", a.ranks[i].rank));
    bds.push_back(a.ranks[i].total);
  }
  time.charts.push_back(breakdown_chart(
      "Time distribution per rank",
      "One bar per rank over its window (first to last GPU event): compute kernels alone, "
      "compute with communication overlapped, exposed communication, memory copies and idle "
      "time, as the timeline's breakdown counts them.",
      labels, bds, "rank"));
  d.sections.push_back(std::move(time));

  if (!a.collectives.empty()) {
    Section comm{"Collectives", {}, {}, {}};
    std::vector<std::string> names;
    for (const auto& c : a.collectives) names.push_back(c.name);
    Chart t = chart(ChartKind::bar, "Time per collective",
                    "Kernel time of each collective summed over calls and ranks, most first; calls "
                    "and sizes in the table.",
                    "collective", "total time (ms)");
    t.categories = names;
    Series s{"total time", {}, {}, "", false, "#e15759"};
    t.table = table({"collective", "calls", "total ms", "p50 ms", "p50 size"}, 1);
    for (const auto& c : a.collectives) {
      s.values.push_back(c.total_s * 1e3);
      t.table.add({c.name, with_commas(static_cast<std::int64_t>(c.calls)), ms(c.total_s),
                   ms(c.time_s.p50), c.bytes.n ? human_bytes(Bytes(c.bytes.p50)) : "-"});
    }
    t.series.push_back(std::move(s));
    comm.charts.push_back(std::move(t));

    Chart bw =
        chart(ChartKind::bar, "Achieved bandwidth per collective",
              "nccl-tests' algbw (bytes / time) and busbw (algbw x the collective's bus factor "
              "for its group size), median and maximum over the calls with sizes, in Gb/s.",
              "collective", "bandwidth (Gb/s)");
    bw.categories = names;
    Series alg{"algbw p50", {}, {}, "", false, "#76b7b2"};
    Series bus{"busbw p50", {}, {}, "", false, "#4e79a7"};
    Series busmax{"busbw max", {}, {}, "", false, "#a0cbe8"};
    bw.table = table({"collective", "calls with size", "algbw p50", "busbw p50", "busbw max"}, 1);
    for (const auto& c : a.collectives) {
      const bool sized = c.busbw.n > 0;
      alg.values.push_back(sized ? gbps(c.algbw.p50) : NAN);
      bus.values.push_back(sized ? gbps(c.busbw.p50) : NAN);
      busmax.values.push_back(sized ? gbps(c.busbw.max) : NAN);
      bw.table.add({c.name, std::to_string(c.busbw.n), sized ? num(gbps(c.algbw.p50)) : "-",
                    sized ? num(gbps(c.busbw.p50)) : "-", sized ? num(gbps(c.busbw.max)) : "-"});
    }
    bw.series = {std::move(alg), std::move(bus), std::move(busmax)};
    comm.charts.push_back(std::move(bw));

    if (!a.spreads.empty()) {
      TableBlock tb;
      tb.title = "Largest spreads between ranks";
      tb.caption =
          "The k-th call of a collective on every rank: the shortest kernel is the rank "
          "that arrived last, the longest the one that waited for it.";
      tb.table = table({"collective", "call", "min ms", "max ms", "late rank", "waiting rank"}, 1);
      for (std::size_t i = 0; i < std::min<std::size_t>(a.spreads.size(), 20); ++i) {
        const auto& sp = a.spreads[i];
        tb.table.add({sp.collective, std::to_string(sp.call), ms(sp.min_s), ms(sp.max_s),
                      std::to_string(sp.late_rank), std::to_string(sp.waiting_rank)});
      }
      comm.tables.push_back(std::move(tb));
    }
    d.sections.push_back(std::move(comm));
  }

  if (!a.top_kernels.empty()) {
    Section k{"Top kernels", {}, {}, {}};
    TableBlock tb;
    tb.title = "Kernels by total time over all ranks";
    tb.table = table({"kernel", "kind", "calls", "total ms"}, 2);
    for (const auto& kst : a.top_kernels)
      tb.table.add({kst.name, kst.comm ? "comm" : "compute",
                    with_commas(static_cast<std::int64_t>(kst.calls)), ms(kst.total_s)});
    k.tables.push_back(std::move(tb));
    d.sections.push_back(std::move(k));
  }
  return d;
}

Result<Document> train_page(const nlohmann::json& doc, const std::string& where) {
  try {
    const Reader r(where);
    if (!doc.is_object())
      return Error{
          fmt::format("{}: expected the json document of commscope-train (an object), got {}",
                      where, json_excerpt(doc))};
    Document d;
    d.title = "commscope train";
    const auto& model = r.at(doc, "", "model", "an object");
    const std::string strategy = r.text(doc, "", "strategy");
    const int ranks = r.count(doc, "", "ranks");
    d.subtitle =
        fmt::format("{} with {} on {} ranks", r.text(model, "model", "name"), strategy, ranks);
    const auto& avg = r.at(doc, "", "average", "an object");
    d.facts = {
        {"ranks", std::to_string(ranks)},
        {"strategy", strategy},
        {"parameters", human_count(r.number(model, "model", "parameters"))},
        {"global batch", std::to_string(r.count(doc, "", "global_batch"))},
        {"step time (after warm-up)", fmt::format("{} ms", ms(r.number(avg, "average", "time_s")))},
        {"tokens/s", with_commas(std::llround(r.number(avg, "average", "tokens_per_s")))},
        {"GFLOP/s", num(r.number(avg, "average", "gflops"), 1)}};
    if (doc.contains("communication_matches_workload") &&
        doc.at("communication_matches_workload").is_boolean() &&
        !doc.at("communication_matches_workload").get<bool>())
      d.notes.push_back("The measured communication differs from the workload's (see the table).");

    const auto& per_rank = r.array(doc, "", "per_rank", 1 << 20);
    Section time{"Where the time went, per rank", {}, {}, {}};
    std::vector<std::string> labels;
    std::vector<Breakdown> bds;
    for (std::size_t i = 0; i < std::min(per_rank.size(), kMaxBars); ++i) {
      const std::string p = fmt::format("per_rank[{}]", i);
      auto b = breakdown_from_json(per_rank[i], where + ": " + p);
      if (!b) return b.error();
      labels.push_back(fmt::format("rank {}", r.index(per_rank[i], p, "rank")));
      bds.push_back(*b);
    }
    if (per_rank.size() > kMaxBars)
      d.notes.push_back(left_out_note(kMaxBars, per_rank.size(), "ranks"));
    time.charts.push_back(breakdown_chart(
        "Measured time distribution per rank",
        "Each rank's step averaged after the warm-up steps: compute alone, compute with "
        "communication overlapped, exposed communication and idle time, as the trainer's "
        "recorded timeline shows them (a straggler or a waiting rank stands out here).",
        labels, bds, "rank"));
    d.sections.push_back(std::move(time));

    const auto& comm = r.array(doc, "", "communication", 1024);
    double bytes_per_step = 0;
    if (!comm.empty()) {
      Section s{"Collectives", {}, {}, {}};
      Chart c = chart(ChartKind::bar,
                      "Bytes per iteration per collective, measured and from the workload",
                      "What each rank sent per iteration through each collective, against what the "
                      "workload of the same model and plan counts (they match when the trainer "
                      "executes the workload's communication exactly).",
                      "group / collective", "MB per iteration");
      Series meas{"measured", {}, {}, "", false, "#4e79a7"};
      Series work{"workload", {}, {}, "", false, "#bab0ac"};
      c.table = table({"group", "collective", "calls", "MB", "workload calls", "workload MB"}, 2);
      for (std::size_t i = 0; i < comm.size(); ++i) {
        const std::string p = fmt::format("communication[{}]", i);
        const std::string g = r.text(comm[i], p, "group"), k = r.text(comm[i], p, "collective");
        const double calls = r.number(comm[i], p, "calls_per_iteration");
        const double bytes = r.number(comm[i], p, "bytes_per_iteration");
        const double wcalls = r.number(comm[i], p, "workload_calls");
        const double wbytes = r.number(comm[i], p, "workload_bytes");
        bytes_per_step += bytes;
        c.categories.push_back(g + " " + k);
        meas.values.push_back(bytes / 1e6);
        work.values.push_back(wbytes / 1e6);
        // Calls per iteration are whole unless averaged over uneven steps ("1.0" read oddly).
        auto count = [](double n) { return n == std::floor(n) ? num(n, 0) : num(n, 1); };
        c.table.add({g, k, count(calls), num(bytes / 1e6, 3), count(wcalls), num(wbytes / 1e6, 3)});
      }
      c.series = {std::move(meas), std::move(work)};
      s.charts.push_back(std::move(c));
      d.sections.push_back(std::move(s));
    }

    const auto& steps = r.array(doc, "", "steps", 1 << 20);
    if (!steps.empty()) {
      Section s{"Over the run", {}, {}, {}};
      Chart st = chart(ChartKind::line, "Step time",
                       "Wall time of every step (the first ones include warm-up), and its exposed "
                       "communication, against the time since the first step began.",
                       "time since start (s)", "time (ms)");
      Series total{"step time", {}, {}, "", false, "#4e79a7"};
      Series exposed{"exposed comm", {}, {}, "", false, "#e15759"};
      Chart rate = chart(ChartKind::line, "Collective payload rate per rank over time",
                         "Per step, the bytes one rank sends through collectives in an iteration "
                         "(the table above) divided by the step's wall time, in Gb/s: the "
                         "communication rate the training sustains, not the link's peak (the "
                         "step table above has it in its last column).",
                         "time since start (s)", "Gb/s per rank");
      Series g{"payload rate", {}, {}, "", false, "#f28e2b"};
      st.table.header = {"step", "end s", "time ms", "exposed ms", "tokens/s", "Gb/s per rank"};
      st.table.right.assign(st.table.header.size(), true);
      double t = 0;
      for (std::size_t i = 0; i < steps.size(); ++i) {
        const std::string p = fmt::format("steps[{}]", i);
        const double sec = r.number(steps[i], p, "time_s");
        auto b = breakdown_from_json(r.at(steps[i], p, "breakdown", "an object"),
                                     where + ": " + p + ".breakdown");
        if (!b) return b.error();
        t += sec;
        const double rate_gbps = sec > 0 ? gbps(bytes_per_step / sec) : NAN;
        total.points.push_back({t, sec * 1e3});
        exposed.points.push_back({t, b->exposed * 1e3});
        g.points.push_back({t, rate_gbps});
        st.table.add({num(r.number(steps[i], p, "step"), 0), num(t, 3), ms(sec), ms(b->exposed),
                      with_commas(std::llround(r.number(steps[i], p, "tokens_per_s"))),
                      std::isfinite(rate_gbps) ? num(rate_gbps, 3) : "-"});
      }
      st.series = {std::move(total), std::move(exposed)};
      rate.series = {std::move(g)};
      s.charts.push_back(std::move(st));
      if (bytes_per_step > 0) s.charts.push_back(std::move(rate));
      d.sections.push_back(std::move(s));
    }
    return d;
  } catch (const FieldError& e) {
    return Error{e.message};
  }
}

Result<Document> characterize_page(const nlohmann::json& doc, const std::string& where) {
  Characterization c;
  try {
    c = read_characterization(doc, Reader(where));
  } catch (const FieldError& e) {
    return Error{e.message};
  }
  Document d;
  d.title = fmt::format("commscope characterization: {}", c.hostname);
  d.subtitle = fmt::format("{} on {} ({} mode{}), {}", c.model, c.hostname, c.mode,
                           c.quick ? ", quick" : "", c.created);
  d.facts = {{"host", fmt::format("{} ({} cores)", c.hostname, c.cores)},
             {"model", c.model},
             {"runs", std::to_string(c.runs.size())},
             {"iteration MAPE", fmt::format("{:.1f} %", c.mape)},
             {"iteration max error", fmt::format("{:.1f} %", c.max_error)},
             {"collective MAPE", fmt::format("{:.1f} %", c.collective_mape)}};
  if (c.collective_profiler_mape)
    d.facts.push_back({"collective MAPE, profiler's view (waits included)",
                       fmt::format("{:.1f} %", *c.collective_profiler_mape)});
  if (c.collective_weighted)
    d.facts.push_back(
        {"collective error weighted by time", fmt::format("{:.1f} %", *c.collective_weighted)});
  if (c.has_compute) d.facts.push_back({"GEMM", fmt::format("{:.3f} TFLOP/s", c.gemm_tflops)});
  std::set<std::string> nets;
  for (const auto& n : c.networks) nets.insert(n.profile);
  for (const auto& r : c.runs) nets.insert(r.network);
  {
    std::string s;
    for (const auto& n : nets) s += (s.empty() ? "" : ", ") + n;
    d.facts.push_back({"networks", s});
  }
  const std::size_t nshown = std::min(c.runs.size(), kMaxBars);
  if (nshown < c.runs.size()) d.notes.push_back(left_out_note(nshown, c.runs.size(), "runs"));
  std::vector<std::string> labels;
  for (std::size_t i = 0; i < nshown; ++i) labels.push_back(c.runs[i].id);

  // 1. The stacked time distribution per strategy and network, measured beside predicted.
  if (!c.runs.empty()) {
    Section s{"Where the time goes, per strategy and network", {}, {}, {}};
    Chart ch = chart(ChartKind::stacked_bar, "Iteration time distribution, measured and predicted",
                     "Per run (strategy, network, nodes x ranks per node), two stacked bars: the "
                     "measured iteration (left, dark) and commscope's prediction (right, light), "
                     "split into compute alone, compute with overlapped communication, exposed "
                     "communication, pipeline bubble and other idle time.",
                     "run", "iteration time (ms)");
    ch.categories = labels;
    for (int side = 0; side < 2; ++side)
      for (std::size_t p = 0; p < kPartCount; ++p) {
        if (p == 3) continue;  // memory copies: not in the schema
        Series se{std::string(kParts[p].label) + (side ? " (predicted)" : " (measured)"),
                  {},
                  {},
                  side ? "predicted" : "measured",
                  false,
                  side ? kParts[p].light : kParts[p].colour};
        for (std::size_t i = 0; i < nshown; ++i) {
          const auto& t = side ? c.runs[i].predicted : c.runs[i].measured;
          se.values.push_back(parts(t.breakdown())[p] * 1e3);
        }
        ch.series.push_back(std::move(se));
      }
    ch.table = table({"run", "strategy", "network", "nodes", "ranks", "measured ms", "predicted ms",
                      "error %", "exposed comm %"},
                     3);
    for (std::size_t i = 0; i < nshown; ++i) {
      const Run& r = c.runs[i];
      ch.table.add(
          {r.id, r.strategy, r.network, std::to_string(r.nodes), std::to_string(r.ranks),
           ms(r.measured.iteration), ms(r.predicted.iteration), num(r.error_pct, 1),
           r.measured.iteration > 0 ? pct(r.measured.exposed / r.measured.iteration) : "-"});
    }
    s.charts.push_back(std::move(ch));

    // 2. RDMA / IPoIB / TCP: each strategy's iteration on each network over its fastest.
    std::map<std::string, std::map<std::string, double>> by_group;  // group -> network -> s
    std::vector<std::string> group_order, net_order;
    for (const Run& r : c.runs) {
      const std::string g =
          fmt::format("{} {}x{}", r.strategy, r.nodes, r.ranks / std::max(1, r.nodes));
      if (!by_group.count(g)) group_order.push_back(g);
      if (std::find(net_order.begin(), net_order.end(), r.network) == net_order.end())
        net_order.push_back(r.network);
      auto& slot = by_group[g][r.network];
      slot = slot > 0 ? std::min(slot, r.measured.iteration) : r.measured.iteration;
    }
    // Only the strategies and sizes measured on more than one network have a ratio.
    std::erase_if(group_order, [&](const std::string& g) { return by_group[g].size() < 2; });
    if (!group_order.empty() && group_order.size() <= kMaxBars) {
      Chart ra = chart(ChartKind::bar, "Network ratios: iteration time over the fastest network",
                       "For each strategy and size, the measured iteration on each network divided "
                       "by the fastest network's (1.0 = the fastest; TCP at 2.5 takes 2.5 times as "
                       "long as RDMA when RDMA is the fastest).",
                       "strategy, nodes x ranks per node", "iteration time / fastest network's");
      ra.categories = group_order;
      ra.table = table({"strategy", "network", "iteration ms", "ratio"}, 2);
      for (const auto& n : net_order) ra.series.push_back({n, {}, {}, "", false, ""});
      for (const auto& g : group_order) {
        double best = INFINITY;
        for (const auto& [n, t] : by_group[g])
          if (t > 0) best = std::min(best, t);
        for (std::size_t k = 0; k < net_order.size(); ++k) {
          auto it = by_group[g].find(net_order[k]);
          const bool have = it != by_group[g].end() && std::isfinite(best) && best > 0;
          ra.series[k].values.push_back(have ? it->second / best : NAN);
          if (have) ra.table.add({g, net_order[k], ms(it->second), num(it->second / best)});
        }
      }
      s.charts.push_back(std::move(ra));
    }
    d.sections.push_back(std::move(s));
  }

  // 3. Per-collective share of the iteration.
  {
    Section s{"Communication per collective", {}, {}, {}};
    Chart ch = chart(ChartKind::bar, "Share of the iteration per collective (measured)",
                     "Per run, the time each collective's transfers took (union of its calls) as a "
                     "percentage of the measured iteration; the table adds the prediction and the "
                     "profiler's view (calls from entry, waits for peers included). Collectives "
                     "run beside one another, so the shares may add up to more than 100 %.",
                     "run", "share of the iteration (%)");
    ch.categories = labels;
    std::vector<std::string> keys;
    for (std::size_t i = 0; i < nshown; ++i)
      for (const auto& k : c.runs[i].collectives) {
        const std::string key = k.group + " " + k.collective;
        if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
      }
    for (const auto& key : keys) {
      Series se{key, {}, {}, "", false, ""};
      for (std::size_t i = 0; i < nshown; ++i) {
        double v = NAN;
        for (const auto& k : c.runs[i].collectives)
          if (k.group + " " + k.collective == key && c.runs[i].measured.iteration > 0)
            v = k.measured / c.runs[i].measured.iteration * 100;
        se.values.push_back(v);
      }
      ch.series.push_back(std::move(se));
    }
    ch.table = table({"run", "group", "collective", "measured ms", "predicted ms", "error %",
                      "measured profiler ms", "predicted profiler ms", "profiler error %"},
                     3);
    for (std::size_t i = 0; i < nshown; ++i)
      for (const auto& k : c.runs[i].collectives)
        ch.table.add({c.runs[i].id, k.group, k.collective, ms(k.measured), ms(k.predicted),
                      num(k.error_pct, 1), ms(k.measured_profiler), ms(k.predicted_profiler),
                      k.profiler_error_pct ? num(*k.profiler_error_pct, 1) : std::string("-")});
    s.charts.push_back(std::move(ch));

    // 4. Achieved Gb/s per node over time.
    Chart tp = chart(ChartKind::line, "Achieved Gb/s per node over time",
                     "The network throughput each node achieved during each run, in Gb/s, as "
                     "characterize sampled it (throughput_gbps_per_node), against the time since "
                     "the run began; the table gives each run's mean and peak.",
                     "time since start (s)", "Gb/s per node");
    tp.table = table({"run", "samples", "mean Gb/s", "peak Gb/s"}, 1);
    for (std::size_t i = 0; i < nshown; ++i) {
      const Run& r = c.runs[i];
      if (r.throughput.empty()) continue;
      tp.series.push_back({r.id, {}, r.throughput, "", false, ""});
      double total = 0, peak = 0;
      for (const auto& p : r.throughput) total += p.y, peak = std::max(peak, p.y);
      tp.table.add({r.id, std::to_string(r.throughput.size()),
                    num(total / static_cast<double>(r.throughput.size())), num(peak)});
    }
    s.charts.push_back(std::move(tp));
    d.sections.push_back(std::move(s));
  }

  // 5. Predicted against measured.
  {
    Section s{"Predicted against measured", {}, {}, {}};
    Chart sc;
    const double band = c.mape > 0 ? c.mape / 100 : 0.10;
    sc.title = "Predicted against measured time";
    sc.caption = fmt::format(
        "Each run's iteration and each of its collectives (measured on x, predicted on y, log "
        "scales); on the y = x line the prediction is exact, and the grey band is +-{:.1f} % "
        "({}).",
        band * 100, c.mape > 0 ? "the iteration MAPE of the summary" : "10 %, no MAPE given");
    sc.kind = ChartKind::scatter;
    sc.x_label = "measured (s)";
    sc.y_label = "predicted (s)";
    sc.x_axis = sc.y_axis = Axis::log;
    sc.band = band;
    Series it{"iterations", {}, {}, "", false, "#4e79a7"};
    Series co{"collectives", {}, {}, "", false, "#f28e2b"};
    sc.table = table({"run", "what", "measured ms", "predicted ms", "error %"}, 2);
    for (std::size_t i = 0; i < nshown; ++i) {
      const Run& r = c.runs[i];
      it.points.push_back({r.measured.iteration, r.predicted.iteration});
      sc.table.add({r.id, "iteration", ms(r.measured.iteration), ms(r.predicted.iteration),
                    num(r.error_pct, 1)});
      for (const auto& k : r.collectives) {
        co.points.push_back({k.measured, k.predicted});
        sc.table.add({r.id, k.group + " " + k.collective, ms(k.measured), ms(k.predicted),
                      num(k.error_pct, 1)});
      }
    }
    sc.series = {std::move(it), std::move(co)};
    s.charts.push_back(std::move(sc));
    d.sections.push_back(std::move(s));
  }

  // 6. Bus bandwidth curves, measured against modelled, one chart per network profile.
  if (!c.networks.empty()) {
    Section s{"Bus bandwidth: measured against modelled", {}, {}, {}};
    for (const auto& n : c.networks) {
      Chart ch;
      ch.title =
          fmt::format("busbw on {} ({} nodes x {} ranks)", n.profile, n.nodes, n.ranks_per_node);
      ch.caption = fmt::format(
          "nccl-tests-style sweeps from {}: busbw measured (solid) and as the fitted alpha-beta "
          "model predicts it (dashed, same colour), per collective and group, against the "
          "message size.",
          n.file);
      ch.kind = ChartKind::line;
      ch.x_label = "message size (bytes)";
      ch.y_label = "busbw (Gb/s)";
      ch.x_axis = Axis::log;
      ch.x_ticks = Ticks::bytes;
      ch.table = table({"collective", "group", "ranks", "bytes", "measured Gb/s", "model Gb/s",
                        "model / measured"},
                       2);
      static constexpr const char* kColours[] = {"#4e79a7", "#f28e2b", "#e15759", "#59a14f",
                                                 "#b07aa1", "#76b7b2", "#edc948", "#9c755f"};
      for (std::size_t k = 0; k < n.curves.size(); ++k) {
        const Curve& cv = n.curves[k];
        const std::string colour = kColours[k % std::size(kColours)];
        const std::string name = fmt::format("{} {} ({} ranks)", cv.collective, cv.group, cv.ranks);
        Series meas{name + " measured", {}, {}, "", false, colour};
        Series model{name + " model", {}, {}, "", true, colour};
        for (const auto& p : cv.points) {
          meas.points.push_back({p.bytes, p.measured});
          model.points.push_back({p.bytes, p.model});
          ch.table.add({cv.collective, cv.group, std::to_string(cv.ranks),
                        with_commas(static_cast<std::int64_t>(p.bytes)), num(p.measured),
                        num(p.model), p.measured > 0 ? num(p.model / p.measured) : "-"});
        }
        ch.series.push_back(std::move(meas));
        ch.series.push_back(std::move(model));
      }
      s.charts.push_back(std::move(ch));
    }
    d.sections.push_back(std::move(s));
  }

  // 7. The projection against measurement.
  if (!c.projection.empty()) {
    Section s{"Projection against measurement", {}, {}, {}};
    Chart ch = chart(ChartKind::bar, "Measured, projected and simulated iteration time",
                     "Per run: the measured iteration, the seeds' projection from its base run's "
                     "measured breakdown, and commscope's simulation of the run itself.",
                     "run (projected from base run)", "iteration time (ms)");
    Series m{"measured", {}, {}, "", false, "#4e79a7"};
    Series pj{"projected", {}, {}, "", false, "#f28e2b"};
    Series sm{"simulated", {}, {}, "", false, "#59a14f"};
    ch.table = table({"run", "base run", "measured ms", "projected ms", "projection error %",
                      "simulation error %"},
                     2);
    std::map<std::string, const Run*> by_id;
    for (const Run& r : c.runs) by_id[r.id] = &r;
    for (std::size_t i = 0; i < std::min(c.projection.size(), kMaxBars); ++i) {
      const Projection& p = c.projection[i];
      ch.categories.push_back(p.run + " <- " + p.base_run);
      m.values.push_back(p.measured * 1e3);
      pj.values.push_back(p.projected * 1e3);
      sm.values.push_back(by_id.at(p.run)->predicted.iteration * 1e3);
      ch.table.add({p.run, p.base_run, ms(p.measured), ms(p.projected),
                    num(p.projection_error_pct, 1), num(p.simulation_error_pct, 1)});
    }
    ch.series = {std::move(m), std::move(pj), std::move(sm)};
    s.charts.push_back(std::move(ch));
    d.sections.push_back(std::move(s));
  }

  // 8. Compute and the runs' files.
  {
    Section s{"Runs and compute", {}, {}, {}};
    TableBlock runs;
    runs.title = "Runs";
    runs.caption = "Where each run's traces are (commscope analyze reads them).";
    runs.table.header = {"run", "strategy", "network", "nodes", "ranks", "traces"};
    runs.table.right = {false, false, false, true, true, false};
    for (const Run& r : c.runs)
      runs.table.add({r.id, r.strategy, r.network, std::to_string(r.nodes), std::to_string(r.ranks),
                      r.trace_dir});
    s.tables.push_back(std::move(runs));
    if (c.has_compute) {
      TableBlock g;
      g.title = fmt::format("Matrix products ({})", c.compute_file);
      g.caption = fmt::format(
          "Measured GEMM throughput; {:.3f} TFLOP/s is what the system "
          "profile uses.",
          c.gemm_tflops);
      g.table = table({"op", "m", "n", "k", "TFLOP/s"}, 1);
      g.table.rows = c.gemm_points;
      s.tables.push_back(std::move(g));
    }
    d.sections.push_back(std::move(s));
  }
  return d;
}

Status write_train_report(const std::string& json_path, const std::string& html_path) {
  CS_ASSIGN_OR_RETURN(auto j, read_json_file(json_path));
  CS_ASSIGN_OR_RETURN(auto doc, train_page(j, json_path));
  return write(html_path, doc);
}

Result<std::string> render_characterize_dir(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    return Error{fmt::format("{}: expected a folder written by commscope characterize", dir)};
  const std::filesystem::path file = std::filesystem::path(dir) / "characterize.json";
  CS_ASSIGN_OR_RETURN(auto j, read_json_file(file));
  CS_ASSIGN_OR_RETURN(auto doc, characterize_page(j, file.string()));
  return render(doc);
}

}  // namespace commscope::html
