/* SPDX-License-Identifier: MIT */
/* `linkd serve` in front of the real libraryd: with idempotency = inject, loans posted without a
 * key through a libraryd that resets 30 % of loan connections after committing them are
 * exactly-once: every call gets its 201, and the stock falls by exactly the number of calls.
 * With idempotency = pass the same client (no key) cannot be retried safely: the gateway does
 * not retry those resets, and the callers see the failures. */
#include "harness.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gwtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static lib_proc L;
static gw_proc G;

static int teardown(void **state) {
  (void)state;
  int rc = gw_stop(&G, 5000);
  lib_stop(&L);
  lib_cleanup(&L);
  return rc == 0 ? 0 : -1;
}

static void start(const char *idem, int64_t *book) {
  const char *args[] = {"--seed", "11", "--fault",
                        "route=POST /books/*/loans,kind=reset_after_processing,p=0.3", NULL};
  assert_int_equal(lib_start(&L, args), 0);
  *book = lib_create_book(L.port, 1000);
  assert_true(*book > 0);
  char cfg[1024];
  snprintf(cfg, sizeof cfg,
           "[listen]\naddress = 127.0.0.1:0\n\n[log]\naccess = %%ACCESS%%\n\n"
           "[cluster library]\nendpoint = 127.0.0.1:%d\n\n"
           "[route loans]\ncluster = library\nprefix = /books\nidempotency = %s\n"
           "max-attempts = 6\nbase = 2ms\nmax-delay = 10ms\njitter = none\nbudget = none\n"
           "breaker = none\n",
           L.port, idem);
  gw_start(&G, cfg);
}

enum { CALLS = 30 };

static void test_injected_keys_exactly_once(void **state) {
  (void)state;
  int64_t book;
  start("inject", &book);
  int64_t before = lib_stock(L.port, book);
  char path[64];
  snprintf(path, sizeof path, "/books/%lld/loans", (long long)book);
  int ok = 0, injected = 0;
  for (int i = 0; i < CALLS; i++) {
    gw_resp r;
    gw_request(G.port, "POST", path, "Content-Type: application/json\r\n",
               "{\"borrower\":\"gateway\"}", &r);
    ok += r.status == 201;
    char v[128];
    injected += gw_header(&r, "Linkd-Idempotency-Key-Injected", v, sizeof v) != NULL;
    gw_resp_free(&r);
  }
  assert_int_equal(ok, CALLS);
  assert_int_equal(injected, CALLS);
  assert_int_equal(lib_stock(L.port, book), before - CALLS);
  /* the faults did fire: some calls needed a retry (a replay of a committed loan) */
  int64_t end = gw_now_ms() + 2000;
  while (gw_access_lines(&G) < CALLS && gw_now_ms() < end)
    gw_sleep_ms(10);
  const char *log = gw_access(&G);
  int retried = 0;
  for (const char *p = log; (p = strstr(p, "\"attempts\":")); p++)
    retried += atoi(p + 11) > 1;
  printf("# %d of %d calls needed more than one attempt\n", retried, CALLS);
  assert_true(retried > 0);
}

static void test_pass_without_key_not_retried(void **state) {
  (void)state;
  int64_t book;
  start("pass", &book);
  int64_t before = lib_stock(L.port, book);
  char path[64];
  snprintf(path, sizeof path, "/books/%lld/loans", (long long)book);
  int ok = 0, failed = 0;
  for (int i = 0; i < CALLS; i++) {
    gw_resp r;
    gw_request(G.port, "POST", path, "Content-Type: application/json\r\n",
               "{\"borrower\":\"gateway\"}", &r);
    if (r.status == 201)
      ok++;
    else
      failed++;
    gw_resp_free(&r);
  }
  assert_true(failed > 0);
  /* each failure was committed before the reset and not sent again: no double loan */
  assert_int_equal(lib_stock(L.port, book), before - CALLS);
  assert_int_equal(ok + failed, CALLS);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_injected_keys_exactly_once, teardown),
      cmocka_unit_test_teardown(test_pass_without_key_not_retried, teardown),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  curl_global_cleanup();
  return rc;
}
