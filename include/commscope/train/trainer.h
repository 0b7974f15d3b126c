// The distributed trainer: the CPU GPT of gpt.h trained over MPI with DDP or ZeRO-1/2/3, its
// communication taken op for op from the workload (workload.h) that describe and predict use,
// every compute and communication op recorded in a Timeline. Runs inside an MPI job
// (commscope-train under mpirun or srun; `commscope train --ranks N` launches one).
#pragma once

#include <mpi.h>

#include "commscope/train/options.h"

namespace commscope::train {

// Checks the options against the world (validate of options.h, with this node's rank count);
// rank 0 prints the one line. Trains; rank 0 prints. Returns the process exit status.
int run_training(const TrainOptions& o, MPI_Comm comm);

}  // namespace commscope::train
