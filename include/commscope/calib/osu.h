// Reader of OSU Micro-Benchmarks (OMB) text output: the blocking collectives (osu_allreduce,
// osu_allgather, osu_reduce_scatter, osu_reduce_scatter_block, osu_alltoall, osu_bcast,
// osu_reduce, and their persistent forms), osu_latency, osu_bw, osu_bibw and osu_mbw_mr, as MPI,
// MPI-CUDA/ROCM or the xCCL (NCCL, RCCL, ...) variants print them: a `# OSU <family> <name> Test
// [vX.Y]` header, an optional `# Datatype: ...` line (osu_mbw_mr: its `# [ pairs: N ] ...`
// line), a column header (`# Size  Avg Latency(us) ...`, `# Size  Latency (us)` before OMB 7,
// `# Size  Bandwidth (MB/s)`, osu_mbw_mr's `# Size  MB/s  Messages/s`) and rows `size value
// [min max iterations] [Pass|Fail]`. Several logs may follow each other in one file; the other
// benchmarks of a suite run (gather, barrier, non-blocking, one-sided, ...) are skipped with a
// note.
//
// OMB prints neither the process count nor the nodes: the caller gives them (`fit --ranks`,
// `--nodes`); the point-to-point tests always run 2 processes.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "commscope/calib/alpha_beta.h"
#include "commscope/util/result.h"

namespace commscope {

struct OsuRow {
  int line = 0;      // 1-based line number in the input
  double bytes = 0;  // the "Size" column: OMB's message size (B)
  double value = 0;  // average latency (us) or bandwidth (MB/s, 1e6 B/s), as printed
};

struct OsuLog {
  std::string benchmark;  // the header's name, "OSU MPI Allreduce Latency Test v7.4"
  Collective collective = Collective::all_reduce;
  bool bandwidth = false;  // rows are MB/s (osu_bw, osu_bibw, osu_mbw_mr), not microseconds
  // Messages in flight the MB/s count at once: 2 for osu_bibw (both directions of the pair),
  // osu_mbw_mr's pairs (one direction each); 1 otherwise.
  int streams = 1;
  int first_line = 0;    // line of its header
  std::string datatype;  // "MPI_CHAR", from `# Datatype:`; "" without one
  std::vector<OsuRow> rows;
  std::size_t fields = 0;  // columns of each row (2; 5 with -f; one more with -c)
};

// Whether `text` holds an OMB header (`# OSU ... Test`), for `fit`'s format detection.
bool looks_like_osu(std::string_view text);

// Parses every log in `text` that commscope can fit; `notes` receives the benchmarks skipped.
// `where` names the input in errors ("file.txt:42: ..."). A row with a missing or non-numeric
// value, or a log without rows, is an error; so is a text with no log commscope fits.
Result<std::vector<OsuLog>> parse_osu(std::string_view text, const std::string& where,
                                      std::vector<std::string>* notes = nullptr);

// The processes and nodes of the runs, which OMB does not print.
struct OsuRun {
  int ranks = 0;  // processes of the collective runs (mpirun -np); 0: not given
  int nodes = 0;  // nodes they spanned; 0: not known
};

// The logs as measured collectives, one per log, in nccl-tests' sizes so that the fit and the
// bus bandwidth mean what they do for nccl-tests logs: osu_allgather's and osu_alltoall's size
// is one rank's block (the MPI count), nccl-tests' the whole buffer, so it is multiplied by the
// ranks; the other collectives' sizes are the same. osu_latency is one-way (half the round trip)
// and osu_bw's time a message's share of the window (size / bandwidth), both `send` over 2
// ranks; osu_bibw's MB/s count both directions at once, so a message's time is size / (MB/s /
// 2): one direction's while the other runs, as a ring's sends and receives run. osu_mbw_mr is
// read with one pair (as osu_bw); with more, its pairs share the links and its MB/s is theirs
// together, not one pair's, and parse_osu skips it with a note. The group is intra-node on 1 node,
// inter-node on more, world when the nodes are not known. Rows of size 0 are left out. An error
// when collective logs come without `run.ranks`.
Result<std::vector<MeasuredCollective>> osu_to_measured(const std::vector<OsuLog>& logs,
                                                        const OsuRun& run,
                                                        const std::string& where);

}  // namespace commscope
