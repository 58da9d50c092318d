/* SPDX-License-Identifier: MIT */
/* Spawns faultd and reads its JSON-lines logs (see faultd_client.h). */
#include "faultd_client.h"

#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef FAULTD_PATH
#define FAULTD_PATH "faultd" /* searched in PATH */
#endif

#define FAULTD_START_TIMEOUT_MS 5000
#define FAULTD_STOP_TIMEOUT_MS 5000

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* The whole file as a NUL-terminated string (caller frees), or NULL. */
static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  while (buf) {
    size_t r = fread(buf + n, 1, cap - n - 1, f);
    n += r;
    if (n + 1 < cap)
      break;
    char *bigger = realloc(buf, cap * 2);
    if (!bigger) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = bigger;
    cap *= 2;
  }
  fclose(f);
  if (buf) {
    buf[n] = '\0';
    if (len)
      *len = n;
  }
  return buf;
}

static int read_port(const char *path) {
  char *s = slurp(path, NULL);
  if (!s)
    return -1;
  char *end;
  long v = strtol(s, &end, 10);
  int port = (end != s && *end == '\n' && v > 0 && v < 65536) ? (int)v : -1;
  free(s);
  return port;
}

static int wait_child(pid_t pid, int timeout_ms, int *status) {
  int64_t end = now_ms() + timeout_ms;
  for (;;) {
    pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid)
      return 0;
    if (r < 0 && errno != EINTR)
      return -1;
    if (now_ms() >= end)
      return 1;
    sleep_ms(5);
  }
}

static void remove_files(faultd_proc *p) {
  if (!p->dir[0])
    return;
  char tmp[320];
  snprintf(tmp, sizeof tmp, "%s.tmp", p->port_path);
  unlink(tmp);
  unlink(p->port_path);
  unlink(p->log_path);
  unlink(p->conn_log_path);
  rmdir(p->dir);
  p->dir[0] = '\0';
}

int faultd_start(faultd_proc *p, const char *mode, const char *const *extra_args) {
  memset(p, 0, sizeof *p);
  p->exit_status = -1;
  const char *tmpdir = getenv("TMPDIR");
  if (!tmpdir || !*tmpdir)
    tmpdir = "/tmp";
  if (snprintf(p->dir, sizeof p->dir, "%s/faultd-XXXXXX", tmpdir) >= (int)sizeof p->dir ||
      !mkdtemp(p->dir)) {
    fprintf(stderr, "faultd_start: mkdtemp in %s: %s\n", tmpdir, strerror(errno));
    p->dir[0] = '\0';
    return -1;
  }
  snprintf(p->log_path, sizeof p->log_path, "%s/requests.jsonl", p->dir);
  snprintf(p->conn_log_path, sizeof p->conn_log_path, "%s/conns.jsonl", p->dir);
  snprintf(p->port_path, sizeof p->port_path, "%s/port", p->dir);

  const char *bin = getenv("FAULTD_PATH");
  if (!bin || !*bin)
    bin = FAULTD_PATH;
  char ppid[24];
  snprintf(ppid, sizeof ppid, "%ld", (long)getpid());
  const char *fixed[] = {bin,     "--mode",    mode,         "--port-file",    p->port_path,
                         "--log", p->log_path, "--conn-log", p->conn_log_path, "--parent-pid",
                         ppid};
  size_t nfixed = sizeof fixed / sizeof fixed[0], nextra = 0;
  while (extra_args && extra_args[nextra])
    nextra++;
  char **argv = calloc(nfixed + nextra + 1, sizeof *argv);
  if (!argv) {
    remove_files(p);
    return -1;
  }
  for (size_t i = 0; i < nfixed; i++)
    argv[i] = (char *)fixed[i];
  for (size_t i = 0; i < nextra; i++)
    argv[nfixed + i] = (char *)extra_args[i];
  pid_t pid;
  int rc = posix_spawnp(&pid, bin, NULL, NULL, argv, environ);
  free(argv);
  if (rc != 0) {
    fprintf(stderr, "faultd_start: cannot run %s: %s\n", bin, strerror(rc));
    remove_files(p);
    return -1;
  }
  p->pid = pid;
  int64_t end = now_ms() + FAULTD_START_TIMEOUT_MS;
  for (;;) {
    int port = read_port(p->port_path);
    if (port > 0) {
      p->port = port;
      return 0;
    }
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      port = read_port(p->port_path);
      if (port > 0) { /* it started and already left (e.g. --parent-pid): not a failure */
        p->port = port;
        p->pid = 0;
        p->exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        return 0;
      }
      fprintf(stderr, "faultd_start: faultd --mode %s exited (status %d) before listening\n", mode,
              WIFEXITED(status) ? WEXITSTATUS(status) : -1);
      p->pid = 0;
      p->exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      remove_files(p);
      return -1;
    }
    if (now_ms() >= end)
      break;
    sleep_ms(5);
  }
  fprintf(stderr, "faultd_start: no port from faultd --mode %s within %d ms\n", mode,
          FAULTD_START_TIMEOUT_MS);
  faultd_stop(p);
  return -1;
}

int faultd_port(const faultd_proc *p) { return p->port; }

int faultd_url(const faultd_proc *p, const char *path, char *buf, size_t cap) {
  int n = snprintf(buf, cap, "http://127.0.0.1:%d%s", p->port, path ? path : "");
  return n < 0 || (size_t)n >= cap ? -1 : 0;
}

void faultd_stop(faultd_proc *p) {
  if (p->pid > 0) {
    int status = 0;
    kill(p->pid, SIGTERM);
    int rc = wait_child(p->pid, FAULTD_STOP_TIMEOUT_MS, &status);
    if (rc == 1) {
      fprintf(stderr, "faultd_stop: faultd ignored SIGTERM for %d ms; killing it\n",
              FAULTD_STOP_TIMEOUT_MS);
      kill(p->pid, SIGKILL);
      while (waitpid(p->pid, &status, 0) < 0 && errno == EINTR) {
      }
      rc = 0;
    }
    if (rc == 0)
      p->exit_status = WIFEXITED(status)     ? WEXITSTATUS(status)
                       : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                             : -1;
    p->pid = 0;
  }
  remove_files(p);
}

/* --- a reader for faultd's flat JSON objects (strings, integers, booleans, null) ------------ */

static const char *skip_ws(const char *s, const char *e) {
  while (s < e && (*s == ' ' || *s == '\t' || *s == '\r'))
    s++;
  return s;
}

static int hexval(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

/* s points at '"'. Copies the decoded string (truncated to cap) and returns the position after
 * the closing quote, or NULL. faultd writes bytes as \u00XX, so those decode to the raw byte. */
static const char *parse_string(const char *s, const char *e, char *out, size_t cap) {
  size_t n = 0;
  s++;
  while (s < e && *s != '"') {
    char ch = *s++;
    if (ch == '\\') {
      if (s >= e)
        return NULL;
      char esc = *s++;
      switch (esc) {
      case 'n': ch = '\n'; break;
      case 't': ch = '\t'; break;
      case 'r': ch = '\r'; break;
      case 'b': ch = '\b'; break;
      case 'f': ch = '\f'; break;
      case 'u': {
        if (e - s < 4)
          return NULL;
        int v = 0;
        for (int i = 0; i < 4; i++) {
          int h = hexval(s[i]);
          if (h < 0)
            return NULL;
          v = v * 16 + h;
        }
        s += 4;
        ch = (char)(v & 0xff);
        break;
      }
      default: ch = esc; break;
      }
    }
    if (out && n + 1 < cap)
      out[n++] = ch;
  }
  if (s >= e)
    return NULL;
  if (out && cap > 0)
    out[n] = '\0';
  return s + 1;
}

static const char *parse_int(const char *s, const char *e, long long *out) {
  char buf[32];
  size_t n = 0;
  while (s + n < e && n + 1 < sizeof buf && (s[n] == '-' || (s[n] >= '0' && s[n] <= '9'))) {
    buf[n] = s[n];
    n++;
  }
  if (n == 0)
    return NULL;
  buf[n] = '\0';
  *out = strtoll(buf, NULL, 10);
  return s + n;
}

/* The faultd_req field for a string key, or NULL for other keys. */
static char *string_field(faultd_req *r, const char *key, size_t *cap, bool **present) {
  *present = NULL;
  if (strcmp(key, "method") == 0) {
    *cap = sizeof r->method;
    return r->method;
  }
  if (strcmp(key, "path") == 0) {
    *cap = sizeof r->path;
    return r->path;
  }
  if (strcmp(key, "idempotency_key") == 0) {
    *cap = sizeof r->idempotency_key;
    *present = &r->has_idempotency_key;
    return r->idempotency_key;
  }
  if (strcmp(key, "attempt") == 0) {
    *cap = sizeof r->attempt;
    *present = &r->has_attempt;
    return r->attempt;
  }
  if (strcmp(key, "deadline") == 0) {
    *cap = sizeof r->deadline;
    *present = &r->has_deadline;
    return r->deadline;
  }
  *cap = 0;
  return NULL;
}

static int parse_line(const char *s, const char *e, faultd_req *r) {
  memset(r, 0, sizeof *r);
  s = skip_ws(s, e);
  if (s >= e || *s++ != '{')
    return -1;
  for (;;) {
    s = skip_ws(s, e);
    if (s < e && *s == '}')
      return 0;
    char key[32];
    if (s >= e || *s != '"' || !(s = parse_string(s, e, key, sizeof key)))
      return -1;
    s = skip_ws(s, e);
    if (s >= e || *s++ != ':')
      return -1;
    s = skip_ws(s, e);
    if (s >= e)
      return -1;
    size_t cap = 0;
    bool *present = NULL;
    char *str = string_field(r, key, &cap, &present);
    if (*s == '"') {
      if (!(s = parse_string(s, e, str, cap)))
        return -1;
      if (present)
        *present = true;
    } else if (e - s >= 4 && memcmp(s, "null", 4) == 0) {
      s += 4;
    } else if (e - s >= 4 && memcmp(s, "true", 4) == 0) {
      if (strcmp(key, "complete") == 0)
        r->complete = true;
      s += 4;
    } else if (e - s >= 5 && memcmp(s, "false", 5) == 0) {
      s += 5;
    } else {
      long long v;
      if (!(s = parse_int(s, e, &v)))
        return -1;
      if (strcmp(key, "conn") == 0)
        r->conn = (int)v;
      else if (strcmp(key, "seq") == 0)
        r->seq = (int)v;
      else if (strcmp(key, "req") == 0)
        r->req = (int)v;
      else if (strcmp(key, "body_bytes") == 0)
        r->body_bytes = v;
      else if (strcmp(key, "t_ms") == 0)
        r->t_ms = v;
    }
    s = skip_ws(s, e);
    if (s < e && *s == ',')
      s++;
    else if (s < e && *s == '}')
      return 0;
    else
      return -1;
  }
}

/* Visits each complete line (one ending in '\n'); a line still being written is skipped. */
static int scan_log(const char *path, faultd_req *out, int max, const char *must_contain) {
  size_t len;
  char *buf = slurp(path, &len);
  if (!buf)
    return -1;
  int count = 0;
  char *line = buf;
  for (;;) {
    char *nl = memchr(line, '\n', len - (size_t)(line - buf));
    if (!nl)
      break;
    /* With must_contain, lines are counted, not parsed (the connection log has its own shape):
     * only a parsed request is ever copied out. */
    faultd_req tmp;
    bool parsed = false, take;
    if (must_contain)
      take = memmem(line, (size_t)(nl - line), must_contain, strlen(must_contain)) != NULL;
    else
      take = parsed = parse_line(line, nl, &tmp) == 0;
    if (take) {
      if (parsed && out && count < max)
        out[count] = tmp;
      count++;
    }
    line = nl + 1;
  }
  free(buf);
  return count;
}

int faultd_requests(const faultd_proc *p, faultd_req *out, int max) {
  if (max < 0)
    max = 0;
  int n = scan_log(p->log_path, out, max, NULL);
  return n < 0 ? -1 : n < max ? n : max;
}

int faultd_request_count(const faultd_proc *p) { return scan_log(p->log_path, NULL, 0, NULL); }

int faultd_wait_requests(const faultd_proc *p, int n, int timeout_ms) {
  int64_t end = now_ms() + timeout_ms;
  for (;;) {
    int have = faultd_request_count(p);
    if (have >= n || now_ms() >= end)
      return have;
    sleep_ms(5);
  }
}

int faultd_connections(const faultd_proc *p) {
  return scan_log(p->conn_log_path, NULL, 0, "\"event\":\"accept\"");
}

int faultd_closed_connections(const faultd_proc *p) {
  return scan_log(p->conn_log_path, NULL, 0, "\"event\":\"close\"");
}
