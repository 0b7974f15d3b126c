// HTML reports: a small document model (sections of text, tables and charts held as data) and
// the one renderer that turns it into a single self-contained HTML file. The chart library
// (Chart.js 3.9.1 from Debian's libjs-chart.js, MIT) is read at build time and carried by the
// binary, so a report opens offline and loads nothing from the network (its Content Security
// Policy forbids it). Every name is escaped; the output is a function of the document only
// (no clock, no random numbers), and its size is bounded (kMaxChartPoints, kMaxTableCells).
// docs/report.md.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "commscope/report/table.h"
#include "commscope/util/result.h"

namespace commscope::html {

enum class ChartKind {
  bar,          // categories on x, one bar per series and category
  stacked_bar,  // as bar, series with the same Series::stack stacked on each other
  line,         // Series::points joined by lines (x numeric)
  scatter,      // Series::points as dots, with the y = x line and Chart::band around it
};
enum class Axis { linear, log };
// How tick labels are written: plain numbers, or message sizes in bytes with decimal prefixes
// (1 kB, 1 MB, 1 GB: a log axis's decades).
enum class Ticks { number, bytes };

struct Point {
  double x = 0, y = 0;
};

struct Series {
  std::string label;
  std::vector<double> values;  // bar charts: one per category (non-finite: no bar)
  std::vector<Point> points;   // line and scatter charts
  std::string stack;           // stacked_bar: the series stacked together share this name
  bool dashed = false;         // line: drawn dashed (a model beside a measurement)
  std::string color;           // "#rrggbb"; empty: the palette's colour for its position
};

struct Chart {
  std::string title;    // what it shows, e.g. "Where the iteration goes"
  std::string caption;  // one or two sentences: what is plotted, from which numbers
  ChartKind kind = ChartKind::bar;
  std::string x_label, y_label;  // axis titles, with units: "iteration time (ms)"
  Axis x_axis = Axis::linear, y_axis = Axis::linear;
  Ticks x_ticks = Ticks::number;
  std::vector<std::string> categories;  // bar charts
  std::vector<Series> series;
  double band = 0;  // scatter: the +-band (a fraction, 0.1 = 10 %) drawn around y = x
  Table table;      // the numbers behind the chart, shown beside it
};

struct TableBlock {
  std::string title, caption;
  Table table;
};

struct Section {
  std::string title;
  std::vector<std::string> paragraphs;
  std::vector<Chart> charts;
  std::vector<TableBlock> tables;
};

struct Document {
  std::string title;
  std::string subtitle;
  std::vector<std::pair<std::string, std::string>> facts;  // key figures at the top
  std::vector<std::string> notes;                          // warnings, shown under the facts
  std::vector<Section> sections;
};

// Bounds of one document: a report that would hold more is refused with an error, not written.
inline constexpr std::size_t kMaxChartPoints = 1'000'000;  // bar values and points, all charts
inline constexpr std::size_t kMaxTableCells = 1'000'000;   // all tables
inline constexpr std::size_t kMaxCharts = 1000;

// &, <, >, " and ' as character references, so that a name from a trace or a config never
// becomes markup.
std::string escape(std::string_view text);

// The whole HTML file. Errors: the document is over the bounds above, or commscope was built
// without Chart.js.
Result<std::string> render(const Document& doc);

// The Chart.js source the binary carries ("" when built without it) and its version.
std::string_view chart_library();
std::string_view chart_library_version();

// Renders and writes `doc` to `path` by the rules of util/atomic_file.h.
Status write(const std::string& path, const Document& doc);

}  // namespace commscope::html
