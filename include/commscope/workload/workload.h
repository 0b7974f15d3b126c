// Workload: the ops of one training iteration for each distinct rank role (one per pipeline
// stage; TP and DP ranks of a stage are alike), built from (model, plan). The simulator runs
// it with modelled costs, the trainer with real kernels, a replay with stand-in compute.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "commscope/spec/scenario.h"
#include "commscope/workload/op.h"

namespace commscope {

// One model chunk of a pipeline rank: a contiguous run of blocks (one chunk per rank unless
// the schedule is interleaved).
struct Chunk {
  int virtual_stage = 0;  // chunk * pp + stage
  int first_layer = 0;    // blocks [first_layer, first_layer + layers)
  int layers = 0;
  OpList forward;   // one micro-batch forward
  OpList backward;  // one micro-batch backward (recompute included)
  // The first micro-batch's forward where it differs from `forward` (Megatron-LM's
  // --overlap-param-gather: the step's parameter all-gathers, waited for by the modules that
  // use them; FSDP's SHARD_GRAD_OP reducing once a step: the only gathers of the step);
  // empty: every forward is `forward`.
  OpList forward_first;
};

struct Role {
  int stage = 0;  // pipeline stage
  int ranks = 1;  // ranks that play this role (DP x TP)
  std::vector<Chunk> chunks;
  OpList step;  // once per iteration, after the last backward
  std::int64_t params =
      0;  // parameters this rank holds (TP shard of its stage, tied copy included)
  // Of params, the routed experts' (split over EP x expert TP), whose gradients and optimizer
  // states go with the expert-data-parallel group; 0 for a dense model.
  std::int64_t expert_params = 0;
  // DeepSpeed ZeRO-3 (--framework deepspeed): the most parameter elements its coordinator holds
  // gathered at once (its replay in the builder: a module's, the prefetched, those kept for
  // reuse); 0 otherwise.
  std::int64_t zero3_live_params = 0;
  // PyTorch FSDP (--framework fsdp): the largest root unit of its chunks (what no block's unit
  // holds, or the whole chunk under --fsdp-wrap model), gathered from its forward to the end of
  // its backward; 0 otherwise.
  std::int64_t fsdp_root_params = 0;
};

struct Workload {
  Scenario scenario;
  int microbatches = 1;  // per iteration (gradient-accumulation steps)
  std::vector<Role> roles;
};

// Builds the workload. The scenario must come from resolve_scenario (checked sizes).
Workload build_workload(const Scenario& sc);
// The same, every pipeline stage's lists built afresh: build_workload copies a middle stage's
// from the stage before when its blocks are the same (tests compare the two).
Workload build_workload_every_stage(const Scenario& sc);
// How many pipeline stages build_workload copies so (for tests and benchmarks).
int stages_copied(const Scenario& sc);
// build_workload's roles and chunks (layer spans, parameters) without their op lists: all that
// memory_per_rank reads, for a memory check that does not build the ops (DeepSpeed ZeRO-3's
// roles replay its coordinator on a scratch build for Role::zero3_live_params).
Workload build_layout(const Scenario& sc);

// How often an op of a chunk list runs per iteration.
// `rounds`: pipeline schedules per iteration (ParallelPlan::pipeline_rounds), each with its
// first and last micro-batch.
inline std::int64_t runs_per_iteration(const Op& op, int microbatches, std::int64_t rounds = 1) {
  return op.last_microbatch_only || op.first_microbatch_only ? rounds : microbatches;
}

// ---- summaries ----

// Communication of one rank of a role per iteration, by (group, collective).
struct CommVolume {
  CommGroup group;
  Collective collective;
  int group_size = 1;
  DType dtype = DType::fp32;
  bool fp8_weights = false;  // Op::fp8_weights: GEMM weights in FP8, the rest in dtype
  std::int64_t calls = 0;
  std::int64_t messages = 0;  // Op::messages over the calls (the CP ring's steps)
  double bytes = 0;           // sum of nccl-tests sizes over the calls
  double wire_bytes = 0;      // sum of bytes x bus factor: what crosses this rank's links
};
std::vector<CommVolume> comm_volume(const Workload& w, const Role& r);

// One collective of the pattern a role issues (describe's "collective pattern"): the ops of
// one name, collective, (sub-)group, type and phase, with how often they run per iteration.
struct PatternCollective {
  std::string_view name;  // the op's name: "ds_param_all_gather", "fsdp_reduce_scatter", ...
  Collective collective = Collective::all_reduce;
  CommGroup group = CommGroup::data;
  GroupSpan span = GroupSpan::whole;
  int per_node = 0;  // GroupSpan::nodes: the ranks on one node
  int group_size = 1;
  DType dtype = DType::fp32;
  bool fp8_weights = false;      // Op::fp8_weights
  Phase phase = Phase::forward;  // where it is issued: forward, backward, recompute, optimizer
  // How often: every micro-batch, the last micro-batch only, once per iteration (the step), in
  // the first micro-batch's forward, or (Megatron's interleaved parameter gathers,
  // ParallelPlan::megatron_gathers_ahead) once per chunk, ahead of its first forward. With
  // several pipeline schedules an iteration (ParallelPlan::pipeline_rounds) the first and last
  // micro-batch's are each schedule's, and the step's gradient reductions end each schedule.
  enum class Every : std::uint8_t {
    microbatch,
    last_microbatch,
    iteration,
    first_microbatch,
    ahead_of_first_microbatch,
    schedule_end,
    schedule_first_microbatch
  } every;
  std::int64_t calls = 0;             // per iteration
  double bytes = 0;                   // per iteration: the sum of nccl-tests sizes
  double min_call = 0, max_call = 0;  // the smallest and largest call
  int messages = 1;                   // Op::messages: each call's (the CP ring's steps)
};
std::vector<PatternCollective> comm_pattern(const Workload& w, const Role& r);
std::string_view to_string(PatternCollective::Every e);  // "micro-batch", ...

struct FlopCount {
  double model = 0;     // matmul FLOPs of forward and backward, all ranks, per iteration
  double hardware = 0;  // model + recomputed matmuls
};
FlopCount iteration_flops(const Workload& w);
// The tokens of one iteration, as tokens/s and FLOP per token count them: global batch x
// sequence, the encoder's and the decoder's for an encoder-decoder (T5).
double iteration_tokens(const Scenario& sc);

// Memory of one rank of a role, by kind.
struct MemoryBreakdown {
  Bytes weights, gradients, optimizer, activations, comm_buffers;
  Bytes total() const { return weights + gradients + optimizer + activations + comm_buffers; }
};
MemoryBreakdown memory_per_rank(const Workload& w, const Role& r);

// The parameters whose optimizer state one rank of a role holds and steps: its dense parameters
// over the DP x CP ranks under ZeRO >= 1, its routed experts' over the expert-data group where
// their states are sharded; all of them otherwise.
double optimizer_shard_params(const Scenario& sc, const Role& r);
// Whether a plan shards its routed experts' optimizer states (and reduce-scatters their
// gradients) over the expert-data group: ZeRO >= 1 or Megatron's distributed optimizer, with
// more than one expert-data rank.
bool expert_states_sharded(const ParallelPlan& p);
// The largest of them over a workload's roles (the rank a ZeRO-Offload node waits for).
double largest_optimizer_shard(const Workload& w);

// DeepSpeed ZeRO-Offload's step (ParallelPlan::offload_optimizer; docs/workload.md, "Optimizer
// offload") for a rank whose optimizer shard holds `owned` parameters: its parts in order, each
// a host op of the role's step list (the GPU waits for it); none without it.
struct OffloadPart {
  // offload_grad_accumulate (gradient accumulation only), offload_grad_copy, cpu_adam,
  // offload_param_copy (not under --offload-param); param_offload_step's offload_param_out,
  // cpu_param_cast
  std::string_view name;
  // Bytes over the rank's host link, or, for cpu_adam, through the node's host memory (the
  // node's ranks step their shards at once).
  double bytes = 0;
  double bandwidth = 0;  // bytes per second
  double seconds() const { return bytes / bandwidth; }
};
std::vector<OffloadPart> offload_step(const Scenario& sc, double owned);
// DeepSpeed ZeRO-3's parameter offload without ZeRO-Offload (ParallelPlan::offload_param, the
// optimizer on the GPU): the step's updated partition out to the host, offload_param_out, and
// under mixed precision its cast there, cpu_param_cast; none otherwise.
std::vector<OffloadPart> param_offload_step(const Scenario& sc, double owned);
// PyTorch FSDP's CPU offload (ParallelPlan::fsdp_cpu_offload): the step's torch AdamW on the
// CPU shards, cpu_adamw; none without it.
std::vector<OffloadPart> fsdp_offload_step(const Scenario& sc, double owned);
// Megatron-Core's optimizer CPU offload (ParallelPlan::optimizer_cpu_offload;
// docs/workload.md, "Megatron optimizer CPU offload") for a shard of `owned` parameters: the
// parameters Adam steps on the GPU, and the host path's parts in order: offload_grad_copy,
// cpu_adamw, cpu_param_cast, offload_param_copy.
struct MegatronOffloadStep {
  double gpu_params = 0;
  std::vector<OffloadPart> parts;
};
MegatronOffloadStep megatron_offload_step(const Scenario& sc, double owned);
// The host path's seconds: the parts' sum, or under --overlap-cpu-optimizer-d2h-h2d the slowest
// of the copies out, the CPU's work and the copies back (a pipeline; its fill and drain, one
// parameter's copies, not counted).
double megatron_offload_seconds(const MegatronOffloadStep& s, bool overlapped);
// The copies of parameter shards to the GPU (--offload-param, --fsdp-cpu-offload: the
// builder's offload_param_fetch ops) in one micro-batch's forward and backward, the first
// micro-batch's where it differs, of the role that copies longest.
struct ParamFetches {
  int copies = 0;
  double bytes = 0;
  double seconds = 0;
};
ParamFetches param_fetches(const Workload& w);
// FSDP2's additions of each reduced gradient shard to the host's under --fsdp-cpu-offload with
// gradients reduced every micro-batch of several (the builder's cpu_grad_add ops) in one
// micro-batch, a rank's bytes; none otherwise.
ParamFetches grad_adds(const Workload& w);
// Host memory a rank's offloaded shard takes: the optimizer states and the fp32 gradients
// (ZeRO-Offload), the 16-bit parameter partition (--offload-param), the fp32 shard, its
// gradients and Adam's moments (--fsdp-cpu-offload).
Bytes offload_host_bytes(const Scenario& sc, double owned);
// What a node's ranks hold in host memory under any of those offloads (each as the fullest
// role's rank), 0 without one; and whether that fits the system's node.host_memory_gib (true
// where the preset states none).
Bytes offload_host_bytes_per_node(const Workload& w);
// What those bytes are, in words ("optimizer states and fp32 gradients", "16-bit parameter
// partitions", both, or FSDP's shards, gradients and moments), for describe's and predict's
// lines.
std::string offload_host_contents(const ParallelPlan& p);
bool offload_fits_host(const Workload& w);

// The GEMM weights of a role's transformer blocks on one of its ranks (the MTP blocks on the
// last stage included): the dense ones over TP and its own experts over EP x expert TP, no
// replicated norms or router (block_sharded_params). What Transformer Engine keeps in FP8.
struct GemmWeights {
  double total = 0;    // every block's
  double experts = 0;  // of total, the routed experts'
  double largest = 0;  // the largest block's
};
GemmWeights role_gemm_weights(const Scenario& sc, const Role& r);

// Activation bytes one block keeps for backward for one micro-batch on one rank, after
// Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models"),
// generalised to GQA, gated MLPs, cross-attention and no dropout. `full`: whether the block
// replays its forward in full (keeping only its input); unset, the plan's granularity says,
// as for every block under --recompute-method uniform (ParallelPlan::full_recompute_at gives
// it per block under block).
Bytes block_activation_bytes(const Scenario& sc, int layer,
                             std::optional<bool> full = std::nullopt);

// Activation bytes block `layer`'s backward re-creates for one micro-batch on one rank when it
// replays what its recompute did not keep: what the block keeps without recompute less what it
// keeps (`full` as for block_activation_bytes); 0 without recompute. memory_per_rank counts the
// largest of a stage's blocks once at the stage's peak (docs/workload.md, "Replayed
// activations").
Bytes block_replay_bytes(const Scenario& sc, int layer, std::optional<bool> full = std::nullopt);

// Micro-batches whose activations a stage holds at its peak, per chunk of work.
std::int64_t inflight_microbatches(const Scenario& sc, int stage);

// The activation peak of a stage whose chunks keep chunk_bytes each per micro-batch (one entry
// per chunk, in chunk order): max chunk x inflight_microbatches, except under the interleaved
// schedule with chunks of unequal bytes (uneven stages, an embedding- or loss-only chunk),
// where Megatron's forward/backward order is followed and the largest sum held is returned.
Bytes stage_peak_activations(const Scenario& sc, int stage, const std::vector<Bytes>& chunk_bytes);

}  // namespace commscope
