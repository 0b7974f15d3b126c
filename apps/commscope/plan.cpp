// `commscope plan`: the best ways to train a model on a cluster, searched, ranked and explained;
// per network or system option with --network/--system lists (docs/plan.md).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/scenario_options.h"
#include "commscope/report/plan.h"
#include "commscope/search/plan_search.h"
#include "commscope/spec/limits.h"
#include "commscope/spec/plan.h"
#include "commscope/spec/torchtitan_config.h"
#include "commscope/util/atomic_file.h"
#include "commscope/util/input_file.h"
#include "embed.h"
#include "verbs.h"

namespace commscope::cli {

Verb add_plan(CLI::App& app) {
  struct State {
    std::string model = "gpt2-large";
    std::vector<std::string> system, network;
    int gpus = 0;
    std::int64_t global_batch = 0, seq_length = 0;
    std::string precision, objective = "time", html, framework;
    bool fixed_global_batch = false;
    bool fp8 = false, fp8_param_gather = false, tp_comm_overlap = false,
         cross_entropy_fusion = false;
    std::string cross_entropy;
    std::string attention, attention_backend, cp_comm_type, moe_dispatcher;
    int max_tp = 0, max_pp = 0, max_vp = 0, max_cp = 0, max_ep = 0;
    int router_groups = 0, router_group_topk = 0;  // not given (0): the model's
    std::vector<int> zero;
    std::vector<std::int64_t> micro_batch;
    std::int64_t top = 10;
    int threads = 0;
    std::vector<std::string> frameworks;
    std::string memory_headroom = "2GiB";
    std::string torchtitan_config, deepspeed_config, megatron_args;
    OptimizerPrecisionOptions optimizer_precision;
    CompressionOptions compression;
    bool offload_optimizer = false;
    bool offload_param = false;
    bool fsdp_cpu_offload = false;
    ModelFlagOptions model_flags;
    std::string grad_comm_dtype;
    bool grad_reduce_in_bf16 = false;
    OutputOptions out;
  };
  auto st = std::make_shared<State>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Search every valid plan (TP, PP, virtual stages, uneven stages, DP, CP, EP, ZeRO, "
      "micro-batch, recompute, "
      "sequence parallel, schedule, rank order) of a model on N GPUs: prune by memory, skip the "
      "plans whose lower bound on time cannot reach the top K, predict the rest, print the best "
      "K with why each beats the next and the seeds' rules of thumb checked against the "
      "numbers. --network/--system lists: the search per option (what-if).");
  cmd->add_option("--model", st->model, "model preset name or JSON file [gpt2-large]");
  add_model_flag_options(*cmd, st->model_flags, "Model (Megatron-LM's flags; docs/predict.md)");
  add_megatron_args_option(*cmd, st->megatron_args, "Options");
  cmd->add_option("--system", st->system,
                  "system preset name or JSON file; a comma list searches each [polaris]")
      ->delimiter(',');
  cmd->add_option("--network", st->network,
                  "network preset or profile [the system's]; a comma list searches each")
      ->delimiter(',');
  cmd->add_option("--gpus", st->gpus, "GPUs in the job (required)")->required();
  cmd->add_option("--global-batch-size", st->global_batch,
                  "samples per iteration [4 Mi tokens / sequence length, Llama 2's batch]");
  cmd->add_flag("--fixed-global-batch", st->fixed_global_batch,
                "every plan runs exactly the global batch (without it, a plan whose micro-batch x "
                "DP does not divide it runs the next multiple and is ranked by its time for the "
                "global batch)");
  cmd->add_option("--seq-length", st->seq_length, "tokens per sample [the model's]");
  cmd->add_option("--precision", st->precision, "fp32|fp16|bf16 [bf16]");
  cmd->add_flag(
      "--fp8", st->fp8,
      "Transformer Engine FP8 GEMMs in every plan (the system's fp8 peak; docs/workload.md)");
  cmd->add_flag("--fp8-param-gather", st->fp8_param_gather,
                "with --fp8: every plan with a sharded optimizer under commscope or megatron "
                "keeps FP8 weights, all-gathered in 1 byte (Megatron-Core --fp8-param-gather)");
  cmd->add_flag("--tp-comm-overlap", st->tp_comm_overlap,
                "every plan with sequence parallelism overlaps its TP all-gathers and "
                "reduce-scatters with its GEMMs (Megatron-Core --tp-comm-overlap)");
  add_optimizer_precision_options(
      *cmd, st->optimizer_precision, "Options",
      " in every plan with a sharded optimizer under commscope or megatron (Megatron-Core's "
      "rule); the others keep plain Adam");
  add_grad_comm_dtype_options(*cmd, st->grad_comm_dtype, st->grad_reduce_in_bf16, "Options",
                              " in every plan (over the job file's reduce type)");
  add_compression_options(*cmd, st->compression, "Options",
                          ", in every ZeRO-3 plan under commscope or deepspeed",
                          ", in every plan without ZeRO under commscope (DDP's hook) or "
                          "deepspeed (its 1-bit optimizers)");
  cmd->add_flag("--offload-optimizer", st->offload_optimizer,
                "DeepSpeed ZeRO-Offload (Adam's states on the host, the step on the CPU) in every "
                "plan with ZeRO 1-3 under commscope or deepspeed; the others keep it on the GPU")
      ->group("Options");
  cmd->add_flag("--offload-param", st->offload_param,
                "DeepSpeed ZeRO-3 parameter offload (each rank's 16-bit partition on the host, "
                "copied to the GPU before each all-gather, or whole at DP 1) in every ZeRO-3 plan "
                "under deepspeed; the others keep it on the GPU")
      ->group("Options");
  cmd->add_flag("--fsdp-cpu-offload", st->fsdp_cpu_offload,
                "PyTorch FSDP's CPU offload (shards, gradients and Adam on the host) in every plan "
                "under fsdp that shards (HSDP too); the others keep them on the GPU")
      ->group("Options");
  cmd->add_flag("--cross-entropy-loss-fusion", st->cross_entropy_fusion,
                "every plan's loss is the fused (Transformer Engine) cross entropy, which keeps "
                "the logits in the compute type (Megatron-LM --cross-entropy-loss-fusion)");
  cmd->add_option("--cross-entropy", st->cross_entropy,
                  "every plan's cross entropy (memory of the last stage): vocab-parallel | fused | "
                  "torch (torch.nn.functional.cross_entropy on fp32 logits) | flash-attn "
                  "(FlashAttention's CrossEntropyLoss) [vocab-parallel; torch for a torchtitan "
                  "job file]");
  cmd->add_option("--attention", st->attention,
                  "attention kernel of every plan: flash | standard [flash with "
                  "--attention-backend fused or flash, else the model preset's `attention`, "
                  "else standard]");
  cmd->add_option("--attention-backend", st->attention_backend,
                  "whose flash attention kernel in every plan (given, the kernel is flash): "
                  "fused (cuDNN's) | flash (FlashAttention's own); Megatron-Core's unfused and "
                  "local are --attention standard, auto the default [flash under --framework "
                  "fsdp or deepspeed, else fused]");
  cmd->add_option("--cp-comm-type", st->cp_comm_type,
                  "how the plans with CP > 1 exchange K and V: p2p (ring) | all_gather | a2a "
                  "(all-to-all of Q, K, V and the output; CP sizes that do not divide the "
                  "heads are left out) | a2a+p2p (hierarchical: each CP size's all-to-all level "
                  "searched over its divisors that divide the heads, the ring over the rest) "
                  "[p2p]");
  cmd->add_option("--moe-token-dispatcher-type", st->moe_dispatcher,
                  "how the plans with EP > 1 dispatch MoE tokens: alltoall (NCCL) | flex "
                  "(DeepEP/HybridEP: once per node across the network, then NVLink) [alltoall]");
  cmd->add_option("--moe-router-num-groups", st->router_groups,
                  "group-limited routing of every plan: the experts in this many groups (the "
                  "flex dispatcher's copies follow it) [the model's]");
  cmd->add_option("--moe-router-group-topk", st->router_group_topk,
                  "group-limited routing: the groups each token's experts come from [the model's]");
  cmd->add_option("--framework", st->framework,
                  "whose collective pattern every plan follows: megatron|deepspeed|fsdp (the "
                  "same as --frameworks with that one) [the --frameworks list]");
  cmd->add_option(
         "--frameworks", st->frameworks,
         "frameworks whose plans are candidates, a comma list of commscope (its own "
         "pattern, every layout, ZeRO 0-3), megatron (DDP or distributed optimizer), "
         "deepspeed (ZeRO-3 beside commscope's; 0-3 alone; CP 1), fsdp (CP 1, TP with sequence "
         "parallelism; PP 1: full_shard, shard_grad_op, hybrid_shard across nodes at TP 1, its "
         "shard group one node or 2, 4, ... nodes; PP > "
         "1: shard_grad_op, gradients once a step) [commscope,deepspeed,fsdp]; "
         "--framework X searches X alone")
      ->delimiter(',');
  cmd->add_option("--torchtitan-config,--job.config_file", st->torchtitan_config,
                  "torchtitan job file (TOML): its model, sequence length, precision (FP8 "
                  "converter, gradient reduce type), loss and global batch; the plans FSDP's "
                  "(--framework fsdp) unless --framework(s) says otherwise; its parallelism and "
                  "checkpointing are what the search varies (flags win; docs/plan.md)");
  cmd->add_option("--deepspeed-config,--deepspeed_config", st->deepspeed_config,
                  "DeepSpeed ds_config.json: its precision, global batch (train_batch_size, or "
                  "micro-batch x accumulation x the GPUs), buckets, communication_data_type, "
                  "ZeRO++ and 1-bit optimizer; the plans DeepSpeed's (--framework deepspeed) "
                  "unless --framework(s) says otherwise; its ZeRO stage and micro-batch are what "
                  "the search varies (flags win; docs/plan.md)");
  cmd->add_option("--memory-headroom", st->memory_headroom,
                  "memory kept free on each GPU for the CUDA context, NCCL buffers and "
                  "fragmentation, which the memory model does not count: a size (2GiB, 512MiB) "
                  "or a percentage of the GPU's memory (10%); plans must fit in the rest [2GiB]");
  cmd->add_option("--objective", st->objective,
                  "rank by time (per iteration), tokens (tokens/s), cost (US dollars per "
                  "iteration from the preset's price per GPU-hour) or energy (joules per "
                  "iteration from its power per GPU) [time]");
  cmd->add_option("--max-tp", st->max_tp, "largest tensor-parallel size [no limit]");
  cmd->add_option("--max-pp", st->max_pp, "largest pipeline-parallel size [no limit]");
  cmd->add_option("--max-virtual-stages", st->max_vp,
                  "largest virtual stages per pipeline rank (interleaved) [no limit]");
  cmd->add_option("--max-cp", st->max_cp,
                  "largest context-parallel size (2 x CP divides the sequence) [no limit]");
  cmd->add_option("--max-ep", st->max_ep,
                  "largest expert-parallel size (MoE models; EP divides the experts) [no limit]");
  cmd->add_option("--zero", st->zero,
                  "ZeRO stages allowed, a comma list (FSDP's full_shard and hybrid_shard count "
                  "as 3, shard_grad_op as 2; Megatron's distributed optimizer as 1) [0,1,2,3]")
      ->delimiter(',');
  cmd->add_option("--micro-batch-size", st->micro_batch,
                  "micro-batch sizes allowed, a comma list [every divisor of the batch per "
                  "replica]")
      ->delimiter(',');
  cmd->add_option("--top", st->top, "plans to print per option, at most 1000 [10]");
  cmd->add_option("--threads", st->threads,
                  "worker threads [the hardware's; the output does not depend on it]");
  cmd->add_option("--html", st->html,
                  "also write a self-contained HTML report (the top plans' times split into "
                  "compute, exposed communication and bubble) to this file");
  add_output_options(*cmd, st->out);
  return {
      cmd, [st, cmd]() -> int {
        auto format = output_format(st->out);
        if (!format) return fail(format.error().message);
        auto objective = search::objective_from_name(st->objective);
        if (!objective)
          return fail(fmt::format("--objective: expected time, tokens, cost or energy, got '{}'",
                                  st->objective));
        // Each plan printed is predicted in full (and past the fitting plans' count the time
        // bound is off): 1,000 keeps the search's time and memory bounded (found by probing,
        // 2026-11-30: --top 1000000 ran past 60 s and 670 MB).
        if (st->top < 1 || st->top > 1000)
          return fail(fmt::format("--top: expected an integer from 1 to 1000, got '{}'", st->top));
        if (cmd->count("--threads") > 0 && (st->threads < 1 || st->threads > 1024))
          return fail(
              fmt::format("--threads: expected an integer from 1 to 1024, got '{}'", st->threads));
        if (st->gpus < 1)
          return fail(fmt::format("--gpus: expected a positive integer, got '{}'", st->gpus));
        if (cmd->count("--global-batch-size") > 0 && st->global_batch < 1)
          return fail(fmt::format("--global-batch-size: expected a positive integer, got '{}'",
                                  st->global_batch));
        // the limit on the value given, before the search rounds it up for its candidates
        if (Status s = limits::check_at_most("--global-batch-size", st->global_batch,
                                             limits::kMaxGlobalBatch,
                                             "samples per iteration, commscope's limit");
            !s.ok())
          return fail(s.error().message);
        if (cmd->count("--seq-length") > 0 && st->seq_length < 1)
          return fail(
              fmt::format("--seq-length: expected a positive integer, got '{}'", st->seq_length));
        for (auto [flag, v] : {std::pair{"--max-tp", st->max_tp},
                               {"--max-pp", st->max_pp},
                               {"--max-virtual-stages", st->max_vp},
                               {"--max-cp", st->max_cp},
                               {"--max-ep", st->max_ep},
                               {"--moe-router-num-groups", st->router_groups},
                               {"--moe-router-group-topk", st->router_group_topk}})
          if (cmd->count(flag) > 0 && v < 1)
            return fail(fmt::format("{}: expected a positive integer, got '{}'", flag, v));
        for (int z : st->zero)
          if (z < 0 || z > 3)
            return fail(fmt::format("--zero: expected stages among 0, 1, 2, 3, got '{}'", z));
        for (std::int64_t m : st->micro_batch)
          if (m < 1)
            return fail(fmt::format("--micro-batch-size: expected positive integers, got '{}'", m));
        if (st->system.size() > 1 && st->network.size() > 1)
          return fail(fmt::format(
              "--network: expected one network when --system lists {} (a what-if varies one "
              "of them), got {}",
              st->system.size(), st->network.size()));
        if (st->system.size() > 16 || st->network.size() > 16)
          return fail(fmt::format("--{}: expected at most 16 options, got {}",
                                  st->system.size() > 16 ? "system" : "network",
                                  std::max(st->system.size(), st->network.size())));
        if (Status s = check_outputs({{"-o/--output", st->out.path}, {"--html", st->html}});
            !s.ok())
          return fail(s.error().message);

        PlanInput base;
        // A torchtitan job file: what it fixes (flags win), what the search varies, notes.
        std::string model_name = st->model;
        // The job file's notes and the model's warnings, printed once the flags are checked.
        std::vector<std::string> notes, model_warnings;
        if (!st->torchtitan_config.empty() && !st->deepspeed_config.empty())
          return fail("--torchtitan-config: expected it or --deepspeed-config, got both");
        if (!st->torchtitan_config.empty()) {
          if (Status ok = check_flag_file("--torchtitan-config", st->torchtitan_config); !ok.ok())
            return fail(ok.error().message);
          auto job = load_torchtitan_config(st->torchtitan_config);
          if (!job) return fail(job.error().message);
          for (const std::string& note : job->notes)
            notes.push_back(fmt::format("{}: {}", st->torchtitan_config, note));
          const PlanInput& f = job->plan;
          if (cmd->count("--model") == 0) model_name = job->model;
          base.seq_length = f.seq_length;
          base.precision = f.precision;
          base.fp8 = f.fp8;
          base.grad_comm_dtype = f.grad_comm_dtype;
          base.attention = f.attention;
          base.cross_entropy = f.cross_entropy;        // torchtitan's loss (flags win, below)
          base.fsdp_cpu_offload = f.fsdp_cpu_offload;  // enable_cpu_offload
          if (cmd->count("--global-batch-size") == 0) {
            // The file's global batch: stated, or its local batch on each of its
            // data-parallel ranks (the GPUs its other degrees leave, as torchtitan's -1).
            std::int64_t global = f.global_batch.value_or(0);
            if (global == 0) {
              const std::int64_t local = f.micro_batch.value_or(1) * f.grad_accum.value_or(1);
              const std::int64_t others =
                  std::int64_t{f.tp.value_or(1)} * f.pp.value_or(1) * f.cp.value_or(1);
              if (!f.dp && st->gpus % others != 0)
                return fail(fmt::format(
                    "--torchtitan-config: {}: expected its tensor x pipeline x context degrees "
                    "({}) to divide --gpus {}, got a remainder (or give --global-batch-size)",
                    st->torchtitan_config, others, st->gpus));
              const std::int64_t ranks = f.dp ? *f.dp : st->gpus / others;
              if (local > limits::kMaxGlobalBatch / ranks)
                return fail(fmt::format(
                    "--torchtitan-config: {}: expected a global batch (local batch x {} "
                    "data-parallel ranks) of at most {} samples, got a local batch of {}",
                    st->torchtitan_config, ranks, limits::kMaxGlobalBatch, local));
              global = local * ranks;
            }
            st->global_batch = global;
          }
          if (st->framework.empty() && st->frameworks.empty()) {
            st->framework = "fsdp";
            notes.push_back(fmt::format(
                "{}: FSDP's plans searched (torchtitan's FSDP2, with its tensor and pipeline "
                "parallelism; --frameworks commscope,fsdp adds commscope's own)",
                st->torchtitan_config));
          }
        }
        // A ds_config.json: what it fixes for every plan (flags win); the search sets the ZeRO
        // stage, the micro-batch and the accumulation.
        if (!st->deepspeed_config.empty()) {
          const std::string& path = st->deepspeed_config;
          std::vector<std::string> ds_notes;
          auto ds = read_deepspeed_config(path, &ds_notes);
          if (!ds) return fail(ds.error().message);
          for (const std::string& note : ds_notes)
            notes.push_back(fmt::format("{}: {}", path, note));
          PlanInput f = std::move(*ds);
          if (cmd->count("--global-batch-size") == 0) {
            // DeepSpeed asserts train_batch_size = micro x accumulation x DP: with all three
            // given, a batch that micro x accumulation does not divide runs under no plan (it
            // searched 256 for 255, where predict refuses the file; found by probing,
            // 2026-12-02).
            if (f.global_batch && f.micro_batch && f.grad_accum) {
              const double step = static_cast<double>(*f.micro_batch) * *f.grad_accum;
              if (step > static_cast<double>(*f.global_batch) ||
                  *f.global_batch % static_cast<std::int64_t>(step) != 0)
                return fail(fmt::format(
                    "{}: train_batch_size: expected a multiple of train_micro_batch_size_per_gpu "
                    "x gradient_accumulation_steps = {} x {} = {:.0f} (DeepSpeed asserts "
                    "train_batch_size = micro-batch x accumulation x data-parallel size), got {}",
                    path, *f.micro_batch, *f.grad_accum, step, *f.global_batch));
            }
            if (f.global_batch) {
              st->global_batch = *f.global_batch;
            } else if (f.micro_batch) {
              // DeepSpeed's rule (deepspeed/runtime/config.py, _set_batch_related_parameters):
              // micro-batch x accumulation x data-parallel ranks; the file names no model
              // parallelism, so every GPU is one.
              const std::int64_t accum = f.grad_accum.value_or(1);
              if (static_cast<double>(*f.micro_batch) * static_cast<double>(accum) * st->gpus >
                  static_cast<double>(limits::kMaxGlobalBatch))
                return fail(fmt::format(
                    "--deepspeed-config: {}: expected a global batch (micro-batch x "
                    "accumulation x {} GPUs) of at most {} samples, got micro-batch {} and "
                    "accumulation {}",
                    path, st->gpus, limits::kMaxGlobalBatch, *f.micro_batch, accum));
              st->global_batch = *f.micro_batch * accum * st->gpus;
            } else if (f.grad_accum) {
              return fail(fmt::format(
                  "{}: gradient_accumulation_steps: expected train_batch_size or "
                  "train_micro_batch_size_per_gpu beside it (DeepSpeed asserts one of them), "
                  "got {} alone",
                  path, *f.grad_accum));
            }
          }
          if (f.zero || f.micro_batch) {
            std::vector<std::string> said, flags;
            if (f.zero) {
              said.push_back(fmt::format("ZeRO stage {}", *f.zero));
              flags.push_back(fmt::format("--zero {}", *f.zero));
            }
            if (f.micro_batch) {
              said.push_back(fmt::format("micro-batch {}", *f.micro_batch));
              flags.push_back(fmt::format("--micro-batch-size {}", *f.micro_batch));
            }
            notes.push_back(fmt::format("{}: its {} searched among the others ({} to keep {})",
                                        path, fmt::join(said, " and "), fmt::join(flags, " "),
                                        said.size() > 1 ? "them" : "it"));
          }
          f.zero.reset();
          f.micro_batch.reset();
          f.global_batch.reset();
          f.grad_accum.reset();
          base.merge(f);
          if (st->framework.empty() && st->frameworks.empty()) {
            st->framework = "deepspeed";
            notes.push_back(
                fmt::format("{}: DeepSpeed's plans searched (--frameworks commscope,deepspeed adds "
                            "commscope's own)",
                            path));
          }
        }
        // A job file's global batch, held to the flag's limit (it was the flag's error, after
        // the whole search).
        if (cmd->count("--global-batch-size") == 0 && st->global_batch > limits::kMaxGlobalBatch)
          return fail(fmt::format(
              "{}: expected at most {} samples per iteration (commscope's limit), got {}",
              st->deepspeed_config.empty()
                  ? st->torchtitan_config + ": [training] global_batch_size"
                  : st->deepspeed_config + ": train_batch_size",
              limits::kMaxGlobalBatch, st->global_batch));
        if (st->seq_length > 0) base.seq_length = st->seq_length;
        // Named values are parsed as the scenario verbs parse theirs (cli::named_value).
        if (Status s = cli::named_value("--precision", st->precision, precision_from_name,
                                        "fp32, fp16 or bf16", base.precision);
            !s.ok())
          return fail(s.error().message);
        if (st->fp8) {
          if (base.precision == Precision::fp32)
            return fail(
                "--fp8: expected bf16 or fp16 mixed precision around the FP8 GEMMs, got "
                "--precision fp32");
          base.fp8 = true;
        }
        if (st->fp8_param_gather) {
          if (!base.fp8.value_or(false))
            return fail("--fp8-param-gather: expected --fp8 with it, got no FP8 GEMMs");
          base.fp8_param_gather = true;
        }
        if (st->tp_comm_overlap) base.tp_comm_overlap = true;
        if (st->router_groups > 0) base.moe_router_groups = st->router_groups;
        if (st->router_group_topk > 0) base.moe_router_group_topk = st->router_group_topk;
        if (Status s = cross_entropy_flags(st->cross_entropy, st->cross_entropy_fusion, base);
            !s.ok())
          return fail(s.error().message);
        // --grad-comm-dtype: every plan's gradient reductions (over the torchtitan file's
        // mixed_precision_reduce: flags win)
        if (Status s = grad_comm_dtype_flags(st->grad_comm_dtype, st->grad_reduce_in_bf16, base);
            !s.ok())
          return fail(s.error().message);
        // ZeRO++ and gradient compression: the candidates that may have them
        // (search::to_plan_input); over the file's (flags win)
        if (Status s = compression_option_flags(st->compression, base); !s.ok())
          return fail(s.error().message);
        if (st->offload_optimizer) base.offload_optimizer = true;
        if (st->offload_param) base.offload_param = true;
        if (st->fsdp_cpu_offload) base.fsdp_cpu_offload = true;
        const GradCompression compression = base.grad_compression.value_or(GradCompression::none);
        if (Status s = check_compressed_wire(compression, base.grad_comm_dtype); !s.ok())
          return fail(s.error().message);
        // the optimizer's precision: every candidate with a sharded optimizer under commscope
        // or megatron (search::to_plan_input); its rules checked once, here
        if (Status s = optimizer_precision_flags(st->optimizer_precision, base); !s.ok())
          return fail(s.error().message);
        if (Status s = check_optimizer_precision(base, base.precision.value_or(Precision::bf16));
            !s.ok())
          return fail(s.error().message);
        for (const Status& s :
             {cli::attention_flags(st->attention, st->attention_backend, base),
              cli::named_value("--cp-comm-type", st->cp_comm_type, cp_comm_type_from_name,
                               "p2p, all_gather, a2a or a2a+p2p", base.cp_comm_type),
              cli::named_value("--moe-token-dispatcher-type", st->moe_dispatcher,
                               moe_dispatcher_from_name, "alltoall or flex", base.moe_dispatcher),
              cli::named_value("--framework", st->framework, framework_from_name,
                               "one of megatron|deepspeed|fsdp", base.framework)})
          if (!s.ok()) return fail(s.error().message);
        std::vector<Framework> frameworks;
        if (!st->frameworks.empty() && !st->framework.empty())
          return fail(
              fmt::format("--frameworks: expected it or --framework, not both, got --framework {}",
                          st->framework));
        for (const auto& name : st->frameworks) {
          auto f = search::framework_choice_from_name(name);
          if (!f)
            return fail(fmt::format(
                "--frameworks: expected a comma list of commscope|megatron|deepspeed|fsdp, "
                "got '{}'",
                name));
          frameworks.push_back(*f);
        }
        if (base.framework) {
          frameworks = {*base.framework};  // --framework X: X alone
          base.framework.reset();
        } else if (frameworks.empty()) {
          frameworks = {Framework::none, Framework::deepspeed, Framework::fsdp};
        }
        // ZeRO++ and gradient compression need a candidate that may have them (the rules of
        // search::to_plan_input), or they would change nothing without a word.
        std::vector<std::string_view> framework_names;
        for (Framework f : frameworks) framework_names.push_back(search::framework_choice_name(f));
        const std::string searched = fmt::format(
            "--zero {} and --frameworks {}",
            st->zero.empty() ? std::string("0,1,2,3") : fmt::format("{}", fmt::join(st->zero, ",")),
            fmt::join(framework_names, ","));
        // whether some candidate's stage and framework take a setting (search::to_plan_input)
        auto allows = [&](bool (*applies)(int, Framework), int stage) {
          const bool stage_ok = st->zero.empty() || std::find(st->zero.begin(), st->zero.end(),
                                                              stage) != st->zero.end();
          return stage_ok && std::any_of(frameworks.begin(), frameworks.end(),
                                         [&](Framework f) { return applies(stage, f); });
        };
        if ((base.zeropp_qwz.value_or(false) || base.zeropp_qgz.value_or(false) ||
             base.zeropp_hpz.value_or(1) > 1) &&
            !allows(search::zeropp_applies, 3))
          return fail(fmt::format(
              "{}: expected ZeRO stage 3 under commscope or deepspeed among the candidates "
              "(ZeRO++ extends DeepSpeed's ZeRO-3), got {}",
              base.zeropp_qwz.value_or(false) ? "--zero-quantized-weights (zero_quantized_weights)"
              : base.zeropp_qgz.value_or(false)
                  ? "--zero-quantized-gradients (zero_quantized_gradients)"
                  : "--zero-hpz-partition-size (zero_hpz_partition_size)",
              searched));
        if (base.offload_optimizer.value_or(false) && !allows(search::offload_applies, 1) &&
            !allows(search::offload_applies, 2) && !allows(search::offload_applies, 3))
          return fail(fmt::format(
              "--offload-optimizer: expected ZeRO stage 1, 2 or 3 under commscope or deepspeed "
              "among the candidates (ZeRO-Offload is DeepSpeed's ZeRO optimizers'), got {}",
              searched));
        if (base.offload_param.value_or(false) && !allows(search::param_offload_applies, 3))
          return fail(fmt::format(
              "--offload-param: expected ZeRO stage 3 under deepspeed among the candidates "
              "(DeepSpeed offloads parameters only there), got {}",
              searched));
        if (base.fsdp_cpu_offload.value_or(false) &&
            std::find(frameworks.begin(), frameworks.end(), Framework::fsdp) == frameworks.end())
          return fail(fmt::format(
              "--fsdp-cpu-offload: expected fsdp among the candidates' frameworks, got {}",
              searched));
        if (base.optimizer_cpu_offload.value_or(false) &&
            std::find(frameworks.begin(), frameworks.end(), Framework::megatron) ==
                frameworks.end())
          return fail(fmt::format(
              "--optimizer-cpu-offload: expected megatron among the candidates' frameworks, got {}",
              searched));
        if (base.optimizer_cpu_offload.value_or(false) &&
            !base.precision_aware_optimizer.value_or(false))
          return fail(
              "--optimizer-cpu-offload: expected --use-precision-aware-optimizer beside it "
              "(Megatron-LM asserts it), got none");
        if (base.offload_param.value_or(false) &&
            (base.zeropp_qwz.value_or(false) || base.zeropp_hpz.value_or(1) > 1))
          return fail(
              "--offload-param: expected no ZeRO++ qwZ or hpZ (not modelled with parameter "
              "offload)");
        if (compression != GradCompression::none && !allows(search::compression_applies, 0))
          return fail(
              fmt::format("--grad-compression: expected ZeRO stage 0 under commscope or deepspeed "
                          "among the candidates (PowerSGD and 1-bit Adam replace the data-parallel "
                          "all-reduce), got {}",
                          searched));
        search::SearchSpace headroom;
        if (Status hs = search::set_memory_headroom(headroom, st->memory_headroom); !hs.ok())
          return fail(hs.error().message);
        // Megatron-LM's model flags: a model of their own without --model (or a job file's),
        // else the named model changed by them.
        ModelFlags model_flags;
        if (Status s = model_flag_options(st->model_flags, model_flags); !s.ok())
          return fail(s.error().message);
        if (model_flags.any() && cmd->count("--model") == 0 && st->torchtitan_config.empty())
          model_name.clear();
        auto model = load_model(model_name, model_flags, base.seq_length.value_or(0));
        if (!model) return fail(model.error().message);
        // what the model's loader assumed (transformers' defaults), as predict warns of it
        for (const std::string& note : model->notes) model_warnings.push_back(note);
        const std::vector<std::string> systems =
            st->system.empty() ? std::vector<std::string>{"polaris"} : st->system;
        const std::vector<std::string> networks =
            st->network.empty() ? std::vector<std::string>{""} : st->network;
        std::vector<search::SearchSpace> spaces;
        std::vector<std::string> names;
        for (const auto& sys_name : systems)
          for (const auto& net_name : networks) {
            auto sys = load_system(sys_name);
            if (!sys) return fail(sys.error().message);
            if (base.fp8.value_or(false) && sys->gpu.peak.fp8.value() <= 0)
              return fail(fmt::format(
                  "{}: expected systems with an FP8 peak (H100 or later), got {} ({})",
                  st->fp8
                      ? "--fp8"
                      : "--torchtitan-config " + st->torchtitan_config + ": its float8 converter",
                  sys_name, sys->gpu.name));
            auto net = load_network(net_name.empty() ? sys->network : net_name);
            if (!net) return fail(net.error().message);
            search::SearchSpace s;
            s.model = *model;
            s.system = std::move(*sys);
            s.network = std::move(*net);
            s.gpus = st->gpus;
            if (st->global_batch > 0) s.global_batch = st->global_batch;
            s.fixed_global_batch = st->fixed_global_batch;
            s.base = base;
            s.max_tp = st->max_tp;
            s.max_pp = st->max_pp;
            s.max_virtual_stages = st->max_vp;
            s.max_cp = st->max_cp;
            s.max_ep = st->max_ep;
            s.zero = st->zero;
            s.micro_batch = st->micro_batch;
            s.frameworks = frameworks;
            s.memory_headroom_bytes = headroom.memory_headroom_bytes;
            s.memory_headroom_fraction = headroom.memory_headroom_fraction;
            names.push_back(systems.size() > 1 ? s.system.name : s.network.name);
            spaces.push_back(std::move(s));
          }
        search::SearchOptions so;
        so.objective = *objective;
        so.top = st->top;
        so.threads = st->threads > 0
                         ? st->threads
                         : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
        // Progress on a terminal once the search has run for 2 s, ten updates a second.
        const bool tty = ::isatty(STDERR_FILENO);
        const auto t0 = std::chrono::steady_clock::now();
        auto last = t0;
        bool shown = false, interrupted = false;
        so.progress = [&](std::size_t done, std::size_t total) {
          try {
            check_interrupt();  // Ctrl-C in Python: stop the workers, then rethrow
          } catch (const Interrupted&) {
            interrupted = true;
            return false;
          }
          const auto now = std::chrono::steady_clock::now();
          if (!tty || now - t0 < std::chrono::seconds(2) ||
              (now - last < std::chrono::milliseconds(100) && done < total))
            return true;
          last = now;
          shown = true;
          std::fprintf(stderr, "\rcommscope: plan %zu/%zu", done, total);
          return true;
        };
        print_notes(notes);
        print_warnings(model_warnings);
        auto result = search::what_if(spaces, names, so);
        if (shown) std::fprintf(stderr, "\r\033[K");
        if (interrupted) throw Interrupted();
        if (!result) return fail(result.error().message);
        PlanReport report;
        report.model = model->name;
        report.system = spaces.front().system.name;
        report.network = spaces.front().network.name;
        report.gpus = st->gpus;
        report.every_plan = every_plan_settings(base);
        report.options = std::move(*result);
        if (spaces.size() > 1) report.what_if_kind = systems.size() > 1 ? "system" : "network";
        auto page = html_output(st->html, [&] { return plan_page(report); });
        if (!page) return fail(page.error().message);
        return emit_with(render_plan(report, *format), st->out.path, {{"--html", st->html, *page}});
      }};
}

}  // namespace commscope::cli
