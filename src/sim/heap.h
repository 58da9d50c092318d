/* SPDX-License-Identifier: MIT */
/* heap.h: the simulator's event queue.
 *
 * sim_heap is a 4-ary min-heap of 16-byte events keyed by time: half the depth of a binary heap,
 * a node's children in one cache line, events as plain values. sim_queue puts a calendar in
 * front of it: time is cut into buckets of 2^SIM_CAL_SHIFT ns, the next SIM_CAL_BUCKETS of which
 * are a ring of unsorted lists (in two levels: below); only the current bucket's events sit in a
 * (small, cache-resident) heap, and events beyond the ring wait in a second heap until the ring
 * reaches them. A million clients thinking for seconds then cost an append and one move each,
 * instead of a walk down a heap of a million entries for every event (docs/BENCHMARKS.md).
 *
 * Arrays grow by doubling and never shrink: in a steady state nothing allocates. Ties in time pop
 * in an order fixed by the sequence of pushes and pops, so a run is reproducible.
 *
 * Thread-safety: one queue belongs to one thread.
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
    if (c + 3 < n) {
      /* All four children: a tournament the compiler turns into conditional moves (which child
       * is least is a coin toss, and mispredicted branches were most of the pop's time). */
      int64_t t1 = a[c + 1].t, t2 = a[c + 2].t, t3 = a[c + 3].t;
      uint32_t b01 = t1 < bt ? c + 1 : c, b23 = t3 < t2 ? c + 3 : c + 2;
      int64_t m01 = t1 < bt ? t1 : bt, m23 = t3 < t2 ? t3 : t2;
      best = m23 < m01 ? b23 : b01;
      bt = m23 < m01 ? m23 : m01;
    } else {
      for (uint32_t k = c + 1; k < n; k++) {
        if (a[k].t < bt) {
          bt = a[k].t;
          best = k;
        }
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

/* --- the calendar ---------------------------------------------------------------------------- */

/* Buckets of 8.2 us: a bucket holds a few events, so the heap each is sorted in stays one or two
 * levels deep (32.8 us buckets took 1.2x the CPU on one attempt per call, 1.08x with exponential
 * service times; docs/BENCHMARKS.md). The ring still spans 17.2 s, so a million clients thinking
 * for seconds stay out of the far heap.
 *
 * The ring has two levels. Only the buckets of the next 16.8 ms (16 "pages" of 128 buckets,
 * 1.05 ms each) are lists of events; an event for a later page is appended to that page's chunks
 * of 16 events, in the order it came, and the page is sorted into its buckets when it comes
 * within those 16.8 ms. A bucket's list then holds the same events in the same order as if each
 * had been put there when it came (the order in which a bucket's events enter the heap decides
 * which of two simultaneous events pops first, and so a run's bytes). What that buys: an event of
 * a client thinking for seconds is written once at the end of its page's chunk and read back in a
 * sequential pass, where a list per bucket over the whole ring (8 MB of heads) took a cold load
 * to put it there and another, at a random place in the node pool, to take it out. */
#define SIM_CAL_SHIFT 13
#define SIM_CAL_BUCKETS 2097152 /* the ring's span in buckets: beyond, the far heap */
#define SIM_CAL_PAGE_BITS 7
#define SIM_CAL_PAGE 128    /* buckets per page */
#define SIM_CAL_PAGES 32768 /* the ring's pages: more than SIM_CAL_BUCKETS / SIM_CAL_PAGE + 1 */
#define SIM_CAL_NEAR 16     /* pages whose buckets are lists: the current one and those after */
#define SIM_CAL_HEADS (SIM_CAL_NEAR * SIM_CAL_PAGE)
#define SIM_CHUNK_EVS 16

typedef struct sim_chunk {
  sim_ev ev[SIM_CHUNK_EVS]; /* 256 bytes; the links are apart (sim_queue.cnext) */
} sim_chunk;

typedef struct sim_page {
  uint32_t first, last; /* chunks (SIM_NIL_EV: none) */
  uint32_t n, pad;      /* events in the last one */
} sim_page;

typedef struct sim_queue {
  sim_heap front;               /* the current bucket's events */
  sim_heap far;                 /* beyond the ring */
  uint32_t head[SIM_CAL_HEADS]; /* the near pages' buckets: list heads (SIM_NIL_EV: empty) */
  sim_ev *node;                 /* the pool of those lists' events, singly linked */
  uint32_t *next;
  uint32_t node_cap, free_node;
  sim_page *page; /* SIM_CAL_PAGES chunk lists, in the order events came */
  sim_chunk *chunk;
  uint32_t *cnext; /* the chunk after each */
  uint32_t chunk_cap, free_chunk;
  int64_t cur; /* absolute number of the current bucket (t >> SIM_CAL_SHIFT) */
  uint64_t in_ring, n;
  int heap_only; /* every event in `front`: the plain 4-ary heap, the benchmark's baseline */
} sim_queue;

#define SIM_NIL_EV UINT32_MAX

/* 0, or -1 when out of memory. */
static inline int sim_queue_init(sim_queue *q) {
  *q = (sim_queue){0};
  q->free_node = q->free_chunk = SIM_NIL_EV;
  for (uint32_t i = 0; i < SIM_CAL_HEADS; i++)
    q->head[i] = SIM_NIL_EV;
  q->page = malloc(SIM_CAL_PAGES * sizeof *q->page);
  if (!q->page)
    return -1;
  for (uint32_t i = 0; i < SIM_CAL_PAGES; i++)
    q->page[i] = (sim_page){SIM_NIL_EV, SIM_NIL_EV, 0, 0};
  return 0;
}

static inline void sim_queue_free(sim_queue *q) {
  free(q->page);
  free(q->chunk);
  free(q->cnext);
  free(q->node);
  free(q->next);
  free(q->front.a);
  free(q->far.a);
  *q = (sim_queue){0};
}

/* Into a near page's bucket list. Nodes come from one pool shared by every bucket, so the
 * lists hold memory for the events in them, not for the most any bucket ever held. */
static inline int sim_bucket_add(sim_queue *q, sim_ev e) {
  if (q->free_node == SIM_NIL_EV) {
    uint32_t cap = q->node_cap ? q->node_cap * 2 : 1024;
    sim_ev *node = realloc(q->node, (size_t)cap * sizeof *node);
    if (!node)
      return -1;
    q->node = node;
    uint32_t *next = realloc(q->next, (size_t)cap * sizeof *next);
    if (!next)
      return -1;
    q->next = next;
    for (uint32_t i = cap; i-- > q->node_cap;) {
      next[i] = q->free_node;
      q->free_node = i;
    }
    q->node_cap = cap;
  }
  uint32_t i = q->free_node, *head = &q->head[(e.t >> SIM_CAL_SHIFT) & (SIM_CAL_HEADS - 1)];
  q->free_node = q->next[i];
  q->node[i] = e;
  q->next[i] = *head;
  *head = i;
  return 0;
}

/* At the end of a later page's chunks: one line of the page's record and a store into the chunk
 * (the chunk is not read, so its line being cold costs no wait). */
__attribute__((noinline)) static int sim_page_add(sim_queue *q, int64_t page, sim_ev e) {
  sim_page *pg = &q->page[(uint32_t)page & (SIM_CAL_PAGES - 1)];
  if (pg->first == SIM_NIL_EV || pg->n == SIM_CHUNK_EVS) {
    if (q->free_chunk == SIM_NIL_EV) {
      uint32_t cap = q->chunk_cap ? q->chunk_cap * 2 : 64;
      sim_chunk *c = realloc(q->chunk, (size_t)cap * sizeof *c);
      if (!c)
        return -1;
      q->chunk = c;
      uint32_t *nx = realloc(q->cnext, (size_t)cap * sizeof *nx);
      if (!nx)
        return -1;
      q->cnext = nx;
      for (uint32_t i = cap; i-- > q->chunk_cap;) {
        nx[i] = q->free_chunk;
        q->free_chunk = i;
      }
      q->chunk_cap = cap;
    }
    uint32_t k = q->free_chunk;
    q->free_chunk = q->cnext[k];
    q->cnext[k] = SIM_NIL_EV;
    if (pg->first == SIM_NIL_EV)
      pg->first = k;
    else
      q->cnext[pg->last] = k;
    pg->last = k;
    pg->n = 0;
  }
  q->chunk[pg->last].ev[pg->n++] = e;
  return 0;
}

/* An event for a bucket after the current one, within the ring. */
static inline int sim_ring_add(sim_queue *q, sim_ev e) {
  int64_t b = e.t >> SIM_CAL_SHIFT, page = b >> SIM_CAL_PAGE_BITS;
  int rc = page < (q->cur >> SIM_CAL_PAGE_BITS) + SIM_CAL_NEAR ? sim_bucket_add(q, e)
                                                               : sim_page_add(q, page, e);
  q->in_ring += rc == 0;
  return rc;
}

/* `page` has come within the near pages: its events go into their buckets, in the order they
 * came. The chunks were written long ago, each at its own place: the next one is loaded while
 * this one is sorted. */
__attribute__((noinline)) static int sim_page_sort(sim_queue *q, int64_t page) {
  sim_page *pg = &q->page[(uint32_t)page & (SIM_CAL_PAGES - 1)];
  for (uint32_t k = pg->first; k != SIM_NIL_EV;) {
    uint32_t nx = q->cnext[k], n = k == pg->last ? pg->n : SIM_CHUNK_EVS;
    if (nx != SIM_NIL_EV)
      for (int l = 0; l < 4; l++)
        __builtin_prefetch((const char *)&q->chunk[nx] + 64 * l);
    for (uint32_t i = 0; i < n; i++)
      if (sim_bucket_add(q, q->chunk[k].ev[i]) != 0)
        return -1;
    q->cnext[k] = q->free_chunk;
    q->free_chunk = k;
    pg->first = k = nx;
  }
  pg->last = SIM_NIL_EV;
  pg->n = 0;
  return 0;
}

/* e.t must be >= the time of the last event popped. 0, or -1 when out of memory. */
static inline int sim_queue_push(sim_queue *q, sim_ev e) {
  int64_t b = e.t >> SIM_CAL_SHIFT;
  int rc;
  if (b <= q->cur || q->heap_only)
    rc = sim_heap_push(&q->front, e);
  else if (b < q->cur + SIM_CAL_BUCKETS)
    rc = sim_ring_add(q, e);
  else
    rc = sim_heap_push(&q->far, e);
  q->n += rc == 0;
  return rc;
}

/* Makes the earliest event the front heap's top (q->front.a[0]): 1, or 0 when the queue is
 * empty, or -1 when out of memory while moving events into the current bucket. The current
 * bucket may then be later than the last event popped; events pushed meanwhile for earlier
 * buckets go into the front heap, in time order with the rest. */
static inline int sim_queue_fill(sim_queue *q) {
  while (q->front.n == 0) {
    if (q->heap_only)
      return 0;
    if (q->in_ring == 0) {
      if (q->far.n == 0)
        return 0;
      q->cur = q->far.a[0].t >> SIM_CAL_SHIFT; /* nothing in between: jump */
    } else {
      q->cur++;
      if ((q->cur & (SIM_CAL_PAGE - 1)) == 0 &&
          sim_page_sort(q, (q->cur >> SIM_CAL_PAGE_BITS) + SIM_CAL_NEAR - 1) != 0)
        return -1;
    }
    while (q->far.n && (q->far.a[0].t >> SIM_CAL_SHIFT) < q->cur + SIM_CAL_BUCKETS) {
      sim_ev e;
      sim_heap_pop(&q->far, &e);
      if (sim_ring_add(q, e) != 0)
        return -1;
    }
    uint32_t *head = &q->head[q->cur & (SIM_CAL_HEADS - 1)];
    for (uint32_t i = *head; i != SIM_NIL_EV;) {
      uint32_t nx = q->next[i];
      if (sim_heap_push(&q->front, q->node[i]) != 0)
        return -1;
      q->next[i] = q->free_node;
      q->free_node = i;
      q->in_ring--;
      i = nx;
    }
    *head = SIM_NIL_EV;
  }
  return 1;
}

/* The earliest event's time; only after sim_queue_fill returned 1. */
static inline int64_t sim_queue_top_time(const sim_queue *q) { return q->front.a[0].t; }

/* Removes the earliest event into *out after sim_queue_fill returned 1. */
static inline void sim_queue_take(sim_queue *q, sim_ev *out) {
  sim_heap_pop(&q->front, out);
  q->n--;
}

/* Removes the earliest event into *out: 1, or 0 when the queue is empty, or -1 when out of
 * memory while moving events into the current bucket. */
static inline int sim_queue_pop(sim_queue *q, sim_ev *out) {
  int got = sim_queue_fill(q);
  if (got <= 0)
    return got;
  sim_queue_take(q, out);
  return 1;
}

/* Bytes held by the queue's arrays. */
static inline size_t sim_queue_bytes(const sim_queue *q) {
  return ((size_t)q->front.cap + q->far.cap) * sizeof(sim_ev) +
         (size_t)SIM_CAL_PAGES * sizeof(sim_page) +
         (size_t)q->chunk_cap * (sizeof(sim_chunk) + sizeof(uint32_t)) +
         (size_t)q->node_cap * (sizeof(sim_ev) + sizeof(uint32_t));
}

#endif
