// AdamW (Loshchilov and Hutter 2019) and the global gradient norm for clipping, over flat fp32
// buffers. Elementwise: updating a shard [a, b) gives, bit for bit, the same slice as updating the
// whole buffer (ZeRO shards their optimizer state this way).
#pragma once

#include <cstdint>

namespace commscope::train {

struct AdamW {
  float lr = 3e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

// Updates n parameters in place: g is multiplied by grad_scale first (the caller folds gradient
// averaging and clipping into it); m and v are the first and second moments; step counts from 1
// (bias corrections 1 - beta^step). Decoupled weight decay applies to ALL parameters (biases and
// LayerNorm weights included), as in a plain torch.optim.AdamW over model.parameters():
//   p -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * p)
void adamw_step(float* p, const float* g, float* m, float* v, std::int64_t n, const AdamW& h,
                std::int64_t step, float grad_scale);

// sum g[i]^2, accumulated in double, for the global gradient norm.
double sum_of_squares(const float* g, std::int64_t n);

// Clip factor: min(1, max_norm / (norm + 1e-6)); max_norm <= 0 disables clipping (returns 1).
float clip_factor(double global_norm, float max_norm);

}  // namespace commscope::train
