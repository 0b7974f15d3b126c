// Writing an output file (`-o/--output` of every verb) so that it is either whole or absent,
// without replacing things that are not files.
//
// What the path names decides how it is written (docs/CONTRIBUTING.md, "Output files"):
//   - a regular file, or nothing yet: a temporary file beside it, flushed to disk, renamed over
//     it (a reader never sees half a file; an existing file keeps its permission bits);
//     missing parent folders are created first, like `mkdir -p`;
//   - a symbolic link: followed; its target is written as above when the target is a regular
//     file. A dangling link is refused (as `cp` refuses to write through one);
//   - a character device (/dev/null, a terminal, /dev/stdout on one) or a FIFO: written straight
//     into, never created, truncated or renamed. A FIFO without a reader is waited for at most
//     `kFifoReaderWaitSeconds`, then refused;
//   - /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N: written to that open descriptor of
//     this process (so `-o /dev/stdout >> log` appends, as the shell set it up);
//   - a directory, socket, block device or anything else: refused.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "commscope/util/result.h"

namespace commscope {

inline constexpr int kFifoReaderWaitSeconds = 30;

// Writes `content` to `path` by the rules above. Errors name the path: "<path>: <why>".
Status write_file_atomic(const std::string& path, std::string_view content);

// Several outputs of one command, all or none: every regular file is written whole beside its
// target first, then the devices and FIFOs, then the renames. Until the renames, a failure
// leaves every file as it was (the renames themselves are not undone: one failing after others
// is left as it is, which takes a folder changing under the command). `failed`: the index of
// the output the error is about.
struct OutputFile {
  std::string path;
  std::string_view content;
};
Status write_files_atomic(const std::vector<OutputFile>& files, std::size_t* failed = nullptr);

// On SIGINT, SIGTERM and SIGHUP (unless ignored), the temporary files being written are
// removed before the signal ends the process as it would have. main() calls it once.
void remove_temporary_files_on_signals();

// Says now whether write_file_atomic(path, ...) could succeed, changing nothing that stays:
// verbs call it before long work so that a bad -o fails in a second, not after it. Checks the
// kind of thing the path names, that a dangling link or a non-folder does not stand in the way
// of the parent folders, and that the nearest existing folder takes a new file: one is made
// there and removed at once (root passes access(), and /proc or /sys take no new files).
Status check_output_path(const std::string& path);

}  // namespace commscope
