// Parameter counts against published figures and the Megatron-LM closed form.
#include <gtest/gtest.h>

#include "commscope/workload/params.h"
#include "test_util.h"

namespace commscope {
namespace {

using testing::model;

// Published parameter counts. GPT-2, BERT, T5 and Llama: what Hugging Face transformers'
// model.num_parameters() reports for openai-community/gpt2{,-medium,-large,-xl},
// google-bert/bert-{base,large}-uncased (BertModel, pooler included),
// google-t5/t5-{small,base,large,3b} (T5ForConditionalGeneration, shared embedding counted
// once) and meta-llama/Llama-2-{7b,13b,70b}-hf, Meta-Llama-3-{8B,70B}, Llama-3.1-405B, as
// printed on their model cards and in the transformers documentation.
struct Published {
  const char* preset;
  std::int64_t params;
};
constexpr Published kPublished[] = {
    {"gpt2-small", 124439808},
    {"gpt2-medium", 354823168},
    {"gpt2-large", 774030080},
    {"gpt2-xl", 1557611200},
    {"bert-base", 109482240},
    {"bert-large", 335141888},
    {"t5-small", 60506624},
    {"t5-base", 222903552},
    {"t5-large", 737668096},
    {"t5-3b", 2851598336},
    {"llama2-7b", 6738415616},
    {"llama2-13b", 13015864320},
    {"llama2-70b", 68976648192},
    {"llama3-8b", 8030261248},
    {"llama3-70b", 70553706496},
    {"llama3-405b", 405853388800},
    // meta-llama/Llama-3.2-1B (tied embeddings): its config's arithmetic, 128256 x 2048 + 16 x
    // 60,821,504 + 2048; the Hub's safetensors count (1.24B) and Meta's model card (1.23B) round
    // it.
    {"llama3.2-1b", 1235814400},
};

TEST(Params, MatchPublishedCounts) {
  for (const auto& p : kPublished) {
    SCOPED_TRACE(p.preset);
    EXPECT_EQ(count_params(model(p.preset)).total, p.params);
  }
}

// Qwen3's dense models (the presets torchtitan's qwen3 flavors map to) against their Hugging
// Face model cards (Qwen/Qwen3-{0.6B,1.7B,4B,8B,14B,32B}: "Number of Parameters" and "Number of
// Parameters (Non-Embedding)"), to the digits the cards print: half a unit of the last digit.
// The presets leave out the query and key RMSNorms (256 weights a block), below that.
TEST(Params, Qwen3DenseMatchTheModelCards) {
  struct Card {
    const char* preset;
    double total, non_embedding, total_step, non_embedding_step;  // billions; printed digit
  };
  for (const Card c :
       {Card{"qwen3-0.6b", 0.6, 0.44, 0.1, 0.01}, Card{"qwen3-1.7b", 1.7, 1.4, 0.1, 0.1},
        Card{"qwen3-4b", 4.0, 3.6, 0.1, 0.1}, Card{"qwen3-8b", 8.2, 6.95, 0.1, 0.01},
        Card{"qwen3-14b", 14.8, 13.2, 0.1, 0.1}, Card{"qwen3-32b", 32.8, 31.2, 0.1, 0.1}}) {
    SCOPED_TRACE(c.preset);
    const ParamCount n = count_params(model(c.preset));
    EXPECT_NEAR(n.total / 1e9, c.total, c.total_step / 2);
    EXPECT_NEAR((n.total - n.embedding - n.lm_head) / 1e9, c.non_embedding,
                c.non_embedding_step / 2);
    EXPECT_EQ(n.lm_head == 0, model(c.preset).tied_embeddings);  // 0.6B to 4B share it
  }
}

// The Qwen3 presets count the per-head query and key RMSNorms (qk_norm; 2 x head_dim a block),
// so they equal Hugging Face's counts of the checkpoints exactly: 596,049,920, 8,190,735,360 and
// 30,532,122,624 (the Hub's safetensors totals, which docs/presets.md gave beside the counts
// 256 x layers short before 2026-12-02), and 235,093,634,560, worked by hand the same way
// (94 blocks of GQA attention 4096 x (8192 + 2 x 512) + 8192 x 4096, 128 experts of
// 3 x 4096 x 1536, the router, two norms' 2 x 4096 and the per-head norms' 2 x 128; two
// embeddings of 151,936). The same count comes from each model's config.json.
TEST(Params, Qwen3CountsAreHuggingFaces) {
  for (const auto& [preset, total] :
       {std::pair{"qwen3-0.6b", std::int64_t{596'049'920}},
        std::pair{"qwen3-8b", std::int64_t{8'190'735'360}},
        std::pair{"qwen3-30b-a3b", std::int64_t{30'532'122'624}},
        std::pair{"qwen3-235b-a22b", std::int64_t{235'093'634'560}}}) {
    SCOPED_TRACE(preset);
    EXPECT_EQ(count_params(model(preset)).total, total);
  }
  const std::int64_t h = 4096, L = 94, V = 151936;
  const std::int64_t block =
      h * (8192 + 2 * 512) + 8192 * h + 128 * 3 * h * 1536 + 128 * h + 2 * h + 2 * 128;
  EXPECT_EQ(L * block + 2 * V * h + h, 235'093'634'560);
  for (const auto& [file, preset] :
       {std::pair{"qwen3-8b.json", "qwen3-8b"}, std::pair{"qwen3-30b-a3b.json", "qwen3-30b-a3b"}}) {
    auto hf = load_model(std::string(COMMSCOPE_SOURCE_DIR "/tests/data/hf/") + file);
    ASSERT_TRUE(hf.ok()) << hf.error().message;
    EXPECT_TRUE(hf->qk_norm);
    EXPECT_EQ(count_params(*hf).total, count_params(model(preset)).total) << file;
  }
}

// Narayanan et al. 2021 (SC'21), Section 5.1: P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12lh)),
// i.e. 12lh^2 + 13lh + (V+s)h. The formula leaves out the final LayerNorm (2h), which the
// model has; commscope counts it, so the count is the formula plus 2h.
TEST(Params, MegatronClosedForm) {
  const char* presets[] = {"megatron-1.7b",   "megatron-3.6b",   "megatron-7.5b",
                           "megatron-18.4b",  "megatron-39.1b",  "megatron-76.1b",
                           "megatron-145.6b", "megatron-310.1b", "megatron-529.6b",
                           "megatron-1t",     "gpt3-175b"};
  for (const char* name : presets) {
    SCOPED_TRACE(name);
    ModelSpec m = model(name);
    const std::int64_t l = m.layers(), h = m.hidden, V = m.vocab, s = m.seq_length;
    const std::int64_t formula = 12 * l * h * h + 13 * l * h + (V + s) * h;
    ParamCount c = count_params(m);
    EXPECT_EQ(c.total - c.final_norm, formula);
    EXPECT_EQ(c.final_norm, 2 * h);
  }
  // The rounded sizes of Table 1 (in billions).
  EXPECT_NEAR(count_params(model("megatron-1t")).total / 1e9, 1008.0, 0.05);
  EXPECT_NEAR(count_params(model("megatron-18.4b")).total / 1e9, 18.4, 0.05);
  EXPECT_NEAR(count_params(model("megatron-529.6b")).total / 1e9, 529.6, 0.05);
}

// Under TP each rank holds 1/t of the split tensors and all of the replicated ones, so the
// per-rank counts of a stage times t minus (t-1) replicated copies give back the whole.
TEST(Params, TensorParallelShardsAddUp) {
  for (const char* name : {"gpt2-large", "llama2-70b", "t5-3b", "bert-large"}) {
    ModelSpec m = model(name);
    for (int tp : {2, 4, 8}) {
      if (m.heads % tp || m.kv_heads % tp) continue;
      for (int l : {0, m.layers() - 1}) {
        SCOPED_TRACE(std::string(name) + " tp " + std::to_string(tp) + " layer " +
                     std::to_string(l));
        EXPECT_EQ(block_params(m, l, tp) * tp - (tp - 1) * block_replicated_params(m, l),
                  block_params(m, l));
      }
    }
  }
}

// Every rank's parameters, over all ranks of a model-parallel group, add up to the model
// (plus the last stage's copy of a tied embedding under PP, and T5's decoder-embedding stage's).
TEST(Params, RolesAddUpToTheModel) {
  using testing::plan;
  using testing::scenario;
  struct Case {
    const char* model;
    int gpus, tp, pp;
  };
  for (auto c : {Case{"megatron-3.6b", 16, 2, 2}, Case{"llama2-7b", 8, 4, 2},
                 Case{"gpt2-xl", 4, 1, 4}, Case{"t5-large", 8, 1, 4}}) {
    SCOPED_TRACE(c.model);
    Scenario sc = scenario(c.model, "dgx-a100-80gb", plan(c.gpus, c.tp, c.pp, 1, 64));
    Workload w = build_workload(sc);
    std::int64_t sum = 0, replicated = 0;
    for (const Role& r : w.roles) {
      sum += r.params * c.tp;
      for (const Chunk& ch : r.chunks)
        for (int l = ch.first_layer; l < ch.first_layer + ch.layers; ++l)
          replicated += block_replicated_params(sc.model, l) * (c.tp - 1);
    }
    OuterParams o = outer_params(sc.model);
    std::int64_t outer_replicated = (o.position_embedding + o.final_norm + o.pooler) * (c.tp - 1);
    std::int64_t tied_copy = sc.model.tied_embeddings && c.pp > 1 ? o.word_embedding : 0;
    // T5 under PP > 2: the middle stage that runs the decoder embedding holds a copy too.
    if (sc.model.kind == ArchKind::t5 && c.pp > 2) tied_copy += o.word_embedding;
    EXPECT_EQ(sum - replicated - outer_replicated - tied_copy, count_params(sc.model).total);
  }
}

}  // namespace
}  // namespace commscope
