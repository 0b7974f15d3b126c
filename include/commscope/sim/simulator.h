// The iteration simulator: runs a workload with modelled costs on each rank role's streams
// (compute; one communication stream per process group), honouring the op dependencies and
// the pipeline schedule, and says how long one iteration takes and where the time goes.
// Not a packet-level network simulator: collectives cost what cost/collective.h says.
#pragma once

#include <algorithm>
#include <vector>

#include "commscope/timeline/timeline.h"
#include "commscope/workload/workload.h"

namespace commscope {

// Streams of a simulated rank.
enum SimStream : std::int32_t {
  kComputeStream = 0,
  kTensorStream = 1,
  kDataStream = 2,
  kPipelineStream = 3,
  kEmbeddingStream = 4,
  kCopyStream = 5,  // host copies of offloaded activations (ParallelPlan::cpu_offload_layers)
  // The expert-parallel all-to-alls of a combined 1F1B step (ParallelPlan::overlap_moe_ep_comm),
  // beside the compute of the other micro-batch; elsewhere they run on kTensorStream.
  kExpertStream = 6,
  kStreamCount = 7
};
// Tracks of the trace only (Prediction::timeline), past the simulator's streams: the trace puts
// each call on the track of what it is, whichever stream ran it (the CP ring ran on the pipeline
// stream and was drawn as "pipeline comm", the MoE all-to-alls as "tensor-parallel comm"; a
// stage's receive nested its sends; found by probing, 2026-12-02).
inline constexpr std::int32_t kContextTrack = 7;
inline constexpr std::int32_t kPipelineRecvTrack = 8;
std::int32_t stream_of(const Op& op);
// A gradient reduction or parameter gather (a comm op of the data-parallel stream): it waits for
// a weight gradient, not a data gradient, and may outlast the task that issued it.
bool is_reduction(const Op& op);

// One op list run once from time 0.
struct ListRun {
  double blocking_end = 0;  // the compute stream and the collectives it waits for are done
  double end = 0;           // every op is done (overlapped gradient reduction included)
  double wait = 0;          // seconds collectives waited for the slowest rank (sum of Event::wait)
  // The data-parallel stream's first start and last end in this run (none: data_first < 0).
  // finish() queues the runs' data-parallel work one after another (the stream is FIFO).
  double data_first = -1, data_end = 0;
  // With stragglers: the compute run at the end since each stream's last collective (since the
  // run's start where the stream had none, Stragglers::carried included), which the stage's
  // step carries on from its last backward's.
  double compute_tail[kStreamCount] = {};
  std::vector<Event> events;
};

// Stragglers (docs/cost-model.md, "Scale effects"): a collective on stream s begins when the
// slowest of its group reaches it, cv x emax[s] x (the compute run since that stream's
// previous collective) after the mean rank; the waiting ranks' calls carry it as Event::wait.
struct Stragglers {
  double cv = 0;                   // coefficient of variation of compute time (0: off)
  double emax[kStreamCount] = {};  // E[max of n std normals] for each stream's group
  // Compute run before the list since each stream's last collective (a stage's step: its last
  // backward's ListRun::compute_tail); 0: the list starts afresh.
  double carried[kStreamCount] = {};
};

// What run_list says beyond the run, for a combined 1F1B step's run (ParallelPlan::
// overlap_moe_ep_comm).
struct RunDetail {
  // in: a combined 1F1B step's run: the expert group's all-to-alls on kExpertStream (Megatron-
  // Core's comm stream), the tensor-parallel collectives on the compute stream (issued there,
  // so that the other micro-batch's kernels wait for them too)
  bool combined = false;
  std::vector<double> op_end;           // out: each op's end (an op not run: when it was ready)
  std::vector<std::uint32_t> event_op;  // out: the op of each event
};

// Runs an op list with the given op durations (seconds). `last_microbatch` includes the ops
// that run only on the last micro-batch (DDP buckets). Pipeline sends and receives take no
// time here: the pipeline scheduler places them.
ListRun run_list(const OpList& list, const std::vector<double>& durations, const ParallelPlan& plan,
                 bool last_microbatch, Timeline* names = nullptr,
                 const Stragglers* stragglers = nullptr, RunDetail* detail = nullptr);
// The same into r, whose event list's storage is reused.
void run_list_into(ListRun& r, const OpList& list, const std::vector<double>& durations,
                   const ParallelPlan& plan, bool last_microbatch, Timeline* names = nullptr,
                   const Stragglers* stragglers = nullptr, RunDetail* detail = nullptr);

inline constexpr std::uint8_t kPairHead = 1, kPairTail = 2;  // PipelineTask::pair

// One forward or backward of one chunk for one micro-batch on one stage: 32 bytes, so that a
// sweep's schedules stay in cache (a 1F1B of PP 8 and 64 micro-batches is 1,024 tasks). The
// times of its input (when the transfer that fed it began, when it arrived, when the stage
// posted the receive) follow from the placed schedule: PipelineEnds and posted_at.
struct PipelineTask {
  std::int32_t stage = 0, microbatch = 0;
  std::int16_t chunk = 0;  // (at most the model's layer count, limits::kMaxLayers)
  // Combined 1F1B (ParallelPlan::overlap_moe_ep_comm): a forward that runs together with the
  // backward after it in its stage's order (kPairHead), and that backward (kPairTail); both
  // start at once, when both inputs are there, and end when their own ops are done.
  std::int16_t other = -1;  // a pair's other task's chunk
  bool backward = false;
  std::uint8_t pair = 0;
  // kFirstOfSchedule: the first micro-batch of its schedule; kLastOfSchedule: the last (of the
  // iteration's, or of each of its schedules where it runs several: pipeline_order's rounds).
  std::uint8_t edge = 0;
  double start = 0, end = 0;
};
static_assert(sizeof(PipelineTask) == 32);
inline constexpr std::uint8_t kFirstOfSchedule = 1, kLastOfSchedule = 2;  // PipelineTask::edge

// A placed schedule's task ends by (virtual stage, micro-batch, direction), which
// schedule_pipeline fills as it places the tasks (-1: not placed yet).
struct PipelineEnds {
  int pp = 0, virtual_stages = 0, microbatches = 0;
  std::vector<double> done;
  void reset(int p, int v, int m) {
    pp = p, virtual_stages = v, microbatches = m;
    done.assign(static_cast<std::size_t>(p) * v * m * 2, -1.0);
  }
  double& at(int vs, int mb, bool bw) {
    return done[(static_cast<std::size_t>(vs) * microbatches + mb) * 2 + (bw ? 1 : 0)];
  }
  double at(int vs, int mb, bool bw) const {
    return done[(static_cast<std::size_t>(vs) * microbatches + mb) * 2 + (bw ? 1 : 0)];
  }
  // The end of the task whose output feeds t (the previous virtual stage's forward of its
  // micro-batch, or the next one's backward): when the transfer to t began; -1 where no task
  // feeds t (the first virtual stage's forwards, the last one's backwards) or it is not placed.
  double input_end(const PipelineTask& t) const {
    const int vs = t.chunk * pp + t.stage;
    if (!t.backward && vs > 0) return at(vs - 1, t.microbatch, false);
    if (t.backward && vs < pp * virtual_stages - 1) return at(vs + 1, t.microbatch, true);
    return -1;
  }
};

// The input times of a placed task t, whose feeding transfer takes p2p seconds: when that
// transfer began (transfer_start) and ended (ready), both 0 for a task that no transfer feeds;
// and when its stage was free to post the receive (posted: its previous task's end, or 0).
struct TaskInput {
  double transfer_start = 0, ready = 0, posted = 0;
  // Seconds the receive waited for the sender before the transfer began (the profiler's view).
  double recv_wait() const { return transfer_start > posted ? transfer_start - posted : 0; }
};
// The k-th task of a stage's placed order: its previous task's end (a pair's: the later of its
// two ends; a pair's tail: its head's posting), or 0 for the first.
inline double posted_at(const std::vector<PipelineTask>& stage, std::size_t k) {
  if (k < stage.size() && stage[k].pair == kPairTail) return k ? posted_at(stage, k - 1) : 0;
  if (k == 0) return 0;
  const PipelineTask& prev = stage[k - 1];
  if (prev.pair == kPairTail && k >= 2) return std::max(stage[k - 2].end, prev.end);
  return prev.end;
}
inline TaskInput task_input(const std::vector<PipelineTask>& stage, std::size_t k,
                            const PipelineEnds& ends, double p2p) {
  TaskInput in;
  in.posted = posted_at(stage, k);
  const double e = ends.input_end(stage[k]);
  if (e >= 0) in.transfer_start = e, in.ready = e + p2p;
  return in;
}

// Per stage, in execution order, the tasks of a schedule (GPipe, 1F1B, interleaved 1F1B as
// Megatron orders them). `combined`: Megatron-Core's combined 1F1B (overlap_moe_ep_comm): the
// interleaved schedule warms up one forward more and pairs each steady-state forward with the
// backward after it; without PP the first forward runs alone, then each forward with the
// previous micro-batch's backward. `rounds` (ParallelPlan::pipeline_rounds): the m
// micro-batches as that many schedules of m / rounds, one after another on each stage.
// `group` (ParallelPlan::interleave_group): the interleaved schedule's micro-batches per chunk
// turn, 0 for PP (Megatron's).
std::vector<std::vector<PipelineTask>> pipeline_order(Schedule s, int pp, int v, int m,
                                                      bool combined = false, int rounds = 1,
                                                      int group = 0);

// Places the tasks in time. duration(task) gives a task's length, p2p(task) the time of the
// transfer that feeds it (activation for a forward, gradient for a backward). gate(stage, k,
// task), where the task is order[stage][k] and the stage's earlier tasks are placed, gives the
// earliest time the task may start for a reason of its own (0: none). A pair (kPairHead, then
// kPairTail) starts when both inputs are there; each ends duration() after that start, and the
// stage is free when both are done. `ends` receives every task's end by (virtual stage,
// micro-batch, direction), for task_input.
template <class Duration, class Transfer, class Gate>
void schedule_pipeline(std::vector<std::vector<PipelineTask>>& order, int pp, int v,
                       Duration&& duration, Transfer&& p2p, Gate&& gate, PipelineEnds& ends);
template <class Duration, class Transfer>
void schedule_pipeline(std::vector<std::vector<PipelineTask>>& order, int pp, int v,
                       Duration&& duration, Transfer&& p2p) {
  PipelineEnds ends;
  schedule_pipeline(
      order, pp, v, duration, p2p,
      [](std::size_t, std::size_t, const PipelineTask&) { return 0.0; }, ends);
}

// Megatron-Core's combined 1F1B step (ParallelPlan::overlap_moe_ep_comm; sim/combined.cpp):
// forward list f and backward list b as one list, in the order Megatron-Core issues them layer
// by layer (the forward's i-th block with the backward's i-th, each block cut at its dispatch
// and combine all-to-alls); run_list with RunDetail::combined runs it. delay_wgrad
// (--delay-wgrad-compute): each of b's weight GEMMs in those blocks as its data-gradient half
// and, later, its weight-gradient half. `from` receives, per op of the result, where it comes
// from: a half takes half its op's time (the backward GEMM is priced as one kernel elsewhere,
// and stays so).
struct CombinedOp {
  std::uint32_t op = 0;       // index in f or b
  std::uint8_t backward = 0;  // 1: b's
  std::uint8_t half = 0;      // 1: half of a split GEMM
};
OpList combined_list(const OpList& f, const OpList& b, bool delay_wgrad,
                     std::vector<CombinedOp>& from);

struct StagePrediction {
  int stage = 0;
  double end = 0;       // when the stage's iteration ends (optimizer step included)
  Breakdown breakdown;  // over [0, iteration time]
};

struct Prediction {
  double iteration_time = 0;  // seconds
  // Mean over stages of the seconds one rank's collectives waited for stragglers per iteration.
  double straggler_wait = 0;
  std::vector<StagePrediction> stages;
  Breakdown mean;     // mean over stages
  Timeline timeline;  // filled when asked for
  // Evaluator::evaluate_resolved with skip_above: the lower bound on iteration_time that was
  // above it, the schedule not run (iteration_time 0); 0 otherwise.
  double skipped_bound = 0;
};

struct SimOptions {
  bool timeline = false;                     // build the full event timeline (for --trace)
  const Calibration* calibration = nullptr;  // instead of the system's (for fitting)
  const ScaleEffects* scale = nullptr;       // instead of the system's (for fitting, switches)
};

Prediction simulate(const Workload& w, const SimOptions& o = {});

// One block's (transformer layer's) ops of one micro-batch's forward or backward (recompute
// included), with their dependencies inside the block (indices into ops).
struct BlockGraph {
  std::vector<Op> ops;
  std::vector<std::vector<std::uint32_t>> deps;
};
// Every block of a workload's model as a graph; blocks built alike share one.
struct BlockGraphs {
  std::vector<BlockGraph> graphs;                // distinct
  std::vector<std::uint32_t> forward, backward;  // [layer] -> graphs
};
BlockGraphs block_graphs(const Workload& w);

// A lower bound on simulate()'s iteration time for the plan of `sc` whose stages lay out as in
// `layout` (build_layout(sc)), from its blocks alone, without building its ops: `blocks` may
// come from another plan whose blocks are built alike (the same TP, CP, EP, micro-batch,
// recompute, SP, sharding and framework: the plan search takes them from the plan at PP 1) and
// are timed here on sc's system and process groups. A block takes at least its longest path of
// dependencies from a compute op to a compute op, over kernels and the tensor-, expert- and
// context-parallel collectives (data-parallel and pipeline transfers, whose groups the other
// plan sizes differently, counted as nothing); the compute ops form one chain in program order,
// so the blocks of a chunk add up. As sim_detail::lower_bound then: every stage waits for one
// micro-batch's forward on each stage before it and runs every micro-batch's forward and
// backward of its chunks one after another.
double compute_lower_bound(const Scenario& sc, const Workload& layout, const BlockGraphs& blocks);

// Events the full timeline of w would hold (an upper bound), counted without building it.
std::int64_t timeline_events(const Workload& w);
// Error "--trace: expected at most N events (...), got M" above limits::kMaxTraceEvents.
Status check_timeline_size(const Workload& w);

// ---- template definition ----
template <class Duration, class Transfer, class Gate>
void schedule_pipeline(std::vector<std::vector<PipelineTask>>& order, int pp, int v,
                       Duration&& duration, Transfer&& p2p, Gate&& gate, PipelineEnds& ends) {
  int m = 0;
  for (const auto& st : order)
    for (const auto& t : st) m = std::max(m, t.microbatch + 1);
  ends.reset(pp, v, m);
  // Per-thread scratch: cleared, not freed, between calls.
  thread_local std::vector<double> free_at;
  thread_local std::vector<std::size_t> next;
  next.assign(order.size(), 0);
  free_at.assign(order.size(), 0.0);
  std::size_t remaining = 0;
  for (const auto& st : order) remaining += st.size();
  // When task u's input arrives (0 if none feeds it), or -1 while its sender is not placed.
  auto arrival = [&](const PipelineTask& u) {
    const int vs = u.chunk * pp + u.stage;
    if ((!u.backward && vs == 0) || (u.backward && vs == pp * v - 1)) return 0.0;
    const double e = ends.input_end(u);
    return e < 0 ? -1.0 : e + p2p(u);
  };
  while (remaining > 0) {
    bool progress = false;
    for (std::size_t s = 0; s < order.size(); ++s) {
      while (next[s] < order[s].size()) {
        PipelineTask& t = order[s][next[s]];
        const double t_ready = arrival(t);
        if (t_ready < 0) break;
        const bool paired = t.pair == kPairHead;
        PipelineTask* u = paired ? &order[s][next[s] + 1] : nullptr;
        const double u_ready = u ? arrival(*u) : 0.0;
        if (u_ready < 0) break;
        t.start = std::max({free_at[s], t_ready, gate(s, next[s], t)});
        if (u) t.start = std::max(t.start, u_ready);
        t.end = t.start + duration(t);
        free_at[s] = t.end;
        ends.at(t.chunk * pp + t.stage, t.microbatch, t.backward) = t.end;
        if (u) {
          u->start = t.start;
          u->end = u->start + duration(*u);
          free_at[s] = std::max(t.end, u->end);
          ends.at(u->chunk * pp + u->stage, u->microbatch, u->backward) = u->end;
        }
        next[s] += paired ? 2 : 1;
        remaining -= paired ? 2 : 1;
        progress = true;
      }
    }
    if (!progress) break;  // a schedule that deadlocks is a programming error; caught by tests
  }
}

}  // namespace commscope
