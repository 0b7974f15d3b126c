// Compute cost: how long one compute op of the workload takes on a GPU, a roofline with
// per-class efficiencies and a per-kernel overhead. Not communication (collective.h).
#pragma once

#include "commscope/spec/system.h"
#include "commscope/workload/op.h"

namespace commscope {

// The fraction of tensor-core peak a GEMM (or attention matmul) of `flops` reaches:
// eff_max x f^k / (f^k + half^k), a Hill curve: small GEMMs run far below peak. The maximum,
// the half-point and the steepness k are calibrated per system.
double matmul_efficiency(double flops, double eff_max, double half_flops, double steepness = 1.0);

// max(FLOPs / achieved FLOP/s, bytes / achieved bandwidth) + kernel overhead.
Seconds compute_time(const Op& op, const GpuSpec& gpu, const Calibration& cal);

// The calibration a plan's kernels run at: with FlashAttention's own kernels
// (`flash_library`: --attention flash, --attention-backend flash), the system's
// flash_attention_efficiency for the attention, where it has one.
Calibration kernel_calibration(const Calibration& cal, bool flash_library);

}  // namespace commscope
