/* SPDX-License-Identifier: MIT */
/* examples/exec_pg and examples/exec_redis as real processes against a real PostgreSQL and a
 * real redis-server that this test starts in a temporary directory on a free port: success, a
 * refused connection retried until the restarted server answers, a failure after the statement
 * was sent (not retried unless idempotent), and a permanent error (never retried). */
#include "tmpsrv.h"

#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

typedef struct proc {
  pid_t pid;
  char out_path[64], err_path[64];
  char out[4096], err[8192];
} proc;

static void spawn_proc(proc *p, char *const argv[]) {
  memset(p, 0, sizeof *p);
  strcpy(p->out_path, "/tmp/lk_exec_ex_out.XXXXXX");
  strcpy(p->err_path, "/tmp/lk_exec_ex_err.XXXXXX");
  int fo = mkstemp(p->out_path), fe = mkstemp(p->err_path);
  assert_true(fo >= 0 && fe >= 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fo, 1);
  posix_spawn_file_actions_adddup2(&fa, fe, 2);
  assert_int_equal(posix_spawn(&p->pid, argv[0], &fa, NULL, argv, environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  close(fo);
  close(fe);
}

static void slurp(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  size_t n = fread(buf, 1, cap - 1, f);
  buf[n] = '\0';
  fclose(f);
  unlink(path);
}

/* Waits for the process (at most 60 s, then kills it and fails) and returns its exit status. */
static int wait_proc(proc *p) {
  int st = 0;
  for (int i = 0; i < 6000; i++) {
    pid_t r = waitpid(p->pid, &st, WNOHANG);
    if (r == p->pid)
      break;
    if (i == 5999) {
      kill(p->pid, SIGKILL);
      waitpid(p->pid, &st, 0);
      fail_msg("example did not finish within 60 s");
    }
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  slurp(p->out_path, p->out, sizeof p->out);
  slurp(p->err_path, p->err, sizeof p->err);
  printf("--- %s", p->err);
  assert_true(WIFEXITED(st));
  return WEXITSTATUS(st);
}

static int run(proc *p, char *const argv[]) {
  spawn_proc(p, argv);
  return wait_proc(p);
}

static int count(const char *s, const char *needle) {
  int n = 0;
  for (const char *q = s; (q = strstr(q, needle)); q += strlen(needle))
    n++;
  return n;
}

static void test_pg(void **state) {
  (void)state;
  lk_tmpsrv s;
  assert_int_equal(lk_tmpsrv_pg_start(&s), 0);
  char ci[200];
  lk_tmpsrv_pg_conninfo(&s, ci, sizeof ci);
  proc p;

  char *ok[] = {EXEC_PG_PATH, "-v", ci, "SELECT 41 + 1", NULL};
  assert_int_equal(run(&p, ok), 0);
  assert_string_equal(p.out, "42\n");
  assert_int_equal(count(p.err, "attempt "), 1);

  /* the backend is terminated while it runs the statement: sent, so not retried... */
  char *term[] = {EXEC_PG_PATH, "-v", ci, "SELECT pg_terminate_backend(pg_backend_pid())", NULL};
  assert_int_equal(run(&p, term), 1);
  assert_int_equal(count(p.err, "attempt "), 1);
  assert_non_null(strstr(p.err, "sent=1"));
  assert_non_null(strstr(p.err, "ENOTRETRYABLE"));
  /* ...unless the statement is idempotent */
  char *term_i[] = {
      EXEC_PG_PATH, "-v", "-i", "-n", "3", ci, "SELECT pg_terminate_backend(pg_backend_pid())",
      NULL};
  assert_int_equal(run(&p, term_i), 1);
  assert_int_equal(count(p.err, "attempt "), 3);
  assert_non_null(strstr(p.err, "EATTEMPTS"));

  /* a permanent error: never retried, idempotent or not */
  char *div[] = {EXEC_PG_PATH, "-v", "-i", ci, "SELECT 1 / 0", NULL};
  assert_int_equal(run(&p, div), 1);
  assert_int_equal(count(p.err, "attempt "), 1);
  assert_non_null(strstr(p.err, "CLIENT_4XX"));
  assert_non_null(strstr(p.err, "division by zero"));

  /* refused while the server is down: retried (never sent) until it is back */
  assert_int_equal(lk_tmpsrv_stop(&s, SIGINT), 0);
  char *back[] = {EXEC_PG_PATH, "-v", "-d", "40000", "-n", "64", ci, "SELECT 7", NULL};
  spawn_proc(&p, back);
  struct timespec ts = {0, 300 * 1000 * 1000};
  nanosleep(&ts, NULL);
  assert_int_equal(lk_tmpsrv_restart(&s), 0);
  assert_int_equal(wait_proc(&p), 0);
  assert_string_equal(p.out, "7\n");
  assert_true(count(p.err, "attempt ") >= 2);
  assert_non_null(strstr(p.err, "attempt 1 "));
  assert_non_null(strstr(p.err, "CONNECT_REFUSED sent=0 -> retry CONNECT_REFUSED"));
  lk_tmpsrv_destroy(&s);
}

static void test_redis(void **state) {
  (void)state;
  lk_tmpsrv s;
  assert_int_equal(lk_tmpsrv_redis_start(&s), 0);
  char port[16];
  snprintf(port, sizeof port, "%d", s.port);
  proc p;

  char *set[] = {EXEC_REDIS_PATH, "-v", "127.0.0.1", port, "SET", "k", "v", NULL};
  assert_int_equal(run(&p, set), 0);
  assert_string_equal(p.out, "OK\n");
  char *get[] = {EXEC_REDIS_PATH, "127.0.0.1", port, "GET", "k", NULL};
  assert_int_equal(run(&p, get), 0);
  assert_string_equal(p.out, "v\n");

  /* an error reply: permanent, never retried */
  char *incr[] = {EXEC_REDIS_PATH, "-v", "-i", "127.0.0.1", port, "INCR", "k", NULL};
  assert_int_equal(run(&p, incr), 1);
  assert_int_equal(count(p.err, "attempt "), 1);
  assert_non_null(strstr(p.err, "CLIENT_4XX"));

  /* no reply within the attempt's 200 ms (the server blocks for 2 s): sent, not retried... */
  char *blpop[] = {EXEC_REDIS_PATH, "-v",     "-t", "200", "127.0.0.1", port,
                   "BLPOP",         "nolist", "2",  NULL};
  assert_int_equal(run(&p, blpop), 1);
  assert_int_equal(count(p.err, "attempt "), 1);
  assert_non_null(strstr(p.err, "READ_TIMEOUT sent=1"));
  assert_non_null(strstr(p.err, "ENOTRETRYABLE"));
  /* ...unless idempotent */
  char *blpop_i[] = {EXEC_REDIS_PATH, "-v", "-i",    "-n",     "2", "-t", "200",
                     "127.0.0.1",     port, "BLPOP", "nolist", "2", NULL};
  assert_int_equal(run(&p, blpop_i), 1);
  assert_int_equal(count(p.err, "attempt "), 2);
  assert_non_null(strstr(p.err, "EATTEMPTS"));

  /* refused while the server is down: retried until it is back */
  assert_int_equal(lk_tmpsrv_stop(&s, SIGKILL), 0);
  char *ping[] = {EXEC_REDIS_PATH, "-v", "-d",   "20000", "-n", "64",
                  "127.0.0.1",     port, "PING", NULL};
  spawn_proc(&p, ping);
  struct timespec ts = {0, 300 * 1000 * 1000};
  nanosleep(&ts, NULL);
  assert_int_equal(lk_tmpsrv_restart(&s), 0);
  assert_int_equal(wait_proc(&p), 0);
  assert_string_equal(p.out, "PONG\n");
  assert_non_null(strstr(p.err, "CONNECT_REFUSED sent=0 -> retry CONNECT_REFUSED"));
  lk_tmpsrv_destroy(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pg),
      cmocka_unit_test(test_redis),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
