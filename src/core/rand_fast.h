/* SPDX-License-Identifier: MIT */
/* rand_fast.h: lk_rand_fast's generator (xoshiro256**) and lk_rand's bounded draw as inline
 * functions; not installed. rand.c builds lk_rand_fast's function pointers from them, and the
 * simulator, which draws several numbers per simulated attempt on one thread, calls them
 * directly: the same numbers as through r->base.next64 / r->base.below, without two indirect
 * calls per draw (a seventh of the simulator's instructions went to those calls). */
#ifndef LINKD_CORE_RAND_FAST_H
#define LINKD_CORE_RAND_FAST_H

#include <linkd/rand.h>

#include <stdint.h>

static inline uint64_t lk__rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* xoshiro256** (Blackman and Vigna): the next 64 bits of state s. */
static inline uint64_t lk__xoshiro_next(uint64_t s[4]) {
  uint64_t result = lk__rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = lk__rotl(s[3], 45);
  return result;
}

/* The JDK's RandomSupport.boundedNextLong(rng, bound) for bound in [1, 2^63), bit for bit, on
 * any generator: next(g) gives its 64-bit numbers (a constant function here is inlined). A power
 * of two masks one draw; otherwise take u = r >>> 1 and reject the over-represented top
 * candidates. Bounds >= 2^63 (beyond Java's long) use plain rejection on all 64 bits. */
static inline uint64_t lk__bounded(void *g, uint64_t (*next)(void *), uint64_t bound) {
  if (bound == 0)
    return 0;
  uint64_t m = bound - 1;
  uint64_t x = next(g);
  if ((bound & m) == 0)
    return x & m;
  if (bound <= (uint64_t)INT64_MAX) {
    /* Java: for (u = r >>> 1; u + m - (r = u % bound) < 0; u = next() >>> 1); in signed 64-bit. */
    for (uint64_t u = x >> 1;; u = next(g) >> 1) {
      uint64_t res = u % bound;
      if ((int64_t)(u + m - res) >= 0)
        return res;
    }
  }
  /* bound > 2^63: only [0, bound) is evenly represented; redraw the rest (p < 1/2). */
  while (x >= bound)
    x = next(g);
  return x;
}

static inline uint64_t lk__fast_next64(void *g) { return lk__xoshiro_next(((lk_rand_fast *)g)->s); }

/* r->base.next64(&r->base) and r->base.below(&r->base, bound) of a generator set up by
 * lk_rand_fast_seeded or lk_rand_fast_init, inline. */
static inline uint64_t lk_rand_fast_next64(lk_rand_fast *r) { return lk__xoshiro_next(r->s); }
static inline uint64_t lk_rand_fast_below(lk_rand_fast *r, uint64_t bound) {
  return lk__bounded(r, lk__fast_next64, bound);
}

#endif
