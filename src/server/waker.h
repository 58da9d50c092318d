/* SPDX-License-Identifier: MIT */
/* waker.h: runs callbacks at given CLOCK_MONOTONIC instants on one background thread. libraryd
 * uses it to resume suspended connections (injected latency, stalls, slow bodies) without
 * holding a server thread while a request waits.
 *
 * Thread-safety: all functions are safe from any thread; callbacks run on the waker's thread.
 */
#ifndef LINKD_SERVER_WAKER_H
#define LINKD_SERVER_WAKER_H

#include <stdint.h>

typedef struct lk_waker lk_waker;
typedef void (*lk_waker_fn)(void *arg);

/* Starts the thread. NULL on failure. */
lk_waker *lk_waker_new(void);
/* Calls fn(arg) at `due` (or at once when due has passed or the waker is flushing). 0 or
 * LK_ENOMEM (fn is then called at once, so no waiter is ever lost). */
int lk_waker_at(lk_waker *w, int64_t due, lk_waker_fn fn, void *arg);
/* From now on every pending and future callback runs immediately (used when shutting down). */
void lk_waker_flush(lk_waker *w);
/* Runs what is still pending, stops the thread, frees. NULL is a no-op. */
void lk_waker_free(lk_waker *w);

#endif
