// commscope-bench: the MPI program behind `commscope bench`. Run it under mpirun, mpiexec or
// srun (or let `commscope bench --ranks N` launch it). Flags follow nccl-tests.
#include <unistd.h>

#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commscope/bench/harness.h"
#include "commscope/comm/flags.h"
#include "commscope/comm/mpi.h"
#include "commscope/launch/bench_flags.h"

int main(int argc, char** argv) {
  using namespace commscope;
  comm::Session mpi(&argc, &argv);
  CLI::App app{
      "commscope-bench: collective benchmarks over MPI, printed as nccl-tests prints them"};
  launch::BenchFlags f;
  launch::add_bench_flags(app, f);
  if (auto stop = comm::parse_flags(app, argc, argv, mpi)) return *stop;
  // The same checks as `commscope bench` makes before it launches (launch/bench_flags.h), for
  // runs under mpirun, mpiexec or srun directly.
  auto sweep = launch::check_bench_flags(f, mpi.size());
  if (!sweep) return mpi.fail(sweep.error().message);
  {
    // The buffers of the ranks on this node must fit its memory: checked before allocating.
    MPI_Comm node = MPI_COMM_NULL;
    CS_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, mpi.rank(),
                                     MPI_INFO_NULL, &node));
    int here = 1;
    CS_MPI_CHECK(MPI_Comm_size(node, &here));
    CS_MPI_CHECK(MPI_Comm_free(&node));
    const Status mem = launch::check_bench_memory(f, *sweep, mpi.size(), here);
    int bad = mem.ok() ? 0 : 1;
    CS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (bad)
      return mpi.fail(
          mem.ok() ? fmt::format("-e: {} does not fit the memory of another node", f.max_bytes)
                   : mem.error().message);
  }
  bench::Options o;
  o.min_bytes = sweep->min_bytes;
  o.max_bytes = sweep->max_bytes;
  o.factor = f.factor;
  o.warmup = f.warmup;
  o.iters = f.iters;
  o.root = f.root;
  o.check = f.check != 0;
  o.collectives = sweep->collectives;
  o.a2a_weights = launch::routing_weights(f.routing, mpi.size());
  o.corrupt_rank = f.corrupt_rank;
  o.dtype = f.dtype == "double"  ? bench::DataType::f64
            : f.dtype == "float" ? bench::DataType::f32
                                 : bench::DataType::i32;
  o.op = f.op == "max"   ? bench::ReduceOp::max
         : f.op == "min" ? bench::ReduceOp::min
                         : bench::ReduceOp::sum;
  const std::string& format = f.format;
  const std::string& split = f.split;
  const bool p2p = f.p2p;
  const int window = f.window;
  const int kill_rank = f.kill_rank;

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
  // Progress on stderr (rank 0): when asked (`commscope bench` asks when its stderr is a
  // terminal) or when this rank's stderr is one. One status line, rewritten after each size.
  const bool progress = mpi.rank() == 0 && (f.progress || ::isatty(STDERR_FILENO) == 1);
  const int per_sweep = sweep->sizes;
  const int sweeps = static_cast<int>(sweep->collectives.empty() ? launch::kBenchCollectives
                                                                 : sweep->collectives.size()) *
                     (split == "node" ? 2 : 1);
  int done_in_sweep = 0, sweep_index = 0;
  bench::Row previous;
  auto clear_progress = [&] {
    if (progress) {
      std::fputs("\r\033[K", stderr);
      std::fflush(stderr);
    }
  };
  if (mpi.rank() == 0)
    o.on_row = [&](const bench::Row& r) {
      const bool new_block =
          done_in_sweep == 0 || previous.collective != r.collective || previous.group != r.group;
      if (new_block) ++sweep_index, done_in_sweep = 0;
      ++done_in_sweep;
      previous = r;
      if (format == "table") {
        clear_progress();
        if (block.empty() || block.back().collective != r.collective ||
            block.back().group != r.group) {
          end_block();
          std::fputs(bench::render_nccl_header(r.collective, r.ranks, r.group).c_str(), stdout);
        }
        block.push_back(r);
        std::fputs(bench::render_nccl_row(r).c_str(), stdout);
        std::fflush(stdout);  // each row as it is measured, also through a pipe
      }
      if (progress) {
        std::fprintf(stderr, "\r\033[Kcommscope-bench: %s %s: %d/%d sizes (%zu bytes), sweep %d/%d",
                     r.group.c_str(), std::string(bench::collective_name(r.collective)).c_str(),
                     done_in_sweep, per_sweep, r.bytes, sweep_index, sweeps);
        std::fflush(stderr);
      }
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
    // Every rank knows: rank 0's groups are single only when the world is one rank.
    if (rows.empty())
      return mpi.fail(fmt::format(
          "--split node: every group has a single rank ({} ranks per node, {} nodes): nothing "
          "to measure",
          per_node, nodes));
  } else {
    rows = bench::run(o, MPI_COMM_WORLD);
  }
  long wrong = 0;
  for (const auto& r : rows) wrong += bench::wrong_values(r);
  CS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD));
  if (mpi.rank() == 0) {
    clear_progress();
    if (format == "table") {
      end_block();
    } else {
      nlohmann::json j = nlohmann::json::array();
      std::string csv =
          "collective,ranks,size_bytes,count,type,redop,root,oop_time_us,oop_algbw_GBps,oop_busbw_"
          "GBps,oop_wrong,"
          "ip_time_us,ip_algbw_GBps,ip_busbw_GBps,ip_wrong\n";
      // Not checked (-c 0): an empty field in CSV, null in JSON (nccl-tests' N/A).
      auto csv_wrong = [](const bench::Measure& x) {
        return x.wrong < 0 ? std::string() : fmt::to_string(x.wrong);
      };
      for (const auto& r : rows) {
        auto m = [](const bench::Measure& x) {
          return nlohmann::json{
              {"time_us", x.time_s * 1e6},
              {"time_min_us", x.time_min_s * 1e6},
              {"time_avg_us", x.time_avg_s * 1e6},
              {"algbw_GBps", x.algbw / 1e9},
              {"busbw_GBps", x.busbw / 1e9},
              {"wrong", x.wrong < 0 ? nlohmann::json() : nlohmann::json(x.wrong)}};
        };
        j.push_back({{"collective", bench::collective_name(r.collective)},
                     {"group", r.group},
                     {"ranks", r.ranks},
                     {"size_bytes", r.bytes},
                     {"count", r.count},
                     {"type", bench::to_string(r.dtype)},
                     {"redop", bench::redop_name(r)},
                     {"root", r.root},
                     {"out_of_place", m(r.out_of_place)},
                     {"in_place", m(r.in_place)}});
        csv += fmt::format("{},{},{},{},{},{},{},{:.3f},{:.4f},{:.4f},{},{:.3f},{:.4f},{:.4f},{}\n",
                           bench::collective_name(r.collective), r.ranks, r.bytes, r.count,
                           bench::to_string(r.dtype), bench::redop_name(r), r.root,
                           r.out_of_place.time_s * 1e6, r.out_of_place.algbw / 1e9,
                           r.out_of_place.busbw / 1e9, csv_wrong(r.out_of_place),
                           r.in_place.time_s * 1e6, r.in_place.algbw / 1e9, r.in_place.busbw / 1e9,
                           csv_wrong(r.in_place));
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
