/* Shared helpers for linkd's tests. */
#ifndef LINKD_TESTUTIL_H
#define LINKD_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

/* LK_TEST_ALLOC_COUNTING is 1 where allocations are really counted: sanitizer runtimes replace
 * malloc themselves, so there the hook is absent and counts stay 0. Guard "exactly N" asserts
 * with it; "zero allocations" asserts hold either way. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LK_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) ||                         \
    __has_feature(memory_sanitizer)
#define LK_TEST_SANITIZED 1
#endif
#endif
#ifdef LK_TEST_SANITIZED
#define LK_TEST_ALLOC_COUNTING 0
#else
#define LK_TEST_ALLOC_COUNTING 1
#endif

/* Counts heap allocations made through malloc/calloc/realloc while enabled, process-wide, by
 * wrapping the glibc allocator (__libc_malloc & co). Used to prove "zero allocations" claims. */
void lk_test_alloc_count_start(void);
/* Stops counting and returns the number of allocations since start. */
uint64_t lk_test_alloc_count_stop(void);

/* A seed for property tests: $LINKD_TEST_SEED if set, else a fixed value (printed either way). */
uint64_t lk_test_seed(void);

#endif
