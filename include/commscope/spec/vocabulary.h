// The vocabulary every layer shares, at the bottom of the house: data types, collectives,
// process groups, the special layer numbers and nccl-tests' bus factor. Each enum's names come
// from one table (src/spec/vocabulary.cpp) that both printing and parsing use. Nothing here
// loads a file, so the timeline, the trace reader, the bench harness and the GPT model include
// this and not the system loader.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace commscope {

// Element types of tensors and buffers.
enum class DType : std::uint8_t { fp32, fp16, bf16, fp64, int32, int64, int8, fp8 };
// "float32", "float16", "bfloat16", "float64", "int32", "int64", "int8", "float8".
std::string_view to_string(DType d);
std::optional<DType> dtype_from_name(std::string_view name);
std::string dtype_choices();  // "float32|float16|..."
int dtype_bytes(DType d);

enum class Collective : std::uint8_t {
  all_reduce,
  all_gather,
  reduce_scatter,
  broadcast,
  reduce,
  all_to_all,
  send,
  recv
};
inline constexpr std::size_t kCollectiveCount = 8;
// "all_reduce", "all_gather", ... (commscope's own spelling, also its JSON keys).
std::string_view to_string(Collective c);
// The collective a name stands for, in any of the spellings met in practice: commscope's
// ("all_reduce"), PyTorch's "Collective name" ("allreduce", "_allgather_base"), NCCL kernel
// names ("ncclDevKernel_ReduceScatter_RING_LL"), "sendrecv". False when none.
bool collective_from_name(std::string_view name, Collective& out);
// Exactly commscope's own spelling (to_string's), as in its JSON keys.
std::optional<Collective> collective_from_key(std::string_view key);

// Process groups in Megatron's terms; "embedding" is the first and last pipeline stage. With
// context parallelism "data" is Megatron's data-parallel group with context parallelism (DP x
// CP, where dense gradients are reduced); "expert" is the expert-parallel group (the MoE
// all-to-all), "context" the context-parallel ring, "expert_data" the expert-data-parallel
// group where expert gradients are reduced.
enum class CommGroup : std::uint8_t {
  data,
  tensor,
  pipeline,
  embedding,
  expert,
  context,
  expert_data
};
inline constexpr std::size_t kCommGroupCount = 7;
std::string_view to_string(CommGroup g);  // "data", "tensor", "pipeline", "embedding", ...
std::optional<CommGroup> comm_group_from_name(std::string_view name);

// nccl-tests' bus-bandwidth factor for a collective over n ranks: busbw = algbw x factor.
// all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n; the rest 1.
double bus_factor(Collective c, int n);

// Layer index of ops and events that belong to no transformer block.
inline constexpr std::int32_t kEmbeddingLayer = -1;
inline constexpr std::int32_t kHeadLayer = -2;
inline constexpr std::int32_t kNoLayer = -3;

}  // namespace commscope
