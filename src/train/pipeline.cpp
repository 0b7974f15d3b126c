// The model-parallel trainer (Megatron's tensor, pipeline and data parallelism over MPI): each
// rank holds a tensor-parallel shard (gpt/parallel.h) of its pipeline stage's chunks, runs the
// plan's schedule (sim/simulator.h's pipeline_order: GPipe, 1F1B, interleaved 1F1B), sends
// activations and gradients to the neighbouring stages, all-reduces within its tensor-parallel
// group, all-reduces DDP buckets over its data-parallel group and the tied embedding's gradient
// between the first and last stages. Its communication is the workload's for its stage
// (build_workload, comm_volume), checked every run on every rank.
#include "pipeline.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "comm_stream.h"
#include "commscope/comm/collectives.h"
#include "commscope/comm/mpi.h"
#include "commscope/comm/partition.h"
#include "commscope/gpt/data.h"
#include "commscope/gpt/kernels.h"
#include "commscope/gpt/optim.h"
#include "commscope/gpt/parallel.h"
#include "commscope/gpt/t5.h"
#include "commscope/sim/simulator.h"
#include "commscope/timeline/timeline.h"
#include "commscope/train/checkpoint.h"
#include "commscope/train/sharding.h"
#include "commscope/util/atomic_file.h"
#include "commscope/workload/workload.h"
#include "report.h"

namespace commscope::train {

Grid Grid::of(const TrainOptions& o, int world, int rank) {
  Grid g;
  g.tp = o.tp;
  g.pp = o.pp;
  g.cp = std::max(o.cp, 1);
  g.ep = std::max(o.ep, 1);
  g.dp = world / (o.tp * o.pp * g.cp);
  g.t = rank % g.tp;
  // Context-parallel ranks next to the tensor-parallel ones (Megatron's tp-cp-ep-dp-pp).
  g.c = (rank / g.tp) % g.cp;
  const int rest = rank / (g.tp * g.cp);
  if (o.rank_order ==
      RankOrder::tp_dp_pp) {  // Megatron's default: rank = t + TP (c + CP (d + DP p))
    g.d = rest % g.dp;
    g.p = rest / g.dp;
  } else {  // tp-pp-dp: rank = t + TP (c + CP (p + PP d))
    g.p = rest % g.pp;
    g.d = rest / g.pp;
  }
  return g;
}

namespace {

// The most micro-batches of chunk c whose forward has run and backward not yet, in `order`.
int max_in_flight(const std::vector<PipelineTask>& order, int c) {
  int open = 0, most = 1;
  for (const PipelineTask& t : order)
    if (t.chunk == c) most = std::max(most, open += t.backward ? -1 : 1);
  return most;
}

// One micro-batch through this stage's side of T5: the whole model (PP 1), the encoder (its
// output is the boundary tensor, B Te h) or the decoder (reads the encoder stage's output).
float t5_forward(T5<float>& t5, const float* params, const float* encoder_output,
                 const T5Batch& batch) {
  switch (t5.layout().part()) {
    case T5Part::whole:
      return t5.forward(params, batch.encoder_tokens.data(), batch.decoder_tokens.data(),
                        batch.targets.data());
    case T5Part::encoder:
      t5.forward_encoder(params, batch.encoder_tokens.data());
      return 0.0f;
    case T5Part::decoder:
      return t5.forward_decoder(params, encoder_output, batch.decoder_tokens.data(),
                                batch.targets.data());
  }
  return 0.0f;
}

// Its backward (accumulating into grads); the gradient to send back (the decoder's, of the
// encoder output) or null.
const float* t5_backward(T5<float>& t5, const float* params, float* grads, const float* d_output) {
  switch (t5.layout().part()) {
    case T5Part::whole:
      t5.backward(params, grads);
      return nullptr;
    case T5Part::encoder:
      t5.backward_encoder(params, grads, d_output);
      return nullptr;
    case T5Part::decoder:
      t5.backward_decoder(params, grads);
      return t5.encoder_output_grad();
  }
  return nullptr;
}

// Matrix-product FLOPs of one forward + backward (3x the forward) of the whole T5 for `batch`
// sequences: per encoder block its projections (4h^2 + 2hf per token) and attention (2 Te^2 h
// multiply-adds per sequence); per decoder block self-attention's and the MLP's projections
// (h^2 (4 + 1 + 1) + 2hf per decoder token: qkv, out, cross q, cross out), cross_kv over the
// encoder tokens (2h^2), attention over Td and Te keys; the LM head (h V per decoder token).
double t5_matmul_flops(const T5Config& c, int batch) {
  const double h = c.hidden, f = c.ffn, v = c.vocab, te = c.encoder_seq, td = c.decoder_seq;
  const double enc = te * (4 * h * h + 2 * h * f) + 2 * te * te * h;
  const double dec =
      td * (6 * h * h + 2 * h * f) + te * 2 * h * h + 2 * td * td * h + 2 * td * te * h;
  const double fwd = 2 * (c.encoder_layers * enc + c.decoder_layers * dec + td * h * v);
  return 3 * fwd * batch;
}

// One model chunk of this rank: its shard of the model, its parameters, gradients and AdamW
// moments, and its DDP buckets (ranges of its buffer, in backward order).
struct ChunkState {
  int virtual_stage = 0;
  std::unique_ptr<GptShard> model;
  // T5 (o.t5): one model per activation slot (T5<T> holds one micro-batch's activations), its
  // side of the encoder/decoder split; `model` is null then.
  std::vector<std::unique_ptr<T5<float>>> t5;
  // What the schedule and the optimizer need of either model: its stage spec (layers, whether
  // it embeds, whether it has the head), the boundary tensor's elements, the buffer's size, the
  // word embedding (first stage) and its tied copy (last stage), the tensors every tensor rank
  // holds whole.
  ShardSpec spec;
  std::int64_t activation_elements = 0, total = 0;
  Range word_embedding, head_copy;
  std::vector<Range> replicated;
  // Under sequence parallelism: the tensors whose gradients are sums over this rank's tokens
  // only (norms, row-parallel biases), all-reduced over the group once per step.
  std::vector<Range> sp_partial;
  std::vector<float> params, grads, m, v;
  struct Bucket {
    std::int64_t offset, elements;
    bool expert = false;  // an expert-gradient bucket (over the expert-data-parallel group)
  };
  std::vector<Bucket> buckets;
  Range experts;             // the experts' part of the buffer (a model with experts)
  int last_backward_mb = 0;  // the micro-batch whose backward issues the buckets
  // Activation slots: as many as the schedule has micro-batches in flight on this chunk; a
  // forward takes a free one, its backward gives it back.
  std::vector<int> free_slots;
  std::map<int, int> slot_of;  // micro-batch -> slot
};

class PipelineTrainer {
 public:
  PipelineTrainer(const TrainOptions& o, MPI_Comm comm) : o_(o), world_(comm) {
    MPI_Comm_rank(comm, &me_);
    MPI_Comm_size(comm, &n_);
    g_ = Grid::of(o, n_, me_);
    v_ = o.vpp;
  }
  ~PipelineTrainer() {
    for (MPI_Comm* c : {&tp_comm_, &dp_comm_, &pp_comm_, &emb_comm_, &mp_comm_, &cp_comm_,
                        &cp_a2a_comm_, &cp_ring_comm_, &ep_comm_, &edp_comm_})
      if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
  }
  int run();

 private:
  bool setup();
  // T5: this stage's side of the encoder/decoder split (whole under PP 1), one model per slot.
  bool setup_t5_chunk(const Chunk& wc, int slots);
  std::function<void(float*, std::int64_t, bool, std::string_view, int)> tp_all_reduce();
  // An all-gather / reduce-scatter of equal shards over a group: sequence parallelism's over
  // the tensor group (GPT and T5), context parallelism's K,V all-gather and dK,dV
  // reduce-scatter over the CP group.
  GptShard::SequenceComm gather_scatter(CommGroup group, int size, const MPI_Comm* comm);
  GptShard::SequenceComm sequence_comm() {
    return gather_scatter(CommGroup::tensor, g_.tp, &tp_comm_);
  }
  // The same started on the communication stream, awaited when the shard calls the wait it
  // returns (Megatron-Core's asynchronous TP communication, GptShard::column_backward).
  GptShard::StartSequence gather_scatter_start(CommGroup group, int size, const MPI_Comm* comm);
  GptShard::StartAllReduce tp_all_reduce_start();
  std::uint64_t submit_tp_all_reduce(float* data, std::int64_t n, bool max, std::string_view name,
                                     int layer);
  GptShard::SequenceComm context_comm() {
    return gather_scatter(CommGroup::context, g_.cp, &cp_comm_);
  }
  // Ring CP's steps over the CP group (hierarchical CP: over the ring level, cp_ring_comm_): a
  // send to the next member and a receive from the previous one, started on the communication
  // stream so that it overlaps the block the shard computes meanwhile; a pass (its first step)
  // counts as one call of the workload's op.
  GptShard::RingComm context_ring();
  // All-to-all CP's exchanges over the CP group (hierarchical CP: over the all-to-all level,
  // cp_a2a_comm_), MPI_Alltoall of equal blocks, counted as the send buffer, as the workload
  // counts them.
  GptShard::AllToAllComm context_a2a();
  // Expert parallelism's all-to-allvs over the EP group (each counted as this rank's own
  // tokens' rows: the dispatch's and the combine backward's sends, the combine's and the
  // dispatch backward's receives) and the routing counts before a dispatch (outside the
  // workload's collectives).
  void set_expert_comm(GptShard& m);
  double matmul_flops() const {
    return o_.t5 ? t5_matmul_flops(*o_.t5, o_.micro_batch)
                 : gpt_matmul_flops(o_.model, o_.micro_batch);
  }
  // T5's compute in the timeline: each of its timed kernels as an event of its own (T5's
  // observer: the matrix products, attentions, RMSNorms, ReLUs), and the untimed work between
  // them (embedding lookups, residual adds, the cross-entropy, scaling) and up to each of its
  // collectives as t5_forward / t5_backward events with the stage's first block as layer, so
  // that the events tile the pass as GPT-2's do.
  void t5_compute_segment();
  void record_t5_kernel(const OpRecord& r);
  template <class F>
  float t5_timed(bool backward, int layer, F&& f) {
    t5_segment_ = backward ? "t5_backward" : "t5_forward";
    t5_segment_layer_ = layer;
    t5_segment_backward_ = backward;
    t5_segment_start_ = Gpt::now();
    const float r = f();
    t5_compute_segment();
    t5_segment_ = nullptr;
    return r;
  }
  const char* t5_segment_ = nullptr;
  int t5_segment_layer_ = 0;
  bool t5_segment_backward_ = false;
  double t5_segment_start_ = 0;
  bool resume();
  Status train();
  void run_schedule(std::int64_t step, double* loss_sum);
  // A model with experts: the step's routing and load-balancing loss (StepRow::moe_*), from
  // every chunk's counts summed over the EP group (outside the workload, like the gradient
  // norm's all-reduce), averaged over the ranks.
  void moe_routing(StepRow& row);
  float clip_scale(double sq, double* grad_norm);
  void optimizer_step(std::int64_t step, double* grad_norm);
  // ZeRO-1 over the data-parallel group (dp > 1): the step after the model-parallel reductions.
  // Also ZeRO-2/3's step (zero23_), whose gradients are already reduce-scattered in backward.
  void zero1_step(std::int64_t step, double* grad_norm);
  // ZeRO-2/3 over the data-parallel group (pp = 1, dp > 1; zero_setup). Backward: one bucket's
  // gradients copied out of the working buffer (then zeroed there) and reduce-scattered onto
  // the ranks' gradient shards, every micro-batch (the workload's zero_grad_bucket).
  bool zero_setup(const Role& role);
  void zero_grad_bucket(ChunkState& ch, std::int64_t offset, std::int64_t elements);
  // The working gradient buffer of one backward (ZeRO-2/3: allocated before it, released after
  // its last bucket; otherwise the persistent buffer, untouched).
  void zero_backward_begin(ChunkState& ch);
  void zero_backward_end(ChunkState& ch);
  // ZeRO-3: the chunk's parameters all-gathered module by module from the shards before a
  // forward or backward (the workload's zero3_param_all_gather, in its order), released after.
  void zero3_gather(ChunkState& ch, bool backward);
  void zero3_release(ChunkState& ch);
  // Sequence parallelism under ZeRO-2/3: the partial gradients' all-reduce over TP on the
  // gradient shards (every rank of a TP group holds the same part of the same-sized buffer).
  void zero_sp_all_reduce();
  // The data-parallel gradient reductions' wire format (--grad-comm-dtype; the workload counts
  // them in it) and the bytes of n elements on it. Other collectives stay fp32.
  comm::Wire wire() const {
    if (!o_.grad_comm_dtype) return comm::Wire::fp32;
    return *o_.grad_comm_dtype == DType::bf16   ? comm::Wire::bf16
           : *o_.grad_comm_dtype == DType::fp16 ? comm::Wire::fp16
                                                : comm::Wire::fp32;
  }
  double grad_bytes(std::int64_t n) const {
    return static_cast<double>(n) *
           (o_.grad_comm_dtype ? dtype_bytes(*o_.grad_comm_dtype) : sizeof(float));
  }
  // The optimizer state and parameters the checkpoint holds, in order.
  std::vector<std::vector<float>*> checkpoint_parts();
  void record_compute(const OpRecord& r);
  // kind: what the call is for the causal split (attribute_waits). peer/tag: a send's
  // destination or a receive's source (pipeline ranks) and the message's tag.
  enum class Kind : std::uint8_t { collective, outside, send, recv };
  std::uint64_t comm_op(std::string_view name, Collective c, CommGroup g, int group_size, int layer,
                        double bytes, std::function<void()> call, bool outside_workload = false,
                        int peer = -1, int tag = -1, int calls = 1);
  // After a step (stream idle): the time each of this step's calls waited for its peers, from
  // every group member's entry times (a collective can start when the last one enters) and
  // the senders' post times (a receive can complete once its message was sent). Moves that
  // wait out of the call's causal duration into Event::wait.
  void attribute_waits(std::size_t first);
  struct CommMeta {
    Kind kind;
    int peer, tag;
  };
  std::int64_t first_sequence(std::int64_t step, int mb) const {
    const std::int64_t global = accum_ * g_.dp * o_.micro_batch;
    return (step - 1) * global + static_cast<std::int64_t>(mb) * o_.micro_batch * g_.dp +
           static_cast<std::int64_t>(g_.d) * o_.micro_batch;
  }
  int tag(int virtual_stage, int mb, bool gradient) const {
    return (virtual_stage * static_cast<int>(accum_) + mb) * 2 + (gradient ? 1 : 0);
  }
  Status save(std::int64_t step);
  void write_trace() const;
  void gather_ranks();
  int report();
  bool agree(bool ok) {
    int mine = ok ? 1 : 0, all = 0;
    CS_MPI_CHECK(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, world_));
    return all == 1;
  }

  const TrainOptions& o_;
  MPI_Comm world_;
  MPI_Comm tp_comm_ = MPI_COMM_NULL, dp_comm_ = MPI_COMM_NULL, pp_comm_ = MPI_COMM_NULL,
           emb_comm_ = MPI_COMM_NULL, mp_comm_ = MPI_COMM_NULL, cp_comm_ = MPI_COMM_NULL,
           ep_comm_ = MPI_COMM_NULL, edp_comm_ = MPI_COMM_NULL;
  // Hierarchical CP: the all-to-all level (CP ranks [c / a x a, + a)) and the ring level (CP
  // ranks alike in c % a); null otherwise.
  MPI_Comm cp_a2a_comm_ = MPI_COMM_NULL, cp_ring_comm_ = MPI_COMM_NULL;
  CpForm cp_form_;
  int me_ = 0, n_ = 1, v_ = 1;
  Grid g_;
  std::int64_t accum_ = 1;
  Schedule schedule_ = Schedule::one_f_one_b;
  std::vector<ChunkState> chunks_;
  std::vector<PipelineTask> order_;  // this stage's tasks per step, in schedule order
  std::unique_ptr<TokenSource> data_;
  CommStream stream_;
  std::vector<MPI_Request> pending_sends_;  // the stream thread's
  std::vector<std::shared_ptr<std::vector<float>>> send_buffers_;
  Timeline tl_;
  std::vector<Event> compute_events_, comm_events_, task_events_;
  std::vector<CommMeta> comm_meta_;  // beside comm_events_ (the stream thread's)
  MeasuredComm measured_;
  // ZeRO-1 (dp > 1): this rank's stage buffer (its chunks' in order) split over the
  // data-parallel group; the AdamW moments of its part only; the workload's step buckets.
  bool zero1_ = false;
  comm::Partition zpart_;
  std::vector<float> zm_, zv_;
  // A model with experts: zpart_ splits the dense parts of the chunks (each chunk's buffer
  // after its experts); the experts' parts, end to end, are split over the expert-data-parallel
  // group (epart_; one part when it is 1), with their own moments, as Megatron-LM's
  // distributed optimizer splits its expert buffer.
  comm::Partition epart_;
  int edp_rank_ = 0;
  std::vector<float> ezm_, ezv_;
  std::vector<std::int64_t> z_reduce_buckets_, z_gather_buckets_;
  // ZeRO-2/3 (pp = 1, dp > 1): this rank's part of the reduced gradients, accumulated over the
  // micro-batches; ZeRO-3 also its part of the parameters (the only copy between steps) and the
  // modules' ranges the gathers fill, in forward order.
  bool zero23_ = false, zero3_ = false;
  std::vector<float> zgrad_, zparams_;
  std::vector<std::pair<Range, int>> z3_modules_;  // (range, the workload's layer)
  std::vector<CommVolume> expected_;
  std::vector<StepRow> rows_;
  std::int64_t start_ = 0;
  double t0_ = 0;
  std::int32_t microbatch_ = 0;
  nlohmann::json per_rank_ = nlohmann::json::array();
};

void PipelineTrainer::record_compute(const OpRecord& r) {
  Event e;
  e.rank = me_;
  e.stream = 0;
  e.start = r.start_s - t0_;
  e.dur = r.end_s - r.start_s;
  e.kind = EventKind::compute;
  e.name = tl_.intern(r.name);
  e.layer = r.layer;
  e.microbatch = microbatch_;
  compute_events_.push_back(e);
}

std::uint64_t PipelineTrainer::comm_op(std::string_view name, Collective c, CommGroup g,
                                       int group_size, int layer, double bytes,
                                       std::function<void()> call, bool outside_workload, int peer,
                                       int tag, int calls) {
  const std::uint32_t nm = tl_.intern(name);  // main thread: the stream must not intern
  const std::int32_t mb = microbatch_;
  return stream_.submit([this, c, g, group_size, layer, bytes, call = std::move(call), nm, mb,
                         outside_workload, peer, tag, calls] {
    Event e;
    e.rank = me_;
    e.stream = 1;
    e.start = Gpt::now() - t0_;
    call();
    e.dur = Gpt::now() - t0_ - e.start;
    e.kind = EventKind::comm;
    e.has_collective = true;
    e.collective = c;
    e.group = g;
    e.group_size = group_size;
    e.name = nm;
    e.layer = layer;
    e.microbatch = mb;
    e.bytes = bytes;
    comm_events_.push_back(e);
    // The CP ring's steps: every CP rank takes them in the same order, matched as collectives.
    const Kind k = outside_workload          ? Kind::outside
                   : g == CommGroup::context ? Kind::collective
                   : c == Collective::send   ? Kind::send
                   : c == Collective::recv   ? Kind::recv
                                             : Kind::collective;
    comm_meta_.push_back({k, peer, tag});
    if (!outside_workload) {
      CommCount& m = measured_[{g, c}];
      m.calls += calls;
      m.bytes += bytes;
      m.messages += 1;
    }
  });
}

bool PipelineTrainer::setup() {
  set_threads(o_.threads);
  // Communicators: ranks alike but for their tensor (data, pipeline) coordinate.
  // A model replica is (d, c): context-parallel ranks hold different positions of the same
  // sequences, so each has its own pipeline, embedding and model-parallel groups; gradients are
  // reduced over DP x CP (dp_comm_), K and V gathered over CP (cp_comm_).
  const int t = g_.t, d = g_.d, p = g_.p, cr = g_.c, replica = g_.grad_rank();
  CS_MPI_CHECK(MPI_Comm_split(world_, p * g_.grad_dp() + replica, t, &tp_comm_));
  CS_MPI_CHECK(MPI_Comm_split(world_, p * g_.tp + t, replica, &dp_comm_));
  CS_MPI_CHECK(MPI_Comm_split(world_, replica * g_.tp + t, p, &pp_comm_));
  CS_MPI_CHECK(MPI_Comm_split(world_, replica, me_, &mp_comm_));
  CS_MPI_CHECK(MPI_Comm_split(world_, (p * g_.dp + d) * g_.tp + t, cr, &cp_comm_));
  cp_form_ = cp_form(o_);
  if (const int a = cp_form_.a2a; a > 1) {
    CS_MPI_CHECK(MPI_Comm_split(cp_comm_, cr / a, cr % a, &cp_a2a_comm_));
    CS_MPI_CHECK(MPI_Comm_split(cp_comm_, cr % a, cr / a, &cp_ring_comm_));
  }
  // Expert parallelism (CP 1 with experts): ranks alike but for d % EP (the EP group) or for
  // d / EP (the expert-data-parallel group).
  const int ep = g_.ep;
  CS_MPI_CHECK(MPI_Comm_split(world_, ((p * g_.expert_dp() + d / ep) * g_.tp + t) * g_.cp + cr,
                              d % ep, &ep_comm_));
  CS_MPI_CHECK(
      MPI_Comm_split(world_, ((p * ep + d % ep) * g_.tp + t) * g_.cp + cr, d / ep, &edp_comm_));
  const bool ends = g_.pp > 1 && (p == 0 || p == g_.pp - 1);
  CS_MPI_CHECK(MPI_Comm_split(world_, ends ? replica * g_.tp + t : MPI_UNDEFINED, p, &emb_comm_));

  if (o_.data.empty()) {
    data_ = std::make_unique<TokenSource>(TokenSource::synthetic(o_.model.vocab, o_.seed));
  } else {
    auto src = TokenSource::text_file(o_.data, o_.model.vocab, o_.model.seq);
    if (!agree(src.ok())) {
      if (!src.ok() && me_ == 0)
        std::fprintf(stderr, "commscope: %s\n", src.error().message.c_str());
      if (me_ == 0 && src.ok())
        std::fprintf(stderr, "commscope: --data: another rank could not read '%s'\n",
                     o_.data.c_str());
      return false;
    }
    data_ = std::make_unique<TokenSource>(std::move(src).value());
  }

  // The workload of this model and plan: this stage's role gives the communication.
  auto sc = train_scenario(o_, n_);
  if (!sc.ok()) {
    if (me_ == 0) std::fprintf(stderr, "commscope: %s\n", sc.error().message.c_str());
    return false;
  }
  const Workload w = build_workload(*sc);
  accum_ = w.microbatches;
  schedule_ = sc->plan.schedule;
  const Role& role = w.roles[static_cast<std::size_t>(p)];
  expected_ = comm_volume(w, role);
  order_ =
      pipeline_order(schedule_, g_.pp, v_, static_cast<int>(accum_))[static_cast<std::size_t>(p)];

  std::vector<float> full;
  if (!o_.t5) {
    const ParamLayout full_layout(o_.model);
    full.resize(static_cast<std::size_t>(full_layout.total()));
    init_params(full_layout, full.data(), o_.seed);  // every rank the same, then its shard
  }
  const int last_vs = g_.pp * v_ - 1;
  std::int64_t held = 0;
  for (int c = 0; c < v_; ++c) {
    const Chunk& wc = role.chunks[static_cast<std::size_t>(c)];
    if (o_.t5) {
      if (!setup_t5_chunk(wc, max_in_flight(order_, c))) return false;
      held += chunks_.back().total;
      continue;
    }
    ShardSpec s;
    s.tp = g_.tp;
    s.tp_rank = t;
    s.first_layer = wc.first_layer;
    s.layers = wc.layers;
    s.embedding = wc.virtual_stage == 0;
    s.head = wc.virtual_stage == last_vs;
    s.sequence_parallel = o_.sequence_parallel;
    s.tp_async = async_tp_all_reduce(o_);
    s.cp = g_.cp;
    s.cp_rank = g_.c;
    s.cp_comm = cp_form_.type;
    s.cp_a2a_size = cp_form_.a2a;
    s.ep = g_.ep;
    s.ep_rank = g_.e();
    s.moe_aux_loss_coeff = o_.moe_aux_loss_coeff;
    s.moe_capacity_factor = o_.moe_capacity_factor;
    s.moe_pad_to_capacity = o_.moe_pad_to_capacity;
    s.flash = o_.flash;
    ChunkState ch;
    ch.virtual_stage = wc.virtual_stage;
    const int slots = max_in_flight(order_, c);
    for (int k = slots - 1; k >= 0; --k) ch.free_slots.push_back(k);
    ch.model = std::make_unique<GptShard>(o_.model, s, o_.micro_batch, slots);
    const std::int64_t total = ch.model->layout().total();
    held += total;
    ch.params.assign(static_cast<std::size_t>(total), 0.0f);
    ch.model->layout().from_full(full.data(), ch.params.data());
    ch.grads.assign(ch.params.size(), 0.0f);
    if (o_.strategy == Strategy::ddp || g_.grad_dp() == 1) {  // ZeRO: the moments of a part
      ch.m.assign(ch.params.size(), 0.0f);
      ch.v.assign(ch.params.size(), 0.0f);
    }
    // DDP buckets: the workload's, laid from the end of the chunk's buffer (backward completes
    // gradients in reverse memory order).
    // A model with experts: the dense buckets cover the buffer after the experts' part, the
    // expert-gradient ones that part, each laid from its end.
    const Range experts = ch.model->layout().experts();
    std::int64_t done = 0, expert_done = 0;
    for (const CommOp& b : backward_buckets(wc.backward, total)) {  // train/sharding.h
      done += b.elements;
      ch.buckets.push_back({b.offset, b.elements});
    }
    for (const CommOp& b : backward_buckets(wc.backward, experts.size, CommGroup::expert_data)) {
      expert_done += b.elements;
      ch.buckets.push_back({b.offset, b.elements, true});
    }
    if (done > total - experts.size || expert_done > experts.size) {
      if (me_ == 0)
        std::fprintf(stderr,
                     "commscope: internal: the workload's buckets cover %lld of %lld (experts "
                     "%lld of %lld)\n",
                     static_cast<long long>(done), static_cast<long long>(total - experts.size),
                     static_cast<long long>(expert_done), static_cast<long long>(experts.size));
      return false;
    }
    for (const PipelineTask& task : order_)
      if (task.backward && task.chunk == c) ch.last_backward_mb = task.microbatch;
    ch.model->set_all_reduce(tp_all_reduce());
    ch.model->set_sequence_comm(sequence_comm());
    ch.model->set_async_tp(tp_all_reduce_start(),
                           gather_scatter_start(CommGroup::tensor, g_.tp, &tp_comm_));
    if (g_.cp > 1) ch.model->set_context_comm(context_comm());
    if (g_.cp > 1) ch.model->set_context_ring(context_ring());
    if (g_.cp > 1) ch.model->set_context_a2a(context_a2a());
    if (g_.ep > 1) set_expert_comm(*ch.model);
    ch.experts = ch.model->layout().experts();
    ch.model->set_observer([this](const OpRecord& r) { record_compute(r); });
    ch.spec = ch.model->spec();
    ch.activation_elements = ch.model->activation_elements();
    ch.total = total;
    ch.word_embedding = ch.model->layout().word_embedding();
    ch.head_copy = ch.model->layout().head_copy();
    ch.replicated = ch.model->layout().replicated();
    ch.sp_partial = ch.model->layout().sequence_parallel_partial();
    chunks_.push_back(std::move(ch));
  }
  if (held != role.params) {
    if (me_ == 0)
      std::fprintf(stderr,
                   "commscope: internal: the workload counts %lld parameters, rank holds %lld\n",
                   static_cast<long long>(role.params), static_cast<long long>(held));
    return false;
  }
  zero1_ = o_.strategy == Strategy::zero1 && g_.grad_dp() > 1;
  if (zero1_) {
    std::int64_t expert_held = 0;
    for (const ChunkState& ch : chunks_) expert_held += ch.experts.size;
    held -= expert_held;  // the dense part
    epart_ = comm::Partition{expert_held, expert_held > 0 ? g_.expert_dp() : 1};
    if (epart_.n > 1) CS_MPI_CHECK(MPI_Comm_rank(edp_comm_, &edp_rank_));
    ezm_.assign(static_cast<std::size_t>(epart_.size(edp_rank_)), 0.0f);
    ezv_.assign(ezm_.size(), 0.0f);
    std::int64_t expert_rs = 0;
    for (const Op& op : role.step.ops())
      if (op.kind == OpKind::comm && std::string_view(op.name) == "moe_expert_grad_reduce_scatter")
        expert_rs += op.elements;
    if (expert_rs != (epart_.n > 1 ? expert_held : 0)) {
      if (me_ == 0)
        std::fprintf(stderr,
                     "commscope: internal: the workload reduce-scatters %lld expert gradients, "
                     "the rank holds %lld\n",
                     static_cast<long long>(expert_rs), static_cast<long long>(expert_held));
      return false;
    }
    zpart_ = comm::Partition{held, g_.grad_dp()};
    zm_.assign(static_cast<std::size_t>(zpart_.size(g_.grad_rank())), 0.0f);
    zv_.assign(zm_.size(), 0.0f);
    std::int64_t rs = 0, ag = 0;
    for (const Op& op : role.step.ops()) {
      if (op.kind != OpKind::comm) continue;
      const std::string_view name = op.name;
      if (name == "zero_grad_reduce_scatter") z_reduce_buckets_.push_back(op.elements);
      if (name == "zero_param_all_gather") z_gather_buckets_.push_back(op.elements);
    }
    for (std::int64_t e : z_reduce_buckets_) rs += e;
    for (std::int64_t e : z_gather_buckets_) ag += e;
    if (rs != held || ag != held) {
      if (me_ == 0)
        std::fprintf(stderr,
                     "commscope: internal: the workload's ZeRO-1 buckets cover %lld and %lld of "
                     "%lld\n",
                     static_cast<long long>(rs), static_cast<long long>(ag),
                     static_cast<long long>(held));
      return false;
    }
  }
  return zero_setup(role);
}

GptShard::SequenceComm PipelineTrainer::gather_scatter(CommGroup group, int size,
                                                       const MPI_Comm* comm) {
  return [this, start = gather_scatter_start(group, size, comm)](bool gather, const float* in,
                                                                 float* out, std::int64_t shard,
                                                                 std::string_view name, int layer) {
    t5_compute_segment();
    start(gather, in, out, shard, name, layer)();
    t5_segment_start_ = Gpt::now();
  };
}

GptShard::StartSequence PipelineTrainer::gather_scatter_start(CommGroup group, int size,
                                                              const MPI_Comm* comm) {
  return [this, group, size, comm](bool gather, const float* in, float* out, std::int64_t shard,
                                   std::string_view name, int layer) -> std::function<void()> {
    const int count = static_cast<int>(shard);
    const std::vector<int> counts(static_cast<std::size_t>(size), count);
    std::vector<int> displs(counts.size());
    for (std::size_t i = 0; i < displs.size(); ++i) displs[i] = static_cast<int>(i) * count;
    const double bytes = static_cast<double>(shard) * size * sizeof(float);
    const std::uint64_t tk =
        comm_op(name, gather ? Collective::all_gather : Collective::reduce_scatter, group, size,
                layer, bytes, [gather, in, out, counts, displs, comm] {
                  if (gather)
                    comm::all_gather(in, out, counts, displs, MPI_FLOAT, *comm);
                  else
                    comm::reduce_scatter(in, out, counts, MPI_FLOAT, MPI_SUM, *comm);
                });
    return [this, tk] { stream_.wait(tk); };
  };
}

GptShard::RingComm PipelineTrainer::context_ring() {
  return [this](const float* send, float* recv, std::int64_t n, std::string_view name, int layer,
                bool first, bool reverse) -> std::function<void()> {
    const int a = cp_form_.a2a, size = g_.cp / a, me = g_.c / a;
    int next = (me + 1) % size, prev = (me + size - 1) % size;
    if (reverse) std::swap(next, prev);
    const MPI_Comm comm = a > 1 ? cp_ring_comm_ : cp_comm_;
    const std::uint64_t tk = comm_op(
        name, Collective::send, CommGroup::context, size, layer,
        static_cast<double>(n) * sizeof(float),
        [send, recv, n, next, prev, comm] {
          CS_MPI_CHECK(MPI_Sendrecv(send, static_cast<int>(n), MPI_FLOAT, next, 0, recv,
                                    static_cast<int>(n), MPI_FLOAT, prev, 0, comm,
                                    MPI_STATUS_IGNORE));
        },
        false, -1, -1, first ? 1 : 0);
    return [this, tk] { stream_.wait(tk); };
  };
}

GptShard::AllToAllComm PipelineTrainer::context_a2a() {
  return
      [this](const float* send, float* recv, std::int64_t block, std::string_view name, int layer) {
        const int size = cp_form_.a2a > 1 ? cp_form_.a2a : g_.cp;
        const MPI_Comm comm = cp_form_.a2a > 1 ? cp_a2a_comm_ : cp_comm_;
        const std::uint64_t tk =
            comm_op(name, Collective::all_to_all, CommGroup::context, size, layer,
                    static_cast<double>(block) * size * sizeof(float), [send, recv, block, comm] {
                      CS_MPI_CHECK(MPI_Alltoall(send, static_cast<int>(block), MPI_FLOAT, recv,
                                                static_cast<int>(block), MPI_FLOAT, comm));
                    });
        stream_.wait(tk);
      };
}

void PipelineTrainer::set_expert_comm(GptShard& m) {
  const int el = o_.model.experts / g_.ep;
  m.set_expert_comm(
      [this](const float* send, const std::vector<int>& send_rows, float* recv,
             const std::vector<int>& recv_rows, int width, std::string_view name, int layer) {
        const std::size_t n = send_rows.size();
        std::vector<int> sc(n), sd(n), rc(n), rd(n);
        std::int64_t own = 0, sent = 0, received = 0;
        for (std::size_t r = 0; r < n; ++r) {
          sc[r] = send_rows[r] * width, rc[r] = recv_rows[r] * width;
          sd[r] = static_cast<int>(sent), rd[r] = static_cast<int>(received);
          sent += sc[r], received += rc[r];
        }
        const bool own_sends = name == "moe_dispatch" || name == "moe_combine_backward";
        own = own_sends ? sent : received;
        const std::uint64_t tk =
            comm_op(name, Collective::all_to_all, CommGroup::expert, g_.ep, layer,
                    static_cast<double>(own) * sizeof(float), [this, send, recv, sc, sd, rc, rd] {
                      CS_MPI_CHECK(MPI_Alltoallv(send, sc.data(), sd.data(), MPI_FLOAT, recv,
                                                 rc.data(), rd.data(), MPI_FLOAT, ep_comm_));
                    });
        stream_.wait(tk);
      },
      [this, el](const std::vector<int>& send, std::vector<int>& recv, int layer) {
        int* out = recv.data();
        const int* in = send.data();
        const std::uint64_t tk = comm_op(
            "moe_routing_counts", Collective::all_to_all, CommGroup::expert, g_.ep, layer,
            static_cast<double>(send.size()) * sizeof(int),
            [this, in, out, el] {
              CS_MPI_CHECK(MPI_Alltoall(in, el, MPI_INT, out, el, MPI_INT, ep_comm_));
            },
            true);
        stream_.wait(tk);
      });
}

std::uint64_t PipelineTrainer::submit_tp_all_reduce(float* data, std::int64_t n, bool max,
                                                    std::string_view name, int layer) {
  return comm_op(name, Collective::all_reduce, CommGroup::tensor, g_.tp, layer,
                 static_cast<double>(n) * sizeof(float), [this, data, n, max] {
                   comm::all_reduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT,
                                    max ? MPI_MAX : MPI_SUM, tp_comm_);
                 });
}

std::function<void(float*, std::int64_t, bool, std::string_view, int)>
PipelineTrainer::tp_all_reduce() {
  return [this](float* data, std::int64_t n, bool max, std::string_view name, int layer) {
    t5_compute_segment();
    stream_.wait(submit_tp_all_reduce(data, n, max, name, layer));
    t5_segment_start_ = Gpt::now();
  };
}

GptShard::StartAllReduce PipelineTrainer::tp_all_reduce_start() {
  return [this](float* data, std::int64_t n, std::string_view name,
                int layer) -> std::function<void()> {
    const std::uint64_t tk = submit_tp_all_reduce(data, n, false, name, layer);
    return [this, tk] { stream_.wait(tk); };
  };
}

void PipelineTrainer::record_t5_kernel(const OpRecord& r) {
  if (t5_segment_ != nullptr && r.start_s > t5_segment_start_)
    record_compute(OpRecord{t5_segment_, t5_segment_layer_, t5_segment_backward_, t5_segment_start_,
                            r.start_s, 0});
  record_compute(r);
  t5_segment_start_ = r.end_s;
}

void PipelineTrainer::t5_compute_segment() {
  if (t5_segment_ == nullptr) return;
  const double now = Gpt::now();
  record_compute(
      OpRecord{t5_segment_, t5_segment_layer_, t5_segment_backward_, t5_segment_start_, now, 0});
  t5_segment_start_ = now;
}

bool PipelineTrainer::setup_t5_chunk(const Chunk& wc, int slots) {
  const T5Config& cfg = *o_.t5;
  const int le = cfg.encoder_layers, ld = cfg.decoder_layers;
  const T5Part part = g_.pp == 1 ? T5Part::whole : g_.p == 0 ? T5Part::encoder : T5Part::decoder;
  ChunkState ch;
  ch.virtual_stage = wc.virtual_stage;
  ch.spec.tp = g_.tp;
  ch.spec.tp_rank = g_.t;
  ch.spec.first_layer = part == T5Part::decoder ? le : 0;
  ch.spec.layers = part == T5Part::whole ? le + ld : part == T5Part::encoder ? le : ld;
  ch.spec.embedding = part != T5Part::decoder;
  ch.spec.head = part != T5Part::encoder;
  if (wc.first_layer != ch.spec.first_layer || wc.layers != ch.spec.layers) {
    if (me_ == 0)
      std::fprintf(stderr,
                   "commscope: internal: the workload's stage %d holds blocks %d to %d, T5's side "
                   "of the encoder/decoder split %d to %d\n",
                   g_.p, wc.first_layer, wc.first_layer + wc.layers - 1, ch.spec.first_layer,
                   ch.spec.first_layer + ch.spec.layers - 1);
    return false;
  }
  for (int k = slots - 1; k >= 0; --k) ch.free_slots.push_back(k);
  for (int k = 0; k < slots; ++k) {
    ch.t5.push_back(
        std::make_unique<T5<float>>(cfg, o_.micro_batch, g_.tp, g_.t, part, o_.sequence_parallel));
    ch.t5.back()->set_all_reduce(tp_all_reduce());
    ch.t5.back()->set_sequence_comm(sequence_comm());
    ch.t5.back()->set_observer([this](const OpRecord& r) { record_t5_kernel(r); });
  }
  const T5Layout& l = ch.t5[0]->layout();
  {
    const T5Layout whole(cfg);
    std::vector<float> full(static_cast<std::size_t>(whole.total()));
    init_t5_params(whole, full.data(), o_.seed);  // every rank the same, then its part
    ch.params.assign(static_cast<std::size_t>(l.total()), 0.0f);
    l.from_full(full.data(), ch.params.data());
  }
  ch.total = l.total();
  // The encoder output crosses the split: this rank's rows of it under SP.
  ch.activation_elements = ch.t5[0]->rows(cfg.encoder_seq) * cfg.hidden;
  const Range wte{l.wte(), static_cast<std::int64_t>(cfg.vocab / g_.tp) * cfg.hidden};
  if (part == T5Part::encoder) ch.word_embedding = wte;
  if (part == T5Part::decoder) ch.head_copy = wte;  // the tied copy (Megatron's embedding group)
  for (const ParamTensor& t : l.tensors())
    if (t.name.starts_with("norm_")) ch.replicated.push_back({t.offset, t.size});
  if (ch.t5[0]->sequence_parallel()) ch.sp_partial = l.sequence_parallel_partial();
  ch.grads.assign(ch.params.size(), 0.0f);
  if (o_.strategy == Strategy::ddp || g_.grad_dp() == 1) {
    ch.m.assign(ch.params.size(), 0.0f);
    ch.v.assign(ch.params.size(), 0.0f);
  }
  std::int64_t done = 0;
  for (const CommOp& b : backward_buckets(wc.backward, ch.total)) {
    done += b.elements;
    ch.buckets.push_back({b.offset, b.elements});
  }
  if (done > ch.total) {
    if (me_ == 0)
      std::fprintf(stderr, "commscope: internal: the workload's buckets cover %lld of %lld\n",
                   static_cast<long long>(done), static_cast<long long>(ch.total));
    return false;
  }
  for (const PipelineTask& task : order_)
    if (task.backward && task.chunk == static_cast<int>(chunks_.size()))
      ch.last_backward_mb = task.microbatch;
  chunks_.push_back(std::move(ch));
  return true;
}

bool PipelineTrainer::zero_setup(const Role& role) {
  zero23_ = (o_.strategy == Strategy::zero2 || o_.strategy == Strategy::zero3) && g_.grad_dp() > 1;
  if (!zero23_) return true;
  zero3_ = o_.strategy == Strategy::zero3;
  auto internal = [&](const std::string& what) {
    if (me_ == 0) std::fprintf(stderr, "commscope: internal: %s\n", what.c_str());
    return false;
  };
  // resolve_scenario refuses ZeRO-2/3 with PP (DeepSpeed's rule): one chunk holds the stage.
  if (chunks_.size() != 1) return internal("ZeRO-2/3 with more than one model chunk");
  ChunkState& ch = chunks_[0];
  const std::int64_t total = static_cast<std::int64_t>(ch.params.size());
  std::int64_t bucketed = 0;
  for (const ChunkState::Bucket& b : ch.buckets) bucketed += b.elements;
  std::int64_t gathered = 0;
  for (const Op& op : role.step.ops())
    if (op.kind == OpKind::comm && std::string_view(op.name) == "zero_param_all_gather")
      z_gather_buckets_.push_back(op.elements), gathered += op.elements;
  if (bucketed != total || gathered != (zero3_ ? 0 : total))
    return internal(fmt::format("the workload's ZeRO-{} buckets cover {} and {} of {}",
                                zero3_ ? 3 : 2, bucketed, gathered, total));
  zpart_ = comm::Partition{total, g_.grad_dp()};
  const auto part = static_cast<std::size_t>(zpart_.size(g_.grad_rank()));
  zm_.assign(part, 0.0f);
  zv_.assign(part, 0.0f);
  zgrad_.assign(part, 0.0f);
  // Between backwards no full gradient buffer is held (zero_backward_begin allocates it).
  ch.grads.clear();
  ch.grads.shrink_to_fit();
  if (!zero3_) return true;
  // The modules the workload gathers, in forward order: the embedding, each block, the head
  // (those with parameters); its backward gathers them again in reverse.
  const ShardLayout& l = ch.model->layout();
  const ShardSpec& spec = ch.model->spec();
  std::vector<std::pair<Range, int>> modules = {{l.embedding(), kEmbeddingLayer}};
  for (int b = spec.first_layer; b < spec.first_layer + spec.layers; ++b)
    modules.push_back({l.block(b), b});
  modules.push_back({l.head(), kHeadLayer});
  for (const auto& m : modules)
    if (m.first.size > 0) z3_modules_.push_back(m);
  std::vector<std::int64_t> forward, backward, want;
  for (const Op& op : role.chunks[0].forward.ops())
    if (op.kind == OpKind::comm && op.tag == OpTag::param_gather) forward.push_back(op.elements);
  for (const Op& op : role.chunks[0].backward.ops())
    if (op.kind == OpKind::comm && op.tag == OpTag::param_gather) backward.push_back(op.elements);
  for (const auto& m : z3_modules_) want.push_back(m.first.size);
  std::int64_t covered = 0;
  for (std::int64_t n : want) covered += n;
  const bool reversed = std::equal(backward.begin(), backward.end(), want.rbegin(), want.rend());
  if (forward != want || !reversed || covered != total)
    return internal(
        fmt::format("the workload's ZeRO-3 gathers ({} and {} of them) are not the "
                    "trainer's {} modules of {} parameters",
                    forward.size(), backward.size(), want.size(), total));
  zparams_.assign(ch.params.begin() + zpart_.lo(g_.grad_rank()),
                  ch.params.begin() + zpart_.hi(g_.grad_rank()));
  zero3_release(ch);
  return true;
}

void PipelineTrainer::zero_backward_begin(ChunkState& ch) {
  if (zero23_) ch.grads.assign(ch.params.size(), 0.0f);
}

void PipelineTrainer::zero_backward_end(ChunkState& ch) {
  if (!zero23_) return;
  ch.grads.clear();  // every bucket was copied out (zero_grad_bucket)
  ch.grads.shrink_to_fit();
}

void PipelineTrainer::zero_grad_bucket(ChunkState& ch, std::int64_t offset, std::int64_t elements) {
  auto buf = std::make_shared<std::vector<float>>(ch.grads.begin() + offset,
                                                  ch.grads.begin() + offset + elements);
  // The next micro-batch accumulates afresh: what this one added is in the shards now.
  std::fill(ch.grads.begin() + offset, ch.grads.begin() + offset + elements, 0.0f);
  const comm::Partition::Pieces pc = zpart_.pieces(offset, elements);
  const int mine = pc.counts[static_cast<std::size_t>(g_.grad_rank())];
  float* out = zgrad_.data() +
               std::min(zpart_.in_shard(g_.grad_rank(), offset), zpart_.size(g_.grad_rank()));
  const comm::Wire w = wire();  // fp32: MPI's reduce-scatter (comm/collectives.h)
  comm_op("zero_grad_bucket", Collective::reduce_scatter, CommGroup::data, g_.grad_dp(), kNoLayer,
          grad_bytes(elements), [this, buf, pc, mine, out, w] {
            std::vector<float> part(static_cast<std::size_t>(std::max(mine, 1)));
            comm::reduce_scatter_sum(buf->data(), part.data(), pc.counts, w, dp_comm_);
            for (int i = 0; i < mine; ++i) out[i] += part[static_cast<std::size_t>(i)];
          });
}

void PipelineTrainer::zero3_gather(ChunkState& ch, bool backward) {
  if (!zero3_) return;
  ch.params.assign(static_cast<std::size_t>(zpart_.total), 0.0f);
  std::uint64_t last = 0;
  for (std::size_t k = 0; k < z3_modules_.size(); ++k) {
    const auto [r, layer] = z3_modules_[backward ? z3_modules_.size() - 1 - k : k];
    const comm::Partition::Pieces pc = zpart_.pieces(r.offset, r.size);
    const float* src = zparams_.data() + std::min(zpart_.in_shard(g_.grad_rank(), r.offset),
                                                  zpart_.size(g_.grad_rank()));
    float* dst = ch.params.data() + r.offset;
    last = comm_op("zero3_param_all_gather", Collective::all_gather, CommGroup::data, g_.grad_dp(),
                   layer, static_cast<double>(r.size) * sizeof(float), [this, src, dst, pc] {
                     comm::all_gather(src, dst, pc.counts, pc.displs, MPI_FLOAT, dp_comm_);
                   });
  }
  stream_.wait(last);  // one FIFO stream: every module is in place
}

void PipelineTrainer::zero3_release(ChunkState& ch) {
  if (!zero3_) return;
  ch.params.clear();
  ch.params.shrink_to_fit();
}

// The forward and backward tasks of one step, in the schedule's order, with the sends and
// receives between stages.
void PipelineTrainer::run_schedule(std::int64_t step, double* loss_sum) {
  const int b = o_.micro_batch, seq = o_.model.seq;
  const int last_vs = g_.pp * v_ - 1;
  const int prev = (g_.p - 1 + g_.pp) % g_.pp, next = (g_.p + 1) % g_.pp;
  std::vector<std::int32_t> tok(static_cast<std::size_t>(b) * seq), tgt(tok.size());
  T5Batch t5_batch;
  for (const PipelineTask& task : order_) {
    ChunkState& ch = chunks_[static_cast<std::size_t>(task.chunk)];
    GptShard* m = ch.model.get();  // null for T5 (ch.t5)
    const int vs = ch.virtual_stage, mb = task.microbatch;
    const ShardSpec& s = ch.spec;
    const std::int64_t n = ch.activation_elements;
    const double bytes = static_cast<double>(n) * sizeof(float);
    microbatch_ = mb;
    const double task_start = Gpt::now();
    if (!task.backward) {
      std::vector<float> in;
      if (vs > 0) {  // the activation from the previous stage
        in.resize(static_cast<std::size_t>(n));
        float* dst = in.data();
        stream_.wait(comm_op(
            "pp_recv_activation", Collective::recv, CommGroup::pipeline, 2, s.first_layer, bytes,
            [this, dst, n, prev, vs, mb] {
              CS_MPI_CHECK(MPI_Recv(dst, static_cast<int>(n), MPI_FLOAT, prev, tag(vs, mb, false),
                                    pp_comm_, MPI_STATUS_IGNORE));
            },
            false, prev, tag(vs, mb, false)));
      }
      const std::int64_t first = first_sequence(step, mb);
      if (o_.t5) t5_batch = t5_synthetic_batch(*o_.t5, b, first, o_.seed);
      if (!o_.t5 && (s.embedding || s.head))
        for (int i = 0; i < b; ++i) {
          data_->sequence(first + i, seq, tok.data() + static_cast<std::size_t>(i) * seq,
                          tgt.data() + static_cast<std::size_t>(i) * seq);
          if (o_.model.arch == ModelArch::bert)  // masked-LM: [MASK] inputs, their tokens' loss
            mask_for_mlm(first + i, seq, o_.model.vocab, o_.seed,
                         tok.data() + static_cast<std::size_t>(i) * seq,
                         tgt.data() + static_cast<std::size_t>(i) * seq);
        }
      CS_CHECK(!ch.free_slots.empty());
      const int slot = ch.free_slots.back();
      ch.free_slots.pop_back();
      ch.slot_of[mb] = slot;
      zero3_gather(ch, false);
      const float loss = m ? m->forward(slot, ch.params.data(), tok.data(), in.data(), tgt.data())
                           : t5_timed(false, s.first_layer, [&] {
                               return t5_forward(*ch.t5[static_cast<std::size_t>(slot)],
                                                 ch.params.data(), in.data(), t5_batch);
                             });
      zero3_release(ch);
      if (s.head && g_.t == 0) *loss_sum += loss;
      if (vs < last_vs) {
        const float* out =
            m ? m->output(slot) : ch.t5[static_cast<std::size_t>(slot)]->encoder_output();
        auto buf = std::make_shared<std::vector<float>>(out, out + n);
        comm_op(
            "pp_send_activation", Collective::send, CommGroup::pipeline, 2,
            s.first_layer + s.layers - 1, bytes,
            [this, buf, n, next, vs, mb] {
              MPI_Request r;
              CS_MPI_CHECK(MPI_Isend(buf->data(), static_cast<int>(n), MPI_FLOAT, next,
                                     tag(vs + 1, mb, false), pp_comm_, &r));
              pending_sends_.push_back(r);
              send_buffers_.push_back(buf);
            },
            false, next, tag(vs + 1, mb, false));
      }
    } else {
      std::vector<float> dout;
      if (vs < last_vs) {  // the gradient from the next stage
        dout.resize(static_cast<std::size_t>(n));
        float* dst = dout.data();
        stream_.wait(comm_op(
            "pp_recv_gradient", Collective::recv, CommGroup::pipeline, 2,
            s.first_layer + s.layers - 1, bytes,
            [this, dst, n, next, vs, mb] {
              CS_MPI_CHECK(MPI_Recv(dst, static_cast<int>(n), MPI_FLOAT, next, tag(vs, mb, true),
                                    pp_comm_, MPI_STATUS_IGNORE));
            },
            false, next, tag(vs, mb, true)));
      }
      // DDP: the chunk's buckets on its last micro-batch, each as soon as its gradients are;
      // ZeRO-2/3: on every micro-batch.
      const bool buckets = g_.grad_dp() > 1 && (zero23_ || mb == ch.last_backward_mb);
      std::size_t next_bucket = 0;
      const int slot = ch.slot_of.at(mb);
      ch.slot_of.erase(mb);
      ch.free_slots.push_back(slot);
      zero3_gather(ch, true);
      zero_backward_begin(ch);
      auto on_done = [&](std::int64_t completed) {
        if (!buckets) return;
        const std::int64_t total = static_cast<std::int64_t>(ch.grads.size());
        while (next_bucket < ch.buckets.size() &&
               total - ch.buckets[next_bucket].offset <= completed) {
          const auto bk = ch.buckets[next_bucket++];
          if (zero23_) {
            zero_grad_bucket(ch, bk.offset, bk.elements);
            continue;
          }
          float* p = ch.grads.data() + bk.offset;
          const comm::Wire w = wire();
          const MPI_Comm comm = bk.expert ? edp_comm_ : dp_comm_;
          comm_op(bk.expert ? "moe_expert_grad_bucket" : "ddp_bucket", Collective::all_reduce,
                  bk.expert ? CommGroup::expert_data : CommGroup::data,
                  bk.expert ? g_.expert_dp() : g_.grad_dp(), kNoLayer, grad_bytes(bk.elements),
                  [p, bk, w, comm] {
                    if (w != comm::Wire::fp32)  // --grad-comm-dtype bf16|fp16
                      comm::all_reduce_sum(p, p, static_cast<int>(bk.elements), w, comm);
                    else
                      comm::all_reduce(MPI_IN_PLACE, p, static_cast<int>(bk.elements), MPI_FLOAT,
                                       MPI_SUM, comm);
                  });
        }
      };
      const float* input_grad = nullptr;
      if (m) {
        m->backward(slot, ch.params.data(), ch.grads.data(), dout.data(), on_done);
        input_grad = m->input_grad();
      } else {  // T5: every gradient of the stage at once, then the buckets in backward order
        T5<float>& t5 = *ch.t5[static_cast<std::size_t>(slot)];
        t5_timed(true, s.first_layer, [&] {
          input_grad = t5_backward(t5, ch.params.data(), ch.grads.data(), dout.data());
          return 0.0f;
        });
        on_done(ch.total);
      }
      CS_CHECK(!zero23_ || next_bucket == ch.buckets.size());  // every gradient went
      zero_backward_end(ch);
      zero3_release(ch);
      if (vs > 0) {
        auto buf = std::make_shared<std::vector<float>>(input_grad, input_grad + n);
        comm_op(
            "pp_send_gradient", Collective::send, CommGroup::pipeline, 2, s.first_layer, bytes,
            [this, buf, n, prev, vs, mb] {
              MPI_Request r;
              CS_MPI_CHECK(MPI_Isend(buf->data(), static_cast<int>(n), MPI_FLOAT, prev,
                                     tag(vs - 1, mb, true), pp_comm_, &r));
              pending_sends_.push_back(r);
              send_buffers_.push_back(buf);
            },
            false, prev, tag(vs - 1, mb, true));
      }
    }
    // The task as a range on its own track (Megatron's forward-/backward-step ranges):
    // microbatch, chunk as layer. Not part of the breakdown.
    Event e;
    e.rank = me_;
    e.stream = 2;
    e.start = task_start - t0_;
    e.dur = Gpt::now() - task_start;
    e.kind = EventKind::compute;
    e.marker = Event::Marker::range;  // (cat "range": analyze counted it as compute)
    e.name = tl_.intern(task.backward ? "backward_step" : "forward_step");
    e.microbatch = mb;
    e.layer = task.chunk;
    task_events_.push_back(e);
  }
  // Every send complete before the buffers go (the receivers have them by now or soon).
  stream_.submit([this] {
    if (!pending_sends_.empty())
      CS_MPI_CHECK(MPI_Waitall(static_cast<int>(pending_sends_.size()), pending_sends_.data(),
                               MPI_STATUSES_IGNORE));
    pending_sends_.clear();
    send_buffers_.clear();
  });
  stream_.drain();
}

void PipelineTrainer::attribute_waits(std::size_t first) {
  const std::size_t end = comm_events_.size();
  // Collectives: per group, this step's calls in program order, each one's wait for the last
  // member to enter it (train/report.h, attribute_waits).
  // Hierarchical CP: the all-to-alls over their level, the ring's steps over theirs.
  auto collectives = [&](CommGroup g, MPI_Comm comm, std::optional<Collective> only = {}) {
    if (comm == MPI_COMM_NULL) return;
    std::vector<std::size_t> idx;
    for (std::size_t i = first; i < end; ++i)
      if (comm_meta_[i].kind == Kind::collective && comm_events_[i].group == g &&
          (!only || comm_events_[i].collective == *only))
        idx.push_back(i);
    train::attribute_waits(comm_events_, idx, t0_, comm);
  };
  collectives(CommGroup::tensor, tp_comm_);
  collectives(CommGroup::data, dp_comm_);
  collectives(CommGroup::embedding, emb_comm_);
  if (cp_form_.a2a > 1) {
    collectives(CommGroup::context, cp_a2a_comm_, Collective::all_to_all);
    collectives(CommGroup::context, cp_ring_comm_, Collective::send);
  } else {
    collectives(CommGroup::context, g_.cp > 1 ? cp_comm_ : MPI_COMM_NULL);
  }
  collectives(CommGroup::expert, g_.ep > 1 ? ep_comm_ : MPI_COMM_NULL);
  collectives(CommGroup::expert_data, g_.ep > 1 ? edp_comm_ : MPI_COMM_NULL);
  if (g_.pp < 2) return;
  // Receives: the message could arrive once its sender posted it. Every send of the step as
  // (source, destination, tag, time), gathered over the pipeline group.
  std::vector<double> mine;
  for (std::size_t i = first; i < end; ++i)
    if (comm_meta_[i].kind == Kind::send)
      mine.insert(mine.end(),
                  {static_cast<double>(g_.p), static_cast<double>(comm_meta_[i].peer),
                   static_cast<double>(comm_meta_[i].tag), comm_events_[i].start + t0_});
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<std::size_t>(g_.pp)), displs(lens.size());
  CS_MPI_CHECK(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, pp_comm_));
  int total = 0;
  for (std::size_t r = 0; r < lens.size(); ++r) displs[r] = total, total += lens[r];
  std::vector<double> sends(static_cast<std::size_t>(total));
  CS_MPI_CHECK(MPI_Allgatherv(mine.data(), len, MPI_DOUBLE, sends.data(), lens.data(),
                              displs.data(), MPI_DOUBLE, pp_comm_));
  std::map<std::pair<int, int>, double> posted;  // (source, tag) -> time, sends to this stage
  for (std::size_t k = 0; k + 3 < sends.size(); k += 4)
    if (static_cast<int>(sends[k + 1]) == g_.p)
      posted[{static_cast<int>(sends[k]), static_cast<int>(sends[k + 2])}] = sends[k + 3];
  for (std::size_t i = first; i < end; ++i) {
    if (comm_meta_[i].kind != Kind::recv) continue;
    const auto it = posted.find({comm_meta_[i].peer, comm_meta_[i].tag});
    if (it == posted.end()) continue;
    Event& e = comm_events_[i];
    const double w = std::clamp(it->second - (e.start + t0_), 0.0, e.dur);
    e.wait = w, e.start += w, e.dur -= w;
  }
}

// The squared gradient norm summed over the model-parallel ranks (TP x PP: each holds its own
// part), the global norm (averaged over the micro-batches and DP ranks) into *grad_norm, and the
// factor the AdamW step multiplies the summed gradients by (the average and the clipping).
float PipelineTrainer::clip_scale(double sq, double* grad_norm) {
  if (g_.tp * g_.pp > 1) {
    comm_op(
        "grad_norm_all_reduce", Collective::all_reduce, CommGroup::tensor, g_.tp * g_.pp, kNoLayer,
        8,
        [this, &sq] {
          CS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &sq, 1, MPI_DOUBLE, MPI_SUM, mp_comm_));
        },
        true);
    stream_.drain();
  }
  // Averaged over the micro-batches and the gradient group (CP ranks' losses are means over
  // their own positions: their average is the sequence's).
  const float scale = 1.0f / static_cast<float>(accum_ * g_.grad_dp());
  const double norm = std::sqrt(std::max(sq, 0.0)) * scale;
  *grad_norm = norm;
  return scale * clip_factor(norm, static_cast<float>(o_.clip));
}

void PipelineTrainer::optimizer_step(std::int64_t step, double* grad_norm) {
  const int last_vs = g_.pp * v_ - 1;
  if (zero23_) {  // pp = 1: no tied-embedding all-reduce; the gradients are in the parts
    zero_sp_all_reduce();
    zero1_step(step, grad_norm);
    return;
  }
  // Sequence parallelism: the norms', row-parallel biases' and final norm's gradients are
  // sums over this rank's sequence shard; one all-reduce over the group completes them.
  if (o_.sequence_parallel && g_.tp > 1) {
    auto packed = std::make_shared<std::vector<float>>();
    for (const ChunkState& ch : chunks_)
      for (const Range& r : ch.sp_partial)
        packed->insert(packed->end(), ch.grads.begin() + r.offset,
                       ch.grads.begin() + r.offset + r.size);
    const int n = static_cast<int>(packed->size());
    comm_op("sp_grad_all_reduce", Collective::all_reduce, CommGroup::tensor, g_.tp, kNoLayer,
            static_cast<double>(n) * sizeof(float), [this, packed, n] {
              comm::all_reduce(MPI_IN_PLACE, packed->data(), n, MPI_FLOAT, MPI_SUM, tp_comm_);
            });
    stream_.drain();
    std::size_t at = 0;
    for (ChunkState& ch : chunks_)
      for (const Range& r : ch.sp_partial) {
        std::copy(packed->begin() + static_cast<std::ptrdiff_t>(at),
                  packed->begin() + static_cast<std::ptrdiff_t>(at + r.size),
                  ch.grads.begin() + r.offset);
        at += static_cast<std::size_t>(r.size);
      }
  }
  // The tied embedding: the first stage's word embedding and the last stage's copy get the sum
  // of both gradients (Megatron's embedding group).
  if (g_.pp > 1) {
    for (ChunkState& ch : chunks_) {
      Range r{};
      if (ch.virtual_stage == 0) r = ch.word_embedding;
      if (ch.virtual_stage == last_vs) r = ch.head_copy;
      if (r.size == 0) continue;
      float* p = ch.grads.data() + r.offset;
      const std::int64_t n = r.size;
      comm_op("embedding_grad_all_reduce", Collective::all_reduce, CommGroup::embedding, 2,
              kEmbeddingLayer, static_cast<double>(n) * sizeof(float), [this, p, n] {
                comm::all_reduce(MPI_IN_PLACE, p, static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                                 emb_comm_);
              });
    }
    stream_.drain();
  }
  if (zero1_) {
    zero1_step(step, grad_norm);
    return;
  }
  // The global norm over the model: every tensor-parallel split once, replicated tensors on
  // tensor rank 0 only, the tied copy not at all; summed over the model-parallel group.
  // Experts: each EP rank holds its own, so theirs are summed over the EP group first.
  double sq = 0, expert_sq = 0;
  for (const ChunkState& ch : chunks_) {
    double all = sum_of_squares(ch.grads.data(), static_cast<std::int64_t>(ch.grads.size()));
    if (ch.head_copy.size > 0)
      all -= sum_of_squares(ch.grads.data() + ch.head_copy.offset, ch.head_copy.size);
    if (g_.t != 0)
      for (const Range& r : ch.replicated)
        all -= sum_of_squares(ch.grads.data() + r.offset, r.size);
    if (ch.experts.size > 0) {
      const double e = sum_of_squares(ch.grads.data() + ch.experts.offset, ch.experts.size);
      all -= e;
      expert_sq += e;
    }
    sq += all;
  }
  if (g_.ep > 1) {
    comm_op(
        "grad_norm_all_reduce", Collective::all_reduce, CommGroup::expert, g_.ep, kNoLayer, 8,
        [this, &expert_sq] {
          CS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &expert_sq, 1, MPI_DOUBLE, MPI_SUM, ep_comm_));
        },
        true);
    stream_.drain();
  }
  sq += expert_sq;
  const float k = clip_scale(sq, grad_norm);
  AdamW h;
  h.lr = static_cast<float>(o_.lr);
  const double t = Gpt::now();
  for (ChunkState& ch : chunks_) {
    adamw_step(ch.params.data(), ch.grads.data(), ch.m.data(), ch.v.data(),
               static_cast<std::int64_t>(ch.params.size()), h, step, k);
    std::fill(ch.grads.begin(), ch.grads.end(), 0.0f);
  }
  record_compute(OpRecord{"adam", kNoLayer, false, t, Gpt::now(), 0});
}

// ZeRO-1 (Rajbhandari et al. 2020; DeepSpeed stage 1 and Megatron's distributed optimizer):
// the stage's gradients (its chunks' buffers end to end) reduce-scattered over the
// data-parallel group in the workload's buckets, each rank's part updated with its part of the
// AdamW moments, the parameters all-gathered back in the workload's buckets. The global norm:
// this rank's part (every tensor-parallel split once, replicated tensors on tensor rank 0, the
// tied copy not at all) summed over the data-parallel group, then over the model-parallel one.
void PipelineTrainer::zero1_step(std::int64_t step, double* grad_norm) {
  const std::int64_t total = zpart_.total, lo = zpart_.lo(g_.grad_rank()),
                     hi = zpart_.hi(g_.grad_rank());
  // ZeRO-3 keeps no full parameters to gather into; ZeRO-2/3's part of the gradients is
  // zgrad_, reduce-scattered in backward (z_reduce_buckets_ is empty then).
  auto flat = std::make_shared<std::vector<float>>(static_cast<std::size_t>(zero3_ ? 0 : total));
  auto mine = std::make_shared<std::vector<float>>(static_cast<std::size_t>(zero23_ ? 0 : hi - lo));
  if (zero23_) mine->swap(zgrad_);
  // Each chunk's dense part's start in the stage's dense buffer (the chunk's buffer after its
  // experts, which are none without experts), and its experts' start in the expert buffer.
  std::vector<std::int64_t> base, ebase;
  std::int64_t at = 0, eat = 0;
  auto eflat = std::make_shared<std::vector<float>>(static_cast<std::size_t>(epart_.total));
  for (const ChunkState& ch : chunks_) {
    const std::int64_t ex = ch.experts.size;
    base.push_back(at);
    ebase.push_back(eat);
    if (!zero23_) std::copy(ch.grads.begin() + ex, ch.grads.end(), flat->begin() + at);
    std::copy(ch.grads.begin(), ch.grads.begin() + ex, eflat->begin() + eat);
    at += ch.total - ex;
    eat += ex;
  }
  // Where range [offset, offset + n) starts in this rank's part (clamped: n may miss it).
  auto in_part = [&](std::int64_t offset) {
    return std::min(zpart_.in_shard(g_.grad_rank(), offset), hi - lo);
  };
  std::int64_t off = 0;
  for (std::int64_t n : z_reduce_buckets_) {
    const comm::Partition::Pieces pc = zpart_.pieces(off, n);
    const float* in = flat->data() + off;
    float* out = mine->data() + in_part(off);
    const comm::Wire w = wire();  // fp32: MPI's reduce-scatter, as before
    comm_op("zero_grad_reduce_scatter", Collective::reduce_scatter, CommGroup::data, g_.grad_dp(),
            kNoLayer, grad_bytes(n), [this, in, out, pc, flat, mine, w] {
              comm::reduce_scatter_sum(in, out, pc.counts, w, dp_comm_);
            });
    off += n;
  }
  // The experts' gradients over the expert-data-parallel group, onto this rank's part (its
  // EP group's experts: each EP rank's differ).
  const std::int64_t elo = epart_.lo(edp_rank_), ehi = epart_.hi(edp_rank_);
  auto emine = std::make_shared<std::vector<float>>(static_cast<std::size_t>(ehi - elo));
  if (epart_.n > 1) {
    const comm::Partition::Pieces pc = epart_.pieces(0, epart_.total);
    const comm::Wire w = wire();
    comm_op("moe_expert_grad_reduce_scatter", Collective::reduce_scatter, CommGroup::expert_data,
            epart_.n, kNoLayer, grad_bytes(epart_.total), [this, pc, eflat, emine, w] {
              comm::reduce_scatter_sum(eflat->data(), emine->data(), pc.counts, w, edp_comm_);
            });
  } else {
    std::copy(eflat->begin(), eflat->end(), emine->begin());
  }
  stream_.drain();
  // Sum of squares of this part, less the ranges the global norm leaves out; and of the
  // experts' part (summed over DP below: DP = EP x expert DP, each expert's part once).
  double sq = sum_of_squares(mine->data(), hi - lo) + sum_of_squares(emine->data(), ehi - elo);
  auto leave_out = [&](std::int64_t a, std::int64_t b) {  // dense-buffer coordinates
    a = std::max(a, lo);
    b = std::min(b, hi);
    if (a < b) sq -= sum_of_squares(mine->data() + (a - lo), b - a);
  };
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    const std::int64_t d = base[c] - chunks_[c].experts.size;  // chunk offset -> dense buffer
    const Range hc = chunks_[c].head_copy;
    if (hc.size > 0) leave_out(d + hc.offset, d + hc.offset + hc.size);
    if (g_.t != 0)
      for (const Range& r : chunks_[c].replicated) leave_out(d + r.offset, d + r.offset + r.size);
  }
  comm_op("grad_norm_all_reduce", Collective::all_reduce, CommGroup::data, g_.grad_dp(), kNoLayer,
          8, [this, &sq] {
            CS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &sq, 1, MPI_DOUBLE, MPI_SUM, dp_comm_));
          });
  stream_.drain();
  const float k = clip_scale(sq, grad_norm);
  AdamW h;
  h.lr = static_cast<float>(o_.lr);
  const double t = Gpt::now();
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    ChunkState& ch = chunks_[c];
    const std::int64_t ex = ch.experts.size;
    const std::int64_t a = std::max(base[c], lo), b = std::min(base[c] + ch.total - ex, hi);
    // ZeRO-3: the parameter part is the only copy; ZeRO-1/2: the part of the full parameters.
    float* p = zero3_ ? zparams_.data() + (a - lo) : ch.params.data() + ex + (a - base[c]);
    if (a < b)
      adamw_step(p, mine->data() + (a - lo), zm_.data() + (a - lo), zv_.data() + (a - lo), b - a, h,
                 step, k);
    const std::int64_t ea = std::max(ebase[c], elo), eb = std::min(ebase[c] + ex, ehi);
    if (ea < eb)
      adamw_step(ch.params.data() + (ea - ebase[c]), emine->data() + (ea - elo),
                 ezm_.data() + (ea - elo), ezv_.data() + (ea - elo), eb - ea, h, step, k);
    std::copy(ch.params.begin() + ex, ch.params.end(), flat->begin() + base[c]);
    std::copy(ch.params.begin(), ch.params.begin() + ex, eflat->begin() + ebase[c]);
    std::fill(ch.grads.begin(), ch.grads.end(), 0.0f);
  }
  if (zero23_) {  // the part accumulates the next step's gradients from zero
    std::fill(mine->begin(), mine->end(), 0.0f);
    mine->swap(zgrad_);
  }
  record_compute(OpRecord{"adam", kNoLayer, false, t, Gpt::now(), 0});
  off = 0;
  for (std::int64_t n : z_gather_buckets_) {
    const comm::Partition::Pieces pc = zpart_.pieces(off, n);
    float* buf = flat->data() + off;
    comm_op("zero_param_all_gather", Collective::all_gather, CommGroup::data, g_.grad_dp(),
            kNoLayer, static_cast<double>(n) * sizeof(float), [this, buf, pc, flat] {
              comm::all_gather(MPI_IN_PLACE, buf, pc.counts, pc.displs, MPI_FLOAT, dp_comm_);
            });
    off += n;
  }
  if (epart_.n > 1) {
    const comm::Partition::Pieces pc = epart_.pieces(0, epart_.total);
    comm_op("moe_expert_param_all_gather", Collective::all_gather, CommGroup::expert_data, epart_.n,
            kNoLayer, static_cast<double>(epart_.total) * sizeof(float), [this, pc, eflat] {
              comm::all_gather(MPI_IN_PLACE, eflat->data(), pc.counts, pc.displs, MPI_FLOAT,
                               edp_comm_);
            });
  }
  stream_.drain();
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    ChunkState& ch = chunks_[c];
    const std::int64_t ex = ch.experts.size;
    // (ZeRO-3 holds no full parameters between passes: nothing to copy.)
    const auto dense = static_cast<std::int64_t>(ch.params.size()) - ex;
    if (dense > 0)
      std::copy(flat->begin() + base[c], flat->begin() + base[c] + dense, ch.params.begin() + ex);
    std::copy(eflat->begin() + ebase[c], eflat->begin() + ebase[c] + ex, ch.params.begin());
  }
}

void PipelineTrainer::zero_sp_all_reduce() {
  if (!o_.sequence_parallel || g_.tp < 2) return;
  // The workload's call: every partial range whole; this rank's part of each holds its values,
  // the rest zeros (the other data-parallel ranks reduce theirs in their own TP groups).
  const std::int64_t lo = zpart_.lo(g_.grad_rank()), hi = zpart_.hi(g_.grad_rank());
  auto packed = std::make_shared<std::vector<float>>();
  std::vector<std::pair<std::int64_t, std::int64_t>> at;  // (packed offset, range offset)
  for (const Range& r : chunks_[0].sp_partial) {
    at.push_back({static_cast<std::int64_t>(packed->size()), r.offset});
    packed->resize(packed->size() + static_cast<std::size_t>(r.size), 0.0f);
    for (std::int64_t i = std::max(r.offset, lo); i < std::min(r.offset + r.size, hi); ++i)
      (*packed)[static_cast<std::size_t>(at.back().first + i - r.offset)] =
          zgrad_[static_cast<std::size_t>(i - lo)];
  }
  const int n = static_cast<int>(packed->size());
  comm_op("sp_grad_all_reduce", Collective::all_reduce, CommGroup::tensor, g_.tp, kNoLayer,
          static_cast<double>(n) * sizeof(float), [this, packed, n] {
            comm::all_reduce(MPI_IN_PLACE, packed->data(), n, MPI_FLOAT, MPI_SUM, tp_comm_);
          });
  stream_.drain();
  std::size_t k = 0;
  for (const Range& r : chunks_[0].sp_partial) {
    for (std::int64_t i = std::max(r.offset, lo); i < std::min(r.offset + r.size, hi); ++i)
      zgrad_[static_cast<std::size_t>(i - lo)] =
          (*packed)[static_cast<std::size_t>(at[k].first + i - r.offset)];
    ++k;
  }
}

std::vector<std::vector<float>*> PipelineTrainer::checkpoint_parts() {
  std::vector<std::vector<float>*> parts;
  for (ChunkState& ch : chunks_) {
    parts.push_back(zero3_ ? &zparams_ : &ch.params);  // ZeRO-3: the part it holds
    if (!zero1_ && !zero23_) {
      parts.push_back(&ch.m);
      parts.push_back(&ch.v);
    }
  }
  if (zero1_ || zero23_) {
    parts.push_back(&zm_);
    parts.push_back(&zv_);
  }
  if (zero1_ && epart_.total > 0) {  // the experts' part's moments
    parts.push_back(&ezm_);
    parts.push_back(&ezv_);
  }
  return parts;
}

Status PipelineTrainer::save(std::int64_t step) {
  std::vector<const std::vector<float>*> parts;
  for (std::vector<float>* p : checkpoint_parts()) parts.push_back(p);
  const Status s = write_checkpoint(checkpoint_file(o_.checkpoint_dir, step, me_), parts);
  int ok = s.ok() ? 1 : 0, all = 0;
  comm_op(
      "checkpoint_barrier", Collective::all_reduce, CommGroup::data, n_, kNoLayer, 4,
      [&] { CS_MPI_CHECK(MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, world_)); }, true);
  stream_.drain();
  if (!s.ok()) return s;
  if (!all) return Error{"--checkpoint: another rank could not write its checkpoint file"};
  if (me_ == 0) CS_RETURN_IF_ERROR(write_manifest(o_.checkpoint_dir, run_manifest(o_, n_, step)));
  return ok_status();
}

bool PipelineTrainer::resume() {
  if (!o_.resume) return true;
  auto load = [&]() -> Result<std::int64_t> {
    CS_ASSIGN_OR_RETURN(nlohmann::json j, read_manifest(o_.checkpoint_dir));
    const std::int64_t step = j["step"].get<std::int64_t>();
    CS_RETURN_IF_ERROR(check_manifest(j, o_, n_, manifest_file(o_.checkpoint_dir)));
    std::vector<std::vector<float>*> parts = checkpoint_parts();
    CS_RETURN_IF_ERROR(read_checkpoint(checkpoint_file(o_.checkpoint_dir, step, me_), parts));
    return step;
  };
  auto s = load();
  int bad = s.ok() ? n_ : me_, first = n_;
  CS_MPI_CHECK(MPI_Allreduce(&bad, &first, 1, MPI_INT, MPI_MIN, world_));
  if (first < n_) {
    if (me_ == first) std::fprintf(stderr, "commscope: %s\n", s.error().message.c_str());
    return false;
  }
  start_ = *s;
  return true;
}

Status PipelineTrainer::train() {
  const double tokens_per_step =
      static_cast<double>(accum_ * g_.dp * o_.micro_batch) * o_.model.seq;
  const double flops = matmul_flops() * static_cast<double>(accum_ * g_.dp);
  CS_MPI_CHECK(MPI_Barrier(world_));
  t0_ = Gpt::now();
  for (std::int64_t step = start_ + 1; step <= o_.steps; ++step) {
    if (me_ == o_.kill_rank && step == o_.kill_step) ::raise(SIGKILL);
    const double ts = Gpt::now() - t0_;
    const std::size_t first_compute = compute_events_.size(), first_comm = comm_events_.size();
    double loss_sum = 0;
    run_schedule(step, &loss_sum);
    double norm = 0;
    optimizer_step(step, &norm);
    double loss_all = 0;
    comm_op(
        "loss_all_reduce", Collective::all_reduce, CommGroup::data, n_, kNoLayer, 8,
        [&] { CS_MPI_CHECK(MPI_Allreduce(&loss_sum, &loss_all, 1, MPI_DOUBLE, MPI_SUM, world_)); },
        true);
    stream_.drain();
    const double te = Gpt::now() - t0_;
    attribute_waits(first_comm);
    std::vector<Event> evs(compute_events_.begin() + static_cast<std::ptrdiff_t>(first_compute),
                           compute_events_.end());
    evs.insert(evs.end(), comm_events_.begin() + static_cast<std::ptrdiff_t>(first_comm),
               comm_events_.end());
    rows_.push_back({step, loss_all / static_cast<double>(accum_ * g_.grad_dp()), te - ts, norm,
                     breakdown(evs, ts, te), 0});
    rows_.back().start_s = ts;
    if (o_.model.experts > 0) moe_routing(rows_.back());
    // The pipeline bubble this stage saw: the time its receives waited for the neighbouring
    // stage to send (idle in the causal view; the receives run one at a time).
    double bubble = 0;
    for (std::size_t i = first_comm; i < comm_events_.size(); ++i)
      if (comm_meta_[i].kind == Kind::recv) bubble += comm_events_[i].wait;
    rows_.back().br.bubble = std::min(bubble, rows_.back().br.idle);
    if (me_ == 0 && o_.format == "table")
      std::printf("%6lld %10.6f %10.2f %10.0f %9.2f %9.2f %9.2f %9.2f %9.2f\n",
                  static_cast<long long>(step), rows_.back().loss, (te - ts) * 1e3,
                  tokens_per_step / (te - ts), flops / (te - ts) / 1e9,
                  rows_.back().br.compute * 1e3, rows_.back().br.overlapped * 1e3,
                  rows_.back().br.exposed * 1e3, rows_.back().br.idle * 1e3);
    std::fflush(stdout);
    if (o_.checkpoint_every > 0 && step % o_.checkpoint_every == 0) CS_RETURN_IF_ERROR(save(step));
  }
  stream_.drain();
  return ok_status();
}

void PipelineTrainer::moe_routing(StepRow& row) {
  const int E = o_.model.experts, ep = g_.ep, el = E / ep;
  std::vector<int> routed;
  double sums[5] = {0, 0, 0, 0, 0};  // rank imbalances, expert imbalances, blocks, aux, aux blocks
  for (ChunkState& ch : chunks_) {
    const GptShard::MoeStats st = ch.model->take_moe_stats();
    routed.insert(routed.end(), st.routed.begin(), st.routed.end());
    sums[3] += st.aux_loss;
    sums[4] += st.aux_blocks;
  }
  // Every member of the EP group ran the same blocks in the same order: sum them block by block.
  if (ep > 1 && !routed.empty()) {
    comm_op(
        "moe_routing_all_reduce", Collective::all_reduce, CommGroup::expert, ep, kNoLayer,
        static_cast<double>(routed.size() * sizeof(int)),
        [this, &routed] {
          CS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, routed.data(), static_cast<int>(routed.size()),
                                     MPI_INT, MPI_SUM, ep_comm_));
        },
        true);
    stream_.drain();
  }
  for (std::size_t b = 0; b + static_cast<std::size_t>(E) <= routed.size();
       b += static_cast<std::size_t>(E)) {
    const int* c = routed.data() + b;
    double total = 0, busiest_rank = 0, busiest_expert = 0;
    for (int r = 0; r < ep; ++r) {
      double load = 0;
      for (int e = r * el; e < (r + 1) * el; ++e) load += c[e];
      busiest_rank = std::max(busiest_rank, load);
    }
    for (int e = 0; e < E; ++e) {
      total += c[e];
      busiest_expert = std::max(busiest_expert, static_cast<double>(c[e]));
    }
    if (total <= 0) continue;
    sums[0] += busiest_rank / (total / ep);
    sums[1] += busiest_expert / (total / E);
    sums[2] += 1;
  }
  comm_op(
      "moe_routing_all_reduce", Collective::all_reduce, CommGroup::data, n_, kNoLayer, sizeof(sums),
      [this, &sums] {
        CS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sums, 5, MPI_DOUBLE, MPI_SUM, world_));
      },
      true);
  stream_.drain();
  row.moe = true;
  if (sums[2] > 0) {
    row.moe_rank_imbalance = sums[0] / sums[2];
    row.moe_expert_imbalance = sums[1] / sums[2];
  }
  row.moe_aux_loss = sums[4] > 0 ? sums[3] / sums[4] : 0;
}

void PipelineTrainer::write_trace() const {
  write_rank_trace(
      o_.trace, me_, tl_, rows_, {&compute_events_, &comm_events_, &task_events_},
      g_.cp > 1 ? fmt::format("rank {} (tp {}, cp {}, pp {}, dp {})", me_, g_.t, g_.c, g_.p, g_.d)
                : fmt::format("rank {} (tp {}, pp {}, dp {})", me_, g_.t, g_.p, g_.d),
      {"compute", "communication", "pipeline schedule"});
}

void PipelineTrainer::gather_ranks() {
  per_rank_ = gather_rank_averages(world_, me_, n_, rows_, start_, o_.warmup,
                                   {{"tp_rank", g_.t}, {"pp_rank", g_.p}, {"dp_rank", g_.d}});
}

int PipelineTrainer::report() {
  // Every rank checks its own communication against its stage's workload.
  const bool mine = comm_matches(measured_, expected_, static_cast<std::int64_t>(rows_.size()));
  int ok = mine ? 1 : 0, all = 0;
  CS_MPI_CHECK(MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, world_));
  // Each stage's communication table, from its first rank (tensor and data rank 0), to rank 0.
  const std::string table =
      g_.t == 0 && g_.d == 0 && g_.c == 0
          ? nlohmann::json{{"stage", g_.p},
                           {"rank", me_},
                           {"communication", comm_table(measured_, expected_,
                                                        static_cast<std::int64_t>(rows_.size()))}}
                .dump()
          : std::string();
  int len = static_cast<int>(table.size());
  std::vector<int> lens(static_cast<std::size_t>(n_)), displs(static_cast<std::size_t>(n_));
  CS_MPI_CHECK(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, world_));
  int sum = 0;
  for (int i = 0; i < n_; ++i) {
    displs[static_cast<std::size_t>(i)] = sum;
    sum += lens[static_cast<std::size_t>(i)];
  }
  std::string tables(static_cast<std::size_t>(me_ == 0 ? sum : 0), '\0');
  CS_MPI_CHECK(MPI_Gatherv(table.data(), len, MPI_CHAR, tables.data(), lens.data(), displs.data(),
                           MPI_CHAR, 0, world_));
  if (me_ != 0) return all ? 0 : 1;
  RunRecord r;
  r.by_stage = nlohmann::json::array();
  for (int i = 0; i < n_; ++i)
    if (lens[static_cast<std::size_t>(i)] > 0)
      r.by_stage.push_back(nlohmann::json::parse(
          tables.substr(static_cast<std::size_t>(displs[static_cast<std::size_t>(i)]),
                        static_cast<std::size_t>(lens[static_cast<std::size_t>(i)]))));
  std::sort(
      r.by_stage.begin(), r.by_stage.end(),
      [](const nlohmann::json& a, const nlohmann::json& b) { return a["stage"] < b["stage"]; });
  r.o = &o_;
  r.ranks = n_;
  r.dp = g_.dp;
  r.accum = accum_;
  std::int64_t params = 0;
  for (const ChunkState& ch : chunks_) params += ch.total;
  r.parameters = o_.t5 ? T5Layout(*o_.t5).total() : ParamLayout(o_.model).total();
  r.tokens_per_step = static_cast<double>(accum_ * g_.dp * o_.micro_batch) * o_.model.seq;
  r.flops_per_step = matmul_flops() * static_cast<double>(accum_ * g_.dp);
  r.data = data_->describe();
  r.start = start_;
  r.rows = &rows_;
  r.measured = &measured_;
  r.expected = &expected_;
  struct rusage ru = {};
  ::getrusage(RUSAGE_SELF, &ru);
  const double moments =
      zero1_ || zero23_ ? static_cast<double>(zm_.size()) : static_cast<double>(params);
  // Held between steps: ZeRO-2/3 their gradient part (the full buffer only during a backward),
  // ZeRO-3 its parameter part (the full parameters only during a forward or backward).
  const double held_params = zero3_ ? static_cast<double>(zparams_.size()) : params;
  const double held_grads = zero23_ ? static_cast<double>(zgrad_.size()) : params;
  r.memory = {{"parameters", held_params * 4},
              {"gradients", held_grads * 4},
              {"optimizer_state", moments * 8},
              {"peak_resident", static_cast<double>(ru.ru_maxrss) * 1024}};
  r.per_rank = per_rank_;
  r.other_ranks_match = all == 1;
  r.parallel = {{"tensor_model_parallel_size", g_.tp},
                {"pipeline_model_parallel_size", g_.pp},
                {"data_parallel_size", g_.dp},
                {"context_parallel_size", g_.cp},
                {"virtual_pipeline_stages", v_},
                {"schedule", to_string(schedule_)},
                {"sequence_parallel", o_.sequence_parallel},
                {"async_tensor_model_parallel_allreduce", async_tp_all_reduce(o_)},
                {"rank_order", to_string(o_.rank_order)}};
  if (g_.cp > 1) {  // the form that ran (a level of one rank resolved to the other form)
    r.parallel["cp_comm_type"] = to_string(cp_form_.type);
    if (cp_form_.a2a > 1)
      r.parallel["hierarchical_context_parallel_sizes"] = {cp_form_.a2a, g_.cp / cp_form_.a2a};
  }
  return print_report(r);
}

int PipelineTrainer::run() {
  if (!agree(setup())) return 2;
  if (!resume()) return 2;
  if (Status s = train(); !s.ok()) {
    std::fprintf(stderr, "commscope: rank %d: %s\n", me_, s.error().message.c_str());
    return 2;
  }
  write_trace();
  gather_ranks();
  return report();
}

}  // namespace

int run_pipeline_training(const TrainOptions& o, MPI_Comm comm) {
  PipelineTrainer t(o, comm);
  return t.run();
}

}  // namespace commscope::train
