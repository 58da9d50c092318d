/* SPDX-License-Identifier: MIT */
/* How many of libraryd's loans carry an idempotency key, from its own records (an open store),
 * for the tests that check a loan was applied once (libraryd's and the outbox's). */
#ifndef LINKD_TEST_LOANS_H
#define LINKD_TEST_LOANS_H

#include "store.h"

#include <linkd/error.h>

#include <stdint.h>
#include <string.h>

typedef struct loans_key_count {
  const char *key;
  int64_t n;
} loans_key_count;

static inline int loans_count_cb(void *arg, const char *tenant, int64_t book, const char *id,
                                 int64_t count) {
  (void)tenant;
  (void)book;
  loans_key_count *k = arg;
  if (strcmp(id, k->key) == 0)
    k->n += count;
  return 0;
}

/* The loans of `s` with idempotency key `key` (any tenant); -1 if the store cannot be read. */
static inline int64_t loans_with_key_in(lk_store *s, const char *key) {
  loans_key_count k = {key, 0};
  return lk_store_loan_groups(s, true, false, 1000000, loans_count_cb, &k) == LK_OK ? k.n : -1;
}

#endif
