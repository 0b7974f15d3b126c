// Limits: the largest inputs commscope accepts, in one place. Every loader and plan check
// enforces them before anything proportional to them is allocated, so that describe, predict
// and validate answer any input within about a second or refuse it with one line naming the
// field, the value and the limit. Each limit is far above any published training run
// (docs/limits.md gives the reasoning); raising one is safe as long as the products noted
// beside it stay within 64-bit integers and the work stays bounded.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "commscope/util/result.h"

namespace commscope::limits {

// GPUs (ranks) in one job, and each of DP, TP, nodes: 2^20. The largest clusters of 2025
// hold about 200,000 GPUs. Keeps DP x TP x PP and per-rank products well inside 64 bits.
inline constexpr std::int64_t kMaxGpus = std::int64_t{1} << 20;
// Transformer layers (encoder + decoder): 4096; published models have at most a few hundred.
// Workload building is linear in it.
inline constexpr std::int64_t kMaxLayers = 4096;
// Parameters of a model: 2^50 (about 1.1e15; the largest published models have a few 1e12).
// Each size above may be within its limit while their product is not: the bytes of weights,
// gradients and optimizer state (16 per parameter) stay far inside 64 bits.
inline constexpr std::int64_t kMaxParameters = std::int64_t{1} << 50;
// Gradient or parameter buckets (each one collective): 2^20, with the model's parameters over
// them; DeepSpeed's default 5e8 elements gives 2,000 for a 1T model, PyTorch DDP's 25 MB 160,000.
inline constexpr std::int64_t kMaxBuckets = std::int64_t{1} << 20;
// Multi-token-prediction depths: 64; DeepSeek-V3 trains 1. Each is one more block on the last
// pipeline stage.
inline constexpr std::int64_t kMaxMtpLayers = 64;
// Model width, head dimension, attention heads: 2^18; the 1T-parameter GPT has 25,600.
inline constexpr std::int64_t kMaxHidden = std::int64_t{1} << 18;
// MLP inner width: 2^20 (4 x the largest hidden).
inline constexpr std::int64_t kMaxFfn = std::int64_t{1} << 20;
// Vocabulary: 2^24 tokens; the largest published vocabularies have about 256,000.
inline constexpr std::int64_t kMaxVocab = std::int64_t{1} << 24;
// Tokens per sample (sequence length): 2^24; the longest training contexts are a few million.
inline constexpr std::int64_t kMaxSeqLength = std::int64_t{1} << 24;
// Samples per micro-batch: 2^20, and tokens per micro-batch (micro-batch x sequence length):
// 2^32. Keeps activation sizes (tokens x hidden) and the batch products inside 64 bits.
inline constexpr std::int64_t kMaxMicroBatch = std::int64_t{1} << 20;
inline constexpr std::int64_t kMaxTokensPerMicroBatch = std::int64_t{1} << 32;
// Samples per iteration (global batch): 2^32.
inline constexpr std::int64_t kMaxGlobalBatch = std::int64_t{1} << 32;
// Micro-batches per iteration (gradient accumulation steps): 2^16.
inline constexpr std::int64_t kMaxMicroBatches = std::int64_t{1} << 16;
// Pipeline tasks the schedule places: PP x virtual stages x micro-batches: 2^20 (the
// 1T-parameter GPT on 3072 GPUs has 64 x 64 = 4096). The simulator's memory and time are
// linear in it.
inline constexpr std::int64_t kMaxPipelineTasks = std::int64_t{1} << 20;
// Events in a --trace timeline (micro-batches x ops): 2^20, about 150 MB of Chrome JSON.
inline constexpr std::int64_t kMaxTraceEvents = std::int64_t{1} << 20;
// Plans in one predict sweep (the product of the comma lists' lengths): 100,000.
inline constexpr std::int64_t kMaxSweepPlans = 100000;
// Pipeline tasks (PP x virtual stages x micro-batches of each plan with PP > 1; 1 for PP 1,
// whose micro-batches the simulator does not step through) simulated by one predict sweep or
// plan search: 2^26, about 12 s at the 0.18 us a task measured on the 1T GPT (64 plans of 2^20
// tasks, PP 64 x 2 virtual stages x 8,192 micro-batches: 11.8 s). Each plan within
// kMaxPipelineTasks, 400 of them took over a minute, 100,000 would take hours (found by
// probing, 2026-12-02).
inline constexpr std::int64_t kMaxSimulatedTasks = std::int64_t{1} << 26;
inline std::int64_t simulated_tasks(int pp, int virtual_stages, std::int64_t microbatches) {
  return pp > 1 ? std::int64_t{pp} * virtual_stages * microbatches : 1;
}
// Rows in a measured-run CSV for validate and calibrate: 1,000,000.
inline constexpr std::int64_t kMaxMeasuredRows = 1000000;
// Ops of the workloads validate and calibrate hold at once (each measured run's workload is
// built once and kept, as calibration changes costs, not ops): 2^23, about 1.2 GB at the
// ~150 bytes an op measured on vTrain's rows (about 2,200 ops a row: some 3,700 rows at once;
// 20,000 rows took 3.5 GB before this bound, and the row limit alone allowed 175 GB).
inline constexpr std::int64_t kMaxPreparedOps = std::int64_t{1} << 23;
// A measured iteration: 1 us to 1e6 s (11.6 days), and a measured memory peak: 1 MiB to 1e6
// GiB. Outside, a relative error has no meaning (1e-300 s gave a 300-digit percentage).
inline constexpr double kMinMeasuredIterationS = 1e-6;
inline constexpr double kMaxMeasuredIterationS = 1e6;
inline constexpr double kMinMeasuredMemoryGiB = 1.0 / 1024;
inline constexpr double kMaxMeasuredMemoryGiB = 1e6;

// Error{"<field>: expected at most <limit> (<what>), got <value>"} when value > limit.
inline Status check_at_most(std::string_view field, std::int64_t value, std::int64_t limit,
                            std::string_view what) {
  if (value <= limit) return {};
  return Error{std::string(field) + ": expected at most " + std::to_string(limit) + " (" +
               std::string(what) + "), got " + std::to_string(value)};
}

}  // namespace commscope::limits
