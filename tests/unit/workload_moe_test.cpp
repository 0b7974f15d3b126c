// Mixture of experts, expert parallelism and context parallelism (issue 15): parameter counts
// against the published figures, the MoE all-to-all and the ring-attention exchange against
// their closed forms, expert sharding, the plan checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commscope/cost/collective.h"
#include "commscope/report/describe.h"
#include "commscope/report/table.h"
#include "commscope/sim/simulator.h"
#include "commscope/spec/placement.h"
#include "commscope/workload/params.h"
#include "test_util.h"

namespace commscope {
namespace {

// The one-line error model_from_json gives for j (a test failure where j loads).
std::string model_error(const nlohmann::json& j, const std::string& where) {
  auto m = model_from_json(j, where);
  if (m.ok()) {
    ADD_FAILURE() << where << " loaded; expected an error";
    return "";
  }
  return m.error().message;
}

using testing::named;
using testing::plan;
using testing::scenario;
using testing::scenario_error;

// Published totals and active parameters, within the rounding of the publication (half a unit
// of its last digit).
TEST(Moe, PresetParameterCountsEqualThePublishedFigures) {
  struct Published {
    const char* name;
    double total, total_round, active, active_round;
  };
  // Mixtral 8x7B: Mistral AI's announcement "Mixtral of experts" (2023-12-11): 46.7B total,
  // 12.9B per token. Mixtral 8x22B: Mistral AI's announcement (2024-04-17): 141B total, 39B
  // active. DeepSeek-V3: its technical report (arXiv:2412.19437): 671B total, 37B activated.
  // DeepSeek's README_WEIGHTS.md gives 36.7B activated (embedding and output head included);
  // counted tensor by tensor from config.json, a token passes 37.55B parameters (its 8 routed
  // and 1 shared expert of 58 MoE layers, 3 dense layers, MLA attention, both embeddings), so
  // the active tolerance for DeepSeek-V3 is 0.6B, not the 0.5B of the report's rounding: the
  // 0.85B gap to the README is stated, not hidden.
  // Qwen3-30B-A3B and Qwen3-235B-A22B: their model cards, 30.5B total / 3.3B activated and
  // 235B / 22B. Counted from config.json a token passes 3.353B parameters in the 30B (48 layers
  // of attention, router and 8 experts, both embeddings): 3B above the rounding of "3.3B", so
  // its active tolerance is 0.06B (the card may truncate); the query and key RMSNorms (12,288
  // and 24,064 weights) are not counted. DeepSeek-V2-Lite (torchtitan's deepseek_v3 "16B"): the
  // DeepSeek-V2 paper (arXiv:2405.04434, Appendix B), 15.7B total, 2.4B activated; counted from
  // config.json a token passes 2.661B parameters, both embeddings included (0.210B each): the
  // paper's figure leaves out the input embedding's lookup (2.451B), so the active tolerance is
  // 0.27B, the gap stated.
  const Published all[] = {{"mixtral-8x7b", 46.7e9, 0.05e9, 12.9e9, 0.05e9},
                           {"deepseek-v2-lite", 15.7e9, 0.05e9, 2.4e9, 0.27e9},
                           {"mixtral-8x22b", 141e9, 0.5e9, 39e9, 0.5e9},
                           {"deepseek-v3", 671e9, 0.5e9, 37e9, 0.6e9},
                           {"qwen3-30b-a3b", 30.5e9, 0.05e9, 3.3e9, 0.06e9},
                           {"qwen3-235b-a22b", 235e9, 0.5e9, 22e9, 0.5e9}};
  for (const auto& p : all) {
    SCOPED_TRACE(p.name);
    ModelSpec m = testing::model(p.name);
    ASSERT_TRUE(m.moe());
    ParamCount c = count_params(m);
    EXPECT_NEAR(static_cast<double>(c.total), p.total, p.total_round);
    EXPECT_NEAR(static_cast<double>(c.active), p.active, p.active_round);
    EXPECT_LT(c.active, c.total);
  }
}

// An independent count of Mixtral 8x7B (config.json): per layer 8 experts of 3 x h x f, GQA
// attention h x (h + 2 x 1024) + h x h, the router 8 x h, two RMSNorms; two embeddings.
TEST(Moe, MixtralCountIsTheTensorByTensorSum) {
  ModelSpec m = testing::model("mixtral-8x7b");
  const std::int64_t h = 4096, f = 14336, kv = 1024, V = 32000, L = 32;
  const std::int64_t expert = 3 * h * f;
  const std::int64_t attn = h * (h + 2 * kv) + h * h;
  const std::int64_t layer = 8 * expert + attn + 8 * h + 2 * h;
  const std::int64_t total = L * layer + 2 * V * h + h;
  ParamCount c = count_params(m);
  EXPECT_EQ(c.total, total);
  EXPECT_EQ(c.experts, L * 8 * expert);
  EXPECT_EQ(c.active, total - L * 6 * expert);
}

// Llama 4 Scout and Maverick (text_config of their config.json, torchtitan's llama4 flavors),
// tensor by tensor: GQA attention h x (h + 2 x 1024) + h x h and two RMSNorms in every block; a
// MoE block has E routed experts and one shared of 3 x h x 8192 and the router E x h, a dense
// block (Maverick's even blocks: interleave_moe_layer_step 2, MoE where (l + 1) % 2 == 0) an MLP
// of 3 x h x 16384; two embeddings of 202,048 rows. Meta's model card: 17B active for both
// (17.17B and 17.18B here), 109B and 400B total; those totals are the multimodal checkpoints',
// whose vision encoder and projector the text presets leave out, and nominal (no decimals): the
// text models count 107.77B and 400.71B, so the totals are checked within 1.5% only, the
// tensor-by-tensor sum exactly.
TEST(Moe, Llama4CountIsTheTensorByTensorSum) {
  const std::int64_t h = 5120, kv = 1024, V = 202048, L = 48, ef = 8192, df = 16384;
  const std::int64_t attn = h * (h + 2 * kv) + h * h + 2 * h;
  const std::int64_t expert = 3 * h * ef;
  for (const auto& [name, E, step, card] :
       {std::tuple{"llama4-scout", std::int64_t{16}, 1, 109e9},
        std::tuple{"llama4-maverick", std::int64_t{128}, 2, 400e9}}) {
    SCOPED_TRACE(name);
    const ModelSpec m = testing::model(name);
    std::int64_t total = 2 * V * h + h, routed = 0, moe_blocks = 0;
    for (int l = 0; l < L; ++l) {
      const bool moe = (l + 1) % step == 0;
      EXPECT_EQ(m.moe_layer(l), moe) << l;
      total += attn + (moe ? (E + 1) * expert + E * h : 3 * h * df);
      routed += moe ? E * expert : 0;
      moe_blocks += moe ? 1 : 0;
    }
    const ParamCount c = count_params(m);
    EXPECT_EQ(c.total, total);
    EXPECT_EQ(c.experts, routed);
    EXPECT_EQ(c.active, total - moe_blocks * (E - 1) * expert);  // top-1
    EXPECT_NEAR(static_cast<double>(c.active), 17e9, 0.5e9);
    EXPECT_NEAR(static_cast<double>(c.total), card, 0.015 * card);
  }
}

// Hugging Face config.json of Mixtral, DeepSeek-V3 and Qwen3-30B-A3B (MoE keys:
// num_local_experts, num_experts_per_tok, n_routed_experts, n_shared_experts,
// moe_intermediate_size, first_k_dense_replace; latent attention; num_experts,
// decoder_sparse_step) give the presets' architecture.
TEST(Moe, HuggingFaceConfigsGiveThePresetsCounts) {
  const std::string data = COMMSCOPE_SOURCE_DIR "/tests/data";
  for (auto [file, preset] : {std::pair{"hf/mixtral-8x7b.json", "mixtral-8x7b"},
                              std::pair{"hf/deepseek-v3.json", "deepseek-v3"},
                              std::pair{"hf/qwen3-30b-a3b.json", "qwen3-30b-a3b"}}) {
    SCOPED_TRACE(file);
    auto m = load_model(data + "/" + file);
    ASSERT_TRUE(m.ok()) << m.error().message;
    ModelSpec p = testing::model(preset);
    EXPECT_EQ(m.value().experts, p.experts);
    EXPECT_EQ(m.value().experts_per_token, p.experts_per_token);
    EXPECT_EQ(m.value().shared_experts, p.shared_experts);
    EXPECT_EQ(m.value().first_dense_layers, p.first_dense_layers);
    EXPECT_EQ(m.value().expert_groups, p.expert_groups);  // DeepSeek-V3: n_group 8, topk_group 4
    EXPECT_EQ(m.value().expert_groups_per_token, p.expert_groups_per_token);
    EXPECT_EQ(count_params(m.value()).total, count_params(p).total);
    EXPECT_EQ(count_params(m.value()).active, count_params(p).active);
    EXPECT_EQ(m.value().mtp_layers, p.mtp_layers);  // num_nextn_predict_layers: 1 and 0
    EXPECT_EQ(count_params(m.value()).mtp, count_params(p).mtp);
  }
}

// Qwen3-MoE's decoder_sparse_step is moe_layer_step (a sparse block where (l + 1) % step == 0);
// dense blocks named by index (mlp_only_layers) are refused, naming the field.
TEST(Moe, Qwen3MoeSparseStepAndMlpOnlyLayers) {
  auto j = nlohmann::json::parse(
      testing::slurp(COMMSCOPE_SOURCE_DIR "/tests/data/hf/qwen3-30b-a3b.json"));
  j["decoder_sparse_step"] = 2;
  auto m = model_from_json(j, "config.json");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->moe_layer_step, 2);
  EXPECT_FALSE(m->moe_layer(0));
  EXPECT_TRUE(m->moe_layer(1));
  j["mlp_only_layers"] = {0, 47};
  const std::string e = model_error(j, "config.json");
  EXPECT_NE(e.find("field 'mlp_only_layers': expected [] (dense blocks chosen by "
                   "index are not modelled), got [0,47]"),
            std::string::npos)
      << e;
}

TEST(Moe, BadMoeFieldsNameTheField) {
  nlohmann::json j = {{"name", "x"},           {"kind", "llama"},   {"layers", 4},
                      {"hidden", 256},         {"heads", 4},        {"ffn", 512},
                      {"vocab", 1000},         {"seq_length", 128}, {"experts", 8},
                      {"experts_per_token", 9}};
  std::string e = model_error(j, "m.json");
  EXPECT_NE(e.find("experts_per_token"), std::string::npos) << e;
  j["experts_per_token"] = 2;
  j["first_dense_layers"] = 4;
  e = model_error(j, "m.json");
  EXPECT_NE(e.find("first_dense_layers"), std::string::npos) << e;
  j["first_dense_layers"] = 0;
  j["expert_groups"] = 3;  // not a divisor of the 8 experts
  j["expert_groups_per_token"] = 1;
  e = model_error(j, "m.json");
  EXPECT_NE(e.find("field 'expert_groups': expected a divisor of the 8 experts, "
                   "got 3"),
            std::string::npos)
      << e;
  j["expert_groups"] = 4;
  j["expert_groups_per_token"] = 5;
  e = model_error(j, "m.json");
  EXPECT_NE(e.find("'expert_groups_per_token'"), std::string::npos) << e;
  j.erase("expert_groups");
  j.erase("expert_groups_per_token");
  // MoE every step-th block: a step of 0, or one that leaves no MoE block among the 4
  j["moe_layer_step"] = 0;
  e = model_error(j, "m.json");
  EXPECT_NE(e.find("field 'moe_layer_step': expected a positive integer, got 0"), std::string::npos)
      << e;
  j["moe_layer_step"] = 3;
  j["first_dense_layers"] = 3;  // block 3: (3 + 1) % 3 != 0
  e = model_error(j, "m.json");
  EXPECT_NE(e.find("field 'moe_layer_step': expected a step that leaves a MoE "
                   "block among the 4 layers after the 3 dense ones, got 3"),
            std::string::npos)
      << e;
  j["moe_layer_step"] = 2;  // block 3 is MoE
  auto m = model_from_json(j, "m.json");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_FALSE(m->moe_layer(1));
  EXPECT_TRUE(m->moe_layer(3));
  j.erase("first_dense_layers");
  j.erase("experts");
  e = model_error(j, "m.json");
  EXPECT_NE(e.find("'experts'"), std::string::npos) << e;
}

// Sums over the ops of one list for one layer.
double bytes_named(const OpList& l, std::string_view name, int layer) {
  double sum = 0;
  for (const Op& o : l.ops())
    if (o.kind == OpKind::comm && o.name == name && o.layer == layer) sum += o.wire_bytes();
  return sum;
}

PlanInput moe_plan(int gpus, int tp, int ep, std::int64_t micro = 1) {
  PlanInput p = plan(gpus, tp, 1, micro);
  p.ep = ep;
  if (tp > 1) p.sequence_parallel = true;
  return p;
}

// The MoE all-to-all per layer: tokens x hidden x top-k x (ep - 1)/ep x dtype bytes leave each
// rank for dispatch and again for combine, forward and backward (tokens: the rank's own, b x s,
// divided by TP under sequence parallelism).
TEST(Moe, AllToAllBytesPerLayerAreTheClosedForm) {
  for (auto [tp, ep] : {std::pair{1, 8}, std::pair{1, 4}, std::pair{2, 8}, std::pair{2, 2}}) {
    SCOPED_TRACE(::testing::Message() << "tp " << tp << " ep " << ep);
    const std::int64_t b = 2;
    Scenario sc = scenario("mixtral-8x7b", "dgx-h100", moe_plan(64, tp, ep, b));
    Workload w = build_workload(sc);
    const Chunk& ch = w.roles[0].chunks[0];
    const double tokens = static_cast<double>(b * sc.model.seq_length) / tp;
    const double want = tokens * sc.model.hidden * sc.model.experts_per_token * (ep - 1) / ep * 2;
    for (int layer : {0, 17, 31}) {
      EXPECT_DOUBLE_EQ(bytes_named(ch.forward, "moe_dispatch", layer), want);
      EXPECT_DOUBLE_EQ(bytes_named(ch.forward, "moe_combine", layer), want);
      EXPECT_DOUBLE_EQ(bytes_named(ch.backward, "moe_dispatch_backward", layer), want);
      EXPECT_DOUBLE_EQ(bytes_named(ch.backward, "moe_combine_backward", layer), want);
    }
    for (const Op& o : ch.forward.ops()) {
      if (o.kind == OpKind::comm && o.collective == Collective::all_to_all) {
        EXPECT_EQ(o.group, CommGroup::expert);
        EXPECT_EQ(o.group_size, ep);
      }
    }
  }
}

// A capacity factor cuts the busiest rank's rows, but Megatron-LM's capacity is a ceil: at least
// one token per expert, padded or not (a factor of 1e-9 without padding left 0-byte all-to-alls,
// found by probing, 2026-11-30). Rows are tokens x top-k x min(imbalance, factor) above that.
TEST(Moe, CapacityKeepsOneTokenPerExpert) {
  ParallelPlan p;
  p.moe_capacity_factor = 1e-9;
  EXPECT_DOUBLE_EQ(p.moe_routed_rows(4096, 2, 8), 8.0);
  p.moe_pad_to_capacity = true;
  EXPECT_DOUBLE_EQ(p.moe_routed_rows(4096, 2, 8), 8.0);
  p.moe_pad_to_capacity = false;
  p.moe_capacity_factor = 1.25;
  p.moe_routing_imbalance = 2;
  EXPECT_DOUBLE_EQ(p.moe_routed_rows(4096, 2, 8), 4096 * 2 * 1.25);
  p.moe_routing_imbalance = 1.1;
  EXPECT_DOUBLE_EQ(p.moe_routed_rows(4096, 2, 8), 4096 * 2 * 1.1);
}

// Latent attention under TP 2 with sequence parallelism, as Megatron-Core's MLASelfAttention
// runs it: the duplicated down-projections on the rank's sequence shard, then the query latent,
// the key/value latent and the rotary key gathered (b s x 1536, 512, 64 elements), their
// reduce-scatters in backward, and the up-projections' inputs gathered again for the weight
// gradient (1536 and 512). The hidden state (7168) is gathered by no latent attention (it was,
// before the down-projections; found by a closed-form check, 2026-11-30). Per block: elements
// of the tensor group's all-gathers and reduce-scatters on a dense-MLP layer of DeepSeek-V3
// (layer 0: the MLP's own gather, reduce-scatter and wgrad gather of b s x 7168 beside).
TEST(Moe, LatentAttentionGathersTheLatents) {
  PlanInput p = moe_plan(32, 2, 16);
  p.global_batch = 16;
  const Scenario sc = scenario("deepseek-v3", "dgx-h100", p);
  const ModelSpec& m = sc.model;
  ASSERT_EQ(m.q_lora_rank, 1536);
  ASSERT_EQ(m.kv_lora_rank, 512);
  ASSERT_EQ(m.qk_rope_head_dim, 64);
  const Workload w = build_workload(sc);
  const Chunk& ch = w.roles[0].chunks[0];
  const double T = static_cast<double>(sc.plan.micro_batch * m.seq_length);
  auto elements = [&](const OpList& l, Collective c) {
    double sum = 0;
    for (const Op& o : l.ops())
      if (o.kind == OpKind::comm && o.group == CommGroup::tensor && o.collective == c &&
          o.layer == 0)
        sum += static_cast<double>(o.elements);
    return sum;
  };
  const double latents = static_cast<double>(m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim);
  const double h = static_cast<double>(m.hidden);
  // forward: the three latents' gathers and the MLP's input; the attention's and the MLP's
  // reduce-scatters
  EXPECT_DOUBLE_EQ(elements(ch.forward, Collective::all_gather), T * (latents + h));
  EXPECT_DOUBLE_EQ(elements(ch.forward, Collective::reduce_scatter), T * 2 * h);
  // backward: the latents' and the MLP input's reduce-scatters; the wgrad gathers of the
  // up-projections' inputs and of the MLP's, and the outputs' gathers
  EXPECT_DOUBLE_EQ(elements(ch.backward, Collective::reduce_scatter), T * (latents + h));
  EXPECT_DOUBLE_EQ(elements(ch.backward, Collective::all_gather),
                   T * (m.q_lora_rank + m.kv_lora_rank + h) + T * 2 * h);
}

// The flex dispatcher (--moe-token-dispatcher-type flex, DeepEP/HybridEP): each MoE layer's
// dispatch and combine, forward and backward, carry the rank's tokens once (b x s x h x 2
// bytes, x the load factor), tagged for the cost layer, where the all-to-all carries top-k
// copies; describe's wire bytes are that payload x the copies of spec/placement.h; predict
// prices it below the all-to-all across nodes. Qwen3-30B-A3B, EP 16 on two DGX H100s.
TEST(Moe, FlexDispatchCarriesEachTokenOnce) {
  auto build = [](MoeDispatcher d, std::optional<double> imbalance) {
    PlanInput p = moe_plan(16, 1, 16);
    p.expert_tp = 1;
    p.global_batch = 1024;
    p.moe_dispatcher = d;
    p.moe_routing_imbalance = imbalance;
    return scenario("qwen3-30b-a3b", "dgx-h100", p);
  };
  Scenario flex = build(MoeDispatcher::flex, std::nullopt);
  Scenario a2a = build(MoeDispatcher::alltoall, std::nullopt);
  Workload wf = build_workload(flex), wa = build_workload(a2a);
  const double payload = static_cast<double>(flex.model.seq_length) * flex.model.hidden * 2;
  int seen = 0;
  for (const OpList* l : {&wf.roles[0].chunks[0].forward, &wf.roles[0].chunks[0].backward})
    for (const Op& o : l->ops())
      if (o.kind == OpKind::comm && o.group == CommGroup::expert) {
        EXPECT_EQ(o.collective, Collective::all_to_all);
        EXPECT_EQ(o.tag, OpTag::ep_forwarded);
        EXPECT_DOUBLE_EQ(o.bytes, payload);
        ++seen;
      }
  EXPECT_EQ(seen, 4 * flex.model.decoder_layers);
  for (const Op& o : wa.roles[0].chunks[0].forward.ops())
    if (o.kind == OpKind::comm && o.group == CommGroup::expert) {
      EXPECT_EQ(o.tag, OpTag::none);
      EXPECT_DOUBLE_EQ(o.bytes, payload * flex.model.experts_per_token);
    }
  Workload skew = build_workload(build(MoeDispatcher::flex, 1.5));
  for (const Op& o : skew.roles[0].chunks[0].forward.ops())
    if (o.kind == OpKind::comm && o.group == CommGroup::expert) {
      EXPECT_DOUBLE_EQ(o.bytes, 1.5 * payload);
    }

  const ForwardedCopies c = forwarded_copies(128, 8, place_group(flex, CommGroup::expert));
  bool counted = false;
  for (const CommVolume& v : comm_volume(wf, wf.roles[0]))
    if (v.group == CommGroup::expert) {
      counted = true;
      EXPECT_EQ(v.calls, 4LL * flex.model.decoder_layers * wf.microbatches);
      EXPECT_NEAR(v.wire_bytes / (v.calls * payload * (c.network + c.nvlink)), 1.0, 1e-12);
    }
  EXPECT_TRUE(counted);
  Prediction pf = simulate(wf), pa = simulate(wa);
  EXPECT_LT(pf.mean.by_group[CommGroup::expert].total,
            0.5 * pa.mean.by_group[CommGroup::expert].total);
  EXPECT_LT(pf.iteration_time, pa.iteration_time);
  EXPECT_EQ(to_json(flex.plan).value("moe_token_dispatcher_type", ""), "flex");
  EXPECT_FALSE(to_json(a2a.plan).contains("moe_token_dispatcher_type"));

  // What the flex form does not model is refused by name: a dense model, expert TP, padding.
  PlanInput p = plan(16, 1, 1, 1);
  p.moe_dispatcher = MoeDispatcher::flex;
  EXPECT_NE(scenario_error("llama3-8b", "dgx-h100", p).find("--moe-token-dispatcher-type"),
            std::string::npos);
  p = moe_plan(16, 2, 8);
  p.expert_tp = 2;
  p.moe_dispatcher = MoeDispatcher::flex;
  EXPECT_NE(scenario_error("qwen3-30b-a3b", "dgx-h100", p).find("expert-tensor-parallel"),
            std::string::npos);
  p = moe_plan(16, 1, 16);
  p.moe_capacity_factor = 1.25;
  p.moe_pad_to_capacity = true;
  p.moe_dispatcher = MoeDispatcher::flex;
  EXPECT_NE(scenario_error("qwen3-30b-a3b", "dgx-h100", p).find("--moe-token-dispatcher-type"),
            std::string::npos);
}

// Group-limited routing (DeepSeek-V3's n_group 8, topk_group 4; Megatron-LM's
// --moe-router-num-groups and --moe-router-group-topk): the model's unless the plan says
// otherwise; under the flex dispatcher the network copies follow it (fewer nodes a token), the
// all-to-all does not (a copy per expert whatever the groups); bad values are named.
TEST(Moe, GroupLimitedRoutingNarrowsTheFlexDispatch) {
  auto ds = [](MoeDispatcher d, std::optional<int> groups, std::optional<int> topk) {
    PlanInput p = moe_plan(512, 1, 64);
    p.pp = 8;
    p.expert_tp = 1;
    p.global_batch = 512;
    p.stage_layers = std::vector<int>{7, 8, 8, 8, 8, 8, 8, 6};
    p.moe_dispatcher = d;
    p.moe_router_groups = groups;
    p.moe_router_group_topk = topk;
    return p;
  };
  Scenario grouped = scenario("deepseek-v3", "dgx-h100", ds(MoeDispatcher::flex, {}, {}));
  EXPECT_EQ(grouped.plan.moe_router_groups, 8);
  EXPECT_EQ(grouped.plan.moe_router_group_topk, 4);
  EXPECT_EQ(to_json(grouped.plan).value("moe_router_num_groups", 0), 8);
  Scenario free = scenario("deepseek-v3", "dgx-h100", ds(MoeDispatcher::flex, 1, 1));
  const GroupPlacement g = place_group(grouped, CommGroup::expert);
  ASSERT_EQ(g.nodes, 8);
  const ForwardedCopies a = forwarded_copies(256, 8, g, 8, 4), b = forwarded_copies(256, 8, g);
  EXPECT_LT(a.network, b.network);
  auto expert_time = [](const Scenario& sc) {
    return simulate(build_workload(sc)).mean.by_group[CommGroup::expert].total;
  };
  EXPECT_LT(expert_time(grouped), expert_time(free));
  // The all-to-all: the same with or without the groups.
  EXPECT_DOUBLE_EQ(
      expert_time(scenario("deepseek-v3", "dgx-h100", ds(MoeDispatcher::alltoall, {}, {}))),
      expert_time(scenario("deepseek-v3", "dgx-h100", ds(MoeDispatcher::alltoall, 1, 1))));
  EXPECT_NE(scenario_error("deepseek-v3", "dgx-h100", ds(MoeDispatcher::flex, 3, 1))
                .find("--moe-router-num-groups: expected a divisor of the 256 experts, got 3"),
            std::string::npos);
  EXPECT_NE(scenario_error("deepseek-v3", "dgx-h100", ds(MoeDispatcher::flex, 8, 9))
                .find("--moe-router-group-topk: expected 1 to the 8 groups, got 9"),
            std::string::npos);
  EXPECT_NE(scenario_error("deepseek-v3", "dgx-h100", ds(MoeDispatcher::flex, 256, 1))
                .find("--moe-router-group-topk"),
            std::string::npos);  // one group of one expert cannot hold the top-8
  PlanInput dense = plan(16, 1, 1, 1);
  dense.moe_router_groups = 2;
  EXPECT_NE(scenario_error("llama3-8b", "dgx-h100", dense).find("--moe-router-num-groups"),
            std::string::npos);
}

// DeepSeek-V3's first three layers are dense: no all-to-all there.
TEST(Moe, DenseLeadingLayersHaveNoAllToAll) {
  PlanInput p = moe_plan(512, 1, 64);
  p.pp = 1;
  Scenario sc = scenario("deepseek-v3", "dgx-h100", p);
  Workload w = build_workload(sc);
  const Chunk& ch = w.roles[0].chunks[0];
  for (int layer = 0; layer < 3; ++layer)
    EXPECT_EQ(bytes_named(ch.forward, "moe_dispatch", layer), 0);
  EXPECT_GT(bytes_named(ch.forward, "moe_dispatch", 3), 0);
}

// The busiest rank sets the pace: the all-to-all and the expert GEMMs scale with the routing
// imbalance, cut at the capacity factor when tokens are dropped.
TEST(Moe, ImbalanceAndCapacityScaleTheBusiestRanksLoad) {
  auto dispatch_and_flops = [](std::optional<double> imbalance, std::optional<double> capacity) {
    PlanInput p = moe_plan(64, 1, 8);
    p.moe_routing_imbalance = imbalance;
    p.moe_capacity_factor = capacity;
    Scenario sc = scenario("mixtral-8x7b", "dgx-h100", p);
    Workload w = build_workload(sc);
    const OpList& f = w.roles[0].chunks[0].forward;
    double flops = 0;
    for (const Op& o : f.ops())
      if (o.name == "expert_in" && o.layer == 0) flops += o.flops;
    return std::pair{bytes_named(f, "moe_dispatch", 0), flops};
  };
  auto even = dispatch_and_flops(std::nullopt, std::nullopt);
  auto skewed = dispatch_and_flops(1.5, std::nullopt);
  auto capped = dispatch_and_flops(1.5, 1.25);
  EXPECT_NEAR(skewed.first / even.first, 1.5, 1e-9);
  EXPECT_NEAR(skewed.second / even.second, 1.5, 1e-9);
  EXPECT_NEAR(capped.first / even.first, 1.25, 1e-9);
  EXPECT_NEAR(capped.second / even.second, 1.25, 1e-9);
}

// Padded to the capacity (--moe-pad-expert-input-to-capacity): every expert takes
// ceil(n k / E x factor) rows of each rank's n tokens whatever the routing (Megatron-LM's
// get_capacity), so the dispatch carries E x that x h elements and the imbalance no longer
// matters; above n tokens, every token goes to every expert (E x n).
TEST(Moe, PaddedToCapacityIsExpertsTimesTheCapacity) {
  auto dispatch = [](double capacity, std::optional<double> imbalance) {
    PlanInput p = moe_plan(64, 1, 8, 2);
    p.moe_capacity_factor = capacity;
    p.moe_pad_to_capacity = true;
    p.moe_routing_imbalance = imbalance;
    Scenario sc = scenario("mixtral-8x7b", "dgx-h100", p);
    Workload w = build_workload(sc);
    const double n = 2.0 * sc.model.seq_length, E = sc.model.experts,
                 k = sc.model.experts_per_token, h = sc.model.hidden;
    const double rows = E * std::min(std::ceil(n * k / E * capacity), n);
    EXPECT_DOUBLE_EQ(bytes_named(w.roles[0].chunks[0].forward, "moe_dispatch", 0),
                     rows * h * 7.0 / 8 * 2)
        << capacity;
    return rows;
  };
  const double n = 2.0 * 4096;                    // Mixtral's sequence, micro-batch 2
  EXPECT_EQ(dispatch(1.0, std::nullopt), n * 2);  // the mean: n k
  EXPECT_EQ(dispatch(1.0, 1.5), n * 2);           // the imbalance is padded away
  EXPECT_EQ(dispatch(1.3, std::nullopt), 8 * std::ceil(n * 2 / 8 * 1.3));
  EXPECT_EQ(dispatch(5.0, std::nullopt), 8 * n);  // above the tokens: all of them
  PlanInput p = moe_plan(64, 1, 8);
  p.moe_pad_to_capacity = true;  // Megatron-LM asserts a capacity factor with it
  EXPECT_EQ(scenario_error("mixtral-8x7b", "dgx-h100", p),
            "--moe-pad-expert-input-to-capacity: expected a --moe-expert-capacity-factor with "
            "it, got none");
}

// --moe-aux-loss-coeff (Megatron-LM's) is accepted for a model with experts and changes no op
// (the trainer adds the loss; its TP x CP all-reduce of E counts is not modelled), appears in
// the plan's JSON, and is refused for a dense model or outside 0 to 1000.
TEST(Moe, AuxLossCoefficientIsAcceptedAndChangesNoOp) {
  PlanInput p = moe_plan(64, 1, 8);
  const Workload plain = build_workload(scenario("mixtral-8x7b", "dgx-h100", p));
  p.moe_aux_loss_coeff = 0.01;
  const Scenario sc = scenario("mixtral-8x7b", "dgx-h100", p);
  EXPECT_EQ(to_json(sc.plan).at("moe_aux_loss_coeff"), 0.01);
  const Workload w = build_workload(sc);
  ASSERT_EQ(w.roles.size(), plain.roles.size());
  const OpList &a = w.roles[0].chunks[0].forward, &b = plain.roles[0].chunks[0].forward;
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].bytes, b[i].bytes);
    EXPECT_EQ(a[i].flops, b[i].flops);
  }
  EXPECT_FALSE(to_json(scenario("mixtral-8x7b", "dgx-h100", moe_plan(64, 1, 8)).plan)
                   .contains("moe_aux_loss_coeff"));
  PlanInput dense = plan(64, 1, 1, 1);
  dense.moe_aux_loss_coeff = 0.01;
  EXPECT_EQ(scenario_error("llama3-8b", "dgx-h100", dense),
            "--moe-aux-loss-coeff: expected 0 for llama3-8b, which has no experts, got 0.01");
  p.moe_aux_loss_coeff = 2000;
  EXPECT_NE(scenario_error("mixtral-8x7b", "dgx-h100", p).find("expected 0 to 1000"),
            std::string::npos);
}

// Experts split over EP x expert TP: the rank holds 1/(ep x etp) of each MoE layer's experts,
// and its backward completes exactly the gradients of what it holds.
TEST(Moe, ExpertsAreShardedOverExpertParallelRanks) {
  for (auto [tp, ep, etp] : {std::tuple{1, 8, 1}, std::tuple{2, 4, 1}, std::tuple{2, 4, 2}}) {
    SCOPED_TRACE(::testing::Message() << tp << " " << ep << " " << etp);
    PlanInput p = moe_plan(64, tp, ep);
    p.expert_tp = etp;
    Scenario sc = scenario("mixtral-8x22b", "dgx-h100", p);
    Workload w = build_workload(sc);
    const Role& r = w.roles[0];
    const ParamCount c = count_params(sc.model);
    EXPECT_EQ(r.expert_params, c.experts / (ep * etp));
    std::int64_t grads = 0;
    for (const Chunk& ch : r.chunks)
      for (const Op& o : ch.backward.ops()) grads += o.grad_params;
    EXPECT_EQ(grads, r.params);
    // Expert gradients are reduced over the expert-data-parallel group: DP x TP / (EP x ETP).
    const int edp = 64 / (ep * etp);
    double expert_grad = 0, dense_grad = 0;
    for (const Chunk& ch : r.chunks)
      for (const Op& o : ch.backward.ops()) {
        if (o.group == CommGroup::expert_data) {
          EXPECT_EQ(o.group_size, edp);
          expert_grad += o.elements;
        }
        if (o.group == CommGroup::data && o.tag == OpTag::grad_bucket) dense_grad += o.elements;
      }
    EXPECT_EQ(expert_grad, static_cast<double>(r.expert_params));
    EXPECT_EQ(dense_grad, static_cast<double>(r.params - r.expert_params));
    // Memory: the experts' weights are per rank, so more EP means less memory.
    MemoryBreakdown mem = memory_per_rank(w, r);
    EXPECT_NEAR(mem.weights.value(), 2.0 * static_cast<double>(r.params), 1.0);
  }
}

// predict prices the all-to-all (the expert group's time appears in the breakdown), and a skewed
// routing costs more of it.
TEST(Moe, PredictPricesTheAllToAll) {
  Scenario sc = scenario("mixtral-8x7b", "dgx-h100", moe_plan(64, 1, 8, 1));
  Prediction pr = simulate(build_workload(sc));
  EXPECT_GT(pr.mean.by_group[CommGroup::expert].total, 0);
  PlanInput p = moe_plan(64, 1, 8, 1);
  p.moe_routing_imbalance = 2.0;
  Prediction skew = simulate(build_workload(scenario("mixtral-8x7b", "dgx-h100", p)));
  EXPECT_GT(skew.mean.by_group[CommGroup::expert].total, pr.mean.by_group[CommGroup::expert].total);
  EXPECT_GT(skew.iteration_time, pr.iteration_time);
}

// Ring attention (Megatron-LM --context-parallel-size): per layer and micro-batch, each rank
// passes its KV chunk (K and V of b x s/CP tokens, kv_heads x head_dim / TP channels each) CP - 1
// times forward; backward passes the KV chunk and its gradient, twice that.
TEST(ContextParallel, RingExchangeBytesAreTheClosedForm) {
  for (auto [tp, cp] : {std::pair{1, 2}, std::pair{1, 4}, std::pair{2, 4}, std::pair{8, 2}}) {
    SCOPED_TRACE(::testing::Message() << "tp " << tp << " cp " << cp);
    PlanInput p = plan(64, tp, 1, 1);
    p.cp = cp;
    Scenario sc = scenario("llama3-8b", "dgx-h100", p);
    EXPECT_EQ(sc.plan.dp * sc.plan.tp * sc.plan.cp, 64);
    Workload w = build_workload(sc);
    const Chunk& ch = w.roles[0].chunks[0];
    const double s = static_cast<double>(sc.model.seq_length);
    const double chunk = 2.0 * 1 * (s / cp) * sc.model.kv_dim() / tp * 2 /*bf16*/;
    for (int layer : {0, 31}) {
      EXPECT_DOUBLE_EQ(bytes_named(ch.forward, "cp_kv_send", layer), (cp - 1) * chunk);
      EXPECT_DOUBLE_EQ(bytes_named(ch.backward, "cp_kv_dkv_send", layer), 2 * (cp - 1) * chunk);
    }
    // Attention FLOPs per rank: 1/CP of the whole sequence's; the GEMMs see s/CP tokens.
    PlanInput q = plan(64 / cp, tp, 1, 1);
    Workload whole = build_workload(scenario("llama3-8b", "dgx-h100", q));
    auto flops = [](const Workload& x, std::string_view name) {
      for (const Op& o : x.roles[0].chunks[0].forward.ops())
        if (o.name == name) return o.flops;
      return 0.0;
    };
    // (llama3-8b trains with FlashAttention: its one fused kernel carries the attention FLOPs)
    EXPECT_GT(flops(whole, "flash_attn"), 0.0);
    EXPECT_NEAR(flops(w, "flash_attn") * cp / flops(whole, "flash_attn"), 1.0, 1e-12);
    EXPECT_NEAR(flops(w, "qkv") * cp / flops(whole, "qkv"), 1.0, 1e-12);
    // Dense gradients are reduced over DP x CP.
    for (const Op& o : ch.backward.ops()) {
      if (o.kind == OpKind::comm && o.group == CommGroup::data) {
        EXPECT_EQ(o.group_size, sc.plan.dp * cp);
      }
    }
  }
}

// The ring passes its chunks one step at a time, each step a send of its own with its own
// latency, as Transformer Engine's AttnFuncWithCPAndKVP2P issues them: CP - 1 forward, CP
// backward (K,V alone first, K,V with dK,dV between, dK,dV alone last). A pass's time is its
// messages' times: m x t(bytes / m), against a one-message pass (m - 1) hops more, the hop
// taken as the intercept 2 t(x) - t(2 x) of the send's time, which is affine in its size here.
TEST(ContextParallel, RingStepsAreMessagesWithTheirOwnLatency) {
  for (int cp : {2, 4, 8}) {
    SCOPED_TRACE(::testing::Message() << "cp " << cp);
    PlanInput p = plan(64, 1, 1, 1);
    p.cp = cp;
    p.global_batch = 64 / cp;
    Scenario sc = scenario("llama3-8b", "dgx-h100", p);
    Workload w = build_workload(sc);
    const Chunk& ch = w.roles[0].chunks[0];
    double ring_s = 0;
    for (const auto& [list, name, want] :
         {std::tuple{&ch.forward, "cp_kv_send", cp - 1}, {&ch.backward, "cp_kv_dkv_send", cp}}) {
      const std::vector<Op> ops = named(*list, name);
      ASSERT_EQ(static_cast<int>(ops.size()), sc.model.layers());
      for (const Op& o : ops) EXPECT_EQ(o.messages, want);
      const Op& op = ops[0];
      Op one = op, part = op, twice = op;
      one.messages = part.messages = twice.messages = 1;
      part.bytes = op.bytes / want;
      twice.bytes = 2 * part.bytes;
      const double t = comm_time(op, sc).value();
      EXPECT_NEAR(t, want * comm_time(part, sc).value(), 1e-12 * t);
      const double hop = 2 * comm_time(part, sc).value() - comm_time(twice, sc).value();
      EXPECT_GT(hop, 0.0);
      EXPECT_NEAR(t - comm_time(one, sc).value(), (want - 1) * hop, 1e-9 * t);
      ring_s += t * sc.model.layers();
    }
    // describe's pattern says each call's messages (JSON: messages_per_call).
    int seen = 0;
    for (const PatternCollective& c : comm_pattern(w, w.roles[0]))
      if (c.name == "cp_kv_send" || c.name == "cp_kv_dkv_send") {
        EXPECT_EQ(c.messages, c.name == "cp_kv_send" ? cp - 1 : cp) << c.name;
        ++seen;
      }
    EXPECT_EQ(seen, 2);
    PlanInput mp = p;  // describe prints the pattern of a framework's plan
    mp.framework = Framework::megatron;
    const Workload wm = build_workload(scenario("llama3-8b", "dgx-h100", mp));
    const nlohmann::json d = describe_json(wm, describe(wm));
    seen = 0;
    for (const auto& c : d["pattern"])
      if (c["name"] == "cp_kv_send" || c["name"] == "cp_kv_dkv_send") {
        const int want = c["name"] == "cp_kv_send" ? cp - 1 : cp;
        EXPECT_EQ(c.value("messages_per_call", 1), want) << c.dump();
        ++seen;
      }
    EXPECT_EQ(seen, 2);
    // The simulator prices the ops so: the context group's communication over one micro-batch
    // (no recompute, one stage) is the layers' passes.
    const Prediction pr = simulate(w);
    EXPECT_NEAR(pr.mean.by_group[CommGroup::context].total, ring_s, 1e-9 * ring_s);
  }
}

// The forward ring's pass and the FlashAttention core beside it (Transformer Engine's forward
// loop: a kernel a block, the last block's after the last message; Sim's
// ForwardRingsLastStepWaitsForItsLastMessage times it): each forward pass, and its replay under
// core-attention recompute, is tagged cp_ring_steps and the next compute op, its layer's
// flash_attn, depends on it; backward's passes are not tagged (each of their messages overlaps
// a step, awaited after the core as before), nor are the standard core's (three ops, which TE
// does not run under CP: awaited after the core). Hierarchical CP: the ring's r - 1 messages.
TEST(ContextParallel, OnlyTheFlashCoresLastStepWaitsForTheForwardRing) {
  struct Case {
    AttentionKernel kernel;
    bool hierarchical, recompute;
  };
  for (const Case c :
       {Case{AttentionKernel::flash, false, false}, Case{AttentionKernel::flash, true, false},
        Case{AttentionKernel::flash, false, true}, Case{AttentionKernel::standard, false, false}}) {
    SCOPED_TRACE(::testing::Message() << to_string(c.kernel) << " hierarchical " << c.hierarchical
                                      << " recompute " << c.recompute);
    PlanInput p = plan(64, 1, 1, 1);
    p.cp = 8;
    p.attention = c.kernel;
    p.framework = Framework::megatron;
    if (c.hierarchical) {
      p.cp_comm_type = CpCommType::a2a_p2p;
      p.hierarchical_cp_sizes = {2, 4};
    }
    if (c.recompute) p.recompute = Recompute::selective;
    const Workload w = build_workload(scenario("llama3-8b", "dgx-h100", p));
    const Chunk& ch = w.roles[0].chunks[0];
    const bool flash = c.kernel == AttentionKernel::flash;
    int tagged = 0;
    for (const OpList* list : {&ch.forward, &ch.backward})
      for (std::uint32_t k = 0; k < list->size(); ++k) {
        const Op& op = (*list)[k];
        if (op.name == "cp_kv_dkv_send") EXPECT_EQ(op.tag, OpTag::none);
        if (op.name != "cp_kv_send") continue;
        EXPECT_EQ(op.messages, c.hierarchical ? 3 : 7);
        ASSERT_EQ(op.tag, flash ? OpTag::cp_ring_steps : OpTag::none);
        if (!flash) continue;
        ++tagged;
        std::uint32_t next = k + 1;
        while (next < list->size() && (*list)[next].kind != OpKind::compute) ++next;
        ASSERT_LT(next, list->size());
        EXPECT_EQ((*list)[next].name, "flash_attn");
        EXPECT_EQ((*list)[next].layer, op.layer);
        const auto deps = list->deps_of(next);
        EXPECT_NE(std::find(deps.begin(), deps.end(), k), deps.end());
      }
    EXPECT_EQ(tagged, flash ? w.scenario.model.layers() * (c.recompute ? 2 : 1) : 0);
  }
}

// All-gather CP (--cp-comm-type all_gather; Transformer Engine's AttnFuncWithCPAndKVAllGather):
// per layer and micro-batch the forward all-gathers K and V of the whole sequence (CP chunks),
// the backward gathers them again and reduce-scatters dK and dV, each counted as NCCL counts
// (the gathered buffer). On the wire each rank sends (CP - 1) / CP of each, so the three move
// exactly the ring's 3 (CP - 1) chunks; and they wait on the chain, so the iteration is no
// shorter than with the ring, which overlaps its exchange with the attention core.
TEST(ContextParallel, AllGatherBytesAreTheClosedFormAndTheRingsOnTheWire) {
  for (auto [tp, cp] : {std::pair{1, 2}, std::pair{2, 4}, std::pair{8, 2}}) {
    SCOPED_TRACE(::testing::Message() << "tp " << tp << " cp " << cp);
    PlanInput p = plan(64, tp, 1, 1);
    p.cp = cp;
    Scenario ring = scenario("llama3-8b", "dgx-h100", p);
    p.cp_comm_type = CpCommType::all_gather;
    Scenario sc = scenario("llama3-8b", "dgx-h100", p);
    EXPECT_EQ(sc.plan.cp_comm_type, CpCommType::all_gather);
    Workload w = build_workload(sc), wr = build_workload(ring);
    const Chunk& ch = w.roles[0].chunks[0];
    const double s = static_cast<double>(sc.model.seq_length);
    const double chunk = 2.0 * 1 * (s / cp) * sc.model.kv_dim() / tp * 2 /*bf16*/;
    auto counted = [](const OpList& l, std::string_view name, int layer) {
      double sum = 0;
      for (const Op& o : l.ops())
        if (o.kind == OpKind::comm && o.name == name && o.layer == layer) sum += o.bytes;
      return sum;
    };
    for (int layer : {0, 31}) {
      EXPECT_DOUBLE_EQ(counted(ch.forward, "cp_kv_all_gather", layer), cp * chunk);
      EXPECT_DOUBLE_EQ(counted(ch.backward, "cp_kv_all_gather", layer), cp * chunk);
      EXPECT_DOUBLE_EQ(counted(ch.backward, "cp_dkv_reduce_scatter", layer), cp * chunk);
      // On the wire (bytes_named): (CP - 1) / CP of each.
      EXPECT_DOUBLE_EQ(bytes_named(ch.forward, "cp_kv_all_gather", layer), (cp - 1) * chunk);
      EXPECT_DOUBLE_EQ(bytes_named(ch.backward, "cp_dkv_reduce_scatter", layer), (cp - 1) * chunk);
      EXPECT_DOUBLE_EQ(bytes_named(ch.forward, "cp_kv_send", layer), 0.0);
    }
    double wire = 0, ring_wire = 0;
    for (const CommVolume& v : comm_volume(w, w.roles[0]))
      if (v.group == CommGroup::context) wire += v.wire_bytes;
    for (const CommVolume& v : comm_volume(wr, wr.roles[0]))
      if (v.group == CommGroup::context) ring_wire += v.wire_bytes;
    EXPECT_GT(wire, 0.0);
    EXPECT_NEAR(wire / ring_wire, 1.0, 1e-12);
    EXPECT_GE(simulate(w).iteration_time, simulate(wr).iteration_time);
  }
  PlanInput p = plan(64, 1, 1, 1);
  p.cp_comm_type = CpCommType::all_gather;  // without CP: nothing to exchange, nothing changes
  EXPECT_DOUBLE_EQ(simulate(build_workload(scenario("llama3-8b", "dgx-h100", p))).iteration_time,
                   simulate(build_workload(scenario("llama3-8b", "dgx-h100", plan(64, 1, 1, 1))))
                       .iteration_time);
}

// All-to-all CP (--cp-comm-type a2a; Transformer Engine's AttnFuncWithCPAndQKVOA2A, and
// DeepSpeed-Ulysses, Megatron-DeepSpeed's --ds-sequence-parallel-size): per layer and
// micro-batch each rank sends (CP - 1)/CP of its Q, K and V (b x s/CP tokens, (q + 2 kv) / TP
// channels) before the attention core and of the core's output (q / TP channels) after it;
// backward the same for dO and dQ, dK, dV. For multi-head attention at TP 1 the forward's four
// all-to-alls move 4 N h / P elements per rank as (P - 1) / P tends to 1: Jacobs et al. 2023,
// "DeepSpeed Ulysses", sec. 3.2 (per-link volume 4Nh/P, N the sequence, P the SP degree). The
// attention core's FLOPs and the activation memory are the ring's (1/CP of the core either way:
// the whole sequence for 1/CP of the heads, or 1/CP of the queries for all of them).
TEST(ContextParallel, AllToAllBytesAreTheUlyssesClosedForm) {
  auto forward_a2a = [](const Chunk& ch, int layer) {
    return bytes_named(ch.forward, "cp_qkv_all_to_all", layer) +
           bytes_named(ch.forward, "cp_out_all_to_all", layer);
  };
  for (auto [model, tp, cp] :
       {std::tuple{"llama3-8b", 1, 2}, std::tuple{"llama3-8b", 1, 8}, std::tuple{"llama3-8b", 2, 4},
        std::tuple{"llama2-7b", 1, 4}, std::tuple{"llama2-7b", 4, 8}}) {
    SCOPED_TRACE(::testing::Message() << model << " tp " << tp << " cp " << cp);
    PlanInput p = plan(64, tp, 1, 1);
    p.cp = cp;
    Scenario ring = scenario(model, "dgx-h100", p);
    p.cp_comm_type = CpCommType::a2a;
    Scenario sc = scenario(model, "dgx-h100", p);
    const ModelSpec& m = sc.model;
    Workload w = build_workload(sc), wr = build_workload(ring);
    const Chunk& ch = w.roles[0].chunks[0];
    const double tokens = static_cast<double>(m.seq_length) / cp;  // micro-batch 1
    const double share = (cp - 1.0) / cp, bf16 = 2;
    const double qkv = share * tokens * static_cast<double>(m.q_dim() + 2 * m.kv_dim()) / tp * bf16;
    const double out = share * tokens * static_cast<double>(m.q_dim()) / tp * bf16;
    for (int layer : {0, static_cast<int>(m.layers()) - 1}) {
      EXPECT_DOUBLE_EQ(bytes_named(ch.forward, "cp_qkv_all_to_all", layer), qkv);
      EXPECT_DOUBLE_EQ(bytes_named(ch.forward, "cp_out_all_to_all", layer), out);
      EXPECT_DOUBLE_EQ(bytes_named(ch.backward, "cp_dout_all_to_all", layer), out);
      EXPECT_DOUBLE_EQ(bytes_named(ch.backward, "cp_dqkv_all_to_all", layer), qkv);
      EXPECT_DOUBLE_EQ(bytes_named(ch.forward, "cp_kv_send", layer), 0.0);
    }
    if (m.kv_heads == m.heads && tp == 1) {  // Ulysses' 4 N h / P, times (P - 1) / P
      EXPECT_DOUBLE_EQ(forward_a2a(ch, 0), 4.0 * static_cast<double>(m.seq_length) *
                                               static_cast<double>(m.hidden) / cp * share * bf16);
    }
    auto core = [](const Workload& x) {  // FlashAttention's kernel, or s x s attention's
      double sum = 0;
      for (const Op& o : x.roles[0].chunks[0].forward.ops())
        if (o.name == "flash_attn" || o.name == "attn_scores" || o.name == "attn_values")
          sum += o.flops;
      return sum;
    };
    EXPECT_GT(core(w), 0.0);
    EXPECT_DOUBLE_EQ(core(w), core(wr));
    EXPECT_DOUBLE_EQ(memory_per_rank(w, w.roles[0]).activations.value(),
                     memory_per_rank(wr, wr.roles[0]).activations.value());
    for (const Op& o : ch.forward.ops())
      if (o.kind == OpKind::comm && o.group == CommGroup::context) {
        EXPECT_EQ(o.collective, Collective::all_to_all) << o.name;
        EXPECT_EQ(o.group_size, cp);
      }
  }
  // DeepSeek-V3's latent attention: Q and K of qk = 192 channels a head, V and the output 128.
  PlanInput p = moe_plan(64, 2, 8);
  p.cp = 2;
  p.cp_comm_type = CpCommType::a2a;
  p.global_batch = 64;
  const Scenario mla = scenario("deepseek-v3", "dgx-h100", p);
  const ModelSpec& m = mla.model;
  const Workload wm = build_workload(mla);
  const Chunk& ch = wm.roles[0].chunks[0];
  const double heads = static_cast<double>(m.heads) / 2, tokens = m.seq_length / 2.0;
  const double qk = static_cast<double>(m.qk_nope_head_dim + m.qk_rope_head_dim),
               v = static_cast<double>(m.v_head_dim);
  EXPECT_DOUBLE_EQ(bytes_named(ch.forward, "cp_qkv_all_to_all", 0),
                   0.5 * tokens * heads * (2 * qk + v) * 2);
  EXPECT_DOUBLE_EQ(bytes_named(ch.forward, "cp_out_all_to_all", 0), 0.5 * tokens * heads * v * 2);
  // Whole heads per CP rank: CP must divide the query and key-value heads of a TP rank.
  p = plan(64, 2, 1, 1);
  p.cp = 8;
  p.cp_comm_type = CpCommType::a2a;
  EXPECT_NE(scenario_error("llama3-8b", "dgx-h100", p)
                .find("--context-parallel-size: expected a divisor of the key-value heads per TP "
                      "rank, 4 (--cp-comm-type a2a scatters the heads over the CP ranks), got 8"),
            std::string::npos);
  p.cp = 2;  // 16 query and 4 key-value heads a TP rank: 8 and 2 a CP rank
  EXPECT_EQ(scenario("llama3-8b", "dgx-h100", p).plan.cp, 2);
  // Megatron-Core cuts the sequence in 2 x CP chunks whatever the exchange; DeepSpeed-Ulysses
  // in CP contiguous ones: a sequence of 4 x 1025 tokens runs CP 4 under DeepSpeed only.
  auto a2a_plan = [](int gpus, int cp) {  // sequence 4,100 = 4 x 1025
    PlanInput q = plan(gpus, 1, 1, 1);
    q.cp = cp;
    q.cp_comm_type = CpCommType::a2a;
    q.seq_length = 4100;
    return q;
  };
  p = a2a_plan(16, 4);
  EXPECT_NE(scenario_error("llama3-8b", "dgx-h100", p)
                .find("--context-parallel-size: expected 2 x CP to divide the sequence length "
                      "4100"),
            std::string::npos);
  p.framework = Framework::deepspeed;
  const Scenario uly = scenario("llama3-8b", "dgx-h100", p);
  EXPECT_EQ(uly.plan.cp, 4);
  EXPECT_DOUBLE_EQ(
      bytes_named(build_workload(uly).roles[0].chunks[0].forward, "cp_out_all_to_all", 0),
      0.75 * 1025 * static_cast<double>(uly.model.q_dim()) * 2);
  PlanInput q = a2a_plan(24, 3);
  q.framework = Framework::deepspeed;
  EXPECT_NE(scenario_error("llama2-7b", "dgx-h100", q)
                .find("--context-parallel-size: expected CP to divide the sequence length 4100 "
                      "(DeepSpeed-Ulysses' contiguous chunks), got 3"),
            std::string::npos);
}

// Selective recompute of the core attention replays the CP exchange inside it: under
// Megatron-Core, Transformer Engine's DotProductAttention runs the ring, the all-gather and the
// all-to-alls, and core_attn recompute checkpoints that module (its fused kernel as its unfused
// core). Where the core is not replayed (the fused kernel outside Megatron-Core; DeepSpeed-
// Ulysses, whose DistributedAttention Megatron-DeepSpeed does not checkpoint) neither is the
// exchange, and the core's tensors stay in memory.
TEST(ContextParallel, CoreAttentionRecomputeReplaysTheExchange) {
  struct Case {
    CpCommType type;
    AttentionKernel kernel;
    std::optional<Framework> framework;
    bool replayed;
  };
  const Case cases[] = {
      {CpCommType::a2a, AttentionKernel::standard, std::nullopt, true},
      {CpCommType::p2p, AttentionKernel::standard, std::nullopt, true},
      {CpCommType::all_gather, AttentionKernel::standard, std::nullopt, true},
      {CpCommType::p2p, AttentionKernel::flash, Framework::megatron, true},
      {CpCommType::all_gather, AttentionKernel::flash, Framework::megatron, true},
      {CpCommType::a2a, AttentionKernel::flash, Framework::megatron, true},
      {CpCommType::p2p, AttentionKernel::flash, std::nullopt, false},
      {CpCommType::a2a, AttentionKernel::standard, Framework::deepspeed, false},
      {CpCommType::a2a, AttentionKernel::flash, Framework::deepspeed, false},
  };
  for (const Case& c : cases) {
    const std::string what = fmt::format("{} {} {}", to_string(c.type), to_string(c.kernel),
                                         c.framework ? to_string(*c.framework) : "none");
    PlanInput p = plan(64, 1, 1, 1);
    p.cp = 4;
    p.cp_comm_type = c.type;
    p.attention = c.kernel;
    p.framework = c.framework;
    if (c.framework == Framework::deepspeed) p.zero = 1;
    const Workload plain_w = build_workload(scenario("llama3-8b", "dgx-h100", p));
    p.recompute = Recompute::selective;
    const Workload re_w = build_workload(scenario("llama3-8b", "dgx-h100", p));
    const Chunk &plain = plain_w.roles[0].chunks[0], &re = re_w.roles[0].chunks[0];
    // The forward's exchanges, and what the backward runs of them without recompute (the
    // all-gather form gathers K and V again in backward; the others nothing of the forward's).
    const std::vector<std::string> names =
        c.type == CpCommType::a2a
            ? std::vector<std::string>{"cp_qkv_all_to_all", "cp_out_all_to_all"}
        : c.type == CpCommType::p2p ? std::vector<std::string>{"cp_kv_send"}
                                    : std::vector<std::string>{"cp_kv_all_gather"};
    for (const std::string& name : names) {
      const double forward = bytes_named(re.forward, name, 3);
      ASSERT_GT(forward, 0.0) << what << " " << name;
      EXPECT_DOUBLE_EQ(bytes_named(plain.forward, name, 3), forward) << what << " " << name;
      const double own = c.type == CpCommType::all_gather ? forward : 0.0;
      EXPECT_DOUBLE_EQ(bytes_named(plain.backward, name, 3), own) << what << " " << name;
      EXPECT_DOUBLE_EQ(bytes_named(re.backward, name, 3), own + (c.replayed ? forward : 0.0))
          << what << " " << name;
    }
    // The standard core's scores, softmax and values leave memory where they are replayed.
    if (c.kernel == AttentionKernel::standard) {
      const double kept = memory_per_rank(plain_w, plain_w.roles[0]).activations.value();
      const double left = memory_per_rank(re_w, re_w.roles[0]).activations.value();
      if (c.replayed)
        EXPECT_LT(left, kept) << what;
      else
        EXPECT_DOUBLE_EQ(left, kept) << what;
    }
  }
}

// Hierarchical CP (Megatron-LM's a2a+p2p, --hierarchical-context-parallel-sizes 2 4): the
// all-to-all form over the inner level of 2 CP neighbours, the ring over the outer 4, 2 CP
// ranks apart. Per block and micro-batch, closed forms of the two forms over their own levels:
// the all-to-alls carry this rank's Q, K, V (out: its output) and put (a - 1) / a of it on the
// wire; the ring passes the KV chunk of the gathered sequence's 1 / a of the heads, as many
// elements as this rank's own chunk, r - 1 times (twice with dKV in backward). A level of one
// rank is the other form alone (Transformer Engine's attn_forward_func_with_cp), and the core's
// FLOPs and the activations are the ring's.
TEST(ContextParallel, HierarchicalCpIsTheAllToAllsAroundTheRing) {
  PlanInput p = plan(128, 2, 1, 1);  // TP 2, CP 8, DP 8 on DGX H100 (8 GPUs a node)
  p.sequence_parallel = true;
  p.cp = 8;
  p.cp_comm_type = CpCommType::a2a_p2p;
  p.hierarchical_cp_sizes = {2, 4};
  const Scenario sc = scenario("llama3-8b", "dgx-h100", p);
  EXPECT_EQ(sc.plan.cp_a2a, 2);
  EXPECT_EQ(sc.plan.cp_ring(), 4);
  const ModelSpec& m = sc.model;
  const Workload w = build_workload(sc);
  const Chunk& ch = w.roles[0].chunks[0];
  const double tokens = m.seq_length / 8.0, bf16 = 2, tp = 2;
  const double qkv = tokens * static_cast<double>(m.q_dim() + 2 * m.kv_dim()) / tp * bf16;
  const double out = tokens * static_cast<double>(m.q_dim()) / tp * bf16;
  const double kv = tokens * 2.0 * static_cast<double>(m.kv_dim()) / tp * bf16;
  for (int layer : {0, 5}) {
    EXPECT_DOUBLE_EQ(bytes_named(ch.forward, "cp_qkv_all_to_all", layer), qkv / 2);
    EXPECT_DOUBLE_EQ(bytes_named(ch.forward, "cp_out_all_to_all", layer), out / 2);
    EXPECT_DOUBLE_EQ(bytes_named(ch.backward, "cp_dout_all_to_all", layer), out / 2);
    EXPECT_DOUBLE_EQ(bytes_named(ch.backward, "cp_dqkv_all_to_all", layer), qkv / 2);
    EXPECT_DOUBLE_EQ(bytes_named(ch.forward, "cp_kv_send", layer), 3 * kv);
    EXPECT_DOUBLE_EQ(bytes_named(ch.backward, "cp_kv_dkv_send", layer), 2 * 3 * kv);
  }
  // The levels' placement: the all-to-all's 2 ranks TP apart on one node; the ring's 4 ranks
  // 2 x TP = 4 apart, 2 on each of 2 nodes.
  int a2a = 0, ring = 0;
  for (const Op& o : ch.forward.ops()) {
    if (o.kind != OpKind::comm || o.group != CommGroup::context) continue;
    if (o.collective == Collective::all_to_all) {
      ++a2a;
      EXPECT_EQ(o.group_size, 2);
      EXPECT_EQ(o.span, GroupSpan::intra_node);
    } else {
      ++ring;
      EXPECT_EQ(o.collective, Collective::send);
      EXPECT_EQ(o.group_size, 4);
      EXPECT_EQ(o.span, GroupSpan::nodes);
      EXPECT_EQ(o.per_node, 2);
    }
  }
  EXPECT_EQ(a2a, 2 * static_cast<int>(m.layers()));
  EXPECT_EQ(ring, static_cast<int>(m.layers()));
  // The core and the activations are the ring's.
  PlanInput q = p;
  q.cp_comm_type = CpCommType::p2p;
  q.hierarchical_cp_sizes.clear();
  const Workload wr = build_workload(scenario("llama3-8b", "dgx-h100", q));
  auto core = [](const Workload& x) {
    double sum = 0;
    for (const Op& o : x.roles[0].chunks[0].forward.ops())
      if (o.kind == OpKind::compute && o.compute == ComputeClass::attention) sum += o.flops;
    return sum;
  };
  EXPECT_GT(core(w), 0.0);
  EXPECT_DOUBLE_EQ(core(w), core(wr));
  EXPECT_DOUBLE_EQ(memory_per_rank(w, w.roles[0]).activations.value(),
                   memory_per_rank(wr, wr.roles[0]).activations.value());
  // A level of one rank: the ring alone ({1, 8}) or the all-to-alls alone ({8, 1}), op for op.
  auto same = [](const Workload& x, const Workload& y) {
    const OpList &a = x.roles[0].chunks[0].backward, &b = y.roles[0].chunks[0].backward;
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a.ops()[i].name, b.ops()[i].name);
      EXPECT_EQ(a.ops()[i].bytes, b.ops()[i].bytes);
      EXPECT_EQ(a.ops()[i].group_size, b.ops()[i].group_size);
      EXPECT_EQ(a.ops()[i].span, b.ops()[i].span);
    }
  };
  PlanInput one = plan(64, 1, 1, 1);
  one.cp = 8;
  one.cp_comm_type = CpCommType::a2a_p2p;
  for (auto [sizes, alone] : {std::pair{std::vector<int>{1, 8}, CpCommType::p2p},
                              std::pair{std::vector<int>{8, 1}, CpCommType::a2a}}) {
    one.hierarchical_cp_sizes = sizes;
    PlanInput ref = one;
    ref.cp_comm_type = alone;
    ref.hierarchical_cp_sizes.clear();
    const Scenario a = scenario("llama3-8b", "dgx-h100", one);
    EXPECT_EQ(a.plan.cp_comm_type, alone);
    same(build_workload(a), build_workload(scenario("llama3-8b", "dgx-h100", ref)));
  }
  // The levels' rules: Megatron-LM's (a2a+p2p needs the sizes; their product is CP) and
  // Transformer Engine's (two levels; the all-to-all level divides the heads of a TP rank).
  PlanInput bad = p;
  bad.hierarchical_cp_sizes.clear();
  EXPECT_NE(scenario_error("llama3-8b", "dgx-h100", bad)
                .find("--cp-comm-type: expected --hierarchical-context-parallel-sizes beside "
                      "a2a+p2p"),
            std::string::npos);
  bad.hierarchical_cp_sizes = {2, 2};
  EXPECT_NE(scenario_error("llama3-8b", "dgx-h100", bad)
                .find("--hierarchical-context-parallel-sizes: expected sizes whose product is "
                      "the context-parallel size 8, got 2 2"),
            std::string::npos);
  bad.hierarchical_cp_sizes = {2, 2, 2};
  EXPECT_NE(scenario_error("llama3-8b", "dgx-h100", bad)
                .find("--hierarchical-context-parallel-sizes: expected two sizes with "
                      "--cp-comm-type a2a+p2p"),
            std::string::npos);
  bad.hierarchical_cp_sizes = {8, 1};  // the all-to-all form: 4 key-value heads a TP rank
  EXPECT_NE(scenario_error("llama3-8b", "dgx-h100", bad)
                .find("--context-parallel-size: expected a divisor of the key-value heads per "
                      "TP rank, 4"),
            std::string::npos);
  bad = plan(128, 2, 1, 1);
  bad.sequence_parallel = true;
  bad.cp = 16;
  bad.cp_comm_type = CpCommType::a2a_p2p;
  bad.hierarchical_cp_sizes = {8, 2};
  EXPECT_NE(scenario_error("llama3-8b", "dgx-h100", bad)
                .find("--hierarchical-context-parallel-sizes: expected an all-to-all level that "
                      "divides the key-value heads per TP rank, 4 (a2a+p2p scatters the heads "
                      "over it), got 8 2"),
            std::string::npos);
}

// The exchange overlaps the attention core: the next op after the core waits for it, so a
// ring that takes less time than the core adds nothing; the CP group's time is in the breakdown.
TEST(ContextParallel, PredictShowsTheRingAndActivationsShrink) {
  PlanInput p = plan(64, 8, 1, 1);
  p.cp = 2;
  p.sequence_parallel = true;
  Scenario sc = scenario("llama3-70b", "dgx-h100", p);
  Workload w = build_workload(sc);
  Prediction pr = simulate(w);
  EXPECT_GT(pr.mean.by_group[CommGroup::context].total, 0);
  PlanInput q = plan(32, 8, 1, 1);
  q.sequence_parallel = true;
  Workload whole = build_workload(scenario("llama3-70b", "dgx-h100", q));
  EXPECT_LT(memory_per_rank(w, w.roles[0]).activations.value(),
            memory_per_rank(whole, whole.roles[0]).activations.value());
}

// DeepSpeed-MoE (--framework deepspeed with experts; Megatron-DeepSpeed's MoE): experts in
// every second block (--expert-interval 2: blocks 2, 4, ... 1-based), top-1 gating, tokens
// dropped beyond and padded to the capacity ceil(T / E x 1.0) (deepspeed/moe/sharded_moe.py
// top1gating), so each MoE block's dispatch and combine move E x C rows of h, (EP - 1) / EP of
// them off the rank, forward and backward, and a dense block none; the dense gradients are
// all-reduced over DP, the experts' over DP / EP (DeepSpeed's expert-data-parallel group).
// DeepSpeed-MoE as Megatron-DeepSpeed runs it by default: ZeRO-0, EP 8 over `gpus` ranks,
// micro-batch 1, tokens dropped beyond a capacity factor of 1.0 and padded to it.
PlanInput deepspeed_moe_plan(int gpus) {
  PlanInput p = plan(gpus, 1, 1, 1);
  p.framework = Framework::deepspeed;
  p.zero = 0;
  p.ep = 8;
  p.moe_capacity_factor = 1.0;
  p.moe_pad_to_capacity = true;
  p.global_batch = gpus;
  return p;
}

TEST(Moe, DeepSpeedMoeIsPaddedToCapacityEveryIntervalBlock) {
  ModelSpec m = testing::model("mixtral-8x7b");
  m.experts_per_token = 1;
  m.moe_layer_step = 2;
  PlanInput p = deepspeed_moe_plan(16);
  auto resolved = resolve_scenario(m, *load_system("dgx-h100"), *load_network("ib-ndr-400"), p);
  ASSERT_TRUE(resolved.ok()) << resolved.error().message;
  const Scenario& sc = *resolved;
  const Workload w = build_workload(sc);
  const Chunk& ch = w.roles[0].chunks[0];
  const double T = static_cast<double>(sc.model.seq_length);  // micro-batch 1
  const double capacity = std::ceil(T / 8 * 1.0), h = static_cast<double>(sc.model.hidden);
  const double moved = 8 * capacity * h * 2 /*bf16*/ * 7.0 / 8;
  for (int layer = 0; layer < 4; ++layer) {
    SCOPED_TRACE(layer);
    const double want = layer % 2 == 1 ? moved : 0.0;
    EXPECT_DOUBLE_EQ(bytes_named(ch.forward, "moe_dispatch", layer), want);
    EXPECT_DOUBLE_EQ(bytes_named(ch.forward, "moe_combine", layer), want);
    EXPECT_DOUBLE_EQ(bytes_named(ch.backward, "moe_dispatch_backward", layer), want);
    EXPECT_DOUBLE_EQ(bytes_named(ch.backward, "moe_combine_backward", layer), want);
  }
  // Gradients: the experts' (16 MoE blocks, one expert of three h x f matrices a rank) over
  // DP / EP = 2, the rest over DP = 16.
  const double expert = 16.0 * 3 * h * static_cast<double>(sc.model.expert_ffn());
  double expert_grads = 0, dense_grads = 0;
  for (const OpList* l : {&ch.backward, &w.roles[0].step})
    for (const Op& o : l->ops()) {
      if (o.kind != OpKind::comm) continue;
      if (o.group == CommGroup::expert_data) {
        EXPECT_EQ(o.group_size, 2) << o.name;
        expert_grads += o.elements;
      }
      if (o.group == CommGroup::data && o.collective == Collective::all_reduce) {
        EXPECT_EQ(o.group_size, 16) << o.name;
        dense_grads += o.elements;
      }
    }
  EXPECT_DOUBLE_EQ(expert_grads, expert);
  EXPECT_GT(dense_grads, 0.0);
  EXPECT_DOUBLE_EQ(dense_grads + expert_grads, static_cast<double>(w.roles[0].params));
  // Data and expert parallelism only: TP, PP and CP are one line each.
  for (auto [flag, set] : {std::pair{"--tensor-model-parallel-size", &PlanInput::tp},
                           std::pair{"--pipeline-model-parallel-size", &PlanInput::pp}}) {
    PlanInput q = p;
    q.*set = 2;
    q.sequence_parallel = true;
    auto bad = resolve_scenario(m, *load_system("dgx-h100"), *load_network("ib-ndr-400"), q);
    ASSERT_FALSE(bad.ok()) << flag;
    EXPECT_EQ(bad.error().message,
              std::string(flag) +
                  ": expected 1 with experts under --framework deepspeed (DeepSpeed-MoE is "
                  "modelled with data and expert parallelism only), got 2");
  }
}

// DeepSpeed-MoE's capacity has a floor, min_capacity (4 by default; deepspeed/moe/sharded_moe.py
// _capacity: max(ceil(T / E x factor), min_capacity)): at 16 tokens a micro-batch over 8 experts
// the top-1 capacity 2 is raised to 4, so the dispatch moves 8 x 4 rows of h, (EP - 1) / EP of
// them off the rank; --moe-min-capacity 0 leaves 2 (8 x 2 rows); at 4,096 tokens (capacity 512)
// the floor changes nothing. Megatron-LM's capacity has no floor: the flag is one line there.
TEST(Moe, DeepSpeedCapacityHasItsFloor) {
  ModelSpec m = testing::model("mixtral-8x7b");
  m.experts_per_token = 1;
  PlanInput p = deepspeed_moe_plan(8);
  auto dispatched = [&](const PlanInput& q) {
    auto sc = resolve_scenario(m, *load_system("dgx-h100"), *load_network("ib-ndr-400"), q);
    EXPECT_TRUE(sc.ok()) << sc.error().message;
    return sc.ok() ? bytes_named(build_workload(*sc).roles[0].chunks[0].forward, "moe_dispatch", 0)
                   : -1.0;
  };
  const double h = static_cast<double>(m.hidden), off = 7.0 / 8, bf16 = 2;
  p.seq_length = 16;
  EXPECT_DOUBLE_EQ(dispatched(p), 8 * 4 * h * bf16 * off);  // the default floor, 4
  p.moe_min_capacity = 0;
  EXPECT_DOUBLE_EQ(dispatched(p), 8 * 2 * h * bf16 * off);  // ceil(16 / 8)
  p.moe_min_capacity = 3;
  EXPECT_DOUBLE_EQ(dispatched(p), 8 * 3 * h * bf16 * off);
  p.moe_min_capacity.reset();
  p.seq_length = 4096;
  EXPECT_DOUBLE_EQ(dispatched(p), 8 * 512 * h * bf16 * off);
  p.framework.reset();
  p.moe_min_capacity = 4;
  auto bad = resolve_scenario(m, *load_system("dgx-h100"), *load_network("ib-ndr-400"), p);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message,
            "--moe-min-capacity: expected --framework deepspeed with experts (DeepSpeed-MoE's "
            "floor of the capacity; Megatron-LM's has none), got 4");
}

TEST(Moe, PlanChecksNameTheFlag) {
  PlanInput p = moe_plan(64, 1, 3);
  EXPECT_NE(scenario_error("mixtral-8x7b", "dgx-h100", p).find("--expert-model-parallel-size"),
            std::string::npos);
  p = moe_plan(64, 1, 8);
  EXPECT_NE(scenario_error("llama3-8b", "dgx-h100", p).find("no experts"), std::string::npos);
  p = moe_plan(64, 1, 8);
  p.moe_routing_imbalance = 9;
  EXPECT_NE(scenario_error("mixtral-8x7b", "dgx-h100", p).find("--moe-routing-imbalance"),
            std::string::npos);
  p = moe_plan(64, 2, 8);
  p.sequence_parallel.reset();
  EXPECT_NE(scenario_error("mixtral-8x7b", "dgx-h100", p).find("--sequence-parallel"),
            std::string::npos);
  p = moe_plan(64, 1, 8);
  p.zero = 3;
  EXPECT_NE(scenario_error("mixtral-8x7b", "dgx-h100", p).find("--zero"), std::string::npos);
  PlanInput c = plan(64, 1, 1, 1);
  c.cp = 3;
  EXPECT_NE(scenario_error("llama3-8b", "dgx-h100", c).find("--context-parallel-size"),
            std::string::npos);
  // A given DP is the size without CP (world = DP x TP x CP x PP, as Megatron-LM and torchtitan
  // count it; it was refused beside CP): DP 32 x CP 2 on 64 GPUs, DP 64 x CP 2 not.
  c.cp = 2;
  c.dp = 32;
  EXPECT_EQ(scenario("llama3-8b", "dgx-h100", c).plan.dp, 32);
  EXPECT_EQ(scenario("llama3-8b", "dgx-h100", c).plan.cp, 2);
  c.dp = 64;
  EXPECT_NE(scenario_error("llama3-8b", "dgx-h100", c)
                .find("--dp: expected DP x TP x CP x PP = the GPU count 64"),
            std::string::npos);
  c.gpus.reset();  // DP alone sizes the job: 64 x CP 2 = 128 GPUs
  EXPECT_EQ(scenario("llama3-8b", "dgx-h100", c).plan.dp, 64);
}

// A dense model with CP = EP = 1 has no MoE or CP op and no expert field in its plan's JSON.
TEST(Moe, DenseDefaultsAddNothing) {
  Scenario sc = scenario("llama3-8b", "dgx-h100", plan(16, 2, 2, 1));
  Workload w = build_workload(sc);
  for (const Role& r : w.roles) {
    EXPECT_EQ(r.expert_params, 0);
    for (const Chunk& ch : r.chunks)
      for (const OpList* l : {&ch.forward, &ch.backward})
        for (const Op& o : l->ops())
          EXPECT_TRUE(o.kind != OpKind::comm ||
                      (o.group != CommGroup::expert && o.group != CommGroup::context &&
                       o.group != CommGroup::expert_data));
  }
  nlohmann::json j = to_json(sc.plan);
  EXPECT_FALSE(j.contains("context_parallel_size"));
  EXPECT_FALSE(j.contains("expert_model_parallel_size"));
}

// describe gives a MoE model's active parameters beside its total, as its publications do
// (the table gave the total alone; found by probing, 2026-12-02), and a dense model no such row;
// the JSON has params_active (the total for a dense model) and the routed experts' share.
TEST(MoeCli, DescribeSaysTheActiveParameters) {
  const std::string bin = COMMSCOPE_BIN;
  const ParamCount c = count_params(testing::model("mixtral-8x7b"));
  testing::Outcome table = testing::run_shell(bin + " describe --model mixtral-8x7b");
  const auto at = table.out.find("\n  active parameters ");
  ASSERT_NE(at, std::string::npos) << table.out;
  const std::string line = table.out.substr(at + 1, table.out.find('\n', at + 1) - at - 1);
  EXPECT_NE(line.find(" " + with_commas(c.active) + "  "), std::string::npos) << line;
  EXPECT_NE(table.out.find("12.88B per token: 2 of 8 routed experts"), std::string::npos)
      << table.out;
  testing::Outcome dense = testing::run_shell(bin + " describe --model llama3-8b");
  EXPECT_EQ(dense.out.find("active parameters"), std::string::npos);
  for (const auto& [model, active, experts] :
       {std::tuple{"mixtral-8x7b", c.active, c.experts},
        std::tuple{"llama3-8b", count_params(testing::model("llama3-8b")).total,
                   std::int64_t{0}}}) {
    testing::Outcome j =
        testing::run_shell(bin + " describe --format json --model " + std::string(model));
    const auto doc = nlohmann::json::parse(j.out);
    EXPECT_EQ(doc.at("params_active").get<std::int64_t>(), active) << model;
    EXPECT_EQ(doc.at("params").at("experts").get<std::int64_t>(), experts) << model;
  }
}

// The CLI: the flags in Megatron's spellings; bad values are one line naming the flag, exit 2,
// nothing on stdout.
TEST(MoeCli, FlagsAreCheckedAndPriced) {
  const std::string bin = COMMSCOPE_BIN;
  const std::string base = bin + " predict --model mixtral-8x7b --system dgx-h100 --gpus 64";
  struct Bad {
    std::string args, flag;
  };
  for (const Bad& b :
       {Bad{" --ep 3", "--expert-model-parallel-size"},
        Bad{" --expert-model-parallel-size -1", "--expert-model-parallel-size"},
        Bad{" --cp 0", "--context-parallel-size"},
        Bad{" --ep 8 --moe-routing-imbalance 0.5", "--moe-routing-imbalance"},
        Bad{" --ep 8 --moe-expert-capacity-factor x", "--moe-expert-capacity-factor"},
        Bad{" --ep 8 --expert-tensor-parallel-size 4", "--expert-tensor-parallel-size"},
        Bad{" --ep 8 --moe-token-dispatcher-type nccl", "--moe-token-dispatcher-type"}}) {
    SCOPED_TRACE(b.args);
    testing::Outcome o = testing::run_shell(base + b.args);
    EXPECT_EQ(o.status, 2);
    EXPECT_EQ(o.out, "");
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
    EXPECT_NE(o.err.find(b.flag), std::string::npos) << o.err;
  }
  testing::Outcome ok = testing::run_shell(base + " --ep 8 --format json");
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_NE(ok.out.find("\"expert\""), std::string::npos);
  testing::Outcome help = testing::run_shell(bin + " predict --help");
  for (const char* f :
       {"--context-parallel-size", "--expert-model-parallel-size", "--expert-tensor-parallel-size",
        "--moe-expert-capacity-factor", "--moe-routing-imbalance", "--moe-token-dispatcher-type",
        "--moe-router-num-groups", "--moe-router-group-topk"})
    EXPECT_NE(help.out.find(f), std::string::npos) << f;
  testing::Outcome flex =
      testing::run_shell(bin +
                         " describe --model mixtral-8x7b --system dgx-h100 --gpus 64 --ep 8 "
                         "--moe-token-dispatcher-type flex");
  EXPECT_EQ(flex.status, 0) << flex.err;
  EXPECT_NE(flex.out.find("EP 8 (flex dispatcher"), std::string::npos) << flex.out;
  // The copies a token makes, on the plan line: DeepSeek-V3's EP 64 over 8 nodes, 4 of its 8
  // groups a token (3.18 network copies: 7 x (1/2 + 1/2 x (1 - C(96, 8) / C(128, 8))), the
  // closed form of spec/placement.h, computed here by hand).
  testing::Outcome ds = testing::run_shell(
      bin +
      " describe --model deepseek-v3 --system dgx-h100 --gpus 512 --pp 8 --ep 64 "
      "--expert-tensor-parallel-size 1 --pipeline-stage-layers 7,8,8,8,8,8,8,6 "
      "--moe-token-dispatcher-type flex");
  EXPECT_EQ(ds.status, 0) << ds.err;
  double miss = 1;
  for (int i = 0; i < 8; ++i) miss *= (96.0 - i) / (128.0 - i);
  EXPECT_NE(ds.out.find(fmt::format("EP 64 (flex dispatcher: {:.2f} network and",
                                    7 * (1 - (0.5 + 0.5 * miss)))),
            std::string::npos)
      << ds.out;
  EXPECT_NE(ds.out.find("its experts from 4 of 8 groups)"), std::string::npos) << ds.out;
}

// ---- multi-token prediction (DeepSeek-V3 report section 2.2; Megatron-Core's MTP) ----

// DeepSeek-V3's MTP module counted tensor by tensor from its config.json, independently of
// params.cpp: one MoE layer like the model's last (MLA attention: q_a 7168 x 1536 and its norm,
// q_b 1536 x 128 x 192, kv_a 7168 x 576 and its norm, kv_b 512 x 128 x 256, o 128 x 128 x
// 7168; 256 routed and 1 shared expert of 3 x 7168 x 2048, the router 256 x 7168, two
// RMSNorms), eh_proj 2h x h and three norms (enorm, hnorm, its final norm). The Hugging Face
// model card's 14B of MTP weights holds the shared embedding and head again (2 x V x h); its
// figure is 685B less 671B, two numbers each rounded to the billion, so within 1B.
TEST(Mtp, DeepSeekV3ModuleIsThePublishedFourteenBillion) {
  ModelSpec m = testing::model("deepseek-v3");
  ASSERT_EQ(m.mtp_layers, 1);
  const std::int64_t h = 7168, V = 129280;
  const std::int64_t attn =
      h * 1536 + 1536 + 1536 * 128 * 192 + h * 576 + 512 + 512 * 128 * 256 + 128 * 128 * h;
  const std::int64_t moe = 256 * 3 * h * 2048 + 3 * h * 2048 + 256 * h;
  const std::int64_t module = attn + moe + 2 * h + 2 * h * h + 3 * h;
  const ParamCount c = count_params(m);
  EXPECT_EQ(c.mtp, module);
  EXPECT_NEAR(static_cast<double>(c.mtp + 2 * V * h), 14e9, 1e9);
  EXPECT_NEAR(static_cast<double>(c.total + c.mtp + 2 * V * h), 685e9, 1e9);
  EXPECT_NEAR(static_cast<double>(c.total), 671e9, 0.5e9);  // the main model, MTP not in it
  m.mtp_layers = 0;
  EXPECT_EQ(count_params(m).mtp, 0);
}

PlanInput dsv3_plan(std::optional<int> mtp) {
  PlanInput p = plan(256, 2, 4, 1, 256);
  p.ep = 64;
  p.expert_tp = 1;
  p.sequence_parallel = true;
  p.mtp_layers = mtp;
  p.stage_layers = std::vector<int>{16, 16, 16, 13};  // NVIDIA's recipe's split for PP 4
  return p;
}

// On the last stage, per depth: the embedding of the shifted tokens (and, the first stage
// holding the model's, its copy, whose gradient is summed over the embedding group), eh_proj
// (2 T 2h h / TP FLOPs forward, twice backward) with its input all-gathered under SP and its
// output all-gathered over TP (again in backward, the sequence-parallel scatter's), one more
// block, a second head and loss. The other stages do not change.
TEST(Mtp, LastStageRunsTheModule) {
  const Scenario with = scenario("deepseek-v3", "dgx-h100", dsv3_plan(std::nullopt));
  const Scenario without = scenario("deepseek-v3", "dgx-h100", dsv3_plan(0));
  ASSERT_EQ(with.plan.mtp_layers, 1);  // the preset's
  ASSERT_EQ(without.plan.mtp_layers, 0);
  const Workload a = build_workload(with), b = build_workload(without);
  ASSERT_EQ(a.roles.size(), 4u);
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(a.roles[s].params, b.roles[s].params) << s;
    EXPECT_EQ(a.roles[s].chunks[0].forward.size(), b.roles[s].chunks[0].forward.size()) << s;
  }
  // The last stage's parameters: the module as TP 2 and EP 64 hold it (split parts halved, the
  // routed experts over 64, the rest whole), and the embedding's copy, V x h / TP.
  const std::int64_t h = 7168, V = 129280, t = 2;
  const std::int64_t split =
      1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * h + 3 * h * 2048 + 2 * h * h;
  const std::int64_t replicated = h * 1536 + 1536 + h * 576 + 512 + 256 * h + 2 * h + 3 * h;
  const std::int64_t experts = 256 * 3 * h * 2048 / 64;
  EXPECT_EQ(a.roles[3].params - b.roles[3].params, split / t + replicated + experts + V * h / t);
  EXPECT_EQ(a.roles[3].expert_params - b.roles[3].expert_params, experts);

  const Chunk& last = a.roles[3].chunks[0];
  const double T = static_cast<double>(with.model.seq_length);  // micro-batch 1
  auto proj = named(last.forward, "mtp_eh_proj");
  ASSERT_EQ(proj.size(), 1u);
  EXPECT_DOUBLE_EQ(proj[0].flops, 2 * T * 2 * h * h / t);
  auto proj_bw = named(last.backward, "mtp_eh_proj");
  ASSERT_EQ(proj_bw.size(), 1u);
  EXPECT_DOUBLE_EQ(proj_bw[0].flops, 2 * proj[0].flops);
  EXPECT_EQ(named(last.forward, "cross_entropy").size(), 2u);
  EXPECT_EQ(named(b.roles[3].chunks[0].forward, "cross_entropy").size(), 1u);
  EXPECT_EQ(named(last.forward, "embedding").size(), 1u);
  EXPECT_EQ(named(b.roles[3].chunks[0].forward, "embedding").size(), 0u);
  for (const OpList* list : {&last.forward, &last.backward}) {
    auto g = named(*list, "mtp_proj_all_gather");
    ASSERT_EQ(g.size(), 1u);
    EXPECT_EQ(g[0].collective, Collective::all_gather);
    EXPECT_EQ(g[0].group, CommGroup::tensor);
    EXPECT_DOUBLE_EQ(g[0].bytes, T * h * 2);  // b x s x h in bf16
  }
  // One more MoE block: its all-to-alls and expert GEMMs, as many as a block of the stage's.
  EXPECT_EQ(named(last.forward, "moe_dispatch").size(),
            named(b.roles[3].chunks[0].forward, "moe_dispatch").size() + 1);
  // The embedding's gradient summed over the first and last stage (DeepSeek-V3 is untied).
  for (int s : {0, 3}) {
    EXPECT_EQ(named(a.roles[s].step, "embedding_grad_all_reduce").size(), 1u) << s;
    EXPECT_TRUE(named(b.roles[s].step, "embedding_grad_all_reduce").empty()) << s;
  }
  // Without SP (a dense model: Megatron requires SP for MoE with TP) the projection's output
  // gather is forward only: its backward is a split.
  PlanInput no_sp = plan(16, 2, 2, 1, 16);
  no_sp.mtp_layers = 1;
  const Workload c = build_workload(scenario("llama3-8b", "dgx-h100", no_sp));
  EXPECT_EQ(named(c.roles[1].chunks[0].forward, "mtp_proj_all_gather").size(), 1u);
  EXPECT_TRUE(named(c.roles[1].chunks[0].backward, "mtp_proj_all_gather").empty());
  // A tied model's last stage already holds the embedding: no second copy, no new all-reduce.
  PlanInput tied = plan(8, 1, 2, 1, 16);
  tied.mtp_layers = 1;
  PlanInput untouched = plan(8, 1, 2, 1, 16);
  const Workload gt = build_workload(scenario("gpt2-small", "dgx-h100", tied));
  const Workload g0 = build_workload(scenario("gpt2-small", "dgx-h100", untouched));
  const ModelSpec gpt = testing::model("gpt2-small");
  const std::int64_t gh = gpt.hidden;
  EXPECT_EQ(gt.roles[1].params - g0.roles[1].params,
            block_params(gpt, gpt.layers() - 1) + 2 * gh * gh + 3 * 2 * gh);  // LayerNorms: 2h
  EXPECT_EQ(named(gt.roles[1].step, "embedding_grad_all_reduce").size(), 1u);
}

// The last stage's activations gain, per depth and micro-batch in flight, the module's block
// and what its input and output keep: the inputs of enorm and hnorm and eh_proj's 2h-wide input
// (4 x b s h in the compute type) and a head's (its final norm's and the head's inputs, 2 b s h,
// and the fp32 softmax of the vocabulary, 4 b s V). PP 1: one micro-batch in flight.
TEST(Mtp, ActivationsAreTheModulesClosedForm) {
  auto sc = [](std::optional<int> mtp) {
    PlanInput p = plan(64, 1, 1, 1, 64);
    p.ep = 64;
    p.mtp_layers = mtp;
    return scenario("deepseek-v3", "gb200-nvl72", p);
  };
  const Scenario with = sc(std::nullopt), without = sc(0);
  const Workload a = build_workload(with), b = build_workload(without);
  const double s = static_cast<double>(with.model.seq_length), h = 7168, V = 129280, bf = 2;
  const double want = block_activation_bytes(with, with.model.layers()).value() + 4 * bf * s * h +
                      2 * bf * s * h + 4 * s * V;
  EXPECT_DOUBLE_EQ(memory_per_rank(a, a.roles[0]).activations.value() -
                       memory_per_rank(b, b.roles[0]).activations.value(),
                   want);
  // Its block is a MoE block like the model's last.
  EXPECT_EQ(block_activation_bytes(with, with.model.layers()).value(),
            block_activation_bytes(with, with.model.layers() - 1).value());
}

// A Megatron layout carries exactly the plan's MTP layers, in the loss's stage; the flag wins
// over the model's depth; encoder models and the limit are refused, each naming its flag.
TEST(Mtp, LayoutsAndFlagsAgree) {
  PlanInput p = plan(256, 1, 4, 1, 256);
  p.ep = 64;
  p.pipeline_layout = "Et*4|(t*4|)*14tmL";  // NVIDIA's recipe for PP 4 x VP 4
  const Scenario sc = scenario("deepseek-v3", "dgx-h100", p);
  EXPECT_EQ(sc.plan.virtual_stages, 4);
  EXPECT_EQ(sc.plan.mtp_layers, 1);
  std::vector<int> want(16, 4);
  want.back() = 1;
  EXPECT_EQ(sc.plan.stage_layers, want);
  const Workload w = build_workload(sc);
  EXPECT_EQ(named(w.roles[3].chunks[3].forward, "mtp_eh_proj").size(), 1u);  // the last chunk
  EXPECT_TRUE(named(w.roles[3].chunks[2].forward, "mtp_eh_proj").empty());
  PlanInput none = p;
  none.mtp_layers = 0;
  std::string e = scenario_error("deepseek-v3", "dgx-h100", none);
  EXPECT_EQ(e,
            "--pipeline-model-parallel-layout: expected 0 multi-token-prediction layers (m), the "
            "--mtp-num-layers given, got 1 m");
  PlanInput two = plan(256, 1, 4, 1, 256);
  two.ep = 64;
  two.mtp_layers = 2;
  two.stage_layers = std::vector<int>{16, 16, 16, 13};
  const Scenario sc2 = scenario("deepseek-v3", "dgx-h100", two);
  EXPECT_EQ(named(build_workload(sc2).roles[3].chunks[0].forward, "mtp_eh_proj").size(), 2u);
  PlanInput enc = plan(8, 1, 1, 1, 8);
  enc.mtp_layers = 1;
  e = scenario_error("t5-small", "dgx-h100", enc);
  EXPECT_EQ(e.rfind("--mtp-num-layers: expected 0 on a model with an encoder", 0), 0u) << e;
  PlanInput big = plan(8, 1, 1, 1, 8);
  big.mtp_layers = 65;
  e = scenario_error("llama3-8b", "dgx-h100", big);
  EXPECT_EQ(e, "--mtp-num-layers: expected 0 to 64 (commscope's limit), got 65");
}

}  // namespace
}  // namespace commscope
