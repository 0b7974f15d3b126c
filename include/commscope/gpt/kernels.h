// Forward and backward kernels of a GPT-2 transformer on the CPU, over flat row-major buffers.
// Each op is a pair of functions: *_forward overwrites its outputs; *_backward ACCUMULATES (+=)
// into the gradients of its parameters and of its inputs, so that gradients of several
// micro-batches add up in place. Every kernel is a template on the element type T, explicitly
// instantiated for float (training) and double (the finite-difference tests).
//
// Shapes in comments: B batch, T sequence, C channels (hidden), OC output channels, NH heads,
// hs = C / NH head size, V vocabulary, N rows (B*T). Matrix products go through BLAS
// (cblas_sgemm / cblas_dgemm); the other kernels are one sweep over their tensors with
// contiguous inner loops that the compiler vectorises (reductions keep 8 independent lanes, and
// float exp is a branch-free polynomial, so no -ffast-math is needed).
#pragma once

#include <cstdint>

namespace commscope::train {

// OpenBLAS threads for the matrix products (n >= 1).
void set_threads(int n);

// ---- encoder: token + position embedding ----
// out[B,T,C] = wte[tokens[b,t], :] + wpe[t, :]; tokens[B,T] in [0, V).
template <class T>
void encoder_forward(T* out, const std::int32_t* tokens, const T* wte, const T* wpe, int B, int Tn,
                     int C);
// dwte[V,C] += scatter of dout by token; dwpe[T,C] += dout summed over the batch.
template <class T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const std::int32_t* tokens, int B, int Tn,
                      int C);

// ---- layernorm over the last dimension (eps 1e-5) ----
// out[N,C] = (inp - mean) * rstd * w[C] + b[C]; mean[N], rstd[N] are kept for backward.
template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b,
                       std::int64_t N, int C);
// dinp[N,C] +=, dw[C] +=, db[C] +=.
template <class T>
void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w,
                        const T* mean, const T* rstd, std::int64_t N, int C);

// ---- matmul with bias (a Linear layer, PyTorch's weight layout) ----
// out[N,OC] = inp[N,C] @ w[OC,C]^T + bias[OC]; bias may be null.
template <class T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, std::int64_t N, int C, int OC);
// dinp[N,C] += dout @ w; dw[OC,C] += dout^T @ inp; dbias[OC] += column sums of dout.
// dinp and dbias may be null (not wanted).
template <class T>
void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w,
                     std::int64_t N, int C, int OC);
// Its two halves, for a caller that communicates between them (Megatron-Core's asynchronous
// tensor-parallel backward): dinp += dout @ w; then dw += dout^T @ inp and dbias (may be null).
template <class T>
void matmul_backward_data(T* dinp, const T* dout, const T* w, std::int64_t N, int C, int OC);
template <class T>
void matmul_backward_weight(T* dw, T* dbias, const T* dout, const T* inp, std::int64_t N, int C,
                            int OC);

// ---- multi-head self-attention, in three steps: causal (GPT) or bidirectional (BERT) ----
// causal = false (BERT's encoder): every query sees every key; the comments below describe the
// causal case, and without the mask "t2 <= t" reads "every t2" and nothing is set to 0.
// qkv[B,T,3C] holds q, k, v of each token side by side; head h uses channels [h*hs, (h+1)*hs) of
// each. att[B,NH,T,T] is the attention matrix; out[B,T,C] the heads' outputs side by side.
// The products go through BLAS per (batch, head), in blocks of kAttnBlock query rows that stop
// at the diagonal block, so the masked upper triangle is (mostly) not computed.
inline constexpr int kAttnBlock = 64;

// att[b,h,t,t2] = (q[b,t,h] . k[b,t2,h]) / sqrt(hs) for t2 <= t (entries above the diagonal are
// unspecified).
template <class T>
void attention_scores_forward(T* att, const T* qkv, int B, int Tn, int C, int NH,
                              bool causal = true);
// In place, row by row: softmax over t2 <= t; entries t2 > t are set to 0.
template <class T>
void attention_softmax_forward(T* att, int B, int Tn, int NH, bool causal = true);
// out[b,t,h] = sum_{t2 <= t} att[b,h,t,t2] v[b,t2,h].
template <class T>
void attention_values_forward(T* out, const T* att, const T* qkv, int B, int Tn, int C, int NH,
                              bool causal = true);
// Backward of the values product: datt[B,NH,T,T] = dout v^T (OVERWRITTEN: it is the attention
// op's internal intermediate, not an input gradient) and dv (inside dqkv) += att^T dout.
template <class T>
void attention_values_backward(T* datt, T* dqkv, const T* dout, const T* att, const T* qkv, int B,
                               int Tn, int C, int NH, bool causal = true);
// In place: datt (dL/d probabilities) becomes dL/d scores, P * (dP - sum(P * dP)) over t2 <= t,
// and 0 above the diagonal.
template <class T>
void attention_softmax_backward(T* datt, const T* att, int B, int Tn, int NH, bool causal = true);
// dq += datt k / sqrt(hs) and dk += datt^T q / sqrt(hs) (inside dqkv); datt = dL/d scores.
template <class T>
void attention_scores_backward(T* dqkv, const T* datt, const T* qkv, int B, int Tn, int C, int NH,
                               bool causal = true);
// The three steps together: qkv[B,T,3C] -> out[B,T,C], att[B,NH,T,T] kept for backward.
template <class T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH,
                       bool causal = true);
// dqkv[B,T,3C] +=; datt[B,NH,T,T] is scratch.
template <class T>
void attention_backward(T* dqkv, T* datt, const T* dout, const T* qkv, const T* att, int B, int Tn,
                        int C, int NH, bool causal = true);

// ---- GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) ----
// Computed as x * sigmoid(2u), the same function. out[n] = gelu(inp[n]).
template <class T>
void gelu_forward(T* out, const T* inp, std::int64_t n);
// dinp[n] += gelu'(inp) * dout.
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::int64_t n);

// ---- residual add ----
// out[n] = a[n] + b[n].
template <class T>
void residual_forward(T* out, const T* a, const T* b, std::int64_t n);
// da[n] += dout, db[n] += dout. da may alias dout: then the residual stream's gradient passes
// through in place (da is left as is, which is what "da = dout" means for an in-place stream).
template <class T>
void residual_backward(T* da, T* db, const T* dout, std::int64_t n);

// ---- fused softmax + cross-entropy over logits ----
// A target kIgnoreTarget (-1, PyTorch's ignore_index) marks a row without loss (BERT's unmasked
// positions): loss 0, gradient 0, and the mean is over the other rows.
inline constexpr std::int32_t kIgnoreTarget = -1;
// probs[N,V] = softmax(logits) (probs may alias logits); losses[N] = -log probs[n, targets[n]]
// (losses may be null). Returns the mean loss over the rows whose target is not ignored (0 when
// every row is).
template <class T>
T crossentropy_forward(T* probs, T* losses, const T* logits, const std::int32_t* targets,
                       std::int64_t N, int V);
// dlogits[N,V] += dloss * (probs - onehot(targets)) / N': the gradient of dloss x mean loss
// (N': the rows not ignored; ignored rows get no gradient).
// In place (dlogits == probs) it overwrites probs with that gradient instead.
template <class T>
void crossentropy_backward(T* dlogits, const T* probs, const std::int32_t* targets, std::int64_t N,
                           int V, T dloss = T(1));

}  // namespace commscope::train
