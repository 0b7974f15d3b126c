// Table: rows of cells and the one printer that speaks aligned text, CSV and Markdown (JSON
// documents are built per verb with nlohmann::json). Also the human number formats.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "commscope/util/units.h"

namespace commscope {

enum class Format { table, json, csv, md };
std::optional<Format> format_from_name(std::string_view s);
std::string_view format_choices();

struct Table {
  std::vector<std::string> header;
  std::vector<bool> right;  // right-align column (numbers)
  std::vector<std::vector<std::string>> rows;

  void add(std::vector<std::string> row) { rows.push_back(std::move(row)); }
};

// Aligned columns, two spaces apart, header underlined.
std::string render_text(const Table& t, std::string_view indent = "  ");
// RFC 4180: comma-separated, fields with comma, quote or newline quoted.
std::string render_csv(const Table& t);
// GitHub-flavoured Markdown table.
std::string render_markdown(const Table& t);

// 774030080 -> "774,030,080"
std::string with_commas(std::int64_t v);
// Binary units for memory: "1.44 GiB"
std::string human_bytes(Bytes b);
// Decimal SI with a unit: human_si(1.5e15, "FLOP") -> "1.50 PFLOP"
std::string human_si(double v, std::string_view unit);
// Parameter counts: "774.0M", "1.01T"
std::string human_count(double v);

}  // namespace commscope
