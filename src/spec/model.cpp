// Model specs: commscope's own JSON, Hugging Face config.json, defaults per architecture.
#include "commscope/spec/model.h"

#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commscope/spec/limits.h"
#include "commscope/spec/preset.h"
#include "commscope/util/json_fields.h"

namespace commscope {

namespace {
constexpr EnumName<ArchKind> kArchNames[] = {{ArchKind::gpt, "gpt"},
                                             {ArchKind::bert, "bert"},
                                             {ArchKind::t5, "t5"},
                                             {ArchKind::llama, "llama"}};
constexpr EnumName<PositionEmbedding> kPosNames[] = {{PositionEmbedding::learned, "learned"},
                                                     {PositionEmbedding::relative, "relative"},
                                                     {PositionEmbedding::rotary, "rotary"},
                                                     {PositionEmbedding::none, "none"}};
constexpr EnumName<NormKind> kNormNames[] = {{NormKind::layernorm, "layernorm"},
                                             {NormKind::rmsnorm, "rmsnorm"}};
constexpr EnumName<MlpKind> kMlpNames[] = {{MlpKind::gelu, "gelu"},
                                           {MlpKind::relu, "relu"},
                                           {MlpKind::swiglu, "swiglu"},
                                           {MlpKind::geglu, "geglu"}};

template <class E, std::size_t N>
void read_enum(FieldReader& r, std::string_view key, const EnumName<E> (&table)[N], E& out) {
  std::string s;
  if (!r.read(key, s)) return;
  if (auto e = enum_from_name(table, s)) {
    out = *e;
  } else {
    r.fail(key, "one of " + enum_choices(table), "'" + s + "'");
  }
}

// What an architecture kind implies unless the file says otherwise.
void set_kind_defaults(ModelSpec& m) {
  switch (m.kind) {
    case ArchKind::gpt:
      m.position = PositionEmbedding::learned;
      m.norm = NormKind::layernorm;
      m.mlp = MlpKind::gelu;
      m.bias = m.dropout = m.tied_embeddings = true;
      break;
    case ArchKind::bert:
      m.position = PositionEmbedding::learned;
      m.norm = NormKind::layernorm;
      m.mlp = MlpKind::gelu;
      m.bias = m.dropout = m.tied_embeddings = m.pooler = true;
      m.type_vocab = 2;
      break;
    case ArchKind::t5:
      m.position = PositionEmbedding::relative;
      m.norm = NormKind::rmsnorm;
      m.mlp = MlpKind::relu;
      m.bias = false;
      m.dropout = m.tied_embeddings = true;
      m.relative_attention_buckets = 32;
      break;
    case ArchKind::llama:
      m.position = PositionEmbedding::rotary;
      m.norm = NormKind::rmsnorm;
      m.mlp = MlpKind::swiglu;
      m.bias = m.dropout = m.tied_embeddings = false;
      break;
  }
}
}  // namespace

std::string_view to_string(ArchKind k) {
  return enum_to_name(kArchNames, k);
}
std::string_view to_string(PositionEmbedding p) {
  return enum_to_name(kPosNames, p);
}
std::string_view to_string(NormKind n) {
  return enum_to_name(kNormNames, n);
}
std::string_view to_string(MlpKind m) {
  return enum_to_name(kMlpNames, m);
}

void apply_model_defaults(ModelSpec& m) {
  if (m.kv_heads == 0) m.kv_heads = m.heads;
  if (m.head_dim == 0 && m.kv_lora_rank > 0) m.head_dim = m.qk_nope_head_dim + m.qk_rope_head_dim;
  if (m.head_dim == 0 && m.heads > 0) m.head_dim = m.hidden / m.heads;
  if (m.ffn == 0 && (m.kind == ArchKind::gpt || m.kind == ArchKind::bert)) m.ffn = 4 * m.hidden;
  if (m.max_positions == 0 && m.position == PositionEmbedding::learned)
    m.max_positions = m.seq_length;
  if (m.kind == ArchKind::t5 && m.decoder_seq_length == 0) m.decoder_seq_length = m.seq_length;
}

std::optional<ExpertGroupsProblem> check_expert_groups(std::int64_t experts, std::int64_t top_k,
                                                       std::int64_t groups,
                                                       std::int64_t per_token) {
  if (groups == 0 && per_token == 0) return std::nullopt;
  if (groups < 1 || experts % groups != 0)
    return ExpertGroupsProblem{false, fmt::format("a divisor of the {} experts", experts), groups};
  if (per_token < 1 || per_token > groups)
    return ExpertGroupsProblem{true, fmt::format("1 to the {} groups", groups), per_token};
  if (top_k > per_token * (experts / groups))
    return ExpertGroupsProblem{
        true,
        fmt::format("groups holding at least the top-{} experts (groups of {})", top_k,
                    experts / groups),
        per_token};
  return std::nullopt;
}

// The mixture-of-experts and latent-attention fields: all zero (dense, ordinary attention) or
// consistent, within the limits, on a decoder-only model.
static Status validate_moe(const ModelSpec& m, const std::string& where) {
  auto err = [&](std::string_view field, auto value, std::string_view expected) {
    return Error{fmt::format("{}: field '{}': expected {}, got {}", where, field, expected, value)};
  };
  for (auto [field, value, limit] :
       {std::tuple{"experts", m.experts, limits::kMaxHidden},
        std::tuple{"experts_per_token", m.experts_per_token, limits::kMaxHidden},
        std::tuple{"shared_experts", m.shared_experts, limits::kMaxHidden},
        std::tuple{"moe_ffn", m.moe_ffn, limits::kMaxFfn},
        std::tuple{"first_dense_layers", std::int64_t{m.first_dense_layers}, limits::kMaxLayers},
        std::tuple{"moe_layer_step", std::int64_t{m.moe_layer_step}, limits::kMaxLayers},
        std::tuple{"expert_groups", m.expert_groups, limits::kMaxHidden},
        std::tuple{"expert_groups_per_token", m.expert_groups_per_token, limits::kMaxHidden},
        std::tuple{"q_lora_rank", m.q_lora_rank, limits::kMaxHidden},
        std::tuple{"kv_lora_rank", m.kv_lora_rank, limits::kMaxHidden},
        std::tuple{"qk_rope_head_dim", m.qk_rope_head_dim, limits::kMaxHidden},
        std::tuple{"qk_nope_head_dim", m.qk_nope_head_dim, limits::kMaxHidden},
        std::tuple{"v_head_dim", m.v_head_dim, limits::kMaxHidden},
        std::tuple{"mtp_layers", std::int64_t{m.mtp_layers},
                   std::int64_t{limits::kMaxMtpLayers}}}) {
    if (value < 0) return err(field, value, "zero or a positive integer");
    if (value > limit)
      return err(field, value,
                 fmt::format("at most {} (commscope's limit, docs/limits.md)", limit));
  }
  if (m.experts > 0) {
    if (m.kind != ArchKind::gpt && m.kind != ArchKind::llama)
      return err("experts", m.experts, "0 (experts are modelled in decoder-only models)");
    if (m.experts_per_token < 1 || m.experts_per_token > m.experts)
      return err("experts_per_token", m.experts_per_token,
                 fmt::format("1 to the {} experts", m.experts));
    if (m.first_dense_layers >= m.decoder_layers)
      return err("first_dense_layers", m.first_dense_layers,
                 fmt::format("fewer than the {} layers", m.decoder_layers));
    if (m.moe_layer_step < 1) return err("moe_layer_step", m.moe_layer_step, "a positive integer");
    // the first MoE block: the first l >= first_dense_layers with (l + 1) % step == 0
    const int step = m.moe_layer_step, d = m.first_dense_layers;
    if (d + ((step - 1 - d) % step + step) % step >= m.decoder_layers)
      return err("moe_layer_step", m.moe_layer_step,
                 fmt::format("a step that leaves a MoE block among the {} layers after the {} "
                             "dense ones",
                             m.decoder_layers, d));
    if (auto g = check_expert_groups(m.experts, m.experts_per_token, m.expert_groups,
                                     m.expert_groups_per_token))
      return err(g->per_token ? "expert_groups_per_token" : "expert_groups", g->got, g->expected);
  } else if (m.experts_per_token > 0 || m.shared_experts > 0 || m.moe_ffn > 0 ||
             m.first_dense_layers > 0 || m.expert_groups > 0 || m.expert_groups_per_token > 0 ||
             m.moe_layer_step != 1) {
    return err("experts", m.experts,
               "a positive count when experts_per_token, shared_experts, moe_ffn, "
               "first_dense_layers or moe_layer_step is given");
  }
  if (m.kv_lora_rank > 0) {
    if (m.kind != ArchKind::llama)
      return err("kv_lora_rank", m.kv_lora_rank, "0 (latent attention on llama-kind models)");
    if (m.qk_rope_head_dim < 1 || m.qk_nope_head_dim < 1 || m.v_head_dim < 1)
      return err("qk_rope_head_dim", m.qk_rope_head_dim,
                 "positive qk_rope_head_dim, qk_nope_head_dim and v_head_dim with kv_lora_rank");
    if (m.head_dim != m.qk_nope_head_dim + m.qk_rope_head_dim || m.kv_heads != m.heads)
      return err("head_dim", m.head_dim,
                 fmt::format("qk_nope_head_dim + qk_rope_head_dim = {} with kv_heads = heads under "
                             "latent attention",
                             m.qk_nope_head_dim + m.qk_rope_head_dim));
  } else if (m.q_lora_rank > 0) {
    return err("kv_lora_rank", m.kv_lora_rank, "a positive rank when q_lora_rank is given");
  }
  if (m.mtp_layers > 0 && m.kind != ArchKind::gpt && m.kind != ArchKind::llama)
    return err("mtp_layers", m.mtp_layers, "0 (multi-token prediction on decoder-only models)");
  return {};
}

double parameters_at_most(const ModelSpec& m) {
  // Over-counted in floating point: every block as a MoE block with a dense MLP beside it, both
  // attentions of a T5 decoder block, latent-attention parts on top of the plain ones.
  const double h = static_cast<double>(m.hidden), hd = static_cast<double>(m.head_dim);
  const double heads = static_cast<double>(m.heads), kv = static_cast<double>(m.kv_heads);
  const double fe = static_cast<double>(m.moe_ffn > 0 ? m.moe_ffn : m.ffn);
  const double attention =
      h * hd * (2 * heads + 2 * kv) +
      heads * static_cast<double>(m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim) *
          (h + static_cast<double>(m.q_lora_rank + m.kv_lora_rank)) +
      h * static_cast<double>(m.q_lora_rank + m.kv_lora_rank);
  const double mlp = 3 * h * static_cast<double>(m.ffn) +
                     3 * h * fe * static_cast<double>(m.experts + m.shared_experts);
  const double layers = static_cast<double>(m.encoder_layers) + m.decoder_layers + m.mtp_layers;
  return layers * (2 * attention + mlp + 8 * h) +
         h * static_cast<double>(2 * m.vocab + m.max_positions + m.type_vocab);
}

Status validate_model(const ModelSpec& m, const std::string& where) {
  auto err = [&](std::string_view field, auto value, std::string_view expected) {
    return Error{fmt::format("{}: field '{}': expected {}, got {}", where, field, expected, value)};
  };
  if (m.hidden <= 0) return err("hidden", m.hidden, "a positive integer");
  if (m.heads <= 0) return err("heads", m.heads, "a positive integer");
  if (m.kv_heads <= 0 || m.heads % m.kv_heads != 0)
    return err("kv_heads", m.kv_heads, fmt::format("a positive divisor of heads ({})", m.heads));
  if (m.head_dim <= 0) return err("head_dim", m.head_dim, "a positive integer");
  if (m.ffn <= 0) return err("ffn", m.ffn, "a positive integer");
  if (m.vocab <= 0) return err("vocab", m.vocab, "a positive integer");
  if (m.seq_length <= 0) return err("seq_length", m.seq_length, "a positive integer");
  if (m.encoder_layers < 0) return err("encoder_layers", m.encoder_layers, "zero or more");
  if (m.decoder_layers < 0) return err("decoder_layers", m.decoder_layers, "zero or more");
  // Counted into the embeddings and the attention bias: a negative count subtracted parameters
  // (found by probing, 2026-12-02).
  if (m.type_vocab < 0) return err("type_vocab", m.type_vocab, "zero or more");
  if (m.relative_attention_buckets < 0)
    return err("relative_attention_buckets", m.relative_attention_buckets, "zero or more");
  // The limits (spec/limits.h) before anything is built from the sizes.
  for (auto [field, value, limit] :
       {std::tuple{"hidden", m.hidden, limits::kMaxHidden},
        std::tuple{"heads", m.heads, limits::kMaxHidden},
        std::tuple{"kv_heads", m.kv_heads, limits::kMaxHidden},
        std::tuple{"head_dim", m.head_dim, limits::kMaxHidden},
        std::tuple{"ffn", m.ffn, limits::kMaxFfn}, std::tuple{"vocab", m.vocab, limits::kMaxVocab},
        std::tuple{"seq_length", m.seq_length, limits::kMaxSeqLength},
        std::tuple{"decoder_seq_length", m.decoder_seq_length, limits::kMaxSeqLength},
        std::tuple{"max_positions", m.max_positions, limits::kMaxSeqLength},
        std::tuple{"type_vocab", m.type_vocab, limits::kMaxVocab},
        std::tuple{"relative_attention_buckets", m.relative_attention_buckets,
                   limits::kMaxSeqLength},
        std::tuple{"layers", static_cast<std::int64_t>(m.encoder_layers) + m.decoder_layers,
                   limits::kMaxLayers}})
    if (value > limit)
      return err(field, value,
                 fmt::format("at most {} (commscope's limit, docs/limits.md)", limit));
  switch (m.kind) {
    case ArchKind::gpt:
    case ArchKind::llama:
      if (m.encoder_layers != 0 || m.decoder_layers <= 0)
        return err("layers",
                   fmt::format("{} encoder + {} decoder", m.encoder_layers, m.decoder_layers),
                   fmt::format("decoder layers only for a {} model", to_string(m.kind)));
      break;
    case ArchKind::bert:
      if (m.decoder_layers != 0 || m.encoder_layers <= 0)
        return err("layers",
                   fmt::format("{} encoder + {} decoder", m.encoder_layers, m.decoder_layers),
                   "encoder layers only for a bert model");
      break;
    case ArchKind::t5:
      if (m.decoder_layers <= 0 || m.encoder_layers <= 0)
        return err("layers",
                   fmt::format("{} encoder + {} decoder", m.encoder_layers, m.decoder_layers),
                   "encoder and decoder layers for a t5 model");
      break;
  }
  CS_RETURN_IF_ERROR(validate_moe(m, where));
  // Each size within its limit, the parameter count still could leave 64 bits (4096 layers of
  // 262,144 experts of width 2^20 wrapped to -4.6e18 parameters).
  if (const double total = parameters_at_most(m);
      total > static_cast<double>(limits::kMaxParameters))
    return err("layers", fmt::format("a model of about {:.3g} parameters", total),
               fmt::format("at most {:.3g} parameters (commscope's limit, docs/limits.md: the "
                           "sizes' product)",
                           static_cast<double>(limits::kMaxParameters)));
  if (m.position == PositionEmbedding::learned && m.seq_length > m.max_positions)
    return err("seq_length", m.seq_length,
               fmt::format("at most max_positions ({}) with learned position embeddings",
                           m.max_positions));
  if (m.kind == ArchKind::t5 && m.dec_seq() > m.max_positions &&
      m.position == PositionEmbedding::learned)
    return err("decoder_seq_length", m.dec_seq(), "at most max_positions");
  return {};
}

namespace {
// head_dim, when not given, is hidden / heads: the heads must divide hidden (hidden 1600 with 33
// heads gave head_dim 48 and 33 x 48 = 1584 in silence, found by probing, 2026-11-30).
Status check_head_split(const ModelSpec& m, const std::string& where, std::string_view heads,
                        std::string_view hidden) {
  if (m.head_dim != 0 || m.kv_lora_rank > 0 || m.heads <= 0 || m.hidden <= 0 ||
      m.hidden % m.heads == 0)
    return {};
  return Error{fmt::format(
      "{}: field '{}': expected a divisor of {} ({}) when head_dim is not given, got {}", where,
      heads, hidden, m.hidden, m.heads)};
}
}  // namespace

Result<ModelSpec> model_from_json(const nlohmann::json& j, const std::string& where) {
  if (j.contains("model_type")) return model_from_hf_config(j, where);
  // A Hugging Face config without its model_type was read as commscope's format and refused
  // as "field 'name': expected a value" (found by probing, 2026-12-02).
  if (j.is_object() && !j.contains("name") && !j.contains("kind"))
    for (const char* hf : {"architectures", "num_hidden_layers", "hidden_size", "n_embd"})
      if (j.contains(hf))
        return Error{fmt::format(
            "{}: field 'model_type': expected it in a Hugging Face config.json (the file has "
            "'{}'), or commscope's model format with 'name' and 'kind', got neither",
            where, hf)};
  ModelSpec m;
  FieldReader r(j, where);
  r.require("name", m.name);
  read_enum(r, "kind", kArchNames, m.kind);
  if (!r.has("kind")) r.fail("kind", "one of " + enum_choices(kArchNames), "nothing (missing)");
  set_kind_defaults(m);
  int layers = 0;
  if (r.read("layers", layers)) {
    if (m.kind == ArchKind::bert)
      m.encoder_layers = layers;
    else if (m.kind == ArchKind::t5)
      m.encoder_layers = m.decoder_layers = layers;
    else
      m.decoder_layers = layers;
  }
  r.read("encoder_layers", m.encoder_layers);
  r.read("decoder_layers", m.decoder_layers);
  r.require("hidden", m.hidden);
  r.require("heads", m.heads);
  r.read("kv_heads", m.kv_heads);
  r.read("head_dim", m.head_dim);
  r.read("ffn", m.ffn);
  r.require("vocab", m.vocab);
  r.require("seq_length", m.seq_length);
  r.read("decoder_seq_length", m.decoder_seq_length);
  r.read("max_positions", m.max_positions);
  r.read("type_vocab", m.type_vocab);
  r.read("relative_attention_buckets", m.relative_attention_buckets);
  r.read("tied_embeddings", m.tied_embeddings);
  r.read("bias", m.bias);
  r.read("qkv_bias", m.qkv_bias);
  r.read("dropout", m.dropout);
  r.read("post_norms", m.post_norms);
  r.read("shared_norm", m.shared_norm);
  r.read("qk_norm", m.qk_norm);
  r.read("pooler", m.pooler);
  read_enum(r, "position_embedding", kPosNames, m.position);
  read_enum(r, "norm", kNormNames, m.norm);
  read_enum(r, "mlp", kMlpNames, m.mlp);
  r.read("experts", m.experts);
  r.read("experts_per_token", m.experts_per_token);
  r.read("shared_experts", m.shared_experts);
  r.read("shared_expert_gate", m.shared_expert_gate);
  r.read("moe_ffn", m.moe_ffn);
  r.read("first_dense_layers", m.first_dense_layers);
  r.read("moe_layer_step", m.moe_layer_step);
  r.read("expert_groups", m.expert_groups);
  r.read("expert_groups_per_token", m.expert_groups_per_token);
  r.read("q_lora_rank", m.q_lora_rank);
  r.read("kv_lora_rank", m.kv_lora_rank);
  r.read("qk_rope_head_dim", m.qk_rope_head_dim);
  r.read("qk_nope_head_dim", m.qk_nope_head_dim);
  r.read("v_head_dim", m.v_head_dim);
  r.read("mtp_layers", m.mtp_layers);
  r.read("sources", m.sources);
  if (m.sources.empty()) r.read("source", m.sources);
  {
    std::string attention;
    if (r.read("attention", attention)) {
      if (attention == "flash" || attention == "standard")
        m.flash_attention = attention == "flash";
      else
        r.fail("attention", "flash or standard", "'" + attention + "'");
    }
  }
  // A field whose absence takes a default (apply_model_defaults) is positive where written: an
  // explicit "ffn": 0 became 4 x hidden in silence (found by probing, 2026-11-30).
  for (auto [key, value] : {std::pair{"kv_heads", m.kv_heads}, std::pair{"head_dim", m.head_dim},
                            std::pair{"ffn", m.ffn}, std::pair{"moe_ffn", m.moe_ffn},
                            std::pair{"max_positions", m.max_positions},
                            std::pair{"decoder_seq_length", m.decoder_seq_length}})
    if (r.has(key) && value <= 0)
      r.fail(key, "a positive integer (leave the field out for its default)",
             std::to_string(value));
  CS_RETURN_IF_ERROR(r.status());
  CS_RETURN_IF_ERROR(check_head_split(m, where, "heads", "hidden"));
  apply_model_defaults(m);
  CS_RETURN_IF_ERROR(validate_model(m, where));
  return m;
}

Result<ModelSpec> model_from_hf_config(const nlohmann::json& j, const std::string& where) {
  // Llama 4's and Gemma 3's config.json are the multimodal model's (model_type llama4, gemma3):
  // the language model's fields are in text_config (model_type llama4_text, gemma3_text), which
  // is what is priced; the vision encoder and its projector are not counted, as the presets leave
  // them out.
  if (const auto t = j.find("model_type");
      t != j.end() && t->is_string() && (*t == "llama4" || *t == "gemma3")) {
    const std::string outer = *t, text_type = outer + "_text";
    const auto text = j.find("text_config");
    if (text == j.end() || !text->is_object())
      return Error{fmt::format(
          "{}: field 'text_config': expected the language model's fields (an object), got {}",
          where, text == j.end() ? "nothing (missing)" : json_excerpt(*text))};
    nlohmann::json inner = *text;
    if (const auto it = inner.find("model_type");
        it != inner.end() && !(it->is_string() && *it == text_type))
      return Error{fmt::format("{}: field 'text_config.model_type': expected {}, got {}", where,
                               text_type, json_excerpt(*it))};
    inner["model_type"] = text_type;
    // The released configs state tie_word_embeddings beside text_config, not in it.
    if (!inner.contains("tie_word_embeddings") && j.contains("tie_word_embeddings"))
      inner["tie_word_embeddings"] = j.at("tie_word_embeddings");
    std::string name = where.substr(
        where.find_last_of('/') == std::string::npos ? 0 : where.find_last_of('/') + 1);
    if (const auto n = j.find("_name_or_path"); n != j.end() && n->is_string() && !n->empty())
      name = *n;
    inner["_name_or_path"] = name;
    CS_ASSIGN_OR_RETURN(ModelSpec m, model_from_hf_config(inner, where + ": text_config"));
    m.sources.front() = "Hugging Face config.json: " + where + " (text_config)";
    m.notes.push_back(fmt::format(
        "{}: model_type {}: its language model (text_config) is priced; the vision encoder "
        "and projector are not counted",
        where, outer));
    return m;
  }
  ModelSpec m;
  FieldReader r(j, where);
  r.allow_unknown();
  std::string type;
  r.read("model_type", type);
  std::string name;
  if (!r.read("_name_or_path", name) || name.empty()) {
    auto slash = where.find_last_of('/');
    name = where.substr(slash == std::string::npos ? 0 : slash + 1);
  }
  m.name = name;
  m.sources = {"Hugging Face config.json: " + where};
  // A field the file leaves out (or null) takes the default of transformers' config class for
  // the type, as AutoConfig would give it (src/transformers/models/<type>/configuration_<type>.py
  // at 008e574, the dataclass form; the older __init__ forms have the same values): noted, as the
  // model then is not the file's alone. `required` fields have no default there.
  std::vector<std::string> defaulted;
  auto or_default = [&](const char* key, auto& out, auto value) {
    if (r.read(key, out)) return;
    out = value;
    defaulted.push_back(fmt::format("{} {}", key, value));
  };
  // GPT-NeoX's and Falcon's dropout (either rate above 0: masks kept) and GELU activation,
  // under the key each class names it.
  auto read_dropout_and_gelu = [&](const char* act_key) {
    double attention_dropout = 0, hidden_dropout = 0;
    r.read("attention_dropout", attention_dropout);
    r.read("hidden_dropout", hidden_dropout);
    m.dropout = attention_dropout > 0 || hidden_dropout > 0;
    std::string act = "gelu";
    r.read(act_key, act);
    r.check(act.rfind("gelu", 0) == 0, act_key, "a GELU (gelu, gelu_new, gelu_fast)",
            "'" + act + "'");
  };
  // The Llama-shaped classes' common fields and defaults (layers, width, heads, key/value heads
  // (0: the heads), head_dim (0: the width over the heads), MLP, vocabulary, positions), as
  // LlamaConfig, MistralConfig, Qwen3Config, MixtralConfig, Qwen3MoeConfig and DeepseekV2/V3Config
  // have them; Qwen3's head_dim is 128 (not the width over the heads: Qwen3-0.6B's 1024 / 16
  // would be 64). An explicit null num_key_value_heads is the heads, as the classes map None.
  auto read_llama_base = [&] {
    struct Base {
      int layers;
      std::int64_t hidden, heads, kv_heads, head_dim, ffn, vocab, positions;
    };
    // Phi3Config, GemmaConfig, Gemma2Config, Qwen2MoeConfig and Llama4TextConfig (whose
    // intermediate_size is the experts' width) too.
    const Base d = type == "mistral"       ? Base{32, 4096, 32, 8, 0, 14336, 32000, 4096 * 32}
                   : type == "qwen3"       ? Base{32, 4096, 32, 32, 128, 22016, 151936, 32768}
                   : type == "qwen2"       ? Base{32, 4096, 32, 32, 0, 22016, 151936, 32768}
                   : type == "mixtral"     ? Base{32, 4096, 32, 8, 0, 14336, 32000, 4096 * 32}
                   : type == "qwen3_moe"   ? Base{24, 2048, 32, 4, 0, 6144, 151936, 32768}
                   : type == "deepseek_v3" ? Base{61, 7168, 128, 0, 0, 18432, 129280, 4096}
                   : type == "phi3"        ? Base{32, 3072, 32, 0, 0, 8192, 32064, 4096}
                   : type == "gemma"       ? Base{28, 3072, 16, 16, 256, 24576, 256000, 8192}
                   : type == "gemma2"      ? Base{26, 2304, 8, 4, 256, 9216, 256000, 8192}
                   : type == "gemma3_text" ? Base{26, 2304, 8, 4, 256, 9216, 262208, 131072}
                   : type == "qwen2_moe"   ? Base{24, 2048, 16, 16, 0, 5632, 151936, 32768}
                   : type == "llama4_text" ? Base{48, 5120, 40, 8, 128, 8192, 202048, 4096 * 32}
                                           : Base{32, 4096, 32, 0, 0, 11008, 32000, 2048};
    or_default("num_hidden_layers", m.decoder_layers, d.layers);
    or_default("hidden_size", m.hidden, d.hidden);
    or_default("num_attention_heads", m.heads, d.heads);
    const bool kv_given =
        r.raw().contains("num_key_value_heads") && !r.raw().at("num_key_value_heads").is_null();
    if (d.kv_heads > 0 && !r.raw().contains("num_key_value_heads")) {
      or_default("num_key_value_heads", m.kv_heads, d.kv_heads);
    } else if (kv_given) {
      r.read("num_key_value_heads", m.kv_heads);
    } else if (type != "deepseek_v3" && type != "deepseek_v2") {
      // None (left out or null) is the heads: multi-head attention, named (it was silent;
      // latent attention has no key/value heads to name).
      m.kv_heads = m.heads;
      defaulted.push_back(fmt::format("num_key_value_heads {} (the heads)", m.heads));
    }
    if (d.head_dim > 0)
      or_default("head_dim", m.head_dim, d.head_dim);
    else
      r.read("head_dim", m.head_dim);
    or_default("intermediate_size", m.ffn, d.ffn);
    or_default("vocab_size", m.vocab, d.vocab);
    or_default("max_position_embeddings", m.max_positions, d.positions);
    // These classes pass tie_word_embeddings=False (the base class's default is True) but
    // Gemma's, which tie the output head to the embedding.
    or_default("tie_word_embeddings", m.tied_embeddings,
               type == "gemma" || type == "gemma2" || type == "gemma3_text");
    // mlp_bias (LlamaConfig) is refused as attention_bias is: biased projections are not
    // counted (it was read past, the biases left out, found by probing, 2026-11-30).
    bool mlp_bias = false;
    r.read("mlp_bias", mlp_bias);
    r.check(!mlp_bias, "mlp_bias", "false (a biased MLP is not modelled)", "true");
    // The attention kernel: transformers' default attn_implementation is "sdpa", whose
    // FlashAttention-2 backend PyTorch picks for bf16 causal attention on A100 and later (as
    // the Llama 3 presets say); "eager" is the unfused kernel. The presets of these models and
    // their config.json predicted apart (standard for the file), found by probing, 2026-11-30.
    // A value that is not a name is refused, naming the key it was under (a number was read
    // past as sdpa, and the error named _attn_implementation for either key; found by probing,
    // 2026-12-02).
    std::string impl = "sdpa", impl_key = "_attn_implementation";
    for (const char* key : {"_attn_implementation", "attn_implementation"})
      if (r.raw().contains(key) && !r.raw().at(key).is_null()) {
        impl_key = key;
        if (!r.raw().at(key).is_string()) {
          r.fail(key, "eager, sdpa, flex_attention or flash_attention_2/3",
                 json_excerpt(r.raw().at(key)));
          break;
        }
        impl = r.raw().at(key);
      }
    if (impl == "eager") {
      m.flash_attention = false;
    } else if (impl == "sdpa" || impl == "flex_attention" ||
               impl.rfind("flash_attention", 0) == 0) {
      m.flash_attention = true;
      m.sources.push_back(fmt::format(
          "attention flash: attn_implementation {}{} (PyTorch's SDPA runs bf16 causal attention "
          "on its FlashAttention-2 backend); --attention standard for the unfused kernel",
          impl,
          impl == "sdpa" && !r.raw().contains("_attn_implementation") &&
                  !r.raw().contains("attn_implementation")
              ? ", transformers' default"
              : ""));
    } else {
      r.fail(impl_key, "eager, sdpa, flex_attention or flash_attention_2/3", "'" + impl + "'");
    }
  };
  if (type == "gpt2") {
    m.kind = ArchKind::gpt;
    set_kind_defaults(m);
    // GPT2Config: n_layer 12, n_embd 768, n_head 12, vocab 50257, n_positions 1024; n_inner
    // None is 4 x n_embd (the model's), tie_word_embeddings the base class's True.
    or_default("n_layer", m.decoder_layers, 12);
    or_default("n_embd", m.hidden, std::int64_t{768});
    or_default("n_head", m.heads, std::int64_t{12});
    or_default("vocab_size", m.vocab, std::int64_t{50257});
    or_default("n_positions", m.max_positions, std::int64_t{1024});
    r.read("n_inner", m.ffn);
    r.read("tie_word_embeddings", m.tied_embeddings);
    m.seq_length = m.max_positions;
  } else if (type == "bert") {
    m.kind = ArchKind::bert;
    set_kind_defaults(m);
    // BertConfig: 12 layers of 768, 12 heads, 3072, vocab 30522, 512 positions, 2 token types.
    or_default("num_hidden_layers", m.encoder_layers, 12);
    or_default("hidden_size", m.hidden, std::int64_t{768});
    or_default("num_attention_heads", m.heads, std::int64_t{12});
    or_default("intermediate_size", m.ffn, std::int64_t{3072});
    or_default("vocab_size", m.vocab, std::int64_t{30522});
    or_default("max_position_embeddings", m.max_positions, std::int64_t{512});
    or_default("type_vocab_size", m.type_vocab, std::int64_t{2});
    m.seq_length = m.max_positions;
  } else if (type == "t5") {
    m.kind = ArchKind::t5;
    set_kind_defaults(m);
    // T5Config: 6 layers of 512, 8 heads of 64, d_ff 2048, vocab 32128, 32 buckets, relu;
    // num_decoder_layers None is num_layers.
    or_default("num_layers", m.encoder_layers, 6);
    m.decoder_layers = m.encoder_layers;
    r.read("num_decoder_layers", m.decoder_layers);
    or_default("d_model", m.hidden, std::int64_t{512});
    or_default("num_heads", m.heads, std::int64_t{8});
    or_default("d_kv", m.head_dim, std::int64_t{64});
    or_default("d_ff", m.ffn, std::int64_t{2048});
    or_default("vocab_size", m.vocab, std::int64_t{32128});
    r.read("relative_attention_num_buckets", m.relative_attention_buckets);
    r.read("tie_word_embeddings", m.tied_embeddings);
    std::string ff = "relu";
    r.read("feed_forward_proj", ff);
    if (ff == "relu")
      m.mlp = MlpKind::relu;
    else if (ff == "gated-gelu")
      m.mlp = MlpKind::geglu;
    else
      r.fail("feed_forward_proj", "relu or gated-gelu", "'" + ff + "'");
    // The T5 paper's pre-training lengths: 512 input tokens, 114 target tokens on average.
    m.seq_length = 512;
    m.decoder_seq_length = 114;
  } else if (type == "gpt_neox") {
    // GPT-NeoX (Pythia; GPTNeoXConfig: 44 layers of 6144, 64 heads, 24576, vocab 50432, 2048
    // positions, untied): GPT-2's block (LayerNorm, biases on every linear layer, GELU) with
    // rotary positions in place of a learned table and no dropout by default. Its parallel
    // residual (use_parallel_residual) has the same operations, priced in sequence.
    m.kind = ArchKind::gpt;
    set_kind_defaults(m);
    m.position = PositionEmbedding::rotary;
    or_default("num_hidden_layers", m.decoder_layers, 44);
    or_default("hidden_size", m.hidden, std::int64_t{6144});
    or_default("num_attention_heads", m.heads, std::int64_t{64});
    or_default("intermediate_size", m.ffn, std::int64_t{24576});
    or_default("vocab_size", m.vocab, std::int64_t{50432});
    or_default("max_position_embeddings", m.seq_length, std::int64_t{2048});
    or_default("tie_word_embeddings", m.tied_embeddings, false);
    bool attention_bias = true;
    r.read("attention_bias", attention_bias);
    r.check(attention_bias, "attention_bias",
            "true (attention without biases beside a biased MLP is not modelled)", "false");
    read_dropout_and_gelu("hidden_act");
  } else if (type == "falcon") {
    // Falcon (transformers' FalconConfig: 32 layers of 4544, 71 heads, vocab 65024, 2048
    // positions, tied head): LayerNorm (with its bias), a GELU MLP ffn_hidden_size wide (None:
    // 4 h), no biases on the linear layers (bias false), rotary positions (alibi false). Keys and
    // values: one head under multi_query (Falcon-7B), num_kv_heads under
    // new_decoder_architecture (Falcon-40B/180B; None: the heads), FalconAttention's rule.
    // Norms (FalconDecoderLayer): ln_attn and ln_mlp under new_decoder_architecture with
    // num_ln_in_parallel_attn 2 (its default there); otherwise input_layernorm, shared by the
    // attention and the MLP under parallel_attn, with a post_attention_layernorm without it.
    // The parallel attention and MLP are priced in sequence, as GPT-NeoX's.
    m.kind = ArchKind::gpt;
    set_kind_defaults(m);
    m.position = PositionEmbedding::rotary;
    or_default("num_hidden_layers", m.decoder_layers, 32);
    or_default("hidden_size", m.hidden, std::int64_t{4544});
    or_default("num_attention_heads", m.heads, std::int64_t{71});
    or_default("vocab_size", m.vocab, std::int64_t{65024});
    or_default("max_position_embeddings", m.seq_length, std::int64_t{2048});
    or_default("tie_word_embeddings", m.tied_embeddings, true);
    m.ffn = 4 * m.hidden;
    r.read("ffn_hidden_size", m.ffn);
    bool new_arch = false, multi_query = true, parallel_attn = true, alibi = false;
    or_default("new_decoder_architecture", new_arch, false);
    if (!new_arch) or_default("multi_query", multi_query, true);  // (read only without it)
    or_default("parallel_attn", parallel_attn, true);
    or_default("bias", m.bias, false);
    r.read("alibi", alibi);
    r.check(!alibi, "alibi", "false (ALiBi's position biases are not modelled)", "true");
    m.kv_heads = m.heads;
    if (new_arch || !multi_query)
      r.read("num_kv_heads", m.kv_heads);
    else
      m.kv_heads = 1;
    int ln_in_parallel = new_arch ? 2 : 1;
    r.read("num_ln_in_parallel_attn", ln_in_parallel);
    m.shared_norm = parallel_attn && !(new_arch && ln_in_parallel == 2);
    read_dropout_and_gelu("activation");
  } else if (type == "mixtral" || type == "deepseek_v3" || type == "deepseek_v2" ||
             type == "qwen3_moe" || type == "qwen2_moe" || type == "llama4_text") {
    // Mixture of experts: Mixtral (transformers' MixtralConfig: num_local_experts,
    // num_experts_per_tok), DeepSeek-V2/V3 (n_routed_experts, n_shared_experts,
    // moe_intermediate_size, first_k_dense_replace, and multi-head latent attention),
    // Qwen3-MoE and Qwen2-MoE (num_experts, moe_intermediate_size, decoder_sparse_step,
    // mlp_only_layers; Qwen2-MoE's shared_expert_intermediate_size) and Llama 4's text model
    // (num_local_experts, intermediate_size_mlp, interleave_moe_layer_step).
    m.kind = ArchKind::llama;
    set_kind_defaults(m);
    read_llama_base();
    if (type == "mixtral") {
      or_default("num_local_experts", m.experts, std::int64_t{8});
      or_default("num_experts_per_tok", m.experts_per_token, std::int64_t{2});
    } else if (type == "llama4_text") {
      // Llama4TextMoe: num_local_experts routed experts and one shared expert, each
      // intermediate_size wide (read above as the base's), the dense blocks' MLP
      // intermediate_size_mlp wide; MoE on the blocks in moe_layers, by default those with
      // (layer_idx + 1) % interleave_moe_layer_step == 0.
      or_default("num_local_experts", m.experts, std::int64_t{16});
      or_default("num_experts_per_tok", m.experts_per_token, std::int64_t{1});
      m.shared_experts = 1;
      m.moe_ffn = m.ffn;
      or_default("intermediate_size_mlp", m.ffn, std::int64_t{16384});
      or_default("interleave_moe_layer_step", m.moe_layer_step, 1);
      if (r.has("moe_layers") && r.raw().at("moe_layers").is_array()) {
        nlohmann::json pattern = nlohmann::json::array();
        for (int l = 0; m.moe_layer_step > 0 && l < m.decoder_layers; ++l)
          if ((l + 1) % m.moe_layer_step == 0) pattern.push_back(l);
        if (r.raw().at("moe_layers") != pattern)
          r.fail("moe_layers",
                 "every interleave_moe_layer_step-th block (other choices are not modelled)",
                 json_excerpt(r.raw().at("moe_layers")));
      }
      bool attention_bias = false;
      r.read("attention_bias", attention_bias);
      r.check(!attention_bias, "attention_bias", "false (biased attention is not modelled)",
              "true");
    } else if (type == "qwen3_moe" || type == "qwen2_moe") {
      // Qwen3MoeDecoderLayer: a sparse block where (layer_idx + 1) % decoder_sparse_step == 0
      // and the layer is not in mlp_only_layers; no shared experts; Qwen3's attention.
      // Qwen2MoeSparseMoeBlock (Qwen2 and Qwen1.5 MoE): the same, and one shared expert
      // shared_expert_intermediate_size wide (a multiple of the routed width: a SwiGLU k times as
      // wide has the parameters and FLOPs of k routed-width ones, as which it is counted) behind a
      // sigmoid gate, hidden x 1; Qwen2MoeAttention's q, k and v carry biases, as Qwen2's.
      const bool q2 = type == "qwen2_moe";
      m.qk_norm = !q2;  // Qwen3-MoE's attention is Qwen3's, with per-head q and k norms
      or_default("num_experts", m.experts, std::int64_t{q2 ? 60 : 128});
      or_default("num_experts_per_tok", m.experts_per_token, std::int64_t{q2 ? 4 : 8});
      or_default("moe_intermediate_size", m.moe_ffn, std::int64_t{q2 ? 1408 : 768});
      if (q2) {
        m.qkv_bias = true;
        std::int64_t shared = 0;
        or_default("shared_expert_intermediate_size", shared, std::int64_t{5632});
        if (shared > 0 && m.moe_ffn > 0 && shared % m.moe_ffn == 0) {
          m.shared_experts = shared / m.moe_ffn;
          m.shared_expert_gate = true;
        } else if (shared != 0) {
          r.fail("shared_expert_intermediate_size",
                 fmt::format("0 or a multiple of moe_intermediate_size {}", m.moe_ffn),
                 std::to_string(shared));
        }
      }
      r.read("decoder_sparse_step", m.moe_layer_step);
      if (r.has("mlp_only_layers") && r.raw().at("mlp_only_layers").is_array() &&
          !r.raw().at("mlp_only_layers").empty())
        r.fail("mlp_only_layers", "[] (dense blocks chosen by index are not modelled)",
               r.raw().at("mlp_only_layers").dump());
      bool attention_bias = false;
      r.read("attention_bias", attention_bias);
      r.check(!attention_bias, "attention_bias", "false (biased attention is not modelled)",
              "true");
    } else {
      // DeepseekV3Config: 256 routed experts and 1 shared of 2048, top 8, the first 3 blocks
      // dense, 8 groups of which 4 are routed to; DeepseekV2Config: 64 and 2 of 1407, no dense
      // blocks, no groups, and no default top-k (its None is required here). Both: q_lora_rank
      // 1536, kv_lora_rank 512, rope 64, nope 128, v 128 channels.
      const bool v3 = type == "deepseek_v3";
      or_default("n_routed_experts", m.experts, std::int64_t{v3 ? 256 : 64});
      or_default("n_shared_experts", m.shared_experts, std::int64_t{v3 ? 1 : 2});
      or_default("moe_intermediate_size", m.moe_ffn, std::int64_t{v3 ? 2048 : 1407});
      if (v3)
        or_default("num_experts_per_tok", m.experts_per_token, std::int64_t{8});
      else
        r.require("num_experts_per_tok", m.experts_per_token);
      or_default("first_k_dense_replace", m.first_dense_layers, v3 ? 3 : 0);
      // Group-limited routing (DeepSeek-V3: n_group 8, topk_group 4; V2's None: none); null:
      // none.
      if (v3 && !r.raw().contains("n_group"))
        or_default("n_group", m.expert_groups, 8);
      else
        r.read("n_group", m.expert_groups);
      if (v3 && !r.raw().contains("topk_group"))
        or_default("topk_group", m.expert_groups_per_token, 4);
      else
        r.read("topk_group", m.expert_groups_per_token);
      int freq = 1;
      r.read("moe_layer_freq", freq);
      r.check(freq == 1, "moe_layer_freq", "1 (every layer after the dense ones is MoE)",
              std::to_string(freq));
      // q_lora_rank null: queries without the low-rank compression (DeepSeek-V2-Lite).
      if (!r.raw().contains("q_lora_rank"))
        or_default("q_lora_rank", m.q_lora_rank, std::int64_t{1536});
      else
        r.read("q_lora_rank", m.q_lora_rank);
      or_default("kv_lora_rank", m.kv_lora_rank, std::int64_t{512});
      or_default("qk_rope_head_dim", m.qk_rope_head_dim, std::int64_t{64});
      or_default("qk_nope_head_dim", m.qk_nope_head_dim, std::int64_t{128});
      or_default("v_head_dim", m.v_head_dim, std::int64_t{128});
      // Multi-token prediction depths (DeepSeek-V3: 1); absent: none (transformers' model has
      // no MTP module).
      r.read("num_nextn_predict_layers", m.mtp_layers);
      // Latent attention has one key/value latent, not heads: kv_heads and head_dim describe
      // the query/key heads (nope + rope channels).
      m.kv_heads = m.heads;
      m.head_dim = m.qk_nope_head_dim + m.qk_rope_head_dim;
    }
    m.seq_length = m.max_positions > 0 && m.max_positions < 4096 ? m.max_positions : 4096;
    m.max_positions = 0;
  } else if (type == "llama" || type == "mistral" || type == "qwen3" || type == "qwen2" ||
             type == "phi3" || type == "gemma" || type == "gemma2" || type == "gemma3_text") {
    // Qwen3 (dense) is a Llama with per-head query and key RMSNorms (qk_norm).
    // Qwen2 (Qwen2 and Qwen2.5) is a Llama with biases on q, k and v (Qwen2Attention's
    // nn.Linear(bias=True) for those three, o_proj without), which the config does not state.
    // Phi-3 (and Phi-4, model_type phi3) is a Llama whose q, k, v and gate, up projections are
    // fused into two matrices of the same shapes. Gemma is a Llama with a gated GELU MLP
    // (GeGLU), head_dim 256 and a tied head; Gemma 2 adds norms on the attention's and the
    // MLP's outputs (post_attention_layernorm and post_feedforward_layernorm beside the two
    // pre-norms) and tanh soft-capping of attention scores and logits, which is not priced;
    // Gemma 3 (gemma3_text) has Gemma 2's four norms and Qwen3's per-head query and key norms in
    // place of the soft-capping.
    m.kind = ArchKind::llama;
    set_kind_defaults(m);
    read_llama_base();
    if (type == "qwen2") m.qkv_bias = true;
    if (type == "qwen3" || type == "gemma3_text") m.qk_norm = true;
    if (type == "gemma" || type == "gemma2" || type == "gemma3_text") {
      m.mlp = MlpKind::geglu;
      m.post_norms = type != "gemma";
      // GemmaConfig's hidden_activation (None: gelu_pytorch_tanh) wins over hidden_act.
      for (const char* key : {"hidden_act", "hidden_activation"})
        if (r.has(key) && r.raw().at(key).is_string()) {
          const std::string act = r.raw().at(key);
          r.check(act.rfind("gelu", 0) == 0, key, "a GELU (gelu, gelu_pytorch_tanh)",
                  "'" + act + "'");
        }
      for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"})
        if (const auto c = j.find(key); c != j.end() && c->is_number() && c->get<double>() > 0)
          m.notes.push_back(
              fmt::format("{}: {} {}: the tanh soft-capping is not priced (an elementwise pass)",
                          where, key, json_excerpt(*c)));
    }
    bool attention_bias = false;
    r.read("attention_bias", attention_bias);
    r.check(!attention_bias, "attention_bias", "false (biased attention is not modelled)", "true");
    // A training sequence length is not part of config.json; 4096 unless the table is shorter.
    m.seq_length = m.max_positions > 0 && m.max_positions < 4096 ? m.max_positions : 4096;
    m.max_positions = 0;
  } else {
    return Error{fmt::format(
        "{}: field 'model_type': expected one of "
        "gpt2|gpt_neox|falcon|bert|t5|llama|mistral|phi3|gemma|gemma2|gemma3|gemma3_text|qwen2|"
        "qwen3|"
        "mixtral|qwen2_moe|qwen3_moe|deepseek_v2|deepseek_v3|llama4|llama4_text, got {}",
        where, json_excerpt(j.at("model_type")))};
  }
  // Sliding-window attention (Mistral 7B v0.1's 4096, Qwen's use_sliding_window) is priced as
  // full causal attention: said, as it overstates attention at longer sequences (it was read past
  // in silence, found by probing, 2026-12-02).
  // Llama 4's chunked attention (attention_chunk_size) likewise.
  for (const char* key : {"sliding_window", "attention_chunk_size"})
    if (const auto w = j.find(key);
        w != j.end() && w->is_number_integer() && w->get<std::int64_t>() > 0) {
      const auto use = j.find("use_sliding_window");
      if (std::string_view(key) != "sliding_window" || use == j.end() || !use->is_boolean() ||
          use->get<bool>())
        m.notes.push_back(fmt::format(
            "{}: {} {}: attention is priced as full causal attention (sliding windows and "
            "chunks are not modelled), which overstates its FLOPs and time at sequences above {}",
            where, key, w->get<std::int64_t>(), w->get<std::int64_t>()));
    }
  std::string list;
  for (const std::string& d : defaulted) list += (list.empty() ? "" : ", ") + d;
  if (!defaulted.empty()) {
    m.notes.push_back(
        fmt::format("{}: fields left out take transformers' {} defaults: {}", where, type, list));
    m.sources.push_back("transformers' defaults for the fields the file leaves out: " + list);
  }
  // An error about the model says which values were transformers' defaults (the note above is
  // never printed then): "got 32" for a num_key_value_heads the file left out.
  auto said = [&](Status st) -> Status {
    if (st.ok() || defaulted.empty()) return st;
    return Error{fmt::format("{} (left out of the file, transformers' defaults: {})",
                             st.error().message, list)};
  };
  CS_RETURN_IF_ERROR(r.status());
  CS_RETURN_IF_ERROR(
      said(check_head_split(m, where, type == "gpt2" ? "n_head" : "num_attention_heads",
                            type == "gpt2" ? "n_embd" : "hidden_size")));
  // Fields whose absence (or null) means "the default" are positive when given: an explicit 0
  // was read as absent (num_key_value_heads 0 became the heads), a negative table accepted
  // (found by probing, 2026-11-30).
  for (const char* key :
       {"num_key_value_heads", "head_dim", "n_inner", "max_position_embeddings", "n_positions",
        "moe_intermediate_size", "num_decoder_layers", "intermediate_size", "d_kv", "d_ff"})
    if (j.contains(key) && j.at(key).is_number() && !(j.at(key).get<double>() >= 1))
      return Error{fmt::format("{}: field '{}': expected a positive integer, got {}", where, key,
                               json_excerpt(j.at(key)))};
  apply_model_defaults(m);
  // validate_model names commscope's fields: name the config's beside them.
  if (Status st = validate_model(m, where); !st.ok()) {
    static const std::pair<std::string_view, std::string_view> kLlama[] = {
        {"layers", "num_hidden_layers"},
        {"decoder_layers", "num_hidden_layers"},
        {"hidden", "hidden_size"},
        {"heads", "num_attention_heads"},
        {"kv_heads", "num_key_value_heads"},
        {"ffn", "intermediate_size"},
        {"vocab", "vocab_size"},
        {"experts_per_token", "num_experts_per_tok"},
        {"moe_ffn", "moe_intermediate_size"},
        {"shared_experts", "n_shared_experts"},
        {"first_dense_layers", "first_k_dense_replace"},
        {"expert_groups", "n_group"},
        {"expert_groups_per_token", "topk_group"},
        {"moe_layer_step", "decoder_sparse_step"},
        {"mtp_layers", "num_nextn_predict_layers"},
        {"max_positions", "max_position_embeddings"}};
    static const std::pair<std::string_view, std::string_view> kGpt2[] = {
        {"layers", "n_layer"},
        {"decoder_layers", "n_layer"},
        {"hidden", "n_embd"},
        {"heads", "n_head"},
        {"ffn", "n_inner"},
        {"vocab", "vocab_size"},
        {"max_positions", "n_positions"}};
    std::string msg = st.error().message;
    auto rename = [&](std::string_view ours, std::string_view theirs) {
      const std::string from = fmt::format("field '{}':", ours);
      if (auto at = msg.find(from); at != std::string::npos)
        msg.replace(at, from.size(), fmt::format("field '{}' (commscope's {}):", theirs, ours));
    };
    if (m.kind == ArchKind::llama)
      for (const auto& [ours, theirs] : kLlama) rename(ours, theirs);
    if (type == "gpt2")
      for (const auto& [ours, theirs] : kGpt2) rename(ours, theirs);
    if (type == "bert") rename("type_vocab", "type_vocab_size");
    if (type == "t5") rename("relative_attention_buckets", "relative_attention_num_buckets");
    rename("experts", type == "mixtral" || type == "llama4_text"   ? "num_local_experts"
                      : type == "qwen3_moe" || type == "qwen2_moe" ? "num_experts"
                                                                   : "n_routed_experts");
    return said(Error{msg}).error();
  }
  return m;
}

Result<ModelSpec> load_model(const std::string& name_or_path) {
  CS_ASSIGN_OR_RETURN(auto path, find_preset(PresetKind::model, name_or_path));
  CS_ASSIGN_OR_RETURN(auto j, read_json_file(path));
  return model_from_json(j, path.string());
}

nlohmann::json to_json(const ModelSpec& m) {
  nlohmann::json j = {{"name", m.name},
                      {"kind", to_string(m.kind)},
                      {"encoder_layers", m.encoder_layers},
                      {"decoder_layers", m.decoder_layers},
                      {"hidden", m.hidden},
                      {"heads", m.heads},
                      {"kv_heads", m.kv_heads},
                      {"head_dim", m.head_dim},
                      {"ffn", m.ffn},
                      {"vocab", m.vocab},
                      {"seq_length", m.seq_length},
                      {"tied_embeddings", m.tied_embeddings},
                      {"position_embedding", to_string(m.position)},
                      {"norm", to_string(m.norm)},
                      {"mlp", to_string(m.mlp)}};
  if (m.kind == ArchKind::t5) j["decoder_seq_length"] = m.dec_seq();
  if (m.flash_attention) j["attention"] = "flash";
  // Biases where they differ from the kind's (a --disable-bias-linear model lost them in the
  // round trip characterize makes of its model.json); QKV biases where the model has them.
  ModelSpec kind_default;
  kind_default.kind = m.kind;
  set_kind_defaults(kind_default);
  if (m.bias != kind_default.bias) j["bias"] = m.bias;
  if (m.dropout != kind_default.dropout) j["dropout"] = m.dropout;
  if (m.qkv_bias && !m.bias) j["qkv_bias"] = true;
  if (m.post_norms) j["post_norms"] = true;
  if (m.shared_norm) j["shared_norm"] = true;
  if (m.qk_norm) j["qk_norm"] = true;
  // Mixture of experts and latent attention only where the model has them: a dense model's
  // JSON is as before.
  if (m.moe()) {
    j["experts"] = m.experts;
    j["experts_per_token"] = m.experts_per_token;
    j["shared_experts"] = m.shared_experts;
    if (m.shared_expert_gate) j["shared_expert_gate"] = true;
    j["moe_ffn"] = m.expert_ffn();
    j["first_dense_layers"] = m.first_dense_layers;
    if (m.moe_layer_step > 1) j["moe_layer_step"] = m.moe_layer_step;
    if (m.expert_groups > 0) {
      j["expert_groups"] = m.expert_groups;
      j["expert_groups_per_token"] = m.expert_groups_per_token;
    }
  }
  if (m.mla()) {
    j["q_lora_rank"] = m.q_lora_rank;
    j["kv_lora_rank"] = m.kv_lora_rank;
    j["qk_rope_head_dim"] = m.qk_rope_head_dim;
    j["qk_nope_head_dim"] = m.qk_nope_head_dim;
    j["v_head_dim"] = m.v_head_dim;
  }
  if (m.mtp_layers > 0) j["mtp_layers"] = m.mtp_layers;
  return j;
}

}  // namespace commscope

namespace commscope {

bool ModelFlags::any() const {
  return num_layers || hidden_size || ffn_hidden_size || num_attention_heads || num_query_groups ||
         kv_channels || max_position_embeddings || vocab_size || num_experts || moe_router_topk ||
         moe_ffn_hidden_size || moe_shared_expert_intermediate_size || expert_interval ||
         group_query_attention || swiglu || untie_embeddings || disable_bias_linear ||
         add_qkv_bias || qk_layernorm || use_flash_attn || attention_dropout || hidden_dropout ||
         normalization || position_embedding;
}

std::string ModelFlags::summary() const {
  std::vector<std::string> out;
  for (auto [flag, v] :
       {std::pair{"--num-layers", num_layers},
        {"--hidden-size", hidden_size},
        {"--ffn-hidden-size", ffn_hidden_size},
        {"--num-attention-heads", num_attention_heads},
        {"--num-query-groups", num_query_groups},
        {"--kv-channels", kv_channels},
        {"--max-position-embeddings", max_position_embeddings},
        {"--vocab-size", vocab_size},
        {"--num-experts", num_experts},
        {"--moe-router-topk", moe_router_topk},
        {"--moe-ffn-hidden-size", moe_ffn_hidden_size},
        {"--moe-shared-expert-intermediate-size", moe_shared_expert_intermediate_size},
        {"--expert-interval", expert_interval}})
    if (v) out.push_back(fmt::format("{} {}", flag, *v));
  for (auto [flag, v] :
       {std::pair{"--attention-dropout", attention_dropout}, {"--hidden-dropout", hidden_dropout}})
    if (v) out.push_back(fmt::format("{} {}", flag, *v));
  if (group_query_attention) out.emplace_back("--group-query-attention");
  if (use_flash_attn) out.emplace_back("--use-flash-attn");
  if (swiglu) out.emplace_back("--swiglu");
  if (untie_embeddings) out.emplace_back("--untie-embeddings-and-output-weights");
  if (disable_bias_linear) out.emplace_back("--disable-bias-linear");
  if (add_qkv_bias) out.emplace_back("--add-qkv-bias");
  if (qk_layernorm) out.emplace_back("--qk-layernorm");
  if (normalization)
    out.push_back(fmt::format("--normalization {}",
                              *normalization == NormKind::rmsnorm ? "RMSNorm" : "LayerNorm"));
  if (position_embedding)
    out.push_back(fmt::format("--position-embedding-type {}",
                              *position_embedding == PositionEmbedding::rotary ? "rope"
                              : *position_embedding == PositionEmbedding::none
                                  ? "none"
                                  : "learned_absolute"));
  return fmt::format("{}", fmt::join(out, " "));
}

std::optional<NormKind> megatron_normalization(std::string_view name) {
  // Megatron-DeepSpeed spells them layernorm and rmsnorm (megatron/arguments.py's choices).
  if (name == "LayerNorm" || name == "layernorm") return NormKind::layernorm;
  if (name == "RMSNorm" || name == "rmsnorm") return NormKind::rmsnorm;
  return std::nullopt;
}

std::optional<PositionEmbedding> megatron_position_embedding(std::string_view name) {
  if (name == "learned_absolute") return PositionEmbedding::learned;
  if (name == "rope") return PositionEmbedding::rotary;
  if (name == "none") return PositionEmbedding::none;
  return std::nullopt;
}

Result<ModelSpec> apply_model_flags(const std::optional<ModelSpec>& base, const ModelFlags& f,
                                    std::int64_t seq_length) {
  auto bad = [](std::string_view flag, std::string_view expected, auto got) {
    return Error{fmt::format("{}: expected {}, got {}", flag, expected, got)};
  };
  // Each size positive and within commscope's limits (docs/limits.md).
  for (auto [flag, v, limit] :
       {std::tuple{"--num-layers", f.num_layers, limits::kMaxLayers},
        std::tuple{"--hidden-size", f.hidden_size, limits::kMaxHidden},
        std::tuple{"--ffn-hidden-size", f.ffn_hidden_size, limits::kMaxFfn},
        std::tuple{"--num-attention-heads", f.num_attention_heads, limits::kMaxHidden},
        std::tuple{"--num-query-groups", f.num_query_groups, limits::kMaxHidden},
        std::tuple{"--kv-channels", f.kv_channels, limits::kMaxHidden},
        std::tuple{"--max-position-embeddings", f.max_position_embeddings, limits::kMaxSeqLength},
        std::tuple{"--vocab-size", f.vocab_size, limits::kMaxVocab},
        std::tuple{"--num-experts", f.num_experts, limits::kMaxHidden},
        std::tuple{"--moe-router-topk", f.moe_router_topk, limits::kMaxHidden},
        std::tuple{"--moe-ffn-hidden-size", f.moe_ffn_hidden_size, limits::kMaxFfn},
        std::tuple{"--moe-shared-expert-intermediate-size", f.moe_shared_expert_intermediate_size,
                   limits::kMaxFfn},
        std::tuple{"--expert-interval", f.expert_interval, limits::kMaxLayers}})
    if (v && (*v < 1 || *v > limit))
      return bad(flag, fmt::format("an integer from 1 to {} (commscope's limit)", limit), *v);
  // Megatron-LM reads --num-query-groups only under --group-query-attention.
  if (f.num_query_groups && !f.group_query_attention)
    return bad("--num-query-groups",
               "--group-query-attention beside it (Megatron-LM ignores the groups without it)",
               *f.num_query_groups);
  if (f.group_query_attention && !f.num_query_groups)
    return bad("--group-query-attention", "--num-query-groups beside it", "none");

  ModelSpec m;
  if (base) {
    m = *base;
    if (m.kind != ArchKind::gpt && m.kind != ArchKind::llama)
      return Error{fmt::format(
          "{}: expected a decoder-only model (gpt or llama kind) for Megatron-LM's model flags, "
          "got {} ({})",
          f.summary(), m.name, to_string(m.kind))};
    if (m.mla() && (f.num_attention_heads || f.kv_channels || f.num_query_groups))
      return Error{fmt::format(
          "{}: expected no attention-shape flags for {} (latent attention: its heads and "
          "channels come with its latent ranks)",
          f.summary(), m.name)};
  } else {
    // Megatron-LM's own required arguments (megatron/training/arguments.py).
    for (auto [flag, v] : {std::pair{"--num-layers", f.num_layers},
                           {"--hidden-size", f.hidden_size},
                           {"--num-attention-heads", f.num_attention_heads}})
      if (!v)
        return bad(flag,
                   "a value (the model flags without --model define the model, and Megatron-LM "
                   "requires --num-layers, --hidden-size and --num-attention-heads)",
                   "none");
    if (seq_length < 1)
      return bad("--seq-length",
                 "the tokens per sample (the model flags without --model define the model, and "
                 "Megatron-LM requires --seq-length)",
                 "none");
    m.kind = ArchKind::gpt;
    m.position = PositionEmbedding::learned;
    m.norm = NormKind::layernorm;
    m.mlp = MlpKind::gelu;
    m.bias = m.dropout = m.tied_embeddings = true;
    m.seq_length = seq_length;
    m.vocab = 50304;
    m.notes.push_back(
        "vocabulary 50,304: GPT-2's BPE (50,257) padded to a multiple of 128, as Megatron-LM "
        "pads it at TP 1 (--vocab-size sets it)");
  }
  const bool reshaped = f.hidden_size || f.num_attention_heads;
  if (f.num_layers) m.decoder_layers = static_cast<int>(*f.num_layers);
  if (f.hidden_size) m.hidden = *f.hidden_size;
  if (f.num_attention_heads) {
    // a new head count: every head its own key/value unless --num-query-groups says
    m.heads = *f.num_attention_heads;
    m.kv_heads = m.heads;
  }
  if (f.num_query_groups) m.kv_heads = *f.num_query_groups;
  if (f.kv_channels)
    m.head_dim = *f.kv_channels;
  else if (reshaped || !base)
    m.head_dim = 0;  // hidden / heads, below, as Megatron-LM derives kv_channels
  if (f.swiglu) m.mlp = MlpKind::swiglu;
  if (f.normalization) m.norm = *f.normalization;
  if (f.position_embedding) m.position = *f.position_embedding;
  if (f.untie_embeddings) m.tied_embeddings = false;
  if (f.disable_bias_linear) m.bias = false;
  if (f.add_qkv_bias) m.qkv_bias = true;
  if (f.qk_layernorm) m.qk_norm = true;
  if (f.use_flash_attn) m.flash_attention = true;
  // Megatron-LM's dropouts (0.1 by default): commscope stores the masks of both or neither.
  for (auto [flag, v] : {std::pair{"--attention-dropout", f.attention_dropout},
                         {"--hidden-dropout", f.hidden_dropout}})
    if (v && !(*v >= 0 && *v < 1)) return bad(flag, "a probability from 0 to below 1", *v);
  // The one not given: Megatron-LM's 0.1, or none where the named model has no dropout.
  const double unstated = base && !base->dropout ? 0.0 : 0.1;
  if (f.attention_dropout || f.hidden_dropout)
    m.dropout =
        f.attention_dropout.value_or(unstated) > 0 || f.hidden_dropout.value_or(unstated) > 0;
  if (f.vocab_size) {
    m.vocab = *f.vocab_size;
    if (!base) m.notes.clear();
  }
  if (f.ffn_hidden_size) {
    m.ffn = *f.ffn_hidden_size;
  } else if (!base) {
    // Megatron-LM's default (arguments.py): 4h, or under --swiglu 2/3 of it rounded down to 64.
    m.ffn = m.gated_mlp() ? (4 * m.hidden * 2 / 3) / 64 * 64 : 4 * m.hidden;
  }
  if (f.max_position_embeddings) {
    m.max_positions = *f.max_position_embeddings;
  } else if (!base) {
    m.max_positions = 0;  // the sequence length (apply_model_defaults), as Megatron-LM's
  }
  if (m.position != PositionEmbedding::learned) m.max_positions = 0;
  // The sequence the run takes (--seq-length), checked against the table above: a preset's own
  // was checked instead until 2026-12-01, so a shorter --max-position-embeddings with the
  // --seq-length that fits it was refused.
  if (base && seq_length > 0) m.seq_length = seq_length;
  // Mixture of experts: Megatron-LM's top-k default is 2; the shared experts' width is their
  // count x the expert width.
  if (f.num_experts) {
    m.experts = *f.num_experts;
    if (!f.moe_router_topk && m.experts_per_token == 0) m.experts_per_token = 2;
  }
  if (f.moe_router_topk) m.experts_per_token = *f.moe_router_topk;
  if (f.moe_ffn_hidden_size) m.moe_ffn = *f.moe_ffn_hidden_size;
  // Megatron-DeepSpeed's interval: blocks k, 2k, ... (1-based) are MoE, the others dense
  // (megatron/model/transformer.py get_num_experts_per_layer): the (l + 1) % k rule of
  // moe_layer_step.
  if (f.expert_interval) m.moe_layer_step = static_cast<int>(*f.expert_interval);
  if ((f.moe_router_topk || f.moe_ffn_hidden_size || f.moe_shared_expert_intermediate_size ||
       f.expert_interval) &&
      !m.moe())
    return bad(f.moe_router_topk                       ? "--moe-router-topk"
               : f.moe_ffn_hidden_size                 ? "--moe-ffn-hidden-size"
               : f.moe_shared_expert_intermediate_size ? "--moe-shared-expert-intermediate-size"
                                                       : "--expert-interval",
               "--num-experts beside it (or a MoE model)", "a dense model");
  if (m.moe() && m.experts_per_token > m.experts)
    return bad("--moe-router-topk", fmt::format("at most the {} experts", m.experts),
               m.experts_per_token);
  if (f.moe_shared_expert_intermediate_size) {
    const std::int64_t width = m.expert_ffn();
    if (*f.moe_shared_expert_intermediate_size % width != 0)
      return bad("--moe-shared-expert-intermediate-size",
                 fmt::format("a multiple of the expert width {} (the shared experts' count x "
                             "it)",
                             width),
                 *f.moe_shared_expert_intermediate_size);
    m.shared_experts = *f.moe_shared_expert_intermediate_size / width;
  }
  if (m.heads > 0 && m.kv_heads > 0 && m.heads % m.kv_heads != 0)
    return bad(f.num_query_groups ? "--num-query-groups" : "--num-attention-heads",
               fmt::format("heads ({}) a multiple of the query groups ({})", m.heads, m.kv_heads),
               f.num_query_groups ? *f.num_query_groups : m.heads);
  if (m.head_dim == 0 && m.heads > 0 && m.hidden % m.heads != 0)
    return bad("--num-attention-heads",
               fmt::format("a divisor of --hidden-size {} (or --kv-channels)", m.hidden), m.heads);
  apply_model_defaults(m);
  const std::string flags = f.summary();
  m.name = base ? fmt::format("{} ({})", base->name, flags) : std::string("megatron-gpt");
  m.sources.push_back(
      base ? fmt::format("{} changed by Megatron-LM's model flags: {}", base->name, flags)
           : fmt::format("Megatron-LM's model flags: {}", flags));
  CS_RETURN_IF_ERROR(validate_model(m, "the model flags (" + flags + ")"));
  return m;
}

Result<ModelSpec> load_model(const std::string& name_or_path, const ModelFlags& flags,
                             std::int64_t seq_length) {
  if (!flags.any()) return load_model(name_or_path);
  std::optional<ModelSpec> base;
  if (!name_or_path.empty()) {
    CS_ASSIGN_OR_RETURN(base, load_model(name_or_path));
  }
  return apply_model_flags(base, flags, seq_length);
}

}  // namespace commscope
