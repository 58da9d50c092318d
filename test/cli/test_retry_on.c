/* SPDX-License-Identifier: MIT */
/* --retry-on: whole lists, edits of the inherited set, composition across layers, formatting. */
/* cmocka.h needs these three first. */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include "retry_on.h"
#include "testutil.h"

#include <linkd/failure.h>
#include <linkd/rand.h>
#include <linkd/retry.h>

#include <stdio.h>
#include <string.h>

#define B(k) LK_FAILURE_BIT(LK_F_##k)

static uint64_t set_of(const char *spec, uint64_t inherited) {
  cli_retry_edit e;
  char err[256] = "";
  if (cli_retry_on_parse(spec, &e, err, sizeof err) != 0)
    fail_msg("'%s' refused: %s", spec, err);
  return cli_retry_edit_apply(&e, inherited);
}

static void bad(const char *spec, const char *needle) {
  cli_retry_edit e;
  char err[256] = "";
  if (cli_retry_on_parse(spec, &e, err, sizeof err) == 0)
    fail_msg("'%s' accepted", spec);
  if (!strstr(err, needle))
    fail_msg("message for '%s' is '%s', expected '%s' in it", spec, err, needle);
}

static void whole_list_replaces(void **state) {
  (void)state;
  uint64_t def = lk_retry_on_default();
  assert_int_equal(set_of("503,429,read-timeout", def),
                   B(HTTP_503) | B(TOO_MANY_REQUESTS) | B(READ_TIMEOUT));
  assert_int_equal(set_of("503", 0), B(HTTP_503));
  assert_int_equal(set_of(" 503 , 504 ", def), B(HTTP_503) | B(HTTP_504));
  assert_int_equal(set_of("none", def), 0);
  assert_int_equal(set_of("default", 0), def);
  /* Statuses with kinds of their own. */
  assert_int_equal(set_of("408,425,500,502", 0),
                   B(HTTP_408) | B(HTTP_425) | B(HTTP_500) | B(HTTP_502));
}

static void edits_keep_the_rest(void **state) {
  (void)state;
  uint64_t def = lk_retry_on_default();
  assert_true(def & B(HTTP_408));
  assert_int_equal(set_of("-408", def), def & ~B(HTTP_408));
  assert_int_equal(set_of("-408,-425", def), def & ~(B(HTTP_408) | B(HTTP_425)));
  assert_int_equal(set_of("+client-4xx", def), def | B(CLIENT_4XX));
  assert_int_equal(set_of("+4xx", def), def | B(CLIENT_4XX));
  assert_int_equal(set_of("-5xx", def),
                   def & ~(B(SERVER_5XX) | B(HTTP_500) | B(HTTP_502) | B(HTTP_503) | B(HTTP_504)));
  /* An edit of an empty inherited set. */
  assert_int_equal(set_of("+503", 0), B(HTTP_503));
  /* Mixed: an unsigned item states the whole set, later signed items edit it. */
  assert_int_equal(set_of("default,-408", 0), def & ~B(HTTP_408));
  assert_int_equal(set_of("5xx,-500", def),
                   B(SERVER_5XX) | B(HTTP_502) | B(HTTP_503) | B(HTTP_504));
  /* Left to right. */
  assert_true(set_of("-503,+503", def) & B(HTTP_503));
  assert_false(set_of("+503,-503", def) & B(HTTP_503));
  assert_int_equal(set_of("503,none,429", def), B(TOO_MANY_REQUESTS));
}

static void tokens(void **state) {
  (void)state;
  assert_int_equal(set_of("READ-TIMEOUT", 0), B(READ_TIMEOUT));
  assert_int_equal(set_of("Read_Timeout", 0), B(READ_TIMEOUT));
  assert_int_equal(set_of("connect-refused,empty-response", 0),
                   B(CONNECT_REFUSED) | B(EMPTY_RESPONSE));
  assert_int_equal(set_of("server-5xx", 0), B(SERVER_5XX));
  assert_int_equal(set_of("4xx", 0), B(CLIENT_4XX) | B(HTTP_408) | B(HTTP_425) |
                                         B(TOO_MANY_REQUESTS) | B(KEY_IN_USE));
  assert_int_equal(set_of("key-in-use", 0), B(KEY_IN_USE));
  assert_int_equal(set_of("5XX", 0),
                   B(SERVER_5XX) | B(HTTP_500) | B(HTTP_502) | B(HTTP_503) | B(HTTP_504));
  assert_int_equal(set_of("refused", 0),
                   B(TOO_MANY_REQUESTS) | B(HTTP_408) | B(HTTP_425) | B(KEY_IN_USE));
  assert_int_equal(set_of("permanent", 0), B(CLIENT_4XX));
  uint64_t not_sent = set_of("not-sent", 0);
  assert_true(not_sent & B(CONNECT_REFUSED));
  assert_true(not_sent & B(RESET_BEFORE_SEND));
  assert_false(not_sent & B(READ_TIMEOUT));
  uint64_t maybe = set_of("maybe_processed", 0);
  assert_true(maybe & B(READ_TIMEOUT));
  assert_true(maybe & B(HTTP_503));
  /* the default leaves out no-such-host and TLS protocol/certificate failures (retry.h) */
  assert_int_equal(not_sent | maybe | set_of("refused", 0),
                   lk_retry_on_default() | B(DNS_FAILED) | B(TLS_FAILED));
}

static void errors(void **state) {
  (void)state;
  bad("404", "client-4xx");
  bad("501", "server-5xx");
  bad("200", "success");
  bad("999", "not an HTTP status");
  bad("099", "not an HTTP status");
  bad("deadline-exceeded", "terminal");
  bad("+cancelled", "terminal");
  bad("none-sense", "unknown item 'none-sense'");
  bad("foo", "unknown item 'foo'");
  bad("", "empty item");
  bad("503,", "empty item");
  bad(",503", "empty item");
  bad("503,,429", "empty item");
  bad("+", "unknown item ''");
  bad("-none", "takes no sign");
  bad("NONE_KIND", "unknown item");
  bad("success", "unknown item");
}

static void compose_is_sequential(void **state) {
  (void)state;
  /* Property: "e1 then e2" applied once equals e1 applied, then e2 applied, for random edits. */
  lk_rand_fast r;
  lk_rand_fast_seeded(&r, lk_test_seed());
  for (int i = 0; i < 20000; i++) {
    cli_retry_edit e1 = {lk_rand_below(&r.base, 4) == 0, lk_rand_next64(&r.base),
                         lk_rand_next64(&r.base)};
    cli_retry_edit e2 = {lk_rand_below(&r.base, 4) == 0, lk_rand_next64(&r.base),
                         lk_rand_next64(&r.base)};
    uint64_t s = lk_rand_next64(&r.base);
    uint64_t want = cli_retry_edit_apply(&e2, cli_retry_edit_apply(&e1, s));
    cli_retry_edit c = e1;
    cli_retry_edit_then(&c, &e2);
    assert_int_equal(cli_retry_edit_apply(&c, s), want);
  }
  /* And with parsed specs, the way config layers and flags stack. */
  cli_retry_edit a, b;
  char err[128];
  assert_int_equal(cli_retry_on_parse("-408", &a, err, sizeof err), 0);
  assert_int_equal(cli_retry_on_parse("+client-4xx,-425", &b, err, sizeof err), 0);
  cli_retry_edit_then(&a, &b);
  uint64_t def = lk_retry_on_default();
  assert_int_equal(cli_retry_edit_apply(&a, def),
                   (def & ~(B(HTTP_408) | B(HTTP_425))) | B(CLIENT_4XX));
}

static void format(void **state) {
  (void)state;
  char buf[1024];
  uint64_t def = lk_retry_on_default();
  assert_string_equal(cli_retry_on_format(def, buf, sizeof buf), "default");
  assert_string_equal(cli_retry_on_format(0, buf, sizeof buf), "none");
  assert_string_equal(cli_retry_on_format(def & ~B(HTTP_408), buf, sizeof buf),
                      "default,-HTTP_408");
  assert_string_equal(cli_retry_on_format(def | B(CLIENT_4XX), buf, sizeof buf),
                      "default,+CLIENT_4XX");
  assert_string_equal(cli_retry_on_format(B(HTTP_503) | B(READ_TIMEOUT), buf, sizeof buf),
                      "READ_TIMEOUT,HTTP_503");
  /* Whatever it prints parses back to the same set. */
  lk_rand_fast r;
  lk_rand_fast_seeded(&r, lk_test_seed() + 1);
  uint64_t allowed = 0;
  for (int k = 1; k < LK_F__COUNT; k++)
    if (lk_failure_class_of((lk_failure)k) != LK_FC_TERMINAL)
      allowed |= LK_FAILURE_BIT(k);
  for (int i = 0; i < 2000; i++) {
    uint64_t s = lk_rand_next64(&r.base) & allowed;
    if (i % 3 == 0)
      s = def ^ (LK_FAILURE_BIT(1 + lk_rand_below(&r.base, LK_F__COUNT - 1)) & allowed);
    cli_retry_on_format(s, buf, sizeof buf);
    assert_int_equal(set_of(buf, 0), s);
  }
  /* A small buffer is truncated, never overrun. */
  char tiny[8];
  cli_retry_on_format(B(HTTP_503) | B(READ_TIMEOUT), tiny, sizeof tiny);
  assert_int_equal(strlen(tiny), 7);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(whole_list_replaces),
      cmocka_unit_test(edits_keep_the_rest),
      cmocka_unit_test(tokens),
      cmocka_unit_test(errors),
      cmocka_unit_test(compose_is_sequential),
      cmocka_unit_test(format),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
