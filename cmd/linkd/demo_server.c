/* SPDX-License-Identifier: MIT */
/* demo_server.c: libraryd processes for `linkd demo`, and the admin calls made to them. */
#include "demo_server.h"

#include <linkd/error.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* --- finding the binary ------------------------------------------------------------------- */

static bool executable(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

static bool try_path(const char *path, char *out, size_t cap) {
  if (!executable(path))
    return false;
  char canon[PATH_MAX];
  const char *p = realpath(path, canon) ? canon : path; /* "/a/b/../c" printed as "/a/c" */
  if (strlen(p) >= cap)
    return false;
  snprintf(out, cap, "%s", p);
  return true;
}

int demo_find_libraryd(const char *override, char *out, size_t cap, char *err, size_t errcap) {
  if (override) {
    if (try_path(override, out, cap))
      return 0;
    snprintf(err, errcap, "--libraryd %s: not an executable file", override);
    return -1;
  }
  const char *env = getenv("LINKD_LIBRARYD");
  if (env && *env) {
    if (try_path(env, out, cap))
      return 0;
    snprintf(err, errcap, "LINKD_LIBRARYD=%s: not an executable file", env);
    return -1;
  }
  char self[DEMO_PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash) {
      *slash = '\0';
      char cand[DEMO_PATH_MAX + 32];
      /* the build tree: build/cmd/linkd/linkd next to build/cmd/libraryd/libraryd */
      snprintf(cand, sizeof cand, "%s/../libraryd/libraryd", self);
      if (try_path(cand, out, cap))
        return 0;
      /* an install: both in the same bin directory */
      snprintf(cand, sizeof cand, "%s/libraryd", self);
      if (try_path(cand, out, cap))
        return 0;
    }
  }
  const char *path = getenv("PATH");
  if (path) {
    const char *p = path;
    while (*p) {
      size_t len = strcspn(p, ":");
      char cand[DEMO_PATH_MAX + 32];
      if (len > 0 && len < DEMO_PATH_MAX) {
        snprintf(cand, sizeof cand, "%.*s/libraryd", (int)len, p);
        if (try_path(cand, out, cap))
          return 0;
      }
      p += len;
      if (*p == ':')
        p++;
    }
  }
  snprintf(err, errcap,
           "cannot find the libraryd program: set LINKD_LIBRARYD=/path/to/libraryd, pass "
           "--libraryd PATH, or put it on PATH (it is built next to linkd, in cmd/libraryd/)");
  return -1;
}

/* --- the temporary directory --------------------------------------------------------------- */

const char *demo_tmpdir_base(void) {
  const char *base = getenv("TMPDIR");
  return base && *base ? base : "/tmp";
}

int demo_tmpdir_create(char *out, size_t cap) {
  const char *base = demo_tmpdir_base();
  if ((size_t)snprintf(out, cap, "%s/linkd-demo-XXXXXX", base) >= cap) {
    errno = ENAMETOOLONG;
    return -1;
  }
  return mkdtemp(out) ? 0 : -1;
}

void demo_tmpdir_remove(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
        continue;
      char p[DEMO_PATH_MAX + 256];
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      unlink(p);
    }
    closedir(d);
  }
  rmdir(dir);
}

/* --- the process --------------------------------------------------------------------------- */

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* The port in `path` (written atomically by libraryd), or 0 while it is not there yet. */
static int read_port(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return 0;
  int port = 0;
  if (fscanf(f, "%d", &port) != 1 || port <= 0 || port > 65535)
    port = 0;
  fclose(f);
  return port;
}

/* The last line(s) libraryd wrote to its log, for an error message. */
static void log_tail(const char *path, char *out, size_t cap) {
  out[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    size_t n = strlen(line);
    if (n == 0 || cap == 0)
      continue;
    if (n >= cap)
      n = cap - 1; /* keep the start of a long line */
    memcpy(out, line, n);
    out[n] = '\0';
  }
  fclose(f);
}

static void child_exec(const char *bin, char *const *args, const char *log_path, pid_t parent) {
  /* Own process group: a terminal's Ctrl-C reaches linkd only, which then stops libraryd. */
  setpgid(0, 0);
  /* If linkd dies without stopping us, the kernel tells libraryd to shut down. */
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent)
    _exit(127);
  int in = open("/dev/null", O_RDONLY);
  int out = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (in >= 0)
    dup2(in, 0);
  if (out >= 0) {
    dup2(out, 1);
    dup2(out, 2);
  }
  execv(bin, args);
  dprintf(2, "cannot run %s: %s\n", bin, strerror(errno));
  _exit(127);
}

int demo_server_start(demo_server *s, const char *bin, const char *dir, const char *name,
                      uint64_t seed, const char *const *extra, size_t n_extra, lk_http_cancel *stop,
                      char *err, size_t errcap) {
  memset(s, 0, sizeof *s);
  char port_file[DEMO_PATH_MAX], admin_file[DEMO_PATH_MAX], db[DEMO_PATH_MAX], seed_s[32];
  snprintf(port_file, sizeof port_file, "%s/%s.port", dir, name);
  snprintf(admin_file, sizeof admin_file, "%s/%s.admin-port", dir, name);
  snprintf(db, sizeof db, "%s/%s.db", dir, name);
  snprintf(s->log_path, sizeof s->log_path, "%s/%s.log", dir, name);
  snprintf(seed_s, sizeof seed_s, "%llu", (unsigned long long)seed);
  char *args[40] = {
      (char *)bin,
      "--addr",
      "127.0.0.1",
      "--port",
      "0",
      "--port-file",
      port_file,
      "--admin-port",
      "0",
      "--admin-port-file",
      admin_file,
      "--db",
      db,
      "--sync",
      "normal",
      "--no-seed-data",
      "--log",
      "off",
      "--seed",
      seed_s,
      "--drain-timeout",
      "2s",
      "--per-client-limit", /* every demo client connects from 127.0.0.1 */
      "0",
      NULL,
  };
  size_t na = 0;
  while (args[na])
    na++;
  if (na + n_extra + 1 > sizeof args / sizeof args[0]) {
    snprintf(err, errcap, "too many libraryd arguments");
    return -1;
  }
  for (size_t i = 0; i < n_extra; i++)
    args[na++] = (char *)extra[i];
  args[na] = NULL;
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(err, errcap, "fork: %s", strerror(errno));
    return -1;
  }
  if (pid == 0)
    child_exec(bin, args, s->log_path, parent);
  /* Why: the child's own setpgid() may not have run yet when demo_server_stop() signals the
   * group; setting it from both sides closes the race (the second call fails harmlessly). */
  setpgid(pid, pid);
  s->pid = pid;
  s->stop = stop;
  for (int waited = 0; waited < 10000; waited += 5) {
    s->port = read_port(port_file);
    s->admin_port = read_port(admin_file);
    if (s->port && s->admin_port)
      break;
    char why[480];
    if (demo_server_exited(s, why, sizeof why)) {
      snprintf(err, errcap, "%s exited at start (%s)", bin, why);
      return -1;
    }
    /* Why: a Ctrl-C while a program that never writes its ports was starting waited the full
     * 10 s (and up to 5 s more to stop it) before the demo noticed. */
    if (lk_http_cancel_fired(stop)) {
      demo_server_stop(s);
      snprintf(err, errcap, "interrupted");
      return -1;
    }
    sleep_ms(5);
  }
  if (!s->port || !s->admin_port) {
    demo_server_stop(s);
    snprintf(err, errcap,
             "%s did not report its ports within 10 s (is it libraryd? it must write "
             "--port-file and --admin-port-file)",
             bin);
    return -1;
  }
  snprintf(s->url, sizeof s->url, "http://127.0.0.1:%d", s->port);
  snprintf(s->admin_url, sizeof s->admin_url, "http://127.0.0.1:%d", s->admin_port);
  return 0;
}

bool demo_server_exited(demo_server *s, char *why, size_t cap) {
  int status;
  if (s->pid <= 0 || waitpid(s->pid, &status, WNOHANG) != s->pid)
    return false;
  kill(-s->pid, SIGKILL); /* whatever it started in its group (just reaped: still its number) */
  s->pid = 0;
  char tail[400];
  log_tail(s->log_path, tail, sizeof tail);
  snprintf(why, cap, "%s %d%s%s", WIFEXITED(status) ? "status" : "signal",
           WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), *tail ? ": " : "", tail);
  return true;
}

/* Why the group: a libraryd that is a wrapper script (or anything that forks) left its children
 * running after the demo signalled only the process it started. */
static void signal_group(pid_t pid, int sig, bool leader_alive) {
  if (kill(-pid, sig) != 0 && leader_alive) /* a reaped pid may be another process's by now */
    kill(pid, sig);
}

void demo_server_stop(demo_server *s) { demo_server_stop_within(s, 5000); }

void demo_server_stop_within(demo_server *s, int grace_ms) {
  if (s->pid <= 0)
    return;
  pid_t pid = s->pid;
  signal_group(pid, SIGTERM, true);
  int status;
  bool reaped = false;
  for (int waited = 0; waited < grace_ms && !reaped; waited += 5) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD))
      reaped = true;
    else
      sleep_ms(5);
  }
  /* the leader gone, what else it started in its group is not waited for: SIGKILL ends it */
  signal_group(pid, SIGKILL, !reaped);
  if (!reaped)
    waitpid(pid, &status, 0);
  s->pid = 0;
}

/* --- admin calls ----------------------------------------------------------------------------- */

/* One call without faults in the way: a generous deadline, no retry of writes. On success (any
 * status) *status is set and, if body_out is non-NULL, *body_out gets a malloc'd copy. */
static int call(lk_http_cancel *stop, lk_http_client *c, const char *method, const char *url,
                const char *body, int *status, char **body_out, char *location, size_t loc_cap,
                char *err, size_t errcap) {
  lk_http_request *req = lk_http_request_new(method, url);
  if (!req) {
    snprintf(err, errcap, "%s %s: cannot build the request", method, url);
    return -1;
  }
  int rc = LK_OK;
  if (body) {
    rc = lk_http_request_add_header(req, "Content-Type", "application/json");
    if (rc == LK_OK)
      rc = lk_http_request_set_body(req, body, strlen(body));
  }
  lk_http_policy pol;
  lk_http_policy_init_default(&pol);
  pol.deadline = LK_SEC(10);
  pol.attempt_timeout = LK_SEC(5);
  pol.connect_timeout = LK_SEC(2);
  pol.send_deadline = false;
  pol.send_attempt = false;
  pol.default_protection = false; /* the admin port is not under test */
  lk_http_result *res = NULL;
  if (rc == LK_OK)
    lk_http_call(c, req, &pol, stop, &res);
  lk_http_request_free(req);
  const lk_http_response *resp = res ? lk_http_result_response(res) : NULL;
  if (!resp) {
    snprintf(err, errcap, "%s %s: %s", method, url,
             res ? lk_http_result_stop(res) : lk_strerror(rc));
    lk_http_result_free(res);
    return -1;
  }
  *status = resp->status;
  if (location) {
    const char *loc = lk_http_response_header(resp, "Location");
    snprintf(location, loc_cap, "%s", loc ? loc : "");
  }
  if (body_out) {
    *body_out = malloc(resp->body_len + 1);
    if (*body_out) {
      memcpy(*body_out, resp->body, resp->body_len);
      (*body_out)[resp->body_len] = '\0';
    }
  }
  lk_http_result_free(res);
  if (body_out && !*body_out) {
    snprintf(err, errcap, "out of memory");
    return -1;
  }
  return 0;
}

static int expect(int status, int want, const char *what, char *err, size_t errcap) {
  if (status == want)
    return 0;
  snprintf(err, errcap, "%s: libraryd answered %d (expected %d)", what, status, want);
  return -1;
}

int demo_server_create_books(const demo_server *s, lk_http_client *c, int n, int64_t stock,
                             int64_t *ids, char *err, size_t errcap) {
  char url[128];
  snprintf(url, sizeof url, "%s/books", s->url);
  for (int i = 0; i < n; i++) {
    char body[256], loc[128];
    snprintf(body, sizeof body,
             "{\"title\":\"Demo book %d\",\"author\":\"linkd demo\",\"year\":2026,"
             "\"stock\":%lld}",
             i + 1, (long long)stock);
    int status;
    if (call(s->stop, c, "POST", url, body, &status, NULL, loc, sizeof loc, err, errcap) != 0 ||
        expect(status, 201, "POST /books", err, errcap) != 0)
      return -1;
    long long id = 0;
    if (sscanf(loc, "/books/%lld", &id) != 1 || id <= 0) {
      snprintf(err, errcap, "POST /books: unexpected Location '%s'", loc);
      return -1;
    }
    ids[i] = id;
  }
  return 0;
}

int demo_server_set_faults(const demo_server *s, lk_http_client *c, uint64_t seed,
                           const char *const *rules, size_t n, char *err, size_t errcap) {
  json_t *arr = json_array();
  for (size_t i = 0; i < n; i++)
    json_array_append_new(arr, json_string(rules[i]));
  json_t *o = json_pack("{s:I,s:o}", "seed", (json_int_t)(seed & INT64_MAX), "rules", arr);
  char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  if (!body) {
    snprintf(err, errcap, "out of memory");
    return -1;
  }
  char url[128];
  snprintf(url, sizeof url, "%s/admin/faults", s->admin_url);
  int status;
  char *reply = NULL;
  int rc = call(s->stop, c, "PUT", url, body, &status, &reply, NULL, 0, err, errcap);
  free(body);
  if (rc == 0 && status != 200) {
    snprintf(err, errcap, "PUT /admin/faults: %d %s", status, reply ? reply : "");
    rc = -1;
  }
  free(reply);
  return rc;
}

int demo_server_add_fault(const demo_server *s, lk_http_client *c, const char *rule, int *id,
                          char *err, size_t errcap) {
  char url[128];
  snprintf(url, sizeof url, "%s/admin/faults", s->admin_url);
  json_t *o = json_pack("{s:s}", "rule", rule);
  char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  if (!body) {
    snprintf(err, errcap, "out of memory");
    return -1;
  }
  int status;
  char *reply = NULL;
  int rc = call(s->stop, c, "POST", url, body, &status, &reply, NULL, 0, err, errcap);
  free(body);
  if (rc == 0 && (rc = expect(status, 201, "POST /admin/faults", err, errcap)) == 0) {
    json_t *r = json_loads(reply, 0, NULL);
    json_t *v = json_object_get(r, "id");
    if (json_is_integer(v)) {
      *id = (int)json_integer_value(v);
    } else {
      snprintf(err, errcap, "POST /admin/faults: no id in '%s'", reply);
      rc = -1;
    }
    json_decref(r);
  }
  free(reply);
  return rc;
}

int demo_server_remove_fault(const demo_server *s, lk_http_client *c, int id, char *err,
                             size_t errcap) {
  char url[128];
  snprintf(url, sizeof url, "%s/admin/faults/%d", s->admin_url, id);
  int status;
  if (call(s->stop, c, "DELETE", url, NULL, &status, NULL, NULL, 0, err, errcap) != 0)
    return -1;
  return expect(status, 200, "DELETE /admin/faults/ID", err, errcap);
}

static int64_t int_at(json_t *o, const char *name) {
  json_t *v = json_object_get(o, name);
  return json_is_integer(v) ? (int64_t)json_integer_value(v) : 0;
}

/* A counter of the "server" object, or -1 when this libraryd does not report it. */
static int64_t opt_at(json_t *o, const char *name) {
  json_t *v = json_object_get(o, name);
  return json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
}

/* GET `path` on the admin listener: 200 and a JSON document in *root (the caller decrefs it),
 * or -1 with a message in err. */
static int admin_get_json(const demo_server *s, lk_http_client *c, const char *path,
                          json_t **root, char *err, size_t errcap) {
  char url[128];
  snprintf(url, sizeof url, "%s%s", s->admin_url, path);
  int status;
  char *reply = NULL;
  *root = NULL;
  if (call(s->stop, c, "GET", url, NULL, &status, &reply, NULL, 0, err, errcap) != 0)
    return -1;
  char what[64];
  snprintf(what, sizeof what, "GET %s", path);
  int rc = expect(status, 200, what, err, errcap);
  if (rc == 0 && !(*root = json_loads(reply, 0, NULL))) {
    snprintf(err, errcap, "%s: not JSON", what);
    rc = -1;
  }
  free(reply);
  return rc;
}

int demo_server_stats_get(const demo_server *s, lk_http_client *c, demo_server_stats *out,
                          char *err, size_t errcap) {
  json_t *root;
  int rc = admin_get_json(s, c, "/admin/stats", &root, err, errcap);
  json_t *server = json_object_get(root, "server");
  json_t *tenants = json_object_get(root, "tenants");
  if (rc == 0 && (!json_is_object(server) || !json_is_object(tenants))) {
    snprintf(err, errcap, "GET /admin/stats: unexpected reply");
    rc = -1;
  }
  if (rc == 0) {
    memset(out, 0, sizeof *out);
    out->requests = int_at(server, "requests");
    out->replays = int_at(server, "replays");
    out->faults_injected = int_at(server, "faults_injected");
    out->in_flight = int_at(server, "requests_in_flight");
    out->loans = int_at(root, "loans");
    out->work_done = opt_at(server, "work_done");
    out->work_abandoned = opt_at(server, "work_abandoned");
    const char *k;
    json_t *t;
    json_object_foreach(tenants, k, t) {
      out->duplicate_loans += int_at(t, "duplicate_loans_by_request_id");
    }
  }
  json_decref(root);
  return rc;
}

int demo_server_series_get(const demo_server *s, lk_http_client *c, int64_t start,
                           demo_series *out, char *err, size_t errcap) {
  json_t *root;
  int rc = admin_get_json(s, c, "/admin/series", &root, err, errcap);
  json_t *buckets = json_object_get(root, "buckets");
  int64_t width = int_at(root, "window_ns");
  if (rc == 0 && (!json_is_array(buckets) || width <= 0)) {
    snprintf(err, errcap, "GET /admin/series: unexpected reply");
    rc = -1;
  }
  if (rc == 0) {
    memset(out->server, 0, sizeof out->server);
    memset(out->abandoned, 0, sizeof out->abandoned);
    size_t i;
    json_t *b;
    json_array_foreach(buckets, i, b) {
      /* libraryd's buckets and ours are both on CLOCK_MONOTONIC; a bucket counts in the window
       * its middle falls in */
      int64_t mid = int_at(b, "t_ns") + width / 2 - start;
      if (mid < 0 || mid / DEMO_WINDOW >= DEMO_WINDOWS)
        continue;
      int w = (int)(mid / DEMO_WINDOW);
      out->server[w] += (uint32_t)int_at(b, "arrivals");
      out->abandoned[w] += (uint32_t)int_at(b, "abandoned");
    }
    out->have_server = true;
  }
  json_decref(root);
  return rc;
}
