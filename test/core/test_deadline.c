/* SPDX-License-Identifier: MIT */
/* Deadlines, per-attempt timeouts, child deadlines and the wire forms. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <linkd/linkd.h>

#include "fake_clock.h"

#include <string.h>

static void deadline_basics(void **state) {
  (void)state;
  lk_fake_clock fc;
  lk_fake_clock_init(&fc, LK_SEC(100));
  const lk_clock *clk = &fc.base;
  lk_deadline d = lk_deadline_after(clk->now(clk), LK_SEC(3));
  assert_int_equal(lk_deadline_remaining(d, clk->now(clk)), LK_SEC(3));
  lk_fake_clock_advance(&fc, LK_MS(2500));
  assert_int_equal(lk_deadline_remaining(d, clk->now(clk)), LK_MS(500));
  assert_false(lk_deadline_expired(d, clk->now(clk)));
  /* The seed's per-attempt rule: the last attempt gets only what is left. */
  assert_int_equal(lk_attempt_timeout(LK_MS(800), lk_deadline_remaining(d, clk->now(clk))),
                   LK_MS(500));
  lk_fake_clock_advance(&fc, LK_MS(500));
  assert_true(lk_deadline_expired(d, clk->now(clk)));
  assert_int_equal(lk_deadline_remaining(d, clk->now(clk)), 0);
  lk_fake_clock_advance(&fc, LK_MS(7));
  assert_int_equal(lk_deadline_remaining(d, clk->now(clk)), -LK_MS(7));
  /* Budget <= 0: already expired. */
  assert_true(lk_deadline_expired(lk_deadline_after(5, 0), 5));
  assert_true(lk_deadline_expired(lk_deadline_after(5, -9), 5));
}

static void deadline_saturates(void **state) {
  (void)state;
  lk_deadline d = lk_deadline_after(INT64_MAX - 5, LK_SEC(1));
  assert_int_equal(d.at, INT64_MAX);
  assert_int_equal(lk_deadline_remaining(lk_deadline_none(), INT64_MIN), INT64_MAX);
  assert_int_equal(lk_deadline_remaining(lk_deadline_none(), 0), INT64_MAX);
  lk_deadline past = {INT64_MIN + 10};
  assert_true(lk_deadline_remaining(past, INT64_MAX) < 0);
  lk_deadline d2 = {-LK_SEC(1)};
  assert_int_equal(lk_deadline_remaining(d2, INT64_MIN), INT64_MAX - LK_SEC(1) + 1);
  lk_deadline far = {INT64_MAX - 1};
  assert_int_equal(lk_deadline_remaining(far, INT64_MIN), INT64_MAX);
  assert_false(lk_deadline_expired(lk_deadline_none(), INT64_MAX - 1));
}

static void attempt_timeout_matches_seed(void **state) {
  (void)state;
  assert_int_equal(lk_attempt_timeout(800, 300), 300);
  assert_int_equal(lk_attempt_timeout(800, 2000), 800);
  assert_int_equal(lk_attempt_timeout(0, 2000), 0);
  assert_int_equal(lk_attempt_timeout(800, 0), 0);
  assert_int_equal(lk_attempt_timeout(-1, 5), 0);
  assert_int_equal(lk_attempt_timeout(5, -1), 0);
  assert_int_equal(lk_attempt_timeout(INT64_MAX, INT64_MAX), INT64_MAX);
}

static void child_keeps_reserve(void **state) {
  (void)state;
  lk_deadline parent = lk_deadline_after(0, LK_SEC(3));
  lk_deadline child = lk_deadline_child(parent, LK_MS(200));
  assert_int_equal(child.at, LK_MS(2800));
  assert_int_equal(lk_deadline_child(parent, 0).at, parent.at);
  assert_int_equal(lk_deadline_child(parent, -5).at, parent.at);
  assert_int_equal(lk_deadline_child(lk_deadline_none(), LK_SEC(1)).at, LK_DEADLINE_NONE);
  lk_deadline low = {INT64_MIN + 5};
  assert_int_equal(lk_deadline_child(low, LK_SEC(1)).at, INT64_MIN);
  assert_int_equal(lk_deadline_min(parent, child).at, child.at);
}

static void grpc_format(void **state) {
  (void)state;
  char b[LK_GRPC_TIMEOUT_MAX];
  struct {
    int64_t ns;
    const char *want;
  } cases[] = {
      {0, "0n"},
      {1, "1n"},
      {99999999, "99999999n"},
      {100000000, "100000u"},
      {100000001, "100001u"}, /* rounds up: never promise more time than is left */
      {LK_MS(250), "250000u"},
      {LK_SEC(3), "3000000u"},
      {LK_SEC(100), "100000m"},
      {LK_SEC(100000), "100000S"},
      {LK_SEC(100000000), "1666667M"},
      {INT64_MAX, "2562047H"}, /* saturates at what parses back into int64 ns */
      {-5, "0n"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int n = lk_grpc_timeout_format(cases[i].ns, b, sizeof b);
    assert_int_equal(n, (int)strlen(cases[i].want));
    assert_string_equal(b, cases[i].want);
    int64_t back;
    assert_int_equal(lk_grpc_timeout_parse(b, (size_t)n, &back), LK_OK);
    /* The round trip never shrinks, except where the form saturates. */
    assert_true(back >= (cases[i].ns < 0 ? 0 : cases[i].ns) || cases[i].ns == INT64_MAX);
  }
  assert_int_equal(lk_grpc_timeout_format(5, b, 2), LK_ETOOBIG);
  assert_int_equal(lk_grpc_timeout_format(5, NULL, 2), LK_EINVAL);
}

static void grpc_parse_strict(void **state) {
  (void)state;
  int64_t v = 0;
#define OK(s, want)                                                                                \
  do {                                                                                             \
    assert_int_equal(lk_grpc_timeout_parse(s, strlen(s), &v), LK_OK);                            \
    assert_int_equal(v, want);                                                                     \
  } while (0)
#define BAD(s, err) assert_int_equal(lk_grpc_timeout_parse(s, strlen(s), &v), err)
  OK("1H", LK_SEC(3600));
  OK("2M", LK_SEC(120));
  OK("3S", LK_SEC(3));
  OK("250m", LK_MS(250));
  OK("7u", 7000);
  OK("9n", 9);
  OK("00000001m", LK_MS(1));
  OK("2562047H", INT64_C(2562047) * 3600 * LK_NS_PER_S);
  BAD("99999999H", LK_ERANGE); /* well formed, but beyond int64 ns */
  BAD("", LK_EPARSE);
  BAD("m", LK_EPARSE);
  BAD("5", LK_EPARSE);
  BAD("123456789m", LK_EPARSE); /* 9 digits */
  BAD("-5m", LK_EPARSE);
  BAD("+5m", LK_EPARSE);
  BAD(" 5m", LK_EPARSE);
  BAD("5m ", LK_EPARSE);
  BAD("5 m", LK_EPARSE);
  BAD("5x", LK_EPARSE);
  BAD("5mm", LK_EPARSE);
  BAD("0x5m", LK_EPARSE);
  BAD("5.0S", LK_EPARSE);
  /* Embedded NUL and bytes beyond len are never read as part of the value. */
  assert_int_equal(lk_grpc_timeout_parse("5\0m", 3, &v), LK_EPARSE);
  assert_int_equal(lk_grpc_timeout_parse("12mXYZ", 3, &v), LK_OK);
  assert_int_equal(v, LK_MS(12));
  assert_int_equal(lk_grpc_timeout_parse(NULL, 3, &v), LK_EINVAL);
  assert_int_equal(lk_grpc_timeout_parse("5m", 2, NULL), LK_EINVAL);
#undef OK
#undef BAD
}

static void ms_form(void **state) {
  (void)state;
  char b[LK_MS_TIMEOUT_MAX];
  assert_int_equal(lk_ms_timeout_format(LK_MS(1500) + 999, b, sizeof b), 4);
  assert_string_equal(b, "1500");
  assert_int_equal(lk_ms_timeout_format(-1, b, sizeof b), 1);
  assert_string_equal(b, "0");
  assert_int_equal(lk_ms_timeout_format(0, b, sizeof b), 1);
  assert_string_equal(b, "0");
  /* under a millisecond left is not "passed" */
  assert_int_equal(lk_ms_timeout_format(1, b, sizeof b), 1);
  assert_string_equal(b, "1");
  assert_int_equal(lk_ms_timeout_format(LK_MS(1) - 1, b, sizeof b), 1);
  assert_string_equal(b, "1");
  assert_true(lk_ms_timeout_format(INT64_MAX, b, sizeof b) > 0);
  int64_t v;
  assert_int_equal(lk_ms_timeout_parse(b, strlen(b), &v), LK_OK);
  assert_int_equal(v, (INT64_MAX / LK_NS_PER_MS) * LK_NS_PER_MS);
  assert_int_equal(lk_ms_timeout_parse("250", 3, &v), LK_OK);
  assert_int_equal(v, LK_MS(250));
  assert_int_equal(lk_ms_timeout_parse("", 0, &v), LK_EPARSE);
  assert_int_equal(lk_ms_timeout_parse("-1", 2, &v), LK_EPARSE);
  assert_int_equal(lk_ms_timeout_parse("1 ", 2, &v), LK_EPARSE);
  assert_int_equal(lk_ms_timeout_parse("9223372036855", 13, &v), LK_ERANGE);
  assert_int_equal(lk_ms_timeout_parse("1234567890123456789", 19, &v), LK_EPARSE);
  assert_int_equal(lk_ms_timeout_parse("999999999999999999", 18, &v), LK_ERANGE);
  assert_int_equal(lk_ms_timeout_format(5, b, 1), LK_ETOOBIG);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(deadline_basics),      cmocka_unit_test(deadline_saturates),
      cmocka_unit_test(attempt_timeout_matches_seed), cmocka_unit_test(child_keeps_reserve),
      cmocka_unit_test(grpc_format),          cmocka_unit_test(grpc_parse_strict),
      cmocka_unit_test(ms_form),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
