#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Static analysis of the dependency-free code: the core, the executor that ships with it, and
# the simulator (cppcheck). Exits non-zero on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${LINKD_BUILD:-build}
[ -f "$build/include/linkd/version.h" ] || cmake -S . -B "$build" >/dev/null
cppcheck --std=c11 --enable=warning,performance,portability --error-exitcode=1 --quiet \
  --inline-suppr --suppress=missingIncludeSystem -D__GNUC__ -D_GNU_SOURCE \
  -I include -I "$build/include" -I src src/core src/exec src/sim
echo "cppcheck: src/core, src/exec and src/sim clean"
