// Structure of the workload: dependencies, gradient bookkeeping, bucket order.
#include <gtest/gtest.h>

#include "commscope/workload/params.h"
#include "test_util.h"

namespace commscope {
namespace {

using testing::plan;
using testing::scenario;

struct Case {
  const char* model;
  int gpus, tp, pp, zero;
  bool sp;
  Recompute recompute;
};
const Case kCases[] = {
    {"gpt2-large", 16, 1, 1, 0, false, Recompute::none},
    {"gpt2-large", 16, 1, 1, 2, false, Recompute::none},
    {"gpt2-large", 16, 1, 1, 3, false, Recompute::full},
    {"megatron-7.5b", 32, 4, 4, 1, true, Recompute::selective},
    {"llama2-70b", 64, 8, 4, 0, true, Recompute::full},
    {"t5-3b", 16, 2, 4, 0, false, Recompute::none},
    {"bert-large", 8, 2, 1, 3, true, Recompute::none},
    // Gemma 2's sandwich norms and Qwen2-MoE's shared-expert gate (Hugging Face configs).
    {COMMSCOPE_SOURCE_DIR "/tests/data/hf/gemma-2-2b.json", 16, 2, 2, 1, true,
     Recompute::selective},
    {COMMSCOPE_SOURCE_DIR "/tests/data/hf/qwen1.5-moe-a2.7b.json", 16, 2, 1, 0, true,
     Recompute::none},
};

Workload build(const Case& c) {
  PlanInput p = plan(c.gpus, c.tp, c.pp, 1, 64);
  p.zero = c.zero;
  p.sequence_parallel = c.sp;
  p.recompute = c.recompute;
  return build_workload(scenario(c.model, "dgx-a100-80gb", p));
}

// Every parameter's gradient is completed by exactly one backward op of its rank.
TEST(Workload, BackwardCompletesEveryGradientOnce) {
  for (const auto& c : kCases) {
    SCOPED_TRACE(std::string(c.model) + " zero " + std::to_string(c.zero));
    Workload w = build(c);
    for (const Role& r : w.roles) {
      std::int64_t grads = 0;
      for (const Chunk& ch : r.chunks)
        for (const Op& op : ch.backward.ops()) grads += op.grad_params;
      EXPECT_EQ(grads, r.params) << "stage " << r.stage;
    }
  }
}

// Dependencies point backwards within their list (a DAG in program order), compute ops have
// FLOPs or bytes, comm ops have a group of 2 or more and a size.
TEST(Workload, OpsAreWellFormed) {
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.model);
    Workload w = build(c);
    for (const Role& r : w.roles) {
      std::vector<const OpList*> lists = {&r.step};
      for (const Chunk& ch : r.chunks) lists.insert(lists.end(), {&ch.forward, &ch.backward});
      for (const OpList* l : lists) {
        for (std::uint32_t i = 0; i < l->size(); ++i) {
          const Op& op = (*l)[i];
          for (auto d : l->deps_of(i)) EXPECT_LT(d, i);
          if (op.kind == OpKind::compute) {
            EXPECT_GT(op.flops + op.mem_bytes, 0) << op.name;
          } else {
            EXPECT_GE(op.group_size, 2) << op.name;
            EXPECT_GT(op.bytes, 0) << op.name;
            EXPECT_EQ(op.bytes, static_cast<double>(op.elements) * dtype_bytes(op.dtype))
                << op.name;
          }
        }
      }
    }
  }
}

// DDP buckets: in backward order, each closed once it holds at least the cap (PyTorch's
// rule), only the last may be smaller, and together they hold every gradient; each waits
// for the op that completed its last gradient and for nothing after it.
TEST(Workload, DdpBucketsFollowBackwardOrder) {
  PlanInput p = plan(16, 1, 1, 1, 64);
  Scenario sc = scenario("gpt2-large", "dgx-a100-80gb", p);
  Workload w = build_workload(sc);
  const Role& r = w.roles[0];
  const OpList& bw = r.chunks[0].backward;
  const double cap = sc.plan.ddp_bucket.value() / 2;  // bf16 gradients
  std::int64_t sum = 0, since_last = 0;
  std::vector<const Op*> buckets;
  for (std::uint32_t i = 0; i < bw.size(); ++i) {
    const Op& op = bw[i];
    if (op.kind == OpKind::compute) since_last += op.grad_params;
    if (op.name != "ddp_bucket") continue;
    EXPECT_TRUE(op.last_microbatch_only);
    EXPECT_EQ(op.index, static_cast<int>(buckets.size()));
    EXPECT_EQ(op.elements, since_last) << "bucket " << op.index;
    ASSERT_EQ(bw.deps_of(i).size(), 1u);
    EXPECT_EQ(bw[bw.deps_of(i)[0]].kind, OpKind::compute);
    buckets.push_back(&op);
    sum += op.elements;
    since_last = 0;
  }
  ASSERT_GT(buckets.size(), 10u);
  for (std::size_t i = 0; i + 1 < buckets.size(); ++i) EXPECT_GE(buckets[i]->elements, cap);
  EXPECT_EQ(sum, r.params);
  // Backward starts at the head, and the first bucket closes inside the last block.
  EXPECT_EQ(bw[0].layer, kHeadLayer);
  for (std::uint32_t i = 0; i < bw.size(); ++i)
    if (bw[i].name == "ddp_bucket") {
      EXPECT_EQ(bw[bw.deps_of(i)[0]].layer, sc.model.layers() - 1);
      break;
    }
}

// ZeRO-3 gathers every block's parameters before its forward and again before its
// backward, and the block's first op waits for the gather.
TEST(Workload, ZeroThreeGathersEachBlockTwice) {
  PlanInput p = plan(8, 1, 1, 1, 8);
  p.zero = 3;
  Scenario sc = scenario("gpt2-medium", "dgx-a100-80gb", p);
  Workload w = build_workload(sc);
  for (const OpList* l : {&w.roles[0].chunks[0].forward, &w.roles[0].chunks[0].backward}) {
    int gathers = 0;
    for (std::uint32_t i = 0; i < l->size(); ++i) {
      const Op& op = (*l)[i];
      if (op.name != "zero3_param_all_gather" || op.layer < 0) continue;
      ++gathers;
      EXPECT_EQ(op.elements, block_params(sc.model, op.layer));
      // The next op on the compute chain of the same block depends on this gather.
      bool waited = false;
      for (std::uint32_t j = i + 1; j < l->size() && !waited; ++j)
        for (auto d : l->deps_of(j)) waited |= d == i && (*l)[j].layer == op.layer;
      EXPECT_TRUE(waited) << "layer " << op.layer;
    }
    EXPECT_EQ(gathers, sc.model.layers());
  }
}

}  // namespace
}  // namespace commscope
