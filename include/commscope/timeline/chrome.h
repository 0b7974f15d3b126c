// Writing a Timeline as a Chrome trace (the JSON Perfetto and chrome://tracing open): one
// process per rank (or pipeline stage), one thread per stream, one complete ("X") event per
// event, times in microseconds. A communication event with a wait (Event::wait) spans the
// call as a profiler records it, from entry; its args carry wait_us.
#pragma once

#include <string>

#include "commscope/timeline/timeline.h"

namespace commscope {

std::string chrome_trace_json(const Timeline& t);

}  // namespace commscope
