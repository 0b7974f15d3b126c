// Parameter counts of a model, whole and as one rank holds them under TP and PP. Exact
// integer counts, not estimates.
#pragma once

#include <cstdint>

#include "commscope/spec/model.h"

namespace commscope {

// The kinds of transformer block.
enum class BlockKind : std::uint8_t {
  encoder,        // bidirectional self-attention + MLP (BERT, T5 encoder)
  decoder,        // causal self-attention + MLP (GPT, Llama)
  cross_decoder,  // causal self-attention + cross-attention + MLP (T5 decoder)
};

// One norm over the model's width: its weight (and bias under LayerNorm).
std::int64_t norm_params(const ModelSpec& m);
// One per-head query or key norm (ModelSpec::qk_norm), over head_dim channels.
std::int64_t qk_norm_params(const ModelSpec& m);

// Block kind of layer i (encoder blocks first).
BlockKind block_kind(const ModelSpec& m, int layer);

// Parameters of one block, whole (tp = 1) or as one of tp tensor-parallel ranks holds them.
// Includes T5's relative position bias on the first block of each stack.
std::int64_t block_params(const ModelSpec& m, int layer, int tp = 1);
// The routed experts' parameters of a block, whole (0 for a dense block). block_params counts
// them split over tp ranks (expert TP = TP, expert parallel 1); the workload splits them over
// EP x expert-TP ranks instead.
std::int64_t block_expert_params(const ModelSpec& m, int layer);
// The part of block_params that every TP rank holds whole (norms, row-parallel biases).
std::int64_t block_replicated_params(const ModelSpec& m, int layer);
// What one rank holds of a block's sharded parts: the split part over tp ranks and the routed
// experts over expert_ranks (EP x expert TP); the replicated part left out.
double block_sharded_params(const ModelSpec& m, int layer, int tp, int expert_ranks);

// Parameters outside the blocks.
struct OuterParams {
  std::int64_t word_embedding = 0;      // V x h (vocab-parallel under TP)
  std::int64_t position_embedding = 0;  // learned position table, token types, embedding norm
  std::int64_t final_norm = 0;          // final norm(s): T5 has one per stack
  std::int64_t lm_head = 0;             // untied LM head V x h (0 when tied)
  std::int64_t pooler = 0;              // BERT pooler
};
OuterParams outer_params(const ModelSpec& m);

// Multi-token prediction (ModelSpec::mtp_layers; DeepSeek-AI 2024, DeepSeek-V3 report section
// 2.2; Megatron-Core's MultiTokenPredictionLayer): depth d's transformer block is numbered
// layers() + d and built like the model's last block; beside it each depth holds its
// projection eh_proj (2h x h, column-parallel, no bias) and three norms (enorm, hnorm and its
// final norm). Its embedding and output head are the model's, shared.
inline int mtp_block_layer(const ModelSpec& m, int depth) {
  return m.layers() + depth;
}
std::int64_t mtp_projection_params(const ModelSpec& m);  // eh_proj: 2h x h
std::int64_t mtp_norm_params(const ModelSpec& m);        // enorm, hnorm, final norm
// One depth's module, whole: its block, projection and norms (the shared embedding and head
// not counted).
std::int64_t mtp_depth_params(const ModelSpec& m, int depth);

struct ParamCount {
  std::int64_t total = 0;      // every parameter once (a tied embedding once)
  std::int64_t blocks = 0;     // all transformer blocks
  std::int64_t embedding = 0;  // word + position embeddings (+ token types, embedding norm)
  std::int64_t final_norm = 0;
  std::int64_t lm_head = 0;
  std::int64_t pooler = 0;
  std::int64_t experts = 0;  // routed experts of all MoE blocks (in blocks and total)
  std::int64_t active = 0;   // what one token uses: total less the routed experts it skips
  // The multi-token-prediction modules (ModelSpec::mtp_layers), not in total (published totals,
  // DeepSeek-V3's 671B, leave them out): blocks, projections and norms, without the embedding
  // and head they share with the model.
  std::int64_t mtp = 0;
};
ParamCount count_params(const ModelSpec& m);

}  // namespace commscope
