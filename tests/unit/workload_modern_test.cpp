// Modern training in the model (issue 15): FlashAttention, FP8, uneven pipeline stages and the
// new system presets, against the papers' closed forms computed here independently.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "commscope/cost/compute.h"
#include "commscope/search/plan_search.h"
#include "commscope/sim/simulator.h"
#include "commscope/workload/params.h"
#include "test_util.h"

namespace commscope {
namespace {

using testing::named;
using testing::plan;
using testing::scenario;
using testing::scenario_error;

// FlashAttention-2 (Dao 2023, section 4.1, "FLOPs"): the forward of one head of dimension d
// over s_q queries and s_kv keys is 4 s_q s_kv d FLOPs (QK^T and PV), halved with the causal
// mask; the backward is 2.5 times the forward (the scores recomputed, then dV, dP, dQ, dK).
TEST(FlashAttention, FlopsAreTheFlashAttention2ClosedForm) {
  struct Case {
    const char* model;
    int tp;
    bool causal;
  };
  for (const Case c : {Case{"llama3-8b", 1, true}, Case{"llama3-8b", 4, true},
                       Case{"gpt3-175b", 8, true}, Case{"bert-large", 2, false}}) {
    SCOPED_TRACE(fmt::format("{} tp {}", c.model, c.tp));
    PlanInput p = plan(c.tp, c.tp, 1, 2);
    p.attention = AttentionKernel::flash;
    Scenario sc = scenario(c.model, "dgx-h100", p);
    Workload w = build_workload(sc);
    const Chunk& ch = w.roles[0].chunks[0];
    const double b = 2, s = static_cast<double>(sc.model.seq_length);
    const double heads = static_cast<double>(sc.model.heads) / c.tp;
    const double d = static_cast<double>(sc.model.hidden) / sc.model.heads;
    const double fwd = 4 * b * heads * s * s * d / (c.causal ? 2 : 1);
    auto f = named(ch.forward, "flash_attn");
    auto bw = named(ch.backward, "flash_attn");
    ASSERT_EQ(f.size(), static_cast<std::size_t>(ch.layers));
    ASSERT_EQ(bw.size(), static_cast<std::size_t>(ch.layers));
    EXPECT_DOUBLE_EQ(f[0].flops, fwd);
    EXPECT_DOUBLE_EQ(bw[0].flops, 2.5 * fwd);
    // No s x s kernels are left.
    EXPECT_TRUE(named(ch.forward, "attn_scores").empty());
    EXPECT_TRUE(named(ch.forward, "softmax").empty());
    EXPECT_TRUE(named(ch.forward, "attn_values").empty());
  }
}

// The preset decides (Llama 3 trains with flash), the flag wins; other presets stay standard.
TEST(FlashAttention, PresetDefaultAndFlag) {
  PlanInput p = plan(8, 8, 1, 1);
  EXPECT_EQ(scenario("llama3-70b", "dgx-h100", p).plan.attention, AttentionKernel::flash);
  EXPECT_EQ(scenario("gpt3-175b", "dgx-h100", p).plan.attention, AttentionKernel::standard);
  p.attention = AttentionKernel::standard;
  Scenario sc = scenario("llama3-70b", "dgx-h100", p);
  EXPECT_EQ(sc.plan.attention, AttentionKernel::standard);
  Workload w = build_workload(sc);
  EXPECT_FALSE(named(w.roles[0].chunks[0].forward, "attn_scores").empty());
  EXPECT_TRUE(named(w.roles[0].chunks[0].forward, "flash_attn").empty());
}

// Whose flash kernel (--attention-backend): the framework's by default (FlashAttention's own
// under PyTorch FSDP and DeepSpeed, cuDNN's fused one under Megatron or none), the flag over it.
// On one GPU without recompute an iteration is its kernels one after another, so the two
// backends' times differ by exactly the attention kernels' times at the two efficiencies
// (compute_time, summed here over the ops); on a system without a separate FlashAttention
// figure (dgx-a100-80gb) they are the same prediction.
TEST(FlashAttention, BackendPricesTheAttentionKernelsOnly) {
  PlanInput p = plan(1, 1, 1, 2, 2);
  p.attention = AttentionKernel::flash;
  p.recompute = Recompute::none;
  EXPECT_EQ(scenario("llama3-8b", "dgx-h100", p).plan.attention_backend, AttentionBackend::fused);
  p.framework = Framework::megatron;
  EXPECT_EQ(scenario("llama3-8b", "dgx-h100", p).plan.attention_backend, AttentionBackend::fused);
  for (Framework f : {Framework::fsdp, Framework::deepspeed}) {
    p.framework = f;
    EXPECT_EQ(scenario("llama3-8b", "dgx-h100", p).plan.attention_backend, AttentionBackend::flash);
  }
  p.framework = Framework::fsdp;
  p.attention_backend = AttentionBackend::fused;
  EXPECT_EQ(scenario("llama3-8b", "dgx-h100", p).plan.attention_backend, AttentionBackend::fused);
  p.framework.reset();

  auto time = [&](const char* system, AttentionBackend b) {
    PlanInput q = p;
    q.attention_backend = b;
    return simulate(build_workload(scenario("llama3-8b", system, q))).iteration_time;
  };
  Scenario sc = scenario("llama3-8b", "dgx-h100", p);
  const Calibration& cal = sc.system.calibration;
  ASSERT_GT(cal.flash_attention_efficiency, 0);
  ASSERT_NE(cal.flash_attention_efficiency, cal.attention_efficiency);
  const Calibration flash = kernel_calibration(cal, true);
  EXPECT_EQ(flash.attention_efficiency, cal.flash_attention_efficiency);
  EXPECT_EQ(kernel_calibration(cal, false).attention_efficiency, cal.attention_efficiency);
  Workload w = build_workload(sc);
  double expected = 0;
  int kernels = 0;
  for (const Chunk& ch : w.roles[0].chunks)
    for (const OpList* l : {&ch.forward, &ch.backward})
      for (const Op& op : l->ops())
        if (op.kind == OpKind::compute && op.compute == ComputeClass::attention) {
          expected += compute_time(op, sc.system.gpu, flash).value() -
                      compute_time(op, sc.system.gpu, cal).value();
          ++kernels;
        }
  EXPECT_EQ(kernels, 2 * sc.model.layers());  // each layer's forward and backward
  const double fused_s = time("dgx-h100", AttentionBackend::fused);
  const double flash_s = time("dgx-h100", AttentionBackend::flash);
  EXPECT_GT(expected, 0);
  EXPECT_NEAR(flash_s - fused_s, expected, 1e-9 * fused_s);
  EXPECT_EQ(time("dgx-a100-80gb", AttentionBackend::fused),
            time("dgx-a100-80gb", AttentionBackend::flash));
  // describe names the kernel; the plan JSON carries the backend
  testing::Outcome d = testing::run_shell(std::string(COMMSCOPE_BIN) +
                                          " describe --model llama3-8b --system dgx-h100 "
                                          "--nodes 1 --framework fsdp");
  EXPECT_EQ(d.status, 0) << d.err;
  EXPECT_NE(d.out.find("kernels: attention flash (FlashAttention's own kernel)"), std::string::npos)
      << d.out;
  testing::Outcome j = testing::run_shell(std::string(COMMSCOPE_BIN) +
                                          " predict --model llama3-8b --system dgx-h100 "
                                          "--nodes 1 --attention-backend flash --format json");
  EXPECT_EQ(j.status, 0) << j.err;
  EXPECT_NE(j.out.find("\"attention_backend\": \"flash\""), std::string::npos) << j.out;
}

// HBM traffic: FlashAttention never writes the s x s scores, so its bytes grow linearly with
// the sequence (the FlashAttention paper's point, Dao et al. 2022, Theorem 2: no Theta(N^2)
// term beyond what SRAM re-reads cost), while the standard core's grow quadratically.
TEST(FlashAttention, HbmBytesLinearInSequence) {
  auto bytes = [](AttentionKernel k, std::int64_t s, const char* name) {
    PlanInput p = plan(8, 8, 1, 1);
    p.attention = k;
    p.seq_length = s;
    Scenario sc = scenario("llama3-70b", "dgx-h100", p);
    Workload w = build_workload(sc);
    double sum = 0;
    for (const Op& o : named(w.roles[0].chunks[0].forward, name)) sum += o.mem_bytes;
    return sum;
  };
  const double f1 = bytes(AttentionKernel::flash, 2048, "flash_attn");
  const double f2 = bytes(AttentionKernel::flash, 4096, "flash_attn");
  EXPECT_NEAR(f2 / f1, 2.0, 1e-12);
  const double s1 = bytes(AttentionKernel::standard, 2048, "attn_scores");
  const double s2 = bytes(AttentionKernel::standard, 4096, "attn_scores");
  EXPECT_GT(s2 / s1, 3.0);
  EXPECT_LT(f1, s1);
}

// Latent attention (DeepSeek-V3's MLA) runs the fused kernel too, as Megatron-Core runs it
// through Transformer Engine: per head the scores over qk = 192 channels and the values over
// v = 128, so forward 2 s^2 (qk + v) FLOPs a head, halved by the causal mask, backward 2.5 times
// (FlashAttention-2's closed form with the two widths); HBM: Q and K of qk, V and O of v
// channels a head, and the fp32 logsumexp. No s x s kernel is left.
TEST(FlashAttention, LatentAttentionIsFused) {
  for (int tp : {1, 2}) {
    SCOPED_TRACE(tp);
    PlanInput p = plan(64 * tp, tp, 1, 1);
    p.ep = 64;
    p.expert_tp = 1;
    p.sequence_parallel = tp > 1;
    p.attention = AttentionKernel::flash;
    const Scenario sc = scenario("deepseek-v3", "dgx-h100", p);
    const Workload w = build_workload(sc);
    const Chunk& ch = w.roles[0].chunks[0];
    const double s = static_cast<double>(sc.model.seq_length), heads = 128.0 / tp;
    const double qk = 192, v = 128;
    const double fwd = 2 * heads * s * s * (qk + v) / 2;
    auto f = named(ch.forward, "flash_attn");
    auto bw = named(ch.backward, "flash_attn");
    const auto blocks = static_cast<std::size_t>(ch.layers + sc.plan.mtp_layers);  // + MTP's
    ASSERT_EQ(f.size(), blocks);
    ASSERT_EQ(bw.size(), blocks);
    EXPECT_DOUBLE_EQ(f[0].flops, fwd);
    EXPECT_DOUBLE_EQ(bw[0].flops, 2.5 * fwd);
    EXPECT_DOUBLE_EQ(f[0].mem_bytes, 2 * s * heads * (2 * qk + 2 * v) + 4 * heads * s);
    EXPECT_DOUBLE_EQ(bw[0].mem_bytes, 2 * s * heads * (qk + 2 * v + qk + v) + 8 * heads * s +
                                          2 * s * heads * (2 * qk + v));
    EXPECT_TRUE(named(ch.forward, "attn_scores").empty());
    EXPECT_TRUE(named(ch.forward, "softmax").empty());
    EXPECT_TRUE(named(ch.forward, "attn_values").empty());
  }
  // The standard kernel keeps the unfused core.
  PlanInput p = plan(64, 1, 1, 1);
  p.ep = 64;
  p.attention = AttentionKernel::standard;
  const Workload w = build_workload(scenario("deepseek-v3", "dgx-h100", p));
  EXPECT_FALSE(named(w.roles[0].chunks[0].forward, "attn_scores").empty());
  EXPECT_TRUE(named(w.roles[0].chunks[0].forward, "flash_attn").empty());
}

// Activation memory per layer, Korthikanti et al. 2022 Table 2 (16-bit, GPT with dropout):
// the standard core keeps 5as^2b bytes (softmax output 2, dropout mask 1, dropout output 2);
// FlashAttention keeps none of it and saves the logsumexp instead: fp32, one per query row and
// head, 4asb bytes (Dao 2023, Algorithm 1, line 12: "Write L_i to HBM"). The 34sbh of
// everything else is unchanged. So: sbh 34 + 4asb (no parallelism), sbh (10 + 24/t) + 4asb/t
// (TP), (sbh 34 + 4asb)/t (TP + SP); selective recompute changes nothing under flash.
TEST(FlashAttention, ActivationMemoryIsKorthikantiWithoutTheScores) {
  struct Case {
    int t;
    bool sp;
  };
  for (const char* name : {"gpt3-175b", "megatron-18.4b"})
    for (const Case c : {Case{1, false}, Case{8, false}, Case{8, true}})
      for (Recompute r : {Recompute::none, Recompute::selective}) {
        SCOPED_TRACE(fmt::format("{} t {} sp {} {}", name, c.t, c.sp, to_string(r)));
        PlanInput p = plan(c.t, c.t, 1, 4);
        p.sequence_parallel = c.sp;
        p.recompute = r;
        p.precision = Precision::bf16;
        p.attention = AttentionKernel::flash;
        Scenario sc = scenario(name, "dgx-h100", p);
        const double s = static_cast<double>(sc.model.seq_length), b = 4,
                     h = static_cast<double>(sc.model.hidden),
                     a = static_cast<double>(sc.model.heads), t = c.t;
        const double lse = 4 * a * s * b / t;
        const double expect = c.t == 1 ? s * b * h * 34 + lse
                              : c.sp   ? s * b * h * 34 / t + lse
                                       : s * b * h * (10 + 24 / t) + lse;
        EXPECT_NEAR(block_activation_bytes(sc, 2).value() / expect, 1.0, 1e-12);
      }
}

// Selective recompute replays only the attention core; with FlashAttention there is none to
// replay (its backward recomputes the scores itself), so the backward has no recompute op.
TEST(FlashAttention, SelectiveRecomputeReplaysNothing) {
  PlanInput p = plan(8, 8, 1, 1);
  p.recompute = Recompute::selective;
  for (AttentionKernel k : {AttentionKernel::standard, AttentionKernel::flash}) {
    p.attention = k;
    Workload w = build_workload(scenario("llama3-8b", "dgx-h100", p));
    int recomputed = 0;
    for (const Op& o : w.roles[0].chunks[0].backward.ops())
      recomputed += o.phase == Phase::recompute ? 1 : 0;
    if (k == AttentionKernel::flash)
      EXPECT_EQ(recomputed, 0);
    else
      EXPECT_GT(recomputed, 0);
  }
}

// Megatron-Core checkpoints the core attention module whatever kernel runs it
// (megatron/core/transformer/attention.py, _checkpointed_attention_forward): under flash its
// selective recompute runs the fused kernel's forward again, one per block, and keeps the
// checkpoint's inputs (Q, K, V, counted anyway) but not the kernel's logsumexp, 4 b (a/t) s
// bytes (FlashAttention-2, Algorithm 1 line 12), nor under FP8 the kernel's own 16-bit O beside
// the projection's FP8 input, 2 b s q / t. The legacy Megatron-LM model (Megatron-DeepSpeed)
// skipped the checkpoint under flash: under --framework deepspeed nothing is replayed.
TEST(FlashAttention, SelectiveRecomputeUnderMegatronCoreReplaysTheKernel) {
  for (bool fp8 : {false, true}) {
    SCOPED_TRACE(fp8 ? "fp8" : "bf16");
    PlanInput p = plan(8, 8, 1, 1, 8);
    p.attention = AttentionKernel::flash;
    p.sequence_parallel = true;
    p.fp8 = fp8;
    p.framework = Framework::megatron;
    PlanInput sel = p;
    sel.recompute = Recompute::selective;
    const Scenario none_sc = scenario("llama3-8b", "dgx-h100", p);
    const Scenario sel_sc = scenario("llama3-8b", "dgx-h100", sel);
    const Workload none_w = build_workload(none_sc), sel_w = build_workload(sel_sc);
    const Chunk& ch = sel_w.roles[0].chunks[0];
    const auto fwd = named(ch.forward, "flash_attn");
    ASSERT_EQ(fwd.size(), static_cast<std::size_t>(ch.layers));
    // Causal llama3-8b: 32 heads of 128 channels over TP 8, 8,192 tokens, micro-batch 1.
    const double b = 1, s = 8192, heads = 32.0 / 8, d = 128;
    const double kernel = 4 * b * heads * s * s * d / 2;
    int replays = 0;
    for (const Op& o : ch.backward.ops())
      if (o.phase == Phase::recompute) {
        ++replays;
        EXPECT_EQ(o.name, "flash_attn");
        EXPECT_DOUBLE_EQ(o.flops, kernel);
        EXPECT_DOUBLE_EQ(o.mem_bytes, fwd[0].mem_bytes);
      }
    EXPECT_EQ(replays, ch.layers);
    // Hardware FLOPs grow by the replays, model FLOPs not at all (8 TP ranks, DP 1: 8
    // micro-batches of the global batch 8).
    ASSERT_EQ(sel_w.microbatches, 8);
    const FlopCount f_none = iteration_flops(none_w), f_sel = iteration_flops(sel_w);
    EXPECT_DOUBLE_EQ(f_sel.model, f_none.model);
    EXPECT_NEAR(f_sel.hardware - f_none.hardware, 8 * 8 * ch.layers * kernel,
                1e-9 * f_sel.hardware);
    // Memory: the logsumexp goes (and the kernel's 16-bit O under FP8).
    const double q = 4096, a = 2;
    const double dropped = 4 * b * heads * s + (fp8 ? a * b * s * q / 8 : 0.0);
    EXPECT_DOUBLE_EQ(
        block_activation_bytes(none_sc, 3).value() - block_activation_bytes(sel_sc, 3).value(),
        dropped);
    // The replays cost time.
    EXPECT_GT(simulate(sel_w).iteration_time, simulate(none_w).iteration_time);
    // The legacy Megatron-LM model (Megatron-DeepSpeed): no checkpoint under flash.
    PlanInput ds = sel;
    ds.framework = Framework::deepspeed;
    ds.zero = 1;
    PlanInput ds_none = ds;
    ds_none.recompute = Recompute::none;
    const Scenario ds_sc = scenario("llama3-8b", "dgx-h100", ds);
    const Workload ds_w = build_workload(ds_sc);
    int ds_replays = 0;
    for (const Op& o : ds_w.roles[0].chunks[0].backward.ops())
      ds_replays += o.phase == Phase::recompute ? 1 : 0;
    EXPECT_EQ(ds_replays, 0);
    EXPECT_DOUBLE_EQ(block_activation_bytes(ds_sc, 3).value(),
                     block_activation_bytes(scenario("llama3-8b", "dgx-h100", ds_none), 3).value());
  }
}

// FP8 (Transformer Engine): the block GEMMs run at the system's fp8 peak; the LM head stays in
// bf16; casts are memory-bound ops of their own.
TEST(Fp8, BlockGemmsRunAtTheFp8Peak) {
  PlanInput p = plan(8, 8, 1, 1);
  p.fp8 = true;
  Scenario sc = scenario("llama3-70b", "dgx-h100", p);
  Workload w = build_workload(sc);
  const Chunk& ch = w.roles[0].chunks[0];
  for (const char* g : {"qkv", "attn_out", "mlp_in", "mlp_out"}) {
    auto ops = named(ch.forward, g);
    ASSERT_FALSE(ops.empty()) << g;
    EXPECT_EQ(ops[0].dtype, DType::fp8) << g;
    // Roofline against the preset's fp8 figure (NVIDIA H100 SXM datasheet, 1,978.9 dense).
    const Calibration& cal = sc.system.calibration;
    const double eff = matmul_efficiency(ops[0].flops, cal.gemm_efficiency, cal.gemm_half_flops,
                                         cal.gemm_steepness);
    const double t_flops = ops[0].flops / (1978.9e12 * eff);
    const double t_mem =
        ops[0].mem_bytes / (sc.system.gpu.memory_bandwidth.value() * cal.memory_efficiency);
    EXPECT_NEAR(compute_time(ops[0], sc.system.gpu, cal).value(),
                std::max(t_flops, t_mem) + cal.kernel_overhead.value(), 1e-15);
  }
  EXPECT_EQ(named(ch.forward, "fp8_cast").size(), 4u * ch.layers);
  auto head = named(w.roles[0].chunks[0].forward, "lm_head");
  ASSERT_EQ(head.size(), 1u);
  EXPECT_EQ(head[0].dtype, DType::bf16);
  // FP8 makes the step faster in the GEMMs: the forward GEMM FLOP time halves where
  // compute-bound (peak 1978.9 vs 989.4).
  EXPECT_NEAR(sc.system.gpu.peak.fp8.value() / sc.system.gpu.peak.bf16.value(), 2.0, 1e-3);
}

// Refused with one line on a system without an fp8 figure (A100), and under fp32.
TEST(Fp8, RefusedWithoutAnFp8Peak) {
  PlanInput p = plan(8, 8, 1, 1);
  p.fp8 = true;
  std::string e = scenario_error("llama3-8b", "dgx-a100-80gb", p);
  EXPECT_EQ(e.rfind("--fp8: expected a system with an FP8 peak", 0), 0u) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);
  p.precision = Precision::fp32;
  e = scenario_error("llama3-8b", "dgx-h100", p);
  EXPECT_NE(e.find("--fp8"), std::string::npos) << e;
}

// FP8 memory where Transformer Engine keeps it: the saved inputs of the block GEMMs in 1 byte
// (QKV input, output-projection input, MLP input, MLP output-projection input), FlashAttention's
// output kept in 16 bit for its own backward besides; one FP8 copy of every block GEMM weight,
// with its transpose (Transformer Engine 2.x quantizes a weight rowwise and columnwise): 2 bytes.
// Per layer from Korthikanti's breakdown (GPT, f = 4h, dropout): 34sbh - sbh (QKV input)
// - sbh (MLP input) - 4sbh (GELU output, 8sbh -> 4sbh) + sbh (FP8 copy of the attention
// output beside the 16-bit one) = 29sbh, plus the logsumexp 4asb.
TEST(Fp8, ActivationAndWeightMemory) {
  PlanInput p = plan(1, 1, 1, 2);
  p.attention = AttentionKernel::flash;
  p.fp8 = true;
  Scenario sc = scenario("gpt3-175b", "dgx-h100", p);
  const double s = static_cast<double>(sc.model.seq_length), b = 2,
               h = static_cast<double>(sc.model.hidden), a = static_cast<double>(sc.model.heads);
  EXPECT_NEAR(block_activation_bytes(sc, 0).value() / (29 * s * b * h + 4 * a * s * b), 1.0, 1e-12);

  PlanInput q = plan(8, 8, 1, 1);
  Scenario plain = scenario("llama3-8b", "dgx-h100", q);
  q.fp8 = true;
  Scenario fp8 = scenario("llama3-8b", "dgx-h100", q);
  Workload w0 = build_workload(plain), w1 = build_workload(fp8);
  const double extra =
      (memory_per_rank(w1, w1.roles[0]).weights - memory_per_rank(w0, w0.roles[0]).weights).value();
  // Llama 3 8B block GEMM weights on a TP-8 rank: (h(q + 2kv) + qh + 3hf) / 8 per block.
  const double hh = 4096, qq = 4096, kv = 1024, f = 14336;
  EXPECT_DOUBLE_EQ(extra, 2.0 * 32 * (hh * (qq + 2 * kv) + qq * hh + 3 * hh * f) / 8);
  // A rank copies its own experts only (experts / EP): Mixtral 8x7B on 8 GPUs, EP 8 against
  // EP 1 holds 7/8 of the 8 experts' 3hf weights fewer per layer, 32 layers.
  auto fp8_extra = [&](int ep) {
    PlanInput e = plan(8, 1, 1, 1);
    e.ep = ep;
    Scenario plain_moe = scenario("mixtral-8x7b", "dgx-h100", e);
    e.fp8 = true;
    Scenario fp8_moe = scenario("mixtral-8x7b", "dgx-h100", e);
    Workload wa = build_workload(plain_moe), wb = build_workload(fp8_moe);
    return (memory_per_rank(wb, wb.roles[0]).weights - memory_per_rank(wa, wa.roles[0]).weights)
        .value();
  };
  EXPECT_DOUBLE_EQ(fp8_extra(1) - fp8_extra(8), 2.0 * 32 * 7 * 3 * 4096 * 14336);
  // Under ZeRO-3 / FSDP only the gathered blocks hold an FP8 copy: the current and the
  // prefetched one, two bytes for each of two blocks' GEMM weights.
  for (bool fsdp : {false, true}) {
    PlanInput z = plan(16, 8, 1, 1);
    if (fsdp) {
      z.framework = Framework::fsdp;
    } else {
      z.zero = 3;
    }
    Scenario zplain = scenario("llama3-8b", "dgx-h100", z);
    z.fp8 = true;
    Scenario zfp8 = scenario("llama3-8b", "dgx-h100", z);
    EXPECT_EQ(zfp8.plan.zero, 3);
    Workload v0 = build_workload(zplain), v1 = build_workload(zfp8);
    EXPECT_DOUBLE_EQ(
        (memory_per_rank(v1, v1.roles[0]).weights - memory_per_rank(v0, v0.roles[0]).weights)
            .value(),
        2 * 2 * (hh * (qq + 2 * kv) + qq * hh + 3 * hh * f) / 8);
  }
}

// Megatron-Core --fp8-param-gather: the blocks' GEMM weights are FP8 parameters (1 byte) with
// their transpose (1 byte), in place of the 16-bit weights and Transformer Engine's 2-byte FP8
// copy; the parameter all-gathers carry them in 1 byte; the weight's forward cast (2 + 1 bytes
// an element) becomes the transpose made after the gather (1 + 1 bytes). Llama 3 8B,
// TP 8, DP 2: G = 32 (h(q + 2kv) + qh + 3hf) / 8 GEMM weights a rank.
TEST(Fp8, ParamGather) {
  const double hh = 4096, qq = 4096, kv = 1024, f = 14336;
  const double G = 32 * (hh * (qq + 2 * kv) + qq * hh + 3 * hh * f) / 8, block = G / 32;
  auto build = [](int zero, bool fp8, bool gather) {
    PlanInput q = plan(16, 8, 1, 1, 8);
    q.zero = zero;
    q.fp8 = fp8;
    if (gather) q.fp8_param_gather = true;
    return build_workload(scenario("llama3-8b", "dgx-h100", q));
  };
  auto weights = [](const Workload& w) { return memory_per_rank(w, w.roles[0]).weights.value(); };
  auto gathered = [](const Workload& w) {  // bytes of the rank's parameter all-gathers
    double bytes = 0;
    for (const Op& op : w.roles[0].step.ops())
      if (op.kind == OpKind::comm && op.collective == Collective::all_gather) bytes += op.bytes;
    for (const Chunk& ch : w.roles[0].chunks)
      for (const OpList* l : {&ch.forward, &ch.backward})
        for (const Op& op : l->ops())
          if (op.name == "zero3_param_all_gather") bytes += op.bytes;
    return bytes;
  };
  // ZeRO-1 (the distributed optimizer): 1 + 1 bytes in place of 2, so the weights are the
  // 16-bit ones' bytes; TE's cache would add 2 bytes a weight.
  const Workload plain = build(1, false, false), cached = build(1, true, false),
                 fp8p = build(1, true, true);
  EXPECT_DOUBLE_EQ(weights(fp8p), weights(plain));
  EXPECT_DOUBLE_EQ(weights(cached) - weights(fp8p), 2 * G);
  EXPECT_TRUE(fp8p.scenario.plan.fp8_param_gather);
  // The all-gathers: G elements in 1 byte instead of 2, the rest unchanged.
  ASSERT_GT(gathered(cached), 0);
  EXPECT_NEAR(gathered(cached) - gathered(fp8p), G, 1e-6 * G);
  // The forward casts (2 FLOPs an element, the weights' once an iteration over 4 micro-batches)
  // count the weights at 2 bytes of the cast's 3: 2 (G / 4) / 3 fewer FLOPs a micro-batch.
  auto cast_flops = [](const Workload& w) {
    double flops = 0;
    for (const Op& op : w.roles[0].chunks[0].forward.ops())
      if (op.name == "fp8_cast") flops += op.flops;
    return flops;
  };
  EXPECT_NEAR(cast_flops(cached) - cast_flops(fp8p), 2 * G / 4 / 3, 1e-9 * G);
  EXPECT_LE(simulate(fp8p).iteration_time, simulate(cached).iteration_time);
  // ZeRO-3: the shard's GEMM weights in 1 byte (G / 2 of them on DP 2), the gathered blocks'
  // transposes (two blocks) beside; each block's gather carries its GEMM weights in 1 byte.
  const Workload z_plain = build(3, false, false), z_fp8p = build(3, true, true);
  EXPECT_DOUBLE_EQ(weights(z_fp8p) - weights(z_plain), -G / 2 + 2 * block);
  EXPECT_NEAR(gathered(z_plain) - gathered(z_fp8p), 2 * G, 1e-6 * G);  // forward and backward
  // describe's label: a gather of GEMM weights in FP8 beside norms (and embeddings) in 16 bits
  // is float8+bfloat16, its own row; no other all-gather is so marked.
  for (const Workload* w : {&fp8p, &z_fp8p, &cached}) {
    int marked = 0;
    for (const CommVolume& v : comm_volume(*w, w->roles[0])) {
      if (!v.fp8_weights) continue;
      ++marked;
      EXPECT_EQ(v.collective, Collective::all_gather);
      EXPECT_EQ(v.group, CommGroup::data);
      EXPECT_EQ(v.dtype, DType::bf16);
    }
    int gathers = 0;  // pattern rows of FP8 weights: parameter gathers only (ZeRO-3's of the
                      // embedding carry none)
    for (const PatternCollective& c : comm_pattern(*w, w->roles[0]))
      if (c.fp8_weights) {
        ++gathers;
        EXPECT_TRUE(c.name == "zero3_param_all_gather" || c.name == "megatron_param_all_gather" ||
                    c.name == "zero_param_all_gather")
            << c.name;
      }
    EXPECT_EQ(gathers > 0, w != &cached);
    EXPECT_EQ(marked, w == &cached ? 0 : 1);
  }
  testing::Outcome shown = testing::run_shell(
      std::string(COMMSCOPE_BIN) +
      " describe --model llama3-8b --system dgx-h100 --gpus 16 --tp 8 --zero 1 --fp8 "
      "--fp8-param-gather");
  EXPECT_EQ(shown.status, 0) << shown.err;
  EXPECT_NE(shown.out.find("float8+bfloat16"), std::string::npos) << shown.out;
  // Errors name the flag: without --fp8, without a sharded optimizer, under FSDP or DeepSpeed.
  PlanInput e = plan(16, 8, 1, 1, 8);
  e.fp8_param_gather = true;
  EXPECT_EQ(
      scenario_error("llama3-8b", "dgx-h100", e).rfind("--fp8-param-gather: expected --fp8", 0),
      0u);
  e.fp8 = true;
  EXPECT_EQ(scenario_error("llama3-8b", "dgx-h100", e)
                .rfind("--fp8-param-gather: expected a sharded optimizer", 0),
            0u);
  e.framework = Framework::fsdp;
  EXPECT_EQ(scenario_error("llama3-8b", "dgx-h100", e)
                .rfind("--fp8-param-gather: expected Megatron's distributed optimizer", 0),
            0u);
}

// Activation offloading (Megatron-Core --cpu-offloading-num-layers, Transformer Engine's
// double-buffered CPU offload handler), Llama 3 8B on 8 H100s, PP 1, 2 micro-batches:
// - memory: the first N layers' activations leave the GPU, two of them staged: N - min(N, 2)
//   layers' activations fewer (every block is alike);
// - each copy on the timeline takes the layer's activations over the host copy bandwidth, one
//   per offloaded layer and micro-batch each way, one at a time per direction; a layer's copy
//   out begins after its forward, its copy back ends before its backward begins;
// - with a host link fast enough the copies hide behind compute (the iteration is unchanged);
//   over PCIe they do not, and the wait shows as memory copies in the breakdown;
// - refused with PP > 1, N >= the layers, and on a system without a host copy bandwidth.
TEST(ActivationOffload, MemoryCopiesAndTheirTime) {
  const int n = 6;
  PlanInput p = plan(8, 1, 1, 2, 32);
  Scenario none = scenario("llama3-8b", "dgx-h100", p);
  p.cpu_offload_layers = n;
  Scenario off = scenario("llama3-8b", "dgx-h100", p);
  const Workload w0 = build_workload(none), w1 = build_workload(off);
  const double layer = block_activation_bytes(off, 0).value();
  EXPECT_DOUBLE_EQ(memory_per_rank(w0, w0.roles[0]).activations.value() -
                       memory_per_rank(w1, w1.roles[0]).activations.value(),
                   (n - 2) * layer);

  SimOptions timeline;
  timeline.timeline = true;
  const Prediction pred = simulate(w1, timeline);
  const double bw = off.system.node.host_copy_pinned.value();
  std::vector<const Event*> copies;
  for (const Event& e : pred.timeline.events)
    if (e.kind == EventKind::memcpy) copies.push_back(&e);
  ASSERT_EQ(copies.size(), static_cast<std::size_t>(2 * n * 2));  // n layers, 2 ways, 2 micro
  for (const Event* c : copies) {
    EXPECT_NEAR(c->dur, layer / bw, 1e-15);
    EXPECT_GE(c->layer, 0);
    EXPECT_LT(c->layer, n);
    // The layer's compute in the same micro-batch: no compute of it runs while its copy out
    // begins (its forward is done), and none that begins after its copy back begins starts
    // before that copy ends (its backward waits for it).
    bool out = true;  // the first copy of its layer and micro-batch
    for (const Event* d : copies)
      if (d != c && d->layer == c->layer && d->microbatch == c->microbatch && d->start < c->start)
        out = false;
    for (const Event& e : pred.timeline.events) {
      if (e.kind != EventKind::compute || e.layer != c->layer || e.microbatch != c->microbatch)
        continue;
      if (out && e.start < c->start) {
        EXPECT_LE(e.end(), c->start + 1e-12);
      }
      if (!out && e.start >= c->start) {
        EXPECT_GE(e.start + 1e-12, c->end());
      }
    }
  }
  // one copy at a time per direction and micro-batch
  for (const Event* x : copies)
    for (const Event* y : copies)
      if (x != y && x->microbatch == y->microbatch && x->name == y->name) {
        EXPECT_TRUE(x->end() <= y->start + 1e-12 || y->end() <= x->start + 1e-12);
      }
  // PCIe: the copies cost time, booked as memory copies
  const double t0 = simulate(w0).iteration_time;
  EXPECT_GT(pred.iteration_time, t0);
  EXPECT_GT(pred.mean.memcpy, 0);
  EXPECT_NEAR(pred.mean.compute + pred.mean.exposed + pred.mean.memcpy + pred.mean.idle,
              pred.mean.wall, 1e-9 * pred.mean.wall);
  // a host link 1,000 times faster: hidden
  auto system = load_system("dgx-h100");
  auto model = load_model("llama3-8b");
  ASSERT_TRUE(system.ok() && model.ok());
  system->node.host_copy_pinned = units::gb_per_s(64000);
  auto fast = resolve_scenario(*model, *system, off.network, p);
  ASSERT_TRUE(fast.ok()) << fast.error().message;
  EXPECT_DOUBLE_EQ(simulate(build_workload(*fast)).iteration_time, t0);

  PlanInput q = plan(16, 1, 2, 2, 32);
  q.cpu_offload_layers = 4;
  EXPECT_NE(scenario_error("llama3-8b", "dgx-h100", q).find("pipeline-parallel size 1"),
            std::string::npos);
  PlanInput r = plan(8, 1, 1, 2, 32);
  r.cpu_offload_layers = 32;
  EXPECT_EQ(scenario_error("llama3-8b", "dgx-h100", r).rfind("--cpu-offloading-num-layers:", 0),
            0u);
  r.cpu_offload_layers = 4;
  EXPECT_NE(scenario_error("llama3-8b", "vtrain-a100", r).find("host_copy_pinned_gbs"),
            std::string::npos);
}

// Uneven pipeline stages (Llama 3 405B: 126 layers on 16 stages, one fewer on the first and
// the last; Meta 2024, section 3.3.2): Megatron's first/last flags and an explicit list give the
// same split; every layer is on exactly one stage and the parameters add up.
TEST(UnevenStages, FirstLastAndListAgree) {
  PlanInput p = plan(128, 8, 16, 1, 64);
  EXPECT_NE(scenario_error("llama3-405b", "dgx-h100", p).find("--pipeline-model-parallel-size"),
            std::string::npos);  // the even split is still refused where it is impossible
  p.first_stage_layers = 7;
  p.last_stage_layers = 7;
  Scenario a = scenario("llama3-405b", "dgx-h100", p);
  std::vector<int> expect(16, 8);
  expect.front() = expect.back() = 7;
  EXPECT_EQ(a.plan.stage_layers, expect);
  PlanInput q = plan(128, 8, 16, 1, 64);
  q.stage_layers = expect;
  Scenario b = scenario("llama3-405b", "dgx-h100", q);
  EXPECT_EQ(b.plan.stage_layers, expect);

  Workload w = build_workload(a);
  ASSERT_EQ(w.roles.size(), 16u);
  int next = 0;
  std::int64_t params = 0;
  for (const Role& r : w.roles) {
    ASSERT_EQ(r.chunks.size(), 1u);
    EXPECT_EQ(r.chunks[0].first_layer, next);
    EXPECT_EQ(r.chunks[0].layers, expect[static_cast<std::size_t>(r.stage)]);
    next += r.chunks[0].layers;
    params += r.params;
    // one flash kernel per layer of the stage
    EXPECT_EQ(named(r.chunks[0].forward, "flash_attn").size(),
              static_cast<std::size_t>(r.chunks[0].layers));
  }
  EXPECT_EQ(next, 126);
  // Every parameter on one stage: the stages' TP shards add up to the model (norms replicated
  // over TP are counted once per TP rank, so compare the TP-split total).
  std::int64_t per_rank_total = outer_params(a.model).word_embedding / 8 +
                                outer_params(a.model).lm_head / 8 +
                                outer_params(a.model).final_norm;
  for (int l = 0; l < 126; ++l) per_rank_total += block_params(a.model, l, 8);
  EXPECT_EQ(params, per_rank_total);
  // The embedding on the first stage, the head and loss on the last.
  EXPECT_FALSE(named(w.roles[0].chunks[0].forward, "embedding").empty());
  EXPECT_FALSE(named(w.roles[15].chunks[0].forward, "cross_entropy").empty());
  EXPECT_TRUE(named(w.roles[7].chunks[0].forward, "cross_entropy").empty());
}

// With virtual stages, --decoder-first/last-pipeline-num-layers are the first and last pipeline
// rank's layers, split evenly over its chunks, as Megatron-Core's get_transformer_layer_offset
// places them; the other ranks' chunks share the rest evenly (they were put on the first and last
// virtual stage alone, found by probing, 2026-11-30). 32 layers, PP 4 x VP 2, first 2: rank 0's
// chunks 1 + 1, every other chunk 5.
TEST(UnevenStages, FirstAndLastAreTheRanksOverTheirChunks) {
  PlanInput p = plan(16, 1, 4, 1, 64);
  p.virtual_stages = 2;
  p.schedule = Schedule::interleaved;
  p.first_stage_layers = 2;
  const Scenario a = scenario("llama2-7b", "dgx-a100-80gb", p);
  EXPECT_EQ(a.plan.stage_layers, (std::vector<int>{1, 5, 5, 5, 1, 5, 5, 5}));
  p.last_stage_layers = 4;  // 26 left for 2 ranks x 2 chunks: no even share
  EXPECT_NE(scenario_error("llama2-7b", "dgx-a100-80gb", p).find("2 pipeline stages x 2 virtual"),
            std::string::npos);
  p.last_stage_layers = 6;  // 24 left: 6 a chunk
  const Scenario b = scenario("llama2-7b", "dgx-a100-80gb", p);
  EXPECT_EQ(b.plan.stage_layers, (std::vector<int>{1, 6, 6, 3, 1, 6, 6, 3}));
}

// Llama 3 405B on 128 GPUs (TP 8, PP 16) interleaved over 8 chunks a stage, as an explicit list:
// 126 layers in 128 chunks of one, the first holding only the embedding and the last only the
// head and loss.
PlanInput llama3_405b_interleaved() {
  PlanInput p = plan(128, 8, 16, 1, 64);
  p.virtual_stages = 8;
  std::vector<int> v(128, 1);
  v.front() = v.back() = 0;
  p.stage_layers = v;
  return p;
}

// Llama 3 405B's interleaved layout (Meta 2024, section 3.3.2): the first model chunk of the
// first stage holds only the embedding and the last chunk of the last stage only the output
// projection and loss; here 16 stages x 8 chunks of one layer each, 126 layers + 2 such chunks.
TEST(UnevenStages, InterleavedWithEmbeddingAndLossChunks) {
  const PlanInput p = llama3_405b_interleaved();
  Scenario sc = scenario("llama3-405b", "dgx-h100", p);
  Workload w = build_workload(sc);
  const Chunk& first = w.roles[0].chunks[0];
  const Chunk& last = w.roles[15].chunks[7];
  EXPECT_EQ(first.layers, 0);
  EXPECT_EQ(last.layers, 0);
  EXPECT_FALSE(named(first.forward, "embedding").empty());
  EXPECT_TRUE(named(first.forward, "flash_attn").empty());
  EXPECT_FALSE(named(last.forward, "cross_entropy").empty());
  EXPECT_TRUE(named(last.forward, "flash_attn").empty());
  // chunk 1 of stage 0 is virtual stage 16: layers before it are virtual stages 0..15
  EXPECT_EQ(w.roles[0].chunks[1].first_layer, 15);
  int layers = 0;
  for (const Role& r : w.roles)
    for (const Chunk& c : r.chunks) layers += c.layers;
  EXPECT_EQ(layers, 126);
}

// Megatron-Core's --account-for-embedding-in-pipeline-split and
// --account-for-loss-in-pipeline-split (NVIDIA's Llama 3.1 405B recipe) give the split the
// explicit list above spells: 126 layers + 2 over 16 x 8 chunks of one, the first and the last
// empty; Megatron-LM's --num-layers-per-virtual-pipeline-stage makes the virtual stages the
// layers (both counted) per stage over it (arguments.py): 128 / 16 / 1 = 8. Without the two,
// the same flag on 32 layers, PP 4, 2 a chunk is --vp 4. The refusals are Megatron's.
TEST(UnevenStages, AccountForEmbeddingAndLossAndLayersPerVirtualStage) {
  const PlanInput list = llama3_405b_interleaved();
  const std::vector<int>& v = *list.stage_layers;
  PlanInput flags = plan(128, 8, 16, 1, 64);
  flags.account_embedding = flags.account_loss = true;
  flags.layers_per_virtual_stage = 1;
  const Scenario a = scenario("llama3-405b", "dgx-h100", list),
                 b = scenario("llama3-405b", "dgx-h100", flags);
  EXPECT_EQ(b.plan.virtual_stages, 8);
  EXPECT_EQ(b.plan.stage_layers, v);
  EXPECT_DOUBLE_EQ(simulate(build_workload(b)).iteration_time,
                   simulate(build_workload(a)).iteration_time);
  // Without virtual stages: 128 / 16 = 8 a stage, the first and last 7 (the first/last flags).
  PlanInput one = plan(128, 8, 16, 1, 64);
  one.account_embedding = one.account_loss = true;
  std::vector<int> seven(16, 8);
  seven.front() = seven.back() = 7;
  EXPECT_EQ(scenario("llama3-405b", "dgx-h100", one).plan.stage_layers, seven);
  // Only the embedding counted: 127 layers over 16 stages does not split.
  one.account_loss.reset();
  EXPECT_NE(scenario_error("llama3-405b", "dgx-h100", one)
                .find("--account-for-embedding-in-pipeline-split: expected the 126 layers + 1"),
            std::string::npos)
      << scenario_error("llama3-405b", "dgx-h100", one);
  // Layers per chunk on an even model: --vp 4.
  PlanInput per = plan(16, 1, 4, 1, 64), vp = plan(16, 1, 4, 1, 64);
  per.layers_per_virtual_stage = 2;
  vp.virtual_stages = 4;
  EXPECT_EQ(scenario("llama2-7b", "dgx-a100-80gb", per).plan.virtual_stages, 4);
  EXPECT_DOUBLE_EQ(
      simulate(build_workload(scenario("llama2-7b", "dgx-a100-80gb", per))).iteration_time,
      simulate(build_workload(scenario("llama2-7b", "dgx-a100-80gb", vp))).iteration_time);
  // Megatron-LM's refusals: a count the stage's layers do not divide, beside --vp, beside a
  // per-stage list; the account flags beside first/last counts.
  per.layers_per_virtual_stage = 3;  // 8 layers a stage
  EXPECT_NE(scenario_error("llama2-7b", "dgx-a100-80gb", per)
                .find("--num-layers-per-virtual-pipeline-stage: expected a divisor of the 8 "
                      "layers per pipeline stage"),
            std::string::npos);
  per.layers_per_virtual_stage = 2;
  per.virtual_stages = 4;
  EXPECT_NE(scenario_error("llama2-7b", "dgx-a100-80gb", per)
                .find("--num-layers-per-virtual-pipeline-stage: expected no --vp"),
            std::string::npos);
  per.virtual_stages.reset();
  per.first_stage_layers = 4;
  EXPECT_NE(scenario_error("llama2-7b", "dgx-a100-80gb", per)
                .find("--num-layers-per-virtual-pipeline-stage: expected no per-stage"),
            std::string::npos);
  PlanInput both = plan(128, 8, 16, 1, 64);
  both.account_loss = true;
  both.first_stage_layers = 7;
  EXPECT_NE(scenario_error("llama3-405b", "dgx-h100", both)
                .find("--account-for-loss-in-pipeline-split: expected no layout"),
            std::string::npos);
}

// Megatron-Core's --pipeline-model-parallel-layout: its examples unroll as Megatron's parser
// does (pipeline_parallel_layer_layout.py: "Ettt|(tt|)*29,m|L" is E t t t, 29 x (t t), m, L),
// and a layout gives the same plan as the per-stage list it spells, the virtual stages inferred
// from its stage count over PP: Llama 3 405B's interleaved layout with an embedding-only first
// and a loss-only last chunk (126 layers: "E|t*126 stages|L" on PP 16 is 8 virtual stages).
TEST(UnevenStages, MegatronLayoutIsTheListItSpells) {
  auto counts = [](std::string_view s) {
    auto r = parse_pipeline_layout(s);
    EXPECT_TRUE(r.ok()) << s << ": " << (r.ok() ? "" : r.error().message);
    return r.ok() ? r->stages : std::vector<int>{};
  };
  std::vector<int> want{3};
  want.insert(want.end(), 29, 2);
  want.push_back(0);
  std::vector<int> megatron_example = want;  // E t t t | 29 x (t t |) t L: the last stage 1
  megatron_example.back() = 1;
  EXPECT_EQ(counts("Ettt|(tt|)*29,tL"), megatron_example);
  EXPECT_EQ(counts("E,t*3|(tt|)*29,L"), want);  // the cosmetic commas and x*n
  EXPECT_EQ(counts("(Et|)*1tt|ttL"), (std::vector<int>{1, 2, 2}));
  EXPECT_EQ(counts("E|(t|)*126L"), [] {
    std::vector<int> v(128, 1);
    v.front() = v.back() = 0;
    return v;
  }());

  PlanInput p = plan(128, 8, 16, 1, 64);
  p.pipeline_layout = "E|(t|)*126L";
  Scenario a = scenario("llama3-405b", "dgx-h100", p);
  EXPECT_EQ(a.plan.virtual_stages, 8);
  EXPECT_EQ(a.plan.schedule, Schedule::interleaved);
  PlanInput q = plan(128, 8, 16, 1, 64);
  q.virtual_stages = 8;
  q.stage_layers = counts("E|(t|)*126L");
  Scenario b = scenario("llama3-405b", "dgx-h100", q);
  EXPECT_EQ(a.plan.stage_layers, b.plan.stage_layers);
  EXPECT_EQ(simulate(build_workload(a), SimOptions{}).iteration_time,
            simulate(build_workload(b), SimOptions{}).iteration_time);
  // Megatron's first/last form (7 and 7 on 16 stages) spelled as a layout.
  PlanInput f = plan(128, 8, 16, 1, 64);
  f.first_stage_layers = f.last_stage_layers = 7;
  PlanInput g = plan(128, 8, 16, 1, 64);
  g.pipeline_layout = "Et*7|(t*8|)*14t*7L";
  EXPECT_EQ(scenario("llama3-405b", "dgx-h100", f).plan.stage_layers,
            scenario("llama3-405b", "dgx-h100", g).plan.stage_layers);
}

// Each malformed layout is one line naming the flag and what was expected; sizes are checked
// before anything is unrolled.
TEST(UnevenStages, BadMegatronLayoutsAreRefused) {
  auto err = [](std::string layout, int vp = 0) {
    PlanInput p = plan(128, 8, 16, 1, 64);
    p.pipeline_layout = std::move(layout);
    if (vp) p.virtual_stages = vp;
    return scenario_error("llama3-405b", "dgx-h100", p);
  };
  struct Case {
    std::string layout, expect;
  };
  for (const Case& c : {
           Case{"Et|tx|L", "expected a layout of E (embedding)"},
           Case{"E(t|(t|)*2)*2L", "do not nest"},
           Case{"E(t|*3L", "a ')' closing every '('"},
           Case{"E(t|)L", "'*' and a count after ')'"},
           Case{"E(t|)*0L", "a repeat count from 1"},
           Case{"E(t|)*99999999999999999999L", "a repeat count from 1"},
           Case{"E(t|)*4000(t|)*4000L", "at most 4096 layers once the repeats are unrolled"},
           Case{"t|E(t|)*125tL", "the embedding (E) exactly once, as the first layer"},
           Case{"E(t|)*126", "the loss (L) exactly once, as the last layer"},
           Case{"E(t|)*125tL|t", "the loss (L) as the last layer"},
           Case{"E(t|)*125m|L", "multi-token-prediction layers (m) in the last stage"},
           Case{"E|(t|)*126mL", "expected 0 multi-token-prediction layers (m), the model's"},
           Case{"Et|(t|)*126L", "stage layer counts summing to the 126 layers"},
           Case{"E(t|)*2tL", "divisible by the pipeline-parallel size 16"},
       }) {
    SCOPED_TRACE(c.layout);
    const std::string e = err(c.layout);
    EXPECT_EQ(e.rfind("--pipeline-model-parallel-layout: ", 0), 0u) << e;
    EXPECT_NE(e.find(c.expect), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos);
  }
  // A --vp that disagrees with the layout's stage count.
  const std::string e = err("E|(t|)*126L", 4);
  EXPECT_NE(e.find("one layer count per pipeline stage (16 stages x 4 virtual)"), std::string::npos)
      << e;
  // A layout beside per-stage counts.
  PlanInput p = plan(128, 8, 16, 1, 64);
  p.pipeline_layout = "E|(t|)*126L";
  p.first_stage_layers = 7;
  EXPECT_NE(scenario_error("llama3-405b", "dgx-h100", p).find("not both"), std::string::npos);
}

TEST(UnevenStages, ImpossibleListsAreRefused) {
  auto err = [](auto set) {
    PlanInput p = plan(128, 8, 16, 1, 64);
    set(p);
    return scenario_error("llama3-405b", "dgx-h100", p);
  };
  std::string e = err([](PlanInput& p) { p.stage_layers = std::vector<int>(16, 8); });
  EXPECT_EQ(e,
            "--pipeline-stage-layers: expected stage layer counts summing to the 126 layers "
            "of llama3-405b, got a sum of 128");
  e = err([](PlanInput& p) { p.stage_layers = std::vector<int>(15, 8); });
  EXPECT_NE(e.find("one layer count per pipeline stage (16 stages x 1 virtual)"), std::string::npos)
      << e;
  e = err([](PlanInput& p) { p.first_stage_layers = 8; });  // 118 left for 15 stages
  EXPECT_NE(e.find("--decoder-first-pipeline-num-layers"), std::string::npos) << e;
  e = err([](PlanInput& p) {
    p.stage_layers = std::vector<int>(16, 8);
    p.first_stage_layers = 7;
  });
  EXPECT_NE(e.find("not both"), std::string::npos) << e;
  // With virtual stages the counts are the first and last rank's, over their chunks, as in
  // Megatron-Core: 7 is no multiple of 2 chunks; 14 each leaves 98 layers for 14 ranks x 2.
  e = err([](PlanInput& p) {
    p.virtual_stages = 2;
    p.first_stage_layers = p.last_stage_layers = 7;
  });
  EXPECT_NE(e.find("a layer count the 2 virtual stages divide"), std::string::npos) << e;
  e = err([](PlanInput& p) {
    p.virtual_stages = 2;
    p.first_stage_layers = p.last_stage_layers = 14;
  });
  EXPECT_NE(e.find("leaving the other 14 pipeline stages x 2 virtual an equal"), std::string::npos)
      << e;
  e = err([](PlanInput& p) {
    std::vector<int> v(16, 8);
    v[0] = v[15] = 7;
    v[3] = 0;
    v[4] = 16;
    p.stage_layers = v;
  });
  EXPECT_EQ(e,
            "--pipeline-stage-layers: expected a positive layer count for every stage but the "
            "first and last, got 0");
}

// The new system presets load, with their fp8 figures; GB200 NVL72 is one NVLink domain of 72
// GPUs, so a TP-8 group and a 72-rank data-parallel group both stay inside one node.
TEST(Presets, H200AndGb200Nvl72) {
  auto h200 = load_system("dgx-h200");
  ASSERT_TRUE(h200.ok()) << h200.error().message;
  EXPECT_EQ(h200.value().node.gpus, 8);
  EXPECT_GT(h200.value().gpu.peak.fp8.value(), 0);
  auto gb = load_system("gb200-nvl72");
  ASSERT_TRUE(gb.ok()) << gb.error().message;
  EXPECT_EQ(gb.value().node.gpus, 72);
  EXPECT_GT(gb.value().gpu.peak.fp8.value(), 0);
  PlanInput p = plan(72, 8, 1, 1);
  p.fp8 = true;
  Scenario sc = scenario("llama3-70b", "gb200-nvl72", p);
  EXPECT_EQ(sc.plan.dp, 9);
  EXPECT_EQ(sc.nodes, 1);
}

// The ops op i of list l waits for, and whether it waits for on_op.
std::vector<std::uint32_t> deps(const OpList& l, std::uint32_t i) {
  auto d = l.deps_of(i);
  return std::vector<std::uint32_t>(d.begin(), d.end());
}
bool waits_for(const OpList& l, std::uint32_t op, std::uint32_t on_op) {
  auto d = deps(l, op);
  return std::find(d.begin(), d.end(), on_op) != d.end();
}

// --tp-comm-overlap (Megatron-Core / Transformer Engine userbuffers): the same collectives and
// bytes as without it; each sequence-parallel all-gather waits for what its GEMM waits for and
// each reduce-scatter for what its (row-parallel) GEMM waited for, so the two start together,
// and the op after the GEMM waits for both. In the simulated timeline each forward all-gather
// is called when its GEMM's FP8 input cast starts (its causal start is later by the wait for
// the slowest peer), and the iteration saves at most the tensor-parallel communication.
TEST(TpCommOverlap, CollectivesRunBesideTheirGemms) {
  PlanInput p = plan(8, 4, 1, 1, 8);
  p.sequence_parallel = true;
  p.fp8 = true;
  const Scenario off = scenario("llama3-8b", "dgx-h100", p);
  p.tp_comm_overlap = true;
  const Scenario on = scenario("llama3-8b", "dgx-h100", p);
  ASSERT_TRUE(on.plan.tp_comm_overlap);
  const Workload w_off = build_workload(off), w_on = build_workload(on);
  auto comms = [](const OpList& l) {
    std::vector<std::tuple<std::string, int, int, double>> v;
    for (const Op& o : l.ops())
      if (o.kind == OpKind::comm)
        v.emplace_back(std::string(o.name), static_cast<int>(o.collective),
                       static_cast<int>(o.group), o.bytes);
    std::sort(v.begin(), v.end());
    return v;
  };
  const Chunk& c_off = w_off.roles[0].chunks[0];
  const Chunk& c_on = w_on.roles[0].chunks[0];
  EXPECT_EQ(comms(c_on.forward), comms(c_off.forward));
  EXPECT_EQ(comms(c_on.backward), comms(c_off.backward));

  int gathers = 0, scatters = 0;
  const OpList& f = c_on.forward;
  const auto& ops = f.ops();
  for (std::uint32_t i = 0; i + 3 < ops.size(); ++i) {
    if (ops[i].name == "sp_all_gather" && ops[i].layer >= 0) {  // before a block GEMM's cast
      ASSERT_EQ(ops[i + 1].name, "fp8_cast");
      ASSERT_EQ(ops[i + 2].compute, ComputeClass::gemm) << ops[i + 2].name;
      EXPECT_EQ(deps(f, i), deps(f, i + 1)) << ops[i + 2].name;
      EXPECT_FALSE(waits_for(f, i + 2, i)) << ops[i + 2].name;
      EXPECT_TRUE(waits_for(f, i + 3, i)) << ops[i + 3].name;
      ++gathers;
    } else if (ops[i].name == "sp_reduce_scatter" && i > 0 &&
               ops[i - 1].compute == ComputeClass::gemm) {  // just after its GEMM
      EXPECT_EQ(deps(f, i), deps(f, i - 1)) << ops[i - 1].name;
      EXPECT_TRUE(waits_for(f, i + 1, i)) << ops[i + 1].name;
      ++scatters;
    }
  }
  // Two of each per block: before QKV and MLP-in, after attention-out and MLP-out.
  EXPECT_EQ(gathers, 2 * c_on.layers);
  EXPECT_EQ(scatters, 2 * c_on.layers);

  SimOptions o;
  o.timeline = true;
  const Prediction p_on = simulate(w_on, o), p_off = simulate(w_off, o);
  const Timeline& t = p_on.timeline;
  int paired = 0;
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    const Event& ag = t.events[i];
    if (ag.rank != 0 || t.name(ag) != "sp_all_gather" || ag.microbatch != 0) continue;
    for (const Event& g : t.events)
      if (g.rank == 0 && g.microbatch == 0 && g.layer == ag.layer && g.kind == EventKind::compute &&
          t.name(g) == "fp8_cast" && std::abs(g.start - (ag.start - ag.wait)) < 1e-12)
        ++paired;  // the cast of QKV's or MLP-in's input, then the GEMM, beside the all-gather
  }
  EXPECT_GE(paired, 2 * c_on.layers);  // forward; backward gathers pair with the dgrad GEMMs
  const double tensor = p_off.mean.by_group[CommGroup::tensor].total;
  EXPECT_LT(p_on.iteration_time, p_off.iteration_time);
  EXPECT_GE(p_on.iteration_time, p_off.iteration_time - tensor - 1e-12);
  EXPECT_LT(p_on.mean.by_group[CommGroup::tensor].exposed,
            p_off.mean.by_group[CommGroup::tensor].exposed);
}

// Without userbuffers (no --tp-comm-overlap), Transformer Engine's and Megatron-Core's linear
// layers still launch two backward collectives asynchronously under sequence parallelism
// (TE v1.8 layernorm_linear.py "Overlap input AG with dgrad" and "Overlap dgrad-RS/AR with
// wgrad"; megatron/core/tensor_parallel/layers.py async_op=True): the all-gather of the input
// for the weight gradient beside the GEMM's backward, and the input gradient's reduce-scatter
// beside the GEMM that produced it. The forward's collectives and the output gradient's
// all-gather stay on the chain. Without sequence parallelism the all-reduce stays on the chain.
TEST(TpAsyncBackward, SequenceParallelBackwardCollectivesRunBesideTheirGemms) {
  PlanInput p = plan(8, 4, 1, 1, 8);
  p.sequence_parallel = true;
  const Scenario sc = scenario("llama3-8b", "dgx-h100", p);
  ASSERT_FALSE(sc.plan.tp_comm_overlap);
  const Workload w = build_workload(sc);
  const Chunk& c = w.roles[0].chunks[0];
  const OpList& b = c.backward;
  const auto& ops = b.ops();
  // The block's GEMM listed last before op i (other ops, e.g. gradient buckets, may come
  // between); the first of the block's ops after i.
  auto gemm_before = [&](std::uint32_t i) {
    for (std::uint32_t j = i; j-- > 0;)
      if (ops[j].layer == ops[i].layer && ops[j].compute == ComputeClass::gemm) return j;
    return i;
  };
  auto next_of_block = [&](std::uint32_t i) {
    for (std::uint32_t j = i + 1; j < ops.size(); ++j)
      if (ops[j].layer == ops[i].layer && ops[j].kind == OpKind::compute) return j;
    return i;
  };
  int wgrad_gathers = 0, scatters = 0, chained_gathers = 0;
  for (std::uint32_t i = 1; i + 1 < ops.size(); ++i) {
    if (ops[i].name == "sp_all_gather_wgrad") {
      // Beside the GEMM's backward (dgrad and wgrad): the GEMM does not wait for it, the
      // block's next compute does.
      ASSERT_EQ(ops[i + 1].compute, ComputeClass::gemm) << ops[i + 1].name;
      EXPECT_EQ(deps(b, i), deps(b, i + 1)) << ops[i + 1].name;
      EXPECT_FALSE(waits_for(b, i + 1, i)) << ops[i + 1].name;
      const std::uint32_t after = next_of_block(i + 1);
      ASSERT_NE(after, i + 1);
      EXPECT_TRUE(waits_for(b, after, i)) << ops[after].name;
      ++wgrad_gathers;
    } else if (ops[i].name == "sp_reduce_scatter" && ops[i].layer >= 0) {
      // Starts with the GEMM whose input gradient it scatters; the block's next op waits.
      const std::uint32_t g = gemm_before(i);
      ASSERT_NE(g, i);
      EXPECT_EQ(deps(b, i), deps(b, g)) << ops[g].name;
      EXPECT_FALSE(waits_for(b, i, g)) << ops[g].name;
      EXPECT_TRUE(waits_for(b, next_of_block(i), i)) << ops[next_of_block(i)].name;
      ++scatters;
    } else if (ops[i].name == "sp_all_gather" && ops[i].layer >= 0) {
      // The output gradient's all-gather: the row-parallel GEMM's backward waits for it.
      EXPECT_TRUE(waits_for(b, next_of_block(i), i)) << ops[next_of_block(i)].name;
      ++chained_gathers;
    }
  }
  // Per block: QKV's and MLP-in's re-gather and reduce-scatter, attention-out's and MLP-out's
  // output-gradient gather; and the LM head's re-gather (Megatron-Core's ColumnParallelLinear).
  EXPECT_EQ(wgrad_gathers, 2 * c.layers + 1);
  EXPECT_EQ(scatters, 2 * c.layers);
  EXPECT_EQ(chained_gathers, 2 * c.layers);
  // In the forward every collective is still on the chain: the op after it waits for it.
  const OpList& f = c.forward;
  for (std::uint32_t i = 0; i + 1 < f.ops().size(); ++i)
    if (f.ops()[i].kind == OpKind::comm && f.ops()[i].group == CommGroup::tensor) {
      EXPECT_TRUE(waits_for(f, i + 1, i)) << f.ops()[i].name << " then " << f.ops()[i + 1].name;
    }

  // The simulated timeline: each backward reduce-scatter of a block is called while that block's
  // GEMM computes (on the tensor-parallel stream, after the re-gather that the GEMM's start
  // launched), and the tensor-parallel time is partly hidden.
  SimOptions o;
  o.timeline = true;
  const Prediction pr = simulate(w, o);
  const Timeline& t = pr.timeline;
  int overlapped = 0;
  for (const Event& rs : t.events) {
    if (rs.rank != 0 || rs.microbatch != 0 || rs.layer < 0 || t.name(rs) != "sp_reduce_scatter")
      continue;  // the forward's, chained after their GEMMs, are called between computes
    for (const Event& g : t.events)
      if (g.rank == 0 && g.microbatch == 0 && g.layer == rs.layer && g.kind == EventKind::compute &&
          g.start <= rs.start - rs.wait && rs.start - rs.wait < g.end() - 1e-12) {
        ++overlapped;
        break;
      }
  }
  EXPECT_EQ(overlapped, 2 * c.layers);
  const auto& tensor = pr.mean.by_group[CommGroup::tensor];
  EXPECT_LT(tensor.exposed, tensor.total);

  // Without sequence parallelism, commscope's own pattern: the dgrad all-reduce waits for its
  // GEMM (Megatron-LM before 2021-09, whose autograd all-reduce ran after the backward GEMM).
  p.sequence_parallel = false;
  const Scenario plain_sc = scenario("llama3-8b", "dgx-h100", p);
  EXPECT_FALSE(plain_sc.plan.tp_async_allreduce);
  const Workload plain = build_workload(plain_sc);
  const OpList& pb = plain.roles[0].chunks[0].backward;
  int reduces = 0;
  for (std::uint32_t i = 1; i < pb.ops().size(); ++i)
    if (pb.ops()[i].name == "tp_all_reduce" && pb.ops()[i].layer >= 0) {
      std::uint32_t g = i;
      while (g-- > 0)
        if (pb.ops()[g].layer == pb.ops()[i].layer && pb.ops()[g].compute == ComputeClass::gemm)
          break;
      EXPECT_TRUE(waits_for(pb, i, g)) << pb.ops()[g].name;
      ++reduces;
    }
  EXPECT_EQ(reduces, 2 * plain.roles[0].chunks[0].layers);

  // Megatron-LM's asynchronous TP all-reduce (the default under --framework megatron, or
  // --async-tensor-model-parallel-allreduce): the all-reduce starts with the GEMM whose input
  // gradient it sums and the block's next op waits for it; the iteration is no slower, and the
  // exposed tensor-parallel time falls.
  p.tp_async_allreduce = true;
  const Scenario async_sc = scenario("llama3-8b", "dgx-h100", p);
  ASSERT_TRUE(async_sc.plan.tp_async_allreduce);
  const Workload async = build_workload(async_sc);
  const OpList& ab = async.roles[0].chunks[0].backward;
  const auto& aops = ab.ops();
  int beside = 0;
  for (std::uint32_t i = 1; i + 1 < aops.size(); ++i)
    if (aops[i].name == "tp_all_reduce" && aops[i].layer >= 0) {
      std::uint32_t g = i;
      while (g-- > 0)
        if (aops[g].layer == aops[i].layer && aops[g].compute == ComputeClass::gemm) break;
      EXPECT_EQ(deps(ab, i), deps(ab, g)) << aops[g].name;
      EXPECT_FALSE(waits_for(ab, i, g)) << aops[g].name;
      std::uint32_t after = i + 1;
      while (after < aops.size() &&
             !(aops[after].layer == aops[i].layer && aops[after].kind == OpKind::compute))
        ++after;
      ASSERT_LT(after, aops.size());
      EXPECT_TRUE(waits_for(ab, after, i)) << aops[after].name;
      ++beside;
    }
  EXPECT_EQ(beside, 2 * async.roles[0].chunks[0].layers);
  const Prediction chained = simulate(plain, SimOptions{});
  const Prediction overlapped_ar = simulate(async, SimOptions{});
  EXPECT_LT(overlapped_ar.mean.by_group[CommGroup::tensor].exposed,
            chained.mean.by_group[CommGroup::tensor].exposed);
  EXPECT_LE(overlapped_ar.iteration_time, chained.iteration_time);
  // The framework's default: on under --framework megatron, and --no-async... turns it off;
  // TP 1 has nothing to overlap.
  PlanInput m = plan(8, 4, 1, 1, 8);
  m.framework = Framework::megatron;
  EXPECT_TRUE(scenario("llama3-8b", "dgx-h100", m).plan.tp_async_allreduce);
  m.tp_async_allreduce = false;
  EXPECT_FALSE(scenario("llama3-8b", "dgx-h100", m).plan.tp_async_allreduce);
  PlanInput one = plan(8, 1, 1, 1, 8);
  one.framework = Framework::megatron;
  EXPECT_FALSE(scenario("llama3-8b", "dgx-h100", one).plan.tp_async_allreduce);
}

// Under --fp8 Transformer Engine all-gathers FP8 bytes under sequence parallelism: the norm's
// output it writes as FP8 (forward), the same saved FP8 input re-gathered for the weight
// gradient, and the output gradient it casts to FP8 before gathering (TE v1.8
// layernorm_linear.py, module/base.py grad_output_preprocess). Each block all-gather moves half
// the bf16 plan's bytes; the reduce-scatters (GEMM outputs) and the LM head's gathers (Megatron's
// own bf16 layer) move the same bytes as without FP8.
TEST(TpFp8, SequenceParallelGathersMoveFp8Bytes) {
  PlanInput p = plan(8, 4, 1, 1, 8);
  p.sequence_parallel = true;
  const Workload bf16 = build_workload(scenario("llama3-8b", "dgx-h100", p));
  p.fp8 = true;
  const Workload fp8 = build_workload(scenario("llama3-8b", "dgx-h100", p));
  auto tensor_comms = [](const OpList& l) {
    std::vector<const Op*> v;
    for (const Op& o : l.ops())
      if (o.kind == OpKind::comm && o.group == CommGroup::tensor) v.push_back(&o);
    return v;
  };
  for (int backward = 0; backward < 2; ++backward) {
    const auto& cb = bf16.roles[0].chunks[0];
    const auto& cf = fp8.roles[0].chunks[0];
    const auto a = tensor_comms(backward ? cb.backward : cb.forward);
    const auto f = tensor_comms(backward ? cf.backward : cf.forward);
    ASSERT_EQ(a.size(), f.size());
    int halved = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i]->name, f[i]->name);
      ASSERT_EQ(a[i]->layer, f[i]->layer);
      const bool block_gather = a[i]->collective == Collective::all_gather && a[i]->layer >= 0;
      if (block_gather) {
        EXPECT_EQ(f[i]->dtype, DType::fp8) << f[i]->name;
        EXPECT_DOUBLE_EQ(f[i]->bytes, a[i]->bytes / 2) << f[i]->name;
        ++halved;
      } else {
        EXPECT_EQ(f[i]->dtype, a[i]->dtype) << f[i]->name << " layer " << f[i]->layer;
        EXPECT_DOUBLE_EQ(f[i]->bytes, a[i]->bytes) << f[i]->name;
      }
    }
    // Forward: QKV's and MLP-in's inputs; backward: those re-gathered for wgrad and the two
    // output gradients.
    EXPECT_EQ(halved, (backward ? 4 : 2) * cb.layers) << (backward ? "backward" : "forward");
  }
}

// Megatron-LM's own rule: no overlap without sequence parallelism; with TP 1 it is switched off.
TEST(TpCommOverlap, NeedsSequenceParallelism) {
  PlanInput p = plan(8, 2, 1, 1);
  p.tp_comm_overlap = true;
  EXPECT_NE(scenario_error("llama3-8b", "dgx-h100", p)
                .find("--tp-comm-overlap: expected --sequence-parallel with it"),
            std::string::npos);
  p.tp = 1;
  EXPECT_FALSE(scenario("llama3-8b", "dgx-h100", p).plan.tp_comm_overlap);
}

#ifdef COMMSCOPE_BIN
// Bad flags: one line on stderr naming the flag and the value, exit status 2.
// describe's plan line names context and expert parallelism when a plan uses them (the CP
// exchange: ring or all-gather), and stays as it was otherwise.
TEST(Cli, PlanLineNamesContextAndExpertParallelism) {
  auto plan_line = [](const std::string& args) {
    testing::Outcome r = testing::run_shell(std::string(COMMSCOPE_BIN) + " describe " + args);
    EXPECT_EQ(r.status, 0) << r.err;
    const auto at = r.out.find("\nplan: ");
    return at == std::string::npos ? std::string()
                                   : r.out.substr(at + 1, r.out.find('\n', at + 1) - at - 1);
  };
  const std::string cp =
      "--model llama3-8b --system dgx-h100 --gpus 16 --cp 2 --micro-batch-size 1 "
      "--global-batch-size 16";
  EXPECT_EQ(plan_line(cp).rfind("plan: DP 8 x TP 1 x CP 2 (ring) x PP 1, ZeRO-0;", 0), 0u)
      << plan_line(cp);
  EXPECT_EQ(plan_line(cp + " --cp-comm-type all_gather")
                .rfind("plan: DP 8 x TP 1 x CP 2 (all-gather) x PP 1, ZeRO-0;", 0),
            0u);
  EXPECT_EQ(plan_line("--model mixtral-8x7b --system dgx-h100 --gpus 64 --ep 8 --tp 2 "
                      "--sequence-parallel --micro-batch-size 1 --global-batch-size 64")
                .rfind("plan: DP 32 x TP 2 (SP) x PP 1, EP 8, ZeRO-0;", 0),
            0u);
  EXPECT_EQ(plan_line("").rfind("plan: DP 16 x TP 1 x PP 1, ZeRO-0;", 0), 0u) << plan_line("");
}

TEST(Cli, ModernFlagsRefuseBadValues) {
  struct Case {
    const char* args;
    const char* start;
  };
  for (const Case c :
       {Case{"--attention fused",
             "commscope: --attention: expected flash or standard, got 'fused'"},
        Case{"--attention-backend cudnn",
             "commscope: --attention-backend: expected fused, flash, unfused, local or auto, got "
             "'cudnn'"},
        Case{"--pipeline-stage-layers 7,x", "commscope: --pipeline-stage-layers: expected"},
        Case{"--decoder-first-pipeline-num-layers -1",
             "commscope: --decoder-first-pipeline-num-layers: expected"},
        Case{"--fp8 --system dgx-a100-80gb", "commscope: --fp8: expected a system with an FP8"},
        Case{"--precision fp9", "commscope: --precision: expected one of fp32|fp16|bf16|fp8"},
        // the CPU trainer refuses what it cannot run, before launching
        // (the trainer runs uneven stages; a layout that does not sum to the layers is refused
        // as describe refuses it)
        Case{"--pipeline-stage-layers 1,1 --pp 2 --train",
             "commscope: --pipeline-stage-layers: expected stage layer counts summing to the 4 "
             "layers of gpt2-tiny-cpu, got a sum of 2"},
        Case{"--fp8 --train", "commscope: --fp8:"},
        Case{"--cpu-offloading-num-layers x",
             "commscope: --cpu-offloading-num-layers: expected a layer count, got 'x'"},
        Case{"--cpu-offloading-num-layers 40",
             "commscope: --cpu-offloading-num-layers: expected 0 to 31"},
        Case{"--cpu-offloading-num-layers 2 --train",
             "commscope: --cpu-offloading-num-layers: the CPU trainer"},
        Case{"--offload-optimizer --zero 2 --train",
             "commscope: --offload-optimizer: the CPU trainer's optimizer already steps in host "
             "memory"},
        Case{"--offload-optimizer",
             "commscope: --offload-optimizer: expected ZeRO stage 1, 2 or 3"},
        Case{"--mtp-num-layers x",
             "commscope: --mtp-num-layers: expected a layer count (0: none), got 'x'"},
        Case{"--mtp-num-layers 65", "commscope: --mtp-num-layers: expected 0 to 64"},
        Case{"--mtp-num-layers 1 --train",
             "commscope: --mtp-num-layers: expected 0 (the CPU trainer has no multi-token"},
        Case{"--overlap-moe-expert-parallel-comm",
             "commscope: --overlap-moe-expert-parallel-comm: expected --expert-model-parallel-size "
             "above 1, got 1"},
        Case{"--overlap-moe-expert-parallel-comm --train",
             "commscope: --overlap-moe-expert-parallel-comm: expected off: the CPU trainer"},
        Case{"--delay-wgrad-compute --train",
             "commscope: --delay-wgrad-compute: expected off: the CPU trainer"},
        Case{"--account-for-loss-in-pipeline-split --train",
             "commscope: --account-for-loss-in-pipeline-split: the CPU trainer splits"},
        Case{"--num-layers-per-virtual-pipeline-stage 0",
             "commscope: --num-layers-per-virtual-pipeline-stage: expected a positive layer "
             "count, got '0'"},
        Case{"--pp 4 --num-layers-per-virtual-pipeline-stage 3",
             "commscope: --num-layers-per-virtual-pipeline-stage: expected a divisor of the 8 "
             "layers per pipeline stage"}}) {
    SCOPED_TRACE(c.args);
    std::string args = c.args;
    const bool train = args.ends_with(" --train");
    if (train) args.resize(args.size() - 8);
    testing::Outcome r = testing::run_shell(
        std::string(COMMSCOPE_BIN) +
        (train ? " train --model gpt2-tiny-cpu --ranks 2 " : " describe --model llama3-8b ") +
        args);
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(r.err.rfind(c.start, 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  testing::Outcome ok = testing::run_shell(
      std::string(COMMSCOPE_BIN) +
      " predict --model llama3-405b --system dgx-h100 --gpus 8192 --tp 8 --pp 16 "
      "--sequence-parallel --micro-batch-size 1 --global-batch-size 2048 "
      "--decoder-first-pipeline-num-layers 7 --decoder-last-pipeline-num-layers 7 --format json");
  EXPECT_EQ(ok.status, 0) << ok.err;
  testing::Outcome d = testing::run_shell(
      std::string(COMMSCOPE_BIN) +
      " describe --model llama3-405b --system dgx-h100 --gpus 8192 --tp 8 --pp 16 --fp8 "
      "--micro-batch-size 1 --global-batch-size 2048 --decoder-first-pipeline-num-layers 7 "
      "--decoder-last-pipeline-num-layers 7");
  EXPECT_EQ(d.status, 0) << d.err;
  EXPECT_NE(d.out.find("kernels: attention flash (cuDNN's fused kernel), FP8 GEMMs (Transformer "
                       "Engine); layers per stage 7, 14x8, 7\n"),
            std::string::npos)
      << d.out;
  testing::Outcome plain = testing::run_shell(std::string(COMMSCOPE_BIN) + " describe");
  EXPECT_EQ(plain.out.find("kernels:"), std::string::npos);  // unchanged without them
}
#endif

// ---- Megatron-Core's --recompute-modules (selective recompute) ----

// Each module takes its saved tensors out of a block's activations, as the closed form of what
// it replays (docs/workload.md, "Recompute modules"): layernorm the two pre-norms' outputs,
// 2 b s h; mlp a dense SwiGLU MLP's up-projection output and product, 2 b s f + b s f; moe_act
// the experts' activation output, one value per routed row and expert channel; mla_up_proj the
// up-projections' outputs, b s (a/t) (2 qk + v). In bf16 (2 bytes), micro-batch 1.
TEST(RecomputeModules, EachDropsWhatItReplays) {
  auto bytes = [](const std::string& model, PlanInput p, int layer,
                  std::optional<std::uint8_t> modules) {
    p.recompute = Recompute::selective;
    p.recompute_modules = modules;
    const Scenario sc = scenario(model, "dgx-h100", p);
    return block_activation_bytes(sc, layer).value();
  };
  const double a = 2;
  {
    const PlanInput p = plan(8, 1, 1, 1);
    const double s = 8192, h = 4096, f = 14336;  // llama3-8b
    const double base = bytes("llama3-8b", p, 5, std::nullopt);
    EXPECT_DOUBLE_EQ(base - bytes("llama3-8b", p, 5, recompute_module::layernorm), 2 * a * s * h);
    EXPECT_DOUBLE_EQ(base - bytes("llama3-8b", p, 5, recompute_module::mlp),
                     2 * a * s * f + a * s * f);
    EXPECT_DOUBLE_EQ(base - bytes("llama3-8b", p, 5,
                                  static_cast<std::uint8_t>(recompute_module::mlp |
                                                            recompute_module::layernorm)),
                     2 * a * s * f + a * s * f + 2 * a * s * h);
    // core_attn is the default, and nothing under flash (llama3-8b's kernel).
    EXPECT_DOUBLE_EQ(base, bytes("llama3-8b", p, 5, recompute_module::core_attn));
  }
  {
    PlanInput p = plan(64, 1, 1, 1);
    p.ep = 8;
    const Scenario sc = scenario("mixtral-8x7b", "dgx-h100", p);
    const double routed = sc.plan.moe_routed_rows(static_cast<double>(sc.model.seq_length), 2, 8);
    const double fe = 14336;
    const double base = bytes("mixtral-8x7b", p, 3, std::nullopt);
    // Mixtral's preset runs the unfused core: a list replaces Megatron's default, so core_attn
    // stays in it.
    constexpr std::uint8_t core = recompute_module::core_attn;
    EXPECT_DOUBLE_EQ(base - bytes("mixtral-8x7b", p, 3,
                                  static_cast<std::uint8_t>(core | recompute_module::moe_act)),
                     a * routed * fe);
    // mlp is a dense block's: a MoE block keeps its experts' tensors (Megatron: not is_moe_layer).
    EXPECT_DOUBLE_EQ(
        base, bytes("mixtral-8x7b", p, 3, static_cast<std::uint8_t>(core | recompute_module::mlp)));
    // Without core_attn the unfused core's scores are kept again: more memory.
    EXPECT_GT(bytes("mixtral-8x7b", p, 3, recompute_module::moe_act), base);
  }
  for (int tp : {1, 2}) {
    PlanInput p = plan(64 * tp, tp, 1, 1);
    p.ep = 64;
    p.expert_tp = 1;
    p.sequence_parallel = tp > 1;
    const double s = 4096, heads = 128.0 / tp;
    const double base = bytes("deepseek-v3", p, 10, std::nullopt);
    EXPECT_DOUBLE_EQ(base - bytes("deepseek-v3", p, 10,
                                  static_cast<std::uint8_t>(recompute_module::core_attn |
                                                            recompute_module::mla_up_proj)),
                     a * s * heads * (2 * 192 + 128))
        << tp;
  }
}

// What the modules replay runs again in backward: the up-projections (mla_up_proj), a dense
// block's MLP with its sequence-parallel all-gather and reduce-scatter (mlp), the experts'
// activation (moe_act), the pre-norms (layernorm); nothing else is added.
TEST(RecomputeModules, ReplayedInBackward) {
  auto count = [](const std::string& model, PlanInput p, std::optional<std::uint8_t> modules,
                  std::string_view name) {
    p.recompute = Recompute::selective;
    p.recompute_modules = modules;
    const Workload w = build_workload(scenario(model, "dgx-h100", p));
    return named(w.roles[0].chunks[0].backward, name).size();
  };
  PlanInput ds = plan(128, 2, 1, 1);
  ds.ep = 64;
  ds.expert_tp = 1;
  ds.sequence_parallel = true;
  const std::size_t blocks = 61 + 1;  // with the MTP block
  EXPECT_EQ(count("deepseek-v3", ds, std::nullopt, "q_up"), blocks);
  EXPECT_EQ(count("deepseek-v3", ds, recompute_module::mla_up_proj, "q_up"), 2 * blocks);
  EXPECT_EQ(count("deepseek-v3", ds, recompute_module::mla_up_proj, "kv_up"), 2 * blocks);
  EXPECT_EQ(count("deepseek-v3", ds, recompute_module::mla_up_proj, "q_down"), blocks);
  EXPECT_EQ(count("deepseek-v3", ds, recompute_module::moe_act, "expert_act"), 2 * (blocks - 3));
  // mlp: the 3 dense blocks' MLPs, with their gathers.
  EXPECT_EQ(count("deepseek-v3", ds, recompute_module::mlp, "mlp_in"), 2 * 3u);
  EXPECT_EQ(count("deepseek-v3", ds, recompute_module::mlp, "sp_all_gather"),
            count("deepseek-v3", ds, std::nullopt, "sp_all_gather") + 3);
  EXPECT_EQ(count("deepseek-v3", ds, recompute_module::layernorm, "norm_mlp"), 2 * blocks);
  EXPECT_EQ(count("deepseek-v3", ds, std::nullopt, "norm_mlp"), blocks);
}

// The flag is Megatron's: read under selective granularity only; mla_up_proj needs latent
// attention; unknown and unmodelled names are refused, one line naming the flag.
TEST(RecomputeModules, FlagsAreChecked) {
  EXPECT_EQ(*parse_recompute_modules("core_attn,mla_up_proj"),
            recompute_module::core_attn | recompute_module::mla_up_proj);
  EXPECT_EQ(*parse_recompute_modules("mla_up_proj mlp"),
            recompute_module::mla_up_proj | recompute_module::mlp);
  EXPECT_EQ(recompute_modules_string(recompute_module::mlp | recompute_module::moe_act),
            "mlp, moe_act");
  EXPECT_NE(parse_recompute_modules("moe").error().message.find("'moe' is not modelled"),
            std::string::npos);
  EXPECT_NE(parse_recompute_modules("attn").error().message.find("got 'attn'"), std::string::npos);
  EXPECT_FALSE(parse_recompute_modules(",").ok());
  PlanInput p = plan(8, 1, 1, 1);
  p.recompute_modules = recompute_module::mlp;
  EXPECT_EQ(scenario_error("llama3-8b", "dgx-h100", p),
            "--recompute-modules: expected --recompute-granularity selective, got none");
  p.recompute = Recompute::selective;
  p.recompute_modules = recompute_module::mla_up_proj;
  EXPECT_EQ(scenario_error("llama3-8b", "dgx-h100", p),
            "--recompute-modules: expected mla_up_proj only with multi-latent attention "
            "(kv_lora_rank in the model), got llama3-8b");
  for (const char* bad :
       {"--recompute-modules moe --recompute-granularity selective", "--recompute-modules mlp"}) {
    SCOPED_TRACE(bad);
    testing::Outcome r =
        testing::run_shell(std::string(COMMSCOPE_BIN) + " describe --model llama3-8b " + bad);
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(r.err.rfind("commscope: --recompute-modules: expected", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  testing::Outcome ok = testing::run_shell(
      std::string(COMMSCOPE_BIN) +
      " describe --model llama3-8b --recompute-granularity selective --recompute-modules "
      "mlp,layernorm --format json");
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_NE(ok.out.find("\"recompute_modules\": \"mlp, layernorm\""), std::string::npos);
}

// Megatron-Core's --use-precision-aware-optimizer (Transformer Engine's FusedAdam): the
// optimizer's state per parameter is the master weight (an fp32 one over bf16 parameters kept
// as its 16-bit remainder, store_param_remainders) and the two moments in their dtypes: bf16
// moments over bf16 parameters 2 + 2 + 2 = 6 bytes where plain mixed-precision Adam keeps 12;
// over fp16 parameters the fp32 master stays whole, 4 + 2 + 2. Adam's step reads and writes
// each state and reads the gradient and writes the weight; under --framework megatron with bf16
// the gradient is read from Megatron's fp32 buffer: 2 x 6 + 4 + 2 = 18 bytes, not 24 + 4 + 2.
TEST(PrecisionAwareOptimizer, StateBytesAndStep) {
  auto sc = [](std::optional<bool> on, std::optional<DType> moments, Precision prec) {
    PlanInput p = plan(8, 1, 1, 1, 8);
    p.use_distributed_optimizer = true;
    p.framework = Framework::megatron;
    p.precision = prec;
    p.precision_aware_optimizer = on;
    p.exp_avg_dtype = p.exp_avg_sq_dtype = moments;
    return scenario("llama3-8b", "dgx-h100", p);
  };
  const Scenario plain = sc(std::nullopt, std::nullopt, Precision::bf16);
  const Scenario bf = sc(true, DType::bf16, Precision::bf16);
  const Scenario fp16 = sc(true, DType::bf16, Precision::fp16);
  EXPECT_DOUBLE_EQ(plain.plan.optimizer_state_bytes(), 12);
  EXPECT_DOUBLE_EQ(bf.plan.optimizer_state_bytes(), 6);
  EXPECT_DOUBLE_EQ(fp16.plan.optimizer_state_bytes(), 8);
  EXPECT_DOUBLE_EQ(sc(true, std::nullopt, Precision::bf16).plan.optimizer_state_bytes(), 2 + 4 + 4);
  const Workload a = build_workload(plain), b = build_workload(bf);
  const double pa = memory_per_rank(a, a.roles[0]).optimizer.value();
  const double pb = memory_per_rank(b, b.roles[0]).optimizer.value();
  EXPECT_DOUBLE_EQ(pb / pa, 6.0 / 12.0);
  EXPECT_DOUBLE_EQ(pa, static_cast<double>(a.roles[0].params) * 12 / 8);  // over DP 8
  auto adam = [](const Workload& w) { return named(w.roles[0].step, "adam").at(0); };
  EXPECT_DOUBLE_EQ(adam(b).mem_bytes / adam(a).mem_bytes, 18.0 / 30.0);
  EXPECT_DOUBLE_EQ(adam(a).mem_bytes, static_cast<double>(a.roles[0].params) / 8 * 30);
  EXPECT_EQ(memory_per_rank(a, a.roles[0]).weights, memory_per_rank(b, b.roles[0]).weights);
  // Megatron asserts fp32 states without the flag; the flag needs mixed precision.
  PlanInput p = plan(8, 1, 1, 1, 8);
  p.exp_avg_dtype = DType::bf16;
  EXPECT_EQ(scenario_error("llama3-8b", "dgx-h100", p),
            "--exp-avg-dtype: expected fp32 without --use-precision-aware-optimizer, got bfloat16");
  PlanInput q = plan(8, 1, 1, 1, 8);
  q.precision_aware_optimizer = true;
  q.precision = Precision::fp32;
  EXPECT_EQ(scenario_error("llama3-8b", "dgx-h100", q),
            "--use-precision-aware-optimizer: expected bf16 or fp16 mixed precision, got fp32");
  testing::Outcome r = testing::run_shell(
      std::string(COMMSCOPE_BIN) +
      " describe --model llama3-8b --use-precision-aware-optimizer --main-params-dtype bf16");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "commscope: --main-params-dtype: expected one of fp32|fp16, got 'bf16'\n");
}

// --main-grads-dtype bf16 (Megatron-LM arguments.py: accumulate_allreduce_grads_in_fp32 is turned
// on under bf16 only while the main gradients are fp32): Megatron's gradient buffer, its
// reduce-scatter and the gradient Adam reads are all 2 bytes, where fp32 main gradients make
// them 4; the optimizer states (fp32 master as its 16-bit remainder, fp32 moments: 10 bytes)
// are the same. Outside --framework megatron gradients are 16-bit anyway: nothing moves.
TEST(PrecisionAwareOptimizer, MainGradsDtype) {
  struct Seen {
    double grad_bytes, rs_bytes_per_element, adam_bytes, iteration, total;
  };
  auto run = [](Framework fw, std::optional<DType> main_grads) {
    PlanInput p = plan(8, 1, 1, 1, 8);
    p.framework = fw;
    if (fw == Framework::megatron)
      p.use_distributed_optimizer = true;
    else
      p.zero = 1;
    p.precision = Precision::bf16;
    p.precision_aware_optimizer = true;
    p.main_grads_dtype = main_grads;
    const Scenario sc = scenario("llama3-8b", "dgx-h100", p);
    const Workload w = build_workload(sc);
    const double params = static_cast<double>(w.roles[0].params);
    Seen s{};
    s.grad_bytes = memory_per_rank(w, w.roles[0]).gradients.value() / params;
    for (const Op& op : w.roles[0].step.ops())
      if (op.kind == OpKind::comm && op.collective == Collective::reduce_scatter)
        s.rs_bytes_per_element = op.bytes / static_cast<double>(op.elements);
    for (const Chunk& ch : w.roles[0].chunks)
      for (const Op& op : ch.backward.ops())
        if (op.kind == OpKind::comm && op.collective == Collective::reduce_scatter)
          s.rs_bytes_per_element = op.bytes / static_cast<double>(op.elements);
    s.adam_bytes = named(w.roles[0].step, "adam").at(0).mem_bytes / (params / 8);
    s.iteration = simulate(w).iteration_time;
    s.total = memory_per_rank(w, w.roles[0]).total().value();
    EXPECT_LE(search::memory_lower_bound(sc), s.total);
    EXPECT_DOUBLE_EQ(sc.plan.optimizer_state_bytes(), 2 + 4 + 4);
    return s;
  };
  const Seen fp32 = run(Framework::megatron, std::nullopt);
  const Seen bf16 = run(Framework::megatron, DType::bf16);
  EXPECT_DOUBLE_EQ(fp32.grad_bytes, 4);
  EXPECT_DOUBLE_EQ(fp32.rs_bytes_per_element, 4);
  EXPECT_DOUBLE_EQ(fp32.adam_bytes, 2 * 10 + 4 + 2);
  EXPECT_DOUBLE_EQ(bf16.grad_bytes, 2);
  EXPECT_DOUBLE_EQ(bf16.rs_bytes_per_element, 2);
  EXPECT_DOUBLE_EQ(bf16.adam_bytes, 2 * 10 + 2 + 2);
  EXPECT_LT(bf16.iteration, fp32.iteration);  // half the reduce-scatter's bytes
  // commscope's own ZeRO-1: 16-bit gradients and reduction whatever the flag says
  const Seen own32 = run(Framework::none, std::nullopt);
  const Seen own16 = run(Framework::none, DType::bf16);
  EXPECT_DOUBLE_EQ(own32.grad_bytes, 2);
  EXPECT_DOUBLE_EQ(own32.rs_bytes_per_element, 2);
  EXPECT_DOUBLE_EQ(own32.adam_bytes, 2 * 10 + 2 + 2);
  EXPECT_EQ(own16.iteration, own32.iteration);
  EXPECT_EQ(own16.total, own32.total);
  {  // and says so
    PlanInput own = plan(8, 1, 1, 1, 8);
    own.zero = 1;
    own.precision_aware_optimizer = true;
    own.main_grads_dtype = DType::bf16;
    const Scenario s = scenario("llama3-8b", "dgx-h100", own);
    EXPECT_EQ(std::count_if(s.warnings.begin(), s.warnings.end(),
                            [](const std::string& w) {
                              return w.rfind("--main-grads-dtype bfloat16 has no effect", 0) == 0;
                            }),
              1);
  }
  // Megatron's rules: the flag for non-fp32, bf16 only under bf16, not beside fp32 accumulation.
  PlanInput p = plan(8, 1, 1, 1, 8);
  p.main_grads_dtype = DType::bf16;
  EXPECT_EQ(scenario_error("llama3-8b", "dgx-h100", p),
            "--main-grads-dtype: expected fp32 without --use-precision-aware-optimizer, got "
            "bfloat16");
  p.precision_aware_optimizer = true;
  p.precision = Precision::fp16;
  EXPECT_EQ(scenario_error("llama3-8b", "dgx-h100", p),
            "--main-grads-dtype: expected fp32 unless --precision bf16, got bfloat16");
  p.precision = Precision::bf16;
  p.grad_comm_dtype = DType::fp32;
  EXPECT_EQ(scenario_error("llama3-8b", "dgx-h100", p),
            "--main-grads-dtype: expected fp32 with --grad-comm-dtype fp32 (Megatron-LM's "
            "--accumulate-allreduce-grads-in-fp32 asserts it), got bfloat16");
  // Megatron-Core has it beside its distributed optimizer only (optimizer/__init__.py).
  PlanInput z = plan(8, 1, 1, 1, 8);
  z.precision_aware_optimizer = true;
  EXPECT_EQ(scenario_error("llama3-8b", "dgx-h100", z),
            "--use-precision-aware-optimizer: expected a sharded optimizer "
            "(--use-distributed-optimizer, or ZeRO 1 or more), got ZeRO 0");
  z.framework = Framework::fsdp;
  EXPECT_EQ(scenario_error("llama3-8b", "dgx-h100", z),
            "--use-precision-aware-optimizer: expected Megatron-Core's distributed optimizer "
            "(commscope's pattern or --framework megatron), got --framework fsdp");
  testing::Outcome r = testing::run_shell(
      std::string(COMMSCOPE_BIN) +
      " describe --model llama3-8b --use-precision-aware-optimizer --main-grads-dtype fp16");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "commscope: --main-grads-dtype: expected one of fp32|bf16, got 'fp16'\n");
  testing::Outcome ok = testing::run_shell(
      std::string(COMMSCOPE_BIN) +
      " describe --model llama3-8b --zero 1 --use-precision-aware-optimizer --main-grads-dtype "
      "bf16 --format json");
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_NE(ok.out.find("\"main_grads_dtype\": \"bfloat16\""), std::string::npos);
  // the headline says what the memory assumes (NVIDIA's DeepSeek-V3 recipe: bf16 moments)
  testing::Outcome shown = testing::run_shell(
      std::string(COMMSCOPE_BIN) +
      " describe --model llama3-8b --zero 1 --use-precision-aware-optimizer --exp-avg-dtype bf16 "
      "--exp-avg-sq-dtype bf16");
  EXPECT_EQ(shown.status, 0) << shown.err;
  EXPECT_NE(shown.out.find("optimizer: Megatron-Core's precision-aware Adam (Transformer Engine "
                           "FusedAdam): master weights fp32 kept as their 16 low bits, moments "
                           "bfloat16 and bfloat16, main gradients bfloat16; 6 bytes of state a "
                           "parameter (plain mixed-precision Adam: 12)"),
            std::string::npos)
      << shown.out;
}

}  // namespace
}  // namespace commscope
