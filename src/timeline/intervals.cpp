// Interval arithmetic: linear merges of sorted lists, a sort only when a list is not sorted.
#include "commscope/timeline/intervals.h"

#include <algorithm>
#include <iterator>

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

}  // namespace commscope
