/* SPDX-License-Identifier: MIT */
/* linkd/rand.h: random generators behind one small interface.
 *
 * The primitive is below(bound): a uniform integer in [0, bound), bound >= 1, the contract of
 * Java's RandomGenerator.nextLong(bound). Policies take an lk_rand * so tests can seed or replay
 * every draw.
 *
 * Implementations (embed them; none allocates):
 *  - lk_rand_fast:     xoshiro256** seeded from getrandom(); the default.
 *  - lk_rand_fast_seeded(): the same generator from a fixed 64-bit seed, for tests.
 *  - lk_rand_l64x128:  JDK-compatible L64X128MixRandom: same seeding from a 64-bit seed and the
 *                      same bounded draw (RandomSupport.boundedNextLong), so numbers printed by a
 *                      Java program that used RandomGeneratorFactory.of("L64X128MixRandom")
 *                      .create(seed) are reproduced exactly.
 *
 * Thread-safety: a generator belongs to one thread at a time (no internal locking).
 */
#ifndef LINKD_RAND_H
#define LINKD_RAND_H

#include <linkd/common.h>

LK_BEGIN_DECLS

typedef struct lk_rand lk_rand;
struct lk_rand {
  /* Uniform in [0, bound). bound == 0 returns 0 (never a valid request; no state consumed). */
  uint64_t (*below)(lk_rand *self, uint64_t bound);
  /* 64 uniformly random bits. */
  uint64_t (*next64)(lk_rand *self);
};

/* Convenience wrappers. */
static inline uint64_t lk_rand_below(lk_rand *r, uint64_t bound) { return r->below(r, bound); }
static inline uint64_t lk_rand_next64(lk_rand *r) { return r->next64(r); }

typedef struct lk_rand_fast {
  lk_rand base;
  uint64_t s[4];
} lk_rand_fast;

/* Seeds from getrandom(). Returns 0, or LK_ESYS if the kernel gave no entropy (the generator is
 * then seeded from the clock and the address of `r`, still usable for jitter). */
LK_EXPORT int lk_rand_fast_init(lk_rand_fast *r);
/* Deterministic seeding (splitmix64 expansion of `seed`). */
LK_EXPORT void lk_rand_fast_seeded(lk_rand_fast *r, uint64_t seed);

typedef struct lk_rand_l64x128 {
  lk_rand base;
  uint64_t a, s, x0, x1;
} lk_rand_l64x128;

/* Same state as Java's `new L64X128MixRandom(seed)`. */
LK_EXPORT void lk_rand_l64x128_init(lk_rand_l64x128 *r, int64_t seed);

/* Fills `buf` with `len` bytes from the kernel (getrandom, retried on EINTR). 0 or LK_ESYS. */
LK_EXPORT int lk_os_random(void *buf, size_t len);

LK_END_DECLS

#endif
