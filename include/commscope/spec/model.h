// ModelSpec: the architecture of a transformer language model, as far as cost, memory and
// communication depend on it. Not the weights, not the tokenizer.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "commscope/util/result.h"

namespace commscope {

enum class ArchKind : std::uint8_t {
  gpt,    // decoder-only, learned positions, LayerNorm, GELU MLP (GPT-2, Megatron GPT)
  bert,   // encoder-only, post-LN, token-type embeddings, pooler
  t5,     // encoder-decoder, relative position bias, RMS norm, no biases
  llama,  // decoder-only, rotary positions, RMSNorm, SwiGLU, grouped-query attention
};
enum class PositionEmbedding : std::uint8_t { learned, relative, rotary, none };
enum class NormKind : std::uint8_t { layernorm, rmsnorm };
enum class MlpKind : std::uint8_t { gelu, relu, swiglu, geglu };

std::string_view to_string(ArchKind k);
std::string_view to_string(PositionEmbedding p);
std::string_view to_string(NormKind n);
std::string_view to_string(MlpKind m);

struct ModelSpec {
  std::string name;
  ArchKind kind = ArchKind::gpt;
  int encoder_layers = 0;       // encoder blocks (BERT, T5)
  int decoder_layers = 0;       // decoder blocks (GPT, Llama, T5)
  std::int64_t hidden = 0;      // model width h
  std::int64_t heads = 0;       // query heads a
  std::int64_t kv_heads = 0;    // key/value heads (== heads without grouped-query attention)
  std::int64_t head_dim = 0;    // channels per head (h / heads unless given, e.g. T5-3B: 128)
  std::int64_t ffn = 0;         // MLP inner width f
  std::int64_t vocab = 0;       // vocabulary V (as padded for training)
  std::int64_t seq_length = 0;  // tokens per sample s (encoder input for T5)
  std::int64_t decoder_seq_length = 0;  // T5 decoder tokens per sample (0: same as seq_length)
  std::int64_t max_positions = 0;       // learned position table size (0: seq_length)
  std::int64_t type_vocab = 0;          // BERT token-type embeddings
  std::int64_t relative_attention_buckets = 0;  // T5 relative position bias buckets
  bool tied_embeddings = true;                  // LM head shares the input embedding
  bool bias = true;                             // linear layers carry biases
  // The QKV projection alone carries biases (Qwen2's q, k and v; Megatron-LM's --add-qkv-bias,
  // beside --disable-bias-linear); implied where every linear layer has them.
  bool qkv_bias = false;
  bool dropout = true;  // dropout layers (masks are stored for backward)
  // Norms on the outputs of attention and of the MLP too, before each residual add ("sandwich"
  // norms: Gemma 2's post_attention_layernorm and post_feedforward_layernorm beside its two
  // pre-norms): four norms a block, not two.
  bool post_norms = false;
  // One pre-norm a block whose output feeds both the attention and the MLP (Falcon-7B's
  // input_layernorm under parallel_attn, GPT-J's ln_1): one norm a block, not two.
  bool shared_norm = false;
  // Norms of each query and key head before attention (Qwen3's and Gemma 3's q_norm and k_norm,
  // Megatron-LM's --qk-layernorm): 2 x head_dim weights a block (with biases under LayerNorm).
  bool qk_norm = false;
  bool pooler = false;  // BERT pooler (dense h x h on [CLS])
  PositionEmbedding position = PositionEmbedding::learned;
  NormKind norm = NormKind::layernorm;
  MlpKind mlp = MlpKind::gelu;
  std::vector<std::string> sources;  // where the numbers come from
  // What the loader assumed (transformers' defaults for fields a config.json leaves out), said
  // as warnings where the model is used (resolve_scenario).
  std::vector<std::string> notes;
  // The attention kernel the model's published runs trained with (preset field "attention":
  // "flash" or "standard"); the plan's --attention wins. Default standard: results unchanged.
  bool flash_attention = false;

  // ---- mixture of experts (0 experts: a dense model; docs/workload.md, "Mixture of experts") ----
  std::int64_t experts = 0;            // routed experts per MoE layer (num_local_experts)
  std::int64_t experts_per_token = 0;  // top-k routed experts per token (num_experts_per_tok)
  std::int64_t shared_experts = 0;     // experts every token passes (n_shared_experts)
  // A learned sigmoid gate on the shared experts' output (Qwen2-MoE's shared_expert_gate, a
  // hidden x 1 projection beside the router).
  bool shared_expert_gate = false;
  std::int64_t moe_ffn = 0;    // inner width of one expert (moe_intermediate_size; 0: ffn)
  int first_dense_layers = 0;  // leading blocks with a dense MLP (first_k_dense_replace)
  // MoE on every step-th block, counted from the first (those with (l + 1) % step == 0: Llama 4
  // Maverick's interleave_moe_layer_step, Qwen2-MoE's decoder_sparse_step); the rest dense.
  int moe_layer_step = 1;
  // Group-limited routing (DeepSeek-V3's node-limited routing; 0: none): the experts in
  // expert_groups contiguous groups (n_group), each token's top-k drawn from the
  // expert_groups_per_token groups it selects (topk_group). Megatron-LM's
  // --moe-router-num-groups and --moe-router-group-topk; only the flex dispatcher's copies
  // follow it (docs/workload.md, "The flex dispatcher").
  std::int64_t expert_groups = 0;
  std::int64_t expert_groups_per_token = 0;
  // ---- multi-head latent attention (DeepSeek-V2/V3; 0 kv_lora_rank: ordinary attention) ----
  std::int64_t q_lora_rank = 0;       // query down-projection rank (0: no query compression)
  std::int64_t kv_lora_rank = 0;      // key/value down-projection rank
  std::int64_t qk_rope_head_dim = 0;  // rotary part of each query/key head
  std::int64_t qk_nope_head_dim = 0;  // non-rotary part of each query/key head
  std::int64_t v_head_dim = 0;        // value channels per head
  // ---- multi-token prediction (DeepSeek-V3; docs/workload.md, "Multi-token prediction") ----
  // MTP depths trained beside the next-token head (Hugging Face num_nextn_predict_layers; the
  // plan's --mtp-num-layers wins): each one more block, a projection and a second loss on the
  // last pipeline stage, its embedding and output head shared with the model's.
  int mtp_layers = 0;

  int layers() const { return encoder_layers + decoder_layers; }
  std::int64_t q_dim() const { return heads * head_dim; }      // width of Q (and attention out)
  std::int64_t kv_dim() const { return kv_heads * head_dim; }  // width of K and of V
  std::int64_t dec_seq() const { return decoder_seq_length ? decoder_seq_length : seq_length; }
  bool gated_mlp() const { return mlp == MlpKind::swiglu || mlp == MlpKind::geglu; }
  bool moe() const { return experts > 0; }
  // Block `layer` has a routed-expert MLP (decoder blocks after the first dense ones).
  bool moe_layer(int layer) const {
    return moe() && layer >= first_dense_layers && (layer + 1) % moe_layer_step == 0;
  }
  std::int64_t expert_ffn() const { return moe_ffn > 0 ? moe_ffn : ffn; }
  bool mla() const { return kv_lora_rank > 0; }
};

// Fills what the kind implies and the file left out (kv_heads, head_dim, ffn, ...).
void apply_model_defaults(ModelSpec& m);

// Checks internal consistency: positive sizes, heads divide hidden where required, etc.
Status validate_model(const ModelSpec& m, const std::string& where);
// Group-limited routing's fields (ModelSpec::expert_groups, or the plan's
// --moe-router-num-groups and --moe-router-group-topk): both 0, or groups dividing the experts,
// 1 to groups selected a token, holding at least its top-k experts. On a bad pair: which one
// (per_token false: the groups), what was expected, and its value.
struct ExpertGroupsProblem {
  bool per_token = false;
  std::string expected;
  std::int64_t got = 0;
};
std::optional<ExpertGroupsProblem> check_expert_groups(std::int64_t experts, std::int64_t top_k,
                                                       std::int64_t groups, std::int64_t per_token);

// Loads commscope's own model JSON or a Hugging Face config.json (recognised by
// "model_type"); `where` names the source in errors.
Result<ModelSpec> model_from_json(const nlohmann::json& j, const std::string& where);

// A Hugging Face config.json (model_type gpt2, bert, t5, llama, mistral).
// An upper bound on the model's parameters, in floating point (workload/params.h counts them
// exactly): what the limits check before anything is built from the sizes.
double parameters_at_most(const ModelSpec& m);

Result<ModelSpec> model_from_hf_config(const nlohmann::json& j, const std::string& where);

// Loads a model preset by name (presets/models/<name>.json) or by path.
Result<ModelSpec> load_model(const std::string& name_or_path);

nlohmann::json to_json(const ModelSpec& m);

// Megatron-LM's model-architecture flags, as given (docs/predict.md, "Megatron-LM's model
// flags"): a decoder-only model from them alone, with Megatron-LM's GPT defaults (learned
// positions, LayerNorm, GeLU, biases, tied embeddings), or a preset they change (--model X).
struct ModelFlags {
  std::optional<std::int64_t> num_layers, hidden_size, ffn_hidden_size, num_attention_heads,
      num_query_groups, kv_channels, max_position_embeddings, vocab_size, num_experts,
      moe_router_topk, moe_ffn_hidden_size, moe_shared_expert_intermediate_size,
      expert_interval;  // Megatron-DeepSpeed's: MoE in every expert_interval-th block
  std::optional<double> attention_dropout, hidden_dropout;  // either above 0: dropout masks
  bool group_query_attention = false, swiglu = false, untie_embeddings = false,
       disable_bias_linear = false, add_qkv_bias = false, use_flash_attn = false,
       qk_layernorm = false;
  std::optional<NormKind> normalization;
  std::optional<PositionEmbedding> position_embedding;

  bool any() const;
  // The flags as given, in Megatron-LM's spelling ("--num-layers 16 --swiglu"), for the model's
  // name and sources.
  std::string summary() const;
};

// Megatron-LM's names: LayerNorm or RMSNorm (--normalization; Megatron-DeepSpeed's layernorm and
// rmsnorm too), learned_absolute, rope or none
// (--position-embedding-type); nullopt otherwise.
std::optional<NormKind> megatron_normalization(std::string_view name);
std::optional<PositionEmbedding> megatron_position_embedding(std::string_view name);

// `base` changed by the flags, or (no base) the model they define with Megatron-LM's defaults,
// which needs --num-layers, --hidden-size, --num-attention-heads and the sequence length
// (`seq_length`, the plan's --seq-length; 0: not given). Megatron-LM's derived defaults follow
// where a flag leaves them: kv channels = hidden / heads (also when a flag changes either), the
// MLP 4 x hidden (with --swiglu int(8 x hidden / 3 / 64) x 64), the positions the sequence
// length, the GPT-2 vocabulary padded to 50,304 (with a note). Errors name the flag.
Result<ModelSpec> apply_model_flags(const std::optional<ModelSpec>& base, const ModelFlags& f,
                                    std::int64_t seq_length);
// The model of the scenario verbs and plan: `name_or_path` loaded and changed by the flags, or
// (an empty name with flags) the flags' model alone.
Result<ModelSpec> load_model(const std::string& name_or_path, const ModelFlags& flags,
                             std::int64_t seq_length);

}  // namespace commscope
