/* SPDX-License-Identifier: MIT */
/* Helpers of the `linkd serve` tests: a gateway process started from a configuration text, and a
 * raw HTTP/1.1 client (a socket, exact bytes, one response parsed at a time) so hostile and
 * pipelined requests can be written as they are. */
#ifndef LINKD_GWTEST_H
#define LINKD_GWTEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct gw_proc {
  pid_t pid;
  int port, admin_port;
  char dir[256];
  char cfg_path[300];
  char port_path[300];
  char access_path[300]; /* the access log the configuration should name (%ACCESS%) */
  char err_path[300];    /* the gateway's stderr */
} gw_proc;

/* Writes `cfg` to the configuration file, replacing "%ACCESS%" with the access log path. */
void gw_write_config(gw_proc *g, const char *cfg);
/* The same, never with the upstream-client key LINKD_GW_UPSTREAM_CLIENT adds (a test of line
 * numbers or of defaults). */
void gw_write_config_exact(gw_proc *g, const char *cfg);
/* Starts `linkd serve -c FILE --port-file F --threads 2` with `cfg` (asserts it comes up within
 * 5 s): two loop threads whatever the machine's CPU count, so runs compare. */
void gw_start(gw_proc *g, const char *cfg);
/* The same with `threads` loop threads. */
void gw_start_threads(gw_proc *g, const char *cfg, int threads);
/* The same with more arguments after those (NULL-terminated; at most 8). */
void gw_start_args(gw_proc *g, const char *cfg, int threads, const char *const *extra);
/* SIGTERM, then waits up to `wait_ms`; returns the exit code (128+signal if it had to be
 * killed, -1 if it did not exit; 0 if it was not running). Under a sanitizer build, a leak or
 * a report makes the exit code non-zero, so teardowns that require 0 catch them. */
int gw_stop(gw_proc *g, int wait_ms);
/* The gateway's stderr so far (static buffer). */
const char *gw_stderr(const gw_proc *g);
/* Lines in the access log. */
int gw_access_lines(const gw_proc *g);
/* The access log (static buffer). */
const char *gw_access(const gw_proc *g);

/* A parsed response. */
typedef struct gw_resp {
  int status;
  char head[8192]; /* status line and headers as received */
  char *body;      /* malloc'd, NUL-terminated */
  size_t body_len;
  bool closed;     /* the server closed the connection after it (or said Connection: close) */
} gw_resp;

int gw_connect(int port); /* asserts */
void gw_send(int fd, const void *data, size_t len);
void gw_send_str(int fd, const char *s);
/* Reads one response within timeout_ms. 0, or -1 when the connection closed first (or the time
 * ran out: then *timed_out). */
int gw_read(int fd, gw_resp *r, int timeout_ms, bool *timed_out);
/* The same for the answer to a HEAD (no body follows, whatever Content-Length says). */
int gw_read_head(int fd, gw_resp *r, int timeout_ms);
/* A header's value in r->head (case-insensitive name) copied into buf, or NULL. */
const char *gw_header(const gw_resp *r, const char *name, char *buf, size_t cap);
void gw_resp_free(gw_resp *r);
/* Whether the peer closed the connection within timeout_ms (reads and discards). */
bool gw_closed(int fd, int timeout_ms);

/* One request on a fresh connection: "METHOD PATH HTTP/1.1", Host, the extra header lines
 * (complete "Name: value\r\n" lines or NULL), and the body. Asserts a response arrives within
 * 5 s. */
void gw_request(int port, const char *method, const char *path, const char *extra,
                const char *body, gw_resp *r);

/* GET /metrics on g's admin listener: asserts 200, the 0.0.4 text type and that promtool (a test
 * dependency, scripts/deps.sh: no skip when it is missing) accepts the exposition. Returns the
 * body (malloc'd; the caller frees it). */
char *gw_scrape(const gw_proc *g);
/* The value of the sample line that starts with `series` + ' ' (series: name{labels}, whole). */
bool gw_sample(const char *text, const char *series, double *v);
/* The type a family's "# TYPE NAME TYPE" line gives (static buffer), or NULL without one. */
const char *gw_metric_type(const char *text, const char *name);
/* Whether the family has a "# HELP NAME text" line with a text. */
bool gw_metric_help(const char *text, const char *name);

int64_t gw_now_ms(void);
void gw_sleep_ms(int ms);
/* Resident set size of `pid` in KiB (VmRSS), or -1. */
long gw_rss_kib(pid_t pid);

/* A raw upstream: listens on 127.0.0.1 (its port in *port) and forks a child that accepts one
 * connection at a time and hands it to serve(fd), which answers and returns; the child closes
 * it and takes the next, `conns` of them (0: no limit), for at most `seconds`. Returns the
 * child's pid (asserts); stop it with gw_fork_server_stop. */
pid_t gw_fork_server(void (*serve)(int fd), int conns, int seconds, int *port);
void gw_fork_server_stop(pid_t pid);

#endif
