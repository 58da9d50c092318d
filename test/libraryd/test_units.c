/* SPDX-License-Identifier: MIT */
/* Unit tests of libraryd's server pieces that need no daemon: key syntax, caller
 * identity, fingerprints, parsers, route patterns, fault rules and their seeded decisions, the
 * in-flight key table and the waker. */
#include "fault.h"
#include "idem_rules.h"
#include "util.h"
#include "waker.h"

#include <linkd/duration.h>
#include <linkd/clock.h>
#include <linkd/error.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static void test_idem_key_syntax(void **state) {
  (void)state;
  char k[IDEM_KEY_LEN_MAX + 1];
  assert_int_equal(idem_key_parse("abc-123", k, sizeof k), LK_OK);
  assert_string_equal(k, "abc-123");
  /* The draft's structured-field string form is unquoted, escapes resolved. */
  assert_int_equal(idem_key_parse("\"8e03978e-40d5-43e8\"", k, sizeof k), LK_OK);
  assert_string_equal(k, "8e03978e-40d5-43e8");
  assert_int_equal(idem_key_parse("\"a \\\"b\\\\\"", k, sizeof k), LK_OK);
  assert_string_equal(k, "a \"b\\");
  assert_int_equal(idem_key_parse("", k, sizeof k), LK_EPARSE);
  assert_int_equal(idem_key_parse("\"\"", k, sizeof k), LK_EPARSE);
  assert_int_equal(idem_key_parse("a b", k, sizeof k), LK_EPARSE);
  assert_int_equal(idem_key_parse("a\tb", k, sizeof k), LK_EPARSE);
  assert_int_equal(idem_key_parse("\"abc", k, sizeof k), LK_EPARSE);
  assert_int_equal(idem_key_parse("\"abc\"x", k, sizeof k), LK_EPARSE);
  assert_int_equal(idem_key_parse("\"a\\nb\"", k, sizeof k), LK_EPARSE);
  assert_int_equal(idem_key_parse("caf\xc3\xa9", k, sizeof k), LK_EPARSE);
  char longkey[300];
  memset(longkey, 'k', 255);
  longkey[255] = '\0';
  assert_int_equal(idem_key_parse(longkey, k, sizeof k), LK_OK);
  assert_int_equal(strlen(k), 255);
  longkey[255] = 'k';
  longkey[256] = '\0';
  assert_int_equal(idem_key_parse(longkey, k, sizeof k), LK_EPARSE);
}

static void test_tenant_identity(void **state) {
  (void)state;
  char t[96], u[96];
  assert_int_equal(idem_tenant(NULL, NULL, t, sizeof t), LK_OK);
  assert_string_equal(t, "anonymous");
  assert_int_equal(idem_tenant(NULL, "acme-1", t, sizeof t), LK_OK);
  assert_string_equal(t, "tenant:acme-1");
  assert_int_equal(idem_tenant(NULL, "bad tenant", t, sizeof t), LK_EPARSE);
  assert_int_equal(idem_tenant(NULL, "", t, sizeof t), LK_EPARSE);
  /* An API key wins over X-Tenant and is stored only as a digest. */
  assert_int_equal(idem_tenant("secret-1", "acme", t, sizeof t), LK_OK);
  /* The first 16 bytes of SHA-256("secret-1"): stored identities must keep matching. */
  assert_string_equal(t, "key:f7e7c36e458e80e6b6a2c67d0a9ec09b");
  assert_int_equal(idem_tenant("secret-2", NULL, u, sizeof u), LK_OK);
  assert_string_not_equal(t, u);
  assert_int_equal(idem_tenant("", NULL, u, sizeof u), LK_EPARSE);
}

static void hex32(const uint8_t d[32], char out[65]) {
  for (int i = 0; i < 32; i++)
    snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void test_fingerprint(void **state) {
  (void)state;
  uint8_t a[32], b[32];
  idem_fingerprint("POST", "/books/1/loans", "{}", 2, a);
  idem_fingerprint("POST", "/books/1/loans", "{}", 2, b);
  assert_memory_equal(a, b, 32);
  idem_fingerprint("POST", "/books/2/loans", "{}", 2, b);
  assert_memory_not_equal(a, b, 32);
  idem_fingerprint("PUT", "/books/1/loans", "{}", 2, b);
  assert_memory_not_equal(a, b, 32);
  idem_fingerprint("POST", "/books/1/loans", "{ }", 3, b);
  assert_memory_not_equal(a, b, 32);
  /* Length prefixes: moving bytes between fields changes the fingerprint. */
  idem_fingerprint("POST", "/a", "b", 1, a);
  idem_fingerprint("POST", "/ab", "", 0, b);
  assert_memory_not_equal(a, b, 32);
  /* The exact bytes: the store keeps fingerprints, so they must not change across versions.
   * SHA-256 of each field as an 8-byte big-endian length followed by its bytes. */
  char hex[65];
  idem_fingerprint("POST", "/books/1/loans", "{}", 2, a);
  hex32(a, hex);
  assert_string_equal(hex, "1fba5b2aac0d84bdef435c610058de8848b26669852c0366c35dd7787afe8c21");
  idem_fingerprint("PUT", "/books/7", NULL, 0, a);
  hex32(a, hex);
  assert_string_equal(hex, "e17deb8f39170d280a936b072a1bee73a7b0ce4972a1597dae61664928853315");
}

static void test_parsers(void **state) {
  (void)state;
  int64_t ns;
  /* libraryd parses durations with the core's lk_duration_parse (test/core/test_duration.c has
   * the grammar); these are the forms its flags, config and fault rules use. */
  assert_int_equal(lk_duration_parse("250ms", &ns, NULL, 0), LK_OK);
  assert_int_equal(ns, LK_MS(250));
  assert_int_equal(lk_duration_parse("3s", &ns, NULL, 0), LK_OK);
  assert_int_equal(ns, LK_SEC(3));
  assert_int_equal(lk_duration_parse("24h", &ns, NULL, 0), LK_OK);
  assert_int_equal(ns, LK_SEC(86400));
  assert_int_equal(lk_duration_parse("1m", &ns, NULL, 0), LK_OK);
  assert_int_equal(ns, LK_SEC(60));
  assert_int_equal(lk_duration_parse("1.5s", &ns, NULL, 0), LK_OK);
  assert_int_equal(ns, LK_MS(1500));
  assert_int_equal(lk_duration_parse("5us", &ns, NULL, 0), LK_OK);
  assert_int_equal(ns, 5000);
  assert_int_equal(lk_duration_parse("7", &ns, NULL, 0), LK_EPARSE); /* a unit is required */
  assert_int_equal(lk_duration_parse("-1s", &ns, NULL, 0), LK_EPARSE);
  assert_int_equal(lk_duration_parse("s", &ns, NULL, 0), LK_EPARSE);
  assert_int_equal(lk_duration_parse("3 s", &ns, NULL, 0), LK_EPARSE);
  assert_int_equal(lk_duration_parse("99999999999999h", &ns, NULL, 0), LK_ERANGE);
  /* --idle-timeout: libmicrohttpd counts whole seconds and reads 0 as "never". */
  assert_int_equal(lk_whole_seconds_up(LK_MS(500), 86400), 1);
  assert_int_equal(lk_whole_seconds_up(LK_MS(1500), 86400), 2);
  assert_int_equal(lk_whole_seconds_up(LK_SEC(60), 86400), 60);
  assert_int_equal(lk_whole_seconds_up(1, 86400), 1);
  assert_int_equal(lk_whole_seconds_up(0, 86400), 0);
  assert_int_equal(lk_whole_seconds_up(INT64_MAX, 86400), 86400);
  int64_t v;
  assert_int_equal(lk_parse_i64("9223372036854775807", 19, false, &v), LK_OK);
  assert_int_equal(v, INT64_MAX);
  assert_int_equal(lk_parse_i64("9223372036854775808", 19, false, &v), LK_ERANGE);
  assert_int_equal(lk_parse_i64("-9223372036854775808", 20, true, &v), LK_OK);
  assert_int_equal(v, INT64_MIN);
  assert_int_equal(lk_parse_i64("-5", 2, false, &v), LK_EPARSE);
  assert_int_equal(lk_parse_i64("", 0, false, &v), LK_EPARSE);
  /* Query numbers: one spelling per value, as ids ("05" was 5 under a second name). */
  static const struct {
    const char *s;
    int rc;
    int64_t v;
  } canon[] = {{"0", LK_OK, 0},
               {"5", LK_OK, 5},
               {"100", LK_OK, 100},
               {"05", LK_EPARSE, 0},
               {"007", LK_EPARSE, 0},
               {"00", LK_EPARSE, 0},
               {"+5", LK_EPARSE, 0},
               {"-5", LK_EPARSE, 0},
               {"-0", LK_EPARSE, 0},
               {" 5", LK_EPARSE, 0},
               {"5 ", LK_EPARSE, 0},
               {"5.0", LK_EPARSE, 0},
               {"1e2", LK_EPARSE, 0},
               {"0x5", LK_EPARSE, 0},
               {"", LK_EPARSE, 0},
               {"9223372036854775807", LK_OK, INT64_MAX},
               {"9223372036854775808", LK_ERANGE, 0}};
  for (size_t i = 0; i < sizeof canon / sizeof canon[0]; i++) {
    v = -1;
    int rc = lk_parse_canonical(canon[i].s, strlen(canon[i].s), &v);
    if (rc != canon[i].rc || (rc == LK_OK && v != canon[i].v))
      fail_msg("lk_parse_canonical('%s'): %d, %lld", canon[i].s, rc, (long long)v);
  }
  assert_int_equal(lk_parse_canonical(NULL, 0, &v), LK_EPARSE);
  char date[40];
  lk_http_date(LK_SEC(784111777), date, sizeof date);
  assert_string_equal(date, "Sun, 06 Nov 1994 08:49:37 GMT");
}

static void test_route_patterns(void **state) {
  (void)state;
  assert_true(lk_route_match("*", "GET", "/anything/at/all"));
  assert_true(lk_route_match("POST /books/*/loans", "POST", "/books/12/loans"));
  assert_false(lk_route_match("POST /books/*/loans", "GET", "/books/12/loans"));
  assert_false(lk_route_match("POST /books/*/loans", "POST", "/books//loans"));
  assert_false(lk_route_match("POST /books/*/loans", "POST", "/books/12/loans/x"));
  assert_false(lk_route_match("POST /books/*/loans", "POST", "/books/12"));
  assert_true(lk_route_match("/books/*", "DELETE", "/books/3"));
  assert_true(lk_route_match("* /books/*", "PUT", "/books/3"));
  assert_true(lk_route_match("GET /books/**", "GET", "/books/3/loans"));
  assert_true(lk_route_match("GET /books/**", "GET", "/books"));
  assert_false(lk_route_match("GET /books/**", "GET", "/bookshelf"));
  assert_true(lk_route_match("GET /books", "GET", "/books"));
  assert_false(lk_route_match("GET /books", "GET", "/books/"));
  assert_int_equal(lk_route_pattern_check("POST /books/*/loans"), LK_OK);
  assert_int_equal(lk_route_pattern_check("*"), LK_OK);
  assert_int_equal(lk_route_pattern_check("/x/**"), LK_OK);
  assert_int_equal(lk_route_pattern_check("post /books"), LK_EPARSE);
  assert_int_equal(lk_route_pattern_check("GET books"), LK_EPARSE);
  assert_int_equal(lk_route_pattern_check("GET /a/**/b"), LK_EPARSE);
  assert_int_equal(lk_route_pattern_check(""), LK_EPARSE);
}

static void test_fault_rule_parse(void **state) {
  (void)state;
  lk_fault_rule r;
  char err[200];
  assert_int_equal(
      lk_fault_rule_parse("route=POST /books/*/loans,kind=reset_after_processing,p=0.1", &r, err,
                          sizeof err),
      LK_OK);
  assert_string_equal(r.route, "POST /books/*/loans");
  assert_int_equal(r.act.kind, LK_FAULT_RESET_AFTER_PROCESSING);
  assert_true(r.p > 0.099 && r.p < 0.101);
  assert_int_equal(r.count, -1);
  assert_int_equal(lk_fault_rule_parse("kind=status,code=429,retry_after=date:3,count=2,skip=1", &r,
                                       err, sizeof err),
                   LK_OK);
  assert_int_equal(r.act.status, 429);
  assert_true(r.act.retry_after_date);
  assert_int_equal(r.act.retry_after, 3);
  assert_int_equal(r.count, 2);
  assert_int_equal(r.skip, 1);
  assert_string_equal(r.route, "*");
  assert_int_equal(lk_fault_rule_parse("kind=503", &r, err, sizeof err), LK_OK);
  assert_int_equal(r.act.kind, LK_FAULT_STATUS);
  assert_int_equal(r.act.status, 503);
  assert_int_equal(lk_fault_rule_parse("kind=status", &r, err, sizeof err), LK_OK);
  assert_int_equal(r.act.status, 503);
  assert_int_equal(lk_fault_rule_parse("kind=latency,delay=uniform:10ms:30ms", &r, err, sizeof err),
                   LK_OK);
  assert_int_equal(r.act.dist, LK_DELAY_UNIFORM);
  assert_int_equal(r.act.delay_a, LK_MS(10));
  assert_int_equal(r.act.delay_b, LK_MS(30));
  assert_int_equal(lk_fault_rule_parse("kind=slow_body,chunk=8,interval=20ms", &r, err, sizeof err),
                   LK_OK);
  assert_int_equal(r.act.chunk, 8);
  assert_int_equal(r.act.interval_ns, LK_MS(20));
  const char *bad[] = {
      "route=GET /x",                       /* no kind */
      "kind=explode",                       /* unknown kind */
      "kind=status,code=200",               /* not an error status */
      "kind=status,p=1.5",                  /* p out of range */
      "kind=status,p=abc",                  /* p not a number */
      "kind=latency",                       /* latency without delay */
      "kind=reset_after_read,delay=5ms",    /* delay on another kind */
      "kind=close,code=500",                /* code on another kind */
      "kind=status,when=later",             /* bad when */
      "kind=status,bogus=1",                /* unknown key */
      "kind=status,route=get /x",           /* bad route */
      "kind=latency,delay=uniform:9ms:1ms", /* empty range */
      "kind=slow_body,chunk=0",             /* chunk out of range */
      "kind",                               /* not key=value */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = '\0';
    assert_int_equal(lk_fault_rule_parse(bad[i], &r, err, sizeof err), LK_EPARSE);
    assert_true(err[0] != '\0'); /* every rejection says why */
  }
}

static void add_rule(lk_faults *f, const char *spec) {
  lk_fault_rule r;
  char err[200];
  assert_int_equal(lk_fault_rule_parse(spec, &r, err, sizeof err), LK_OK);
  assert_true(lk_faults_add(f, &r) > 0);
}

/* The pattern of fired faults over n requests, as a bit string. */
static void pattern(lk_faults *f, int n, char *out) {
  for (int i = 0; i < n; i++) {
    lk_fault_plan p;
    lk_faults_decide(f, "GET", "/books/1", &p);
    out[i] = p.act.kind == LK_FAULT_STATUS ? '1' : '0';
  }
  out[n] = '\0';
}

static void test_fault_seeded_reproducible(void **state) {
  (void)state;
  char a[65], b[65], c[65];
  lk_faults *f = lk_faults_new(42);
  add_rule(f, "route=GET /books/*,kind=503,p=0.5");
  pattern(f, 64, a);
  lk_faults_reseed(f, 42);
  pattern(f, 64, b);
  assert_string_equal(a, b);
  lk_faults_reseed(f, 43);
  pattern(f, 64, c);
  assert_string_not_equal(a, c);
  /* About half fire (64 draws at p = 0.5: far outside [12, 52] has probability < 1e-6). */
  int ones = 0;
  for (int i = 0; i < 64; i++)
    ones += a[i] == '1';
  assert_in_range(ones, 12, 52);
  lk_faults_free(f);
}

static void test_fault_script_count_skip(void **state) {
  (void)state;
  lk_faults *f = lk_faults_new(1);
  add_rule(f, "route=GET /books/1,kind=503,skip=1,count=2");
  char p[9];
  pattern(f, 8, p);
  assert_string_equal(p, "01100000");
  lk_fault_rule snap[4];
  assert_int_equal(lk_faults_snapshot(f, snap, 4), 1);
  assert_int_equal(snap[0].matched, 8);
  assert_int_equal(snap[0].fired, 2);
  /* Other routes do not match and do not consume the script. */
  lk_fault_plan plan;
  lk_faults_decide(f, "GET", "/books/2", &plan);
  assert_int_equal(plan.act.kind, LK_FAULT_NONE);
  assert_int_equal(lk_faults_remove(f, snap[0].id), LK_OK);
  assert_int_equal(lk_faults_remove(f, snap[0].id), LK_ENOTFOUND);
  lk_faults_decide(f, "GET", "/books/1", &plan);
  assert_int_equal(plan.act.kind, LK_FAULT_NONE);
  lk_faults_free(f);
}

static void test_fault_latency_and_first_action(void **state) {
  (void)state;
  lk_faults *f = lk_faults_new(7);
  add_rule(f, "kind=latency,delay=20ms");
  add_rule(f, "kind=latency,delay=uniform:5ms:10ms");
  add_rule(f, "route=GET /books/*,kind=close,count=1");
  add_rule(f, "route=GET /books/*,kind=502");
  lk_fault_plan p;
  lk_faults_decide(f, "GET", "/books/1", &p);
  assert_int_equal(p.act.kind, LK_FAULT_CLOSE);      /* the first action that fires wins */
  assert_in_range(p.delay_ns, LK_MS(25), LK_MS(30)); /* latencies add up */
  lk_faults_decide(f, "GET", "/books/1", &p);
  assert_int_equal(p.act.kind, LK_FAULT_STATUS); /* close is spent */
  assert_int_equal(p.act.status, 502);
  lk_faults_clear(f);
  add_rule(f, "kind=latency,delay=exp:10ms");
  for (int i = 0; i < 200; i++) {
    lk_faults_decide(f, "GET", "/", &p);
    assert_in_range(p.delay_ns, 0, LK_MS(200)); /* capped at 20x the mean */
  }
  lk_faults_free(f);
}

static void test_inflight(void **state) {
  (void)state;
  lk_inflight *t = lk_inflight_new();
  assert_true(lk_inflight_claim(t, "tenant:a", "k1"));
  assert_false(lk_inflight_claim(t, "tenant:a", "k1"));
  assert_true(lk_inflight_claim(t, "tenant:b", "k1")); /* other tenant, other key space */
  assert_true(lk_inflight_claim(t, "tenant:a", "k2"));
  assert_int_equal(lk_inflight_count(t), 3);
  lk_inflight_release(t, "tenant:a", "k1");
  assert_true(lk_inflight_claim(t, "tenant:a", "k1"));
  lk_inflight_release(t, "tenant:a", "nope"); /* releasing what is not held is harmless */
  assert_int_equal(lk_inflight_count(t), 3);
  lk_inflight_free(t);
}

typedef struct wake_log {
  _Atomic int order[8];
  _Atomic int n;
} wake_log;

static wake_log wl;
static void note(void *arg) {
  /* One thread (the waker's) writes: the slot first, then the count that publishes it. */
  int i = atomic_load(&wl.n);
  atomic_store(&wl.order[i], (int)(intptr_t)arg);
  atomic_store(&wl.n, i + 1);
}

static void test_waker_order(void **state) {
  (void)state;
  lk_waker *w = lk_waker_new();
  assert_non_null(w);
  int64_t now = lk_now_ns();
  lk_waker_at(w, now + LK_MS(60), note, (void *)(intptr_t)3);
  lk_waker_at(w, now + LK_MS(20), note, (void *)(intptr_t)1);
  lk_waker_at(w, now + LK_MS(40), note, (void *)(intptr_t)2);
  lk_waker_at(w, now - LK_MS(1), note, (void *)(intptr_t)0);
  for (int i = 0; i < 400 && atomic_load(&wl.n) < 4; i++) {
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(atomic_load(&wl.n), 4);
  for (int i = 0; i < 4; i++)
    assert_int_equal(atomic_load(&wl.order[i]), i);
  /* A flush runs far-future callbacks now. */
  lk_waker_at(w, now + LK_SEC(3600), note, (void *)(intptr_t)4);
  lk_waker_flush(w);
  for (int i = 0; i < 400 && atomic_load(&wl.n) < 5; i++) {
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(atomic_load(&wl.n), 5);
  lk_waker_free(w);
}

/* lk_waker_at_fd: each entry's callback runs once, with whether the peer hung up. */
typedef struct hup_note {
  _Atomic int calls;
  _Atomic int hup; /* of the last call */
  _Atomic int64_t at;
} hup_note;

static void on_hup(void *arg, bool hup) {
  hup_note *n = arg;
  atomic_store(&n->hup, hup ? 1 : 0);
  atomic_store(&n->at, lk_now_ns());
  atomic_fetch_add(&n->calls, 1);
}

static void wait_calls(const hup_note *n, int want, int ms) {
  for (int i = 0; i < ms / 5 && atomic_load(&n->calls) < want; i++) {
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
}

static void test_waker_hangup(void **state) {
  (void)state;
  lk_waker *w = lk_waker_new();
  assert_non_null(w);
  int64_t now = lk_now_ns();
  int a[2], b[2], c[2], d[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, a), 0);
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, b), 0);
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, c), 0);
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, d), 0);
  static hup_note na, nb, nc, nd, nt;
  int plain = atomic_load(&wl.n);
  lk_waker_at_fd(w, now + LK_SEC(3600), a[0], on_hup, &na);   /* its peer closes */
  lk_waker_at_fd(w, now + LK_MS(80), b[0], on_hup, &nb);      /* its peer stays */
  lk_waker_at_fd(w, now + LK_SEC(3600), c[0], on_hup, &nc);   /* its peer half-closes */
  lk_waker_at_fd(w, now + LK_SEC(3600), d[0], on_hup, &nd);   /* its peer sends, then stays */
  lk_waker_at(w, now + LK_MS(40), note, (void *)(intptr_t)0); /* a plain one meanwhile */
  lk_waker_at_fd(w, now + LK_MS(60), -1, on_hup, &nt);        /* no socket: a timer */
  /* Data to read is not a hang-up. */
  assert_int_equal(write(d[1], "x", 1), 1);
  wait_calls(&nb, 1, 2000);
  assert_int_equal(atomic_load(&nb.calls), 1);
  assert_int_equal(atomic_load(&nb.hup), 0);
  assert_true(atomic_load(&nb.at) >= now + LK_MS(80));
  assert_int_equal(atomic_load(&nt.calls), 1);
  assert_int_equal(atomic_load(&nt.hup), 0);
  assert_int_equal(atomic_load(&wl.n), plain + 1); /* the plain timer ran too */
  assert_int_equal(atomic_load(&na.calls) + atomic_load(&nc.calls) + atomic_load(&nd.calls), 0);
  /* The peer closes: at once, not at the due time an hour away. */
  int64_t t0 = lk_now_ns();
  close(a[1]);
  wait_calls(&na, 1, 2000);
  assert_int_equal(atomic_load(&na.calls), 1);
  assert_int_equal(atomic_load(&na.hup), 1);
  assert_true(atomic_load(&na.at) - t0 < LK_MS(500));
  /* A half-close (the peer's FIN, its reading side still open) is a hang-up too: libmicrohttpd
   * closes on that read EOF anyway. */
  shutdown(c[1], SHUT_WR);
  wait_calls(&nc, 1, 2000);
  assert_int_equal(atomic_load(&nc.calls), 1);
  assert_int_equal(atomic_load(&nc.hup), 1);
  assert_int_equal(atomic_load(&nd.calls), 0);
  /* A flush runs the rest now, not as hang-ups; nothing runs twice. */
  lk_waker_flush(w);
  wait_calls(&nd, 1, 2000);
  assert_int_equal(atomic_load(&nd.calls), 1);
  assert_int_equal(atomic_load(&nd.hup), 0);
  lk_waker_free(w);
  assert_int_equal(atomic_load(&na.calls), 1);
  assert_int_equal(atomic_load(&nb.calls), 1);
  assert_int_equal(atomic_load(&nc.calls), 1);
  close(a[0]), close(b[0]), close(b[1]), close(c[0]), close(c[1]), close(d[0]), close(d[1]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_idem_key_syntax),
      cmocka_unit_test(test_tenant_identity),
      cmocka_unit_test(test_fingerprint),
      cmocka_unit_test(test_parsers),
      cmocka_unit_test(test_route_patterns),
      cmocka_unit_test(test_fault_rule_parse),
      cmocka_unit_test(test_fault_seeded_reproducible),
      cmocka_unit_test(test_fault_script_count_skip),
      cmocka_unit_test(test_fault_latency_and_first_action),
      cmocka_unit_test(test_inflight),
      cmocka_unit_test(test_waker_order),
      cmocka_unit_test(test_waker_hangup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
