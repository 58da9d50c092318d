/* SPDX-License-Identifier: MIT */
/* heap.h: the simulator's event queue, a 4-ary min-heap of 16-byte events keyed by time.
 *
 * A 4-ary heap halves the depth of a binary one and keeps a node's children in one cache line;
 * events are plain values (no pointers), so a push or pop touches only the array. The array grows
 * by doubling when full and never shrinks: in a steady state nothing allocates. Ties in time pop
 * in an order fixed by the sequence of pushes and pops, so a run is reproducible.
 *
 * Thread-safety: one heap belongs to one thread.
 */
#ifndef LINKD_SIM_HEAP_H
#define LINKD_SIM_HEAP_H

#include <stdint.h>
#include <stdlib.h>

typedef struct sim_ev {
  int64_t t;
  uint32_t idx; /* the call, job, group or trigger the event is about */
  uint32_t tg;  /* type << 24 | generation (24 bits) */
} sim_ev;

typedef struct sim_heap {
  sim_ev *a;
  uint32_t n, cap;
} sim_heap;

/* 0, or -1 when out of memory (the heap is unchanged). */
static inline int sim_heap_push(sim_heap *h, sim_ev e) {
  if (h->n == h->cap) {
    uint32_t cap = h->cap ? h->cap * 2 : 1024;
    sim_ev *a = realloc(h->a, (size_t)cap * sizeof *a);
    if (!a)
      return -1;
    h->a = a;
    h->cap = cap;
  }
  uint32_t i = h->n++;
  sim_ev *a = h->a;
  while (i > 0) {
    uint32_t p = (i - 1) >> 2;
    if (a[p].t <= e.t)
      break;
    a[i] = a[p];
    i = p;
  }
  a[i] = e;
  return 0;
}

/* Removes the earliest event into *out; the heap must not be empty. */
static inline void sim_heap_pop(sim_heap *h, sim_ev *out) {
  sim_ev *a = h->a;
  *out = a[0];
  sim_ev last = a[--h->n];
  uint32_t n = h->n, i = 0;
  for (;;) {
    uint32_t c = (i << 2) + 1;
    if (c >= n)
      break;
    uint32_t best = c;
    int64_t bt = a[c].t;
    uint32_t end = c + 4 < n ? c + 4 : n;
    for (uint32_t k = c + 1; k < end; k++) {
      if (a[k].t < bt) {
        bt = a[k].t;
        best = k;
      }
    }
    if (bt >= last.t)
      break;
    a[i] = a[best];
    i = best;
  }
  if (n > 0)
    a[i] = last;
}

#endif
