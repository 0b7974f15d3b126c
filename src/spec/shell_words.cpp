// Shell word splitting for launch scripts (spec/shell_words.h).
#include "commscope/spec/shell_words.h"

#include <cctype>

#include <fmt/format.h>

namespace commscope {

Result<std::vector<ShellWord>> shell_words(std::string_view text, const std::string& where) {
  std::vector<ShellWord> out;
  std::string cur;
  bool in_word = false;
  int line = 1, start = 1;
  auto finish = [&]() -> Status {
    if (!in_word) return {};
    if (out.size() >= kMaxShellWords)
      return Error{
          fmt::format("{}:{}: expected at most {} words, got more", where, line, kMaxShellWords)};
    out.push_back({std::move(cur), start});
    cur.clear();
    in_word = false;
    return {};
  };
  auto begin = [&]() {
    if (!in_word) {
      in_word = true;
      start = line;
    }
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      CS_RETURN_IF_ERROR(finish());
      ++line;
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
        cur += text[++i];
      }
    } else if (c == '\'' || c == '"') {
      begin();
      const int opened = line;
      std::size_t j = i + 1;
      for (; j < text.size() && text[j] != c; ++j) {
        if (text[j] == '\n') ++line;
        if (c == '"' && text[j] == '\\' && j + 1 < text.size() &&
            (text[j + 1] == '"' || text[j + 1] == '\\' || text[j + 1] == '$' ||
             text[j + 1] == '`')) {
          cur += text[++j];
          continue;
        }
        cur += text[j];
      }
      if (j >= text.size())
        return Error{
            fmt::format("{}:{}: expected a closing {} for the quote opened here, got the "
                        "end of the file",
                        where, opened, c)};
      i = j;
    } else {
      begin();
      cur += c;
    }
  }
  CS_RETURN_IF_ERROR(finish());
  return out;
}

}  // namespace commscope
