// The collectives both the trainer and the bench harness issue, in one place: all-reduce,
// reduce-scatter and all-gather over typed buffers, the plain MPI call when the ranks' blocks
// are equal and contiguous, the v-variant (MPI_Reduce_scatter, MPI_Allgatherv) otherwise. Every
// call goes through CS_MPI_CHECK. Only comm, bench and train include this header.
#pragma once

#include <mpi.h>

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

}  // namespace commscope::comm
