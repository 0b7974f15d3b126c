// Building the workload: each block is written once as a forward "program" of steps; the
// backward, the recompute and the communication each strategy adds are derived from it, so
// forward, backward and recompute cannot drift apart.
//
// Shapes (per rank): b micro-batch, s tokens per sample, h hidden, q = heads x head_dim,
// kv = kv_heads x head_dim, f FFN width, V vocabulary, t tensor-parallel size.
#include <algorithm>
#include <optional>
#include <vector>

#include "commscope/workload/params.h"
#include "commscope/workload/workload.h"

namespace commscope {

namespace {

// Where a step sits relative to Megatron's tensor-parallel regions: "enter" is the f operator
// (identity forward, all-reduce backward; all-gather / reduce-scatter under sequence
// parallelism), "exit" is the g operator (all-reduce forward, identity backward;
// reduce-scatter / all-gather under sequence parallelism).
enum class StepKind : std::uint8_t { compute, tp_enter, tp_exit };

struct Step {
  StepKind kind = StepKind::compute;
  Op op;                         // compute: the forward op
  std::int64_t tp_elements = 0;  // tp_enter/exit: activation elements b x s x h
  std::int64_t grad_params = 0;  // parameters whose gradient the backward of this step completes
  bool attention_core = false;   // recomputed under selective recompute
  bool gathers_input = false;    // GEMM that reads an SP-gathered input (re-gathered for wgrad)
  bool vocab_parallel_loss = false;  // cross-entropy over a vocabulary split across TP ranks
};

class Emitter {
 public:
  Emitter(OpList& list, Phase phase) : list_(list), phase_(phase) {}
  void set_phase(Phase p) { phase_ = p; }
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

// Groups gradients into buckets in the order backward completes them and emits one
// collective per bucket as soon as its last gradient exists (PyTorch DDP, DeepSpeed ZeRO-2/3).
class Bucketer {
 public:
  Bucketer(Emitter& e, Op proto, std::int64_t cap_elements)
      : e_(e), proto_(proto), cap_(std::max<std::int64_t>(cap_elements, 1)) {}
  void add(std::uint32_t producer, std::int64_t grads) {
    if (grads <= 0) return;
    acc_ += grads;
    if (acc_ >= cap_) flush(producer);
  }
  void flush(std::uint32_t producer) {
    if (acc_ == 0) return;
    Op op = proto_;
    op.index = index_++;
    op.elements = acc_;
    op.bytes = static_cast<double>(acc_) * dtype_bytes(op.dtype);
    e_.side(op, {producer});
    acc_ = 0;
  }

 private:
  Emitter& e_;
  Op proto_;
  std::int64_t cap_;
  std::int64_t acc_ = 0;
  std::int32_t index_ = 0;
};

class Builder {
 public:
  explicit Builder(const Scenario& sc)
      : sc_(sc),
        m_(sc.model),
        p_(sc.plan),
        t_(sc.plan.tp),
        dt_(sc.plan.dtype()),
        a_(dtype_bytes(dt_)),
        b_(sc.plan.micro_batch) {}

  Workload build() {
    Workload w;
    w.scenario = sc_;
    w.microbatches = static_cast<int>(p_.grad_accum);
    const int v = p_.virtual_stages;
    const int chunk_layers = m_.layers() / (p_.pp * v);
    last_vs_ = p_.pp * v - 1;
    for (int s = 0; s < p_.pp; ++s) {
      Role r;
      r.stage = s;
      r.ranks = p_.dp * p_.tp;
      for (int c = 0; c < v; ++c) {
        Chunk ch;
        ch.virtual_stage = c * p_.pp + s;
        ch.first_layer = ch.virtual_stage * chunk_layers;
        ch.layers = chunk_layers;
        build_chunk(ch);
        r.params += chunk_params(ch);
        r.chunks.push_back(std::move(ch));
      }
      build_step(r);
      w.roles.push_back(std::move(r));
    }
    return w;
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
  std::int64_t norm_params() const {
    return m_.norm == NormKind::layernorm ? 2 * m_.hidden : m_.hidden;
  }
  double act_bytes_rw() const { return 2.0 * a_; }

  // ---- programs ----
  void attention(std::vector<Step>& prog, int layer, std::int64_t s_q, std::int64_t s_kv,
                 bool cross, bool first_in_stack) const {
    const std::int64_t h = m_.hidden, q = m_.q_dim(), kv = m_.kv_dim(), bias = m_.bias ? 1 : 0;
    const std::int64_t Tq = b_ * s_q, Tkv = b_ * s_kv, heads = m_.heads / t_;
    prog.push_back(tp(StepKind::tp_enter, Tq * h, layer));
    if (!cross) {
      Step qkv =
          compute(gemm("qkv", layer, Tq, h, (q + 2 * kv) / t_), (h + bias) * (q + 2 * kv) / t_);
      qkv.gathers_input = true;
      prog.push_back(qkv);
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
    sc.attention_core = true;
    prog.push_back(sc);
    Step sm = compute(elementwise(cross ? "cross_softmax" : "softmax", ComputeClass::elementwise,
                                  layer, score_elems, 5, act_bytes_rw() + (m_.dropout ? 1 : 0)));
    sm.attention_core = true;
    prog.push_back(sm);
    Op values = scores;
    values.name = cross ? "cross_values" : "attn_values";
    values.mem_bytes =
        a_ * (score_elems + static_cast<double>(Tkv) * kv / t_ + static_cast<double>(Tq) * q / t_);
    Step va = compute(values);
    va.attention_core = true;
    prog.push_back(va);
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
    prog.push_back(tp(StepKind::tp_enter, T * h, layer));
    Step in = compute(gemm("mlp_in", layer, T, h, fin / t_), (h + bias) * fin / t_);
    in.gathers_input = true;
    prog.push_back(in);
    prog.push_back(compute(elementwise("mlp_act", ComputeClass::elementwise, layer,
                                       static_cast<double>(T) * f / t_, 8,
                                       (m_.gated_mlp() ? 3.0 : 2.0) * a_)));
    prog.push_back(compute(gemm("mlp_out", layer, T, f / t_, h), f / t_ * h + bias * h));
    prog.push_back(tp(StepKind::tp_exit, T * h, layer));
    prog.push_back(compute(elementwise("mlp_residual", ComputeClass::elementwise, layer,
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
    prog.push_back(norm("norm_attn", layer, b_ * s));
    attention(prog, layer, s, s, false, first_in_stack);
    if (kind == BlockKind::cross_decoder) {
      prog.push_back(norm("norm_cross", layer, b_ * s));
      attention(prog, layer, s, m_.seq_length, true, false);
    }
    prog.push_back(norm("norm_mlp", layer, b_ * s));
    mlp(prog, layer, s);
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
      n.grad_params = outer.final_norm;
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

  // ---- emitting programs as ops ----
  // Programs are built once per kind of block; `layer` stamps the block's index on its ops.
  void emit_forward(Emitter& e, const std::vector<Step>& prog, int layer,
                    bool core_only = false) const {
    for (const Step& st : prog) {
      if (core_only && !st.attention_core) continue;
      switch (st.kind) {
        case StepKind::compute:
          e.edit(e.chain(st.op)).layer = layer;
          break;
        case StepKind::tp_enter:
          if (t_ > 1 && p_.sequence_parallel)
            e.chain(comm("sp_all_gather", Collective::all_gather, CommGroup::tensor, t_,
                         st.tp_elements, dt_, layer));
          break;
        case StepKind::tp_exit:
          if (t_ > 1)
            e.chain(comm(p_.sequence_parallel ? "sp_reduce_scatter" : "tp_all_reduce",
                         p_.sequence_parallel ? Collective::reduce_scatter : Collective::all_reduce,
                         CommGroup::tensor, t_, st.tp_elements, dt_, layer));
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
    for (auto it = prog.rbegin(); it != prog.rend(); ++it) {
      const Step& st = *it;
      switch (st.kind) {
        case StepKind::compute: {
          if (t_ > 1 && p_.sequence_parallel && st.gathers_input)  // Megatron re-gathers for wgrad
            e.chain(comm("sp_all_gather_wgrad", Collective::all_gather, CommGroup::tensor, t_,
                         st.op.m * m_.hidden, dt_, layer));
          std::uint32_t i = e.chain(st.op);
          Op& op = e.edit(i);
          op.layer = layer;
          op.flops *= 2;  // data gradient and weight (or second input) gradient
          op.mem_bytes *= 2;
          op.grad_params = st.grad_params;
          if (grads) grads->add(i, st.grad_params);
          break;
        }
        case StepKind::tp_enter:
          if (t_ > 1)
            e.chain(comm(p_.sequence_parallel ? "sp_reduce_scatter" : "tp_all_reduce",
                         p_.sequence_parallel ? Collective::reduce_scatter : Collective::all_reduce,
                         CommGroup::tensor, t_, st.tp_elements, dt_, layer));
          break;
        case StepKind::tp_exit:
          if (t_ > 1 && p_.sequence_parallel)
            e.chain(comm("sp_all_gather", Collective::all_gather, CommGroup::tensor, t_,
                         st.tp_elements, dt_, layer));
          break;
      }
    }
  }

  // ZeRO-3: gather a module's parameters before its forward and before its backward.
  void gather_params(Emitter& e, std::int64_t params, int layer) const {
    if (p_.zero != 3 || p_.dp == 1 || params == 0) return;
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

  std::int64_t embedding_grads() const {
    OuterParams o = outer_params(m_);
    return o.word_embedding / t_ + o.position_embedding;
  }
  std::int64_t head_params() const {
    OuterParams o = outer_params(m_);
    std::int64_t head = o.final_norm + o.pooler + o.lm_head / t_;
    if (m_.tied_embeddings && p_.pp > 1) head += o.word_embedding / t_;
    return head;
  }

  std::int64_t chunk_params(const Chunk& ch) const {
    std::int64_t n = 0;
    for (int l = ch.first_layer; l < ch.first_layer + ch.layers; ++l) n += block_params(m_, l, t_);
    if (ch.virtual_stage == 0) n += embedding_grads();
    if (ch.virtual_stage == last_vs_) n += head_params();
    return n;
  }

  void build_chunk(Chunk& ch) const {
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
    std::vector<Step> emb =
        is_first ? embedding_program(m_.seq_length, embedding_grads()) : std::vector<Step>{};
    std::vector<Step> dec_emb =
        decoder_embedding_here ? embedding_program(m_.dec_seq(), 0) : std::vector<Step>{};
    std::vector<Step> head = is_last ? head_program() : std::vector<Step>{};
    const std::int64_t emb_params = embedding_grads();

    // forward
    ch.forward.reserve(static_cast<std::size_t>(ch.layers) * 24 + 16);
    Emitter f(ch.forward, Phase::forward);
    if (!is_first)
      f.chain(comm("pp_recv_activation", Collective::recv, CommGroup::pipeline, 2,
                   boundary_elements(first), dt_, first));
    if (is_first) {
      gather_params(f, emb_params, kEmbeddingLayer);
      emit_forward(f, emb, kEmbeddingLayer);
    }
    for (int l = first; l < end; ++l) {
      if (l == m_.encoder_layers && decoder_embedding_here)
        emit_forward(f, dec_emb, kEmbeddingLayer);
      gather_params(f, block_params(m_, l, t_), l);
      emit_forward(f, blocks(l), l);
    }
    if (is_last) {
      gather_params(f, head_params(), kHeadLayer);
      emit_forward(f, head, kHeadLayer);
    } else {
      f.side(comm("pp_send_activation", Collective::send, CommGroup::pipeline, 2,
                  boundary_elements(end), dt_, end - 1),
             {f.prev()});
    }

    // backward
    ch.backward.reserve(static_cast<std::size_t>(ch.layers) * 40 + 16);
    Emitter bw(ch.backward, Phase::backward);
    std::optional<Bucketer> bucketer;
    if (p_.dp > 1 && p_.zero != 1) {
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
    if (!is_last)
      bw.chain(comm("pp_recv_gradient", Collective::recv, CommGroup::pipeline, 2,
                    boundary_elements(end), dt_, end - 1));
    if (is_last) {
      gather_params(bw, head_params(), kHeadLayer);
      emit_backward(bw, head, kHeadLayer, g);
    }
    for (int l = end - 1; l >= first; --l) {
      gather_params(bw, block_params(m_, l, t_), l);
      if (p_.recompute != Recompute::none) {
        bw.set_phase(Phase::recompute);
        emit_forward(bw, blocks(l), l, p_.recompute == Recompute::selective);
        bw.set_phase(Phase::backward);
      }
      emit_backward(bw, blocks(l), l, g);
      if (l == m_.encoder_layers && decoder_embedding_here)
        emit_backward(bw, dec_emb, kEmbeddingLayer, g);
    }
    if (is_first) {
      gather_params(bw, emb_params, kEmbeddingLayer);
      emit_backward(bw, emb, kEmbeddingLayer, g);
    }
    if (g && bw.has_prev()) g->flush(bw.prev());
    if (!is_first)
      bw.side(comm("pp_send_gradient", Collective::send, CommGroup::pipeline, 2,
                   boundary_elements(first), dt_, first),
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
    if (p_.sequence_parallel) {
      // Norm weights and row-parallel biases see only their sequence shard: all-reduce over TP.
      std::int64_t replicated = 0;
      for (const Chunk& ch : r.chunks)
        for (int l = ch.first_layer; l < ch.first_layer + ch.layers; ++l)
          replicated += block_replicated_params(m_, l);
      // The final norm sees only its sequence shard too (Megatron all-reduces it with them).
      for (const Chunk& ch : r.chunks)
        if (ch.virtual_stage == last_vs_) replicated += outer_params(m_).final_norm;
      e.chain(comm("sp_grad_all_reduce", Collective::all_reduce, CommGroup::tensor, t_, replicated,
                   dt_, kNoLayer));
    }
    const bool holds_embedding = r.stage == 0 || r.stage == p_.pp - 1;
    if (p_.pp > 1 && m_.tied_embeddings && holds_embedding)
      e.chain(comm("embedding_grad_all_reduce", Collective::all_reduce, CommGroup::embedding, 2,
                   outer_params(m_).word_embedding / t_, dt_, kEmbeddingLayer));
    const bool sharded = p_.zero >= 1 && p_.dp > 1;
    if (p_.zero == 1 && p_.dp > 1)
      bucketed(e, "zero_grad_reduce_scatter", Collective::reduce_scatter, r.params,
               p_.zero_reduce_bucket);
    const double owned =
        sharded ? static_cast<double>(r.params) / p_.dp : static_cast<double>(r.params);
    // Adam: fp32 master weight, two moments and the gradient read; master, moments and the
    // low-precision weight copy written: 28 bytes per parameter; about 12 FLOPs per parameter.
    e.chain(elementwise("adam", ComputeClass::optimizer, kNoLayer, owned, 12, 28));
    if ((p_.zero == 1 || p_.zero == 2) && p_.dp > 1)
      bucketed(e, "zero_param_all_gather", Collective::all_gather, r.params,
               p_.zero_allgather_bucket);
  }

  const Scenario& sc_;
  const ModelSpec& m_;
  const ParallelPlan& p_;
  const int t_;
  const DType dt_;
  const double a_;
  const std::int64_t b_;
  int last_vs_ = 0;
};

}  // namespace

Workload build_workload(const Scenario& sc) {
  return Builder(sc).build();
}

}  // namespace commscope
