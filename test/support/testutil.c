/* SPDX-License-Identifier: MIT */
#include "testutil.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* glibc's real allocator entry points; wrapping them keeps counting independent of any interposer.
 * Sanitizer runtimes replace malloc themselves; there the counter is fed by their malloc hook. */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

static _Atomic int counting;
static _Atomic uint64_t allocations;

static void count_one(void) {
  if (atomic_load_explicit(&counting, memory_order_relaxed))
    atomic_fetch_add_explicit(&allocations, 1, memory_order_relaxed);
}

#ifdef LK_TEST_SANITIZED
/* sanitizer/allocator_interface.h (not shipped with gcc); in the ASan, TSan and MSan runtimes. */
extern int __sanitizer_install_malloc_and_free_hooks(void (*)(const volatile void *, size_t),
                                                     void (*)(const volatile void *));
static void on_malloc(const volatile void *p, size_t n) {
  (void)p;
  (void)n;
  count_one();
}
static void on_free(const volatile void *p) { (void)p; }
static void install_hooks(void) {
  static _Atomic int installed;
  if (!atomic_exchange(&installed, 1))
    __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
}
#else
static void install_hooks(void) {}
void *malloc(size_t n) {
  count_one();
  return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
  count_one();
  return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
  count_one();
  return __libc_realloc(p, n);
}
#endif

void lk_test_alloc_count_start(void) {
  install_hooks();
  atomic_store(&allocations, 0);
  atomic_store(&counting, 1);
  /* The counter must see an allocation, or every "zero allocations" assert would be vacuous. */
  uint64_t before = atomic_load(&allocations);
  void *volatile probe = malloc(1); /* volatile: the pair cannot be optimized out */
  free(probe);
  if (atomic_load(&allocations) == before) {
    fprintf(stderr, "testutil: the allocation counter saw no allocation; refusing to count\n");
    abort();
  }
  atomic_fetch_sub(&allocations, 1);
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
