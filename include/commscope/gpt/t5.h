// T5 (Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified Text-to-Text
// Transformer") on the CPU, in fp32 for training and fp64 for the finite-difference tests, over
// one flat parameter buffer: an encoder of bidirectional self-attention blocks and a decoder of
// causal self-attention + cross-attention blocks, each stack with its own relative position bias
// (buckets x heads, in the stack's first block and shared by all its blocks), RMSNorm without
// bias, a ReLU MLP, no biases anywhere, and the LM head tied to the word embedding (scaled by
// hidden^-1/2 before the head, as T5 does). No MPI here.
//
// What this simplifies against Google's T5 (docs/train.md, "T5"): attention scores are scaled by
// 1/sqrt(head size) (T5 folds that scale into its initialisation instead; the functions are the
// same class), every weight starts at N(0, 0.02) (residual projections N(0, 0.02/sqrt(2L))) as
// GPT-2's do, there is no dropout, and the decoder's input is given by the caller (the targets
// shifted right behind a start token, see t5_synthetic_batch) rather than built from a
// span-corruption objective.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "commscope/gpt/gpt.h"
#include "commscope/spec/model.h"
#include "commscope/util/result.h"

namespace commscope::train {

// What a T5 object holds: the whole model, or one side of Megatron's pipeline split at the
// encoder/decoder boundary (pipeline_model_parallel_split_rank): the encoder (wte, the encoder
// blocks, norm_enc) or the decoder (its copy of the tied wte, the decoder blocks, norm_dec). The
// encoder output crosses the boundary forward (B Te h values, the workload's boundary_elements)
// and its gradient backward; the two wte gradients are summed (embedding_grad_all_reduce).
enum class T5Part { whole, encoder, decoder };

struct T5Config {
  int encoder_layers = 2, decoder_layers = 2, hidden = 64, heads = 4, ffn = 256, vocab = 256;
  int encoder_seq = 32, decoder_seq = 32;
  int buckets = 32, max_distance = 128;  // relative position buckets and their reach (T5's)
};

// Every size >= 1, hidden a multiple of heads, buckets even and >= 4, max_distance more than
// buckets / 2. The error names the field, its value and what was expected.
Status validate(const T5Config& cfg);
// validate() and a tensor-parallel degree tp >= 1 that divides heads, ffn and vocab.
Status validate_tp(const T5Config& cfg, int tp);

// The trainer's T5 of a workload model: encoder and decoder layers, hidden, heads, ffn, vocab,
// seq_length (encoder), decoder_seq_length, relative_attention_buckets. An error names the field
// this T5 cannot train (kind not t5, grouped-query heads, a head_dim other than hidden / heads,
// biases, a learned position table, untied embeddings, a norm other than rmsnorm or an MLP other
// than relu).
Result<T5Config> t5_config(const ModelSpec& m);
// The inverse: the workload's ModelSpec of this T5 (count_params of it equals T5Layout's total).
ModelSpec t5_model_spec(const T5Config& cfg, const std::string& name);

// T5's relative position bucket (Mesh TensorFlow's _relative_position_bucket) of key position
// minus query position. Bidirectional (encoder): half the buckets for keys after the query;
// causal (decoder): keys after the query all fall in bucket 0 (they are masked anyway). Within
// each half, distances below buckets/4 (bidirectional) or buckets/2 (causal) get a bucket each,
// larger ones logarithmically wider buckets up to max_distance, beyond it the last bucket.
int relative_bucket(int relative_position, bool bidirectional, int buckets, int max_distance);

// The flat parameter buffer, in this order (h hidden, f ffn, V vocab, R buckets, NH heads,
// Le / Ld encoder / decoder layers; weights [out, in]): wte[V*h]; encoder blocks l = 0..Le-1:
// (l = 0 only: rel_bias[R*NH]), norm_attn.w[h], qkv.w[3h*h], attn_out.w[h*h], norm_mlp.w[h],
// mlp_in.w[f*h], mlp_out.w[h*f]; norm_enc.w[h]; decoder blocks l = Le..Le+Ld-1: (l = Le only:
// rel_bias[R*NH]), norm_attn.w[h], qkv.w[3h*h], attn_out.w[h*h], norm_cross.w[h],
// cross_q.w[h*h], cross_kv.w[2h*h], cross_out.w[h*h], norm_mlp.w[h], mlp_in.w[f*h],
// mlp_out.w[h*f]; norm_dec.w[h]. Total V h + 2 R NH + Le (4h^2 + 2hf + 2h) + Ld (8h^2 + 2hf + 3h)
// + 2h: the workload's count_params for ArchKind::t5 (blocks numbered as the workload does:
// the encoder's 0..Le-1, the decoder's Le..). rel_bias[bucket * NH + head], as Hugging Face's
// relative_attention_bias embedding.
class T5Layout {
 public:
  struct Block {
    std::int64_t rel_bias = -1, norm_attn, qkv, attn_out, norm_cross = -1, cross_q = -1,
                 cross_kv = -1, cross_out = -1, norm_mlp, mlp_in, mlp_out;
    Range range;
  };
  // The whole model (tp 1), or tensor-parallel rank `rank` of `tp` (cfg must pass
  // validate_tp, else CS_CHECK aborts): Megatron's split, the workload's block_params(m, l, tp):
  // wte's vocabulary rows [rank V/tp, (rank+1) V/tp); rel_bias the rank's heads (buckets x
  // heads/tp); qkv.w, cross_q.w, cross_kv.w and mlp_in.w column-parallel (the rank's heads of q,
  // k and v, the rank's ffn/tp rows); attn_out.w, cross_out.w and mlp_out.w row-parallel (their
  // input columns); the norms replicated. Same tensors in the same order as the whole layout.
  // part: the tensors of that side only, in the same order (a subsequence of the whole's).
  explicit T5Layout(const T5Config& cfg, int tp = 1, int rank = 0, T5Part part = T5Part::whole);
  T5Part part() const { return part_; }
  bool has_block(int l) const {
    return part_ == T5Part::whole || (part_ == T5Part::encoder) == (l < cfg_.encoder_layers);
  }
  int tp() const { return tp_; }
  int rank() const { return rank_; }
  // This rank's slice of the whole model's buffer (params or gradients): local[total()].
  template <class T>
  void from_full(const T* full, T* local) const;
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  std::int64_t total() const { return total_; }
  const Block& block(int l) const { return blocks_[static_cast<std::size_t>(l)]; }
  // The norms' weights this layout holds (each block's norm_attn, norm_cross, norm_mlp, then
  // norm_enc / norm_dec), in buffer order: under sequence parallelism each rank's gradient of
  // them is a sum over its own tokens only, completed by one all-reduce over the group.
  std::vector<Range> sequence_parallel_partial() const;
  std::int64_t wte() const { return 0; }
  std::int64_t enc_norm() const { return enc_norm_; }  // -1 on the decoder part
  std::int64_t dec_norm() const { return dec_norm_; }  // -1 on the encoder part

 private:
  T5Config cfg_;
  int tp_ = 1, rank_ = 0;
  T5Part part_ = T5Part::whole;
  std::vector<ParamTensor> tensors_;
  std::vector<Block> blocks_;
  std::int64_t enc_norm_ = -1, dec_norm_ = -1, total_ = 0;
};

// Deterministic (on the whole layout, tp 1; a rank takes its slice with from_full), as init_params
// of gpt.h (one splitmix64/xoshiro stream per tensor): norms 1, rel_bias, wte and the other weights
// N(0, 0.02), attn_out, cross_out and mlp_out N(0, 0.02/sqrt(2 (Le + Ld))).
void init_t5_params(const T5Layout& layout, float* params, std::uint64_t seed);

// One batch of the trainer's synthetic sequence-to-sequence task: encoder tokens from
// TokenSource::synthetic (data.h) of sample `index`; the decoder's targets the encoder's tokens
// reversed (target t is encoder token Te - 1 - (t mod Te): the first can only be known by
// reading the encoder through cross-attention); the decoder's input the targets shifted right
// behind token 0 (T5's start token, its pad).
struct T5Batch {
  std::vector<std::int32_t> encoder_tokens, decoder_tokens, targets;  // [B, Te], [B, Td], [B, Td]
};
T5Batch t5_synthetic_batch(const T5Config& cfg, int batch, std::int64_t first_index,
                           std::uint64_t seed);

// The model with its activations for `batch` sequences, allocated once: about
// B (Te (6h + 2f) + Td (12h + 2f)) + B NH (Te^2 + Td^2 + Td Te) values per block pair, plus
// B Td V for the logits. T is float or double.
//
// Tensor parallelism (Megatron-LM, as the workload counts it): rank `rank` of `tp` holds
// T5Layout(cfg, tp, rank) and calls the all-reduce callback (sums, or maxima) over its
// tensor-parallel group, in the same order on every rank, only when tp > 1: forward, the
// vocabulary-parallel lookup of each stack's embedding (layer -1), 2 per encoder block and 3 per
// decoder block after the row-parallel projections, and the cross-entropy's "ce_max",
// "ce_sum_exp", "ce_target" (B Td values each, layer -2); backward, the LM head's input gradient
// (layer -2), per decoder block the MLP's, the encoder output's (B Te h, for cross_kv), the
// cross-attention query's and the self-attention's input gradients, per encoder block the MLP's
// and the attention's: 2 + 2 Le + 3 Ld + 3 calls forward, 1 + 2 Le + 4 Ld backward, all named
// "tp_all_reduce" but the three of the cross-entropy.
//
// Sequence parallelism (Korthikanti et al. 2022, Megatron's --sequence-parallel; sequence_parallel
// with tp > 1): each rank holds its block of B Te / tp encoder and B Td / tp decoder rows of the
// residual stream (rows in [B, T] order, rank r the r-th block: B T must be a multiple of tp),
// the norms and residual adds run on those rows, and the calls are the workload's, in its order:
// each tensor-parallel region is entered by an all-gather ("sp_all_gather"; the encoder output
// once more per decoder block, for cross_kv) and left by a reduce-scatter ("sp_reduce_scatter",
// also after each embedding lookup); backward, the reverse, and every column-parallel product
// re-gathers its input for the weight gradient ("sp_all_gather_wgrad"). The cross-entropy's
// three all-reduces stay. The norms' gradients are then partial (T5Layout::
// sequence_parallel_partial): the caller all-reduces them over the group once per step.
// encoder_output() and the gradients that cross the pipeline split are this rank's rows.
template <class T>
class T5 {
 public:
  using AllReduce =
      std::function<void(T* data, std::int64_t n, bool max, std::string_view name, int layer)>;
  // gather = true all-gathers `shard` elements of every rank into `out` (tp x shard, in rank
  // order); false reduce-scatters `in` (tp x shard) and leaves this rank's block of the sum in
  // `out` (GptShard::SequenceComm's contract).
  using SequenceComm = std::function<void(bool gather, const T* in, T* out, std::int64_t shard,
                                          std::string_view name, int layer)>;
  T5(const T5Config& cfg, int batch, int tp = 1, int rank = 0, T5Part part = T5Part::whole,
     bool sequence_parallel = false);
  void set_all_reduce(AllReduce f) { all_reduce_ = std::move(f); }
  void set_sequence_comm(SequenceComm f) { sequence_ = std::move(f); }
  bool sequence_parallel() const { return sp_; }
  // Rows of the residual stream this rank holds: B T, or B T / tp under sequence parallelism.
  std::int64_t rows(int seq) const;
  // Each kernel's time (characterize --compute-only times T5's own kernels with it): matrix
  // products "enc_qkv", "enc_attn_out", "enc_mlp_in", "enc_mlp_out", "dec_*" likewise and
  // "dec_cross_q", "dec_cross_kv", "dec_cross_out", "lm_head" (OpRecord's m, n, k: the forward
  // shape); the attentions "attn_scores" (fused: scores, softmax and values); "rmsnorm",
  // "relu"; forward, then backward with backward = true. The rest (embedding, residual adds,
  // the cross-entropy) is not timed: it counts in the pass's wall time only.
  void set_observer(OpObserver o) { observer_ = std::move(o); }
  const T5Config& config() const { return cfg_; }
  const T5Layout& layout() const { return layout_; }

  // tokens: encoder [B, Te] and decoder input [B, Td] in [0, V); targets [B, Td] in [0, V) or
  // kIgnoreTarget. Returns the mean cross-entropy over the targets not ignored.
  T forward(const T* params, const std::int32_t* encoder_tokens, const std::int32_t* decoder_tokens,
            const std::int32_t* targets);
  // Accumulates (+=) the gradient of forward's loss into grads (same layout). Needs a forward
  // just before (it consumes the forward's probabilities: one backward per forward).
  void backward(const T* params, T* grads);

  // The same in halves, for the pipeline split (forward() and backward() are exactly these):
  // forward_encoder (whole or encoder part); forward_decoder reads the encoder output, its own
  // (whole: encoder_output null) or the encoder stage's (decoder part: B Te h values), and
  // returns the loss; backward_decoder (whole or decoder) leaves encoder_output_grad();
  // backward_encoder reads that gradient, its own (whole: null) or the decoder stage's.
  void forward_encoder(const T* params, const std::int32_t* encoder_tokens);
  const T* encoder_output() const { return enc_out_.data(); }
  T forward_decoder(const T* params, const T* encoder_output, const std::int32_t* decoder_tokens,
                    const std::int32_t* targets);
  void backward_decoder(const T* params, T* grads);
  const T* encoder_output_grad() const { return d_enc_out_.data(); }
  void backward_encoder(const T* params, T* grads, const T* d_encoder_output);

 private:
  struct BlockActs {
    std::vector<T> in, n1, rstd1, qkv, att, atty, mid, n2, rstd2, q, kv, catt, catty, mid2, n3,
        rstd3, fc, fca;
  };
  void block_forward(int l, const T* params, const T* x, T* y, int Tn, bool decoder);
  void block_backward(int l, const T* params, T* grads, T* dx, int Tn, bool decoder);
  void reduce(T* data, std::int64_t n, bool max, std::string_view name, int layer);
  // Sequence parallelism's calls: `full` has tp x `shard_rows` rows of hidden values.
  void gather(const T* shard, T* full, std::int64_t shard_rows, std::string_view name, int layer);
  void scatter(const T* full, T* shard, std::int64_t shard_rows, std::string_view name, int layer);
  // `shard` whole: all-gathered into gath_ under sequence parallelism (returns gath_), else
  // `shard` itself (its rows are already the whole stream's).
  const T* gathered(const T* shard, std::int64_t shard_rows, std::string_view name, int layer);
  // A region's exit: all-reduce `partial` in place (rows of the whole stream), or, under sequence
  // parallelism, reduce-scatter it into part_; returns where this rank's rows of the sum are.
  const T* exit_region(T* partial, std::int64_t all_rows, int layer);
  void embed(const T* params, T* out, const std::int32_t* tokens, std::int64_t n);
  void embed_back(T* grads, const std::int32_t* tokens, std::int64_t n);
  template <class F>
  void timed(std::string_view name, int layer, bool backward, double flops, std::int64_t m,
             std::int64_t n, std::int64_t k, F&& f);

  T5Config cfg_;
  T5Layout layout_;
  int batch_;
  std::vector<std::int32_t> enc_tok_, dec_tok_, targets_;
  std::vector<int> enc_bucket_, dec_bucket_;  // [Te, Te], [Td, Td]
  std::vector<BlockActs> acts_;
  std::vector<T> enc_x_, enc_out_, enc_rstd_, dec_x_, dec_n_, dec_rstd_, probs_;
  std::vector<T> d_enc_out_, dres_, dtmp_, dn_, dqkv_, datty_, dfc_, dkv_, dscratch_;
  std::vector<T> ce_max_, ce_sum_, ce_tgt_, denc_part_;
  std::vector<T> gath_, part_;  // sequence parallelism: gathered rows; a reduce-scatter's rows
  std::int64_t counted_ = 0;
  bool sp_ = false;
  AllReduce all_reduce_;
  SequenceComm sequence_;
  OpObserver observer_;
  bool forward_done_ = false, encoder_done_ = false, decoder_backward_done_ = false;
};

// The kernels of T5 that gpt's kernels.h does not have, for the tests: templates instantiated
// for float and double, accumulating (+=) in backward as kernels.h's do.
// RMSNorm (eps 1e-6, T5's): out[N,C] = inp * rstd * w, rstd[N] = 1/sqrt(mean(inp^2) + eps).
template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* w, std::int64_t N, int C);
template <class T>
void rmsnorm_backward(T* dinp, T* dw, const T* dout, const T* inp, const T* w, const T* rstd,
                      std::int64_t N, int C);
// Multi-head attention of Tq queries over Tk keys with an optional relative position bias:
// q at q + (b Tq + i) ldq + h hs, k and v at k/v + (b Tk + j) ldkv + h hs; scores
// (q . k) / sqrt(hs) + bias[bucket[i Tk + j] NH + h] (bias null: none); causal masks j > i.
// att[B,NH,Tq,Tk] the probabilities; out[b,i,h hs..] (row stride C).
template <class T>
void relative_attention_forward(T* out, T* att, const T* q, int ldq, const T* k, const T* v,
                                int ldkv, const T* bias, const int* bucket, int B, int Tq, int Tk,
                                int C, int NH, bool causal);
// dq, dk, dv (same strides as q, k, v) +=, dbias += (when bias was used); scratch[Tk].
template <class T>
void relative_attention_backward(T* dq, T* dk, T* dv, T* dbias, const T* dout, const T* att,
                                 const T* q, int ldq, const T* k, const T* v, int ldkv,
                                 const int* bucket, int B, int Tq, int Tk, int C, int NH,
                                 bool causal, T* scratch);

}  // namespace commscope::train
