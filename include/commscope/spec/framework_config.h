// The framework a plan follows (--framework megatron|deepspeed|fsdp) and its options, resolved
// from what the user gave (flags, a DeepSpeed config) into the ParallelPlan: each framework's
// defaults, and the checks that keep one framework's options from another's plan.
#pragma once

#include <string>
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

}  // namespace commscope
