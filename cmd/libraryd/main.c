/* SPDX-License-Identifier: MIT */
/* libraryd: the reference book service. Signal handling, port files and the daemon's life;
 * flags and the config file are options.c, everything else lives in src/server and src/store. */
#include "admq.h"
#include "options.h"

#include <linkd/error.h>
#include <linkd/version.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static int write_port_file(const char *path, int port) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f)
    return -1;
  fprintf(f, "%d\n", port);
  /* rename: a reader never sees a half-written file */
  if (fclose(f) != 0 || rename(tmp, path) != 0) {
    unlink(tmp);
    return -1;
  }
  return 0;
}

/* The database as logged: the file, or the URL without its password. */
static void name_store(const lk_store_config *c, char *buf, size_t cap) {
  if (!c->url) {
    snprintf(buf, cap, "%s", c->path);
    return;
  }
  const char *u = c->url, *scheme = strstr(u, "://");
  const char *at = scheme ? strchr(scheme + 3, '@') : NULL;
  const char *colon = at ? memchr(scheme + 3, ':', (size_t)(at - scheme - 3)) : NULL;
  if (colon)
    snprintf(buf, cap, "%.*s:***%s", (int)(colon - u), u, at);
  else
    snprintf(buf, cap, "%s", u);
}

/* Each connection is a descriptor, plus the database, listeners and logs: raise the soft limit
 * towards the hard one so that --connection-limit, not EMFILE, is what bounds connections. */
static void raise_fd_limit(unsigned connections) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return;
  rlim_t want = (rlim_t)connections + 256;
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

/* Points stderr (access log, messages, MHD's log) at the end of `path`. The new descriptor
 * replaces fd 2 in one dup2, so no writer ever sees it closed. 0 or -1 with errno. */
static int open_log(const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    return -1;
  int rc = dup2(fd, 2) < 0 ? -1 : 0;
  int e = errno;
  close(fd);
  errno = e;
  return rc;
}

/* SIGHUP: reopen the log (after rotation), then re-read the flags and config file and replace
 * the fault rules and seed; a bad file is reported and the running rules stay. */
static void reload(int argc, char **argv, const ld_opts *cur, lk_server *srv) {
  if (cur->log_file && open_log(cur->log_file) != 0)
    fprintf(stderr, "libraryd: SIGHUP: cannot reopen %s: %s (logging on)\n", cur->log_file,
            strerror(errno));
  ld_opts *o = calloc(1, sizeof *o);
  if (!o) {
    fprintf(stderr, "libraryd: SIGHUP: out of memory; nothing reloaded\n");
    return;
  }
  ld_opts_init(o);
  if (ld_opts_parse_args(argc, argv, o) != 0) {
    fprintf(stderr, "libraryd: SIGHUP: configuration not reloaded; the running fault rules "
                    "stay\n");
  } else {
    char err[512];
    int rc =
        lk_server_replace_faults(srv, o->faults, o->srv.n_faults, o->srv.seed, err, sizeof err);
    if (rc != LK_OK)
      fprintf(stderr, "libraryd: SIGHUP: %s; the running fault rules stay\n", err);
    else
      fprintf(stderr, "libraryd: SIGHUP: reloaded %zu fault rule(s), seed %llu\n", o->srv.n_faults,
              (unsigned long long)o->srv.seed);
    /* The rest is fixed at start: say so rather than seem to have applied it. */
    char changed[600];
    if (ld_opts_restart_changes(cur, o, changed, sizeof changed) > 0)
      fprintf(stderr, "libraryd: SIGHUP: changed, but only a restart applies them: %s\n", changed);
  }
  ld_opts_free(o);
  free(o);
}

int main(int argc, char **argv) {
  static ld_opts o;
  ld_opts_init(&o);
  int rc = ld_opts_parse_args(argc, argv, &o);
  if (rc)
    return rc > 0 ? 0 : 2;
  o.srv.faults = o.faults;
  o.srv.require_key = o.require_key;
  raise_fd_limit(o.srv.connection_limit);
  if (o.log_file && open_log(o.log_file) != 0) {
    fprintf(stderr, "libraryd: cannot open the log file %s: %s\n", o.log_file, strerror(errno));
    return 1;
  }

  /* Signals are taken synchronously by this thread; every other thread inherits the mask. */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  signal(SIGPIPE, SIG_IGN);

  char err[512];
  char store_name[512];
  name_store(&o.store, store_name, sizeof store_name);
  lk_store *store;
  rc = lk_store_open(&o.store, &store, err, sizeof err);
  if (rc != LK_OK) {
    /* err names the cause (a missing or unwritable directory, a read-only file, SQLite's
     * reason); the generic code text only when there is none. */
    fprintf(stderr, "libraryd: cannot open the database %s: %s\n", store_name,
            err[0] ? err : lk_strerror(rc));
    return 1;
  }
  lk_server *srv;
  rc = lk_server_start(&o.srv, store, &srv, err, sizeof err);
  if (rc != LK_OK) {
    fprintf(stderr, "libraryd: %s (%s)\n", err, lk_strerror(rc));
    lk_store_close(store);
    return rc == LK_ECONFIG ? 2 : 1;
  }
  /* --admin-port-file without --admin-port is refused by ld_opts_parse_args. */
  bool admin = false;
  const char *file = NULL;
  if (o.port_file && write_port_file(o.port_file, lk_server_port(srv)) != 0)
    file = o.port_file;
  else if (o.admin_port_file &&
           write_port_file(o.admin_port_file, lk_server_admin_port(srv)) != 0) {
    file = o.admin_port_file;
    admin = true;
  }
  if (file) {
    fprintf(stderr, "libraryd: cannot write the %sport file %s: %s\n", admin ? "admin " : "", file,
            strerror(errno));
    lk_server_free(srv);
    lk_store_close(store);
    return 1;
  }
  if (o.srv.log != LK_LOG_OFF)
    fprintf(stderr,
            "libraryd %s: listening on %s:%d, admin %d, %s %s (schema %d -> %d, sync %s), "
            "%zu fault rule(s), seed %llu, %u workers, queue %zu (%s)\n",
            LK_VERSION_STRING, o.srv.addr, lk_server_port(srv), lk_server_admin_port(srv),
            o.store.url ? "store" : "db", store_name, lk_store_opened_version(store),
            lk_store_schema_version(store),
            o.store.url                          ? "postgres's"
            : o.store.sync == LK_STORE_SYNC_FULL ? "full"
                                                 : "normal",
            o.srv.n_faults, (unsigned long long)o.srv.seed, o.srv.workers, o.srv.queue_limit,
            lk_qdisc_name(o.srv.queue_discipline));

  int sig = 0;
  while (sigwait(&set, &sig) == 0 && sig == SIGHUP)
    reload(argc, argv, &o, srv);
  if (o.srv.log != LK_LOG_OFF)
    fprintf(stderr, "libraryd: %s: draining\n", strsignal(sig));
  int left = lk_server_shutdown(srv);
  lk_server_free(srv);
  lk_store_close(store);
  if (o.srv.log != LK_LOG_OFF)
    fprintf(stderr, "libraryd: stopped (%d request(s) cut at the drain timeout)\n", left);
  ld_opts_free(&o);
  return 0;
}
