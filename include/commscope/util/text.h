// Small text helpers the line-oriented readers share (nccl-tests and OSU logs).
#pragma once

#include <cctype>
#include <charconv>
#include <cmath>
#include <string_view>
#include <system_error>
#include <vector>

namespace commscope::util {

// The whitespace-separated words of s (views into it).
inline std::vector<std::string_view> split_words(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    std::size_t j = i;
    while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

// s as a finite number, the whole of it ("1e3" yes; "1e3x", "", "nan" no).
inline bool finite_number(std::string_view s, double& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && std::isfinite(out);
}

}  // namespace commscope::util
