// The framework a plan follows (--framework megatron|deepspeed|fsdp) and its options, resolved
// from what the user gave (flags, a DeepSpeed config) into the ParallelPlan: each framework's
// defaults, and the checks that keep one framework's options from another's plan.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "commscope/spec/plan.h"
#include "commscope/util/result.h"

namespace commscope {

// Fills plan.framework and the framework's fields from `in`. Needs plan.dp, plan.zero and
// plan.precision resolved. Sets plan.zero to the stage whose sharding of model states the
// framework's matches (memory per rank): FSDP FULL_SHARD/HYBRID_SHARD 3, SHARD_GRAD_OP 2,
// NO_SHARD 0; Megatron's distributed optimizer 1. An error names the flag.
Status resolve_framework(const PlanInput& in, ParallelPlan& plan, std::vector<std::string>& warn);

// A plan stated as a ZeRO stage (a measured run's "zero3", "fsdp_full_shard", "ddp") in a
// framework's terms: FSDP's sharding from the stage (3 FULL_SHARD, 2 SHARD_GRAD_OP, 0 or 1
// NO_SHARD), Megatron's distributed optimizer for ZeRO-1; DeepSpeed keeps the stage. An error
// when the framework has no such plan (Megatron-LM with ZeRO-2/3).
Status apply_framework(Framework f, PlanInput& p);
// The framework a name stands for (megatron, deepspeed, fsdp; none for anything else).
Framework framework_of_name(std::string_view name);

// The data type of Megatron-LM's gradient buffers: fp32 under bf16 (Megatron's arguments.py
// sets accumulate_allreduce_grads_in_fp32 for bf16), the parameters' otherwise.
DType megatron_grad_dtype(const ParallelPlan& plan);
// The type Megatron-LM's gradient buffer holds and reduces in, as the plan says it: that of
// --grad-comm-dtype when given (--grad-reduce-in-bf16), else megatron_grad_dtype.
DType megatron_grad_buffer_dtype(const ParallelPlan& plan);

// One DeepSpeed release's ZeRO-3 behaviour, from presets/frameworks/deepspeed.json
// (docs/cost-model.md, "DeepSpeed 0.3-0.5"): whether every all-gather waits for all queued work
// (no overlap), whether gathers and gradient reduce-scatters go one parameter per call, and the
// host seconds per rank of the group that every such call costs.
struct DeepSpeedVersion {
  std::string version;     // "0.3", "current"
  std::string releases;    // the releases it stands for
  std::string provenance;  // where host_s_per_rank_per_call comes from
  bool zero3_sync_gathers = false;
  bool zero3_per_param_calls = false;
  // ZeRO-3's gradient bucket (contiguous_gradients): a second one beside the first under
  // overlap_comm, allocated for each backward (0.3-0.5), or one (today's, allocated once).
  bool zero3_double_reduce_bucket = false;
  double host_s_per_rank_per_call = 0;
  int nics_per_group = 0;  // 0: the system's scale.nics_per_group
};
// The file's versions (from the preset roots, or `path` when given). Errors name the field.
Result<std::vector<DeepSpeedVersion>> load_deepspeed_versions(const std::string& path = "");
// The host seconds DeepSpeed 0.3-0.5 spends before one ZeRO-3 collective over `ranks` ranks:
// per_rank x ranks (one list element, one view, one copy per rank of the group).
inline double zero3_host_seconds_per_call(double per_rank, int ranks) {
  return per_rank * static_cast<double>(ranks);
}
// The path of presets/frameworks/deepspeed.json that load_deepspeed_versions reads.
Result<std::string> deepspeed_versions_path();

}  // namespace commscope
