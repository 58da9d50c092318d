/* SPDX-License-Identifier: MIT */
/* `linkd serve`, the proxy half: one libuv loop thread that owns the listeners, every downstream
 * connection, the admin listener, signals and the lk_http client (external-loop mode: libcurl's
 * descriptors and timer are uv_poll / uv_timer handles on the same loop).
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
  GWP_BUSY,    /* the request is complete and being served; not reading */
  GWP_WRITING, /* its response is being written; not reading */
  GWP_CLOSING  /* handles are being closed */
} gwp_state;

/* One request on a connection. Header names and values are NUL-terminated in `head`. */
struct gwp_req {
  gwp_conn *conn;  /* NULL once the connection closed under a request being served */
  gwp_server *srv;
  int64_t t_start; /* monotonic ns: first byte of the request */
  char *head;      /* url \0 name \0 value \0 ... */
  size_t head_len, head_cap, head_bytes; /* head_bytes: what the limit counts */
  uint32_t *hoff; /* offsets of names (even) and values (odd) in head */
  size_t nh, hcap;
  int last_cb;    /* 0 none, 1 url, 2 field, 3 value */
  char *body;
  size_t body_len, body_cap;
  unsigned method; /* enum http_method */
  unsigned short major, minor;
  bool keep_alive;
  bool expect_continue;
  bool continue_sent;
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
  int64_t deadline;     /* ns given to the call */
  int64_t deadline_at;  /* monotonic ns */
  bool streamed;
  bool key_injected;
  bool retry_wanted;    /* an attempt failed with a kind the policy would have retried */
  int status;           /* sent downstream */
  lk_failure final;
  const char *stop;
  lk_http_result *res;  /* kept until the response is written (its body is written from it) */
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
  bool close_after;   /* close once the current response is written */
  bool reading;       /* uv_read_start is in effect */
  bool peer_eof;      /* the client shut down its side while a request was served */
  int handles_open;   /* tcp + timer, for the close callbacks */
  gwp_req *req;
  int64_t last_io;    /* monotonic ns: accepted, last read, last response written */
  char *pending;      /* bytes read after the request being served (pipelining) */
  size_t pending_len;
};

typedef struct gwp_listener {
  uv_tcp_t tcp;
  gwp_server *srv;
  bool admin;
  bool open;
} gwp_listener;

struct gwp_server {
  uv_loop_t *loop;
  char *config_path;
  lk_gw_config *cfg; /* current; the server holds one reference */
  lk_gw_runtime *rt;
  lk_rand_fast rng;
  lk_http_client *client;
  uv_timer_t curl_timer;
  struct gwp_poll **polls; /* upstream watchers by descriptor */
  size_t npolls;
  uv_signal_t sig_hup, sig_term, sig_int;
  uv_timer_t drain_timer; /* the drain deadline */
  uv_timer_t drain_poll;  /* while draining: closes what became idle, stops when nothing is left */
  uv_timer_t health_timer;
  gwp_listener listener, admin;
  int port, admin_port; /* bound */
  gwp_conn *conns;
  int nconns, nbusy;
  bool draining;
  FILE *access; /* NULL: no access log */
  bool access_owned;
  char rbuf[GWP_READ_BUF];
  uint64_t reloads_ok, reloads_failed;
  int exit_code;
};

/* gwp_conn.c */
void gwp_conn_accept(gwp_server *s, uv_stream_t *listener, bool admin);
/* Sends a response and frees the request afterwards. `extra` holds complete header lines
 * ("Name: value\r\n"...) or is NULL. The body is copied unless `res` owns it (then it is written
 * from `res`, which is freed afterwards). */
void gwp_respond(gwp_req *r, int status, const char *reason, const char *extra, const char *body,
                 size_t body_len, lk_http_result *res);
/* A response with a small text body ("<reason>\n") and Connection: close if `close`. */
void gwp_respond_error(gwp_req *r, int status, bool close, const char *extra);
const char *gwp_req_header(const gwp_req *r, const char *name);
/* Closes the idle connections (draining) that have seen no byte for `quiet` ns: a connection
 * just accepted may have its first request on the wire. */
void gwp_close_idle(gwp_server *s, int64_t quiet);
void gwp_conn_close(gwp_conn *c);
int64_t gwp_now(void);

/* gwp_proxy.c */
void gwp_proxy_dispatch(gwp_req *r);
/* The URL of the lk_http request itself (an endpoint base + path) */

/* gwp_admin.c */
void gwp_admin_dispatch(gwp_req *r);
/* Loads `text` (NULL: the configured file), validates and swaps it in. LK_OK or an error with a
 * message in err. */
int gwp_reload(gwp_server *s, const char *text, size_t len, char *err, size_t cap);

/* gwp_log.c */
void gwp_log(gwp_server *s, lk_gw_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void gwp_access_log(gwp_server *s, const gwp_req *r, const lk_http_result *res);
int gwp_access_open(gwp_server *s, const lk_gw_config *c);

#endif
