// The tensor- and pipeline-parallel GPT shard (parallel.h).
#include "commscope/gpt/parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "commscope/gpt/kernels.h"

namespace commscope::train {

namespace {

// Offsets of a block's tensors from the block's start in a shard (h hidden, t tensor-parallel).
struct LocalBlock {
  std::int64_t norm_attn_w, norm_attn_b, qkv_w, qkv_b, attn_out_w, attn_out_b, norm_mlp_w,
      norm_mlp_b, mlp_in_w, mlp_in_b, mlp_out_w, mlp_out_b, router = -1, size;
  // experts > 0: a MoE block, the router after norm_mlp and no dense MLP (its offsets -1).
  LocalBlock(std::int64_t h, std::int64_t t, std::int64_t experts = 0) {
    const std::int64_t hl = h / t, fl = 4 * h / t;
    std::int64_t o = 0;
    auto take = [&o](std::int64_t n) {
      const std::int64_t at = o;
      o += n;
      return at;
    };
    norm_attn_w = take(h);
    norm_attn_b = take(h);
    qkv_w = take(3 * hl * h);
    qkv_b = take(3 * hl);
    attn_out_w = take(h * hl);
    attn_out_b = take(h);
    norm_mlp_w = take(h);
    norm_mlp_b = take(h);
    if (experts > 0) {
      router = take(experts * h);
      mlp_in_w = mlp_in_b = mlp_out_w = mlp_out_b = -1;
      size = o;
      return;
    }
    mlp_in_w = take(fl * h);
    mlp_in_b = take(fl);
    mlp_out_w = take(h * fl);
    mlp_out_b = take(h);
    size = o;
  }
};

void zero(std::vector<float>& v) {
  std::memset(v.data(), 0, v.size() * sizeof(float));
}

// One expert's parameters: [mlp_in.w 4h x h, mlp_in.b 4h, mlp_out.w h x 4h, mlp_out.b h].
std::int64_t expert_size(std::int64_t h) {
  return 8 * h * h + 5 * h;
}

}  // namespace

Status validate(const GptConfig& cfg, const ShardSpec& s) {
  CS_RETURN_IF_ERROR(validate(cfg));
  if (!(s.moe_aux_loss_coeff >= 0 && s.moe_aux_loss_coeff <= 1e3f))
    return Error{
        fmt::format("--moe-aux-loss-coeff: expected 0 to 1000, got {}", s.moe_aux_loss_coeff)};
  if (!(s.moe_capacity_factor >= 0 && s.moe_capacity_factor <= 1e3))
    return Error{fmt::format("--moe-expert-capacity-factor: expected 0 to 1000, got {}",
                             s.moe_capacity_factor)};
  if (s.moe_pad_to_capacity && s.moe_capacity_factor <= 0)
    return Error{
        "--moe-pad-expert-input-to-capacity: expected a --moe-expert-capacity-factor "
        "with it, got none"};
  if (s.moe_aux_loss_coeff > 0 && cfg.experts == 0)
    return Error{fmt::format(
        "--moe-aux-loss-coeff: expected 0 for a dense model (no experts to balance), got {}",
        s.moe_aux_loss_coeff)};
  if (s.tp < 1 || s.tp_rank < 0 || s.tp_rank >= s.tp)
    return Error{
        fmt::format("--tensor-model-parallel-size: expected a positive size, got {}", s.tp)};
  if (cfg.heads % s.tp != 0)
    return Error{
        fmt::format("--tensor-model-parallel-size: expected a divisor of the heads ({}), got {}",
                    cfg.heads, s.tp)};
  if (cfg.vocab % s.tp != 0)
    return Error{fmt::format(
        "--tensor-model-parallel-size: expected a divisor of the vocabulary ({}), got {}",
        cfg.vocab, s.tp)};
  if (s.sequence_parallel && s.tp > 1 && cfg.seq % s.tp != 0)
    return Error{fmt::format(
        "--sequence-parallel: expected a sequence length ({}) divisible by the tensor-parallel "
        "size {}",
        cfg.seq, s.tp)};
  if (s.cp < 1 || s.cp_rank < 0 || s.cp_rank >= s.cp)
    return Error{fmt::format("--context-parallel-size: expected a positive size, got {}", s.cp)};
  if (s.cp > 1 && cfg.arch != ModelArch::gpt)
    return Error{fmt::format(
        "--context-parallel-size: expected 1 for BERT (the trainer's context parallelism is "
        "causal GPT's), got {}",
        s.cp)};
  if (s.cp > 1 && cfg.seq % (2 * s.cp) != 0)
    return Error{
        fmt::format("--context-parallel-size: expected 2 x CP to divide the sequence length {} "
                    "(load-balanced causal chunks, as Megatron-LM requires), got {}",
                    cfg.seq, s.cp)};
  if (s.cp > 1 && s.cp_comm == CpCommType::a2a && (cfg.heads / s.tp) % s.cp != 0)
    return Error{fmt::format(
        "--context-parallel-size: expected a divisor of the attention heads per TP rank, {} "
        "(--cp-comm-type a2a scatters the heads over the CP ranks), got {}",
        cfg.heads / s.tp, s.cp)};
  if (s.cp_comm == CpCommType::a2a_p2p) {
    const int a = s.cp_a2a_size;
    if (a <= 1 || a >= s.cp || s.cp % a != 0)
      return Error{fmt::format(
          "--hierarchical-context-parallel-sizes: expected an all-to-all level of 2 or more that "
          "divides the context-parallel size {} beside a ring of 2 or more, got {}",
          s.cp, a)};
    if ((cfg.heads / s.tp) % a != 0)
      return Error{fmt::format(
          "--hierarchical-context-parallel-sizes: expected an all-to-all level that divides the "
          "attention heads per TP rank, {} (a2a+p2p scatters the heads over it), got {}",
          cfg.heads / s.tp, a)};
  }
  if (s.cp > 1 && s.sequence_parallel && s.tp > 1 && (cfg.seq / s.cp) % s.tp != 0)
    return Error{fmt::format(
        "--sequence-parallel: expected each context-parallel rank's {} positions divisible by "
        "the tensor-parallel size {}",
        cfg.seq / s.cp, s.tp)};
  if (s.ep < 1 || s.ep_rank < 0 || s.ep_rank >= s.ep)
    return Error{
        fmt::format("--expert-model-parallel-size: expected a positive size, got {}", s.ep)};
  if (cfg.experts == 0 && s.ep > 1)
    return Error{fmt::format(
        "--expert-model-parallel-size: expected 1 for a dense model (no experts), got {}", s.ep)};
  if (cfg.experts > 0 && cfg.experts % s.ep != 0)
    return Error{
        fmt::format("--expert-model-parallel-size: expected a divisor of the experts ({}), got {}",
                    cfg.experts, s.ep)};
  if (cfg.experts > 0 && s.tp > 1)
    return Error{fmt::format(
        "--tensor-model-parallel-size: expected 1 for a model with experts (the trainer's MoE "
        "blocks are not tensor-parallel), got {}",
        s.tp)};
  // A chunk may hold no block when it holds the embedding or the head (uneven stages, e.g.
  // Llama 3's 0,1,...,1,0 virtual stages).
  if (s.layers < (s.embedding || s.head ? 0 : 1) || s.first_layer < 0 ||
      s.first_layer + s.layers > cfg.layers)
    return Error{fmt::format("internal: blocks [{}, {}) outside the model's {}", s.first_layer,
                             s.first_layer + s.layers, cfg.layers)};
  return ok_status();
}

std::vector<int> context_positions(int seq, int cp, int cp_rank) {
  std::vector<int> pos(static_cast<std::size_t>(seq / cp));
  if (cp == 1) {
    for (int i = 0; i < seq; ++i) pos[static_cast<std::size_t>(i)] = i;
    return pos;
  }
  const int c = seq / (2 * cp);  // chunk length; this rank's chunks cp_rank and 2 cp - 1 - it
  for (int j = 0; j < c; ++j) {
    pos[static_cast<std::size_t>(j)] = cp_rank * c + j;
    pos[static_cast<std::size_t>(c + j)] = (2 * cp - 1 - cp_rank) * c + j;
  }
  return pos;
}

// ---- ShardLayout ----

ShardLayout::ShardLayout(const GptConfig& cfg, const ShardSpec& s) : cfg_(cfg), s_(s) {
  CS_CHECK(validate(cfg, s).ok());
  const std::int64_t h = cfg.hidden, wte = static_cast<std::int64_t>(cfg.vocab) / s.tp * h;
  const bool bert = cfg.arch == ModelArch::bert;
  std::int64_t o = 0;
  if (cfg.experts > 0) {  // this rank's experts of every block, first
    experts_ = {0, static_cast<std::int64_t>(s.layers) * (cfg.experts / s.ep) * expert_size(h)};
    o = experts_.size;
  }
  if (s.embedding) {
    // wpe (and BERT's wtt) replicated, then BERT's embedding LayerNorm, replicated too.
    const std::int64_t pos =
        (static_cast<std::int64_t>(cfg.max_positions) + (bert ? cfg.type_vocab : 0)) * h;
    embedding_ = {o, wte + pos + (bert ? 2 * h : 0)};
    replicated_.push_back({o + wte, pos});
    if (bert) replicated_.push_back({o + wte + pos, 2 * h});
    o += embedding_.size;
  }
  const LocalBlock lb(h, s.tp, cfg.experts);
  for (int l = 0; l < s.layers; ++l) {
    blocks_.push_back({o, lb.size});
    for (auto [at, n] :
         {std::pair{lb.norm_attn_w, 2 * h}, std::pair{lb.attn_out_b, 3 * h},
          cfg.experts > 0 ? std::pair{lb.router, cfg.experts * h} : std::pair{lb.mlp_out_b, h}})
      replicated_.push_back({o + at, n});
    o += lb.size;
  }
  if (s.head) {
    head_ = {o, bert ? 0 : 2 * h};  // BERT: no final norm
    if (!bert) replicated_.push_back(head_);
    o += head_.size;
    if (!s.embedding) {
      head_copy_ = {o, wte};
      o += wte;
    }
  }
  total_ = o;
}

Range ShardLayout::expert(int l, int local) const {
  const int i = l - s_.first_layer, el = cfg_.experts / s_.ep;
  CS_CHECK(cfg_.experts > 0 && i >= 0 && i < s_.layers && local >= 0 && local < el);
  const std::int64_t n = expert_size(cfg_.hidden);
  return {experts_.offset + (static_cast<std::int64_t>(i) * el + local) * n, n};
}

Range ShardLayout::block(int l) const {
  const int i = l - s_.first_layer;
  CS_CHECK(i >= 0 && i < static_cast<int>(blocks_.size()));
  return blocks_[static_cast<std::size_t>(i)];
}

std::vector<Range> ShardLayout::sequence_parallel_partial() const {
  std::vector<Range> out;
  for (const Range& r : replicated_)
    if (!(s_.embedding && r.offset == word_embedding().offset + word_embedding().size))
      out.push_back(r);  // not wpe
  return out;
}

Range ShardLayout::word_embedding() const {
  if (!s_.embedding) return {};
  return {embedding_.offset, static_cast<std::int64_t>(cfg_.vocab) / s_.tp * cfg_.hidden};
}

Range ShardLayout::lm_head_weight() const {
  CS_CHECK(s_.head);
  if (s_.embedding) return word_embedding();
  return head_copy_;
}

void ShardLayout::from_full(const float* full, float* shard) const {
  const ParamLayout pl(cfg_);
  const std::int64_t h = cfg_.hidden, t = s_.tp, r = s_.tp_rank, hl = h / t, fl = 4 * h / t;
  const std::int64_t vl = cfg_.vocab / t;
  auto find = [&](std::string_view name, int layer) -> const float* {
    for (const auto& x : pl.tensors())
      if (x.name == name && x.layer == layer) return full + x.offset;
    CS_CHECK(false);
    return nullptr;
  };
  auto copy = [](const float* from, std::int64_t n, float* to) { std::copy(from, from + n, to); };
  const float* wte = find("wte", kEmbeddingLayer) + r * vl * h;
  if (cfg_.experts > 0) {
    const int el = cfg_.experts / s_.ep;
    for (int l = s_.first_layer; l < s_.first_layer + s_.layers; ++l)
      for (int e = 0; e < el; ++e) {
        const std::string x = "expert" + std::to_string(s_.ep_rank * el + e);
        float* to = shard + expert(l, e).offset;
        copy(find(x + ".mlp_in.w", l), 4 * h * h, to);
        copy(find(x + ".mlp_in.b", l), 4 * h, to + 4 * h * h);
        copy(find(x + ".mlp_out.w", l), 4 * h * h, to + 4 * h * h + 4 * h);
        copy(find(x + ".mlp_out.b", l), h, to + 8 * h * h + 4 * h);
      }
  }
  if (s_.embedding) {
    copy(wte, vl * h, shard + embedding_.offset);
    std::int64_t at = embedding_.offset + vl * h;
    copy(find("wpe", kEmbeddingLayer), cfg_.max_positions * h, shard + at);
    at += cfg_.max_positions * h;
    if (cfg_.arch == ModelArch::bert) {
      if (cfg_.type_vocab > 0) {
        copy(find("wtt", kEmbeddingLayer), cfg_.type_vocab * h, shard + at);
        at += cfg_.type_vocab * h;
      }
      copy(find("norm_emb.w", kEmbeddingLayer), h, shard + at);
      copy(find("norm_emb.b", kEmbeddingLayer), h, shard + at + h);
    }
  }
  const LocalBlock lb(h, t, cfg_.experts);
  for (int l = s_.first_layer; l < s_.first_layer + s_.layers; ++l) {
    float* b = shard + block(l).offset;
    if (cfg_.experts > 0) {
      copy(find("norm_attn.w", l), h, b + lb.norm_attn_w);
      copy(find("norm_attn.b", l), h, b + lb.norm_attn_b);
      copy(find("qkv.w", l), 3 * h * h, b + lb.qkv_w);  // TP 1: whole
      copy(find("qkv.b", l), 3 * h, b + lb.qkv_b);
      copy(find("attn_out.w", l), h * h, b + lb.attn_out_w);
      copy(find("attn_out.b", l), h, b + lb.attn_out_b);
      copy(find("norm_mlp.w", l), h, b + lb.norm_mlp_w);
      copy(find("norm_mlp.b", l), h, b + lb.norm_mlp_b);
      copy(find("router.w", l), cfg_.experts * h, b + lb.router);
      continue;
    }
    copy(find("norm_attn.w", l), h, b + lb.norm_attn_w);
    copy(find("norm_attn.b", l), h, b + lb.norm_attn_b);
    for (std::int64_t part = 0; part < 3; ++part) {  // q, k, v: this rank's heads of each
      copy(find("qkv.w", l) + (part * h + r * hl) * h, hl * h, b + lb.qkv_w + part * hl * h);
      copy(find("qkv.b", l) + part * h + r * hl, hl, b + lb.qkv_b + part * hl);
    }
    for (std::int64_t row = 0; row < h; ++row)  // row-parallel: this rank's input columns
      copy(find("attn_out.w", l) + row * h + r * hl, hl, b + lb.attn_out_w + row * hl);
    copy(find("attn_out.b", l), h, b + lb.attn_out_b);
    copy(find("norm_mlp.w", l), h, b + lb.norm_mlp_w);
    copy(find("norm_mlp.b", l), h, b + lb.norm_mlp_b);
    copy(find("mlp_in.w", l) + r * fl * h, fl * h, b + lb.mlp_in_w);
    copy(find("mlp_in.b", l) + r * fl, fl, b + lb.mlp_in_b);
    for (std::int64_t row = 0; row < h; ++row)
      copy(find("mlp_out.w", l) + row * 4 * h + r * fl, fl, b + lb.mlp_out_w + row * fl);
    copy(find("mlp_out.b", l), h, b + lb.mlp_out_b);
  }
  if (s_.head) {
    if (head_.size > 0) {
      copy(find("lnf.w", kHeadLayer), h, shard + head_.offset);
      copy(find("lnf.b", kHeadLayer), h, shard + head_.offset + h);
    }
    if (head_copy_.size > 0) copy(wte, vl * h, shard + head_copy_.offset);
  }
}

double gpt_matmul_flops(const GptConfig& cfg, int batch) {
  const double n = static_cast<double>(batch) * cfg.seq, c = cfg.hidden;
  const double per_block = 2 * n * c * (3 * c + c + 4 * c + 4 * c) + 2 * 2.0 * n * cfg.seq * c;
  return 3 * (cfg.layers * per_block + 2 * n * c * cfg.vocab);
}

// ---- GptShard ----

GptShard::GptShard(const GptConfig& cfg, const ShardSpec& s, int batch, int slots)
    : cfg_(cfg),
      s_(s),
      layout_(cfg, s),
      batch_(batch),
      hl_(cfg.hidden / s.tp),
      heads_l_(cfg.heads / s.tp),
      vocab_l_(cfg.vocab / s.tp) {
  CS_CHECK(batch >= 1 && slots >= 1);
  seq_l_ = cfg.seq / s.cp;
  pos_ = context_positions(cfg.seq, s.cp, s.cp_rank);
  for (int r = 0; r < s.cp; ++r) {
    const std::vector<int> p = context_positions(cfg.seq, s.cp, r);
    kpos_.insert(kpos_.end(), p.begin(), p.end());
  }
  const std::size_t n = static_cast<std::size_t>(batch) * seq_l_;  // rows: local positions
  const std::size_t c = cfg.hidden, cl = static_cast<std::size_t>(hl_);
  sp_ = s.sequence_parallel && s.tp > 1;
  bert_ = cfg.arch == ModelArch::bert;
  // Rows of the residual stream on this rank: a sequence shard under sequence parallelism.
  const std::size_t r = sp_ ? n / static_cast<std::size_t>(s.tp) : n;
  rows_l_ = static_cast<std::int64_t>(r);
  // Scores of this rank's queries against every key of their sequences.
  // (none with FlashAttention: it keeps a logsumexp per row instead)
  const std::size_t att =
      s.flash ? 0 : static_cast<std::size_t>(batch) * heads_l_ * seq_l_ * cfg.seq;
  slots_.resize(static_cast<std::size_t>(slots));
  for (Slot& sl : slots_) {
    sl.tokens.resize(n);
    sl.targets.resize(n);
    sl.input.resize(r * c);
    if (bert_ && s.embedding) {
      sl.emb.resize(r * c);
      sl.emb_mean.resize(r);
      sl.emb_rstd.resize(r);
    }
    sl.blocks.resize(static_cast<std::size_t>(s.layers));
    for (auto& b : sl.blocks) {
      b.ln1.resize(r * c);
      b.ln1_mean.resize(r);
      b.ln1_rstd.resize(r);
      b.qkv.resize(3 * n * cl);
      b.att.resize(att);
      if (s.flash) b.lse.resize(static_cast<std::size_t>(batch) * heads_l_ * seq_l_);
      if (s.cp > 1 && s.cp_a2a_level() > 1) b.qkv_h.resize(3 * n * cl);
      if (s.cp > 1 && s.cp_comm == CpCommType::a2a_p2p) b.out_h.resize(n * cl);
      if (s.cp > 1 && s.cp_ring()) b.ring_kv_last.resize(2 * n * cl);
      b.atty.resize(n * cl);
      b.res2.resize(r * c);
      b.ln2.resize(r * c);
      b.ln2_mean.resize(r);
      b.ln2_rstd.resize(r);
      b.fch.resize(4 * n * cl);
      b.fch_gelu.resize(4 * n * cl);
      b.res3.resize(r * c);
    }
    if (s.head && !bert_) {
      sl.lnf.resize(r * c);
      sl.lnf_mean.resize(r);
      sl.lnf_rstd.resize(r);
    }
    if (s.head) {
      sl.probs.resize(n * static_cast<std::size_t>(vocab_l_));
      sl.losses.resize(n);
      sl.ce_max.resize(n);
      sl.ce_sum.resize(n);
    }
  }
  tmp_.resize(n * c);
  gath_.resize(sp_ ? n * c : 0);
  part_.resize(sp_ ? r * c : 0);
  dln_s_.resize(sp_ ? r * c : 0);
  dres_.resize(r * c);
  demb_.resize(bert_ && s.embedding ? r * c : 0);
  dtmp_.resize(n * c);
  dln_.resize(n * c);
  dqkv_.resize(3 * n * cl);
  datt_.resize(att);
  datty_.resize(n * cl);
  dfch_.resize(4 * n * cl);
  dfch_gelu_.resize(4 * n * cl);
  if (s.cp > 1 && s.cp_a2a_level() > 1) {
    a2a_send_.resize(3 * n * cl);
    a2a_recv_.resize(n * cl);
    a2a_grad_.resize(3 * n * cl);
  }
  if (s.cp > 1 && s.cp_ring()) {
    for (int i = 0; i < 2; ++i) ring_kv_[i].resize(4 * n * cl);
    ring_dkv_own_.resize(2 * n * cl);
    const std::size_t rows = static_cast<std::size_t>(batch) * heads_l_ * seq_l_;
    ring_max_.resize(rows);
    ring_scale_.resize(rows);
    ring_d_.resize(rows);
    ring_sum_.resize(rows);
  } else if (s.cp > 1 && s.cp_comm == CpCommType::all_gather) {
    kv_l_.resize(2 * n * cl);
    kv_all_.resize(2 * n * cl * static_cast<std::size_t>(s.cp));
    dkv_all_.resize(kv_all_.size());
  }
}

template <class F>
void GptShard::timed(std::string_view name, int layer, bool backward, double flops, F&& f) {
  observe(observer_, OpRecord{name, layer, backward, 0, 0, flops}, std::forward<F>(f));
}

void GptShard::reduce(float* data, std::int64_t n, bool max, std::string_view name, int layer) {
  if (s_.tp == 1) return;
  CS_CHECK(all_reduce_ != nullptr);
  all_reduce_(data, n, max, name, layer);
}

void GptShard::gather(const float* shard, float* full, std::string_view name, int layer) {
  CS_CHECK(sequence_ != nullptr);
  sequence_(true, shard, full, rows_l_ * cfg_.hidden, name, layer);
}

void GptShard::scatter(const float* full, float* shard, std::string_view name, int layer) {
  CS_CHECK(sequence_ != nullptr);
  sequence_(false, full, shard, rows_l_ * cfg_.hidden, name, layer);
}

const float* GptShard::column_backward(std::string_view name, int layer, double flops,
                                       const float* dout, const float* inp, const float* w,
                                       float* dw, float* db, int oc) {
  const int ch = cfg_.hidden;
  const std::int64_t rows = static_cast<std::int64_t>(batch_) * seq_l_;
  if (!sp_ && !(s_.tp_async && s_.tp > 1)) {  // the all-reduce after the whole backward
    timed(name, layer, true, flops, [&] {
      zero(dln_);
      matmul_backward(dln_.data(), dw, db, dout, inp, w, rows, ch, oc);
    });
    reduce(dln_.data(), rows * ch, false, "tp_all_reduce", layer);
    return dln_.data();
  }
  // Started where the trainer gives the asynchronous forms; else done at once.
  auto start_sequence = [&](bool gather, const float* in, float* out, std::string_view what) {
    if (start_sequence_) return start_sequence_(gather, in, out, rows_l_ * ch, what, layer);
    gather ? this->gather(in, out, what, layer) : scatter(in, out, what, layer);
    return std::function<void()>([] {});
  };
  std::function<void()> gathered = [] {};
  if (sp_) gathered = start_sequence(true, inp, gath_.data(), "sp_all_gather_wgrad");
  timed(name, layer, true, flops / 2, [&] {
    zero(dln_);
    matmul_backward_data(dln_.data(), dout, w, rows, ch, oc);
  });
  gathered();
  std::function<void()> out;
  if (sp_) {
    out = start_sequence(false, dln_.data(), dln_s_.data(), "sp_reduce_scatter");
  } else if (start_all_reduce_) {
    out = start_all_reduce_(dln_.data(), rows * ch, "tp_all_reduce", layer);
  } else {
    reduce(dln_.data(), rows * ch, false, "tp_all_reduce", layer);
    out = [] {};
  }
  timed(name, layer, true, flops / 2,
        [&] { matmul_backward_weight(dw, db, dout, sp_ ? gath_.data() : inp, rows, ch, oc); });
  out();
  return sp_ ? dln_s_.data() : dln_.data();
}

std::int64_t GptShard::activation_elements() const {
  return rows_l_ * cfg_.hidden;
}

const float* GptShard::output(int slot) const {
  return last_output(slots_[static_cast<std::size_t>(slot)]);
}

const float* GptShard::last_output(const Slot& s) const {
  return s.blocks.empty() ? s.input.data() : s.blocks.back().res3.data();
}

const float* GptShard::block_input(const Slot& s, int l) const {
  const int i = l - s_.first_layer;
  return i == 0 ? s.input.data() : s.blocks[static_cast<std::size_t>(i - 1)].res3.data();
}

namespace {
// out[r, c] = x[r, c] + (y[r, c] + bias[c]) over rows x ch.
void add_bias_residual(float* out, const float* x, const float* y, const float* bias,
                       std::int64_t rows, int ch) {
  for (std::int64_t i = 0; i < rows; ++i)
    for (int c = 0; c < ch; ++c) out[i * ch + c] = x[i * ch + c] + (y[i * ch + c] + bias[c]);
}
// db[c] += column sums of d[rows, ch].
void bias_grad(float* db, const float* d, std::int64_t rows, int ch) {
  for (std::int64_t i = 0; i < rows; ++i)
    for (int c = 0; c < ch; ++c) db[c] += d[i * ch + c];
}
}  // namespace

float GptShard::forward(int slot, const float* params, const std::int32_t* tokens,
                        const float* input, const std::int32_t* targets) {
  Slot& s = slots_[static_cast<std::size_t>(slot)];
  params_ = params;
  const int nb = batch_, seq = cfg_.seq, ch = cfg_.hidden;
  const std::int64_t rows = static_cast<std::int64_t>(nb) * seq_l_;
  // Local row i: sequence i / seq_l_ at position pos_[i % seq_l_].
  auto global_row = [&](std::int64_t i) {
    return i / seq_l_ * seq + pos_[static_cast<std::size_t>(i % seq_l_)];
  };
  auto position = [&](std::int64_t i) {
    return static_cast<std::int64_t>(pos_[static_cast<std::size_t>(i % seq_l_)]);
  };
  if (s_.embedding) {
    for (std::int64_t i = 0; i < rows; ++i) {
      const std::int32_t tok = tokens[global_row(i)];
      CS_CHECK(tok >= 0 && tok < cfg_.vocab);
      s.tokens[static_cast<std::size_t>(i)] = tok;
    }
    const float* wte = params + layout_.embedding().offset;
    const float* wpe = wte + static_cast<std::int64_t>(vocab_l_) * ch;
    // BERT: the token types' rows after the positions, then the embedding LayerNorm into input.
    const float* wtt = wpe + static_cast<std::int64_t>(cfg_.max_positions) * ch;
    float* raw = bert_ ? s.emb.data() : s.input.data();
    auto add_types = [&](float* out, std::int64_t i) {
      const int t = token_type(static_cast<int>(position(i)), seq, cfg_.type_vocab);
      if (!bert_ || t < 0) return;
      const float* q = wtt + static_cast<std::int64_t>(t) * ch;
      for (int c = 0; c < ch; ++c) out[c] += q[c];
    };
    if (s_.tp == 1) {
      timed("embedding", kEmbeddingLayer, false, 0, [&] {
        if (s_.cp == 1) {
          encoder_forward(raw, s.tokens.data(), wte, wpe, nb, seq, ch);
        } else {
          for (std::int64_t i = 0; i < rows; ++i) {
            const float* w =
                wte + static_cast<std::int64_t>(s.tokens[static_cast<std::size_t>(i)]) * ch;
            const float* p = wpe + position(i) * ch;
            for (int c = 0; c < ch; ++c) raw[i * ch + c] = w[c] + p[c];
          }
        }
        for (std::int64_t i = 0; i < rows; ++i) add_types(raw + i * ch, i);
      });
    } else {
      // Vocabulary-parallel lookup: the rows of this rank's vocabulary, zero elsewhere, summed
      // over the group (reduce-scattered onto sequence shards under sequence parallelism); the
      // positions, held whole by every rank, added once.
      const std::int32_t lo = s_.tp_rank * vocab_l_;
      float* out_all = sp_ ? gath_.data() : raw;
      const bool add_positions = sp_ && s_.tp_rank == 0;
      timed("embedding", kEmbeddingLayer, false, 0, [&] {
        for (std::int64_t i = 0; i < rows; ++i) {
          float* out = out_all + i * ch;
          const std::int32_t tok = s.tokens[static_cast<std::size_t>(i)] - lo;
          if (tok >= 0 && tok < vocab_l_)
            std::copy(wte + static_cast<std::int64_t>(tok) * ch,
                      wte + static_cast<std::int64_t>(tok + 1) * ch, out);
          else
            std::fill(out, out + ch, 0.0f);
          if (add_positions) {
            const float* p = wpe + position(i) * ch;
            for (int c = 0; c < ch; ++c) out[c] += p[c];
            add_types(out, i);
          }
        }
      });
      if (sp_) {
        scatter(gath_.data(), raw, "sp_reduce_scatter", kEmbeddingLayer);
      } else {
        reduce(raw, rows * ch, false, "tp_all_reduce", kEmbeddingLayer);
        for (std::int64_t i = 0; i < rows; ++i) {
          float* out = raw + i * ch;
          const float* p = wpe + position(i) * ch;
          for (int c = 0; c < ch; ++c) out[c] += p[c];
          add_types(out, i);
        }
      }
    }
    if (bert_) {
      const float* nw = wtt + static_cast<std::int64_t>(cfg_.type_vocab) * ch;
      timed("embedding_norm", kEmbeddingLayer, false, 0, [&] {
        layernorm_forward(s.input.data(), s.emb_mean.data(), s.emb_rstd.data(), raw, nw, nw + ch,
                          rows_l_, ch);
      });
    }
  } else {
    std::copy(input, input + rows_l_ * ch, s.input.data());
  }
  for (int l = s_.first_layer; l < s_.first_layer + s_.layers; ++l)
    forward_block(s, l, params + layout_.block(l).offset);
  s.forward_done = true;
  if (!s_.head) return 0;
  s.counted = 0;
  for (std::int64_t i = 0; i < rows; ++i) {
    // BERT's unmasked positions carry kIgnoreTarget: no loss.
    const std::int32_t tgt = targets[global_row(i)];
    CS_CHECK(tgt >= (bert_ ? kIgnoreTarget : 0) && tgt < cfg_.vocab);
    s.targets[static_cast<std::size_t>(i)] = tgt;
    s.counted += tgt >= 0 ? 1 : 0;
  }
  return forward_head(s, params + layout_.lm_head_weight().offset, params + layout_.head().offset);
}

void GptShard::forward_block(Slot& s, int l, const float* block) {
  const int nb = batch_, seq = seq_l_, ch = cfg_.hidden;
  const int cl = hl_, nh = heads_l_;
  const std::int64_t rows = static_cast<std::int64_t>(nb) * seq, rl = rows_l_;
  const double fn = static_cast<double>(rows), fc = ch, fcl = cl;
  const double attn_flops = 2.0 * nb * seq * static_cast<double>(cfg_.seq) * cl;
  const LocalBlock o(ch, s_.tp, cfg_.experts);
  const bool split = s_.tp > 1;
  BlockActs& a = s.blocks[static_cast<std::size_t>(l - s_.first_layer)];
  const float* inp = block_input(s, l);
  // Megatron's g: all-reduce the row-parallel partial sums (reduce-scatter them under sequence
  // parallelism); then bias and residual on this rank's rows.
  auto exit_region = [&](float* out, const float* x, const float* bias, std::string_view name) {
    if (sp_) scatter(tmp_.data(), part_.data(), "sp_reduce_scatter", l);
    if (!sp_) reduce(tmp_.data(), rows * ch, false, "tp_all_reduce", l);
    timed(name, l, false, 0, [&] {
      if (!split)
        residual_forward(out, x, tmp_.data(), rows * ch);
      else
        add_bias_residual(out, x, sp_ ? part_.data() : tmp_.data(), bias, rl, ch);
    });
  };
  timed("norm_attn", l, false, 0, [&] {
    layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), inp,
                      block + o.norm_attn_w, block + o.norm_attn_b, rl, ch);
  });
  if (sp_) gather(a.ln1.data(), gath_.data(), "sp_all_gather", l);
  const float* x1 = sp_ ? gath_.data() : a.ln1.data();
  timed("qkv", l, false, 2 * fn * fc * 3 * fcl, [&] {
    matmul_forward(a.qkv.data(), x1, block + o.qkv_w, block + o.qkv_b, rows, ch, 3 * cl);
  });
  if (s_.cp > 1) {
    cp_attention_forward(a, l);
  } else if (s_.flash) {
    flash_forward(a, l, a.qkv.data() + cl, 3 * cl);
  } else {
    timed("attn_scores", l, false, attn_flops,
          [&] { attention_scores_forward(a.att.data(), a.qkv.data(), nb, seq, cl, nh, !bert_); });
    timed("softmax", l, false, 0,
          [&] { attention_softmax_forward(a.att.data(), nb, seq, nh, !bert_); });
    timed("attn_values", l, false, attn_flops, [&] {
      attention_values_forward(a.atty.data(), a.att.data(), a.qkv.data(), nb, seq, cl, nh, !bert_);
    });
  }
  timed("attn_out", l, false, 2 * fn * fcl * fc, [&] {
    matmul_forward(tmp_.data(), a.atty.data(), block + o.attn_out_w,
                   split ? nullptr : block + o.attn_out_b, rows, cl, ch);
  });
  exit_region(a.res2.data(), inp, block + o.attn_out_b, "attn_residual");
  timed("norm_mlp", l, false, 0, [&] {
    layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.res2.data(),
                      block + o.norm_mlp_w, block + o.norm_mlp_b, rl, ch);
  });
  if (cfg_.experts > 0) {  // TP 1: no region to enter or leave
    moe_forward(a, l, block);
    timed("mlp_residual", l, false, 0,
          [&] { residual_forward(a.res3.data(), a.res2.data(), tmp_.data(), rows * ch); });
    return;
  }
  if (sp_) gather(a.ln2.data(), gath_.data(), "sp_all_gather", l);
  const float* x2 = sp_ ? gath_.data() : a.ln2.data();
  timed("mlp_in", l, false, 2 * fn * fc * 4 * fcl, [&] {
    matmul_forward(a.fch.data(), x2, block + o.mlp_in_w, block + o.mlp_in_b, rows, ch, 4 * cl);
  });
  timed("mlp_act", l, false, 0,
        [&] { gelu_forward(a.fch_gelu.data(), a.fch.data(), 4 * rows * cl); });
  timed("mlp_out", l, false, 2 * fn * 4 * fcl * fc, [&] {
    matmul_forward(tmp_.data(), a.fch_gelu.data(), block + o.mlp_out_w,
                   split ? nullptr : block + o.mlp_out_b, rows, 4 * cl, ch);
  });
  exit_region(a.res3.data(), a.res2.data(), block + o.mlp_out_b, "mlp_residual");
}

float GptShard::forward_head(Slot& s, const float* wte, const float* lnf) {
  const int ch = cfg_.hidden, vl = vocab_l_;
  const std::int64_t rows = static_cast<std::int64_t>(batch_) * seq_l_;
  const float* x = last_output(s);
  if (!bert_)  // BERT has no final norm: the LM head reads the last block's output
    timed("final_norm", kHeadLayer, false, 0, [&] {
      layernorm_forward(s.lnf.data(), s.lnf_mean.data(), s.lnf_rstd.data(), x, lnf, lnf + ch,
                        rows_l_, ch);
    });
  const float* normed = bert_ ? x : s.lnf.data();
  if (sp_) gather(normed, gath_.data(), "sp_all_gather", kHeadLayer);
  const float* xf = sp_ ? gath_.data() : normed;
  timed("lm_head", kHeadLayer, false, 2.0 * static_cast<double>(rows) * ch * vl, [&] {
    matmul_forward(s.probs.data(), xf, wte, static_cast<const float*>(nullptr), rows, ch, vl);
  });
  if (s_.tp == 1) {
    float loss = 0;
    timed("cross_entropy", kHeadLayer, false, 0, [&] {
      loss = crossentropy_forward(s.probs.data(), s.losses.data(), s.probs.data(), s.targets.data(),
                                  rows, vl);
    });
    return loss;
  }
  // Vocabulary-parallel cross-entropy (Megatron): the row maxima, the sums of exponentials and
  // the target logits, each all-reduced over the group; probabilities stay split.
  const std::int32_t lo = s_.tp_rank * vl;
  float* tgt = s.losses.data();  // the target logit first, the loss after
  timed("cross_entropy", kHeadLayer, false, 0, [&] {
    for (std::int64_t i = 0; i < rows; ++i) {
      const float* z = s.probs.data() + i * vl;
      s.ce_max[static_cast<std::size_t>(i)] = *std::max_element(z, z + vl);
      const std::int32_t t = s.targets[static_cast<std::size_t>(i)] - lo;
      tgt[i] = t >= 0 && t < vl ? z[t] : 0.0f;  // the target's logit, 0 off this rank
    }
  });
  reduce(s.ce_max.data(), rows, true, "ce_max", kHeadLayer);
  timed("cross_entropy", kHeadLayer, false, 0, [&] {
    for (std::int64_t i = 0; i < rows; ++i) {
      float* z = s.probs.data() + i * vl;
      const float m = s.ce_max[static_cast<std::size_t>(i)];
      double sum = 0;
      for (int v = 0; v < vl; ++v) {
        z[v] = std::exp(z[v] - m);
        sum += z[v];
      }
      s.ce_sum[static_cast<std::size_t>(i)] = static_cast<float>(sum);
    }
  });
  reduce(s.ce_sum.data(), rows, false, "ce_sum_exp", kHeadLayer);
  reduce(tgt, rows, false, "ce_target", kHeadLayer);
  double total = 0;
  timed("cross_entropy", kHeadLayer, false, 0, [&] {
    for (std::int64_t i = 0; i < rows; ++i) {
      const float sum = s.ce_sum[static_cast<std::size_t>(i)];
      tgt[i] = s.targets[static_cast<std::size_t>(i)] < 0
                   ? 0.0f  // ignored (BERT's unmasked positions)
                   : std::log(sum) + s.ce_max[static_cast<std::size_t>(i)] - tgt[i];
      total += tgt[i];
      float* z = s.probs.data() + i * vl;
      const float inv = 1.0f / sum;
      for (int v = 0; v < vl; ++v) z[v] *= inv;
    }
  });
  return s.counted == 0 ? 0.0f : static_cast<float>(total / static_cast<double>(s.counted));
}

void GptShard::backward(int slot, const float* params, float* grads, const float* d_output,
                        const std::function<void(std::int64_t)>& on_done) {
  Slot& s = slots_[static_cast<std::size_t>(slot)];
  CS_CHECK(s.forward_done);
  s.forward_done = false;
  params_ = params;
  grads_ = grads;
  const std::int64_t total = layout_.total();
  auto done = [&](std::int64_t offset) {
    if (on_done) on_done(total - offset);
  };
  const int ch = cfg_.hidden;
  const std::int64_t rows = static_cast<std::int64_t>(batch_) * seq_l_;
  if (s_.head) {
    const Range w = layout_.lm_head_weight(), h = layout_.head();
    backward_head(s, params + w.offset, params + h.offset, grads + w.offset, grads + h.offset);
    done(h.offset);
  } else {
    std::copy(d_output, d_output + rows_l_ * ch, dres_.data());
  }
  for (int l = s_.first_layer + s_.layers - 1; l >= s_.first_layer; --l) {
    const std::int64_t off = layout_.block(l).offset;
    backward_block(s, l, params + off, grads + off);
    done(off);
  }
  if (s_.embedding) {
    const int seq = cfg_.seq;
    float* d_wte = grads + layout_.embedding().offset;
    float* d_wpe = d_wte + static_cast<std::int64_t>(vocab_l_) * ch;
    float* d_wtt = d_wpe + static_cast<std::int64_t>(cfg_.max_positions) * ch;
    auto position = [&](std::int64_t i) {
      return static_cast<std::int64_t>(pos_[static_cast<std::size_t>(i % seq_l_)]);
    };
    auto types_grad = [&](const float* g, std::int64_t i) {
      const int t = token_type(static_cast<int>(position(i)), seq, cfg_.type_vocab);
      if (!bert_ || t < 0) return;
      float* d = d_wtt + static_cast<std::int64_t>(t) * ch;
      for (int c = 0; c < ch; ++c) d[c] += g[c];
    };
    if (bert_) {  // the embedding LayerNorm, on this rank's rows
      const std::int64_t nw = layout_.embedding().size - 2 * ch;
      const float* w = params + layout_.embedding().offset + nw;
      timed("embedding_norm", kEmbeddingLayer, true, 0, [&] {
        zero(demb_);
        layernorm_backward(demb_.data(), d_wte + nw, d_wte + nw + ch, dres_.data(), s.emb.data(), w,
                           s.emb_mean.data(), s.emb_rstd.data(), rows_l_, ch);
        std::copy(demb_.begin(), demb_.end(), dres_.begin());
      });
    }
    if (s_.tp == 1) {
      timed("embedding", kEmbeddingLayer, true, 0, [&] {
        if (s_.cp == 1) {
          encoder_backward(d_wte, d_wpe, dres_.data(), s.tokens.data(), batch_, seq, ch);
        } else {
          for (std::int64_t i = 0; i < rows; ++i) {
            const float* g = dres_.data() + i * ch;
            float* dw =
                d_wte + static_cast<std::int64_t>(s.tokens[static_cast<std::size_t>(i)]) * ch;
            float* dp = d_wpe + position(i) * ch;
            for (int c = 0; c < ch; ++c) dw[c] += g[c], dp[c] += g[c];
          }
        }
        for (std::int64_t i = 0; i < rows; ++i) types_grad(dres_.data() + i * ch, i);
      });
    } else {
      // Every rank has the whole gradient of the lookup (gathered from the sequence shards
      // under sequence parallelism): its vocabulary rows, and the positions whole.
      if (sp_) gather(dres_.data(), dtmp_.data(), "sp_all_gather", kEmbeddingLayer);
      const float* dall = sp_ ? dtmp_.data() : dres_.data();
      const std::int32_t lo = s_.tp_rank * vocab_l_;
      timed("embedding", kEmbeddingLayer, true, 0, [&] {
        for (std::int64_t i = 0; i < rows; ++i) {
          const float* g = dall + i * ch;
          const std::int32_t tok = s.tokens[static_cast<std::size_t>(i)] - lo;
          if (tok >= 0 && tok < vocab_l_) {
            float* d = d_wte + static_cast<std::int64_t>(tok) * ch;
            for (int c = 0; c < ch; ++c) d[c] += g[c];
          }
          float* dp = d_wpe + position(i) * ch;
          for (int c = 0; c < ch; ++c) dp[c] += g[c];
          types_grad(g, i);
        }
      });
    }
    done(layout_.embedding().offset);
  }
  if (layout_.experts().size > 0) done(layout_.experts().offset);  // the experts, at the start
}

void GptShard::backward_head(Slot& s, const float* wte, const float* lnf, float* d_wte,
                             float* d_lnf) {
  const int ch = cfg_.hidden, vl = vocab_l_;
  const std::int64_t rows = static_cast<std::int64_t>(batch_) * seq_l_;
  if (s_.tp == 1) {
    timed("cross_entropy", kHeadLayer, true, 0, [&] {
      crossentropy_backward(s.probs.data(), s.probs.data(), s.targets.data(), rows, vl);
    });
  } else {
    const std::int32_t lo = s_.tp_rank * vl;
    timed("cross_entropy", kHeadLayer, true, 0, [&] {
      const float inv_n = 1.0f / static_cast<float>(std::max<std::int64_t>(s.counted, 1));
      for (std::int64_t i = 0; i < rows; ++i) {
        float* z = s.probs.data() + i * vl;
        if (s.targets[static_cast<std::size_t>(i)] < 0) {  // ignored: no gradient
          std::fill(z, z + vl, 0.0f);
          continue;
        }
        const std::int32_t t = s.targets[static_cast<std::size_t>(i)] - lo;
        for (int v = 0; v < vl; ++v) z[v] = (z[v] - (v == t ? 1.0f : 0.0f)) * inv_n;
      }
    });
  }
  // Megatron re-gathers the LM head's input for its weight gradient.
  const float* normed = bert_ ? last_output(s) : s.lnf.data();
  const float* d = column_backward("lm_head", kHeadLayer, 4.0 * static_cast<double>(rows) * ch * vl,
                                   s.probs.data(), normed, wte, d_wte, nullptr, vl);
  if (bert_) {  // no final norm: the head's input gradient is the last block's output gradient
    std::copy(d, d + rows_l_ * ch, dres_.data());
    return;
  }
  timed("final_norm", kHeadLayer, true, 0, [&] {
    zero(dres_);
    layernorm_backward(dres_.data(), d_lnf, d_lnf + ch, d, last_output(s), lnf, s.lnf_mean.data(),
                       s.lnf_rstd.data(), rows_l_, ch);
  });
}

void GptShard::backward_block(Slot& s, int l, const float* block, float* d_block) {
  const int nb = batch_, seq = seq_l_, ch = cfg_.hidden;
  const int cl = hl_, nh = heads_l_;
  const std::int64_t rows = static_cast<std::int64_t>(nb) * seq, rl = rows_l_;
  const double fn = static_cast<double>(rows), fc = ch, fcl = cl;
  const double attn_flops = 4.0 * nb * seq * static_cast<double>(cfg_.seq) * cl;
  const LocalBlock o(ch, s_.tp, cfg_.experts);
  const BlockActs& a = s.blocks[static_cast<std::size_t>(l - s_.first_layer)];
  const float* inp = block_input(s, l);
  // The residual's gradient into the region: whole rows, gathered from the sequence shards
  // under sequence parallelism (the row-parallel bias's gradient from this rank's rows: the
  // step all-reduces it over the group).
  auto into_region = [&](std::string_view name, float* d_bias) {
    timed(name, l, true, 0, [&] {
      if (sp_) {
        bias_grad(d_bias, dres_.data(), rl, ch);
      } else {
        zero(dtmp_);
        residual_backward(dres_.data(), dtmp_.data(), dres_.data(), rows * ch);
      }
    });
    if (sp_) gather(dres_.data(), dtmp_.data(), "sp_all_gather", l);
  };
  // Megatron's f, backward (the partial input gradients all-reduced, or reduce-scattered onto
  // the sequence shards): column_backward's, beside the weight gradients as Megatron-Core runs
  // it. A block with experts is TP 1: moe_backward leaves d ln2 whole in dln_.
  const float* dln2 = dln_.data();
  if (cfg_.experts > 0) {  // dtmp_ is the MoE output's gradient
    into_region("mlp_residual", nullptr);
    moe_backward(a, l, block, d_block);
  } else {
    into_region("mlp_residual", d_block + o.mlp_out_b);
    timed("mlp_out", l, true, 4 * fn * 4 * fcl * fc, [&] {
      zero(dfch_gelu_);
      matmul_backward(dfch_gelu_.data(), d_block + o.mlp_out_w,
                      sp_ ? nullptr : d_block + o.mlp_out_b, dtmp_.data(), a.fch_gelu.data(),
                      block + o.mlp_out_w, rows, 4 * cl, ch);
    });
    timed("mlp_act", l, true, 0, [&] {
      zero(dfch_);
      gelu_backward(dfch_.data(), a.fch.data(), dfch_gelu_.data(), 4 * rows * cl);
    });
    dln2 = column_backward("mlp_in", l, 4 * fn * fc * 4 * fcl, dfch_.data(), a.ln2.data(),
                           block + o.mlp_in_w, d_block + o.mlp_in_w, d_block + o.mlp_in_b, 4 * cl);
  }
  timed("norm_mlp", l, true, 0, [&] {
    layernorm_backward(dres_.data(), d_block + o.norm_mlp_w, d_block + o.norm_mlp_b, dln2,
                       a.res2.data(), block + o.norm_mlp_w, a.ln2_mean.data(), a.ln2_rstd.data(),
                       rl, ch);
  });
  into_region("attn_residual", d_block + o.attn_out_b);
  timed("attn_out", l, true, 4 * fn * fcl * fc, [&] {
    zero(datty_);
    matmul_backward(datty_.data(), d_block + o.attn_out_w, sp_ ? nullptr : d_block + o.attn_out_b,
                    dtmp_.data(), a.atty.data(), block + o.attn_out_w, rows, cl, ch);
  });
  if (s_.cp > 1) {
    cp_attention_backward(a, l);
  } else if (s_.flash) {
    zero(dqkv_);
    flash_backward(a, l, a.qkv.data() + cl, 3 * cl, dqkv_.data() + cl, 3 * cl);
  } else {
    timed("attn_values", l, true, attn_flops, [&] {
      zero(dqkv_);
      attention_values_backward(datt_.data(), dqkv_.data(), datty_.data(), a.att.data(),
                                a.qkv.data(), nb, seq, cl, nh, !bert_);
    });
    timed("softmax", l, true, 0,
          [&] { attention_softmax_backward(datt_.data(), a.att.data(), nb, seq, nh, !bert_); });
    timed("attn_scores", l, true, attn_flops, [&] {
      attention_scores_backward(dqkv_.data(), datt_.data(), a.qkv.data(), nb, seq, cl, nh, !bert_);
    });
  }
  const float* dln1 =
      column_backward("qkv", l, 4 * fn * fc * 3 * fcl, dqkv_.data(), a.ln1.data(), block + o.qkv_w,
                      d_block + o.qkv_w, d_block + o.qkv_b, 3 * cl);
  timed("norm_attn", l, true, 0, [&] {
    layernorm_backward(dres_.data(), d_block + o.norm_attn_w, d_block + o.norm_attn_b, dln1, inp,
                       block + o.norm_attn_w, a.ln1_mean.data(), a.ln1_rstd.data(), rl, ch);
  });
}

// ---- context parallelism: all-gather attention ----
// Layouts (n = batch x seq_l local rows, cl = h / tp, hs = cl / heads_l): qkv [n, 3 cl] (q, k, v
// side by side, head-major inside each); kv_l_ [n, 2 cl] (k, v) this rank's; kv_all_ [cp, n,
// 2 cl] in CP-rank order, so key kk = r seq_l + j of sequence b is row (r batch + b) seq_l + j
// at position kpos_[kk]; att [batch, heads_l, seq_l, seq] the probabilities (0 where masked:
// a key after the query's position).

namespace {
// One query row's causal softmax over the tk keys of its sequence (key(kk) the key's head
// slice, kpos[kk] its position): p[kk] = exp(q . k scale - max) / sum for the keys at or
// before the query's position qp, 0 after it. Returns the row's logsumexp.
template <class Key>
float causal_softmax_row(const float* q, int qp, const std::vector<int>& kpos, int tk, int hs,
                         float scale, Key&& key, float* p) {
  float m = -std::numeric_limits<float>::infinity();
  for (int kk = 0; kk < tk; ++kk) {
    if (kpos[static_cast<std::size_t>(kk)] > qp) continue;
    const float* k = key(kk);
    float dot = 0;
    for (int d = 0; d < hs; ++d) dot += q[d] * k[d];
    p[kk] = dot * scale;
    m = std::max(m, p[kk]);
  }
  double sum = 0;
  for (int kk = 0; kk < tk; ++kk) {
    if (kpos[static_cast<std::size_t>(kk)] > qp) {
      p[kk] = 0;
      continue;
    }
    p[kk] = std::exp(p[kk] - m);
    sum += p[kk];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int kk = 0; kk < tk; ++kk) p[kk] *= inv;
  return m + static_cast<float>(std::log(sum));
}

// All-to-all CP's exchange layout: rows [n][parts x cl] (each part cl channels, the heads in
// order) and blocks [cp][n][parts x w], block r holding channels [r w, (r + 1) w) of every
// part of every row; from the rows into the blocks (into_blocks) or back.
void copy_head_blocks(const float* from, float* to, std::int64_t n, int cp, int parts, int cl,
                      int w, bool into_blocks) {
  for (int r = 0; r < cp; ++r)
    for (std::int64_t row = 0; row < n; ++row)
      for (int part = 0; part < parts; ++part) {
        const std::int64_t in_rows = (row * parts + part) * cl + r * w,
                           in_blocks = ((r * n + row) * parts + part) * w;
        std::copy_n(from + (into_blocks ? in_rows : in_blocks), w,
                    to + (into_blocks ? in_blocks : in_rows));
      }
}

// The K and V of `rows` rows of Q, K, V (3 w floats a row: q, k, v of w each) into `kv` (2 w
// floats a row: k then v): the all-gather's and the ring's block.
void copy_kv(const float* qkv, std::int64_t rows, std::int64_t w, float* kv) {
  for (std::int64_t r = 0; r < rows; ++r)
    std::copy(qkv + r * 3 * w + w, qkv + (r + 1) * 3 * w, kv + r * 2 * w);
}
}  // namespace

void GptShard::gather_kv(const BlockActs& a, int l) {
  const std::int64_t n = static_cast<std::int64_t>(batch_) * seq_l_, cl = hl_;
  copy_kv(a.qkv.data(), n, cl, kv_l_.data());  // this rank's K and V, then everyone's
  CS_CHECK(context_ != nullptr);
  context_(true, kv_l_.data(), kv_all_.data(), n * 2 * cl, "cp_kv_all_gather", l);
}

void GptShard::cp_attention_forward(BlockActs& a, int l) {
  if (s_.cp_comm == CpCommType::a2a) {
    a2a_attention_forward(a, l);
    return;
  }
  if (s_.cp_ring()) {
    ring_attention_forward(a, l);
    return;
  }
  const int nb = batch_, tl = seq_l_, tk = cfg_.seq, cl = hl_, nh = heads_l_, hs = cl / nh;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  gather_kv(a, l);
  if (s_.flash) {
    flash_forward(a, l, kv_all_.data(), 2 * cl);
    return;
  }
  auto key = [&](int b, int kk) {  // the gathered row of key kk of sequence b
    return kv_all_.data() + gathered_row(b, kk) * 2 * cl;
  };
  const double flops = 2.0 * nb * tl * static_cast<double>(tk) * cl;
  timed("attn_scores", l, false, flops, [&] {
    for (int b = 0; b < nb; ++b)
      for (int h = 0; h < nh; ++h)
        for (int i = 0; i < tl; ++i) {
          const float* q = a.qkv.data() + (static_cast<std::int64_t>(b) * tl + i) * 3 * cl + h * hs;
          float* p = a.att.data() + ((static_cast<std::int64_t>(b) * nh + h) * tl + i) * tk;
          causal_softmax_row(
              q, pos_[static_cast<std::size_t>(i)], kpos_, tk, hs, scale,
              [&](int kk) { return key(b, kk) + h * hs; }, p);
        }
  });
  timed("attn_values", l, false, flops, [&] {
    for (int b = 0; b < nb; ++b)
      for (int h = 0; h < nh; ++h)
        for (int i = 0; i < tl; ++i) {
          const float* p = a.att.data() + ((static_cast<std::int64_t>(b) * nh + h) * tl + i) * tk;
          float* o = a.atty.data() + (static_cast<std::int64_t>(b) * tl + i) * cl + h * hs;
          std::fill(o, o + hs, 0.0f);
          for (int kk = 0; kk < tk; ++kk) {
            if (p[kk] == 0.0f) continue;
            const float* v = key(b, kk) + cl + h * hs;
            for (int d = 0; d < hs; ++d) o[d] += p[kk] * v[d];
          }
        }
  });
}

void GptShard::cp_attention_backward(const BlockActs& a, int l) {
  if (s_.cp_comm == CpCommType::a2a) {
    a2a_attention_backward(a, l);
    return;
  }
  if (s_.cp_ring()) {
    ring_attention_backward(a, l);
    return;
  }
  const int nb = batch_, tl = seq_l_, tk = cfg_.seq, cl = hl_, nh = heads_l_, hs = cl / nh;
  const std::int64_t n = static_cast<std::int64_t>(nb) * tl;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  gather_kv(a, l);  // again (not kept from the forward), as Transformer Engine does
  auto row = [&](int b, int kk) { return gathered_row(b, kk) * 2 * cl; };
  const double flops = 4.0 * nb * tl * static_cast<double>(tk) * cl;
  if (s_.flash) {
    zero(dqkv_);
    zero(dkv_all_);
    flash_backward(a, l, kv_all_.data(), 2 * cl, dkv_all_.data(), 2 * cl);
  } else {
    timed("attn_scores", l, true, flops, [&] {
      zero(dqkv_);
      zero(dkv_all_);
      std::vector<float> dp(static_cast<std::size_t>(tk));
      for (int b = 0; b < nb; ++b)
        for (int h = 0; h < nh; ++h)
          for (int i = 0; i < tl; ++i) {
            const std::int64_t qrow = (static_cast<std::int64_t>(b) * tl + i);
            const float* p = a.att.data() + ((static_cast<std::int64_t>(b) * nh + h) * tl + i) * tk;
            const float* dout = datty_.data() + qrow * cl + h * hs;
            const float* q = a.qkv.data() + qrow * 3 * cl + h * hs;
            float* dq = dqkv_.data() + qrow * 3 * cl + h * hs;
            // dP = dO V^T and dV += P^T dO; then the softmax's backward, dS = P (dP - sum P dP).
            double dot_pdp = 0;
            for (int kk = 0; kk < tk; ++kk) {
              dp[static_cast<std::size_t>(kk)] = 0;
              if (p[kk] == 0.0f) continue;
              const std::int64_t at = row(b, kk);
              const float* v = kv_all_.data() + at + cl + h * hs;
              float* dv = dkv_all_.data() + at + cl + h * hs;
              float s = 0;
              for (int d = 0; d < hs; ++d) {
                s += dout[d] * v[d];
                dv[d] += p[kk] * dout[d];
              }
              dp[static_cast<std::size_t>(kk)] = s;
              dot_pdp += static_cast<double>(p[kk]) * s;
            }
            for (int kk = 0; kk < tk; ++kk) {
              if (p[kk] == 0.0f) continue;
              const float ds =
                  p[kk] * (dp[static_cast<std::size_t>(kk)] - static_cast<float>(dot_pdp)) * scale;
              const std::int64_t at = row(b, kk);
              const float* k = kv_all_.data() + at + h * hs;
              float* dk = dkv_all_.data() + at + h * hs;
              for (int d = 0; d < hs; ++d) {
                dq[d] += ds * k[d];
                dk[d] += ds * q[d];
              }
            }
          }
    });
  }
  // Each key's gradient summed over the CP ranks' queries, onto the key's owner.
  context_(false, dkv_all_.data(), kv_l_.data(), n * 2 * cl, "cp_dkv_reduce_scatter", l);
  timed("attn_values", l, true, 0, [&] {
    for (std::int64_t r = 0; r < n; ++r)
      std::copy(kv_l_.data() + r * 2 * cl, kv_l_.data() + (r + 1) * 2 * cl,
                dqkv_.data() + r * 3 * cl + cl);
  });
}

namespace {
// One (query, key) pair of attention's backward for a head of hs channels, given the pair's
// probability p and the query row's D = dO . O: dP = dO . v, dS = p (dP - D) scale; dV += p dO,
// dQ += dS k, dK += dS q (FlashAttention's backward; the ring's per block).
void key_backward(float p, const float* q, const float* k, const float* v, const float* dout,
                  float D, float scale, int hs, float* dq, float* dk, float* dv) {
  float dp = 0;
  for (int d = 0; d < hs; ++d) dp += dout[d] * v[d];
  const float ds = p * (dp - D) * scale;
  for (int d = 0; d < hs; ++d) {
    dv[d] += p * dout[d];
    dq[d] += ds * k[d];
    dk[d] += ds * q[d];
  }
}
}  // namespace

// ---- context parallelism: all-to-all (DeepSpeed-Ulysses) ----
// Block r of each exchange holds CP rank r's heads, [r, r + 1) x heads_l / cp. After the Q, K, V
// all-to-all this rank holds its heads at every position, source by source: key kk of sequence
// b (position kk % seq_l of CP rank kk / seq_l, at kpos_[kk]) at row (kk / seq_l x batch + b) x
// seq_l + kk % seq_l of a.qkv_h, the all-gather's order. Attention over the whole sequence is
// then the unsplit model's for those heads; FlashAttention keeps each query row's logsumexp and
// recomputes the probabilities in backward, the unfused form keeps them.

void GptShard::a2a_attention_forward(BlockActs& a, int l) {
  const int cp = s_.cp, nb = batch_, tl = seq_l_, tk = cfg_.seq, cl = hl_, nh = heads_l_ / cp;
  const int hs = cl / heads_l_, w = nh * hs;  // this rank's heads' channels
  const std::int64_t n = static_cast<std::int64_t>(nb) * tl, stride = 3 * w;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  CS_CHECK(a2a_ != nullptr);
  copy_head_blocks(a.qkv.data(), a2a_send_.data(), n, cp, 3, cl, w, true);
  a2a_(a2a_send_.data(), a.qkv_h.data(), n * stride, "cp_qkv_all_to_all", l);
  // This rank's heads' output at every position, in a2a_send_ by source (the block it returns
  // to), as a.qkv_h's rows.
  const double flops = 2.0 * nb * tl * static_cast<double>(tk) * cl;
  auto core = [&](bool values) {
    std::vector<float> p(static_cast<std::size_t>(tk));
    for (int b = 0; b < nb; ++b)
      for (int h = 0; h < nh; ++h)
        for (int qk = 0; qk < tk; ++qk) {
          const std::int64_t qr = gathered_row(b, qk),
                             at = (static_cast<std::int64_t>(b) * nh + h) * tk + qk;
          float* P = s_.flash ? p.data() : a.att.data() + at * tk;
          if (s_.flash || !values) {  // the scores and softmax: the unfused first kernel's
            const float lse = causal_softmax_row(
                a.qkv_h.data() + qr * stride + h * hs, kpos_[static_cast<std::size_t>(qk)], kpos_,
                tk, hs, scale,
                [&](int kk) { return a.qkv_h.data() + gathered_row(b, kk) * stride + w + h * hs; },
                P);
            if (s_.flash) a.lse[static_cast<std::size_t>(at)] = lse;
          }
          if (!values) continue;
          float* o = a2a_send_.data() + qr * w + h * hs;  // P V
          std::fill(o, o + hs, 0.0f);
          for (int kk = 0; kk < tk; ++kk) {
            if (P[kk] == 0.0f) continue;
            const float* v = a.qkv_h.data() + gathered_row(b, kk) * stride + 2 * w + h * hs;
            for (int d = 0; d < hs; ++d) o[d] += P[kk] * v[d];
          }
        }
  };
  if (s_.flash) {
    timed("flash_attn", l, false, 2 * flops, [&] { core(true); });
  } else {
    timed("attn_scores", l, false, flops, [&] { core(false); });
    timed("attn_values", l, false, flops, [&] { core(true); });
  }
  a2a_(a2a_send_.data(), a2a_recv_.data(), n * w, "cp_out_all_to_all", l);
  copy_head_blocks(a2a_recv_.data(), a.atty.data(), n, cp, 1, cl, w, false);
}

void GptShard::a2a_attention_backward(const BlockActs& a, int l) {
  const int cp = s_.cp, nb = batch_, tl = seq_l_, tk = cfg_.seq, cl = hl_, nh = heads_l_ / cp;
  const int hs = cl / heads_l_, w = nh * hs;
  const std::int64_t n = static_cast<std::int64_t>(nb) * tl, stride = 3 * w;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  copy_head_blocks(datty_.data(), a2a_send_.data(), n, cp, 1, cl, w, true);
  a2a_(a2a_send_.data(), a2a_recv_.data(), n * w, "cp_dout_all_to_all", l);  // dO, by source
  // dP = dO . v and D = sum P dP (= dO . O) per query row, then dS = P (dP - D) scale: dV +=
  // P dO, dQ += dS k, dK += dS q; FlashAttention recomputes P from the row's logsumexp.
  auto grad = [&] {
    std::fill(a2a_grad_.begin(), a2a_grad_.end(), 0.0f);
    std::vector<float> p(static_cast<std::size_t>(tk)), dp(static_cast<std::size_t>(tk));
    for (int b = 0; b < nb; ++b)
      for (int h = 0; h < nh; ++h)
        for (int qk = 0; qk < tk; ++qk) {
          const std::int64_t qr = gathered_row(b, qk),
                             at = (static_cast<std::int64_t>(b) * nh + h) * tk + qk;
          const int qp = kpos_[static_cast<std::size_t>(qk)];
          const float* q = a.qkv_h.data() + qr * stride + h * hs;
          const float* dout = a2a_recv_.data() + qr * w + h * hs;
          float* dq = a2a_grad_.data() + qr * stride + h * hs;
          double D = 0;
          for (int kk = 0; kk < tk; ++kk) {
            const auto k_ = static_cast<std::size_t>(kk);
            if (kpos_[k_] > qp) continue;
            const float* k = a.qkv_h.data() + gathered_row(b, kk) * stride + w + h * hs;
            const float* v = k + w;
            if (s_.flash) {
              float dot = 0;
              for (int d = 0; d < hs; ++d) dot += q[d] * k[d];
              p[k_] = std::exp(dot * scale - a.lse[static_cast<std::size_t>(at)]);
            } else {
              p[k_] = a.att[static_cast<std::size_t>(at * tk + kk)];
            }
            float s = 0;
            for (int d = 0; d < hs; ++d) s += dout[d] * v[d];
            dp[k_] = s;
            D += static_cast<double>(p[k_]) * s;
          }
          for (int kk = 0; kk < tk; ++kk) {
            const auto k_ = static_cast<std::size_t>(kk);
            if (kpos_[k_] > qp) continue;
            const std::int64_t kr = gathered_row(b, kk) * stride + w + h * hs;
            const float* k = a.qkv_h.data() + kr;
            float* dk = a2a_grad_.data() + kr;
            float* dv = dk + w;
            const float ds = p[k_] * (dp[k_] - static_cast<float>(D)) * scale;
            for (int d = 0; d < hs; ++d) {
              dv[d] += p[k_] * dout[d];
              dq[d] += ds * k[d];
              dk[d] += ds * q[d];
            }
          }
        }
  };
  const double flops = 4.0 * nb * tl * static_cast<double>(tk) * cl;
  if (s_.flash)
    timed("flash_attn", l, true, 2.5 * flops, grad);  // five s x s products to the forward's two
  else
    timed("attn_scores", l, true, flops, grad);
  a2a_(a2a_grad_.data(), a2a_send_.data(), n * stride, "cp_dqkv_all_to_all", l);
  copy_head_blocks(a2a_send_.data(), dqkv_.data(), n, cp, 3, cl, w, false);
}

// ---- context parallelism: ring attention ----
// The rank's queries meet the ring members' K,V blocks one per step: step s holds the block of
// member (index - s) mod size while the next one travels (the pass overlaps the attention core,
// as in Transformer Engine's P2P CP). Forward keeps per query row and head the running maximum m
// and sum l of exp(score - m) and rescales the partial output when m grows (FlashAttention's
// online softmax): after the last block O = O / l and, with FlashAttention, L = m + log l.
// Unfused attention also keeps the raw scores in a.att and turns them into probabilities at the
// end, so backward reads P from it; FlashAttention recomputes P = exp(S - L). Backward uses D =
// dO . O (= sum P dP), so each block's dQ, dK, dV need only that block. K,V go round again in
// backward, the other way (ring_attention_backward), and each block's dK,dV accumulate as they
// follow it one step behind, ending with the block's owner: 2 (size - 1) chunks in size
// messages.
// Causality is by position (kpos_): the load-balanced chunks make some blocks fully visible,
// some half, and the rank's own block diagonal. Hierarchical CP runs the same ring on the rows
// its all-to-all gathered (RingView): a member's block is then its group's positions, kpos_
// from member x T on, since kpos_ lists the CP ranks' positions in rank order.

GptShard::RingView GptShard::ring_view(const BlockActs& a) const {
  RingView v;
  const int inner = s_.cp_a2a_level();
  v.size = s_.cp / inner;
  v.index = s_.cp_rank / inner;
  v.T = inner * seq_l_;
  v.nh = heads_l_ / inner;
  v.hs = hl_ / heads_l_;
  v.w = v.nh * v.hs;
  v.qkv = inner > 1 ? a.qkv_h.data() : a.qkv.data();
  v.qpos = kpos_.data() + static_cast<std::ptrdiff_t>(v.index) * v.T;
  return v;
}

void GptShard::ring_attention_forward(BlockActs& a, int l) {
  const int inner = s_.cp_a2a_level(), cl = hl_;
  const std::int64_t n = static_cast<std::int64_t>(batch_) * seq_l_;
  CS_CHECK(ring_ != nullptr);
  const RingView v = ring_view(a);
  if (inner > 1) {  // the group's positions of this rank's heads / a heads
    CS_CHECK(a2a_ != nullptr);
    copy_head_blocks(a.qkv.data(), a2a_send_.data(), n, inner, 3, cl, v.w, true);
    a2a_(a2a_send_.data(), a.qkv_h.data(), n * 3 * v.w, "cp_qkv_all_to_all", l);
  }
  float* out = inner > 1 ? a.out_h.data() : a.atty.data();
  copy_kv(v.qkv, inner * n, v.w, ring_kv_[0].data());  // this rank's K and V start the ring
  std::fill(ring_max_.begin(), ring_max_.end(), -std::numeric_limits<float>::infinity());
  std::fill(ring_sum_.begin(), ring_sum_.end(), 0.0);
  std::fill_n(out, inner * n * v.w, 0.0f);
  for (int step = 0; step < v.size; ++step) {
    const int cur = step % 2, src = (v.index - step + v.size) % v.size;
    std::function<void()> wait;
    if (step + 1 < v.size)
      wait = ring_(ring_kv_[cur].data(), ring_kv_[1 - cur].data(), n * 2 * cl, "cp_kv_send", l,
                   step == 0, false);
    ring_block_forward(a, v, out, l, ring_kv_[cur].data(), src);
    if (wait) wait();
  }
  // The block held last (the next member's) starts backward's ring.
  std::copy_n(ring_kv_[(v.size - 1) % 2].data(), n * 2 * cl, a.ring_kv_last.data());
  const int nb = batch_, tk = cfg_.seq, nh = v.nh, hs = v.hs, T = v.T;
  timed(s_.flash ? "flash_attn" : "softmax", l, false, 0, [&] {
    for (int b = 0; b < nb; ++b)
      for (int h = 0; h < nh; ++h)
        for (int t = 0; t < T; ++t) {
          const std::size_t q = static_cast<std::size_t>((b * nh + h) * T + t);
          const float lse = ring_max_[q] + static_cast<float>(std::log(ring_sum_[q]));
          float* o = out + gathered_row(b, t) * v.w + h * hs;
          const float inv = static_cast<float>(1.0 / ring_sum_[q]);
          for (int d = 0; d < hs; ++d) o[d] *= inv;
          if (s_.flash) {
            a.lse[q] = lse;
            continue;
          }
          float* p = a.att.data() + static_cast<std::int64_t>(q) * tk;
          const int qp = v.qpos[t];
          for (int kk = 0; kk < tk; ++kk)
            p[kk] = kpos_[static_cast<std::size_t>(kk)] > qp ? 0.0f : std::exp(p[kk] - lse);
        }
  });
  if (inner > 1) {  // the output of those heads and positions back to the positions' ranks
    a2a_(a.out_h.data(), a2a_recv_.data(), n * v.w, "cp_out_all_to_all", l);
    copy_head_blocks(a2a_recv_.data(), a.atty.data(), n, inner, 1, cl, v.w, false);
  }
}

void GptShard::ring_block_forward(BlockActs& a, const RingView& v, float* out, int l,
                                  const float* kv, int src) {
  const int nb = batch_, T = v.T, tk = cfg_.seq, nh = v.nh, hs = v.hs, w = v.w;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int* kpos = kpos_.data() + static_cast<std::ptrdiff_t>(src) * T;  // the block's keys
  const double flops = 2.0 * nb * T * static_cast<double>(T) * w;
  std::vector<float> scratch(static_cast<std::size_t>(T));
  // The block's scores of row (b, h, t) (kept in a.att at the block's columns when unfused),
  // the new running maximum, the sum rescaled to it; the output's rescale factor in ring_scale_.
  auto scores = [&](int b, int h, int t) -> float* {
    const std::size_t q = static_cast<std::size_t>((b * nh + h) * T + t);
    float* p = s_.flash ? scratch.data()
                        : a.att.data() + static_cast<std::int64_t>(q) * tk +
                              static_cast<std::int64_t>(src) * T;
    const float* qv = v.qkv + gathered_row(b, t) * 3 * w + h * hs;
    const int qp = v.qpos[t];
    float m = ring_max_[q];
    for (int j = 0; j < T; ++j) {
      if (kpos[j] > qp) continue;
      const float* k = kv + gathered_row(b, j) * 2 * w + h * hs;
      float dot = 0;
      for (int d = 0; d < hs; ++d) dot += qv[d] * k[d];
      p[j] = dot * scale;
      m = std::max(m, p[j]);
    }
    const float f =
        ring_max_[q] == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(ring_max_[q] - m);
    double sum = ring_sum_[q] * f;
    for (int j = 0; j < T; ++j)
      if (kpos[j] <= qp) sum += std::exp(static_cast<double>(p[j] - m));
    ring_max_[q] = m, ring_sum_[q] = sum, ring_scale_[q] = f;
    return p;
  };
  // The output rescaled and the block's values added with weights exp(score - m).
  auto values = [&](int b, int h, int t, const float* p) {
    const std::size_t q = static_cast<std::size_t>((b * nh + h) * T + t);
    if (ring_max_[q] == -std::numeric_limits<float>::infinity()) return;  // nothing visible yet
    float* o = out + gathered_row(b, t) * w + h * hs;
    for (int d = 0; d < hs; ++d) o[d] *= ring_scale_[q];
    const int qp = v.qpos[t];
    for (int j = 0; j < T; ++j) {
      if (kpos[j] > qp) continue;
      const float wt = std::exp(p[j] - ring_max_[q]);
      const float* val = kv + gathered_row(b, j) * 2 * w + w + h * hs;
      for (int d = 0; d < hs; ++d) o[d] += wt * val[d];
    }
  };
  if (s_.flash) {
    timed("flash_attn", l, false, 2 * flops, [&] {
      for (int b = 0; b < nb; ++b)
        for (int h = 0; h < nh; ++h)
          for (int t = 0; t < T; ++t) values(b, h, t, scores(b, h, t));
    });
    return;
  }
  timed("attn_scores", l, false, flops, [&] {
    for (int b = 0; b < nb; ++b)
      for (int h = 0; h < nh; ++h)
        for (int t = 0; t < T; ++t) scores(b, h, t);
  });
  timed("attn_values", l, false, flops, [&] {
    for (int b = 0; b < nb; ++b)
      for (int h = 0; h < nh; ++h)
        for (int t = 0; t < T; ++t) {
          const std::size_t q = static_cast<std::size_t>((b * nh + h) * T + t);
          values(b, h, t,
                 a.att.data() + static_cast<std::int64_t>(q) * tk +
                     static_cast<std::int64_t>(src) * T);
        }
  });
}

void GptShard::ring_attention_backward(const BlockActs& a, int l) {
  const int inner = s_.cp_a2a_level(), nb = batch_, cl = hl_;
  const std::int64_t n = static_cast<std::int64_t>(nb) * seq_l_, chunk = n * 2 * cl;
  const RingView v = ring_view(a);
  const int nh = v.nh, hs = v.hs, T = v.T, w = v.w;
  const float* out = inner > 1 ? a.out_h.data() : a.atty.data();
  const float* dout = datty_.data();
  float* dq = dqkv_.data();
  if (inner > 1) {  // dO of the group's positions of this rank's heads / a heads
    copy_head_blocks(datty_.data(), a2a_send_.data(), n, inner, 1, cl, w, true);
    a2a_(a2a_send_.data(), a2a_recv_.data(), n * w, "cp_dout_all_to_all", l);
    dout = a2a_recv_.data();
    dq = a2a_grad_.data();
  }
  for (int b = 0; b < nb; ++b)  // D = dO . O per query row and head
    for (int h = 0; h < nh; ++h)
      for (int t = 0; t < T; ++t) {
        const std::int64_t at = gathered_row(b, t) * w + h * hs;
        float D = 0;
        for (int d = 0; d < hs; ++d) D += dout[at + d] * out[at + d];
        ring_d_[static_cast<std::size_t>((b * nh + h) * T + t)] = D;
      }
  const std::int64_t rows = inner * n;
  std::fill_n(dq, rows * 3 * w, 0.0f);
  // Transformer Engine's order: the ring the other way round from the block the forward held
  // last, so that step s holds member index + 1 + s's block and the last step this rank's own.
  // Each step is one message, sent as the step starts and awaited after its compute: K,V on
  // alone at the first; K,V on with the dK,dV of the step before between; that dK,dV alone at
  // the last. A block's dK,dV thus follow it one step behind, each member adding its part
  // after the wait (what came with the block, plus this step's), and the last step leaves this
  // rank's own block's whole. A message is [K,V | dK,dV] in ring_kv_ (chunk floats each).
  float* msg[2] = {ring_kv_[0].data(), ring_kv_[1].data()};
  std::copy_n(a.ring_kv_last.data(), chunk, msg[0]);
  for (int step = 0; step < v.size; ++step) {
    const int cur = step % 2, src = (v.index + 1 + step) % v.size;
    const bool first = step == 0, last = step + 1 == v.size;
    const std::int64_t from = first ? 0 : last ? chunk : 0;  // K,V alone, both, dK,dV alone
    const std::int64_t count = first || last ? chunk : 2 * chunk;
    std::function<void()> wait =
        ring_(msg[cur] + from, msg[1 - cur] + from, count, "cp_kv_dkv_send", l, first, true);
    zero(ring_dkv_own_);
    ring_block_backward(a, v, dout, dq, l, msg[cur], ring_dkv_own_.data(), src);
    wait();
    // This block's dK,dV so far, where the next step's message takes it from.
    float* acc = msg[1 - cur] + chunk;
    timed("attn_values", l, true, 0, [&] {
      if (first)
        std::copy_n(ring_dkv_own_.data(), chunk, acc);
      else
        for (std::int64_t i = 0; i < chunk; ++i)
          acc[i] += ring_dkv_own_[static_cast<std::size_t>(i)];
    });
  }
  // This rank's own block's dK,dV, beside dQ.
  const float* own = msg[v.size % 2] + chunk;
  for (std::int64_t r = 0; r < rows; ++r) std::copy_n(own + r * 2 * w, 2 * w, dq + r * 3 * w + w);
  if (inner > 1) {  // dQ, dK, dV back to the positions' ranks
    a2a_(a2a_grad_.data(), a2a_send_.data(), n * 3 * w, "cp_dqkv_all_to_all", l);
    copy_head_blocks(a2a_send_.data(), dqkv_.data(), n, inner, 3, cl, w, false);
  }
}

void GptShard::ring_block_backward(const BlockActs& a, const RingView& v, const float* dout,
                                   float* dqkv, int l, const float* kv, float* dkv, int src) {
  const int nb = batch_, T = v.T, tk = cfg_.seq, nh = v.nh, hs = v.hs, w = v.w;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int* kpos = kpos_.data() + static_cast<std::ptrdiff_t>(src) * T;
  const double flops = 4.0 * nb * T * static_cast<double>(T) * w;
  // The unfused kernels' dP, dV, dQ, dK (four products); FlashAttention also recomputes S.
  timed(s_.flash ? "flash_attn" : "attn_scores", l, true, s_.flash ? 2.5 * flops : flops, [&] {
    for (int b = 0; b < nb; ++b)
      for (int h = 0; h < nh; ++h)
        for (int t = 0; t < T; ++t) {
          const std::size_t q = static_cast<std::size_t>((b * nh + h) * T + t);
          const std::int64_t row = gathered_row(b, t);
          const float* qv = v.qkv + row * 3 * w + h * hs;
          const float* dov = dout + row * w + h * hs;
          float* dq = dqkv + row * 3 * w + h * hs;
          const float* p = s_.flash ? nullptr
                                    : a.att.data() + static_cast<std::int64_t>(q) * tk +
                                          static_cast<std::int64_t>(src) * T;
          const int qp = v.qpos[t];
          for (int j = 0; j < T; ++j) {
            if (kpos[j] > qp) continue;
            const std::int64_t at = gathered_row(b, j) * 2 * w + h * hs;
            const float* k = kv + at;
            const float* val = k + w;
            float* dk = dkv + at;
            float* dv = dk + w;
            float pj;
            if (s_.flash) {
              float s = 0;
              for (int d = 0; d < hs; ++d) s += qv[d] * k[d];
              pj = std::exp(s * scale - a.lse[q]);
            } else {
              pj = p[j];
            }
            key_backward(pj, qv, k, val, dov, ring_d_[q], scale, hs, dq, dk, dv);
          }
        }
  });
}

// ---- mixture of experts ----
// Per MoE block and micro-batch (n rows, E experts, k per token, El = E / ep on this rank):
// the router's logits, each token's top k and their gates (softmax over the k); its k rows in
// the dispatch order (by expert, experts in rank order, then by token); the counts exchanged;
// the rows all-to-allv'd to the experts' ranks (received by source rank, then by expert), put
// in expert-major order, through each local expert, back to the received order, all-to-allv'd
// back (the combine), and summed per token with its gates.

namespace {
// Rows of `width` floats between the received order and the experts' (perm[expert-major row] =
// received row): to_experts gathers them into expert-major order, otherwise scatters back.
void permute_rows(const std::vector<int>& perm, const float* from, float* to, int width,
                  bool to_experts) {
  for (std::size_t r = 0; r < perm.size(); ++r) {
    const std::int64_t e = static_cast<std::int64_t>(r) * width,
                       recv = static_cast<std::int64_t>(perm[r]) * width;
    const float* src = from + (to_experts ? recv : e);
    std::copy(src, src + width, to + (to_experts ? e : recv));
  }
}
}  // namespace

void GptShard::expert_exchange(const float* send, const std::vector<int>& send_rows, float* recv,
                               const std::vector<int>& recv_rows, int width, std::string_view name,
                               int layer) {
  if (s_.ep == 1) {
    std::copy(send, send + static_cast<std::int64_t>(send_rows[0]) * width, recv);
    return;
  }
  CS_CHECK(expert_comm_ != nullptr);
  expert_comm_(send, send_rows, recv, recv_rows, width, name, layer);
}

std::vector<std::vector<std::pair<int, int>>> GptShard::expert_rows(const BlockActs& a,
                                                                    std::int64_t n) const {
  const int E = cfg_.experts, k = cfg_.experts_per_token;
  std::vector<std::vector<std::pair<int, int>>> rows(static_cast<std::size_t>(E));
  for (std::int64_t q = 0; q < n * k; ++q)  // routed: in token order
    rows[static_cast<std::size_t>(a.sel[static_cast<std::size_t>(q)])].emplace_back(
        static_cast<int>(q / k), static_cast<int>(q));
  const double cf = s_.moe_capacity_factor;
  if (cf <= 0) return rows;
  // Megatron-LM's get_capacity and apply_router_token_dropping (drop policy "probs"): each
  // expert keeps the capacity's tokens of the highest routing probability (the gate where the
  // token chose it, 0 elsewhere; the lower token first among equals); padded, exactly those,
  // the unchosen with weight 0; otherwise the chosen among them. Above the tokens, all tokens.
  const double capacity = std::ceil(static_cast<double>(n) * k / E * cf);
  for (int e = 0; e < E; ++e) {
    std::vector<std::pair<int, int>>& of = rows[static_cast<std::size_t>(e)];
    if (capacity >= static_cast<double>(n)) {
      if (!s_.moe_pad_to_capacity) continue;
      std::vector<std::pair<int, int>> all(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i)
        all[static_cast<std::size_t>(i)] = {static_cast<int>(i), -1};
      for (const auto& [token, slot] : of) all[static_cast<std::size_t>(token)].second = slot;
      of = std::move(all);
      continue;
    }
    const auto cap = static_cast<std::size_t>(capacity);
    std::vector<std::pair<int, int>> by(static_cast<std::size_t>(n));  // (token, slot or -1)
    for (std::int64_t i = 0; i < n; ++i)
      by[static_cast<std::size_t>(i)] = {static_cast<int>(i), -1};
    for (const auto& [token, slot] : of) by[static_cast<std::size_t>(token)].second = slot;
    auto prob = [&a](const std::pair<int, int>& r) {
      return r.second < 0 ? 0.0f : a.gate[static_cast<std::size_t>(r.second)];
    };
    std::partial_sort(by.begin(), by.begin() + static_cast<std::ptrdiff_t>(cap), by.end(),
                      [&](const auto& x, const auto& y) {
                        return prob(x) > prob(y) || (prob(x) == prob(y) && x.first < y.first);
                      });
    by.resize(cap);
    if (!s_.moe_pad_to_capacity)
      by.erase(std::remove_if(by.begin(), by.end(), [](const auto& r) { return r.second < 0; }),
               by.end());
    std::sort(by.begin(), by.end());  // token order
    of = std::move(by);
  }
  return rows;
}

void GptShard::moe_forward(BlockActs& a, int l, const float* block) {
  const int h = cfg_.hidden, E = cfg_.experts, k = cfg_.experts_per_token, ep = s_.ep;
  const int el = E / ep, f = 4 * h;
  const std::int64_t n = rows_l_, nk = n * k;
  const LocalBlock o(h, 1, E);
  const float* x = a.ln2.data();
  std::vector<float> logits(static_cast<std::size_t>(n * E));
  timed("moe_router", l, false, 2.0 * static_cast<double>(n) * h * E, [&] {
    matmul_forward(logits.data(), x, block + o.router, static_cast<const float*>(nullptr), n, h, E);
  });
  a.sel.resize(static_cast<std::size_t>(nk));
  a.gate.resize(static_cast<std::size_t>(nk));
  a.pos.resize(static_cast<std::size_t>(nk));
  std::vector<int> count(static_cast<std::size_t>(E), 0), idx(static_cast<std::size_t>(E));
  timed("moe_route", l, false, 0, [&] {
    for (std::int64_t i = 0; i < n; ++i) {
      const float* z = logits.data() + i * E;
      for (int e = 0; e < E; ++e) idx[static_cast<std::size_t>(e)] = e;
      // The k largest logits, the lower expert first among equals.
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                        [z](int p, int q) { return z[p] > z[q] || (z[p] == z[q] && p < q); });
      const float m = z[idx[0]];
      double sum = 0;
      for (int j = 0; j < k; ++j) sum += std::exp(static_cast<double>(z[idx[j]] - m));
      for (int j = 0; j < k; ++j) {
        const std::size_t q = static_cast<std::size_t>(i * k + j);
        a.sel[q] = idx[static_cast<std::size_t>(j)];
        a.gate[q] = static_cast<float>(std::exp(static_cast<double>(z[idx[j]] - m)) / sum);
        ++count[static_cast<std::size_t>(a.sel[q])];
      }
    }
  });
  moe_stats_.routed.insert(moe_stats_.routed.end(), count.begin(), count.end());
  if (s_.moe_aux_loss_coeff > 0) {
    // The load-balancing loss over this rank's tokens (ShardSpec::moe_aux_loss_coeff).
    a.probs.resize(static_cast<std::size_t>(n * E));
    std::vector<double> mass(static_cast<std::size_t>(E), 0.0);  // sum_t p_te
    for (std::int64_t i = 0; i < n; ++i) {
      const float* z = logits.data() + i * E;
      float* p = a.probs.data() + i * E;
      const float m = *std::max_element(z, z + E);
      double sum = 0;
      for (int e = 0; e < E; ++e) sum += std::exp(static_cast<double>(z[e] - m));
      for (int e = 0; e < E; ++e) {
        p[e] = static_cast<float>(std::exp(static_cast<double>(z[e] - m)) / sum);
        mass[static_cast<std::size_t>(e)] += p[e];
      }
    }
    const double unit = static_cast<double>(s_.moe_aux_loss_coeff) * E /
                        (static_cast<double>(k) * static_cast<double>(n) * static_cast<double>(n));
    a.aux_w.resize(static_cast<std::size_t>(E));
    double aux = 0;
    for (int e = 0; e < E; ++e) {
      a.aux_w[static_cast<std::size_t>(e)] =
          static_cast<float>(unit * count[static_cast<std::size_t>(e)]);
      aux += unit * count[static_cast<std::size_t>(e)] * mass[static_cast<std::size_t>(e)];
    }
    moe_stats_.aux_loss += aux;
    ++moe_stats_.aux_blocks;
  }
  // The rows each expert takes, (token, its slot i k + j, or -1 for a padded row of weight 0):
  // the routed ones, or under a capacity factor those of ShardSpec::moe_capacity_factor.
  const std::vector<std::vector<std::pair<int, int>>> rows = expert_rows(a, n);
  // Dispatch order: expert by expert (so rank by rank), tokens in order within an expert.
  std::fill(count.begin(), count.end(), 0);
  std::fill(a.pos.begin(), a.pos.end(), -1);  // dropped unless placed
  std::int64_t sent = 0;
  for (int e = 0; e < E; ++e) {
    count[static_cast<std::size_t>(e)] = static_cast<int>(rows[static_cast<std::size_t>(e)].size());
    sent += count[static_cast<std::size_t>(e)];
  }
  std::vector<float> send(static_cast<std::size_t>(sent * h));
  {
    std::int64_t at = 0;
    for (const auto& of : rows)
      for (const auto& [token, slot] : of) {
        if (slot >= 0) a.pos[static_cast<std::size_t>(slot)] = static_cast<int>(at);
        std::copy(x + static_cast<std::int64_t>(token) * h,
                  x + (static_cast<std::int64_t>(token) + 1) * h, send.data() + at * h);
        ++at;
      }
  }
  a.send_rows.assign(static_cast<std::size_t>(ep), 0);
  for (int e = 0; e < E; ++e)
    a.send_rows[static_cast<std::size_t>(e / el)] += count[static_cast<std::size_t>(e)];
  // Every rank's rows for this rank's experts: recv_counts[r * el + e].
  std::vector<int> recv_counts;
  if (ep == 1) {
    recv_counts = count;
  } else {
    CS_CHECK(expert_counts_ != nullptr);
    recv_counts.assign(static_cast<std::size_t>(ep * el), 0);
    expert_counts_(count, recv_counts, l);
  }
  a.recv_rows.assign(static_cast<std::size_t>(ep), 0);
  a.expert_rows.assign(static_cast<std::size_t>(el), 0);
  for (int r = 0; r < ep; ++r)
    for (int e = 0; e < el; ++e) {
      const int c = recv_counts[static_cast<std::size_t>(r * el + e)];
      CS_CHECK(c >= 0 && c <= n);  // bounded: a token goes to an expert at most once
      a.recv_rows[static_cast<std::size_t>(r)] += c;
      a.expert_rows[static_cast<std::size_t>(e)] += c;
    }
  std::int64_t m = 0;
  for (int c : a.recv_rows) m += c;
  std::vector<float> recv(static_cast<std::size_t>(m * h));
  expert_exchange(send.data(), a.send_rows, recv.data(), a.recv_rows, h, "moe_dispatch", l);
  // perm[expert-major row] = received row.
  a.perm.assign(static_cast<std::size_t>(m), 0);
  {
    std::vector<std::int64_t> at(static_cast<std::size_t>(el), 0);
    for (int e = 1; e < el; ++e)
      at[static_cast<std::size_t>(e)] =
          at[static_cast<std::size_t>(e) - 1] + a.expert_rows[static_cast<std::size_t>(e) - 1];
    std::int64_t from = 0;
    for (int r = 0; r < ep; ++r)
      for (int e = 0; e < el; ++e)
        for (int c = 0; c < recv_counts[static_cast<std::size_t>(r * el + e)]; ++c)
          a.perm[static_cast<std::size_t>(at[static_cast<std::size_t>(e)]++)] =
              static_cast<int>(from++);
  }
  a.xe.resize(static_cast<std::size_t>(m * h));
  a.he.resize(static_cast<std::size_t>(m * f));
  a.ge.resize(static_cast<std::size_t>(m * f));
  std::vector<float> ye(static_cast<std::size_t>(m * h));
  permute_rows(a.perm, recv.data(), a.xe.data(), h, true);
  timed("moe_experts", l, false, 4.0 * static_cast<double>(m) * h * f, [&] {
    std::int64_t off = 0;
    for (int e = 0; e < el; ++e) {
      const std::int64_t me = a.expert_rows[static_cast<std::size_t>(e)];
      const float* w = params_ + layout_.expert(l, e).offset;
      if (me > 0) {
        matmul_forward(a.he.data() + off * f, a.xe.data() + off * h, w, w + 4 * h * h, me, h, f);
        gelu_forward(a.ge.data() + off * f, a.he.data() + off * f, me * f);
        matmul_forward(ye.data() + off * h, a.ge.data() + off * f, w + 4 * h * h + 4 * h,
                       w + 8 * h * h + 4 * h, me, f, h);
      }
      off += me;
    }
  });
  permute_rows(a.perm, ye.data(), recv.data(), h, false);  // back to the received order
  a.yp.resize(static_cast<std::size_t>(sent * h));
  expert_exchange(recv.data(), a.recv_rows, a.yp.data(), a.send_rows, h, "moe_combine", l);
  timed("moe_combine", l, false, 0, [&] {
    for (std::int64_t i = 0; i < n; ++i) {
      float* out = tmp_.data() + i * h;
      std::fill(out, out + h, 0.0f);
      for (int j = 0; j < k; ++j) {
        const std::size_t q = static_cast<std::size_t>(i * k + j);
        if (a.pos[q] < 0) continue;  // dropped at the capacity
        const float g = a.gate[q];
        const float* y = a.yp.data() + static_cast<std::int64_t>(a.pos[q]) * h;
        for (int c = 0; c < h; ++c) out[c] += g * y[c];
      }
    }
  });
}

void GptShard::moe_backward(const BlockActs& a, int l, const float* block, float* d_block) {
  const int h = cfg_.hidden, E = cfg_.experts, k = cfg_.experts_per_token, ep = s_.ep;
  const int el = E / ep, f = 4 * h;
  const std::int64_t n = rows_l_, nk = n * k;
  std::int64_t m = 0;
  for (int c : a.recv_rows) m += c;
  const LocalBlock o(h, 1, E);
  const float* dout = dtmp_.data();
  // The combine's backward: each row's gradient is its gate x the token's; each gate's, the
  // token's gradient . the row.
  std::int64_t sent = 0;
  for (int c : a.send_rows) sent += c;
  // Padded rows and dropped slots: no gradient (their weight is 0, or they are not summed).
  std::vector<float> dyp(static_cast<std::size_t>(sent * h), 0.0f),
      dgate(static_cast<std::size_t>(nk), 0.0f);
  timed("moe_combine", l, true, 0, [&] {
    for (std::int64_t i = 0; i < n; ++i)
      for (int j = 0; j < k; ++j) {
        const std::size_t q = static_cast<std::size_t>(i * k + j);
        if (a.pos[q] < 0) continue;
        const std::int64_t at = static_cast<std::int64_t>(a.pos[q]) * h;
        const float* d = dout + i * h;
        const float* y = a.yp.data() + at;
        double dot = 0;
        for (int c = 0; c < h; ++c) {
          dyp[static_cast<std::size_t>(at + c)] = a.gate[q] * d[c];
          dot += static_cast<double>(d[c]) * y[c];
        }
        dgate[q] = static_cast<float>(dot);
      }
  });
  std::vector<float> recv(static_cast<std::size_t>(m * h));
  expert_exchange(dyp.data(), a.send_rows, recv.data(), a.recv_rows, h, "moe_combine_backward", l);
  std::vector<float> dye(static_cast<std::size_t>(m * h)),
      dge(static_cast<std::size_t>(m * f), 0.0f), dhe(static_cast<std::size_t>(m * f), 0.0f),
      dxe(static_cast<std::size_t>(m * h), 0.0f);
  permute_rows(a.perm, recv.data(), dye.data(), h, true);
  timed("moe_experts", l, true, 8.0 * static_cast<double>(m) * h * f, [&] {
    std::int64_t off = 0;
    for (int e = 0; e < el; ++e) {
      const std::int64_t me = a.expert_rows[static_cast<std::size_t>(e)];
      const Range r = layout_.expert(l, e);
      const float* w = params_ + r.offset;
      float* dw = grads_ + r.offset;
      if (me > 0) {
        matmul_backward(dge.data() + off * f, dw + 4 * h * h + 4 * h, dw + 8 * h * h + 4 * h,
                        dye.data() + off * h, a.ge.data() + off * f, w + 4 * h * h + 4 * h, me, f,
                        h);
        gelu_backward(dhe.data() + off * f, a.he.data() + off * f, dge.data() + off * f, me * f);
        matmul_backward(dxe.data() + off * h, dw, dw + 4 * h * h, dhe.data() + off * f,
                        a.xe.data() + off * h, w, me, h, f);
      }
      off += me;
    }
  });
  permute_rows(a.perm, dxe.data(), recv.data(), h, false);
  std::vector<float> dxp(static_cast<std::size_t>(sent * h));
  expert_exchange(recv.data(), a.recv_rows, dxp.data(), a.send_rows, h, "moe_dispatch_backward", l);
  // The router: the gates' softmax over the k selected logits, backward (the others get none).
  std::vector<float> dlogits(static_cast<std::size_t>(n * E), 0.0f);
  timed("moe_router", l, true, 4.0 * static_cast<double>(n) * h * E, [&] {
    zero(dln_);
    for (std::int64_t i = 0; i < n; ++i) {
      float* dx = dln_.data() + i * h;
      double s = 0;
      for (int j = 0; j < k; ++j) {
        const std::size_t q = static_cast<std::size_t>(i * k + j);
        s += static_cast<double>(a.gate[q]) * dgate[q];
        if (a.pos[q] < 0) continue;
        const float* d = dxp.data() + static_cast<std::int64_t>(a.pos[q]) * h;
        for (int c = 0; c < h; ++c) dx[c] += d[c];
      }
      for (int j = 0; j < k; ++j) {
        const std::size_t q = static_cast<std::size_t>(i * k + j);
        dlogits[static_cast<std::size_t>(i * E + a.sel[q])] =
            static_cast<float>(a.gate[q] * (dgate[q] - s));
      }
      if (s_.moe_aux_loss_coeff > 0) {  // the load-balancing loss: p_j (w_j - sum_e w_e p_e)
        const float* p = a.probs.data() + i * E;
        double wp = 0;
        for (int e = 0; e < E; ++e)
          wp += static_cast<double>(a.aux_w[static_cast<std::size_t>(e)]) * p[e];
        for (int e = 0; e < E; ++e)
          dlogits[static_cast<std::size_t>(i * E + e)] +=
              static_cast<float>(p[e] * (a.aux_w[static_cast<std::size_t>(e)] - wp));
      }
    }
    matmul_backward(dln_.data(), d_block + o.router, static_cast<float*>(nullptr), dlogits.data(),
                    a.ln2.data(), block + o.router, n, h, E);
  });
}

// ---- FlashAttention ----
// Row by row (Dao et al. 2022, FlashAttention; Dao 2023, FlashAttention-2): a query's scores
// over its visible keys (all for BERT; GPT: positions up to its own) are formed in an O(s)
// scratch, softmaxed and applied to V; only the output (a.atty, which the output projection
// keeps anyway) and the row's logsumexp L survive. Backward recomputes P = exp(S - L) row by
// row, with D = dO . O: dV += P dO, dP = dO V^T, dS = P (dP - D), dQ += dS K, dK += dS Q (the
// scale on S). The tiling over key blocks that makes the GPU kernel IO-aware is left out: on a
// CPU a row of scores already fits in cache; what the algorithm changes here, the memory kept
// for backward and the recompute, is the same.

void GptShard::flash_forward(BlockActs& a, int l, const float* k, std::int64_t stride) {
  const int nb = batch_, tl = seq_l_, tk = cfg_.seq, cl = hl_, nh = heads_l_, hs = cl / nh;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const bool causal = !bert_;
  auto key = [&](int b, int kk) { return k + gathered_row(b, kk) * stride; };
  timed("flash_attn", l, false, 4.0 * nb * tl * static_cast<double>(tk) * cl, [&] {
    std::vector<float> p(static_cast<std::size_t>(tk));
    for (int b = 0; b < nb; ++b)
      for (int h = 0; h < nh; ++h)
        for (int i = 0; i < tl; ++i) {
          const std::int64_t row = static_cast<std::int64_t>(b) * tl + i;
          const float* q = a.qkv.data() + row * 3 * cl + h * hs;
          const int qp = pos_[static_cast<std::size_t>(i)];
          float m = -std::numeric_limits<float>::infinity();
          for (int kk = 0; kk < tk; ++kk) {
            if (causal && kpos_[static_cast<std::size_t>(kk)] > qp) continue;
            const float* kv = key(b, kk) + h * hs;
            float dot = 0;
            for (int d = 0; d < hs; ++d) dot += q[d] * kv[d];
            p[static_cast<std::size_t>(kk)] = dot * scale;
            m = std::max(m, p[static_cast<std::size_t>(kk)]);
          }
          float* o = a.atty.data() + row * cl + h * hs;
          std::fill(o, o + hs, 0.0f);
          double sum = 0;
          for (int kk = 0; kk < tk; ++kk) {
            if (causal && kpos_[static_cast<std::size_t>(kk)] > qp) continue;
            const float e = std::exp(p[static_cast<std::size_t>(kk)] - m);
            sum += e;
            const float* v = key(b, kk) + cl + h * hs;
            for (int d = 0; d < hs; ++d) o[d] += e * v[d];
          }
          const float inv = static_cast<float>(1.0 / sum);
          for (int d = 0; d < hs; ++d) o[d] *= inv;
          a.lse[static_cast<std::size_t>((static_cast<std::int64_t>(b) * nh + h) * tl + i)] =
              m + static_cast<float>(std::log(sum));
        }
  });
}

void GptShard::flash_backward(const BlockActs& a, int l, const float* k, std::int64_t stride,
                              float* dk, std::int64_t dstride) {
  const int nb = batch_, tl = seq_l_, tk = cfg_.seq, cl = hl_, nh = heads_l_, hs = cl / nh;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const bool causal = !bert_;
  // The recomputed scores, dV, dP, dQ and dK: five s x s products to the forward's two.
  timed("flash_attn", l, true, 10.0 * nb * tl * static_cast<double>(tk) * cl, [&] {
    for (int b = 0; b < nb; ++b)
      for (int h = 0; h < nh; ++h)
        for (int i = 0; i < tl; ++i) {
          const std::int64_t row = static_cast<std::int64_t>(b) * tl + i;
          const float* q = a.qkv.data() + row * 3 * cl + h * hs;
          const float* o = a.atty.data() + row * cl + h * hs;
          const float* dout = datty_.data() + row * cl + h * hs;
          float* dq = dqkv_.data() + row * 3 * cl + h * hs;
          const float lse =
              a.lse[static_cast<std::size_t>((static_cast<std::int64_t>(b) * nh + h) * tl + i)];
          const int qp = pos_[static_cast<std::size_t>(i)];
          float D = 0;
          for (int d = 0; d < hs; ++d) D += dout[d] * o[d];
          for (int kk = 0; kk < tk; ++kk) {
            if (causal && kpos_[static_cast<std::size_t>(kk)] > qp) continue;
            const std::int64_t r = gathered_row(b, kk);
            const float* kr = k + r * stride + h * hs;
            const float* vr = kr + cl;
            float* dkr = dk + r * dstride + h * hs;
            float* dvr = dkr + cl;
            float s = 0;
            for (int d = 0; d < hs; ++d) s += q[d] * kr[d];
            key_backward(std::exp(s * scale - lse), q, kr, vr, dout, D, scale, hs, dq, dkr, dvr);
          }
        }
  });
}

}  // namespace commscope::train
