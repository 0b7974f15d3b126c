// The tensor- and pipeline-parallel GPT shard (gpt/parallel.h) without MPI: one shard holding
// everything is the model of gpt.h; two tensor-parallel shards on two threads (their
// all-reduces summed through shared memory) and two pipeline chunks run one after the other
// give the whole model's loss and, slice for slice, its gradients; so do context-parallel
// shards (alone and with tensor and sequence parallelism); the shard's parameter count is the
// workload's.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <functional>
#include <memory>
#include <numeric>
#include <string_view>
#include <thread>
#include <vector>

#include "commscope/gpt/data.h"
#include "commscope/gpt/gpt.h"
#include "commscope/gpt/kernels.h"
#include "commscope/gpt/parallel.h"
#include "commscope/train/options.h"
#include "commscope/workload/params.h"

namespace commscope::train {
namespace {

GptConfig small() {
  GptConfig c;
  c.layers = 2;
  c.hidden = 32;
  c.heads = 4;
  c.vocab = 64;
  c.seq = 8;
  c.max_positions = 8;
  return c;
}

struct Reference {
  std::vector<float> params, grads;
  std::vector<std::int32_t> tok, tgt;
  float loss = 0;
};

GptConfig small_bert() {
  GptConfig c = small();
  c.arch = ModelArch::bert;
  c.type_vocab = 2;
  return c;
}

// The whole model, forward and backward on one batch: GPT-2 by gpt.h's Gpt; BERT (which Gpt
// does not run) by one GptShard holding everything, on masked-LM batches.
Reference reference(const GptConfig& c, int batch) {
  Reference r;
  const ParamLayout layout(c);
  r.params.resize(static_cast<std::size_t>(layout.total()));
  init_params(layout, r.params.data(), 7);
  r.grads.assign(r.params.size(), 0.0f);
  const TokenSource data = TokenSource::synthetic(c.vocab, 3);
  r.tok.resize(static_cast<std::size_t>(batch) * c.seq);
  r.tgt.resize(r.tok.size());
  for (int i = 0; i < batch; ++i) {
    data.sequence(i, c.seq, r.tok.data() + i * c.seq, r.tgt.data() + i * c.seq);
    if (c.arch == ModelArch::bert)
      mask_for_mlm(i, c.seq, c.vocab, 3, r.tok.data() + i * c.seq, r.tgt.data() + i * c.seq);
  }
  if (c.arch == ModelArch::bert) {
    ShardSpec s;
    s.layers = c.layers;
    GptShard g(c, s, batch, 1);
    r.loss = g.forward(0, r.params.data(), r.tok.data(), nullptr, r.tgt.data());
    g.backward(0, r.params.data(), r.grads.data(), nullptr);
    return r;
  }
  Gpt g(c, batch);
  r.loss = g.forward(r.params.data(), r.tok.data(), r.tgt.data());
  g.backward(r.params.data(), r.grads.data());
  return r;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(static_cast<double>(got[i]) - want[i]) / (1e-3 + std::abs(want[i]));
    if (d > worst) worst = d, at = i;
  }
  EXPECT_LT(worst, tol) << what << ": element " << at << " got " << got[at] << " want " << want[at];
}

TEST(GptShard, OneShardOfEverythingIsTheModel) {
  const GptConfig c = small();
  const Reference r = reference(c, 2);
  ShardSpec s;
  s.layers = c.layers;
  GptShard m(c, s, 2, 1);
  ASSERT_EQ(m.layout().total(), static_cast<std::int64_t>(r.params.size()));
  std::vector<float> p(r.params.size()), g(r.params.size(), 0.0f);
  m.layout().from_full(r.params.data(), p.data());
  EXPECT_EQ(p, r.params);  // the same layout
  const float loss = m.forward(0, p.data(), r.tok.data(), nullptr, r.tgt.data());
  EXPECT_EQ(loss, r.loss);
  m.backward(0, p.data(), g.data(), nullptr);
  EXPECT_EQ(g, r.grads);  // the same kernels in the same order
}

// Two tensor-parallel ranks on two threads: each all-reduce sums (or takes the maximum of) the
// two ranks' buffers; with sequence parallelism the gathers and reduce-scatters go the same
// way, and the norms' and row-parallel biases' partial gradients are summed at the end.
// `async`: the shard is given the started forms too (set_async_tp), which here do nothing until
// their wait, so a shard that read a result before its wait would get it unreduced; with
// tp_async (Megatron-LM's asynchronous TP all-reduce) the column-parallel backward's all-reduce
// is started between its data and weight gradients, as under sequence parallelism its
// re-gather and reduce-scatter are.
void two_tensor_parallel_shards(bool sequence_parallel, const GptConfig& c = small(),
                                bool async = false) {
  SCOPED_TRACE(sequence_parallel ? "sequence parallel" : "tensor parallel");
  SCOPED_TRACE(c.arch == ModelArch::bert ? "bert" : "gpt");
  SCOPED_TRACE(async ? "asynchronous" : "blocking");
  const Reference r = reference(c, 2);
  constexpr int kTp = 2;
  std::barrier sync(kTp);
  float* posted[kTp] = {};
  std::vector<float> mine[kTp];
  float losses[kTp] = {};
  std::vector<float> grads[kTp], full_slice[kTp];
  int calls[kTp] = {}, started[kTp] = {};
  auto rank = [&](int t) {
    ShardSpec s;
    s.tp = kTp;
    s.tp_rank = t;
    s.layers = c.layers;
    s.sequence_parallel = sequence_parallel;
    s.tp_async = async;
    GptShard m(c, s, 2, 1);
    auto sequence = [&, t](bool gather, const float* in, float* out, std::int64_t shard,
                           std::string_view, int) {
      ++calls[t];
      posted[t] = const_cast<float*>(in);
      sync.arrive_and_wait();
      if (gather) {
        for (int o = 0; o < kTp; ++o) std::copy(posted[o], posted[o] + shard, out + o * shard);
      } else {
        std::fill(out, out + shard, 0.0f);
        for (int o = 0; o < kTp; ++o)
          for (std::int64_t i = 0; i < shard; ++i) out[i] += posted[o][t * shard + i];
      }
      sync.arrive_and_wait();
    };
    auto all_reduce = [&, t](float* data, std::int64_t n, bool max, std::string_view, int) {
      ++calls[t];
      posted[t] = data;
      sync.arrive_and_wait();
      mine[t].assign(data, data + n);
      for (int o = 0; o < kTp; ++o)
        if (o != t)
          for (std::int64_t i = 0; i < n; ++i)
            mine[t][static_cast<std::size_t>(i)] =
                max ? std::max(mine[t][static_cast<std::size_t>(i)], posted[o][i])
                    : mine[t][static_cast<std::size_t>(i)] + posted[o][i];
      sync.arrive_and_wait();  // every rank has read the others' buffers
      std::copy(mine[t].begin(), mine[t].end(), data);
    };
    m.set_sequence_comm(sequence);
    m.set_all_reduce(all_reduce);
    if (async)
      m.set_async_tp(
          [&, t](float* data, std::int64_t n, std::string_view name, int layer) {
            ++started[t];
            return std::function<void()>(
                [=] { all_reduce(data, n, false, name, layer); });  // at the wait
          },
          [&, t](bool gather, const float* in, float* out, std::int64_t shard,
                 std::string_view name, int layer) {
            ++started[t];
            return std::function<void()>([=] { sequence(gather, in, out, shard, name, layer); });
          });
    std::vector<float> p(static_cast<std::size_t>(m.layout().total()));
    m.layout().from_full(r.params.data(), p.data());
    grads[t].assign(p.size(), 0.0f);
    losses[t] = m.forward(0, p.data(), r.tok.data(), nullptr, r.tgt.data());
    m.backward(0, p.data(), grads[t].data(), nullptr);
    if (sequence_parallel) {  // the step's all-reduce of the partial gradients
      for (const Range& part : m.layout().sequence_parallel_partial()) {
        posted[t] = grads[t].data() + part.offset;
        sync.arrive_and_wait();
        std::vector<float> sum(posted[0], posted[0] + part.size);
        for (std::int64_t i = 0; i < part.size; ++i)
          sum[static_cast<std::size_t>(i)] += posted[1][i];
        sync.arrive_and_wait();
        std::copy(sum.begin(), sum.end(), grads[t].begin() + part.offset);
      }
    }
    full_slice[t].assign(p.size(), 0.0f);
    m.layout().from_full(r.grads.data(), full_slice[t].data());
  };
  std::thread other(rank, 1);
  rank(0);
  other.join();
  for (int t = 0; t < kTp; ++t) {
    EXPECT_NEAR(losses[t], r.loss, 1e-5) << t;
    expect_close(grads[t], full_slice[t], 1e-3, t == 0 ? "rank 0 gradients" : "rank 1 gradients");
    // The workload's tensor-parallel collectives. Without sequence parallelism: forward the
    // embedding's, 2 per block, the cross-entropy's 3; backward 2 per block and the head's:
    // 4L + 5. With it: forward the embedding's reduce-scatter, 4 per block (gather, scatter,
    // gather, scatter), the head's gather and the 3 cross-entropy all-reduces; backward the
    // head's re-gather and scatter, 6 per block (gather into each region, re-gather each
    // column-parallel GEMM's input, scatter out of each), the embedding's gather: 10L + 8.
    EXPECT_EQ(calls[t], sequence_parallel ? 10 * c.layers + 8 : 4 * c.layers + 5) << t;
    // Started ones: each column-parallel linear's backward (qkv, mlp_in, the LM head) starts its
    // all-reduce, or under SP its re-gather and its reduce-scatter.
    EXPECT_EQ(started[t], !async              ? 0
                          : sequence_parallel ? 2 * (2 * c.layers + 1)
                                              : 2 * c.layers + 1)
        << t;
  }
}

TEST(GptShard, TwoTensorParallelShardsGiveTheModelsLossAndGradients) {
  two_tensor_parallel_shards(false);
}

TEST(GptShard, TwoSequenceParallelShardsGiveTheModelsLossAndGradients) {
  two_tensor_parallel_shards(true);
}

// Megatron-Core's asynchronous TP backward (GptShard::column_backward): the same loss and
// gradients, GPT and BERT, with and without sequence parallelism.
TEST(GptShard, AsynchronousTensorParallelBackwardGivesTheModelsLossAndGradients) {
  for (const GptConfig& c : {small(), small_bert()})
    for (bool sp : {false, true}) two_tensor_parallel_shards(sp, c, true);
}

// BERT (bidirectional attention, token types, the embedding norm on the sequence shards, no
// final norm, the masked-LM loss over its masked positions only): the same collectives.
TEST(GptShard, TwoTensorParallelBertShardsGiveTheModelsLossAndGradients) {
  two_tensor_parallel_shards(false, small_bert());
  two_tensor_parallel_shards(true, small_bert());
}

// Two pipeline chunks, run one after the other: the first's output is the second's input, the
// second's input gradient the first's output gradient. The tied word embedding's gradient is
// the sum of the first chunk's and the last chunk's copy.
void two_pipeline_chunks(GptConfig c) {
  SCOPED_TRACE(c.arch == ModelArch::bert ? "bert" : "gpt");
  c.layers = 4;
  const Reference r = reference(c, 2);
  ShardSpec a, b;
  a.layers = b.layers = 2;
  b.first_layer = 2;
  a.head = false;
  b.embedding = false;
  GptShard first(c, a, 2, 1), last(c, b, 2, 1);
  std::vector<float> pa(static_cast<std::size_t>(first.layout().total())),
      pb(static_cast<std::size_t>(last.layout().total()));
  first.layout().from_full(r.params.data(), pa.data());
  last.layout().from_full(r.params.data(), pb.data());
  std::vector<float> ga(pa.size(), 0.0f), gb(pb.size(), 0.0f);
  first.forward(0, pa.data(), r.tok.data(), nullptr, nullptr);
  const float loss = last.forward(0, pb.data(), nullptr, first.output(0), r.tgt.data());
  EXPECT_NEAR(loss, r.loss, 1e-6);
  last.backward(0, pb.data(), gb.data(), nullptr);
  first.backward(0, pa.data(), ga.data(), last.input_grad());
  // The embedding all-reduce of the first and last stages.
  const Range we = first.layout().word_embedding(), copy = last.layout().head_copy();
  ASSERT_EQ(we.size, copy.size);
  ASSERT_GT(we.size, 0);
  for (std::int64_t i = 0; i < we.size; ++i) {
    const float sum =
        ga[static_cast<std::size_t>(we.offset + i)] + gb[static_cast<std::size_t>(copy.offset + i)];
    ga[static_cast<std::size_t>(we.offset + i)] = gb[static_cast<std::size_t>(copy.offset + i)] =
        sum;
  }
  std::vector<float> wa(pa.size()), wb(pb.size());
  first.layout().from_full(r.grads.data(), wa.data());
  last.layout().from_full(r.grads.data(), wb.data());
  expect_close(ga, wa, 1e-4, "first chunk");
  expect_close(gb, wb, 1e-4, "last chunk");
}

TEST(GptShard, TwoPipelineChunksGiveTheModelsLossAndGradients) {
  two_pipeline_chunks(small());
  two_pipeline_chunks(small_bert());
}

// BERT sees the whole sequence: changing the last token changes the loss at a masked position
// before it (GPT-2's causal mask would hide it), and unmasked positions carry no loss.
TEST(GptShard, BertAttendsBothWaysAndScoresOnlyMaskedPositions) {
  const GptConfig c = small_bert();
  Reference r = reference(c, 1);
  int first_masked = -1, masked = 0;
  for (int i = 0; i < c.seq; ++i)
    if (r.tgt[static_cast<std::size_t>(i)] >= 0) {
      ++masked;
      if (first_masked < 0) first_masked = i;
    }
  EXPECT_EQ(masked, masked_positions(c.seq));
  ShardSpec s;
  s.layers = c.layers;
  GptShard m(c, s, 1, 1);
  auto tok = r.tok;
  int last = c.seq - 1;
  while (last > first_masked && r.tgt[static_cast<std::size_t>(last)] >= 0) --last;
  ASSERT_GT(last, first_masked);  // an unmasked position after a masked one
  tok[static_cast<std::size_t>(last)] = (tok[static_cast<std::size_t>(last)] + 1) % (c.vocab - 1);
  const float changed = m.forward(0, r.params.data(), tok.data(), nullptr, r.tgt.data());
  EXPECT_NE(changed, r.loss);
  // Only masked positions count: every target ignored gives 0 and no gradient.
  std::vector<std::int32_t> none(r.tgt.size(), kIgnoreTarget);
  EXPECT_EQ(m.forward(0, r.params.data(), r.tok.data(), nullptr, none.data()), 0.0f);
  std::vector<float> g(r.params.size(), 0.0f);
  m.backward(0, r.params.data(), g.data(), nullptr);
  EXPECT_TRUE(std::all_of(g.begin(), g.end(), [](float x) { return x == 0.0f; }));
}

// The shard's parameters are the workload's count for the rank: blocks split over TP, the
// vocabulary shard, and the tied copy on a last stage.
TEST(GptShard, ParameterCountsAreTheWorkloads) {
  GptConfig c = small();
  c.layers = 4;
  const ModelSpec m = model_spec(c, "shard-test");  // the trainer's own mapping (options.h)
  for (int tp : {1, 2, 4}) {
    ShardSpec s;
    s.tp = tp;
    s.first_layer = 1;
    s.layers = 2;
    s.embedding = s.head = false;
    EXPECT_EQ(ShardLayout(c, s).total(), block_params(m, 1, tp) + block_params(m, 2, tp)) << tp;
    s.head = true;  // a last stage: final norm and the tied copy of its vocabulary shard
    EXPECT_EQ(ShardLayout(c, s).total(), block_params(m, 1, tp) + block_params(m, 2, tp) +
                                             2 * c.hidden + c.vocab / tp * c.hidden)
        << tp;
  }
}

// BERT's shards: the embedding chunk holds the vocabulary shard and the replicated positions,
// token types and embedding norm; the last chunk no final norm, only the tied copy.
TEST(GptShard, BertParameterCountsAreTheWorkloads) {
  GptConfig c = small_bert();
  c.layers = 4;
  const ModelSpec m = model_spec(c, "bert-shard-test");
  ASSERT_EQ(m.kind, ArchKind::bert);
  EXPECT_EQ(ParamLayout(c).total(), count_params(m).total);
  const OuterParams outer = outer_params(m);
  for (int tp : {1, 2, 4}) {
    ShardSpec s;
    s.tp = tp;
    s.layers = 2;
    s.head = false;
    EXPECT_EQ(ShardLayout(c, s).total(), outer.word_embedding / tp + outer.position_embedding +
                                             block_params(m, 0, tp) + block_params(m, 1, tp))
        << tp;
    s.first_layer = 2;
    s.embedding = false;
    s.head = true;
    EXPECT_EQ(ShardLayout(c, s).total(),
              block_params(m, 2, tp) + block_params(m, 3, tp) + outer.word_embedding / tp)
        << tp;
  }
}

// ---- context parallelism ----

// The load-balanced causal chunks (Megatron-LM): rank r holds chunks r and 2 CP - 1 - r of 2 CP.
TEST(GptShard, ContextParallelRanksHoldTheLoadBalancedChunks) {
  EXPECT_EQ(context_positions(8, 1, 0), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(context_positions(8, 2, 0), (std::vector<int>{0, 1, 6, 7}));
  EXPECT_EQ(context_positions(8, 2, 1), (std::vector<int>{2, 3, 4, 5}));
  EXPECT_EQ(context_positions(8, 4, 3), (std::vector<int>{3, 4}));
  GptConfig c = small();
  ShardSpec s;
  s.layers = c.layers;
  s.cp = 3;  // 2 x 3 does not divide 8
  EXPECT_EQ(validate(c, s).error().message,
            "--context-parallel-size: expected 2 x CP to divide the sequence length 8 "
            "(load-balanced causal chunks, as Megatron-LM requires), got 3");
  s.cp = 2;
  EXPECT_TRUE(validate(c, s).ok());
  EXPECT_FALSE(validate(small_bert(), s).ok());  // causal GPT only
}

// Ranks 0..n-1 of a test, each on a thread of its own (rank 0 on the caller's).
void on_threads(int n, const std::function<void(int)>& rank) {
  std::vector<std::thread> others;
  for (int me = 1; me < n; ++me) others.emplace_back(rank, me);
  rank(0);
  for (std::thread& th : others) th.join();
}

// A group of ranks on threads: each collective posts every member's buffer, waits, combines.
struct ThreadGroup {
  explicit ThreadGroup(int n) : size(n), sync(n), posted(static_cast<std::size_t>(n)) {}
  int size;
  std::barrier<> sync;
  std::vector<const float*> posted;
  // gather: out = every member's shard in rank order; otherwise out = the sum of every member's
  // block `me` of `in`.
  void sequence(int me, bool gather, const float* in, float* out, std::int64_t shard) {
    posted[static_cast<std::size_t>(me)] = in;
    sync.arrive_and_wait();
    if (gather) {
      for (int o = 0; o < size; ++o)
        std::copy(posted[static_cast<std::size_t>(o)], posted[static_cast<std::size_t>(o)] + shard,
                  out + o * shard);
    } else {
      std::fill(out, out + shard, 0.0f);
      for (int o = 0; o < size; ++o)
        for (std::int64_t i = 0; i < shard; ++i)
          out[i] += posted[static_cast<std::size_t>(o)][me * shard + i];
    }
    sync.arrive_and_wait();
  }
  // All-to-all: out's block o = member o's block `me` of `in`, blocks of `block` floats.
  void all_to_all(int me, const float* in, float* out, std::int64_t block) {
    posted[static_cast<std::size_t>(me)] = in;
    sync.arrive_and_wait();
    for (int o = 0; o < size; ++o)
      std::copy_n(posted[static_cast<std::size_t>(o)] + me * block, block, out + o * block);
    sync.arrive_and_wait();
  }
  // The ring's step: send `send` to member me + 1, receive member me - 1's into `recv`
  // (reverse: to me - 1, from me + 1); the copy happens at the wait, so a shard that touched
  // either buffer before waiting would fail.
  std::function<void()> ring(int me, const float* send, float* recv, std::int64_t n,
                             bool reverse = false) {
    posted[static_cast<std::size_t>(me)] = send;
    return [this, me, recv, n, reverse] {
      sync.arrive_and_wait();
      const float* from = posted[static_cast<std::size_t>((me + (reverse ? 1 : size - 1)) % size)];
      std::copy(from, from + n, recv);
      sync.arrive_and_wait();
    };
  }
  void all_reduce(int me, float* data, std::int64_t n, bool max) {
    posted[static_cast<std::size_t>(me)] = data;
    sync.arrive_and_wait();
    std::vector<float> r(data, data + n);
    for (int o = 0; o < size; ++o)
      if (o != me)
        for (std::int64_t i = 0; i < n; ++i)
          r[static_cast<std::size_t>(i)] =
              max ? std::max(r[static_cast<std::size_t>(i)], posted[static_cast<std::size_t>(o)][i])
                  : r[static_cast<std::size_t>(i)] + posted[static_cast<std::size_t>(o)][i];
    sync.arrive_and_wait();
    std::copy(r.begin(), r.end(), data);
  }
};

// CP x TP shards on threads, ranks (c, t): the CP ranks' losses average to the model's, and
// their gradients, averaged over CP (Megatron reduces them over DP x CP) and summed over TP
// where sequence parallelism leaves partial sums, are the model's, slice for slice. The CP
// exchanges are the workload's: all-gather CP, per block K and V all-gathered in forward and
// again in backward, dK and dV reduce-scattered; the ring, per block a pass of cp - 1 K,V
// messages forward, each a chunk, and of cp backward the other way round (K,V alone, K,V with
// dK,dV, dK,dV alone: Transformer Engine's), 2 (cp - 1) chunks; all-to-all CP,
// per block Q,K,V and the output forward, dO and dQ,dK,dV backward, each this rank's rows of
// every head (3 or 1 x seq / cp x h / tp floats a sequence), the workload's send buffers.
// Hierarchical CP (ring with inner > 1): the all-to-alls over each group of `inner` CP
// neighbours, the ring over the cp / inner ranks `inner` apart; per block the all-to-all form's
// four exchanges and the ring's passes of cp / inner - 1 steps, each step a chunk as the plain
// ring's.
void context_parallel_shards(int cp, int tp, bool sequence_parallel, bool flash = false,
                             bool ring = false, bool a2a = false, int inner = 1) {
  SCOPED_TRACE(fmt::format("cp {} tp {}{}{}{}{} inner {}", cp, tp, sequence_parallel ? " sp" : "",
                           flash ? " flash" : "", ring ? " ring" : "", a2a ? " a2a" : "", inner));
  GptConfig c = small();
  c.seq = c.max_positions = cp % 3 == 0 ? 12 : 16;  // 2 cp divides it
  const Reference r = reference(c, 2);
  std::vector<std::unique_ptr<ThreadGroup>> tp_groups, cp_groups, inner_groups, outer_groups;
  for (int i = 0; i < cp; ++i) tp_groups.push_back(std::make_unique<ThreadGroup>(tp));
  for (int i = 0; i < tp; ++i) cp_groups.push_back(std::make_unique<ThreadGroup>(cp));
  // Per TP rank: cp / inner groups of inner neighbours, inner rings of cp / inner members.
  for (int i = 0; i < tp * cp / inner; ++i)
    inner_groups.push_back(std::make_unique<ThreadGroup>(inner));
  for (int i = 0; i < tp * inner; ++i)
    outer_groups.push_back(std::make_unique<ThreadGroup>(cp / inner));
  const int n = cp * tp;
  std::vector<float> losses(static_cast<std::size_t>(n));
  std::vector<std::vector<float>> grads(static_cast<std::size_t>(n)),
      want(static_cast<std::size_t>(n));
  std::vector<int> cp_calls(static_cast<std::size_t>(n)), passes(static_cast<std::size_t>(n)),
      a2a_calls(static_cast<std::size_t>(n));
  std::vector<std::int64_t> sent(static_cast<std::size_t>(n));
  std::int64_t chunk = 0;  // one rank's K,V of a micro-batch: 2 x seq / cp x h / tp per sequence
  auto rank = [&](int me) {
    const int ci = me / tp, t = me % tp;
    ThreadGroup& tg = *tp_groups[static_cast<std::size_t>(ci)];
    ThreadGroup& cg = *cp_groups[static_cast<std::size_t>(t)];
    ThreadGroup& ig = *inner_groups[static_cast<std::size_t>(t * (cp / inner) + ci / inner)];
    ThreadGroup& og = *outer_groups[static_cast<std::size_t>(t * inner + ci % inner)];
    ShardSpec s;
    s.tp = tp;
    s.tp_rank = t;
    s.cp = cp;
    s.cp_rank = ci;
    s.layers = c.layers;
    s.sequence_parallel = sequence_parallel;
    s.flash = flash;
    s.cp_comm = inner > 1 ? CpCommType::a2a_p2p
                : ring    ? CpCommType::p2p
                : a2a     ? CpCommType::a2a
                          : CpCommType::all_gather;
    s.cp_a2a_size = inner;
    ASSERT_TRUE(validate(c, s).ok()) << validate(c, s).error().message;
    GptShard m(c, s, 2, 1);
    chunk = 2 * 2 * (c.seq / cp) * (c.hidden / tp);
    m.set_sequence_comm([&, t](bool gather, const float* in, float* out, std::int64_t shard,
                               std::string_view, int) { tg.sequence(t, gather, in, out, shard); });
    m.set_all_reduce([&, t](float* data, std::int64_t k, bool max, std::string_view, int) {
      tg.all_reduce(t, data, k, max);
    });
    m.set_context_comm([&, ci, me](bool gather, const float* in, float* out, std::int64_t shard,
                                   std::string_view name, int) {
      EXPECT_EQ(name, gather ? "cp_kv_all_gather" : "cp_dkv_reduce_scatter");
      ++cp_calls[static_cast<std::size_t>(me)];
      cg.sequence(ci, gather, in, out, shard);
    });
    m.set_context_ring([&, ci, me](const float* send, float* recv, std::int64_t k,
                                   std::string_view name, int, bool first, bool reverse) {
      EXPECT_TRUE(name == (reverse ? "cp_kv_dkv_send" : "cp_kv_send")) << name;
      ++cp_calls[static_cast<std::size_t>(me)];
      passes[static_cast<std::size_t>(me)] += first ? 1 : 0;
      sent[static_cast<std::size_t>(me)] += k;
      return inner > 1 ? og.ring(ci / inner, send, recv, k, reverse)
                       : cg.ring(ci, send, recv, k, reverse);
    });
    m.set_context_a2a([&, ci, me](const float* send, float* recv, std::int64_t block,
                                  std::string_view name, int) {
      EXPECT_TRUE(name == "cp_qkv_all_to_all" || name == "cp_out_all_to_all" ||
                  name == "cp_dout_all_to_all" || name == "cp_dqkv_all_to_all")
          << name;
      ++a2a_calls[static_cast<std::size_t>(me)];
      sent[static_cast<std::size_t>(me)] += block * (inner > 1 ? inner : cp);
      if (inner > 1)
        ig.all_to_all(ci % inner, send, recv, block);
      else
        cg.all_to_all(ci, send, recv, block);
    });
    std::vector<float> p(static_cast<std::size_t>(m.layout().total()));
    m.layout().from_full(r.params.data(), p.data());
    std::vector<float>& g = grads[static_cast<std::size_t>(me)];
    g.assign(p.size(), 0.0f);
    float loss = m.forward(0, p.data(), r.tok.data(), nullptr, r.tgt.data());
    m.backward(0, p.data(), g.data(), nullptr);
    if (sequence_parallel && tp > 1)
      for (const Range& part : m.layout().sequence_parallel_partial())
        tg.all_reduce(t, g.data() + part.offset, part.size, false);
    cg.all_reduce(ci, &loss, 1, false);
    cg.all_reduce(ci, g.data(), static_cast<std::int64_t>(g.size()), false);
    losses[static_cast<std::size_t>(me)] = loss / static_cast<float>(cp);
    for (float& x : g) x /= static_cast<float>(cp);
    want[static_cast<std::size_t>(me)].assign(p.size(), 0.0f);
    m.layout().from_full(r.grads.data(), want[static_cast<std::size_t>(me)].data());
  };
  on_threads(n, rank);
  for (int me = 0; me < n; ++me) {
    SCOPED_TRACE(me);
    EXPECT_NEAR(losses[static_cast<std::size_t>(me)], r.loss, 1e-5);
    expect_close(grads[static_cast<std::size_t>(me)], want[static_cast<std::size_t>(me)], 1e-3,
                 "gradients");
    const std::size_t i = static_cast<std::size_t>(me);
    if (a2a) {  // per block: 2 x (3 + 1) x chunk / 2 floats (a chunk is K and V)
      EXPECT_EQ(a2a_calls[i], 4 * c.layers);
      EXPECT_EQ(sent[i], 4 * chunk * c.layers);
      continue;
    }
    if (!ring) {
      EXPECT_EQ(cp_calls[i], 3 * c.layers);
      continue;
    }
    // Messages a block: the ring's members but this rank forward, all of them backward.
    const int steps = cp / inner - 1;
    EXPECT_EQ(a2a_calls[i], inner > 1 ? 4 * c.layers : 0);
    EXPECT_EQ(cp_calls[i], (2 * steps + 1) * c.layers);
    EXPECT_EQ(passes[i], 2 * c.layers);
    EXPECT_EQ(sent[i], (3 * steps + (inner > 1 ? 4 : 0)) * chunk * c.layers);
  }
}

TEST(GptShard, ContextParallelShardsGiveTheModelsLossAndGradients) {
  context_parallel_shards(2, 1, false);
  context_parallel_shards(4, 1, false);
}

// Ring attention: K,V blocks met one per step and merged by their logsumexp, dK,dV carried
// back round the ring; unfused (the probabilities kept) and FlashAttention, CP 2, 3 and 4 (3:
// sequence 16 is not divisible by 6, so 12), with TP and SP.
TEST(GptShard, RingContextParallelShardsGiveTheModelsLossAndGradients) {
  context_parallel_shards(2, 1, false, false, true);
  context_parallel_shards(3, 1, false, false, true);
  context_parallel_shards(4, 1, false, false, true);
  context_parallel_shards(3, 1, false, true, true);
  context_parallel_shards(4, 1, false, true, true);
  context_parallel_shards(2, 2, true, false, true);
  context_parallel_shards(2, 2, true, true, true);
}

// Hierarchical CP (a2a+p2p): all-to-alls over groups of 2 or 4 neighbours, the ring over the
// groups (2 or 3 members); unfused and FlashAttention, with TP and SP. The all-to-all level must
// divide a TP rank's heads, and leave a ring of 2 or more.
TEST(GptShard, HierarchicalContextParallelShardsGiveTheModelsLossAndGradients) {
  context_parallel_shards(4, 1, false, false, true, false, 2);
  context_parallel_shards(4, 1, false, true, true, false, 2);
  context_parallel_shards(6, 1, false, false, true, false, 2);
  context_parallel_shards(8, 1, false, true, true, false, 4);
  context_parallel_shards(4, 2, true, false, true, false, 2);
  context_parallel_shards(4, 2, true, true, true, false, 2);
  ShardSpec s;
  s.cp = 8;
  s.tp = 2;
  s.cp_comm = CpCommType::a2a_p2p;
  s.cp_a2a_size = 4;
  s.layers = 2;
  GptConfig c = small();
  c.seq = c.max_positions = 16;
  const Status bad = validate(c, s);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message,
            "--hierarchical-context-parallel-sizes: expected an all-to-all level that divides the "
            "attention heads per TP rank, 2 (a2a+p2p scatters the heads over it), got 4");
  for (int a : {8, 1, 3}) {  // no ring; no all-to-alls; not a divisor
    s.cp_a2a_size = a;
    EXPECT_EQ(validate(c, s).error().message,
              fmt::format("--hierarchical-context-parallel-sizes: expected an all-to-all level of "
                          "2 or more that divides the context-parallel size 8 beside a ring of 2 "
                          "or more, got {}",
                          a));
  }
}

// All-to-all CP (DeepSpeed-Ulysses): each rank's heads over the whole sequence; unfused and
// FlashAttention, CP 2 and 4, with TP and SP. CP must divide a TP rank's heads.
TEST(GptShard, AllToAllContextParallelShardsGiveTheModelsLossAndGradients) {
  context_parallel_shards(2, 1, false, false, false, true);
  context_parallel_shards(4, 1, false, false, false, true);
  context_parallel_shards(4, 1, false, true, false, true);
  context_parallel_shards(2, 2, true, false, false, true);
  context_parallel_shards(2, 2, true, true, false, true);
  ShardSpec s;
  s.cp = 4;
  s.tp = 2;
  s.cp_comm = CpCommType::a2a;
  s.layers = 2;
  const Status bad = validate(small(), s);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message,
            "--context-parallel-size: expected a divisor of the attention heads per TP rank, 2 "
            "(--cp-comm-type a2a scatters the heads over the CP ranks), got 4");
}

TEST(GptShard, ContextTimesTensorParallelShardsGiveTheModelsLossAndGradients) {
  context_parallel_shards(2, 2, false);
  context_parallel_shards(2, 2, true);
}

// FlashAttention's algorithm (no probabilities kept, the logsumexp instead, the scores
// recomputed in backward) gives the unfused kernels' loss and gradients: GPT (causal) and BERT
// (bidirectional) whole, and GPT under context parallelism alone and with TP and SP.
TEST(GptShard, FlashAttentionGivesTheUnfusedKernelsLossAndGradients) {
  for (const GptConfig& c : {small(), small_bert()}) {
    SCOPED_TRACE(c.arch == ModelArch::bert ? "bert" : "gpt");
    const Reference r = reference(c, 2);
    ShardSpec s;
    s.layers = c.layers;
    s.flash = true;
    GptShard m(c, s, 2, 1);
    std::vector<float> p(r.params.size()), g(r.params.size(), 0.0f);
    m.layout().from_full(r.params.data(), p.data());
    EXPECT_NEAR(m.forward(0, p.data(), r.tok.data(), nullptr, r.tgt.data()), r.loss, 1e-5);
    m.backward(0, p.data(), g.data(), nullptr);
    expect_close(g, r.grads, 1e-3, "flash gradients");
    // and they are not the same numbers by accident: a perturbed reference differs
    std::vector<float> q = p;
    q[q.size() / 2] += 0.5f;
    std::vector<float> g2(g.size(), 0.0f);
    m.forward(0, q.data(), r.tok.data(), nullptr, r.tgt.data());
    m.backward(0, q.data(), g2.data(), nullptr);
    EXPECT_NE(g2, g);
  }
  context_parallel_shards(2, 1, false, true);
  context_parallel_shards(2, 2, true, true);
}

// ---- mixture of experts ----

GptConfig small_moe(int experts, int k) {
  GptConfig c = small();
  c.experts = experts;
  c.experts_per_token = k;
  return c;
}

// A batch of the synthetic stream starting at sequence `first`.
void batch_of(const GptConfig& c, int batch, int first, std::vector<std::int32_t>& tok,
              std::vector<std::int32_t>& tgt) {
  const TokenSource data = TokenSource::synthetic(c.vocab, 3);
  tok.resize(static_cast<std::size_t>(batch) * c.seq);
  tgt.resize(tok.size());
  for (int i = 0; i < batch; ++i)
    data.sequence(first + i, c.seq, tok.data() + i * c.seq, tgt.data() + i * c.seq);
}

// One expert routed to every token (gate 1) is the dense MLP: with the dense model's MLP as
// expert 0 (and any router), a MoE shard's loss and gradients are gpt.h's Gpt's, an independent
// forward and backward.
TEST(GptShard, OneExpertIsTheDenseModel) {
  const GptConfig dense = small();
  const Reference r = reference(dense, 2);
  const GptConfig c = small_moe(1, 1);
  const ParamLayout dl(dense), ml(c);
  std::vector<float> full(static_cast<std::size_t>(ml.total()));
  init_params(ml, full.data(), 11);  // the router's values, whatever they are
  auto at = [](const ParamLayout& pl, std::string_view name, int layer) {
    for (const auto& t : pl.tensors())
      if (t.name == name && t.layer == layer) return t;
    ADD_FAILURE() << name;
    return pl.tensors().front();
  };
  for (const auto& t : dl.tensors()) {  // every dense tensor into its MoE place
    const std::string name = t.name.starts_with("mlp_") ? "expert0." + t.name : t.name;
    const ParamTensor m = at(ml, name, t.layer);
    ASSERT_EQ(m.size, t.size) << t.name;
    std::copy(r.params.begin() + t.offset, r.params.begin() + t.offset + t.size,
              full.begin() + m.offset);
  }
  ShardSpec s;
  s.layers = c.layers;
  GptShard m(c, s, 2, 1);
  std::vector<float> p(static_cast<std::size_t>(m.layout().total())), g(p.size(), 0.0f);
  m.layout().from_full(full.data(), p.data());
  EXPECT_NEAR(m.forward(0, p.data(), r.tok.data(), nullptr, r.tgt.data()), r.loss, 1e-5);
  m.backward(0, p.data(), g.data(), nullptr);
  // The dense gradients, tensor by tensor; the router's is 0 (a softmax over one logit).
  for (const auto& t : dl.tensors()) {
    const std::string name = t.name.starts_with("mlp_") ? "expert0." + t.name : t.name;
    std::vector<float> want(r.grads.begin() + t.offset, r.grads.begin() + t.offset + t.size);
    std::vector<float> full_g(full.size(), 0.0f), got;
    // The shard's gradient of this tensor: through the shard layout of a full buffer that is
    // the gradient itself (from_full maps full -> shard; find the tensor's place by value).
    const ParamTensor mt = at(ml, name, t.layer);
    std::vector<float> marker(full.size(), 0.0f);
    for (std::int64_t i = 0; i < mt.size; ++i) marker[static_cast<std::size_t>(mt.offset + i)] = 1;
    std::vector<float> where(p.size());
    m.layout().from_full(marker.data(), where.data());
    for (std::size_t i = 0; i < where.size(); ++i)
      if (where[i] == 1) got.push_back(g[i]);
    expect_close(got, want, 1e-3, t.name.c_str());
  }
}

// The MoE tests' model (4 experts, top-2), its parameters (seed 5) and a batch of 2.
struct MoeCase {
  GptConfig c = small_moe(4, 2);
  ParamLayout pl{c};
  std::vector<float> full;
  std::vector<std::int32_t> tok, tgt;
  MoeCase() : full(static_cast<std::size_t>(pl.total())) {
    init_params(pl, full.data(), 5);
    batch_of(c, 2, 0, tok, tgt);
  }
};

// The MoE backward against central differences of the loss (router, experts' weights and
// biases, the norm before them), for the largest-gradient elements of each tensor; with a
// load-balancing loss, of the cross-entropy plus it (its gradient reaches the router only
// through the probabilities: the counts are piecewise constant).
void expect_moe_gradients_are_finite_differences(float aux_coeff, double capacity = 0) {
  SCOPED_TRACE(fmt::format("aux {} capacity {}", aux_coeff, capacity));
  MoeCase mc;
  const GptConfig& c = mc.c;
  const ParamLayout& pl = mc.pl;
  std::vector<float>& full = mc.full;
  const std::vector<std::int32_t>&tok = mc.tok, &tgt = mc.tgt;
  ShardSpec s;
  s.layers = c.layers;
  s.moe_aux_loss_coeff = aux_coeff;
  s.moe_capacity_factor = capacity;
  GptShard m(c, s, 2, 1);
  auto objective = [&](const std::vector<float>& at) {
    const double ce = m.forward(0, at.data(), tok.data(), nullptr, tgt.data());
    const GptShard::MoeStats st = m.take_moe_stats();
    EXPECT_EQ(st.aux_blocks, aux_coeff > 0 ? c.layers : 0);
    EXPECT_EQ(st.routed.size(), static_cast<std::size_t>(c.layers * c.experts));
    return ce + st.aux_loss;
  };
  ASSERT_EQ(m.layout().total(), pl.total());
  std::vector<float> p(full.size()), g(full.size(), 0.0f);
  m.layout().from_full(full.data(), p.data());
  objective(p);
  m.backward(0, p.data(), g.data(), nullptr);
  // Shard offsets of each full tensor, by mapping an index buffer.
  std::vector<float> index(full.size());
  for (std::size_t i = 0; i < index.size(); ++i) index[i] = static_cast<float>(i);
  std::vector<float> to_full(p.size());
  m.layout().from_full(index.data(), to_full.data());
  int checked = 0;
  for (const auto& t : pl.tensors()) {
    if (!(t.name == "router.w" || t.name.starts_with("expert") || t.name == "norm_mlp.w")) continue;
    std::vector<std::size_t> at;  // shard positions of this tensor
    for (std::size_t i = 0; i < to_full.size(); ++i) {
      const auto f = static_cast<std::int64_t>(to_full[i]);
      if (f >= t.offset && f < t.offset + t.size) at.push_back(i);
    }
    ASSERT_EQ(static_cast<std::int64_t>(at.size()), t.size) << t.name;
    std::sort(at.begin(), at.end(),
              [&](std::size_t x, std::size_t y) { return std::abs(g[x]) > std::abs(g[y]); });
    for (std::size_t j = 0; j < 2; ++j) {
      const std::size_t i = at[j];
      const float keep = p[i], eps = 2e-3f;
      p[i] = keep + eps;
      const double up = objective(p);
      m.backward(0, p.data(), std::vector<float>(g.size()).data(), nullptr);
      p[i] = keep - eps;
      const double down = objective(p);
      m.backward(0, p.data(), std::vector<float>(g.size()).data(), nullptr);
      p[i] = keep;
      const double fd = (up - down) / (2.0 * eps);
      EXPECT_NEAR(fd, g[i], 0.03 * std::abs(g[i]) + 3e-4) << t.name << " layer " << t.layer;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2 * (2 * (1 + 1 + 4 * 4)));  // 2 layers: norm_mlp.w, router, 4 x 4 experts
}

TEST(GptShard, MoeGradientsAreTheLossesFiniteDifferences) {
  expect_moe_gradients_are_finite_differences(0);
  expect_moe_gradients_are_finite_differences(0.5f);
  expect_moe_gradients_are_finite_differences(0, 1.0);  // tokens dropped at the capacity
}

// Token dropping at the capacity (Megatron-LM's get_capacity and apply_router_token_dropping):
// - a capacity of E / k (ceil(n k / E x E / k) = n) drops nothing: the dropless model exactly;
// - a capacity factor of 1 drops sum_e max(0, c_e - ceil(n k / E)) of the routed rows (c_e
//   the routed counts), which changes the loss;
// - padding to the capacity adds only rows of weight 0: the same loss and gradients.
TEST(GptShard, CapacityDropsTokensAndPaddingAddsOnlyRowsOfWeightZero) {
  MoeCase mc;
  const GptConfig& c = mc.c;
  std::vector<float>& full = mc.full;
  const std::vector<std::int32_t>&tok = mc.tok, &tgt = mc.tgt;
  struct Run {
    float loss;
    std::vector<float> grads;
    std::vector<int> routed;
  };
  auto run = [&](double capacity, bool pad) {
    ShardSpec s;
    s.layers = c.layers;
    s.moe_capacity_factor = capacity;
    s.moe_pad_to_capacity = pad;
    GptShard m(c, s, 2, 1);
    std::vector<float> p(full.size());
    m.layout().from_full(full.data(), p.data());
    Run r;
    r.grads.assign(p.size(), 0.0f);
    r.loss = m.forward(0, p.data(), tok.data(), nullptr, tgt.data());
    m.backward(0, p.data(), r.grads.data(), nullptr);
    r.routed = m.take_moe_stats().routed;
    return r;
  };
  const Run dropless = run(0, false), roomy = run(2.0, false), roomy_padded = run(2.0, true);
  EXPECT_EQ(roomy.loss, dropless.loss);
  EXPECT_EQ(roomy.grads, dropless.grads);
  EXPECT_NEAR(roomy_padded.loss, dropless.loss, 1e-6);
  expect_close(roomy_padded.grads, dropless.grads, 1e-5, "padded to every token");
  const Run tight = run(1.0, false), padded = run(1.0, true);
  const int n = 2 * c.seq, capacity = n * 2 / 4;  // ceil(n k / E x 1)
  int dropped = 0;
  for (int v : dropless.routed) dropped += std::max(0, v - capacity);
  EXPECT_GT(dropped, 0);  // this routing overflows some expert
  EXPECT_NE(tight.loss, dropless.loss);
  EXPECT_NEAR(padded.loss, tight.loss, 1e-6);
  expect_close(padded.grads, tight.grads, 1e-5, "padded to the capacity");
  EXPECT_EQ(tight.routed, dropless.routed);  // the routing reported is before dropping
}

// The load-balancing loss's closed form: a router of zero weights gives every expert
// probability 1 / E, so each block's loss is coeff x E / (k n^2) x (k n) x (n / E) = coeff
// whatever the routing; and the routed rows per block sum to k n.
TEST(GptShard, LoadBalancingLossOfAUniformRouterIsItsCoefficient) {
  MoeCase mc;
  const GptConfig& c = mc.c;
  std::vector<float>& full = mc.full;
  for (const auto& t : mc.pl.tensors())
    if (t.name == "router.w") std::fill_n(full.begin() + t.offset, t.size, 0.0f);
  const std::vector<std::int32_t>&tok = mc.tok, &tgt = mc.tgt;
  ShardSpec s;
  s.layers = c.layers;
  s.moe_aux_loss_coeff = 0.01f;
  GptShard m(c, s, 2, 1);
  std::vector<float> p(full.size());
  m.layout().from_full(full.data(), p.data());
  m.forward(0, p.data(), tok.data(), nullptr, tgt.data());
  const GptShard::MoeStats st = m.take_moe_stats();
  EXPECT_EQ(st.aux_blocks, c.layers);
  EXPECT_NEAR(st.aux_loss, 0.01 * c.layers, 1e-7);
  for (int l = 0; l < c.layers; ++l) {
    const auto first = st.routed.begin() + l * c.experts;
    EXPECT_EQ(std::accumulate(first, first + c.experts, 0), 2 * 2 * c.seq);
  }
  EXPECT_TRUE(m.take_moe_stats().routed.empty());  // taken
}

// EP ranks on threads, each with its own batch (EP is a split of data parallelism): every
// rank's loss and dense gradients are one shard's on its batch; its experts' gradients are the
// sums over every rank's batch of one shard's gradients of those experts. The four
// all-to-allvs per block move k x tokens rows from (and back to) each rank.
void expert_parallel_shards(int ep, double capacity = 0, bool pad = false) {
  SCOPED_TRACE(fmt::format("ep {} capacity {}{}", ep, capacity, pad ? " padded" : ""));
  const GptConfig c = small_moe(4, 2);
  const ParamLayout pl(c);
  std::vector<float> full(static_cast<std::size_t>(pl.total()));
  init_params(pl, full.data(), 5);
  // Where each element of a shard lives in the full layout (from_full of an index buffer).
  std::vector<float> index(full.size());
  for (std::size_t i = 0; i < index.size(); ++i) index[i] = static_cast<float>(i);
  auto full_index = [&](const GptShard& m) {
    std::vector<float> f(static_cast<std::size_t>(m.layout().total()));
    m.layout().from_full(index.data(), f.data());
    return f;
  };
  // One shard of everything on each rank's batch: its gradients, in the full layout.
  std::vector<std::vector<float>> ref_full(static_cast<std::size_t>(ep));
  std::vector<float> ref_loss(static_cast<std::size_t>(ep));
  std::vector<std::vector<std::int32_t>> toks(static_cast<std::size_t>(ep)),
      tgts(static_cast<std::size_t>(ep));
  {
    ShardSpec s;
    s.layers = c.layers;
    s.moe_capacity_factor = capacity;
    s.moe_pad_to_capacity = pad;
    for (int r = 0; r < ep; ++r) {
      batch_of(c, 2, 2 * r, toks[static_cast<std::size_t>(r)], tgts[static_cast<std::size_t>(r)]);
      GptShard m(c, s, 2, 1);
      std::vector<float> p(full.size()), g(full.size(), 0.0f);
      m.layout().from_full(full.data(), p.data());
      ref_loss[static_cast<std::size_t>(r)] =
          m.forward(0, p.data(), toks[static_cast<std::size_t>(r)].data(), nullptr,
                    tgts[static_cast<std::size_t>(r)].data());
      m.backward(0, p.data(), g.data(), nullptr);
      const std::vector<float> at = full_index(m);
      std::vector<float>& rf = ref_full[static_cast<std::size_t>(r)];
      rf.assign(full.size(), 0.0f);
      for (std::size_t i = 0; i < at.size(); ++i) rf[static_cast<std::size_t>(at[i])] = g[i];
    }
  }
  ThreadGroup group(ep);
  std::vector<const std::vector<int>*> posted_rows(static_cast<std::size_t>(ep));
  std::vector<float> losses(static_cast<std::size_t>(ep));
  std::vector<std::vector<float>> grads(static_cast<std::size_t>(ep)),
      want(static_cast<std::size_t>(ep));
  std::vector<int> a2a(static_cast<std::size_t>(ep), 0);
  auto rank = [&](int me) {
    ShardSpec s;
    s.layers = c.layers;
    s.ep = ep;
    s.ep_rank = me;
    s.moe_capacity_factor = capacity;
    s.moe_pad_to_capacity = pad;
    GptShard m(c, s, 2, 1);
    const int el = c.experts / ep;
    m.set_expert_comm(
        [&, me](const float* send, const std::vector<int>& send_rows, float* recv,
                const std::vector<int>& recv_rows, int width, std::string_view name, int) {
          ++a2a[static_cast<std::size_t>(me)];
          std::int64_t mine = 0;
          for (int x :
               (name == "moe_dispatch" || name == "moe_combine_backward" ? send_rows : recv_rows))
            mine += x;
          const std::int64_t n = 2 * c.seq, k = c.experts_per_token;
          if (pad)  // E x the capacity, ceil(n k / E x factor), at most n
            EXPECT_EQ(mine, c.experts * std::min<std::int64_t>(
                                            static_cast<std::int64_t>(std::ceil(
                                                static_cast<double>(n * k) / c.experts * capacity)),
                                            n))
                << name;
          else if (capacity > 0)
            EXPECT_LE(mine, n * k) << name;
          else
            EXPECT_EQ(mine, n * k) << name;  // k x tokens rows
          group.posted[static_cast<std::size_t>(me)] = send;
          posted_rows[static_cast<std::size_t>(me)] = &send_rows;
          group.sync.arrive_and_wait();
          std::int64_t out = 0;
          for (int r = 0; r < ep; ++r) {  // rank r's block for me: after its blocks for 0..me-1
            const std::vector<int>& rows = *posted_rows[static_cast<std::size_t>(r)];
            std::int64_t from = 0;
            for (int q = 0; q < me; ++q) from += rows[static_cast<std::size_t>(q)];
            EXPECT_EQ(rows[static_cast<std::size_t>(me)], recv_rows[static_cast<std::size_t>(r)]);
            const float* src = group.posted[static_cast<std::size_t>(r)] + from * width;
            std::copy(
                src,
                src + static_cast<std::int64_t>(recv_rows[static_cast<std::size_t>(r)]) * width,
                recv + out * width);
            out += recv_rows[static_cast<std::size_t>(r)];
          }
          group.sync.arrive_and_wait();
        },
        [&, me, el](const std::vector<int>& send, std::vector<int>& recv, int) {
          posted_rows[static_cast<std::size_t>(me)] = &send;
          group.sync.arrive_and_wait();
          for (int r = 0; r < ep; ++r)
            for (int e = 0; e < el; ++e)
              recv[static_cast<std::size_t>(r * el + e)] = (*posted_rows[static_cast<std::size_t>(
                  r)])[static_cast<std::size_t>(me * el + e)];
          group.sync.arrive_and_wait();
        });
    std::vector<float> p(static_cast<std::size_t>(m.layout().total()));
    m.layout().from_full(full.data(), p.data());
    std::vector<float>& g = grads[static_cast<std::size_t>(me)];
    g.assign(p.size(), 0.0f);
    losses[static_cast<std::size_t>(me)] =
        m.forward(0, p.data(), toks[static_cast<std::size_t>(me)].data(), nullptr,
                  tgts[static_cast<std::size_t>(me)].data());
    m.backward(0, p.data(), g.data(), nullptr);
    // What this rank's gradients should be: its own batch's for the dense part, every batch's
    // sum for its experts.
    std::vector<float> mine(p.size()), all(p.size()), sum(full.size(), 0.0f);
    for (const auto& rf : ref_full)
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += rf[i];
    m.layout().from_full(ref_full[static_cast<std::size_t>(me)].data(), mine.data());
    m.layout().from_full(sum.data(), all.data());
    const Range ex = m.layout().experts();
    ASSERT_EQ(ex.offset, 0);
    want[static_cast<std::size_t>(me)] = mine;
    std::copy(all.begin(), all.begin() + ex.size, want[static_cast<std::size_t>(me)].begin());
  };
  on_threads(ep, rank);
  for (int me = 0; me < ep; ++me) {
    SCOPED_TRACE(me);
    EXPECT_NEAR(losses[static_cast<std::size_t>(me)], ref_loss[static_cast<std::size_t>(me)], 1e-5);
    expect_close(grads[static_cast<std::size_t>(me)], want[static_cast<std::size_t>(me)], 1e-3,
                 "gradients");
    EXPECT_EQ(a2a[static_cast<std::size_t>(me)], 4 * c.layers);
  }
}

TEST(GptShard, ExpertParallelShardsGiveEachBatchsLossAndGradients) {
  expert_parallel_shards(2);
  expert_parallel_shards(4);
  // Capacity is per rank's tokens (Megatron-LM's router sees its own): EP shards still give
  // each batch's loss; padded, every dispatch is E x the capacity rows.
  expert_parallel_shards(2, 1.0, false);
  expert_parallel_shards(2, 1.0, true);
  expert_parallel_shards(4, 0.5, true);
}

TEST(GptShard, ExpertParallelPlansAreChecked) {
  GptConfig c = small_moe(4, 2);
  ShardSpec s;
  s.layers = c.layers;
  s.ep = 3;
  EXPECT_EQ(validate(c, s).error().message,
            "--expert-model-parallel-size: expected a divisor of the experts (4), got 3");
  s.ep = 2;
  s.tp = 2;
  EXPECT_NE(validate(c, s).error().message.find("--tensor-model-parallel-size: expected 1"),
            std::string::npos);
  s.tp = 1;
  EXPECT_TRUE(validate(c, s).ok());
  EXPECT_FALSE(validate(small(), s).ok());  // a dense model has no experts to split
  c.experts_per_token = 5;
  EXPECT_FALSE(validate(c).ok());
}

}  // namespace
}  // namespace commscope::train
