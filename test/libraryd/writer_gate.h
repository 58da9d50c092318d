/* SPDX-License-Identifier: MIT */
/* A write that holds the store's writer until the test opens its gate: what a long fsync (or a
 * long group) does to everyone else. The store tests use it to queue writes behind it and to
 * check who waits for the writer and who does not. */
#ifndef LINKD_TEST_WRITER_GATE_H
#define LINKD_TEST_WRITER_GATE_H

#include "store.h"

#include <linkd/error.h>

#include <pthread.h>
#include <stdbool.h>

typedef struct gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool entered, open;
} gate;

#define GATE_INIT                                                                                  \
  { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, false }

static inline int gate_tx(lk_store_tx *tx, void *arg) {
  (void)tx;
  gate *g = arg;
  pthread_mutex_lock(&g->mu);
  g->entered = true;
  pthread_cond_broadcast(&g->cv);
  while (!g->open)
    pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
  return LK_OK;
}

typedef struct gate_arg {
  lk_store *s;
  gate *g;
  int rc;
} gate_arg;

static inline void *gate_main(void *arg) {
  gate_arg *a = arg;
  a->rc = lk_store_write(a->s, lk_deadline_none(), gate_tx, a->g);
  return NULL;
}

/* Starts the holding write on thread *t and returns once it holds the writer: 0, or
 * pthread_create's error (nothing started). */
static inline int gate_hold(gate_arg *a, pthread_t *t) {
  int rc = pthread_create(t, NULL, gate_main, a);
  if (rc != 0)
    return rc;
  pthread_mutex_lock(&a->g->mu);
  while (!a->g->entered)
    pthread_cond_wait(&a->g->cv, &a->g->mu);
  pthread_mutex_unlock(&a->g->mu);
  return 0;
}

static inline void gate_open(gate *g) {
  pthread_mutex_lock(&g->mu);
  g->open = true;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

#endif
