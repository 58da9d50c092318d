/* SPDX-License-Identifier: MIT */
/* Unit tests of `linkd demo`'s pieces that need no daemon: the workload, the three policies and
 * the decisions they make, the table, the JSON, the HTML/SVG report, finding libraryd, the
 * temporary directory, and the option parser's exit codes. */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include "demo.h"
#include "demo_policy.h"
#include "demo_run.h"
#include "demo_server.h"
#include "demo_table.h"
#include "report.h"

#include <linkd/breaker.h>
#include <linkd/budget.h>
#include <linkd/retry.h>

#include <dirent.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* --- workload --------------------------------------------------------------------------------- */

static void test_workload_seeded_and_mixed(void **state) {
  (void)state;
  enum { N = 20000 };
  demo_op *a = calloc(N, sizeof *a), *b = calloc(N, sizeof *b), *c = calloc(N, sizeof *c);
  assert_non_null(a);
  assert_non_null(b);
  assert_non_null(c);
  demo_workload_make(a, N, 42, 8);
  demo_workload_make(b, N, 42, 8);
  demo_workload_make(c, N, 43, 8);
  assert_memory_equal(a, b, N * sizeof *a); /* same seed, same list: every client the same */
  assert_memory_not_equal(a, c, N * sizeof *a);
  int kinds[3] = {0};
  for (int i = 0; i < N; i++) {
    assert_true(a[i].kind <= DEMO_OP_LOAN);
    assert_true(a[i].book < 8);
    kinds[a[i].kind]++;
  }
  /* 65 / 5 / 30 %, within 2 points on 20 000 draws (about 6 standard deviations) */
  assert_in_range(kinds[DEMO_OP_GET], N * 63 / 100, N * 67 / 100);
  assert_in_range(kinds[DEMO_OP_GET_MISSING], N * 3 / 100, N * 7 / 100);
  assert_in_range(kinds[DEMO_OP_LOAN], N * 28 / 100, N * 32 / 100);
  free(a);
  free(b);
  free(c);
}

/* --- policies --------------------------------------------------------------------------------- */

static lk_decision decide(const lk_http_policy *pol, const char *method, bool key, lk_failure f,
                          int number) {
  lk_attempt at = {.number = number,
                   .method = method,
                   .idempotency_key = key,
                   .request_fully_sent = true,
                   .failure = f,
                   .retry_after = -1,
                   .prev_delay = 0};
  lk_rand_fast r;
  lk_rand_fast_seeded(&r, 1);
  lk_decision d;
  memset(&d, 0, sizeof d);
  /* the layer treats every request as idempotent when assume_idempotent is set */
  if (pol->assume_idempotent)
    at.method = "PUT";
  assert_int_equal(lk_retry_decide(&pol->retry, &at, LK_SEC(2), &r.base, &d), LK_OK);
  return d;
}

static void test_policy_naive(void **state) {
  (void)state;
  demo_protect prot;
  lk_http_policy pol;
  char err[200];
  assert_int_equal(demo_policy_make(DEMO_NAIVE, LK_SEC(2), 1, &prot, &pol, err, sizeof err), 0);
  assert_true(pol.assume_idempotent);
  assert_int_equal(pol.idem_mode, LK_IDEM_NONE);
  assert_null(pol.budget);
  assert_null(pol.breaker);
  assert_false(pol.default_protection); /* and none from the client either */
  assert_int_equal(pol.attempt_timeout, LK_SEC(1));
  assert_true(pol.deadline >= LK_SEC(3600)); /* no deadline to speak of */
  assert_false(pol.retry.cfg.honor_retry_after);
  assert_int_equal(pol.retry.cfg.max_attempts, 4);
  /* a POST reset after it was processed: retried at once, without a key */
  lk_decision d = decide(&pol, "POST", false, LK_F_RESET_AFTER_SEND, 1);
  assert_true(d.retry);
  assert_true(d.delay <= 1);
  /* a 404 is retried too: "catch everything" */
  d = decide(&pol, "GET", false, LK_F_CLIENT_4XX, 1);
  assert_true(d.retry);
  d = decide(&pol, "GET", false, LK_F_HTTP_503, 4);
  assert_false(d.retry); /* 4 attempts in all */
  demo_protect_free(&prot);
}

static void test_policy_fixed(void **state) {
  (void)state;
  demo_protect prot;
  lk_http_policy pol;
  char err[200];
  assert_int_equal(demo_policy_make(DEMO_FIXED, LK_SEC(2), 1, &prot, &pol, err, sizeof err), 0);
  assert_int_equal(pol.attempt_timeout, LK_SEC(1));
  assert_int_equal(pol.idem_mode, LK_IDEM_NONE);
  assert_false(pol.default_protection);
  lk_decision d = decide(&pol, "POST", false, LK_F_HTTP_503, 1);
  assert_true(d.retry);
  assert_int_equal(d.delay, LK_MS(100));
  d = decide(&pol, "POST", false, LK_F_HTTP_503, 3);
  assert_int_equal(d.delay, LK_MS(100)); /* fixed: no growth, no jitter */
  d = decide(&pol, "GET", false, LK_F_CLIENT_4XX, 1);
  assert_false(d.retry);
  demo_protect_free(&prot);
}

static void test_policy_linkd(void **state) {
  (void)state;
  demo_protect prot;
  lk_http_policy pol;
  char err[200];
  assert_int_equal(demo_policy_make(DEMO_LINKD, LK_MS(1500), 7, &prot, &pol, err, sizeof err), 0);
  assert_int_equal(pol.deadline, LK_MS(1500));
  lk_http_policy def;
  lk_http_policy_init_default(&def);
  assert_int_equal(pol.attempt_timeout, def.attempt_timeout); /* the library's defaults */
  assert_int_equal(pol.retry.cfg.backoff.base, def.retry.cfg.backoff.base);
  assert_int_equal(pol.retry.cfg.min_attempt, LK_MS(50));
  assert_int_equal(pol.idem_mode, LK_IDEM_AUTO);
  assert_false(pol.assume_idempotent);
  assert_true(pol.retry.cfg.honor_retry_after);
  assert_null(pol.budget); /* the client's own per origin */
  assert_null(pol.breaker);
  assert_true(pol.default_protection);
  assert_ptr_equal(pol.rng, &prot.jitter.base);
  assert_non_null(pol.classify);
  /* phase rules: a POST that may have been processed is retried only with a key */
  lk_decision d = decide(&pol, "POST", false, LK_F_RESET_AFTER_SEND, 1);
  assert_false(d.retry);
  assert_int_equal(d.reason, LK_REASON_NOT_RETRYABLE);
  d = decide(&pol, "POST", true, LK_F_RESET_AFTER_SEND, 1);
  assert_true(d.retry);
  assert_in_range(d.delay, LK_MS(100), LK_MS(300)); /* 200 ms +- 50 % jitter */
  d = decide(&pol, "GET", false, LK_F_CLIENT_4XX, 1);
  assert_false(d.retry);
  /* 409 idempotency_key_in_use is a refusal (retried after Retry-After); out_of_stock is not */
  static const char in_use[] = "{\"error\":\"idempotency_key_in_use\"}";
  static const char stock[] = "{\"error\":\"out_of_stock\"}";
  lk_http_response r409 = {.status = 409, .body = in_use, .body_len = sizeof in_use - 1};
  assert_int_equal(pol.classify(pol.classify_ctx, &r409, LK_F_CLIENT_4XX), LK_F_TOO_MANY_REQUESTS);
  r409.body = stock;
  r409.body_len = sizeof stock - 1;
  assert_int_equal(pol.classify(pol.classify_ctx, &r409, LK_F_CLIENT_4XX), LK_F_CLIENT_4XX);
  demo_protect_free(&prot);
  demo_protect_free(&prot); /* twice is harmless */
}

/* The library's defaults with the demo's deadline and nothing else. */
static void test_policy_defaults(void **state) {
  (void)state;
  demo_protect prot;
  lk_http_policy pol, want;
  char err[200];
  assert_int_equal(demo_policy_make(DEMO_DEFAULTS, LK_SEC(2), 1, &prot, &pol, err, sizeof err), 0);
  lk_http_policy_init_default(&want);
  assert_int_equal(pol.deadline, LK_SEC(2));
  assert_int_equal(pol.attempt_timeout, want.attempt_timeout);
  assert_int_equal(pol.connect_timeout, want.connect_timeout);
  assert_int_equal(pol.retry.cfg.max_attempts, want.retry.cfg.max_attempts);
  assert_int_equal(pol.retry.cfg.backoff.base, want.retry.cfg.backoff.base);
  assert_int_equal(pol.retry.cfg.retry_on, want.retry.cfg.retry_on);
  assert_int_equal(pol.idem_mode, want.idem_mode);
  assert_null(pol.budget); /* the client's own per origin */
  assert_null(pol.breaker);
  assert_null(pol.rng);
  assert_true(pol.send_deadline);
  assert_true(pol.default_protection);
  assert_true(pol.breaker_wait);
  demo_protect_free(&prot);
}

static void test_policy_unknown(void **state) {
  (void)state;
  demo_protect prot;
  lk_http_policy pol;
  char err[200] = "";
  assert_int_equal(demo_policy_make(9, LK_SEC(2), 1, &prot, &pol, err, sizeof err), -1);
  assert_non_null(strstr(err, "unknown"));
  demo_protect_free(&prot);
}

static void test_describe(void **state) {
  (void)state;
  for (int i = 0; i < DEMO_NCLIENTS; i++) {
    demo_client_stats st;
    memset(&st, 0, sizeof st);
    demo_client_describe(i, &st);
    assert_non_null(st.name);
    assert_non_null(st.title);
    assert_non_null(st.how);
    assert_non_null(st.impl);
    assert_true(strstr(st.impl, "lk_http") != NULL); /* the same layer for all four */
  }
}

/* --- table, JSON, report ---------------------------------------------------------------------- */

static const char *const rules[] = {"route=*,kind=status,code=503,p=0.1"};

static void fill_summary(demo_summary *s) {
  memset(s, 0, sizeof *s);
  s->scenario = DEMO_SC_STORM;
  s->name = "storm";
  s->ops = 1000;
  s->seed = 3;
  s->concurrency = 8;
  s->rate = 100; /* a 10 s schedule */
  s->deadline = LK_SEC(2);
  s->overrun_margin = LK_MS(50);
  s->trigger_from = LK_SEC(4);
  s->trigger_to = LK_MS(5500);
  s->fault_rules = rules;
  s->n_fault_rules = 1;
  s->trigger_rule = "route=/books/**,kind=slowdown,factor=4";
  s->server_args = "--workers 4";
  s->capacity = 140;
  s->libraryd = "/x/libraryd";
  for (int i = 0; i < DEMO_NCLIENTS; i++) {
    demo_client_stats *c = &s->c[i];
    demo_client_describe(i, c);
    c->ops = c->done = 1000;
    c->successes = 900 + (uint64_t)i * 10;
    c->successes_in_time = c->successes - (i == DEMO_LINKD ? 0 : 40);
    c->attempts = 1600 - (uint64_t)i * 200;
    c->by_attempts[1] = 800;
    c->by_attempts[4] = 200;
    c->overruns = i == DEMO_LINKD ? 0 : 40;
    c->server_ok = i != DEMO_FIXED; /* one column without server numbers */
    c->server_requests = 1650;
    c->work_done = i == DEMO_LINKD ? 1600 : 800;
    c->work_abandoned = i == DEMO_LINKD ? 0 : 800; /* half of all the work */
    c->duplicate_loans = i == DEMO_LINKD ? 0 : 31;
    c->goodput = 86.0 + i;
    c->recovery = i == DEMO_NAIVE ? -1 : LK_MS(300);
    c->latency = lk_hist_new(1000, LK_SEC(3600));
    c->series = calloc(1, sizeof *c->series);
    assert_non_null(c->latency);
    assert_non_null(c->series);
    c->series->n = 120;
    for (int w = 0; w < 120; w++) {
      c->series->ok[w] = 9;
      c->series->failed[w] = w > 40 ? 3 : 0;
      c->series->sent[w] = 12;
      c->series->server[w] = 13;
    }
    c->series->have_server = i != DEMO_FIXED;
    for (int k = 0; k < 1000; k++)
      lk_hist_record(c->latency, LK_MS(1) + LK_MS(k % 10) + (k == 999 ? LK_SEC(2) : 0));
    c->p50 = lk_hist_percentile(c->latency, 50);
    c->p99 = lk_hist_percentile(c->latency, 99);
    c->p999 = lk_hist_percentile(c->latency, 99.9);
    c->max = lk_hist_max(c->latency);
  }
  s->c[0].errors[0] = 900;
  s->c[0].errors[11] = 100; /* LK_EATTEMPTS */
}

static void free_summary(demo_summary *s) {
  for (int i = 0; i < DEMO_NCLIENTS; i++)
    demo_client_stats_free(&s->c[i]);
}

static void test_fmt_duration(void **state) {
  (void)state;
  char b[32];
  demo_fmt_duration(LK_NS_PER_US * 850, b, sizeof b);
  assert_string_equal(b, "850us");
  demo_fmt_duration(LK_NS_PER_US * 2140, b, sizeof b);
  assert_string_equal(b, "2.14ms");
  demo_fmt_duration(LK_MS(250), b, sizeof b);
  assert_string_equal(b, "250ms");
  demo_fmt_duration(LK_MS(1250), b, sizeof b);
  assert_string_equal(b, "1.25s");
}

static void test_table_rows(void **state) {
  (void)state;
  demo_summary s;
  fill_summary(&s);
  demo_row rows[DEMO_ROWS_MAX];
  int n = demo_table_rows(&s, rows, DEMO_ROWS_MAX);
  assert_int_equal(n, 11);
  assert_string_equal(rows[0].label, "success within deadline");
  assert_string_equal(rows[0].cell[DEMO_NAIVE], "86.0%"); /* 40 of its answers came too late */
  assert_string_equal(rows[0].cell[DEMO_LINKD], "93.0%");
  assert_string_equal(rows[1].label, "goodput (ops/s)");
  assert_string_equal(rows[1].cell[DEMO_LINKD], "89");
  assert_string_equal(rows[2].cell[DEMO_NAIVE], "165"); /* 1650 requests over 10 s */
  assert_string_equal(rows[2].cell[DEMO_FIXED], "n/a");
  assert_string_equal(rows[3].cell[DEMO_NAIVE], "1.65");
  assert_string_equal(rows[4].label, "work for callers already gone");
  assert_string_equal(rows[4].cell[DEMO_NAIVE], "50.0%");
  assert_string_equal(rows[4].cell[DEMO_LINKD], "0.0%");
  assert_string_equal(rows[4].cell[DEMO_FIXED], "n/a");
  assert_string_equal(rows[5].label, "duplicate loans applied");
  assert_string_equal(rows[5].cell[DEMO_NAIVE], "31");
  assert_string_equal(rows[5].cell[DEMO_FIXED], "n/a");
  assert_string_equal(rows[5].cell[DEMO_LINKD], "0");
  assert_string_equal(rows[6].label, "deadline overruns (> 2.05s)");
  assert_string_equal(rows[6].cell[DEMO_NAIVE], "40");
  assert_string_equal(rows[6].cell[DEMO_LINKD], "0");
  assert_string_equal(rows[7].label, "success latency p50");
  assert_string_equal(rows[10].label, "recovery time");
  assert_string_equal(rows[10].cell[DEMO_NAIVE], "never");
  assert_string_equal(rows[10].cell[DEMO_LINKD], "300ms");
  for (int r = 0; r < n; r++)
    assert_non_null(rows[r].hint);
  assert_int_equal(demo_table_rows(&s, rows, 3), 3); /* never writes past max */
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  demo_table_print(f, &s);
  fclose(f);
  assert_non_null(strstr(buf, "linkd policy"));
  assert_non_null(strstr(buf, "linkd defaults"));
  assert_non_null(strstr(buf, "recovery time"));
  assert_null(strstr(buf, "note:")); /* no client waited for the driver's slots */
  free(buf);
  /* Half the operations held back is not yet "most"; one more is, and only that client is named,
   * with its count and its longest wait. */
  s.concurrency = 64;
  s.c[DEMO_FIXED].held = 500;
  s.c[DEMO_LINKD].held = 501;
  s.c[DEMO_LINKD].held_max = LK_MS(1250);
  assert_false(demo_driver_saturated(&s.c[DEMO_FIXED]));
  assert_true(demo_driver_saturated(&s.c[DEMO_LINKD]));
  f = open_memstream(&buf, &len);
  demo_table_print(f, &s);
  fclose(f);
  const char *note = strstr(buf, "note: the driver held most operations back");
  assert_non_null(note);
  assert_non_null(strstr(note, "(--concurrency 64)"));
  assert_non_null(strstr(note, "linkd policy: 501 of 1000, for up to 1.25s"));
  assert_null(strstr(note, "fixed interval:"));
  free(buf);
  free_summary(&s);
}

/* Recovery: the first 500 ms after the trigger whose mean is back to 90 % of the baseline. */
static void test_recovery(void **state) {
  (void)state;
  demo_client_stats st;
  memset(&st, 0, sizeof st);
  st.series = calloc(1, sizeof *st.series);
  assert_non_null(st.series);
  demo_run_cfg cfg = {.n = 1000, .rate = 100, .deadline = LK_SEC(2), .trigger_from = LK_SEC(3),
                      .trigger_to = LK_SEC(5)};
  for (int w = 0; w < 120; w++)
    st.series->ok[w] = w < 30 ? 10 : w < 50 ? 2 : w < 70 ? 3 : 10; /* back at 7 s */
  st.successes_in_time = 900;
  demo_client_finish(&cfg, &st);
  assert_true(st.baseline == 10.0);
  assert_int_equal(st.recovery, LK_SEC(2));
  assert_true(st.goodput > 74.9 && st.goodput < 75.1); /* 900 over 10 s + the 2 s deadline */
  for (int w = 50; w < 120; w++)
    st.series->ok[w] = 3; /* never back */
  demo_client_finish(&cfg, &st);
  assert_int_equal(st.recovery, -1);
  for (int w = 50; w < 120; w++)
    st.series->ok[w] = 10; /* at once */
  demo_client_finish(&cfg, &st);
  assert_int_equal(st.recovery, 0);
  /* faults --ops 100 at 250/s: the outage ends at 55 % of a 400 ms schedule, with not one
   * 500 ms span left to judge: too short to tell, not "never" (-1) */
  demo_run_cfg small = {.n = 100,
                        .rate = 250,
                        .deadline = LK_SEC(2),
                        .trigger_from = LK_MS(160),
                        .trigger_to = LK_MS(220)};
  demo_client_finish(&small, &st);
  assert_int_equal(st.recovery, DEMO_RECOVERY_TOO_SHORT);
  /* 480 ms left after it (a 700 ms schedule): judged, and here back at once */
  small.n = 175;
  demo_client_finish(&small, &st);
  assert_int_equal(st.recovery, 0);
  demo_client_stats_free(&st);
}

/* A schedule longer than the series (60 s): --rate 10 --ops 1000 is 100 s, the outage from 40 s
 * to 55 s. Nothing is judged past the series' last window (it read ok[600..], the next arrays,
 * and "recovered" at 60 s on the failure counts); not recovered within it is "too soon to tell",
 * not "never", since the run went on; a trigger past the series cannot be judged at all (the
 * baseline read far past the allocation). */
static void test_recovery_past_the_series(void **state) {
  (void)state;
  demo_client_stats st;
  memset(&st, 0, sizeof st);
  st.series = calloc(1, sizeof *st.series);
  assert_non_null(st.series);
  for (int w = 0; w < DEMO_WINDOWS; w++) {
    st.series->ok[w] = w < 400 ? 10 : 0; /* down from the outage to the series' end */
    st.series->failed[w] = 10;
  }
  demo_run_cfg cfg = {.n = 1000,
                      .rate = 10,
                      .deadline = LK_SEC(2),
                      .trigger_from = LK_SEC(40),
                      .trigger_to = LK_SEC(55)};
  demo_client_finish(&cfg, &st);
  assert_int_equal(st.series->n, DEMO_WINDOWS);
  assert_true(st.baseline == 10.0);
  assert_int_equal(st.recovery, DEMO_RECOVERY_TOO_SHORT);
  /* back within the series: judged as usual */
  for (int w = 570; w < DEMO_WINDOWS; w++)
    st.series->ok[w] = 10;
  demo_client_finish(&cfg, &st);
  assert_int_equal(st.recovery, LK_SEC(2));
  /* --rate 1 --ops 1000: the outage starts at 400 s, far past the series */
  memset(st.series, 0, sizeof *st.series);
  demo_run_cfg slow = {.n = 1000,
                       .rate = 1,
                       .deadline = LK_SEC(2),
                       .trigger_from = LK_SEC(400),
                       .trigger_to = LK_SEC(550)};
  demo_client_finish(&slow, &st);
  assert_int_equal(st.recovery, DEMO_RECOVERY_TOO_SHORT);
  demo_client_stats_free(&st);
}

static void test_table_json(void **state) {
  (void)state;
  demo_summary s, t;
  fill_summary(&s);
  fill_summary(&t);
  t.scenario = DEMO_SC_FAULTS;
  t.name = "faults";
  const demo_summary *both[2] = {&t, &s};
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_int_equal(demo_table_json(f, both, 2, "/tmp/r.html", true, NULL), 0);
  fclose(f);
  json_error_t je;
  json_t *root = json_loads(buf, 0, &je);
  assert_non_null(root);
  assert_string_equal(json_string_value(json_object_get(root, "report")), "/tmp/r.html");
  assert_true(json_is_true(json_object_get(root, "complete")));
  assert_true(json_is_null(json_object_get(root, "error")));
  json_t *scs = json_object_get(root, "scenarios");
  assert_int_equal(json_array_size(scs), 2);
  assert_string_equal(json_string_value(json_object_get(json_array_get(scs, 0), "name")),
                      "faults");
  json_t *o = json_array_get(scs, 1);
  assert_int_equal(json_integer_value(json_object_get(o, "ops")), 1000);
  assert_true(json_is_array(json_object_get(o, "faults")));
  assert_true(json_real_value(json_object_get(o, "capacity")) == 140.0);
  json_t *cl = json_object_get(o, "clients");
  assert_int_equal(json_array_size(cl), DEMO_NCLIENTS);
  json_t *naive = json_array_get(cl, 0), *fixed = json_array_get(cl, 1);
  assert_string_equal(json_string_value(json_object_get(naive, "name")), "naive");
  assert_string_equal(json_string_value(json_object_get(json_array_get(cl, 2), "name")),
                      "defaults");
  assert_int_equal(json_integer_value(json_object_get(naive, "duplicate_loans")), 31);
  assert_true(json_is_null(json_object_get(fixed, "duplicate_loans"))); /* not measured */
  assert_true(json_is_null(json_object_get(fixed, "server")));
  assert_true(json_is_null(json_object_get(naive, "recovery_ms")));  /* never */
  assert_true(json_real_value(json_object_get(fixed, "recovery_ms")) == 300.0);
  assert_true(json_real_value(json_object_get(naive, "abandoned_work_share")) == 0.5);
  assert_int_equal(json_integer_value(json_object_get(naive, "held")), 0);
  assert_true(json_real_value(json_object_get(naive, "held_max_ms")) == 0.0);
  assert_int_equal(
      json_integer_value(json_object_get(json_object_get(naive, "errors"), "EATTEMPTS")), 100);
  json_t *lat = json_object_get(naive, "latency_ms");
  assert_true(json_real_value(json_object_get(lat, "max")) > 2000.0);
  json_t *se = json_object_get(naive, "series");
  assert_int_equal(json_array_size(json_object_get(se, "ok")), 120);
  assert_int_equal(json_array_size(json_object_get(se, "server")), 120);
  assert_true(json_is_null(json_object_get(json_object_get(fixed, "series"), "server")));
  json_decref(root);
  free(buf);

  /* a partial run: only the scenarios that finished, why it stopped; a path that is not UTF-8
   * (--libraryd, --report) no longer drops the whole document */
  t.libraryd = "/tmp/\xff\xfe/libraryd";
  const demo_summary *one[1] = {&t};
  buf = NULL;
  f = open_memstream(&buf, &len);
  assert_int_equal(demo_table_json(f, one, 1, NULL, false, "interrupted \xff"), 0);
  fclose(f);
  root = json_loads(buf, 0, &je);
  assert_non_null(root);
  assert_false(json_is_true(json_object_get(root, "complete")));
  assert_string_equal(json_string_value(json_object_get(root, "error")), "interrupted ?");
  assert_true(json_is_null(json_object_get(root, "report")));
  json_t *sc = json_array_get(json_object_get(root, "scenarios"), 0);
  assert_string_equal(json_string_value(json_object_get(sc, "libraryd")), "/tmp/?\?/libraryd");
  json_decref(root);
  free(buf);
  /* nothing finished: still one document */
  buf = NULL;
  f = open_memstream(&buf, &len);
  assert_int_equal(demo_table_json(f, NULL, 0, NULL, false, "no libraryd"), 0);
  fclose(f);
  root = json_loads(buf, 0, &je);
  assert_non_null(root);
  assert_int_equal(json_array_size(json_object_get(root, "scenarios")), 0);
  json_decref(root);
  free(buf);
  free_summary(&s);
  free_summary(&t);
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
    n++;
  return n;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  if (b)
    b[n] = '\0';
  fclose(f);
  return b;
}

static void test_report(void **state) {
  (void)state;
  demo_summary s;
  fill_summary(&s);
  s.c[DEMO_NAIVE].title = "naive <&>"; /* escaped, never raw markup */
  s.c[DEMO_NAIVE].held = 600;          /* most operations waited for the driver: said, once */
  char dir[] = "/tmp/linkd-demo-test-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[256], err[300];
  snprintf(path, sizeof path, "%s/r.html", dir);
  const demo_summary *one[1] = {&s};
  assert_int_equal(demo_report_write(path, one, 1, err, sizeof err), 0);
  char *html = slurp(path);
  assert_non_null(html);
  /* per client a time series (3 lines), then the CDF and the attempts chart */
  assert_int_equal(count(html, "<svg"), DEMO_NCLIENTS + 2);
  assert_int_equal(count(html, "</svg>"), DEMO_NCLIENTS + 2);
  assert_int_equal(count(html, "<polyline"), DEMO_NCLIENTS * 3 + DEMO_NCLIENTS);
  assert_non_null(strstr(html, "slowdown x4")); /* the shaded trigger window */
  assert_non_null(strstr(html, "requests reaching libraryd"));
  assert_non_null(strstr(html, "requests sent")); /* the column without server series */
  assert_non_null(strstr(html, "failed, not plotted"));
  assert_true(count(html, "<rect") >= DEMO_NCLIENTS * DEMO_ATTEMPT_BUCKETS);
  assert_non_null(strstr(html, "naive &lt;&amp;&gt;"));
  assert_int_equal(count(html, "more than the driver could carry"), 1);
  assert_non_null(strstr(html, "carry</strong> for naive &lt;&amp;&gt;: 600 of 1000"));
  assert_null(strstr(html, "naive <&>"));
  assert_non_null(strstr(html, "</html>"));
  assert_null(strstr(html, "<script")); /* self-contained: no script, nothing fetched */
  assert_null(strstr(html, "src=\""));
  assert_null(strstr(html, "href=\""));
  free(html);
  unlink(path);
  /* an unwritable path is an error with a message, not a crash */
  snprintf(path, sizeof path, "%s/missing/r.html", dir);
  assert_int_equal(demo_report_write(path, one, 1, err, sizeof err), -1);
  assert_non_null(strstr(err, "cannot write"));
  rmdir(dir);
  free_summary(&s);
}

/* A minimal check that the page is well formed: every element that needs an end tag is closed in
 * order (html, head, body, p, ul, li, table, tr, td, svg, text, ...); void elements (meta, br)
 * and self-closed SVG elements (<line .../>) need none. Text between tags holds no '<'. Returns
 * NULL, or what went wrong. */
static const char *html_balance(const char *html, char *why, size_t cap) {
  static const char *const void_el[] = {"meta", "br", "hr", "img", "input", "link", NULL};
  char stack[64][16];
  int depth = 0;
  const char *p = strstr(html, "<!DOCTYPE html>");
  if (p != html)
    return "no <!DOCTYPE html> first";
  p += strlen("<!DOCTYPE html>");
  while ((p = strchr(p, '<')) != NULL) {
    bool end = p[1] == '/';
    const char *n = p + 1 + end;
    size_t len = strspn(n, "abcdefghijklmnopqrstuvwxyz0123456789");
    if (len == 0 || len >= 16) {
      snprintf(why, cap, "a '<' that starts no tag: %.40s", p);
      return why;
    }
    const char *gt = strchr(n, '>');
    if (!gt)
      return "an unterminated tag";
    for (const char *q = n; q < gt; q++)
      if (*q == '<') {
        snprintf(why, cap, "a '<' inside a tag: %.40s", p);
        return why;
      }
    char name[16];
    memcpy(name, n, len);
    name[len] = '\0';
    bool is_void = gt[-1] == '/';
    for (int k = 0; void_el[k]; k++)
      is_void = is_void || !strcmp(name, void_el[k]);
    if (end) {
      if (depth == 0 || strcmp(stack[depth - 1], name)) {
        snprintf(why, cap, "</%s> closes <%s>", name, depth ? stack[depth - 1] : "nothing");
        return why;
      }
      depth--;
    } else if (!is_void) {
      if (depth == 64)
        return "nested too deep";
      snprintf(stack[depth++], sizeof stack[0], "%s", name);
    }
    p = gt + 1;
  }
  if (depth != 0) {
    snprintf(why, cap, "<%s> never closed", stack[depth - 1]);
    return why;
  }
  return NULL;
}

/* Every string the report interpolates is escaped, whatever it holds (it wrote the storm's
 * server arguments and the scenario's name raw), and the page stays well formed and offline. */
static void test_report_hostile_strings(void **state) {
  (void)state;
  static const char evil[] = "<script src=\"http://x/\">alert('x')</script>&amp;\"'";
  static const char *const evil_rules[] = {evil};
  demo_summary s;
  fill_summary(&s);
  s.name = evil;
  s.server_args = evil;
  s.trigger_rule = evil;
  s.fault_rules = evil_rules;
  for (int i = 0; i < DEMO_NCLIENTS; i++) {
    s.c[i].title = evil;
    s.c[i].how = evil;
    s.c[i].impl = evil;
  }
  char dir[] = "/tmp/linkd-demo-test-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[256], err[300], why[128];
  snprintf(path, sizeof path, "%s/r.html", dir);
  const demo_summary *one[1] = {&s};
  assert_int_equal(demo_report_write(path, one, 1, err, sizeof err), 0);
  char *html = slurp(path);
  assert_non_null(html);
  assert_null(strstr(html, "<script"));
  assert_null(strstr(html, "alert('x')"));
  assert_null(strstr(html, "src=\""));
  assert_non_null(strstr(html, "&lt;script src=&quot;http://x/&quot;&gt;alert(&#39;x&#39;)"));
  const char *bad = html_balance(html, why, sizeof why);
  if (bad)
    fprintf(stderr, "not well formed: %s\n", bad);
  assert_null(bad);
  free(html);
  unlink(path);
  rmdir(dir);
  free_summary(&s);
}

/* Where the report may go is checked before the run (a directory, or a read-only or missing
 * directory, failed only after the whole run); the check creates nothing. */
static void test_report_check(void **state) {
  (void)state;
  char dir[] = "/tmp/linkd-demo-test-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[256], err[512];
  assert_int_equal(demo_report_check(dir, err, sizeof err), -1);
  assert_non_null(strstr(err, "is a directory"));
  snprintf(path, sizeof path, "%s/missing/r.html", dir);
  assert_int_equal(demo_report_check(path, err, sizeof err), -1);
  assert_non_null(strstr(err, "missing"));
  snprintf(path, sizeof path, "%s/r.html", dir);
  assert_int_equal(demo_report_check(path, err, sizeof err), 0);
  assert_int_equal(access(path, F_OK), -1); /* not created by the check */
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fclose(f);
  assert_int_equal(demo_report_check(path, err, sizeof err), 0);
  snprintf(path, sizeof path, "%s/r.html/x", dir); /* a file as the directory */
  assert_int_equal(demo_report_check(path, err, sizeof err), -1);
  assert_int_equal(demo_report_check("/dev/full", err, sizeof err), 0); /* fails when written */
  snprintf(path, sizeof path, "%s/r.html", dir);
  unlink(path);
  rmdir(dir);
}

/* A report that cannot be written whole (a full disk, here a file size limit) leaves the previous
 * one as it was and no temporary file; it truncated the old report and left a cut one. */
static void test_report_write_fails_whole(void **state) {
  (void)state;
  demo_summary s;
  fill_summary(&s);
  const demo_summary *one[1] = {&s};
  char dir[] = "/tmp/linkd-demo-test-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[256], err[300];
  snprintf(path, sizeof path, "%s/r.html", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("previous report\n", f);
  fclose(f);
  struct rlimit old, small;
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
  small = old;
  small.rlim_cur = 4096;                            /* the report is tens of KB */
  void (*old_xfsz)(int) = signal(SIGXFSZ, SIG_IGN); /* EFBIG instead of a signal */
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
  int rc = demo_report_write(path, one, 1, err, sizeof err);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
  signal(SIGXFSZ, old_xfsz);
  assert_int_equal(rc, -1);
  assert_non_null(strstr(err, "cannot write"));
  char *text = slurp(path);
  assert_non_null(text);
  assert_string_equal(text, "previous report\n");
  free(text);
  /* nothing else in the directory */
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  closedir(d);
  assert_int_equal(n, 1);
  /* and when it can be written, it replaces the previous one */
  assert_int_equal(demo_report_write(path, one, 1, err, sizeof err), 0);
  text = slurp(path);
  assert_non_null(text);
  assert_non_null(strstr(text, "</html>"));
  free(text);
  unlink(path);
  rmdir(dir);
  free_summary(&s);
}

/* A trigger past the series (a schedule over 60 s) is shaded within the chart, not drawn
 * thousands of pixels to the right of it. */
static void test_report_trigger_past_the_series(void **state) {
  (void)state;
  demo_summary s;
  fill_summary(&s);
  s.trigger_from = LK_SEC(400);
  s.trigger_to = LK_SEC(550);
  for (int i = 0; i < DEMO_NCLIENTS; i++)
    s.c[i].series->n = DEMO_WINDOWS;
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  demo_report_svg_series(f, &s, 0);
  fclose(f);
  const char *band = strstr(buf, "fill=\"#f3e3c3\"");
  assert_non_null(band);
  const char *x = strstr(buf, "<rect x=\"0\"");
  assert_non_null(x);
  x = strstr(x + 1, "<rect x=\""); /* the band */
  assert_non_null(x);
  double bx = atof(x + strlen("<rect x=\""));
  assert_true(bx <= 900.0);
  free(buf);
  free_summary(&s);
}

static void test_report_empty_histograms(void **state) {
  (void)state;
  demo_summary s;
  fill_summary(&s);
  for (int i = 0; i < DEMO_NCLIENTS; i++) {
    lk_hist_free(s.c[i].latency);
    s.c[i].latency = NULL; /* a run cut short before anything completed */
  }
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  demo_report_svg_cdf(f, &s);
  demo_report_svg_attempts(f, &s);
  fclose(f);
  assert_int_equal(count(buf, "<polyline"), 0);
  assert_int_equal(count(buf, "</svg>"), 2);
  free(buf);
  free_summary(&s);
}

/* --- finding libraryd, the temporary directory ------------------------------------------------ */

static void test_find_libraryd(void **state) {
  (void)state;
  char out[DEMO_PATH_MAX], err[512];
  assert_int_equal(demo_find_libraryd("/nonexistent/libraryd", out, sizeof out, err, sizeof err),
                   -1);
  assert_non_null(strstr(err, "--libraryd"));
  assert_int_equal(demo_find_libraryd(LIBRARYD_BIN, out, sizeof out, err, sizeof err), 0);
  assert_non_null(strstr(out, "libraryd"));
  assert_int_equal(setenv("LINKD_LIBRARYD", "/etc/passwd", 1), 0); /* not executable */
  assert_int_equal(demo_find_libraryd(NULL, out, sizeof out, err, sizeof err), -1);
  assert_non_null(strstr(err, "LINKD_LIBRARYD"));
  assert_int_equal(setenv("LINKD_LIBRARYD", LIBRARYD_BIN, 1), 0);
  assert_int_equal(demo_find_libraryd(NULL, out, sizeof out, err, sizeof err), 0);
  char canon[DEMO_PATH_MAX];
  assert_non_null(realpath(LIBRARYD_BIN, canon));
  assert_string_equal(out, canon);
  unsetenv("LINKD_LIBRARYD");
}

static void test_tmpdir(void **state) {
  (void)state;
  char dir[DEMO_PATH_MAX];
  assert_int_equal(demo_tmpdir_create(dir, sizeof dir), 0);
  assert_non_null(strstr(dir, "linkd-demo-"));
  char p[DEMO_PATH_MAX + 16];
  for (int i = 0; i < 3; i++) {
    snprintf(p, sizeof p, "%s/f%d", dir, i);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("x", f);
    fclose(f);
  }
  demo_tmpdir_remove(dir);
  struct stat st;
  assert_int_equal(stat(dir, &st), -1);
  char tiny[8];
  assert_int_equal(demo_tmpdir_create(tiny, sizeof tiny), -1);
}

/* --- options ---------------------------------------------------------------------------------- */

static int run_main(const char *const *args) {
  char *argv[16];
  int argc = 0;
  for (; args[argc]; argc++)
    argv[argc] = (char *)args[argc];
  argv[argc] = NULL;
  return linkd_demo_main(argc, argv);
}

static void test_options(void **state) {
  (void)state;
  /* usage errors never start anything: 64 (EX_USAGE) */
  const char *const bad[][4] = {
      {"demo", "--ops", "abc", NULL},
      {"demo", "--ops", "5", NULL},
      {"demo", "--ops=-3", NULL, NULL},
      {"demo", "--concurrency", "0", NULL},
      {"demo", "--rate", "1000001", NULL},
      {"demo", "--frobnicate", NULL, NULL},
      {"demo", "--seed", NULL, NULL},
      {"demo", "--report=", NULL, NULL},
      {"demo", "--ops", "10x", NULL},
      {"demo", "extra", NULL, NULL},
      {"demo", "--scenario", "both", NULL},
      {"demo", "--storm-seconds", "4", NULL},
      /* libraryd takes seeds up to 2^63-1: a larger one failed at its first start */
      {"demo", "--seed", "9223372036854775808", NULL},
      {"demo", "--seed", "18446744073709551615", NULL},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(run_main(bad[i]), 64);
  const char *const help[] = {"demo", "--help", NULL};
  assert_int_equal(run_main(help), 0);
  /* a missing libraryd is a failure (1) with a message, before any temporary file exists */
  const char *const missing[] = {"demo", "--libraryd", "/nonexistent/libraryd", NULL};
  assert_int_equal(run_main(missing), 1);
  const char *const max_seed[] = {
      "demo", "--seed", "9223372036854775807", "--libraryd", "/nonexistent/libraryd", NULL};
  assert_int_equal(run_main(max_seed), 1); /* accepted; then no libraryd */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_workload_seeded_and_mixed),
      cmocka_unit_test(test_policy_naive),
      cmocka_unit_test(test_policy_fixed),
      cmocka_unit_test(test_policy_linkd),
      cmocka_unit_test(test_policy_defaults),
      cmocka_unit_test(test_policy_unknown),
      cmocka_unit_test(test_describe),
      cmocka_unit_test(test_fmt_duration),
      cmocka_unit_test(test_table_rows),
      cmocka_unit_test(test_recovery),
      cmocka_unit_test(test_recovery_past_the_series),
      cmocka_unit_test(test_table_json),
      cmocka_unit_test(test_report),
      cmocka_unit_test(test_report_empty_histograms),
      cmocka_unit_test(test_report_hostile_strings),
      cmocka_unit_test(test_report_trigger_past_the_series),
      cmocka_unit_test(test_report_check),
      cmocka_unit_test(test_report_write_fails_whole),
      cmocka_unit_test(test_find_libraryd),
      cmocka_unit_test(test_tmpdir),
      cmocka_unit_test(test_options),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
