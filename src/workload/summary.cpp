// What describe reports of a workload: communication volume per group and collective,
// FLOPs per iteration, and memory per rank.
#include <algorithm>
#include <tuple>

#include "commscope/spec/framework_config.h"
#include "commscope/spec/placement.h"
#include "commscope/workload/params.h"
#include "commscope/workload/workload.h"

namespace commscope {

std::vector<CommVolume> comm_volume(const Workload& w, const Role& r) {
  std::vector<CommVolume> out;
  // The flex dispatcher's payload crosses the links once per copy (spec/placement.h).
  const Scenario& sc = w.scenario;
  const ForwardedCopies fc = forwarded_copies(sc, place_group(sc, CommGroup::expert));
  auto add = [&](const Op& op, std::int64_t runs) {
    if (op.kind != OpKind::comm || runs == 0) return;
    auto it = std::find_if(out.begin(), out.end(), [&](const CommVolume& v) {
      return v.group == op.group && v.collective == op.collective &&
             v.group_size == op.group_size && v.dtype == op.dtype &&
             v.fp8_weights == op.fp8_weights;
    });
    if (it == out.end()) {
      out.push_back({op.group, op.collective, op.group_size, op.dtype, op.fp8_weights, 0, 0, 0, 0});
      it = out.end() - 1;
    }
    it->calls += runs;
    it->messages += runs * std::max<std::int64_t>(op.messages, 1);
    it->bytes += op.bytes * static_cast<double>(runs);
    const double wire =
        op.tag == OpTag::ep_forwarded ? op.bytes * (fc.network + fc.nvlink) : op.wire_bytes();
    it->wire_bytes += wire * static_cast<double>(runs);
  };
  // Several pipeline schedules an iteration: each has its first forward and last backward, and
  // ends with the step's gradient reductions (its ops of phase backward).
  const std::int64_t rounds = sc.plan.pipeline_rounds;
  for (const Chunk& ch : r.chunks) {
    for (const Op& op : ch.forward.ops()) add(op, runs_per_iteration(op, w.microbatches, rounds));
    for (const Op& op : ch.backward.ops()) add(op, runs_per_iteration(op, w.microbatches, rounds));
    for (const Op& op : ch.forward_first.ops())
      if (op.first_microbatch_only) add(op, rounds);
  }
  for (const Op& op : r.step.ops()) add(op, op.phase == Phase::backward ? rounds : 1);
  std::sort(out.begin(), out.end(), [](const CommVolume& a, const CommVolume& b) {
    return std::tie(a.group, a.collective, a.dtype, a.fp8_weights) <
           std::tie(b.group, b.collective, b.dtype, b.fp8_weights);
  });
  return out;
}

std::string_view to_string(PatternCollective::Every e) {
  switch (e) {
    case PatternCollective::Every::microbatch:
      return "every micro-batch";
    case PatternCollective::Every::last_microbatch:
      return "last micro-batch";
    case PatternCollective::Every::iteration:
      return "once per iteration";
    case PatternCollective::Every::first_microbatch:
      return "first micro-batch's forward";
    case PatternCollective::Every::ahead_of_first_microbatch:
      return "ahead of its chunk's first forward";
    case PatternCollective::Every::schedule_end:
      return "end of each pipeline schedule";
    case PatternCollective::Every::schedule_first_microbatch:
      return "first micro-batch's forward of each pipeline schedule";
  }
  return "";
}

std::vector<PatternCollective> comm_pattern(const Workload& w, const Role& r) {
  std::vector<PatternCollective> out;
  const std::int64_t rounds = w.scenario.plan.pipeline_rounds;
  auto add = [&](const Op& op, PatternCollective::Every every) {
    if (op.kind != OpKind::comm) return;
    using E = PatternCollective::Every;
    const std::int64_t runs = every == E::microbatch ? w.microbatches
                              : every == E::last_microbatch || every == E::first_microbatch ||
                                      every == E::schedule_end ||
                                      every == E::schedule_first_microbatch
                                  ? rounds
                                  : std::int64_t{1};
    auto it = std::find_if(out.begin(), out.end(), [&](const PatternCollective& v) {
      return v.name == op.name && v.collective == op.collective && v.group == op.group &&
             v.span == op.span && v.per_node == op.per_node && v.group_size == op.group_size &&
             v.dtype == op.dtype && v.fp8_weights == op.fp8_weights && v.phase == op.phase &&
             v.every == every && v.messages == op.messages;
    });
    if (it == out.end()) {
      PatternCollective p;
      p.name = op.name, p.collective = op.collective, p.group = op.group, p.span = op.span;
      p.per_node = op.per_node;
      p.group_size = op.group_size, p.dtype = op.dtype, p.phase = op.phase, p.every = every;
      p.fp8_weights = op.fp8_weights;
      p.messages = op.messages;
      p.min_call = p.max_call = op.bytes;
      out.push_back(p);
      it = out.end() - 1;
    }
    it->calls += runs;
    it->bytes += op.bytes * static_cast<double>(runs);
    it->min_call = std::min(it->min_call, op.bytes);
    it->max_call = std::max(it->max_call, op.bytes);
  };
  for (const Chunk& ch : r.chunks)
    for (const OpList* list : {&ch.forward, &ch.backward})
      for (const Op& op : list->ops())
        add(op, op.last_microbatch_only ? PatternCollective::Every::last_microbatch
                                        : PatternCollective::Every::microbatch);
  const auto first = w.scenario.plan.megatron_gathers_ahead()
                         ? PatternCollective::Every::ahead_of_first_microbatch
                     : rounds > 1 ? PatternCollective::Every::schedule_first_microbatch
                                  : PatternCollective::Every::first_microbatch;
  for (const Chunk& ch : r.chunks)
    for (const Op& op : ch.forward_first.ops())
      if (op.first_microbatch_only) add(op, first);
  for (const Op& op : r.step.ops())
    add(op, rounds > 1 && op.phase == Phase::backward ? PatternCollective::Every::schedule_end
                                                      : PatternCollective::Every::iteration);
  return out;
}

double iteration_tokens(const Scenario& sc) {
  return static_cast<double>(sc.plan.global_batch) *
         static_cast<double>(sc.model.kind == ArchKind::t5
                                 ? sc.model.seq_length + sc.model.dec_seq()
                                 : sc.model.seq_length);
}

FlopCount iteration_flops(const Workload& w) {
  FlopCount f;
  const ParallelPlan& plan = w.scenario.plan;
  for (const Role& r : w.roles) {
    double model = 0, recompute = 0;
    for (const Chunk& ch : r.chunks)
      for (const OpList* list : {&ch.forward, &ch.backward}) {
        // A rank's routed-expert GEMMs take the busiest EP rank's rows (routing imbalance) or
        // rows padded to capacity, which its time must pay. Over all ranks, though, the
        // tokens x top-k rows are the useful work (model FLOPs: imbalance moves tokens between
        // ranks, padding adds none), and the mean rank's rows the work done (hardware FLOPs:
        // padded rows are computed on every rank). The router's rows are the rank's tokens.
        double tokens = 0;
        if (w.scenario.model.moe())  // (dense models skip the scan: predict's and plan's path)
          for (const Op& op : list->ops())
            if (op.name == "moe_router" && op.compute == ComputeClass::gemm) {
              tokens = static_cast<double>(op.m);
              break;
            }
        for (const Op& op : list->ops()) {
          if (!op.is_matmul()) continue;
          double runs =
              static_cast<double>(runs_per_iteration(op, w.microbatches, plan.pipeline_rounds));
          if (tokens > 0 && op.m > 0 && (op.name == "expert_in" || op.name == "expert_out")) {
            const double rows = static_cast<double>(op.m) / std::max(plan.expert_tp, 1);
            const double useful = tokens * w.scenario.model.experts_per_token;
            const double done = plan.moe_pad_to_capacity ? rows : std::min(rows, useful);
            (op.phase == Phase::recompute ? recompute : model) += op.flops * runs * useful / rows;
            recompute += op.flops * runs * (done - useful) / rows;
            continue;
          }
          if (op.compute == ComputeClass::attention && op.phase != Phase::recompute &&
              (op.name == "flash_attn" || op.name == "cross_flash_attn")) {
            // Model FLOPs as PaLM counts attention (4 s_q s_kv per q channel forward, twice
            // that backward, no causal discount) whatever the kernel runs; the kernel's own
            // FLOPs (causal half, backward's recompute) count as hardware FLOPs.
            const double palm = (list == &ch.forward ? 4.0 : 8.0) * static_cast<double>(op.m) *
                                static_cast<double>(op.n) * static_cast<double>(op.k);
            model += palm * runs;
            recompute += (op.flops - palm) * runs;
            continue;
          }
          // A product every TP rank runs whole on the same rows (the pooler; without sequence
          // parallelism the router and the latent down-projections, which run on the rank's
          // whole sequence) is useful once per TP group: its other copies are hardware FLOPs
          // (BERT's pooler counted TP times, found by checking, 2026-12-02).
          const bool tp_replicated =
              plan.tp > 1 &&
              (op.name == "pooler" ||
               (!plan.sequence_parallel &&
                (op.name == "moe_router" || op.name == "q_down" || op.name == "kv_down")));
          if (tp_replicated) {
            const double once = op.flops * runs / plan.tp;
            (op.phase == Phase::recompute ? recompute : model) += once;
            recompute += op.flops * runs - once;
            continue;
          }
          (op.phase == Phase::recompute ? recompute : model) += op.flops * runs;
        }
      }
    f.model += model * r.ranks;
    f.hardware += (model + recompute) * r.ranks;
  }
  return f;
}

std::int64_t inflight_microbatches(const Scenario& sc, int stage) {
  const auto& p = sc.plan;
  const std::int64_t m = p.microbatches_per_round();  // (each schedule's, where there are several)
  // Combined 1F1B (overlap_moe_ep_comm) runs each forward beside the previous micro-batch's
  // backward, so two micro-batches' activations are held at once.
  if (p.pp == 1) return p.overlap_moe_ep_comm ? std::min<std::int64_t>(2, m) : 1;
  // gradient accumulation frees each micro-batch's activations otherwise
  switch (p.schedule) {
    case Schedule::gpipe:
      return m;
    case Schedule::one_f_one_b:
      return std::min<std::int64_t>(p.pp - stage, m);
    case Schedule::interleaved:
      // Megatron's warm-up: (pp - stage - 1) x 2 + (v - 1) x g chunk-micro-batches, g the
      // interleaved group (PP unless PyTorch's schedule sets it; one more
      // with the combined 1F1B), plus the one in flight; counted in chunks.
      return std::min<std::int64_t>(m * p.virtual_stages,
                                    (p.pp - stage - 1) * 2LL +
                                        (p.virtual_stages - 1LL) * p.interleave_group_size() +
                                        (p.overlap_moe_ep_comm ? 2 : 1));
  }
  return 1;
}

Bytes stage_peak_activations(const Scenario& sc, int stage, const std::vector<Bytes>& chunk_bytes) {
  const auto& p = sc.plan;
  if (chunk_bytes.empty()) return Bytes();
  const auto n = static_cast<std::int64_t>(chunk_bytes.size());
  const std::int64_t inflight = inflight_microbatches(sc, stage);
  const bool even = std::all_of(chunk_bytes.begin(), chunk_bytes.end(),
                                [&](Bytes c) { return c == chunk_bytes.front(); });
  if (p.schedule != Schedule::interleaved || n != p.virtual_stages || even)
    return *std::max_element(chunk_bytes.begin(), chunk_bytes.end()) *
           static_cast<double>(inflight);
  // Megatron's interleaved schedule in order (Narayanan et al. SC'21 sec. 2.2; Megatron-LM's
  // forward_backward_pipelining_with_interleaving): forward k runs chunk (k mod gv) / g,
  // backward k chunk v - 1 - (k mod gv) / g, g the group (PP, or PyTorch's micro-batches per
  // round: ParallelPlan::interleave_group); the warm-up forwards, then one forward and one
  // backward each step, then the remaining backwards. A chunk-micro-batch's activations live
  // from its forward to its backward; the peak is the largest sum.
  const std::int64_t g = p.interleave_group_size();  // micro-batches per chunk turn
  const std::int64_t pv = g * n;
  const std::int64_t total = p.microbatches_per_round() * n;
  const std::int64_t warmup = std::min(total, inflight - 1);
  auto fwd = [&](std::int64_t k) { return chunk_bytes[static_cast<std::size_t>((k % pv) / g)]; };
  auto bwd = [&](std::int64_t k) {
    return chunk_bytes[static_cast<std::size_t>(n - 1 - (k % pv) / g)];
  };
  double held = 0, peak = 0;
  for (std::int64_t k = 0; k < warmup; ++k) peak = std::max(peak, held += fwd(k).value());
  // In the steady state what is held repeats every g x v steps (each chunk's forward and
  // backward come g times in any g x v consecutive steps): one period is enough.
  const std::int64_t steady = std::min(total - warmup, pv);
  for (std::int64_t k = 0; k < steady; ++k) {
    peak = std::max(peak, held += fwd(k + warmup).value());
    held -= bwd(k).value();
  }
  return Bytes(peak);
}

namespace {
// Activation bytes one block keeps under recompute mode rc (the plan's, or none or full in its
// place; block_activation_bytes).
Bytes block_bytes(const Scenario& sc, int layer, Recompute rc) {
  const ModelSpec& m = sc.model;
  const ParallelPlan& p = sc.plan;
  const double a = dtype_bytes(p.dtype());  // bytes per stored activation element
  const double t = p.tp;
  const double b = static_cast<double>(p.micro_batch);
  const double mask = m.dropout ? 1.0 : 0.0;  // a dropout mask is one byte per element
  const double h = static_cast<double>(m.hidden);
  const double q = static_cast<double>(m.q_dim()), kv = static_cast<double>(m.kv_dim());
  const double f = static_cast<double>(m.ffn), heads = static_cast<double>(m.heads);
  const BlockKind kind = block_kind(m, layer);
  // Under context parallelism a rank keeps its s / CP tokens of each sample.
  const double s =
      static_cast<double>(kind == BlockKind::encoder ? m.seq_length : m.dec_seq()) / p.cp;
  // Outside the tensor-parallel region activations are whole on every TP rank unless
  // sequence parallelism splits them.
  const double out_div = p.sequence_parallel ? t : 1.0;

  if (rc == Recompute::full) return Bytes(a * s * b * h / out_div);  // the block input
  if (rc == Recompute::op) {
    // torchtitan's op-level selective checkpointing (the builder's op_recompute_program): the
    // checkpoint's input and the cached outputs of what the policy saves: the odd products,
    // counted as the block's Linears run; FlashAttention's output and logsumexp; under sequence
    // parallelism the reduce-scatters' outputs; under EP the all-to-alls' outputs. Everything
    // else is replayed in backward.
    const bool flash = p.attention == AttentionKernel::flash;
    double outside = a * s * b * h;  // the block input
    double inside = 0;               // split over TP ranks (below)
    double whole = 0;                // on every TP rank in full
    int mm = 0;
    // One Linear's output, `width` a token; `split`: over TP (column-parallel), else whole (a
    // row-parallel product before its reduction, or a projection TP does not split).
    auto product = [&](double width, bool split) {
      if (++mm % 2 == 0) return;  // every second product is replayed
      (split ? inside : whole) += a * s * b * width;
    };
    if (m.mla()) {
      // wq_a (the query latent) and wq_b, or wq; wkv_a (the key/value latent and the rotary
      // key); wkv_b; wo. The latents are whole on every TP rank (as the builder runs them).
      const double qk = static_cast<double>(m.qk_nope_head_dim + m.qk_rope_head_dim);
      const double v = static_cast<double>(m.v_head_dim);
      if (m.q_lora_rank > 0) product(static_cast<double>(m.q_lora_rank), false);
      product(heads * qk, true);
      product(static_cast<double>(m.kv_lora_rank + m.qk_rope_head_dim), false);
      product(heads * (static_cast<double>(m.qk_nope_head_dim) + v), true);
      product(h, false);
      if (flash) inside += a * s * b * heads * v + 4.0 * b * heads * s;
    } else {
      product(q, true), product(kv, true), product(kv, true), product(h, false);  // wq wk wv wo
      if (flash) inside += a * s * b * q + 4.0 * b * heads * s;
    }
    // The MLP's w1, w3, w2 (a plain MLP's in, out); a MoE block's shared experts as one such
    // MLP, shared x moe_ffn wide (the router's gate leaves the count, the routed experts' grouped
    // GEMMs are not aten.mm).
    const bool moe = m.moe_layer(layer);
    const double fs = static_cast<double>(m.shared_experts) * static_cast<double>(m.expert_ffn());
    const bool mlp = !moe || m.shared_experts > 0;
    if (mlp) {
      const double width = moe ? fs : f;
      product(width, true);
      if (m.gated_mlp()) product(width, true);
      product(h, false);
    }
    if (p.sequence_parallel && t > 1) outside += (mlp ? 2.0 : 1.0) * a * s * b * h;
    double kept_rows = 0;
    if (moe) {
      // The token dispatch's and combine's outputs under EP (this rank's routed rows, h wide
      // each), expert TP's reduce-scatter output.
      const double routed = p.moe_routed_rows(s * b / out_div, m.experts_per_token, m.experts);
      kept_rows = ((p.ep > 1 ? 2.0 : 0.0) + (p.expert_tp > 1 ? 1.0 : 0.0)) * a * routed * h;
    }
    return Bytes(outside / out_div + inside / t + whole + kept_rows);
  }
  // FlashAttention's own saved tensors (the logsumexp, and under FP8 its bf16 output beside the
  // projection's FP8 input), unless Megatron-Core's selective recompute replays the kernel and
  // keeps only the checkpoint's inputs, Q, K and V.
  const bool flash_saved =
      p.attention == AttentionKernel::flash && !(rc == p.recompute && p.replays_fused_attention());
  // FP8 (Transformer Engine): the inputs its Linear layers save for backward are the FP8 casts,
  // 1 byte per element; the rest stays in the plan's precision.
  const double g = p.fp8 ? 1.0 : a;  // bytes per saved GEMM input

  // Selective recompute's modules (Megatron-Core's --recompute-modules): what they replay is
  // not kept.
  const std::uint8_t sel = rc == Recompute::selective ? p.recompute_modules : 0;
  const bool norms_kept = !(sel & recompute_module::layernorm);  // the pre-norms' outputs

  double outside = 0, inside = 0, whole = 0;  // whole: on every TP rank in full
  auto attention = [&](double sq, double skv, bool keep_core) {
    if (norms_kept) outside += g * sq * b * h;                 // norm output = QKV input
    inside += a * (sq * b * q + skv * b * kv);                 // Q and K
    if (m.qk_norm) inside += a * (sq * b * q + skv * b * kv);  // and the per-head norms' inputs
    inside += a * skv * b * kv;                                // V
    if (keep_core) {
      double scores = b * heads * sq * skv;
      inside += a * scores;                           // softmax output
      inside += m.dropout ? (mask + a) * scores : 0;  // dropout mask and output
    }
    // FlashAttention: the logsumexp (fp32, per row and head), no s x s tensor; its output O,
    // which its backward reads, is the output projection's input (kept again in FP8 under TE).
    if (flash_saved) inside += 4.0 * b * heads * sq + (p.fp8 ? a * sq * b * q : 0.0);
    inside += g * sq * b * q;      // input of the output projection
    outside += mask * sq * b * h;  // dropout mask after the projection
    outside += a * sq * b * h;     // norm input
  };
  // Latent attention (DeepSeek-V3's MLA, Megatron-Core's MLASelfAttention, as the workload
  // writes it): the down-projections' input (the norm output); their outputs, replicated on
  // every TP rank, kept as the latent norms' inputs and the up-projections' inputs (the query
  // latent q_lora_rank wide, the key/value latent kv_lora_rank wide) and the rotary key
  // (qk_rope_head_dim); split by heads, the up-projections' outputs Q, K (qk channels a head)
  // and V (v channels), which the mla_up_proj module recomputes instead; O (v channels a head) as
  // the output projection's input; under flash the logsumexp.
  auto attention_mla = [&](double sq, bool keep_core) {
    const double qk = static_cast<double>(m.qk_nope_head_dim + m.qk_rope_head_dim);
    const double v = static_cast<double>(m.v_head_dim);
    if (norms_kept) outside += g * sq * b * h;
    // the latents and the rotary key: the rank's own tokens, a shard under SP (the duplicated
    // down-projections run on it, and the up-projections keep their input's shard, gathered
    // again for the weight gradient)
    outside += (a + g) * sq * b * static_cast<double>(m.q_lora_rank + m.kv_lora_rank) +
               a * sq * b * static_cast<double>(m.qk_rope_head_dim);
    if (!(sel & recompute_module::mla_up_proj)) inside += a * sq * b * heads * (2.0 * qk + v);
    if (keep_core) {
      const double scores = b * heads * sq * sq;
      inside += a * scores + (m.dropout ? (mask + a) * scores : 0);
    }
    if (flash_saved) inside += 4.0 * b * heads * sq + (p.fp8 ? a * sq * b * heads * v : 0.0);
    inside += g * sq * b * heads * v;
    outside += mask * sq * b * h + a * sq * b * h;  // dropout mask; norm input
  };
  const bool keep_core =
      p.attention != AttentionKernel::flash &&
      !((sel & recompute_module::core_attn) && p.core_attention_is_recomputable());
  if (m.mla())
    attention_mla(s, keep_core);  // CP: each rank's queries over its own chunk (below)
  else
    attention(s, s, keep_core);
  // Ring attention: each local query row spans all CP chunks of keys (standard attention's
  // scores, softmax and dropout over s / CP x s).
  if (keep_core && p.cp > 1)
    inside += (a + (m.dropout ? mask + a : 0)) * b * heads * s * s * (p.cp - 1);
  if (kind == BlockKind::cross_decoder) attention(s, static_cast<double>(m.seq_length), keep_core);
  // MLP: norm input, MLP input, activation input and output (gated: the two branches, 2f, and
  // the product, f), dropout mask.
  // A shared pre-norm (Falcon-7B): no norm of its own, and its output, the MLP's input, is the
  // QKV's, kept once (under FP8 each Linear keeps its own cast of it).
  if (m.shared_norm)
    outside += (norms_kept && p.fp8 ? g * s * b * h : 0.0) + mask * s * b * h;
  else
    outside += a * s * b * h + (norms_kept ? g * s * b * h : 0.0) + mask * s * b * h;
  // Sandwich norms (Gemma 2): each post-norm keeps its input, the sublayer's output.
  if (m.post_norms) outside += 2.0 * a * s * b * h;
  if (m.moe_layer(layer)) {
    // MoE: the router's fp32 logits and the dispatched tokens on this rank (its tokens x top-k
    // x the load factor), each with the expert's input, its activation input and output
    // (gated: both branches, 2f, and the product, f; the moe_act module recomputes the output),
    // gathered over expert TP; shared experts as a dense MLP of shared x moe_ffn.
    const double fe = static_cast<double>(m.expert_ffn());
    const double routed = p.moe_routed_rows(s * b / out_div, m.experts_per_token, m.experts);
    const double act = (m.gated_mlp() ? 2.0 : 1.0) + (sel & recompute_module::moe_act ? 0.0 : 1.0);
    outside += 4.0 * s * b * m.experts;
    inside += t * (a * routed * h * p.expert_tp + act * a * routed * fe);
    inside += (m.gated_mlp() ? 3.0 : 2.0) * a * s * b * fe * m.shared_experts;
  } else if (!(sel & recompute_module::mlp)) {
    // The activation's input (gated: the up-projection's 2f-wide output, both branches, which
    // the fused SwiGLU/GeGLU of Megatron-LM and Transformer Engine saves whole and from which
    // its backward recomputes silu/gelu; GELU: its f-wide input) and the output projection's
    // input (the activation's output or the gated product; FP8 under TE). The mlp module
    // recomputes them from the MLP's input.
    inside += (m.gated_mlp() ? 2.0 : 1.0) * a * s * b * f + g * s * b * f;
  }
  return Bytes(outside / out_div + inside / t + whole);
}
}  // namespace

Bytes block_activation_bytes(const Scenario& sc, int layer, std::optional<bool> full) {
  const Recompute planned = sc.plan.recompute;
  // full false under full recompute: a block that --recompute-method block leaves alone
  const Recompute rc = !full                        ? planned
                       : *full                      ? Recompute::full
                       : planned == Recompute::full ? Recompute::none
                                                    : planned;
  return block_bytes(sc, layer, rc);
}

Bytes block_replay_bytes(const Scenario& sc, int layer, std::optional<bool> full) {
  return block_bytes(sc, layer, Recompute::none) - block_activation_bytes(sc, layer, full);
}

GemmWeights role_gemm_weights(const Scenario& sc, const Role& r) {
  const ModelSpec& m = sc.model;
  const ParallelPlan& p = sc.plan;
  const int expert_ranks = p.ep * p.expert_tp;
  GemmWeights g;
  auto add_block = [&](int l) {
    const double w = block_sharded_params(m, l, p.tp, expert_ranks);
    g.total += w;
    g.largest = std::max(g.largest, w);
    g.experts += static_cast<double>(block_expert_params(m, l)) / expert_ranks;
  };
  for (const Chunk& ch : r.chunks)
    for (int l = ch.first_layer; l < ch.first_layer + ch.layers; ++l) add_block(l);
  if (r.stage == p.pp - 1)  // the MTP blocks (last stage)
    for (int depth = 0; depth < p.mtp_layers; ++depth) add_block(mtp_block_layer(m, depth));
  return g;
}

MemoryBreakdown memory_per_rank(const Workload& w, const Role& r) {
  const Scenario& sc = w.scenario;
  const ParallelPlan& p = sc.plan;
  const ModelSpec& m = sc.model;
  const double P = static_cast<double>(r.params);
  // DP x CP: the ranks a ZeRO shard is cut over; under FSDP's HSDP its shard group.
  const double d = p.hsdp() ? hsdp_shard_ranks(p, sc.gpus_per_node) : p.grad_dp();
  const bool mixed = p.precision != Precision::fp32;
  // Bytes per parameter (ZeRO paper, mixed-precision Adam: 2 + 2 + 12; fp32 Adam: 4 + 4 + 8).
  // Megatron-LM keeps its gradients in a buffer of the type it reduces them in: fp32 under
  // bf16 (arguments.py sets accumulate_allreduce_grads_in_fp32), bf16 under
  // --grad-reduce-in-bf16 (--grad-comm-dtype bf16: DistributedDataParallelConfig
  // grad_reduce_in_fp32 false).
  const double gb = p.framework == Framework::megatron ? dtype_bytes(megatron_grad_buffer_dtype(p))
                    : mixed                            ? 2
                                                       : 4;
  const double wb = mixed ? 2 : 4, ob = p.optimizer_state_bytes();
  // (--fsdp-grad-sync step keeps FULL_SHARD's weights whole from a backward to the next
  // forward's end, as SHARD_GRAD_OP does)
  const bool sharded_weights = p.weights_sharded();
  MemoryBreakdown mem;
  mem.weights = Bytes(P * wb / (sharded_weights ? d : 1));
  mem.gradients = Bytes(P * gb / (p.zero >= 2 ? d : 1));
  mem.optimizer = Bytes(P * ob / (p.zero >= 1 ? d : 1));
  // The routed experts' shards are cut over the expert-data group (FSDP's efsdp mesh, as
  // torchtitan shards them; ZeRO-3 and ZeRO-2 reach experts only through FSDP), under HSDP over
  // its shard group.
  const double E = static_cast<double>(r.expert_params),
               ed = hsdp_expert_shard_ranks(p, sc.gpus_per_node);
  if (E > 0 && sharded_weights) mem.weights = Bytes((P - E) * wb / d + E * wb / ed);
  if (E > 0 && p.zero >= 2) mem.gradients = Bytes((P - E) * gb / d + E * gb / ed);
  // FSDP reducing once a step (--fsdp-grad-sync) keeps every unit's unsharded gradient until
  // the reduction, accumulated over the micro-batches in the reduce type where one is set
  // (FSDP2's FSDPParam.unsharded_accumulated_grad, to_accumulated_grad_if_needed).
  if (p.fsdp_whole_gradients())
    mem.gradients = Bytes(P * (p.grad_comm_dtype ? dtype_bytes(*p.grad_comm_dtype) : gb));
  // ZeRO++ hpZ: the secondary copy of the weights, sharded over zero_hpz_partition_size ranks.
  if (p.zero >= 3 && p.zeropp_hpz > 1) mem.weights += Bytes(P * wb / p.zeropp_hpz);
  // DeepSpeed's parameter offload: the rank's 16-bit partition lives in host memory
  // (offload_host_bytes); what the GPU holds of the weights is the coordinator's gathered
  // buffers, counted below. (Persistent parameters, at most stage3_param_persistence_threshold
  // elements each, stay gathered on the GPU with or without it; commscope counts neither.)
  if (p.offload_param) mem.weights = Bytes(0);
  // FSDP's CPU offload: the shard on the host (what a strategy keeps gathered stays).
  if (p.fsdp_cpu_offload && sharded_weights) mem.weights = Bytes(0);
  if (p.fp8) {
    // Transformer Engine keeps an FP8 copy of every GEMM weight of the blocks beside the
    // bf16/fp16 weights, cast once per iteration and reused by every micro-batch (Megatron
    // passes is_first_microbatch, which makes TE cache it). TE 2.x quantizes a weight for
    // both its uses (module/linear.py: rowwise and columnwise usage), so the copy holds the
    // FP8 data and its transpose (Hopper) or columnwise copy (MXFP8): 2 bytes a weight. Under
    // ZeRO-3 / FSDP a block's weights exist whole only while its unit is gathered: the cast is
    // made from the gathered weights and freed with them (Megatron-FSDP's
    // keep_fp8_transpose_cache defaults to false; TE caches nothing without
    // is_first_microbatch), so only the blocks gathered at once hold one: the current and the
    // prefetched, as the gather buffers below count them.
    // Under --fp8-param-gather the GEMM weights are FP8 parameters themselves (1 byte, sharded
    // as the weights are, in place of the 16-bit ones) with the transpose or columnwise copy
    // beside them (1 byte, whole, or only for the gathered blocks under ZeRO-3).
    const GemmWeights g = role_gemm_weights(sc, r);
    const double held = sharded_weights ? std::min(g.total, 2 * g.largest) : g.total;
    if (!p.fp8_param_gather) {
      mem.weights += Bytes(2 * held);
    } else {
      const double own = sharded_weights ? (g.total - g.experts) / d + g.experts / ed : g.total;
      mem.weights = Bytes(mem.weights.value() - (wb - 1) * own + held);
    }
  }
  if (E > 0 && p.zero >= 1)  // expert optimizer states: over the expert-DP group
    mem.optimizer = Bytes((P - E) * ob / d + E * ob / ed);
  // ZeRO-Offload: the optimizer states live in host memory, and under ZeRO-2/3 so does the
  // gradient shard, each bucket's part copied out as it is reduced and freed on the GPU
  // (DeepSpeed sets the parameter's .grad to None); offload_host_bytes counts them.
  if (p.offload_optimizer) {
    mem.optimizer = Bytes(0);
    if (p.zero >= 2) mem.gradients = Bytes(0);
  }
  // FSDP's CPU offload: the optimizer's states and the reduced gradient shards on the host (the
  // unsharded gradients FSDP keeps until a later reduction stay on the GPU).
  if (p.fsdp_cpu_offload) {
    mem.optimizer = Bytes(0);
    if (!p.fsdp_whole_gradients()) mem.gradients = Bytes(0);
  }
  // Megatron's HybridDeviceOptimizer: its fraction's states on the host; the rest keeps an fp32
  // copy and its moments on the GPU (param_update_in_fp32). The gradient buffer and the 16-bit
  // parameters stay.
  if (p.optimizer_cpu_offload)
    mem.optimizer = Bytes(mem.optimizer.value() * (1 - p.optimizer_offload_fraction));

  // Activations: each chunk's blocks per micro-batch, the first chunk of the first stage with
  // the embedding dropout mask and the last chunk of the last stage with the loss's tensors,
  // held as the schedule keeps micro-batches in flight (stage_peak_activations).
  const double a = dtype_bytes(p.dtype());
  const double b = static_cast<double>(p.micro_batch), h = static_cast<double>(m.hidden);
  const double out_div = p.sequence_parallel ? p.tp : 1;
  std::vector<Bytes> chunk_bytes;
  chunk_bytes.reserve(r.chunks.size());
  // Activation offloading (PP 1): the first N layers' saved activations live in host memory;
  // Transformer Engine's double-buffered offload handler holds at most two of them on the GPU
  // while they are copied out or back.
  const int offloaded = p.cpu_offload_layers;
  // The largest replay: a block's (block_replay_bytes), or under --recompute-method uniform
  // with N > 1 a group's, whose N blocks replay at once and whose later blocks keep nothing.
  Bytes replay;
  for (const Chunk& ch : r.chunks) {
    Bytes c, largest_offloaded, group;
    int staged = 0;
    for (int l = ch.first_layer; l < ch.first_layer + ch.layers; ++l) {
      const int local = l - ch.first_layer;
      const bool full_at = p.full_recompute_at(local);
      const bool keeps_input = p.keeps_block_input(local);
      Bytes layer = block_activation_bytes(sc, l, full_at);
      if (p.recompute != Recompute::none) {
        // block_replay_bytes, with the bytes kept computed once
        const Bytes replayed =
            block_bytes(sc, l, Recompute::none) - (keeps_input ? layer : Bytes());
        group = keeps_input ? replayed : group + replayed;
        replay = std::max(replay, group);
      }
      if (!keeps_input) layer = Bytes();
      if (l < offloaded) {
        largest_offloaded = std::max(largest_offloaded, layer);
        staged = std::min(staged + 1, 2);
      } else {
        c += layer;
      }
    }
    c += largest_offloaded * static_cast<double>(staged);
    chunk_bytes.push_back(c);
  }
  // What the loss makes beside what it keeps, once, at the start of its backward (one
  // micro-batch's logits of the vocabulary shard):
  // - Megatron's vocab-parallel cross entropy casts the logits to fp32
  //   (`vocab_parallel_logits.float()` in megatron/core/tensor_parallel/cross_entropy.py) while
  //   the caller still holds them in the compute type; its backward writes the gradient into
  //   the saved softmax and casts it back beside it: a bytes a logit (none in fp32, where the
  //   cast is no copy);
  // - PyTorch's cross entropy is log_softmax then nll_loss (ATen's cross_entropy_loss); in
  //   backward nll_loss's gradient (fp32, the log-softmax's shape) and then log_softmax's are
  //   made while the saved log-softmax is held: 8 bytes a logit. (Its forward holds less: the
  //   compute-type logits, their fp32 copy and the log-softmax, 4 + a bytes beside what it
  //   keeps.)
  // - FlashAttention's cross entropy makes its gradient beside the logits it keeps: a bytes;
  // - the fused cross entropy writes its gradient in place: nothing.
  double loss_transient = 0;
  if (!chunk_bytes.empty()) {
    if (r.stage == 0 && m.dropout)  // embedding dropout mask
      chunk_bytes.front() += Bytes(static_cast<double>(m.seq_length) / p.cp * b * h / out_div);
    if (r.stage == p.pp - 1) {
      const double s = static_cast<double>(m.dec_seq()) / p.cp;
      const double logits = s * b * static_cast<double>(m.vocab) / p.tp;  // of the vocab shard
      // The final norm's input and the LM head's input (both split by SP: the norm runs in the
      // sequence-parallel region and the column-parallel head saves its local input and
      // re-gathers it in backward), and the fp32 softmax of the vocabulary shard that
      // Megatron's vocab-parallel cross entropy saves (exp of the fp32 logits, s x b x V / t),
      // or PyTorch's fp32 log-softmax; fused (--cross-entropy-loss-fusion) or FlashAttention's,
      // the logits in the compute type (the fused loss writes its gradient in place).
      double kept = 4.0;  // bytes a logit the loss keeps
      switch (p.cross_entropy) {
        case CrossEntropy::vocab_parallel:
          loss_transient = a < 4.0 ? a * logits : 0.0;
          break;
        case CrossEntropy::torch:
          loss_transient = 8.0 * logits;
          break;
        case CrossEntropy::flash_attn:
          kept = a;
          loss_transient = a * logits;
          break;
        case CrossEntropy::fused:
          kept = a;
          break;
      }
      const Bytes head = Bytes(2.0 * a * s * b * h / out_div + kept * logits);
      chunk_bytes.back() += head;
      // Multi-token prediction, per depth: its block's activations; the inputs of enorm and
      // hnorm (the embedding's output and the previous hidden states) and the projection's
      // 2h-wide input (its sequence shard under SP, re-gathered in backward); and its own
      // final norm, head and loss, as the model's.
      for (int depth = 0; depth < p.mtp_layers; ++depth)
        chunk_bytes.back() += block_activation_bytes(sc, mtp_block_layer(m, depth)) +
                              Bytes(4.0 * a * s * b * h / out_div) + head;
    }
  }
  // Beside what the stage holds at its peak, one transient at a time: the loss's, or later in
  // the same backward a block's replayed activations, alive from its replay to its backward's
  // end.
  mem.activations =
      stage_peak_activations(sc, r.stage, chunk_bytes) + std::max(Bytes(loss_transient), replay);

  // The largest block on this rank: its parameters (the dense part over TP, the routed experts
  // over EP x expert TP) and, gathered, its bytes in the parameters' type (its GEMM weights in
  // 1 byte under --fp8-param-gather). Walked only where a buffer below needs it.
  const double elem = dtype_bytes(p.dtype());
  struct LargestBlock {
    double params = 0, gathered = 0;
  };
  auto largest_block = [&] {
    LargestBlock big;
    for (const Chunk& ch : r.chunks)
      for (int l = ch.first_layer; l < ch.first_layer + ch.layers; ++l) {
        const double whole =
            static_cast<double>(block_params(m, l, p.tp) - block_expert_params(m, l) / p.tp +
                                block_expert_params(m, l) / (p.ep * p.expert_tp));
        const double fp8 =
            p.fp8_param_gather ? block_sharded_params(m, l, p.tp, p.ep * p.expert_tp) : 0;
        big.params = std::max(big.params, whole);
        big.gathered = std::max(big.gathered, elem * (whole - fp8) + fp8);
      }
    return big;
  };

  // Communication buffers: a DDP bucket; DeepSpeed's reduce and all-gather buckets; ZeRO-3's
  // gathered parameters (DeepSpeed's coordinator peak, else the current and prefetched block);
  // pipeline send and receive buffers. Megatron-LM has no buckets of its own: its gradient
  // reductions and parameter gathers run in place in the contiguous gradient and parameter
  // buffers (megatron/core/distributed/param_and_grad_buffer.py), which gradients and weights
  // count.
  const bool megatron = p.framework == Framework::megatron;
  Bytes buffers;
  if (p.dp > 1 && p.framework == Framework::fsdp) {
    // PyTorch FSDP has no buckets. Its units are gathered whole: the root unit (what no block's
    // unit holds, or the whole stage under --fsdp-wrap model) from its forward to the end of its
    // backward, as FSDP does not reshard the root after forward (FSDP2's lazy init leaves the
    // root's post-forward mesh unset; FSDP1 keeps the root unsharded), and under FULL_SHARD or
    // HYBRID_SHARD a block's unit and the one prefetched beside it. (SHARD_GRAD_OP and the kept
    // parameters of --fsdp-grad-sync step count the weights whole already.)
    const LargestBlock big = p.fsdp_wrap == FsdpWrap::block ? largest_block() : LargestBlock{};
    if (sharded_weights)
      buffers += Bytes(elem * static_cast<double>(r.fsdp_root_params) + 2.0 * big.gathered);
    // A unit's gradients are reduced as its backward ends, from a copy in the reduce type:
    // FSDP2's foreach_reduce copies the unit's unsharded gradients (the parameters' type) into
    // its reduce_scatter_input, frees them and holds that input until the next unit's
    // reduction; FSDP1's _reduce_grad casts the flat gradient to the reduce type. So while a
    // block's backward runs, its replay included, the previous block's reduce input and the
    // block's own unsharded gradients are alive (these counted whole already where FSDP keeps
    // every gradient whole: NO_SHARD, or accumulating unsharded). The transient beside the
    // loss's or the replay's (counted as activations above) is the rest.
    // Bytes a parameter of a unit's reduction: the reduce-type copy, and the unsharded gradients
    // unless counted whole already.
    const double rb = p.grad_comm_dtype ? dtype_bytes(*p.grad_comm_dtype) : gb;
    const double reducing = rb + (p.zero < 2 || p.fsdp_whole_gradients() ? 0.0 : gb);
    const Bytes block_reduce = std::max(
        Bytes(), replay + Bytes(big.params * reducing) - std::max(Bytes(loss_transient), replay));
    buffers += block_reduce;
    // The root unit is reduced last, once its backward has ended; without pipelining no
    // activation is held then, and its reduction (the same copy, the whole stage's under
    // --fsdp-wrap model) stands where they stood: the peak when it outweighs them. (Under
    // pipelining other micro-batches' activations may still be held: not counted.)
    if (p.pp == 1) {
      const Bytes root_reduce = Bytes(static_cast<double>(r.fsdp_root_params) * reducing);
      buffers += std::max(Bytes(), root_reduce - (mem.activations + block_reduce));
    }
  } else if (p.dp > 1 && !megatron) {
    if (p.zero == 0) buffers += Bytes(std::min(p.ddp_bucket.value(), P * gb));
    if (p.zero == 1 || p.zero == 2)
      buffers += Bytes(elem * (std::min<double>(static_cast<double>(p.zero_reduce_bucket), P) +
                               std::min<double>(static_cast<double>(p.zero_allgather_bucket), P)));
    if (p.zero == 3 && r.zero3_live_params > 0) {
      // DeepSpeed's coordinator: what its replay held gathered at once (bounded by
      // stage3_max_live_parameters beyond the module in use).
      buffers += Bytes(elem * static_cast<double>(r.zero3_live_params));
    } else if (p.zero == 3 && sharded_weights) {
      buffers += Bytes(2.0 * largest_block().gathered);  // the largest block, and the next
    }
    if (p.zero == 3 && p.framework == Framework::deepspeed && p.contiguous_gradients) {
      // DeepSpeed ZeRO-3's gradient bucket (stage3.py's __ipg_bucket_flat_buffer, or under
      // 0.3-0.5 the ipg_buffer its backward allocates, two with overlap_comm), at most the
      // parameters as the ZeRO-1/2 buckets above.
      const double n = p.zero3_double_reduce_bucket && p.overlap_grad_reduce ? 2.0 : 1.0;
      buffers += Bytes(n * elem * std::min<double>(static_cast<double>(p.zero_reduce_bucket), P));
    }
  }
  if (p.pp > 1) {
    const double tokens =
        static_cast<double>(m.seq_length +
                            (m.encoder_layers > 0 && m.decoder_layers > 0 ? m.dec_seq() : 0)) /
        p.cp;
    buffers += Bytes(2.0 * a * b * tokens * h / out_div);
  }
  mem.comm_buffers = buffers;
  return mem;
}

}  // namespace commscope
