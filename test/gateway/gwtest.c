/* SPDX-License-Identifier: MIT */
#include "gwtest.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <arpa/inet.h>

extern char **environ;

int64_t gw_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void gw_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void make_dir(gw_proc *g) {
  if (g->dir[0])
    return;
  const char *tmp = getenv("TMPDIR");
  snprintf(g->dir, sizeof g->dir, "%s/gwtest-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  assert_non_null(mkdtemp(g->dir));
  snprintf(g->cfg_path, sizeof g->cfg_path, "%s/gw.ini", g->dir);
  snprintf(g->port_path, sizeof g->port_path, "%s/ports", g->dir);
  snprintf(g->access_path, sizeof g->access_path, "%s/access.log", g->dir);
  snprintf(g->err_path, sizeof g->err_path, "%s/stderr", g->dir);
}

static void write_config(gw_proc *g, const char *cfg, bool inject);

void gw_write_config(gw_proc *g, const char *cfg) { write_config(g, cfg, true); }

void gw_write_config_exact(gw_proc *g, const char *cfg) { write_config(g, cfg, false); }

static void write_config(gw_proc *g, const char *cfg, bool inject) {
  make_dir(g);
  char tmp[400];
  snprintf(tmp, sizeof tmp, "%s.tmp", g->cfg_path);
  FILE *f = fopen(tmp, "w");
  assert_non_null(f);
  /* LINKD_GW_UPSTREAM_CLIENT=curl|native: the same test under the other upstream transport
   * (CMake registers the transport-facing suites twice); a [listen] key of its own */
  const char *uc = inject ? getenv("LINKD_GW_UPSTREAM_CLIENT") : NULL;
  if (uc && *uc) {
    const char *ls = strstr(cfg, "[listen]\n");
    if (ls) {
      fwrite(cfg, 1, (size_t)(ls - cfg) + 9, f);
      cfg = ls + 9;
    } else {
      fputs("[listen]\n", f);
    }
    fprintf(f, "upstream-client = %s\n", uc);
  }
  for (const char *p = cfg; *p;) {
    const char *m = strstr(p, "%ACCESS%");
    if (!m) {
      fputs(p, f);
      break;
    }
    fwrite(p, 1, (size_t)(m - p), f);
    fputs(g->access_path, f);
    p = m + 8;
  }
  assert_int_equal(fclose(f), 0);
  assert_int_equal(rename(tmp, g->cfg_path), 0); /* a reload never reads half a file */
}

void gw_start(gw_proc *g, const char *cfg) { gw_start_threads(g, cfg, 2); }

void gw_start_threads(gw_proc *g, const char *cfg, int threads) {
  gw_start_args(g, cfg, threads, NULL);
}

void gw_start_args(gw_proc *g, const char *cfg, int threads, const char *const *extra) {
  memset(g, 0, sizeof *g);
  gw_write_config(g, cfg);
  const char *bin = getenv("LINKD_PATH");
  if (!bin || !*bin)
    bin = LINKD_PATH;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, g->err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  char nthreads[16];
  snprintf(nthreads, sizeof nthreads, "%d", threads);
  char *argv[18] = {(char *)bin,  "serve",     "-c",     g->cfg_path, "--port-file",
                    g->port_path, "--threads", nthreads, NULL};
  for (int i = 0; extra && extra[i]; i++) {
    assert_true(i < 8);
    argv[8 + i] = (char *)extra[i];
    argv[9 + i] = NULL;
  }
  int rc = posix_spawn(&g->pid, bin, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  assert_int_equal(rc, 0);
  int64_t end = gw_now_ms() + 5000;
  while (gw_now_ms() < end) {
    FILE *f = fopen(g->port_path, "r");
    if (f) {
      int n = fscanf(f, "%d %d", &g->port, &g->admin_port);
      fclose(f);
      if (n == 2 && g->port > 0)
        return;
    }
    int st;
    if (waitpid(g->pid, &st, WNOHANG) == g->pid) {
      fprintf(stderr, "linkd serve exited at start: %s\n", gw_stderr(g));
      g->pid = 0;
      fail_msg("linkd serve did not start");
    }
    gw_sleep_ms(10);
  }
  fail_msg("linkd serve did not write its port file within 5 s: %s", gw_stderr(g));
}

const char *gw_stderr(const gw_proc *g) {
  static char buf[65536];
  buf[0] = '\0';
  FILE *f = fopen(g->err_path, "r");
  if (f) {
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
  }
  return buf;
}

const char *gw_access(const gw_proc *g) {
  static char buf[1 << 20];
  buf[0] = '\0';
  FILE *f = fopen(g->access_path, "r");
  if (f) {
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
  }
  return buf;
}

int gw_access_lines(const gw_proc *g) {
  const char *s = gw_access(g);
  int n = 0;
  for (; *s; s++)
    n += *s == '\n';
  return n;
}

int gw_stop(gw_proc *g, int wait_ms) {
  int code = g->pid > 0 ? -1 : 0;
  bool ran = g->pid > 0;
  if (ran) {
    kill(g->pid, SIGTERM);
    int64_t end = gw_now_ms() + wait_ms;
    int st;
    for (;;) {
      pid_t w = waitpid(g->pid, &st, WNOHANG);
      if (w == g->pid) {
        code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        break;
      }
      if (gw_now_ms() >= end) {
        kill(g->pid, SIGKILL);
        waitpid(g->pid, &st, 0);
        code = -1;
        break;
      }
      gw_sleep_ms(5);
    }
    g->pid = 0;
  }
  if (ran && code != 0)
    fprintf(stderr, "linkd serve stderr:\n%s\n", gw_stderr(g));
  if (g->dir[0]) {
    const char *files[] = {g->cfg_path, g->port_path, g->access_path, g->err_path};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
      unlink(files[i]);
    rmdir(g->dir);
    g->dir[0] = '\0';
  }
  return code;
}

int gw_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

void gw_send(int fd, const void *data, size_t len) {
  const char *p = data;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    assert_true(n > 0);
    p += n;
    len -= (size_t)n;
  }
}

void gw_send_str(int fd, const char *s) { gw_send(fd, s, strlen(s)); }

/* Per-descriptor carry-over: bytes read past one response (the next pipelined one). */
static struct {
  int fd;
  char buf[65536];
  size_t len;
} carry[8];

static size_t *carry_of(int fd, char **buf) {
  for (int i = 0; i < 8; i++)
    if (carry[i].fd == fd && carry[i].len > 0) {
      *buf = carry[i].buf;
      return &carry[i].len;
    }
  return NULL;
}

static void carry_put(int fd, const char *data, size_t len) {
  for (int i = 0; i < 8; i++)
    if (carry[i].len == 0 || carry[i].fd == fd) {
      carry[i].fd = fd;
      assert_true(carry[i].len + len <= sizeof carry[i].buf);
      memcpy(carry[i].buf + carry[i].len, data, len);
      carry[i].len += len;
      return;
    }
  fail_msg("too many pipelined connections in one test");
}

static bool head_only; /* the response being read answers a HEAD: no body whatever it says */

int gw_read_head(int fd, gw_resp *r, int timeout_ms) {
  head_only = true;
  int rc = gw_read(fd, r, timeout_ms, NULL);
  head_only = false;
  return rc;
}

int gw_read(int fd, gw_resp *r, int timeout_ms, bool *timed_out) {
  memset(r, 0, sizeof *r);
  if (timed_out)
    *timed_out = false;
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  assert_non_null(buf);
  char *cb;
  size_t *cl = carry_of(fd, &cb);
  if (cl) {
    memcpy(buf, cb, *cl);
    len = *cl;
    *cl = 0;
  }
  int64_t end = gw_now_ms() + timeout_ms;
  size_t head_end = 0, want = SIZE_MAX;
  for (;;) {
    if (!head_end) {
      char *e = len ? memmem(buf, len, "\r\n\r\n", 4) : NULL;
      if (e) {
        head_end = (size_t)(e - buf) + 4;
        size_t hl = head_end < sizeof r->head ? head_end : sizeof r->head - 1;
        memcpy(r->head, buf, hl);
        r->head[hl] = '\0';
        sscanf(r->head, "HTTP/1.%*d %d", &r->status);
        char v[64];
        if (head_only || r->status == 100 || r->status == 204 || r->status == 304)
          want = head_end;
        else if (gw_header(r, "Content-Length", v, sizeof v))
          want = head_end + strtoull(v, NULL, 10);
        const char *c = gw_header(r, "Connection", v, sizeof v);
        if (c && strcasecmp(c, "close") == 0)
          r->closed = true;
      }
    }
    if (head_end && len >= want) {
      if (len > want)
        carry_put(fd, buf + want, len - want);
      r->body_len = want - head_end;
      r->body = malloc(r->body_len + 1);
      memcpy(r->body, buf + head_end, r->body_len);
      r->body[r->body_len] = '\0';
      free(buf);
      return 0;
    }
    int left = (int)(end - gw_now_ms());
    if (left <= 0) {
      if (timed_out)
        *timed_out = true;
      free(buf);
      return -1;
    }
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, left) <= 0)
      continue;
    if (len == cap) {
      cap *= 2;
      buf = realloc(buf, cap);
      assert_non_null(buf);
    }
    ssize_t n = recv(fd, buf + len, cap - len, 0);
    if (n <= 0) {
      if (n < 0 && errno == EINTR)
        continue;
      free(buf);
      r->closed = true;
      return -1;
    }
    len += (size_t)n;
  }
}

const char *gw_header(const gw_resp *r, const char *name, char *buf, size_t cap) {
  size_t n = strlen(name);
  for (const char *p = strstr(r->head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n")) {
    const char *line = p + 2;
    if (strncasecmp(line, name, n) == 0 && line[n] == ':') {
      const char *v = line + n + 1;
      while (*v == ' ')
        v++;
      const char *e = strstr(v, "\r\n");
      size_t l = e ? (size_t)(e - v) : strlen(v);
      if (l >= cap)
        l = cap - 1;
      memcpy(buf, v, l);
      buf[l] = '\0';
      return buf;
    }
  }
  return NULL;
}

void gw_resp_free(gw_resp *r) {
  free(r->body);
  r->body = NULL;
}

bool gw_closed(int fd, int timeout_ms) {
  int64_t end = gw_now_ms() + timeout_ms;
  char b[4096];
  for (;;) {
    int left = (int)(end - gw_now_ms());
    if (left <= 0)
      return false;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, left) <= 0)
      continue;
    ssize_t n = recv(fd, b, sizeof b, 0);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
      return true;
  }
}

void gw_request(int port, const char *method, const char *path, const char *extra,
                const char *body, gw_resp *r) {
  int fd = gw_connect(port);
  char head[4096];
  int n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: gw.test\r\n%s", method, path,
                   extra ? extra : "");
  if (body)
    n += snprintf(head + n, sizeof head - (size_t)n, "Content-Length: %zu\r\n", strlen(body));
  snprintf(head + n, sizeof head - (size_t)n, "\r\n");
  gw_send_str(fd, head);
  if (body)
    gw_send_str(fd, body);
  bool to = false;
  int rc = gw_read(fd, r, 5000, &to);
  close(fd);
  if (rc != 0)
    fail_msg("%s %s: no response (%s)", method, path, to ? "timed out" : "closed");
}

long gw_rss_kib(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%ld/status", (long)pid);
  FILE *f = fopen(path, "r");
  if (!f)
    return -1;
  long v = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld kB", &v) == 1)
      break;
  fclose(f);
  return v;
}

pid_t gw_fork_server(void (*serve)(int fd), int conns, int seconds, int *port) {
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(ls >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(ls, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(ls, 16), 0);
  socklen_t al = sizeof a;
  assert_int_equal(getsockname(ls, (struct sockaddr *)&a, &al), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    alarm((unsigned)seconds); /* bounded whatever happens */
    for (int i = 0; conns == 0 || i < conns; i++) {
      int c = accept(ls, NULL, NULL);
      if (c < 0)
        _exit(1);
      serve(c);
      close(c);
    }
    _exit(0);
  }
  close(ls);
  *port = ntohs(a.sin_port);
  return pid;
}

void gw_fork_server_stop(pid_t pid) {
  if (pid <= 0)
    return;
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

char *gw_scrape(const gw_proc *g) {
  gw_resp r;
  gw_request(g->admin_port, "GET", "/metrics", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  char ct[96];
  assert_non_null(gw_header(&r, "Content-Type", ct, sizeof ct));
  assert_non_null(strstr(ct, "text/plain; version=0.0.4"));
  char path[400], cmd[600];
  snprintf(path, sizeof path, "%s/metrics.txt", g->dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  assert_int_equal(fwrite(r.body, 1, r.body_len, f), r.body_len);
  fclose(f);
  snprintf(cmd, sizeof cmd, "promtool check metrics < %s", path);
  int rc = system(cmd);
  if (rc != 0)
    fprintf(stderr, "--- exposition promtool refused ---\n%s\n", r.body);
  assert_int_equal(rc, 0);
  unlink(path);
  char *body = strdup(r.body);
  assert_non_null(body);
  gw_resp_free(&r);
  return body;
}

bool gw_sample(const char *text, const char *series, double *v) {
  size_t n = strlen(series);
  for (const char *p = text; (p = strstr(p, series)); p += n)
    if ((p == text || p[-1] == '\n') && p[n] == ' ') {
      *v = strtod(p + n + 1, NULL);
      return true;
    }
  return false;
}

/* The rest of the line "# KIND NAME " + ..., or NULL. */
static const char *meta_line(const char *text, const char *kind, const char *name, size_t *len) {
  char head[256];
  int n = snprintf(head, sizeof head, "# %s %s ", kind, name);
  assert_true(n > 0 && (size_t)n < sizeof head);
  for (const char *p = text; (p = strstr(p, head)); p += n)
    if (p == text || p[-1] == '\n') {
      const char *v = p + n, *eol = strchr(v, '\n');
      *len = eol ? (size_t)(eol - v) : strlen(v);
      return v;
    }
  return NULL;
}

const char *gw_metric_type(const char *text, const char *name) {
  static char type[32];
  size_t len;
  const char *v = meta_line(text, "TYPE", name, &len);
  if (!v || len >= sizeof type)
    return NULL;
  memcpy(type, v, len);
  type[len] = '\0';
  return type;
}

bool gw_metric_help(const char *text, const char *name) {
  size_t len;
  return meta_line(text, "HELP", name, &len) && len > 0;
}
