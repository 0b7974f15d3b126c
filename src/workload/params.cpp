// Exact parameter counts, tensor by tensor, for the four architecture kinds.
#include "commscope/workload/params.h"

namespace commscope {

std::int64_t norm_params(const ModelSpec& m) {
  return m.norm == NormKind::layernorm ? 2 * m.hidden : m.hidden;  // weight (+ bias)
}
std::int64_t qk_norm_params(const ModelSpec& m) {
  return m.norm == NormKind::layernorm ? 2 * m.head_dim : m.head_dim;
}

namespace {
std::int64_t mlp_in_width(const ModelSpec& m) {
  return m.gated_mlp() ? 2 * m.ffn : m.ffn;
}

// Split (column- or row-parallel, or split by heads) and replicated parts of a block.
struct BlockParts {
  std::int64_t split = 0;
  std::int64_t replicated = 0;
  std::int64_t expert = 0;  // routed experts: split over expert-parallel x expert-TP ranks
};

BlockParts block_parts(const ModelSpec& m, int layer) {
  const std::int64_t h = m.hidden, q = m.q_dim(), kv = m.kv_dim(), fin = mlp_in_width(m);
  const std::int64_t bias = m.bias ? 1 : 0;
  BlockParts p;
  auto attention = [&] {
    if (m.mla()) {  // multi-head latent attention (DeepSeek-V2/V3, Megatron's MLA layout)
      const std::int64_t qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim;
      if (m.q_lora_rank > 0) {
        p.replicated += h * m.q_lora_rank + m.q_lora_rank;  // q down-projection and its norm
        p.split += m.q_lora_rank * m.heads * qk_head;       // q up-projection
      } else {
        p.split += h * m.heads * qk_head;
      }
      p.replicated += h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank;  // kv down, norm
      p.split += m.kv_lora_rank * m.heads * (m.qk_nope_head_dim + m.v_head_dim);   // kv up
      p.split += m.heads * m.v_head_dim * h;                                       // output
      return;
    }
    const std::int64_t qkv_bias = m.bias || m.qkv_bias ? 1 : 0;
    p.split += h * (q + 2 * kv) + qkv_bias * (q + 2 * kv);  // QKV: column-parallel
    if (m.qk_norm) p.replicated += 2 * qk_norm_params(m);   // q_norm, k_norm (per head)
    p.split += q * h;                                       // output: row-parallel
    p.replicated += bias * h;                               // its bias is added after the reduce
  };
  BlockKind kind = block_kind(m, layer);
  attention();
  p.replicated += ((m.shared_norm ? 1 : 2) + (m.post_norms ? 2 : 0)) * norm_params(m);
  if (kind == BlockKind::cross_decoder) {
    attention();
    p.replicated += norm_params(m);
  }
  if (m.moe_layer(layer)) {
    // Mixture of experts: the router (replicated), the routed experts (split over EP x ETP),
    // the shared experts (tensor-parallel like a dense MLP of shared x moe_ffn).
    const std::int64_t fe = m.expert_ffn(), fe_in = m.gated_mlp() ? 2 * fe : fe;
    const std::int64_t one = h * fe_in + bias * fe_in + fe * h + bias * h;
    p.replicated += (m.experts + (m.shared_expert_gate ? 1 : 0)) * h;  // router (and gate)
    p.expert += m.experts * one;
    p.split += m.shared_experts * (h * fe_in + bias * fe_in + fe * h);
    if (m.shared_experts > 0) p.replicated += bias * h;
  } else {
    p.split += h * fin + bias * fin + fin / (m.gated_mlp() ? 2 : 1) * h;  // MLP in and out
    p.replicated += bias * h;
  }
  // T5: relative position bias (buckets x heads) in the first block of each stack.
  if (m.position == PositionEmbedding::relative &&
      (layer == 0 || (m.encoder_layers > 0 && layer == m.encoder_layers)))
    p.split += m.relative_attention_buckets * m.heads;
  return p;
}
}  // namespace

BlockKind block_kind(const ModelSpec& m, int layer) {
  if (layer < m.encoder_layers) return BlockKind::encoder;
  return m.encoder_layers > 0 ? BlockKind::cross_decoder : BlockKind::decoder;
}

std::int64_t block_params(const ModelSpec& m, int layer, int tp) {
  BlockParts p = block_parts(m, layer);
  return p.split / tp + p.replicated + p.expert / tp;
}

std::int64_t block_expert_params(const ModelSpec& m, int layer) {
  return block_parts(m, layer).expert;
}

std::int64_t block_replicated_params(const ModelSpec& m, int layer) {
  return block_parts(m, layer).replicated;
}

double block_sharded_params(const ModelSpec& m, int layer, int tp, int expert_ranks) {
  const BlockParts p = block_parts(m, layer);
  return static_cast<double>(p.split / tp) + static_cast<double>(p.expert) / expert_ranks;
}

OuterParams outer_params(const ModelSpec& m) {
  OuterParams o;
  o.word_embedding = m.vocab * m.hidden;
  if (m.position == PositionEmbedding::learned) o.position_embedding += m.max_positions * m.hidden;
  o.position_embedding += m.type_vocab * m.hidden;
  if (m.kind == ArchKind::bert) o.position_embedding += norm_params(m);  // embedding LayerNorm
  // BERT is post-LN (no final norm); T5 has one per stack; GPT and Llama one.
  int final_norms = m.kind == ArchKind::bert ? 0 : m.kind == ArchKind::t5 ? 2 : 1;
  o.final_norm = final_norms * norm_params(m);
  o.lm_head = m.tied_embeddings ? 0 : m.vocab * m.hidden;
  o.pooler = m.pooler ? m.hidden * m.hidden + m.hidden : 0;
  return o;
}

std::int64_t mtp_projection_params(const ModelSpec& m) {
  return 2 * m.hidden * m.hidden;
}
std::int64_t mtp_norm_params(const ModelSpec& m) {
  return 3 * norm_params(m);
}

std::int64_t mtp_depth_params(const ModelSpec& m, int depth) {
  return block_params(m, mtp_block_layer(m, depth)) + mtp_projection_params(m) + mtp_norm_params(m);
}

ParamCount count_params(const ModelSpec& m) {
  ParamCount c;
  for (int l = 0; l < m.layers(); ++l) c.blocks += block_params(m, l);
  OuterParams o = outer_params(m);
  c.embedding = o.word_embedding + o.position_embedding;
  c.final_norm = o.final_norm;
  c.lm_head = o.lm_head;
  c.pooler = o.pooler;
  c.total = c.blocks + c.embedding + c.final_norm + c.lm_head + c.pooler;
  // Routed experts: a token passes experts_per_token of them (the rest are inactive for it).
  for (int l = 0; l < m.layers(); ++l) c.experts += block_expert_params(m, l);
  c.active = c.total;
  if (m.moe()) c.active -= c.experts / m.experts * (m.experts - m.experts_per_token);
  for (int d = 0; d < m.mtp_layers; ++d) c.mtp += mtp_depth_params(m, d);
  return c;
}

}  // namespace commscope
