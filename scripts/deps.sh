#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs the Debian 12 packages linkd needs to build, test and benchmark.
# As root it runs apt-get; otherwise it prints the exact command to run.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config clang libclang-rt-14-dev   # toolchain, libFuzzer, sanitizers
  libcurl4-openssl-dev                                         # HTTP layer
  zlib1g-dev                                                   # zlib.h: --compressed's decoder; tests
  libmicrohttpd-dev libsqlite3-dev libjansson-dev              # libraryd: server, store, JSON
  nettle-dev                                                   # libraryd: SHA-256
  libinih-dev                                                  # linkd config file
  libcmocka-dev                                                # unit tests
  prometheus                                                   # promtool: validates /metrics output
  cppcheck                                                     # static analysis of the core
  curl python3 openssl                                         # test drivers (openssl: a TLS cert)
  libpq-dev postgresql                                         # libraryd on PostgreSQL; tests start one
  libhiredis-dev redis-server                                  # fleet-wide limits; tests start one
  libuv1-dev libhttp-parser-dev                                # linkd serve: event loop, HTTP/1 parser
)
OPTIONAL=(wrk nginx haproxy hyperfine libevent-dev libh2o-evloop-dev) # benchmarks only (the last two: bench_gw_loop)

want=("${PKGS[@]}")
[ "${LINKD_BENCH_DEPS:-0}" = 1 ] && want+=("${OPTIONAL[@]}")

missing=()
for p in "${want[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "linkd: missing packages; run as root:" >&2
  echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
