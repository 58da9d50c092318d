#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the libFuzzer targets with clang, the library code instrumented too (-DLINKD_FUZZ=ON), and
# runs each for FUZZ_SECONDS (default 8) from its seed corpus in fuzz/corpus/<target>/. New inputs
# go to build-fuzz/corpus/<target>/, so the checked-in seeds stay as they are. Prints libFuzzer's
# final status line per target (cov: = edges covered, ft: = features) and fails on a crash, a leak,
# a timeout, or coverage below FUZZ_MIN_COV edges (default 15: with only a harness instrumented,
# not the library, the core targets reached 6-9).
# FUZZ_SEED (default 1) fixes libFuzzer's generator, so CI's short run tries the same inputs each
# time and a change is judged on its own code, not on the luck of the draw; FUZZ_SEED=0 draws a new
# seed each run, for longer searches (e.g. FUZZ_SECONDS=600 FUZZ_SEED=0 scripts/fuzz.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${FUZZ_SECONDS:-8}
min_cov=${FUZZ_MIN_COV:-15}
seed=${FUZZ_SEED:-1}
build=$(pwd)/${FUZZ_BUILD:-build-fuzz}
root=$(pwd)
CC=clang cmake -S . -B "$build" -DLINKD_FUZZ=ON -DLINKD_BENCH=OFF -DLINKD_EXAMPLES=OFF \
  -DBUILD_TESTING=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target linkd_fuzzers >/dev/null
read -r -a targets < <(tr ';' ' ' < "$build/fuzz/fuzzers.txt"; echo)
fail=0
for t in "${targets[@]}"; do
  seeds=$root/fuzz/corpus/$t
  [ -d "$seeds" ] || { echo "FAIL: $t has no seed corpus ($seeds)"; fail=1; continue; }
  mkdir -p "$build/corpus/$t"
  log="$build/fuzz-$t.log"
  if ! (cd "$build" && "./fuzz/$t" -max_total_time="$secs" -seed="$seed" -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 "corpus/$t" "$seeds") >"$log" 2>&1; then
    echo "FAIL: $t (log: $log)"; tail -30 "$log"; fail=1; continue
  fi
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1)
  cov=$(sed -nE 's/.* cov: ([0-9]+) .*/\1/p' <<<"$done_line")
  echo "$t: ${secs}s ${done_line#*DONE}"
  if [ -z "$cov" ] || [ "$cov" -lt "$min_cov" ]; then
    echo "FAIL: $t covers ${cov:-?} edges (< $min_cov): is the library instrumented?"; fail=1
  fi
done
exit $fail
