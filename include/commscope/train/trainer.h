// The distributed trainer: the CPU GPT of gpt.h trained over MPI with DDP or ZeRO-1/2/3, its
// communication taken op for op from the workload (workload.h) that describe and predict use,
// every compute and communication op recorded in a Timeline. Runs inside an MPI job
// (commscope-train under mpirun or srun; `commscope train --ranks N` launches one).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "commscope/gpt/gpt.h"
#include "commscope/spec/model.h"
#include "commscope/util/result.h"

namespace commscope::train {

enum class Strategy { ddp, zero1, zero2, zero3 };
std::string_view to_string(Strategy s);

struct TrainOptions {
  GptConfig model;
  std::string model_name = "custom";
  Strategy strategy = Strategy::ddp;
  int micro_batch = 4;            // sequences per rank per micro-batch
  std::int64_t global_batch = 0;  // sequences per step (0: micro_batch x ranks)
  int steps = 20;
  int warmup = 2;  // steps left out of the averages
  float lr = 1e-3f;
  float clip = 1.0f;  // global gradient-norm clipping (0: off)
  std::uint64_t seed = 1234;
  std::string data;       // text file (byte-level tokens); empty: the synthetic stream
  double bucket_mb = 25;  // DDP bucket (MiB), PyTorch's bucket_cap_mb
  std::int64_t zero_bucket = 500'000'000;  // ZeRO reduce and all-gather buckets (elements)
  int threads = 1;                         // BLAS threads per rank
  std::string trace_dir;                   // one Chrome trace per rank
  std::string format = "table";            // table | json
  std::string summary_file;                // also write the json document here (rank 0)
  std::string checkpoint_dir;
  int checkpoint_every = 0;
  bool resume = false;
  int kill_rank = -1, kill_step = -1;  // tests: this rank dies at the start of this step
};

// The ModelSpec that describes the trainer's GPT to the workload builder.
ModelSpec model_spec(const GptConfig& cfg, const std::string& name);
// A GptConfig from a model preset (GPT kind only), or an error naming what does not fit.
Result<GptConfig> config_from_model(const ModelSpec& m);

// Checks the options against the world size (one line naming the flag, value and expectation).
Status validate(const TrainOptions& o, int world);

// Trains; rank 0 prints. Returns the process exit status.
int run_training(const TrainOptions& o, MPI_Comm comm);

}  // namespace commscope::train
