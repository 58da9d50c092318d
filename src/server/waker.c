/* SPDX-License-Identifier: MIT */
/* waker.c: a binary min-heap of deadlines under one mutex, and a thread sleeping on a condvar
 * bound to CLOCK_MONOTONIC. */
#include "waker.h"

#include <linkd/clock.h>
#include <linkd/common.h>
#include <linkd/error.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

typedef struct item {
  int64_t due;
  lk_waker_fn fn;
  void *arg;
} item;

struct lk_waker {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  item *heap;
  size_t n, cap;
  bool flushing, stop;
};

static void sift_up(item *h, size_t i) {
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (h[p].due <= h[i].due)
      break;
    item t = h[p];
    h[p] = h[i];
    h[i] = t;
    i = p;
  }
}

static void sift_down(item *h, size_t n, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && h[l].due < h[m].due)
      m = l;
    if (r < n && h[r].due < h[m].due)
      m = r;
    if (m == i)
      return;
    item t = h[m];
    h[m] = h[i];
    h[i] = t;
    i = m;
  }
}

static void *run(void *arg) {
  lk_waker *w = arg;
  pthread_setname_np(pthread_self(), "lk-waker");
  pthread_mutex_lock(&w->mu);
  for (;;) {
    int64_t now = lk_now_ns();
    if (w->n && (w->flushing || w->heap[0].due <= now)) {
      item it = w->heap[0];
      w->heap[0] = w->heap[--w->n];
      sift_down(w->heap, w->n, 0);
      /* Unlocked: the callback may schedule again (a slow body's next chunk). */
      pthread_mutex_unlock(&w->mu);
      it.fn(it.arg);
      pthread_mutex_lock(&w->mu);
      continue;
    }
    if (w->stop)
      break;
    if (w->n) {
      int64_t due = w->heap[0].due;
      struct timespec ts = {(time_t)(due / LK_NS_PER_S), (long)(due % LK_NS_PER_S)};
      pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    } else {
      pthread_cond_wait(&w->cv, &w->mu);
    }
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

lk_waker *lk_waker_new(void) {
  lk_waker *w = calloc(1, sizeof *w);
  if (!w)
    return NULL;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&w->cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&w->mu, NULL);
  if (pthread_create(&w->thread, NULL, run, w) != 0) {
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
    return NULL;
  }
  return w;
}

int lk_waker_at(lk_waker *w, int64_t due, lk_waker_fn fn, void *arg) {
  pthread_mutex_lock(&w->mu);
  if (w->n == w->cap) {
    size_t cap = w->cap ? 2 * w->cap : 64;
    item *h = realloc(w->heap, cap * sizeof *h);
    if (!h) {
      pthread_mutex_unlock(&w->mu);
      fn(arg);
      return LK_ENOMEM;
    }
    w->heap = h;
    w->cap = cap;
  }
  w->heap[w->n] = (item){due, fn, arg};
  sift_up(w->heap, w->n++);
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
  return LK_OK;
}

void lk_waker_flush(lk_waker *w) {
  pthread_mutex_lock(&w->mu);
  w->flushing = true;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

void lk_waker_free(lk_waker *w) {
  if (!w)
    return;
  pthread_mutex_lock(&w->mu);
  w->flushing = true;
  w->stop = true;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
  pthread_join(w->thread, NULL);
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
  free(w->heap);
  free(w);
}
