// The words of a shell script or argument file as the shell splits them, for reading
// Megatron-LM's flags out of a launch script (`--megatron-args`, docs/predict.md): blanks
// separate words; `#` at the start of a word comments out the rest of the line; a backslash
// before a newline joins the lines and before any other character keeps it; single quotes keep
// everything up to the next one, double quotes everything but `\"`, `\\`, `\$` and `\``; an
// unquoted `(` or `)` (a bash array's) separates words. Variables (`$TP`, `${ARGS[@]}`) are not
// expanded: they stay in the word, for the caller to refuse where a value is needed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "commscope/util/result.h"

namespace commscope {

struct ShellWord {
  std::string text;
  int line = 0;  // 1-based line where the word starts
};

// At most kMaxShellWords words; an unclosed quote is an error naming the line it opened on.
inline constexpr std::size_t kMaxShellWords = 1 << 16;
Result<std::vector<ShellWord>> shell_words(std::string_view text, const std::string& where);

}  // namespace commscope
