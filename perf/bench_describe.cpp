// How long `describe` takes to build and summarise a workload: the 1T Megatron model on
// 3072 GPUs (TP 8, PP 64, 64 micro-batches), the target being well under 50 ms, and
// GPT-2 Large on 16 GPUs as a small baseline in the same process. Prints medians and ratios.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "commscope/report/describe.h"
#include "commscope/spec/scenario.h"

namespace {

using Clock = std::chrono::steady_clock;

// Median wall time in ms of resolve + build + describe + render (presets already parsed).
double median_ms(const commscope::ModelSpec& m, const commscope::SystemSpec& s,
                 const commscope::NetworkProtocol& n, const commscope::PlanInput& p, int reps) {
  std::vector<double> t;
  std::size_t sink = 0;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    auto sc = commscope::resolve_scenario(m, s, n, p);
    if (!sc.ok()) {
      std::fprintf(stderr, "bench: %s\n", sc.error().message.c_str());
      std::exit(2);
    }
    commscope::Workload w = commscope::build_workload(*sc);
    commscope::Description d = commscope::describe(w);
    sink += commscope::render_describe(w, d, commscope::Format::json).size();
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  if (sink == 0) std::puts("");
  return t[t.size() / 2];
}

}  // namespace

int main() {
  using namespace commscope;
  auto big_model = load_model("megatron-1t");
  auto small_model = load_model("gpt2-large");
  auto dgx = load_system("dgx-a100-80gb");
  auto polaris = load_system("polaris");
  auto ib = load_network("ib-hdr-200");
  auto roce = load_network("roce-100");
  if (!big_model.ok() || !small_model.ok() || !dgx.ok() || !polaris.ok() || !ib.ok() ||
      !roce.ok()) {
    std::fprintf(stderr, "bench: presets not found (set COMMSCOPE_PRESETS)\n");
    return 2;
  }
  PlanInput big;
  big.gpus = 3072;
  big.tp = 8;
  big.pp = 64;
  big.micro_batch = 1;
  big.global_batch = 6 * 64;  // DP 6 x 64 micro-batches
  PlanInput small;
  small.nodes = 4;
  small.micro_batch = 4;

  // Whole-process cost of loading the presets, for scale.
  auto t0 = Clock::now();
  for (int i = 0; i < 20; ++i) (void)load_model("megatron-1t");
  double load_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / 20;

  double small_ms = median_ms(*small_model, *polaris, *roce, small, 200);
  double big_ms = median_ms(*big_model, *dgx, *ib, big, 30);
  std::printf("describe gpt2-large, 16 GPUs (baseline)          : %8.3f ms\n", small_ms);
  std::printf(
      "describe megatron-1t, 3072 GPUs, TP8 PP64 m=64     : %8.3f ms  (%.1fx the baseline)\n",
      big_ms, big_ms / small_ms);
  std::printf("load one model preset from JSON                  : %8.3f ms\n", load_ms);
  std::printf("target: 1T describe well under 50 ms -> %.1f%% of the budget\n",
              100.0 * big_ms / 50.0);
  return 0;
}
