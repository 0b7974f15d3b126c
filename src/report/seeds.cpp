// The seed studies as a scenario: loading, predicting, and the comparison with their headlines.
#include "commscope/report/seeds.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commscope/cost/collective.h"
#include "commscope/spec/limits.h"
#include "commscope/spec/preset.h"
#include "commscope/util/json_fields.h"
#include "commscope/util/units.h"

namespace commscope {

namespace {

constexpr EnumName<HeadlineKind> kKindNames[] = {
    {HeadlineKind::speedup, "speedup"},
    {HeadlineKind::peak_rate, "peak_rate"},
    {HeadlineKind::allreduce_share, "allreduce_share"},
    {HeadlineKind::recv_embedding_share, "recv_embedding_share"},
    {HeadlineKind::comm_ratio, "comm_ratio"},
    {HeadlineKind::throughput_loss, "throughput_loss"},
};

// Bounds that keep a scenario file's work small (docs/seeds.md).
constexpr std::size_t kMaxRuns = 10000;
constexpr std::size_t kMaxHeadlines = 1000;

// Reads a JSON array of objects at key; an error names the field.
bool object_array(FieldReader& r, const nlohmann::json& j, std::string_view key, bool required,
                  std::vector<const nlohmann::json*>& out) {
  if (!j.contains(key)) {
    if (required) r.fail(key, "a non-empty array of objects", "nothing (the field is missing)");
    return false;
  }
  const auto& a = j.at(std::string(key));
  if (!a.is_array() || a.empty()) {
    r.fail(key, "a non-empty array of objects", json_excerpt(a));
    return false;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_object()) {
      r.fail(fmt::format("{}[{}]", key, i), "an object", json_excerpt(a[i]));
      return false;
    }
    out.push_back(&a[i]);
  }
  return true;
}

std::string row_label(const PredictRow& r) {
  const Scenario& s = r.scenario;
  std::string out = fmt::format("{}, {}, {} nodes", s.model.name, s.network.name, s.nodes);
  if (s.plan.pp > 1) out += fmt::format(", PP {}", s.plan.pp);
  if (s.plan.zero > 0) out += fmt::format(", ZeRO-{}", s.plan.zero);
  return out;
}

bool in_groups(const SeedHeadline& h, const std::string& g) {
  return std::find(h.groups.begin(), h.groups.end(), g) != h.groups.end();
}

double pct(double x) {
  return 100.0 * x;
}

// "12% above the seed's", "within 5% of the seed's"
std::string relation(double predicted, double seed) {
  if (seed == 0) return "against a seed figure of 0";
  const double rel = predicted / seed - 1;
  if (std::abs(rel) < 0.1) return fmt::format("within {:.0f}% of the seed's", pct(std::abs(rel)));
  return fmt::format("{:.0f}% {} the seed's", pct(std::abs(rel)), rel > 0 ? "above" : "below");
}

}  // namespace

std::string_view to_string(HeadlineKind k) {
  return enum_to_name(kKindNames, k);
}

Result<SeedsScenario> seeds_scenario_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) return Error{fmt::format("{}: expected a JSON object", where)};
  SeedsScenario s;
  // The arrays are read by hand (the field reader reads scalars and string lists); the reader
  // sees the rest, so that an unknown top-level field is still an error.
  nlohmann::json rest = j;
  rest.erase("groups");
  rest.erase("headlines");
  FieldReader r(rest, where);
  r.require("name", s.name);
  std::string comment;
  r.read("comment", comment);
  CS_RETURN_IF_ERROR(r.status());

  FieldReader top(j, where);
  top.allow_unknown();
  std::vector<const nlohmann::json*> groups, headlines;
  object_array(top, j, "groups", true, groups);
  object_array(top, j, "headlines", true, headlines);
  CS_RETURN_IF_ERROR(top.status());

  std::set<std::string> group_ids;
  for (std::size_t gi = 0; gi < groups.size(); ++gi) {
    const nlohmann::json& gj = *groups[gi];
    nlohmann::json grest = gj;
    grest.erase("plans");
    FieldReader g(grest, where, fmt::format("groups[{}]", gi));
    std::string id, study, label, system, precision, gcomment;
    std::vector<std::string> models, networks;
    g.require("id", id);
    g.require("study", study);
    g.read("label", label);
    g.read("comment", gcomment);
    g.require("system", system);
    g.require("models", models);
    g.read("networks", networks);
    g.read("precision", precision);
    g.check(!id.empty() && !group_ids.count(id), "id", "a unique, non-empty group id",
            "'" + id + "'");
    g.check(!models.empty(), "models", "a non-empty list of model presets", "[]");
    std::optional<Precision> prec;
    if (!precision.empty()) {
      prec = precision_from_name(precision);
      g.check(prec.has_value(), "precision", "fp32, fp16 or bf16", "'" + precision + "'");
    }
    CS_RETURN_IF_ERROR(g.status());
    group_ids.insert(id);
    if (networks.empty()) networks.push_back("");  // the system's own

    FieldReader gp(gj, where, fmt::format("groups[{}]", gi));
    gp.allow_unknown();
    std::vector<const nlohmann::json*> plans;
    object_array(gp, gj, "plans", true, plans);
    CS_RETURN_IF_ERROR(gp.status());
    std::vector<PlanInput> plan_inputs;
    for (std::size_t pi = 0; pi < plans.size(); ++pi) {
      FieldReader p(*plans[pi], where, fmt::format("groups[{}].plans[{}]", gi, pi));
      PlanInput in;
      in.precision = prec;
      p.read("nodes", in.nodes);
      p.read("gpus", in.gpus);
      p.read("tp", in.tp);
      p.read("pp", in.pp);
      p.read("dp", in.dp);
      p.read("zero", in.zero);
      p.read("micro_batch", in.micro_batch);
      p.read("global_batch", in.global_batch);
      p.read("grad_accum", in.grad_accum);
      p.check(in.nodes || in.gpus, "nodes", "nodes or gpus given", "neither");
      CS_RETURN_IF_ERROR(p.status());
      plan_inputs.push_back(in);
    }
    for (const auto& m : models)
      for (const auto& n : networks)
        for (const auto& p : plan_inputs) {
          SeedRun run;
          run.group = id;
          run.input.model = m;
          run.input.system = system;
          run.input.network = n;
          run.input.plan = p;
          s.runs.push_back(std::move(run));
          if (s.runs.size() > kMaxRuns)
            return Error{fmt::format(
                "{}: field 'groups': expected at most {} runs in all, got more", where, kMaxRuns)};
        }
  }
  if (headlines.size() > kMaxHeadlines)
    return Error{fmt::format("{}: field 'headlines': expected at most {} headlines, got {}", where,
                             kMaxHeadlines, headlines.size())};
  for (std::size_t hi = 0; hi < headlines.size(); ++hi) {
    FieldReader h(*headlines[hi], where, fmt::format("headlines[{}]", hi));
    SeedHeadline x;
    std::string kind;
    h.require("id", x.id);
    h.require("study", x.study);
    h.require("kind", kind);
    h.require("groups", x.groups);
    h.read("network", x.network);
    h.read("baseline", x.baseline);
    h.read("baseline_group", x.baseline_group);
    h.require("seed", x.seed);
    h.require("unit", x.unit);
    h.read("says", x.says);
    if (auto k = enum_from_name(kKindNames, kind))
      x.kind = *k;
    else  // (an empty kind was taken as the first kind, found 2026-11-29)
      h.fail("kind", "one of " + enum_choices(kKindNames), "'" + kind + "'");
    h.check(!x.groups.empty(), "groups", "a non-empty list of group ids", "[]");
    for (const auto& g : x.groups)
      h.check(group_ids.count(g) > 0, "groups", "ids of groups above", "'" + g + "'");
    h.check(std::isfinite(x.seed), "seed", "a finite number", fmt::format("{}", x.seed));
    const bool pair_kind =
        x.kind == HeadlineKind::comm_ratio || x.kind == HeadlineKind::throughput_loss;
    if (pair_kind)
      h.check(group_ids.count(x.baseline_group) > 0, "baseline_group", "the id of a group above",
              "'" + x.baseline_group + "'");
    if (x.kind == HeadlineKind::speedup || x.kind == HeadlineKind::peak_rate)
      h.check(!x.network.empty(), "network", "a network preset name", "nothing");
    if (x.kind == HeadlineKind::speedup)
      h.check(!x.baseline.empty() && x.baseline != x.network, "baseline",
              "a network other than 'network'", "'" + x.baseline + "'");
    CS_RETURN_IF_ERROR(h.status());
    s.headlines.push_back(std::move(x));
  }
  return s;
}

Result<SeedsScenario> load_seeds_scenario(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  fs::path path;
  if (name_or_path.find('/') != std::string::npos ||
      (name_or_path.size() > 5 && name_or_path.ends_with(".json"))) {
    path = name_or_path;
  } else {
    std::vector<std::string> looked;
    for (const auto& root : preset_roots()) {
      fs::path p = root / "scenarios" / (name_or_path + ".json");
      std::error_code ec;
      if (fs::is_regular_file(p, ec)) {
        path = p;
        break;
      }
      looked.push_back((root / "scenarios").string());
    }
    if (path.empty())
      return Error{fmt::format("--scenario: expected seeds (a scenario under {}), got '{}'",
                               looked.empty() ? std::string("presets/scenarios") : looked.front(),
                               name_or_path)};
  }
  CS_ASSIGN_OR_RETURN(auto j, read_json_file(path));
  return seeds_scenario_from_json(j, path.string());
}

double bucket_nic_rate_gbps(const PredictRow& r) {
  const Scenario& sc = r.scenario;
  const GroupPlacement g = place_group(sc, CommGroup::data);
  if (g.nodes <= 1 || g.size <= 1 || sc.system.nics.count <= 0) return 0;
  const double bucket = sc.plan.ddp_bucket.value();
  const CollectiveCost cost = collective_cost(Collective::all_reduce, bucket, g, link_model(sc));
  const double t = cost.time.value();
  if (t <= 0) return 0;
  // What crosses a node's NICs in that time, as the cost model priced the call: a ring (or a
  // curve, which is priced as one) over the group's n ranks crosses each node boundary once
  // with 2 (n - 1) / n of the bucket; a double binary tree sends and receives it, 2 x; the
  // two-level form moves it between the N nodes, 2 (N - 1) / N x. (It was the last for every
  // call: 7% low for the seeds' ring over 16 ranks on 8 nodes, found by checking, 2026-12-02.)
  const double per_call =
      cost.source == CostSource::curve || cost.algorithm == CollectiveAlgorithm::ring
          ? bus_factor(Collective::all_reduce, g.size)
      : cost.algorithm == CollectiveAlgorithm::tree ||
              cost.algorithm == CollectiveAlgorithm::nvls_tree
          ? 2.0
      : cost.algorithm == CollectiveAlgorithm::hierarchical
          ? bus_factor(Collective::all_reduce, g.nodes)
          : 1.0;  // in-network reduction: the node sends its data up and receives the result
  return per_call * bucket * g.concurrent * 8 / t / sc.system.nics.count / 1e9;
}

Result<SeedComparison> compare_headline(const SeedHeadline& h, const std::vector<PredictRow>& rows,
                                        const std::vector<std::string>& row_group) {
  CS_CHECK(rows.size() == row_group.size());
  SeedComparison c;
  c.headline = h;
  auto none = [&](std::string_view what) {
    return Error{fmt::format("seeds headline '{}': no {} in groups {}", h.id, what,
                             fmt::join(h.groups, ", "))};
  };
  // Rows of the headline's groups that fit in memory.
  std::vector<std::size_t> mine;
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (in_groups(h, row_group[i]) && rows[i].fits) mine.push_back(i);

  switch (h.kind) {
    case HeadlineKind::speedup: {
      // Match runs that differ only in the network: same group, model, nodes and plan.
      using Key = std::tuple<std::string, std::string, int, int, int, std::int64_t>;
      auto key = [&](std::size_t i) {
        const Scenario& s = rows[i].scenario;
        return Key{row_group[i], s.model.name, s.nodes,
                   s.plan.pp,    s.plan.zero,  s.plan.global_batch};
      };
      std::map<Key, std::pair<const PredictRow*, const PredictRow*>> pairs;
      for (std::size_t i : mine) {
        const std::string& n = rows[i].scenario.network.name;
        if (n == h.network) pairs[key(i)].first = &rows[i];
        if (n == h.baseline) pairs[key(i)].second = &rows[i];
      }
      double sum = 0, exposed_base = 0, exposed_net = 0, bubble_base = 0;
      for (const auto& [k, p] : pairs) {
        if (!p.first || !p.second) continue;
        sum += p.second->iteration_time / p.first->iteration_time;
        exposed_base += p.second->share(p.second->breakdown.exposed);
        exposed_net += p.first->share(p.first->breakdown.exposed);
        bubble_base += p.second->share(p.second->breakdown.bubble);
        ++c.basis;
      }
      if (c.basis == 0) return none("pair of runs on " + h.network + " and " + h.baseline);
      const double n = static_cast<double>(c.basis);
      c.predicted = sum / n;
      c.where = fmt::format("mean of {} pairs", c.basis);
      // The presets' one-stream rates, from the rows' own networks.
      double rate_net = 0, rate_base = 0;
      for (const auto& [k, p] : pairs)
        if (p.first && p.second) {
          rate_net = units::to_gbit_per_s(p.first->scenario.network.achievable);
          rate_base = units::to_gbit_per_s(p.second->scenario.network.achievable);
          break;
        }
      const std::string share_text = fmt::format(
          "on {} exposed communication is {:.0f}% of the iteration (bubble {:.0f}%), on {} {:.0f}%",
          h.baseline, pct(exposed_base / n), pct(bubble_base / n), h.network, pct(exposed_net / n));
      if (c.predicted > h.seed)
        c.reason = fmt::format(
            "{}: the presets' rates differ {:.1f}x ({:.4g} vs {:.4g} Gb/s, independent one-stream "
            "measurements) and {}; where communication is exposed the iteration follows the rate, "
            "so a smaller gain in the seeds means their faster network delivered less of its "
            "measured rate than the preset (see the utilisation headlines)",
            relation(c.predicted, h.seed), rate_net / rate_base, rate_net, rate_base, share_text);
      else
        c.reason = fmt::format(
            "{}: {}; the time the network does not change (compute, bubble) bounds the gain, and "
            "commscope puts more of the iteration there than the seeds saw",
            relation(c.predicted, h.seed), share_text);
      break;
    }
    case HeadlineKind::peak_rate: {
      const PredictRow* best = nullptr;
      for (std::size_t i : mine) {
        if (rows[i].scenario.network.name != h.network) continue;
        const double v = bucket_nic_rate_gbps(rows[i]);
        if (v <= 0) continue;
        ++c.basis;
        if (!best || v > c.predicted) {
          best = &rows[i];
          c.predicted = v;
        }
      }
      if (!best) return none("run across nodes on " + h.network);
      c.where = row_label(*best);
      const double ach = units::to_gbit_per_s(best->scenario.network.achievable);
      const double lat = units::to_us(best->scenario.network.latency);
      c.reason = fmt::format(
          "{}: a {:.0f} MiB gradient bucket moves at {:.1f} Gb/s per NIC, below the preset's "
          "{:.4g} Gb/s one-stream rate by the per-step latency ({:.4g} us per ring step); {}",
          relation(c.predicted, h.seed), best->scenario.plan.ddp_bucket.value() / units::kMiB,
          c.predicted, ach, lat,
          c.predicted > 1.1 * h.seed
              ? "the seeds observed less: what the model leaves out (the NIC reading GPU memory "
                "over PCIe, gaps between buckets, a rate averaged over sampling intervals) costs "
                "the difference"
              : "the independent measurement and the seeds' observation agree");
      break;
    }
    case HeadlineKind::allreduce_share:
    case HeadlineKind::recv_embedding_share: {
      // As a profiler records it (a call from entry, waiting for peers included), which is how
      // the seeds measured; the causal share (transfer only) is given in the reason.
      const PredictRow* best = nullptr;
      double best_causal = 0;
      for (std::size_t i : mine) {
        const PredictRow& r = rows[i];
        const Breakdown& b = r.breakdown;
        auto prof = [](const CommShare& x) { return std::max(x.profiler, x.total); };
        double part, causal;
        if (h.kind == HeadlineKind::allreduce_share) {
          part = prof(b.by_collective[Collective::all_reduce]);
          causal = b.by_collective[Collective::all_reduce].total;
        } else {
          part = prof(b.by_collective[Collective::recv]) + prof(b.by_group[CommGroup::embedding]);
          causal = b.by_collective[Collective::recv].total + b.by_group[CommGroup::embedding].total;
        }
        const double v = pct(r.share(part));
        ++c.basis;
        if (!best || v > c.predicted) {
          best = &r;
          c.predicted = v;
          best_causal = pct(r.share(causal));
        }
      }
      if (!best) return none("run");
      c.where = row_label(*best);
      c.reason = fmt::format(
          "{}: highest at {}, {:.0f}% of the iteration as a profiler records it, {:.0f}% as "
          "transfer alone; {}",
          relation(c.predicted, h.seed), c.where, c.predicted, best_causal,
          c.predicted < 0.9 * h.seed
              ? "commscope's pipeline spends the rest computing or in the bubble: its stages are "
                "more balanced, or its transfers faster, than the seeds' runs were"
              : "the slowest network's transfers dominate the iteration in both");
      break;
    }
    case HeadlineKind::comm_ratio:
    case HeadlineKind::throughput_loss: {
      using Key = std::tuple<std::string, int, int, std::int64_t>;
      auto key = [&](const Scenario& s) {
        return Key{s.model.name, s.gpus(), s.plan.zero, s.plan.global_batch};
      };
      std::map<Key, const PredictRow*> base;
      for (std::size_t i = 0; i < rows.size(); ++i)
        if (row_group[i] == h.baseline_group && rows[i].fits)
          base[key(rows[i].scenario)] = &rows[i];
      const PredictRow *best = nullptr, *best_base = nullptr;
      for (std::size_t i : mine) {
        auto it = base.find(key(rows[i].scenario));
        if (it == base.end()) continue;
        const PredictRow& r = rows[i];
        const PredictRow& b = *it->second;
        double v;
        if (h.kind == HeadlineKind::comm_ratio) {
          if (b.breakdown.comm <= 0) continue;
          v = r.breakdown.comm / b.breakdown.comm;
        } else {
          v = pct(1 - r.tokens_per_s / b.tokens_per_s);
        }
        ++c.basis;
        if (!best || v > c.predicted) {
          best = &r;
          best_base = &b;
          c.predicted = v;
        }
      }
      if (!best) return none("pair of runs with group " + h.baseline_group);
      c.where = fmt::format("{}, {} GPUs, ZeRO-{}", best->scenario.model.name,
                            best->scenario.gpus(), best->scenario.plan.zero);
      const auto node_rate = [](const Scenario& s) {
        return units::to_gbit_per_s(s.network.achievable) * s.system.nics.count;
      };
      const auto gpu_rate = [&](const Scenario& s) { return node_rate(s) / s.gpus_per_node; };
      c.reason = fmt::format(
          "{}: highest at {}: {} gives each GPU {:.0f} Gb/s across nodes ({} nodes), {} {:.0f} "
          "Gb/s "
          "({} nodes, {} of the GPUs' traffic inside NVSwitch); communication {:.0f}% of the "
          "iteration there vs {:.0f}%",
          relation(c.predicted, h.seed), c.where, best->scenario.system.name,
          gpu_rate(best->scenario), best->scenario.nodes, best_base->scenario.system.name,
          gpu_rate(best_base->scenario), best_base->scenario.nodes,
          best_base->scenario.nodes == 1 ? "all" : "part", pct(best->share(best->breakdown.comm)),
          pct(best_base->share(best_base->breakdown.comm)));
      break;
    }
  }
  c.difference = c.predicted - h.seed;
  return c;
}

Result<SeedsResult> predict_seeds(const SeedsScenario& s) {
  SeedsResult out;
  out.rows.reserve(s.runs.size());
  for (const SeedRun& run : s.runs) {
    auto res = predict_sweep({run.input}, SweepOptions{});
    if (!res)
      return Error{fmt::format(
          "seeds scenario, group '{}', model {}{}: {}", run.group, run.input.model,
          run.input.network.empty() ? "" : ", network " + run.input.network, res.error().message)};
    CS_CHECK(res->rows.size() == 1);
    if (!res->rows[0].fits) ++out.do_not_fit;
    out.rows.push_back(std::move(res->rows[0]));
    out.row_group.push_back(run.group);
  }
  for (const SeedHeadline& h : s.headlines) {
    CS_ASSIGN_OR_RETURN(auto c, compare_headline(h, out.rows, out.row_group));
    out.comparisons.push_back(std::move(c));
  }
  return out;
}

namespace {
std::string fmt_value(double v, const std::string& unit) {
  if (unit == "x") return fmt::format("{:.2f}x", v);
  if (unit == "%") return fmt::format("{:.1f}%", v);
  return fmt::format("{:.1f} {}", v, unit);
}
// A published figure as published (59.25%, 2.5x), not rounded to the predictions' digits.
std::string fmt_seed(double v, const std::string& unit) {
  if (unit == "x" || unit == "%") return fmt::format("{:g}{}", v, unit);
  return fmt::format("{:g} {}", v, unit);
}
}  // namespace

std::string render_seed_comparisons(const std::vector<SeedComparison>& cs, Format f) {
  if (f == Format::json) return seeds_json(SeedsResult{{}, {}, cs, 0})["seeds"].dump(2) + "\n";
  Table t;
  t.header = {"headline", "study", "seed", "commscope", "difference", "basis", "reason"};
  t.right = {false, false, true, true, true, false, false};
  for (const auto& c : cs) {
    const std::string unit = c.headline.unit;
    std::string diff = unit == "x"   ? fmt::format("{:+.2f}x", c.difference)
                       : unit == "%" ? fmt::format("{:+.1f} pt", c.difference)
                                     : fmt::format("{:+.1f} {}", c.difference, unit);
    t.add({c.headline.says, c.headline.study, fmt_seed(c.headline.seed, unit),
           fmt_value(c.predicted, unit), diff, c.where, c.reason});
  }
  switch (f) {
    case Format::csv:
      return render_csv(t);
    case Format::md:
      return render_markdown(t);
    default: {
      // The reasons are long: one block per headline reads better on a terminal than a table.
      std::string out = "Seed studies' headlines against commscope's predictions:\n";
      for (const auto& c : cs) {
        const std::string unit = c.headline.unit;
        out += fmt::format("\n  {} ({})\n", c.headline.says, c.headline.study);
        out += fmt::format("    seed {}   commscope {}   difference {}   ({})\n",
                           fmt_seed(c.headline.seed, unit), fmt_value(c.predicted, unit),
                           unit == "x"   ? fmt::format("{:+.2f}x", c.difference)
                           : unit == "%" ? fmt::format("{:+.1f} pt", c.difference)
                                         : fmt::format("{:+.1f} {}", c.difference, unit),
                           c.where);
        // Two bars on one scale: the seed's figure and commscope's.
        const double top = std::max(std::abs(c.headline.seed), std::abs(c.predicted));
        auto bar = [&](double v) {
          const int n = top > 0 ? static_cast<int>(std::lround(40 * std::abs(v) / top)) : 0;
          std::string b;
          for (int i = 0; i < n; ++i) b += "\u2588";
          return b;
        };
        out += fmt::format("    seed      {} {}\n", bar(c.headline.seed),
                           fmt_seed(c.headline.seed, unit));
        out += fmt::format("    commscope {} {}\n", bar(c.predicted), fmt_value(c.predicted, unit));
        out += fmt::format("    why: {}\n", c.reason);
      }
      return out;
    }
  }
}

std::string render_seeds(const SeedsResult& r, Format f) {
  switch (f) {
    case Format::json:
      return seeds_json(r).dump(2) + "\n";
    case Format::csv:
      return render_predictions(r.rows, f, false);
    default:
      return render_predictions(r.rows, f, false) + "\n" +
             render_seed_comparisons(r.comparisons, f);
  }
}

nlohmann::json seeds_json(const SeedsResult& r) {
  nlohmann::json j = {{"predictions", predictions_json(r.rows, false)}};
  auto& preds = j["predictions"];
  for (std::size_t i = 0; i < r.row_group.size() && i < preds.size(); ++i)
    preds[i]["seed_group"] = r.row_group[i];
  nlohmann::json cs = nlohmann::json::array();
  for (const auto& c : r.comparisons)
    cs.push_back({{"id", c.headline.id},
                  {"study", c.headline.study},
                  {"says", c.headline.says},
                  {"kind", std::string(to_string(c.headline.kind))},
                  {"unit", c.headline.unit},
                  {"seed", c.headline.seed},
                  {"predicted", c.predicted},
                  {"difference", c.difference},
                  {"basis", c.basis},
                  {"where", c.where},
                  {"reason", c.reason}});
  j["seeds"] = std::move(cs);
  return j;
}

}  // namespace commscope
