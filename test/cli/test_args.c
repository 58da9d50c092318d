/* SPDX-License-Identifier: MIT */
/* Flag parsing of the request commands: every flag, both spellings, and the usage errors. */
/* cmocka.h needs these three first. */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include "args.h"

#include <linkd/failure.h>
#include <linkd/retry.h>

#include <stdio.h>
#include <string.h>

#define MAXARGS 64

/* Parses a NULL-terminated list (argv[0] "linkd" is added). */
static int parse(cli_opts *o, char *err, size_t cap, const char *first, ...) {
  static char *argv[MAXARGS];
  static char store[MAXARGS][256];
  int argc = 0;
  snprintf(store[argc], sizeof store[0], "linkd");
  argv[argc] = store[argc];
  argc++;
  va_list ap;
  va_start(ap, first);
  for (const char *a = first; a; a = va_arg(ap, const char *)) {
    assert_true(argc < MAXARGS - 1);
    snprintf(store[argc], sizeof store[0], "%s", a);
    argv[argc] = store[argc];
    argc++;
  }
  va_end(ap);
  argv[argc] = NULL;
  err[0] = '\0';
  return cli_args_parse(argc, argv, o, err, cap);
}

#define PARSE(o, err, ...) parse(o, err, sizeof err, __VA_ARGS__, (const char *)NULL)

static void usage_error(const char *needle, int rc, cli_opts *o, const char *err) {
  assert_int_equal(rc, CLI_ARGS_USAGE);
  if (!strstr(err, needle))
    fail_msg("message '%s' does not mention '%s'", err, needle);
  cli_opts_free(o);
}

static void minimal(void **state) {
  (void)state;
  cli_opts o;
  char err[512];
  assert_int_equal(PARSE(&o, err, "get", "http://127.0.0.1:1/x"), CLI_ARGS_OK);
  assert_string_equal(o.command, "get");
  assert_string_equal(o.method, "GET");
  assert_string_equal(o.url, "http://127.0.0.1:1/x");
  assert_null(o.data);
  assert_int_equal(o.ndata, 0);
  assert_null(o.output);
  assert_null(o.dump_header);
  assert_false(o.fail || o.fail_with_body || o.remote_name || o.get);
  assert_false(o.include || o.silent || o.json || o.verbose || o.no_config);
  assert_int_equal(o.flags.set, 0);
  cli_opts_free(&o);
  const char *cmds[][2] = {{"get", "GET"},   {"head", "HEAD"},   {"put", "PUT"},
                           {"post", "POST"}, {"patch", "PATCH"}, {"delete", "DELETE"}};
  for (size_t i = 0; i < 6; i++) {
    assert_int_equal(PARSE(&o, err, cmds[i][0], "https://example.com/"), CLI_ARGS_OK);
    assert_string_equal(o.method, cmds[i][1]);
    assert_string_equal(cli_command_method(cmds[i][0]), cmds[i][1]);
    cli_opts_free(&o);
  }
  assert_null(cli_command_method("GET"));
  assert_null(cli_command_method("options"));
}

/* curl's -E FILE[:PASS]: the first unescaped colon starts the pass phrase, "\\:" is a colon
 * of the name and "\\\\" a backslash; a later --pass replaces the phrase, as does a later -E. */
static void cert_forms(void **state) {
  (void)state;
  static const struct {
    const char *arg, *file, *pass;
  } cases[] = {
      {"c.pem", "c.pem", NULL},         {"c.pem:s3cret", "c.pem", "s3cret"},
      {"c.pem:", "c.pem", ""},          {"c.pem:a:b", "c.pem", "a:b"},
      {"my\\:c.pem", "my:c.pem", NULL}, {"my\\:c.pem:pw", "my:c.pem", "pw"},
      {"d\\\\:pw", "d\\", "pw"},        {"d\\x.pem", "d\\x.pem", NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cli_opts o;
    char err[512];
    assert_int_equal(PARSE(&o, err, "get", "-E", cases[i].arg, "http://h/"), CLI_ARGS_OK);
    const cli_settings *s = &o.flags;
    assert_string_equal(s->cert, cases[i].file);
    if (cases[i].pass) {
      assert_true(s->set & CLI_BIT(CLI_F_PASS));
      assert_string_equal(s->pass, cases[i].pass);
      assert_ptr_equal(s->origin[CLI_F_PASS], cli_origin_flag);
    } else {
      assert_false(s->set & CLI_BIT(CLI_F_PASS));
      assert_null(s->pass);
    }
    cli_opts_free(&o);
  }
  cli_opts o;
  char err[512];
  assert_int_equal(PARSE(&o, err, "get", "-E", "c.pem:one", "--pass", "two", "http://h/"),
                   CLI_ARGS_OK);
  assert_string_equal(o.flags.pass, "two");
  cli_opts_free(&o);
  assert_int_equal(PARSE(&o, err, "get", "--pass", "two", "--cert", "c.pem:one", "http://h/"),
                   CLI_ARGS_OK);
  assert_string_equal(o.flags.pass, "one");
  cli_opts_free(&o);
  assert_int_equal(PARSE(&o, err, "get", "-E", ":pw", "http://h/"), CLI_ARGS_USAGE);
  assert_non_null(strstr(err, "--cert: a certificate file must be a non-empty path"));
  cli_opts_free(&o);
}

static void every_flag(void **state) {
  (void)state;
  cli_opts o;
  char err[512];
  int rc = PARSE(&o, err, "post", "-H", "X-A: 1", "--header", "X-B: two words", "-d", "@body.json",
                 "-o", "out.bin", "-i", "-s", "-v", "--config", "my.conf", "--deadline", "1.5s",
                 "--attempt-timeout", "250ms", "--connect-timeout", "100ms", "--dns-timeout", "1ms",
                 "--tls-timeout", "2ms", "--write-timeout", "3ms", "--first-byte-timeout", "4ms",
                 "--idle-timeout", "5ms", "--max-attempts", "7", "--backoff", "linear", "--base",
                 "20ms", "--max-delay", "300ms", "--jitter", "symmetric:0.25", "--idempotency-key",
                 "order-42", "--retry-on", "-408", "--budget", "quota:50", "--cacert", "ca.pem",
                 "--cert", "c.pem", "--key", "k.pem", "--pass", "phrase", "http://h/x");
  assert_int_equal(rc, CLI_ARGS_OK);
  assert_int_equal(o.ndata, 1);
  assert_int_equal(o.data[0].kind, CLI_DATA);
  assert_string_equal(o.data[0].arg, "@body.json");
  assert_string_equal(cli_data_file(&o.data[0]), "body.json");
  assert_string_equal(o.output, "out.bin");
  assert_string_equal(o.config, "my.conf");
  assert_true(o.include && o.silent && o.verbose);
  const cli_settings *s = &o.flags;
  assert_int_equal(s->deadline, LK_MS(1500));
  assert_int_equal(s->attempt_timeout, LK_MS(250));
  assert_int_equal(s->connect_timeout, LK_MS(100));
  assert_int_equal(s->dns_timeout, LK_MS(1));
  assert_int_equal(s->tls_timeout, LK_MS(2));
  assert_int_equal(s->write_timeout, LK_MS(3));
  assert_int_equal(s->first_byte_timeout, LK_MS(4));
  assert_int_equal(s->idle_timeout, LK_MS(5));
  assert_int_equal(s->max_attempts, 7);
  assert_int_equal(s->backoff, LK_BACKOFF_LINEAR);
  assert_int_equal(s->base, LK_MS(20));
  assert_int_equal(s->max_delay, LK_MS(300));
  assert_int_equal(s->jitter, LK_JITTER_SYMMETRIC);
  assert_true(s->jitter_ratio == 0.25);
  assert_int_equal(s->idem_mode, LK_IDEM_KEY);
  assert_string_equal(s->idem_key, "order-42");
  assert_false(s->retry_on.replace);
  assert_int_equal(s->retry_on.remove, LK_FAILURE_BIT(LK_F_HTTP_408));
  assert_true(s->budget.enabled);
  assert_int_equal(s->budget.kind, LK_BUDGET_QUOTA);
  assert_int_equal(s->budget.quota.capacity, 50);
  assert_string_equal(s->cacert, "ca.pem");
  assert_string_equal(s->cert, "c.pem");
  assert_string_equal(s->key, "k.pem");
  assert_string_equal(s->pass, "phrase");
  assert_int_equal(s->nheaders, 2);
  assert_string_equal(s->headers[0].name, "X-A");
  assert_string_equal(s->headers[0].value, "1");
  assert_string_equal(s->headers[1].name, "X-B");
  assert_string_equal(s->headers[1].value, "two words");
  for (int f = 0; f < CLI_F__COUNT; f++) {
    assert_true(s->set & CLI_BIT(f));
    assert_ptr_equal(s->origin[f], cli_origin_flag);
  }
  cli_opts_free(&o);

  assert_int_equal(
      PARSE(&o, err, "get", "--json", "--no-config", "--output=b", "--data-less", "http://h/"),
      CLI_ARGS_USAGE);
  cli_opts_free(&o);
  assert_int_equal(PARSE(&o, err, "get", "--json", "--no-config", "--output=b", "http://h/"),
                   CLI_ARGS_OK);
  assert_true(o.json && o.no_config);
  assert_string_equal(o.output, "b");
  cli_opts_free(&o);
  assert_int_equal(PARSE(&o, err, "get", "--output=-", "http://h/"), CLI_ARGS_OK);
  assert_string_equal(o.output, "-");
  cli_opts_free(&o);
}

static void spellings(void **state) {
  (void)state;
  cli_opts o;
  char err[512];
  /* --flag=value, flags after the URL, values starting with '-', last one wins. */
  assert_int_equal(PARSE(&o, err, "get", "http://h/", "--deadline=2s", "--retry-on", "-408",
                         "--deadline", "5s", "--retry-on=+client-4xx", "-vs"),
                   CLI_ARGS_OK);
  assert_int_equal(o.flags.deadline, LK_SEC(5));
  uint64_t def = lk_retry_on_default();
  assert_int_equal(cli_retry_edit_apply(&o.flags.retry_on, def),
                   (def & ~LK_FAILURE_BIT(LK_F_HTTP_408)) | LK_FAILURE_BIT(LK_F_CLIENT_4XX));
  assert_true(o.verbose && o.silent);
  cli_opts_free(&o);
  /* "--" ends the flags. */
  assert_int_equal(PARSE(&o, err, "get", "-v", "--", "http://h/-x"), CLI_ARGS_OK);
  assert_string_equal(o.url, "http://h/-x");
  cli_opts_free(&o);
  /* -dDATA and -Hvalue glued, as curl allows. */
  assert_int_equal(PARSE(&o, err, "put", "-dhello", "-HX-Y: z", "http://h/"), CLI_ARGS_OK);
  assert_string_equal(o.data[0].arg, "hello");
  assert_string_equal(o.flags.headers[0].value, "z");
  cli_opts_free(&o);
  /* Every idempotency word and the jitter/backoff forms. */
  const char *idem[][2] = {{"auto", "auto"}, {"NONE", "none"}, {"always", "always"}};
  for (int i = 0; i < 3; i++) {
    assert_int_equal(PARSE(&o, err, "post", "--idempotency-key", idem[i][0], "http://h/"),
                     CLI_ARGS_OK);
    assert_string_equal(lk_idem_mode_name(o.flags.idem_mode), idem[i][1]);
    cli_opts_free(&o);
  }
  assert_int_equal(PARSE(&o, err, "get", "--backoff", "exponential:1.5", "--jitter", "decorrelated",
                         "http://h/"),
                   CLI_ARGS_OK);
  assert_int_equal(o.flags.backoff, LK_BACKOFF_EXPONENTIAL);
  assert_true(o.flags.multiplier == 1.5);
  assert_int_equal(o.flags.jitter, LK_JITTER_DECORRELATED);
  cli_opts_free(&o);
  assert_int_equal(PARSE(&o, err, "get", "--jitter", "symmetric", "http://h/"), CLI_ARGS_OK);
  assert_true(o.flags.jitter_ratio == 0.5);
  cli_opts_free(&o);
}

static void help(void **state) {
  (void)state;
  cli_opts o;
  char err[512];
  assert_int_equal(PARSE(&o, err, "get", "--help"), CLI_ARGS_HELP);
  assert_string_equal(o.command, "get");
  cli_opts_free(&o);
  assert_int_equal(PARSE(&o, err, "post", "http://h/", "-h"), CLI_ARGS_HELP);
  cli_opts_free(&o);
}

static void usage_errors(void **state) {
  (void)state;
  cli_opts o;
  char err[512];
  int rc;
  rc = PARSE(&o, err, "fetch", "http://h/");
  usage_error("unknown command 'fetch'", rc, &o, err);
  rc = PARSE(&o, err, "get");
  usage_error("needs a URL", rc, &o, err);
  rc = PARSE(&o, err, "get", "http://a/", "http://b/");
  usage_error("one URL per call", rc, &o, err);
  rc = PARSE(&o, err, "get", "ftp://h/");
  usage_error("not an http:// or https:// URL", rc, &o, err);
  rc = PARSE(&o, err, "get", "--nope", "http://h/");
  usage_error("unknown option '--nope'", rc, &o, err);
  rc = PARSE(&o, err, "get", "--nope=3", "http://h/");
  usage_error("unknown option '--nope'", rc, &o, err);
  rc = PARSE(&o, err, "get", "-x", "http://h/");
  usage_error("unknown option '-x'", rc, &o, err);
  rc = PARSE(&o, err, "get", "http://h/", "--deadline");
  usage_error("--deadline needs a value", rc, &o, err);
  rc = PARSE(&o, err, "get", "http://h/", "-H");
  usage_error("-H needs a value", rc, &o, err);
  rc = PARSE(&o, err, "get", "--deadline", "3", "http://h/");
  usage_error("--deadline: '3' needs a unit", rc, &o, err);
  rc = PARSE(&o, err, "get", "--deadline", "0s", "http://h/");
  usage_error("--deadline: '0s' is too short", rc, &o, err);
  rc = PARSE(&o, err, "get", "--attempt-timeout", "soon", "http://h/");
  usage_error("--attempt-timeout: 'soon' is not a duration", rc, &o, err);
  rc = PARSE(&o, err, "get", "--connect-timeout", "-1s", "http://h/");
  usage_error("--connect-timeout:", rc, &o, err);
  rc = PARSE(&o, err, "get", "--base", "500us", "http://h/");
  usage_error("--base: '500us' is too short: must be at least 1ms", rc, &o, err);
  rc = PARSE(&o, err, "get", "--max-delay", "1x", "http://h/");
  usage_error("--max-delay: unknown unit 'x'", rc, &o, err);
  rc = PARSE(&o, err, "get", "--max-attempts", "0", "http://h/");
  usage_error("--max-attempts: '0' is not a number of attempts from 1 to 1000", rc, &o, err);
  rc = PARSE(&o, err, "get", "--max-attempts", "3x", "http://h/");
  usage_error("--max-attempts:", rc, &o, err);
  rc = PARSE(&o, err, "get", "--max-attempts", "1001", "http://h/");
  usage_error("--max-attempts:", rc, &o, err);
  rc = PARSE(&o, err, "get", "--backoff", "zigzag", "http://h/");
  usage_error("--backoff: 'zigzag' is not a backoff", rc, &o, err);
  rc = PARSE(&o, err, "get", "--backoff", "fixed:2", "http://h/");
  usage_error("only exponential takes a multiplier", rc, &o, err);
  /* A bad multiplier or ratio is named as such, not as a kind that takes none. */
  rc = PARSE(&o, err, "get", "--backoff", "exponential:0.5", "http://h/");
  usage_error("--backoff: 'exponential:0.5': the multiplier must be a number from 1 to 1000", rc,
              &o, err);
  rc = PARSE(&o, err, "get", "--backoff", "Exponential:0", "http://h/");
  usage_error("the multiplier must be a number from 1 to 1000", rc, &o, err);
  rc = PARSE(&o, err, "get", "--jitter", "symmetric:2", "http://h/");
  usage_error("--jitter: 'symmetric:2': the ratio must be a number from 0 to 1", rc, &o, err);
  rc = PARSE(&o, err, "get", "--jitter", "full:0.5", "http://h/");
  usage_error("only symmetric takes a ratio", rc, &o, err);
  rc = PARSE(&o, err, "get", "--jitter", "wobbly", "http://h/");
  usage_error("'wobbly' is not a jitter", rc, &o, err);
  rc = PARSE(&o, err, "post", "--idempotency-key", "a b", "http://h/");
  usage_error("'a b' is not a valid key", rc, &o, err);
  rc = PARSE(&o, err, "post", "--idempotency-key", "", "http://h/");
  usage_error("is not a valid key", rc, &o, err);
  rc = PARSE(&o, err, "get", "--retry-on", "404", "http://h/");
  usage_error("--retry-on: status 404 has no kind of its own", rc, &o, err);
  rc = PARSE(&o, err, "get", "--budget", "lots", "http://h/");
  usage_error("--budget: 'lots' is not a budget", rc, &o, err);
  rc = PARSE(&o, err, "get", "-d", "x", "http://h/");
  usage_error("get sends no body", rc, &o, err);
  rc = PARSE(&o, err, "head", "-d", "x", "http://h/");
  usage_error("head sends no body", rc, &o, err);
  /* As curl: the data options add up, in order (joined with '&' when the body is made). */
  rc = PARSE(&o, err, "post", "-d", "a", "--data-binary", "@b", "--data-raw", "@c",
             "--data-urlencode", "n@f", "--data-urlencode", "m=x@y", "http://h/");
  assert_int_equal(rc, CLI_ARGS_OK);
  assert_int_equal(o.ndata, 5);
  assert_int_equal(o.data[1].kind, CLI_DATA);
  assert_string_equal(o.data[1].flag, "--data-binary");
  assert_int_equal(o.data[2].kind, CLI_DATA_RAW);
  assert_int_equal(o.data[3].kind, CLI_DATA_URLENCODE);
  assert_null(cli_data_file(&o.data[0]));
  assert_string_equal(cli_data_file(&o.data[1]), "b");
  assert_null(cli_data_file(&o.data[2])); /* --data-raw: '@' is text */
  assert_string_equal(cli_data_file(&o.data[3]), "f");
  assert_null(cli_data_file(&o.data[4])); /* the first '=' makes the rest text */
  cli_opts_free(&o);
  rc = PARSE(&o, err, "post", "--data-urlencode", "name@", "http://h/");
  usage_error("--data-urlencode name@: a file name must follow '@'", rc, &o, err);
  rc = PARSE(&o, err, "post", "-d", "@-", "--data-urlencode", "x@-", "http://h/");
  usage_error("-d @- and --data-urlencode x@- do not mix: stdin is read once", rc, &o, err);
  rc = PARSE(&o, err, "post", "--data-urlencode", "@-", "-w", "@-", "http://h/");
  usage_error("--data-urlencode @- and -w @- do not mix", rc, &o, err);
  rc = PARSE(&o, err, "post", "-d", "@", "http://h/");
  usage_error("a file name must follow '@'", rc, &o, err);
  rc = PARSE(&o, err, "get", "--json", "-i", "http://h/");
  usage_error("--json and -i/--include do not mix", rc, &o, err);
  rc = PARSE(&o, err, "get", "--json", "-o", "-", "http://h/");
  usage_error("--json and -o - do not mix", rc, &o, err);
  rc = PARSE(&o, err, "get", "-H", "NoColon", "http://h/");
  usage_error("-H: 'NoColon' is not a header", rc, &o, err);
  rc = PARSE(&o, err, "get", "-H", "Bad Name: x", "http://h/");
  usage_error("not a valid header name", rc, &o, err);
  rc = PARSE(&o, err, "get", "-H", ": x", "http://h/");
  usage_error("is not a header", rc, &o, err);
  rc = PARSE(&o, err, "get", "-H", "Linkd-Attempt: 3", "http://h/");
  usage_error("Linkd-Attempt is set by linkd", rc, &o, err);
  rc = PARSE(&o, err, "get", "-H", "linkd-deadline: 3", "http://h/");
  usage_error("Linkd-Deadline is set by linkd", rc, &o, err);
  rc = PARSE(&o, err, "get", "-H", "X-Empty; x", "http://h/");
  usage_error("takes no value", rc, &o, err);
  /* Control characters other than HTAB are no part of a field value (RFC 9110 5.5). */
  rc = PARSE(&o, err, "get", "-H", "X-Bell: a\ab", "http://h/");
  usage_error("-H: header 'X-Bell': the value holds the control character 0x07 at byte 2", rc, &o,
              err);
  rc = PARSE(&o, err, "get", "-H", "X-Esc: \x1b[31m", "http://h/");
  usage_error("control character 0x1b", rc, &o, err);
  rc = PARSE(&o, err, "get", "-H", "X-Del: x\x7f", "http://h/");
  usage_error("control character 0x7f", rc, &o, err);
  rc = PARSE(&o, err, "get", "-H", "X-One: \x01", "http://h/");
  usage_error("control character 0x01", rc, &o, err);
  rc = PARSE(&o, err, "get", "-H", "X-Cr: a\rb", "http://h/");
  usage_error("may not contain CR or LF", rc, &o, err);
  /* What lk_http_request_add_header() refuses, with the reason rather than "invalid argument". */
  rc = PARSE(&o, err, "post", "-H", "Content-Length: 5", "http://h/");
  usage_error("-H: Content-Length is set by linkd: a body (-d) is sent with a Content-Length", rc,
              &o, err);
  rc = PARSE(&o, err, "post", "-H", "transfer-encoding: chunked", "http://h/");
  usage_error("-H: transfer-encoding is set by linkd", rc, &o, err);
  rc = PARSE(&o, err, "post", "-H", "Idempotency-Key;", "http://h/");
  usage_error("-H: header 'Idempotency-Key': the key is empty (a key is 1 to 255 visible ASCII", rc,
              &o, err);
  rc = PARSE(&o, err, "post", "-H", "Idempotency-Key: a b", "http://h/");
  usage_error("header 'Idempotency-Key': the key holds a space at byte 2", rc, &o, err);
  rc = PARSE(&o, err, "post", "-H", "Idempotency-Key: caf\xc3\xa9", "http://h/");
  usage_error("the key holds the byte 0xc3 at byte 4", rc, &o, err);
  char key[300 + sizeof "Idempotency-Key: "];
  int n = snprintf(key, sizeof key, "Idempotency-Key: ");
  memset(key + n, 'k', 300);
  key[n + 300] = '\0';
  {
    char *argv[] = {"linkd", "post", "-H", key, "http://h/", NULL};
    rc = cli_args_parse(5, argv, &o, err, sizeof err);
    usage_error("the key is 300 characters long", rc, &o, err);
  }
  key[n + 255] = '\0'; /* the longest key there is */
  {
    char *argv[] = {"linkd", "post", "-H", key, "http://h/", NULL};
    assert_int_equal(cli_args_parse(5, argv, &o, err, sizeof err), CLI_ARGS_OK);
    cli_opts_free(&o);
  }
  rc =
      PARSE(&o, err, "post", "-H", "Idempotency-Key: k1", "-H", "idempotency-key: k2", "http://h/");
  usage_error("-H: Idempotency-Key given twice", rc, &o, err);
  /* The header's key would silently win over the flag. */
  const char *modes[] = {"k2", "none", "auto", "always"};
  for (size_t i = 0; i < 4; i++) {
    char want[128];
    snprintf(want, sizeof want, "-H 'Idempotency-Key: k1' and --idempotency-key %s do not mix",
             modes[i]);
    rc = PARSE(&o, err, "post", "--idempotency-key", modes[i], "-H", "Idempotency-Key: k1",
               "http://h/");
    usage_error(want, rc, &o, err);
  }
  /* Removing a header is not a key, and a key needs no flag. */
  assert_int_equal(PARSE(&o, err, "post", "-H", "Idempotency-Key:", "-H",
                         "Content-Length:", "--idempotency-key", "auto", "http://h/"),
                   CLI_ARGS_OK);
  cli_opts_free(&o);
  assert_int_equal(PARSE(&o, err, "post", "-H", "Idempotency-Key: k1", "http://h/"), CLI_ARGS_OK);
  cli_opts_free(&o);
  /* The policy's limit on timeouts (100 days), named with the flag. */
  rc = PARSE(&o, err, "get", "--deadline", "2562047h", "http://h/");
  usage_error("--deadline: '2562047h' is too long: at most 100 days (2400h)", rc, &o, err);
  rc = PARSE(&o, err, "get", "--idle-timeout", "2400h1ns", "http://h/");
  usage_error("--idle-timeout: '2400h1ns' is too long", rc, &o, err);
  rc = PARSE(&o, err, "get", "-m", "8640001", "http://h/");
  usage_error("-m/--max-time: '8640001' is too long", rc, &o, err);
  assert_int_equal(PARSE(&o, err, "get", "--deadline", "2400h", "--attempt-timeout", "2400h",
                         "--connect-timeout", "2400h", "--max-delay", "3000h", "http://h/"),
                   CLI_ARGS_OK);
  cli_opts_free(&o);
}

/* curl's habits: `linkd URL`, -X, -I, -m, -w, -L, -f, -S, -k, a URL without a scheme. */
static void curl_habits(void **state) {
  (void)state;
  cli_opts o;
  char err[512];
  assert_int_equal(PARSE(&o, err, "http://h/x"), CLI_ARGS_OK);
  assert_true(o.implicit);
  assert_string_equal(o.method, "GET");
  assert_string_equal(o.command, "get");
  assert_string_equal(o.url, "http://h/x");
  cli_opts_free(&o);
  assert_int_equal(PARSE(&o, err, "-v", "example.com:8080/a", "-X", "PUT"), CLI_ARGS_OK);
  assert_true(o.implicit && o.verbose);
  assert_string_equal(o.method, "PUT");
  assert_string_equal(o.command, "put");
  assert_string_equal(o.url, "http://example.com:8080/a");
  cli_opts_free(&o);
  assert_int_equal(PARSE(&o, err, "-X", "PROPFIND", "localhost"), CLI_ARGS_OK);
  assert_string_equal(o.method, "PROPFIND");
  assert_string_equal(o.command, "request");
  assert_string_equal(o.url, "http://localhost");
  cli_opts_free(&o);
  assert_int_equal(PARSE(&o, err, "-d", "x", "h.example/p"), CLI_ARGS_OK);
  assert_string_equal(o.method, "POST");
  cli_opts_free(&o);
  assert_int_equal(PARSE(&o, err, "-I", "https://h/"), CLI_ARGS_OK);
  assert_string_equal(o.method, "HEAD");
  assert_true(o.include);
  cli_opts_free(&o);
  assert_int_equal(PARSE(&o, err, "head", "--head", "https://h/"), CLI_ARGS_OK);
  assert_true(o.include);
  cli_opts_free(&o);
  assert_int_equal(PARSE(&o, err, "get", "-fSsLk", "--max-redirs", "3", "-m", "2.5", "--write-out",
                         "%{http_code} %{time_total}\\n", "http://h/"),
                   CLI_ARGS_OK);
  assert_true(o.fail && o.show_error && o.silent && o.follow && o.insecure);
  assert_int_equal(o.max_redirs, 3);
  assert_int_equal(o.flags.deadline, LK_MS(2500));
  assert_string_equal(o.write_out, "%{http_code} %{time_total}\\n");
  cli_opts_free(&o);
  assert_int_equal(PARSE(&o, err, "get", "--max-time=250ms", "--location", "--fail", "--show-error",
                         "--insecure", "http://h/"),
                   CLI_ARGS_OK);
  assert_int_equal(o.flags.deadline, LK_MS(250));
  assert_int_equal(o.max_redirs, 50);
  assert_true(o.follow && o.fail && o.show_error && o.insecure);
  cli_opts_free(&o);
  assert_true(cli_args_implicit("example.com"));
  assert_true(cli_args_implicit("-v"));
  assert_false(cli_args_implicit("--help"));
  assert_false(cli_args_implicit("--version"));
  assert_false(cli_args_implicit("frobnicate"));
  int rc;
  rc = PARSE(&o, err, "frobnicate");
  usage_error("unknown command 'frobnicate'", rc, &o, err);
  rc = PARSE(&o, err, "post", "-X", "PUT", "http://h/");
  usage_error("-X is for 'linkd [options] URL'", rc, &o, err);
  rc = PARSE(&o, err, "get", "-I", "http://h/");
  usage_error("-I/--head sends HEAD", rc, &o, err);
  rc = PARSE(&o, err, "-X", "PUT", "-I", "http://h/");
  usage_error("-X and -I/--head do not mix", rc, &o, err);
  rc = PARSE(&o, err, "-X", "BAD METHOD", "http://h/");
  usage_error("-X: 'BAD METHOD' is not an HTTP method", rc, &o, err);
  rc = PARSE(&o, err, "-X", "GET", "-d", "x", "http://h/");
  usage_error("GET sends no body", rc, &o, err);
  rc = PARSE(&o, err, "-v");
  usage_error("linkd needs a URL", rc, &o, err);
  rc = PARSE(&o, err, "get", "-w", "%{http_code} %{speed}", "http://h/");
  usage_error("-w: unknown variable '%{speed}'", rc, &o, err);
  rc = PARSE(&o, err, "get", "--json", "-w", "%{http_code}", "http://h/");
  usage_error("--json and -w/--write-out do not mix", rc, &o, err);
  /* -w @FILE and @-: kept as given, read and checked before the call (cli_write_out_load()). */
  assert_int_equal(PARSE(&o, err, "get", "-w", "@fmt.txt", "http://h/"), CLI_ARGS_OK);
  assert_string_equal(o.write_out, "@fmt.txt");
  cli_opts_free(&o);
  assert_int_equal(PARSE(&o, err, "get", "--write-out=@-", "http://h/"), CLI_ARGS_OK);
  assert_string_equal(o.write_out, "@-");
  cli_opts_free(&o);
  rc = PARSE(&o, err, "get", "-w", "@", "http://h/");
  usage_error("-w @: a file name must follow '@'", rc, &o, err);
  rc = PARSE(&o, err, "post", "-d", "@-", "-w", "@-", "http://h/");
  usage_error("-d @- and -w @- do not mix", rc, &o, err);
  rc = PARSE(&o, err, "get", "--json", "-w", "@f", "http://h/");
  usage_error("--json and -w/--write-out do not mix", rc, &o, err);
  rc = PARSE(&o, err, "get", "--max-redirs", "many", "http://h/");
  usage_error("--max-redirs: 'many'", rc, &o, err);
  rc = PARSE(&o, err, "get", "-m", "soon", "http://h/");
  usage_error("-m/--max-time: 'soon'", rc, &o, err);
  rc = PARSE(&o, err, "get", "ftp://h/");
  usage_error("not an http:// or https:// URL", rc, &o, err);
  /* A scheme is a prefix: "://" in the query is no scheme, so http:// is added. */
  assert_int_equal(PARSE(&o, err, "get", "127.0.0.1:8080/x?r=http://y"), CLI_ARGS_OK);
  assert_string_equal(o.url, "http://127.0.0.1:8080/x?r=http://y");
  cli_opts_free(&o);
  assert_int_equal(PARSE(&o, err, "localhost/a?u=https://b/c"), CLI_ARGS_OK);
  assert_string_equal(o.url, "http://localhost/a?u=https://b/c");
  cli_opts_free(&o);
  assert_int_equal(PARSE(&o, err, "get", "HTTPS://h/x?r=ftp://y"), CLI_ARGS_OK);
  assert_string_equal(o.url, "HTTPS://h/x?r=ftp://y");
  cli_opts_free(&o);
  rc = PARSE(&o, err, "get", "git+ssh://h/r");
  usage_error("'git+ssh://h/r' is not an http:// or https:// URL", rc, &o, err);
}

static const cli_header *flag_header(const cli_opts *o, const char *name) {
  for (size_t i = 0; i < o->flags.nheaders; i++)
    if (strcmp(o->flags.headers[i].name, name) == 0)
      return &o->flags.headers[i];
  return NULL;
}

/* curl's -D, --fail-with-body, -O, -G, -u and -A. */
static void curl_options(void **state) {
  (void)state;
  cli_opts o;
  char err[512];
  int rc;
  assert_int_equal(PARSE(&o, err, "get", "-D", "h.txt", "--fail-with-body", "-O", "http://h/f"),
                   CLI_ARGS_OK);
  assert_string_equal(o.dump_header, "h.txt");
  assert_true(o.fail_with_body && o.remote_name && !o.fail);
  cli_opts_free(&o);
  assert_int_equal(PARSE(&o, err, "get", "--dump-header=-", "--remote-name", "http://h/f"),
                   CLI_ARGS_OK);
  assert_string_equal(o.dump_header, "-");
  cli_opts_free(&o);
  /* -G: the data goes to the query; the method stays GET (HEAD with -I). */
  assert_int_equal(PARSE(&o, err, "-G", "-d", "a=1", "http://h/"), CLI_ARGS_OK);
  assert_true(o.get);
  assert_string_equal(o.method, "GET");
  assert_string_equal(o.command, "get");
  cli_opts_free(&o);
  assert_int_equal(PARSE(&o, err, "--get", "-I", "--data-urlencode", "q=a b", "http://h/"),
                   CLI_ARGS_OK);
  assert_string_equal(o.method, "HEAD");
  cli_opts_free(&o);
  assert_int_equal(PARSE(&o, err, "get", "-G", "-d", "a=1", "http://h/"), CLI_ARGS_OK);
  cli_opts_free(&o);
  rc = PARSE(&o, err, "post", "-G", "-d", "a=1", "http://h/");
  usage_error("-G/--get sends GET (HEAD with -I); 'post' sends POST", rc, &o, err);
  rc = PARSE(&o, err, "get", "-d", "a=1", "http://h/");
  usage_error("-G/--get puts the data in the URL's query", rc, &o, err);
  /* -u: an Authorization header, which an -H of that name replaces; the password leaves argv. */
  char user[] = "ann:s3cr:et";
  char *argv[] = {"linkd", "get", "-u", user, "http://h/", NULL};
  assert_int_equal(cli_args_parse(5, argv, &o, err, sizeof err), CLI_ARGS_OK);
  assert_string_equal(flag_header(&o, "Authorization")->value, "Basic YW5uOnMzY3I6ZXQ=");
  assert_string_equal(user, "***********");
  cli_opts_free(&o);
  const char *b64[][2] = {{"a:", "Basic YTo="}, {":", "Basic Og=="}, {"ab:c", "Basic YWI6Yw=="}};
  for (int i = 0; i < 3; i++) {
    assert_int_equal(PARSE(&o, err, "get", "--user", b64[i][0], "http://h/"), CLI_ARGS_OK);
    assert_string_equal(flag_header(&o, "Authorization")->value, b64[i][1]);
    cli_opts_free(&o);
  }
  assert_int_equal(PARSE(&o, err, "get", "-u", "a:b", "-H", "Authorization: Bearer t", "http://h/"),
                   CLI_ARGS_OK);
  assert_int_equal(o.flags.nheaders, 1);
  assert_string_equal(o.flags.headers[0].value, "Bearer t");
  cli_opts_free(&o);
  rc = PARSE(&o, err, "get", "-u", "ann", "http://h/");
  usage_error("-u/--user 'ann' has no password", rc, &o, err);
  /* -A: a User-Agent header; -A '' removes it, as curl; an -H of that name wins. */
  assert_int_equal(PARSE(&o, err, "get", "-A", "me/2", "http://h/"), CLI_ARGS_OK);
  assert_string_equal(flag_header(&o, "User-Agent")->value, "me/2");
  cli_opts_free(&o);
  assert_int_equal(PARSE(&o, err, "get", "--user-agent", "", "http://h/"), CLI_ARGS_OK);
  assert_non_null(flag_header(&o, "User-Agent"));
  assert_null(flag_header(&o, "User-Agent")->value);
  cli_opts_free(&o);
  assert_int_equal(PARSE(&o, err, "get", "-H", "User-Agent: h/1", "-A", "a/1", "http://h/"),
                   CLI_ARGS_OK);
  assert_int_equal(o.flags.nheaders, 1);
  assert_string_equal(o.flags.headers[0].value, "h/1");
  cli_opts_free(&o);
  rc = PARSE(&o, err, "get", "-A", "bad\x01agent", "http://h/");
  usage_error("-A/--user-agent: ", rc, &o, err);
  rc = PARSE(&o, err, "get", "-f", "--fail-with-body", "http://h/");
  usage_error("-f/--fail and --fail-with-body do not mix", rc, &o, err);
  rc = PARSE(&o, err, "get", "-O", "-o", "x", "http://h/f");
  usage_error("-o/--output and -O/--remote-name do not mix", rc, &o, err);
  rc = PARSE(&o, err, "get", "--json", "-D", "-", "http://h/");
  usage_error("--json and -D - do not mix", rc, &o, err);
  rc = PARSE(&o, err, "get", "-D", "http://h/");
  usage_error("get needs a URL", rc, &o, err);
  /* -O's name: the path's last segment, as it is; none is a usage error. */
  char name[64];
  assert_int_equal(
      cli_remote_name("http://h/a/b%20c.txt?x=1#f", name, sizeof name, err, sizeof err), 0);
  assert_string_equal(name, "b%20c.txt");
  assert_int_equal(cli_remote_name("http://h/x", name, sizeof name, err, sizeof err), 0);
  assert_string_equal(name, "x");
  const char *none[] = {"http://h/", "http://h", "http://h/a/", "http://h/a/..", "http://h/."};
  for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
    if (cli_remote_name(none[i], name, sizeof name, err, sizeof err) == 0)
      fail_msg("-O took '%s' from '%s'", name, none[i]);
  assert_non_null(strstr(err, "has no file name"));
}

/* Long options are spelt out: getopt's abbreviations would read --retry as --retry-on. */
static void exact_long_options(void **state) {
  (void)state;
  cli_opts o;
  char err[512];
  int rc;
  rc = PARSE(&o, err, "get", "--retry", "5xx", "http://h/");
  usage_error("unknown option '--retry' (did you mean --retry-on?", rc, &o, err);
  rc = PARSE(&o, err, "get", "--retry=5xx", "http://h/");
  usage_error("unknown option '--retry' (did you mean --retry-on?", rc, &o, err);
  rc = PARSE(&o, err, "get", "--verb", "http://h/");
  usage_error("unknown option '--verb'", rc, &o, err);
  rc = PARSE(&o, err, "get", "http://h/", "--dead", "1s");
  usage_error("unknown option '--dead'", rc, &o, err);
  rc = PARSE(&o, err, "get", "--idem", "auto", "http://h/");
  usage_error("did you mean --idempotency-key?", rc, &o, err);
  /* A value that looks like an abbreviation is still a value. */
  assert_int_equal(PARSE(&o, err, "get", "-H", "--retry: x", "--output", "--json", "http://h/"),
                   CLI_ARGS_OK);
  assert_string_equal(o.flags.headers[0].name, "--retry");
  assert_string_equal(o.output, "--json");
  assert_false(o.json);
  cli_opts_free(&o);
  assert_int_equal(PARSE(&o, err, "post", "--data", "--retry", "--output", "--js", "http://h/"),
                   CLI_ARGS_OK);
  assert_string_equal(o.data[0].arg, "--retry");
  assert_string_equal(o.output, "--js");
  cli_opts_free(&o);
}

static void header_forms(void **state) {
  (void)state;
  cli_opts o;
  char err[512];
  assert_int_equal(PARSE(&o, err, "get", "-H", "X-Remove:", "-H", "X-Empty;", "-H",
                         "X-Pad:   spaced out  \t", "-H", "X-Colon: a:b", "-H",
                         "X-Tab: a\tb \xc3\xa9", "http://h/"),
                   CLI_ARGS_OK);
  assert_int_equal(o.flags.nheaders, 5);
  /* HTAB inside a value and obs-text bytes are allowed. */
  assert_string_equal(o.flags.headers[4].value, "a\tb \xc3\xa9");
  assert_string_equal(o.flags.headers[0].name, "X-Remove");
  assert_null(o.flags.headers[0].value);
  assert_string_equal(o.flags.headers[1].value, "");
  assert_string_equal(o.flags.headers[2].value, "spaced out");
  assert_string_equal(o.flags.headers[3].value, "a:b");
  cli_opts_free(&o);
}

static void layers_merge(void **state) {
  (void)state;
  /* Config [defaults] < [host] < flags, as request.c stacks them. */
  cli_settings a, b, eff;
  cli_settings_init(&a);
  cli_settings_init(&b);
  cli_settings_init(&eff);
  char err[256];
  assert_int_equal(cli_settings_set(&a, "deadline", "10s", "A", true, err, sizeof err), 0);
  assert_int_equal(cli_settings_set(&a, "retry-on", "-408", "A", true, err, sizeof err), 0);
  assert_int_equal(cli_settings_set(&a, "header", "X-Token: a", "A", true, err, sizeof err), 0);
  assert_int_equal(cli_settings_set(&a, "header", "X-Keep: k", "A", true, err, sizeof err), 0);
  assert_int_equal(cli_settings_set(&a, "header", "X-Drop: d", "A", true, err, sizeof err), 0);
  assert_int_equal(cli_settings_set(&b, "deadline", "2s", "B", false, err, sizeof err), 0);
  assert_int_equal(cli_settings_set(&b, "retry-on", "+client-4xx", "B", false, err, sizeof err), 0);
  assert_int_equal(cli_settings_set(&b, "header", "x-token: b", "B", false, err, sizeof err), 0);
  assert_int_equal(cli_settings_set(&b, "header", "X-Drop:", "B", false, err, sizeof err), 0);
  assert_int_equal(cli_settings_set(&b, "max-attempts", "2", "B", false, err, sizeof err), 0);
  assert_int_equal(cli_settings_merge(&eff, &a), 0);
  assert_int_equal(cli_settings_merge(&eff, &b), 0);
  assert_int_equal(eff.deadline, LK_SEC(2));
  assert_string_equal(eff.origin[CLI_F_DEADLINE], "B");
  assert_int_equal(eff.max_attempts, 2);
  uint64_t def = lk_retry_on_default();
  assert_int_equal(cli_retry_edit_apply(&eff.retry_on, def),
                   (def & ~LK_FAILURE_BIT(LK_F_HTTP_408)) | LK_FAILURE_BIT(LK_F_CLIENT_4XX));
  assert_int_equal(eff.nheaders, 2);
  assert_string_equal(eff.headers[0].name, "X-Keep");
  assert_string_equal(eff.headers[1].name, "x-token");
  assert_string_equal(eff.headers[1].value, "b");
  /* Unknown keys and config-only refusals. */
  assert_int_equal(cli_settings_set(&a, "deadlines", "1s", "A", true, err, sizeof err),
                   CLI_SET_UNKNOWN_KEY);
  assert_int_equal(cli_settings_set(&a, "idempotency-key", "k-1", "A", true, err, sizeof err),
                   CLI_SET_BAD_VALUE);
  assert_non_null(strstr(err, "a fixed key in a config file"));
  assert_int_equal(cli_settings_field("retry-on"), CLI_F_RETRY_ON);
  assert_string_equal(cli_settings_key(CLI_F_MAX_DELAY), "max-delay");
  cli_settings_free(&a);
  cli_settings_free(&b);
  cli_settings_free(&eff);
}

static void budget_specs(void **state) {
  (void)state;
  cli_budget_spec b;
  char err[256], buf[128];
  assert_int_equal(cli_budget_parse("ratio:20%", &b, err, sizeof err), 0);
  assert_true(b.enabled && b.kind == LK_BUDGET_RATIO && b.ratio.percent == 20.0);
  assert_string_equal(cli_budget_format(&b, buf, sizeof buf), "ratio:20%:min=10:ttl=10s");
  assert_int_equal(cli_budget_parse("ratio:5:min=0:ttl=2s", &b, err, sizeof err), 0);
  assert_true(b.ratio.percent == 5.0 && b.ratio.min_retries_per_sec == 0);
  assert_int_equal(b.ratio.ttl, LK_SEC(2));
  assert_int_equal(cli_budget_parse("tokens:10:0.1", &b, err, sizeof err), 0);
  assert_true(b.kind == LK_BUDGET_TOKEN && b.token.max_tokens == 10 && b.token.token_ratio == 0.1);
  assert_string_equal(cli_budget_format(&b, buf, sizeof buf), "tokens:10:0.1");
  assert_int_equal(cli_budget_parse("token:2", &b, err, sizeof err), 0);
  assert_int_equal(cli_budget_parse("quota:500", &b, err, sizeof err), 0);
  assert_true(b.kind == LK_BUDGET_QUOTA && b.quota.capacity == 500 && b.quota.retry_cost == 5);
  assert_string_equal(cli_budget_format(&b, buf, sizeof buf), "quota:500:5:10");
  assert_int_equal(cli_budget_parse("quota:30:15", &b, err, sizeof err), 0);
  assert_true(b.quota.retry_cost == 15 && b.quota.timeout_cost == 15);
  assert_int_equal(cli_budget_parse("quota:30:3:7", &b, err, sizeof err), 0);
  assert_true(b.quota.retry_cost == 3 && b.quota.timeout_cost == 7);
  assert_int_equal(cli_budget_parse("none", &b, err, sizeof err), 0);
  assert_false(b.enabled);
  assert_string_equal(cli_budget_format(&b, buf, sizeof buf), "none");
  const char *bad[] = {
      "",         "ratio",        "ratio:",   "ratio:x",       "ratio:20%:foo=1", "ratio:20%:ttl=3",
      "tokens:",  "tokens:1:2:3", "quota:-5", "quota:5:1:2:3", "quota:3",         "ratio:2000%",
      "tokens:0", "bucket:1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (cli_budget_parse(bad[i], &b, err, sizeof err) == 0)
      fail_msg("budget '%s' accepted", bad[i]);
  /* The library's own validation shows through ("quota:3": retry cost 5 > capacity 3). */
  cli_budget_parse("quota:3", &b, err, sizeof err);
  assert_non_null(strstr(err, "'quota:3': "));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(minimal),      cmocka_unit_test(every_flag),
      cmocka_unit_test(cert_forms),   cmocka_unit_test(cert_forms),
      cmocka_unit_test(spellings),    cmocka_unit_test(help),
      cmocka_unit_test(usage_errors), cmocka_unit_test(header_forms),
      cmocka_unit_test(layers_merge), cmocka_unit_test(budget_specs),
      cmocka_unit_test(curl_habits),  cmocka_unit_test(exact_long_options),
      cmocka_unit_test(curl_options),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
