// Prediction rows, scaling, the seeds' projection, and their printing.
#include "commscope/report/predict.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commscope/cost/collective.h"
#include "commscope/spec/limits.h"
#include "commscope/timeline/breakdown_json.h"
#include "commscope/timeline/chrome.h"
#include "commscope/workload/params.h"

namespace commscope {

PredictRow predict_row(const Workload& w, const Prediction& p) {
  const Scenario& sc = w.scenario;
  PredictRow r;
  r.scenario = sc;
  r.iteration_time = p.iteration_time;
  const double tokens = iteration_tokens(sc);
  const FlopCount f = iteration_flops(w);
  r.tokens_per_s = tokens / p.iteration_time;
  r.tflops_per_gpu = f.model / p.iteration_time / sc.gpus() / 1e12;
  r.mfu = f.model / p.iteration_time / sc.gpus() /
          sc.system.gpu.peak.for_dtype(sc.plan.dtype()).value();
  r.breakdown = p.mean;
  r.straggler_wait = p.straggler_wait;
  for (const auto& s : p.stages) r.stage_times.push_back(s.end);
  for (const Role& role : w.roles) {
    double m = memory_per_rank(w, role).total().value();
    r.memory_per_gpu = std::max(r.memory_per_gpu, m);
  }
  // (and under ZeRO-Offload, the node's share of the optimizer in its host memory)
  r.fits = r.memory_per_gpu <= sc.system.gpu.memory.value() && offload_fits_host(w);
  // Which source each collective's cost came from (the simulator asks collective_cost the same).
  const LinkModel links = link_model(sc);
  GroupPlacement place[kCommGroupCount];
  for (auto g : {CommGroup::data, CommGroup::tensor, CommGroup::pipeline, CommGroup::embedding,
                 CommGroup::expert, CommGroup::context, CommGroup::expert_data})
    place[static_cast<int>(g)] = place_group(sc, g);
  // Distinct (collective, group, size) triples are few; each is priced once.
  struct Seen {
    Collective c;
    CommGroup g;
    double bytes;
  };
  std::vector<Seen> seen;
  auto mark = [&](const OpList& ops) {
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      if (op.kind == OpKind::compute) continue;
      if (std::any_of(seen.begin(), seen.end(), [&](const Seen& x) {
            return x.c == op.collective && x.g == op.group && x.bytes == op.bytes;
          }))
        continue;
      seen.push_back({op.collective, op.group, op.bytes});
      const auto& g = place[static_cast<int>(op.group)];
      const bool curve = curve_for(op.collective, g, links) != nullptr;
      const auto c = static_cast<std::size_t>(op.collective);
      r.cost_sources[c] |= curve ? 2 : 1;
      if (curve) continue;
      const CollectiveCost cost = collective_cost(op.collective, op.bytes, g, links);
      if (cost.time.value() > 0) r.cost_paths[c] |= std::uint16_t(1u << cost_path_index(cost));
    }
  };
  for (const Role& role : w.roles) {
    for (const Chunk& c : role.chunks) mark(c.forward), mark(c.backward), mark(c.forward_first);
    mark(role.step);
  }
  return r;
}

int cost_path_index(const CollectiveCost& c) {
  switch (c.algorithm) {
    case CollectiveAlgorithm::tree:
      return 3 + static_cast<int>(c.protocol) - 1;
    case CollectiveAlgorithm::p2p:
      return 6;
    case CollectiveAlgorithm::hierarchical:
      return 7;
    case CollectiveAlgorithm::nvls:
      return 8;
    case CollectiveAlgorithm::nvls_tree:
      return 9;
    case CollectiveAlgorithm::collnet_direct:
      return 10;
    case CollectiveAlgorithm::collnet_chain:
      return 11;
    default:
      return static_cast<int>(c.protocol) - 1;
  }
}

std::string_view cost_path_name(int i) {
  static constexpr std::string_view kNames[] = {"model:ring/LL",
                                                "model:ring/LL128",
                                                "model:ring/Simple",
                                                "model:tree/LL",
                                                "model:tree/LL128",
                                                "model:tree/Simple",
                                                "model:p2p/Simple",
                                                "model:hierarchical/Simple",
                                                "model:nvls/Simple",
                                                "model:nvls_tree/Simple",
                                                "model:collnet_direct/Simple",
                                                "model:collnet_chain/Simple"};
  return i >= 0 && i < kCostPathCount ? kNames[i] : "";
}

namespace {
// "curve" (every use from a measured curve), "model" (none), "mixed" (some groups each way).
std::string_view cost_source_name(std::uint8_t bits) {
  return bits == 2 ? "curve" : bits == 1 ? "model" : bits == 3 ? "mixed" : "";
}

// The text table's footnote when a network profile's curves priced any collective.
std::string cost_source_note(const std::vector<PredictRow>& rows) {
  std::array<std::uint8_t, kCollectiveCount> all{};
  for (const auto& r : rows)
    for (std::size_t c = 0; c < kCollectiveCount; ++c) all[c] |= r.cost_sources[c];
  if (std::none_of(all.begin(), all.end(), [](std::uint8_t b) { return b & 2; })) return "";
  std::string note = "collective costs:";
  for (std::size_t c = 0; c < kCollectiveCount; ++c)
    if (all[c])
      note += fmt::format(" {} {};", to_string(static_cast<Collective>(c)),
                          all[c] == 2   ? "from measured curves"
                          : all[c] == 1 ? "from the model"
                                        : "from curves where the scope has one, else the model");
  note.back() = '\n';
  return note;
}
// One prediction's communication per group and collective, causal (total, exposed) beside
// the profiler's view (each call from entry, the wait for peers included), then which path
// priced each collective and the scale effects.
std::string comm_detail(const PredictRow& r) {
  const Breakdown& b = r.breakdown;
  Table t;
  t.header = {"communication", "total", "exposed", "profiler", "profiler - total"};
  t.right = {false, true, true, true, true};
  auto ms = [](double x) { return fmt::format("{:.3f} ms", x * 1e3); };
  auto add = [&](std::string name, const CommShare& s) {
    t.add({std::move(name), ms(s.total), ms(s.exposed), ms(s.profiler), ms(s.profiler - s.total)});
  };
  b.by_group.for_each(
      [&](CommGroup g, const CommShare& s) { add(fmt::format("group {}", to_string(g)), s); });
  b.by_collective.for_each(
      [&](Collective c, const CommShare& s) { add(std::string(to_string(c)), s); });
  if (t.rows.empty()) return "";
  std::string out = "\n" + render_text(t, "");
  std::string paths;
  for (std::size_t c = 0; c < kCollectiveCount; ++c) {
    if (!r.cost_sources[c]) continue;
    std::string list = r.cost_sources[c] & 2 ? "curve" : "";
    for (int i = 0; i < kCostPathCount; ++i)
      if (r.cost_paths[c] & (1u << i))
        list += fmt::format("{}{}", list.empty() ? "" : ", ", cost_path_name(i));
    paths += fmt::format(" {} {};", to_string(static_cast<Collective>(c)), list);
  }
  if (!paths.empty()) {
    paths.back() = '\n';
    out += "collective paths:" + paths;
  }
  const ScaleEffects& e = r.scenario.system.scale;
  out += fmt::format(
      "scale effects: stragglers cv {:g} (wait {:.3f} ms per iteration); oversubscription {:g} "
      "above {} nodes; NIC sharing {}\n",
      e.straggler_cv, r.straggler_wait * 1e3, e.oversubscription, e.leaf_nodes,
      e.nic_sharing ? "on" : "off");
  return out;
}
}  // namespace

namespace {
// Model TFLOP per GPU per iteration.
double work_per_gpu(const PredictRow& r) {
  return r.tflops_per_gpu * r.iteration_time;
}
// Modelled time of the data-parallel all-reduce of one rank's gradients.
double dp_allreduce_time(const PredictRow& r) {
  const Scenario& sc = r.scenario;
  const double bytes = static_cast<double>(count_params(sc.model).total) /
                       (sc.plan.tp * sc.plan.pp) * dtype_bytes(sc.plan.dtype());
  return collective_time(Collective::all_reduce, bytes, place_group(sc, CommGroup::data),
                         link_model(sc))
      .value();
}
}  // namespace

namespace {
// What a row's scaling series shares: everything but its scale (nodes, GPUs, and what they
// derive: DP, the micro-batches per iteration, and under weak scaling the global batch). A
// sweep of two models, micro-batches or global batches compared each row with the first row
// of the sweep (bert-base at 595% scaling efficiency against gpt2-large; found by probing,
// 2026-12-02).
std::string series_key(const PredictRow& r, Scaling scaling) {
  nlohmann::json plan = to_json(r.scenario.plan);
  for (const char* derived : {"dp", "grad_accum"}) plan.erase(derived);
  if (scaling == Scaling::weak) plan.erase("global_batch");
  return fmt::format("{}\n{}\n{}\n{}", r.scenario.model.name, r.scenario.system.name,
                     r.scenario.network.name, plan.dump());
}
}  // namespace

void add_scaling(std::vector<PredictRow>& rows, Scaling scaling) {
  std::map<std::string, std::size_t> first;  // series -> its first row
  for (std::size_t i = 0; i < rows.size(); ++i) {
    PredictRow& r = rows[i];
    const PredictRow& g = rows[first.emplace(series_key(r, scaling), i).first->second];
    const double t_comm_g = g.breakdown.exposed, t_compute_g = g.iteration_time - t_comm_g;
    const double ar_g = dp_allreduce_time(g);
    r.speedup = r.tokens_per_s / g.tokens_per_s;
    r.scaling_efficiency = r.speedup * g.scenario.gpus() / r.scenario.gpus();
    const double ar_n = dp_allreduce_time(r);
    r.network_efficiency = ar_n > 0 && ar_g > 0 ? ar_g / ar_n : 1.0;
    const double work_ratio = work_per_gpu(r) / work_per_gpu(g);
    r.projected_time = t_compute_g * work_ratio + t_comm_g / r.network_efficiency;
    r.projection_error = r.projected_time / r.iteration_time - 1.0;
  }
}

std::optional<SortKey> sort_key_from_name(std::string_view s) {
  if (s == "time") return SortKey::time;
  if (s == "tokens") return SortKey::tokens;
  if (s == "mfu") return SortKey::mfu;
  if (s == "memory") return SortKey::memory;
  return std::nullopt;
}

namespace {
// "field: expected X, got Y" without the value: plans skipped for one reason share it.
std::string skip_reason(const std::string& message) {
  auto got = message.rfind(", got ");
  return got == std::string::npos ? message : message.substr(0, got);
}

void sort_rows(std::vector<PredictRow>& rows, SortKey key) {
  auto by = [&](auto f, bool ascending) {
    std::stable_sort(rows.begin(), rows.end(), [&](const PredictRow& a, const PredictRow& b) {
      return ascending ? f(a) < f(b) : f(a) > f(b);
    });
  };
  switch (key) {
    case SortKey::none:
      break;
    case SortKey::time:
      by([](const PredictRow& r) { return r.iteration_time; }, true);
      break;
    case SortKey::tokens:
      by([](const PredictRow& r) { return r.tokens_per_s; }, false);
      break;
    case SortKey::mfu:
      by([](const PredictRow& r) { return r.mfu; }, false);
      break;
    case SortKey::memory:
      by([](const PredictRow& r) { return r.memory_per_gpu; }, true);
      break;
  }
  // The best plans are plans that run: those that fit in GPU memory first, each part in the
  // key's order (--sort mfu --top 3 listed three that need 128-346 GiB of 80 GiB GPUs, found by
  // probing, 2026-11-30).
  if (key != SortKey::none)
    std::stable_partition(rows.begin(), rows.end(), [](const PredictRow& r) { return r.fits; });
}
}  // namespace

Result<SweepResult> predict_sweep(const std::vector<ScenarioInput>& inputs_in,
                                  const SweepOptions& o) {
  SweepResult out;
  std::vector<ScenarioInput> inputs = inputs_in;
  out.plans = inputs.size();
  const bool single = inputs.size() == 1;
  if (o.trace && !single)
    return Error{
        fmt::format("--trace: expected a single scenario, got {} combinations", inputs.size())};
  if (o.top < 0)
    return Error{fmt::format("--top: expected a non-negative integer, got '{}'", o.top)};
  if (o.scaling == Scaling::weak)
    for (const auto& in : inputs)
      if (in.plan.global_batch)
        return Error{fmt::format(
            "--global-batch-size: expected none under --scaling weak (the per-GPU batch is "
            "kept, the global batch grows with DP), got {}",
            *in.plan.global_batch)};
  if (o.scaling == Scaling::strong) {
    // One global batch for every point: the largest point's default (micro-batch x DP).
    bool given = false;
    for (const auto& in : inputs) given |= in.plan.global_batch.has_value();
    if (!given) {
      std::int64_t global = 0;
      for (const auto& in : inputs)
        if (auto sc = resolve_scenario(in)) global = std::max(global, sc->plan.global_batch);
      if (global > 0)
        for (auto& in : inputs) in.plan.global_batch = global;
    }
  }
  // Per field: plans skipped, the first reason, whether all reasons were the same.
  struct Reason {
    std::size_t count = 0;
    std::string first;
    bool varied = false;
  };
  std::map<std::string, Reason> reasons;
  // What the models' loaders assumed (transformers' defaults), once per model in a sweep (a
  // single plan's come with its warnings).
  std::vector<std::string> model_notes;
  std::int64_t tasks = 0;  // simulated so far (limits::simulated_tasks)
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    auto sc = resolve_scenario(inputs[i]);
    if (sc)
      for (const std::string& note : sc->model.notes)
        if (std::find(model_notes.begin(), model_notes.end(), note) == model_notes.end())
          model_notes.push_back(note);
    if (!sc) {
      if (single) return sc.error();
      ++out.skipped;
      const std::string why = skip_reason(sc.error().message);
      const auto colon = why.find(": expected ");
      Reason& r = reasons[colon == std::string::npos ? why : why.substr(0, colon)];
      const std::string rest = colon == std::string::npos ? "" : why.substr(colon + 2);
      if (r.count++ == 0)
        r.first = rest;
      else
        r.varied |= rest != r.first;
    } else {
      // The sweep's work is bounded in all, not only per plan (docs/limits.md).
      tasks += limits::simulated_tasks(sc->plan.pp, sc->plan.virtual_stages, sc->plan.grad_accum);
      if (tasks > o.max_tasks)
        return Error{fmt::format(
            "sweep: expected at most {} pipeline tasks in all (PP x virtual stages x "
            "micro-batches, summed over the plans with PP above 1; commscope's limit, "
            "docs/limits.md), got {} by plan {} of {}; sweep fewer plans or fewer micro-batches",
            o.max_tasks, tasks, i + 1, inputs.size())};
      Workload w = build_workload(*sc);
      SimOptions so;
      so.timeline = o.trace;
      if (so.timeline) CS_RETURN_IF_ERROR(check_timeline_size(w));
      Prediction p = simulate(w, so);
      out.rows.push_back(predict_row(w, p));
      if (!out.rows.back().fits) ++out.do_not_fit;
      // A sweep's per-plan warnings (the model's notes lead them and are listed once): counted
      // and summarised in one line, each plan's in its JSON row (they were dropped: a Megatron
      // vocabulary padded at one TP of a sweep said nothing, found by probing, 2026-11-30).
      if (!single && sc->warnings.size() > sc->model.notes.size()) {
        ++out.warned;
        for (std::size_t k = sc->model.notes.size(); k < sc->warnings.size(); ++k)
          if (std::find(out.plan_warnings.begin(), out.plan_warnings.end(), sc->warnings[k]) ==
              out.plan_warnings.end())
            out.plan_warnings.push_back(sc->warnings[k]);
      }
      if (single) {
        out.warnings = sc->warnings;
        if (!offload_fits_host(w))
          out.warnings.push_back(fmt::format(
              "does not fit: offload holds {:.1f} GiB of {} in each node's host memory, {:.1f} "
              "GiB available",
              units::to_gib(offload_host_bytes_per_node(w)), offload_host_contents(sc->plan),
              units::to_gib(sc->system.node.host_memory)));
        else if (!out.rows.back().fits)
          out.warnings.push_back(fmt::format("does not fit: {} per GPU needed, {} available",
                                             human_bytes(Bytes(out.rows.back().memory_per_gpu)),
                                             human_bytes(sc->system.gpu.memory)));
      }
      if (so.timeline) {
        CS_RETURN_IF_ERROR(check_chrome_trace(p.timeline, "--trace"));
        out.trace_json = chrome_trace_json(p.timeline);
      }
    }
    if (o.progress) o.progress(i + 1, inputs.size());
  }
  for (const auto& [field, r] : reasons)
    out.skip_reasons.emplace_back(
        r.first.empty() ? field : fmt::format("{} ({}{})", field, r.varied ? "e.g. " : "", r.first),
        r.count);
  std::stable_sort(out.skip_reasons.begin(), out.skip_reasons.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  if (out.rows.empty())
    return Error{fmt::format("no valid scenario among {} combinations; most frequent reason: {}",
                             inputs.size(), out.skip_reasons.front().first)};
  if (!single) {
    out.warnings = model_notes;
    for (std::string& w : sweep_summary(out)) out.warnings.push_back(std::move(w));
  }
  if (o.scaling != Scaling::none) add_scaling(out.rows, o.scaling);
  sort_rows(out.rows, o.sort == SortKey::none && o.top > 0 ? SortKey::time : o.sort);
  if (o.top > 0 && static_cast<std::size_t>(o.top) < out.rows.size())
    out.rows.resize(static_cast<std::size_t>(o.top));
  return out;
}

std::vector<std::string> sweep_summary(const SweepResult& r) {
  std::vector<std::string> lines;
  if (r.skipped > 0) {
    std::string s = fmt::format("{} of {} plans skipped:", r.skipped, r.plans);
    const std::size_t shown = std::min<std::size_t>(r.skip_reasons.size(), 4);
    for (std::size_t i = 0; i < shown; ++i)
      s += fmt::format("{} {} {}", i ? ";" : "", r.skip_reasons[i].second, r.skip_reasons[i].first);
    std::size_t rest = 0;
    for (std::size_t i = shown; i < r.skip_reasons.size(); ++i) rest += r.skip_reasons[i].second;
    if (rest > 0) s += fmt::format("; {} x {} other reasons", rest, r.skip_reasons.size() - shown);
    lines.push_back(std::move(s));
  }
  if (r.do_not_fit > 0)
    lines.push_back(
        fmt::format("{} of {} predicted plans do not fit in GPU memory (their fits column says no)",
                    r.do_not_fit, r.plans - r.skipped));
  if (r.warned > 0 && !r.plan_warnings.empty())
    lines.push_back(
        fmt::format("{} of {} predicted plans came with warnings ({} distinct{}: {}){}", r.warned,
                    r.plans - r.skipped, r.plan_warnings.size(),
                    r.plan_warnings.size() > 1 ? ", the first" : "", r.plan_warnings.front(),
                    r.plan_warnings.size() > 1 ? "; --format json lists each plan's" : ""));
  return lines;
}

nlohmann::json scale_effects_json(const PredictRow& r) {
  const Scenario& sc = r.scenario;
  const ScaleEffects& e = sc.system.scale;
  nlohmann::json sharing = nlohmann::json::object();
  for (auto g : {CommGroup::data, CommGroup::tensor, CommGroup::pipeline}) {
    // A group the plan does not have is not listed (a PP 1 plan listed a pipeline pair spanning
    // two nodes, found by probing, 2026-11-30).
    const int size = g == CommGroup::data     ? sc.plan.dp
                     : g == CommGroup::tensor ? sc.plan.tp
                                              : sc.plan.pp;
    if (size < 2) continue;
    const GroupPlacement p = place_group(sc, g);
    if (p.nodes > 1)
      sharing[std::string(to_string(g))] = {
          {"nodes", p.nodes},
          {"groups_per_nic_set", p.concurrent},
          {"oversubscribed", p.nodes > e.leaf_nodes && e.oversubscription > 1}};
  }
  return {{"straggler_cv", e.straggler_cv},           {"straggler_wait_s", r.straggler_wait},
          {"oversubscription", e.oversubscription},   {"leaf_nodes", e.leaf_nodes},
          {"switch_latency_us", e.switch_latency_us}, {"nic_sharing", e.nic_sharing},
          {"nics_per_group", e.nics_per_group},       {"inter_node_groups", std::move(sharing)}};
}

nlohmann::json predictions_json(const std::vector<PredictRow>& rows, bool scaling) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows) {
    const auto& sc = r.scenario;
    nlohmann::json j = {{"model", sc.model.name},
                        {"system", sc.system.name},
                        {"network", sc.network.name},
                        {"nodes", sc.nodes},
                        {"gpus", sc.gpus()},
                        {"plan", to_json(sc.plan)},
                        {"iteration_time_s", r.iteration_time},
                        {"tokens_per_s", r.tokens_per_s},
                        {"tflops_per_gpu", r.tflops_per_gpu},
                        {"mfu", r.mfu},
                        {"memory_per_gpu_bytes", r.memory_per_gpu},
                        {"fits", r.fits},
                        {"stage_end_s", r.stage_times},
                        {"warnings", sc.warnings}};
    // The breakdown's one JSON form, flat in the row, and each part's share of the iteration.
    const Breakdown& b = r.breakdown;
    j.update(breakdown_to_json(b));
    j["comm_share"] = r.share(comm_running(b));
    j["exposed_comm_share"] = r.share(b.exposed);
    j["bubble_share"] = r.share(b.bubble);
    nlohmann::json sources = nlohmann::json::object();
    for (std::size_t c = 0; c < kCollectiveCount; ++c)
      if (r.cost_sources[c])
        sources[std::string(to_string(static_cast<Collective>(c)))] =
            cost_source_name(r.cost_sources[c]);
    j["cost_source"] = std::move(sources);
    // Which of NCCL's paths priced each collective without a curve.
    nlohmann::json paths = nlohmann::json::object();
    for (std::size_t c = 0; c < kCollectiveCount; ++c) {
      if (!r.cost_sources[c]) continue;
      nlohmann::json list = nlohmann::json::array();
      if (r.cost_sources[c] & 2) list.push_back("curve");
      for (int i = 0; i < kCostPathCount; ++i)
        if (r.cost_paths[c] & (1u << i)) list.push_back(cost_path_name(i));
      paths[std::string(to_string(static_cast<Collective>(c)))] = std::move(list);
    }
    j["cost_path"] = std::move(paths);
    j["scale_effects"] = scale_effects_json(r);
    if (scaling) {
      j["speedup"] = r.speedup;
      j["scaling_efficiency"] = r.scaling_efficiency;
      j["network_efficiency"] = r.network_efficiency;
      j["projected_iteration_time_s"] = r.projected_time;
      j["projection_error"] = r.projection_error;
    }
    out.push_back(std::move(j));
  }
  return out;
}

std::string render_predictions(const std::vector<PredictRow>& rows, Format f, bool scaling) {
  if (f == Format::json)
    return nlohmann::json{{"predictions", predictions_json(rows, scaling)}}.dump(2) + "\n";
  const bool human = f != Format::csv;
  // The plan's other sizes: CSV has them always (as describe's CSV), the table and Markdown
  // where a row has one that is not 1 (a --vp sweep's rows looked alike without them).
  bool vp = !human, cp = !human, ep = !human;
  for (const auto& r : rows) {
    vp = vp || r.scenario.plan.virtual_stages > 1;
    cp = cp || r.scenario.plan.cp > 1;
    // (a dense model's expert TP is its TP: "ep 1, expert_tp 2" on bert-large, found by
    // checking, 2026-12-02)
    ep =
        ep || (r.scenario.model.moe() && (r.scenario.plan.ep > 1 || r.scenario.plan.expert_tp > 1));
  }
  Table t;
  t.header = {"model", "system", "network", "nodes", "gpus", "dp", "tp", "pp"};
  if (vp) t.header.push_back("vp");
  if (cp) t.header.push_back("cp");
  if (ep) t.header.insert(t.header.end(), {"ep", "expert_tp"});
  t.header.insert(t.header.end(), {"zero", "mbs", "gbs"});
  if (!human) t.header.push_back("pipeline_schedules");
  if (human) {
    t.header.insert(t.header.end(), {"iter", "tokens/s", "TFLOP/s/GPU", "MFU", "comm", "exposed",
                                     "bubble", "prof comm", "mem/GPU", "fits"});
    if (scaling)
      t.header.insert(t.header.end(), {"speedup", "scaling eff", "projected", "proj err"});
  } else {
    t.header.insert(t.header.end(),
                    {"iteration_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "comm_share",
                     "exposed_comm_share", "bubble_share", "exposed_comm_s", "memory_per_gpu_bytes",
                     "fits", "profiler_comm_share", "straggler_wait_s"});
    if (scaling)
      t.header.insert(t.header.end(), {"speedup", "scaling_efficiency",
                                       "projected_iteration_time_s", "projection_error"});
  }
  t.right.assign(t.header.size(), true);
  for (int i = 0; i < 3; ++i) t.right[i] = false;
  for (const auto& r : rows) {
    const auto& sc = r.scenario;
    const auto& p = sc.plan;
    const Breakdown b = with_comm_running(r.breakdown);  // shares of a union (<= 100%)
    std::vector<std::string> row = {
        sc.model.name,
        sc.system.name,
        sc.network.name,
        std::to_string(sc.nodes),
        std::to_string(sc.gpus()),
        std::to_string(p.dp),
        std::to_string(p.tp) + (p.sequence_parallel && human ? "sp" : ""),
        std::to_string(p.pp)};
    if (vp) row.push_back(std::to_string(p.virtual_stages));
    if (cp) row.push_back(std::to_string(p.cp));
    if (ep) row.insert(row.end(), {std::to_string(p.ep), std::to_string(p.expert_tp)});
    row.insert(row.end(), {std::to_string(p.zero), std::to_string(p.micro_batch),
                           std::to_string(p.global_batch)});
    if (!human) row.push_back(std::to_string(p.pipeline_rounds));
    if (human) {
      auto pct = [&](double x) { return fmt::format("{:.1f}%", 100 * r.share(x)); };
      row.insert(
          row.end(),
          {r.iteration_time >= 1 ? fmt::format("{:.3f} s", r.iteration_time)
                                 : fmt::format("{:.1f} ms", r.iteration_time * 1e3),
           human_si(r.tokens_per_s, ""), fmt::format("{:.1f}", r.tflops_per_gpu),
           fmt::format("{:.1f}%", 100 * r.mfu), pct(b.comm), pct(b.exposed), pct(b.bubble),
           pct(b.profiler_comm), human_bytes(Bytes(r.memory_per_gpu)), r.fits ? "yes" : "NO"});
      if (scaling)
        row.insert(
            row.end(),
            {fmt::format("{:.2f}x", r.speedup), fmt::format("{:.1f}%", 100 * r.scaling_efficiency),
             r.projected_time >= 1 ? fmt::format("{:.3f} s", r.projected_time)
                                   : fmt::format("{:.1f} ms", r.projected_time * 1e3),
             fmt::format("{:+.1f}%", 100 * r.projection_error)});
    } else {
      row.insert(row.end(),
                 {fmt::format("{:.6g}", r.iteration_time), fmt::format("{:.6g}", r.tokens_per_s),
                  fmt::format("{:.6g}", r.tflops_per_gpu), fmt::format("{:.6g}", r.mfu),
                  fmt::format("{:.6g}", r.share(b.comm)), fmt::format("{:.6g}", r.share(b.exposed)),
                  fmt::format("{:.6g}", r.share(b.bubble)), fmt::format("{:.6g}", b.exposed),
                  fmt::format("{:.0f}", r.memory_per_gpu), r.fits ? "true" : "false",
                  fmt::format("{:.6g}", r.share(b.profiler_comm)),
                  fmt::format("{:.6g}", r.straggler_wait)});
      if (scaling)
        row.insert(
            row.end(),
            {fmt::format("{:.6g}", r.speedup), fmt::format("{:.6g}", r.scaling_efficiency),
             fmt::format("{:.6g}", r.projected_time), fmt::format("{:.6g}", r.projection_error)});
    }
    t.add(std::move(row));
  }
  switch (f) {
    case Format::csv:
      return render_csv(t);
    case Format::md:
      return render_markdown(t);
    default:
      return render_text(t, "") + cost_source_note(rows) +
             (rows.size() == 1 ? comm_detail(rows.front()) : std::string());
  }
}

}  // namespace commscope
