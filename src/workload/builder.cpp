// Building the workload: each block is written once as a forward "program" of steps; the
// backward, the recompute and the communication each strategy adds are derived from it, so
// forward, backward and recompute cannot drift apart.
//
// Shapes (per rank): b micro-batch, s tokens per sample, h hidden, q = heads x head_dim,
// kv = kv_heads x head_dim, f FFN width, V vocabulary, t tensor-parallel size.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include "commscope/spec/framework_config.h"
#include "commscope/workload/params.h"
#include "commscope/workload/workload.h"

namespace commscope {

namespace {

// Compressed communication's constants (docs/workload.md, "Compressed communication").
// qwZ: DeepSpeed's CUDAQuantizer.target_group_size (partition_parameters.py), elements per
// int8 block; qgZ: elements per int4 block; each block carries one fp32 scale.
constexpr std::int64_t kQwzBlock = 8000;
constexpr std::int64_t kQgzBlock = 2048;
constexpr double kScaleBytes = 4;

// Where a step sits relative to Megatron's tensor-parallel regions: "enter" is the f operator
// (identity forward, all-reduce backward; all-gather / reduce-scatter under sequence
// parallelism), "exit" is the g operator (all-reduce forward, identity backward;
// reduce-scatter / all-gather under sequence parallelism).
// Mixture of experts and context parallelism add their own kinds (written in block programs of
// MoE layers and under CP only): the token dispatch and combine all-to-alls over the EP group;
// expert TP's all-gather / reduce-scatter of the dispatched tokens; the CP ring's KV exchange,
// issued beside the attention core (cp_exchange) and awaited after it (cp_wait).
enum class StepKind : std::uint8_t {
  compute,
  tp_enter,
  tp_exit,
  ep_dispatch,
  ep_combine,
  etp_enter,
  etp_exit,
  cp_exchange,
  cp_wait,
  tp_gather  // the MTP projection's output: all-gathered over TP (and back to SP shards)
};

struct Step {
  StepKind kind = StepKind::compute;
  Op op;                         // compute: the forward op
  std::int64_t tp_elements = 0;  // tp_enter/exit: activation elements b x s x h
  std::int64_t grad_params = 0;  // parameters whose gradient the backward of this step completes
  // The recompute module it belongs to (recompute_module bits; 0: none): replayed in backward
  // under selective recompute when the plan's recompute_modules name it.
  std::uint8_t module = 0;
  bool gathers_input = false;        // GEMM that reads an SP-gathered input (re-gathered for wgrad)
  std::int64_t gather_width = 0;     // that input's width a token (0: the hidden size)
  bool vocab_parallel_loss = false;  // cross-entropy over a vocabulary split across TP ranks
  // Backward FLOPs and bytes when they are not twice the forward's (FlashAttention's backward
  // recomputes the scores; FP8 casts): negative means the default, twice the forward.
  double backward_flops = -1, backward_mem = -1;
  bool expert = false;  // routed experts' GEMM: its gradients go to the expert-data group
  // cp_exchange/cp_wait: the ring's KV chunk (K and V of this rank's tokens); tp_elements is
  // the all-to-alls' payload under a2a and a2a+p2p, this chunk otherwise.
  std::int64_t cp_ring_elements = 0;
};

class Emitter {
 public:
  Emitter(OpList& list, Phase phase) : list_(list), phase_(phase) {}
  void set_phase(Phase p) { phase_ = p; }
  Phase phase() const { return phase_; }
  // An op on the compute chain: depends on the previous chain op and on anything pending.
  std::uint32_t chain(const Op& op) {
    deps_.clear();
    if (has_prev_) deps_.push_back(prev_);
    deps_.insert(deps_.end(), pending_.begin(), pending_.end());
    pending_.clear();
    prev_ = list_.add(op, deps_);
    list_.edit(prev_).phase = phase_;
    has_prev_ = true;
    return prev_;
  }
  Op& edit(std::uint32_t i) { return list_.edit(i); }
  // An op off the chain (overlappable communication), depending on the given ops.
  std::uint32_t side(Op op, std::initializer_list<std::uint32_t> deps) {
    op.phase = phase_;
    return list_.add(op, deps);
  }
  // The next chain op must also wait for op i.
  void need(std::uint32_t i) { pending_.push_back(i); }
  // An op off the chain that starts with the next chain op (it waits for what that op will
  // wait for), or with the last chain op (it waits for what that op waited for).
  std::uint32_t with_next(Op op) {
    op.phase = phase_;
    std::vector<std::uint32_t> d;
    if (has_prev_) d.push_back(prev_);
    d.insert(d.end(), pending_.begin(), pending_.end());
    return list_.add(op, d);
  }
  std::uint32_t with_last(Op op) { return with(op, deps_); }
  // What the last chain op waited for; an op off the chain waiting for the given ops.
  const std::vector<std::uint32_t>& last_deps() const { return deps_; }
  std::uint32_t with(Op op, const std::vector<std::uint32_t>& deps) {
    op.phase = phase_;
    return list_.add(op, deps);
  }
  bool has_prev() const { return has_prev_; }
  std::uint32_t prev() const { return prev_; }

 private:
  OpList& list_;
  Phase phase_;
  std::uint32_t prev_ = 0;
  bool has_prev_ = false;
  std::vector<std::uint32_t> pending_;
  std::vector<std::uint32_t> deps_;
};

// `list` without its first-micro-batch-only ops (the forward of the micro-batches after the
// first, which find the parameters gathered): an op that waited for a dropped op waits for what
// that op waited for.
OpList without_first_microbatch_ops(const OpList& list) {
  constexpr std::uint32_t kDropped = std::numeric_limits<std::uint32_t>::max();
  OpList out;
  out.reserve(list.size());
  std::vector<std::uint32_t> index(list.size(), kDropped);
  std::vector<std::vector<std::uint32_t>> inherited(list.size());  // a dropped op's waits
  std::vector<std::uint32_t> deps;
  for (std::uint32_t i = 0; i < list.size(); ++i) {
    deps.clear();
    for (auto d : list.deps_of(i)) {
      if (index[d] != kDropped)
        deps.push_back(index[d]);
      else
        deps.insert(deps.end(), inherited[d].begin(), inherited[d].end());
    }
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    if (list[i].first_microbatch_only)
      inherited[i] = deps;
    else
      index[i] = out.add(list[i], deps);
  }
  return out;
}

// Groups gradients into buckets in the order backward completes them and emits one
// collective per bucket as soon as its last gradient exists (PyTorch DDP, DeepSpeed ZeRO-2/3).
//
// Two closing rules: PyTorch DDP's and Megatron-LM's (a bucket is closed once it holds at least
// the cap), and DeepSpeed's (`flush_before`: stage3.py, reduce_independent_p_g_buckets_and_
// remove_grads, reduces the bucket before a gradient that would take it past reduce_bucket_size).
// `blocking`: the collective runs on the compute stream (DeepSpeed without overlap_comm).
// `sizes`, when given, receives each bucket's element count.
class Bucketer {
 public:
  // `sizes` and `layers` (when given) receive each bucket's elements and the layer of the op
  // that closed it (the bucket's lowest layer: buckets fill in backward order).
  Bucketer(Emitter& e, Op proto, std::int64_t cap_elements, bool flush_before = false,
           bool blocking = false, std::vector<std::int64_t>* sizes = nullptr,
           std::vector<std::int32_t>* layers = nullptr)
      : e_(e),
        proto_(proto),
        cap_(std::max<std::int64_t>(cap_elements, 1)),
        flush_before_(flush_before),
        blocking_(blocking),
        sizes_(sizes),
        layers_(layers) {}
  void add(std::uint32_t producer, std::int64_t grads) {
    if (grads <= 0) return;
    if (flush_before_) {
      if (acc_ > 0 && acc_ + grads > cap_) flush(producer);
      acc_ += grads;
      return;
    }
    acc_ += grads;
    if (acc_ >= cap_) flush(producer);
  }
  void flush(std::uint32_t producer) {
    if (acc_ == 0) return;
    Op op = proto_;
    op.index = index_++;
    op.elements = acc_;
    op.bytes = static_cast<double>(acc_) * dtype_bytes(op.dtype);
    if (blocking_)
      e_.chain(op);
    else
      e_.side(op, {producer});
    if (sizes_) sizes_->push_back(acc_);
    if (layers_) layers_->push_back(e_.edit(producer).layer);
    acc_ = 0;
  }

 private:
  Emitter& e_;
  Op proto_;
  std::int64_t cap_;
  bool flush_before_, blocking_;
  std::vector<std::int64_t>* sizes_;
  std::vector<std::int32_t>* layers_;
  std::int64_t acc_ = 0;
  std::int32_t index_ = 0;
};

// ---- DeepSpeed ZeRO-3's parameter coordinator, replayed on a trace of module uses ----
//
// deepspeed/runtime/zero/partitioned_param_coordinator.py (DeepSpeed master, commit 03aecee),
// PartitionedParameterCoordinator: fetch_sub_module fires at each module's pre-forward and
// pre-backward hook (recompute's forward included). It (1) all-gathers the module's parameters
// that are not available, in one coalesced call, the module waiting for it; (2) walks the
// recorded trace past the module and all-gathers, in one more call, the parameters that are
// not available until stage3_prefetch_bucket_size elements are on their way, or
// stage3_max_live_parameters minus those available; release_sub_module then releases the
// module's parameters unless they are used again within stage3_max_reuse_distance elements of
// the trace or a prefetch already passed their next use (__params_to_release). Parameters of
// at most stage3_param_persistence_threshold elements are persistent: gathered once at the
// first step and never again. One trace covers one micro-batch's forward and backward.
struct ParamTensor {
  std::int64_t id = 0;
  std::int64_t numel = 0;
};
struct ModuleUse {
  std::vector<ParamTensor> tensors;  // all the module's parameters (persistent ones too)
  bool backward = false;             // in the backward list (recompute included)
};
struct Zero3Gather {
  std::int64_t elements = 0;  // the gathered output: each tensor padded to a multiple of DP
  std::size_t issued_at = 0;  // trace position whose hook issues it
  bool defer = false;  // issued in forward, used only in backward: emitted where backward begins
};
struct Zero3Plan {
  // The most parameter elements gathered at once over the trace (a module's own, the
  // prefetched and those kept for reuse): the gathered buffers' peak.
  std::int64_t max_live = 0;
  std::vector<Zero3Gather> gathers;
  std::vector<std::vector<std::size_t>> issue;  // per position: gathers issued there, in order
  std::vector<std::vector<std::size_t>> needs;  // per position: gathers the module waits for
};

Zero3Plan plan_zero3(const std::vector<ModuleUse>& trace, const ParallelPlan& p) {
  Zero3Plan out;
  const std::size_t n = trace.size();
  out.issue.resize(n);
  out.needs.resize(n);
  // Dense tensor ids.
  std::vector<std::int64_t> ids;
  for (const auto& u : trace)
    for (const auto& t : u.tensors) ids.push_back(t.id);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  auto dense = [&](std::int64_t id) {
    return static_cast<std::size_t>(std::lower_bound(ids.begin(), ids.end(), id) - ids.begin());
  };
  std::vector<std::int64_t> numel(ids.size(), 0);
  for (const auto& u : trace)
    for (const auto& t : u.tensors) numel[dense(t.id)] = t.numel;
  auto persistent = [&](std::size_t t) { return numel[t] <= p.zero3_persistence_threshold; };
  // Prefix sums of the trace's elements (every parameter, as __params_to_release counts) and
  // each use's next use of the same tensor.
  std::vector<double> prefix(n + 1, 0.0);
  for (std::size_t j = 0; j < n; ++j) {
    double sum = 0;
    for (const auto& t : trace[j].tensors) sum += static_cast<double>(t.numel);
    prefix[j + 1] = prefix[j] + sum;
  }
  // next use of each (position, tensor slot), flat: slot k of position j at first[j] + k
  std::vector<std::size_t> first(n + 1, 0);
  for (std::size_t j = 0; j < n; ++j) first[j + 1] = first[j] + trace[j].tensors.size();
  std::vector<std::int64_t> next(first[n], -1);
  std::vector<std::int64_t> seen(ids.size(), -1);
  for (std::size_t j = n; j-- > 0;) {
    for (std::size_t k = 0; k < trace[j].tensors.size(); ++k)
      next[first[j] + k] = seen[dense(trace[j].tensors[k].id)];
    for (const auto& t : trace[j].tensors) seen[dense(t.id)] = static_cast<std::int64_t>(j);
  }
  std::vector<bool> avail(ids.size(), false);
  std::vector<std::int64_t> holder(ids.size(), -1);
  std::vector<std::vector<std::size_t>> users;  // per gather: positions that wait for it
  std::int64_t live = 0;
  std::size_t queue = 0;  // next trace position the prefetcher has not passed
  const std::int64_t dp = p.dp;
  auto padded = [dp](std::int64_t e) { return (e + dp - 1) / dp * dp; };
  auto new_gather = [&](std::size_t at) {
    out.gathers.push_back({0, at, false});
    users.emplace_back();
    out.issue[at].push_back(out.gathers.size() - 1);
    return static_cast<std::int64_t>(out.gathers.size() - 1);
  };
  for (std::size_t j = 0; j < n; ++j) {
    // (1) fetch what the module lacks
    std::int64_t g = -1;
    for (const auto& t : trace[j].tensors) {
      const std::size_t d = dense(t.id);
      if (persistent(d) || avail[d]) continue;
      if (g < 0 || p.zero3_per_param_calls) g = new_gather(j);  // 0.3-0.5: one call a parameter
      out.gathers[g].elements += padded(t.numel);
      avail[d] = true;
      holder[d] = g;
      live += t.numel;
    }
    out.max_live = std::max(out.max_live, live);
    for (const auto& t : trace[j].tensors) {
      const std::size_t d = dense(t.id);
      if (persistent(d) || holder[d] < 0) continue;
      auto& nd = out.needs[j];
      if (std::find(nd.begin(), nd.end(), static_cast<std::size_t>(holder[d])) == nd.end()) {
        nd.push_back(static_cast<std::size_t>(holder[d]));
        users[holder[d]].push_back(j);
      }
    }
    // (2) prefetch past the module
    queue = std::max(queue, j + 1);
    // DeepSpeed 0.3-0.5 synchronizes before every gather: a prefetch runs no earlier than the
    // module's own gather would, so the replay fetches each module's parameters at its hook.
    if (p.zero3_prefetch_bucket > 0 && !p.zero3_sync_gathers) {
      const std::int64_t budget = std::min(p.zero3_max_live_params - live, p.zero3_prefetch_bucket);
      std::int64_t prefetching = 0, pg = -1;
      while (queue < n && prefetching < budget) {
        for (const auto& t : trace[queue].tensors) {
          const std::size_t d = dense(t.id);
          if (persistent(d) || avail[d]) continue;
          if (pg < 0 || p.zero3_per_param_calls) pg = new_gather(j);
          out.gathers[pg].elements += padded(t.numel);
          avail[d] = true;
          holder[d] = pg;
          prefetching += t.numel;
        }
        ++queue;
      }
      live += prefetching;
      out.max_live = std::max(out.max_live, live);
    }
    // (3) release after the module's use
    for (std::size_t k = 0; k < trace[j].tensors.size(); ++k) {
      const auto& t = trace[j].tensors[k];
      const std::size_t d = dense(t.id);
      if (persistent(d) || !avail[d]) continue;
      const std::int64_t nu = next[first[j] + k];
      const bool keep =
          nu >= 0 &&
          ((static_cast<std::size_t>(nu) > j + 1 && static_cast<std::size_t>(nu) < queue) ||
           prefix[nu] - prefix[j + 1] < static_cast<double>(p.zero3_max_reuse_distance));
      if (!keep) {
        avail[d] = false;
        live -= t.numel;
      }
    }
  }
  // A gather the forward issues for backward's modules alone waits where backward begins.
  for (std::size_t g = 0; g < out.gathers.size(); ++g) {
    auto& ga = out.gathers[g];
    if (trace[ga.issued_at].backward || users[g].empty()) continue;
    ga.defer = std::all_of(users[g].begin(), users[g].end(),
                           [&](std::size_t u) { return trace[u].backward; });
  }
  return out;
}

// Context parallelism (Megatron-LM --context-parallel-size): each rank holds s / CP tokens of
// every sample, so the ops outside attention are those of a model of sequence s / CP, and its
// dense gradients are reduced over DP x CP ranks, as if those were data-parallel.
ModelSpec cp_local_model(const Scenario& sc) {
  if (sc.plan.cp <= 1) return {};
  ModelSpec m = sc.model;
  m.seq_length /= sc.plan.cp;
  if (m.decoder_seq_length > 0) m.decoder_seq_length /= sc.plan.cp;
  return m;
}
ParallelPlan cp_grad_plan(const Scenario& sc) {
  if (sc.plan.cp <= 1) return {};
  ParallelPlan p = sc.plan;
  p.dp = sc.plan.grad_dp();
  return p;
}

class Builder {
 public:
  explicit Builder(const Scenario& sc)
      : sc_(sc),
        cp_model_(cp_local_model(sc)),
        grad_plan_(cp_grad_plan(sc)),
        m_(sc.plan.cp > 1 ? cp_model_ : sc.model),
        p_(sc.plan.cp > 1 ? grad_plan_ : sc.plan),
        t_(sc.plan.tp),
        dt_(sc.plan.dtype()),
        a_(dtype_bytes(dt_)),
        b_(sc.plan.micro_batch) {}

  // ops false: the roles, their chunks' layer spans and parameters, no op lists (build_layout).
  // reuse false: every stage's lists built, none copied from the stage before (tests compare).
  Workload build(bool ops = true, bool reuse = true) {
    Workload w;
    w.scenario = sc_;
    w.microbatches = static_cast<int>(p_.grad_accum);
    const int v = p_.virtual_stages;
    last_vs_ = p_.pp * v - 1;
    w.roles.reserve(static_cast<std::size_t>(p_.pp));
    for (int s = 0; s < p_.pp; ++s) {
      // A stage whose chunks are the previous stage's moved along by `shift` layers (the
      // middle stages of an even split) gets that stage's lists with the layers renumbered,
      // and the role's bucket state likewise: building them again would give the same ops.
      std::int32_t shift = 0;
      const bool copy = ops && reuse && s > 0 && shifted_from_previous(s, shift);
      if (copy) {
        for (auto& l : megatron_bucket_layers_)
          if (l >= 0) l += shift;
        for (auto& unit : fsdp_step_units_)
          if (unit.layer >= 0) unit.layer += shift;
      } else {
        megatron_buckets_.clear();
        megatron_bucket_layers_.clear();
        fsdp_step_units_.clear();
      }
      Role r;
      r.stage = s;
      r.ranks = p_.dp * p_.tp;
      r.chunks.reserve(static_cast<std::size_t>(v));
      zero3_live_ = 0;
      for (int c = 0; c < v; ++c) {
        Chunk ch = chunk_span(c * p_.pp + s);
        if (copy)
          copy_shifted(w.roles.back().chunks[static_cast<std::size_t>(c)], shift, ch);
        else if (ops || deepspeed_zero3())
          build_chunk(ch, ops);
        r.params += chunk_params(ch);
        r.expert_params += chunk_expert_params(ch);
        r.fsdp_root_params = std::max(r.fsdp_root_params, fsdp_root_params(ch));
        r.chunks.push_back(std::move(ch));
      }
      if (ops) build_step(r);
      r.zero3_live_params = copy ? w.roles.back().zero3_live_params : zero3_live_;
      w.roles.push_back(std::move(r));
    }
    return w;
  }

  // The stages build() copies from the stage before (stages_copied()).
  int stages_copied() {
    last_vs_ = p_.pp * p_.virtual_stages - 1;
    int n = 0;
    std::int32_t shift = 0;
    for (int s = 1; s < p_.pp; ++s) n += shifted_from_previous(s, shift) ? 1 : 0;
    return n;
  }

 private:
  // ---- op factories ----
  Op gemm(std::string_view name, int layer, std::int64_t M, std::int64_t K, std::int64_t N) const {
    Op o;
    o.kind = OpKind::compute;
    o.compute = ComputeClass::gemm;
    o.dtype = dt_;
    o.name = name;
    o.layer = layer;
    o.m = M, o.n = N, o.k = K;
    o.flops = 2.0 * static_cast<double>(M) * static_cast<double>(K) * static_cast<double>(N);
    o.mem_bytes =
        a_ * (static_cast<double>(M) * K + static_cast<double>(K) * N + static_cast<double>(M) * N);
    return o;
  }
  // elements touched, FLOPs per element, bytes read+written per element.
  Op elementwise(std::string_view name, ComputeClass cls, int layer, double elements,
                 double flops_per, double bytes_per) const {
    Op o;
    o.kind = OpKind::compute;
    o.compute = cls;
    o.dtype = dt_;
    o.name = name;
    o.layer = layer;
    o.flops = elements * flops_per;
    o.mem_bytes = elements * bytes_per;
    return o;
  }
  Op comm(std::string_view name, Collective c, CommGroup g, int size, std::int64_t elements,
          DType dt, int layer) const {
    Op o;
    o.kind = OpKind::comm;
    o.collective = c;
    o.group = g;
    o.group_size = size;
    o.elements = elements;
    o.dtype = dt;
    o.bytes = static_cast<double>(elements) * dtype_bytes(dt);
    o.name = name;
    o.layer = layer;
    if (c == Collective::send) o.peer = +1;
    if (c == Collective::recv) o.peer = -1;
    return o;
  }
  Step compute(Op op, std::int64_t grads = 0) const {
    Step s;
    s.op = op;
    s.grad_params = grads;
    return s;
  }
  Step tp(StepKind k, std::int64_t elements, int layer) const {
    Step s;
    s.kind = k;
    s.tp_elements = elements;
    s.op.layer = layer;
    return s;
  }
  // Tokens whose activations an op outside the tensor-parallel region touches on this rank.
  double outside_tokens(std::int64_t tokens) const {
    return p_.sequence_parallel ? static_cast<double>(tokens) / t_ : static_cast<double>(tokens);
  }
  std::int64_t norm_params() const { return commscope::norm_params(m_); }
  double act_bytes_rw() const { return 2.0 * a_; }
  // The unfused attention's softmax over `scores` elements, as Megatron-LM runs it
  // (megatron/core/transformer/dot_product_attention.py, core_attention): its fused
  // scale-mask-softmax reads the scores and writes the probabilities; with dropout, a separate
  // dropout then reads them and writes its output and a 1-byte mask. Backward: the softmax's
  // reads its output and the incoming gradient and writes one (3 passes); dropout's reads the
  // gradient and the mask and writes one.
  Step softmax_dropout(std::string_view name, int layer, double scores) const {
    const double dropout = m_.dropout ? 2.0 * a_ + 1.0 : 0.0;
    Step st = compute(
        elementwise(name, ComputeClass::elementwise, layer, scores, 5, act_bytes_rw() + dropout));
    st.backward_mem = scores * (3.0 * a_ + dropout);
    return st;
  }

  // What selective recompute replays (ParallelPlan::recompute_modules).
  std::uint8_t selective_modules() const {
    return p_.recompute == Recompute::selective ? p_.recompute_modules : 0;
  }
  bool recomputes() const {
    return p_.recompute == Recompute::full || p_.recompute == Recompute::op ||
           selective_modules() != 0;
  }
  // Whether the block at `local` in its chunk replays anything (--recompute-method block
  // leaves the blocks after the first N alone).
  bool recomputes_at(int local) const {
    if (p_.recompute == Recompute::op) return true;
    return p_.recompute == Recompute::full ? p_.full_recompute_at(local) : selective_modules() != 0;
  }

  // torchtitan's op-level selective checkpointing (Recompute::op): what a block's backward
  // replays. PyTorch's selective checkpoint runs the block's forward again, returning the cached
  // output of each op the policy saved (torchtitan's save list: aten.mm except every second one,
  // counted from 1 in each block's forward; the SDPA kernels; _c10d_functional's
  // reduce_scatter_tensor) and running every other op, and the non-reentrant checkpoint stops
  // once the last tensor backward needs exists: the MLP activation's output, the input of the
  // output projection (what follows it is never replayed). torchtitan's Llama writes the
  // projections as separate Linears, run in the order wq, wk, wv, wo, w1, w3, w2
  // (w2(silu(w1(x)) * w3(x))); the block program's fused qkv and gated mlp_in GEMMs are those
  // products side by side, so the replay runs the part of each whose count is even: wk, wo, w3
  // (a plain MLP: wq, wk, wv, wo, in, out; `in` is the fifth, kept). Tensor-parallel
  // all-gathers are replayed (not in the list), reduce-scatters are not; an all-reduce (TP
  // without SP) is. The standard attention core (batched products, softmax) is replayed.
  // A MoE block (torchtitan's MoE module, v0.2.2 models/moe/moe.py, and the save list of its
  // MoE models' parallelize.py): the router's gate is forced to recompute and not counted
  // (per_op_sac_force_recompute_mm_shapes_by_fqns defaults to moe.router.gate); the token
  // dispatch and combine all-to-alls (all_to_all_single, DeepEP's dispatch and combine) are
  // saved; the experts' grouped GEMMs (_grouped_mm, not in the list) are replayed, the output
  // projection too: torchtitan's checkpoint runs without early stop by default
  // ([activation_checkpoint] early_stop false), so the replay goes to the block's end. Expert
  // TP's gather is replayed and its reduce-scatter kept, as TP's; shared experts are Linears in
  // the count, w1, w3, w2 as the dense MLP's.
  // Latent attention (torchtitan's DeepSeek-V3, v0.2.2 models/deepseek_v3/model/model.py, the
  // same save list): its Linears run wq_a (or wq without a query latent), wq_b, wkv_a, wkv_b,
  // wo, the block program's q_down, q_up (q_proj), kv_down, kv_up, attn_out, one product each;
  // the latent norms and the rotary embedding are replayed. torchtitan's MoE and
  // latent-attention models are priced as its v0.2.2 runs them, without early stop by default:
  // their dense blocks' replay also goes to the block's end (w2 replayed when its count is
  // even; DeepSeek-V3's first blocks, Llama 4 Maverick's every other).
  std::vector<Step> op_recompute_program(const std::vector<Step>& prog) const {
    std::vector<Step> out;
    int mm = 0;
    const bool early_stop = !m_.mla() && !m_.moe();
    for (const Step& st : prog) {
      if (early_stop && st.kind == StepKind::compute && st.op.name == "mlp_out")
        break;                                                             // the early stop
      if (st.kind == StepKind::tp_exit && p_.sequence_parallel) continue;  // reduce-scatter kept
      if (st.kind == StepKind::compute && st.op.name == "flash_attn") continue;  // SDPA kept
      if (st.kind == StepKind::ep_dispatch || st.kind == StepKind::ep_combine ||
          st.kind == StepKind::etp_exit)
        continue;  // the all-to-alls' and expert TP's reduce-scatter's outputs kept
      if (st.kind != StepKind::compute || st.op.compute != ComputeClass::gemm ||
          st.op.name == "moe_router" || st.expert) {
        out.push_back(st);  // replayed, not counted
        continue;
      }
      // The products this GEMM stands for, by output width.
      std::vector<std::int64_t> widths{st.op.n};
      if (st.op.name == "qkv")
        widths = {m_.q_dim() / t_, m_.kv_dim() / t_, m_.kv_dim() / t_};
      else if (st.op.name == "mlp_in" && m_.gated_mlp())
        widths = {m_.ffn / t_, m_.ffn / t_};
      else if (st.op.name == "shared_expert_in" && m_.gated_mlp())
        widths = {st.op.n / 2, st.op.n / 2};
      std::int64_t replayed = 0;
      for (std::int64_t w : widths)
        if (++mm % 2 == 0) replayed += w;
      if (replayed == 0) continue;
      Step r = st;
      r.op = gemm(st.op.name, st.op.layer, st.op.m, st.op.k, replayed);
      out.push_back(r);
    }
    return out;
  }

  // ---- programs ----
  void attention(std::vector<Step>& prog, int layer, std::int64_t s_q, std::int64_t s_kv,
                 bool cross, bool first_in_stack) const {
    if (m_.mla() && !cross) {
      attention_mla(prog, layer, s_q);
      return;
    }
    const std::int64_t h = m_.hidden, q = m_.q_dim(), kv = m_.kv_dim(), bias = m_.bias ? 1 : 0;
    const std::int64_t Tq = b_ * s_q, Tkv = b_ * s_kv, heads = m_.heads / t_;
    prog.push_back(tp(StepKind::tp_enter, Tq * h, layer));
    if (!cross) {
      Step qkv = compute(gemm("qkv", layer, Tq, h, (q + 2 * kv) / t_),
                         (h + (m_.qkv_bias ? 1 : bias)) * (q + 2 * kv) / t_);
      qkv.gathers_input = true;
      prog.push_back(qkv);
      if (p_.cp > 1)
        prog.push_back(
            cp_step(StepKind::cp_exchange, Tq * (q + 2 * kv) / t_, Tq * 2 * kv / t_, layer));
    } else {
      Step qs = compute(gemm("cross_q", layer, Tq, h, q / t_), (h + bias) * q / t_);
      qs.gathers_input = true;
      prog.push_back(qs);
      prog.push_back(
          tp(StepKind::tp_enter, Tkv * h, layer));  // the encoder output enters the region
      Step kvs = compute(gemm("cross_kv", layer, Tkv, h, 2 * kv / t_), (h + bias) * 2 * kv / t_);
      kvs.gathers_input = true;
      prog.push_back(kvs);
    }
    // Per-head query and key norms (Qwen3's q_norm and k_norm; --qk-layernorm): a norm's cost
    // over this rank's heads of Q and K, whose weights (replicated) complete here.
    if (m_.qk_norm)
      prog.push_back(
          compute(elementwise("qk_norm", ComputeClass::norm, layer,
                              static_cast<double>(Tq) * q / t_ + static_cast<double>(Tkv) * kv / t_,
                              5, act_bytes_rw()),
                  2 * qk_norm_params(m_)));
    const double score_elems = static_cast<double>(b_) * heads * s_q * s_kv;
    const double core_flops = 2.0 * score_elems * m_.head_dim;
    Op scores = elementwise(cross ? "cross_scores" : "attn_scores", ComputeClass::attention, layer,
                            0, 0, 0);
    scores.flops = core_flops;
    scores.mem_bytes =
        a_ * (static_cast<double>(Tq) * q / t_ + static_cast<double>(Tkv) * kv / t_ + score_elems);
    Step sc = compute(scores, first_in_stack && m_.position == PositionEmbedding::relative
                                  ? m_.relative_attention_buckets * m_.heads / t_
                                  : 0);
    sc.module = core_module();
    prog.push_back(sc);
    Step sm = softmax_dropout(cross ? "cross_softmax" : "softmax", layer, score_elems);
    sm.module = core_module();
    prog.push_back(sm);
    Op values = scores;
    values.name = cross ? "cross_values" : "attn_values";
    values.mem_bytes =
        a_ * (score_elems + static_cast<double>(Tkv) * kv / t_ + static_cast<double>(Tq) * q / t_);
    Step va = compute(values);
    va.module = core_module();
    prog.push_back(va);
    if (p_.attention == AttentionKernel::flash) flash_attention_core(prog, layer, s_q, s_kv, cross);
    if (p_.cp > 1 && !cross)
      prog.push_back(cp_step(StepKind::cp_wait, Tq * q / t_, Tq * 2 * kv / t_, layer));
    prog.push_back(compute(gemm(cross ? "cross_out" : "attn_out", layer, Tq, q / t_, h),
                           q / t_ * h + bias * h));
    prog.push_back(tp(StepKind::tp_exit, Tq * h, layer));
    prog.push_back(
        compute(elementwise(cross ? "cross_residual" : "attn_residual", ComputeClass::elementwise,
                            layer, outside_tokens(Tq) * h, 2, 3.0 * a_)));
  }

  void mlp(std::vector<Step>& prog, int layer, std::int64_t s) const {
    const std::int64_t h = m_.hidden, f = m_.ffn, bias = m_.bias ? 1 : 0;
    const std::int64_t fin = m_.gated_mlp() ? 2 * f : f, T = b_ * s;
    const std::size_t from = prog.size();
    prog.push_back(tp(StepKind::tp_enter, T * h, layer));
    Step in = compute(gemm("mlp_in", layer, T, h, fin / t_), (h + bias) * fin / t_);
    in.gathers_input = true;
    prog.push_back(in);
    prog.push_back(compute(elementwise("mlp_act", ComputeClass::elementwise, layer,
                                       static_cast<double>(T) * f / t_, 8,
                                       (m_.gated_mlp() ? 3.0 : 2.0) * a_)));
    prog.push_back(compute(gemm("mlp_out", layer, T, f / t_, h), f / t_ * h + bias * h));
    prog.push_back(tp(StepKind::tp_exit, T * h, layer));
    // Megatron-Core's "mlp" recompute module: the MLP with its TP collectives (a dense block's).
    for (std::size_t i = from; i < prog.size(); ++i) prog[i].module = recompute_module::mlp;
    prog.push_back(compute(elementwise("mlp_residual", ComputeClass::elementwise, layer,
                                       outside_tokens(T) * h, 2, 3.0 * a_)));
  }

  // ---- mixture of experts, latent attention, context parallelism ----
  bool cp_a2a() const { return sc_.plan.cp_comm_type == CpCommType::a2a; }
  bool cp_hierarchical() const { return sc_.plan.cp_comm_type == CpCommType::a2a_p2p; }
  // The recompute module of the attention core's steps, and of the CP exchange that runs inside
  // the core (ParallelPlan::core_attention_is_recomputable): core_attn, or none.
  std::uint8_t core_module() const {
    return p_.core_attention_is_recomputable() ? recompute_module::core_attn : 0;
  }
  // The CP exchange around the attention core: `ring`, the KV chunk of this rank (K and V,
  // b x s/CP tokens), passed or gathered by the ring and all-gather forms (and a2a+p2p's
  // ring); `a2a`, what the all-to-alls carry: this rank's Q, K and V (cp_exchange) and the
  // attention output (cp_wait). Selective core_attn recompute replays them with the core
  // (under Megatron-Core, Transformer Engine's DotProductAttention runs every form).
  Step cp_step(StepKind k, std::int64_t a2a, std::int64_t ring, int layer) const {
    Step s;
    s.kind = k;
    s.tp_elements = cp_a2a() || cp_hierarchical() ? a2a : ring;
    s.cp_ring_elements = ring;
    s.op.layer = layer;
    s.module = core_module();
    return s;
  }
  // Tokens routed to this rank's experts per micro-batch: its own tokens x top-k, x the load
  // factor (the busiest EP rank's share over the mean, cut at the capacity), or padded to the
  // capacity (Plan::moe_routed_rows).
  std::int64_t moe_routed_tokens(std::int64_t T) const {
    return static_cast<std::int64_t>(
        std::llround(p_.moe_routed_rows(outside_tokens(T), m_.experts_per_token, m_.experts)));
  }
  // A MoE block's MLP (Megatron-LM's MoELayer with the all-to-all token dispatcher): router;
  // dispatch all-to-all over EP; under expert TP the dispatched tokens all-gathered over the
  // TP group; the local experts' GEMMs (one grouped GEMM per projection); the reverse; the
  // combine all-to-all; shared experts as a dense tensor-parallel MLP of shared x moe_ffn.
  void moe_mlp(std::vector<Step>& prog, int layer, std::int64_t s) const {
    const std::int64_t h = m_.hidden, fe = m_.expert_ffn(), T = b_ * s;
    const std::int64_t fe_in = m_.gated_mlp() ? 2 * fe : fe;
    const std::int64_t tokens = static_cast<std::int64_t>(outside_tokens(T));
    const std::int64_t routed = moe_routed_tokens(T), etp = p_.expert_tp;
    // Qwen2-MoE's shared-expert gate is one more output column of the same input.
    const std::int64_t gates = m_.experts + (m_.shared_expert_gate ? 1 : 0);
    prog.push_back(compute(gemm("moe_router", layer, tokens, h, gates), gates * h));
    Step dispatch;
    dispatch.kind = StepKind::ep_dispatch;
    // The all-to-all carries a copy per routed expert; the flex dispatcher's payload is the
    // rank's tokens each once (its copies are the cost layer's), at the same load factor.
    dispatch.tp_elements =
        p_.moe_dispatcher == MoeDispatcher::flex
            ? static_cast<std::int64_t>(std::llround(tokens * p_.moe_load_factor())) * h
            : routed * h;
    dispatch.op.layer = layer;
    prog.push_back(dispatch);
    Step gather = dispatch;
    gather.kind = StepKind::etp_enter;
    gather.tp_elements = routed * etp * h;
    prog.push_back(gather);
    // The expert parameters this rank holds, split between the two projections as counted.
    const std::int64_t held = block_expert_params(m_, layer) / (p_.ep * etp);
    const std::int64_t in_share = held * (h * fe_in + (m_.bias ? fe_in : 0)) /
                                  (h * fe_in + (m_.bias ? fe_in : 0) + fe * h + (m_.bias ? h : 0));
    Step in = compute(gemm("expert_in", layer, routed * etp, h, fe_in / etp), in_share);
    in.expert = true;
    prog.push_back(in);
    Step act = compute(elementwise("expert_act", ComputeClass::elementwise, layer,
                                   static_cast<double>(routed) * fe, 8,
                                   (m_.gated_mlp() ? 3.0 : 2.0) * a_));
    act.module = recompute_module::moe_act;
    prog.push_back(act);
    Step out = compute(gemm("expert_out", layer, routed * etp, fe / etp, h), held - in_share);
    out.expert = true;
    prog.push_back(out);
    Step scatter = gather;
    scatter.kind = StepKind::etp_exit;
    prog.push_back(scatter);
    Step combine = dispatch;
    combine.kind = StepKind::ep_combine;
    prog.push_back(combine);
    if (m_.shared_experts > 0) {
      const std::int64_t fs = m_.shared_experts * fe, fs_in = m_.shared_experts * fe_in;
      const std::int64_t bias = m_.bias ? 1 : 0;
      prog.push_back(tp(StepKind::tp_enter, T * h, layer));
      Step sin =
          compute(gemm("shared_expert_in", layer, T, h, fs_in / t_), (h + bias) * fs_in / t_);
      sin.gathers_input = true;
      prog.push_back(sin);
      prog.push_back(compute(elementwise("shared_expert_act", ComputeClass::elementwise, layer,
                                         static_cast<double>(T) * fs / t_, 8,
                                         (m_.gated_mlp() ? 3.0 : 2.0) * a_)));
      prog.push_back(compute(gemm("shared_expert_out", layer, T, fs / t_, h), fs / t_ * h));
      prog.push_back(tp(StepKind::tp_exit, T * h, layer));
    }
    prog.push_back(compute(elementwise("mlp_residual", ComputeClass::elementwise, layer,
                                       outside_tokens(T) * h, 2, 3.0 * a_)));
  }
  // Multi-head latent attention (DeepSeek-V2/V3; Megatron-Core's MLASelfAttention): query and
  // key/value down-projections with their norms, up-projections split by heads, attention with
  // (nope + rope)-channel keys and v_head_dim-channel values. The down-projections are
  // duplicated Linears (TELinear, parallel_mode "duplicated") on the rank's own tokens, its
  // sequence shard under SP; their outputs, the query latent, the key/value latent and the
  // rotary key, enter the tensor-parallel region before the column-parallel up-projections
  // (gathered under SP, three all-gathers; without SP the copies whose backward all-reduces).
  // (The hidden state was gathered before the down-projections: 7168 channels a token where
  // Megatron moves 2112, and each down-projection ran on every token on every TP rank; found
  // by a closed-form check, 2026-11-30.) Without a query latent (DeepSeek-V2-Lite) the query
  // projection is column-parallel on the hidden state, gathered for it.
  void attention_mla(std::vector<Step>& prog, int layer, std::int64_t s_q) const {
    const std::int64_t h = m_.hidden, T = b_ * s_q, heads = m_.heads / t_;
    const std::int64_t qk = m_.qk_nope_head_dim + m_.qk_rope_head_dim, v = m_.v_head_dim;
    // the down-projections' tokens on this rank
    const std::int64_t local = p_.sequence_parallel && t_ > 1 ? T / t_ : T;
    auto enter = [&](std::int64_t width) {
      prog.push_back(tp(StepKind::tp_enter, T * width, layer));
    };
    if (m_.q_lora_rank > 0) {
      prog.push_back(compute(gemm("q_down", layer, local, h, m_.q_lora_rank), h * m_.q_lora_rank));
      prog.push_back(
          compute(elementwise("q_norm", ComputeClass::norm, layer,
                              static_cast<double>(local) * m_.q_lora_rank, 5, act_bytes_rw()),
                  m_.q_lora_rank));
      enter(m_.q_lora_rank);
      Step up =
          compute(gemm("q_up", layer, T, m_.q_lora_rank, heads * qk), m_.q_lora_rank * heads * qk);
      up.module = recompute_module::mla_up_proj;
      up.gathers_input = true;
      up.gather_width = m_.q_lora_rank;
      prog.push_back(up);
    } else {
      enter(h);
      Step q = compute(gemm("q_proj", layer, T, h, heads * qk), h * heads * qk);
      q.gathers_input = true;
      prog.push_back(q);
    }
    const std::int64_t kv_down = m_.kv_lora_rank + m_.qk_rope_head_dim;
    prog.push_back(compute(gemm("kv_down", layer, local, h, kv_down), h * kv_down));
    prog.push_back(
        compute(elementwise("kv_norm", ComputeClass::norm, layer,
                            static_cast<double>(local) * m_.kv_lora_rank, 5, act_bytes_rw()),
                m_.kv_lora_rank));
    enter(m_.kv_lora_rank);
    Step kv_up =
        compute(gemm("kv_up", layer, T, m_.kv_lora_rank, heads * (m_.qk_nope_head_dim + v)),
                m_.kv_lora_rank * heads * (m_.qk_nope_head_dim + v));
    kv_up.module = recompute_module::mla_up_proj;  // with q_up: Megatron's "mla_up_proj"
    kv_up.gathers_input = true;
    kv_up.gather_width = m_.kv_lora_rank;
    prog.push_back(kv_up);
    enter(m_.qk_rope_head_dim);  // the rotary key, into the heads' attention
    if (p_.cp > 1)               // all-to-all: Q, K (qk each a head) and V; the ring: K and V
      prog.push_back(
          cp_step(StepKind::cp_exchange, T * heads * (2 * qk + v), T * heads * (qk + v), layer));
    const std::int64_t s_kv = s_q * p_.cp;
    const double score_elems = static_cast<double>(b_) * heads * s_q * s_kv;
    Op scores = elementwise("attn_scores", ComputeClass::attention, layer, 0, 0, 0);
    scores.flops = 2.0 * score_elems * qk;
    scores.mem_bytes = a_ * (static_cast<double>(T) * heads * qk +
                             static_cast<double>(b_) * s_kv * heads * qk + score_elems);
    Step sc = compute(scores);
    sc.module = core_module();
    prog.push_back(sc);
    Step sm = softmax_dropout("softmax", layer, score_elems);
    sm.module = core_module();
    prog.push_back(sm);
    Op values = scores;
    values.name = "attn_values";
    values.flops = 2.0 * score_elems * v;
    values.mem_bytes = a_ * (score_elems + static_cast<double>(b_) * s_kv * heads * v +
                             static_cast<double>(T) * heads * v);
    Step va = compute(values);
    va.module = core_module();
    prog.push_back(va);
    if (p_.attention == AttentionKernel::flash)
      flash_attention_core(prog, layer, s_q, s_kv, false, qk, v, heads);
    if (p_.cp > 1)  // all-to-all: the output (v a head); the ring: K and V
      prog.push_back(cp_step(StepKind::cp_wait, T * heads * v, T * heads * (qk + v), layer));
    prog.push_back(compute(gemm("attn_out", layer, T, heads * v, h), heads * v * h));
    prog.push_back(tp(StepKind::tp_exit, T * h, layer));
    prog.push_back(compute(elementwise("attn_residual", ComputeClass::elementwise, layer,
                                       outside_tokens(T) * h, 2, 3.0 * a_)));
  }

  Step norm(std::string_view name, int layer, std::int64_t tokens) const {
    return compute(elementwise(name, ComputeClass::norm, layer, outside_tokens(tokens) * m_.hidden,
                               5, act_bytes_rw()),
                   norm_params());
  }

  std::vector<Step> block_program(int layer) const {
    std::vector<Step> prog;
    BlockKind kind = block_kind(m_, layer);
    const std::int64_t s = kind == BlockKind::encoder ? m_.seq_length : m_.dec_seq();
    const bool first_in_stack = layer == 0 || layer == m_.encoder_layers;
    Step pre_attn = norm("norm_attn", layer, b_ * s);
    pre_attn.module = recompute_module::layernorm;
    prog.push_back(pre_attn);
    attention(prog, layer, s, s * p_.cp, false, first_in_stack);
    if (kind == BlockKind::cross_decoder) {
      prog.push_back(norm("norm_cross", layer, b_ * s));
      attention(prog, layer, s, m_.seq_length, true, false);
    }
    // Sandwich norms (Gemma 2): the attention's and the MLP's outputs are normed before their
    // residual adds, at a norm's cost each (drawn after the sublayer; the add is elementwise).
    if (m_.post_norms) prog.push_back(norm("norm_attn_post", layer, b_ * s));
    // (one pre-norm a block feeds the MLP too where the model shares it: Falcon-7B)
    if (!m_.shared_norm) {
      Step pre_mlp = norm("norm_mlp", layer, b_ * s);
      pre_mlp.module = recompute_module::layernorm;  // Megatron's "layernorm": the two pre-norms
      prog.push_back(pre_mlp);
    }
    if (m_.moe_layer(layer))
      moe_mlp(prog, layer, s);
    else
      mlp(prog, layer, s);
    if (m_.post_norms) prog.push_back(norm("norm_mlp_post", layer, b_ * s));
    if (p_.fp8) fp8_gemms(prog);
    return prog;
  }

  // Input embedding (word + position [+ token type, norm]); `grads` when it completes the
  // embedding gradients (the shared T5 embedding completes at the encoder's).
  std::vector<Step> embedding_program(std::int64_t s, std::int64_t grads) const {
    std::vector<Step> prog;
    const std::int64_t T = b_ * s, h = m_.hidden;
    Op emb = elementwise("embedding", ComputeClass::embedding, kEmbeddingLayer,
                         static_cast<double>(T) * h / t_, 1, 2.0 * a_);
    prog.push_back(compute(emb, grads));
    prog.push_back(
        tp(StepKind::tp_exit, T * h, kEmbeddingLayer));  // vocab-parallel lookup: partial sums
    if (m_.kind == ArchKind::bert)
      prog.push_back(compute(elementwise("embedding_norm", ComputeClass::norm, kEmbeddingLayer,
                                         outside_tokens(T) * h, 5, act_bytes_rw())));
    if (m_.dropout)
      prog.push_back(
          compute(elementwise("embedding_dropout", ComputeClass::elementwise, kEmbeddingLayer,
                              outside_tokens(T) * h, 1, act_bytes_rw() + 1)));
    return prog;
  }

  std::vector<Step> head_program() const {
    std::vector<Step> prog;
    const OuterParams outer = outer_params(m_);
    const std::int64_t s = m_.dec_seq(), T = b_ * s, h = m_.hidden;
    if (outer.final_norm > 0) {
      Step n = norm("final_norm", kHeadLayer, T);
      n.grad_params = outer.final_norm - t5_encoder_norm_params();  // T5: the decoder's only
      prog.push_back(n);
    }
    if (outer.pooler > 0)
      prog.push_back(compute(gemm("pooler", kHeadLayer, b_, h, h), outer.pooler));
    prog.push_back(tp(StepKind::tp_enter, T * h, kHeadLayer));
    // LM head: its own weight when untied; the last stage's copy of a tied embedding under PP;
    // under PP 1 a tied head's gradient completes at the embedding.
    std::int64_t head_grads = !m_.tied_embeddings ? outer.lm_head / t_
                              : p_.pp > 1         ? outer.word_embedding / t_
                                                  : 0;
    Step head = compute(gemm("lm_head", kHeadLayer, T, h, m_.vocab / t_), head_grads);
    head.gathers_input = true;
    prog.push_back(head);
    Step loss = compute(elementwise("cross_entropy", ComputeClass::loss, kHeadLayer,
                                    static_cast<double>(T) * m_.vocab / t_, 5, a_ + 4.0));
    loss.vocab_parallel_loss = true;
    prog.push_back(loss);
    return prog;
  }

  // Multi-token prediction, depth d (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report",
  // section 2.2; Megatron-Core's MultiTokenPredictionLayer). Before its block: the shared
  // embedding of the tokens shifted by d + 1 (the last stage's copy under PP, whose gradient
  // the first depth completes), its norm (enorm) and the previous depth's hidden states' norm
  // (hnorm), and eh_proj, a column-parallel 2h -> h projection of their concatenation whose
  // output is all-gathered over TP (gather_from_tensor_model_parallel_region) and, under SP,
  // cut back to the sequence shards (scatter_to_sequence_parallel_region: its backward
  // all-gathers again). After the block (block_program(mtp_block_layer)): its own final norm,
  // the shared output head (the model's gradient, not a second one) and a second
  // vocab-parallel cross entropy.
  std::vector<Step> mtp_input_program(int depth) const {
    const std::int64_t T = b_ * m_.dec_seq(), h = m_.hidden;
    const int layer = mtp_block_layer(m_, depth);
    std::vector<Step> prog = embedding_program(m_.dec_seq(), depth == 0 ? mtp_embedding_copy() : 0);
    prog.push_back(norm("mtp_enorm", layer, T));
    prog.push_back(norm("mtp_hnorm", layer, T));
    prog.push_back(tp(StepKind::tp_enter, T * 2 * h, layer));
    Step proj =
        compute(gemm("mtp_eh_proj", layer, T, 2 * h, h / t_), mtp_projection_params(m_) / t_);
    proj.gathers_input = true;
    prog.push_back(proj);
    prog.push_back(tp(StepKind::tp_gather, T * h, layer));
    return prog;
  }
  std::vector<Step> mtp_output_program() const {
    std::vector<Step> head = head_program();  // final norm, head and loss as the model's
    for (Step& st : head) {
      if (st.kind == StepKind::compute && st.op.compute == ComputeClass::gemm) st.grad_params = 0;
      if (st.kind == StepKind::compute && st.op.compute == ComputeClass::norm) {
        st.op.name = "mtp_final_norm";
        st.grad_params = norm_params();
      }
    }
    return head;
  }
  // The last stage's parameters for MTP: each depth's block, projection and norms, and the
  // embedding's copy when the first stage holds the model's.
  std::int64_t mtp_params() const {
    std::int64_t n = 0;
    for (int d = 0; d < p_.mtp_layers; ++d) n += held_mtp_params(d);
    return n + mtp_embedding_copy();
  }
  // A tied head is already the last stage's copy of the embedding.
  std::int64_t mtp_embedding_copy() const {
    return p_.mtp_layers > 0 && last_vs_ != 0 && !m_.tied_embeddings
               ? outer_params(m_).word_embedding / t_
               : 0;
  }
  // Depth d's module as this rank holds it: split parts over TP, its routed experts over
  // EP x expert TP (as held_expert_params), the norms whole.
  std::int64_t held_mtp_params(int d) const {
    const int l = mtp_block_layer(m_, d);
    return block_params(m_, l, t_) +
           (m_.moe() ? held_expert_params(l) - block_expert_params(m_, l) / t_ : 0) +
           mtp_projection_params(m_) / t_ + mtp_norm_params(m_);
  }

  // ---- modern training (issue 15; docs/workload.md, "Attention kernels" and "FP8") ----
  // FlashAttention-2 (Dao 2023, "FlashAttention-2: Faster Attention with Better Parallelism and
  // Work Partitioning", section 4.1): the scores, softmax (and dropout) and attention over values
  // of the standard core become one fused kernel. Per head of dimension d, forward 4 s_q s_kv d
  // FLOPs (two matmuls), halved under the causal mask (the kernel skips the masked blocks:
  // decoder self-attention); backward 2.5 times the forward (five matmuls: QK^T recomputed,
  // dV, dP, dQ, dK). HBM traffic: Q, K, V read and O and the logsumexp (fp32, one per row and
  // head) written in forward; Q, K, V, O, dO, logsumexp and the fp32 row sums D = rowsum(dO o O)
  // read and dQ, dK, dV written in backward; no s_q x s_kv tensor ever reaches HBM. A core_attn
  // step only under Megatron-Core (ParallelPlan::replays_fused_attention): its selective
  // recompute runs the kernel's forward again before its backward; elsewhere selective
  // recompute has nothing left to replay. Latent attention
  // (DeepSeek-V3's MLA, as Transformer Engine's fused attention runs it) has query/key heads of
  // qk channels and value heads of v: 2 s_q s_kv (qk + v) FLOPs a head forward, the same 2.5
  // backward, and Q, K of qk and V, O of v channels a head.
  void flash_attention_core(std::vector<Step>& prog, int layer, std::int64_t s_q, std::int64_t s_kv,
                            bool cross, std::int64_t qk_head = 0, std::int64_t v_head = 0,
                            std::int64_t kv_heads_local = 0) const {  // MLA: all three given
    // The standard core (scores, softmax, attention over values) goes; the scores step carried
    // T5's relative-position-bias gradient, which the fused kernel keeps.
    const std::int64_t bias_grads = prog[prog.size() - 3].grad_params;
    prog.resize(prog.size() - 3);
    const bool mla = qk_head > 0;
    const std::int64_t qk = mla ? qk_head : m_.head_dim, v = mla ? v_head : m_.head_dim;
    const double heads = static_cast<double>(m_.heads / t_), b = static_cast<double>(b_);
    const double causal = !cross && block_kind(m_, layer) != BlockKind::encoder ? 0.5 : 1.0;
    const double fwd = 2.0 * b * heads * static_cast<double>(s_q) * static_cast<double>(s_kv) *
                       static_cast<double>(qk + v) * causal;
    const double tq = static_cast<double>(b_ * s_q), tkv = static_cast<double>(b_ * s_kv);
    // Per token on this rank: Q and O over the local heads, K and V over the local KV heads
    // (grouped-query attention's whole width over TP, as the standard core counts them).
    const double q_w = static_cast<double>(mla ? m_.heads / t_ * qk : m_.q_dim() / t_);
    const double o_w = static_cast<double>(mla ? m_.heads / t_ * v : m_.q_dim() / t_);
    const double k_w = static_cast<double>(mla ? kv_heads_local * qk : m_.kv_dim() / t_);
    const double v_w = static_cast<double>(mla ? kv_heads_local * v : m_.kv_dim() / t_);
    const double Q = tq * q_w, O = tq * o_w, K = tkv * k_w, V = tkv * v_w;
    const double rows = b * heads * static_cast<double>(s_q);  // logsumexp entries
    Op fa = elementwise(cross ? "cross_flash_attn" : "flash_attn", ComputeClass::attention, layer,
                        0, 0, 0);
    fa.flops = fwd;
    // The shape in PaLM's terms (queries, keys, width) for the model-FLOP count (MFU): 4 m n k
    // forward is 2 m n q_w for the scores and 2 m n o_w for the context, so k is the mean of
    // the two widths (they differ under latent attention: 192 and 128 per head in DeepSeek-V3).
    fa.m = b_ * s_q, fa.n = s_kv, fa.k = static_cast<std::int64_t>(std::llround((q_w + o_w) / 2));
    fa.mem_bytes = a_ * (Q + K + V + O) + 4.0 * rows;
    Step st = compute(fa, bias_grads);
    st.backward_flops = 2.5 * fwd;
    st.backward_mem = a_ * (Q + 2.0 * O + K + V) + 2.0 * 4.0 * rows  // read Q, O, dO, K, V, lse, D
                      + a_ * (Q + K + V);                            // write dQ, dK, dV
    st.module = core_module();
    prog.push_back(st);
  }

  // FP8 (NVIDIA Transformer Engine, as Megatron-LM --fp8-format hybrid runs it): every GEMM of
  // a transformer block runs on the FP8 tensor cores with FP8 inputs and a bf16/fp16 output;
  // a memory-bound cast op before each: forward casts the input activation (M x K) each
  // micro-batch and the weight (K x N) once per iteration (TE's is_first_microbatch weight
  // cache, amortised over the micro-batches), reading a_ and writing 1 byte per element; its
  // backward casts the output gradient (M x N, a_ + 1 bytes) and writes the FP8 transposes of
  // input and weight that Hopper's FP8 GEMMs need (read and write 1 byte per element). The
  // embedding, LM head and loss stay in the plan's precision, as in Megatron-LM. Under
  // --fp8-param-gather the weights are FP8 already: in place of the weight's cast (a_ + 1
  // bytes an element) its transpose is made once an iteration after the gather (1 + 1 bytes),
  // counted as that many bytes of the cast's elements.
  void fp8_gemms(std::vector<Step>& prog) const {
    std::vector<Step> out;
    out.reserve(prog.size() * 2);
    const double m = static_cast<double>(std::max<std::int64_t>(p_.grad_accum, 1)) *
                     (p_.fp8_param_gather ? (a_ + 1.0) / 2.0 : 1.0);
    for (Step& st : prog) {
      if (st.kind == StepKind::compute && st.op.compute == ComputeClass::gemm) {
        const double M = static_cast<double>(st.op.m), K = static_cast<double>(st.op.k),
                     N = static_cast<double>(st.op.n);
        Step cast = compute(elementwise("fp8_cast", ComputeClass::elementwise, st.op.layer,
                                        M * K + K * N / m, 2, a_ + 1.0));
        cast.module = st.module;  // replayed with its GEMM
        cast.backward_flops = 2.0 * (M * N + M * K + K * N);
        cast.backward_mem = (a_ + 1.0) * M * N + 2.0 * (M * K + K * N);
        out.push_back(cast);
        st.op.dtype = DType::fp8;
        st.op.mem_bytes = M * K + K * N + a_ * M * N;
      }
      out.push_back(st);
    }
    prog = std::move(out);
  }

  // ---- emitting programs as ops ----
  // --tp-comm-overlap (Transformer Engine userbuffers, as Megatron-Core runs it with sequence
  // parallelism): a sequence-parallel all-gather runs beside the GEMM it feeds, a reduce-scatter
  // beside the GEMM whose output it scatters (pipelined over TP chunks in TE; here the two run
  // side by side, so a pair takes the longer of the two and the first or last chunk's
  // exposure is not counted). Only where the neighbouring step is that GEMM.
  static constexpr std::uint32_t kNoOp = 0xffffffffu;
  bool is_tp_gemm(const std::vector<Step>& prog, std::size_t i, std::uint8_t only) const {
    if (!p_.tp_comm_overlap || !p_.sequence_parallel || i >= prog.size()) return false;
    const Step& g = prog[i];
    // Transformer-block GEMMs only: Megatron-Core's output layer is its own
    // ColumnParallelLinear, outside Transformer Engine's userbuffers.
    return g.kind == StepKind::compute && g.op.compute == ComputeClass::gemm &&
           g.op.layer != kHeadLayer && g.op.layer != kEmbeddingLayer &&
           !(only && !(g.module & only));
  }
  // The step at i, or at i + 1 after its FP8 input cast (fp8_gemms puts the cast first), if it
  // is a GEMM; else none.
  static const Step* gemm_at(const std::vector<Step>& prog, std::size_t i) {
    if (i < prog.size() && prog[i].kind == StepKind::compute && prog[i].op.name == "fp8_cast") ++i;
    return i < prog.size() && prog[i].kind == StepKind::compute &&
                   prog[i].op.compute == ComputeClass::gemm
               ? &prog[i]
               : nullptr;
  }
  // The type a sequence-parallel all-gather moves when it feeds the GEMM at i (or at i + 1
  // after its FP8 cast): under --fp8 Transformer Engine gathers the FP8 bytes its GEMM reads
  // (v1.8 LayerNormLinear/LayerNormMLP write the norm's output as FP8 and gather it, and the
  // backward re-gathers that saved FP8 input for wgrad; module/base.py grad_output_preprocess
  // casts the output gradient to FP8 before gathering it). Reduce-scatters carry GEMM outputs,
  // 16-bit.
  DType gathered_type(const std::vector<Step>& prog, std::size_t i) const {
    const Step* g = gemm_at(prog, i);
    return g && g->op.dtype == DType::fp8 ? DType::fp8 : dt_;
  }
  // A userbuffers GEMM (is_tp_gemm) at i, or at i + 1 after its FP8 input cast.
  bool gemm_follows(const std::vector<Step>& prog, std::size_t i, std::uint8_t only) const {
    const Step* g = gemm_at(prog, i);
    return g && is_tp_gemm(prog, static_cast<std::size_t>(g - prog.data()), only);
  }

  // Programs are built once per kind of block; `layer` stamps the block's index on its ops.
  // `only`: the recompute modules to replay (selective recompute); 0: every step.
  void emit_forward(Emitter& e, const std::vector<Step>& prog, int layer,
                    std::uint8_t only = 0) const {
    std::uint32_t beside = kNoOp;  // a TP collective overlapped with the next GEMM
    for (std::size_t idx = 0; idx < prog.size(); ++idx) {
      const Step& st = prog[idx];
      if (only && !(st.module & only)) continue;
      switch (st.kind) {
        case StepKind::compute:
          if (zero3_mode_ != Zero3Mode::off) module_hook(e, st, layer, idx);
          e.edit(e.chain(st.op)).layer = layer;
          // The all-gather ran beside the GEMM (and its FP8 input cast): the next op waits.
          if (beside != kNoOp && st.op.compute == ComputeClass::gemm)
            e.need(std::exchange(beside, kNoOp));
          break;
        case StepKind::tp_enter:
          if (t_ > 1 && p_.sequence_parallel) {
            Op ag = comm("sp_all_gather", Collective::all_gather, CommGroup::tensor, t_,
                         st.tp_elements, gathered_type(prog, idx + 1), layer);
            if (gemm_follows(prog, idx + 1, only))
              beside = e.with_next(ag);
            else
              e.chain(ag);
          }
          break;
        case StepKind::tp_exit:
          if (t_ > 1) {
            Op out =
                comm(p_.sequence_parallel ? "sp_reduce_scatter" : "tp_all_reduce",
                     p_.sequence_parallel ? Collective::reduce_scatter : Collective::all_reduce,
                     CommGroup::tensor, t_, st.tp_elements, dt_, layer);
            if (idx > 0 && is_tp_gemm(prog, idx - 1, only))
              e.need(e.with_last(out));
            else
              e.chain(out);
          }
          break;
        case StepKind::tp_gather:
          if (t_ > 1)
            e.chain(comm("mtp_proj_all_gather", Collective::all_gather, CommGroup::tensor, t_,
                         st.tp_elements, dt_, layer));
          break;
        default:
          emit_moe_cp(e, st, layer, false);
          break;
      }
      if (st.vocab_parallel_loss && t_ > 1) {
        // Vocab-parallel cross-entropy: max, sum of exponentials, target logit (fp32, b x s).
        const std::int64_t T = b_ * m_.dec_seq();
        for (auto nm : {"ce_max", "ce_sum_exp", "ce_target"})
          e.chain(
              comm(nm, Collective::all_reduce, CommGroup::tensor, t_, T, DType::fp32, kHeadLayer));
      }
    }
  }

  void emit_backward(Emitter& e, const std::vector<Step>& prog, int layer, Bucketer* grads) const {
    std::uint32_t beside = kNoOp, beside_wgrad = kNoOp;  // TP collectives beside the next GEMM
    std::vector<std::uint32_t> gemm_deps;                // what the last GEMM waited for
    for (auto it = prog.rbegin(); it != prog.rend(); ++it) {
      const Step& st = *it;
      const std::size_t idx = prog.size() - 1 - static_cast<std::size_t>(it - prog.rbegin());
      switch (st.kind) {
        case StepKind::compute: {
          if (zero3_mode_ != Zero3Mode::off) module_hook(e, st, layer, idx);
          if (t_ > 1 && p_.sequence_parallel &&
              st.gathers_input) {  // Megatron re-gathers for wgrad
            Op ag = comm("sp_all_gather_wgrad", Collective::all_gather, CommGroup::tensor, t_,
                         st.op.m * (st.gather_width > 0 ? st.gather_width : m_.hidden),
                         gathered_type(prog, idx), layer);
            // The wgrad input's all-gather beside the GEMM's backward, with or without
            // userbuffers: Transformer Engine's linear layers (LayerNormLinear, LayerNormMLP:
            // "Overlap input AG with dgrad") and Megatron-Core's own ColumnParallelLinear (the
            // LM head) launch it asynchronously before the dgrad GEMM; with --tp-comm-overlap
            // it is TE's bulk overlap instead.
            beside_wgrad = e.with_next(ag);
          }
          std::uint32_t i = e.chain(st.op);
          if (st.op.compute == ComputeClass::gemm) {
            gemm_deps = e.last_deps();
            if (beside != kNoOp) e.need(std::exchange(beside, kNoOp));
          }
          if (beside_wgrad != kNoOp) e.need(std::exchange(beside_wgrad, kNoOp));
          Op& op = e.edit(i);
          op.layer = layer;
          op.flops *= 2;  // data gradient and weight (or second input) gradient
          op.mem_bytes *= 2;
          if (st.backward_flops >= 0) op.flops = st.backward_flops;
          if (st.backward_mem >= 0) op.mem_bytes = st.backward_mem;
          op.grad_params = st.grad_params;
          if (st.expert) {
            if (expert_grads_) expert_grads_->add(i, st.grad_params);
          } else if (grads) {
            grads->add(i, st.grad_params);
          } else if (ds_per_param_reduce()) {
            ds_reduce_per_param(e, st, layer,
                                prog.size() - 1 - static_cast<std::size_t>(it - prog.rbegin()));
          }
          break;
        }
        case StepKind::tp_enter:
          if (t_ > 1) {
            Op out =
                comm(p_.sequence_parallel ? "sp_reduce_scatter" : "tp_all_reduce",
                     p_.sequence_parallel ? Collective::reduce_scatter : Collective::all_reduce,
                     CommGroup::tensor, t_, st.tp_elements, dt_, layer);
            // The dgrad's reduce-scatter beside the GEMM that produced it (this step's
            // successor in forward order, chained last but for its FP8 cast's backward): under
            // sequence parallelism TE and Megatron-Core launch it asynchronously and compute
            // the weight gradient meanwhile ("Overlap dgrad-RS/AR with wgrad"), userbuffers or
            // not, the LM head's (Megatron-Core's own linear) too. Without sequence parallelism
            // the all-reduce does the same where the plan runs Megatron-LM's asynchronous TP
            // all-reduce (--async-tensor-model-parallel-allreduce; Megatron-Core's
            // LinearWithGradAccumulationAndAsyncCommunication, allreduce_dgrad), else it stays on
            // the chain (Megatron-LM before 2021-09, commscope's own pattern).
            if ((p_.sequence_parallel || p_.tp_async_allreduce) && gemm_at(prog, idx + 1) &&
                !gemm_deps.empty())
              e.need(e.with(out, gemm_deps));
            else
              e.chain(out);
          }
          break;
        case StepKind::tp_exit:
          if (t_ > 1 && p_.sequence_parallel) {
            Op ag = comm("sp_all_gather", Collective::all_gather, CommGroup::tensor, t_,
                         st.tp_elements, idx > 0 ? gathered_type(prog, idx - 1) : dt_, layer);
            if (idx > 0 && is_tp_gemm(prog, idx - 1, 0))
              beside = e.with_next(ag);
            else
              e.chain(ag);
          }
          break;
        case StepKind::tp_gather:  // the sequence-parallel scatter's backward
          if (t_ > 1 && p_.sequence_parallel)
            e.chain(comm("mtp_proj_all_gather", Collective::all_gather, CommGroup::tensor, t_,
                         st.tp_elements, dt_, layer));
          break;
        default:
          emit_moe_cp(e, st, layer, true);
          break;
      }
    }
  }

  // The MoE and CP steps, forward or backward. Dispatch and combine are all-to-alls of the
  // routed tokens over EP in both directions (backward: their gradients, the other way);
  // expert TP all-gathers the dispatched tokens before the experts and reduce-scatters after
  // (backward: the reverse). The CP ring (ring attention, Megatron-LM / Transformer Engine):
  // CP - 1 steps, each passing a KV chunk to the next rank, overlapped with the attention core
  // and awaited after it; backward passes the KV chunk and its gradient dKV, twice the bytes.
  void emit_moe_cp(Emitter& e, const Step& st, int layer, bool backward) const {
    const int etp = p_.expert_tp;
    switch (st.kind) {
      case StepKind::ep_dispatch:
      case StepKind::ep_combine: {
        if (p_.ep <= 1) break;
        const bool dispatch = st.kind == StepKind::ep_dispatch;
        std::string_view name = dispatch ? (backward ? "moe_dispatch_backward" : "moe_dispatch")
                                         : (backward ? "moe_combine_backward" : "moe_combine");
        Op op = comm(name, Collective::all_to_all, CommGroup::expert, p_.ep, st.tp_elements, dt_,
                     layer);
        if (p_.moe_dispatcher == MoeDispatcher::flex) op.tag = OpTag::ep_forwarded;
        e.chain(op);
        break;
      }
      case StepKind::etp_enter:
      case StepKind::etp_exit: {
        if (etp <= 1) break;
        const bool gather = (st.kind == StepKind::etp_enter) != backward;
        e.chain(comm(gather ? "moe_etp_all_gather" : "moe_etp_reduce_scatter",
                     gather ? Collective::all_gather : Collective::reduce_scatter,
                     CommGroup::tensor, etp, st.tp_elements, dt_, layer));
        break;
      }
      case StepKind::cp_exchange:
      case StepKind::cp_wait: {
        if (sc_.plan.cp <= 1) break;
        const bool issue = (st.kind == StepKind::cp_exchange) != backward;
        if (cp_hierarchical()) {
          // a2a+p2p (Transformer Engine's AttnFuncWithCPAndKVP2P with an all-to-all group): the
          // all-to-alls of the a2a form over the inner level (cp_a2a CP neighbours), around the
          // ring over the outer one (cp / cp_a2a ranks cp_a2a apart), which passes the KV chunks
          // of the gathered sequence's 1 / cp_a2a of the heads: as many elements as this rank's
          // chunk. Forward: Q, K, V all-to-all, ring beside the core, output all-to-all;
          // backward: dO all-to-all, the ring of KV and dKV, dQ, dK, dV all-to-all.
          const int a = sc_.plan.cp_a2a, r = sc_.plan.cp_ring();
          const bool qkv = st.kind == StepKind::cp_exchange;
          Op a2a = comm(qkv ? (backward ? "cp_dqkv_all_to_all" : "cp_qkv_all_to_all")
                            : (backward ? "cp_dout_all_to_all" : "cp_out_all_to_all"),
                        Collective::all_to_all, CommGroup::context, a, st.tp_elements, dt_, layer);
          place_sub_group(a2a, a, cp_level_per_node(a, 1));
          if (issue) {
            e.chain(a2a);
            issue_ring(e, st.cp_ring_elements, r, a, backward, layer);
          } else {
            await_ring(e);
            e.chain(a2a);
          }
          break;
        }
        if (cp_a2a()) {
          // All-to-all CP (DeepSpeed-Ulysses): this rank's s/CP tokens of every head in, the
          // whole sequence of its heads / CP out; on the chain, nothing to overlap them with.
          // Forward: Q, K, V before the core, its output after; backward: the output's
          // gradient before the backward core, dQ, dK, dV after. NCCL's count: the send buffer.
          const bool qkv = st.kind == StepKind::cp_exchange;
          e.chain(comm(qkv ? (backward ? "cp_dqkv_all_to_all" : "cp_qkv_all_to_all")
                           : (backward ? "cp_dout_all_to_all" : "cp_out_all_to_all"),
                       Collective::all_to_all, CommGroup::context, sc_.plan.cp, st.tp_elements, dt_,
                       layer));
          break;
        }
        if (sc_.plan.cp_comm_type == CpCommType::all_gather) {
          // All-gather CP: K and V of the whole sequence gathered before the attention core
          // (forward, and again in backward: they are not kept), dK and dV reduce-scattered
          // back to their owners after the backward core; each on the chain. NCCL's count: the
          // gathered (scattered) buffer, CP x this rank's chunk.
          const std::int64_t all = sc_.plan.cp * st.tp_elements;
          if (issue)
            e.chain(comm("cp_kv_all_gather", Collective::all_gather, CommGroup::context,
                         sc_.plan.cp, all, dt_, layer));
          else if (backward)
            e.chain(comm("cp_dkv_reduce_scatter", Collective::reduce_scatter, CommGroup::context,
                         sc_.plan.cp, all, dt_, layer));
          break;
        }
        if (issue)
          issue_ring(e, st.cp_ring_elements, sc_.plan.cp, 1, backward, layer);
        else
          await_ring(e);
        break;
      }
      default:
        break;
    }
  }

  // The ring's exchange over `size` CP ranks `apart` CP ranks apart: the KV chunk (`elements`)
  // passed size - 1 times in forward, with its gradient in backward; issued beside the chain,
  // after the op before it, and awaited by await_ring. Messages as Transformer Engine's
  // AttnFuncWithCPAndKVP2P sends them, one a step: size - 1 forward; size backward (KV alone
  // first, KV and dKV together between, dKV alone last).
  // Forward, the core runs a step per block and its last step needs the last message: with
  // FlashAttention (one op, next on the chain) the core waits for the pass with its last
  // 1 / size only (OpTag::cp_ring_steps, run_list), so a ring longer than the core costs
  // c + (size - 1) s, as TE's does, not (size - 1) s. The standard core (three ops, which TE
  // does not run under CP) waits after its last op, as before.
  void issue_ring(Emitter& e, std::int64_t elements, int size, int apart, bool backward,
                  int layer) const {
    const std::int64_t steps = size - 1;
    Op op = comm(backward ? "cp_kv_dkv_send" : "cp_kv_send", Collective::send, CommGroup::context,
                 size, (backward ? 2 : 1) * steps * elements, dt_, layer);
    op.messages = static_cast<std::int32_t>(backward ? size : steps);
    const bool steps_of_core = !backward && p_.attention == AttentionKernel::flash;
    if (steps_of_core) op.tag = OpTag::cp_ring_steps;
    if (size < sc_.plan.cp) place_sub_group(op, size, cp_level_per_node(size, apart));
    cp_op_ = e.has_prev() ? e.side(op, {e.prev()}) : e.side(op, {});
    if (steps_of_core) e.need(cp_op_);
    cp_pending_ = true;
  }
  void await_ring(Emitter& e) const {
    if (!cp_pending_) return;
    e.need(cp_op_);
    cp_pending_ = false;
  }
  // How many of a level of `size` CP ranks, `apart` CP ranks (TP x apart ranks) apart, share a
  // node (place_group's count for the whole CP group, apart 1).
  int cp_level_per_node(int size, int apart) const {
    const int stride = p_.tp * apart;
    return stride >= sc_.gpus_per_node ? 1 : std::min(size, sc_.gpus_per_node / stride);
  }

  // ZeRO-3: gather a module's parameters before its forward and before its backward.
  void gather_params(Emitter& e, std::int64_t params, int layer) const {
    if (p_.framework != Framework::none || p_.zero != 3 || p_.dp == 1 || params == 0) return;
    Op gather = comm("zero3_param_all_gather", Collective::all_gather, CommGroup::data, p_.dp,
                     params, dt_, layer);
    gather.tag = OpTag::param_gather;
    std::uint32_t i = e.side(gather, {});
    e.need(i);
  }

  // Activation elements that cross a pipeline boundary after block `end` (exclusive).
  std::int64_t boundary_elements(int end) const {
    std::int64_t tokens = end <= m_.encoder_layers ? m_.seq_length
                          : m_.encoder_layers > 0  ? m_.seq_length + m_.dec_seq()
                                                   : m_.dec_seq();
    std::int64_t e = b_ * tokens * m_.hidden;
    return p_.sequence_parallel ? e / t_ : e;
  }
  // Pipeline tensors partitioned over TP (ParallelPlan::pipe_partitioned; sequence parallelism
  // already splits them): a rank sends and receives its 1/TP slice (DeepSpeed's
  // PartitionedTensor pads the last one), and the receiver all-gathers the whole over TP.
  bool pipe_partitioned() const { return p_.pipe_partitioned && t_ > 1 && !p_.sequence_parallel; }
  std::int64_t p2p_elements(int end) const {
    const std::int64_t e = boundary_elements(end);
    return pipe_partitioned() ? (e + t_ - 1) / t_ : e;
  }
  // The receive at stage boundary `end` (and, partitioned, the all-gather of the slices).
  void receive(Emitter& e, std::string_view recv, std::string_view gather, int end,
               int layer) const {
    e.chain(comm(recv, Collective::recv, CommGroup::pipeline, 2, p2p_elements(end), dt_, layer));
    if (pipe_partitioned())
      e.chain(comm(gather, Collective::all_gather, CommGroup::tensor, t_, boundary_elements(end),
                   dt_, layer));
  }

  std::int64_t embedding_grads() const {
    OuterParams o = outer_params(m_);
    return o.word_embedding / t_ + o.position_embedding;
  }
  // T5's encoder final norm (h): on the chunk of the encoder's last block, as Megatron's
  // encoder stage applies it before the encoder output crosses to the decoder stages.
  std::int64_t t5_encoder_norm_params() const {
    return m_.kind == ArchKind::t5 && m_.encoder_layers > 0 ? norm_params() : 0;
  }
  bool t5_encoder_norm_here(const Chunk& ch) const {
    return t5_encoder_norm_params() > 0 && ch.first_layer < m_.encoder_layers &&
           m_.encoder_layers <= ch.first_layer + ch.layers;
  }
  // T5 under PP: a chunk that runs the decoder's input embedding but holds no copy of the tied
  // word embedding otherwise (neither the first nor the last virtual stage: Megatron's
  // pipeline_model_parallel_split_rank stage when PP > 2) holds its own copy, completed by the
  // decoder embedding's backward and summed in the embedding all-reduce.
  bool t5_decoder_embedding_copy(const Chunk& ch) const {
    return m_.kind == ArchKind::t5 && m_.tied_embeddings && m_.encoder_layers > 0 &&
           ch.first_layer <= m_.encoder_layers && m_.encoder_layers < ch.first_layer + ch.layers &&
           ch.virtual_stage != 0 && ch.virtual_stage != last_vs_;
  }
  // The encoder final norm's parameters when block l is the encoder's last and the chunk runs it.
  std::int64_t t5_norm_with(int l, const std::vector<Step>& enc_norm) const {
    return l == m_.encoder_layers - 1 && !enc_norm.empty() ? t5_encoder_norm_params() : 0;
  }
  // Virtual stage vs's layers, as build() lays them (no ops).
  // Whether stage s's chunks are stage s-1's moved along by the same `shift` layers, so that
  // build_chunk would emit the same ops with the layers renumbered: neither holds the
  // embedding or the head, their blocks pair up (kind, the first of a stack, MoE or dense,
  // parameters) and so do the tensors at their boundaries. Not for DeepSpeed's ZeRO-3 (its
  // trace is per chunk) nor T5 (whose stacks meet inside a stage).
  bool shifted_from_previous(int s, std::int32_t& shift) const {
    if (deepspeed_zero3() || m_.kind == ArchKind::t5) return false;
    for (int c = 0; c < p_.virtual_stages; ++c) {
      const int vs = c * p_.pp + s;
      const Chunk a = chunk_span(vs - 1), b = chunk_span(vs);
      if (vs - 1 == 0 || vs == last_vs_ || a.layers != b.layers) return false;
      const std::int32_t d = b.first_layer - a.first_layer;
      if (c > 0 && d != shift) return false;
      shift = d;
      const int a_end = a.first_layer + a.layers, b_end = b.first_layer + b.layers;
      if (p2p_elements(a.first_layer) != p2p_elements(b.first_layer) ||
          p2p_elements(a_end) != p2p_elements(b_end) ||
          boundary_elements(a.first_layer) != boundary_elements(b.first_layer) ||
          boundary_elements(a_end) != boundary_elements(b_end))
        return false;
      for (int i = 0; i < a.layers; ++i) {
        const int la = a.first_layer + i, lb = b.first_layer + i;
        if (block_kind(m_, la) != block_kind(m_, lb) ||
            (la == 0 || la == m_.encoder_layers) != (lb == 0 || lb == m_.encoder_layers) ||
            m_.moe_layer(la) != m_.moe_layer(lb) ||
            block_params(m_, la, t_) != block_params(m_, lb, t_) ||
            block_expert_params(m_, la) != block_expert_params(m_, lb))
          return false;
      }
    }
    return true;
  }
  // `to` (its span set) as `from`'s lists with every block layer moved by `shift`.
  static void copy_shifted(const Chunk& from, std::int32_t shift, Chunk& to) {
    to.forward = from.forward;
    to.backward = from.backward;
    to.forward_first = from.forward_first;
    for (OpList* list : {&to.forward, &to.backward, &to.forward_first})
      for (std::uint32_t i = 0; i < list->size(); ++i) {
        Op& op = list->edit(i);
        if (op.layer >= 0) op.layer += shift;
      }
  }

  Chunk chunk_span(int vs) const {
    Chunk ch;
    ch.virtual_stage = vs;
    ch.layers = m_.layers() / (p_.pp * p_.virtual_stages);
    ch.first_layer = vs * ch.layers;
    if (!p_.stage_layers.empty()) {
      ch.first_layer = std::accumulate(p_.stage_layers.begin(), p_.stage_layers.begin() + vs, 0);
      ch.layers = p_.stage_layers[static_cast<std::size_t>(vs)];
    }
    return ch;
  }
  std::int64_t head_params() const {
    OuterParams o = outer_params(m_);
    std::int64_t head = o.final_norm - t5_encoder_norm_params() + o.pooler + o.lm_head / t_;
    if (m_.tied_embeddings && p_.pp > 1) head += o.word_embedding / t_;
    return head;
  }

  // The routed experts' parameters of a block on this rank: split over EP x expert TP.
  std::int64_t held_expert_params(int l) const {
    return block_expert_params(m_, l) / (static_cast<std::int64_t>(p_.ep) * p_.expert_tp);
  }
  std::int64_t chunk_expert_params(const Chunk& ch) const {
    std::int64_t n = 0;
    if (m_.moe()) {
      for (int l = ch.first_layer; l < ch.first_layer + ch.layers; ++l) n += held_expert_params(l);
      if (ch.virtual_stage == last_vs_)
        for (int d = 0; d < p_.mtp_layers; ++d) n += held_expert_params(mtp_block_layer(m_, d));
    }
    return n;
  }
  std::int64_t chunk_params(const Chunk& ch) const {
    std::int64_t n = 0;
    for (int l = ch.first_layer; l < ch.first_layer + ch.layers; ++l)
      n += block_params(m_, l, t_) +
           (m_.moe() ? held_expert_params(l) - block_expert_params(m_, l) / t_ : 0);
    if (ch.virtual_stage == 0) n += embedding_grads();
    if (ch.virtual_stage == last_vs_) n += head_params() + mtp_params();
    if (t5_encoder_norm_here(ch)) n += t5_encoder_norm_params();
    if (t5_decoder_embedding_copy(ch)) n += outer_params(m_).word_embedding / t_;
    return n;
  }

  // ---- framework patterns ----
  // Data-parallel communication as commscope has always written it: no framework, or
  // DeepSpeed below ZeRO-3 (whose stages 0-2 that pattern already follows).
  bool own_dp_pattern() const {
    return p_.framework == Framework::none ||
           (p_.framework == Framework::deepspeed && p_.zero != 3);
  }
  // Expert gradients reduced in backward buckets (DDP, Megatron with overlapped reduction and no
  // distributed optimizer) rather than in the step.
  bool expert_grads_in_backward() const {
    if (!m_.moe() || sc_.plan.expert_dp() <= 1 || p_.zero != 0) return false;
    if (p_.framework == Framework::megatron)
      return p_.overlap_grad_reduce && !p_.use_distributed_optimizer;
    return p_.framework == Framework::none;
  }
  // (At DP 1 only under --offload-param: the coordinator then fetches each parameter whole from
  // the host, NoGatherHandle, with nothing to gather or reduce.)
  bool deepspeed_zero3() const {
    return p_.framework == Framework::deepspeed && p_.zero == 3 && (p_.dp > 1 || p_.offload_param);
  }
  // DeepSpeed 0.3-0.5 (--deepspeed-version 0.3): each gradient reduce-scattered on its own
  // (partition_parameters.py _reduce_scatter_gradients loops over the bucket's parameters),
  // in line with compute (the next gather's torch.cuda.synchronize() waits for it).
  bool ds_per_param_reduce() const {
    return deepspeed_zero3() && p_.dp > 1 && p_.zero3_per_param_calls;
  }
  // The host work DeepSpeed 0.3-0.5 does before each of its ZeRO-3 collectives (a Python list
  // of world_size tensor views, filled one by one): zero3_host_s_per_rank_per_call x DP seconds
  // with the GPU waiting; nothing when that parameter is 0.
  void ds_host_call(Emitter& e, int layer) const {
    if (p_.zero3_host_s_per_rank_per_call <= 0) return;
    e.chain(host_op("ds_host_call", layer,
                    zero3_host_seconds_per_call(p_.zero3_host_s_per_rank_per_call, p_.dp)));
  }
  // A host op of the given seconds (ComputeClass::host: no FLOPs, no bytes), in the plan's type.
  Op host_op(const char* name, int layer, double seconds) const {
    Op h;
    h.kind = OpKind::compute;
    h.compute = ComputeClass::host;
    h.dtype = dt_;
    h.name = name;
    h.layer = layer;
    h.host_seconds = seconds;
    return h;
  }
  void ds_reduce_per_param(Emitter& e, const Step& st, int layer, std::size_t idx) const {
    if (st.grad_params <= 0) return;
    module_tensors(st, layer, idx, tensors_);
    const std::int64_t dp = p_.dp;
    for (const ParamTensor& t : tensors_) {
      ds_host_call(e, layer);
      Op rs = comm("ds_grad_reduce_scatter", Collective::reduce_scatter, CommGroup::data, p_.dp,
                   (t.numel + dp - 1) / dp * dp, dt_, layer);
      rs.tag = OpTag::grad_bucket;
      e.chain(rs);
    }
  }

  // A copy of `bytes` over the rank's host link, on the data-parallel stream (the offloads'
  // copies of parameter shards in and gradient shards out).
  Op host_link_copy(const char* name, int layer, double bytes) const {
    Op c = host_op(name, layer, bytes / sc_.system.node.host_copy_pinned.value());
    c.tag = OpTag::data_stream;
    return c;
  }
  // DeepSpeed's copy of a rank's offloaded partition of `elements` gathered parameters (padded
  // to a multiple of DP) from pinned host memory to the GPU, in the parameters' type
  // (docs/workload.md, "Parameter offload").
  Op param_fetch(std::int64_t elements, int layer) const {
    return host_link_copy("offload_param_fetch", layer,
                          static_cast<double>(elements / p_.dp) * dtype_bytes(dt_));
  }

  // The parameter tensors of the nn.Module a compute step stands for (DeepSpeed's hooks fire
  // per module with parameters: each Linear, LayerNorm, Embedding). A tied LM head without PP
  // uses the word embedding's tensor.
  void module_tensors(const Step& st, int layer, std::size_t idx,
                      std::vector<ParamTensor>& out) const {
    out.clear();
    const Op& o = st.op;
    const std::int64_t word = outer_params(m_).word_embedding / t_;
    constexpr std::int64_t kWord = 1, kPositions = 2;
    auto id = [&](int k) {
      return (static_cast<std::int64_t>(layer + 8) << 16) | (static_cast<std::int64_t>(idx) << 2) |
             k;
    };
    if (o.compute == ComputeClass::embedding) {
      out.push_back({kWord, word});
      if (st.grad_params > word) out.push_back({kPositions, st.grad_params - word});
      return;
    }
    if (o.name == "lm_head") {
      if (m_.tied_embeddings && p_.pp == 1)
        out.push_back({kWord, word});
      else if (st.grad_params > 0)
        out.push_back({id(0), st.grad_params});  // no bias
      return;
    }
    if (st.grad_params <= 0) return;
    if (o.compute == ComputeClass::norm) {  // weight (and bias), hidden elements each
      int k = 0;
      for (std::int64_t left = st.grad_params; left > 0; left -= m_.hidden)
        out.push_back({id(k++), std::min(left, m_.hidden)});
      return;
    }
    if (o.compute == ComputeClass::gemm && (m_.bias || (m_.qkv_bias && o.name == "qkv")) &&
        st.grad_params > o.n) {
      out.push_back({id(0), st.grad_params - o.n});
      out.push_back({id(1), o.n});
      return;
    }
    out.push_back({id(0), st.grad_params});
  }

  void module_hook(Emitter& e, const Step& st, int layer, std::size_t idx) const {
    module_tensors(st, layer, idx, tensors_);
    if (tensors_.empty()) return;
    const bool backward = e.phase() != Phase::forward;
    if (zero3_mode_ == Zero3Mode::record) {
      trace_.push_back({tensors_, backward});
      return;
    }
    const Zero3Plan& plan = zero3_plan_;
    const std::size_t j = pos_++;
    CS_CHECK(j < plan.issue.size());
    auto emit = [&](std::size_t g, bool after_prev) {
      Op op = comm("ds_param_all_gather", Collective::all_gather, CommGroup::data, p_.dp,
                   plan.gathers[g].elements, dt_, layer);
      op.tag = OpTag::param_gather;
      op.index = static_cast<std::int32_t>(g);
      // --offload-param: the rank's partition of the gathered parameters, copied to the GPU
      // first on the all-gather stream (partition_parameters.py _all_gather_dtype:
      // ds_tensor.to(device), blocking; the hook returns, and the module's kernels launch, only
      // after it).
      std::optional<Op> fetch;
      if (p_.offload_param) fetch = param_fetch(plan.gathers[g].elements, layer);
      if (p_.dp == 1) {
        // One rank (partition_parameters.py NoGatherHandle): each parameter copied whole to the
        // GPU, non-blocking on the all-gather stream, the stream synchronized by the handle's
        // wait() before the module runs; no gather (DeepSpeed 0.3-0.5's in line).
        gather_op_[g] = p_.zero3_sync_gathers        ? e.chain(*fetch)
                        : after_prev && e.has_prev() ? e.side(*fetch, {e.prev()})
                                                     : e.side(*fetch, {});
        gather_in_backward_[g] = backward;
        gather_emitted_[g] = true;
        return;
      }
      if (p_.zero3_sync_gathers) {  // DeepSpeed 0.3-0.5: host work, then the gather, in line
        ds_host_call(e, layer);
        if (fetch) e.chain(*fetch);
        gather_op_[g] = e.chain(op);
        e.edit(gather_op_[g]).layer = layer;
      } else if (fetch) {
        const std::uint32_t f =
            after_prev && e.has_prev() ? e.side(*fetch, {e.prev()}) : e.side(*fetch, {});
        gather_op_[g] = e.side(op, {f});
        e.need(f);
      } else {
        gather_op_[g] = after_prev && e.has_prev() ? e.side(op, {e.prev()}) : e.side(op, {});
      }
      gather_in_backward_[g] = backward;
      gather_emitted_[g] = true;
    };
    if (backward && !in_backward_) {
      in_backward_ = true;
      for (std::size_t g = 0; g < plan.gathers.size(); ++g)
        if (plan.gathers[g].defer) emit(g, false);
    }
    for (std::size_t g : plan.issue[j])
      if (!plan.gathers[g].defer) emit(g, true);
    for (std::size_t g : plan.needs[j])
      if (gather_emitted_[g] && gather_in_backward_[g] == backward) e.need(gather_op_[g]);
  }

  // PyTorch FSDP's process groups: the shard group (all of DP, or under HYBRID_SHARD and
  // _HYBRID_SHARD_ZERO2 --fsdp-shard-size consecutive DP ranks, by default those of one node)
  // and the replicate group (the ranks at the same place of every shard group), with how many
  // ranks of each lie on one node.
  struct FsdpGroups {
    int shard = 1, replicate = 1;
    bool hybrid = false;
    int shard_per_node = 0, replicate_per_node = 0;
  };
  FsdpGroups fsdp_groups() const {
    if (!p_.hsdp()) return FsdpGroups{p_.dp, 1, false};
    const int shard = hsdp_shard_ranks(sc_.plan, sc_.gpus_per_node);
    return hsdp_groups(shard, p_.dp / shard, grad_dp_ranks_per_node(sc_.plan, sc_.gpus_per_node));
  }
  // The routed experts' groups (fsdp_experts_apart): the expert-data group, or under HSDP its
  // shard group, torchtitan's efsdp (hsdp_expert_shard_ranks), replicated over the dense
  // parameters' replicas; efsdp is the inner mesh dimension, so a shard group's ranks are
  // consecutive in the expert-data group.
  FsdpGroups fsdp_expert_groups() const {
    const int shard = hsdp_expert_shard_ranks(sc_.plan, sc_.gpus_per_node);
    return hsdp_groups(shard, sc_.plan.expert_dp() / shard,
                       expert_dp_ranks_per_node(sc_.plan, sc_.gpus_per_node));
  }
  // HSDP's shard and replicate groups of a group with `node` ranks on each node: the shard
  // group's consecutive ranks, as many of them on a node as it holds, and the replicate group's
  // ranks at the same place of each shard group (several on a node when shard groups are smaller
  // than a node).
  static FsdpGroups hsdp_groups(int shard, int replicate, int node) {
    FsdpGroups g{shard, replicate, replicate > 1};
    if (!g.hybrid) return g;
    g.shard_per_node = std::min(shard, node);
    g.replicate_per_node = std::min(replicate, std::max(1, node / shard));
    return g;
  }
  // A sub-group of `size` ranks, `per_node` of them on each node it spans.
  static void place_sub_group(Op& op, int size, int per_node) {
    if (per_node >= size) {
      op.span = GroupSpan::intra_node;
    } else if (per_node <= 1) {
      op.span = GroupSpan::inter_node;
    } else {
      op.span = GroupSpan::nodes;
      op.per_node = static_cast<std::uint16_t>(per_node);
    }
  }
  bool fsdp() const { return p_.framework == Framework::fsdp && p_.dp > 1; }
  bool fsdp_sharded() const { return fsdp() && p_.fsdp_sharding != FsdpSharding::no_shard; }
  bool fsdp_reshards_after_forward() const {
    return p_.fsdp_sharding == FsdpSharding::full_shard ||
           p_.fsdp_sharding == FsdpSharding::hybrid_shard;
  }
  // FSDP2 over a MoE model as torchtitan shards it (torchtitan/distributed/fsdp.py,
  // apply_fsdp_to_decoder: a shard_placement_fn puts the routed experts on the expert-data mesh
  // "efsdp", DP x CP x TP / EP ranks, the block's other parameters on DP x CP): under expert
  // parallelism (or experts split otherwise than the dense layers) a block's unit gathers and
  // reduces its two parts over their two groups. Without it every parameter is on DP x CP.
  bool fsdp_experts_apart() const { return m_.moe() && (p_.ep > 1 || p_.expert_tp != t_); }
  // A block's parameters in its FSDP unit over DP (x CP): all of them, or without its experts.
  std::int64_t fsdp_dense_params(int l) const {
    return fsdp_experts_apart() ? block_params(m_, l, t_) - block_expert_params(m_, l) / t_
                                : block_params(m_, l, t_);
  }
  // A block's routed experts in its FSDP unit over the expert-data group (none without EP).
  std::int64_t fsdp_expert_params(int l) const {
    return fsdp_experts_apart() ? held_expert_params(l) : 0;
  }
  // The all-gather of one FSDP unit's flat parameter (padded to a multiple of the shard group,
  // FlatParamHandle._get_shard), issued after `after` when given; none when nothing is sharded.
  // `expert`: the unit's routed experts, over the expert-data group.
  std::optional<std::uint32_t> fsdp_gather(Emitter& e, std::int64_t params, int layer,
                                           std::optional<std::uint32_t> after,
                                           bool expert = false) const {
    const FsdpGroups g = expert ? fsdp_expert_groups() : fsdp_groups();
    if (!fsdp_sharded() || g.shard < 2 || params <= 0) return std::nullopt;
    Op op = comm(expert ? "fsdp_expert_all_gather" : "fsdp_all_gather", Collective::all_gather,
                 expert ? CommGroup::expert_data : CommGroup::data, g.shard,
                 (params + g.shard - 1) / g.shard * g.shard, dt_, layer);
    op.tag = OpTag::param_gather;
    if (g.hybrid) place_sub_group(op, g.shard, g.shard_per_node);
    op.first_microbatch_only = fsdp_gathers_once() || fsdp_forward_gathers_once(e);
    if (p_.fsdp_cpu_offload) {
      // --fsdp-cpu-offload: the rank's fp32 shard to the GPU first, non-blocking from pinned
      // memory on FSDP's pre-unshard (FSDP1) or copy-in (FSDP2) stream, cast to the gathered
      // type there (FlatParamHandle._use_low_precision_shard, FSDPParam.all_gather_inputs).
      Op fetch = host_link_copy("offload_param_fetch", layer,
                                4.0 * static_cast<double>(op.elements / g.shard));
      fetch.first_microbatch_only = op.first_microbatch_only;
      const std::uint32_t f = after ? e.side(fetch, {*after}) : e.side(fetch, {});
      return e.side(op, {f});
    }
    return after ? e.side(op, {*after}) : e.side(op, {});
  }
  // --fsdp-cpu-offload: a unit's reduced gradient shard, cast to fp32, out to the host's pinned
  // buffer (FSDP1 _offload_grad, FSDP2 foreach_reduce), after its reduction; none otherwise.
  std::optional<Op> fsdp_grad_out(std::int64_t params, int layer, bool expert) const {
    if (!p_.fsdp_cpu_offload) return std::nullopt;
    return host_link_copy("offload_grad_copy", layer, 4.0 * fsdp_grad_shard(params, expert));
  }
  // A unit's gradient shard on this rank (elements): its padded parameters over the shard group.
  double fsdp_grad_shard(std::int64_t params, bool expert) const {
    const int shard = (expert ? fsdp_expert_groups() : fsdp_groups()).shard;
    return static_cast<double>((params + shard - 1) / shard);
  }
  // Block l's unit gathered: its parameters over DP (x CP), then its experts' over the
  // expert-data group (need_all: the next chain op waits for both).
  using UnitGathers = std::array<std::optional<std::uint32_t>, 2>;
  UnitGathers fsdp_gather_block(Emitter& e, int l, std::optional<std::uint32_t> after) const {
    return {fsdp_gather(e, fsdp_dense_params(l), l, after),
            fsdp_gather(e, fsdp_expert_params(l), l, after, true)};
  }
  // Megatron-Core's HybridDeviceOptimizer step (megatron_offload_step's parts). Without
  // --overlap-cpu-optimizer-d2h-h2d its copies run on the current stream: the gradients out, then
  // the GPU's Adam beside the CPU's AdamW (which waits only for the copies), then the weights
  // back after both. With it, one CPU optimizer a parameter and streams of their own: the host
  // path is a pipeline beside the GPU's Adam, and its first copy back waits for that Adam
  // (param_copy_back_gpu_hook's wait_stream).
  void megatron_offload(Emitter& e, double owned) const {
    const MegatronOffloadStep st = megatron_offload_step(sc_, owned);
    auto host = [](const OffloadPart& part) { return step_host_op(part.name, part.seconds()); };
    auto gpu_adam = [&] {
      if (st.gpu_params > 0)
        e.chain(elementwise("adam", ComputeClass::optimizer, kNoLayer, st.gpu_params, 12,
                            p_.adam_step_bytes()));
    };
    if (p_.overlap_cpu_optimizer_d2h_h2d) {
      Op pipe = step_host_op("cpu_optimizer_pipelined", megatron_offload_seconds(st, true));
      if (st.gpu_params <= 0) {
        e.chain(pipe);
        return;
      }
      gpu_adam();
      pipe.tag = OpTag::data_stream;  // beside the GPU's Adam
      e.need(e.with_last(pipe));
      return;
    }
    const std::uint32_t out = e.chain(host(st.parts.front()));  // gradients out
    gpu_adam();
    std::uint32_t last = out;
    for (std::size_t i = 1; i + 1 < st.parts.size(); ++i) {  // the CPU's AdamW and cast
      Op h = host(st.parts[i]);
      h.tag = OpTag::data_stream;  // beside the GPU's Adam, waiting for the copies out only
      last = e.with(h, {last});
    }
    e.need(last);
    e.chain(host(st.parts.back()));  // weights back
  }
  // An optimizer step's host op (an offload's part): no layer, the default type.
  static Op step_host_op(std::string_view name, double seconds) {
    Op h;
    h.compute = ComputeClass::host;
    h.name = name;
    h.host_seconds = seconds;
    return h;
  }
  static void need_all(Emitter& e, const UnitGathers& g) {
    for (const auto& op : g)
      if (op) e.need(*op);
  }
  // The ops of one FSDP unit's gradient reduction, in order: reduce-scatter over the shard
  // group, then under HYBRID_SHARD the all-reduce of the shard over the replicate group;
  // NO_SHARD all-reduces the whole gradient. `expert`: a block's routed experts, over the
  // expert-data group's (fsdp_expert_groups).
  std::vector<Op> fsdp_reduction(std::int64_t params, int layer, bool expert = false) const {
    std::vector<Op> out;
    const FsdpGroups g = expert ? fsdp_expert_groups() : fsdp_groups();
    const CommGroup group = expert ? CommGroup::expert_data : CommGroup::data;
    if (!expert && p_.fsdp_sharding == FsdpSharding::no_shard) {
      Op& op = out.emplace_back(comm("fsdp_all_reduce", Collective::all_reduce, CommGroup::data,
                                     p_.dp, params, dt_, layer));
      op.tag = OpTag::grad_bucket;
      return out;
    }
    std::int64_t shard_elems = params;
    if (g.shard > 1) {
      const std::int64_t padded = (params + g.shard - 1) / g.shard * g.shard;
      Op& rs =
          out.emplace_back(comm(expert ? "fsdp_expert_reduce_scatter" : "fsdp_reduce_scatter",
                                Collective::reduce_scatter, group, g.shard, padded, dt_, layer));
      rs.tag = OpTag::grad_bucket;
      if (g.hybrid) place_sub_group(rs, g.shard, g.shard_per_node);
      shard_elems = padded / g.shard;
    }
    if (g.hybrid) {
      Op& ar = out.emplace_back(
          comm(expert ? "fsdp_expert_replicate_all_reduce" : "fsdp_replicate_all_reduce",
               Collective::all_reduce, group, g.replicate, shard_elems, dt_, layer));
      ar.tag = OpTag::grad_bucket;
      place_sub_group(ar, g.replicate, g.replicate_per_node);
    }
    return out;
  }
  // An FSDP unit's gradient reduction after its backward (`after`): every micro-batch, in the
  // last micro-batch's only (--fsdp-grad-sync last-micro-batch), or kept for the step
  // (--fsdp-grad-sync step: build_step issues it after the last backward).
  void fsdp_reduce(Emitter& e, std::int64_t params, int layer, std::uint32_t after,
                   bool expert = false) const {
    if (!fsdp() || params <= 0) return;
    if (p_.fsdp_grad_sync == FsdpGradSync::step) {
      fsdp_step_units_.push_back({params, layer, expert});
      return;
    }
    std::uint32_t last = after;
    for (Op& op : fsdp_reduction(params, layer, expert)) {
      op.last_microbatch_only = p_.fsdp_grad_sync == FsdpGradSync::last_micro_batch;
      last = e.side(op, {last});
    }
    if (auto out = fsdp_grad_out(params, layer, expert)) {
      out->last_microbatch_only = p_.fsdp_grad_sync == FsdpGradSync::last_micro_batch;
      const std::uint32_t copy = e.side(*out, {last});
      if (fsdp_offload_accumulates()) {
        // FSDP2's foreach_reduce with a gradient already on the host: the copy out is blocking
        // (.to("cpu") without non_blocking) and the shard is added to the host's gradient on the
        // CPU (fp32: 8 bytes in, 4 out, every rank of the node at once), both on the thread
        // that launches the backward: the next kernel waits for the reduction, the copy and
        // the add. (The first micro-batch's copies, with no gradient to add to, are
        // non-blocking in FSDP2; commscope charges every micro-batch as the later ones: an
        // upper bound, by the first micro-batch's waits.)
        e.need(copy);
        e.chain(host_op("cpu_grad_add", layer,
                        12.0 * fsdp_grad_shard(params, expert) * sc_.gpus_per_node /
                            sc_.system.node.host_memory_bandwidth.value()));
      }
    }
  }
  // --fsdp-cpu-offload with gradients reduced every micro-batch of several (FSDP2 accumulates
  // them on the host: fsdp_reduce's cpu_grad_add).
  bool fsdp_offload_accumulates() const {
    return p_.fsdp_cpu_offload && p_.grad_accum > 1 &&
           p_.fsdp_grad_sync == FsdpGradSync::micro_batch;
  }
  // FSDP gathers a unit's parameters once a step: it keeps them after forward (SHARD_GRAD_OP)
  // and, not reducing every micro-batch, after backward too (FSDP1's _should_free_in_backward;
  // FSDP2 under torch.distributed.pipelining, set_reshard_after_backward(False)). Whatever the
  // micro-batch count (one micro-batch runs the first forward alone), so that plans differing
  // in the batch alone share the workload (Evaluator::evaluate_variants).
  bool fsdp_gathers_once() const {
    return fsdp_sharded() && !fsdp_reshards_after_forward() &&
           p_.fsdp_grad_sync != FsdpGradSync::micro_batch;
  }
  // FULL_SHARD / HYBRID_SHARD under --fsdp-grad-sync step (ParallelPlan::
  // fsdp_unsharded_after_backward): every backward gathers its unit again, and forward gathers
  // only where the unit's previous task was a forward. Per unit and step that is 1 + M gathers
  // for M micro-batches (the first task, and each task after one of the M forwards), priced as
  // the first micro-batch's forward and every backward: in 1F1B a stage's warm-up forwards
  // gather where its cool-down backwards do not, the same count placed otherwise.
  bool fsdp_forward_gathers_once(const Emitter& e) const {
    return p_.fsdp_unsharded_after_backward() && e.phase() == Phase::forward;
  }
  std::optional<std::uint32_t> prev_of(const Emitter& e) const {
    return e.has_prev() ? std::optional<std::uint32_t>(e.prev()) : std::nullopt;
  }

  // Megatron-LM's --overlap-param-gather (with the distributed optimizer): the parameters the
  // step updated are all-gathered bucket by bucket during the next iteration's first forward
  // (megatron/core/distributed/distributed_data_parallel.py: a forward pre-hook waits for the
  // bucket of the module's parameters, param_and_grad_buffer.py finish_param_sync dispatches
  // the next bucket's gather then), not after the step.
  bool megatron_overlapped_gather() const {
    return p_.framework == Framework::megatron && p_.use_distributed_optimizer &&
           p_.overlap_param_gather && p_.dp > 1;
  }

  // `ops` false (build_layout): only what memory_per_rank reads beyond the layout, DeepSpeed
  // ZeRO-3's gathered-parameter peak (zero3_live_).
  void build_chunk(Chunk& ch, bool ops = true) const {
    if (!deepspeed_zero3()) {
      const std::size_t before = megatron_buckets_.size();
      build_chunk_ops(ch);
      // the first forward gathers, the others find them gathered
      if (fsdp_gathers_once() || p_.fsdp_unsharded_after_backward()) {
        ch.forward_first = std::move(ch.forward);
        ch.forward = without_first_microbatch_ops(ch.forward_first);
      }
      if (megatron_overlapped_gather()) {
        // Without --overlap-grad-reduce Megatron-LM keeps one bucket (bucket_size None): the
        // chunk's dense parameters, needed by its first module.
        if (!p_.overlap_grad_reduce) {
          megatron_buckets_.push_back(chunk_params(ch) - chunk_expert_params(ch));
          megatron_bucket_layers_.push_back(kEmbeddingLayer);
        }
        first_forward_with_gathers(ch, before);
      }
      return;
    }
    // DeepSpeed ZeRO-3: record the trace of module uses on a scratch copy, replay the
    // coordinator on it, then build with its gathers.
    Chunk scratch;
    scratch.virtual_stage = ch.virtual_stage;
    scratch.first_layer = ch.first_layer;
    scratch.layers = ch.layers;
    trace_.clear();
    zero3_mode_ = Zero3Mode::record;
    build_chunk_ops(scratch);
    zero3_plan_ = plan_zero3(trace_, p_);
    zero3_live_ = std::max(zero3_live_, zero3_plan_.max_live);
    if (!ops) {  // build_layout: the coordinator's replay alone, for memory_per_rank
      zero3_mode_ = Zero3Mode::off;
      return;
    }
    const std::size_t ng = zero3_plan_.gathers.size();
    gather_op_.assign(ng, 0);
    gather_in_backward_.assign(ng, false);
    gather_emitted_.assign(ng, false);
    pos_ = 0;
    in_backward_ = false;
    zero3_mode_ = Zero3Mode::emit;
    build_chunk_ops(ch);
    CS_CHECK(pos_ == trace_.size());
    zero3_mode_ = Zero3Mode::off;
  }

  // The chunk's first-micro-batch forward: its forward with the gathers of the buckets its
  // backward formed (from index `from` of megatron_buckets_), each before the first forward op
  // of the bucket's lowest layer, which waits for it; the bucket holding the first layer's
  // parameters is gathered first. One gather per bucket, in the parameters' type, over DP, as
  // the step issued them without the flag.
  void first_forward_with_gathers(Chunk& ch, std::size_t from) const {
    const std::size_t nb = megatron_buckets_.size();
    if (nb <= from) return;
    auto order = [](std::int32_t layer) -> std::int64_t {  // forward order of a layer
      return layer == kHeadLayer ? std::numeric_limits<std::int32_t>::max()
                                 : std::max<std::int32_t>(layer, kEmbeddingLayer);
    };
    const OpList& fwd = ch.forward;
    auto gather = [&](std::size_t b) {
      Op op = comm("megatron_param_all_gather", Collective::all_gather, CommGroup::data, p_.dp,
                   megatron_buckets_[b], dt_, megatron_bucket_layers_[b]);
      op.tag = OpTag::param_gather;
      op.index = static_cast<std::int32_t>(b);
      op.phase = Phase::forward;
      op.first_microbatch_only = true;
      return op;
    };
    if (p_.megatron_gathers_ahead()) {
      // Interleaved: the schedule dispatched every bucket of the chunk before its first
      // forward, in bucket order; no op of the list waits for them here, the pipeline schedule
      // holds the task until they are done (sim finish()).
      OpList out;
      out.reserve(fwd.size() + (nb - from));
      for (std::size_t b = from; b < nb; ++b) out.add(gather(b));
      const std::uint32_t shift = static_cast<std::uint32_t>(nb - from);
      std::vector<std::uint32_t> deps;
      for (std::uint32_t i = 0; i < fwd.size(); ++i) {
        deps.clear();
        for (auto d : fwd.deps_of(i)) deps.push_back(d + shift);
        out.add(fwd[i], deps);
      }
      ch.forward_first = std::move(out);
      return;
    }
    // consumer[i]: the buckets gathered just before forward op i (first-in-forward first)
    std::vector<std::vector<std::size_t>> consumer(fwd.size());
    for (std::size_t b = nb; b-- > from;) {
      const std::int64_t want = order(megatron_bucket_layers_[b]);
      std::size_t at = 0;
      for (std::size_t i = 0; i < fwd.size(); ++i)
        if (fwd[i].kind == OpKind::compute && order(fwd[i].layer) >= want) {
          at = i;
          break;
        }
      consumer[at].push_back(b);
    }
    OpList out;
    out.reserve(fwd.size() + (nb - from));
    std::vector<std::uint32_t> index(fwd.size()), deps;
    for (std::uint32_t i = 0; i < fwd.size(); ++i) {
      deps.clear();
      for (auto d : fwd.deps_of(i)) deps.push_back(index[d]);
      for (std::size_t b : consumer[i]) deps.push_back(out.add(gather(b)));
      index[i] = out.add(fwd[i], deps);
    }
    ch.forward_first = std::move(out);
  }

  // FSDP's root unit of a chunk: what no block's unit holds (the embedding on the first chunk;
  // the final norm, head and multi-token-prediction modules on the last; T5's encoder final norm
  // and a middle stage's copy of the word embedding), or the whole chunk without auto-wrap; 0
  // under another framework.
  std::int64_t fsdp_root_params(const Chunk& ch) const {
    if (!fsdp()) return 0;
    if (p_.fsdp_wrap == FsdpWrap::model) return chunk_params(ch);
    const bool is_first = ch.virtual_stage == 0, is_last = ch.virtual_stage == last_vs_;
    return (is_first ? embedding_grads() : 0) + (is_last ? head_params() + mtp_params() : 0) +
           (t5_encoder_norm_here(ch) ? t5_encoder_norm_params() : 0) +
           (t5_decoder_embedding_copy(ch) ? outer_params(m_).word_embedding / t_ : 0);
  }

  void build_chunk_ops(Chunk& ch) const {
    const int first = ch.first_layer, end = ch.first_layer + ch.layers;
    const bool is_first = ch.virtual_stage == 0, is_last = ch.virtual_stage == last_vs_;
    const bool decoder_embedding_here =
        m_.kind == ArchKind::t5 && first <= m_.encoder_layers && m_.encoder_layers < end;
    // One program per kind of block (encoder, decoder, the first of a T5 stack with its
    // relative position bias), shared by the blocks of that kind.
    std::vector<std::vector<Step>> programs;
    std::vector<std::pair<int, bool>> program_keys;
    std::vector<std::size_t> program_of;
    for (int l = first; l < end; ++l) {
      std::pair<int, bool> key = {static_cast<int>(block_kind(m_, l)),
                                  l == 0 || l == m_.encoder_layers};
      if (m_.moe_layer(l)) key.first += 8;  // a MoE block's program differs from a dense one's
      auto it = std::find(program_keys.begin(), program_keys.end(), key);
      if (it == program_keys.end()) {
        program_keys.push_back(key);
        programs.push_back(block_program(l));
        it = program_keys.end() - 1;
      }
      program_of.push_back(static_cast<std::size_t>(it - program_keys.begin()));
    }
    auto blocks = [&](int l) -> const std::vector<Step>& {
      return programs[program_of[l - first]];
    };
    // What each kind of block replays under --recompute-granularity op; otherwise emit_forward
    // replays the program itself (all of it, or selective recompute's modules).
    std::vector<std::vector<Step>> op_replays;
    if (p_.recompute == Recompute::op)
      for (const auto& prog : programs) op_replays.push_back(op_recompute_program(prog));
    auto replayed = [&](int l) -> const std::vector<Step>& {
      return op_replays.empty() ? blocks(l) : op_replays[program_of[l - first]];
    };
    std::vector<Step> emb =
        is_first ? embedding_program(m_.seq_length, embedding_grads()) : std::vector<Step>{};
    std::vector<Step> dec_emb =
        decoder_embedding_here
            ? embedding_program(m_.dec_seq(), t5_decoder_embedding_copy(ch)
                                                  ? outer_params(m_).word_embedding / t_
                                                  : 0)
            : std::vector<Step>{};
    std::vector<Step> enc_norm;
    if (t5_encoder_norm_here(ch)) {
      Step n = norm("encoder_final_norm", m_.encoder_layers - 1, b_ * m_.seq_length);
      n.grad_params = t5_encoder_norm_params();
      enc_norm.push_back(n);
    }
    std::vector<Step> head = is_last ? head_program() : std::vector<Step>{};
    // Multi-token prediction on the last stage: per depth its input, its block (like the
    // model's last) and its output programs.
    const int mtp = is_last ? p_.mtp_layers : 0;
    std::vector<std::vector<Step>> mtp_in;
    std::vector<Step> mtp_block, mtp_out;
    if (mtp > 0) {
      for (int d = 0; d < mtp; ++d) mtp_in.push_back(mtp_input_program(d));
      mtp_block = block_program(mtp_block_layer(m_, 0));
      mtp_out = mtp_output_program();
    }
    const std::int64_t emb_params = embedding_grads();

    // forward
    ch.forward.reserve(static_cast<std::size_t>(ch.layers) * 24 + 16);
    Emitter f(ch.forward, Phase::forward);
    if (!is_first) receive(f, "pp_recv_activation", "pp_gather_activation", first, first);
    // FSDP: the root unit (fsdp_root_params) is gathered first and, being the root, kept
    // through backward (FSDP does not reshard the root after forward).
    const bool fsdp_blocks = fsdp() && p_.fsdp_wrap == FsdpWrap::block;
    const std::int64_t fsdp_root = fsdp_root_params(ch);
    const std::int64_t t5_dec_copy =
        t5_decoder_embedding_copy(ch) ? outer_params(m_).word_embedding / t_ : 0;
    const std::int64_t t5_root =
        (t5_encoder_norm_here(ch) ? t5_encoder_norm_params() : 0) + t5_dec_copy;
    if (auto g = fsdp_gather(f, fsdp_root, is_first ? kEmbeddingLayer : first, std::nullopt))
      f.need(*g);
    // limit_all_gathers: a unit's all-gather waits until the unit two before it has been
    // resharded after its forward (the free-event queue of depth 2 in
    // torch/distributed/fsdp/_runtime_utils.py, _unshard).
    std::vector<std::uint32_t> forward_end;
    if (is_first) {
      gather_params(f, emb_params, kEmbeddingLayer);
      emit_forward(f, emb, kEmbeddingLayer);
    }
    for (int l = first; l < end; ++l) {
      if (l == m_.encoder_layers && decoder_embedding_here) {
        gather_params(f, t5_dec_copy, kEmbeddingLayer);
        emit_forward(f, dec_emb, kEmbeddingLayer);
      }
      // ZeRO-3: T5's encoder final norm gathered with the encoder's last block.
      gather_params(f, block_params(m_, l, t_) + t5_norm_with(l, enc_norm), l);
      if (fsdp_blocks) {
        const std::size_t u = forward_end.size();
        std::optional<std::uint32_t> after;
        if (p_.fsdp_limit_all_gathers && fsdp_reshards_after_forward() && u >= 2)
          after = forward_end[u - 2];
        need_all(f, fsdp_gather_block(f, l, after));
      }
      emit_forward(f, blocks(l), l);
      if (l == m_.encoder_layers - 1 && !enc_norm.empty()) emit_forward(f, enc_norm, l);
      forward_end.push_back(f.prev());
    }
    if (is_last) {
      gather_params(f, head_params(), kHeadLayer);
      emit_forward(f, head, kHeadLayer);
      for (int d = 0; d < mtp; ++d) {
        const int l = mtp_block_layer(m_, d);
        gather_params(f, held_mtp_params(d) + (d == 0 ? mtp_embedding_copy() : 0), l);
        emit_forward(f, mtp_in[static_cast<std::size_t>(d)], l);
        emit_forward(f, mtp_block, l);
        emit_forward(f, mtp_out, kHeadLayer);
      }
    } else {
      f.side(comm("pp_send_activation", Collective::send, CommGroup::pipeline, 2, p2p_elements(end),
                  dt_, end - 1),
             {f.prev()});
    }

    // backward
    ch.backward.reserve(static_cast<std::size_t>(ch.layers) * 40 + 16);
    Emitter bw(ch.backward, Phase::backward);
    std::optional<Bucketer> bucketer;
    if (ds_per_param_reduce()) {
      // DeepSpeed 0.3-0.5: no bucket collective; emit_backward reduces each parameter.
    } else if (deepspeed_zero3() && p_.dp > 1) {
      // stage3.py: gradients reduce-scattered in reduce_bucket_size buckets every micro-batch,
      // on their own stream under overlap_comm, on the compute stream otherwise.
      Op proto = comm("ds_grad_reduce_scatter", Collective::reduce_scatter, CommGroup::data, p_.dp,
                      0, dt_, kNoLayer);
      proto.tag = OpTag::grad_bucket;
      bucketer.emplace(bw, proto, p_.zero_reduce_bucket, true, !p_.overlap_grad_reduce);
    } else if (p_.framework == Framework::megatron && p_.dp > 1 && p_.overlap_grad_reduce) {
      // Megatron-LM (megatron/core/distributed/param_and_grad_buffer.py): buckets of at least
      // bucket_size parameters in backward order, each reduced when its last gradient is
      // ready, on the last micro-batch only (no_sync before); reduce-scatter under the
      // distributed optimizer, all-reduce otherwise; in the gradient buffer's type.
      Op proto =
          comm("megatron_grad_bucket",
               p_.use_distributed_optimizer ? Collective::reduce_scatter : Collective::all_reduce,
               CommGroup::data, p_.dp, 0, megatron_grad_dtype(p_), kNoLayer);
      proto.tag = OpTag::grad_bucket;
      proto.last_microbatch_only = true;
      bucketer.emplace(bw, proto, p_.megatron_bucket, false, false, &megatron_buckets_,
                       &megatron_bucket_layers_);
    } else if (p_.dp > 1 && own_dp_pattern() && p_.zero != 1) {
      // DDP all-reduces buckets on the last micro-batch only; ZeRO-2/3 reduce-scatter every
      // micro-batch, since each rank keeps only its shard of the gradients.
      Op proto = comm(p_.zero == 0 ? "ddp_bucket" : "zero_grad_bucket",
                      p_.zero == 0 ? Collective::all_reduce : Collective::reduce_scatter,
                      CommGroup::data, p_.dp, 0, dt_, kNoLayer);
      proto.last_microbatch_only = p_.zero == 0;
      proto.tag = OpTag::grad_bucket;
      std::int64_t cap = p_.zero == 0 ? static_cast<std::int64_t>(p_.ddp_bucket.value() / a_)
                                      : p_.zero_reduce_bucket;
      bucketer.emplace(bw, proto, cap);
    }
    Bucketer* g = bucketer ? &*bucketer : nullptr;
    // Expert gradients: bucketed all-reduces over the expert-data-parallel group on the last
    // micro-batch, beside the dense buckets (Megatron-LM keeps a separate expert buffer);
    // otherwise reduced in the step.
    std::optional<Bucketer> expert_bucketer;
    if (expert_grads_in_backward()) {
      const bool megatron = p_.framework == Framework::megatron;
      Op proto = comm("moe_expert_grad_bucket", Collective::all_reduce, CommGroup::expert_data,
                      sc_.plan.expert_dp(), 0, megatron ? megatron_grad_dtype(p_) : dt_, kNoLayer);
      proto.tag = OpTag::grad_bucket;
      proto.last_microbatch_only = true;
      expert_bucketer.emplace(
          bw, proto,
          megatron ? p_.megatron_bucket : static_cast<std::int64_t>(p_.ddp_bucket.value() / a_));
    }
    expert_grads_ = expert_bucketer ? &*expert_bucketer : nullptr;
    if (!is_last) receive(bw, "pp_recv_gradient", "pp_gather_gradient", end, end - 1);
    if (is_last) {
      for (int d = mtp - 1; d >= 0; --d) {
        const int l = mtp_block_layer(m_, d);
        gather_params(bw, held_mtp_params(d) + (d == 0 ? mtp_embedding_copy() : 0), l);
        emit_backward(bw, mtp_out, kHeadLayer, g);
        if (recomputes()) {
          bw.set_phase(Phase::recompute);
          emit_forward(bw, mtp_block, l, selective_modules());
          bw.set_phase(Phase::backward);
        }
        emit_backward(bw, mtp_block, l, g);
        emit_backward(bw, mtp_in[static_cast<std::size_t>(d)], l, g);
      }
      gather_params(bw, head_params(), kHeadLayer);
      emit_backward(bw, head, kHeadLayer, g);
      if (!is_first && p_.fsdp_wrap == FsdpWrap::block)  // a root of head parameters only
        fsdp_reduce(bw, fsdp_root, kHeadLayer, bw.prev());
    }
    // FSDP units in backward: FULL_SHARD and HYBRID_SHARD gather each unit again before its
    // backward (recompute included); backward_pre issues the next unit's gather before this
    // unit's gradient computation, backward_post after it (before the reduce-scatter), none
    // at the next unit's own pre-backward, behind this unit's reduction.
    std::vector<UnitGathers> prefetched(static_cast<std::size_t>(ch.layers));
    for (int l = end - 1; l >= first; --l) {
      gather_params(bw, block_params(m_, l, t_) + t5_norm_with(l, enc_norm), l);
      if (l == m_.encoder_layers - 1 && !enc_norm.empty()) emit_backward(bw, enc_norm, l, g);
      const bool regather = fsdp_blocks && fsdp_reshards_after_forward();
      if (regather) {
        auto& mine = prefetched[static_cast<std::size_t>(l - first)];
        if (!mine[0] && !mine[1]) mine = fsdp_gather_block(bw, l, prev_of(bw));
        need_all(bw, mine);
        if (p_.fsdp_prefetch == FsdpPrefetch::backward_pre && l > first)
          prefetched[static_cast<std::size_t>(l - 1 - first)] =
              fsdp_gather_block(bw, l - 1, prev_of(bw));
      }
      if (recomputes_at(l - first)) {
        bw.set_phase(Phase::recompute);
        emit_forward(bw, replayed(l), l, selective_modules());
        bw.set_phase(Phase::backward);
      }
      emit_backward(bw, blocks(l), l, g);
      if (fsdp_blocks) {
        const std::uint32_t done = bw.prev();
        if (regather && p_.fsdp_prefetch == FsdpPrefetch::backward_post && l > first)
          prefetched[static_cast<std::size_t>(l - 1 - first)] = fsdp_gather_block(bw, l - 1, done);
        fsdp_reduce(bw, fsdp_dense_params(l), l, done);
        fsdp_reduce(bw, fsdp_expert_params(l), l, done, true);
      }
      if (l == m_.encoder_layers && decoder_embedding_here) {
        gather_params(bw, t5_dec_copy, kEmbeddingLayer);
        emit_backward(bw, dec_emb, kEmbeddingLayer, g);
      }
    }
    if (is_first) {
      gather_params(bw, emb_params, kEmbeddingLayer);
      emit_backward(bw, emb, kEmbeddingLayer, g);
    }
    if (fsdp() && (is_first || p_.fsdp_wrap == FsdpWrap::model || (!is_last && t5_root > 0)) &&
        bw.has_prev())
      fsdp_reduce(bw, fsdp_root, is_first ? kEmbeddingLayer : first, bw.prev());
    if (g && bw.has_prev()) g->flush(bw.prev());
    if (expert_grads_ && bw.has_prev()) expert_grads_->flush(bw.prev());
    expert_grads_ = nullptr;
    if (!is_first)
      bw.side(comm("pp_send_gradient", Collective::send, CommGroup::pipeline, 2,
                   p2p_elements(first), dt_, first),
              {bw.prev()});
  }

  // Splits `total` elements into collectives of at most `cap` elements, chained in order.
  void bucketed(Emitter& e, std::string_view name, Collective c, std::int64_t total,
                std::int64_t cap) const {
    std::int32_t index = 0;
    for (std::int64_t done = 0; done < total; done += cap) {
      Op op = comm(name, c, CommGroup::data, p_.dp, std::min(cap, total - done), dt_, kNoLayer);
      op.index = index++;
      e.chain(op);
    }
  }

  void build_step(Role& r) const {
    Emitter e(r.step, Phase::optimizer);
    // --fsdp-grad-sync step: every unit's gradients reduced after the last backward, one unit
    // after another on the reduction stream (torch.distributed.pipelining's post-backward pass
    // over the FSDP states), before the optimizer.
    for (const FsdpUnit& u : fsdp_step_units_) {
      for (const Op& op : fsdp_reduction(u.params, u.layer, u.expert))
        e.edit(e.chain(op)).phase = Phase::backward;
      if (auto out = fsdp_grad_out(u.params, u.layer, u.expert))
        e.edit(e.chain(*out)).phase = Phase::backward;
    }
    if (p_.sequence_parallel) {
      // Norm weights and row-parallel biases see only their sequence shard: all-reduce over TP.
      std::int64_t replicated = 0;
      for (const Chunk& ch : r.chunks)
        for (int l = ch.first_layer; l < ch.first_layer + ch.layers; ++l)
          replicated += block_replicated_params(m_, l);
      // The final norm sees only its sequence shard too (Megatron all-reduces it with them).
      for (const Chunk& ch : r.chunks)
        if (ch.virtual_stage == last_vs_) {
          replicated += outer_params(m_).final_norm - t5_encoder_norm_params();
          for (int d = 0; d < p_.mtp_layers; ++d)  // MTP: its block's and its three norms
            replicated += block_replicated_params(m_, mtp_block_layer(m_, d)) + mtp_norm_params(m_);
        }
      for (const Chunk& ch : r.chunks)
        if (t5_encoder_norm_here(ch)) replicated += t5_encoder_norm_params();
      // BERT's embedding LayerNorm runs on the sequence shards after the embedding's
      // reduce-scatter: its gradient is partial too (first stage).
      if (m_.kind == ArchKind::bert)
        for (const Chunk& ch : r.chunks)
          if (ch.virtual_stage == 0) replicated += norm_params();
      e.chain(comm("sp_grad_all_reduce", Collective::all_reduce, CommGroup::tensor, t_, replicated,
                   dt_, kNoLayer));
    }
    bool holds_embedding = r.stage == 0 || r.stage == p_.pp - 1;
    // T5: the stage of the decoder embedding joins when it is neither end (Megatron's
    // parallel_state: embedding ranks first, split rank, last).
    int embedding_group = 2;
    for (int st = 1; st + 1 < p_.pp; ++st) {
      bool copy = false;
      for (int c = 0; c < p_.virtual_stages; ++c)
        copy = copy || t5_decoder_embedding_copy(chunk_span(c * p_.pp + st));
      if (!copy) continue;
      ++embedding_group;
      if (st == r.stage) holds_embedding = true;
    }
    // A tied head, or MTP's embedding on the last stage (Megatron-Core's
    // _allreduce_word_embedding_grads with mtp_num_layers): the copies' gradients summed.
    if (p_.pp > 1 && (m_.tied_embeddings || p_.mtp_layers > 0) && holds_embedding)
      e.chain(comm("embedding_grad_all_reduce", Collective::all_reduce, CommGroup::embedding,
                   embedding_group, outer_params(m_).word_embedding / t_, dt_, kEmbeddingLayer));
    const bool sharded = p_.zero >= 1 && p_.dp > 1;
    const bool own = own_dp_pattern();
    // Dense parameters go with DP (x CP); the routed experts' with the expert-data group.
    const std::int64_t dense = r.params - r.expert_params;
    if (own && p_.zero == 1 && p_.dp > 1)
      bucketed(e, "zero_grad_reduce_scatter", Collective::reduce_scatter, dense,
               p_.zero_reduce_bucket);
    const int edp = sc_.plan.expert_dp();
    const bool expert_sharded = r.expert_params > 0 && expert_states_sharded(sc_.plan);
    // FSDP reduces and gathers its experts in their blocks' units (fsdp_experts_apart).
    const bool experts_in_units = fsdp() && r.expert_params > 0;
    if (r.expert_params > 0 && edp > 1 && !expert_grads_in_backward() && !experts_in_units) {
      Op op = comm(expert_sharded ? "moe_expert_grad_reduce_scatter" : "moe_expert_grad_all_reduce",
                   expert_sharded ? Collective::reduce_scatter : Collective::all_reduce,
                   CommGroup::expert_data, edp, r.expert_params,
                   p_.framework == Framework::megatron ? megatron_grad_dtype(p_) : dt_, kNoLayer);
      op.tag = OpTag::grad_bucket;
      e.chain(op);
    }
    const bool megatron = p_.framework == Framework::megatron && p_.dp > 1;
    if (megatron && !p_.overlap_grad_reduce) {
      // Without --overlap-grad-reduce Megatron-LM has one bucket of everything, reduced in
      // finalize_model_grads after the last backward.
      Op op =
          comm("megatron_grad_reduce",
               p_.use_distributed_optimizer ? Collective::reduce_scatter : Collective::all_reduce,
               CommGroup::data, p_.dp, dense, megatron_grad_dtype(p_), kNoLayer);
      op.tag = OpTag::grad_bucket;
      e.chain(op);
    }
    if (p_.framework == Framework::none && sharded) {
      // commscope-train under ZeRO: each rank holds a shard of the gradients, so the global
      // norm (for clipping) is one all-reduce of the summed squares, one fp64 scalar, after
      // the gradients are reduced and before the optimizer (src/train/trainer.cpp).
      e.chain(comm("grad_norm_all_reduce", Collective::all_reduce, CommGroup::data, p_.dp, 1,
                   DType::fp64, kNoLayer));
    }
    const double owned = optimizer_shard_params(sc_, r);
    // Adam: fp32 master weight, two moments and the gradient read; master, moments and the
    // low-precision weight copy written: 28 bytes per parameter (fewer with the
    // precision-aware optimizer's narrower states); about 12 FLOPs per parameter.
    auto on_host = [&](const std::vector<OffloadPart>& parts) {
      for (const OffloadPart& part : parts) e.chain(step_host_op(part.name, part.seconds()));
    };
    if (p_.offload_optimizer) {
      on_host(offload_step(sc_, owned));
    } else if (p_.fsdp_cpu_offload) {
      on_host(fsdp_offload_step(sc_, owned));
    } else if (p_.optimizer_cpu_offload) {
      megatron_offload(e, owned);
    } else {
      e.chain(
          elementwise("adam", ComputeClass::optimizer, kNoLayer, owned, 12, p_.adam_step_bytes()));
      on_host(param_offload_step(sc_, owned));  // --offload-param: the weights to the host
    }
    if (own && (p_.zero == 1 || p_.zero == 2) && p_.dp > 1)
      bucketed(e, "zero_param_all_gather", Collective::all_gather, dense, p_.zero_allgather_bucket);
    if (expert_sharded && !experts_in_units)
      e.chain(comm("moe_expert_param_all_gather", Collective::all_gather, CommGroup::expert_data,
                   edp, r.expert_params, dt_, kNoLayer));
    if (megatron && p_.use_distributed_optimizer && !megatron_overlapped_gather()) {
      // The distributed optimizer all-gathers the updated parameters bucket by bucket (the
      // gradient buckets' layout), in the parameters' type (under --overlap-param-gather, in
      // the next forward instead: first_forward_with_gathers).
      std::vector<std::int64_t> one = {dense};
      const auto& sizes = p_.overlap_grad_reduce ? megatron_buckets_ : one;
      std::int32_t index = 0;
      for (std::int64_t n : sizes) {
        Op op = comm("megatron_param_all_gather", Collective::all_gather, CommGroup::data, p_.dp, n,
                     dt_, kNoLayer);
        op.tag = OpTag::param_gather;
        op.index = index++;
        e.chain(op);
      }
    }
  }

  const Scenario& sc_;
  // Under context parallelism: the model with its sequence split over the CP ranks, and the
  // plan whose data-parallel group is DP x CP (Megatron's gradient group); otherwise empty,
  // and m_ and p_ are the scenario's own.
  const ModelSpec cp_model_;
  const ParallelPlan grad_plan_;
  const ModelSpec& m_;
  const ParallelPlan& p_;
  const int t_;
  const DType dt_;
  const double a_;
  const std::int64_t b_;
  int last_vs_ = 0;
  // The CP ring's exchange op awaiting its wait step, and the expert gradients' buckets of the
  // backward being built (none: reduced in the step, or nothing to reduce).
  mutable std::uint32_t cp_op_ = 0;
  mutable bool cp_pending_ = false;
  mutable Bucketer* expert_grads_ = nullptr;
  // Megatron: the gradient buckets' sizes of the role being built (for the parameter gather).
  mutable std::vector<std::int64_t> megatron_buckets_;
  mutable std::vector<std::int32_t> megatron_bucket_layers_;  // the op closing each bucket's
  // --fsdp-grad-sync step: the FSDP units (parameters, layer, routed experts or not) of the
  // role being built whose gradients its step reduces.
  struct FsdpUnit {
    std::int64_t params;
    std::int32_t layer;
    bool expert;
  };
  mutable std::vector<FsdpUnit> fsdp_step_units_;
  // DeepSpeed ZeRO-3: the trace being recorded or replayed.
  enum class Zero3Mode : std::uint8_t { off, record, emit };
  mutable Zero3Mode zero3_mode_ = Zero3Mode::off;
  mutable std::vector<ModuleUse> trace_;
  mutable std::vector<ParamTensor> tensors_;
  mutable Zero3Plan zero3_plan_;
  mutable std::int64_t zero3_live_ = 0;  // the role's chunks' Zero3Plan::max_live, the largest
  mutable std::size_t pos_ = 0;
  mutable bool in_backward_ = false;
  mutable std::vector<std::uint32_t> gather_op_;
  mutable std::vector<bool> gather_in_backward_, gather_emitted_;
};

// ---- compressed communication (docs/workload.md, "Compressed communication") ----
//
// Applied to the built ops, after the strategies above wrote them: the gradient reductions'
// wire type (--grad-comm-dtype), ZeRO++ (qwZ, hpZ, qgZ) and PowerSGD / 1-bit Adam. Nothing
// changes, and no op is visited, unless the plan asks for one of them.

// A data-parallel gradient reduction (DDP bucket, ZeRO reduce-scatter, Megatron's and FSDP's
// reductions), or with `group` expert_data the experts' (their buckets, reduce-scatter or
// all-reduce); the gradient-norm scalar (fp64) is not one.
bool is_grad_reduction(const Op& op, CommGroup group = CommGroup::data) {
  return op.kind == OpKind::comm && op.group == group &&
         (op.collective == Collective::all_reduce || op.collective == Collective::reduce_scatter) &&
         op.dtype != DType::fp64;
}

template <class F>
void for_each_list(Workload& w, F&& f) {
  for (Role& r : w.roles) {
    for (Chunk& c : r.chunks) {
      f(r, c.forward);
      f(r, c.backward);
    }
    f(r, r.step);
  }
}

// The matrices (rows x columns on this rank) whose gradients PowerSGD compresses, of the
// blocks and outer layers a role holds: QKV, attention output, MLP in (gate and up fused, as
// Megatron-LM stores them) and out, cross-attention's own, the word embedding on the first
// stage and an untied LM head on the last (a tied copy on the last stage too). Every other
// parameter (norms, biases, positions) is a vector and goes uncompressed.
std::vector<std::pair<std::int64_t, std::int64_t>> role_matrices(const Scenario& sc,
                                                                 const Role& r) {
  const ModelSpec& m = sc.model;
  const ParallelPlan& p = sc.plan;
  const std::int64_t t = p.tp, h = m.hidden, q = m.q_dim(), kv = m.kv_dim();
  const std::int64_t fin = m.gated_mlp() ? 2 * m.ffn : m.ffn;
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  const int last_vs = p.pp * p.virtual_stages - 1;
  for (const Chunk& c : r.chunks) {
    if (c.virtual_stage == 0) out.emplace_back(m.vocab / t, h);
    for (int l = c.first_layer; l < c.first_layer + c.layers; ++l) {
      const int attn = block_kind(m, l) == BlockKind::cross_decoder ? 2 : 1;
      for (int a = 0; a < attn; ++a) {
        out.emplace_back((q + 2 * kv) / t, h);
        out.emplace_back(h, q / t);
      }
      out.emplace_back(fin / t, h);
      out.emplace_back(h, m.ffn / t);
    }
    if (c.virtual_stage == last_vs) {
      if (!m.tied_embeddings)
        out.emplace_back(m.vocab / t, h);
      else if (p.pp > 1)
        out.emplace_back(m.vocab / t, h);  // the last stage's copy of the tied embedding
    }
  }
  return out;
}

// --fp8-param-gather: the parameter all-gathers carry the blocks' GEMM weights in 1 byte (the
// FP8 parameters' data) and the rest (norms, embedding, output layer) in the parameters' type,
// as Megatron-Core keeps an FP8 (uint8) buffer beside the 16-bit one and gathers both. A
// block's gather (ZeRO-3, Megatron-FSDP) by that block's share of GEMM weights (an MTP depth's
// by its block's, its projection and norms counted 16-bit); the distributed optimizer's buckets
// by the rank's share; the experts' all GEMM weights.
void apply_fp8_param_gather(Workload& w) {
  const Scenario& sc = w.scenario;
  const ParallelPlan& p = sc.plan;
  const ModelSpec& m = sc.model;
  if (!p.fp8_param_gather) return;
  const double a = dtype_bytes(p.dtype());
  for (Role& r : w.roles) {
    const GemmWeights g = role_gemm_weights(sc, r);
    const double dense = static_cast<double>(r.params - r.expert_params);
    const double role_share = dense > 0 ? std::min(1.0, (g.total - g.experts) / dense) : 0;
    auto lists = [&](auto&& f) {
      f(r.step);
      for (Chunk& ch : r.chunks) f(ch.forward), f(ch.forward_first), f(ch.backward);
    };
    lists([&](OpList& list) {
      for (std::uint32_t i = 0; i < list.size(); ++i) {
        Op& op = list.edit(i);
        if (op.kind != OpKind::comm || op.collective != Collective::all_gather) continue;
        double share = 0;
        if (op.name == "moe_expert_param_all_gather") {
          share = 1;
        } else if (op.name == "zero3_param_all_gather") {
          // A block's gather holds block_params over TP (its experts too, over TP): its GEMM
          // weights so split, of the gather's elements.
          share = op.layer >= 0 && op.elements > 0
                      ? std::min(1.0, block_sharded_params(m, op.layer, p.tp, p.tp) /
                                          static_cast<double>(op.elements))
                      : 0;
        } else if (op.name == "megatron_param_all_gather" || op.name == "zero_param_all_gather") {
          share = role_share;
        } else {
          continue;
        }
        const double e = static_cast<double>(op.elements);
        op.bytes = e * share + e * (1 - share) * a;
        if (share == 1) op.dtype = DType::fp8;
        op.fp8_weights = share > 0 && share < 1;
      }
    });
  }
}

void apply_compression(Workload& w) {
  const Scenario& sc = w.scenario;
  const ParallelPlan& p = sc.plan;
  apply_fp8_param_gather(w);
  const bool zeropp = p.zero == 3 && (p.zeropp_qwz || p.zeropp_qgz || p.zeropp_hpz > 1);
  if (!p.grad_comm_dtype && !zeropp && p.grad_compression == GradCompression::none) return;

  // --grad-comm-dtype: each gradient reduction in the wire type, the same elements; the
  // experts' over the expert-data-parallel group too (the trainer sends both in it).
  if (p.grad_comm_dtype)
    for_each_list(w, [&](Role&, OpList& list) {
      for (std::uint32_t i = 0; i < list.size(); ++i) {
        Op& op = list.edit(i);
        if (!is_grad_reduction(op) && !is_grad_reduction(op, CommGroup::expert_data)) continue;
        op.dtype = *p.grad_comm_dtype;
        op.bytes = static_cast<double>(op.elements) * dtype_bytes(op.dtype);
      }
    });

  if (zeropp) {
    const int node_dp = dp_ranks_per_node(sc.plan, sc.gpus_per_node);
    for_each_list(w, [&](Role&, OpList& list) {
      const std::uint32_t n = static_cast<std::uint32_t>(list.size());
      for (std::uint32_t i = 0; i < n; ++i) {
        Op& op = list.edit(i);
        if (op.kind != OpKind::comm || op.group != CommGroup::data) continue;
        const bool gather =
            op.tag == OpTag::param_gather && op.collective == Collective::all_gather;
        if (gather && p.zeropp_hpz > 1 && op.phase != Phase::forward) {
          // hpZ: backward's (and recompute's) gather reads the secondary shard, over the
          // zero_hpz_partition_size ranks of a node, in the parameters' type.
          op.group_size = p.zeropp_hpz;
          op.span = GroupSpan::intra_node;
        } else if (gather && p.zeropp_qwz) {
          // qwZ: each rank quantizes its shard to int8 in blocks of kQwzBlock elements with
          // one fp32 scale each (symmetric); the gathered output holds DP shards' values and
          // scales.
          const std::int64_t shard = (op.elements + op.group_size - 1) / op.group_size;
          const std::int64_t blocks = (shard + kQwzBlock - 1) / kQwzBlock;
          op.dtype = DType::int8;
          op.bytes = static_cast<double>(op.elements) +
                     static_cast<double>(op.group_size * blocks) * kScaleBytes;
        } else if (p.zeropp_qgz && op.collective == Collective::reduce_scatter &&
                   is_grad_reduction(op)) {
          // qgZ: int4 values with one fp32 scale per kQgzBlock (DeepSpeed's
          // all_to_all_quant_reduce): an all-to-all over the node's DP ranks, the received
          // pieces dequantized, summed in fp32 and requantized, then an all-to-all of the
          // node's 1/g part over the nodes (one rank per node). One all-to-all over DP when DP
          // is within a node or one rank per node.
          const std::int64_t e = op.elements;
          auto qbytes = [](std::int64_t elems) {
            return static_cast<double>((elems + 1) / 2) +
                   static_cast<double>((elems + kQgzBlock - 1) / kQgzBlock) * kScaleBytes;
          };
          const int dp = op.group_size, g = node_dp;
          const bool two = g > 1 && g < dp;
          op.collective = Collective::all_to_all;
          op.dtype = DType::int8;
          op.bytes = qbytes(e);
          if (two) {
            op.group_size = g;
            op.span = GroupSpan::intra_node;
            Op inter = op;
            inter.name = "qgz_inter_node_all_to_all";
            inter.group_size = dp / g;
            inter.span = GroupSpan::inter_node;
            inter.elements = (e + g - 1) / g;
            inter.bytes = qbytes(inter.elements);
            op.name = "qgz_intra_node_all_to_all";
            const std::uint32_t intra = i;
            list.add(inter, {intra});  // `op` may move: not used after this
          } else {
            op.name = "qgz_all_to_all";
          }
        }
      }
    });
  }

  if (p.grad_compression != GradCompression::none) {
    for (Role& r : w.roles) {
      // The role's gradient all-reduces: DDP's buckets in backward (last micro-batch only),
      // FSDP NO_SHARD's per unit, or Megatron's one reduction in the step.
      std::vector<Op*> buckets;
      std::int64_t total = 0;
      auto collect = [&](OpList& l) {
        for (std::uint32_t i = 0; i < l.size(); ++i) {
          Op& op = l.edit(i);
          if (op.tag == OpTag::grad_bucket && is_grad_reduction(op) &&
              op.collective == Collective::all_reduce) {
            buckets.push_back(&op);
            total += op.elements;
          }
        }
      };
      for (Chunk& c : r.chunks) collect(c.backward);
      collect(r.step);
      if (buckets.empty() || total <= 0) continue;
      const auto mats = role_matrices(sc, r);
      std::int64_t in_mats = 0, sent = 0;  // elements of the matrices; elements sent
      double flops = 0, mem = 0;
      const DType grad_dt = buckets.front()->dtype;
      const double a = dtype_bytes(grad_dt);
      if (p.grad_compression == GradCompression::powersgd) {
        // PowerSGD (Vogels et al. 2019; torch powerSGD_hook): per n x m matrix, P = M Q (n x r)
        // all-reduced, orthogonalized, Q = M^T P (m x r) all-reduced: (n + m) r elements
        // instead of n m, where that is fewer (the hook's rule); vectors uncompressed.
        const std::int64_t rk = p.powersgd_rank;
        for (auto [rows, cols] : mats) {
          in_mats += rows * cols;
          if ((rows + cols) * rk < rows * cols) {
            sent += (rows + cols) * rk;
            // P = M Q and Q = M^T P (2 n m r FLOPs each), the error feedback's decompressed
            // P Q^T (2 n m r), Gram-Schmidt of P (about 2 n r^2); M read four times.
            flops += 6.0 * static_cast<double>(rows) * static_cast<double>(cols) * rk +
                     2.0 * static_cast<double>(rows) * rk * rk;
            mem += 4.0 * static_cast<double>(rows) * static_cast<double>(cols) * a;
          } else {
            sent += rows * cols;
          }
        }
        sent += std::max<std::int64_t>(total - in_mats, 0);
      } else {
        // 1-bit Adam (Tang et al. 2021; DeepSpeed's compressed_allreduce): the momentum's
        // signs, 1 bit each, and one fp32 scale per rank's chunk, error-compensated; sent as
        // bytes (8 signs per byte).
        sent = (total + 7) / 8;
        flops = 5.0 * static_cast<double>(total);  // sign, scale, error feedback
        mem = 4.0 * static_cast<double>(total) * a;
      }
      // Each bucket carries its share of the role's compressed elements; the last takes the
      // remainder, so that the sum is exact.
      std::int64_t left = sent;
      for (std::size_t k = 0; k < buckets.size(); ++k) {
        Op& op = *buckets[k];
        std::int64_t e =
            k + 1 == buckets.size()
                ? left
                : static_cast<std::int64_t>(static_cast<long double>(op.elements) * sent / total);
        left -= e;
        if (p.grad_compression == GradCompression::powersgd) {
          op.name = "powersgd_bucket";
          op.elements = e;
          op.bytes = static_cast<double>(e) * a;
        } else {
          op.name = "onebit_bucket";
          op.dtype = DType::int8;
          op.elements = e;
          op.bytes = static_cast<double>(e) + kScaleBytes * op.group_size;
        }
      }
      // The compression's compute, charged once per iteration before the optimizer (not
      // overlapped with backward: a bound on what it costs).
      Op c;
      c.kind = OpKind::compute;
      c.compute = ComputeClass::elementwise;
      c.phase = Phase::optimizer;
      c.dtype = grad_dt;
      c.name =
          p.grad_compression == GradCompression::powersgd ? "powersgd_compress" : "onebit_compress";
      c.layer = kNoLayer;
      c.flops = flops;
      c.mem_bytes = mem;
      OpList step;
      step.reserve(r.step.size() + 1);
      std::uint32_t first = step.add(c, {});
      for (std::uint32_t i = 0; i < r.step.size(); ++i) {
        std::vector<std::uint32_t> deps;
        for (std::uint32_t d : r.step.deps_of(i)) deps.push_back(d + 1);
        if (i == 0) deps.push_back(first);
        step.add(r.step[i], deps);
      }
      r.step = std::move(step);
    }
  }
}

}  // namespace

Workload build_workload(const Scenario& sc) {
  Workload w = Builder(sc).build();
  apply_compression(w);
  return w;
}

Workload build_layout(const Scenario& sc) {
  return Builder(sc).build(false);
}

int stages_copied(const Scenario& sc) {
  return Builder(sc).stages_copied();
}

Workload build_workload_every_stage(const Scenario& sc) {
  Workload w = Builder(sc).build(true, false);
  apply_compression(w);
  return w;
}

}  // namespace commscope
