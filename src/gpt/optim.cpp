// AdamW and gradient-norm helpers: see optim.h.
#include "commscope/gpt/optim.h"

#include <cmath>

#include "commscope/util/result.h"

namespace commscope::train {

void adamw_step(float* p, const float* g, float* m, float* v, std::int64_t n, const AdamW& h,
                std::int64_t step, float grad_scale) {
  CS_CHECK(step >= 1);
  // Computed once per call, from the step alone: identical for every shard.
  const float c1 = 1.0f / static_cast<float>(1.0 - std::pow(static_cast<double>(h.beta1), step));
  const float c2 = 1.0f / static_cast<float>(1.0 - std::pow(static_cast<double>(h.beta2), step));
  const float b1 = h.beta1, b2 = h.beta2, a1 = 1.0f - h.beta1, a2 = 1.0f - h.beta2;
  const float lr = h.lr, eps = h.eps, wd = h.weight_decay;
  for (std::int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * grad_scale;
    const float mi = b1 * m[i] + a1 * gi;
    const float vi = b2 * v[i] + a2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi * c1;
    const float vhat = vi * c2;
    p[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * p[i]);
  }
}

double sum_of_squares(const float* g, std::int64_t n) {
  constexpr int kLanes = 8;
  double acc[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const double x = g[i + j];
      acc[j] += x * x;
    }
  }
  double s = 0;
  for (; i < n; ++i) s += static_cast<double>(g[i]) * g[i];
  for (double a : acc) s += a;
  return s;
}

float clip_factor(double global_norm, float max_norm) {
  if (max_norm <= 0) return 1.0f;
  const double f = static_cast<double>(max_norm) / (global_norm + 1e-6);
  return f < 1.0 ? static_cast<float>(f) : 1.0f;
}

}  // namespace commscope::train
