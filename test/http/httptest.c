/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "httptest.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

void ht_policy(lk_http_policy *p) {
  lk_http_policy_init_default(p);
  p->deadline = LK_MS(1500);
  p->attempt_timeout = LK_MS(300);
  p->connect_timeout = LK_MS(150);
  lk_retry_config rc = p->retry.cfg;
  rc.max_attempts = 3;
  rc.backoff.kind = LK_BACKOFF_FIXED;
  rc.backoff.base = LK_MS(30);
  rc.backoff.max = LK_MS(30);
  rc.backoff.jitter = LK_JITTER_NONE;
  assert_int_equal(lk_retry_policy_init(&p->retry, &rc, NULL), LK_OK);
}

void ht_attempts(lk_http_policy *p, int max_attempts) {
  lk_retry_config rc = p->retry.cfg;
  rc.max_attempts = max_attempts;
  assert_int_equal(lk_retry_policy_init(&p->retry, &rc, NULL), LK_OK);
}

void ht_backoff(lk_http_policy *p, int64_t base, int64_t max) {
  lk_retry_config rc = p->retry.cfg;
  rc.backoff.base = base;
  rc.backoff.max = max;
  assert_int_equal(lk_retry_policy_init(&p->retry, &rc, NULL), LK_OK);
}

void ht_start(faultd_proc *fp, const char *mode, ...) {
  const char *args[32];
  int n = 0;
  va_list ap;
  va_start(ap, mode);
  for (const char *a = va_arg(ap, const char *); a && n < 29; a = va_arg(ap, const char *))
    args[n++] = a;
  va_end(ap);
  args[n++] = "--max-seconds";
  args[n++] = "60";
  args[n] = NULL;
  assert_int_equal(faultd_start(fp, mode, args), 0);
}

static void print(const ht_run *r) {
  char *js = NULL;
  if (lk_http_result_json(r->res, &js, NULL) == LK_OK) {
    printf("# wall %.1f ms: %s\n", (double)r->wall / 1e6, js);
    free(js);
  }
}

void ht_call_url(lk_http_client *c, const char *method, const char *url, const void *body,
                 size_t body_len, const lk_http_policy *pol, ht_run *out) {
  memset(out, 0, sizeof *out);
  lk_http_request *req = lk_http_request_new(method, url);
  assert_non_null(req);
  if (body)
    assert_int_equal(lk_http_request_set_body_ref(req, body, body_len), LK_OK);
  int64_t t = lk_now_ns();
  out->err = lk_http_call(c, req, pol, NULL, &out->res);
  out->wall = lk_now_ns() - t;
  lk_http_request_free(req);
  assert_non_null(out->res);
  assert_int_equal(out->err, lk_http_result_err(out->res));
  out->att = lk_http_result_attempts(out->res, &out->nattempts);
  print(out);
}

void ht_call(faultd_proc *fp, lk_http_client *c, const char *method, const void *body,
             size_t body_len, const lk_http_policy *pol, int expect_reqs, ht_run *out) {
  char url[128];
  assert_int_equal(faultd_url(fp, "/x", url, sizeof url), 0);
  ht_call_url(c, method, url, body, body_len, pol, out);
  if (expect_reqs > 0)
    faultd_wait_requests(fp, expect_reqs, 2000);
  out->nreqs = faultd_requests(fp, out->reqs, HT_MAX_REQS);
  assert_true(out->nreqs >= 0);
}

void ht_free(ht_run *r) {
  lk_http_result_free(r->res);
  r->res = NULL;
}

void ht_all_kinds(const ht_run *r, lk_failure kind) {
  assert_true(r->nattempts > 0);
  for (size_t i = 0; i < r->nattempts; i++) {
    if (r->att[i].failure != kind)
      fail_msg("attempt %zu: %s, expected %s", i + 1, lk_failure_name(r->att[i].failure),
               lk_failure_name(kind));
  }
}

void ht_within_deadline(const ht_run *r, const lk_http_policy *pol) {
  if (r->wall > pol->deadline + LK_MS(50))
    fail_msg("call took %.1f ms, deadline %.1f ms", (double)r->wall / 1e6,
             (double)pol->deadline / 1e6);
}

void ht_server_saw_one_key(const ht_run *r, const lk_http_policy *pol) {
  const char *key = lk_http_result_idempotency_key(r->res);
  for (int i = 0; i < r->nreqs; i++) {
    const faultd_req *q = &r->reqs[i];
    if (key) {
      assert_true(q->has_idempotency_key);
      assert_string_equal(q->idempotency_key, key);
    } else {
      assert_false(q->has_idempotency_key);
    }
    char want[16];
    snprintf(want, sizeof want, "%d", i + 1);
    assert_true(q->has_attempt);
    assert_string_equal(q->attempt, want);
    assert_true(q->has_deadline);
    long long ms = atoll(q->deadline);
    assert_true(ms >= 0 && ms <= pol->attempt_timeout / LK_NS_PER_MS);
  }
}

void *ht_blob(size_t n) {
  unsigned char *b = malloc(n);
  assert_non_null(b);
  for (size_t i = 0; i < n; i++)
    b[i] = (unsigned char)('a' + i % 26);
  return b;
}

/* --- TLS server (openssl s_server) ----------------------------------------------------------- */

void ht_make_cert(const char *dir, const char *name) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "openssl req -x509 -newkey rsa:2048 -nodes -keyout %s/%s-k.pem -out %s/%s-c.pem "
           "-days 1 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1",
           dir, name, dir, name);
  if (system(cmd) != 0)
    fail_msg("openssl req failed (openssl is needed for this test)");
}

/* A free port on 127.0.0.1 (bound and released: openssl s_server cannot report one it picked). */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t al = sizeof a;
  assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
  close(fd);
  return ntohs(a.sin_port);
}

pid_t ht_tls_server_start(const char *crt, const char *key, int *port) {
  return ht_mtls_server_start(crt, key, NULL, port);
}

pid_t ht_mtls_server_start(const char *crt, const char *key, const char *client_ca, int *port) {
  *port = free_port();
  char accept[32];
  snprintf(accept, sizeof accept, "127.0.0.1:%d", *port);
  char *argv[] = {"openssl", "s_server", "-quiet", "-www", "-accept", accept, "-cert", (char *)crt,
                  "-key", (char *)key,
                  /* -Verify asks for a certificate and requires one; -verify_return_error
                   * also ends the session when it does not verify (s_server goes on otherwise) */
                  client_ca ? "-Verify" : NULL, "1", "-verify_return_error", "-CAfile",
                  (char *)client_ca, NULL};
  pid_t pid;
  if (posix_spawnp(&pid, "openssl", NULL, NULL, argv, environ) != 0)
    return -1;
  for (int i = 0; i < 500; i++) { /* bounded: at most ~5 s */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)*port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bool up = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    if (up)
      return pid;
    usleep(10000);
  }
  ht_tls_server_stop(pid);
  return -1;
}

void ht_tls_server_stop(pid_t pid) {
  if (pid <= 0)
    return;
  kill(pid, SIGTERM);
  waitpid(pid, NULL, 0);
}

/* --- raw server ------------------------------------------------------------------------------ */

/* Reads until the blank line that ends a request head; false on EOF, error or 2 s of silence.
 * The head's first bytes go to `keep` (cap bytes, NUL-terminated) when it is not NULL. */
static bool read_head(int fd, char *keep, size_t cap) {
  char buf[4096];
  size_t have = 0;
  for (;;) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 2000) <= 0)
      return false;
    ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
    if (n <= 0)
      return false;
    have += (size_t)n;
    buf[have] = '\0';
    if (strstr(buf, "\r\n\r\n")) {
      if (keep && cap) { /* the first cap - 1 bytes */
        size_t kn = have < cap - 1 ? have : cap - 1;
        memcpy(keep, buf, kn);
        keep[kn] = '\0';
      }
      return true;
    }
    if (have == sizeof buf - 1) /* keep the tail: the blank line may straddle reads */
      memmove(buf, buf + have - 3, 3), have = 3;
  }
}

static void *raw_serve(void *arg) {
  ht_raw *r = arg;
  while (!atomic_load(&r->stop)) {
    struct pollfd p = {r->fd, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0)
      continue;
    int c = accept(r->fd, NULL, NULL);
    if (c < 0)
      continue;
    int i = atomic_load(&r->requests);
    if (read_head(c, i < HT_RAW_HEADS ? r->heads[i] : NULL, sizeof r->heads[0])) {
      atomic_fetch_add(&r->requests, 1);
      size_t off = 0;
      while (off < r->len) {
        ssize_t n = send(c, r->resp + off, r->len - off, MSG_NOSIGNAL);
        if (n <= 0)
          break;
        off += (size_t)n;
      }
    }
    shutdown(c, SHUT_WR);
    /* let the client read everything before the close (no RST for unread request bytes) */
    struct pollfd q = {c, POLLIN, 0};
    char sink[512];
    while (poll(&q, 1, 200) > 0 && read(c, sink, sizeof sink) > 0) {
    }
    close(c);
  }
  return NULL;
}

void ht_raw_start(ht_raw *r, const char *resp, size_t len) {
  memset(r, 0, sizeof *r);
  r->resp = resp;
  r->len = len;
  r->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(r->fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(r->fd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(r->fd, 16), 0);
  socklen_t al = sizeof a;
  assert_int_equal(getsockname(r->fd, (struct sockaddr *)&a, &al), 0);
  r->port = ntohs(a.sin_port);
  assert_int_equal(pthread_create(&r->th, NULL, raw_serve, r), 0);
}

void ht_raw_url(const ht_raw *r, char *buf, size_t cap) {
  snprintf(buf, cap, "http://127.0.0.1:%d/x", r->port);
}

void ht_raw_stop(ht_raw *r) {
  if (r->fd <= 0)
    return;
  atomic_store(&r->stop, true);
  pthread_join(r->th, NULL);
  close(r->fd);
  r->fd = 0;
}

/* --- an external loop on poll() ------------------------------------------------------------- */

static void loop_socket_fn(void *ud, int fd, int events) {
  ht_loop *l = ud;
  for (int i = 0; i < l->n; i++)
    if (l->fd[i] == fd) {
      if (events) {
        l->ev[i] = events;
      } else {
        l->fd[i] = l->fd[--l->n];
        l->ev[i] = l->ev[l->n];
      }
      return;
    }
  if (events) {
    assert_true(l->n < HT_LOOP_FDS);
    l->fd[l->n] = fd;
    l->ev[l->n++] = events;
  }
}

static void loop_timer_fn(void *ud, int64_t delay) {
  ht_loop *l = ud;
  l->timer_at = delay < 0 ? INT64_MAX : lk_now_ns() + delay;
}

static void loop_close_fn(void *ud, int fd) {
  ht_loop *l = ud;
  l->closes++;
  loop_socket_fn(ud, fd, 0);
}

void ht_loop_init_with(ht_loop *l, lk_http_transport tp, bool start_submitted) {
  memset(l, 0, sizeof *l);
  l->timer_at = INT64_MAX;
  lk_http_client_config cc;
  lk_http_client_config_init_default(&cc);
  cc.socket_fn = loop_socket_fn;
  cc.timer_fn = loop_timer_fn;
  cc.close_fn = loop_close_fn;
  cc.loop_ud = l;
  cc.transport = tp;
  cc.start_submitted = start_submitted;
  l->c = lk_http_client_new(&cc);
  assert_non_null(l->c);
}

void ht_loop_init(ht_loop *l, lk_http_transport tp) { ht_loop_init_with(l, tp, false); }

void ht_loop_free(ht_loop *l) {
  lk_http_client_free(l->c);
  l->c = NULL;
}

void ht_loop_once(ht_loop *l, int max_ms) {
  struct pollfd p[HT_LOOP_FDS];
  int n = l->n;
  for (int i = 0; i < n; i++)
    p[i] = (struct pollfd){.fd = l->fd[i],
                           .events = (short)((l->ev[i] & LK_HTTP_POLL_IN ? POLLIN : 0) |
                                             (l->ev[i] & LK_HTTP_POLL_OUT ? POLLOUT : 0))};
  int ms = max_ms;
  if (l->timer_at != INT64_MAX) {
    int64_t d = l->timer_at - lk_now_ns();
    int tm = d <= 0 ? 0 : (int)((d + LK_NS_PER_MS - 1) / LK_NS_PER_MS);
    if (tm < ms)
      ms = tm;
  }
  int rc = poll(p, (nfds_t)n, ms);
  assert_true(rc >= 0 || errno == EINTR);
  for (int i = 0; i < n && rc > 0; i++) {
    if (!p[i].revents)
      continue;
    int ev = (p[i].revents & (POLLIN | POLLHUP | POLLERR) ? LK_HTTP_POLL_IN : 0) |
             (p[i].revents & (POLLOUT | POLLERR) ? LK_HTTP_POLL_OUT : 0);
    assert_int_equal(lk_http_client_socket_action(l->c, p[i].fd, ev), LK_OK);
  }
  if (l->timer_at != INT64_MAX && lk_now_ns() >= l->timer_at) {
    l->timer_at = INT64_MAX;
    assert_int_equal(lk_http_client_timer_action(l->c), LK_OK);
  }
}
