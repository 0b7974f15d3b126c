// The words of a shell script or argument file as the shell splits them, for reading
// Megatron-LM's flags out of a launch script (`--megatron-args`, docs/predict.md).
//
// shell_words splits: blanks separate words; `#` at the start of a word comments out the rest of
// the line; a backslash before a newline joins the lines and before any other character keeps
// it; single quotes keep everything up to the next one, double quotes everything but `\"`, `\\`,
// `\$`, `\`` and a backslash before a newline (joined, as outside); a here-document's body
// (`<<EOF` ... `EOF`, `<<-`, quoted delimiters) is data and gives no words; an unquoted `(`, `)` or
// `;` separates words. Expansions (`$TP`, `${TP:-8}`,
// `$((A*B))`, `$(cmd)`, `` `cmd` ``) outside single quotes stay in the word as written, and the
// word says where they are.
//
// read_shell_script reads the words as bash would run a launch script from top to bottom,
// without running anything: it keeps the variables the script assigns (`TP=8`, `export X=1`,
// `X+=y`), expands `$X`, `${X}`, `${X:-default}` (`-`, `:=`, `=` too) and integer arithmetic
// `$((...))` from them, takes only the branch of an `if ... elif ... else ... fi` whose condition
// it can decide (`[[ A == B ]]`, `!=`, `=`, `-z`, `-n`, `-eq`..`-ge`, with `!`, `&&`, `||`), and
// keeps both branches, marked, where it cannot. What it cannot expand (a variable the script does
// not set, `$(cmd)`, `${ARGS[@]}`) stays as written, marked. Loops, functions and `case` are
// read straight through. `source FILE` and `. FILE` read the file's words there with the same
// variables (the path relative to the working directory, as bash opens it, else beside the
// script; at most 1 MiB a file, 8 deep, counted with the expansions); a path left as written or
// a file that cannot be read is named (ShellScript::unfollowed), and the reading goes on, as
// bash's does.
//
// It also keeps the files the script writes before it launches (Megatron-DeepSpeed's scripts
// write their ds_config.json so), where what bash would write is known without running
// anything: a here-document into a file (`cat <<EOT > $DS_CONFIG` ... `EOT`, `cat > f <<EOT`,
// `>>`), its body expanded as bash expands it unless the delimiter is quoted; and a pipeline of
// `sed` substitutions over a template (`sed "s/GBSIZE/${GBS}/" tmpl.json | sed "s/.../.../g"
// > ds_config.json`), the template read relative to the working directory as bash would, else
// to the script's. Any other command that writes a file is named (ShellScript::unread), so that
// a flag that names the file can say why it is not there.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "commscope/util/result.h"

namespace commscope {

struct ShellWord {
  std::string text;
  int line = 0;                // 1-based line where the word starts
  bool quoted = false;         // a quote or backslash in it (so never a keyword such as `if`)
  bool command_start = false;  // the first word of a line or after `;`
  int source = 0;              // read_shell_script: the file it is in (ShellScript::sources)
  // Where `text` holds an expansion as written: [begin, end) offsets, in order.
  std::vector<std::pair<std::size_t, std::size_t>> expansions;

  // Set by read_shell_script:
  bool unresolved = false;            // an expansion left as written
  bool assignment = false;            // `NAME=value` or `NAME+=value`, kept as a variable
  std::vector<std::string> defaults;  // variables whose default in the script (${X:-d}) it took
  int unknown_if = 0;  // the line of an `if` whose condition was not decided, in whose branch
                       // the word (or a variable it took) stands; 0 where none
};

// At most kMaxShellWords words; an unclosed quote or `$(` is an error naming the line it opened
// on.
inline constexpr std::size_t kMaxShellWords = 1 << 16;
Result<std::vector<ShellWord>> shell_words(std::string_view text, const std::string& where);

// The words bash would see, expanded (above). Expansions stay under kMaxShellExpansion
// characters in all (a script that doubles a variable in a loop of lines is an error, not an
// allocation without bound).
inline constexpr std::size_t kMaxShellExpansion = 1 << 22;

// A file the script writes (above), as bash would write it.
struct ScriptFile {
  std::string text;
  std::string where;                  // the file of that command: the script, or one it sources
  int line = 0;                       // the line of the command that writes it (the last one)
  std::string how;                    // "a here-document", "sed over tmpl.json"
  std::string unresolved;             // the first expansion left as written in it, if any
  int unknown_if = 0;                 // as ShellWord::unknown_if
  std::vector<std::string> defaults;  // as ShellWord::defaults
};

struct ShellScript {
  std::vector<ShellWord> words;
  // The script (first), then each file it sources (`source f`, `. f`), as ShellWord::source
  // indexes them; the ones it sources, "path (line N of script)"; those it could not follow,
  // "script:N: source ... (why)".
  std::vector<std::string> sources, sourced, unfollowed;
  // By path as the script names it, lexically normalised (`./tmp/a.json` is `tmp/a.json`).
  std::map<std::string, ScriptFile> files;
  // Files the script writes with a command commscope does not run: path -> "line N: why".
  std::map<std::string, std::string> unread;
};

// `where` is the script's path: it names the script in messages and places templates.
Result<ShellScript> read_shell_script(std::string_view text, const std::string& where);

// The key of ShellScript::files for a path as a flag names it.
std::string script_file_key(const std::string& path);

}  // namespace commscope
