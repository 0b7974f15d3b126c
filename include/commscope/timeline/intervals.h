// Sorted, disjoint time intervals and the few operations on them that breakdowns need.
// Shared by the timeline's breakdown and the simulator's composition of stage breakdowns.
#pragma once

#include <array>
#include <utility>
#include <vector>

namespace commscope {

using Intervals = std::vector<std::pair<double, double>>;  // [start, end) pairs, seconds

// Sorts (only when needed) and merges overlapping or touching intervals.
Intervals merged(Intervals v);
void merge_in_place(Intervals& v);  // v = merged(v), reusing v's storage
// Total length.
double length(const Intervals& v);
// Length of the intersection of two sorted, disjoint lists.
double overlap(const Intervals& a, const Intervals& b);
// Union of two sorted, disjoint lists, in linear time.
Intervals united(const Intervals& a, const Intervals& b);
// Length of the union of four sorted lists (each may overlap itself and the others), and of
// that union's overlap with `busy` (sorted, disjoint): one merging sweep, no allocation.
std::pair<double, double> union_and_overlap(const std::array<Intervals, 4>& lists,
                                            const Intervals& busy);
// The same for all four lists, for lists 0 and 1 alone, and for lists 2 and 3 alone (a stage's
// receives and its sends: the pipeline's two collectives).
std::array<std::pair<double, double>, 3> union_and_overlap_sides(
    const std::array<Intervals, 4>& lists, const Intervals& busy);

}  // namespace commscope
