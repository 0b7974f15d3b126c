// The trainer's sharding layout without MPI (train/sharding.h): ZeRO partitions and the
// workload's buckets cover every parameter exactly once, and each stage keeps what the ZeRO
// paper says it keeps.
#include "commscope/train/sharding.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace {

using namespace commscope;
using namespace commscope::train;

TrainOptions small(Strategy s) {
  TrainOptions o;
  o.model = {2, 48, 4, 250, 16, 16};  // 2 layers, hidden 48, 4 heads, vocab 250, seq 16
  o.model_name = "tiny";
  o.strategy = s;
  o.micro_batch = 1;
  o.bucket_mb = 0.03;
  o.zero_reduce_bucket = 7777;
  o.zero_allgather_bucket = 7777;
  return o;
}

Sharding layout_of(const TrainOptions& o, int ranks) {
  auto sc = train_scenario(o, ranks);
  EXPECT_TRUE(sc.ok()) << (sc.ok() ? "" : sc.error().message);
  const Workload w = build_workload(*sc);
  auto sh = Sharding::build(w, ParamLayout(o.model), o.strategy, ranks);
  EXPECT_TRUE(sh.ok()) << (sh.ok() ? "" : sh.error().message);
  return *sh;
}

// Ops whose ranges must tile [0, total) exactly once (in any order).
void expect_tiles(std::vector<CommOp> ops, std::int64_t total, const std::string& what) {
  std::sort(ops.begin(), ops.end(),
            [](const CommOp& a, const CommOp& b) { return a.offset < b.offset; });
  std::int64_t at = 0;
  for (const CommOp& op : ops) {
    EXPECT_EQ(op.offset, at) << what;
    EXPECT_GT(op.elements, 0) << what;
    at = op.offset + op.elements;
  }
  EXPECT_EQ(at, total) << what;
}

TEST(TrainSharding, PartitionsCoverEveryParameterOnce) {
  for (Strategy s : {Strategy::zero1, Strategy::zero2, Strategy::zero3})
    for (int ranks : {1, 2, 3, 4, 7}) {
      const Sharding sh = layout_of(small(s), ranks);
      const std::int64_t total = ParamLayout(small(s).model).total();
      ASSERT_EQ(sh.total(), total);
      std::vector<int> owners(static_cast<std::size_t>(total), 0);
      for (int r = 0; r < ranks; ++r) {
        for (std::int64_t i = sh.part.lo(r); i < sh.part.hi(r); ++i)
          ++owners[static_cast<std::size_t>(i)];
        // DeepSpeed's flat partitions: sizes differ by at most one element.
        EXPECT_LE(std::abs(sh.part.size(r) - sh.part.size(0)), 1);
      }
      EXPECT_TRUE(std::all_of(owners.begin(), owners.end(), [](int c) { return c == 1; }))
          << to_string(s) << " on " << ranks;
    }
}

TEST(TrainSharding, BucketsAndStepCollectivesCoverTheBufferOnce) {
  const std::int64_t total = ParamLayout(small(Strategy::ddp).model).total();
  const Sharding ddp = layout_of(small(Strategy::ddp), 3);
  ASSERT_GT(ddp.buckets.size(), 1u);  // 0.03 MiB buckets: several
  expect_tiles(ddp.buckets, total, "ddp buckets");
  EXPECT_TRUE(ddp.step_reduce_scatter.empty() && ddp.step_all_gather.empty());
  for (std::size_t k = 0; k + 1 < ddp.buckets.size(); ++k)  // backward order: from the end
    EXPECT_GT(ddp.buckets[k].offset, ddp.buckets[k + 1].offset);
  for (const CommOp& b : ddp.buckets) EXPECT_EQ(b.collective, Collective::all_reduce);

  const Sharding z1 = layout_of(small(Strategy::zero1), 3);
  EXPECT_TRUE(z1.buckets.empty());  // ZeRO-1 reduces at the step
  expect_tiles(z1.step_reduce_scatter, total, "zero1 reduce-scatter");
  expect_tiles(z1.step_all_gather, total, "zero1 all-gather");
  for (const CommOp& op : z1.step_reduce_scatter) EXPECT_LE(op.elements, 7777);

  const Sharding z2 = layout_of(small(Strategy::zero2), 3);
  expect_tiles(z2.buckets, total, "zero2 buckets");
  for (const CommOp& b : z2.buckets) EXPECT_EQ(b.collective, Collective::reduce_scatter);
  expect_tiles(z2.step_all_gather, total, "zero2 all-gather");

  const Sharding z3 = layout_of(small(Strategy::zero3), 3);
  expect_tiles(z3.buckets, total, "zero3 buckets");
  EXPECT_TRUE(z3.step_all_gather.empty());  // ZeRO-3 gathers per module, not at the step
}

// Rajbhandari et al. 2020 (ZeRO), Fig. 1: with N ranks, stage 1 holds 1/N of the optimizer
// state, stage 2 also 1/N of the gradients, stage 3 also 1/N of the parameters; DDP holds
// everything. The uneven split (P not a multiple of N) gives each rank its own partition.
TEST(TrainSharding, EachZeroStageHoldsWhatThePaperSays) {
  const int n = 5;
  const std::int64_t p = ParamLayout(small(Strategy::ddp).model).total();
  ASSERT_NE(p % n, 0);  // the uneven case
  for (int r = 0; r < n; ++r) {
    const Sharding::Held ddp = layout_of(small(Strategy::ddp), n).held(r);
    EXPECT_EQ(ddp.params, p);
    EXPECT_EQ(ddp.grads, p);
    EXPECT_EQ(ddp.optimizer, 2 * p);  // AdamW: two moments per parameter
    for (Strategy s : {Strategy::zero1, Strategy::zero2, Strategy::zero3}) {
      const Sharding sh = layout_of(small(s), n);
      const std::int64_t mine = sh.part.size(r);
      EXPECT_EQ(mine, p / n + (r < p % n ? 1 : 0));
      const Sharding::Held h = sh.held(r);
      EXPECT_EQ(h.optimizer, 2 * mine) << to_string(s);
      if (s != Strategy::zero1) {
        EXPECT_EQ(h.grads, mine) << to_string(s);
      }
      if (s == Strategy::zero3) {
        EXPECT_EQ(h.params, mine);
      }
      // Below stage 3 the full parameters stay (forward and backward read them).
      if (s != Strategy::zero3) {
        EXPECT_GE(h.params, p) << to_string(s);
      }
    }
  }
}

}  // namespace
