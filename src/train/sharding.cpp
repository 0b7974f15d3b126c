// The sharding layout (sharding.h), derived from the workload once.
#include "commscope/train/sharding.h"

#include <set>

#include <fmt/format.h>

namespace commscope::train {

Sharding::Held Sharding::held(int r) const {
  const std::int64_t all = part.total, mine = part.size(r);
  Held h;
  h.optimizer = 2 * owned(r);  // AdamW's two moments
  switch (strategy) {
    case Strategy::ddp:
      h.params = all;
      h.grads = all;
      break;
    case Strategy::zero1:
      h.params = all + mine;  // the full copy for forward and backward, the fp32 shard
      h.grads = all + mine;   // the accumulation buffer, the reduced shard
      break;
    case Strategy::zero2:
      h.params = all + mine;
      h.grads = mine;
      break;
    case Strategy::zero3:
      h.params = mine;
      h.grads = mine;
      break;
  }
  return h;
}

std::vector<CommOp> backward_buckets(const OpList& backward, std::int64_t total, CommGroup group) {
  std::vector<CommOp> buckets;
  std::int64_t done = 0;
  for (const Op& op : backward.ops()) {
    if (op.kind != OpKind::comm || op.tag != OpTag::grad_bucket || op.group != group) continue;
    done += op.elements;
    buckets.push_back(
        CommOp{std::string(op.name), op.collective, total - done, op.elements, op.layer});
    buckets.back().element_bytes = op.bytes / static_cast<double>(op.elements);
  }
  return buckets;
}

Result<Sharding> Sharding::build(const Workload& w, const ParamLayout& layout, Strategy s,
                                 int ranks) {
  if (w.roles.size() != 1 || w.roles[0].chunks.size() != 1)
    return Error{"internal: the trainer's workload must have one role of one chunk"};
  const Role& role = w.roles[0];
  const std::int64_t total = layout.total();
  if (role.params != total)
    return Error{fmt::format("internal: the workload counts {} parameters, the trainer holds {}",
                             role.params, total)};
  Sharding sh;
  sh.strategy = s;
  sh.ranks = ranks;
  sh.part = comm::Partition{total, ranks};

  sh.buckets = backward_buckets(role.chunks[0].backward, total);
  std::int64_t done = 0;
  for (const CommOp& b : sh.buckets) done += b.elements;
  if (done > total)
    return Error{
        fmt::format("internal: the workload's buckets cover {} gradients of {}", done, total)};
  std::int64_t offset = 0;
  for (const Op& op : role.step.ops()) {
    if (op.kind != OpKind::comm) continue;
    // Only the step's reduce-scatters and all-gathers cover the buffer; the ZeRO gradient-norm
    // all-reduce (one scalar) covers no range of it.
    if (op.collective != Collective::reduce_scatter && op.collective != Collective::all_gather)
      continue;
    CommOp c{std::string(op.name), op.collective, offset, op.elements, op.layer};
    if (op.elements > 0) c.element_bytes = op.bytes / static_cast<double>(op.elements);
    if (op.collective == Collective::reduce_scatter) sh.step_reduce_scatter.push_back(c);
    if (op.collective == Collective::all_gather) sh.step_all_gather.push_back(c);
    offset += op.elements;
    if (offset >= total) offset = 0;  // the all-gathers start again from the beginning
  }
  // Every bucket must end where a parameter group ends (the workload closes buckets after the
  // op that completes a group's gradients); otherwise the layouts disagree.
  std::set<std::int64_t> group_ends;
  std::int64_t completed = 0;
  for (const auto& g : layout.backward_groups()) group_ends.insert(completed += g.range.size);
  for (std::size_t k = 0; k < sh.buckets.size(); ++k)
    if (!group_ends.count(sh.bucket_end(k)))
      return Error{fmt::format(
          "internal: a workload bucket ends after {} gradients, inside a parameter group",
          sh.bucket_end(k))};
  return sh;
}

}  // namespace commscope::train
