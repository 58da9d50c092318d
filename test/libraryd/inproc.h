/* SPDX-License-Identifier: MIT */
/* A libraryd server in the test's own process, on a free port of 127.0.0.1 over an open store:
 * one listener thread, two workers, no log; a failed start fails the test. */
#ifndef LINKD_TEST_INPROC_H
#define LINKD_TEST_INPROC_H

#include "server.h"

#include <linkd/error.h>

#include <setjmp.h> /* cmocka.h needs these three first */
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

static inline lk_server *inproc_start(lk_store *store) {
  lk_server_config cfg;
  lk_server_config_init_default(&cfg);
  cfg.port = 0;
  cfg.threads = 1;
  cfg.workers = 2;
  cfg.log = LK_LOG_OFF;
  lk_server *srv = NULL;
  char err[256] = "";
  if (lk_server_start(&cfg, store, &srv, err, sizeof err) != LK_OK)
    fail_msg("lk_server_start: %s", err);
  return srv;
}

#endif
