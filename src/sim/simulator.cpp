// The simulator in two levels. (1) Each chunk's forward and backward list runs once as a list
// schedule: an op starts when its dependencies are done and its stream is free, streams being
// in-order queues as CUDA streams are. (2) The pipeline schedule places those runs as tasks on
// the stages, with the point-to-point transfers between them; the optimizer step follows.
// Runs are computed once per chunk and reused for every micro-batch, which keeps the 1T model
// on 3072 GPUs (64 stages x 64 micro-batches) within milliseconds.
#include "commscope/sim/simulator.h"

#include "commscope/timeline/intervals.h"
#include "runs.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <iterator>
#include <limits>
#include <string_view>

#include "commscope/cost/collective.h"
#include "commscope/cost/compute.h"
#include "commscope/cost/straggler.h"
#include "commscope/spec/limits.h"

namespace commscope {

namespace {
// stream_of, inlined where the simulator calls it per op.
inline std::int32_t stream_index(const Op& op) {
  if (op.kind == OpKind::compute)
    return op.tag == OpTag::data_stream ? kDataStream : kComputeStream;
  switch (op.group) {
    case CommGroup::tensor:
      return kTensorStream;
    case CommGroup::data:
      return kDataStream;
    case CommGroup::pipeline:
      return kPipelineStream;
    case CommGroup::embedding:
      return kEmbeddingStream;
    // The MoE all-to-all runs in the layer's critical path, as TP's collectives do; the CP ring
    // on a stream of its own kind beside the attention it overlaps (the pipeline stream's);
    // expert gradients with the dense ones.
    case CommGroup::expert:
      return kTensorStream;
    case CommGroup::context:
      return kPipelineStream;
    case CommGroup::expert_data:
      return kDataStream;
  }
  return kComputeStream;
}
}  // namespace

std::int32_t stream_of(const Op& op) {
  return stream_index(op);
}

bool is_reduction(const Op& op) {
  return op.kind == OpKind::comm && stream_index(op) == kDataStream;
}

namespace {
// By name, among the ops of the tag the builder gives every op of those names (the tag first:
// most ops have none, and run_list asks for each op and each dependency).
bool is_param_gather(const Op& op) {
  if (op.tag != OpTag::param_gather) return false;
  const std::string_view n = op.name;
  return n == "zero3_param_all_gather" || n == "megatron_param_all_gather";
}
bool is_grad_bucket(const Op& op) {
  if (op.tag != OpTag::grad_bucket) return false;
  const std::string_view n = op.name;
  return n == "ddp_bucket" || n == "zero_grad_bucket" || n == "moe_expert_grad_bucket";
}

// Fills a default-constructed event in place (no copy of the event into the run's list).
void fill_event(Event& e, const Op& op, double start, double dur, Timeline* names) {
  e.stream = stream_index(op);
  e.start = start;
  e.dur = dur;
  // ZeRO-Offload's copies over the host link (offload_step's offload_* parts, the parameter
  // partitions' offload_param_fetch) are memory copies in the breakdown; its CPU Adam is the
  // step's compute, on the host.
  const bool host_copy =
      op.compute == ComputeClass::host && std::string_view(op.name).starts_with("offload_");
  e.kind = op.kind == OpKind::comm ? EventKind::comm
           : host_copy             ? EventKind::memcpy
                                   : EventKind::compute;
  if (op.kind == OpKind::comm) {
    e.has_collective = true;
    e.collective = op.collective;
    e.group = op.group;
    e.bytes = op.bytes;
    e.group_size = op.group_size;
  }
  e.layer = op.layer;
  if (names) e.name = names->intern(op.name);
}
}  // namespace

ListRun run_list(const OpList& list, const std::vector<double>& dur, const ParallelPlan& plan,
                 bool last_microbatch, Timeline* names, const Stragglers* st, RunDetail* detail) {
  ListRun r;
  run_list_into(r, list, dur, plan, last_microbatch, names, st, detail);
  return r;
}

void run_list_into(ListRun& r, const OpList& list, const std::vector<double>& dur,
                   const ParallelPlan& plan, bool last_microbatch, Timeline* names,
                   const Stragglers* st, RunDetail* detail) {
  // Every field anew; the event list's storage kept (a simulation reruns its lists plan after
  // plan, and writing events into memory still in cache is much of a run's time).
  r.blocking_end = r.end = r.wait = 0;
  r.data_first = -1, r.data_end = 0;
  r.events.clear();
  const bool strag = st && st->cv > 0;
  const bool combined = detail && detail->combined;
  // Compute run so far, and where it stood at each stream's previous collective: their
  // difference is the compute run since then.
  double computed = 0;
  double mark[kStreamCount] = {};
  if (strag)
    for (int s = 0; s < kStreamCount; ++s) mark[s] = -st->carried[s];
  // Where a collective on stream s entered at `entry` (its rank ready at `ready`) begins: when
  // the slowest of its group is there too. Returns the wait.
  auto straggle = [&](std::int32_t s, double ready, double entry, double& start) {
    start = entry;
    if (!strag) return 0.0;
    const double delay = st->cv * st->emax[s] * (computed - mark[s]);
    mark[s] = computed;
    start = std::max(entry, ready + delay);
    return start - entry;
  };
  const std::size_t n = list.size();
  // Per-thread scratch: cleared, not freed, between runs.
  thread_local std::vector<double> end;
  thread_local std::vector<std::uint32_t> deferred;
  end.assign(n, 0.0);
  deferred.clear();
  double stream_free[kStreamCount] = {};
  double consumer_start = 0;  // start of the op that used the latest parameter gather
  double chain_end = 0;
  r.events.reserve(n);
  if (detail) detail->event_op.clear();
  for (std::uint32_t i = 0; i < n; ++i) {
    const Op& op = list[i];
    double ready = 0;
    bool uses_gather = false;
    // A forward CP ring beside this attention core (OpTag::cp_ring_steps): the core's steps,
    // one a block, and when the last message arrives; only the last step waits for it.
    std::int32_t ring_steps = 0;
    double ring_end = 0;
    for (auto d : list.deps_of(i)) {
      const Op& dep = list[d];
      if (dep.tag != OpTag::none) [[unlikely]] {
        if (dep.tag == OpTag::cp_ring_steps && op.kind == OpKind::compute) {
          ring_steps = dep.messages + 1;
          ring_end = std::max(ring_end, end[d]);
          continue;
        }
        uses_gather |= is_param_gather(dep);
      }
      ready = std::max(ready, end[d]);
    }
    if ((op.last_microbatch_only && !last_microbatch) ||
        (op.kind == OpKind::comm && op.group == CommGroup::pipeline)) {
      end[i] = ready;  // not run here
      continue;
    }
    if (is_param_gather(op))  // ZeRO-3: one layer of prefetch, or none
      ready = std::max(ready, plan.overlap_param_gather ? consumer_start : chain_end);
    if (is_grad_bucket(op) && !plan.overlap_grad_reduce) {
      deferred.push_back(i);
      continue;
    }
    // s: the op's stream; q: the queue it waits in (a combined step's tensor-parallel
    // collectives in the compute stream's)
    const bool comm = op.kind == OpKind::comm;
    const std::int32_t s =
        combined && comm && op.group == CommGroup::expert ? kExpertStream : stream_index(op);
    const std::int32_t q = combined && comm && op.group == CommGroup::tensor ? kComputeStream : s;
    double start = std::max(ready, stream_free[q]);
    double wait = 0;
    if (op.kind == OpKind::comm) {
      wait = straggle(s, ready, start, start);
    } else if (s == kComputeStream) {
      computed += dur[i];
    }
    end[i] = start + dur[i];
    const double begin = start;
    // The core's last step (1 / ring_steps of it) after the ring's last message: when that
    // comes later than the other steps end, the core is two events, the wait between them.
    double piece = dur[i];
    if (ring_steps > 0 && ring_end > start + dur[i] - dur[i] / ring_steps) {
      piece = dur[i] - dur[i] / ring_steps;
      end[i] = ring_end + dur[i] / ring_steps;
      fill_event(r.events.emplace_back(), op, start, piece, names);
      if (detail) detail->event_op.push_back(i);
      start = ring_end;
      piece = dur[i] / ring_steps;
    }
    stream_free[q] = end[i];
    if (s == kComputeStream || s == kTensorStream || s == kExpertStream)
      chain_end = std::max(chain_end, end[i]);
    if (s == kDataStream && r.data_first < 0) r.data_first = begin;
    if (uses_gather) consumer_start = begin;
    fill_event(r.events.emplace_back(), op, start, piece, names);
    r.events.back().stream = s;
    r.events.back().wait = wait;
    r.wait += wait;
    if (detail) detail->event_op.push_back(i);
  }
  for (auto i : deferred) {  // gradient reduction after the whole backward
    double start = std::max(chain_end, stream_free[kDataStream]);
    const double wait = straggle(kDataStream, chain_end, start, start);
    end[i] = start + dur[i];
    stream_free[kDataStream] = end[i];
    fill_event(r.events.emplace_back(), list[i], start, dur[i], names);
    r.events.back().wait = wait;
    r.wait += wait;
    if (detail) detail->event_op.push_back(i);
  }
  if (detail) detail->op_end.assign(end.begin(), end.end());
  if (r.data_first >= 0 || !deferred.empty()) {
    if (r.data_first < 0) r.data_first = end[deferred.front()] - dur[deferred.front()];
    r.data_end = stream_free[kDataStream];
  }
  r.blocking_end = chain_end;
  r.end = chain_end;
  for (double f : stream_free) r.end = std::max(r.end, f);
  for (int s = 0; s < kStreamCount; ++s) r.compute_tail[s] = strag ? computed - mark[s] : 0.0;
}

namespace {
// pipeline_order into `order`, reusing its storage (cleared, not freed).
void pipeline_order_into(Schedule s, int pp, int v, int m, bool combined, int rounds, int group,
                         std::vector<std::vector<PipelineTask>>& order) {
  CS_CHECK(v <= std::numeric_limits<std::int16_t>::max());  // PipelineTask::chunk
  CS_CHECK(rounds >= 1 && m % rounds == 0);
  // Several schedules (ParallelPlan::pipeline_rounds): the first of m / rounds micro-batches,
  // then copies of it for the next micro-batches, one after another on each stage.
  const int total_m = m;
  m /= rounds;
  order.resize(pp);
  for (int st = 0; st < pp; ++st) {
    auto& o = order[st];
    o.clear();
    o.reserve(static_cast<std::size_t>(2) * total_m * v);
    auto task = [&](int chunk, int mb, bool bw) {
      PipelineTask t;
      t.stage = st, t.chunk = static_cast<std::int16_t>(chunk), t.microbatch = mb, t.backward = bw;
      t.edge = static_cast<std::uint8_t>((mb == 0 ? kFirstOfSchedule : 0) |
                                         (mb == m - 1 ? kLastOfSchedule : 0));
      o.push_back(t);
    };
    // The last two tasks as a combined 1F1B pair (a forward, then a backward).
    auto pair_last_two = [&] {
      PipelineTask &head = o[o.size() - 2], &tail = o.back();
      head.pair = kPairHead;
      tail.pair = kPairTail;
      head.other = tail.chunk;
      tail.other = head.chunk;
    };
    if (combined && pp == 1) {
      // Megatron-Core's combined_1f1b_schedule_for_no_pipelining (one chunk): the first forward
      // alone, each next forward with the backward before it, the last backward alone.
      for (int mb = 0; mb < m; ++mb) {
        task(0, mb, false);
        if (mb == 0) continue;
        task(0, mb - 1, true);
        pair_last_two();
      }
      task(0, m - 1, true);
    } else if (s == Schedule::gpipe || pp == 1) {
      // One micro-batch at a time without PP (gradient accumulation); GPipe: all forwards first.
      if (pp == 1) {
        for (int mb = 0; mb < m; ++mb) {
          for (int c = 0; c < v; ++c) task(c, mb, false);
          for (int c = v - 1; c >= 0; --c) task(c, mb, true);
        }
      } else {
        for (int mb = 0; mb < m; ++mb) task(0, mb, false);
        for (int mb = 0; mb < m; ++mb) task(0, mb, true);
      }
    } else if (s == Schedule::one_f_one_b) {
      const int warmup = std::min(pp - st - 1, m);
      for (int i = 0; i < warmup; ++i) task(0, i, false);
      for (int i = 0; i < m - warmup; ++i) {
        task(0, warmup + i, false);
        task(0, i, true);
      }
      for (int i = m - warmup; i < m; ++i) task(0, i, true);
    } else {
      // Megatron's interleaved 1F1B: the k-th forward runs chunk (k / g) % v of micro-batch
      // (k / (g v)) g + k % g, g the group (ParallelPlan::interleave_group: PP, or PyTorch's
      // micro-batches per round); backwards walk the chunks in reverse. PyTorch's
      // ScheduleInterleaved1F1B orders its tasks the same way (_get_1f1b_rank_ops with
      // forward_stage_index (step // g) % v, the warm-up (v - 1) g + 2 (PP - 1 - rank)).
      // Combined 1F1B: one more warm-up forward (schedules.py, get_pp_rank_microbatches), so
      // that each steady-state forward and the backward run with it are independent.
      const int g = group > 0 ? group : pp;
      const int total = m * v;
      const int warmup = std::min((pp - st - 1) * 2 + (v - 1) * g + (combined ? 1 : 0), total);
      auto mb_of = [&](int k) { return (k / (g * v)) * g + k % g; };
      auto fwd = [&](int k) { task((k / g) % v, mb_of(k), false); };
      auto bwd = [&](int k) { task(v - 1 - (k / g) % v, mb_of(k), true); };
      for (int k = 0; k < warmup; ++k) fwd(k);
      for (int i = 0; i < total - warmup; ++i) {
        fwd(warmup + i);
        bwd(i);
        if (combined) pair_last_two();
      }
      for (int k = total - warmup; k < total; ++k) bwd(k);
    }
    if (rounds > 1) {
      const std::size_t n = o.size();
      o.reserve(n * static_cast<std::size_t>(rounds));
      for (int r = 1; r < rounds; ++r)
        for (std::size_t i = 0; i < n; ++i) {
          PipelineTask t = o[i];
          t.microbatch += r * m;
          o.push_back(t);
        }
    }
    CS_CHECK(o.empty() || o.back().microbatch < total_m);
  }
}
}  // namespace

namespace {
// The task order of a (schedule, pp, v, m), from a small per-thread cache: a search asks for
// the same few orders plan after plan (GPipe and 1F1B of one layout, the next layout with the
// same depth and micro-batch count). schedule_pipeline rewrites every task's times, so an order
// is reused as it is. Orders of up to kSmallOrder = 16,384 tasks per direction share 16 entries
// (about 29 MB per thread at most); larger ones 4 entries of their own (as many as
// limits::kMaxPipelineTasks allows each, as before there were 4 entries in all).
std::vector<std::vector<PipelineTask>>& cached_order(Schedule s, int pp, int v, int m,
                                                     bool combined, int rounds, int group) {
  struct Entry {
    Schedule s = Schedule::one_f_one_b;
    int pp = -1, v = -1, m = -1, rounds = 1, group = 0;
    bool combined = false;
    std::vector<std::vector<PipelineTask>> order;
  };
  constexpr std::int64_t kSmallOrder = 16384;  // pp x v x m
  thread_local std::array<Entry, 16> small;
  thread_local std::array<Entry, 4> large;
  thread_local std::size_t next_small = 0, next_large = 0;
  const bool is_small = std::int64_t{pp} * v * m <= kSmallOrder;
  auto find = [&](auto& cache, std::size_t& next) -> std::vector<std::vector<PipelineTask>>& {
    for (Entry& e : cache)
      if (e.pp == pp && e.v == v && e.m == m && e.s == s && e.combined == combined &&
          e.rounds == rounds && e.group == group)
        return e.order;
    Entry& e = cache[next];
    next = (next + 1) % cache.size();
    e.pp = -1;  // not valid while it is rebuilt
    pipeline_order_into(s, pp, v, m, combined, rounds, group, e.order);
    e.s = s, e.pp = pp, e.v = v, e.m = m, e.combined = combined, e.rounds = rounds;
    e.group = group;
    return e.order;
  };
  return is_small ? find(small, next_small) : find(large, next_large);
}
}  // namespace

std::vector<std::vector<PipelineTask>> pipeline_order(Schedule s, int pp, int v, int m,
                                                      bool combined, int rounds, int group) {
  std::vector<std::vector<PipelineTask>> order;
  pipeline_order_into(s, pp, v, m, combined, rounds, group, order);
  return order;
}

namespace {

// Whether two ops cost the same (whatever their layer numbers and dependencies).
bool same_cost_op(const Op& x, const Op& y) {
  return x.kind == y.kind && x.compute == y.compute && x.collective == y.collective &&
         x.group == y.group && x.dtype == y.dtype &&
         x.last_microbatch_only == y.last_microbatch_only &&
         x.first_microbatch_only == y.first_microbatch_only && x.flops == y.flops &&
         x.mem_bytes == y.mem_bytes && x.bytes == y.bytes && x.group_size == y.group_size &&
         x.name == y.name && x.span == y.span && x.per_node == y.per_node && x.tag == y.tag &&
         x.host_seconds == y.host_seconds;
}

// Whether two op lists cost the same: the same ops, sizes and dependencies, whatever their
// layer numbers.
bool same_costs(const OpList& a, const OpList& b) {
  if (a.size() != b.size()) return false;
  for (std::uint32_t i = 0; i < a.size(); ++i) {
    const Op &x = a[i], &y = b[i];
    if (x.dep_count != y.dep_count || !same_cost_op(x, y)) return false;
    auto da = a.deps_of(i), db = b.deps_of(i);
    if (!std::equal(da.begin(), da.end(), db.begin())) return false;
  }
  return true;
}

// Placements per group, computed once per simulation.
struct Costs {
  const Scenario& sc;
  Calibration cal;  // the system's, at the plan's attention backend (kernel_calibration)
  LinkModel links;
  GroupPlacement place[kCommGroupCount];
  ForwardedCopies forwarded;  // the flex dispatcher's copies of a token over the EP group
  Stragglers stragglers;
  explicit Costs(const Scenario& s)
      : sc(s),
        cal(kernel_calibration(s.system.calibration,
                               s.plan.attention == AttentionKernel::flash &&
                                   s.plan.attention_backend == AttentionBackend::flash)),
        links(link_model(s)) {
    for (auto g : {CommGroup::data, CommGroup::tensor, CommGroup::pipeline, CommGroup::embedding,
                   CommGroup::expert, CommGroup::context, CommGroup::expert_data})
      place[static_cast<int>(g)] = place_group(s, g);
    forwarded = forwarded_copies(s, place[static_cast<int>(CommGroup::expert)]);
    stragglers.cv = s.system.scale.straggler_cv;
    if (stragglers.cv > 0) {
      Op probe;
      probe.kind = OpKind::comm;
      for (auto g :
           {CommGroup::data, CommGroup::tensor, CommGroup::pipeline, CommGroup::embedding}) {
        probe.group = g;
        stragglers.emax[stream_of(probe)] = expected_max_normal(place[static_cast<int>(g)].size);
      }
    }
  }
  double of(const Op& op) const {
    if (op.kind == OpKind::compute) {
      if (op.compute == ComputeClass::host) return op.host_seconds;  // not a kernel: no memo
      // Blocks repeat the same kernels: a direct-mapped memo of compute_time over what it
      // reads (class, type, FLOPs, bytes).
      std::uint64_t fb, mb;
      std::memcpy(&fb, &op.flops, sizeof fb);
      std::memcpy(&mb, &op.mem_bytes, sizeof mb);
      const std::uint64_t h = (fb * 0x9E3779B97F4A7C15ULL) ^ (mb * 0xC2B2AE3D27D4EB4FULL) ^
                              (static_cast<std::uint64_t>(op.compute) << 8) ^
                              static_cast<std::uint64_t>(op.dtype);
      KernelMemo& k = kernels[(h >> 58) & (kernels.size() - 1)];
      if (k.used && k.flops == op.flops && k.mem_bytes == op.mem_bytes && k.compute == op.compute &&
          k.dtype == op.dtype)
        return k.t;
      const double t = compute_time(op, sc.system.gpu, cal).value();
      k = {op.flops, op.mem_bytes, t, op.compute, op.dtype, true};
      return t;
    }
    if (op.tag == OpTag::ep_forwarded)
      return forwarded_time(op.bytes, forwarded, place[static_cast<int>(op.group)], links).value();
    if (op.span != GroupSpan::whole)
      return collective_time(op.collective, op.bytes, op.messages, sub(op), links).value();
    // Layers repeat the same few collectives: remember the last distinct ones (NCCL's model
    // weighs up to six algorithm/protocol paths per call).
    for (std::size_t i = 0; i < cached; ++i) {
      const Memo& m = memo[i];
      if (m.bytes == op.bytes && m.collective == op.collective && m.group == op.group &&
          m.messages == op.messages)
        return m.t;
    }
    const double t = collective_time(op.collective, op.bytes, op.messages,
                                     place[static_cast<int>(op.group)], links)
                         .value();
    memo[next_memo] = {op.bytes, t, op.collective, op.group, op.messages};
    next_memo = (next_memo + 1) % memo.size();
    cached = std::min(cached + 1, memo.size());
    return t;
  }
  // A sub-group of the op's group (FSDP's HSDP): its ranks on one node, one rank on each of
  // group_size nodes, or per_node ranks on each of group_size / per_node nodes; every GPU of a
  // node in such a group at once.
  GroupPlacement sub(const Op& op) const {
    GroupPlacement g;
    const int gpn = std::max(1, std::min(sc.gpus_per_node, sc.gpus()));
    g.size = op.group_size;
    g.per_node = op.span == GroupSpan::intra_node ? op.group_size
                 : op.span == GroupSpan::nodes    ? std::max(1, int{op.per_node})
                                                  : 1;
    g.nodes = std::max(1, op.group_size / g.per_node);
    g.concurrent = std::max(1, gpn / g.per_node);
    return g;
  }
  struct Memo {
    double bytes, t;
    Collective collective;
    CommGroup group;
    std::int32_t messages;
  };
  mutable std::array<Memo, 16> memo{};
  struct KernelMemo {
    double flops = 0, mem_bytes = 0, t = 0;
    ComputeClass compute = ComputeClass::gemm;
    DType dtype = DType::fp32;
    bool used = false;
  };
  mutable std::array<KernelMemo, 64> kernels{};
  mutable std::size_t cached = 0, next_memo = 0;
};

// Each op's time, into d (its storage reused).
void durations_into(std::vector<double>& d, const OpList& l, const Costs& costs) {
  d.resize(l.size());
  for (std::size_t i = 0; i < l.size(); ++i) d[i] = costs.of(l[i]);
}

const Op* recv_op(const OpList& l) {
  for (const Op& op : l.ops())
    if (op.kind == OpKind::comm && op.collective == Collective::recv) return &op;
  return nullptr;
}
double p2p_of(const OpList& l, const Costs& costs) {
  const Op* op = recv_op(l);
  return op ? costs.of(*op) : 0.0;
}
double p2p_bytes_of(const OpList& l) {
  const Op* op = recv_op(l);
  return op ? op->bytes : 0.0;
}

// Communication of a tail counted as hidden behind later compute.
Breakdown as_overlapped(Breakdown b) {
  b.overlapped += b.exposed;
  b.exposed = 0;
  b.idle = 0;
  b.wall = 0;
  for (auto& s : b.by_group.v) s.exposed = 0;
  for (auto& s : b.by_collective.v) s.exposed = 0;
  return b;
}

// Places a run's data-parallel events, the run starting at `base`, behind a stream busy until
// `free`: each starts at its unqueued time or when the one before it ends, whichever is later.
// Returns when the stream is free again; `out` (when given) receives the events' new starts,
// in the order of the run's data-parallel events.
double queue_data(const ListRun& r, double base, double free, std::vector<double>* out) {
  if (base + r.data_first >= free && !out) return base + r.data_end;  // nothing queued
  for (const Event& e : r.events) {
    if (e.stream != kDataStream) continue;
    const double start = std::max(base + e.start, free);
    if (out) out->push_back(start);
    free = start + e.dur;
  }
  return free;
}

// One host copy of layer `layer`'s activations on the copy stream.
void add_copy(ListRun& run, int layer, double start, double dur, std::string_view name,
              Timeline* names) {
  Event& c = run.events.emplace_back();
  c.stream = kCopyStream;
  c.kind = EventKind::memcpy;
  c.layer = layer;
  c.start = start;
  c.dur = dur;
  if (names) c.name = names->intern(name);
}

// Activation offloading (ParallelPlan::cpu_offload_layers; docs/workload.md, "Activation
// offloading"), as Transformer Engine's double-buffered CPU offload handler runs it: `seconds`
// holds each offloaded layer's copy time (its saved activations over the host copy bandwidth).
// Forward: each layer's activations are copied out once the layer's forward is done, one copy
// after another on the copy engine; the forward is done when the last copy is.
void offload_forward(ListRun& run, const std::vector<double>& seconds, Timeline* names) {
  const int n = static_cast<int>(seconds.size());
  std::vector<double> layer_end(seconds.size(), -1.0);
  for (const Event& e : run.events)
    if (e.stream == kComputeStream && e.layer >= 0 && e.layer < n)
      layer_end[static_cast<std::size_t>(e.layer)] =
          std::max(layer_end[static_cast<std::size_t>(e.layer)], e.end());
  double free = 0;
  for (int l = 0; l < n; ++l) {
    const std::size_t k = static_cast<std::size_t>(l);
    if (layer_end[k] < 0) continue;
    const double start = std::max(free, layer_end[k]);
    add_copy(run, l, start, seconds[k], "activation_offload", names);
    free = start + seconds[k];
  }
  run.blocking_end = std::max(run.blocking_end, free);
  run.end = std::max(run.end, free);
}
// Backward: a layer's activations are copied back when the layer above it begins its backward
// (one layer ahead), one copy after another, and its backward (recompute included) waits for
// them: everything from there on moves by the wait.
void offload_backward(ListRun& run, const std::vector<double>& seconds, Timeline* names) {
  constexpr double kNone = std::numeric_limits<double>::infinity();
  double free = 0;
  for (int l = static_cast<int>(seconds.size()) - 1; l >= 0; --l) {
    double begin = kNone, above = kNone;
    for (const Event& e : run.events) {
      if (e.stream != kComputeStream) continue;
      if (e.layer == l) begin = std::min(begin, e.start);
      if (e.layer == l + 1) above = std::min(above, e.start);
    }
    if (begin == kNone) continue;
    const double issue = std::max(free, above == kNone ? 0.0 : std::min(above, begin));
    free = issue + seconds[static_cast<std::size_t>(l)];
    const double wait = free - begin;
    if (wait > 0) {
      for (Event& e : run.events)
        if (e.stream != kCopyStream && e.start >= begin) e.start += wait;
      run.blocking_end += wait;
      run.end += wait;
      if (run.data_first >= begin) run.data_first += wait;
      if (run.data_end > begin) run.data_end += wait;
    }
    add_copy(run, l, issue, seconds[static_cast<std::size_t>(l)], "activation_reload", names);
  }
}

}  // namespace

namespace sim_detail {

void prepare_runs(const Scenario& sc, const std::vector<Role>& roles, bool accumulation,
                  Timeline* names, Runs& out, bool breakdowns) {
  out.breakdowns = breakdowns;
  const Costs costs(sc);
  const ParallelPlan& plan = sc.plan;
  const int pp = plan.pp, v = plan.virtual_stages;
  std::vector<ChunkRuns>& pool = out.pool;
  std::vector<std::vector<std::size_t>>& index = out.index;
  std::size_t used = 0;  // pool entries past these are spare storage (Runs::pool)
  index.assign(pp, {});
  // (1) every chunk's runs, once
  // Middle pipeline stages usually have op lists that cost the same: run those once. (Not when
  // building a timeline, whose events carry their stage's layer numbers.)
  for (int s = 0; s < pp; ++s) {
    const Role& role = roles[s];
    for (std::size_t c = 0; c < role.chunks.size(); ++c) {
      const Chunk& ch = role.chunks[c];
      if (s > 0 && !names) {
        const Chunk& prev = roles[s - 1].chunks[c];
        if (same_costs(ch.forward, prev.forward) && same_costs(ch.backward, prev.backward) &&
            same_costs(ch.forward_first, prev.forward_first)) {
          index[s].push_back(index[s - 1][c]);
          continue;
        }
      }
      index[s].push_back(used);
      if (used == pool.size()) pool.emplace_back();
      ChunkRuns& r = pool[used++];
      r.reset();
      durations_into(r.fwd_dur, ch.forward, costs);
      durations_into(r.bwd_dur, ch.backward, costs);
      const Stragglers* st = &costs.stragglers;
      // Activation offloading (PP 1, so this chunk holds every offloaded layer).
      std::vector<double> offload;
      for (int l = ch.first_layer;
           l < std::min(plan.cpu_offload_layers, ch.first_layer + ch.layers); ++l)
        offload.push_back(
            block_activation_bytes(sc, l, plan.full_recompute_at(l - ch.first_layer)).value() /
            sc.system.node.host_copy_pinned.value());
      run_list_into(r.fwd, ch.forward, r.fwd_dur, plan, false, names, st);
      if (!offload.empty()) offload_forward(r.fwd, offload, names);
      r.has_fwd_first = !ch.forward_first.empty();
      if (r.has_fwd_first) {
        durations_into(r.fwd_first_dur, ch.forward_first, costs);
        run_list_into(r.fwd_first, ch.forward_first, r.fwd_first_dur, plan, false, names, st);
        if (!offload.empty()) offload_forward(r.fwd_first, offload, names);
        if (plan.megatron_gathers_ahead() && r.fwd_first.data_first >= 0) {
          // Gathered before the task (finish() books them): the task's breakdown without them.
          r.ahead_gather = r.fwd_first.data_end - r.fwd_first.data_first;
          if (breakdowns) {
            std::vector<Event> rest;
            rest.reserve(r.fwd_first.events.size());
            for (const Event& e : r.fwd_first.events)
              if (e.stream != kDataStream) rest.push_back(e);
            r.fwd_first_in = breakdown(rest, 0, r.fwd_first.blocking_end);
          }
        } else if (breakdowns) {
          r.fwd_first_in = breakdown(r.fwd_first.events, 0, r.fwd_first.blocking_end);
        }
      }
      run_list_into(r.bwd_last, ch.backward, r.bwd_dur, plan, true, names, st);
      if (!offload.empty()) offload_backward(r.bwd_last, offload, names);
      // Only DDP's gradient buckets run on the last micro-batch alone; without them every
      // backward is the same run.
      const bool last_differs =
          accumulation && std::any_of(ch.backward.ops().begin(), ch.backward.ops().end(),
                                      [](const Op& op) { return op.last_microbatch_only; });
      if (last_differs) {
        run_list_into(r.bwd, ch.backward, r.bwd_dur, plan, false, names, st);
        if (!offload.empty()) offload_backward(r.bwd, offload, names);
      }
      r.fwd_p2p = p2p_of(ch.forward, costs);
      r.bwd_p2p = p2p_of(ch.backward, costs);
      r.fwd_p2p_bytes = p2p_bytes_of(ch.forward);
      r.bwd_p2p_bytes = p2p_bytes_of(ch.backward);
      if (breakdowns) {
        r.fwd_in = breakdown(r.fwd.events, 0, r.fwd.blocking_end);
        r.bwd_last_in = breakdown(r.bwd_last.events, 0, r.bwd_last.blocking_end);
        if (r.bwd_last.end > r.bwd_last.blocking_end)
          r.bwd_last_tail = breakdown(r.bwd_last.events, r.bwd_last.blocking_end, r.bwd_last.end);
      }
      if (last_differs) {
        if (breakdowns) {
          r.bwd_in = breakdown(r.bwd.events, 0, r.bwd.blocking_end);
          if (r.bwd.end > r.bwd.blocking_end)
            r.bwd_tail = breakdown(r.bwd.events, r.bwd.blocking_end, r.bwd.end);
        }
      } else {
        r.bwd = r.bwd_last;
        r.bwd_in = r.bwd_last_in;
        r.bwd_tail = r.bwd_last_tail;
      }
    }
  }
  // (1b) combined 1F1B: every (forward chunk, backward chunk) pair of each stage as one run,
  // once per distinct pair of chunk runs
  out.pairs.clear();
  out.pair_index.assign(plan.overlap_moe_ep_comm ? pp : 0, {});
  if (plan.overlap_moe_ep_comm) {
    std::vector<std::pair<std::size_t, std::size_t>> keys;
    std::vector<CombinedOp> from;
    std::vector<double> dur;
    RunDetail detail;
    detail.combined = true;
    for (int s = 0; s < pp; ++s) {
      const Role& role = roles[s];
      auto& at = out.pair_index[s];
      at.assign(static_cast<std::size_t>(v) * v, 0);
      for (int cf = 0; cf < v; ++cf)
        for (int cb = 0; cb < v; ++cb) {
          const std::pair key{index[s][cf], index[s][cb]};
          const auto seen = std::find(keys.begin(), keys.end(), key);
          std::size_t& slot = at[static_cast<std::size_t>(cf) * v + cb];
          if (seen != keys.end()) {
            slot = static_cast<std::size_t>(seen - keys.begin());
            continue;
          }
          slot = out.pairs.size();
          keys.push_back(key);
          PairRun& pr = out.pairs.emplace_back();
          const OpList list = combined_list(role.chunks[cf].forward, role.chunks[cb].backward,
                                            plan.delay_wgrad_compute, from);
          // each op's time from its chunk's run (half of it for half a GEMM)
          const ChunkRuns& rf = pool[index[s][cf]];
          const ChunkRuns& rb = pool[index[s][cb]];
          dur.resize(list.size());
          for (std::size_t i = 0; i < list.size(); ++i)
            dur[i] = (from[i].backward ? rb.bwd_dur : rf.fwd_dur)[from[i].op] *
                     (from[i].half ? 0.5 : 1.0);
          pr.run = run_list(list, dur, plan, false, names, &costs.stragglers, &detail);
          for (std::uint32_t i = 0; i < list.size(); ++i) {
            const Op& op = list[i];
            if (is_reduction(op))
              continue;  // reductions that outlast the task, as in a chunk's run
            double& side_end = from[i].backward ? pr.bwd_end : pr.fwd_end;
            side_end = std::max(side_end, detail.op_end[i]);
          }
          pr.backward.resize(detail.event_op.size());
          for (std::size_t k = 0; k < detail.event_op.size(); ++k)
            pr.backward[k] = from[detail.event_op[k]].backward;
          if (breakdowns) {
            pr.in = breakdown(pr.run.events, 0, pr.run.blocking_end);
            if (pr.run.end > pr.run.blocking_end)
              pr.tail = breakdown(pr.run.events, pr.run.blocking_end, pr.run.end);
          }
        }
    }
  }
  // (3, first half) each stage's step, run once from time 0 (placed after its last backward
  // once the pipeline is scheduled)
  out.steps.resize(pp);
  out.step_in.assign(pp, Breakdown{});
  thread_local std::vector<double> step_dur;
  for (int s = 0; s < pp; ++s) {
    const Role& role = roles[s];
    durations_into(step_dur, role.step, costs);
    // The step's collectives wait for the slowest rank over the compute since the stream's
    // last collective, which began in the stage's last backward (chunk 0's, the last
    // micro-batch's; docs/cost-model.md, "Stragglers and jitter").
    Stragglers st = costs.stragglers;
    if (!index[s].empty()) {
      const ListRun& last = pool[index[s][0]].bwd_last;
      std::copy(std::begin(last.compute_tail), std::end(last.compute_tail), std::begin(st.carried));
    }
    run_list_into(out.steps[s], role.step, step_dur, plan, true, names, &st);
    // the same for every micro-batch count and schedule: once here, not per finish
    if (breakdowns) out.step_in[s] = breakdown(out.steps[s].events, 0, out.steps[s].end);
  }
  // (3, the reductions that end each schedule but the last, where an iteration runs several)
  // The step's head of gradient reductions (its ops of phase backward), as its own list: the
  // other ops at the head depend only on ops before them, so the head runs alone. Left empty
  // where no stage's step has such a head (Runs::round_end).
  out.round_ends.clear();
  out.round_end_in.clear();
  for (int s = 0; s < pp; ++s) {
    const OpList& step = roles[s].step;
    std::size_t head = 0;
    while (head < step.size() && step[head].phase == Phase::backward) ++head;
    if (head == 0) continue;
    out.round_ends.resize(pp);
    out.round_end_in.resize(pp);
    ListRun& r = out.round_ends[s];
    OpList list;
    list.reserve(head);
    for (std::uint32_t i = 0; i < head; ++i) list.add(step[i], step.deps_of(i));
    durations_into(step_dur, list, costs);
    Stragglers st = costs.stragglers;
    if (!index[s].empty()) {
      const ListRun& last = pool[index[s][0]].bwd_last;
      std::copy(std::begin(last.compute_tail), std::end(last.compute_tail), std::begin(st.carried));
    }
    run_list_into(r, list, step_dur, plan, true, names, &st);
    if (breakdowns) out.round_end_in[s] = breakdown(r.events, 0, r.end);
  }
}

double lower_bound(const Scenario& sc, int microbatches, const Runs& runs) {
  // Combined 1F1B pairs run shorter than their two tasks' runs one after the other: no bound
  // from those (compute_lower_bound gives one from the compute alone).
  if (sc.plan.overlap_moe_ep_comm) return 0;
  // finish()'s task lengths: host time, then the run up to its blocking end.
  return pipeline_floor(
      sc.plan.pp, sc.plan.virtual_stages, microbatches, host_half(sc),
      [&](int s, int c) {
        const ChunkRuns& r = runs.pool[runs.index[s][c]];
        return ChunkFloor{r.first_fwd().blocking_end, r.fwd.blocking_end, r.bwd_last.blocking_end,
                          r.bwd.blocking_end};
      },
      [&](int s) { return runs.steps[s].end; });
}

Prediction finish(const Scenario& sc, int microbatches, const std::vector<Role>& roles,
                  const Runs& runs, bool timeline, Prediction pred, bool breakdowns) {
  const ParallelPlan& plan = sc.plan;
  const int pp = plan.pp, v = plan.virtual_stages, m = microbatches;
  CS_CHECK(std::int64_t{pp} * v * m <= limits::kMaxPipelineTasks);
  // Several schedules an iteration (ParallelPlan::pipeline_rounds), each of m / rounds
  // micro-batches with its own first forward (parameter gathers) and last backward (gradient
  // reduction); the next begins on a stage once its reduction is done (PyTorch's REDUCE_GRAD ends
  // each schedule's step). Not with Megatron-Core's combined 1F1B or gathers ahead
  // (resolve_scenario).
  const int rounds = static_cast<int>(plan.pipeline_rounds);
  CS_CHECK(rounds >= 1 && m % rounds == 0);
  CS_CHECK(rounds == 1 || (!plan.overlap_moe_ep_comm && !plan.megatron_gathers_ahead()));
  auto first_of_round = [](const PipelineTask& t) { return (t.edge & kFirstOfSchedule) != 0; };
  auto last_of_round = [](const PipelineTask& t) { return (t.edge & kLastOfSchedule) != 0; };
  const std::vector<ChunkRuns>& pool = runs.pool;
  const std::vector<std::vector<std::size_t>>& index = runs.index;
  const std::vector<ListRun>& steps = runs.steps;
  auto runs_of = [&](int s, int c) -> const ChunkRuns& { return pool[index[s][c]]; };
  auto run_of = [&](const PipelineTask& t) -> const ListRun& {
    const ChunkRuns& r = runs_of(t.stage, t.chunk);
    if (!t.backward) return first_of_round(t) ? r.first_fwd() : r.fwd;
    return last_of_round(t) ? r.bwd_last : r.bwd;
  };
  // Combined 1F1B: a pair's run, from either of its tasks.
  auto pair_of = [&](const PipelineTask& t) -> const PairRun& {
    const int f = t.backward ? t.other : t.chunk, b = t.backward ? t.chunk : t.other;
    return runs.pairs[runs.pair_index[t.stage][static_cast<std::size_t>(f) * v + b]];
  };
  // Per (stage, chunk): task lengths and feeding transfers, flat for the per-task loops.
  const double host = host_half(sc);
  struct TaskCost {
    double fwd, bwd, bwd_last, fwd_p2p, bwd_p2p, fwd_first;
  };
  thread_local std::vector<TaskCost> task_cost;  // per-thread scratch, as below
  task_cost.resize(static_cast<std::size_t>(pp) * v);
  for (int s = 0; s < pp; ++s)
    for (int c = 0; c < v; ++c) {
      const ChunkRuns& r = runs_of(s, c);
      task_cost[static_cast<std::size_t>(s) * v + c] = {host + r.fwd.blocking_end,
                                                        host + r.bwd.blocking_end,
                                                        host + r.bwd_last.blocking_end,
                                                        r.fwd_p2p,
                                                        r.bwd_p2p,
                                                        host + r.first_fwd().blocking_end};
    }
  auto cost_of = [&](const PipelineTask& t) -> const TaskCost& {
    return task_cost[static_cast<std::size_t>(t.stage) * v + t.chunk];
  };

  // (2) the pipeline
  // Per-thread scratch for the per-plan lists: cleared, not freed, between plans.
  thread_local std::vector<std::array<Intervals, 4>> transfers, profiled;
  thread_local Intervals busy;
  std::vector<std::vector<PipelineTask>>& order = cached_order(
      plan.schedule, pp, v, m, plan.overlap_moe_ep_comm, rounds, plan.interleave_group);
  // Megatron's interleaved schedule gathers each chunk's parameters ahead
  // (ParallelPlan::megatron_gathers_ahead): on stage s, chunks 0 and 1 when the schedule starts,
  // chunk k >= 2 at the start of the forward of virtual micro-batch (k - 1) x PP - s; they queue
  // on the stage's data-parallel stream, and the chunk's first forward begins its compute when
  // the last of them (its first layer's) is done. gathered[s * v + k]: that time.
  const bool ahead = plan.megatron_gathers_ahead();  // implies v > 1
  // A chunk's first forward whose gathers were dispatched ahead of it.
  auto gathered_ahead = [ahead](const PipelineTask& t) {
    return ahead && !t.backward && t.microbatch == 0;
  };
  thread_local std::vector<double> gathered;
  thread_local std::vector<std::vector<std::size_t>> forward_at;  // [s][j]: j-th forward's index
  if (ahead) {
    gathered.assign(static_cast<std::size_t>(pp) * v, 0.0);
    forward_at.resize(pp);
    for (int s = 0; s < pp; ++s) {
      forward_at[s].clear();
      for (std::size_t i = 0; i < order[s].size(); ++i)
        if (!order[s][i].backward) forward_at[s].push_back(i);
    }
  }
  thread_local PipelineEnds ends;
  auto p2p_of = [&](const PipelineTask& t) {
    const TaskCost& k = cost_of(t);
    return t.backward ? k.bwd_p2p : k.fwd_p2p;
  };
  // Several schedules: per (stage, schedule but the last), when the schedule's tasks and their
  // gradient reductions were done (round_ready) and its last task ended (round_last); the next
  // schedule's first task waits for round_ready and the step's head of reductions after it
  // (Runs::round_ends). The data-parallel stream's queue runs on over the schedules.
  const std::size_t per_round = rounds > 1 ? order[0].size() / rounds : 0;
  thread_local std::vector<double> round_ready, round_last, round_data_free;
  if (rounds > 1) {
    round_ready.assign(static_cast<std::size_t>(pp) * (rounds - 1), 0.0);
    round_last.assign(static_cast<std::size_t>(pp) * (rounds - 1), 0.0);
    round_data_free.assign(pp, 0.0);
  }
  auto round_gate = [&](std::size_t s, std::size_t here) {
    const std::size_t r = here / per_round - 1;  // the schedule that ended
    double last = 0, ready = 0;
    double& data_free = round_data_free[s];
    for (std::size_t k = here - per_round; k < here; ++k) {
      const PipelineTask& t = order[s][k];
      last = std::max(last, t.end);
      if (t.backward && last_of_round(t))
        ready =
            std::max(ready, t.start + host + runs_of(static_cast<int>(s), t.chunk).bwd_last.end);
      const ListRun& run = run_of(t);
      if (run.data_first >= 0) data_free = queue_data(run, t.start + host, data_free, nullptr);
    }
    ready = std::max({ready, last, data_free});
    round_ready[s * (rounds - 1) + r] = ready;
    round_last[s * (rounds - 1) + r] = last;
    return ready + runs.round_end(s).end;
  };
  schedule_pipeline(
      order, pp, v,
      [&](const PipelineTask& t) {
        if (t.pair) {  // both halves of the host time, then the pair's run up to this side's end
          const PairRun& p = pair_of(t);
          return 2 * host + (t.backward ? p.bwd_end : p.fwd_end);
        }
        const TaskCost& k = cost_of(t);
        if (!t.backward) return first_of_round(t) ? k.fwd_first : k.fwd;
        return last_of_round(t) ? k.bwd_last : k.bwd;
      },
      p2p_of,
      [&](std::size_t s, std::size_t here, const PipelineTask& t) {
        // a schedule's first task after another's: once the stage's reductions are done (its
        // host time runs beside them)
        if (rounds > 1 && here > 0 && here % per_round == 0) return round_gate(s, here) - host;
        if (!gathered_ahead(t)) return 0.0;
        const int c = t.chunk;
        const double g = runs_of(static_cast<int>(s), c).ahead_gather;
        double dispatched = 0;  // chunks 0 and 1: at the start
        if (c >= 2) {
          // Before the forward of virtual micro-batch (c - 1) x PP - s (>= 0 since s < PP); with
          // fewer micro-batches than that, no such forward: at the start.
          const std::size_t j = static_cast<std::size_t>((c - 1) * pp) - s;
          if (j < forward_at[s].size() && forward_at[s][j] < here)
            dispatched = order[s][forward_at[s][j]].start;
        }
        const double queued = c > 0 ? gathered[s * v + c - 1] : 0.0;
        const double done = std::max(dispatched, queued) + g;
        gathered[s * v + c] = done;
        return done - host;
      },
      ends);
  // The k-th task of stage s's input times.
  auto input_of = [&](int s, std::size_t k) {
    return task_input(order[s], k, ends, p2p_of(order[s][k]));
  };

  // (3) the step, once the stage's last backward and its gradient reduction are done
  thread_local std::vector<double> ready, last_task_end, step_start;
  ready.assign(pp, 0.0);
  last_task_end.assign(pp, 0.0);
  step_start.assign(pp, 0.0);
  // The data-parallel stream is one FIFO queue per stage, as NCCL's stream is: a task's
  // gradient reductions (and gathers) cannot begin before the previous task's are done. Each
  // run's data-parallel work was placed as if the stream were free at its start; where the
  // previous tasks' work still runs, it queues behind it, and the step waits for the last of it.
  // (The compute of a task that waits for a queued gather is not delayed here: the stream, not
  // the compute, bounds such a schedule.)
  for (int s = 0; s < pp; ++s) {
    double data_free = 0;
    for (const auto& t : order[s]) {
      last_task_end[s] = std::max(last_task_end[s], t.end);
      // only a last backward's gradient reduction outlasts its task
      if (t.backward && t.microbatch == m - 1)
        ready[s] = std::max(ready[s], t.start + host + runs_of(s, t.chunk).bwd_last.end);
      if (t.pair == kPairTail) continue;  // its ops are in the pair's run
      const ListRun& r = t.pair ? pair_of(t).run : run_of(t);
      // (an interleaved chunk's gathers dispatched ahead ran before the task: not queued here)
      if (r.data_first >= 0 && !gathered_ahead(t))
        data_free = queue_data(r, t.start + host, data_free, nullptr);
    }
    ready[s] = std::max({ready[s], last_task_end[s], data_free});
  }
  const bool embedding_sync = pp > 1 && sc.model.tied_embeddings;
  for (int s = 0; s < pp; ++s) {
    step_start[s] = ready[s];
    if (embedding_sync && (s == 0 || s == pp - 1))
      step_start[s] = std::max(ready[0], ready[pp - 1]);
  }
  for (int s = 0; s < pp; ++s)
    pred.iteration_time = std::max(pred.iteration_time, step_start[s] + steps[s].end);
  // The system's host time per iteration (framework, launch gaps): idle at the end, no bubble.
  const double overhead = sc.system.calibration.iteration_overhead.value();
  pred.iteration_time += overhead;
  const double T = pred.iteration_time;
  if (!breakdowns && !timeline) return pred;
  CS_CHECK(runs.breakdowns);  // runs prepared for times only cannot give breakdowns

  // (4) per-stage breakdowns composed from the runs' breakdowns. Each transfer occupies the
  // receiving and the sending stage.
  // Transfers by stage, direction and side: each list follows micro-batch order, so it is
  // sorted by construction and the lists unite in linear time.
  transfers.resize(pp);  // forward in, backward in, forward out, backward out
  for (int s = 0; s < pp; ++s)
    for (auto& l : transfers[s]) l.clear();
  // The same as a profiler records them: a receive from when the stage posted it (the wait
  // for the sender included), a send from when it began.
  // Both are built in one pass; the profiler's lists are swept only where a receive waited
  // (without waits they are the transfers themselves).
  bool recv_waits = false;
  profiled.resize(pp);
  for (int s = 0; s < pp; ++s)
    for (int k = 0; k < 4; ++k) {  // one per micro-batch and chunk
      profiled[s][k].clear();
      transfers[s][k].reserve(static_cast<std::size_t>(m) * v);
      profiled[s][k].reserve(static_cast<std::size_t>(m) * v);
    }
  for (int s = 0; s < pp; ++s) {
    // posted_at, kept as the loop goes: the stage's previous task's end (a pair's later end)
    double free = 0, pair_posted = 0;
    for (const PipelineTask& t : order[s]) {
      TaskInput in;
      if (t.pair == kPairTail) {
        in.posted = pair_posted;
        free = std::max(free, t.end);  // free: the head's end
      } else {
        in.posted = pair_posted = free;
        free = t.end;
      }
      const double e = ends.input_end(t);
      if (e < 0) continue;  // no transfer feeds it
      in.transfer_start = e, in.ready = e + p2p_of(t);
      if (in.ready <= in.transfer_start) continue;
      const int vs = t.chunk * pp + t.stage;
      const int from = (t.backward ? vs + 1 : vs - 1) % pp;
      const double posted_or_start = in.transfer_start - in.recv_wait();
      recv_waits = recv_waits || posted_or_start != in.transfer_start;
      transfers[s][t.backward ? 1 : 0].emplace_back(in.transfer_start, in.ready);
      transfers[from][t.backward ? 3 : 2].emplace_back(in.transfer_start, in.ready);
      profiled[s][t.backward ? 1 : 0].emplace_back(posted_or_start, in.ready);
      profiled[from][t.backward ? 3 : 2].emplace_back(in.transfer_start, in.ready);
    }
  }
  pred.stages.reserve(pp);
  // Tasks of a kind have identical runs: count them, then add each run's breakdown once. A stage
  // with the same runs and counts as the one before it (the middle stages) has the same sum.
  thread_local std::vector<std::array<double, 4>> count,
      prev_count;  // per chunk: forward, backward, last backward, first forward (if its own)
  // Combined 1F1B: per (forward chunk x v + backward chunk), the pairs run
  thread_local std::vector<double> pair_count, prev_pair_count;
  Breakdown runs_sum;
  for (int s = 0; s < pp; ++s) {
    busy.clear();
    busy.reserve(order[s].size());
    count.assign(index[s].size(), {0, 0, 0, 0});
    pair_count.assign(runs.pair_index.empty() ? 0 : runs.pair_index[s].size(), 0.0);
    for (std::size_t k = 0; k < order[s].size(); ++k) {
      const PipelineTask& t = order[s][k];
      if (t.pair == kPairTail) continue;  // with its head
      // a stage runs its tasks one after another: sorted, disjoint
      if (t.pair == kPairHead) {
        const PipelineTask& u = order[s][k + 1];
        pair_count[static_cast<std::size_t>(t.chunk) * v + u.chunk] += 1;
        busy.emplace_back(t.start, std::max(t.end, u.end));
        continue;
      }
      const bool last = t.backward && last_of_round(t);
      const bool first = !t.backward && first_of_round(t) && runs_of(s, t.chunk).has_fwd_first;
      count[t.chunk][first ? 3 : !t.backward ? 0 : last ? 2 : 1] += 1;
      busy.emplace_back(t.start, t.end);
    }
    double waited = steps[s].wait;  // for stragglers, over the iteration
    for (std::size_t c = 0; c < index[s].size(); ++c) {
      const ChunkRuns& r = runs_of(s, static_cast<int>(c));
      waited += count[c][0] * r.fwd.wait + count[c][1] * r.bwd.wait +
                count[c][2] * r.bwd_last.wait + count[c][3] * r.fwd_first.wait;
    }
    for (std::size_t k = 0; k < pair_count.size(); ++k)
      if (pair_count[k] > 0) waited += pair_count[k] * runs.pairs[runs.pair_index[s][k]].run.wait;
    if (s == 0 || index[s] != index[s - 1] || count != prev_count ||
        pair_count != prev_pair_count) {
      runs_sum = Breakdown{};
      for (std::size_t c = 0; c < index[s].size(); ++c) {
        const ChunkRuns& r = runs_of(s, static_cast<int>(c));
        const std::array<const Breakdown*, 6> parts = {
            &r.fwd_in, &r.bwd_in, &r.bwd_last_in, &r.bwd_tail, &r.bwd_last_tail, &r.fwd_first_in};
        const std::array<double, 6> times = {count[c][0], count[c][1], count[c][2],
                                             count[c][1], count[c][2], count[c][3]};
        for (std::size_t k = 0; k < parts.size(); ++k) {
          if (times[k] == 0) continue;
          Breakdown part = k == 3 || k == 4 ? as_overlapped(*parts[k]) : *parts[k];
          part.scale(times[k]);
          runs_sum.add(part);
        }
      }
      for (std::size_t k = 0; k < pair_count.size(); ++k) {
        if (pair_count[k] == 0) continue;
        const PairRun& pr = runs.pairs[runs.pair_index[s][k]];
        for (Breakdown part : {pr.in, as_overlapped(pr.tail)}) {
          part.scale(pair_count[k]);
          runs_sum.add(part);
        }
      }
    }
    prev_count.swap(count);
    prev_pair_count.swap(pair_count);
    Breakdown b = runs_sum;
    // The stage's transfers: all of them (the pipeline group), its receives (lists 0 and 1) and
    // its sends (2 and 3), each collective on its own as a profiler lists recv and send (both
    // were booked as send, and the seeds' receive headline read an empty recv).
    // (the step's span too, as a task's: the last backward's send may run beside it; it was
    // exposed there, where the trace has it beside the step's compute, found 2026-11-30)
    busy.emplace_back(step_start[s], step_start[s] + steps[s].end);
    const auto sides = union_and_overlap_sides(transfers[s], busy);
    busy.pop_back();
    const auto [p2p_total, p2p_hidden] = sides[0];
    // (the union's length does not depend on the busy list)
    const std::array<std::pair<double, double>, 3> prof_sides =
        recv_waits ? union_and_overlap_sides(profiled[s], {}) : sides;
    const double p2p_profiled = prof_sides[0].first;
    b.profiler_comm += p2p_profiled;
    b.by_group[CommGroup::pipeline].profiler += p2p_profiled;
    b.comm += p2p_total;
    b.overlapped += p2p_hidden;
    b.exposed += p2p_total - p2p_hidden;
    b.by_group[CommGroup::pipeline].total += p2p_total;
    b.by_group[CommGroup::pipeline].exposed += p2p_total - p2p_hidden;
    for (const auto& [c, k] : {std::pair{Collective::recv, 1}, std::pair{Collective::send, 2}}) {
      const auto [total, hidden] = sides[k];
      if (total <= 0 && prof_sides[k].first <= 0) continue;
      b.by_collective[c].total += total;
      b.by_collective[c].exposed += total - hidden;
      b.by_collective[c].profiler += prof_sides[k].first;
    }
    // The wait for gradient reduction after the last task of each schedule (the iteration's
    // one, or each of several: ParallelPlan::pipeline_rounds): exposed, not overlapped, less the
    // tails' own waits for stragglers (their idle), which the causal view counts as idle and the
    // profiler's view as communication (they were booked as exposed: more exposed time than
    // the one group's, found by probing, 2026-11-30); at most the communication booked as
    // overlapped. (That straggler wait is idle, but no pipeline bubble.) A schedule before
    // another ends as the iteration does, its wait then followed by the step's head of
    // reductions (below) before the next schedule's first task.
    // The tails: the last backwards that end the schedule's tasks (found once, used twice).
    // Memory copies in the tails (FSDP's CPU offload: gradient shards copied out after their
    // reduction) are the run's memcpy already: neither the wait nor idle.
    thread_local std::vector<const Breakdown*> tails;
    double tail_wait = 0, tail_stragglers = 0, tail_copies = 0;
    const std::size_t stage_per_round = order[s].size() / rounds;
    for (int r = 0; r < rounds; ++r) {
      const bool final = r + 1 == rounds;
      const std::size_t at = static_cast<std::size_t>(s) * (rounds - 1) + r;
      const double done = final ? ready[s] : round_ready[at];
      const double last = final ? last_task_end[s] : round_last[at];
      tails.clear();
      double tail_idle = 0, tail_copy = 0;
      for (std::size_t k = r * stage_per_round; k < (r + 1) * stage_per_round; ++k) {
        const PipelineTask& t = order[s][k];
        if (t.backward && last_of_round(t) && t.end == last) {
          tails.push_back(&runs_of(s, t.chunk).bwd_last_tail);
          tail_idle = std::max(tail_idle, tails.back()->idle);
          tail_copy = std::max(tail_copy, tails.back()->memcpy);
        }
      }
      const double gap = std::max(0.0, done - last);
      const double copies = std::min(gap, tail_copy);
      tail_copies += copies;
      const double wait = std::min(std::max(0.0, gap - tail_idle - copies), b.overlapped);
      tail_wait += wait;
      tail_stragglers += std::min(tail_idle, gap);
      b.overlapped -= wait;
      b.exposed += wait;
      for (const Breakdown* tail : tails) {
        tail->by_group.for_each([&](CommGroup g, const CommShare& share) {
          b.by_group[g].exposed += std::min(share.total, wait);
        });
        tail->by_collective.for_each([&](Collective c, const CommShare& share) {
          b.by_collective[c].exposed += std::min(share.total, wait);
        });
      }
    }
    double round_heads = 0;
    if (rounds > 1 && !runs.round_ends.empty()) {
      Breakdown heads = runs.round_end_in[s];
      heads.scale(rounds - 1);
      b.add(heads);
      waited += (rounds - 1) * runs.round_ends[s].wait;
      round_heads = (rounds - 1) * runs.round_ends[s].end;
    }
    // Interleaved chunks' parameter gathers, dispatched ahead: each chunk's all of them, the
    // part its first forward waited for exposed (as the tail's wait), the rest hidden.
    double gather_wait = 0;
    if (ahead)
      for (std::size_t k = 0; k < order[s].size(); ++k) {
        const PipelineTask& t = order[s][k];
        if (!gathered_ahead(t)) continue;
        const double g = runs_of(s, t.chunk).ahead_gather;
        const TaskInput in = input_of(s, k);
        const double w = std::min(g, std::max(0.0, t.start - std::max(in.posted, in.ready)));
        gather_wait += w;
        for (CommShare* share :
             {&b.by_group[CommGroup::data], &b.by_collective[Collective::all_gather]}) {
          share->total += g;
          share->exposed += w;
          share->profiler += g;
        }
        b.comm += g;
        b.profiler_comm += g;
        b.exposed += w;
        b.overlapped += g - w;
      }
    // Idle inside the runs: collectives waiting for stragglers (nothing else leaves gaps there).
    const double idle_inside = b.idle;
    const Breakdown& step = runs.step_in[s];
    b.add(step);
    const double waiting = step_start[s] - ready[s];  // for the partner's embedding gradient
    const double busy_time = length(busy) + (p2p_total - p2p_hidden) + tail_wait + tail_copies +
                             gather_wait + round_heads + steps[s].end;
    b.wall = T;
    const double outside = std::max(0.0, T - busy_time);
    b.idle = outside + idle_inside + step.idle;
    b.bubble = pp > 1 ? std::max(0.0, outside - waiting - overhead - tail_stragglers) : 0.0;
    StagePrediction sp;
    sp.stage = s;
    sp.end = step_start[s] + steps[s].end;
    sp.breakdown = b;
    pred.stages.push_back(sp);
    pred.mean.add(b);
    pred.straggler_wait += waited / pp;
  }
  pred.mean.scale(1.0 / pp);

  // (5) the full timeline, when asked for
  if (timeline) {
    Timeline& tl = pred.timeline;
    const std::uint32_t send_name = tl.intern("pp_transfer");
    for (int s = 0; s < pp; ++s) {
      tl.rank_names[s] =
          "stage " + std::to_string(s) + " (" + std::to_string(roles[s].ranks) + " ranks)";
      double data_free = 0;
      std::vector<double> data_starts;
      for (std::size_t j = 0; j < order[s].size(); ++j) {
        const PipelineTask& t = order[s][j];
        const bool tail = t.pair == kPairTail;  // its ops are in the pair's run
        static const ListRun kNoRun;
        const PairRun* pair = t.pair == kPairHead ? &pair_of(t) : nullptr;
        const ListRun& run = tail ? kNoRun : pair ? pair->run : run_of(t);
        // a pair's events: each of its micro-batch
        const std::vector<std::uint8_t>* side = pair ? &pair->backward : nullptr;
        const int other_mb = side ? order[s][j + 1].microbatch : t.microbatch;
        data_starts.clear();
        // An interleaved chunk's gathers dispatched ahead: where they ran, before the task.
        const bool before = gathered_ahead(t);
        const double shift =
            before ? gathered[static_cast<std::size_t>(s) * v + t.chunk] - run.data_end : 0.0;
        if (run.data_first >= 0 && !before)
          data_free = queue_data(run, t.start + host, data_free, &data_starts);
        std::size_t k = 0;
        for (std::size_t i = 0; i < run.events.size(); ++i) {
          Event e = run.events[i];
          e.rank = s;
          // data-parallel events where the queue puts them (the run's own times otherwise)
          if (before && e.stream == kDataStream)
            e.start += shift;
          else
            e.start = e.stream == kDataStream ? data_starts[k++] - host : e.start + t.start;
          e.microbatch = side && (*side)[i] ? other_mb : t.microbatch;
          tl.events.push_back(e);
        }
        if (const TaskInput in = input_of(s, j); in.ready > in.transfer_start) {
          // The transfer occupies the receiver's and the sender's pipeline stream.
          const int vs = t.chunk * pp + t.stage;
          const int from = (t.backward ? vs + 1 : vs - 1) % pp;
          Event e;
          e.rank = s;
          e.stream = kPipelineStream;
          e.start = in.transfer_start;
          e.dur = in.ready - in.transfer_start;
          e.kind = EventKind::comm;
          e.has_collective = true;
          e.collective = Collective::recv;
          e.group = CommGroup::pipeline;
          // The size of the activation (forward) or its gradient (backward) that describe
          // counts: the recv op of the task's list.
          const ChunkRuns& r = runs_of(t.stage, t.chunk);
          e.bytes = t.backward ? r.bwd_p2p_bytes : r.fwd_p2p_bytes;
          e.group_size = 2;
          e.name = send_name;
          e.microbatch = t.microbatch;
          e.wait = in.recv_wait();  // the receiver posted it before the sender was there
          tl.events.push_back(e);
          e.rank = from;
          e.collective = Collective::send;
          e.wait = 0;
          tl.events.push_back(e);
        }
      }
      for (int r = 0; r + 1 < rounds; ++r)
        for (Event e : runs.round_end(s).events) {
          e.rank = s;
          e.start += round_ready[static_cast<std::size_t>(s) * (rounds - 1) + r];
          tl.events.push_back(e);
        }
      for (Event e : steps[s].events) {
        e.rank = s;
        e.start += step_start[s];
        tl.events.push_back(e);
      }
    }
    // Each call on the track of what it is (expert, context, pipeline receive: tracks past the
    // streams that ran them, simulator.h), and the tracks that hold events named; the compute
    // track always.
    static const char* kTracks[] = {
        "compute",         "tensor-parallel comm", "data-parallel comm",   "pipeline send",
        "embedding comm",  "host copies",          "expert-parallel comm", "context-parallel comm",
        "pipeline receive"};
    for (Event& e : tl.events) {
      if (e.kind != EventKind::comm) continue;
      if (e.group == CommGroup::expert)
        e.stream = kExpertStream;
      else if (e.group == CommGroup::context)
        e.stream = kContextTrack;
      else if (e.group == CommGroup::pipeline && e.collective == Collective::recv)
        e.stream = kPipelineRecvTrack;
    }
    for (int s = 0; s < pp; ++s) tl.stream_names[{s, kComputeStream}] = kTracks[kComputeStream];
    for (const Event& e : tl.events)
      if (e.stream >= 0 && e.stream < static_cast<std::int32_t>(std::size(kTracks)))
        tl.stream_names.try_emplace({e.rank, e.stream}, kTracks[e.stream]);
  }
  return pred;
}

}  // namespace sim_detail

namespace {
// The ops of each block of chunk ch in `list` and their dependencies inside the block, into
// g[layer - ch.first_layer].
void block_graphs_of(const OpList& list, const Chunk& ch, std::vector<BlockGraph>& g) {
  constexpr auto kOut = std::numeric_limits<std::uint32_t>::max();
  g.assign(static_cast<std::size_t>(ch.layers), BlockGraph{});
  thread_local std::vector<std::uint32_t> local;  // op -> its index in its block, or kOut
  local.assign(list.size(), kOut);
  for (std::uint32_t i = 0; i < list.size(); ++i) {
    const int k = list[i].layer - ch.first_layer;
    if (k < 0 || k >= ch.layers) continue;
    BlockGraph& b = g[static_cast<std::size_t>(k)];
    local[i] = static_cast<std::uint32_t>(b.ops.size());
    b.ops.push_back(list[i]);
    auto& d = b.deps.emplace_back();
    for (auto j : list.deps_of(i))
      if (local[j] != kOut && list[j].layer == list[i].layer) d.push_back(local[j]);
  }
}
// Whether two blocks cost the same: ops that cost the same, the same dependencies.
bool same_block(const BlockGraph& a, const BlockGraph& b) {
  return a.deps == b.deps &&
         std::equal(a.ops.begin(), a.ops.end(), b.ops.begin(), b.ops.end(), same_cost_op);
}
// The longest path of g's dependencies from a compute op to a compute op, each op timed by
// `costs` (host-side work, data-parallel, embedding and pipeline collectives and ops of one
// micro-batch alone count as nothing).
double longest_compute_path(const BlockGraph& g, const Costs& costs) {
  // Combined 1F1B (overlap_moe_ep_comm): another micro-batch's compute may run beside any
  // collective, so only the kernels bound a block.
  const bool kernels_only = costs.sc.plan.overlap_moe_ep_comm;
  constexpr double kNone = -1;
  thread_local std::vector<double> best;  // longest path from a compute op ending at op i
  best.assign(g.ops.size(), kNone);
  double out = 0;
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    const Op& op = g.ops[i];
    const bool compute = op.kind == OpKind::compute;
    double before = compute ? 0 : kNone;
    double ring = kNone;  // a forward CP ring's path, which only the core's last step waits for
    std::int32_t ring_steps = 1;
    for (auto d : g.deps[i]) {
      if (compute && g.ops[d].tag == OpTag::cp_ring_steps) {
        ring = std::max(ring, best[d]);
        ring_steps = g.ops[d].messages + 1;
        continue;
      }
      before = std::max(before, best[d]);
    }
    if (before == kNone) continue;
    double t = 0;
    if (!op.last_microbatch_only && !op.first_microbatch_only &&
        ((compute && op.compute != ComputeClass::host) ||
         (!kernels_only && (op.group == CommGroup::tensor || op.group == CommGroup::expert ||
                            op.group == CommGroup::context))))
      t = costs.of(op);
    best[i] = before + t;
    if (ring != kNone) best[i] = std::max(best[i], ring + t / ring_steps);
    if (compute) out = std::max(out, best[i]);
  }
  return out;
}
}  // namespace

BlockGraphs block_graphs(const Workload& w) {
  const int layers = w.scenario.model.layers();
  BlockGraphs out;
  out.forward.assign(static_cast<std::size_t>(layers), 0);
  out.backward.assign(static_cast<std::size_t>(layers), 0);
  auto intern = [&](BlockGraph g) {
    for (std::size_t k = 0; k < out.graphs.size(); ++k)
      if (same_block(out.graphs[k], g)) return static_cast<std::uint32_t>(k);
    out.graphs.push_back(std::move(g));
    return static_cast<std::uint32_t>(out.graphs.size() - 1);
  };
  std::vector<BlockGraph> f, b;
  for (const Role& role : w.roles)
    for (const Chunk& ch : role.chunks) {
      block_graphs_of(ch.forward, ch, f);
      block_graphs_of(ch.backward, ch, b);
      for (int k = 0; k < ch.layers; ++k) {
        const auto l = static_cast<std::size_t>(ch.first_layer + k);
        out.forward[l] = intern(std::move(f[static_cast<std::size_t>(k)]));
        out.backward[l] = intern(std::move(b[static_cast<std::size_t>(k)]));
      }
    }
  return out;
}

double compute_lower_bound(const Scenario& sc, const Workload& layout, const BlockGraphs& blocks) {
  const Costs costs(sc);
  thread_local std::vector<double> path;
  path.resize(blocks.graphs.size());
  for (std::size_t k = 0; k < blocks.graphs.size(); ++k)
    path[k] = longest_compute_path(blocks.graphs[k], costs);
  auto sum = [&](const std::vector<std::uint32_t>& of, const Chunk& ch) {
    double t = 0;
    for (int l = ch.first_layer; l < ch.first_layer + ch.layers; ++l)
      t += path[of[static_cast<std::size_t>(l)]];
    return t;
  };
  // Every forward of a chunk the same floor, and every backward.
  return sim_detail::pipeline_floor(
      sc.plan.pp, sc.plan.virtual_stages, static_cast<double>(sc.plan.grad_accum),
      sim_detail::host_half(sc),
      [&](int s, int c) {
        const Chunk& ch =
            layout.roles[static_cast<std::size_t>(s)].chunks[static_cast<std::size_t>(c)];
        const double f = sum(blocks.forward, ch), b = sum(blocks.backward, ch);
        return sim_detail::ChunkFloor{f, f, b, b};
      },
      [](int) { return 0.0; });
}

Prediction simulate(const Workload& w, const SimOptions& opt) {
  // A calibration other than the system's: a copy of the scenario with it (the ops are not copied).
  Scenario calibrated;
  const bool own = opt.calibration || opt.scale;
  if (own) {
    calibrated = w.scenario;
    if (opt.calibration) calibrated.system.calibration = *opt.calibration;
    if (opt.scale) calibrated.system.scale = *opt.scale;
  }
  const Scenario& sc = own ? calibrated : w.scenario;
  // resolve_scenario keeps these within the limits; a hand-made plan past them is a bug.
  CS_CHECK(std::int64_t{sc.plan.pp} * sc.plan.virtual_stages * w.microbatches <=
           limits::kMaxPipelineTasks);
  CS_CHECK(!opt.timeline || timeline_events(w) <= limits::kMaxTraceEvents);
  Prediction pred;
  Timeline* names = opt.timeline ? &pred.timeline : nullptr;
  // Per-thread scratch: a sweep reuses the runs' storage instead of allocating it per plan.
  thread_local sim_detail::Runs runs;
  sim_detail::prepare_runs(sc, w.roles, w.microbatches > 1, names, runs);
  return sim_detail::finish(sc, w.microbatches, w.roles, runs, opt.timeline, std::move(pred));
}

std::int64_t timeline_events(const Workload& w) {
  std::int64_t n = 0;
  for (const auto& role : w.roles) {
    std::int64_t per_microbatch = 0;
    std::int64_t once = static_cast<std::int64_t>(role.step.size());
    for (const auto& c : role.chunks) {
      per_microbatch += static_cast<std::int64_t>(c.forward.size() + c.backward.size()) + 2;
      if (!c.forward_first.empty())
        once += static_cast<std::int64_t>(c.forward_first.size() - c.forward.size());
    }
    // (each schedule's first forwards and, at most, a step's worth of reductions per schedule)
    n += per_microbatch * w.microbatches + once * w.scenario.plan.pipeline_rounds;
  }
  return n;
}

Status check_timeline_size(const Workload& w) {
  return limits::check_at_most("--trace", timeline_events(w), limits::kMaxTraceEvents,
                               "events in one trace, commscope's limit; use fewer micro-batches "
                               "or layers");
}

}  // namespace commscope
