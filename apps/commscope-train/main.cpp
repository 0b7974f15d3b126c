// commscope-train: the MPI program behind `commscope train`. Run it under mpirun, mpiexec or
// srun (or let `commscope train --ranks N` launch it). It speaks the plan flags of describe and
// predict (apps/common/scenario_options.h); docs/train.md describes the flags.
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "common/train_flags.h"
#include "commscope/comm/flags.h"
#include "commscope/comm/mpi.h"
#include "commscope/train/trainer.h"

int main(int argc, char** argv) {
  using namespace commscope;
  comm::Session mpi(&argc, &argv, /*serialized_threads=*/true);
  CLI::App app{
      "commscope-train: a CPU GPT-2, BERT or T5 (--model) trained over MPI with DDP or ZeRO-1/2/3 "
      "(--zero), or with "
      "Megatron's tensor, sequence and pipeline parallelism (--tp, --sequence-parallel, --pp, "
      "--schedule), its timeline recorded"};
  cli::TrainFlags f;
  cli::add_train_flags(app, f);
  if (auto stop = comm::parse_flags(app, argc, argv, mpi)) return *stop;
  std::vector<std::string> warnings;
  auto o = cli::train_options(f, &warnings);
  if (!o.ok()) return mpi.fail(o.error().message);
  if (mpi.rank() == 0)
    for (const auto& w : warnings) std::fprintf(stderr, "commscope: warning: %s\n", w.c_str());
  return train::run_training(*o, MPI_COMM_WORLD);
}
