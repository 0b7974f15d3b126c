// Communication volume against the closed forms of the ZeRO paper and Megatron-LM.
#include <gtest/gtest.h>

#include <map>

#include "commscope/workload/params.h"
#include "test_util.h"

namespace commscope {
namespace {

using testing::plan;
using testing::scenario;

double wire(const Workload& w, const Role& r, CommGroup g) {
  double sum = 0;
  for (const auto& v : comm_volume(w, r))
    if (v.group == g) sum += v.wire_bytes;
  return sum;
}
double bytes(const Workload& w, const Role& r, CommGroup g, Collective c) {
  double sum = 0;
  for (const auto& v : comm_volume(w, r))
    if (v.group == g && v.collective == c) sum += v.bytes;
  return sum;
}
std::int64_t calls(const Workload& w, const Role& r, CommGroup g, Collective c) {
  std::int64_t n = 0;
  for (const auto& v : comm_volume(w, r))
    if (v.group == g && v.collective == c) n += v.calls;
  return n;
}

// Rajbhandari et al. 2020 (ZeRO), Section 7: DDP all-reduce and ZeRO-1/2 reduce-scatter +
// all-gather move 2 Psi per rank; ZeRO-3 moves 3 Psi (1.5x). With d ranks a ring moves
// (d-1)/d of that over each link.
TEST(Comm, ZeroStagesMoveTheZeroPaperVolumes) {
  for (const char* name : {"gpt2-large", "bert-large", "llama2-7b"}) {
    SCOPED_TRACE(name);
    const int d = 16;
    double volume[4];
    for (int z = 0; z <= 3; ++z) {
      PlanInput p = plan(d, 1, 1, 1);
      p.zero = z;
      Scenario sc = scenario(name, "dgx-a100-80gb", p);
      Workload w = build_workload(sc);
      volume[z] = wire(w, w.roles[0], CommGroup::data);
      const double psi = static_cast<double>(count_params(sc.model).total);
      if (z == 0) {
        EXPECT_NEAR(volume[0] / (2.0 * (d - 1) / d * psi * 2 /*bf16*/), 1.0, 1e-12);
      }
    }
    // ZeRO's 8-byte gradient-norm all-reduce aside (a few parts in 1e8 of the volume).
    EXPECT_NEAR(volume[1] / volume[0], 1.0, 1e-7);
    EXPECT_NEAR(volume[2] / volume[0], 1.0, 1e-7);
    EXPECT_NEAR(volume[3] / volume[0], 1.5, 1e-7);
  }
}

// DDP syncs once per iteration; ZeRO-2 and -3 reduce-scatter every micro-batch (DeepSpeed
// keeps only each rank's gradient shard between micro-batches).
TEST(Comm, GradientAccumulation) {
  for (int z : {0, 1, 2, 3}) {
    SCOPED_TRACE(z);
    PlanInput one = plan(8, 1, 1, 2, 16), four = plan(8, 1, 1, 2, 64);
    one.zero = four.zero = z;
    Workload w1 = build_workload(scenario("gpt2-medium", "dgx-a100-80gb", one));
    Workload w4 = build_workload(scenario("gpt2-medium", "dgx-a100-80gb", four));
    double rs1 = bytes(w1, w1.roles[0], CommGroup::data, Collective::reduce_scatter);
    double rs4 = bytes(w4, w4.roles[0], CommGroup::data, Collective::reduce_scatter);
    double ar1 = bytes(w1, w1.roles[0], CommGroup::data, Collective::all_reduce);
    double ar4 = bytes(w4, w4.roles[0], CommGroup::data, Collective::all_reduce);
    EXPECT_EQ(ar4, ar1);
    EXPECT_EQ(rs4, z >= 2 ? 4 * rs1 : rs1);
  }
}

// Megatron-LM (Shoeybi et al. 2019, Section 3; Korthikanti et al. 2022, Section 4.2.2): each
// block does two all-reduces of b x s x h in forward and two in backward; full recompute adds
// the two forward ones again. Sequence parallelism turns each all-reduce into an all-gather
// and a reduce-scatter of the same size, and Megatron's backward re-gathers the inputs of the
// two column-parallel GEMMs for their weight gradients.
TEST(Comm, TensorParallelPerLayer) {
  const std::int64_t b = 2;
  for (auto recompute : {Recompute::none, Recompute::full}) {
    for (bool sp : {false, true}) {
      SCOPED_TRACE(std::string(sp ? "sp" : "tp") + (recompute == Recompute::full ? " full" : ""));
      PlanInput p = plan(8, 8, 1, b);
      p.recompute = recompute;
      p.sequence_parallel = sp;
      Scenario sc = scenario("megatron-3.6b", "dgx-a100-80gb", p);
      Workload w = build_workload(sc);
      const double bsh_bytes = 2.0 * b * sc.model.seq_length * sc.model.hidden;
      const int forward = recompute == Recompute::full ? 4 : 2;
      std::map<Collective, int> per_layer;
      for (const Chunk& ch : w.roles[0].chunks)
        for (const OpList* list : {&ch.forward, &ch.backward})
          for (const Op& op : list->ops())
            if (op.kind == OpKind::comm && op.group == CommGroup::tensor && op.layer == 5) {
              EXPECT_EQ(op.bytes, bsh_bytes);
              per_layer[op.collective]++;
            }
      if (!sp) {
        EXPECT_EQ(per_layer[Collective::all_reduce], forward + 2);
        EXPECT_EQ(per_layer.size(), 1u);
      } else {
        EXPECT_EQ(per_layer[Collective::reduce_scatter], forward + 2);
        EXPECT_EQ(per_layer[Collective::all_gather], forward + 2 + 2);
      }
    }
  }
}

// Pipeline: each micro-batch sends b x s x h activations forward and receives the same size
// of gradients backward at every stage boundary.
TEST(Comm, PipelinePerMicrobatch) {
  const std::int64_t b = 2, m = 8;
  Scenario sc = scenario("megatron-1.7b", "dgx-a100-80gb", plan(4, 1, 4, b, b * m));
  Workload w = build_workload(sc);
  const double bsh_bytes = 2.0 * b * sc.model.seq_length * sc.model.hidden;
  for (const Role& r : w.roles) {
    SCOPED_TRACE(r.stage);
    const bool first = r.stage == 0, last = r.stage == 3;
    EXPECT_EQ(calls(w, r, CommGroup::pipeline, Collective::send),
              m * ((first ? 0 : 1) + (last ? 0 : 1)));
    EXPECT_EQ(calls(w, r, CommGroup::pipeline, Collective::recv),
              m * ((first ? 0 : 1) + (last ? 0 : 1)));
    EXPECT_EQ(bytes(w, r, CommGroup::pipeline, Collective::send),
              bsh_bytes * m * ((first ? 0 : 1) + (last ? 0 : 1)));
  }
  // Interleaving with v chunks multiplies the boundaries by v.
  PlanInput p = plan(4, 1, 4, b, b * m);
  p.virtual_stages = 2;
  Workload wi = build_workload(scenario("megatron-1.7b", "dgx-a100-80gb", p));
  EXPECT_EQ(calls(wi, wi.roles[1], CommGroup::pipeline, Collective::send), 2 * 2 * m);
  EXPECT_EQ(calls(wi, wi.roles[0], CommGroup::pipeline, Collective::send), (2 * 2 - 1) * m);
}

// The seeds' "back-embedding all-reduce": only with PP > 1 and a tied embedding, only
// between the first and the last stage, V/t x h gradients once per iteration.
TEST(Comm, EmbeddingAllReduceOnlyWithPipelineAndTiedEmbeddings) {
  auto embedding_calls = [](const Workload& w, const Role& r) {
    return calls(w, r, CommGroup::embedding, Collective::all_reduce);
  };
  Workload no_pp = build_workload(scenario("gpt2-large", "dgx-a100-80gb", plan(8, 2, 1, 1)));
  EXPECT_EQ(embedding_calls(no_pp, no_pp.roles[0]), 0);

  Scenario sc = scenario("gpt2-large", "dgx-a100-80gb", plan(8, 2, 4, 1, 16));
  Workload pp = build_workload(sc);
  for (const Role& r : pp.roles) {
    const bool ends = r.stage == 0 || r.stage == 3;
    EXPECT_EQ(embedding_calls(pp, r), ends ? 1 : 0);
    if (ends) {
      EXPECT_EQ(bytes(pp, r, CommGroup::embedding, Collective::all_reduce),
                2.0 * sc.model.vocab / 2 * sc.model.hidden);
    }
  }

  Workload untied = build_workload(scenario("llama2-7b", "dgx-a100-80gb", plan(8, 2, 4, 1, 16)));
  for (const Role& r : untied.roles) EXPECT_EQ(embedding_calls(untied, r), 0);
}

TEST(Comm, SingleRankDoesNotCommunicate) {
  Workload w = build_workload(scenario("gpt2-small", "dgx-a100-80gb", plan(1)));
  EXPECT_TRUE(comm_volume(w, w.roles[0]).empty());
}

}  // namespace
}  // namespace commscope
