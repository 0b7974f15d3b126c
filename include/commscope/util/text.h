// Small text helpers the readers share (nccl-tests and OSU logs, traces, the command line).
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

// Offset of the first byte of s that breaks UTF-8 (RFC 3629: no overlong two-byte forms, nothing
// above U+10FFFF), or s.size() when it is all UTF-8.
inline std::size_t first_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    std::size_t len = c < 0x80         ? 1
                      : (c >> 5) == 6  ? 2
                      : (c >> 4) == 14 ? 3
                      : (c >> 3) == 30 ? 4
                                       : 0;
    if (len == 0 || i + len > n || (len == 2 && c < 0xC2) || (len == 4 && c > 0xF4)) return i;
    for (std::size_t k = 1; k < len; ++k)
      if ((p[i + k] & 0xC0) != 0x80) return i;
    i += len;
  }
  return n;
}

}  // namespace commscope::util
