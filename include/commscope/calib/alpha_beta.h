// Latency/bandwidth (alpha-beta) fits of measured collective times: t = alpha + beta x size,
// by least squares, with residuals; and the network profile a fit makes for `predict`.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "commscope/util/result.h"
#include "commscope/workload/op.h"

namespace commscope {

struct Sample {
  double bytes = 0;    // nccl-tests size
  double seconds = 0;  // time of one call
};

struct AlphaBetaFit {
  double alpha = 0;               // seconds per call (latency)
  double beta = 0;                // seconds per byte of size
  double r2 = 0;                  // coefficient of determination
  std::vector<double> residuals;  // measured - fitted, seconds, per sample
  bool clamped = false;           // the unconstrained fit had alpha < 0 or beta < 0: that one is 0
  // The bus bandwidth the fit implies for a collective over n ranks: factor / beta (bytes/s).
  double busbw(Collective c, int n) const { return beta > 0 ? bus_factor(c, n) / beta : 0; }
};

// Least squares of seconds on bytes, weighted by 1/t^2, with alpha >= 0 and beta >= 0.
// Needs two distinct sizes.
Result<AlphaBetaFit> fit_alpha_beta(const std::vector<Sample>& samples);

// Measured collectives from commscope-bench's JSON ({"results": [...]}), out-of-place times,
// grouped by collective: (collective, ranks, samples).
struct MeasuredCollective {
  Collective collective = Collective::all_reduce;
  std::string group = "world";  // world, intra-node or inter-node (commscope-bench --split node)
  int ranks = 0;
  std::vector<Sample> samples;
};
Result<std::vector<MeasuredCollective>> read_bench_json(const std::string& path);

}  // namespace commscope
