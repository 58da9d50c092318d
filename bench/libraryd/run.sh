#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/libraryd/run.sh: libraryd against nginx on the same machine, in the same run.
#
#   bench/libraryd/run.sh [BUILD_DIR]     (default BUILD_DIR: build)
#   env: DURATION=10s CONNS=64 WRK_THREADS=2 SERVER_THREADS=<nproc>
#
# Measures with wrk (keep-alive, fixed concurrency):
#   nginx   GET of a static file with exactly the bytes of libraryd's GET /books/1 (the ceiling)
#   libraryd GET /books/{id}
#   libraryd keyed POST /books/{id}/loans, a new key per request, --sync full and --sync normal
#   libraryd keyed POST replays (the same key every time: answered from the key store)
# and prints requests/s, p99 latency and the ratio to nginx. Both servers get the same number
# of threads / worker processes, run on 127.0.0.1 with ephemeral ports and are stopped at the end.
# libraryd runs with --work none: no configured service cost, so this measures the HTTP path,
# the workers' hand-off and the store, not a simulated workload; and with --queue-discipline
# fifo, because 64 closed-loop connections on the single writer form a standing queue that codel
# (the default) would rightly shed with 503s, which is not what this measures.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
LIBRARYD=$BUILD/cmd/libraryd/libraryd
DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
WRK_THREADS=${WRK_THREADS:-2}
SERVER_THREADS=${SERVER_THREADS:-$(nproc)}
HERE=$(cd "$(dirname "$0")" && pwd)

for tool in wrk nginx curl; do
  command -v "$tool" >/dev/null || { echo "run.sh: $tool is required" >&2; exit 2; }
done
[ -x "$LIBRARYD" ] || { echo "run.sh: build libraryd first ($LIBRARYD not found)" >&2; exit 2; }

WORK=$(mktemp -d /tmp/libraryd-bench.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

wait_file() { for _ in $(seq 1 500); do [ -s "$1" ] && return 0; sleep 0.01; done; return 1; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

start_libraryd() { # $1 = name, rest = extra flags; sets LPORT and LPID
  local name=$1; shift
  "$LIBRARYD" --port 0 --port-file "$WORK/$name.port" --db "$WORK/$name.db" --log off \
    --threads "$SERVER_THREADS" --connection-limit 4096 --per-client-limit 0 --work none \
    --queue-discipline fifo "$@" 2>"$WORK/$name.log" &
  LPID=$!
  PIDS+=("$LPID")
  wait_file "$WORK/$name.port" || { cat "$WORK/$name.log" >&2; exit 1; }
  LPORT=$(cat "$WORK/$name.port")
}

stop_pid() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# run_wrk URL [SCRIPT ARGS...] -> "req/s p99_ms errors"
run_wrk() {
  local url=$1; shift
  local script=()
  if [ $# -gt 0 ]; then script=(-s "$1"); shift; fi
  local out
  out=$(wrk -t"$WRK_THREADS" -c"$CONNS" -d"$DURATION" --latency "${script[@]}" "$url" \
        ${1+--} "$@")
  echo "$out" >> "$WORK/wrk.txt"
  local rps p99 errors
  rps=$(echo "$out" | awk '/^Requests\/sec:/ {print $2}')
  p99=$(echo "$out" | awk '$1 == "99%" {print $2}')
  errors=$(echo "$out" | awk '/Non-2xx or 3xx responses:/ {n += $5} /Socket errors:/ {s = 1}
                              END {print (n ? n " non-2xx" : "") (s ? " socket-errors" : "")}')
  echo "$rps $(to_ms "$p99") ${errors:-0}"
}

to_ms() { # wrk latency (e.g. 1.23ms, 850.00us, 1.02s) -> ms
  echo "$1" | awk '/us$/ {sub("us",""); printf "%.3f", $1/1000; next}
                   /ms$/ {sub("ms",""); printf "%.3f", $1; next}
                   /s$/  {sub("s","");  printf "%.3f", $1*1000; next}
                   {print $1}'
}

# --- libraryd GET -------------------------------------------------------------------------------
start_libraryd get
curl -s "http://127.0.0.1:$LPORT/books/1" > "$WORK/book.json"
BODY_BYTES=$(stat -c %s "$WORK/book.json")
read -r GET_RPS GET_P99 GET_ERR <<< "$(run_wrk "http://127.0.0.1:$LPORT/books/1")"
stop_pid "$LPID"

# --- nginx: the same bytes from a static file ---------------------------------------------------
mkdir -p "$WORK/www" "$WORK/nginx"
cp "$WORK/book.json" "$WORK/www/book.json"
chmod 755 "$WORK" "$WORK/www"   # nginx workers may run as an unprivileged user
chmod 644 "$WORK/www/book.json"
NPORT=$(free_port)
cat > "$WORK/nginx/nginx.conf" <<CONF
worker_processes $SERVER_THREADS;
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  client_body_temp_path $WORK/nginx/body;
  proxy_temp_path $WORK/nginx/proxy;
  fastcgi_temp_path $WORK/nginx/fastcgi;
  uwsgi_temp_path $WORK/nginx/uwsgi;
  scgi_temp_path $WORK/nginx/scgi;
  types { application/json json; }
  server {
    listen 127.0.0.1:$NPORT;
    root $WORK/www;
  }
}
CONF
nginx -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" 2>"$WORK/nginx/stderr" &
NPID=$!
PIDS+=("$NPID")
for _ in $(seq 1 500); do
  curl -sf "http://127.0.0.1:$NPORT/book.json" >/dev/null && break
  sleep 0.01
done
NGINX_BYTES=$(curl -s "http://127.0.0.1:$NPORT/book.json" | wc -c)
read -r NGX_RPS NGX_P99 NGX_ERR <<< "$(run_wrk "http://127.0.0.1:$NPORT/book.json")"
stop_pid "$NPID"

# --- libraryd keyed POST loans (a new key each: every request commits) ------------------------
post_bench() { # sync mode; sets POST_RESULT
  start_libraryd "post-$1" --sync "$1"
  local id
  id=$(curl -s -X POST -d '{"title":"Bench","author":"wrk","stock":1000000000}' \
    "http://127.0.0.1:$LPORT/books" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  POST_RESULT=$(run_wrk "http://127.0.0.1:$LPORT" "$HERE/post_loans.lua" "$id" "$$")
  stop_pid "$LPID"
}
post_bench full
read -r POSTF_RPS POSTF_P99 POSTF_ERR <<< "$POST_RESULT"
post_bench normal
read -r POSTN_RPS POSTN_P99 POSTN_ERR <<< "$POST_RESULT"

# --- libraryd keyed POST replays ------------------------------------------------------------------
start_libraryd replay
curl -s -X POST -H 'Idempotency-Key: bench-replay' "http://127.0.0.1:$LPORT/books/1/loans" \
  >/dev/null
REP=$(run_wrk "http://127.0.0.1:$LPORT" "$HERE/replay_loans.lua" 1 bench-replay)
read -r REP_RPS REP_P99 REP_ERR <<< "$REP"
stop_pid "$LPID"

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
row() { # label rps p99 errors
  printf "%-44s %12s %10s %9s %s\n" "$1" "$2" "$3" "$(ratio "$2" "$NGX_RPS")" "$4"
}

echo
echo "libraryd benchmark: wrk -t$WRK_THREADS -c$CONNS -d$DURATION, keep-alive, $(nproc) CPUs," \
  "$SERVER_THREADS server threads/workers, body $BODY_BYTES bytes (nginx file $NGINX_BYTES)"
printf "%-44s %12s %10s %9s %s\n" "target" "req/s" "p99 ms" "x nginx" "errors"
row "nginx static file (ceiling)" "$NGX_RPS" "$NGX_P99" "$NGX_ERR"
row "libraryd GET /books/1" "$GET_RPS" "$GET_P99" "$GET_ERR"
row "libraryd POST loans, new key, sync=full" "$POSTF_RPS" "$POSTF_P99" "$POSTF_ERR"
row "libraryd POST loans, new key, sync=normal" "$POSTN_RPS" "$POSTN_P99" "$POSTN_ERR"
row "libraryd POST loans, replayed key" "$REP_RPS" "$REP_P99" "$REP_ERR"
met=$(awk -v a="$GET_RPS" -v b="$NGX_RPS" 'BEGIN { print (a >= 0.7 * b) ? "met" : "NOT met" }')
echo "goal: libraryd GET >= 0.70 x nginx -> $met"
