// Analysis of read traces and its printing.
#include "commscope/report/analyze.h"

#include <algorithm>
#include <map>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commscope/timeline/breakdown_json.h"

namespace commscope {

Distribution distribution(std::vector<double> v) {
  Distribution d;
  d.n = v.size();
  if (v.empty()) return d;
  std::sort(v.begin(), v.end());
  // Percentiles interpolated between the two nearest ranks, as numpy.percentile and pandas
  // quantile do by default: p50 of an even count is the mean of the middle two (it was the
  // upper one: 6.86 GB/s for a median of 3.44, found by probing, 2026-11-30).
  auto q = [&](double p) {
    const double pos = p * static_cast<double>(v.size() - 1);
    const std::size_t lo = static_cast<std::size_t>(pos);
    const std::size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
  };
  d.min = v.front(), d.max = v.back(), d.p50 = q(0.5), d.p90 = q(0.9);
  d.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  return d;
}

double algbw(double bytes, double seconds) {
  return seconds > 0 ? bytes / seconds : 0;
}
double busbw(Collective c, int group_size, double bytes, double seconds) {
  return algbw(bytes, seconds) * bus_factor(c, group_size);
}

namespace {
// The collective a communication event belongs to, as the trace names it ("allreduce"), or
// empty when the event is no collective. A profiler's collective commscope has no kind for
// (gather, scatter, barrier, coalesced) keeps its name: its time was in comm, but in no row.
std::string collective_label(const TraceFile& tf, std::size_t i) {
  const Event& e = tf.timeline.events[i];
  if (e.kind != EventKind::comm) return {};
  const std::int32_t ci = i < tf.comm_index.size() ? tf.comm_index[i] : -1;
  if (!e.has_collective) return ci >= 0 ? tf.comm_args[ci].collective : std::string();
  std::string name = ci >= 0 ? tf.comm_args[ci].collective : std::string(to_string(e.collective));
  if (ci >= 0 && is_comm_kernel(name)) name = std::string(to_string(e.collective));  // generic
  return name;
}
}  // namespace

std::vector<RankAnalysis> analyze_breakdowns(const std::vector<TraceFile>& files) {
  std::vector<RankAnalysis> ranks;
  for (const TraceFile& tf : files) {
    // commscope's own trace: its processes are the pipeline stages of one iteration on one
    // clock, each measured over the whole iteration, from the first call's entry to the last
    // stage's end, as `predict` measures them (a later stage's window began after its first
    // receive's wait and ended at its own end: wall, idle and profiler comm fell short of
    // predict's, found by probing, 2026-11-30). A Kineto rank: its own first to last event.
    const auto [t0, t1] = whole_trace_window(tf);
    for (std::int32_t r :
         tf.own_format ? tf.timeline.ranks() : std::vector<std::int32_t>{std::max(tf.rank, 0)}) {
      RankAnalysis ra;
      ra.rank = r;
      ra.file = tf.path;
      ra.total = breakdown(tf.timeline, r, t0, t1);
      // A step of no length holds nothing (breakdown reads t1 <= t0 as the whole rank: its row
      // was the whole trace, found by probing, 2026-12-02).
      for (const auto& s : tf.steps)
        ra.steps.push_back(
            {s.name, s.end > s.start ? breakdown(tf.timeline, r, s.start, s.end) : Breakdown{}});
      if (!tf.own_format)
        for (const Event& e : tf.timeline.events)
          if (e.kind != EventKind::memcpy)
            ra.kernels++, ra.comm_kernels += e.kind == EventKind::comm;
      ranks.push_back(std::move(ra));
    }
  }
  std::sort(ranks.begin(), ranks.end(),
            [](const RankAnalysis& x, const RankAnalysis& y) { return x.rank < y.rank; });
  return ranks;
}

std::vector<CollectiveStats> analyze_collectives(const std::vector<TraceFile>& files) {
  std::map<std::string, CollectiveStats> stats;                       // by name
  std::map<std::string, std::vector<double>> times, sizes, alg, bus;  // by name
  for (const TraceFile& tf : files)
    for (std::size_t i = 0; i < tf.timeline.events.size(); ++i) {
      const std::string cname = collective_label(tf, i);
      if (cname.empty()) continue;
      const Event& e = tf.timeline.events[i];
      CollectiveStats& s = stats[cname];
      s.collective = e.collective, s.known = e.has_collective, s.name = cname, s.calls++;
      s.total_s += e.dur;
      times[cname].push_back(e.dur);
      if (e.bytes > 0 && e.dur > 0) {
        sizes[cname].push_back(e.bytes);
        alg[cname].push_back(algbw(e.bytes, e.dur));
        if (e.group_size > 0 && e.has_collective)
          bus[cname].push_back(busbw(e.collective, e.group_size, e.bytes, e.dur));
      }
    }
  std::vector<CollectiveStats> out;
  for (auto& [name, s] : stats) {
    s.time_s = distribution(times[name]);
    s.bytes = distribution(sizes[name]);
    s.algbw = distribution(alg[name]);
    s.busbw = distribution(bus[name]);
    out.push_back(s);
  }
  std::sort(out.begin(), out.end(), [](const CollectiveStats& x, const CollectiveStats& y) {
    return x.total_s > y.total_s;
  });
  return out;
}

std::vector<CallSpread> analyze_stragglers(const std::vector<TraceFile>& files) {
  // name -> rank -> (start, duration) of its calls, put in time order below: a trace file need
  // not list its events by time (Kineto's does not always), and the k-th call is the k-th to
  // start, as --diff pairs them (calls_of).
  std::map<std::string, std::map<int, std::vector<std::pair<double, double>>>> per_rank_calls;
  for (const TraceFile& tf : files) {
    // commscope's own trace is left out, as from the other across-ranks figures: its processes
    // are pipeline stages whose k-th calls of one collective belong to different groups (an
    // embedding all-reduce was paired with a tensor-parallel one, found by probing, 2026-11-30).
    if (tf.own_format) continue;
    for (std::size_t i = 0; i < tf.timeline.events.size(); ++i) {
      const std::string cname = collective_label(tf, i);
      const Event& e = tf.timeline.events[i];
      if (!cname.empty()) per_rank_calls[cname][e.rank].emplace_back(e.start, e.dur);
    }
  }
  for (auto& [name, by_rank] : per_rank_calls)
    for (auto& [rank, calls] : by_rank)
      std::stable_sort(calls.begin(), calls.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
  // The k-th call of a collective on each rank; NCCL kernels wait for the last rank to arrive,
  // so the rank with the shortest kernel arrived last.
  std::vector<CallSpread> spreads;
  for (const auto& [name, by_rank] : per_rank_calls) {
    if (by_rank.size() < 2) continue;
    std::size_t n = SIZE_MAX;
    for (const auto& [r, v] : by_rank) n = std::min(n, v.size());
    for (std::size_t k = 0; k < n; ++k) {
      CallSpread cs;
      cs.collective = name, cs.call = k, cs.min_s = 1e300, cs.max_s = -1;
      for (const auto& [r, v] : by_rank) {
        const double dur = v[k].second;
        if (dur < cs.min_s) cs.min_s = dur, cs.late_rank = r;
        if (dur > cs.max_s) cs.max_s = dur, cs.waiting_rank = r;
      }
      spreads.push_back(cs);
    }
  }
  std::stable_sort(spreads.begin(), spreads.end(), [](const CallSpread& x, const CallSpread& y) {
    return x.max_s - x.min_s > y.max_s - y.min_s;
  });
  return spreads;
}

std::vector<KernelStat> analyze_top_kernels(const std::vector<TraceFile>& files, std::size_t k) {
  std::map<std::string, KernelStat> kernels;
  for (const TraceFile& tf : files)
    for (const Event& e : tf.timeline.events) {
      if (e.kind == EventKind::memcpy) continue;
      const std::string& name = tf.timeline.name(e);
      KernelStat& s = kernels[name];
      s.name = name, s.comm = e.kind == EventKind::comm, s.calls++, s.total_s += e.dur;
    }
  std::vector<KernelStat> top;
  for (auto& [n, s] : kernels) top.push_back(s);
  std::stable_sort(top.begin(), top.end(),
                   [](const KernelStat& x, const KernelStat& y) { return x.total_s > y.total_s; });
  if (top.size() > k) top.resize(k);
  return top;
}

int slowest_rank(const std::vector<RankAnalysis>& ranks) {
  int slowest = -1;
  double most = -1;
  for (const auto& r : ranks)
    if (r.total.compute > most) most = r.total.compute, slowest = r.rank;
  return slowest;
}

Analysis analyze(const std::vector<TraceFile>& files, std::size_t top_kernels) {
  Analysis a;
  a.ranks = analyze_breakdowns(files);
  a.collectives = analyze_collectives(files);
  a.spreads = analyze_stragglers(files);
  a.top_kernels = analyze_top_kernels(files, top_kernels);
  a.slowest_rank = slowest_rank(a.ranks);
  if (a.ranks.size() > 1) a.across = analyze_across_ranks(files);
  return a;
}

namespace {
std::string ms(double s) {
  return fmt::format("{:.3f}", s * 1e3);
}
std::string pct(double part, double whole) {
  return whole > 0 ? fmt::format("{:.1f}%", 100 * part / whole) : "-";
}
std::string gbs(double bps) {
  return fmt::format("{:.2f}", bps / 1e9);
}

// `human`: the shares as "17.5%" under their names; otherwise (CSV) as numbers under *_pct
// names, empty where the window has no length, so that a CSV reader gets numeric columns (they
// were "17.5%" strings until 2026-12-02).
Table rank_table(const Analysis& a, bool human) {
  Table t;
  t.header = {"rank",       "window",          "wall_ms",
              "compute_ms", "exposed_comm_ms", "overlapped_comm_ms",
              "memcpy_ms",  "idle_ms"};
  for (const char* share : {"compute", "exposed", "overlapped", "idle"})
    t.header.push_back(human ? std::string(share) : std::string(share) + "_pct");
  t.right.assign(t.header.size(), true);
  t.right[1] = false;
  auto share = [&](double part, double whole) {
    if (human) return pct(part, whole);
    return whole > 0 ? fmt::format("{:.2f}", 100 * part / whole) : std::string();
  };
  auto row = [&](int rank, const std::string& window, const Breakdown& b) {
    t.add({std::to_string(rank), window, ms(b.wall), ms(b.compute), ms(b.exposed), ms(b.overlapped),
           ms(b.memcpy), ms(b.idle), share(b.compute, b.wall), share(b.exposed, b.wall),
           share(b.overlapped, b.wall), share(b.idle, b.wall)});
  };
  for (const auto& r : a.ranks) {
    row(r.rank, "trace", r.total);
    for (const auto& s : r.steps) row(r.rank, s.name, s.breakdown);
  }
  return t;
}

Table collective_table(const Analysis& a) {
  Table t;
  t.header = {"collective", "calls",          "total_ms",       "mean_ms",       "p50_bytes",
              "max_bytes",  "algbw_p50_GBps", "busbw_p50_GBps", "busbw_max_GBps"};
  t.right.assign(t.header.size(), true);
  t.right[0] = false;
  for (const auto& c : a.collectives)
    t.add({c.name, std::to_string(c.calls), ms(c.total_s), ms(c.time_s.mean),
           fmt::format("{:.0f}", c.bytes.p50), fmt::format("{:.0f}", c.bytes.max),
           c.algbw.n ? gbs(c.algbw.p50) : "-", c.busbw.n ? gbs(c.busbw.p50) : "-",
           c.busbw.n ? gbs(c.busbw.max) : "-"});
  return t;
}

Table kernel_table(const Analysis& a) {
  Table t;
  t.header = {"kernel", "kind", "calls", "total_ms", "mean_us"};
  t.right = {false, false, true, true, true};
  for (const auto& k : a.top_kernels)
    t.add({k.name.size() > 90 ? k.name.substr(0, 87) + "..." : k.name, k.comm ? "comm" : "compute",
           std::to_string(k.calls), ms(k.total_s),
           fmt::format("{:.1f}", k.total_s / k.calls * 1e6)});
  return t;
}

Table spread_table(const Analysis& a) {
  Table t;
  // The shortest kernel's rank arrived last (the others waited in the kernel for it); the
  // longest kernel's rank arrived first and waited the longest.
  t.header = {"collective", "call", "min_ms", "max_ms", "spread_ms", "late_rank", "waiting_rank"};
  t.right = {false, true, true, true, true, true, true};
  for (std::size_t i = 0; i < a.spreads.size() && i < 10; ++i) {
    const auto& s = a.spreads[i];
    t.add({s.collective, std::to_string(s.call), ms(s.min_s), ms(s.max_s), ms(s.max_s - s.min_s),
           std::to_string(s.late_rank), std::to_string(s.waiting_rank)});
  }
  return t;
}
}  // namespace

nlohmann::json analysis_json(const Analysis& a) {
  auto dist = [](const Distribution& d) {
    return nlohmann::json{{"n", d.n},       {"min", d.min}, {"p50", d.p50},
                          {"mean", d.mean}, {"p90", d.p90}, {"max", d.max}};
  };
  nlohmann::json j;
  j["ranks"] = nlohmann::json::array();
  for (const auto& r : a.ranks) {
    nlohmann::json x = {
        {"rank", r.rank}, {"file", r.file}, {"breakdown", breakdown_to_json(r.total)}};
    x["steps"] = nlohmann::json::array();
    for (const auto& s : r.steps)
      x["steps"].push_back({{"name", s.name}, {"breakdown", breakdown_to_json(s.breakdown)}});
    j["ranks"].push_back(std::move(x));
  }
  j["collectives"] = nlohmann::json::array();
  for (const auto& c : a.collectives)
    j["collectives"].push_back({{"collective", c.name},
                                {"kind", c.known ? to_string(c.collective) : "other"},
                                {"calls", c.calls},
                                {"total_s", c.total_s},
                                {"time_s", dist(c.time_s)},
                                {"bytes", dist(c.bytes)},
                                {"algbw_bytes_per_s", dist(c.algbw)},
                                {"busbw_bytes_per_s", dist(c.busbw)}});
  j["stragglers"] = nlohmann::json::array();
  for (std::size_t i = 0; i < a.spreads.size() && i < 50; ++i) {
    const auto& s = a.spreads[i];
    j["stragglers"].push_back({{"collective", s.collective},
                               {"call", s.call},
                               {"min_s", s.min_s},
                               {"max_s", s.max_s},
                               {"spread_s", s.max_s - s.min_s},
                               {"late_rank", s.late_rank},
                               {"waiting_rank", s.waiting_rank}});
  }
  j["top_kernels"] = nlohmann::json::array();
  for (const auto& k : a.top_kernels)
    j["top_kernels"].push_back(
        {{"name", k.name}, {"comm", k.comm}, {"calls", k.calls}, {"total_s", k.total_s}});
  j["slowest_rank"] = a.slowest_rank;
  j["bad_files"] = a.bad_files;
  j["convention"] = a.convention;
  if (a.across.reference_rank >= 0) j["across_ranks"] = across_ranks_json(a.across);
  if (a.convention == "hta") j["hta"] = hta_json(a.hta);
  return j;
}

namespace {
std::string slowest_rank_line(const Analysis& a) {
  if (a.ranks.size() < 2) return {};
  return fmt::format(
      "\nslowest rank: {} (the most compute time: the others wait for it in collectives)\n",
      a.slowest_rank);
}
}  // namespace

std::string render_analysis(const Analysis& a, Format f) {
  switch (f) {
    case Format::json:
      return analysis_json(a).dump(2) + "\n";
    case Format::csv:
      return render_csv(a.convention == "hta" ? hta_table(a.hta) : rank_table(a, false));
    case Format::md: {
      // The table's sections, each as Markdown (the across-ranks part, several tables and a
      // sentence, as a fenced block of its text).
      std::string out =
          (a.convention == "hta" ? "### Temporal breakdown per rank (HTA 0.6.1 convention)\n\n" +
                                       render_markdown(hta_table(a.hta))
                                 : "### Time per rank\n\n" + render_markdown(rank_table(a, true))) +
          "\n### Collectives\n\n" + render_markdown(collective_table(a));
      if (!a.spreads.empty())
        out += "\n### Largest spread of a collective call across ranks\n\n" +
               render_markdown(spread_table(a));
      if (const std::string across = render_across_ranks(a.across); !across.empty())
        out += "\n### Across ranks\n\n```text" + across + "```\n";
      out += "\n### Top kernels\n\n" + render_markdown(kernel_table(a));
      out += slowest_rank_line(a);
      return out;
    }
    case Format::table: {
      std::string out =
          a.convention == "hta"
              // The title says what was done (with --include-last-step it said the step was
              // dropped, found by probing, 2026-12-02).
              ? fmt::format(
                    "Temporal breakdown per rank, HTA 0.6.1 convention (first to last "
                    "kernel, the last ProfilerStep {}, memory and other kernels counted "
                    "as non-compute)\n",
                    std::any_of(a.hta.begin(), a.hta.end(),
                                [](const HtaBreakdown& r) { return r.last_step_dropped; })
                        ? "dropped"
                        : "included") +
                    render_text(hta_table(a.hta))
              : "Time per rank (GPU timeline)\n" + render_text(rank_table(a, true));
      if (!a.collectives.empty()) out += "\nCollectives\n" + render_text(collective_table(a));
      if (!a.spreads.empty())
        out +=
            "\nLargest spread of a collective call across ranks\n" + render_text(spread_table(a));
      out += render_across_ranks(a.across);
      out += "\nTop kernels\n" + render_text(kernel_table(a));
      out += slowest_rank_line(a);
      return out;
    }
  }
  return {};
}

}  // namespace commscope
