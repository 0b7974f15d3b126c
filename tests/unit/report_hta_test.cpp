// Holistic Trace Analysis's conventions (report/hta.h): HTA's published figures on its own
// public trace, and each rule of the convention on small traces built here with known answers.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>
#include <string>

#include <fmt/format.h>

#include "commscope/report/hta.h"
#include "commscope/timeline/trace_reader.h"

namespace commscope {
namespace {

const std::string kTraces = COMMSCOPE_SOURCE_DIR "/data/traces/";

void near_rel(double got, double want, double rel, const char* what) {
  EXPECT_NEAR(got, want, std::fabs(want) * rel) << what;
}

// HTA 0.6.1 (pip HolisticTraceAnalysis==0.6.1: TraceAnalysis(trace_dir=...),
// get_temporal_breakdown(), get_comm_comp_overlap()) on
// data/traces/nccl_parser_config_nccl_data.json.gz, as measured and quoted in issue 14:
// idle 338,781 us, compute 75,169 us, non-compute 21,636 us, kernel time 435,586 us,
// comm-comp overlap 14.31 %. Required within 0.5 %.
TEST(Hta, ReproducesPublishedFiguresOnHtasOwnTrace) {
  auto t = read_trace(kTraces + "nccl_parser_config_nccl_data.json.gz", {}, true);
  ASSERT_TRUE(t.ok()) << t.error().message;
  std::vector<TraceFile> files{std::move(t).value()};
  auto r = hta_breakdowns(files);
  ASSERT_EQ(r.size(), 1u);
  near_rel(r[0].idle_us, 338781, 0.005, "idle_time(us)");
  near_rel(r[0].compute_us, 75169, 0.005, "compute_time(us)");
  near_rel(r[0].non_compute_us, 21636, 0.005, "non_compute_time(us)");
  near_rel(r[0].kernel_time_us, 435586, 0.005, "kernel_time(us)");
  near_rel(r[0].overlap_pctg(), 14.31, 0.005, "comp_comm_overlap_pctg");
  EXPECT_TRUE(r[0].last_step_dropped);
  // HTA's parts add up to its kernel time by construction; so must ours.
  EXPECT_NEAR(r[0].idle_us + r[0].compute_us + r[0].non_compute_us, r[0].kernel_time_us, 1e-6);
}

// HTA's kernel types (hta/common/types.py and hta/utils/utils.py get_kernel_type, 0.6.1):
// communication first, then memory, then computation (an inverse pattern), else other.
TEST(Hta, KernelTypesByName) {
  EXPECT_EQ(hta_kernel_type("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)"),
            HtaKernelType::communication);
  EXPECT_EQ(hta_kernel_type("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
            HtaKernelType::communication);
  EXPECT_EQ(hta_kernel_type("void foo<ncclKernel_x>()"), HtaKernelType::communication);
  // HTA tests "^hip" for communication before memory: hipMemcpy counts as communication.
  EXPECT_EQ(hta_kernel_type("hipMemcpyWithStream"), HtaKernelType::communication);
  EXPECT_EQ(hta_kernel_type("Memcpy HtoD (Pageable -> Device)"), HtaKernelType::memory);
  EXPECT_EQ(hta_kernel_type("Memset (Device)"), HtaKernelType::memory);
  EXPECT_EQ(hta_kernel_type("ampere_sgemm_128x64_tn"), HtaKernelType::computation);
  EXPECT_EQ(hta_kernel_type("void at::native::vectorized_elementwise_kernel<4>()"),
            HtaKernelType::computation);
  // Not computation by HTA's pattern, and neither communication nor memory: other.
  EXPECT_EQ(hta_kernel_type("Event Sync"), HtaKernelType::other);
  EXPECT_EQ(hta_kernel_type("cudaLaunchKernel"), HtaKernelType::other);
  EXPECT_EQ(hta_kernel_type("void copy_dma_kernel()"), HtaKernelType::other);
}

// A Kineto-shaped trace: steps (host annotations), runtime launches, GPU events.
struct Builder {
  std::string events;
  int corr = 100;
  void add(const std::string& e) { events += (events.empty() ? "" : ",") + e; }
  void step(int n, double ts, double dur) {
    add(fmt::format(R"({{"ph":"X","cat":"user_annotation","name":"ProfilerStep#{}","pid":1,)"
                    R"("tid":1,"ts":{},"dur":{}}})",
                    n, ts, dur));
  }
  // A launch at `launch` of a GPU event [ts, ts + dur] on stream 7.
  void kernel(const std::string& name, double launch, double ts, double dur,
              const char* cat = "kernel") {
    ++corr;
    add(fmt::format(R"({{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,)"
                    R"("tid":1,"ts":{},"dur":2,"args":{{"correlation":{}}}}})",
                    launch, corr));
    add(fmt::format(R"({{"ph":"X","cat":"{}","name":"{}","pid":0,"tid":7,"ts":{},"dur":{},)"
                    R"("args":{{"stream":7,"correlation":{}}}}})",
                    cat, name, ts, dur, corr));
  }
  std::string text() const { return R"({"traceEvents":[)" + events + "]}"; }
};

HtaBreakdown one(const std::string& text, HtaOptions o = {}) {
  auto t = read_trace_text("t.json", text, {}, true);
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
  if (!t.ok()) return {};
  std::vector<TraceFile> files{std::move(t).value()};
  auto r = hta_breakdowns(files, o);
  EXPECT_EQ(r.size(), 1u);
  return r.empty() ? HtaBreakdown{} : r[0];
}

// Three steps at 0, 100, 200 us. Kernels: a GEMM [10, 30], an NCCL kernel [20, 50] (10 us of
// it under the GEMM), a memcpy [60, 70]; in the last step a GEMM [210, 260] launched at 205.
// HTA drops what was launched in the last step: kernel time 10..70 = 60, union 20+20+10=50
// (10..50 and 60..70), idle 10, compute 20, non-compute 30, overlap 10/30.
// A trace without kernels has no shares: "-" in the table and null in JSON, as HTA's NaN, not
// 0.00 (found by probing, 2026-11-30).
TEST(Hta, SharesOfNothingAreNotZero) {
  const HtaBreakdown r = one(R"({"traceEvents": []})");
  EXPECT_EQ(r.kernel_time_us, 0);
  EXPECT_TRUE(std::isnan(r.idle_pctg()));
  EXPECT_TRUE(std::isnan(r.compute_pctg()));
  const Table t = hta_table({r});
  ASSERT_EQ(t.rows.size(), 1u);
  for (std::size_t c = 5; c < t.rows[0].size(); ++c) EXPECT_EQ(t.rows[0][c], "-") << c;
  EXPECT_TRUE(hta_json({r})[0]["idle_time_pctg"].is_null());
}

TEST(Hta, LastStepIsDroppedByLaunchTime) {
  Builder b;
  b.step(1, 0, 100), b.step(2, 100, 100), b.step(3, 200, 100);
  b.kernel("ampere_sgemm", 5, 10, 20);
  b.kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 8, 20, 30);
  b.kernel("Memcpy DtoD (Device -> Device)", 9, 60, 10, "gpu_memcpy");
  // Launched in step 2 (at 150), runs in step 3's time: kept, since HTA cuts by launch.
  b.kernel("ampere_sgemm", 150, 205, 3);
  b.kernel("ampere_sgemm", 205, 210, 50);
  HtaBreakdown r = one(b.text());
  EXPECT_TRUE(r.last_step_dropped);
  EXPECT_EQ(r.events, 4u);
  EXPECT_DOUBLE_EQ(r.kernel_time_us, 208 - 10);
  EXPECT_DOUBLE_EQ(r.compute_us, 20 + 3);
  EXPECT_DOUBLE_EQ(r.idle_us, (208 - 10) - (40 + 10 + 3));
  EXPECT_DOUBLE_EQ(r.non_compute_us, 198 - 23 - 145);
  EXPECT_DOUBLE_EQ(r.overlap_pctg(), std::round(10000.0 * 10 / 30) / 100);

  // include_last_profiler_step keeps the last step's launches too.
  HtaBreakdown all = one(b.text(), {true});
  EXPECT_FALSE(all.last_step_dropped);
  EXPECT_EQ(all.events, 5u);
  EXPECT_DOUBLE_EQ(all.kernel_time_us, 260 - 10);
  EXPECT_DOUBLE_EQ(all.compute_us, 20 + 3 + 50);
}

// With one step name (or none) HTA filters nothing.
TEST(Hta, OneStepFiltersNothing) {
  Builder b;
  b.step(1, 0, 100);
  b.kernel("ampere_sgemm", 5, 10, 20);
  b.kernel("ampere_sgemm", 500, 510, 20);  // launched after the only step: kept
  HtaBreakdown r = one(b.text());
  EXPECT_FALSE(r.last_step_dropped);
  EXPECT_EQ(r.events, 2u);
  EXPECT_DOUBLE_EQ(r.kernel_time_us, 520);
  EXPECT_DOUBLE_EQ(r.idle_us, 480);
}

// HTA rounds each event to whole microseconds inward: start up, end down
// (hta/common/trace_parser.py, round_down_time_stamps).
TEST(Hta, TimesAreRoundedInward) {
  Builder b;
  b.kernel("ampere_sgemm", 1, 10.4, 5.3);   // [11, 15]
  b.kernel("ampere_sgemm", 1, 20.9, 0.05);  // [21, 20]: negative, as HTA makes it
  HtaBreakdown r = one(b.text());
  EXPECT_DOUBLE_EQ(r.kernel_time_us, 20 - 11);
  EXPECT_DOUBLE_EQ(r.compute_us, 4 - 1);
}

// Events without a numeric stream are not HTA's kernels; a numeric string is (pandas'
// to_numeric), "0x0" is not.
TEST(Hta, StreamsAsPandasReadsThem) {
  std::string text = R"({"traceEvents":[
    {"ph":"X","cat":"kernel","name":"a","pid":0,"tid":7,"ts":0,"dur":10,"args":{"stream":"7","correlation":1}},
    {"ph":"X","cat":"kernel","name":"b","pid":0,"tid":7,"ts":20,"dur":10,"args":{"stream":"0x0","correlation":2}},
    {"ph":"X","cat":"kernel","name":"c","pid":0,"tid":7,"ts":40,"dur":10,"args":{"correlation":3}}]})";
  HtaBreakdown r = one(text);
  EXPECT_EQ(r.events, 1u);
  EXPECT_DOUBLE_EQ(r.kernel_time_us, 10);
}

}  // namespace
}  // namespace commscope
