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
// disjoint list: one merging sweep, no allocation.
std::pair<double, double> union_and_overlap(const std::array<Intervals, 4>& lists,
                                            const Intervals& busy) {
  std::array<std::size_t, 4> at{};
  std::array<double, 4> head;  // each list's next start; infinity once it is done
  constexpr double kDone = std::numeric_limits<double>::infinity();
  for (int k = 0; k < 4; ++k) head[k] = lists[k].empty() ? kDone : lists[k][0].first;
  std::size_t b = 0;
  double total = 0, hidden = 0, cs = 0, ce = -1;
  bool open = false;
  auto close = [&] {
    total += ce - cs;
    while (b < busy.size() && busy[b].second <= cs) ++b;
    for (std::size_t j = b; j < busy.size() && busy[j].first < ce; ++j)
      hidden += std::max(0.0, std::min(ce, busy[j].second) - std::max(cs, busy[j].first));
  };
  std::size_t left = lists[0].size() + lists[1].size() + lists[2].size() + lists[3].size();
  for (; left > 0; --left) {
    // the list with the earliest next start (the first such list on ties): done lists have
    // an infinite head, so no bounds check but where every head left is infinite
    int next = 0;
    for (int k = 1; k < 4; ++k) next = head[k] < head[next] ? k : next;
    if (at[next] >= lists[next].size())
      for (next = 0; at[next] >= lists[next].size();) ++next;
    const auto& l = lists[next];
    const auto& iv = l[at[next]++];
    head[next] = at[next] < l.size() ? l[at[next]].first : kDone;
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

}  // namespace commscope
