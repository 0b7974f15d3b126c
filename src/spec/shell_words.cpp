// Shell word splitting and expansion for launch scripts (spec/shell_words.h).
#include "commscope/spec/shell_words.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <regex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commscope/util/input_file.h"

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

// A here-document: its body as written, and where it stands among the words.
struct HereDoc {
  int line = 0;          // the line of its `<<`
  std::size_t word = 0;  // the index of the word after its `<<` (so its command's words are before)
  std::string body;      // the lines up to the delimiter's, each with its newline
  bool quoted = false;   // a quoted delimiter: the body is not expanded
};

Result<std::vector<ShellWord>> split_words(std::string_view text, const std::string& where,
                                           std::vector<HereDoc>* docs) {
  std::vector<ShellWord> out;
  ShellWord cur;
  bool in_word = false;
  bool command_start = true;  // the next word starts a command
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
      cur.command_start = command_start;
      command_start = false;
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
  struct Pending {
    std::string delimiter;
    bool tabs = false;  // `<<-`: leading tabs stripped
    HereDoc doc;
  };
  std::vector<Pending> heredocs;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      CS_RETURN_IF_ERROR(finish());
      ++line;
      command_start = true;
      for (auto& h : heredocs) {
        while (i + 1 < text.size()) {
          const std::size_t start = i + 1;
          std::size_t end = text.find('\n', start);
          if (end == std::string_view::npos) end = text.size();
          std::string_view body = text.substr(start, end - start);
          if (h.tabs) body.remove_prefix(std::min(body.find_first_not_of('\t'), body.size()));
          i = end < text.size() ? end : text.size() - 1;
          if (end < text.size()) ++line;
          if (body == h.delimiter) break;
          if (docs) {
            h.doc.body.append(body);
            h.doc.body += '\n';
          }
        }
        if (docs) docs->push_back(std::move(h.doc));
      }
      heredocs.clear();
    } else if (c == '<' && i + 2 < text.size() && text[i + 1] == '<' && text[i + 2] != '<') {
      CS_RETURN_IF_ERROR(finish());
      std::size_t j = i + 2;
      Pending h;
      h.tabs = text[j] == '-';
      if (h.tabs) ++j;
      while (j < text.size() && (text[j] == ' ' || text[j] == '\t')) ++j;
      // The delimiter, its quotes removed: they only stop expansion in the body.
      for (; j < text.size() && !std::isspace(static_cast<unsigned char>(text[j])) &&
             std::string_view(";&|<>()").find(text[j]) == std::string_view::npos;
           ++j) {
        if (text[j] == '\'' || text[j] == '"' || text[j] == '\\')
          h.doc.quoted = true;
        else
          h.delimiter += text[j];
      }
      h.doc.line = line;
      h.doc.word = out.size();
      if (!h.delimiter.empty()) heredocs.push_back(std::move(h));
      i = j - 1;
    } else if (c == ';') {
      CS_RETURN_IF_ERROR(finish());
      command_start = true;
    } else if (std::isspace(static_cast<unsigned char>(c)) || c == '(' || c == ')') {
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

}  // namespace

Result<std::vector<ShellWord>> shell_words(std::string_view text, const std::string& where) {
  return split_words(text, where, nullptr);
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
  explicit Reader(const std::string& where) : where_(where), file_(&where) {}

  // The file whose words are being read (a sourced one names its own lines); $0 stays the
  // script's.
  void set_file(const std::string& file) { file_ = &file; }
  const std::string& file() const { return *file_; }

  // The word with its expansions replaced where they can be; what it took is marked on it.
  // `first_unresolved` (where given) gets the first expansion left as written.
  Status expand(ShellWord& w, int depth = 0, std::string* first_unresolved = nullptr) {
    if (w.expansions.empty()) return {};
    std::string out;
    std::size_t pos = 0;
    for (const auto& [b, e] : w.expansions) {
      out.append(w.text, pos, b - pos);
      const std::string expr = w.text.substr(b, e - b);
      const bool before = w.unresolved;
      CS_ASSIGN_OR_RETURN(auto value, expand_one(expr, w, depth));
      if (value) {
        out += *value;
      } else {
        w.unresolved = true;
        out += expr;
      }
      if (first_unresolved && !before && w.unresolved && first_unresolved->empty())
        *first_unresolved = expr;  // left as written, or a variable holding such
      pos = e;
      if (out.size() > kMaxShellExpansion) return count(w, out.size());
    }
    out.append(w.text, pos);
    CS_RETURN_IF_ERROR(count(w, out.size()));
    w.text = std::move(out);
    return {};
  }

  // `NAME=value` or `NAME+=value` (the name written out, before any expansion): keeps it.
  // Marks `expanded` as an assignment (ShellWord::assignment).
  Status assign(const ShellWord& raw, ShellWord& expanded) {
    std::size_t n = 0;
    if (raw.text.empty() || !name_start(raw.text[0])) return {};
    while (n < raw.text.size() && name_char(raw.text[n])) ++n;
    const bool append = raw.text.compare(n, 2, "+=") == 0;
    if (!append && raw.text.compare(n, 1, "=") != 0) return {};
    if (!raw.expansions.empty() && raw.expansions.front().first < n) return {};
    // The expanded word starts with the same name and operator (expansions come after them).
    expanded.assignment = true;
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

  // Counts `size` characters (the word's line names where) against kMaxShellExpansion.
  Status count(const ShellWord& w, std::size_t size) {
    expanded_ += size;
    if (size > kMaxShellExpansion || expanded_ > kMaxShellExpansion)
      return Error{
          fmt::format("{}:{}: expected expansions of at most {} characters in all, got "
                      "more",
                      *file_, w.line, kMaxShellExpansion)};
    return {};
  }

 private:
  // The value of one expansion, or nothing where it cannot be known here.
  Result<std::optional<std::string>> expand_one(const std::string& expr, ShellWord& w, int depth) {
    if (expr.rfind("$((", 0) == 0 && expr.size() >= 5 &&
        expr.compare(expr.size() - 2, 2, "))") == 0) {
      const auto v = arithmetic(expr.substr(3, expr.size() - 5), w);
      if (!v) return std::optional<std::string>{};
      return std::optional<std::string>{std::to_string(*v)};
    }
    if (expr == "$0" || expr == "${0}")
      return std::optional<std::string>{where_};  // as `bash FILE`
    if (expr.rfind("$(", 0) == 0 && expr.size() >= 3)
      return path_command(expr.substr(2, expr.size() - 3), w, depth);
    if (expr.size() >= 2 && expr.front() == '`' && expr.back() == '`')
      return path_command(expr.substr(1, expr.size() - 2), w, depth);
    if (expr.rfind("${", 0) != 0) {  // $NAME, $1, $@
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
    CS_ASSIGN_OR_RETURN(auto words, shell_words(op.substr(1), *file_));
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

  // A command substitution whose output is a function of paths only, as scripts find their
  // own directory (`$(dirname "$(readlink -f "$0")")`, `$(cd "$(dirname $0)" && pwd)`):
  // `dirname`, `basename P [SUFFIX]`, `realpath P`, `readlink -f P`, `pwd`, `cd P && pwd`, the
  // filesystem read as they read it. Nothing for any other command: none is run.
  Result<std::optional<std::string>> path_command(const std::string& text, ShellWord& w,
                                                  int depth) {
    const std::optional<std::string> none;
    if (depth >= 8) return none;
    CS_ASSIGN_OR_RETURN(auto words, shell_words(text, *file_));
    std::vector<std::string> argv;
    for (auto& part : words) {
      part.line = w.line;
      CS_RETURN_IF_ERROR(expand(part, depth + 1));
      if (part.unresolved) return none;
      add_defaults(w.defaults, part.defaults);
      argv.push_back(part.text);
    }
    namespace fs = std::filesystem;
    std::error_code ec;
    if (argv.size() == 4 && argv[0] == "cd" && argv[2] == "&&" && argv[3] == "pwd") {
      const fs::path p = fs::absolute(argv[1], ec).lexically_normal();
      if (ec || !fs::is_directory(p, ec)) return none;
      std::string out = p.string();
      while (out.size() > 1 && out.back() == '/') out.pop_back();
      return std::optional<std::string>{out};
    }
    if (argv.size() == 1 && argv[0] == "pwd") {
      const fs::path p = fs::current_path(ec);
      if (ec) return none;
      return std::optional<std::string>{p.string()};
    }
    if (argv.size() == 2 && argv[0] == "dirname") {  // POSIX dirname
      std::string p = argv[1];
      while (p.size() > 1 && p.back() == '/') p.pop_back();
      const std::size_t slash = p.rfind('/');
      if (slash == std::string::npos) return std::optional<std::string>{"."};
      p.resize(slash);
      while (p.size() > 1 && p.back() == '/') p.pop_back();
      return std::optional<std::string>{p.empty() ? "/" : p};
    }
    if ((argv.size() == 2 || argv.size() == 3) && argv[0] == "basename") {
      std::string p = argv[1];
      while (p.size() > 1 && p.back() == '/') p.pop_back();
      if (p != "/") p = p.substr(p.rfind('/') == std::string::npos ? 0 : p.rfind('/') + 1);
      if (argv.size() == 3 && p.size() > argv[2].size() &&
          p.compare(p.size() - argv[2].size(), argv[2].size(), argv[2]) == 0)
        p.resize(p.size() - argv[2].size());
      return std::optional<std::string>{p};
    }
    if ((argv.size() == 2 && argv[0] == "realpath") ||
        (argv.size() == 3 && argv[0] == "readlink" && argv[1] == "-f")) {
      const fs::path p = fs::weakly_canonical(fs::absolute(argv.back(), ec), ec);
      if (ec || (argv[0] == "realpath" && !fs::exists(p, ec))) return none;
      return std::optional<std::string>{p.string()};
    }
    return none;
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
  const std::string* file_;
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

namespace {

// A here-document's body as a word of its expansions: bash expands `$...` and backquotes in it
// and drops the backslash before `$`, a backquote, `\` and a newline; quotes are text there.
Result<ShellWord> body_word(const HereDoc& doc, const std::string& where) {
  ShellWord w;
  w.line = doc.line;
  int line = doc.line + 1;
  const std::string& body = doc.body;
  for (std::size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c == '\n') ++line;
    if (c == '\\' && i + 1 < body.size()) {
      const char n = body[i + 1];
      if (n == '\n') {
        ++i;
        ++line;
        continue;
      }
      if (n == '$' || n == '`' || n == '\\') {
        w.text += n;
        ++i;
        continue;
      }
    }
    if (c == '$' || c == '`') {
      CS_ASSIGN_OR_RETURN(const std::size_t end, expansion_end(body, i, line, where));
      if (end != std::string_view::npos) {
        w.expansions.emplace_back(w.text.size(), w.text.size() + (end - i));
        w.text.append(body, i, end - i);
        i = end - 1;
        continue;
      }
    }
    w.text += c;
  }
  return w;
}

// One sed substitution, `s/pattern/replacement/` with `g` or no flags and any delimiter.
struct Substitution {
  std::regex pattern;
  std::string replacement;  // sed's: `&`, `\1`..`\9`, `\n`, `\&`, `\\`
  bool global = false;
};

std::optional<Substitution> sed_substitution(const std::string& script, bool extended) {
  if (script.size() < 4 || script[0] != 's' || script[1] == '\\' || script[1] == '\n')
    return std::nullopt;
  const char d = script[1];
  std::size_t i = 2;
  auto part = [&](bool keep_escapes) -> std::optional<std::string> {
    std::string out;
    for (; i < script.size() && script[i] != d; ++i) {
      if (script[i] == '\\' && i + 1 < script.size()) {
        if (script[i + 1] == d) {
          out += d;
          ++i;
          continue;
        }
        if (keep_escapes) out += script[i];
        out += script[++i];
        continue;
      }
      out += script[i];
    }
    if (i >= script.size()) return std::nullopt;
    ++i;  // the delimiter
    return out;
  };
  const auto pattern = part(true);
  if (!pattern) return std::nullopt;
  const auto replacement = part(true);
  if (!replacement) return std::nullopt;
  const std::string flags = script.substr(i);
  if (!flags.empty() && flags != "g") return std::nullopt;
  try {
    return Substitution{std::regex(*pattern, extended ? std::regex::extended : std::regex::basic),
                        *replacement, flags == "g"};
  } catch (const std::regex_error&) {
    return std::nullopt;
  }
}

// `text` through the substitutions in order, line by line, as a pipeline of seds runs them; nothing
// where a line is longer than kMaxSedLine (libstdc++'s regex recurses once a character, so a long
// line would exhaust the stack) or the output would pass kMaxShellExpansion.
constexpr std::size_t kMaxSedLine = 4096;
std::optional<std::string> apply_substitutions(const std::vector<Substitution>& subs,
                                               const std::string& text) {
  std::string out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    const bool newline = end != std::string::npos;
    if (!newline) end = text.size();
    std::string line = text.substr(pos, end - pos);
    for (const auto& s : subs) {
      if (line.size() > kMaxSedLine) return std::nullopt;
      std::string next;
      auto it = line.cbegin();
      std::smatch m;
      while (std::regex_search(it, line.cend(), m, s.pattern)) {
        next.append(it, m[0].first);
        for (std::size_t k = 0; k < s.replacement.size(); ++k) {
          const char c = s.replacement[k];
          if (c == '&') {
            next += m.str(0);
          } else if (c == '\\' && k + 1 < s.replacement.size()) {
            const char n = s.replacement[++k];
            if (n >= '1' && n <= '9')
              next += m.str(static_cast<std::size_t>(n - '0'));
            else
              next += n == 'n' ? '\n' : n;
          } else {
            next += c;
          }
        }
        if (next.size() > kMaxShellExpansion) return std::nullopt;
        it = m[0].second;
        if (m.length(0) == 0) {  // an empty match: one character on, as sed does
          if (it == line.cend()) break;
          next += *it++;
        }
        if (!s.global) break;
      }
      next.append(it, line.cend());
      line = std::move(next);
    }
    out += line;
    if (newline) out += '\n';
    if (out.size() > kMaxShellExpansion) return std::nullopt;
    pos = end + 1;
  }
  return out;
}

bool plain(const ShellWord& w, std::string_view text) {
  return !w.quoted && w.text == text;
}

// A file a script names (a sed template, a sourced file): relative to the working directory, as
// bash opens it, else beside `script` (where such scripts keep theirs and are run from).
std::filesystem::path script_path(const std::string& name, const std::string& script) {
  std::filesystem::path path = name;
  std::error_code ec;
  if (path.is_relative() && !std::filesystem::exists(path, ec)) {
    auto beside = std::filesystem::path(script).parent_path() / name;
    if (std::filesystem::exists(beside, ec)) path = std::move(beside);
  }
  return path;
}

}  // namespace

std::string script_file_key(const std::string& path) {
  return std::filesystem::path(path).lexically_normal().string();
}

namespace {

// What one command of the script writes, where that is known (spec/shell_words.h). `words` are
// the command's words as bash would see them; `docs` the here-documents it reads.
Status command_writes(const std::vector<ShellWord>& words, const std::vector<const HereDoc*>& docs,
                      Reader& reader, const std::string& where, ShellScript& script) {
  // The output redirection: `> f`, `>> f`, `>f`, `>>f` (the last one, as bash leaves it).
  std::string target;
  bool append = false;
  std::size_t redirect = words.size();  // the first word of the last redirection
  for (std::size_t i = 0; i < words.size(); ++i) {
    const ShellWord& w = words[i];
    if (w.quoted || w.text.empty() || w.text[0] != '>') continue;
    const bool twice = w.text.rfind(">>", 0) == 0;
    const std::string rest = w.text.substr(twice ? 2 : 1);
    if (rest.rfind('&', 0) == 0) continue;  // >&2
    if (!rest.empty()) {
      if (w.unresolved) return {};
      target = rest;
    } else if (i + 1 < words.size()) {
      if (words[i + 1].unresolved) return {};
      target = words[i + 1].text;
    } else {
      continue;
    }
    append = twice;
    redirect = std::min(redirect, i);
  }
  if (target.empty() || words.empty()) return {};
  const std::string key = script_file_key(target);
  const int line = words.front().line;
  ScriptFile file;
  file.where = where;
  file.line = line;
  for (const auto& w : words) {
    add_defaults(file.defaults, w.defaults);
    if (w.unknown_if && !file.unknown_if) file.unknown_if = w.unknown_if;
  }
  auto unread = [&](const std::string& why) {
    script.unread[key] = fmt::format("{}:{}: {}", where, line, why);
    script.files.erase(key);
    return Status{};
  };
  // The command's words before the redirection, split into the stages of a pipeline.
  std::vector<std::vector<const ShellWord*>> stages(1);
  for (std::size_t i = 0; i < redirect; ++i) {
    if (plain(words[i], "|")) {
      stages.emplace_back();
    } else if (!words[i].quoted && words[i].text.rfind(">", 0) == 0) {
      return unread(fmt::format("a command with a redirection commscope does not read ('{}')",
                                words[i].text));
    } else {
      stages.back().push_back(&words[i]);
    }
  }
  const std::string program = stages.front().empty() ? "" : stages.front().front()->text;
  if (stages.size() == 1 && program == "cat" && stages.front().size() == 1 && !docs.empty()) {
    const HereDoc& doc = *docs.back();  // the last one is the command's input, as in bash
    file.how = "a here-document";
    if (doc.quoted) {
      file.text = doc.body;
    } else {
      CS_ASSIGN_OR_RETURN(ShellWord body, body_word(doc, where));
      CS_RETURN_IF_ERROR(reader.expand(body, 0, &file.unresolved));
      add_defaults(file.defaults, body.defaults);
      if (body.unknown_if && !file.unknown_if) file.unknown_if = body.unknown_if;
      file.text = std::move(body.text);
    }
  } else if (stages.size() == 1 && program == "echo") {
    std::vector<std::string> args;
    for (std::size_t k = 1; k < stages.front().size(); ++k) {
      const ShellWord& w = *stages.front()[k];
      if (w.unresolved && file.unresolved.empty()) file.unresolved = w.text;
      args.push_back(w.text);
    }
    if (!args.empty() && !args.front().empty() && args.front()[0] == '-')
      return unread(fmt::format("echo {}, an option commscope does not read", args.front()));
    file.how = "echo";
    file.text = fmt::format("{}\n", fmt::join(args, " "));
  } else if (program == "sed") {
    std::vector<Substitution> subs;
    std::string input;
    for (std::size_t s = 0; s < stages.size(); ++s) {
      const auto& stage = stages[s];
      if (stage.empty() || stage.front()->text != "sed")
        return unread("a pipeline of sed and more");
      bool extended = false;
      std::vector<std::string> scripts, files;
      for (std::size_t k = 1; k < stage.size(); ++k) {
        const ShellWord& w = *stage[k];
        if (w.unresolved) return unread(fmt::format("sed with '{}' left as written", w.text));
        if (w.text == "-E" || w.text == "-r") {
          extended = true;
        } else if (w.text == "-e" && k + 1 < stage.size()) {
          scripts.push_back(stage[++k]->text);
        } else if (!w.text.empty() && w.text[0] == '-') {
          return unread(fmt::format("sed {}, an option commscope does not run", w.text));
        } else if (scripts.empty()) {
          scripts.push_back(w.text);
        } else {
          files.push_back(w.text);
        }
      }
      if (files.size() != (s == 0 ? 1u : 0u))
        return unread("sed over other than one template file");
      for (const auto& text : scripts) {
        auto sub = sed_substitution(text, extended);
        if (!sub) return unread(fmt::format("sed '{}', not one s/pattern/replacement/[g]", text));
        subs.push_back(std::move(*sub));
      }
      if (s == 0) input = files.front();
    }
    const std::filesystem::path path = script_path(input, where);
    auto text = read_small_file(path.string(), 1u << 20, "a sed template");
    if (!text)
      return unread(
          fmt::format("sed over {}, which is not in the working directory or beside "
                      "the script, or cannot be read",
                      input));
    file.how = fmt::format("sed over {}", path.string());
    auto substituted = apply_substitutions(subs, *text);
    if (!substituted)
      return unread(fmt::format("sed over {}, a line of over {} characters in or {} out in all",
                                input, kMaxSedLine, kMaxShellExpansion));
    file.text = std::move(*substituted);
  } else {
    return unread(fmt::format("'{}', a command commscope does not run", program));
  }
  if (append && script.files.count(key)) {
    ScriptFile& old = script.files[key];
    old.text += file.text;
    old.where = file.where;
    old.line = file.line;
    if (old.unresolved.empty()) old.unresolved = file.unresolved;
    CS_RETURN_IF_ERROR(reader.count(words.front(), file.text.size()));
    return {};
  }
  CS_RETURN_IF_ERROR(reader.count(words.front(), file.text.size()));
  script.unread.erase(key);
  script.files[key] = std::move(file);
  return {};
}

}  // namespace

namespace {

constexpr int kMaxSourceDepth = 8;

// The words of one file, the script or one it sources, read into `script` with the variables
// `reader` holds. `source` is the file's index in script.sources; `outer_unknown` the line of an
// undecided `if` around the `source` that reads it.
Status read_file(std::string_view text, std::size_t source, int depth, int outer_unknown,
                 Reader& reader, ShellScript& script) {
  const std::string where = script.sources[source];  // a copy: sources may grow
  reader.set_file(where);
  std::vector<HereDoc> docs;
  CS_ASSIGN_OR_RETURN(auto words, split_words(text, where, &docs));
  std::vector<Frame> ifs;
  std::vector<ShellWord>& out = script.words;
  auto active = [&] {
    return ifs.empty() ||
           (ifs.back().parent_active && !ifs.back().collecting && ifs.back().branch != Truth::no);
  };
  auto unknown_line = [&] {
    for (auto it = ifs.rbegin(); it != ifs.rend(); ++it)
      if (it->branch == Truth::unknown) return it->line;
    return outer_unknown;
  };
  // `source FILE` / `. FILE`: the file's words read here, as bash runs them, with the same
  // variables; relative to the working directory as bash opens it, else beside the script.
  auto follow = [&](const std::vector<ShellWord>& command) -> Status {
    const ShellWord& arg = command[1];
    const std::string at =
        fmt::format("{}:{}: {} {}", where, command[0].line, command[0].text, arg.text);
    if (arg.unresolved) {
      script.unfollowed.push_back(at + " (a path left as written)");
      return {};
    }
    if (depth + 1 >= kMaxSourceDepth) {
      script.unfollowed.push_back(
          fmt::format("{} (sourced files nested deeper than {})", at, kMaxSourceDepth));
      return {};
    }
    const std::filesystem::path path = script_path(arg.text, script.sources.front());
    auto body = read_small_file(path.string(), 1u << 20, "a sourced shell file");
    if (!body) {
      script.unfollowed.push_back(fmt::format("{} ({})", at, body.error().message));
      return {};
    }
    CS_RETURN_IF_ERROR(reader.count(command[0], body->size()));
    script.sources.push_back(path.string());
    script.sourced.push_back(
        fmt::format("{} (line {} of {})", path.string(), command[0].line, where));
    const Status read = read_file(*body, script.sources.size() - 1, depth + 1,
                                  command[0].unknown_if, reader, script);
    reader.set_file(where);
    return read;
  };
  // The command being read: its first word's index and its words that bash would run.
  std::size_t command_begin = 0;
  std::vector<ShellWord> command;
  std::size_t next_doc = 0;
  auto finish_command = [&](std::size_t end) -> Status {
    // Its here-documents: those whose `<<` follows one of its words.
    std::vector<const HereDoc*> its;
    while (next_doc < docs.size() && docs[next_doc].word <= end) {
      if (docs[next_doc].word > command_begin) its.push_back(&docs[next_doc]);
      ++next_doc;
    }
    if (!command.empty()) {
      CS_RETURN_IF_ERROR(command_writes(command, its, reader, where, script));
      if (command.size() >= 2 && (plain(command[0], "source") || plain(command[0], ".")))
        CS_RETURN_IF_ERROR(follow(command));
    }
    command.clear();
    command_begin = end;
    return {};
  };
  bool start_next = false;  // a keyword began the command: the next word starts it again
  for (std::size_t k = 0; k < words.size(); ++k) {
    ShellWord& w = words[k];
    w.source = static_cast<int>(source);
    if (w.command_start || start_next) {
      CS_RETURN_IF_ERROR(finish_command(k));
      start_next = false;
    }
    if (keyword(w, "if") || keyword(w, "then") || keyword(w, "elif") || keyword(w, "else") ||
        keyword(w, "fi"))
      start_next = true;
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
    start_next = false;
    if (!active()) continue;
    ShellWord expanded = w;
    CS_RETURN_IF_ERROR(reader.expand(expanded));
    if (const int line = unknown_line(); line && !expanded.unknown_if) expanded.unknown_if = line;
    for (const auto& f : ifs) add_defaults(expanded.defaults, f.defaults);  // chosen by defaults
    CS_RETURN_IF_ERROR(reader.assign(w, expanded));
    command.push_back(expanded);
    out.push_back(std::move(expanded));
  }
  return finish_command(words.size());
}

}  // namespace

Result<ShellScript> read_shell_script(std::string_view text, const std::string& where) {
  ShellScript script;
  script.sources.push_back(where);
  Reader reader(where);  // not sources.front(): the vector grows
  CS_RETURN_IF_ERROR(read_file(text, 0, 0, 0, reader, script));
  return script;
}

}  // namespace commscope
