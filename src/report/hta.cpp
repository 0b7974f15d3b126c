// Holistic Trace Analysis's conventions over read traces (definitions: report/hta.h).
#include "commscope/report/hta.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_set>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace commscope {

namespace {

bool starts(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}
bool has(std::string_view s, std::string_view p) {
  return s.find(p) != std::string_view::npos;
}

// HTA's communication pattern: names starting nccl, hip or hccl, or holding ncclKernel.
bool hta_comm(std::string_view n) {
  return starts(n, "nccl") || starts(n, "hip") || starts(n, "hccl") || has(n, "ncclKernel");
}
// HTA's memory pattern: (hip)Memcpy, (hip)Memset or dma at the start.
bool hta_memory(std::string_view n) {
  return starts(n, "Memcpy") || starts(n, "hipMemcpy") || starts(n, "Memset") ||
         starts(n, "hipMemset") || starts(n, "dma");
}
// The names HTA's computation pattern excludes (its pattern is an inverse match).
bool hta_not_computation(std::string_view n) {
  if (has(n, "Memcpy") || has(n, "Memset") || has(n, "dma") || has(n, "Sync")) return true;
  if (starts(n, "cuda") && n.find("LaunchKernel", 4) != std::string_view::npos) return true;
  for (std::string_view p :
       {"nccl", "Stream Wait Event", "runFunction", "hip", "job_exe", "packet", "pe_exe",
        "cpum_exe_subgraph", "hccl", "collective_subgraph_execution"})
    if (starts(n, p)) return true;
  return false;
}

bool is_step_name(std::string_view n) {
  return starts(n, "ProfilerStep#") && n.size() > 13 && n[13] >= '0' && n[13] <= '9';
}

struct Span {
  double ts, end;
};

// HTA's merge of intervals: sorted by start, an interval joins the group before it unless it
// starts after every earlier end; each group spans its least start to its greatest end.
std::vector<Span> merge(std::vector<Span> v) {
  std::sort(v.begin(), v.end(), [](const Span& a, const Span& b) { return a.ts < b.ts; });
  std::vector<Span> out;
  double reach = -INFINITY;
  for (const Span& s : v) {
    if (out.empty() || s.ts > reach)
      out.push_back(s);
    else
      out.back().end = std::max(out.back().end, s.end);
    reach = std::max(reach, s.end);
  }
  return out;
}

double length(const std::vector<Span>& m) {
  double t = 0;
  for (const Span& s : m) t += s.end - s.ts;
  return t;
}

// Time covered by both of two merged (disjoint, sorted) lists.
double both(const std::vector<Span>& a, const std::vector<Span>& b) {
  double t = 0;
  for (std::size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    const double lo = std::max(a[i].ts, b[j].ts), hi = std::min(a[i].end, b[j].end);
    if (hi > lo) t += hi - lo;
    (a[i].end < b[j].end ? i : j)++;
  }
  return t;
}

struct Typed {
  Span span;
  HtaKernelType type;
};

void fill(HtaBreakdown& r, const std::vector<Typed>& events) {
  r.events = events.size();
  if (events.empty()) return;
  std::vector<Span> all, comp, comm;
  for (const Typed& e : events) {
    all.push_back(e.span);
    if (e.type == HtaKernelType::computation) comp.push_back(e.span);
    if (e.type == HtaKernelType::communication) comm.push_back(e.span);
  }
  const std::vector<Span> m = merge(std::move(all));
  r.kernel_time_us = m.back().end - m.front().ts;
  r.idle_us = r.kernel_time_us - length(m);
  const std::vector<Span> mc = merge(std::move(comp)), mm = merge(std::move(comm));
  r.compute_us = length(mc);
  r.non_compute_us = r.kernel_time_us - r.compute_us - r.idle_us;
  r.comm_us = length(mm);
  r.overlap_us = both(mc, mm);
}

double round2(double x) {
  return std::round(x * 100) / 100;
}

}  // namespace

std::string_view to_string(HtaKernelType t) {
  switch (t) {
    case HtaKernelType::communication:
      return "COMMUNICATION";
    case HtaKernelType::memory:
      return "MEMORY";
    case HtaKernelType::computation:
      return "COMPUTATION";
    case HtaKernelType::other:
      return "OTHER";
  }
  return "OTHER";
}

HtaKernelType hta_kernel_type(std::string_view name) {
  if (hta_comm(name)) return HtaKernelType::communication;
  if (hta_memory(name)) return HtaKernelType::memory;
  if (!hta_not_computation(name)) return HtaKernelType::computation;
  return HtaKernelType::other;
}

double HtaBreakdown::idle_pctg() const {
  return kernel_time_us > 0 ? round2(100 * idle_us / kernel_time_us) : NAN;  // HTA: NaN
}
double HtaBreakdown::compute_pctg() const {
  return kernel_time_us > 0 ? round2(100 * compute_us / kernel_time_us) : NAN;  // HTA: NaN
}
double HtaBreakdown::non_compute_pctg() const {
  return kernel_time_us > 0 ? round2(100 * non_compute_us / kernel_time_us) : NAN;  // HTA: NaN
}
double HtaBreakdown::overlap_pctg() const {
  return comm_us > 0 ? round2(100 * overlap_us / comm_us) : NAN;
}

std::vector<HtaBreakdown> hta_breakdowns(const std::vector<TraceFile>& files,
                                         const HtaOptions& options) {
  // HTA drops the last step only when its symbol table (all ranks) holds two or more step names.
  std::set<std::string> step_names;
  for (const TraceFile& tf : files)
    for (const HtaStep& s : tf.hta.steps)
      if (is_step_name(s.name)) step_names.insert(s.name);
  const bool filter = step_names.size() >= 2;

  std::vector<HtaBreakdown> out;
  for (const TraceFile& tf : files) {
    if (tf.own_format) {
      // A commscope Chrome trace has no streams or correlation ids: its events, typed by kind.
      for (std::int32_t rank : tf.timeline.ranks()) {
        HtaBreakdown r;
        r.rank = rank, r.file = tf.path, r.from_timeline = true;
        std::vector<Typed> ev;
        for (const Event& e : tf.timeline.events)
          if (e.rank == rank)
            ev.push_back({{e.start * 1e6, e.end() * 1e6},
                          e.kind == EventKind::comm     ? HtaKernelType::communication
                          : e.kind == EventKind::memcpy ? HtaKernelType::memory
                                                        : HtaKernelType::computation});
        fill(r, ev);
        out.push_back(std::move(r));
      }
      continue;
    }
    HtaBreakdown r;
    r.rank = std::max(tf.rank, 0), r.file = tf.path;
    // The cut: host events that started before the last step started (or, with
    // include_last_step, no later than the last step ended). Times rounded as HTA rounds them.
    double last_start = INFINITY, last_end = INFINITY;
    if (filter) {
      last_start = last_end = -INFINITY;
      for (const HtaStep& s : tf.hta.steps)
        if (is_step_name(s.name)) {
          last_start = std::max(last_start, std::ceil(s.ts));
          last_end = std::max(last_end, std::floor(s.ts + s.dur));
        }
      if (tf.hta.steps.empty() && options.include_last_step) last_end = INFINITY;
      r.last_step_dropped = !options.include_last_step;
    }
    auto host_kept = [&](double ts) {
      const double t = std::ceil(ts);
      return options.include_last_step ? t <= last_end : t < last_start;
    };
    std::unordered_set<std::int64_t> launched;
    if (filter)
      for (const HtaLaunch& l : tf.hta.launches)
        if (host_kept(l.ts)) launched.insert(l.correlation);
    std::vector<HtaKernelType> types(tf.timeline.names().size(), HtaKernelType::other);
    for (std::size_t i = 0; i < types.size(); ++i)
      types[i] = hta_kernel_type(tf.timeline.names()[i]);
    std::vector<Typed> ev;
    for (const HtaEvent& e : tf.hta.device) {
      const bool gpu = e.stream >= 0 && e.correlation >= 0;
      if (filter && !(gpu ? launched.count(e.correlation) > 0 : host_kept(e.ts))) continue;
      ev.push_back({{std::ceil(e.ts), std::floor(e.ts + e.dur)}, types[e.name]});
    }
    fill(r, ev);
    out.push_back(std::move(r));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const HtaBreakdown& a, const HtaBreakdown& b) { return a.rank < b.rank; });
  return out;
}

Table hta_table(const std::vector<HtaBreakdown>& ranks) {
  Table t;
  t.header = {"rank",
              "idle_time(us)",
              "compute_time(us)",
              "non_compute_time(us)",
              "kernel_time(us)",
              "idle_time_pctg",
              "compute_time_pctg",
              "non_compute_time_pctg",
              "comp_comm_overlap_pctg"};
  t.right.assign(t.header.size(), true);
  auto us = [](double x) { return fmt::format("{:.0f}", x); };
  auto p = [](double x) { return std::isnan(x) ? std::string("-") : fmt::format("{:.2f}", x); };
  for (const auto& r : ranks)
    t.add({std::to_string(r.rank), us(r.idle_us), us(r.compute_us), us(r.non_compute_us),
           us(r.kernel_time_us), p(r.idle_pctg()), p(r.compute_pctg()), p(r.non_compute_pctg()),
           p(r.overlap_pctg())});
  return t;
}

namespace {
// A share of nothing (no kernel time, no communication): null, as HTA's NaN, not 0.
nlohmann::json pct_or_null(double x) {
  return std::isnan(x) ? nlohmann::json() : nlohmann::json(x);
}
}  // namespace

nlohmann::json hta_json(const std::vector<HtaBreakdown>& ranks) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& r : ranks) {
    j.push_back({{"rank", r.rank},
                 {"file", r.file},
                 {"idle_time_us", r.idle_us},
                 {"compute_time_us", r.compute_us},
                 {"non_compute_time_us", r.non_compute_us},
                 {"kernel_time_us", r.kernel_time_us},
                 {"idle_time_pctg", pct_or_null(r.idle_pctg())},
                 {"compute_time_pctg", pct_or_null(r.compute_pctg())},
                 {"non_compute_time_pctg", pct_or_null(r.non_compute_pctg())},
                 {"comp_comm_overlap_pctg", pct_or_null(r.overlap_pctg())},
                 {"events", r.events},
                 {"last_step_dropped", r.last_step_dropped}});
  }
  return j;
}

}  // namespace commscope
