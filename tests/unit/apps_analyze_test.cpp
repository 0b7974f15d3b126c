// `commscope analyze` end to end: real traces, directories, one-line errors, bounded memory.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using commscope::testing::Outcome;
using commscope::testing::run_shell;

int lines(const std::string& s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

// One gzip member holding `text`; gzip readers read concatenated members as one stream.
std::string gzip_member(const std::string& text) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 9, Z_DEFLATED, 31, 9, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, text.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// A gzip file of head + block x copies + tail, small on disk: the block is compressed once.
void write_repeated_gzip(const fs::path& p, const std::string& head, const std::string& block,
                         std::size_t copies, const std::string& tail) {
  std::ofstream f(p, std::ios::binary);
  const std::string b = gzip_member(block);
  f << gzip_member(head);
  for (std::size_t i = 0; i < copies; ++i) f << b;
  f << gzip_member(tail);
}

class CliAnalyze : public commscope::testing::TestFolder {
 protected:
  // The binary with `args`; `limit` is a shell prefix such as "ulimit -v N;".
  Outcome run(const std::string& args, const std::string& limit = "") {
    return run_shell(limit + std::string(COMMSCOPE_BIN) + " " + args + " </dev/null");
  }
};

TEST_F(CliAnalyze, RealTracesAndDirectories) {
  const std::string traces = COMMSCOPE_SOURCE_DIR "/data/traces/";
  Outcome r = run("analyze --format json " + traces + "nccl_parser_config_nccl_data.json.gz");
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["ranks"].size(), 1u);
  EXPECT_EQ(j["ranks"][0]["rank"], 0);
  EXPECT_EQ(j["ranks"][0]["steps"].size(), 3u);
  for (const char* k :
       {"wall_s", "compute_s", "exposed_comm_s", "overlapped_comm_s", "memcpy_s", "idle_s"})
    EXPECT_TRUE(j["ranks"][0]["breakdown"].contains(k)) << k;
  EXPECT_EQ(j["collectives"][0]["calls"], 15);
  EXPECT_TRUE(j["collectives"][0].contains("busbw_bytes_per_s"));
  // CSV: the shares are numbers of percent under *_pct names (they were "17.5%" strings), each
  // the JSON's part over the wall to 2 decimals.
  Outcome csv = run("analyze --format csv " + traces + "nccl_parser_config_nccl_data.json.gz");
  ASSERT_EQ(csv.status, 0) << csv.err;
  EXPECT_EQ(csv.out.rfind("rank,window,wall_ms,compute_ms,exposed_comm_ms,overlapped_comm_ms,"
                          "memcpy_ms,idle_ms,compute_pct,exposed_pct,overlapped_pct,idle_pct\n",
                          0),
            0u)
      << csv.out;
  EXPECT_EQ(csv.out.find('%'), std::string::npos) << csv.out;
  const auto& b = j["ranks"][0]["breakdown"];
  const double wall = b["wall_s"].get<double>();
  EXPECT_NE(
      csv.out.find(fmt::format(
          "\n0,trace,{:.3f},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f},{:.2f},{:.2f},{:.2f},{:.2f}\n",
          wall * 1e3, b["compute_s"].get<double>() * 1e3, b["exposed_comm_s"].get<double>() * 1e3,
          b["overlapped_comm_s"].get<double>() * 1e3, b["memcpy_s"].get<double>() * 1e3,
          b["idle_s"].get<double>() * 1e3, 100 * b["compute_s"].get<double>() / wall,
          100 * b["exposed_comm_s"].get<double>() / wall,
          100 * b["overlapped_comm_s"].get<double>() / wall,
          100 * b["idle_s"].get<double>() / wall)),
      std::string::npos)
      << csv.out;

  // A directory with two ranks and one bad file: the good ones are analysed, the bad one reported.
  fs::path d = dir_ / "traces";
  fs::create_directories(d);
  fs::copy_file(traces + "trace_filter_sampled_rank-0.json.gz",
                d / "trace_filter_sampled_rank-0.json.gz");
  fs::copy_file(traces + "trace_filter_sampled_rank-1.json.gz",
                d / "trace_filter_sampled_rank-1.json.gz");
  std::ofstream(d / "broken.json")
      << R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":-2}]})";
  Outcome dir = run("analyze --format json " + d.string());
  ASSERT_EQ(dir.status, 0) << dir.err;
  auto k = nlohmann::json::parse(dir.out);
  EXPECT_EQ(k["ranks"].size(), 2u);
  EXPECT_EQ(k["bad_files"].size(), 1u);
  EXPECT_NE(dir.err.find("broken.json: event 0: field 'dur'"), std::string::npos) << dir.err;
  // The straggler keys and the table's columns say the same thing.
  ASSERT_FALSE(k["stragglers"].empty());
  EXPECT_TRUE(k["stragglers"][0].contains("late_rank"));
  Outcome text = run("analyze " + d.string());
  EXPECT_NE(text.out.find("late_rank"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("waiting_rank"), std::string::npos) << text.out;
  Outcome strict = run("analyze --strict " + d.string());
  EXPECT_EQ(strict.status, 2);
  EXPECT_EQ(lines(strict.err), 1) << strict.err;
}

// analyze of predict's own trace measures each pipeline stage over the whole iteration, as
// predict does: every stage's wall is the iteration, and the means of idle and the profiler's
// communication are predict's (a later stage's window began after its first receive's wait: 120
// against 132 ms of wall on this plan). No straggler table: the stages' k-th calls of one
// collective belong to different groups.
TEST_F(CliAnalyze, PredictsOwnTraceIsMeasuredOverTheIteration) {
  const fs::path trace = dir_ / "pp2.json";
  Outcome p =
      run("predict --model megatron-1.7b --system dgx-a100-80gb --gpus 16 --tp 8 --pp 2 "
          "--micro-batch-size 1 --global-batch-size 4 --format json --trace " +
          trace.string());
  ASSERT_EQ(p.status, 0) << p.err;
  const auto pj = nlohmann::json::parse(p.out)["predictions"][0];
  Outcome a = run("analyze --format json " + trace.string());
  ASSERT_EQ(a.status, 0) << a.err;
  const auto aj = nlohmann::json::parse(a.out);
  ASSERT_EQ(aj["ranks"].size(), 2u);
  const double iter = pj["iteration_time_s"].get<double>();
  double idle = 0, prof = 0, compute = 0;
  for (const auto& r : aj["ranks"]) {
    EXPECT_NEAR(r["breakdown"]["wall_s"].get<double>(), iter, 1e-8) << r;
    idle += r["breakdown"]["idle_s"].get<double>() / 2;
    prof += r["breakdown"]["profiler_comm_s"].get<double>() / 2;
    compute += r["breakdown"]["compute_s"].get<double>() / 2;
  }
  EXPECT_NEAR(compute, pj["compute_s"].get<double>(), 1e-6);
  EXPECT_NEAR(idle, pj["idle_s"].get<double>(), 0.01 * iter);
  EXPECT_NEAR(prof, pj["profiler_comm_s"].get<double>(), 0.01 * iter);
  EXPECT_TRUE(aj["stragglers"].empty()) << aj["stragglers"];
}

TEST_F(CliAnalyze, BadInputs) {
  std::ofstream(dir_ / "empty.json") << "";
  Outcome e = run("analyze " + (dir_ / "empty.json").string());
  EXPECT_EQ(e.status, 2);
  EXPECT_EQ(lines(e.err), 1);
  EXPECT_NE(e.err.find("empty.json: empty file"), std::string::npos) << e.err;
  Outcome missing = run("analyze " + (dir_ / "nope.json").string());
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.err.find("nope.json: cannot open"), std::string::npos) << missing.err;
  // A gzip file without .gz says so; a corrupt gzip names its file once (zlib's message carried
  // it again, found by probing, 2026-11-30).
  const std::string gz = COMMSCOPE_SOURCE_DIR "/data/traces/nccl_parser_config_nccl_data.json.gz";
  fs::copy_file(gz, dir_ / "packed.json");
  Outcome packed = run("analyze " + (dir_ / "packed.json").string());
  EXPECT_EQ(packed.status, 2);
  EXPECT_NE(packed.err.find("got gzip's magic bytes"), std::string::npos) << packed.err;
  std::string bytes;
  {
    std::ifstream in(gz, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0xff);
  std::ofstream(dir_ / "broken.json.gz", std::ios::binary) << bytes;
  Outcome broken = run("analyze " + (dir_ / "broken.json.gz").string());
  EXPECT_EQ(broken.status, 2);
  EXPECT_EQ(lines(broken.err), 1) << broken.err;
  EXPECT_NE(broken.err.find("gzip stream"), std::string::npos) << broken.err;
  const std::string name = "broken.json.gz";
  EXPECT_EQ(broken.err.find(name), broken.err.rfind(name)) << broken.err;
  // A folder of bad traces names the first and counts the others.
  fs::create_directories(dir_ / "bad");
  for (const char* f : {"a.json", "b.json", "c.json"}) std::ofstream(dir_ / "bad" / f) << "x";
  Outcome folder = run("analyze " + (dir_ / "bad").string());
  EXPECT_EQ(folder.status, 2);
  EXPECT_EQ(lines(folder.err), 1) << folder.err;
  EXPECT_NE(folder.err.find("a.json: byte 0"), std::string::npos) << folder.err;
  EXPECT_NE(folder.err.find("(and 2 other traces could not be read either)"), std::string::npos)
      << folder.err;
}

// --convention hta: HTA 0.6.1's figures for its own trace (measured with HTA, quoted in issue
// 14: idle 338,781 us, compute 75,169, non-compute 21,636, kernel time 435,586, overlap 14.31 %)
// in HTA's column names; the commscope convention's breakdown covers the whole trace instead.
TEST_F(CliAnalyze, HtaConvention) {
  const std::string trace =
      COMMSCOPE_SOURCE_DIR "/data/traces/nccl_parser_config_nccl_data.json.gz";
  Outcome r = run("analyze --convention hta --format json " + trace);
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["convention"], "hta");
  ASSERT_EQ(j["hta"].size(), 1u);
  const auto& h = j["hta"][0];
  EXPECT_NEAR(h["idle_time_us"].get<double>(), 338781, 338781 * 0.005);
  EXPECT_NEAR(h["compute_time_us"].get<double>(), 75169, 75169 * 0.005);
  EXPECT_NEAR(h["non_compute_time_us"].get<double>(), 21636, 21636 * 0.005);
  EXPECT_NEAR(h["kernel_time_us"].get<double>(), 435586, 435586 * 0.005);
  EXPECT_NEAR(h["comp_comm_overlap_pctg"].get<double>(), 14.31, 14.31 * 0.005);
  // The commscope convention spans the whole trace (the last step too): a longer window.
  EXPECT_GT(j["ranks"][0]["breakdown"]["wall_s"].get<double>() * 1e6,
            h["kernel_time_us"].get<double>());
  Outcome t = run("analyze --convention hta " + trace);
  ASSERT_EQ(t.status, 0) << t.err;
  EXPECT_NE(t.out.find("comp_comm_overlap_pctg"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("idle_time(us)"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("the last ProfilerStep dropped"), std::string::npos) << t.out;
  // The title says the last step is in when it is (it said dropped)
  Outcome in = run("analyze --convention hta --include-last-step " + trace);
  ASSERT_EQ(in.status, 0) << in.err;
  EXPECT_NE(in.out.find("the last ProfilerStep included"), std::string::npos) << in.out;
  // HTA's include_last_profiler_step: a longer kernel time.
  Outcome all = run("analyze --convention hta --include-last-step --format json " + trace);
  ASSERT_EQ(all.status, 0) << all.err;
  EXPECT_GT(nlohmann::json::parse(all.out)["hta"][0]["kernel_time_us"].get<double>(),
            h["kernel_time_us"].get<double>());
}

// --diff BASE NEW: a run against itself changes nothing; --diff-trace writes both runs on one
// timeline that analyze reads back (one process per run and rank).
TEST_F(CliAnalyze, DiffOfARunAgainstItself) {
  const std::string trace =
      COMMSCOPE_SOURCE_DIR "/data/traces/nccl_parser_config_nccl_data.json.gz";
  const std::string both = (dir_ / "both.json").string();
  Outcome r = run("analyze --diff " + trace + " " + trace + " --diff-trace " + both);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("No collective call changed."), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("No kernel's total time changed."), std::string::npos) << r.out;
  Outcome j = run("analyze --format json --diff " + trace + " " + trace);
  ASSERT_EQ(j.status, 0) << j.err;
  auto d = nlohmann::json::parse(j.out);
  EXPECT_EQ(d["total"]["delta_wall_s"].get<double>(), 0.0);
  EXPECT_TRUE(d["changed_calls"].empty());
  Outcome back = run("analyze --format json " + both);
  ASSERT_EQ(back.status, 0) << back.err;
  EXPECT_EQ(nlohmann::json::parse(back.out)["ranks"].size(), 2u);
  for (const auto& [flags, want] : std::vector<std::pair<std::string, std::string>>{
           {"--diff-trace x.json " + trace, "--diff-trace: expected --diff BASE NEW with it"},
           {"", "analyze: expected trace files or directories (or --diff BASE NEW)"},
           {"--diff " + trace + " " + trace + " " + trace, "--diff: "},
           {trace + " --diff " + trace + " " + trace, "--diff: expected two runs"},
           // a diff is commscope's breakdowns: HTA's convention was ignored (found by probing)
           {"--convention hta --diff " + trace + " " + trace,
            "--convention: expected no --diff with hta"}}) {
    Outcome bad = run("analyze " + flags);
    EXPECT_EQ(bad.status, 2) << flags;
    EXPECT_EQ(lines(bad.err), 1) << bad.err;
    EXPECT_NE(bad.err.find(want), std::string::npos) << bad.err;
  }
}

// A predicted timeline written with --trace reads back with analyze: one rank per stage.
TEST_F(CliAnalyze, ReadsCommscopeTraces) {
  fs::path trace = dir_ / "pred.json";
  Outcome p =
      run("predict --model megatron-1.7b --system dgx-a100-80gb --nodes 2 --tp 4 --pp 2 "
          "--global-batch-size 16 --micro-batch-size 1 --trace " +
          trace.string());
  ASSERT_EQ(p.status, 0) << p.err;
  Outcome a = run("analyze --format json " + trace.string());
  ASSERT_EQ(a.status, 0) << a.err;
  auto j = nlohmann::json::parse(a.out);
  EXPECT_EQ(j["ranks"].size(), 2u);
  // Its processes are pipeline stages on one clock: nothing to align across ranks.
  EXPECT_FALSE(j.contains("across_ranks"));
}

// Real H100 traces of commscope's own measurement (data/validation-gpu, scripts/measure-gpu.py):
// two ProfilerSteps of gpt2-xl on one GPU, FlashAttention and the standard kernel. The steps'
// GPU windows must be the run's step time that the script measured with its own clock
// (h100-traced-runs.csv, the median of 10 other steps of the same process), the GPU busy (flash
// 97%, standard 85%: its unfused elementwise kernels leave gaps), and the top kernels those of the
// attention kernel named. The H200's trace (h200-gpt2-xl-flash-trace.json.gz, micro-batch 8 with
// FlashAttention) was taken in the process that timed h200-runs.csv's first row, after its 10
// timed steps; the 32K-token Llama trace in the process that timed its h200-runs-long.csv row.
TEST_F(CliAnalyze, H100TraceStepsAreTheMeasuredSteps) {
  const std::string dir = COMMSCOPE_SOURCE_DIR "/data/validation-gpu/";
  const std::vector<std::tuple<std::string, double, std::string>> cases = {
      {"h100-gpt2-xl-flash-trace.json.gz", 0.248616, "flash_bwd"},
      {"h100-gpt2-xl-standard-trace.json.gz", 0.280704, "softmax_warp_backward"},
      {"h200-gpt2-xl-flash-trace.json.gz", 0.237725, "flash_bwd"},
      {"h200-llama3.2-1b-32k-trace.json.gz", 1.54848, "flash_bwd"}};
  // The measured step times above are the files'.
  const std::string runs = commscope::testing::slurp(dir + "h100-traced-runs.csv");
  EXPECT_NE(runs.find(",flash,0.248616,"), std::string::npos);
  EXPECT_NE(runs.find(",standard,0.280704,"), std::string::npos);
  const std::string h200 = commscope::testing::slurp(dir + "h200-runs.csv");
  EXPECT_NE(h200.find("\ngpt2-xl,dgx-h200,1,1,1,1,0,8,8,1024,bf16,none,flash,0.237725,"),
            std::string::npos);
  const std::string h200_long = commscope::testing::slurp(dir + "h200-runs-long.csv");
  EXPECT_NE(h200_long.find("\nllama3.2-1b,dgx-h200,1,1,1,1,0,1,1,32768,bf16,none,flash,1.54848,"),
            std::string::npos);
  for (const auto& [file, measured_s, kernel] : cases) {
    SCOPED_TRACE(file);
    Outcome r = run("analyze --format json " + dir + file);
    ASSERT_EQ(r.status, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j["ranks"].size(), 1u);
    const auto steps = j["ranks"][0]["steps"];
    ASSERT_EQ(steps.size(), 2u);
    for (const auto& st : steps) {
      const auto& b = st["breakdown"];
      EXPECT_NEAR(b["wall_s"].get<double>(), measured_s, 0.02 * measured_s);
      EXPECT_GT(b["compute_s"].get<double>(), 0.8 * b["wall_s"].get<double>());  // 97%, 85%
      EXPECT_EQ(b["exposed_comm_s"].get<double>(), 0.0);  // one GPU: no collective
    }
    bool found = false;
    for (const auto& k : j["top_kernels"])
      found = found || k["name"].get<std::string>().find(kernel) != std::string::npos;
    EXPECT_TRUE(found) << kernel;
  }
}

TEST_F(CliAnalyze, BadFlagsAreOneLineEach) {
  const std::string trace =
      COMMSCOPE_SOURCE_DIR "/data/traces/nccl_parser_config_nccl_data.json.gz";
  for (const auto& [flags, want] : std::vector<std::pair<std::string, std::string>>{
           {"--top -1", "--top: expected a non-negative integer, got '-1'"},
           {"-j 0", "--jobs: expected a positive integer, got '0'"},
           {"--rank -5", "--rank: expected a non-negative integer below 2^24, got '-5'"},
           {"--max-events 0", "--max-events: expected a positive integer, got '0'"},
           {"--convention nsight", "--convention: expected hta or commscope, got 'nsight'"},
           {"--include-last-step", "--include-last-step: expected --convention hta with it"}}) {
    Outcome r = run("analyze " + flags + " " + trace);
    EXPECT_EQ(r.status, 2) << flags;
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << flags;
  }
}

// A FIFO would block the reader forever; a directory without traces is not "an empty file".
TEST_F(CliAnalyze, FifoAndDirectoryAreRefused) {
  const std::string fifo = (dir_ / "pipe.json").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Outcome f = run("analyze " + fifo, "timeout 60 ");
  EXPECT_EQ(f.status, 2);
  EXPECT_EQ(lines(f.err), 1) << f.err;
  EXPECT_NE(f.err.find("pipe.json: not a regular file"), std::string::npos) << f.err;
  fs::create_directories(dir_ / "none");
  Outcome d = run("analyze " + (dir_ / "none").string());
  EXPECT_EQ(d.status, 2);
  EXPECT_EQ(lines(d.err), 1) << d.err;
  EXPECT_NE(d.err.find("none: a directory with no .json or .json.gz traces"), std::string::npos)
      << d.err;
  // The directory holding only the FIFO: nothing to read, not a hang.
  Outcome only = run("analyze " + dir_.string(), "timeout 60 ");
  EXPECT_EQ(only.status, 2) << only.err;
  // A folder named like a trace in a folder of traces is named, not skipped in silence: a
  // warning, and under --strict the error.
  const fs::path folder = dir_ / "run";
  fs::create_directories(folder / "sub.json");
  fs::copy_file(COMMSCOPE_SOURCE_DIR "/data/traces/trace_filter_sampled_rank-0.json.gz",
                folder / "r0.json.gz");
  Outcome warned = run("analyze " + folder.string());
  EXPECT_EQ(warned.status, 0) << warned.err;
  EXPECT_NE(warned.err.find("skipped " + (folder / "sub.json").string() + ": is a directory"),
            std::string::npos)
      << warned.err;
  Outcome strict = run("analyze --strict " + folder.string());
  EXPECT_EQ(strict.status, 2);
  EXPECT_EQ(strict.err,
            "commscope: " + (folder / "sub.json").string() + ": is a directory, expected a file\n");
}

// `analyze FILE --rank 3` reports the same as without it, relabelled as rank 3.
TEST_F(CliAnalyze, RankFlagRelabelsTheReport) {
  fs::path t = dir_ / "single.json";
  std::ofstream(t) << R"({"traceEvents":[)"
                      R"({"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":0,"dur":100},)"
                      R"({"ph":"X","cat":"kernel","name":"ncclKernel_AllReduce","pid":0,"tid":8,)"
                      R"("ts":50,"dur":100}]})";
  Outcome plain = run("analyze --format json " + t.string());
  Outcome three = run("analyze --format json --rank 3 " + t.string());
  ASSERT_EQ(plain.status, 0) << plain.err;
  ASSERT_EQ(three.status, 0) << three.err;
  auto a = nlohmann::json::parse(plain.out), b = nlohmann::json::parse(three.out);
  EXPECT_EQ(b["ranks"][0]["rank"], 3);
  EXPECT_GT(a["ranks"][0]["breakdown"]["compute_s"].get<double>(), 0);
  EXPECT_EQ(a["ranks"][0]["breakdown"], b["ranks"][0]["breakdown"]);
  EXPECT_EQ(b["slowest_rank"], 3);
  a["ranks"][0]["rank"] = 3;
  a["slowest_rank"] = 3;
  EXPECT_EQ(a, b);
}

// Found by probing, 2026-11-30. Collectives commscope has no kind for keep their rows (their
// time was in comm and in no row); percentiles interpolate (p50 of 1, 2, 3, 10 is 2.5, not 3);
// a rank with no call to pair with the reference's is not shown as perfectly aligned; traces
// of different world sizes and an empty trace are warned of; Markdown has the table's sections.
TEST_F(CliAnalyze, EveryCollectiveHasItsRowAndFiguresSayWhatTheyAre) {
  auto kernel = [](const std::string& name, double ts, double dur, int rank = 0) {
    return fmt::format(
        R"({{"ph":"X","cat":"kernel","name":"ncclDevKernel_Generic","pid":{},"tid":7,"ts":{},)"
        R"("dur":{},"args":{{"Collective name":"{}","In msg nelems":1024,"Out msg nelems":1024,)"
        R"("dtype":"Float","Group size":2}}}})",
        rank, ts, dur, name);
  };
  const fs::path t = dir_ / "rank0.json";
  std::ofstream(t) << R"({"distributedInfo":{"rank":0,"world_size":2},"traceEvents":[)"
                   << kernel("allreduce", 0, 1) << "," << kernel("allreduce", 10, 2) << ","
                   << kernel("allreduce", 20, 3) << "," << kernel("allreduce", 30, 10) << ","
                   << kernel("gather", 40, 100) << "," << kernel("barrier", 200, 50) << "]}";
  Outcome o = run("analyze --format json " + t.string());
  ASSERT_EQ(o.status, 0) << o.err;
  const auto j = nlohmann::json::parse(o.out);
  std::map<std::string, nlohmann::json> rows;
  double total = 0;
  for (const auto& c : j["collectives"]) {
    rows[c["collective"].get<std::string>()] = c;
    total += c["total_s"].get<double>();
  }
  ASSERT_EQ(rows.size(), 3u) << o.out;
  EXPECT_EQ(rows["gather"]["kind"], "other");
  EXPECT_EQ(rows["barrier"]["kind"], "other");
  EXPECT_EQ(rows["allreduce"]["kind"], "all_reduce");
  EXPECT_EQ(rows["gather"]["busbw_bytes_per_s"]["n"], 0);
  // Every communication microsecond is in a row (the kernels do not overlap here).
  EXPECT_NEAR(total, j["ranks"][0]["breakdown"]["comm_s"].get<double>(), 1e-12);
  EXPECT_NEAR(rows["allreduce"]["time_s"]["p50"].get<double>(), 2.5e-6, 1e-15);
  EXPECT_NEAR(rows["allreduce"]["time_s"]["p90"].get<double>(), (3 + 0.7 * 7) * 1e-6, 1e-15);

  // A second trace of another job (world size 128, no call in common): warned of, and its
  // clock shown unaligned.
  const fs::path other = dir_ / "rank1.json";
  std::ofstream(other) << R"({"distributedInfo":{"rank":1,"world_size":128},"traceEvents":[)"
                       << kernel("broadcast", 0, 5, 1) << "]}";
  Outcome both = run("analyze " + t.string() + " " + other.string());
  ASSERT_EQ(both.status, 0) << both.err;
  EXPECT_NE(both.err.find("world_size 128 differs from"), std::string::npos) << both.err;
  EXPECT_TRUE(std::regex_search(both.out, std::regex(R"((^|\n) *1 +- +- +- +0 *\n)"))) << both.out;
  Outcome both_json = run("analyze --format json " + t.string() + " " + other.string());
  ASSERT_EQ(both_json.status, 0) << both_json.err;
  const auto clocks = nlohmann::json::parse(both_json.out)["across_ranks"]["clocks"];
  ASSERT_EQ(clocks.size(), 2u) << both_json.out;
  EXPECT_TRUE(clocks[1]["offset_s"].is_null()) << clocks.dump();
  EXPECT_EQ(clocks[1]["calls"], 0);
  Outcome md = run("analyze --format md " + t.string() + " " + other.string());
  ASSERT_EQ(md.status, 0) << md.err;
  EXPECT_NE(md.out.find("### Across ranks"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("slowest rank:"), std::string::npos) << md.out;

  const fs::path empty = dir_ / "empty.json";
  std::ofstream(empty) << R"({"traceEvents":[]})";
  Outcome e = run("analyze " + empty.string());
  EXPECT_EQ(e.status, 0) << e.err;
  EXPECT_NE(e.err.find("no GPU kernels or memory copies"), std::string::npos) << e.err;
}

// Memory stays bounded: a few MB of gzip holding one 5 GiB event, or billions of bytes of
// small events, are refused with one line naming the file and the limit, under a 1.5 GiB
// address-space limit (without the bounds the reader would need several GiB and crash).
TEST_F(CliAnalyze, GzipBombsAreRefusedWithinMemory) {
  const std::string limit = "ulimit -v 1572864; timeout 300 ";
  const fs::path huge = dir_ / "huge_event.json.gz";
  write_repeated_gzip(huge, R"({"traceEvents":[{"ph":"X","cat":"kernel","name":")",
                      std::string(1 << 20, 'a'), 5120, R"(","ts":0,"dur":1}]})");
  EXPECT_LT(fs::file_size(huge), 20u << 20);
  Outcome h = run("analyze " + huge.string(), limit);
  EXPECT_EQ(h.status, 2) << h.err;
  EXPECT_EQ(lines(h.err), 1) << h.err;
  EXPECT_NE(h.err.find("huge_event.json.gz"), std::string::npos) << h.err;
  EXPECT_NE(h.err.find("maximum size of one event"), std::string::npos) << h.err;

  const fs::path many = dir_ / "many_events.json.gz";
  std::string block;
  while (block.size() < (1u << 20))
    block += R"(,{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":1})";
  // About 50 million kept events: several GiB as records.
  write_repeated_gzip(many,
                      R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":0,"dur":1})",
                      block, 2500, "]}");
  EXPECT_LT(fs::file_size(many), 20u << 20);
  Outcome m = run("analyze " + many.string(), limit);
  EXPECT_EQ(m.status, 2) << m.err;
  EXPECT_EQ(lines(m.err), 1) << m.err;
  EXPECT_NE(m.err.find("many_events.json.gz"), std::string::npos) << m.err;
  EXPECT_NE(m.err.find("memory limit"), std::string::npos) << m.err;
  // A count given with --max-events is the limit instead.
  Outcome c = run("analyze --max-events 1000 " + many.string(), limit);
  EXPECT_EQ(c.status, 2) << c.err;
  EXPECT_NE(c.err.find("more than 1000 events kept (--max-events)"), std::string::npos) << c.err;
}

}  // namespace

namespace {
// A trace reached through a folder is an input as one named is: an output naming it is
// refused and the trace is kept (-o replaced it, found by probing, 2026-12-02).
TEST_F(CliAnalyze, OutputsNamingATraceOfAFolderAreRefused) {
  const fs::path d = dir_ / "run";
  fs::create_directories(d);
  fs::copy_file(COMMSCOPE_SOURCE_DIR "/data/traces/trace_filter_sampled_rank-0.json.gz",
                d / "r0.json.gz");
  const std::string kept = commscope::testing::slurp(d / "r0.json.gz");
  const std::string r0 = (d / "r0.json.gz").string();
  for (const std::string& args :
       {"analyze " + d.string() + " -o " + r0, "analyze " + d.string() + " --html " + r0,
        "analyze --diff " + d.string() + " " + d.string() + " --diff-trace " + r0}) {
    SCOPED_TRACE(args);
    Outcome r = run(args);
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("expected a file other than the inputs, got '" + r0 + "'"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(commscope::testing::slurp(d / "r0.json.gz"), kept);
  }
}
}  // namespace
