// Reader of nccl-tests / rccl-tests text output (all_reduce_perf, all_gather_perf,
// reduce_scatter_perf, broadcast_perf, reduce_perf, alltoall_perf, sendrecv_perf): the header
// (`# nThread ... nGpus ...`, the `#  Rank  N [Group G] Pid P on HOST device ...` lines that give
// the ranks and, by their distinct hosts, the nodes), the column header, and the data rows
// `size count type [redop] [root] time algbw busbw #wrong [time algbw busbw #wrong]`.
// Several logs (collectives, node counts) may follow each other in one file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "commscope/calib/alpha_beta.h"
#include "commscope/calib/osu.h"
#include "commscope/util/result.h"

namespace commscope {

// One data row. Times in seconds, bandwidths in bytes/s as printed (nccl-tests prints GB/s, 1e9).
struct NcclTestsRow {
  int line = 0;      // 1-based line number in the input
  double bytes = 0;  // "size" (B)
  bool has_out_of_place = false, has_in_place = false;
  double oop_seconds = 0, oop_algbw = 0, oop_busbw = 0;
  double ip_seconds = 0, ip_algbw = 0, ip_busbw = 0;
  std::string type;  // the "type" column (float, bfloat16, ...); "" without one
};

struct NcclTestsLog {
  Collective collective = Collective::all_reduce;
  std::string program;  // "all_reduce_perf", ... or "" when the collective was inferred
  int ranks = 0;        // Rank lines (GPUs); nThread x nGpus when the log has none
  int nodes = 0;        // distinct hosts of the Rank lines; 1 when the log has none
  int first_line = 0;   // line of its `# nThread` header (or of its first row)
  std::vector<NcclTestsRow> rows;
  std::optional<double> avg_busbw;  // the `# Avg bus bandwidth` footer, bytes/s
  // What was left out and why (a `-d all` log keeps one datatype's rows), for the user
  std::vector<std::string> notes;
};

// Bounds on what one input may hold (docs/bench.md, "fit"): logs per file and rows per log.
inline constexpr std::size_t kMaxNcclTestsLogs = 1024;
inline constexpr std::size_t kMaxNcclTestsRows = 4096;

// Whether `text` looks like nccl-tests output (a `nThread ... nGpus` header and a column header
// with size, time, algbw and busbw), for `fit`'s format detection.
bool looks_like_nccl_tests(std::string_view text);

// Parses every log in `text`. `where` names the input in errors ("file.txt:42: ..."). The
// collective comes from the program's name on any line before the log's rows (the command
// line, `all_reduce_perf`, `rccl-tests/build/all_gather_perf`), else from `fallback`, else from
// the columns (redop/root) and busbw/algbw; when none decides, an error asks for --collective.
// Lines that are not rows are skipped; a row with missing or non-numeric fields is an error. A
// launcher's tag before each line (mpirun --tag-output, srun --label, -prepend-rank) is read past.
Result<std::vector<NcclTestsLog>> parse_nccl_tests(std::string_view text, const std::string& where,
                                                   std::optional<Collective> fallback = {});

// Reads a file (a regular file of at most 64 MiB) and parses it.
Result<std::vector<NcclTestsLog>> read_nccl_tests(const std::string& path,
                                                  std::optional<Collective> fallback = {});

// The logs as measured collectives (out-of-place times; in-place where a row has only those),
// one per log, group "intra-node" when the log spans one node and "inter-node" otherwise.
// Rows of size 0 are left out.
std::vector<MeasuredCollective> to_measured(const std::vector<NcclTestsLog>& logs);

// What `commscope fit` reads: commscope-bench --format json, nccl-tests/rccl-tests text, OSU
// Micro-Benchmarks text (calib/osu.h), or any of them, told apart by content (a JSON object,
// nccl-tests' header and columns, or OSU's header).
enum class MeasuredFormat : std::uint8_t { automatic, bench_json, nccl_tests, osu };
// "auto", "bench-json", "nccl-tests", "osu"; nullopt otherwise.
std::optional<MeasuredFormat> measured_format_from_name(std::string_view name);
// `collective` is for nccl-tests logs that do not name their program; `osu` the processes and
// nodes of OSU runs, which their output does not state.
Result<std::vector<MeasuredCollective>> read_measured(const std::string& path, MeasuredFormat f,
                                                      std::optional<Collective> collective = {},
                                                      const OsuRun& osu = {});

}  // namespace commscope
