/* SPDX-License-Identifier: MIT */
/* The daemon as operators meet it: SIGHUP reopens the log and reloads the fault rules, config
 * errors name the line and what was expected, database problems name their real cause. */
#include "harness.h"

#include <dirent.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  assert_int_equal(fclose(f), 0);
}

static int count_in(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  if (!f)
    return -1;
  char line[2048];
  int n = 0;
  while (fgets(line, sizeof line, f))
    n += strstr(line, needle) != NULL;
  fclose(f);
  return n;
}

/* Waits (bounded, 10 s) until `path` holds `want` lines containing needle. */
static bool wait_lines(const char *path, const char *needle, int want) {
  for (int i = 0; i < 2000; i++) {
    if (count_in(path, needle) >= want)
      return true;
    sleep_ms(5);
  }
  return false;
}

static long get_status(int port, const char *path) {
  http_res r;
  http_get(port, path, &r);
  long st = r.status;
  http_res_free(&r);
  return st;
}

static void test_sighup_reopens_log_and_reloads_faults(void **state) {
  (void)state;
  lib_proc p;
  char cfg[400], logf[400], rotated[400];
  /* The daemon's own directory comes from lib_start; the files are placed in it afterwards,
   * so start once to get it, then restart with the config. */
  assert_int_equal(lib_start(&p, NULL), 0);
  assert_int_equal(lib_stop(&p), 0);
  snprintf(cfg, sizeof cfg, "%s/libraryd.ini", p.dir);
  snprintf(logf, sizeof logf, "%s/run.log", p.dir);
  snprintf(rotated, sizeof rotated, "%s/run.log.1", p.dir);
  write_file(cfg, "[libraryd]\nseed = 5\nfault = route=GET /books/1,kind=status,code=503\n");
  const char *args[] = {"--config", cfg, "--log-file", logf, NULL};
  assert_int_equal(lib_restart(&p, args), 0);
  assert_int_equal(get_status(p.port, "/books/1"), 503);
  assert_int_equal(get_status(p.port, "/books/2"), 200);
  assert_true(wait_lines(logf, "/books/2", 1));

  /* Rotate the log and change the rules, then SIGHUP. */
  assert_int_equal(rename(logf, rotated), 0);
  write_file(cfg, "[libraryd]\nseed = 9\nfault = route=GET /books/2,kind=status,code=502\n");
  assert_int_equal(kill(p.pid, SIGHUP), 0);
  assert_true(wait_lines(logf, "SIGHUP: reloaded 1 fault rule(s), seed 9", 1));
  assert_int_equal(count_in(logf, "only a restart applies"), 0); /* faults and seed apply */
  assert_int_equal(get_status(p.port, "/books/1"), 200);
  assert_int_equal(get_status(p.port, "/books/2"), 502);
  assert_true(wait_lines(logf, "/books/2", 1)); /* new lines go to the new file */
  int old_lines = count_in(rotated, "/books/");
  http_res r;
  http_get(p.admin_port, "/admin/faults", &r);
  json_t *j = http_json(&r);
  assert_int_equal(json_integer_value(json_object_get(j, "seed")), 9);
  assert_int_equal(json_array_size(json_object_get(j, "rules")), 1);
  json_decref(j);
  http_res_free(&r);

  /* Settings fixed at start are named, not silently ignored; --port is a flag (it overrides the
   * file), so it has not changed. */
  write_file(cfg, "[libraryd]\nseed = 9\nfault = route=GET /books/2,kind=status,code=502\n"
                  "workers = 3\nqueue = 10\nport = 1\n");
  assert_int_equal(kill(p.pid, SIGHUP), 0);
  assert_true(
      wait_lines(logf, "SIGHUP: changed, but only a restart applies them: workers, queue\n", 1));

  /* A broken file on reload: reported, and the running rules stay. */
  write_file(cfg, "[libraryd]\nfault = route=GET /books/3,kind=nonsense\n");
  assert_int_equal(kill(p.pid, SIGHUP), 0);
  assert_true(wait_lines(logf, "configuration not reloaded", 1));
  assert_int_equal(count_in(logf, "libraryd.ini:2: fault ="), 1);
  assert_int_equal(get_status(p.port, "/books/2"), 502);
  assert_int_equal(get_status(p.port, "/books/3"), 200);
  assert_int_equal(count_in(rotated, "/books/"), old_lines); /* the old file is left alone */

  /* More rules than the table holds: refused whole, with the limit, and the running ones stay */
  char many[8192];
  size_t off = (size_t)snprintf(many, sizeof many, "[libraryd]\n");
  for (int i = 0; i < 65; i++)
    off += (size_t)snprintf(many + off, sizeof many - off,
                            "fault = route=GET /books/%d,kind=status,code=500\n", 100 + i);
  write_file(cfg, many);
  assert_int_equal(kill(p.pid, SIGHUP), 0);
  assert_true(wait_lines(logf, "configuration not reloaded", 2));
  assert_int_equal(count_in(logf, "too many: at most 64 fault rules"), 1);
  assert_int_equal(get_status(p.port, "/books/2"), 502);
  http_get(p.admin_port, "/admin/faults", &r);
  j = http_json(&r);
  assert_int_equal(json_array_size(json_object_get(j, "rules")), 1);
  json_decref(j);
  http_res_free(&r);

  assert_int_equal(lib_stop(&p), 0); /* still a clean drain after the reloads */
  struct stat st;
  char wal[400];
  snprintf(wal, sizeof wal, "%s-wal", p.db);
  assert_int_not_equal(stat(wal, &st), 0);
  unlink(cfg);
  unlink(logf);
  unlink(rotated);
  lib_cleanup(&p);
}

/* Each bad file: exit 2 and a message with file:line and what was expected. */
static void test_config_errors_name_the_line(void **state) {
  (void)state;
  static const struct {
    const char *text, *want;
  } cases[] = {
      {"[libraryd]\nseed = 3\nport = abc\n", ":3: port = 'abc': expected an integer in [0, 65535]"},
      {"seed = 3\ngarbage here\n", ":2: expected 'name = value', a [section] header"},
      {"seed = 3\n\ncolour = red\n", ":3: unknown key 'colour'"},
      {"; comment\nno-seed-data = maybe\n", ":2: no-seed-data = 'maybe': expected true/yes/1"},
      {"idle-timeout = 5\n", ":1: idle-timeout = '5': "},
      {"log-file =;x\n", ":1: log-file = ';x': a value may not start with ';'"},
      {"fault = kind=latency\nfault = route=x,kind=status\n", ":2: fault = 'route=x,kind=status'"},
      {"log-file =#x\n", ":1: log-file = '#x': a value may not start with ';' or '#'"},
      /* Only the lists repeat; a second value used to replace the first silently. */
      {"workers = 2\n[libraryd]\nworkers = 3\n",
       ":3: workers = '3': set twice (first on line 1; only fault and require-key repeat)"},
      {"no-seed-data = yes\nno-seed-data = no\n", ":2: no-seed-data = 'no': set twice"},
      /* '#' after a space starts a comment, as ';' does, so the error is on line 3. */
      {"workers = 2 # two\nseed = 4 ; four\n[libraryd] # main\nport = x # c\n",
       ":4: port = 'x': expected an integer"},
      /* An indented line is a line of its own: inih read it as the previous key's continuation
       * ("seed = 'port = x': set twice"). */
      {"[libraryd]\n  seed = 3\n  port = x\n", ":3: port = 'x': expected an integer"},
      {"\xef\xbb\xbf[libraryd]\n\tworkers = 2\n\tworkers = 3\n", ":3: workers = '3': set twice"},
  };
  char path[] = "/tmp/libraryd-cfg-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    write_file(path, cases[i].text);
    const char *args[] = {"--config", path, "--port", "0", NULL};
    char out[4096];
    int rc = lib_run_capture(args, false, out, sizeof out);
    char want[600];
    snprintf(want, sizeof want, "libraryd: %s%s", path, cases[i].want);
    if (rc != 2 || !strstr(out, want))
      fprintf(stderr, "case %zu: rc %d, got: %s\nwanted: %s\n", i, rc, out, want);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, want));
    assert_null(strstr(out, "bad line"));
  }
  /* A NUL byte would cut the value (C strings): refused, not applied in part. */
  static const char nul[] = "seed = 3\nport = 80\0junk\n";
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  assert_int_equal(fwrite(nul, 1, sizeof nul - 1, f), sizeof nul - 1);
  assert_int_equal(fclose(f), 0);
  const char *args[] = {"--config", path, "--port", "0", NULL};
  char out[4096], want[600];
  assert_int_equal(lib_run_capture(args, false, out, sizeof out), 2);
  snprintf(want, sizeof want, "libraryd: %s:2: a NUL byte: not a text file", path);
  assert_non_null(strstr(out, want));
  /* inih would cut a line at its 200-byte buffer and apply the rest as the next line. */
  char long_line[400];
  snprintf(long_line, sizeof long_line, "seed = 1\nfault = route=GET /books/1,code=%0250d\n", 503);
  write_file(path, long_line);
  assert_int_equal(lib_run_capture(args, false, out, sizeof out), 2);
  snprintf(want, sizeof want, "libraryd: %s:2: line too long (at most 198 characters)", path);
  assert_non_null(strstr(out, want));
  /* CR-only line ends made one line of the file: its [libraryd] header was read, the rest was
   * not, and libraryd started with none of the file's settings (workers = abc unnoticed) */
  write_file(path, "[libraryd]\rseed = 3\rworkers = abc\r");
  assert_int_equal(lib_run_capture(args, false, out, sizeof out), 2);
  snprintf(want, sizeof want,
           "libraryd: %s:1: a carriage return inside the line: lines end in LF or CRLF", path);
  assert_non_null(strstr(out, want));
  write_file(path, "[libraryd]\r\nworkers = abc\r\n"); /* CRLF: read, and its error told */
  assert_int_equal(lib_run_capture(args, false, out, sizeof out), 2);
  snprintf(want, sizeof want, "libraryd: %s:2:", path);
  assert_non_null(strstr(out, want));
  assert_null(strstr(out, "carriage return"));
  unlink(path);
}

/* What cannot be read as a config file is a usage error that names it, and reading is bounded:
 * a directory was taken for an empty file, /dev/zero was read for ever. */
static void test_config_file_unreadable(void **state) {
  (void)state;
  char out[4096];
  const char *dir[] = {"--config", "/tmp", "--port", "0", NULL};
  assert_int_equal(lib_run_capture(dir, false, out, sizeof out), 2);
  assert_non_null(strstr(out, "libraryd: cannot read config file /tmp: Is a directory"));
  double t0 = now_s();
  const char *zero[] = {"--config", "/dev/zero", "--port", "0", NULL};
  assert_int_equal(lib_run_capture(zero, false, out, sizeof out), 2);
  assert_non_null(strstr(out, "libraryd: cannot read config file /dev/zero: larger than 1 MiB"));
  assert_true(now_s() - t0 < 5.0);
}

/* Flags that used to pass parsing and fail later (or never) are usage errors that say why. */
static void test_flag_errors(void **state) {
  (void)state;
  static const struct {
    const char *flag, *value, *want;
  } cases[] = {
      {"--addr", "999.1.1.1", "libraryd: --addr '999.1.1.1': expected an IPv4 or IPv6 address"},
      {"--addr", "localhost", "libraryd: --addr 'localhost': expected an IPv4 or IPv6 address"},
      {"--admin-addr", "::1::", "libraryd: --admin-addr '::1::': expected an IPv4 or IPv6"},
      /* the file would never be written: no admin listener */
      {"--admin-port-file", "/tmp/ld-never",
       "--admin-port-file '/tmp/ld-never' needs --admin-port"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *args[] = {cases[i].flag, cases[i].value,          "--port", "0",
                          "--db",        "/nonexistent/never.db", NULL};
    char out[4096];
    int rc = lib_run_capture(args, false, out, sizeof out);
    if (rc != 2 || !strstr(out, cases[i].want))
      fprintf(stderr, "case %zu: rc %d, got: %s\nwanted: %s\n", i, rc, out, cases[i].want);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, cases[i].want));
  }
  /* A port file that cannot be written is named, and which one it is. */
  char dir[] = "/tmp/libraryd-pf-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char db[300], pf[300], out[4096], want[400];
  snprintf(db, sizeof db, "%s/library.db", dir);
  snprintf(pf, sizeof pf, "%s/missing/port", dir);
  const char *a1[] = {"--db", db, "--port", "0", "--port-file", pf, "--log", "off", NULL};
  assert_int_equal(lib_run_capture(a1, false, out, sizeof out), 1);
  snprintf(want, sizeof want, "libraryd: cannot write the port file %s: No such file", pf);
  assert_non_null(strstr(out, want));
  const char *a2[] = {"--db", db,      "--port", "0", "--admin-port", "0", "--admin-port-file",
                      pf,     "--log", "off",    NULL};
  assert_int_equal(lib_run_capture(a2, false, out, sizeof out), 1);
  snprintf(want, sizeof want, "libraryd: cannot write the admin port file %s: No such file", pf);
  assert_non_null(strstr(out, want));
  char f[400];
  static const char *const left[] = {"library.db", "library.db-wal", "library.db-shm"};
  for (size_t i = 0; i < sizeof left / sizeof left[0]; i++) {
    snprintf(f, sizeof f, "%s/%s", dir, left[i]);
    unlink(f);
  }
  assert_int_equal(rmdir(dir), 0);
}

/* Requests whose decoded path is not UTF-8, or long and full of control bytes: each still gets
 * exactly one access-log line, valid JSON in json mode (jansson refused the first kind, a fixed
 * buffer cut the second) and printable ASCII in text mode. */
static void test_access_log_hostile_paths(void **state) {
  (void)state;
  char many[1200] = "/books/";
  for (int i = 0; i < 330; i++)
    strcat(many, "%01");
  const struct {
    const char *method, *path;
  } rq[] = {{"GET", "/books/%ff"},
            {"POST", "/books/%c3%28/loans"},
            {"GET", many},
            {"GET", "/books/%c3%a9%20x%5c"}};
  size_t n = sizeof rq / sizeof rq[0];
  for (int mode = 0; mode < 2; mode++) {
    lib_proc p;
    const char *args[] = {"--log", mode ? "text" : "json", NULL};
    assert_int_equal(lib_start(&p, args), 0);
    for (size_t i = 0; i < n; i++) {
      http_res r;
      http_send(p.port, rq[i].method, rq[i].path, NULL, NULL, &r);
      assert_true(r.status >= 400);
      http_res_free(&r);
    }
    assert_int_equal(lib_stop(&p), 0);
    FILE *f = fopen(p.log, "r");
    assert_non_null(f);
    static char line[16384];
    char want_many[1200] = "/books/";
    memset(want_many + 7, 1, 330);
    want_many[337] = '\0';
    const char *want_json[] = {"/books/\xef\xbf\xbd", "/books/\xef\xbf\xbd(/loans", want_many,
                               "/books/\xc3\xa9 x\\"};
    const char *want_text[] = {" /books/\\xff 4", " /books/\\xc3(/loans 4", "\\x01\\x01 4",
                               " /books/\\xc3\\xa9\\x20x\\x5c 4"};
    /* A line is written when MHD ends the request, possibly after the next one's: any order. */
    int seen[4] = {0};
    size_t lines = 0;
    while (fgets(line, sizeof line, f)) {
      assert_non_null(strchr(line, '\n')); /* not cut */
      if (mode == 0) {
        if (line[0] != '{')
          continue;
        json_error_t e;
        json_t *j = json_loads(line, 0, &e);
        if (!j)
          fprintf(stderr, "not JSON (%s): %s", e.text, line);
        assert_non_null(j);
        const char *path = json_string_value(json_object_get(j, "path"));
        assert_non_null(path);
        for (size_t i = 0; i < n; i++)
          seen[i] += !strcmp(path, want_json[i]);
        json_decref(j);
      } else {
        if (!strstr(line, " tenant="))
          continue;
        for (const char *c = line; *c != '\n'; c++)
          assert_true(*c >= 0x20 && *c < 0x7f);
        for (size_t i = 0; i < n; i++)
          seen[i] += strstr(line, want_text[i]) != NULL;
      }
      lines++;
    }
    fclose(f);
    if (lines != n || seen[0] != 1 || seen[1] != 1 || seen[2] != 1 || seen[3] != 1)
      lib_dump_log(&p);
    lib_cleanup(&p);
    assert_int_equal(lines, n);
    for (size_t i = 0; i < n; i++)
      assert_int_equal(seen[i], 1);
  }
}

static void test_database_errors_name_the_cause(void **state) {
  (void)state;
  char dir[] = "/tmp/libraryd-dbdir-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char db[300], sub[200], out[4096];
  /* A missing directory. */
  snprintf(db, sizeof db, "%s/missing/library.db", dir);
  const char *a1[] = {"--db", db, "--port", "0", NULL};
  assert_int_equal(lib_run_capture(a1, false, out, sizeof out), 1);
  assert_non_null(strstr(out, "does not exist"));
  assert_null(strstr(out, "input/output error"));
  /* A directory the daemon may not write (it runs as nobody when the tests run as root). */
  snprintf(sub, sizeof sub, "%s/ro", dir);
  assert_int_equal(mkdir(sub, 0555), 0);
  assert_int_equal(chmod(sub, 0555), 0);
  assert_int_equal(chmod(dir, 0755), 0);
  snprintf(db, sizeof db, "%s/library.db", sub);
  const char *a2[] = {"--db", db, "--port", "0", NULL};
  assert_int_equal(lib_run_capture(a2, true, out, sizeof out), 1);
  if (!strstr(out, "is not writable"))
    fprintf(stderr, "got: %s\n", out);
  assert_non_null(strstr(out, "is not writable"));
  /* A read-only database file in a writable directory: refused at start. */
  assert_int_equal(chmod(sub, 0777), 0);
  lib_proc p; /* create the file with a real start */
  memset(&p, 0, sizeof p);
  snprintf(p.dir, sizeof p.dir, "%s", sub);
  snprintf(p.db, sizeof p.db, "%s", db);
  snprintf(p.log, sizeof p.log, "%s/libraryd.log", sub);
  assert_int_equal(lib_restart(&p, NULL), 0);
  assert_int_equal(lib_stop(&p), 0);
  assert_int_equal(chmod(db, 0444), 0);
  const char *a4[] = {"--db", db, "--port", "0", NULL};
  assert_int_equal(lib_run_capture(a4, true, out, sizeof out), 1);
  if (!strstr(out, "read-only"))
    fprintf(stderr, "got: %s\n", out);
  assert_non_null(strstr(out, "the database file is read-only"));
  chmod(db, 0644);
  lib_cleanup(&p); /* removes the files and sub */
  rmdir(dir);
}

/* Counts the daemon's threads named `name` (/proc/PID/task/TID/comm). */
static int threads_named(pid_t pid, const char *name) {
  char dir[64];
  snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.')
      continue;
    char path[400], comm[32] = "";
    snprintf(path, sizeof path, "%s/%s/comm", dir, e->d_name);
    FILE *f = fopen(path, "r");
    if (!f)
      continue;
    if (fgets(comm, sizeof comm, f)) {
      comm[strcspn(comm, "\n")] = '\0';
      n += !strcmp(comm, name);
    }
    fclose(f);
  }
  closedir(d);
  return n;
}

/* Profiles and top tell the threads apart: workers (and the waker and purge threads) carry a
 * name, not the main thread's. */
static void test_threads_are_named(void **state) {
  (void)state;
  lib_proc p;
  const char *args[] = {"--workers", "3", "--log", "off", NULL};
  assert_int_equal(lib_start(&p, args), 0);
  /* Counted before any assertion, so that a failure does not leave the daemon running. Each
   * thread names itself once running, which may be after the port file is written: wait. */
  int workers = 0, wakers = 0, purgers = 0;
  for (int i = 0; i < 400 && (workers != 3 || wakers != 1 || purgers != 1); i++, sleep_ms(5)) {
    workers = threads_named(p.pid, "lk-worker");
    wakers = threads_named(p.pid, "lk-waker");
    purgers = threads_named(p.pid, "lk-purge");
  }
  assert_int_equal(lib_stop(&p), 0);
  lib_cleanup(&p);
  assert_int_equal(workers, 3);
  assert_int_equal(wakers, 1);
  assert_int_equal(purgers, 1);
}

/* The longest duration there is (INT64_MAX ns) is accepted and saturates: the drain's end, an
 * idle connection's head allowance and the store's statement bound once overflowed (UBSan's
 * abort in the sanitizer build); a sub-second idle timeout is 1 s, not off. */
#define MAX_NS "9223372036854775807ns"
static void test_extreme_durations(void **state) {
  (void)state;
  lib_proc p;
  const char *args[] = {"--drain-timeout",
                        MAX_NS,
                        "--head-timeout",
                        MAX_NS,
                        "--body-timeout",
                        MAX_NS,
                        "--store-timeout",
                        MAX_NS,
                        "--idle-timeout",
                        "500ms",
                        "--log",
                        "off",
                        NULL};
  assert_int_equal(lib_start(&p, args), 0);
  long st = get_status(p.port, "/books/1");
  assert_int_equal(lib_stop(&p), 0); /* a clean drain, not an abort */
  lib_cleanup(&p);
  assert_int_equal(st, 200);

  /* A fault's stall and a slow body's interval, as long as a rule takes (1h): the client gives
   * up, the drain cuts the parked requests, and libraryd exits cleanly. */
  const char *faults[] = {"--fault",
                          "route=GET /books/2,kind=partial_stall,stall=1h",
                          "--fault",
                          "route=GET /books/3,kind=slow_body,interval=1h",
                          "--drain-timeout",
                          "200ms",
                          "--log",
                          "off",
                          NULL};
  assert_int_equal(lib_start(&p, faults), 0);
  http_res r2, r3;
  http_req q2 = {.path = "/books/2", .timeout_ms = 300},
           q3 = {.path = "/books/3", .timeout_ms = 300};
  int rc2 = http_do(p.port, &q2, &r2), rc3 = http_do(p.port, &q3, &r3);
  http_res_free(&r2);
  http_res_free(&r3);
  st = get_status(p.port, "/books/1");
  assert_int_equal(lib_stop(&p), 0);
  lib_cleanup(&p);
  assert_int_equal(rc2, -1); /* timed out */
  assert_int_equal(rc3, -1);
  assert_int_equal(st, 200);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sighup_reopens_log_and_reloads_faults),
      cmocka_unit_test(test_config_errors_name_the_line),
      cmocka_unit_test(test_config_file_unreadable),
      cmocka_unit_test(test_flag_errors),
      cmocka_unit_test(test_access_log_hostile_paths),
      cmocka_unit_test(test_database_errors_name_the_cause),
      cmocka_unit_test(test_threads_are_named),
      cmocka_unit_test(test_extreme_durations),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  curl_global_cleanup();
  return rc;
}
