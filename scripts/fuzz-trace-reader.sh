#!/usr/bin/env bash
# Builds the trace reader's libFuzzer target with clang (address and undefined-behaviour
# sanitizers) and runs it for SECONDS (default 600) on a copy of the seed corpus in
# tests/fuzz/corpus. Needs clang and libclang-rt-14-dev (apt-get install clang libclang-rt-14-dev).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
out=${FUZZ_DIR:-build-fuzz}
mkdir -p "$out/corpus"
cp -n tests/fuzz/corpus/* "$out/corpus/" 2>/dev/null || true
CXX=${CXX:-clang++}
sources=(tests/fuzz/fuzz_trace_reader.cpp src/timeline/trace_reader.cpp src/timeline/timeline.cpp src/timeline/intervals.cpp
         src/workload/op.cpp src/report/analyze.cpp src/report/table.cpp src/util/json_fields.cpp
         src/spec/system.cpp src/spec/preset.cpp src/util/input_file.cpp
         src/report/hta.cpp src/report/diff.cpp src/report/ranks.cpp src/spec/vocabulary.cpp
         src/timeline/breakdown_json.cpp)
"$CXX" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -DCOMMSCOPE_PRESET_DIR='"presets"' -DCOMMSCOPE_INSTALL_PRESET_DIR='"presets"' \
  -Iinclude "${sources[@]}" -lfmt -lsimdjson -lz -o "$out/fuzz_trace_reader"
"$out/fuzz_trace_reader" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 "$out/corpus"
