// Reading configuration JSON into plain structs with errors that name the file, the field,
// the value and what was expected. Not a schema language: each loader says what it reads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "commscope/util/result.h"

namespace commscope {

// Parses a JSON file. Errors: "<path>: cannot open: ..." and
// "<path>: invalid JSON at byte N: ...".
Result<nlohmann::json> read_json_file(const std::filesystem::path& path);
// The same for a JSON text already in memory; `where` names it in the messages.
Result<nlohmann::json> parse_json_text(const std::string& text, const std::string& where);

// A short rendering of a JSON value for error messages (strings quoted, long values cut).
// The reason of nlohmann::json's parse error text, without its position and with the input it
// echoes clipped: "syntax error while parsing value - invalid literal; last read: '...: N'".
std::string json_parse_reason(std::string_view what);
std::string json_excerpt(const nlohmann::json& v);

// Reads the fields of one JSON object. The first error wins and is returned by status().
// Fields that were never asked for are reported as unknown unless allow_unknown() was called
// (own preset formats are strict, to catch typos; foreign formats such as a DeepSpeed config
// carry many fields commscope has no use for).
class FieldReader {
 public:
  FieldReader(const nlohmann::json& object, std::string where, std::string prefix = "");

  bool has(std::string_view key) const;
  // Reads key into out if present (and not null). Returns whether it was read.
  bool read(std::string_view key, std::int64_t& out);
  bool read(std::string_view key, int& out);
  bool read(std::string_view key, double& out);
  bool read(std::string_view key, bool& out);
  bool read(std::string_view key, std::string& out);
  bool read(std::string_view key, std::vector<std::string>& out);
  template <class T>
  bool read(std::string_view key, std::optional<T>& out) {
    T v{};
    if (!read(key, v)) return false;
    out = v;
    return true;
  }
  // Like read, but a missing field is an error.
  template <class T>
  void require(std::string_view key, T& out) {
    if (!has(key)) {
      fail(key, "a value", "nothing (the field is missing)");
      return;
    }
    read(key, out);
  }
  // Reader for a nested object (an empty one when absent).
  FieldReader object(std::string_view key);

  // Records an error for field key unless ok: "<where>: field '<path>': expected <expected>,
  // got <got>".
  void check(bool ok, std::string_view key, std::string_view expected, std::string_view got);
  void fail(std::string_view key, std::string_view expected, std::string_view got);
  void allow_unknown() { allow_unknown_ = true; }
  // The first error, or an "unknown field" error, or ok. Nested readers report through
  // their parent: call status() on each nested reader first.
  Status status() const;
  const std::string& where() const { return where_; }
  std::string path(std::string_view key) const;
  const nlohmann::json& raw() const { return object_; }

 private:
  const nlohmann::json* get(std::string_view key);
  const nlohmann::json& object_;
  std::string where_;
  std::string prefix_;
  std::vector<std::string> seen_;
  std::optional<Error> error_;
  bool allow_unknown_ = false;
};

// Parses one of a fixed set of names: "expected one of a|b|c, got 'x'".
template <class E>
struct EnumName {
  E value;
  std::string_view name;
};

template <class E, std::size_t N>
std::optional<E> enum_from_name(const EnumName<E> (&table)[N], std::string_view name) {
  for (const auto& e : table)
    if (e.name == name) return e.value;
  return std::nullopt;
}

template <class E, std::size_t N>
std::string_view enum_to_name(const EnumName<E> (&table)[N], E value) {
  for (const auto& e : table)
    if (e.value == value) return e.name;
  return "?";
}

template <class E, std::size_t N>
std::string enum_choices(const EnumName<E> (&table)[N]) {
  std::string s;
  for (const auto& e : table) {
    if (!s.empty()) s += '|';
    s += e.name;
  }
  return s;
}

}  // namespace commscope
