#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/libraryd/run.sh: libraryd against nginx on the same machine, in the same run.
#
#   bench/libraryd/run.sh [BUILD_DIR]     (default BUILD_DIR: build)
#   env: DURATION=5s CONNS=64 WRK_THREADS=2 SERVER_THREADS=<nproc> ROUNDS=5
#        SUBJECTS="get post-full post-normal replay"
#        LINKD_BENCH_CPUS=A or A,B: wrk on CPU A, the servers on CPU B (taskset; A,B = one CPU
#        each). Unset: nothing is pinned, and each round reports the CPUs the servers ran on.
#
# Measures with wrk (keep-alive, fixed concurrency):
#   nginx   GET of a static file with exactly the bytes of libraryd's GET /books/1 (the ceiling)
#   libraryd GET /books/{id}
#   libraryd keyed POST /books/{id}/loans, a new key per request, --sync full and --sync normal
#   libraryd keyed POST replays (the same key every time: answered from the key store)
# Every server runs for the whole script; each subject is measured in ROUNDS rounds, and round k
# runs nginx and the subject back to back (nginx first in odd rounds, the subject first in even
# ones), so drift of the machine's speed hits both alike. Each round gives one ratio subject /
# nginx; the report leads with those ratios (per round, median, min-max), then requests/s and
# p99 medians. Both kinds of server get the same number of threads / worker processes, run on
# 127.0.0.1 with ephemeral ports and are stopped at the end. Bounded: 2 x ROUNDS wrk runs of
# DURATION per subject (ROUNDS <= 21).
# libraryd runs with --work none: no configured service cost, so this measures the HTTP path,
# the workers' hand-off and the store, not a simulated workload; and with --queue-discipline
# fifo, because 64 closed-loop connections on the single writer form a standing queue that codel
# (the default) would rightly shed with 503s, which is not what this measures.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
LIBRARYD=$BUILD/cmd/libraryd/libraryd
DURATION=${DURATION:-5s}
CONNS=${CONNS:-64}
WRK_THREADS=${WRK_THREADS:-2}
SERVER_THREADS=${SERVER_THREADS:-$(nproc)}
ROUNDS=${ROUNDS:-5}
SUBJECTS=${SUBJECTS:-get post-full post-normal replay}
if ! [[ $ROUNDS =~ ^[0-9]+$ ]] || [ "$ROUNDS" -lt 1 ] || [ "$ROUNDS" -gt 21 ]; then
  echo "run.sh: ROUNDS must be 1..21" >&2
  exit 2
fi

# Placement: CLIENT_PIN / SERVER_PIN prefix the wrk and server commands.
CLIENT_PIN=()
SERVER_PIN=()
if [ -n "${LINKD_BENCH_CPUS:-}" ]; then
  [[ $LINKD_BENCH_CPUS =~ ^([0-9]+)(,([0-9]+))?$ ]] ||
    { echo "run.sh: LINKD_BENCH_CPUS=$LINKD_BENCH_CPUS: want A or A,B" >&2; exit 2; }
  CLIENT_PIN=(taskset -c "${BASH_REMATCH[1]}")
  SERVER_PIN=(taskset -c "${BASH_REMATCH[3]:-${BASH_REMATCH[1]}}")
fi
HERE=$(cd "$(dirname "$0")" && pwd)

for tool in wrk nginx curl taskset; do
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
  "${SERVER_PIN[@]}" "$LIBRARYD" --port 0 --port-file "$WORK/$name.port" --db "$WORK/$name.db" --log off \
    --threads "$SERVER_THREADS" --connection-limit 4096 --per-client-limit 0 --work none \
    --queue-discipline fifo "$@" 2>"$WORK/$name.log" &
  LPID=$!
  PIDS+=("$LPID")
  wait_file "$WORK/$name.port" || { cat "$WORK/$name.log" >&2; exit 1; }
  LPORT=$(cat "$WORK/$name.port")
}

# run_wrk URL [SCRIPT ARGS...] -> "req/s p99_ms errors"
run_wrk() {
  local url=$1; shift
  local script=()
  if [ $# -gt 0 ]; then script=(-s "$1"); shift; fi
  local out
  out=$("${CLIENT_PIN[@]}" wrk -t"$WRK_THREADS" -c"$CONNS" -d"$DURATION" --latency "${script[@]}" "$url" \
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

# cpus_of PID -> the CPUs its threads and child processes last ran on, e.g. "0,1"
cpus_of() {
  { ps -L -o psr= -p "$1"; ps -L -o psr= --ppid "$1"; } 2>/dev/null | tr -d ' ' | sort -nu | paste -sd, -
}

median_of() { # numbers on stdin -> "median [min-max]"
  sort -g | awk -v d="${1:-0}" '{v[NR] = $1}
    END { if (!NR) { print "-"; exit }
          m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
          printf "%.*f [%.*f-%.*f]", d, m, d, v[1], d, v[NR] }'
}

# --- the servers: nginx (the same bytes as a static file) and one libraryd per subject --------
start_libraryd get
curl -s "http://127.0.0.1:$LPORT/books/1" > "$WORK/book.json"
BODY_BYTES=$(stat -c %s "$WORK/book.json")
declare -A PID URL SCRIPT
PID[get]=$LPID URL[get]="http://127.0.0.1:$LPORT/books/1" SCRIPT[get]=""

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
"${SERVER_PIN[@]}" nginx -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" 2>"$WORK/nginx/stderr" &
NPID=$!
PIDS+=("$NPID")
for _ in $(seq 1 500); do
  curl -sf "http://127.0.0.1:$NPORT/book.json" >/dev/null && break
  sleep 0.01
done
NGINX_BYTES=$(curl -s "http://127.0.0.1:$NPORT/book.json" | wc -c)

# keyed POST loans, a new key each (every request commits), per sync mode
for sync in full normal; do
  case " $SUBJECTS " in *" post-$sync "*) ;; *) continue ;; esac
  start_libraryd "post-$sync" --sync "$sync"
  id=$(curl -s -X POST -H 'Content-Type: application/json' -d '{"title":"Bench","author":"wrk","stock":1000000000}' \
    "http://127.0.0.1:$LPORT/books" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  PID[post-$sync]=$LPID URL[post-$sync]="http://127.0.0.1:$LPORT"
  SCRIPT[post-$sync]="$HERE/post_loans.lua $id $$"
done
# keyed POST replays (the same key every time: answered from the key store)
case " $SUBJECTS " in *" replay "*)
  start_libraryd replay
  curl -s -X POST -H 'Idempotency-Key: bench-replay' "http://127.0.0.1:$LPORT/books/1/loans" \
    >/dev/null
  PID[replay]=$LPID URL[replay]="http://127.0.0.1:$LPORT"
  SCRIPT[replay]="$HERE/replay_loans.lua 1 bench-replay" ;;
esac

declare -A LABEL=(
  [get]="libraryd GET /books/1"
  [post-full]="libraryd POST loans, new key, sync=full"
  [post-normal]="libraryd POST loans, new key, sync=normal"
  [replay]="libraryd POST loans, replayed key")

echo "libraryd benchmark: wrk -t$WRK_THREADS -c$CONNS -d$DURATION, keep-alive, $(nproc) CPUs," \
  "$SERVER_THREADS server threads/workers, body $BODY_BYTES bytes (nginx file $NGINX_BYTES)," \
  "$ROUNDS interleaved rounds per subject"
echo "placement: LINKD_BENCH_CPUS=${LINKD_BENCH_CPUS:-(unset: not pinned)}," \
  "wrk ${CLIENT_PIN[*]:-unpinned}, servers ${SERVER_PIN[*]:-unpinned}"

SUMMARY=()
for s in $SUBJECTS; do
  [ -n "${URL[$s]:-}" ] || { echo "run.sh: unknown subject $s" >&2; exit 2; }
  : > "$WORK/$s.rounds"
  echo
  echo "${LABEL[$s]} vs nginx, per round (first = the one run first; cpus = CPUs each server" \
    "last ran on)"
  printf "%-6s %-9s %8s %12s %12s %10s %10s  %-10s %-10s %s\n" round first ratio "req/s" \
    "nginx r/s" "p99 ms" "nginx p99" "cpus" "nginx cpus" errors
  for k in $(seq 1 "$ROUNDS"); do
    # shellcheck disable=SC2086  # SCRIPT holds the script and its arguments
    if [ $((k % 2)) -eq 1 ]; then
      first=nginx
      read -r N_RPS N_P99 N_ERR <<< "$(run_wrk "http://127.0.0.1:$NPORT/book.json")"
      read -r S_RPS S_P99 S_ERR <<< "$(run_wrk "${URL[$s]}" ${SCRIPT[$s]})"
    else
      first=libraryd
      read -r S_RPS S_P99 S_ERR <<< "$(run_wrk "${URL[$s]}" ${SCRIPT[$s]})"
      read -r N_RPS N_P99 N_ERR <<< "$(run_wrk "http://127.0.0.1:$NPORT/book.json")"
    fi
    r=$(awk -v a="$S_RPS" -v b="$N_RPS" 'BEGIN { printf "%.3f", (b > 0) ? a / b : 0 }')
    printf "%-6s %-9s %8s %12s %12s %10s %10s  %-10s %-10s %s\n" "$k" "$first" "$r" "$S_RPS" \
      "$N_RPS" "$S_P99" "$N_P99" "$(cpus_of "${PID[$s]}")" "$(cpus_of "$NPID")" "$S_ERR/$N_ERR"
    echo "$r $S_RPS $N_RPS $S_P99 $N_P99" >> "$WORK/$s.rounds"
  done
  col() { awk -v c="$1" '{print $c}' "$WORK/$s.rounds" | median_of "$2"; }
  SUMMARY+=("$(printf "%-44s %-22s %-26s %-26s %s" "${LABEL[$s]}" "$(col 1 3)" "$(col 2 0)" \
    "$(col 3 0)" "$(col 4 2)")")
  [ "$s" = get ] && GET_RATIO_MED=$(awk '{print $1}' "$WORK/$s.rounds" | median_of 3 | cut -d' ' -f1)
done

echo
echo "summary over $ROUNDS rounds: median [min-max]"
printf "%-44s %-22s %-26s %-26s %s\n" "target" "ratio x nginx" "req/s" "nginx req/s (same rounds)" \
  "p99 ms"
for line in "${SUMMARY[@]}"; do echo "$line"; done
if [ -n "${GET_RATIO_MED:-}" ]; then
  met=$(awk -v r="$GET_RATIO_MED" 'BEGIN { print (r >= 0.70) ? "met" : "NOT met" }')
  echo "goal: libraryd GET >= 0.70 x nginx (median of per-round ratios $GET_RATIO_MED) -> $met"
fi
