// Names of the op enums and the op list's dependency pool.
#include "commscope/workload/op.h"

#include <string>

#include "commscope/util/json_fields.h"

namespace commscope {

namespace {
constexpr EnumName<OpKind> kKind[] = {{OpKind::compute, "compute"}, {OpKind::comm, "comm"}};
constexpr EnumName<Phase> kPhase[] = {{Phase::forward, "forward"},
                                      {Phase::backward, "backward"},
                                      {Phase::recompute, "recompute"},
                                      {Phase::optimizer, "optimizer"}};
constexpr EnumName<ComputeClass> kClass[] = {{ComputeClass::gemm, "gemm"},
                                             {ComputeClass::attention, "attention"},
                                             {ComputeClass::elementwise, "elementwise"},
                                             {ComputeClass::norm, "norm"},
                                             {ComputeClass::embedding, "embedding"},
                                             {ComputeClass::loss, "loss"},
                                             {ComputeClass::optimizer, "optimizer"},
                                             {ComputeClass::host, "host"}};
}  // namespace

std::string_view to_string(GroupSpan s) {
  switch (s) {
    case GroupSpan::whole:
      return "";
    case GroupSpan::intra_node:
      return "intra-node";
    case GroupSpan::inter_node:
      return "inter-node";
    case GroupSpan::nodes:
      return "multi-node";
  }
  return "";
}

std::string_view to_string(OpKind k) {
  return enum_to_name(kKind, k);
}
std::string_view to_string(Phase p) {
  return enum_to_name(kPhase, p);
}
std::string_view to_string(ComputeClass c) {
  return enum_to_name(kClass, c);
}

std::uint32_t OpList::add(const Op& op, std::initializer_list<std::uint32_t> deps) {
  return add(op, std::span<const std::uint32_t>(deps.begin(), deps.size()));
}

std::uint32_t OpList::add(const Op& op, std::span<const std::uint32_t> deps) {
  Op& o = ops_.emplace_back(op);
  o.dep_begin = static_cast<std::uint32_t>(deps_.size());
  o.dep_count = static_cast<std::uint32_t>(deps.size());
  if (deps.size() == 1)  // most ops: the one before on the chain (push_back's inline path)
    deps_.push_back(deps[0]);
  else
    deps_.insert(deps_.end(), deps.begin(), deps.end());
  return static_cast<std::uint32_t>(ops_.size() - 1);
}

}  // namespace commscope
