/* SPDX-License-Identifier: MIT */
/* libFuzzer: libraryd's config file (INI through libinih, then every setting's parser, the code
 * `libraryd --config FILE` runs): no crash, no leak (ASan's leak check runs at exit), a refusal
 * always comes with a message on stderr, and what is accepted is in range. */
#include "options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

/* A refusal must say something: stderr goes to a memory stream while a file is read. */
static char *msg;
static size_t msg_len;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  FILE *m = open_memstream(&msg, &msg_len);
  if (!m)
    abort();
  stderr = m;
  return 0;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  if (size == 0)
    return 0; /* fmemopen refuses an empty buffer */
  FILE *f = fmemopen((void *)data, size, "r");
  if (!f)
    return 0;
  static ld_opts o;
  ld_opts_init(&o);
  fflush(stderr);
  size_t before = msg_len;
  int rc = ld_opts_read_config_stream(f, "fuzz.ini", &o);
  fclose(f);
  fflush(stderr);
  if (rc != 0 && msg_len == before)
    abort();
  if (rc == 0) {
    const lk_server_config *c = &o.srv;
    if (c->port < 0 || c->port > 65535 || c->threads > 1024 || c->workers < 1 ||
        c->workers > 4096 || c->n_faults > LD_MAX_LIST || c->n_require_key > LD_MAX_LIST ||
        c->max_body == 0 || c->head_timeout_ns < 0 || c->body_timeout_ns < 0 ||
        c->idem_retention_ns <= 0 || c->queue_target_ns <= 0 || c->queue_interval_ns <= 0 ||
        c->idle_timeout_s > 86400)
      abort();
    if (o.n_owned > sizeof o.owned / sizeof o.owned[0])
      abort();
  }
  ld_opts_free(&o);
  if (msg_len > (1u << 20)) { /* keep the captured messages small */
    rewind(stderr);
    msg_len = 0;
  }
  return 0;
}
