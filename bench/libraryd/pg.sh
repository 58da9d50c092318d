#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/libraryd/pg.sh: keyed POST throughput of libraryd on PostgreSQL against a plain
# PostgreSQL anchor, in the same run, on the same database server.
#
#   bench/libraryd/pg.sh [BUILD_DIR]     (default BUILD_DIR: build)
#   env: DURATION=5 (seconds per run) WORKERS=16 (libraryd workers and PostgreSQL connections,
#        wrk connections, pgbench clients) WRK_THREADS=2 ROUNDS=9
#        BASELINE=path/to/another/libraryd (optional: a second subject, e.g. the build before a
#        change, measured in the same rounds: an interleaved A/B)
#        STATEMENTS=1 (optional: load pg_stat_statements and print, at the end, each statement's
#        calls, mean and total execution time, planning included)
#        CLIENT_CPUS=0 SERVER_CPUS=1 (optional taskset lists: wrk and pgbench on CLIENT_CPUS,
#        PostgreSQL and libraryd on SERVER_CPUS)
#
# The subject: wrk sends POST /books/{id}/loans with a new Idempotency-Key per request to one
# libraryd --store postgres://... (--work none, fifo queue), so every request looks its key up,
# claims it, and commits the loan, the stock decrement and the key's record in one transaction.
# The anchor: pgbench with WORKERS clients, each transaction inserting the same rows directly
# (UPDATE books, INSERT loans, INSERT idem; one transaction each, extended query protocol like
# libpq's PQexecParams). Both sides get the same concurrency: WORKERS client connections and at
# most WORKERS PostgreSQL connections (libraryd's --pool-size). Both write to the same tables of
# one PostgreSQL server with its default durability (fsync on, synchronous_commit on), started
# here in a temporary directory. Each round runs every subject back to back, in an order rotated
# from round to round, and the report leads with the per-round ratio libraryd / anchor, its
# median and min-max, and the load average before each round. Goal: libraryd >= 0.8 x anchor.
# Bounded: ROUNDS x (2 or 3) runs of DURATION seconds (ROUNDS <= 21).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
LIBRARYD=$BUILD/cmd/libraryd/libraryd
HERE=$(cd "$(dirname "$0")" && pwd)
DURATION=${DURATION:-5}
WORKERS=${WORKERS:-16}
WRK_THREADS=${WRK_THREADS:-2}
ROUNDS=${ROUNDS:-9}
BASELINE=${BASELINE:-}
CLIENT_CPUS=${CLIENT_CPUS:-}
SERVER_CPUS=${SERVER_CPUS:-}
STATEMENTS=${STATEMENTS:-}
PG_EXTRA=
[ -z "$STATEMENTS" ] ||
  PG_EXTRA="-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track_planning=on"
PGBIN=${PGBIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
if ! [[ $ROUNDS =~ ^[0-9]+$ ]] || [ "$ROUNDS" -lt 1 ] || [ "$ROUNDS" -gt 21 ]; then
  echo "pg.sh: ROUNDS must be 1..21" >&2
  exit 2
fi
for tool in wrk curl python3 "$PGBIN/initdb" "$PGBIN/pg_ctl" "$PGBIN/pgbench" "$PGBIN/psql"; do
  command -v "$tool" >/dev/null || { echo "pg.sh: $tool is required" >&2; exit 2; }
done
[ -x "$LIBRARYD" ] || { echo "pg.sh: build libraryd first ($LIBRARYD not found)" >&2; exit 2; }
if [ -n "$BASELINE" ] && ! [ -x "$BASELINE" ]; then
  echo "pg.sh: $BASELINE is not executable" >&2
  exit 2
fi
CLIENT_PIN=()
SERVER_PIN=()
[ -z "$CLIENT_CPUS" ] || CLIENT_PIN=(taskset -c "$CLIENT_CPUS")
[ -z "$SERVER_CPUS" ] || SERVER_PIN=(taskset -c "$SERVER_CPUS")

WORK=$(mktemp -d /tmp/libraryd-pgbench.XXXXXX)
chmod 755 "$WORK"
AS=()
if [ "$(id -u)" -eq 0 ]; then
  chown postgres "$WORK"  # PostgreSQL refuses to run as root
  AS=(runuser -u postgres --)
fi
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  "${AS[@]}" "$PGBIN/pg_ctl" -D "$WORK/data" -m immediate stop >/dev/null 2>&1 || true
  [ -n "${KEEP:-}" ] && { echo "kept $WORK" >&2; return; }
  rm -rf "$WORK"
}
trap cleanup EXIT

PGPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"${AS[@]}" "$PGBIN/initdb" -D "$WORK/data" -A trust -U postgres >/dev/null
"${SERVER_PIN[@]}" "${AS[@]}" "$PGBIN/pg_ctl" -D "$WORK/data" -l "$WORK/pg.log" -w \
  -o "-p $PGPORT -k $WORK -c listen_addresses=127.0.0.1 -c max_connections=200 $PG_EXTRA" start >/dev/null
URL="postgres://postgres@127.0.0.1:$PGPORT/postgres"
PSQL=("$PGBIN/psql" -q -X -v ON_ERROR_STOP=1 "$URL")
[ -z "$STATEMENTS" ] || "${PSQL[@]}" -c "CREATE EXTENSION pg_stat_statements"

# Starts one libraryd; its pid and port in LPID_<name> and LPORT_<name>.
start_libraryd() { # name binary
  "${SERVER_PIN[@]}" "$2" --port 0 --port-file "$WORK/$1.port" --store "$URL" --log off \
    --work none --queue-discipline fifo --workers "$WORKERS" --pool-size "$WORKERS" \
    --connection-limit 4096 --per-client-limit 0 2>"$WORK/$1.log" &
  local pid=$!
  PIDS+=("$pid")
  for _ in $(seq 1 500); do [ -s "$WORK/$1.port" ] && break; sleep 0.01; done
  [ -s "$WORK/$1.port" ] || { cat "$WORK/$1.log" >&2; exit 1; }
  printf -v "LPID_$1" %s "$pid"
  printf -v "LPORT_$1" %s "$(cat "$WORK/$1.port")"
}
start_libraryd libraryd "$LIBRARYD"
SUBJECTS=(anchor libraryd)
if [ -n "$BASELINE" ]; then
  start_libraryd baseline "$BASELINE"
  SUBJECTS+=(baseline)
fi
LPORT=$LPORT_libraryd
BOOK=$(curl -s -X POST -H 'Content-Type: application/json' -d '{"title":"Bench","author":"wrk","stock":1000000000}' \
  "http://127.0.0.1:$LPORT/books" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')

# The anchor's transaction: the rows one keyed loan writes, with values of the same shape (the
# texts go in hex, since pgbench would read the colons of JSON and headers as its variables).
HDR_HEX=$(printf 'Content-Type: application/json\nLocation: /loans/123456\n' | od -An -tx1 | tr -d ' \n')
BODY_HEX=$(printf '{"id":123456,"book_id":%s,"borrower":null,"stock_after":999999999}' "$BOOK" |
  od -An -tx1 | tr -d ' \n')
cat > "$WORK/anchor.sql" <<SQL
\set r random(1, 1000000000000)
BEGIN;
UPDATE books SET stock = stock - 1, updated_ns = 1 WHERE id = $BOOK AND stock > 0 RETURNING stock;
INSERT INTO loans(book_id, tenant, borrower, idem_key, request_id, created_ns, stock_after) VALUES($BOOK, 'anonymous', NULL, 'pgb-' || :client_id || '-' || :r, NULL, 1, 1) RETURNING id;
INSERT INTO idem(tenant, key, fingerprint, status, headers, body, created_ns) VALUES('anonymous', 'pgb-' || :client_id || '-' || :r, decode('00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff', 'hex'), 201, convert_from(decode('$HDR_HEX', 'hex'), 'UTF8'), decode('$BODY_HEX', 'hex'), 1) ON CONFLICT DO NOTHING;
END;
SQL

# CPU time (user + system, in clock ticks) a process has used so far.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TCK=$(getconf CLK_TCK)

run_wrk() { # name round -> "req/s cpu-us-per-request" (that libraryd's own CPU per request)
  local t0 t1 pidv=LPID_$1 portv=LPORT_$1
  t0=$(cpu_ticks "${!pidv}")
  "${CLIENT_PIN[@]}" wrk -t"$WRK_THREADS" -c"$WORKERS" -d"${DURATION}s" -s "$HERE/post_loans.lua" \
    "http://127.0.0.1:${!portv}" -- "$BOOK" "$1-$$-$2" > "$WORK/wrk.$1.$2.txt"
  local non2xx
  non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $5}' "$WORK/wrk.$1.$2.txt")
  [ -z "$non2xx" ] || echo "pg.sh: $1, round $2: $non2xx non-2xx responses" >&2
  t1=$(cpu_ticks "${!pidv}")
  awk -v t="$((t1 - t0))" -v hz="$TCK" '/^Requests\/sec:/ {r = $2}
    /requests in/ {n = $1} END {printf "%s %.0f\n", r, n ? t * 1e6 / hz / n : 0}' \
    "$WORK/wrk.$1.$2.txt"
}

run_anchor() { # -> transactions/s
  "${CLIENT_PIN[@]}" "$PGBIN/pgbench" -n -M extended -c "$WORKERS" -j "$WRK_THREADS" \
    -T "$DURATION" \
    -f "$WORK/anchor.sql" "$URL" > "$WORK/pgbench.$1.txt" 2>&1
  awk '/^tps = / {print $3; exit}' "$WORK/pgbench.$1.txt"
}

median_of() {
  sort -g | awk -v d="${1:-0}" '{v[NR] = $1}
    END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
          printf "%.*f [%.*f-%.*f]", d, m, d, v[1], d, v[NR] }'
}

echo "libraryd on PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}'): wrk" \
  "-t$WRK_THREADS -c$WORKERS -d${DURATION}s vs pgbench -c$WORKERS -M extended -T$DURATION," \
  "libraryd --workers $WORKERS --pool-size $WORKERS, $(nproc) CPUs, $ROUNDS rounds," \
  "order rotated (${SUBJECTS[*]})"
echo "pinning: clients ${CLIENT_CPUS:-any CPU}, servers ${SERVER_CPUS:-any CPU}"
HAS_B=${BASELINE:+1}
if [ -n "$HAS_B" ]; then
  printf "%-6s %-9s %8s %8s %10s %10s %10s %9s %9s %s\n" round first ratio ratio_b \
    "libraryd/s" "base/s" "anchor/s" "cpu_us" "cpu_us_b" "load(1m)"
else
  printf "%-6s %-9s %8s %12s %12s %8s %s\n" round first ratio "libraryd/s" "anchor tx/s" \
    "cpu_us" "load(1m)"
fi
: > "$WORK/rounds"
NS=${#SUBJECTS[@]}
for k in $(seq 1 "$ROUNDS"); do
  load=$(cut -d' ' -f1 /proc/loadavg)
  A= L= C= B=0 CB=0
  for j in $(seq 0 $((NS - 1))); do
    who=${SUBJECTS[$(((k - 1 + j) % NS))]}
    [ "$j" -eq 0 ] && first=$who
    case $who in
      anchor) A=$(run_anchor "$k") ;;
      libraryd) read -r L C <<< "$(run_wrk libraryd "$k")" ;;
      baseline) read -r B CB <<< "$(run_wrk baseline "$k")" ;;
    esac
  done
  r=$(awk -v a="$L" -v b="$A" 'BEGIN { printf "%.3f", (b > 0) ? a / b : 0 }')
  rb=$(awk -v a="$B" -v b="$A" 'BEGIN { printf "%.3f", (b > 0) ? a / b : 0 }')
  if [ -n "$HAS_B" ]; then
    printf "%-6s %-9s %8s %8s %10s %10s %10s %9s %9s %s\n" "$k" "$first" "$r" "$rb" "$L" "$B" \
      "$A" "$C" "$CB" "$load"
  else
    printf "%-6s %-9s %8s %12s %12s %8s %s\n" "$k" "$first" "$r" "$L" "$A" "$C" "$load"
  fi
  echo "$r $L $A $C $rb $B $CB $load" >> "$WORK/rounds"
done
MED=$(awk '{print $1}' "$WORK/rounds" | median_of 3)
echo
echo "summary over $ROUNDS rounds: median [min-max]"
echo "ratio libraryd / anchor: $MED"
[ -z "$HAS_B" ] || echo "ratio baseline / anchor: $(awk '{print $5}' "$WORK/rounds" | median_of 3)"
[ -z "$HAS_B" ] || echo "ratio libraryd / baseline (per round):" \
  "$(awk '{print ($6 > 0) ? $2 / $6 : 0}' "$WORK/rounds" | median_of 3)"
echo "libraryd keyed POST/s:   $(awk '{print $2}' "$WORK/rounds" | median_of 0)"
[ -z "$HAS_B" ] || echo "baseline keyed POST/s:   $(awk '{print $6}' "$WORK/rounds" | median_of 0)"
echo "anchor transactions/s:   $(awk '{print $3}' "$WORK/rounds" | median_of 0)"
echo "libraryd CPU per request (us, its own process):" \
  "$(awk '{print $4}' "$WORK/rounds" | median_of 0)"
[ -z "$HAS_B" ] || echo "baseline CPU per request (us):" \
  "$(awk '{print $7}' "$WORK/rounds" | median_of 0)"
echo "load average (1 min) before the rounds: $(awk '{print $8}' "$WORK/rounds" | median_of 2)"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
# Every acknowledged loan and every anchor transaction is a row: a check that all really wrote.
echo "rows: $("${PSQL[@]}" -At -c "SELECT COUNT(*) FILTER (WHERE idem_key LIKE 'bench-libraryd-%'),
  COUNT(*) FILTER (WHERE idem_key LIKE 'bench-baseline-%'),
  COUNT(*) FILTER (WHERE idem_key LIKE 'pgb-%') FROM loans" | tr '|' ' ')" \
  "(libraryd, baseline, anchor)"
met=$(awk -v r="${MED%% *}" 'BEGIN { print (r >= 0.8) ? "met" : "NOT met" }')
echo "goal: libraryd >= 0.8 x anchor (median ${MED%% *}) -> $met"
if [ -n "$STATEMENTS" ]; then
  echo
  echo "statements (pg_stat_statements; calls, mean and total ms, planning included):"
  "${PSQL[@]}" -P pager=off -c "SELECT calls,
      round(((total_exec_time + total_plan_time) / calls)::numeric, 3) mean_ms,
      round((total_exec_time + total_plan_time)::numeric, 0) total_ms,
      left(regexp_replace(query, '\s+', ' ', 'g'), 90) query
    FROM pg_stat_statements WHERE calls > 10
    ORDER BY total_exec_time + total_plan_time DESC LIMIT 15"
fi
