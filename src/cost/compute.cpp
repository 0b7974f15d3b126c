// The roofline of one compute op.
#include "commscope/cost/compute.h"

#include <algorithm>
#include <cmath>

namespace commscope {

double matmul_efficiency(double flops, double eff_max, double half_flops, double steepness) {
  if (flops <= 0 || half_flops <= 0) return eff_max;
  const double r = steepness == 1.0 ? flops / half_flops : std::pow(flops / half_flops, steepness);
  if (!std::isfinite(r)) return eff_max;  // far above the half point (a tiny half_flops)
  return eff_max * r / (1.0 + r);
}

Calibration kernel_calibration(const Calibration& cal, bool flash_library) {
  Calibration c = cal;
  if (flash_library && c.flash_attention_efficiency > 0)
    c.attention_efficiency = c.flash_attention_efficiency;
  return c;
}

Seconds compute_time(const Op& op, const GpuSpec& gpu, const Calibration& cal) {
  // Host work is no kernel: its own duration, no launch overhead.
  if (op.compute == ComputeClass::host) return Seconds(op.host_seconds);
  const double bw = gpu.memory_bandwidth.value() * cal.memory_efficiency;
  double t_mem = op.mem_bytes / bw;
  double t_flops = 0;
  const double peak = gpu.peak.for_dtype(op.dtype).value();
  switch (op.compute) {
    case ComputeClass::gemm:
      t_flops = op.flops / (peak * matmul_efficiency(op.flops, cal.gemm_efficiency,
                                                     cal.gemm_half_flops, cal.gemm_steepness));
      break;
    case ComputeClass::attention:
      t_flops = op.flops / (peak * matmul_efficiency(op.flops, cal.attention_efficiency,
                                                     cal.gemm_half_flops, cal.gemm_steepness));
      break;
    default:
      // Element-wise work runs on the CUDA cores at the fp32 rate, and is memory-bound anyway.
      t_flops = op.flops / gpu.peak.fp32.value();
      break;
  }
  return Seconds(std::max(t_flops, t_mem)) + cal.kernel_overhead;
}

}  // namespace commscope
