/* SPDX-License-Identifier: MIT */
/* server_impl.h: internals shared by the server's source files. */
#ifndef LINKD_SERVER_IMPL_H
#define LINKD_SERVER_IMPL_H

#include "admq.h"
#include "fault.h"
#include "idem_rules.h"
#include "series.h"
#include "server.h"
#include "waker.h"
#include "work.h"

#include <microhttpd.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>

#define LK_PATH_MAX 1024
#define LK_RESP_HDR_MAX 512

/* A response produced by a handler, before it becomes an MHD_Response. */
typedef struct lk_resp {
  int status;
  char headers[LK_RESP_HDR_MAX]; /* "Name: value\n" lines, Content-Type included */
  size_t hlen;
  char *body; /* malloc'd */
  size_t body_len;
} lk_resp;

typedef enum route_id {
  RT_NONE,
  RT_HEALTHZ,
  RT_METRICS,
  RT_BOOKS, /* /books */
  RT_BOOK,  /* /books/{id} */
  RT_LOANS, /* /books/{id}/loans */
  RT_LOAN,  /* /loans/{id} */
} route_id;

/* PH_QUEUED: suspended in the admission queue or running on a worker; PH_WORKED: the worker has
 * stored the response and resumed the connection. */
typedef enum phase { PH_HEAD, PH_BODY, PH_DELAY, PH_QUEUED, PH_WORKED, PH_DONE } phase;

/* Server-wide counters, reported by /metrics and /admin/stats. */
typedef struct lk_server_stats {
  atomic_uint_fast64_t requests, replays, key_conflicts, key_mismatches, key_missing,
      deadline_expired_on_arrival, deadline_expired_in_flight, faults_injected, loans_applied,
      write_errors;
  /* capacity (pool.c); *_ns are sums of CLOCK_MONOTONIC intervals */
  atomic_uint_fast64_t admitted, work_done, work_abandoned, work_ns, work_abandoned_ns,
      dropped_queue_full, dropped_deadline_expired, dropped_deadline_too_short, dropped_codel,
      busy_ns, joined_group; /* joined_group: writes queued straight into a running group */
} lk_server_stats;

/* The workers and their admission queue (pool.c). */
/* A worker's hand-off slot: a push that finds the worker parked pops an item for it into the
 * slot and posts its semaphore, so the worker starts without taking the pool's lock. */
typedef struct lk_pool_slot {
  sem_t sem;
  void *item; /* NULL: woken without an item (stop, or a look at the queue) */
  int64_t queued_at;
  lk_admq_verdict v;
} lk_pool_slot;

typedef struct lk_pool {
  pthread_mutex_t mu;
  lk_admq q;
  bool q_ready, stop;
  lk_pool_slot *slots;
  unsigned *parked; /* stack of parked workers' slot numbers, the last parked on top */
  unsigned idle;    /* workers parked */
  pthread_t *threads;
  unsigned n_started;
  lk_work_spec work;
} lk_pool;

struct lk_server {
  lk_server_config cfg;
  lk_store *store;
  lk_faults *faults;
  lk_inflight *inflight;
  lk_waker *waker;
  struct MHD_Daemon *d, *admin;
  int port, admin_port;
  char **require_key;
  size_t n_require_key;
  atomic_int active; /* requests between the first handler call and completion */
  atomic_bool draining, hard_stop, stopped;
  pthread_t purge_thread;
  bool purge_started;
  pthread_mutex_t purge_mu;
  pthread_cond_t purge_cv;
  bool purge_stop;
  lk_server_stats stats;
  lk_pool pool;
  lk_series series;
  int64_t started_ns;                /* CLOCK_MONOTONIC at start, for utilisation over the uptime */
  struct lk_server_metrics *metrics; /* NULL when built without the metrics registry */
  struct lk_guard *guard;            /* read deadlines (strict.c) */
  struct lk_guard *admin_guard;      /* the admin listener's connections, no deadlines */
};

struct req;
/* A write in progress (routes.c): what its transaction needs and what follows its commit. */
typedef struct req_write {
  struct req *r;
  lk_resp *out;
  int64_t now_wall;
  bool loan_applied;
  void (*then)(struct req *r);
} req_write;

/* One request's state across the handler calls MHD makes for it. */
typedef struct req {
  lk_server *srv;
  struct MHD_Connection *conn;
  int fd;     /* the connection's socket, for the worker's "is the caller still there?" */
  int64_t t0; /* arrival, CLOCK_MONOTONIC */
  lk_deadline dl;
  char method[16];
  char path[LK_PATH_MAX];
  route_id route;
  int64_t id;
  bool write; /* a state-changing route: Idempotency-Key applies */
  char tenant[IDEM_TENANT_MAX + 16];
  char key[IDEM_KEY_LEN_MAX + 1];
  bool keyed;
  char request_id[IDEM_KEY_LEN_MAX + 1];
  char attempt[24];
  char ctype[64];  /* Content-Type as sent (cut at 63 bytes), for the 415 message */
  bool has_ctype;  /* the request carried a Content-Type */
  bool ctype_json; /* and it names application/json (parameters aside) */
  char *body;
  size_t body_len, body_cap;
  bool too_big;
  lk_resp early; /* an error decided from the request head */
  bool has_early;
  lk_fault_plan plan;
  uint8_t fp[32];
  bool claimed;        /* holds the key in the in-process table (idem.c) */
  bool claim_in_store; /* and in the database, as claim_owner */
  bool completed;      /* the key's record committed with the effect */
  uint64_t claim_owner;
  phase ph;
  int status;          /* status queued, 0 when none */
  const char *outcome; /* for the log: "ok", "replay", "reset", "close", "stall", ... */
  /* input parsed from the body */
  lk_book book_in;
  char borrower[LK_LOAN_TEXT_MAX + 1];
  lk_resp resp; /* the response being built; also the body streamed by slow faults */
  bool replay;
  size_t stream_limit;  /* partial_stall: bytes sent before the stall */
  bool stream_can_send; /* slow_body: the next chunk may go now */
  bool stream_waiting;  /* partial_stall: the stall has begun */
  atomic_bool client_gone; /* the client hung up during a stream's pause (set by the waker) */
  bool dropped;         /* answered by the queue logic without running (resp holds the error) */
  int64_t t_pop;        /* taken from the admission queue, CLOCK_MONOTONIC */
  req_write wr;         /* the write handle_then started */
} req;

/* --- responses (resp.c) --------------------------------------------------------------------- */
void resp_init(lk_resp *r, int status);
void resp_free(lk_resp *r);
void resp_header(lk_resp *r, const char *name, const char *value);
/* Takes ownership of body (malloc'd JSON text). */
void resp_json_take(lk_resp *r, int status, char *body, size_t len);
/* {"error":code,"message":...} with the given status. */
void resp_error(lk_resp *r, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* --- API handlers (routes.c, api.c) --------------------------------------------------------- */
/* Parses the path into r->route / r->id; on failure fills *out (400 / 404). */
bool route_parse(req *r, lk_resp *out);
/* 405 unless the method is allowed on the route. */
bool route_method_ok(req *r, lk_resp *out);
/* Notes the request's Content-Type value (NULL: none) for input_parse. */
void input_content_type(req *r, const char *value);
/* Validates and decodes the body of a POST / PUT into r->book_in / r->borrower: 415 for a
 * non-empty body whose Content-Type is not application/json (none is taken as JSON), 400 for
 * what is not the resource's JSON. */
bool input_parse(req *r, lk_resp *out);
/* Runs the request (read, or write in one transaction with its idempotency record). */
void handle(req *r, lk_resp *out);
/* handle(r, &r->resp), then then(r): at once, or for a write once its transaction committed,
 * possibly on the thread that committed it (SQLite's group commit; see lk_store_write_async). */
void handle_then(req *r, void (*then)(req *r));
/* handle_then for a write, if it can join the group being committed (lk_store_write_join);
 * false, and nothing done, otherwise. Never waits for a commit. */
bool handle_join(req *r, void (*then)(req *r));
/* How many times query parameter `name` (any case, as MHD's lookups) occurs; *value: the first
 * one's value (NULL when absent or given without "="). */
int query_lookup(struct MHD_Connection *c, const char *name, const char **value);
/* Fills a replay of a stored record. */
void resp_from_record(lk_resp *out, const lk_idem_record *rec);

int json_book(const lk_book *b, char **out, size_t *len);
/* {"books":[...],"next":"/books?after=ID&limit=N" or null}: the link when `more` (a book after
 * the page's last exists), null otherwise. */
int json_books_page(const lk_book *books, int n, int limit, bool more, char **out, size_t *len);
int json_loan(const lk_loan *l, char **out, size_t *len);

/* --- workers and admission queue (pool.c) ------------------------------------------------- */
/* Parses the work spec (NULL: LK_WORK_DEFAULT) and starts the worker threads. 0, LK_ECONFIG
 * (message in err), LK_ENOMEM or LK_ESYS. */
int pool_start(lk_server *s, const char *work, char *err, size_t errcap);
/* Lets the workers answer what is queued (503 once hard_stop is set), then joins them. */
void pool_stop(lk_server *s);
/* Takes a queue slot for r: 1, 0 when the queue is full, -1 when the pool is stopping. *idle:
 * nothing else was queued or on its way. */
int pool_reserve(lk_server *s, bool *idle);
/* Queues r (its connection already suspended) in the slot taken by pool_reserve. A write that
 * costs no service time, found the queue idle and can join the group being committed goes
 * there instead and gives the slot back: a worker would only pass it on. */
void pool_push(lk_server *s, req *r, bool idle);
/* Queue depth now and the largest seen. */
void pool_depth(lk_server *s, size_t *depth, size_t *max);

/* --- admin listener (admin.c), metrics (metrics_glue.c), access log (log.c) ------------------ */
enum MHD_Result admin_handler(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls);
void admin_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                     enum MHD_RequestTerminationCode toe);
void access_log(const req *r, enum MHD_RequestTerminationCode toe);

int server_metrics_init(lk_server *s);
void server_metrics_free(lk_server *s);
void server_metrics_request(lk_server *s, const req *r, int64_t dur_ns);
void server_metrics_queue_wait(lk_server *s, int64_t ns);
/* Prometheus text for GET /metrics; false when no registry is available. */
bool server_metrics_render(lk_server *s, lk_resp *out);

#endif
