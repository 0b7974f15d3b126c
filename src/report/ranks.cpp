// Clock alignment, arrival-time stragglers and the critical path across ranks (report/ranks.h).
#include "commscope/report/ranks.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commscope/report/table.h"

namespace commscope {

namespace {

using CallKey = std::pair<std::string, double>;  // (collective, bytes)

struct RankData {
  int rank = 0;
  const TraceFile* file = nullptr;
  std::vector<const Event*> events;                    // by start
  std::map<CallKey, std::vector<const Event*>> calls;  // k-th call of each collective and size
  std::map<const Event*, std::pair<CallKey, std::size_t>> call_of;
  double offset = 0;
  std::vector<double> prefix_end;  // max aligned end over events[0..i]
  std::vector<std::size_t> prefix_arg;
};

CallKey key_of(const Timeline& t, const Event& e) {
  return {e.has_collective ? std::string(to_string(e.collective)) : t.name(e), e.bytes};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

CrossRank analyze_across_ranks(const std::vector<TraceFile>& files, std::size_t step) {
  CrossRank out;
  out.step = step;
  std::map<int, RankData> ranks;
  for (const TraceFile& tf : files) {
    // A commscope Chrome trace's processes are pipeline stages on one clock whose collectives
    // belong to different groups: nothing to align or pair. Kineto traces only.
    if (tf.own_format) continue;
    for (std::int32_t r : {std::max(tf.rank, 0)}) {
      if (ranks.count(r)) continue;
      RankData& d = ranks[r];
      d.rank = r, d.file = &tf;
      for (const Event& e : tf.timeline.events)
        if (e.rank == r) d.events.push_back(&e);
      std::stable_sort(d.events.begin(), d.events.end(),
                       [](const Event* a, const Event* b) { return a->start < b->start; });
      for (const Event* e : d.events)
        if (e->kind == EventKind::comm) {
          auto& v = d.calls[key_of(tf.timeline, *e)];
          d.call_of[e] = {key_of(tf.timeline, *e), v.size()};
          v.push_back(e);
        }
    }
  }
  if (ranks.size() < 2) return out;
  RankData& ref = ranks.begin()->second;
  out.reference_rank = ref.rank;

  // Clocks: the median difference of collective end times against the reference rank.
  for (auto& [r, d] : ranks) {
    ClockOffset c;
    c.rank = r;
    std::vector<double> diffs;
    for (const auto& [key, evs] : d.calls) {
      auto it = ref.calls.find(key);
      if (it == ref.calls.end()) continue;
      for (std::size_t k = 0; k < evs.size() && k < it->second.size(); ++k)
        diffs.push_back(evs[k]->end() - it->second[k]->end());
    }
    c.calls = diffs.size();
    // Ranks of one file (a commscope Chrome trace: one process per stage) share its clock.
    if (!diffs.empty() && d.file != ref.file) {
      c.offset_s = median(diffs);
      double sq = 0;
      for (double x : diffs) {
        sq += (x - c.offset_s) * (x - c.offset_s);
        c.max_residual_s = std::max(c.max_residual_s, std::fabs(x - c.offset_s));
      }
      c.residual_s = std::sqrt(sq / static_cast<double>(diffs.size()));
    }
    d.offset = c.offset_s;
    out.clocks.push_back(c);
  }

  // Arrivals: each call's kernel starts in aligned time; the last one held the others.
  std::map<std::pair<CallKey, std::size_t>, Arrival> arrivals;
  std::map<std::pair<CallKey, std::size_t>, std::vector<std::pair<double, int>>> starts;
  for (auto& [r, d] : ranks)
    for (const auto& [key, evs] : d.calls)
      for (std::size_t k = 0; k < evs.size(); ++k)
        starts[{key, k}].emplace_back(evs[k]->start - d.offset, r);
  std::map<int, StragglerStat> stats;
  for (auto& [id, v] : starts) {
    if (v.size() < 2) continue;
    std::sort(v.begin(), v.end());
    Arrival a;
    a.collective = id.first.first, a.bytes = id.first.second, a.call = id.second;
    a.ranks = static_cast<int>(v.size());
    a.last_rank = v.back().second;
    a.late_by_s = v.back().first - v[v.size() - 2].first;
    a.spread_s = v.back().first - v.front().first;
    if (a.late_by_s > kLateEpsilon) {
      StragglerStat& s = stats[a.last_rank];
      s.rank = a.last_rank, s.times_last++, s.total_late_s += a.late_by_s;
      s.max_late_s = std::max(s.max_late_s, a.late_by_s);
    }
    arrivals[id] = a;
    out.arrivals.push_back(a);
  }
  for (const auto& [r, s] : stats) out.stragglers.push_back(s);
  std::stable_sort(out.stragglers.begin(), out.stragglers.end(),
                   [](const StragglerStat& x, const StragglerStat& y) {
                     return x.total_late_s > y.total_late_s;
                   });

  // Critical path: the window is the reference rank's step (or every rank's whole trace).
  double t0 = INFINITY, t1 = -INFINITY;
  if (step < ref.file->steps.size() && !ref.file->own_format) {
    t0 = ref.file->steps[step].start, t1 = ref.file->steps[step].end;
  } else {
    out.path.whole_trace = true;
    for (auto& [r, d] : ranks)
      for (const Event* e : d.events) {
        t0 = std::min(t0, e->start - d.offset);
        t1 = std::max(t1, e->end() - d.offset);
      }
  }
  if (!(t1 > t0)) return out;
  for (auto& [r, d] : ranks) {
    d.prefix_end.resize(d.events.size());
    d.prefix_arg.resize(d.events.size());
    for (std::size_t i = 0; i < d.events.size(); ++i) {
      const double end = d.events[i]->end() - d.offset;
      const bool take = i == 0 || end > d.prefix_end[i - 1];
      d.prefix_end[i] = take ? end : d.prefix_end[i - 1];
      d.prefix_arg[i] = take ? i : d.prefix_arg[i - 1];
    }
  }
  // The latest-ending event of a rank that started before t (aligned), or null.
  auto latest_before = [](const RankData& d, double t) -> const Event* {
    auto it = std::lower_bound(d.events.begin(), d.events.end(), t,
                               [&](const Event* e, double x) { return e->start - d.offset < x; });
    if (it == d.events.begin()) return nullptr;
    return d.events[d.prefix_arg[static_cast<std::size_t>(it - d.events.begin()) - 1]];
  };
  CriticalPath& p = out.path;
  p.start = t0, p.end = t1;
  int r = -1;
  double t = t0, best = -INFINITY;
  for (auto& [rank, d] : ranks)
    if (const Event* e = latest_before(d, t1); e && std::min(e->end() - d.offset, t1) > best)
      best = std::min(e->end() - d.offset, t1), r = rank;
  if (r < 0) return out;
  t = best;
  std::vector<PathSegment> seg;
  auto add = [&](int rank, std::string what, bool idle, EventKind kind, double a, double b) {
    a = std::max(a, t0);
    if (b > a) seg.push_back({rank, std::move(what), idle, kind, a, b});
  };
  if (t1 > t) add(r, "idle", true, EventKind::compute, t, t1);
  std::size_t guard = 0, total = 0;
  for (auto& [rank, d] : ranks) total += d.events.size();
  while (t > t0 && guard++ < 4 * total + 16) {
    const RankData& d = ranks[r];
    const Event* e = latest_before(d, t);
    if (!e || e->end() - d.offset <= t0) {
      add(r, "idle", true, EventKind::compute, t0, t);
      break;
    }
    const double s = e->start - d.offset, end = e->end() - d.offset;
    if (end < t) {
      add(r, "idle", true, EventKind::compute, end, t);
      t = end;
    }
    const std::string& name = d.file->timeline.name(*e);
    if (e->kind == EventKind::comm) {
      auto c = d.call_of.find(e);
      auto a = c == d.call_of.end() ? arrivals.end() : arrivals.find(c->second);
      if (a != arrivals.end()) {
        const int last = a->second.last_rank;
        const Event* le = ranks[last].calls[c->second.first][c->second.second];
        const double arrived = le->start - ranks[last].offset;
        if (last != r && arrived > s && arrived < t) {       // t falls on every turn: no cycles
          add(r, name, false, EventKind::comm, arrived, t);  // the transfer after the last arrival
          r = last;
          t = arrived;
          continue;
        }
        add(r, name, false, EventKind::comm, s, t);
        t = s;
        continue;
      }
    }
    add(r, name, false, e->kind, s, t);
    t = s;
  }
  std::reverse(seg.begin(), seg.end());
  std::map<int, double> per_rank;
  for (const PathSegment& x : seg) {
    const double len = x.end - x.start;
    per_rank[x.rank] += len;
    (x.idle                        ? p.idle_s
     : x.kind == EventKind::comm   ? p.comm_s
     : x.kind == EventKind::memcpy ? p.memcpy_s
                                   : p.compute_s) += len;
  }
  p.per_rank_s.assign(per_rank.begin(), per_rank.end());
  p.segments = std::move(seg);
  return out;
}

std::string render_across_ranks(const CrossRank& c) {
  if (c.reference_rank < 0) return {};
  auto ms = [](double s) { return fmt::format("{:.3f}", s * 1e3); };
  auto us = [](double s) { return fmt::format("{:.1f}", s * 1e6); };
  Table clocks;
  clocks.header = {"rank", "offset_ms", "residual_us", "max_residual_us", "calls"};
  clocks.right.assign(5, true);
  // A rank with no call to pair with the reference's is not aligned: "-", not a perfect 0.
  for (const auto& o : c.clocks) {
    const bool aligned = o.rank == c.reference_rank || o.calls > 0;
    clocks.add({std::to_string(o.rank), aligned ? ms(o.offset_s) : "-",
                aligned ? us(o.residual_s) : "-", aligned ? us(o.max_residual_s) : "-",
                std::to_string(o.calls)});
  }
  std::string out = fmt::format(
      "\nClocks aligned on collective end times (reference rank {}; reference time = own time - "
      "offset)\n",
      c.reference_rank);
  out += render_text(clocks);
  if (!c.stragglers.empty()) {
    Table s;
    s.header = {"rank", "times_last", "of_calls", "total_late_ms", "max_late_ms"};
    s.right.assign(5, true);
    for (const auto& x : c.stragglers)
      s.add({std::to_string(x.rank), std::to_string(x.times_last),
             std::to_string(c.arrivals.size()), ms(x.total_late_s), ms(x.max_late_s)});
    out +=
        "\nLast to arrive at collectives (aligned kernel starts; late = after the one before "
        "it)\n" +
        render_text(s);
  }
  const CriticalPath& p = c.path;
  if (!p.segments.empty()) {
    out += fmt::format(
        "\nCritical path of {} ({} ms): compute {} ms, communication {} ms, memcpy {} ms, idle {} "
        "ms; ",
        p.whole_trace ? std::string("the trace") : fmt::format("step {}", c.step),
        ms(p.end - p.start), ms(p.compute_s), ms(p.comm_s), ms(p.memcpy_s), ms(p.idle_s));
    std::string by;
    for (const auto& [r, s] : p.per_rank_s)
      by += fmt::format("{}rank {} {} ms", by.empty() ? "" : ", ", r, ms(s));
    out += "on " + by + "\n";
  }
  return out;
}

nlohmann::json across_ranks_json(const CrossRank& c) {
  nlohmann::json j;
  j["reference_rank"] = c.reference_rank;
  j["clocks"] = nlohmann::json::array();
  for (const auto& o : c.clocks) {
    const bool aligned = o.rank == c.reference_rank || o.calls > 0;
    auto value = [&](double v) { return aligned ? nlohmann::json(v) : nlohmann::json(); };
    j["clocks"].push_back({{"rank", o.rank},
                           {"offset_s", value(o.offset_s)},
                           {"residual_s", value(o.residual_s)},
                           {"max_residual_s", value(o.max_residual_s)},
                           {"calls", o.calls}});
  }
  j["arrivals"] = nlohmann::json::array();
  for (std::size_t i = 0; i < c.arrivals.size() && i < 1000; ++i) {
    const auto& a = c.arrivals[i];
    j["arrivals"].push_back({{"collective", a.collective},
                             {"bytes", a.bytes},
                             {"call", a.call},
                             {"last_rank", a.last_rank},
                             {"late_by_s", a.late_by_s},
                             {"spread_s", a.spread_s},
                             {"ranks", a.ranks}});
  }
  j["last_arrivals"] = nlohmann::json::array();
  for (const auto& s : c.stragglers)
    j["last_arrivals"].push_back({{"rank", s.rank},
                                  {"times_last", s.times_last},
                                  {"total_late_s", s.total_late_s},
                                  {"max_late_s", s.max_late_s}});
  const CriticalPath& p = c.path;
  nlohmann::json per = nlohmann::json::array();
  for (const auto& [r, s] : p.per_rank_s) per.push_back({{"rank", r}, {"s", s}});
  j["critical_path"] = {
      {"step", c.step},           {"start_s", p.start}, {"end_s", p.end},
      {"compute_s", p.compute_s}, {"comm_s", p.comm_s}, {"memcpy_s", p.memcpy_s},
      {"idle_s", p.idle_s},       {"per_rank", per},    {"segments", p.segments.size()}};
  return j;
}

}  // namespace commscope
