// A GPT-2 model (fp32, CPU) over one flat parameter buffer: its layout, its initialisation, and
// forward/backward through the kernels of kernels.h, whole or module by module (ZeRO-3 gathers
// one module's parameters at a time). No MPI here: the trainer around it communicates.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "commscope/spec/vocabulary.h"
#include "commscope/util/result.h"

namespace commscope::train {

// The architectures the trainer's transformer takes (the workload's ArchKind of the same name).
// gpt: GPT-2 (causal attention, final LayerNorm, next-token loss). bert: BERT's encoder for the
// masked-LM objective: bidirectional attention, token-type embeddings and the embedding
// LayerNorm, no final norm (the workload's BERT), blocks in the pre-LN order of GPT-2 and
// Megatron-LM, the LM head tied to the word embedding, no pooler (masked-LM only).
enum class ModelArch { gpt, bert };

struct GptConfig {
  int layers = 2, hidden = 64, heads = 4, vocab = 256, seq = 32, max_positions = 32;
  ModelArch arch = ModelArch::gpt;
  int type_vocab = 0;  // BERT's token types (segments A, B): 0 for GPT
  // Mixture of experts (GPT only; 0: dense): every block's MLP is `experts` GELU experts of
  // width 4h with biases, each token routed to `experts_per_token` of them by a linear router
  // (h -> experts, no bias): top-k of its logits, gates the softmax over those k (Megatron-LM's
  // default, --moe-router-pre-softmax off; Mixtral's). Dropless, no auxiliary loss
  // (Megatron-LM's --moe-aux-loss-coeff default 0). Gpt runs dense models only; GptShard
  // (parallel.h) runs these.
  int experts = 0, experts_per_token = 0;
};

// layers >= 1, heads >= 1, hidden >= 1 and a multiple of heads, vocab >= 2, seq >= 1,
// seq <= max_positions; type_vocab 0 for gpt, 0 to 2 for bert. The error names the field, its
// value and what was expected.
Status validate(const GptConfig& cfg);

// BERT's token type of a position: segment A (0) for the first half of the sequence, B (1) for
// the second (with type_vocab >= 2; 0 with one type; -1, none, with type_vocab 0).
int token_type(int position, int seq, int type_vocab);

struct Range {
  std::int64_t offset = 0, size = 0;
};

// Layer of ParamTensor, Group and OpRecord: the block index, or the workload's layer numbers
// kEmbeddingLayer and kHeadLayer (the final norm) of spec/vocabulary.h.

struct ParamTensor {
  std::string name;  // "wte", "wpe", "norm_attn.w", ..., "mlp_out.b", "lnf.w", "lnf.b"
  int layer;
  std::int64_t offset, size;
};

// Where each parameter tensor lives in the flat buffer, exactly in this order (h hidden, V vocab,
// P max_positions): wte[V*h], wpe[P*h]; per block: norm_attn.w[h], norm_attn.b[h], qkv.w[3h*h],
// qkv.b[3h], attn_out.w[h*h], attn_out.b[h], norm_mlp.w[h], norm_mlp.b[h], mlp_in.w[4h*h],
// mlp_in.b[4h], mlp_out.w[h*4h], mlp_out.b[h]; then lnf.w[h], lnf.b[h]. Weights are [out, in].
// Total V*h + P*h + L*(12h^2 + 13h) + 2h. BERT (arch bert): wte[V*h], wpe[P*h], wtt[types*h],
// norm_emb.w[h], norm_emb.b[h] (the embedding LayerNorm); the same blocks; no lnf (head() is
// empty, and there is no "head" group): V*h + P*h + types*h + 2h + L*(12h^2 + 13h).
// Mixture of experts (experts E > 0): each block's mlp_in/mlp_out are replaced by router.w[E*h]
// and, for e = 0..E-1, "expert<e>.mlp_in.w"[4h*h], ".mlp_in.b"[4h], ".mlp_out.w"[h*4h],
// ".mlp_out.b"[h]; its backward groups are "moe" (router and experts), then norm_mlp, ....
class ParamLayout {
 public:
  explicit ParamLayout(const GptConfig& cfg);  // cfg must pass validate() (else CS_CHECK aborts)
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  std::int64_t total() const { return total_; }
  Range embedding() const { return embedding_; }  // wte then wpe
  Range block(int l) const;
  Range head() const { return head_; }  // lnf.w, lnf.b (the LM head is tied to wte)
  // The groups of tensors whose gradients backward completes together, in the order backward
  // completes them: head (lnf w,b); then for l = L-1..0: mlp_out (w,b), mlp_in (w,b),
  // norm_mlp (w,b), attn_out (w,b), qkv (w,b), norm_attn (w,b); finally the embedding (wte,
  // wpe). Each group is a contiguous Range; the sequence tiles [0, total) from the END to the
  // START (reverse memory order). Names: "head", "mlp_out", ..., "norm_attn", "embedding".
  struct Group {
    std::string_view name;
    int layer;
    Range range;
  };
  const std::vector<Group>& backward_groups() const { return groups_; }

 private:
  std::vector<ParamTensor> tensors_;
  std::vector<Range> blocks_;
  std::vector<Group> groups_;
  Range embedding_, head_;
  std::int64_t total_ = 0;
};

// Deterministic and platform-independent (splitmix64-seeded xoshiro256** and Box-Muller, in
// double then rounded to float, so libm's last-ulp differences in log/cos/sin do not show): each
// tensor draws from its own stream seeded by (seed, tensor index). Weights and wte,
// wpe ~ N(0, 0.02); the residual projections attn_out.w and mlp_out.w ~ N(0, 0.02/sqrt(2L));
// biases 0; LayerNorm weights 1 and biases 0.
void init_params(const ParamLayout& layout, float* params, std::uint64_t seed);
// The stream init_params draws tensor `index` of its layout from: n values N(0, stddev) (T5's
// initialisation, t5.h, uses it for its own tensors).
void fill_tensor_normal(float* out, std::int64_t n, double stddev, std::uint64_t seed,
                        std::size_t index);

// One op as it ran, for the caller's timeline. flops: its matrix-product FLOPs (0 for the other
// ops); attention products are counted over the full T x T (as the workload model does), though
// the kernels skip most of the masked triangle.
struct OpRecord {
  std::string_view name;
  int layer;
  bool backward;
  double start_s, end_s;
  double flops;
  std::int64_t m = 0, n = 0, k = 0;  // a matrix product's forward shape [m x k] x [k x n] (T5's)
};
using OpObserver = std::function<void(const OpRecord&)>;

// Forward op names: "embedding" (layer -1); per block "norm_attn", "qkv", "attn_scores",
// "softmax", "attn_values", "attn_out", "attn_residual", "norm_mlp", "mlp_in", "mlp_act",
// "mlp_out", "mlp_residual"; head (layer -2) "final_norm", "lm_head", "cross_entropy". Backward
// reports the same names with backward = true, in reverse order (the attention's three steps
// stay three records).
class Gpt {
 public:
  using GroupCallback = std::function<void(const ParamLayout::Group&)>;

  // Activations for batch x seq, allocated once (cfg must pass validate(), batch >= 1, arch gpt:
  // BERT runs on GptShard of parallel.h, whole or split). Memory:
  // about (16 B T h + B heads T^2) floats per block, plus B T vocab for the logits.
  Gpt(const GptConfig& cfg, int batch);
  const GptConfig& config() const { return cfg_; }
  const ParamLayout& layout() const { return layout_; }
  int batch() const { return batch_; }

  // Optional; when set, every kernel call is timed with std::chrono::steady_clock (now()) and
  // reported.
  void set_observer(OpObserver o) { observer_ = std::move(o); }
  // Seconds on std::chrono::steady_clock since its epoch: the clock of OpRecord.
  static double now();

  // Whole model over one flat parameter buffer (ParamLayout). tokens and targets: [batch, seq],
  // in [0, vocab). Returns the mean loss over batch*seq.
  float forward(const float* params, const std::int32_t* tokens, const std::int32_t* targets);
  // Accumulates (+=) into grads (same layout). Calls on_group(group) right after each backward
  // group's gradients are complete, in ParamLayout::backward_groups() order. Needs a forward
  // just before (it consumes the forward's probabilities in place: one backward per forward).
  void backward(const float* params, float* grads, const GroupCallback& on_group = {});

  // The same, module by module; pointers are to the START of the module's Range (embedding(),
  // block(l), head()). forward() and backward() are exactly these calls in sequence.
  void forward_embedding(const float* emb, const std::int32_t* tokens);
  void forward_block(int l, const float* block);
  float forward_head(const float* wte, const float* lnf, const std::int32_t* targets);
  // d_wte receives the LM head's contribution here and the lookup's in backward_embedding.
  void backward_head(const float* wte, const float* lnf, float* d_wte, float* d_lnf);
  // Calls on_group (if set) with each of the block's six groups as soon as it is complete.
  void backward_block(int l, const float* block, float* d_block,
                      const GroupCallback& on_group = {});
  void backward_embedding(float* d_emb);  // uses the tokens of the last forward

  // Matrix-product FLOPs (the GEMMs, the LM head and the attention products over full T x T)
  // of one forward + backward of this batch: 3x the forward's.
  double matmul_flops_per_step() const;

 private:
  struct BlockActs {
    std::vector<float> ln1, ln1_mean, ln1_rstd, qkv, att, atty, res2, ln2, ln2_mean, ln2_rstd, fch,
        fch_gelu, res3;
  };
  template <class F>
  void timed(std::string_view name, int layer, bool backward, double flops, F&& f);
  const float* block_input(int l) const;

  GptConfig cfg_;
  ParamLayout layout_;
  int batch_;
  OpObserver observer_;
  std::vector<std::int32_t> tokens_, targets_;
  std::vector<float> encoded_;
  std::vector<BlockActs> blocks_;
  std::vector<float> lnf_, lnf_mean_, lnf_rstd_, probs_, losses_;
  // backward scratch, shared by the blocks
  std::vector<float> dres_, dtmp_, dln_, dqkv_, datt_, datty_, dfch_, dfch_gelu_;
  std::vector<float> tmp_;  // forward scratch: a projection before its residual add
  bool forward_done_ = false;
};

// Runs f; when `observer` is set, reports it as `op` with its start and end (Gpt::now()). The
// models' kernel timing (Gpt, GptShard and T5 call it for every kernel).
template <class F>
void observe(const OpObserver& observer, OpRecord op, F&& f) {
  if (!observer) {
    f();
    return;
  }
  op.start_s = Gpt::now();
  f();
  op.end_s = Gpt::now();
  observer(op);
}

}  // namespace commscope::train
