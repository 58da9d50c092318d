#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for FUZZ_SECONDS (default 20).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${FUZZ_SECONDS:-20}
CC=clang cmake -S . -B build-fuzz -DLINKD_FUZZ=ON -DLINKD_HTTP=OFF -DLINKD_BENCH=OFF \
  -DBUILD_TESTING=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)" >/dev/null
for f in build-fuzz/fuzz/fuzz_*; do
  [ -x "$f" ] || continue
  echo "fuzzing $(basename "$f") for ${secs}s"
  mkdir -p "build-fuzz/corpus-$(basename "$f")"
  "$f" -max_total_time="$secs" -print_final_stats=0 "build-fuzz/corpus-$(basename "$f")" 2>&1 | tail -1
done
