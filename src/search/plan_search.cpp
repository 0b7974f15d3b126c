// The plan search: enumeration, the memory bound, the one evaluation, threads, ranking, the
// rules of thumb and the what-if (search/plan_search.h; docs/plan.md).
#include "commscope/search/plan_search.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commscope/sim/evaluator.h"
#include "commscope/sim/simulator.h"
#include "commscope/spec/limits.h"
#include "commscope/workload/params.h"
#include "commscope/workload/workload.h"

namespace commscope::search {

namespace {
// Candidates one search may hold: each is a few hundred bytes of results.
constexpr std::size_t kMaxCandidates = 1000000;
// Llama 2's batch: 4 Mi tokens per iteration (Touvron et al. 2023, Table 1).
constexpr std::int64_t kDefaultBatchTokens = std::int64_t{1} << 22;

std::vector<std::int64_t> divisors(std::int64_t n) {
  std::vector<std::int64_t> d;
  for (std::int64_t i = 1; i * i <= n; ++i)
    if (n % i == 0) {
      d.push_back(i);
      if (i != n / i) d.push_back(n / i);
    }
  std::sort(d.begin(), d.end());
  return d;
}

std::string ms_or_s(double t) {
  return t >= 1 ? fmt::format("{:.3f} s", t) : fmt::format("{:.2f} ms", t * 1e3);
}

// An FSDP candidate under PP reduces its gradients once a step, after the last backward
// (--fsdp-grad-sync step: torchtitan under PyTorch's pipelining).
bool fsdp_once_a_step(const PlanPoint& p) {
  return p.framework == Framework::fsdp && p.pp > 1;
}
}  // namespace

std::string_view to_string(Objective o) {
  switch (o) {
    case Objective::tokens:
      return "tokens";
    case Objective::cost:
      return "cost";
    case Objective::energy:
      return "energy";
    default:
      return "time";
  }
}

std::optional<Objective> objective_from_name(std::string_view s) {
  if (s == "time") return Objective::time;
  if (s == "tokens") return Objective::tokens;
  if (s == "cost") return Objective::cost;
  if (s == "energy") return Objective::energy;
  return std::nullopt;
}

std::string_view framework_choice_name(Framework f) {
  return f == Framework::none ? std::string_view("commscope") : to_string(f);
}

std::optional<Framework> framework_choice_from_name(std::string_view s) {
  if (s == "commscope") return Framework::none;
  return framework_from_name(s);
}

bool zeropp_applies(int zero, Framework f) {
  return zero == 3 && (f == Framework::none || f == Framework::deepspeed);
}

bool offload_applies(int zero, Framework f) {
  return zero >= 1 && (f == Framework::none || f == Framework::deepspeed);
}

bool param_offload_applies(int zero, Framework f) {
  return zero == 3 && f == Framework::deepspeed;
}

bool compression_applies(int zero, Framework f) {
  return zero == 0 && (f == Framework::none || f == Framework::deepspeed);
}

PlanInput to_plan_input(const PlanPoint& p, int gpus, const PlanInput& base) {
  PlanInput in = base;
  in.gpus = gpus;
  in.tp = p.tp;
  in.pp = p.pp;
  in.virtual_stages = p.virtual_stages;
  in.zero = p.zero;
  in.micro_batch = p.micro_batch;
  in.global_batch = p.global_batch;
  in.recompute = p.recompute;
  // --recompute-method and --recompute-num-layers qualify full recompute only.
  if (p.recompute != Recompute::full) {
    in.recompute_block.reset();
    in.recompute_num_layers.reset();
    in.recompute_layer_interval.reset();
  }
  in.sequence_parallel = p.sequence_parallel;
  // --tp-comm-overlap applies where Megatron-LM allows it: TP > 1 with sequence parallelism.
  if (base.tp_comm_overlap.value_or(false)) in.tp_comm_overlap = p.sequence_parallel && p.tp > 1;
  // Megatron-Core's sharded optimizer (the distributed optimizer, commscope's ZeRO,
  // Megatron-FSDP), not FSDP2's or DeepSpeed's: where --fp8-param-gather and the
  // precision-aware optimizer apply; the other candidates are searched without them.
  const bool megatron_sharded =
      p.zero >= 1 && (p.framework == Framework::none || p.framework == Framework::megatron);
  if (base.fp8_param_gather.value_or(false)) in.fp8_param_gather = megatron_sharded;
  if (base.precision_aware_optimizer.value_or(false) && !megatron_sharded) {
    in.precision_aware_optimizer.reset();
    in.exp_avg_dtype.reset();
    in.exp_avg_sq_dtype.reset();
    in.main_params_dtype.reset();
    in.main_grads_dtype.reset();
  }
  // ZeRO++ and gradient compression where DeepSpeed and DDP have them; the other candidates are
  // searched without them.
  if (!zeropp_applies(p.zero, p.framework)) {
    in.zeropp_qwz.reset();
    in.zeropp_qgz.reset();
    in.zeropp_hpz.reset();
  }
  if (!offload_applies(p.zero, p.framework)) in.offload_optimizer.reset();
  if (!param_offload_applies(p.zero, p.framework)) in.offload_param.reset();
  // FSDP's CPU offload where a candidate shards over FSDP (HSDP too).
  if (p.framework != Framework::fsdp || p.dp * p.cp < 2 ||
      p.fsdp_sharding == FsdpSharding::no_shard)
    in.fsdp_cpu_offload.reset();
  // Megatron's optimizer CPU offload with the precision-aware optimizer it needs.
  if (p.framework != Framework::megatron || !in.precision_aware_optimizer.value_or(false) ||
      in.fp8_param_gather.value_or(false)) {
    in.optimizer_cpu_offload.reset();
    in.optimizer_offload_fraction.reset();
    in.overlap_cpu_optimizer_d2h_h2d.reset();
  }
  if (!compression_applies(p.zero, p.framework)) {
    in.grad_compression.reset();
    in.powersgd_rank.reset();
  }
  // --overlap-moe-expert-parallel-comm (and --delay-wgrad-compute) where Megatron-Core allows
  // it: EP > 1, the interleaved schedule under PP, no full recompute.
  if (base.overlap_moe_ep_comm.value_or(false)) {
    const bool ok = p.ep > 1 && p.recompute != Recompute::full &&
                    (p.pp == 1 || p.schedule == Schedule::interleaved);
    in.overlap_moe_ep_comm = ok;
    in.delay_wgrad_compute = ok && base.delay_wgrad_compute.value_or(false);
  }
  in.schedule = p.schedule;
  in.rank_order = p.rank_order;
  in.cp = p.cp;
  // Hierarchical CP: the candidate's levels (a plan of CP 1 has none: the ring's default form).
  in.hierarchical_cp_sizes.clear();
  if (base.cp_comm_type == CpCommType::a2a_p2p) {
    if (p.cp > 1 && p.cp_a2a > 0)
      in.hierarchical_cp_sizes = {p.cp_a2a, p.cp / p.cp_a2a};
    else
      in.cp_comm_type.reset();
  }
  in.ep = p.ep;
  if (p.expert_tp > 0)
    in.expert_tp = p.expert_tp;
  else
    in.expert_tp.reset();
  in.stage_layers.reset();
  in.pipeline_layout.reset();  // the candidate's own split, not a fixed layout
  in.first_stage_layers.reset();
  in.last_stage_layers.reset();
  if (p.first_layers > 0 && p.virtual_stages == 1) {
    in.first_stage_layers = p.first_layers;
    in.last_stage_layers = p.last_layers;
  } else if (p.first_layers > 0) {
    // Interleaved: only the first and the last *virtual* stage lighter, as a list (Megatron's
    // first/last counts are the first and last rank's, over all of its chunks).
    std::vector<int> split(static_cast<std::size_t>(p.pp * p.virtual_stages), p.middle_layers);
    split.front() = p.first_layers;
    split.back() = p.last_layers;
    in.stage_layers = std::move(split);
  }
  in.dp.reset();
  in.nodes.reset();
  in.grad_accum.reset();
  // The framework's own spelling of the sharding (megatron and fsdp refuse --zero).
  in.framework = p.framework;
  in.fsdp_sharding.reset();
  in.use_distributed_optimizer.reset();
  if (p.framework == Framework::megatron) {
    in.zero.reset();
    if (p.zero == 1) in.use_distributed_optimizer = true;
  } else if (p.framework == Framework::fsdp) {
    in.zero.reset();
    in.fsdp_sharding = p.fsdp_sharding;
  }
  // The candidate's shard group, not the base's.
  in.fsdp_replicate_size.reset();
  if (p.fsdp_shard_size > 0)
    in.fsdp_shard_size = p.fsdp_shard_size;
  else
    in.fsdp_shard_size.reset();
  if (fsdp_once_a_step(p))
    in.fsdp_grad_sync = FsdpGradSync::step;
  else
    in.fsdp_grad_sync.reset();
  return in;
}

std::string describe(const PlanPoint& p) {
  std::string s = fmt::format("TP{} PP{}", p.tp, p.pp);
  if (p.virtual_stages > 1) s += fmt::format(" v{}", p.virtual_stages);
  if (p.first_layers > 0) {
    // Every virtual stage but the first and the last takes the same share.
    const int n = p.pp * p.virtual_stages;
    s += fmt::format(" layers {}+{}x{}+{}", p.first_layers, n - 2, p.middle_layers, p.last_layers);
  }
  if (p.cp > 1) s += fmt::format(" CP{}", p.cp);
  if (p.cp > 1 && p.cp_a2a > 0) s += fmt::format(" a2a{} x ring{}", p.cp_a2a, p.cp / p.cp_a2a);
  if (p.ep > 1) s += fmt::format(" EP{}", p.ep);
  if (p.expert_tp > 0 && p.expert_tp != p.tp) s += fmt::format(" ETP{}", p.expert_tp);
  switch (p.framework) {
    case Framework::fsdp:
      s += fmt::format(" DP{} FSDP {}{}{} mbs {} gbs {} recompute {}", p.dp,
                       to_string(p.fsdp_sharding),
                       p.fsdp_shard_size > 0 ? fmt::format(" shard {}", p.fsdp_shard_size) : "",
                       fsdp_once_a_step(p) ? " grads once a step" : "", p.micro_batch,
                       p.global_batch, to_string(p.recompute));
      break;
    case Framework::megatron:
      s += fmt::format(" DP{} Megatron{} mbs {} gbs {} recompute {}", p.dp,
                       p.zero == 1 ? " distributed-optimizer" : "", p.micro_batch, p.global_batch,
                       to_string(p.recompute));
      break;
    default:
      s += fmt::format(" DP{} {}ZeRO-{} mbs {} gbs {} recompute {}", p.dp,
                       p.framework == Framework::deepspeed ? "DeepSpeed " : "", p.zero,
                       p.micro_batch, p.global_batch, to_string(p.recompute));
  }
  if (p.sequence_parallel) s += " SP";
  if (p.pp > 1) s += fmt::format(" {}", to_string(p.schedule));
  if (p.pp > 1 && p.dp > 1) s += fmt::format(" {}", to_string(p.rank_order));
  return s;
}

double memory_headroom(const SearchSpace& s, double gpu_memory) {
  return s.memory_headroom_bytes + s.memory_headroom_fraction * gpu_memory;
}

Status set_memory_headroom(SearchSpace& s, std::string_view text) {
  auto bad = [&] {
    return Error{fmt::format(
        "--memory-headroom: expected a size (2GiB, 512MiB, 1.5GB) or a percentage of the GPU's "
        "memory below 100 (10%), got '{}'",
        text)};
  };
  std::string t;
  for (char c : text)
    if (c != ' ') t += c;
  if (t.empty() || t.size() > 32) return bad();
  // A decimal number (std::from_chars: no hex, as std::stod took "0x10"), then the unit.
  double v = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || !std::isfinite(v) || v < 0) return bad();
  const std::string unit = t.substr(static_cast<std::size_t>(end - t.data()));
  static const std::pair<const char*, double> kUnits[] = {{"", 1024.0 * 1024 * 1024},
                                                          {"GiB", 1024.0 * 1024 * 1024},
                                                          {"MiB", 1024.0 * 1024},
                                                          {"GB", 1e9},
                                                          {"MB", 1e6},
                                                          {"B", 1}};
  if (unit == "%") {
    if (!(v < 100)) return bad();
    s.memory_headroom_bytes = 0;
    s.memory_headroom_fraction = v / 100;
    return Status{};
  }
  for (const auto& [name, scale] : kUnits)
    if (unit == name) {
      if (v * scale > 1e15) return bad();  // a petabyte: no GPU has it
      s.memory_headroom_bytes = v * scale;
      s.memory_headroom_fraction = 0;
      return Status{};
    }
  return bad();
}

std::int64_t global_batch_of(const SearchSpace& s) {
  if (s.global_batch) return *s.global_batch;
  const std::int64_t seq = s.base.seq_length.value_or(s.model.seq_length);
  return std::max<std::int64_t>(1, kDefaultBatchTokens / std::max<std::int64_t>(1, seq));
}

namespace {
// Megatron's uneven split of `layers` over n virtual stages when n does not divide them: the
// others take ceil(layers / n), the first and the last share what is left (each at least 1 and
// at most the others' share). {first, middle, last}; first 0 when no such split exists.
std::array<int, 3> uneven_split(int layers, int n) {
  if (n < 2 || layers % n == 0) return {0, 0, 0};
  const int m = (layers + n - 1) / n;
  const int rest = layers - (n - 2) * m;
  if (rest < 2 || m < 1) return {0, 0, 0};
  const int first = rest / 2, last = rest - first;
  if (first < 1 || last > m) return {0, 0, 0};
  return {first, m, last};
}
}  // namespace

std::vector<PlanPoint> enumerate_plans(const SearchSpace& s) {
  std::vector<PlanPoint> out;
  const int gpus = s.gpus;
  if (gpus < 1) return out;
  const int layers = s.model.layers();
  const std::int64_t B = global_batch_of(s);
  const std::int64_t seq = s.base.seq_length.value_or(s.model.seq_length);
  const bool decoder_only = s.model.kind != ArchKind::t5 && s.model.kind != ArchKind::bert;
  const bool hierarchical = s.base.cp_comm_type == CpCommType::a2a_p2p;
  const std::int64_t kv_heads = s.model.mla() ? s.model.heads : s.model.kv_heads;
  const bool moe = s.model.moe();
  // Selective recompute of the attention core alone under FlashAttention (docs/workload.md,
  // "Attention kernels") replays nothing, the same plan as no recompute, or under Megatron-Core
  // the kernel's forward to drop only its logsumexp (4 bytes a query row and head), a slower
  // plan that holds almost as much: not a candidate either way.
  const bool selective_is_none =
      attention_kernel(s.base, s.model) == AttentionKernel::flash &&
      s.base.recompute_modules.value_or(recompute_module::core_attn) == recompute_module::core_attn;
  // torchtitan's op checkpointing: the blocks its policy is modelled for, no MTP module
  const bool op_ok =
      !op_recompute_model_gap(s.model) && s.base.mtp_layers.value_or(s.model.mtp_layers) == 0;
  auto zero_ok = [&](int z) {
    return s.zero.empty() || std::find(s.zero.begin(), s.zero.end(), z) != s.zero.end();
  };
  // Frameworks in the order given (empty: the base's, or commscope's own), each once.
  std::vector<Framework> frameworks;
  for (Framework f : s.frameworks)
    if (std::find(frameworks.begin(), frameworks.end(), f) == frameworks.end())
      frameworks.push_back(f);
  if (frameworks.empty()) frameworks.push_back(s.base.framework.value_or(Framework::none));
  const bool with_own =
      std::find(frameworks.begin(), frameworks.end(), Framework::none) != frameworks.end();
  const std::int64_t gpn = std::max(1, std::min(gpus, s.system.node.gpus));
  for (std::int64_t tp : divisors(gpus)) {
    if (s.max_tp > 0 && tp > s.max_tp) break;
    if (s.model.heads % tp != 0 || s.model.kv_heads % tp != 0) continue;
    for (std::int64_t pp : divisors(gpus / tp)) {
      if (s.max_pp > 0 && pp > s.max_pp) break;
      if (pp > layers) continue;
      // Even stages, or Megatron's uneven split (decoder-only models; PP 2 or more).
      const bool even = layers % pp == 0;
      const auto split1 = even || !decoder_only ? std::array<int, 3>{0, 0, 0}
                                                : uneven_split(layers, static_cast<int>(pp));
      if (!even && split1[0] == 0) continue;
      for (std::int64_t cp : divisors(gpus / (tp * pp))) {
        if (cp > 1) {
          if (s.max_cp > 0 && cp > s.max_cp) break;
          // Load-balanced causal chunks: 2 x CP divides the sequence (Megatron-LM).
          if (!decoder_only || seq % (2 * cp) != 0) continue;
        }
        const std::int64_t dp = gpus / (tp * pp * cp);
        // Hierarchical CP's all-to-all level: every divisor of CP that divides the heads and
        // the key-value heads of a TP rank (resolve_scenario's rule; 1 and CP included: the
        // ring alone and the all-to-alls alone, as Transformer Engine runs a level of one).
        std::vector<int> levels = {0};
        if (hierarchical && cp > 1) {
          levels.clear();
          for (std::int64_t a : divisors(cp))
            if ((s.model.heads / tp) % a == 0 && (kv_heads / tp) % a == 0)
              levels.push_back(static_cast<int>(a));
        }
        // Micro-batches: divisors of each replica's samples (fixed: B / DP exactly).
        std::int64_t per_replica = 0;
        if (s.fixed_global_batch) {
          if (B % dp != 0) continue;
          per_replica = B / dp;
        } else {
          per_replica = (B + dp - 1) / dp;
        }
        std::vector<std::int64_t> mbs;
        for (std::int64_t mb : divisors(per_replica))
          if (s.micro_batch.empty() ||
              std::find(s.micro_batch.begin(), s.micro_batch.end(), mb) != s.micro_batch.end())
            mbs.push_back(mb);
        if (mbs.empty()) continue;
        // Virtual stages with their schedules and splits.
        struct Staging {
          int v;
          Schedule schedule;
          std::array<int, 3> split;
        };
        std::vector<Staging> stagings;
        if (pp == 1) {
          stagings.push_back({1, Schedule::one_f_one_b, {0, 0, 0}});
        } else {
          stagings.push_back({1, Schedule::gpipe, split1});
          stagings.push_back({1, Schedule::one_f_one_b, split1});
          for (std::int64_t v = 2; pp * v <= layers; ++v) {
            if (s.max_virtual_stages > 0 && v > s.max_virtual_stages) break;
            const int n = static_cast<int>(pp * v);
            if (layers % n == 0) {
              stagings.push_back({static_cast<int>(v), Schedule::interleaved, {0, 0, 0}});
            } else if (decoder_only) {
              // Uneven interleaving: the first and the last virtual stage one layer lighter.
              const auto sp = uneven_split(layers, n);
              if (sp[0] > 0 && sp[0] == sp[1] - 1 && sp[2] == sp[1] - 1)
                stagings.push_back({static_cast<int>(v), Schedule::interleaved, sp});
            }
          }
        }
        // Expert parallelism: EP divides the experts, EP x expert TP the TP x CP x DP ranks.
        std::vector<std::pair<int, int>> experts{{1, 0}};
        if (moe) {
          experts.clear();
          for (std::int64_t ep : divisors(s.model.experts)) {
            if (s.max_ep > 0 && ep > s.max_ep) break;
            for (std::int64_t etp : {tp, std::int64_t{1}}) {
              // Expert TP = TP, then 1 (the same plan when TP is 1: once).
              if (etp == 1 && tp == 1 && !experts.empty() && experts.back().first == ep) continue;
              if ((tp * cp * dp) % (ep * etp) != 0) continue;
              experts.push_back({static_cast<int>(ep), etp == tp ? 0 : static_cast<int>(etp)});
            }
          }
        }
        // The shardings: per framework, the ZeRO stages (or what they amount to) it allows.
        struct Sharding {
          Framework f;
          int zero;
          FsdpSharding fsdp;
          int shard = 0;  // HYBRID_SHARD's shard group (0: one node's DP ranks)
        };
        std::vector<Sharding> zeros;
        for (Framework f : frameworks) {
          if (f == Framework::fsdp) {
            // FSDP over the data-parallel ranks, as torchtitan runs FSDP2: with TP (sequence
            // parallel, torchtitan's TP plan) and with PP, where it keeps the parameters after
            // forward and reduces the gradients once a step (SHARD_GRAD_OP, --fsdp-grad-sync
            // step: torchtitan under PyTorch's pipelining); with EP for MoE models (the experts
            // sharded over the expert-data group); HYBRID_SHARD when DP alone spans nodes:
            // shard groups of one node's ranks, then of 2, 4, ... nodes' below DP (torchtitan's
            // data_parallel_shard_degree), replicated across the rest (with experts, shard
            // groups that hold whole EP groups: below).
            if (cp != 1 || dp == 1) continue;
            if (pp > 1) {
              if (zero_ok(2)) zeros.push_back({f, 2, FsdpSharding::shard_grad_op});
              continue;
            }
            if (zero_ok(3)) zeros.push_back({f, 3, FsdpSharding::full_shard});
            if (zero_ok(2)) zeros.push_back({f, 2, FsdpSharding::shard_grad_op});
            if (zero_ok(3) && tp == 1 && dp > gpn && dp % gpn == 0)
              for (std::int64_t shard = gpn; shard < dp && dp % shard == 0; shard *= 2)
                zeros.push_back(
                    {f, 3, FsdpSharding::hybrid_shard, shard == gpn ? 0 : static_cast<int>(shard)});
            continue;
          }
          if (f == Framework::deepspeed && cp != 1) continue;  // no Megatron CP in DeepSpeed
          if (f == Framework::deepspeed && moe) continue;      // DeepSpeed-MoE is not modelled
          for (int z = 0; z <= 3; ++z) {
            if (!zero_ok(z)) continue;
            if (z >= 2 && pp > 1) continue;  // DeepSpeed: ZeRO-2/3 only without PP
            if (z >= 2 && moe) continue;     // expert sharding under ZeRO-2/3
            if (z > 0 && dp * cp == 1 && zero_ok(0)) continue;  // shards nothing: as ZeRO-0
            if (f == Framework::megatron && z > 1) continue;    // DDP or distributed optimizer
            // DeepSpeed's stages 0-2 are commscope's own pattern (docs/workload.md).
            if (f == Framework::deepspeed && z < 3 && with_own) continue;
            zeros.push_back({f, z, FsdpSharding::full_shard});
          }
        }
        // MoE with TP needs sequence parallelism (Megatron-LM).
        const int sp_from = moe && tp > 1 ? 1 : 0;
        for (const auto& st : stagings)
          for (int level : levels)
            for (const auto& [ep, etp] : experts)
              for (const Sharding& z : zeros)
                for (std::int64_t mb : mbs)
                  for (Recompute rc :
                       {Recompute::none, Recompute::selective, Recompute::full, Recompute::op})
                    for (int sp = sp_from; sp <= (tp > 1 ? 1 : 0); ++sp)
                      for (int order = 0; order <= (pp > 1 && dp > 1 ? 1 : 0); ++order) {
                        // torchtitan's op-level checkpointing: FSDP plans of a model whose blocks
                        // the policy is modelled for (resolve_op_recompute).
                        if (rc == Recompute::op && (z.f != Framework::fsdp || !op_ok)) continue;
                        if (rc == Recompute::selective && selective_is_none) continue;
                        if (z.f == Framework::fsdp && tp > 1 && sp == 0) continue;
                        // HSDP with experts: EP x expert TP inside a shard group (TP 1 here).
                        if (z.fsdp == FsdpSharding::hybrid_shard &&
                            (z.shard > 0 ? z.shard : gpn) % (ep * std::max(etp, 1)) != 0)
                          continue;
                        if (out.size() >= kMaxCandidates) return out;  // the caller reports it
                        PlanPoint p;
                        p.tp = static_cast<int>(tp);
                        p.pp = static_cast<int>(pp);
                        p.dp = static_cast<int>(dp);
                        p.cp = static_cast<int>(cp);
                        p.cp_a2a = level;
                        p.ep = ep;
                        p.expert_tp = etp;
                        p.virtual_stages = st.v;
                        p.schedule = st.schedule;
                        p.first_layers = st.split[0];
                        p.middle_layers = st.split[1];
                        p.last_layers = st.split[2];
                        p.zero = z.zero;
                        p.framework = z.f;
                        p.fsdp_sharding = z.fsdp;
                        p.fsdp_shard_size = z.shard;
                        p.micro_batch = mb;
                        p.global_batch = per_replica * dp;
                        p.recompute = rc;
                        p.sequence_parallel = sp == 1;
                        p.rank_order = order ? RankOrder::tp_pp_dp : RankOrder::tp_dp_pp;
                        out.push_back(p);
                      }
      }
    }
  }
  return out;
}

double memory_lower_bound(const Scenario& sc) {
  const ParallelPlan& p = sc.plan;
  const bool mixed = p.precision != Precision::fp32;
  // ZeRO-Offload keeps the optimizer states, and under ZeRO-2/3 the gradient shard, on the host;
  // FSDP's CPU offload the states, the gradient shards and the parameter shards.
  const bool host_states = p.offload_optimizer || p.fsdp_cpu_offload;
  // (Megatron's optimizer CPU offload keeps the rest of the fraction's states on the GPU.)
  const double wb = mixed ? 2 : 4,
               ob = host_states ? 0
                    : p.optimizer_cpu_offload
                        ? p.optimizer_state_bytes() * (1 - p.optimizer_offload_fraction)
                        : p.optimizer_state_bytes();
  const double gb = (p.offload_optimizer && p.zero >= 2) || p.fsdp_cpu_offload ? 0 : wb;
  const double d = p.grad_dp();  // DP x CP: the ranks a ZeRO shard is cut over
  // The stages' TP shards hold every parameter at least once over TP ranks (replicated ones
  // whole): the fullest stage holds at least all / (TP x PP), uneven stages or not (the fullest
  // holds at least the average). Routed experts are cut over EP x expert TP instead, and their
  // optimizer states over the expert-DP group.
  const ParamCount count = count_params(sc.model);
  const double pp = p.pp;
  const double dense = static_cast<double>(count.total - count.experts) / (double(p.tp) * pp);
  const double experts =
      static_cast<double>(count.experts) / (double(p.ep) * double(p.expert_tp) * pp);
  // (The experts' shards are cut over the expert-data group, which may be larger than DP x CP:
  // the larger of the two keeps this a lower bound.)
  const double ed = std::max<double>(d, p.expert_dp());
  // Under --fp8-param-gather a ZeRO-3 shard holds its GEMM weights in 1 byte: 1 byte a
  // parameter keeps the bound below (without ZeRO-3 the FP8 data and its transpose are the
  // 16-bit weights' bytes).
  // Under --offload-param and --fsdp-cpu-offload the parameter shards are on the host.
  const double wb3 = p.offload_param || p.fsdp_cpu_offload ? 0
                     : p.zero >= 3 && p.fp8_param_gather   ? 1
                                                           : wb;
  const double states = dense * (wb3 / (p.zero >= 3 ? d : 1) + gb / (p.zero >= 2 ? d : 1) +
                                 ob / (p.zero >= 1 ? d : 1)) +
                        experts * (wb3 / (p.zero >= 3 ? ed : 1) + gb / (p.zero >= 2 ? ed : 1) +
                                   ob / (p.zero >= 1 ? ed : 1));
  // The first stage's first chunk: its blocks (the first virtual stage's share, uneven or
  // not), times the micro-batches it holds; its own states are at least zero, so this alone is
  // a bound too.
  const int per_chunk = p.stage_layers.empty() ? sc.model.layers() / (p.pp * p.virtual_stages)
                                               : p.stage_layers.front();
  double act = 0;
  for (int l = 0; l < per_chunk; ++l)
    if (sc.plan.keeps_block_input(l))
      act += block_activation_bytes(sc, l, sc.plan.full_recompute_at(l)).value();
  act *= static_cast<double>(inflight_microbatches(sc, 0));
  return std::max(states, act);
}

std::optional<BlockGraphs> blocks_at_pp1(const SearchSpace& s, const PlanPoint& p) {
  PlanPoint one = p;
  one.dp = p.dp * p.pp;
  one.pp = one.virtual_stages = 1;
  one.first_layers = one.last_layers = one.middle_layers = 0;
  one.global_batch = p.micro_batch * one.dp;
  one.schedule = Schedule::one_f_one_b;
  one.rank_order = RankOrder::tp_dp_pp;
  ModelSpec m = s.model;
  const int layers = m.layers();
  // The shortened model: at most one leading dense block, then the blocks up to the second MoE
  // block (a dense model's first two), so that it holds every kind of block the model has
  // (interleaved ones included) and the last of each kind follows another block.
  ModelSpec shortened = m;
  if (m.moe()) shortened.first_dense_layers = std::min(m.first_dense_layers, 1);
  int keep = 0;
  for (int l = 0, moe_blocks = 0; l < layers && moe_blocks < 2; ++l) {
    keep = l + 1;
    if (!m.moe() || shortened.moe_layer(l)) ++moe_blocks;
  }
  const bool shorten = m.encoder_layers == 0 && layers > keep;
  if (shorten) {
    m = shortened;
    m.decoder_layers = keep;
  }
  PlanInput in = to_plan_input(one, s.gpus, s.base);
  in.cpu_offload_layers.reset();
  auto sc = resolve_scenario(m, s.system, s.network, in);
  if (!sc) return std::nullopt;
  BlockGraphs g = block_graphs(build_workload(*sc));
  if (!shorten) return g;
  // Each block of the model: the graph of the last block of its kind.
  BlockGraphs all;
  all.graphs = std::move(g.graphs);
  for (int l = 0; l < layers; ++l) {
    int from = keep - 1;  // the last shortened block of l's kind
    while (from > 0 && m.moe_layer(from) != s.model.moe_layer(l)) --from;
    all.forward.push_back(g.forward[static_cast<std::size_t>(from)]);
    all.backward.push_back(g.backward[static_cast<std::size_t>(from)]);
  }
  return all;
}

namespace {
// resolve_scenario and the memory bound: the scenario when the plan is valid and not pruned.
std::optional<Scenario> resolve_and_bound(const SearchSpace& s, const PlanPoint& p, bool prune,
                                          Evaluated& e) {
  auto sc = resolve_scenario(s.model, s.system, s.network, to_plan_input(p, s.gpus, s.base));
  if (!sc) {
    e.reason = sc.error().message;
    return std::nullopt;
  }
  e.nodes = sc->nodes;
  e.gpus_per_node = sc->gpus_per_node;
  e.gpu_memory = sc->system.gpu.memory.value();
  e.headroom = memory_headroom(s, e.gpu_memory);
  e.memory_bound = memory_lower_bound(*sc);
  if (prune && e.memory_bound > e.gpu_memory - e.headroom) {
    e.status = Evaluated::Status::pruned;
    e.memory = e.memory_bound;
    return std::nullopt;
  }
  return std::move(*sc);
}

// The fullest rank's memory of w (its scenario the plan's; build_layout is enough); no_fit
// when over the GPU's.
bool fits(const Workload& w, Evaluated& e) {
  for (const Role& role : w.roles)
    e.memory = std::max(e.memory, memory_per_rank(w, role).total().value());
  // (under ZeRO-Offload the node's host memory holds the optimizer: it must fit there too)
  if (e.memory > e.gpu_memory - e.headroom || !offload_fits_host(w)) {
    e.status = Evaluated::Status::no_fit;
    return false;
  }
  return true;
}

// Plan p's score (its time for the space's global batch) of an iteration time, and back: the
// iteration time whose score is `score` (infinity stays infinity).
double score_of(const SearchSpace& s, const PlanPoint& p, double iteration_time) {
  return iteration_time * static_cast<double>(global_batch_of(s)) /
         static_cast<double>(p.global_batch);
}
double skip_above(const SearchSpace& s, const PlanPoint& p, double score) {
  return score * static_cast<double>(p.global_batch) / static_cast<double>(global_batch_of(s));
}

// The figures of a prediction of plan p (w: its workload, or one equal but for the schedule).
void fill(const SearchSpace& s, const PlanPoint& p, const Workload& w, const Prediction& pred,
          Evaluated& e) {
  const Scenario& sc = w.scenario;
  e.status = Evaluated::Status::ok;
  e.iteration_time = pred.iteration_time;
  e.score_time = score_of(s, p, pred.iteration_time);
  const ModelSpec& m = sc.model;
  const double tokens =
      static_cast<double>(p.global_batch) *
      static_cast<double>(m.kind == ArchKind::t5 ? m.seq_length + m.dec_seq() : m.seq_length);
  e.tokens_per_s = tokens / pred.iteration_time;
  // MFU with the breakdowns (a prediction of the iteration time alone leaves it to complete()).
  if (!pred.stages.empty())
    e.mfu = iteration_flops(w).model / pred.iteration_time / s.gpus /
            sc.system.gpu.peak.for_dtype(sc.plan.dtype()).value();
  e.compute = pred.mean.compute;
  // The time communication runs (a union, <= the iteration; timeline.h comm_running), and
  // what the simulator booked (more when per-micro-batch reductions overrun their compute).
  e.comm = comm_running(pred.mean);
  e.comm_booked = pred.mean.comm;
  e.exposed = pred.mean.exposed;
  e.bubble = pred.mean.bubble;
  e.cost = e.score_time * s.gpus * s.system.price_per_gpu_hour / 3600.0;
  e.energy = e.score_time * s.gpus * s.system.power_per_gpu_w;
}

// The K best score times found so far, shared by the search's threads (SearchOptions::bound).
class TopK {
 public:
  explicit TopK(std::size_t k) : k_(k) {}
  // The K-th best so far (infinity until K are known).
  double kth() const { return kth_.load(std::memory_order_relaxed); }
  void offer(double score) {
    if (!(score < kth())) return;
    std::lock_guard<std::mutex> lock(mu_);
    best_.push_back(score);
    std::push_heap(best_.begin(), best_.end());
    if (best_.size() > k_) {
      std::pop_heap(best_.begin(), best_.end());
      best_.pop_back();
    }
    if (best_.size() == k_) kth_.store(best_.front(), std::memory_order_relaxed);
  }

 private:
  std::size_t k_;
  std::mutex mu_;
  std::vector<double> best_;  // a max-heap of at most k_
  std::atomic<double> kth_{std::numeric_limits<double>::infinity()};
};

// The prediction of plan p (`pred` of its workload w) into e: its figures, or, when its lower
// bound skipped it, the bound; offered to the top K.
void take(const SearchSpace& s, const PlanPoint& p, const Workload& w, const Prediction& pred,
          Evaluated& e, TopK* top) {
  if (pred.skipped_bound > 0) {
    e.status = Evaluated::Status::skipped;
    e.score_bound = score_of(s, p, pred.skipped_bound);
    return;
  }
  fill(s, p, w, pred, e);
  e.breakdown = false;
  if (top) top->offer(e.score_time);
}

// The blocks of the plans built alike (blocks_at_pp1), shared by the search's threads. Null
// where that plan is not valid (the plans then go without this bound).
class BlockGraphCache {
 public:
  const BlockGraphs* get(const SearchSpace& s, const PlanPoint& p) {
    const auto k = key(p);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = cache_.find(k); it != cache_.end()) return it->second.get();
    }
    std::unique_ptr<BlockGraphs> value;
    if (auto g = blocks_at_pp1(s, p)) value = std::make_unique<BlockGraphs>(std::move(*g));
    std::lock_guard<std::mutex> lock(mu_);
    return cache_.try_emplace(k, std::move(value)).first->second.get();  // the first one kept
  }

 private:
  // What a block's ops depend on (builder.cpp's block programs, the ZeRO and framework
  // patterns); not DP, PP, the stages, the batch, the schedule or the rank order.
  using Key = std::tuple<int, int, int, int, int, std::int64_t, int, bool, int, int, int, int>;
  static Key key(const PlanPoint& p) {
    return {p.tp,
            p.cp,
            p.cp_a2a,
            p.ep,
            p.expert_tp,
            p.micro_batch,
            static_cast<int>(p.recompute),
            p.sequence_parallel,
            p.zero,
            static_cast<int>(p.framework),
            static_cast<int>(p.fsdp_sharding),
            p.fsdp_shard_size};
  }
  std::mutex mu_;
  std::map<Key, std::unique_ptr<BlockGraphs>> cache_;
};

// Checks plan p's memory (on its layout, no ops built) and, where the bound from its blocks
// (compute_lower_bound) puts its score above `kth`, skips it. false: e says why it goes no
// further.
bool fits_and_may_rank(const SearchSpace& s, const PlanPoint& p, const Scenario& sc, double kth,
                       BlockGraphCache* cache, Evaluated& e) {
  const Workload layout = build_layout(sc);
  if (!fits(layout, e)) return false;
  if (!cache || !std::isfinite(kth)) return true;
  const BlockGraphs* blocks = cache->get(s, p);
  if (!blocks) return true;
  const double bound = compute_lower_bound(sc, layout, *blocks);
  if (!(bound > skip_above(s, p, kth))) return true;
  e.status = Evaluated::Status::skipped;
  e.unbuilt = true;
  e.score_bound = score_of(s, p, bound);
  return false;
}

// Plans alike but for the schedule (GPipe and 1F1B of one layout) share one workload: the
// memory of each is checked on its layout, the workload is built once, and the members are
// predicted together by Evaluator::evaluate_resolved (the same numbers as evaluate(), tested in
// sim_speed_test). Plans whose lower bound on the score is above `kth` are skipped (infinity:
// none is): first the bound from their blocks (`cache`, may be null: none), before their ops
// are built, then the simulator's from the chunks' runs. The others' scores are offered to `top`
// (may be null).
void evaluate_group(const SearchSpace& s, const std::vector<PlanPoint>& plans,
                    const std::vector<std::size_t>& group, bool prune, const Evaluator& ev,
                    std::vector<Evaluated>& results, TopK* top, double kth,
                    BlockGraphCache* cache) {
  std::vector<std::optional<Scenario>> scs(group.size());
  std::vector<std::size_t> fit;  // positions in group
  for (std::size_t k = 0; k < group.size(); ++k) {
    Evaluated& e = results[group[k]];
    e = Evaluated{};
    const PlanPoint& p = plans[group[k]];
    scs[k] = resolve_and_bound(s, p, prune, e);
    if (scs[k] && fits_and_may_rank(s, p, *scs[k], kth, cache, e)) fit.push_back(k);
  }
  if (fit.empty()) return;
  // The members' workload, built once (the schedule changes none of its ops), then each
  // member's scenario lent to it in turn (moved, not copied).
  Workload w = build_workload(*scs[fit.front()]);
  auto lend = [&](std::size_t k) {
    std::swap(w.scenario, *scs[k]);
    w.microbatches = static_cast<int>(w.scenario.plan.grad_accum);
  };
  std::vector<const Scenario*> members;
  for (std::size_t k : fit) members.push_back(&*scs[k]);
  const auto preds = ev.evaluate_resolved(
      w, members, false, [&](std::size_t j) { return skip_above(s, plans[group[fit[j]]], kth); });
  for (std::size_t j = 0; j < fit.size(); ++j) {
    const std::size_t k = fit[j];
    lend(k);
    take(s, plans[group[k]], w, preds[j], results[group[k]], top);
    lend(k);
  }
}

// Candidates alike but for the schedule of PP > 1 without interleaving, in candidate order of
// their first member.
std::vector<std::vector<std::size_t>> schedule_groups(const std::vector<PlanPoint>& plans) {
  auto key = [](const PlanPoint& p) {
    return std::make_tuple(p.tp, p.pp, p.virtual_stages, p.dp, p.cp, p.cp_a2a, p.ep, p.expert_tp,
                           p.first_layers, p.zero, p.micro_batch, p.global_batch,
                           static_cast<int>(p.recompute), p.sequence_parallel,
                           static_cast<int>(p.rank_order), static_cast<int>(p.framework),
                           static_cast<int>(p.fsdp_sharding), p.fsdp_shard_size);
  };
  std::vector<std::vector<std::size_t>> groups;
  std::map<decltype(key(PlanPoint{})), std::size_t> where;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const PlanPoint& p = plans[i];
    if (p.pp > 1 && p.virtual_stages == 1) {
      auto [it, fresh] = where.try_emplace(key(p), groups.size());
      if (!fresh) {
        groups[it->second].push_back(i);
        continue;
      }
    }
    groups.push_back({i});
  }
  return groups;
}
}  // namespace

Evaluated evaluate(const SearchSpace& s, const PlanPoint& p, bool prune) {
  Evaluated e;
  auto sc = resolve_and_bound(s, p, prune, e);
  if (!sc) return e;
  const Workload w = build_workload(*sc);
  if (!fits(w, e)) return e;
  fill(s, p, w, simulate(w), e);
  return e;
}

double objective_value(const Evaluated& e, Objective o) {
  switch (o) {
    case Objective::tokens:
      // Tokens for the same batch: the time for the space's batch ranks them alike; tokens/s
      // of plans whose batch was rounded up is higher, so rank by time per token.
      return e.score_time;
    case Objective::cost:
      return e.cost;
    case Objective::energy:
      return e.energy;
    default:
      return e.score_time;
  }
}

std::string why_better(const Evaluated& a, const Evaluated& b) {
  struct Term {
    const char* name;
    double a, b;
  };
  // The terms for the space's batch, as score_time is (plans whose batch was rounded up run
  // more samples an iteration: their iteration's terms compared raw contradicted the ranking).
  const double ka = a.iteration_time > 0 ? a.score_time / a.iteration_time : 1.0;
  const double kb = b.iteration_time > 0 ? b.score_time / b.iteration_time : 1.0;
  const Term terms[] = {{"compute", a.compute * ka, b.compute * kb},
                        {"exposed communication", a.exposed * ka, b.exposed * kb},
                        {"pipeline bubble", a.bubble * ka, b.bubble * kb}};
  if (a.score_time == b.score_time)
    return fmt::format("a tie ({} each; kept in candidate order)", ms_or_s(a.score_time));
  const Term* best = nullptr;
  for (const Term& t : terms)
    if (t.b - t.a > 0 && (!best || t.b - t.a > best->b - best->a)) best = &t;
  if (!best)
    return fmt::format("no term of the breakdown is smaller (time for the batch {} against {})",
                       ms_or_s(a.score_time), ms_or_s(b.score_time));
  return fmt::format("{} {} less ({} against {})", best->name, ms_or_s(best->b - best->a),
                     ms_or_s(best->a), ms_or_s(best->b));
}

namespace {
std::string worse_word(Objective o) {
  switch (o) {
    case Objective::cost:
      return "dearer";
    case Objective::energy:
      return "more energy";
    default:
      return "slower";
  }
}

// Checks one rule: `obeys` says whether a plan follows it.
template <class Obeys>
RuleCheck check_rule(std::string rule, std::string obey_text, std::string violate_text,
                     const Ranked& winner, std::vector<Ranked>& fitting, Objective o, Obeys&& obeys,
                     const std::function<void(Ranked&)>& complete = {}) {
  RuleCheck r;
  r.rule = std::move(rule);
  r.winner_obeys = obeys(winner);
  Ranked* other = nullptr;
  for (Ranked& x : fitting)
    if (obeys(x) != r.winner_obeys &&
        (!other || objective_value(x.result, o) < objective_value(other->result, o)))
      other = &x;
  if (other && complete) complete(*other);  // its breakdown, for why_better
  const double w = objective_value(winner.result, o);
  if (other) {
    r.best_other = *other;
    r.difference = objective_value(other->result, o) / w - 1;
  }
  const std::string worse = worse_word(o);
  if (r.winner_obeys) {
    r.agrees = true;
    r.text = other ? fmt::format("agrees: the best plan {} ({}) is {:.1f}% {}; the winner has {}",
                                 violate_text, describe(other->plan), 100 * r.difference, worse,
                                 why_better(winner.result, other->result))
                   : fmt::format("agrees: every fitting plan obeys it");
  } else {
    r.agrees = false;
    r.text = other ? fmt::format(
                         "disagrees: the best plan {} ({}) is {:.1f}% {}, because the "
                         "winner has {}",
                         obey_text, describe(other->plan), 100 * r.difference, worse,
                         why_better(winner.result, other->result))
                   : fmt::format("disagrees: no fitting plan obeys it");
  }
  return r;
}

}  // namespace

int replica_nodes(const PlanPoint& p, int gpus_per_node) {
  // Replica 0's ranks in Megatron's order (spec/plan.h RankOrder; CP between TP and DP, as
  // cost/collective.cpp places the groups): each stage's TP x CP ranks are contiguous, the
  // stages TP x CP x DP (tp-dp-pp) or TP x CP (tp-pp-dp) ranks apart.
  const std::int64_t gpn = std::max(1, gpus_per_node);
  const std::int64_t stage = std::int64_t{p.tp} * p.cp;
  const std::int64_t stride = p.rank_order == RankOrder::tp_dp_pp ? stage * p.dp : stage;
  std::int64_t count = 0, last_node = -1;  // stages in rank order: nodes ascend
  for (int k = 0; k < p.pp; ++k) {
    const std::int64_t first = k * stride / gpn, last = (k * stride + stage - 1) / gpn;
    count += last - std::max(first, last_node + 1) + 1;
    last_node = last;
  }
  return static_cast<int>(count);
}

namespace {
// Every field but the micro-batch (and the batch it rounds): plans alike but for it.
auto layout_key(const PlanPoint& p) {
  return std::make_tuple(p.tp, p.pp, p.virtual_stages, p.cp, p.cp_a2a, p.ep, p.expert_tp,
                         p.first_layers, p.zero, static_cast<int>(p.recompute), p.sequence_parallel,
                         static_cast<int>(p.schedule), static_cast<int>(p.rank_order),
                         static_cast<int>(p.framework), static_cast<int>(p.fsdp_sharding),
                         p.fsdp_shard_size);
}
}  // namespace

Result<SearchResult> search(const SearchSpace& s, const SearchOptions& o) {
  if (o.top < 1) return Error{fmt::format("--top: expected a positive integer, got '{}'", o.top)};
  if (o.threads < 1)
    return Error{fmt::format("--threads: expected a positive integer, got '{}'", o.threads)};
  if (s.gpus < 1)
    return Error{fmt::format("--gpus: expected a positive integer, got '{}'", s.gpus)};
  if (o.objective == Objective::cost && !(s.system.price_per_gpu_hour > 0))
    return Error{
        fmt::format("--objective: expected a system whose preset gives a price per GPU-hour "
                    "(economics.price_per_gpu_hour_usd) for cost, got '{}' without one",
                    s.system.name)};
  if (o.objective == Objective::energy && !(s.system.power_per_gpu_w > 0))
    return Error{
        fmt::format("--objective: expected a system whose preset gives a power per GPU "
                    "(economics.power_per_gpu_w) for energy, got '{}' without one",
                    s.system.name)};
  {
    const double mem = s.system.gpu.memory.value();
    const double room = memory_headroom(s, mem);
    if (!(s.memory_headroom_bytes >= 0) || !(s.memory_headroom_fraction >= 0) ||
        !(s.memory_headroom_fraction < 1) || !(room < mem))
      return Error{fmt::format(
          "--memory-headroom: expected less than the {:.3g} GiB of a {} GPU, got {:.3g} GiB",
          mem / (1024.0 * 1024 * 1024), s.system.gpu.name, room / (1024.0 * 1024 * 1024))};
  }
  SearchResult out;
  out.objective = o.objective;
  out.global_batch = global_batch_of(s);
  const std::vector<PlanPoint> plans = enumerate_plans(s);
  if (plans.size() >= kMaxCandidates)
    return Error{
        fmt::format("--gpus: expected a search of at most {} candidate plans (narrow it with "
                    "--max-tp, --max-cp, --max-ep, "
                    "--max-pp, --zero or --micro-batch-size), got at least that many",
                    kMaxCandidates)};
  out.candidates = plans.size();
  if (plans.empty() && !s.micro_batch.empty()) {
    // The micro-batches given may be what rules every plan out: say so, not --gpus.
    SearchSpace any = s;
    any.micro_batch.clear();
    if (!enumerate_plans(any).empty())
      return Error{fmt::format(
          "--micro-batch-size: expected a size that divides the samples of some data-parallel "
          "replica (global batch {} over DP ranks{}), got {}",
          out.global_batch, s.fixed_global_batch ? "" : ", rounded up",
          fmt::join(s.micro_batch, ","))};
  }
  if (plans.empty() && !s.zero.empty()) {
    // So may the ZeRO stages with the framework (FSDP and Megatron take no stage 0/1 or 2/3
    // of commscope's; found by probing, 2026-11-30: --gpus was blamed).
    SearchSpace any = s;
    any.zero.clear();
    if (!enumerate_plans(any).empty())
      return Error{
          fmt::format("--zero: expected a stage some plan of the framework{} can take, got {}",
                      s.frameworks.size() > 1 ? "s" : "", fmt::join(s.zero, ","))};
  }
  if (plans.empty() &&
      (!s.frameworks.empty() || s.base.framework.value_or(Framework::none) != Framework::none)) {
    // Or the framework: DeepSpeed and FSDP take no experts, FSDP no CP, ...
    SearchSpace any = s;
    any.frameworks = {Framework::none};
    any.base.framework.reset();
    if (!enumerate_plans(any).empty()) {
      std::vector<std::string> names;
      for (Framework f : s.frameworks.empty()
                             ? std::vector<Framework>{s.base.framework.value_or(Framework::none)}
                             : s.frameworks)
        names.emplace_back(to_string(f));
      return Error{fmt::format(
          "--framework: expected one that can lay {} out on {} GPUs{}, got {} (commscope's own "
          "pattern can; docs/plan.md lists what each framework's plans may be)",
          s.model.name, s.gpus, s.zero.empty() ? "" : " at the --zero stages given",
          fmt::join(names, ","))};
    }
  }
  if (plans.empty())
    return Error{fmt::format(
        "--gpus: expected a GPU count that TP x PP x DP can fill for {} (heads {}, layers {}) "
        "with global batch {} and the constraints given, got {}",
        s.model.name, s.model.heads, s.model.layers(), out.global_batch, s.gpus)};

  std::vector<Evaluated> results(plans.size());
  // Work units: single plans, or (share_workloads) the plans alike but for the schedule.
  std::vector<std::vector<std::size_t>> groups;
  if (o.share_workloads) {
    groups = schedule_groups(plans);
  } else {
    groups.reserve(plans.size());
    for (std::size_t i = 0; i < plans.size(); ++i) groups.push_back({i});
  }
  // The groups go in rounds of kRound; within a round the threads take chunks of kChunk. A
  // plan is skipped when its lower bound is above the K-th best of the rounds before its own
  // (frozen at each round's end), so what is skipped does not depend on the thread count.
  constexpr std::size_t kChunk = 8, kRound = 256;
  const std::size_t rounds = (groups.size() + kRound - 1) / kRound;
  std::atomic<std::size_t> next{0}, done{0};
  std::atomic<bool> stop{false}, over{false};
  // The pipeline tasks of the plans predicted, bounded in all (limits::kMaxSimulatedTasks): a
  // 1T search with --top 1000 ran past a minute in 946 MB (found by probing, 2026-12-02).
  std::atomic<std::int64_t> tasks{0};
  TopK best(static_cast<std::size_t>(o.top));
  std::size_t round = 0;  // changed by the barrier's completion only
  double kth = std::numeric_limits<double>::infinity();
  auto round_done = [&]() noexcept {
    ++round;
    next.store(round * kRound);
    if (o.bound) kth = best.kth();
  };
  std::barrier sync(o.threads, round_done);
  BlockGraphCache blocks;
  // One chunk of groups of the current round; false when none is left in it.
  auto chunk = [&](const Evaluator& ev) {
    const std::size_t end_of_round = std::min(groups.size(), (round + 1) * kRound);
    const std::size_t begin = next.fetch_add(kChunk);
    if (begin >= end_of_round) return false;
    const std::size_t end = std::min(end_of_round, begin + kChunk);
    std::size_t n = 0;
    for (std::size_t g = begin; g < end; ++g) {
      evaluate_group(s, plans, groups[g], o.prune, ev, results, o.bound ? &best : nullptr, kth,
                     &blocks);
      for (std::size_t i : groups[g]) {
        results[i].reason.clear();  // counted, not kept
        if (results[i].status != Evaluated::Status::ok) continue;
        const PlanPoint& p = plans[i];
        const std::int64_t t = limits::simulated_tasks(
            p.pp, p.virtual_stages,
            p.global_batch / std::max<std::int64_t>(1, p.micro_batch * p.dp));
        if (tasks.fetch_add(t) + t > o.max_tasks) over = stop = true;
      }
      n += groups[g].size();
    }
    done.fetch_add(n);
    return true;
  };
  // Every thread runs every round (doing nothing once stopped) and waits at its end.
  auto work = [&](bool reporter) {
    const Evaluator ev(s.model, s.system, s.network);
    for (std::size_t r = 0; r < rounds; ++r) {
      while (!stop.load(std::memory_order_relaxed) && chunk(ev))
        if (reporter && o.progress && !o.progress(done.load(), plans.size())) stop = true;
      sync.arrive_and_wait();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < o.threads; ++t) pool.emplace_back(work, false);
  work(true);  // the calling thread works too, and reports progress between its chunks
  for (auto& t : pool) t.join();
  if (over)
    return Error{fmt::format(
        "--top: expected a search that simulates at most {} pipeline tasks in all (PP x virtual "
        "stages x micro-batches of the plans it predicts; commscope's limit, docs/limits.md), "
        "got more for the best {}; ask for fewer plans (--top) or fewer micro-batches "
        "(--global-batch-size)",
        o.max_tasks, o.top)};
  if (stop || (o.progress && !o.progress(plans.size(), plans.size()))) return Error{"interrupted"};

  std::vector<std::size_t> skipped;  // candidates, in order
  for (std::size_t i = 0; i < plans.size(); ++i) {
    switch (results[i].status) {
      case Evaluated::Status::invalid:
        ++out.invalid;
        break;
      case Evaluated::Status::pruned:
        ++out.pruned;
        break;
      case Evaluated::Status::no_fit:
        ++out.no_fit;
        break;
      case Evaluated::Status::skipped:
        ++out.skipped;
        out.skipped_unbuilt += results[i].unbuilt ? 1 : 0;
        skipped.push_back(i);
        break;
      case Evaluated::Status::ok:
        ++out.evaluated;
        out.fitting.push_back({plans[i], std::move(results[i]), i});
        break;
    }
  }
  if (out.invalid == out.candidates) {
    // Nothing valid: resolve_scenario's reason for the first candidate names the flag.
    const Evaluated first = evaluate(s, plans.front(), o.prune);
    return Error{fmt::format("{} (so are all {} candidate plans)", first.reason, out.candidates)};
  }
  if (out.fitting.empty()) {
    const double gib = 1024.0 * 1024 * 1024, mem = s.system.gpu.memory.value();
    const double room = memory_headroom(s, mem);
    return Error{fmt::format(
        "--gpus: expected a GPU count on which some plan of {} fits in the {:.0f} GiB of a "
        "{} GPU{}, got {} ({} candidates: {} not valid, {} over memory)",
        s.model.name, mem / gib, s.system.gpu.name,
        room > 0 ? fmt::format(" less {:.3g} GiB of --memory-headroom", room / gib) : "", s.gpus,
        out.candidates, out.invalid, out.pruned + out.no_fit)};
  }
  // Rank: the objective, then the candidate order (deterministic for any thread count).
  std::vector<std::size_t> order(out.fitting.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return objective_value(out.fitting[a].result, o.objective) <
           objective_value(out.fitting[b].result, o.objective);
  });
  const std::size_t k = std::min<std::size_t>(order.size(), static_cast<std::size_t>(o.top));
  // The search predicted iteration times alone: the breakdowns of the plans it prints (and
  // explains, below) are predicted now, by evaluate().
  auto complete = [&](Ranked& r) {
    if (r.result.breakdown) return;
    const Evaluated full = evaluate(s, r.plan, false);
    r.result.compute = full.compute, r.result.comm = full.comm;
    r.result.comm_booked = full.comm_booked;
    r.result.exposed = full.exposed, r.result.bubble = full.bubble;
    r.result.mfu = full.mfu;
    r.result.breakdown = true;
  };
  // A rule compares the winner with the best fitting plan on the other side of it, which may
  // have been skipped (its bound was above the K-th best, not above that plan's time): before a
  // rule is checked, the skipped plans on its other side are taken in the order of their bounds
  // while a bound is at most the best time found there (all of them while none is), and
  // predicted unless the runs' bound skips them again.
  const Evaluator rescuer(s.model, s.system, s.network);
  auto rescue = [&](const std::function<bool(const PlanPoint&)>& other_side) {
    std::vector<std::size_t> side;
    for (std::size_t i : skipped)
      if (results[i].status == Evaluated::Status::skipped && other_side(plans[i]))
        side.push_back(i);
    if (side.empty()) return;
    std::stable_sort(side.begin(), side.end(), [&](std::size_t a, std::size_t b) {
      return results[a].score_bound < results[b].score_bound;
    });
    double best_there = std::numeric_limits<double>::infinity();
    for (const Ranked& r : out.fitting)
      if (other_side(r.plan)) best_there = std::min(best_there, r.result.score_time);
    std::vector<Ranked> found;
    for (std::size_t i : side) {
      if (results[i].score_bound > best_there) break;
      // The search's own path with best_there as the K-th best: the simulator's bound from
      // the runs (tighter than the blocks' that may have skipped it) may skip it again, as it
      // cannot beat best_there, which only falls.
      const bool was_unbuilt = results[i].unbuilt;
      evaluate_group(s, plans, {i}, o.prune, rescuer, results, nullptr, best_there * (1 + 1e-12),
                     nullptr);
      const Evaluated::Status st = results[i].status;
      // (skipped_unbuilt is part of skipped: it follows the plan's new status)
      out.skipped_unbuilt -= was_unbuilt ? 1 : 0;
      if (st == Evaluated::Status::skipped) {
        out.skipped_unbuilt += results[i].unbuilt ? 1 : 0;
        continue;
      }
      --out.skipped;
      if (st != Evaluated::Status::ok) {  // not reached: the same checks passed before
        ++(st == Evaluated::Status::no_fit ? out.no_fit : out.invalid);
        continue;
      }
      ++out.evaluated;
      best_there = std::min(best_there, results[i].score_time);
      found.push_back({plans[i], results[i], i});
    }
    // Into the fitting plans in candidate order (ties rank in that order).
    for (Ranked& r : found) {
      auto at = std::lower_bound(out.fitting.begin(), out.fitting.end(), r.candidate,
                                 [](const Ranked& x, std::size_t c) { return x.candidate < c; });
      out.fitting.insert(at, std::move(r));
    }
  };
  for (std::size_t i = 0; i < k; ++i) complete(out.fitting[order[i]]);
  for (std::size_t i = 0; i < k; ++i) out.top.push_back(out.fitting[order[i]]);
  for (std::size_t i = 0; i + 1 < out.top.size(); ++i)
    out.why.push_back(why_better(out.top[i].result, out.top[i + 1].result));

  // The seeds' rules of thumb against the numbers.
  const Ranked& winner = out.top.front();
  const int gpn = std::min(s.gpus, s.system.node.gpus);
  // The seeds ran one pipeline stage per node (docs/seeds.md): the nodes that count are those
  // a model replica spans, not the job's (a data-parallel job of replicas on one node each
  // obeys it at PP 1). With DP 1 the two are the same.
  const int nodes = winner.result.nodes;
  const int gpn_rank = std::max(1, winner.result.gpus_per_node);
  auto replica = [&](const Ranked& r) { return replica_nodes(r.plan, gpn_rank); };
  auto pp_obeys = [&](const PlanPoint& p) { return p.pp >= replica_nodes(p, gpn_rank); };
  rescue([&](const PlanPoint& p) { return pp_obeys(p) != pp_obeys(winner.plan); });
  RuleCheck pp_rule = check_rule(
      "pipeline-parallel size at least the nodes a data-parallel replica spans (one stage per "
      "node, as the seeds ran)",
      "with PP >= the nodes of its replica", "with PP < the nodes of its replica", winner,
      out.fitting, o.objective, [&](const Ranked& r) { return r.plan.pp >= replica(r); }, complete);
  pp_rule.text += fmt::format(
      " (the winner: PP {}, its replica of TP x CP x PP = {} GPUs on {} of the job's {} nodes{})",
      winner.plan.pp, winner.plan.tp * winner.plan.cp * winner.plan.pp, replica(winner), nodes,
      pp_rule.best_other ? fmt::format("; the other: PP {} on {}", pp_rule.best_other->plan.pp,
                                       replica(*pp_rule.best_other))
                         : std::string());
  out.rules.push_back(std::move(pp_rule));
  rescue([&](const PlanPoint& p) { return (p.tp <= gpn) != (winner.plan.tp <= gpn); });
  out.rules.push_back(check_rule(
      fmt::format("tensor-parallel size at most the GPUs per node ({})", gpn),
      fmt::format("with TP <= {}", gpn), fmt::format("with TP > {}", gpn), winner, out.fitting,
      o.objective, [&](const Ranked& r) { return r.plan.tp <= gpn; }, complete));
  std::map<decltype(layout_key(PlanPoint{})), std::int64_t> largest;  // of every fitting plan
  for (const Ranked& r : out.fitting) {
    auto& m = largest[layout_key(r.plan)];
    m = std::max(m, r.plan.micro_batch);
  }
  for (std::size_t i : skipped) {
    auto& m = largest[layout_key(plans[i])];
    m = std::max(m, plans[i].micro_batch);
  }
  auto largest_mb = [&](const PlanPoint& p) { return p.micro_batch == largest[layout_key(p)]; };
  rescue([&](const PlanPoint& p) { return largest_mb(p) != largest_mb(winner.plan); });
  out.rules.push_back(check_rule(
      "the largest micro-batch that fits", "with the largest micro-batch that fits its layout",
      "with a micro-batch below the largest that fits its layout", winner, out.fitting, o.objective,
      [&](const Ranked& r) { return r.plan.micro_batch == largest[layout_key(r.plan)]; },
      complete));
  return out;
}

Result<std::vector<WhatIf>> what_if(const std::vector<SearchSpace>& spaces,
                                    const std::vector<std::string>& names, const SearchOptions& o) {
  std::vector<WhatIf> out;
  for (std::size_t i = 0; i < spaces.size(); ++i) {
    CS_ASSIGN_OR_RETURN(auto r, search(spaces[i], o));
    r.fitting.clear();  // the rules are checked; the what-if needs only the winners
    r.fitting.shrink_to_fit();
    WhatIf w;
    w.option = i < names.size() ? names[i] : std::string();
    w.result = std::move(r);
    if (i > 0) {
      Evaluated e = evaluate(spaces[i], out.front().result.top.front().plan, false);
      if (e.status == Evaluated::Status::ok) w.first_plan_here = std::move(e);
    }
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace commscope::search
