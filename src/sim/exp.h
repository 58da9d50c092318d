/* SPDX-License-Identifier: MIT */
/* exp.h: exponential draws by the ziggurat method (Marsaglia and Tsang, 2000), from the engine's
 * own seeded generator. glibc's log was a tenth of the simulator's time (two draws per attempt:
 * the Poisson gap and the service time); here 98.9 % of the draws are one 64-bit number, one
 * table load, one comparison and one multiplication, and the rest fall back to exp or log.
 *
 * The density e^-x is covered by 256 layers of equal area: layer i > 0 is the rectangle under
 * the curve from 0 to x[i], layer 0 the base strip up to r = x[255] plus the tail beyond it. A
 * draw picks a layer with the low 8 bits and a point in it with the top 53: when the point lies
 * inside the part of the rectangle that is surely under the curve (below x[i-1]), it is the
 * value. Otherwise it is accepted if it is under the curve, or the tail is drawn (memoryless:
 * r + a fresh exponential), or the draw is repeated. The result is exactly exponential up to the
 * 53 bits of the double.
 *
 * Thread-safety: a table is read-only once built; build one per run.
 */
#ifndef LINKD_SIM_EXP_H
#define LINKD_SIM_EXP_H

#include <linkd/rand.h>

#include "core/rand_fast.h"

#include <math.h>
#include <stdint.h>

#define SIM_EXP_R 7.69711747013104972  /* x[255], the start of the tail */
#define SIM_EXP_V 3.949659822581572e-3 /* the area of each layer */

typedef struct sim_exp_table {
  uint64_t k[256]; /* a 53-bit point below k[i] is inside layer i's sure part */
  double w[256];   /* point (53 bits) * w[i] = x in layer i */
  double f[256];   /* e^-x[i] */
} sim_exp_table;

static inline void sim_exp_init(sim_exp_table *t) {
  const double m = 0x1p53;
  double de = SIM_EXP_R, te = de;
  double q = SIM_EXP_V / exp(-de); /* the base strip's width if it were a rectangle */
  t->k[0] = (uint64_t)(de / q * m);
  t->k[1] = 0;
  t->w[0] = q / m;
  t->w[255] = de / m;
  t->f[0] = 1.0;
  t->f[255] = exp(-de);
  for (int i = 254; i >= 1; i--) {
    de = -log(SIM_EXP_V / de + exp(-de));
    t->k[i + 1] = (uint64_t)(de / te * m);
    te = de;
    t->f[i] = exp(-de);
    t->w[i] = de / m;
  }
}

static inline double sim_exp_unit(lk_rand_fast *g) { /* (0, 1] */
  return (double)((lk_rand_fast_next64(g) >> 11) + 1) * 0x1p-53;
}

/* One exponential of mean 1. */
static inline double sim_exp_draw(const sim_exp_table *t, lk_rand_fast *g) {
  for (;;) {
    uint64_t u = lk_rand_fast_next64(g);
    unsigned i = (unsigned)(u & 255u);
    uint64_t j = u >> 11;
    double x = (double)j * t->w[i];
    if (j < t->k[i])
      return x;
    if (i == 0)
      return SIM_EXP_R - log(sim_exp_unit(g));
    if (t->f[i] + sim_exp_unit(g) * (t->f[i - 1] - t->f[i]) < exp(-x))
      return x;
  }
}

#endif
