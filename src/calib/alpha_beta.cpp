// Least-squares alpha-beta fits and the bench JSON reader.
#include "commscope/calib/alpha_beta.h"

#include <cmath>
#include <map>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commscope/util/json_fields.h"

namespace commscope {

// Weighted least squares with weights 1/t^2, i.e. relative errors: sizes span many orders of
// magnitude, and plain least squares would let the largest sizes decide the latency.
Result<AlphaBetaFit> fit_alpha_beta(const std::vector<Sample>& s) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  std::size_t distinct = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto& p = s[i];
    if (!(p.seconds > 0))
      return Error{
          fmt::format("alpha-beta fit: sample {}: expected a positive time, got {}", i, p.seconds)};
    const double w = 1.0 / (p.seconds * p.seconds);
    sw += w, sx += w * p.bytes, sy += w * p.seconds, sxx += w * p.bytes * p.bytes,
        sxy += w * p.bytes * p.seconds;
    distinct += i == 0 || p.bytes != s[0].bytes;
  }
  const double den = sw * sxx - sx * sx;
  if (s.size() < 2 || distinct < 2 || !(std::fabs(den) > 0))
    return Error{
        fmt::format("alpha-beta fit: expected samples at two or more sizes, got {}", s.size())};
  AlphaBetaFit f;
  f.beta = (sw * sxy - sx * sy) / den;
  f.alpha = (sy - f.beta * sx) / sw;
  // Latency and time per byte cannot be negative. When the unconstrained fit says otherwise
  // (small sizes faster than the line suggests: a shaper's burst, a cache), the constrained
  // least-squares optimum lies on the boundary: refit the other parameter alone.
  if (f.alpha < 0) {
    f.alpha = 0;
    f.beta = sxy / sxx;  // weighted least squares through the origin
    f.clamped = true;
  } else if (f.beta < 0) {
    f.beta = 0;
    f.alpha = sy / sw;  // weighted mean time
    f.clamped = true;
  }
  double mean = 0;
  for (const auto& p : s) mean += p.seconds / static_cast<double>(s.size());
  double ss_res = 0, ss_tot = 0;
  for (const auto& p : s) {
    const double r = p.seconds - (f.alpha + f.beta * p.bytes);
    f.residuals.push_back(r);
    ss_res += r * r;
    ss_tot += (p.seconds - mean) * (p.seconds - mean);
  }
  f.r2 = ss_tot > 0 ? 1 - ss_res / ss_tot : 1;
  return f;
}

Result<std::vector<MeasuredCollective>> read_bench_json(const std::string& path) {
  CS_ASSIGN_OR_RETURN(auto j, read_json_file(path));
  if (!j.contains("results") || !j["results"].is_array())
    return Error{fmt::format(
        "{}: field 'results': expected the array commscope-bench --format json writes", path)};
  std::map<std::tuple<std::string, int, int>, MeasuredCollective> by;
  std::size_t i = 0;
  for (const auto& r : j["results"]) {
    Collective c;
    const std::string name = r.value("collective", "");
    if (!collective_from_name(name, c))
      return Error{fmt::format("{}: results[{}].collective: expected a collective, got '{}'", path,
                               i, name)};
    const int ranks = r.value("ranks", 0);
    const double bytes = r.value("size_bytes", 0.0);
    const double us = r.contains("out_of_place") ? r["out_of_place"].value("time_us", -1.0) : -1.0;
    if (ranks < 1 || us < 0)
      return Error{fmt::format(
          "{}: results[{}]: expected ranks and out_of_place.time_us, got ranks {} time {}", path, i,
          ranks, us)};
    const std::string group = r.value("group", "world");
    auto& m = by[{group, static_cast<int>(c), ranks}];
    m.collective = c, m.ranks = ranks, m.group = group;
    if (bytes > 0) m.samples.push_back({bytes, us * 1e-6});
    ++i;
  }
  std::vector<MeasuredCollective> out;
  for (auto& [k, v] : by) out.push_back(std::move(v));
  return out;
}

}  // namespace commscope
