/* SPDX-License-Identifier: MIT */
/* waker.h: runs callbacks at given CLOCK_MONOTONIC instants on one background thread. libraryd
 * uses it to resume suspended connections (injected latency, stalls, slow bodies) without
 * holding a server thread while a request waits, and, for stalls and slow bodies, to resume
 * them as soon as their client hangs up (libmicrohttpd does not watch a suspended connection's
 * socket, so it would notice only at the resume).
 *
 * Thread-safety: all functions are safe from any thread; callbacks run on the waker's thread.
 */
#ifndef LINKD_SERVER_WAKER_H
#define LINKD_SERVER_WAKER_H

#include <stdbool.h>
#include <stdint.h>

typedef struct lk_waker lk_waker;
typedef void (*lk_waker_fn)(void *arg);

/* Starts the thread. NULL on failure. */
lk_waker *lk_waker_new(void);
/* Calls fn(arg) at `due` (or at once when due has passed or the waker is flushing). 0 or
 * LK_ENOMEM (fn is then called at once, so no waiter is ever lost). */
int lk_waker_at(lk_waker *w, int64_t due, lk_waker_fn fn, void *arg);
/* fn(arg, hup) for lk_waker_at_fd: hup true when it runs early because the socket's peer hung
 * up, false at `due` (or on a flush). */
typedef void (*lk_waker_hup_fn)(void *arg, bool hup);
/* Like lk_waker_at, and also as soon as the peer of socket fd hangs up: its FIN (read EOF,
 * POLLRDHUP, whether or not unread data precedes it), a reset or a socket error. Data to read
 * is not a hang-up. fn runs exactly once either way. fd must stay open until fn has run (a
 * suspended libmicrohttpd connection's socket does); fd < 0 watches nothing. */
int lk_waker_at_fd(lk_waker *w, int64_t due, int fd, lk_waker_hup_fn fn, void *arg);
/* From now on every pending and future callback runs immediately (used when shutting down). */
void lk_waker_flush(lk_waker *w);
/* Runs what is still pending, stops the thread, frees. NULL is a no-op. */
void lk_waker_free(lk_waker *w);

#endif
