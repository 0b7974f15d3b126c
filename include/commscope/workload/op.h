// Op and OpList: the ops of one training iteration for one rank (the first shared language,
// "Workload"). Compute ops carry FLOPs and bytes moved; communication ops carry collective,
// process group, element count and bytes; both carry their dependencies. Not their cost:
// that is the cost layer's business.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string_view>
#include <vector>

#include "commscope/spec/vocabulary.h"

namespace commscope {

enum class OpKind : std::uint8_t { compute, comm };
enum class Phase : std::uint8_t { forward, backward, recompute, optimizer };
// What a compute op is, as far as its efficiency is concerned.
enum class ComputeClass : std::uint8_t {
  gemm,
  attention,
  elementwise,
  norm,
  embedding,
  loss,
  optimizer,
  // Host-side framework work during which the GPU waits (DeepSpeed 0.3-0.5's per-call Python
  // loops over the group's ranks): no FLOPs, no bytes; it takes host_seconds.
  host
};
// Ops the simulator treats specially: ZeRO-3 parameter gathers (prefetched), gradient
// buckets (deferred without overlap), the flex dispatcher's MoE dispatch and combine
// (ep_forwarded: an all_to_all whose bytes are the rank's tokens each once, priced by the
// cost layer's forwarded_time and counted on the wire by its forwarded_copies), and a forward
// CP ring pass beside a one-kernel attention core (cp_ring_steps: the core that depends on it
// runs messages + 1 steps, only the last of which waits for the pass's end), and a host op on
// the data-parallel stream (data_stream: the copies of offloaded parameter shards to the GPU
// before their gathers, DeepSpeed's and FSDP's, and FSDP's of reduced gradient shards out).
enum class OpTag : std::uint8_t {
  none,
  param_gather,
  grad_bucket,
  ep_forwarded,
  cp_ring_steps,
  data_stream
};
// The part of its process group a collective runs over: the whole group, or (PyTorch FSDP's
// HYBRID_SHARD) the group's ranks on one node (the shard group) or one rank per node (the
// replicate group). group_size is then the sub-group's size.
// A comm op's ranks: its whole group as placed, or a sub-group (FSDP's HSDP): one node's ranks,
// one rank on each of group_size nodes, or `nodes`: Op::per_node ranks on each of
// group_size / per_node nodes.
enum class GroupSpan : std::uint8_t { whole, intra_node, inter_node, nodes };
std::string_view to_string(GroupSpan s);  // "", "intra-node", "inter-node", "multi-node"

std::string_view to_string(OpKind k);
std::string_view to_string(Phase p);
std::string_view to_string(ComputeClass c);

struct Op {
  OpKind kind = OpKind::compute;
  Phase phase = Phase::forward;
  ComputeClass compute = ComputeClass::elementwise;  // compute ops
  Collective collective = Collective::all_reduce;    // comm ops
  CommGroup group = CommGroup::data;                 // comm ops
  DType dtype = DType::fp32;
  // Only the last micro-batch of an iteration runs this op (DDP gradient buckets under
  // gradient accumulation); otherwise an op of the forward/backward lists runs every
  // micro-batch.
  bool last_microbatch_only = false;
  // Only the first micro-batch's forward has this op (Chunk::forward_first: Megatron-LM's
  // overlapped parameter all-gathers; FSDP's gathers of parameters kept for the whole step).
  bool first_microbatch_only = false;
  OpTag tag = OpTag::none;
  GroupSpan span = GroupSpan::whole;  // comm ops
  // A parameter all-gather under --fp8-param-gather whose GEMM weights travel in FP8 and the
  // rest in dtype (bytes counts both): describe labels it float8+dtype.
  bool fp8_weights = false;
  std::int8_t peer = 0;           // send/recv: +1 next stage, -1 previous stage
  std::uint16_t per_node = 0;     // GroupSpan::nodes: the sub-group's ranks on one node
  std::int32_t layer = kNoLayer;  // transformer block (encoder blocks first), or k*Layer
  std::int32_t index = 0;         // bucket number, or 0
  std::string_view name;          // static string: "qkv", "attn_scores", "ddp_bucket", ...

  // compute
  double flops = 0;                  // floating-point operations on this rank
  double mem_bytes = 0;              // bytes read and written in device memory
  std::int64_t m = 0, n = 0, k = 0;  // GEMM shape on this rank (0 when not a GEMM)
  std::int64_t grad_params = 0;      // parameters whose gradient this op completes
  double host_seconds = 0;           // ComputeClass::host: the host work's duration

  // comm
  int group_size = 1;  // ranks in the process group
  // A send's messages, one after another, each with its own latency and bytes / messages of
  // the bytes: a CP ring's passes (Transformer Engine's one batched send and receive a step).
  std::int32_t messages = 1;
  std::int64_t elements = 0;  // nccl-tests "count" x ranks where the buffer is split: see bytes
  // Bytes per rank in nccl-tests' "size" sense: the all-reduce buffer, the all-gather output,
  // the reduce-scatter input, the broadcast buffer, the message of a send or receive.
  double bytes = 0;

  std::uint32_t dep_begin = 0, dep_count = 0;  // into OpList::deps

  bool is_matmul() const {
    return kind == OpKind::compute &&
           (compute == ComputeClass::gemm || compute == ComputeClass::attention);
  }
  // Bytes that cross this rank's links, one direction, under a ring: bytes x bus factor (not
  // for an OpTag::ep_forwarded op, whose copies depend on the placement: comm_volume's).
  double wire_bytes() const { return bytes * bus_factor(collective, group_size); }
};

// Ops of one list (one micro-batch's forward, or backward, or the once-per-iteration step),
// in program order. Dependencies are indices of earlier ops of the same list; dependencies
// across lists and micro-batches follow from the schedule.
class OpList {
 public:
  std::uint32_t add(const Op& op, std::initializer_list<std::uint32_t> deps = {});
  std::uint32_t add(const Op& op, std::span<const std::uint32_t> deps);
  std::span<const std::uint32_t> deps_of(std::uint32_t i) const {
    const Op& o = ops_[i];
    return {deps_.data() + o.dep_begin, o.dep_count};
  }
  const std::vector<Op>& ops() const { return ops_; }
  std::size_t size() const { return ops_.size(); }
  bool empty() const { return ops_.empty(); }
  const Op& operator[](std::size_t i) const { return ops_[i]; }
  // For builders: the op just added, to adjust in place (not its dependencies).
  Op& edit(std::uint32_t i) { return ops_[i]; }
  std::uint32_t last() const { return static_cast<std::uint32_t>(ops_.size() - 1); }
  void reserve(std::size_t n) {
    ops_.reserve(n);
    deps_.reserve(2 * n);
  }

 private:
  std::vector<Op> ops_;
  std::vector<std::uint32_t> deps_;
};

}  // namespace commscope
