// Latency/bandwidth (alpha-beta) fits of measured collective times: t = alpha + beta x size,
// by least squares, with residuals; and the network profile a fit makes for `predict`.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "commscope/spec/system.h"
#include "commscope/util/result.h"
#include "commscope/workload/op.h"

namespace commscope {

struct Sample {
  double bytes = 0;    // nccl-tests size
  double seconds = 0;  // time of one call
  double busbw = 0;    // bus bandwidth the source printed, bytes/s (0: not given)
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
  int nodes = 0;  // nodes the ranks spanned (0: not known, as in commscope-bench JSON)
  std::vector<Sample> samples;
  std::vector<std::string> notes;  // what the reader left out and why, printed by `fit`
};
Result<std::vector<MeasuredCollective>> read_bench_json(const std::string& path);

// `commscope fit`: the fit of each measured collective, and which one describes the network.
struct FitRow {
  MeasuredCollective measured;
  AlphaBetaFit fit;
  double worst_residual = 0;  // largest |residual| / measured time over the samples
};
struct BenchFits {
  std::vector<FitRow> rows;           // the collectives that could be fitted, in input order
  std::vector<std::string> warnings;  // collectives that could not, and boundary refits
  // The row the network profile comes from: the inter-node all-reduce over the most ranks when
  // there is one, else the all-reduce over the most ranks; -1 when no all-reduce was fitted.
  int profile_row = -1;
  // The measured bus-bandwidth curves: one per (collective, scope, ranks, nodes), busbw from
  // each sample's time (size x bus_factor / time, as nccl-tests computes it), sizes merged
  // (mean) where several sweeps measured the same. Sweeps whose nodes are unknown ("world" of
  // commscope-bench) or of one rank make none (a warning says so).
  std::vector<BusBwCurve> curves;
};
BenchFits fit_bench(const std::vector<MeasuredCollective>& measured);

// The curves of fit_bench alone; errors when they exceed kMaxCurves or kMaxCurvePoints.
Result<std::vector<BusBwCurve>> measured_curves(const std::vector<MeasuredCollective>& measured,
                                                std::vector<std::string>* warnings = nullptr);

// What the user says about the measured network (the flags of `commscope fit`).
struct ProfileOptions {
  std::string name = "measured";
  std::string transport = "tcp";         // a name of the network loader's table (spec/system.h)
  int nics_per_node = 1;                 // the bandwidth is per NIC port
  std::optional<double> line_rate_gbps;  // per port; none: the measured rate
  std::string source;                    // the results file, for the profile's sources
};
// The options alone, so a CLI can refuse them before reading anything. Errors name the flag.
Status check_profile_options(const ProfileOptions& o);

// The network profile of the all-reduce fit: per NIC port bandwidth, per-step latency of a ring
// (alpha over 2(n-1) steps). It is read back by the same loader `predict --network` uses before
// it is returned, so a profile fit writes is one predict accepts. It holds fits.curves as
// "curves" (spec/system.h).
Result<nlohmann::json> network_profile(const BenchFits& fits, const ProfileOptions& o);

}  // namespace commscope
