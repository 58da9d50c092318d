/* SPDX-License-Identifier: MIT */
/* The test servers start, answer real queries, survive a crash and restart, and clean up. */
#include "tmpsrv.h"

#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

static void pg_exec_ok(const char *conninfo, const char *sql, const char *want) {
  PGconn *c = PQconnectdb(conninfo);
  assert_int_equal(PQstatus(c), CONNECTION_OK);
  PGresult *r = PQexec(c, sql);
  if (want) {
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_string_equal(PQgetvalue(r, 0, 0), want);
  } else {
    assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
  }
  PQclear(r);
  PQfinish(c);
}

static void test_pg(void **state) {
  (void)state;
  lk_tmpsrv s;
  assert_int_equal(lk_tmpsrv_pg_start(&s), 0);
  assert_true(s.port > 0);
  char ci[200];
  lk_tmpsrv_pg_conninfo(&s, ci, sizeof ci);
  pg_exec_ok(ci, "CREATE TABLE t (v int)", NULL);
  pg_exec_ok(ci, "INSERT INTO t VALUES (42)", NULL);
  /* A crash loses nothing committed, and the server comes back on the same port. */
  assert_int_equal(lk_tmpsrv_stop(&s, SIGKILL), 0);
  assert_false(lk_tmpsrv_ready(&s));
  assert_int_equal(lk_tmpsrv_restart(&s), 0);
  pg_exec_ok(ci, "SELECT v FROM t", "42");
  char dir[256];
  strcpy(dir, s.dir);
  lk_tmpsrv_destroy(&s);
  struct stat st;
  assert_int_not_equal(stat(dir, &st), 0);
}

static void test_redis(void **state) {
  (void)state;
  lk_tmpsrv s;
  assert_int_equal(lk_tmpsrv_redis_start(&s), 0);
  redisContext *c = redisConnect("127.0.0.1", s.port);
  assert_non_null(c);
  assert_int_equal(c->err, 0);
  redisReply *r = redisCommand(c, "INCRBY k %d", 5);
  assert_non_null(r);
  assert_int_equal(r->type, REDIS_REPLY_INTEGER);
  assert_int_equal(r->integer, 5);
  freeReplyObject(r);
  redisFree(c);
  assert_int_equal(lk_tmpsrv_stop(&s, SIGKILL), 0);
  c = redisConnect("127.0.0.1", s.port);
  assert_true(c == NULL || c->err != 0);
  redisFree(c);
  assert_int_equal(lk_tmpsrv_restart(&s), 0);
  assert_true(lk_tmpsrv_ready(&s));
  lk_tmpsrv_destroy(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_pg), cmocka_unit_test(test_redis)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
