/* SPDX-License-Identifier: MIT */
/* The durable outbox through its public API, against a real libraryd: what enqueue stores and
 * refuses, delivery with the stored key (exactly one loan per key, counted from libraryd's own
 * records), the same key after a failed round and a restart, poisoned 4xx with their response,
 * retry, expiry and retention on a fake wall clock, the backoff between rounds, the
 * single-sender lock and the metrics. */
#include "harness.h"

#include <linkd/outbox.h>

#include "allocfail.h"
#include "fake_clock.h"
#include "loans.h"
#include "store.h"
#include "testutil.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

static lib_proc P;
static int64_t BOOK;
static char DIR_[256];
static int seq;

static int group_setup(void **state) {
  (void)state;
  const char *args[] = {"--log", "off", NULL};
  if (lib_start(&P, args) != 0)
    return -1;
  BOOK = lib_create_book(P.port, 1000000);
  const char *tmp = getenv("TMPDIR");
  snprintf(DIR_, sizeof DIR_, "%s/outbox-test-XXXXXX", tmp ? tmp : "/tmp");
  return BOOK > 0 && mkdtemp(DIR_) ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  lib_stop(&P);
  lib_cleanup(&P);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", DIR_);
  return system(cmd) == 0 ? 0 : -1;
}

/* A new outbox file for each test. */
static lk_outbox *open_new(const lk_clock *wall, char *path, size_t cap) {
  snprintf(path, cap, "%s/ob%d.db", DIR_, ++seq);
  lk_outbox_config c;
  lk_outbox_config_init_default(&c);
  c.path = path;
  c.wall_clock = wall;
  lk_outbox *ob = NULL;
  char err[256];
  assert_int_equal(lk_outbox_open(&c, &ob, err, sizeof err), LK_OK);
  return ob;
}

static lk_outbox *reopen(const char *path, const lk_clock *wall) {
  lk_outbox_config c;
  lk_outbox_config_init_default(&c);
  c.path = path;
  c.wall_clock = wall;
  lk_outbox *ob = NULL;
  assert_int_equal(lk_outbox_open(&c, &ob, NULL, 0), LK_OK);
  return ob;
}

static const char *const loan_headers[] = {"X-Tenant: outbox-test", NULL};

static void loan_msg(lk_outbox_message *m, char *url, size_t cap, int64_t book) {
  snprintf(url, cap, "http://127.0.0.1:%d/books/%lld/loans", P.port, (long long)book);
  lk_outbox_message_init(m);
  m->method = "POST";
  m->url = url;
  m->headers = loan_headers;
}

static void sender_defaults(lk_outbox_sender_config *sc) {
  lk_outbox_sender_config_init_default(sc);
  sc->concurrency = 4;
  sc->policy.deadline = LK_SEC(5);
  /* the machine is shared: a slow fsync in libraryd must not turn into a retried attempt where
   * a test counts attempts */
  sc->policy.attempt_timeout = LK_SEC(4);
  sc->policy.connect_timeout = LK_SEC(2);
  sc->policy.default_protection = false; /* each test sees its own outcomes, no shared breaker */
}

static void one_attempt(lk_http_policy *p) {
  lk_retry_config rc;
  lk_retry_config_init_default(&rc);
  rc.max_attempts = 1;
  assert_int_equal(lk_retry_policy_init(&p->retry, &rc, NULL), LK_OK);
}

/* How many of libraryd's loans carry `key` (its own records, read from its file). */
static int64_t loans_with_key(const char *key) {
  lk_store_config sc;
  lk_store_config_init_default(&sc);
  sc.path = P.db;
  sc.seed = false;
  lk_store *s = NULL;
  assert_int_equal(lk_store_open(&sc, &s, NULL, 0), LK_OK);
  int64_t n = loans_with_key_in(s, key);
  assert_true(n >= 0);
  lk_store_close(s);
  return n;
}

typedef struct got {
  int n;
  lk_outbox_entry e[64];
  char key[64][LK_IDEM_KEY_MAX];
  char headers[64][512];
  char resp_headers[64][1024];
  char resp_body[64][512];
  char method[64][16];
  char failure[64][40];
} got;

static int collect(void *ctx, const lk_outbox_entry *e) {
  got *g = ctx;
  if (g->n >= 64)
    return 1;
  int i = g->n++;
  g->e[i] = *e;
  snprintf(g->key[i], sizeof g->key[i], "%s", e->key);
  snprintf(g->headers[i], sizeof g->headers[i], "%s", e->headers);
  snprintf(g->method[i], sizeof g->method[i], "%s", e->method);
  snprintf(g->failure[i], sizeof g->failure[i], "%s", e->last_failure);
  snprintf(g->resp_headers[i], sizeof g->resp_headers[i], "%s", e->response_headers);
  snprintf(g->resp_body[i], sizeof g->resp_body[i], "%.*s", (int)e->response_body_len,
           (const char *)e->response_body);
  return 0;
}

static got *list_all(lk_outbox *ob, int state) {
  static got g;
  memset(&g, 0, sizeof g);
  assert_int_equal(lk_outbox_list(ob, state, 0, 64, collect, &g), LK_OK);
  return &g;
}

/* --- enqueue -------------------------------------------------------------------------------- */

static void test_enqueue_stores_everything_durably(void **state) {
  (void)state;
  char path[300], url[128];
  lk_outbox *ob = open_new(NULL, path, sizeof path);
  lk_outbox_message m;
  loan_msg(&m, url, sizeof url, BOOK);
  const char *hdrs[] = {"X-Tenant: outbox-test", "Content-Type:  application/json  ", NULL};
  m.headers = hdrs;
  m.body = "{\"borrower\":\"ada\"}";
  m.body_len = strlen(m.body);
  m.ttl = LK_SEC(60);
  int64_t id = 0;
  char key[LK_IDEM_KEY_MAX] = "";
  int64_t before = lk_wall_ns();
  assert_int_equal(lk_outbox_enqueue(ob, &m, &id, key), LK_OK);
  assert_true(id > 0);
  assert_int_equal(strlen(key), 36); /* a UUIDv4, made here, once */
  assert_true(lk_idem_key_valid(key, strlen(key)));
  m.tenant = "acme";
  char key2[LK_IDEM_KEY_MAX];
  assert_int_equal(lk_outbox_enqueue(ob, &m, NULL, key2), LK_OK);
  assert_int_equal(strncmp(key2, "acme:", 5), 0);
  lk_outbox_close(ob); /* what follows is read back from the file */

  ob = reopen(path, NULL);
  got *g = list_all(ob, -1);
  assert_int_equal(g->n, 2);
  assert_int_equal(g->e[0].id, id);
  assert_int_equal(g->e[0].state, LK_OUTBOX_PENDING);
  assert_string_equal(g->method[0], "POST"); /* views are valid in the callback only */
  assert_string_equal(g->key[0], key);
  assert_string_equal(g->headers[0], "X-Tenant: outbox-test\nContent-Type: application/json\n");
  assert_int_equal(g->e[0].body_len, strlen("{\"borrower\":\"ada\"}"));
  assert_true(g->e[0].created >= before && g->e[0].created <= lk_wall_ns());
  assert_int_equal(g->e[0].expires - g->e[0].created, LK_SEC(60));
  assert_int_equal(g->e[0].rounds, 0);
  assert_string_not_equal(g->key[0], g->key[1]);
  lk_outbox_stats st;
  assert_int_equal(lk_outbox_stats_get(ob, &st), LK_OK);
  assert_int_equal(st.pending, 2);
  assert_int_equal(st.enqueued_total, 2);
  lk_outbox_close(ob);
}

static void test_enqueue_refuses_what_could_not_be_sent(void **state) {
  (void)state;
  char path[300], url[128];
  lk_outbox *ob = open_new(NULL, path, sizeof path);
  lk_outbox_message m;
  loan_msg(&m, url, sizeof url, BOOK);
  const char *with_key[] = {"Idempotency-Key: mine", NULL};
  const char *injected[] = {"X-A: 1\r\nX-B: 2", NULL};
  const char *no_colon[] = {"X-A 1", NULL};
  lk_outbox_message bad[6];
  for (int i = 0; i < 6; i++)
    bad[i] = m;
  bad[0].headers = with_key; /* the key is the entry's: .key */
  bad[1].headers = injected;
  bad[2].headers = no_colon;
  bad[3].method = "BAD METHOD";
  bad[4].url = "";
  bad[5].ttl = -1;
  for (int i = 0; i < 6; i++)
    assert_int_equal(lk_outbox_enqueue(ob, &bad[i], NULL, NULL), LK_EINVAL);
  m.key = "order-42";
  assert_int_equal(lk_outbox_enqueue(ob, &m, NULL, NULL), LK_OK);
  assert_int_equal(lk_outbox_enqueue(ob, &m, NULL, NULL), LK_ECONFLICT); /* one op, one entry */
  /* A batch is all or none: one bad message stores nothing. */
  lk_outbox_message batch[3] = {m, m, m};
  batch[0].key = "b-1";
  batch[1].key = "b-2";
  batch[2].key = NULL;
  batch[2].method = "BAD METHOD";
  assert_int_equal(lk_outbox_enqueue_batch(ob, batch, 3, NULL), LK_EINVAL);
  batch[2].key = "b-1"; /* a duplicate inside the batch: the transaction rolls back */
  batch[2].method = "POST";
  assert_int_equal(lk_outbox_enqueue_batch(ob, batch, 3, NULL), LK_ECONFLICT);
  lk_outbox_stats st;
  assert_int_equal(lk_outbox_stats_get(ob, &st), LK_OK);
  assert_int_equal(st.pending, 1);
  assert_int_equal(st.enqueued_total, 1);
  int64_t ids[2];
  assert_int_equal(lk_outbox_enqueue_batch(ob, batch, 2, ids), LK_OK);
  assert_int_equal(ids[1], ids[0] + 1);
  lk_outbox_close(ob);
}

/* --- delivery ------------------------------------------------------------------------------- */

static void test_delivers_each_entry_once_with_its_key(void **state) {
  (void)state;
  char path[300], url[128];
  lk_outbox *ob = open_new(NULL, path, sizeof path);
  lk_outbox_message m[20];
  for (int i = 0; i < 20; i++)
    loan_msg(&m[i], url, sizeof url, BOOK);
  int64_t stock = lib_stock(P.port, BOOK);
  assert_int_equal(lk_outbox_enqueue_batch(ob, m, 20, NULL), LK_OK);
  lk_outbox_sender_config sc;
  sender_defaults(&sc);
  lk_outbox_send_stats st;
  assert_int_equal(lk_outbox_send(ob, &sc, &st), LK_OK);
  assert_int_equal(st.delivered, 20);
  assert_int_equal(st.rounds, 20);
  assert_int_equal(st.attempts, 20);
  got *g = list_all(ob, -1);
  assert_int_equal(g->n, 20);
  for (int i = 0; i < 20; i++) {
    assert_int_equal(g->e[i].state, LK_OUTBOX_DELIVERED);
    assert_int_equal(g->e[i].last_status, 201);
    assert_true(g->e[i].done > 0);
    assert_int_equal(loans_with_key(g->key[i]), 1); /* sent with the stored key, applied once */
  }
  assert_int_equal(lib_stock(P.port, BOOK), stock - 20);
  /* Nothing is due any more: a second run sends nothing. */
  assert_int_equal(lk_outbox_send(ob, &sc, &st), LK_OK);
  assert_int_equal(st.rounds, 0);
  lk_outbox_stats s;
  assert_int_equal(lk_outbox_stats_get(ob, &s), LK_OK);
  assert_int_equal(s.delivered, 20);
  assert_int_equal(s.delivered_total, 20);
  assert_int_equal(s.attempts_total, 20);
  assert_int_equal(s.pending, 0);
  lk_outbox_close(ob);
}

static void add_fault(const char *rule) {
  http_res r;
  http_send(P.admin_port, "POST", "/admin/faults", NULL, rule, &r);
  assert_int_equal(r.status, 201);
  http_res_free(&r);
}

static void clear_faults(void) {
  http_res r;
  http_send(P.admin_port, "DELETE", "/admin/faults", NULL, NULL, &r);
  assert_true(r.status == 200 || r.status == 204);
  http_res_free(&r);
}

/* The server applies the loan and the connection is reset before the answer: the round fails,
 * the entry stays pending, and a sender started later (a new handle on the file) sends it again
 * with the same key; libraryd replays its stored answer instead of lending a second copy. */
static void test_same_key_after_a_lost_answer_and_a_restart(void **state) {
  (void)state;
  char path[300], url[128], rule[160];
  lk_outbox *ob = open_new(NULL, path, sizeof path);
  lk_outbox_message m;
  loan_msg(&m, url, sizeof url, BOOK);
  char key[LK_IDEM_KEY_MAX];
  assert_int_equal(lk_outbox_enqueue(ob, &m, NULL, key), LK_OK);
  snprintf(rule, sizeof rule, "route=POST /books/%lld/loans,kind=reset_after_processing,count=1",
           (long long)BOOK);
  add_fault(rule);
  lk_outbox_sender_config sc;
  sender_defaults(&sc);
  one_attempt(&sc.policy);
  lk_outbox_send_stats st;
  assert_int_equal(lk_outbox_send(ob, &sc, &st), LK_OK);
  clear_faults();
  assert_int_equal(st.failed, 1);
  got *g = list_all(ob, -1);
  assert_int_equal(g->e[0].state, LK_OUTBOX_PENDING);
  assert_int_equal(g->e[0].rounds, 1);
  assert_string_equal(g->failure[0], "RESET_AFTER_SEND");
  assert_true(g->e[0].next_round > g->e[0].created);
  assert_int_equal(loans_with_key(key), 1); /* applied, though the answer was lost */
  lk_outbox_close(ob);

  ob = reopen(path, NULL); /* the restart */
  sc.backoff.base = LK_MS(1);
  sc.backoff.max = LK_MS(1);
  sc.until = LK_OUTBOX_UNTIL_EMPTY; /* waits out the next round's delay */
  assert_int_equal(lk_outbox_send(ob, &sc, &st), LK_OK);
  assert_int_equal(st.delivered, 1);
  g = list_all(ob, -1);
  assert_int_equal(g->e[0].state, LK_OUTBOX_DELIVERED);
  assert_string_equal(g->key[0], key);
  assert_int_equal(g->e[0].rounds, 2);
  assert_non_null(strstr(g->resp_headers[0], "Idempotent-Replayed: true"));
  assert_int_equal(loans_with_key(key), 1);
  lk_outbox_close(ob);
}

static void test_permanent_4xx_is_poisoned_with_its_response(void **state) {
  (void)state;
  char path[300], url[128], url0[128], url503[128];
  lk_outbox *ob = open_new(NULL, path, sizeof path);
  int64_t empty = lib_create_book(P.port, 0);
  int64_t busy = lib_create_book(P.port, 10);
  assert_true(empty > 0 && busy > 0);
  lk_outbox_message m[3];
  loan_msg(&m[0], url, sizeof url, 999999);     /* no such book: 404 */
  loan_msg(&m[1], url0, sizeof url0, empty);    /* no copy left: 409 */
  loan_msg(&m[2], url503, sizeof url503, busy); /* 503 with when=before: retried later */
  assert_int_equal(lk_outbox_enqueue_batch(ob, m, 3, NULL), LK_OK);
  char rule[160];
  snprintf(rule, sizeof rule, "route=POST /books/%lld/loans,kind=status,code=503", (long long)busy);
  add_fault(rule);
  lk_outbox_sender_config sc;
  sender_defaults(&sc);
  lk_retry_config rc;
  lk_retry_config_init_default(&rc);
  rc.max_attempts = 2;
  rc.backoff.base = LK_MS(1);
  rc.backoff.max = LK_MS(1);
  assert_int_equal(lk_retry_policy_init(&sc.policy.retry, &rc, NULL), LK_OK);
  lk_outbox_send_stats st;
  assert_int_equal(lk_outbox_send(ob, &sc, &st), LK_OK);
  clear_faults();
  assert_int_equal(st.poisoned, 2);
  assert_int_equal(st.failed, 1);
  got *g = list_all(ob, -1);
  assert_int_equal(g->e[0].state, LK_OUTBOX_POISONED);
  assert_int_equal(g->e[0].last_status, 404);
  assert_int_equal(g->e[0].last_error, LK_EHTTP);
  assert_string_equal(g->failure[0], "CLIENT_4XX");
  assert_int_equal(g->e[0].attempts, 1); /* never retried */
  assert_non_null(strstr(g->resp_body[0], "not_found"));
  assert_non_null(strstr(g->resp_headers[0], "Content-Type: application/json"));
  assert_int_equal(g->e[1].state, LK_OUTBOX_POISONED);
  assert_int_equal(g->e[1].last_status, 409);
  assert_int_equal(g->e[2].state, LK_OUTBOX_PENDING); /* a 5xx is not poison */
  assert_int_equal(g->e[2].last_status, 503);
  assert_int_equal(g->e[2].attempts, 2);
  assert_int_equal(loans_with_key(g->key[2]), 0);

  /* A poisoned entry is not sent again... */
  int64_t id404 = g->e[0].id;
  assert_int_equal(lk_outbox_send(ob, &sc, &st), LK_OK);
  assert_int_equal(st.poisoned, 0);
  /* ...until retried by hand: back to pending with its key, sent, poisoned again. */
  int64_t n = 0;
  assert_int_equal(lk_outbox_retry(ob, g->e[2].id, 0, &n), LK_ESTATE); /* pending */
  assert_int_equal(lk_outbox_retry(ob, 424242, 0, &n), LK_ENOTFOUND);
  assert_int_equal(lk_outbox_retry(ob, id404, 0, &n), LK_OK);
  assert_int_equal(n, 1);
  sc.max_rounds = 1; /* only the retried one is due now; the 503 one waits for its round */
  assert_int_equal(lk_outbox_send(ob, &sc, &st), LK_OK);
  assert_int_equal(st.poisoned, 1);
  g = list_all(ob, LK_OUTBOX_POISONED);
  assert_int_equal(g->n, 2);
  assert_int_equal(g->e[0].rounds, 2);
  lk_outbox_stats s;
  assert_int_equal(lk_outbox_stats_get(ob, &s), LK_OK);
  assert_int_equal(s.poisoned, 2);
  assert_int_equal(s.poisoned_total, 3);
  assert_int_equal(s.retried_total, 1);
  assert_int_equal(lk_outbox_retry(ob, 0, 0, &n), LK_OK); /* every poisoned one */
  assert_int_equal(n, 2);
  lk_outbox_close(ob);
}

/* A 4xx that says when to come back is not poison. libraryd answers a resend with 409 and
 * Retry-After: 1 while the first request with the key is still executing, which is what a
 * sender restarted after a crash sends; poisoning it lost entries in the crash test. */
static void test_4xx_with_retry_after_is_retried_not_poisoned(void **state) {
  (void)state;
  lk_fake_clock wall;
  lk_fake_clock_init(&wall, lk_wall_ns());
  char path[300], url[128], rule[160];
  lk_outbox *ob = open_new(&wall.base, path, sizeof path);
  lk_outbox_message m;
  loan_msg(&m, url, sizeof url, BOOK);
  char key[LK_IDEM_KEY_MAX];
  assert_int_equal(lk_outbox_enqueue(ob, &m, NULL, key), LK_OK);
  snprintf(rule, sizeof rule, "route=POST /books/%lld/loans,kind=status,code=409,retry_after=3",
           (long long)BOOK);
  add_fault(rule);
  lk_outbox_sender_config sc;
  sender_defaults(&sc);
  sc.backoff.jitter = LK_JITTER_NONE;
  sc.backoff.base = LK_MS(10);
  int64_t t0 = wall.base.now(&wall.base);
  lk_outbox_send_stats st;
  assert_int_equal(lk_outbox_send(ob, &sc, &st), LK_OK);
  clear_faults();
  assert_int_equal(st.poisoned, 0);
  assert_int_equal(st.failed, 1);
  got *g = list_all(ob, -1);
  assert_int_equal(g->e[0].state, LK_OUTBOX_PENDING);
  assert_int_equal(g->e[0].last_status, 409);
  assert_int_equal(g->e[0].next_round, t0 + LK_SEC(3)); /* the server's delay, not the backoff */
  lk_fake_clock_advance(&wall, LK_SEC(3));
  assert_int_equal(lk_outbox_send(ob, &sc, &st), LK_OK);
  assert_int_equal(st.delivered, 1);
  assert_int_equal(loans_with_key(key), 1);
  lk_outbox_close(ob);
}

/* An outcome that cannot be written (another process holds the file's write lock longer than
 * busy_timeout_ms) ends the run with LK_EIO and leaves the entry PENDING: the next run resends
 * it with the same key and libraryd replays it, so the loan is still applied once. */
typedef struct locker {
  const char *path;
  int rule_matched_port;
  int rc;
  atomic_int sender_done; /* set once lk_outbox_send has returned */
} locker;

static int fault_matched(void) {
  http_res r;
  http_get(P.admin_port, "/admin/faults", &r);
  json_t *j = http_json(&r);
  json_t *rule = json_array_get(json_object_get(j, "rules"), 0);
  int n = rule ? (int)json_integer_value(json_object_get(rule, "matched")) : -1;
  json_decref(j);
  http_res_free(&r);
  return n;
}

static void *hold_write_lock(void *arg) {
  locker *l = arg;
  l->rc = -1;
  /* wait (bounded) until libraryd has the request, which it holds for 1 s */
  for (int i = 0; i < 500 && fault_matched() < 1; i++)
    sleep_ms(10);
  sqlite3 *db = NULL;
  if (sqlite3_open(l->path, &db) != SQLITE_OK)
    return NULL;
  if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK) {
    l->rc = 0;
    /* until the sender has given up recording (its busy timeout is 50 ms): held for as long as
     * it takes, not for a time a loaded machine might outlast (bounded at 20 s) */
    for (int i = 0; i < 2000 && !atomic_load(&l->sender_done); i++)
      sleep_ms(10);
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
  }
  sqlite3_close(db);
  return NULL;
}

static void test_unrecorded_outcome_is_resent_with_its_key(void **state) {
  (void)state;
  char path[300], url[128], rule[160];
  snprintf(path, sizeof path, "%s/ob%d.db", DIR_, ++seq);
  lk_outbox_config c;
  lk_outbox_config_init_default(&c);
  c.path = path;
  c.busy_timeout_ms = 50;
  lk_outbox *ob = NULL;
  assert_int_equal(lk_outbox_open(&c, &ob, NULL, 0), LK_OK);
  lk_outbox_message m;
  loan_msg(&m, url, sizeof url, BOOK);
  char key[LK_IDEM_KEY_MAX];
  assert_int_equal(lk_outbox_enqueue(ob, &m, NULL, key), LK_OK);
  snprintf(rule, sizeof rule, "route=POST /books/%lld/loans,kind=latency,delay=1s,count=1",
           (long long)BOOK);
  add_fault(rule);
  locker l = {path, 0, -1, 0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, hold_write_lock, &l), 0);
  lk_outbox_sender_config sc;
  sender_defaults(&sc);
  lk_outbox_send_stats st;
  int rc = lk_outbox_send(ob, &sc, &st);
  atomic_store(&l.sender_done, 1);
  pthread_join(th, NULL);
  clear_faults();
  assert_int_equal(l.rc, 0);
  assert_int_equal(rc, LK_EIO);
  assert_int_equal(st.rounds, 0); /* nothing recorded */
  assert_int_equal(loans_with_key(key), 1); /* but libraryd applied it */
  got *g = list_all(ob, -1);
  assert_int_equal(g->e[0].state, LK_OUTBOX_PENDING);
  assert_int_equal(g->e[0].rounds, 0);
  assert_int_equal(lk_outbox_send(ob, &sc, &st), LK_OK);
  assert_int_equal(st.delivered, 1);
  g = list_all(ob, -1);
  assert_non_null(strstr(g->resp_headers[0], "Idempotent-Replayed: true"));
  assert_int_equal(loans_with_key(key), 1);
  lk_outbox_close(ob);
}

/* --- time: expiry, retention, backoff between rounds ----------------------------------------- */

static void test_expiry_and_retention(void **state) {
  (void)state;
  lk_fake_clock wall;
  lk_fake_clock_init(&wall, lk_wall_ns());
  char path[300], url[128];
  lk_outbox *ob = open_new(&wall.base, path, sizeof path);
  lk_outbox_message m[2];
  loan_msg(&m[0], url, sizeof url, BOOK);
  loan_msg(&m[1], url, sizeof url, BOOK);
  m[0].ttl = LK_SEC(1);
  m[1].ttl = LK_SEC(3600);
  int64_t ids[2];
  assert_int_equal(lk_outbox_enqueue_batch(ob, m, 2, ids), LK_OK);
  lk_fake_clock_advance(&wall, LK_SEC(2));
  lk_outbox_sender_config sc;
  sender_defaults(&sc);
  lk_outbox_send_stats st;
  assert_int_equal(lk_outbox_send(ob, &sc, &st), LK_OK);
  assert_int_equal(st.expired, 1);
  assert_int_equal(st.delivered, 1);
  got *g = list_all(ob, -1);
  assert_int_equal(g->e[0].state, LK_OUTBOX_EXPIRED);
  assert_int_equal(g->e[0].rounds, 0);
  assert_int_equal(loans_with_key(g->key[0]), 0); /* nothing is sent after the expiry */
  assert_int_equal(g->e[1].state, LK_OUTBOX_DELIVERED);
  int64_t n = 0;
  assert_int_equal(lk_outbox_retry(ob, ids[0], 0, &n), LK_ESTATE); /* needs a new expiry */
  /* Kept for the retention window (7 days by default), then purged. */
  int64_t del = -1;
  assert_int_equal(lk_outbox_purge(ob, -1, false, &del), LK_OK);
  assert_int_equal(del, 0);
  lk_fake_clock_advance(&wall, LK_SEC(7 * 86400) - LK_SEC(1));
  assert_int_equal(lk_outbox_purge(ob, -1, false, &del), LK_OK);
  assert_int_equal(del, 0);
  lk_fake_clock_advance(&wall, LK_SEC(2));
  assert_int_equal(lk_outbox_purge(ob, -1, false, &del), LK_OK);
  assert_int_equal(del, 2);
  lk_outbox_stats s;
  assert_int_equal(lk_outbox_stats_get(ob, &s), LK_OK);
  assert_int_equal(s.delivered + s.expired + s.pending, 0);
  assert_int_equal(s.purged_total, 2);
  assert_int_equal(s.expired_total, 1);
  assert_int_equal(s.delivered_total, 1); /* totals outlive the rows */
  lk_outbox_close(ob);
}

static void test_poisoned_kept_until_purged_on_request(void **state) {
  (void)state;
  lk_fake_clock wall;
  lk_fake_clock_init(&wall, lk_wall_ns());
  char path[300], url[128];
  lk_outbox *ob = open_new(&wall.base, path, sizeof path);
  lk_outbox_message m;
  loan_msg(&m, url, sizeof url, 999999);
  assert_int_equal(lk_outbox_enqueue(ob, &m, NULL, NULL), LK_OK);
  lk_outbox_sender_config sc;
  sender_defaults(&sc);
  assert_int_equal(lk_outbox_send(ob, &sc, NULL), LK_OK);
  lk_fake_clock_advance(&wall, LK_SEC(30 * 86400));
  int64_t del = -1;
  assert_int_equal(lk_outbox_purge(ob, -1, false, &del), LK_OK);
  assert_int_equal(del, 0);
  assert_int_equal(lk_outbox_purge(ob, -1, true, &del), LK_OK);
  assert_int_equal(del, 1);
  lk_outbox_close(ob);
}

/* A port nothing listens on. */
static int dead_port(void) {
  lib_proc q;
  const char *args[] = {"--log", "off", NULL};
  assert_int_equal(lib_start(&q, args), 0);
  int port = q.port;
  lib_stop(&q);
  lib_cleanup(&q);
  return port;
}

static void test_failed_round_waits_its_backoff(void **state) {
  (void)state;
  lk_fake_clock wall;
  lk_fake_clock_init(&wall, lk_wall_ns());
  char path[300], url[128];
  lk_outbox *ob = open_new(&wall.base, path, sizeof path);
  snprintf(url, sizeof url, "http://127.0.0.1:%d/books/1/loans", dead_port());
  lk_outbox_message m;
  lk_outbox_message_init(&m);
  m.method = "POST";
  m.url = url;
  assert_int_equal(lk_outbox_enqueue(ob, &m, NULL, NULL), LK_OK);
  lk_outbox_sender_config sc;
  sender_defaults(&sc);
  one_attempt(&sc.policy);
  sc.backoff.jitter = LK_JITTER_NONE;
  sc.backoff.base = LK_SEC(1);
  sc.backoff.max = LK_SEC(60);
  lk_outbox_send_stats st;
  int64_t t0 = wall.base.now(&wall.base);
  assert_int_equal(lk_outbox_send(ob, &sc, &st), LK_OK);
  assert_int_equal(st.rounds, 1); /* idle: the next round is not due yet */
  got *g = list_all(ob, -1);
  assert_int_equal(g->e[0].state, LK_OUTBOX_PENDING);
  assert_string_equal(g->failure[0], "CONNECT_REFUSED");
  assert_int_equal(g->e[0].next_round, t0 + LK_SEC(1));
  lk_fake_clock_advance(&wall, LK_SEC(1));
  assert_int_equal(lk_outbox_send(ob, &sc, &st), LK_OK);
  assert_int_equal(st.rounds, 1);
  g = list_all(ob, -1);
  assert_int_equal(g->e[0].rounds, 2);
  assert_int_equal(g->e[0].next_round, t0 + LK_SEC(1) + LK_SEC(2)); /* exponential */
  /* Never past the expiry (24 h): the round after that is the one that expires it. */
  lk_fake_clock_advance(&wall, LK_SEC(86400));
  assert_int_equal(lk_outbox_send(ob, &sc, &st), LK_OK);
  assert_int_equal(st.expired, 1);
  assert_int_equal(st.rounds, 0);
  lk_outbox_close(ob);
}

/* --until idle against a server that is down ends: each entry gets one call per idle run. It
 * used to go on for as long as failed entries' rounds (full jitter, here at most 1 ms) kept
 * coming due while it ran; max_rounds bounds the run here, so the old sender fails the test
 * with 400 calls instead of hanging. An entry due after the run started still gets its call. */
static void test_idle_ends_against_a_down_server(void **state) {
  (void)state;
  char path[300], url[128];
  lk_outbox *ob = open_new(NULL, path, sizeof path);
  snprintf(url, sizeof url, "http://127.0.0.1:%d/books/1/loans", dead_port());
  lk_outbox_message m[5];
  for (int i = 0; i < 5; i++) {
    lk_outbox_message_init(&m[i]);
    m[i].method = "POST";
    m[i].url = url;
  }
  assert_int_equal(lk_outbox_enqueue_batch(ob, m, 5, NULL), LK_OK);
  lk_outbox_sender_config sc;
  sender_defaults(&sc);
  one_attempt(&sc.policy);
  sc.concurrency = 2;
  sc.backoff.base = LK_MS(1);
  sc.backoff.max = LK_MS(1);
  sc.max_rounds = 400;
  lk_outbox_send_stats st;
  assert_int_equal(lk_outbox_send(ob, &sc, &st), LK_OK);
  assert_int_equal(st.rounds, 5);
  assert_int_equal(st.failed, 5);
  got *g = list_all(ob, LK_OUTBOX_PENDING);
  assert_int_equal(g->n, 5);
  for (int i = 0; i < 5; i++)
    assert_int_equal(g->e[i].rounds, 1);
  /* the next idle run makes the next round of each */
  sleep_ms(5);
  assert_int_equal(lk_outbox_send(ob, &sc, &st), LK_OK);
  assert_int_equal(st.rounds, 5);
  g = list_all(ob, LK_OUTBOX_PENDING);
  for (int i = 0; i < 5; i++)
    assert_int_equal(g->e[i].rounds, 2);
  lk_outbox_close(ob);
}

/* --- one sender per file ---------------------------------------------------------------------- */

static void test_one_sender_per_file(void **state) {
  (void)state;
  char path[300], url[128], lock[320];
  lk_outbox *ob = open_new(NULL, path, sizeof path);
  lk_outbox_message m;
  loan_msg(&m, url, sizeof url, BOOK);
  assert_int_equal(lk_outbox_enqueue(ob, &m, NULL, NULL), LK_OK);
  snprintf(lock, sizeof lock, "%s-sender", path);
  int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  assert_true(fd >= 0);
  assert_int_equal(flock(fd, LOCK_EX), 0); /* as another sender would hold it */
  lk_outbox_sender_config sc;
  sender_defaults(&sc);
  lk_outbox_send_stats st;
  assert_int_equal(lk_outbox_send(ob, &sc, &st), LK_EAGAIN);
  assert_int_equal(st.rounds, 0);
  close(fd);
  assert_int_equal(lk_outbox_send(ob, &sc, &st), LK_OK);
  assert_int_equal(st.delivered, 1);
  lk_outbox_close(ob);
}

static void test_bad_sender_config(void **state) {
  (void)state;
  char path[300];
  lk_outbox *ob = open_new(NULL, path, sizeof path);
  lk_outbox_sender_config sc;
  sender_defaults(&sc);
  sc.concurrency = 0;
  assert_int_equal(lk_outbox_send(ob, &sc, NULL), LK_ECONFIG);
  sender_defaults(&sc);
  sc.policy.deadline = 0;
  assert_int_equal(lk_outbox_send(ob, &sc, NULL), LK_ECONFIG);
  sender_defaults(&sc);
  sc.backoff.base = 0;
  assert_int_equal(lk_outbox_send(ob, &sc, NULL), LK_ECONFIG);
  lk_outbox_close(ob);
  lk_outbox_config c;
  lk_outbox_config_init_default(&c);
  c.path = "/nonexistent-dir-linkd/x.db";
  char err[256];
  assert_int_equal(lk_outbox_open(&c, &ob, err, sizeof err), LK_ESYS);
  assert_null(ob);
  assert_non_null(strstr(err, "does not exist"));
}

/* --- the CLI ------------------------------------------------------------------------------------
 */

/* Runs `linkd outbox ARGS` through the shell; stdout (and stderr if `merge`) into out; returns
 * the exit status. */
static int run_cli(char *out, size_t cap, bool merge, const char *args) {
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "'%s' outbox %s %s", LINKD_BIN, args, merge ? "2>&1" : "2>/dev/null");
  FILE *f = popen(cmd, "r");
  assert_non_null(f);
  size_t n = fread(out, 1, cap - 1, f);
  out[n] = '\0';
  int st = pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

__attribute__((format(printf, 3, 4))) static int cli(char *out, size_t cap, const char *fmt, ...);
static int cli(char *out, size_t cap, const char *fmt, ...) {
  char args[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  return run_cli(out, cap, false, args);
}

static void test_cli(void **state) {
  (void)state;
  char db[300], out[8192], url[128];
  snprintf(db, sizeof db, "%s/cli%d.db", DIR_, ++seq);
  snprintf(url, sizeof url, "http://127.0.0.1:%d/books/%lld/loans", P.port, (long long)BOOK);
  assert_int_equal(cli(out, sizeof out, "enqueue --db '%s' -H 'X-Tenant: outbox-cli' %s", db, url),
                   0);
  long long id = 0;
  char key[LK_IDEM_KEY_MAX];
  assert_int_equal(sscanf(out, "%lld %255s", &id, key), 2);
  assert_int_equal(id, 1);
  assert_int_equal(strlen(key), 36);
  assert_int_equal(cli(out, sizeof out, "enqueue --db '%s' --repeat 3 --tenant t %s", db, url), 0);
  assert_non_null(strstr(out, "\n4 t:"));
  assert_int_equal(cli(out, sizeof out, "enqueue --db '%s' -H 'Idempotency-Key: x' %s", db, url),
                   64);
  assert_int_equal(cli(out, sizeof out, "enqueue --db '%s'", db), 64); /* no URL */
  assert_int_equal(cli(out, sizeof out, "run --db '%s' --idempotency-key k", db), 64);
  assert_int_equal(cli(out, sizeof out, "list --db '%s' --state pending", db), 0);
  assert_int_equal(strncmp(out, "1 pending 0 0 0 POST ", 21), 0);
  assert_int_equal(cli(out, sizeof out, "run --db '%s' --deadline 5s --attempt-timeout 4s --connect-timeout 2s", db), 0);
  assert_int_equal(loans_with_key(key), 1);
  assert_int_equal(cli(out, sizeof out, "list --db '%s' --state delivered --json --limit 1", db),
                   0);
  assert_non_null(strstr(out, "\"state\":\"delivered\""));
  assert_non_null(strstr(out, "\"last_status\":201"));
  assert_non_null(strstr(out, key));
  assert_int_equal(cli(out, sizeof out, "stats --db '%s'", db), 0);
  assert_non_null(strstr(out, "delivered 4\n"));
  assert_non_null(strstr(out, "attempts_total 4\n"));
  assert_int_equal(cli(out, sizeof out, "stats --db '%s' --prometheus", db), 0);
  assert_non_null(strstr(out, "linkd_outbox_delivered_total 4\n"));
  assert_int_equal(cli(out, sizeof out, "retry --db '%s' 1", db), 1); /* delivered: not retried */
  assert_int_equal(cli(out, sizeof out, "retry --db '%s' --poisoned", db), 0);
  assert_string_equal(out, "0 entries back to pending\n");
  assert_int_equal(cli(out, sizeof out, "purge --db '%s'", db), 0);
  assert_string_equal(out, "0 entries purged\n");
  assert_int_equal(cli(out, sizeof out, "purge --db '%s' --older-than 0s", db), 0);
  assert_string_equal(out, "4 entries purged\n");
  /* A second sender on the file: exit 75 at once. */
  char lock[320];
  snprintf(lock, sizeof lock, "%s-sender", db);
  int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  assert_int_equal(flock(fd, LOCK_EX), 0);
  assert_int_equal(cli(out, sizeof out, "run --db '%s'", db), 75);
  close(fd);
  assert_int_equal(cli(out, sizeof out, "bogus --db '%s'", db), 64);
  assert_int_equal(cli(out, sizeof out, "--help"), 0);
  assert_non_null(strstr(out, "usage: linkd outbox COMMAND"));
}

/* Runs `linkd outbox ARGS` with stderr into out as well. */
__attribute__((format(printf, 3, 4))) static int cli2(char *out, size_t cap, const char *fmt, ...);
static int cli2(char *out, size_t cap, const char *fmt, ...) {
  char args[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  return run_cli(out, cap, true, args);
}

/* A damaged file: every command that fails on it says so, with the file and the error, and
 * exits non-zero (they used to exit 1 without a word, `list` after the rows it could read);
 * enqueue says whether the entries were stored. */
static void test_cli_damaged_file(void **state) {
  (void)state;
  char db[300], out[16384], keys[100][16];
  static char body[3000];
  memset(body, 'x', sizeof body);
  lk_outbox *ob = open_new(NULL, db, sizeof db);
  lk_outbox_message m[100];
  for (int i = 0; i < 100; i++) {
    lk_outbox_message_init(&m[i]);
    m[i].method = "POST";
    m[i].url = "http://127.0.0.1:1/x";
    m[i].body = body;
    m[i].body_len = sizeof body;
    snprintf(keys[i], sizeof keys[i], "damaged-%03d", i);
    m[i].key = keys[i];
  }
  assert_int_equal(lk_outbox_enqueue_batch(ob, m, 100, NULL), LK_OK);
  lk_outbox_close(ob); /* checkpoints the WAL into the file */
  unsigned char ff[2000];
  memset(ff, 0xff, sizeof ff);
  int fd = open(db, O_WRONLY | O_CLOEXEC);
  assert_true(fd >= 0);
  /* the entries' root (page 2) and the index that stats reads alone (page 4, entries_state).
   * The index page is damaged from its header on: SQLite masks a cell offset into its page
   * rather than checking it, so damaged cell pointers alone may read back as garbage without
   * an error, depending on the stored times; a bad page type is always an error. */
  assert_int_equal(pwrite(fd, ff, sizeof ff, 4196), (ssize_t)sizeof ff);
  assert_int_equal(pwrite(fd, ff, sizeof ff, 3 * 4096), (ssize_t)sizeof ff);
  close(fd);
  char want[400];
  snprintf(want, sizeof want, "stats: %s: input/output error", db);
  assert_int_equal(cli2(out, sizeof out, "stats --db '%s'", db), 1);
  assert_non_null(strstr(out, want));
  snprintf(want, sizeof want, "list: %s: input/output error", db);
  assert_int_equal(cli2(out, sizeof out, "list --db '%s'", db), 1);
  assert_non_null(strstr(out, want));
  assert_int_equal(cli2(out, sizeof out, "list --db '%s' --state pending", db), 1);
  assert_non_null(strstr(out, want));
  /* Stored or not, it says which: "stored ..., but could not read them back" keeps a script
   * from enqueueing the entry twice. How SQLite meets this damage here varies from run to run
   * (the insert may go through, and the read back may fail or not): each outcome must be told. */
  int rc = cli2(out, sizeof out, "enqueue --db '%s' --key damaged-new http://127.0.0.1:1/x", db);
  if (rc == 0) {
    assert_string_equal(out, "101 damaged-new\n");
  } else {
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, db));
    if (!strstr(out, "nothing was stored"))
      assert_non_null(strstr(out, "1 entry stored in"));
    if (strstr(out, "1 entry stored in"))
      assert_non_null(strstr(out, "(ids 101 to 101), but could not read it back: input/output "
                                  "error; do not enqueue it again"));
  }
}

/* The commands that work on stored entries do not create a missing outbox (a mistyped --db
 * used to leave an empty one behind and report zeros), and no command adds the outbox's tables
 * to another application's SQLite file. */
static void test_cli_missing_or_foreign_file(void **state) {
  (void)state;
  char out[8192], path[300];
  const char *url = "http://127.0.0.1:1/x";
  snprintf(path, sizeof path, "%s/typo.db", DIR_);
  const char *readers[] = {"list", "stats", "stats --prometheus", "purge", "retry --poisoned"};
  for (size_t i = 0; i < sizeof readers / sizeof readers[0]; i++) {
    assert_int_equal(cli2(out, sizeof out, "%s --db '%s'", readers[i], path), 66);
    assert_non_null(strstr(out, "no outbox at"));
    assert_non_null(strstr(out, path));
    assert_int_equal(access(path, F_OK), -1); /* not created */
  }
  /* another application's SQLite file: not adopted */
  snprintf(path, sizeof path, "%s/other%d.db", DIR_, ++seq);
  sqlite3 *other;
  assert_int_equal(sqlite3_open(path, &other), SQLITE_OK);
  assert_int_equal(sqlite3_exec(other, "CREATE TABLE users(name TEXT)", NULL, NULL, NULL),
                   SQLITE_OK);
  sqlite3_close(other);
  assert_int_equal(cli2(out, sizeof out, "enqueue --db '%s' %s", path, url), 1);
  assert_non_null(strstr(out, "is not an outbox"));
  assert_int_equal(cli2(out, sizeof out, "run --db '%s'", path), 1);
  assert_int_equal(sqlite3_open(path, &other), SQLITE_OK);
  sqlite3_stmt *st;
  assert_int_equal(sqlite3_prepare_v2(other, "SELECT count(*) FROM sqlite_master", -1, &st, NULL),
                   SQLITE_OK);
  assert_int_equal(sqlite3_step(st), SQLITE_ROW);
  assert_int_equal(sqlite3_column_int(st, 0), 1); /* only the users table */
  sqlite3_finalize(st);
  sqlite3_close(other);
}

/* --ttl 0s used to become the default 24 h (the library's meaning of a ttl of 0). */
static void test_cli_ttl_zero(void **state) {
  (void)state;
  char db[300], out[8192];
  snprintf(db, sizeof db, "%s/ttl%d.db", DIR_, ++seq);
  assert_int_equal(cli2(out, sizeof out, "enqueue --db '%s' --ttl 0s http://127.0.0.1:1/x", db),
                   64);
  assert_non_null(strstr(out, "--ttl 0s: an entry needs time to be delivered"));
  assert_int_equal(access(db, F_OK), -1);
  assert_int_equal(cli2(out, sizeof out, "enqueue --db '%s' --ttl 1h http://127.0.0.1:1/x", db), 0);
  assert_int_equal(cli2(out, sizeof out, "list --db '%s' --json", db), 0);
  long long created = 0, expires = 0;
  const char *c = strstr(out, "\"created_ns\":"), *e = strstr(out, "\"expires_ns\":");
  assert_true(c && e);
  assert_int_equal(sscanf(c, "\"created_ns\":%lld", &created), 1);
  assert_int_equal(sscanf(e, "\"expires_ns\":%lld", &expires), 1);
  assert_int_equal(expires - created, LK_SEC(3600));
  assert_int_equal(cli2(out, sizeof out, "retry --db '%s' --poisoned --ttl 0s", db), 64);
  /* the round backoff: a --round-max below --round-base is an error (it was raised unsaid), and
   * a bad one is refused before anything runs */
  assert_int_equal(
      cli2(out, sizeof out, "run --db '%s' --round-base 1s --round-max 100ms --until idle", db),
      64);
  assert_non_null(strstr(out, "--round-max 100ms is shorter than --round-base"));
  assert_int_equal(cli2(out, sizeof out, "run --db '%s' --round-base 0s --until idle", db), 64);
  assert_null(strstr(out, "calls ("));
}

/* `run` ends against a server that is down, and its exit code says whether everything was
 * delivered: 0 (nothing left pending, nothing set aside), 2 (entries still pending: how many and
 * when the next is due), 3 (this run poisoned or expired entries). --until idle used to go on
 * while failed entries' rounds kept coming due (--max-rounds stops the old one at 200 calls), and
 * exited 0 whatever it left. */
static void test_cli_run_exit_codes(void **state) {
  (void)state;
  char db[300], out[8192], down[128], up[128], gone[128];
  snprintf(db, sizeof db, "%s/exit%d.db", DIR_, ++seq);
  snprintf(down, sizeof down, "http://127.0.0.1:%d/books/1/loans", dead_port());
  const char *fast = "--max-attempts 1 --round-base 1ms --round-max 2ms --max-rounds 200";
  assert_int_equal(cli2(out, sizeof out, "enqueue --db '%s' --repeat 20 %s", db, down), 0);
  assert_int_equal(cli2(out, sizeof out, "run --db '%s' --until idle %s", db, fast), 2);
  assert_non_null(strstr(out, "20 calls (20 attempts): 0 delivered, 0 poisoned, 0 expired"));
  assert_non_null(strstr(out, "20 entries still pending; the next is due "));
  /* empty: bounded by the entries' expiry; an expired entry is set aside (3) */
  snprintf(db, sizeof db, "%s/exit%d.db", DIR_, ++seq);
  assert_int_equal(cli2(out, sizeof out, "enqueue --db '%s' --ttl 300ms %s", db, down), 0);
  assert_int_equal(cli2(out, sizeof out,
                        "run --db '%s' --until empty --max-attempts 1 "
                        "--round-base 1ms --round-max 2ms",
                        db),
                   3);
  assert_non_null(strstr(out, "1 expired"));
  assert_null(strstr(out, "still pending"));
  /* a server that is up: everything delivered is 0; a permanent 404 is set aside (3) */
  snprintf(db, sizeof db, "%s/exit%d.db", DIR_, ++seq);
  snprintf(up, sizeof up, "http://127.0.0.1:%d/books/%lld/loans", P.port, (long long)BOOK);
  snprintf(gone, sizeof gone, "http://127.0.0.1:%d/books/999999/loans", P.port);
  const char *pol = "--deadline 5s --attempt-timeout 4s --connect-timeout 2s";
  assert_int_equal(
      cli2(out, sizeof out, "enqueue --db '%s' --repeat 3 -H 'X-Tenant: outbox-exit' %s", db, up),
      0);
  assert_int_equal(cli2(out, sizeof out, "run --db '%s' --until idle %s", db, pol), 0);
  assert_non_null(strstr(out, "3 delivered"));
  assert_null(strstr(out, "still pending"));
  assert_int_equal(
      cli2(out, sizeof out, "enqueue --db '%s' -H 'X-Tenant: outbox-exit' %s", db, gone), 0);
  assert_int_equal(cli2(out, sizeof out, "run --db '%s' --until idle %s", db, pol), 3);
  assert_non_null(strstr(out, "1 poisoned"));
  /* poisoned by an earlier run, nothing pending: this run has nothing to say */
  assert_int_equal(cli2(out, sizeof out, "run --db '%s' --until idle %s", db, pol), 0);
}

/* Each bad part of a message is refused with its own reason (they were all "enqueue: invalid
 * argument"), before the file is created; a duplicate key says so. */
static void test_cli_enqueue_refusals(void **state) {
  (void)state;
  char db[300], out[8192];
  const char *url = "http://127.0.0.1:1/x";
  snprintf(db, sizeof db, "%s/refusals%d.db", DIR_, ++seq);
  static const struct {
    const char *args, *says;
  } bad[] = {
      {"-X 'GE T' http://127.0.0.1:1/x", "'GE T' is not an HTTP method"},
      {"not-a-url", "'not-a-url' is not a URL"},
      {"ftp://127.0.0.1/x", "'ftp://127.0.0.1/x' is not an http:// or https:// URL"},
      {"'http://ex ample/x'", "is not a valid URL"},
      {"-H 'Idempotency-Key: k' http://127.0.0.1:1/x", "give it with --key KEY"},
      {"-H \"$(printf 'X-A: a\r\nX-B: b')\" http://127.0.0.1:1/x", "may not contain CR or LF"},
      {"-H 'X-A' http://127.0.0.1:1/x", "'X-A' is not a header: use 'Name: value'"},
      {"-H 'X A: b' http://127.0.0.1:1/x", "'X A' is not a valid header name"},
      {"-H 'Content-Length: 3' http://127.0.0.1:1/x", "Content-Length is set by linkd"},
      {"--key '' http://127.0.0.1:1/x", "--key: the key is empty"},
      {"--key 'a b' http://127.0.0.1:1/x", "--key: the key holds a space at byte 2"},
      {"--tenant 't t' http://127.0.0.1:1/x", "--tenant: the key holds a space"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    if (cli2(out, sizeof out, "enqueue --db '%s' %s", db, bad[i].args) != 64 ||
        !strstr(out, bad[i].says))
      fail_msg("enqueue %s: '%s' does not say '%s'", bad[i].args, out, bad[i].says);
  }
  char key[300];
  memset(key, 'k', sizeof key - 1);
  key[sizeof key - 1] = '\0';
  assert_int_equal(cli2(out, sizeof out, "enqueue --db '%s' --key %s %s", db, key, url), 64);
  assert_non_null(strstr(out, "--key: the key is 299 characters long"));
  assert_int_equal(access(db, F_OK), -1); /* refused before the file */
  /* a duplicate key */
  assert_int_equal(cli2(out, sizeof out, "enqueue --db '%s' --key dup-1 %s", db, url), 0);
  assert_int_equal(cli2(out, sizeof out, "enqueue --db '%s' --key dup-1 %s", db, url), 64);
  assert_non_null(strstr(out, "an entry with this key exists"));
  assert_int_equal(cli2(out, sizeof out, "stats --db '%s'", db), 0);
  assert_non_null(strstr(out, "enqueued_total 1\n"));
}

static void test_metrics_text(void **state) {
  (void)state;
  lk_outbox_stats s = {.pending = 3, .delivered = 2, .attempts_total = 7, .poisoned_total = 1};
  char *text = NULL;
  size_t len = 0;
  assert_int_equal(lk_outbox_stats_prometheus(&s, &text, &len), LK_OK);
  assert_int_equal(strlen(text), len);
  assert_non_null(strstr(text, "linkd_outbox_entries{state=\"pending\"} 3\n"));
  assert_non_null(strstr(text, "linkd_outbox_entries{state=\"delivered\"} 2\n"));
  assert_non_null(strstr(text, "# TYPE linkd_outbox_attempts_total counter\n"
                               "linkd_outbox_attempts_total 7\n"));
  assert_non_null(strstr(text, "linkd_outbox_poisoned_total 1\n"));
  free(text);
}

/* Every allocation of an outbox's life fails in turn (the HTTP client's and calls' included;
 * SQLite's own are its own): open, a batch of three loans, one more, a send until idle against
 * libraryd, close. Whatever failed, the file then opens and holds exactly what the enqueues said
 * they stored (a batch all or none), a send with all its memory delivers what is left, and
 * libraryd applied each stored loan once, by its key: no memory loses nothing and applies
 * nothing twice. (ASan in CI: nothing leaked on any of the paths.) */
static void test_every_allocation_fails_in_turn(void **state) {
  (void)state;
  char url[128];
  lk_outbox_message m[4];
  for (int i = 0; i < 4; i++)
    loan_msg(&m[i], url, sizeof url, BOOK);
  lk_outbox_sender_config sc;
  sender_defaults(&sc);
  long n = 1;
  for (;; n++) {
    assert_true(n < 100000);
    char path[300];
    snprintf(path, sizeof path, "%s/oom%ld.db", DIR_, n);
    lk_fake_clock wall; /* moved past the backoff of a failed round before the second send */
    lk_fake_clock_init(&wall, lk_wall_ns());
    lk_outbox_config c;
    lk_outbox_config_init_default(&c);
    c.path = path;
    c.wall_clock = &wall.base;
    lk_outbox *ob = NULL;
    int stored = 0;
    allocfail_nth(n);
    int rc = lk_outbox_open(&c, &ob, NULL, 0);
    if (rc == LK_OK) {
      if (lk_outbox_enqueue_batch(ob, m, 3, NULL) == LK_OK)
        stored += 3;
      if (lk_outbox_enqueue(ob, &m[3], NULL, NULL) == LK_OK)
        stored++;
      lk_outbox_send_stats st;
      (void)lk_outbox_send(ob, &sc, &st);
      lk_outbox_close(ob);
    }
    bool hit = allocfail_end();
    if (rc != LK_OK && access(path, F_OK) != 0)
      continue; /* nothing was created */
    lk_fake_clock_advance(&wall, LK_SEC(3600));
    lk_outbox *rb = reopen(path, &wall.base);
    assert_int_equal(list_all(rb, -1)->n, stored);
    lk_outbox_send_stats st;
    assert_int_equal(lk_outbox_send(rb, &sc, &st), LK_OK);
    got *g = list_all(rb, -1);
    assert_int_equal(g->n, stored);
    for (int i = 0; i < g->n; i++) {
      assert_int_equal(g->e[i].state, LK_OUTBOX_DELIVERED);
      assert_int_equal(loans_with_key(g->key[i]), 1);
    }
    lk_outbox_close(rb);
    if (!hit) {
      assert_int_equal(rc, LK_OK);
      assert_int_equal(stored, 4);
      break;
    }
  }
  assert_true(n > 20);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_enqueue_stores_everything_durably),
      cmocka_unit_test(test_enqueue_refuses_what_could_not_be_sent),
      cmocka_unit_test(test_delivers_each_entry_once_with_its_key),
      cmocka_unit_test(test_same_key_after_a_lost_answer_and_a_restart),
      cmocka_unit_test(test_permanent_4xx_is_poisoned_with_its_response),
      cmocka_unit_test(test_4xx_with_retry_after_is_retried_not_poisoned),
      cmocka_unit_test(test_unrecorded_outcome_is_resent_with_its_key),
      cmocka_unit_test(test_expiry_and_retention),
      cmocka_unit_test(test_poisoned_kept_until_purged_on_request),
      cmocka_unit_test(test_failed_round_waits_its_backoff),
      cmocka_unit_test(test_idle_ends_against_a_down_server),
      cmocka_unit_test(test_one_sender_per_file),
      cmocka_unit_test(test_bad_sender_config),
      cmocka_unit_test(test_cli),
      cmocka_unit_test(test_cli_damaged_file),
      cmocka_unit_test(test_cli_missing_or_foreign_file),
      cmocka_unit_test(test_cli_ttl_zero),
      cmocka_unit_test(test_cli_run_exit_codes),
      cmocka_unit_test(test_cli_enqueue_refusals),
      cmocka_unit_test(test_metrics_text),
      cmocka_unit_test(test_every_allocation_fails_in_turn),
  };
  int rc = cmocka_run_group_tests(tests, group_setup, group_teardown);
  curl_global_cleanup();
  return rc;
}
