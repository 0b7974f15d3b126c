// `describe`: what a (model, plan, system) amounts to before anything runs: parameters,
// FLOPs, memory per rank and whether it fits, communication per iteration. The numbers come
// from the workload; this file gathers and prints them.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "commscope/report/table.h"
#include "commscope/workload/params.h"
#include "commscope/workload/workload.h"

namespace commscope {

struct StageDescription {
  int stage = 0;
  std::int64_t params = 0;
  MemoryBreakdown memory;
  bool fits = true;
  std::vector<CommVolume> comm;
  // Each collective of the pattern, with a framework chosen (--framework); empty otherwise.
  std::vector<PatternCollective> pattern;
};

struct Description {
  ParamCount params;
  FlopCount flops;
  std::vector<StageDescription> stages;
  Bytes max_memory;  // the fullest rank
  std::int64_t max_params = 0;
  bool fits = true;
  std::vector<std::string> warnings;  // the scenario's, and "does not fit"
};

Description describe(const Workload& w);

std::string render_describe(const Workload& w, const Description& d, Format f);
nlohmann::json describe_json(const Workload& w, const Description& d);

}  // namespace commscope
