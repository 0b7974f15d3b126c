// Opening input files safely: a path must be a regular file (a FIFO, device or socket would
// block a reader forever or never end), and how much memory a reader may take.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "commscope/util/result.h"

namespace commscope {

// OK when `path` is a regular file (symbolic links followed). Otherwise one message naming
// the path: "x: cannot open: No such file or directory", "x: is a directory, expected a file",
// "x: not a regular file (a FIFO, socket or device), expected a file".
Status check_regular_file(const std::string& path);
// The same, its message after the flag that named the file ("--hostfile: x: cannot open: ..."):
// a file a flag names is named with its flag (--deepspeed-config's was the path alone, found by
// probing, 2026-12-02).
Status check_flag_file(std::string_view flag, const std::string& path);

// The whole of a small text file: a regular file (check_regular_file) of at most `max_bytes`,
// else one message naming the path, its size and `what` ("x: 2000000 bytes; expected a
// torchtitan job file of at most 1 MiB").
Result<std::string> read_small_file(const std::string& path, std::uintmax_t max_bytes,
                                    std::string_view what);

// OK when no two of `paths` name one existing file (the same path, or two names of one file:
// a link, "./x"); else "b: expected each <what> once, got the file 'a' names again". A file
// read twice was counted twice (validate's MAPE over n = 10 for 5 rows).
Status check_distinct_files(const std::vector<std::string>& paths, std::string_view what);

// The input files this command read: read_small_file (and so every JSON, TOML, script and log
// reader), the trace and CSV readers note each file they open. An output must be none of them:
// the command line names only some of a command's inputs (a preset by name, a file a Megatron
// script sources, the second of a comma list), and `-oFILE` spelled the output unseen (found
// by probing, 2026-12-02: each overwrote its input with status 0). Kept by (device, inode);
// thread-safe. clear_inputs_read() starts a command (the Python module runs many in a process).
void note_input_read(const std::string& path);
void clear_inputs_read();
// Takes `path` off the inputs read: a verb whose output is meant to replace it (calibrate's
// refitted --system preset).
void forget_input_read(const std::string& path);
// The input read that `path` (an existing regular file) is another name of; empty when none.
std::string input_read_as(const std::string& path);

// Bytes of memory this process may still use: the smaller of /proc/meminfo's MemAvailable and
// the address-space limit (RLIMIT_AS) when one is set; 0 when neither is known.
std::uint64_t available_memory_bytes();

}  // namespace commscope
