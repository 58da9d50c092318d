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
#include "writeout.h"

#include <linkd/error.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* A temporary file holding n bytes of `data`; its path in path (free()d by the caller). */
static char *temp_file(const char *data, size_t n) {
  char *path = strdup("/tmp/linkd-test-wout-XXXXXX");
  assert_non_null(path);
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, data, n), (ssize_t)n);
  close(fd);
  return path;
}

/* Loads `n` bytes as a -w @FILE; the result code, the format in *fmt, the message in err. */
static int load(const char *data, size_t n, char **fmt, char *err, size_t cap) {
  char *path = temp_file(data, n);
  int rc = cli_write_out_load(path, fmt, err, cap);
  unlink(path);
  free(path);
  return rc;
}

/* -w @FILE: curl's reading (line ends dropped), the checks, the bound, the messages. */
static void write_out_file(void **state) {
  (void)state;
  char err[512], *fmt = NULL;
  static const char text[] = "code=%{http_code}\\n\nexit=%{exitcode}\r\n";
  assert_int_equal(load(text, strlen(text), &fmt, err, sizeof err), 0);
  assert_string_equal(fmt, "code=%{http_code}\\nexit=%{exitcode}");
  char *out = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&out, &len);
  assert_non_null(f);
  cli_write_vars v = {200, 0, 1, "http://h/", 0, ""};
  cli_write_out(f, fmt, &v);
  fclose(f);
  assert_string_equal(out, "code=200\nexit=0");
  free(out);
  free(fmt);
  assert_int_equal(load("", 0, &fmt, err, sizeof err), 0);
  assert_string_equal(fmt, "");
  free(fmt);
  /* The bound: CLI_WRITE_OUT_MAX bytes are read, one more is refused. */
  char *big = malloc(CLI_WRITE_OUT_MAX + 1);
  assert_non_null(big);
  memset(big, 'a', CLI_WRITE_OUT_MAX + 1);
  assert_int_equal(load(big, CLI_WRITE_OUT_MAX, &fmt, err, sizeof err), 0);
  assert_int_equal(strlen(fmt), CLI_WRITE_OUT_MAX);
  free(fmt);
  assert_int_equal(load(big, CLI_WRITE_OUT_MAX + 1, &fmt, err, sizeof err), -1);
  assert_null(fmt);
  assert_non_null(strstr(err, ": larger than 64 KiB, the format limit"));
  free(big);
  assert_int_equal(load("%{http_code} %{speed}", 21, &fmt, err, sizeof err), -2);
  assert_null(fmt);
  assert_non_null(strstr(err, ": unknown variable '%{speed}'"));
  assert_int_equal(load("ab\0c", 4, &fmt, err, sizeof err), -2);
  assert_non_null(strstr(err, ": a NUL byte at byte 3"));
  assert_int_equal(cli_write_out_load("/nonexistent-dir/fmt", &fmt, err, sizeof err), -1);
  assert_null(fmt);
  assert_string_equal(err, "-w @/nonexistent-dir/fmt: cannot read: No such file or directory");
  assert_int_equal(cli_write_out_load("/", &fmt, err, sizeof err), -1);
  assert_string_equal(err, "-w @/: cannot read: Is a directory");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(escapes),     cmocka_unit_test(utf8),           cmocka_unit_test(exit_codes),
      cmocka_unit_test(status_line), cmocka_unit_test(write_out_file),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
