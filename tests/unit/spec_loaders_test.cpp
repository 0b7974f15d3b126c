// Loading foreign configs: Hugging Face config.json as a model, DeepSpeed ds_config.json as
// a plan; the presets themselves all load.
#include <gtest/gtest.h>

#include <algorithm>

#include <fstream>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commscope/spec/preset.h"
#include "commscope/workload/params.h"
#include "test_util.h"

namespace commscope {
namespace {

const std::string kData = COMMSCOPE_SOURCE_DIR "/tests/data/";

TEST(Loaders, EveryPresetLoads) {
  for (const auto& n : list_presets(PresetKind::model)) {
    auto m = load_model(n);
    EXPECT_TRUE(m.ok()) << n << ": " << (m.ok() ? "" : m.error().message);
    if (m.ok()) {
      EXPECT_EQ(m->name, n);
      EXPECT_FALSE(m->sources.empty()) << n << " cites no source";
    }
  }
  for (const auto& n : list_presets(PresetKind::system)) {
    auto s = load_system(n);
    EXPECT_TRUE(s.ok()) << n << ": " << (s.ok() ? "" : s.error().message);
    if (s.ok()) {
      EXPECT_FALSE(s->sources.empty()) << n << " cites no source";
      EXPECT_TRUE(load_network(s->network).ok()) << n << "'s network " << s->network;
    }
  }
  for (const auto& n : list_presets(PresetKind::network)) {
    auto p = load_network(n);
    EXPECT_TRUE(p.ok()) << n << ": " << (p.ok() ? "" : p.error().message);
    if (p.ok()) {
      EXPECT_FALSE(p->sources.empty()) << n << " cites no source";
    }
  }
  EXPECT_EQ(list_presets(PresetKind::model).size(),
            46u);  // + bert/t5-tiny-cpu, mixtral x2, deepseek-v3, gpt2-moe-tiny-cpu, qwen3 x2,
                   // llama3.2-1b, deepseek-v2-lite, qwen3 dense x6, llama4 x2
}

// Each size within its limit, the parameter count is bounded too (found by probing,
// 2026-11-30: 4096 layers of 262,144 experts of width 2^20 wrapped to -4.6e18 parameters, 0 B
// per rank, "fits").
TEST(Loaders, ParameterCountIsBounded) {
  const nlohmann::json hf = {
      {"model_type", "qwen3_moe"}, {"num_hidden_layers", 4096},       {"hidden_size", 4096},
      {"num_attention_heads", 32}, {"num_key_value_heads", 8},        {"intermediate_size", 12288},
      {"vocab_size", 151936},      {"max_position_embeddings", 4096}, {"num_experts", 262144},
      {"num_experts_per_tok", 8},  {"moe_intermediate_size", 1048576}};
  auto m = model_from_hf_config(hf, "huge.json");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("expected at most 1.13e+15 parameters"), std::string::npos)
      << m.error().message;
  // The largest shipped models are far inside it.
  for (const char* n : {"deepseek-v3", "megatron-1t", "llama4-maverick"}) {
    auto ok = load_model(n);
    ASSERT_TRUE(ok.ok()) << n;
    EXPECT_LT(count_params(*ok).total, std::int64_t{1} << 50) << n;
  }
}

TEST(Loaders, SeedProtocolsOrderedByRate) {
  // The presets come from independent measurements (data/seeds/protocols.csv; their values are
  // checked against that file in report_seeds_test): TCP on 10 GbE below IPoIB below RDMA.
  const double tcp = units::to_gbit_per_s(load_network("tcp-10g")->achievable);
  const double ipoib = units::to_gbit_per_s(load_network("ipoib-100g")->achievable);
  const double rdma = units::to_gbit_per_s(load_network("rdma-100g")->achievable);
  EXPECT_LT(tcp, ipoib);
  EXPECT_LT(ipoib, rdma);
  EXPECT_DOUBLE_EQ(units::to_gbit_per_s(load_network("rdma-100g")->line_rate), 100);
}

TEST(Loaders, ExaCommTable4) {
  auto p = load_system("polaris");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->node.gpus, 4);
  EXPECT_EQ(p->nics.count, 2);
  EXPECT_DOUBLE_EQ(units::to_gbit_per_s(p->nics.line_rate) * p->nics.count, 200);
  EXPECT_DOUBLE_EQ(units::to_gb_per_s(p->node.p2p_bandwidth), 80.5);
  EXPECT_DOUBLE_EQ(units::to_gb_per_s(p->node.host_copy_pinned), 24.6);
  EXPECT_DOUBLE_EQ(units::to_gb_per_s(p->gpu.memory_bandwidth), 1555);
  auto tg80 = load_system("thetagpu-tg80");
  ASSERT_TRUE(tg80.ok());
  EXPECT_DOUBLE_EQ(units::to_gbit_per_s(tg80->nics.line_rate) * tg80->nics.count, 1600);
  EXPECT_DOUBLE_EQ(units::to_gb_per_s(tg80->node.p2p_bandwidth), 278.8);
  EXPECT_DOUBLE_EQ(units::to_gb_per_s(tg80->gpu.memory_bandwidth), 2039);
}

// A Hugging Face config.json loads to the same architecture as the preset of that model.
TEST(Loaders, HuggingFaceConfigs) {
  struct Case {
    const char* file;
    const char* preset;
  };
  for (auto c : {Case{"gpt2-large.json", "gpt2-large"}, Case{"bert-base-uncased.json", "bert-base"},
                 Case{"t5-small.json", "t5-small"}, Case{"llama-2-70b.json", "llama2-70b"},
                 Case{"qwen3-8b.json", "qwen3-8b"}}) {
    SCOPED_TRACE(c.file);
    auto m = load_model(kData + "hf/" + c.file);
    ASSERT_TRUE(m.ok()) << m.error().message;
    ModelSpec p = testing::model(c.preset);
    EXPECT_EQ(m->kind, p.kind);
    EXPECT_EQ(m->layers(), p.layers());
    EXPECT_EQ(m->kv_heads, p.kv_heads);
    EXPECT_EQ(m->ffn, p.ffn);
    EXPECT_EQ(m->tied_embeddings, p.tied_embeddings);
    EXPECT_EQ(count_params(*m).total, count_params(p).total);
  }
  auto llama = load_model(kData + "hf/llama-2-70b.json");
  EXPECT_EQ(llama->name, "meta-llama/Llama-2-70b-hf");
  EXPECT_EQ(llama->seq_length, 4096);
}

// A config.json's explicit 0 is not "absent", and errors name the config's own fields (found by
// probing, 2026-11-30: num_key_value_heads 0 became the heads, errors said kv_heads).
TEST(Loaders, HuggingFaceValuesAndFieldNames) {
  nlohmann::json base = nlohmann::json::parse(testing::slurp(kData + "hf/llama-2-70b.json"));
  for (const auto& [key, value, want] :
       std::vector<std::tuple<std::string, nlohmann::json, std::string>>{
           {"num_key_value_heads", 0,
            "field 'num_key_value_heads': expected a positive integer, "
            "got 0"},
           {"head_dim", 0, "field 'head_dim': expected a positive integer, got 0"},
           {"max_position_embeddings", -5,
            "field 'max_position_embeddings': expected a positive integer, got -5"},
           {"num_key_value_heads", 3,
            "field 'num_key_value_heads' (commscope's kv_heads): expected a positive divisor of "
            "heads (64), got 3"},
           {"vocab_size", 0, "field 'vocab_size' (commscope's vocab): expected a positive"}}) {
    nlohmann::json j = base;
    j[key] = value;
    auto m = model_from_hf_config(j, "c.json");
    ASSERT_FALSE(m.ok()) << key;
    EXPECT_NE(m.error().message.find(want), std::string::npos) << m.error().message;
  }
  // Without head_dim the heads divide the width (33 heads of 8192 floored head_dim in silence).
  nlohmann::json odd = base;
  odd["num_attention_heads"] = 33;
  odd["num_key_value_heads"] = 33;
  auto o = model_from_hf_config(odd, "c.json");
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.error().message.find("field 'num_attention_heads': expected a divisor of "
                                   "hidden_size (8192) when head_dim is not given, got 33"),
            std::string::npos)
      << o.error().message;
  nlohmann::json mine = nlohmann::json::parse(
      testing::slurp(std::string(COMMSCOPE_SOURCE_DIR) + "/presets/models/gpt2-xl.json"));
  mine["heads"] = 33;
  auto g = model_from_json(mine, "m.json");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.error().message.find("field 'heads': expected a divisor of hidden (1600)"),
            std::string::npos)
      << g.error().message;
  // A field left out takes its default; written as 0 it is an error ("ffn": 0 was 4 x hidden).
  for (const char* key :
       {"ffn", "kv_heads", "head_dim", "moe_ffn", "max_positions", "decoder_seq_length"}) {
    nlohmann::json zero = nlohmann::json::parse(
        testing::slurp(std::string(COMMSCOPE_SOURCE_DIR) + "/presets/models/gpt2-xl.json"));
    zero[key] = 0;
    auto z = model_from_json(zero, "m.json");
    ASSERT_FALSE(z.ok()) << key;
    EXPECT_NE(z.error().message.find(fmt::format("field '{}': expected a positive integer", key)),
              std::string::npos)
        << z.error().message;
  }
  nlohmann::json null_inner = base;  // null stays "the default", as GPT-2's own config has it
  null_inner["head_dim"] = nullptr;
  EXPECT_TRUE(model_from_hf_config(null_inner, "c.json").ok());
}

// A config.json that leaves fields out gets transformers' defaults for them, as AutoConfig gives
// them (the config classes at transformers 008e574), with a note naming them. The classes'
// defaults are published models: LlamaConfig() is Llama 2 7B, MixtralConfig() Mixtral 8x7B,
// DeepseekV3Config() DeepSeek-V3 without its MTP module (transformers' model has none), and
// MistralConfig() Mistral 7B, whose count is worked by hand: 32 x (2 x 4096^2 + 2 x 4096 x 1024
// + 3 x 4096 x 14336 + 2 x 4096) + 2 x 32000 x 4096 + 4096 = 7,241,732,096. Qwen3's head_dim
// is 128 unless given, not the width over the heads. A complete file has no note.
// A sliding window is priced as full causal attention, and said (Mistral 7B v0.1's 4096 was read
// past in silence, found by probing, 2026-12-02); a window turned off (Qwen's
// use_sliding_window false) or null is no window.
TEST(Loaders, HuggingFaceSlidingWindowIsSaid) {
  auto notes_of = [](nlohmann::json j) {
    j["model_type"] = "mistral";
    auto m = model_from_hf_config(j, "m.json");
    EXPECT_TRUE(m.ok()) << m.error().message;
    std::string all;
    for (const auto& n : m.ok() ? m->notes : std::vector<std::string>{}) all += n + "\n";
    return all;
  };
  EXPECT_NE(
      notes_of({{"sliding_window", 4096}})
          .find("m.json: sliding_window 4096: attention is priced as full causal attention "
                "(sliding windows and chunks are not modelled), which overstates its FLOPs and "
                "time at "
                "sequences above 4096"),
      std::string::npos);
  EXPECT_EQ(notes_of({{"sliding_window", 4096}, {"use_sliding_window", false}}).find("sliding"),
            std::string::npos);
  EXPECT_EQ(notes_of({{"sliding_window", nullptr}}).find("sliding"), std::string::npos);
}

// A config.json without its model_type is named as one (it was refused as commscope's format,
// "field 'name': expected a value"; found by probing, 2026-12-02).
TEST(Loaders, HuggingFaceConfigWithoutModelTypeIsNamed) {
  auto m = model_from_json(
      nlohmann::json{{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 4096}}, "c.json");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().message,
            "c.json: field 'model_type': expected it in a Hugging Face config.json (the file has "
            "'architectures'), or commscope's model format with 'name' and 'kind', got neither");
}

// Qwen2 (Qwen2 and Qwen2.5) is a Llama with biases on q, k and v alone (Qwen2Attention), which
// its config does not state; model_type qwen2 was refused (found by probing, 2026-12-02).
// Qwen2.5-7B: 7,615,616,512 parameters (its Hugging Face model card's 7.61B; the safetensors
// index's total_size 15,231,233,024 bytes of bf16), by hand: 28 x (3584 x (3584 + 2 x 512) +
// (3584 + 2 x 512) + 3584^2 + 3 x 3584 x 18944 + 2 x 3584) + 2 x 152064 x 3584 + 3584. Megatron's
// --disable-bias-linear --add-qkv-bias on the same sizes is the same model.
TEST(Loaders, Qwen2HasQkvBiases) {
  auto m = load_model(kData + "hf/qwen2.5-7b.json");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_TRUE(m->qkv_bias);
  EXPECT_FALSE(m->bias);
  EXPECT_EQ(count_params(*m).total, 7'615'616'512);
  ModelFlags f;
  f.num_layers = 28, f.hidden_size = 3584, f.ffn_hidden_size = 18944, f.num_attention_heads = 28,
  f.num_query_groups = 4, f.vocab_size = 152064;
  f.group_query_attention = f.swiglu = f.untie_embeddings = f.disable_bias_linear = true;
  f.add_qkv_bias = true;
  f.normalization = NormKind::rmsnorm;
  f.position_embedding = PositionEmbedding::rotary;
  auto flags = apply_model_flags(std::nullopt, f, 4096);
  ASSERT_TRUE(flags.ok()) << flags.error().message;
  EXPECT_EQ(count_params(*flags).total, 7'615'616'512);
  // The model's JSON keeps its QKV biases (characterize writes and reads it back).
  auto back = model_from_json(to_json(*m), "back.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(count_params(*back).total, 7'615'616'512);
}

// Six more model types, each counted against a published figure or an independent one:
// - Pythia-1B (gpt_neox): Biderman et al. 2023, "Pythia", Table 1: 1,011,781,632 parameters,
//   805,736,448 without the embeddings (input and output);
// - Phi-3-mini (phi3): a Llama of 32 blocks of 3072, MLP 8192, 32064 tokens, untied:
//   3,821,079,552, worked by hand (a block 4 x 3072^2 + 3 x 3072 x 8192 + 2 x 3072; the Hub
//   lists 3.82B);
// - Gemma 7B (gemma): Gemma Team 2024, "Gemma", Table 2: 7,751,248,896 non-embedding
//   parameters (its embedding count is of 256,128 rows; the checkpoint has 256,000);
// - Gemma 2 2B (gemma2, four norms a block): Gemma Team 2024, "Gemma 2", Table 2: 2,024,517,888
//   non-embedding parameters;
// - Qwen1.5-MoE-A2.7B (qwen2_moe): the Qwen team's release post, 14.3B in total and 2.7B
//   activated; by hand 24 x (attention 4h^2 + 3h of biases, 60 experts and a shared one four
//   experts wide of 3 x 2048 x 1408 each, router 60h, gate h, 2 norms) + 2 x 151936h + h =
//   14,315,784,192, of which 2,689,173,504 active;
// - Llama 4 Scout (llama4, the text_config of the multimodal config): the preset's count, which
//   was written from the same config by hand, and its model card's 17B active;
// - Gemma 3 1B (gemma3_text: four norms a block and per-head q and k norms) and 4B (gemma3, its
//   text_config): Gemma Team 2025, "Gemma 3 Technical Report", Table 1: 698M and 3,209M
//   non-embedding parameters; 1B's total, 999,885,952, by hand (a block 1152 x (1024 + 2 x 256)
//   + 1024 x 1152 + 3 x 1152 x 6912 + 4 x 1152 + 2 x 256; 262,144 x 1152 tied).
// Falcon (transformers' FalconConfig and FalconDecoderLayer): Falcon-7B's 6,921,720,704
// parameters, the checkpoint's count, and Falcon-40B's worked by hand here. Per block of 7B
// (hidden 4544, 71 heads of 64, one key/value head, one LayerNorm, no linear biases): the norm
// 2 x 4544, QKV 4544 x (71 + 2) x 64, the output 4544^2, the MLP 2 x 4544 x 18176; the tied
// embedding 65024 x 4544 and the final norm 2 x 4544. 40B (hidden 8192, 128 heads, 8 key/value
// heads, ln_attn and ln_mlp): QKV 8192 x (128 + 16) x 64, output 8192^2, MLP 2 x 8192 x 32768,
// two norms 2 x 2 x 8192, 60 blocks; embedding 65024 x 8192, final norm 2 x 8192.
TEST(Loaders, FalconCountsAsPublished) {
  const std::int64_t block7 = 2 * 4544 + 4544LL * 73 * 64 + 4544LL * 4544 + 2 * 4544LL * 18176;
  const std::int64_t block40 =
      2 * 2 * 8192 + 8192LL * 144 * 64 + 8192LL * 8192 + 2 * 8192LL * 32768;
  ASSERT_EQ(32 * block7 + 65024LL * 4544 + 2 * 4544, 6'921'720'704);
  struct Case {
    const char* file;
    std::int64_t total, kv_heads;
    bool shared_norm;
  };
  for (const Case& c :
       {Case{"falcon-7b.json", 6'921'720'704, 1, true},
        Case{"falcon-40b.json", 60 * block40 + 65024LL * 8192 + 2 * 8192, 8, false}}) {
    SCOPED_TRACE(c.file);
    auto m = load_model(kData + "hf/" + c.file);
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(count_params(*m).total, c.total);
    EXPECT_EQ(m->kv_heads, c.kv_heads);
    EXPECT_EQ(m->shared_norm, c.shared_norm);
    EXPECT_FALSE(m->bias);
    EXPECT_FALSE(m->dropout);
    EXPECT_TRUE(m->tied_embeddings);
    EXPECT_EQ(m->position, PositionEmbedding::rotary);
    EXPECT_EQ(m->norm, NormKind::layernorm);
    auto back = model_from_json(to_json(*m), "back.json");
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(count_params(*back).total, c.total);
    EXPECT_EQ(back->shared_norm, c.shared_norm);
  }
  // What is not modelled is refused, one line naming the field.
  for (const auto& [fields, start] : std::vector<std::pair<nlohmann::json, std::string>>{
           {{{"model_type", "falcon"}, {"alibi", true}},
            "f.json: field 'alibi': expected false (ALiBi's position biases are not modelled)"},
           {{{"model_type", "falcon"}, {"activation", "relu"}},
            "f.json: field 'activation': expected a GELU"}}) {
    auto m = model_from_hf_config(fields, "f.json");
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.error().message.rfind(start, 0), 0u) << m.error().message;
  }
}

TEST(Loaders, MoreHuggingFaceTypesCountAsPublished) {
  struct Case {
    const char* file;
    std::int64_t total, without_embeddings, active;
  };
  const Case cases[] = {
      {"pythia-1b.json", 1'011'781'632, 805'736'448, 1'011'781'632},
      {"phi-3-mini-4k.json", 3'821'079'552, 3'821'079'552 - 2 * 32064 * 3072, 3'821'079'552},
      {"gemma-7b.json", 8'537'680'896, 7'751'248'896, 8'537'680'896},
      {"gemma-2-2b.json", 2'614'341'888, 2'024'517'888, 2'614'341'888},
      {"qwen1.5-moe-a2.7b.json", 14'315'784'192, 14'315'784'192 - 2 * 151936 * 2048, 2'689'173'504},
      {"gemma-3-1b.json", 999'885'952, 697'896'064, 999'885'952},
      // the multimodal config (gemma3): its text_config, which leaves heads, key/value heads,
      // head_dim and vocabulary to Gemma3TextConfig's defaults
      {"gemma-3-4b.json", 3'880'263'168, 3'209'010'688, 3'880'263'168},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    auto m = load_model(kData + "hf/" + c.file);
    ASSERT_TRUE(m.ok()) << m.error().message;
    const ParamCount n = count_params(*m);
    EXPECT_EQ(n.total, c.total);
    EXPECT_EQ(n.total - n.embedding - n.lm_head, c.without_embeddings);
    EXPECT_EQ(n.active, c.active);
    // commscope's model JSON keeps what the config said (characterize writes and reads it).
    auto back = model_from_json(to_json(*m), "back.json");
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(count_params(*back).total, c.total);
    EXPECT_EQ(count_params(*back).active, c.active);
  }
  for (const auto& [file, millions] :
       {std::pair{"gemma-3-1b.json", 698.0}, std::pair{"gemma-3-4b.json", 3209.0}}) {
    const ParamCount n = count_params(*load_model(kData + "hf/" + file));
    EXPECT_NEAR(static_cast<double>(n.total - n.embedding - n.lm_head) / 1e6, millions, 0.5)
        << file;
  }
  auto scout = load_model(kData + "hf/llama-4-scout.json");
  ASSERT_TRUE(scout.ok()) << scout.error().message;
  const ParamCount preset = count_params(testing::model("llama4-scout"));
  EXPECT_EQ(count_params(*scout).total, preset.total);
  EXPECT_EQ(count_params(*scout).active, preset.active);
  EXPECT_NEAR(static_cast<double>(preset.active) / 1e9, 17.0, 0.5);
  EXPECT_FALSE(scout->tied_embeddings);  // stated beside text_config, not in it
  std::string notes;
  for (const auto& n : scout->notes) notes += n + "\n";
  EXPECT_NE(notes.find("the vision encoder and projector are not counted"), std::string::npos);
  EXPECT_NE(notes.find("attention_chunk_size 8192"), std::string::npos);
  auto gemma2 = load_model(kData + "hf/gemma-2-2b.json");
  ASSERT_TRUE(gemma2.ok());
  EXPECT_TRUE(gemma2->post_norms);
  EXPECT_EQ(gemma2->mlp, MlpKind::geglu);
  auto pythia = load_model(kData + "hf/pythia-1b.json");
  ASSERT_TRUE(pythia.ok());
  EXPECT_EQ(pythia->position, PositionEmbedding::rotary);
  EXPECT_FALSE(pythia->dropout);
  EXPECT_EQ(pythia->seq_length, 2048);
}

// What these types' configs can say that is not modelled is refused, naming the field.
TEST(Loaders, MoreHuggingFaceTypesRefuseWhatIsNotModelled) {
  auto error_of = [](const std::string& file, const nlohmann::json& patch) {
    nlohmann::json j = nlohmann::json::parse(testing::slurp(kData + "hf/" + file));
    j.merge_patch(patch);
    auto m = model_from_hf_config(j, "c.json");
    EXPECT_FALSE(m.ok()) << file << " " << patch.dump();
    return m.ok() ? std::string() : m.error().message;
  };
  EXPECT_EQ(error_of("qwen1.5-moe-a2.7b.json", {{"shared_expert_intermediate_size", 5000}}),
            "c.json: field 'shared_expert_intermediate_size': expected 0 or a multiple of "
            "moe_intermediate_size 1408, got 5000");
  EXPECT_EQ(error_of("gemma-7b.json", {{"hidden_act", "relu"}}),
            "c.json: field 'hidden_act': expected a GELU (gelu, gelu_pytorch_tanh), got 'relu'");
  EXPECT_EQ(error_of("pythia-1b.json", {{"attention_bias", false}}),
            "c.json: field 'attention_bias': expected true (attention without biases beside a "
            "biased MLP is not modelled), got false");
  EXPECT_EQ(error_of("llama-4-scout.json", {{"text_config", nullptr}}),
            "c.json: field 'text_config': expected the language model's fields (an object), got "
            "nothing (missing)");
  EXPECT_EQ(error_of("llama-4-scout.json", {{"text_config", {{"moe_layers", {0, 2}}}}}),
            "c.json: text_config: field 'moe_layers': expected every "
            "interleave_moe_layer_step-th block (other choices are not modelled), got [0,2]");
  EXPECT_EQ(error_of("llama-4-scout.json", {{"text_config", {{"model_type", "llama"}}}}),
            "c.json: field 'text_config.model_type': expected llama4_text, got \"llama\"");
  // A shared expert of width 0 is none, and no gate.
  nlohmann::json none = nlohmann::json::parse(testing::slurp(kData + "hf/qwen1.5-moe-a2.7b.json"));
  none["shared_expert_intermediate_size"] = 0;
  auto m = model_from_hf_config(none, "c.json");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->shared_experts, 0);
  EXPECT_FALSE(m->shared_expert_gate);
}

TEST(Loaders, HuggingFaceDefaultsAreTransformers) {
  auto bare = [](const char* type) {
    auto m = model_from_hf_config(nlohmann::json{{"model_type", type}}, "c.json");
    EXPECT_TRUE(m.ok()) << type << ": " << m.error().message;
    return m.ok() ? *m : ModelSpec{};
  };
  EXPECT_EQ(count_params(bare("llama")).total, count_params(testing::model("llama2-7b")).total);
  EXPECT_EQ(count_params(bare("mixtral")).total,
            count_params(*load_model(kData + "hf/mixtral-8x7b.json")).total);
  nlohmann::json v3 = nlohmann::json::parse(testing::slurp(kData + "hf/deepseek-v3.json"));
  v3.erase("num_nextn_predict_layers");
  EXPECT_EQ(count_params(bare("deepseek_v3")).total,
            count_params(*model_from_hf_config(v3, "v3.json")).total);
  const ModelSpec mistral = bare("mistral");
  EXPECT_EQ(mistral.kv_heads, 8);
  EXPECT_EQ(count_params(mistral).total, 7241732096);
  ASSERT_EQ(mistral.notes.size(), 1u);
  EXPECT_NE(mistral.notes[0].find("c.json: fields left out take transformers' mistral defaults: "
                                  "num_hidden_layers 32, hidden_size 4096"),
            std::string::npos)
      << mistral.notes[0];
  const nlohmann::json small = {{"model_type", "qwen3"},      {"num_hidden_layers", 28},
                                {"hidden_size", 1024},        {"num_attention_heads", 16},
                                {"num_key_value_heads", 8},   {"intermediate_size", 3072},
                                {"vocab_size", 151936},       {"max_position_embeddings", 40960},
                                {"tie_word_embeddings", true}};
  auto q = model_from_hf_config(small, "q.json");
  ASSERT_TRUE(q.ok()) << q.error().message;
  EXPECT_EQ(q->head_dim, 128);
  ASSERT_EQ(q->notes.size(), 1u);
  EXPECT_NE(q->notes[0].find("defaults: head_dim 128"), std::string::npos) << q->notes[0];
  EXPECT_TRUE(load_model(kData + "hf/llama-2-70b.json")->notes.empty());
  // An explicit null is the heads, as MistralConfig maps None; an error about a value the file
  // left out says it was transformers' default.
  auto null_kv = model_from_hf_config(
      nlohmann::json{{"model_type", "mistral"}, {"num_key_value_heads", nullptr}}, "n.json");
  ASSERT_TRUE(null_kv.ok()) << null_kv.error().message;
  EXPECT_EQ(null_kv->kv_heads, 32);
  auto odd = model_from_hf_config(
      nlohmann::json{{"model_type", "qwen3"}, {"num_attention_heads", 16}}, "o.json");
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.error().message.find("got 32 (left out of the file, transformers' defaults: "),
            std::string::npos)
      << odd.error().message;
  // The note reaches the user as a warning of the scenario.
  PlanInput p = testing::plan(8);
  auto sc = resolve_scenario(*q, *load_system("dgx-h100"), *load_network("ib-ndr-400"), p);
  ASSERT_TRUE(sc.ok()) << sc.error().message;
  EXPECT_EQ(sc->warnings.front(), q->notes[0]);
}

// The attention kernel is transformers' attn_implementation: its default sdpa (PyTorch's
// FlashAttention-2 backend) and the flash kinds are flash, eager the unfused kernel (a
// config.json predicted unfused, 47% slower than its llama3-8b preset); mlp_bias is refused as
// attention_bias is (it was read past); a num_key_value_heads left out, the heads, is named.
TEST(Loaders, HuggingFaceAttentionKernelBiasAndHeads) {
  nlohmann::json base = nlohmann::json::parse(testing::slurp(kData + "hf/llama-2-70b.json"));
  auto kernel = [&](const nlohmann::json& extra) {
    nlohmann::json j = base;
    j.update(extra);
    auto m = model_from_hf_config(j, "c.json");
    EXPECT_TRUE(m.ok()) << m.error().message;
    return m.ok() && m->flash_attention;
  };
  EXPECT_TRUE(kernel(nlohmann::json::object()));
  EXPECT_TRUE(kernel({{"_attn_implementation", "sdpa"}}));
  EXPECT_TRUE(kernel({{"_attn_implementation", "flash_attention_2"}}));
  EXPECT_FALSE(kernel({{"_attn_implementation", "eager"}}));
  EXPECT_FALSE(kernel({{"attn_implementation", "eager"}}));
  nlohmann::json odd = base;
  odd["_attn_implementation"] = "magic";
  auto o = model_from_hf_config(odd, "c.json");
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.error().message.find("field '_attn_implementation'"), std::string::npos);
  // The preset of the same model (Llama 3 8B) and its config.json agree on the kernel.
  EXPECT_TRUE(load_model("llama3-8b")->flash_attention);
  nlohmann::json biased = base;
  biased["mlp_bias"] = true;
  auto b = model_from_hf_config(biased, "c.json");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message.find("field 'mlp_bias': expected false"), std::string::npos)
      << b.error().message;
  nlohmann::json mha = base;
  mha.erase("num_key_value_heads");
  mha.erase("tie_word_embeddings");
  auto h = model_from_hf_config(mha, "c.json");
  ASSERT_TRUE(h.ok()) << h.error().message;
  EXPECT_EQ(h->kv_heads, h->heads);
  ASSERT_EQ(h->notes.size(), 1u);
  EXPECT_NE(h->notes[0].find("num_key_value_heads 64 (the heads)"), std::string::npos)
      << h->notes[0];
  EXPECT_NE(h->notes[0].find("tie_word_embeddings false"), std::string::npos) << h->notes[0];
}

TEST(Loaders, HuggingFaceUnsupportedType) {
  nlohmann::json j = {{"model_type", "mamba"}};
  auto m = model_from_json(j, "config.json");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(
      m.error().message.find(
          "field 'model_type': expected one of "
          "gpt2|gpt_neox|falcon|bert|t5|llama|mistral|phi3|gemma|gemma2|gemma3|gemma3_text|"
          "qwen2|qwen3|mixtral|qwen2_moe|qwen3_moe|deepseek_v2|deepseek_v3|llama4|llama4_text, "
          "got \"mamba\""),
      std::string::npos)
      << m.error().message;
  // null is named as null (it was "got ''")
  auto n = model_from_json(nlohmann::json{{"model_type", nullptr}}, "config.json");
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.error().message.find("llama4_text, got null"), std::string::npos)
      << n.error().message;
}

TEST(Loaders, DeepSpeedConfig) {
  auto p = load_deepspeed_config(kData + "deepspeed/zero3_bf16.json");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(*p->zero, 3);
  EXPECT_EQ(*p->global_batch, 256);
  EXPECT_EQ(*p->micro_batch, 4);
  EXPECT_EQ(*p->grad_accum, 4);
  EXPECT_EQ(*p->precision, Precision::bf16);
  EXPECT_EQ(*p->zero_reduce_bucket, 50000000);
  EXPECT_EQ(*p->zero_allgather_bucket, 200000000);
  EXPECT_TRUE(*p->overlap_grad_reduce);

  // 256 = 4 x 4 x DP: the plan resolves on 16 GPUs and rejects 8.
  ScenarioInput in;
  in.model = "gpt2-large";
  in.system = "dgx-a100-80gb";
  in.plan = *p;
  in.plan.gpus = 16;
  auto sc = resolve_scenario(in);
  ASSERT_TRUE(sc.ok()) << sc.error().message;
  EXPECT_EQ(sc->plan.dp, 16);
  EXPECT_EQ(sc->plan.grad_accum, 4);
  in.plan.gpus = 8;
  auto bad = resolve_scenario(in);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message.rfind("--gradient-accumulation-steps: expected global batch / "
                                      "(micro-batch x DP) = 256 / 32 = 8, got 4",
                                      0),
            0u)
      << bad.error().message;
  // Where the file set the value (as scenario_inputs records it), the error names its field.
  in.file_fields = {{"--gradient-accumulation-steps", "ds.json: gradient_accumulation_steps"}};
  bad = resolve_scenario(in);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message.rfind("ds.json: gradient_accumulation_steps "
                                      "(--gradient-accumulation-steps): expected global batch",
                                      0),
            0u)
      << bad.error().message;
}

// DeepSpeed's own defaults and spellings (found by probing, 2026-11-30): "bfloat16" is the older
// key of "bf16" (it was ignored: fp32), and overlap_comm is on by default at stage 3 only.
TEST(Loaders, DeepSpeedDefaultsAndSpellings) {
  const std::string dir = testing::scratch();
  auto ds = [&](const std::string& text) {
    const std::string f = dir + "ds.json";
    std::ofstream(f) << text;
    return load_deepspeed_config(f);
  };
  auto old = ds(R"({"bfloat16": {"enabled": true}, "zero_optimization": {"stage": 2}})");
  ASSERT_TRUE(old.ok()) << old.error().message;
  EXPECT_EQ(*old->precision, Precision::bf16);
  for (int stage : {0, 1, 2, 3}) {
    SCOPED_TRACE(stage);
    PlanInput p = testing::plan(16);
    p.framework = Framework::deepspeed;
    p.zero = stage;
    EXPECT_EQ(testing::scenario("gpt2-large", "dgx-a100-80gb", p).plan.overlap_grad_reduce,
              stage == 3);
    p.overlap_grad_reduce = true;  // "overlap_comm": true
    EXPECT_TRUE(testing::scenario("gpt2-large", "dgx-a100-80gb", p).plan.overlap_grad_reduce);
  }
  // Commscope's own pattern and the other frameworks keep theirs: on.
  PlanInput own = testing::plan(16);
  own.zero = 1;
  EXPECT_TRUE(testing::scenario("gpt2-large", "dgx-a100-80gb", own).plan.overlap_grad_reduce);
}

TEST(Loaders, DeepSpeedAutoLeavesFieldsUnset) {
  auto p = load_deepspeed_config(kData + "deepspeed/hf_trainer_auto.json");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(*p->zero, 2);
  EXPECT_FALSE(p->global_batch.has_value());
  EXPECT_FALSE(p->micro_batch.has_value());
  EXPECT_FALSE(p->zero_reduce_bucket.has_value());
  EXPECT_EQ(*p->zero_allgather_bucket, 500000000);
  EXPECT_FALSE(*p->overlap_grad_reduce);
  // fp16 "auto" is not a decision: the precision is left to --precision and its default (it
  // was fp32, found by probing, 2026-12-02), and a note says so.
  EXPECT_FALSE(p->precision.has_value());
  std::vector<std::string> notes;
  ASSERT_TRUE(load_deepspeed_config(kData + "deepspeed/hf_trainer_auto.json", &notes).ok());
  EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
    return n.find("bf16.enabled \"auto\"") != std::string::npos;
  }));
  // Nothing enabled and nothing "auto": fp32, as DeepSpeed trains.
  auto off = plan_from_deepspeed(nlohmann::json{{"fp16", {{"enabled", false}}}}, "ds.json");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(*off->precision, Precision::fp32);
}

// DeepSpeed's own readings, from deepspeed/runtime/config.py and zero/config.py (found by
// reading them, 2026-11-30): the legacy `"zero_optimization": true` is stage 1; hpZ's partition
// size 0 is off like 1; communication_data_type lower-cased, then only fp32, fp16 or bf16; of
// "bf16" and "bfloat16" the first present decides (a disabled "bf16" wins).
TEST(Loaders, DeepSpeedReadsAsDeepSpeedDoes) {
  auto ds = [](const nlohmann::json& j) { return plan_from_deepspeed(j, "ds.json"); };
  auto legacy = ds({{"zero_optimization", true}});
  ASSERT_TRUE(legacy.ok()) << legacy.error().message;
  EXPECT_EQ(legacy->zero, 1);
  EXPECT_EQ(ds({{"zero_optimization", false}})->zero, 0);
  auto hpz = ds({{"zero_optimization", {{"stage", 3}, {"zero_hpz_partition_size", 0}}}});
  ASSERT_TRUE(hpz.ok()) << hpz.error().message;
  EXPECT_EQ(hpz->zeropp_hpz, 1);
  EXPECT_FALSE(ds({{"zero_optimization", {{"zero_hpz_partition_size", -1}}}}).ok());
  EXPECT_EQ(ds({{"communication_data_type", "BF16"}})->grad_comm_dtype, DType::bf16);
  for (const char* bad : {"bfp16", "float32", "fp8"}) {
    auto r = ds({{"communication_data_type", bad}});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().message,
              std::string("ds.json: field 'communication_data_type': expected one of "
                          "fp32|fp16|bf16, got '") +
                  bad + "'");
  }
  EXPECT_EQ(ds({{"bf16", {{"enabled", false}}}, {"bfloat16", {{"enabled", true}}}})->precision,
            Precision::fp32);
  EXPECT_EQ(ds({{"bfloat16", {{"enabled", true}}}})->precision, Precision::bf16);
}

// DeepSpeed's 1-bit optimizers (optimizer.type, lower-cased as DeepSpeed compares it) are
// --grad-compression onebit, with a note of what is priced; ZeRO beside them is DeepSpeed's
// assertion. ZeRO-Offload and activation partitioning are read and said, not modelled: one note
// each, and the plan is the one without them.
// NVIDIA Apex AMP in a DeepSpeed config is fp16 mixed precision, said in a note (it was read as
// fp32); beside DeepSpeed's own fp16 or bf16, or with ZeRO, it is refused as DeepSpeed refuses it.
TEST(Loaders, DeepSpeedApexAmpIsFp16) {
  std::vector<std::string> notes;
  auto amp = plan_from_deepspeed(
      {{"amp", {{"enabled", true}, {"opt_level", "O1"}}}, {"train_batch_size", 32}}, "ds.json",
      &notes);
  ASSERT_TRUE(amp.ok()) << amp.error().message;
  EXPECT_EQ(amp->precision, Precision::fp16);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].rfind("amp.enabled (NVIDIA Apex AMP): priced as fp16 mixed precision", 0), 0u);
  auto off = plan_from_deepspeed({{"amp", {{"enabled", false}}}}, "ds.json", nullptr);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->precision, Precision::fp32);
  auto both = plan_from_deepspeed({{"amp", {{"enabled", true}}}, {"bf16", {{"enabled", true}}}},
                                  "ds.json", nullptr);
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.error().message,
            "ds.json: field 'amp.enabled': expected false beside fp16 or bf16 enabled (DeepSpeed "
            "runs one of them), got true");
  auto zero = plan_from_deepspeed(
      {{"amp", {{"enabled", true}}}, {"zero_optimization", {{"stage", 1}}}}, "ds.json", nullptr);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.error().message,
            "ds.json: field 'amp.enabled': expected false with ZeRO (DeepSpeed runs Apex AMP at "
            "ZeRO stage 0 only), got true with zero_optimization.stage 1");
}

TEST(Loaders, DeepSpeedOptimizerAndOffload) {
  std::vector<std::string> notes;
  auto ds = [&](const nlohmann::json& j) {
    notes.clear();
    return plan_from_deepspeed(j, "ds.json", &notes);
  };
  for (const char* type : {"OneBitAdam", "onebitlamb", "ZeroOneAdam"}) {
    auto p = ds({{"optimizer", {{"type", type}, {"params", {{"freeze_step", 100}}}}}});
    ASSERT_TRUE(p.ok()) << p.error().message;
    EXPECT_EQ(p->grad_compression, GradCompression::onebit) << type;
    ASSERT_EQ(notes.size(), 1u) << type;
    EXPECT_EQ(notes[0].rfind(std::string("optimizer.type ") + type +
                                 ": the gradients' all-reduce is priced as 1-bit Adam's",
                             0),
              0u)
        << notes[0];
  }
  for (const char* type : {"AdamW", "Lamb", "MyOwnOptimizer"}) {
    auto p = ds({{"optimizer", {{"type", type}}}});
    ASSERT_TRUE(p.ok()) << p.error().message;
    EXPECT_FALSE(p->grad_compression.has_value()) << type;
    EXPECT_TRUE(notes.empty()) << type;
  }
  auto zero = ds({{"optimizer", {{"type", "OneBitAdam"}}}, {"zero_optimization", {{"stage", 2}}}});
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.error().message,
            "ds.json: field 'optimizer.type': expected ZeRO stage 0 beside OneBitAdam (DeepSpeed "
            "runs its 1-bit optimizers without ZeRO), got zero_optimization.stage 2");

  auto off = ds({{"zero_optimization",
                  {{"stage", 3},
                   {"offload_optimizer", {{"device", "cpu"}, {"pin_memory", true}}},
                   {"offload_param", {{"device", "nvme"}}}}},
                 {"activation_checkpointing", {{"partition_activations", true}}}});
  ASSERT_TRUE(off.ok()) << off.error().message;
  // The optimizer on the host is modelled (ZeRO-Offload); the parameters on NVMe are said.
  EXPECT_EQ(off->offload_optimizer, true);
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_EQ(notes[0].rfind("zero_optimization.offload_param.device nvme: the parameters off the "
                           "GPU (ZeRO-Infinity) are not modelled",
                           0),
            0u)
      << notes[0];
  EXPECT_EQ(notes[1].rfind("activation_checkpointing.partition_activations:", 0), 0u) << notes[1];
  auto plain = ds({{"zero_optimization", {{"stage", 3}}}});
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->offload_optimizer.has_value());
  EXPECT_TRUE(notes.empty());
  // the deprecated spelling; NVMe (said, not modelled); no ZeRO (DeepSpeed leaves it alone)
  auto legacy = ds({{"zero_optimization", {{"stage", 2}, {"cpu_offload", true}}}});
  ASSERT_TRUE(legacy.ok());
  EXPECT_EQ(legacy->offload_optimizer, true);
  EXPECT_TRUE(notes.empty());
  auto nvme =
      ds({{"zero_optimization", {{"stage", 3}, {"offload_optimizer", {{"device", "nvme"}}}}}});
  ASSERT_TRUE(nvme.ok());
  EXPECT_FALSE(nvme->offload_optimizer.has_value());
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].rfind("zero_optimization.offload_optimizer.device nvme: the optimizer states "
                           "and step off the GPU (ZeRO-Infinity) are not modelled",
                           0),
            0u)
      << notes[0];
  auto stage0 =
      ds({{"zero_optimization", {{"stage", 0}, {"offload_optimizer", {{"device", "cpu"}}}}}});
  ASSERT_TRUE(stage0.ok());
  EXPECT_FALSE(stage0->offload_optimizer.has_value());
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0],
            "zero_optimization.offload_optimizer.device cpu: no effect without ZeRO (stage 0)");
  // ZeRO-3's parameters on the host (and the older spelling); below ZeRO-3 DeepSpeed ignores it
  for (const nlohmann::json& z :
       {nlohmann::json{{"stage", 3}, {"offload_param", {{"device", "cpu"}}}},
        nlohmann::json{{"stage", 3}, {"cpu_offload_params", true}}}) {
    auto params = ds({{"zero_optimization", z}});
    ASSERT_TRUE(params.ok()) << params.error().message;
    EXPECT_EQ(params->offload_param, true) << z.dump();
    EXPECT_FALSE(params->offload_optimizer.has_value());
    EXPECT_TRUE(notes.empty()) << z.dump();
  }
  auto stage2 = ds({{"zero_optimization", {{"stage", 2}, {"offload_param", {{"device", "cpu"}}}}}});
  ASSERT_TRUE(stage2.ok());
  EXPECT_FALSE(stage2->offload_param.has_value());
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0],
            "zero_optimization.offload_param.device cpu: no effect below ZeRO-3 (stage 2)");
  // devices that keep them on the GPU
  ASSERT_TRUE(ds({{"zero_optimization",
                   {{"stage", 3},
                    {"offload_optimizer", {{"device", "none"}}},
                    {"offload_param", nlohmann::json::object()}}},
                  {"activation_checkpointing", {{"partition_activations", false}}}})
                  .ok());
  EXPECT_TRUE(notes.empty());
}

TEST(Loaders, DeepSpeedBadStage) {
  nlohmann::json j = {{"zero_optimization", {{"stage", 4}}}};
  auto p = plan_from_deepspeed(j, "ds.json");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().message,
            "ds.json: field 'zero_optimization.stage': expected 0, 1, 2 or 3, got 4");
}

}  // namespace
}  // namespace commscope
