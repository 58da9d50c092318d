/* SPDX-License-Identifier: MIT */
/* Shared helpers for linkd's tests. */
#ifndef LINKD_TESTUTIL_H
#define LINKD_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

/* Allocations are counted in every build: by wrapping glibc's allocator, or under a sanitizer
 * (whose runtime replaces malloc) through its malloc hook; lk_test_alloc_count_start aborts when
 * the counter does not see a probe allocation, so a "zero allocations" assert always means
 * something. LK_TEST_ALLOC_COUNTING is 1 where counts are glibc's own: guard "exactly N" asserts
 * with it (a sanitizer's interceptors may allocate differently). */
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

/* Counts heap allocations made through malloc/calloc/realloc while enabled, process-wide. Used to
 * prove "zero allocations" claims; aborts when the counter is not live. */
void lk_test_alloc_count_start(void);
/* Stops counting and returns the number of allocations since start. */
uint64_t lk_test_alloc_count_stop(void);

/* A seed for property tests: $LINKD_TEST_SEED if set, else a fixed value (printed either way). */
uint64_t lk_test_seed(void);

#endif
