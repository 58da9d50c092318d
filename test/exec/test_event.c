/* SPDX-License-Identifier: MIT */
/* Event names and the W3C traceparent helpers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <linkd/error.h>
#include <linkd/event.h>

#include <stdio.h>
#include <string.h>

static const char good[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

static void test_names(void **state) {
  (void)state;
  assert_string_equal(lk_event_type_name(LK_EV_CALL_START), "CALL_START");
  assert_string_equal(lk_event_type_name(LK_EV_RETRY_SCHEDULED), "RETRY_SCHEDULED");
  assert_string_equal(lk_event_type_name(LK_EV_CALL_END), "CALL_END");
  assert_string_equal(lk_event_type_name(LK_EV__COUNT), "UNKNOWN");
  assert_string_equal(lk_event_wait_name(LK_EV_WAIT_LIMITER), "LIMITER");
  assert_string_equal(lk_event_wait_name((lk_event_wait)99), "UNKNOWN");
}

static void test_parse_format_roundtrip(void **state) {
  (void)state;
  lk_traceparent tp;
  assert_int_equal(lk_traceparent_parse(good, strlen(good), &tp), LK_OK);
  assert_int_equal(tp.version, 0);
  assert_int_equal(tp.trace_id[0], 0x4b);
  assert_int_equal(tp.trace_id[15], 0x36);
  assert_int_equal(tp.parent_id[0], 0x00);
  assert_int_equal(tp.parent_id[7], 0xb7);
  assert_int_equal(tp.flags, LK_TRACEPARENT_SAMPLED);
  char buf[LK_TRACEPARENT_LEN + 1];
  assert_int_equal(lk_traceparent_format(&tp, buf, sizeof buf), LK_TRACEPARENT_LEN);
  assert_string_equal(buf, good);
  assert_int_equal(lk_traceparent_format(&tp, buf, sizeof buf - 1), LK_ERANGE);
  assert_string_equal(buf, "");
  /* Blanks around the value are allowed; no NUL is needed after len. */
  char padded[80];
  snprintf(padded, sizeof padded, "  %s\tXYZ", good);
  assert_int_equal(lk_traceparent_parse(padded, strlen(padded) - 3, &tp), LK_OK);
}

static void expect_refused(const char *s) {
  lk_traceparent tp;
  memset(&tp, 0x5a, sizeof tp);
  assert_int_equal(lk_traceparent_parse(s, strlen(s), &tp), LK_EPARSE);
  assert_int_equal(tp.version, 0x5a); /* untouched */
}

static void test_parse_refusals(void **state) {
  (void)state;
  expect_refused("");
  expect_refused("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01");  /* upper case */
  expect_refused("00-00000000000000000000000000000000-00f067aa0ba902b7-01");  /* zero trace */
  expect_refused("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01");  /* zero span */
  expect_refused("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");  /* version ff */
  expect_refused("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-"); /* 00 too long */
  expect_refused("00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01");
  expect_refused("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01");   /* short */
  expect_refused("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x"); /* no '-' */
  lk_traceparent tp;
  assert_int_equal(lk_traceparent_parse(NULL, 0, &tp), LK_EINVAL);
  assert_int_equal(lk_traceparent_parse(good, strlen(good), NULL), LK_EINVAL);
}

static void test_later_version(void **state) {
  (void)state;
  const char *v = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-what-the-future";
  lk_traceparent tp;
  assert_int_equal(lk_traceparent_parse(v, strlen(v), &tp), LK_OK);
  assert_int_equal(tp.version, 0xcc);
  assert_int_equal(tp.flags, 0x09);
  char buf[LK_TRACEPARENT_LEN + 1];
  assert_int_equal(lk_traceparent_format(&tp, buf, sizeof buf), LK_TRACEPARENT_LEN);
  assert_string_equal(buf, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09");
}

/* A generator that replays a script of 64-bit values. */
typedef struct script_rand {
  lk_rand base;
  const uint64_t *v;
  size_t n, i;
} script_rand;

static uint64_t script_next(lk_rand *self) {
  script_rand *r = (script_rand *)self;
  uint64_t x = r->i < r->n ? r->v[r->i] : 0;
  r->i++;
  return x;
}
static uint64_t script_below(lk_rand *self, uint64_t bound) {
  return bound ? script_next(self) % bound : 0;
}

static void test_child_and_new(void **state) {
  (void)state;
  lk_traceparent parent;
  assert_int_equal(lk_traceparent_parse(good, strlen(good), &parent), LK_OK);
  /* A zero draw is redrawn: a zero span id is invalid. */
  const uint64_t vals[] = {0, UINT64_C(0x0807060504030201)};
  script_rand r = {{script_below, script_next}, vals, 2, 0};
  lk_traceparent child;
  assert_int_equal(lk_traceparent_child(&parent, &r.base, &child), LK_OK);
  assert_int_equal(r.i, 2);
  char buf[LK_TRACEPARENT_LEN + 1];
  lk_traceparent_format(&child, buf, sizeof buf);
  assert_string_equal(buf, "00-4bf92f3577b34da6a3ce929d0e0e4736-0102030405060708-01");
  /* A generator that only gives zeros ends in an error, not a loop or an invalid id. */
  script_rand zero = {{script_below, script_next}, NULL, 0, 0};
  assert_int_equal(lk_traceparent_child(&parent, &zero.base, &child), LK_ESYS);
  assert_int_equal(zero.i, 8);

  const uint64_t ids[] = {1, 2, 3};
  script_rand r2 = {{script_below, script_next}, ids, 3, 0};
  lk_traceparent root;
  assert_int_equal(lk_traceparent_new(&r2.base, 0, &root), LK_OK);
  lk_traceparent_format(&root, buf, sizeof buf);
  assert_string_equal(buf, "00-01000000000000000200000000000000-0300000000000000-00");
  lk_traceparent back;
  assert_int_equal(lk_traceparent_parse(buf, strlen(buf), &back), LK_OK);
  assert_memory_equal(&back, &root, sizeof root);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_names),          cmocka_unit_test(test_parse_format_roundtrip),
      cmocka_unit_test(test_parse_refusals), cmocka_unit_test(test_later_version),
      cmocka_unit_test(test_child_and_new),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
