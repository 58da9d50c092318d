/* SPDX-License-Identifier: MIT */
/* Cancellation tokens: an atomic flag plus an eventfd that loops watch (never drained, so one
 * firing wakes every loop that has a call using the token, now or later). */
#include "http_internal.h"

#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

lk_http_cancel *lk_http_cancel_new(void) {
  lk_http_cancel *c = malloc(sizeof *c);
  if (!c)
    return NULL;
  atomic_init(&c->fired, false);
  c->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (c->fd < 0) {
    free(c);
    return NULL;
  }
  return c;
}

void lk_http_cancel_fire(lk_http_cancel *c) {
  if (!c || atomic_exchange(&c->fired, true))
    return;
  uint64_t one = 1;
  /* write() is async-signal-safe; a full counter cannot happen with one write */
  ssize_t n = write(c->fd, &one, sizeof one);
  (void)n;
}

bool lk_http_cancel_fired(const lk_http_cancel *c) {
  return c && atomic_load(&c->fired); /* a load: through the const pointer */
}

void lk_http_cancel_free(lk_http_cancel *c) {
  if (!c)
    return;
  close(c->fd);
  free(c);
}
