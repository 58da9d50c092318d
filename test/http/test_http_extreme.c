/* SPDX-License-Identifier: MIT */
/* Extreme time values through the whole driver, against a real server: every duration at the
 * edges of what lk_http_policy_validate() accepts, clocks whose time line sits near INT64_MAX or
 * INT64_MIN, and absolute deadlines anywhere on it. Built with -fsanitize=undefined (CI), any
 * wrapping addition or subtraction aborts the test; without it, a wrapped timer fires at once or
 * an expired deadline is ignored, and the assertions below fail. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "httptest.h"

#include <linkd/bulkhead.h>
#include <linkd/deadline.h>

#include <stdio.h>
#include <string.h>

static faultd_proc FP;

static int teardown(void **s) {
  (void)s;
  faultd_stop(&FP);
  return 0;
}

/* The system clock moved by a fixed offset, so the driver's instants sit wherever the test
 * wants on the int64 time line while libcurl still runs in real time. */
typedef struct shifted_clock {
  lk_clock base;
  int64_t at, real; /* it read `at` when the system clock read `real` */
} shifted_clock;

static int64_t shifted_now(const lk_clock *c) {
  const shifted_clock *s = (const shifted_clock *)c;
  return s->at + (lk_now_ns() - s->real); /* the tests stay far enough from both ends */
}

/* A clock reading `at` now (and moving forward in real time from there). */
static void shifted_init(shifted_clock *s, int64_t at) {
  s->base.now = shifted_now;
  s->at = at;
  s->real = lk_now_ns();
}

static const int64_t durations[] = {0,          1,           2,         LK_MS(1),
                                    LK_SEC(1),  INT64_MAX,   INT64_MAX - 1,
                                    -1,         INT64_MIN,   INT64_MIN + 1,
                                    LK_HTTP_DURATION_MAX - 1, LK_HTTP_DURATION_MAX,
                                    LK_HTTP_DURATION_MAX + 1};

enum { F_DEADLINE, F_ATTEMPT, F_CONNECT, F_DNS, F_POOL, F_TLS, F_WRITE, F_FIRST, F_IDLE,
       F_IDLE_LIFE, F_RESERVE, F__N };

static int64_t *field(lk_http_policy *p, int f) {
  switch (f) {
  case F_DEADLINE: return &p->deadline;
  case F_ATTEMPT: return &p->attempt_timeout;
  case F_CONNECT: return &p->connect_timeout;
  case F_DNS: return &p->dns_timeout;
  case F_POOL: return &p->pool_timeout;
  case F_TLS: return &p->tls_timeout;
  case F_WRITE: return &p->write_timeout;
  case F_FIRST: return &p->first_byte_timeout;
  case F_IDLE: return &p->idle_timeout;
  case F_IDLE_LIFE: return &p->pool_idle_lifetime;
  default: return &p->deadline_reserve;
  }
}

/* The lowest value each field accepts. */
static int64_t field_min(int f) {
  switch (f) {
  case F_DEADLINE:
  case F_ATTEMPT: return 1;
  case F_IDLE_LIFE: return LK_SEC(1);
  default: return 0;
  }
}

/* Validation is exactly the documented range [min, LK_HTTP_DURATION_MAX], for every field. */
static void test_validate_ranges(void **s) {
  (void)s;
  for (int f = 0; f < F__N; f++)
    for (size_t i = 0; i < sizeof durations / sizeof durations[0]; i++) {
      lk_http_policy p;
      lk_http_policy_init_default(&p);
      int64_t v = durations[i];
      *field(&p, f) = v;
      bool ok = v >= field_min(f) && v <= LK_HTTP_DURATION_MAX;
      const char *why = NULL;
      int rc = lk_http_policy_validate(&p, &why);
      if (rc != (ok ? LK_OK : LK_ECONFIG))
        fail_msg("field %d = %lld: %s (%s)", f, (long long)v, lk_err_name(rc), why ? why : "");
      if (!ok)
        assert_non_null(why);
    }
}

/* Every duration at its maximum, with clocks anywhere on the time line: a 200 arrives and is a
 * success in one attempt (no timer may fire early because a sum wrapped). */
static void test_max_durations_succeed(void **s) {
  (void)s;
  ht_start(&FP, "ok", "--drip-ms", "2", NULL);
  lk_bulkhead_config bc;
  lk_bulkhead_config_init_default(&bc);
  lk_bulkhead *bh = NULL;
  assert_int_equal(lk_bulkhead_new(&bc, &bh, NULL), LK_OK);
  const int64_t starts[] = {0,
                            LK_SEC(1),
                            INT64_MAX - LK_SEC(3600),
                            INT64_MAX - LK_HTTP_DURATION_MAX,
                            INT64_MIN + LK_SEC(3600),
                            -LK_HTTP_DURATION_MAX};
  lk_http_client *c = lk_http_client_new(NULL);
  assert_non_null(c);
  for (size_t i = 0; i < sizeof starts / sizeof starts[0]; i++) {
    for (int deadline_kind = 0; deadline_kind < 3; deadline_kind++) {
      shifted_clock clk;
      shifted_init(&clk, starts[i]);
      lk_http_policy pol;
      ht_policy(&pol);
      pol.clock = &clk.base;
      for (int f = 0; f < F__N; f++)
        if (f != F_RESERVE)
          *field(&pol, f) = LK_HTTP_DURATION_MAX;
      pol.deadline_reserve = LK_HTTP_DURATION_MAX - 1;
      pol.bulkhead = bh;
      if (deadline_kind == 1)
        pol.deadline_at = (lk_deadline){INT64_MAX - 1};
      else if (deadline_kind == 2) /* an absolute deadline an hour away */
        pol.deadline_at = lk_deadline_after(clk.base.now(&clk.base), LK_SEC(3600));
      assert_int_equal(lk_http_policy_validate(&pol, NULL), LK_OK);
      print_message("# clock start %lld, deadline kind %d\n", (long long)starts[i],
                    deadline_kind);
      ht_run r;
      ht_call(&FP, c, "GET", NULL, 0, &pol, 0, &r);
      assert_int_equal(r.err, LK_OK);
      assert_int_equal(r.nattempts, 1);
      assert_int_equal(r.att[0].failure, LK_F_NONE);
      assert_int_equal(lk_http_result_status(r.res), 200);
      assert_true(r.att[0].timeout > 0);
      assert_true(r.att[0].duration >= 0 && r.att[0].duration < LK_SEC(5));
      assert_true(lk_http_result_elapsed(r.res) >= 0);
      ht_free(&r);
    }
  }
  lk_http_client_free(c);
  lk_bulkhead_free(bh);
}

/* An absolute deadline that has passed, however far in the past (lk_deadline_child of an old
 * deadline saturates to INT64_MIN), ends the call before any I/O. */
static void test_expired_deadlines(void **s) {
  (void)s;
  ht_start(&FP, "ok", NULL);
  const int64_t starts[] = {0, LK_SEC(100), INT64_MAX - LK_SEC(3600), INT64_MIN + LK_SEC(3600)};
  for (size_t i = 0; i < sizeof starts / sizeof starts[0]; i++) {
    shifted_clock clk;
    shifted_init(&clk, starts[i]);
    int64_t now = clk.base.now(&clk.base);
    const lk_deadline expired[] = {
        {INT64_MIN},
        {INT64_MIN + 1},
        lk_deadline_child(lk_deadline_after(INT64_MIN + 10, 0), LK_SEC(1)),
        lk_deadline_child((lk_deadline){now}, LK_HTTP_DURATION_MAX),
        {now - 1},
    };
    for (size_t j = 0; j < sizeof expired / sizeof expired[0]; j++) {
      lk_http_policy pol;
      ht_policy(&pol);
      pol.clock = &clk.base;
      pol.deadline = LK_HTTP_DURATION_MAX;
      pol.deadline_at = expired[j];
      ht_run r;
      ht_call(&FP, NULL, "GET", NULL, 0, &pol, 0, &r);
      if (r.err != LK_EDEADLINE)
        fail_msg("clock %lld, deadline_at %lld: %s", (long long)starts[i],
                 (long long)expired[j].at, lk_err_name(r.err));
      assert_int_equal(lk_http_result_failure(r.res), LK_F_DEADLINE_EXCEEDED);
      assert_int_equal(r.nattempts, 0);
      assert_true(lk_http_result_elapsed(r.res) >= 0);
      ht_free(&r);
    }
  }
  assert_int_equal(faultd_request_count(&FP), 0);
}

/* Near the end of the time line a short deadline still bounds retries: 503s are retried until
 * attempts run out, each delay measured on the shifted clock. */
static void test_retries_near_time_line_ends(void **s) {
  (void)s;
  ht_start(&FP, "status", "--status", "503", "--retry-after", "99999999999999999999", NULL);
  const int64_t starts[] = {INT64_MAX - LK_SEC(60), INT64_MIN + LK_SEC(1)};
  for (size_t i = 0; i < sizeof starts / sizeof starts[0]; i++) {
    shifted_clock clk;
    shifted_init(&clk, starts[i]);
    lk_http_policy pol;
    ht_policy(&pol);
    pol.clock = &clk.base;
    ht_run r;
    ht_call(&FP, NULL, "GET", NULL, 0, &pol, 1, &r);
    /* Retry-After saturates at INT64_MAX, capped at 60 s: longer than the deadline */
    assert_int_equal(r.err, LK_EDEADLINE);
    assert_int_equal(r.nattempts, 1);
    assert_int_equal(r.att[0].failure, LK_F_HTTP_503);
    assert_int_equal(r.att[0].retry_after, INT64_MAX);
    ht_within_deadline(&r, &pol);
    ht_free(&r);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_validate_ranges),
      cmocka_unit_test_teardown(test_max_durations_succeed, teardown),
      cmocka_unit_test_teardown(test_expired_deadlines, teardown),
      cmocka_unit_test_teardown(test_retries_near_time_line_ends, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
