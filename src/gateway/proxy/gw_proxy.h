/* SPDX-License-Identifier: MIT */
/* gw_proxy.h: run `linkd serve` (the proxy half; the configuration is gw_config.h). */
#ifndef LINKD_GW_PROXY_H
#define LINKD_GW_PROXY_H

#include <stdbool.h>

typedef struct lk_gw_serve_opts {
  const char *config_path; /* -c FILE, required */
  const char *port_file;   /* --port-file FILE: once listening, "PORT ADMIN_PORT\n" is written
                              there (ADMIN_PORT 0 without an admin listener); for scripts and
                              tests that use port 0. NULL: none */
  const char *pid_file;    /* --pid-file FILE: once listening, the process id and a newline are
                              written there (replacing the file whole), and the file is removed
                              at exit; for logrotate's `kill -USR1 $(cat FILE)`. NULL: none */
  bool check_only;         /* --check: validate the configuration, print it, exit */
  int threads;             /* --threads N: loop threads; 0 = one per CPU the process may use */
} lk_gw_serve_opts;

/* Loads the configuration, binds, serves until SIGTERM/SIGINT (drained) and returns the process
 * exit code: 0 after a drain, 2 for a configuration that does not load (message on stderr),
 * 1 for a listener that cannot bind or another start-up failure. */
int lk_gw_serve(const lk_gw_serve_opts *o);

#endif
