/* SPDX-License-Identifier: MIT */
/* allocfail.c: the wrappers behind allocfail.h (linked with -Wl,--wrap=malloc and the others). */
#include "allocfail.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

void *__real_malloc(size_t n);
void *__wrap_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void *__wrap_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__wrap_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
char *__wrap_strndup(const char *s, size_t n);
void *__real_aligned_alloc(size_t align, size_t n);
void *__wrap_aligned_alloc(size_t align, size_t n);

static _Thread_local long nth; /* this thread's countdown; 0 = none */
static _Thread_local bool nth_hit;
static _Thread_local bool armer; /* armed the other threads' countdown */
static _Atomic long others_nth;  /* the other threads' countdown; 0 = none */
static _Atomic bool others_hit;
static _Atomic size_t next_size; /* 0 = none */

void allocfail_nth(long n) {
  nth = n > 0 ? n : 0;
  nth_hit = false;
}

void allocfail_nth_elsewhere(long n) {
  armer = n > 0;
  atomic_store(&others_hit, false);
  atomic_store(&others_nth, n > 0 ? n : 0);
}

bool allocfail_hit(void) { return nth_hit || atomic_load(&others_hit); }

bool allocfail_end(void) {
  atomic_store(&others_nth, 0);
  bool hit = nth_hit || atomic_load(&others_hit);
  nth = 0;
  nth_hit = false;
  armer = false;
  atomic_store(&others_hit, false);
  return hit;
}

void allocfail_size(size_t size) { atomic_store(&next_size, size); }

bool allocfail_size_pending(void) { return atomic_load(&next_size) != 0; }

/* Whether this allocation is the one to fail. */
static bool fails(void) {
  if (nth > 0 && --nth == 0) {
    nth_hit = true;
    return true;
  }
  if (armer)
    return false;
  long v = atomic_load_explicit(&others_nth, memory_order_relaxed);
  while (v > 0 && !atomic_compare_exchange_weak(&others_nth, &v, v - 1)) {
  }
  if (v == 1) {
    atomic_store(&others_hit, true);
    return true;
  }
  return false;
}

void *__wrap_malloc(size_t n) {
  size_t want = atomic_load(&next_size);
  if (want && n == want && atomic_compare_exchange_strong(&next_size, &want, 0))
    return NULL;
  return fails() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size) { return fails() ? NULL : __real_calloc(n, size); }

void *__wrap_realloc(void *p, size_t n) { return fails() ? NULL : __real_realloc(p, n); }

char *__wrap_strdup(const char *s) { return fails() ? NULL : __real_strdup(s); }

char *__wrap_strndup(const char *s, size_t n) { return fails() ? NULL : __real_strndup(s, n); }

void *__wrap_aligned_alloc(size_t align, size_t n) {
  return fails() ? NULL : __real_aligned_alloc(align, n);
}
