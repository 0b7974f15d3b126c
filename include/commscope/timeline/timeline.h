// Timeline: what happened (or would happen) in one or more iterations: events with rank,
// stream, start, duration, kind, name, collective, bytes and group (the second shared
// language). The simulator writes one, benchmarks and the trainer record one, a trace reader
// reads one; breakdown() turns any of them into where the time went.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "commscope/spec/vocabulary.h"

namespace commscope {

enum class EventKind : std::uint8_t { compute, comm, memcpy };
std::string_view to_string(EventKind k);

struct Event {
  std::int32_t rank = 0;    // process (a rank, or a pipeline stage standing for its ranks)
  std::int32_t stream = 0;  // stream (thread/track) within the rank
  double start = 0;         // seconds
  double dur = 0;           // seconds
  EventKind kind = EventKind::compute;
  bool has_collective = false;
  Collective collective = Collective::all_reduce;
  CommGroup group = CommGroup::data;
  std::uint32_t name = 0;  // Timeline::names index
  std::int32_t microbatch = -1;
  std::int32_t layer = kNoLayer;
  double bytes = 0;    // comm: nccl-tests size
  int group_size = 0;  // comm: ranks in the group (0: unknown)
  // comm: seconds this rank spent in the call before the transfer could begin, waiting for its
  // peers (a profiler records the kernel from start - wait to end; the causal view from start).
  double wait = 0;
  // A range on a track of its own that marks work rather than doing it, written to Chrome traces
  // with a category that no reader of a breakdown counts: `range` (the trainer's forward- and
  // backward-step ranges; analyze counted a pipeline run's ranges as compute) with cat "range";
  // `step` (a training step, named ProfilerStep#N) with cat "user_annotation", as PyTorch's
  // profiler writes its steps, so that analyze splits the trace by them.
  enum class Marker : std::uint8_t { none, range, step };
  Marker marker = Marker::none;
  double end() const { return start + dur; }
};

class Timeline {
 public:
  std::vector<Event> events;
  std::map<std::int32_t, std::string> rank_names;                             // process names
  std::map<std::pair<std::int32_t, std::int32_t>, std::string> stream_names;  // thread names

  std::uint32_t intern(std::string_view name);
  const std::string& name(const Event& e) const { return names_[e.name]; }
  const std::vector<std::string>& names() const { return names_; }
  std::vector<std::int32_t> ranks() const;

 private:
  std::vector<std::string> names_;
  std::unordered_map<std::string, std::uint32_t> index_;
};

// Time of one process group's or collective's communication on a rank.
struct CommShare {
  double total = 0;     // union of its events
  double exposed = 0;   // the part not overlapped by compute
  double profiler = 0;  // union of its events as a profiler records them (wait for peers included)
};

// Communication shares indexed by an enum (process group or collective): a fixed array, not a
// map, since breakdowns are added up thousands of times per prediction.
template <class E, std::size_t N>
struct ShareTable {
  std::array<CommShare, N> v{};
  CommShare& operator[](E e) { return v[static_cast<std::size_t>(e)]; }
  const CommShare& operator[](E e) const { return v[static_cast<std::size_t>(e)]; }
  // Calls f(E, const CommShare&) for every entry with any time.
  template <class F>
  void for_each(F&& f) const {
    for (std::size_t i = 0; i < N; ++i)
      if (v[i].total > 0 || v[i].exposed > 0 || v[i].profiler > 0) f(static_cast<E>(i), v[i]);
  }
  template <class F>
  void for_each(F&& f) {
    for (std::size_t i = 0; i < N; ++i)
      if (v[i].total > 0 || v[i].exposed > 0 || v[i].profiler > 0) f(static_cast<E>(i), v[i]);
  }
};
using GroupShares = ShareTable<CommGroup, kCommGroupCount>;
using CollectiveShares = ShareTable<Collective, kCollectiveCount>;

// Where a rank's time went in a window. compute + exposed_comm + memcpy_only + idle = wall;
// overlapped + exposed = comm. profiler_comm is communication as a profiler records it: each
// call from the moment the rank entered it (Event::wait before its start) to its end, so the
// wait for a peer (a pipeline stage's receive, a straggler's all-reduce) counts as communication
// there, while the causal view books it as bubble or idle.
struct Breakdown {
  double wall = 0;           // window length
  double compute = 0;        // union of compute events
  double comm = 0;           // union of communication events
  double overlapped = 0;     // communication while computing
  double exposed = 0;        // communication while not computing
  double memcpy = 0;         // memory copies while neither computing nor communicating
  double idle = 0;           // nothing at all
  double bubble = 0;         // the part of idle a pipeline schedule leaves (set by the simulator)
  double profiler_comm = 0;  // union of communication calls including their waits (>= comm)
  GroupShares by_group;
  CollectiveShares by_collective;

  // Adds another breakdown's times (a later, disjoint stretch of the same rank).
  void add(const Breakdown& o);
  void scale(double k);
};

// The breakdown of one rank's events in [t0, t1] (events are clipped to the window). With
// t1 <= t0 the window is that rank's first start to last end.
Breakdown breakdown(const Timeline& t, std::int32_t rank, double t0 = 0, double t1 = -1);

// The same over a plain list of events (all taken as one rank's).
Breakdown breakdown(const std::vector<Event>& events, double t0, double t1);

// The time communication runs in a simulated breakdown, as a union (<= the wall): comm, at most
// exposed + compute. The simulator books each backward's reduction tail as hidden behind later
// compute; per-micro-batch reductions that outlast that compute (ZeRO-2/3, FSDP on a slow
// network) then add up to more than a union, up to many times the iteration (issue 16). The
// share of the iteration during which communication runs is comm_running / wall.
inline double comm_running(const Breakdown& b) {
  return b.comm < b.exposed + b.compute ? b.comm : b.exposed + b.compute;
}
// The profiler's view cut by the same excess (profiler_comm - comm is the waits for peers).
inline double profiler_comm_running(const Breakdown& b) {
  return b.profiler_comm - (b.comm - comm_running(b));
}
// b with comm and profiler_comm as above (the shares a table prints).
inline Breakdown with_comm_running(Breakdown b) {
  const double excess = b.comm - comm_running(b);
  b.comm -= excess;
  b.profiler_comm -= excess;
  return b;
}

}  // namespace commscope
