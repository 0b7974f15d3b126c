// How fast this host streams an Adam step, against how fast it streams a triad, in the same
// process: the assumption behind ZeRO-Offload's CPU step (docs/workload.md, "Optimizer offload")
// is that Adam on the host is memory-bound, so its time is its bytes over the host memory's
// bandwidth. The Adam is the CPU trainer's AdamW (commscope::train::adamw_step: fp32 weight,
// gradient and two moments in, weight and moments out, 28 bytes a parameter), each thread on its
// own slice, as DeepSpeedCPUAdam splits a shard over its threads. The triad is STREAM's
// a = b + s c (12 bytes an element). Prints each one's GB/s (best of the repetitions) on 1 thread
// and on every hardware thread, and Adam's rate over the triad's: near 1 says memory-bound at
// that thread count, well below 1 compute-bound.
// Usage: bench_cpu_adam [millions of parameters, 32] [repetitions, 5]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "commscope/gpt/optim.h"

namespace {

using Clock = std::chrono::steady_clock;

// Runs body(begin, end) on `threads` threads over [0, n) in equal slices; the wall seconds.
template <class F>
double parallel_seconds(std::int64_t n, int threads, F&& body) {
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    const std::int64_t a = n * t / threads, b = n * (t + 1) / threads;
    pool.emplace_back([&body, a, b] { body(a, b); });
  }
  for (std::thread& th : pool) th.join();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const long millions = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 32;
  const int reps = argc > 2 ? static_cast<int>(std::strtol(argv[2], nullptr, 10)) : 5;
  if (millions < 1 || millions > 4096 || reps < 1 || reps > 1000) {
    std::fprintf(stderr,
                 "usage: bench_cpu_adam [millions of parameters, 1-4096] [repetitions, 1-1000]\n");
    return 2;
  }
  const std::int64_t n = static_cast<std::int64_t>(millions) * 1000000;
  const auto size = static_cast<std::size_t>(n);
  // Four fp32 buffers of n: 16 n bytes, as the optimizer's shard holds them.
  std::vector<float> p(size, 0.5f), g(size, 1e-3f), m(size, 0.0f), v(size, 0.0f);
  const commscope::train::AdamW h;
  const int hw = std::max(1u, std::thread::hardware_concurrency());
  std::printf("bench_cpu_adam: %ld M parameters (%.2f GiB of state), %d repetitions\n", millions,
              16.0 * static_cast<double>(n) / (1024.0 * 1024 * 1024), reps);
  std::printf("%8s  %12s  %12s  %10s\n", "threads", "adam GB/s", "triad GB/s", "adam/triad");
  std::vector<int> counts = {1};
  if (hw > 1) counts.push_back(hw);
  std::int64_t step = 0;
  for (int threads : counts) {
    double adam = 1e30, triad = 1e30;
    for (int r = 0; r < reps; ++r) {
      ++step;
      adam = std::min(adam, parallel_seconds(n, threads, [&](std::int64_t a, std::int64_t b) {
                        commscope::train::adamw_step(p.data() + a, g.data() + a, m.data() + a,
                                                     v.data() + a, b - a, h, step, 1.0f);
                      }));
      // a = b + s c over three of the buffers (m = g + s v): 12 bytes an element.
      triad = std::min(triad, parallel_seconds(n, threads, [&](std::int64_t a, std::int64_t b) {
                         const float s = 1.0001f;
                         float* out = m.data();
                         const float *x = g.data(), *y = v.data();
                         for (std::int64_t i = a; i < b; ++i) out[i] = x[i] + s * y[i];
                       }));
    }
    const double adam_gbs = 28.0 * static_cast<double>(n) / adam / 1e9;
    const double triad_gbs = 12.0 * static_cast<double>(n) / triad / 1e9;
    std::printf("%8d  %12.2f  %12.2f  %10.2f\n", threads, adam_gbs, triad_gbs,
                adam_gbs / triad_gbs);
  }
  // Keeps the buffers' results observable.
  double check = 0;
  for (std::size_t i = 0; i < size; i += size / 7 + 1) check += p[i] + m[i];
  std::printf("checksum %.6g\n", check);
  return 0;
}
