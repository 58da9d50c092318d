/* SPDX-License-Identifier: MIT */
/* The config file: sections, per-host overrides, and errors that name the line. */
/* cmocka.h needs these three first. */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include "allocfail.h"
#include "config.h"

#include <linkd/failure.h>
#include <linkd/retry.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Loads `text` as the file "t.conf". Returns the loader's result; err gets its message. */
static int load(cli_config *c, const char *text, char *err, size_t cap) {
  FILE *f = fmemopen((void *)text, strlen(text), "r");
  assert_non_null(f);
  err[0] = '\0';
  int rc = cli_config_load_stream(c, f, "t.conf", err, cap);
  fclose(f);
  return rc;
}

/* The same for `len` bytes of `text`, NULs included. */
static int load_n(cli_config *c, const char *text, size_t len, char *err, size_t cap) {
  FILE *f = fmemopen((void *)text, len, "r");
  assert_non_null(f);
  err[0] = '\0';
  int rc = cli_config_load_stream(c, f, "t.conf", err, cap);
  fclose(f);
  return rc;
}

/* The thread's CPU time, not the wall clock: other processes on a loaded machine take the CPU
 * between the two readings without changing this count. */
static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Expects `text` to be refused with exactly "t.conf:LINE: ..." containing `needle`. */
static void refused(const char *text, int line, const char *needle) {
  cli_config c;
  char err[1024];
  if (load(&c, text, err, sizeof err) == 0)
    fail_msg("accepted:\n%s", text);
  char want[32];
  snprintf(want, sizeof want, "t.conf:%d: ", line);
  if (strncmp(err, want, strlen(want)) != 0 || !strstr(err, needle))
    fail_msg("message '%s'; expected it to start with '%s' and mention '%s'", err, want, needle);
  cli_config_free(&c);
}

static const char good[] = "; linkd config\n"
                           "# comments either way\n"
                           "[defaults]\n"
                           "deadline = 10s\n"
                           "  max-attempts = 5   ; indented, inline comment\n"
                           "retry-on = -408\n"
                           "header = X-Team: core\n"
                           "idempotency-key = auto\n"
                           "\n"
                           "[host \"API.example.com\"]\n"
                           "deadline = 2s\n"
                           "retry-on = +client-4xx\n"
                           "header = Authorization: Bearer abc\n"
                           "header = X-Team: api\n"
                           "cacert = api-ca.pem\n"
                           "\n"
                           "[host \"api.example.com:8443\"]\n"
                           "max-attempts = 2\n"
                           "budget = tokens:10:0.1\n"
                           "[host \"::1\"]\n"
                           "jitter = none\n"
                           "cacert = /etc/ca one.pem\n";

static void sections_and_overrides(void **state) {
  (void)state;
  cli_config c;
  char err[1024];
  if (load(&c, good, err, sizeof err) != 0)
    fail_msg("%s", err);
  assert_int_equal(c.nsections, 4);

  /* Only [defaults] for another host. */
  cli_settings s;
  const char *matched[3];
  size_t n;
  cli_settings_init(&s);
  assert_int_equal(cli_config_apply(&c, "other.example.com", 443, &s, matched, &n), 0);
  assert_int_equal(n, 1);
  assert_string_equal(matched[0], "defaults");
  assert_int_equal(s.deadline, LK_SEC(10));
  assert_int_equal(s.max_attempts, 5);
  assert_string_equal(s.origin[CLI_F_DEADLINE], "t.conf:4");
  assert_string_equal(s.origin[CLI_F_MAX_ATTEMPTS], "t.conf:5");
  assert_int_equal(s.idem_mode, LK_IDEM_AUTO);
  assert_int_equal(s.nheaders, 1);
  assert_false(s.set & CLI_BIT(CLI_F_BUDGET));
  assert_false(s.set & CLI_BIT(CLI_F_CACERT));
  assert_null(s.cacert);
  cli_settings_free(&s);

  /* The host section (any port), matched case-insensitively. */
  cli_settings_init(&s);
  assert_int_equal(cli_config_apply(&c, "api.EXAMPLE.com", 443, &s, matched, &n), 0);
  assert_int_equal(n, 2);
  assert_string_equal(matched[1], "host \"API.example.com\"");
  assert_int_equal(s.deadline, LK_SEC(2));
  assert_string_equal(s.origin[CLI_F_DEADLINE], "t.conf:11");
  assert_int_equal(s.max_attempts, 5);
  uint64_t def = lk_retry_on_default();
  assert_int_equal(cli_retry_edit_apply(&s.retry_on, def),
                   (def & ~LK_FAILURE_BIT(LK_F_HTTP_408)) | LK_FAILURE_BIT(LK_F_CLIENT_4XX));
  assert_int_equal(s.nheaders, 2);
  assert_string_equal(s.headers[0].name, "Authorization");
  assert_string_equal(s.headers[1].value, "api");
  assert_string_equal(s.cacert, "api-ca.pem");
  assert_string_equal(s.origin[CLI_F_CACERT], "t.conf:15");
  cli_settings_free(&s);

  /* host:port comes last. */
  cli_settings_init(&s);
  assert_int_equal(cli_config_apply(&c, "api.example.com", 8443, &s, matched, &n), 0);
  assert_int_equal(n, 3);
  assert_int_equal(s.max_attempts, 2);
  assert_int_equal(s.deadline, LK_SEC(2));
  assert_true(s.budget.enabled);
  assert_string_equal(s.cacert, "api-ca.pem"); /* inherited from the host section */
  cli_settings_free(&s);

  /* IPv6 without brackets in the file, with them from libcurl; any port. */
  cli_settings_init(&s);
  assert_int_equal(cli_config_apply(&c, "[::1]", 8080, &s, matched, &n), 0);
  assert_int_equal(n, 2);
  assert_string_equal(matched[1], "host \"::1\"");
  assert_int_equal(s.jitter, LK_JITTER_NONE);
  assert_string_equal(s.cacert, "/etc/ca one.pem");
  cli_settings_free(&s);
  cli_settings_init(&s);
  assert_int_equal(cli_config_apply(&c, "[::2]", 8080, &s, matched, &n), 0);
  assert_int_equal(n, 1);
  cli_settings_free(&s);
  cli_config_free(&c);
}

static void accepted_forms(void **state) {
  (void)state;
  cli_config c;
  char err[1024];
  assert_int_equal(load(&c, "", err, sizeof err), 0);
  assert_int_equal(c.nsections, 0);
  cli_config_free(&c);
  /* CRLF line endings, no final newline, ':' as separator (inih), no blanks. */
  assert_int_equal(load(&c, "[defaults]\r\ndeadline=1s\r\nbase: 5ms", err, sizeof err), 0);
  assert_int_equal(c.sections[0].s.deadline, LK_SEC(1));
  assert_int_equal(c.sections[0].s.base, LK_MS(5));
  cli_config_free(&c);
  /* A section given twice is one section; a line of exactly 198 characters fits. */
  char text[512];
  int n = snprintf(text, sizeof text, "[defaults]\nheader = X-Long: ");
  while (n < 11 + 198)
    text[n++] = 'a';
  snprintf(text + n, sizeof text - (size_t)n,
           "\n[host \"h\"]\nbase=1s\n[defaults]\nmax-delay=9s\n");
  assert_int_equal(load(&c, text, err, sizeof err), 0);
  assert_int_equal(c.nsections, 2);
  assert_int_equal(c.sections[0].s.max_delay, LK_SEC(9));
  assert_int_equal(strlen(c.sections[0].s.headers[0].value), 198 - strlen("header = X-Long: "));
  cli_config_free(&c);
}

static void errors_name_the_line(void **state) {
  (void)state;
  refused("[defaults]\ndeadline = 3s\ndedline = 4s\n", 3, "unknown key 'dedline' (known keys: ");
  refused("[defaults]\n\n\ndeadline = 3\n", 4, "deadline: '3' needs a unit");
  refused("[defaults]\nmax-attempts = many\n", 2, "max-attempts: 'many' is not a number");
  refused("[defaults]\njitter = symmetric:7\n", 2, "the ratio must be a number from 0 to 1");
  refused("[defaults]\njitter = full:0.5\n", 2, "only symmetric takes a ratio");
  refused("[defaults]\nbackoff = exponential:0\n", 2, "the multiplier must be a number from 1");
  refused("[defaults]\nretry-on = 404\n", 2, "retry-on: status 404 has no kind of its own");
  refused("[defaults]\nbudget = ratio\n", 2, "budget: 'ratio' is not a budget");
  refused("[defaults]\nheader = broken\n", 2, "header: 'broken' is not a header");
  refused("[defaults]\ncacert =\n", 2, "cacert: a CA file must be a non-empty path");
  /* ";" right after "=" would be part of the value, after a space a comment: refused either way. */
  refused("[defaults]\ncacert =;ca.pem\n", 2, "cacert: ';ca.pem': a value may not start with ';'");
  refused("[defaults]\ndeadline = 3s\nthis line has no equals sign\n", 3, "syntax error");
  refused("[defaults\ndeadline = 3s\n", 1, "syntax error");
  refused("deadline = 3s\n", 1, "must follow a section header");
  refused("[default]\ndeadline = 3s\n", 2, "unknown section [default]");
  refused("[defaults]\ndeadline = 3s\n\ndeadline = 4s\n", 4,
          "'deadline' is already set in this section on line 2");
  /* An indented line is its own line, not a continuation of the previous value. */
  refused("[defaults]\ndeadline = 3s\n   deadline = 4s\n", 3, "already set in this section");
  refused("[defaults]\nidempotency-key = abc-123\n", 2, "a fixed key in a config file");
  /* The same key as a header, in any section and any spelling, is refused as well. */
  refused("[defaults]\nheader = Idempotency-Key: fixed\n", 2,
          "header: a fixed Idempotency-Key in a config file");
  refused("[defaults]\n[host \"a.com\"]\nheader = idempotency-key:k\n", 3,
          "a fixed Idempotency-Key");
  refused("[host \"a.com:8080\"]\nheader = IDEMPOTENCY-KEY;\n", 2, "a fixed Idempotency-Key");
  /* Headers the request would refuse with "invalid argument" are refused here, with the line. */
  refused("[defaults]\ndeadline = 3s\nheader = Content-Length: 5\n", 3,
          "header: Content-Length is set by linkd");
  refused("[host \"a.com\"]\nheader = Transfer-Encoding: chunked\n", 2,
          "header: Transfer-Encoding is set by linkd");
  refused("[host example.com]\ndeadline = 1s\n", 2, "bad section [host example.com]");
  refused("[host \"\"]\ndeadline = 1s\n", 2, "bad section");
  refused("[host \"[::1]:80\"]\ndeadline = 1s\n", 2, "write IPv6 addresses without brackets");
  refused("[host \"a.com:99999\"]\ndeadline = 1s\n", 2, "bad port");
  refused("[host \"a.com:\"]\ndeadline = 1s\n", 2, "bad port");
  refused("[host \"a.com/x\"]\ndeadline = 1s\n", 2, "bad section");
  refused("[hosts \"a.com\"]\ndeadline = 1s\n", 2, "bad section");
  /* The first error wins, even when later lines are bad too. */
  refused("[defaults]\nbase = 1\nnope = 2\n", 2, "base:");
  /* Over-long lines are refused, not split into two. */
  char text[600];
  int n = snprintf(text, sizeof text, "[defaults]\ndeadline = 1s\nheader = X-Long: ");
  while (n < 500)
    text[n++] = 'b';
  snprintf(text + n, sizeof text - (size_t)n, "\n");
  refused(text, 3, "line too long (at most 198 characters)");
}

/* Removing an inherited Idempotency-Key header is not a fixed key; -H for one call is fine. */
static void idempotency_key_header(void **state) {
  (void)state;
  cli_config c;
  char err[1024];
  assert_int_equal(load(&c, "[defaults]\nheader = Idempotency-Key:\n", err, sizeof err), 0);
  assert_int_equal(c.sections[0].s.nheaders, 1);
  assert_null(c.sections[0].s.headers[0].value);
  cli_config_free(&c);
  cli_settings s;
  cli_settings_init(&s);
  assert_int_equal(cli_settings_set(&s, "header", "Idempotency-Key: k-1", cli_origin_flag, false,
                                    err, sizeof err),
                   CLI_SET_OK);
  assert_string_equal(s.headers[0].value, "k-1");
  cli_settings_free(&s);
}

/* Every input is bounded: NUL bytes end the file with their line, size is capped. */
static void hostile_input(void **state) {
  (void)state;
  cli_config c;
  char err[1024];
  /* /dev/zero ends at the size limit (fgets made it an endless run of empty lines). */
  assert_int_not_equal(cli_config_load(&c, "/dev/zero", err, sizeof err), 0);
  assert_string_equal(err, "/dev/zero: larger than 1048576 bytes: not a config file");
  cli_config_free(&c);
  /* The NUL's own line is reported, and it does not make a short line look long. */
  static const char nul[] = "[defaults]\nbase = 1ms\nhe\0ader = X: y\ndeadline = 1s\n";
  assert_int_not_equal(load_n(&c, nul, sizeof nul - 1, err, sizeof err), 0);
  assert_string_equal(err, "t.conf:3: a NUL byte: not a text file");
  cli_config_free(&c);
  /* A NUL in what would be a long line: the NUL, on line 2. */
  char longnul[400];
  int n = snprintf(longnul, sizeof longnul, "[defaults]\n; ");
  memset(longnul + n, 'z', 300);
  longnul[n + 150] = '\0';
  longnul[n + 300] = '\n';
  assert_int_not_equal(load_n(&c, longnul, (size_t)n + 301, err, sizeof err), 0);
  assert_string_equal(err, "t.conf:2: a NUL byte: not a text file");
  cli_config_free(&c);
  /* CR-only line ends (old Mac editors): inih read the first section header of the one long
   * line and nothing else, so the file loaded with no settings at all. CRLF is fine. */
  assert_int_not_equal(load(&c, "[defaults]\rdeadline = 1s\r", err, sizeof err), 0);
  assert_string_equal(err, "t.conf:1: a carriage return inside the line: lines end in LF or "
                           "CRLF (a file with CR-only line ends reads as one line)");
  cli_config_free(&c);
  assert_int_not_equal(load(&c, "[defaults]\nbase = 1ms\rdeadline = 1s\n", err, sizeof err), 0);
  assert_non_null(strstr(err, "t.conf:2: a carriage return inside the line"));
  cli_config_free(&c);
  assert_int_equal(load(&c, "[defaults]\r\ndeadline = 1s\r\n", err, sizeof err), 0);
  assert_int_equal(c.nsections, 1);
  cli_config_free(&c);
  /* More than CLI_CONFIG_MAX_BYTES of valid comment lines is refused; just under it loads. */
  size_t big = (size_t)CLI_CONFIG_MAX_BYTES + 1;
  char *text = malloc(big);
  assert_non_null(text);
  for (size_t i = 0; i < big; i++)
    text[i] = (i % 64 == 63) ? '\n' : (i % 64 == 0 ? ';' : 'c');
  assert_int_not_equal(load_n(&c, text, big, err, sizeof err), 0);
  assert_string_equal(err, "t.conf: larger than 1048576 bytes: not a config file");
  cli_config_free(&c);
  assert_int_equal(load_n(&c, text, big - 1, err, sizeof err), 0);
  cli_config_free(&c);
  free(text);
}

/* A file of n sections, then a return to an earlier one (which adds to it). */
static char *sections_text(int n, size_t *len) {
  size_t cap = (size_t)n * 40 + 64;
  char *text = malloc(cap);
  assert_non_null(text);
  *len = 0;
  for (int i = 0; i < n; i++)
    *len += (size_t)snprintf(text + *len, cap - *len, "[host \"h%d\"]\nbase=%dms\n", i,
                             i % 50 + 1);
  *len += (size_t)snprintf(text + *len, cap - *len, "[host \"h7\"]\ndeadline = 7s\n");
  assert_true(*len < (size_t)CLI_CONFIG_MAX_BYTES);
  return text;
}

/* The fastest of three loads of n sections, in seconds. */
static double load_time(int n) {
  size_t len;
  char *text = sections_text(n, &len);
  double best = 1e9;
  for (int r = 0; r < 3; r++) {
    cli_config c;
    char err[1024];
    double t0 = now_s();
    if (load_n(&c, text, len, err, sizeof err) != 0)
      fail_msg("%s", err);
    double t = now_s() - t0;
    best = t < best ? t : best;
    assert_int_equal(c.nsections, n);
    cli_config_free(&c);
  }
  free(text);
  return best;
}

/* Section lookup is linear overall: with a list scan per entry, 40 000 sections (about the most
 * that fit in the size cap) took 2 s, 16 times as long as 10 000; now about 4 times. The ratio
 * of the best of three runs each in CPU time, not a wall-clock bound, so a loaded machine does
 * not fail it. */
static void many_sections(void **state) {
  (void)state;
  size_t len;
  char *text = sections_text(40000, &len);
  cli_config c;
  char err[1024];
  if (load_n(&c, text, len, err, sizeof err) != 0)
    fail_msg("%s", err);
  cli_settings s;
  const char *matched[3];
  size_t nm;
  cli_settings_init(&s);
  assert_int_equal(cli_config_apply(&c, "h7", 80, &s, matched, &nm), 0);
  assert_int_equal(nm, 1);
  assert_int_equal(s.base, LK_MS(8));
  assert_int_equal(s.deadline, LK_SEC(7));
  cli_settings_free(&s);
  cli_config_free(&c);
  free(text);
  double small = load_time(10000), big = load_time(40000);
  if (big > 8 * small + 0.02)
    fail_msg("4x the sections took %.1fx the time (%.3fs vs %.3fs): not linear", big / small, big,
             small);
}

static void file_errors(void **state) {
  (void)state;
  cli_config c;
  char err[1024];
  assert_int_not_equal(cli_config_load(&c, "/nonexistent/linkd.conf", err, sizeof err), 0);
  assert_non_null(strstr(err, "/nonexistent/linkd.conf: cannot open: "));
  cli_config_free(&c);
  char path[] = "/tmp/linkd-test-config-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  const char text[] = "[defaults]\nmax-delay = 5s\nbogus = 1\n";
  assert_int_equal(write(fd, text, sizeof text - 1), (int)sizeof text - 1);
  close(fd);
  assert_int_not_equal(cli_config_load(&c, path, err, sizeof err), 0);
  char want[128];
  snprintf(want, sizeof want, "%s:3: unknown key 'bogus'", path);
  assert_non_null(strstr(err, want));
  cli_config_free(&c);
  unlink(path);
}

static void default_path(void **state) {
  (void)state;
  char buf[512];
  bool req;
  unsetenv("LINKD_CONFIG");
  unsetenv("XDG_CONFIG_HOME");
  setenv("HOME", "/home/u", 1);
  assert_int_equal(cli_config_path(NULL, buf, sizeof buf, &req), 0);
  assert_string_equal(buf, "/home/u/.config/linkd/linkd.conf");
  assert_false(req);
  setenv("XDG_CONFIG_HOME", "/xdg", 1);
  assert_int_equal(cli_config_path(NULL, buf, sizeof buf, &req), 0);
  assert_string_equal(buf, "/xdg/linkd/linkd.conf");
  setenv("XDG_CONFIG_HOME", "relative", 1); /* the XDG spec says: ignore relative paths */
  assert_int_equal(cli_config_path(NULL, buf, sizeof buf, &req), 0);
  assert_string_equal(buf, "/home/u/.config/linkd/linkd.conf");
  setenv("LINKD_CONFIG", "/etc/linkd.conf", 1);
  assert_int_equal(cli_config_path(NULL, buf, sizeof buf, &req), 0);
  assert_string_equal(buf, "/etc/linkd.conf");
  assert_true(req);
  setenv("LINKD_CONFIG", "", 1); /* empty = unset */
  assert_int_equal(cli_config_path(NULL, buf, sizeof buf, &req), 0);
  assert_false(req);
  assert_int_equal(cli_config_path("flag.conf", buf, sizeof buf, &req), 0);
  assert_string_equal(buf, "flag.conf");
  assert_true(req);
  unsetenv("XDG_CONFIG_HOME");
  unsetenv("HOME");
  unsetenv("LINKD_CONFIG");
  assert_int_equal(cli_config_path(NULL, buf, sizeof buf, &req), -1);
}

/* Every allocation of loading `good` with resolve and connect-to entries, and of applying it to
 * a host, fails in turn: -1 with a message, or a config that applies; under ASan in CI, nothing
 * leaked on any of the paths. */
static void every_allocation_fails_in_turn(void **state) {
  (void)state;
  char text[sizeof good + 200];
  snprintf(text, sizeof text,
           "%s[host \"b.example.com\"]\nresolve = b.example.com:443:127.0.0.1\n"
           "connect-to = b.example.com:443:127.0.0.1:8443\n",
           good);
  long n = 1;
  for (;; n++) {
    assert_true(n < 100000);
    cli_config c;
    char err[512];
    allocfail_nth(n);
    int rc = load(&c, text, err, sizeof err);
    int applied = -1;
    if (rc == 0) {
      cli_settings s;
      cli_settings_init(&s);
      const char *matched[3];
      size_t k;
      applied = cli_config_apply(&c, "api.example.com", 8443, &s, matched, &k);
      cli_settings_free(&s);
      cli_entries r = {0}, ct = {0};
      if (applied == 0)
        applied = cli_config_entries(&c, "b.example.com", 443, &r, &ct);
      cli_entries_free(&r);
      cli_entries_free(&ct);
    }
    bool hit = allocfail_end();
    cli_config_free(&c);
    if (!hit) {
      assert_int_equal(rc, 0);
      assert_int_equal(applied, 0);
      break;
    }
    if (rc != 0 && !err[0])
      fail_msg("allocation %ld failed: no message", n);
  }
  assert_true(n > 20);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sections_and_overrides),
      cmocka_unit_test(accepted_forms),
      cmocka_unit_test(errors_name_the_line),
      cmocka_unit_test(file_errors),
      cmocka_unit_test(default_path),
      cmocka_unit_test(idempotency_key_header),
      cmocka_unit_test(hostile_input),
      cmocka_unit_test(many_sections),
      cmocka_unit_test(every_allocation_fails_in_turn),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
