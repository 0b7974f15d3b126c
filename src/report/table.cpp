// The table printer and human number formats.
#include "commscope/report/table.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace commscope {

std::optional<Format> format_from_name(std::string_view s) {
  if (s == "table") return Format::table;
  if (s == "json") return Format::json;
  if (s == "csv") return Format::csv;
  if (s == "md" || s == "markdown") return Format::md;
  return std::nullopt;
}
std::string_view format_choices() {
  return "table|json|csv|md";
}

std::string render_text(const Table& t, std::string_view indent) {
  std::vector<std::size_t> w(t.header.size(), 0);
  for (std::size_t c = 0; c < t.header.size(); ++c) w[c] = t.header[c].size();
  for (const auto& r : t.rows)
    for (std::size_t c = 0; c < r.size() && c < w.size(); ++c) w[c] = std::max(w[c], r[c].size());
  auto line = [&](const std::vector<std::string>& r) {
    std::string s(indent);
    for (std::size_t c = 0; c < w.size(); ++c) {
      const std::string& cell = c < r.size() ? r[c] : std::string();
      bool right = c < t.right.size() && t.right[c];
      if (c) s += "  ";
      s += right ? fmt::format("{:>{}}", cell, w[c]) : fmt::format("{:<{}}", cell, w[c]);
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  std::string out = line(t.header);
  std::vector<std::string> rule;
  rule.reserve(w.size());
  for (auto x : w) rule.emplace_back(x, '-');
  out += line(rule);
  for (const auto& r : t.rows) out += line(r);
  return out;
}

static std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string render_csv(const Table& t) {
  std::string out;
  auto line = [&](const std::vector<std::string>& r) {
    for (std::size_t c = 0; c < r.size(); ++c) out += (c ? "," : "") + csv_field(r[c]);
    out += "\n";
  };
  line(t.header);
  for (const auto& r : t.rows) line(r);
  return out;
}

std::string render_markdown(const Table& t) {
  // A pipe is escaped; a line break (a model name from a config) would end the row: <br>.
  auto esc = [](const std::string& s) {
    std::string o;
    for (char c : s) {
      if (c == '|')
        o += "\\|";
      else if (c == '\n')
        o += "<br>";
      else if (c != '\r')
        o += c;
    }
    return o;
  };
  std::string out = "|";
  for (const auto& h : t.header) out += " " + esc(h) + " |";
  out += "\n|";
  for (std::size_t c = 0; c < t.header.size(); ++c)
    out += c < t.right.size() && t.right[c] ? " ---: |" : " --- |";
  out += "\n";
  for (const auto& r : t.rows) {
    out += "|";
    for (const auto& cell : r) out += " " + esc(cell) + " |";
    out += "\n";
  }
  return out;
}

std::string with_commas(std::int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

std::string human_bytes(Bytes b) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = b.value();
  int u = 0;
  while (std::fabs(v) >= 1024.0 && u < 5) v /= 1024.0, ++u;
  return u == 0 ? fmt::format("{:.0f} B", v) : fmt::format("{:.2f} {}", v, kUnits[u]);
}

std::string human_si(double v, std::string_view unit) {
  static constexpr const char* kPrefix[] = {"", "K", "M", "G", "T", "P", "E", "Z"};
  int p = 0;
  while (std::fabs(v) >= 1000.0 && p < 7) v /= 1000.0, ++p;
  return fmt::format("{:.2f} {}{}", v, kPrefix[p], unit);
}

std::string human_count(double v) {
  static constexpr const char* kSuffix[] = {"", "K", "M", "B", "T"};
  int p = 0;
  while (std::fabs(v) >= 1000.0 && p < 4) v /= 1000.0, ++p;
  return p == 0 ? fmt::format("{:.0f}", v) : fmt::format("{:.2f}{}", v, kSuffix[p]);
}

}  // namespace commscope
