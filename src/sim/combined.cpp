// Megatron-Core's combined 1F1B step (--overlap-moe-expert-parallel-comm; docs/workload.md,
// "EP all-to-all overlap"): one micro-batch's forward of a chunk and another micro-batch's
// backward of a chunk merged into one op list, in the order Megatron-Core issues them
// (TransformerModelChunkSchedulePlan.run and TransformerLayerSchedulePlan.run,
// megatron/core/models/common/model_chunk_schedule_plan.py). The simulator runs the list with
// the expert all-to-alls on a stream of their own, so each side's all-to-alls run beside the
// other side's compute as far as the dependencies allow.
#include <algorithm>
#include <array>
#include <limits>

#include "commscope/sim/simulator.h"
#include "commscope/util/result.h"

namespace commscope {

namespace {

constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

bool in_block(const Op& op) {
  return op.layer >= 0;
}
bool is_a2a(const Op& op) {
  return op.kind == OpKind::comm && op.group == CommGroup::expert;
}

// A list cut into contiguous pieces: the ops before the first block, each block's ops (from its
// first op to the next block's first), the ops after the last block's last op. A block's ops
// in five parts, cut at its first and its last run of expert collectives: in forward order the
// work before the dispatch (attention, router), the dispatch, the experts, the combine, the
// rest; in backward order the combine's backward, then the experts', the dispatch's, the
// attention's (Megatron-Core's pre_dispatch_computation, moe_dispatch, mlp, moe_combine).
// A block without them is all part 0.
struct Block {
  std::array<std::uint32_t, 6> cut{};  // part k: ops [cut[k], cut[k + 1])
};
struct Pieces {
  std::uint32_t pre_end = 0, post_begin = 0;
  std::vector<Block> blocks;
};

Pieces cut_list(const OpList& l) {
  Pieces p;
  const auto n = static_cast<std::uint32_t>(l.size());
  std::vector<std::int32_t> seen;
  std::uint32_t last = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (!in_block(l[i])) continue;
    last = i;
    if (std::find(seen.begin(), seen.end(), l[i].layer) != seen.end()) continue;
    seen.push_back(l[i].layer);
    if (!p.blocks.empty()) p.blocks.back().cut[5] = i;
    p.blocks.emplace_back().cut[0] = i;
  }
  if (p.blocks.empty()) {
    p.pre_end = p.post_begin = n;
    return p;
  }
  p.pre_end = p.blocks.front().cut[0];
  p.blocks.back().cut[5] = last + 1;
  p.post_begin = last + 1;
  for (Block& b : p.blocks) {
    const std::uint32_t begin = b.cut[0], end = b.cut[5];
    std::uint32_t first = end, first_end = end, second = end, second_end = end;
    for (std::uint32_t i = begin; i < end; ++i) {
      if (!is_a2a(l[i])) continue;
      if (first == end) {
        first = i;
        first_end = i + 1;
      } else if (i == first_end && second == end) {
        first_end = i + 1;
      } else if (second == end || i != second_end) {
        second = i;
        second_end = i + 1;
      } else {
        second_end = i + 1;
      }
    }
    if (first == end) {  // no all-to-all: all part 0
      b.cut = {begin, end, end, end, end, end};
    } else if (second == end) {
      b.cut = {begin, first, first_end, end, end, end};
    } else {
      b.cut = {begin, first, first_end, second, second_end, end};
    }
  }
  return p;
}

class Merger {
 public:
  Merger(const OpList& f, const OpList& b, bool delay_wgrad) : f_(f), b_(b), delay_(delay_wgrad) {
    fmap_.assign(f.size(), kNone);
    bmap_.assign(b.size(), kNone);
    bwgrad_.assign(b.size(), kNone);
    held_whole_.assign(b.size(), 0);
    split_.assign(b.size(), 0);
    out_.reserve(f.size() + b.size() + b.size() / 2);
  }
  void forward(std::uint32_t begin, std::uint32_t end) {
    for (std::uint32_t i = begin; i < end; ++i) {
      deps_.clear();
      for (auto d : f_.deps_of(i)) deps_.push_back(fmap_[d]);
      fmap_[i] = add(f_[i], {i, 0, 0});
    }
  }
  // The backward's ops [begin, end). With delay_wgrad (and `split`), each weight GEMM as its
  // data-gradient half here and its weight-gradient half in `held` for later (wgrad_later),
  // with the ops that wait for a held op.
  void backward(std::uint32_t begin, std::uint32_t end, bool split) {
    for (std::uint32_t i = begin; i < end; ++i) {
      const Op& op = b_[i];
      const bool data = is_reduction(op);
      bool waits_held = false;
      for (auto d : b_.deps_of(i))
        waits_held |= held_whole_[d] || (data && split_[d] && bwgrad_[d] == kNone);
      if (waits_held) {
        held_.push_back(i);
        held_whole_[i] = 1;
        continue;
      }
      if (split && delay_ && op.kind == OpKind::compute && op.compute == ComputeClass::gemm &&
          op.grad_params > 0) {
        Op dgrad = op;
        dgrad.flops *= 0.5;
        dgrad.mem_bytes *= 0.5;
        dgrad.grad_params = 0;
        bmap_[i] = add(dgrad, {i, 1, 1}, b_.deps_of(i));
        held_.push_back(i);  // its weight-gradient half
        split_[i] = 1;
        continue;
      }
      bmap_[i] = add(op, {i, 1, 0}, b_.deps_of(i));
    }
  }
  // The held weight gradients and what waits for them.
  void wgrad_later() {
    for (auto i : held_) {
      const Op& op = b_[i];
      if (split_[i]) {  // a GEMM's weight-gradient half, after its data gradient
        Op wgrad = op;
        wgrad.flops *= 0.5;
        wgrad.mem_bytes *= 0.5;
        deps_.assign(1, bmap_[i]);
        bwgrad_[i] = add(wgrad, {i, 1, 1});
      } else {
        bmap_[i] = add(op, {i, 1, 0}, b_.deps_of(i));
        held_whole_[i] = 0;
      }
    }
    held_.clear();
  }
  OpList take(std::vector<CombinedOp>& from) {
    from = std::move(from_);
    return std::move(out_);
  }

 private:
  std::uint32_t add(const Op& op, CombinedOp from, std::span<const std::uint32_t> deps) {
    deps_.clear();
    const bool data = is_reduction(op);
    for (auto d : deps) deps_.push_back(data && bwgrad_[d] != kNone ? bwgrad_[d] : bmap_[d]);
    return add(op, from);
  }
  std::uint32_t add(const Op& op, CombinedOp from) {
    for (auto d : deps_) CS_CHECK(d != kNone);  // every dependency is placed before its op
    from_.push_back(from);
    return out_.add(op, std::span<const std::uint32_t>(deps_));
  }

  const OpList &f_, &b_;
  const bool delay_;
  OpList out_;
  std::vector<CombinedOp> from_;
  std::vector<std::uint32_t> fmap_, bmap_, bwgrad_, deps_, held_;
  // Per backward op: held whole until wgrad_later; a GEMM split in two (its halves)
  std::vector<std::uint8_t> held_whole_, split_;
};

}  // namespace

OpList combined_list(const OpList& f, const OpList& b, bool delay_wgrad,
                     std::vector<CombinedOp>& from) {
  const Pieces fp = cut_list(f), bp = cut_list(b);
  Merger m(f, b, delay_wgrad);
  // The forward's pre-process (its embedding), the backward's post-process (the loss's and
  // the head's backward).
  m.forward(0, fp.pre_end);
  m.backward(0, bp.pre_end, false);
  const std::size_t pairs = std::min(fp.blocks.size(), bp.blocks.size());
  for (std::size_t k = 0; k < pairs; ++k) {
    const auto& fc = fp.blocks[k].cut;
    const auto& bc = bp.blocks[k].cut;
    // comm stream: combine_bwd | dispatch_fwd, dispatch_bwd | combine_fwd
    // comp stream: pre_dispatch_fwd | mlp_bwd, mlp_bwd_dw, mlp_fwd | pre_dispatch_bwd
    m.backward(bc[0], bc[2], false);  // the rest's backward, the combine's
    m.forward(fc[0], fc[1]);          // attention and router
    m.backward(bc[2], bc[3], true);   // the experts' backward (their data gradients)
    m.forward(fc[1], fc[2]);          // the dispatch
    m.wgrad_later();                  // the experts' weight gradients
    m.backward(bc[3], bc[4], false);  // the dispatch's backward
    m.forward(fc[2], fc[4]);          // the experts, the combine
    m.backward(bc[4], bc[5], true);   // attention's backward (its data gradients)
    m.forward(fc[4], fc[5]);          // the rest
    m.wgrad_later();                  // attention's weight gradients
  }
  for (std::size_t k = pairs; k < bp.blocks.size(); ++k)
    m.backward(bp.blocks[k].cut[0], bp.blocks[k].cut[5], false);
  for (std::size_t k = pairs; k < fp.blocks.size(); ++k)
    m.forward(fp.blocks[k].cut[0], fp.blocks[k].cut[5]);
  // The forward's post-process (head and loss), the backward's pre-process (the embedding's
  // backward) and what follows it.
  m.forward(fp.post_begin, static_cast<std::uint32_t>(f.size()));
  m.backward(bp.post_begin, static_cast<std::uint32_t>(b.size()), false);
  m.wgrad_later();
  return m.take(from);
}

}  // namespace commscope
