// `commscope plan`: every valid way to train a model on a cluster (TP, PP, virtual stages, DP,
// ZeRO, micro-batch, recompute, sequence parallel, schedule, rank order), pruned by a memory
// bound that never drops a plan that fits, predicted, ranked by an objective and explained
// against the seeds' rules of thumb. Sits between sim and report (docs/plan.md).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "commscope/sim/simulator.h"
#include "commscope/spec/limits.h"
#include "commscope/spec/scenario.h"
#include "commscope/util/result.h"

namespace commscope::search {

enum class Objective : std::uint8_t { time, tokens, cost, energy };
std::string_view to_string(Objective o);
std::optional<Objective> objective_from_name(std::string_view s);  // time|tokens|cost|energy

// A framework as `--frameworks` names it: commscope (Framework::none, commscope's own pattern),
// megatron, deepspeed, fsdp; "none" is taken for commscope too.
std::string_view framework_choice_name(Framework f);
// Where a candidate takes the base's ZeRO++ (ZeRO-3 under DeepSpeed's pattern or commscope's),
// its optimizer offload (ZeRO 1-3, likewise), its parameter offload (ZeRO-3 under DeepSpeed's,
// DP > 1) and its gradient compression (no ZeRO, under commscope's pattern, DDP's hook, or
// DeepSpeed's, its 1-bit optimizers); to_plan_input drops them elsewhere.
bool zeropp_applies(int zero, Framework f);
bool offload_applies(int zero, Framework f);
bool param_offload_applies(int zero, Framework f);
bool compression_applies(int zero, Framework f);
std::optional<Framework> framework_choice_from_name(std::string_view s);

// One point of the search space: every field of a plan the search chooses.
struct PlanPoint {
  int tp = 1, pp = 1, virtual_stages = 1, dp = 1;
  int cp = 1;  // context-parallel size (DP is GPUs / (TP x CP x PP))
  // --cp-comm-type a2a+p2p (hierarchical CP): the all-to-all level's size, the first of
  // --hierarchical-context-parallel-sizes (1: the ring alone, CP: the all-to-alls alone);
  // 0 for the other forms and for CP 1.
  int cp_a2a = 0;
  int ep = 1;         // expert-parallel size (MoE models only)
  int expert_tp = 0;  // expert tensor-parallel size (0: TP, Megatron's default)
  // Uneven pipeline stages (Megatron's --decoder-first/last-pipeline-num-layers): the layers of
  // the first and the last virtual stage when PP x v does not divide the layers, the others
  // taking an even share; 0: even stages.
  int first_layers = 0, last_layers = 0, middle_layers = 0;  // middle: each other stage's
  int zero = 0;
  std::int64_t micro_batch = 1;
  std::int64_t global_batch = 1;
  Recompute recompute = Recompute::none;
  bool sequence_parallel = false;
  Schedule schedule = Schedule::one_f_one_b;
  RankOrder rank_order = RankOrder::tp_dp_pp;
  // Whose collective pattern the plan follows (docs/workload.md, "Framework patterns"): none is
  // commscope's own. `zero` then holds the ZeRO stage the framework's sharding amounts to:
  // megatron 1 is --use-distributed-optimizer; fsdp 3 (full_shard, hybrid_shard) or 2
  // (shard_grad_op), given as --fsdp-sharding and not as --zero.
  Framework framework = Framework::none;
  FsdpSharding fsdp_sharding = FsdpSharding::full_shard;  // framework fsdp only
  // HYBRID_SHARD's shard group (--fsdp-shard-size): 0 is one node's DP ranks.
  int fsdp_shard_size = 0;
};
// The plan flags of `predict` that give this point (resolve_scenario's input).
PlanInput to_plan_input(const PlanPoint& p, int gpus, const PlanInput& base);
// "TP8 PP4 v2 DP2 ZeRO-1 mbs 2 gbs 512 recompute selective SP 1f1b tp-dp-pp" (fields that
// matter only: v when above 1, SP when on, rank order when DP and PP are both above 1; CP (with
// its levels under a2a+p2p, "CP8 a2a2 x ring4"), EP,
// expert TP and the uneven split "layers 7+14x8+7" (first + others x each + last) when not
// the default; the framework when not commscope's own: "FSDP hybrid_shard" (with "shard 16"
// when its shard group is not one node's), "DeepSpeed", "Megatron").
std::string describe(const PlanPoint& p);

// What to search: the model, the system and its network, the GPU count, and the constraints.
struct SearchSpace {
  ModelSpec model;
  SystemSpec system;
  NetworkProtocol network;
  int gpus = 0;
  // Samples per iteration. Unset: 4 Mi tokens (Llama 2's batch) / the sequence length.
  std::optional<std::int64_t> global_batch;
  // true: every plan runs exactly global_batch samples (plans whose micro-batch x DP does not
  // divide it are not valid). false: such a plan runs the next multiple, and is ranked by its
  // time for global_batch samples (iteration time x global_batch / its batch).
  bool fixed_global_batch = false;
  PlanInput base;              // what every plan shares: --seq-length, --precision, --framework ...
  int max_tp = 0, max_pp = 0;  // 0: no limit
  std::vector<int> zero;       // ZeRO stages allowed (empty: 0-3)
  std::vector<std::int64_t> micro_batch;  // micro-batch sizes allowed (empty: every divisor)
  int max_virtual_stages = 0;             // 0: no limit
  int max_cp = 0, max_ep = 0;             // 0: no limit (CP 1 and EP 1 are always searched)
  // Frameworks whose plans are candidates (`--frameworks`; empty: base.framework's alone, or
  // commscope's own). none (commscope's own): every layout, ZeRO 0-3 as above. megatron: every
  // layout, DDP or the distributed optimizer (ZeRO 0, 1). deepspeed: CP 1, ZeRO 0-3 (2 and 3
  // without PP), only ZeRO-3 when none is also listed (its stages 0-2 are commscope's own
  // pattern). fsdp: dense models, CP 1, DP > 1; TP with sequence parallelism; PP 1:
  // full_shard, shard_grad_op, and at TP 1 hybrid_shard when the DP ranks span nodes (shard
  // groups of one node's ranks, and of 2, 4, ... nodes' that divide DP, below DP: the memory
  // each saves against the replicas' all-reduce); PP > 1: shard_grad_op with the gradients
  // reduced once a step
  // (torchtitan under PyTorch's pipelining); --zero 3 admits full/hybrid, 2 shard_grad_op.
  std::vector<Framework> frameworks;
  // Memory kept free on every GPU for what memory_per_rank does not count (CUDA context, NCCL
  // buffers, allocator fragmentation): bytes + fraction x the GPU's memory. A plan fits when its
  // fullest rank's memory is at most the GPU's memory less this; the bound prunes against the
  // same figure. 0 here (the library's results unchanged); the CLI's default is
  // kDefaultMemoryHeadroomBytes.
  double memory_headroom_bytes = 0, memory_headroom_fraction = 0;
};

// `commscope plan`'s default --memory-headroom: 2 GiB (docs/plan.md, "Memory headroom", for
// the sources: a CUDA context, NCCL's buffers of a few communicators, fragmentation).
inline constexpr double kDefaultMemoryHeadroomBytes = 2.0 * 1024 * 1024 * 1024;
// The headroom of a space on a GPU of gpu_memory bytes.
double memory_headroom(const SearchSpace& s, double gpu_memory);
// `--memory-headroom`: "2GiB", "512 MiB", "1.5GB", "10%" (of each GPU's memory), "0". Sets
// the space's bytes and fraction; errors name the flag, the value and what was expected.
Status set_memory_headroom(SearchSpace& s, std::string_view text);

// The global batch a space uses (given, or the 4 Mi-token default).
std::int64_t global_batch_of(const SearchSpace& s);

// Every point of the space whose sizes divide what they must (heads, layers, GPUs, batch,
// experts, sequence): the candidates, in a fixed order. resolve_scenario may still reject some.
// When PP does not divide the layers, the stages are uneven as Megatron splits them: the
// first and the last stage take fewer layers, the others ceil(layers / PP) each (Llama 3 405B
// on PP 16: 7, 14 x 8, 7). Interleaved schedules with uneven stages are searched where the
// first and the last virtual stage are one layer lighter than the others.
std::vector<PlanPoint> enumerate_plans(const SearchSpace& s);

// A lower bound on the memory of the fullest rank of a resolved scenario, computed without
// building the workload: the weights, gradients and optimizer state of the average stage's
// parameters (sum of stage shards / PP >= all parameters / (TP x PP); routed experts / (EP x
// expert TP x PP)) and, separately, the activations of the first stage's first chunk (its
// blocks, uneven or not, x micro-batches in flight). Never above memory_per_rank of the
// fullest rank (checked against it in tests, uneven stages, CP and EP included).
double memory_lower_bound(const Scenario& sc);

// What one evaluation found.
struct Evaluated {
  // skipped: fits, but a lower bound on its time is above the K-th best found when it came
  // (it cannot reach the top; search() predicts it later where a rule needs it).
  enum class Status : std::uint8_t {
    invalid,
    pruned,
    no_fit,
    skipped,
    ok
  } status = Status::invalid;
  std::string reason;         // invalid: resolve_scenario's message
  double iteration_time = 0;  // s
  double score_time = 0;      // s for the space's global batch (the time objective)
  double score_bound = 0;     // skipped: the lower bound on score_time that skipped it
  bool unbuilt = false;       // skipped by its blocks' bound, its ops not built
  double tokens_per_s = 0;
  double mfu = 0;
  double memory = 0;        // bytes, the fullest rank (memory_lower_bound when pruned)
  double memory_bound = 0;  // memory_lower_bound
  double gpu_memory = 0;    // bytes per GPU
  double headroom = 0;      // bytes of gpu_memory kept free (SearchSpace::memory_headroom_*)
  // s, mean over stages; comm: the time communication runs, a union (<= iteration_time)
  double compute = 0, comm = 0, exposed = 0, bubble = 0;
  // s, the communication the simulator booked (the sum of its parts): above comm when calls on
  // the data-, tensor- and context-parallel streams run at once.
  double comm_booked = 0;
  double cost = 0;    // US dollars for the global batch (0: no price in the preset)
  double energy = 0;  // joules for the global batch (0: no power in the preset)
  int nodes = 0, gpus_per_node = 0;
  // compute, comm, exposed, bubble and mfu predicted: search() predicts iteration times alone
  // and these for the plans it prints (the top K and each rule's best other plan); evaluate()
  // always.
  bool breakdown = true;
};

// The blocks (sim's block_graphs) of plan p's model as the plan builds them, taken from the
// plan at PP 1 (no virtual or uneven stages, one micro-batch, the default rank order, no
// activation offloading), so the same for every plan alike but for those (the search caches
// them by TP, CP, EP, expert TP, micro-batch, recompute, SP, ZeRO stage and framework). A
// decoder-only model's blocks are alike but for MoE's leading dense ones: they come from a
// model of one dense block (where there are any) and two others, each block given the graph of
// the last of its kind. nullopt where that plan is not valid. The search's first time bound
// (compute_lower_bound) on them, before it builds a plan's ops.
std::optional<BlockGraphs> blocks_at_pp1(const SearchSpace& s, const PlanPoint& p);

// The evaluation of one plan: resolve_scenario, the memory bound (when prune),
// build_workload, memory_per_rank, simulate. The search gives plans alike but for the schedule
// one workload build and Evaluator::evaluate_resolved instead (SearchOptions::share_workloads),
// with exactly this function's results (tested; the search predicts the breakdown fields for
// the plans it prints only, Evaluated::breakdown).
Evaluated evaluate(const SearchSpace& s, const PlanPoint& p, bool prune = true);

struct SearchOptions {
  Objective objective = Objective::time;
  std::int64_t top = 10;  // plans kept (> 0)
  int threads = 1;        // worker threads (>= 1); results do not depend on it
  // The pipeline tasks of the plans it predicts, in all (limits::simulated_tasks summed).
  std::int64_t max_tasks = limits::kMaxSimulatedTasks;
  bool prune = true;  // false: build and check every valid plan (tests)
  // true: plans alike but for the schedule share one workload build and are predicted by
  // Evaluator::evaluate_resolved (the same results); false: each plan through evaluate()
  // (perf/bench_plan compares the two).
  bool share_workloads = true;
  // true: a fitting plan whose lower bound on the iteration time (the simulator's runs without
  // the pipeline schedule, sim_detail::lower_bound) is above the K-th best time found so far is
  // not predicted (SearchResult::skipped); the top K and the rules' plans are the same as with
  // false, which predicts every fitting plan (tests, perf/bench_plan).
  bool bound = true;
  // Called now and then with (plans done, plans in all), from the calling thread; may be empty.
  // Returning false stops the search (an error "interrupted").
  std::function<bool(std::size_t, std::size_t)> progress;
};

struct Ranked {
  PlanPoint plan;
  Evaluated result;
  std::size_t candidate = 0;  // its place in the enumeration (ties rank in this order)
};

// The nodes one data-parallel replica of p (its TP x CP x PP ranks) spans with gpus_per_node
// GPUs per node, in the plan's rank order: what "pipeline-parallel size at least the node
// count" counts (the seeds' model-parallel runs put one stage on each node of one replica).
int replica_nodes(const PlanPoint& p, int gpus_per_node);

// One rule of thumb checked against the search's numbers.
struct RuleCheck {
  std::string rule;  // "PP >= node count (8)"
  bool winner_obeys = false;
  bool agrees = false;               // the best plan obeys it, or nothing obeying it exists
  std::optional<Ranked> best_other;  // the best plan on the other side of the rule
  double difference = 0;             // best_other's objective / the winner's - 1 (> 0: slower)
  std::string text;                  // "agrees: ..." or "disagrees: ..." with the numbers
};

struct SearchResult {
  std::vector<Ranked> top;  // best first
  std::size_t candidates = 0, invalid = 0, pruned = 0, no_fit = 0, evaluated = 0;
  // fitting plans not predicted: their lower bound was above the K-th best (SearchOptions::bound)
  std::size_t skipped = 0;
  // of those, the ones whose blocks' bound skipped them before their ops were built (when the
  // search ranked them; the rules may predict some later)
  std::size_t skipped_unbuilt = 0;
  std::int64_t global_batch = 0;
  Objective objective = Objective::time;
  std::vector<RuleCheck> rules;  // the seeds' rules of thumb for the winner
  std::vector<std::string> why;  // per consecutive pair of top: why the first beats the second
  // Every fitting plan predicted (kept for the rules; in candidate order): all of them but the
  // skipped ones.
  std::vector<Ranked> fitting;
};

// The objective's figure of one result (lower is better; tokens/s negated).
double objective_value(const Evaluated& e, Objective o);

// Enumerates, prunes, evaluates (in threads), ranks, keeps the top, checks the rules and says
// why each plan beats the next. Errors: no candidate, nothing fits, a cost or energy objective
// without the preset's figure, bad options.
Result<SearchResult> search(const SearchSpace& s, const SearchOptions& o);

// The largest term by which a beats b (compute, exposed communication, bubble), as text:
// "exposed communication 12.3 ms less (of 15.0 ms)".
std::string why_better(const Evaluated& a, const Evaluated& b);

// ---- what-if: the search per network or system option ----
struct WhatIf {
  std::string option;  // network or system name
  SearchResult result;
  // The first option's best plan evaluated on this option (its objective), and how much of the
  // loss the best plan here recovers: 1 - (best here - best of first) / (first's plan here -
  // best of first); NaN when there is nothing to recover.
  std::optional<Evaluated> first_plan_here;
};
Result<std::vector<WhatIf>> what_if(const std::vector<SearchSpace>& spaces,
                                    const std::vector<std::string>& names, const SearchOptions& o);

}  // namespace commscope::search
