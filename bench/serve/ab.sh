#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/serve/ab.sh OLD_LINKD NEW_LINKD: two builds of `linkd serve` and HAProxy in front of one
# nginx upstream (the 185-byte file of compare.sh), measured in one run, interleaved: round k runs
# wrk through the three in an order rotated each round (A B H, B H A, H A B, ...), and gives the
# paired ratios B / A and B / HAProxy. For judging a change to the gateway against the build
# before it (compare.sh is the benchmark of record, with nginx as a proxy and the memory phase).
#
#   env: ROUNDS=5 DURATION=3s CONNS=64 THREADS=1 WRK_THREADS=1
#        A_LISTEN / B_LISTEN: [listen] lines of A's / B's configuration only, e.g. one build
#        twice with A_LISTEN="upstream-client = curl" B_LISTEN="upstream-client = native"
#        SYSCALLS=1: also count each proxy's system calls per request (perf stat on its pid,
#        raw_syscalls:sys_enter) and the CPU time it used per request (task-clock, user +
#        system), figures that depend far less on the machine's load than req/s
# Bounded: 3 x ROUNDS wrk runs of DURATION.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: ab.sh OLD_LINKD NEW_LINKD" >&2; exit 2; }
A=$1 B=$2
ROUNDS=${ROUNDS:-5} DURATION=${DURATION:-3s} CONNS=${CONNS:-64} THREADS=${THREADS:-1}
WRK_THREADS=${WRK_THREADS:-1} SYSCALLS=${SYSCALLS:-0}
[[ $ROUNDS =~ ^[1-9][0-9]?$ ]] || { echo "ab.sh: ROUNDS must be 1..99" >&2; exit 2; }
[[ $THREADS =~ ^[1-9][0-9]?$ ]] || { echo "ab.sh: THREADS must be 1..99" >&2; exit 2; }
tools=(wrk nginx haproxy curl python3 awk)
[ "$SYSCALLS" = 1 ] && tools+=(perf)
for t in "${tools[@]}"; do
  command -v "$t" >/dev/null || { echo "ab.sh: $t is required" >&2; exit 2; }
done
for b in "$A" "$B"; do [ -x "$b" ] || { echo "ab.sh: $b is not executable" >&2; exit 2; }; done

W=$(mktemp -d /tmp/linkd-ab.XXXXXX)
chmod 755 "$W"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$W"
}
trap cleanup EXIT
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_http() {
  for _ in $(seq 1 500); do curl -sf -o /dev/null "$1" && return 0; sleep 0.01; done
  echo "ab.sh: $1 does not answer" >&2
  return 1
}

mkdir -p "$W/www" "$W/up"
python3 -c 'import json; print(json.dumps({"id": 1, "title": "x" * 150, "stock": 3}))' \
  > "$W/www/book.json"
chmod -R a+rX "$W"
UP=$(free_port)
cat > "$W/up/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $W/up/nginx.pid;
error_log $W/up/error.log warn;
events { worker_connections 4000; }
http {
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  client_body_temp_path $W/up/b;
  proxy_temp_path $W/up/p;
  fastcgi_temp_path $W/up/f;
  uwsgi_temp_path $W/up/u;
  scgi_temp_path $W/up/s;
  server { listen 127.0.0.1:$UP backlog=4096; root $W/www; }
}
CONF
nginx -c "$W/up/nginx.conf" -p "$W/up" 2>"$W/up/stderr" &
PIDS+=($!)
wait_http "http://127.0.0.1:$UP/book.json"

# the same route defaults as compare.sh (retries, budget, breaker on)
declare -A PORT PID LISTEN
LISTEN[A]=${A_LISTEN:-} LISTEN[B]=${B_LISTEN:-}
for k in A B; do
  bin=$A
  [ $k = B ] && bin=$B
  printf '[listen]\naddress = 127.0.0.1:0\n%s\n[cluster up]\nendpoint = 127.0.0.1:%s\n[route all]\ncluster = up\n' \
    "${LISTEN[$k]}" "$UP" > "$W/linkd-$k.conf"
  "$bin" serve -c "$W/linkd-$k.conf" --port-file "$W/$k.ports" --threads "$THREADS" 2>"$W/$k.log" &
  PID[$k]=$!
  PIDS+=(${PID[$k]})
  for _ in $(seq 1 500); do [ -s "$W/$k.ports" ] && break; sleep 0.01; done
  read -r PORT[$k] _ < "$W/$k.ports"
done
HP=$(free_port)
cat > "$W/haproxy.cfg" <<CONF
global
  nbthread $THREADS
  maxconn 4000
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
  bind 127.0.0.1:$HP
  default_backend b
backend b
  server up 127.0.0.1:$UP
CONF
haproxy -f "$W/haproxy.cfg" -db 2>"$W/haproxy.log" &
PID[H]=$!
PIDS+=(${PID[H]})
PORT[H]=$HP
for k in A B H; do wait_http "http://127.0.0.1:${PORT[$k]}/book.json"; done

echo "ab.sh: A=$A (${LISTEN[A]:-defaults}) B=$B (${LISTEN[B]:-defaults}); wrk -t$WRK_THREADS -c$CONNS -d$DURATION, $THREADS thread(s) per proxy," \
  "$ROUNDS rounds, $(nproc) CPUs; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
run() { # KEY -> "req/s p99_ms errors syscalls_per_request cpu_us_per_request"
  local out sc=- cpu=-
  if [ "$SYSCALLS" = 1 ]; then
    perf stat -e raw_syscalls:sys_enter,task-clock -x, -o "$W/ps" -p "${PID[$1]}" 2>/dev/null &
    local ps=$!
    sleep 0.1
  fi
  out=$(wrk -t"$WRK_THREADS" -c"$CONNS" -d"$DURATION" --latency "http://127.0.0.1:${PORT[$1]}/book.json")
  if [ "$SYSCALLS" = 1 ]; then
    kill -INT "$ps"
    wait "$ps" || true
    local reqs
    reqs=$(echo "$out" | awk '/requests in/ {print $1}')
    sc=$(awk -F, -v q="$reqs" '$3 ~ /sys_enter/ {printf "%.2f", $1 / q}' "$W/ps")
    cpu=$(awk -F, -v q="$reqs" '$3 ~ /task-clock/ {printf "%.2f", $1 * 1000 / q}' "$W/ps")
  fi
  echo "$out" | awk -v sc="$sc" -v cpu="$cpu" '
    /^Requests\/sec:/ {r = $2}
    $1 == "99%" {p = $2; if (p ~ /us$/) p = p / 1000; else if (p ~ /ms$/) p = p + 0;
                 else if (p ~ /s$/) p = p * 1000}
    /Non-2xx or 3xx responses:/ {e += $5}
    /Socket errors:/ {gsub(",", ""); e += $4 + $6 + $8 + $10}
    END {printf "%s %.3f %d %s %s\n", r, p, e, sc, cpu}'
}
printf '%-5s %-3s %10s %9s %6s %9s %10s\n' round key req/s p99_ms errors sys/req cpu_us/req
order=(A B H)
: > "$W/r_ba"
: > "$W/r_bh"
: > "$W/p_bh"
: > "$W/c_ba"
: > "$W/c_bh"
for ((k = 1; k <= ROUNDS; k++)); do
  declare -A R P C
  for key in "${order[@]}"; do
    read -r rps p99 errs sc cpu < <(run "$key")
    R[$key]=$rps P[$key]=$p99 C[$key]=$cpu
    printf '%-5s %-3s %10s %9s %6s %9s %10s\n' "$k" "$key" "$rps" "$p99" "$errs" "$sc" "$cpu"
  done
  awk -v a="${R[A]}" -v b="${R[B]}" 'BEGIN {printf "%.3f\n", b / a}' >> "$W/r_ba"
  awk -v h="${R[H]}" -v b="${R[B]}" 'BEGIN {printf "%.3f\n", b / h}' >> "$W/r_bh"
  awk -v h="${P[H]}" -v b="${P[B]}" 'BEGIN {printf "%.3f\n", b / h}' >> "$W/p_bh"
  if [ "$SYSCALLS" = 1 ]; then
    awk -v a="${C[A]}" -v b="${C[B]}" 'BEGIN {printf "%.3f\n", b / a}' >> "$W/c_ba"
    awk -v h="${C[H]}" -v b="${C[B]}" 'BEGIN {printf "%.3f\n", b / h}' >> "$W/c_bh"
  fi
  order=("${order[@]:1}" "${order[0]}")
done
median() { sort -g | awk '{v[NR]=$1} END {m = NR % 2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2;
                                          printf "%.3f [%.3f-%.3f]", m, v[1], v[NR]}'; }
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "B / A req/s:       $(median < "$W/r_ba")"
echo "B / HAProxy req/s: $(median < "$W/r_bh")"
echo "B / HAProxy p99:   $(median < "$W/p_bh")"
if [ "$SYSCALLS" = 1 ]; then
  echo "B / A CPU time per request:       $(median < "$W/c_ba")"
  echo "B / HAProxy CPU time per request: $(median < "$W/c_bh")"
fi
