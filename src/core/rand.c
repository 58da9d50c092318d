/* SPDX-License-Identifier: MIT */
#include <linkd/error.h>
#include <linkd/rand.h>

#include "rand_fast.h"

#include <errno.h>
#include <sys/random.h>
#include <time.h>

int lk_os_random(void *buf, size_t len) {
  unsigned char *p = buf;
  while (len > 0) {
    ssize_t n = getrandom(p, len, 0);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return LK_ESYS;
    }
    p += n;
    len -= (size_t)n;
  }
  return LK_OK;
}

static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

static uint64_t next_of(void *r) { return ((lk_rand *)r)->next64(r); }

/* Any generator's bounded draw (rand_fast.h: the JDK's boundedNextLong, bit for bit). */
static uint64_t bounded(lk_rand *r, uint64_t bound) { return lk__bounded(r, next_of, bound); }

/* --- xoshiro256** -------------------------------------------------------------------------- */
static uint64_t fast_next(lk_rand *self) { return lk__xoshiro_next(((lk_rand_fast *)self)->s); }

/* The generic draw on this generator's own numbers, inline (the same numbers as bounded). */
static uint64_t fast_below(lk_rand *self, uint64_t bound) {
  return lk__bounded(self, lk__fast_next64, bound);
}

void lk_rand_fast_seeded(lk_rand_fast *r, uint64_t seed) {
  r->base.next64 = fast_next;
  r->base.below = fast_below;
  for (int i = 0; i < 4; i++)
    r->s[i] = splitmix64(&seed);
}

int lk_rand_fast_init(lk_rand_fast *r) {
  uint64_t seed;
  int rc = lk_os_random(&seed, sizeof seed);
  if (rc != LK_OK) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)(uintptr_t)r;
  }
  lk_rand_fast_seeded(r, seed);
  return rc;
}

/* --- JDK L64X128MixRandom ------------------------------------------------------------------- */
#define GOLDEN_RATIO_64 UINT64_C(0x9e3779b97f4a7c15)
#define SILVER_RATIO_64 UINT64_C(0x6A09E667F3BCC909)
#define L64_M UINT64_C(0xd1342543de82ef95)

static uint64_t mix_murmur64(uint64_t z) {
  z = (z ^ (z >> 33)) * UINT64_C(0xff51afd7ed558ccd);
  z = (z ^ (z >> 33)) * UINT64_C(0xc4ceb9fe1a85ec53);
  return z ^ (z >> 33);
}

static uint64_t mix_stafford13(uint64_t z) {
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

static uint64_t mix_lea64(uint64_t z) {
  z = (z ^ (z >> 32)) * UINT64_C(0xdaba0b6eb09322e3);
  z = (z ^ (z >> 32)) * UINT64_C(0xdaba0b6eb09322e3);
  return z ^ (z >> 32);
}

static uint64_t l64_next(lk_rand *self) {
  lk_rand_l64x128 *r = (lk_rand_l64x128 *)self;
  uint64_t result = mix_lea64(r->s + r->x0);
  r->s = L64_M * r->s + r->a;
  uint64_t q0 = r->x0, q1 = r->x1;
  q1 ^= q0; /* xoroshiro128 v1.0 */
  q0 = lk__rotl(q0, 24);
  q0 = q0 ^ q1 ^ (q1 << 16);
  q1 = lk__rotl(q1, 37);
  r->x0 = q0;
  r->x1 = q1;
  return result;
}

void lk_rand_l64x128_init(lk_rand_l64x128 *r, int64_t seed) {
  uint64_t s = (uint64_t)seed ^ SILVER_RATIO_64;
  r->base.next64 = l64_next;
  r->base.below = bounded;
  r->a = mix_murmur64(s) | 1;
  r->s = 1;
  r->x0 = mix_stafford13(s);
  r->x1 = mix_stafford13(s + GOLDEN_RATIO_64);
  if ((r->x0 | r->x1) == 0) {
    r->x0 = GOLDEN_RATIO_64;
    r->x1 = SILVER_RATIO_64;
  }
}
