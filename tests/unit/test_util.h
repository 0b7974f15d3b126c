// Helpers shared by the unit tests.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "commscope/spec/scenario.h"
#include "commscope/workload/workload.h"

namespace commscope::testing {

inline ModelSpec model(const std::string& name) {
  auto m = load_model(name);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
  return m.ok() ? m.value() : ModelSpec{};
}

// Resolves a scenario that must be valid.
inline Scenario scenario(const std::string& model_name, const std::string& system,
                         const PlanInput& plan, const std::string& network = "") {
  ScenarioInput in;
  in.model = model_name;
  in.system = system;
  in.network = network;
  in.plan = plan;
  auto sc = resolve_scenario(in);
  EXPECT_TRUE(sc.ok()) << (sc.ok() ? "" : sc.error().message);
  return sc.ok() ? sc.value() : Scenario{};
}

// The error message of a scenario that must be invalid.
inline std::string scenario_error(const std::string& model_name, const std::string& system,
                                  const PlanInput& plan) {
  ScenarioInput in;
  in.model = model_name;
  in.system = system;
  in.plan = plan;
  auto sc = resolve_scenario(in);
  EXPECT_FALSE(sc.ok()) << "expected an error";
  return sc.ok() ? std::string() : sc.error().message;
}

inline PlanInput plan(int gpus, int tp = 1, int pp = 1, std::int64_t micro = 1,
                      std::int64_t global = 0) {
  PlanInput p;
  p.gpus = gpus;
  p.tp = tp;
  p.pp = pp;
  p.micro_batch = micro;
  if (global) p.global_batch = global;
  return p;
}

}  // namespace commscope::testing
