/* SPDX-License-Identifier: MIT */
/* Shared helpers of the HTTP integration tests: faultd per scenario, one logical call, checks
 * on what the server received. */
#ifndef LINKD_HTTPTEST_H
#define LINKD_HTTPTEST_H

#include <linkd/http.h>

#include "faultd_client.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

#define HT_MAX_REQS 64

typedef struct ht_run {
  lk_http_result *res;
  int err;
  int64_t wall;              /* ns, measured around lk_http_call */
  faultd_req reqs[HT_MAX_REQS];
  int nreqs;                 /* requests faultd logged */
  size_t nattempts;
  const lk_http_attempt_info *att;
} ht_run;

/* A fast policy for tests: deadline 1.5 s, attempts of 300 ms, connect 150 ms, 3 attempts,
 * fixed 30 ms backoff without jitter. */
void ht_policy(lk_http_policy *p);

/* Changes the retry policy the validated way (retry.h: do not modify after init): a copy of its
 * config, changed, re-initialised (asserts). */
void ht_attempts(lk_http_policy *p, int max_attempts);
void ht_backoff(lk_http_policy *p, int64_t base, int64_t max);

/* Starts faultd (asserts) with a NULL-terminated argument list. */
void ht_start(faultd_proc *fp, const char *mode, ...);

/* Runs one call against fp's server (path "/x"), then reads the server log (waiting up to
 * `expect_reqs` entries for a short while, so late log lines are not missed) and prints the
 * result as JSON to stdout. body may be NULL. */
void ht_call(faultd_proc *fp, lk_http_client *c, const char *method, const void *body,
             size_t body_len, const lk_http_policy *pol, int expect_reqs, ht_run *out);
/* The same against an arbitrary URL (no server log). */
void ht_call_url(lk_http_client *c, const char *method, const char *url, const void *body,
                 size_t body_len, const lk_http_policy *pol, ht_run *out);
void ht_free(ht_run *r);

/* Every attempt ended in `kind`. */
void ht_all_kinds(const ht_run *r, lk_failure kind);
/* The call ended within its deadline plus 50 ms. */
void ht_within_deadline(const ht_run *r, const lk_http_policy *pol);
/* Every logged request carried the result's Idempotency-Key (or none if the result has none), and
 * Linkd-Attempt values are 1, 2, ... in log order; Linkd-Deadline <= the attempt cap. */
void ht_server_saw_one_key(const ht_run *r, const lk_http_policy *pol);

/* A buffer of n bytes (malloc'd, filled). */
void *ht_blob(size_t n);

/* A self-signed certificate for 127.0.0.1 in dir/NAME-c.pem (key NAME-k.pem), made by openssl
 * (fails the test without it). */
void ht_make_cert(const char *dir, const char *name);
/* Starts `openssl s_server -www` (a status page for every GET, HTTP/1.0, then it closes; one
 * connection at a time) on a free port of 127.0.0.1 with that certificate and key, and waits up
 * to ~5 s for it to accept. Returns its pid (*port set), or -1 (nothing left running). */
pid_t ht_tls_server_start(const char *crt, const char *key, int *port);
/* The same server, asking every client for a certificate that `client_ca` verifies and
 * refusing the session without one (mutual TLS). */
pid_t ht_mtls_server_start(const char *crt, const char *key, const char *client_ca, int *port);
void ht_tls_server_stop(pid_t pid);

/* A raw HTTP/1.1 server on 127.0.0.1 for responses faultd cannot script (broken framing, huge
 * heads): one thread accepts connections one at a time, reads each request head (up to the blank
 * line), counts it, keeps the first HT_RAW_HEADS of them, writes `resp` verbatim and closes the
 * connection. */
#define HT_RAW_HEADS 8
typedef struct ht_raw {
  int fd, port;
  const char *resp;
  size_t len;
  _Atomic int requests; /* request heads read */
  char heads[HT_RAW_HEADS][1024]; /* the first request heads (their first bytes), in order */
  _Atomic bool stop;
  pthread_t th;
} ht_raw;
/* Starts the server (asserts); `resp` (len bytes) must outlive it. */
void ht_raw_start(ht_raw *r, const char *resp, size_t len);
/* "http://127.0.0.1:PORT/x" */
void ht_raw_url(const ht_raw *r, char *buf, size_t cap);
void ht_raw_stop(ht_raw *r);

/* An external event loop on poll() for either transport: the client's sockets and timer as its
 * callbacks set them, served one pass at a time. */
#define HT_LOOP_FDS 64
typedef struct ht_loop {
  int fd[HT_LOOP_FDS];
  int ev[HT_LOOP_FDS];
  int n;
  int64_t timer_at; /* INT64_MAX: none */
  int closes;       /* close_fn calls */
  lk_http_client *c;
} ht_loop;

/* A client on the loop (start_submitted: calls start when the loop's next pass says so). */
void ht_loop_init_with(ht_loop *l, lk_http_transport tp, bool start_submitted);
void ht_loop_init(ht_loop *l, lk_http_transport tp);
void ht_loop_free(ht_loop *l);
/* One pass: waits for readiness or the timer (at most `max_ms`), then dispatches. */
void ht_loop_once(ht_loop *l, int max_ms);

#endif
