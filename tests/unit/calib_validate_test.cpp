// validate and calibrate: readers, metrics, the fit, and the held-out error on vTrain's data.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <tuple>

#include "commscope/calib/validate.h"
#include "commscope/cost/compute.h"
#include "commscope/report/validation.h"
#include "commscope/sim/simulator.h"
#include "commscope/spec/framework_config.h"
#include "commscope/workload/params.h"
#include "commscope/workload/workload.h"
#include "test_util.h"

namespace commscope {
namespace {

const std::string kVtrain = COMMSCOPE_SOURCE_DIR "/data/vtrain/";

// A folder of the test process's scratch space (removed at exit, passed or not), and a file
// written into it.
std::filesystem::path scratch_dir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(testing::scratch()) / name;
  std::filesystem::create_directories(dir);
  return dir;
}
std::string write_in(const std::filesystem::path& dir, const std::string& name,
                     const std::string& text) {
  std::ofstream(dir / name) << text;
  return (dir / name).string();
}

TEST(Validate, Summary) {
  ErrorSummary s = summarize({0.1, -0.2, 0.05, -0.05});
  EXPECT_NEAR(s.mape, 0.1, 1e-15);
  EXPECT_NEAR(s.median, 0.075, 1e-15);
  EXPECT_NEAR(s.max, 0.2, 1e-15);
  EXPECT_NEAR(s.bias, -0.025, 1e-15);
}

// The vTrain files start with a byte-order mark; their rows become GPT scenarios with the
// publishers' settings (vocabulary 50,257 padded by Megatron, full recompute, fp16, one
// gradient bucket after backward).
TEST(Validate, ReadsVtrainCsv) {
  auto runs = read_measured_csv(kVtrain + "ground_truth_single.csv", "vtrain-a100");
  ASSERT_TRUE(runs.ok()) << runs.error().message;
  EXPECT_EQ(runs->size(), 1440u);
  const MeasuredRun& r = runs->front();  // 2,16,8,1024,16,24,1024,1,1,2,372.160408
  EXPECT_EQ(r.line, 2);
  EXPECT_EQ(r.model.hidden, 1024);
  EXPECT_EQ(r.model.decoder_layers, 24);
  EXPECT_EQ(r.model.vocab, 50304);
  EXPECT_EQ(*r.input.plan.pp, 2);
  EXPECT_EQ(*r.input.plan.global_batch, 16);
  EXPECT_EQ(*r.input.plan.recompute, Recompute::full);
  EXPECT_NEAR(r.measured_s, 0.372160408, 1e-12);
  auto multi = read_measured_csv(kVtrain + "ground_truth_multi.csv", "vtrain-a100");
  ASSERT_TRUE(multi.ok()) << multi.error().message;
  EXPECT_EQ(multi->size(), 109u);
}

// The workloads validate and calibrate keep are bounded in ops, in all: the run that passes the
// bound is an error naming its line, the runs before it counted (20,000 vTrain rows took 3.5 GB
// before, found by probing, 2026-12-02).
TEST(Validate, PreparedRunsAreBoundedInOps) {
  auto runs = read_measured_csv(kVtrain + "ground_truth_multi.csv", "vtrain-a100");
  ASSERT_TRUE(runs.ok()) << runs.error().message;
  std::vector<std::string> skipped;
  auto all = prepare_runs(*runs, skipped);
  ASSERT_TRUE(all.ok()) << all.error().message;
  ASSERT_EQ(all->size(), runs->size());
  std::int64_t total = 0;
  for (const PreparedRun& r : *all) total += workload_ops(r.workload);
  const std::int64_t last = workload_ops(all->back().workload);
  ASSERT_GT(last, 0);
  EXPECT_TRUE(prepare_runs(*runs, skipped, total).ok());
  auto over = prepare_runs(*runs, skipped, total - 1);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(
      over.error().message,
      fmt::format("{}: line {}: expected measured runs whose workloads hold at most {} ops "
                  "in all (commscope's limit, docs/limits.md: each run's is kept), got {} "
                  "with this row, after {} runs; validate fewer rows at once",
                  runs->back().source, runs->back().line, total - 1, total, runs->size() - 1));
  // The whole of vTrain's files is far inside the shipped bound.
  EXPECT_LT(total, limits::kMaxPreparedOps / 10);
}

TEST(Validate, CommscopeCsvAndErrors) {
  const std::filesystem::path dir = scratch_dir("commscope_csv");
  {
    std::ofstream f(dir / "ok.csv");
    f << "model,system,nodes,tp,pp,micro_batch,global_batch,precision,recompute,measured_s\n"
         "gpt2-large,polaris,4,1,1,4,64,bf16,none,0.25\n"
         "megatron-1.7b,dgx-a100-80gb,2,8,2,1,16,fp16,full,1.5\n";
    std::ofstream g(dir / "bad.csv");
    g << "model,measured_s\ngpt2-large,fast\n";
    std::ofstream h(dir / "short.csv");
    h << "model,measured_s\ngpt2-large\n";
  }
  auto ok = read_measured_csv((dir / "ok.csv").string(), "ignored");
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  ASSERT_EQ(ok->size(), 2u);
  EXPECT_EQ((*ok)[1].input.system, "dgx-a100-80gb");
  EXPECT_EQ(*(*ok)[1].input.plan.tp, 8);
  std::vector<std::string> skipped;
  auto prepared = *prepare_runs(*ok, skipped);
  EXPECT_EQ(prepared.size(), 2u);
  EXPECT_TRUE(skipped.empty());
  auto bad = read_measured_csv((dir / "bad.csv").string(), "x");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find(
                "line 2: column 'measured_s': expected a number of seconds from 1e-6 to 1e6, got "
                "'fast'"),
            std::string::npos)
      << bad.error().message;
  auto short_row = read_measured_csv((dir / "short.csv").string(), "x");
  ASSERT_FALSE(short_row.ok());
  EXPECT_NE(short_row.error().message.find("line 2: expected 2 columns, got 1"), std::string::npos);
}

// The optional columns: the attention kernel, the measured peak memory and free-text notes; a
// column commscope does not know is refused by name before its cells are read (it used to be
// "expected a non-negative integer" when its cells were text).
TEST(Validate, CommscopeCsvAttentionMemoryAndNotes) {
  const std::filesystem::path dir = scratch_dir("commscope_csv_columns");
  auto write = [&](const char* name, const std::string& text) { return write_in(dir, name, text); };
  auto ok = read_measured_csv(
      write("ok.csv",
            "model,system,gpus,micro_batch,attention,measured_s,measured_memory_gib,notes\n"
            "gpt2-xl,dgx-h100,1,8,standard,0.25,43.5,\"median of 10, after 3\"\n"
            "gpt2-xl,dgx-h100,1,8,flash,0.25,,\n"),
      "x");
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  ASSERT_EQ(ok->size(), 2u);
  EXPECT_EQ(*(*ok)[0].input.plan.attention, AttentionKernel::standard);
  EXPECT_EQ(*(*ok)[1].input.plan.attention, AttentionKernel::flash);
  EXPECT_DOUBLE_EQ((*ok)[0].measured_memory_gib, 43.5);
  EXPECT_DOUBLE_EQ((*ok)[1].measured_memory_gib, 0);
  std::vector<std::string> skipped;
  auto prepared = *prepare_runs(*ok, skipped);
  ASSERT_EQ(prepared.size(), 2u);
  Validation v = validate_runs(prepared, "all");
  // The memory error is the predicted peak over the measured one; the standard kernel's s x s
  // scores make it the larger of the two.
  EXPECT_NEAR(v.rows[0].measured_memory, 43.5 * 1073741824.0, 1);
  EXPECT_GT(v.rows[0].memory_per_gpu, v.rows[1].memory_per_gpu);
  const std::string text = render_validation(v, Format::table, "x", false);
  EXPECT_NE(text.find("measured_mem_gib"), std::string::npos) << text;
  EXPECT_NE(text.find(fmt::format("{:+.1f}%",
                                  100 * (v.rows[0].memory_per_gpu / (43.5 * 1073741824.0) - 1))),
            std::string::npos)
      << text;
  auto j = nlohmann::json::parse(render_validation(v, Format::json, "x", false));
  EXPECT_TRUE(j["rows"][0].contains("memory_error"));
  EXPECT_FALSE(j["rows"][1].contains("memory_error"));

  for (const auto& [csv, expected] : std::vector<std::pair<std::string, std::string>>{
           {"model,attention,measured_s\ngpt2-xl,fused,1\n",
            "line 2: column 'attention': expected flash or standard, got 'fused'"},
           {"model,measured_s,measured_memory_gib\ngpt2-xl,1,45e9\n",
            "line 2: column 'measured_memory_gib': expected a number of GiB from 1/1024 (1 MiB) to "
            "1e6"},
           {"model,measured_s,measured_memory_gib\ngpt2-xl,1,-2\n", "column 'measured_memory_gib'"},
           {"model,measured_s,measured_memory_gib\ngpt2-xl,1,0\n", "to 1e6, got '0'"},
           // A tiny peak gave a 300-digit relative error (found by probing, 2026-11-30).
           {"model,measured_s,measured_memory_gib\ngpt2-xl,1,1e-300\n", "to 1e6, got '1e-300'"},
           {"model,measured_s,flavour\ngpt2-xl,1,mint\n",
            "line 1: unknown column 'flavour'; expected model, system,"},
           {"model,attention_backend,measured_s\ngpt2-xl,cudnn,1\n",
            "line 2: column 'attention_backend': expected fused, flash or empty, got 'cudnn'"},
           // found by probing (2026-11-30): the second cell used to win silently
           {"model,measured_s,measured_s\ngpt2-xl,0.25,9\n",
            "line 1: expected each column once, got 'measured_s' twice"},
           // std::stod read hex (16 s) and inf
           {"model,measured_s\ngpt2-xl,0x10\n", "line 2: column 'measured_s'"},
           {"model,measured_s\ngpt2-xl,inf\n", "line 2: column 'measured_s'"},
           // a quote left open used to be accepted, the rest of the line its cell
           {"model,measured_s,notes\ngpt2-xl,1,\"open\ngpt2-xl,2,x\n",
            "line 2: a quoted cell is not closed by the end of the file"},
           // a record whose quoted cell spans lines is named by its first line, where it
           // starts (it was named by its last, found by probing, 2026-12-02)
           {"model,measured_s,notes\ngpt2-xl,fast,\"one\ntwo\nthree\"\n",
            "line 2: column 'measured_s': expected a number of seconds"},
           // lone-CR line ends made the file one header line no reader knew
           {"model,measured_s\rgpt2-xl,1\r",
            "line 1: expected LF or CRLF line ends, got a line "
            "ended by a lone CR (byte 17)"},
           // vTrain's files have a fixed set of columns: one more was read past
           {"# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence "
            "length,tensor parallelism,data parallelism,pipeline parallelism,iteration time "
            "(ms),dropout\n2,16,8,1024,16,24,1024,1,1,2,372.1,0.1\n",
            "line 1: unknown column 'dropout' in a vTrain file; expected Parameters (billion), "
            "# GPUs,"}}) {
    auto r = read_measured_csv(write("bad.csv", csv.c_str()), "x");
    ASSERT_FALSE(r.ok()) << csv;
    EXPECT_NE(r.error().message.find(expected), std::string::npos) << r.error().message;
  }
  // RFC 4180, as Python's csv module and spreadsheets write it: a quoted cell may hold commas,
  // line breaks and "" for a quote; the record's line count moves on with them.
  auto quoted = read_measured_csv(
      write("quoted.csv",
            "model,measured_s,notes,attention_backend\n"
            "gpt2-xl,0.25,\"line one\nline two, with a comma and \"\"quotes\"\"\",flash\n"
            "gpt2-xl,0.5,,\n"),
      "x");
  ASSERT_TRUE(quoted.ok()) << quoted.error().message;
  ASSERT_EQ(quoted->size(), 2u);
  EXPECT_DOUBLE_EQ((*quoted)[0].measured_s, 0.25);
  EXPECT_EQ((*quoted)[0].line, 2);  // where the record starts
  EXPECT_EQ(*(*quoted)[0].input.plan.attention_backend, AttentionBackend::flash);
  EXPECT_DOUBLE_EQ((*quoted)[1].measured_s, 0.5);
  EXPECT_FALSE((*quoted)[1].input.plan.attention_backend.has_value());
  EXPECT_EQ((*quoted)[1].line, 4);
}

// Single-GPU training runs measured on an H100 by scripts/measure-gpu.py (data/validation-gpu,
// README.md there): gpt2-xl and Llama 3.2 1B, bf16, Megatron's mixed precision, predicted with
// the shipped dgx-h100 preset, whose compute calibration was fitted on published multi-GPU runs
// only (none of these). Two files: the runs with Megatron's fused forms of the loss, SwiGLU and
// the attention's scale and mask (h100-runs.csv), and the same plans in PyTorch's eager forms
// (h100-runs-eager.csv). Bounds: the issue's 10-15% for the time of the runs whose kernels are
// the ones commscope models (cuBLAS GEMMs, FlashAttention, fused Adam: the gpt2-xl flash rows),
// each within 15% and their mean within 10% (measured +5.2% to +11.3%, mean 7.6%, since the
// runs' attention is priced at FlashAttention's measured speed, attention_backend flash; each
// was within 10% before, when it was priced at the fitted fused-attention figure), 10% for the
// peak memory of every run of the fused-forms file. The standard-attention rows (-26 to
// -30%: PyTorch's unfused mask and softmax passes, which Megatron fuses) and the Llama rows'
// time are reported in docs/validate.md, not bounded here.
namespace {
// The runs of a commscope CSV, prepared; every row must read and prepare.
std::vector<PreparedRun> prepared_csv(const std::string& path) {
  auto runs = read_measured_csv(path, "x");
  EXPECT_TRUE(runs.ok()) << runs.error().message;
  if (!runs.ok()) return {};
  std::vector<std::string> skipped;
  auto prepared = *prepare_runs(*runs, skipped);
  EXPECT_TRUE(skipped.empty());
  return prepared;
}

std::vector<PreparedRun> h100_runs(const std::string& file) {
  return prepared_csv(COMMSCOPE_SOURCE_DIR "/data/validation-gpu/" + file);
}
}  // namespace

namespace {
// One file of single-GPU runs on `system`: every run ran, so every verdict must say it fits; the
// runs called PyTorch SDPA's flash backend (scripts/measure-gpu.py); the `flash_count` gpt2-xl
// FlashAttention rows each within 15% and their mean within 10%; with `memory`, each run's peak
// within 10%. Returns the runs that peaked above 80 GiB.
int check_gpu_runs(const std::string& file, const std::string& system, std::size_t count,
                   int flash_count, bool memory) {
  SCOPED_TRACE(file);
  auto runs = h100_runs(file);
  EXPECT_EQ(runs.size(), count);
  Validation v = validate_runs(runs, "all");
  int flash_rows = 0, above_80 = 0;
  double flash_abs = 0;
  for (const ValidationRow& r : v.rows) {
    SCOPED_TRACE(r.line);
    const Scenario& sc = *r.scenario;
    EXPECT_EQ(sc.gpus(), 1);
    EXPECT_EQ(sc.system.name, system);
    EXPECT_GT(r.measured_memory, 0);
    EXPECT_TRUE(r.fits) << r.memory_per_gpu / 1073741824.0;
    above_80 += r.measured_memory > 80.0 * 1073741824.0;
    if (sc.plan.attention == AttentionKernel::flash) {
      EXPECT_EQ(sc.plan.attention_backend, AttentionBackend::flash);
    }
    if (sc.model.name == "gpt2-xl" && sc.plan.attention == AttentionKernel::flash) {
      ++flash_rows;
      flash_abs += std::fabs(r.error);
      EXPECT_LE(std::fabs(r.error), 0.15) << r.predicted_s << " vs " << r.measured_s;
    }
    if (memory && r.measured_memory > 0) {
      EXPECT_LE(std::fabs(r.memory_per_gpu / r.measured_memory - 1), 0.10)
          << r.memory_per_gpu / 1073741824.0 << " GiB vs " << r.measured_memory / 1073741824.0;
    }
  }
  EXPECT_EQ(flash_rows, flash_count);
  if (flash_rows > 0) {
    EXPECT_LE(flash_abs / flash_rows, 0.10);
  }
  return above_80;
}
}  // namespace

TEST(ValidateGpu, H100RunsTimeAndMemory) {
  check_gpu_runs("h100-runs.csv", "dgx-h100", 10, 5, true);
  check_gpu_runs("h100-runs-eager.csv", "dgx-h100", 10, 5, false);
}

// The dgx-h100 preset's flash_attention_efficiency is measured, not fitted: recomputed here from
// the 14 FlashAttention-2 rows of h100-kernels.csv (PyTorch SDPA's flash backend on an H100) as
// the preset's source says: per row, the efficiency at which the preset's GEMM curve gives the
// measured time for the kernel's FLOPs as FlashAttention-2 counts them (4 b h s^2 d, the causal
// half; backward 2.5x the forward: Dao 2023, section 4.1), then their geometric mean. A refit of
// the GEMM curve's shape would change it; this says so.
TEST(ValidateGpu, FlashAttentionEfficiencyIsTheKernelSweeps) {
  auto sys = load_system("dgx-h100");
  ASSERT_TRUE(sys.ok()) << sys.error().message;
  const Calibration& c = sys->calibration;
  const double peak = sys->gpu.peak.bf16.value();
  auto seconds_at_one = [&](double flops) {  // the curve at efficiency 1
    return flops / (peak * matmul_efficiency(flops, 1.0, c.gemm_half_flops, c.gemm_steepness));
  };
  std::ifstream in(COMMSCOPE_SOURCE_DIR "/data/validation-gpu/h100-kernels.csv");
  ASSERT_TRUE(in);
  std::string line;
  auto next = [&] {  // the file's lines end in CR LF, as the sweep's csv.writer wrote them
    if (!std::getline(in, line)) return false;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return true;
  };
  ASSERT_TRUE(next());
  ASSERT_EQ(line, "kind,shape,dtype,seconds,tflops,gbs");
  double log_sum = 0;
  int rows = 0;
  while (next()) {
    std::stringstream ss(line);
    std::string kind, shape, dtype, seconds;
    std::getline(ss, kind, ',');
    std::getline(ss, shape, ',');
    std::getline(ss, dtype, ',');
    std::getline(ss, seconds, ',');
    if (kind != "flash_fwd" && kind != "flash_fwd_bwd") continue;
    double b = 0, h = 0, s = 0, d = 0;
    char x = 0;
    std::stringstream dims(shape);
    dims >> b >> x >> h >> x >> s >> x >> d;
    const double fwd = 4 * b * h * s * s * d / 2;
    double t = seconds_at_one(fwd);
    if (kind == "flash_fwd_bwd") t += seconds_at_one(2.5 * fwd);
    const double e = t / std::stod(seconds);
    EXPECT_GT(e, 0.2) << line;
    EXPECT_LT(e, 0.6) << line;
    log_sum += std::log(e);
    ++rows;
  }
  EXPECT_EQ(rows, 14);
  EXPECT_NEAR(c.flash_attention_efficiency, std::exp(log_sum / rows), 5e-5);
}

// `calibrate` writes the preset's measured FlashAttention figure back, whatever its start: it is
// no fit term (until 2026-11-30, a fit from the defaults dropped it from the written preset).
TEST(ValidateGpu, CalibrateKeepsTheMeasuredFlashAttentionFigure) {
  const std::string out = scratch_dir("calibrate_flash").string() + "/h100.json";
  for (const char* start : {"defaults", "preset"}) {
    SCOPED_TRACE(start);
    auto r = testing::run_shell(std::string(COMMSCOPE_BIN) + " calibrate " +
                                COMMSCOPE_SOURCE_DIR "/data/validation-gpu/h100-runs.csv" +
                                " --system dgx-h100 --rows all --compute-only --evaluations 10 " +
                                "--start " + start + " -o " + out + " </dev/null");
    ASSERT_EQ(r.status, 0) << r.err;
    auto j = nlohmann::json::parse(std::ifstream(out));
    EXPECT_EQ(j["calibration"]["flash_attention_efficiency"], 0.3851);
  }
}

// The closed loop on a real GPU: `calibrate --from-trace` fits the H100's GEMM, attention and
// element-wise efficiencies on the PyTorch profiler trace of one run, and the fitted system then
// predicts the runs it never saw, in the same eager PyTorch forms (h100-runs-eager.csv). Both
// ways: fitted on gpt2-xl (micro-batch 8, FlashAttention), it predicts the other gpt2-xl
// FlashAttention plans (micro-batch 4 and 16, gradient accumulation, full recompute) and Llama
// 3.2 1B (grouped-query attention, SwiGLU, RMSNorm, a 128K vocabulary, sequence 4096); fitted on
// Llama 3.2 1B (micro-batch 4), it predicts every gpt2-xl plan, the standard kernel's too (its
// element-wise passes run at the eager element-wise efficiency the Llama trace shows), and the
// other Llama plan. Bound: the issue's 10% (measured -4.8% and +5.5% at most). The fit reads only
// the trace, never the CSV's times.
namespace {
// Writes the data rows of data/validation-gpu's `files` that `keep` accepts into `csv`, under the
// first file's header, with their system column `from` pointing at the fitted system `to`.
// Returns the rows written.
int runs_on_fitted_system(const std::filesystem::path& csv, const std::vector<std::string>& files,
                          const std::string& from, const std::string& to,
                          const std::function<bool(const std::string&)>& keep) {
  std::ofstream out(csv);
  const std::string column = "," + from + ",";
  int rows = 0;
  for (std::size_t f = 0; f < files.size(); ++f) {
    std::ifstream in(COMMSCOPE_SOURCE_DIR "/data/validation-gpu/" + files[f]);
    std::string line;
    std::getline(in, line);
    if (f == 0) out << line << "\n";
    while (std::getline(in, line)) {
      if (!keep(line)) continue;
      const std::size_t at = line.find(column);
      if (at != std::string::npos) line.replace(at, column.size(), "," + to + ",");
      out << line << "\n";
      ++rows;
    }
  }
  return rows;
}

// The closed loop of one GPU's files (`gpu` is the files' prefix, h100 or h200): each trace
// calibrates `system`, which then predicts that GPU's eager-form runs it did not trace, each
// within `bound` (the Llama trace's, which predicts the standard kernel's rows too, within
// `llama_bound`).
void trace_calibration_loop(const std::string& gpu, const std::string& system_name, double bound,
                            double llama_bound) {
  namespace fs = std::filesystem;
  using testing::run_shell;
  const fs::path dir = scratch_dir(gpu + "_loop");
  const std::string data = COMMSCOPE_SOURCE_DIR "/data/validation-gpu/";
  auto preset = nlohmann::json::parse(std::ifstream(COMMSCOPE_SOURCE_DIR "/presets/systems/" +
                                                    system_name + ".json"))["calibration"];
  // The eager-form runs: every row of the file (the header aside), its gpt2-xl flash rows and
  // its Llama rows.
  int runs = 0, gpt2_flash = 0, llama = 0;
  {
    std::ifstream in(data + gpu + "-runs-eager.csv");
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      ++runs;
      gpt2_flash += line.rfind("gpt2-xl,", 0) == 0 && line.find(",flash,") != std::string::npos;
      llama += line.rfind("llama3.2-1b,", 0) == 0;
    }
  }
  ASSERT_GT(runs, 0);
  struct Case {
    std::string trace, plan, model;
    int micro, global;
    bool standard_too;  // predict the standard-attention rows as well
    int unseen;         // the rows predicted
    double bound;
  };
  for (const Case& c :
       {Case{gpu + "-gpt2-xl-flash-trace.json.gz", "--model gpt2-xl", "gpt2-xl", 8, 8, false,
             gpt2_flash - 1 + llama, bound},
        Case{gpu + "-llama3.2-1b-eager-trace.json.gz", "--model llama3.2-1b --seq-length 4096",
             "llama3.2-1b", 4, 4, true, runs - 1, llama_bound}}) {
    SCOPED_TRACE(c.trace);
    const std::string system = (dir / (c.model + ".json")).string();
    auto r = run_shell(std::string(COMMSCOPE_BIN) + " calibrate --from-trace " + data + c.trace +
                       " --system " + system_name + " " + c.plan +
                       " --nodes 1 --gpus 1 --micro-batch-size " + std::to_string(c.micro) +
                       " --global-batch-size " + std::to_string(c.global) +
                       " --attention flash -o " + system + " </dev/null");
    ASSERT_EQ(r.status, 0) << r.err;
    // Every class was fitted (attention with it: the flash kernels are recognised and timed).
    for (const char* cls : {"gemm ", "attention ", "elementwise "})
      EXPECT_NE(r.out.find(cls), std::string::npos) << r.out;
    auto fitted = nlohmann::json::parse(std::ifstream(system));
    const auto& cal = fitted["calibration"];
    EXPECT_NE(cal["attention_efficiency"], preset["attention_efficiency"]);
    EXPECT_NE(cal["memory_efficiency"], preset["memory_efficiency"]);
    // the traced attention kernels price either backend: no separate FlashAttention figure
    EXPECT_TRUE(preset.contains("flash_attention_efficiency"));
    EXPECT_FALSE(cal.contains("flash_attention_efficiency"));

    const fs::path csv = dir / (c.model + "-runs.csv");
    ASSERT_EQ(runs_on_fitted_system(csv, {gpu + "-runs-eager.csv"}, system_name, system,
                                    [](const std::string&) { return true; }),
              runs);
    const auto prepared = prepared_csv(csv.string());
    ASSERT_EQ(prepared.size(), static_cast<std::size_t>(runs));
    Validation v = validate_runs(prepared, "all");
    int unseen = 0;
    for (const ValidationRow& row : v.rows) {
      SCOPED_TRACE(row.line);
      const Scenario& sc = *row.scenario;
      if (!c.standard_too && sc.plan.attention != AttentionKernel::flash) continue;
      if (sc.model.name == c.model && sc.plan.micro_batch == c.micro &&
          sc.plan.global_batch == c.global)
        continue;  // the traced plan
      ++unseen;
      EXPECT_LE(std::fabs(row.error), c.bound) << row.predicted_s << " vs " << row.measured_s;
    }
    EXPECT_EQ(unseen, c.unseen);
  }
}
}  // namespace

TEST(ValidateGpu, TraceCalibrationPredictsTheOtherH100Runs) {
  trace_calibration_loop("h100", "dgx-h100", 0.10, 0.10);
}

// The same loop on the H200's own traces and runs (data/validation-gpu/h200-*): fitted on gpt2-xl,
// it predicts the 4 other gpt2-xl FlashAttention plans and the 3 Llama plans within 10% (measured
// -6.8% at most); fitted on Llama 3.2 1B, the 10 others within 15% (measured +14.5% at most: the
// standard kernel's three rows, +13.4% to +14.5%, priced at the Llama trace's element-wise
// efficiency, 0.26 against the gpt2-xl trace's 0.40, on which its unfused passes lean; the 7
// others within 9.3%).
TEST(ValidateGpu, TraceCalibrationPredictsTheOtherH200Runs) {
  trace_calibration_loop("h200", "dgx-h200", 0.10, 0.15);
}

// The plans that ran out of memory on the H100 (h100-oom*.csv, measured_s empty; PyTorch's
// message in notes), against the verdicts:
// - every plan commscope says does not fit ran out, under either allocator setting;
// - with PyTorch's default caching allocator, gpt2-xl micro-batches 18-20 (73.4-79.0 GiB by
//   commscope's count) ran out with at least 2 GiB reserved but unallocated (fragmentation);
//   each of them then ran with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
//   (h100-runs-expandable.csv), and there its verdict agrees;
// - Llama 3.2 1B micro-batch 8 ran out under both settings, allocating exactly the loss's fp32
//   logits, 4 x s x b x V bytes, beside the bf16 ones it was cast from; with that cast counted
//   (2 bytes a logit, unfused cross entropy) commscope puts it at 79.21 GiB of the GPU's 79.18:
//   does not fit, in agreement, by a margin of 0.03 GiB (docs/validate.md).
namespace {
// "Tried to allocate 15.66 GiB" -> 15.66; `what` is the text before the number, `after` after.
double number_in(const std::string& text, const std::string& what, const std::string& after) {
  std::size_t at = text.find(what);
  if (at == std::string::npos) return -1;
  if (!after.empty()) {
    std::size_t end = text.find(after, at);
    if (end == std::string::npos) return -1;
    std::size_t begin = text.rfind(' ', text.rfind(' ', end - 1) - 1);
    return std::stod(text.substr(begin + 1, end - begin - 1));
  }
  return std::stod(text.substr(at + what.size()));
}

// PyTorch's messages of an out-of-memory file, one per row, from its notes column.
std::vector<std::string> oom_messages(const std::string& file) {
  std::vector<std::string> messages;
  std::ifstream in(COMMSCOPE_SOURCE_DIR "/data/validation-gpu/" + file);
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) messages.push_back(line.substr(line.find(",oom,")));
  return messages;
}

// The loss's fp32 logits of a plan, 4 x b x s x V bytes, in GiB.
double fp32_logits_gib(const Scenario& sc) {
  return 4.0 * static_cast<double>(sc.plan.micro_batch) * static_cast<double>(sc.model.seq_length) *
         static_cast<double>(sc.model.vocab) / 1073741824.0;
}

// Whether `ran` holds a run of the same model, micro-batch and attention kernel as `sc`.
bool ran_in(const Validation& ran, const Scenario& sc) {
  for (const ValidationRow& e : ran.rows)
    if (e.scenario->model.name == sc.model.name &&
        e.scenario->plan.micro_batch == sc.plan.micro_batch &&
        e.scenario->plan.attention == sc.plan.attention)
      return true;
  return false;
}
}  // namespace

TEST(ValidateGpu, H100OutOfMemoryPlans) {
  const auto expandable = h100_runs("h100-runs-expandable.csv");
  ASSERT_EQ(expandable.size(), 3u);
  Validation ran = validate_runs(expandable, "all");
  for (const ValidationRow& r : ran.rows) {
    EXPECT_TRUE(r.fits);
    EXPECT_LE(std::fabs(r.error), 0.10);
    EXPECT_LE(std::fabs(r.memory_per_gpu / r.measured_memory - 1), 0.10);
  }
  int llama_rows = 0, fragmented_rows = 0;
  for (const char* file : {"h100-oom.csv", "h100-oom-eager.csv", "h100-oom-expandable.csv"}) {
    SCOPED_TRACE(file);
    const bool expandable_file = std::string(file) == "h100-oom-expandable.csv";
    const std::vector<std::string> messages = oom_messages(file);
    const auto prepared = h100_runs(file);
    ASSERT_EQ(prepared.size(), messages.size());
    Validation v = validate_runs(prepared, "all");
    EXPECT_EQ(v.verdicts, messages.size());
    for (std::size_t i = 0; i < v.rows.size(); ++i) {
      const ValidationRow& r = v.rows[i];
      const Scenario& sc = *r.scenario;
      SCOPED_TRACE(messages[i]);
      ASSERT_TRUE(r.out_of_memory);
      EXPECT_NE(messages[i].find("out of memory"), std::string::npos);
      if (sc.model.name == "llama3.2-1b") {
        // It failed allocating the loss's fp32 logits, 4 x s x b x V bytes, with the bf16 ones
        // held: the cast commscope now counts, which puts the plan at 79.21 GiB of 79.18.
        ++llama_rows;
        EXPECT_NEAR(number_in(messages[i], "Tried to allocate ", ""), fp32_logits_gib(sc), 0.006);
        EXPECT_FALSE(r.fits) << r.memory_per_gpu / 1073741824.0;
        continue;
      }
      if (!r.fits) continue;  // the verdict agrees
      // gpt2-xl predicted to fit: only under the default allocator, fragmented, and run with
      // expandable segments.
      ASSERT_FALSE(expandable_file);
      ++fragmented_rows;
      EXPECT_GE(number_in(messages[i], "and ", "GiB is reserved by PyTorch but unallocated"), 2.0);
      EXPECT_TRUE(ran_in(ran, sc)) << sc.plan.micro_batch;
    }
    // The disagreeing rows are the ones counted above, by file and line.
    EXPECT_EQ(v.verdicts - v.verdicts_agree, v.verdicts_disagree.size());
  }
  EXPECT_EQ(llama_rows, 3);       // one per file
  EXPECT_EQ(fragmented_rows, 3);  // micro-batch 18, 19, 20 (h100-oom.csv)
}

// The same script on an H200 (data/validation-gpu/h200-*, 2026-11-30), predicted with the
// dgx-h200 preset, whose calibration is dgx-h100's carried over unchanged before any H200 was
// measured (the same GH100 die and clocks, faster HBM3e): nothing was fitted on these runs. With
// the round defaults it had until then, every run was predicted 30-48% too fast (MAPE 38.7% over
// 32 runs, docs/validate.md). Bounds as the H100's: the gpt2-xl FlashAttention rows each within
// 15% and their mean within 10% (measured -3.4% to +8.3%; mean 3.0% in the fused forms, 5.8% in
// the eager ones), the fused forms' peak memory within 10% (measured -1.7% to +9.7%), and every
// run that ran predicted to fit, the five that peaked above 80 GiB too (gpt2-xl micro-batch 24
// and 32 with FlashAttention, 8 and 12 with the standard kernel, Llama 12).
TEST(ValidateGpu, H200RunsHeldOutOfEveryFit) {
  EXPECT_EQ(check_gpu_runs("h200-runs.csv", "dgx-h200", 19, 10, true), 5);
  check_gpu_runs("h200-runs-eager.csv", "dgx-h200", 11, 5, false);
  check_gpu_runs("h200-runs-expandable.csv", "dgx-h200", 2, 1, true);
  check_gpu_runs("h200-runs-long.csv", "dgx-h200", 4, 0, true);
  check_gpu_runs("h200-runs-long-eager.csv", "dgx-h200", 4, 0, false);
}

// Llama 3.2 1B on the H200 at 4,096 to 65,536 tokens a sequence (h200-runs-long.csv, Megatron
// forms, FlashAttention), where attention's share of the step grows from about a sixth to most
// of it (56% of the 32K step's GPU time in its trace):
// - Memory: FlashAttention keeps no s x s scores (Dao et al. 2022, section 3: memory linear in
//   the sequence), so at the same tokens per micro-batch, 4 x 4,096, 2 x 8,192 and 1 x 16,384,
//   the measured peaks are one figure (47.83 GiB each) and so is commscope's count.
// - Time: the shipped dgx-h200 predicts the same four runs in PyTorch's eager forms
//   (h200-runs-long-eager.csv) each within 10% (measured -8.2% to +2.2%), and
//   `calibrate --from-trace` on the 32K run's trace alone (one sequence length) predicts the
//   other Megatron-form Llama runs, 4K to 64K tokens and 64K with full recompute, each within
//   10% (measured -4.9% to +6.7%): the attention term scales with s^2 as the runs do.
TEST(ValidateGpu, LongSequencesOnTheH200) {
  namespace fs = std::filesystem;
  const std::string data = COMMSCOPE_SOURCE_DIR "/data/validation-gpu/";
  auto same_tokens = [](const ValidationRow& r) {
    return r.scenario->plan.micro_batch * r.scenario->model.seq_length == 16384 &&
           r.scenario->plan.global_batch == r.scenario->plan.micro_batch;
  };
  std::vector<double> measured, counted;
  for (const char* file : {"h200-runs.csv", "h200-runs-long.csv"}) {
    for (const ValidationRow& r : validate_runs(h100_runs(file), "all").rows) {
      if (r.scenario->model.name != "llama3.2-1b" || !same_tokens(r)) continue;
      measured.push_back(r.measured_memory);
      counted.push_back(r.memory_per_gpu);
    }
  }
  ASSERT_EQ(measured.size(), 3u);
  for (std::size_t i = 1; i < 3; ++i) {
    EXPECT_NEAR(measured[i] / measured[0], 1.0, 1e-3);
    EXPECT_NEAR(counted[i] / counted[0], 1.0, 1e-9);
  }

  for (const ValidationRow& row :
       validate_runs(h100_runs("h200-runs-long-eager.csv"), "all").rows) {
    SCOPED_TRACE(row.line);
    EXPECT_GE(row.scenario->model.seq_length, 8192);
    EXPECT_LE(std::fabs(row.error), 0.10) << row.predicted_s << " vs " << row.measured_s;
  }

  const fs::path dir = scratch_dir("h200_long");
  const std::string system = (dir / "fitted.json").string();
  auto r = testing::run_shell(std::string(COMMSCOPE_BIN) + " calibrate --from-trace " + data +
                              "h200-llama3.2-1b-32k-trace.json.gz --system dgx-h200 --model " +
                              "llama3.2-1b --seq-length 32768 --nodes 1 --gpus 1 " +
                              "--micro-batch-size 1 --global-batch-size 1 --attention flash -o " +
                              system + " </dev/null");
  ASSERT_EQ(r.status, 0) << r.err;
  // Every Megatron-form Llama run but the traced one, with the fitted system.
  const fs::path csv = dir / "llama.csv";
  runs_on_fitted_system(csv, {"h200-runs.csv", "h200-runs-expandable.csv", "h200-runs-long.csv"},
                        "dgx-h200", system, [](const std::string& line) {
                          return line.rfind("llama3.2-1b,dgx-h200,", 0) == 0 &&
                                 line.find(",1,1,32768,") == std::string::npos;  // not the traced
                        });
  Validation v = validate_runs(prepared_csv(csv.string()), "all");
  ASSERT_EQ(v.rows.size(), 8u);  // 4K x 4, 2 x 4, 8, 12, 14; 8K x 2; 16K; 64K with recompute
  for (const ValidationRow& row : v.rows) {
    SCOPED_TRACE(row.line);
    EXPECT_LE(std::fabs(row.error), 0.10) << row.predicted_s << " vs " << row.measured_s;
  }
}

// The plans that ran out of memory on the H200 (h200-oom*.csv), against the verdicts, as the
// H100's: every plan commscope says does not fit ran out under either allocator setting (Llama
// micro-batch 16 allocating its fp32 logits, 31.31 GiB, at 140.0 GiB by commscope's count of the
// GPU's 139.8: a margin of 0.2 GiB; gpt2-xl FlashAttention micro-batch 44 and standard 14); the
// two it says fit that ran out (gpt2-xl FlashAttention micro-batch 40, Llama 14) did so under
// the default caching allocator with at least 10 GiB reserved but unallocated, and ran with
// expandable segments (h200-runs-expandable.csv), where the verdict agrees. Llama at 65,536
// tokens without recompute (h200-oom-long.csv, 140.0 GiB) ran out allocating its fp32 logits too.
TEST(ValidateGpu, H200OutOfMemoryPlans) {
  const auto expandable = h100_runs("h200-runs-expandable.csv");
  ASSERT_EQ(expandable.size(), 2u);
  const Validation ran = validate_runs(expandable, "all");
  int llama_rows = 0, fragmented_rows = 0, refused = 0;
  for (const char* file : {"h200-oom.csv", "h200-oom-expandable.csv", "h200-oom-long.csv"}) {
    SCOPED_TRACE(file);
    // Only the default allocator's run of the first plans left fragments (h200-oom.csv).
    const bool default_allocator = std::string(file) == "h200-oom.csv";
    const std::vector<std::string> messages = oom_messages(file);
    const auto prepared = h100_runs(file);
    ASSERT_EQ(prepared.size(), messages.size());
    ASSERT_EQ(prepared.size(), default_allocator                          ? 5u
                               : std::string(file) == "h200-oom-long.csv" ? 1u
                                                                          : 3u);
    Validation v = validate_runs(prepared, "all");
    for (std::size_t i = 0; i < v.rows.size(); ++i) {
      const ValidationRow& r = v.rows[i];
      const Scenario& sc = *r.scenario;
      SCOPED_TRACE(messages[i]);
      ASSERT_TRUE(r.out_of_memory);
      EXPECT_EQ(sc.system.name, "dgx-h200");
      EXPECT_NE(messages[i].find("total capacity of 139.80 GiB"), std::string::npos);
      if (sc.model.name == "llama3.2-1b" && !r.fits) {
        ++llama_rows;
        EXPECT_NEAR(number_in(messages[i], "Tried to allocate ", ""), fp32_logits_gib(sc), 0.006);
      }
      if (!r.fits) {
        ++refused;
        continue;  // the verdict agrees
      }
      ASSERT_TRUE(default_allocator);
      ++fragmented_rows;
      // (the script keeps PyTorch's first 300 characters, which end inside "unallocated")
      EXPECT_GE(number_in(messages[i], "and ", "GiB is reserved by PyTorch but"), 10.0);
      EXPECT_TRUE(ran_in(ran, sc)) << sc.plan.micro_batch;
    }
  }
  EXPECT_EQ(llama_rows, 3);       // micro-batch 16 in the first two files, 65,536 tokens
  EXPECT_EQ(fragmented_rows, 2);  // gpt2-xl 40, Llama 14 (h200-oom.csv)
  EXPECT_EQ(refused, 7);          // Llama 16, gpt2-xl 44, standard 14 in each; Llama 64K
}

// The H200's kernel sweep (h200-kernels.csv) bears the carried-over calibration out against the
// H100's (h100-kernels.csv), shape by shape: FlashAttention's efficiency read from it as
// dgx-h100's was from its own sweep (geometric mean over its 14 rows) is the carried figure within
// 5% (measured 0.3831 against 0.3851), the bf16 GEMMs of 0.2 TFLOP and more take the H100's time
// within 5% on average (geometric mean of the time ratios; the same die and clocks), and the
// memory-bound kernels run at the datasheet bandwidth ratio, 4.8 / 3.35 TB/s: the 1 GiB device
// copy within 5% (measured -3.4%), the element-wise add within 10% (measured +9.3%).
TEST(ValidateGpu, H200KernelSweepBearsTheCarriedCalibrationOut) {
  struct Row {
    double seconds = 0, gbs = 0;
  };
  auto read = [](const std::string& file) {
    std::map<std::string, Row> rows;  // kind,shape,dtype -> row
    std::ifstream in(COMMSCOPE_SOURCE_DIR "/data/validation-gpu/" + file);
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      std::vector<std::string> f;
      std::stringstream ss(line);
      for (std::string cell; std::getline(ss, cell, ',');) f.push_back(cell);
      if (f.size() < 4) continue;
      Row r;
      r.seconds = std::stod(f[3]);
      if (f.size() >= 6 && !f[5].empty()) r.gbs = std::stod(f[5]);
      rows[f[0] + "," + f[1] + "," + f[2]] = r;
    }
    return rows;
  };
  const auto h100 = read("h100-kernels.csv"), h200 = read("h200-kernels.csv");
  ASSERT_GE(h200.size(), 70u);
  auto sys = load_system("dgx-h200");
  ASSERT_TRUE(sys.ok()) << sys.error().message;
  const Calibration& c = sys->calibration;
  const double peak = sys->gpu.peak.bf16.value();
  auto seconds_at_one = [&](double flops) {
    return flops / (peak * matmul_efficiency(flops, 1.0, c.gemm_half_flops, c.gemm_steepness));
  };
  double flash_log = 0, gemm_log = 0;
  int flash_rows = 0, gemm_rows = 0;
  for (const auto& [key, row] : h200) {
    SCOPED_TRACE(key);
    const std::string kind = key.substr(0, key.find(','));
    const std::string shape = key.substr(kind.size() + 1, key.rfind(',') - kind.size() - 1);
    std::vector<double> dims;
    std::stringstream ss(shape);
    for (std::string d; std::getline(ss, d, 'x');) dims.push_back(std::stod(d));
    if (kind == "flash_fwd" || kind == "flash_fwd_bwd") {
      ASSERT_EQ(dims.size(), 4u);
      const double fwd = 4 * dims[0] * dims[1] * dims[2] * dims[2] * dims[3] / 2;
      double t = seconds_at_one(fwd);
      if (kind == "flash_fwd_bwd") t += seconds_at_one(2.5 * fwd);
      flash_log += std::log(t / row.seconds);
      ++flash_rows;
    }
    if (kind == "gemm" && key.substr(key.rfind(',') + 1) == "bfloat16" &&
        2 * dims[0] * dims[1] * dims[2] >= 2e11) {
      ASSERT_EQ(h100.count(key), 1u);
      gemm_log += std::log(row.seconds / h100.at(key).seconds);
      ++gemm_rows;
    }
  }
  EXPECT_EQ(flash_rows, 14);
  EXPECT_NEAR(std::exp(flash_log / flash_rows) / c.flash_attention_efficiency, 1.0, 0.05);
  EXPECT_GE(gemm_rows, 8);
  EXPECT_NEAR(std::exp(gemm_log / gemm_rows), 1.0, 0.05);
  const double datasheet = sys->gpu.memory_bandwidth.value() / 3350e9;
  const std::string copy = "copy,536870912,bfloat16", add = "add,536870912,bfloat16";
  EXPECT_NEAR(h200.at(copy).gbs / h100.at(copy).gbs / datasheet, 1.0, 0.05);
  EXPECT_NEAR(h200.at(add).gbs / h100.at(add).gbs / datasheet, 1.0, 0.10);
}

// The `outcome` column: `oom` rows carry no time and no memory, enter no error summary, and are
// counted with every row that ran in the memory verdicts (a run that ran must fit, one that ran
// out must not); a bad value, or a time on an `oom` row, is a one-line error.
TEST(Validate, OutcomeColumnAndMemoryVerdicts) {
  const std::filesystem::path dir = scratch_dir("outcome");
  auto write = [&](const char* name, const std::string& text) { return write_in(dir, name, text); };
  // gpt2-xl on one H100, FlashAttention: micro-batch 8 fits (44.8 GiB), 24 does not (87.9).
  const auto prepared = prepared_csv(
      write("ok.csv",
            "model,system,gpus,micro_batch,attention,measured_s,outcome\n"
            "gpt2-xl,dgx-h100,1,8,flash,0.25,ran\n"      // ran and fits: agrees
            "gpt2-xl,dgx-h100,1,24,flash,,oom\n"         // ran out, does not fit: agrees
            "gpt2-xl,dgx-h100,1,8,flash,,oom\n"          // ran out, fits: disagrees
            "gpt2-xl,dgx-h100,1,24,flash,0.75,ran\n"));  // ran, does not fit: disagrees
  ASSERT_EQ(prepared.size(), 4u);
  Validation v = validate_runs(prepared, "all");
  EXPECT_EQ(v.verdicts, 4u);
  EXPECT_EQ(v.verdicts_agree, 2u);
  EXPECT_EQ(v.verdicts_disagree, (std::vector<std::string>{"ok.csv:4", "ok.csv:5"}));
  // Only the two rows that ran have an error.
  for (const auto& s : v.summary) {
    if (s.split == "all" && s.file == "ok.csv") {
      EXPECT_EQ(s.errors.rows, 2u);
    }
  }
  const std::string text = render_validation(v, Format::table, "x", false);
  EXPECT_NE(text.find("memory verdicts: 2 of 4 agree"), std::string::npos) << text;
  EXPECT_NE(text.find("not: ok.csv:4, ok.csv:5"), std::string::npos) << text;
  auto j = nlohmann::json::parse(render_validation(v, Format::json, "x", false));
  EXPECT_EQ(j["memory_verdicts"]["agree"], 2);
  // The text names at most 20 disagreeing rows.
  Validation many = v;
  many.verdicts_disagree.assign(25, "ok.csv:4");
  EXPECT_NE(render_validation(many, Format::table, "x", true).find("ok.csv:4 and 5 more"),
            std::string::npos);
  EXPECT_EQ(j["rows"][1]["outcome"], "oom");
  EXPECT_FALSE(j["rows"][1].contains("error"));
  // No time was measured: null, as the table's "-" (it was 0.0); each row names its system.
  EXPECT_TRUE(j["rows"][1]["measured_s"].is_null()) << j["rows"][1];
  EXPECT_EQ(j["rows"][0]["measured_s"], 0.25);
  EXPECT_EQ(j["rows"][1]["system"], "dgx-h100");

  for (const auto& [csv, expected] : std::vector<std::pair<std::string, std::string>>{
           {"model,measured_s,outcome\ngpt2-xl,1,crashed\n",
            "line 2: column 'outcome': expected ran or oom (out of GPU memory), got 'crashed'"},
           {"model,measured_s,outcome\ngpt2-xl,1,oom\n",
            "line 2: column 'outcome': expected no measured_s and no measured_memory_gib"},
           {"model,measured_s,outcome\ngpt2-xl,,ran\n", "line 2: column 'measured_s'"}}) {
    auto r = read_measured_csv(write("bad.csv", csv.c_str()), "x");
    ASSERT_FALSE(r.ok()) << csv;
    EXPECT_NE(r.error().message.find(expected), std::string::npos) << r.error().message;
  }
}

// Rows that used to be accepted: a CSV without a model column ran every row as the default
// model; measured_s = inf (and huge counts that wrapped around int) were taken as measured.
TEST(Validate, RefusesMissingModelNonFiniteTimesAndFifos) {
  namespace fs = std::filesystem;
  const fs::path dir = scratch_dir("refusals");
  auto write = [&](const char* name, const std::string& text) { return write_in(dir, name, text); };
  auto no_model = read_measured_csv(write("nomodel.csv", "nodes,tp,measured_s\n4,1,0.25\n"), "x");
  ASSERT_FALSE(no_model.ok());
  EXPECT_NE(no_model.error().message.find("line 1: expected a column 'model'"), std::string::npos)
      << no_model.error().message;
  auto blank = read_measured_csv(write("blank.csv", "model,measured_s\n,0.25\n"), "x");
  ASSERT_FALSE(blank.ok());
  EXPECT_NE(blank.error().message.find("line 2: column 'model'"), std::string::npos);
  // vTrain rows: counts are whole (64.9 GPUs was read as 64) and the heads divide hidden (33
  // heads of hidden 3072 floored head_dim to 93); found by probing, 2026-11-30.
  const std::string vtrain_header =
      "Parameters (billion),# GPUs,global batch,micro batch,hidden size,attention heads,# layers,"
      "sequence length,tensor parallelism,data parallelism,pipeline parallelism,iteration time "
      "(ms)\n";
  for (const auto& [row, want] : std::vector<std::pair<std::string, std::string>>{
           {"3.6,64.9,512,8,3072,32,30,2048,1,64,1,3566.5",
            "column '# GPUs': expected a positive finite number (a whole number)"},
           {"3.6,64,512,8,3072,33,30,2048,1,64,1,3566.5",
            "column 'attention heads': expected a divisor of the hidden size (3072), got 33"}}) {
    auto r = read_measured_csv(write("vt.csv", vtrain_header + row + "\n"), "vtrain-a100");
    ASSERT_FALSE(r.ok()) << row;
    EXPECT_NE(r.error().message.find(want), std::string::npos) << r.error().message;
  }
  auto fine = read_measured_csv(
      write("vt.csv", vtrain_header + "3.6,64,512,8,3072,32,30,2048,1,64,1,3566.5\n"),
      "vtrain-a100");
  EXPECT_TRUE(fine.ok()) << fine.error().message;
  // 1e-300 s gave a 300-digit error, 1e300 s an error of -100% (found by probing, 2026-11-30).
  for (const char* t : {"inf", "-inf", "nan", "1e999", "0", "-1", "1e-300", "1e300"}) {
    SCOPED_TRACE(t);
    auto r = read_measured_csv(
        write("inf.csv",
              (std::string("model,measured_s\ngpt2-large,0.5\ngpt2-large,") + t + "\n").c_str()),
        "x");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find(
                  "line 3: column 'measured_s': expected a number of seconds from 1e-6 to 1e6"),
              std::string::npos)
        << r.error().message;
  }
  auto wrap =
      read_measured_csv(write("wrap.csv", "model,gpus,measured_s\ngpt2-large,4294967300,1\n"), "x");
  ASSERT_FALSE(wrap.ok());
  EXPECT_NE(wrap.error().message.find("column 'gpus'"), std::string::npos);
  auto vtrain_inf = read_measured_csv(
      write("vinf.csv",
            "# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,"
            "tensor parallelism,data parallelism,pipeline parallelism,iteration time (ms)\n"
            "8,8,1,1024,16,24,1024,1,8,1,inf\n"),
      "vtrain-a100");
  ASSERT_FALSE(vtrain_inf.ok());
  EXPECT_NE(vtrain_inf.error().message.find("line 2: column 'iteration time (ms)'"),
            std::string::npos)
      << vtrain_inf.error().message;
  // A FIFO would block the reader forever: refused before it is opened.
  const fs::path fifo = dir / "pipe.csv";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto from_fifo = read_measured_csv(fifo.string(), "x");
  ASSERT_FALSE(from_fifo.ok());
  EXPECT_NE(from_fifo.error().message.find("not a regular file (a FIFO, socket or device)"),
            std::string::npos)
      << from_fifo.error().message;
}

// validate's analysis in the library: each row's error is predicted/measured - 1 of that
// run, the odd split keeps rows 1, 3, 5..., and the summaries are summarize() of those errors.
TEST(Validate, ValidateRunsRowsAndSummaries) {
  auto runs = read_measured_csv(kVtrain + "ground_truth_single.csv", "vtrain-a100");
  ASSERT_TRUE(runs.ok()) << runs.error().message;
  std::vector<std::string> skipped;
  auto prepared = *prepare_runs(*runs, skipped);
  ASSERT_GT(prepared.size(), 4u);
  Validation v = validate_runs(prepared, "odd");
  std::vector<double> errors;
  for (const auto& r : prepared)
    if (r.index % 2 == 1)
      errors.push_back(predicted_time(r, r.workload.scenario.system.calibration) / r.measured_s -
                       1.0);
  ASSERT_EQ(v.rows.size(), errors.size());
  for (std::size_t i = 0; i < errors.size(); ++i) EXPECT_DOUBLE_EQ(v.rows[i].error, errors[i]);
  const ErrorSummary want = summarize(errors);
  bool found = false;
  for (const auto& sr : v.summary)
    if (sr.file == "(all files)") {
      found = true;
      EXPECT_EQ(sr.errors.rows, want.rows);
      EXPECT_DOUBLE_EQ(sr.errors.mape, want.mape);
      EXPECT_DOUBLE_EQ(sr.errors.max, want.max);
    }
  EXPECT_TRUE(found);
  const std::string csv = render_validation(v, Format::csv, "vtrain-a100", false);
  EXPECT_EQ(static_cast<std::size_t>(std::count(csv.begin(), csv.end(), '\n')), errors.size() + 1);
  // Found by probing, 2026-11-30: --rows odd labelled its subset "all" too; --summary-only left
  // the JSON's rows in and gave CSV no summary; a summary of no rows said 0.0 in JSON.
  for (const auto& sr : v.summary) EXPECT_EQ(sr.split, "odd") << sr.file;
  const auto j = nlohmann::json::parse(render_validation(v, Format::json, "vtrain-a100", true));
  EXPECT_TRUE(j["rows"].empty());
  EXPECT_FALSE(j["summary"].empty());
  const std::string sum_csv = render_validation(v, Format::csv, "vtrain-a100", true);
  // CSV holds numbers (percent) under *_pct names, and the rows' header is fixed whatever the
  // input (the memory and outcome columns were added only where the input had them, and the
  // errors were "+1.5%" strings, until 2026-12-02).
  EXPECT_EQ(sum_csv.rfind("file,group,rows,n,mape_pct,median_pct,max_pct,bias_pct\n", 0), 0u)
      << sum_csv;
  EXPECT_EQ(csv.rfind("file,line,id,split,group,model,gpus,tp,pp,dp,mbs,gbs,measured_s,"
                      "predicted_s,error_pct,mem_gib,measured_mem_gib,mem_error_pct,outcome,fits,"
                      "assumed\n",
                      0),
            0u)
      << csv.substr(0, 300);
  EXPECT_NE(csv.find(fmt::format(",{:.4f},{:.2f},", v.rows[0].predicted_s, 100 * v.rows[0].error)),
            std::string::npos)
      << csv.substr(0, 600);
  EXPECT_EQ(csv.find('%'), std::string::npos);
  Validation none = validate_runs({}, "all");
  none.summary.push_back(ValidationSummary{});
  const auto jn = nlohmann::json::parse(render_validation(none, Format::json, "x", false));
  EXPECT_TRUE(jn["summary"][0]["mape"].is_null());
}

// The corpus's rows count in "(all files)" beside another file's (they were left out of it, found
// by probing, 2026-11-30).
TEST(Validate, AllFilesHoldEveryFile) {
  std::vector<std::string> skipped;
  auto corpus = read_measured_csv(COMMSCOPE_SOURCE_DIR "/data/validation-comm/training.csv",
                                  "vtrain-a100", nullptr);
  auto single = read_measured_csv(kVtrain + "ground_truth_single.csv", "vtrain-a100");
  ASSERT_TRUE(corpus.ok() && single.ok());
  std::vector<MeasuredRun> all = *corpus;
  all.insert(all.end(), single->begin(), single->end());
  auto prepared = *prepare_runs(all, skipped);
  Validation v = validate_runs(prepared, "all");
  std::size_t timed = 0;
  for (const auto& r : v.rows) timed += r.out_of_memory ? 0 : 1;
  bool found = false;
  for (const auto& sr : v.summary)
    if (sr.file == "(all files)") {
      found = true;
      EXPECT_EQ(sr.errors.rows, timed);
    }
  EXPECT_TRUE(found);
}

// calibrate's output: the fitted values in the system files' units, one "fitted by" note.
TEST(Validate, WithCalibrationReplacesTheFitNote) {
  nlohmann::json sys = {{"name", "x"},
                        {"sources", {"vendor sheet", "calibration fitted by an earlier run"}}};
  Calibration c;
  c.gemm_half_flops = 2.5e12;
  c.kernel_overhead = Seconds(4e-6);
  nlohmann::json j = with_calibration(sys, c, "calibration fitted by this run");
  EXPECT_DOUBLE_EQ(j["calibration"]["gemm_half_gflops"].get<double>(), 2500.0);
  EXPECT_NEAR(j["calibration"]["kernel_overhead_us"].get<double>(), 4.0, 1e-9);
  EXPECT_EQ(j["sources"], nlohmann::json({"vendor sheet", "calibration fitted by this run"}));
  EXPECT_EQ(j["name"], "x");
  // The shipped presets spell their fit's note "calibration: ..." (it was kept beside the new
  // one), and the FlashAttention figure's note goes where the figure does (found by probing,
  // 2026-11-30).
  sys["sources"] = {"vendor sheet", "calibration: compute terms only, fitted on ...",
                    "calibration.flash_attention_efficiency 0.3851 (...)"};
  EXPECT_EQ(with_calibration(sys, c, "new")["sources"], nlohmann::json({"vendor sheet", "new"}));
  c.flash_attention_efficiency = 0.3851;
  EXPECT_EQ(with_calibration(sys, c, "new")["sources"],
            nlohmann::json(
                {"vendor sheet", "calibration.flash_attention_efficiency 0.3851 (...)", "new"}));
}

// A calibration inside the compute-only fit's bounds, and every 48th vTrain single-node run
// timed by it: what the fits must recover.
Calibration known_calibration() {
  Calibration truth;
  truth.gemm_efficiency = 0.7;
  truth.gemm_half_flops = 8e9;
  truth.attention_efficiency = 0.4;
  truth.memory_efficiency = 0.6;
  truth.kernel_overhead = units::us(6);
  return truth;
}
std::vector<PreparedRun> runs_timed_by(const Calibration& truth) {
  auto runs = read_measured_csv(kVtrain + "ground_truth_single.csv", "vtrain-a100");
  EXPECT_TRUE(runs.ok());
  if (!runs.ok()) return {};
  std::vector<MeasuredRun> some;
  for (std::size_t i = 0; i < runs->size(); i += 48) some.push_back((*runs)[i]);
  std::vector<std::string> skipped;
  std::vector<PreparedRun> prepared = *prepare_runs(some, skipped);
  for (auto& p : prepared) p.measured_s = predicted_time(p, truth);
  return prepared;
}

// The fit recovers times generated with a known calibration, starting from the defaults.
TEST(Validate, FitRecoversAKnownCalibration) {
  const Calibration truth = known_calibration();
  std::vector<PreparedRun> prepared = runs_timed_by(truth);
  ASSERT_FALSE(prepared.empty());
  std::vector<const PreparedRun*> ptrs;
  for (const auto& p : prepared) ptrs.push_back(&p);
  Calibration fitted = fit_calibration(ptrs, Calibration{}, 1500);
  std::vector<double> errors;
  for (const auto* p : ptrs) errors.push_back(predicted_time(*p, fitted) / p->measured_s - 1);
  EXPECT_LT(summarize(errors).mape, 0.01);
}

// The compute-only fit (issue 15) recovers compute terms generated inside its bounds, never
// moves the network and host terms, stays within its bounds, and is reproducible.
TEST(Validate, ComputeOnlyFitIsBoundedAndKeepsNetwork) {
  const Calibration truth = known_calibration();
  std::vector<PreparedRun> prepared = runs_timed_by(truth);
  ASSERT_FALSE(prepared.empty());
  std::vector<const PreparedRun*> ptrs;
  for (const auto& p : prepared) ptrs.push_back(&p);
  Calibration start;
  start.intra_node_efficiency = 0.6;
  start.iteration_overhead = Seconds(0.002);
  Calibration fitted = fit_compute_calibration(ptrs, start, 1500);
  EXPECT_EQ(fitted.intra_node_efficiency, 0.6);
  EXPECT_EQ(fitted.intra_node_latency.value(), start.intra_node_latency.value());
  EXPECT_EQ(fitted.iteration_overhead.value(), 0.002);
  EXPECT_EQ(fitted.microbatch_overhead.value(), start.microbatch_overhead.value());
  const ComputeFitBounds b;
  for (double e : {fitted.gemm_efficiency, fitted.attention_efficiency, fitted.memory_efficiency})
    EXPECT_LE(e, b.efficiency_max);
  EXPECT_LE(fitted.kernel_overhead.value(), b.kernel_overhead_max_s);
  EXPECT_GE(fitted.kernel_overhead.value(), b.kernel_overhead_min_s);
  std::vector<double> errors;
  for (const auto* p : ptrs) errors.push_back(predicted_time(*p, fitted) / p->measured_s - 1);
  EXPECT_LT(summarize(errors).mape, 0.02);
  Calibration again = fit_compute_calibration(ptrs, start, 1500);
  EXPECT_EQ(again.gemm_efficiency, fitted.gemm_efficiency);
  EXPECT_EQ(again.kernel_overhead.value(), fitted.kernel_overhead.value());
  // A truth outside the bounds (efficiency 0.99) is not reached: the fit stops at 0.9.
  Calibration fast = truth;
  fast.gemm_efficiency = 0.99;
  fast.attention_efficiency = 0.99;
  for (auto& p : prepared) p.measured_s = predicted_time(p, fast);
  Calibration capped = fit_compute_calibration(ptrs, start, 600);
  EXPECT_LE(capped.gemm_efficiency, b.efficiency_max);
  EXPECT_LE(capped.attention_efficiency, b.efficiency_max);
  // ... unless it is where the fit starts (--start preset): the result is never worse than the
  // start (a start outside the bounds was clamped where the search began and could end worse,
  // found by probing, 2026-11-30).
  Calibration from_truth = fit_compute_calibration(ptrs, fast, 30);
  std::vector<double> exact;
  for (const auto* p : ptrs) exact.push_back(predicted_time(*p, from_truth) / p->measured_s - 1);
  EXPECT_LT(summarize(exact).mape, 1e-12);
}

// The shipped vtrain-a100 profile was fitted on the even rows of both files; on the odd
// rows, which the fit never saw, the error stays within the issue's 10% target.
TEST(Validate, HeldOutErrorOnVtrain) {
  for (const char* file : {"ground_truth_single.csv", "ground_truth_multi.csv"}) {
    SCOPED_TRACE(file);
    auto runs = read_measured_csv(kVtrain + file, "vtrain-a100");
    ASSERT_TRUE(runs.ok());
    std::vector<std::string> skipped;
    auto prepared = *prepare_runs(*runs, skipped);
    EXPECT_TRUE(skipped.empty()) << skipped.front();
    std::vector<double> errors;
    for (const auto& p : prepared)
      if (in_split(p, "odd"))
        errors.push_back(predicted_time(p, p.workload.scenario.system.calibration) / p.measured_s -
                         1);
    ErrorSummary s = summarize(errors);
    EXPECT_LE(s.mape, 0.10);
    EXPECT_GT(s.rows, 50u);
    // Single node: issue 11's bound, 7.0% as the issue states it (one decimal); 7.04% with the
    // calibration refined under NCCL's collective model, 7.12% before that refit.
    if (std::string(file) == "ground_truth_single.csv") {
      EXPECT_LT(s.mape, 0.0705);
    }
    // Multi-node: issue 11's bound (8.6%, the alpha-beta model's); 7.8% with DeepSpeed's
    // partitioned pipeline tensors, 8.9% without.
    if (std::string(file) == "ground_truth_multi.csv") {
      EXPECT_LE(s.mape, 0.086);
      for (const auto& p : prepared) EXPECT_TRUE(p.workload.scenario.plan.pipe_partitioned);
    }
  }
}

// --- the communication-bound validation corpus (data/validation-comm/training.csv) ---

const std::string kCorpus = COMMSCOPE_SOURCE_DIR "/data/validation-comm/training.csv";

// The corpus's data rows, counted here without the reader: (id, split, cells by column name).
std::vector<std::map<std::string, std::string>> corpus_rows() {
  std::ifstream f(kCorpus);
  std::string line;
  std::getline(f, line);
  auto cells = [](const std::string& l) {
    std::vector<std::string> out(1);
    bool q = false;
    for (char c : l)
      if (c == '"')
        q = !q;
      else if (c == ',' && !q)
        out.emplace_back();
      else
        out.back() += c;
    return out;
  };
  const auto header = cells(line);
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    auto c = cells(line);
    std::map<std::string, std::string> m;
    for (std::size_t i = 0; i < header.size() && i < c.size(); ++i) m[header[i]] = c[i];
    rows.push_back(m);
  }
  return rows;
}

// Every row of the shipped corpus is either a run or counted under a reason; every run builds
// a scenario; tokens/s per GPU becomes global_batch x seq / (value x gpus).
TEST(ValidateCorpus, ReadsTheShippedCorpus) {
  const auto rows = corpus_rows();
  ASSERT_EQ(rows.size(), 141u);
  SkipCounts skips;
  auto runs = read_measured_csv(kCorpus, "vtrain-a100", &skips);
  ASSERT_TRUE(runs.ok()) << runs.error().message;
  int skipped = 0;
  for (const auto& [reason, n] : skips) {
    EXPECT_FALSE(reason.empty());
    skipped += n;
  }
  EXPECT_EQ(runs->size() + static_cast<std::size_t>(skipped), rows.size());
  EXPECT_GT(runs->size(), 0u);
  // DeepSeek-V3's 61 layers on PP 8 x VP 4 (t121), whose recipe has no layout for it; t120 and
  // t132 state their recipes' layouts.
  EXPECT_EQ(skips["layers not divisible by pp x vp (no layout stated)"], 1);
  // The 128- and 256-GPU GB200 rows state the launcher's 64 GPUs per NVLink domain.
  EXPECT_EQ(skips.count("gpus not a multiple of gb200-nvl72's 72 per node"), 0u);
  // torchtitan's H100s (96 GB of HBM2e at 500 W) are not dgx-h100's part.
  EXPECT_EQ(skips["no system preset for gpu 'H100 (96GB HBM2e, 500W power limit)'"], 6);
  // The rows the reader kept are exactly those that state seq_length, micro_batch and
  // global_batch, and tp and pp for a 3d row, on a GPU with a preset, in file order, with their
  // split.
  std::size_t k = 0;
  for (const auto& row : rows) {
    const bool three_d = row.at("strategy") == "3d" || row.at("strategy") == "megatron";
    // gb200-nvl72's nodes hold 72 GPUs: 128 or 256 GB200s lie on them as 64 per node where
    // the row's gpus_per_node says so (NVIDIA's launcher's Slurm --segment).
    const int gpus = row.at("gpus").empty() ? 0 : std::stoi(row.at("gpus"));
    const int per_node = row.at("gpus_per_node").empty() ? 72 : std::stoi(row.at("gpus_per_node"));
    const bool laid_out = (row.at("gpu") != "GB200" || gpus <= 72 || gpus % per_node == 0) &&
                          // DeepSeek-V3's 61 layers on PP x VP of 16 or 32, no layout stated
                          !(row.at("model") == "DeepSeek-V3" && row.at("pipeline_layout").empty());
    const bool preset = row.at("gpu").find("HBM2e") == std::string::npos;
    const bool complete = preset && !row.at("seq_length").empty() &&
                          !row.at("micro_batch").empty() && !row.at("global_batch").empty() &&
                          (!three_d || (!row.at("tp").empty() && !row.at("pp").empty())) &&
                          laid_out;
    if (!complete) continue;
    ASSERT_LT(k, runs->size());
    EXPECT_EQ((*runs)[k].id, row.at("id"));
    EXPECT_EQ((*runs)[k].split, row.at("split"));
    ++k;
  }
  EXPECT_EQ(k, runs->size());
  std::vector<std::string> why;
  auto prepared = *prepare_runs(*runs, why);
  EXPECT_EQ(prepared.size(), runs->size()) << (why.empty() ? "" : why.front());

  // Two rows by hand. t001: 125m, 8 A100-40GB, gbs 624, seq 2048, 136334 tokens/s/GPU.
  const MeasuredRun& a = runs->front();
  EXPECT_EQ(a.id, "t001");
  EXPECT_DOUBLE_EQ(a.measured_s, 624.0 * 2048 / (136334.0 * 8));
  EXPECT_EQ(a.input.system, "dgx-a100-40gb");
  EXPECT_EQ(*a.input.plan.zero, 3);
  EXPECT_EQ(a.model.hidden, 768);
  EXPECT_EQ(a.model.vocab, 50368);
  EXPECT_EQ(a.group, "fsdp/fsdp_full_shard");
  // t057: MPT-70b, 64 H100-80GB, gbs 2048 x 2048 tokens at 1039 tokens/s/GPU, full recompute.
  auto b = std::find_if(runs->begin(), runs->end(), [](auto& r) { return r.id == "t057"; });
  ASSERT_NE(b, runs->end());
  EXPECT_DOUBLE_EQ(b->measured_s, 2048.0 * 2048 / (1039.0 * 64));
  EXPECT_EQ(b->input.system, "dgx-h100");
  EXPECT_EQ(*b->input.plan.recompute, Recompute::full);
  EXPECT_EQ(b->split, "heldout");
}

// Every filled micro-batch of Narayanan et al.'s rows has its source: Table 2 states it in the
// row; Table 1 does not, and its rows must cite the authors' script for that table, with the
// same micro-batch in the quoted case (no row filled without a citation).
// What a corpus file states is read or refused, never read past (found by probing, 2026-12-02):
// a recompute that is no policy was read as none, an unknown column ignored, an id given twice
// read as another run. Each is one line naming the line and column.
TEST(ValidateCorpus, CellsColumnsAndIdsAreReadOrRefused) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(testing::scratch()) / "corpus_cells";
  fs::create_directories(dir);
  const std::string head =
      "id,source_id,model,parameters_b,layers,hidden,heads,seq_length,vocab,gpus,gpus_per_node,"
      "gpu,interconnect,framework,strategy,tp,pp,dp,micro_batch,global_batch,precision,"
      "recompute,metric,value,split,notes";
  auto row = [](const std::string& id, const std::string& recompute) {
    return id + ",s,m,1,24,2048,16,2048,,16,,A100-80GB,,deepspeed,zero1,1,1,16,4,64,," + recompute +
           ",iteration_time_s,1.5,fit,";
  };
  struct Case {
    std::string text, error;
  };
  for (const Case& c : {
           Case{head + "\n" + row("x1", "full") + "\n" + row("x2", "bogus") + "\n",
                "line 3: column 'recompute': expected none, selective, full, op, unknown or "
                "empty, got 'bogus'"},
           Case{head + ",vp,zzz\n" + row("x1", "full") + ",,\n",
                "line 1: unknown column 'zzz'; expected the corpus's columns (id, ..., notes) "
                "and after them any of cp, vp, ep,"},
           Case{head + "\n" + row("x1", "full") + "\n" + row("x1", "none") + "\n",
                "line 3: column 'id': expected each row's id once, got 'x1' again (line 2)"},
       }) {
    SCOPED_TRACE(c.text);
    std::ofstream(dir / "c.csv") << c.text;
    auto runs = read_measured_csv((dir / "c.csv").string(), "vtrain-a100");
    ASSERT_FALSE(runs.ok());
    EXPECT_EQ(runs.error().message.rfind((dir / "c.csv").string() + ": " + c.error, 0), 0u)
        << runs.error().message;
  }
  // Each accepted spelling reads as its policy; unknown and empty as none.
  std::ofstream(dir / "ok.csv") << head << "\n"
                                << row("a", "full") << "\n"
                                << row("b", "unknown") << "\n"
                                << row("c", "") << "\n"
                                << row("d", "selective") << "\n";
  auto ok = read_measured_csv((dir / "ok.csv").string(), "vtrain-a100");
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  ASSERT_EQ(ok->size(), 4u);
  EXPECT_EQ((*ok)[0].input.plan.recompute, Recompute::full);
  EXPECT_EQ((*ok)[1].input.plan.recompute, Recompute::none);
  EXPECT_EQ((*ok)[2].input.plan.recompute, Recompute::none);
  EXPECT_EQ((*ok)[3].input.plan.recompute, Recompute::selective);
}

TEST(ValidateCorpus, MegatronMicroBatchesAreCited) {
  int table1 = 0;
  for (const auto& row : corpus_rows()) {
    if (row.at("source_id") != "narayanan_sc21" || row.at("micro_batch").empty()) continue;
    const std::string& notes = row.at("notes");
    if (notes.rfind("Table 2 row", 0) == 0) continue;
    ASSERT_EQ(notes.rfind("Table 1 row", 0), 0u) << row.at("id");
    ++table1;
    EXPECT_NE(notes.find("examples/sc21/run_table_1.sh"), std::string::npos) << row.at("id");
    EXPECT_NE(notes.find(" MBS=" + row.at("micro_batch") + " "), std::string::npos) << row.at("id");
    EXPECT_NE(notes.find(" GBS=" + row.at("global_batch") + " "), std::string::npos)
        << row.at("id");
    EXPECT_NE(notes.find(" TP=" + row.at("tp") + " "), std::string::npos) << row.at("id");
    EXPECT_EQ(row.at("recompute"), "full") << row.at("id");
  }
  EXPECT_GT(table1, 0);
}

TEST(ValidateCorpus, MetricConversionsAndSkipReasons) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(testing::scratch()) / "corpus";
  fs::create_directories(dir);
  const std::string head =
      "id,source_id,model,parameters_b,layers,hidden,heads,seq_length,vocab,gpus,gpus_per_node,"
      "gpu,interconnect,framework,strategy,tp,pp,dp,micro_batch,global_batch,precision,"
      "recompute,metric,value,split,notes\n";
  {
    std::ofstream f(dir / "c.csv");
    f << head
      << "x1,s,GPT-7.5B,7.5,36,4096,32,2048,51200,128,8,A100-SXM4-80GB,ib,megatron,3d,4,1,32,"
         "1,512,fp16,unknown,tflops_per_gpu,142,fit,\"a, quoted note\"\n"
      << "x2,s,m,1,24,2048,16,2048,,16,,A100-80GB,,deepspeed,zero1,1,1,16,4,64,,,"
         "iteration_time_s,1.5,heldout,\n"
      << "x3,s,m,1,24,2048,16,2048,,16,,H100-80GB,,deepspeed,zero2,1,1,16,4,64,,,"
         "samples_per_s,32,heldout,\n"
      << "x4,s,m,1,24,2048,16,2048,,16,,V100-32GB,,fsdp,,1,1,16,4,64,,,"
         "samples_per_s,32,fit,\n"
      << "x5,s,m,1,24,2048,16,2048,,16,,V100-32GB,,fsdp,,1,1,16,4,64,,,"
         "samples_per_s,32,fit,\n"
      << "x6,s,m,1,24,2048,16,2048,,16,,A100-40GB,,fsdp,,1,1,16,4,64,,,"
         "furlongs,3,fit,\n";
  }
  SkipCounts skips;
  auto runs = read_measured_csv((dir / "c.csv").string(), "vtrain-a100", &skips);
  ASSERT_TRUE(runs.ok()) << runs.error().message;
  ASSERT_EQ(runs->size(), 3u);
  EXPECT_EQ(skips.size(), 2u);
  EXPECT_EQ(skips["no system preset for gpu 'V100-32GB'"], 2);
  EXPECT_EQ(skips["metric 'furlongs' not known"], 1);
  // tflops_per_gpu: the source's FLOP count (Narayanan et al. eq. (3), which counts the
  // recompute forward) / (value x 1e12 x gpus): the exact inverse of how the value was made,
  // so about 4/3 of the time the model FLOPs without recompute (describe's count) would give.
  const MeasuredRun& t = (*runs)[0];
  const double B = 512, s = 2048, l = 36, h = 4096, V = 51200;
  const double eq3 = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  EXPECT_NEAR(t.measured_s / (eq3 / (142e12 * 128)), 1.0, 1e-12);
  auto sc = resolve_run(t);
  ASSERT_TRUE(sc.ok()) << sc.error().message;
  const double model_time = iteration_flops(build_workload(*sc)).model / (142e12 * 128);
  EXPECT_GT(t.measured_s / model_time, 1.25);
  EXPECT_LT(t.measured_s / model_time, 4.0 / 3 + 0.01);
  EXPECT_EQ(*t.input.plan.tp, 4);
  EXPECT_EQ(*t.input.plan.precision, Precision::fp16);
  EXPECT_EQ(*t.input.plan.recompute, Recompute::none);  // "unknown" is none
  // iteration_time_s is the time; samples_per_s is global_batch / value; empty vocab 50257.
  EXPECT_DOUBLE_EQ((*runs)[1].measured_s, 1.5);
  EXPECT_EQ((*runs)[1].model.vocab, 50257);
  EXPECT_EQ(*(*runs)[1].input.plan.zero, 1);
  EXPECT_EQ(*(*runs)[1].input.plan.precision, Precision::bf16);
  EXPECT_DOUBLE_EQ((*runs)[2].measured_s, 64.0 / 32);
  EXPECT_EQ(*(*runs)[2].input.plan.zero, 2);
  EXPECT_EQ((*runs)[2].input.system, "dgx-h100");

  // A split other than fit|heldout, or a malformed count, is an error naming the column.
  {
    std::ofstream f(dir / "bad.csv");
    f << head
      << "x1,s,m,1,24,2048,16,2048,,16,,A100-80GB,,fsdp,,1,1,16,4,64,,,"
         "samples_per_s,32,train,\n";
  }
  auto bad = read_measured_csv((dir / "bad.csv").string(), "vtrain-a100");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("column 'split': expected fit or heldout, got 'train'"),
            std::string::npos)
      << bad.error().message;
  {
    std::ofstream f(dir / "bad2.csv");
    f << head
      << "x1,s,m,1,24,2048,16,2048,,16,,A100-80GB,,fsdp,,1,1,16,-4,64,,,"
         "samples_per_s,32,fit,\n";
  }
  bad = read_measured_csv((dir / "bad2.csv").string(), "vtrain-a100");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("line 2: column 'micro_batch'"), std::string::npos)
      << bad.error().message;
}

// gpus_per_node below the preset's node is the job's share of each node: NVIDIA's 128- and
// 256-GPU GB200 runs ran in Slurm segments of 16 four-GPU trays, 64 GPUs of each 72-GPU NVL72
// rack (the rows' assumed cells cite the launchers), so they are 2 or 4 nodes of 64; a row
// stating more than the node holds, or a count its gpus_per_node does not divide, is skipped
// with its reason; a full node's count changes nothing.
TEST(ValidateCorpus, GpusPerNodeIsTheJobsShareOfANode) {
  auto runs = read_measured_csv(kCorpus, "vtrain-a100");
  ASSERT_TRUE(runs.ok()) << runs.error().message;
  auto find = [&](const char* id) -> const MeasuredRun* {
    auto it = std::find_if(runs->begin(), runs->end(), [&](auto& r) { return r.id == id; });
    return it == runs->end() ? nullptr : &*it;
  };
  for (auto [id, nodes] : {std::pair{"t119", 4}, {"t122", 2}, {"t125", 2}}) {
    SCOPED_TRACE(id);
    const MeasuredRun* r = find(id);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->input.system, "gb200-nvl72");
    ASSERT_TRUE(r->input.plan.nodes.has_value());
    EXPECT_EQ(*r->input.plan.nodes, nodes);
    EXPECT_NE(r->assumed.find("gpus_per_node 64"), std::string::npos);
    auto sc = resolve_run(*r);
    ASSERT_TRUE(sc.ok()) << sc.error().message;
    EXPECT_EQ(sc->nodes, nodes);
    EXPECT_EQ(sc->gpus_per_node, 64);
    // Without the column the plan does not lie on 72-GPU nodes.
    MeasuredRun bare = *r;
    bare.input.plan.nodes.reset();
    auto err = resolve_run(bare);
    ASSERT_FALSE(err.ok());
    EXPECT_NE(err.error().message.find("--gpus"), std::string::npos) << err.error().message;
  }
  const MeasuredRun* h = find("t111");  // DGX H100, 8 per node stated: no nodes set
  ASSERT_NE(h, nullptr);
  EXPECT_FALSE(h->input.plan.nodes.has_value());

  namespace fs = std::filesystem;
  fs::path dir = fs::path(testing::scratch()) / "corpus_per_node";
  fs::create_directories(dir);
  {
    std::ofstream f(dir / "c.csv");
    f << "id,source_id,model,parameters_b,layers,hidden,heads,seq_length,vocab,gpus,"
         "gpus_per_node,gpu,interconnect,framework,strategy,tp,pp,dp,micro_batch,global_batch,"
         "precision,recompute,metric,value,split,notes\n"
      << "y1,s,m,1,24,2048,16,2048,,128,80,GB200,,megatron,3d,1,1,128,1,128,,,"
         "iteration_time_s,1,fit,\n"
      << "y2,s,m,1,24,2048,16,2048,,100,64,GB200,,megatron,3d,1,1,100,1,100,,,"
         "iteration_time_s,1,fit,\n"
      << "y3,s,m,1,24,2048,16,2048,,16,4,H100-80GB,,megatron,3d,1,1,16,1,16,,,"
         "iteration_time_s,1,fit,\n";
  }
  SkipCounts skips;
  auto mine = read_measured_csv((dir / "c.csv").string(), "vtrain-a100", &skips);
  ASSERT_TRUE(mine.ok()) << mine.error().message;
  EXPECT_EQ(skips["gpus_per_node 80 exceeds gb200-nvl72's 72"], 1);
  EXPECT_EQ(skips["gpus not a multiple of gpus_per_node"], 1);
  ASSERT_EQ(mine->size(), 1u);
  EXPECT_EQ(*(*mine)[0].input.plan.nodes, 4);  // 16 H100s, 4 a node
}

// --rows fit|heldout select by the split column; "all" reports both halves, per strategy and
// per GPU-count band, each summary the errors of exactly its rows.
TEST(ValidateCorpus, SplitSelectionAndSummaries) {
  auto runs = read_measured_csv(kCorpus, "vtrain-a100");
  ASSERT_TRUE(runs.ok());
  std::vector<std::string> why;
  auto prepared = *prepare_runs(*runs, why);
  std::size_t fit = 0, held = 0;
  for (const auto& p : prepared) (p.split == "fit" ? fit : held)++;
  ASSERT_GT(fit, 0u);
  ASSERT_GT(held, 0u);
  Validation h = validate_runs(prepared, "heldout");
  EXPECT_EQ(h.rows.size(), held);
  for (const auto& r : h.rows) EXPECT_EQ(r.split, "heldout");
  for (const auto& s : h.summary) EXPECT_EQ(s.split, "heldout");
  Validation all = validate_runs(prepared, "all");
  EXPECT_EQ(all.rows.size(), fit + held);
  std::map<std::tuple<std::string, std::string>, std::vector<double>> want;
  for (const auto& r : all.rows) {
    const std::string band = gpu_band(r.scenario->gpus());
    for (const std::string& g : {std::string("(all)"), r.group, band}) {
      want[{g, r.split}].push_back(r.error);
      want[{g, "all"}].push_back(r.error);
    }
  }
  std::set<std::tuple<std::string, std::string>> seen;
  for (const auto& s : all.summary) {
    seen.insert({s.group, s.split});
    const auto& e = want[{s.group, s.split}];
    EXPECT_EQ(s.errors.rows, e.size()) << s.group << " " << s.split;
    if (!e.empty()) {
      EXPECT_DOUBLE_EQ(s.errors.mape, summarize(e).mape);
    }
  }
  for (const char* g : {"(all)", "gpus <=64", "gpus 65-512", "gpus >512"})
    for (const char* sp : {"fit", "heldout", "all"})
      EXPECT_TRUE(seen.count({g, sp})) << g << " " << sp;
}

// --compute-only fits measured rows, not a trace: with --from-trace it is one line, status 2.
TEST(ValidateCorpus, CliComputeOnlyRefusesTrace) {
  using testing::run_shell;
  const std::string bin = COMMSCOPE_BIN;
  auto r = run_shell(bin + " calibrate --compute-only --from-trace " + kCorpus + " -o x.json");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("--compute-only"), std::string::npos) << r.err;
}

// The corpus's header and the lines of the given rows, keyed "tNNN," (the id and its comma).
std::pair<std::string, std::map<std::string, std::string>> corpus_lines(
    std::initializer_list<const char*> ids) {
  std::ifstream in(kCorpus);
  std::string header, line;
  std::getline(in, header);
  std::map<std::string, std::string> rows;
  while (std::getline(in, line))
    for (const char* id : ids)
      if (line.rfind(id, 0) == 0) rows[id] = line;
  return {header, rows};
}

// A corpus row whose `unmodelled` cell is set (its run does what commscope does not model) is
// validated but never fitted on: calibrate says so, and its fit equals the fit on the same
// rows without that one. Four H100 Megatron fit rows of the corpus (t107, t111, t113, t115,
// whose `unmodelled` cell, the header's last, is empty), one marked.
TEST(ValidateCorpus, UnmodelledRowsAreNotFittedOn) {
  using testing::run_shell;
  auto [header, rows] = corpus_lines({"t107,", "t111,", "t113,", "t115,"});
  ASSERT_EQ(rows.size(), 4u);
  const std::string dir = testing::scratch();
  auto write = [&](const std::string& name, bool marked, bool with_t107) {
    std::ofstream f(dir + "/" + name);
    EXPECT_TRUE(header.ends_with(",unmodelled"));
    f << header << "\n";
    for (const auto& [id, l] : rows) {
      EXPECT_TRUE(l.ends_with(",")) << id;  // an empty `unmodelled` cell
      if (id == "t107," && !with_t107) continue;
      f << l << (id == "t107," && marked ? "a mechanism commscope does not model" : "") << "\n";
    }
    return dir + "/" + name;
  };
  const std::string bin = std::string(COMMSCOPE_BIN) + " calibrate ";
  const std::string args = " --system dgx-h100 --rows fit --compute-only --evaluations 40 -o ";
  auto marked = run_shell(bin + write("marked.csv", true, true) + args + dir + "/marked.json");
  ASSERT_EQ(marked.status, 0) << marked.err;
  EXPECT_NE(marked.err.find("1 row not fitted on: it runs what commscope does not model"),
            std::string::npos)
      << marked.err;
  auto without = run_shell(bin + write("without.csv", false, false) + args + dir + "/without.json");
  ASSERT_EQ(without.status, 0) << without.err;
  auto all = run_shell(bin + write("all.csv", false, true) + args + dir + "/all.json");
  ASSERT_EQ(all.status, 0) << all.err;
  auto cal = [&](const char* name) {
    return nlohmann::json::parse(std::ifstream(dir + "/" + name))["calibration"];
  };
  EXPECT_EQ(cal("marked.json"), cal("without.json"));
  EXPECT_NE(cal("all.json"), cal("without.json"));  // t107 does move the fit when it is in it
}

// A DeepSpeed 0.3 row (its release's terms are fitted on the system's calibration) is not fitted
// on either: with t100 beside t083 and t085 (Narayanan et al.'s Megatron-LM rows, all fit rows
// on dgx-a100-80gb) calibrate notes one such row and fits what it fits without it.
TEST(ValidateCorpus, DeepSpeed03RowsAreNotFittedOn) {
  using testing::run_shell;
  auto [header, rows] = corpus_lines({"t083,", "t085,", "t100,"});
  ASSERT_EQ(rows.size(), 3u);
  ASSERT_NE(rows["t100,"].find(",deepspeed 0.3,"), std::string::npos);
  const std::string dir = testing::scratch();
  auto write = [&](const std::string& name, bool with_t100) {
    std::ofstream f(dir + "/" + name);
    f << header << "\n";
    for (const auto& [id, l] : rows)
      if (id != "t100," || with_t100) f << l << "\n";
    return dir + "/" + name;
  };
  const std::string bin = std::string(COMMSCOPE_BIN) + " calibrate ";
  const std::string args = " --system dgx-a100-80gb --rows fit --compute-only --evaluations 30 -o ";
  auto with = run_shell(bin + write("with.csv", true) + args + dir + "/with.json");
  ASSERT_EQ(with.status, 0) << with.err;
  EXPECT_NE(with.err.find("1 row not fitted on: predicted with a framework release whose terms "
                          "are fitted on the calibration"),
            std::string::npos)
      << with.err;
  auto without = run_shell(bin + write("without.csv", false) + args + dir + "/without.json");
  ASSERT_EQ(without.status, 0) << without.err;
  EXPECT_EQ(without.err.find("framework release"), std::string::npos) << without.err;
  auto cal = [&](const char* name) {
    return nlohmann::json::parse(std::ifstream(dir + "/" + name))["calibration"];
  };
  EXPECT_EQ(cal("with.json"), cal("without.json"));
}

// --start preset refines the preset's own calibration: the result is written with its
// provenance, and on the rows it was fitted on it is no worse than the preset it started from
// (Nelder-Mead keeps its best point). --start takes defaults or preset only, and no trace.
TEST(Validate, CliStartPresetRefinesThePresetsCalibration) {
  using testing::run_shell;
  const std::string bin = COMMSCOPE_BIN;
  const std::string out = testing::scratch() + "refined.json";
  const std::string csv = kVtrain + "ground_truth_multi.csv";
  auto c = run_shell(bin + " calibrate " + csv +
                     " --rows even --start preset --evaluations 30 -o '" + out + "'");
  ASSERT_EQ(c.status, 0) << c.err;
  const auto j = nlohmann::json::parse(std::ifstream(out));
  EXPECT_NE(j["sources"].dump().find("--rows even --start preset"), std::string::npos);
  // The fit's objective, the mean |log(predicted / measured)| over the rows it fitted.
  auto objective = [&](const std::string& system) {
    auto v = run_shell(bin + " validate " + csv + " --rows even --format json --system '" + system +
                       "'");
    EXPECT_EQ(v.status, 0) << v.err;
    double sum = 0;
    int n = 0;
    const auto rows = nlohmann::json::parse(v.out)["rows"];
    for (const auto& r : rows)
      if (r["split"] == "even") {
        sum += std::abs(std::log(r["predicted_s"].get<double>() / r["measured_s"].get<double>()));
        ++n;
      }
    EXPECT_GT(n, 50);
    return sum / std::max(n, 1);
  };
  EXPECT_LE(objective(out), objective("vtrain-a100") + 1e-9);
  for (const std::string& bad : {std::string(" --start best"), std::string(" --start")}) {
    auto r = run_shell(bin + " calibrate " + csv + bad + " -o '" + out + ".bad'");
    EXPECT_EQ(r.status, 2) << bad;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("--start"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(out + ".bad"));
  }
  auto t = run_shell(bin + " calibrate --start preset --from-trace " + csv + " -o '" + out + "'");
  EXPECT_EQ(t.status, 2);
  EXPECT_NE(t.err.find("--start: not with --from-trace"), std::string::npos) << t.err;
  // --hold-gemm-shape belongs to the compute-only fit.
  auto h = run_shell(bin + " calibrate " + csv + " --hold-gemm-shape -o '" + out + ".bad'");
  EXPECT_EQ(h.status, 2);
  EXPECT_NE(h.err.find("--hold-gemm-shape: expected --compute-only with it"), std::string::npos)
      << h.err;
  EXPECT_FALSE(std::filesystem::exists(out + ".bad"));
}

TEST(ValidateCorpus, CliPrintsBothHalvesAndCalibrateRefusesHeldOut) {
  using testing::run_shell;
  const std::string bin = COMMSCOPE_BIN;
  auto v = run_shell(bin + " validate " + kCorpus + " --summary-only");
  ASSERT_EQ(v.status, 0) << v.err;
  EXPECT_NE(v.out.find("(all)                 fit"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("(all)                 heldout"), std::string::npos) << v.out;
  // The skipped rows: one warning line with the counts per reason.
  EXPECT_EQ(std::count(v.err.begin(), v.err.end(), '\n'), 1) << v.err;
  EXPECT_NE(v.err.find("skipped"), std::string::npos) << v.err;
  EXPECT_NE(v.err.find("no global_batch"), std::string::npos) << v.err;
  auto j = run_shell(bin + " validate " + kCorpus + " --rows heldout --format json");
  ASSERT_EQ(j.status, 0) << j.err;
  auto doc = nlohmann::json::parse(j.out);
  ASSERT_FALSE(doc["rows"].empty());
  for (const auto& r : doc["rows"]) EXPECT_EQ(r["split"], "heldout");
  for (const char* rows : {"heldout", "all", "even"}) {
    auto c = run_shell(bin + " calibrate " + kCorpus + " --rows " + rows);
    EXPECT_EQ(c.status, 2) << rows;
    EXPECT_TRUE(c.out.empty()) << rows;
    EXPECT_EQ(std::count(c.err.begin(), c.err.end(), '\n'), 1) << c.err;
    EXPECT_NE(c.err.find("--rows"), std::string::npos) << c.err;
  }
  auto odd = run_shell(bin + " validate " + kCorpus + " --rows odd");
  EXPECT_EQ(odd.status, 2);
  EXPECT_NE(odd.err.find("expected fit, heldout or all"), std::string::npos) << odd.err;
  // A corpus file whose every row is skipped: the count, then one error, nothing on stdout.
  const std::string empty = testing::scratch() + "/all_skipped.csv";
  {
    std::ifstream in(kCorpus);
    std::string header;
    std::getline(in, header);
    std::ofstream f(empty);
    f << header << "\n"
      << "x1,s,m,1,24,2048,16,,,16,,A100-80GB,,fsdp,,1,1,16,4,64,,,samples_per_s,32,fit,\n";
  }
  auto none = run_shell(bin + " validate " + empty);
  EXPECT_EQ(none.status, 2);
  EXPECT_TRUE(none.out.empty()) << none.out;
  EXPECT_NE(none.err.find("skipped 1 of 1 rows: 1 no seq_length"), std::string::npos) << none.err;
  EXPECT_NE(none.err.find("expected at least one row to predict, got none"), std::string::npos)
      << none.err;
  auto fitv = run_shell(bin + " validate " + kVtrain + "ground_truth_multi.csv --rows fit");
  EXPECT_EQ(fitv.status, 2);
  EXPECT_NE(fitv.err.find("expected even, odd or all"), std::string::npos) << fitv.err;
}

// --- issue 15: the published large runs (t107 on) and their plan columns ---

// The split column of every row follows SOURCES.md's rule, j + k even -> fit, with the regime
// number k and the position j each row's notes state; and for the sources added for issue 15
// k and j are recomputed here from the row contents alone (regime = model for the NeMo 24.07
// table, the system for the others; regimes sorted by name, rows by GPU count then model),
// so the held-out ids are exactly those of the stated rule.
TEST(ValidateCorpus, SplitFollowsTheStatedRule) {
  const auto rows = corpus_rows();
  std::map<std::string, std::vector<const std::map<std::string, std::string>*>> by_source;
  for (const auto& row : rows) {
    const std::string& notes = row.at("notes");
    const auto at = notes.rfind("regime #");
    ASSERT_NE(at, std::string::npos) << row.at("id");
    int k = -1, j = -1;
    ASSERT_EQ(std::sscanf(notes.c_str() + at, "regime #%d of source), position %d", &k, &j), 2)
        << row.at("id");
    EXPECT_EQ(row.at("split"), (j + k) % 2 == 0 ? "fit" : "heldout") << row.at("id");
    by_source[row.at("source_id")].push_back(&row);
  }
  const std::map<std::string, std::vector<std::string>> want_heldout = {
      {"nemo_perf_2407_h100", {}},
      {"megatron_bridge_perf_2511", {}},
      {"nemo_perf_2504_gb200", {}},
      {"megatron_bridge_perf_archive", {}},
      {"megatron_bridge_perf_archive_moe", {}}};
  std::set<std::string> heldout_by_rule, heldout_in_file;
  for (const auto& [source, _] : want_heldout) {
    const auto& group = by_source[source];
    ASSERT_FALSE(group.empty()) << source;
    auto regime = [&](const std::map<std::string, std::string>& r) {
      if (source == "nemo_perf_2407_h100") return r.at("model");
      if (source == "megatron_bridge_perf_archive")  // container | system
        return r.at("notes").substr(r.at("notes").find("section '") + 9, 5) + "|DGX-H100";
      if (source == "megatron_bridge_perf_archive_moe") {  // the whole container name | system
        const std::string& n = r.at("notes");
        const auto from = n.find("section '") + 9;
        return n.substr(from, n.find(" NeMo Container", from) - from) + "|DGX-H100";
      }
      return r.at("interconnect").substr(0, r.at("interconnect").find(' '));  // DGX-H100 ...
    };
    std::set<std::string> names;
    for (const auto* r : group) names.insert(regime(*r));
    const std::vector<std::string> sorted(names.begin(), names.end());
    for (const auto* r : group) {
      const int k =
          static_cast<int>(std::find(sorted.begin(), sorted.end(), regime(*r)) - sorted.begin());
      std::vector<const std::map<std::string, std::string>*> same;
      for (const auto* o : group)
        if (regime(*o) == regime(*r)) same.push_back(o);
      std::stable_sort(same.begin(), same.end(), [](auto* a, auto* b) {
        const int ga = std::stoi(a->at("gpus")), gb = std::stoi(b->at("gpus"));
        return ga != gb ? ga < gb : a->at("notes") < b->at("notes");
      });
      const int j = static_cast<int>(std::find(same.begin(), same.end(), r) - same.begin());
      if ((j + k) % 2 == 1) heldout_by_rule.insert(r->at("id"));
      if (r->at("split") == "heldout") heldout_in_file.insert(r->at("id"));
      EXPECT_NE(r->at("notes").find(fmt::format("regime #{} of source), position {}", k, j)),
                std::string::npos)
          << r->at("id");
    }
  }
  EXPECT_EQ(heldout_in_file, heldout_by_rule);
  EXPECT_EQ(heldout_in_file.size(), 17u);  // of the 35 rows t107-t141
}

// The columns after `notes` reach the plan: cp, vp, ep, fp8, sequence_parallel,
// distributed_optimizer (ZeRO-1), attention, pipeline_layout; `assumed` travels with the run.
TEST(ValidateCorpus, PlanColumnsReachThePlan) {
  auto runs = read_measured_csv(kCorpus, "vtrain-a100");
  ASSERT_TRUE(runs.ok()) << runs.error().message;
  auto find = [&](const char* id) -> const MeasuredRun& {
    auto it = std::find_if(runs->begin(), runs->end(), [&](auto& r) { return r.id == id; });
    EXPECT_NE(it, runs->end()) << id;
    return *it;
  };
  // t116: Llama 3.1 405B on 1,024 H100s, TP 8, PP 8, CP 2, VP 8, FP8, 292 tokens/s/GPU.
  const MeasuredRun& l = find("t116");
  EXPECT_EQ(l.input.model, "llama3-405b");
  EXPECT_EQ(l.input.system, "dgx-h100");
  EXPECT_EQ(*l.input.plan.cp, 2);
  EXPECT_FALSE(l.input.plan.dp.has_value());  // derived from GPUs / (TP x PP x CP)
  EXPECT_EQ(*l.input.plan.virtual_stages, 8);
  EXPECT_TRUE(*l.input.plan.fp8);
  EXPECT_TRUE(*l.input.plan.sequence_parallel);
  EXPECT_EQ(*l.input.plan.zero, 1);
  EXPECT_EQ(*l.input.plan.attention, AttentionKernel::flash);
  EXPECT_FALSE(l.input.plan.cpu_offload_layers.has_value());
  // NVIDIA's recipes overlap the TP collectives with the GEMMs (named in assumed): Megatron-
  // Bridge's for its rows, NeMo-Framework-Launcher 24.07's for Llama 2 70B but not GPT-3 175B;
  // rows without TP leave the column empty.
  EXPECT_TRUE(*l.input.plan.tp_comm_overlap);
  EXPECT_NE(l.assumed.find("tp_comm_overlap 1"), std::string::npos);
  EXPECT_TRUE(*find("t111").input.plan.tp_comm_overlap);
  EXPECT_FALSE(*find("t107").input.plan.tp_comm_overlap);
  EXPECT_NE(find("t107").assumed.find("tp_comm_overlap 0"), std::string::npos);
  EXPECT_FALSE(find("t109").input.plan.tp_comm_overlap.has_value());
  // Their recipes overlap the gradient reduction and the parameter gather (NeMo 24.07's
  // distributed Adam, NeMo 2.0's and Megatron-Bridge's DDP config; named in assumed); the 2021
  // Megatron-LM rows and the Megatron-FSDP rows leave both empty.
  for (const char* id : {"t107", "t113", "t116", "t123", "t138"}) {
    SCOPED_TRACE(id);
    EXPECT_TRUE(*find(id).input.plan.overlap_grad_reduce);
    EXPECT_TRUE(*find(id).input.plan.overlap_param_gather);
    EXPECT_NE(find(id).assumed.find("overlap_grad_reduce 1 and overlap_param_gather 1"),
              std::string::npos);
  }
  for (const char* id : {"t083", "t114"}) {
    SCOPED_TRACE(id);
    EXPECT_FALSE(find(id).input.plan.overlap_grad_reduce.has_value());
    EXPECT_FALSE(find(id).input.plan.overlap_param_gather.has_value());
  }
  // t138: Qwen3-235B-A22B on 256 H100s, TP 2, PP 8, VP 4, EP 32 with expert TP 1 (the recipe's,
  // named in assumed: commscope's default, TP, would need EP x 2 to divide TP x DP = 32).
  const MeasuredRun& q = find("t138");
  EXPECT_EQ(q.input.model, "qwen3-235b-a22b");
  EXPECT_EQ(*q.input.plan.ep, 32);
  EXPECT_EQ(*q.input.plan.expert_tp, 1);
  EXPECT_NE(q.assumed.find("expert_tp 1"), std::string::npos);
  EXPECT_FALSE(find("t116").input.plan.expert_tp.has_value());
  // The dispatcher of the recipe of the row's time (named in assumed): NCCL's all-to-all on the
  // Qwen3-30B EP 8 rows of the 26.02 containers; the EP 16 rows' HybridEP is named, not applied.
  EXPECT_EQ(*find("t133").input.plan.moe_dispatcher, MoeDispatcher::alltoall);
  EXPECT_NE(find("t133").assumed.find("moe_dispatcher alltoall"), std::string::npos);
  EXPECT_FALSE(find("t137").input.plan.moe_dispatcher.has_value());
  EXPECT_NE(find("t137").assumed.find("moe_dispatcher would be flex"), std::string::npos);
  EXPECT_FALSE(find("t116").input.plan.moe_dispatcher.has_value());
  // The DeepSeek-V3 rows: their recipes' layouts (with the MTP layer), the flex dispatcher and
  // Megatron-Core's recompute modules, each named in assumed; t132's unmodelled cell keeps it
  // out of every fit.
  const MeasuredRun& d120 = find("t120");
  EXPECT_EQ(*d120.input.plan.pipeline_layout, "Et*4|(t*4|)*14tmL");
  EXPECT_EQ(*d120.input.plan.moe_dispatcher, MoeDispatcher::flex);
  EXPECT_EQ(*d120.input.plan.recompute, Recompute::selective);
  EXPECT_EQ(*d120.input.plan.recompute_modules, recompute_module::mla_up_proj);
  EXPECT_NE(d120.assumed.find("recompute_modules mla_up_proj"), std::string::npos);
  EXPECT_TRUE(d120.unmodelled.empty());
  const MeasuredRun& d132 = find("t132");
  EXPECT_EQ(*d132.input.plan.pipeline_layout, "Et|(tt|)*30mL");
  EXPECT_EQ(*d132.input.plan.recompute_modules,
            recompute_module::mla_up_proj | recompute_module::mlp);
  EXPECT_NE(d132.unmodelled.find("overlap_moe_expert_parallel_comm"), std::string::npos);
  // torchtitan's "selective layer" rows: every other block fully checkpointed, as Megatron's
  // block method with half the blocks (one stage), cited.
  for (const auto& [id, n] : {std::pair{"t076", 20}, std::pair{"t081", 16}}) {
    SCOPED_TRACE(id);
    const MeasuredRun& r = find(id);
    EXPECT_EQ(*r.input.plan.recompute, Recompute::full);
    EXPECT_TRUE(*r.input.plan.recompute_block);
    EXPECT_EQ(*r.input.plan.recompute_num_layers, n);
    EXPECT_NE(r.assumed.find("checkpoint every other layer"), std::string::npos);
    EXPECT_TRUE(r.unmodelled.empty());
  }
  // The rows whose runs overlap the EP all-to-all say so in assumed and leave the column off
  // (docs/validate.md, "EP all-to-all overlap"); a row that sets the columns gets the flags.
  for (const char* id : {"t132", "t133", "t134", "t135", "t136", "t138", "t140"}) {
    SCOPED_TRACE(id);
    EXPECT_FALSE(find(id).input.plan.overlap_moe_ep_comm.has_value());
    EXPECT_NE((find(id).assumed + find(id).unmodelled).find("delay_wgrad_compute"),
              std::string::npos);
  }
  {
    std::ifstream in(kCorpus);
    std::string header, line, row;
    std::getline(in, header);
    while (std::getline(in, line))
      if (line.rfind("t136,", 0) == 0) row = line;
    ASSERT_TRUE(
        header.ends_with(",moe_a2a_overlap,delay_wgrad_compute,recompute_method,"
                         "recompute_num_layers,grad_comm_dtype,fp8_param_gather,cross_entropy,"
                         "attention_backend,unmodelled"));
    ASSERT_TRUE(row.ends_with(",,,,,,1,,,"));  // fp8_param_gather 1: the recipe's FP8-CS
    row.resize(row.size() - 10);
    const std::string path = testing::scratch() + "overlap.csv";
    std::ofstream(path) << header << "\n" << row << ",1,1,,,,,,,\n";
    auto one = read_measured_csv(path, "vtrain-a100");
    ASSERT_TRUE(one.ok()) << one.error().message;
    ASSERT_EQ(one->size(), 1u);
    EXPECT_TRUE(*one->front().input.plan.overlap_moe_ep_comm);
    EXPECT_TRUE(*one->front().input.plan.delay_wgrad_compute);
    EXPECT_FALSE(one->front().input.plan.fp8_param_gather.has_value());  // empty: off
    std::ofstream(path) << header << "\n" << row << ",2,,,,,,,,\n";
    auto bad = read_measured_csv(path, "vtrain-a100");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find("moe_a2a_overlap"), std::string::npos);
    std::ofstream(path) << header << "\n" << row << ",,,,,,sometimes,,,\n";
    bad = read_measured_csv(path, "vtrain-a100");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find("column 'fp8_param_gather'"), std::string::npos)
        << bad.error().message;
  }
  // The Megatron-Bridge FP8 rows and NeMo 25.04's (its scripts/performance, v2.3.0) run FP8
  // parameters (the recipes' fp8_param_gather, named in the assumed cell); NeMo 25.04's
  // Megatron-FSDP row does not (the same scripts turn it off there).
  for (const char* id : {"t115", "t117", "t118", "t136", "t122", "t123", "t125", "t126"}) {
    EXPECT_TRUE(find(id).input.plan.fp8_param_gather.value_or(false)) << id;
    EXPECT_NE(find(id).assumed.find("fp8_param_gather 1"), std::string::npos) << id;
  }
  EXPECT_FALSE(find("t124").input.plan.fp8_param_gather.value_or(false));
  EXPECT_NE(find("t124").assumed.find("fp8_param_gather 0"), std::string::npos);
  // t118: Llama 3 70B, Megatron-FSDP on 64 GB200s, 40 layers' activations offloaded (the
  // recipe's cpu_offloading_num_layers, named in the row's assumed cell).
  const MeasuredRun& off = find("t118");
  EXPECT_EQ(*off.input.plan.cpu_offload_layers, 40);
  EXPECT_NE(off.assumed.find("cpu_offloading_num_layers 40"), std::string::npos);
  // 126 layers + embedding + loss = 128 units over 64 chunks: 1, 2 x 62, 1 (Megatron-Core's
  // two flags, which the scenario splits).
  EXPECT_TRUE(l.input.plan.account_embedding.value_or(false));
  EXPECT_TRUE(l.input.plan.account_loss.value_or(false));
  auto resolved = resolve_scenario(l.input);
  ASSERT_TRUE(resolved.ok()) << resolved.error().message;
  const auto& st = resolved->plan.stage_layers;
  ASSERT_EQ(st.size(), 64u);
  EXPECT_EQ(st.front(), 1);
  EXPECT_EQ(st.back(), 1);
  EXPECT_EQ(std::accumulate(st.begin(), st.end(), 0), 126);
  EXPECT_NE(l.assumed.find("pipeline_layout"), std::string::npos);
  EXPECT_DOUBLE_EQ(l.measured_s, 512.0 * 8192 / (292.0 * 1024));
  // t118: Llama 3 70B with FSDP on 64 GB200s: ZeRO-3, no distributed-optimizer column.
  const MeasuredRun& f = find("t118");
  EXPECT_EQ(f.input.system, "gb200-nvl72");
  EXPECT_EQ(*f.input.plan.zero, 3);
  EXPECT_FALSE(f.input.plan.sequence_parallel.has_value());
  // An old row (ends at notes): nothing of the new columns is set.
  const MeasuredRun& o = find("t083");
  EXPECT_FALSE(o.input.plan.cp || o.input.plan.ep || o.input.plan.fp8 || o.input.plan.attention ||
               o.input.plan.stage_layers || o.input.plan.tp_comm_overlap ||
               o.input.plan.tp_async_allreduce);
  EXPECT_TRUE(o.assumed.empty());
  // The 2021 Megatron-LM rows with TP and without SP: the synchronous all-reduce, cited.
  const MeasuredRun& sync = find("t085");
  ASSERT_TRUE(sync.input.plan.tp_async_allreduce.has_value());
  EXPECT_FALSE(*sync.input.plan.tp_async_allreduce);
  EXPECT_NE(sync.assumed.find("async_tp_allreduce 0"), std::string::npos);

  std::vector<std::string> why;
  auto prepared = *prepare_runs(*runs, why);
  EXPECT_EQ(prepared.size(), runs->size()) << (why.empty() ? "" : why.front());
  auto prep = [&](const char* id) -> const PreparedRun& {
    auto it = std::find_if(prepared.begin(), prepared.end(), [&](auto& r) { return r.id == id; });
    EXPECT_NE(it, prepared.end()) << id;
    return *it;
  };
  const Scenario& sc = prep("t116").workload.scenario;
  EXPECT_EQ(sc.plan.cp, 2);
  EXPECT_EQ(sc.plan.dp, 8);
  EXPECT_EQ(sc.gpus(), 1024);
  // t126: Mixtral 8x7B on 64 GB200s with EP 8: every MoE layer's dispatch and combine are
  // all-to-alls over the expert-parallel group, absent with EP 1.
  const PreparedRun& m = prep("t126");
  EXPECT_EQ(m.workload.scenario.plan.ep, 8);
  auto all_to_alls = [](const Workload& w) {
    std::size_t n = 0;
    for (const auto& role : w.roles)
      for (const auto& v : comm_volume(w, role))
        if (v.collective == Collective::all_to_all) n += static_cast<std::size_t>(v.calls);
    return n;
  };
  EXPECT_GT(all_to_alls(m.workload), 0u);
  EXPECT_GT(predicted_time(m, m.workload.scenario.system.calibration), 0.0);
  MeasuredRun one = find("t126");
  one.input.plan.ep = 1;
  std::vector<std::string> why1;
  auto p1 = *prepare_runs({one}, why1);
  ASSERT_EQ(p1.size(), 1u) << (why1.empty() ? "" : why1.front());
  EXPECT_EQ(all_to_alls(p1.front().workload), 0u);
}

// Malformed plan cells are errors naming the line and column; a row with CP whose dp
// disagrees with GPUs / (TP x PP x CP) too.
TEST(ValidateCorpus, PlanColumnErrors) {
  std::ifstream in(kCorpus);
  std::string header;
  std::getline(in, header);
  const std::string base =
      "x1,s,Llama 3 70B,70,,,,8192,,64,8,H100-80GB,,megatron,3d,4,4,4,1,128,fp8,unknown,"
      "tokens_per_s_per_gpu,1500,fit,n";
  // cp, vp, ep, fp8, sequence_parallel, distributed_optimizer, attention, pipeline_layout,
  // assumed
  const std::vector<std::pair<std::string, std::string>> cases = {
      {",1,5,1,maybe,,,,,", "column 'fp8'"},
      {",1,5,1,1,2,,,,", "column 'sequence_parallel'"},
      {",1,5,1,1,1,1,fast,,", "column 'attention'"},
      {",1,5,1,1,1,1,flash,odd,", "column 'pipeline_layout'"},
      {",1,5,1,1,1,1,flash,embedding_and_loss,", "column 'pipeline_layout'"},  // 82 / 20
      {",1,5,1,1,1,1,flash,E(t*4|)*0L,", "column 'pipeline_layout': expected a repeat count"},
      {",2,5,1,1,1,1,flash,,", "column 'dp'"},  // dp 4 x 4 x 4 x 2 = 128, not 64
      {",0,5,1,1,1,1,flash,,", "column 'cp'"},
      // ... cpu_offloading_num_layers, tp_comm_overlap, expert_tp, moe_dispatcher,
      // overlap_grad_reduce, overlap_param_gather
      {",1,5,1,1,1,1,flash,,,,,,nccl", "column 'moe_dispatcher'"},
      {",1,5,1,1,1,1,flash,,,,,,,2", "column 'overlap_grad_reduce'"},
      {",1,5,1,1,1,1,flash,,,,,,,1,on", "column 'overlap_param_gather'"},
      // ... async_tp_allreduce, recompute_modules, precision_aware_optimizer, moe_a2a_overlap,
      // delay_wgrad_compute, recompute_method, recompute_num_layers
      {",1,5,1,1,1,1,flash,,,,,,,,,,,,,,sometimes", "column 'recompute_method'"},
      {",1,5,1,1,1,1,flash,,,,,,,,,,,,,,block,two", "column 'recompute_num_layers'"},
      // ... grad_comm_dtype
      {",1,5,1,1,1,1,flash,,,,,,,,,,,,,,,,fp64", "column 'grad_comm_dtype'"},
  };
  for (const auto& [tail, want] : cases) {
    const std::string path = testing::scratch() + "/plan_cols.csv";
    {
      std::ofstream f(path);
      f << header << "\n" << base << tail << "\n";
    }
    auto r = read_measured_csv(path, "vtrain-a100");
    ASSERT_FALSE(r.ok()) << tail;
    EXPECT_NE(r.error().message.find("line 2: " + want), std::string::npos) << r.error().message;
  }
  // The same row with good cells reads, and its dp 4 with CP 1 stays.
  const std::string path = testing::scratch() + "/plan_cols_ok.csv";
  {
    std::ofstream f(path);
    f << header << "\n" << base << ",1,5,1,1,1,1,flash,,assumed text\n";
  }
  auto ok = read_measured_csv(path, "vtrain-a100");
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  ASSERT_EQ(ok->size(), 1u);
  EXPECT_EQ(*ok->front().input.plan.virtual_stages, 5);
  EXPECT_EQ(*ok->front().input.plan.zero, 1);
  EXPECT_EQ(ok->front().assumed, "assumed text");
  // A Megatron-Core layout string in pipeline_layout is the plan's layout: 80 layers on the 20
  // chunks of PP 4 x VP 5, four each, as --pipeline-model-parallel-layout.
  {
    std::ofstream f(path);
    f << header << "\n" << base << ",1,5,1,1,1,1,flash,E(t*4|)*19t*4L,\n";
  }
  auto laid = read_measured_csv(path, "vtrain-a100");
  ASSERT_TRUE(laid.ok()) << laid.error().message;
  ASSERT_EQ(laid->size(), 1u);
  EXPECT_EQ(*laid->front().input.plan.pipeline_layout, "E(t*4|)*19t*4L");
  auto sc = resolve_run(laid->front());
  ASSERT_TRUE(sc.ok()) << sc.error().message;
  EXPECT_EQ(sc->plan.stage_layers, std::vector<int>(20, 4));
  EXPECT_EQ(sc->plan.virtual_stages, 5);
}

// A GPT-shaped row (no preset: its layers, hidden and heads) with virtual stages is checked
// against its own layers: until 2026-12-01 the check read the scenario's default model
// (gpt2-large, 36 layers), and skipped Narayanan et al.'s 145B row with the VP 2 its script
// states (80 layers on PP 8 x VP 2) as "not divisible".
TEST(ValidateCorpus, GptShapedRowsAreCheckedAgainstTheirOwnLayers) {
  std::ifstream in(kCorpus);
  std::string header;
  std::getline(in, header);
  // id .. gpu, framework, strategy, tp, pp, dp, micro, global, precision, recompute, metric,
  // value, split, notes; then cp, vp
  auto row = [](int vp) {
    return fmt::format(
        "x1,s,GPT-145.6B,145.6,80,12288,96,2048,51200,1536,8,A100-SXM4-80GB,,megatron,3d,8,8,,2,"
        "2304,fp16,full,iteration_time_s,25,fit,n,1,{}",
        vp);
  };
  const std::string path = testing::scratch() + "/gpt_shaped_vp.csv";
  std::ofstream(path) << header << "\n" << row(2) << "\n";
  SkipCounts skips;
  auto runs = read_measured_csv(path, "vtrain-a100", &skips);
  ASSERT_TRUE(runs.ok()) << runs.error().message;
  ASSERT_EQ(runs->size(), 1u) << (skips.empty() ? "" : skips.begin()->first);
  auto sc = resolve_run(runs->front());
  ASSERT_TRUE(sc.ok()) << sc.error().message;
  EXPECT_EQ(sc->model.decoder_layers, 80);
  EXPECT_EQ(sc->plan.virtual_stages, 2);
  std::ofstream(path) << header << "\n" << row(3) << "\n";  // 80 over 24 chunks: skipped
  skips.clear();
  runs = read_measured_csv(path, "vtrain-a100", &skips);
  ASSERT_TRUE(runs.ok()) << runs.error().message;
  EXPECT_TRUE(runs->empty());
  EXPECT_EQ(skips["layers not divisible by pp x vp (no layout stated)"], 1);
}

// The CLI's rows carry the memory verdict as predict computes it and the row's assumptions;
// the summary shows both halves of the Megatron rows.
TEST(ValidateCorpus, CliRowsCarryMemoryVerdictAndAssumptions) {
  using testing::run_shell;
  const std::string bin = COMMSCOPE_BIN;
  auto j = run_shell(bin + " validate " + kCorpus + " --format json");
  ASSERT_EQ(j.status, 0) << j.err;
  auto doc = nlohmann::json::parse(j.out);
  bool saw = false;
  for (const auto& r : doc["rows"]) {
    ASSERT_TRUE(r.contains("fits") && r.contains("memory_per_gpu") && r.contains("assumed"));
    if (r["id"] != "t116") continue;
    saw = true;
    EXPECT_FALSE(r["assumed"].get<std::string>().empty());
    // predict on the same plan says the same bytes and verdict
    auto p = run_shell(bin +
                       " predict --model llama3-405b --system dgx-h100 --gpus 1024 --tp 8 "
                       "--pp 8 --context-parallel-size 2 --virtual-pipeline-stages 8 "
                       "--micro-batch-size 1 --global-batch-size 512 --fp8 --fp8-param-gather "
                       "--sequence-parallel --zero 1 --attention flash --pipeline-stage-layers " +
                       std::string("1") +
                       [] {
                         std::string s;
                         for (int i = 0; i < 62; ++i) s += ",2";
                         return s;
                       }() +
                       ",1 --format json");
    ASSERT_EQ(p.status, 0) << p.err;
    auto pd = nlohmann::json::parse(p.out);
    ASSERT_EQ(pd["predictions"].size(), 1u);
    EXPECT_EQ(pd["predictions"][0]["fits"], r["fits"]) << p.out.substr(0, 400);
    EXPECT_NEAR(pd["predictions"][0]["memory_per_gpu_bytes"].get<double>(),
                r["memory_per_gpu"].get<double>(), 1.0);
  }
  EXPECT_TRUE(saw);
  std::set<std::string> halves;
  for (const auto& s : doc["summary"])
    if (s["group"] == "megatron/3d" && s["rows"] != "all" && s["n"].get<int>() > 0)
      halves.insert(s["rows"].get<std::string>());
  EXPECT_TRUE(halves.count("fit") && halves.count("heldout"));
}

// DeepSpeed 0.3's two terms (presets/frameworks/deepspeed.json) come from the corpus's fit rows
// alone: the fit, re-run here, gives the stored values, uses exactly the ZeRO-3 fit rows, and
// gives the same result when every held-out row's measurement is changed.
TEST(ValidateCorpus, DeepSpeed03FitIsReproducibleFromTheFitRowsAlone) {
  auto runs = read_measured_csv(kCorpus, "vtrain-a100");
  ASSERT_TRUE(runs.ok()) << runs.error().message;
  std::vector<std::string> why;
  auto prepared = *prepare_runs(*runs, why);
  std::set<std::string> ds03;
  for (const auto& r : prepared)
    if (r.workload.scenario.plan.deepspeed_version == "0.3") ds03.insert(r.id);
  EXPECT_EQ(ds03, (std::set<std::string>{"t099", "t100", "t101", "t102", "t103", "t104"}));
  auto fit = fit_framework_overhead(prepared);
  ASSERT_TRUE(fit.ok()) << fit.error().message;
  EXPECT_EQ(fit->ids, (std::vector<std::string>{"t100", "t102", "t104"}));
  auto stored = load_deepspeed_versions();
  ASSERT_TRUE(stored.ok()) << stored.error().message;
  const DeepSpeedVersion& v = stored->front();
  ASSERT_EQ(v.version, "0.3");
  EXPECT_EQ(fit->nics_per_group, v.nics_per_group);
  // Stored to 3 significant digits.
  EXPECT_NEAR(fit->host_s_per_rank_per_call, v.host_s_per_rank_per_call,
              0.005 * v.host_s_per_rank_per_call + 1e-12);
  // The objective is what it says: the mean |log(predicted/measured)| of the fit rows.
  double sum = 0;
  for (const auto& r : prepared)
    if (r.split == "fit" && ds03.count(r.id))
      sum += std::fabs(std::log(
          predicted_time_with_host_overhead(r, fit->host_s_per_rank_per_call, fit->nics_per_group) /
          r.measured_s));
  EXPECT_NEAR(fit->objective, sum / 3, 1e-12);
  // Held-out rows never enter: triple their measurements and the fit does not move.
  for (auto& r : prepared)
    if (r.split == "heldout") r.measured_s *= 3;
  auto again = fit_framework_overhead(prepared);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->host_s_per_rank_per_call, fit->host_s_per_rank_per_call);
  EXPECT_EQ(again->nics_per_group, fit->nics_per_group);
  EXPECT_EQ(again->objective, fit->objective);
  // Nothing to fit without such rows: one error.
  std::vector<PreparedRun> none;
  for (const auto& r : prepared)
    if (!ds03.count(r.id)) none.push_back(r);
  auto empty = fit_framework_overhead(none);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.error().message.find("--fit-framework-overhead: expected fit rows"),
            std::string::npos);
  // The CLI refuses to fit on held-out rows.
  auto c = testing::run_shell(std::string(COMMSCOPE_BIN) + " validate " + kCorpus +
                              " --fit-framework-overhead --rows heldout");
  EXPECT_EQ(c.status, 2);
  EXPECT_TRUE(c.out.empty()) << c.out;
  EXPECT_NE(c.err.find("--rows: expected fit (or all) with --fit-framework-overhead"),
            std::string::npos)
      << c.err;
}

// A system's shipped compute calibration is the compute-only fit (400 evaluations from the
// defaults, as `calibrate --compute-only --rows fit` runs it, or from `start` where the preset says
// it was refined with --start preset) on the corpus's fit rows on that system whose `unmodelled`
// cell is empty and that no framework release with fitted terms predicts (DeepSpeed 0.3;
// calibrate skips the others): the fit, re-run here, gives the stored values, on
// exactly `rows` rows, within the fit's bounds; and it gives the same result when every held-out
// row's measurement is changed.
void expect_calibration_is_the_fit_on_its_fit_rows(const std::string& system, std::size_t rows_n,
                                                   bool all_flash,
                                                   const Calibration& start = Calibration{},
                                                   const ComputeFitBounds& bounds = {}) {
  SCOPED_TRACE(system);
  auto runs = read_measured_csv(kCorpus, "vtrain-a100");
  ASSERT_TRUE(runs.ok()) << runs.error().message;
  std::vector<std::string> why;
  auto prepared = *prepare_runs(*runs, why);
  auto fit_rows = [&] {
    std::vector<const PreparedRun*> out;
    for (const auto& r : prepared)
      if (r.split == "fit" && r.workload.scenario.system.name == system && r.unmodelled.empty() &&
          r.workload.scenario.plan.deepspeed_version.empty())
        out.push_back(&r);
    return out;
  };
  const auto rows = fit_rows();
  ASSERT_EQ(rows.size(), rows_n);
  if (all_flash) {
    for (const auto* r : rows)
      EXPECT_EQ(r->workload.scenario.plan.attention, AttentionKernel::flash) << r->id;
  }
  const Calibration fitted = fit_compute_calibration(rows, start, 400, bounds);
  const Calibration& stored = rows.front()->workload.scenario.system.calibration;
  auto same = [](double a, double b) { return std::abs(a - b) <= 1e-9 * std::abs(b); };
  EXPECT_TRUE(same(fitted.gemm_efficiency, stored.gemm_efficiency));
  EXPECT_TRUE(same(fitted.gemm_half_flops, stored.gemm_half_flops));
  EXPECT_TRUE(same(fitted.gemm_steepness, stored.gemm_steepness));
  EXPECT_TRUE(same(fitted.attention_efficiency, stored.attention_efficiency));
  EXPECT_TRUE(same(fitted.memory_efficiency, stored.memory_efficiency));
  EXPECT_TRUE(same(fitted.kernel_overhead.value(), stored.kernel_overhead.value()));
  const ComputeFitBounds b;
  for (double e : {stored.gemm_efficiency, stored.attention_efficiency, stored.memory_efficiency})
    EXPECT_LE(e, b.efficiency_max);
  for (auto& r : prepared)
    if (r.split == "heldout") r.measured_s *= 3;
  const Calibration again = fit_compute_calibration(fit_rows(), start, 400, bounds);
  EXPECT_EQ(again.gemm_efficiency, fitted.gemm_efficiency);
  EXPECT_EQ(again.attention_efficiency, fitted.attention_efficiency);
}

TEST(ValidateCorpus, A100FortyGbCalibrationIsTheFitOnItsFitRows) {
  expect_calibration_is_the_fit_on_its_fit_rows("dgx-a100-40gb", 20, true);
}

// dgx-a100-80gb (2026-11-28): its 11 predictable fit rows (t041, llm-foundry MPT-70b; torchtitan's
// t075, t077, t079, t080, t082; Narayanan et al.'s Megatron-LM t083, t085, t087, t089, t091),
// not the DeepSpeed 0.3 rows t100, t102, t104, whose release's terms are fitted on this
// calibration (DeepSpeed03FitIsReproducibleFromTheFitRowsAlone).
TEST(ValidateCorpus, A100EightyGbCalibrationIsTheFitOnItsFitRows) {
  expect_calibration_is_the_fit_on_its_fit_rows("dgx-a100-80gb", 11, false);
}

// dgx-h100: the 20 predictable H100 fit rows (9 llm-foundry MPT FSDP rows, t107, t111, t113,
// t115, t128, t129, t133, t136, t137, t140, t141), with their tp_comm_overlap and expert_tp
// columns. Refined (--start preset --hold-gemm-shape) when the model learnt Megatron-Core's
// --fp8-param-gather, and again when the llm-foundry rows took their fp32 gradient reduction,
// and again when the llm-foundry rows' attention took FlashAttention's own kernels
// (attention_backend flash, priced at the preset's measured flash_attention_efficiency),
// and again when Qwen3's per-head query and key norms joined the model (qk_norm, 2026-12-02),
// each time from the calibration it shipped with before (the start below), with the GEMM
// half-point and steepness held: the fit rows do not determine them (the preset's sources give
// the figures), and the closed loop above inherits them.
TEST(ValidateCorpus, H100CalibrationIsTheFitOnItsFitRows) {
  auto sys = load_system("dgx-h100");
  ASSERT_TRUE(sys.ok()) << sys.error().message;
  Calibration before = sys->calibration;
  before.gemm_efficiency = 0.8078556186198816;
  before.gemm_half_flops = 73.98152733208453 * 1e9;
  before.gemm_steepness = 0.2914636500923468;
  before.attention_efficiency = 0.8999368390235094;
  before.memory_efficiency = 0.442125702521931;
  before.kernel_overhead = units::us(1.002580943477219);
  ASSERT_EQ(before.flash_attention_efficiency, 0.3851);  // measured, not fitted: held
  expect_calibration_is_the_fit_on_its_fit_rows("dgx-h100", 20, false, before,
                                                ComputeFitBounds{.hold_gemm_shape = true});
}

// gb200-nvl72 (2026-11-28): its 6 fit rows (t117, t123, t126; t119 and t125 on 64 GPUs per
// NVLink domain; t120, DeepSeek-V3 with its recipe's layout, multi-token prediction, fused
// latent attention and the mla_up_proj recompute module).
TEST(ValidateCorpus, Gb200CalibrationIsTheFitOnItsFitRows) {
  expect_calibration_is_the_fit_on_its_fit_rows("gb200-nvl72", 6, false);
}

// What the shipped presets reach on the held-out half (docs/validate.md, last section): issue
// 11's bounds (ZeRO-3 and FSDP rows within 15%, its Megatron rows within 10%, the error not
// growing with the GPU count) and issue 15's for the H100 and GB200 runs it added (within
// 10-15%; those Megatron rows, t107 on, are issue 15's and held to its bound, not issue 11's).
// Every corpus row is a run that ran, so every memory verdict must say it fits. The six
// DeepSpeed ZeRO-3 rows of Narayanan et al. (t099-t104) say `recompute` full with the reason in
// `assumed`: without activation checkpointing their activations alone exceed the A100's 80 GB by
// the closed form of Korthikanti et al. 2022, eq. (1) (s b h (34 + 5 a s / h) bytes per layer,
// no tensor parallelism), computed here from the rows' own columns, independent of commscope's
// memory model; with the cell as it is, commscope's verdict agrees on every row.
TEST(ValidateCorpus, EveryRunFitsAndZero3RowsStateTheirRecompute) {
  auto runs = read_measured_csv(kCorpus, "vtrain-a100");
  ASSERT_TRUE(runs.ok()) << runs.error().message;
  std::vector<std::string> why;
  const auto prepared = *prepare_runs(*runs, why);
  int zero3 = 0;
  for (const PreparedRun& r : prepared) {
    if (r.id < "t099" || r.id > "t104") continue;
    ++zero3;
    SCOPED_TRACE(r.id);
    const Scenario& sc = r.workload.scenario;
    const double s = static_cast<double>(sc.model.seq_length);
    const double h = static_cast<double>(sc.model.hidden);
    const double a = static_cast<double>(sc.model.heads);
    const double b = static_cast<double>(sc.plan.micro_batch);
    EXPECT_EQ(sc.plan.tp, 1);
    const double activations = s * b * h * (34 + 5 * a * s / h) * sc.model.layers();
    EXPECT_GT(activations, 3 * 80e9);  // 256 GiB at the least (t101)
    EXPECT_EQ(sc.plan.recompute, Recompute::full);
    EXPECT_NE(r.assumed.find("Korthikanti et al. 2022 eq. (1)"), std::string::npos);
  }
  EXPECT_EQ(zero3, 6);
  // Every verdict agrees, torchtitan's Llama 2 70B (t078) included: 103.9 GiB, "does not fit",
  // until its `recompute` said op (torchtitan's op-level checkpointing) instead of Megatron's
  // selective, which FlashAttention leaves with nothing to replay. Its two siblings t077 and
  // t082 ran the same policy.
  const Validation v = validate_runs(prepared, "all");
  EXPECT_EQ(v.verdicts, prepared.size());
  EXPECT_EQ(v.verdicts_agree, v.verdicts);
  EXPECT_TRUE(v.verdicts_disagree.empty());
  int op = 0;
  for (const PreparedRun& r : prepared)
    if (r.workload.scenario.plan.recompute == Recompute::op) {
      ++op;
      EXPECT_TRUE(r.id == "t077" || r.id == "t078" || r.id == "t082") << r.id;
      EXPECT_TRUE(r.unmodelled.empty()) << r.id;
      EXPECT_NE(r.assumed.find("selective_ac_option is 'op'"), std::string::npos) << r.id;
    }
  EXPECT_EQ(op, 3);
}

// torchtitan's A100 table states no sequence length; the rows take 4,096 for Llama 2 and 8,192
// for Llama 3 from the same file's text. Its MFU column checks them: torchtitan's own count of
// model FLOPs per token (6N + 12 x layers x heads x head dim x seq, N every parameter, as its
// train.py counted then) at the row's tokens/s on the A100's 312 TFLOP/s gives the stated MFU to
// 0.1 point at those lengths, and misses by more than 3 points at the other one.
TEST(ValidateCorpus, TorchtitanSequenceLengthsGiveTheirMfu) {
  auto runs = read_measured_csv(kCorpus, "vtrain-a100");
  ASSERT_TRUE(runs.ok()) << runs.error().message;
  std::vector<std::string> why;
  const auto prepared = *prepare_runs(*runs, why);
  std::map<std::string, std::map<std::string, std::string>> by_id;
  for (const auto& row : corpus_rows()) by_id[row.at("id")] = row;
  int checked = 0;
  for (const PreparedRun& r : prepared) {
    const auto& row = by_id.at(r.id);
    if (row.at("source_id") != "torchtitan_perf_a100") continue;
    SCOPED_TRACE(r.id);
    ++checked;
    const ModelSpec& m = r.workload.scenario.model;
    const std::string& notes = row.at("notes");
    // "... | 2162 | 61.1% (Model size|..." : the MFU is the percentage before " (".
    const std::size_t pct = notes.find("% (");
    ASSERT_NE(pct, std::string::npos);
    const double mfu = std::stod(notes.substr(notes.rfind(' ', pct) + 1)) / 100;
    const double tokens_s = std::stod(row.at("value"));
    const auto flops = [&](double seq) {
      return 6.0 * static_cast<double>(count_params(m).total) +
             12.0 * m.layers() * m.heads * (static_cast<double>(m.hidden) / m.heads) * seq;
    };
    const double seq = static_cast<double>(r.workload.scenario.model.seq_length);
    EXPECT_EQ(seq, row.at("model").starts_with("Llama 2") ? 4096 : 8192);
    EXPECT_NEAR(tokens_s * flops(seq) / 312e12, mfu, 0.001);
    const double other = seq == 4096 ? 8192 : 4096;
    EXPECT_GT(std::fabs(tokens_s * flops(other) / 312e12 - mfu), 0.03);
    EXPECT_EQ(r.workload.scenario.plan.attention, AttentionKernel::flash);
  }
  EXPECT_EQ(checked, 8);
}

// torchtitan's FSDP2 runs reduce-scatter their gradients in fp32 (parallelize_llama.py at the
// A100 tables' commit 0413364 hard-codes MixedPrecisionPolicy(reduce_dtype=torch.float32); at
// the H100 tables' 9dec370 mixed_precision_reduce defaults to, and allows only, float32): each
// such row says grad_comm_dtype fp32, its every gradient reduce-scatter carries 4 bytes per
// element, the elements of one backward's reduce-scatters add up to the model's parameters (each
// gradient reduced once, counted independently by count_params), and the 70B row at micro-batch
// 1 (t078), whose reduction the compute does not hide, is slower so than in bf16. So do
// llm-foundry's H100 rows, whose MP mode DEFAULT is Composer v0.16.4's reduce_dtype
// torch.float32 (the A100 rows' PURE reduces in bf16 and says nothing).
TEST(ValidateCorpus, TorchtitanRowsReduceGradientsInFp32) {
  auto runs = read_measured_csv(kCorpus, "vtrain-a100");
  ASSERT_TRUE(runs.ok()) << runs.error().message;
  std::map<std::string, std::map<std::string, std::string>> by_id;
  for (const auto& row : corpus_rows()) by_id[row.at("id")] = row;
  auto fp32_reduce = [](const std::map<std::string, std::string>& row) {
    return row.at("source_id").starts_with("torchtitan_perf") ||
           (row.at("source_id") == "llmfoundry_mpt_bench" &&
            row.at("precision").find("MP mode DEFAULT") != std::string::npos);
  };
  int rows = 0;
  for (const auto& row : corpus_rows())
    if (fp32_reduce(row)) {
      ++rows;
      EXPECT_EQ(row.at("grad_comm_dtype"), "fp32") << row.at("id");
    }
  EXPECT_EQ(rows, 14 + 19);
  std::vector<std::string> why;
  const auto prepared = *prepare_runs(*runs, why);
  int checked = 0;
  for (const PreparedRun& r : prepared) {
    if (!fp32_reduce(by_id.at(r.id))) {
      // NeMo 24.07's FP8 examples and NeMo 25.04's FP8 scripts reduce in bf16 (the rows'
      // assumed column); no other row says
      if (by_id.at(r.id).at("source_id").starts_with("nemo_perf_2")) {
        EXPECT_EQ(r.workload.scenario.plan.grad_comm_dtype, DType::bf16) << r.id;
      } else {
        EXPECT_FALSE(r.workload.scenario.plan.grad_comm_dtype.has_value()) << r.id;
      }
      continue;
    }
    SCOPED_TRACE(r.id);
    ++checked;
    ASSERT_EQ(r.workload.scenario.plan.grad_comm_dtype, DType::fp32);
    double elements = 0;
    for (const Op& op : r.workload.roles.front().chunks.front().backward.ops())
      if (op.kind == OpKind::comm && op.group == CommGroup::data &&
          op.collective == Collective::reduce_scatter) {
        EXPECT_EQ(op.dtype, DType::fp32);
        EXPECT_EQ(op.bytes, 4.0 * static_cast<double>(op.elements));
        elements += static_cast<double>(op.elements);
      }
    const double params = static_cast<double>(count_params(r.workload.scenario.model).total);
    EXPECT_NEAR(elements / params, 1.0, 1e-3);
    if (r.id != "t078") continue;
    auto run = std::find_if(runs->begin(), runs->end(),
                            [&](const MeasuredRun& m) { return m.id == r.id; });
    ASSERT_NE(run, runs->end());
    ScenarioInput bf16 = run->input;
    bf16.plan.grad_comm_dtype = DType::bf16;
    auto sc = resolve_scenario(bf16);
    ASSERT_TRUE(sc.ok()) << sc.error().message;
    const double t_bf16 = simulate(build_workload(*sc)).iteration_time;
    const double t_fp32 = simulate(r.workload).iteration_time;
    EXPECT_GT(t_fp32, 1.05 * t_bf16);
  }
  EXPECT_EQ(checked, 8 + 19);  // torchtitan's A100 rows (its H100 96 GB rows have no preset)
}

TEST(ValidateCorpus, HeldOutHalfWithinTheIssuesBounds) {
  auto runs = read_measured_csv(kCorpus, "vtrain-a100");
  ASSERT_TRUE(runs.ok()) << runs.error().message;
  std::vector<std::string> why;
  const auto prepared = *prepare_runs(*runs, why);
  std::map<std::string, std::vector<double>> errors;
  for (const auto& p : prepared) {
    if (p.split != "heldout") continue;
    const double e = predicted_time(p, p.workload.scenario.system.calibration) / p.measured_s - 1;
    const std::string& g = p.group;
    if (g.starts_with("deepspeed/zero3") || g.starts_with("fsdp/") ||
        g.starts_with("megatron-fsdp/"))
      errors["zero3+fsdp"].push_back(e);
    if (g == "megatron/3d" && p.id < "t107") errors["megatron"].push_back(e);
    if (p.id >= "t107" && p.workload.scenario.system.name == "dgx-h100")
      errors["issue15-h100"].push_back(e);
    if (p.workload.scenario.system.name == "gb200-nvl72") errors["issue15-gb200"].push_back(e);
    const int gpus = p.workload.scenario.gpus();
    errors[gpus <= 64 ? "gpus<=64" : gpus <= 512 ? "gpus65-512" : "gpus>512"].push_back(e);
  }
  ASSERT_GE(errors["zero3+fsdp"].size(), 30u);
  ASSERT_EQ(errors["megatron"].size(), 5u);  // issue 11's held-out Megatron rows
  ASSERT_EQ(errors["issue15-h100"].size(), 13u);
  EXPECT_LE(summarize(errors["zero3+fsdp"]).mape, 0.15);
  EXPECT_LE(summarize(errors["megatron"]).mape, 0.10);
  EXPECT_LE(summarize(errors["issue15-h100"]).mape, 0.15);
  ASSERT_EQ(errors["issue15-gb200"].size(), 3u);  // t118, t122, t124
  EXPECT_LE(summarize(errors["issue15-gb200"]).mape, 0.15);
  // Not growing with scale: the larger bands are no worse than the smallest.
  const double small = summarize(errors["gpus<=64"]).mape;
  EXPECT_LE(summarize(errors["gpus65-512"]).mape, small + 0.05);
  EXPECT_LE(summarize(errors["gpus>512"]).mape, small + 0.05);
}

// torchtitan's H100 tables report each run's peak memory beside its throughput ("memory
// readings ... We take the maximum across all GPUs": torchtitan's max_reserved, what PyTorch's
// caching allocator held, which bounds the allocated peak from above). Their GPU, an H100 with
// 96 GB of HBM2e at 500 W, has no preset, so their times are not predicted; memory does not
// depend on a GPU's speed, so the eager rows (t069, 8 GPUs; t070, 128 GPUs: FSDP2, Llama 3.1 8B,
// local batch 2 at 8,192 tokens, op-level selective checkpointing) are predicted on dgx-h100
// under their own framework's pattern and checked against it: at most the reserved peak and at
// least 85% of it (the allocator's reserve beyond its allocated peak, about 8% on the repo's own
// H100 runs, data/validation-gpu/h100-runs.csv, is larger with 8 GB logits tensors). Before
// --cross-entropy torch and FSDP's root unit these were 58.8 and 44.8 GiB (71% and 67%); with
// the rows' old recompute column (Megatron's selective, nothing replayed under FlashAttention)
// 95.8 GiB, above what the run reserved. The torch.compile rows are left out: commscope does
// not model what Inductor's fusion saves.
TEST(ValidateCorpus, TorchtitanMeasuredMemoryOnH100) {
  std::ifstream in(kCorpus);
  std::string header, line;
  std::getline(in, header);
  const std::string path = testing::scratch() + "torchtitan_h100.csv";
  std::ofstream out(path);
  out << header << "\n";
  int copied = 0;
  while (std::getline(in, line)) {
    if (!line.starts_with("t069,") && !line.starts_with("t070,")) continue;
    const std::string gpu = "H100 (96GB HBM2e, 500W power limit)";
    const std::size_t at = line.find(gpu);
    ASSERT_NE(at, std::string::npos);
    out << line.substr(0, at) << "H100-80GB" << line.substr(at + gpu.size()) << "\n";
    ++copied;
  }
  out.close();
  ASSERT_EQ(copied, 2);
  auto runs = read_measured_csv(path, "vtrain-a100");
  ASSERT_TRUE(runs.ok()) << runs.error().message;
  ASSERT_EQ(runs->size(), 2u);
  for (MeasuredRun& r : runs.value()) {
    ASSERT_TRUE(apply_framework(framework_of_name("fsdp"), r.input.plan).ok());
    EXPECT_EQ(r.input.plan.cross_entropy, CrossEntropy::torch);
    EXPECT_EQ(r.input.plan.recompute, Recompute::op);
  }
  std::vector<std::string> why;
  const auto prepared = *prepare_runs(*runs, why);
  ASSERT_EQ(prepared.size(), 2u) << fmt::format("{}", fmt::join(why, "; "));
  std::map<std::string, std::string> notes;
  for (const auto& row : corpus_rows()) notes[row.at("id")] = row.at("notes");
  for (const PreparedRun& r : prepared) {
    SCOPED_TRACE(r.id);
    // "... row: FSDP | 5,762 | 82.4 (TPS/GPU | Memory GiB)": the number before " (TPS".
    const std::string& n = notes.at(r.id);
    const std::size_t end = n.find(" (TPS/GPU | Memory GiB)");
    ASSERT_NE(end, std::string::npos);
    const double measured = std::stod(n.substr(n.rfind(' ', end - 1) + 1)) * 1073741824.0;
    double peak = 0;
    for (const Role& role : r.workload.roles)
      peak = std::max(peak, memory_per_rank(r.workload, role).total().value());
    EXPECT_LE(peak, measured);
    EXPECT_GE(peak, 0.85 * measured);
    std::printf("%s: predicted %.1f GiB, measured %.1f GiB reserved (%.1f%%)\n", r.id.c_str(),
                peak / 1073741824.0, measured / 1073741824.0, 100 * peak / measured);
  }
}

// The loss each corpus row's framework runs, from its code (docs/validate.md, the
// `cross_entropy` column): torchtitan's F.cross_entropy on fp32 logits on its 14 rows,
// llm-foundry's FlashAttention CrossEntropyLoss on its 60; every other row Megatron-Core's
// vocab-parallel default (the column empty).
TEST(ValidateCorpus, CrossEntropyColumnFollowsTheFramework) {
  int torch = 0, flash = 0;
  for (const auto& row : corpus_rows()) {
    SCOPED_TRACE(row.at("id"));
    const std::string& src = row.at("source_id");
    const std::string& ce = row.at("cross_entropy");
    if (src.starts_with("torchtitan_perf")) {
      EXPECT_EQ(ce, "torch");
      ++torch;
    } else if (src == "llmfoundry_mpt_bench") {
      EXPECT_EQ(ce, "flash-attn");
      ++flash;
    } else {
      EXPECT_EQ(ce, "");
    }
    if (!ce.empty()) {
      EXPECT_NE(row.at("assumed").find("cross_entropy " + ce), std::string::npos);
    }
  }
  EXPECT_EQ(torch, 14);
  EXPECT_EQ(flash, 60);
}

// The attention's kernels as the runs called them (column attention_backend): FlashAttention's own
// in llm-foundry's MPT (its Triton kernel, attn_impl triton) and torchtitan (PyTorch SDPA's flash
// backend), each quoted in `assumed`; empty (the framework's: cuDNN's fused attention, which
// Transformer Engine picks on Hopper) on the Megatron-Core rows. The prepared rows take it under
// commscope's own pattern too, where the framework column is not read; an empty cell takes the
// framework's default.
TEST(ValidateCorpus, AttentionBackendColumnFollowsTheFramework) {
  int flash = 0;
  for (const auto& row : corpus_rows()) {
    SCOPED_TRACE(row.at("id"));
    const std::string& src = row.at("source_id");
    const std::string& b = row.at("attention_backend");
    if (src.starts_with("torchtitan_perf") || src == "llmfoundry_mpt_bench") {
      EXPECT_EQ(b, "flash");
      EXPECT_NE(row.at("assumed").find("attention_backend flash"), std::string::npos);
      ++flash;
    } else {
      EXPECT_EQ(b, "");
    }
  }
  EXPECT_EQ(flash, 74);
  std::map<std::string, std::string> cell;
  for (const auto& row : corpus_rows()) cell[row.at("id")] = row.at("attention_backend");
  auto runs = read_measured_csv(kCorpus, "vtrain-a100");
  ASSERT_TRUE(runs.ok()) << runs.error().message;
  std::vector<std::string> why;
  int prepared_flash = 0;
  const auto prepared = *prepare_runs(*runs, why);
  for (const auto& r : prepared) {
    SCOPED_TRACE(r.id);
    const bool is_flash = r.workload.scenario.plan.attention_backend == AttentionBackend::flash;
    // empty: the framework the row is predicted under (DeepSpeed 0.3's rows: its own)
    const Framework f = r.workload.scenario.plan.framework;
    EXPECT_EQ(is_flash,
              cell.at(r.id) == "flash" ||
                  (cell.at(r.id).empty() && (f == Framework::fsdp || f == Framework::deepspeed)));
    prepared_flash += is_flash;
  }
  EXPECT_GT(prepared_flash, 60);
}

}  // namespace
}  // namespace commscope
