// Evaluator: many plans of one model, system and network (include/commscope/sim/evaluator.h).
#include "commscope/sim/evaluator.h"

#include <utility>

#include "commscope/workload/workload.h"
#include "runs.h"

namespace commscope {

Evaluator::Evaluator(ModelSpec model, SystemSpec system, NetworkProtocol network)
    : model_(std::move(model)), system_(std::move(system)), network_(std::move(network)) {}

Result<Prediction> Evaluator::evaluate(const PlanInput& plan) const {
  CS_ASSIGN_OR_RETURN(auto sc, resolve_scenario(model_, system_, network_, plan));
  return simulate(build_workload(sc));
}

std::vector<Result<Prediction>> Evaluator::evaluate_variants(
    const PlanInput& base, std::span<const Variant> variants) const {
  std::vector<Result<Prediction>> out;
  out.reserve(variants.size());
  std::vector<std::optional<Scenario>> scenarios(variants.size());
  // Resolve every variant first: the first that resolves builds the shared workload.
  int first = -1;
  bool accumulation = false;
  for (std::size_t i = 0; i < variants.size(); ++i) {
    PlanInput p = base;
    if (variants[i].global_batch) p.global_batch = variants[i].global_batch;
    if (variants[i].schedule) p.schedule = variants[i].schedule;
    if (variants[i].grad_accum) p.grad_accum = variants[i].grad_accum;
    auto sc = resolve_scenario(model_, system_, network_, p);
    if (!sc.ok()) {
      out.emplace_back(sc.error());
      continue;
    }
    out.emplace_back(Prediction{});
    scenarios[i] = std::move(*sc);
    if (first < 0) first = static_cast<int>(i);
    accumulation |= scenarios[i]->plan.grad_accum > 1;
  }
  if (first < 0) return out;
  const Scenario& shared = *scenarios[first];
  // A variant whose resolved plan differs in what the workload depends on (sizes, the model)
  // gets its own workload; resolve_scenario derives none of those from the batch or schedule,
  // so this is a guard, not a path taken.
  auto same_workload = [&](const Scenario& o) {
    const ParallelPlan &a = shared.plan, &b = o.plan;
    return a.dp == b.dp && a.tp == b.tp && a.pp == b.pp && a.virtual_stages == b.virtual_stages &&
           a.micro_batch == b.micro_batch && o.model.seq_length == shared.model.seq_length &&
           o.nodes == shared.nodes && o.gpus_per_node == shared.gpus_per_node;
  };
  const Workload w = build_workload(shared);
  thread_local sim_detail::Runs runs;
  sim_detail::prepare_runs(shared, w.roles, accumulation, nullptr, runs);
  for (std::size_t i = 0; i < variants.size(); ++i) {
    if (!scenarios[i]) continue;
    const Scenario& sc = *scenarios[i];
    if (!same_workload(sc)) {
      out[i] = simulate(build_workload(sc));
      continue;
    }
    out[i] = sim_detail::finish(sc, static_cast<int>(sc.plan.grad_accum), w.roles, runs, false,
                                Prediction{});
  }
  return out;
}

std::vector<Prediction> Evaluator::evaluate_resolved(
    const Workload& w, std::span<const Scenario* const> scenarios, bool breakdowns,
    const std::function<double(std::size_t)>& skip_above) const {
  std::vector<Prediction> out;
  out.reserve(scenarios.size());
  bool accumulation = false;
  for (const Scenario* sc : scenarios) accumulation |= sc->plan.grad_accum > 1;
  const Scenario& shared = w.scenario;
  // The same guard as evaluate_variants: a scenario whose workload would differ is simulated
  // on its own workload.
  auto same_workload = [&](const Scenario& o) {
    const ParallelPlan &a = shared.plan, &b = o.plan;
    return a.dp == b.dp && a.tp == b.tp && a.pp == b.pp && a.virtual_stages == b.virtual_stages &&
           a.micro_batch == b.micro_batch && o.model.seq_length == shared.model.seq_length &&
           o.nodes == shared.nodes && o.gpus_per_node == shared.gpus_per_node;
  };
  thread_local sim_detail::Runs runs;
  bool prepared = false;
  for (const Scenario* sc : scenarios) {
    if (!same_workload(*sc)) {
      out.push_back(simulate(build_workload(*sc)));
      continue;
    }
    if (!prepared)
      sim_detail::prepare_runs(shared, w.roles, accumulation, nullptr, runs, breakdowns);
    prepared = true;
    const int m = static_cast<int>(sc->plan.grad_accum);
    if (skip_above) {
      const double bound = sim_detail::lower_bound(*sc, m, runs);
      if (bound > skip_above(out.size())) {
        Prediction skipped;
        skipped.skipped_bound = bound;
        out.push_back(std::move(skipped));
        continue;
      }
    }
    out.push_back(sim_detail::finish(*sc, m, w.roles, runs, false, Prediction{}, breakdowns));
  }
  return out;
}

}  // namespace commscope
