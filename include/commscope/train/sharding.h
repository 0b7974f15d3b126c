// The trainer's sharding layout, derived once from the plan's workload: where each DDP bucket,
// ZeRO gradient bucket and step collective lies in the flat parameter buffer (gpt.h's
// ParamLayout), and which elements each rank owns under ZeRO. The trainer reads it; it does
// not re-derive it. No MPI here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "commscope/comm/partition.h"
#include "commscope/gpt/gpt.h"
#include "commscope/train/options.h"
#include "commscope/workload/workload.h"

namespace commscope::train {

// One communication op of the plan, mapped onto the flat buffer [offset, offset + elements).
struct CommOp {
  std::string name;
  Collective collective = Collective::all_reduce;
  std::int64_t offset = 0, elements = 0;
  int layer = kNoLayer;
  // Bytes per element on the wire, as the workload counts them (2 for gradients reduced in
  // bf16/fp16 under --grad-comm-dtype).
  double element_bytes = 4;
};

// The grad_bucket ops of a chunk's backward (DDP all-reduces, ZeRO-2/3 reduce-scatters), in
// backward order, laid from the end of a buffer of `total` elements (backward completes
// gradients in reverse memory order); their elements may sum to less than total, never more
// than the caller checks. Both trainers read their buckets through this.
// Only the buckets of `group` (the data-parallel group; the expert gradients' buckets, over the
// expert-data-parallel group, are laid from the end of the experts' part instead: pass
// CommGroup::expert_data and that part's end).
std::vector<CommOp> backward_buckets(const OpList& backward, std::int64_t total,
                                     CommGroup group = CommGroup::data);

struct Sharding {
  Strategy strategy = Strategy::ddp;
  int ranks = 1;
  // ZeRO's contiguous partitions of the flat buffer (rank r owns [part.lo(r), part.hi(r))).
  comm::Partition part;
  // Backward buckets (DDP all-reduce, ZeRO-2/3 reduce-scatter), in backward order: the first
  // ends at the buffer's end (backward completes gradients in reverse memory order).
  std::vector<CommOp> buckets;
  std::vector<CommOp> step_reduce_scatter;  // ZeRO-1, at the step
  std::vector<CommOp> step_all_gather;      // ZeRO-1/2, after the step

  std::int64_t total() const { return part.total; }
  // Gradients backward has completed when bucket k is complete.
  std::int64_t bucket_end(std::size_t k) const { return part.total - buckets[k].offset; }

  // What a rank keeps between steps, as the ZeRO paper's stages say (Rajbhandari et al. 2020,
  // Fig. 1): stage 1 partitions the optimizer state, 2 also the gradients, 3 also the
  // parameters.
  bool shards_optimizer() const { return strategy != Strategy::ddp; }
  bool shards_gradients() const {
    return strategy == Strategy::zero2 || strategy == Strategy::zero3;
  }
  bool shards_parameters() const { return strategy == Strategy::zero3; }
  // ZeRO-1/2: each rank updates its partition, and the full parameters forward and backward
  // read are all-gathered from the partitions after the step.
  bool gathers_params_after_step() const { return shards_optimizer() && !shards_parameters(); }
  // Elements of the optimizer state (and of the shards) rank r owns.
  std::int64_t owned(int r) const { return shards_optimizer() ? part.size(r) : part.total; }

  // Floats rank r holds between steps: the ZeRO stage's partitions, plus, under ZeRO-1/2, the
  // full parameters forward and backward read (and, under ZeRO-1, the full gradient buffer
  // the step reduce-scatters).
  struct Held {
    std::int64_t params = 0, grads = 0, optimizer = 0;
  };
  Held held(int r) const;

  // From the workload of this model and plan (build_workload of train_scenario): its
  // grad_bucket ops and step collectives, laid onto `layout`. An error if the workload's
  // parameters or bucket ends disagree with the layout.
  static Result<Sharding> build(const Workload& w, const ParamLayout& layout, Strategy s,
                                int ranks);
};

}  // namespace commscope::train
