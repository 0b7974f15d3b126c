// Interval arithmetic for breakdowns: each category's events are merged into disjoint
// intervals, then intersected with a two-pointer sweep. O(n log n) in the events.
#include "commscope/timeline/timeline.h"

#include "commscope/timeline/intervals.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <set>

namespace commscope {

std::string_view to_string(EventKind k) {
  switch (k) {
    case EventKind::compute:
      return "compute";
    case EventKind::comm:
      return "comm";
    case EventKind::memcpy:
      return "memcpy";
  }
  return "?";
}

std::uint32_t Timeline::intern(std::string_view name) {
  auto it = index_.find(std::string(name));
  if (it != index_.end()) return it->second;
  auto id = static_cast<std::uint32_t>(names_.size());
  names_.emplace_back(name);
  index_.emplace(names_.back(), id);
  return id;
}

std::vector<std::int32_t> Timeline::ranks() const {
  std::set<std::int32_t> r;
  for (const auto& e : events) r.insert(e.rank);
  return {r.begin(), r.end()};
}

void Breakdown::add(const Breakdown& o) {
  wall += o.wall, compute += o.compute, comm += o.comm, overlapped += o.overlapped;
  exposed += o.exposed, memcpy += o.memcpy, idle += o.idle, bubble += o.bubble;
  profiler_comm += o.profiler_comm;
  auto add_share = [](CommShare& a, const CommShare& b) {
    a.total += b.total, a.exposed += b.exposed, a.profiler += b.profiler;
  };
  for (std::size_t i = 0; i < by_group.v.size(); ++i) add_share(by_group.v[i], o.by_group.v[i]);
  for (std::size_t i = 0; i < by_collective.v.size(); ++i)
    add_share(by_collective.v[i], o.by_collective.v[i]);
}

void Breakdown::scale(double k) {
  wall *= k, compute *= k, comm *= k, overlapped *= k, exposed *= k, memcpy *= k, idle *= k,
      bubble *= k, profiler_comm *= k;
  for (auto& s : by_group.v) s.total *= k, s.exposed *= k, s.profiler *= k;
  for (auto& s : by_collective.v) s.total *= k, s.exposed *= k, s.profiler *= k;
}

namespace {

// Per-thread scratch lists for breakdown_of: cleared, not freed, between calls (a sweep of
// plans computes thousands of breakdowns).
struct Scratch {
  Intervals c, y, other, prof;  // prof: every call from entry (start - wait) to end
  std::array<Intervals, kCommGroupCount> g, pg;
  std::array<Intervals, kCommGroupCount * 8> k,
      pk;  // by (group, collective): one stream each, so in time order
  Intervals u, pu, tmp;
  void clear() {
    for (Intervals* v : {&c, &y, &other, &prof, &u, &pu, &tmp}) v->clear();
    for (auto& v : g) v.clear();
    for (auto& v : pg) v.clear();
    for (auto& v : k) v.clear();
    for (auto& v : pk) v.clear();
  }
};

// into = united(into, part) with part merged in place first (into empty: part's intervals).
void unite_into(Intervals& into, Intervals& part, Intervals& tmp) {
  merge_in_place(part);
  if (into.empty()) {
    into.assign(part.begin(), part.end());
    return;
  }
  tmp.clear();
  tmp.reserve(into.size() + part.size());
  std::merge(into.begin(), into.end(), part.begin(), part.end(), std::back_inserter(tmp));
  merge_in_place(tmp);
  into.swap(tmp);
}

template <class Pred>
Breakdown breakdown_of(Pred&& for_each_event, double t0, double t1) {
  // Events of one stream come in time order, so per-stream lists are usually sorted already:
  // lists are unioned by linear merges, and sorted only when they are not.
  thread_local Scratch sc;
  sc.clear();
  Intervals &c = sc.c, &y = sc.y, &other = sc.other, &prof = sc.prof;
  auto &g = sc.g, &pg = sc.pg;
  auto &k = sc.k, &pk = sc.pk;
  if (t1 <= t0) {  // the window the events span
    double lo = 1e300, hi = -1e300;
    for_each_event([&](const Event& e) { lo = std::min(lo, e.start), hi = std::max(hi, e.end()); });
    t0 = lo, t1 = hi;
  }
  Breakdown b;
  if (!(t1 > t0)) return b;
  bool waits = false;  // whether any call waited: else the profiler's lists are the others
  for_each_event([&](const Event& e) {
    double s = std::max(e.start, t0), f = std::min(e.end(), t1);
    if (f <= s) {
      // A call that transferred nothing in the window may still have waited in it.
      const double ps = std::max(e.start - std::max(e.wait, 0.0), t0);
      if (e.kind != EventKind::comm || f <= ps) return;
      waits = true;
      prof.emplace_back(ps, f);
      if (e.has_collective) {
        const auto gi = static_cast<std::size_t>(e.group);
        pg[gi].emplace_back(ps, f);
        pk[gi * 8 + static_cast<std::size_t>(e.collective)].emplace_back(ps, f);
      }
      return;
    }
    switch (e.kind) {
      case EventKind::compute:
        c.emplace_back(s, f);
        break;
      case EventKind::memcpy:
        y.emplace_back(s, f);
        break;
      case EventKind::comm: {
        const double ps = std::max(e.start - std::max(e.wait, 0.0), t0);
        waits |= ps != s;
        prof.emplace_back(ps, f);
        if (e.has_collective) {
          const auto gi = static_cast<std::size_t>(e.group);
          const auto ki = gi * 8 + static_cast<std::size_t>(e.collective);
          g[gi].emplace_back(s, f), pg[gi].emplace_back(ps, f);
          k[ki].emplace_back(s, f), pk[ki].emplace_back(ps, f);
        } else {
          other.emplace_back(s, f);
        }
        break;
      }
    }
  });
  merge_in_place(c);
  merge_in_place(y);
  Intervals& m = other;
  merge_in_place(m);
  b.wall = t1 - t0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (pg[i].empty()) continue;  // every call of the group is in pg, with or without a wait
    if (g[i].empty()) {
      merge_in_place(pg[i]);
      b.by_group.v[i].profiler = length(pg[i]);
      continue;
    }
    Intervals& u = g[i];
    merge_in_place(u);
    const double tot = length(u);
    if (waits) {
      merge_in_place(pg[i]);
      b.by_group.v[i].profiler = length(pg[i]);
    } else {
      b.by_group.v[i].profiler = tot;  // the same intervals
    }
    b.by_group.v[i].total = tot, b.by_group.v[i].exposed = tot - overlap(c, u);
    unite_into(m, u, sc.tmp);
  }
  for (std::size_t col = 0; col < 8; ++col) {
    Intervals &u = sc.u, &pu = sc.pu;
    u.clear(), pu.clear();
    for (std::size_t grp = 0; grp < kCommGroupCount; ++grp) {
      Intervals& ppart = pk[grp * 8 + col];
      if (waits && !ppart.empty()) unite_into(pu, ppart, sc.tmp);
      Intervals& part = k[grp * 8 + col];
      if (!part.empty()) unite_into(u, part, sc.tmp);
    }
    if (u.empty()) {
      b.by_collective.v[col].profiler = waits ? length(pu) : 0.0;
      continue;
    }
    const double tot = length(u);
    b.by_collective.v[col].profiler = waits ? length(pu) : tot;
    b.by_collective.v[col].total = tot, b.by_collective.v[col].exposed = tot - overlap(c, u);
  }
  b.compute = length(c);
  b.comm = length(m);
  b.overlapped = overlap(c, m);
  b.exposed = b.comm - b.overlapped;
  if (waits) {
    merge_in_place(prof);
    b.profiler_comm = length(prof);
  } else {
    b.profiler_comm = b.comm;  // prof holds the same intervals as m
  }
  Intervals cm = united(c, m);
  double busy_cm = length(cm);
  b.memcpy = length(y) - overlap(cm, y);
  b.idle = std::max(0.0, b.wall - busy_cm - b.memcpy);
  return b;
}

}  // namespace

Breakdown breakdown(const Timeline& t, std::int32_t rank, double t0, double t1) {
  return breakdown_of(
      [&](auto&& f) {
        for (const auto& e : t.events)
          if (e.rank == rank) f(e);
      },
      t0, t1);
}

// Events that never overlap (a compute chain with blocking collectives, the common case for a
// forward pass): the breakdown is plain sums. A call's wait for its peers (Event::wait) may
// precede it as long as it overlaps nothing before it either (a straggler's wait in a blocking
// chain): it then counts in the profiler's view only. Returns false when any two events overlap.
bool sequential_breakdown(const std::vector<Event>& events, double t0, double t1, Breakdown& b) {
  double last_end = -1e300;
  for (const auto& e : events) {
    if (e.start < last_end) return false;
    if (e.wait > 0 && (e.kind != EventKind::comm || e.start - e.wait < last_end))
      return false;  // a wait that overlaps what came before
    last_end = e.end();
  }
  if (t1 <= t0) {
    if (events.empty()) return true;
    t0 = events.front().start, t1 = last_end;
  }
  b = Breakdown{};
  b.wall = t1 - t0;
  double busy = 0;
  for (const auto& e : events) {
    const double f = std::min(e.end(), t1);
    const double d = f - std::max(e.start, t0);
    if (e.kind == EventKind::comm) {
      // the call as a profiler records it, from its entry (as breakdown_of computes it)
      const double pd = f - std::max(e.start - std::max(e.wait, 0.0), t0);
      if (pd > 0) {
        b.profiler_comm += pd;
        if (e.has_collective) {
          b.by_group[e.group].profiler += pd;
          b.by_collective[e.collective].profiler += pd;
        }
      }
    }
    if (d <= 0) continue;
    busy += d;
    switch (e.kind) {
      case EventKind::compute:
        b.compute += d;
        break;
      case EventKind::memcpy:
        b.memcpy += d;
        break;
      case EventKind::comm:
        b.comm += d;
        if (e.has_collective) {
          for (CommShare* s : {&b.by_group[e.group], &b.by_collective[e.collective]})
            s->total += d, s->exposed += d;
        }
        break;
    }
  }
  b.exposed = b.comm;
  b.idle = std::max(0.0, b.wall - busy);
  return true;
}

Breakdown breakdown(const std::vector<Event>& events, double t0, double t1) {
  Breakdown fast;
  if (sequential_breakdown(events, t0, t1, fast)) return fast;
  return breakdown_of(
      [&](auto&& f) {
        for (const auto& e : events) f(e);
      },
      t0, t1);
}

}  // namespace commscope
