// The trainer's options and every check that can run before MPI starts: the plan (the same
// ScenarioInput describe and predict resolve), the limits (ranks, memory), the outputs.
// No MPI here: `commscope train` runs these checks in its own process before it launches
// mpirun, and every rank of commscope-train runs them again.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "commscope/gpt/gpt.h"
#include "commscope/gpt/t5.h"
#include "commscope/spec/model.h"
#include "commscope/spec/scenario.h"
#include "commscope/util/result.h"

namespace commscope::train {

// ZeRO stage 0 (DDP) to 3: the values are the stages.
enum class Strategy { ddp = 0, zero1 = 1, zero2 = 2, zero3 = 3 };
std::string_view to_string(Strategy s);
// "ddp", "zero1", "zero2", "zero3" (the deprecated --strategy spellings).
std::optional<Strategy> strategy_from_name(std::string_view name);

// The system the trainer describes itself on (presets/systems/cpu-host.json).
inline constexpr const char* kDefaultSystem = "cpu-host";
// The trainer's default model (presets/models/gpt2-tiny-cpu.json).
inline constexpr const char* kDefaultModel = "gpt2-tiny-cpu";
// The most ranks `commscope train --ranks` launches on one machine (docs/train.md).
inline constexpr int kMaxRanks = 1024;

struct TrainOptions {
  GptConfig model;
  std::string model_name = "custom";
  std::string system = kDefaultSystem;  // --system: where the plan is resolved (and described)
  std::string network;                  // --network: empty, the system's own
  Strategy strategy = Strategy::ddp;
  // Model parallelism (Megatron): tensor-parallel size, pipeline stages, model chunks per stage
  // (interleaved 1F1B), the pipeline schedule (unset: 1F1B, or interleaved with vpp > 1), the
  // placement of ranks. The data-parallel size is the rank count / (tp x cp x pp).
  int tp = 1, pp = 1, vpp = 1;
  // Context parallelism (GPT, Megatron-LM --context-parallel-size): each sequence's positions
  // split over cp ranks inside the tensor group's neighbours (rank = t + TP (c + CP ...)),
  // gradients reduced over DP x CP. cp_comm_type: K,V passed round the CP ring block by block
  // (p2p, Megatron-LM's default), all-gathered (all_gather), or the heads scattered by
  // all-to-alls of Q, K, V and the output (a2a, DeepSpeed-Ulysses).
  // a2a+p2p (Transformer Engine's hierarchical CP) with hierarchical_cp_sizes [a, r]
  // (Megatron-LM's --hierarchical-context-parallel-sizes): all-to-alls over groups of a CP
  // neighbours, the ring over the r ranks a apart (cp_form).
  int cp = 1;
  CpCommType cp_comm_type = CpCommType::p2p;
  std::vector<int> hierarchical_cp_sizes;
  // Expert parallelism (a model with experts, TP 1, DDP): experts split over ep data-parallel
  // ranks (Megatron-LM --expert-model-parallel-size), expert gradients reduced over DP / EP.
  int ep = 1;
  // --moe-aux-loss-coeff (Megatron-LM's): the load-balancing loss's weight (ShardSpec), 0: none.
  float moe_aux_loss_coeff = 0;
  // --moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity (ShardSpec): token
  // dropping at the capacity, every expert padded to it. 0: dropless.
  double moe_capacity_factor = 0;
  bool moe_pad_to_capacity = false;
  // Uneven pipeline stages (--pipeline-stage-layers, Megatron-LM's
  // --decoder-first/last-pipeline-num-layers): as describe resolves them; unset: an even split.
  std::optional<std::vector<int>> stage_layers;
  std::optional<int> first_stage_layers, last_stage_layers;
  // --attention flash: FlashAttention's algorithm in the model-parallel trainer (GptShard).
  bool flash = false;
  std::optional<Schedule> schedule;
  RankOrder rank_order = RankOrder::tp_dp_pp;
  bool sequence_parallel = false;  // Megatron's, with tp > 1
  // --async-tensor-model-parallel-allreduce (GPT and BERT, tp > 1, no SP): ShardSpec::tp_async.
  bool tp_async_allreduce = false;
  int micro_batch = 4;            // sequences per rank per micro-batch
  std::int64_t global_batch = 0;  // sequences per step (0: micro_batch x ranks x accum)
  std::int64_t grad_accum = 0;    // micro-batches per step (0: from the global batch)
  // A torchtitan file's local batch (PlanInput::local_batch): under PP torchtitan runs each of
  // its accumulation steps as a pipeline schedule of its own, which the trainer does not (one
  // schedule an iteration); such a plan is refused.
  std::optional<std::int64_t> local_batch;
  std::optional<int> gpus, dp, nodes;  // must agree with the rank count when given
  int steps = 20;
  int warmup = 2;             // steps left out of the averages
  bool warmup_given = false;  // an explicit --warmup (the default is clamped to steps - 1)
  // Read as doubles and checked to fit a float, which the optimizer takes (--lr 1e-50 was read
  // as 0 and reported as "got 0", found by probing, 2026-12-02).
  double lr = 1e-3;
  double clip = 1.0;  // global gradient-norm clipping (0: off)
  std::uint64_t seed = 1234;
  std::string data;       // text file (byte-level tokens); empty: the synthetic stream
  double bucket_mb = 25;  // DDP bucket (MiB), PyTorch's bucket_cap_mb
  std::int64_t zero_reduce_bucket = 500'000'000;     // ZeRO reduce bucket (elements)
  std::int64_t zero_allgather_bucket = 500'000'000;  // ZeRO all-gather bucket (elements)
  int threads = 1;                                   // BLAS threads per rank
  std::string trace;                                 // one Chrome trace per rank (trace_path)
  std::string format = "table";                      // table | json
  std::string output;  // -o: also write the json document here (rank 0)
  std::string checkpoint_dir;
  int checkpoint_every = 0;
  bool resume = false;
  bool progress = true;          // a progress line on a terminal (rank 0)
  bool progress_forced = false;  // commscope train's stderr is a terminal (mpirun's pipes are not)
  int kill_rank = -1, kill_step = -1;  // tests: this rank dies at the start of this step
  // --grad-comm-dtype: the gradient all-reduce / reduce-scatter on the wire in bf16 or fp16,
  // summed in fp32 (comm/collectives.h); unset or fp32: fp32 throughout.
  std::optional<DType> grad_comm_dtype;
  // T5 (--model of kind t5): the encoder-decoder the model-parallel trainer trains; `model` then
  // carries its sizes for the report (layers Le + Ld, seq the encoder's).
  std::optional<T5Config> t5;
};

// The ModelSpec that describes the trainer's GPT to the workload builder.
ModelSpec model_spec(const GptConfig& cfg, const std::string& name);
// A GptConfig from a model preset (GPT, or BERT without pooler), or an error naming what does
// not fit.
Result<GptConfig> config_from_model(const ModelSpec& m);

// TrainOptions from the shared plan (ScenarioInput: --model, --system, --zero,
// --micro-batch-size, ...). Plan flags the CPU trainer cannot honour (tensor or pipeline
// parallelism, fp16/bf16, recompute, ...) are an error naming the flag. `o` keeps the
// trainer-only fields it already holds.
Status apply_plan(const ScenarioInput& in, TrainOptions& o);

// 1 <= ranks <= kMaxRanks.
Status check_ranks(int ranks);

// Sequences per step for `world` ranks (the global batch).
std::int64_t global_batch(const TrainOptions& o, int world);
// Micro-batches a stage's chunk holds activations for at once under the plan's schedule: the
// most forwards begun and not yet backward (GPipe: all of them; 1F1B: at most PP - stage).
// Over every stage and chunk when stage < 0.
int activations_in_flight(const TrainOptions& o, int world, int stage = -1);

// The CP form the trainer runs, as resolve_scenario resolves the plan: a2a+p2p with a level of
// one rank is the other form alone (Transformer Engine runs it so); `a2a`, the all-to-all
// level's size under a2a+p2p, 1 otherwise. Sizes resolve_scenario refuses (validate() runs it
// before launch) read as the ring alone.
struct CpForm {
  CpCommType type = CpCommType::p2p;
  int a2a = 1;
};
CpForm cp_form(const TrainOptions& o);
// Whether the asynchronous TP all-reduce runs (--async-tensor-model-parallel-allreduce with TP
// above 1 and without SP, whose reduce-scatter runs beside the weight gradient anyway): the
// header, the JSON's parallel object and the shards (ShardSpec::tp_async) say it alike.
inline bool async_tp_all_reduce(const TrainOptions& o) {
  return o.tp_async_allreduce && o.tp > 1 && !o.sequence_parallel;
}

// Data-parallel replicas among `world` ranks: world / (tp x cp x pp) (at least 1).
int data_parallel(const TrainOptions& o, int world);
// Whether the run is model parallel (tp or pp above 1): the pipeline trainer runs it. It also
// runs BERT on any plan (the data-parallel trainer's single-rank model is GPT-2's).
inline bool model_parallel(const TrainOptions& o) {
  return o.tp > 1 || o.pp > 1 || o.cp > 1 || o.model.experts > 0 || o.flash ||
         o.model.arch != ModelArch::gpt || o.t5.has_value();
}

// Every check that needs no MPI: the flags against the rank count, the memory the model, its
// activations and the optimizer need against what this machine has (ranks_here of the ranks
// on it), the outputs (-o, --trace, --checkpoint) writable. One line naming the flag.
Status validate(const TrainOptions& o, int world, int ranks_here);

// Bytes one rank allocates for o's model and plan on `world` ranks: parameters, gradients,
// AdamW moments (sharded as the strategy says), activations and logits of one micro-batch.
double memory_per_rank_bytes(const TrainOptions& o, int world);

// The scenario of this model and plan on o.system (data parallel over `world` ranks, fp32, no
// recompute): what `commscope describe --system cpu-host ...` resolves for the same flags.
Result<Scenario> train_scenario(const TrainOptions& o, int world);

// Where rank r writes its Chrome trace: a path ending in '/' or naming an existing folder is a
// folder (FOLDER/rank<r>.json); otherwise `.rank<r>` goes before the extension
// (run.json -> run.rank0.json, run -> run.rank0).
std::string trace_path(const std::string& trace, int rank);
bool trace_is_folder(const std::string& trace);

}  // namespace commscope::train
