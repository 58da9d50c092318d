/* SPDX-License-Identifier: MIT */
/* What the `linkd demo` integration tests share: a run of the real linkd in private directories
 * (its TMPDIR, its stdout, stderr and report), waiting for it with a bound, reading its files,
 * and looking for processes it left behind. Include after <cmocka.h>; LINKD_BIN and LIBRARYD_BIN
 * come from the build. */
#ifndef LINKD_TEST_DEMO_PROC_H
#define LINKD_TEST_DEMO_PROC_H

#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct run {
  char tmp[128];  /* private TMPDIR given to linkd demo */
  char base[128]; /* stdout, stderr, the report, fake programs */
  char out[192], err[192], report[192];
  pid_t pid;
  int64_t started;
} run;

static inline int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static inline char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return NULL;
  size_t cap = 4096, len = 0, n;
  char *b = malloc(cap);
  while (b && (n = fread(b + len, 1, cap - len - 1, f)) > 0) {
    len += n;
    if (cap - len < 2) {
      char *nb = realloc(b, cap * 2);
      if (!nb) {
        free(b);
        b = NULL;
        break;
      }
      b = nb;
      cap *= 2;
    }
  }
  fclose(f);
  if (b)
    b[len] = '\0';
  return b;
}

/* Two private directories, /tmp/linkd-demo-TAG-* (the TMPDIR given to linkd demo) and
 * /tmp/linkd-demo-TAGo-* (its stdout, stderr, report, and a test's own files). */
static inline void prepare(run *r, const char *tag) {
  memset(r, 0, sizeof *r);
  snprintf(r->tmp, sizeof r->tmp, "/tmp/linkd-demo-%s-XXXXXX", tag);
  assert_non_null(mkdtemp(r->tmp));
  snprintf(r->base, sizeof r->base, "/tmp/linkd-demo-%so-XXXXXX", tag);
  assert_non_null(mkdtemp(r->base));
  snprintf(r->out, sizeof r->out, "%s/stdout", r->base);
  snprintf(r->err, sizeof r->err, "%s/stderr", r->base);
  snprintf(r->report, sizeof r->report, "%s/report.html", r->base);
}

/* Starts `linkd demo ARGS...` (no --report added: the caller passes one) with TMPDIR = r->tmp
 * unless `tmpdir` is given, stdout to r->out unless `stdout_path` is given. */
static inline void start_full(run *r, const char *const *args, const char *tmpdir,
                              const char *stdout_path) {
  char *argv[32];
  int argc = 0;
  argv[argc++] = (char *)LINKD_BIN;
  argv[argc++] = (char *)"demo";
  for (int i = 0; args[i] && argc < 30; i++)
    argv[argc++] = (char *)args[i];
  argv[argc] = NULL;
  r->started = now_ms();
  r->pid = fork();
  assert_true(r->pid >= 0);
  if (r->pid == 0) {
    setenv("TMPDIR", tmpdir ? tmpdir : r->tmp, 1);
    setenv("LINKD_LIBRARYD", LIBRARYD_BIN, 1);
    int o = open(stdout_path ? stdout_path : r->out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int e = open(r->err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (o < 0 || e < 0)
      _exit(120);
    dup2(o, 1);
    dup2(e, 2);
    execv(LINKD_BIN, argv);
    _exit(121);
  }
}

static inline void start_plain(run *r, const char *const *args) { start_full(r, args, NULL, NULL); }

/* The exit code (128 + signal if killed); kills it and fails after `limit_s`. */
static inline int finish(run *r, int limit_s) {
  int status = 0;
  for (int waited = 0; waited < limit_s * 1000; waited += 10) {
    pid_t p = waitpid(r->pid, &status, WNOHANG);
    if (p == r->pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    sleep_ms(10);
  }
  kill(r->pid, SIGKILL);
  waitpid(r->pid, &status, 0);
  fail_msg("linkd demo still running after %d s", limit_s);
  return -1;
}

static inline bool wait_for_text(const char *path, const char *needle, int limit_ms) {
  for (int waited = 0; waited < limit_ms; waited += 20) {
    char *t = slurp(path);
    bool found = t && strstr(t, needle);
    free(t);
    if (found)
      return true;
    sleep_ms(20);
  }
  return false;
}

static inline bool has_text(const char *path, const char *needle) {
  return wait_for_text(path, needle, 1);
}

static inline int dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
      n++;
  closedir(d);
  return n;
}

/* Pids of the processes whose command line holds every one of the (up to 2) needles; returns how
 * many, the first in *first. */
static inline int processes_with(const char *a, const char *b, pid_t *first) {
  DIR *d = opendir("/proc");
  if (!d)
    return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9')
      continue;
    char p[300], buf[8192];
    snprintf(p, sizeof p, "/proc/%s/cmdline", e->d_name);
    int fd = open(p, O_RDONLY);
    if (fd < 0)
      continue;
    ssize_t len = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (len <= 0)
      continue;
    for (ssize_t i = 0; i < len; i++)
      if (buf[i] == '\0')
        buf[i] = ' ';
    buf[len] = '\0';
    if (strstr(buf, a) && (!b || strstr(buf, b))) {
      if (n++ == 0 && first)
        *first = (pid_t)atoi(e->d_name);
    }
  }
  closedir(d);
  return n;
}

/* Processes mentioning `needle`, after giving a signalled one up to 1 s to go. */
static inline int survivors(const char *needle) {
  int n = 0;
  for (int waited = 0; waited < 1000; waited += 20) {
    if ((n = processes_with(needle, NULL, NULL)) == 0)
      return 0;
    sleep_ms(20);
  }
  return n;
}

static inline void dump(const run *r) {
  char *t = slurp(r->err);
  fprintf(stderr, "--- linkd demo stderr ---\n%s\n", t ? t : "(none)");
  free(t);
}

static inline void rm_rf_flat(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      char p[512];
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
        unlink(p);
    }
    closedir(d);
  }
  rmdir(dir);
}

static inline void cleanup(run *r) {
  rm_rf_flat(r->base);
  rm_rf_flat(r->tmp);
}

#endif
