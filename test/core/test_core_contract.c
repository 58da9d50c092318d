/* SPDX-License-Identifier: MIT */
/* The core's public API at its edges, as a caller integrating it (and one trying to break it)
 * would test it, header by header: NULL arguments, zero / negative / INT64_MIN / INT64_MAX
 * durations and instants, a clock that steps back (no negative delay, no huge wait, no state
 * stuck for as long as the clock went back), configurations at their limits (0 and maximal
 * capacities, 0 % and 100 % ratios, NaN and infinities wherever a double is taken), counters
 * near overflow, histogram values at the extremes and on bucket boundaries, metric names and
 * label values that must be refused or escaped, re-registration with another type. Each result
 * is checked against what the header promises. Time comes from fake clocks; run under
 * ASan+UBSan for the "never a crash, never UB" half of every promise. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <linkd/adaptive.h>
#include <linkd/advisor.h>
#include <linkd/backoff.h>
#include <linkd/breaker.h>
#include <linkd/budget.h>
#include <linkd/bulkhead.h>
#include <linkd/callmetrics.h>
#include <linkd/clock.h>
#include <linkd/deadline.h>
#include <linkd/duration.h>
#include <linkd/error.h>
#include <linkd/failure.h>
#include <linkd/hedge.h>
#include <linkd/hist.h>
#include <linkd/limiter.h>
#include <linkd/metrics.h>
#include <linkd/rand.h>
#include <linkd/retry.h>
#include <linkd/seed_example.h>

#include "fake_clock.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S(x) LK_SEC(x)
#define MS(x) LK_MS(x)

/* A generator that answers every draw with the top (or the bottom) of its range, to push each
 * jitter mode to its extremes; counts the draws. */
typedef struct edge_rand {
  lk_rand base;
  bool top;
  int draws;
} edge_rand;

static uint64_t edge_below(lk_rand *self, uint64_t bound) {
  edge_rand *r = (edge_rand *)self;
  r->draws++;
  return bound == 0 ? 0 : r->top ? bound - 1 : 0;
}
static uint64_t edge_next(lk_rand *self) {
  edge_rand *r = (edge_rand *)self;
  r->draws++;
  return r->top ? UINT64_MAX : 0;
}
static void edge_rand_init(edge_rand *r, bool top) {
  r->base.below = edge_below;
  r->base.next64 = edge_next;
  r->top = top;
  r->draws = 0;
}

/* Whether `hay` contains `needle`. */
static bool has(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

/* --- error.h -------------------------------------------------------------------------------- */

static void test_error_strings(void **state) {
  (void)state;
  /* every code has a name and a message; anything else is "unknown", never NULL */
  for (int e = 0; e >= LK_ECONFLICT; e--) {
    assert_string_not_equal(lk_err_name(e), "UNKNOWN");
    assert_string_not_equal(lk_strerror(e), "unknown error");
  }
  static const int odd[] = {1, LK_ECONFLICT - 1, INT_MIN, INT_MAX, -1000};
  for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
    assert_string_equal(lk_err_name(odd[i]), "UNKNOWN");
    assert_string_equal(lk_strerror(odd[i]), "unknown error");
  }
  assert_string_equal(lk_err_name(LK_EDEADLINE), "EDEADLINE");
}

/* --- deadline.h ----------------------------------------------------------------------------- */

static void test_deadline_extremes(void **state) {
  (void)state;
  /* budget <= 0: already passed, at == now (never earlier, never a wrap) */
  assert_int_equal(lk_deadline_after(5, 0).at, 5);
  assert_int_equal(lk_deadline_after(5, -1).at, 5);
  assert_int_equal(lk_deadline_after(5, INT64_MIN).at, 5);
  assert_int_equal(lk_deadline_after(INT64_MIN, INT64_MAX).at, -1);
  assert_int_equal(lk_deadline_after(INT64_MAX - 1, 10).at, LK_DEADLINE_NONE); /* saturates */
  assert_true(lk_deadline_expired(lk_deadline_after(7, 0), 7));

  /* no deadline: INT64_MAX left and never expired, whatever `now` is, even INT64_MAX */
  lk_deadline none = lk_deadline_none();
  static const int64_t nows[] = {INT64_MIN, -1, 0, 1, INT64_MAX - 1, INT64_MAX};
  for (size_t i = 0; i < sizeof nows / sizeof nows[0]; i++) {
    assert_int_equal(lk_deadline_remaining(none, nows[i]), INT64_MAX);
    assert_false(lk_deadline_expired(none, nows[i]));
  }
  /* remaining saturates; an expired deadline stays expired */
  lk_deadline early = {INT64_MIN};
  assert_int_equal(lk_deadline_remaining(early, INT64_MAX), INT64_MIN);
  assert_true(lk_deadline_expired(early, INT64_MIN));
  lk_deadline zero = {0};
  assert_true(lk_deadline_remaining(zero, INT64_MIN) > 0);
  assert_int_equal(lk_deadline_remaining(zero, 1), -1);
  assert_false(lk_deadline_expired(zero, -1));
  assert_true(lk_deadline_expired(zero, 0));
  /* for a finite deadline, expired <=> remaining <= 0 */
  for (size_t i = 0; i < sizeof nows / sizeof nows[0]; i++)
    for (size_t j = 0; j < sizeof nows / sizeof nows[0]; j++) {
      lk_deadline d = {nows[j]};
      if (d.at == LK_DEADLINE_NONE)
        continue;
      assert_int_equal(lk_deadline_expired(d, nows[i]), lk_deadline_remaining(d, nows[i]) <= 0);
    }

  /* min */
  lk_deadline five = {5};
  assert_int_equal(lk_deadline_min(none, five).at, 5);
  assert_int_equal(lk_deadline_min(five, none).at, 5);
  assert_int_equal(lk_deadline_min(early, none).at, INT64_MIN);

  /* child: never later than the parent, saturating, reserve <= 0 keeps it, none stays none */
  lk_deadline hundred = {100};
  assert_int_equal(lk_deadline_child(none, S(1)).at, LK_DEADLINE_NONE);
  assert_int_equal(lk_deadline_child(hundred, 0).at, 100);
  assert_int_equal(lk_deadline_child(hundred, -5).at, 100);
  assert_int_equal(lk_deadline_child(hundred, INT64_MIN).at, 100);
  assert_int_equal(lk_deadline_child(hundred, 30).at, 70);
  assert_int_equal(lk_deadline_child(hundred, INT64_MAX).at, 100 - INT64_MAX);
  lk_deadline near_min = {INT64_MIN + 5};
  assert_int_equal(lk_deadline_child(near_min, 10).at, INT64_MIN);
  assert_int_equal(lk_deadline_child(early, INT64_MAX).at, INT64_MIN);

  /* attempt timeout: min(cap, remaining), 0 when either is <= 0 */
  assert_int_equal(lk_attempt_timeout(0, 5), 0);
  assert_int_equal(lk_attempt_timeout(5, 0), 0);
  assert_int_equal(lk_attempt_timeout(-1, 5), 0);
  assert_int_equal(lk_attempt_timeout(5, INT64_MIN), 0);
  assert_int_equal(lk_attempt_timeout(INT64_MIN, INT64_MAX), 0);
  assert_int_equal(lk_attempt_timeout(INT64_MAX, INT64_MAX), INT64_MAX);
  assert_int_equal(lk_attempt_timeout(3, 5), 3);
  assert_int_equal(lk_attempt_timeout(5, 3), 3);
}

static void test_deadline_wire_forms(void **state) {
  (void)state;
  char buf[32];
  /* grpc-timeout: negatives clamp to 0, NULL is refused, a short buffer is LK_ETOOBIG */
  assert_int_equal(lk_grpc_timeout_format(-1, buf, sizeof buf), 2);
  assert_string_equal(buf, "0n");
  assert_int_equal(lk_grpc_timeout_format(INT64_MIN, buf, sizeof buf), 2);
  assert_string_equal(buf, "0n");
  assert_int_equal(lk_grpc_timeout_format(1, NULL, 10), LK_EINVAL);
  assert_int_equal(lk_grpc_timeout_format(1, buf, 0), LK_ETOOBIG);
  assert_int_equal(lk_grpc_timeout_format(1, buf, 2), LK_ETOOBIG);
  assert_int_equal(lk_grpc_timeout_format(1, buf, 3), 2);
  assert_int_equal(lk_grpc_timeout_format(INT64_MAX, buf, LK_GRPC_TIMEOUT_MAX), 8);
  assert_string_equal(buf, "2562047H"); /* the largest that parses back into int64 ns */
  int64_t ns = 0;
  assert_int_equal(lk_grpc_timeout_parse(buf, strlen(buf), &ns), LK_OK);
  assert_true(ns > 0 && ns <= INT64_MAX);

  /* round trip at every unit boundary: never less than the value (a positive remainder never
   * arrives as 0), and what is gained is less than one unit of the unit chosen, under 1/99999
   * of the value (8 digits of the finer unit did not hold it) */
  static const int64_t units[] = {1, 1000, 1000000, 1000000000, 60000000000};
  for (size_t u = 0; u < 5; u++) /* 99999999 H does not fit in int64 ns */
    for (int64_t k = -2; k <= 2; k++) {
      int64_t x = INT64_C(99999999) * units[u] + k;
      if (x < 0)
        continue;
      int n = lk_grpc_timeout_format(x, buf, sizeof buf);
      assert_true(n > 0 && n < LK_GRPC_TIMEOUT_MAX);
      assert_int_equal(lk_grpc_timeout_parse(buf, (size_t)n, &ns), LK_OK);
      assert_true(ns >= x);
      assert_true((ns - x) <= x / 99999);
    }
  for (int64_t x = 0; x < 3000; x += 7) {
    int n = lk_grpc_timeout_format(x, buf, sizeof buf);
    assert_int_equal(lk_grpc_timeout_parse(buf, (size_t)n, &ns), LK_OK);
    assert_int_equal(ns, x); /* small values are exact in ns */
  }

  /* strict parsing; *ns untouched on error; never reads past len */
  static const char *const bad[] = {"",    "1",   "n",   "000000000n", "-1S",  "+1S",
                                    "1 S", " 1S", "1S ", "1x",         "1.5S", "0x1S"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ns = 42;
    assert_int_equal(lk_grpc_timeout_parse(bad[i], strlen(bad[i]), &ns), LK_EPARSE);
    assert_int_equal(ns, 42);
  }
  assert_int_equal(lk_grpc_timeout_parse("1S\0", 3, &ns), LK_EPARSE);
  assert_int_equal(lk_grpc_timeout_parse("99999999H", 9, &ns), LK_ERANGE);
  assert_int_equal(lk_grpc_timeout_parse("2562048H", 8, &ns), LK_ERANGE);
  assert_int_equal(lk_grpc_timeout_parse("2562047H", 8, &ns), LK_OK);
  assert_int_equal(lk_grpc_timeout_parse("00000000n", 9, &ns), LK_OK);
  assert_int_equal(ns, 0);
  assert_int_equal(lk_grpc_timeout_parse(NULL, 2, &ns), LK_EINVAL);
  assert_int_equal(lk_grpc_timeout_parse("1S", 2, NULL), LK_EINVAL);
  const char unterminated[2] = {'5', 'm'};
  assert_int_equal(lk_grpc_timeout_parse(unterminated, 2, &ns), LK_OK);
  assert_int_equal(ns, MS(5));

  /* plain milliseconds */
  assert_int_equal(lk_ms_timeout_format(-1, buf, sizeof buf), 1);
  assert_string_equal(buf, "0");
  assert_int_equal(lk_ms_timeout_format(0, buf, sizeof buf), 1);
  assert_string_equal(buf, "0");
  assert_int_equal(lk_ms_timeout_format(1, buf, sizeof buf), 1);
  assert_string_equal(buf, "1"); /* under 1 ms left is not "passed" */
  assert_int_equal(lk_ms_timeout_format(MS(2) - 1, buf, sizeof buf), 1);
  assert_string_equal(buf, "1");
  assert_int_equal(lk_ms_timeout_format(INT64_MAX, buf, LK_MS_TIMEOUT_MAX), 13);
  assert_string_equal(buf, "9223372036854");
  assert_int_equal(lk_ms_timeout_format(5, NULL, 4), LK_EINVAL);
  assert_int_equal(lk_ms_timeout_format(MS(5), buf, 1), LK_ETOOBIG);
  assert_int_equal(lk_ms_timeout_format(MS(5), buf, 0), LK_ETOOBIG);
  assert_int_equal(lk_ms_timeout_parse("9223372036854", 13, &ns), LK_OK);
  assert_int_equal(ns, INT64_C(9223372036854) * LK_NS_PER_MS);
  assert_int_equal(lk_ms_timeout_parse("9223372036855", 13, &ns), LK_ERANGE);
  assert_int_equal(lk_ms_timeout_parse("999999999999999999", 18, &ns), LK_ERANGE);
  assert_int_equal(lk_ms_timeout_parse("1000000000000000000", 19, &ns), LK_EPARSE);
  static const char *const bad_ms[] = {"", "-1", "+1", "1.5", " 1", "1 ", "1ms", "0x10"};
  for (size_t i = 0; i < sizeof bad_ms / sizeof bad_ms[0]; i++) {
    ns = 42;
    assert_int_equal(lk_ms_timeout_parse(bad_ms[i], strlen(bad_ms[i]), &ns), LK_EPARSE);
    assert_int_equal(ns, 42);
  }
  assert_int_equal(lk_ms_timeout_parse(NULL, 1, &ns), LK_EINVAL);
  assert_int_equal(lk_ms_timeout_parse("1", 1, NULL), LK_EINVAL);
}

/* --- duration.h ----------------------------------------------------------------------------- */

static void test_duration_edges(void **state) {
  (void)state;
  char err[128];
  int64_t ns = 42;
  assert_int_equal(lk_duration_parse(NULL, &ns, err, sizeof err), LK_EINVAL);
  assert_true(err[0] != '\0');
  assert_int_equal(lk_duration_parse("1s", NULL, err, sizeof err), LK_EINVAL);
  assert_int_equal(lk_duration_parse(NULL, NULL, NULL, 0), LK_EINVAL);
  assert_int_equal(ns, 42);

  static const char *const bad[] = {"",    "250",   "-1s",    "+1s",  "1 s",   "1s ", " 1s",
                                    "1.s", "1..5s", "5.5.5s", "1ms1", "1h-1s", "1x",  "s",
                                    "1S",  "1sec",  ".s",     "1e3s", "0x1s"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ns = 42;
    err[0] = '\0';
    assert_int_equal(lk_duration_parse(bad[i], &ns, err, sizeof err), LK_EPARSE);
    assert_int_equal(ns, 42); /* nothing written on error */
    size_t n = strlen(err);
    assert_true(n > 0);
    assert_true(err[n - 1] != '.'); /* no trailing period */
  }
  /* a message that does not fit is cut, still NUL-terminated; err NULL is fine */
  err[0] = 'x';
  assert_int_equal(lk_duration_parse("bogus", &ns, err, 1), LK_EPARSE);
  assert_int_equal(err[0], '\0');
  assert_int_equal(lk_duration_parse("bogus", &ns, NULL, 100), LK_EPARSE);

  /* the int64 boundary exactly */
  assert_int_equal(lk_duration_parse("9223372036854775807ns", &ns, err, sizeof err), LK_OK);
  assert_int_equal(ns, INT64_MAX);
  assert_int_equal(lk_duration_parse("2562047h47m16.854775807s", &ns, err, sizeof err), LK_OK);
  assert_int_equal(ns, INT64_MAX);
  assert_int_equal(lk_duration_parse("9223372036854775808ns", &ns, err, sizeof err), LK_ERANGE);
  assert_int_equal(lk_duration_parse("2562047h47m16.854775808s", &ns, err, sizeof err), LK_ERANGE);
  assert_int_equal(lk_duration_parse("2562048h", &ns, err, sizeof err), LK_ERANGE);
  assert_int_equal(lk_duration_parse("99999999999999999999999h", &ns, err, sizeof err), LK_ERANGE);
  assert_int_equal(lk_duration_parse("9223372036854775807ns1ns", &ns, err, sizeof err), LK_ERANGE);

  /* fractions: exact to the nanosecond, finer parts dropped (truncated), in every unit, also
   * where a fraction digit of the unit is not a whole number of ns (m, h) */
  static const struct {
    const char *s;
    int64_t ns;
  } ok[] = {
      {"0ns", 0},
      {"0.5ns", 0},
      {".5s", MS(500)},
      {"1.5s", MS(1500)},
      {"1.9999999999s", INT64_C(1999999999)},
      {"1.5m", S(90)},
      {"0.1h", S(360)},
      {"0.00000000009m", 5},   /* 9e-11 min = 5.4 ns */
      {"0.000000000009h", 32}, /* 9e-12 h = 32.4 ns */
      {"0.0000000000009h", 3}, /* 9e-13 h = 3.24 ns */
      {"0.333333333333333333h", INT64_C(1199999999999)},
      {"1.0000000001s", S(1)},
      {"1s1s", S(2)},
      {"1h30m", S(5400)},
      {"0000001s", S(1)},
  };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    ns = -1;
    if (lk_duration_parse(ok[i].s, &ns, err, sizeof err) != LK_OK)
      fail_msg("%s: %s", ok[i].s, err);
    if (ns != ok[i].ns)
      fail_msg("%s: %lld, want %lld", ok[i].s, (long long)ns, (long long)ok[i].ns);
  }

  /* format: every int64, negatives as "-" + magnitude, at most cap bytes */
  static const struct {
    int64_t ns;
    const char *s;
  } fmt[] = {{0, "0ns"},
             {-1, "-1ns"},
             {999, "999ns"},
             {1000, "1us"},
             {1001, "1.001us"},
             {1500, "1.5us"},
             {1000999, "1ms"}, /* truncated */
             {S(3), "3s"},
             {INT64_MAX, "9223372036.854s"},
             {INT64_MIN, "-9223372036.854s"},
             {INT64_MIN + 1, "-9223372036.854s"}};
  for (size_t i = 0; i < sizeof fmt / sizeof fmt[0]; i++) {
    char b[32];
    assert_ptr_equal(lk_duration_format(fmt[i].ns, b, sizeof b), b);
    assert_string_equal(b, fmt[i].s);
  }
  char b[8] = "xxxxxxx";
  assert_ptr_equal(lk_duration_format(S(1), b, 0), b);
  assert_string_equal(b, "xxxxxxx"); /* cap 0: nothing written */
  assert_null(lk_duration_format(S(1), NULL, 16));
  lk_duration_format(S(1), b, 1);
  assert_string_equal(b, "");
  lk_duration_format(-5, b, 2);
  assert_string_equal(b, "-");
  lk_duration_format(INT64_MIN, b, sizeof b);
  assert_int_equal(strlen(b), sizeof b - 1);
  /* what format prints parses back (for whole units) */
  for (int64_t v = 1; v < INT64_MAX / 10; v *= 10) {
    char t[32];
    lk_duration_format(v, t, sizeof t);
    assert_int_equal(lk_duration_parse(t, &ns, err, sizeof err), LK_OK);
    assert_true(ns <= v && ns >= v - v / 1000);
  }
}

/* --- backoff.h ------------------------------------------------------------------------------ */

static void test_backoff_config_edges(void **state) {
  (void)state;
  const char *why = "unset";
  assert_int_equal(lk_backoff_config_validate(NULL, &why), LK_ECONFIG);
  assert_non_null(why);
  assert_int_equal(lk_backoff_config_validate(NULL, NULL), LK_ECONFIG);

  lk_backoff_config c;
  lk_backoff_config_init_default(&c);
  assert_int_equal(lk_backoff_config_validate(&c, &why), LK_OK);
  assert_null(why);

  typedef struct {
    int field;
    double d;
    int64_t i;
  } spoil;
  enum { KIND, JITTER, RES, BASE, MAX, MULT, RATIO };
  static const spoil bad[] = {
      {KIND, 0, -1},         {KIND, 0, 3},         {JITTER, 0, -1},      {JITTER, 0, 5},
      {RES, 0, 0},           {RES, 0, -1},         {RES, 0, INT64_MIN},  {BASE, 0, 0},
      {BASE, 0, -1},         {BASE, 0, INT64_MIN}, {BASE, 0, MS(1) - 1}, {MAX, 0, MS(200) - 1},
      {MAX, 0, INT64_MIN},   {MULT, NAN, 0},       {MULT, INFINITY, 0},  {MULT, -INFINITY, 0},
      {MULT, 0.999999, 0},   {MULT, 0, 0},         {MULT, -2, 0},        {RATIO, NAN, 0},
      {RATIO, -0.000001, 0}, {RATIO, 1.000001, 0}, {RATIO, INFINITY, 0}, {RATIO, -INFINITY, 0},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    lk_backoff_config_init_default(&c);
    switch (bad[i].field) {
    case KIND: c.kind = (lk_backoff_kind)bad[i].i; break;
    case JITTER: c.jitter = (lk_jitter_kind)bad[i].i; break;
    case RES: c.resolution = bad[i].i; break;
    case BASE: c.base = bad[i].i; break;
    case MAX: c.max = bad[i].i; break;
    case MULT: c.multiplier = bad[i].d; break;
    default: c.ratio = bad[i].d; break;
    }
    why = NULL;
    if (lk_backoff_config_validate(&c, &why) != LK_ECONFIG)
      fail_msg("bad backoff #%zu accepted", i);
    assert_non_null(why);
  }
  /* the edges are valid */
  lk_backoff_config_init_default(&c);
  c.ratio = 0;
  assert_int_equal(lk_backoff_config_validate(&c, NULL), LK_OK);
  c.ratio = 1;
  c.multiplier = 1;
  assert_int_equal(lk_backoff_config_validate(&c, NULL), LK_OK);
  c.base = c.max = c.resolution = 1;
  assert_int_equal(lk_backoff_config_validate(&c, NULL), LK_OK);
  c.max = INT64_MAX;
  c.multiplier = DBL_MAX;
  assert_int_equal(lk_backoff_config_validate(&c, NULL), LK_OK);

  /* names and parsers */
  assert_string_equal(lk_backoff_kind_name((lk_backoff_kind)-1), "unknown");
  assert_string_equal(lk_backoff_kind_name((lk_backoff_kind)3), "unknown");
  assert_string_equal(lk_jitter_kind_name((lk_jitter_kind)-1), "unknown");
  assert_string_equal(lk_jitter_kind_name((lk_jitter_kind)5), "unknown");
  lk_backoff_kind k = LK_BACKOFF_FIXED;
  lk_jitter_kind j = LK_JITTER_NONE;
  assert_int_equal(lk_backoff_kind_parse("EXPONENTIAL", &k), LK_OK);
  assert_int_equal(k, LK_BACKOFF_EXPONENTIAL);
  assert_int_equal(lk_jitter_kind_parse("Decorrelated", &j), LK_OK);
  assert_int_equal(j, LK_JITTER_DECORRELATED);
  static const char *const junk[] = {"", "exp", "linear ", "fullx", "unknown"};
  for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
    assert_int_equal(lk_backoff_kind_parse(junk[i], &k), LK_EINVAL);
    assert_int_equal(lk_jitter_kind_parse(junk[i], &j), LK_EINVAL);
  }
  assert_int_equal(k, LK_BACKOFF_EXPONENTIAL); /* untouched */
  assert_int_equal(lk_backoff_kind_parse(NULL, &k), LK_EINVAL);
  assert_int_equal(lk_backoff_kind_parse("fixed", NULL), LK_EINVAL);
  assert_int_equal(lk_jitter_kind_parse(NULL, &j), LK_EINVAL);
  assert_int_equal(lk_jitter_kind_parse("none", NULL), LK_EINVAL);
}

static void test_backoff_delay_extremes(void **state) {
  (void)state;
  static const int ns_[] = {INT_MIN, -1, 0, 1, 2, 3, 62, 63, 64, 65, 1000, INT_MAX - 1, INT_MAX};
  static const int64_t prevs[] = {INT64_MIN, -1, 0, 1, MS(1), S(1), INT64_MAX};
  static const double mults[] = {1.0, 1.5, 2.0, 3.0, 1e300, DBL_MAX};
  static const int64_t maxes[] = {MS(1), S(2), S(3600), INT64_MAX};
  static const int64_t ress[] = {1, MS(1), S(1)};
  lk_rand_fast fast;
  lk_rand_fast_seeded(&fast, 7);
  edge_rand top, bottom;
  edge_rand_init(&top, true);
  edge_rand_init(&bottom, false);
  lk_rand *rngs[] = {&fast.base, &top.base, &bottom.base};
  for (int kind = 0; kind <= LK_BACKOFF_EXPONENTIAL; kind++)
    for (int jit = 0; jit <= LK_JITTER_DECORRELATED; jit++)
      for (size_t mi = 0; mi < sizeof mults / sizeof mults[0]; mi++)
        for (size_t xi = 0; xi < sizeof maxes / sizeof maxes[0]; xi++)
          for (size_t ri = 0; ri < sizeof ress / sizeof ress[0]; ri++) {
            lk_backoff_config c;
            lk_backoff_config_init_default(&c);
            c.kind = (lk_backoff_kind)kind;
            c.jitter = (lk_jitter_kind)jit;
            c.multiplier = mults[mi];
            c.resolution = ress[ri];
            c.base = ress[ri];
            c.max = maxes[xi] < c.base ? c.base : maxes[xi];
            c.ratio = 1.0;
            assert_int_equal(lk_backoff_config_validate(&c, NULL), LK_OK);
            int64_t prev_base = 0;
            for (size_t ni = 0; ni < sizeof ns_ / sizeof ns_[0]; ni++) {
              int64_t bd = lk_backoff_base_delay(&c, ns_[ni]);
              assert_true(bd >= c.base && bd <= c.max);
              assert_true(bd >= prev_base); /* never shrinks as n grows */
              prev_base = bd;
              for (size_t pi = 0; pi < sizeof prevs / sizeof prevs[0]; pi++)
                for (size_t gi = 0; gi < 3; gi++) {
                  edge_rand *er = gi ? (edge_rand *)rngs[gi] : NULL;
                  int before = er ? er->draws : 0;
                  int64_t d = lk_backoff_delay(&c, ns_[ni], prevs[pi], rngs[gi]);
                  if (d < 0 || d > c.max)
                    fail_msg("kind %d jitter %d mult %g max %lld n %d prev %lld: %lld", kind, jit,
                             mults[mi], (long long)c.max, ns_[ni], (long long)prevs[pi],
                             (long long)d);
                  if (er) /* exactly one draw per delay, none for NONE */
                    assert_int_equal(er->draws - before, jit == LK_JITTER_NONE ? 0 : 1);
                }
            }
          }
  /* NONE never draws: rng may be NULL */
  lk_backoff_config c;
  lk_backoff_config_init_default(&c);
  c.jitter = LK_JITTER_NONE;
  assert_int_equal(lk_backoff_delay(&c, INT_MAX, INT64_MAX, NULL), c.max);
  assert_int_equal(lk_backoff_delay(&c, INT_MIN, INT64_MIN, NULL), c.base);
}

/* --- retry.h, failure.h ---------------------------------------------------------------------- */

static void test_retry_policy_edges(void **state) {
  (void)state;
  lk_retry_config c;
  lk_retry_config_init_default(&c);
  lk_retry_policy p;
  const char *why = NULL;
  assert_int_equal(lk_retry_policy_init(NULL, &c, &why), LK_ECONFIG);
  assert_non_null(why);
  assert_int_equal(lk_retry_policy_init(&p, NULL, &why), LK_ECONFIG);
  assert_int_equal(lk_retry_policy_init(&p, NULL, NULL), LK_ECONFIG);
  c.max_attempts = 0;
  assert_int_equal(lk_retry_policy_init(&p, &c, &why), LK_ECONFIG);
  c.max_attempts = INT_MIN;
  assert_int_equal(lk_retry_policy_init(&p, &c, &why), LK_ECONFIG);
  lk_retry_config_init_default(&c);
  c.retry_after_cap = -1;
  assert_int_equal(lk_retry_policy_init(&p, &c, &why), LK_ECONFIG);
  lk_retry_config_init_default(&c);
  c.min_attempt = INT64_MIN;
  assert_int_equal(lk_retry_policy_init(&p, &c, &why), LK_ECONFIG);
  lk_retry_config_init_default(&c);
  c.backoff.ratio = NAN;
  why = NULL;
  assert_int_equal(lk_retry_policy_init(&p, &c, &why), LK_ECONFIG);
  assert_non_null(why);

  /* the edges: INT_MAX attempts, caps of 0 and INT64_MAX */
  lk_retry_config_init_default(&c);
  c.max_attempts = INT_MAX;
  c.retry_after_cap = 0;
  c.min_attempt = INT64_MAX;
  assert_int_equal(lk_retry_policy_init(&p, &c, &why), LK_OK);
  assert_null(why);
}

static void test_retry_decide_edges(void **state) {
  (void)state;
  lk_retry_config c;
  lk_retry_config_init_default(&c);
  c.backoff.kind = LK_BACKOFF_FIXED;
  c.backoff.jitter = LK_JITTER_NONE;
  c.backoff.base = c.backoff.max = MS(100);
  lk_retry_policy p;
  assert_int_equal(lk_retry_policy_init(&p, &c, NULL), LK_OK);
  lk_rand_fast rng;
  lk_rand_fast_seeded(&rng, 1);
  lk_attempt a = {1, "GET", false, true, LK_F_CONNECT_REFUSED, -1, 0};
  lk_decision d, pattern;
  memset(&pattern, 0x5a, sizeof pattern);

  /* refused input: LK_EINVAL, *out untouched */
  const lk_attempt good = a;
  lk_attempt bads[10];
  int nb = 0;
  bads[nb] = good, bads[nb++].number = 0;
  bads[nb] = good, bads[nb++].number = INT_MIN;
  bads[nb] = good, bads[nb++].method = NULL;
  bads[nb] = good, bads[nb++].method = "";
  bads[nb] = good, bads[nb++].method = " \t\r\n";
  bads[nb] = good, bads[nb++].failure = (lk_failure)-1;
  bads[nb] = good, bads[nb++].failure = LK_F__COUNT;
  bads[nb] = good, bads[nb++].failure = (lk_failure)INT_MAX;
  for (int i = 0; i < nb; i++) {
    d = pattern;
    assert_int_equal(lk_retry_decide(&p, &bads[i], S(10), &rng.base, &d), LK_EINVAL);
    assert_memory_equal(&d, &pattern, sizeof d);
  }
  d = pattern;
  assert_int_equal(lk_retry_decide(NULL, &a, S(1), &rng.base, &d), LK_EINVAL);
  assert_int_equal(lk_retry_decide(&p, NULL, S(1), &rng.base, &d), LK_EINVAL);
  assert_memory_equal(&d, &pattern, sizeof d);
  assert_int_equal(lk_retry_decide(&p, &a, S(1), &rng.base, NULL), LK_EINVAL);
  /* rng NULL: fine without jitter, refused with it */
  assert_int_equal(lk_retry_decide(&p, &a, S(1), NULL, &d), LK_OK);
  lk_retry_config cj;
  lk_retry_config_init_default(&cj);
  lk_retry_policy pj;
  assert_int_equal(lk_retry_policy_init(&pj, &cj, NULL), LK_OK);
  assert_int_equal(lk_retry_decide(&pj, &a, S(1), NULL, &d), LK_EINVAL);

  /* remaining at and around the delay, and at the extremes: a stop never carries a delay */
  static const int64_t rems[] = {INT64_MIN, -1, 0, MS(100) - 1, MS(100)};
  for (size_t i = 0; i < sizeof rems / sizeof rems[0]; i++) {
    assert_int_equal(lk_retry_decide(&p, &a, rems[i], NULL, &d), LK_OK);
    assert_false(d.retry);
    assert_int_equal(d.delay, 0);
    assert_int_equal(d.reason, LK_REASON_DELAY_TOO_LONG);
    assert_int_equal(d.remaining, rems[i]);
    char msg[96];
    assert_true(lk_decision_format(&d, msg, sizeof msg) > 0);
    assert_true(has(msg, ">= remaining"));
  }
  assert_int_equal(lk_retry_decide(&p, &a, MS(100) + 1, NULL, &d), LK_OK);
  assert_true(d.retry);
  assert_int_equal(d.delay, MS(100));
  assert_int_equal(lk_retry_decide(&p, &a, INT64_MAX, NULL, &d), LK_OK);
  assert_true(d.retry);

  /* a hostile Retry-After is cut to the cap; a cap of 0 adds nothing */
  a.failure = LK_F_TOO_MANY_REQUESTS;
  a.retry_after = INT64_MAX;
  assert_int_equal(lk_retry_decide(&p, &a, INT64_MAX, NULL, &d), LK_OK);
  assert_true(d.retry);
  assert_int_equal(d.delay, S(60));
  assert_true(d.from_retry_after);
  c.retry_after_cap = 0;
  lk_retry_policy p0;
  assert_int_equal(lk_retry_policy_init(&p0, &c, NULL), LK_OK);
  assert_int_equal(lk_retry_decide(&p0, &a, INT64_MAX, NULL, &d), LK_OK);
  assert_int_equal(d.delay, MS(100));
  assert_false(d.from_retry_after);
  a.retry_after = INT64_MIN; /* < 0: none */
  assert_int_equal(lk_retry_decide(&p, &a, INT64_MAX, NULL, &d), LK_OK);
  assert_int_equal(d.delay, MS(100));

  /* min_attempt: delay + min_attempt must fit, exactly at the boundary; INT64_MAX never fits */
  c.retry_after_cap = S(60);
  c.min_attempt = MS(50);
  lk_retry_policy pm;
  assert_int_equal(lk_retry_policy_init(&pm, &c, NULL), LK_OK);
  a.failure = LK_F_CONNECT_REFUSED;
  a.retry_after = -1;
  assert_int_equal(lk_retry_decide(&pm, &a, MS(150), NULL, &d), LK_OK);
  assert_true(d.retry);
  assert_int_equal(lk_retry_decide(&pm, &a, MS(150) - 1, NULL, &d), LK_OK);
  assert_false(d.retry);
  assert_int_equal(d.reason, LK_REASON_NO_TIME_FOR_ATTEMPT);
  c.min_attempt = INT64_MAX;
  assert_int_equal(lk_retry_policy_init(&pm, &c, NULL), LK_OK);
  assert_int_equal(lk_retry_decide(&pm, &a, INT64_MAX, NULL, &d), LK_OK);
  assert_false(d.retry);
  assert_int_equal(d.reason, LK_REASON_NO_TIME_FOR_ATTEMPT);
  assert_int_equal(lk_retry_decide(&pm, &a, INT64_MIN, NULL, &d), LK_OK);
  assert_false(d.retry);

  /* attempt numbers at INT_MAX */
  c.min_attempt = 0;
  c.max_attempts = INT_MAX;
  lk_retry_policy pa;
  assert_int_equal(lk_retry_policy_init(&pa, &c, NULL), LK_OK);
  a.number = INT_MAX - 1;
  assert_int_equal(lk_retry_decide(&pa, &a, INT64_MAX, NULL, &d), LK_OK);
  assert_true(d.retry);
  a.number = INT_MAX;
  assert_int_equal(lk_retry_decide(&pa, &a, INT64_MAX, NULL, &d), LK_OK);
  assert_false(d.retry);
  assert_int_equal(d.reason, LK_REASON_ATTEMPTS);

  /* kinds that are never retried, whatever retry_on says */
  c.max_attempts = 4;
  c.retry_on = ~UINT64_C(0);
  lk_retry_policy pall;
  assert_int_equal(lk_retry_policy_init(&pall, &c, NULL), LK_OK);
  a.number = 1;
  for (int k = 0; k < LK_F__COUNT; k++) {
    a.failure = (lk_failure)k;
    lk_failure_class cls = lk_failure_class_of(a.failure);
    assert_int_equal(lk_retry_decide(&pall, &a, INT64_MAX, NULL, &d), LK_OK);
    if (cls == LK_FC_TERMINAL || cls == LK_FC_NONE)
      assert_false(d.retry);
  }

  /* lk_retry_is_retryable: NULL and out-of-range answer false */
  a.failure = LK_F_CONNECT_REFUSED;
  assert_true(lk_retry_is_retryable(&p, &a));
  assert_false(lk_retry_is_retryable(NULL, &a));
  assert_false(lk_retry_is_retryable(&p, NULL));
  a.failure = LK_F__COUNT;
  assert_false(lk_retry_is_retryable(&p, &a));
  a.failure = LK_F_HTTP_500; /* maybe processed, method NULL: not idempotent */
  a.method = NULL;
  assert_false(lk_retry_is_retryable(&p, &a));
}

static void test_decision_format_edges(void **state) {
  (void)state;
  lk_decision d;
  memset(&d, 0, sizeof d);
  char buf[128];
  for (int r = LK_REASON_RETRY; r <= LK_REASON_SUCCESS + 1; r++) {
    d.reason = (lk_reason)r;
    d.failure = (lk_failure)-1;
    d.computed = INT64_MIN;
    d.remaining = INT64_MAX;
    d.min_attempt = INT64_MIN + 1;
    int n = lk_decision_format(&d, buf, sizeof buf);
    assert_true(n > 0 && (size_t)n < sizeof buf);
    assert_int_equal((size_t)n, strlen(buf));
    /* measuring and cutting behave as snprintf */
    assert_int_equal(lk_decision_format(&d, NULL, 0), n);
    char small[4] = "xxx";
    assert_int_equal(lk_decision_format(&d, small, sizeof small), n);
    assert_int_equal(strlen(small), n < 3 ? n : 3);
  }
  d.reason = (lk_reason)99;
  lk_decision_format(&d, buf, sizeof buf);
  assert_string_equal(buf, "unknown");
  d.reason = LK_REASON_RETRY;
  lk_decision_format(&d, buf, sizeof buf);
  assert_string_equal(buf, "retry UNKNOWN");
  /* a NULL decision, or a NULL buffer with room, is an error, not a crash */
  assert_int_equal(lk_decision_format(NULL, buf, sizeof buf), LK_EINVAL);
  assert_int_equal(lk_decision_format(NULL, NULL, 0), LK_EINVAL);
  assert_int_equal(lk_decision_format(&d, NULL, 8), LK_EINVAL);
  assert_string_equal(lk_reason_name((lk_reason)-1), "UNKNOWN");
  assert_string_equal(lk_reason_name((lk_reason)8), "UNKNOWN");
  assert_string_equal(lk_reason_name(LK_REASON_SUCCESS), "SUCCESS");
}

static void test_failure_edges(void **state) {
  (void)state;
  static const int outside[] = {-1, LK_F__COUNT, 64, INT_MAX, INT_MIN};
  for (size_t i = 0; i < sizeof outside / sizeof outside[0]; i++) {
    lk_failure k = (lk_failure)outside[i];
    assert_string_equal(lk_failure_name(k), "UNKNOWN");
    assert_int_equal(lk_failure_seed_kind(k), LK_F_NONE);
    assert_int_equal(lk_failure_class_of(k), LK_FC_TERMINAL);
  }
  lk_failure k = LK_F_NONE;
  for (int i = 0; i < LK_F__COUNT; i++) {
    assert_int_equal(lk_failure_from_name(lk_failure_name((lk_failure)i), &k), LK_OK);
    assert_int_equal(k, i);
  }
  assert_int_equal(lk_failure_from_name("connect-refused", &k), LK_OK);
  assert_int_equal(k, LK_F_CONNECT_REFUSED);
  k = LK_F_HTTP_500;
  static const char *const junk[] = {"", "UNKNOWN", "CONNECT_FAILEDX", "CONNECT", " NONE", "NONE "};
  for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++)
    assert_int_equal(lk_failure_from_name(junk[i], &k), LK_EINVAL);
  assert_int_equal(k, LK_F_HTTP_500);
  assert_int_equal(lk_failure_from_name(NULL, &k), LK_EINVAL);
  assert_int_equal(lk_failure_from_name("NONE", NULL), LK_EINVAL);

  static const struct {
    int status;
    lk_failure kind;
  } st[] = {{INT_MIN, LK_F_JUNK_RESPONSE}, {-1, LK_F_JUNK_RESPONSE}, {0, LK_F_JUNK_RESPONSE},
            {99, LK_F_JUNK_RESPONSE},      {100, LK_F_NONE},         {399, LK_F_NONE},
            {400, LK_F_CLIENT_4XX},        {408, LK_F_HTTP_408},     {499, LK_F_CLIENT_4XX},
            {501, LK_F_SERVER_5XX},        {599, LK_F_SERVER_5XX},   {600, LK_F_JUNK_RESPONSE},
            {INT_MAX, LK_F_JUNK_RESPONSE}};
  for (size_t i = 0; i < sizeof st / sizeof st[0]; i++)
    assert_int_equal(lk_failure_from_status(st[i].status), st[i].kind);

  static const char *const not_methods[] = {"", "GE", "GETX", "GET ", " GET", "G\xc3\xa9T", "PUTS"};
  for (size_t i = 0; i < sizeof not_methods / sizeof not_methods[0]; i++) {
    assert_false(lk_method_is_safe(not_methods[i]));
    assert_false(lk_method_is_idempotent(not_methods[i]));
  }
  assert_false(lk_method_is_safe(NULL));
  assert_false(lk_method_is_idempotent(NULL));
  assert_true(lk_method_is_safe("gEt"));
  assert_false(lk_method_is_safe("PUT"));
  assert_true(lk_method_is_idempotent("pUt"));
  assert_false(lk_method_is_idempotent("POST"));
}

/* --- rand.h, clock.h, seed_example.h -------------------------------------------------------- */

static void test_rand_edges(void **state) {
  (void)state;
  lk_rand_fast a, b;
  lk_rand_fast_seeded(&a, 99);
  lk_rand_fast_seeded(&b, 99);
  /* below(0) is 0 and consumes nothing: the twin stays in step */
  assert_int_equal(lk_rand_below(&a.base, 0), 0);
  assert_int_equal(lk_rand_next64(&a.base), lk_rand_next64(&b.base));
  assert_int_equal(lk_rand_below(&a.base, 1), 0);
  lk_rand_next64(&b.base);
  static const uint64_t bounds[] = {2,
                                    3,
                                    UINT64_C(1) << 62,
                                    (UINT64_C(1) << 63) - 1,
                                    UINT64_C(1) << 63,
                                    (UINT64_C(1) << 63) + 1,
                                    UINT64_MAX};
  lk_rand_l64x128 l;
  lk_rand_l64x128_init(&l, INT64_MIN);
  for (int i = 0; i < 200; i++)
    for (size_t j = 0; j < sizeof bounds / sizeof bounds[0]; j++) {
      assert_true(lk_rand_below(&a.base, bounds[j]) < bounds[j]);
      assert_true(lk_rand_below(&l.base, bounds[j]) < bounds[j]);
    }
  assert_int_equal(lk_rand_below(&l.base, 0), 0);
  /* seeds at the extremes give working generators */
  lk_rand_fast_seeded(&a, 0);
  lk_rand_fast_seeded(&b, UINT64_MAX);
  assert_true(lk_rand_next64(&a.base) != lk_rand_next64(&b.base));
  lk_rand_l64x128_init(&l, 0);
  lk_rand_next64(&l.base);
  unsigned char buf[64];
  assert_int_equal(lk_os_random(buf, 0), LK_OK);
  assert_int_equal(lk_os_random(buf, sizeof buf), LK_OK);
  lk_rand_fast f;
  int rc = lk_rand_fast_init(&f);
  assert_true(rc == LK_OK || rc == LK_ESYS);
  lk_rand_below(&f.base, 10);
}

static void test_clock_and_seed_example(void **state) {
  (void)state;
  const lk_clock *c = lk_clock_system();
  assert_non_null(c);
  assert_ptr_equal(c, lk_clock_system());
  int64_t t0 = c->now(c), t1 = lk_now_ns();
  assert_true(t1 >= t0);
  assert_true(lk_wall_ns() > 0);
  lk_fake_clock fc;
  lk_fake_clock_init(&fc, INT64_MAX - 5);
  lk_fake_clock_advance(&fc, INT64_MAX); /* saturates */
  assert_int_equal(fc.base.now(&fc.base), INT64_MAX);
  lk_fake_clock_set(&fc, INT64_MIN);
  assert_int_equal(fc.base.now(&fc.base), INT64_MIN);

  char buf[512];
  int n = lk_seed_example(buf, sizeof buf);
  assert_true(n > 0 && (size_t)n == strlen(buf));
  /* too small, at every size short of fitting: LK_ETOOBIG, never an overrun or a NULL offset */
  for (size_t cap = 0; cap <= (size_t)n; cap++) {
    char *p = cap ? malloc(cap) : NULL;
    assert_int_equal(lk_seed_example(p, cap), LK_ETOOBIG);
    free(p);
  }
  char *exact = malloc((size_t)n + 1);
  assert_int_equal(lk_seed_example(exact, (size_t)n + 1), n);
  assert_string_equal(exact, buf);
  free(exact);
  assert_int_equal(lk_seed_example(NULL, 100), LK_EINVAL);
}

/* --- budget.h ------------------------------------------------------------------------------- */

static lk_budget *ratio_budget(double percent, int64_t ttl, int floor, int buckets) {
  lk_budget_ratio_config c = {percent, ttl, floor, buckets};
  lk_budget *b = NULL;
  const char *why = NULL;
  if (lk_budget_new_ratio(&c, &b, &why) != LK_OK)
    fail_msg("ratio budget: %s", why);
  return b;
}

static void test_budget_config_edges(void **state) {
  (void)state;
  const char *why = NULL;
  lk_budget *b = (lk_budget *)&why; /* must come back NULL */
  assert_int_equal(lk_budget_new_ratio(NULL, &b, &why), LK_EINVAL);
  assert_null(b);
  b = (lk_budget *)&why;
  assert_int_equal(lk_budget_new_token(NULL, &b, &why), LK_EINVAL);
  assert_null(b);
  b = (lk_budget *)&why;
  assert_int_equal(lk_budget_new_quota(NULL, &b, &why), LK_EINVAL);
  assert_null(b);
  lk_budget_ratio_config rc;
  lk_budget_ratio_config_init_default(&rc);
  lk_budget_token_config tc;
  lk_budget_token_config_init_default(&tc);
  lk_budget_quota_config qc;
  lk_budget_quota_config_init_default(&qc);
  assert_int_equal(lk_budget_new_ratio(&rc, NULL, &why), LK_EINVAL);
  assert_int_equal(lk_budget_new_token(&tc, NULL, &why), LK_EINVAL);
  assert_int_equal(lk_budget_new_quota(&qc, NULL, &why), LK_EINVAL);
  why = NULL;
  assert_int_equal(lk_budget_ratio_config_validate(NULL, &why), LK_ECONFIG);
  assert_non_null(why);
  assert_int_equal(lk_budget_token_config_validate(NULL, NULL), LK_ECONFIG);
  assert_int_equal(lk_budget_quota_config_validate(NULL, NULL), LK_ECONFIG);

  /* RATIO */
  static const double bad_pct[] = {NAN, INFINITY, -INFINITY, -0.0001, 1000.0001};
  for (size_t i = 0; i < sizeof bad_pct / sizeof bad_pct[0]; i++) {
    lk_budget_ratio_config c = rc;
    c.percent = bad_pct[i];
    b = (lk_budget *)&why;
    why = NULL;
    assert_int_equal(lk_budget_new_ratio(&c, &b, &why), LK_ECONFIG);
    assert_null(b);
    assert_non_null(why);
  }
  static const int64_t bad_ttl[] = {INT64_MIN, -1, 0, MS(1) - 1, S(3600) + 1, INT64_MAX};
  for (size_t i = 0; i < sizeof bad_ttl / sizeof bad_ttl[0]; i++) {
    lk_budget_ratio_config c = rc;
    c.ttl = bad_ttl[i];
    c.buckets = 1;
    assert_int_equal(lk_budget_ratio_config_validate(&c, NULL), LK_ECONFIG);
  }
  static const int bad_floor[] = {INT_MIN, -1, 1000001, INT_MAX};
  for (size_t i = 0; i < sizeof bad_floor / sizeof bad_floor[0]; i++) {
    lk_budget_ratio_config c = rc;
    c.min_retries_per_sec = bad_floor[i];
    assert_int_equal(lk_budget_ratio_config_validate(&c, NULL), LK_ECONFIG);
  }
  static const int bad_buckets[] = {INT_MIN, 0, 3601, INT_MAX};
  for (size_t i = 0; i < sizeof bad_buckets / sizeof bad_buckets[0]; i++) {
    lk_budget_ratio_config c = rc;
    c.buckets = bad_buckets[i];
    assert_int_equal(lk_budget_ratio_config_validate(&c, NULL), LK_ECONFIG);
  }
  lk_budget_ratio_config narrow = {20, MS(10), 10, 11}; /* buckets under 1 ms */
  assert_int_equal(lk_budget_ratio_config_validate(&narrow, NULL), LK_ECONFIG);
  /* the edges are accepted */
  static const lk_budget_ratio_config edges[] = {
      {0, MS(1), 0, 1}, {1000, S(3600), 1000000, 3600}, {0, S(3600), 0, 1}, {1000, MS(10), 1, 10}};
  for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
    b = NULL;
    assert_int_equal(lk_budget_new_ratio(&edges[i], &b, NULL), LK_OK);
    lk_budget_stats s;
    assert_int_equal(lk_budget_stats_get(b, 0, &s), LK_OK);
    assert_true(s.remaining >= 0 && s.consumption >= 0 && s.consumption <= 1);
    lk_budget_free(b);
  }

  /* TOKEN */
  static const double bad_max[] = {NAN, INFINITY, -1, 0, 0.0004, 1000.0001};
  for (size_t i = 0; i < sizeof bad_max / sizeof bad_max[0]; i++) {
    lk_budget_token_config c = tc;
    c.max_tokens = bad_max[i];
    assert_int_equal(lk_budget_token_config_validate(&c, NULL), LK_ECONFIG);
  }
  static const double bad_tr[] = {NAN, INFINITY, -1, 0, 0.0009, 1000.0001};
  for (size_t i = 0; i < sizeof bad_tr / sizeof bad_tr[0]; i++) {
    lk_budget_token_config c = tc;
    c.token_ratio = bad_tr[i];
    assert_int_equal(lk_budget_token_config_validate(&c, NULL), LK_ECONFIG);
  }
  lk_budget_token_config tedge = {1000, 1000};
  assert_int_equal(lk_budget_token_config_validate(&tedge, NULL), LK_OK);
  tedge.max_tokens = 0.001;
  tedge.token_ratio = 0.001;
  assert_int_equal(lk_budget_token_config_validate(&tedge, NULL), LK_OK);

  /* QUOTA */
  const int64_t T12 = INT64_C(1000000000000);
  static const lk_budget_quota_config bad_q[] = {
      {0, 1, 1, 0},         {-1, 1, 1, 0},         {INT64_C(1000000000001), 1, 1, 0},
      {INT64_MAX, 1, 1, 0}, {10, 0, 1, 0},         {10, 11, 1, 0},
      {10, 1, 0, 0},        {10, 1, 11, 0},        {10, 1, 1, -1},
      {10, 1, 1, 11},       {10, INT64_MIN, 1, 0}, {10, 1, 1, INT64_MIN}};
  for (size_t i = 0; i < sizeof bad_q / sizeof bad_q[0]; i++)
    assert_int_equal(lk_budget_quota_config_validate(&bad_q[i], NULL), LK_ECONFIG);
  lk_budget_quota_config qedge = {T12, T12, T12, T12};
  assert_int_equal(lk_budget_new_quota(&qedge, &b, NULL), LK_OK);
  assert_int_equal(lk_budget_remaining(b, 0), 1);
  assert_int_equal(lk_budget_acquire_retry(b, 0, true), LK_OK);
  assert_int_equal(lk_budget_acquire_retry(b, 0, false), LK_EBUDGET);
  lk_budget_record_success(b, 0); /* refunds the whole capacity, capped */
  assert_int_equal(lk_budget_remaining(b, 0), 1);
  lk_budget_free(b);
  qedge = (lk_budget_quota_config){1, 1, 1, 0};
  assert_int_equal(lk_budget_new_quota(&qedge, &b, NULL), LK_OK);
  assert_int_equal(lk_budget_acquire_retry(b, 0, false), LK_OK);
  lk_budget_record_success(b, 0); /* no_retry_increment 0: nothing comes back */
  assert_int_equal(lk_budget_acquire_retry(b, 0, false), LK_EBUDGET);
  lk_budget_free(b);

  /* the NULL-tolerant calls */
  lk_budget_free(NULL);
  lk_budget_set_single_thread(NULL);
  lk_budget_stats s;
  assert_int_equal(lk_budget_stats_get(NULL, 0, &s), LK_EINVAL);
  b = ratio_budget(20, S(10), 10, 10);
  assert_int_equal(lk_budget_stats_get(b, 0, NULL), LK_EINVAL);
  lk_budget_free(b);
  assert_int_equal(lk_budget_remaining(NULL, 0), 0);
  assert_true(lk_budget_consumption(NULL, 0) == 0.0);
  assert_string_equal(lk_budget_kind_name((lk_budget_kind)-1), "unknown");
  assert_string_equal(lk_budget_kind_name((lk_budget_kind)3), "unknown");

  /* backends: every required member, a kind in range */
  static const lk_budget_backend empty_be = {0};
  b = (lk_budget *)&why;
  assert_int_equal(lk_budget_new_backend(LK_BUDGET_RATIO, &empty_be, NULL, &b), LK_EINVAL);
  assert_null(b);
  assert_int_equal(lk_budget_new_backend(LK_BUDGET_RATIO, NULL, NULL, &b), LK_EINVAL);
  assert_null(lk_budget_backend_arg(NULL, &empty_be));
}

static void test_budget_ratio_edges(void **state) {
  (void)state;
  /* 0 % and no floor: nothing is ever granted, whatever is recorded; refusals are counted */
  lk_budget *b = ratio_budget(0, S(10), 0, 10);
  for (int i = 0; i < 100; i++)
    lk_budget_record_request(b, S(1));
  assert_int_equal(lk_budget_acquire_retry(b, S(1), false), LK_EBUDGET);
  lk_budget_stats s;
  assert_int_equal(lk_budget_stats_get(b, S(1), &s), LK_OK);
  assert_int_equal(s.refused, 1);
  assert_int_equal(s.remaining, 0);
  assert_true(s.consumption == 1.0); /* no allowance at all: retries are being refused */
  lk_budget_free(b);

  /* 1000 %: ten retries per request */
  b = ratio_budget(1000, S(10), 0, 10);
  lk_budget_record_request(b, 0);
  for (int i = 0; i < 10; i++)
    assert_int_equal(lk_budget_acquire_retry(b, 0, false), LK_OK);
  assert_int_equal(lk_budget_acquire_retry(b, 0, false), LK_EBUDGET);
  lk_budget_free(b);

  /* instants at both ends of the time line: no crash, no UB, sane stats */
  static const int64_t extremes[] = {INT64_MIN, INT64_MIN + 1, -1, 0, INT64_MAX - 1, INT64_MAX};
  for (int st = 0; st < 2; st++) {
    b = ratio_budget(20, S(10), 10, 10);
    if (st)
      lk_budget_set_single_thread(b);
    for (size_t i = 0; i < sizeof extremes / sizeof extremes[0]; i++)
      for (size_t j = 0; j < sizeof extremes / sizeof extremes[0]; j++) {
        lk_budget_record_request(b, extremes[i]);
        lk_budget_acquire_retry(b, extremes[j], false);
        lk_budget_record_success(b, extremes[i]);
        lk_budget_record_failure(b, extremes[j]);
        assert_int_equal(lk_budget_stats_get(b, extremes[j], &s), LK_OK);
        assert_true(s.remaining >= 0);
        assert_true(s.consumption >= 0 && s.consumption <= 1);
        assert_true(s.level <= s.capacity);
      }
    lk_budget_free(b);
  }
}

/* A clock that steps back by more than the window must not leave the window stuck for as long as
 * the clock went back: the retries spent before the step expire within a window of the new time
 * line, so the floor (min_retries_per_sec) is available again. */
static void test_budget_ratio_clock_steps_back(void **state) {
  (void)state;
  for (int st = 0; st < 2; st++) {
    lk_fake_clock fc;
    lk_fake_clock_init(&fc, S(1000));
    lk_budget *b = ratio_budget(0, S(10), 1, 10); /* a floor of 10 retries per window */
    if (st)
      lk_budget_set_single_thread(b);
    int64_t now = fc.base.now(&fc.base);
    for (int i = 0; i < 10; i++)
      assert_int_equal(lk_budget_acquire_retry(b, now, false), LK_OK);
    assert_int_equal(lk_budget_acquire_retry(b, now, false), LK_EBUDGET);
    lk_fake_clock_set(&fc, 0); /* the clock goes back 1000 s */
    for (int64_t t = 0; t <= S(11); t += MS(500)) {
      lk_budget_stats s;
      assert_int_equal(lk_budget_stats_get(b, t, &s), LK_OK);
      assert_true(s.remaining >= 0 && s.remaining <= 10);
      assert_true(s.consumption >= 0 && s.consumption <= 1);
    }
    lk_fake_clock_advance(&fc, S(11)); /* one window (and a bucket) later */
    now = fc.base.now(&fc.base);
    assert_int_equal(lk_budget_remaining(b, now), 10);
    for (int i = 0; i < 10; i++)
      assert_int_equal(lk_budget_acquire_retry(b, now, false), LK_OK);
    assert_int_equal(lk_budget_acquire_retry(b, now, false), LK_EBUDGET);
    /* a clock a little behind another thread's (under a window) still counts in the head */
    assert_int_equal(lk_budget_acquire_retry(b, now - S(1), false), LK_EBUDGET);
    lk_budget_free(b);
  }
}

static void test_budget_token_quota_edges(void **state) {
  (void)state;
  /* TOKEN: floored at 0 and capped at max however many events arrive */
  lk_budget_token_config tc = {1000, 1000};
  lk_budget *b = NULL;
  assert_int_equal(lk_budget_new_token(&tc, &b, NULL), LK_OK);
  for (int i = 0; i < 5000; i++)
    lk_budget_record_failure(b, i);
  lk_budget_stats s;
  assert_int_equal(lk_budget_stats_get(b, 0, &s), LK_OK);
  assert_int_equal(s.level, 0);
  assert_int_equal(s.remaining, 0);
  assert_true(s.consumption == 1.0);
  assert_int_equal(lk_budget_acquire_retry(b, 0, false), LK_EBUDGET);
  for (int i = 0; i < 5000; i++)
    lk_budget_record_success(b, i);
  assert_int_equal(lk_budget_stats_get(b, 0, &s), LK_OK);
  assert_int_equal(s.level, s.capacity);
  assert_true(s.consumption == 0.0);
  lk_budget_ticket t = {INT64_MAX};
  lk_budget_record_success_ticket(b, 0, &t);
  assert_int_equal(t.cost, 0);
  assert_int_equal(lk_budget_acquire_retry_ticket(b, 0, false, &t), LK_OK);
  assert_int_equal(t.cost, 0); /* TOKEN: retries cost nothing */
  lk_budget_free(b);

  /* QUOTA: a ticket carrying more than the capacity (forged, or never initialised) refunds at
   * most up to the capacity and never wraps the balance; a negative one refunds the increment */
  lk_budget_quota_config qc;
  lk_budget_quota_config_init_default(&qc);
  assert_int_equal(lk_budget_new_quota(&qc, &b, NULL), LK_OK);
  t.cost = 0;
  assert_int_equal(lk_budget_acquire_retry_ticket(b, 0, false, &t), LK_OK);
  assert_int_equal(t.cost, 5);
  assert_int_equal(lk_budget_stats_get(b, 0, &s), LK_OK);
  assert_int_equal(s.level, 495);
  t.cost = INT64_MAX;
  lk_budget_record_success_ticket(b, 0, &t);
  assert_int_equal(t.cost, 0);
  assert_int_equal(lk_budget_stats_get(b, 0, &s), LK_OK);
  assert_int_equal(s.level, 500);
  assert_int_equal(s.remaining, 100);
  assert_int_equal(lk_budget_acquire_retry(b, 0, true), LK_OK);
  t.cost = INT64_MIN;
  lk_budget_record_success_ticket(b, 0, &t);
  assert_int_equal(lk_budget_stats_get(b, 0, &s), LK_OK);
  assert_int_equal(s.level, 491);
  /* drained: refused with nothing charged, the ticket untouched */
  while (lk_budget_acquire_retry(b, 0, true) == LK_OK) {
  }
  int64_t level = (lk_budget_stats_get(b, 0, &s), s.level);
  t.cost = 77;
  assert_int_equal(lk_budget_acquire_retry_ticket(b, 0, true, &t), LK_EBUDGET);
  assert_int_equal(t.cost, 77);
  assert_int_equal(lk_budget_stats_get(b, 0, &s), LK_OK);
  assert_int_equal(s.level, level);
  assert_true(s.consumption == 1.0);
  lk_budget_free(b);
}

/* --- breaker.h ------------------------------------------------------------------------------ */

static lk_breaker *breaker_of(const lk_breaker_config *c) {
  lk_breaker *b = NULL;
  const char *why = NULL;
  if (lk_breaker_new(c, &b, &why) != LK_OK)
    fail_msg("breaker: %s", why);
  return b;
}

/* Trips on one failure: a window of one call, threshold 100 %. */
static void tripping_config(lk_breaker_config *c) {
  lk_breaker_config_init_default(c);
  c->window_size = 1;
  c->minimum_calls = 1;
  c->failure_rate_threshold = 100;
  c->wait_open = S(60);
  c->permitted_half_open = 2;
}

static void test_breaker_config_edges(void **state) {
  (void)state;
  lk_breaker_config c;
  const char *why = NULL;
  lk_breaker *b = (lk_breaker *)&why;
  assert_int_equal(lk_breaker_new(NULL, &b, &why), LK_EINVAL);
  assert_null(b);
  lk_breaker_config_init_default(&c);
  assert_int_equal(lk_breaker_new(&c, NULL, &why), LK_EINVAL);
  assert_int_equal(lk_breaker_config_validate(NULL, &why), LK_ECONFIG);
  assert_non_null(why);

  enum {
    WIN,
    WSIZE_C,
    WSIZE_T,
    MINC,
    FRATE,
    SRATE,
    SLOW,
    WAIT,
    BACKOFF,
    NORNG,
    PERM,
    MAXHO,
    FAIL,
    IGN
  };
  static const struct {
    int field;
    double d;
    int64_t i;
  } bad[] = {{WIN, 0, 2},           {WIN, 0, -1},         {WSIZE_C, 0, 0},     {WSIZE_C, 0, -1},
             {WSIZE_C, 0, 1000001}, {WSIZE_T, 0, 0},      {WSIZE_T, 0, 86401}, {MINC, 0, 0},
             {MINC, 0, INT_MIN},    {FRATE, 0, 0},        {FRATE, NAN, 0},     {FRATE, -1, 0},
             {FRATE, 100.0001, 0},  {FRATE, INFINITY, 0}, {FRATE, 0.00004, 0}, {SRATE, NAN, 0},
             {SRATE, 0, 0},         {SRATE, 101, 0},      {SLOW, 0, 0},        {SLOW, 0, INT64_MIN},
             {WAIT, 0, 0},          {WAIT, 0, -1},        {BACKOFF, 0, 0},     {NORNG, 0, 0},
             {PERM, 0, 0},          {PERM, 0, 1000001},   {MAXHO, 0, -1},      {FAIL, 0, 0},
             {FAIL, 0, 63},         {IGN, 0, 0},          {IGN, 0, 63}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    lk_breaker_config_init_default(&c);
    switch (bad[i].field) {
    case WIN: c.window = (lk_breaker_window)bad[i].i; break;
    case WSIZE_C: c.window_size = (int)bad[i].i; break;
    case WSIZE_T:
      c.window = LK_BREAKER_WINDOW_TIME;
      c.window_size = (int)bad[i].i;
      break;
    case MINC: c.minimum_calls = (int)bad[i].i; break;
    case FRATE: c.failure_rate_threshold = bad[i].d; break;
    case SRATE: c.slow_call_rate_threshold = bad[i].d; break;
    case SLOW: c.slow_call_duration = bad[i].i; break;
    case WAIT: c.wait_open = bad[i].i; break;
    case BACKOFF:
      c.wait_backoff = true;
      c.backoff.base = 0;
      break;
    case NORNG: c.wait_backoff = true; break; /* symmetric jitter by default, no rng */
    case PERM: c.permitted_half_open = (int)bad[i].i; break;
    case MAXHO: c.max_wait_half_open = bad[i].i; break;
    case FAIL: c.failures |= LK_FAILURE_BIT(bad[i].i); break;
    default: c.ignore |= LK_FAILURE_BIT(bad[i].i); break;
    }
    why = NULL;
    b = (lk_breaker *)&why;
    if (lk_breaker_new(&c, &b, &why) != LK_ECONFIG)
      fail_msg("bad breaker config #%zu accepted", i);
    assert_null(b);
    assert_non_null(why);
  }
  /* the edges */
  lk_breaker_config_init_default(&c);
  c.window_size = 1000000;
  c.minimum_calls = INT_MAX; /* capped at the window */
  c.failure_rate_threshold = 0.0001;
  c.slow_call_rate_threshold = 100;
  c.slow_call_duration = INT64_MAX;
  c.wait_open = INT64_MAX;
  c.permitted_half_open = 1000000;
  c.max_wait_half_open = INT64_MAX;
  b = breaker_of(&c);
  assert_int_equal(lk_breaker_acquire(b, INT64_MAX), LK_OK);
  lk_breaker_record(b, INT64_MAX, INT64_MAX, LK_F_HTTP_500);
  lk_breaker_free(b);
  c.window = LK_BREAKER_WINDOW_TIME;
  c.window_size = 86400;
  b = breaker_of(&c);
  lk_breaker_record(b, INT64_MIN, INT64_MIN, LK_F_NONE);
  lk_breaker_record(b, INT64_MAX, 0, LK_F_NONE);
  lk_breaker_metrics m;
  assert_int_equal(lk_breaker_metrics_get(b, INT64_MAX, &m), LK_OK);
  assert_int_equal(lk_breaker_metrics_get(b, INT64_MIN, &m), LK_OK);
  lk_breaker_free(b);

  /* NULL handling as the header lists it */
  lk_breaker_free(NULL);
  lk_breaker_set_single_thread(NULL);
  lk_breaker_reset(NULL, 0);
  assert_int_equal(lk_breaker_transition(NULL, LK_BREAKER_OPEN, 0), LK_EINVAL);
  assert_int_equal(lk_breaker_metrics_get(NULL, 0, &m), LK_EINVAL);
  tripping_config(&c);
  b = breaker_of(&c);
  assert_int_equal(lk_breaker_metrics_get(b, 0, NULL), LK_EINVAL);
  assert_int_equal(lk_breaker_transition(b, (lk_breaker_state)6, 0), LK_EINVAL);
  assert_int_equal(lk_breaker_transition(b, (lk_breaker_state)-1, 0), LK_EINVAL);
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_CLOSED);
  lk_breaker_free(b);
  assert_string_equal(lk_breaker_state_name((lk_breaker_state)6), "UNKNOWN");
  assert_string_equal(lk_breaker_state_name((lk_breaker_state)-1), "UNKNOWN");
  lk_breaker_state st = LK_BREAKER_OPEN;
  assert_int_equal(lk_breaker_state_parse("half-open", &st), LK_OK);
  assert_int_equal(st, LK_BREAKER_HALF_OPEN);
  assert_int_equal(lk_breaker_state_parse("", &st), LK_EINVAL);
  assert_int_equal(lk_breaker_state_parse("OPENED", &st), LK_EINVAL);
  assert_int_equal(lk_breaker_state_parse("UNKNOWN", &st), LK_EINVAL);
  assert_int_equal(lk_breaker_state_parse(NULL, &st), LK_EINVAL);
  assert_int_equal(lk_breaker_state_parse("open", NULL), LK_EINVAL);
  assert_int_equal(st, LK_BREAKER_HALF_OPEN);
}

static void test_breaker_thresholds_and_outcomes(void **state) {
  (void)state;
  /* 100 %: only a window of nothing but failures trips */
  lk_breaker_config c;
  lk_breaker_config_init_default(&c);
  c.window_size = 4;
  c.minimum_calls = 4;
  c.failure_rate_threshold = 100;
  c.slow_call_rate_threshold = 100;
  lk_breaker *b = breaker_of(&c);
  for (int i = 0; i < 3; i++)
    lk_breaker_record(b, 0, 0, LK_F_HTTP_500);
  lk_breaker_record(b, 0, 0, LK_F_NONE);
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_CLOSED);
  for (int i = 0; i < 3; i++)
    lk_breaker_record(b, 0, 0, LK_F_HTTP_500);
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_CLOSED); /* 3 of 4 */
  lk_breaker_record(b, 0, 0, LK_F_HTTP_500);
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_OPEN);
  lk_breaker_free(b);

  /* durations at the extremes: negative counts as 0 (never slow), INT64_MAX is slow; an
   * out-of-range kind counts as a failure */
  c.failure_rate_threshold = 100;
  c.slow_call_duration = 1;
  b = breaker_of(&c);
  lk_breaker_record(b, 0, INT64_MIN, LK_F_NONE);
  lk_breaker_record(b, 0, -1, LK_F_NONE);
  lk_breaker_record(b, 0, 1, LK_F_NONE);
  lk_breaker_record(b, 0, INT64_MAX, (lk_failure)-1);
  lk_breaker_metrics m;
  assert_int_equal(lk_breaker_metrics_get(b, 0, &m), LK_OK);
  assert_int_equal(m.calls, 4);
  assert_int_equal(m.slow, 1);
  assert_int_equal(m.failed, 1);
  assert_true(m.failure_rate == 25.0 && m.slow_call_rate == 25.0);
  lk_breaker_free(b);

  /* releases without an acquire never give more than permitted_half_open */
  tripping_config(&c);
  b = breaker_of(&c);
  lk_breaker_release(b); /* CLOSED: nothing to give back */
  assert_int_equal(lk_breaker_transition(b, LK_BREAKER_HALF_OPEN, 0), LK_OK);
  for (int i = 0; i < 10; i++)
    lk_breaker_release(b);
  assert_int_equal(lk_breaker_metrics_get(b, 0, &m), LK_OK);
  assert_int_equal(m.half_open_left, 2);
  assert_int_equal(lk_breaker_acquire(b, 0), LK_OK);
  assert_int_equal(lk_breaker_acquire(b, 0), LK_OK);
  assert_int_equal(lk_breaker_acquire(b, 0), LK_EBREAKER_OPEN);
  assert_int_equal(lk_breaker_retry_at(b, 5), LK_BREAKER_RETRY_UNKNOWN);
  assert_int_equal(lk_breaker_transition(b, LK_BREAKER_FORCED_OPEN, 0), LK_OK);
  assert_int_equal(lk_breaker_retry_at(b, 5), INT64_MAX);
  assert_int_equal(lk_breaker_acquire(b, INT64_MAX), LK_EBREAKER_OPEN);
  lk_breaker_free(b);

  /* OPEN entered at the end of the time line: the wait saturates, never wraps into the past */
  b = breaker_of(&c);
  assert_int_equal(lk_breaker_acquire(b, INT64_MAX - 1), LK_OK);
  lk_breaker_record(b, INT64_MAX - 1, 0, LK_F_CONNECT_REFUSED);
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_OPEN);
  assert_int_equal(lk_breaker_acquire(b, INT64_MAX - 1), LK_EBREAKER_OPEN);
  assert_int_equal(lk_breaker_retry_at(b, INT64_MAX - 1), INT64_MAX);
  assert_int_equal(lk_breaker_metrics_get(b, 0, &m), LK_OK);
  assert_int_equal(m.open_until, INT64_MAX);
  lk_breaker_free(b);

  /* a backoff wait that grows to INT64_MAX over many consecutive openings saturates */
  tripping_config(&c);
  c.wait_backoff = true;
  c.backoff.jitter = LK_JITTER_NONE;
  c.backoff.max = INT64_MAX;
  b = breaker_of(&c);
  for (int i = 0; i < 80; i++) {
    assert_int_equal(lk_breaker_transition(b, LK_BREAKER_OPEN, S(1)), LK_OK);
    int64_t at = lk_breaker_retry_at(b, S(1));
    assert_true(at >= S(1));
  }
  assert_int_equal(lk_breaker_metrics_get(b, S(1), &m), LK_OK);
  assert_int_equal(m.openings, 80);
  assert_int_equal(m.open_until, INT64_MAX);
  lk_breaker_free(b);
}

/* OPEN's wait and HALF_OPEN's max wait are measured from an instant; a clock that steps back
 * further than the wait must not keep the breaker shut (or report a retry_at) for as long as the
 * clock went back. */
static void test_breaker_clock_steps_back(void **state) {
  (void)state;
  for (int st = 0; st < 2; st++) {
    lk_breaker_config c;
    tripping_config(&c);
    lk_breaker *b = breaker_of(&c);
    if (st)
      lk_breaker_set_single_thread(b);
    lk_fake_clock fc;
    lk_fake_clock_init(&fc, S(1000));
    int64_t now = fc.base.now(&fc.base);
    assert_int_equal(lk_breaker_acquire(b, now), LK_OK);
    lk_breaker_record(b, now, 0, LK_F_CONNECT_REFUSED);
    assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_OPEN);
    /* a little behind (under the wait): still refused, retry_at is the end of the wait */
    assert_int_equal(lk_breaker_acquire(b, now - S(1)), LK_EBREAKER_OPEN);
    assert_int_equal(lk_breaker_retry_at(b, now - S(1)), now + S(60));
    lk_fake_clock_set(&fc, 0); /* back 1000 s */
    now = fc.base.now(&fc.base);
    int64_t at = lk_breaker_retry_at(b, now);
    assert_true(at >= now && at - now <= S(60));
    lk_fake_clock_advance(&fc, S(61));
    now = fc.base.now(&fc.base);
    assert_int_equal(lk_breaker_acquire(b, now), LK_OK); /* a probe */
    assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_HALF_OPEN);
    lk_breaker_free(b);

    /* HALF_OPEN with a max wait, every permit taken, then the clock steps back */
    tripping_config(&c);
    c.max_wait_half_open = S(5);
    b = breaker_of(&c);
    if (st)
      lk_breaker_set_single_thread(b);
    assert_int_equal(lk_breaker_transition(b, LK_BREAKER_HALF_OPEN, S(1000)), LK_OK);
    assert_int_equal(lk_breaker_acquire(b, S(1000)), LK_OK);
    assert_int_equal(lk_breaker_acquire(b, S(1000)), LK_OK);
    assert_int_equal(lk_breaker_acquire(b, S(1000)), LK_EBREAKER_OPEN);
    assert_int_equal(lk_breaker_retry_at(b, S(1000)), S(1005));
    at = lk_breaker_retry_at(b, 0);
    assert_true(at >= 0 && at <= S(5));
    assert_int_equal(lk_breaker_acquire(b, S(6)), LK_EBREAKER_OPEN);
    assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_OPEN); /* the max wait has passed */
    assert_true(lk_breaker_retry_at(b, S(6)) <= S(66));
    lk_breaker_free(b);

    /* a TIME window whose head is far ahead of the clock: what was recorded before the step
     * leaves the window within a window's length, it does not stay for 1000 s */
    lk_breaker_config_init_default(&c);
    c.window = LK_BREAKER_WINDOW_TIME;
    c.window_size = 10;
    c.minimum_calls = 10;
    c.failure_rate_threshold = 50;
    b = breaker_of(&c);
    if (st)
      lk_breaker_set_single_thread(b);
    for (int i = 0; i < 9; i++)
      lk_breaker_record(b, S(1000), 0, LK_F_HTTP_503);
    lk_breaker_metrics m;
    assert_int_equal(lk_breaker_metrics_get(b, S(1000), &m), LK_OK);
    assert_int_equal(m.calls, 9);
    assert_int_equal(lk_breaker_metrics_get(b, S(11), &m), LK_OK);
    assert_true(m.calls == 0 || m.calls == 9);
    lk_breaker_record(b, S(11), 0, LK_F_NONE); /* the clock went back to 11 s */
    assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_CLOSED);
    assert_int_equal(lk_breaker_metrics_get(b, S(11), &m), LK_OK);
    assert_int_equal(m.calls, 1);
    assert_int_equal(m.failed, 0);
    /* records a little behind the head (another thread's clock ran ahead) still count */
    lk_breaker_record(b, S(10), 0, LK_F_NONE);
    assert_int_equal(lk_breaker_metrics_get(b, S(11), &m), LK_OK);
    assert_int_equal(m.calls, 2);
    lk_breaker_free(b);
  }
}

/* --- limiter.h ------------------------------------------------------------------------------ */

static void test_limiter_edges(void **state) {
  (void)state;
  const char *why = NULL;
  lk_limiter *l = (lk_limiter *)&why;
  assert_int_equal(lk_limiter_new(NULL, &l, &why), LK_EINVAL);
  assert_null(l);
  lk_limiter_config c;
  lk_limiter_config_init_default(&c);
  assert_int_equal(lk_limiter_new(&c, NULL, &why), LK_EINVAL);
  assert_int_equal(lk_limiter_config_validate(NULL, &why), LK_ECONFIG);
  static const lk_limiter_config bad[] = {
      {0, 1},     {-1, 1},         {NAN, 1}, {INFINITY, 1}, {-INFINITY, 1},
      {1e-10, 1}, {1.000001e9, 1}, {1, 0},   {1, -1},       {1, INT64_MIN}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    l = (lk_limiter *)&why;
    why = NULL;
    assert_int_equal(lk_limiter_new(&bad[i], &l, &why), LK_ECONFIG);
    assert_null(l);
    assert_non_null(why);
  }
  assert_int_equal(lk_limiter_set_config(NULL, &c, &why), LK_EINVAL);
  lk_limiter_free(NULL);
  assert_null(lk_limiter_backend_arg(NULL, NULL));

  /* the edges of rate and burst, at both ends of the time line */
  static const lk_limiter_config edges[] = {{LK_LIMITER_RATE_MIN, 1},
                                            {LK_LIMITER_RATE_MAX, 1},
                                            {LK_LIMITER_RATE_MAX, INT64_MAX},
                                            {LK_LIMITER_RATE_MIN, INT64_MAX},
                                            {1, INT64_MAX}};
  static const int64_t nows[] = {INT64_MIN, INT64_MIN + 1, -1, 0, 1, INT64_MAX - 1, INT64_MAX};
  for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++)
    for (size_t i = 0; i < sizeof nows / sizeof nows[0]; i++) {
      assert_int_equal(lk_limiter_new(&edges[e], &l, NULL), LK_OK);
      int64_t now = nows[i];
      int64_t avail = lk_limiter_available(l, now);
      assert_true(avail >= 0 && avail <= edges[e].burst);
      assert_true(lk_limiter_wait_time(l, now) >= 0);
      for (int k = 0; k < 3; k++) {
        int rc = lk_limiter_try_acquire(l, now);
        assert_true(rc == LK_OK || rc == LK_ERATE_LIMITED);
        int64_t w = lk_limiter_reserve(l, now, INT64_MAX);
        assert_true(w >= 0 || w == LK_ERATE_LIMITED);
        w = lk_limiter_reserve(l, now, INT64_MIN); /* < 0 is 0: never waits */
        assert_true(w == 0 || w == LK_ERATE_LIMITED);
        w = lk_limiter_reserve_until(l, now, (lk_deadline){INT64_MIN});
        assert_true(w == 0 || w == LK_ERATE_LIMITED);
        w = lk_limiter_reserve_until(l, now, lk_deadline_none());
        assert_true(w >= 0 || w == LK_ERATE_LIMITED);
        avail = lk_limiter_available(l, now);
        assert_true(avail >= 0 && avail <= edges[e].burst);
        assert_true(lk_limiter_wait_time(l, now) >= 0);
      }
      lk_limiter_free(l);
    }

  /* a bad set_config changes nothing; NULL c is a bad config */
  c = (lk_limiter_config){10, 5};
  assert_int_equal(lk_limiter_new(&c, &l, NULL), LK_OK);
  why = NULL;
  assert_int_equal(lk_limiter_set_config(l, NULL, &why), LK_ECONFIG);
  assert_non_null(why);
  lk_limiter_config bad_c = {NAN, 0};
  assert_int_equal(lk_limiter_set_config(l, &bad_c, &why), LK_ECONFIG);
  lk_limiter_config got;
  lk_limiter_get_config(l, &got);
  assert_true(got.rate == 10 && got.burst == 5);
  assert_int_equal(lk_limiter_available(l, 0), 5);

  /* a clock that steps back: never a negative wait, and the wait is bounded by the step (the
   * limiter refuses until the clock is back where it was, then refills as usual) */
  for (int i = 0; i < 5; i++)
    assert_int_equal(lk_limiter_try_acquire(l, S(1000)), LK_OK);
  assert_int_equal(lk_limiter_try_acquire(l, S(1000)), LK_ERATE_LIMITED);
  int64_t w = lk_limiter_wait_time(l, 0);
  assert_true(w > 0 && w <= S(1000) + MS(100));
  assert_int_equal(lk_limiter_reserve(l, 0, S(1)), LK_ERATE_LIMITED); /* never beyond max_wait */
  assert_int_equal(lk_limiter_available(l, 0), 0);
  assert_int_equal(lk_limiter_try_acquire(l, S(1000) + MS(100)), LK_OK);
  lk_limiter_free(l);
}

/* --- bulkhead.h ----------------------------------------------------------------------------- */

/* A clock that goes back one second every time it is read. */
typedef struct back_clock {
  lk_clock base;
  int64_t t;
} back_clock;
static int64_t back_now(const lk_clock *self) {
  back_clock *c = (back_clock *)(void *)(uintptr_t)self;
  int64_t t = c->t;
  c->t -= S(1);
  return t;
}

static void note_grant(void *ud) { (*(int *)ud)++; }

static void test_bulkhead_edges(void **state) {
  (void)state;
  const char *why = NULL;
  lk_bulkhead *b = (lk_bulkhead *)&why;
  assert_int_equal(lk_bulkhead_new(NULL, &b, &why), LK_EINVAL);
  assert_null(b);
  lk_bulkhead_config c;
  lk_bulkhead_config_init_default(&c);
  assert_int_equal(lk_bulkhead_new(&c, NULL, &why), LK_EINVAL);
  assert_int_equal(lk_bulkhead_config_validate(NULL, &why), LK_ECONFIG);
  static const lk_bulkhead_config bad[] = {{0, 0},         {-1, 0}, {LK_BULKHEAD_LIMIT_MAX + 1, 0},
                                           {INT64_MAX, 0}, {1, -1}, {1, LK_BULKHEAD_LIMIT_MAX + 1},
                                           {1, INT64_MIN}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    b = (lk_bulkhead *)&why;
    why = NULL;
    assert_int_equal(lk_bulkhead_new(&bad[i], &b, &why), LK_ECONFIG);
    assert_null(b);
    assert_non_null(why);
  }
  lk_bulkhead_free(NULL);

  /* one slot, no queue: nobody ever waits */
  c = (lk_bulkhead_config){1, 0};
  assert_int_equal(lk_bulkhead_new(&c, &b, NULL), LK_OK);
  lk_fake_clock fc;
  lk_fake_clock_init(&fc, 0);
  assert_int_equal(lk_bulkhead_acquire(b, &fc.base, (lk_deadline){INT64_MIN}), LK_OK); /* free */
  assert_int_equal(lk_bulkhead_try_acquire(b), LK_EBULKHEAD_FULL);
  assert_int_equal(lk_bulkhead_acquire(b, &fc.base, (lk_deadline){S(1)}), LK_EBULKHEAD_FULL);
  assert_int_equal(lk_bulkhead_acquire(b, &fc.base, (lk_deadline){0}), LK_EDEADLINE);
  assert_int_equal(lk_bulkhead_acquire(b, &fc.base, (lk_deadline){INT64_MIN}), LK_EDEADLINE);
  lk_bulkhead_waiter w;
  int granted = 0;
  assert_int_equal(lk_bulkhead_enqueue(b, &w, note_grant, &granted), LK_EBULKHEAD_FULL);
  assert_true(lk_bulkhead_waiter_cancel(b, &w)); /* nothing held */
  assert_true(lk_bulkhead_waiter_cancel(b, &w));
  assert_int_equal(lk_bulkhead_enqueue(NULL, &w, note_grant, NULL), LK_EINVAL);
  assert_int_equal(lk_bulkhead_enqueue(b, NULL, note_grant, NULL), LK_EINVAL);
  assert_int_equal(lk_bulkhead_enqueue(b, &w, NULL, NULL), LK_EINVAL);
  lk_bulkhead_release(b);
  lk_bulkhead_release(b); /* one release too many: the count stays at 0 */
  lk_bulkhead_release(b);
  assert_int_equal(lk_bulkhead_in_use(b), 0);
  assert_int_equal(lk_bulkhead_try_acquire(b), LK_OK);
  assert_int_equal(lk_bulkhead_try_acquire(b), LK_EBULKHEAD_FULL); /* still one slot */
  lk_bulkhead_stats s;
  lk_bulkhead_get_stats(b, &s);
  assert_int_equal(s.in_use, 1);
  assert_int_equal(s.queue_depth, 0);
  assert_int_equal(s.rejected_deadline, 2);
  assert_true(s.rejected_full >= 3);
  assert_int_equal(s.waited, 0);
  /* set_max at and beyond its range */
  assert_int_equal(lk_bulkhead_set_max(b, 0), LK_EINVAL);
  assert_int_equal(lk_bulkhead_set_max(b, -1), LK_EINVAL);
  assert_int_equal(lk_bulkhead_set_max(b, LK_BULKHEAD_LIMIT_MAX + 1), LK_EINVAL);
  assert_int_equal(lk_bulkhead_set_max(NULL, 1), LK_EINVAL);
  assert_int_equal(lk_bulkhead_max(b), 1);
  lk_bulkhead_release(b);
  lk_bulkhead_free(b);

  /* the largest limit, filled to the last slot: the packed fields never spill */
  c = (lk_bulkhead_config){LK_BULKHEAD_LIMIT_MAX, LK_BULKHEAD_LIMIT_MAX};
  assert_int_equal(lk_bulkhead_new(&c, &b, NULL), LK_OK);
  for (int64_t i = 0; i < LK_BULKHEAD_LIMIT_MAX; i++)
    if (lk_bulkhead_try_acquire(b) != LK_OK)
      fail_msg("slot %lld refused", (long long)i);
  assert_int_equal(lk_bulkhead_try_acquire(b), LK_EBULKHEAD_FULL);
  assert_int_equal(lk_bulkhead_in_use(b), LK_BULKHEAD_LIMIT_MAX);
  assert_int_equal(lk_bulkhead_max(b), LK_BULKHEAD_LIMIT_MAX);
  assert_int_equal(lk_bulkhead_queue_depth(b), 0);
  assert_int_equal(lk_bulkhead_enqueue(b, &w, note_grant, &granted), LK_EAGAIN);
  assert_int_equal(lk_bulkhead_queue_depth(b), 1);
  lk_bulkhead_release(b); /* handed to the queued waiter */
  assert_int_equal(granted, 1);
  assert_true(lk_bulkhead_waiter_granted(b, &w));
  assert_int_equal(lk_bulkhead_in_use(b), LK_BULKHEAD_LIMIT_MAX);
  assert_false(lk_bulkhead_waiter_cancel(b, &w)); /* the slot is held */
  assert_int_equal(lk_bulkhead_set_max(b, 1), LK_OK);
  lk_bulkhead_release(b);
  assert_int_equal(lk_bulkhead_try_acquire(b), LK_EBULKHEAD_FULL); /* lowered: still above */
  lk_bulkhead_free(b);

  /* a clock that goes back while a caller queues: the wait is counted as 0, never negative */
  c = (lk_bulkhead_config){1, 1};
  assert_int_equal(lk_bulkhead_new(&c, &b, NULL), LK_OK);
  assert_int_equal(lk_bulkhead_try_acquire(b), LK_OK);
  back_clock bc = {{back_now}, S(100)};
  assert_int_equal(lk_bulkhead_acquire(b, &bc.base, (lk_deadline){S(100) + MS(1)}), LK_EDEADLINE);
  lk_bulkhead_get_stats(b, &s);
  assert_int_equal(s.waited, 1);
  assert_int_equal(s.wait_last_ns, 0);
  assert_int_equal(s.wait_total_ns, 0);
  assert_int_equal(s.queue_depth, 0);
  lk_bulkhead_release(b);
  lk_bulkhead_free(b);
}

/* --- adaptive.h ----------------------------------------------------------------------------- */

static lk_adaptive *adaptive_of(const lk_adaptive_config *c) {
  lk_adaptive *a = NULL;
  const char *why = NULL;
  if (lk_adaptive_new(c, &a, &why) != LK_OK)
    fail_msg("adaptive: %s", why);
  return a;
}

static void test_adaptive_edges(void **state) {
  (void)state;
  const char *why = NULL;
  lk_adaptive *a = (lk_adaptive *)&why;
  assert_int_equal(lk_adaptive_new(NULL, &a, &why), LK_EINVAL);
  assert_null(a);
  lk_adaptive_config c;
  lk_adaptive_config_init_default(&c);
  assert_int_equal(lk_adaptive_new(&c, NULL, &why), LK_EINVAL);
  assert_int_equal(lk_adaptive_config_validate(NULL, &why), LK_ECONFIG);
  enum { KIND, MIN, MAX, INIT, BR, CD, LT, INC, SM, TOL, QS, WIN };
  static const struct {
    int f;
    double d;
    int64_t i;
  } bad[] = {{KIND, 0, 2},        {KIND, 0, -1},      {MIN, 0, 0},
             {MIN, 0, INT64_MIN}, {MAX, 0, 0},        {MAX, 0, LK_BULKHEAD_LIMIT_MAX + 1},
             {INIT, 0, 0},        {INIT, 0, 201},     {BR, 0.0999, 0},
             {BR, 1.0, 0},        {BR, NAN, 0},       {BR, -INFINITY, 0},
             {CD, 0, -1},         {LT, 0, -1},        {INC, 0, 0},
             {INC, NAN, 0},       {INC, INFINITY, 0}, {INC, -1, 0},
             {SM, 0, 0},          {SM, 1.0001, 0},    {SM, NAN, 0},
             {TOL, 0.999, 0},     {TOL, 100.001, 0},  {TOL, NAN, 0},
             {QS, -1, 0},         {QS, NAN, 0},       {QS, INFINITY, 0},
             {WIN, 0, -1}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    lk_adaptive_config_init_default(&c);
    switch (bad[i].f) {
    case KIND: c.kind = (lk_adaptive_kind)bad[i].i; break;
    case MIN: c.min_limit = bad[i].i; break;
    case MAX: c.max_limit = bad[i].i; break;
    case INIT: c.initial_limit = bad[i].i; break;
    case BR: c.backoff_ratio = bad[i].d; break;
    case CD: c.decrease_cooldown = bad[i].i; break;
    case LT: c.latency_target = bad[i].i; break;
    case INC: c.increase = bad[i].d; break;
    case SM: c.smoothing = bad[i].d; break;
    case TOL: c.tolerance = bad[i].d; break;
    case QS: c.queue_size = bad[i].d; break;
    default: c.min_rtt_window = bad[i].i; break;
    }
    a = (lk_adaptive *)&why;
    why = NULL;
    if (lk_adaptive_new(&c, &a, &why) != LK_ECONFIG)
      fail_msg("bad adaptive config #%zu accepted", i);
    assert_null(a);
    assert_non_null(why);
  }
  lk_adaptive_free(NULL);
  assert_int_equal(lk_adaptive_attach(NULL, NULL), LK_EINVAL);

  /* min == max: the limit never moves, whatever the samples; huge steps stay in range */
  for (int kind = 0; kind < 2; kind++) {
    lk_adaptive_config_init_default(&c);
    c.kind = (lk_adaptive_kind)kind;
    c.min_limit = c.max_limit = c.initial_limit = LK_BULKHEAD_LIMIT_MAX;
    c.increase = DBL_MAX;
    c.queue_size = DBL_MAX;
    c.decrease_cooldown = 0;
    c.latency_target = 1;
    a = adaptive_of(&c);
    static const int64_t vals[] = {INT64_MIN, -1, 0, 1, INT64_MAX};
    for (size_t i = 0; i < 5; i++)
      for (size_t j = 0; j < 5; j++)
        for (int o = -1; o <= 3; o++) {
          int64_t l = lk_adaptive_record_inflight(a, vals[i], vals[j], (lk_adaptive_outcome)o,
                                                  vals[(i + j) % 5]);
          assert_int_equal(l, LK_BULKHEAD_LIMIT_MAX);
        }
    lk_adaptive_free(a);
  }
  for (int kind = 0; kind < 2; kind++) {
    lk_adaptive_config_init_default(&c);
    c.kind = (lk_adaptive_kind)kind;
    c.max_limit = LK_BULKHEAD_LIMIT_MAX;
    c.increase = DBL_MAX;
    c.queue_size = DBL_MAX;
    c.min_rtt_window = 1;
    a = adaptive_of(&c);
    static const int64_t vals[] = {INT64_MIN, -1, 0, 1, INT64_MAX};
    for (size_t i = 0; i < 5; i++)
      for (size_t j = 0; j < 5; j++)
        for (int o = -1; o <= 3; o++) {
          int64_t l = lk_adaptive_record(a, vals[i], vals[j], (lk_adaptive_outcome)o);
          assert_true(l >= c.min_limit && l <= c.max_limit);
          assert_int_equal(l, lk_adaptive_limit(a));
          assert_true(lk_adaptive_min_rtt(a) >= 0);
        }
    lk_adaptive_free(a);
  }
  /* outcomes out of range leave everything as is; every kind maps to one of the three */
  lk_adaptive_config_init_default(&c);
  a = adaptive_of(&c);
  assert_int_equal(lk_adaptive_record(a, 0, MS(1), (lk_adaptive_outcome)7), 20);
  assert_int_equal(lk_adaptive_record(a, 0, MS(1), (lk_adaptive_outcome)-1), 20);
  lk_adaptive_free(a);
  for (int k = -1; k <= LK_F__COUNT; k++) {
    lk_adaptive_outcome o = lk_adaptive_outcome_of((lk_failure)k);
    assert_true(o == LK_ADAPTIVE_SUCCESS || o == LK_ADAPTIVE_DROP || o == LK_ADAPTIVE_IGNORE);
    if (k < 0 || k >= LK_F__COUNT)
      assert_int_equal(o, LK_ADAPTIVE_IGNORE);
  }
  assert_int_equal(lk_adaptive_outcome_of(LK_F_DNS_TIMEOUT), LK_ADAPTIVE_IGNORE);
  assert_int_equal(lk_adaptive_outcome_of(LK_F_TLS_TIMEOUT), LK_ADAPTIVE_DROP);
}

/* The decrease cooldown and the min-RTT window are measured from instants: a clock that steps
 * back further than either must not freeze them for as long as it went back. */
static void test_adaptive_clock_steps_back(void **state) {
  (void)state;
  lk_adaptive_config c;
  lk_adaptive_config_init_default(&c);
  c.initial_limit = 100;
  c.backoff_ratio = 0.5;
  c.decrease_cooldown = S(1);
  lk_adaptive *a = adaptive_of(&c);
  lk_fake_clock fc;
  lk_fake_clock_init(&fc, S(1000));
  assert_int_equal(lk_adaptive_record(a, fc.base.now(&fc.base), MS(1), LK_ADAPTIVE_DROP), 50);
  /* a sample a little behind (another thread's) is within the cooldown: one signal */
  assert_int_equal(lk_adaptive_record(a, S(1000) - MS(1), MS(1), LK_ADAPTIVE_DROP), 50);
  assert_int_equal(lk_adaptive_record(a, S(1000) + MS(500), MS(1), LK_ADAPTIVE_DROP), 50);
  lk_fake_clock_set(&fc, 0); /* back 1000 s */
  int64_t l = 0;
  for (int64_t t = 0; t <= S(2); t += MS(500))
    l = lk_adaptive_record(a, t, MS(1), LK_ADAPTIVE_DROP);
  assert_true(l < 50);
  lk_adaptive_free(a);

  lk_adaptive_config_init_default(&c);
  c.kind = LK_ADAPTIVE_GRADIENT;
  c.min_rtt_window = S(1);
  a = adaptive_of(&c);
  lk_adaptive_record(a, S(1000), MS(1), LK_ADAPTIVE_SUCCESS);
  assert_int_equal(lk_adaptive_min_rtt(a), MS(1));
  for (int64_t t = 0; t <= S(3); t += MS(500))
    lk_adaptive_record(a, t, MS(10), LK_ADAPTIVE_SUCCESS);
  assert_int_equal(lk_adaptive_min_rtt(a), MS(10)); /* the 1 ms of the old time line is gone */
  lk_adaptive_free(a);
}

/* --- hedge.h -------------------------------------------------------------------------------- */

static int64_t pct_value;
static int64_t fixed_pct(void *ctx, double q) {
  (void)ctx, (void)q;
  return pct_value;
}
static int spend_rc;
static int spend_calls;
static int fixed_spend(void *ctx, int64_t now) {
  (void)ctx, (void)now;
  spend_calls++;
  return spend_rc;
}

static void test_hedge_edges(void **state) {
  (void)state;
  const char *why = NULL;
  assert_int_equal(lk_hedge_policy_validate(NULL, &why), LK_ECONFIG);
  assert_non_null(why);
  lk_hedge_policy p;
  enum { MAXH, DELAY, Q, QFN, MIND, MAXD };
  static const struct {
    int f;
    double d;
    int64_t i;
  } bad[] = {{MAXH, 0, -1},         {MAXH, 0, LK_HEDGE_MAX_HEDGES + 1},
             {MAXH, 0, INT_MIN},    {DELAY, 0, -1},
             {DELAY, 0, INT64_MIN}, {Q, NAN, 0},
             {Q, -0.1, 0},          {Q, 100.1, 0},
             {Q, INFINITY, 0},      {QFN, 50, 0},
             {MIND, 0, -1},         {MAXD, 0, -1}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    lk_hedge_policy_init_default(&p);
    switch (bad[i].f) {
    case MAXH: p.max_hedges = (int)bad[i].i; break;
    case DELAY: p.delay = bad[i].i; break;
    case Q:
      p.quantile = bad[i].d;
      p.percentile = fixed_pct;
      break;
    case QFN: p.quantile = bad[i].d; break;
    case MIND: p.min_delay = bad[i].i; break;
    default:
      p.min_delay = 5;
      p.max_delay = 4;
      break;
    }
    why = NULL;
    if (lk_hedge_policy_validate(&p, &why) != LK_ECONFIG)
      fail_msg("bad hedge policy #%zu accepted", i);
    assert_non_null(why);
  }

  /* a zero delay: due at start; INT64_MAX: never due; start and now at the extremes */
  lk_hedge_policy_init_default(&p);
  p.max_hedges = LK_HEDGE_MAX_HEDGES;
  p.delay = 0;
  assert_int_equal(lk_hedge_policy_validate(&p, NULL), LK_OK);
  lk_hedge_decision d = lk_hedge_decide(&p, INT64_MIN, INT64_MIN, 0);
  assert_true(d.send);
  assert_int_equal(d.next_at, INT64_MIN);
  d = lk_hedge_decide(&p, 0, 0, LK_HEDGE_MAX_HEDGES - 1);
  assert_true(d.send);
  assert_int_equal(d.next_at, INT64_MAX); /* that was the last */
  d = lk_hedge_decide(&p, 0, 0, LK_HEDGE_MAX_HEDGES);
  assert_false(d.send);
  assert_int_equal(d.reason, LK_EATTEMPTS);
  d = lk_hedge_decide(&p, 0, 0, INT_MAX);
  assert_false(d.send);
  assert_int_equal(d.next_at, INT64_MAX);
  d = lk_hedge_decide(&p, 0, 0, INT_MIN); /* negative: as none sent */
  assert_true(d.send);
  p.delay = INT64_MAX;
  d = lk_hedge_decide(&p, 0, INT64_MAX, 0);
  assert_false(d.send);
  assert_int_equal(d.next_at, INT64_MAX);
  p.delay = S(1);
  d = lk_hedge_decide(&p, INT64_MAX - 1, INT64_MAX, 0);
  assert_false(d.send); /* due beyond the time line */
  assert_int_equal(d.next_at, INT64_MAX);
  /* a clock behind the start (stepped back): nothing due, next_at never before start + delay */
  d = lk_hedge_decide(&p, S(1000), 0, 0);
  assert_false(d.send);
  assert_int_equal(d.next_at, S(1001));
  assert_int_equal(d.reason, LK_OK);

  /* the percentile hook at its extremes is clamped to [min_delay, max_delay] */
  p.quantile = 99;
  p.percentile = fixed_pct;
  p.min_delay = MS(10);
  p.max_delay = S(2);
  p.delay = MS(50);
  static const struct {
    int64_t pct, delay;
  } pc[] = {{INT64_MIN, MS(50)}, {-1, MS(50)},     {0, MS(50)},
            {1, MS(10)},         {MS(20), MS(20)}, {INT64_MAX, S(2)}};
  for (size_t i = 0; i < sizeof pc / sizeof pc[0]; i++) {
    pct_value = pc[i].pct;
    assert_int_equal(lk_hedge_delay(&p), pc[i].delay);
  }
  p.delay = S(10); /* the fallback is clamped too */
  pct_value = 0;
  assert_int_equal(lk_hedge_delay(&p), S(2));

  /* the spend hook: called once and only when due; a positive refusal is LK_EBUDGET */
  p.quantile = 0;
  p.delay = MS(100);
  p.spend = fixed_spend;
  spend_calls = 0;
  spend_rc = LK_OK;
  d = lk_hedge_decide(&p, 0, MS(99), 0);
  assert_false(d.send);
  assert_int_equal(spend_calls, 0);
  d = lk_hedge_decide(&p, 0, MS(100), 0);
  assert_true(d.send);
  assert_int_equal(spend_calls, 1);
  spend_rc = 1;
  d = lk_hedge_decide(&p, 0, MS(100), 0);
  assert_false(d.send);
  assert_int_equal(d.reason, LK_EBUDGET);
  assert_int_equal(d.next_at, INT64_MAX);
  spend_rc = INT_MIN;
  d = lk_hedge_decide(&p, 0, MS(100), 0);
  assert_int_equal(d.reason, INT_MIN);
  assert_int_equal(spend_calls, 3);
}

/* --- hist.h --------------------------------------------------------------------------------- */

static void test_hist_construction_edges(void **state) {
  (void)state;
  static const int64_t bad[][2] = {
      {-1, 10}, {5, 5}, {10, 5}, {INT64_MIN, INT64_MAX}, {0, 0}, {0, -1}, {INT64_MAX, INT64_MAX}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_null(lk_hist_new(bad[i][0], bad[i][1]));
    assert_int_equal(lk_hist_memsize(bad[i][0], bad[i][1]), 0);
  }
  static _Alignas(LK_HIST_ALIGN) unsigned char mem[1 << 16];
  lk_hist *h = (lk_hist *)mem;
  size_t need = lk_hist_memsize(0, 1000);
  assert_true(need > 0 && need <= sizeof mem);
  assert_int_equal(lk_hist_init(NULL, sizeof mem, 0, 1000, &h), LK_EINVAL);
  assert_int_equal(lk_hist_init(mem, sizeof mem, 0, 1000, NULL), LK_EINVAL);
  assert_int_equal(lk_hist_init(mem + 8, sizeof mem - 8, 0, 1000, &h), LK_EINVAL);
  assert_int_equal(lk_hist_init(mem, sizeof mem, -1, 1000, &h), LK_EINVAL);
  assert_int_equal(lk_hist_init(mem, need - 1, 0, 1000, &h), LK_ERANGE);
  assert_int_equal(lk_hist_init(mem, 0, 0, 1000, &h), LK_ERANGE);
  assert_int_equal(lk_hist_init(mem, need, 0, 1000, &h), LK_OK);
  lk_hist_record(h, 5);
  lk_hist_free(h); /* caller's memory: nothing freed */
  assert_int_equal(lk_hist_count(h), 1);

  /* the widest ranges */
  static const int64_t ranges[][2] = {{0, INT64_MAX},
                                      {1, INT64_MAX},
                                      {INT64_MAX - 1, INT64_MAX},
                                      {INT64_C(1) << 62, INT64_MAX},
                                      {0, 1}};
  for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
    h = lk_hist_new(ranges[r][0], ranges[r][1]);
    assert_non_null(h);
    assert_int_equal(lk_hist_lowest(h), ranges[r][0]);
    assert_int_equal(lk_hist_highest(h), ranges[r][1]);
    lk_hist_record(h, INT64_MIN);
    lk_hist_record(h, INT64_MAX);
    lk_hist_record(h, -1);
    assert_int_equal(lk_hist_count(h), 3);
    assert_int_equal(lk_hist_min(h), ranges[r][0]);
    assert_int_equal(lk_hist_max(h), ranges[r][1]);
    assert_int_equal(lk_hist_underflows(h), ranges[r][0] > -1 ? 2 : 0);
    assert_int_equal(lk_hist_overflows(h), ranges[r][1] < INT64_MAX ? 1 : 0);
    assert_int_equal(lk_hist_percentile(h, 0), ranges[r][0]);
    assert_int_equal(lk_hist_percentile(h, 100), ranges[r][1]);
    assert_int_equal(lk_hist_percentile(h, INFINITY), ranges[r][1]);
    assert_int_equal(lk_hist_percentile(h, -INFINITY), ranges[r][0]);
    assert_int_equal(lk_hist_percentile(h, NAN), ranges[r][0]); /* NaN counts as 0 */
    int64_t p = lk_hist_percentile(h, 1e-300);
    assert_true(p >= ranges[r][0] && p <= ranges[r][1]);
    assert_int_equal(
        lk_hist_highest_equivalent(h, INT64_MAX) >= lk_hist_lowest_equivalent(h, INT64_MAX), 1);
    assert_true(lk_hist_highest_equivalent(h, INT64_MAX) <= INT64_MAX);
    lk_hist_free(h);
  }
}

static void test_hist_values_and_boundaries(void **state) {
  (void)state;
  lk_hist *h = lk_hist_new(0, INT64_MAX);
  assert_non_null(h);
  /* sum modulo 2^64, mean from it */
  lk_hist_record(h, INT64_MAX);
  lk_hist_record(h, INT64_MAX);
  assert_int_equal(lk_hist_sum(h), UINT64_MAX - 1);
  lk_hist_reset(h);
  assert_int_equal(lk_hist_count(h), 0);
  assert_int_equal(lk_hist_min(h), 0);
  assert_int_equal(lk_hist_max(h), 0);
  assert_int_equal(lk_hist_percentile(h, 50), 0);
  assert_true(lk_hist_mean(h) == 0.0);

  /* around every power of two: v lies in [lowest_eq, highest_eq], the bucket is never wider than
   * 1/128 of its lowest value (width 1 below 256), neighbouring buckets touch, and a value is
   * reported within 1 % (the percentile of a one-value histogram is the value itself, since it is
   * clamped to the exact max) */
  for (int bit = 0; bit < 63; bit++)
    for (int64_t k = -2; k <= 2; k++) {
      int64_t v = (INT64_C(1) << bit) + k;
      if (v < 0)
        continue;
      int64_t lo = lk_hist_lowest_equivalent(h, v), hi = lk_hist_highest_equivalent(h, v);
      assert_true(lo <= v && v <= hi);
      int64_t width = hi - lo + 1;
      assert_true(lo < 256 ? width == 1 : width <= lo / 128);
      if (hi < INT64_MAX)
        assert_int_equal(lk_hist_lowest_equivalent(h, hi + 1), hi + 1);
      if (lo > 0)
        assert_int_equal(lk_hist_highest_equivalent(h, lo - 1), lo - 1);
      assert_true((double)(hi - v) <= 0.01 * (double)v || hi == v);
      lk_hist_reset(h);
      lk_hist_record(h, v);
      assert_int_equal(lk_hist_percentile(h, 50), v);
    }
  assert_int_equal(lk_hist_highest_equivalent(h, INT64_MAX), INT64_MAX);
  /* clamped out-of-range queries */
  assert_int_equal(lk_hist_lowest_equivalent(h, INT64_MIN), 0);
  lk_hist_free(h);

  /* nearest rank at the extremes: at most (100 - q) % of the values above p(q) */
  h = lk_hist_new(1, S(3600));
  static const int64_t vals[] = {1, 2, 255, 256, 257, MS(1), MS(1) + 1, S(1), S(3600), INT64_MAX};
  for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
    lk_hist_record_n(h, vals[i], (uint64_t)i + 1);
  lk_hist_record_n(h, 5, 0); /* n == 0: nothing */
  uint64_t total = lk_hist_count(h);
  assert_int_equal(total, 55);
  assert_int_equal(lk_hist_overflows(h), 10);
  static const double qs[] = {0, 1e-9, 1, 25, 50, 90, 99, 99.9, 99.99, 100};
  for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++) {
    int64_t p = lk_hist_percentile(h, qs[i]);
    uint64_t above = 0;
    for (size_t j = 0; j < sizeof vals / sizeof vals[0]; j++) {
      int64_t v = vals[j] > S(3600) ? S(3600) : vals[j];
      if (v > p)
        above += j + 1;
    }
    assert_true((double)above <= (100.0 - qs[i]) / 100.0 * (double)total + 1e-9);
  }

  /* cumulative counts at and across boundaries */
  uint64_t counts[4], all = 0;
  const int64_t bounds[] = {INT64_MIN, 255, 255, INT64_MAX};
  assert_int_equal(lk_hist_cumulative(h, bounds, 4, counts, &all), LK_OK);
  assert_int_equal(all, total);
  assert_int_equal(counts[0], 0);
  assert_int_equal(counts[1], 1 + 2 + 3);
  assert_int_equal(counts[2], counts[1]);
  assert_int_equal(counts[3], total);
  const int64_t desc[] = {5, 4};
  counts[0] = 99;
  assert_int_equal(lk_hist_cumulative(h, desc, 2, counts, NULL), LK_EINVAL);
  assert_int_equal(lk_hist_cumulative(NULL, bounds, 4, counts, NULL), LK_EINVAL);
  assert_int_equal(lk_hist_cumulative(h, NULL, 4, counts, NULL), LK_EINVAL);
  assert_int_equal(lk_hist_cumulative(h, bounds, 4, NULL, NULL), LK_EINVAL);
  all = 0;
  assert_int_equal(lk_hist_cumulative(h, NULL, 0, NULL, &all), LK_OK);
  assert_int_equal(all, total);
  lk_hist_free(h);

  /* NULL: no-ops and zeros */
  lk_hist_record(NULL, 1);
  lk_hist_record_n(NULL, 1, 5);
  lk_hist_reset(NULL);
  lk_hist_free(NULL);
  assert_int_equal(lk_hist_count(NULL), 0);
  assert_int_equal(lk_hist_sum(NULL), 0);
  assert_int_equal(lk_hist_min(NULL), 0);
  assert_int_equal(lk_hist_max(NULL), 0);
  assert_true(lk_hist_mean(NULL) == 0.0);
  assert_int_equal(lk_hist_percentile(NULL, 50), 0);
  assert_int_equal(lk_hist_underflows(NULL), 0);
  assert_int_equal(lk_hist_overflows(NULL), 0);
  assert_int_equal(lk_hist_lowest(NULL), 0);
  assert_int_equal(lk_hist_highest(NULL), 0);
  assert_int_equal(lk_hist_lowest_equivalent(NULL, 5), 0);
  assert_int_equal(lk_hist_highest_equivalent(NULL, 5), 0);
}

static void test_hist_merge_edges(void **state) {
  (void)state;
  lk_hist *a = lk_hist_new(0, 1000), *b = lk_hist_new(0, 1000);
  assert_int_equal(lk_hist_merge(NULL, b), LK_EINVAL);
  assert_int_equal(lk_hist_merge(a, NULL), LK_EINVAL);
  assert_int_equal(lk_hist_merge(a, a), LK_EINVAL);
  assert_int_equal(lk_hist_merge(a, b), LK_OK); /* empty into empty */
  assert_int_equal(lk_hist_count(a), 0);
  assert_int_equal(lk_hist_min(a), 0);
  lk_hist_record(b, -5);   /* underflow in b */
  lk_hist_record(b, 5000); /* overflow in b */
  assert_int_equal(lk_hist_merge(a, b), LK_OK);
  assert_int_equal(lk_hist_underflows(a), 1);
  assert_int_equal(lk_hist_overflows(a), 1);
  assert_int_equal(lk_hist_count(a), 2);
  lk_hist_free(a);
  lk_hist_free(b);

  /* different ranges: a value inside both ranges is no underflow or overflow in dst, even
   * when its source bucket starts below dst's lowest (lowest not on a bucket boundary) */
  a = lk_hist_new(1001, INT64_C(1000000000));
  b = lk_hist_new(1001, 1000000);
  assert_true(lk_hist_lowest_equivalent(b, 1001) < 1001);
  lk_hist_record(b, 1001);
  lk_hist_record(b, 1000000);
  assert_int_equal(lk_hist_merge(a, b), LK_OK);
  assert_int_equal(lk_hist_underflows(a), 0);
  assert_int_equal(lk_hist_overflows(a), 0);
  assert_int_equal(lk_hist_count(a), 2);
  assert_int_equal(lk_hist_min(a), 1001);
  assert_int_equal(lk_hist_max(a), 1000000);
  int64_t p = lk_hist_percentile(a, 0.1);
  assert_true(p >= 1001 && p <= 1001 + 1001 / 100);
  /* and one that is outside dst's range is counted there */
  lk_hist *c = lk_hist_new(0, 10);
  assert_int_equal(lk_hist_merge(c, b), LK_OK);
  assert_int_equal(lk_hist_overflows(c), 2);
  assert_int_equal(lk_hist_max(c), 10);
  lk_hist_free(a);
  lk_hist_free(b);
  lk_hist_free(c);
}

/* --- metrics.h ------------------------------------------------------------------------------ */

static char *render(lk_metrics *m) {
  char *out = NULL;
  size_t len = 0;
  assert_int_equal(lk_metrics_render(m, &out, &len), LK_OK);
  assert_non_null(out);
  assert_int_equal(len, strlen(out));
  return out;
}

static void test_metrics_names_and_types(void **state) {
  (void)state;
  static const char *const bad_names[] = {"", "1a", "a-b", "a b", "a.b", "\xc3\xa9", "a\n", "a{"};
  for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++)
    assert_false(lk_metrics_valid_name(bad_names[i]));
  assert_false(lk_metrics_valid_name(NULL));
  assert_true(lk_metrics_valid_name(":a"));
  assert_true(lk_metrics_valid_name("a:b_c9"));
  assert_true(lk_metrics_valid_name("_"));
  static const char *const bad_labels[] = {"", "__x", "__", "1a", "a:b", "a-b", "\xc3\xa9"};
  for (size_t i = 0; i < sizeof bad_labels / sizeof bad_labels[0]; i++)
    assert_false(lk_metrics_valid_label_name(bad_labels[i]));
  assert_false(lk_metrics_valid_label_name(NULL));
  assert_true(lk_metrics_valid_label_name("_x"));
  assert_true(lk_metrics_valid_label_name("le"));

  lk_metrics *m = lk_metrics_new();
  assert_non_null(m);
  const char *const L[] = {"k", "v", NULL};
  /* bad names, suffixes, help */
  for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
    assert_null(lk_metrics_gauge(m, bad_names[i], "h", NULL));
    assert_null(lk_metrics_counter(m, bad_names[i], "h", NULL));
  }
  assert_null(lk_metrics_gauge(NULL, "g", "h", NULL));
  assert_null(lk_metrics_gauge(m, NULL, "h", NULL));
  assert_null(lk_metrics_counter(m, "c", "h", NULL));         /* no _total */
  assert_null(lk_metrics_gauge(m, "g_total", "h", NULL));     /* _total on a gauge */
  assert_null(lk_metrics_histogram(m, "h_total", "h", NULL)); /* and on a histogram */
  assert_null(lk_metrics_gauge(m, "g", NULL, NULL));
  assert_null(lk_metrics_gauge(m, "g", "", NULL));
  static const char *const bad_utf8[] = {"\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                                         "\xe2\x82", "\xff",         "a\x80"};
  for (size_t i = 0; i < sizeof bad_utf8 / sizeof bad_utf8[0]; i++) {
    assert_null(lk_metrics_gauge(m, "g", bad_utf8[i], NULL));
    const char *const lv[] = {"k", bad_utf8[i], NULL};
    assert_null(lk_metrics_gauge(m, "g", "h", lv));
  }
  /* bad label arrays */
  const char *const odd[] = {"k", NULL};
  const char *const dup[] = {"k", "1", "k", "2", NULL};
  const char *const reserved[] = {"__k", "1", NULL};
  const char *const le[] = {"le", "1", NULL};
  const char *const quantile[] = {"quantile", "1", NULL};
  assert_null(lk_metrics_gauge(m, "g", "h", odd));
  assert_null(lk_metrics_gauge(m, "g", "h", dup));
  assert_null(lk_metrics_gauge(m, "g", "h", reserved));
  assert_null(lk_metrics_histogram(m, "hist_seconds", "h", le));
  lk_hist_opts so;
  lk_hist_opts_init_default(&so);
  so.type = LK_METRIC_SUMMARY;
  assert_null(lk_metrics_histogram_ex(m, "sum_seconds", "h", quantile, &so));
  assert_non_null(lk_metrics_histogram_ex(m, "sum_seconds", "h", le, &so));
  assert_non_null(lk_metrics_histogram(m, "hist_seconds", "h", quantile));
  assert_non_null(lk_metrics_gauge(m, "gauge_le", "h", le));

  /* same name + labels: the same object; another type, scale or label set: NULL */
  lk_gauge *g = lk_metrics_gauge(m, "g", "first help", L);
  assert_non_null(g);
  assert_ptr_equal(lk_metrics_gauge(m, "g", "other help", L), g);
  assert_null(lk_metrics_gauge_scaled(m, "g", "h", L, 1e9));
  assert_null(lk_metrics_histogram(m, "g", "h", L));
  assert_null(lk_metrics_gauge(m, "g", "h", NULL));
  const char *const L2[] = {"j", "v", NULL};
  assert_null(lk_metrics_gauge(m, "g", "h", L2));
  lk_counter *c = lk_metrics_counter(m, "c_total", "h", NULL);
  assert_non_null(c);
  assert_null(lk_metrics_counter_scaled(m, "c_total", "h", NULL, 2));
  assert_ptr_equal(lk_metrics_counter_scaled(m, "c_total", "h", NULL, 1), c);
  static const double bad_scale[] = {0, -1, NAN, INFINITY, -INFINITY};
  for (size_t i = 0; i < sizeof bad_scale / sizeof bad_scale[0]; i++) {
    assert_null(lk_metrics_counter_scaled(m, "cs_total", "h", NULL, bad_scale[i]));
    assert_null(lk_metrics_gauge_scaled(m, "gs", "h", NULL, bad_scale[i]));
  }
  /* a histogram's generated names are taken, both ways */
  assert_null(lk_metrics_gauge(m, "hist_seconds_sum", "h", NULL));
  assert_null(lk_metrics_gauge(m, "hist_seconds_count", "h", NULL));
  assert_null(lk_metrics_gauge(m, "hist_seconds_bucket", "h", NULL));
  assert_non_null(lk_metrics_gauge(m, "x_count", "h", NULL));
  assert_null(lk_metrics_histogram(m, "x", "h", NULL));
  char *out = render(m);
  assert_true(has(out, "# HELP g first help\n"));
  assert_false(has(out, "other help"));
  free(out);

  /* bad histogram options */
  lk_hist_opts o;
  enum {
    SCALE,
    RANGE,
    BOUNDS_EQ,
    BOUNDS_DESC,
    BOUND_NAN,
    BOUND_INF,
    BOUND_HUGE,
    NB,
    NQ,
    Q_BAD,
    Q_NAN,
    Q_DESC,
    TYPE
  };
  for (int k = SCALE; k <= TYPE; k++) {
    lk_hist_opts_init_default(&o);
    switch (k) {
    case SCALE: o.scale = NAN; break;
    case RANGE: o.lowest = -1; break;
    case BOUNDS_EQ: o.bounds[1] = o.bounds[0]; break;
    case BOUNDS_DESC: o.bounds[1] = o.bounds[0] / 2; break;
    case BOUND_NAN: o.bounds[3] = NAN; break;
    case BOUND_INF: o.bounds[o.n_bounds - 1] = INFINITY; break;
    case BOUND_HUGE: o.bounds[o.n_bounds - 1] = 1e10; break; /* 1e19 ns */
    case NB: o.n_bounds = LK_METRICS_MAX_BOUNDS + 1; break;
    case NQ:
      o.type = LK_METRIC_SUMMARY;
      o.n_quantiles = LK_METRICS_MAX_QUANTILES + 1;
      break;
    case Q_BAD:
      o.type = LK_METRIC_SUMMARY;
      o.quantiles[0] = 1.01;
      break;
    case Q_NAN:
      o.type = LK_METRIC_SUMMARY;
      o.quantiles[1] = NAN;
      break;
    case Q_DESC:
      o.type = LK_METRIC_SUMMARY;
      o.quantiles[1] = 0.1;
      break;
    default: o.type = (lk_metric_hist_type)7; break;
    }
    if (lk_metrics_histogram_ex(m, "opt_seconds", "h", NULL, &o) != NULL)
      fail_msg("bad histogram option %d accepted", k);
  }
  assert_null(lk_metrics_histogram_ex(m, "opt_seconds", "h", NULL, NULL));
  lk_hist_opts_init_default(&o);
  lk_hist *h1 = lk_metrics_histogram_ex(m, "opt_seconds", "h", NULL, &o);
  assert_non_null(h1);
  o.bounds[0] /= 2;
  assert_null(lk_metrics_histogram_ex(m, "opt_seconds", "h", NULL, &o)); /* other options */
  lk_metrics_free(m);
  lk_metrics_free(NULL);
}

static void test_metrics_values_and_escaping(void **state) {
  (void)state;
  lk_metrics *m = lk_metrics_new();
  /* label values and help that need escaping; a UTF-8 value passes as it is */
  const char *const L[] = {"path", "a\\b\"c\nd", "who", "\xc3\xa9t\xc3\xa9", NULL};
  lk_counter *c = lk_metrics_counter(m, "esc_total", "back\\slash\nnew \"quoted\"", L);
  assert_non_null(c);
  lk_counter_add(c, UINT64_MAX - 1);
  lk_counter_add(c, 1);
  assert_int_equal(lk_counter_value(c), UINT64_MAX);
  char *out = render(m);
  assert_true(has(out, "# HELP esc_total back\\\\slash\\nnew \"quoted\"\n"));
  assert_true(has(out, "# TYPE esc_total counter\n"));
  assert_true(has(out, "esc_total{path=\"a\\\\b\\\"c\\nd\",who=\"\xc3\xa9t\xc3\xa9\"} "
                       "18446744073709551615\n"));
  free(out);
  lk_counter_add(c, 1); /* wraps at 2^64, as documented */
  assert_int_equal(lk_counter_value(c), 0);

  /* gauges saturate at both ends */
  lk_gauge *g = lk_metrics_gauge(m, "sat", "h", NULL);
  lk_gauge_add(g, INT64_MAX);
  lk_gauge_add(g, INT64_MAX);
  assert_int_equal(lk_gauge_value(g), INT64_MAX);
  lk_gauge_set(g, 0);
  lk_gauge_add(g, INT64_MIN);
  assert_int_equal(lk_gauge_value(g), INT64_MIN);
  lk_gauge_add(g, -1);
  assert_int_equal(lk_gauge_value(g), INT64_MIN);
  lk_gauge_add(g, INT64_MIN);
  assert_int_equal(lk_gauge_value(g), INT64_MIN);
  lk_gauge_add(g, INT64_MAX);
  assert_int_equal(lk_gauge_value(g), -1);
  lk_gauge_set(g, INT64_MIN);
  lk_gauge *gs = lk_metrics_gauge_scaled(m, "sat_scaled", "h", NULL, 1e9);
  lk_gauge_set(gs, INT64_MAX);
  out = render(m);
  assert_true(has(out, "\nsat -9223372036854775808\n"));
  assert_true(has(out, "\nsat_scaled 9223372036.854"));
  free(out);

  /* many labels, in order */
  enum { NL = 40 };
  const char *many[2 * NL + 1];
  char names[NL][8], values[NL][8];
  for (int i = 0; i < NL; i++) {
    snprintf(names[i], sizeof names[i], "l%d", i);
    snprintf(values[i], sizeof values[i], "v%d", i);
    many[2 * i] = names[i];
    many[2 * i + 1] = values[i];
  }
  many[2 * NL] = NULL;
  lk_gauge *gm = lk_metrics_gauge(m, "many", "h", many);
  assert_non_null(gm);
  assert_ptr_equal(lk_metrics_gauge(m, "many", "h", many), gm);
  out = render(m);
  assert_true(has(out, "many{l0=\"v0\",l1=\"v1\","));
  assert_true(has(out, ",l39=\"v39\"} 0\n"));
  free(out);

  /* NULL objects are no-ops */
  lk_counter_add(NULL, 1);
  assert_int_equal(lk_counter_value(NULL), 0);
  lk_gauge_set(NULL, 1);
  lk_gauge_add(NULL, 1);
  assert_int_equal(lk_gauge_value(NULL), 0);
  char *o2 = (char *)"x";
  assert_int_equal(lk_metrics_render(NULL, &o2, NULL), LK_EINVAL);
  assert_int_equal(lk_metrics_render(m, NULL, NULL), LK_EINVAL);
  assert_int_equal(lk_metrics_hide(NULL, g), LK_EINVAL);
  assert_int_equal(lk_metrics_hide(m, NULL), LK_EINVAL);
  assert_int_equal(lk_metrics_hide(m, &o2), LK_ENOTFOUND);
  lk_metrics_free(m);

  /* every series hidden: an empty exposition, no HELP or TYPE alone */
  m = lk_metrics_new();
  out = render(m);
  assert_string_equal(out, "");
  free(out);
  g = lk_metrics_gauge(m, "only", "h", NULL);
  assert_int_equal(lk_metrics_hide(m, g), LK_OK);
  out = render(m);
  assert_string_equal(out, "");
  free(out);
  lk_metrics_free(m);
}

static void test_metrics_histogram_boundaries(void **state) {
  (void)state;
  lk_metrics *m = lk_metrics_new();
  lk_hist_opts o;
  lk_hist_opts_init_default(&o);
  o.n_bounds = 2;
  o.bounds[0] = 0;
  o.bounds[1] = 0.001; /* 1 ms */
  lk_hist *h = lk_metrics_histogram_ex(m, "b_seconds", "h", NULL, &o);
  assert_non_null(h);
  lk_hist_record(h, 0);
  lk_hist_record(h, MS(1));              /* exactly on the bound */
  lk_hist_record(h, MS(1) + MS(1) / 50); /* 2 % above: beyond the bucket's 1/128 */
  lk_hist_record(h, INT64_MAX);          /* clamped to 1 h, counted in +Inf */
  lk_hist_record(h, INT64_MIN);          /* clamped to 0 */
  char *out = render(m);
  assert_true(has(out, "# TYPE b_seconds histogram\n"));
  assert_true(has(out, "b_seconds_bucket{le=\"0\"} 2\n"));
  assert_true(has(out, "b_seconds_bucket{le=\"0.001\"} 3\n"));
  assert_true(has(out, "b_seconds_bucket{le=\"+Inf\"} 5\n"));
  assert_true(has(out, "b_seconds_count 5\n"));
  assert_true(has(out, "b_seconds_sum 3600.00202"));
  free(out);

  /* no bounds: just +Inf; an empty summary reports NaN quantiles */
  lk_hist_opts_init_default(&o);
  o.n_bounds = 0;
  assert_non_null(lk_metrics_histogram_ex(m, "nob_seconds", "h", NULL, &o));
  lk_hist_opts_init_default(&o);
  o.type = LK_METRIC_SUMMARY;
  o.n_quantiles = 2;
  o.quantiles[0] = 0;
  o.quantiles[1] = 1;
  assert_non_null(lk_metrics_histogram_ex(m, "s_seconds", "h", NULL, &o));
  out = render(m);
  assert_true(
      has(out, "nob_seconds_bucket{le=\"+Inf\"} 0\nnob_seconds_sum 0\nnob_seconds_count 0\n"));
  assert_true(has(out, "# TYPE s_seconds summary\n"));
  assert_true(has(out, "s_seconds{quantile=\"0\"} NaN\n"));
  assert_true(has(out, "s_seconds{quantile=\"1\"} NaN\n"));
  free(out);
  lk_metrics_free(m);
}

/* --- callmetrics.h -------------------------------------------------------------------------- */

static void test_callmetrics_edges(void **state) {
  (void)state;
  lk_metrics *m = lk_metrics_new();
  assert_null(lk_call_metrics_new(NULL, "c"));
  assert_null(lk_call_metrics_new(m, NULL));
  assert_null(lk_call_metrics_new(m, "\xff\xfe")); /* not UTF-8 */
  lk_call_metrics *cm = lk_call_metrics_new(m, "we\"ird\\client\n");
  assert_non_null(cm);

  /* error codes and kinds outside their tables: the UNKNOWN series, never UB */
  static const int errs[] = {INT_MIN, INT_MIN + 1, -1000, LK_ECONFLICT - 1, 0, 1, INT_MAX};
  for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
    lk_call_metrics_call_start(cm);
    lk_call_metrics_call_end(cm, false, false, 1, INT64_MAX, errs[i]);
    lk_call_metrics_fallback(cm, errs[i]);
  }
  static const int kinds[] = {-1, LK_F__COUNT, INT_MAX, INT_MIN};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    lk_call_metrics_attempt_ex(cm, INT_MIN, (lk_failure)kinds[i], INT_MIN, INT64_MIN);
  lk_call_metrics_attempt_ex(cm, INT_MAX, LK_F_HTTP_503, 503, INT64_MAX);
  lk_call_metrics_attempt(cm, 2, LK_F_TOO_MANY_REQUESTS, INT_MAX);
  lk_call_metrics_breaker_state(cm, (lk_cm_breaker_state)-1);
  lk_call_metrics_breaker_state(cm, LK_CM_BREAKER__COUNT);
  lk_call_metrics_breaker_transition(cm, (lk_cm_breaker_state)99, (lk_cm_breaker_state)-1);
  lk_call_metrics_budget_consumption(cm, NAN);
  lk_call_metrics_bulkhead_wait(cm, -1);
  lk_call_metrics_bulkhead_wait(cm, INT64_MAX);
  lk_call_metrics_bulkhead_queue_depth(cm, INT64_MIN);
  lk_call_metrics_budget_remaining(cm, INT64_MAX);
  lk_call_metrics_snap s;
  assert_int_equal(lk_call_metrics_snapshot(cm, &s), LK_OK);
  assert_int_equal(s.calls_failed, 7);
  assert_int_equal(s.fallbacks, 7);
  assert_int_equal(s.active, 0);
  assert_int_equal(s.attempts, 6);
  assert_int_equal(s.retries, 2);
  assert_int_equal(s.downstream_5xx, 1);
  assert_int_equal(s.rate_limited_downstream, 1);
  assert_int_equal(s.breaker_state, LK_CM_BREAKER_CLOSED);
  assert_true(s.budget_consumption == 0.0);
  assert_true(s.call_p999_ns > 0);
  lk_call_metrics_budget_consumption(cm, INFINITY);
  assert_int_equal(lk_call_metrics_snapshot(cm, &s), LK_OK);
  assert_true(s.budget_consumption == 1.0);
  lk_call_metrics_budget_consumption(cm, -INFINITY);
  assert_int_equal(lk_call_metrics_snapshot(cm, &s), LK_OK);
  assert_true(s.budget_consumption == 0.0);
  char *out = render(m);
  assert_true(has(out, "client=\"we\\\"ird\\\\client\\n\""));
  assert_true(has(out, "error=\"UNKNOWN\"} 7\n"));
  assert_true(has(out, "cause=\"UNKNOWN\"} 7\n"));
  assert_false(has(out, "kind=\"UNKNOWN\""));
  free(out);

  /* NULL bundle: no-ops everywhere */
  assert_int_equal(lk_call_metrics_snapshot(NULL, &s), LK_EINVAL);
  assert_int_equal(lk_call_metrics_snapshot(cm, NULL), LK_EINVAL);
  lk_call_metrics_call_start(NULL);
  lk_call_metrics_attempt(NULL, 1, LK_F_NONE, 200);
  lk_call_metrics_attempt_ex(NULL, 1, LK_F_NONE, 200, 1);
  lk_call_metrics_call_end(NULL, true, true, 1, 1, LK_OK);
  lk_call_metrics_fallback(NULL, LK_EDEADLINE);
  lk_call_metrics_resend_detected(NULL);
  lk_call_metrics_breaker_state(NULL, LK_CM_BREAKER_OPEN);
  lk_call_metrics_breaker_transition(NULL, LK_CM_BREAKER_CLOSED, LK_CM_BREAKER_OPEN);
  lk_call_metrics_bulkhead_queue_depth(NULL, 1);
  lk_call_metrics_bulkhead_wait(NULL, 1);
  lk_call_metrics_budget_consumption(NULL, 0.5);
  lk_call_metrics_budget_remaining(NULL, 1);
  assert_null(lk_call_metrics_attempt_hist(NULL));
  assert_null(lk_call_metrics_call_hist(NULL));
  lk_call_metrics_free(NULL);
  assert_string_equal(lk_cm_breaker_state_name((lk_cm_breaker_state)-1), "unknown");
  assert_string_equal(lk_cm_breaker_state_name(LK_CM_BREAKER__COUNT), "unknown");
  lk_call_metrics_free(cm);
  lk_metrics_free(m);
}

/* --- advisor.h ------------------------------------------------------------------------------ */

static void test_advisor_edges(void **state) {
  (void)state;
  lk_timeout_advisor_opts o;
  assert_int_equal(lk_timeout_advisor_opts_validate(NULL), LK_EINVAL);
  static const double bad_rate[] = {0, 1, -0.1, 1.1, NAN, INFINITY};
  for (size_t i = 0; i < sizeof bad_rate / sizeof bad_rate[0]; i++) {
    lk_timeout_advisor_opts_init_default(&o);
    o.false_timeout_rate = bad_rate[i];
    assert_int_equal(lk_timeout_advisor_opts_validate(&o), LK_ECONFIG);
  }
  static const double bad_head[] = {0.999, NAN, INFINITY, -1};
  for (size_t i = 0; i < sizeof bad_head / sizeof bad_head[0]; i++) {
    lk_timeout_advisor_opts_init_default(&o);
    o.headroom = bad_head[i];
    assert_int_equal(lk_timeout_advisor_opts_validate(&o), LK_ECONFIG);
  }
  lk_timeout_advisor_opts_init_default(&o);
  o.floor_ns = -1;
  assert_int_equal(lk_timeout_advisor_opts_validate(&o), LK_ECONFIG);
  lk_timeout_advisor_opts_init_default(&o);
  o.cap_ns = INT64_MIN;
  assert_int_equal(lk_timeout_advisor_opts_validate(&o), LK_ECONFIG);
  o.cap_ns = 5;
  o.floor_ns = 6;
  assert_int_equal(lk_timeout_advisor_opts_validate(&o), LK_ECONFIG);

  lk_hist *h = lk_hist_new(0, INT64_MAX);
  lk_timeout_advice a;
  assert_int_equal(lk_timeout_advise(NULL, NULL, &a), LK_EINVAL);
  assert_int_equal(lk_timeout_advise(h, NULL, NULL), LK_EINVAL);
  memset(&a, 0x5a, sizeof a);
  assert_int_equal(lk_timeout_advise(h, NULL, &a), LK_EAGAIN);
  assert_int_equal(a.samples, 0);
  assert_int_equal(a.needed, 10000);
  assert_true(a.percentile > 99.89 && a.percentile < 99.91);
  assert_int_equal(lk_timeout_advise(h, &o, &a), LK_ECONFIG);

  /* a percentile at the end of the time line times a huge headroom saturates, never wraps */
  lk_timeout_advisor_opts_init_default(&o);
  o.min_samples = 1;
  o.headroom = 1e300;
  lk_hist_record(h, INT64_MAX);
  assert_int_equal(lk_timeout_advise(h, &o, &a), LK_OK);
  assert_int_equal(a.percentile_ns, INT64_MAX);
  assert_int_equal(a.timeout_ns, INT64_MAX);
  o.cap_ns = S(10);
  assert_int_equal(lk_timeout_advise(h, &o, &a), LK_OK);
  assert_int_equal(a.timeout_ns, S(10));
  lk_hist_reset(h);
  lk_hist_record(h, 0);
  o.cap_ns = 0;
  o.floor_ns = MS(5);
  assert_int_equal(lk_timeout_advise(h, &o, &a), LK_OK);
  assert_int_equal(a.timeout_ns, MS(5));
  /* a tiny rate needs more samples than can exist */
  lk_timeout_advisor_opts_init_default(&o);
  o.false_timeout_rate = 1e-300;
  assert_int_equal(lk_timeout_advise(h, &o, &a), LK_EAGAIN);
  assert_int_equal(a.needed, UINT64_MAX);
  o.min_samples = UINT64_MAX;
  o.false_timeout_rate = 0.5;
  assert_int_equal(lk_timeout_advise(h, &o, &a), LK_EAGAIN);
  lk_hist_free(h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_error_strings),
      cmocka_unit_test(test_deadline_extremes),
      cmocka_unit_test(test_deadline_wire_forms),
      cmocka_unit_test(test_duration_edges),
      cmocka_unit_test(test_backoff_config_edges),
      cmocka_unit_test(test_backoff_delay_extremes),
      cmocka_unit_test(test_retry_policy_edges),
      cmocka_unit_test(test_retry_decide_edges),
      cmocka_unit_test(test_decision_format_edges),
      cmocka_unit_test(test_failure_edges),
      cmocka_unit_test(test_rand_edges),
      cmocka_unit_test(test_clock_and_seed_example),
      cmocka_unit_test(test_budget_config_edges),
      cmocka_unit_test(test_budget_ratio_edges),
      cmocka_unit_test(test_budget_ratio_clock_steps_back),
      cmocka_unit_test(test_budget_token_quota_edges),
      cmocka_unit_test(test_breaker_config_edges),
      cmocka_unit_test(test_breaker_thresholds_and_outcomes),
      cmocka_unit_test(test_breaker_clock_steps_back),
      cmocka_unit_test(test_limiter_edges),
      cmocka_unit_test(test_bulkhead_edges),
      cmocka_unit_test(test_adaptive_edges),
      cmocka_unit_test(test_adaptive_clock_steps_back),
      cmocka_unit_test(test_hedge_edges),
      cmocka_unit_test(test_hist_construction_edges),
      cmocka_unit_test(test_hist_values_and_boundaries),
      cmocka_unit_test(test_hist_merge_edges),
      cmocka_unit_test(test_metrics_names_and_types),
      cmocka_unit_test(test_metrics_values_and_escaping),
      cmocka_unit_test(test_metrics_histogram_boundaries),
      cmocka_unit_test(test_callmetrics_edges),
      cmocka_unit_test(test_advisor_edges),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
