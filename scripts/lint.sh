#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Static analysis of the dependency-free core and the executor that ships with it (cppcheck).
# Exits non-zero on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${LINKD_BUILD:-build}
[ -f "$build/include/linkd/version.h" ] || cmake -S . -B "$build" >/dev/null
cppcheck --std=c11 --enable=warning,performance,portability --error-exitcode=1 --quiet \
  --inline-suppr --suppress=missingIncludeSystem -D__GNUC__ -D_GNU_SOURCE \
  -I include -I "$build/include" -I src src/core src/exec
echo "cppcheck: src/core and src/exec clean"
