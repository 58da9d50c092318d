/* SPDX-License-Identifier: MIT */
/* linkd/seed_example.h: the seed document's printed RetryPolicy example, reproduced.
 *
 * With L64X128MixRandom(42), maxAttempts=4, base=200ms, max=2000ms and jitter 0.5, the seed's
 * Java program prints seven lines; lk_seed_example() writes the same seven lines, byte for byte,
 * computed by lk_retry_decide() and lk_attempt_timeout(). It is the project's golden test and
 * what `linkd seed-example` prints.
 */
#ifndef LINKD_SEED_EXAMPLE_H
#define LINKD_SEED_EXAMPLE_H

#include <linkd/common.h>

LK_BEGIN_DECLS
/* Writes the seven lines (each ending in '\n', NUL-terminated) into buf. Returns the length, or
 * LK_ETOOBIG if cap is too small (512 bytes is enough; buf may be NULL when cap is 0), or
 * LK_EINVAL for a NULL buf with cap > 0. Thread-safe (no shared state). */
LK_EXPORT int lk_seed_example(char *buf, size_t cap);
LK_END_DECLS

#endif
