// T5 on the CPU: layout, initialisation, relative position buckets, the RMSNorm and
// relative-attention kernels, and forward/backward of the whole encoder-decoder (t5.h).
#include "commscope/gpt/t5.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "commscope/gpt/data.h"
#include "commscope/gpt/kernels.h"

namespace commscope::train {

namespace {

Error t5_error(const char* field, long long value, const std::string& expected) {
  return Error{"t5 config: " + std::string(field) + ": expected " + expected + ", got " +
               std::to_string(value)};
}

}  // namespace

Status validate(const T5Config& c) {
  if (c.encoder_layers < 1) return t5_error("encoder_layers", c.encoder_layers, ">= 1");
  if (c.decoder_layers < 1) return t5_error("decoder_layers", c.decoder_layers, ">= 1");
  if (c.heads < 1) return t5_error("heads", c.heads, ">= 1");
  if (c.hidden < 1 || c.hidden % c.heads != 0)
    return t5_error("hidden", c.hidden,
                    "a positive multiple of heads (" + std::to_string(c.heads) + ")");
  if (c.ffn < 1) return t5_error("ffn", c.ffn, ">= 1");
  if (c.vocab < 2) return t5_error("vocab", c.vocab, ">= 2");
  if (c.encoder_seq < 1) return t5_error("encoder_seq", c.encoder_seq, ">= 1");
  if (c.decoder_seq < 1) return t5_error("decoder_seq", c.decoder_seq, ">= 1");
  if (c.buckets < 4 || c.buckets % 2 != 0)
    return t5_error("buckets", c.buckets, "an even number >= 4");
  if (c.max_distance <= c.buckets / 2)
    return t5_error("max_distance", c.max_distance,
                    "more than buckets / 2 (" + std::to_string(c.buckets / 2) + ")");
  return {};
}

Result<T5Config> t5_config(const ModelSpec& m) {
  auto bad = [&](const char* field, const std::string& got, const std::string& expected) {
    return Error{"model '" + m.name + "': field '" + field + "': expected " + expected +
                 " for commscope train's T5, got " + got};
  };
  if (m.kind != ArchKind::t5) return bad("kind", std::string(to_string(m.kind)), "t5");
  if (m.kv_heads != m.heads)
    return bad("kv_heads", std::to_string(m.kv_heads), "heads (" + std::to_string(m.heads) + ")");
  if (m.heads <= 0 || m.head_dim * m.heads != m.hidden)
    return bad("head_dim", std::to_string(m.head_dim), "hidden / heads");
  if (m.bias) return bad("bias", "true", "false");
  if (!m.tied_embeddings) return bad("tied_embeddings", "false", "true");
  if (m.position != PositionEmbedding::relative)
    return bad("position_embedding", std::string(to_string(m.position)), "relative");
  if (m.norm != NormKind::rmsnorm) return bad("norm", std::string(to_string(m.norm)), "rmsnorm");
  if (m.mlp != MlpKind::relu) return bad("mlp", std::string(to_string(m.mlp)), "relu");
  constexpr std::int64_t kMax = std::numeric_limits<int>::max();
  for (auto [field, v] :
       {std::pair{"hidden", m.hidden}, std::pair{"ffn", m.ffn}, std::pair{"vocab", m.vocab},
        std::pair{"seq_length", m.seq_length}, std::pair{"decoder_seq_length", m.dec_seq()},
        std::pair{"relative_attention_buckets", m.relative_attention_buckets}})
    if (v > kMax) return bad(field, std::to_string(v), "at most " + std::to_string(kMax));
  T5Config c;
  c.encoder_layers = m.encoder_layers;
  c.decoder_layers = m.decoder_layers;
  c.hidden = static_cast<int>(m.hidden);
  c.heads = static_cast<int>(m.heads);
  c.ffn = static_cast<int>(m.ffn);
  c.vocab = static_cast<int>(m.vocab);
  c.encoder_seq = static_cast<int>(m.seq_length);
  c.decoder_seq = static_cast<int>(m.dec_seq());
  c.buckets = static_cast<int>(m.relative_attention_buckets);
  CS_RETURN_IF_ERROR(validate(c));
  return c;
}

ModelSpec t5_model_spec(const T5Config& c, const std::string& name) {
  ModelSpec m;
  m.name = name;
  m.kind = ArchKind::t5;
  m.position = PositionEmbedding::relative;
  m.norm = NormKind::rmsnorm;
  m.mlp = MlpKind::relu;
  m.bias = false;
  m.dropout = false;
  m.tied_embeddings = true;
  m.encoder_layers = c.encoder_layers;
  m.decoder_layers = c.decoder_layers;
  m.hidden = c.hidden;
  m.heads = m.kv_heads = c.heads;
  m.head_dim = c.hidden / c.heads;
  m.ffn = c.ffn;
  m.vocab = c.vocab;
  m.seq_length = c.encoder_seq;
  m.decoder_seq_length = c.decoder_seq;
  m.relative_attention_buckets = c.buckets;
  apply_model_defaults(m);
  return m;
}

int relative_bucket(int relative_position, bool bidirectional, int buckets, int max_distance) {
  int ret = 0, n = 0;
  if (bidirectional) {
    buckets /= 2;
    if (relative_position > 0) ret += buckets;
    n = std::abs(relative_position);
  } else {
    n = std::max(-relative_position, 0);
  }
  const int max_exact = buckets / 2;
  if (n < max_exact) return ret + n;
  const double scaled = std::log(static_cast<double>(n) / max_exact) /
                        std::log(static_cast<double>(max_distance) / max_exact) *
                        (buckets - max_exact);
  return ret + std::min(max_exact + static_cast<int>(scaled), buckets - 1);
}

// ---- layout ----

Status validate_tp(const T5Config& c, int tp) {
  CS_RETURN_IF_ERROR(validate(c));
  if (tp < 1) return t5_error("tp", tp, ">= 1");
  for (auto [field, v] :
       {std::pair{"heads", c.heads}, std::pair{"ffn", c.ffn}, std::pair{"vocab", c.vocab}})
    if (v % tp != 0)
      return t5_error(field, v,
                      "a multiple of the tensor-parallel degree (" + std::to_string(tp) + ")");
  return {};
}

T5Layout::T5Layout(const T5Config& c, int tp, int rank, T5Part part)
    : cfg_(c), tp_(tp), rank_(rank), part_(part) {
  CS_CHECK(validate_tp(c, tp).ok() && rank >= 0 && rank < tp);
  const std::int64_t h = c.hidden, f = c.ffn / tp, hl = c.hidden / tp;
  std::int64_t o = 0;
  auto take = [&](const char* name, int layer, std::int64_t size) {
    tensors_.push_back({name, layer, o, size});
    o += size;
    return o - size;
  };
  take("wte", kEmbeddingLayer, static_cast<std::int64_t>(c.vocab / tp) * h);
  const int L = c.encoder_layers + c.decoder_layers;
  blocks_.resize(static_cast<std::size_t>(L));
  for (int l = 0; l < L; ++l) {
    const bool decoder = l >= c.encoder_layers;
    if (!has_block(l)) continue;
    Block& b = blocks_[static_cast<std::size_t>(l)];
    b.range.offset = o;
    if (l == 0 || l == c.encoder_layers)
      b.rel_bias = take("rel_bias", l, static_cast<std::int64_t>(c.buckets) * (c.heads / tp));
    b.norm_attn = take("norm_attn.w", l, h);
    b.qkv = take("qkv.w", l, 3 * hl * h);
    b.attn_out = take("attn_out.w", l, h * hl);
    if (decoder) {
      b.norm_cross = take("norm_cross.w", l, h);
      b.cross_q = take("cross_q.w", l, hl * h);
      b.cross_kv = take("cross_kv.w", l, 2 * hl * h);
      b.cross_out = take("cross_out.w", l, h * hl);
    }
    b.norm_mlp = take("norm_mlp.w", l, h);
    b.mlp_in = take("mlp_in.w", l, f * h);
    b.mlp_out = take("mlp_out.w", l, h * f);
    b.range.size = o - b.range.offset;
    if (l == c.encoder_layers - 1) enc_norm_ = take("norm_enc.w", kHeadLayer, h);
  }
  if (part != T5Part::encoder) dec_norm_ = take("norm_dec.w", kHeadLayer, h);
  total_ = o;
}

std::vector<Range> T5Layout::sequence_parallel_partial() const {
  std::vector<Range> out;
  for (const ParamTensor& t : tensors_)
    if (t.name.starts_with("norm_")) out.push_back({t.offset, t.size});
  return out;
}

template <class T>
void T5Layout::from_full(const T* full, T* local) const {
  const T5Layout whole(cfg_);
  const std::int64_t h = cfg_.hidden;
  std::size_t w = 0;  // a part's tensors are a subsequence of the whole layout's
  for (std::size_t i = 0; i < tensors_.size(); ++i, ++w) {
    const ParamTensor& t = tensors_[i];
    while (w < whole.tensors().size() &&
           (whole.tensors()[w].name != t.name || whole.tensors()[w].layer != t.layer))
      ++w;
    CS_CHECK(w < whole.tensors().size());
    const T* src = full + whole.tensors()[w].offset;
    T* dst = local + t.offset;
    const std::int64_t size_full = whole.tensors()[w].size;
    if (t.name.starts_with("norm_")) {  // replicated
      std::copy(src, src + t.size, dst);
    } else if (t.name == "attn_out.w" || t.name == "cross_out.w" || t.name == "mlp_out.w") {
      // row-parallel: [h, in] split by input columns
      const std::int64_t in = size_full / h, inl = in / tp_;
      for (std::int64_t r = 0; r < h; ++r)
        std::copy(src + r * in + rank_ * inl, src + r * in + (rank_ + 1) * inl, dst + r * inl);
    } else if (t.name == "rel_bias") {  // [buckets, heads] split by heads
      const std::int64_t nh = cfg_.heads, nhl = nh / tp_;
      for (std::int64_t b = 0; b < cfg_.buckets; ++b)
        std::copy(src + b * nh + rank_ * nhl, src + b * nh + (rank_ + 1) * nhl, dst + b * nhl);
    } else {
      // column-parallel (and the vocabulary-parallel wte): rows split; qkv.w and cross_kv.w
      // split each of their parts (q, k, v) by heads
      const int parts = t.name == "qkv.w" ? 3 : t.name == "cross_kv.w" ? 2 : 1;
      const std::int64_t rows = size_full / h / parts, rl = rows / tp_;
      for (int part = 0; part < parts; ++part)
        std::copy(src + (part * rows + rank_ * rl) * h, src + (part * rows + (rank_ + 1) * rl) * h,
                  dst + part * rl * h);
    }
  }
}
template void T5Layout::from_full<float>(const float*, float*) const;
template void T5Layout::from_full<double>(const double*, double*) const;

void init_t5_params(const T5Layout& layout, float* params, std::uint64_t seed) {
  CS_CHECK(layout.tp() == 1);
  int layers = 0;
  for (const auto& t : layout.tensors()) layers = std::max(layers, t.layer + 1);
  const double proj_std = 0.02 / std::sqrt(2.0 * std::max(layers, 1));
  for (std::size_t i = 0; i < layout.tensors().size(); ++i) {
    const ParamTensor& t = layout.tensors()[i];
    float* p = params + t.offset;
    if (t.name.starts_with("norm_")) {
      std::fill(p, p + t.size, 1.0f);
    } else {
      const bool residual_proj =
          t.name == "attn_out.w" || t.name == "cross_out.w" || t.name == "mlp_out.w";
      fill_tensor_normal(p, t.size, residual_proj ? proj_std : 0.02, seed, i);
    }
  }
}

T5Batch t5_synthetic_batch(const T5Config& c, int batch, std::int64_t first_index,
                           std::uint64_t seed) {
  CS_CHECK(validate(c).ok() && batch >= 1);
  const TokenSource data = TokenSource::synthetic(c.vocab, seed);
  const std::size_t Te = static_cast<std::size_t>(c.encoder_seq), Td = c.decoder_seq;
  T5Batch out;
  out.encoder_tokens.resize(batch * Te);
  out.decoder_tokens.resize(batch * Td);
  out.targets.resize(batch * Td);
  std::vector<std::int32_t> next(Te);
  for (int b = 0; b < batch; ++b) {
    std::int32_t* enc = out.encoder_tokens.data() + b * Te;
    std::int32_t* dec = out.decoder_tokens.data() + b * Td;
    std::int32_t* tgt = out.targets.data() + b * Td;
    data.sequence(first_index + b, static_cast<int>(Te), enc, next.data());
    for (std::size_t t = 0; t < Td; ++t) tgt[t] = enc[Te - 1 - t % Te];
    dec[0] = 0;
    for (std::size_t t = 1; t < Td; ++t) dec[t] = tgt[t - 1];
  }
  return out;
}

// ---- kernels ----

template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* w, std::int64_t N, int C) {
  for (std::int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    T* y = out + n * C;
    double ss = 0;
    for (int c = 0; c < C; ++c) ss += static_cast<double>(x[c]) * x[c];
    const T r = static_cast<T>(1.0 / std::sqrt(ss / C + 1e-6));
    rstd[n] = r;
    for (int c = 0; c < C; ++c) y[c] = x[c] * r * w[c];
  }
}

template <class T>
void rmsnorm_backward(T* dinp, T* dw, const T* dout, const T* inp, const T* w, const T* rstd,
                      std::int64_t N, int C) {
  for (std::int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    const T* g = dout + n * C;
    T* dx = dinp + n * C;
    const T r = rstd[n];
    T s = 0;
    for (int c = 0; c < C; ++c) s += g[c] * w[c] * x[c] * r;
    const T m = s / static_cast<T>(C);
    for (int c = 0; c < C; ++c) {
      dx[c] += r * (g[c] * w[c] - x[c] * r * m);
      dw[c] += g[c] * x[c] * r;
    }
  }
}

template <class T>
void relative_attention_forward(T* out, T* att, const T* q, int ldq, const T* k, const T* v,
                                int ldkv, const T* bias, const int* bucket, int B, int Tq, int Tk,
                                int C, int NH, bool causal) {
  const int hs = C / NH;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hs)));
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int i = 0; i < Tq; ++i) {
        T* row = att + ((static_cast<std::int64_t>(b) * NH + h) * Tq + i) * Tk;
        const T* qi = q + (static_cast<std::int64_t>(b) * Tq + i) * ldq + h * hs;
        const int jmax = causal ? std::min(i + 1, Tk) : Tk;
        T mx = -std::numeric_limits<T>::infinity();
        for (int j = 0; j < jmax; ++j) {
          const T* kj = k + (static_cast<std::int64_t>(b) * Tk + j) * ldkv + h * hs;
          T s = 0;
          for (int d = 0; d < hs; ++d) s += qi[d] * kj[d];
          s *= scale;
          if (bias) s += bias[static_cast<std::int64_t>(bucket[i * Tk + j]) * NH + h];
          row[j] = s;
          mx = std::max(mx, s);
        }
        T sum = 0;
        for (int j = 0; j < jmax; ++j) {
          row[j] = std::exp(row[j] - mx);
          sum += row[j];
        }
        const T inv = T(1) / sum;
        for (int j = 0; j < jmax; ++j) row[j] *= inv;
        for (int j = jmax; j < Tk; ++j) row[j] = 0;
        T* oi = out + (static_cast<std::int64_t>(b) * Tq + i) * C + h * hs;
        std::fill(oi, oi + hs, T(0));
        for (int j = 0; j < jmax; ++j) {
          const T* vj = v + (static_cast<std::int64_t>(b) * Tk + j) * ldkv + h * hs;
          for (int d = 0; d < hs; ++d) oi[d] += row[j] * vj[d];
        }
      }
    }
  }
}

template <class T>
void relative_attention_backward(T* dq, T* dk, T* dv, T* dbias, const T* dout, const T* att,
                                 const T* q, int ldq, const T* k, const T* v, int ldkv,
                                 const int* bucket, int B, int Tq, int Tk, int C, int NH,
                                 bool causal, T* scratch) {
  const int hs = C / NH;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hs)));
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int i = 0; i < Tq; ++i) {
        const T* row = att + ((static_cast<std::int64_t>(b) * NH + h) * Tq + i) * Tk;
        const std::int64_t qoff = (static_cast<std::int64_t>(b) * Tq + i) * ldq + h * hs;
        const T* go = dout + (static_cast<std::int64_t>(b) * Tq + i) * C + h * hs;
        const int jmax = causal ? std::min(i + 1, Tk) : Tk;
        T s = 0;
        for (int j = 0; j < jmax; ++j) {
          const std::int64_t koff = (static_cast<std::int64_t>(b) * Tk + j) * ldkv + h * hs;
          T dp = 0;
          for (int d = 0; d < hs; ++d) {
            dp += go[d] * v[koff + d];
            dv[koff + d] += row[j] * go[d];
          }
          scratch[j] = dp;
          s += row[j] * dp;
        }
        for (int j = 0; j < jmax; ++j) {
          const T ds = row[j] * (scratch[j] - s);
          if (dbias) dbias[static_cast<std::int64_t>(bucket[i * Tk + j]) * NH + h] += ds;
          const std::int64_t koff = (static_cast<std::int64_t>(b) * Tk + j) * ldkv + h * hs;
          const T d2 = ds * scale;
          for (int d = 0; d < hs; ++d) {
            dq[qoff + d] += d2 * k[koff + d];
            dk[koff + d] += d2 * q[qoff + d];
          }
        }
      }
    }
  }
}

// ---- the model ----

template <class T>
T5<T>::T5(const T5Config& cfg, int batch, int tp, int rank, T5Part part, bool sequence_parallel)
    : cfg_(cfg), layout_(cfg, tp, rank, part), batch_(batch), sp_(sequence_parallel && tp > 1) {
  CS_CHECK(batch >= 1);
  const std::size_t B = batch, h = cfg.hidden, hl = cfg.hidden / tp, f = cfg.ffn / tp;
  const std::size_t NH = cfg.heads / tp, Vl = cfg.vocab / tp;
  const std::size_t Te = cfg.encoder_seq, Td = cfg.decoder_seq;
  const std::size_t Ne = B * Te, Nd = B * Td, Nmax = std::max(Ne, Nd);
  // Rows of the residual stream here (a sequence shard under SP).
  CS_CHECK(!sp_ ||
           (Ne % static_cast<std::size_t>(tp) == 0 && Nd % static_cast<std::size_t>(tp) == 0));
  const std::size_t Re = static_cast<std::size_t>(rows(cfg.encoder_seq)),
                    Rd = static_cast<std::size_t>(rows(cfg.decoder_seq)), Rmax = std::max(Re, Rd);
  enc_tok_.resize(Ne);
  dec_tok_.resize(Nd);
  targets_.resize(Nd);
  enc_bucket_.resize(Te * Te);
  dec_bucket_.resize(Td * Td);
  for (std::size_t i = 0; i < Te; ++i)
    for (std::size_t j = 0; j < Te; ++j)
      enc_bucket_[i * Te + j] = relative_bucket(static_cast<int>(j) - static_cast<int>(i), true,
                                                cfg.buckets, cfg.max_distance);
  for (std::size_t i = 0; i < Td; ++i)
    for (std::size_t j = 0; j < Td; ++j)
      dec_bucket_[i * Td + j] = relative_bucket(static_cast<int>(j) - static_cast<int>(i), false,
                                                cfg.buckets, cfg.max_distance);
  const int L = cfg.encoder_layers + cfg.decoder_layers;
  acts_.resize(static_cast<std::size_t>(L));
  for (int l = 0; l < L; ++l) {
    const bool dec = l >= cfg.encoder_layers;
    if (!layout_.has_block(l)) continue;
    const std::size_t N = dec ? Nd : Ne, Tn = dec ? Td : Te, R = dec ? Rd : Re;
    BlockActs& a = acts_[static_cast<std::size_t>(l)];
    for (auto* v : {&a.in, &a.n1, &a.mid, &a.n3}) v->resize(R * h);
    a.atty.resize(N * hl);
    a.rstd1.resize(R);
    a.rstd3.resize(R);
    a.qkv.resize(N * 3 * hl);
    a.att.resize(B * NH * Tn * Tn);
    a.fc.resize(N * f);
    a.fca.resize(N * f);
    if (dec) {
      for (auto* v : {&a.n2, &a.mid2}) v->resize(R * h);
      a.q.resize(N * hl);
      a.catty.resize(N * hl);
      a.rstd2.resize(R);
      a.kv.resize(Ne * 2 * hl);
      a.catt.resize(B * NH * Td * Te);
    }
  }
  enc_x_.resize(Re * h);
  enc_out_.resize(Re * h);
  enc_rstd_.resize(Re);
  dec_x_.resize(Rd * h);
  dec_n_.resize(Rd * h);
  dec_rstd_.resize(Rd);
  probs_.resize(Nd * Vl);
  ce_max_.resize(Nd);
  ce_sum_.resize(Nd);
  ce_tgt_.resize(Nd);
  d_enc_out_.resize(Re * h);
  denc_part_.resize(Ne * h);
  dres_.resize(Rmax * h);
  for (auto* v : {&dtmp_, &dn_}) v->resize(Nmax * h);
  if (sp_) {
    gath_.resize(Nmax * h);
    part_.resize(Rmax * h);
  }
  datty_.resize(Nmax * hl);
  dqkv_.resize(Nmax * 3 * hl);
  dfc_.resize(Nmax * f);
  dkv_.resize(Ne * 2 * hl);
  dscratch_.resize(std::max(Te, Td));
}

template <class T>
void T5<T>::reduce(T* data, std::int64_t n, bool max, std::string_view name, int layer) {
  if (layout_.tp() == 1) return;
  CS_CHECK(static_cast<bool>(all_reduce_));
  all_reduce_(data, n, max, name, layer);
}

template <class T>
std::int64_t T5<T>::rows(int seq) const {
  const std::int64_t n = static_cast<std::int64_t>(batch_) * seq;
  return sp_ ? n / layout_.tp() : n;
}

template <class T>
void T5<T>::gather(const T* shard, T* full, std::int64_t shard_rows, std::string_view name,
                   int layer) {
  CS_CHECK(sp_ && static_cast<bool>(sequence_));
  sequence_(true, shard, full, shard_rows * cfg_.hidden, name, layer);
}

template <class T>
void T5<T>::scatter(const T* full, T* shard, std::int64_t shard_rows, std::string_view name,
                    int layer) {
  CS_CHECK(sp_ && static_cast<bool>(sequence_));
  sequence_(false, full, shard, shard_rows * cfg_.hidden, name, layer);
}

template <class T>
const T* T5<T>::gathered(const T* shard, std::int64_t shard_rows, std::string_view name,
                         int layer) {
  if (!sp_) return shard;
  gather(shard, gath_.data(), shard_rows, name, layer);
  return gath_.data();
}

template <class T>
const T* T5<T>::exit_region(T* partial, std::int64_t all_rows, int layer) {
  if (!sp_) {
    reduce(partial, all_rows * cfg_.hidden, false, "tp_all_reduce", layer);
    return partial;
  }
  scatter(partial, part_.data(), all_rows / layout_.tp(), "sp_reduce_scatter", layer);
  return part_.data();
}

template <class T>
template <class F>
void T5<T>::timed(std::string_view name, int layer, bool backward, double flops, std::int64_t m,
                  std::int64_t n, std::int64_t k, F&& f) {
  observe(observer_, OpRecord{name, layer, backward, 0, 0, flops, m, n, k}, std::forward<F>(f));
}

template <class T>
void T5<T>::block_forward(int l, const T* P, const T* x, T* y, int Tn, bool decoder) {
  const T5Layout::Block& o = layout_.block(l);
  BlockActs& a = acts_[static_cast<std::size_t>(l)];
  const int tp = layout_.tp();
  const int h = cfg_.hidden, hl = h / tp, f = cfg_.ffn / tp, NH = cfg_.heads / tp, B = batch_;
  const std::int64_t N = static_cast<std::int64_t>(B) * Tn, R = rows(Tn);
  const std::int64_t Ne = static_cast<std::int64_t>(B) * cfg_.encoder_seq;
  const T* bias = P + layout_.block(decoder ? cfg_.encoder_layers : 0).rel_bias;
  const int* bucket = decoder ? dec_bucket_.data() : enc_bucket_.data();
  T* tmp = dtmp_.data();
  // A matrix product out[rows, oc] = in[rows, k] W, timed under its name.
  auto mm = [&](std::string_view name, T* out, const T* in, std::int64_t w, std::int64_t rows,
                int k, int oc) {
    timed(name, l, false, 2.0 * static_cast<double>(rows) * k * oc, rows, oc, k,
          [&] { matmul_forward<T>(out, in, P + w, nullptr, rows, k, oc); });
  };
  auto attention = [&](T* out, T* att, const T* q, int ldq, const T* k, const T* v, int ldkv,
                       const T* b, const int* bk, int Tq, int Tk, bool causal) {
    timed("attn_scores", l, false, 4.0 * B * Tq * Tk * hl, 0, 0, 0, [&] {
      relative_attention_forward(out, att, q, ldq, k, v, ldkv, b, bk, B, Tq, Tk, hl, NH, causal);
    });
  };
  // The norms and residual adds run on this rank's rows (all of them without SP).
  auto norm = [&](T* out, T* rstd, const T* in, std::int64_t w) {
    timed("rmsnorm", l, false, 0, 0, 0, 0, [&] { rmsnorm_forward(out, rstd, in, P + w, R, h); });
  };
  // A region's entry: the whole stream's rows of a normed shard (SP), or the rows themselves.
  auto enter = [&](const T* shard, std::int64_t shard_rows) {
    return gathered(shard, shard_rows, "sp_all_gather", l);
  };
  if (x != a.in.data()) std::copy(x, x + R * h, a.in.begin());
  norm(a.n1.data(), a.rstd1.data(), a.in.data(), o.norm_attn);
  mm(decoder ? "dec_qkv" : "enc_qkv", a.qkv.data(), enter(a.n1.data(), R), o.qkv, N, h, 3 * hl);
  attention(a.atty.data(), a.att.data(), a.qkv.data(), 3 * hl, a.qkv.data() + hl,
            a.qkv.data() + 2 * hl, 3 * hl, bias, bucket, Tn, Tn, decoder);
  mm(decoder ? "dec_attn_out" : "enc_attn_out", tmp, a.atty.data(), o.attn_out, N, hl, h);
  residual_forward(a.mid.data(), a.in.data(), exit_region(tmp, N, l), R * h);
  const T* cur = a.mid.data();
  if (decoder) {
    const int Te = cfg_.encoder_seq;
    norm(a.n2.data(), a.rstd2.data(), a.mid.data(), o.norm_cross);
    mm("dec_cross_q", a.q.data(), enter(a.n2.data(), R), o.cross_q, N, h, hl);
    // The encoder output enters the region too (this rank's rows of it under SP).
    mm("dec_cross_kv", a.kv.data(), enter(enc_out_.data(), rows(Te)), o.cross_kv, Ne, h, 2 * hl);
    attention(a.catty.data(), a.catt.data(), a.q.data(), hl, a.kv.data(), a.kv.data() + hl, 2 * hl,
              nullptr, nullptr, Tn, Te, false);
    mm("dec_cross_out", tmp, a.catty.data(), o.cross_out, N, hl, h);
    residual_forward(a.mid2.data(), a.mid.data(), exit_region(tmp, N, l), R * h);
    cur = a.mid2.data();
  }
  norm(a.n3.data(), a.rstd3.data(), cur, o.norm_mlp);
  mm(decoder ? "dec_mlp_in" : "enc_mlp_in", a.fc.data(), enter(a.n3.data(), R), o.mlp_in, N, h, f);
  timed("relu", l, false, 0, 0, 0, 0, [&] {
    for (std::int64_t i = 0; i < N * f; ++i) a.fca[i] = a.fc[i] > T(0) ? a.fc[i] : T(0);
  });
  mm(decoder ? "dec_mlp_out" : "enc_mlp_out", tmp, a.fca.data(), o.mlp_out, N, f, h);
  residual_forward(y, cur, exit_region(tmp, N, l), R * h);
}

template <class T>
void T5<T>::block_backward(int l, const T* P, T* G, T* dx, int Tn, bool decoder) {
  const T5Layout::Block& o = layout_.block(l);
  BlockActs& a = acts_[static_cast<std::size_t>(l)];
  const int tp = layout_.tp();
  const int h = cfg_.hidden, hl = h / tp, f = cfg_.ffn / tp, NH = cfg_.heads / tp, B = batch_;
  const std::int64_t N = static_cast<std::int64_t>(B) * Tn, R = rows(Tn);
  const std::int64_t Ne = static_cast<std::int64_t>(B) * cfg_.encoder_seq;
  const int* bucket = decoder ? dec_bucket_.data() : enc_bucket_.data();
  T* dbias = G + layout_.block(decoder ? cfg_.encoder_layers : 0).rel_bias;
  const T* cur = decoder ? a.mid2.data() : a.mid.data();
  auto zero = [](std::vector<T>& v, std::int64_t n) { std::fill(v.begin(), v.begin() + n, T(0)); };
  // The backward of out[rows, oc] = in[rows, k] W: din += dout W^T, dW += in^T dout.
  auto mm = [&](std::string_view name, T* din, std::int64_t w, const T* dout, const T* in,
                std::int64_t rows, int k, int oc) {
    timed(name, l, true, 4.0 * static_cast<double>(rows) * k * oc, rows, oc, k,
          [&] { matmul_backward<T>(din, G + w, nullptr, dout, in, P + w, rows, k, oc); });
  };
  auto norm = [&](T* din, std::int64_t w, const T* dout, const T* in, const T* rstd) {
    timed("rmsnorm", l, true, 0, 0, 0, 0,
          [&] { rmsnorm_backward(din, G + w, dout, in, P + w, rstd, R, h); });
  };
  // Under SP (gathered): a region's exit backward all-gathers the output gradient (this rank's
  // rows of dx); a column-parallel product re-gathers its input for the weight gradient.
  // MLP
  zero(dfc_, N * f);
  mm(decoder ? "dec_mlp_out" : "enc_mlp_out", dfc_.data(), o.mlp_out,
     gathered(dx, R, "sp_all_gather", l), a.fca.data(), N, f, h);
  timed("relu", l, true, 0, 0, 0, 0, [&] {
    for (std::int64_t i = 0; i < N * f; ++i)
      if (!(a.fc[i] > T(0))) dfc_[i] = 0;
  });
  zero(dn_, N * h);
  mm(decoder ? "dec_mlp_in" : "enc_mlp_in", dn_.data(), o.mlp_in, dfc_.data(),
     gathered(a.n3.data(), R, "sp_all_gather_wgrad", l), N, h, f);
  norm(dx, o.norm_mlp, exit_region(dn_.data(), N, l), cur, a.rstd3.data());
  if (decoder) {
    const int Te = cfg_.encoder_seq;
    zero(datty_, N * hl);
    mm("dec_cross_out", datty_.data(), o.cross_out, gathered(dx, R, "sp_all_gather", l),
       a.catty.data(), N, hl, h);
    zero(dqkv_, N * hl);
    zero(dkv_, Ne * 2 * hl);
    timed("attn_scores", l, true, 8.0 * B * Tn * Te * hl, 0, 0, 0, [&] {
      relative_attention_backward<T>(dqkv_.data(), dkv_.data(), dkv_.data() + hl, nullptr,
                                     datty_.data(), a.catt.data(), a.q.data(), hl, a.kv.data(),
                                     a.kv.data() + hl, 2 * hl, nullptr, B, Tn, Te, hl, NH, false,
                                     dscratch_.data());
    });
    // The encoder output entered this block's tensor-parallel region: its gradient from
    // cross_kv is all-reduced (reduce-scattered under SP) here, then joins the others.
    zero(denc_part_, Ne * h);
    mm("dec_cross_kv", denc_part_.data(), o.cross_kv, dkv_.data(),
       gathered(enc_out_.data(), rows(Te), "sp_all_gather_wgrad", l), Ne, h, 2 * hl);
    const T* denc = exit_region(denc_part_.data(), Ne, l);
    for (std::int64_t i = 0; i < rows(Te) * h; ++i) d_enc_out_[i] += denc[i];
    zero(dn_, N * h);
    mm("dec_cross_q", dn_.data(), o.cross_q, dqkv_.data(),
       gathered(a.n2.data(), R, "sp_all_gather_wgrad", l), N, h, hl);
    norm(dx, o.norm_cross, exit_region(dn_.data(), N, l), a.mid.data(), a.rstd2.data());
  }
  // self-attention
  zero(datty_, N * hl);
  mm(decoder ? "dec_attn_out" : "enc_attn_out", datty_.data(), o.attn_out,
     gathered(dx, R, "sp_all_gather", l), a.atty.data(), N, hl, h);
  zero(dqkv_, N * 3 * hl);
  timed("attn_scores", l, true, 8.0 * B * Tn * Tn * hl, 0, 0, 0, [&] {
    relative_attention_backward<T>(dqkv_.data(), dqkv_.data() + hl, dqkv_.data() + 2 * hl, dbias,
                                   datty_.data(), a.att.data(), a.qkv.data(), 3 * hl,
                                   a.qkv.data() + hl, a.qkv.data() + 2 * hl, 3 * hl, bucket, B, Tn,
                                   Tn, hl, NH, decoder, dscratch_.data());
  });
  zero(dn_, N * h);
  mm(decoder ? "dec_qkv" : "enc_qkv", dn_.data(), o.qkv, dqkv_.data(),
     gathered(a.n1.data(), R, "sp_all_gather_wgrad", l), N, h, 3 * hl);
  norm(dx, o.norm_attn, exit_region(dn_.data(), N, l), a.in.data(), a.rstd1.data());
}

template <class T>
T T5<T>::forward(const T* P, const std::int32_t* encoder_tokens, const std::int32_t* decoder_tokens,
                 const std::int32_t* targets) {
  CS_CHECK(layout_.part() == T5Part::whole);
  forward_encoder(P, encoder_tokens);
  return forward_decoder(P, nullptr, decoder_tokens, targets);
}

template <class T>
void T5<T>::embed(const T* P, T* out, const std::int32_t* tok, std::int64_t N) {
  const int h = cfg_.hidden, V = cfg_.vocab, Vl = V / layout_.tp();
  const std::int32_t v0 = layout_.rank() * Vl;
  // Vocabulary-parallel lookup: the rank's rows, zeros elsewhere, summed over the group
  // (reduce-scattered onto this rank's rows under SP: looked up whole into dtmp_ first).
  {
    T* whole = sp_ ? dtmp_.data() : out;
    for (std::int64_t n = 0; n < N; ++n) {
      CS_CHECK(tok[n] >= 0 && tok[n] < V);
      if (tok[n] >= v0 && tok[n] < v0 + Vl) {
        const T* row = P + layout_.wte() + static_cast<std::int64_t>(tok[n] - v0) * h;
        std::copy(row, row + h, whole + n * h);
      } else {
        std::fill(whole + n * h, whole + (n + 1) * h, T(0));
      }
    }
    if (sp_)
      scatter(whole, out, N / layout_.tp(), "sp_reduce_scatter", kEmbeddingLayer);
    else
      reduce(out, N * h, false, "tp_all_reduce", kEmbeddingLayer);
  }
}

template <class T>
void T5<T>::forward_encoder(const T* P, const std::int32_t* encoder_tokens) {
  CS_CHECK(layout_.part() != T5Part::decoder);
  const int h = cfg_.hidden, Le = cfg_.encoder_layers;
  const std::int64_t Ne = static_cast<std::int64_t>(batch_) * cfg_.encoder_seq;
  std::copy(encoder_tokens, encoder_tokens + Ne, enc_tok_.begin());
  embed(P, acts_[0].in.data(), enc_tok_.data(), Ne);
  for (int l = 0; l < Le; ++l)
    block_forward(l, P, acts_[l].in.data(), l + 1 < Le ? acts_[l + 1].in.data() : enc_x_.data(),
                  cfg_.encoder_seq, false);
  rmsnorm_forward(enc_out_.data(), enc_rstd_.data(), enc_x_.data(), P + layout_.enc_norm(),
                  rows(cfg_.encoder_seq), h);
  encoder_done_ = true;
}

template <class T>
T T5<T>::forward_decoder(const T* P, const T* encoder_output, const std::int32_t* decoder_tokens,
                         const std::int32_t* targets) {
  const int tp = layout_.tp();
  const int h = cfg_.hidden, V = cfg_.vocab, Vl = V / tp, Le = cfg_.encoder_layers;
  const std::int32_t v0 = layout_.rank() * Vl;
  const int L = Le + cfg_.decoder_layers;
  const std::int64_t Nd = static_cast<std::int64_t>(batch_) * cfg_.decoder_seq;
  CS_CHECK(layout_.part() != T5Part::encoder);
  if (layout_.part() == T5Part::decoder) {
    CS_CHECK(encoder_output != nullptr);
    std::copy(encoder_output, encoder_output + rows(cfg_.encoder_seq) * h, enc_out_.begin());
  } else {
    CS_CHECK(encoder_output == nullptr && encoder_done_);
  }
  encoder_done_ = false;
  std::copy(decoder_tokens, decoder_tokens + Nd, dec_tok_.begin());
  std::copy(targets, targets + Nd, targets_.begin());
  embed(P, acts_[Le].in.data(), dec_tok_.data(), Nd);
  for (int l = Le; l < L; ++l)
    block_forward(l, P, acts_[l].in.data(), l + 1 < L ? acts_[l + 1].in.data() : dec_x_.data(),
                  cfg_.decoder_seq, true);
  const std::int64_t Rd = rows(cfg_.decoder_seq);
  rmsnorm_forward(dec_n_.data(), dec_rstd_.data(), dec_x_.data(), P + layout_.dec_norm(), Rd, h);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(h)));
  for (std::int64_t i = 0; i < Rd * h; ++i) dec_n_[i] *= scale;
  const T* head_in = gathered(dec_n_.data(), Rd, "sp_all_gather", kHeadLayer);
  timed("lm_head", kHeadLayer, false, 2.0 * static_cast<double>(Nd) * h * Vl, Nd, Vl, h,
        [&] { matmul_forward<T>(probs_.data(), head_in, P + layout_.wte(), nullptr, Nd, h, Vl); });
  // Vocabulary-parallel cross-entropy (Megatron's): the row maxima, the sums of exponentials
  // and the target logits, each reduced over the group; probabilities of the rank's columns.
  for (std::int64_t n = 0; n < Nd; ++n) {
    const T* row = probs_.data() + n * Vl;
    ce_max_[n] = *std::max_element(row, row + Vl);
  }
  reduce(ce_max_.data(), Nd, true, "ce_max", kHeadLayer);
  for (std::int64_t n = 0; n < Nd; ++n) {
    T* row = probs_.data() + n * Vl;
    const std::int32_t t = targets_[n];
    CS_CHECK(t == kIgnoreTarget || (t >= 0 && t < V));
    ce_tgt_[n] = t >= v0 && t < v0 + Vl ? row[t - v0] - ce_max_[n] : T(0);  // less the maximum
    T sum = 0;
    for (int v = 0; v < Vl; ++v) {
      row[v] = std::exp(row[v] - ce_max_[n]);
      sum += row[v];
    }
    ce_sum_[n] = sum;
  }
  reduce(ce_sum_.data(), Nd, false, "ce_sum_exp", kHeadLayer);
  reduce(ce_tgt_.data(), Nd, false, "ce_target", kHeadLayer);
  double total = 0;
  counted_ = 0;
  for (std::int64_t n = 0; n < Nd; ++n) {
    T* row = probs_.data() + n * Vl;
    const T inv = T(1) / ce_sum_[n];
    for (int v = 0; v < Vl; ++v) row[v] *= inv;
    if (targets_[n] == kIgnoreTarget) continue;
    total += std::log(static_cast<double>(ce_sum_[n])) - static_cast<double>(ce_tgt_[n]);
    ++counted_;
  }
  forward_done_ = true;
  return counted_ > 0 ? static_cast<T>(total / static_cast<double>(counted_)) : T(0);
}

template <class T>
void T5<T>::backward(const T* P, T* G) {
  CS_CHECK(layout_.part() == T5Part::whole);
  backward_decoder(P, G);
  backward_encoder(P, G, nullptr);
}

template <class T>
void T5<T>::backward_decoder(const T* P, T* G) {
  CS_CHECK(forward_done_ && layout_.part() != T5Part::encoder);
  forward_done_ = false;
  const int tp = layout_.tp();
  const int h = cfg_.hidden, Vl = cfg_.vocab / tp, Le = cfg_.encoder_layers;
  const std::int32_t v0 = layout_.rank() * Vl;
  const int L = Le + cfg_.decoder_layers;
  const std::int64_t Nd = static_cast<std::int64_t>(batch_) * cfg_.decoder_seq;
  // dL/dlogits = (p - onehot(target)) / counted on the rows not ignored, in place.
  const T inv_count = counted_ > 0 ? T(1) / static_cast<T>(counted_) : T(0);
  for (std::int64_t n = 0; n < Nd; ++n) {
    T* row = probs_.data() + n * Vl;
    const std::int32_t t = targets_[n];
    if (t == kIgnoreTarget) {
      std::fill(row, row + Vl, T(0));
      continue;
    }
    for (int v = 0; v < Vl; ++v) row[v] *= inv_count;
    if (t >= v0 && t < v0 + Vl) row[t - v0] -= inv_count;
  }
  const std::int64_t Rd = rows(cfg_.decoder_seq);
  // re-gathered for the weight gradient under SP, as the forward's gather was not kept
  const T* head_in = gathered(dec_n_.data(), Rd, "sp_all_gather_wgrad", kHeadLayer);
  std::fill(dn_.begin(), dn_.begin() + Nd * h, T(0));
  timed("lm_head", kHeadLayer, true, 4.0 * static_cast<double>(Nd) * h * Vl, Nd, Vl, h, [&] {
    matmul_backward<T>(dn_.data(), G + layout_.wte(), nullptr, probs_.data(), head_in,
                       P + layout_.wte(), Nd, h, Vl);
  });
  const T* dhead = exit_region(dn_.data(), Nd, kHeadLayer);  // this rank's rows
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(h)));
  // dtmp_ holds the scaled-back gradient (dn_ is the blocks' scratch).
  for (std::int64_t i = 0; i < Rd * h; ++i) dtmp_[i] = dhead[i] * scale;
  std::fill(dres_.begin(), dres_.begin() + Rd * h, T(0));
  rmsnorm_backward(dres_.data(), G + layout_.dec_norm(), dtmp_.data(), dec_x_.data(),
                   P + layout_.dec_norm(), dec_rstd_.data(), Rd, h);
  std::fill(d_enc_out_.begin(), d_enc_out_.end(), T(0));
  for (int l = L - 1; l >= Le; --l) block_backward(l, P, G, dres_.data(), cfg_.decoder_seq, true);
  embed_back(G, dec_tok_.data(), Nd);
  decoder_backward_done_ = true;
}

template <class T>
void T5<T>::embed_back(T* G, const std::int32_t* tok, std::int64_t N) {
  const int h = cfg_.hidden, Vl = cfg_.vocab / layout_.tp();
  const std::int32_t v0 = layout_.rank() * Vl;
  // Under SP the lookup's reduce-scatter backward: every row's gradient, all-gathered.
  const T* dall = gathered(dres_.data(), N / layout_.tp(), "sp_all_gather", kEmbeddingLayer);
  for (std::int64_t n = 0; n < N; ++n) {
    if (tok[n] < v0 || tok[n] >= v0 + Vl) continue;
    T* row = G + layout_.wte() + static_cast<std::int64_t>(tok[n] - v0) * h;
    const T* d = dall + n * h;
    for (int c = 0; c < h; ++c) row[c] += d[c];
  }
}

template <class T>
void T5<T>::backward_encoder(const T* P, T* G, const T* d_encoder_output) {
  CS_CHECK(layout_.part() != T5Part::decoder);
  const int h = cfg_.hidden, Le = cfg_.encoder_layers;
  const std::int64_t Ne = static_cast<std::int64_t>(batch_) * cfg_.encoder_seq;
  const std::int64_t Re = rows(cfg_.encoder_seq);
  if (layout_.part() == T5Part::encoder) {
    CS_CHECK(d_encoder_output != nullptr && encoder_done_);
    std::copy(d_encoder_output, d_encoder_output + Re * h, d_enc_out_.begin());
  } else {
    CS_CHECK(d_encoder_output == nullptr && decoder_backward_done_);
  }
  encoder_done_ = decoder_backward_done_ = false;
  std::fill(dres_.begin(), dres_.begin() + Re * h, T(0));
  rmsnorm_backward(dres_.data(), G + layout_.enc_norm(), d_enc_out_.data(), enc_x_.data(),
                   P + layout_.enc_norm(), enc_rstd_.data(), Re, h);
  for (int l = Le - 1; l >= 0; --l) block_backward(l, P, G, dres_.data(), cfg_.encoder_seq, false);
  embed_back(G, enc_tok_.data(), Ne);
}

#define COMMSCOPE_T5_INSTANTIATE(T)                                                                \
  template class T5<T>;                                                                            \
  template void rmsnorm_forward<T>(T*, T*, const T*, const T*, std::int64_t, int);                 \
  template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, std::int64_t,  \
                                    int);                                                          \
  template void relative_attention_forward<T>(T*, T*, const T*, int, const T*, const T*, int,      \
                                              const T*, const int*, int, int, int, int, int,       \
                                              bool);                                               \
  template void relative_attention_backward<T>(T*, T*, T*, T*, const T*, const T*, const T*, int,  \
                                               const T*, const T*, int, const int*, int, int, int, \
                                               int, int, bool, T*);
COMMSCOPE_T5_INSTANTIATE(float)
COMMSCOPE_T5_INSTANTIATE(double)

}  // namespace commscope::train
