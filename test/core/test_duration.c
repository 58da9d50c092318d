/* SPDX-License-Identifier: MIT */
/* Durations (linkd and libraryd flags, config files, fault rules): units, fractions, sums, and
 * clear errors for everything else. */
/* cmocka.h needs these three first. */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <linkd/duration.h>

#include <linkd/common.h>
#include <linkd/error.h>

#include <stdio.h>
#include <string.h>

static int64_t ok(const char *s) {
  char err[256] = "";
  int64_t v = -1;
  if (lk_duration_parse(s, &v, err, sizeof err) != 0)
    fail_msg("'%s' refused: %s", s, err);
  return v;
}

/* Parses a bad value and checks the message names the problem. */
static void bad(const char *s, const char *needle) {
  char err[256] = "";
  int64_t v = 12345;
  if (lk_duration_parse(s, &v, err, sizeof err) == 0)
    fail_msg("'%s' accepted as %lld", s, (long long)v);
  assert_int_equal(v, 12345); /* untouched on error */
  if (!strstr(err, needle))
    fail_msg("message for '%s' is '%s', expected it to mention '%s'", s, err, needle);
}

static void units(void **state) {
  (void)state;
  assert_int_equal(ok("250ms"), LK_MS(250));
  assert_int_equal(ok("3s"), LK_SEC(3));
  assert_int_equal(ok("1m"), LK_SEC(60));
  assert_int_equal(ok("1h"), LK_SEC(3600));
  assert_int_equal(ok("1500us"), LK_MS(1) + 500 * LK_NS_PER_US);
  assert_int_equal(ok("17ns"), 17);
  assert_int_equal(ok("0s"), 0);
  assert_int_equal(ok("0ms"), 0);
  assert_int_equal(ok("007s"), LK_SEC(7));
}

static void fractions_and_sums(void **state) {
  (void)state;
  assert_int_equal(ok("1.5s"), LK_MS(1500));
  assert_int_equal(ok(".5s"), LK_MS(500));
  assert_int_equal(ok("0.25m"), LK_SEC(15));
  assert_int_equal(ok("2.125ms"), 2125000);
  assert_int_equal(ok("0.0001ms"), 100);
  /* Below a nanosecond is dropped, not rounded into a wrong value. */
  assert_int_equal(ok("1.0000000009s"), LK_SEC(1));
  assert_int_equal(ok("1.5ns"), 1);
  assert_int_equal(ok("1m30s"), LK_SEC(90));
  assert_int_equal(ok("1h1m1s1ms1us1ns"), LK_SEC(3661) + LK_MS(1) + 1000 + 1);
  assert_int_equal(ok("1s500ms"), LK_MS(1500));
}

static void limits(void **state) {
  (void)state;
  assert_int_equal(ok("9223372036854775807ns"), INT64_MAX);
  bad("9223372036854775808ns", "too long");
  bad("2562048h", "too long");
  bad("99999999999999999999999s", "too long");
  bad("9223372036854775807ns1ns", "too long");
  assert_int_equal(ok("2562047h"), INT64_C(2562047) * 3600 * LK_NS_PER_S);
  /* A fraction can carry a term past the limit that its whole part stays under (found by
   * fuzz_duration: signed overflow before the bound was checked). */
  assert_int_equal(ok("2562047.5h"), INT64_C(25620475) * 360 * LK_NS_PER_S);
  bad("2562047.9h", "too long");
  bad("2562047.9h62h9939s", "too long");
  assert_int_equal(ok("9223372036.854775807s"), INT64_MAX);
  bad("9223372036.854775808s", "too long");
}

static void errors(void **state) {
  (void)state;
  bad("", "empty");
  bad("250", "needs a unit");
  bad("3", "e.g. 250ms");
  bad("3x", "unknown unit 'x'");
  bad("3sec", "unknown unit 'sec'");
  bad("5S", "unknown unit 'S'"); /* units are case-sensitive: "M" could be month or minute */
  bad("-1s", "not a duration");
  bad("+1s", "not a duration");
  bad(" 1s", "not a duration");
  bad("1 s", "unknown unit ' s'");
  bad("s", "not a duration");
  bad("1.s", "digits must follow");
  bad("1..5s", "digits must follow");
  bad("1.5.5s", "needs a unit");
  bad("1s2", "needs a unit");
  bad("ms", "not a duration");
}

static void format(void **state) {
  (void)state;
  char b[32];
  assert_string_equal(lk_duration_format(LK_SEC(3), b, sizeof b), "3s");
  assert_string_equal(lk_duration_format(LK_MS(1500), b, sizeof b), "1.5s");
  assert_string_equal(lk_duration_format(LK_MS(2250), b, sizeof b), "2.25s");
  assert_string_equal(lk_duration_format(LK_MS(800), b, sizeof b), "800ms");
  assert_string_equal(lk_duration_format(12345678, b, sizeof b), "12.345ms");
  assert_string_equal(lk_duration_format(250000, b, sizeof b), "250us");
  assert_string_equal(lk_duration_format(1500, b, sizeof b), "1.5us");
  assert_string_equal(lk_duration_format(17, b, sizeof b), "17ns");
  assert_string_equal(lk_duration_format(0, b, sizeof b), "0ns");
  assert_string_equal(lk_duration_format(-LK_MS(5), b, sizeof b), "-5ms");
  assert_string_equal(lk_duration_format(LK_SEC(120), b, sizeof b), "120s");
  /* Extremes do not overflow. */
  lk_duration_format(INT64_MIN, b, sizeof b);
  assert_string_equal(b, "-9223372036.854s");
  lk_duration_format(INT64_MAX, b, sizeof b);
  assert_string_equal(b, "9223372036.854s");
  /* A tiny buffer is truncated, never overrun. */
  char tiny[4] = "xyz";
  lk_duration_format(LK_MS(800), tiny, sizeof tiny);
  assert_string_equal(tiny, "800");
}

static void format_round_trips(void **state) {
  (void)state;
  /* Every value with at most three significant decimals in its unit parses back exactly. */
  const int64_t v[] = {1,          999,          1000,        1500,        999000,
                       LK_MS(1),   LK_MS(250),   LK_MS(1001), LK_MS(1999), LK_SEC(1),
                       LK_SEC(59), LK_MS(61500), LK_SEC(7200)};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    char b[32];
    lk_duration_format(v[i], b, sizeof b);
    assert_int_equal(ok(b), v[i]);
  }
}

/* Error codes tell malformed from too large; err may be NULL. */
static void codes(void **state) {
  (void)state;
  int64_t v = 7;
  assert_int_equal(lk_duration_parse("250ms", &v, NULL, 0), LK_OK);
  assert_int_equal(v, LK_MS(250));
  assert_int_equal(lk_duration_parse("250", &v, NULL, 0), LK_EPARSE);
  assert_int_equal(lk_duration_parse("2562048h", &v, NULL, 0), LK_ERANGE);
  assert_int_equal(lk_duration_parse(NULL, &v, NULL, 0), LK_EINVAL);
  assert_int_equal(lk_duration_parse("1s", NULL, NULL, 0), LK_EINVAL);
  assert_int_equal(v, LK_MS(250));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(units),  cmocka_unit_test(fractions_and_sums),
      cmocka_unit_test(limits), cmocka_unit_test(errors),
      cmocka_unit_test(format), cmocka_unit_test(format_round_trips), cmocka_unit_test(codes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
