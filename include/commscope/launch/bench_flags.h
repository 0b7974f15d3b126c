// The flags of commscope-bench (nccl-tests' spellings), defined once: the MPI program parses
// them, and `commscope bench` parses and checks the same definition in-process before it
// launches mpirun, so that a bad flag is one line at once instead of an error from inside the
// ranks after Open MPI's start-up. No MPI here: the launcher does not link it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "commscope/util/result.h"
#include "commscope/workload/op.h"

namespace commscope::launch {

// Documented limits (docs/bench.md).
inline constexpr int kMaxSizesPerSweep = 1024;          // sizes between -b and -e at -f
inline constexpr int kMaxIters = 1000000;               // -n and -w
inline constexpr std::uint64_t kMaxBytes = 1ull << 40;  // -e: 1 TiB, before the memory check
// Collectives of a sweep without --collectives: all_reduce, all_gather, reduce_scatter,
// broadcast, reduce, all_to_all, sendrecv.
inline constexpr int kBenchCollectives = 7;

// The flags as typed.
struct BenchFlags {
  std::string min_bytes = "8", max_bytes = "32M";  // -b, -e
  double factor = 2;                               // -f
  int warmup = 5, iters = 20;                      // -w, -n
  std::string dtype = "float", op = "sum";         // -d, -o
  int root = 0;                                    // -r
  int check = 1;                                   // -c
  std::vector<std::string> collectives;            // --collectives
  std::string format = "table";                    // --format
  std::string split;                               // --split
  int window = 64;                                 // --window
  bool p2p = false;                                // --p2p
  bool progress = false;                           // --progress
  int corrupt_rank = -1, kill_rank = -1;           // tests only (hidden)
  // --routing: all_to_all with uneven counts (all-to-allv), as a MoE dispatch routes tokens:
  // "zipf:S" (rank j receives a share proportional to 1/(j+1)^S) or "imbalance:F" (rank 0
  // receives F times the mean share, the others the rest evenly). Empty: even.
  std::string routing;
};

// The share of each rank's all-to-all buffer that goes to rank j under --routing (summing to
// 1; empty for an even split). The spec must have passed check_bench_flags.
std::vector<double> routing_weights(const std::string& spec, int ranks);

// Adds every commscope-bench flag to `app`, bound to `f`.
void add_bench_flags(CLI::App& app, BenchFlags& f);

// What the flags mean once checked.
struct BenchSweep {
  std::uint64_t min_bytes = 0, max_bytes = 0;
  int element_bytes = 4;                // of -d
  std::vector<Collective> collectives;  // empty: all
  int sizes = 0;                        // sizes in one collective's sweep
};

// The size after b, as nccl-tests steps: times the factor (from 0: 1 first, which a factor
// cannot leave), or plus -factor bytes (-f -16 from 0: 16, 32, 48, 64; it went 1, 17, ... and
// left the last size out, found by probing, 2026-11-30). The harness's sweep and the flag
// check's count of its sizes both step by it.
double next_bench_size(double b, double factor);

// Checks every flag: sizes (8, 64K, 1M, 1G; -b <= -e <= kMaxBytes), -f finite and above 1 (or
// at most -1: a step of that many bytes), at most kMaxSizesPerSweep sizes, -n 1..kMaxIters,
// -w 0..kMaxIters, the names of -d, -o, --format, --split and --collectives, -c 0|1,
// --window 1..1024, and -r in [0, ranks) when `ranks` > 0. Errors name the flag.
Result<BenchSweep> check_bench_flags(const BenchFlags& f, int ranks);

// "8", "64K", "128M", "1G" (binary multiples, as nccl-tests): false when not a size or when it
// overflows.
bool parse_bench_size(const std::string& s, std::uint64_t& out);

// Bytes of buffers one rank allocates for the sweep (send and receive of the largest size, the
// p2p window), and the check that `ranks_here` such ranks fit this machine's available memory
// (MemAvailable of /proc/meminfo). The error names -e.
std::uint64_t bench_bytes_per_rank(const BenchFlags& f, const BenchSweep& s, int ranks);
Status check_bench_memory(const BenchFlags& f, const BenchSweep& s, int ranks, int ranks_here);

}  // namespace commscope::launch
