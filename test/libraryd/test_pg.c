/* SPDX-License-Identifier: MIT */
/* libraryd on PostgreSQL: several real libraryd processes on one real PostgreSQL server that the
 * test starts itself (test/support/tmpsrv.h). Same routes and semantics as on SQLite; a key is
 * applied once whichever instances its retries reach, 409 while another instance executes it,
 * every replay equals the first answer; instances killed with -9 mid-write lose nothing
 * acknowledged; with PostgreSQL down the instances answer 503 + Retry-After and recover by
 * themselves when it is back. The invariants are read from the database itself. */
#include "harness.h"
#include "store.h"
#include "tmpsrv.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#define INSTANCES 3

static lk_tmpsrv pg;

/* Every daemon a test starts (in static storage), so that a failed assertion, which leaves the
 * test function at once, does not leave daemons running: kill_tracked ends what is left. */
#define TRACKED_MAX 16
static lib_proc *tracked[TRACKED_MAX];

static int start_tracked(lib_proc *p, const char *url, const char *const *extra) {
  for (int i = 0; i < TRACKED_MAX; i++) {
    if (!tracked[i] || tracked[i] == p) {
      tracked[i] = p;
      break;
    }
  }
  return lib_start_store(p, url, extra);
}

static int group_setup(void **state) {
  (void)state;
  return lk_tmpsrv_pg_start(&pg);
}

/* After each test: daemons a failed assertion left running are killed. */
static int kill_tracked(void **state) {
  (void)state;
  for (int i = 0; i < TRACKED_MAX && tracked[i]; i++) {
    if (tracked[i]->pid) {
      lib_kill9(tracked[i]);
      lib_cleanup(tracked[i]);
    }
    tracked[i] = NULL;
  }
  return 0;
}

static int group_teardown(void **state) {
  kill_tracked(state);
  lk_tmpsrv_destroy(&pg);
  return 0;
}

/* A fresh database per test on the shared server; its URL in url. */
static void new_db(const char *name, char *url, size_t cap) {
  char ci[256];
  lk_tmpsrv_pg_conninfo(&pg, ci, sizeof ci);
  PGconn *c = PQconnectdb(ci);
  assert_int_equal(PQstatus(c), CONNECTION_OK);
  char sql[128];
  snprintf(sql, sizeof sql, "CREATE DATABASE %s", name);
  PGresult *r = PQexec(c, sql);
  if (PQresultStatus(r) != PGRES_COMMAND_OK)
    fail_msg("%s: %s", sql, PQerrorMessage(c));
  PQclear(r);
  PQfinish(c);
  snprintf(url, cap, "postgres://postgres@127.0.0.1:%d/%s", pg.port, name);
}

static PGconn *db_connect(const char *url) {
  PGconn *c = PQconnectdb(url);
  assert_int_equal(PQstatus(c), CONNECTION_OK);
  return c;
}

/* The single integer a query returns. */
static int64_t db_int(const char *url, const char *sql) {
  PGconn *c = db_connect(url);
  PGresult *r = PQexec(c, sql);
  if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
    fail_msg("%s: %s", sql, PQerrorMessage(c));
  int64_t v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
  PQclear(r);
  PQfinish(c);
  return v;
}

static int post_loan(int port, int64_t book, const char *key, long timeout_ms, http_res *r) {
  char path[64], kh[128];
  snprintf(path, sizeof path, "/books/%lld/loans", (long long)book);
  snprintf(kh, sizeof kh, "Idempotency-Key: %s", key);
  const char *h[] = {kh, "X-Tenant: pg", "Content-Type: application/json", NULL};
  http_req rq = {.method = "POST",
                 .path = path,
                 .headers = h,
                 .body = "{\"borrower\":\"pat\"}",
                 .timeout_ms = timeout_ms};
  return http_do(port, &rq, r);
}

static bool replayed(const http_res *r) {
  char v[16];
  return http_header(r, "Idempotent-Replayed", v, sizeof v) != NULL;
}

static int64_t json_id(const http_res *r) {
  json_t *j = http_json(r);
  int64_t id = j ? (int64_t)json_integer_value(json_object_get(j, "id")) : -1;
  json_decref(j);
  return id;
}

static void start_fleet(lib_proc *p, int n, const char *url, const char *const *extra) {
  for (int i = 0; i < n; i++)
    assert_int_equal(start_tracked(&p[i], url, extra), 0);
}

static void stop_fleet(lib_proc *p, int n) {
  for (int i = 0; i < n; i++) {
    if (p[i].pid)
      assert_int_equal(lib_stop(&p[i]), 0);
    lib_cleanup(&p[i]);
  }
}

/* --- one instance: the routes and the key semantics, the schema's version table ------------- */

static void test_single_instance(void **state) {
  (void)state;
  char url[256];
  new_db("single", url, sizeof url);
  static lib_proc p; /* static: the teardown may reach it after a failure */
  const char *args[] = {"--log", "off", NULL};
  assert_int_equal(start_tracked(&p, url, args), 0);
  assert_int_equal(db_int(url, "SELECT MAX(version) FROM schema_version"), LK_PG_SCHEMA_VERSION);
  assert_int_equal(db_int(url, "SELECT COUNT(*) FROM books"), 12); /* the sample books */
  int64_t book = lib_create_book(p.port, 2);
  assert_true(book > 0);

  http_res a, b, c;
  post_loan(p.port, book, "one", 5000, &a);
  assert_int_equal(a.status, 201);
  assert_false(replayed(&a));
  post_loan(p.port, book, "one", 5000, &b);
  assert_int_equal(b.status, 201);
  assert_true(replayed(&b));
  assert_string_equal(a.body, b.body);
  /* The same key with another body: 422, nothing applied. */
  char path[64];
  snprintf(path, sizeof path, "/books/%lld/loans", (long long)book);
  const char *h[] = {"Idempotency-Key: one", "X-Tenant: pg", "Content-Type: application/json",
                     NULL};
  http_send(p.port, "POST", path, h, "{\"borrower\":\"someone else\"}", &c);
  assert_int_equal(c.status, 422);
  assert_int_equal(lib_stock(p.port, book), 1);
  /* A business error is the key's result too, and is replayed. */
  http_res d, e, f;
  post_loan(p.port, book, "two", 5000, &d);
  assert_int_equal(d.status, 201);
  post_loan(p.port, book, "three", 5000, &e);
  assert_int_equal(e.status, 409); /* out of stock */
  post_loan(p.port, book, "three", 5000, &f);
  assert_int_equal(f.status, 409);
  assert_true(replayed(&f));
  assert_string_equal(e.body, f.body);

  /* A restart finds the schema current and the data in place. */
  assert_int_equal(lib_stop(&p), 0);
  assert_int_equal(lib_restart(&p, NULL), 0);
  assert_int_equal(lib_log_count(&p, "(schema 1 -> 1"), 1);
  char lp[64];
  snprintf(lp, sizeof lp, "/loans/%lld", (long long)json_id(&a));
  http_res g;
  http_get(p.port, lp, &g);
  assert_int_equal(g.status, 200);
  json_t *st = lib_stats(&p);
  assert_non_null(st);
  assert_int_equal(json_integer_value(json_object_get(st, "keyed_loans")), 2);
  json_decref(st);
  http_res *all[] = {&a, &b, &c, &d, &e, &f, &g};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    http_res_free(all[i]);
  assert_int_equal(lib_stop(&p), 0);
  lib_cleanup(&p);
}

/* --- 409 on one instance while another executes the key ---------------------------------- */

typedef struct slow_post {
  int port;
  int64_t book;
  http_res res;
} slow_post;

static void *slow_post_main(void *arg) {
  slow_post *s = arg;
  post_loan(s->port, s->book, "held", 10000, &s->res);
  return NULL;
}

static void test_in_flight_on_another_instance(void **state) {
  (void)state;
  char url[256];
  new_db("inflight", url, sizeof url);
  static lib_proc p[INSTANCES]; /* static: the teardown may reach it after a failure */
  /* Instance 0 holds every loan for 1.5 s after claiming its key (injected latency). */
  const char *slow[] = {"--log", "off", "--fault",
                        "route=POST /books/*/loans,kind=latency,delay=1500ms", NULL};
  const char *plain[] = {"--log", "off", NULL};
  assert_int_equal(start_tracked(&p[0], url, slow), 0);
  start_fleet(&p[1], INSTANCES - 1, url, plain);
  int64_t book = lib_create_book(p[1].port, 10);
  assert_true(book > 0);

  slow_post sp = {.port = p[0].port, .book = book};
  pthread_t th;
  pthread_create(&th, NULL, slow_post_main, &sp);
  /* Wait (bounded) until instance 0's claim is in the database. */
  double until = now_s() + 5.0;
  while (db_int(url, "SELECT COUNT(*) FROM idem_claims") == 0 && now_s() < until)
    sleep_ms(10);
  assert_int_equal(db_int(url, "SELECT COUNT(*) FROM idem_claims"), 1);
  for (int i = 1; i < INSTANCES; i++) {
    http_res r;
    post_loan(p[i].port, book, "held", 5000, &r);
    assert_int_equal(r.status, 409);
    char v[16];
    assert_non_null(http_header(&r, "Retry-After", v, sizeof v));
    assert_non_null(strstr(r.body, "idempotency_key_in_use"));
    http_res_free(&r);
  }
  pthread_join(th, NULL);
  assert_int_equal(sp.res.status, 201);
  assert_false(replayed(&sp.res));
  /* Now every instance replays the first answer, byte for byte. */
  for (int i = 0; i < INSTANCES; i++) {
    http_res r;
    post_loan(p[i].port, book, "held", 5000, &r);
    assert_int_equal(r.status, 201);
    assert_true(replayed(&r));
    assert_string_equal(r.body, sp.res.body);
    http_res_free(&r);
  }
  http_res_free(&sp.res);
  assert_int_equal(db_int(url, "SELECT COUNT(*) FROM loans WHERE idem_key = 'held'"), 1);
  assert_int_equal(db_int(url, "SELECT COUNT(*) FROM idem_claims"), 0);
  stop_fleet(p, INSTANCES);
}

/* --- the same key at the same moment on every instance ------------------------------------ */

#define DUP_KEYS 40
#define DUP_TRIES 200

typedef struct dup_arg {
  int port;
  int64_t book;
  pthread_barrier_t *bar;
  char body[DUP_KEYS][256];
  int conflicts;
  bool failed;
} dup_arg;

static void *dup_main(void *arg) {
  dup_arg *d = arg;
  for (int k = 0; k < DUP_KEYS; k++) {
    char key[32];
    snprintf(key, sizeof key, "dup-%d", k);
    pthread_barrier_wait(d->bar);
    /* Retries on 409 until the key's result exists (bounded). */
    for (int t = 0; t < DUP_TRIES; t++) {
      http_res r;
      post_loan(d->port, d->book, key, 5000, &r);
      if (r.status == 201) {
        snprintf(d->body[k], sizeof d->body[k], "%s", r.body);
        http_res_free(&r);
        break;
      }
      bool busy = r.status == 409 && strstr(r.body, "idempotency_key_in_use");
      http_res_free(&r);
      if (!busy) {
        d->failed = true;
        return NULL;
      }
      d->conflicts++;
      sleep_ms(2);
    }
  }
  return NULL;
}

static void test_concurrent_duplicates(void **state) {
  (void)state;
  char url[256];
  new_db("dups", url, sizeof url);
  static lib_proc p[INSTANCES]; /* static: the teardown may reach it after a failure */
  const char *args[] = {"--log", "off", NULL};
  start_fleet(p, INSTANCES, url, args);
  int64_t book = lib_create_book(p[0].port, 1000);
  assert_true(book > 0);
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, INSTANCES);
  static dup_arg d[INSTANCES];
  pthread_t th[INSTANCES];
  for (int i = 0; i < INSTANCES; i++) {
    memset(&d[i], 0, sizeof d[i]);
    d[i].port = p[i].port;
    d[i].book = book;
    d[i].bar = &bar;
    pthread_create(&th[i], NULL, dup_main, &d[i]);
  }
  int conflicts = 0;
  for (int i = 0; i < INSTANCES; i++) {
    pthread_join(th[i], NULL);
    assert_false(d[i].failed);
    conflicts += d[i].conflicts;
  }
  pthread_barrier_destroy(&bar);
  for (int k = 0; k < DUP_KEYS; k++) {
    assert_true(d[0].body[k][0] != '\0');
    for (int i = 1; i < INSTANCES; i++)
      assert_string_equal(d[i].body[k], d[0].body[k]); /* one answer per key, everywhere */
  }
  /* From the database: each key applied exactly once, the stock agrees. */
  assert_int_equal(db_int(url, "SELECT COUNT(*) FROM loans WHERE tenant = 'tenant:pg'"), DUP_KEYS);
  assert_int_equal(db_int(url, "SELECT COUNT(DISTINCT idem_key) FROM loans "
                               "WHERE tenant = 'tenant:pg'"),
                   DUP_KEYS);
  assert_int_equal(lib_stock(p[0].port, book), 1000 - DUP_KEYS);
  fprintf(stderr, "duplicates: %d keys on %d instances at once, %d answered 409 in flight\n",
          DUP_KEYS, INSTANCES, conflicts);
  stop_fleet(p, INSTANCES);
}

/* --- kill -9 of instances mid-write, and restarts ------------------------------------------ */

#define STREAMS 3
#define STREAM_KEYS 3000

typedef struct key_rec {
  bool sent, acked;
  int64_t loan_id;
  char body[200];
} key_rec;

typedef struct fleet {
  pthread_mutex_t mu;
  int port[INSTANCES]; /* 0 while an instance is down */
  atomic_bool stop;
} fleet;

typedef struct stream {
  fleet *f;
  int64_t book;
  int id;
  int n;
  int failovers;
  key_rec keys[STREAM_KEYS];
} stream;

static int fleet_port(fleet *f, int i) {
  pthread_mutex_lock(&f->mu);
  int port = f->port[i % INSTANCES];
  pthread_mutex_unlock(&f->mu);
  return port;
}

/* A client with failover: each key is sent until some instance answers it (201, or 409 in
 * stock terms never happens here), moving to the next instance on a transport error, 503 or
 * 409 (in flight on an instance that just died). */
static void *stream_main(void *arg) {
  stream *s = arg;
  double until = now_s() + 30.0;
  int at = s->id;
  for (int i = 0; i < STREAM_KEYS && !atomic_load(&s->f->stop) && now_s() < until; i++) {
    char key[48];
    snprintf(key, sizeof key, "kill-s%d-%d", s->id, i);
    s->keys[i].sent = true;
    s->n = i + 1;
    for (int tries = 0; tries < 500 && now_s() < until; tries++) {
      int port = fleet_port(s->f, at);
      if (port == 0) {
        at++;
        continue;
      }
      http_res r;
      post_loan(port, s->book, key, 3000, &r);
      if (r.status == 201) {
        s->keys[i].acked = true;
        s->keys[i].loan_id = json_id(&r);
        snprintf(s->keys[i].body, sizeof s->keys[i].body, "%s", r.body);
        http_res_free(&r);
        break;
      }
      http_res_free(&r);
      s->failovers++;
      at++;
      sleep_ms(5);
    }
  }
  return NULL;
}

static void check_keys_in_db(const char *url, stream *st, int n_streams, int port, int *acked,
                             int *sent) {
  /* No key applied twice, ever. */
  assert_int_equal(db_int(url, "SELECT COUNT(*) FROM (SELECT idem_key FROM loans WHERE tenant = "
                               "'tenant:pg' GROUP BY idem_key HAVING COUNT(*) > 1) d"),
                   0);
  PGconn *c = db_connect(url);
  *acked = *sent = 0;
  for (int s = 0; s < n_streams; s++) {
    for (int i = 0; i < st[s].n; i++) {
      char key[48];
      snprintf(key, sizeof key, "kill-s%d-%d", s, i);
      const char *pv[] = {key};
      PGresult *r = PQexecParams(c,
                                 "SELECT id FROM loans WHERE tenant = 'tenant:pg' AND "
                                 "idem_key = $1",
                                 1, NULL, pv, NULL, NULL, 0);
      assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
      (*sent)++;
      if (st[s].keys[i].acked) {
        /* Every acknowledged loan is there exactly once, the one the client was told of. */
        assert_int_equal(PQntuples(r), 1);
        assert_int_equal(strtoll(PQgetvalue(r, 0, 0), NULL, 10), st[s].keys[i].loan_id);
        (*acked)++;
        /* And its replay is the first answer. */
        http_res h;
        post_loan(port, st[s].book, key, 5000, &h);
        assert_int_equal(h.status, 201);
        assert_true(replayed(&h));
        assert_string_equal(h.body, st[s].keys[i].body);
        http_res_free(&h);
      } else {
        assert_true(PQntuples(r) <= 1);
      }
      PQclear(r);
    }
  }
  PQfinish(c);
}

static void test_kill9_instances(void **state) {
  (void)state;
  char url[256];
  new_db("kill9", url, sizeof url);
  static lib_proc p[INSTANCES]; /* static: the teardown may reach it after a failure */
  const char *args[] = {"--log", "off", "--threads", "2", NULL};
  start_fleet(p, INSTANCES, url, args);
  int64_t book = lib_create_book(p[0].port, 1000000);
  assert_true(book > 0);
  static fleet f;
  pthread_mutex_init(&f.mu, NULL);
  atomic_store(&f.stop, false);
  for (int i = 0; i < INSTANCES; i++)
    f.port[i] = p[i].port;
  static stream st[STREAMS];
  pthread_t th[STREAMS];
  for (int s = 0; s < STREAMS; s++) {
    memset(&st[s], 0, sizeof st[s]);
    st[s].f = &f;
    st[s].book = book;
    st[s].id = s;
    pthread_create(&th[s], NULL, stream_main, &st[s]);
  }
  /* Each instance in turn is killed mid-stream and started again on the same database. */
  for (int round = 0; round < INSTANCES; round++) {
    sleep_ms(300);
    pthread_mutex_lock(&f.mu);
    f.port[round] = 0;
    pthread_mutex_unlock(&f.mu);
    lib_kill9(&p[round]);
    sleep_ms(100);
    assert_int_equal(lib_restart(&p[round], args), 0);
    pthread_mutex_lock(&f.mu);
    f.port[round] = p[round].port;
    pthread_mutex_unlock(&f.mu);
  }
  sleep_ms(200);
  atomic_store(&f.stop, true);
  int failovers = 0;
  for (int s = 0; s < STREAMS; s++) {
    pthread_join(th[s], NULL);
    failovers += st[s].failovers;
  }
  int acked, sent;
  check_keys_in_db(url, st, STREAMS, p[1].port, &acked, &sent);
  /* The stock agrees with the loans the database holds. */
  int64_t loans = db_int(url, "SELECT COUNT(*) FROM loans WHERE tenant = 'tenant:pg'");
  assert_int_equal(lib_stock(p[2].port, book), 1000000 - loans);
  fprintf(stderr, "kill -9: %d keys sent, %d acknowledged, %d failovers, %lld loans\n", sent, acked,
          failovers, (long long)loans);
  assert_true(acked > 0);
  assert_true(failovers > 0); /* the kills really happened mid-stream */
  stop_fleet(p, INSTANCES);
  pthread_mutex_destroy(&f.mu);
}

/* --- PostgreSQL restarted under load --------------------------------------------------------- */

typedef struct outage_stream {
  int port;
  int64_t book;
  int id;
  atomic_bool *stop;
  atomic_int n, unavailable; /* read by the test while the stream runs */
  int unavailable_without_retry_after, other;
  key_rec keys[STREAM_KEYS];
} outage_stream;

/* Sends keyed loans, retrying each key (same instance) until acknowledged; notes every 503 and
 * whether it carried Retry-After. */
static void *outage_main(void *arg) {
  outage_stream *s = arg;
  double until = now_s() + 40.0;
  for (int i = 0; i < STREAM_KEYS && !atomic_load(s->stop) && now_s() < until; i++) {
    char key[48];
    snprintf(key, sizeof key, "kill-s%d-%d", s->id, i);
    s->keys[i].sent = true;
    s->n = i + 1;
    while (now_s() < until) {
      http_res r;
      post_loan(s->port, s->book, key, 5000, &r);
      if (r.status == 201) {
        s->keys[i].acked = true;
        s->keys[i].loan_id = json_id(&r);
        snprintf(s->keys[i].body, sizeof s->keys[i].body, "%s", r.body);
        http_res_free(&r);
        break;
      }
      char v[16];
      if (r.status == 503) {
        s->unavailable++;
        if (!http_header(&r, "Retry-After", v, sizeof v))
          s->unavailable_without_retry_after++;
      } else if (r.status != 409) { /* 409: the key's claim outlived a lost answer briefly */
        s->other++;
        fprintf(stderr, "outage: unexpected status %ld: %s\n", r.status, r.body ? r.body : "");
      }
      http_res_free(&r);
      sleep_ms(20);
    }
  }
  return NULL;
}

static void test_pg_restart_under_load(void **state) {
  (void)state;
  char url[256];
  new_db("outage", url, sizeof url);
  static lib_proc p[2]; /* static: the teardown may reach it after a failure */
  const char *args[] = {"--log", "off", NULL};
  start_fleet(p, 2, url, args);
  int64_t book = lib_create_book(p[0].port, 1000000);
  assert_true(book > 0);
  atomic_bool stop = false;
  static outage_stream st[2];
  pthread_t th[2];
  for (int s = 0; s < 2; s++) {
    memset(&st[s], 0, sizeof st[s]);
    st[s].port = p[s].port;
    st[s].book = book;
    st[s].id = s;
    st[s].stop = &stop;
    pthread_create(&th[s], NULL, outage_main, &st[s]);
  }
  sleep_ms(400);
  int before[2] = {st[0].n, st[1].n};
  assert_int_equal(lk_tmpsrv_stop(&pg, SIGKILL), 0); /* a crash, mid-write */
  sleep_ms(700);
  int during[2] = {st[0].unavailable, st[1].unavailable};
  assert_int_equal(lk_tmpsrv_restart(&pg), 0);
  /* libraryd reconnects by itself: both streams make progress again (bounded wait). */
  int after[2] = {st[0].n, st[1].n};
  double until = now_s() + 15.0;
  while ((st[0].n <= after[0] + 5 || st[1].n <= after[1] + 5) && now_s() < until)
    sleep_ms(20);
  atomic_store(&stop, true);
  for (int s = 0; s < 2; s++)
    pthread_join(th[s], NULL);
  for (int s = 0; s < 2; s++) {
    assert_true(st[s].n > before[s]);
    assert_true(during[s] > 0); /* it answered 503 while the database was down */
    assert_int_equal(st[s].unavailable_without_retry_after, 0);
    assert_int_equal(st[s].other, 0);
    assert_true(st[s].n > after[s] + 5); /* and recovered without a restart */
  }
  /* Nothing acknowledged was lost, nothing applied twice. */
  static stream view[2];
  for (int s = 0; s < 2; s++) {
    memset(&view[s], 0, sizeof view[s]);
    view[s].n = st[s].n;
    view[s].book = book;
    memcpy(view[s].keys, st[s].keys, sizeof st[s].keys);
  }
  int acked, sent;
  check_keys_in_db(url, view, 2, p[0].port, &acked, &sent);
  fprintf(stderr, "postgres restart: %d keys, %d acknowledged, 503s %d + %d\n", sent, acked,
          st[0].unavailable, st[1].unavailable);
  stop_fleet(p, 2);
}

/* --- connections the server closed are not handed to requests -------------------------------- */

/* One libraryd on a fresh database `name` (args: its options, NULL for --log off), with a book
 * of 100 copies (its id returned). */
static int64_t one_instance(const char *name, lib_proc *p, const char *const *args) {
  char url[256];
  new_db(name, url, sizeof url);
  const char *quiet[] = {"--log", "off", NULL};
  assert_int_equal(start_tracked(p, url, args ? args : quiet), 0);
  int64_t book = lib_create_book(p->port, 100);
  assert_true(book > 0);
  return book;
}

static void test_reconnect_without_a_failed_request(void **state) {
  (void)state;
  static lib_proc p; /* static: the teardown may reach it after a failure */
  int64_t book = one_instance("reconnect", &p, NULL);
  for (int i = 0; i < 5; i++) /* connections in the pool, idle */
    assert_int_equal(lib_stock(p.port, book), 100);
  assert_int_equal(lk_tmpsrv_stop(&pg, SIGINT), 0); /* a clean restart of PostgreSQL */
  assert_int_equal(lk_tmpsrv_restart(&pg), 0);
  /* The pooled connections are dead; the very first requests still succeed. */
  assert_int_equal(lib_stock(p.port, book), 100);
  http_res r;
  post_loan(p.port, book, "after-restart", 5000, &r);
  assert_int_equal(r.status, 201);
  http_res_free(&r);
  assert_int_equal(lib_stock(p.port, book), 99);
  assert_int_equal(lib_stop(&p), 0);
  lib_cleanup(&p);
}

/* --- a hung database: the deadline still bounds a request --------------------------------- */

/* Sends sig to the postmaster and to every process it started (its backends). */
static void pg_signal_all(int sig) {
  kill(pg.pid, sig);
  DIR *d = opendir("/proc");
  assert_non_null(d);
  struct dirent *e;
  while ((e = readdir(d))) {
    char path[300], buf[512];
    snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f)
      continue;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')'); /* "pid (comm) state ppid ..." */
    int ppid = 0;
    char st;
    if (rp && sscanf(rp + 1, " %c %d", &st, &ppid) == 2 && ppid == pg.pid)
      kill((pid_t)atoi(e->d_name), sig);
  }
  closedir(d);
}

static int resume_pg(void **state) {
  if (pg.pid)
    pg_signal_all(SIGCONT);
  return kill_tracked(state);
}

/* One request while PostgreSQL is stopped: answered `want` within max_s seconds. */
static void hung_request(int port, const http_req *rq, long want, double max_s) {
  http_res r;
  double t0 = now_s();
  http_do(port, rq, &r);
  double took = now_s() - t0;
  fprintf(stderr, "hung database: %s %s answered %ld after %.2f s\n", rq->method, rq->path,
          r.status, took);
  assert_int_equal(r.status, want);
  char v[16];
  if (want == 503)
    assert_non_null(http_header(&r, "Retry-After", v, sizeof v));
  assert_true(took < max_s);
  http_res_free(&r);
}

/* PostgreSQL resumed: the connections given up are replaced, reads work again. */
static void resume_pg_and_wait(int port, int64_t book) {
  pg_signal_all(SIGCONT);
  double until = now_s() + 10.0;
  while (lib_stock(port, book) != 100 && now_s() < until)
    sleep_ms(50);
  assert_int_equal(lib_stock(port, book), 100); /* and leaves a pooled connection */
}

/* PostgreSQL stopped (SIGSTOP: it accepts connections into the kernel's backlog and answers
 * nothing, the cancel request included): a read and a keyed write with a 300 ms deadline are
 * answered within it plus the cancel's grace, a read without a deadline within --store-timeout
 * plus the grace, and libraryd works again once PostgreSQL does. */
static void test_hung_database(void **state) {
  (void)state;
  static lib_proc p; /* static: the teardown may reach it after a failure */
  const char *args[] = {"--log", "off", "--store-timeout", "300ms", NULL};
  int64_t book = one_instance("hung", &p, args);
  char path[64], lpath[80];
  snprintf(path, sizeof path, "/books/%lld", (long long)book);
  snprintf(lpath, sizeof lpath, "/books/%lld/loans", (long long)book);
  const char *dl[] = {"Linkd-Deadline: 300", "X-Tenant: pg", "Idempotency-Key: hung-1",
                      "Content-Type: application/json", NULL};
  const char *none[] = {"X-Tenant: pg", NULL};
  http_req get = {.method = "GET", .path = path, .headers = dl, .timeout_ms = 6000};
  http_req loan = {.method = "POST", .path = lpath, .headers = dl,
                   .body = "{\"borrower\":\"pat\"}", .timeout_ms = 6000};
  http_req get_none = {.method = "GET", .path = path, .headers = none, .timeout_ms = 8000};
  assert_int_equal(lib_stock(p.port, book), 100); /* a pooled connection */
  /* a 300 ms deadline: the statement on the pooled connection is cancelled at it and the
   * connection given up 1 s later; the write then finds no connection to open in time */
  pg_signal_all(SIGSTOP);
  hung_request(p.port, &get, 504, 3.0);
  hung_request(p.port, &loan, 504, 3.0);
  resume_pg_and_wait(p.port, book);
  /* no deadline: --store-timeout bounds the statement, then 503 + Retry-After */
  pg_signal_all(SIGSTOP);
  hung_request(p.port, &get_none, 503, 3.0);
  resume_pg_and_wait(p.port, book);
  http_res r;
  post_loan(p.port, book, "after-hang", 5000, &r);
  assert_int_equal(r.status, 201);
  http_res_free(&r);
  assert_int_equal(lib_stop(&p), 0);
  lib_cleanup(&p);
}

/* --- the keyed write path's statements are prepared ----------------------------------------- */

/* Lines of the PostgreSQL server's log that contain needle. */
static int pg_log_count(const char *needle) {
  FILE *f = fopen(pg.log, "r");
  if (!f)
    fail_msg("cannot open %s", pg.log);
  char line[8192];
  int n = 0;
  while (fgets(line, sizeof line, f))
    n += strstr(line, needle) != NULL;
  fclose(f);
  return n;
}

/* Every keyed loan runs its statements by name (prepared once per connection), never parsed and
 * planned again per request: the server logs each execution with the statement's name. */
static void test_prepared_statements(void **state) {
  (void)state;
  char url[256];
  new_db("prepared", url, sizeof url);
  char ci[256];
  lk_tmpsrv_pg_conninfo(&pg, ci, sizeof ci);
  PGconn *c = db_connect(ci);
  PQclear(PQexec(c, "ALTER DATABASE prepared SET log_statement = 'all'"));
  PQfinish(c);
  int before_lookup = pg_log_count("execute lk_lookup_claim:");
  int before_loan = pg_log_count("execute lk_loan:");
  int before_put = pg_log_count("execute lk_idem_put:");
  int before_unclaim = pg_log_count("execute lk_unclaim:");
  static lib_proc p; /* static: the teardown may reach it after a failure */
  const char *args[] = {"--log", "off", NULL};
  assert_int_equal(start_tracked(&p, url, args), 0);
  int64_t book = lib_create_book(p.port, 10);
  assert_true(book > 0);
  for (int i = 0; i < 3; i++) {
    char key[32];
    snprintf(key, sizeof key, "prepared-%d", i);
    http_res r;
    post_loan(p.port, book, key, 5000, &r);
    assert_int_equal(r.status, 201);
    http_res_free(&r);
  }
  assert_int_equal(lib_stop(&p), 0);
  lib_cleanup(&p);
  assert_int_equal(pg_log_count("execute lk_lookup_claim:") - before_lookup, 3);
  assert_int_equal(pg_log_count("execute lk_loan:") - before_loan, 3);
  assert_int_equal(pg_log_count("execute lk_idem_put:") - before_put, 3);
  assert_int_equal(pg_log_count("execute lk_unclaim:") - before_unclaim, 3);
}

/* --- retention and purge ----------------------------------------------------------------- */

static void test_retention_and_purge(void **state) {
  (void)state;
  char url[256];
  new_db("retention", url, sizeof url);
  /* Retention 1 s; instance 0 never purges, so the expired record is still in the table when
   * its key comes back; instance 1 purges every 200 ms. */
  static lib_proc p[2]; /* static: the teardown may reach it after a failure */
  const char *keep[] = {"--log", "off", "--idem-retention", "1s", "--purge-interval", "1h", NULL};
  const char *purge[] = {"--log", "off", "--idem-retention", "1s", "--purge-interval",
                         "200ms", NULL};
  assert_int_equal(start_tracked(&p[0], url, keep), 0);
  int64_t book = lib_create_book(p[0].port, 10);
  assert_true(book > 0);
  http_res a, b;
  post_loan(p[0].port, book, "short-lived", 5000, &a);
  assert_int_equal(a.status, 201);
  sleep_ms(1200);
  /* Expired: the key runs again (a new loan, not a replay), and its record is replaced. */
  post_loan(p[0].port, book, "short-lived", 5000, &b);
  assert_int_equal(b.status, 201);
  assert_false(replayed(&b));
  assert_true(json_id(&b) != json_id(&a));
  assert_int_equal(db_int(url, "SELECT COUNT(*) FROM idem WHERE key = 'short-lived'"), 1);
  assert_int_equal(db_int(url, "SELECT COUNT(*) FROM loans WHERE idem_key = 'short-lived'"), 2);
  http_res_free(&a);
  http_res_free(&b);
  /* The purge deletes expired records (bounded wait), live ones stay. */
  assert_int_equal(start_tracked(&p[1], url, purge), 0);
  double until = now_s() + 5.0;
  while (db_int(url, "SELECT COUNT(*) FROM idem") > 0 && now_s() < until)
    sleep_ms(50);
  assert_int_equal(db_int(url, "SELECT COUNT(*) FROM idem"), 0);
  stop_fleet(p, 2);
}

/* --- the flags ------------------------------------------------------------------------------ */

static void test_store_flags(void **state) {
  (void)state;
  char out[2048];
  /* Not a PostgreSQL URL, and --db with --store: usage errors (2) that say why. */
  const char *bad_url[] = {"--port", "0", "--store", "mysql://x/y", NULL};
  assert_int_equal(lib_run_capture(bad_url, false, out, sizeof out), 2);
  assert_non_null(strstr(out, "expected a PostgreSQL URL"));
  const char *both[] = {"--port", "0", "--db", "/tmp/x.db", "--store", "postgres://h/d", NULL};
  assert_int_equal(lib_run_capture(both, false, out, sizeof out), 2);
  assert_non_null(strstr(out, "exclude each other"));
  /* A database that does not answer: exit 1 at start, libpq's reason named, password hidden. */
  char url[256];
  snprintf(url, sizeof url, "postgres://postgres:secret@127.0.0.1:%d/none", lk_tmpsrv_free_port());
  const char *down[] = {"--port", "0", "--store", url, NULL};
  assert_int_equal(lib_run_capture(down, false, out, sizeof out), 1);
  assert_non_null(strstr(out, "cannot open the database postgres://postgres:***@127.0.0.1:"));
  assert_null(strstr(out, "secret"));
  /* A server that accepts the connection and never answers: the connect gives up after its
   * 2 s bound instead of hanging the start. */
  int l = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(l, 8), 0); /* the kernel completes the handshake; nobody reads */
  socklen_t al = sizeof a;
  getsockname(l, (struct sockaddr *)&a, &al);
  snprintf(url, sizeof url, "postgres://postgres@127.0.0.1:%d/mute", ntohs(a.sin_port));
  const char *mute[] = {"--port", "0", "--store", url, NULL};
  double t0 = now_s();
  assert_int_equal(lib_run_capture(mute, false, out, sizeof out), 1);
  double took = now_s() - t0;
  close(l);
  assert_non_null(strstr(out, "no answer within the connect timeout"));
  assert_true(took >= 1.9 && took < 6.0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_store_flags, kill_tracked),
      cmocka_unit_test_teardown(test_single_instance, kill_tracked),
      cmocka_unit_test_teardown(test_in_flight_on_another_instance, kill_tracked),
      cmocka_unit_test_teardown(test_concurrent_duplicates, kill_tracked),
      cmocka_unit_test_teardown(test_kill9_instances, kill_tracked),
      cmocka_unit_test_teardown(test_pg_restart_under_load, kill_tracked),
      cmocka_unit_test_teardown(test_reconnect_without_a_failed_request, kill_tracked),
      cmocka_unit_test_teardown(test_retention_and_purge, kill_tracked),
      cmocka_unit_test_teardown(test_prepared_statements, kill_tracked),
      cmocka_unit_test_teardown(test_hung_database, resume_pg),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
