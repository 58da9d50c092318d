#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds linkd and runs the whole test suite. The README's second command; .ci/run calls it.
#   LINKD_BUILD       build directory (default: build)
#   LINKD_CMAKE_ARGS  extra CMake arguments (e.g. -DLINKD_SANITIZE=address,undefined)
#   LINKD_CTEST_ARGS  extra ctest arguments (e.g. -R stress)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
build=${LINKD_BUILD:-build}
# shellcheck disable=SC2086
cmake -S . -B "$build" ${LINKD_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j"$(nproc)"
# Everything but the slow tests in parallel, then the slow ones (the demo's storm scenario) one at
# a time on an otherwise idle machine.
# shellcheck disable=SC2086
ctest --test-dir "$build" --output-on-failure -j2 -LE slow ${LINKD_CTEST_ARGS:-}
# shellcheck disable=SC2086
ctest --test-dir "$build" --output-on-failure -L slow --no-tests=ignore ${LINKD_CTEST_ARGS:-}
