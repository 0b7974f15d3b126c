// The compute calibration's measurement (`commscope characterize`, step 2): the trainer's own
// kernels (gpt.h) timed on the model's own shapes, one micro-batch forward + backward and one
// AdamW step at a time, optionally in several processes at once (as many as the ranks that
// will share this host's cores). No MPI.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "commscope/calib/compute_fit.h"
#include "commscope/gpt/gpt.h"
#include "commscope/gpt/t5.h"
#include "commscope/util/result.h"

namespace commscope::train {

using commscope::ComputeMeasurement;
using commscope::KernelTiming;

// Times `reps` forward + backward passes (after one warm-up) of a GPT of `cfg` at `batch`
// sequences, and as many AdamW steps, in `concurrency` processes at once (fork; each process
// runs one BLAS thread); the figures are the means over the processes and repetitions (a
// mean, so that preemption by other work on a shared host counts as it does in training).
// Errors: a bad config, reps outside [1, 1000], concurrency outside [1, 256], a child that fails.
Result<ComputeMeasurement> measure_compute(const GptConfig& cfg, int batch, int reps,
                                           int concurrency);

// The same for T5 (t5.h), its own kernels: the matrix products with their shapes, the fused
// relative attention as "attn_scores", RMSNorm, ReLU and the LM head (T5::set_observer).
Result<ComputeMeasurement> measure_t5_compute(const T5Config& cfg, int batch, int reps,
                                              int concurrency);

}  // namespace commscope::train
