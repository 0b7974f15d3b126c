// Names of the op enums, bus factors, and the op list's dependency pool.
#include "commscope/workload/op.h"

#include <cctype>
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
                                             {ComputeClass::optimizer, "optimizer"}};
constexpr EnumName<Collective> kColl[] = {{Collective::all_reduce, "all_reduce"},
                                          {Collective::all_gather, "all_gather"},
                                          {Collective::reduce_scatter, "reduce_scatter"},
                                          {Collective::broadcast, "broadcast"},
                                          {Collective::reduce, "reduce"},
                                          {Collective::all_to_all, "all_to_all"},
                                          {Collective::send, "send"},
                                          {Collective::recv, "recv"}};
constexpr EnumName<CommGroup> kGroup[] = {{CommGroup::data, "data"},
                                          {CommGroup::tensor, "tensor"},
                                          {CommGroup::pipeline, "pipeline"},
                                          {CommGroup::embedding, "embedding"}};
}  // namespace

std::string_view to_string(OpKind k) {
  return enum_to_name(kKind, k);
}
std::string_view to_string(Phase p) {
  return enum_to_name(kPhase, p);
}
std::string_view to_string(ComputeClass c) {
  return enum_to_name(kClass, c);
}
std::string_view to_string(Collective c) {
  return enum_to_name(kColl, c);
}
std::string_view to_string(CommGroup g) {
  return enum_to_name(kGroup, g);
}

bool collective_from_name(std::string_view name, Collective& out) {
  std::string s(name);
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  auto has = [&](const char* p) { return s.find(p) != std::string::npos; };
  if (has("alltoall") || has("all_to_all"))
    out = Collective::all_to_all;
  else if (has("allgather") || has("all_gather"))
    out = Collective::all_gather;
  else if (has("reducescatter") || has("reduce_scatter"))
    out = Collective::reduce_scatter;
  else if (has("allreduce") || has("all_reduce"))
    out = Collective::all_reduce;
  else if (has("broadcast"))
    out = Collective::broadcast;
  else if (has("sendrecv") || has("send"))
    out = Collective::send;
  else if (has("recv"))
    out = Collective::recv;
  else if (has("reduce"))
    out = Collective::reduce;
  else
    return false;
  return true;
}

double bus_factor(Collective c, int n) {
  if (n <= 1) return c == Collective::send || c == Collective::recv ? 1.0 : 0.0;
  switch (c) {
    case Collective::all_reduce:
      return 2.0 * (n - 1) / n;
    case Collective::all_gather:
    case Collective::reduce_scatter:
    case Collective::all_to_all:
      return static_cast<double>(n - 1) / n;
    case Collective::broadcast:
    case Collective::reduce:
    case Collective::send:
    case Collective::recv:
      return 1.0;
  }
  return 1.0;
}

std::uint32_t OpList::add(const Op& op, std::initializer_list<std::uint32_t> deps) {
  return add(op, std::span<const std::uint32_t>(deps.begin(), deps.size()));
}

std::uint32_t OpList::add(const Op& op, std::span<const std::uint32_t> deps) {
  Op& o = ops_.emplace_back(op);
  o.dep_begin = static_cast<std::uint32_t>(deps_.size());
  o.dep_count = static_cast<std::uint32_t>(deps.size());
  deps_.insert(deps_.end(), deps.begin(), deps.end());
  return static_cast<std::uint32_t>(ops_.size() - 1);
}

}  // namespace commscope
