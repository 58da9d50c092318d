/* SPDX-License-Identifier: MIT */
/* conf_text.h and conf_size.h: lines as inih gets them, the refusals with their lines, the
 * bounded read, and sizes with every unit and at every limit. */
#include "conf_size.h"
#include "conf_text.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* Every line of `text` as the reader hands it out, joined; the number of lines in *n. */
static conf_text read_all(const char *text, size_t len, bool hash, int num, char *out, size_t cap,
                          int *n) {
  conf_text t;
  conf_text_init(&t, text, len, hash);
  char line[256];
  size_t off = 0;
  *n = 0;
  out[0] = '\0';
  while (conf_text_line(line, num, &t)) {
    off += (size_t)snprintf(out + off, cap - off, "%s", line);
    (*n)++;
  }
  return t;
}

static void test_lines(void **state) {
  (void)state;
  char out[512];
  int n;
  /* CRLF and LF, no final newline, leading blanks gone, a BOM skipped */
  static const char a[] = "\xef\xbb\xbf[s]\r\n  k = 1\n\tj = 2 # c\nlast";
  conf_text t = read_all(a, sizeof a - 1, false, 200, out, sizeof out, &n);
  assert_int_equal(t.stop, CONF_STOP_NONE);
  assert_int_equal(n, 4);
  assert_string_equal(out, "[s]\nk = 1\nj = 2 # c\nlast\n");
  char err[256];
  assert_int_equal(conf_text_error(&t, "f", err, sizeof err), 0);
  /* '#' comments only when asked, and only after a blank */
  read_all(a, sizeof a - 1, true, 200, out, sizeof out, &n);
  assert_string_equal(out, "[s]\nk = 1\nj = 2 \nlast\n");
  static const char h[] = "url = http://x/#frag\n";
  read_all(h, sizeof h - 1, true, 200, out, sizeof out, &n);
  assert_string_equal(out, "url = http://x/#frag\n");
}

static void test_refusals(void **state) {
  (void)state;
  char out[512], err[256];
  int n;
  static const char nul[] = "a = 1\nb = \0x\nc = 3\n";
  conf_text t = read_all(nul, sizeof nul - 1, false, 200, out, sizeof out, &n);
  assert_int_equal(n, 1);
  assert_int_equal(t.stop, CONF_STOP_NUL);
  assert_int_equal(conf_text_error(&t, "f", err, sizeof err), 1);
  assert_string_equal(err, "f:2: a NUL byte: not a text file");
  static const char cr[] = "a = 1\r\nb = 2\rc = 3\n";
  t = read_all(cr, sizeof cr - 1, false, 200, out, sizeof out, &n);
  assert_int_equal(t.stop, CONF_STOP_CR);
  assert_int_equal(t.stop_line, 2);
  /* a line fits when it and its newline and NUL fit the buffer: 10 bytes hold 8 characters,
   * leading blanks included (inih's buffer holds the line as written) */
  t = read_all("12345678\n", 9, false, 10, out, sizeof out, &n);
  assert_int_equal(t.stop, CONF_STOP_NONE);
  t = read_all("ok\n123456789\n", 13, false, 10, out, sizeof out, &n);
  assert_int_equal(n, 1);
  assert_int_equal(t.stop, CONF_STOP_LONG);
  assert_int_equal(conf_text_error(&t, "f", err, sizeof err), 1);
  assert_string_equal(err, "f:2: line too long (at most 8 characters)");
  t = read_all("  1234567\n", 10, false, 10, out, sizeof out, &n);
  assert_int_equal(t.stop, CONF_STOP_LONG);
  /* after a stop the reader stays stopped */
  char line[16];
  assert_null(conf_text_line(line, sizeof line, &t));
}

/* One message for whatever ended the parse, the reader's stop first. */
static void test_result(void **state) {
  (void)state;
  char err[256];
  conf_text t;
  conf_text_init(&t, "", 0, false);
  assert_int_equal(conf_text_result(&t, 0, 0, NULL, "f", err, sizeof err), 0);
  assert_int_equal(conf_text_result(&t, -2, 0, NULL, "f", err, sizeof err), 1);
  assert_string_equal(err, "f: out of memory");
  assert_int_equal(conf_text_result(&t, 3, 3, "port: bad", "f", err, sizeof err), 1);
  assert_string_equal(err, "f:3: port: bad");
  assert_int_equal(conf_text_result(&t, 2, 3, "port: bad", "f", err, sizeof err), 1);
  assert_string_equal(err, "f:2: syntax error: expected [section], key = value or a comment");
  assert_int_equal(conf_text_result(&t, -1, 0, NULL, "f", err, sizeof err), 1);
  assert_string_equal(err, "f: cannot parse");
  char line[64];
  conf_text_init(&t, "a\rb\n", 4, false);
  assert_null(conf_text_line(line, sizeof line, &t));
  assert_int_equal(conf_text_result(&t, 0, 0, NULL, "f", err, sizeof err), 1);
  assert_non_null(strstr(err, "f:1: a carriage return inside the line"));
}

static void test_slurp(void **state) {
  (void)state;
  char *buf;
  size_t len;
  /* exactly the limit reads; one byte over does not; a read error is told */
  for (size_t size = 0; size < 20000; size = size * 3 + 1) {
    char *data = malloc(size + 1);
    assert_non_null(data);
    memset(data, 'x', size);
    FILE *f = fmemopen(data, size ? size : 1, "r");
    assert_non_null(f);
    if (size == 0)
      fgetc(f); /* fmemopen refuses an empty buffer: read its one byte first */
    assert_int_equal(conf_text_slurp(f, size, &buf, &len), 0);
    assert_int_equal(len, size);
    assert_int_equal(buf[len], '\0');
    free(buf);
    rewind(f);
    if (size > 0) {
      assert_int_equal(conf_text_slurp(f, size - 1, &buf, &len), 1);
      assert_null(buf);
    }
    fclose(f);
    free(data);
  }
  FILE *d = fopen("/", "r"); /* a directory opens, and its read fails */
  if (d) {
    assert_int_equal(conf_text_slurp(d, 100, &buf, &len), -1);
    fclose(d);
  }
}

static void test_sizes(void **state) {
  (void)state;
  static const struct {
    const char *s;
    uint64_t want;
  } ok[] = {{"0", 0},
            {"100", 100},
            {"7b", 7},
            {"64k", 65536},
            {"64KB", 65536},
            {"64KiB", 65536},
            {"1m", 1 << 20},
            {"1MiB", 1 << 20},
            {"2g", UINT64_C(2) << 30},
            {"2GB", UINT64_C(2) << 30},
            {"1t", UINT64_C(1) << 40},
            {"1TiB", UINT64_C(1) << 40},
            {"16777215t", UINT64_C(16777215) << 40}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    uint64_t v = 1;
    assert_int_equal(conf_parse_size(ok[i].s, UINT64_MAX, &v), 0);
    assert_int_equal(v, ok[i].want);
  }
  static const char *const bad[] = {"",     "k",   "-1",   "+1", " 1", "1 k", "1.5k", "10q",
                                    "0x10", "1kk", "1ki",  "1pb", NULL};
  for (size_t i = 0; bad[i]; i++) {
    uint64_t v = 5;
    assert_int_equal(conf_parse_size(bad[i], UINT64_MAX, &v), -1);
    assert_int_equal(v, 5);
  }
  assert_int_equal(conf_parse_size(NULL, 10, &(uint64_t){0}), -1);
  uint64_t v;
  /* at the limit, one over, and beyond 64 bits: never wrapped into a small size */
  assert_int_equal(conf_parse_size("1m", 1 << 20, &v), 0);
  assert_int_equal(conf_parse_size("1048577", 1 << 20, &v), 1);
  assert_int_equal(conf_parse_size("1025k", 1 << 20, &v), 1);
  assert_int_equal(conf_parse_size("16777216t", UINT64_MAX, &v), 1);
  assert_int_equal(conf_parse_size("18446744073709551616", UINT64_MAX, &v), 1);
  assert_int_equal(conf_parse_size("18446744073709551615", UINT64_MAX, &v), 0);
  assert_int_equal(v, UINT64_MAX);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lines), cmocka_unit_test(test_refusals), cmocka_unit_test(test_result),
      cmocka_unit_test(test_slurp), cmocka_unit_test(test_sizes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
