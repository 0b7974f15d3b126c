// The breakdown's and the simulator's interval arithmetic against straightforward reference
// implementations (the code before the speed work of issue 11: copy, sort, merge, unite), on
// random event lists with and without waits: the results must be the same to the bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <iterator>
#include <random>
#include <vector>

#include "commscope/timeline/intervals.h"
#include "commscope/timeline/timeline.h"

namespace commscope {
namespace {

Intervals ref_merged(Intervals v) {
  std::sort(v.begin(), v.end());
  Intervals out;
  for (const auto& iv : v) {
    if (iv.second <= iv.first) continue;
    if (!out.empty() && iv.first <= out.back().second)
      out.back().second = std::max(out.back().second, iv.second);
    else
      out.push_back(iv);
  }
  return out;
}
double ref_length(const Intervals& v) {
  double s = 0;
  for (const auto& iv : v) s += iv.second - iv.first;
  return s;
}
double ref_overlap(const Intervals& a, const Intervals& b) {
  double s = 0;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    double lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (hi > lo) s += hi - lo;
    (a[i].second < b[j].second) ? ++i : ++j;
  }
  return s;
}
Intervals ref_united(const Intervals& a, const Intervals& b) {
  Intervals all = a;
  all.insert(all.end(), b.begin(), b.end());
  return ref_merged(std::move(all));
}

// The breakdown as first written: every list built, sorted and merged, the profiler's too.
Breakdown ref_breakdown(const std::vector<Event>& events, double t0, double t1) {
  Intervals c, y, other, prof;
  std::array<Intervals, 4> g, pg;
  std::array<Intervals, 32> k, pk;
  if (t1 <= t0) {
    double lo = 1e300, hi = -1e300;
    for (const auto& e : events) lo = std::min(lo, e.start), hi = std::max(hi, e.end());
    t0 = lo, t1 = hi;
  }
  Breakdown b;
  if (!(t1 > t0)) return b;
  for (const auto& e : events) {
    const double s = std::max(e.start, t0), f = std::min(e.end(), t1);
    const double ps = std::max(e.start - std::max(e.wait, 0.0), t0);
    if (f <= s) {
      if (e.kind != EventKind::comm || f <= ps) continue;
      prof.emplace_back(ps, f);
      if (e.has_collective) {
        const auto gi = static_cast<std::size_t>(e.group);
        pg[gi].emplace_back(ps, f);
        pk[gi * 8 + static_cast<std::size_t>(e.collective)].emplace_back(ps, f);
      }
      continue;
    }
    if (e.kind == EventKind::compute) {
      c.emplace_back(s, f);
    } else if (e.kind == EventKind::memcpy) {
      y.emplace_back(s, f);
    } else {
      prof.emplace_back(ps, f);
      if (e.has_collective) {
        const auto gi = static_cast<std::size_t>(e.group);
        const auto ki = gi * 8 + static_cast<std::size_t>(e.collective);
        g[gi].emplace_back(s, f), pg[gi].emplace_back(ps, f);
        k[ki].emplace_back(s, f), pk[ki].emplace_back(ps, f);
      } else {
        other.emplace_back(s, f);
      }
    }
  }
  c = ref_merged(c), y = ref_merged(y);
  Intervals m = ref_merged(other);
  b.wall = t1 - t0;
  for (std::size_t i = 0; i < 4; ++i) {
    if (pg[i].empty()) continue;
    b.by_group.v[i].profiler = ref_length(ref_merged(pg[i]));
    if (g[i].empty()) continue;
    const Intervals u = ref_merged(g[i]);
    const double tot = ref_length(u);
    b.by_group.v[i].total = tot, b.by_group.v[i].exposed = tot - ref_overlap(c, u);
    m = m.empty() ? u : ref_united(m, u);
  }
  for (std::size_t col = 0; col < 8; ++col) {
    Intervals u, pu;
    for (std::size_t grp = 0; grp < 4; ++grp) {
      if (!pk[grp * 8 + col].empty()) pu = ref_united(pu, ref_merged(pk[grp * 8 + col]));
      if (!k[grp * 8 + col].empty()) u = ref_united(u, ref_merged(k[grp * 8 + col]));
    }
    b.by_collective.v[col].profiler = ref_length(pu);
    if (u.empty()) continue;
    const double tot = ref_length(u);
    b.by_collective.v[col].total = tot, b.by_collective.v[col].exposed = tot - ref_overlap(c, u);
  }
  b.compute = ref_length(c);
  b.comm = ref_length(m);
  b.overlapped = ref_overlap(c, m);
  b.exposed = b.comm - b.overlapped;
  b.profiler_comm = ref_length(ref_merged(prof));
  const Intervals cm = ref_united(c, m);
  b.memcpy = ref_length(y) - ref_overlap(cm, y);
  b.idle = std::max(0.0, b.wall - ref_length(cm) - b.memcpy);
  return b;
}

// Bitwise equality of every field (a NaN would fail, as it should).
void expect_same(const Breakdown& a, const Breakdown& r) {
  auto same = [](double x, double y) { return std::memcmp(&x, &y, sizeof x) == 0; };
  EXPECT_TRUE(same(a.wall, r.wall)) << a.wall << " vs " << r.wall;
  EXPECT_TRUE(same(a.compute, r.compute)) << a.compute << " vs " << r.compute;
  EXPECT_TRUE(same(a.comm, r.comm)) << a.comm << " vs " << r.comm;
  EXPECT_TRUE(same(a.overlapped, r.overlapped)) << a.overlapped << " vs " << r.overlapped;
  EXPECT_TRUE(same(a.exposed, r.exposed)) << a.exposed << " vs " << r.exposed;
  EXPECT_TRUE(same(a.memcpy, r.memcpy)) << a.memcpy << " vs " << r.memcpy;
  EXPECT_TRUE(same(a.idle, r.idle)) << a.idle << " vs " << r.idle;
  EXPECT_TRUE(same(a.profiler_comm, r.profiler_comm))
      << a.profiler_comm << " vs " << r.profiler_comm;
  for (std::size_t i = 0; i < a.by_group.v.size(); ++i) {
    EXPECT_TRUE(same(a.by_group.v[i].total, r.by_group.v[i].total)) << "group " << i;
    EXPECT_TRUE(same(a.by_group.v[i].exposed, r.by_group.v[i].exposed)) << "group " << i;
    EXPECT_TRUE(same(a.by_group.v[i].profiler, r.by_group.v[i].profiler)) << "group " << i;
  }
  for (std::size_t i = 0; i < a.by_collective.v.size(); ++i) {
    EXPECT_TRUE(same(a.by_collective.v[i].total, r.by_collective.v[i].total)) << "coll " << i;
    EXPECT_TRUE(same(a.by_collective.v[i].exposed, r.by_collective.v[i].exposed)) << "coll " << i;
    EXPECT_TRUE(same(a.by_collective.v[i].profiler, r.by_collective.v[i].profiler)) << "coll " << i;
  }
}

// A rank's events as the simulator makes them: a compute stream and four comm streams, each
// in time order, overlapping across streams; collectives with waits when `waits`.
std::vector<Event> random_events(std::mt19937_64& rng, int n, bool waits, bool memcpy) {
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<Event> ev;
  double at[5] = {0, 0, 0, 0, 0};
  for (int i = 0; i < n; ++i) {
    Event e;
    const int s = static_cast<int>(rng() % 5);
    e.stream = s;
    e.start = at[s] + (u(rng) < 0.3 ? 0.0 : u(rng) * 1e-3);
    e.dur = u(rng) < 0.05 ? 0.0 : u(rng) * 2e-3;
    at[s] = e.end();
    if (s == 0) {
      e.kind = memcpy && u(rng) < 0.2 ? EventKind::memcpy : EventKind::compute;
    } else {
      e.kind = EventKind::comm;
      e.has_collective = u(rng) < 0.9;
      e.group = static_cast<CommGroup>(s - 1);
      e.collective = static_cast<Collective>(rng() % 8);
      if (waits && u(rng) < 0.7) e.wait = u(rng) * 3e-3;
    }
    ev.push_back(e);
  }
  return ev;
}

// The general path (breakdown of a rank of a timeline; the plain list's shortcut for events
// that never overlap is a sum, not this).
Breakdown general(const std::vector<Event>& ev, double t0, double t1) {
  Timeline t;
  t.events = ev;
  return breakdown(t, 0, t0, t1);
}

TEST(TimelineIntervals, BreakdownMatchesTheReferenceToTheBit) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 400; ++trial) {
    const bool waits = trial % 2 == 0, memcpy = trial % 3 == 0;
    const auto ev = random_events(rng, 1 + static_cast<int>(rng() % 120), waits, memcpy);
    SCOPED_TRACE(::testing::Message() << "trial " << trial);
    expect_same(general(ev, 0, -1), ref_breakdown(ev, 0, -1));  // the events' own window
    double hi = 0;
    for (const auto& e : ev) hi = std::max(hi, e.end());
    // windows that cut events (and leave some calls with only their wait inside)
    expect_same(general(ev, 0.3 * hi, 0.7 * hi), ref_breakdown(ev, 0.3 * hi, 0.7 * hi));
    expect_same(general(ev, 0, 0.5 * hi), ref_breakdown(ev, 0, 0.5 * hi));
  }
}

TEST(TimelineIntervals, BreakdownSeesWaitsWhenTheyMatter) {
  // The shortcut without waits must not hide a wait: a call whose wait overlaps nothing else.
  std::vector<Event> ev(2);
  ev[0].start = 0, ev[0].dur = 1;  // compute
  ev[1].kind = EventKind::comm, ev[1].has_collective = true;
  ev[1].group = CommGroup::data, ev[1].collective = Collective::all_reduce;
  ev[1].stream = 2, ev[1].start = 2, ev[1].dur = 1, ev[1].wait = 0.5;
  const Breakdown b = general(ev, 0, -1);
  expect_same(b, ref_breakdown(ev, 0, -1));
  EXPECT_DOUBLE_EQ(b.comm, 1.0);
  EXPECT_DOUBLE_EQ(b.profiler_comm, 1.5);
  EXPECT_DOUBLE_EQ(b.by_group[CommGroup::data].profiler, 1.5);
  EXPECT_DOUBLE_EQ(b.by_collective[Collective::all_reduce].profiler, 1.5);
}

TEST(TimelineIntervals, MergeInPlaceIsMerged) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 200; ++trial) {
    Intervals v;
    const int n = static_cast<int>(rng() % 50);
    for (int i = 0; i < n; ++i) {
      const double s = u(rng) * 10;
      v.emplace_back(s, s + (u(rng) < 0.1 ? -0.1 : u(rng)));  // some empty or reversed
    }
    if (trial % 2) std::sort(v.begin(), v.end());
    Intervals w = v;
    merge_in_place(w);
    EXPECT_EQ(w, ref_merged(v));
    EXPECT_EQ(merged(v), ref_merged(v));
  }
}

TEST(TimelineIntervals, UnionAndOverlapOfFourListsMatchesTheReference) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 300; ++trial) {
    std::array<Intervals, 4> lists;
    Intervals all;
    for (auto& l : lists) {
      const int n = static_cast<int>(rng() % 30);
      double at = 0;
      for (int i = 0; i < n; ++i) {  // sorted by start, overlapping itself at times
        at += u(rng) * 0.5;
        const double len = u(rng) < 0.1 ? 0.0 : u(rng);
        l.emplace_back(at, at + len);
        all.emplace_back(at, at + len);
      }
    }
    Intervals busy;
    for (double at = 0; at < 20; at += 1 + u(rng)) busy.emplace_back(at, at + u(rng));
    const Intervals un = ref_merged(all);
    const auto [total, hidden] = union_and_overlap(lists, busy);
    EXPECT_DOUBLE_EQ(total, ref_length(un));
    EXPECT_NEAR(hidden, ref_overlap(un, busy), 1e-12 * std::max(1.0, total));
    EXPECT_DOUBLE_EQ(union_and_overlap(lists, {}).second, 0.0);
    EXPECT_DOUBLE_EQ(union_and_overlap(lists, {}).first, total);
  }
}

}  // namespace
}  // namespace commscope
