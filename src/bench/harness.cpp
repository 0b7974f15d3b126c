// Collective descriptors and the harness. Inputs are small integers seeded by rank and index,
// exact in every data type, so the expected result of each element is known exactly.
#include "commscope/bench/harness.h"

#include <algorithm>
#include <cmath>
#include <csignal>

#include <fmt/format.h>

#include "commscope/comm/collectives.h"
#include "commscope/comm/mpi.h"
#include "commscope/comm/partition.h"
#include "commscope/launch/bench_flags.h"

namespace commscope::bench {

std::string_view to_string(DataType d) {
  switch (d) {
    case DataType::f32:
      return "float";
    case DataType::f64:
      return "double";
    case DataType::i32:
      return "int32";
  }
  return "?";
}
std::string_view to_string(ReduceOp o) {
  switch (o) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "?";
}
int element_bytes(DataType d) {
  return d == DataType::f64 ? 8 : 4;
}

namespace {

MPI_Datatype mpi_type(DataType d) {
  return d == DataType::f32 ? MPI_FLOAT : d == DataType::f64 ? MPI_DOUBLE : MPI_INT;
}
MPI_Op mpi_op(ReduceOp o) {
  return o == ReduceOp::sum ? MPI_SUM : o == ReduceOp::max ? MPI_MAX : MPI_MIN;
}

// The seeded input of a rank's element i: a small integer, exact in float, double and int32.
double seed(int rank, std::size_t i) {
  return static_cast<double>((rank * 37 + static_cast<long>(i % 1009) * 11) % 101);
}

double reduce_of(ReduceOp op, int ranks, std::size_t i) {
  double acc = seed(0, i);
  for (int r = 1; r < ranks; ++r) {
    double v = seed(r, i);
    acc = op == ReduceOp::sum ? acc + v : op == ReduceOp::max ? std::max(acc, v) : std::min(acc, v);
  }
  return acc;
}

// Typed buffer access through doubles (the values are exact in all three types).
struct Buffer {
  DataType type;
  std::vector<char> bytes;
  Buffer(DataType t, std::size_t n)
      : type(t), bytes(std::max<std::size_t>(n, 1) * element_bytes(t)) {}
  // Grows (never shrinks) to hold n elements: the sweep allocates its buffers once, for the
  // largest size, and reuses them (as nccl-tests does), so no size pays for fresh pages.
  void ensure(std::size_t n) {
    const std::size_t want = std::max<std::size_t>(n, 1) * element_bytes(type);
    if (bytes.size() < want) bytes.resize(want);
  }
  void* data() { return bytes.data(); }
  double get(std::size_t i) const {
    switch (type) {
      case DataType::f32:
        return reinterpret_cast<const float*>(bytes.data())[i];
      case DataType::f64:
        return reinterpret_cast<const double*>(bytes.data())[i];
      case DataType::i32:
        return reinterpret_cast<const std::int32_t*>(bytes.data())[i];
    }
    return 0;
  }
  void set(std::size_t i, double v) {
    switch (type) {
      case DataType::f32:
        reinterpret_cast<float*>(bytes.data())[i] = static_cast<float>(v);
        break;
      case DataType::f64:
        reinterpret_cast<double*>(bytes.data())[i] = v;
        break;
      case DataType::i32:
        reinterpret_cast<std::int32_t*>(bytes.data())[i] = static_cast<std::int32_t>(v);
        break;
    }
  }
};

// How a count splits over the ranks (comm/partition.h); even splits use the plain calls, the
// others the v-variants.
using Split = comm::Partition;
std::size_t block(const Split& s, int r) {
  return static_cast<std::size_t>(s.size(r));
}
std::size_t displ(const Split& s, int r) {
  return static_cast<std::size_t>(s.lo(r));
}

// One collective: how a size in bytes becomes counts, how buffers are filled, what the result
// must be, and the call. Sizes follow nccl-tests: the all-gather output, the reduce-scatter
// input, the all-to-all total, the buffer of the others.
struct Descriptor {
  Collective kind;
  bool rooted, reduces;
  // elements of rank `me`'s send and receive buffers for a total of `count` elements
  std::size_t send_count(const Split& s, int me) const {
    return kind == Collective::all_gather ? block(s, me) : static_cast<std::size_t>(s.total);
  }
  std::size_t recv_count(const Split& s, int me) const {
    switch (kind) {
      case Collective::reduce_scatter:
        return block(s, me);
      case Collective::all_to_all:  // block `me` from every rank
        return block(s, me) * static_cast<std::size_t>(s.n);
      default:
        return static_cast<std::size_t>(s.total);
    }
  }
};

const Descriptor kDescriptors[] = {
    {Collective::all_reduce, false, true},     {Collective::all_gather, false, false},
    {Collective::reduce_scatter, false, true}, {Collective::broadcast, true, false},
    {Collective::reduce, true, true},          {Collective::all_to_all, false, false},
    {Collective::send, false, false},  // send/receive with the ring neighbour
};

// The value element i of rank `me`'s result buffer must hold.
double expected(const Descriptor& d, const Options& o, int me, const Split& s, std::size_t i) {
  const int n = s.n;
  switch (d.kind) {
    case Collective::all_reduce:
    case Collective::reduce:
      return reduce_of(o.op, n, i);
    case Collective::reduce_scatter:
      return reduce_of(o.op, n, displ(s, me) + i);
    case Collective::all_gather: {
      const int from = s.owner(static_cast<std::int64_t>(i));
      return seed(from, i - displ(s, from));
    }
    case Collective::broadcast:
      return seed(o.root, i);
    case Collective::all_to_all: {
      // block j of my result comes from rank j: its elements [displ(me), displ(me)+block(me))
      const std::size_t per = block(s, me);
      const int from = static_cast<int>(i / per);
      return seed(from, displ(s, me) + i % per);
    }
    case Collective::send:
      return seed((me - 1 + n) % n, i);
    default:
      return 0;
  }
}

// Counts and displacements for the v-variants, built once per size.
struct VArgs {
  std::vector<int> counts, displs, rcounts, rdispls;
  bool weighted = false;  // all-to-allv from a routing distribution (Options::a2a_weights)
};
VArgs v_args(const Descriptor& d, const Split& s, int me, const std::vector<double>& weights) {
  VArgs v;
  if (d.kind == Collective::all_to_all && static_cast<int>(weights.size()) == s.n) {
    // Every rank sends the share w_j of its buffer to rank j (floors, the remainder to rank 0),
    // so rank j receives w_j of each rank's buffer: the busiest receiver sets the time.
    v.weighted = true;
    std::int64_t given = 0;
    for (int j = 0; j < s.n; ++j) {
      const auto c = static_cast<std::int64_t>(
          std::floor(static_cast<double>(s.total) * weights[static_cast<std::size_t>(j)]));
      v.counts.push_back(static_cast<int>(c));
      given += c;
    }
    v.counts[0] += static_cast<int>(s.total - given);
    for (int j = 0, at = 0; j < s.n; at += v.counts[static_cast<std::size_t>(j)], ++j)
      v.displs.push_back(at);
    const int mine = v.counts[static_cast<std::size_t>(me)];
    for (int r = 0; r < s.n; ++r) {
      v.rcounts.push_back(mine);
      v.rdispls.push_back(mine * r);
    }
    return v;
  }
  Split::Pieces p = s.pieces(0, s.total);
  v.counts = std::move(p.counts);
  v.displs = std::move(p.displs);
  if (d.kind == Collective::all_to_all)
    for (int r = 0; r < s.n; ++r) {
      v.rcounts.push_back(static_cast<int>(block(s, me)));
      v.rdispls.push_back(static_cast<int>(block(s, me)) * r);
    }
  return v;
}

void call(const Descriptor& d, const Options& o, void* send, void* recv, const Split& s,
          const VArgs& v, int me, MPI_Comm comm) {
  const MPI_Datatype t = mpi_type(o.dtype);
  const MPI_Op op = mpi_op(o.op);
  const int c = static_cast<int>(s.total), n = s.n;
  switch (d.kind) {
    case Collective::all_reduce:
      comm::all_reduce(send, recv, c, t, op, comm);
      break;
    case Collective::all_gather:
      comm::all_gather(send, recv, v.counts, v.displs, t, comm);
      break;
    case Collective::reduce_scatter:
      comm::reduce_scatter(send, recv, v.counts, t, op, comm);
      break;
    case Collective::broadcast:
      CS_MPI_CHECK(MPI_Bcast(recv, c, t, o.root, comm));
      break;
    case Collective::reduce:
      CS_MPI_CHECK(MPI_Reduce(send, recv, c, t, op, o.root, comm));
      break;
    case Collective::all_to_all:
      if (s.even() && !v.weighted)
        CS_MPI_CHECK(MPI_Alltoall(send, c / n, t, recv, c / n, t, comm));
      else
        CS_MPI_CHECK(MPI_Alltoallv(send, v.counts.data(), v.displs.data(), t, recv,
                                   v.rcounts.data(), v.rdispls.data(), t, comm));
      break;
    case Collective::send:
      CS_MPI_CHECK(MPI_Sendrecv(send, c, t, (me + 1) % n, 0, recv, c, t, (me - 1 + n) % n, 0, comm,
                                MPI_STATUS_IGNORE));
      break;
    default:
      break;
  }
}

Measure measure(const Descriptor& d, const Options& o, std::size_t count, bool in_place,
                Buffer& send, Buffer& recv, MPI_Comm comm) {
  int me = 0, n = 1;
  CS_MPI_CHECK(MPI_Comm_rank(comm, &me));
  CS_MPI_CHECK(MPI_Comm_size(comm, &n));
  // In-place exists for the collectives MPI defines it for; send/receive and all-to-all run
  // out-of-place both times (as nccl-tests reports them).
  const bool ip = in_place && d.kind != Collective::send && d.kind != Collective::all_to_all;
  const Split split{static_cast<std::int64_t>(count), n};
  const VArgs v = v_args(d, split, me, o.a2a_weights);
  const std::size_t sc = d.send_count(split, me),
                    rc = v.weighted ? static_cast<std::size_t>(v.rcounts[0]) * n
                                    : d.recv_count(split, me);
  // All-to-allv: block r of my result is rank r's elements [displ(me), displ(me) + mine).
  auto want = [&](std::size_t i) {
    if (!v.weighted) return expected(d, o, me, split, i);
    const auto per = static_cast<std::size_t>(v.rcounts[0]);
    return seed(static_cast<int>(i / per),
                static_cast<std::size_t>(v.displs[static_cast<std::size_t>(me)]) + i % per);
  };
  send.ensure(d.kind == Collective::broadcast ? 0 : (ip ? 0 : sc));
  recv.ensure(d.kind == Collective::reduce_scatter && ip ? count : rc);
  auto fill = [&] {
    Buffer& in = ip ? recv : send;
    if (d.kind == Collective::broadcast) {
      for (std::size_t i = 0; i < rc; ++i) recv.set(i, me == o.root ? seed(o.root, i) : -1);
      return;
    }
    if (ip && d.kind == Collective::all_gather) {  // my block in place in the output
      for (std::size_t i = 0; i < count; ++i) recv.set(i, -1);
      for (std::size_t i = 0; i < sc; ++i) recv.set(displ(split, me) + i, seed(me, i));
      return;
    }
    const std::size_t n_in = ip && d.kind == Collective::reduce_scatter ? count : sc;
    for (std::size_t i = 0; i < n_in; ++i) in.set(i, seed(me, i));
  };
  void* sendp = d.kind == Collective::broadcast ? nullptr : ip ? MPI_IN_PLACE : send.data();
  if (ip && d.kind == Collective::reduce && me != o.root)
    sendp = recv.data();  // MPI: IN_PLACE at the root only
  fill();
  for (int w = 0; w < o.warmup; ++w) call(d, o, sendp, recv.data(), split, v, me, comm);
  long wrong = 0;
  if (o.check) {
    fill();
    call(d, o, sendp, recv.data(), split, v, me, comm);
    if (me == o.corrupt_rank && rc > 0) recv.set(rc / 2, recv.get(rc / 2) + 1);
    const bool has_result = !(d.kind == Collective::reduce && me != o.root);
    if (has_result)
      for (std::size_t i = 0; i < rc; ++i)
        if (recv.get(i) != want(i)) ++wrong;
  }
  CS_MPI_CHECK(MPI_Barrier(comm));
  const double t0 = MPI_Wtime();
  for (int it = 0; it < o.iters; ++it) call(d, o, sendp, recv.data(), split, v, me, comm);
  const double mine = (MPI_Wtime() - t0) / std::max(o.iters, 1);
  if (me == o.kill_rank) std::raise(SIGKILL);  // tests: a rank dies in the middle of the job
  Measure m;
  double sum = 0;
  CS_MPI_CHECK(MPI_Allreduce(&mine, &m.time_max_s, 1, MPI_DOUBLE, MPI_MAX, comm));
  CS_MPI_CHECK(MPI_Allreduce(&mine, &m.time_min_s, 1, MPI_DOUBLE, MPI_MIN, comm));
  CS_MPI_CHECK(MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, comm));
  CS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_SUM, comm));
  m.time_s = m.time_max_s;
  m.time_avg_s = sum / n;
  m.wrong = o.check ? wrong : -1;
  const double bytes = static_cast<double>(count) * element_bytes(o.dtype);
  m.algbw = m.time_s > 0 ? bytes / m.time_s : 0;
  m.busbw = m.algbw * bus_factor(d.kind, n);
  return m;
}

}  // namespace

std::vector<Row> run(const Options& o, MPI_Comm comm) {
  int n = 1;
  CS_MPI_CHECK(MPI_Comm_size(comm, &n));
  std::vector<Row> rows;
  const std::size_t elem = static_cast<std::size_t>(element_bytes(o.dtype));
  // The largest buffers the sweep needs: the count plus one element per rank (uneven splits).
  const std::size_t most = o.max_bytes / elem + static_cast<std::size_t>(n);
  // All-to-allv (Options::a2a_weights): the busiest receiver gets n x its share of the count.
  const double share =
      o.a2a_weights.empty()
          ? 1.0
          : std::max(1.0, *std::max_element(o.a2a_weights.begin(), o.a2a_weights.end()) * n);
  Buffer send(o.dtype, most),
      recv(o.dtype, static_cast<std::size_t>(std::ceil(static_cast<double>(most) * share)));
  // zero-filled: every page touched
  for (const Descriptor& d : kDescriptors) {
    if (!o.collectives.empty() &&
        std::find(o.collectives.begin(), o.collectives.end(), d.kind) == o.collectives.end())
      continue;
    std::size_t last = SIZE_MAX;
    for (double b = static_cast<double>(o.min_bytes);
         b <= static_cast<double>(o.max_bytes) * 1.0000001;
         b = launch::next_bench_size(b, o.factor)) {
      std::size_t count = static_cast<std::size_t>(b) / elem;
      if (count == last) continue;
      last = count;
      Row r;
      r.collective = d.kind, r.count = count, r.bytes = count * elem, r.dtype = o.dtype,
      r.op = o.op;
      r.root = d.rooted ? o.root : -1;
      r.ranks = n;
      r.out_of_place = measure(d, o, count, false, send, recv, comm);
      r.in_place = measure(d, o, count, true, send, recv, comm);
      r.group = o.group;
      rows.push_back(r);
      if (o.on_row) o.on_row(r);
      if (o.min_bytes == o.max_bytes) break;
    }
  }
  return rows;
}

std::vector<P2PRow> run_p2p(const Options& o, MPI_Comm comm, int window) {
  int me = 0, n = 1;
  CS_MPI_CHECK(MPI_Comm_rank(comm, &me));
  CS_MPI_CHECK(MPI_Comm_size(comm, &n));
  std::vector<P2PRow> rows;
  if (n < 2) return rows;
  // Each message of the window has its own buffer (receives into one buffer would overlap);
  // large messages use a smaller window so that the window stays within 256 MiB.
  constexpr std::size_t kWindowBytes = std::size_t{256} << 20;
  std::vector<char> buf(
      std::min(std::max<std::size_t>(o.max_bytes, 1) * static_cast<std::size_t>(window),
               std::max<std::size_t>(kWindowBytes, o.max_bytes)));
  char ack = 0;
  for (double b = static_cast<double>(o.min_bytes);
       b <= static_cast<double>(o.max_bytes) * 1.0000001;
       b = launch::next_bench_size(b, o.factor)) {
    const auto bytes = static_cast<std::size_t>(b);
    const int c = static_cast<int>(bytes);
    P2PRow r;
    r.bytes = bytes;
    // latency: ping-pong between ranks 0 and 1
    for (int pass = 0; pass < 2; ++pass) {  // warm-up pass, then the timed one
      const int iters = pass == 0 ? o.warmup : o.iters;
      CS_MPI_CHECK(MPI_Barrier(comm));
      const double t0 = MPI_Wtime();
      for (int i = 0; i < iters && me < 2; ++i) {
        if (me == 0) {
          CS_MPI_CHECK(MPI_Send(buf.data(), c, MPI_CHAR, 1, 1, comm));
          CS_MPI_CHECK(MPI_Recv(buf.data(), c, MPI_CHAR, 1, 1, comm, MPI_STATUS_IGNORE));
        } else {
          CS_MPI_CHECK(MPI_Recv(buf.data(), c, MPI_CHAR, 0, 1, comm, MPI_STATUS_IGNORE));
          CS_MPI_CHECK(MPI_Send(buf.data(), c, MPI_CHAR, 0, 1, comm));
        }
      }
      if (pass == 1) r.latency_s = (MPI_Wtime() - t0) / (2.0 * std::max(iters, 1));
    }
    // bandwidth: a window of messages in flight, one acknowledgement
    const int win = static_cast<int>(std::clamp<std::size_t>(
        buf.size() / std::max<std::size_t>(bytes, 1), 1, static_cast<std::size_t>(window)));
    std::vector<MPI_Request> req(static_cast<std::size_t>(win));
    for (int pass = 0; pass < 2; ++pass) {
      const int iters = pass == 0 ? o.warmup : o.iters;
      CS_MPI_CHECK(MPI_Barrier(comm));
      const double t0 = MPI_Wtime();
      for (int i = 0; i < iters && me < 2; ++i) {
        for (int w = 0; w < win; ++w) {
          char* p = buf.data() + static_cast<std::size_t>(w) * std::max<std::size_t>(bytes, 1);
          if (me == 0)
            CS_MPI_CHECK(MPI_Isend(p, c, MPI_CHAR, 1, 2, comm, &req[static_cast<std::size_t>(w)]));
          else
            CS_MPI_CHECK(MPI_Irecv(p, c, MPI_CHAR, 0, 2, comm, &req[static_cast<std::size_t>(w)]));
        }
        CS_MPI_CHECK(MPI_Waitall(win, req.data(), MPI_STATUSES_IGNORE));
        if (me == 0)
          CS_MPI_CHECK(MPI_Recv(&ack, 1, MPI_CHAR, 1, 3, comm, MPI_STATUS_IGNORE));
        else
          CS_MPI_CHECK(MPI_Send(&ack, 1, MPI_CHAR, 0, 3, comm));
      }
      if (pass == 1) {
        const double t = MPI_Wtime() - t0;
        r.bandwidth = t > 0 ? static_cast<double>(bytes) * win * std::max(iters, 1) / t : 0;
      }
    }
    CS_MPI_CHECK(MPI_Bcast(&r.latency_s, 1, MPI_DOUBLE, 0, comm));
    CS_MPI_CHECK(MPI_Bcast(&r.bandwidth, 1, MPI_DOUBLE, 0, comm));
    rows.push_back(r);
    if (o.min_bytes == o.max_bytes) break;
  }
  return rows;
}

std::string render_osu(const std::vector<P2PRow>& rows) {
  std::string out =
      "# commscope point-to-point (ranks 0 and 1; latency as osu_latency, bandwidth as osu_bw)\n";
  out += "# Size          Latency (us)     Bandwidth (MB/s)\n";
  for (const auto& r : rows)
    out += fmt::format("{:<14}{:>14.2f}{:>21.2f}\n", r.bytes, r.latency_s * 1e6, r.bandwidth / 1e6);
  return out;
}

std::string render_nccl_header(Collective c, int ranks, const std::string& group) {
  std::string out = fmt::format("# {} over {} ranks ({})\n", collective_name(c), ranks, group);
  out +=
      "#                                                              out-of-place                 "
      "      in-place\n";
  out +=
      "#       size         count      type   redop    root     time   algbw   busbw #wrong     "
      "time   algbw   busbw #wrong\n";
  out +=
      "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            "
      "(us)  (GB/s)  (GB/s)\n";
  return out;
}

std::string_view redop_name(const Row& r) {
  const Collective c = r.collective;
  const bool reduces =
      c == Collective::all_reduce || c == Collective::reduce || c == Collective::reduce_scatter;
  return reduces ? to_string(r.op) : "none";
}

std::string_view collective_name(Collective c) {
  return c == Collective::send ? "sendrecv" : to_string(c);
}

long wrong_values(const Row& r) {
  return std::max(r.out_of_place.wrong, 0L) + std::max(r.in_place.wrong, 0L);
}

std::string render_nccl_row(const Row& r) {
  // nccl-tests prints N/A in #wrong when the results are not checked (-c 0).
  auto wrong = [](const Measure& m) {
    return m.wrong < 0 ? std::string("N/A") : fmt::to_string(m.wrong);
  };
  return fmt::format(
      "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7.2f}  {:>6.2f}  {:>6.2f}  {:>5}  {:>7.2f}  "
      "{:>6.2f}  {:>6.2f}  {:>5}\n",
      r.bytes, r.count, to_string(r.dtype), redop_name(r), r.root, r.out_of_place.time_s * 1e6,
      r.out_of_place.algbw / 1e9, r.out_of_place.busbw / 1e9, wrong(r.out_of_place),
      r.in_place.time_s * 1e6, r.in_place.algbw / 1e9, r.in_place.busbw / 1e9, wrong(r.in_place));
}

std::string render_nccl_footer(const std::vector<Row>& rows) {
  double busbw_sum = 0;
  long wrong = 0;
  int n = 0;
  for (const auto& r : rows) {
    busbw_sum += r.out_of_place.busbw + r.in_place.busbw;
    wrong += wrong_values(r);
    n += 2;
  }
  std::string out = fmt::format("# Out of bounds values : {} {}\n", wrong, wrong ? "FAILED" : "OK");
  out += fmt::format("# Avg bus bandwidth    : {:.4f} \n#\n", n ? busbw_sum / n / 1e9 : 0.0);
  return out;
}

std::string render_nccl_tests(const std::vector<Row>& rows, Collective c) {
  std::vector<Row> mine;
  for (const auto& r : rows)
    if (r.collective == c) mine.push_back(r);
  std::string out = render_nccl_header(c, mine.empty() ? 0 : mine.front().ranks,
                                       mine.empty() ? "" : mine.front().group);
  for (const auto& r : mine) out += render_nccl_row(r);
  return out + render_nccl_footer(mine);
}

}  // namespace commscope::bench
