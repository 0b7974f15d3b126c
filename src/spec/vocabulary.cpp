// The one name table of each shared enum, and the bus factors.
#include "commscope/spec/vocabulary.h"

#include <algorithm>
#include <cctype>

#include "commscope/util/json_fields.h"

namespace commscope {

namespace {
constexpr EnumName<DType> kDTypeNames[] = {{DType::fp32, "float32"},  {DType::fp16, "float16"},
                                           {DType::bf16, "bfloat16"}, {DType::fp64, "float64"},
                                           {DType::int32, "int32"},   {DType::int64, "int64"},
                                           {DType::int8, "int8"},     {DType::fp8, "float8"}};
constexpr EnumName<Collective> kCollectiveNames[] = {{Collective::all_reduce, "all_reduce"},
                                                     {Collective::all_gather, "all_gather"},
                                                     {Collective::reduce_scatter, "reduce_scatter"},
                                                     {Collective::broadcast, "broadcast"},
                                                     {Collective::reduce, "reduce"},
                                                     {Collective::all_to_all, "all_to_all"},
                                                     {Collective::send, "send"},
                                                     {Collective::recv, "recv"}};
constexpr EnumName<CommGroup> kGroupNames[] = {{CommGroup::data, "data"},
                                               {CommGroup::tensor, "tensor"},
                                               {CommGroup::pipeline, "pipeline"},
                                               {CommGroup::embedding, "embedding"},
                                               {CommGroup::expert, "expert"},
                                               {CommGroup::context, "context"},
                                               {CommGroup::expert_data, "expert_data"}};
static_assert(std::size(kCollectiveNames) == kCollectiveCount);
static_assert(std::size(kGroupNames) == kCommGroupCount);
}  // namespace

std::string_view to_string(DType d) {
  return enum_to_name(kDTypeNames, d);
}
std::optional<DType> dtype_from_name(std::string_view name) {
  return enum_from_name(kDTypeNames, name);
}
std::string dtype_choices() {
  return enum_choices(kDTypeNames);
}

int dtype_bytes(DType d) {
  switch (d) {
    case DType::fp64:
    case DType::int64:
      return 8;
    case DType::fp32:
    case DType::int32:
      return 4;
    case DType::fp16:
    case DType::bf16:
      return 2;
    case DType::int8:
    case DType::fp8:
      return 1;
  }
  return 0;
}

std::string_view to_string(Collective c) {
  return enum_to_name(kCollectiveNames, c);
}
std::optional<Collective> collective_from_key(std::string_view key) {
  return enum_from_name(kCollectiveNames, key);
}
std::string_view to_string(CommGroup g) {
  return enum_to_name(kGroupNames, g);
}
std::optional<CommGroup> comm_group_from_name(std::string_view name) {
  return enum_from_name(kGroupNames, name);
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
  // nccl-tests' formulas at every rank count: at one rank the (n - 1) ones are 0, and broadcast,
  // reduce and send/receive stay 1
  n = std::max(n, 1);
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

}  // namespace commscope
