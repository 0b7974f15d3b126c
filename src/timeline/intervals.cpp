// Interval arithmetic: linear merges of sorted lists, a sort only when a list is not sorted.
#include "commscope/timeline/intervals.h"

#include <algorithm>
#include <iterator>
#include <limits>

namespace commscope {

// Sorts and merges into disjoint intervals.
Intervals merged(Intervals v) {
  if (!std::is_sorted(v.begin(), v.end())) std::sort(v.begin(), v.end());
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

// merged() without the copy: the same intervals, in v's own storage.
void merge_in_place(Intervals& v) {
  if (!std::is_sorted(v.begin(), v.end())) std::sort(v.begin(), v.end());
  std::size_t n = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto iv = v[i];
    if (iv.second <= iv.first) continue;
    if (n > 0 && iv.first <= v[n - 1].second)
      v[n - 1].second = std::max(v[n - 1].second, iv.second);
    else
      v[n++] = iv;
  }
  v.resize(n);
}

double length(const Intervals& v) {
  double s = 0;
  for (const auto& iv : v) s += iv.second - iv.first;
  return s;
}

// Length of the intersection of two disjoint, sorted interval lists.
double overlap(const Intervals& a, const Intervals& b) {
  double s = 0;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    double lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (hi > lo) s += hi - lo;
    (a[i].second < b[j].second) ? ++i : ++j;
  }
  return s;
}

// Union of two sorted, disjoint lists, in linear time.
Intervals united(const Intervals& a, const Intervals& b) {
  Intervals all;
  all.reserve(a.size() + b.size());
  std::merge(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(all));
  return merged(std::move(all));
}

// Length of the union of up to four sorted interval lists, and of its overlap with a sorted,
// disjoint list: the lists merged by start into per-thread scratch (two pairwise merges, then
// one), then one sweep. Intervals of equal start may come in any order: the union is the same.
namespace {
// The length of the union of `v` (sorted by start, possibly overlapping), and of that union's
// overlap with `busy` (sorted, disjoint): one sweep.
std::pair<double, double> sweep_union(const Intervals& v, const Intervals& busy) {
  std::size_t j0 = 0;
  double total = 0, hidden = 0, cs = 0, ce = -1;
  bool open = false;
  auto close = [&] {
    total += ce - cs;
    while (j0 < busy.size() && busy[j0].second <= cs) ++j0;
    for (std::size_t j = j0; j < busy.size() && busy[j].first < ce; ++j)
      hidden += std::max(0.0, std::min(ce, busy[j].second) - std::max(cs, busy[j].first));
  };
  for (const auto& iv : v) {
    if (iv.second <= iv.first) continue;
    if (open && iv.first <= ce) {
      ce = std::max(ce, iv.second);
    } else {
      if (open) close();
      cs = iv.first, ce = iv.second, open = true;
    }
  }
  if (open) close();
  return {total, hidden};
}
}  // namespace

namespace {
// Lists 0 and 1 merged by start, lists 2 and 3, and all four: views into per-thread buffers
// (or into the lists themselves where one of a pair is empty), valid until the next call.
struct Merged {
  const Intervals *in, *out, *all;
};
Merged merged(const std::array<Intervals, 4>& lists) {
  thread_local Intervals a, b, all;
  auto by_start = [](const std::pair<double, double>& x, const std::pair<double, double>& y) {
    return x.first < y.first;
  };
  auto merge2 = [&](const Intervals& x, const Intervals& y, Intervals& out) -> const Intervals& {
    if (y.empty()) return x;
    if (x.empty()) return y;
    out.resize(x.size() + y.size());
    std::merge(x.begin(), x.end(), y.begin(), y.end(), out.begin(), by_start);
    return out;
  };
  const Intervals& in = merge2(lists[0], lists[1], a);
  const Intervals& out = merge2(lists[2], lists[3], b);
  return {&in, &out, &merge2(in, out, all)};
}
}  // namespace

std::array<std::pair<double, double>, 3> union_and_overlap_sides(
    const std::array<Intervals, 4>& lists, const Intervals& busy) {
  const Merged m = merged(lists);
  return {sweep_union(*m.all, busy), sweep_union(*m.in, busy), sweep_union(*m.out, busy)};
}

std::pair<double, double> union_and_overlap(const std::array<Intervals, 4>& lists,
                                            const Intervals& busy) {
  return sweep_union(*merged(lists).all, busy);
}

}  // namespace commscope
