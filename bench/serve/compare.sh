#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/serve/compare.sh: `linkd serve` against HAProxy and nginx as reverse proxies, in one run,
# all in front of the same nginx upstream (a static file), each proxy with THREADS threads
# (linkd serve --threads, HAProxy nbthread, nginx worker_processes).
#
#   bench/serve/compare.sh [BUILD_DIR]
#   env: DURATION=5s CONNS=64 WRK_THREADS=1 THREADS=1 ROUNDS=5 IDLE=10000 LINKD_BENCH_CPUS=A[,B]
#
# Throughput: wrk -t$WRK_THREADS -c$CONNS -d$DURATION, keep-alive, GET of the file through each
# proxy, in ROUNDS rounds; round k runs the three back to back in a rotated order (round 1: linkd
# haproxy nginx, round 2: haproxy nginx linkd, ...), so drift of the machine hits all alike. Each
# round gives the ratios linkd / HAProxy of req/s and of p99; the report leads with their medians.
# Retries are on in every proxy, 4 attempts in all, connections to the upstream reused:
#   linkd serve  route defaults (max-attempts 4, budget, breaker), keep-alive pool of libcurl
#   HAProxy      retries 3, retry-on all-retryable-errors, option redispatch, http-reuse always
#   nginx        proxy_next_upstream error timeout http_502 http_503 http_504, tries 4,
#                upstream keepalive 64
# Memory: IDLE keep-alive client connections opened on each proxy (one GET each, then idle);
# the proxy's resident memory before and after, per connection (nginx: its worker processes).
# LINKD_BENCH_CPUS=A,B pins wrk to CPU A and the proxies and upstream to B (taskset).
# Bounded: 3 x ROUNDS wrk runs of DURATION, 3 idle phases of IDLE connections.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
LINKD=$BUILD/cmd/linkd/linkd
HERE=$(cd "$(dirname "$0")" && pwd)
DURATION=${DURATION:-5s}
CONNS=${CONNS:-64}
WRK_THREADS=${WRK_THREADS:-1}
ROUNDS=${ROUNDS:-5}
IDLE=${IDLE:-10000}
THREADS=${THREADS:-1}
[[ $THREADS =~ ^[1-9][0-9]?$ ]] || { echo "compare.sh: THREADS must be 1..99" >&2; exit 2; }
if ! [[ $ROUNDS =~ ^[0-9]+$ ]] || [ "$ROUNDS" -lt 1 ] || [ "$ROUNDS" -gt 21 ]; then
  echo "compare.sh: ROUNDS must be 1..21" >&2
  exit 2
fi
for tool in wrk nginx haproxy curl python3 taskset; do
  command -v "$tool" >/dev/null || { echo "compare.sh: $tool is required" >&2; exit 2; }
done
[ -x "$LINKD" ] || { echo "compare.sh: $LINKD not built" >&2; exit 2; }
ulimit -n "$(ulimit -Hn)"
[ "$IDLE" -le 14000 ] ||
  { echo "compare.sh: IDLE must be <= 14000 (the proxies' limits)" >&2; exit 2; }
[ "$(ulimit -n)" -gt $((IDLE + 1000)) ] || {
  echo "compare.sh: open-file limit $(ulimit -n) too low for IDLE=$IDLE" >&2; exit 2; }

CLIENT_PIN=()
SERVER_PIN=()
if [ -n "${LINKD_BENCH_CPUS:-}" ]; then
  [[ $LINKD_BENCH_CPUS =~ ^([0-9]+)(,([0-9]+))?$ ]] ||
    { echo "compare.sh: LINKD_BENCH_CPUS=$LINKD_BENCH_CPUS: want A or A,B" >&2; exit 2; }
  CLIENT_PIN=(taskset -c "${BASH_REMATCH[1]}")
  SERVER_PIN=(taskset -c "${BASH_REMATCH[3]:-${BASH_REMATCH[1]}}")
fi

WORK=$(mktemp -d /tmp/linkd-compare.XXXXXX)
chmod 755 "$WORK"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  [ -n "${KEEP_WORK:-}" ] && echo "kept $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_http() { # URL
  for _ in $(seq 1 500); do curl -sf -o /dev/null "$1" && return 0; sleep 0.01; done
  echo "compare.sh: $1 does not answer" >&2
  return 1
}
nginx_conf() { # DIR LISTEN_PORT SERVER_BLOCK_BODY [HTTP_EXTRA] [WORKERS]
  mkdir -p "$1"
  cat > "$1/nginx.conf" <<CONF
worker_processes ${5:-1};
daemon off;
pid $1/nginx.pid;
error_log $1/error.log warn;
worker_rlimit_nofile 19000;
events { worker_connections 15000; }
http {
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  client_body_temp_path $1/body;
  proxy_temp_path $1/proxy;
  fastcgi_temp_path $1/fastcgi;
  uwsgi_temp_path $1/uwsgi;
  scgi_temp_path $1/scgi;
  ${4:-}
  server {
    listen 127.0.0.1:$2 backlog=4096;
    $3
  }
}
CONF
}

# --- the upstream: nginx serving a 185-byte JSON file ----------------------------------------
mkdir -p "$WORK/www"
python3 -c 'import json; print(json.dumps({"id": 1, "title": "x" * 150, "stock": 3}))' \
  > "$WORK/www/book.json"
chmod 755 "$WORK/www"
chmod 644 "$WORK/www/book.json"
UP=$(free_port)
nginx_conf "$WORK/up" "$UP" "root $WORK/www;"
"${SERVER_PIN[@]}" nginx -c "$WORK/up/nginx.conf" -p "$WORK/up" 2>"$WORK/up/stderr" &
PIDS+=($!)
wait_http "http://127.0.0.1:$UP/book.json"

# --- linkd serve -------------------------------------------------------------------------------
LINKD_THREADS=()
if "$LINKD" serve --help 2>&1 | grep -q -- --threads; then
  LINKD_THREADS=(--threads "$THREADS")
elif [ "$THREADS" != 1 ]; then
  echo "compare.sh: this linkd serve has no --threads" >&2; exit 2
fi
cat > "$WORK/linkd.conf" <<CONF
[listen]
address = 127.0.0.1:0
max-connections = 15000
[cluster up]
endpoint = 127.0.0.1:$UP
[route all]
cluster = up
CONF
"${SERVER_PIN[@]}" "$LINKD" serve -c "$WORK/linkd.conf" --port-file "$WORK/linkd.ports" \
  "${LINKD_THREADS[@]}" 2>"$WORK/linkd.log" &
LPID=$!
PIDS+=($LPID)
for _ in $(seq 1 500); do [ -s "$WORK/linkd.ports" ] && break; sleep 0.01; done
read -r LPORT _ < "$WORK/linkd.ports"

# --- HAProxy -----------------------------------------------------------------------------------
HPORT=$(free_port)
HMAXCONN=$(( ($(ulimit -n) - 64) / 2 )) # 2 x maxconn + 14, + a few per thread
[ "$HMAXCONN" -le 30000 ] || HMAXCONN=30000
HIDLE=$(( IDLE < HMAXCONN - 90 ? IDLE : HMAXCONN - 90 ))
cat > "$WORK/haproxy.cfg" <<CONF
global
  nbthread $THREADS
  # HAProxy sizes its descriptors as 2 x maxconn + 14 and refuses to start beyond the hard
  # limit (20000 on the machine of docs/BENCHMARKS.md): its idle phase holds at most 9900.
  maxconn $HMAXCONN
defaults
  mode http
  timeout connect 500ms
  timeout client 120s
  timeout server 800ms
  timeout http-keep-alive 120s
  retries 3
  retry-on all-retryable-errors
  option redispatch
  http-reuse always
frontend f
  bind 127.0.0.1:$HPORT
  maxconn $HMAXCONN
  default_backend b
backend b
  server up 127.0.0.1:$UP
CONF
"${SERVER_PIN[@]}" haproxy -f "$WORK/haproxy.cfg" -db 2>"$WORK/haproxy.log" &
HPID=$!
PIDS+=($HPID)

# --- nginx as a proxy --------------------------------------------------------------------------
NPORT=$(free_port)
nginx_conf "$WORK/px" "$NPORT" "location / {
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
      proxy_next_upstream error timeout http_502 http_503 http_504;
      proxy_next_upstream_tries 4;
      proxy_connect_timeout 500ms;
      proxy_read_timeout 800ms;
    }" "upstream up { server 127.0.0.1:$UP; keepalive 64; }" "$THREADS"
"${SERVER_PIN[@]}" nginx -c "$WORK/px/nginx.conf" -p "$WORK/px" 2>"$WORK/px/stderr" &
NPID=$!
PIDS+=($NPID)

declare -A PORT=([linkd]=$LPORT [haproxy]=$HPORT [nginx]=$NPORT)
for p in linkd haproxy nginx; do wait_http "http://127.0.0.1:${PORT[$p]}/book.json"; done
for p in linkd haproxy nginx; do
  cmp -s <(curl -s "http://127.0.0.1:${PORT[$p]}/book.json") "$WORK/www/book.json" ||
    { echo "compare.sh: $p does not return the file" >&2; exit 1; }
done

to_ms() { # wrk latency (1.23ms, 850.00us, 1.02s) -> ms
  echo "$1" | awk '/us$/ {sub("us",""); printf "%.3f", $1/1000; next}
                   /ms$/ {sub("ms",""); printf "%.3f", $1; next}
                   /s$/  {sub("s","");  printf "%.3f", $1*1000; next} {print $1}'
}
run_wrk() { # NAME -> "req/s p99_ms errors"
  local out
  out=$("${CLIENT_PIN[@]}" wrk -t"$WRK_THREADS" -c"$CONNS" -d"$DURATION" --latency \
        "http://127.0.0.1:${PORT[$1]}/book.json")
  echo "== $1" >> "$WORK/wrk.txt"
  echo "$out" >> "$WORK/wrk.txt"
  local rps p99 errs
  rps=$(echo "$out" | awk '/^Requests\/sec:/ {print $2}')
  p99=$(echo "$out" | awk '$1 == "99%" {print $2}')
  errs=$(echo "$out" | awk '/Non-2xx or 3xx responses:/ {n += $5}
                            /Socket errors:/ {gsub(",", ""); n += $4 + $6 + $8 + $10}
                            END {print n + 0}')
  echo "$rps $(to_ms "$p99") $errs"
}
median() { sort -g | awk '{v[NR]=$1} END {m = NR % 2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2;
                                          printf "%.3f [%.3f-%.3f]", m, v[1], v[NR]}'; }

echo "linkd serve vs HAProxy vs nginx: wrk -t$WRK_THREADS -c$CONNS -d$DURATION keep-alive," \
  "$(nproc) CPUs, $THREADS thread(s)/worker(s) per proxy, upstream nginx (1 worker), $ROUNDS rounds"
echo "versions: $("$LINKD" --version 2>/dev/null | head -1 || echo linkd), $(haproxy -v | head -1 |
  awk '{print "HAProxy " $3}'), $(nginx -v 2>&1 | sed 's/.*nginx\//nginx /')"
echo "placement: LINKD_BENCH_CPUS=${LINKD_BENCH_CPUS:-(unset: not pinned)}," \
  "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
order=(linkd haproxy nginx)
declare -A RPS P99 ERR
: > "$WORK/ratio_rps"
: > "$WORK/ratio_p99"
printf '%-5s %-10s %10s %9s %6s\n' round proxy req/s p99_ms errors
for ((k = 1; k <= ROUNDS; k++)); do
  for p in "${order[@]}"; do
    read -r rps p99 errs < <(run_wrk "$p")
    RPS[$p]=$rps P99[$p]=$p99 ERR[$p]=$errs
    echo "$rps" >> "$WORK/$p.rps"
    echo "$p99" >> "$WORK/$p.p99"
    printf '%-5s %-10s %10s %9s %6s\n' "$k" "$p" "$rps" "$p99" "$errs"
  done
  awk -v a="${RPS[linkd]}" -v b="${RPS[haproxy]}" 'BEGIN {printf "%.3f\n", a / b}' \
    >> "$WORK/ratio_rps"
  awk -v a="${P99[linkd]}" -v b="${P99[haproxy]}" 'BEGIN {printf "%.3f\n", a / b}' \
    >> "$WORK/ratio_p99"
  order=("${order[@]:1}" "${order[0]}")
done
echo
echo "load average at the end of the rounds: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "linkd / HAProxy req/s: $(median < "$WORK/ratio_rps")   (goal >= 1.0)"
echo "linkd / HAProxy p99:   $(median < "$WORK/ratio_p99")   (goal <= 1.0)"
for p in linkd haproxy nginx; do
  printf '%-8s req/s median %s, p99 ms median %s\n' "$p" "$(median < "$WORK/$p.rps")" \
    "$(median < "$WORK/$p.p99")"
done

# --- memory per idle keep-alive connection ---------------------------------------------------
rss_kib() { # PID... -> summed VmRSS
  local t=0 p
  for p in "$@"; do t=$((t + $(awk '/^VmRSS:/ {print $2}' "/proc/$p/status"))); done
  echo "$t"
}
workers_of() { pgrep -P "$1" | tr '\n' ' '; } # nginx's workers
echo
echo "idle keep-alive connections: $IDLE per proxy ($HIDLE for HAProxy; one GET each, then idle)"
printf '%-8s %12s %12s %14s\n' proxy rss_before rss_after bytes/conn
for p in linkd haproxy nginx; do
  n=$IDLE
  case $p in
    linkd) pid=$LPID ;;
    haproxy) pid=$HPID n=$HIDLE ;;
    nginx) pid=$(workers_of "$NPID") ;;
  esac
  # shellcheck disable=SC2086 # pid may list several processes
  before=$(rss_kib $pid)
  coproc IDLEC { python3 "$HERE/idle_conns.py" 127.0.0.1 "${PORT[$p]}" "$n" /book.json; }
  read -r line <&"${IDLEC[0]}" || { echo "compare.sh: idle_conns.py failed on $p" >&2; exit 1; }
  sleep 1
  # shellcheck disable=SC2086
  after=$(rss_kib $pid)
  printf '%-8s %9s KiB %9s KiB %14s   (%s)\n' "$p" "$before" "$after" \
    "$(( (after - before) * 1024 / n ))" "$line"
  exec {IDLEC[1]}>&-
  wait "$IDLEC_PID" 2>/dev/null || true
  sleep 1
done
