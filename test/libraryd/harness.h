/* SPDX-License-Identifier: MIT */
/* harness.h: runs the real libraryd binary on 127.0.0.1 (ephemeral ports) and talks to it with
 * libcurl. Every wait is bounded. */
#ifndef LINKD_TEST_LIBRARYD_HARNESS_H
#define LINKD_TEST_LIBRARYD_HARNESS_H

#include <curl/curl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct lib_proc {
  pid_t pid;
  int port, admin_port;
  char dir[256]; /* temp directory holding db, port files and the log */
  char db[320];
  char log[320];
  char store[256]; /* PostgreSQL URL given as --store instead of --db; "" = SQLite */
} lib_proc;

/* Creates a fresh temp dir and starts libraryd in it with --port 0 --admin-port 0 --db and the
 * extra args (NULL-terminated, may be NULL). 0 or -1 (daemon did not report its port within
 * 10 s; its log is printed). */
int lib_start(lib_proc *p, const char *const *extra);
/* Like lib_start, on the PostgreSQL database at `url` (--store) instead of an SQLite file. */
int lib_start_store(lib_proc *p, const char *url, const char *const *extra);
/* Starts again in the same dir (same database). */
int lib_restart(lib_proc *p, const char *const *extra);
/* Starts the binary with exactly these args (no defaults) and returns its exit status, or -1 if
 * it ran longer than 10 s. */
int lib_run_args(const char *const *args);
/* Like lib_run_args, with the daemon's stderr copied into out (NUL-terminated). With
 * `unprivileged` and when the tests run as root, the daemon runs as nobody (65534), so file
 * permissions apply to it. */
int lib_run_capture(const char *const *args, bool unprivileged, char *out, size_t cap);
/* SIGTERM (or sig) and wait up to `timeout_ms`: the exit status, 128+signal, or -1 on timeout
 * (the process is then killed). */
int lib_stop_sig(lib_proc *p, int sig, int timeout_ms);
int lib_stop(lib_proc *p);
/* kill -9 and reap. */
void lib_kill9(lib_proc *p);
/* Stops if running and removes the temp dir. */
void lib_cleanup(lib_proc *p);
/* Prints the daemon's log to stderr (for failing tests). */
void lib_dump_log(const lib_proc *p);
/* Counts lines of the daemon's log that contain `needle`. */
int lib_log_count(const lib_proc *p, const char *needle);

typedef struct http_res {
  long status; /* 0 when no response */
  CURLcode cc;
  char *body; /* NUL-terminated, malloc'd */
  size_t len;
  char headers[8192];
  size_t hlen;
  double secs;
} http_res;

typedef struct http_req {
  const char *method;         /* default GET */
  const char *path;           /* e.g. "/books/1" */
  const char *const *headers; /* NULL-terminated "Name: value" */
  const char *body;           /* NULL: none; sent as application/json unless headers name a
                               * Content-Type ("Content-Type:" for none) */
  size_t body_len;            /* 0: strlen(body) */
  long timeout_ms;            /* default 10000 */
  bool chunked;               /* send the body with Transfer-Encoding: chunked */
} http_req;

/* One request on a fresh connection to 127.0.0.1:port. Returns res->cc == CURLE_OK ? 0 : -1. */
int http_do(int port, const http_req *rq, http_res *res);
/* Shorthands. */
int http_get(int port, const char *path, http_res *res);
int http_send(int port, const char *method, const char *path, const char *const *headers,
              const char *body, http_res *res);
void http_res_free(http_res *res);
/* A response header's value (case-insensitive name) copied into buf; NULL when absent. */
const char *http_header(const http_res *res, const char *name, char *buf, size_t cap);
/* The body parsed as JSON (caller json_decref's), NULL if not JSON. */
json_t *http_json(const http_res *res);
/* Convenience: a book's stock via GET /books/{id}; -1 on failure. */
int64_t lib_stock(int port, int64_t book);
/* Creates a book with `stock` copies via POST /books; its id or -1. */
int64_t lib_create_book(int port, int64_t stock);
/* GET /admin/stats parsed; NULL on failure. */
json_t *lib_stats(const lib_proc *p);

void sleep_ms(int ms);
double now_s(void);

#endif
