/* SPDX-License-Identifier: MIT */
/* The driver's private state: clients, calls and attempts (client.c, call.c, attempt.c, h1.c). */
#ifndef LINKD_HTTP_CALL_INTERNAL_H
#define LINKD_HTTP_CALL_INTERNAL_H

#include "http_internal.h"

#include <linkd/hedge.h>

#include <sys/socket.h>

typedef struct lk_call lk_call;
typedef struct lk_origin lk_origin;

#define LK_ORIGIN_MAX 1024    /* origins with default protection per client */
#define LK_ORIGIN_KEY_MAX 264 /* "scheme://host:port" */

typedef struct lk_try lk_try;

/* --- the transport seam -------------------------------------------------------------------------
 * How an attempt's bytes move. Everything above an attempt (the call's states, protections,
 * retry decision, timeline, events) is one code path; an attempt is started, stopped and asked
 * for the facts of its connection through this interface, and reports as it goes by filling
 * its lk_att (sock_seen, prereq_calls, sent, got_bytes, ...) and its response (t->cur), and at
 * its end by lk__call_transfer_done() with the CURLcode libcurl gives for the same evidence, so
 * classification (classify.c) is one function for every transport. DESIGN.md section 8. */

/* What only the transport knows about an attempt's connection, read when it ends. */
typedef struct lk_conn_facts {
  int os_errno;        /* the connect's errno (failures before the first write) */
  bool connected;      /* the TCP handshake completed */
  bool tls_done;       /* the TLS handshake completed */
  uint64_t bytes_sent; /* request bytes handed to the kernel (head + body) */
  bool peer_alert;     /* the peer ended the TLS session with a fatal alert (TLS 1.3 servers
                          refuse a missing or bad client certificate so, after the client's
                          side of the handshake is done and the request written: the request
                          was never read) */
} lk_conn_facts;

typedef struct lk_transport {
  const char *name;
  /* Starts attempt t: its headers are built (t->nodes), its URL chosen (t->url). LK_OK, or
   * LK_ENOMEM with nothing started. */
  int (*start)(lk_try *t);
  /* Takes t out of the transport, with no report: it ended, or it is abandoned (a timer, a
   * cancellation, another attempt's answer). */
  void (*stop)(lk_try *t);
  /* Whether t's TCP connection is up (for the connect-phase timer). */
  bool (*connected)(const lk_try *t);
  /* The connection facts of an ended attempt; `failed`: it did not complete (the connect
   * facts are then needed). */
  void (*facts)(const lk_try *t, bool failed, lk_conn_facts *f);
} lk_transport;

extern const lk_transport lk__curl_transport; /* attempt.c: libcurl's multi handle */
extern const lk_transport lk__h1_transport;   /* h1.c: HTTP/1.1 on the external loop itself */

typedef struct lk_h1 lk_h1;
struct h1_conn;

/* Where a native attempt goes (lk__h1_target): the address, the Host header's value and the
 * request target (pointers into the attempt's URL, read only while the request is built). */
typedef struct lk_h1_target {
  struct sockaddr_storage addr;
  socklen_t alen;
  char host[72];
  size_t host_len;
  const char *path;  /* NULL: the URL has a query but no path ("/" + query is sent) */
  const char *query; /* when path is NULL */
  size_t path_len;
} lk_h1_target;

/* The TLS files a pooled handle was set up with (copies; NULL: none, libcurl's default CA). */
typedef struct lk_tls_files {
  char *ca;   /* CURLOPT_CAINFO */
  char *cert; /* CURLOPT_SSLCERT */
  char *key;  /* CURLOPT_SSLKEY */
  char *pass; /* CURLOPT_KEYPASSWD: "" when a certificate came without one (never a prompt) */
} lk_tls_files;

/* Frees the copies, the pass phrase wiped first; all NULL after. */
void lk__tls_files_free(lk_tls_files *f);

/* A pooled easy handle. Callbacks get the wrapper (set once), which points at the attempt it
 * currently runs, so per-call options need re-setting only when the request or the policy's
 * options change. */
typedef struct lk_easy {
  CURL *h;
  lk_try *t;
  struct lk_http_client *client; /* the owner, for the close hook (outlives the handle) */
  uint64_t req_id;               /* request configured last (0: none) */
  unsigned sig;                  /* policy-derived options configured last */
  long timeout_ms;               /* CURLOPT_TIMEOUT_MS set last (0: none) */
  const struct curl_slist *hdrs; /* CURLOPT_HTTPHEADER set last */
  bool dns_prune; /* CURLOPT_DNS_CACHE_TIMEOUT is libcurl's default (prunes), not -1 */
  lk_tls_files tls;             /* the TLS files set last */
  char errbuf[CURL_ERROR_SIZE]; /* CURLOPT_ERRORBUFFER: libcurl's message for the last transfer */
  /* A call's resolve and connect-to entries (lk_call), set for its attempts and taken off when
   * the handle goes back to the pool (lk__client_easy_put) */
  CURLSH *dns;                         /* CURLOPT_SHARE: the call's own DNS cache, or NULL */
  bool resolve;                        /* CURLOPT_RESOLVE is set */
  const struct curl_slist *connect_to; /* CURLOPT_CONNECT_TO set last, or NULL */
} lk_easy;

/* The states of a logical call (curl's lib/multi.c model: one enum, and one function,
 * call_state() in call.c, through which every change passes). DESIGN.md section 8.
 *
 *   ADMIT ---------> PERFORM ---------> DONE      (success, a final failure, cancellation)
 *     ^  (protections   |  ^ (a hedge joins:         ^
 *     |   waited on)    |  | still PERFORM)          |
 *     |                 v  |                         |
 *     +------------- BACKOFF ------------------------+ (cancelled during the delay)
 *
 * ADMIT: before an attempt, asking deadline, bulkhead, limiter and breaker in that order; a
 *   protection that makes the call wait sets timer_at and the call stays here.
 * PERFORM: one attempt or more (hedges) in flight; timer_at is the next hedge (INT64_MAX none).
 * BACKOFF: the retry delay after the last attempt in flight failed; ends at timer_at.
 * DONE: the result is delivered; the call's memory is freed or kept as the client's spare. */
typedef enum lk_call_state {
  LK_CALL_ADMIT,
  LK_CALL_PERFORM,
  LK_CALL_BACKOFF,
  LK_CALL_DONE
} lk_call_state;

/* Per-attempt evidence collected by libcurl callbacks and the driver's timers. */
typedef struct lk_att {
  int64_t start, end_at; /* clock ns */
  int64_t timeout, ctimeout;
  int64_t t_sock, t_tls, t_prereq, t_sent, t_last;
  uint64_t tx_bytes; /* request bytes written (transports that count them themselves) */
  curl_off_t uploaded;
  uint64_t rx_bytes;
  int prereq_calls;
  int resends;
  bool sock_seen, tls_started, reused, sent, got_bytes, resend_aborted, too_big, oom;
  bool head_too_big; /* the head passed LK_HTTP_HEAD_MAX (the transport refused it) */
  bool head_junk;    /* lk__resp_head_check() refused the final head */
  bool body_junk;    /* the body's Content-Encoding is not one linkd decodes, or its bytes do
                        not decode (lk_http_policy.compressed) */
  size_t head_bytes; /* libcurl: bytes of the head being read, for LK_HTTP_HEAD_MAX */
  int fds[4];        /* libcurl: the last sockets opened for this attempt (nfds of them) */
  int nfds;
} lk_att;

/* Header lines the driver may add to a request's own: User-Agent, Expect, Accept, Content-Type,
 * Idempotency-Key, Linkd-Deadline, grpc-timeout, Linkd-Attempt, traceparent (attempt.c). */
#define LK__DRIVER_HEADERS 9

/* One attempt as its own object: the handle it runs on, its evidence, its response as it
 * arrives, the breaker permit and bulkhead slot it holds and its per-attempt headers. A call has
 * one inline (the first attempt and every retry run on it, on the call's own easy handle) and,
 * when it hedges, more allocated on first use, each with a handle of its own (another
 * connection) for as long as it runs. */
struct lk_try {
  lk_call *k;
  int number;             /* 1-based attempt number within the call */
  bool live;              /* in flight: the transport runs it */
  const lk_transport *tp; /* the transport of the attempt in flight (or of the last one) */
  const char *url;        /* this attempt's URL (attempt_url's, or the request's) */
  bool hedge;             /* started by the hedge timer, alongside another attempt */
  bool bulkhead_held;
  lk_easy *ex;
  CURL *easy;   /* ex->h */
  lk_prot prot; /* the breaker permit (the budget ticket is the call's) */
  lk_att att;
  lk_resp cur; /* the attempt's response as it arrives (buffers kept across attempts) */
  lk_decoder *dec; /* decoding cur's body (compressed), from its final head to the attempt's
                      end; NULL otherwise */
  struct curl_slist *nodes; /* header list built in place: no allocation per attempt */
  size_t nnodes;
  struct curl_slist inline_nodes[16]; /* nodes points here when the request has few headers */
  char h_deadline[48];
  char h_grpc[32];
  char h_attempt[32];
  char h_trace[16 + LK_TRACEPARENT_LEN]; /* "traceparent: " + this attempt's span */
  /* the native transport's (h1.c) */
  struct h1_conn *h1c; /* the connection in use, NULL when none */
  bool h1_connected;   /* the last connection's handshake completed (after h1c is gone) */
  int h1_errno;        /* its connect error */
  lk_h1_target h1t;
};

#define LK_TRY_MAX (1 + LK_HEDGE_MAX_HEDGES)
/* Finished calls kept for reuse: a gateway has tens of calls in flight, and a call's memory
 * (~3 KiB, zeroed) allocated per request cost ~2.7k instructions of calloc. */
#define LK_SPARE_MAX 64 /* attempts of one call in flight at once */

struct lk_call {
  lk_call *prev, *next;
  lk_http_client *cl;
  lk_http_request *req;
  const lk_clock *clock;
  lk_rand *rng;
  lk_http_cancel *cancel;
  lk_http_done_fn done;
  void *ud;
  lk_http_result *res;
  lk_call_state state;
  int64_t t0, deadline; /* clock ns */
  int64_t timer_at;     /* ADMIT, BACKOFF: when to ask again; PERFORM: the next hedge */
  int number;           /* attempts started */
  int live;             /* attempts in flight */
  int hedges;           /* hedges started since the last attempt the driver started itself */
  int64_t round_start;  /* start of that attempt: hedges are due from it */
  int64_t last_start;   /* start of the attempt started last (for HEDGE_STARTED) */
  bool ev_started;      /* CALL_START was emitted */
  int64_t prev_delay;
  lk_admission adm; /* bulkhead slot, limiter token and waits of the attempt about to start */
  lk_prot prot;     /* the budget ticket (breaker permits are per attempt) */
  bool https, unsafe, key_in_request, hedging;
  bool native;   /* attempts to eligible URLs run on the native transport (lk__h1_target) */
  bool fresh;    /* submitted, not yet seen by a pass (lk_http_client_start_submitted) */
  lk_easy *ex;   /* the call's own handle, used by `first` */
  char *ua_line; /* "User-Agent: ..." or NULL */
  /* The policy's resolve and connect-to entries, copied at submit (NULL: none), and the DNS
   * cache of a call with resolve entries: its own, so that its addresses stay its own */
  struct curl_slist *resolve, *connect_to;
  CURLSH *dns;
  lk_try *extra[LK_HEDGE_MAX_HEDGES]; /* hedge attempts, allocated on first use */
  int nextra;
  /* Submit clears the fields above when it reuses a finished call's memory, not those below:
   * `first.cur` keeps its buffers for the next call, the rest is written before it is read. */
  lk_try first;
  lk_http_policy pol; /* copy; idem strings cleared (the key is computed at submit);
                         pol.traceparent points at `parent` */
  lk_traceparent parent;
  char h_idem[LK_IDEM_KEY_MAX + 20];
};

typedef struct lk_tok_reg {
  lk_http_cancel *tok;
  int refs;
} lk_tok_reg;

struct lk_http_client {
  CURLM *multi;
  int wake_fd;
  lk_http_client_config cfg;
  bool external;
  int depth;      /* > 0 while the driver runs (callbacks may not re-enter run/call) */
  lk_call *calls; /* in-flight calls */
  int ncalls;
  lk_easy **easy_pool;
  size_t neasy, cap_easy;
  lk_tok_reg *toks;
  size_t ntoks, cap_toks;
  lk_call *spare; /* finished calls' memory (and response buffers), reused by the next ones
                     (a list through `next`, at most LK_SPARE_MAX) */
  int nspare;
  struct curl_waitfd *wfds;
  size_t cap_wfds;
  int timer_fd; /* own loop: wakes it within the millisecond curl_multi_poll rounds a short wait
                   up to; created on first use, -1 before (or if it cannot be) */
  lk_http_policy valid_pol; /* the last policy validated, without strings (see submit) */
  bool valid_pol_set;
  int64_t pass_now;       /* system clock ns read by the current pass over the calls */
  int64_t dns_prune_at;   /* system ns: the next attempt started after it prunes DNS entries */
  int64_t curl_timer_at;  /* external mode: absolute system ns, -1 none */
  int64_t armed_delay_at; /* external mode: last timer armed (absolute), INT64_MIN none */
  /* Submit arms the timer for now; lk_http_client_start_submitted() starts those calls and puts
   * back what was armed before (fresh_prev_armed) unless a pass ran meanwhile (fresh_armed
   * cleared). `changes` counts what can make another call due (a call ended, a bulkhead slot
   * released): then the start falls back to a pass over every call to re-arm. */
  bool fresh_armed;
  int64_t fresh_prev_armed;
  uint64_t changes;
  /* calls ended / submitted: a native socket action that ended no call but its own and submitted
   * none needs no pass over the calls (lk_http_client_socket_action) */
  uint64_t ends, submits;
  /* default protection per origin (origin.c) */
  lk_budget_ratio_config origin_budget;
  lk_breaker_config origin_breaker;
  lk_origin **origins;
  size_t norigins, cap_origins;
  /* jitter for calls whose policy has no rng: the client's own, since a client may move between
   * threads and a per-thread generator captured at submit would be used by another thread */
  lk_rand_fast rng;
  _Atomic int ext_wakes; /* lk_http_client_wakeup() calls not yet seen by the loop */
  lk_h1 *h1;             /* the native transport's pools; NULL: every attempt runs on libcurl */
  /* libcurl's plain-http connections by address (remote and local ip:port), so the pre-request
   * callback finds the socket of a reused one, which libcurl does not tell (attempt.c). Lossy:
   * a slot taken by another connection only skips the check; allocated on first use. */
  struct lk_conn_tag *conn_tags;
};

#define LK_CONN_TAGS 1024
typedef struct lk_conn_tag {
  uint64_t key; /* hash of the four; 0: empty */
  int fd;
} lk_conn_tag;

/* call.c */
/* The call's timer (or the one of an attempt of it) is due at `now`: admission, the end of a
 * retry delay, a hedge, or an attempt's phase timeout. */
void lk__call_timer(lk_call *k, int64_t now);
/* libcurl finished the transfer of attempt `t`. */
void lk__call_transfer_done(lk_try *t, int curl_code);
void lk__call_abort(lk_call *k); /* cancellation, in whatever state */
/* The earliest of the call's own timers and of its attempts' (clock ns); INT64_MAX if none. */
int64_t lk__call_next_timer(lk_call *k);
/* Frees the attempts a call allocated for hedges (their handles go back to the pool). */
void lk__call_free_extra(lk_call *k);
/* Frees the call's resolve and connect-to lists and its DNS cache (client.c), once no handle of
 * the call uses them. */
void lk__call_net_free(lk_call *k);

/* attempt.c */
int lk__easy_init(lk_easy *x); /* options set once per pooled handle */
/* Per call options on an easy handle (the request's, the policy's). */
int lk__attempt_setup_call(lk_call *k, lk_easy *x);
/* The attempt's URL (attempt_url) and its header lines (t->nodes), whatever the transport. */
void lk__attempt_prepare(lk_try *t);

/* h1.c */
lk_h1 *lk__h1_new(lk_http_client *c);
void lk__h1_free(lk_h1 *h); /* after every call ended */
/* Fills t->h1t from t->url; false when the URL is not for the native transport (not http://,
 * not an IP literal or localhost, user info, bytes libcurl would escape). */
bool lk__h1_target(lk_try *t);
bool lk__h1_owns(const lk_http_client *c, int fd); /* fd is a native connection's */
/* The call whose attempt uses native connection `fd`, NULL if none (idle, or not native). */
lk_call *lk__h1_call_of(const lk_http_client *c, int fd);
void lk__h1_event(lk_http_client *c, int fd, int events);
/* Failures found while an attempt started are told on the next pass: pending says one waits,
 * flush tells them. */
bool lk__h1_pending(const lk_http_client *c);
void lk__h1_flush(lk_http_client *c);

/* origin.c */
/* Copies (or defaults) the per-origin protection configs; LK_OK or LK_ECONFIG. */
int lk__origin_config(lk_http_client *c, const lk_http_client_config *cfg);
/* Fills whichever of *budget / *breaker is NULL with the request origin's own, created on first
 * use (left NULL when the origin has none: no authority, or past LK_ORIGIN_MAX).
 * LK_OK, LK_ENOMEM, LK_ESYS. */
int lk__origin_protect(lk_http_client *c, const lk_http_request *req, lk_budget **budget,
                       lk_breaker **breaker);
void lk__origins_free(lk_http_client *c);

/* client.c */
lk_easy *lk__client_easy_get(lk_http_client *c);
void lk__client_easy_put(lk_http_client *c, lk_easy *x);
int lk__client_tok_register(lk_http_client *c, lk_http_cancel *t);
void lk__client_tok_unregister(lk_http_client *c, lk_http_cancel *t);
void lk__client_unlink(lk_http_client *c, lk_call *k);
/* Wakes the client's wait for the driver's own reasons (a bulkhead grant): unlike
 * lk_http_client_wakeup() it does not make lk_http_client_run() return. Any thread. */
void lk__client_notify(lk_http_client *c);

#endif
