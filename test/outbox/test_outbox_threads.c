/* SPDX-License-Identifier: MIT */
/* One lk_outbox shared by threads: four enqueue while a fifth sends (LK_OUTBOX_FOREVER) to a real
 * libraryd, and a sixth reads the stats. Every entry is delivered once, counted from libraryd's
 * records. Run under TSan in CI (label "threaded"). */
#include "harness.h"

#include <linkd/outbox.h>

#include "store.h"
#include "testutil.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define THREADS 4
#define PER_THREAD 50

static lib_proc p;
static char db[400];
static lk_outbox *ob;
static char url[128];
static char keys[THREADS * PER_THREAD][LK_IDEM_KEY_MAX];

static void *enqueuer(void *arg) {
  int t = (int)(intptr_t)arg;
  static const char *const hdrs[] = {"X-Tenant: outbox-threads", NULL};
  for (int i = 0; i < PER_THREAD; i++) {
    lk_outbox_message m;
    lk_outbox_message_init(&m);
    m.method = "POST";
    m.url = url;
    m.headers = hdrs;
    if (lk_outbox_enqueue(ob, &m, NULL, keys[t * PER_THREAD + i]) != LK_OK)
      return (void *)1;
  }
  return NULL;
}

typedef struct send_arg {
  lk_http_cancel *cancel;
  int rc;
  lk_outbox_send_stats st;
} send_arg;

static void *sender(void *arg) {
  send_arg *a = arg;
  lk_outbox_sender_config sc;
  lk_outbox_sender_config_init_default(&sc);
  sc.until = LK_OUTBOX_FOREVER;
  sc.poll_interval = LK_MS(5);
  sc.concurrency = 4;
  sc.cancel = a->cancel;
  sc.policy.deadline = LK_SEC(5);
  a->rc = lk_outbox_send(ob, &sc, &a->st);
  return NULL;
}

static _Atomic int stop_reader;
static void *reader(void *arg) {
  (void)arg;
  for (int i = 0; i < 100000 && !stop_reader; i++) {
    lk_outbox_stats st;
    if (lk_outbox_stats_get(ob, &st) != LK_OK)
      return (void *)1;
    usleep(1000);
  }
  return NULL;
}

typedef struct count {
  int64_t ours, dupes;
} count;

static int count_cb(void *arg, const char *tenant, int64_t book, const char *id, int64_t n) {
  (void)book;
  (void)id;
  count *c = arg;
  if (strstr(tenant, "outbox-threads")) {
    c->ours += n;
    c->dupes += n > 1;
  }
  return 0;
}

static int teardown(void **state) {
  (void)state;
  const char *names[] = {"outbox.db", "outbox.db-wal", "outbox.db-shm", "outbox.db-sender"};
  for (size_t i = 0; p.dir[0] && i < sizeof names / sizeof names[0]; i++) {
    char path[400];
    snprintf(path, sizeof path, "%s/%s", p.dir, names[i]);
    unlink(path);
  }
  lib_cleanup(&p);
  return 0;
}

static void test_enqueue_from_threads_while_sending(void **state) {
  (void)state;
  const char *args[] = {"--log", "off", NULL};
  assert_int_equal(lib_start(&p, args), 0);
  int64_t book = lib_create_book(p.port, 100000);
  assert_true(book > 0);
  snprintf(url, sizeof url, "http://127.0.0.1:%d/books/%lld/loans", p.port, (long long)book);
  snprintf(db, sizeof db, "%s/outbox.db", p.dir);
  lk_outbox_config c;
  lk_outbox_config_init_default(&c);
  c.path = db;
  assert_int_equal(lk_outbox_open(&c, &ob, NULL, 0), LK_OK);

  send_arg sa = {.cancel = lk_http_cancel_new()};
  pthread_t st, rd, th[THREADS];
  assert_int_equal(pthread_create(&st, NULL, sender, &sa), 0);
  assert_int_equal(pthread_create(&rd, NULL, reader, NULL), 0);
  for (int t = 0; t < THREADS; t++)
    assert_int_equal(pthread_create(&th[t], NULL, enqueuer, (void *)(intptr_t)t), 0);
  for (int t = 0; t < THREADS; t++) {
    void *r;
    pthread_join(th[t], &r);
    assert_null(r);
  }
  /* The sender picks up what was enqueued meanwhile; wait (bounded) until nothing is pending. */
  lk_outbox_stats s = {0};
  for (int i = 0; i < 3000; i++) {
    assert_int_equal(lk_outbox_stats_get(ob, &s), LK_OK);
    if (s.pending == 0)
      break;
    usleep(10000);
  }
  lk_http_cancel_fire(sa.cancel);
  pthread_join(st, NULL);
  stop_reader = 1;
  void *r;
  pthread_join(rd, &r);
  assert_null(r);
  assert_int_equal(sa.rc, LK_ECANCELED);
  assert_int_equal(s.pending, 0);
  assert_int_equal(s.delivered, THREADS * PER_THREAD);
  assert_int_equal(sa.st.delivered, THREADS * PER_THREAD);
  lk_http_cancel_free(sa.cancel);
  lk_outbox_close(ob);

  lk_store_config sc;
  lk_store_config_init_default(&sc);
  sc.path = p.db;
  sc.seed = false;
  lk_store *store = NULL;
  assert_int_equal(lk_store_open(&sc, &store, NULL, 0), LK_OK);
  count cnt = {0, 0};
  assert_int_equal(lk_store_loan_groups(store, true, false, 100000, count_cb, &cnt), LK_OK);
  lk_store_close(store);
  assert_int_equal(cnt.ours, THREADS * PER_THREAD);
  assert_int_equal(cnt.dupes, 0);
  assert_int_equal(lib_stop(&p), 0);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_enqueue_from_threads_while_sending, teardown),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  curl_global_cleanup();
  return rc;
}
