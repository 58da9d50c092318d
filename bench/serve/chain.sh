#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/serve/chain.sh: the retry arithmetic of issue 12 measured on real processes.
#
#   client -> linkd serve (tier 1) -> linkd serve (tier 2) -> libraryd, every request answered 503
#
# Every tier, the client included, is allowed 3 attempts. Two runs, the same backoff in both:
#   naive  no retry budget, no breaker, Linkd-Retried ignored, at every tier: each tier retries
#          what the tier below already retried, so libraryd gets up to 3 x 3 x 3 = 27 requests
#          per logical call
#   linkd  the defaults (per-tier retry budget and breaker, the deadline carried down as
#          Linkd-Deadline, Linkd-Retried honoured): retries happen at one tier
# Reports per run: requests seen by tier 1, tier 2 and libraryd per logical call (libraryd's
# count is its fault rule's `fired`, from /admin/faults), the client's attempts, and how many
# calls were answered after their deadline. With CHECK=1 it fails unless naive >= 20x,
# linkd <= 1.3x and no call is late.
#
#   bench/serve/chain.sh [BUILD_DIR]
#   env: CALLS=200 CONC=8 ATTEMPTS=3 DEADLINE=2s BASE=5ms MAX_DELAY=20ms CHECK=0
# Bounded: two runs of CALLS calls, each call bounded by DEADLINE.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
LINKD=$BUILD/cmd/linkd/linkd
LIBRARYD=$BUILD/cmd/libraryd/libraryd
CLIENT=${CHAIN_CLIENT:-$BUILD/bench/serve/chain_client}
[ -x "$CLIENT" ] || CLIENT=$BUILD/test/gwconf/chain_client
CALLS=${CALLS:-200}
CONC=${CONC:-8}
ATTEMPTS=${ATTEMPTS:-3}
DEADLINE=${DEADLINE:-2s}
BASE=${BASE:-5ms}
MAX_DELAY=${MAX_DELAY:-20ms}
CHECK=${CHECK:-0}
for f in "$LINKD" "$LIBRARYD" "$CLIENT"; do
  [ -x "$f" ] || { echo "chain.sh: $f not built" >&2; exit 2; }
done
command -v curl >/dev/null || { echo "chain.sh: curl is required" >&2; exit 2; }
command -v python3 >/dev/null || { echo "chain.sh: python3 is required" >&2; exit 2; }

WORK=$(mktemp -d /tmp/linkd-chain.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

wait_file() { for _ in $(seq 1 1000); do [ -s "$1" ] && return 0; sleep 0.01; done; return 1; }

# --- libraryd: every GET of a book answered 503 (a permanent failure) -----------------------
"$LIBRARYD" --port 0 --port-file "$WORK/lib.port" --admin-port 0 \
  --admin-port-file "$WORK/lib.admin" --db "$WORK/lib.db" --log off --work none \
  --per-client-limit 0 --fault 'route=GET /books/*,kind=status,code=503' 2>"$WORK/lib.log" &
PIDS+=($!)
wait_file "$WORK/lib.port" && wait_file "$WORK/lib.admin" || { cat "$WORK/lib.log" >&2; exit 1; }
LIB_PORT=$(cat "$WORK/lib.port")
LIB_ADMIN=$(cat "$WORK/lib.admin")

fired() {
  curl -sf "http://127.0.0.1:$LIB_ADMIN/admin/faults" |
    python3 -c 'import json,sys; print(sum(r["fired"] for r in json.load(sys.stdin)["rules"]))'
}

# requests_of ADMIN_PORT -> linkd_gw_requests_total summed over its series
requests_of() {
  curl -sf "http://127.0.0.1:$1/metrics" |
    awk '/^linkd_gw_requests_total\{/ {n += $NF} END {printf "%d\n", n}'
}

# tier NAME UPSTREAM_PORT POLICY_LINES -> starts linkd serve; sets PORT_<NAME>, ADMIN_<NAME>
tier() {
  local name=$1 up=$2 policy=$3
  cat > "$WORK/$name.conf" <<CONF
[listen]
address = 127.0.0.1:0
[admin]
address = 127.0.0.1:0
[cluster up]
endpoint = 127.0.0.1:$up
; a single endpoint: outlier ejection would only send it into panic mode
eject-5xx = 0
eject-connect-failures = 0
[route all]
cluster = up
max-attempts = $ATTEMPTS
base = $BASE
max-delay = $MAX_DELAY
$policy
CONF
  rm -f "$WORK/$name.ports"
  "$LINKD" serve -c "$WORK/$name.conf" --port-file "$WORK/$name.ports" 2>"$WORK/$name.log" &
  PIDS+=($!)
  wait_file "$WORK/$name.ports" || { cat "$WORK/$name.log" >&2; exit 1; }
  read -r p a < "$WORK/$name.ports"
  eval "PORT_$name=$p ADMIN_$name=$a TPID_$name=$!"
}

stop_tiers() {
  kill "$TPID_t1" "$TPID_t2" 2>/dev/null || true
  wait "$TPID_t1" "$TPID_t2" 2>/dev/null || true
}

NAIVE_POLICY="budget = none
breaker = none
honor-retried = false"

declare -A R
run_mode() { # MODE POLICY
  local mode=$1 policy=$2
  tier t2 "$LIB_PORT" "$policy"
  tier t1 "$PORT_t2" "$policy"
  local before out
  before=$(fired)
  out=$("$CLIENT" "$mode" "http://127.0.0.1:$PORT_t1/books/1" "$CALLS" "$CONC" "$ATTEMPTS" \
        "$DEADLINE" "$BASE" "$MAX_DELAY")
  local lib t1 t2
  lib=$(( $(fired) - before ))
  t1=$(requests_of "$ADMIN_t1")
  t2=$(requests_of "$ADMIN_t2")
  stop_tiers
  local key
  for key in client_attempts late slowest seconds; do
    eval "$key=$(echo "$out" | tr ' ' '\n' | sed -n "s/^$key=//p")"
  done
  R[$mode]=$(python3 -c "
c=$CALLS
print('%-6s %6d %9.2f %9.2f %9.2f %9.2f %6s %9s %6s' % ('$mode', c, $client_attempts/c, $t1/c,
      $t2/c, $lib/c, '$late', '$slowest', '$seconds'))")
  R[$mode.lib]=$lib
  R[$mode.late]=$late
}

run_mode naive "$NAIVE_POLICY"
run_mode linkd "${LINKD_POLICY:-}" # LINKD_POLICY: extra route keys, e.g. a budget to compare

echo "chain: client -> linkd serve -> linkd serve -> libraryd (503 to every GET), $ATTEMPTS" \
  "attempts per tier, $CALLS calls, $CONC in flight, deadline $DEADLINE, backoff $BASE..$MAX_DELAY"
echo "requests per logical call at each tier (client = attempts the client made):"
printf '%-6s %6s %9s %9s %9s %9s %6s %9s %6s\n' mode calls client tier1 tier2 libraryd late \
  slowest secs
echo "${R[naive]}"
echo "${R[linkd]}"

if [ "$CHECK" = 1 ]; then
  python3 - "$CALLS" "${R[naive.lib]}" "${R[linkd.lib]}" "${R[naive.late]}" \
    "${R[linkd.late]}" <<'PY'
import sys
calls, naive, linkd, late_n, late_l = map(int, sys.argv[1:])
bad = []
if naive < 20 * calls: bad.append("naive amplification %.2fx < 20x" % (naive / calls))
if linkd > 1.3 * calls: bad.append("linkd amplification %.2fx > 1.3x" % (linkd / calls))
if late_l: bad.append("%d linkd calls answered after their deadline" % late_l)
if late_n: bad.append("%d naive calls answered after their deadline" % late_n)
if bad:
    print("FAIL: " + "; ".join(bad)); sys.exit(1)
print("OK: naive %.2fx >= 20x, linkd %.2fx <= 1.3x, no call late" % (naive / calls, linkd / calls))
PY
fi
