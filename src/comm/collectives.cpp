// The shared collectives (comm/collectives.h).
#include "commscope/comm/collectives.h"

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

}  // namespace commscope::comm
