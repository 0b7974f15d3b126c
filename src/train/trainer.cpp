// The distributed trainer. Its communication is read off the workload (build_workload) for the
// same model and plan, so that what it sends is, byte for byte, what describe and predict
// count: DDP gradient buckets (all-reduce, last micro-batch only), ZeRO-2/3 gradient buckets
// (reduce-scatter, every micro-batch), ZeRO-1 gradient reduce-scatter and ZeRO-1/2 parameter
// all-gather at the step, ZeRO-3 per-module parameter gathers before forward and backward.
// Every MPI call of a step runs on one communication thread (a FIFO "stream", as NCCL's), so
// bucket all-reduces run while backward continues on the main thread.
#include "commscope/train/trainer.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "comm_stream.h"
#include "commscope/comm/mpi.h"
#include "commscope/gpt/data.h"
#include "commscope/gpt/kernels.h"
#include "commscope/gpt/optim.h"
#include "commscope/spec/scenario.h"
#include "commscope/timeline/chrome.h"
#include "commscope/timeline/timeline.h"
#include "commscope/util/atomic_file.h"
#include "commscope/workload/workload.h"

namespace commscope::train {

std::string_view to_string(Strategy s) {
  switch (s) {
    case Strategy::ddp:
      return "ddp";
    case Strategy::zero1:
      return "zero1";
    case Strategy::zero2:
      return "zero2";
    case Strategy::zero3:
      return "zero3";
  }
  return "?";
}

ModelSpec model_spec(const GptConfig& c, const std::string& name) {
  ModelSpec m;
  m.name = name;
  m.kind = ArchKind::gpt;
  m.decoder_layers = c.layers;
  m.hidden = c.hidden;
  m.heads = c.heads;
  m.vocab = c.vocab;
  m.seq_length = c.seq;
  m.max_positions = c.max_positions;
  m.tied_embeddings = true;
  m.bias = true;
  m.dropout = false;
  m.position = PositionEmbedding::learned;
  m.norm = NormKind::layernorm;
  m.mlp = MlpKind::gelu;
  apply_model_defaults(m);
  m.ffn = 4 * static_cast<std::int64_t>(c.hidden);
  return m;
}

Result<GptConfig> config_from_model(const ModelSpec& m) {
  const std::string where = "--model " + m.name;
  if (m.kind != ArchKind::gpt || m.position != PositionEmbedding::learned ||
      m.norm != NormKind::layernorm || m.mlp != MlpKind::gelu || !m.tied_embeddings || !m.bias ||
      m.kv_heads != m.heads || m.ffn != 4 * m.hidden || m.head_dim * m.heads != m.hidden)
    return Error{fmt::format(
        "{}: expected a GPT-2-shaped model (learned positions, LayerNorm, GELU MLP of 4h, biases, "
        "tied LM head, no GQA); got kind {}",
        where, to_string(m.kind))};
  GptConfig c;
  c.layers = m.decoder_layers;
  c.hidden = static_cast<int>(m.hidden);
  c.heads = static_cast<int>(m.heads);
  c.vocab = static_cast<int>(m.vocab);
  c.seq = static_cast<int>(m.seq_length);
  c.max_positions = static_cast<int>(m.max_positions ? m.max_positions : m.seq_length);
  return c;
}

Status validate(const TrainOptions& o, int world) {
  CS_RETURN_IF_ERROR(commscope::train::validate(o.model));
  if (o.micro_batch < 1)
    return Error{fmt::format("--micro-batch: expected a positive integer, got {}", o.micro_batch)};
  const std::int64_t per_step = static_cast<std::int64_t>(o.micro_batch) * world;
  const std::int64_t g = o.global_batch ? o.global_batch : per_step;
  if (g < 1 || g % per_step != 0)
    return Error{fmt::format(
        "--global-batch: expected a multiple of micro-batch x ranks = {} x {} = {}, got {}",
        o.micro_batch, world, per_step, g)};
  if (o.steps < 1)
    return Error{fmt::format("--steps: expected a positive integer, got {}", o.steps)};
  if (o.warmup < 0 || o.warmup >= o.steps)
    return Error{
        fmt::format("--warmup: expected 0 to steps - 1 = {}, got {}", o.steps - 1, o.warmup)};
  if (!(o.lr > 0)) return Error{fmt::format("--lr: expected a positive number, got {}", o.lr)};
  if (!(o.bucket_mb > 0))
    return Error{fmt::format("--bucket-mb: expected a positive number, got {}", o.bucket_mb)};
  if (o.zero_bucket < 1)
    return Error{fmt::format("--zero-bucket: expected a positive integer, got {}", o.zero_bucket)};
  if (o.threads < 1)
    return Error{fmt::format("--threads: expected a positive integer, got {}", o.threads)};
  if (o.format != "table" && o.format != "json")
    return Error{fmt::format("--format: expected table or json, got '{}'", o.format)};
  if (o.checkpoint_every < 0)
    return Error{fmt::format("--checkpoint-every: expected 0 or more, got {}", o.checkpoint_every)};
  if ((o.checkpoint_every > 0 || o.resume) && o.checkpoint_dir.empty())
    return Error{"--checkpoint: expected a folder with --checkpoint-every or --resume"};
  return ok_status();
}

namespace {

// One communication op of the plan, mapped onto the flat buffer.
struct CommOp {
  std::string_view name;
  Collective collective;
  std::int64_t offset = 0, elements = 0;
  int layer = kNoLayer;
};

class Trainer {
 public:
  Trainer(const TrainOptions& o, MPI_Comm comm) : o_(o), comm_(comm) {
    MPI_Comm_rank(comm, &me_);
    MPI_Comm_size(comm, &n_);
  }
  int run();

 private:
  // True when every rank's `ok` is true (a collective: call with the stream idle).
  bool agree(bool ok) {
    int mine = ok ? 1 : 0, all = 0, first_bad = n_;
    CS_MPI_CHECK(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm_));
    int me_bad = ok ? n_ : me_;
    CS_MPI_CHECK(MPI_Allreduce(&me_bad, &first_bad, 1, MPI_INT, MPI_MIN, comm_));
    agree_first_failure_ = first_bad == me_;
    return all == 1;
  }
  bool agree_first_failure_ = false;
  Status plan();
  void record_compute(const OpRecord& r);
  // Runs one MPI collective on the stream and records it.
  // outside_workload: a collective the workload does not model (the loss and gradient-norm
  // scalars, checkpoint agreement, the re-gather after a resume): timed, not counted.
  std::uint64_t collective(const CommOp& op, std::function<void()> call,
                           bool outside_workload = false);
  std::uint64_t all_reduce_grads(const CommOp& op);
  // Reduce-scatter of op's range, read from `src` (kept alive by `keep` until it ran), onto the
  // ranks' partitions; each rank's part is added into its shard of the gradients.
  std::uint64_t reduce_scatter_grads(const CommOp& op, const float* src,
                                     std::shared_ptr<const std::vector<float>> keep = nullptr);
  // ZeRO-2/3 backward: gradients go from one module's buffer to the open bucket's buffer and
  // are reduce-scattered from there; nothing full-size is kept.
  void backward_sharded(const float* wte_emb, const float* lnf,
                        const std::function<const float*(int)>& block_params,
                        const std::function<void(int)>& before_block);
  std::uint64_t all_gather_params(const CommOp& op, bool outside_workload = false);
  std::uint64_t gather_from_shards(const CommOp& op, float* dst, bool outside_workload = false);
  std::uint64_t gather_module(Range r, std::vector<float>& into, int layer);
  float micro_step(std::int64_t first_sequence, bool last);
  float forward_backward_zero3(const std::int32_t* tok, const std::int32_t* tgt);
  void optimizer_step(std::int64_t step, double* grad_norm);
  Status save(std::int64_t step);
  Result<std::int64_t> load();
  bool setup();
  bool resume();
  void averages(Breakdown* avg, double* time) const;
  void gather_ranks();
  nlohmann::json per_rank_ = nlohmann::json::array();  // rank 0: every rank's averages
  Status train();
  void write_trace() const;
  int report() const;
  // Tokens and matrix-product FLOPs of one step of the whole job (every rank, every
  // micro-batch).
  double tokens_per_step_() const {
    return static_cast<double>(accum_ * n_ * o_.micro_batch) * o_.model.seq;
  }
  double flops_per_step_() const {
    return model_->matmul_flops_per_step() * static_cast<double>(accum_ * n_);
  }

  // What this rank holds between steps (bytes), and its peak resident memory.
  nlohmann::json memory_json() const {
    auto bytes = [](const std::vector<float>& v) { return static_cast<double>(v.size()) * 4; };
    struct rusage ru = {};
    ::getrusage(RUSAGE_SELF, &ru);
    return {{"parameters", bytes(params_) + bytes(shard_params_)},
            {"gradients", bytes(grads_) + bytes(shard_grads_)},
            {"optimizer_state", bytes(m_) + bytes(v_)},
            {"peak_resident", static_cast<double>(ru.ru_maxrss) * 1024}};
  }

  struct StepRow {
    std::int64_t step;
    double loss, seconds, grad_norm;
    Breakdown br;
  };
  std::vector<StepRow> rows_;
  std::int64_t start_ = 0;  // the step a resumed run continues after

  const TrainOptions& o_;
  MPI_Comm comm_;
  int me_ = 0, n_ = 1;
  std::int64_t accum_ = 1;
  std::unique_ptr<Gpt> model_;
  std::unique_ptr<TokenSource> data_;
  Partition part_;
  // The full parameters (not ZeRO-3, which gathers module by module) and the full gradients
  // (DDP and ZeRO-1 only).
  std::vector<float> params_, grads_;
  std::vector<float> shard_params_, shard_grads_, m_, v_;
  // Backward buckets (DDP all-reduce, ZeRO-2/3 reduce-scatter), in backward order over the
  // buffer from its end.
  std::vector<CommOp> bucket_ops_;
  // Gradients backward has completed when bucket k is complete.
  std::int64_t bucket_end(std::size_t k) const { return part_.total - bucket_ops_[k].offset; }
  std::vector<CommOp> step_rs_, step_ag_;  // ZeRO-1 reduce-scatter, ZeRO-1/2 all-gather
  CommStream stream_;
  Timeline tl_;
  std::vector<Event> compute_events_, comm_events_;  // main thread, stream thread
  std::map<std::pair<CommGroup, Collective>, std::pair<std::int64_t, double>> measured_;
  std::vector<CommVolume> expected_;
  double t0_ = 0;
  std::int32_t microbatch_ = 0;
};

void Trainer::record_compute(const OpRecord& r) {
  Event e;
  e.rank = me_;
  e.stream = 0;
  e.start = r.start_s - t0_;
  e.dur = r.end_s - r.start_s;
  e.kind = EventKind::compute;
  e.name = tl_.intern(r.name);
  e.layer = r.layer;  // the workload's layer numbers
  e.microbatch = microbatch_;
  compute_events_.push_back(e);
}

std::uint64_t Trainer::collective(const CommOp& op, std::function<void()> call,
                                  bool outside_workload) {
  // Interned here, on the main thread: the stream thread must not touch the name table.
  const std::uint32_t name = tl_.intern(op.name);
  const std::int32_t mb = microbatch_;
  return stream_.submit([this, op, call = std::move(call), name, mb, outside_workload] {
    Event e;
    e.rank = me_;
    e.stream = 1;
    e.start = Gpt::now() - t0_;
    call();
    e.dur = Gpt::now() - t0_ - e.start;
    e.kind = EventKind::comm;
    e.has_collective = true;
    e.collective = op.collective;
    e.group = CommGroup::data;
    e.group_size = n_;
    e.name = name;
    e.layer = op.layer;
    e.microbatch = mb;
    e.bytes = static_cast<double>(op.elements) * sizeof(float);
    comm_events_.push_back(e);
    if (!outside_workload) {
      auto& m = measured_[{CommGroup::data, op.collective}];
      m.first += 1;
      m.second += e.bytes;
    }
  });
}

std::uint64_t Trainer::all_reduce_grads(const CommOp& op) {
  float* p = grads_.data() + op.offset;
  const int count = static_cast<int>(op.elements);
  return collective(op, [this, p, count] {
    CS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p, count, MPI_FLOAT, MPI_SUM, comm_));
  });
}

std::uint64_t Trainer::reduce_scatter_grads(const CommOp& op, const float* src,
                                            std::shared_ptr<const std::vector<float>> keep) {
  return collective(op, [this, op, src, keep = std::move(keep)] {
    const Partition::Pieces p = part_.pieces(op.offset, op.elements);
    const int mine = p.counts[static_cast<std::size_t>(me_)];
    std::vector<float> out(static_cast<std::size_t>(std::max(mine, 1)));
    CS_MPI_CHECK(MPI_Reduce_scatter(src, out.data(), p.counts.data(), MPI_FLOAT, MPI_SUM, comm_));
    float* shard = shard_grads_.data() + part_.in_shard(me_, op.offset);
    for (int i = 0; i < mine; ++i) shard[i] += out[static_cast<std::size_t>(i)];
  });
}

void Trainer::backward_sharded(const float* wte_emb, const float* lnf,
                               const std::function<const float*(int)>& block_params,
                               const std::function<void(int)>& before_block) {
  const ParamLayout& layout = model_->layout();
  std::size_t bucket = 0;
  std::int64_t completed = 0;
  std::shared_ptr<std::vector<float>> open;  // the bucket being filled
  // A group's gradients are final at `src`: into the open bucket, which goes when complete.
  // One rank: no buckets, the shard is the whole buffer.
  auto done = [&](const ParamLayout::Group& g, const float* src) {
    const auto n = static_cast<std::size_t>(g.range.size);
    if (bucket_ops_.empty()) {
      float* dst = shard_grads_.data() + g.range.offset;
      for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
      return;
    }
    const CommOp& op = bucket_ops_[bucket];
    if (!open) open = std::make_shared<std::vector<float>>(static_cast<std::size_t>(op.elements));
    std::copy(src, src + n, open->data() + (g.range.offset - op.offset));
    completed += g.range.size;
    if (completed >= bucket_end(bucket)) {
      reduce_scatter_grads(op, open->data(), open);
      open.reset();
      ++bucket;
    }
  };
  const Range e = layout.embedding(), h = layout.head();
  std::vector<float> d_emb(static_cast<std::size_t>(e.size), 0.0f);
  std::vector<float> d_head(static_cast<std::size_t>(h.size), 0.0f), d_block;
  model_->backward_head(wte_emb, lnf, d_emb.data(), d_head.data());
  done(layout.backward_groups().front(), d_head.data());
  for (int l = o_.model.layers - 1; l >= 0; --l) {
    before_block(l);
    const Range b = layout.block(l);
    d_block.assign(static_cast<std::size_t>(b.size), 0.0f);
    model_->backward_block(l, block_params(l), d_block.data(), [&](const ParamLayout::Group& g) {
      done(g, d_block.data() + (g.range.offset - b.offset));
    });
  }
  before_block(-1);
  model_->backward_embedding(d_emb.data());
  done(layout.backward_groups().back(), d_emb.data());
}

// All-gather of op's range of the parameters from the owners' shards into `dst`.
std::uint64_t Trainer::gather_from_shards(const CommOp& op, float* dst, bool outside_workload) {
  return collective(
      op,
      [this, op, dst] {
        const Partition::Pieces p = part_.pieces(op.offset, op.elements);
        CS_MPI_CHECK(MPI_Allgatherv(shard_params_.data() + part_.in_shard(me_, op.offset),
                                    p.counts[static_cast<std::size_t>(me_)], MPI_FLOAT, dst,
                                    p.counts.data(), p.displs.data(), MPI_FLOAT, comm_));
      },
      outside_workload);
}

// ZeRO-1/2: params_[offset, offset+elements) from the owners' shards, after the step.
std::uint64_t Trainer::all_gather_params(const CommOp& op, bool outside_workload) {
  return gather_from_shards(op, params_.data() + op.offset, outside_workload);
}

// ZeRO-3: gathers one module's parameters into `into` (allocated here, released by the caller).
std::uint64_t Trainer::gather_module(Range r, std::vector<float>& into, int layer) {
  if (n_ == 1) {  // one rank holds everything: nothing to gather (the workload has no gather)
    into.assign(shard_params_.begin() + r.offset, shard_params_.begin() + r.offset + r.size);
    return 0;
  }
  into.assign(static_cast<std::size_t>(r.size), 0.0f);
  return gather_from_shards(
      CommOp{"zero3_param_all_gather", Collective::all_gather, r.offset, r.size, layer},
      into.data());
}

Status Trainer::plan() {
  const int world = n_;
  accum_ = (o_.global_batch ? o_.global_batch : static_cast<std::int64_t>(o_.micro_batch) * world) /
           (static_cast<std::int64_t>(o_.micro_batch) * world);
  // The workload of the same model and plan: the single source of the communication.
  CS_ASSIGN_OR_RETURN(SystemSpec system, load_system("polaris"));
  CS_ASSIGN_OR_RETURN(NetworkProtocol net, load_network("rdma-100g"));
  PlanInput p;
  p.dp = world;
  // The system only places ranks for the cost model, which the trainer does not use: one node
  // holding every rank keeps any rank count valid. The communication ops do not depend on it.
  system.node.gpus = world;
  p.gpus = world;
  p.nodes = 1;
  p.zero = static_cast<int>(o_.strategy);
  p.micro_batch = o_.micro_batch;
  p.grad_accum = accum_;
  p.precision = Precision::fp32;
  p.recompute = Recompute::none;
  p.ddp_bucket_mb = o_.bucket_mb;
  p.zero_reduce_bucket = o_.zero_bucket;
  p.zero_allgather_bucket = o_.zero_bucket;
  CS_ASSIGN_OR_RETURN(Scenario sc,
                      resolve_scenario(model_spec(o_.model, o_.model_name), system, net, p));
  const Workload w = build_workload(sc);
  CS_CHECK(w.roles.size() == 1 && w.roles[0].chunks.size() == 1);
  const Role& role = w.roles[0];
  expected_ = comm_volume(w, role);
  const ParamLayout& layout = model_->layout();
  if (role.params != layout.total())
    return Error{fmt::format("internal: the workload counts {} parameters, the trainer holds {}",
                             role.params, layout.total())};
  part_ = Partition{layout.total(), n_};

  // Backward buckets: the workload's grad_bucket ops, in backward order, over the buffer from
  // its end (backward completes gradients in reverse memory order).
  std::int64_t done = 0;
  for (const Op& op : role.chunks[0].backward.ops()) {
    if (op.kind != OpKind::comm || op.tag != OpTag::grad_bucket) continue;
    done += op.elements;
    bucket_ops_.push_back(
        CommOp{op.name, op.collective, layout.total() - done, op.elements, op.layer});
  }
  std::int64_t offset = 0;
  for (const Op& op : role.step.ops()) {
    if (op.kind != OpKind::comm) continue;
    CommOp c{op.name, op.collective, offset, op.elements, op.layer};
    if (op.collective == Collective::reduce_scatter) step_rs_.push_back(c);
    if (op.collective == Collective::all_gather) step_ag_.push_back(c);
    offset += op.elements;
    if (offset >= layout.total()) offset = 0;  // the all-gathers start again from the beginning
  }
  // Every bucket must end where a parameter group ends (the workload closes buckets after the
  // op that completes a group's gradients); otherwise the layouts disagree.
  std::set<std::int64_t> group_ends;
  std::int64_t completed = 0;
  for (const auto& g : layout.backward_groups()) group_ends.insert(completed += g.range.size);
  for (std::size_t k = 0; k < bucket_ops_.size(); ++k)
    if (!group_ends.count(bucket_end(k)))
      return Error{fmt::format(
          "internal: a workload bucket ends after {} gradients, inside a parameter group",
          bucket_end(k))};
  return ok_status();
}

float Trainer::forward_backward_zero3(const std::int32_t* tok, const std::int32_t* tgt) {
  const ParamLayout& layout = model_->layout();
  const int layers = o_.model.layers;
  std::vector<float> emb, cur, nxt, head;
  // forward: each module gathered before its forward, the next one prefetched meanwhile
  std::uint64_t t = gather_module(layout.embedding(), emb, kEmbeddingLayer);
  std::uint64_t tn = gather_module(layout.block(0), nxt, 0);
  stream_.wait(t);
  model_->forward_embedding(emb.data(), tok);
  for (int l = 0; l < layers; ++l) {
    stream_.wait(tn);
    cur.swap(nxt);
    if (l + 1 < layers)
      tn = gather_module(layout.block(l + 1), nxt, l + 1);
    else
      tn = gather_module(layout.head(), head, kHeadLayer);
    model_->forward_block(l, cur.data());
    cur.clear();
    cur.shrink_to_fit();  // released after use
  }
  stream_.wait(tn);
  // The tied LM head uses the embedding gathered for the forward: it stays until the head's
  // backward (the workload gathers it again for the embedding's backward, and so do we).
  const float loss = model_->forward_head(emb.data(), head.data(), tgt);
  head.clear();

  // backward: the head, then each block with the one below prefetched, then the embedding
  t = gather_module(layout.head(), head, kHeadLayer);
  tn = gather_module(layout.block(layers - 1), nxt, layers - 1);
  stream_.wait(t);
  std::vector<float> held_emb = std::move(emb);  // the tied head's weights, until its backward
  bool head_done = false;
  backward_sharded(
      held_emb.data(), head.data(), [&](int) { return cur.data(); },
      [&](int l) {
        if (!head_done) {  // the head's backward has run: its parameters go
          head_done = true;
          head.clear();
          held_emb.clear();
          held_emb.shrink_to_fit();
        }
        cur.clear();
        cur.shrink_to_fit();  // the previous block's parameters: released after use
        stream_.wait(tn);
        if (l < 0) {
          emb.swap(nxt);  // the embedding, gathered again for its backward
          return;
        }
        cur.swap(nxt);
        tn = l > 0 ? gather_module(layout.block(l - 1), nxt, l - 1)
                   : gather_module(layout.embedding(), nxt, kEmbeddingLayer);
      });
  emb.clear();
  return loss;
}

// One micro-batch on this rank: sequences [first, first + micro_batch).
float Trainer::micro_step(std::int64_t first, bool last) {
  const int b = o_.micro_batch, seq = o_.model.seq;
  std::vector<std::int32_t> tok(static_cast<std::size_t>(b) * seq), tgt(tok.size());
  for (int i = 0; i < b; ++i)
    data_->sequence(first + i, seq, tok.data() + static_cast<std::size_t>(i) * seq,
                    tgt.data() + static_cast<std::size_t>(i) * seq);
  if (o_.strategy == Strategy::zero3) {
    const float loss = forward_backward_zero3(tok.data(), tgt.data());
    stream_.drain();
    return loss;
  }
  const float loss = model_->forward(params_.data(), tok.data(), tgt.data());
  if (o_.strategy == Strategy::zero2) {
    const ParamLayout& layout = model_->layout();
    backward_sharded(
        params_.data() + layout.embedding().offset, params_.data() + layout.head().offset,
        [&](int l) { return params_.data() + layout.block(l).offset; }, [](int) {});
    stream_.drain();
    return loss;
  }
  // DDP (and ZeRO-1, which reduces at the step): gradients accumulate in the full buffer.
  const bool buckets = n_ > 1 && o_.strategy == Strategy::ddp && last;
  std::size_t bucket = 0;
  std::int64_t completed = 0;
  model_->backward(params_.data(), grads_.data(), [&](const ParamLayout::Group& g) {
    if (!buckets) return;
    completed += g.range.size;
    // A bucket starts as soon as its last gradient is final, while backward goes on.
    while (bucket < bucket_ops_.size() && bucket_end(bucket) <= completed)
      all_reduce_grads(bucket_ops_[bucket++]);
  });
  stream_.drain();
  return loss;
}

void Trainer::optimizer_step(std::int64_t step, double* grad_norm) {
  const float scale = 1.0f / static_cast<float>(accum_ * n_);  // mean over the global batch
  AdamW h;
  h.lr = o_.lr;
  const bool sharded = o_.strategy != Strategy::ddp;
  if (o_.strategy == Strategy::zero1 && n_ > 1)
    for (const CommOp& op : step_rs_) reduce_scatter_grads(op, grads_.data() + op.offset);
  stream_.drain();
  if (o_.strategy == Strategy::zero1 && n_ == 1) {
    // One rank: the shard is everything, and no collective ran to fill it.
    for (std::size_t i = 0; i < grads_.size(); ++i) shard_grads_[i] += grads_[i];
  }
  const std::vector<float>& g = sharded ? shard_grads_ : grads_;
  double sq = sum_of_squares(g.data(), static_cast<std::int64_t>(g.size()));
  if (sharded && n_ > 1) {  // the global norm needs every shard: one scalar all-reduce
    CommOp op{"grad_norm_all_reduce", Collective::all_reduce, 0, 2, kNoLayer};
    collective(
        op,
        [this, &sq] {
          CS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &sq, 1, MPI_DOUBLE, MPI_SUM, comm_));
        },
        true);
    stream_.drain();
  }
  const double norm = std::sqrt(sq) * scale;
  *grad_norm = norm;
  const float k = scale * clip_factor(norm, o_.clip);
  const double t = Gpt::now();
  if (sharded) {
    adamw_step(shard_params_.data(), shard_grads_.data(), m_.data(), v_.data(),
               static_cast<std::int64_t>(shard_params_.size()), h, step, k);
    std::fill(shard_grads_.begin(), shard_grads_.end(), 0.0f);
  } else {
    adamw_step(params_.data(), grads_.data(), m_.data(), v_.data(),
               static_cast<std::int64_t>(params_.size()), h, step, k);
  }
  record_compute(OpRecord{"adam", kNoLayer, false, t, Gpt::now(), 0});
  std::fill(grads_.begin(), grads_.end(), 0.0f);
  if (o_.strategy == Strategy::zero1 || o_.strategy == Strategy::zero2) {
    if (n_ > 1) {
      for (const CommOp& op : step_ag_) all_gather_params(op);
      stream_.drain();
    } else {
      params_ = shard_params_;
    }
  }
}

// ---- checkpoints: one file per rank (its parameters or shard, AdamW moments), then a
// manifest written by rank 0 once every rank's file is on disk ----
Status Trainer::save(std::int64_t step) {
  std::error_code ec;
  std::filesystem::create_directories(o_.checkpoint_dir, ec);
  const std::vector<float>& p = o_.strategy == Strategy::ddp ? params_ : shard_params_;
  std::string blob;
  auto put = [&](const std::vector<float>& v) {
    const std::uint64_t n = v.size();
    blob.append(reinterpret_cast<const char*>(&n), sizeof(n));
    blob.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  };
  put(p);
  put(m_);
  put(v_);
  const Status s =
      write_file_atomic(fmt::format("{}/step{}.rank{}.bin", o_.checkpoint_dir, step, me_), blob);
  int ok = s.ok() ? 1 : 0, all = 0;
  collective(
      CommOp{"checkpoint_barrier", Collective::all_reduce, 0, 1, kNoLayer},
      [&] { CS_MPI_CHECK(MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm_)); }, true);
  stream_.drain();
  if (!s.ok()) return s;
  if (!all) return Error{"--checkpoint: another rank could not write its checkpoint file"};
  if (me_ == 0) {
    nlohmann::json j = {{"step", step},
                        {"ranks", n_},
                        {"strategy", to_string(o_.strategy)},
                        {"seed", o_.seed},
                        {"data_position", step * accum_ * n_ * o_.micro_batch},
                        {"layers", o_.model.layers},
                        {"hidden", o_.model.hidden},
                        {"heads", o_.model.heads},
                        {"vocab", o_.model.vocab},
                        {"seq", o_.model.seq},
                        {"global_batch", accum_ * n_ * o_.micro_batch}};
    CS_RETURN_IF_ERROR(write_file_atomic(o_.checkpoint_dir + "/latest.json", j.dump(2) + "\n"));
  }
  return ok_status();
}

Result<std::int64_t> Trainer::load() {
  const std::string manifest = o_.checkpoint_dir + "/latest.json";
  std::ifstream f(manifest);
  if (!f) return Error{fmt::format("--resume: {}: no checkpoint there", manifest)};
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (j.is_discarded() || !j.contains("step"))
    return Error{fmt::format("--resume: {}: not a commscope checkpoint manifest", manifest)};
  auto same = [&](const char* key, auto value) -> Status {
    if (!j.contains(key) || j[key] != value)
      return Error{fmt::format("--resume: {}: {} is {}, this run has {}", manifest, key,
                               j.value(key, nlohmann::json()).dump(),
                               nlohmann::json(value).dump())};
    return ok_status();
  };
  CS_RETURN_IF_ERROR(same("ranks", n_));
  CS_RETURN_IF_ERROR(same("strategy", std::string(to_string(o_.strategy))));
  CS_RETURN_IF_ERROR(same("seed", o_.seed));
  CS_RETURN_IF_ERROR(same("layers", o_.model.layers));
  CS_RETURN_IF_ERROR(same("hidden", o_.model.hidden));
  CS_RETURN_IF_ERROR(same("vocab", o_.model.vocab));
  CS_RETURN_IF_ERROR(same("seq", o_.model.seq));
  CS_RETURN_IF_ERROR(same("global_batch", accum_ * n_ * o_.micro_batch));
  const std::int64_t step = j["step"].get<std::int64_t>();
  const std::string path = fmt::format("{}/step{}.rank{}.bin", o_.checkpoint_dir, step, me_);
  std::ifstream b(path, std::ios::binary);
  std::vector<float>& p = o_.strategy == Strategy::ddp ? params_ : shard_params_;
  for (std::vector<float>* v : {&p, &m_, &v_}) {
    std::uint64_t n = 0;
    b.read(reinterpret_cast<char*>(&n), sizeof(n));
    if (!b || n != v->size())
      return Error{fmt::format("--resume: {}: truncated or from another model", path)};
    b.read(reinterpret_cast<char*>(v->data()), static_cast<std::streamsize>(n * sizeof(float)));
    if (!b) return Error{fmt::format("--resume: {}: truncated", path)};
  }
  return step;
}

// Data, the communication plan, the parameters (all of them, or this rank's partition) and
// AdamW's moments. False after printing the error.
bool Trainer::setup() {
  set_threads(o_.threads);
  model_ = std::make_unique<Gpt>(o_.model, o_.micro_batch);
  if (o_.data.empty()) {
    data_ = std::make_unique<TokenSource>(TokenSource::synthetic(o_.model.vocab, o_.seed));
  } else {
    auto d = TokenSource::text_file(o_.data, o_.model.vocab, o_.model.seq);
    if (!agree(d.ok())) {  // each rank reads the file: a rank that cannot must stop them all
      if (!d.ok() && (me_ == 0 || agree_first_failure_))
        std::fprintf(stderr, "commscope: %s\n", d.error().message.c_str());
      return false;
    }
    data_ = std::make_unique<TokenSource>(std::move(d).value());
  }
  if (Status s = plan(); !s.ok()) {
    if (me_ == 0) std::fprintf(stderr, "commscope: %s\n", s.error().message.c_str());
    return false;
  }
  const ParamLayout& layout = model_->layout();
  const std::int64_t total = layout.total();
  std::vector<float> full(static_cast<std::size_t>(total));
  init_params(layout, full.data(), o_.seed);  // every rank the same: deterministic from the seed
  // DDP and ZeRO-1 accumulate gradients in a full-size buffer; ZeRO-2/3 only in their shard.
  if (o_.strategy == Strategy::ddp || o_.strategy == Strategy::zero1)
    grads_.assign(static_cast<std::size_t>(total), 0.0f);
  const bool sharded = o_.strategy != Strategy::ddp;
  const std::int64_t own = sharded ? part_.hi(me_) - part_.lo(me_) : total;
  if (sharded) {
    shard_params_.assign(full.begin() + part_.lo(me_), full.begin() + part_.hi(me_));
    shard_grads_.assign(static_cast<std::size_t>(own), 0.0f);
  }
  if (o_.strategy != Strategy::zero3) params_ = full;  // ZeRO-3 gathers module by module
  full.clear();
  full.shrink_to_fit();
  m_.assign(static_cast<std::size_t>(own), 0.0f);
  v_.assign(static_cast<std::size_t>(own), 0.0f);

  return true;
}

// --resume: this rank's checkpoint, agreed on by every rank. False after printing the error.
bool Trainer::resume() {
  if (!o_.resume) return true;
  auto s = load();
  // Every rank reads its own file: they agree on the outcome before any collective, so that
  // one rank's bad file ends the whole job instead of leaving the others waiting.
  if (!agree(s.ok())) {
    if (!s.ok() && agree_first_failure_)  // one line, from the first rank that failed
      std::fprintf(stderr, "commscope: %s\n", s.error().message.c_str());
    return false;
  }
  start_ = *s;
  if (o_.strategy == Strategy::zero1 || o_.strategy == Strategy::zero2) {
    // parameters are rebuilt from the shards, as after an optimizer step
    // Outside the iterations, so outside the workload's accounting.
    for (const CommOp& op : step_ag_) all_gather_params(op, true);
    if (n_ == 1) params_ = shard_params_;
    stream_.drain();
  }
  return true;
}

// The steps, each recorded as a row: loss, time and the breakdown of its events.
Status Trainer::train() {
  const std::int64_t global = accum_ * n_ * o_.micro_batch;
  const double tokens_per_step = tokens_per_step_();
  const double flops = flops_per_step_();
  CS_MPI_CHECK(MPI_Barrier(comm_));
  t0_ = Gpt::now();
  for (std::int64_t step = start_ + 1; step <= o_.steps; ++step) {
    if (me_ == o_.kill_rank && step == o_.kill_step) ::raise(SIGKILL);
    const double ts = Gpt::now() - t0_;
    const std::size_t first_compute = compute_events_.size(), first_comm = comm_events_.size();
    double loss_sum = 0;
    for (std::int64_t k = 0; k < accum_; ++k) {
      microbatch_ = static_cast<std::int32_t>(k);
      // The global batch of step s (G sequences) is [(s-1) G, s G); micro-batch k of rank r takes
      // its b sequences at k (b n) + r b: the same sequences whatever the rank count.
      const std::int64_t first = (step - 1) * global + k * o_.micro_batch * n_ +
                                 static_cast<std::int64_t>(me_) * o_.micro_batch;
      loss_sum += micro_step(first, k == accum_ - 1);
    }
    double norm = 0;
    optimizer_step(step, &norm);
    double loss_all = 0;
    collective(
        CommOp{"loss_all_reduce", Collective::all_reduce, 0, 2, kNoLayer},
        [&] { CS_MPI_CHECK(MPI_Allreduce(&loss_sum, &loss_all, 1, MPI_DOUBLE, MPI_SUM, comm_)); },
        true);
    stream_.drain();
    const double te = Gpt::now() - t0_;
    // This step's events: both lists grow in time order.
    std::vector<Event> evs(compute_events_.begin() + static_cast<std::ptrdiff_t>(first_compute),
                           compute_events_.end());
    evs.insert(evs.end(), comm_events_.begin() + static_cast<std::ptrdiff_t>(first_comm),
               comm_events_.end());
    rows_.push_back(
        {step, loss_all / static_cast<double>(accum_ * n_), te - ts, norm, breakdown(evs, ts, te)});
    if (me_ == 0 && o_.format == "table")
      std::printf("%6lld %10.6f %10.2f %10.0f %9.2f %9.2f %9.2f %9.2f %9.2f\n",
                  static_cast<long long>(step), rows_.back().loss, (te - ts) * 1e3,
                  tokens_per_step / (te - ts), flops / (te - ts) / 1e9,
                  rows_.back().br.compute * 1e3, rows_.back().br.overlapped * 1e3,
                  rows_.back().br.exposed * 1e3, rows_.back().br.idle * 1e3);
    std::fflush(stdout);
    if (o_.checkpoint_every > 0 && step % o_.checkpoint_every == 0) {
      CS_RETURN_IF_ERROR(save(step));
    }
  }
  stream_.drain();

  return ok_status();
}

// --trace: this rank's timeline as a Chrome trace.
void Trainer::write_trace() const {
  if (o_.trace_dir.empty()) return;
  Timeline t = tl_;
  t.events = compute_events_;
  t.events.insert(t.events.end(), comm_events_.begin(), comm_events_.end());
  t.rank_names[me_] = fmt::format("rank {}", me_);
  t.stream_names[{me_, 0}] = "compute";
  t.stream_names[{me_, 1}] = "communication";
  std::error_code ec;
  std::filesystem::create_directories(o_.trace_dir, ec);
  const Status s =
      write_file_atomic(fmt::format("{}/rank{}.json", o_.trace_dir, me_), chrome_trace_json(t));
  if (!s.ok()) std::fprintf(stderr, "commscope: rank %d: %s\n", me_, s.error().message.c_str());
}

// This rank's breakdown and step time averaged over the steps after the warm-up (all steps
// when there are no more).
void Trainer::averages(Breakdown* avg, double* time) const {
  const auto iterations = static_cast<std::int64_t>(rows_.size());
  int counted = 0;
  for (const StepRow& r : rows_)
    if (r.step > start_ + o_.warmup || iterations <= o_.warmup) {
      avg->add(r.br);
      *time += r.seconds;
      ++counted;
    }
  if (counted > 0) {
    avg->scale(1.0 / counted);
    *time /= counted;
  }
}

// Every rank's averages, to rank 0 (the stream is idle: a plain collective).
void Trainer::gather_ranks() {
  Breakdown avg;
  double time = 0;
  averages(&avg, &time);
  const double mine[6] = {time, avg.compute, avg.overlapped, avg.exposed, avg.idle, avg.comm};
  std::vector<double> all(static_cast<std::size_t>(6 * n_));
  CS_MPI_CHECK(MPI_Gather(mine, 6, MPI_DOUBLE, all.data(), 6, MPI_DOUBLE, 0, comm_));
  if (me_ != 0) return;
  for (int r = 0; r < n_; ++r) {
    const double* x = all.data() + 6 * r;
    per_rank_.push_back({{"rank", r},
                         {"time_s", x[0]},
                         {"compute_s", x[1]},
                         {"overlapped_comm_s", x[2]},
                         {"exposed_comm_s", x[3]},
                         {"idle_s", x[4]},
                         {"comm_s", x[5]}});
  }
}

// Rank 0: the averages after warm-up, the communication against the workload; table or json.
int Trainer::report() const {
  const std::int64_t total = model_->layout().total();
  const std::int64_t global = accum_ * n_ * o_.micro_batch;
  const double tokens_per_step = tokens_per_step_();
  const double flops = flops_per_step_();
  const std::int64_t iterations = static_cast<std::int64_t>(rows_.size());
  Breakdown avg;
  double avg_time = 0;
  averages(&avg, &avg_time);

  nlohmann::json comm = nlohmann::json::array();
  bool match = true;
  std::map<std::pair<CommGroup, Collective>, const CommVolume*> exp;
  for (const CommVolume& v : expected_) exp[{v.group, v.collective}] = &v;
  std::set<std::pair<CommGroup, Collective>> keys;
  for (auto& [k, v] : measured_) keys.insert(k);
  for (auto& [k, v] : exp) keys.insert(k);
  for (const auto& k : keys) {
    const auto it = measured_.find(k);
    const double calls =
        it == measured_.end() ? 0 : static_cast<double>(it->second.first) / iterations;
    const double bytes =
        it == measured_.end() ? 0 : it->second.second / static_cast<double>(iterations);
    const CommVolume* e = exp.count(k) ? exp[k] : nullptr;
    const double ecalls = e ? static_cast<double>(e->calls) : 0, ebytes = e ? e->bytes : 0;
    match = match && calls == ecalls && bytes == ebytes;
    comm.push_back({{"group", to_string(k.first)},
                    {"collective", to_string(k.second)},
                    {"calls_per_iteration", calls},
                    {"bytes_per_iteration", bytes},
                    {"workload_calls", ecalls},
                    {"workload_bytes", ebytes}});
  }
  auto br_json = [](const Breakdown& b) {
    return nlohmann::json{{"wall_s", b.wall},
                          {"compute_s", b.compute},
                          {"comm_s", b.comm},
                          {"overlapped_comm_s", b.overlapped},
                          {"exposed_comm_s", b.exposed},
                          {"idle_s", b.idle}};
  };
  {
    nlohmann::json steps = nlohmann::json::array();
    for (const StepRow& r : rows_)
      steps.push_back({{"step", r.step},
                       {"loss", r.loss},
                       {"grad_norm", r.grad_norm},
                       {"time_s", r.seconds},
                       {"tokens_per_s", tokens_per_step / r.seconds},
                       {"gflops", flops / r.seconds / 1e9},
                       {"breakdown", br_json(r.br)}});
    nlohmann::json j = {{"model",
                         {{"name", o_.model_name},
                          {"layers", o_.model.layers},
                          {"hidden", o_.model.hidden},
                          {"heads", o_.model.heads},
                          {"vocab", o_.model.vocab},
                          {"seq", o_.model.seq},
                          {"parameters", total}}},
                        {"strategy", to_string(o_.strategy)},
                        {"ranks", n_},
                        {"micro_batch", o_.micro_batch},
                        {"grad_accum", accum_},
                        {"global_batch", global},
                        {"data", data_->describe()},
                        {"steps", steps},
                        {"average",
                         {{"after_warmup_steps", o_.warmup},
                          {"time_s", avg_time},
                          {"tokens_per_s", avg_time > 0 ? tokens_per_step / avg_time : 0},
                          {"gflops", avg_time > 0 ? flops / avg_time / 1e9 : 0},
                          {"comm_share", avg.wall > 0 ? avg.comm / avg.wall : 0},
                          {"breakdown", br_json(avg)}}},
                        {"communication", comm},
                        {"communication_matches_workload", match},
                        {"memory_per_rank_bytes", memory_json()},
                        {"per_rank", per_rank_}};
    if (o_.format == "json") std::printf("%s\n", j.dump(2).c_str());
    if (!o_.summary_file.empty()) {
      const Status s = write_file_atomic(o_.summary_file, j.dump(2) + "\n");
      if (!s.ok()) std::fprintf(stderr, "commscope: %s\n", s.error().message.c_str());
    }
  }
  if (o_.format == "table") {
    std::printf(
        "# average after %d warm-up steps: %.2f ms/step, %.0f tokens/s, %.2f GFLOP/s (all ranks), "
        "compute %.2f ms, communication %.2f ms (overlapped %.2f, exposed %.2f), idle %.2f ms\n",
        o_.warmup, avg_time * 1e3, avg_time > 0 ? tokens_per_step / avg_time : 0,
        avg_time > 0 ? flops / avg_time / 1e9 : 0, avg.compute * 1e3, avg.comm * 1e3,
        avg.overlapped * 1e3, avg.exposed * 1e3, avg.idle * 1e3);
    std::printf("# per rank, averages after warm-up (ms):\n#   %4s %9s %9s %9s %9s %9s\n", "rank",
                "step", "compute", "ovl_comm", "exp_comm", "idle");
    for (const auto& r : per_rank_)
      std::printf("#   %4d %9.2f %9.2f %9.2f %9.2f %9.2f\n", r["rank"].get<int>(),
                  r["time_s"].get<double>() * 1e3, r["compute_s"].get<double>() * 1e3,
                  r["overlapped_comm_s"].get<double>() * 1e3,
                  r["exposed_comm_s"].get<double>() * 1e3, r["idle_s"].get<double>() * 1e3);
    const auto mem = memory_json();
    std::printf(
        "# state held per rank (rank 0): parameters %.1f MB, gradients %.1f MB, optimizer %.1f MB; "
        "peak resident %.1f MB\n",
        mem["parameters"].get<double>() / 1e6, mem["gradients"].get<double>() / 1e6,
        mem["optimizer_state"].get<double>() / 1e6, mem["peak_resident"].get<double>() / 1e6);
    std::printf("# communication per iteration, rank 0, measured vs the workload (describe):\n");
    std::printf("# %-8s %-15s %8s %14s %8s %14s\n", "group", "collective", "calls", "bytes",
                "w.calls", "w.bytes");
    for (const auto& c : comm)
      std::printf("# %-8s %-15s %8.0f %14.0f %8.0f %14.0f\n", c["group"].get<std::string>().c_str(),
                  c["collective"].get<std::string>().c_str(),
                  c["calls_per_iteration"].get<double>(), c["bytes_per_iteration"].get<double>(),
                  c["workload_calls"].get<double>(), c["workload_bytes"].get<double>());
    std::printf("# %s\n", match ? "measured communication equals the workload's, byte for byte"
                                : "MISMATCH: measured communication differs from the workload's");
  }
  return match ? 0 : 1;
}

int Trainer::run() {
  if (!setup() || !resume()) return 2;
  model_->set_observer([this](const OpRecord& r) { record_compute(r); });
  if (Status s = train(); !s.ok()) {
    std::fprintf(stderr, "commscope: rank %d: %s\n", me_, s.error().message.c_str());
    return 2;
  }
  write_trace();
  gather_ranks();
  return me_ == 0 ? report() : 0;
}

}  // namespace

int run_training(const TrainOptions& o, MPI_Comm comm) {
  int me = 0, n = 1;
  MPI_Comm_rank(comm, &me);
  MPI_Comm_size(comm, &n);
  if (Status s = validate(o, n); !s.ok()) {
    if (me == 0) std::fprintf(stderr, "commscope: %s\n", s.error().message.c_str());
    return 2;
  }
  Trainer t(o, comm);
  if (me == 0 && o.format == "table") {
    const std::int64_t g =
        o.global_batch ? o.global_batch : static_cast<std::int64_t>(o.micro_batch) * n;
    std::printf(
        "# commscope train: %s (layers %d, hidden %d, heads %d, vocab %d, seq %d), %s over %d "
        "ranks, global batch %lld (micro-batch %d x %lld accumulation x %d ranks)\n",
        o.model_name.c_str(), o.model.layers, o.model.hidden, o.model.heads, o.model.vocab,
        o.model.seq, std::string(to_string(o.strategy)).c_str(), n, static_cast<long long>(g),
        o.micro_batch, static_cast<long long>(g / (static_cast<std::int64_t>(o.micro_batch) * n)),
        n);
    std::printf("%6s %10s %10s %10s %9s %9s %9s %9s %9s\n", "step", "loss", "time_ms", "tokens/s",
                "GFLOP/s", "comp_ms", "ovl_ms", "exp_ms", "idle_ms");
  }
  return t.run();
}

}  // namespace commscope::train
