// Writing an output file so that it is either whole or absent: write a temporary file
// beside it, flush it to disk, rename it over the target.
#pragma once

#include <string>
#include <string_view>

#include "commscope/util/result.h"

namespace commscope {

Status write_file_atomic(const std::string& path, std::string_view content);

}  // namespace commscope
