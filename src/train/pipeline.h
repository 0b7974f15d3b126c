// The model-parallel trainer (internal to src/train): tensor, pipeline and data parallelism
// over MPI. run_training (trainer.h) hands it runs whose plan has TP or PP above 1.
#pragma once

#include <mpi.h>

#include "commscope/train/options.h"

namespace commscope::train {

// A rank's coordinates in the TP x PP x DP grid, as Megatron places ranks: tp-dp-pp (rank =
// t + TP (d + DP p), the default) or tp-pp-dp (rank = t + TP (p + PP d)).
struct Grid {
  int tp = 1, pp = 1, dp = 1, cp = 1, ep = 1;
  int t = 0, p = 0, d = 0, c = 0;
  // Expert parallelism splits data parallelism: EP groups of ep consecutive data-parallel
  // ranks (this rank's place in its group: d % ep), expert-data-parallel groups of the ranks
  // at the same place (dp / ep of them).
  int e() const { return d % ep; }
  int expert_dp() const { return dp / ep; }
  // The gradient group (Megatron's data-parallel group with context parallelism): DP x CP
  // ranks, this rank's place in it.
  int grad_dp() const { return dp * cp; }
  int grad_rank() const { return d * cp + c; }
  static Grid of(const TrainOptions& o, int world, int rank);
};

// Trains (options already validated on every rank); rank 0 prints. The exit status.
int run_pipeline_training(const TrainOptions& o, MPI_Comm comm);

}  // namespace commscope::train
