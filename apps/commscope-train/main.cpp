// commscope-train: the MPI program behind `commscope train`. Run it under mpirun, mpiexec or
// srun (or let `commscope train --ranks N` launch it). docs/train.md describes the flags.
#include <optional>
#include <string>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "commscope/comm/flags.h"
#include "commscope/comm/mpi.h"
#include "commscope/spec/model.h"
#include "commscope/train/trainer.h"

int main(int argc, char** argv) {
  using namespace commscope;
  comm::Session mpi(&argc, &argv, /*serialized_threads=*/true);
  train::TrainOptions o;
  // A small GPT-2 that trains in seconds per step on one CPU core.
  o.model = {4, 256, 4, 4096, 128, 128};
  CLI::App app{
      "commscope-train: a CPU GPT-2 trained over MPI with DDP or ZeRO-1/2/3, its "
      "timeline recorded"};
  std::string model, strategy = "ddp";
  std::optional<int> layers, hidden, heads, vocab, seq;
  app.add_option("--model", model,
                 "a GPT-2-shaped model preset or config.json (gpt2-small, ...); the flags below "
                 "override its sizes [4 layers, hidden 256, 4 heads, vocab 4096, seq 128]");
  app.add_option("--layers", layers, "transformer blocks");
  app.add_option("--hidden", hidden, "model width");
  app.add_option("--heads", heads, "attention heads");
  app.add_option("--vocab", vocab, "vocabulary (>= 256 with --data)");
  app.add_option("--seq", seq, "tokens per sequence");
  app.add_option("--strategy", strategy, "ddp|zero1|zero2|zero3 [ddp]");
  app.add_option("--micro-batch", o.micro_batch, "sequences per rank per micro-batch [4]");
  app.add_option("--global-batch", o.global_batch,
                 "sequences per step; a multiple of micro-batch x ranks, the rest is gradient "
                 "accumulation [micro-batch x ranks]");
  app.add_option("--steps", o.steps, "optimizer steps [20]");
  app.add_option("--warmup", o.warmup, "steps left out of the averages [2]");
  app.add_option("--lr", o.lr, "AdamW learning rate [1e-3]");
  app.add_option("--clip", o.clip, "gradient-norm clipping, 0 for none [1.0]");
  app.add_option("--seed", o.seed, "initialisation and synthetic data seed [1234]");
  app.add_option("--data", o.data, "a text file, byte-level tokens [a synthetic stream]");
  app.add_option("--bucket-mb", o.bucket_mb, "DDP bucket size in MiB, as bucket_cap_mb [25]");
  app.add_option("--zero-bucket", o.zero_bucket,
                 "ZeRO reduce and all-gather bucket in elements, as DeepSpeed [5e8]");
  app.add_option("--threads", o.threads, "BLAS threads per rank [1]");
  app.add_option("--trace", o.trace_dir, "write one Chrome trace per rank into this folder");
  app.add_option("--format", o.format, "table|json [table]");
  app.add_option("--summary", o.summary_file, "also write the json document to this file");
  app.add_option("--checkpoint", o.checkpoint_dir, "checkpoint folder");
  app.add_option("--checkpoint-every", o.checkpoint_every, "write a checkpoint every K steps");
  app.add_flag("--resume", o.resume, "continue from the checkpoint folder's latest checkpoint");
  app.add_option("--kill-rank", o.kill_rank, "(tests) this rank dies ...")->group("");
  app.add_option("--kill-at-step", o.kill_step, "(tests) ... at the start of this step")->group("");
  if (auto stop = comm::parse_flags(app, argc, argv, mpi)) return *stop;
  if (!model.empty()) {
    auto m = load_model(model);
    if (!m.ok()) return mpi.fail(m.error().message);
    auto c = train::config_from_model(*m);
    if (!c.ok()) return mpi.fail(c.error().message);
    o.model = *c;
    o.model_name = m->name;
  }
  if (layers) o.model.layers = *layers;
  if (hidden) o.model.hidden = *hidden;
  if (heads) o.model.heads = *heads;
  if (vocab) o.model.vocab = *vocab;
  if (seq) {
    o.model.seq = *seq;
    if (model.empty() || o.model.max_positions < *seq) o.model.max_positions = *seq;
  }
  if (strategy == "ddp")
    o.strategy = train::Strategy::ddp;
  else if (strategy == "zero1")
    o.strategy = train::Strategy::zero1;
  else if (strategy == "zero2")
    o.strategy = train::Strategy::zero2;
  else if (strategy == "zero3")
    o.strategy = train::Strategy::zero3;
  else
    return mpi.fail(
        fmt::format("--strategy: expected ddp, zero1, zero2 or zero3, got '{}'", strategy));
  return train::run_training(o, MPI_COMM_WORLD);
}
