// Memory per rank against the ZeRO paper and Korthikanti et al. 2022.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commscope/search/plan_search.h"
#include "commscope/sim/simulator.h"
#include "commscope/workload/params.h"
#include "test_util.h"

namespace commscope {
namespace {

using testing::plan;
using testing::scenario;

// Rajbhandari et al. 2020 (ZeRO), Section 5 and Figure 1, mixed-precision Adam (K = 12):
// model states per rank are 16 Psi (DDP), (4 + 12/d) Psi (ZeRO-1), (2 + 14/d) Psi (ZeRO-2)
// and 16 Psi / d (ZeRO-3) bytes.
TEST(Memory, ZeroPaperModelStates) {
  for (int d : {2, 8, 64}) {
    for (int z = 0; z <= 3; ++z) {
      SCOPED_TRACE(fmt::format("d {} zero {}", d, z));
      PlanInput p = plan(d);
      p.zero = z;
      p.precision = Precision::fp16;
      Scenario sc = scenario("megatron-7.5b", "dgx-a100-80gb", p);
      Workload w = build_workload(sc);
      MemoryBreakdown m = memory_per_rank(w, w.roles[0]);
      const double psi = static_cast<double>(count_params(sc.model).total);
      const double per_param[] = {16, 4 + 12.0 / d, 2 + 14.0 / d, 16.0 / d};
      EXPECT_NEAR((m.weights + m.gradients + m.optimizer).value() / (per_param[z] * psi), 1.0,
                  1e-12);
    }
  }
}

// Korthikanti et al. 2022, Table 2: activation bytes per transformer layer (fp16, a heads):
//   no parallelism:              sbh (34 + 5as/h)
//   tensor parallel:             sbh (10 + 24/t + 5as/(ht))
//   tensor + sequence parallel:  sbh (34/t + 5as/(ht))
//   tensor parallel + selective: sbh (10 + 24/t)
//   tensor + sequence + selective: sbh (34/t)
//   full recompute:              2sbh (the layer input), /t with sequence parallelism
TEST(Memory, KorthikantiActivationsPerLayer) {
  struct Case {
    int t;
    bool sp;
    Recompute r;
  };
  const Case cases[] = {{1, false, Recompute::none},     {8, false, Recompute::none},
                        {8, true, Recompute::none},      {8, false, Recompute::selective},
                        {8, true, Recompute::selective}, {4, false, Recompute::full},
                        {4, true, Recompute::full}};
  for (const char* name : {"megatron-18.4b", "gpt3-175b"}) {
    for (const auto& c : cases) {
      SCOPED_TRACE(fmt::format("{} t {} sp {} recompute {}", name, c.t, c.sp, to_string(c.r)));
      PlanInput p = plan(c.t, c.t, 1, 4);
      p.sequence_parallel = c.sp;
      p.recompute = c.r;
      p.precision = Precision::fp16;
      Scenario sc = scenario(name, "dgx-a100-80gb", p);
      const double s = sc.model.seq_length, b = 4, h = sc.model.hidden, a = sc.model.heads, t = c.t;
      double expect = 0;
      if (c.r == Recompute::full)
        expect = 2 * s * b * h / (c.sp ? t : 1);
      else if (c.r == Recompute::selective)
        expect = s * b * h * (c.sp ? 34 / t : 10 + 24 / t);
      else if (c.t == 1)
        expect = s * b * h * (34 + 5 * a * s / h);
      else
        expect =
            s * b * h * (c.sp ? 34 / t + 5 * a * s / (h * t) : 10 + 24 / t + 5 * a * s / (h * t));
      EXPECT_NEAR(block_activation_bytes(sc, 3).value() / expect, 1.0, 1e-12);
    }
  }
}

// A block's backward under recompute first replays what the block did not keep: for that
// moment the rank holds the block's whole activations beside everything kept. In Korthikanti's
// forms (16-bit, TP t, no SP): full recompute replays sbh (10 + 24/t + 5as/(ht)) - 2sbh, selective
// the attention core, 5as^2b/t. memory_per_rank counts the largest replay once at the stage's
// peak, or the unfused loss's fp32 cast (a s b V / t), the backward's other transient, if that
// is larger. gpt3-175b (the standard kernel, dropout) on TP 8, PP 1, one micro-batch in flight.
TEST(Memory, ReplayedBlockCountedOnceAtThePeak) {
  auto make = [](Recompute r) {
    PlanInput p = plan(8, 8, 1, 1, 8);
    p.recompute = r;
    p.precision = Precision::fp16;
    p.attention = AttentionKernel::standard;
    return scenario("gpt3-175b", "dgx-a100-80gb", p);
  };
  const Scenario none = make(Recompute::none);
  const double s = 2048, b = 1, h = 12288, a = 96, t = 8, V = 51200, L = 96;
  const double whole = s * b * h * (10 + 24 / t + 5 * a * s / (h * t));
  const double cast = 2 * s * b * V / t;  // the fp32 cast beside the fp16 logits
  const Workload wn = build_workload(none);
  const double act_none = memory_per_rank(wn, wn.roles[0]).activations.value();
  EXPECT_DOUBLE_EQ(block_replay_bytes(none, 3).value(), 0);
  for (Recompute r : {Recompute::full, Recompute::selective}) {
    SCOPED_TRACE(to_string(r));
    const Scenario sc = make(r);
    const double kept = r == Recompute::full ? 2 * s * b * h : s * b * h * (10 + 24 / t);
    const double replay = r == Recompute::full ? whole - kept : 5 * a * s * s * b / t;
    EXPECT_NEAR(block_replay_bytes(sc, 3).value() / replay, 1.0, 1e-12);
    ASSERT_GT(replay, cast);
    const Workload w = build_workload(sc);
    // The same head and loss terms as without recompute, where the cast is the transient.
    EXPECT_NEAR(memory_per_rank(w, w.roles[0]).activations.value() - L * kept,
                act_none - L * whole - cast + replay, 1e-6 * act_none);
  }
}

// DeepSpeed ZeRO-3's gathered parameters are what its coordinator's replay holds at once
// (Role::zero3_live_params): at least the largest module's (the MLP's first Linear, 4h^2 + 4h),
// at most two blocks' (commscope's own ZeRO-3 count: the current and the prefetched block); the
// same from build_layout as from the built workload. gpt3-175b on 384 A100s, ZeRO-3, full
// recompute, micro-batch 4.
TEST(Memory, DeepSpeedZero3BuffersAreTheCoordinatorsPeak) {
  PlanInput p = plan(384, 1, 1, 4, 1536);
  p.zero = 3;
  p.recompute = Recompute::full;
  p.framework = Framework::deepspeed;
  const Scenario sc = scenario("gpt3-175b", "dgx-a100-80gb", p);
  const Workload w = build_workload(sc), layout = build_layout(sc);
  const Role& r = w.roles[0];
  const double h = 12288, block = 12 * h * h + 13 * h;
  ASSERT_GT(r.zero3_live_params, 0);
  EXPECT_EQ(layout.roles[0].zero3_live_params, r.zero3_live_params);
  EXPECT_GE(static_cast<double>(r.zero3_live_params), 4 * h * h + 4 * h);
  EXPECT_LE(static_cast<double>(r.zero3_live_params), 2 * block);
  // and its gradient bucket, reduce_bucket_size (5e8) elements of bf16 (stage3.py's
  // __ipg_bucket_flat_buffer); none without contiguous_gradients; under 0.3-0.5 two with
  // overlap_comm (its backward's ipg_buffer buf_0 and buf_1), one without.
  const double bucket = 2.0 * 5e8;
  EXPECT_DOUBLE_EQ(memory_per_rank(w, r).comm_buffers.value(),
                   2.0 * static_cast<double>(r.zero3_live_params) + bucket);
  EXPECT_DOUBLE_EQ(memory_per_rank(layout, layout.roles[0]).total().value(),
                   memory_per_rank(w, r).total().value());
  for (auto [version, contiguous, overlap, buckets] :
       {std::tuple{"", false, true, 0}, std::tuple{"0.3", true, true, 2},
        std::tuple{"0.3", true, false, 1}, std::tuple{"current", true, true, 1}}) {
    SCOPED_TRACE(
        fmt::format("version '{}' contiguous {} overlap {}", version, contiguous, overlap));
    PlanInput q = p;
    if (*version) q.deepspeed_version = version;
    q.contiguous_gradients = contiguous;
    q.overlap_grad_reduce = overlap;
    const Workload wq = build_layout(scenario("gpt3-175b", "dgx-a100-80gb", q));
    EXPECT_DOUBLE_EQ(memory_per_rank(wq, wq.roles[0]).comm_buffers.value(),
                     2.0 * static_cast<double>(wq.roles[0].zero3_live_params) + buckets * bucket);
  }
  // commscope's own ZeRO-3 pattern: the current and the prefetched block, as before
  PlanInput own = p;
  own.framework.reset();
  const Scenario so = scenario("gpt3-175b", "dgx-a100-80gb", own);
  const Workload wo = build_workload(so);
  EXPECT_EQ(wo.roles[0].zero3_live_params, 0);
  EXPECT_NEAR(memory_per_rank(wo, wo.roles[0]).comm_buffers.value(), 2 * 2 * block, 1e-9 * block);
}

// 1F1B keeps p - i micro-batches on stage i; GPipe keeps all m; the first stage of the
// interleaved schedule keeps (1 + (p-1)/(pv)) times the 1F1B first stage's activations
// (Korthikanti et al. 2022, Section 4.2.3), here counted exactly from Megatron's warm-up.
TEST(Memory, InflightMicrobatches) {
  PlanInput p = plan(8, 1, 8, 1, 64);
  Scenario sc = scenario("megatron-1.7b", "dgx-a100-80gb", p);
  for (int s = 0; s < 8; ++s) EXPECT_EQ(inflight_microbatches(sc, s), 8 - s);
  p.schedule = Schedule::gpipe;
  sc = scenario("megatron-1.7b", "dgx-a100-80gb", p);
  EXPECT_EQ(inflight_microbatches(sc, 0), 64);
  p.schedule = Schedule::interleaved;
  p.virtual_stages = 3;
  sc = scenario("megatron-1.7b", "dgx-a100-80gb", p);
  EXPECT_EQ(inflight_microbatches(sc, 0), (8 - 1) * 2 + (3 - 1) * 8 + 1);
  EXPECT_EQ(inflight_microbatches(sc, 7), (3 - 1) * 8 + 1);
}

// The gated (SwiGLU) MLP and FlashAttention, derived from what the kernels save for backward
// (16-bit, no dropout, grouped-query attention; q = heads x head_dim, kv = kv_heads x head_dim):
//   outside the TP region (/t under SP): the two norm inputs and the two norm outputs that are
//     the QKV and MLP up-projection inputs: 4 tensors of sbh;
//   inside (/t): Q (sbq), K and V (sb kv each) and the output O (sbq), which FlashAttention-2
//     saves with the fp32 logsumexp (b x heads x s) and the output projection reads as its
//     input; the fused SwiGLU saves its 2f-wide input (both branches; silu is recomputed in
//     backward) and the down projection its f-wide input (the product): 3 sbf.
//   bytes = 2sb (4h / d + (2q + 2kv + 3f) / t) + 4 b heads s / t, d = t with SP, else 1.
// Selective recompute with the standard kernel keeps the same minus the logsumexp. A GPT block
// (GELU, dropout) under flash keeps Korthikanti's sbh(10 + 24/t) plus the logsumexp: the s^2
// scores, softmax, its dropout mask and output are gone (FlashAttention regenerates the mask).
TEST(Memory, GatedMlpAndFlashAttentionPerLayer) {
  for (const char* name : {"llama3-8b", "llama3-70b"}) {
    for (int t : {1, 8}) {
      for (bool sp : {false, true}) {
        for (Recompute r : {Recompute::none, Recompute::selective}) {
          SCOPED_TRACE(fmt::format("{} t {} sp {} recompute {}", name, t, sp, to_string(r)));
          PlanInput p = plan(t, t, 1, 2);
          p.sequence_parallel = sp && t > 1;
          p.recompute = r;
          p.precision = Precision::bf16;
          p.attention = r == Recompute::none ? AttentionKernel::flash : AttentionKernel::standard;
          Scenario sc = scenario(name, "dgx-h100", p);
          const ModelSpec& m = sc.model;
          ASSERT_TRUE(m.gated_mlp());
          ASSERT_FALSE(m.dropout);
          const double s = m.seq_length, b = 2, h = m.hidden, f = m.ffn, n = m.heads;
          const double hd = h / n, q = n * hd, kv = m.kv_heads * hd,
                       d = sc.plan.sequence_parallel ? t : 1;
          const double lse = r == Recompute::none ? 4 * b * n * s / t : 0.0;
          const double expect = 2 * s * b * (4 * h / d + (2 * q + 2 * kv + 3 * f) / t) + lse;
          EXPECT_NEAR(block_activation_bytes(sc, 1).value() / expect, 1.0, 1e-12);
        }
      }
    }
  }
  for (int t : {1, 8}) {
    SCOPED_TRACE(fmt::format("gpt3-175b flash t {}", t));
    PlanInput p = plan(t, t, 1, 1);
    p.precision = Precision::fp16;
    p.attention = AttentionKernel::flash;
    Scenario sc = scenario("gpt3-175b", "dgx-a100-80gb", p);
    const double s = sc.model.seq_length, b = 1, h = sc.model.hidden, a = sc.model.heads;
    const double expect = s * b * h * (10 + 24.0 / t) + 4 * a * s * b / t;
    EXPECT_NEAR(block_activation_bytes(sc, 0).value() / expect, 1.0, 1e-12);
  }
}

// Gemma 2's sandwich norms keep their inputs, the attention's and the MLP's outputs: 2 a s b h
// more a block than the same model with pre-norms only (a shard of it under SP).
TEST(Memory, PostNormsKeepTheirInputs) {
  const std::string gemma2 = COMMSCOPE_SOURCE_DIR "/tests/data/hf/gemma-2-2b.json";
  for (int t : {1, 2}) {
    SCOPED_TRACE(fmt::format("t {}", t));
    PlanInput p = plan(t, t, 1, 2);
    p.sequence_parallel = t > 1;
    p.precision = Precision::bf16;
    Scenario with = scenario(gemma2, "dgx-h100", p);
    ASSERT_TRUE(with.model.post_norms);
    Scenario without = with;
    without.model.post_norms = false;
    const double s = with.model.seq_length, b = 2, h = with.model.hidden;
    EXPECT_DOUBLE_EQ(
        block_activation_bytes(with, 1).value() - block_activation_bytes(without, 1).value(),
        2 * 2 * s * b * h / t);
  }
}

// Falcon-7B's one pre-norm a block (parallel_attn, not new_decoder_architecture): against the
// same model with two norms, a block keeps neither the second norm's input nor its output (the
// MLP's input, which is the QKV's, kept once): 2 a s b h fewer (a = 2 bytes, bf16), and its
// workload runs one norm op fewer a block. Falcon-40B (ln_attn and ln_mlp) has two.
TEST(Memory, SharedNormKeepsOneInput) {
  const std::string dir = COMMSCOPE_SOURCE_DIR "/tests/data/hf/";
  PlanInput p = plan(1, 1, 1, 2);
  p.precision = Precision::bf16;
  Scenario shared = scenario(dir + "falcon-7b.json", "dgx-h100", p);
  ASSERT_TRUE(shared.model.shared_norm);
  EXPECT_FALSE(scenario(dir + "falcon-40b.json", "dgx-h100", p).model.shared_norm);
  Scenario two = shared;
  two.model.shared_norm = false;
  const double s = shared.model.seq_length, b = 2, h = shared.model.hidden;
  EXPECT_DOUBLE_EQ(
      block_activation_bytes(two, 1).value() - block_activation_bytes(shared, 1).value(),
      2 * 2 * s * b * h);
  const Workload w_shared = build_workload(shared), w_two = build_workload(two);
  auto norms = [](const Workload& w) {
    int n = 0;
    for (const Op& op : w.roles[0].chunks[0].forward.ops())
      if (op.kind == OpKind::compute && op.compute == ComputeClass::norm) ++n;
    return n;
  };
  EXPECT_EQ(norms(w_two) - norms(w_shared), shared.model.decoder_layers);
  EXPECT_TRUE(testing::named(w_shared.roles[0].chunks[0].forward, "norm_mlp").empty());
}

// Megatron's interleaved schedule (Narayanan et al. SC'21 sec. 2.2.2) with Llama 3 405B's
// uneven split (Meta 2024, sec. 3.3.2: PP 16, v = 8, one block per chunk, the first chunk of the
// first stage only the embedding and the last chunk of the last stage only the head and loss).
// Stage i warms up with (p - i - 1) x 2 + (v - 1) x p forwards and then alternates one forward
// and one backward, forwards in groups of p micro-batches per chunk, backwards from the last
// chunk. Stage 0: of its first 143 forwards, 16 + 15 run the empty chunk 0, so it peaks at
// (v - 1) x p = 112 blocks, not 143. Stage 1 (all chunks one block) holds all 141. Stage 15
// holds the 112 forwards of chunks 0-6 when the loss chunk's first forward starts, and each
// loss chunk's backward follows its forward at once: 112 blocks plus one micro-batch's loss.
TEST(Memory, InterleavedPeakWithEmbeddingAndLossOnlyChunks) {
  PlanInput p = plan(16 * 8 * 2, 8, 16, 1, 2 * 32);  // DP 2: 32 micro-batches per iteration
  p.virtual_stages = 8;
  p.sequence_parallel = true;
  p.precision = Precision::bf16;
  p.attention = AttentionKernel::flash;
  std::vector<int> layers(128, 1);
  layers.front() = layers.back() = 0;
  p.stage_layers = layers;
  Scenario sc = scenario("llama3-405b", "dgx-h100", p);
  ASSERT_EQ(sc.plan.grad_accum, 32);
  Workload w = build_workload(sc);
  ASSERT_EQ(w.roles.size(), 16u);
  const double block = block_activation_bytes(sc, 5).value();
  const double s = sc.model.seq_length, h = sc.model.hidden, V = sc.model.vocab, t = 8;
  // The last stage's loss: the final norm's and the LM head's inputs (s/t tokens each under
  // SP), and the fp32 softmax of the vocabulary shard (Megatron's vocab-parallel cross entropy).
  const double loss = 2 * 2 * s * h / t + 4 * s * V / t;
  // And, once at the peak, the bf16 logits the fp32 cast is made from (2 bytes a logit).
  const double cast = 2 * s * V / t;
  EXPECT_NEAR(memory_per_rank(w, w.roles[0]).activations.value() / (112 * block), 1.0, 1e-12);
  EXPECT_NEAR(memory_per_rank(w, w.roles[1]).activations.value() / (141 * block), 1.0, 1e-12);
  EXPECT_NEAR(memory_per_rank(w, w.roles[15]).activations.value() / (112 * block + loss + cast),
              1.0, 1e-12);

  // The same stage with all chunks alike: inflight_microbatches x chunk, as before.
  const std::vector<Bytes> even(8, Bytes(1.0));
  EXPECT_EQ(stage_peak_activations(sc, 0, even).value(), 143.0);
  // Fewer micro-batches than the warm-up (m = p = 16: 128 chunk forwards <= 143): every
  // forward runs before the first backward, so the peak is m x the sum of the chunks.
  PlanInput few = p;
  few.global_batch = 2 * 16;
  Scenario sc16 = scenario("llama3-405b", "dgx-h100", few);
  std::vector<Bytes> uneven;
  for (int c = 0; c < 8; ++c) uneven.push_back(Bytes(1.0 + c));
  EXPECT_EQ(stage_peak_activations(sc16, 0, uneven).value(), 16.0 * (8 * 9 / 2));
}

// The interleaved peak over one period of the steady state (what is held repeats every PP x v
// steps) equals the peak over every step of the schedule, computed here step by step from
// Megatron's order: uneven chunk sizes (whole bytes: the sums are exact), PP 2-8, v 2-5, up to
// 64 micro-batches, every stage.
TEST(Memory, InterleavedPeakFromOnePeriodEqualsTheWholeSchedule) {
  PlanInput p = plan(16 * 8 * 2, 8, 16, 1, 2 * 32);
  p.virtual_stages = 8;
  std::vector<int> layers(128, 1);
  layers.front() = layers.back() = 0;
  p.stage_layers = layers;
  Scenario sc = scenario("llama3-405b", "dgx-h100", p);
  ASSERT_EQ(sc.plan.schedule, Schedule::interleaved);
  std::uint64_t seed = 7;
  auto next = [&] { return (seed = seed * 6364136223846793005ULL + 1442695040888963407ULL) >> 40; };
  int checked = 0;
  for (int pp : {2, 3, 4, 8})
    for (int v : {2, 3, 5})
      for (int m : {pp, 2 * pp, 3 * pp, 8 * pp}) {
        if (m > 64) continue;
        sc.plan.pp = pp;
        sc.plan.virtual_stages = v;
        sc.plan.grad_accum = m;
        std::vector<Bytes> chunks;
        for (int c = 0; c < v; ++c) chunks.push_back(Bytes(static_cast<double>(1 + next() % 1000)));
        for (int stage = 0; stage < pp; ++stage) {
          const std::int64_t total = std::int64_t{m} * v, pv = std::int64_t{pp} * v;
          const std::int64_t warmup = std::min(total, inflight_microbatches(sc, stage) - 1);
          auto fwd = [&](std::int64_t k) {
            return chunks[static_cast<std::size_t>((k % pv) / pp)];
          };
          auto bwd = [&](std::int64_t k) {
            return chunks[static_cast<std::size_t>(v - 1 - (k % pv) / pp)];
          };
          double held = 0, peak = 0;
          for (std::int64_t k = 0; k < warmup; ++k) peak = std::max(peak, held += fwd(k).value());
          for (std::int64_t k = 0; k + warmup < total; ++k) {
            peak = std::max(peak, held += fwd(k + warmup).value());
            held -= bwd(k).value();
          }
          EXPECT_EQ(stage_peak_activations(sc, stage, chunks).value(), peak)
              << "pp " << pp << " v " << v << " m " << m << " stage " << stage;
          ++checked;
        }
      }
  EXPECT_GT(checked, 100);
}

// The loss's tensors live from a micro-batch's forward on the last stage to its backward: one
// micro-batch's under 1F1B (its backward follows at once), all m under GPipe (every forward
// first); Megatron's unfused cross entropy adds, once at the peak, the fp16 logits its fp32 cast
// is made from. Fused (--cross-entropy-loss-fusion), the loss keeps the fp16 logits instead of
// the fp32 softmax and makes no cast. The embedding dropout mask is held by the first stage as
// its blocks are.
TEST(Memory, LossAndEmbeddingBuffersFollowTheSchedule) {
  for (auto [sched, fused] :
       {std::pair{Schedule::one_f_one_b, false}, std::pair{Schedule::gpipe, false},
        std::pair{Schedule::one_f_one_b, true}}) {
    SCOPED_TRACE(fmt::format("schedule {} fused {}", static_cast<int>(sched), fused));
    PlanInput p = plan(8, 2, 4, 2, 48);  // DP 1: m = 24 micro-batches of 2
    p.schedule = sched;
    if (fused) p.cross_entropy = CrossEntropy::fused;
    p.sequence_parallel = true;
    p.precision = Precision::fp16;
    Scenario sc = scenario("megatron-1.7b", "dgx-a100-80gb", p);
    const ParallelPlan& pl = sc.plan;
    const std::int64_t m = pl.grad_accum;
    ASSERT_GT(m, 4);
    Workload w = build_workload(sc);
    const double s = sc.model.seq_length, b = 2, h = sc.model.hidden, t = pl.tp;
    const double V = sc.model.vocab;
    auto blocks = [&](const Role& r) {
      double c = 0;
      for (const Chunk& ch : r.chunks)
        for (int l = ch.first_layer; l < ch.first_layer + ch.layers; ++l)
          c += block_activation_bytes(sc, l).value();
      return c;
    };
    const Role& first = w.roles.front();
    const Role& last = w.roles.back();
    const double first_held = sched == Schedule::gpipe ? m : pl.pp;
    const double last_held = sched == Schedule::gpipe ? m : 1;
    ASSERT_TRUE(sc.model.dropout);
    const double mask = s * b * h / t;  // 1 byte per element, SP-split
    // Norm and head inputs, and the fp32 softmax (fused: the fp16 logits).
    const double loss = 2 * 2 * s * b * h / t + (fused ? 2 : 4) * s * b * V / t;
    const double cast = fused ? 0 : 2 * s * b * V / t;
    EXPECT_NEAR(
        memory_per_rank(w, first).activations.value() / (first_held * (blocks(first) + mask)), 1.0,
        1e-12);
    EXPECT_NEAR(
        memory_per_rank(w, last).activations.value() / (last_held * (blocks(last) + loss) + cast),
        1.0, 1e-12);
  }
}

// --cross-entropy-loss-fusion on one GPU (the last stage is the only one): unfused, Megatron's
// cross entropy keeps the fp32 softmax (4 bytes a logit) and casts the bf16 logits (2 more at the
// peak); fused, it keeps the bf16 logits (2). The difference is 4 x s x b x V bytes exactly; in
// fp32 there is no cast and both keep 4 bytes a logit.
TEST(Memory, CrossEntropyFusionIsFourBytesALogitInBf16) {
  for (Precision prec : {Precision::bf16, Precision::fp32}) {
    SCOPED_TRACE(static_cast<int>(prec));
    double total[2] = {0, 0};
    for (int fused = 0; fused < 2; ++fused) {
      PlanInput p = plan(1, 1, 1, 8, 8);
      p.precision = prec;
      p.seq_length = 4096;
      if (fused == 1) p.cross_entropy = CrossEntropy::fused;
      Scenario sc = scenario("llama3.2-1b", "dgx-h100", p);
      Workload w = build_workload(sc);
      total[fused] = memory_per_rank(w, w.roles.front()).total().value();
    }
    const double logits = 8.0 * 4096 * 128256;
    EXPECT_DOUBLE_EQ(total[0] - total[1], prec == Precision::bf16 ? 4 * logits : 0.0);
  }
}

// --cross-entropy torch (torchtitan's loss: torch.nn.functional.cross_entropy on the logits
// cast to fp32, which ATen runs as log_softmax then nll_loss): the fp32 log-softmax is kept (4
// bytes a logit) and, at the start of backward, nll_loss's gradient and then log_softmax's
// (fp32, the logits' shape each) are made beside it: 12 bytes a logit at the peak, against the
// fused loss's a (its gradient written in place), in bf16 and fp32 alike. FlashAttention's
// (--cross-entropy flash-attn, llm-foundry's) keeps the logits as the fused one does and makes
// its gradient beside them: 2a. On two pipeline stages only the last, which runs the loss, holds
// it; under TP each rank holds its vocabulary shard's.
TEST(Memory, PyTorchCrossEntropyIsTwelveBytesALogitAtItsPeak) {
  for (Precision prec : {Precision::bf16, Precision::fp32}) {
    for (int tp : {1, 2}) {
      for (int pp : {1, 2}) {
        SCOPED_TRACE(fmt::format("precision {} tp {} pp {}", static_cast<int>(prec), tp, pp));
        std::vector<double> total[3];
        const CrossEntropy kinds[] = {CrossEntropy::torch, CrossEntropy::fused,
                                      CrossEntropy::flash_attn};
        for (int k = 0; k < 3; ++k) {
          const CrossEntropy ce = kinds[k];
          PlanInput p = plan(tp * pp, tp, pp, 2, 2);
          p.precision = prec;
          p.seq_length = 4096;
          p.cross_entropy = ce;
          Scenario sc = scenario("llama3.2-1b", "dgx-h100", p);
          ASSERT_EQ(sc.plan.grad_accum, 1);
          Workload w = build_workload(sc);
          for (const Role& r : w.roles) total[k].push_back(memory_per_rank(w, r).total().value());
        }
        const double a = prec == Precision::bf16 ? 2 : 4;
        const double logits = 2.0 * 4096 * 128256 / tp;
        ASSERT_EQ(total[0].size(), static_cast<std::size_t>(pp));
        EXPECT_DOUBLE_EQ(total[0].back() - total[1].back(), (12 - a) * logits);
        EXPECT_DOUBLE_EQ(total[2].back() - total[1].back(), a * logits);
        if (pp > 1) {
          EXPECT_DOUBLE_EQ(total[0].front(), total[1].front());
          EXPECT_DOUBLE_EQ(total[2].front(), total[1].front());
        }
      }
    }
  }
}

TEST(Memory, ReportsWhatDoesNotFit) {
  // GPT-3 175B data parallel on A100 40GB: 16 bytes per parameter alone is 2.8 TB.
  Scenario sc = scenario("gpt3-175b", "thetagpu-tg40", plan(8));
  Workload w = build_workload(sc);
  MemoryBreakdown m = memory_per_rank(w, w.roles[0]);
  EXPECT_GT(m.total(), sc.system.gpu.memory);
}

// Megatron-LM's --recompute-method block --recompute-num-layers N (megatron/core/transformer/
// transformer_block.py, _checkpointed_forward): in each model chunk the first N blocks replay
// their forward in backward and keep only their input; the others keep every activation.
// gpt2-large (36 blocks) on PP 2 x VP 3: six chunks of six blocks, N = 2.
TEST(Memory, RecomputeBlockMethodReplaysTheFirstBlocksOfEachChunk) {
  auto make = [](std::optional<Recompute> r, std::optional<int> block) {
    PlanInput p = plan(2, 1, 2, 1, 4);
    p.virtual_stages = 3;
    p.schedule = Schedule::interleaved;
    p.recompute = r;
    if (block) {
      p.recompute_block = true;
      p.recompute_num_layers = *block;
    }
    return scenario("gpt2-large", "dgx-a100-80gb", p);
  };
  const Scenario none = make(Recompute::none, {}), full = make(Recompute::full, {});
  const Scenario two = make(Recompute::full, 2), all = make(Recompute::full, 6);
  ASSERT_EQ(two.plan.recompute_block_layers, 2);
  const Workload w = build_workload(two);
  int chunks = 0;
  for (const Role& r : w.roles)
    for (const Chunk& ch : r.chunks) {
      ++chunks;
      ASSERT_EQ(ch.layers, 6);
      std::set<int> replayed;
      for (const Op& op : ch.backward.ops())
        if (op.phase == Phase::recompute) replayed.insert(op.layer);
      EXPECT_EQ(replayed, (std::set<int>{ch.first_layer, ch.first_layer + 1}))
          << "chunk at " << ch.first_layer;
    }
  EXPECT_EQ(chunks, 6);

  // Memory: per micro-batch, a chunk keeps two blocks' inputs (full recompute's form) and four
  // blocks' whole activations (no recompute's form). The stage's peak holds k chunk-micro-batches
  // whatever the blocks keep; k from none against full, then block N = 2 is k of its chunks.
  const double input = block_activation_bytes(full, 3).value();
  const double whole = block_activation_bytes(none, 3).value();
  EXPECT_DOUBLE_EQ(block_activation_bytes(two, 3, true).value(), input);
  EXPECT_DOUBLE_EQ(block_activation_bytes(two, 3, false).value(), whole);
  // Beside the peak, one transient (Memory.ReplayedBlockCountedOnceAtThePeak): a replayed
  // block's activations, its whole less its kept input, under full and block alike, or on the
  // last stage the loss's fp32 cast (bf16 logits: 2 s b V bytes) if larger; without recompute
  // the cast alone.
  const double replay = whole - input;
  EXPECT_DOUBLE_EQ(block_replay_bytes(full, 3).value(), replay);
  EXPECT_DOUBLE_EQ(block_replay_bytes(two, 3, true).value(), replay);
  EXPECT_DOUBLE_EQ(block_replay_bytes(none, 3).value(), 0);
  const Workload wf = build_workload(full), wn = build_workload(none);
  for (std::size_t stage = 0; stage < 2; ++stage) {
    SCOPED_TRACE(stage);
    const double cast = stage == 1 ? 2.0 * 1024 * 1 * 50257 : 0.0;
    const double transient = std::max(cast, replay);
    const double a2 = memory_per_rank(w, w.roles[stage]).activations.value() - transient;
    const double af = memory_per_rank(wf, wf.roles[stage]).activations.value() - transient;
    const double an = memory_per_rank(wn, wn.roles[stage]).activations.value() - cast;
    const double k = (an - af) / (6 * whole - 6 * input);
    EXPECT_NEAR(k, std::round(k), 1e-9);
    EXPECT_GE(std::round(k), 3);  // at least a micro-batch of each of its three chunks
    EXPECT_NEAR((a2 - af) / (k * (2 * input + 4 * whole - 6 * input)), 1.0, 1e-9);
  }

  // Time and FLOPs: the replayed forward is a third of full's (2 of 6 blocks), N = 6 is full.
  auto recompute_flops = [](const Scenario& sc) {
    const Workload wl = build_workload(sc);
    double f = 0;
    for (const Role& r : wl.roles)
      for (const Chunk& ch : r.chunks)
        for (const Op& op : ch.backward.ops())
          if (op.phase == Phase::recompute) f += op.flops;
    return f;
  };
  EXPECT_GT(recompute_flops(full), 0);
  EXPECT_NEAR(recompute_flops(two) / recompute_flops(full), 2.0 / 6.0, 1e-12);
  EXPECT_DOUBLE_EQ(recompute_flops(all), recompute_flops(full));
  const double tn = simulate(build_workload(none)).iteration_time;
  const double t2 = simulate(w).iteration_time;
  const double tf = simulate(build_workload(full)).iteration_time;
  EXPECT_LT(tn, t2);
  EXPECT_LT(t2, tf);
  EXPECT_DOUBLE_EQ(simulate(build_workload(all)).iteration_time, tf);
}

// The flags' checks, one line each naming the flag: full granularity only; uniform only in
// groups of one; at least one block.
// Megatron-LM's --recompute-method uniform --recompute-num-layers N (transformer_block.py,
// _checkpointed_forward: checkpoint(custom(l, l + N)) over each chunk's blocks): a group of N
// blocks keeps its first block's input only and replays its N blocks' forward at once, so each
// micro-batch in flight keeps ceil(L / N) inputs and the replay holds N blocks' whole
// activations less the group's input (the last group, of what is left, no more). Llama 2 70B on
// TP 8 x PP 4, 20 blocks a stage; stage 0 holds PP micro-batches (1F1B) and no loss.
TEST(Memory, RecomputeUniformGroups) {
  auto make = [](std::optional<Recompute> r, int n) {
    PlanInput p = plan(64, 8, 4, 1, 64);
    p.recompute = r;
    if (r == Recompute::full) p.recompute_num_layers = n;
    return scenario("llama2-70b", "dgx-a100-80gb", p);
  };
  const Scenario none = make(Recompute::none, 1), one = make(Recompute::full, 1);
  const double input = block_activation_bytes(one, 3).value();
  const double whole = block_activation_bytes(none, 3).value();
  const double inflight = static_cast<double>(inflight_microbatches(one, 0));
  ASSERT_EQ(inflight, 4);
  const Workload w1 = build_workload(one);
  ASSERT_EQ(w1.roles[0].chunks[0].layers, 20);
  const double act1 = memory_per_rank(w1, w1.roles[0]).activations.value();
  const double t1 = simulate(w1).iteration_time;
  for (int n : {2, 3, 4, 20, 40}) {
    SCOPED_TRACE(n);
    const Scenario sc = make(Recompute::full, n);
    EXPECT_EQ(sc.plan.recompute_uniform_layers, n);
    const Workload w = build_workload(sc);
    const double act = memory_per_rank(w, w.roles[0]).activations.value();
    const double kept = std::ceil(20.0 / n), replayed = std::min(n, 20);
    // Against N = 1: fewer inputs held, a larger replay.
    EXPECT_NEAR(act - act1,
                inflight * (kept - 20) * input + (replayed * whole - input) - (whole - input),
                1e-9 * act1);
    // The same ops and time: each block still replays its forward once.
    EXPECT_DOUBLE_EQ(simulate(w).iteration_time, t1);
    // The plan search's memory bound stays below.
    EXPECT_LE(search::memory_lower_bound(sc), memory_per_rank(w, w.roles[0]).total().value());
  }
  // describe and the JSON say the grouping
  const Scenario two = make(Recompute::full, 2);
  EXPECT_EQ(to_json(two.plan)["recompute_method"], "uniform");
  EXPECT_EQ(to_json(two.plan)["recompute_num_layers"], 2);
}

TEST(Memory, RecomputeMethodChecks) {
  PlanInput p = plan(8);
  p.recompute = Recompute::selective;
  p.recompute_block = true;
  p.recompute_num_layers = 2;
  std::string e = testing::scenario_error("gpt2-large", "dgx-a100-80gb", p);
  EXPECT_NE(e.find("--recompute-method: expected --recompute-granularity full, got selective"),
            std::string::npos)
      << e;
  p.recompute = Recompute::full;
  p.recompute_block = false;
  p.recompute_num_layers = 5000;
  e = testing::scenario_error("gpt2-large", "dgx-a100-80gb", p);
  EXPECT_NE(e.find("--recompute-num-layers: expected at most 4096 blocks a group, got 5000"),
            std::string::npos)
      << e;
  p.recompute_block = true;
  p.recompute_num_layers = 0;
  e = testing::scenario_error("gpt2-large", "dgx-a100-80gb", p);
  EXPECT_NE(e.find("--recompute-num-layers: expected a number of blocks of at least 1, got 0"),
            std::string::npos)
      << e;
  // uniform with 1 is the plain full recompute.
  p.recompute_block = false;
  p.recompute_num_layers = 1;
  EXPECT_EQ(scenario("gpt2-large", "dgx-a100-80gb", p).plan.recompute_block_layers, 0);
}

// torchtitan's op-level selective checkpointing (--recompute-granularity op; torchtitan's
// parallelize_llama.py, apply_ac with selective_ac_option "op"): each block keeps its input and
// the outputs of what the policy saves, counted as torchtitan's Llama runs its Linears (wq, wk,
// wv, wo, w1, w3, w2): every odd aten.mm (wq, wv, w1, w2; w2's output is the row-parallel
// product before its reduction, h wide), the SDPA kernel's output and logsumexp, and under
// sequence parallelism the two reduce-scatters' outputs. The list below is that policy's, tensor
// by tensor; the replay is wk, wo and w3 with the norms, the residual and the activation, and
// never the output projection w2.
TEST(Memory, OpRecomputeKeepsWhatTorchtitansPolicySaves) {
  struct Case {
    int tp;
    bool sp, flash;
  };
  for (const Case c : {Case{1, false, true}, Case{1, false, false}, Case{2, true, true},
                       Case{2, false, true}, Case{4, true, false}}) {
    SCOPED_TRACE(fmt::format("tp {} sp {} flash {}", c.tp, c.sp, c.flash));
    auto make = [&](Recompute r) {
      PlanInput p = plan(8, c.tp, 1, 2);
      p.seq_length = 2048;
      p.sequence_parallel = c.sp;
      p.recompute = r;
      p.attention = c.flash ? AttentionKernel::flash : AttentionKernel::standard;
      return scenario("llama2-70b", "dgx-a100-80gb", p);
    };
    const Scenario op = make(Recompute::op);
    const double t = c.tp, s = 2048, b = 2, h = 8192, q = 8192, kv = 1024, f = 28672;
    const double heads = 64, bf16 = 2, tokens = s * b;
    double saved = bf16 * tokens * h / (c.sp ? t : 1)  // the checkpoint's input
                   + bf16 * tokens * q / t             // wq (1st product)
                   + bf16 * tokens * kv / t            // wv (3rd)
                   + bf16 * tokens * f / t             // w1 (5th)
                   + bf16 * tokens * h;                // w2 (7th), before its reduction
    if (c.flash) saved += bf16 * tokens * q / t + 4.0 * b * heads / t * s;  // SDPA: O, lse
    if (c.sp) saved += 2 * bf16 * tokens * h / t;  // the reduce-scatters' outputs
    EXPECT_DOUBLE_EQ(block_activation_bytes(op, 5).value(), saved);
    EXPECT_LT(block_activation_bytes(make(Recompute::full), 5).value(), saved);
    EXPECT_GT(block_activation_bytes(make(Recompute::none), 5).value(), saved);

    // The replayed GEMMs of block 5: wk, wo and w3, each over this rank's share.
    const Workload w = build_workload(op);
    double gemm = 0;
    std::set<std::string> names;
    std::map<std::string, double> width;  // the replayed GEMMs' output widths
    for (const Op& o : w.roles.front().chunks.front().backward.ops())
      if (o.phase == Phase::recompute && o.layer == 5) {
        names.insert(std::string(o.name));
        if (o.kind == OpKind::compute && o.compute == ComputeClass::gemm) {
          gemm += o.flops;
          width[std::string(o.name)] += static_cast<double>(o.n);
        }
      }
    EXPECT_DOUBLE_EQ(gemm, 2 * tokens * h * (kv + q + f) / t);
    // wk of the fused qkv, wo whole, w3 of the fused gated input.
    EXPECT_EQ(width,
              (std::map<std::string, double>{{"qkv", kv / t}, {"attn_out", h}, {"mlp_in", f / t}}));
    EXPECT_TRUE(names.count("mlp_act") && names.count("norm_mlp") && names.count("attn_residual"));
    EXPECT_FALSE(names.count("mlp_out") || names.count("mlp_residual") ||
                 names.count("flash_attn"));
    EXPECT_EQ(names.count("sp_reduce_scatter"), 0u);
    EXPECT_EQ(names.count("sp_all_gather"), c.sp ? 1u : 0u);  // gathers are replayed
    EXPECT_EQ(names.count("tp_all_reduce"), !c.sp && c.tp > 1 ? 1u : 0u);
    EXPECT_EQ(names.count("softmax"), c.flash ? 0u : 1u);  // the standard core is replayed
  }
  // A plain MLP (gpt2-large): the products are wq, wk, wv, wo, in, out; the replay runs wk and
  // wo (in, the fifth, is kept, and out lies past the early stop).
  PlanInput p = plan(8, 1, 1, 4);
  p.recompute = Recompute::op;
  p.attention = AttentionKernel::flash;
  const Scenario gpt = scenario("gpt2-large", "dgx-a100-80gb", p);
  double gemm = 0;
  for (const Op& o : build_workload(gpt).roles.front().chunks.front().backward.ops())
    if (o.phase == Phase::recompute && o.layer == 3 && o.kind == OpKind::compute &&
        o.compute == ComputeClass::gemm)
      gemm += o.flops;
  EXPECT_DOUBLE_EQ(gemm, 2.0 * 4 * 1024 * 1280 * (1280 + 1280));

  // Time lies between none and full.
  auto time = [](Recompute r) {
    PlanInput q = plan(64, 1, 1, 1, 64);
    q.seq_length = 4096;
    q.framework = Framework::fsdp;
    q.attention = AttentionKernel::flash;
    q.recompute = r;
    return simulate(build_workload(scenario("llama2-70b", "dgx-a100-80gb", q))).iteration_time;
  };
  const double tn = time(Recompute::none), to = time(Recompute::op), tf = time(Recompute::full);
  EXPECT_LT(tn, to);
  EXPECT_LT(to, tf);
}

// torchtitan's op-level checkpointing of a MoE block (its MoE models' save list, v0.2.2
// models/qwen3/infra/parallelize.py; models/moe/moe.py): the attention keeps what the dense
// block's does (wq, wv, the SDPA kernel's O and logsumexp); the router's gate is forced to
// recompute (moe.router.gate) and not counted; the token dispatch's and combine's all-to-all
// outputs are kept (this rank's tokens x top-k rows, h wide each); the routed experts' grouped
// GEMMs are not in the list, and without early stop (torchtitan's default) the replay runs to
// the block's end: router, both expert projections, the activation. Qwen3-30B-A3B (no shared
// experts), sequence 2048, micro-batch 2, EP 8 on 16 GPUs; without EP no all-to-all is kept.
TEST(Memory, OpRecomputeOfAMoeBlock) {
  auto make = [](Recompute r, int ep) {
    PlanInput p = plan(16, 1, 1, 2);
    p.seq_length = 2048;
    p.framework = Framework::fsdp;
    p.attention = AttentionKernel::flash;
    p.ep = ep;
    p.recompute = r;
    return scenario("qwen3-30b-a3b", "dgx-h100", p);
  };
  const double s = 2048, b = 2, tokens = s * b, bf16 = 2;
  const double h = 2048, q = 32 * 128, kv = 4 * 128, heads = 32, E = 128, topk = 8, fe = 768;
  const double routed = tokens * topk;  // rows dispatched to this rank (imbalance 1)
  for (int ep : {8, 1}) {
    SCOPED_TRACE(ep);
    const Scenario op = make(Recompute::op, ep);
    double saved = bf16 * tokens * (h + q + kv)                // input, wq, wv
                   + bf16 * tokens * q + 4.0 * b * heads * s;  // SDPA: O, lse
    if (ep > 1) saved += 2 * bf16 * routed * h;                // dispatch and combine outputs
    EXPECT_DOUBLE_EQ(block_activation_bytes(op, 7).value(), saved);
    EXPECT_LT(block_activation_bytes(make(Recompute::full, ep), 7).value(), saved);

    const Workload w = build_workload(op);
    double gemm = 0;
    std::set<std::string> names;
    for (const Op& o : w.roles.front().chunks.front().backward.ops())
      if (o.phase == Phase::recompute && o.layer == 7) {
        names.insert(std::string(o.name));
        if (o.kind == OpKind::compute && o.compute == ComputeClass::gemm) gemm += o.flops;
      }
    // wk, wo, the router, the experts' gated input (2 x moe_ffn wide) and output
    EXPECT_DOUBLE_EQ(gemm, 2 * tokens * h * (kv + q + E) + 2 * routed * h * 3 * fe);
    EXPECT_TRUE(names.count("moe_router") && names.count("expert_in") &&
                names.count("expert_act") && names.count("expert_out"));
    EXPECT_FALSE(names.count("moe_dispatch") || names.count("moe_combine") ||
                 names.count("flash_attn"));
  }
  // Time lies between none and full.
  auto time = [&](Recompute r) { return simulate(build_workload(make(r, 8))).iteration_time; };
  const double tn = time(Recompute::none), to = time(Recompute::op), tf = time(Recompute::full);
  EXPECT_LT(tn, to);
  EXPECT_LT(to, tf);
}

// torchtitan's op-level checkpointing of latent attention (DeepSeek-V3, torchtitan v0.2.2
// models/deepseek_v3: wq_a or wq, wq_b, wkv_a, wkv_b, wo as separate Linears, the MoE models'
// save list; early_stop false by default, so the replay runs to the block's end). The products
// are counted from 1 in each block: DeepSeek-V2-Lite (torchtitan's "16B", no query latent) has
// four in its attention (wq and wkv_b kept), DeepSeek-V3 five (wq_a, wkv_a, wo kept), which
// shifts the MLP's parity: V3's dense block keeps w3 alone and replays w1 and w2. Widths from
// the Hugging Face configs (the presets' sources), micro-batch 2 at 2,048 tokens, FSDP, EP 8.
TEST(Memory, OpRecomputeOfLatentAttention) {
  struct Case {
    const char* model;
    double h, heads, q_lora, f, shared_f, moe_f, topk, experts;
  };
  const double s = 2048, b = 2, tokens = s * b, bf16 = 2;
  const double nope = 128, rope = 64, v = 128, kv_lora = 512;
  for (const Case& c : {Case{"deepseek-v2-lite", 2048, 16, 0, 10944, 2 * 1408, 1408, 6, 64},
                        Case{"deepseek-v3", 7168, 128, 1536, 18432, 2048, 2048, 8, 256}}) {
    SCOPED_TRACE(c.model);
    auto make = [&](Recompute r) {
      PlanInput p = plan(64, 1, 1, 2);
      p.seq_length = 2048;
      p.framework = Framework::fsdp;
      p.attention = AttentionKernel::flash;
      p.ep = 8;
      p.mtp_layers = 0;  // torchtitan trains no MTP module
      p.recompute = r;
      return scenario(c.model, "dgx-h100", p);
    };
    const Scenario op = make(Recompute::op);
    const double qk = nope + rope, q_out = c.heads * qk, kv_out = c.heads * (nope + v);
    const double sdpa = bf16 * tokens * c.heads * v + 4.0 * b * c.heads * s;  // O, lse
    const double routed = tokens * c.topk;
    const bool lora = c.q_lora > 0;
    // kept products: V2-Lite wq (1), wkv_b (3), then w1 (5), w2 (7); V3 wq_a (1), wkv_a (3),
    // wo (5), then w3 (7)
    const double attn_kept = lora ? c.q_lora + kv_lora + rope + c.h : q_out + kv_out;
    auto mlp_kept = [&](double width) { return lora ? width : width + c.h; };
    const double dense = bf16 * tokens * (c.h + attn_kept + mlp_kept(c.f)) + sdpa;
    const double moe = bf16 * tokens * (c.h + attn_kept + mlp_kept(c.shared_f)) + sdpa +
                       2 * bf16 * routed * c.h;  // the all-to-alls' outputs
    EXPECT_DOUBLE_EQ(block_activation_bytes(op, 0).value(), dense);
    EXPECT_DOUBLE_EQ(block_activation_bytes(op, 5).value(), moe);
    for (int l : {0, 5}) {
      EXPECT_LT(block_activation_bytes(make(Recompute::full), l).value(),
                block_activation_bytes(op, l).value());
      EXPECT_GT(block_activation_bytes(make(Recompute::none), l).value(),
                block_activation_bytes(op, l).value());
    }

    // The replayed products, by FLOPs: the even ones (the router's gate and the routed
    // experts' grouped GEMMs besides, in a MoE block).
    const Workload w = build_workload(op);
    auto replay = [&](int layer, std::set<std::string>& names) {
      double gemm = 0;
      for (const Op& o : w.roles.front().chunks.front().backward.ops())
        if (o.phase == Phase::recompute && o.layer == layer) {
          names.insert(std::string(o.name));
          if (o.kind == OpKind::compute && o.compute == ComputeClass::gemm) gemm += o.flops;
        }
      return gemm;
    };
    const double attn_replay = lora ? c.q_lora * q_out + kv_lora * kv_out          // wq_b, wkv_b
                                    : c.h * (kv_lora + rope) + c.heads * v * c.h;  // wkv_a, wo
    auto mlp_replay = [&](double width) {
      return lora ? 2 * c.h * width : c.h * width;  // V3: w1 and w2; V2-Lite: w3
    };
    std::set<std::string> names;
    EXPECT_DOUBLE_EQ(replay(0, names), 2 * tokens * (attn_replay + mlp_replay(c.f)));
    EXPECT_TRUE(names.count("q_norm") == (lora ? 1u : 0u) && names.count("kv_norm") &&
                names.count("mlp_residual"));  // the norms, and no early stop
    EXPECT_EQ(names.count("mlp_out"), lora ? 1u : 0u);
    EXPECT_FALSE(names.count("flash_attn"));
    names.clear();
    // the attention's and the shared experts' even products, the router's gate, both expert
    // projections (gated input 2 x moe_ffn, output moe_ffn) over the routed rows
    EXPECT_DOUBLE_EQ(replay(5, names),
                     2 * tokens * (attn_replay + mlp_replay(c.shared_f) + c.h * c.experts) +
                         2 * routed * c.h * 3 * c.moe_f);
    EXPECT_FALSE(names.count("moe_dispatch") || names.count("moe_combine"));
  }
  // A dense block of a MoE model with grouped-query attention (Llama 4 Maverick's block 0): no
  // early stop either, so the residual after w2 is replayed; w2 itself, the seventh product,
  // is kept.
  {
    PlanInput p = plan(64, 1, 1, 1);
    p.seq_length = 2048;
    p.framework = Framework::fsdp;
    p.attention = AttentionKernel::flash;
    p.ep = 8;
    p.recompute = Recompute::op;
    const Workload w = build_workload(scenario("llama4-maverick", "dgx-h100", p));
    std::set<std::string> names;
    for (const Op& o : w.roles.front().chunks.front().backward.ops())
      if (o.phase == Phase::recompute && o.layer == 0) names.insert(std::string(o.name));
    EXPECT_TRUE(names.count("mlp_residual") && names.count("mlp_in"));
    EXPECT_FALSE(names.count("mlp_out"));
  }
  // Time lies between none and full.
  auto time = [](Recompute r) {
    PlanInput p = plan(16, 1, 1, 2);
    p.seq_length = 2048;
    p.framework = Framework::fsdp;
    p.attention = AttentionKernel::flash;
    p.ep = 8;
    p.recompute = r;
    return simulate(build_workload(scenario("deepseek-v2-lite", "dgx-h100", p))).iteration_time;
  };
  const double tn = time(Recompute::none), to = time(Recompute::op), tf = time(Recompute::full);
  EXPECT_LT(tn, to);
  EXPECT_LT(to, tf);
}

// What the op policy is not modelled for is refused, one line naming the flag.
TEST(Memory, OpRecomputeChecks) {
  auto error = [](const std::string& model, PlanInput p) {
    p.recompute = Recompute::op;
    return testing::scenario_error(model, "dgx-h100", p);
  };
  const std::string flag = "--recompute-granularity: expected op (torchtitan's";
  PlanInput p = plan(8);
  std::string e = error("deepseek-v3", p);
  EXPECT_EQ(e.rfind(flag, 0), 0u) << e;
  // DeepSeek-V3's own multi-token prediction module (the preset's): not on torchtitan's list
  EXPECT_NE(e.find("no multi-token prediction, got --mtp-num-layers 1"), std::string::npos) << e;
  e = error("t5-large", p);
  EXPECT_NE(e.find("got encoder-decoder t5-large"), std::string::npos) << e;
  p.cp = 2;
  e = error("llama3-8b", p);
  EXPECT_NE(e.find("context-parallel size 1, got --cp 2"), std::string::npos) << e;
  p.cp.reset();
  p.fp8 = true;
  e = error("llama3-8b", p);
  EXPECT_NE(e.find("got --fp8"), std::string::npos) << e;
  p.fp8.reset();
  p.framework = Framework::deepspeed;
  p.zero = 3;
  e = error("llama3-8b", p);
  EXPECT_NE(e.find("got --framework deepspeed with ZeRO-3"), std::string::npos) << e;
  EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 0) << e;
  p.framework = Framework::fsdp;
  p.zero.reset();
  EXPECT_EQ(scenario("llama3-8b", "dgx-h100",
                     [&] {
                       PlanInput ok = p;
                       ok.recompute = Recompute::op;
                       return ok;
                     }())
                .plan.recompute,
            Recompute::op);
}

// Megatron-LM keeps its gradients in a buffer of the type it reduces them in: fp32 under bf16
// (arguments.py sets accumulate_allreduce_grads_in_fp32 for bf16; the reduce-scatter already
// carried fp32), bf16 under --grad-reduce-in-bf16 (--grad-comm-dtype bf16), fp16 under fp16.
// Llama 3 8B on 8 H100s with the distributed optimizer: the whole gradient buffer on each rank.
TEST(Memory, MegatronGradientBufferInItsReductionType) {
  auto grads = [](Precision prec, std::optional<DType> wire) {
    PlanInput p = plan(8, 1, 1, 1, 8);
    p.framework = Framework::megatron;
    p.use_distributed_optimizer = true;
    p.precision = prec;
    p.grad_comm_dtype = wire;
    const Scenario sc = scenario("llama3-8b", "dgx-h100", p);
    const Workload w = build_workload(sc);
    // the step's gradient reduce-scatter carries the same type
    double rs_bytes_per_element = 0;
    for (const Op& op : w.roles[0].step.ops())
      if (op.kind == OpKind::comm && op.collective == Collective::reduce_scatter)
        rs_bytes_per_element = op.bytes / static_cast<double>(op.elements);
    const double params = static_cast<double>(w.roles[0].params);
    const double per_param = memory_per_rank(w, w.roles[0]).gradients.value() / params;
    EXPECT_LE(search::memory_lower_bound(sc), memory_per_rank(w, w.roles[0]).total().value());
    return std::pair{per_param, rs_bytes_per_element};
  };
  EXPECT_EQ(grads(Precision::bf16, std::nullopt), std::pair(4.0, 4.0));
  EXPECT_EQ(grads(Precision::bf16, DType::bf16), std::pair(2.0, 2.0));
  EXPECT_EQ(grads(Precision::fp16, std::nullopt), std::pair(2.0, 2.0));
}

}  // namespace
}  // namespace commscope
