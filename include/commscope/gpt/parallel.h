// The GPT-2 of gpt.h split the Megatron way: a tensor-parallel shard (column-parallel QKV and
// MLP-up, row-parallel attention-out and MLP-down, vocabulary-parallel embedding, LM head and
// cross-entropy) of one pipeline chunk (a contiguous run of blocks, with the embedding on the
// first chunk and the final norm and LM head on the last). No MPI here: the tensor-parallel
// all-reduces go through a callback the trainer provides, pipeline sends and receives are the
// trainer's (this class takes the received activation and gives the one to send).
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <utility>
#include <vector>

#include "commscope/gpt/gpt.h"
#include "commscope/spec/plan.h"

namespace commscope::train {

// Which part of the model a rank holds.
struct ShardSpec {
  int tp = 1, tp_rank = 0;          // tensor-parallel size and this rank's place in it
  int first_layer = 0, layers = 0;  // blocks [first_layer, first_layer + layers)
  bool embedding = true;            // the first chunk: word and position embeddings
  bool head = true;                 // the last chunk: final norm and the (tied) LM head
  // Megatron's sequence parallelism (tp > 1): outside the tensor-parallel regions (norms,
  // residuals, the stream between blocks and stages) each rank holds batch x seq / tp rows;
  // the regions' entries all-gather them, their exits reduce-scatter.
  bool sequence_parallel = false;
  // Megatron-LM's asynchronous TP all-reduce without sequence parallelism
  // (--async-tensor-model-parallel-allreduce): a column-parallel linear's input gradient is
  // all-reduced while its weight gradient is computed (GptShard::column_backward). Under
  // sequence parallelism its reduce-scatter always runs so.
  bool tp_async = false;
  // Context parallelism (GPT only): each rank holds seq / cp positions of every sequence, the
  // load-balanced causal chunks r and 2 cp - 1 - r of 2 cp (Megatron-LM). Everything but
  // attention is per position; attention exchanges K and V in one of four forms (cp_comm):
  // - all_gather: K and V all-gathered over the CP group, their gradients reduce-scattered
  //   (Transformer Engine's all-gather CP, Megatron-LM --cp-comm-type all_gather);
  // - p2p: K and V passed around the CP ring block by block, each block's attention merged
  //   into the running output by its logsumexp, dK, dV passed back around it in backward (ring
  //   attention: Transformer Engine's P2P CP, --cp-comm-type p2p);
  // - a2a: all-to-alls of Q, K, V before attention and of its output after it give each rank
  //   the whole sequence of heads / cp heads (--cp-comm-type a2a, DeepSpeed-Ulysses);
  // - a2a_p2p: both (Transformer Engine's hierarchical CP): all-to-alls over each group of
  //   cp_a2a_size a neighbouring CP ranks give every rank the group's positions of heads / a of
  //   its heads, and the ring runs over the cp / a ranks that hold the same heads in the other
  //   groups (CP ranks a apart), passing those positions' K and V: as many floats a step as the
  //   plain ring's. 1 < a < cp (a level of one rank is the other form alone).
  int cp = 1, cp_rank = 0;
  CpCommType cp_comm = CpCommType::all_gather;
  int cp_a2a_size = 1;  // a2a_p2p's all-to-all level
  bool cp_ring() const { return cp_comm == CpCommType::p2p || cp_comm == CpCommType::a2a_p2p; }
  // The all-to-all level's size: a2a_p2p's; cp for a2a (the whole group); 1 otherwise.
  int cp_a2a_level() const {
    return cp_comm == CpCommType::a2a_p2p ? cp_a2a_size : cp_comm == CpCommType::a2a ? cp : 1;
  }
  // Expert parallelism (a model with experts, TP 1): this rank holds experts
  // [ep_rank E / ep, (ep_rank + 1) E / ep) of every MoE block; tokens are dispatched to their
  // experts' ranks and combined back by all-to-allv over the EP group (Megatron-LM's
  // all-to-all token dispatcher, --expert-model-parallel-size).
  int ep = 1, ep_rank = 0;
  // The load-balancing loss of a model with experts (Megatron-LM --moe-aux-loss-coeff, the
  // Switch Transformer's form): per MoE block and micro-batch, coeff x E / (k n^2) x
  // sum_e c_e sum_t p_te over the rank's n tokens, c_e the rows routed to expert e and p the
  // softmax of the router's logits over all E. Added to the objective (its gradient reaches
  // the router), reported apart from the cross-entropy. 0: none.
  float moe_aux_loss_coeff = 0;
  // Token dropping (Megatron-LM --moe-expert-capacity-factor, drop policy "probs"): each
  // expert takes at most ceil(n k / E x factor) of a rank's n tokens, those of the highest
  // routing probability; a dropped token's slot adds nothing (its gate is not renormalised).
  // With moe_pad_to_capacity (--moe-pad-expert-input-to-capacity) every expert takes exactly
  // that many, the unrouted ones with weight 0. 0: dropless.
  double moe_capacity_factor = 0;
  bool moe_pad_to_capacity = false;
  // FlashAttention's algorithm (Dao et al. 2022, FlashAttention-2 2023) instead of the unfused
  // kernels: no s x s probabilities kept for backward (each query's scores live in an O(s)
  // scratch), each row's logsumexp kept instead, and backward recomputes the probabilities.
  bool flash = false;
};

// The sequence positions a context-parallel rank holds, in its local order: the chunks
// cp_rank and 2 cp - 1 - cp_rank of 2 cp equal chunks (seq divisible by 2 cp; cp 1: all).
std::vector<int> context_positions(int seq, int cp, int cp_rank);

// heads, vocab divisible by tp; seq by 2 cp; blocks within the model. The error names the
// field.
Status validate(const GptConfig& cfg, const ShardSpec& s);

// BERT (cfg.arch bert): the first chunk's embedding is [wte shard, wpe, wtt (token types),
// norm_emb w,b] (all but the wte shard replicated); the last chunk has no lnf; attention is
// bidirectional; targets may be kIgnoreTarget (the loss is the mean over the others).
// Mixture of experts (cfg.experts > 0; TP 1): the buffer starts with this rank's experts,
// layer by layer ([mlp_in.w 4h x h, mlp_in.b 4h, mlp_out.w h x 4h, mlp_out.b h] each), and a
// MoE block is [norm_attn w,b; qkv.w,b; attn_out.w,b; norm_mlp w,b; router.w E x h]: the dense
// part of the buffer (everything after the experts) is laid out as below, so that the
// data-parallel buckets laid from its end and the expert-data-parallel ones laid from the end
// of the experts' part are the workload's.
// The shard's flat buffer, in this order (h hidden, V vocabulary, P positions, t = tp):
// [wte shard V/t x h (vocabulary rows [r V/t, (r+1) V/t)), wpe P x h] on the first chunk; per
// block: norm_attn w,b [h]; qkv.w [3h/t, h] (this rank's h/t rows of q, then of k, then of v);
// qkv.b [3h/t]; attn_out.w [h, h/t] (its h/t input columns); attn_out.b [h]; norm_mlp w,b;
// mlp_in.w [4h/t, h]; mlp_in.b [4h/t]; mlp_out.w [h, 4h/t]; mlp_out.b [h]; then on the last
// chunk lnf w,b [h], and, when the last chunk is not also the first (pipeline parallel), a copy
// of the wte shard for the tied LM head (Megatron's shared embedding on the last stage).
// Backward completes gradients in reverse memory order, module by module. The sizes are the
// workload's (block_params(m, l, t), embedding and head parameters).
class ShardLayout {
 public:
  ShardLayout(const GptConfig& cfg, const ShardSpec& s);  // both must pass validate()
  std::int64_t total() const { return total_; }
  Range embedding() const { return embedding_; }  // size 0 when absent
  // The experts' part (at the start; size 0 for a dense model) and one local expert's range.
  Range experts() const { return experts_; }
  Range expert(int l, int local) const;
  Range block(int l) const;                       // l: the model's block index
  Range head() const { return head_; }            // lnf w,b (size 0 when absent)
  Range head_copy() const { return head_copy_; }  // the tied wte copy (size 0 when absent)
  // The embedding's wte shard (size 0 without the embedding).
  Range word_embedding() const;
  // The wte shard the LM head reads: the embedding's, or the copy.
  Range lm_head_weight() const;
  // Ranges every tensor-parallel rank holds whole (norms, row-parallel biases, wpe, lnf): a
  // global norm counts them once.
  const std::vector<Range>& replicated() const { return replicated_; }
  // The replicated ranges whose gradients are partial sums under sequence parallelism (norms,
  // row-parallel biases, lnf: all but wpe), all-reduced over the group at the step.
  std::vector<Range> sequence_parallel_partial() const;
  // The shard's values from the full model's buffer (ParamLayout order): parameters or
  // gradients.
  void from_full(const float* full, float* shard) const;

 private:
  GptConfig cfg_;
  ShardSpec s_;
  std::vector<Range> blocks_, replicated_;
  Range embedding_, head_, head_copy_, experts_;
  std::int64_t total_ = 0;
};

// Matrix-product FLOPs of one forward + backward of the whole (unsplit) model for `batch`
// sequences, as Gpt::matmul_flops_per_step counts them.
double gpt_matmul_flops(const GptConfig& cfg, int batch);

class GptShard {
 public:
  // Sums (max = false) or maxima of n floats over the tensor-parallel group, in place; name and
  // layer are the workload's ("tp_all_reduce", "ce_max", "ce_sum_exp", "ce_target"). Called
  // only when tp > 1, in the same order on every rank of the group.
  using AllReduce =
      std::function<void(float* data, std::int64_t n, bool max, std::string_view name, int layer)>;

  // Activations for `slots` micro-batches of `batch` sequences in flight at once.
  GptShard(const GptConfig& cfg, const ShardSpec& s, int batch, int slots);
  const ShardLayout& layout() const { return layout_; }
  const ShardSpec& spec() const { return s_; }
  void set_observer(OpObserver o) { observer_ = std::move(o); }
  void set_all_reduce(AllReduce f) { all_reduce_ = std::move(f); }
  // Sequence parallelism: gather = true all-gathers `shard` elements from every rank into
  // `out` (tp x shard, in rank order); false reduce-scatters `in` (tp x shard) and leaves
  // this rank's block of the sum in `out`. Names "sp_all_gather", "sp_all_gather_wgrad",
  // "sp_reduce_scatter".
  using SequenceComm = std::function<void(bool gather, const float* in, float* out,
                                          std::int64_t shard, std::string_view name, int layer)>;
  void set_sequence_comm(SequenceComm f) { sequence_ = std::move(f); }
  // The same collectives started and not awaited: each returns its wait, which the shard calls
  // after the compute it overlaps (column_backward). Unset: the blocking ones above, done at
  // once (the wait does nothing).
  using StartAllReduce = std::function<std::function<void()>(float* data, std::int64_t n,
                                                             std::string_view name, int layer)>;
  using StartSequence =
      std::function<std::function<void()>(bool gather, const float* in, float* out,
                                          std::int64_t shard, std::string_view name, int layer)>;
  void set_async_tp(StartAllReduce all_reduce, StartSequence sequence) {
    start_all_reduce_ = std::move(all_reduce);
    start_sequence_ = std::move(sequence);
  }
  // Context parallelism (cp > 1), the same contract over the CP group: gather = true
  // all-gathers this rank's K and V ("cp_kv_all_gather", before attention, forward and
  // backward); false reduce-scatters dK and dV to their owners ("cp_dkv_reduce_scatter").
  void set_context_comm(SequenceComm f) { context_ = std::move(f); }
  // Ring context parallelism (p2p, a2a_p2p): start sending n floats of `send` to the next CP rank
  // (cp_rank + 1 mod cp) and receiving n from the previous one into `recv` (`reverse`: to the
  // previous, from the next); returns the wait, which the shard calls after computing the
  // block it holds (the transfer overlaps it). Each call is one message. A pass is cp - 1
  // messages per block forward ("cp_kv_send": K,V) and cp backward, the other way round
  // ("cp_kv_dkv_send": K,V alone, then K,V with the dK,dV of the step before, then dK,dV
  // alone), as Transformer Engine's AttnFuncWithCPAndKVP2P sends them and as the workload's
  // Op::messages counts them; `first` marks a pass's first message, since the workload counts
  // a pass as one op of (cp - 1) or 2 (cp - 1) chunks. Hierarchical CP (cp_a2a_size a > 1):
  // the ring of the cp / a ranks a apart (cp_rank + a mod cp next), cp / a for cp.
  using RingComm = std::function<std::function<void()>(const float* send, float* recv,
                                                       std::int64_t n, std::string_view name,
                                                       int layer, bool first, bool reverse)>;
  void set_context_ring(RingComm f) { ring_ = std::move(f); }
  // All-to-all context parallelism (a2a, a2a_p2p): an all-to-all over the CP group of `block`
  // floats to and from each CP rank (in rank order in `send` and `recv`). Names
  // "cp_qkv_all_to_all", "cp_out_all_to_all" (forward), "cp_dout_all_to_all", "cp_dqkv_all_to_all"
  // (backward). Hierarchical CP (cp_a2a_size a > 1): over the group of a CP ranks [cp_rank / a x a,
  // + a), in that order.
  using AllToAllComm = std::function<void(const float* send, float* recv, std::int64_t block,
                                          std::string_view name, int layer)>;
  void set_context_a2a(AllToAllComm f) { a2a_ = std::move(f); }
  // Expert parallelism (ep > 1): an all-to-allv over the EP group of rows of `width` floats,
  // send_rows[r] rows to rank r (in rank order in `send`), recv_rows[r] from rank r into
  // `recv`. Names "moe_dispatch" and "moe_combine" (forward), "moe_combine_backward" and
  // "moe_dispatch_backward" (backward).
  using ExpertComm = std::function<void(const float* send, const std::vector<int>& send_rows,
                                        float* recv, const std::vector<int>& recv_rows, int width,
                                        std::string_view name, int layer)>;
  // Before a dispatch: this rank's row counts for every expert (E ints, experts in rank order)
  // out; every rank's counts for this rank's E / ep experts in (ep x E / ep ints, by rank).
  using ExpertCounts =
      std::function<void(const std::vector<int>& send, std::vector<int>& recv, int layer)>;
  void set_expert_comm(ExpertComm f, ExpertCounts counts) {
    expert_comm_ = std::move(f);
    expert_counts_ = std::move(counts);
  }

  // Forward of one micro-batch into activation slot `slot`. The first chunk reads tokens
  // [batch, seq] (the whole sequences: a context-parallel rank takes its positions); the others
  // `input` [batch, seq / cp, hidden] (copied). The last chunk returns the mean cross-entropy
  // over its targets (of [batch, seq], its positions); the others return 0 and leave
  // output(slot).
  float forward(int slot, const float* params, const std::int32_t* tokens, const float* input,
                const std::int32_t* targets);
  const float* output(int slot) const;
  // batch x seq / cp x hidden (/ tp under sequence parallelism): what crosses a stage boundary.
  std::int64_t activation_elements() const;

  // Backward of the slot's forward (one backward per forward), accumulating (+=) into grads.
  // d_output: dL/d output for a chunk that is not the last (ignored on the last). on_done(k)
  // after each module: the last k elements of the buffer have their final gradients.
  // input_grad() then holds dL/d input (chunks that are not the first).
  void backward(int slot, const float* params, float* grads, const float* d_output,
                const std::function<void(std::int64_t)>& on_done = {});
  const float* input_grad() const { return dres_.data(); }

  // Routing since the last call, per MoE block forward (micro-batch by micro-batch, block by
  // block): the rows this rank's tokens sent to each expert (E ints each), and the sum of the
  // load-balancing losses with the count of blocks that added one.
  struct MoeStats {
    std::vector<int> routed;
    double aux_loss = 0;
    int aux_blocks = 0;
  };
  MoeStats take_moe_stats() { return std::exchange(moe_stats_, {}); }

 private:
  struct BlockActs {
    std::vector<float> ln1, ln1_mean, ln1_rstd, qkv, att, atty, res2, ln2, ln2_mean, ln2_rstd, fch,
        fch_gelu, res3;
    // Mixture of experts, per micro-batch (sizes follow the routing): each token's k experts
    // and gates, its k rows' places in the dispatch order, the rows counts by rank, the local
    // experts' rows (expert-major) with their hidden activations, the combined expert outputs
    // in dispatch order, and the received rows' order.
    std::vector<int> sel, pos, send_rows, recv_rows, expert_rows, perm;
    std::vector<float> gate, xe, he, ge, yp;
    // The load-balancing loss: the router's probabilities over all experts [n, E] and each
    // expert's weight in the loss's gradient, coeff x E x c_e / (k n^2).
    std::vector<float> probs, aux_w;
    std::vector<float> lse;    // FlashAttention: each query row's logsumexp [batch, heads, seq]
    std::vector<float> qkv_h;  // all-to-all CP: Q, K, V of this rank's heads, every position
    // Hierarchical CP: the attention output of those heads and positions, which backward's
    // D = dO . O reads in their layout (the all-to-all form recomputes nothing from it).
    std::vector<float> out_h;
    // Ring CP: the K,V block the forward held last (the next ring member's), where backward's
    // ring starts (Transformer Engine saves it so).
    std::vector<float> ring_kv_last;
  };
  struct Slot {
    std::vector<std::int32_t> tokens, targets;
    std::vector<float> input;  // the embedding's output, or the received activation
    std::vector<float> emb, emb_mean, emb_rstd;  // BERT: the sum before the embedding norm
    std::vector<BlockActs> blocks;
    std::vector<float> lnf, lnf_mean, lnf_rstd, probs, losses, ce_max, ce_sum;
    std::int64_t counted = 0;  // targets not ignored (all for GPT; BERT's masked positions)
    bool forward_done = false;
  };
  template <class F>
  void timed(std::string_view name, int layer, bool backward, double flops, F&& f);
  void reduce(float* data, std::int64_t n, bool max, std::string_view name, int layer);
  void gather(const float* shard, float* full, std::string_view name, int layer);
  void scatter(const float* full, float* shard, std::string_view name, int layer);
  // A column-parallel linear's backward (qkv, mlp_in, the LM head: weight w [oc, h], input
  // `inp` this rank's rows, or its sequence shard under SP) with its input gradient out of the
  // tensor-parallel region into dln_ (dln_s_ under SP, which it returns), as Megatron-Core's
  // LinearWithGradAccumulationAndAsyncCommunication runs it: under SP the input's all-gather
  // ("sp_all_gather_wgrad") beside the data gradient, then the data gradient's reduce-scatter
  // beside the weight gradient; without SP the all-reduce beside the weight gradient under
  // tp_async, after the whole backward otherwise. The workload's order (docs/workload.md).
  const float* column_backward(std::string_view name, int layer, double flops, const float* dout,
                               const float* inp, const float* w, float* dw, float* db, int oc);
  void forward_block(Slot& s, int l, const float* block);
  // Context parallelism: attention of this rank's queries over the gathered keys and values.
  // Context parallelism: this rank's K and V out of a.qkv, all-gathered into kv_all_.
  void gather_kv(const BlockActs& a, int l);
  void cp_attention_forward(BlockActs& a, int l);
  // The row of key kk of sequence b where every CP rank's rows stand in rank order (the K,V
  // all-gather's layout, and all-to-all CP's): (kk / seq_l x batch + b) x seq_l + kk % seq_l.
  std::int64_t gathered_row(int b, int kk) const {
    return (static_cast<std::int64_t>(kk / seq_l_) * batch_ + b) * seq_l_ + kk % seq_l_;
  }
  // Mixture of experts: tmp_ = the MoE output of a.ln2 (router, dispatch, experts, combine);
  // backward from dtmp_ into dln_ (d ln2) and the router's and experts' gradients.
  void moe_forward(BlockActs& a, int l, const float* block);
  // Each expert's rows for the routing in a.sel / a.gate of n tokens: (token, slot) with slot
  // i k + j the token's choice, or -1 for a padded row; in token order.
  std::vector<std::vector<std::pair<int, int>>> expert_rows(const BlockActs& a,
                                                            std::int64_t n) const;
  void moe_backward(const BlockActs& a, int l, const float* block, float* d_block);
  // Rows over the EP group (or copied when ep is 1).
  void expert_exchange(const float* send, const std::vector<int>& send_rows, float* recv,
                       const std::vector<int>& recv_rows, int width, std::string_view name,
                       int layer);
  void cp_attention_backward(const BlockActs& a, int l);
  // Ring context parallelism: this rank's queries against the K,V block of CP rank `src` (its
  // keys at rows b seq_l + j of `kv`, 2 hl_ floats apart), forward merged into the running
  // row maxima and sums (the online softmax of FlashAttention), backward adding dQ into dqkv_
  // and dK, dV into `dkv`.
  void ring_attention_forward(BlockActs& a, int l);
  // All-to-all context parallelism: the heads [cp_rank, cp_rank + 1) x heads_l / cp of every
  // position, from a.qkv into a.qkv_h ([cp source][batch x seq_l][3 heads_l / cp x head size],
  // the source's rows), attention over the whole sequence there, its output back into a.atty.
  void a2a_attention_forward(BlockActs& a, int l);
  void a2a_attention_backward(const BlockActs& a, int l);
  void ring_attention_backward(const BlockActs& a, int l);
  // What the ring works on. Plain ring: this rank's seq / cp positions of its heads, rows of
  // a.qkv. Hierarchical CP: after the all-to-all, its group's a x seq / cp positions of heads
  // / a of them, rows of a.qkv_h. Rows in gathered_row's layout (position t of sequence b at
  // (t / seq_l x batch + b) x seq_l + t % seq_l; b seq_l + t for the plain ring), Q, K, V of a
  // row 3 w floats (Q of head h at h hs, K at w + h hs, V at 2 w + h hs), the output's and
  // dO's w; a ring block is every row's K and V, 2 w floats a row.
  struct RingView {
    int size = 1, index = 0;           // ring members and this rank's place among them
    int T = 0, nh = 0, hs = 0, w = 0;  // positions a sequence, heads, head size, nh x hs
    const float* qkv = nullptr;
    const int* qpos = nullptr;  // the T query positions (kpos_ from index x T)
  };
  RingView ring_view(const BlockActs& a) const;
  void ring_block_forward(BlockActs& a, const RingView& v, float* out, int l, const float* kv,
                          int src);
  void ring_block_backward(const BlockActs& a, const RingView& v, const float* dout, float* dqkv,
                           int l, const float* kv, float* dkv, int src);
  // FlashAttention, row by row, over keys at `k` (key kk of sequence b at row
  // ((kk / seq_l) batch + b) seq_l + kk % seq_l, `stride` floats apart, its value hl_ floats
  // after it): the local keys of a.qkv, or the CP-gathered ones. Backward adds dK, dV at the
  // same places of `dk` (with `dstride`) and dQ into dqkv_.
  void flash_forward(BlockActs& a, int l, const float* k, std::int64_t stride);
  void flash_backward(const BlockActs& a, int l, const float* k, std::int64_t stride, float* dk,
                      std::int64_t dstride);
  void backward_block(Slot& s, int l, const float* block, float* d_block);
  float forward_head(Slot& s, const float* wte, const float* lnf);
  void backward_head(Slot& s, const float* wte, const float* lnf, float* d_wte, float* d_lnf);
  const float* block_input(const Slot& s, int l) const;
  // The chunk's output: its last block's, or its input when it holds no block.
  const float* last_output(const Slot& s) const;

  GptConfig cfg_;
  ShardSpec s_;
  ShardLayout layout_;
  int batch_;
  int hl_, heads_l_, vocab_l_;  // local: h/t, heads/t, V/t
  OpObserver observer_;
  AllReduce all_reduce_;
  SequenceComm sequence_, context_;
  StartAllReduce start_all_reduce_;
  StartSequence start_sequence_;
  RingComm ring_;
  AllToAllComm a2a_;
  ExpertComm expert_comm_;
  ExpertCounts expert_counts_;
  const float* params_ = nullptr;  // the buffers of the forward or backward under way
  float* grads_ = nullptr;
  std::vector<float> moe_buf_, moe_buf2_;  // MoE backward scratch
  MoeStats moe_stats_;
  bool sp_ = false;
  int seq_l_ = 0;                // positions of each sequence on this rank: seq / cp
  std::vector<int> pos_, kpos_;  // their positions; every CP rank's, in gathered order
  std::vector<float> kv_l_, kv_all_, dkv_all_;         // CP: this rank's K,V; gathered; their grads
  std::vector<float> a2a_send_, a2a_recv_, a2a_grad_;  // all-to-all CP: blocks out, in; dQ,dK,dV
  // Ring CP: the message held and the one arriving, each a K,V block and, in backward, the
  // dK,dV travelling with the next (2 chunks); this step's dK,dV of the block held (backward);
  // per query row and head the running max, sum (the online softmax), the last block's rescale
  // factor, and D = dO . O in backward.
  std::vector<float> ring_kv_[2], ring_dkv_own_, ring_max_, ring_scale_, ring_d_;
  std::vector<double> ring_sum_;
  bool bert_ = false;
  std::int64_t rows_l_ = 0;  // rows of the residual stream on this rank
  std::vector<Slot> slots_;
  std::vector<float> gath_, part_, dln_s_;  // sequence parallelism: gathered, scattered rows
  std::vector<float> dres_, dtmp_, dln_, dqkv_, datt_, datty_, dfch_, dfch_gelu_, tmp_;
  std::vector<float> demb_;  // BERT: the embedding norm's input gradient
};

}  // namespace commscope::train
