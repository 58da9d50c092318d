/* SPDX-License-Identifier: MIT */
/* Errors, version, failure kinds, methods and random generators. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <linkd/linkd.h>

#include "fake_clock.h"

#include <stdio.h>
#include <string.h>

static void error_table(void **state) {
  (void)state;
  assert_string_equal(lk_strerror(LK_OK), "success");
  assert_string_equal(lk_strerror(LK_EDEADLINE), "deadline exceeded");
  assert_string_equal(lk_err_name(LK_EBREAKER_OPEN), "EBREAKER_OPEN");
  assert_string_equal(lk_strerror(-9999), "unknown error");
  assert_string_equal(lk_err_name(12), "UNKNOWN");
  /* Every code in the table has a distinct name and a message. */
  int codes[] = {
#define C_(name, num, msg) num,
      LK_ERRNO_MAP(C_)
#undef C_
  };
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
    assert_true(codes[i] <= 0);
    assert_string_not_equal(lk_err_name(codes[i]), "UNKNOWN");
    for (size_t j = i + 1; j < sizeof codes / sizeof codes[0]; j++)
      assert_int_not_equal(codes[i], codes[j]);
  }
}

static void version(void **state) {
  (void)state;
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", LK_VERSION_MAJOR, LK_VERSION_MINOR, LK_VERSION_PATCH);
  assert_string_equal(lk_version(), want);
  assert_string_equal(lk_version(), LK_VERSION_STRING);
  assert_int_equal(lk_version_hex(), LK_VERSION_HEX);
}

static void failure_kinds(void **state) {
  (void)state;
  assert_string_equal(lk_failure_name(LK_F_CONNECT_FAILED), "CONNECT_FAILED");
  assert_string_equal(lk_failure_name(LK_F__COUNT), "UNKNOWN");
  for (int k = 0; k < LK_F__COUNT; k++) {
    lk_failure back;
    assert_int_equal(lk_failure_from_name(lk_failure_name((lk_failure)k), &back), LK_OK);
    assert_int_equal(back, k);
    lk_failure seed = lk_failure_seed_kind((lk_failure)k);
    assert_true(seed <= LK_F_DEADLINE_EXCEEDED);
  }
  lk_failure f;
  assert_int_equal(lk_failure_from_name("read-timeout", &f), LK_OK);
  assert_int_equal(f, LK_F_READ_TIMEOUT);
  assert_int_equal(lk_failure_from_name("read_timeou", &f), LK_EINVAL);
  assert_int_equal(lk_failure_from_name("read_timeoutx", &f), LK_EINVAL);
  assert_int_equal(lk_failure_seed_kind(LK_F_CONNECT_REFUSED), LK_F_CONNECT_FAILED);
  assert_int_equal(lk_failure_seed_kind(LK_F_HTTP_503), LK_F_SERVER_5XX);
  assert_int_equal(lk_failure_class_of(LK_F_TOO_MANY_REQUESTS), LK_FC_REFUSED);
  assert_int_equal(lk_failure_class_of(LK_F__COUNT), LK_FC_TERMINAL);
  struct {
    int status;
    lk_failure f;
  } st[] = {{200, LK_F_NONE},         {204, LK_F_NONE},        {301, LK_F_NONE},
            {400, LK_F_CLIENT_4XX},   {404, LK_F_CLIENT_4XX},  {408, LK_F_HTTP_408},
            {425, LK_F_HTTP_425},     {429, LK_F_TOO_MANY_REQUESTS}, {500, LK_F_HTTP_500},
            {501, LK_F_SERVER_5XX},   {502, LK_F_HTTP_502},    {503, LK_F_HTTP_503},
            {504, LK_F_HTTP_504},     {599, LK_F_SERVER_5XX},  {600, LK_F_JUNK_RESPONSE},
            {99, LK_F_JUNK_RESPONSE}, {-1, LK_F_JUNK_RESPONSE}};
  for (size_t i = 0; i < sizeof st / sizeof st[0]; i++)
    assert_int_equal(lk_failure_from_status(st[i].status), st[i].f);
}

static void methods(void **state) {
  (void)state;
  const char *idem[] = {"GET", "get", "HeAd", "PUT", "delete", "OPTIONS", "trace"};
  for (size_t i = 0; i < sizeof idem / sizeof idem[0]; i++)
    assert_true(lk_method_is_idempotent(idem[i]));
  const char *not_idem[] = {"POST", "PATCH", "CONNECT", "", "GETS", "GE", "PUTT", "DEL", NULL};
  for (size_t i = 0; i < sizeof not_idem / sizeof not_idem[0]; i++)
    assert_false(lk_method_is_idempotent(not_idem[i]));
  assert_true(lk_method_is_safe("get"));
  assert_false(lk_method_is_safe("PUT"));
  assert_false(lk_method_is_safe("DELETE"));
}

static void rand_bounds(void **state) {
  (void)state;
  lk_rand_fast r;
  lk_rand_fast_seeded(&r, 99);
  uint64_t bounds[] = {1, 2, 3, 7, 201, 1ull << 32, (1ull << 63) - 1, 1ull << 63,
                       (1ull << 63) + 12345, UINT64_MAX};
  for (size_t b = 0; b < sizeof bounds / sizeof bounds[0]; b++)
    for (int i = 0; i < 2000; i++)
      assert_true(lk_rand_below(&r.base, bounds[b]) < bounds[b]);
  assert_int_equal(lk_rand_below(&r.base, 0), 0);
  /* Uniformity, roughly: 6 buckets, 60000 draws. */
  int counts[6] = {0};
  for (int i = 0; i < 60000; i++)
    counts[lk_rand_below(&r.base, 6)]++;
  for (int i = 0; i < 6; i++)
    assert_true(counts[i] > 9400 && counts[i] < 10600);
  /* Seeded generators replay; OS-seeded ones differ. */
  lk_rand_fast a, b;
  lk_rand_fast_seeded(&a, 5);
  lk_rand_fast_seeded(&b, 5);
  for (int i = 0; i < 100; i++)
    assert_int_equal(lk_rand_next64(&a.base), lk_rand_next64(&b.base));
  assert_int_equal(lk_rand_fast_init(&a), LK_OK);
  assert_int_equal(lk_rand_fast_init(&b), LK_OK);
  assert_int_not_equal(lk_rand_next64(&a.base), lk_rand_next64(&b.base));
}

/* JDK L64X128MixRandom: more values than the golden three, from the same construction. A power
 * of two bound masks one draw (JDK behaviour). */
static void l64x128_sequences(void **state) {
  (void)state;
  lk_rand_l64x128 a, b;
  lk_rand_l64x128_init(&a, 42);
  lk_rand_l64x128_init(&b, 42);
  uint64_t x = lk_rand_next64(&b.base);
  assert_int_equal(lk_rand_below(&a.base, 1024), x & 1023);
  lk_rand_l64x128_init(&a, 0);
  lk_rand_l64x128_init(&b, -1);
  assert_int_not_equal(lk_rand_next64(&a.base), lk_rand_next64(&b.base));
  assert_true(a.a & 1);
}

static void fake_clock(void **state) {
  (void)state;
  lk_fake_clock fc;
  lk_fake_clock_init(&fc, 10);
  assert_int_equal(fc.base.now(&fc.base), 10);
  lk_fake_clock_advance(&fc, 5);
  lk_fake_clock_advance(&fc, -100);
  assert_int_equal(fc.base.now(&fc.base), 15);
  lk_fake_clock_advance(&fc, INT64_MAX);
  assert_int_equal(fc.base.now(&fc.base), INT64_MAX);
  lk_fake_clock_set(&fc, 3);
  assert_int_equal(fc.base.now(&fc.base), 3);
  const lk_clock *sys = lk_clock_system();
  int64_t t1 = sys->now(sys), t2 = lk_now_ns();
  assert_true(t2 >= t1);
  assert_true(lk_wall_ns() > LK_SEC(1600000000));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(error_table), cmocka_unit_test(version),
      cmocka_unit_test(failure_kinds), cmocka_unit_test(methods),
      cmocka_unit_test(rand_bounds), cmocka_unit_test(l64x128_sequences),
      cmocka_unit_test(fake_clock),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
