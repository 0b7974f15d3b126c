// The trainer's flags: the shared plan flags plus its own (train_flags.h).
#include "train_flags.h"

#include <algorithm>
#include <charconv>
#include <string_view>

#include <fmt/format.h>

namespace commscope::cli {

void add_train_flags(CLI::App& app, TrainFlags& f) {
  add_scenario_options(app, f.scenario);
  // The trainer's defaults differ from describe's.
  app.get_option("--model")->description(
      "model preset name or JSON file, GPT-2-shaped or a BERT without pooler (bert-tiny-cpu) "
      "[gpt2-tiny-cpu: 4 layers, hidden 256, 4 heads, vocab 4096, seq 128]");
  app.get_option("--system")
      ->description("system preset the plan is resolved and described on [cpu-host]");
  app.get_option("--nodes")->description("nodes the ranks span [as the system's node size says]");
  app.get_option("--gpus")->description("ranks in all: must equal the MPI rank count");
  app.get_option("--precision")->description("fp32 only: the CPU trainer has no mixed precision");
  // One run trains one plan: the shared flags' "(comma list)" is describe's and predict's.
  for (CLI::Option* opt : app.get_options()) {
    std::string d = opt->get_description();
    constexpr std::string_view kList = " (comma list)";
    if (d.size() >= kList.size() && d.compare(d.size() - kList.size(), kList.size(), kList) == 0)
      opt->description(d.substr(0, d.size() - kList.size()));
  }
  train::TrainOptions& o = f.o;
  const char* g_model = "Model and system";
  const char* g_train = "Training";
  const char* g_out = "Output and checkpoints";
  const char* g_old = "Deprecated spellings (one warning each)";
  app.add_option("--layers", f.layers, "override the model's transformer blocks")->group(g_model);
  app.add_option("--hidden", f.hidden, "override the model's width")->group(g_model);
  app.add_option("--heads", f.heads, "override the model's attention heads")->group(g_model);
  app.add_option("--vocab", f.vocab, "override the model's vocabulary (>= 256 with --data)")
      ->group(g_model);
  app.add_option("--zero-bucket", f.zero_bucket,
                 "ZeRO reduce and all-gather bucket in elements, as DeepSpeed's "
                 "reduce_bucket_size and allgather_bucket_size [5e8]")
      ->group("Parallel plan (Megatron-LM spellings)");
  app.add_option("--steps", o.steps,
                 "optimizer steps, counted from step 1 (a resumed run too) [20]")
      ->group(g_train);
  app.add_option_function<int>(
         "--warmup",
         [&o](int w) {
           o.warmup = w;
           o.warmup_given = true;
         },
         "steps left out of the averages [2, at most steps - 1]")
      ->group(g_train);
  app.add_option("--lr", o.lr, "AdamW learning rate [1e-3]")->group(g_train);
  app.add_option("--clip", o.clip, "gradient-norm clipping, 0 for none [1.0]")->group(g_train);
  app.add_option("--seed", f.seed, "initialisation and synthetic data seed, 0 to 2^64 - 1 [1234]")
      ->group(g_train);
  app.add_option("--data", o.data, "a text file, byte-level tokens [a synthetic stream]")
      ->group(g_train);
  app.add_option("--threads", o.threads, "BLAS threads per rank [1]")->group(g_train);
  app.add_option("--format", o.format, "table|json [table]")->group(g_out);
  app.add_option("-o,--output", o.output, "also write the json document to this file (rank 0)")
      ->group(g_out)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--trace", o.trace,
                 "one Chrome trace per rank: FILE gives FILE with .rank<r> before the extension; "
                 "a FOLDER/ (or an existing folder) gives FOLDER/rank<r>.json")
      ->group(g_out);
  app.add_option("--checkpoint", o.checkpoint_dir, "checkpoint folder")->group(g_out);
  app.add_option("--checkpoint-every", o.checkpoint_every, "write a checkpoint every K steps")
      ->group(g_out);
  app.add_flag("--resume", o.resume, "continue from the checkpoint folder's latest checkpoint")
      ->group(g_out);
  app.add_flag_callback(
         "--no-progress", [&o] { o.progress = false; },
         "no progress line (rank 0 shows one on a terminal, overwritten in place)")
      ->group(g_out);
  app.add_option("--micro-batch", f.old_micro_batch, "use --micro-batch-size")->group(g_old);
  app.add_option("--global-batch", f.old_global_batch, "use --global-batch-size")->group(g_old);
  app.add_option("--strategy", f.old_strategy, "ddp|zero1|zero2|zero3: use --zero 0|1|2|3")
      ->group(g_old);
  app.add_option("--bucket-mb", f.old_bucket_mb, "use --ddp-bucket-size")->group(g_old);
  app.add_option("--summary", f.old_summary, "use -o/--output")->group(g_old);
  app.add_option("--seq", f.old_seq, "use --seq-length")->group(g_old);
  app.add_flag("--progress", o.progress_forced,
               "(set by commscope train on a terminal) show the progress line under mpirun")
      ->group("");
  app.add_option("--kill-rank", o.kill_rank, "(tests) this rank dies ...")->group("");
  app.add_option("--kill-at-step", o.kill_step, "(tests) ... at the start of this step")->group("");
}

Result<train::TrainOptions> train_options(const TrainFlags& f, std::vector<std::string>* warnings) {
  ScenarioOptions s = f.scenario;
  train::TrainOptions o = f.o;
  auto old = [&](const char* was, const char* now) {
    if (warnings)
      warnings->push_back(
          fmt::format("{} is deprecated; use {} (the spelling of describe and "
                      "predict)",
                      was, now));
  };
  auto clash = [](const char* was, const char* now) {
    return Error{fmt::format("{}: expected either {} or its deprecated spelling {}, got both", now,
                             now, was)};
  };
  if (f.old_micro_batch) {
    if (!s.micro_batch.empty()) return clash("--micro-batch", "--micro-batch-size");
    old("--micro-batch", "--micro-batch-size");
    s.micro_batch = {*f.old_micro_batch};
  }
  if (f.old_global_batch) {
    if (!s.global_batch.empty()) return clash("--global-batch", "--global-batch-size");
    old("--global-batch", "--global-batch-size");
    s.global_batch = {*f.old_global_batch};
  }
  if (f.old_seq) {
    if (!s.seq_length.empty()) return clash("--seq", "--seq-length");
    old("--seq", "--seq-length");
    s.seq_length = {*f.old_seq};
  }
  if (f.old_bucket_mb) {
    if (!s.ddp_bucket_mb.empty()) return clash("--bucket-mb", "--ddp-bucket-size");
    old("--bucket-mb", "--ddp-bucket-size");
    s.ddp_bucket_mb = {*f.old_bucket_mb};
  }
  if (!f.old_strategy.empty()) {
    if (!s.zero.empty()) return clash("--strategy", "--zero");
    auto st = train::strategy_from_name(f.old_strategy);
    if (!st)
      return Error{
          fmt::format("--strategy: expected ddp, zero1, zero2 or zero3, got '{}'", f.old_strategy)};
    old("--strategy", "--zero 0|1|2|3");
    s.zero = {static_cast<int>(*st)};
  }
  if (!f.old_summary.empty()) {
    if (!o.output.empty()) return clash("--summary", "-o/--output");
    old("--summary", "-o/--output");
    o.output = f.old_summary;
  }
  if (!f.seed.empty()) {  // read here: CLI11 would wrap -1 and values past 2^64 into range
    const char* end = f.seed.data() + f.seed.size();
    auto [at, ec] = std::from_chars(f.seed.data(), end, o.seed);
    if (ec != std::errc() || at != end)
      return Error{fmt::format(
          "--seed: expected an integer from 0 to 18446744073709551615, got '{}'", f.seed)};
  }
  CS_ASSIGN_OR_RETURN(ScenarioInput in, scenario_input(s));
  // The trainer runs commscope's own collective pattern, its ZeRO stages by --zero: a framework's
  // was accepted and not applied until 2026-12-01 (`--framework deepspeed` trained DDP, and so
  // did a torchtitan job file's FSDP2 over every rank). FSDP that shards over one rank, or not at
  // all, is DDP, which the trainer runs.
  if (const PlanInput& p = in.plan; p.framework && *p.framework != Framework::none) {
    const bool ddp = *p.framework == Framework::fsdp &&
                     (p.fsdp_sharding == FsdpSharding::no_shard ||
                      (p.dp == 1 && !p.fsdp_replicate_size && !p.fsdp_shard_size));
    if (!ddp && s.framework.empty() && !s.torchtitan_config.empty())
      return Error{fmt::format(
          "--torchtitan-config: expected data_parallel_shard_degree 1 (the CPU trainer does "
          "not run FSDP2: its own pattern shards by --zero; describe and predict model FSDP), "
          "got FSDP over {} data-parallel ranks in {}",
          p.dp ? std::to_string(*p.dp) : std::string("all"), s.torchtitan_config)};
    if (!ddp)
      return Error{fmt::format(
          "--framework: the CPU trainer runs commscope's own collective pattern (ZeRO stages by "
          "--zero; describe and predict model {}'s), got {}",
          to_string(*p.framework), to_string(*p.framework))};
  }
  // The trainer's own defaults: its small GPT on the CPU host, sized by the rank count.
  if (s.model.empty()) in.model = train::kDefaultModel;
  if (s.system.empty()) in.system = train::kDefaultSystem;
  if (s.nodes.empty()) in.plan.nodes.reset();
  if (s.micro_batch.empty() && !in.plan.micro_batch) in.plan.micro_batch = f.o.micro_batch;
  if (f.zero_bucket) {
    in.plan.zero_reduce_bucket = *f.zero_bucket;
    in.plan.zero_allgather_bucket = *f.zero_bucket;
  }
  CS_RETURN_IF_ERROR(train::apply_plan(in, o));
  if (o.sequence_parallel && o.tp == 1) {  // as describe and Megatron-LM: a warning, then off
    if (warnings)
      warnings->push_back(
          "--sequence-parallel has no effect with tensor-parallel size 1; turned off");
    o.sequence_parallel = false;
  }
  if (f.layers) o.model.layers = *f.layers;
  if (f.hidden) o.model.hidden = *f.hidden;
  if (f.heads) o.model.heads = *f.heads;
  if (f.vocab) o.model.vocab = *f.vocab;
  if (f.layers || f.hidden || f.heads || f.vocab) o.model_name += "-custom";
  if (o.t5 && (f.layers || f.hidden || f.heads || f.vocab)) {  // T5: the same sizes
    if (f.layers) {  // blocks: half encoder, half decoder (the encoder the odd one)
      o.t5->decoder_layers = *f.layers / 2;
      o.t5->encoder_layers = *f.layers - *f.layers / 2;
    }
    if (f.hidden) o.t5->ffn = 4 * *f.hidden;  // T5's ffn 4h, as its presets
    if (f.hidden) o.t5->hidden = *f.hidden;
    if (f.heads) o.t5->heads = *f.heads;
    if (f.vocab) o.t5->vocab = *f.vocab;
  }
  return o;
}

std::vector<std::string> parsed_args(const CLI::App& app, const std::vector<std::string>& skip) {
  std::vector<std::string> args;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->count() == 0 || opt->get_positional()) continue;
    const auto& l = opt->get_lnames();
    const auto& sn = opt->get_snames();
    if (l.empty() && sn.empty()) continue;
    const std::string key = l.empty() ? sn.front() : l.front();
    if (key == "help" || std::find(skip.begin(), skip.end(), key) != skip.end()) continue;
    const std::string name = l.empty() ? "-" + key : "--" + key;
    if (opt->get_expected_min() == 0) {  // a flag
      for (std::size_t i = 0; i < opt->count(); ++i) args.push_back(name);
      continue;
    }
    for (const std::string& r : opt->results()) {
      args.push_back(name);
      args.push_back(r);
    }
  }
  return args;
}

}  // namespace commscope::cli
