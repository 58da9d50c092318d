/* SPDX-License-Identifier: MIT */
/* faultd's behaviours: what each mode (or --script entry) does with a connection. */
#include "faultd_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_int script_seq;
static char *script_text; /* the entries' strings point into it */

static int parse_int(const char *s, const char *end, int lo, int hi, int *out) {
  if (s == end || end - s > 9)
    return -1;
  int v = 0;
  for (const char *p = s; p < end; p++) {
    if (*p < '0' || *p > '9')
      return -1;
    v = v * 10 + (*p - '0');
  }
  if (v < lo || v > hi)
    return -1;
  *out = v;
  return 0;
}

/* One entry: NNN[:ra=V][:delay=MS] | ok | reset | close | stall | partial | slow:MS. The string
 * is modified in place (options are split at ':'); g_cfg keeps pointing into it. */
static int parse_entry(char *s, fd_action *a) {
  *a = (fd_action){.kind = FD_ACT_RESPOND, .status = 200, .retry_after = NULL, .delay_ms = 0};
  char *opt = strchr(s, ':');
  if (opt)
    *opt++ = '\0';
  if (strcmp(s, "reset") == 0)
    a->kind = FD_ACT_RESET;
  else if (strcmp(s, "close") == 0)
    a->kind = FD_ACT_CLOSE;
  else if (strcmp(s, "stall") == 0)
    a->kind = FD_ACT_STALL;
  else if (strcmp(s, "partial") == 0)
    a->kind = FD_ACT_PARTIAL;
  else if (strcmp(s, "ok") == 0)
    a->status = 200;
  else if (strcmp(s, "slow") == 0) {
    if (!opt || parse_int(opt, opt + strlen(opt), 0, 3600000, &a->delay_ms) != 0)
      return -1;
    return 0;
  } else if (parse_int(s, s + strlen(s), 100, 999, &a->status) != 0)
    return -1;
  while (opt) {
    char *next = strchr(opt, ':');
    if (next)
      *next++ = '\0';
    if (strncmp(opt, "ra=", 3) == 0 && a->kind == FD_ACT_RESPOND)
      a->retry_after = opt + 3;
    else if (strncmp(opt, "delay=", 6) == 0) {
      if (parse_int(opt + 6, opt + strlen(opt), 0, 3600000, &a->delay_ms) != 0)
        return -1;
    } else
      return -1;
    opt = next;
  }
  return 0;
}

int fd_parse_script(const char *text) {
  char *copy = strdup(text);
  if (!copy)
    return -1;
  int n = 1;
  for (const char *p = copy; *p; p++)
    n += *p == ',';
  fd_action *acts = calloc((size_t)n, sizeof *acts);
  if (!acts) {
    free(copy);
    return -1;
  }
  char *save = NULL;
  int i = 0;
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    while (*tok == ' ')
      tok++;
    if (parse_entry(tok, &acts[i]) != 0) {
      fprintf(stderr, "faultd: bad --script entry '%s'\n", tok);
      free(acts);
      free(copy);
      return -1;
    }
    i++;
  }
  if (i == 0) {
    fprintf(stderr, "faultd: empty --script\n");
    free(acts);
    free(copy);
    return -1;
  }
  script_text = copy;
  g_cfg.script = acts;
  g_cfg.script_len = i;
  return 0;
}

void fd_free_script(void) {
  free(g_cfg.script);
  free(script_text);
  g_cfg.script = NULL;
  g_cfg.script_len = 0;
  script_text = NULL;
}

static int mode_delay(void) {
  if (g_cfg.delay_ms >= 0)
    return g_cfg.delay_ms;
  return g_cfg.mode == FD_MODE_SLOW ? 1000 : 0;
}

static fd_action action_for(const fd_conn *c) {
  if (g_cfg.script_len > 0) {
    int k = atomic_fetch_add(&script_seq, 1);
    fd_action a = g_cfg.script[k < g_cfg.script_len ? k : g_cfg.script_len - 1];
    if (a.kind == FD_ACT_RESPOND && !a.retry_after && (a.status < 200 || a.status > 299))
      a.retry_after = g_cfg.retry_after;
    return a;
  }
  fd_action a = {.kind = FD_ACT_RESPOND, .status = 200, .delay_ms = mode_delay()};
  switch (g_cfg.mode) {
  case FD_MODE_READ_THEN_RESET: a.kind = FD_ACT_RESET; break;
  case FD_MODE_READ_THEN_CLOSE: a.kind = FD_ACT_CLOSE; break;
  case FD_MODE_PARTIAL_STALL: a.kind = FD_ACT_PARTIAL; break;
  case FD_MODE_STATUS:
    a.status = g_cfg.status;
    a.retry_after = g_cfg.retry_after;
    break;
  case FD_MODE_KEEPALIVE_CLOSE:
    if (g_cfg.close_when == FD_CLOSE_BEFORE_RESPONSE && c->nreq > g_cfg.close_after)
      a.kind = FD_ACT_CLOSE;
    break;
  default: break;
  }
  return a;
}

/* Holds the connection, reading nothing, until the peer leaves or faultd stops. */
static void stall(fd_conn *c) {
  int rc = fd_wait_hangup(c->fd, -1);
  fd_close_quiet(c, rc == 1 ? "peer" : "stop");
}

static void send_partial(fd_conn *c) {
  static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                             "Content-Length: 1000\r\n\r\n0123456789";
  if (fd_send_all(c->fd, head, sizeof head - 1) != 0) {
    fd_close_quiet(c, "peer");
    return;
  }
  stall(c);
}

/* Runs one action; true if the connection stays open for the next request. */
static bool perform(fd_conn *c, const fd_req *r, const fd_action *a) {
  if (a->delay_ms > 0 && fd_wait_hangup(c->fd, a->delay_ms) != 0) {
    fd_close_quiet(c, "peer");
    return false;
  }
  switch (a->kind) {
  case FD_ACT_RESET: fd_close_rst(c); return false;
  case FD_ACT_CLOSE: fd_close_fin(c); return false;
  case FD_ACT_STALL: stall(c); return false;
  case FD_ACT_PARTIAL: send_partial(c); return false;
  case FD_ACT_RESPOND: break;
  }
  bool ka_close = g_cfg.mode == FD_MODE_KEEPALIVE_CLOSE && g_cfg.script_len == 0;
  bool last = ka_close && g_cfg.close_when != FD_CLOSE_BEFORE_RESPONSE &&
              c->responses + 1 >= g_cfg.close_after;
  /* keepalive_close advertises keep-alive even on the response it closes after: the point is a
   * connection the client believes reusable. */
  if (fd_respond(c, r, a->status, a->retry_after, !r->keep_alive, g_cfg.drip_ms) != 0) {
    fd_close_quiet(c, "peer");
    return false;
  }
  c->responses++;
  if (!r->keep_alive) {
    fd_close_fin(c);
    return false;
  }
  if (last) {
    if (g_cfg.close_when == FD_CLOSE_IDLE && fd_wait_hangup(c->fd, g_cfg.idle_ms) < 0) {
      fd_close_quiet(c, "stop");
      return false;
    }
    fd_close_fin(c);
    return false;
  }
  return true;
}

void fd_serve(fd_conn *c) {
  if (g_cfg.mode == FD_MODE_ACCEPT_NOREAD) {
    stall(c);
    return;
  }
  if (g_cfg.mode == FD_MODE_RESET_BEFORE_READ) {
    int delay = mode_delay();
    if (delay > 0 && fd_wait_hangup(c->fd, delay) != 0) {
      fd_close_quiet(c, "peer");
      return;
    }
    fd_close_rst(c);
    return;
  }
  long long limit = g_cfg.mode == FD_MODE_RESET_MID_UPLOAD ? g_cfg.reset_after : -1;
  for (;;) {
    fd_req r;
    fd_rd rd = fd_read_request(c, &r, limit, true, -1);
    if (rd == FD_RD_NONE) {
      fd_close_quiet(c, "peer");
      return;
    }
    fd_log_request(c, &r);
    if (rd == FD_RD_PARTIAL) {
      fd_close_quiet(c, "peer");
      return;
    }
    if (rd == FD_RD_BAD) {
      fd_respond(c, &r, 400, NULL, true, 0);
      fd_close_discard(c);
      return;
    }
    if (g_cfg.mode == FD_MODE_RESET_MID_UPLOAD) {
      fd_close_rst(c);
      return;
    }
    fd_action a = action_for(c);
    if (!perform(c, &r, &a))
      return;
  }
}
