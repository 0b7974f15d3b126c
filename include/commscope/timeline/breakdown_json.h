// The one JSON form of a Breakdown, written by predict, analyze and train alike, and its
// reader. Keys (seconds): wall_s, compute_s, comm_s, overlapped_comm_s, exposed_comm_s,
// memcpy_s, idle_s, bubble_s, profiler_comm_s (communication as a profiler records it, waits
// for peers included), and comm_by_group / comm_by_collective as
// {"<name>": {"total_s": x, "exposed_s": y, "profiler_s": z}} for every group or collective with
// any time. The reader takes files without the profiler keys (then profiler = total).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "commscope/timeline/timeline.h"
#include "commscope/util/result.h"

namespace commscope {

nlohmann::json breakdown_to_json(const Breakdown& b);

// The breakdown a breakdown_to_json document holds; an error names the key that is missing,
// not a number, or an unknown group or collective ("where: comm_by_group.foo: ...").
Result<Breakdown> breakdown_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace commscope
