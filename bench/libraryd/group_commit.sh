#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/libraryd/group_commit.sh: durable keyed POSTs/s, group commit on vs off, in the same run.
#
#   bench/libraryd/group_commit.sh [BUILD_DIR]     (default BUILD_DIR: build)
#   env: DURATION=3s CONNS=64 WRK_THREADS=2 WORKERS=32 SERVER_THREADS=2 ROUNDS=5
#        LINKD_BENCH_CPUS=A or A,B: wrk on CPU A, libraryd on CPU B (taskset)
#
# Two libraryd processes run for the whole script, both with --sync full (the WAL fsynced at
# every commit) on their own file: one with --group-commit on, one with --group-commit off (one
# transaction and one fsync per request: the baseline). wrk sends keyed POST /books/{id}/loans,
# a new Idempotency-Key per request, so every request commits a loan and its key record. Round k
# measures both back to back (off first in odd rounds, on first in even ones) and gives the
# ratio on / off; the report leads with the ratios (per round, median, min-max), then requests/s,
# p99 and how many writes shared a commit (from /admin/stats). libraryd runs with --work none
# and --queue-discipline fifo (as run.sh: this measures the store, not a simulated cost or
# codel's shedding of the standing queue that closed-loop connections form).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
LIBRARYD=$BUILD/cmd/libraryd/libraryd
DURATION=${DURATION:-3s}
CONNS=${CONNS:-64}
WRK_THREADS=${WRK_THREADS:-2}
WORKERS=${WORKERS:-32}
SERVER_THREADS=${SERVER_THREADS:-2}
ROUNDS=${ROUNDS:-5}
HERE=$(cd "$(dirname "$0")" && pwd)
if ! [[ $ROUNDS =~ ^[0-9]+$ ]] || [ "$ROUNDS" -lt 1 ] || [ "$ROUNDS" -gt 21 ]; then
  echo "group_commit.sh: ROUNDS must be 1..21" >&2
  exit 2
fi
CLIENT_PIN=()
SERVER_PIN=()
if [ -n "${LINKD_BENCH_CPUS:-}" ]; then
  [[ $LINKD_BENCH_CPUS =~ ^([0-9]+)(,([0-9]+))?$ ]] ||
    { echo "group_commit.sh: LINKD_BENCH_CPUS=$LINKD_BENCH_CPUS: want A or A,B" >&2; exit 2; }
  CLIENT_PIN=(taskset -c "${BASH_REMATCH[1]}")
  SERVER_PIN=(taskset -c "${BASH_REMATCH[3]:-${BASH_REMATCH[1]}}")
fi
for tool in wrk curl python3; do
  command -v "$tool" >/dev/null || { echo "group_commit.sh: $tool is required" >&2; exit 2; }
done
[ -x "$LIBRARYD" ] || { echo "group_commit.sh: build libraryd first ($LIBRARYD)" >&2; exit 2; }

WORK=$(mktemp -d /tmp/libraryd-gc-bench.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

wait_file() { for _ in $(seq 1 500); do [ -s "$1" ] && return 0; sleep 0.01; done; return 1; }

declare -A PORT APORT BOOK
for mode in on off; do
  "${SERVER_PIN[@]}" "$LIBRARYD" --port 0 --port-file "$WORK/$mode.port" --admin-port 0 \
    --admin-port-file "$WORK/$mode.aport" --db "$WORK/$mode.db" --log off --sync full \
    --group-commit "$mode" --threads "$SERVER_THREADS" --workers "$WORKERS" --queue 4096 \
    --connection-limit 4096 --per-client-limit 0 --work none --queue-discipline fifo \
    2>"$WORK/$mode.log" &
  PIDS+=("$!")
  wait_file "$WORK/$mode.aport" || { cat "$WORK/$mode.log" >&2; exit 1; }
  PORT[$mode]=$(cat "$WORK/$mode.port")
  APORT[$mode]=$(cat "$WORK/$mode.aport")
  BOOK[$mode]=$(curl -s -X POST -H 'Content-Type: application/json' -d '{"title":"Bench","author":"wrk","stock":1000000000}' \
    "http://127.0.0.1:${PORT[$mode]}/books" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
done

commits_of() { # mode -> "commits writes"
  curl -s "http://127.0.0.1:${APORT[$1]}/admin/stats" |
    python3 -c 'import json,sys; c=json.load(sys.stdin)["server"]["store_commits"]; print(c["commits"], c["writes"])'
}

to_ms() {
  echo "$1" | awk '/us$/ {sub("us",""); printf "%.3f", $1/1000; next}
                   /ms$/ {sub("ms",""); printf "%.3f", $1; next}
                   /s$/  {sub("s","");  printf "%.3f", $1*1000; next}
                   {print $1}'
}

# run MODE ROUND -> "req/s p99_ms writes_per_commit errors"
run() {
  local mode=$1 k=$2 c0 w0 c1 w1 out
  read -r c0 w0 <<< "$(commits_of "$mode")"
  out=$("${CLIENT_PIN[@]}" wrk -t"$WRK_THREADS" -c"$CONNS" -d"$DURATION" --latency \
        -s "$HERE/post_loans.lua" "http://127.0.0.1:${PORT[$mode]}" -- "${BOOK[$mode]}" "$$-$k-$mode")
  read -r c1 w1 <<< "$(commits_of "$mode")"
  echo "$out" >> "$WORK/wrk.txt"
  local rps p99 errors
  rps=$(echo "$out" | awk '/^Requests\/sec:/ {print $2}')
  p99=$(echo "$out" | awk '$1 == "99%" {print $2}')
  errors=$(echo "$out" | awk '/Non-2xx or 3xx responses:/ {n += $5} /Socket errors:/ {s = 1}
                              END {print (n ? n "-non-2xx" : "") (s ? "-socket-errors" : "")}')
  echo "$rps $(to_ms "$p99") $(awk -v c=$((c1 - c0)) -v w=$((w1 - w0)) \
    'BEGIN { printf "%.1f", c ? w / c : 0 }') ${errors:-0}"
}

median_of() {
  sort -g | awk -v d="${1:-0}" '{v[NR] = $1}
    END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
          printf "%.*f [%.*f-%.*f]", d, m, d, v[1], d, v[NR] }'
}

echo "group commit benchmark: keyed POST /books/{id}/loans, new key per request, --sync full;" \
  "wrk -t$WRK_THREADS -c$CONNS -d$DURATION; libraryd --workers $WORKERS --threads $SERVER_THREADS;" \
  "$(nproc) CPUs; placement ${LINKD_BENCH_CPUS:-unpinned}; $ROUNDS interleaved rounds"
printf "%-6s %-6s %8s %10s %10s %8s %8s %10s %10s %s\n" round first ratio "on r/s" "off r/s" \
  "on p99" "off p99" "on w/c" "off w/c" errors
: > "$WORK/rounds"
for k in $(seq 1 "$ROUNDS"); do
  if [ $((k % 2)) -eq 1 ]; then
    first=off
    read -r F_RPS F_P99 F_WC F_ERR <<< "$(run off "$k")"
    read -r O_RPS O_P99 O_WC O_ERR <<< "$(run on "$k")"
  else
    first=on
    read -r O_RPS O_P99 O_WC O_ERR <<< "$(run on "$k")"
    read -r F_RPS F_P99 F_WC F_ERR <<< "$(run off "$k")"
  fi
  r=$(awk -v a="$O_RPS" -v b="$F_RPS" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }')
  printf "%-6s %-6s %8s %10s %10s %8s %8s %10s %10s %s\n" "$k" "$first" "$r" "$O_RPS" "$F_RPS" \
    "$O_P99" "$F_P99" "$O_WC" "$F_WC" "$O_ERR/$F_ERR"
  echo "$r $O_RPS $F_RPS $O_P99 $F_P99 $O_WC" >> "$WORK/rounds"
done
col() { awk -v c="$1" '{print $c}' "$WORK/rounds" | median_of "$2"; }
echo
echo "median [min-max] over $ROUNDS rounds:"
echo "  ratio on/off      $(col 1 2)"
echo "  on  req/s         $(col 2 0)   p99 ms $(col 4 2)   writes per commit $(col 6 1)"
echo "  off req/s         $(col 3 0)   p99 ms $(col 5 2)"
MED=$(awk '{print $1}' "$WORK/rounds" | median_of 2 | cut -d' ' -f1)
echo "goal: group commit >= 5x one fsync per request (median ratio $MED) ->" \
  "$(awk -v r="$MED" 'BEGIN { print (r >= 5) ? "met" : "NOT met" }')"
