// How fast `commscope plan` searches: the full search of llama2-13b on 64 DGX A100 GPUs (global
// batch 512, every TP, PP, virtual stages, ZeRO, micro-batch, recompute, SP, schedule and rank
// order, CP), and of llama3-405b on 16,384 DGX H100 GPUs (Llama 3's 16 Mi-token batch: 2048
// samples of 8192; 126 layers: PP 4, 8, 16 ... with Megatron's uneven stages), and of
// megatron-1t on 3072 DGX A100 GPUs (global batch 3072), each on 1 and 2 threads. Prints
// candidates, how many the memory bound pruned, how many were predicted, seconds and plans per
// second; the 13B search also plan by plan (SearchOptions::share_workloads = false), in the
// same process. Prints candidates per CPU second (the targets: 60,000 on the 13B sweep and
// the 405B search under 10 s on one core; docs/plan.md). Never fails. Instruction counts, the
// steadier figure on a shared machine: valgrind --tool=callgrind ./build/perf/bench_plan 1 13b.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include "commscope/search/plan_search.h"

namespace {
using Clock = std::chrono::steady_clock;

// The search's CPU seconds of the last run (for the ratio of two runs in this process).
double last_cpu = 0;

int run(const char* title, const commscope::search::SearchSpace& s, int threads, bool share = true,
        bool bound = true) {
  commscope::search::SearchOptions o;
  o.threads = threads;
  o.share_workloads = share;
  o.bound = bound;
  const auto t0 = Clock::now();
  const std::clock_t c0 = std::clock();
  auto r = commscope::search::search(s, o);
  const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
  // CPU seconds of all threads: the steadier figure on a shared machine.
  const double cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
  if (!r.ok()) return std::fprintf(stderr, "bench: %s\n", r.error().message.c_str()), 2;
  last_cpu = cpu;
  // Every candidate is decided (not valid, over memory by the bound or built, skipped by a time
  // bound, or predicted): candidates per CPU second is the search's rate.
  std::printf(
      "%s, %d thread%s%s%s: %zu candidates in %.3f CPU s (%.3f s wall) = %.0f candidates per CPU "
      "second; %zu not valid, %zu pruned by the memory bound, %zu over memory, %zu skipped by "
      "the time bounds (%zu before their ops were built), %zu predicted; best %s %.4f s\n",
      title, threads, threads > 1 ? "s" : "", share ? "" : " (plan by plan)",
      bound ? "" : " (no time bound)", r->candidates, cpu, sec, r->candidates / cpu, r->invalid,
      r->pruned, r->no_fit, r->skipped, r->skipped_unbuilt, r->evaluated,
      commscope::search::describe(r->top.front().plan).c_str(),
      r->top.front().result.iteration_time);
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace commscope;
  // Optional arguments: the largest thread count to run (default 2; 1 for callgrind), and
  // "405b" to run the Llama 3 405B search alone, "13b" or "13b-plan-by-plan" the 13B search
  // alone on one path (for instruction counts: perf stat -e instructions:u).
  const int max_threads = argc > 1 ? std::max(1, std::atoi(argv[1])) : 2;
  const std::string only = argc > 2 ? argv[2] : "";
  const bool only_405b = only == "405b";
  auto mid = load_model("llama2-13b");
  auto big = load_model("llama3-405b");
  auto dgx = load_system("dgx-a100-80gb");
  auto h100 = load_system("dgx-h100");
  if (!mid.ok() || !big.ok() || !dgx.ok() || !h100.ok()) {
    std::fprintf(stderr, "bench: presets not found (set COMMSCOPE_PRESETS)\n");
    return 2;
  }
  search::SearchSpace a;
  a.model = *mid;
  a.system = *dgx;
  a.network = *load_network(dgx->network);
  a.gpus = 64;
  a.global_batch = 512;
  a.fixed_global_batch = true;
  search::SearchSpace b;
  b.model = *big;
  b.system = *h100;
  b.network = *load_network(h100->network);
  b.gpus = 16384;
  b.global_batch = 2048;
  b.fixed_global_batch = true;
  // Same process, one thread: the plan-by-plan path (each plan's own workload and simulation)
  // against the shared path (plans alike but for the schedule: one workload build,
  // Evaluator::evaluate_variants).
  // A third argument "cp1": the 13B space without context parallelism (a shorter run for
  // callgrind).
  if (argc > 3 && std::string(argv[3]) == "cp1") a.max_cp = 1;
  if (only == "13b" || only == "13b-plan-by-plan")
    return run("plan llama2-13b on 64 GPUs", a, 1, only == "13b");
  if (!only_405b) {
    if (int rc = run("plan llama2-13b on 64 GPUs", a, 1, false)) return rc;
    for (int t = 1; t <= max_threads; ++t)
      if (int rc = run("plan llama2-13b on 64 GPUs", a, t)) return rc;
  }
  // The time bound (SearchOptions::bound) against predicting every fitting plan, same process.
  if (int rc = run("plan llama3-405b on 16384 GPUs", b, 1, true, false)) return rc;
  const double unbounded = last_cpu;
  for (int t = 1; t <= max_threads; ++t) {
    if (int rc = run("plan llama3-405b on 16384 GPUs", b, t)) return rc;
    if (t == 1)
      std::printf("405b search, 1 thread: %.2fx less CPU time with the time bound\n",
                  unbounded / last_cpu);
  }
  if (only_405b) return 0;
  // A deeper space: 128 layers on 3072 GPUs (3 x 2^10) admit PP up to 128 and interleaving.
  auto huge = load_model("megatron-1t");
  if (!huge.ok()) return std::fprintf(stderr, "bench: megatron-1t not found\n"), 2;
  search::SearchSpace c = a;
  c.model = *huge;
  c.gpus = 3072;
  c.global_batch = 3072;
  for (int t = 1; t <= max_threads; ++t)
    if (int rc = run("plan megatron-1t on 3072 GPUs", c, t)) return rc;
  return 0;
}
