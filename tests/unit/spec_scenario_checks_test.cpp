// Every plan and preset error is one message naming the field, the value and what was
// expected; rules of thumb from the seeds are warnings.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "commscope/report/describe.h"
#include "commscope/spec/limits.h"
#include "commscope/util/json_fields.h"
#include "test_util.h"

namespace commscope {
namespace {

using testing::plan;
using testing::scenario;
using testing::scenario_error;

void expect_one_line(const std::string& msg) {
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(Validation, TensorParallelMustDivideHeads) {
  std::string e = scenario_error("gpt2-large", "dgx-a100-80gb", plan(24, 3));
  EXPECT_NE(e.find("--tensor-model-parallel-size"), std::string::npos) << e;
  EXPECT_NE(e.find("divisor of the 20 attention heads"), std::string::npos) << e;
  EXPECT_NE(e.find("got 3"), std::string::npos) << e;
  expect_one_line(e);
}

TEST(Validation, TensorParallelMustDivideKvHeads) {
  std::string e = scenario_error("llama2-70b", "dgx-a100-80gb", plan(16, 16));
  EXPECT_NE(e.find("divisor of the 8 key/value heads"), std::string::npos) << e;
  EXPECT_NE(e.find("got 16"), std::string::npos) << e;
}

// Each bucket is one collective: the model's parameters in at most kMaxBuckets of them (found
// by probing, 2026-11-30: allgather_bucket_size 1 built 6.7e9 collectives for Llama 2 7B and
// ran out of memory). The defaults and any size of the order of DeepSpeed's are far inside it.
TEST(Validation, BucketsAreFewEnoughToBuild) {
  for (const auto& [set, field] :
       std::vector<std::pair<std::function<void(PlanInput&)>, std::string>>{
           {[](PlanInput& p) { p.zero_allgather_bucket = 1; }, "allgather_bucket_size"},
           {[](PlanInput& p) { p.zero_reduce_bucket = 100; }, "reduce_bucket_size"},
           {[](PlanInput& p) { p.ddp_bucket_mb = 1e-6; }, "--ddp-bucket-size"}}) {
    PlanInput p = plan(16);
    p.zero = 2;
    set(p);
    const std::string e = scenario_error("llama2-7b", "dgx-a100-80gb", p);
    EXPECT_EQ(e.rfind(field + ": expected at least ", 0), 0u) << e;
    EXPECT_NE(e.find("in at most 1048576 buckets"), std::string::npos) << e;
    expect_one_line(e);
  }
  PlanInput ok = plan(16);
  ok.zero = 2;
  ok.zero_allgather_bucket = ok.zero_reduce_bucket = 5000000;
  ok.ddp_bucket_mb = 1;
  EXPECT_EQ(scenario("llama2-7b", "dgx-a100-80gb", ok).plan.zero_allgather_bucket, 5000000);
}

// Whose flash kernel, asked for where no flash kernel runs, is said to do nothing (found by
// probing, 2026-11-30: accepted in silence).
TEST(Validation, AttentionBackendWithoutFlashIsAWarning) {
  PlanInput p = plan(8);
  p.attention = AttentionKernel::standard;
  p.attention_backend = AttentionBackend::flash;
  const Scenario sc = scenario("gpt2-large", "dgx-h100", p);
  ASSERT_FALSE(sc.warnings.empty());
  EXPECT_NE(std::find(sc.warnings.begin(), sc.warnings.end(),
                      "--attention-backend flash has no effect with --attention standard (no "
                      "flash kernel runs)"),
            sc.warnings.end());
  p.attention = AttentionKernel::flash;
  const Scenario ok = scenario("gpt2-large", "dgx-h100", p);
  for (const auto& w : ok.warnings) EXPECT_EQ(w.find("--attention-backend"), std::string::npos);
  // A flash backend named without --attention runs the flash kernel, on a model whose preset
  // trains with standard attention (gpt2-large), with no warning; without either, standard.
  p.attention.reset();
  const Scenario named = scenario("gpt2-large", "dgx-h100", p);
  EXPECT_EQ(named.plan.attention, AttentionKernel::flash);
  for (const auto& w : named.warnings) EXPECT_EQ(w.find("--attention-backend"), std::string::npos);
  p.attention_backend.reset();
  EXPECT_EQ(scenario("gpt2-large", "dgx-h100", p).plan.attention, AttentionKernel::standard);
}

TEST(Validation, PipelineMustDivideLayers) {
  std::string e = scenario_error("gpt2-large", "dgx-a100-80gb", plan(8, 1, 8));
  EXPECT_NE(e.find("--pipeline-model-parallel-size"), std::string::npos) << e;
  EXPECT_NE(e.find("36 layers"), std::string::npos) << e;
  EXPECT_NE(e.find("got 8 x 1 = 8"), std::string::npos) << e;
}

TEST(Validation, GlobalBatchMustBeMultipleOfMicroTimesDp) {
  std::string e = scenario_error("gpt2-large", "dgx-a100-80gb", plan(16, 1, 1, 4, 100));
  EXPECT_NE(e.find("--global-batch-size"), std::string::npos) << e;
  EXPECT_NE(e.find("4 x 16 = 64"), std::string::npos) << e;
  EXPECT_NE(e.find("got 100"), std::string::npos) << e;
}

// Sequence parallelism needs TP x CP to divide the sequence (Megatron-Core's even split of the
// first dimension): t5-base's 114-token decoder at TP 4 was accepted and its shard floored.
TEST(Validation, SequenceParallelNeedsAnEvenSplit) {
  PlanInput p = plan(8, 4);
  p.sequence_parallel = true;
  const std::string e = scenario_error("t5-base", "dgx-a100-80gb", p);
  EXPECT_EQ(e.rfind("--sequence-parallel: expected TP x CP = 4 x 1 to divide the sequence length "
                    "114",
                    0),
            0u)
      << e;
  expect_one_line(e);
  p.tp = 2;  // 512 and 114 both even
  EXPECT_EQ(scenario("t5-base", "dgx-a100-80gb", p).plan.tp, 2);
}

// Megatron-LM pads the vocabulary to a multiple of 128 x TP at any TP
// (--make-vocab-size-divisible-by 128, _vocab_size_with_padding): Llama 2's 32,000 at TP 4 is
// 32,256 (63 x 512) under --framework megatron, whatever TP divides; other frameworks shard it
// as it is where TP divides it, and pad it as Megatron where TP does not (GPT-2's 50,257).
TEST(Validation, MegatronPadsTheVocabularyAtAnyTp) {
  PlanInput p = plan(8, 4);
  p.framework = Framework::megatron;
  EXPECT_EQ(scenario("llama2-7b", "dgx-a100-80gb", p).model.vocab, 32256);
  p.tp = 1;
  EXPECT_EQ(scenario("llama2-7b", "dgx-a100-80gb", p).model.vocab, 32000);    // 250 x 128
  EXPECT_EQ(scenario("gpt2-medium", "dgx-a100-80gb", p).model.vocab, 50304);  // 393 x 128
  p.framework.reset();
  p.tp = 4;
  EXPECT_EQ(scenario("llama2-7b", "dgx-a100-80gb", p).model.vocab, 32000);
  EXPECT_EQ(scenario("gpt2-medium", "dgx-a100-80gb", p).model.vocab, 50688);  // 99 x 512
  p.tp = 1;
  EXPECT_EQ(scenario("gpt2-medium", "dgx-a100-80gb", p).model.vocab, 50257);
}

TEST(Validation, ProductOfSizesMustEqualGpuCount) {
  PlanInput p = plan(16, 2, 2);
  p.dp = 3;
  std::string e = scenario_error("gpt2-large", "dgx-a100-80gb", p);
  EXPECT_NE(e.find("--dp"), std::string::npos) << e;
  EXPECT_NE(e.find("GPU count 16"), std::string::npos) << e;
  EXPECT_NE(e.find("DP 3 (product 12)"), std::string::npos) << e;
  // Without --dp, a GPU count that TP x PP does not divide.
  std::string e2 = scenario_error("gpt2-large", "dgx-a100-80gb", plan(8, 4, 3));
  EXPECT_NE(e2.find("multiple of TP x PP = 4 x 3 = 12"), std::string::npos) << e2;
  // --dp with --nodes: whole GPUs per node, at most the node's 8, as --gpus with --nodes (DP 3
  // on 2 nodes was "2 nodes x 1 GPU = 3"; DP 24 on 2 nodes 12 GPUs a node)
  for (int dp : {3, 24}) {
    PlanInput q;
    q.dp = dp;
    q.nodes = 2;
    std::string e3 = scenario_error("gpt2-large", "dgx-a100-80gb", q);
    EXPECT_NE(e3.find("--dp: expected DP x TP x PP a multiple of --nodes 2 with at most 8 GPUs "
                      "per node"),
              std::string::npos)
        << e3;
  }
  PlanInput fits;
  fits.dp = 12, fits.nodes = 2;
  auto sc = scenario("gpt2-large", "dgx-a100-80gb", fits);
  EXPECT_EQ(sc.gpus_per_node, 6);  // part of each node, as --gpus 12 --nodes 2
}

TEST(Validation, ModelThatDoesNotFitIsReported) {
  Scenario sc = scenario("gpt3-175b", "thetagpu-tg40", plan(8));
  Description d = describe(build_workload(sc));
  EXPECT_FALSE(d.fits);
  ASSERT_FALSE(d.warnings.empty());
  EXPECT_NE(d.warnings.back().find("does not fit"), std::string::npos);
  EXPECT_NE(d.warnings.back().find("A100-SXM4-40GB"), std::string::npos);
}

TEST(Validation, MalformedJsonPreset) {
  auto m = load_model(COMMSCOPE_SOURCE_DIR "/tests/data/bad/truncated-model.json");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("truncated-model.json: invalid JSON at byte"), std::string::npos)
      << m.error().message;
  expect_one_line(m.error().message);
  // The reason follows the position, and the input it echoes is kept whole (found by probing,
  // 2026-11-30: a NaN read "...: N'", the text after the echo's last ": ").
  EXPECT_EQ(json_parse_reason("[json.exception.parse_error.101] parse error at line 1, column 20: "
                              "syntax error while parsing value - invalid literal; last read: "
                              "'{\"iteration_s\": N'"),
            "syntax error while parsing value - invalid literal; last read: '{\"iteration_s\": N'");
  EXPECT_EQ(json_parse_reason("parse error at line 1, column 9: syntax error while parsing value - "
                              "invalid literal; last read: '" +
                              std::string(60, 'x') + "'"),
            "syntax error while parsing value - invalid literal; last read: '..." +
                std::string(40, 'x') + "'");
}

TEST(Validation, UnknownPresetName) {
  auto m = load_model("gpt2-huge");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("unknown model preset 'gpt2-huge'"), std::string::npos);
  EXPECT_NE(m.error().message.find("gpt2-large"), std::string::npos) << "lists the known presets";
  auto s = load_system("frontier");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("unknown system preset 'frontier'"), std::string::npos);
}

TEST(Validation, UnknownFieldInPreset) {
  auto m = load_model(COMMSCOPE_SOURCE_DIR "/tests/data/bad/typo-model.json");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("field 'hiden': unknown field"), std::string::npos)
      << m.error().message;
}

TEST(Validation, WrongTypeInPreset) {
  auto s = load_system(COMMSCOPE_SOURCE_DIR "/tests/data/bad/wrong-type-system.json");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("field 'gpu.memory_gib': expected a number, got \"forty\""),
            std::string::npos)
      << s.error().message;
}

TEST(Validation, SequenceLongerThanPositionTable) {
  PlanInput p = plan(8);
  p.seq_length = 2048;
  std::string e = scenario_error("gpt2-large", "dgx-a100-80gb", p);
  EXPECT_NE(e.find("--seq-length: expected at most max_positions (1024)"), std::string::npos) << e;
  EXPECT_NE(e.find("got 2048"), std::string::npos) << e;
}

TEST(Validation, ZeroTwoAndThreeNotWithPipeline) {
  PlanInput p = plan(8, 1, 2, 1, 8);
  p.zero = 3;
  std::string e = scenario_error("gpt2-large", "dgx-a100-80gb", p);
  EXPECT_NE(e.find("--zero"), std::string::npos) << e;
  EXPECT_NE(e.find("got 3"), std::string::npos) << e;
}

TEST(Validation, InterleavedNeedsMicrobatchesMultipleOfPp) {
  PlanInput p = plan(4, 1, 4, 1, 6);
  p.virtual_stages = 2;
  std::string e = scenario_error("megatron-1.7b", "dgx-a100-80gb", p);
  // The multiple the global batch must be, and the micro-batches per iteration it gave.
  EXPECT_NE(e.find("--global-batch-size: expected a multiple of micro-batch x DP x PP = "
                   "1 x 1 x 4 = 4 for the interleaved schedule"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("got 6 (micro-batches per iteration: 6)"), std::string::npos) << e;
  expect_one_line(e);
}

TEST(Validation, RulesOfThumbAreWarnings) {
  // TP beyond a node: 8-way TP on 4-GPU Polaris nodes.
  Scenario tp = scenario("megatron-18.4b", "polaris", plan(16, 8, 1, 1));
  EXPECT_TRUE(std::any_of(tp.warnings.begin(), tp.warnings.end(), [](const std::string& w) {
    return w.find("exceeds the 4 GPUs per node") != std::string::npos;
  }));
  // PP smaller than the nodes a model replica spans: TP 8 x PP 2 = 16 GPUs on 4-GPU nodes.
  Scenario pp = scenario("megatron-18.4b", "polaris", plan(32, 8, 2, 1, 8));
  EXPECT_TRUE(std::any_of(pp.warnings.begin(), pp.warnings.end(), [](const std::string& w) {
    return w.find("smaller than the 4 nodes one model replica spans") != std::string::npos;
  }));
  // No warnings for a plan that follows both rules: TP 4 in a node, PP 8 over 8 nodes.
  Scenario ok = scenario("megatron-18.4b", "polaris", plan(32, 4, 8, 1, 32));
  EXPECT_TRUE(ok.warnings.empty()) << ok.warnings.front();
}

// The limits (spec/limits.h) hold at the boundary of each, and each refusal names the field,
// the value and the limit.
TEST(Validation, LimitsAreEnforcedAtTheirBoundary) {
  PlanInput dp;
  dp.dp = static_cast<int>(limits::kMaxGpus) + 1;
  EXPECT_NE(scenario_error("gpt2-large", "dgx-a100-80gb", dp)
                .find("--dp: expected at most 1048576 (GPUs in one job, commscope's limit), got "
                      "1048577"),
            std::string::npos);
  // DP x TP x PP: each within the limit, the product formed in 64 bits and refused.
  PlanInput product;
  product.dp = static_cast<int>(limits::kMaxGpus);
  product.tp = 4;
  EXPECT_NE(scenario_error("gpt2-large", "dgx-a100-80gb", product).find("1048576 x 4 x 1"),
            std::string::npos);
  PlanInput accum = plan(8);
  accum.grad_accum = limits::kMaxMicroBatches + 1;
  EXPECT_NE(scenario_error("gpt2-large", "dgx-a100-80gb", accum)
                .find("--gradient-accumulation-steps: expected at most 65536"),
            std::string::npos);
  accum.grad_accum = limits::kMaxMicroBatches;  // at the limit: a valid plan
  ScenarioInput at_limit;
  at_limit.model = "gpt2-large";
  at_limit.system = "dgx-a100-80gb";
  at_limit.plan = accum;
  auto ok = resolve_scenario(at_limit);
  EXPECT_TRUE(ok.ok()) << ok.error().message;

  ModelSpec m = load_model("gpt2-large").value();
  m.decoder_layers = static_cast<int>(limits::kMaxLayers);
  EXPECT_TRUE(validate_model(m, "m").ok());
  m.decoder_layers = static_cast<int>(limits::kMaxLayers) + 1;
  Status s = validate_model(m, "m");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("m: field 'layers': expected at most 4096"), std::string::npos)
      << s.error().message;
  m = load_model("gpt2-large").value();
  m.hidden = limits::kMaxHidden + 1;
  EXPECT_FALSE(validate_model(m, "m").ok());
}

}  // namespace
}  // namespace commscope
