// The simulator's two halves, for simulate() and the Evaluator (private to src/sim/).
// prepare_runs: every chunk's forward and backward runs and each stage's step, which depend on
// the op lists and their costs but not on the micro-batch count or the pipeline schedule.
// finish: the pipeline schedule for a given micro-batch count, the step placed after it, and
// the breakdowns. prepare once, finish per (global batch, schedule): the same numbers as
// simulate() of each.
#pragma once

#include <algorithm>
#include <utility>
#include <vector>

#include "commscope/sim/simulator.h"

namespace commscope::sim_detail {

struct ChunkRuns {
  std::vector<double> fwd_dur, bwd_dur, fwd_first_dur;
  ListRun fwd, bwd, bwd_last;
  ListRun fwd_first;           // the first micro-batch's forward (Chunk::forward_first)
  bool has_fwd_first = false;  // else the first forward is `fwd`
  const ListRun& first_fwd() const { return has_fwd_first ? fwd_first : fwd; }
  Breakdown fwd_first_in;
  // Seconds of the chunk's parameter gathers the interleaved schedule dispatched ahead of its
  // first forward (ParallelPlan::megatron_gathers_ahead; 0 otherwise): finish() holds that
  // forward until they are done.
  double ahead_gather = 0;
  double fwd_p2p = 0, bwd_p2p = 0;              // transfer feeding this chunk's forward / backward
  double fwd_p2p_bytes = 0, bwd_p2p_bytes = 0;  // and its size (the recv op's)
  Breakdown fwd_in, bwd_in, bwd_last_in, bwd_last_tail, bwd_tail;

  // Every field as a new one's, the storage of its lists kept (prepare_runs reuses its pool's
  // entries plan after plan).
  void reset() {
    ChunkRuns fresh;
    for (auto [to, from] :
         {std::pair{&fresh.fwd_dur, &fwd_dur}, std::pair{&fresh.bwd_dur, &bwd_dur},
          std::pair{&fresh.fwd_first_dur, &fwd_first_dur}}) {
      to->swap(*from);
      to->clear();
    }
    for (auto [to, from] :
         {std::pair{&fresh.fwd, &fwd}, std::pair{&fresh.bwd, &bwd},
          std::pair{&fresh.bwd_last, &bwd_last}, std::pair{&fresh.fwd_first, &fwd_first}}) {
      to->events.swap(from->events);
      to->events.clear();
    }
    *this = std::move(fresh);
  }
};

// A combined 1F1B step (ParallelPlan::overlap_moe_ep_comm): one chunk's forward and one
// chunk's backward as one run (combined_list), from the pair's start.
struct PairRun {
  ListRun run;
  double fwd_end = 0, bwd_end = 0;     // when each side's last op is done (data-parallel aside)
  std::vector<std::uint8_t> backward;  // per event of run: of the backward's ops
  Breakdown in, tail;                  // over [0, run.blocking_end] and the overlapped rest
};

struct Runs {
  // Distinct chunks' runs: those index names; any after them are spare, kept for their storage.
  std::vector<ChunkRuns> pool;
  std::vector<std::vector<std::size_t>> index;  // [stage][chunk] -> pool
  // Combined 1F1B only: the distinct pairs' runs; [stage][forward chunk x v + backward chunk].
  std::vector<PairRun> pairs;
  std::vector<std::vector<std::size_t>> pair_index;
  std::vector<ListRun> steps;      // each stage's step, from time 0
  std::vector<Breakdown> step_in;  // and its breakdown over [0, its end]
  // Each stage's gradient reduction that ends a pipeline schedule when an iteration runs several
  // (ParallelPlan::pipeline_rounds): the reductions at the head of its step (the ops of phase
  // backward, --fsdp-grad-sync step's units), run from time 0; an empty run where the step has
  // none, and both lists empty where no stage's step has (round_end(s) reads either).
  std::vector<ListRun> round_ends;
  std::vector<Breakdown> round_end_in;  // and its breakdown over [0, its end]
  const ListRun& round_end(int s) const {
    static const ListRun kNone;
    return round_ends.empty() ? kNone : round_ends[static_cast<std::size_t>(s)];
  }
  bool breakdowns = true;  // the runs' breakdowns were computed (else finish gives times only)
};

// `accumulation`: some plan to finish has more than one micro-batch (runs the backward without
// the last micro-batch's ops too). `names`: intern event names there (the timeline).
// `breakdowns` false: the runs' breakdowns are not computed (for finish's times only).
void prepare_runs(const Scenario& sc, const std::vector<Role>& roles, bool accumulation,
                  Timeline* names, Runs& out, bool breakdowns = true);

// Host time per micro-batch, half before each forward and half before each backward (finish).
inline double host_half(const Scenario& sc) {
  return 0.5 * sc.system.calibration.microbatch_overhead.value();
}

// A floor on a chunk's tasks, host time not included: its first forward, each other forward,
// its last backward, each other backward.
struct ChunkFloor {
  double first_fwd, fwd, bwd_last, bwd;
};
// The lower bounds' argument (lower_bound, compute_lower_bound), without the schedule: for each
// stage, one micro-batch's forward on every stage before it (nothing on it can begin earlier),
// then all its tasks one after another (a stage runs one task at a time), then its step.
// floor(s, c): ChunkFloor of stage s's chunk c; step(s): stage s's step; m micro-batches.
template <class Floor, class Step>
double pipeline_floor(int pp, int v, double m, double host, Floor&& floor, Step&& step) {
  double before = 0, bound = 0;
  for (int s = 0; s < pp; ++s) {
    double busy = 0;
    for (int c = 0; c < v; ++c) {
      const ChunkFloor f = floor(s, c);
      busy += 2 * m * host + f.first_fwd + (m - 1) * f.fwd + f.bwd_last + (m - 1) * f.bwd;
    }
    bound = std::max(bound, before + busy + step(s));
    const ChunkFloor f0 = floor(s, 0);
    before += host + std::min(f0.fwd, f0.first_fwd);
  }
  return bound;
}

// A lower bound on finish()'s iteration time from the runs alone (pipeline_floor of the runs'
// blocking ends).
double lower_bound(const Scenario& sc, int microbatches, const Runs& runs);

// `pred` carries the timeline's interned names when `timeline`. `breakdowns` false: the
// iteration time alone (stages, mean and straggler_wait left empty; a search ranks by it and
// asks for the rest of the printed plans only), the same iteration time.
Prediction finish(const Scenario& sc, int microbatches, const std::vector<Role>& roles,
                  const Runs& runs, bool timeline, Prediction pred, bool breakdowns = true);

}  // namespace commscope::sim_detail
