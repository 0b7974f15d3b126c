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
#include <numeric>
#include <set>
#include <thread>
#include <type_traits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "comm_stream.h"
#include "commscope/comm/collectives.h"
#include "commscope/comm/mpi.h"
#include "commscope/gpt/data.h"
#include "commscope/gpt/kernels.h"
#include "commscope/gpt/optim.h"
#include "commscope/spec/scenario.h"
#include "commscope/timeline/timeline.h"
#include "commscope/train/checkpoint.h"
#include "commscope/train/sharding.h"
#include "commscope/util/atomic_file.h"
#include "commscope/workload/workload.h"
#include "pipeline.h"
#include "report.h"

namespace commscope::train {

namespace {

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
  // outside_workload: a collective the workload does not model (the loss scalar, checkpoint
  // agreement, the re-gather after a resume): timed, not counted.
  std::uint64_t collective(const CommOp& op, std::function<void()> call,
                           bool outside_workload = false);
  std::uint64_t all_reduce_grads(const CommOp& op);
  // The gradient reductions' wire format (--grad-comm-dtype).
  comm::Wire wire() const {
    if (!o_.grad_comm_dtype) return comm::Wire::fp32;
    return *o_.grad_comm_dtype == DType::bf16   ? comm::Wire::bf16
           : *o_.grad_comm_dtype == DType::fp16 ? comm::Wire::fp16
                                                : comm::Wire::fp32;
  }
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
  void gather_ranks();
  void attribute_waits(std::size_t first);
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

  std::vector<StepRow> rows_;
  std::int64_t start_ = 0;  // the step a resumed run continues after

  const TrainOptions& o_;
  MPI_Comm comm_;
  int me_ = 0, n_ = 1;
  std::int64_t accum_ = 1;
  std::unique_ptr<Gpt> model_;
  std::unique_ptr<TokenSource> data_;
  Sharding sh_;  // the buckets and partitions, from the workload (plan())
  const Partition& part_ = sh_.part;
  // The full parameters (not ZeRO-3, which gathers module by module) and the full gradients
  // (DDP and ZeRO-1 only).
  std::vector<float> params_, grads_;
  std::vector<float> shard_params_, shard_grads_, m_, v_;
  CommStream stream_;
  Timeline tl_;
  std::vector<Event> compute_events_, comm_events_;  // main thread, stream thread
  MeasuredComm measured_;
  std::vector<CommVolume> expected_;
  double t0_ = 0;
  std::int32_t microbatch_ = 0;
  std::int64_t buckets_during_backward_ = 0;  // this step's (StepRow)
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
    e.bytes = static_cast<double>(op.elements) * op.element_bytes;
    comm_events_.push_back(e);
    if (!outside_workload) {
      CommCount& m = measured_[{CommGroup::data, op.collective}];
      m.calls += 1;
      m.bytes += e.bytes;
      m.messages += 1;
    }
  });
}

std::uint64_t Trainer::all_reduce_grads(const CommOp& op) {
  float* p = grads_.data() + op.offset;
  const int count = static_cast<int>(op.elements);
  const comm::Wire w = wire();
  return collective(op, [this, p, count, w] {
    if (w != comm::Wire::fp32)
      comm::all_reduce_sum(p, p, count, w, comm_);  // --grad-comm-dtype bf16|fp16
    else
      comm::all_reduce(MPI_IN_PLACE, p, count, MPI_FLOAT, MPI_SUM, comm_);
  });
}

std::uint64_t Trainer::reduce_scatter_grads(const CommOp& op, const float* src,
                                            std::shared_ptr<const std::vector<float>> keep) {
  const comm::Wire w = wire();
  return collective(op, [this, op, src, w, keep = std::move(keep)] {
    const Partition::Pieces p = part_.pieces(op.offset, op.elements);
    const int mine = p.counts[static_cast<std::size_t>(me_)];
    std::vector<float> out(static_cast<std::size_t>(std::max(mine, 1)));
    if (w != comm::Wire::fp32)
      comm::reduce_scatter_sum(src, out.data(), p.counts, w, comm_);  // --grad-comm-dtype
    else
      comm::reduce_scatter(src, out.data(), p.counts, MPI_FLOAT, MPI_SUM, comm_);
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
    if (sh_.buckets.empty()) {
      float* dst = shard_grads_.data() + g.range.offset;
      for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
      return;
    }
    const CommOp& op = sh_.buckets[bucket];
    if (!open) open = std::make_shared<std::vector<float>>(static_cast<std::size_t>(op.elements));
    std::copy(src, src + n, open->data() + (g.range.offset - op.offset));
    completed += g.range.size;
    if (completed >= sh_.bucket_end(bucket)) {
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
        comm::all_gather(shard_params_.data() + part_.in_shard(me_, op.offset), dst, p.counts,
                         p.displs, MPI_FLOAT, comm_);
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
  accum_ = global_batch(o_, world) / (static_cast<std::int64_t>(o_.micro_batch) * world);
  // The workload of the same model and plan, resolved on the CPU host as `commscope describe
  // --system cpu-host` resolves it: the single source of the communication.
  CS_ASSIGN_OR_RETURN(Scenario sc, train_scenario(o_, world));
  const Workload w = build_workload(sc);
  if (w.roles.size() != 1) return Error{"internal: the trainer's workload has several roles"};
  expected_ = comm_volume(w, w.roles[0]);
  const ParamLayout& layout = model_->layout();
  CS_ASSIGN_OR_RETURN(sh_, Sharding::build(w, layout, o_.strategy, n_));
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
    const bool more_to_compute = completed < static_cast<std::int64_t>(grads_.size());
    while (bucket < sh_.buckets.size() && sh_.bucket_end(bucket) <= completed) {
      all_reduce_grads(sh_.buckets[bucket++]);
      if (more_to_compute) ++buckets_during_backward_;
    }
  });
  stream_.drain();
  return loss;
}

void Trainer::optimizer_step(std::int64_t step, double* grad_norm) {
  const float scale = 1.0f / static_cast<float>(accum_ * n_);  // mean over the global batch
  AdamW h;
  h.lr = static_cast<float>(o_.lr);
  const bool sharded = sh_.shards_optimizer();
  if (o_.strategy == Strategy::zero1 && n_ > 1)
    for (const CommOp& op : sh_.step_reduce_scatter)
      reduce_scatter_grads(op, grads_.data() + op.offset);
  stream_.drain();
  if (o_.strategy == Strategy::zero1 && n_ == 1) {
    // One rank: the shard is everything, and no collective ran to fill it.
    for (std::size_t i = 0; i < grads_.size(); ++i) shard_grads_[i] += grads_[i];
  }
  const std::vector<float>& g = sharded ? shard_grads_ : grads_;
  double sq = sum_of_squares(g.data(), static_cast<std::int64_t>(g.size()));
  if (sharded && n_ > 1) {  // the global norm needs every shard: one scalar all-reduce
    CommOp op{"grad_norm_all_reduce", Collective::all_reduce, 0, 2, kNoLayer};
    collective(op, [this, &sq] {
      CS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &sq, 1, MPI_DOUBLE, MPI_SUM, comm_));
    });  // in the workload (builder.cpp: grad_norm_all_reduce), so counted
    stream_.drain();
  }
  const double norm = std::sqrt(sq) * scale;
  *grad_norm = norm;
  const float k = scale * clip_factor(norm, static_cast<float>(o_.clip));
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
  if (sh_.gathers_params_after_step()) {
    if (n_ > 1) {
      for (const CommOp& op : sh_.step_all_gather) all_gather_params(op);
      stream_.drain();
    } else {
      params_ = shard_params_;
    }
  }
}

// ---- checkpoints: one file per rank (its parameters or shard, AdamW moments), then a
// manifest written by rank 0 once every rank's file is on disk ----
Status Trainer::save(std::int64_t step) {
  const std::vector<float>& p = sh_.shards_optimizer() ? shard_params_ : params_;
  const Status s = write_checkpoint(checkpoint_file(o_.checkpoint_dir, step, me_), {&p, &m_, &v_});
  int ok = s.ok() ? 1 : 0, all = 0;
  collective(
      CommOp{"checkpoint_barrier", Collective::all_reduce, 0, 1, kNoLayer},
      [&] { CS_MPI_CHECK(MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm_)); }, true);
  stream_.drain();
  if (!s.ok()) return s;
  if (!all) return Error{"--checkpoint: another rank could not write its checkpoint file"};
  if (me_ == 0) CS_RETURN_IF_ERROR(write_manifest(o_.checkpoint_dir, run_manifest(o_, n_, step)));
  return ok_status();
}

Result<std::int64_t> Trainer::load() {
  CS_ASSIGN_OR_RETURN(nlohmann::json j, read_manifest(o_.checkpoint_dir));
  const std::string where = manifest_file(o_.checkpoint_dir);
  const std::int64_t step = j["step"].get<std::int64_t>();
  CS_RETURN_IF_ERROR(check_manifest(j, o_, n_, where));
  std::vector<float>& p = sh_.shards_optimizer() ? shard_params_ : params_;
  CS_RETURN_IF_ERROR(
      read_checkpoint(checkpoint_file(o_.checkpoint_dir, step, me_), {&p, &m_, &v_}));
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
  if (!sh_.shards_gradients()) grads_.assign(static_cast<std::size_t>(total), 0.0f);
  const std::int64_t own = sh_.owned(me_);
  if (sh_.shards_optimizer()) {
    shard_params_.assign(full.begin() + part_.lo(me_), full.begin() + part_.hi(me_));
    shard_grads_.assign(static_cast<std::size_t>(own), 0.0f);
  }
  if (!sh_.shards_parameters()) params_ = full;  // ZeRO-3 gathers module by module
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
  if (sh_.gathers_params_after_step()) {
    // parameters are rebuilt from the shards, as after an optimizer step
    // Outside the iterations, so outside the workload's accounting.
    for (const CommOp& op : sh_.step_all_gather) all_gather_params(op, true);
    if (n_ == 1) params_ = shard_params_;
    stream_.drain();
  }
  return true;
}

// Each call's wait for its peers (train/report.h, attribute_waits): every rank made the same
// collectives over comm_ in the same order. The stream is drained: plain collectives.
void Trainer::attribute_waits(std::size_t first) {
  if (n_ < 2) return;
  std::vector<std::size_t> calls(comm_events_.size() - first);
  std::iota(calls.begin(), calls.end(), first);
  train::attribute_waits(comm_events_, calls, t0_, comm_);
}

// The steps, each recorded as a row: loss, time and the breakdown of its events.
Status Trainer::train() {
  const std::int64_t global = accum_ * n_ * o_.micro_batch;
  const double tokens_per_step = tokens_per_step_();
  const double flops = flops_per_step_();
  CS_MPI_CHECK(MPI_Barrier(comm_));
  t0_ = Gpt::now();
  // Rank 0 on a terminal shows its progress on stderr; nothing when stderr is a file or pipe.
  // Under mpirun stderr is a pipe: `commscope train` says (--progress) when its own is a terminal.
  const bool progress =
      me_ == 0 && o_.progress && (o_.progress_forced || ::isatty(STDERR_FILENO) == 1);
  const double t_first = 0;
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
    attribute_waits(first_comm);
    // This step's events: both lists grow in time order.
    std::vector<Event> evs(compute_events_.begin() + static_cast<std::ptrdiff_t>(first_compute),
                           compute_events_.end());
    evs.insert(evs.end(), comm_events_.begin() + static_cast<std::ptrdiff_t>(first_comm),
               comm_events_.end());
    rows_.push_back({step, loss_all / static_cast<double>(accum_ * n_), te - ts, norm,
                     breakdown(evs, ts, te), buckets_during_backward_});
    rows_.back().start_s = ts;
    buckets_during_backward_ = 0;
    if (me_ == 0 && o_.format == "table")
      std::printf("%6lld %10.6f %10.2f %10.0f %9.2f %9.2f %9.2f %9.2f %9.2f\n",
                  static_cast<long long>(step), rows_.back().loss, (te - ts) * 1e3,
                  tokens_per_step / (te - ts), flops / (te - ts) / 1e9,
                  rows_.back().br.compute * 1e3, rows_.back().br.overlapped * 1e3,
                  rows_.back().br.exposed * 1e3, rows_.back().br.idle * 1e3);
    std::fflush(stdout);
    if (progress) {  // one line, overwritten in place: step k/N, loss, ETA
      const double per_step = (te - t_first) / static_cast<double>(step - start_);
      std::fprintf(stderr, "\r\033[Kstep %lld/%d  loss %.4f  %.0f ms/step  ETA %.0f s",
                   static_cast<long long>(step), o_.steps, rows_.back().loss, per_step * 1e3,
                   per_step * static_cast<double>(o_.steps - step));
      std::fflush(stderr);
    }
    if (o_.checkpoint_every > 0 && step % o_.checkpoint_every == 0) {
      CS_RETURN_IF_ERROR(save(step));
    }
  }
  stream_.drain();
  if (progress) std::fprintf(stderr, "\r\033[K");
  return ok_status();
}

// --trace: this rank's timeline as a Chrome trace.
void Trainer::write_trace() const {
  write_rank_trace(o_.trace, me_, tl_, rows_, {&compute_events_, &comm_events_},
                   fmt::format("rank {}", me_), {"compute", "communication"});
}

void Trainer::gather_ranks() {
  per_rank_ = gather_rank_averages(comm_, me_, n_, rows_, start_, o_.warmup);
}

// Rank 0: the averages after warm-up, the communication against the workload (report.h).
int Trainer::report() const {
  RunRecord r;
  r.o = &o_;
  r.ranks = n_;
  r.accum = accum_;
  r.parameters = model_->layout().total();
  r.tokens_per_step = tokens_per_step_();
  r.flops_per_step = flops_per_step_();
  r.data = data_->describe();
  r.start = start_;
  r.rows = &rows_;
  r.measured = &measured_;
  r.expected = &expected_;
  r.memory = memory_json();
  r.per_rank = per_rank_;
  return print_report(r);
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
  // Ranks on this node: the memory check counts what they need together.
  MPI_Comm node = MPI_COMM_NULL;
  int here = n;
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
    MPI_Comm_size(node, &here);
    MPI_Comm_free(&node);
  }
  const Status s = validate(o, n, here);
  // Every rank checks (memory and folders may differ between nodes); the first that fails says
  // why, and all stop.
  int bad = s.ok() ? n : me, first = n;
  MPI_Allreduce(&bad, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first < n) {
    if (me == first) std::fprintf(stderr, "commscope: %s\n", s.error().message.c_str());
    return 2;
  }
  if (me == 0 && o.format == "table" && model_parallel(o)) {
    const int dp = data_parallel(o, n);
    const std::int64_t g = global_batch(o, n);
    // The CP form as describe's plan line names it.
    const CpForm f = cp_form(o);
    const std::string cp =
        o.cp <= 1 ? "" : fmt::format("CP {} ({}) x ", o.cp, cp_form_text(f.type, o.cp, f.a2a));
    // How TP's collectives run, as the JSON's parallel object says.
    const std::string tp = o.tp > 1 && o.sequence_parallel ? " (sequence parallel)"
                           : async_tp_all_reduce(o)        ? " (asynchronous all-reduce)"
                                                           : "";
    std::printf(
        "# commscope train: %s (layers %d, hidden %d, heads %d, vocab %d, seq %d), TP %d%s x %sPP "
        "%d x DP %d over %d ranks (%s), global batch %lld (micro-batch %d x %lld micro-batches x "
        "%d data-parallel ranks)\n",
        o.model_name.c_str(), o.model.layers, o.model.hidden, o.model.heads, o.model.vocab,
        o.model.seq, o.tp, tp.c_str(), cp.c_str(), o.pp, dp, n,
        std::string(to_string(o.rank_order)).c_str(), static_cast<long long>(g), o.micro_batch,
        static_cast<long long>(g / (static_cast<std::int64_t>(o.micro_batch) * dp)), dp);
    std::printf("%6s %10s %10s %10s %9s %9s %9s %9s %9s\n", "step", "loss", "time_ms", "tokens/s",
                "GFLOP/s", "comp_ms", "ovl_ms", "exp_ms", "idle_ms");
  }
  if (model_parallel(o)) return run_pipeline_training(o, comm);
  Trainer t(o, comm);
  if (me == 0 && o.format == "table") {
    const std::int64_t g = global_batch(o, n);
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
