#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/libraryd/overload.sh: goodput of libraryd at twice its capacity, per queue discipline.
#
#   bench/libraryd/overload.sh [BUILD_DIR]     (default BUILD_DIR: build)
#   env: WORKERS=4 COST=10ms LOAD=2 SECONDS_=10 TIMEOUT_MS=1000 DISCIPLINES="fifo lifo ..."
#        HEADER="Linkd-Deadline: 1000" (sent with every request; default none: callers who do
#        not propagate their deadline, so the server cannot know they gave up until they hang up)
#
# libraryd runs with WORKERS workers and a sleep cost of COST per GET /books/{id}, so its capacity
# is WORKERS / COST (400/s by default). bench_overload offers LOAD x that rate as an open loop on
# 127.0.0.1, each request on a new connection from a caller who gives up after TIMEOUT_MS and
# hangs up. Goodput = 200 answers received within the caller's timeout, per second of arrivals.
# The server's own view (work done for a caller still there, work abandoned, drops) comes from
# /admin/stats. Every run is bounded by SECONDS_ + TIMEOUT + a few seconds; servers are stopped.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
LIBRARYD=$BUILD/cmd/libraryd/libraryd
GEN=$BUILD/bench/libraryd/bench_overload
WORKERS=${WORKERS:-4}
COST=${COST:-10ms}
LOAD=${LOAD:-2}
SECONDS_=${SECONDS_:-10}
TIMEOUT_MS=${TIMEOUT_MS:-1000}
DISCIPLINES=${DISCIPLINES:-fifo lifo adaptive-lifo codel}
HEADER=${HEADER:-}

for f in "$LIBRARYD" "$GEN"; do
  [ -x "$f" ] || { echo "overload.sh: build it first ($f not found)" >&2; exit 2; }
done
command -v curl >/dev/null || { echo "overload.sh: curl is required" >&2; exit 2; }
command -v python3 >/dev/null || { echo "overload.sh: python3 is required" >&2; exit 2; }

COST_MS=$(python3 -c "
import re,sys
m=re.fullmatch(r'([0-9.]+)(us|ms|s)', '$COST')
if not m: sys.exit('COST must be like 10ms')
v=float(m.group(1)); print(v/1000 if m.group(2)=='us' else v*1000 if m.group(2)=='s' else v)")
CAPACITY=$(python3 -c "print(round($WORKERS * 1000 / $COST_MS))")
RATE=$(python3 -c "print(round($CAPACITY * $LOAD))")

WORK=$(mktemp -d /tmp/libraryd-overload.XXXXXX)
LPID=
cleanup() {
  if [ -n "$LPID" ]; then kill "$LPID" 2>/dev/null || true; wait "$LPID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

wait_file() { for _ in $(seq 1 500); do [ -s "$1" ] && return 0; sleep 0.01; done; return 1; }

echo "libraryd overload: $WORKERS workers x $COST per GET = capacity $CAPACITY/s;" \
     "offered ${LOAD}x = $RATE/s open loop for ${SECONDS_}s; callers time out after ${TIMEOUT_MS}ms; $(nproc) CPUs" \
     "${HEADER:+; header '$HEADER'}"
printf '%-14s %9s %8s %8s %8s %8s %9s %9s %8s %8s\n' discipline goodput/s ok 503 504 \
  timeouts abandoned work_done p50_ms p99_ms
for d in $DISCIPLINES; do
  rm -f "$WORK/port" "$WORK/admin"
  "$LIBRARYD" --port 0 --port-file "$WORK/port" --admin-port 0 --admin-port-file "$WORK/admin" \
    --db "$WORK/$d.db" --log off --connection-limit 8000 --drain-timeout 1s \
    --workers "$WORKERS" --work "GET /books/*=$COST" --queue-discipline "$d" \
    2>"$WORK/$d.log" &
  LPID=$!
  wait_file "$WORK/port" && wait_file "$WORK/admin" || { cat "$WORK/$d.log" >&2; exit 1; }
  out=$("$GEN" "$(cat "$WORK/port")" "$RATE" "$SECONDS_" "$TIMEOUT_MS" /books/1 ${HEADER:+"$HEADER"})
  echo "$d $out" >> "$WORK/raw.txt"
  stats=$(curl -s "http://127.0.0.1:$(cat "$WORK/admin")/admin/stats")
  kill "$LPID"; wait "$LPID" 2>/dev/null || true; LPID=
  python3 - "$d" "$out" "$stats" <<'PY'
import json, sys
d, out, stats = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])["server"]
kv = dict(x.split("=") for x in out.split())
print(f"{d:<14} {float(kv['goodput']):9.1f} {kv['ok']:>8} {kv['s503']:>8} {kv['s504']:>8} "
      f"{kv['timeouts']:>8} {stats['work_abandoned']:>9} {stats['work_done']:>9} "
      f"{float(kv['p50_ms']):8.1f} {float(kv['p99_ms']):8.1f}")
PY
done
