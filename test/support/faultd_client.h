/* SPDX-License-Identifier: MIT */
/* Test helper: start, query and stop faultd, the fault-injecting HTTP/1.1 server.
 *
 * faultd (CMake target `faultd`, built at ${CMAKE_BINARY_DIR}/test/support/faultd):
 *   faultd --port-file FILE [--port N] --log FILE --mode MODE [options]
 * binds 127.0.0.1 (port 0 = ephemeral by default), writes "PORT\n" to FILE once it is ready (the
 * file appears atomically), and runs until SIGTERM/SIGINT or --max-seconds S (default 120), then
 * exits 0. Usage errors exit 2, setup failures 1.
 *
 * Modes (--mode):
 *   refuse             the port is bound but never listens: every connect gets RST (refused).
 *   blackhole          listen backlog 0, never accept, queue filled by faultd itself and verified
 *                      with a probe that must not connect: the client's SYN is dropped and its
 *                      connect times out.
 *   accept_noread      accept, never read, never answer; a large upload blocks the writer.
 *   reset_before_read  accept, wait --delay-ms (default 0), then RST without reading.
 *   read_then_reset    read the whole request, log it, RST.
 *   read_then_close    read the whole request, log it, FIN without any response.
 *   status             answer --status N (default 503) with optional --retry-after VALUE and
 *                      --body TEXT; keep-alive honoured.
 *   slow               answer 200 after --delay-ms (default 1000 in this mode); --drip-ms N sends
 *                      the body one byte every N ms.
 *   partial_stall      send a 200 head with Content-Length: 1000 and 10 body bytes, then stall.
 *   reset_mid_upload   read the head and the first --reset-after BYTES (default 16384) of the
 *                      body (no more is read from the socket), log it, RST.
 *   keepalive_close    answer 200 with keep-alive, then after --close-after N (default 1)
 *                      responses on a connection, by --close-when:
 *                        before_response (default): read and log request N+1, FIN unanswered
 *                          (libcurl then silently re-sends it on a new connection);
 *                        after_response: FIN immediately after response N (which still
 *                          advertises keep-alive);
 *                        idle: FIN after response N once --idle-ms (default 100) pass; a request
 *                          arriving in that window is logged and left unanswered.
 *   ok                 answer 200 with --body (default {"ok":true}), keep-alive.
 * Options for all answering modes: --delay-ms N before acting (also before the RST/FIN of
 * read_then_reset/read_then_close), --drip-ms N, --body TEXT (default {"ok":true} for 200,
 * {"status":N} otherwise), --rcvbuf BYTES (listener SO_RCVBUF), --max-conns N (default 256
 * concurrent connections; more wait in the accept queue), --conn-log FILE, --parent-pid PID
 * (exit when this process is no longer the parent).
 * Retry-After: sent verbatim, except "date+N" / "date-N", which becomes the IMF-fixdate N seconds
 * from the moment of the response.
 *
 * --script LIST (modes status, ok, slow): comma-separated entries; the k-th request (counting
 * every request whose head arrived, over all connections) gets entry k, the last one repeats:
 *   NNN[:ra=V][:delay=MS]  status NNN; a non-2xx entry without ra= uses --retry-after
 *   ok | slow:MS           200 (after MS ms)
 *   reset | close | stall | partial   RST / FIN / no answer / partial_stall's half response
 * e.g. --script "503,429:ra=2,reset,200" or "503:ra=date+1,200". Entries cannot contain commas.
 *
 * Request log (--log), one JSON object per line, written with one write() per line before faultd
 * acts on the request, for every request of which at least one byte arrived:
 *   {"conn":N,"seq":N,"method":"POST","path":"/x","idempotency_key":"..."|null,
 *    "attempt":"..."|null,"deadline":"..."|null,"body_bytes":N,"complete":true|false,
 *    "req":N,"t_ms":N}
 * conn: 1-based connection number in accept order; seq: 1-based request number on that
 * connection (seq > 1 means a reused connection); attempt/deadline: headers Linkd-Attempt and
 * Linkd-Deadline (header names match case-insensitively, the first occurrence wins); complete:
 * the head and the whole body (Content-Length or chunked) arrived; req: line number; t_ms:
 * milliseconds since faultd started (differences show client-side delays).
 * Connection log (--conn-log): {"conn":N,"event":"accept"|"close","how":"rst|fin|peer|stop",...}.
 *
 * Thread-safety: each faultd_proc belongs to one thread; the functions keep no global state.
 */
#ifndef LINKD_FAULTD_CLIENT_H
#define LINKD_FAULTD_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct faultd_proc {
  pid_t pid;               /* 0 when not running */
  int port;                /* the port faultd reported */
  int exit_status;         /* after faultd_stop: the exit code, 128+signal if killed, -1 */
  char dir[256];           /* mkdtemp directory holding the files below */
  char log_path[300];      /* request log */
  char conn_log_path[300]; /* connection log */
  char port_path[300];     /* port file */
} faultd_proc;

typedef struct faultd_req {
  int conn;        /* connection number, from 1 */
  int seq;         /* request number on that connection, from 1 */
  char method[16]; /* "" if the request line did not arrive */
  char path[256];
  char idempotency_key[256]; /* "" if the header was absent (see has_* to tell from empty) */
  char attempt[32];          /* Linkd-Attempt */
  char deadline[32];         /* Linkd-Deadline */
  long long body_bytes;      /* body bytes faultd read (decoded, for chunked) */
  bool complete;             /* head and whole body arrived */
  bool has_idempotency_key, has_attempt, has_deadline;
  int req;        /* line number in the log, from 1 */
  long long t_ms; /* ms since faultd started */
} faultd_req;

/* Starts faultd in `mode` with extra command-line arguments (NULL or a NULL-terminated array,
 * appended after the ones set here, so a later option overrides: e.g. "--max-seconds", "30").
 * The binary is $FAULTD_PATH if set, else the path compiled in as FAULTD_PATH. Creates a
 * temporary directory for the port file and logs, spawns the server and waits up to 5 s for its
 * port. Returns 0 with *p filled in (if faultd already exited after reporting its port, pid is
 * 0 and exit_status is set), or -1 (message on stderr, nothing left running). */
int faultd_start(faultd_proc *p, const char *mode, const char *const *extra_args);

/* The port faultd listens on (or reserved, for refuse/blackhole). */
int faultd_port(const faultd_proc *p);

/* Writes "http://127.0.0.1:PORT" + path into buf. Returns 0, or -1 if it does not fit. */
int faultd_url(const faultd_proc *p, const char *path, char *buf, size_t cap);

/* Parses the request log: stores up to max requests in log order into out and returns how many
 * were stored (<= max), or -1 if the log cannot be read. Missing headers are "" in out. */
int faultd_requests(const faultd_proc *p, faultd_req *out, int max);

/* Number of requests logged so far (all of them, not bounded by a max), or -1. */
int faultd_request_count(const faultd_proc *p);

/* Waits until at least n requests are logged or timeout_ms passes; returns the count then. */
int faultd_wait_requests(const faultd_proc *p, int n, int timeout_ms);

/* Number of connections faultd has accepted so far, or -1. */
int faultd_connections(const faultd_proc *p);
/* Number of connections faultd has closed (or seen closed) so far, or -1. */
int faultd_closed_connections(const faultd_proc *p);

/* SIGTERM, waits up to 5 s (then SIGKILL), records exit_status, removes the files and the
 * directory. Safe on a zeroed or already stopped faultd_proc. */
void faultd_stop(faultd_proc *p);

#endif
