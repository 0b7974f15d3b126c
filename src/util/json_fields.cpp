// FieldReader: typed access to JSON objects with messages that name file, field and value.
#include "commscope/util/json_fields.h"

#include "commscope/util/input_file.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include <fmt/format.h>

namespace commscope {

namespace {
// The byte where a JSON text's arrays and objects (outside strings) first nest deeper than
// `limit`, or npos: the parsed value is copied recursively later, so a text nested hundreds of
// thousands deep would exhaust the stack there.
std::size_t first_byte_deeper_than(const std::string& text, int limit) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string::npos;
}

// One SAX pass over a JSON text that builds nothing: the last object key read (where a parse
// stops, the key of what failed: the DOM parser's error names no field) and, when asked, the
// first key an object holds twice, as a dotted path ("zero_optimization.stage"): nlohmann keeps
// the last silently, so {"layers": 32, "layers": 4000} was a 4000-layer model (found by
// probing, 2026-12-02; DeepSpeed's own loader refuses duplicate keys).
struct KeyWalk : nlohmann::json_sax<nlohmann::json> {
  struct Level {
    bool object = false;
    std::string name;                      // the key (or [index]) this level is under
    std::unordered_set<std::string> keys;  // an object's keys so far (a set: an object of a
                                           // million keys stays linear)
    std::size_t items = 0;                 // an array's elements so far
  };
  bool find_duplicates = false;
  std::vector<Level> stack;
  std::string last, pending, duplicate;
  std::string path(const std::string& key) const {
    std::string p;
    for (std::size_t i = 1; i < stack.size(); ++i)
      p += (stack[i].name.front() == '[' || p.empty() ? "" : ".") + stack[i].name;
    return p + (key.front() == '[' || p.empty() ? "" : ".") + key;
  }
  void value() {
    if (!stack.empty() && !stack.back().object) ++stack.back().items;
  }
  bool open(bool object) {
    std::string name = pending;
    if (!stack.empty() && !stack.back().object) name = fmt::format("[{}]", stack.back().items);
    value();
    stack.push_back({object, name, {}, 0});
    return true;
  }
  bool null() override { return value(), true; }
  bool boolean(bool) override { return value(), true; }
  bool number_integer(number_integer_t) override { return value(), true; }
  bool number_unsigned(number_unsigned_t) override { return value(), true; }
  bool number_float(number_float_t, const string_t&) override { return value(), true; }
  bool string(string_t&) override { return value(), true; }
  bool binary(binary_t&) override { return value(), true; }
  bool start_object(std::size_t) override { return open(true); }
  bool key(string_t& k) override {
    last = k;
    pending = k.empty() ? std::string("\"\"") : k;
    if (find_duplicates && !stack.back().keys.insert(k).second) {
      duplicate = path(pending);
      return false;
    }
    return true;
  }
  bool end_object() override { return stack.pop_back(), true; }
  bool start_array(std::size_t) override { return open(false); }
  bool end_array() override { return stack.pop_back(), true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }
};

KeyWalk walk_keys(const std::string& text, bool find_duplicates) {
  KeyWalk w;
  w.find_duplicates = find_duplicates;
  nlohmann::json::sax_parse(text, &w, nlohmann::json::input_format_t::json, true,
                            /*ignore_comments=*/false);
  return w;
}
}  // namespace

Result<nlohmann::json> read_json_file(const std::filesystem::path& path) {
  // Configurations are kilobytes; a larger file is a mistake, not one to read into memory.
  CS_ASSIGN_OR_RETURN(const std::string text,
                      read_small_file(path.string(), 64ull << 20, "a JSON configuration"));
  return parse_json_text(text, path.string());
}

Result<nlohmann::json> parse_json_text(const std::string& text, const std::string& where) {
  if (text.empty()) return Error{fmt::format("{}: empty file, expected a JSON object", where)};
  constexpr int kMaxDepth = 256;  // configurations nest a few levels
  if (const std::size_t at = first_byte_deeper_than(text, kMaxDepth); at != std::string::npos)
    return Error{
        fmt::format("{}: JSON nested deeper than {} levels at byte {}, expected a "
                    "configuration",
                    where, kMaxDepth, at)};
  // A number too large for a double names the key being read ("num_hidden_layers": 1e400 was
  // an "internal error" naming neither file nor field, found by probing, 2026-11-30), found by
  // a SAX pass after the error: the parser callback that followed the keys took time quadratic
  // in the text's objects (640,000 empty objects, 2.5 MB, ran past a minute, found by probing,
  // 2026-12-02).
  try {
    // Files written on Windows (and the vTrain CSVs) may carry a UTF-8 byte-order mark.
    auto j = nlohmann::json::parse(text, nullptr, true, /*ignore_comments=*/false);
    if (!j.is_object())
      return Error{
          fmt::format("{}: expected a JSON object at the top level, got {}", where, j.type_name())};
    if (const std::string key = walk_keys(text, true).duplicate; !key.empty())
      return Error{fmt::format(
          "{}: field '{}': expected each key once in its object, got it twice (which one "
          "counts is up to the reader)",
          where, key)};
    return j;
  } catch (const nlohmann::json::parse_error& e) {
    return Error{
        fmt::format("{}: invalid JSON at byte {}: {}", where, e.byte, json_parse_reason(e.what()))};
  } catch (const nlohmann::json::out_of_range& e) {
    // "[json.exception.out_of_range.406] number overflow parsing '1e400'"
    const std::string last_key = walk_keys(text, false).last;
    std::string_view what = e.what();
    const std::size_t q = what.find('\'');
    const std::string value =
        q == std::string_view::npos ? std::string("a number") : std::string(what.substr(q));
    return Error{fmt::format(
        "{}: field '{}': expected a number within a double's range (about 1.8e308), got {}", where,
        last_key.empty() ? "?" : last_key,
        value.size() > 42 ? value.substr(0, 42) + "...'" : value)};
  }
}

std::string json_parse_reason(std::string_view what) {
  // nlohmann's text: "[json.exception.parse_error.101] parse error at line 1, column 5520:
  // syntax error while parsing value - invalid literal; last read: '"iteration_s": N'". The
  // reason follows the position; the input it echoes may hold ": " itself (the last ": " cut
  // it to "N'"), so it is clipped to its last 40 characters.
  std::size_t at = what.find("column ");
  at = what.find(": ", at == std::string_view::npos ? 0 : at);
  std::string_view reason = at == std::string_view::npos ? what : what.substr(at + 2);
  const std::string_view mark = "; last read: '";
  const std::size_t read = reason.find(mark);
  if (read == std::string_view::npos) return std::string(reason);
  std::string_view echo = reason.substr(read + mark.size());
  if (!echo.empty() && echo.back() == '\'') echo.remove_suffix(1);
  const bool clipped = echo.size() > 40;
  if (clipped) echo = echo.substr(echo.size() - 40);
  return fmt::format("{}; last read: '{}{}'", reason.substr(0, read), clipped ? "..." : "", echo);
}

std::string json_excerpt(const nlohmann::json& v) {
  std::string s = v.dump();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

FieldReader::FieldReader(const nlohmann::json& object, std::string where, std::string prefix)
    : object_(object), where_(std::move(where)), prefix_(std::move(prefix)) {}

std::string FieldReader::path(std::string_view key) const {
  return prefix_.empty() ? std::string(key) : prefix_ + "." + std::string(key);
}

bool FieldReader::has(std::string_view key) const {
  if (!object_.is_object()) return false;
  auto it = object_.find(std::string(key));
  return it != object_.end() && !it->is_null();
}

const nlohmann::json* FieldReader::get(std::string_view key) {
  seen_.emplace_back(key);
  if (!object_.is_object()) return nullptr;
  auto it = object_.find(std::string(key));
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

void FieldReader::fail(std::string_view key, std::string_view expected, std::string_view got) {
  if (error_) return;
  error_ =
      Error{fmt::format("{}: field '{}': expected {}, got {}", where_, path(key), expected, got)};
}

void FieldReader::check(bool ok, std::string_view key, std::string_view expected,
                        std::string_view got) {
  if (!ok) fail(key, expected, got);
}

bool FieldReader::read(std::string_view key, std::int64_t& out) {
  const auto* v = get(key);
  if (!v) return false;
  if (v->is_number_integer()) {
    out = v->get<std::int64_t>();
    return true;
  }
  if (v->is_number_float()) {
    double d = v->get<double>();
    // 5e8 (DeepSpeed bucket sizes are often written so) is an integer.
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18) {
      out = static_cast<std::int64_t>(d);
      return true;
    }
  }
  fail(key, "an integer", json_excerpt(*v));
  return false;
}

bool FieldReader::read(std::string_view key, int& out) {
  std::int64_t v = 0;
  if (!read(key, v)) return false;
  if (v < INT32_MIN || v > INT32_MAX) {
    fail(key, "an integer that fits in 32 bits", std::to_string(v));
    return false;
  }
  out = static_cast<int>(v);
  return true;
}

bool FieldReader::read(std::string_view key, double& out) {
  const auto* v = get(key);
  if (!v) return false;
  if (!v->is_number()) {
    fail(key, "a number", json_excerpt(*v));
    return false;
  }
  out = v->get<double>();
  return true;
}

bool FieldReader::read(std::string_view key, bool& out) {
  const auto* v = get(key);
  if (!v) return false;
  if (!v->is_boolean()) {
    fail(key, "true or false", json_excerpt(*v));
    return false;
  }
  out = v->get<bool>();
  return true;
}

bool FieldReader::read(std::string_view key, std::string& out) {
  const auto* v = get(key);
  if (!v) return false;
  if (!v->is_string()) {
    fail(key, "a string", json_excerpt(*v));
    return false;
  }
  out = v->get<std::string>();
  return true;
}

bool FieldReader::read(std::string_view key, std::vector<std::string>& out) {
  const auto* v = get(key);
  if (!v) return false;
  if (v->is_string()) {
    out = {v->get<std::string>()};
    return true;
  }
  if (!v->is_array() ||
      !std::all_of(v->begin(), v->end(), [](const auto& e) { return e.is_string(); })) {
    fail(key, "a string or a list of strings", json_excerpt(*v));
    return false;
  }
  out = v->get<std::vector<std::string>>();
  return true;
}

FieldReader FieldReader::object(std::string_view key) {
  static const nlohmann::json kEmpty = nlohmann::json::object();
  const auto* v = get(key);
  if (v && !v->is_object()) {
    fail(key, "an object", json_excerpt(*v));
    return FieldReader(kEmpty, where_, path(key));
  }
  return FieldReader(v ? *v : kEmpty, where_, path(key));
}

Status FieldReader::status() const {
  if (error_) return *error_;
  if (!allow_unknown_ && object_.is_object()) {
    for (const auto& [k, v] : object_.items()) {
      if (std::find(seen_.begin(), seen_.end(), k) != seen_.end()) continue;
      if (!k.empty() && (k[0] == '_' || k == "comment" || k == "source" || k == "sources"))
        continue;  // documentation fields are free
      std::string known;
      for (const auto& s : seen_) known += (known.empty() ? "" : ", ") + s;
      return Error{fmt::format("{}: field '{}': unknown field; expected one of: {}", where_,
                               path(k), known)};
    }
  }
  return {};
}

}  // namespace commscope
