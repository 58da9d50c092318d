#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Static analysis of the project's own C: the libraries, the daemons and the CLI (cppcheck).
# Exits non-zero on any finding; a finding that is wrong is suppressed where it is, with the
# reason beside it (`cppcheck-suppress`).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${LINKD_BUILD:-build}
[ -f "$build/include/linkd/version.h" ] || cmake -S . -B "$build" >/dev/null
cppcheck --std=c11 --enable=warning,performance,portability --error-exitcode=1 --quiet \
  --inline-suppr --suppress=missingIncludeSystem -D__GNUC__ -D_GNU_SOURCE \
  -I include -I "$build/include" -I src src cmd
echo "cppcheck: src and cmd clean"
