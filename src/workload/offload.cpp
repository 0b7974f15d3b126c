// DeepSpeed ZeRO-Offload's step and the optimizer shard it moves (docs/workload.md, "Optimizer
// offload").
#include <algorithm>
#include <string>
#include <string_view>

#include "commscope/workload/workload.h"

namespace commscope {

bool expert_states_sharded(const ParallelPlan& p) {
  return p.expert_dp() > 1 &&
         (p.zero >= 1 || (p.framework == Framework::megatron && p.use_distributed_optimizer));
}

double optimizer_shard_params(const Scenario& sc, const Role& r) {
  const ParallelPlan& p = sc.plan;
  // DP x CP, or under FSDP's HSDP its shard group (every replica steps the same shard, as
  // memory_per_rank counts its states); the experts over the expert-data group, or its shard.
  // (Until 2026-12-03 HSDP's step was priced over DP x CP: its Adam a replica count too short.)
  const int d = p.hsdp() ? hsdp_shard_ranks(p, sc.gpus_per_node) : p.grad_dp();
  const double dense = static_cast<double>(r.params - r.expert_params),
               experts = static_cast<double>(r.expert_params);
  const bool sharded = p.zero >= 1 && d > 1;
  const bool expert_sharded = experts > 0 && expert_states_sharded(p);
  return (sharded ? dense / d : dense) +
         (expert_sharded ? experts / std::max(1, hsdp_expert_shard_ranks(p, sc.gpus_per_node))
                         : experts);
}

double largest_optimizer_shard(const Workload& w) {
  double owned = 0;
  for (const Role& r : w.roles) owned = std::max(owned, optimizer_shard_params(w.scenario, r));
  return owned;
}

std::vector<OffloadPart> offload_step(const Scenario& sc, double owned) {
  const ParallelPlan& p = sc.plan;
  if (!p.offload_optimizer) return {};
  const double link = sc.system.node.host_copy_pinned.value();
  const double host = sc.system.node.host_memory_bandwidth.value();
  const bool mixed = p.precision != Precision::fp32;
  const bool stage3 = p.zero >= 3;
  const double w = mixed ? 2 : 4;  // the GPU's copy of a weight, and of a gradient
  std::vector<OffloadPart> parts;
  // Gradient accumulation: the micro-batches' gradients are summed in a pinned host buffer
  // through the GPU. Every micro-batch after the first brings the sum back (host to device) and
  // every one before the last sends it out again, in the gradients' type (stage_1_and_2.py's
  // async_accumulate_grad_in_cpu_via_gpu; stage3.py's partition_grads likewise).
  if (p.grad_accum > 1)
    parts.push_back(
        {"offload_grad_accumulate", 2.0 * static_cast<double>(p.grad_accum - 1) * owned * w, link});
  // The reduced gradient shard into the optimizer's fp32 gradients on the host. ZeRO-1/2 cast it
  // on the GPU and copy fp32 (4 bytes; DeepSpeed's fp16_master_weights_and_gradients, off by
  // default, would keep it 16-bit). ZeRO-3 copies each shard out in its own type as it is
  // reduced, and at the last micro-batch of several the sum, on the GPU then, as fp32.
  const double grad_out = !stage3 ? 4 : w + (p.grad_accum > 1 ? 4 : 0);
  parts.push_back({"offload_grad_copy", grad_out * owned, link});
  // DeepSpeedCPUAdam streams each parameter's fp32 weight, gradient and two moments in and the
  // weight and moments out (28 bytes). Under mixed precision the updated weights are then cast
  // to 16 bits on the host (4 in, 2 out): ZeRO-1/2 into a pinned buffer, ZeRO-3 by its blocking
  // copy_ into the GPU's shard, which PyTorch converts on the CPU before the transfer. ZeRO-3
  // without accumulation also casts the host's copy of the gradient into the fp32 gradients
  // (w in, 4 out). Memory-bound on any host CPU (about 12 FLOPs a parameter), and every rank of
  // a node steps its shard at once.
  const double per_param = 28.0 + (mixed ? 6.0 : 0.0) + (stage3 && p.grad_accum == 1 ? w + 4 : 0.0);
  parts.push_back({"cpu_adam", per_param * owned * sc.gpus_per_node, host});
  // The updated weights back, in the GPU's type; under --offload-param the partition they are
  // cast into is on the host already (stage3.py's fp16_partitioned_groups_flat, a view of its
  // pinned buffer), and the next fetch brings it over.
  if (!p.offload_param) parts.push_back({"offload_param_copy", w * owned, link});
  return parts;
}

std::vector<OffloadPart> param_offload_step(const Scenario& sc, double owned) {
  const ParallelPlan& p = sc.plan;
  if (!p.offload_param || p.offload_optimizer) return {};
  // Adam steps on the GPU, and stage3.py's _reassign_or_swap_out_partitioned_parameters copies
  // each fp32 master partition into the 16-bit one on the host: a blocking copy_, for which
  // PyTorch converts on the CPU (copy_kernel_cuda), so the fp32 values cross the host link and
  // are cast there (4 bytes in, w out), every rank of a node at once.
  std::vector<OffloadPart> parts{
      {"offload_param_out", 4.0 * owned, sc.system.node.host_copy_pinned.value()}};
  if (p.precision != Precision::fp32)
    parts.push_back({"cpu_param_cast", 6.0 * owned * sc.gpus_per_node,
                     sc.system.node.host_memory_bandwidth.value()});
  return parts;
}

std::vector<OffloadPart> fsdp_offload_step(const Scenario& sc, double owned) {
  if (!sc.plan.fsdp_cpu_offload) return {};
  // The user's torch.optim.AdamW on the CPU shards: PyTorch picks neither foreach nor fused
  // kernels for CPU tensors (_default_to_fused_or_foreach), so _single_tensor_adamw runs, one
  // pass over memory an operation: the weight decay (4 in, 4 out), lerp_ of the first moment
  // (8, 4), mul_ and addcmul_ of the second (4, 4; 8, 4), its sqrt, the division by the bias
  // correction and add_ of eps (4, 4 each), and addcdiv_ into the weight (12, 4): 80 bytes a
  // parameter, every rank of the node at once. The shards are fp32 already: no cast.
  return {
      {"cpu_adamw", 80.0 * owned * sc.gpus_per_node, sc.system.node.host_memory_bandwidth.value()}};
}

MegatronOffloadStep megatron_offload_step(const Scenario& sc, double owned) {
  const ParallelPlan& p = sc.plan;
  MegatronOffloadStep out;
  if (!p.optimizer_cpu_offload) return out;
  // HybridDeviceOptimizer (megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py) moves
  // whole parameters of the shard, in order, until the fraction of its elements is reached.
  const double cpu = p.optimizer_offload_fraction * owned;
  out.gpu_params = owned - cpu;
  const double link = sc.system.node.host_copy_pinned.value();
  const double host = sc.system.node.host_memory_bandwidth.value();
  const double ranks = sc.gpus_per_node;
  // _set_sub_optimizer_grads: each gradient into a pinned fp32 host buffer (the fp32 master's
  // type; a bf16 buffer is converted on the GPU before the copy), 4 bytes a parameter.
  out.parts.push_back({"offload_grad_copy", 4.0 * cpu, link});
  // torch.optim.AdamW on the fp32 CPU copies: single-tensor, 80 bytes a parameter of memory
  // traffic (fsdp_offload_step counts them), every rank of the node at once.
  out.parts.push_back({"cpu_adamw", 80.0 * cpu * ranks, host});
  // param_copy_back_gpu_hook: gpu_param.copy_(fp32 host param) into the 16-bit parameter, which
  // PyTorch converts on the CPU before the transfer (4 bytes in, 2 out), then 2 bytes over.
  out.parts.push_back({"cpu_param_cast", 6.0 * cpu * ranks, host});
  out.parts.push_back({"offload_param_copy", 2.0 * cpu, link});
  return out;
}

double megatron_offload_seconds(const MegatronOffloadStep& s, bool overlapped) {
  double d2h = 0, cpu = 0, h2d = 0;
  for (const OffloadPart& part : s.parts) {
    const std::string_view n = part.name;
    (n == "offload_grad_copy" ? d2h : n == "offload_param_copy" ? h2d : cpu) += part.seconds();
  }
  // With one CPU optimizer a parameter the three run as a pipeline: the slowest of them,
  // without its fill and drain (a lower bound); without, one after another.
  return overlapped ? std::max({d2h, cpu, h2d}) : d2h + cpu + h2d;
}

namespace {
// The host ops named `name` of one micro-batch (the first's forward where it differs), of the
// role whose take longest; their bytes at `bandwidth`.
ParamFetches longest_role_ops(const Workload& w, std::string_view name, double bandwidth) {
  ParamFetches most;
  for (const Role& r : w.roles) {
    ParamFetches f;
    for (const Chunk& ch : r.chunks)
      for (const OpList* list :
           {ch.forward_first.empty() ? &ch.forward : &ch.forward_first, &ch.backward})
        for (const Op& op : list->ops()) {
          if (op.compute != ComputeClass::host || std::string_view(op.name) != name) continue;
          ++f.copies;
          f.seconds += op.host_seconds;
          f.bytes += op.host_seconds * bandwidth;
        }
    if (f.seconds > most.seconds) most = f;
  }
  return most;
}
}  // namespace

ParamFetches param_fetches(const Workload& w) {
  return longest_role_ops(w, "offload_param_fetch",
                          w.scenario.system.node.host_copy_pinned.value());
}

ParamFetches grad_adds(const Workload& w) {
  const Scenario& sc = w.scenario;
  if (!sc.plan.fsdp_cpu_offload) return {};
  // cpu_grad_add's bytes are the node's ranks' (fsdp_reduce): a rank's share of the host's
  // bandwidth.
  return longest_role_ops(w, "cpu_grad_add",
                          sc.system.node.host_memory_bandwidth.value() / sc.gpus_per_node);
}

Bytes offload_host_bytes(const Scenario& sc, double owned) {
  const ParallelPlan& p = sc.plan;
  // The optimizer states and fp32 gradients; the 16-bit parameter partition (ZeRO-3's
  // partition is the optimizer's shard).
  // FSDP's CPU offload: the fp32 shard, its fp32 gradients and Adam's two fp32 moments.
  // Megatron's HybridDeviceOptimizer: its fraction's fp32 master, moments and gradient buffer.
  return Bytes(owned * ((p.offload_optimizer ? p.optimizer_state_bytes() + 4.0 : 0.0) +
                        (p.offload_param ? dtype_bytes(p.dtype()) : 0.0) +
                        (p.fsdp_cpu_offload ? 16.0 : 0.0) +
                        (p.optimizer_cpu_offload ? 16.0 * p.optimizer_offload_fraction : 0.0)));
}

Bytes offload_host_bytes_per_node(const Workload& w) {
  const Scenario& sc = w.scenario;
  if (!sc.plan.offload_optimizer && !sc.plan.offload_param && !sc.plan.fsdp_cpu_offload &&
      !sc.plan.optimizer_cpu_offload)
    return Bytes(0);
  return Bytes(offload_host_bytes(sc, largest_optimizer_shard(w)).value() * sc.gpus_per_node);
}

std::string offload_host_contents(const ParallelPlan& p) {
  if (p.fsdp_cpu_offload) return "fp32 parameter shards, their gradients and Adam's moments";
  if (p.optimizer_cpu_offload) return "fp32 master weights, their gradients and Adam's moments";
  if (p.offload_optimizer && p.offload_param)
    return "optimizer states, fp32 gradients and 16-bit parameter partitions";
  return p.offload_param ? "16-bit parameter partitions" : "optimizer states and fp32 gradients";
}

bool offload_fits_host(const Workload& w) {
  const Bytes host = w.scenario.system.node.host_memory;
  return host.value() <= 0 || offload_host_bytes_per_node(w) <= host;
}

}  // namespace commscope
