// Training throughput of the CPU GPT-2 (commscope::train) on one core: tokens/s, and achieved
// matrix-product GFLOP/s as a fraction of this machine's single-core sgemm rate, measured in the
// same run on the model's own GEMM shapes (target at least 50% for hidden >= 512 on one rank).
// A step is: zero the gradients, forward, backward, AdamW over the whole parameter buffer.
// Usage: bench_train [--layers 4] [--hidden 512] [--heads 8] [--vocab 8192] [--seq 256]
//                    [--batch 4] [--steps 5] [--warmup 2]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "commscope/gpt/data.h"
#include "commscope/gpt/gpt.h"
#include "commscope/gpt/kernels.h"
#include "commscope/gpt/optim.h"

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Best GFLOP/s of out[M,N] = a[M,K] @ b[N,K]^T (the layout of matmul_forward), after a warm-up.
double sgemm_gflops(int m, int n, int k, int reps) {
  std::vector<float> a(static_cast<std::size_t>(m) * k), b(static_cast<std::size_t>(n) * k),
      c(static_cast<std::size_t>(m) * n);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 97) * 0.01f - 0.48f;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 89) * 0.01f - 0.44f;
  auto run = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a.data(), k, b.data(), k,
                0.0f, c.data(), n);
  };
  run();  // warm-up
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    run();
    best = std::min(best, seconds_since(t0));
  }
  return 2.0 * m * n * k / best / 1e9;
}

struct OpTotals {
  double fwd_s = 0, bwd_s = 0, flops = 0;
};

int usage(const char* why) {
  std::fprintf(stderr,
               "bench_train: %s\nusage: bench_train [--layers N] [--hidden N] [--heads N] "
               "[--vocab N] [--seq N] [--batch N] [--steps N] [--warmup N]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  namespace tr = commscope::train;
  tr::GptConfig cfg;
  cfg.layers = 4, cfg.hidden = 512, cfg.heads = 8, cfg.vocab = 8192, cfg.seq = 256;
  int batch = 4, steps = 5, warmup = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    int* dst = flag == "--layers"   ? &cfg.layers
               : flag == "--hidden" ? &cfg.hidden
               : flag == "--heads"  ? &cfg.heads
               : flag == "--vocab"  ? &cfg.vocab
               : flag == "--seq"    ? &cfg.seq
               : flag == "--batch"  ? &batch
               : flag == "--steps"  ? &steps
               : flag == "--warmup" ? &warmup
                                    : nullptr;
    if (!dst) return usage(("unknown argument " + std::string(flag)).c_str());
    if (i + 1 >= argc) return usage(("missing value for " + std::string(flag)).c_str());
    char* end = nullptr;
    const long v = std::strtol(argv[++i], &end, 10);
    if (*end != '\0' || v < 0 || v > 1 << 20)
      return usage(("bad value for " + std::string(flag)).c_str());
    *dst = static_cast<int>(v);
  }
  cfg.max_positions = cfg.seq;
  if (auto st = tr::validate(cfg); !st.ok()) return usage(st.error().message.c_str());
  if (batch < 1 || steps < 1) return usage("--batch and --steps must be >= 1");

  tr::set_threads(1);

  // 1) the single-core sgemm rate on the model's GEMM shapes (M = batch*seq rows)
  const int n_rows = batch * cfg.seq, h = cfg.hidden;
  struct Shape {
    const char* what;
    int m, n, k;
  };
  const Shape shapes[] = {{"attn_out (fwd)", n_rows, h, h},
                          {"qkv (fwd)", n_rows, 3 * h, h},
                          {"mlp_in (fwd)", n_rows, 4 * h, h},
                          {"mlp_out (fwd)", n_rows, h, 4 * h},
                          {"lm_head (fwd)", n_rows, cfg.vocab, h}};
  std::vector<double> gemm_rates;
  for (const auto& s : shapes) gemm_rates.push_back(sgemm_gflops(s.m, s.n, s.k, 5));
  const double peak = *std::max_element(gemm_rates.begin(), gemm_rates.end());

  // 2) training steps on the synthetic stream
  tr::Gpt model(cfg, batch);
  const auto& layout = model.layout();
  const std::int64_t np = layout.total();
  std::vector<float> params(np), grads(np), m(np, 0.0f), v(np, 0.0f);
  tr::init_params(layout, params.data(), 1234);
  const auto source = tr::TokenSource::synthetic(cfg.vocab, 1);
  const int total_steps = warmup + steps;
  const std::size_t per_step = static_cast<std::size_t>(batch) * cfg.seq;
  std::vector<std::int32_t> tokens(per_step * total_steps), targets(per_step * total_steps);
  for (int s = 0; s < total_steps; ++s)
    for (int b = 0; b < batch; ++b) {
      const std::size_t off = s * per_step + static_cast<std::size_t>(b) * cfg.seq;
      source.sequence(static_cast<std::int64_t>(s) * batch + b, cfg.seq, tokens.data() + off,
                      targets.data() + off);
    }

  // Per-op totals over the timed steps (the observer only reads steady_clock around each kernel).
  std::map<std::string, OpTotals> ops;
  std::vector<std::string> op_order;
  bool observing = false;
  model.set_observer([&](const tr::OpRecord& r) {
    if (!observing) return;
    const std::string name(r.name);
    auto [it, fresh] = ops.try_emplace(name);
    if (fresh) op_order.push_back(name);
    (r.backward ? it->second.bwd_s : it->second.fwd_s) += r.end_s - r.start_s;
    it->second.flops += r.flops;
  });

  const tr::AdamW hyper;
  std::vector<double> step_s;
  double zero_s = 0, adam_s = 0, first_loss = 0, last_loss = 0;
  for (int s = 0; s < total_steps; ++s) {
    observing = s >= warmup;
    const auto t0 = Clock::now();
    std::memset(grads.data(), 0, sizeof(float) * grads.size());
    const auto t1 = Clock::now();
    const float loss =
        model.forward(params.data(), tokens.data() + s * per_step, targets.data() + s * per_step);
    model.backward(params.data(), grads.data());
    const auto t2 = Clock::now();
    tr::adamw_step(params.data(), grads.data(), m.data(), v.data(), np, hyper, s + 1, 1.0f);
    const double dt = seconds_since(t0);
    if (s == 0) first_loss = loss;
    last_loss = loss;
    if (observing) {
      step_s.push_back(dt);
      zero_s += std::chrono::duration<double>(t1 - t0).count();
      adam_s += seconds_since(t2);
    }
  }

  const double step = median(step_s), best_step = *std::min_element(step_s.begin(), step_s.end());
  const double flops = model.matmul_flops_per_step();
  const double achieved = flops / step / 1e9;
  const double tokens_per_s = static_cast<double>(per_step) / step;
  double total_timed = 0;
  for (double t : step_s) total_timed += t;
  double non_gemm_s = zero_s + adam_s, gemm_s = 0;
  for (const auto& [name, t] : ops) (t.flops > 0 ? gemm_s : non_gemm_s) += t.fwd_s + t.bwd_s;

  std::printf("# bench_train: GPT-2 training on one core (OpenBLAS threads 1), fp32\n");
  std::printf(
      "# model: layers %d, hidden %d, heads %d, vocab %d, seq %d, batch %d: %.2f M parameters, "
      "%d tokens per step\n",
      cfg.layers, cfg.hidden, cfg.heads, cfg.vocab, cfg.seq, batch, np / 1e6,
      static_cast<int>(per_step));
  std::printf(
      "# step: zero grads + forward + backward + AdamW; %d warm-up + %d timed steps (median); "
      "loss %.3f -> %.3f\n",
      warmup, steps, first_loss, last_loss);
  std::printf("# sgemm reference: row-major A[M,K] @ B[N,K]^T, best of 5 after a warm-up\n");
  std::printf("\n%-16s %6s %6s %6s %10s\n", "sgemm shape", "M", "N", "K", "GFLOP/s");
  for (std::size_t i = 0; i < gemm_rates.size(); ++i)
    std::printf("%-16s %6d %6d %6d %10.2f\n", shapes[i].what, shapes[i].m, shapes[i].n, shapes[i].k,
                gemm_rates[i]);
  std::printf("%-16s %6s %6s %6s %10.2f  (the reference: best of the shapes)\n", "single-core", "",
              "", "", peak);

  std::printf("\n%-16s %10s %10s %8s %10s\n", "op (all layers)", "fwd ms", "bwd ms", "share",
              "GFLOP/s");
  auto row = [&](const char* name, double fwd, double bwd, double fl) {
    const double per = (fwd + bwd) / steps;
    std::printf("%-16s %10.2f %10.2f %7.1f%% ", name, 1e3 * fwd / steps, 1e3 * bwd / steps,
                100 * (fwd + bwd) / total_timed);
    if (fl > 0)
      std::printf("%10.2f\n", fl / steps / per / 1e9);
    else
      std::printf("%10s\n", "-");
  };
  for (const auto& name : op_order) {
    const auto& t = ops[name];
    row(name.c_str(), t.fwd_s, t.bwd_s, t.flops);
  }
  row("zero grads", zero_s, 0, 0);
  row("adamw_step", adam_s, 0, 0);

  std::printf("\n%-34s %12.1f ms  (best %.1f ms)\n", "step time (median)", 1e3 * step,
              1e3 * best_step);
  std::printf("%-34s %12.0f tokens/s\n", "throughput", tokens_per_s);
  std::printf("%-34s %12.2f GFLOP per step\n", "matrix-product FLOPs", flops / 1e9);
  std::printf("%-34s %12.2f GFLOP/s\n", "achieved", achieved);
  std::printf("%-34s %12.2f GFLOP/s\n", "single-core sgemm", peak);
  std::printf("%-34s %12.2f  (target >= 0.50: %s)\n", "achieved / sgemm", achieved / peak,
              achieved / peak >= 0.5 ? "met" : "NOT met");
  std::printf("%-34s %11.1f%%  (GEMM and attention products %.1f%%)\n",
              "non-GEMM share of step time", 100 * non_gemm_s / total_timed,
              100 * gemm_s / total_timed);
  std::printf(
      "# FLOPs count the attention products over the full T x T; the kernels skip most of the\n"
      "# masked triangle, so their GFLOP/s rows (and the total) overstate them.\n");
  return 0;
}
