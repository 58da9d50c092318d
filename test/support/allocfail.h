/* SPDX-License-Identifier: MIT */
/* allocfail: allocation failure on cue, for tests of what linkd does without memory. A test
 * program built with linkd_fail_allocations() (test/CMakeLists.txt) has every malloc, calloc,
 * realloc, aligned_alloc, strdup and strndup of its own and of the statically linked linkd code
 * go through the wrappers in allocfail.c (-Wl,--wrap; shared libraries such as libcurl or SQLite
 * keep their own). */
#ifndef LINKD_TEST_ALLOCFAIL_H
#define LINKD_TEST_ALLOCFAIL_H

#include <stdbool.h>
#include <stddef.h>

/* The n-th allocation of the calling thread from now fails (n >= 1; 0 disarms). */
void allocfail_nth(long n);
/* The n-th allocation from now on any thread but this one fails (a server's threads, when this
 * one is the test's client); 0 disarms. */
void allocfail_nth_elsewhere(long n);
/* Whether the failure armed by allocfail_nth() or allocfail_nth_elsewhere() has happened. */
bool allocfail_hit(void);
/* Disarms; whether the armed failure happened. */
bool allocfail_end(void);
/* The next malloc of exactly `size` bytes, on any thread, fails (0 disarms). */
void allocfail_size(size_t size);
/* Whether that failure is still to come. */
bool allocfail_size_pending(void);

#endif
