// The Breakdown's one JSON writer and its reader (keys in breakdown_json.h).
#include "commscope/timeline/breakdown_json.h"

#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commscope/util/json_fields.h"

namespace commscope {

namespace {
struct Field {
  const char* key;
  double Breakdown::*member;
};
constexpr Field kFields[] = {{"wall_s", &Breakdown::wall},
                             {"compute_s", &Breakdown::compute},
                             {"comm_s", &Breakdown::comm},
                             {"overlapped_comm_s", &Breakdown::overlapped},
                             {"exposed_comm_s", &Breakdown::exposed},
                             {"memcpy_s", &Breakdown::memcpy},
                             {"idle_s", &Breakdown::idle},
                             {"bubble_s", &Breakdown::bubble}};

template <class Table>
nlohmann::json shares_json(const Table& t) {
  nlohmann::json j = nlohmann::json::object();
  t.for_each([&](auto e, const CommShare& s) {
    j[std::string(to_string(e))] = {
        {"total_s", s.total}, {"exposed_s", s.exposed}, {"profiler_s", s.profiler}};
  });
  return j;
}

// Reads j[key] = {"<name>": {"total_s": x, "exposed_s": y, "profiler_s": z}} into a share
// table; parse(name) gives the enum or nothing. Absent: no communication of that kind.
// profiler_s is optional (files written before it existed): then it equals total_s.
template <class Table, class Parse>
Status read_shares(const nlohmann::json& j, const char* key, const std::string& where, Table& out,
                   Parse parse) {
  auto at = j.find(key);
  if (at == j.end()) return {};
  if (!at->is_object())
    return Error{fmt::format("{}: field '{}': expected an object of shares by name, got {}", where,
                             key, json_excerpt(*at))};
  for (const auto& [name, value] : at->items()) {
    auto e = parse(name);
    if (!e) return Error{fmt::format("{}: field '{}': unknown name '{}'", where, key, name)};
    CommShare& share = out[*e];
    for (auto [field, dst] :
         {std::pair{"total_s", &share.total}, std::pair{"exposed_s", &share.exposed}}) {
      const nlohmann::json* v = nullptr;
      if (value.is_object() && value.contains(field)) v = &value.at(field);
      const double x = v && v->is_number() ? v->template get<double>() : -1.0;
      if (!(std::isfinite(x) && x >= 0))
        return Error{
            fmt::format("{}: field '{}.{}.{}': expected finite non-negative seconds, got {}", where,
                        key, name, field, v ? json_excerpt(*v) : std::string("nothing"))};
      *dst = x;
    }
    share.profiler = share.total;
    if (value.contains("profiler_s")) {
      const nlohmann::json& v = value.at("profiler_s");
      const double x = v.is_number() ? v.get<double>() : -1.0;
      if (!(std::isfinite(x) && x >= 0))
        return Error{fmt::format(
            "{}: field '{}.{}.profiler_s': expected finite non-negative seconds, got {}", where,
            key, name, json_excerpt(v))};
      share.profiler = x;
    }
  }
  return {};
}
}  // namespace

nlohmann::json breakdown_to_json(const Breakdown& b) {
  nlohmann::json j = nlohmann::json::object();
  for (const Field& f : kFields) j[f.key] = b.*f.member;
  j["profiler_comm_s"] = b.profiler_comm;
  j["comm_by_group"] = shares_json(b.by_group);
  j["comm_by_collective"] = shares_json(b.by_collective);
  return j;
}

Result<Breakdown> breakdown_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object())
    return Error{fmt::format("{}: expected a breakdown object, got {}", where, json_excerpt(j))};
  Breakdown b;
  FieldReader r(j, where);
  r.allow_unknown();  // a breakdown may sit flat inside a larger document (predict's rows)
  for (const Field& f : kFields) {
    double& v = b.*f.member;
    r.require(f.key, v);
    if (!std::isfinite(v) || v < 0)
      r.fail(f.key, "finite non-negative seconds", json_excerpt(j.at(f.key)));
  }
  b.profiler_comm = b.comm;  // optional: files written before it existed
  r.read("profiler_comm_s", b.profiler_comm);
  if (!std::isfinite(b.profiler_comm) || b.profiler_comm < 0)
    r.fail("profiler_comm_s", "finite non-negative seconds", json_excerpt(j.at("profiler_comm_s")));
  CS_RETURN_IF_ERROR(r.status());
  CS_RETURN_IF_ERROR(read_shares(j, "comm_by_group", where, b.by_group, comm_group_from_name));
  CS_RETURN_IF_ERROR(
      read_shares(j, "comm_by_collective", where, b.by_collective, collective_from_key));
  return b;
}

}  // namespace commscope
