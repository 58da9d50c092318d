/* SPDX-License-Identifier: MIT */
/* libraryd without memory, on a server in this process: every allocation its threads make while
 * answering one keyed loan fails in turn (allocfail_nth_elsewhere: the test's own thread, the
 * client, is left alone), libraryd's own and jansson's; libmicrohttpd and SQLite allocate
 * through their own calls. Whatever the first answer was (201, or an error), the same request
 * sent again with all its memory is answered 201, and the store holds exactly one loan for the
 * key: no memory loses nothing and applies nothing twice. Under ASan in CI, nothing leaks. */
#include "allocfail.h"
#include "dbdir.h"
#include "harness.h"
#include "inproc.h"
#include "loans.h"
#include "store.h"

#include <linkd/error.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void test_every_allocation_of_a_keyed_loan_fails_in_turn(void **state) {
  const fixture *f = *state;
  lk_store_config scfg;
  lk_store_config_init_default(&scfg);
  scfg.path = f->path;
  lk_store *store = NULL;
  char err[256] = "";
  assert_int_equal(lk_store_open(&scfg, &store, err, sizeof err), LK_OK);
  lk_server *srv = inproc_start(store);
  int port = lk_server_port(srv);
  int64_t book = lib_create_book(port, 1000000);
  assert_true(book > 0);
  char path[64];
  snprintf(path, sizeof path, "/books/%lld/loans", (long long)book);
  long n = 1, hits = 0;
  for (;; n++) {
    assert_true(n < 100000);
    char key[64], hkey[96];
    snprintf(key, sizeof key, "nomem-%ld", n);
    snprintf(hkey, sizeof hkey, "Idempotency-Key: %s", key);
    const char *headers[] = {hkey, "X-Tenant: nomem", NULL};
    http_res r;
    allocfail_nth_elsewhere(n);
    http_send(port, "POST", path, headers, "{\"borrower\":\"ada\"}", &r);
    bool hit = allocfail_end();
    long first = r.status;
    http_res_free(&r);
    if (!hit) {
      assert_int_equal(first, 201);
      break;
    }
    hits++;
    /* a 409 (the key's first attempt still marked running) is retried, as a client would */
    long again = 0;
    for (int i = 0; i < 50; i++) {
      http_send(port, "POST", path, headers, "{\"borrower\":\"ada\"}", &r);
      again = r.status;
      http_res_free(&r);
      if (again != 409)
        break;
      sleep_ms(20);
    }
    if (again != 201)
      fail_msg("allocation %ld: first answer %ld, then %ld", n, first, again);
    assert_int_equal(loans_with_key_in(store, key), 1);
  }
  assert_true(hits > 20);
  lk_server_free(srv);
  lk_store_close(store);
}

/* jansson's allocations (the request body parsed, the answer built) go through the test's
 * malloc, and so through allocfail's wrapper, too. */
static void *json_malloc(size_t n) { return malloc(n); }

int main(void) {
  json_set_alloc_funcs(json_malloc, free);
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_every_allocation_of_a_keyed_loan_fails_in_turn,
                                      dbdir_setup, dbdir_teardown),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  curl_global_cleanup();
  return rc;
}
