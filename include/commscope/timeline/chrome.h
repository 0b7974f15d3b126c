// Writing a Timeline as a Chrome trace (the JSON Perfetto and chrome://tracing open): one
// process per rank (or pipeline stage), one thread per stream, one complete ("X") event per
// event, times in microseconds.
#pragma once

#include <string>

#include "commscope/timeline/timeline.h"

namespace commscope {

std::string chrome_trace_json(const Timeline& t);

}  // namespace commscope
