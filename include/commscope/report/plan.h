// `commscope plan`'s documents: the ranked plans with memory and communication share, why each
// beats the next, the rules of thumb against the numbers, and the what-if per network or
// system; as a table, JSON, CSV, Markdown and an HTML page (docs/plan.md).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "commscope/report/html.h"
#include "commscope/report/table.h"
#include "commscope/search/plan_search.h"

namespace commscope {

struct PlanReport {
  std::string model, system, network;
  int gpus = 0;
  std::vector<search::WhatIf> options;  // one per --network/--system option (one: no what-if)
  std::string what_if_kind;             // "network", "system" or empty
  // What every plan was searched with beyond its layout (--fp8, --grad-comm-dtype, the
  // optimizer's precision ...), in words: the heading names them, JSON lists them.
  std::vector<std::string> every_plan;
};

// The settings a search's base gives every plan, in words, for PlanReport::every_plan.
std::vector<std::string> every_plan_settings(const PlanInput& base);

nlohmann::json plan_json(const PlanReport& r);
std::string render_plan(const PlanReport& r, Format f);
// The HTML page: per option, the top plans' times split into compute, exposed communication,
// bubble and the rest, beside their table; the rules and the what-if as text.
html::Document plan_page(const PlanReport& r);

}  // namespace commscope
