// Memory per rank against the ZeRO paper and Korthikanti et al. 2022.
#include <gtest/gtest.h>

#include <fmt/format.h>

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

TEST(Memory, ReportsWhatDoesNotFit) {
  // GPT-3 175B data parallel on A100 40GB: 16 bytes per parameter alone is 2.8 TB.
  Scenario sc = scenario("gpt3-175b", "thetagpu-tg40", plan(8));
  Workload w = build_workload(sc);
  MemoryBreakdown m = memory_per_rank(w, w.roles[0]);
  EXPECT_GT(m.total(), sc.system.gpu.memory);
}

}  // namespace
}  // namespace commscope
