// Across ranks (report/ranks.h) on synthetic per-rank traces built here with known clock skews,
// a known straggler whose kernels look like everyone else's (DDP), and a known critical path.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commscope/report/ranks.h"
#include "commscope/timeline/trace_reader.h"

namespace commscope {
namespace {

constexpr int kRanks = 4;
const double kSkewUs[kRanks] = {0, 1234567.25, -500000.5, 7000};  // each host's clock

// Two iterations of 100 ms. In each, every rank computes 3 x 10 ms, all-reduces (5 ms of
// transfer after the last arrival), computes 2 x 10 ms, all-reduces again. Rank 2 starts each
// iteration 3 ms late (its data loader); in iteration 1 rank 1 is 2 ms late before the second
// all-reduce. Kernel durations are the same on every rank, as under DDP.
std::string rank_trace(int r) {
  std::string ev;
  auto add = [&](const std::string& e) { ev += (ev.empty() ? "" : ",\n") + e; };
  const double sk = kSkewUs[r];
  auto kernel = [&](const char* name, double ts, double dur, bool comm) {
    add(fmt::format(
        R"({{"ph":"X","cat":"kernel","name":"{}","pid":0,"tid":7,"ts":{:.3f},)"
        R"("dur":{:.3f}{}}})",
        name, ts + sk, dur,
        comm ? R"(,"args":{"In msg nelems":1024,"dtype":"Float","Group size":4})" : ""));
  };
  for (int i = 0; i < 2; ++i) {
    const double t = 1000 + i * 100000;
    add(fmt::format(R"({{"ph":"X","cat":"gpu_user_annotation","name":"ProfilerStep#{}",)"
                    R"("pid":0,"tid":7,"ts":{:.3f},"dur":100000}})",
                    i, t + sk));
    const double base = t + 1000;
    const double d = r == 2 ? 3000 : 0;
    for (int k = 0; k < 3; ++k) kernel("ampere_sgemm", base + d + k * 10000, 10000, false);
    const double arrive1 = base + d + 30000, end1 = base + 3000 + 30000 + 5000;
    kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", arrive1, end1 - arrive1, true);
    const double e = (i == 1 && r == 1) ? 2000 : 0, emax = i == 1 ? 2000 : 0;
    for (int k = 0; k < 2; ++k) kernel("ampere_sgemm", end1 + e + k * 10000, 10000, false);
    const double arrive2 = end1 + e + 20000, end2 = end1 + emax + 20000 + 5000;
    kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", arrive2, end2 - arrive2, true);
  }
  return fmt::format(R"({{"distributedInfo":{{"rank":{}}},"traceEvents":[{}]}})", r, ev);
}

std::vector<TraceFile> ranks() {
  std::vector<TraceFile> files;
  for (int r = 0; r < kRanks; ++r) {
    auto t = read_trace_text(fmt::format("rank{}.json", r), rank_trace(r));
    EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
    if (t.ok()) files.push_back(std::move(t).value());
  }
  return files;
}

TEST(AcrossRanks, ClockSkewIsRecovered) {
  auto files = ranks();
  CrossRank c = analyze_across_ranks(files);
  ASSERT_EQ(c.reference_rank, 0);
  ASSERT_EQ(c.clocks.size(), 4u);
  for (const auto& o : c.clocks) {
    EXPECT_NEAR(o.offset_s, (kSkewUs[o.rank] - kSkewUs[0]) * 1e-6, 1e-9) << o.rank;
    EXPECT_LT(o.residual_s, 1e-9) << o.rank;
    EXPECT_EQ(o.calls, 4u) << o.rank;
  }
}

// The residual reports how well the clocks agree: one rank's end times jittered by +-1 ms
// alternately give a residual of about 1 ms.
TEST(AcrossRanks, ResidualReportsDisagreement) {
  auto files = ranks();
  for (Event& e : files[3].timeline.events)
    if (e.kind == EventKind::comm) e.dur += (e.start < files[3].steps[1].start ? 1e-3 : -1e-3);
  CrossRank c = analyze_across_ranks(files);
  EXPECT_NEAR(c.clocks[3].residual_s, 1e-3, 1e-6);
  EXPECT_NEAR(c.clocks[3].max_residual_s, 1e-3, 1e-6);
  EXPECT_LT(c.clocks[1].residual_s, 1e-9);
}

TEST(AcrossRanks, StragglerByArrivalEvenWhenKernelsLookEqual) {
  auto files = ranks();
  // Under DDP every rank's compute looks the same: compute time cannot name the straggler.
  for (const auto& f : files) {
    double compute = 0;
    for (const Event& e : f.timeline.events)
      if (e.kind == EventKind::compute) compute += e.dur;
    EXPECT_NEAR(compute, 0.1, 1e-9);
  }
  CrossRank c = analyze_across_ranks(files);
  ASSERT_EQ(c.arrivals.size(), 4u);
  ASSERT_EQ(c.stragglers.size(), 2u);
  EXPECT_EQ(c.stragglers[0].rank, 2);
  EXPECT_EQ(c.stragglers[0].times_last, 2u);
  EXPECT_NEAR(c.stragglers[0].total_late_s, 6e-3, 1e-9);
  EXPECT_NEAR(c.stragglers[0].max_late_s, 3e-3, 1e-9);
  EXPECT_EQ(c.stragglers[1].rank, 1);
  EXPECT_EQ(c.stragglers[1].times_last, 1u);
  EXPECT_NEAR(c.stragglers[1].total_late_s, 2e-3, 1e-9);
}

// Step 0's critical path: rank 2's late start and its 3 compute kernels, the first all-reduce's
// transfer, then rank 0's (any rank's) 2 kernels and the second transfer, then idle to the end.
TEST(AcrossRanks, CriticalPathGoesThroughTheStraggler) {
  auto files = ranks();
  CrossRank c = analyze_across_ranks(files, 0);
  const CriticalPath& p = c.path;
  EXPECT_FALSE(p.whole_trace);
  EXPECT_NEAR(p.end - p.start, 0.1, 1e-9);
  EXPECT_NEAR(p.compute_s, 0.05, 1e-9);
  EXPECT_NEAR(p.comm_s, 0.01, 1e-9);
  EXPECT_NEAR(p.idle_s, 0.04, 1e-9);
  EXPECT_NEAR(p.compute_s + p.comm_s + p.memcpy_s + p.idle_s, p.end - p.start, 1e-9);
  double on_two = 0;
  for (const auto& [r, s] : p.per_rank_s)
    if (r == 2) on_two = s;
  EXPECT_NEAR(on_two, 0.034, 1e-9);  // 1 ms before its step + 3 ms late + 30 ms of compute
  ASSERT_FALSE(p.segments.empty());
  EXPECT_EQ(p.segments.front().rank, 2);
  for (std::size_t i = 1; i < p.segments.size(); ++i)
    EXPECT_NEAR(p.segments[i].start, p.segments[i - 1].end, 1e-9) << i;  // a chain, no gaps
}

// On real traces (two sampled ranks of HTA's 128-rank job) the path is one chain of segments
// that adds up to the step, whatever the pairing of calls.
TEST(AcrossRanks, PathAddsUpOnRealTraces) {
  std::vector<TraceFile> files;
  for (int r = 0; r < 2; ++r) {
    auto t = read_trace(COMMSCOPE_SOURCE_DIR "/data/traces/trace_filter_sampled_rank-" +
                        std::to_string(r) + ".json.gz");
    ASSERT_TRUE(t.ok()) << t.error().message;
    files.push_back(std::move(t).value());
  }
  for (std::size_t step = 0; step < 2; ++step) {
    CrossRank c = analyze_across_ranks(files, step);
    const CriticalPath& p = c.path;
    ASSERT_FALSE(p.segments.empty());
    EXPECT_NEAR(p.compute_s + p.comm_s + p.memcpy_s + p.idle_s, p.end - p.start, 1e-9) << step;
    EXPECT_NEAR(p.segments.front().start, p.start, 1e-9);
    EXPECT_NEAR(p.segments.back().end, p.end, 1e-9);
    for (std::size_t i = 1; i < p.segments.size(); ++i)
      ASSERT_NEAR(p.segments[i].start, p.segments[i - 1].end, 1e-9) << step << " " << i;
  }
}

TEST(AcrossRanks, OneRankIsNothingToAlign) {
  auto files = ranks();
  files.resize(1);
  CrossRank c = analyze_across_ranks(files);
  EXPECT_EQ(c.reference_rank, -1);
  EXPECT_TRUE(c.clocks.empty());
}

}  // namespace
}  // namespace commscope
