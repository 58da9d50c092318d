/* SPDX-License-Identifier: MIT */
/* The seed's printed example output is a golden test: reproduced byte for byte. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <linkd/linkd.h>
#include <linkd/seed_example.h>

#include <string.h>

static const char golden[] =
    "GET connect failed #1 -> retry=true delay=250 reason=retry CONNECT_FAILED\n"
    "POST read timeout #2 no key -> retry=false delay=0 reason=not retryable: READ_TIMEOUT\n"
    "POST read timeout #2 with key -> retry=true delay=442 reason=retry READ_TIMEOUT\n"
    "GET 500 #4 -> retry=false delay=0 reason=attempts exhausted\n"
    "GET 429 #2 remaining 100 -> retry=false delay=0 reason=delay 582ms >= remaining 100ms\n"
    "attemptTimeout(800, 300) = 300\n"
    "attemptTimeout(800, 2000) = 800\n";

static void seed_example_matches(void **state) {
  (void)state;
  char buf[1024];
  int n = lk_seed_example(buf, sizeof buf);
  assert_int_equal(n, (int)strlen(golden));
  assert_string_equal(buf, golden);
}

static void seed_example_small_buffer(void **state) {
  (void)state;
  char buf[64];
  assert_int_equal(lk_seed_example(buf, sizeof buf), LK_ETOOBIG);
}

/* The JDK facts quoted in the issue: create(42L) -> nextLong(201)=150, (401)=242, (401)=382. */
static void l64x128_matches_jdk(void **state) {
  (void)state;
  lk_rand_l64x128 r;
  lk_rand_l64x128_init(&r, 42);
  assert_int_equal(lk_rand_below(&r.base, 201), 150);
  assert_int_equal(lk_rand_below(&r.base, 401), 242);
  assert_int_equal(lk_rand_below(&r.base, 401), 382);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(seed_example_matches),
      cmocka_unit_test(seed_example_small_buffer),
      cmocka_unit_test(l64x128_matches_jdk),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
