/* SPDX-License-Identifier: MIT */
/* JSON string output: always valid JSON, whatever bytes a server sends in a header; -i's head. */
/* cmocka.h needs these three first. */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include "exitcodes.h"
#include "output.h"

#include <linkd/error.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *json_of(const char *s) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_non_null(f);
  cli_json_string(f, s);
  fclose(f);
  return buf;
}

static void check(const char *in, const char *want) {
  char *got = json_of(in);
  if (strcmp(got, want) != 0)
    fail_msg("json of '%s': got %s, want %s", in, got, want);
  free(got);
}

static void escapes(void **state) {
  (void)state;
  check("", "\"\"");
  check("plain", "\"plain\"");
  check("a\"b\\c", "\"a\\\"b\\\\c\"");
  check("\b\t\n\f\r", "\"\\b\\t\\n\\f\\r\"");
  check("\x01\x0b\x1f\x7f", "\"\\u0001\\u000b\\u001f\\u007f\"");
}

static void utf8(void **state) {
  (void)state;
  check("caf\xc3\xa9", "\"caf\xc3\xa9\"");                       /* é passes through */
  check("\xe2\x82\xac", "\"\xe2\x82\xac\"");                     /* € */
  check("\xf0\x9f\x98\x80", "\"\xf0\x9f\x98\x80\"");             /* U+1F600 */
  check("\xff", "\"\\ufffd\"");                                  /* never valid */
  check("\xc0\x80", "\"\\ufffd\\ufffd\"");                       /* overlong NUL */
  check("\xe0\x80\xaf", "\"\\ufffd\\ufffd\\ufffd\"");            /* overlong '/' */
  check("\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\"");            /* a surrogate */
  check("\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\""); /* above U+10FFFF */
  check("\xe2\x82", "\"\\ufffd\\ufffd\"");                       /* cut short */
  check("a\xe2\x82z", "\"a\\ufffd\\ufffdz\"");
  check("\x80x", "\"\\ufffdx\""); /* a lone continuation byte */
}

static void exit_codes(void **state) {
  (void)state;
  struct {
    int err, code;
    const char *name;
  } t[] = {
      {LK_OK, 0, "ok"},
      {LK_EHTTP, 2, "http-error"},
      {LK_ENOTRETRYABLE, 3, "not-retryable"},
      {LK_EATTEMPTS, 4, "retries-exhausted"},
      {LK_EDEADLINE, 5, "deadline-exceeded"},
      {LK_EBUDGET, 6, "refused"},
      {LK_EBREAKER_OPEN, 6, "refused"},
      {LK_ERATE_LIMITED, 6, "refused"},
      {LK_EBULKHEAD_FULL, 6, "refused"},
      {LK_ECANCELED, 130, "cancelled"},
      {LK_ECONFIG, 78, "config"},
      {LK_ETOOBIG, 1, "failure"},
      {LK_ENOMEM, 1, "failure"},
      {LK_ESYS, 1, "failure"},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    assert_int_equal(cli_exit_for_error(t[i].err), t[i].code);
    assert_string_equal(cli_exit_name(t[i].code), t[i].name);
  }
  assert_string_equal(cli_exit_name(CLI_EXIT_USAGE), "usage");
  assert_string_equal(cli_exit_name(CLI_EXIT_NOINPUT), "no-input");
  assert_string_equal(cli_exit_name(CLI_EXIT_CANTCREAT), "cannot-create");
}

/* -i's status line in curl's form, from the response's version and reason phrase. */
static void status_line(void **state) {
  (void)state;
  static const struct {
    int version, status;
    const char *reason, *want;
  } t[] = {
      {11, 200, "OK", "HTTP/1.1 200 OK\r\n"},
      {10, 404, "Not Found", "HTTP/1.0 404 Not Found\r\n"},
      {20, 200, "", "HTTP/2 200\r\n"},
      {30, 503, "", "HTTP/3 503\r\n"},
      {11, 200, "", "HTTP/1.1 200\r\n"},
      {0, 200, "OK", "HTTP 200 OK\r\n"},
  };
  lk_http_header h = {"Content-Type", "text/plain"};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    lk_http_response resp = {.status = t[i].status, .headers = &h, .header_count = 1,
                             .body = "", .version = t[i].version, .reason = t[i].reason};
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    cli_print_head(f, &resp);
    fclose(f);
    char want[128];
    snprintf(want, sizeof want, "%sContent-Type: text/plain\r\n\r\n", t[i].want);
    assert_string_equal(buf, want);
    free(buf);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(escapes),
      cmocka_unit_test(utf8),
      cmocka_unit_test(exit_codes),
      cmocka_unit_test(status_line),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
