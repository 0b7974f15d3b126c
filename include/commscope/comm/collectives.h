// The collectives both the trainer and the bench harness issue, in one place: all-reduce,
// reduce-scatter and all-gather over typed buffers, the plain MPI call when the ranks' blocks
// are equal and contiguous, the v-variant (MPI_Reduce_scatter, MPI_Allgatherv) otherwise. Every
// call goes through CS_MPI_CHECK. Only comm, bench and train include this header.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

namespace commscope::comm {

// True when every count is the same and block r starts at r x count (the plain calls' layout).
bool even_blocks(const std::vector<int>& counts, const std::vector<int>& displs = {});

// send may be MPI_IN_PLACE.
void all_reduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op,
                MPI_Comm comm);

// Reduces the sum of counts elements of `send` (MPI_IN_PLACE: of `recv`) and leaves block r
// (counts[r] elements, in rank order) on rank r.
void reduce_scatter(const void* send, void* recv, const std::vector<int>& counts, MPI_Datatype type,
                    MPI_Op op, MPI_Comm comm);

// Gathers rank r's counts[r] elements into recv at displs[r] on every rank; send may be
// MPI_IN_PLACE (the rank's block already in recv).
void all_gather(const void* send, void* recv, const std::vector<int>& counts,
                const std::vector<int>& displs, MPI_Datatype type, MPI_Comm comm);

// ---- reduced-precision wire formats (docs/train.md, "Compressed communication") ----
// fp32 values sent as bf16 or fp16 (round to nearest even), summed in fp32 by the receiver:
// the sum is an all-to-all of each rank's 16-bit blocks (MPI_Alltoallv), then each rank adds
// the D pieces of its block in fp32 in rank order (so every rank's result is the same);
// the all-reduce then all-gathers the sums in the wire format. The bytes on the wire are a
// ring all-reduce's / reduce-scatter's of 16-bit elements.
enum class Wire : std::uint8_t { fp32, bf16, fp16 };
std::uint16_t to_wire(float x, Wire w);
float from_wire(std::uint16_t x, Wire w);

// `count` floats of `send` summed over the ranks into `recv` (both may be the same buffer).
// fp32 is MPI_Allreduce.
void all_reduce_sum(const float* send, float* recv, int count, Wire w, MPI_Comm comm);

// The sum of `send` (sum of counts floats) over the ranks; block r (counts[r] floats, in rank
// order) onto rank r's `recv`, in fp32 (the wire carries the inputs only).
void reduce_scatter_sum(const float* send, float* recv, const std::vector<int>& counts, Wire w,
                        MPI_Comm comm);

}  // namespace commscope::comm
