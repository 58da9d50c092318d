/* SPDX-License-Identifier: MIT */
/* `linkd serve`, the proxy half: N libuv loop threads (workers), each with its own listener on
 * the shared port (SO_REUSEPORT), its downstream connections and its lk_http client in
 * external-loop mode (libcurl's descriptors and timer are uv_poll / uv_timer handles on the same
 * loop). Nothing on the request path is shared between workers but the configuration (each
 * worker holds a reference, refreshed on reload) and the runtime state of gw_config.h, which is
 * thread-safe. Worker 0, on the main thread, also owns the admin listener and the signals.
 *
 * A downstream connection serves one request at a time (pipelined requests are answered in
 * order): once a request is complete, bytes that arrive after it are kept (up to 64 KiB, then
 * the connection stops reading) and parsed only when its response has been written out. That is
 * also the back-pressure rule: a client whose responses are not being written (it does not
 * read) gets no further request served, and past 64 KiB is not read from. An idle keep-alive
 * connection holds only its gwp_conn (no buffers): reads land in one loop-wide buffer and a
 * request's head and body buffers exist while the request does. */
#ifndef LINKD_GWP_H
#define LINKD_GWP_H

#include "gw_config.h"

#include "core/sat.h"

#include <linkd/http.h>

#include <http_parser.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <uv.h>

typedef struct gwp_server gwp_server;
typedef struct gwp_conn gwp_conn;
typedef struct gwp_req gwp_req;

/* The loop-wide read buffer (each read is parsed before the next one). */
#define GWP_READ_BUF (64 * 1024)
/* Attempts whose endpoint a request remembers (the access log's "endpoints" list). */
#define GWP_MAX_TRACKED 16

typedef enum gwp_state {
  GWP_IDLE,    /* between requests (keep-alive), nothing buffered but maybe pipelined bytes */
  GWP_READING, /* a request's head or body is arriving */
  GWP_STREAMING, /* being served while its body still arrives (a body over body-buffer) */
  GWP_BUSY,    /* the request is complete and being served; later bytes wait in `pending` */
  GWP_WRITING, /* its response is being written; likewise */
  GWP_CLOSING  /* handles are being closed */
} gwp_state;

/* One request on a connection. Header names and values are NUL-terminated in `head`. */
struct gwp_req {
  gwp_conn *conn; /* NULL once the connection closed under a request being served */
  gwp_server *srv;
  int64_t t_start;                       /* monotonic ns: first byte of the request */
  char *head;                            /* url \0 name \0 value \0 ... */
  size_t head_len, head_cap, head_bytes; /* head_bytes: what the limit counts */
  uint32_t *hoff;                        /* offsets of names (even) and values (odd) in head */
  size_t nh, hcap;
  int last_cb; /* 0 none, 1 url, 2 field, 3 value */
  char *body; /* the body, or for a streamed one the bytes not yet taken: [body_off, body_len) */
  size_t body_len, body_cap, body_off;
  uint64_t content_length; /* declared; ULLONG_MAX for chunked */
  bool streaming;          /* the body goes upstream as it arrives */
  bool body_done;          /* the whole body has arrived */
  lk_http_request *hr;     /* streaming: the upstream request (pulls from `body`) */
  unsigned method; /* enum http_method */
  unsigned short major, minor;
  bool keep_alive;
  bool continue_sent; /* "100 Continue" went out (Expect: 100-continue) */
  /* proxying */
  lk_gw_config *cfg; /* the configuration the request started under (a reference) */
  const lk_gw_route *route;
  const lk_gw_policy *pol;
  int version;
  const char *path; /* in head */
  char *url;        /* the current attempt's URL: endpoint base + path */
  size_t url_cap;
  uint64_t tried;
  int ep[GWP_MAX_TRACKED]; /* endpoint index of attempt n (1-based) */
  int nattempts;
  int64_t deadline;    /* ns given to the call */
  int64_t deadline_at; /* monotonic ns */
  bool streamed;
  bool key_injected;
  bool retry_wanted; /* an attempt failed with a kind the policy would have retried */
  int status;        /* sent downstream */
  lk_failure final;
  const char *stop;
  lk_http_result *res;     /* kept until the response is written (its body is written from it) */
  const char *head_length; /* HEAD: the upstream's Content-Length (in res), sent as is */
  /* response */
  char *out; /* the response head (and a small body) */
  uv_write_t wr;
};

struct gwp_conn {
  uv_tcp_t tcp;
  uv_timer_t timer; /* header timeout while reading, idle timeout while idle */
  http_parser parser;
  gwp_server *srv;
  gwp_conn *prev, *next;
  gwp_state state;
  bool admin;
  bool close_after; /* close once the current response is written */
  bool reading;     /* uv_read_start is in effect */
  bool peer_eof;    /* the client shut down its side while a request was served */
  int handles_open; /* tcp + timer, for the close callbacks */
  gwp_req *req;
  int64_t last_io; /* monotonic ns: accepted, last read, last response written */
  char *pending;   /* bytes read after the request being served (pipelining) */
  size_t pending_len;
};

typedef struct gwp_listener {
  uv_tcp_t tcp;
  gwp_server *srv;
  bool admin;
  bool open;
} gwp_listener;

/* What every loop thread shares (gwp_shared) and what each has of its own (gwp_server). */
typedef struct gwp_shared {
  char *config_path;
  pthread_mutex_t mu; /* guards cfg (the pointer), access, and the reload acknowledgements */
  pthread_cond_t acked;
  int acks;          /* workers that took the newest configuration */
  lk_gw_config *cfg; /* the newest configuration; each worker holds its own reference */
  lk_gw_runtime *rt;
  FILE *access; /* NULL: no access log */
  bool access_owned;
  _Atomic bool access_on; /* access != NULL, readable without the lock */
  _Atomic bool draining;
  _Atomic int conns_total; /* downstream connections over all workers (max-connections) */
  _Atomic int workers_done;
  int nworkers;
  gwp_server **workers; /* [0] is the main thread's */
  uint64_t reloads_ok, reloads_failed;
  int exit_code;
  /* the settings read at start only, as the process started with them: a reload that changes
   * one says it is not applied (gwp_reload) */
  struct {
    lk_gw_addr listen, admin;    /* as configured (port 0: any) */
    int listen_port, admin_port; /* as bound */
    bool admin_on;
    int backlog;
    lk_http_transport client;
  } started;
} gwp_shared;

/* Commands to a worker's loop (bits of gwp_server.cmd, then its async handle). */
enum { GWP_CMD_CONFIG = 1, GWP_CMD_DRAIN = 2, GWP_CMD_STOP = 4, GWP_CMD_CHECK = 8 };

/* One loop thread: its own loop, listener (SO_REUSEPORT on the shared port), connections, lk_http
 * client and generator. Worker 0 runs on the main thread and also owns the admin listener, the
 * signals, the drain deadline and the health checks. */
struct gwp_server {
  gwp_shared *sh;
  int id;
  uv_loop_t *loop;
  uv_loop_t own_loop;
  pthread_t thread;
  uv_async_t async;
  _Atomic int cmd;
  lk_gw_config *cfg; /* this worker's reference to the configuration new requests use */
  lk_gw_runtime *rt; /* == sh->rt */
  lk_rand_fast rng;
  lk_http_client *client;
  uv_timer_t curl_timer;
  uv_check_t start_check; /* starts, at the end of each loop pass, the calls the pass submitted */
  struct gwp_poll **polls; /* upstream watchers by descriptor */
  size_t npolls;
  uv_signal_t sig_hup, sig_term, sig_int, sig_usr1;
  uv_timer_t drain_timer; /* worker 0: the drain deadline */
  uv_timer_t drain_poll;  /* while draining: closes what became idle, stops when nothing is left */
  uv_timer_t health_timer;
  gwp_listener listener, admin;
  int port, admin_port; /* bound */
  gwp_conn *conns;
  _Atomic int nconns, nbusy;
  bool done; /* drained: this worker has told worker 0 */
  char rbuf[GWP_READ_BUF];
};

static inline bool gwp_draining(const gwp_server *s) { return atomic_load(&s->sh->draining); }

/* gwp_conn.c */
void gwp_conn_accept(gwp_server *s, uv_stream_t *listener, bool admin);
/* v in decimal at buf (no NUL; at most 20 bytes); returns the length. */
size_t gwp_u64_dec(char *buf, uint64_t v);
/* Sends a response and frees the request afterwards. `extra` holds complete header lines
 * ("Name: value\r\n"...) or is NULL. The body is copied unless `res` owns it (then it is written
 * from `res`, which is freed afterwards). */
void gwp_respond(gwp_req *r, int status, const char *reason, const char *extra, const char *body,
                 size_t body_len, lk_http_result *res);
/* A response with a small text body ("<reason>\n") and Connection: close if `close`. */
void gwp_respond_error(gwp_req *r, int status, bool close, const char *extra);
/* The reason phrase of a status the gateway answers itself ("Bad Gateway"), "" for others. */
const char *gwp_status_text(int status);
const char *gwp_req_header(const gwp_req *r, const char *name);
/* Closes the idle connections (draining) that have seen no byte for `quiet` ns: a connection
 * just accepted may have its first request on the wire. */
void gwp_close_idle(gwp_server *s, int64_t quiet);
void gwp_conn_close(gwp_conn *c);
/* A streamed body's buffer has room again: read from the client if reading had stopped. */
void gwp_conn_resume_body(gwp_conn *c);
int64_t gwp_now(void);

/* gwp_proxy.c */
void gwp_proxy_dispatch(gwp_req *r);
/* The attempts of a call that went upstream: an attempt a protection refused (breaker, limiter,
 * bulkhead) is in the timeline, still queued, and is not one. */
int gwp_attempts_made(const lk_http_result *res);

/* gwp_admin.c */
/* The name of a configuration posted to the admin listener, where a file's path would be. */
#define GWP_POSTED_CONFIG "POST /config"
void gwp_admin_dispatch(gwp_req *r);
/* Loads `text` (NULL: the configured file), validates and swaps it in. LK_OK or an error with a
 * message in err. On LK_OK, err holds a line per start-only setting (listen and admin address,
 * backlog, upstream-client) the new configuration changes but the process cannot apply before a
 * restart, each also logged as a warning; "" when none. */
int gwp_reload(gwp_server *s, const char *text, size_t len, char *err, size_t cap);

/* gwp_server.c */
/* Worker 0: tells every other worker to take the newest configuration and waits (bounded) until
 * they have, so a response that says "generation N" is followed by requests served under N. */
void gwp_publish_config(gwp_server *s);

/* gwp_log.c */
void gwp_log(gwp_server *s, lk_gw_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void gwp_access_log(gwp_server *s, const gwp_req *r, const lk_http_result *res);
int gwp_access_open(gwp_shared *s, const lk_gw_config *c);

#endif
