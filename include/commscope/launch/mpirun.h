// Launching an MPI program of commscope's (commscope-bench, commscope-train) with mpirun on
// this machine: the rank count, the transport, and optionally emulated nodes (emulate.h).
// Under a cluster's own launcher (mpirun with a hostfile, srun) the programs run as launched.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "commscope/launch/emulate.h"
#include "commscope/util/result.h"

namespace commscope::launch {

// The most ranks `--ranks` launches on this one machine (docs/bench.md).
inline constexpr int kMaxLocalRanks = 256;

struct JobOptions {
  int ranks = 2;
  std::string transport;  // "" (Open MPI's choice), "tcp", "shm" or "rdma"
  std::string emulate;    // "" or an --emulate spec
};

// Flags every launching verb shares, with their help text.
inline constexpr const char* kTransportHelp =
    "tcp|shm|rdma: force Open MPI's TCP or shared-memory BTL, or UCX over RDMA hardware";
inline constexpr const char* kEmulateHelp =
    "tcp-10g|ipoib-100g|rdma-100g|rate=<bits/s>[,nodes=K]: run the ranks as K emulated nodes "
    "(network namespaces, shaped links; rate 100k to 100G, K 1 to 64; needs root; "
    "docs/bench.md)";

// The mpirun arguments for a transport ("" gives none). Error for an unknown transport, and
// for rdma where this machine has no RDMA device.
Result<std::vector<std::string>> transport_args(const std::string& transport);

// The options alone, before anything is started: --ranks from 1 to kMaxLocalRanks, the
// transport's name, the --emulate spec and its combination with --transport. Errors name the
// flag.
Status check_job_options(const JobOptions& options);

// mpirun on PATH, or the one-line error naming the package that installs it.
Status require_mpirun();

// Runs `mpirun ... program args` and returns its exit status. With emulation the nodes exist
// only while the job runs, and the per-node traffic is printed to `report` afterwards.
// Errors (one line): program or mpirun missing, bad --emulate/--transport, no privileges.
// `traffic`, when given, receives the per-node traffic of an emulated run.
Result<int> run_mpi_job(const std::string& program, const std::vector<std::string>& args,
                        const JobOptions& options, std::FILE* report,
                        std::vector<NodeTraffic>* traffic = nullptr);

}  // namespace commscope::launch
