/* SPDX-License-Identifier: MIT */
/* harness.c: process control for the libraryd binary and a small libcurl client. */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef LIBRARYD_BIN
#error "LIBRARYD_BIN must be defined to the daemon's path"
#endif

void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int read_int_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return -1;
  int v = -1;
  if (fscanf(f, "%d", &v) != 1)
    v = -1;
  fclose(f);
  return v;
}

void lib_dump_log(const lib_proc *p) {
  FILE *f = fopen(p->log, "r");
  if (!f)
    return;
  char line[1024];
  fprintf(stderr, "---- libraryd log (%s) ----\n", p->log);
  while (fgets(line, sizeof line, f))
    fputs(line, stderr);
  fprintf(stderr, "---- end of log ----\n");
  fclose(f);
}

int lib_log_count(const lib_proc *p, const char *needle) {
  FILE *f = fopen(p->log, "r");
  if (!f)
    return -1;
  char line[2048];
  int n = 0;
  while (fgets(line, sizeof line, f))
    n += strstr(line, needle) != NULL;
  fclose(f);
  return n;
}

static int spawn(lib_proc *p, const char *const *extra) {
  char port_file[400], admin_file[400];
  snprintf(port_file, sizeof port_file, "%s/port", p->dir);
  snprintf(admin_file, sizeof admin_file, "%s/admin_port", p->dir);
  unlink(port_file);
  unlink(admin_file);
  const char *argv[96];
  int n = 0;
  argv[n++] = LIBRARYD_BIN;
  const char *fixed[] = {"--port",
                         "0",
                         "--port-file",
                         port_file,
                         "--admin-port",
                         "0",
                         "--admin-port-file",
                         admin_file,
                         p->store[0] ? "--store" : "--db",
                         p->store[0] ? p->store : p->db,
                         "--threads",
                         "2",
                         "--drain-timeout",
                         "5s"};
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
    argv[n++] = fixed[i];
  for (int i = 0; extra && extra[i] && n < 94; i++)
    argv[n++] = extra[i];
  argv[n] = NULL;
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    /* Dies with the test (a failed assertion skips the teardown), and holds none of the test's
     * descriptors: an orphaned libraryd with ctest's stdout open would keep ctest waiting. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = open(p->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  p->pid = pid;
  double until = now_s() + 10.0;
  while (now_s() < until) {
    int port = read_int_file(port_file), admin = read_int_file(admin_file);
    if (port > 0 && admin > 0) {
      p->port = port;
      p->admin_port = admin;
      return 0;
    }
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      p->pid = 0;
      lib_dump_log(p);
      return -1;
    }
    sleep_ms(5);
  }
  lib_dump_log(p);
  lib_kill9(p);
  return -1;
}

static int start_in_new_dir(lib_proc *p, const char *url, const char *const *extra) {
  memset(p, 0, sizeof *p);
  if (url)
    snprintf(p->store, sizeof p->store, "%s", url);
  const char *tmp = getenv("TMPDIR");
  snprintf(p->dir, sizeof p->dir, "%s/libraryd-test-XXXXXX", tmp ? tmp : "/tmp");
  if (!mkdtemp(p->dir))
    return -1;
  snprintf(p->db, sizeof p->db, "%s/library.db", p->dir);
  snprintf(p->log, sizeof p->log, "%s/libraryd.log", p->dir);
  return spawn(p, extra);
}

int lib_start(lib_proc *p, const char *const *extra) { return start_in_new_dir(p, NULL, extra); }

int lib_start_store(lib_proc *p, const char *url, const char *const *extra) {
  return start_in_new_dir(p, url, extra);
}

int lib_restart(lib_proc *p, const char *const *extra) { return spawn(p, extra); }

int lib_run_args(const char *const *args) {
  const char *argv[64];
  int n = 0;
  argv[n++] = LIBRARYD_BIN;
  for (int i = 0; args && args[i] && n < 63; i++)
    argv[n++] = args[i];
  argv[n] = NULL;
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = open("/dev/null", O_WRONLY);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  double until = now_s() + 10.0;
  int st;
  while (now_s() < until) {
    if (waitpid(pid, &st, WNOHANG) == pid)
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    sleep_ms(5);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  return -1;
}

int lib_run_capture(const char *const *args, bool unprivileged, char *out, size_t cap) {
  const char *tmp = getenv("TMPDIR");
  char path[256];
  snprintf(path, sizeof path, "%s/libraryd-capture-XXXXXX", tmp ? tmp : "/tmp");
  int cfd = mkstemp(path);
  if (cfd < 0)
    return -1;
  const char *argv[64];
  int n = 0;
  argv[n++] = LIBRARYD_BIN;
  for (int i = 0; args && args[i] && n < 63; i++)
    argv[n++] = args[i];
  argv[n] = NULL;
  pid_t pid = fork();
  if (pid < 0) {
    close(cfd);
    unlink(path);
    return -1;
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(cfd, 1);
    dup2(cfd, 2);
    close(cfd);
    if (unprivileged && getuid() == 0 &&
        (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0))
      _exit(126);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  int code = -1, st;
  double until = now_s() + 10.0;
  while (now_s() < until) {
    if (waitpid(pid, &st, WNOHANG) == pid) {
      code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      break;
    }
    sleep_ms(5);
  }
  if (code < 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
  }
  ssize_t got = pread(cfd, out, cap - 1, 0);
  out[got > 0 ? got : 0] = '\0';
  close(cfd);
  unlink(path);
  return code;
}

int lib_stop_sig(lib_proc *p, int sig, int timeout_ms) {
  if (p->pid <= 0)
    return -1;
  kill(p->pid, sig);
  double until = now_s() + timeout_ms / 1000.0;
  int st;
  while (now_s() < until) {
    pid_t r = waitpid(p->pid, &st, WNOHANG);
    if (r == p->pid) {
      p->pid = 0;
      int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      if (code != 0)
        lib_dump_log(p);
      return code;
    }
    sleep_ms(5);
  }
  lib_dump_log(p);
  lib_kill9(p);
  return -1;
}

int lib_stop(lib_proc *p) { return lib_stop_sig(p, SIGTERM, 20000); }

void lib_kill9(lib_proc *p) {
  if (p->pid <= 0)
    return;
  kill(p->pid, SIGKILL);
  int st;
  waitpid(p->pid, &st, 0);
  p->pid = 0;
}

void lib_cleanup(lib_proc *p) {
  lib_kill9(p);
  if (!p->dir[0])
    return;
  const char *names[] = {"library.db",   "library.db-wal", "library.db-shm",
                         "libraryd.log", "port",           "admin_port"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char path[400];
    snprintf(path, sizeof path, "%s/%s", p->dir, names[i]);
    unlink(path);
  }
  rmdir(p->dir);
  p->dir[0] = '\0';
}

/* --- HTTP ------------------------------------------------------------------------------------ */

typedef struct buf {
  char *p;
  size_t n;
} buf;

static size_t on_body(char *d, size_t sz, size_t nm, void *arg) {
  buf *b = arg;
  size_t n = sz * nm;
  char *q = realloc(b->p, b->n + n + 1);
  if (!q)
    return 0;
  memcpy(q + b->n, d, n);
  b->p = q;
  b->n += n;
  b->p[b->n] = '\0';
  return n;
}

static size_t on_header(char *d, size_t sz, size_t nm, void *arg) {
  http_res *r = arg;
  size_t n = sz * nm;
  if (r->hlen + n < sizeof r->headers) {
    memcpy(r->headers + r->hlen, d, n);
    r->hlen += n;
    r->headers[r->hlen] = '\0';
  }
  return n;
}

typedef struct upload {
  const char *p;
  size_t left;
} upload;

static size_t on_read(char *d, size_t sz, size_t nm, void *arg) {
  upload *u = arg;
  size_t n = sz * nm < u->left ? sz * nm : u->left;
  memcpy(d, u->p, n);
  u->p += n;
  u->left -= n;
  return n;
}

int http_do(int port, const http_req *rq, http_res *res) {
  memset(res, 0, sizeof *res);
  CURL *c = curl_easy_init();
  if (!c) {
    res->cc = CURLE_FAILED_INIT;
    return -1;
  }
  char url[2200];
  snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, rq->path);
  buf b = {NULL, 0};
  struct curl_slist *hl = NULL;
  bool has_ctype = false;
  for (int i = 0; rq->headers && rq->headers[i]; i++) {
    hl = curl_slist_append(hl, rq->headers[i]);
    has_ctype |= !strncasecmp(rq->headers[i], "Content-Type", 12) &&
                 (rq->headers[i][12] == ':' || rq->headers[i][12] == ';');
  }
  /* libraryd reads bodies as JSON and refuses other declared types (415); libcurl would label a
   * body application/x-www-form-urlencoded. "Content-Type:" in headers sends none,
   * "Content-Type;" an empty one. */
  if (rq->body && !has_ctype && strcmp(rq->method ? rq->method : "GET", "HEAD"))
    hl = curl_slist_append(hl, "Content-Type: application/json");
  /* No "Expect: 100-continue" round trip; it would hide what the server does with the body. */
  hl = curl_slist_append(hl, "Expect:");
  const char *method = rq->method ? rq->method : "GET";
  size_t blen = rq->body ? (rq->body_len ? rq->body_len : strlen(rq->body)) : 0;
  upload up = {rq->body, blen};
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, rq->timeout_ms > 0 ? rq->timeout_ms : 10000L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, res);
  curl_easy_setopt(c, CURLOPT_FORBID_REUSE, 1L);
  if (!strcmp(method, "HEAD")) {
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else if (rq->body && rq->chunked) {
    hl = curl_slist_append(hl, "Transfer-Encoding: chunked");
    curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(c, CURLOPT_READDATA, &up);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  } else if (rq->body) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, rq->body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)blen);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  } else if (strcmp(method, "GET")) {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (!strcmp(method, "POST") || !strcmp(method, "PUT")) {
      curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
      curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, 0L);
    }
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
  double t0 = now_s();
  res->cc = curl_easy_perform(c);
  res->secs = now_s() - t0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &res->status);
  res->body = b.p ? b.p : calloc(1, 1);
  res->len = b.n;
  curl_slist_free_all(hl);
  curl_easy_cleanup(c);
  return res->cc == CURLE_OK ? 0 : -1;
}

int http_get(int port, const char *path, http_res *res) {
  http_req rq = {.path = path};
  return http_do(port, &rq, res);
}

int http_send(int port, const char *method, const char *path, const char *const *headers,
              const char *body, http_res *res) {
  http_req rq = {.method = method, .path = path, .headers = headers, .body = body};
  return http_do(port, &rq, res);
}

void http_res_free(http_res *res) {
  free(res->body);
  res->body = NULL;
}

const char *http_header(const http_res *res, const char *name, char *out, size_t cap) {
  size_t nl = strlen(name);
  const char *p = res->headers;
  while (*p) {
    const char *eol = strstr(p, "\r\n");
    size_t ll = eol ? (size_t)(eol - p) : strlen(p);
    if (ll > nl && !strncasecmp(p, name, nl) && p[nl] == ':') {
      const char *v = p + nl + 1;
      while (*v == ' ')
        v++;
      size_t vl = (size_t)(p + ll - v);
      if (vl >= cap)
        vl = cap - 1;
      memcpy(out, v, vl);
      out[vl] = '\0';
      return out;
    }
    p += ll + (eol ? 2 : 0);
  }
  return NULL;
}

json_t *http_json(const http_res *res) {
  return res->body ? json_loadb(res->body, res->len, 0, NULL) : NULL;
}

int64_t lib_stock(int port, int64_t book) {
  char path[64];
  snprintf(path, sizeof path, "/books/%lld", (long long)book);
  http_res r;
  http_get(port, path, &r);
  json_t *j = r.status == 200 ? http_json(&r) : NULL;
  int64_t stock = j ? (int64_t)json_integer_value(json_object_get(j, "stock")) : -1;
  json_decref(j);
  http_res_free(&r);
  return stock;
}

int64_t lib_create_book(int port, int64_t stock) {
  char body[256];
  snprintf(body, sizeof body, "{\"title\":\"Test book\",\"author\":\"Tester\",\"stock\":%lld}",
           (long long)stock);
  http_res r;
  http_send(port, "POST", "/books", NULL, body, &r);
  json_t *j = r.status == 201 ? http_json(&r) : NULL;
  int64_t id = j ? (int64_t)json_integer_value(json_object_get(j, "id")) : -1;
  json_decref(j);
  http_res_free(&r);
  return id;
}

json_t *lib_stats(const lib_proc *p) {
  http_res r;
  http_get(p->admin_port, "/admin/stats", &r);
  json_t *j = r.status == 200 ? http_json(&r) : NULL;
  http_res_free(&r);
  return j;
}
