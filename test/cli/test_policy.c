/* SPDX-License-Identifier: MIT */
/* From merged settings to the lk_http_policy a call runs with. */
/* cmocka.h needs these three first. */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include "policy.h"

#include <linkd/failure.h>
#include <linkd/retry.h>

#include <string.h>

static void set(cli_settings *s, const char *key, const char *value, const char *origin) {
  char err[256];
  if (cli_settings_set(s, key, value, origin, origin != cli_origin_flag, err, sizeof err) != 0)
    fail_msg("%s = %s: %s", key, value, err);
}

static void defaults_are_the_library_s(void **state) {
  (void)state;
  cli_settings s;
  cli_settings_init(&s);
  lk_http_policy p, want;
  cli_policy_error e;
  assert_int_equal(cli_settings_to_policy(&s, &p, &e), 0);
  lk_http_policy_init_default(&want);
  assert_int_equal(p.deadline, want.deadline);
  assert_int_equal(p.attempt_timeout, want.attempt_timeout);
  assert_int_equal(p.connect_timeout, want.connect_timeout);
  assert_int_equal(p.dns_timeout, want.dns_timeout);
  assert_int_equal(p.tls_timeout, want.tls_timeout);
  assert_int_equal(p.write_timeout, want.write_timeout);
  assert_int_equal(p.first_byte_timeout, want.first_byte_timeout);
  assert_int_equal(p.idle_timeout, want.idle_timeout);
  assert_int_equal(p.idem_mode, want.idem_mode);
  const lk_retry_config *a = &p.retry.cfg, *b = &want.retry.cfg;
  assert_int_equal(a->max_attempts, b->max_attempts);
  assert_int_equal(a->retry_on, b->retry_on);
  assert_int_equal(a->honor_retry_after, b->honor_retry_after);
  assert_int_equal(a->retry_after_cap, b->retry_after_cap);
  assert_int_equal(a->backoff.kind, b->backoff.kind);
  assert_int_equal(a->backoff.base, b->backoff.base);
  assert_int_equal(a->backoff.max, b->backoff.max);
  assert_true(a->backoff.multiplier == b->backoff.multiplier);
  assert_int_equal(a->backoff.jitter, b->backoff.jitter);
  assert_true(a->backoff.ratio == b->backoff.ratio);
  assert_null(p.budget);
}

static void every_setting_lands(void **state) {
  (void)state;
  cli_settings s;
  cli_settings_init(&s);
  const char *o = cli_origin_flag;
  set(&s, "deadline", "7s", o);
  set(&s, "attempt-timeout", "1.5s", o);
  set(&s, "connect-timeout", "0s", o);
  set(&s, "dns-timeout", "11ms", o);
  set(&s, "tls-timeout", "12ms", o);
  set(&s, "write-timeout", "13ms", o);
  set(&s, "first-byte-timeout", "14ms", o);
  set(&s, "idle-timeout", "15ms", o);
  set(&s, "max-attempts", "9", o);
  set(&s, "backoff", "exponential:3", o);
  set(&s, "base", "10ms", o);
  set(&s, "max-delay", "90ms", o);
  set(&s, "jitter", "equal", o);
  set(&s, "idempotency-key", "key-1", o);
  set(&s, "retry-on", "503,connect-refused", o);
  lk_http_policy p;
  cli_policy_error e;
  assert_int_equal(cli_settings_to_policy(&s, &p, &e), 0);
  assert_int_equal(p.deadline, LK_SEC(7));
  assert_int_equal(p.attempt_timeout, LK_MS(1500));
  assert_int_equal(p.connect_timeout, 0);
  assert_int_equal(p.dns_timeout, LK_MS(11));
  assert_int_equal(p.tls_timeout, LK_MS(12));
  assert_int_equal(p.write_timeout, LK_MS(13));
  assert_int_equal(p.first_byte_timeout, LK_MS(14));
  assert_int_equal(p.idle_timeout, LK_MS(15));
  const lk_retry_config *rc = &p.retry.cfg;
  assert_int_equal(rc->max_attempts, 9);
  assert_int_equal(rc->backoff.kind, LK_BACKOFF_EXPONENTIAL);
  assert_true(rc->backoff.multiplier == 3.0);
  assert_int_equal(rc->backoff.base, LK_MS(10));
  assert_int_equal(rc->backoff.max, LK_MS(90));
  assert_int_equal(rc->backoff.jitter, LK_JITTER_EQUAL);
  assert_int_equal(rc->retry_on,
                   LK_FAILURE_BIT(LK_F_HTTP_503) | LK_FAILURE_BIT(LK_F_CONNECT_REFUSED));
  assert_int_equal(p.idem_mode, LK_IDEM_KEY);
  assert_string_equal(p.idem_key, "key-1");
  cli_settings_free(&s);
}

static void base_and_cap(void **state) {
  (void)state;
  lk_http_policy p;
  cli_policy_error e;
  cli_settings s;
  /* A base above the default cap raises the cap when the cap was not given. */
  cli_settings_init(&s);
  set(&s, "base", "5s", cli_origin_flag);
  assert_int_equal(cli_settings_to_policy(&s, &p, &e), 0);
  assert_int_equal(p.retry.cfg.backoff.base, LK_SEC(5));
  assert_int_equal(p.retry.cfg.backoff.max, LK_SEC(5));
  cli_settings_free(&s);
  /* Both given and inconsistent: a usage error when a flag is involved... */
  cli_settings_init(&s);
  set(&s, "base", "5s", "t.conf:3");
  set(&s, "max-delay", "1s", cli_origin_flag);
  assert_int_equal(cli_settings_to_policy(&s, &p, &e), -1);
  assert_true(e.from_flags);
  assert_string_equal(e.msg, "max-delay 1s is less than base 5s");
  cli_settings_free(&s);
  /* ...a config error when only the file is. */
  cli_settings_init(&s);
  set(&s, "base", "5s", "t.conf:3");
  set(&s, "max-delay", "1s", "t.conf:4");
  assert_int_equal(cli_settings_to_policy(&s, &p, &e), -1);
  assert_false(e.from_flags);
  cli_settings_free(&s);
  /* A cap under the default base says so. */
  cli_settings_init(&s);
  set(&s, "max-delay", "50ms", cli_origin_flag);
  assert_int_equal(cli_settings_to_policy(&s, &p, &e), -1);
  assert_true(e.from_flags);
  assert_non_null(strstr(e.msg, "less than base 200ms (the default; set base too)"));
  cli_settings_free(&s);
}

/* A connect timeout given larger than the attempt's is an error, not silently capped. */
static void connect_within_attempt(void **state) {
  (void)state;
  lk_http_policy p;
  cli_policy_error e;
  cli_settings s;
  cli_settings_init(&s);
  set(&s, "connect-timeout", "2s", cli_origin_flag);
  set(&s, "attempt-timeout", "1s", "t.conf:2");
  assert_int_equal(cli_settings_to_policy(&s, &p, &e), -1);
  assert_true(e.from_flags);
  assert_string_equal(e.msg, "connect-timeout 2s is longer than attempt-timeout 1s");
  cli_settings_free(&s);
  /* Against the default 800ms attempt timeout, from the file alone: a config error. */
  cli_settings_init(&s);
  set(&s, "connect-timeout", "900ms", "t.conf:2");
  assert_int_equal(cli_settings_to_policy(&s, &p, &e), -1);
  assert_false(e.from_flags);
  assert_string_equal(e.msg, "connect-timeout 900ms is longer than attempt-timeout 800ms");
  cli_settings_free(&s);
  /* Equal is fine; so is the default 500ms under a shorter attempt timeout (the cap). */
  cli_settings_init(&s);
  set(&s, "connect-timeout", "1s", cli_origin_flag);
  set(&s, "attempt-timeout", "1s", cli_origin_flag);
  assert_int_equal(cli_settings_to_policy(&s, &p, &e), 0);
  cli_settings_free(&s);
  cli_settings_init(&s);
  set(&s, "attempt-timeout", "200ms", cli_origin_flag);
  assert_int_equal(cli_settings_to_policy(&s, &p, &e), 0);
  assert_int_equal(p.connect_timeout, LK_MS(500));
  cli_settings_free(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(defaults_are_the_library_s),
      cmocka_unit_test(every_setting_lands),
      cmocka_unit_test(base_and_cap),
      cmocka_unit_test(connect_within_attempt),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
