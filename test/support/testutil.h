/* Shared helpers for linkd's tests. */
#ifndef LINKD_TESTUTIL_H
#define LINKD_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

/* Counts heap allocations made through malloc/calloc/realloc while enabled, process-wide, by
 * wrapping the glibc allocator (__libc_malloc & co). Used to prove "zero allocations" claims. */
void lk_test_alloc_count_start(void);
/* Stops counting and returns the number of allocations since start. */
uint64_t lk_test_alloc_count_stop(void);

/* A seed for property tests: $LINKD_TEST_SEED if set, else a fixed value (printed either way). */
uint64_t lk_test_seed(void);

#endif
