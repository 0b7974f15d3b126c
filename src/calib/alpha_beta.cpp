// Least-squares alpha-beta fits and the bench JSON reader.
#include "commscope/calib/alpha_beta.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commscope/spec/limits.h"
#include "commscope/spec/system.h"
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
  if (s.size() < 2 || distinct < 2)
    return Error{fmt::format("alpha-beta fit: expected samples at two or more sizes, got {} at {}",
                             s.size(), distinct)};
  if (!(std::fabs(den) > 0) || !std::isfinite(den))
    return Error{fmt::format(
        "alpha-beta fit: expected times of one scale (weighted by 1/time^2, the shortest, {} s, "
        "outweighs the others until the sizes' spread vanishes), got {} samples",
        std::min_element(s.begin(), s.end(),
                         [](const Sample& a, const Sample& b) { return a.seconds < b.seconds; })
            ->seconds,
        s.size())};
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
    // Each field of its type and range before it is read (a wrong type used to surface as the
    // JSON library's own exception, an out-of-range rank count as a wrapped-around int).
    auto bad = [&](const char* field, const std::string& expected, const nlohmann::json& got) {
      return Error{fmt::format("{}: results[{}]{}{}: expected {}, got {}", path, i,
                               *field ? "." : "", field, expected,
                               got.is_null() ? std::string("nothing") : json_excerpt(got))};
    };
    if (!r.is_object()) return bad("", "an object", r);
    const nlohmann::json none;
    auto at = [&](const nlohmann::json& o, const char* key) -> const nlohmann::json& {
      auto it = o.find(key);
      return it == o.end() ? none : *it;
    };
    const auto& name_j = at(r, "collective");
    Collective c;
    if (!name_j.is_string() || !collective_from_name(name_j.get<std::string>(), c))
      return bad("collective", "a collective's name", name_j);
    const auto& ranks_j = at(r, "ranks");
    if (!ranks_j.is_number_integer() || ranks_j.get<std::int64_t>() < 1 ||
        ranks_j.get<std::int64_t>() > limits::kMaxGpus)
      return bad("ranks", fmt::format("an integer from 1 to {}", limits::kMaxGpus), ranks_j);
    const int ranks = static_cast<int>(ranks_j.get<std::int64_t>());
    // (a result without its size was dropped without a word: every result has one)
    const auto& bytes_j = at(r, "size_bytes");
    const double bytes = bytes_j.is_number() ? bytes_j.get<double>() : -1.0;
    if (!(bytes >= 0 && bytes <= 1e15))
      return bad("size_bytes", "a byte count from 0 to 1e15", bytes_j);
    // A collective takes at least a nanosecond; a time far below the others' weighed a
    // relative-error fit so much that the fit of 18 sizes said "expected two or more sizes".
    const auto& oop = at(r, "out_of_place");
    const auto& us_j = oop.is_object() ? at(oop, "time_us") : none;
    const double us = us_j.is_number() ? us_j.get<double>() : -1.0;
    if (!(us >= (bytes > 0 ? 1e-3 : 0.0) && us <= 1e12))
      return bad("out_of_place.time_us",
                 bytes > 0 ? "a time in microseconds from 0.001 to 1e12"
                           : "a time in microseconds from 0 to 1e12",
                 oop.is_object() ? us_j : oop);
    const auto& group_j = at(r, "group");
    if (!group_j.is_null() && !group_j.is_string()) return bad("group", "a string", group_j);
    const std::string group = group_j.is_string() ? group_j.get<std::string>() : "world";
    auto& m = by[{group, static_cast<int>(c), ranks}];
    m.collective = c, m.ranks = ranks, m.group = group;
    if (bytes > 0) m.samples.push_back({bytes, us * 1e-6});
    ++i;
  }
  std::vector<MeasuredCollective> out;
  for (auto& [k, v] : by) out.push_back(std::move(v));
  return out;
}

Result<std::vector<BusBwCurve>> measured_curves(const std::vector<MeasuredCollective>& measured,
                                                std::vector<std::string>* warnings) {
  // (collective, scope, ranks, nodes) -> size -> (sum of busbw, count)
  std::map<std::tuple<int, int, int, int>, std::map<double, std::pair<double, int>>> by;
  for (const auto& m : measured) {
    int nodes = m.nodes;
    if (nodes <= 0 && m.group == "intra-node") nodes = 1;
    if (nodes <= 0 && m.group == "inter-node") nodes = m.ranks;  // one rank per node
    if (nodes <= 0 || m.ranks < 2) {
      if (warnings)
        warnings->push_back(fmt::format(
            "{} {} over {} ranks: no curve ({})", m.group, to_string(m.collective), m.ranks,
            m.ranks < 2 ? "one rank"
                        : "the nodes it spanned are unknown: commscope-bench --split node, or fit "
                          "--nodes for OSU logs"));
      continue;
    }
    const CurveScope scope = nodes > 1 ? CurveScope::inter_node : CurveScope::intra_node;
    const Collective key = m.collective == Collective::recv ? Collective::send : m.collective;
    auto& pts = by[{static_cast<int>(key), static_cast<int>(scope), m.ranks, nodes}];
    const double bus = bus_factor(key, m.ranks);
    for (const auto& s : m.samples) {
      if (!(s.bytes > 0 && s.seconds > 0)) continue;
      auto& [sum, count] = pts[s.bytes];
      sum += s.bytes * bus / s.seconds;
      ++count;
    }
  }
  std::vector<BusBwCurve> out;
  for (const auto& [k, pts] : by) {
    if (pts.empty()) continue;
    if (out.size() >= kMaxCurves)
      return Error{fmt::format("fit: expected at most {} curves, got more", kMaxCurves)};
    if (pts.size() > kMaxCurvePoints)
      return Error{fmt::format("fit: expected at most {} sizes per curve, got {}", kMaxCurvePoints,
                               pts.size())};
    BusBwCurve c;
    c.collective = static_cast<Collective>(std::get<0>(k));
    c.scope = static_cast<CurveScope>(std::get<1>(k));
    c.ranks = std::get<2>(k), c.nodes = std::get<3>(k);
    // Mean busbw per size, as times; then no size takes longer than a larger one (noise at
    // small sizes: the smaller size takes the larger one's time), so the cost is monotone.
    std::vector<std::pair<double, double>> t;  // (bytes, seconds)
    const double bus = bus_factor(c.collective, c.ranks);
    for (const auto& [bytes, sc] : pts) t.emplace_back(bytes, bytes * bus / (sc.first / sc.second));
    for (std::size_t i = t.size() - 1; i-- > 0;)
      t[i].second = std::min(t[i].second, t[i + 1].second);
    for (const auto& [bytes, seconds] : t)
      c.points.push_back({bytes, BytesPerSecond(bytes * bus / seconds)});
    out.push_back(std::move(c));
  }
  return out;
}

BenchFits fit_bench(const std::vector<MeasuredCollective>& measured) {
  BenchFits out;
  if (auto c = measured_curves(measured, &out.warnings))
    out.curves = std::move(*c);
  else
    out.warnings.push_back(c.error().message + "; the profile holds no curves");
  bool profile_inter = false;
  int profile_ranks = 0;
  for (const auto& m : measured) {
    auto f = fit_alpha_beta(m.samples);
    if (!f) {
      out.warnings.push_back(fmt::format("{} {} over {} ranks: {}", m.group,
                                         to_string(m.collective), m.ranks, f.error().message));
      continue;
    }
    if (f->clamped)
      out.warnings.push_back(fmt::format(
          "{} {} over {} ranks: the unconstrained fit gave a negative {}; refitted with it at 0 "
          "(a latency below what the sweep resolves, or small sizes faster than the network: a "
          "shaper's burst, a cache)",
          m.group, to_string(m.collective), m.ranks, f->alpha == 0 ? "latency" : "time per byte"));
    FitRow row{m, std::move(*f), 0};
    for (std::size_t i = 0; i < m.samples.size(); ++i)
      row.worst_residual =
          std::max(row.worst_residual, std::fabs(row.fit.residuals[i]) / m.samples[i].seconds);
    // The profile describes the network: the inter-node all-reduce when there is one, else the
    // all-reduce over the most ranks.
    const bool inter = m.group == "inter-node";
    if (m.collective == Collective::all_reduce &&
        (inter ? !profile_inter || m.ranks >= profile_ranks
               : !profile_inter && m.ranks >= profile_ranks)) {
      out.profile_row = static_cast<int>(out.rows.size());
      profile_ranks = m.ranks;
      profile_inter = profile_inter || inter;
    }
    out.rows.push_back(std::move(row));
  }
  return out;
}

namespace {
// A profile with the given transport and placeholder numbers, read by the network loader: the
// transport names come from the loader's own table.
Status check_transport(const std::string& transport) {
  const nlohmann::json probe = {{"name", "probe"},
                                {"transport", transport},
                                {"line_rate_gbps", 1},
                                {"achievable_gbps", 1},
                                {"latency_us", 1}};
  auto p = network_from_json(probe, "--transport");
  if (!p) return Error{"fit: " + p.error().message};
  return {};
}
}  // namespace

Status check_profile_options(const ProfileOptions& o) {
  if (o.name.empty()) return Error{"fit: --name: expected a profile name, got ''"};
  CS_RETURN_IF_ERROR(check_transport(o.transport));
  if (o.nics_per_node < 1 || o.nics_per_node > 1024)
    return Error{fmt::format("fit: --nics-per-node: expected an integer from 1 to 1024, got {}",
                             o.nics_per_node)};
  if (o.line_rate_gbps && !(std::isfinite(*o.line_rate_gbps) && *o.line_rate_gbps > 0))
    return Error{fmt::format("fit: --line-rate-gbps: expected a positive finite number, got {}",
                             *o.line_rate_gbps)};
  return {};
}

Result<nlohmann::json> network_profile(const BenchFits& fits, const ProfileOptions& o) {
  CS_RETURN_IF_ERROR(check_profile_options(o));
  if (fits.profile_row < 0)
    return Error{
        "fit: --output: expected an all_reduce sweep in the results to make a profile from"};
  const FitRow& row = fits.rows[static_cast<std::size_t>(fits.profile_row)];
  const int ranks = row.measured.ranks;
  const double gbps = row.fit.busbw(Collective::all_reduce, ranks) * 8 / 1e9 / o.nics_per_node;
  // A ring all-reduce pays alpha over 2(n-1) steps: the per-step latency.
  const double latency_us = std::max(row.fit.alpha, 0.0) * 1e6 / std::max(2 * (ranks - 1), 1);
  nlohmann::json p = {{"name", o.name},
                      {"transport", o.transport},
                      {"line_rate_gbps", std::max(o.line_rate_gbps.value_or(0.0), gbps)},
                      {"achievable_gbps", gbps},
                      {"latency_us", std::max(latency_us, 0.01)},
                      {"sources",
                       {fmt::format("fitted by commscope fit from {} ({} all_reduce over {} ranks)",
                                    o.source, row.measured.group, ranks)}}};
  if (!fits.curves.empty()) {
    NetworkProtocol with;
    with.curves = fits.curves;
    p["curves"] = to_json(with)["curves"];
    p["sources"].push_back(
        fmt::format("curves: measured bus bandwidth per size of {} sweeps in {} (commscope fit)",
                    fits.curves.size(), o.source));
  }
  // The loader predict uses: what it refuses is not written.
  auto back = network_from_json(p, "fitted profile");
  if (!back)
    return Error{fmt::format("fit: the {} all_reduce over {} ranks makes no usable profile: {}",
                             row.measured.group, ranks, back.error().message)};
  return p;
}

}  // namespace commscope
