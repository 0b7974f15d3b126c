// The shared collectives (comm/collectives.h).
#include "commscope/comm/collectives.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "commscope/comm/mpi.h"

namespace commscope::comm {

bool even_blocks(const std::vector<int>& counts, const std::vector<int>& displs) {
  for (std::size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] != counts[0]) return false;
    if (!displs.empty() && displs[r] != static_cast<int>(r) * counts[0]) return false;
  }
  return true;
}

void all_reduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op,
                MPI_Comm comm) {
  CS_MPI_CHECK(MPI_Allreduce(send, recv, count, type, op, comm));
}

void reduce_scatter(const void* send, void* recv, const std::vector<int>& counts, MPI_Datatype type,
                    MPI_Op op, MPI_Comm comm) {
  if (!counts.empty() && even_blocks(counts))
    CS_MPI_CHECK(MPI_Reduce_scatter_block(send, recv, counts[0], type, op, comm));
  else
    CS_MPI_CHECK(MPI_Reduce_scatter(send, recv, counts.data(), type, op, comm));
}

void all_gather(const void* send, void* recv, const std::vector<int>& counts,
                const std::vector<int>& displs, MPI_Datatype type, MPI_Comm comm) {
  int me = 0;
  CS_MPI_CHECK(MPI_Comm_rank(comm, &me));
  const int mine = counts[static_cast<std::size_t>(me)];
  if (even_blocks(counts, displs))
    CS_MPI_CHECK(MPI_Allgather(send, mine, type, recv, mine, type, comm));
  else
    CS_MPI_CHECK(MPI_Allgatherv(send, mine, type, recv, counts.data(), displs.data(), type, comm));
}

std::uint16_t to_wire(float x, Wire w) {
  if (w == Wire::fp16) {
    const _Float16 h = static_cast<_Float16>(x);  // IEEE binary16, round to nearest even
    std::uint16_t bits;
    std::memcpy(&bits, &h, sizeof bits);
    return bits;
  }
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if (std::isnan(x)) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // stays a NaN
  u += 0x7FFF + ((u >> 16) & 1);  // bfloat16: round to nearest even
  return static_cast<std::uint16_t>(u >> 16);
}

float from_wire(std::uint16_t x, Wire w) {
  if (w == Wire::fp16) {
    _Float16 h;
    std::memcpy(&h, &x, sizeof h);
    return static_cast<float>(h);
  }
  const std::uint32_t u = static_cast<std::uint32_t>(x) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

namespace {
// The 16-bit all-to-all of `send` (blocks of counts[r] at their running offsets) and the fp32
// sum of the pieces of this rank's block, in rank order, into `mine`.
void sum_my_block(const float* send, const std::vector<int>& counts, Wire w, MPI_Comm comm,
                  std::vector<float>& mine) {
  int me = 0, n = 1;
  CS_MPI_CHECK(MPI_Comm_rank(comm, &me));
  CS_MPI_CHECK(MPI_Comm_size(comm, &n));
  std::vector<int> displs(counts.size(), 0);
  std::int64_t total = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    displs[r] = static_cast<int>(total);
    total += counts[r];
  }
  std::vector<std::uint16_t> out(static_cast<std::size_t>(total));
  for (std::int64_t i = 0; i < total; ++i) out[static_cast<std::size_t>(i)] = to_wire(send[i], w);
  const int c = counts[static_cast<std::size_t>(me)];
  std::vector<int> rcounts(static_cast<std::size_t>(n), c), rdispls(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) rdispls[static_cast<std::size_t>(r)] = r * c;
  std::vector<std::uint16_t> in(static_cast<std::size_t>(std::max(n * c, 1)));
  CS_MPI_CHECK(MPI_Alltoallv(out.data(), counts.data(), displs.data(), MPI_UINT16_T, in.data(),
                             rcounts.data(), rdispls.data(), MPI_UINT16_T, comm));
  mine.assign(static_cast<std::size_t>(c), 0.0f);
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < c; ++i)
      mine[static_cast<std::size_t>(i)] += from_wire(in[static_cast<std::size_t>(r * c + i)], w);
}
}  // namespace

void all_reduce_sum(const float* send, float* recv, int count, Wire w, MPI_Comm comm) {
  if (w == Wire::fp32) {
    CS_MPI_CHECK(
        MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, count, MPI_FLOAT, MPI_SUM, comm));
    return;
  }
  int n = 1;
  CS_MPI_CHECK(MPI_Comm_size(comm, &n));
  // Blocks as MPI_Reduce_scatter's even split: the first count % n ranks one more.
  std::vector<int> counts(static_cast<std::size_t>(n), count / n), displs(counts.size(), 0);
  for (int r = 0; r < count % n; ++r) ++counts[static_cast<std::size_t>(r)];
  for (std::size_t r = 1; r < counts.size(); ++r) displs[r] = displs[r - 1] + counts[r - 1];
  std::vector<float> mine;
  sum_my_block(send, counts, w, comm, mine);
  std::vector<std::uint16_t> packed(mine.size());
  for (std::size_t i = 0; i < mine.size(); ++i) packed[i] = to_wire(mine[i], w);
  std::vector<std::uint16_t> all(static_cast<std::size_t>(std::max(count, 1)));
  CS_MPI_CHECK(MPI_Allgatherv(packed.data(), static_cast<int>(packed.size()), MPI_UINT16_T,
                              all.data(), counts.data(), displs.data(), MPI_UINT16_T, comm));
  for (int i = 0; i < count; ++i) recv[i] = from_wire(all[static_cast<std::size_t>(i)], w);
}

void reduce_scatter_sum(const float* send, float* recv, const std::vector<int>& counts, Wire w,
                        MPI_Comm comm) {
  if (w == Wire::fp32) {
    reduce_scatter(send, recv, counts, MPI_FLOAT, MPI_SUM, comm);
    return;
  }
  std::vector<float> mine;
  sum_my_block(send, counts, w, comm, mine);
  std::copy(mine.begin(), mine.end(), recv);
}

}  // namespace commscope::comm
