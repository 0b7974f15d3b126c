// FLOPs per iteration against closed forms from the literature.
#include <gtest/gtest.h>

#include "commscope/workload/params.h"
#include "test_util.h"

namespace commscope {
namespace {

using testing::plan;
using testing::scenario;

// Narayanan et al. 2021 (SC'21), Section 5.1, for B samples per iteration:
//   without recompute: F = 72 B s l h^2 (1 + s/(6h) + V/(12 l h))
//   with full recompute: F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))
double megatron_flops(const ModelSpec& m, double B, bool full_recompute) {
  const double s = m.seq_length, l = m.layers(), h = m.hidden, V = m.vocab;
  return full_recompute ? 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
                        : 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
}

struct Case {
  const char* model;
  int gpus, tp, pp;
  std::int64_t micro, global;
};

TEST(Flops, MegatronClosedForms) {
  const Case cases[] = {{"megatron-1.7b", 8, 1, 1, 4, 32},
                        {"megatron-18.4b", 64, 8, 2, 2, 64},
                        {"megatron-145.6b", 1536, 8, 8, 1, 1536},
                        {"gpt3-175b", 1024, 8, 16, 1, 512},
                        {"megatron-1t", 3072, 8, 64, 1, 384}};
  for (const auto& c : cases) {
    for (auto recompute : {Recompute::none, Recompute::full}) {
      SCOPED_TRACE(std::string(c.model) + (recompute == Recompute::full ? " full recompute" : ""));
      PlanInput p = plan(c.gpus, c.tp, c.pp, c.micro, c.global);
      p.recompute = recompute;
      Scenario sc = scenario(c.model, "dgx-a100-80gb", p);
      FlopCount f = iteration_flops(build_workload(sc));
      const double B = static_cast<double>(c.global);
      EXPECT_NEAR(f.model / megatron_flops(sc.model, B, false), 1.0, 1e-12);
      EXPECT_NEAR(f.hardware / megatron_flops(sc.model, B, recompute == Recompute::full), 1.0,
                  1e-12);
    }
  }
}

// BERT: Megatron's form without the causal mask's discount (72 B s l h^2 (1 + s/(6h))), the
// tied MLM head (6 B s h V) and the pooler on each sample's first token (6 B h^2), whatever the
// TP: the pooler, which every TP rank runs whole, is useful once (it was counted TP times, found
// by checking, 2026-12-02) and its copies are hardware FLOPs.
TEST(Flops, BertPoolerCountsOncePerTensorParallelGroup) {
  for (int tp : {1, 2, 4}) {
    SCOPED_TRACE(tp);
    Scenario sc = scenario("bert-large", "dgx-a100-40gb", plan(16, tp, 1, 8, 256));
    const ModelSpec& m = sc.model;
    const double B = 256, s = m.seq_length, l = m.layers(), h = m.hidden, V = m.vocab;
    const double expect =
        72 * B * s * l * h * h * (1 + s / (6 * h)) + 6 * B * s * h * V + 6 * B * h * h;
    FlopCount f = iteration_flops(build_workload(sc));
    EXPECT_NEAR(f.model / expect, 1.0, 1e-12);
    EXPECT_NEAR(f.hardware - f.model, (tp - 1) * 6 * B * h * h, 1e-6 * 6 * B * h * h);
  }
}

// Selective recompute repeats only QK^T and attention-over-values: 4 B s^2 h per layer
// (Korthikanti et al. 2022, Section 5).
TEST(Flops, SelectiveRecomputeAddsAttentionOnly) {
  PlanInput p = plan(16, 4, 2, 2, 32);
  p.recompute = Recompute::selective;
  Scenario sc = scenario("megatron-7.5b", "dgx-a100-80gb", p);
  FlopCount f = iteration_flops(build_workload(sc));
  const double B = 32, s = sc.model.seq_length, h = sc.model.hidden, l = sc.model.layers();
  EXPECT_NEAR((f.hardware - f.model) / (4 * B * s * s * h * l), 1.0, 1e-12);
}

// Chowdhery et al. 2022 (PaLM), Appendix B: model FLOPs per token = 6N + 12 L H Q T with N
// the non-embedding parameters, here the matmul weights (including the untied LM head).
TEST(Flops, LlamaMatchesPaLMFormula) {
  for (const char* name : {"llama2-7b", "llama3-8b", "llama2-70b"}) {
    SCOPED_TRACE(name);
    Scenario sc = scenario(name, "dgx-h100", plan(16, 8, 1, 1, 16));
    const ModelSpec& m = sc.model;
    const double h = m.hidden, f = m.ffn, l = m.layers(), kv = m.kv_dim(), s = m.seq_length;
    const double matmul_weights = l * (h * h + 2 * h * kv + h * h + 3 * h * f) + m.vocab * h;
    const double tokens = 16 * s;
    FlopCount got = iteration_flops(build_workload(sc));
    EXPECT_NEAR(got.model / (tokens * (6 * matmul_weights + 12 * l * h * s)), 1.0, 1e-12);
  }
}

// FlashAttention on a causal model: model FLOPs count attention as PaLM does (4 s^2 per query
// channel and sample forward, twice that backward, no causal discount); hardware FLOPs as the
// kernel runs it, half the scores forward and 2.5 times that backward (FlashAttention-2, Dao
// 2023, Section 3.1: the backward pass's five matmuls to the forward's two). Without recompute
// hardware FLOPs are then below model FLOPs by (4 + 8 - 2 - 5) B s^2 q l = 5 B s^2 q l, and
// describe says why.
TEST(Flops, CausalFlashAttentionBelowModelFlops) {
  PlanInput p = plan(8, 1, 1, 1, 8);
  p.seq_length = 8192;
  p.attention = AttentionKernel::flash;
  const Scenario sc = scenario("llama3-8b", "dgx-h100", p);
  const double B = 8, s = 8192, q = 4096, l = 32;
  const FlopCount f = iteration_flops(build_workload(sc));
  EXPECT_NEAR((f.model - f.hardware) / (5 * B * s * s * q * l), 1.0, 1e-12);

  const std::string bin = COMMSCOPE_BIN;
  const std::string flags =
      " describe --model llama3-8b --system dgx-h100 --gpus 8 "
      "--seq-length 8192 --attention ";
  auto flash = testing::run_shell(bin + flags + "flash");
  ASSERT_EQ(flash.status, 0) << flash.err;
  EXPECT_NE(flash.out.find("below model FLOPs: the attention kernel skips the causal half"),
            std::string::npos)
      << flash.out;
  auto standard = testing::run_shell(bin + flags + "standard");
  ASSERT_EQ(standard.status, 0) << standard.err;
  EXPECT_EQ(standard.out.find("below model FLOPs"), std::string::npos) << standard.out;
}

// Routing imbalance gives the busiest EP rank more rows, and every rank's program is that rank's
// (its time must pay them); but over all ranks the tokens x top-k rows are the same, so model
// FLOPs (MFU's numerator) do not move and hardware FLOPs stay the mean rank's. Padding to
// capacity adds hardware FLOPs only. (Found by probing, 2026-11-30: imbalance 4 made Mixtral's
// 82.9 GFLOP per token 285.9, above 6 x its 46.7B parameters, and raised MFU as the run slowed.)
TEST(Flops, MoeImbalanceAndPaddingAreNoModelFlops) {
  auto flops = [](double imbalance, double capacity, bool pad) {
    PlanInput p = plan(16, 2, 1, 1, 64);
    p.ep = 8;
    p.sequence_parallel = true;
    p.moe_routing_imbalance = imbalance;
    if (capacity > 0) p.moe_capacity_factor = capacity;
    if (pad) p.moe_pad_to_capacity = true;
    return iteration_flops(build_workload(scenario("mixtral-8x7b", "dgx-h100", p)));
  };
  const FlopCount even = flops(1, 0, false);
  for (double imbalance : {2.0, 4.0}) {
    SCOPED_TRACE(imbalance);
    const FlopCount f = flops(imbalance, 0, false);
    EXPECT_NEAR(f.model / even.model, 1.0, 1e-12);
    EXPECT_NEAR(f.hardware / even.hardware, 1.0, 1e-12);
  }
  // Padded to capacity 2: every expert computes twice its even share of rows.
  const FlopCount padded = flops(1, 2, true);
  EXPECT_NEAR(padded.model / even.model, 1.0, 1e-12);
  EXPECT_GT(padded.hardware, even.hardware * 1.2);
  // Mixtral 8x7B: 6 x the 12.9B active matmul weights plus attention, about 83 GFLOP per token
  // at 4096 tokens (within 6 x 46.7B = 280 whatever the routing).
  const double tokens = 64.0 * 4096;
  EXPECT_GT(even.model / tokens, 75e9);
  EXPECT_LT(even.model / tokens, 90e9);
}

// Latent attention's scores are qk = 192 channels a head wide and its context v = 128: PaLM's
// count is 2 s^2 (qk + v) a head forward, whichever kernel runs it, so DeepSeek-V3's model FLOPs
// are the same under FlashAttention and the standard core (the fused path counted the context
// 192 wide: 4.3% more FLOPs, found by probing, 2026-11-30).
TEST(Flops, LatentAttentionModelFlopsIgnoreTheKernel) {
  auto model = [](AttentionKernel k) {
    PlanInput p = plan(64, 1, 1, 1, 64);
    p.ep = 64;
    p.attention = k;
    return iteration_flops(build_workload(scenario("deepseek-v3", "dgx-h100", p))).model;
  };
  EXPECT_NEAR(model(AttentionKernel::flash) / model(AttentionKernel::standard), 1.0, 1e-12);
}

}  // namespace
}  // namespace commscope
