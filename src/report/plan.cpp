// `commscope plan`'s documents (report/plan.h).
#include "commscope/report/plan.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace commscope {

namespace {
using search::Evaluated;
using search::Ranked;
using search::WhatIf;

std::string time_text(double t) {
  return t >= 1 ? fmt::format("{:.3f} s", t) : fmt::format("{:.1f} ms", t * 1e3);
}
double share(const Evaluated& e, double part) {
  return e.iteration_time > 0 ? part / e.iteration_time : 0;
}
std::string option_of(const PlanReport& r, const WhatIf& w) {
  return w.option.empty() ? (r.what_if_kind == "system" ? r.system : r.network) : w.option;
}

// Uneven stages as "7+14x8+7" (first + others x each + last); even: "" in a table, "even" in CSV.
std::string stage_layers_text(const search::PlanPoint& p, bool human) {
  if (p.first_layers == 0) return human ? "" : "even";
  return fmt::format("{}+{}x{}+{}", p.first_layers, p.pp * p.virtual_stages - 2, p.middle_layers,
                     p.last_layers);
}

// The cp column: the size, or under a2a+p2p its levels, "2x4" (all-to-all x ring).
std::string cp_text(const search::PlanPoint& p) {
  if (p.cp > 1 && p.cp_a2a > 0) return fmt::format("{}x{}", p.cp_a2a, p.cp / p.cp_a2a);
  return std::to_string(p.cp);
}

// The framework column: "" (table) or "commscope" (CSV) for commscope's own pattern;
// "fsdp hybrid_shard", "fsdp hybrid_shard/16" (a shard group of 16 ranks, not one node's),
// "megatron" ... otherwise.
std::string framework_text(const search::PlanPoint& p, bool human) {
  if (p.framework == Framework::none) return human ? "" : "commscope";
  if (p.framework == Framework::fsdp)
    return fmt::format("fsdp{}{}{}", human ? " " : ":", to_string(p.fsdp_sharding),
                       p.fsdp_shard_size > 0 ? fmt::format("/{}", p.fsdp_shard_size) : "");
  return std::string(search::framework_choice_name(p.framework));
}

nlohmann::json plan_row(const Ranked& x, int rank) {
  const auto& p = x.plan;
  const auto& e = x.result;
  nlohmann::json j = {
      {"rank", rank},
      {"tp", p.tp},
      {"pp", p.pp},
      {"virtual_stages", p.virtual_stages},
      {"dp", p.dp},
      {"cp", p.cp},
      // a2a+p2p: [all-to-all level, ring level] (Megatron-LM's
      // --hierarchical-context-parallel-sizes); null for the other forms
      {"hierarchical_context_parallel_sizes", p.cp > 1 && p.cp_a2a > 0
                                                  ? nlohmann::json({p.cp_a2a, p.cp / p.cp_a2a})
                                                  : nlohmann::json(nullptr)},
      {"ep", p.ep},
      {"expert_tp", p.expert_tp > 0 ? p.expert_tp : p.tp},
      {"first_stage_layers", p.first_layers},
      {"last_stage_layers", p.last_layers},
      {"zero", p.zero},
      {"micro_batch", p.micro_batch},
      {"global_batch", p.global_batch},
      {"recompute", std::string(to_string(p.recompute))},
      {"sequence_parallel", p.sequence_parallel},
      {"schedule", std::string(to_string(p.schedule))},
      {"rank_order", std::string(to_string(p.rank_order))},
      {"framework", std::string(search::framework_choice_name(p.framework))},
      {"fsdp_sharding", p.framework == Framework::fsdp
                            ? nlohmann::json(std::string(to_string(p.fsdp_sharding)))
                            : nlohmann::json(nullptr)},
      {"fsdp_shard_size",
       p.fsdp_shard_size > 0 ? nlohmann::json(p.fsdp_shard_size) : nlohmann::json(nullptr)},
      {"plan", search::describe(p)},
      {"iteration_time_s", e.iteration_time},
      {"time_for_global_batch_s", e.score_time},
      {"tokens_per_s", e.tokens_per_s},
      {"mfu", e.mfu},
      {"compute_s", e.compute},
      {"comm_s", e.comm},
      {"exposed_comm_s", e.exposed},
      {"bubble_s", e.bubble},
      {"comm_share", share(e, e.comm)},
      {"exposed_comm_share", share(e, e.exposed)},
      {"bubble_share", share(e, e.bubble)},
      {"memory_per_gpu_bytes", e.memory},
      {"memory_bound_bytes", e.memory_bound},
      {"gpu_memory_bytes", e.gpu_memory},
      {"memory_headroom_bytes", e.headroom},
      {"comm_booked_s", e.comm_booked},
      {"nodes", e.nodes}};
  j["cost_usd"] = e.cost > 0 ? nlohmann::json(e.cost) : nlohmann::json(nullptr);
  j["energy_j"] = e.energy > 0 ? nlohmann::json(e.energy) : nlohmann::json(nullptr);
  return j;
}

// How the option's best compares with the first option's (the what-if).
std::string what_if_text(const std::vector<WhatIf>& options, std::size_t i, search::Objective o) {
  const Evaluated& first = options.front().result.top.front().result;
  const Evaluated& best = options[i].result.top.front().result;
  const double v0 = search::objective_value(first, o), v = search::objective_value(best, o);
  std::string s = fmt::format("best {} ({:+.1f}% against {})",
                              search::describe(options[i].result.top.front().plan),
                              100 * (v / v0 - 1), options.front().option);
  if (!options[i].first_plan_here) {
    s += fmt::format("; {}'s best plan is not valid or does not fit here", options.front().option);
    return s;
  }
  const double vf = search::objective_value(*options[i].first_plan_here, o);
  s += fmt::format("; {}'s best plan here: {:+.1f}%", options.front().option, 100 * (vf / v0 - 1));
  if (vf > v && vf > v0)
    s += fmt::format(", so a different plan recovers {:.0f}% of the change",
                     100 * (vf - v) / (vf - v0));
  else
    s += ", the same plan is best here";
  return s;
}

Table plans_table(const PlanReport& r, bool human) {
  Table t;
  const bool many = r.options.size() > 1;
  if (many) t.header.push_back(r.what_if_kind);
  t.header.insert(t.header.end(),
                  {"rank", "tp", "pp", "v", human ? "layers" : "stage_layers", "dp", "cp", "ep",
                   "zero", "framework", "mbs", "gbs", "recompute",
                   human ? "sp" : "sequence_parallel", "schedule", human ? "order" : "rank_order"});
  if (human)
    t.header.insert(t.header.end(), {"iter", "tokens/s", "MFU", "comm", "exposed", "bubble",
                                     "mem/GPU", "usable", "cost", "energy"});
  else
    t.header.insert(t.header.end(),
                    {"iteration_time_s", "time_for_global_batch_s", "tokens_per_s", "mfu",
                     "comm_share", "exposed_comm_share", "bubble_share", "memory_per_gpu_bytes",
                     "memory_usable_bytes", "cost_usd", "energy_j"});
  t.right.assign(t.header.size(), true);
  if (many) t.right[0] = false;
  for (const WhatIf& w : r.options) {
    int rank = 0;
    for (const Ranked& x : w.result.top) {
      const auto& p = x.plan;
      const auto& e = x.result;
      std::vector<std::string> row;
      if (many) row.push_back(option_of(r, w));
      row.insert(row.end(),
                 {std::to_string(++rank), std::to_string(p.tp), std::to_string(p.pp),
                  std::to_string(p.virtual_stages), stage_layers_text(p, human),
                  std::to_string(p.dp), cp_text(p), std::to_string(p.ep), std::to_string(p.zero),
                  framework_text(p, human), std::to_string(p.micro_batch),
                  std::to_string(p.global_batch), std::string(to_string(p.recompute)),
                  p.sequence_parallel ? (human ? "yes" : "true") : (human ? "" : "false"),
                  std::string(to_string(p.schedule)), std::string(to_string(p.rank_order))});
      if (human) {
        auto pct = [&](double part) { return fmt::format("{:.1f}%", 100 * share(e, part)); };
        row.insert(row.end(),
                   {time_text(e.iteration_time), human_si(e.tokens_per_s, ""),
                    fmt::format("{:.1f}%", 100 * e.mfu), pct(e.comm), pct(e.exposed), pct(e.bubble),
                    human_bytes(Bytes(e.memory)), human_bytes(Bytes(e.gpu_memory - e.headroom)),
                    e.cost > 0 ? fmt::format("${:.4g}", e.cost) : "-",
                    e.energy > 0 ? fmt::format("{:.4g} kJ", e.energy / 1e3) : "-"});
      } else {
        row.insert(
            row.end(),
            {fmt::format("{:.6g}", e.iteration_time), fmt::format("{:.6g}", e.score_time),
             fmt::format("{:.6g}", e.tokens_per_s), fmt::format("{:.6g}", e.mfu),
             fmt::format("{:.6g}", share(e, e.comm)), fmt::format("{:.6g}", share(e, e.exposed)),
             fmt::format("{:.6g}", share(e, e.bubble)), fmt::format("{:.0f}", e.memory),
             fmt::format("{:.0f}", e.gpu_memory - e.headroom),
             e.cost > 0 ? fmt::format("{:.6g}", e.cost) : "",
             e.energy > 0 ? fmt::format("{:.6g}", e.energy) : ""});
      }
      t.add(std::move(row));
    }
  }
  return t;
}

std::string counts_text(const search::SearchResult& s) {
  return fmt::format(
      "{} candidate plans: {} not valid, {} pruned by the memory bound, {} over memory, {} "
      "skipped (fit, but a lower bound on their time cannot reach the top; {} of them before "
      "their ops were built), {} predicted",
      s.candidates, s.invalid, s.pruned, s.no_fit, s.skipped, s.skipped_unbuilt, s.evaluated);
}

// The explanation lines of one option: why each beats the next, the rules, the what-if.
std::vector<std::string> explanation(const PlanReport& r, std::size_t i) {
  std::vector<std::string> lines;
  const auto& s = r.options[i].result;
  const std::string prefix = r.options.size() > 1 ? option_of(r, r.options[i]) + ": " : "";
  lines.push_back(prefix + counts_text(s));
  for (std::size_t k = 0; k < s.why.size(); ++k)
    lines.push_back(fmt::format("{}#{} beats #{}: {}", prefix, k + 1, k + 2, s.why[k]));
  for (const auto& rule : s.rules)
    lines.push_back(fmt::format("{}rule \"{}\": {}", prefix, rule.rule, rule.text));
  // Plans whose calls on several streams at once sum past the iteration: say so rather than
  // print a share above 100%.
  std::size_t over = 0;
  double worst = 0;
  for (const Ranked& x : s.top)
    if (x.result.comm_booked > x.result.comm * (1 + 1e-9)) {
      ++over;
      worst = std::max(worst, x.result.comm_booked / x.result.iteration_time);
    }
  if (over > 0)
    lines.push_back(fmt::format(
        "{}{} of these plans sum more communication than their iteration holds (up to {:.0f}% "
        "of it: calls on the data-, tensor- and context-parallel streams running at once); "
        "`comm` is the time communication runs, a union of those calls",
        prefix, over, 100 * worst));
  if (i > 0) lines.push_back(prefix + what_if_text(r.options, i, s.objective));
  return lines;
}

std::string heading(const PlanReport& r) {
  const auto& s = r.options.front().result;
  std::string what =
      r.what_if_kind.empty() ? fmt::format("of {} ({})", r.system, r.network)
      : r.what_if_kind == "network"
          ? fmt::format("of {}, per network ({} options)", r.system, r.options.size())
          : fmt::format("per system ({} options)", r.options.size());
  std::string room;
  if (!s.top.empty() && s.top.front().result.headroom > 0) {
    // per system where a what-if varies it (a percentage keeps a different size free on each)
    std::vector<std::string> parts;
    const std::size_t shown = r.what_if_kind == "system" ? r.options.size() : 1;
    for (std::size_t i = 0; i < shown; ++i) {
      const auto& top = r.options[i].result.top;
      if (top.empty()) continue;
      const auto& e = top.front().result;
      parts.push_back(fmt::format("{} of {}", human_bytes(Bytes(e.headroom)),
                                  human_bytes(Bytes(e.gpu_memory))));
    }
    room = fmt::format(", {} kept free on each GPU (--memory-headroom)", fmt::join(parts, ", "));
  }
  std::string every;
  for (const std::string& e : r.every_plan) every += (every.empty() ? "; every plan: " : ", ") + e;
  return fmt::format("plan: {} on {} GPUs {}, global batch {}, ranked by {}{}{}", r.model, r.gpus,
                     what, s.global_batch, search::to_string(s.objective), room, every);
}
}  // namespace

nlohmann::json plan_json(const PlanReport& r) {
  nlohmann::json plans = nlohmann::json::array(), options = nlohmann::json::array();
  for (std::size_t i = 0; i < r.options.size(); ++i) {
    const WhatIf& w = r.options[i];
    const auto& s = w.result;
    int rank = 0;
    for (const Ranked& x : s.top) {
      nlohmann::json row = plan_row(x, ++rank);
      row["option"] = option_of(r, w);
      plans.push_back(std::move(row));
    }
    nlohmann::json rules = nlohmann::json::array();
    for (const auto& rule : s.rules) {
      nlohmann::json j = {{"rule", rule.rule},
                          {"winner_obeys", rule.winner_obeys},
                          {"agrees", rule.agrees},
                          {"text", rule.text}};
      if (rule.best_other) {
        j["best_other"] = plan_row(*rule.best_other, 0);
        j["difference"] = rule.difference;
      }
      rules.push_back(std::move(j));
    }
    nlohmann::json o = {{"option", option_of(r, w)},
                        {"global_batch", s.global_batch},
                        {"objective", std::string(search::to_string(s.objective))},
                        {"candidates", s.candidates},
                        {"invalid", s.invalid},
                        {"pruned", s.pruned},
                        {"over_memory", s.no_fit},
                        {"skipped", s.skipped},
                        {"skipped_unbuilt", s.skipped_unbuilt},
                        {"predicted", s.evaluated},
                        {"why", s.why},
                        {"rules", std::move(rules)}};
    if (i > 0) {
      o["first_plan_here"] =
          w.first_plan_here
              ? plan_row({r.options.front().result.top.front().plan, *w.first_plan_here}, 0)
              : nlohmann::json(nullptr);
      o["what_if"] = what_if_text(r.options, i, s.objective);
    }
    options.push_back(std::move(o));
  }
  // What a what-if varies is each option's (their "option"), not the first one's.
  auto unless_varied = [&](const char* kind, const std::string& v) {
    return r.what_if_kind == kind ? nlohmann::json(nullptr) : nlohmann::json(v);
  };
  return {{"model", r.model},
          {"system", unless_varied("system", r.system)},
          {"network", unless_varied("network", r.network)},
          {"gpus", r.gpus},
          {"what_if",
           r.what_if_kind.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.what_if_kind)},
          {"every_plan", r.every_plan},
          {"plans", std::move(plans)},
          {"options", std::move(options)}};
}

std::vector<std::string> every_plan_settings(const PlanInput& b) {
  std::vector<std::string> out;
  if (b.fp8.value_or(false))
    out.push_back(b.fp8_param_gather.value_or(false)
                      ? "FP8 GEMMs (FP8 weights where the optimizer is sharded under commscope or "
                        "megatron)"
                      : "FP8 GEMMs");
  if (b.tp_comm_overlap.value_or(false)) out.push_back("TP overlap where SP");
  if (b.cross_entropy == CrossEntropy::fused) out.push_back("fused cross entropy");
  if (b.cross_entropy == CrossEntropy::torch) out.push_back("PyTorch's cross entropy");
  if (b.cross_entropy == CrossEntropy::flash_attn) out.push_back("FlashAttention's cross entropy");
  if (b.grad_comm_dtype)
    out.push_back(fmt::format("gradients reduced in {}", to_string(*b.grad_comm_dtype)));
  std::vector<std::string> zeropp;
  if (b.zeropp_qwz.value_or(false)) zeropp.push_back("qwZ");
  if (b.zeropp_hpz.value_or(1) > 1) zeropp.push_back(fmt::format("hpZ {}", *b.zeropp_hpz));
  if (b.zeropp_qgz.value_or(false)) zeropp.push_back("qgZ");
  if (!zeropp.empty())
    out.push_back(fmt::format("ZeRO++ ({}) where ZeRO-3 under commscope or deepspeed",
                              fmt::join(zeropp, ", ")));
  if (b.offload_optimizer.value_or(false))
    out.push_back("optimizer offloaded to the host where ZeRO 1-3 under commscope or deepspeed");
  if (b.offload_param.value_or(false))
    out.push_back("parameters offloaded to the host where ZeRO-3 under deepspeed");
  if (b.fsdp_cpu_offload.value_or(false))
    out.push_back("FSDP's CPU offload where fsdp shards (FULL_SHARD, SHARD_GRAD_OP, HSDP)");
  if (b.optimizer_cpu_offload.value_or(false))
    out.push_back(
        fmt::format("Megatron's optimizer CPU offload ({:.0f}% of the shard{}) where megatron",
                    b.optimizer_offload_fraction.value_or(1.0) * 100,
                    b.overlap_cpu_optimizer_d2h_h2d.value_or(false) ? ", copies pipelined" : ""));
  switch (b.grad_compression.value_or(GradCompression::none)) {
    case GradCompression::none:
      break;
    case GradCompression::onebit:
      out.push_back("1-bit compressed gradients where no ZeRO under commscope or deepspeed");
      break;
    case GradCompression::powersgd:
      out.push_back(fmt::format("PowerSGD rank {} where no ZeRO under commscope or deepspeed",
                                b.powersgd_rank.value_or(0)));
      break;
  }
  if (b.precision_aware_optimizer.value_or(false))
    out.push_back(fmt::format(
        "precision-aware Adam (moments {} and {}, master weights {}, main gradients {}) where the "
        "optimizer is sharded under commscope or megatron",
        to_string(b.exp_avg_dtype.value_or(DType::fp32)),
        to_string(b.exp_avg_sq_dtype.value_or(DType::fp32)),
        to_string(b.main_params_dtype.value_or(DType::fp32)),
        to_string(b.main_grads_dtype.value_or(DType::fp32))));
  return out;
}

std::string render_plan(const PlanReport& r, Format f) {
  if (f == Format::json) return plan_json(r).dump(2) + "\n";
  if (f == Format::csv) return render_csv(plans_table(r, false));
  const Table t = plans_table(r, true);
  if (f == Format::md) {
    std::string out = "## " + heading(r) + "\n\n" + render_markdown(t) + "\n";
    for (std::size_t i = 0; i < r.options.size(); ++i)
      for (const auto& line : explanation(r, i)) out += "- " + line + "\n";
    return out;
  }
  std::string out = heading(r) + "\n" + render_text(t, "");
  for (std::size_t i = 0; i < r.options.size(); ++i)
    for (const auto& line : explanation(r, i)) out += line + "\n";
  return out;
}

html::Document plan_page(const PlanReport& r) {
  html::Document doc;
  doc.title = "commscope plan: " + r.model;
  doc.subtitle = heading(r);
  for (std::size_t i = 0; i < r.options.size(); ++i) {
    const WhatIf& w = r.options[i];
    const auto& s = w.result;
    html::Section sec;
    sec.title = r.options.size() > 1 ? fmt::format("{} {}", r.what_if_kind, option_of(r, w))
                                     : "The best plans";
    sec.paragraphs = explanation(r, i);
    html::Chart c;
    c.title = "Where each plan's iteration goes";
    c.caption =
        "The top plans' iteration times (mean over pipeline stages) split into compute, exposed "
        "communication, pipeline bubble and the rest, from the simulator.";
    c.kind = html::ChartKind::stacked_bar;
    c.x_label = "plan (rank)";
    c.y_label = "iteration time (ms)";
    html::Series compute, exposed, bubble, rest;
    compute.label = "compute";
    exposed.label = "exposed communication";
    bubble.label = "bubble";
    rest.label = "other";
    for (html::Series* x : {&compute, &exposed, &bubble, &rest}) x->stack = "t";
    int rank = 0;
    for (const Ranked& x : s.top) {
      const auto& e = x.result;
      c.categories.push_back(fmt::format("#{} {}", ++rank, search::describe(x.plan)));
      compute.values.push_back(e.compute * 1e3);
      exposed.values.push_back(e.exposed * 1e3);
      bubble.values.push_back(e.bubble * 1e3);
      rest.values.push_back(std::max(0.0, e.iteration_time - e.compute - e.exposed - e.bubble) *
                            1e3);
    }
    c.series = {compute, exposed, bubble, rest};
    PlanReport one = r;
    one.options = {w};
    c.table = plans_table(one, true);
    sec.charts.push_back(std::move(c));
    doc.sections.push_back(std::move(sec));
  }
  return doc;
}

}  // namespace commscope
