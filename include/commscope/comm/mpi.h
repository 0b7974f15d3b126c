// The MPI session of a commscope process and the one macro every MPI call goes through:
// a failing call prints the rank, file:line and MPI's error string, then ends the whole job.
// Only comm, bench and train include this header.
#pragma once

#include <mpi.h>

#include <string>

namespace commscope::comm {

[[noreturn]] void mpi_failed(int code, const char* call, const char* file, int line);

// MPI_Init / MPI_Finalize; errors on MPI_COMM_WORLD return to CS_MPI_CHECK instead of aborting
// silently.
class Session {
 public:
  // serialized_threads: MPI_Init_thread(MPI_THREAD_SERIALIZED), for a program whose MPI calls
  // come from a communication thread (one thread at a time).
  Session(int* argc, char*** argv, bool serialized_threads = false);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }
  // A bad flag or input: one line on stderr, from rank 0 only; returns exit status 2.
  int fail(const std::string& message) const;

 private:
  int rank_ = 0, size_ = 1;
};

}  // namespace commscope::comm

#define CS_MPI_CHECK(call)                                                  \
  do {                                                                      \
    const int cs_mpi_rc_ = (call);                                          \
    if (cs_mpi_rc_ != MPI_SUCCESS)                                          \
      ::commscope::comm::mpi_failed(cs_mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)
