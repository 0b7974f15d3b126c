// Evaluator: predictions of many plans of one model on one system and network, for searches
// and sweeps. evaluate(plan) is simulate(build_workload(resolve_scenario(model, system,
// network, plan))), the same numbers. evaluate_variants(base, variants) predicts plans that
// differ from `base` only in global batch (hence micro-batch count) and pipeline schedule: the
// workload of one micro-batch is the same for all of them, so it is built once, and each
// chunk's forward and backward runs and each stage's step are simulated once; per variant
// only the pipeline schedule, the step's placement and the breakdowns are computed. Every
// variant's prediction equals evaluate() of that plan (tests/unit/sim_evaluator_test.cpp).
//
// Usage (a plan search over batch sizes and schedules):
//   Evaluator ev(*load_model("llama2-13b"), *load_system("dgx-a100-80gb"),
//                *load_network("ib-hdr-200"));
//   PlanInput base; base.gpus = 64, base.tp = 2, base.pp = 4, base.micro_batch = 2;
//   std::vector<Evaluator::Variant> vs = {{512, Schedule::one_f_one_b}, {512, Schedule::gpipe},
//                                         {1024, Schedule::one_f_one_b}};
//   for (auto& r : ev.evaluate_variants(base, vs)) if (r.ok()) use(r->iteration_time);
// A variant that does not resolve gets resolve_scenario's error; the others are unaffected.
// Not thread-safe: one Evaluator per thread (it keeps scratch storage between calls).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "commscope/sim/simulator.h"
#include "commscope/spec/scenario.h"
#include "commscope/util/result.h"
#include "commscope/workload/workload.h"

namespace commscope {

class Evaluator {
 public:
  Evaluator(ModelSpec model, SystemSpec system, NetworkProtocol network);

  // One plan (resolve_scenario's error if it does not resolve).
  Result<Prediction> evaluate(const PlanInput& plan) const;

  // What a variant replaces in the base plan (fields left empty keep the base's).
  struct Variant {
    std::optional<std::int64_t> global_batch;
    std::optional<Schedule> schedule;
    std::optional<std::int64_t> grad_accum;
  };
  // One result per variant, in order.
  std::vector<Result<Prediction>> evaluate_variants(const PlanInput& base,
                                                    std::span<const Variant> variants) const;

  // Predictions of already resolved scenarios that differ from w's scenario only in global
  // batch (micro-batch count) and pipeline schedule (a search resolves them to bound their
  // memory; nothing is resolved again): one set of chunk runs for all, then each scenario's
  // schedule and breakdowns. One result per scenario, each equal to simulate() of its workload.
  // `breakdowns` false: the iteration time alone (Prediction::stages, mean and straggler_wait
  // left empty), the same number, without composing the per-stage breakdowns (most of the
  // pipeline half's cost); a search ranks by it and completes the plans it prints.
  // `skip_above` (search): for scenario i, when a lower bound on its iteration time from the
  // runs alone exceeds skip_above(i), its schedule is not run and its result is the bound
  // (Prediction::skipped_bound, iteration_time 0).
  std::vector<Prediction> evaluate_resolved(
      const Workload& w, std::span<const Scenario* const> scenarios, bool breakdowns = true,
      const std::function<double(std::size_t)>& skip_above = {}) const;

  const ModelSpec& model() const { return model_; }
  const SystemSpec& system() const { return system_; }
  const NetworkProtocol& network() const { return network_; }

 private:
  ModelSpec model_;
  SystemSpec system_;
  NetworkProtocol network_;
};

}  // namespace commscope
