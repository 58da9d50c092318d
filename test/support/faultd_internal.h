/* SPDX-License-Identifier: MIT */
/* Declarations shared by faultd's source files. faultd is a test program, not a library: it keeps
 * its configuration in one global that is written once in main() before any thread starts. */
#ifndef LINKD_FAULTD_INTERNAL_H
#define LINKD_FAULTD_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef enum {
  FD_MODE_REFUSE,
  FD_MODE_BLACKHOLE,
  FD_MODE_ACCEPT_NOREAD,
  FD_MODE_RESET_BEFORE_READ,
  FD_MODE_READ_THEN_RESET,
  FD_MODE_READ_THEN_CLOSE,
  FD_MODE_STATUS,
  FD_MODE_SLOW,
  FD_MODE_PARTIAL_STALL,
  FD_MODE_RESET_MID_UPLOAD,
  FD_MODE_KEEPALIVE_CLOSE,
  FD_MODE_OK,
} fd_mode;

typedef enum {
  FD_CLOSE_BEFORE_RESPONSE,
  FD_CLOSE_AFTER_RESPONSE,
  FD_CLOSE_IDLE,
} fd_close_when;

/* What faultd does with one fully read request. */
typedef enum {
  FD_ACT_RESPOND, /* answer status (after delay_ms) */
  FD_ACT_RESET,   /* RST without a response */
  FD_ACT_CLOSE,   /* FIN without a response */
  FD_ACT_STALL,   /* never answer; hold the socket until the peer leaves */
  FD_ACT_PARTIAL, /* headers with Content-Length: 1000 and 10 body bytes, then stall */
} fd_act_kind;

typedef struct {
  fd_act_kind kind;
  int status;
  const char *retry_after; /* NULL: no Retry-After header; "date+N": HTTP-date now + N s */
  int delay_ms;
} fd_action;

typedef struct {
  fd_mode mode;
  const char *port_file;
  const char *log_file;      /* NULL: requests are not logged */
  const char *conn_log_file; /* NULL: connections are not logged */
  int port;
  int status;
  const char *retry_after;
  const char *body; /* NULL: a small default JSON body */
  int delay_ms;     /* -1: mode default */
  int drip_ms;
  int close_after;
  fd_close_when close_when;
  int idle_ms;
  long long reset_after;
  fd_action *script;
  int script_len;
  int max_seconds;
  int max_conns;
  int rcvbuf;
  pid_t parent_pid;
} fd_config;

extern fd_config g_cfg;
extern atomic_bool g_stop;

/* --- faultd_io.c: stop-aware socket I/O, HTTP request reading, responses, logs ------------ */

/* One accepted connection, owned by its thread. */
typedef struct {
  int fd;
  int id;        /* 1-based connection number, in accept order */
  int nreq;      /* requests read on this connection so far */
  int responses; /* responses sent on this connection so far */
  const char *close_how;
  char *buf;
  size_t off, len, cap;
} fd_conn;

typedef struct {
  char method[16];
  char path[256];
  char key[256];
  char attempt[32];
  char deadline[32];
  bool has_key, has_attempt, has_deadline;
  bool keep_alive;
  bool head;
  long long body_bytes;
  bool complete;
} fd_req;

typedef enum {
  FD_RD_OK,      /* headers and the whole body arrived */
  FD_RD_LIMIT,   /* headers arrived; the body was read up to the caller's limit */
  FD_RD_NONE,    /* the connection ended (or timed out) before any byte of a request */
  FD_RD_PARTIAL, /* the connection ended in the middle of a request */
  FD_RD_BAD,     /* unparsable request */
} fd_rd;

int64_t fd_now_ms(void);
int64_t fd_uptime_ms(void);
void fd_io_init(void);
int fd_open_logs(void);

/* Waits until the peer hangs up (1), timeout_ms passes (0, never if < 0), or faultd stops (-1). */
int fd_wait_hangup(int fd, int timeout_ms);
int fd_send_all(int fd, const void *data, size_t n);

/* Reads one request. body_limit < 0: no limit. send_continue: answer "Expect: 100-continue".
 * timeout_ms < 0: wait as long as the peer stays. */
fd_rd fd_read_request(fd_conn *c, fd_req *r, long long body_limit, bool send_continue,
                      int timeout_ms);

/* Sends a whole response; drip_ms > 0 sends the body one byte at a time. 0 or -1. */
int fd_respond(fd_conn *c, const fd_req *r, int status, const char *retry_after, bool close_conn,
               int drip_ms);

void fd_log_request(const fd_conn *c, const fd_req *r);
void fd_log_conn(const fd_conn *c, const char *event);

void fd_close_rst(fd_conn *c);
/* FIN, then reads (and logs) whatever the peer still sends until it closes or 1 s passes. */
void fd_close_fin(fd_conn *c);
/* FIN, then reads and discards until the peer closes or 1 s passes (after a junk request). */
void fd_close_discard(fd_conn *c);
void fd_close_quiet(fd_conn *c, const char *how);

/* --- faultd_serve.c ---------------------------------------------------------------------- */
void fd_serve(fd_conn *c);
/* Parses --script into g_cfg.script; 0 or -1 with a message on stderr. */
int fd_parse_script(const char *text);
void fd_free_script(void);

#endif
