// ParallelPlan: how one training job is split over GPUs (DP, ZeRO, TP, SP, PP), its batch
// sizes and precision. PlanInput is what a user gave (every field optional), merged from
// defaults, a DeepSpeed config and command-line flags; resolve_scenario() turns it into a
// ParallelPlan checked against the model and the system.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "commscope/spec/system.h"
#include "commscope/util/result.h"
#include "commscope/util/units.h"

namespace commscope {

enum class Precision : std::uint8_t { fp32, fp16, bf16 };  // fp16/bf16: mixed, fp32 master
// op: torchtitan's op-level selective activation checkpointing (activation_checkpoint.mode
// selective, selective_ac_option "op"): every block is checkpointed and, of what its forward
// computes, the outputs of every other matrix product (the first, third, ...), of the attention
// kernel and of tensor-parallel reduce-scatters are kept; the rest is replayed in backward.
enum class Recompute : std::uint8_t { none, selective, full, op };
// Megatron-Core's --recompute-modules under selective recompute (transformer_config.py), as
// bits of ParallelPlan::recompute_modules: the parts of a block replayed in backward instead of
// keeping their activations (docs/workload.md, "Recompute modules"). core_attn is Megatron's
// default and commscope's selective recompute before the flag.
namespace recompute_module {
inline constexpr std::uint8_t core_attn = 1;    // the unfused attention core (scores, softmax)
inline constexpr std::uint8_t mla_up_proj = 2;  // latent attention's up-projections
inline constexpr std::uint8_t mlp = 4;          // a dense block's MLP (not a MoE layer's)
inline constexpr std::uint8_t moe_act = 8;      // the routed experts' activation function
inline constexpr std::uint8_t layernorm = 16;   // the two pre-norms of a block
}  // namespace recompute_module
// "core_attn,mla_up_proj" (commas or spaces) into those bits; an unknown name, or one Megatron
// has and commscope does not model (moe, shared_experts, ...), is an error saying which.
Result<std::uint8_t> parse_recompute_modules(std::string_view names);
std::string recompute_modules_string(std::uint8_t modules);  // "core_attn, mla_up_proj
enum class Schedule : std::uint8_t { gpipe, one_f_one_b, interleaved };
// How ranks map to (tensor, data, pipeline) coordinates, fastest first. Megatron's default is
// tp-dp-pp (rank = t + TP (d + DP p)); --use-tp-pp-dp-mapping gives tp-pp-dp.
enum class RankOrder : std::uint8_t { tp_dp_pp, tp_pp_dp };

std::string_view to_string(Precision p);
std::string_view to_string(Recompute r);
std::string_view to_string(Schedule s);
std::optional<Precision> precision_from_name(std::string_view s);
std::optional<Recompute> recompute_from_name(std::string_view s);
std::optional<Schedule> schedule_from_name(std::string_view s);
std::string_view to_string(RankOrder o);
std::optional<RankOrder> rank_order_from_name(std::string_view s);
// Whose collective pattern the workload follows (docs/workload.md, "Framework patterns").
// `none` is commscope's own idealised pattern (ZeRO-3 gathers one coalesced buffer per block,
// one block of prefetch), kept as the default so that every prediction is unchanged unless a
// framework is chosen.
enum class Framework : std::uint8_t { none, megatron, deepspeed, fsdp };
// PyTorch FSDP's ShardingStrategy; hybrid_shard_zero2 is its _HYBRID_SHARD_ZERO2 (HSDP that
// keeps the gathered parameters after forward; FSDP2's HSDP with reshard_after_forward=False).
enum class FsdpSharding : std::uint8_t {
  full_shard,
  shard_grad_op,
  hybrid_shard,
  no_shard,
  hybrid_shard_zero2
};
// PyTorch FSDP's BackwardPrefetch (none: backward_prefetch=None).
enum class FsdpPrefetch : std::uint8_t { backward_pre, backward_post, none };
// FSDP units: one per transformer block plus the root (transformer_auto_wrap_policy), or the
// whole model as one unit (no auto-wrap policy).
enum class FsdpWrap : std::uint8_t { block, model };
// When FSDP reduces the gradients under gradient accumulation: every micro-batch (FSDP's
// default); in the last micro-batch's backward, the others accumulating unsharded gradients
// (FSDP's no_sync(), FSDP2's set_requires_gradient_sync(False)); or once after the last
// backward (PyTorch's pipelining runtime, torch.distributed.pipelining: its stages accumulate
// unsharded and reduce in one post-backward pass). Without resharding after forward
// (shard_grad_op) the parameters then stay gathered from the first forward to the reduction.
enum class FsdpGradSync : std::uint8_t { micro_batch, last_micro_batch, step };
// The loss's cross entropy, which sets what the last stage holds around the loss
// (docs/workload.md, "Memory per rank"): Megatron-Core's vocab-parallel cross entropy (the
// default), Transformer Engine's fused one (Megatron-LM --cross-entropy-loss-fusion),
// PyTorch's torch.nn.functional.cross_entropy on the logits cast to fp32 (torchtitan), or
// FlashAttention's fused CrossEntropyLoss (llm-foundry's default loss_fn).
enum class CrossEntropy : std::uint8_t { vocab_parallel, fused, torch, flash_attn };
std::string_view to_string(Framework f);
std::string_view to_string(FsdpSharding s);
std::string_view to_string(FsdpPrefetch p);
std::string_view to_string(FsdpWrap w);
std::string_view to_string(FsdpGradSync s);
std::string_view to_string(CrossEntropy c);
std::optional<Framework> framework_from_name(std::string_view s);
std::optional<FsdpSharding> fsdp_sharding_from_name(std::string_view s);
std::optional<FsdpPrefetch> fsdp_prefetch_from_name(std::string_view s);
std::optional<FsdpWrap> fsdp_wrap_from_name(std::string_view s);
std::optional<FsdpGradSync> fsdp_grad_sync_from_name(std::string_view s);
std::optional<CrossEntropy> cross_entropy_from_name(std::string_view s);
// Gradient compression schemes that replace the data-parallel gradient reduction
// (docs/workload.md, "Compressed communication"): PowerSGD (Vogels et al. 2019, PyTorch's
// powerSGD_hook) and 1-bit Adam (Tang et al. 2021, DeepSpeed's OnebitAdam).
enum class GradCompression : std::uint8_t { none, powersgd, onebit };
std::string_view to_string(GradCompression c);
// The attention kernel (docs/workload.md, "Attention kernels"): `standard` materialises the
// s x s scores in HBM (softmax and dropout as their own kernels); `flash` is FlashAttention-2
// (Dao 2023): one fused kernel, no s x s tensor in HBM, the scores recomputed in backward.
enum class AttentionKernel : std::uint8_t { standard, flash };
std::string_view to_string(AttentionKernel a);
std::optional<AttentionKernel> attention_kernel_from_name(std::string_view s);
// Whose kernel runs the flash attention (Megatron-Core --attention-backend's names): `fused` is
// cuDNN's fused attention, which Transformer Engine prefers on Hopper and later
// (dot_product_attention/utils.py: "Disabling FlashAttention to give FusedAttention preference
// on Hopper+"); `flash` is FlashAttention's own kernels (Dao's library, its Triton version,
// PyTorch SDPA's flash backend), which PyTorch FSDP, DeepSpeed and llm-foundry runs call. Only
// the kernel's speed differs (the system's calibration, `flash_attention_efficiency`).
enum class AttentionBackend : std::uint8_t { fused, flash };
std::string_view to_string(AttentionBackend b);
std::optional<AttentionBackend> attention_backend_from_name(std::string_view s);
// How context parallelism moves K and V (Megatron-LM --cp-comm-type, Transformer Engine's
// implementations): `p2p` passes KV chunks round the CP ring beside the attention blocks
// (AttnFuncWithCPAndKVP2P); `all_gather` all-gathers K and V before attention and, in backward,
// all-gathers them again and reduce-scatters dK and dV (AttnFuncWithCPAndKVAllGather; the
// method of Llama 3's training, Meta 2024 sec. 3.3.2); `a2a` scatters the attention heads over
// the CP ranks and gathers the sequence with all-to-alls of Q, K, V before the attention core
// and of its output after it (AttnFuncWithCPAndQKVOA2A, DeepSpeed-Ulysses: Jacobs et al. 2023);
// `a2a_p2p` ("a2a+p2p", hierarchical CP) does both: the all-to-alls over the inner level of
// Megatron's --hierarchical-context-parallel-sizes, the ring over the outer one.
enum class CpCommType : std::uint8_t { p2p, all_gather, a2a, a2a_p2p };
std::string_view to_string(CpCommType c);
// The form in words, as describe's plan line and train's header name it: "ring", "all-gather",
// "all-to-all", or for a2a+p2p "all-to-all over A, ring over CP / A" (A = cp_a2a).
std::string cp_form_text(CpCommType c, int cp, int cp_a2a);
std::optional<CpCommType> cp_comm_type_from_name(std::string_view s);
// How a MoE layer moves its tokens to the experts and back (Megatron-LM
// --moe-token-dispatcher-type; docs/workload.md, "The flex dispatcher"): `alltoall` is NCCL's
// all-to-all(v), one copy of a token for each of its top-k experts on another EP rank;
// `flex` is DeepEP's or HybridEP's fused dispatch and combine, which sends a token once over
// the network to each node holding one of its experts and forwards it over NVLink there to
// each GPU holding one (once per GPU, whatever the number of its experts there).
enum class MoeDispatcher : std::uint8_t { alltoall, flex };
std::string_view to_string(MoeDispatcher d);
std::optional<MoeDispatcher> moe_dispatcher_from_name(std::string_view s);

// Data type of weights, activations and gradients on the wire for a precision.
DType compute_dtype(Precision p);

struct ParallelPlan {
  int dp = 1;              // data-parallel size
  int tp = 1;              // tensor-parallel size
  int pp = 1;              // pipeline-parallel size
  int virtual_stages = 1;  // model chunks per pipeline rank (interleaved schedule)
  bool sequence_parallel = false;
  int zero = 0;  // ZeRO stage 0..3
  std::int64_t micro_batch = 1;
  std::int64_t global_batch = 1;
  std::int64_t grad_accum = 1;  // micro-batches per iteration = global / (micro x dp)
  // Pipeline schedules per iteration, each of grad_accum / pipeline_rounds micro-batches with
  // its own fill and drain, its first forward's parameter gathers and its last backward's
  // gradient reduction (torchtitan under PP: one pp_schedule.step() per accumulation step,
  // each ending in PyTorch's REDUCE_GRAD); the optimizer steps once, after the last. 1: the
  // iteration's micro-batches in one schedule, as Megatron-LM and DeepSpeed run them.
  std::int64_t pipeline_rounds = 1;
  std::int64_t microbatches_per_round() const { return grad_accum / pipeline_rounds; }
  // The interleaved schedule's group: the micro-batches each chunk runs before the next chunk's
  // turn. 0: PP, Megatron-LM's (microbatch_group_size_per_vp_stage's default); PyTorch's
  // ScheduleInterleaved1F1B (torchtitan) takes n / max(1, n / PP) of a schedule's n.
  int interleave_group = 0;
  int interleave_group_size() const { return interleave_group > 0 ? interleave_group : pp; }
  Precision precision = Precision::bf16;
  Recompute recompute = Recompute::none;
  // Under selective recompute, what is replayed (recompute_module bits; Megatron's default,
  // core_attn, unless --recompute-modules says).
  std::uint8_t recompute_modules = recompute_module::core_attn;
  // Under full recompute, Megatron's --recompute-method block --recompute-num-layers N: only the
  // first N blocks of each model chunk replay their forward (and keep only their input); the
  // others keep every activation. 0: every block (--recompute-method uniform with N 1).
  int recompute_block_layers = 0;
  // Under full recompute with --recompute-method uniform, --recompute-num-layers N: each model
  // chunk's blocks replay in groups of N (the last group what is left), a group keeping only its
  // first block's input and replaying its N blocks' forward at once before their backward.
  int recompute_uniform_layers = 1;
  // Whether the block at `local` (its index in its model chunk) replays its forward in full.
  bool full_recompute_at(int local) const {
    return recompute == Recompute::full &&
           (recompute_block_layers == 0 || local < recompute_block_layers);
  }
  // Whether the block at `local` keeps its input (its own, or its uniform group's): false for a
  // block inside a uniform group of N > 1, whose input the replay re-creates.
  bool keeps_block_input(int local) const {
    return !full_recompute_at(local) || recompute_block_layers > 0 ||
           local % recompute_uniform_layers == 0;
  }
  // Megatron-Core's --use-precision-aware-optimizer (Transformer Engine's FusedAdam): Adam's
  // moments in exp_avg_dtype / exp_avg_sq_dtype and the master weights in main_params_dtype;
  // with fp32 master weights over bf16 parameters only their 16-bit remainders are kept
  // (OptimizerConfig.store_param_remainders, on by default). Off: fp32 everything, as before
  // (docs/workload.md, "Memory per rank").
  bool precision_aware_optimizer = false;
  DType exp_avg_dtype = DType::fp32, exp_avg_sq_dtype = DType::fp32,
        main_params_dtype = DType::fp32;
  // --main-grads-dtype: the type of the gradients the optimizer takes. Under --framework megatron
  // with bf16, bf16 keeps the gradient buffer (and so its reduction) in bf16, as Megatron-LM's
  // arguments.py then leaves accumulate_allreduce_grads_in_fp32 off; fp32 (the default) keeps
  // it in fp32. commscope's own pattern and the other frameworks keep 16-bit gradients anyway.
  DType main_grads_dtype = DType::fp32;
  // Bytes per parameter of the optimizer's state (master weights and moments), and what Adam's
  // step reads and writes per parameter (each state twice, the gradient and the weight once).
  double optimizer_state_bytes() const;
  // Whether the precision-aware optimizer keeps fp32 master weights as the 16 low bits beside
  // bf16 parameters (OptimizerConfig.store_param_remainders).
  bool keeps_param_remainders() const {
    return precision_aware_optimizer && main_params_dtype == DType::fp32 &&
           precision == Precision::bf16;
  }
  double adam_step_bytes() const;
  // FSDP's FULL_SHARD or HYBRID_SHARD under --fsdp-grad-sync step (torch.distributed.pipelining:
  // set_reshard_after_backward(False) in each backward but the step's last): a unit freed after
  // forward is gathered again for its backward and kept after it, so between a backward and the
  // next forward the stage holds its parameters whole, and that forward gathers nothing.
  bool fsdp_unsharded_after_backward() const {
    return framework == Framework::fsdp && dp > 1 && zero >= 3 &&
           fsdp_grad_sync == FsdpGradSync::step;
  }
  // Whether memory counts the weights sharded at the peak: ZeRO-3 (FSDP's FULL_SHARD), but not
  // where FSDP keeps them whole after each backward.
  bool weights_sharded() const { return zero >= 3 && !fsdp_unsharded_after_backward(); }
  // FSDP reducing once a step (--fsdp-grad-sync step, or last-micro-batch with accumulation):
  // every unit's unsharded gradient stays in memory until its reduction.
  bool fsdp_whole_gradients() const {
    return framework == Framework::fsdp && dp > 1 &&
           (fsdp_grad_sync == FsdpGradSync::step ||
            (fsdp_grad_sync == FsdpGradSync::last_micro_batch && grad_accum > 1));
  }
  Schedule schedule = Schedule::one_f_one_b;
  Bytes ddp_bucket = units::mib(25);               // PyTorch DDP bucket_cap_mb=25
  std::int64_t zero_reduce_bucket = 500000000;     // DeepSpeed reduce_bucket_size (elements)
  std::int64_t zero_allgather_bucket = 500000000;  // DeepSpeed allgather_bucket_size (elements)
  bool overlap_grad_reduce = true;                 // DDP / DeepSpeed overlap_comm
  bool overlap_param_gather = true;                // ZeRO-3 prefetch of the next layer's parameters
  RankOrder rank_order = RankOrder::tp_dp_pp;

  // ---- framework patterns (used only when framework != none) ----
  Framework framework = Framework::none;
  // DeepSpeed zero_optimization (elements), defaults of deepspeed/runtime/zero/config.py.
  std::int64_t zero3_prefetch_bucket = 50000000;       // stage3_prefetch_bucket_size
  std::int64_t zero3_max_live_params = 1000000000;     // stage3_max_live_parameters
  std::int64_t zero3_max_reuse_distance = 1000000000;  // stage3_max_reuse_distance
  std::int64_t zero3_persistence_threshold = 100000;   // stage3_param_persistence_threshold
  bool contiguous_gradients = true;                    // memory layout only, no collective
  // PyTorch FSDP (torch.distributed.fsdp.FullyShardedDataParallel defaults).
  FsdpSharding fsdp_sharding = FsdpSharding::full_shard;
  FsdpWrap fsdp_wrap = FsdpWrap::block;
  FsdpPrefetch fsdp_prefetch = FsdpPrefetch::backward_pre;
  bool fsdp_limit_all_gathers = true;
  FsdpGradSync fsdp_grad_sync = FsdpGradSync::micro_batch;
  // HSDP (hybrid_shard, hybrid_shard_zero2): the data-parallel ranks of a shard group
  // (torchtitan's data_parallel_shard_degree; under CP each has its CP ranks too); the
  // replicate group is DP / that. 0: the DP ranks of one node, FSDP's HYBRID_SHARD default.
  int fsdp_shard_size = 0;
  // Megatron-LM --use-distributed-optimizer; its overlap flags are overlap_grad_reduce and
  // overlap_param_gather above (off unless given under --framework megatron, Megatron's
  // defaults); its gradient buckets hold megatron_bucket parameters (Megatron's default
  // max(40M, 1M x DP); without --overlap-grad-reduce one bucket of everything).
  bool use_distributed_optimizer = false;
  std::int64_t megatron_bucket = 40000000;
  // Whether selective recompute replays FlashAttention's fused forward: Megatron-Core checkpoints
  // the core attention module whatever kernel runs it (megatron/core/transformer/attention.py,
  // _checkpointed_attention_forward; transformer_config.py only warns that fused attention has
  // no need of it); the legacy Megatron-LM model (and Megatron-DeepSpeed) skipped the checkpoint
  // under flash, and commscope's other frameworks follow that.
  bool replays_fused_attention() const {
    return framework == Framework::megatron && recompute == Recompute::selective &&
           (recompute_modules & recompute_module::core_attn) != 0;
  }
  // DeepSpeed-Ulysses: all-to-all CP under DeepSpeed (Megatron-DeepSpeed's
  // --ds-sequence-parallel-size), whose DistributedAttention wraps the core attention.
  bool ulysses() const {
    return framework == Framework::deepspeed && cp > 1 && cp_comm_type == CpCommType::a2a;
  }
  // Whether the core attention, with the CP exchange that runs inside it, is a core_attn step of
  // selective recompute: the fused kernel as replays_fused_attention says; the standard core
  // everywhere but under DeepSpeed-Ulysses (Megatron-DeepSpeed's ParallelAttention sets
  // checkpoint_core_attention only where no DistributedAttention wraps the core,
  // megatron/model/transformer.py). Under Megatron-Core every CP exchange (p2p, all_gather,
  // a2a) runs inside Transformer Engine's DotProductAttention, which the module checkpoints.
  bool core_attention_is_recomputable() const {
    return attention == AttentionKernel::flash ? framework == Framework::megatron : !ulysses();
  }
  // Megatron-LM's interleaved schedule with --overlap-param-gather dispatches all of a model
  // chunk's parameter all-gathers ahead of the chunk's first forward
  // (megatron/core/pipeline_parallel/schedules.py, config.param_sync_func; DDP
  // start_param_sync): chunks 0 and 1 when the schedule starts, chunk k >= 2 before the
  // forward of virtual micro-batch (k - 1) x PP - (pipeline rank), the buckets in their index
  // order (the last layers' first). Without VP the forward pre-hook gathers one bucket ahead.
  bool megatron_gathers_ahead() const {
    return framework == Framework::megatron && use_distributed_optimizer && overlap_param_gather &&
           dp > 1 && virtual_stages > 1;
  }
  // Pipeline tensors partitioned over TP (with TP > 1 and no sequence parallelism): each TP rank
  // sends its 1/TP slice of the activation (forward) or gradient (backward) to its peer stage,
  // which all-gathers the slices over TP before use. DeepSpeed's PipelineEngine does this by
  // default (ds_config pipeline.pipe_partitioned / grad_partitioned, both true), as did
  // Megatron-LM before Megatron-Core (--scatter-gather-tensors-in-pipeline, on by default);
  // Megatron-Core sends the whole tensor. On by default under --framework deepspeed only.
  bool pipe_partitioned = false;

  // ---- compressed communication (docs/workload.md, "Compressed communication") ----
  // The data-parallel gradient all-reduce / reduce-scatter on the wire in this type
  // (--grad-comm-dtype, DeepSpeed communication_data_type); unset: the gradients' own type.
  // Accumulation stays in fp32 (the receiver sums in fp32, then converts).
  std::optional<DType> grad_comm_dtype;
  // ZeRO++ (Wang et al. 2023), ZeRO-3 only: qwZ int8 weight all-gather with per-block scales
  // (zero_quantized_weights), hpZ secondary parameter shard over this many ranks of a node
  // (zero_hpz_partition_size; 1: off), qgZ hierarchical int4 all-to-all gradient reduce-scatter
  // (zero_quantized_gradients).
  bool zeropp_qwz = false;
  int zeropp_hpz = 1;
  bool zeropp_qgz = false;
  // PowerSGD of this rank, or 1-bit Adam, in place of the gradient all-reduce (DDP only).
  GradCompression grad_compression = GradCompression::none;
  int powersgd_rank = 0;
  // ---- modern training (issue 15): attention kernel, FP8, uneven pipeline stages ----
  // Defaults keep every earlier result unchanged.
  AttentionKernel attention = AttentionKernel::standard;
  // Whose flash kernel (with `attention` flash): fused under Megatron or no framework, flash
  // under PyTorch FSDP and DeepSpeed, unless --attention-backend says.
  AttentionBackend attention_backend = AttentionBackend::fused;
  // Transformer Engine FP8: the GEMMs run on the FP8 tensor cores (the system's fp8 peak),
  // each GEMM's inputs cast to FP8 (memory-bound casts); everything else stays in `precision`.
  bool fp8 = false;
  // Megatron-Core --fp8-param-gather (Megatron-Bridge's fp8_param_gather, on in its FP8
  // recipes): the blocks' GEMM weights are FP8 parameters (Transformer Engine's fp8_model_init;
  // rowwise data and its transpose or columnwise copy), no 16-bit copy and no separate FP8
  // cache, and the distributed optimizer's or Megatron-FSDP's parameter all-gathers carry them
  // in 1 byte. Needs fp8 and a sharded optimizer (ZeRO >= 1), not --framework fsdp/deepspeed.
  bool fp8_param_gather = false;
  // Megatron-Core --tp-comm-overlap (Transformer Engine userbuffers; needs sequence
  // parallelism): each sequence-parallel all-gather and reduce-scatter runs beside the GEMM it
  // feeds or drains instead of before or after it (docs/workload.md, "TP communication overlap").
  bool tp_comm_overlap = false;
  // Megatron-LM's asynchronous tensor-parallel all-reduce (--async-tensor-model-parallel-
  // allreduce from 2021-09, the default since; always in Megatron-Core, Transformer Engine's
  // linears too): without sequence parallelism the input gradient's all-reduce runs beside the
  // GEMM's backward (its weight gradient) instead of after it. On by default under
  // --framework megatron, off for commscope's own pattern; no effect with TP 1 or under
  // sequence parallelism, whose reduce-scatter runs beside its GEMM anyway.
  bool tp_async_allreduce = false;
  // The loss's cross entropy (docs/workload.md, "Memory per rank"):
  // - vocab_parallel: Megatron's vocab-parallel cross entropy casts the logits to fp32 while the
  //   compute-type logits are still held and keeps the fp32 softmax (4 bytes a logit, and a
  //   bytes more at the cast);
  // - fused: Megatron-LM --cross-entropy-loss-fusion (Transformer Engine's parallel cross
  //   entropy) keeps the logits in the compute type with their gradient written in place (a
  //   bytes a logit);
  // - torch: torch.nn.functional.cross_entropy on the fp32 logits (torchtitan) keeps the fp32
  //   log-softmax (4 bytes a logit), and backward's nll_loss and log_softmax gradients, fp32
  //   each, are made beside it (8 bytes a logit more at the start of backward);
  // - flash_attn: FlashAttention's CrossEntropyLoss (flash_attn/losses/cross_entropy.py, the
  //   xentropy kernel) keeps the logits in the compute type and the fp32 logsumexp, and its
  //   backward (inplace_backward false, the default) makes the gradient beside them (a bytes a
  //   logit more).
  CrossEntropy cross_entropy = CrossEntropy::vocab_parallel;
  // Context parallelism's KV exchange (CpCommType); only read when cp > 1.
  CpCommType cp_comm_type = CpCommType::p2p;
  // a2a+p2p: the all-to-all level's size, the first of Megatron's
  // --hierarchical-context-parallel-sizes (CP ranks next to each other); the ring's is cp /
  // cp_a2a, CP ranks cp_a2a apart (Transformer Engine's AttnFuncWithCPAndKVP2P with a
  // [a2a group, p2p group] pair). 1 otherwise.
  int cp_a2a = 1;
  int cp_ring() const { return cp / cp_a2a; }
  // Megatron-Core --cpu-offloading with --cpu-offloading-num-layers N (activations only, as
  // Transformer Engine's CPU offload context does it): the saved activations of the first N
  // transformer layers go to host memory after each layer's forward and come back before its
  // backward, on copy engines beside the compute (docs/workload.md, "Activation offloading").
  // 0: off. Megatron-Core refuses it with pipeline parallelism.
  int cpu_offload_layers = 0;
  // DeepSpeed ZeRO-Offload (zero_optimization.offload_optimizer.device "cpu", or the older
  // cpu_offload true; --offload-optimizer): the optimizer states and the fp32 gradient shard
  // live in host memory and Adam steps on the CPU (DeepSpeedCPUAdam). Each step copies the
  // rank's reduced gradient shard to the host, runs Adam there, and copies the updated 16-bit
  // shard back (docs/workload.md, "Optimizer offload"). Needs ZeRO >= 1.
  bool offload_optimizer = false;
  // DeepSpeed ZeRO-3 parameter offload (zero_optimization.offload_param.device "cpu", or the
  // older cpu_offload_params true; --offload-param): each rank's 16-bit parameter partition lives
  // in pinned host memory. Every fetch of DeepSpeed's coordinator copies the partition to the GPU
  // (a blocking copy on the all-gather stream) before the all-gather, and the step writes the
  // updated partition back to the host (docs/workload.md, "Parameter offload"). Needs
  // --framework deepspeed, ZeRO-3 and DP > 1.
  bool offload_param = false;
  // PyTorch FSDP's CPU offload (FSDP1 CPUOffload(offload_params=True), FSDP2 CPUOffloadPolicy;
  // torchtitan's [training] enable_cpu_offload; --fsdp-cpu-offload): each rank's fp32 parameter
  // shard, its gradient shard and the optimizer's states live in pinned host memory and the
  // optimizer steps on the CPU. Every all-gather copies the shard to the GPU first, every
  // reduction copies the gradient shard out (docs/workload.md, "FSDP CPU offload"). Needs
  // --framework fsdp, a sharded strategy without HSDP.
  bool fsdp_cpu_offload = false;
  // Megatron-Core's optimizer CPU offload (--optimizer-cpu-offload, HybridDeviceOptimizer):
  // the first `optimizer_offload_fraction` of the distributed optimizer's shard (by elements,
  // whole parameters in order) keeps its fp32 master copy, Adam's moments and an fp32 gradient
  // buffer in pinned host memory and steps with torch's AdamW on the CPU; the rest steps on
  // the GPU. Each step copies the gradients out and the updated weights back, pipelined a
  // parameter at a time under --overlap-cpu-optimizer-d2h-h2d (docs/workload.md, "Megatron
  // optimizer CPU offload"). Needs --framework megatron and --use-precision-aware-optimizer.
  bool optimizer_cpu_offload = false;
  double optimizer_offload_fraction = 1.0;
  bool overlap_cpu_optimizer_d2h_h2d = false;
  // Megatron-Core --mtp-num-layers: multi-token-prediction depths trained on the last pipeline
  // stage (docs/workload.md, "Multi-token prediction"); the model's mtp_layers unless given.
  int mtp_layers = 0;
  // Transformer layers of each pipeline stage (size pp, sum = the model's layers); empty: the
  // even split. Set from --pipeline-stage-layers or Megatron's
  // --decoder-first/last-pipeline-num-layers (the rest split evenly over the middle stages).
  std::vector<int> stage_layers;
  // ---- context and expert parallelism (docs/workload.md, "Mixture of experts, EP and CP") ----
  // Megatron-LM's --context-parallel-size: each sample's sequence split over cp ranks (ring
  // attention); world = TP x CP x DP x PP and dense gradients are reduced over DP x CP.
  int cp = 1;
  // --expert-model-parallel-size and --expert-tensor-parallel-size: a MoE layer's experts split
  // over ep ranks and each expert over expert_tp ranks, out of the TP x CP x DP ranks of a stage;
  // expert gradients are reduced over the expert-data-parallel group of the rest.
  int ep = 1;
  int expert_tp = 1;
  // --moe-expert-capacity-factor: an expert takes at most this times its even share of tokens
  // (0: no limit, no token dropping). --moe-routing-imbalance: the busiest EP rank's tokens over
  // the mean (1: even routing); the all-to-all and the expert GEMMs wait for the busiest rank.
  double moe_capacity_factor = 0;
  double moe_routing_imbalance = 1;
  // --moe-pad-expert-input-to-capacity (with a capacity factor): every expert takes exactly its
  // capacity of each rank's tokens, the ones routed to it first by probability, then others
  // with weight 0 (Megatron-LM's apply_router_token_dropping), so the all-to-all and the
  // expert GEMMs have a size independent of the routing.
  bool moe_pad_to_capacity = false;
  // DeepSpeed-MoE's min_capacity (Megatron-DeepSpeed's --moe-min-capacity, 4 by default): the
  // capacity's floor, deepspeed/moe/sharded_moe.py _capacity; 0 elsewhere (Megatron-LM's
  // capacity has none). Only read with padding to a capacity.
  int moe_min_capacity = 0;
  // --moe-token-dispatcher-type (MoeDispatcher); only read when ep > 1.
  MoeDispatcher moe_dispatcher = MoeDispatcher::alltoall;
  // Megatron-Core --overlap-moe-expert-parallel-comm (docs/workload.md, "EP all-to-all
  // overlap"): in the steady state of 1F1B one micro-batch's forward runs together with another
  // one's backward, layer by layer, each one's dispatch and combine all-to-alls on a stream of
  // their own beside the other one's compute (the combined 1F1B schedule); the interleaved
  // schedule runs one more warm-up forward. Needs EP > 1 and, with PP, virtual stages.
  bool overlap_moe_ep_comm = false;
  // --delay-wgrad-compute (with the overlap only): in those combined steps the backward's
  // weight-gradient GEMMs run after the data gradient's all-to-all is issued, so the all-to-all
  // waits for the data gradients alone.
  bool delay_wgrad_compute = false;
  // --moe-router-num-groups and --moe-router-group-topk (group-limited routing; 0: none):
  // the model's expert_groups and expert_groups_per_token unless given.
  int moe_router_groups = 0;
  int moe_router_group_topk = 0;
  // --moe-aux-loss-coeff: the load-balancing loss's weight. The CPU trainer adds the loss;
  // describe and predict count nothing for it (Megatron-LM all-reduces the E per-expert
  // counts over TP x CP per MoE layer when that group has more than one rank: not modelled).
  double moe_aux_loss_coeff = 0;
  // ---- DeepSpeed's release (issue 11; docs/cost-model.md, "DeepSpeed 0.3-0.5") ----
  // Set from presets/frameworks/deepspeed.json by --deepspeed-version (empty: today's DeepSpeed,
  // every field below at its default). DeepSpeed 0.3.13 to 0.5.x (2021): torch.cuda.synchronize()
  // before every parameter's all-gather (zero3_sync_gathers: no gather overlaps compute, nor
  // the gradient reduce-scatter), one all-gather per parameter and one reduce-scatter per
  // parameter's gradient (zero3_per_param_calls), and host work before every such call of
  // zero3_host_s_per_rank_per_call x the group's ranks (a Python list of world_size views).
  std::string deepspeed_version;
  bool zero3_sync_gathers = false;
  bool zero3_per_param_calls = false;
  // ZeRO-3 with contiguous_gradients keeps its gradient bucket (reduce_bucket_size elements of
  // the compute type) beside the model: one (stage3.py's __ipg_bucket_flat_buffer, today), or
  // under 0.3-0.5 two with overlap_comm (its backward allocates ipg_buffer buf_0 and buf_1).
  bool zero3_double_reduce_bucket = false;
  double zero3_host_s_per_rank_per_call = 0;
  // The NICs of a node one of these collectives spreads over (0: the system's
  // scale.nics_per_group): an empirical term of the 2021 runs, fitted (docs/validate.md).
  int zero3_nics_per_group = 0;

  int model_parallel() const { return tp * pp; }
  int gpus() const { return dp * tp * pp * cp; }
  // Ranks over which dense gradients are reduced (Megatron's data-parallel group with context
  // parallelism) and over which expert gradients are (the expert-data-parallel group).
  int grad_dp() const { return dp * cp; }
  // FSDP's HSDP (hybrid_shard, hybrid_shard_zero2): sharded within groups, replicated across.
  bool hsdp() const {
    return framework == Framework::fsdp && (fsdp_sharding == FsdpSharding::hybrid_shard ||
                                            fsdp_sharding == FsdpSharding::hybrid_shard_zero2);
  }
  int expert_dp() const { return dp * cp * tp / (ep * expert_tp); }
  // Tokens an EP rank's experts process over the mean: the busiest rank's share, cut at the
  // capacity when tokens are dropped.
  double moe_load_factor() const {
    return moe_capacity_factor > 0 ? std::min(moe_routing_imbalance, moe_capacity_factor)
                                   : moe_routing_imbalance;
  }
  // Rows an EP rank's experts take per MoE block and micro-batch from `tokens` tokens of each
  // rank routed top_k over `experts`: tokens x top_k x the load factor; padded to capacity,
  // experts x min(capacity, tokens) with Megatron-LM's capacity ceil(tokens x top_k / experts x
  // the capacity factor) (get_capacity; above the tokens, every token goes to every expert),
  // at least DeepSpeed's moe_min_capacity.
  // Dropping without padding keeps at least that capacity's one token per expert, as
  // Megatron-LM's ceil does (a tiny factor cut every expert to zero rows).
  double moe_routed_rows(double tokens, int top_k, int experts) const {
    if (moe_capacity_factor <= 0 || experts <= 0) return tokens * top_k * moe_load_factor();
    const double capacity = std::max<double>(
        std::ceil(tokens * top_k / experts * moe_capacity_factor), moe_min_capacity);
    if (!moe_pad_to_capacity)
      return std::min(
          tokens * top_k * moe_routing_imbalance,
          std::max(tokens * top_k * moe_load_factor(), experts * std::min(1.0, tokens)));
    return experts * std::min(capacity, tokens);
  }
  DType dtype() const { return compute_dtype(precision); }
};

// The data-parallel ranks of plan p on one node of gpus_per_node GPUs (as FSDP's HYBRID_SHARD
// counts them): a divisor of DP.
int dp_ranks_per_node(const ParallelPlan& p, int gpus_per_node);
// The same counting DP x CP ranks (the gradient group's): HSDP's default shard group.
int grad_dp_ranks_per_node(const ParallelPlan& p, int gpus_per_node);
// HSDP's shard group of plan p, in DP x CP ranks: fsdp_shard_size x CP where given, else the
// DP x CP ranks of one node (plan p's DP taken as DP x CP, the gradient group's).
int hsdp_shard_ranks(const ParallelPlan& p, int gpus_per_node);
// The expert-data-parallel ranks of plan p on one node (the group's ranks are EP x expert TP
// apart: place_group's count for CommGroup::expert_data).
int expert_dp_ranks_per_node(const ParallelPlan& p, int gpus_per_node);
// HSDP's shard group of the routed experts, in expert-data-parallel ranks: torchtitan's efsdp
// mesh, shard x CP x TP / (EP x expert TP) (v0.2.2 distributed/parallel_dims.py; the experts'
// FSDP mesh is dp_replicate x efsdp, as the dense parameters' is dp_replicate x the shard
// group): the expert-data group over the replicas. The whole expert-data group without HSDP.
int hsdp_expert_shard_ranks(const ParallelPlan& p, int gpus_per_node);

// Every field optional: what one source (defaults, DeepSpeed config, flags) says.
struct PlanInput {
  std::optional<int> dp, tp, pp, virtual_stages, zero;
  std::optional<bool> sequence_parallel, overlap_grad_reduce, overlap_param_gather;
  std::optional<std::int64_t> micro_batch, global_batch, grad_accum;
  // torchtitan's [training] local_batch_size: the samples of one data-parallel rank per
  // accumulation step. Set, the global batch must be a multiple of it x DP (torchtitan's
  // assertion), and under PP each accumulation step is its own pipeline schedule
  // (ParallelPlan::pipeline_rounds).
  std::optional<std::int64_t> local_batch;
  // torchtitan's mixed precision rides on FSDP (fully_shard's MixedPrecisionPolicy): with TP or
  // PP and no FSDP (shard degree 1, CP 1), maybe_enable_amp leaves the run in fp32. Set by a
  // torchtitan file whose precision no flag overrides.
  std::optional<bool> amp_needs_fsdp;
  std::optional<Precision> precision;
  std::optional<Recompute> recompute;
  std::optional<std::uint8_t> recompute_modules;  // --recompute-modules (recompute_module bits)
  // --recompute-method (true: block, false: uniform) and --recompute-num-layers (Megatron's)
  std::optional<bool> recompute_block;
  std::optional<int> recompute_num_layers;
  // torchtitan's selective_ac_option k, a layer interval: every k-th block of each model chunk
  // fully checkpointed. resolve_scenario counts it against the plan's own chunk, Megatron's block
  // method with (layers / (PP x VP)) / k blocks, so a PP or VP flag counts it again.
  std::optional<int> recompute_layer_interval;
  // --use-precision-aware-optimizer and its dtypes (Megatron-Core's)
  std::optional<bool> precision_aware_optimizer;
  std::optional<DType> exp_avg_dtype, exp_avg_sq_dtype, main_params_dtype, main_grads_dtype;
  std::optional<Schedule> schedule;
  std::optional<RankOrder> rank_order;
  std::optional<double> ddp_bucket_mb;  // MiB, as PyTorch's bucket_cap_mb
  std::optional<std::int64_t> zero_reduce_bucket, zero_allgather_bucket;
  std::optional<int> gpus, nodes;
  std::optional<std::int64_t> seq_length, decoder_seq_length;
  // framework patterns
  std::optional<Framework> framework;
  std::optional<std::int64_t> zero3_prefetch_bucket, zero3_max_live_params,
      zero3_max_reuse_distance, zero3_persistence_threshold;
  std::optional<bool> contiguous_gradients;
  std::optional<FsdpSharding> fsdp_sharding;
  std::optional<FsdpWrap> fsdp_wrap;
  std::optional<FsdpPrefetch> fsdp_prefetch;
  std::optional<FsdpGradSync> fsdp_grad_sync;
  // HSDP's shard group, or its replicate group (the shard group DP / that): one of the two.
  std::optional<int> fsdp_shard_size, fsdp_replicate_size;
  std::optional<bool> fsdp_limit_all_gathers, use_distributed_optimizer, pipe_partitioned;
  // compressed communication
  std::optional<DType> grad_comm_dtype;
  std::optional<bool> zeropp_qwz, zeropp_qgz;
  std::optional<int> zeropp_hpz;
  std::optional<GradCompression> grad_compression;
  std::optional<int> powersgd_rank;
  // modern training (issue 15)
  std::optional<AttentionKernel> attention;           // unset: the model preset's `attention`
  std::optional<AttentionBackend> attention_backend;  // unset: the framework's
  std::optional<bool> fp8, tp_comm_overlap, tp_async_allreduce;
  std::optional<CrossEntropy> cross_entropy;  // --cross-entropy, --cross-entropy-loss-fusion
  std::optional<bool> fp8_param_gather;
  std::optional<int> cpu_offload_layers;
  std::optional<bool> offload_optimizer, offload_param, fsdp_cpu_offload;
  std::optional<bool> optimizer_cpu_offload, overlap_cpu_optimizer_d2h_h2d;
  std::optional<double> optimizer_offload_fraction;
  std::optional<int> mtp_layers;                 // --mtp-num-layers (unset: the model's)
  std::optional<std::vector<int>> stage_layers;  // --pipeline-stage-layers
  std::optional<std::string> pipeline_layout;    // --pipeline-model-parallel-layout (Megatron's)
  std::optional<int> first_stage_layers, last_stage_layers;  // Megatron's first/last
  // Megatron-Core's --account-for-embedding-in-pipeline-split and
  // --account-for-loss-in-pipeline-split: the embedding and the loss each count as a layer when
  // the layers split over the PP x VP model chunks (the first and last chunk hold one fewer).
  std::optional<bool> account_embedding, account_loss;
  // Megatron-LM's --num-layers-per-virtual-pipeline-stage: the virtual stages are the layers
  // (with the two above) per pipeline stage over it.
  std::optional<int> layers_per_virtual_stage;
  // context and expert parallelism
  std::optional<int> cp, ep, expert_tp;
  std::optional<CpCommType> cp_comm_type;
  // Megatron-LM's --hierarchical-context-parallel-sizes (a2a+p2p: the all-to-all level, then
  // the ring's); empty: not given.
  std::vector<int> hierarchical_cp_sizes;
  std::optional<double> moe_capacity_factor, moe_routing_imbalance;
  std::optional<bool> moe_pad_to_capacity;
  std::optional<int> moe_min_capacity;  // Megatron-DeepSpeed's --moe-min-capacity
  std::optional<MoeDispatcher> moe_dispatcher;
  std::optional<bool> overlap_moe_ep_comm, delay_wgrad_compute;
  std::optional<int> moe_router_groups, moe_router_group_topk;
  std::optional<double> moe_aux_loss_coeff;
  // DeepSpeed's release (--deepspeed-version) and its host cost per rank per call
  // (--zero3-host-per-rank-call, seconds; 0 switches it off)
  std::optional<std::string> deepspeed_version;
  std::optional<double> zero3_host_s_per_rank_per_call;
  std::optional<int> zero3_nics_per_group;  // --zero3-nics-per-group (0: the system's)
  // NCCL's algorithms (issue 11): --nccl-algo in NCCL_ALGO's syntax, applied to the system's
  // NcclTuning by resolve_scenario (apply_nccl_algo, spec/system.h).
  std::optional<std::string> nccl_algo;

  // Fields set in `over` replace those here.
  void merge(const PlanInput& over);
};

// A DeepSpeed ds_config.json as a plan: batch sizes, gradient accumulation, ZeRO stage and
// bucket sizes, fp16/bf16, overlap_comm, ZeRO++, the 1-bit optimizers. "auto" (Hugging Face
// Trainer) leaves a field unset. `notes`, where given, receives one line for each setting read
// but not modelled (ZeRO-Offload, activation partitioning) or modelled in part.
Result<PlanInput> plan_from_deepspeed(const nlohmann::json& j, const std::string& where,
                                      std::vector<std::string>* notes = nullptr);
Result<PlanInput> load_deepspeed_config(const std::string& path,
                                        std::vector<std::string>* notes = nullptr);

nlohmann::json to_json(const ParallelPlan& p);

// Compressed communication from the plan input into the plan, checked: --grad-comm-dtype one
// of fp32|bf16|fp16|fp8; ZeRO++ under ZeRO-3 only, hpZ a divisor of DP within a node
// (gpus_per_node); PowerSGD's rank positive, compression under DDP (ZeRO-0) only.
Status resolve_compression(const PlanInput& in, ParallelPlan& plan, int gpus_per_node);
// A compressed gradient (PowerSGD, 1-bit) has its own wire format: no --grad-comm-dtype beside
// it (resolve_compression, and plan's check before its search).
Status check_compressed_wire(GradCompression c, const std::optional<DType>& wire);

// Megatron-Core's --pipeline-model-parallel-layout (megatron/core/transformer/
// pipeline_parallel_layer_layout.py): virtual stages separated by '|', in layer order (virtual
// stage c of pipeline rank r is stage c x PP + r), each a string of layers: E the embedding, t a
// transformer layer, L the loss (and head), m a multi-token-prediction layer; "(...)*n" and
// "x*n" repeat, commas are cosmetic. Gives the transformer layers of each stage and the MTP
// layers. Refused, with what was expected: other characters, nested or unclosed parentheses, a
// repeat count that is not a positive integer, more than limits::kMaxPipelineTasks stages or
// kMaxLayers layers once unrolled (counted before anything is unrolled), an embedding that is
// not the first layer or a loss that is not the last (each exactly once, as Megatron checks),
// and MTP layers anywhere but in the loss's stage (where commscope models them, Megatron's
// default place).
struct PipelineLayout {
  std::vector<int> stages;  // transformer layers per virtual stage
  int mtp_layers = 0;       // m layers (all in the last stage)
};
Result<PipelineLayout> parse_pipeline_layout(std::string_view layout);

// "fp32", "bf16", "fp16", "fp8", and the aliases "float32", "float16", "bfloat16" (DeepSpeed's
// communication_data_type spellings); nullopt for anything else.
std::optional<DType> grad_comm_dtype_from_name(std::string_view s);

}  // namespace commscope
