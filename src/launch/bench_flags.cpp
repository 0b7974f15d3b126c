// commscope-bench's flags, shared by the MPI program and its launcher (bench_flags.h).
#include "commscope/launch/bench_flags.h"

#include "commscope/util/input_file.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace commscope::launch {

void add_bench_flags(CLI::App& app, BenchFlags& f) {
  app.add_option("-b,--minbytes", f.min_bytes, "smallest size (8, 64K, 1M) [8]");
  app.add_option("-e,--maxbytes", f.max_bytes,
                 "largest size, at most 1T and what this machine's memory holds [32M]");
  app.add_option("-f,--stepfactor", f.factor,
                 "size multiplier between steps, above 1; at most 1024 sizes [2]");
  app.add_option("-w,--warmup_iters", f.warmup, "warm-up iterations, 0 to 1000000 [5]");
  app.add_option("-n,--iters", f.iters, "timed iterations, 1 to 1000000 [20]");
  app.add_option("-d,--datatype", f.dtype, "float|double|int32 [float]");
  app.add_option("-o,--op", f.op, "sum|max|min [sum]");
  app.add_option("-r,--root", f.root, "root of broadcast and reduce [0]");
  app.add_option("-c,--check", f.check, "check results (1) or not (0) [1]");
  app.add_option("--collectives", f.collectives,
                 "all_reduce,all_gather,reduce_scatter,broadcast,reduce,all_to_all,sendrecv [all]")
      ->delimiter(',');
  app.add_option("--format", f.format, "table|json|csv [table]");
  app.add_option("--split", f.split,
                 "node: run each collective inside each node and across nodes separately");
  app.add_option("--window", f.window,
                 "--p2p: messages in flight in the bandwidth test, as osu_bw -W, 1 to 1024 [64]");
  app.add_flag("--p2p", f.p2p,
               "point-to-point latency and bandwidth between ranks 0 and 1 (osu_latency, osu_bw)");
  app.add_option("--routing", f.routing,
                 "all_to_all with uneven counts (all-to-allv) as MoE routing sends them: zipf:S "
                 "(rank j gets a share ~ 1/(j+1)^S, S in (0, 8]) or imbalance:F (rank 0 gets F "
                 "times the mean, 1 <= F <= ranks) [even]");
  app.add_flag("--progress", f.progress,
               "print progress on stderr (commscope bench adds it when stderr is a terminal)");
  app.add_option("--corrupt-rank", f.corrupt_rank, "(tests) this rank corrupts one received value")
      ->group("");
  app.add_option("--kill-rank", f.kill_rank,
                 "(tests) this rank kills itself once the sweep has started")
      ->group("");
}

std::vector<double> routing_weights(const std::string& spec, int ranks) {
  std::vector<double> w;
  const auto colon = spec.find(':');
  if (spec.empty() || colon == std::string::npos || ranks < 1) return w;
  const double v = std::strtod(spec.c_str() + colon + 1, nullptr);
  const std::string kind = spec.substr(0, colon);
  w.assign(static_cast<std::size_t>(ranks), 0.0);
  if (kind == "zipf") {
    double sum = 0;
    for (int j = 0; j < ranks; ++j) sum += w[static_cast<std::size_t>(j)] = std::pow(j + 1.0, -v);
    for (double& x : w) x /= sum;
  } else {
    const double first = std::min(v, static_cast<double>(ranks)) / ranks;
    w[0] = ranks == 1 ? 1.0 : first;
    for (int j = 1; j < ranks; ++j) w[static_cast<std::size_t>(j)] = (1 - first) / (ranks - 1);
  }
  return w;
}

bool parse_bench_size(const std::string& s, std::uint64_t& out) {
  if (s.empty()) return false;
  std::uint64_t mult = 1;
  std::size_t len = s.size();
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
    case 'T':
    case 't':
      mult = 1ull << 40, --len;
      break;
    default:
      break;
  }
  if (len == 0 || len > 19) return false;
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < len; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + static_cast<std::uint64_t>(s[i] - '0');
  }
  if (v > UINT64_MAX / mult) return false;
  out = v * mult;
  return true;
}

double next_bench_size(double b, double factor) {
  if (factor > 1) return b < 1 ? 1 : b * factor;
  return b + std::max(1.0, -factor);
}

Result<BenchSweep> check_bench_flags(const BenchFlags& f, int ranks) {
  BenchSweep s;
  const std::string size_help = "a size such as 8, 64K, 1M or 1G";
  if (!parse_bench_size(f.min_bytes, s.min_bytes))
    return Error{fmt::format("-b: expected {}, got '{}'", size_help, f.min_bytes)};
  if (!parse_bench_size(f.max_bytes, s.max_bytes))
    return Error{fmt::format("-e: expected {}, got '{}'", size_help, f.max_bytes)};
  if (s.max_bytes > kMaxBytes)
    return Error{
        fmt::format("-e: expected at most 1T ({} bytes), got '{}'", kMaxBytes, f.max_bytes)};
  if (s.max_bytes < s.min_bytes)
    return Error{fmt::format("-e: expected at least -b ({}), got '{}'", f.min_bytes, f.max_bytes)};
  if (!std::isfinite(f.factor) || (f.factor <= 1 && f.factor > -1))
    return Error{fmt::format("-f: expected a finite factor above 1, got {}", f.factor)};
  if (f.factor < 0 && f.factor != std::floor(f.factor))
    return Error{fmt::format("-f: expected a whole number of bytes to step by (negative), got {}",
                             f.factor)};
  if (f.iters < 1 || f.iters > kMaxIters)
    return Error{
        fmt::format("-n: expected an iteration count from 1 to {}, got {}", kMaxIters, f.iters)};
  if (f.warmup < 0 || f.warmup > kMaxIters)
    return Error{
        fmt::format("-w: expected a warm-up count from 0 to {}, got {}", kMaxIters, f.warmup)};
  if (f.dtype == "float")
    s.element_bytes = 4;
  else if (f.dtype == "double")
    s.element_bytes = 8;
  else if (f.dtype == "int32" || f.dtype == "int")
    s.element_bytes = 4;
  else
    return Error{fmt::format("-d: expected float, double or int32, got '{}'", f.dtype)};
  if (f.op != "sum" && f.op != "max" && f.op != "min")
    return Error{fmt::format("-o: expected sum, max or min, got '{}'", f.op)};
  if (f.check != 0 && f.check != 1)
    return Error{fmt::format("-c: expected 0 or 1, got {}", f.check)};
  if (f.root < 0 || (ranks > 0 && f.root >= ranks))
    return Error{ranks > 0 ? fmt::format("-r: expected a root in [0, {}), got {}", ranks, f.root)
                           : fmt::format("-r: expected a non-negative rank, got {}", f.root)};
  for (const auto& n : f.collectives) {
    Collective c;
    if (!collective_from_name(n, c))
      return Error{fmt::format(
          "--collectives: expected all_reduce, all_gather, reduce_scatter, broadcast, reduce, "
          "all_to_all or sendrecv, got '{}'",
          n)};
    s.collectives.push_back(c);
  }
  if (f.format != "table" && f.format != "json" && f.format != "csv")
    return Error{fmt::format("--format: expected table, json or csv, got '{}'", f.format)};
  if (!f.split.empty() && f.split != "node")
    return Error{fmt::format("--split: expected node, got '{}'", f.split)};
  if (!f.routing.empty()) {
    const auto colon = f.routing.find(':');
    const std::string kind = f.routing.substr(0, colon);
    double v = 0;
    bool number = false;
    if (colon != std::string::npos) {
      const std::string rest = f.routing.substr(colon + 1);
      char* end = nullptr;
      v = std::strtod(rest.c_str(), &end);
      number = !rest.empty() && end == rest.c_str() + rest.size() && std::isfinite(v);
    }
    const bool zipf = kind == "zipf" && number && v > 0 && v <= 8;
    const bool skew = kind == "imbalance" && number && v >= 1 && (ranks <= 0 || v <= ranks);
    if (!zipf && !skew)
      return Error{fmt::format(
          "--routing: expected zipf:S with 0 < S <= 8 or imbalance:F with 1 <= F <= the rank "
          "count, got '{}'",
          f.routing)};
  }
  // --p2p runs its own test between ranks 0 and 1: the sweep's selections mean nothing there.
  if (f.p2p && !f.collectives.empty())
    return Error{fmt::format(
        "--collectives: expected none with --p2p (its latency and bandwidth tests between ranks "
        "0 and 1), got '{}'",
        fmt::join(f.collectives, ","))};
  if (f.p2p && !f.split.empty())
    return Error{
        fmt::format("--split: expected none with --p2p (ranks 0 and 1 only), got '{}'", f.split)};
  if (!f.routing.empty() && (f.p2p || (!s.collectives.empty() &&
                                       std::find(s.collectives.begin(), s.collectives.end(),
                                                 Collective::all_to_all) == s.collectives.end())))
    return Error{
        fmt::format("--routing: expected all_to_all among the collectives it shapes ({}), got '{}'",
                    f.p2p ? std::string("--p2p runs none")
                          : fmt::format("--collectives {}", fmt::join(f.collectives, ",")),
                    f.routing)};
  if (f.window < 1 || f.window > 1024)
    return Error{fmt::format("--window: expected 1 to 1024 messages, got {}", f.window)};
  if (f.p2p && ranks > 0 && ranks < 2)
    return Error{fmt::format("--p2p: expected at least 2 ranks, got {}", ranks)};
  if (f.split == "node" && ranks == 1)
    return Error{
        "--split node: expected at least 2 ranks, got 1 (every group would have a "
        "single rank: nothing to measure)"};
  // The sizes the harness's loop visits (bench::run: sizes that round to the same element count
  // run once), counted without running it. Repeats happen only below 8 bytes, so the loop is
  // bounded by the limit on distinct sizes.
  const double hi = static_cast<double>(s.max_bytes);
  const std::uint64_t elem = static_cast<std::uint64_t>(s.element_bytes);
  std::uint64_t last = UINT64_MAX;
  for (double b = static_cast<double>(s.min_bytes); b <= hi * 1.0000001;
       b = next_bench_size(b, f.factor)) {
    const std::uint64_t count = static_cast<std::uint64_t>(b) / elem;
    if (count != last) ++s.sizes;
    last = count;
    if (s.sizes > kMaxSizesPerSweep)
      return Error{fmt::format(
          "-f: expected at most {} sizes from -b {} to -e {}, got more at -f {} (raise -f or "
          "narrow the range)",
          kMaxSizesPerSweep, f.min_bytes, f.max_bytes, f.factor)};
    if (s.min_bytes == s.max_bytes) break;
  }
  return s;
}

std::uint64_t bench_bytes_per_rank(const BenchFlags& f, const BenchSweep& s, int ranks) {
  const std::uint64_t elem = static_cast<std::uint64_t>(s.element_bytes);
  if (f.p2p) {
    constexpr std::uint64_t kWindowBytes = std::uint64_t{256} << 20;  // bench::run_p2p
    const std::uint64_t m = std::max<std::uint64_t>(s.max_bytes, 1);
    const std::uint64_t window = static_cast<std::uint64_t>(std::max(f.window, 1));
    return std::min(m > UINT64_MAX / window ? UINT64_MAX : m * window,
                    std::max(kWindowBytes, s.max_bytes));
  }
  // bench::run: a send and a receive buffer of the largest count plus one element per rank.
  const std::uint64_t most = s.max_bytes / elem + static_cast<std::uint64_t>(std::max(ranks, 1));
  // --routing: the busiest receiver of the all-to-allv gets ranks x its share of the largest
  // count (imbalance:F, F times the even receive buffer).
  const std::vector<double> w = routing_weights(f.routing, ranks);
  if (!w.empty()) {
    const double share = *std::max_element(w.begin(), w.end()) * static_cast<double>(ranks);
    return (most + static_cast<std::uint64_t>(std::ceil(static_cast<double>(most) * share))) * elem;
  }
  return 2 * most * elem;
}

Status check_bench_memory(const BenchFlags& f, const BenchSweep& s, int ranks, int ranks_here) {
  const std::uint64_t per_rank = bench_bytes_per_rank(f, s, ranks);
  const std::uint64_t avail = available_memory_bytes();
  if (avail == 0) return {};  // unknown: nothing to compare with
  const double need = static_cast<double>(per_rank) * std::max(ranks_here, 1);
  // A margin for MPI's own buffers and the rest of the machine.
  if (need <= 0.8 * static_cast<double>(avail)) return {};
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  return Error{fmt::format(
      "-e: {} needs about {:.3g} GiB of buffers per rank x {} ranks on this machine = {:.3g} "
      "GiB; expected at most 80% of the available memory ({:.3g} GiB)",
      f.max_bytes, static_cast<double>(per_rank) / kGiB, ranks_here, need / kGiB,
      static_cast<double>(avail) / kGiB)};
}

}  // namespace commscope::launch
