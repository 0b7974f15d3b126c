// MPI session and error reporting.
#include "commscope/comm/mpi.h"

#include <cstdio>
#include <cstdlib>

namespace commscope::comm {

void mpi_failed(int code, const char* call, const char* file, int line) {
  int rank = -1, initialized = 0, len = 0;
  char msg[MPI_MAX_ERROR_STRING] = "unknown MPI error";
  MPI_Initialized(&initialized);
  if (initialized) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Error_string(code, msg, &len);
  }
  std::fprintf(stderr, "commscope: rank %d: %s failed at %s:%d: %s\n", rank, call, file, line, msg);
  std::fflush(stderr);
  if (initialized) MPI_Abort(MPI_COMM_WORLD, 3);
  std::_Exit(3);
}

Session::Session(int* argc, char*** argv, bool serialized_threads) {
  if (serialized_threads) {
    int provided = MPI_THREAD_SINGLE;
    CS_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided));
    if (provided < MPI_THREAD_SERIALIZED) {
      std::fprintf(stderr,
                   "commscope: this MPI library does not provide MPI_THREAD_SERIALIZED (got %d), "
                   "which the communication thread needs\n",
                   provided);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  } else {
    CS_MPI_CHECK(MPI_Init(argc, argv));
  }
  CS_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  CS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  CS_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
}

int Session::fail(const std::string& message) const {
  if (rank_ == 0) std::fprintf(stderr, "commscope: %s\n", message.c_str());
  return 2;
}

Session::~Session() {
  MPI_Finalize();
}

}  // namespace commscope::comm
