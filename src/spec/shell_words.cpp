// Shell word splitting and expansion for launch scripts (spec/shell_words.h).
#include "commscope/spec/shell_words.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>

#include <fmt/format.h>

namespace commscope {

namespace {

bool name_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// The variables whose defaults a word took, each once and at most kMaxDefaults of them (the
// note names a few; a script of many defaults cannot make every word carry them all).
constexpr std::size_t kMaxDefaults = 32;
void add_defaults(std::vector<std::string>& into, const std::vector<std::string>& from) {
  for (const auto& d : from)
    if (into.size() < kMaxDefaults && std::find(into.begin(), into.end(), d) == into.end())
      into.push_back(d);
}

// The end of the expansion that starts with the `$` (or backquote) at text[i], or npos where it
// is no expansion (a lone `$`). Lines crossed are counted into `line`.
Result<std::size_t> expansion_end(std::string_view text, std::size_t i, int& line,
                                  const std::string& where) {
  const int opened = line;
  auto unclosed = [&](std::string_view what, char close) {
    return Error{
        fmt::format("{}:{}: expected a closing {} for the {} opened here, got the end of the file",
                    where, opened, close, what)};
  };
  if (text[i] == '`') {
    std::size_t j = i + 1;
    for (; j < text.size() && text[j] != '`'; ++j) {
      if (text[j] == '\\') ++j;
      if (j < text.size() && text[j] == '\n') ++line;
    }
    if (j >= text.size()) return unclosed("`", '`');
    return j + 1;
  }
  if (i + 1 >= text.size()) return std::string_view::npos;
  const char c = text[i + 1];
  if (c == '(' || c == '{') {
    const char close = c == '(' ? ')' : '}';
    int depth = 0;
    for (std::size_t j = i + 1; j < text.size(); ++j) {
      if (text[j] == '\n') ++line;
      if (text[j] == c) ++depth;
      if (text[j] == close && --depth == 0) return j + 1;
    }
    return unclosed(c == '(' ? "$(" : "${", close);
  }
  if (name_start(c)) {
    std::size_t j = i + 1;
    while (j < text.size() && name_char(text[j])) ++j;
    return j;
  }
  if (std::isdigit(static_cast<unsigned char>(c)) ||
      std::string_view("@*#?$!-").find(c) != std::string_view::npos)
    return i + 2;
  return std::string_view::npos;
}

}  // namespace

Result<std::vector<ShellWord>> shell_words(std::string_view text, const std::string& where) {
  std::vector<ShellWord> out;
  ShellWord cur;
  bool in_word = false;
  int line = 1;
  auto finish = [&]() -> Status {
    if (!in_word) return {};
    if (out.size() >= kMaxShellWords)
      return Error{
          fmt::format("{}:{}: expected at most {} words, got more", where, line, kMaxShellWords)};
    out.push_back(std::move(cur));
    cur = ShellWord{};
    in_word = false;
    return {};
  };
  auto begin = [&]() {
    if (!in_word) {
      in_word = true;
      cur.line = line;
    }
  };
  // An expansion at text[i] (outside single quotes): copied as written, its place noted.
  // Returns false where text[i] starts none.
  auto expansion = [&](std::size_t& i) -> Result<bool> {
    CS_ASSIGN_OR_RETURN(const std::size_t end, expansion_end(text, i, line, where));
    if (end == std::string_view::npos) return false;
    begin();
    cur.expansions.emplace_back(cur.text.size(), cur.text.size() + (end - i));
    cur.text.append(text.substr(i, end - i));
    i = end - 1;
    return true;
  };
  // Here-documents (`cat <<EOF > ds_config.json`): their bodies are data, not words; the lines
  // after the one that opens them, up to the delimiter's line, are skipped (a tab-stripped line
  // under `<<-`).
  std::vector<std::pair<std::string, bool>> heredocs;  // delimiter, tabs stripped
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      CS_RETURN_IF_ERROR(finish());
      ++line;
      for (const auto& [delimiter, tabs] : heredocs) {
        while (i + 1 < text.size()) {
          const std::size_t start = i + 1;
          std::size_t end = text.find('\n', start);
          if (end == std::string_view::npos) end = text.size();
          std::string_view body = text.substr(start, end - start);
          if (tabs) body.remove_prefix(std::min(body.find_first_not_of('\t'), body.size()));
          i = end < text.size() ? end : text.size() - 1;
          if (end < text.size()) ++line;
          if (body == delimiter) break;
        }
      }
      heredocs.clear();
    } else if (c == '<' && i + 2 < text.size() && text[i + 1] == '<' && text[i + 2] != '<') {
      CS_RETURN_IF_ERROR(finish());
      std::size_t j = i + 2;
      const bool tabs = text[j] == '-';
      if (tabs) ++j;
      while (j < text.size() && (text[j] == ' ' || text[j] == '\t')) ++j;
      std::string delimiter;  // its quotes removed (they only stop expansion in the body)
      for (; j < text.size() && !std::isspace(static_cast<unsigned char>(text[j])) &&
             std::string_view(";&|<>()").find(text[j]) == std::string_view::npos;
           ++j)
        if (text[j] != '\'' && text[j] != '"' && text[j] != '\\') delimiter += text[j];
      if (!delimiter.empty()) heredocs.emplace_back(std::move(delimiter), tabs);
      i = j - 1;
    } else if (std::isspace(static_cast<unsigned char>(c)) || c == '(' || c == ')' || c == ';') {
      CS_RETURN_IF_ERROR(finish());
    } else if (c == '#' && !in_word) {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
    } else if (c == '\\') {
      if (i + 1 < text.size() && text[i + 1] == '\n') {
        ++i;
        ++line;  // a continuation: the word goes on (or the next one starts) on the next line
      } else if (i + 1 < text.size()) {
        begin();
        cur.quoted = true;
        cur.text += text[++i];
      }
    } else if (c == '$' || c == '`') {
      CS_ASSIGN_OR_RETURN(const bool expanded, expansion(i));
      if (!expanded) {
        begin();
        cur.text += c;
      }
    } else if (c == '\'' || c == '"') {
      begin();
      cur.quoted = true;
      const int opened = line;
      std::size_t j = i + 1;
      for (; j < text.size() && text[j] != c; ++j) {
        if (text[j] == '\n') ++line;
        if (c == '"' && (text[j] == '$' || text[j] == '`')) {
          CS_ASSIGN_OR_RETURN(const bool expanded, expansion(j));
          if (expanded) continue;
        }
        if (c == '"' && text[j] == '\\' && j + 1 < text.size() && text[j + 1] == '\n') {
          ++j;  // a continuation inside double quotes: both go
          ++line;
          continue;
        }
        if (c == '"' && text[j] == '\\' && j + 1 < text.size() &&
            (text[j + 1] == '"' || text[j + 1] == '\\' || text[j + 1] == '$' ||
             text[j + 1] == '`')) {
          cur.text += text[++j];
          continue;
        }
        cur.text += text[j];
      }
      if (j >= text.size())
        return Error{
            fmt::format("{}:{}: expected a closing {} for the quote opened here, got the "
                        "end of the file",
                        where, opened, c)};
      i = j;
    } else {
      begin();
      cur.text += c;
    }
  }
  CS_RETURN_IF_ERROR(finish());
  return out;
}

namespace {

struct Variable {
  std::string value;
  bool unresolved = false;  // the value holds an expansion as written
  std::vector<std::string> defaults;
  int unknown_if = 0;
};

enum class Truth { no, yes, unknown };

class Reader {
 public:
  explicit Reader(const std::string& where) : where_(where) {}

  // The word with its expansions replaced where they can be; what it took is marked on it.
  Status expand(ShellWord& w, int depth = 0) {
    if (w.expansions.empty()) return {};
    std::string out;
    std::size_t pos = 0;
    for (const auto& [b, e] : w.expansions) {
      out.append(w.text, pos, b - pos);
      const std::string expr = w.text.substr(b, e - b);
      CS_ASSIGN_OR_RETURN(auto value, expand_one(expr, w, depth));
      if (value) {
        out += *value;
      } else {
        w.unresolved = true;
        out += expr;
      }
      pos = e;
      if (out.size() > kMaxShellExpansion) return count(w, out.size());
    }
    out.append(w.text, pos);
    CS_RETURN_IF_ERROR(count(w, out.size()));
    w.text = std::move(out);
    return {};
  }

  // `NAME=value` or `NAME+=value` (the name written out, before any expansion): keeps it.
  Status assign(const ShellWord& raw, const ShellWord& expanded) {
    std::size_t n = 0;
    if (raw.text.empty() || !name_start(raw.text[0])) return {};
    while (n < raw.text.size() && name_char(raw.text[n])) ++n;
    const bool append = raw.text.compare(n, 2, "+=") == 0;
    if (!append && raw.text.compare(n, 1, "=") != 0) return {};
    if (!raw.expansions.empty() && raw.expansions.front().first < n) return {};
    // The expanded word starts with the same name and operator (expansions come after them).
    const std::string value = expanded.text.substr(n + (append ? 2 : 1));
    Variable& v = vars_[raw.text.substr(0, n)];
    v.value = append ? v.value + value : value;
    CS_RETURN_IF_ERROR(count(raw, v.value.size()));
    add_defaults(v.defaults, expanded.defaults);
    v.unresolved = (append && v.unresolved) || expanded.unresolved;
    if (expanded.unknown_if) v.unknown_if = expanded.unknown_if;
    return {};
  }

  // A test between `if`/`elif` and `then`, its words expanded.
  static Truth decide(const std::vector<ShellWord>& cond) {
    std::optional<Truth> result;
    std::string joiner;  // the `&&` or `||` before the next test
    std::size_t i = 0;
    while (i < cond.size()) {
      bool negate = false;
      while (i < cond.size() && cond[i].text == "!" && !cond[i].quoted) {
        negate = !negate;
        ++i;
      }
      if (i >= cond.size()) return Truth::unknown;
      const std::string open = cond[i].quoted ? "" : cond[i].text;
      if (open != "[[" && open != "[") return Truth::unknown;  // a command: not run
      const std::string close = open == "[[" ? "]]" : "]";
      std::size_t j = i + 1;
      while (j < cond.size() && !(cond[j].text == close && !cond[j].quoted)) ++j;
      if (j >= cond.size()) return Truth::unknown;
      Truth t = test(std::vector<ShellWord>(cond.begin() + i + 1, cond.begin() + j));
      if (negate && t != Truth::unknown) t = t == Truth::yes ? Truth::no : Truth::yes;
      if (!result) {
        result = t;
      } else if (joiner == "&&") {
        result = *result == Truth::no || t == Truth::no     ? Truth::no
                 : *result == Truth::yes && t == Truth::yes ? Truth::yes
                                                            : Truth::unknown;
      } else {
        result = *result == Truth::yes || t == Truth::yes ? Truth::yes
                 : *result == Truth::no && t == Truth::no ? Truth::no
                                                          : Truth::unknown;
      }
      i = j + 1;
      if (i >= cond.size()) break;
      if (cond[i].quoted || (cond[i].text != "&&" && cond[i].text != "||")) return Truth::unknown;
      joiner = cond[i++].text;
    }
    return result.value_or(Truth::unknown);
  }

 private:
  Status count(const ShellWord& w, std::size_t size) {
    expanded_ += size;
    if (size > kMaxShellExpansion || expanded_ > kMaxShellExpansion)
      return Error{
          fmt::format("{}:{}: expected expansions of at most {} characters in all, got "
                      "more",
                      where_, w.line, kMaxShellExpansion)};
    return {};
  }

  // The value of one expansion, or nothing where it cannot be known here.
  Result<std::optional<std::string>> expand_one(const std::string& expr, ShellWord& w, int depth) {
    if (expr.rfind("$((", 0) == 0 && expr.size() >= 5 &&
        expr.compare(expr.size() - 2, 2, "))") == 0) {
      const auto v = arithmetic(expr.substr(3, expr.size() - 5), w);
      if (!v) return std::optional<std::string>{};
      return std::optional<std::string>{std::to_string(*v)};
    }
    if (expr.rfind("${", 0) != 0) {  // $NAME, $1, $@, $(cmd), `cmd`
      if (expr.size() < 2 || !name_start(expr[1])) return std::optional<std::string>{};
      return lookup(expr.substr(1), w);
    }
    const std::string inner = expr.substr(2, expr.size() - 3);
    std::size_t n = 0;
    if (!inner.empty() && std::isdigit(static_cast<unsigned char>(inner[0]))) {
      while (n < inner.size() && std::isdigit(static_cast<unsigned char>(inner[n]))) ++n;
    } else {
      while (n < inner.size() && name_char(inner[n])) ++n;
    }
    if (n == 0) return std::optional<std::string>{};  // ${#X}, ${!X}
    const std::string name = inner.substr(0, n);
    std::string op = inner.substr(n);
    if (op.empty()) return lookup(name, w);
    const bool colon = op[0] == ':';
    if (colon) op.erase(0, 1);
    if (op.empty() || (op[0] != '-' && op[0] != '=')) return std::optional<std::string>{};
    const auto it = vars_.find(name);
    if (it != vars_.end() && (!colon || !it->second.value.empty())) return lookup(name, w);
    // The script's default: what runs unless the environment or the command line sets it.
    if (depth >= 8) return std::optional<std::string>{};
    CS_ASSIGN_OR_RETURN(auto words, shell_words(op.substr(1), where_));
    std::string value;
    for (auto& part : words) {
      part.line = w.line;
      CS_RETURN_IF_ERROR(expand(part, depth + 1));
      if (part.unresolved) return std::optional<std::string>{};
      if (!value.empty()) value += ' ';
      value += part.text;
      add_defaults(w.defaults, part.defaults);
    }
    const std::string shown = std::isdigit(static_cast<unsigned char>(name[0])) ? "$" + name : name;
    add_defaults(w.defaults, {shown});
    if (op[0] == '=') {  // ${X:=d} assigns too
      Variable& v = vars_[name];
      v.value = value;
      v.unresolved = false;
      v.defaults = w.defaults;
    }
    return std::optional<std::string>{value};
  }

  std::optional<std::string> lookup(const std::string& name, ShellWord& w) const {
    const auto it = vars_.find(name);
    if (it == vars_.end()) return std::nullopt;
    add_defaults(w.defaults, it->second.defaults);
    if (it->second.unknown_if && !w.unknown_if) w.unknown_if = it->second.unknown_if;
    if (it->second.unresolved) w.unresolved = true;
    return it->second.value;
  }

  // Integer arithmetic: + - * / % and parentheses over decimal numbers and the script's
  // variables ($X, ${X} or X); nothing where a variable is unknown or not a number, on
  // division by zero or overflow.
  std::optional<std::int64_t> arithmetic(const std::string& text, ShellWord& w) const {
    std::size_t pos = 0;
    int depth = 0;
    auto skip = [&] {
      while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos]))) ++pos;
    };
    std::function<std::optional<std::int64_t>()> sum;
    auto primary = [&]() -> std::optional<std::int64_t> {
      skip();
      bool minus = false;  // unary signs
      while (pos < text.size() && (text[pos] == '-' || text[pos] == '+')) {
        minus = minus != (text[pos++] == '-');
        skip();
      }
      if (pos >= text.size()) return std::nullopt;
      if (text[pos] == '(') {
        if (++depth > 64) return std::nullopt;
        ++pos;
        auto v = sum();
        skip();
        if (!v || pos >= text.size() || text[pos] != ')') return std::nullopt;
        ++pos;
        --depth;
        if (minus && *v == INT64_MIN) return std::nullopt;
        return minus ? -*v : *v;
      }
      std::string word;
      if (std::isdigit(static_cast<unsigned char>(text[pos]))) {
        while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos])))
          word += text[pos++];
      } else {
        const bool dollar = text[pos] == '$';
        if (dollar) ++pos;
        const bool brace = dollar && pos < text.size() && text[pos] == '{';
        if (brace) ++pos;
        if (pos >= text.size() || !name_start(text[pos])) return std::nullopt;
        std::string name;
        while (pos < text.size() && name_char(text[pos])) name += text[pos++];
        if (brace) {
          if (pos >= text.size() || text[pos] != '}') return std::nullopt;
          ++pos;
        }
        auto v = lookup(name, w);
        if (!v) return std::nullopt;
        word = *v;
      }
      if (word.empty() || word.size() > 18 || !std::all_of(word.begin(), word.end(), [](char c) {
            return std::isdigit(static_cast<unsigned char>(c));
          }))
        return std::nullopt;
      return minus ? -std::stoll(word) : std::stoll(word);
    };
    auto product = [&]() -> std::optional<std::int64_t> {
      auto v = primary();
      for (;;) {
        skip();
        if (!v || pos >= text.size() ||
            std::string_view("*/%").find(text[pos]) == std::string_view::npos)
          return v;
        const char op = text[pos++];
        auto r = primary();
        if (!r) return std::nullopt;
        std::int64_t out = 0;
        if (op == '*') {
          if (__builtin_mul_overflow(*v, *r, &out)) return std::nullopt;
        } else {
          if (*r == 0 || (*v == INT64_MIN && *r == -1)) return std::nullopt;
          out = op == '/' ? *v / *r : *v % *r;
        }
        v = out;
      }
    };
    sum = [&]() -> std::optional<std::int64_t> {
      auto v = product();
      for (;;) {
        skip();
        if (!v || pos >= text.size() || (text[pos] != '+' && text[pos] != '-')) return v;
        const char op = text[pos++];
        auto r = product();
        if (!r) return std::nullopt;
        std::int64_t out = 0;
        if (op == '+' ? __builtin_add_overflow(*v, *r, &out) : __builtin_sub_overflow(*v, *r, &out))
          return std::nullopt;
        v = out;
      }
    };
    auto v = sum();
    skip();
    if (pos != text.size()) return std::nullopt;
    return v;
  }

  // One [[ ... ]] or [ ... ] test.
  static Truth test(const std::vector<ShellWord>& t) {
    for (const auto& w : t)
      if (w.unresolved) return Truth::unknown;
    if (!t.empty() && t[0].text == "!" && !t[0].quoted) {
      const Truth inner = test(std::vector<ShellWord>(t.begin() + 1, t.end()));
      return inner == Truth::unknown ? inner : inner == Truth::yes ? Truth::no : Truth::yes;
    }
    auto integer = [](const std::string& s) -> std::optional<std::int64_t> {
      if (s.empty() || s.size() > 18) return std::nullopt;
      std::size_t k = s[0] == '-' ? 1 : 0;
      if (k == s.size()) return std::nullopt;
      for (std::size_t j = k; j < s.size(); ++j)
        if (!std::isdigit(static_cast<unsigned char>(s[j]))) return std::nullopt;
      return std::stoll(s);
    };
    auto truth = [](bool b) { return b ? Truth::yes : Truth::no; };
    if (t.size() == 1) return truth(!t[0].text.empty());
    if (t.size() == 2 && (t[0].text == "-z" || t[0].text == "-n"))
      return truth(t[0].text == "-z" ? t[1].text.empty() : !t[1].text.empty());
    if (t.size() != 3) return Truth::unknown;
    const std::string& op = t[1].text;
    const std::string &a = t[0].text, &b = t[2].text;
    if (op == "==" || op == "=" || op == "!=") {
      if (b.find_first_of("*?[") != std::string::npos) return Truth::unknown;  // a pattern
      return truth((a == b) == (op != "!="));
    }
    static const std::map<std::string, int> kCompare = {{"-eq", 0}, {"-ne", 1}, {"-lt", 2},
                                                        {"-le", 3}, {"-gt", 4}, {"-ge", 5}};
    const auto c = kCompare.find(op);
    const auto x = integer(a), y = integer(b);
    if (c == kCompare.end() || !x || !y) return Truth::unknown;
    switch (c->second) {
      case 0:
        return truth(*x == *y);
      case 1:
        return truth(*x != *y);
      case 2:
        return truth(*x < *y);
      case 3:
        return truth(*x <= *y);
      case 4:
        return truth(*x > *y);
      default:
        return truth(*x >= *y);
    }
  }

  const std::string& where_;
  std::map<std::string, Variable> vars_;
  std::size_t expanded_ = 0;
};

// One `if ... fi`.
struct Frame {
  bool parent_active = true;
  int line = 0;
  bool collecting = true;  // between `if`/`elif` and `then`
  std::vector<ShellWord> cond;
  Truth branch = Truth::no;  // the branch being read: taken, not taken, or not decided
  bool any_taken = false, any_unknown = false;
  std::vector<std::string> defaults;  // the defaults the conditions so far took
};

bool keyword(const ShellWord& w, std::string_view k) {
  return !w.quoted && w.expansions.empty() && w.text == k;
}

}  // namespace

Result<std::vector<ShellWord>> read_shell_script(std::string_view text, const std::string& where) {
  CS_ASSIGN_OR_RETURN(auto words, shell_words(text, where));
  Reader reader(where);
  std::vector<Frame> ifs;
  std::vector<ShellWord> out;
  auto active = [&] {
    return ifs.empty() ||
           (ifs.back().parent_active && !ifs.back().collecting && ifs.back().branch != Truth::no);
  };
  auto unknown_line = [&] {
    for (auto it = ifs.rbegin(); it != ifs.rend(); ++it)
      if (it->branch == Truth::unknown) return it->line;
    return 0;
  };
  for (auto& w : words) {
    if (keyword(w, "if")) {
      Frame f;
      f.parent_active = active();
      f.line = w.line;
      ifs.push_back(std::move(f));
      continue;
    }
    if (!ifs.empty()) {
      Frame& f = ifs.back();
      if (keyword(w, "then") && f.collecting) {
        f.collecting = false;
        for (const auto& c : f.cond) add_defaults(f.defaults, c.defaults);
        Truth t = f.parent_active && !f.any_taken ? Reader::decide(f.cond) : Truth::no;
        if (t == Truth::yes && f.any_unknown) t = Truth::unknown;  // an earlier branch may run
        f.branch = t;
        f.any_taken = f.any_taken || t == Truth::yes;
        f.any_unknown = f.any_unknown || t == Truth::unknown;
        f.cond.clear();
        continue;
      }
      if (keyword(w, "elif") && !f.collecting) {
        f.collecting = true;
        continue;
      }
      if (keyword(w, "else") && !f.collecting) {
        f.branch = !f.parent_active || f.any_taken ? Truth::no
                   : f.any_unknown                 ? Truth::unknown
                                                   : Truth::yes;
        continue;
      }
      if (keyword(w, "fi")) {
        ifs.pop_back();
        continue;
      }
      if (f.collecting) {
        if (f.parent_active && !f.any_taken) {
          CS_RETURN_IF_ERROR(reader.expand(w));
          f.cond.push_back(std::move(w));
        }
        continue;
      }
    }
    if (!active()) continue;
    ShellWord expanded = w;
    CS_RETURN_IF_ERROR(reader.expand(expanded));
    if (const int line = unknown_line(); line && !expanded.unknown_if) expanded.unknown_if = line;
    for (const auto& f : ifs) add_defaults(expanded.defaults, f.defaults);  // chosen by defaults
    CS_RETURN_IF_ERROR(reader.assign(w, expanded));
    out.push_back(std::move(expanded));
  }
  return out;
}

}  // namespace commscope
