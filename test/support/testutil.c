#include "testutil.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* glibc's real allocator entry points; wrapping them keeps counting independent of any interposer
 * (sanitizer runtimes replace malloc themselves, so counting is disabled under them). */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

static _Atomic int counting;
static _Atomic uint64_t allocations;

#if LK_TEST_ALLOC_COUNTING
void *malloc(size_t n) {
  if (atomic_load_explicit(&counting, memory_order_relaxed))
    atomic_fetch_add_explicit(&allocations, 1, memory_order_relaxed);
  return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
  if (atomic_load_explicit(&counting, memory_order_relaxed))
    atomic_fetch_add_explicit(&allocations, 1, memory_order_relaxed);
  return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
  if (atomic_load_explicit(&counting, memory_order_relaxed))
    atomic_fetch_add_explicit(&allocations, 1, memory_order_relaxed);
  return __libc_realloc(p, n);
}
#endif

void lk_test_alloc_count_start(void) {
  atomic_store(&allocations, 0);
  atomic_store(&counting, 1);
}

uint64_t lk_test_alloc_count_stop(void) {
  atomic_store(&counting, 0);
  return atomic_load(&allocations);
}

uint64_t lk_test_seed(void) {
  const char *s = getenv("LINKD_TEST_SEED");
  uint64_t seed = s ? strtoull(s, NULL, 0) : UINT64_C(0x5eed1234abcd);
  fprintf(stderr, "LINKD_TEST_SEED=0x%llx\n", (unsigned long long)seed);
  return seed;
}
