#!/usr/bin/env bash
# Fails when any C++ file of the project is not as clang-format (config: .clang-format) writes it.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cpp' '*.h' 2>/dev/null || find include src tests bench -name '*.cpp' -o -name '*.h')
clang-format --dry-run -Werror "${files[@]}"
echo "check-format: ${#files[@]} files clean"
