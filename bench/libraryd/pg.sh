#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/libraryd/pg.sh: keyed POST throughput of libraryd on PostgreSQL against a plain
# PostgreSQL anchor, in the same run, on the same database server.
#
#   bench/libraryd/pg.sh [BUILD_DIR]     (default BUILD_DIR: build)
#   env: DURATION=5 (seconds per run) CONNS=64 (wrk connections) WORKERS=16 (libraryd workers,
#        and pgbench clients) WRK_THREADS=2 ROUNDS=5
#
# The subject: wrk sends POST /books/{id}/loans with a new Idempotency-Key per request to one
# libraryd --store postgres://... (--work none, fifo queue), so every request looks its key up,
# claims it, and commits the loan, the stock decrement and the key's record in one transaction.
# The anchor: pgbench with WORKERS clients, each transaction inserting the same rows directly
# (UPDATE books, INSERT loans, INSERT idem; one transaction each, extended query protocol like
# libpq's PQexecParams). Both write to the same tables of one PostgreSQL server with its default
# durability (fsync on, synchronous_commit on), started here in a temporary directory. Round k
# runs both back to back (the anchor first in odd rounds), and the report leads with the
# per-round ratio libraryd / anchor, its median and min-max. Goal: libraryd >= 0.8 x anchor.
# Bounded: 2 x ROUNDS runs of DURATION seconds (ROUNDS <= 21).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
LIBRARYD=$BUILD/cmd/libraryd/libraryd
HERE=$(cd "$(dirname "$0")" && pwd)
DURATION=${DURATION:-5}
CONNS=${CONNS:-64}
WORKERS=${WORKERS:-16}
WRK_THREADS=${WRK_THREADS:-2}
ROUNDS=${ROUNDS:-5}
PGBIN=${PGBIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
if ! [[ $ROUNDS =~ ^[0-9]+$ ]] || [ "$ROUNDS" -lt 1 ] || [ "$ROUNDS" -gt 21 ]; then
  echo "pg.sh: ROUNDS must be 1..21" >&2
  exit 2
fi
for tool in wrk curl python3 "$PGBIN/initdb" "$PGBIN/pg_ctl" "$PGBIN/pgbench" "$PGBIN/psql"; do
  command -v "$tool" >/dev/null || { echo "pg.sh: $tool is required" >&2; exit 2; }
done
[ -x "$LIBRARYD" ] || { echo "pg.sh: build libraryd first ($LIBRARYD not found)" >&2; exit 2; }

WORK=$(mktemp -d /tmp/libraryd-pgbench.XXXXXX)
chmod 755 "$WORK"
AS=()
if [ "$(id -u)" -eq 0 ]; then
  chown postgres "$WORK"  # PostgreSQL refuses to run as root
  AS=(runuser -u postgres --)
fi
LPID=
cleanup() {
  [ -n "$LPID" ] && { kill "$LPID" 2>/dev/null || true; wait "$LPID" 2>/dev/null || true; }
  "${AS[@]}" "$PGBIN/pg_ctl" -D "$WORK/data" -m immediate stop >/dev/null 2>&1 || true
  [ -n "${KEEP:-}" ] && { echo "kept $WORK" >&2; return; }
  rm -rf "$WORK"
}
trap cleanup EXIT

PGPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"${AS[@]}" "$PGBIN/initdb" -D "$WORK/data" -A trust -U postgres >/dev/null
"${AS[@]}" "$PGBIN/pg_ctl" -D "$WORK/data" -l "$WORK/pg.log" -w \
  -o "-p $PGPORT -k $WORK -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null
URL="postgres://postgres@127.0.0.1:$PGPORT/postgres"
PSQL=("$PGBIN/psql" -q -X -v ON_ERROR_STOP=1 "$URL")

"$LIBRARYD" --port 0 --port-file "$WORK/l.port" --store "$URL" --log off --work none \
  --queue-discipline fifo --workers "$WORKERS" --pool-size "$((WORKERS + 4))" \
  --connection-limit 4096 --per-client-limit 0 2>"$WORK/l.log" &
LPID=$!
for _ in $(seq 1 500); do [ -s "$WORK/l.port" ] && break; sleep 0.01; done
[ -s "$WORK/l.port" ] || { cat "$WORK/l.log" >&2; exit 1; }
LPORT=$(cat "$WORK/l.port")
BOOK=$(curl -s -X POST -d '{"title":"Bench","author":"wrk","stock":1000000000}' \
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

# CPU time (user + system, in clock ticks) libraryd has used so far.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$LPID/stat"; }
TCK=$(getconf CLK_TCK)

run_wrk() { # -> "req/s cpu-us-per-request" (libraryd's own CPU per request)
  local t0 t1
  t0=$(cpu_ticks)
  wrk -t"$WRK_THREADS" -c"$CONNS" -d"${DURATION}s" -s "$HERE/post_loans.lua" \
    "http://127.0.0.1:$LPORT" -- "$BOOK" "$$-$1" > "$WORK/wrk.$1.txt"
  local non2xx
  non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $5}' "$WORK/wrk.$1.txt")
  [ -z "$non2xx" ] || echo "pg.sh: round $1: $non2xx non-2xx responses" >&2
  t1=$(cpu_ticks)
  awk -v t="$((t1 - t0))" -v hz="$TCK" '/^Requests\/sec:/ {r = $2}
    /requests in/ {n = $1} END {printf "%s %.0f\n", r, n ? t * 1e6 / hz / n : 0}' \
    "$WORK/wrk.$1.txt"
}

run_anchor() { # -> transactions/s
  "$PGBIN/pgbench" -n -M extended -c "$WORKERS" -j "$WRK_THREADS" -T "$DURATION" \
    -f "$WORK/anchor.sql" "$URL" > "$WORK/pgbench.$1.txt" 2>&1
  awk '/^tps = / {print $3; exit}' "$WORK/pgbench.$1.txt"
}

median_of() {
  sort -g | awk -v d="${1:-0}" '{v[NR] = $1}
    END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
          printf "%.*f [%.*f-%.*f]", d, m, d, v[1], d, v[NR] }'
}

echo "libraryd on PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}'): wrk" \
  "-t$WRK_THREADS -c$CONNS -d${DURATION}s vs pgbench -c$WORKERS -M extended -T$DURATION," \
  "libraryd --workers $WORKERS, $(nproc) CPUs, $ROUNDS interleaved rounds"
printf "%-6s %-9s %8s %12s %12s %18s\n" round first ratio "libraryd/s" "anchor tx/s" \
  "libraryd cpu us/req"
: > "$WORK/rounds"
for k in $(seq 1 "$ROUNDS"); do
  if [ $((k % 2)) -eq 1 ]; then
    first=anchor; A=$(run_anchor "$k"); read -r L C <<< "$(run_wrk "$k")"
  else
    first=libraryd; read -r L C <<< "$(run_wrk "$k")"; A=$(run_anchor "$k")
  fi
  r=$(awk -v a="$L" -v b="$A" 'BEGIN { printf "%.3f", (b > 0) ? a / b : 0 }')
  printf "%-6s %-9s %8s %12s %12s %18s\n" "$k" "$first" "$r" "$L" "$A" "$C"
  echo "$r $L $A $C" >> "$WORK/rounds"
done
MED=$(awk '{print $1}' "$WORK/rounds" | median_of 3)
echo
echo "summary over $ROUNDS rounds: median [min-max]"
echo "ratio libraryd / anchor: $MED"
echo "libraryd keyed POST/s:   $(awk '{print $2}' "$WORK/rounds" | median_of 0)"
echo "anchor transactions/s:   $(awk '{print $3}' "$WORK/rounds" | median_of 0)"
echo "libraryd CPU per request (us, its own process): $(awk '{print $4}' "$WORK/rounds" | median_of 0)"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
# Every acknowledged loan and every anchor transaction is a row: a check that both really wrote.
echo "rows: $("${PSQL[@]}" -At -c "SELECT COUNT(*) FILTER (WHERE idem_key LIKE 'bench-%'),
  COUNT(*) FILTER (WHERE idem_key LIKE 'pgb-%') FROM loans" | tr '|' ' ') (libraryd, anchor)"
met=$(awk -v r="${MED%% *}" 'BEGIN { print (r >= 0.8) ? "met" : "NOT met" }')
echo "goal: libraryd >= 0.8 x anchor (median ${MED%% *}) -> $met"
