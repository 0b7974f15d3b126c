// Two runs' traces side by side (report/diff.h).
#include "commscope/report/diff.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commscope/timeline/breakdown_json.h"
#include "commscope/timeline/intervals.h"

namespace commscope {

namespace {

// One rank of one run: its file and its windows.
struct RankView {
  const TraceFile* file = nullptr;
  int rank = 0;
  // [t0, t1); t1 < t0: the whole rank; t1 == t0: a step of no length, holding nothing (it was
  // read as the whole rank, found by probing, 2026-12-02)
  std::vector<std::pair<double, double>> windows;
  std::vector<std::string> names;
};

std::map<int, RankView> ranks_of(const std::vector<TraceFile>& files) {
  std::map<int, RankView> out;
  for (const TraceFile& tf : files)
    for (std::int32_t r :
         tf.own_format ? tf.timeline.ranks() : std::vector<std::int32_t>{std::max(tf.rank, 0)}) {
      RankView v;
      v.file = &tf, v.rank = r;
      for (const StepWindow& s : tf.steps) {
        v.windows.emplace_back(s.start, s.end);
        v.names.push_back(s.name);
      }
      if (v.windows.empty()) {
        v.windows.push_back(whole_trace_window(tf));  // as analyze measures it
        v.names.emplace_back("trace");
      }
      out.emplace(r, std::move(v));  // a rank claimed twice: the first file
    }
  return out;
}

bool in_window(const Event& e, std::pair<double, double> w) {
  return w.second < w.first || (e.start >= w.first && e.start < w.second);
}

std::string call_label(const Timeline& t, const Event& e) {
  return e.has_collective ? std::string(to_string(e.collective)) : t.name(e);
}

// The collective calls of one rank's window in start order, keyed by (label, bytes, k).
struct Call {
  std::string label;
  double bytes = 0;
  std::size_t order = 0;
  double time = 0, exposed = 0;
};
std::vector<Call> calls_of(const RankView& v, std::size_t w) {
  const Timeline& t = v.file->timeline;
  Intervals compute;
  std::vector<const Event*> comm;
  for (const Event& e : t.events) {
    if (e.rank != v.rank) continue;
    if (e.kind == EventKind::compute) compute.emplace_back(e.start, e.end());
    if (e.kind == EventKind::comm && in_window(e, v.windows[w])) comm.push_back(&e);
  }
  compute = merged(std::move(compute));
  std::stable_sort(comm.begin(), comm.end(),
                   [](const Event* a, const Event* b) { return a->start < b->start; });
  std::map<std::pair<std::string, double>, std::size_t> seen;
  std::vector<Call> out;
  for (const Event* e : comm) {
    Call c;
    c.label = call_label(t, *e), c.bytes = e->bytes, c.time = e->dur;
    c.order = seen[{c.label, c.bytes}]++;
    c.exposed = e->dur - overlap(Intervals{{e->start, e->end()}}, compute);
    out.push_back(std::move(c));
  }
  return out;
}

Breakdown window_breakdown(const RankView& v, std::size_t w) {
  const auto [t0, t1] = v.windows[w];
  return t1 == t0 ? Breakdown{} : breakdown(v.file->timeline, v.rank, t0, t1);
}

bool changed(double a, double b) {
  return std::fabs(a - b) > kDiffEpsilon;
}

std::map<std::string, KernelDiff> kernel_totals(const std::map<int, RankView>& ranks,
                                                const std::map<int, RankView>& other, bool base,
                                                std::map<std::string, KernelDiff> acc) {
  for (const auto& [r, v] : ranks) {
    if (!other.count(r)) continue;  // only ranks both runs have
    const Timeline& t = v.file->timeline;
    for (const Event& e : t.events) {
      if (e.rank != r || e.kind == EventKind::memcpy) continue;
      KernelDiff& k = acc[t.name(e)];
      k.name = t.name(e), k.comm = e.kind == EventKind::comm;
      (base ? k.base_s : k.new_s) += e.dur;
      (base ? k.base_calls : k.new_calls)++;
    }
  }
  return acc;
}

}  // namespace

TraceDiff diff_traces(const std::vector<TraceFile>& base, const std::vector<TraceFile>& next,
                      std::size_t top_kernels) {
  TraceDiff d;
  const auto b = ranks_of(base), n = ranks_of(next);
  for (const auto& [r, v] : b) {
    d.base_ranks.push_back(r);
    if (n.count(r)) d.common_ranks.push_back(r);
  }
  for (const auto& [r, v] : n) d.new_ranks.push_back(r);
  for (const auto& [r, v] : b)
    if (!n.count(r)) d.notes.push_back(fmt::format("rank {} is in the base run only", r));
  for (const auto& [r, v] : n)
    if (!b.count(r)) d.notes.push_back(fmt::format("rank {} is in the new run only", r));
  for (const auto& [r, base_view] : b) {
    auto it = n.find(r);
    if (it == n.end()) continue;
    RankView bv = base_view, nv = it->second;
    // A run without ProfilerSteps against one with them: the whole traces are compared (the
    // first step was compared with the other's whole trace, a regression between two copies
    // of one run, found by probing, 2026-12-02).
    if (bv.file->steps.empty() != nv.file->steps.empty()) {
      d.notes.push_back(
          fmt::format("rank {}: the {} run has no ProfilerStep; the whole traces are compared", r,
                      bv.file->steps.empty() ? "base" : "new"));
      for (RankView* v : {&bv, &nv}) {
        v->windows = {whole_trace_window(*v->file)};
        v->names = {"trace"};
      }
    }
    const std::size_t steps = std::min(bv.windows.size(), nv.windows.size());
    if (bv.windows.size() != nv.windows.size())
      d.notes.push_back(
          fmt::format("rank {}: {} steps in the base run, {} in the new; the first {} "
                      "are compared",
                      r, bv.windows.size(), nv.windows.size(), steps));
    for (std::size_t s = 0; s < steps; ++s) {
      StepDiff sd;
      sd.rank = r, sd.step = s, sd.base_name = bv.names[s], sd.new_name = nv.names[s];
      sd.base = window_breakdown(bv, s), sd.next = window_breakdown(nv, s);
      d.base_total.add(sd.base), d.new_total.add(sd.next);
      d.steps.push_back(std::move(sd));
      // Collective calls aligned by (collective, size, k-th such call in the step).
      std::map<std::tuple<std::string, double, std::size_t>, CallDiff> calls;
      std::vector<std::tuple<std::string, double, std::size_t>> order;
      auto key_of = [](const Call& c) { return std::make_tuple(c.label, c.bytes, c.order); };
      for (const Call& c : calls_of(bv, s)) {
        CallDiff& x = calls[key_of(c)];
        order.push_back(key_of(c));
        x.rank = r, x.step = s, x.collective = c.label, x.bytes = c.bytes, x.order = c.order;
        x.in_base = true, x.base_s = c.time, x.base_exposed_s = c.exposed;
      }
      for (const Call& c : calls_of(nv, s)) {
        auto [pos, fresh] = calls.try_emplace(key_of(c));
        CallDiff& x = pos->second;
        if (fresh) order.push_back(key_of(c));
        x.rank = r, x.step = s, x.collective = c.label, x.bytes = c.bytes, x.order = c.order;
        x.in_new = true, x.new_s = c.time, x.new_exposed_s = c.exposed;
      }
      for (const auto& k : order) d.calls.push_back(calls[k]);
    }
  }
  auto totals = kernel_totals(n, b, false, kernel_totals(b, n, true, {}));
  for (auto& [name, k] : totals)
    if (changed(k.base_s, k.new_s) || k.base_calls != k.new_calls) d.kernels.push_back(k);
  std::stable_sort(d.kernels.begin(), d.kernels.end(),
                   [](const KernelDiff& x, const KernelDiff& y) {
                     return std::fabs(x.new_s - x.base_s) > std::fabs(y.new_s - y.base_s);
                   });
  if (d.kernels.size() > top_kernels) d.kernels.resize(top_kernels);
  return d;
}

std::vector<CallDiff> TraceDiff::changed_calls(std::size_t max) const {
  std::vector<CallDiff> out;
  for (const CallDiff& c : calls)
    if (c.in_base != c.in_new || changed(c.base_s, c.new_s) ||
        changed(c.base_exposed_s, c.new_exposed_s))
      out.push_back(c);
  auto size = [](const CallDiff& c) {
    return std::fabs(c.new_exposed_s - c.base_exposed_s) + std::fabs(c.new_s - c.base_s);
  };
  std::stable_sort(out.begin(), out.end(),
                   [&](const CallDiff& x, const CallDiff& y) { return size(x) > size(y); });
  if (max > 0 && out.size() > max) out.resize(max);
  return out;
}

Timeline diff_timeline(const std::vector<TraceFile>& base, const std::vector<TraceFile>& next) {
  Timeline out;
  const auto b = ranks_of(base), n = ranks_of(next);
  std::map<int, int> index;  // rank -> row pair
  for (const auto& m : {&b, &n})
    for (const auto& [r, v] : *m) index.emplace(r, 0);
  int i = 0;
  for (auto& [r, k] : index) k = i++;
  auto add = [&](const std::map<int, RankView>& m, int which, const char* label) {
    for (const auto& [r, v] : m) {
      const Timeline& t = v.file->timeline;
      // Each run's first event at 0: a call's slice begins at its entry (start - wait); a
      // commscope trace's stages share the iteration's clock. (The entry was left out: a later
      // stage's receive began at -39.7 ms, found by probing, 2026-12-02.)
      double origin = INFINITY;
      for (const Event& e : t.events)
        if (e.rank == r) origin = std::min(origin, e.start - std::max(e.wait, 0.0));
      if (v.windows[0].second > v.windows[0].first) origin = v.windows[0].first;
      const std::int32_t pid = 2 * index[r] + which;
      out.rank_names[pid] = fmt::format("{} rank {} ({})", label, r, v.file->path);
      for (const Event& e : t.events) {
        if (e.rank != r) continue;
        Event x = e;
        x.rank = pid;
        x.start = e.start - origin;
        x.name = out.intern(t.name(e));
        out.events.push_back(x);
      }
    }
  };
  add(b, 0, "base");
  add(n, 1, "new");
  // Each track named by what it holds (the tracks were bare "Thread N" in Perfetto, found by
  // probing, 2026-12-02; the reader keeps no thread names).
  std::map<std::pair<std::int32_t, std::int32_t>, unsigned> kinds;  // bit per EventKind
  for (const Event& e : out.events)
    kinds[{e.rank, e.stream}] |= 1u << static_cast<unsigned>(e.kind);
  for (const auto& [key, k] : kinds) {
    const char* what = k == 1u << static_cast<unsigned>(EventKind::compute)  ? "compute"
                       : k == 1u << static_cast<unsigned>(EventKind::comm)   ? "communication"
                       : k == 1u << static_cast<unsigned>(EventKind::memcpy) ? "memory copies"
                                                                             : "mixed";
    out.stream_names[key] = fmt::format("stream {} ({})", key.second, what);
  }
  return out;
}

namespace {
std::string ms(double s) {
  return fmt::format("{:.3f}", s * 1e3);
}
// A change under kDiffEpsilon is none: "+0.000", never "-0.000" (a -5.5e-17 s change printed
// so, found by probing, 2026-12-02).
std::string dms(double s) {
  return fmt::format("{:+.3f}", changed(s, 0) ? s * 1e3 : 0.0);
}

Table step_table(const TraceDiff& d) {
  Table t;
  t.header = {"rank",     "step",         "base_ms",           "new_ms",
              "delta_ms", "d_compute_ms", "d_exposed_comm_ms", "d_memcpy_ms",
              "d_idle_ms"};
  t.right.assign(t.header.size(), true);
  t.right[1] = false;
  auto row = [&](const std::string& rank, const std::string& step, const Breakdown& a,
                 const Breakdown& b) {
    t.add({rank, step, ms(a.wall), ms(b.wall), dms(b.wall - a.wall), dms(b.compute - a.compute),
           dms(b.exposed - a.exposed), dms(b.memcpy - a.memcpy), dms(b.idle - a.idle)});
  };
  for (const auto& s : d.steps)
    row(std::to_string(s.rank),
        s.base_name == s.new_name ? s.base_name : s.base_name + " / " + s.new_name, s.base, s.next);
  row("all", "total", d.base_total, d.new_total);
  return t;
}

Table call_table(const TraceDiff& d, std::size_t max) {
  Table t;
  t.header = {"rank",    "step",   "collective", "bytes",       "call",
              "base_ms", "new_ms", "delta_ms",   "d_exposed_ms"};
  t.right.assign(t.header.size(), true);
  t.right[2] = false;
  for (const auto& c : d.changed_calls(max))
    t.add({std::to_string(c.rank), std::to_string(c.step), c.collective,
           fmt::format("{:.0f}", c.bytes), std::to_string(c.order), c.in_base ? ms(c.base_s) : "-",
           c.in_new ? ms(c.new_s) : "-", dms(c.new_s - c.base_s),
           dms(c.new_exposed_s - c.base_exposed_s)});
  return t;
}

Table kernel_diff_table(const TraceDiff& d) {
  Table t;
  t.header = {"kernel", "kind", "base_calls", "new_calls", "base_ms", "new_ms", "delta_ms"};
  t.right = {false, false, true, true, true, true, true};
  for (const auto& k : d.kernels)
    t.add({k.name.size() > 90 ? k.name.substr(0, 87) + "..." : k.name, k.comm ? "comm" : "compute",
           std::to_string(k.base_calls), std::to_string(k.new_calls), ms(k.base_s), ms(k.new_s),
           dms(k.new_s - k.base_s)});
  return t;
}
}  // namespace

std::string render_diff(const TraceDiff& d, Format f) {
  switch (f) {
    case Format::json:
      return diff_json(d).dump(2) + "\n";
    case Format::csv:
      return render_csv(step_table(d));
    case Format::md:
      return "### Iteration time, new - base\n\n" + render_markdown(step_table(d)) +
             "\n### Collective calls that changed\n\n" + render_markdown(call_table(d, 50)) +
             "\n### Kernels that changed\n\n" + render_markdown(kernel_diff_table(d));
    case Format::table: {
      std::string out =
          "Iteration time per rank and step, new - base (delta = d_compute + d_exposed_comm + "
          "d_memcpy + d_idle)\n" +
          render_text(step_table(d));
      const auto calls = d.changed_calls();
      out += calls.empty() ? "\nNo collective call changed.\n"
                           : fmt::format(
                                 "\nCollective calls that changed ({} of {}; aligned by "
                                 "collective, size and order in the step)\n",
                                 calls.size(), d.calls.size()) +
                                 render_text(call_table(d, 20));
      out += d.kernels.empty() ? "\nNo kernel's total time changed.\n"
                               : "\nKernels that changed (total over the ranks compared)\n" +
                                     render_text(kernel_diff_table(d));
      for (const auto& n : d.notes) out += "note: " + n + "\n";
      return out;
    }
  }
  return {};
}

nlohmann::json diff_json(const TraceDiff& d) {
  nlohmann::json j;
  j["steps"] = nlohmann::json::array();
  for (const auto& s : d.steps)
    j["steps"].push_back({{"rank", s.rank},
                          {"step", s.step},
                          {"base_name", s.base_name},
                          {"new_name", s.new_name},
                          {"base", breakdown_to_json(s.base)},
                          {"new", breakdown_to_json(s.next)},
                          {"delta_wall_s", s.next.wall - s.base.wall}});
  j["total"] = {{"base", breakdown_to_json(d.base_total)},
                {"new", breakdown_to_json(d.new_total)},
                {"delta_wall_s", d.new_total.wall - d.base_total.wall},
                {"delta_compute_s", d.new_total.compute - d.base_total.compute},
                {"delta_exposed_comm_s", d.new_total.exposed - d.base_total.exposed},
                {"delta_memcpy_s", d.new_total.memcpy - d.base_total.memcpy},
                {"delta_idle_s", d.new_total.idle - d.base_total.idle}};
  j["calls_compared"] = d.calls.size();
  j["changed_calls"] = nlohmann::json::array();
  for (const auto& c : d.changed_calls())
    j["changed_calls"].push_back({{"rank", c.rank},
                                  {"step", c.step},
                                  {"collective", c.collective},
                                  {"bytes", c.bytes},
                                  {"call", c.order},
                                  {"in_base", c.in_base},
                                  {"in_new", c.in_new},
                                  {"base_s", c.base_s},
                                  {"new_s", c.new_s},
                                  {"delta_s", c.new_s - c.base_s},
                                  {"base_exposed_s", c.base_exposed_s},
                                  {"new_exposed_s", c.new_exposed_s},
                                  {"delta_exposed_s", c.new_exposed_s - c.base_exposed_s}});
  j["changed_kernels"] = nlohmann::json::array();
  for (const auto& k : d.kernels)
    j["changed_kernels"].push_back({{"name", k.name},
                                    {"comm", k.comm},
                                    {"base_calls", k.base_calls},
                                    {"new_calls", k.new_calls},
                                    {"base_s", k.base_s},
                                    {"new_s", k.new_s},
                                    {"delta_s", k.new_s - k.base_s}});
  j["notes"] = d.notes;
  return j;
}

}  // namespace commscope
