/* SPDX-License-Identifier: MIT */
/* bench_outbox_enqueue [ROUNDS] [DIR]: messages enqueued per second, one per transaction
 * (lk_outbox_enqueue: an fsync of the WAL each, synchronous=FULL) against batches of 16 and 256
 * (lk_outbox_enqueue_batch: one transaction and one fsync per batch), interleaved rounds in one
 * process on one file system (DIR, default $TMPDIR or /tmp: say which one in the report, an fsync
 * costs what the disk under it costs). A loan-sized message: POST, a URL, two headers, 40 bytes
 * of body. */
#include "benchutil.h"

#include <linkd/outbox.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_BATCH 256

typedef struct ctx {
  lk_outbox *ob;
  size_t batch; /* 1: lk_outbox_enqueue */
  lk_outbox_message m[MAX_BATCH];
} ctx;

static const char *const headers[] = {"X-Tenant: bench", "Content-Type: application/json", NULL};
static const char body[] = "{\"borrower\":\"reader-000000000000000001\"}";

static uint64_t run(void *arg, uint64_t iters) {
  ctx *c = arg;
  uint64_t done = 0;
  while (done < iters) {
    size_t n = c->batch;
    if (n > iters - done)
      n = (size_t)(iters - done);
    int rc = n == 1 ? lk_outbox_enqueue(c->ob, &c->m[0], NULL, NULL)
                    : lk_outbox_enqueue_batch(c->ob, c->m, n, NULL);
    if (rc != LK_OK) {
      fprintf(stderr, "enqueue: %s\n", lk_strerror(rc));
      exit(1);
    }
    done += n;
  }
  return done;
}

static void init_ctx(ctx *c, lk_outbox *ob, size_t batch) {
  c->ob = ob;
  c->batch = batch;
  for (size_t i = 0; i < MAX_BATCH; i++) {
    lk_outbox_message_init(&c->m[i]);
    c->m[i].method = "POST";
    c->m[i].url = "http://127.0.0.1:8080/books/1/loans";
    c->m[i].headers = headers;
    c->m[i].body = body;
    c->m[i].body_len = sizeof body - 1;
  }
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 7;
  const char *tmp = argc > 2 ? argv[2] : getenv("TMPDIR");
  char dir[512];
  snprintf(dir, sizeof dir, "%s/bench-outbox-XXXXXX", tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  char path[600];
  snprintf(path, sizeof path, "%s/outbox.db", dir);
  lk_outbox_config cfg;
  lk_outbox_config_init_default(&cfg);
  cfg.path = path;
  lk_outbox *ob = NULL;
  char err[256];
  if (lk_outbox_open(&cfg, &ob, err, sizeof err) != LK_OK) {
    fprintf(stderr, "open: %s\n", err);
    return 1;
  }
  lk_bench_print_placement("bench_outbox_enqueue");
  printf("file: %s (synchronous=FULL, WAL)\n", path);
  static ctx one, b16, b256;
  init_ctx(&one, ob, 1);
  init_ctx(&b16, ob, 16);
  init_ctx(&b256, ob, 256);
  lk_bench_header("outbox enqueue, ns per message", "lk_outbox_enqueue (one fsync each)");
  lk_bench_cmp c16 = lk_bench_compare(run, &one, run, &b16, rounds);
  lk_bench_row("enqueue_batch of 16", &c16);
  lk_bench_cmp c256 = lk_bench_compare(run, &one, run, &b256, rounds);
  lk_bench_row("enqueue_batch of 256", &c256);
  printf("messages/s (median): one each %.0f, batch of 16 %.0f, batch of 256 %.0f\n",
         1e9 / c16.base_ns.median, 1e9 / c16.subj_ns.median, 1e9 / c256.subj_ns.median);
  lk_outbox_stats st;
  if (lk_outbox_stats_get(ob, &st) == LK_OK)
    printf("entries written: %lld\n", (long long)st.enqueued_total);
  lk_outbox_close(ob);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : 1;
}
