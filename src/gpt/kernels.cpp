// GPT-2 kernels: see kernels.h. Hot loops are written so that GCC vectorises them at -O3 for
// the x86-64 baseline: contiguous inner loops, reductions over 8 independent lanes (no
// reassociation needed), and for float a branch-free exp (Cody-Waite reduction and a degree-6
// polynomial, about 2 ulp) instead of the libm call. Double keeps libm's exp for the
// finite-difference tests.
#include "commscope/gpt/kernels.h"

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "commscope/util/result.h"

namespace commscope::train {

namespace {

constexpr int kLanes = 8;

// sum_{i < n} f(i), over kLanes independent accumulators so that it vectorises.
template <class T, class F>
inline T lane_sum(int n, F&& f) {
  T acc[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += f(i + j);
  }
  T tail = 0;
  for (; i < n; ++i) tail += f(i);
  T s = 0;
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  return s + tail;
}

// A signed integer with the order of the floats: flip the magnitude bits of negative numbers.
// Integer max vectorises; a float compare does not (GCC will not if-convert it under the default
// -ftrapping-math).
template <class T>
using OrderKey = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;
template <class T>
inline OrderKey<T> order_key(T x) {
  using K = OrderKey<T>;
  constexpr int kBits = 8 * sizeof(K) - 1;
  const K k = std::bit_cast<K>(x);
  return k ^ ((k >> kBits) & std::numeric_limits<K>::max());
}
template <class T>
inline T from_order_key(OrderKey<T> k) {
  constexpr int kBits = 8 * sizeof(k) - 1;
  return std::bit_cast<T>(k ^ ((k >> kBits) & std::numeric_limits<OrderKey<T>>::max()));
}

// max_{i < n} x[i] (n >= 1; no NaNs).
template <class T>
inline T lane_max(const T* x, int n) {
  using K = OrderKey<T>;
  K acc[kLanes];
  for (int j = 0; j < kLanes; ++j) acc[j] = order_key(x[0]);
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const K k = order_key(x[i + j]);
      acc[j] = k > acc[j] ? k : acc[j];
    }
  }
  K m = acc[0];
  for (; i < n; ++i) m = std::max(m, order_key(x[i]));
  for (int j = 0; j < kLanes; ++j) m = std::max(m, acc[j]);
  return from_order_key<T>(m);
}

// exp for float without a libm call, vectorisable: x = n ln2 + r, |r| <= ln2/2,
// exp(r) by the minimax polynomial of Cephes' expf, 2^n put in the exponent bits.
// |x| is first clamped to 87 on its bits (integer min, which vectorises), so exp(-inf) gives
// 1.6e-38 rather than 0 and exp(+inf) 6e37 rather than inf.
inline float fast_expf(float x) {
  const std::uint32_t ix = std::bit_cast<std::uint32_t>(x);
  constexpr std::int32_t kLimit = std::bit_cast<std::int32_t>(87.0f);
  std::int32_t mag = static_cast<std::int32_t>(ix & 0x7fffffffu);
  mag = mag < kLimit ? mag : kLimit;
  x = std::bit_cast<float>(static_cast<std::uint32_t>(mag) | (ix & 0x80000000u));
  const float t = x * 1.44269504088896341f;
  const float nf = (t + 12582912.0f) - 12582912.0f;  // round to nearest (1.5 * 2^23)
  float r = x - nf * 0.693359375f;
  r = r - nf * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int n = static_cast<int>(nf);
  return p * std::bit_cast<float>((n + 127) << 23);
}

template <class T>
inline T exp_t(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return fast_expf(x);
  } else {
    return std::exp(x);
  }
}

int to_blas(std::int64_t n) {
  CS_CHECK(n >= 0 && n <= INT_MAX);
  return static_cast<int>(n);
}

// Row-major C = alpha op(A) op(B) + beta C.
inline void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}
inline void gemm(bool ta, bool tb, int M, int N, int K, double alpha, const double* A, int lda,
                 const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

constexpr double kGeluK = 0.7978845608028654;  // sqrt(2/pi)
constexpr double kGeluC = 0.044715;

}  // namespace

void set_threads(int n) {
  CS_CHECK(n >= 1);
  openblas_set_num_threads(n);
}

// ---- encoder ----

template <class T>
void encoder_forward(T* out, const std::int32_t* tokens, const T* wte, const T* wpe, int B, int Tn,
                     int C) {
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < Tn; ++t) {
      const std::int64_t bt = static_cast<std::int64_t>(b) * Tn + t;
      T* o = out + bt * C;
      const T* e = wte + static_cast<std::int64_t>(tokens[bt]) * C;
      const T* p = wpe + static_cast<std::int64_t>(t) * C;
      for (int i = 0; i < C; ++i) o[i] = e[i] + p[i];
    }
  }
}

template <class T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const std::int32_t* tokens, int B, int Tn,
                      int C) {
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < Tn; ++t) {
      const std::int64_t bt = static_cast<std::int64_t>(b) * Tn + t;
      const T* d = dout + bt * C;
      T* de = dwte + static_cast<std::int64_t>(tokens[bt]) * C;
      T* dp = dwpe + static_cast<std::int64_t>(t) * C;
      for (int i = 0; i < C; ++i) {
        de[i] += d[i];
        dp[i] += d[i];
      }
    }
  }
}

// ---- layernorm ----

template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b,
                       std::int64_t N, int C) {
  const T inv_c = T(1) / static_cast<T>(C);
  for (std::int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    T* o = out + n * C;
    const T m = lane_sum<T>(C, [x](int i) { return x[i]; }) * inv_c;
    const T var = lane_sum<T>(C,
                              [x, m](int i) {
                                const T d = x[i] - m;
                                return d * d;
                              }) *
                  inv_c;
    const T s = T(1) / std::sqrt(var + T(1e-5));
    for (int i = 0; i < C; ++i) o[i] = (x[i] - m) * s * w[i] + b[i];
    mean[n] = m;
    rstd[n] = s;
  }
}

template <class T>
void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w,
                        const T* mean, const T* rstd, std::int64_t N, int C) {
  const T inv_c = T(1) / static_cast<T>(C);
  for (std::int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    const T* d = dout + n * C;
    T* dx = dinp + n * C;
    const T m = mean[n];
    const T s = rstd[n];
    // d(norm) = dout * w; the gradient through normalisation subtracts its mean and its
    // projection on norm.
    const T sum_dn = lane_sum<T>(C, [d, w](int i) { return d[i] * w[i]; }) * inv_c;
    const T sum_dn_norm =
        lane_sum<T>(C, [d, w, x, m, s](int i) { return d[i] * w[i] * ((x[i] - m) * s); }) * inv_c;
    for (int i = 0; i < C; ++i) {
      const T norm = (x[i] - m) * s;
      const T dn = d[i] * w[i];
      dw[i] += d[i] * norm;
      db[i] += d[i];
      dx[i] += s * (dn - sum_dn - norm * sum_dn_norm);
    }
  }
}

// ---- matmul ----

template <class T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, std::int64_t N, int C,
                    int OC) {
  const int n = to_blas(N);
  if (bias != nullptr) {
    for (std::int64_t r = 0; r < N; ++r) std::memcpy(out + r * OC, bias, sizeof(T) * OC);
  }
  gemm(false, true, n, OC, C, T(1), inp, C, w, C, bias != nullptr ? T(1) : T(0), out, OC);
}

template <class T>
void matmul_backward_data(T* dinp, const T* dout, const T* w, std::int64_t N, int C, int OC) {
  gemm(false, false, to_blas(N), C, OC, T(1), dout, OC, w, C, T(1), dinp, C);
}

template <class T>
void matmul_backward_weight(T* dw, T* dbias, const T* dout, const T* inp, std::int64_t N, int C,
                            int OC) {
  gemm(true, false, OC, C, to_blas(N), T(1), dout, OC, inp, C, T(1), dw, C);
  if (dbias != nullptr) {
    for (std::int64_t r = 0; r < N; ++r) {
      const T* d = dout + r * OC;
      for (int o = 0; o < OC; ++o) dbias[o] += d[o];
    }
  }
}

template <class T>
void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w,
                     std::int64_t N, int C, int OC) {
  if (dinp != nullptr) matmul_backward_data(dinp, dout, w, N, C, OC);
  matmul_backward_weight(dw, dbias, dout, inp, N, C, OC);
}

// ---- attention ----
// For batch b and head h, q, k and v are matrices [T, hs] with leading dimension 3C inside qkv;
// att is [T, T]. Query rows go in blocks [r0, r1) of kAttnBlock; a block only needs key
// columns [0, r1).

template <class T>
void attention_scores_forward(T* att, const T* qkv, int B, int Tn, int C, int NH, bool causal) {
  const int hs = C / NH;
  const int ld = 3 * C;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const T* q = qkv + static_cast<std::int64_t>(b) * Tn * ld + h * hs;
      const T* k = q + C;
      T* a = att + (static_cast<std::int64_t>(b) * NH + h) * Tn * Tn;
      for (int r0 = 0; r0 < Tn; r0 += kAttnBlock) {
        const int r1 = std::min(Tn, r0 + kAttnBlock);
        const int cols = causal ? r1 : Tn;  // bidirectional: every key
        gemm(false, true, r1 - r0, cols, hs, scale, q + static_cast<std::int64_t>(r0) * ld, ld, k,
             ld, T(0), a + static_cast<std::int64_t>(r0) * Tn, Tn);
      }
    }
  }
}

template <class T>
void attention_softmax_forward(T* att, int B, int Tn, int NH, bool causal) {
  const std::int64_t rows = static_cast<std::int64_t>(B) * NH * Tn;
  for (std::int64_t row = 0; row < rows; ++row) {
    const int t = static_cast<int>(row % Tn);
    T* a = att + row * Tn;
    const int n = causal ? t + 1 : Tn;
    const T m = lane_max(a, n);
    const T sum = lane_sum<T>(n, [a, m](int i) {
      const T e = exp_t(a[i] - m);
      a[i] = e;
      return e;
    });
    const T inv = T(1) / sum;
    for (int i = 0; i < n; ++i) a[i] *= inv;
    for (int i = n; i < Tn; ++i) a[i] = T(0);
  }
}

template <class T>
void attention_values_forward(T* out, const T* att, const T* qkv, int B, int Tn, int C, int NH,
                              bool causal) {
  const int hs = C / NH;
  const int ld = 3 * C;
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const T* v = qkv + static_cast<std::int64_t>(b) * Tn * ld + 2 * C + h * hs;
      const T* a = att + (static_cast<std::int64_t>(b) * NH + h) * Tn * Tn;
      T* o = out + static_cast<std::int64_t>(b) * Tn * C + h * hs;
      for (int r0 = 0; r0 < Tn; r0 += kAttnBlock) {
        const int r1 = std::min(Tn, r0 + kAttnBlock);
        const int cols = causal ? r1 : Tn;
        gemm(false, false, r1 - r0, hs, cols, T(1), a + static_cast<std::int64_t>(r0) * Tn, Tn, v,
             ld, T(0), o + static_cast<std::int64_t>(r0) * C, C);
      }
    }
  }
}

template <class T>
void attention_values_backward(T* datt, T* dqkv, const T* dout, const T* att, const T* qkv, int B,
                               int Tn, int C, int NH, bool causal) {
  const int hs = C / NH;
  const int ld = 3 * C;
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const std::int64_t off =
          static_cast<std::int64_t>(b) * Tn * ld + std::int64_t{2} * C + std::int64_t{h} * hs;
      const T* v = qkv + off;
      T* dv = dqkv + off;
      const std::int64_t aoff = (static_cast<std::int64_t>(b) * NH + h) * Tn * Tn;
      const T* a = att + aoff;
      T* da = datt + aoff;
      const T* d = dout + static_cast<std::int64_t>(b) * Tn * C + h * hs;
      for (int r0 = 0; r0 < Tn; r0 += kAttnBlock) {
        const int r1 = std::min(Tn, r0 + kAttnBlock);
        const T* d_blk = d + static_cast<std::int64_t>(r0) * C;
        const int cols = causal ? r1 : Tn;  // r1: causal (att is 0 above the diagonal)
        // datt[r0:r1, 0:cols] = dout[r0:r1] v[0:cols]^T
        gemm(false, true, r1 - r0, cols, hs, T(1), d_blk, C, v, ld, T(0),
             da + static_cast<std::int64_t>(r0) * Tn, Tn);
        // dv[0:cols] += att[r0:r1, 0:cols]^T dout[r0:r1]
        gemm(true, false, cols, hs, r1 - r0, T(1), a + static_cast<std::int64_t>(r0) * Tn, Tn,
             d_blk, C, T(1), dv, ld);
      }
    }
  }
}

template <class T>
void attention_softmax_backward(T* datt, const T* att, int B, int Tn, int NH, bool causal) {
  const std::int64_t rows = static_cast<std::int64_t>(B) * NH * Tn;
  for (std::int64_t row = 0; row < rows; ++row) {
    const int t = static_cast<int>(row % Tn);
    const T* p = att + row * Tn;
    T* d = datt + row * Tn;
    const int n = causal ? t + 1 : Tn;
    const T dot = lane_sum<T>(n, [p, d](int i) { return p[i] * d[i]; });
    for (int i = 0; i < n; ++i) d[i] = p[i] * (d[i] - dot);
    for (int i = n; i < Tn; ++i) d[i] = T(0);
  }
}

template <class T>
void attention_scores_backward(T* dqkv, const T* datt, const T* qkv, int B, int Tn, int C, int NH,
                               bool causal) {
  const int hs = C / NH;
  const int ld = 3 * C;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const std::int64_t off = static_cast<std::int64_t>(b) * Tn * ld + std::int64_t{h} * hs;
      const T* q = qkv + off;
      const T* k = q + C;
      T* dq = dqkv + off;
      T* dk = dq + C;
      const T* da = datt + (static_cast<std::int64_t>(b) * NH + h) * Tn * Tn;
      for (int r0 = 0; r0 < Tn; r0 += kAttnBlock) {
        const int r1 = std::min(Tn, r0 + kAttnBlock);
        const T* da_blk = da + static_cast<std::int64_t>(r0) * Tn;
        const int cols = causal ? r1 : Tn;
        // dq[r0:r1] += scale datt[r0:r1, 0:cols] k[0:cols]
        gemm(false, false, r1 - r0, hs, cols, scale, da_blk, Tn, k, ld, T(1),
             dq + static_cast<std::int64_t>(r0) * ld, ld);
        // dk[0:cols] += scale datt[r0:r1, 0:cols]^T q[r0:r1]
        gemm(true, false, cols, hs, r1 - r0, scale, da_blk, Tn,
             q + static_cast<std::int64_t>(r0) * ld, ld, T(1), dk, ld);
      }
    }
  }
}

template <class T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH, bool causal) {
  attention_scores_forward(att, qkv, B, Tn, C, NH, causal);
  attention_softmax_forward(att, B, Tn, NH, causal);
  attention_values_forward(out, att, qkv, B, Tn, C, NH, causal);
}

template <class T>
void attention_backward(T* dqkv, T* datt, const T* dout, const T* qkv, const T* att, int B, int Tn,
                        int C, int NH, bool causal) {
  attention_values_backward(datt, dqkv, dout, att, qkv, B, Tn, C, NH, causal);
  attention_softmax_backward(datt, att, B, Tn, NH, causal);
  attention_scores_backward(dqkv, datt, qkv, B, Tn, C, NH, causal);
}

// ---- GELU ----

template <class T>
void gelu_forward(T* out, const T* inp, std::int64_t n) {
  const T k = static_cast<T>(kGeluK), c = static_cast<T>(kGeluC);
  for (std::int64_t i = 0; i < n; ++i) {
    const T x = inp[i];
    const T u = k * (x + c * x * x * x);
    out[i] = x / (T(1) + exp_t(T(-2) * u));  // x sigmoid(2u) = 0.5 x (1 + tanh u)
  }
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::int64_t n) {
  const T k = static_cast<T>(kGeluK), c = static_cast<T>(kGeluC);
  for (std::int64_t i = 0; i < n; ++i) {
    const T x = inp[i];
    const T u = k * (x + c * x * x * x);
    const T s = T(1) / (T(1) + exp_t(T(-2) * u));
    const T du = k * (T(1) + T(3) * c * x * x);
    dinp[i] += dout[i] * (s + x * T(2) * s * (T(1) - s) * du);
  }
}

// ---- residual ----

template <class T>
void residual_forward(T* out, const T* a, const T* b, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <class T>
void residual_backward(T* da, T* db, const T* dout, std::int64_t n) {
  if (da != dout) {
    for (std::int64_t i = 0; i < n; ++i) da[i] += dout[i];
  }
  for (std::int64_t i = 0; i < n; ++i) db[i] += dout[i];
}

// ---- softmax + cross-entropy ----

template <class T>
T crossentropy_forward(T* probs, T* losses, const T* logits, const std::int32_t* targets,
                       std::int64_t N, int V) {
  double total = 0;
  std::int64_t counted = 0;
  for (std::int64_t n = 0; n < N; ++n) {
    const T* x = logits + n * V;
    T* p = probs + n * V;
    const int target = targets[n];
    CS_CHECK(target >= kIgnoreTarget && target < V);
    const T x_target = target >= 0 ? x[target] : T(0);
    const T m = lane_max(x, V);
    const T sum = lane_sum<T>(V, [x, p, m](int i) {
      const T e = exp_t(x[i] - m);
      p[i] = e;
      return e;
    });
    const T inv = T(1) / sum;
    for (int i = 0; i < V; ++i) p[i] *= inv;
    if (target < 0) {  // ignored: no loss
      if (losses != nullptr) losses[n] = T(0);
      continue;
    }
    const T loss = std::log(sum) + m - x_target;  // -log softmax(x)[target], without underflow
    if (losses != nullptr) losses[n] = loss;
    total += static_cast<double>(loss);
    ++counted;
  }
  return counted == 0 ? T(0) : static_cast<T>(total / static_cast<double>(counted));
}

template <class T>
void crossentropy_backward(T* dlogits, const T* probs, const std::int32_t* targets, std::int64_t N,
                           int V, T dloss) {
  std::int64_t counted = 0;
  for (std::int64_t n = 0; n < N; ++n) counted += targets[n] >= 0 ? 1 : 0;
  const T scale = dloss / static_cast<T>(std::max<std::int64_t>(counted, 1));
  const bool in_place = dlogits == probs;
  for (std::int64_t n = 0; n < N; ++n) {
    const T* p = probs + n * V;
    T* d = dlogits + n * V;
    if (targets[n] < 0) {  // ignored: no gradient
      if (in_place) std::fill(d, d + V, T(0));
      continue;
    }
    if (in_place) {
      for (int i = 0; i < V; ++i) d[i] = p[i] * scale;
    } else {
      for (int i = 0; i < V; ++i) d[i] += p[i] * scale;
    }
    d[targets[n]] -= scale;
  }
}

// ---- explicit instantiations ----

// NOLINTBEGIN(bugprone-macro-parentheses): T is a type in declarations.
#define CS_TRAIN_INSTANTIATE(T)                                                                    \
  template void encoder_forward<T>(T*, const std::int32_t*, const T*, const T*, int, int, int);    \
  template void encoder_backward<T>(T*, T*, const T*, const std::int32_t*, int, int, int);         \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, std::int64_t, int); \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*,          \
                                      const T*, std::int64_t, int);                                \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, std::int64_t, int, int);       \
  template void matmul_backward<T>(T*, T*, T*, const T*, const T*, const T*, std::int64_t, int,    \
                                   int);                                                           \
  template void matmul_backward_data<T>(T*, const T*, const T*, std::int64_t, int, int);           \
  template void matmul_backward_weight<T>(T*, T*, const T*, const T*, std::int64_t, int, int);     \
  template void attention_scores_forward<T>(T*, const T*, int, int, int, int, bool);               \
  template void attention_softmax_forward<T>(T*, int, int, int, bool);                             \
  template void attention_values_forward<T>(T*, const T*, const T*, int, int, int, int, bool);     \
  template void attention_values_backward<T>(T*, T*, const T*, const T*, const T*, int, int, int,  \
                                             int, bool);                                           \
  template void attention_softmax_backward<T>(T*, const T*, int, int, int, bool);                  \
  template void attention_scores_backward<T>(T*, const T*, const T*, int, int, int, int, bool);    \
  template void attention_forward<T>(T*, T*, const T*, int, int, int, int, bool);                  \
  template void attention_backward<T>(T*, T*, const T*, const T*, const T*, int, int, int, int,    \
                                      bool);                                                       \
  template void gelu_forward<T>(T*, const T*, std::int64_t);                                       \
  template void gelu_backward<T>(T*, const T*, const T*, std::int64_t);                            \
  template void residual_forward<T>(T*, const T*, const T*, std::int64_t);                         \
  template void residual_backward<T>(T*, T*, const T*, std::int64_t);                              \
  template T crossentropy_forward<T>(T*, T*, const T*, const std::int32_t*, std::int64_t, int);    \
  template void crossentropy_backward<T>(T*, const T*, const std::int32_t*, std::int64_t, int, T);

CS_TRAIN_INSTANTIATE(float)
CS_TRAIN_INSTANTIATE(double)
#undef CS_TRAIN_INSTANTIATE
// NOLINTEND(bugprone-macro-parentheses)

}  // namespace commscope::train
