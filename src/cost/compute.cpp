// The roofline of one compute op.
#include "commscope/cost/compute.h"

#include <algorithm>

namespace commscope {

double matmul_efficiency(double flops, double eff_max, double half_flops) {
  return flops <= 0 ? eff_max : eff_max * flops / (flops + half_flops);
}

Seconds compute_time(const Op& op, const GpuSpec& gpu, const Calibration& cal) {
  const double bw = gpu.memory_bandwidth.value() * cal.memory_efficiency;
  double t_mem = op.mem_bytes / bw;
  double t_flops = 0;
  const double peak = gpu.peak.for_dtype(op.dtype).value();
  switch (op.compute) {
    case ComputeClass::gemm:
      t_flops =
          op.flops / (peak * matmul_efficiency(op.flops, cal.gemm_efficiency, cal.gemm_half_flops));
      break;
    case ComputeClass::attention:
      t_flops = op.flops /
                (peak * matmul_efficiency(op.flops, cal.attention_efficiency, cal.gemm_half_flops));
      break;
    default:
      // Element-wise work runs on the CUDA cores at the fp32 rate, and is memory-bound anyway.
      t_flops = op.flops / gpu.peak.fp32.value();
      break;
  }
  return Seconds(std::max(t_flops, t_mem)) + cal.kernel_overhead;
}

}  // namespace commscope
