// GPT-2 over a flat parameter buffer: see gpt.h.
#include "commscope/gpt/gpt.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "commscope/gpt/kernels.h"

namespace commscope::train {

namespace {

Error config_error(const char* field, int value, const std::string& expected) {
  return Error{"gpt config: " + std::string(field) + ": expected " + expected + ", got " +
               std::to_string(value)};
}

// Offsets of a block's tensors from the block's start (hidden h).
struct BlockOffsets {
  std::int64_t norm_attn_w, norm_attn_b, qkv_w, qkv_b, attn_out_w, attn_out_b, norm_mlp_w,
      norm_mlp_b, mlp_in_w, mlp_in_b, mlp_out_w, mlp_out_b, size;
  explicit BlockOffsets(std::int64_t h) {
    std::int64_t o = 0;
    auto take = [&o](std::int64_t n) {
      const std::int64_t at = o;
      o += n;
      return at;
    };
    norm_attn_w = take(h);
    norm_attn_b = take(h);
    qkv_w = take(3 * h * h);
    qkv_b = take(3 * h);
    attn_out_w = take(h * h);
    attn_out_b = take(h);
    norm_mlp_w = take(h);
    norm_mlp_b = take(h);
    mlp_in_w = take(4 * h * h);
    mlp_in_b = take(4 * h);
    mlp_out_w = take(4 * h * h);
    mlp_out_b = take(h);
    size = o;
  }
};

std::uint64_t splitmix64(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// xoshiro256** (Blackman and Vigna), seeded through splitmix64.
class Xoshiro {
 public:
  explicit Xoshiro(std::uint64_t seed) {
    for (auto& w : s_) w = splitmix64(seed);
  }
  std::uint64_t next() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4];
};

void fill_normal(float* out, std::int64_t n, double stddev, std::uint64_t seed) {
  Xoshiro rng(seed);
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  for (std::int64_t i = 0; i < n; i += 2) {
    const double u1 = 1.0 - rng.uniform();  // (0, 1]
    const double u2 = rng.uniform();
    const double r = std::sqrt(-2.0 * std::log(u1)) * stddev;
    out[i] = static_cast<float>(r * std::cos(kTwoPi * u2));
    if (i + 1 < n) out[i + 1] = static_cast<float>(r * std::sin(kTwoPi * u2));
  }
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix.data(), suffix.size()) == 0;
}

}  // namespace

Status validate(const GptConfig& c) {
  if (c.layers < 1) return config_error("layers", c.layers, ">= 1");
  if (c.heads < 1) return config_error("heads", c.heads, ">= 1");
  if (c.hidden < 1 || c.hidden % c.heads != 0) {
    return config_error("hidden", c.hidden,
                        "a positive multiple of heads (" + std::to_string(c.heads) + ")");
  }
  if (c.vocab < 2) return config_error("vocab", c.vocab, ">= 2");
  if (c.max_positions < 1) return config_error("max_positions", c.max_positions, ">= 1");
  if (c.seq < 1 || c.seq > c.max_positions) {
    return config_error("seq", c.seq,
                        "between 1 and max_positions (" + std::to_string(c.max_positions) + ")");
  }
  if (c.arch != ModelArch::gpt && c.arch != ModelArch::bert)
    return config_error("kind", static_cast<int>(c.arch), "gpt or bert");
  if (c.arch == ModelArch::gpt && c.type_vocab != 0)
    return config_error("type_vocab", c.type_vocab, "0 for a GPT");
  if (c.arch == ModelArch::bert && (c.type_vocab < 0 || c.type_vocab > 2))
    return config_error("type_vocab", c.type_vocab, "0, 1 or 2 (segments A and B)");
  if (c.experts < 0 || (c.experts > 0 && c.arch != ModelArch::gpt))
    return config_error("experts", c.experts, "0, or a positive count for a GPT");
  if (c.experts > 0 && (c.experts_per_token < 1 || c.experts_per_token > c.experts))
    return config_error("experts_per_token", c.experts_per_token,
                        "1 to experts (" + std::to_string(c.experts) + ")");
  if (c.experts == 0 && c.experts_per_token != 0)
    return config_error("experts_per_token", c.experts_per_token, "0 for a dense model");
  return ok_status();
}

int token_type(int position, int seq, int type_vocab) {
  if (type_vocab <= 0) return -1;
  return type_vocab >= 2 && 2 * position >= seq ? 1 : 0;
}

// ---- ParamLayout ----

ParamLayout::ParamLayout(const GptConfig& cfg) {
  CS_CHECK(validate(cfg).ok());
  const std::int64_t h = cfg.hidden;
  std::int64_t o = 0;
  auto add = [this, &o](std::string name, int layer, std::int64_t size) {
    tensors_.push_back({std::move(name), layer, o, size});
    o += size;
  };
  add("wte", kEmbeddingLayer, cfg.vocab * h);
  add("wpe", kEmbeddingLayer, cfg.max_positions * h);
  const bool bert = cfg.arch == ModelArch::bert;
  if (bert) {
    if (cfg.type_vocab > 0) add("wtt", kEmbeddingLayer, cfg.type_vocab * h);
    add("norm_emb.w", kEmbeddingLayer, h);
    add("norm_emb.b", kEmbeddingLayer, h);
  }
  embedding_ = {0, o};
  for (int l = 0; l < cfg.layers; ++l) {
    const std::int64_t start = o;
    add("norm_attn.w", l, h);
    add("norm_attn.b", l, h);
    add("qkv.w", l, 3 * h * h);
    add("qkv.b", l, 3 * h);
    add("attn_out.w", l, h * h);
    add("attn_out.b", l, h);
    add("norm_mlp.w", l, h);
    add("norm_mlp.b", l, h);
    if (cfg.experts > 0) {
      add("router.w", l, cfg.experts * h);
      for (int e = 0; e < cfg.experts; ++e) {
        const std::string x = "expert" + std::to_string(e);
        add(x + ".mlp_in.w", l, 4 * h * h);
        add(x + ".mlp_in.b", l, 4 * h);
        add(x + ".mlp_out.w", l, 4 * h * h);
        add(x + ".mlp_out.b", l, h);
      }
    } else {
      add("mlp_in.w", l, 4 * h * h);
      add("mlp_in.b", l, 4 * h);
      add("mlp_out.w", l, 4 * h * h);
      add("mlp_out.b", l, h);
    }
    blocks_.push_back({start, o - start});
  }
  head_ = {o, bert ? 0 : 2 * h};
  if (!bert) {
    add("lnf.w", kHeadLayer, h);
    add("lnf.b", kHeadLayer, h);
  }
  total_ = o;

  if (head_.size > 0) groups_.push_back({"head", kHeadLayer, head_});
  const BlockOffsets bo(h);
  for (int l = cfg.layers - 1; l >= 0; --l) {
    const std::int64_t s = blocks_[static_cast<std::size_t>(l)].offset;
    auto group = [&](std::string_view name, std::int64_t begin, std::int64_t end) {
      groups_.push_back({name, l, {s + begin, end - begin}});
    };
    if (cfg.experts > 0) {
      group("moe", bo.mlp_in_w, blocks_[static_cast<std::size_t>(l)].size);
    } else {
      group("mlp_out", bo.mlp_out_w, bo.size);
      group("mlp_in", bo.mlp_in_w, bo.mlp_out_w);
    }
    group("norm_mlp", bo.norm_mlp_w, bo.mlp_in_w);
    group("attn_out", bo.attn_out_w, bo.norm_mlp_w);
    group("qkv", bo.qkv_w, bo.attn_out_w);
    group("norm_attn", bo.norm_attn_w, bo.qkv_w);
  }
  groups_.push_back({"embedding", kEmbeddingLayer, embedding_});
}

Range ParamLayout::block(int l) const {
  CS_CHECK(l >= 0 && l < static_cast<int>(blocks_.size()));
  return blocks_[static_cast<std::size_t>(l)];
}

void init_params(const ParamLayout& layout, float* params, std::uint64_t seed) {
  int layers = 0;
  for (const auto& t : layout.tensors()) layers = std::max(layers, t.layer + 1);
  const double proj_std = 0.02 / std::sqrt(2.0 * std::max(layers, 1));
  for (std::size_t i = 0; i < layout.tensors().size(); ++i) {
    const ParamTensor& t = layout.tensors()[i];
    float* p = params + t.offset;
    const bool is_norm = t.name.starts_with("norm_") || t.name.starts_with("lnf");
    if (ends_with(t.name, ".b")) {
      std::fill(p, p + t.size, 0.0f);
    } else if (is_norm) {
      std::fill(p, p + t.size, 1.0f);
    } else {
      // One stream per tensor: seed and tensor index mixed through splitmix64.
      std::uint64_t x = seed;
      const std::uint64_t tensor_seed = splitmix64(x) ^ (0xD1B54A32D192ED03ull * (i + 1));
      const bool residual_proj =
          t.name == "attn_out.w" || t.name == "mlp_out.w" || ends_with(t.name, ".mlp_out.w");
      fill_normal(p, t.size, residual_proj ? proj_std : 0.02, tensor_seed);
    }
  }
}

void fill_tensor_normal(float* out, std::int64_t n, double stddev, std::uint64_t seed,
                        std::size_t index) {
  std::uint64_t x = seed;
  fill_normal(out, n, stddev, splitmix64(x) ^ (0xD1B54A32D192ED03ull * (index + 1)));
}

// ---- Gpt ----

double Gpt::now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Gpt::Gpt(const GptConfig& cfg, int batch) : cfg_(cfg), layout_(cfg), batch_(batch) {
  CS_CHECK(batch >= 1 && cfg.arch == ModelArch::gpt && cfg.experts == 0);
  const std::size_t n = static_cast<std::size_t>(batch) * cfg.seq;
  const std::size_t c = cfg.hidden;
  const std::size_t att = static_cast<std::size_t>(batch) * cfg.heads * cfg.seq * cfg.seq;
  tokens_.resize(n);
  targets_.resize(n);
  encoded_.resize(n * c);
  blocks_.resize(static_cast<std::size_t>(cfg.layers));
  for (auto& b : blocks_) {
    b.ln1.resize(n * c);
    b.ln1_mean.resize(n);
    b.ln1_rstd.resize(n);
    b.qkv.resize(3 * n * c);
    b.att.resize(att);
    b.atty.resize(n * c);
    b.res2.resize(n * c);
    b.ln2.resize(n * c);
    b.ln2_mean.resize(n);
    b.ln2_rstd.resize(n);
    b.fch.resize(4 * n * c);
    b.fch_gelu.resize(4 * n * c);
    b.res3.resize(n * c);
  }
  lnf_.resize(n * c);
  lnf_mean_.resize(n);
  lnf_rstd_.resize(n);
  probs_.resize(n * static_cast<std::size_t>(cfg.vocab));
  losses_.resize(n);
  tmp_.resize(n * c);
  dres_.resize(n * c);
  dtmp_.resize(n * c);
  dln_.resize(n * c);
  dqkv_.resize(3 * n * c);
  datt_.resize(att);
  datty_.resize(n * c);
  dfch_.resize(4 * n * c);
  dfch_gelu_.resize(4 * n * c);
}

template <class F>
void Gpt::timed(std::string_view name, int layer, bool backward, double flops, F&& f) {
  observe(observer_, OpRecord{name, layer, backward, 0, 0, flops}, std::forward<F>(f));
}

const float* Gpt::block_input(int l) const {
  return l == 0 ? encoded_.data() : blocks_[static_cast<std::size_t>(l - 1)].res3.data();
}

namespace {
void zero(std::vector<float>& v) {
  std::memset(v.data(), 0, v.size() * sizeof(float));
}
}  // namespace

float Gpt::forward(const float* params, const std::int32_t* tokens, const std::int32_t* targets) {
  forward_embedding(params + layout_.embedding().offset, tokens);
  for (int l = 0; l < cfg_.layers; ++l) forward_block(l, params + layout_.block(l).offset);
  return forward_head(params + layout_.embedding().offset, params + layout_.head().offset, targets);
}

void Gpt::backward(const float* params, float* grads, const GroupCallback& on_group) {
  const auto& groups = layout_.backward_groups();
  backward_head(params + layout_.embedding().offset, params + layout_.head().offset,
                grads + layout_.embedding().offset, grads + layout_.head().offset);
  if (on_group) on_group(groups.front());
  for (int l = cfg_.layers - 1; l >= 0; --l) {
    const std::int64_t off = layout_.block(l).offset;
    backward_block(l, params + off, grads + off, on_group);
  }
  backward_embedding(grads + layout_.embedding().offset);
  if (on_group) on_group(groups.back());
}

void Gpt::forward_embedding(const float* emb, const std::int32_t* tokens) {
  const int nb = batch_, seq = cfg_.seq, ch = cfg_.hidden;
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    CS_CHECK(tokens[i] >= 0 && tokens[i] < cfg_.vocab);
    tokens_[i] = tokens[i];
  }
  const float* wte = emb;
  const float* wpe = emb + static_cast<std::int64_t>(cfg_.vocab) * ch;
  timed("embedding", kEmbeddingLayer, false, 0,
        [&] { encoder_forward(encoded_.data(), tokens_.data(), wte, wpe, nb, seq, ch); });
  forward_done_ = false;
}

void Gpt::forward_block(int l, const float* block) {
  const int nb = batch_, seq = cfg_.seq, ch = cfg_.hidden, nh = cfg_.heads;
  const std::int64_t rows = static_cast<std::int64_t>(nb) * seq;
  const double fn = static_cast<double>(rows), fc = ch;
  const double attn_flops = 2.0 * nb * seq * static_cast<double>(seq) * ch;
  const BlockOffsets o(ch);
  BlockActs& a = blocks_[static_cast<std::size_t>(l)];
  const float* inp = block_input(l);
  timed("norm_attn", l, false, 0, [&] {
    layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), inp,
                      block + o.norm_attn_w, block + o.norm_attn_b, rows, ch);
  });
  timed("qkv", l, false, 2 * fn * fc * 3 * fc, [&] {
    matmul_forward(a.qkv.data(), a.ln1.data(), block + o.qkv_w, block + o.qkv_b, rows, ch, 3 * ch);
  });
  timed("attn_scores", l, false, attn_flops,
        [&] { attention_scores_forward(a.att.data(), a.qkv.data(), nb, seq, ch, nh); });
  timed("softmax", l, false, 0, [&] { attention_softmax_forward(a.att.data(), nb, seq, nh); });
  timed("attn_values", l, false, attn_flops, [&] {
    attention_values_forward(a.atty.data(), a.att.data(), a.qkv.data(), nb, seq, ch, nh);
  });
  timed("attn_out", l, false, 2 * fn * fc * fc, [&] {
    matmul_forward(tmp_.data(), a.atty.data(), block + o.attn_out_w, block + o.attn_out_b, rows, ch,
                   ch);
  });
  timed("attn_residual", l, false, 0,
        [&] { residual_forward(a.res2.data(), inp, tmp_.data(), rows * ch); });
  timed("norm_mlp", l, false, 0, [&] {
    layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.res2.data(),
                      block + o.norm_mlp_w, block + o.norm_mlp_b, rows, ch);
  });
  timed("mlp_in", l, false, 2 * fn * fc * 4 * fc, [&] {
    matmul_forward(a.fch.data(), a.ln2.data(), block + o.mlp_in_w, block + o.mlp_in_b, rows, ch,
                   4 * ch);
  });
  timed("mlp_act", l, false, 0,
        [&] { gelu_forward(a.fch_gelu.data(), a.fch.data(), 4 * rows * ch); });
  timed("mlp_out", l, false, 2 * fn * 4 * fc * fc, [&] {
    matmul_forward(tmp_.data(), a.fch_gelu.data(), block + o.mlp_out_w, block + o.mlp_out_b, rows,
                   4 * ch, ch);
  });
  timed("mlp_residual", l, false, 0,
        [&] { residual_forward(a.res3.data(), a.res2.data(), tmp_.data(), rows * ch); });
}

float Gpt::forward_head(const float* wte, const float* lnf, const std::int32_t* targets) {
  const int ch = cfg_.hidden, vocab = cfg_.vocab;
  const std::int64_t rows = static_cast<std::int64_t>(batch_) * cfg_.seq;
  for (std::size_t i = 0; i < targets_.size(); ++i) {
    CS_CHECK(targets[i] >= 0 && targets[i] < vocab);
    targets_[i] = targets[i];
  }
  const float* x = blocks_.back().res3.data();
  timed("final_norm", kHeadLayer, false, 0, [&] {
    layernorm_forward(lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), x, lnf, lnf + ch, rows, ch);
  });
  timed("lm_head", kHeadLayer, false, 2.0 * static_cast<double>(rows) * ch * vocab, [&] {
    matmul_forward(probs_.data(), lnf_.data(), wte, static_cast<const float*>(nullptr), rows, ch,
                   vocab);
  });
  float loss = 0;
  timed("cross_entropy", kHeadLayer, false, 0, [&] {
    loss = crossentropy_forward(probs_.data(), losses_.data(), probs_.data(), targets_.data(), rows,
                                vocab);
  });
  forward_done_ = true;
  return loss;
}

void Gpt::backward_head(const float* wte, const float* lnf, float* d_wte, float* d_lnf) {
  CS_CHECK(forward_done_);  // the probabilities are turned into dlogits in place
  forward_done_ = false;
  const int ch = cfg_.hidden, vocab = cfg_.vocab;
  const std::int64_t rows = static_cast<std::int64_t>(batch_) * cfg_.seq;
  timed("cross_entropy", kHeadLayer, true, 0,
        [&] { crossentropy_backward(probs_.data(), probs_.data(), targets_.data(), rows, vocab); });
  timed("lm_head", kHeadLayer, true, 4.0 * static_cast<double>(rows) * ch * vocab, [&] {
    zero(dln_);
    matmul_backward(dln_.data(), d_wte, static_cast<float*>(nullptr), probs_.data(), lnf_.data(),
                    wte, rows, ch, vocab);
  });
  timed("final_norm", kHeadLayer, true, 0, [&] {
    zero(dres_);
    layernorm_backward(dres_.data(), d_lnf, d_lnf + ch, dln_.data(), blocks_.back().res3.data(),
                       lnf, lnf_mean_.data(), lnf_rstd_.data(), rows, ch);
  });
}

void Gpt::backward_block(int l, const float* block, float* d_block, const GroupCallback& on_group) {
  const int nb = batch_, seq = cfg_.seq, ch = cfg_.hidden, nh = cfg_.heads;
  const std::int64_t rows = static_cast<std::int64_t>(nb) * seq;
  const double fn = static_cast<double>(rows), fc = ch;
  const double attn_flops = 4.0 * nb * seq * static_cast<double>(seq) * ch;
  const BlockOffsets o(ch);
  const BlockActs& a = blocks_[static_cast<std::size_t>(l)];
  const float* inp = block_input(l);
  // This block's six groups in backward_groups(): after the head's and those of blocks above.
  const auto& groups = layout_.backward_groups();
  const std::size_t g0 = 1 + static_cast<std::size_t>(cfg_.layers - 1 - l) * 6;
  auto done = [&](int k) {
    if (on_group) on_group(groups[g0 + static_cast<std::size_t>(k)]);
  };

  // dres_ holds dL/d(block output); the residual stream's gradient stays in it.
  timed("mlp_residual", l, true, 0, [&] {
    zero(dtmp_);
    residual_backward(dres_.data(), dtmp_.data(), dres_.data(), rows * ch);
  });
  timed("mlp_out", l, true, 4 * fn * 4 * fc * fc, [&] {
    zero(dfch_gelu_);
    matmul_backward(dfch_gelu_.data(), d_block + o.mlp_out_w, d_block + o.mlp_out_b, dtmp_.data(),
                    a.fch_gelu.data(), block + o.mlp_out_w, rows, 4 * ch, ch);
  });
  done(0);
  timed("mlp_act", l, true, 0, [&] {
    zero(dfch_);
    gelu_backward(dfch_.data(), a.fch.data(), dfch_gelu_.data(), 4 * rows * ch);
  });
  timed("mlp_in", l, true, 4 * fn * fc * 4 * fc, [&] {
    zero(dln_);
    matmul_backward(dln_.data(), d_block + o.mlp_in_w, d_block + o.mlp_in_b, dfch_.data(),
                    a.ln2.data(), block + o.mlp_in_w, rows, ch, 4 * ch);
  });
  done(1);
  timed("norm_mlp", l, true, 0, [&] {
    layernorm_backward(dres_.data(), d_block + o.norm_mlp_w, d_block + o.norm_mlp_b, dln_.data(),
                       a.res2.data(), block + o.norm_mlp_w, a.ln2_mean.data(), a.ln2_rstd.data(),
                       rows, ch);
  });
  done(2);
  timed("attn_residual", l, true, 0, [&] {
    zero(dtmp_);
    residual_backward(dres_.data(), dtmp_.data(), dres_.data(), rows * ch);
  });
  timed("attn_out", l, true, 4 * fn * fc * fc, [&] {
    zero(datty_);
    matmul_backward(datty_.data(), d_block + o.attn_out_w, d_block + o.attn_out_b, dtmp_.data(),
                    a.atty.data(), block + o.attn_out_w, rows, ch, ch);
  });
  done(3);
  timed("attn_values", l, true, attn_flops, [&] {
    zero(dqkv_);
    attention_values_backward(datt_.data(), dqkv_.data(), datty_.data(), a.att.data(), a.qkv.data(),
                              nb, seq, ch, nh);
  });
  timed("softmax", l, true, 0,
        [&] { attention_softmax_backward(datt_.data(), a.att.data(), nb, seq, nh); });
  timed("attn_scores", l, true, attn_flops, [&] {
    attention_scores_backward(dqkv_.data(), datt_.data(), a.qkv.data(), nb, seq, ch, nh);
  });
  timed("qkv", l, true, 4 * fn * fc * 3 * fc, [&] {
    zero(dln_);
    matmul_backward(dln_.data(), d_block + o.qkv_w, d_block + o.qkv_b, dqkv_.data(), a.ln1.data(),
                    block + o.qkv_w, rows, ch, 3 * ch);
  });
  done(4);
  timed("norm_attn", l, true, 0, [&] {
    layernorm_backward(dres_.data(), d_block + o.norm_attn_w, d_block + o.norm_attn_b, dln_.data(),
                       inp, block + o.norm_attn_w, a.ln1_mean.data(), a.ln1_rstd.data(), rows, ch);
  });
  done(5);
}

void Gpt::backward_embedding(float* d_emb) {
  const int ch = cfg_.hidden;
  float* d_wte = d_emb;
  float* d_wpe = d_emb + static_cast<std::int64_t>(cfg_.vocab) * ch;
  timed("embedding", kEmbeddingLayer, true, 0, [&] {
    encoder_backward(d_wte, d_wpe, dres_.data(), tokens_.data(), batch_, cfg_.seq, ch);
  });
}

double Gpt::matmul_flops_per_step() const {
  const double n = static_cast<double>(batch_) * cfg_.seq, c = cfg_.hidden;
  const double per_block = 2 * n * c * (3 * c + c + 4 * c + 4 * c)  // qkv, attn_out, mlp
                           + 2 * 2.0 * n * cfg_.seq * c;            // scores and values
  const double forward = cfg_.layers * per_block + 2 * n * c * cfg_.vocab;
  return 3 * forward;
}

}  // namespace commscope::train
