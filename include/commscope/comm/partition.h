// `total` elements split over n ranks, contiguously and in rank order, the first total % n ranks
// holding one element more: ZeRO's partitions of a flat buffer, and the blocks of a collective
// whose count the rank count does not divide (as MPI_Scatterv users split them). Arithmetic
// only: no MPI here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace commscope::comm {

struct Partition {
  std::int64_t total = 0;
  int n = 1;

  std::int64_t lo(int r) const { return r * (total / n) + std::min<std::int64_t>(r, total % n); }
  std::int64_t hi(int r) const { return lo(r + 1); }
  std::int64_t size(int r) const { return hi(r) - lo(r); }
  bool even() const { return total % n == 0; }
  // The rank owning element i, in constant time (checks ask for every element of a buffer).
  int owner(std::int64_t i) const {
    const std::int64_t base = total / n, rem = total % n, long_part = rem * (base + 1);
    if (i < long_part) return static_cast<int>(i / (base + 1));
    return static_cast<int>(rem + (i - long_part) / base);
  }

  // How [offset, offset + size) falls on the ranks: counts[r] of its elements are rank r's,
  // starting displs[r] into the range (the counts and displacements of MPI's v-collectives).
  struct Pieces {
    std::vector<int> counts, displs;
  };
  Pieces pieces(std::int64_t offset, std::int64_t size) const {
    Pieces p;
    for (int r = 0; r < n; ++r) {
      const std::int64_t a = std::max(offset, lo(r)), b = std::min(offset + size, hi(r));
      p.counts.push_back(static_cast<int>(std::max<std::int64_t>(0, b - a)));
      p.displs.push_back(static_cast<int>(std::max<std::int64_t>(0, a - offset)));
    }
    return p;
  }
  // Where rank r's piece of a range starting at `offset` begins in r's own part.
  std::int64_t in_shard(int r, std::int64_t offset) const {
    return std::max(offset, lo(r)) - lo(r);
  }
};

}  // namespace commscope::comm
