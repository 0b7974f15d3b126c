// commscope-bench: the MPI program behind `commscope bench`. Run it under mpirun, mpiexec or
// srun (or let `commscope bench --ranks N` launch it). Flags follow nccl-tests.
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commscope/bench/harness.h"
#include "commscope/comm/flags.h"
#include "commscope/comm/mpi.h"

namespace {

// "8", "64K", "128M", "1G" -> bytes (binary multiples, as nccl-tests).
bool parse_size(const std::string& s, std::size_t& out) {
  if (s.empty()) return false;
  std::size_t mult = 1, len = s.size();
  switch (s.back()) {
    case 'K':
    case 'k':
      mult = 1ull << 10, --len;
      break;
    case 'M':
    case 'm':
      mult = 1ull << 20, --len;
      break;
    case 'G':
    case 'g':
      mult = 1ull << 30, --len;
      break;
    default:
      break;
  }
  try {
    std::size_t used = 0;
    const unsigned long long v = std::stoull(s.substr(0, len), &used);
    if (used != len) return false;
    out = v * mult;
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace commscope;
  comm::Session mpi(&argc, &argv);
  CLI::App app{
      "commscope-bench: collective benchmarks over MPI, printed as nccl-tests prints them"};
  std::string b = "8", e = "32M", dtype = "float", op = "sum", format = "table";
  std::vector<std::string> names;
  bench::Options o;
  app.add_option("-b,--minbytes", b, "smallest size (8, 64K, 1M) [8]");
  app.add_option("-e,--maxbytes", e, "largest size [32M]");
  app.add_option("-f,--stepfactor", o.factor, "size multiplier between steps [2]");
  app.add_option("-w,--warmup_iters", o.warmup, "warm-up iterations [5]");
  app.add_option("-n,--iters", o.iters, "timed iterations [20]");
  app.add_option("-d,--datatype", dtype, "float|double|int32 [float]");
  app.add_option("-o,--op", op, "sum|max|min [sum]");
  app.add_option("-r,--root", o.root, "root of broadcast and reduce [0]");
  app.add_option("-c,--check", o.check, "check results (1) or not (0) [1]");
  app.add_option("--collectives", names,
                 "all_reduce,all_gather,reduce_scatter,broadcast,reduce,all_to_all,sendrecv [all]")
      ->delimiter(',');
  app.add_option("--format", format, "table|json|csv [table]");
  bool p2p = false;
  std::string split;
  app.add_option("--split", split,
                 "node: run each collective inside each node and across nodes separately");
  int window = 64;
  app.add_option("--window", window,
                 "--p2p: messages in flight in the bandwidth test, as osu_bw -W [64]")
      ->check(CLI::Range(1, 1024));
  app.add_flag("--p2p", p2p,
               "point-to-point latency and bandwidth between ranks 0 and 1 (osu_latency, osu_bw)");
  app.add_option("--corrupt-rank", o.corrupt_rank, "(tests) this rank corrupts one received value")
      ->group("");
  int kill_rank = -1;
  app.add_option("--kill-rank", kill_rank,
                 "(tests) this rank kills itself once the sweep has started")
      ->group("");
  if (auto stop = comm::parse_flags(app, argc, argv, mpi)) return *stop;
  if (!parse_size(b, o.min_bytes))
    return mpi.fail(fmt::format("-b: expected a size such as 8, 64K or 1M, got '{}'", b));
  if (!parse_size(e, o.max_bytes))
    return mpi.fail(fmt::format("-e: expected a size such as 8, 64K or 1M, got '{}'", e));
  if (o.max_bytes < o.min_bytes)
    return mpi.fail(fmt::format("-e: expected at least -b ({}), got {}", o.min_bytes, o.max_bytes));
  if (o.factor <= 1 && o.factor > -1)
    return mpi.fail(fmt::format("-f: expected a factor above 1, got {}", o.factor));
  if (o.iters < 1)
    return mpi.fail(fmt::format("-n: expected at least 1 iteration, got {}", o.iters));
  if (o.root < 0 || o.root >= mpi.size())
    return mpi.fail(fmt::format("-r: expected a root in [0, {}), got {}", mpi.size(), o.root));
  if (dtype == "float")
    o.dtype = bench::DataType::f32;
  else if (dtype == "double")
    o.dtype = bench::DataType::f64;
  else if (dtype == "int32" || dtype == "int")
    o.dtype = bench::DataType::i32;
  else
    return mpi.fail(fmt::format("-d: expected float, double or int32, got '{}'", dtype));
  if (op == "sum")
    o.op = bench::ReduceOp::sum;
  else if (op == "max")
    o.op = bench::ReduceOp::max;
  else if (op == "min")
    o.op = bench::ReduceOp::min;
  else
    return mpi.fail(fmt::format("-o: expected sum, max or min, got '{}'", op));
  for (const auto& n : names) {
    Collective c;
    if (!collective_from_name(n, c))
      return mpi.fail(fmt::format("--collectives: unknown collective '{}'", n));
    o.collectives.push_back(c);
  }
  if (format != "table" && format != "json" && format != "csv")
    return mpi.fail(fmt::format("--format: expected table, json or csv, got '{}'", format));

  if (p2p) {
    if (mpi.size() < 2) return mpi.fail("--p2p: expected at least 2 ranks, got 1");
    auto p = bench::run_p2p(o, MPI_COMM_WORLD, window);
    if (mpi.rank() == 0) {
      if (format == "table") {
        std::fputs(bench::render_osu(p).c_str(), stdout);
      } else {
        nlohmann::json j = nlohmann::json::array();
        std::string csv = "size_bytes,latency_us,bandwidth_MBps\n";
        for (const auto& r : p) {
          j.push_back({{"size_bytes", r.bytes},
                       {"latency_us", r.latency_s * 1e6},
                       {"bandwidth_MBps", r.bandwidth / 1e6}});
          csv += fmt::format("{},{:.3f},{:.3f}\n", r.bytes, r.latency_s * 1e6, r.bandwidth / 1e6);
        }
        std::fputs(
            format == "json" ? (nlohmann::json{{"p2p", j}}.dump(2) + "\n").c_str() : csv.c_str(),
            stdout);
      }
    }
    return 0;
  }
  o.kill_rank = kill_rank;
  // The table is printed as the sweep goes (nccl-tests does the same): a block per group and
  // collective, each row as soon as it is measured.
  std::vector<bench::Row> block;
  auto end_block = [&] {
    if (!block.empty()) std::fputs(bench::render_nccl_footer(block).c_str(), stdout);
    block.clear();
  };
  if (format == "table" && mpi.rank() == 0)
    o.on_row = [&](const bench::Row& r) {
      if (block.empty() || block.back().collective != r.collective ||
          block.back().group != r.group) {
        end_block();
        std::fputs(bench::render_nccl_header(r.collective, r.ranks, r.group).c_str(), stdout);
      }
      block.push_back(r);
      std::fputs(bench::render_nccl_row(r).c_str(), stdout);
      std::fflush(stdout);
    };
  if (!split.empty() && split != "node")
    return mpi.fail(fmt::format("--split: expected node, got '{}'", split));
  std::vector<bench::Row> rows;
  if (split == "node") {
    // Inside the node: the ranks that share memory. Across nodes: the ranks with the same
    // local rank, one per node, all such groups running at once (as data-parallel groups do).
    MPI_Comm node = MPI_COMM_NULL, cross = MPI_COMM_NULL;
    CS_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, mpi.rank(),
                                     MPI_INFO_NULL, &node));
    int local = 0, per_node = 1, nodes = 1;
    CS_MPI_CHECK(MPI_Comm_rank(node, &local));
    CS_MPI_CHECK(MPI_Comm_size(node, &per_node));
    CS_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, local, mpi.rank(), &cross));
    CS_MPI_CHECK(MPI_Comm_size(cross, &nodes));
    bench::Options local_options = o;
    local_options.root = 0;
    for (auto [comm, name] : {std::pair{node, "intra-node"}, std::pair{cross, "inter-node"}}) {
      int size = 1;
      CS_MPI_CHECK(MPI_Comm_size(comm, &size));
      local_options.group = name;
      std::vector<bench::Row> part;
      // rank 0 of the world prints: it is rank 0 of its node and of its cross group
      if (size > 1) part = bench::run(local_options, comm);
      rows.insert(rows.end(), part.begin(), part.end());
    }
    CS_MPI_CHECK(MPI_Comm_free(&node));
    CS_MPI_CHECK(MPI_Comm_free(&cross));
    if (mpi.rank() == 0 && rows.empty())
      std::fprintf(
          stderr,
          "commscope: --split node: every group has a single rank (%d ranks per node, %d nodes)\n",
          per_node, nodes);
  } else {
    rows = bench::run(o, MPI_COMM_WORLD);
  }
  long wrong = 0;
  for (const auto& r : rows) wrong += r.out_of_place.wrong + r.in_place.wrong;
  CS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD));
  if (mpi.rank() == 0) {
    if (format == "table") {
      end_block();
    } else {
      nlohmann::json j = nlohmann::json::array();
      std::string csv =
          "collective,ranks,size_bytes,count,type,redop,root,oop_time_us,oop_algbw_GBps,oop_busbw_"
          "GBps,oop_wrong,"
          "ip_time_us,ip_algbw_GBps,ip_busbw_GBps,ip_wrong\n";
      for (const auto& r : rows) {
        auto m = [](const bench::Measure& x) {
          return nlohmann::json{
              {"time_us", x.time_s * 1e6},         {"time_min_us", x.time_min_s * 1e6},
              {"time_avg_us", x.time_avg_s * 1e6}, {"algbw_GBps", x.algbw / 1e9},
              {"busbw_GBps", x.busbw / 1e9},       {"wrong", x.wrong}};
        };
        j.push_back({{"collective", to_string(r.collective)},
                     {"group", r.group},
                     {"ranks", r.ranks},
                     {"size_bytes", r.bytes},
                     {"count", r.count},
                     {"type", bench::to_string(r.dtype)},
                     {"redop", bench::to_string(r.op)},
                     {"root", r.root},
                     {"out_of_place", m(r.out_of_place)},
                     {"in_place", m(r.in_place)}});
        csv += fmt::format(
            "{},{},{},{},{},{},{},{:.3f},{:.4f},{:.4f},{},{:.3f},{:.4f},{:.4f},{}\n",
            to_string(r.collective), r.ranks, r.bytes, r.count, bench::to_string(r.dtype),
            bench::to_string(r.op), r.root, r.out_of_place.time_s * 1e6, r.out_of_place.algbw / 1e9,
            r.out_of_place.busbw / 1e9, r.out_of_place.wrong, r.in_place.time_s * 1e6,
            r.in_place.algbw / 1e9, r.in_place.busbw / 1e9, r.in_place.wrong);
      }
      std::fputs(
          format == "json" ? (nlohmann::json{{"results", j}}.dump(2) + "\n").c_str() : csv.c_str(),
          stdout);
    }
    std::fflush(stdout);
    if (wrong)
      std::fprintf(stderr,
                   "commscope: %ld wrong values: the collectives returned incorrect results\n",
                   wrong);
  }
  return wrong ? 1 : 0;
}
