// The HTML renderer of report/html.h: one self-contained file, Chart.js inlined.
#include "commscope/report/html.h"

#include <cctype>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commscope/util/atomic_file.h"

// The generated source (CMakeLists.txt) that carries Debian's chart.min.js.
namespace commscope::html::generated {
extern const char kChartJs[];
extern const std::size_t kChartJsSize;
extern const char kChartJsVersion[];
}  // namespace commscope::html::generated

namespace commscope::html {

namespace {

// The page's own script: builds each chart from its JSON description, then checks that it drew
// something (its data elements exist and the canvas has painted pixels) and marks the figure
// data-rendered="true"; a chart that drew nothing is a console error. The body's
// data-charts-rendered counts the charts drawn (tests/browser/ reads both).
constexpr std::string_view kPageScript = R"JS("use strict";
(function () {
  var specs = JSON.parse(document.getElementById("commscope-charts").textContent);
  var palette = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
                 "#ff9da7", "#9c755f", "#bab0ac", "#1b9e77", "#7570b3"];
  Chart.defaults.animation = false;
  Chart.defaults.font.family = "system-ui, -apple-system, 'Segoe UI', sans-serif";
  function decimalBytes(v) {
    var units = ["B", "kB", "MB", "GB", "TB", "PB"], i = 0;
    while (Math.abs(v) >= 1000 && i < units.length - 1) { v /= 1000; i++; }
    return (Math.round(v * 100) / 100) + " " + units[i];
  }
  function axis(type, title, ticks, stacked) {
    var a = { type: type, title: { display: title.length > 0, text: title }, stacked: stacked };
    if (type === "logarithmic") {
      a.ticks = { callback: function (v) {
        var m = v / Math.pow(10, Math.floor(Math.log10(v) + 1e-9));
        if (Math.abs(m - 1) > 1e-6) return "";
        if (ticks === "bytes") return decimalBytes(v);
        return v >= 1e5 || v < 1e-3 ? Number(v).toExponential(0) : String(Number(v));
      } };
    } else if (ticks === "bytes") {
      a.ticks = { callback: function (v) { return decimalBytes(v); } };
    }
    if (type === "linear") a.beginAtZero = true;
    return a;
  }
  function colour(s, i) { return s.color || palette[i % palette.length]; }
  function config(c) {
    var stacked = c.kind === "stacked_bar";
    var bars = c.kind === "bar" || stacked;
    var sets = c.series.map(function (s, i) {
      var d = { label: s.label, borderColor: colour(s, i), backgroundColor: colour(s, i) };
      if (bars) {
        d.data = s.values;
        if (stacked) d.stack = s.stack || "all";
      } else {
        d.data = s.points.map(function (p) { return { x: p[0], y: p[1] }; });
        d.showLine = c.kind === "line";
        d.pointRadius = c.kind === "line" ? 2 : 4;
        d.borderWidth = 2;
        if (s.dashed) d.borderDash = [6, 4];
      }
      return d;
    });
    if (c.kind === "scatter" && c.band > 0) {
      var lo = Infinity, hi = -Infinity;
      c.series.forEach(function (s) { s.points.forEach(function (p) {
        [p[0], p[1]].forEach(function (v) {
          if (v !== null && isFinite(v) && (v > 0 || c.x_axis !== "log")) {
            lo = Math.min(lo, v); hi = Math.max(hi, v);
          }
        });
      }); });
      if (lo < hi) {
        var line = function (k) { return [{ x: lo, y: lo * k }, { x: hi, y: hi * k }]; };
        var pct = Math.round(c.band * 1000) / 10;
        var grey = "#777777", band = "rgba(119,119,119,0.15)";
        sets.push({ label: "y = x", data: line(1), showLine: true, pointRadius: 0,
                    borderColor: grey, backgroundColor: grey, borderWidth: 1 });
        sets.push({ label: "+" + pct + " %", data: line(1 + c.band), showLine: true,
                    pointRadius: 0, borderColor: grey, backgroundColor: band, borderWidth: 1,
                    borderDash: [4, 4] });
        sets.push({ label: "-" + pct + " %", data: line(1 - c.band), showLine: true,
                    pointRadius: 0, borderColor: grey, backgroundColor: band, borderWidth: 1,
                    borderDash: [4, 4], fill: "-1" });
      }
    }
    var xType = c.x_axis === "log" ? "logarithmic" : (bars ? "category" : "linear");
    var yType = c.y_axis === "log" ? "logarithmic" : "linear";
    return {
      type: bars ? "bar" : "scatter",
      data: { labels: bars ? c.categories : undefined, datasets: sets },
      options: {
        responsive: true, maintainAspectRatio: false, animation: false,
        plugins: { legend: { display: true, position: "bottom" } },
        scales: { x: axis(xType, c.x_label, c.x_ticks, stacked),
                  y: axis(yType, c.y_label, "number", stacked) }
      }
    };
  }
  function painted(canvas) {
    var d = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
    for (var k = 3; k < d.length; k += 4) if (d[k] !== 0) return true;
    return false;
  }
  var rendered = 0;
  specs.forEach(function (c) {
    var fig = document.getElementById(c.id);
    try {
      var canvas = fig.querySelector("canvas");
      var chart = new Chart(canvas, config(c));
      var elements = 0;
      chart.data.datasets.forEach(function (d, k) {
        chart.getDatasetMeta(k).data.forEach(function (e) {
          if (!e.skip && isFinite(e.x) && isFinite(e.y)) elements++;
        });
      });
      if (elements > 0 && painted(canvas)) {
        fig.setAttribute("data-rendered", "true");
        rendered++;
      } else {
        console.error("commscope: chart '" + c.title + "' drew nothing");
      }
    } catch (e) {
      console.error("commscope: chart '" + c.title + "': " + e);
    }
  });
  document.body.setAttribute("data-charts-rendered", String(rendered));
})();
)JS";

constexpr std::string_view kStyle = R"CSS(
:root { --fg: #1d2330; --muted: #5b6473; --line: #d9dde4; --bg: #ffffff; --panel: #f6f7f9; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1280px; padding: 1.5rem 2rem 3rem; color: var(--fg);
       background: var(--bg); font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; }
h1 { font-size: 1.6rem; margin: 0 0 .2rem; }
h2 { font-size: 1.25rem; margin: 2.2rem 0 .5rem; padding-bottom: .25rem;
     border-bottom: 1px solid var(--line); }
h3 { font-size: 1.02rem; margin: 0 0 .2rem; }
.subtitle { color: var(--muted); margin: 0 0 1rem; }
dl.facts { display: grid; grid-template-columns: repeat(auto-fill, minmax(220px, 1fr));
           gap: .4rem 1.2rem; margin: 0 0 1rem; padding: .8rem 1rem; background: var(--panel);
           border-radius: 6px; }
dl.facts div { display: flex; flex-direction: column; }
dl.facts dt { color: var(--muted); font-size: .8rem; }
dl.facts dd { margin: 0; font-weight: 600; font-variant-numeric: tabular-nums; }
ul.notes { color: #8a4b00; }
nav ol { columns: 2; margin: .3rem 0 0; }
figure { margin: 1.4rem 0; }
figcaption p, .caption { color: var(--muted); margin: 0 0 .6rem; }
.figure-body { display: grid; grid-template-columns: minmax(0, 3fr) minmax(0, 2fr); gap: 1.2rem;
               align-items: start; }
.figure-body.alone { grid-template-columns: minmax(0, 1fr); }
.canvas-box { position: relative; height: 360px; }
.table-box { max-height: 360px; overflow: auto; }
table { border-collapse: collapse; font-size: .82rem; font-variant-numeric: tabular-nums;
        width: 100%; }
th, td { padding: .18rem .5rem; border-bottom: 1px solid var(--line); text-align: left;
         white-space: nowrap; }
th { position: sticky; top: 0; background: var(--panel); }
td.num, th.num { text-align: right; }
.table-block td:first-child { white-space: normal; overflow-wrap: anywhere; min-width: 24ch; }
p.empty { color: var(--muted); font-style: italic; }
footer { margin-top: 3rem; color: var(--muted); font-size: .8rem; }
@media (max-width: 900px) { .figure-body { grid-template-columns: 1fr; } }
)CSS";

std::string_view kind_name(ChartKind k) {
  switch (k) {
    case ChartKind::bar:
      return "bar";
    case ChartKind::stacked_bar:
      return "stacked_bar";
    case ChartKind::line:
      return "line";
    case ChartKind::scatter:
      return "scatter";
  }
  return "bar";
}

// A number for the JSON: non-finite values become null (no bar, no point).
nlohmann::json number(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}

std::size_t chart_points(const Chart& c) {
  std::size_t n = 0;
  for (const auto& s : c.series) n += s.values.size() + s.points.size();
  return n;
}

// Whether a chart has anything to draw: a finite value or point (positive on a log axis).
bool has_data(const Chart& c) {
  for (const auto& s : c.series) {
    for (double v : s.values)
      if (std::isfinite(v) && (c.y_axis == Axis::linear || v > 0)) return true;
    for (const auto& p : s.points)
      if (std::isfinite(p.x) && std::isfinite(p.y) && (c.x_axis == Axis::linear || p.x > 0) &&
          (c.y_axis == Axis::linear || p.y > 0))
        return true;
  }
  return false;
}

// A colour the page may use: "#rrggbb" only (anything else falls back to the palette).
std::string safe_colour(const std::string& c) {
  if (c.size() != 7 || c[0] != '#') return "";
  for (std::size_t i = 1; i < 7; ++i)
    if (!std::isxdigit(static_cast<unsigned char>(c[i]))) return "";
  return c;
}

nlohmann::json chart_json(const Chart& c, const std::string& id) {
  nlohmann::json series = nlohmann::json::array();
  for (const auto& s : c.series) {
    nlohmann::json values = nlohmann::json::array();
    for (double v : s.values) values.push_back(number(v));
    nlohmann::json points = nlohmann::json::array();
    for (const auto& p : s.points) points.push_back({number(p.x), number(p.y)});
    series.push_back({{"label", s.label},
                      {"values", std::move(values)},
                      {"points", std::move(points)},
                      {"stack", s.stack},
                      {"dashed", s.dashed},
                      {"color", safe_colour(s.color)}});
  }
  return {{"id", id},
          {"title", c.title},
          {"kind", kind_name(c.kind)},
          {"x_label", c.x_label},
          {"y_label", c.y_label},
          {"x_axis", c.x_axis == Axis::log ? "log" : "linear"},
          {"y_axis", c.y_axis == Axis::log ? "log" : "linear"},
          {"x_ticks", c.x_ticks == Ticks::bytes ? "bytes" : "number"},
          {"categories", c.categories},
          {"series", std::move(series)},
          {"band", std::isfinite(c.band) && c.band > 0 ? c.band : 0.0}};
}

// JSON placed inside <script>: '<', '>' and '&' written as \u escapes so that no string in it
// can close the element; invalid UTF-8 in names replaced rather than refused.
std::string script_json(const nlohmann::json& j) {
  const std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    if (ch == '<')
      out += "\\u003c";
    else if (ch == '>')
      out += "\\u003e";
    else if (ch == '&')
      out += "\\u0026";
    else
      out += ch;
  }
  return out;
}

void render_table(std::string& out, const Table& t) {
  auto right = [&](std::size_t i) { return i < t.right.size() && t.right[i]; };
  out += "<table><thead><tr>";
  for (std::size_t i = 0; i < t.header.size(); ++i)
    out += fmt::format("<th{}>{}</th>", right(i) ? " class=\"num\"" : "", escape(t.header[i]));
  out += "</tr></thead><tbody>\n";
  for (const auto& row : t.rows) {
    out += "<tr>";
    for (std::size_t i = 0; i < row.size(); ++i)
      out += fmt::format("<td{}>{}</td>", right(i) ? " class=\"num\"" : "", escape(row[i]));
    out += "</tr>\n";
  }
  out += "</tbody></table>";
}

std::size_t cells(const Table& t) {
  std::size_t n = t.header.size();
  for (const auto& r : t.rows) n += r.size();
  return n;
}

}  // namespace

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

std::string_view chart_library() {
  return {generated::kChartJs, generated::kChartJsSize};
}
std::string_view chart_library_version() {
  return generated::kChartJsVersion;
}

Result<std::string> render(const Document& doc) {
  if (chart_library().empty())
    return Error{
        "html: commscope was built without Chart.js (apt-get install libjs-chart.js, then "
        "rebuild)"};
  std::size_t points = 0, table_cells = 0, charts = 0;
  for (const auto& s : doc.sections) {
    charts += s.charts.size();
    for (const auto& c : s.charts) points += chart_points(c), table_cells += cells(c.table);
    for (const auto& t : s.tables) table_cells += cells(t.table);
  }
  if (charts > kMaxCharts)
    return Error{fmt::format("html: {} charts; a report holds at most {}", charts, kMaxCharts)};
  if (points > kMaxChartPoints)
    return Error{
        fmt::format("html: {} chart values; a report holds at most {}", points, kMaxChartPoints)};
  if (table_cells > kMaxTableCells)
    return Error{fmt::format("html: {} table cells; a report holds at most {}", table_cells,
                             kMaxTableCells)};

  std::string out;
  out.reserve(chart_library().size() + 64 * 1024 + points * 24 + table_cells * 24);
  out += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  // Offline by construction: nothing may be fetched, only the inline script and style run.
  out +=
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; script-src "
      "'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += "<meta name=\"generator\" content=\"commscope\">\n";
  out += fmt::format("<title>{}</title>\n<style>{}</style>\n</head>\n", escape(doc.title), kStyle);

  std::size_t chart_count = 0;
  for (const auto& s : doc.sections)
    for (const auto& c : s.charts) chart_count += has_data(c) ? 1 : 0;
  out += fmt::format("<body data-charts=\"{}\">\n<header>\n<h1>{}</h1>\n", chart_count,
                     escape(doc.title));
  if (!doc.subtitle.empty())
    out += fmt::format("<p class=\"subtitle\">{}</p>\n", escape(doc.subtitle));
  if (!doc.facts.empty()) {
    out += "<dl class=\"facts\">\n";
    for (const auto& [k, v] : doc.facts)
      out += fmt::format("<div><dt>{}</dt><dd>{}</dd></div>\n", escape(k), escape(v));
    out += "</dl>\n";
  }
  if (!doc.notes.empty()) {
    out += "<ul class=\"notes\">\n";
    for (const auto& n : doc.notes) out += fmt::format("<li>{}</li>\n", escape(n));
    out += "</ul>\n";
  }
  if (doc.sections.size() > 1) {
    out += "<nav><strong>Contents</strong><ol>\n";
    for (std::size_t i = 0; i < doc.sections.size(); ++i)
      out += fmt::format("<li><a href=\"#section-{}\">{}</a></li>\n", i + 1,
                         escape(doc.sections[i].title));
    out += "</ol></nav>\n";
  }
  out += "</header>\n<main>\n";

  nlohmann::json specs = nlohmann::json::array();
  std::size_t next_chart = 0;
  for (std::size_t si = 0; si < doc.sections.size(); ++si) {
    const Section& s = doc.sections[si];
    out += fmt::format("<section id=\"section-{}\">\n<h2>{}</h2>\n", si + 1, escape(s.title));
    for (const auto& p : s.paragraphs) out += fmt::format("<p>{}</p>\n", escape(p));
    for (const auto& c : s.charts) {
      if (!has_data(c)) {
        out += fmt::format("<p class=\"empty\">{}: no data.</p>\n", escape(c.title));
        continue;
      }
      const std::string id = fmt::format("chart-{}", ++next_chart);
      specs.push_back(chart_json(c, id));
      out += fmt::format(
          "<figure class=\"chart\" id=\"{}\">\n<figcaption><h3>{}</h3><p>{}</p></figcaption>\n"
          "<div class=\"figure-body{}\"><div class=\"canvas-box\"><canvas role=\"img\" "
          "aria-label=\"{}\"></canvas></div>\n",
          id, escape(c.title), escape(c.caption), c.table.header.empty() ? " alone" : "",
          escape(c.title));
      // A chart without a table of its own (its numbers are in another's) gets no empty box.
      if (!c.table.header.empty()) {
        out += "<div class=\"table-box\">";
        render_table(out, c.table);
        out += "</div>";
      }
      out += "</div>\n</figure>\n";
    }
    for (const auto& t : s.tables) {
      out += "<div class=\"table-block\">";
      if (!t.title.empty()) out += fmt::format("<h3>{}</h3>", escape(t.title));
      if (!t.caption.empty()) out += fmt::format("<p class=\"caption\">{}</p>", escape(t.caption));
      out += "<div class=\"table-box\">";
      render_table(out, t.table);
      out += "</div></div>\n";
    }
    out += "</section>\n";
  }
  out += fmt::format(
      "</main>\n<footer>Written by commscope; charts drawn by Chart.js {} (MIT licence, "
      "carried inside this file: it opens offline).</footer>\n",
      escape(chart_library_version()));
  out += "<script type=\"application/json\" id=\"commscope-charts\">" + script_json(specs) +
         "</script>\n";
  out += "<script>\n";
  out += chart_library();
  out += "\n</script>\n<script>\n";
  out += kPageScript;
  out += "</script>\n</body>\n</html>\n";
  return out;
}

Status write(const std::string& path, const Document& doc) {
  auto text = render(doc);
  if (!text) return text.error();
  return write_file_atomic(path, *text);
}

}  // namespace commscope::html
