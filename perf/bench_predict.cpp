// How fast `predict` is: one prediction of the 1T Megatron model on 3072 GPUs (TP 8, PP 64,
// 64 micro-batches; target at most 20 ms), against the same with every pipeline stage's lists
// built afresh (build_workload_every_stage: no middle stage copied), and a sweep of a 13B model
// (llama2-13b) on 64 GPUs over every valid (TP, PP, DP, ZeRO, micro-batch) plan (target at least
// 10,000 plans per second on one core; Calculon reports about 1.7 ms per plan), once with the
// network model alone and once with measured bus-bandwidth curves in the profile (20 curves of 31
// sizes: all-reduce, all-gather, reduce-scatter and send/recv inside a node and on 2, 4, 8 nodes,
// the shape of a nccl-tests sweep from 8 B to 8 GiB), and once more without stragglers
// (straggler_cv 0): the three sweeps take turns, one of each per repetition, so that their ratios
// compare like with like on a shared machine; the model sweep's time is printed for each
// repetition too, in order, so that a phase in which the host slows the process shows. Then a
// search-like sweep: the same plans at global batches 256, 512 and 1024 and, with pipelining, both
// the 1F1B and the GPipe schedule, predicted one by one (resolve + build + simulate per plan) and
// with Evaluator::evaluate_variants (one build and one set of chunk runs per plan, shared by its
// batch and schedule variants; the same numbers). Prints the figures and ratios.
//
// With `contend` as its second argument it then runs the 13B sweep again, in turns, alone and
// beside a pointer chase over 16 MiB on another core, which keeps evicting the shared L3 cache as
// another tenant of the host can: the sweep's data outgrows its core's L2, so this is the slow
// level a busy host brings (docs/cost-model.md, "The simulator"), on demand.
#include <sched.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "commscope/sim/evaluator.h"
#include "commscope/sim/simulator.h"

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// A random cyclic pointer chase over `bytes` on its own core, paused and resumed by `run`: each
// load misses the caches it has already filled, so it keeps the shared L3 for itself.
class Contender {
 public:
  Contender(int cpu, std::size_t bytes) : next_(bytes / sizeof(std::uint32_t)) {
    std::vector<std::uint32_t> order(next_.size());
    std::iota(order.begin(), order.end(), 0u);
    std::shuffle(order.begin() + 1, order.end(), std::mt19937(42));
    for (std::size_t i = 0; i < order.size(); ++i) next_[order[i]] = order[(i + 1) % order.size()];
    thread_ = std::thread([this, cpu] {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu, &set);
      sched_setaffinity(0, sizeof set, &set);
      std::uint32_t at = 0;
      while (!stop_.load(std::memory_order_relaxed)) {
        if (!run_.load(std::memory_order_relaxed)) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
          continue;
        }
        for (int i = 0; i < 4096; ++i) at = next_[at];
      }
      sink_ = at;
    });
  }
  ~Contender() {
    stop_ = true;
    thread_.join();
  }
  void run(bool on) {
    run_ = on;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let it fill, or go quiet
  }

 private:
  std::vector<std::uint32_t> next_;
  std::atomic<bool> run_{false}, stop_{false};
  std::uint32_t sink_ = 0;
  std::thread thread_;
};

// The first two CPUs this process may run on, or fewer.
std::vector<int> usable_cpus() {
  cpu_set_t set;
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace commscope;
  // Optional arguments: repetitions per measurement (default 15; 1 for callgrind), and
  // `contend` for the sweep beside a cache-evicting neighbour (see the top of the file).
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 15;
  const bool contend = argc > 2 && std::strcmp(argv[2], "contend") == 0;
  auto big = load_model("megatron-1t");
  auto mid = load_model("llama2-13b");
  auto dgx = load_system("dgx-a100-80gb");
  auto ib = load_network("ib-hdr-200");
  if (!big.ok() || !mid.ok() || !dgx.ok() || !ib.ok()) {
    std::fprintf(stderr, "bench: presets not found (set COMMSCOPE_PRESETS)\n");
    return 2;
  }

  // 1) the 1T model: resolve + build + simulate, median of repetitions
  PlanInput p1;
  p1.gpus = 3072, p1.tp = 8, p1.pp = 64, p1.micro_batch = 1, p1.global_batch = 6 * 64;
  std::vector<double> t;
  double sink = 0;
  for (int i = 0; i < 2 * reps + 1; ++i) {
    auto t0 = Clock::now();
    auto sc = resolve_scenario(*big, *dgx, *ib, p1);
    if (!sc.ok()) return std::fprintf(stderr, "bench: %s\n", sc.error().message.c_str()), 2;
    sink += simulate(build_workload(*sc)).iteration_time;
    t.push_back(ms_since(t0));
  }
  std::sort(t.begin(), t.end());
  const double one_t = t[t.size() / 2];
  // the same, every stage's lists built afresh (no copies of the middle stages): the baseline
  t.clear();
  for (int i = 0; i < 2 * reps + 1; ++i) {
    auto t0 = Clock::now();
    auto sc = resolve_scenario(*big, *dgx, *ib, p1);
    if (!sc.ok()) return 2;
    sink += simulate(build_workload_every_stage(*sc)).iteration_time;
    t.push_back(ms_since(t0));
  }
  std::sort(t.begin(), t.end());
  const double one_every = t[t.size() / 2];

  // 2) every valid plan of llama2-13b on 64 GPUs, global batch 512
  std::vector<PlanInput> plans;
  for (int tp : {1, 2, 4, 8})
    for (int pp : {1, 2, 4, 5, 8, 10, 20, 40})
      for (int zero : {0, 1, 2, 3})
        for (std::int64_t mb : {1, 2, 4, 8}) {
          PlanInput p;
          p.gpus = 64, p.tp = tp, p.pp = pp, p.zero = zero, p.micro_batch = mb,
          p.global_batch = 512;
          p.recompute = Recompute::selective;
          plans.push_back(p);
        }
  int valid = 0;
  // One sweep: every plan resolved, built and simulated; the valid ones counted. Returns ms.
  auto time_sweep = [&](const SystemSpec& sys, const NetworkProtocol& net) {
    valid = 0;
    auto t0 = Clock::now();
    for (const auto& p : plans) {
      auto sc = resolve_scenario(*mid, sys, net, p);
      if (!sc.ok()) continue;
      ++valid;
      sink += simulate(build_workload(*sc)).iteration_time;
    }
    return ms_since(t0);
  };
  SystemSpec system = *dgx;  // the sweeps' system (stragglers as the preset says)
  SystemSpec still = *dgx;   // without stragglers (scale.straggler_cv 0)
  still.scale.straggler_cv = 0;
  // The same network with curves: busbw rising from 0 at 8 B towards the achievable rate.
  NetworkProtocol curved = *ib;
  std::vector<BusBwCurve> curves;
  for (Collective c : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter,
                       Collective::send})
    for (int nodes : {1, 2, 4, 8}) {
      BusBwCurve cv;
      cv.collective = c;
      cv.scope = nodes > 1 ? CurveScope::inter_node : CurveScope::intra_node;
      cv.nodes = nodes, cv.ranks = nodes * 8;
      const double peak = nodes > 1 ? ib->achievable.value() * 8 : 200e9;
      for (double b = 8; b <= 8.6e9; b *= 2)
        cv.points.push_back({b, BytesPerSecond(peak * b / (b + 4e6))});
      curves.push_back(std::move(cv));
      if (nodes == 1) {  // a second intra-node rank count
        curves.push_back(curves.back());
        curves.back().ranks = 4;
      }
    }
  curved.curves = std::move(curves);
  // The three sweeps (the network model alone, with curves, without stragglers) take turns, one
  // of each per repetition, so that a shared machine's load, which changes within seconds,
  // weighs on all three alike and their ratios compare like with like.
  struct Sweep {
    const SystemSpec* system;
    const NetworkProtocol* net;
    std::vector<double> ms;
  };
  std::array<Sweep, 3> sweeps = {Sweep{&system, ib.operator->(), {}}, Sweep{&system, &curved, {}},
                                 Sweep{&still, ib.operator->(), {}}};
  for (int rep = 0; rep < reps; ++rep)
    for (Sweep& sw : sweeps) sw.ms.push_back(time_sweep(*sw.system, *sw.net));
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto fastest = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
  const double sweep_ms = median(sweeps[0].ms), best_ms = fastest(sweeps[0].ms);
  const double curves_ms = median(sweeps[1].ms), best_curves_ms = fastest(sweeps[1].ms);
  const double still_ms = median(sweeps[2].ms), best_still_ms = fastest(sweeps[2].ms);
  const double per_plan_ms = sweep_ms / valid;
  const double plans_per_s = 1e3 / per_plan_ms;

  std::printf(
      "predict megatron-1t, 3072 GPUs, TP8 PP64, 64 micro-batches: %8.3f ms  (target <= 20 ms: "
      "%.0f%% of it); every stage built afresh %.3f ms: %.2fx the time with stage copies (%d of "
      "63 stages copied)\n",
      one_t, 100 * one_t / 20, one_every, one_every / one_t,
      stages_copied(*resolve_scenario(*big, *dgx, *ib, p1)));
  std::printf(
      "sweep llama2-13b on 64 GPUs: %d valid plans of %zu in %.1f ms = %.3f ms per plan = %.0f "
      "plans/s\n",
      valid, plans.size(), sweep_ms, per_plan_ms, plans_per_s);
  std::printf(
      "  best of %d sweeps: %.1f ms = %.0f plans/s (noise on a shared machine lifts the median; "
      "the three sweeps take turns)\n",
      reps, best_ms, 1e3 * valid / best_ms);
  std::printf(
      "  target >= 10000 plans/s: median %.2fx, best %.2fx; Calculon's ~1.7 ms per plan: %.1fx "
      "faster\n",
      plans_per_s / 1e4, 1e3 * valid / best_ms / 1e4, 1.7 / per_plan_ms);
  // The same sweep, repetition by repetition, in this one process: the same code on the same
  // plans. Where the host slows the process for a while (docs/cost-model.md, "The simulator"), the
  // repetitions fall into two groups, the slower about 1.5x the faster.
  int quick = 0;
  for (double ms : sweeps[0].ms) quick += ms <= 1.1 * best_ms;
  std::printf("  each repetition (ms, in order):");
  for (double ms : sweeps[0].ms) std::printf(" %.1f", ms);
  std::printf("; %d of %d within 10%% of the fastest\n", quick, reps);
  std::printf(
      "sweep with measured curves (%zu curves): %.1f ms = %.0f plans/s (best %.0f); with/without "
      "curves: median %.2fx, best %.2fx the time\n",
      curved.curves.size(), curves_ms, 1e3 * valid / curves_ms, 1e3 * valid / best_curves_ms,
      curves_ms / sweep_ms, best_curves_ms / best_ms);
  std::printf(
      "sweep without stragglers (straggler_cv 0, default %.3g): %.1f ms = %.0f plans/s (best "
      "%.0f); "
      "with/without stragglers: median %.2fx, best %.2fx the time\n",
      dgx->scale.straggler_cv, still_ms, 1e3 * valid / still_ms, 1e3 * valid / best_still_ms,
      sweep_ms / still_ms, best_ms / best_still_ms);

  // 3) search-like: batch and schedule variants of each plan, alone and shared
  Evaluator ev(*mid, system, *ib);
  std::vector<std::vector<Evaluator::Variant>> variants(plans.size());
  for (std::size_t i = 0; i < plans.size(); ++i)
    for (std::int64_t gb : {256, 512, 1024})
      for (Schedule sch : {Schedule::one_f_one_b, Schedule::gpipe})
        if (sch == Schedule::one_f_one_b || *plans[i].pp > 1)
          variants[i].push_back({gb, sch, std::nullopt});
  int predicted = 0;
  auto alone = [&] {
    predicted = 0;
    for (std::size_t i = 0; i < plans.size(); ++i)
      for (const auto& v : variants[i]) {
        PlanInput p = plans[i];
        p.global_batch = v.global_batch, p.schedule = v.schedule;
        auto sc = resolve_scenario(*mid, system, *ib, p);
        if (!sc.ok()) continue;
        ++predicted;
        sink += simulate(build_workload(*sc)).iteration_time;
      }
  };
  auto shared = [&] {
    predicted = 0;
    for (std::size_t i = 0; i < plans.size(); ++i)
      for (const auto& r : ev.evaluate_variants(plans[i], variants[i]))
        if (r.ok()) ++predicted, sink += r->iteration_time;
  };
  auto best_of = [&](auto&& f) {
    double best = 1e300;
    for (int rep = 0; rep < reps; ++rep) {
      auto t0 = Clock::now();
      f();
      best = std::min(best, ms_since(t0));
    }
    return best;
  };
  const double alone_ms = best_of(alone);
  const int alone_n = predicted;
  const double shared_ms = best_of(shared);
  std::printf(
      "search-like sweep (global batch 256/512/1024, 1F1B and GPipe): %d plans; one by one %.1f "
      "ms = %.0f plans/s; Evaluator::evaluate_variants %.1f ms = %.0f plans/s (%d plans): "
      "%.2fx (best of %d)\n",
      alone_n, alone_ms, 1e3 * alone_n / alone_ms, shared_ms, 1e3 * predicted / shared_ms,
      predicted, alone_ms / shared_ms, reps);

  // 4) the plan search's path: the variants resolved once, one workload built, iteration times
  // alone (Evaluator::evaluate_resolved with breakdowns false; the search predicts breakdowns
  // for the plans it prints only). The same iteration times as (3); their sums are compared.
  double sum_shared = 0, sum_times = 0;
  auto times_only = [&] {
    predicted = 0;
    sum_times = 0;
    std::vector<Scenario> scs;
    std::vector<const Scenario*> members;
    for (std::size_t i = 0; i < plans.size(); ++i) {
      scs.clear();
      for (const auto& v : variants[i]) {
        PlanInput p = plans[i];
        p.global_batch = v.global_batch, p.schedule = v.schedule;
        auto sc = resolve_scenario(*mid, system, *ib, p);
        if (sc.ok()) scs.push_back(std::move(*sc));
      }
      if (scs.empty()) continue;
      members.clear();
      for (const auto& sc : scs) members.push_back(&sc);
      const Workload w = build_workload(scs.front());
      for (const auto& r : ev.evaluate_resolved(w, members, false))
        ++predicted, sum_times += r.iteration_time;
    }
  };
  for (std::size_t i = 0; i < plans.size(); ++i)
    for (const auto& r : ev.evaluate_variants(plans[i], variants[i]))
      if (r.ok()) sum_shared += r->iteration_time;
  const double times_ms = best_of(times_only);
  std::printf(
      "search path (resolved once, iteration times alone: Evaluator::evaluate_resolved without "
      "breakdowns): %.1f ms = %.0f plans/s (%d plans): %.2fx evaluate_variants (best of %d); "
      "same times: %s\n",
      times_ms, 1e3 * predicted / times_ms, predicted, shared_ms / times_ms, reps,
      sum_times == sum_shared ? "yes" : "NO");

  // 5) the 13B sweep alone and beside a neighbour that evicts the L3, in turns
  if (contend) {
    const std::vector<int> cpus = usable_cpus();
    if (cpus.size() < 2) {
      std::printf("contended sweep: skipped (one CPU available)\n");
    } else {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpus[0], &set);
      sched_setaffinity(0, sizeof set, &set);
      Contender neighbour(cpus[1], std::size_t{16} << 20);
      std::vector<double> quiet, busy;
      for (int rep = 0; rep < reps; ++rep) {
        neighbour.run(false);
        quiet.push_back(time_sweep(system, *ib));
        neighbour.run(true);
        busy.push_back(time_sweep(system, *ib));
      }
      neighbour.run(false);
      const double q = median(quiet), b = median(busy);
      std::printf(
          "sweep beside a 16 MiB pointer chase on CPU %d (this on CPU %d), in turns: alone %.1f "
          "ms = %.0f plans/s, beside it %.1f ms = %.0f plans/s (medians of %d): %.2fx the time; "
          "best %.0f and %.0f plans/s\n",
          cpus[1], cpus[0], q, 1e3 * valid / q, b, 1e3 * valid / b, reps, b / q,
          1e3 * valid / fastest(quiet), 1e3 * valid / fastest(busy));
    }
  }
  if (sink < 0) std::puts("");
  return 0;
}
