/* SPDX-License-Identifier: MIT */
/* Crash safety: kill -9 libraryd in the middle of a stream of keyed loan requests, restart it on
 * the same file, retry every request with its key. Each key must be applied exactly once, the
 * stock must match, and every acknowledged write must be present (its replay returns the loan
 * the client was told about). The group-commit case runs more client threads than one commit's
 * fsync takes to serve, and checks that writes really shared commits before each kill. */
#include "harness.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"

#define THREADS_MAX 16
#define MAX_PER_THREAD 4000
#define INITIAL_STOCK 1000000

typedef struct key_state {
  bool sent, acked;
  int64_t loan_id; /* from the acknowledged response */
} key_state;

typedef struct stream {
  int port;
  int64_t book;
  int cycle, thread;
  int n; /* requests sent */
  key_state keys[MAX_PER_THREAD];
} stream;

static void key_name(int cycle, int thread, int i, char *out, size_t cap) {
  snprintf(out, cap, "crash-c%d-t%d-%d", cycle, thread, i);
}

static int64_t loan_id(const http_res *r) {
  json_t *j = http_json(r);
  int64_t id = j ? (int64_t)json_integer_value(json_object_get(j, "id")) : -1;
  json_decref(j);
  return id;
}

static void post_loan(int port, int64_t book, const char *key, http_res *r) {
  char path[64], kh[128];
  snprintf(path, sizeof path, "/books/%lld/loans", (long long)book);
  snprintf(kh, sizeof kh, "Idempotency-Key: %s", key);
  const char *h[] = {kh, "X-Tenant: crash", NULL};
  http_req rq = {.method = "POST", .path = path, .headers = h, .timeout_ms = 5000};
  http_do(port, &rq, r);
}

/* Sends keyed loans until the daemon disappears (or the bound is reached). */
static void *stream_main(void *arg) {
  stream *s = arg;
  double until = now_s() + 20.0;
  for (int i = 0; i < MAX_PER_THREAD && now_s() < until; i++) {
    char key[64];
    key_name(s->cycle, s->thread, i, key, sizeof key);
    s->keys[i].sent = true;
    s->n = i + 1;
    http_res r;
    post_loan(s->port, s->book, key, &r);
    bool ok = r.status == 201;
    if (ok) {
      s->keys[i].acked = true;
      s->keys[i].loan_id = loan_id(&r);
    }
    http_res_free(&r);
    if (!ok)
      break; /* the daemon is gone: stop the stream */
  }
  return NULL;
}

static uint64_t rng_state;
static int rand_between(int lo, int hi) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return lo + (int)((rng_state >> 33) % (uint64_t)(hi - lo + 1));
}

static int64_t stat_int(json_t *st, const char *a, const char *b) {
  json_t *v = json_object_get(st, a);
  if (b)
    v = json_object_get(v, b);
  return (int64_t)json_integer_value(v);
}

/* work: the --work spec ("none": no service time, so keyed writes can join a running group
 * straight from MHD's threads). */
/* libraryd's default --work (server/work.h's LK_WORK_DEFAULT). */
#define LK_WORK_DEFAULT_SPEC "GET /books/*=1ms,POST /books/*/loans=3ms"

static void crash_cycles(const char *sync, const char *group, int threads, const char *work) {
  rng_state = lk_test_seed();
  lib_proc p;
  const char *args[] = {
      "--sync",    sync, "--group-commit",     group,  "--log",  "off", "--threads", "3",
      "--workers", "16", "--queue-discipline", "fifo", "--work", work,  NULL};
  assert_int_equal(lib_start(&p, args), 0);
  int64_t book = lib_create_book(p.port, INITIAL_STOCK);
  assert_true(book > 0);
  static stream st[THREADS_MAX];
  int64_t distinct = 0, acked_total = 0, unacked_applied = 0, largest_group = 0, joined = 0;
  for (int cycle = 0; cycle < 3; cycle++) {
    pthread_t th[THREADS_MAX];
    for (int t = 0; t < threads; t++) {
      memset(&st[t], 0, sizeof st[t]);
      st[t].port = p.port;
      st[t].book = book;
      st[t].cycle = cycle;
      st[t].thread = t;
      pthread_create(&th[t], NULL, stream_main, &st[t]);
    }
    sleep_ms(rand_between(150, 450));
    if (cycle == 0 && !strcmp(group, "on")) {
      /* /metrics carries the same counts: writes outnumber commits once groups form. */
      http_res m;
      assert_int_equal(http_get(p.port, "/metrics", &m), 0);
      assert_int_equal(m.status, 200);
      long long commits = -1, writes = -1;
      const char *kc = "\nlibraryd_store_commits_total ", *kw = "\nlibraryd_store_writes_total ";
      const char *c = strstr(m.body, kc), *w = strstr(m.body, kw);
      assert_non_null(c);
      assert_non_null(w);
      sscanf(c + strlen(kc), "%lld", &commits);
      sscanf(w + strlen(kw), "%lld", &writes);
      assert_true(commits > 0 && writes > commits);
      http_res_free(&m);
    }
    json_t *before = lib_stats(&p); /* how many writes shared a commit so far */
    assert_non_null(before);
    int64_t largest = stat_int(json_object_get(before, "server"), "store_commits", "largest_group");
    joined += stat_int(json_object_get(before, "server"), "store_commits", "joined_from_io_thread");
    json_decref(before);
    if (largest > largest_group)
      largest_group = largest;
    lib_kill9(&p); /* mid-stream: requests are in flight on every thread */
    for (int t = 0; t < threads; t++)
      pthread_join(th[t], NULL);
    assert_int_equal(lib_restart(&p, args), 0);
    /* Retry every request that was sent, with its key. */
    for (int t = 0; t < threads; t++) {
      for (int i = 0; i < st[t].n; i++) {
        char key[64];
        key_name(cycle, t, i, key, sizeof key);
        http_res r;
        post_loan(p.port, book, key, &r);
        assert_int_equal(r.status, 201);
        char v[16];
        bool replay = http_header(&r, "Idempotent-Replayed", v, sizeof v) != NULL;
        if (st[t].keys[i].acked) {
          /* An acknowledged write survived the crash: same loan, replayed. */
          assert_true(replay);
          assert_int_equal(loan_id(&r), st[t].keys[i].loan_id);
          acked_total++;
        } else if (replay) {
          unacked_applied++; /* applied before the crash, answer lost: not applied again */
        }
        http_res_free(&r);
        /* Once more: now it must be a replay whatever happened before. */
        post_loan(p.port, book, key, &r);
        assert_int_equal(r.status, 201);
        assert_non_null(http_header(&r, "Idempotent-Replayed", v, sizeof v));
        http_res_free(&r);
        distinct++;
      }
    }
    json_t *s = lib_stats(&p);
    assert_non_null(s);
    assert_int_equal(stat_int(s, "keyed_loans", NULL), distinct);
    json_t *t = json_object_get(json_object_get(s, "tenants"), "tenant:crash");
    assert_int_equal(json_integer_value(json_object_get(t, "loans")), distinct);
    assert_int_equal(json_integer_value(json_object_get(t, "duplicate_loans_by_key")), 0);
    assert_int_equal(json_array_size(json_object_get(json_object_get(s, "duplicates"), "by_key")),
                     0);
    json_decref(s);
    assert_int_equal(lib_stock(p.port, book), INITIAL_STOCK - distinct);
  }
  fprintf(stderr,
          "crash (sync %s, group commit %s, %d threads): %lld keys, %lld acknowledged, %lld "
          "applied-but-unanswered, largest group %lld, %lld joined from the I/O threads\n",
          sync, group, threads, (long long)distinct, (long long)acked_total,
          (long long)unacked_applied, (long long)largest_group, (long long)joined);
  assert_true(acked_total > 0); /* the stream really ran before each kill */
  if (!strcmp(group, "on"))
    assert_true(largest_group > 1); /* the kills hit a daemon that was grouping commits */
  else
    assert_int_equal(largest_group, 1);
  /* Writes are handed from MHD's threads straight into a running group, past the workers, only
   * when they cost no service time. */
  if (!strcmp(group, "on") && !strcmp(work, "none"))
    assert_true(joined > 0);
  else
    assert_int_equal(joined, 0);
  assert_int_equal(lib_stop(&p), 0);
  lib_cleanup(&p);
}

static void test_kill9_sync_full(void **state) {
  (void)state;
  crash_cycles("full", "off", 3, LK_WORK_DEFAULT_SPEC);
}

static void test_kill9_sync_normal(void **state) {
  (void)state;
  crash_cycles("normal", "off", 3, LK_WORK_DEFAULT_SPEC);
}

static void test_kill9_group_commit_sync_full(void **state) {
  (void)state;
  crash_cycles("full", "on", THREADS_MAX, LK_WORK_DEFAULT_SPEC);
}

/* The same without service time: most writes then join a running group from MHD's threads and
 * are completed by the committing thread, never passing a worker. */
static void test_kill9_group_commit_joined_sync_full(void **state) {
  (void)state;
  crash_cycles("full", "on", THREADS_MAX, "none");
}

int main(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kill9_sync_full),
      cmocka_unit_test(test_kill9_sync_normal),
      cmocka_unit_test(test_kill9_group_commit_sync_full),
      cmocka_unit_test(test_kill9_group_commit_joined_sync_full),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  curl_global_cleanup();
  return rc;
}
