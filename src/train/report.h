// The trainer's report (internal to src/train): the per-step rows, their averages after the
// warm-up, and rank 0's table or json document with the communication measured against the
// workload.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <mpi.h>
#include <nlohmann/json.hpp>

#include "commscope/timeline/timeline.h"
#include "commscope/train/options.h"
#include "commscope/workload/workload.h"

namespace commscope::train {

struct StepRow {
  std::int64_t step;
  double loss, seconds, grad_norm;
  Breakdown br;
  // DDP gradient buckets handed to the communication stream while backward still had
  // gradients to compute: what lets them overlap it (program order, not timing).
  std::int64_t buckets_during_backward = 0;
  // A model with experts: the load-balancing loss per MoE block and micro-batch (0 without a
  // coefficient), and the routing's imbalance: per MoE block and micro-batch of an EP group,
  // the busiest EP rank's rows over the mean (what --moe-routing-imbalance models) and the
  // busiest expert's (the same for EP = E), averaged over the step's blocks and groups.
  bool moe = false;
  double moe_aux_loss = 0, moe_rank_imbalance = 1, moe_expert_imbalance = 1;
  double start_s = 0;  // the step's start on the rank's trace clock (its events' time base)
};

// Calls, bytes and messages sent, by group and collective, over the whole run: a call is one
// of the workload's ops, a message one MPI call (the CP ring's pass is one call of several
// messages, Op::messages).
struct CommCount {
  std::int64_t calls = 0;
  double bytes = 0;
  std::int64_t messages = 0;
};
using MeasuredComm = std::map<std::pair<CommGroup, Collective>, CommCount>;

// The steps the averages count: those after start + warmup, or all of them when there are no
// more.
std::vector<const StepRow*> after_warmup(const std::vector<StepRow>& rows, std::int64_t start,
                                         int warmup);
// A breakdown and step time averaged over the steps after the warm-up (after_warmup).
void averages(const std::vector<StepRow>& rows, std::int64_t start, int warmup, Breakdown* avg,
              double* time);

// Writes this rank's Chrome trace (trace_path(trace, rank)): `names` (the interned event names)
// with the events of `lists`, the rank called `rank_name` and its streams 0, 1, ... called
// `streams`, and each step of `rows` as ProfilerStep#N on a track "steps" after them. A failure
// is reported on stderr, not fatal: the run itself is measured.
void write_rank_trace(const std::string& trace, int rank, const Timeline& names,
                      const std::vector<StepRow>& rows,
                      std::initializer_list<const std::vector<Event>*> lists,
                      const std::string& rank_name, std::initializer_list<const char*> streams);

// Every rank's averages after the warm-up, gathered to rank 0 of `comm` (the stream is idle: a
// plain collective; a Breakdown is plain numbers, so it travels as bytes and is written by the
// one breakdown JSON writer): on rank 0 one object per rank, {"rank", "time_s", each of
// `coords` by its name, and the breakdown's keys}; elsewhere nothing. At most three coords.
std::vector<nlohmann::json> gather_rank_averages(
    MPI_Comm comm, int me, int ranks, const std::vector<StepRow>& rows, std::int64_t start,
    int warmup, std::initializer_list<std::pair<const char*, int>> coords = {});

// Each of `calls`' wait for its peers: every rank of `comm` made the same calls in the same
// order (the counts are compared first; nothing is attributed when they differ), so call k
// could begin when the last rank entered it. The time before that is the event's
// Event::wait and its causal start moves past it. `calls` index `events`, whose starts are
// relative to this rank's `t0` (every rank's differs). Clocks: steady_clock, shared by the
// ranks of one machine (across machines the wait is only as good as their clocks' agreement).
// A collective over `comm`: every rank calls it.
void attribute_waits(std::vector<Event>& events, const std::vector<std::size_t>& calls, double t0,
                     MPI_Comm comm);

// What rank 0 reports about a run.
struct RunRecord {
  const TrainOptions* o = nullptr;
  int ranks = 1;
  std::int64_t accum = 1, parameters = 0, start = 0;
  double tokens_per_step = 0, flops_per_step = 0;  // the whole job's
  std::string data;                                // the token source, described
  const std::vector<StepRow>* rows = nullptr;
  const MeasuredComm* measured = nullptr;
  const std::vector<CommVolume>* expected = nullptr;  // the workload's comm_volume
  nlohmann::json memory, per_rank;
  // Model-parallel runs: the data-parallel size (0: every rank is a replica), whether every
  // other rank's communication equals its own stage's workload, the plan ({} when DP only).
  int dp = 0;
  bool other_ranks_match = true;
  nlohmann::json parallel;
  nlohmann::json by_stage;  // per pipeline stage: its first rank's communication table
};

// Per group and collective: calls, bytes and messages per iteration, measured and the
// workload's (`matches`: whether all are equal). The json "communication" array.
nlohmann::json comm_table(const MeasuredComm& measured, const std::vector<CommVolume>& expected,
                          std::int64_t iterations, bool* matches = nullptr);

// Whether the measured calls, bytes and messages per iteration equal the workload's, for every
// group and collective either has (comm_table's `matches`).
bool comm_matches(const MeasuredComm& measured, const std::vector<CommVolume>& expected,
                  std::int64_t iterations);

// Prints the table or the json document (and writes -o); 0, or 1 when the measured
// communication differs from the workload's.
int print_report(const RunRecord& r);

}  // namespace commscope::train
