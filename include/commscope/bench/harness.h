// The collective benchmark harness over MPI, in the manner of nccl-tests: one harness owns the
// size sweep, warm-up, timing, min/avg/max over ranks, the correctness check and the printing;
// each collective is a small descriptor (its counts, its expected result, its bus-bandwidth
// factor, the call).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "commscope/spec/vocabulary.h"

namespace commscope::bench {

enum class DataType { f32, f64, i32 };
enum class ReduceOp { sum, max, min };

struct Options {
  std::size_t min_bytes = 8, max_bytes = 32 << 20;  // -b, -e
  double factor = 2;                                // -f
  int warmup = 5, iters = 20;                       // -w, -n
  DataType dtype = DataType::f32;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  bool check = true;
  std::vector<Collective> collectives;  // empty: all
  int corrupt_rank = -1;                // tests: this rank corrupts one received value
  int kill_rank = -1;                   // tests: this rank dies after the first measurement
  std::string group = "world";          // the label of the rows (--split node: intra/inter-node)
  // all_to_all with uneven counts (all-to-allv): the share of each rank's buffer sent to rank
  // j (launch::routing_weights); empty: an even split, as nccl-tests' alltoall.
  std::vector<double> a2a_weights;
  // Called by every rank after each size, so that a table can be printed as the sweep goes.
  std::function<void(const struct Row&)> on_row;
};

// One measurement: nccl-tests' time is per iteration; bandwidths in bytes/s.
struct Measure {
  double time_s = 0;  // the slowest rank's time per iteration (what the collective costs)
  double time_min_s = 0, time_avg_s = 0, time_max_s = 0;  // over ranks
  double algbw = 0, busbw = 0;
  long wrong = 0;  // values that differ from the expected result; -1: not checked (-c 0)
};

struct Row {
  Collective collective = Collective::all_reduce;
  std::size_t bytes = 0, count = 0;
  DataType dtype = DataType::f32;
  ReduceOp op = ReduceOp::sum;
  int root = -1;  // -1 for collectives without a root
  int ranks = 1;
  std::string group = "world";  // world, or with --split node: intra-node / inter-node
  Measure out_of_place, in_place;
};

std::string_view to_string(DataType d);
std::string_view to_string(ReduceOp o);
int element_bytes(DataType d);

// Runs the sweep of every selected collective on `comm`; every rank gets the same rows.
std::vector<Row> run(const Options& o, MPI_Comm comm);

// Point-to-point between ranks 0 and 1, as the OSU micro-benchmarks measure it: latency is half
// the round trip of a ping-pong (osu_latency); bandwidth sends a window of messages in flight
// and waits for one acknowledgement (osu_bw).
struct P2PRow {
  std::size_t bytes = 0;
  double latency_s = 0;
  double bandwidth = 0;  // bytes/s
};
std::vector<P2PRow> run_p2p(const Options& o, MPI_Comm comm, int window = 64);
std::string render_osu(const std::vector<P2PRow>& rows);

// A row's collective as --collectives and nccl-tests name it: "sendrecv" for the send/receive
// pair (sendrecv_perf), which the rows carry as Collective::send.
std::string_view collective_name(Collective c);

// nccl-tests' table for one collective, with the "#wrong" and average bus bandwidth lines:
// the header, one line per row, the footer (render_nccl_tests is the three together).
std::string render_nccl_header(Collective c, int ranks, const std::string& group);
std::string render_nccl_row(const Row& r);
// The row's redop column as nccl-tests prints it: the operation for all-reduce, reduce and
// reduce-scatter, "none" for the collectives that reduce nothing.
std::string_view redop_name(const Row& r);
// The row's wrong values, in and out of place; a measure not checked (-c 0) counts none.
long wrong_values(const Row& r);
std::string render_nccl_footer(const std::vector<Row>& rows);
std::string render_nccl_tests(const std::vector<Row>& rows, Collective c);

}  // namespace commscope::bench
