/* SPDX-License-Identifier: MIT */
/* waker.c: a binary min-heap of deadlines under one mutex, and a thread sleeping in ppoll(2) on
 * an eventfd (new work, flush, stop) and on the sockets of the entries that watch one. */
#include "waker.h"

#include <linkd/clock.h>
#include <linkd/common.h>
#include <linkd/error.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

typedef struct item {
  int64_t due;
  uint64_t seq; /* unique: finds the entry again after an unlocked poll */
  int fd;       /* watched for a hang-up; -1: none */
  lk_waker_fn fn;
  lk_waker_hup_fn hfn; /* instead of fn for lk_waker_at_fd */
  void *arg;
} item;

struct lk_waker {
  pthread_mutex_t mu;
  pthread_t thread;
  int efd;
  item *heap;
  size_t n, cap;
  size_t n_fd; /* entries with fd >= 0 */
  uint64_t seq;
  bool flushing, stop;
  bool polling; /* the thread sleeps in ppoll: a change it must see needs the eventfd */
};

/* What a hang-up of the peer looks like on a socket: its FIN (read EOF), a reset, an error. */
#define HUP_EVENTS (POLLRDHUP | POLLHUP | POLLERR)

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

/* Takes entry i out of the heap. Locked. */
static item take(lk_waker *w, size_t i) {
  item it = w->heap[i];
  w->heap[i] = w->heap[--w->n];
  if (i < w->n) {
    if (i > 0 && w->heap[i].due < w->heap[(i - 1) / 2].due)
      sift_up(w->heap, i);
    else
      sift_down(w->heap, w->n, i);
  }
  if (it.fd >= 0)
    w->n_fd--;
  return it;
}

static void call(const item *it, bool hup) {
  if (it->hfn)
    it->hfn(it->arg, hup);
  else
    it->fn(it->arg);
}

static void kick(lk_waker *w) {
  if (!w->polling)
    return;
  uint64_t one = 1;
  ssize_t n = write(w->efd, &one, sizeof one);
  (void)n; /* EAGAIN: the counter is already non-zero, so the thread wakes anyway */
}

static size_t find(const lk_waker *w, uint64_t seq) {
  for (size_t i = 0; i < w->n; i++)
    if (w->heap[i].seq == seq)
      return i;
  return SIZE_MAX;
}

static void *run(void *arg) {
  lk_waker *w = arg;
  pthread_setname_np(pthread_self(), "lk-waker");
  struct pollfd *pfd = NULL;
  uint64_t *seqs = NULL;
  size_t pcap = 0;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    int64_t now = lk_now_ns();
    if (w->n && (w->flushing || w->heap[0].due <= now)) {
      item it = take(w, 0);
      /* Unlocked: the callback may schedule again (a slow body's next chunk). */
      pthread_mutex_unlock(&w->mu);
      call(&it, false);
      pthread_mutex_lock(&w->mu);
      continue;
    }
    if (w->stop)
      break;
    /* The poll set: the eventfd, then every watched socket. Only this thread fires entries, so
     * each socket polled belongs to an entry still pending (its connection still suspended,
     * its descriptor still open) for the whole poll. */
    if (w->n_fd + 1 > pcap) {
      size_t cap = 2 * (w->n_fd + 1);
      struct pollfd *p = realloc(pfd, cap * sizeof *p);
      if (p)
        pfd = p;
      uint64_t *q = p ? realloc(seqs, cap * sizeof *q) : NULL;
      if (q)
        seqs = q;
      if (p && q)
        pcap = cap;
    }
    nfds_t k = 0;
    if (pcap > 0) { /* else no memory at all: only the eventfd's timeout (below) */
      pfd[k++] = (struct pollfd){.fd = w->efd, .events = POLLIN};
      for (size_t i = 0; i < w->n && k < pcap; i++) {
        if (w->heap[i].fd < 0)
          continue;
        seqs[k] = w->heap[i].seq;
        pfd[k++] = (struct pollfd){.fd = w->heap[i].fd, .events = POLLRDHUP};
      }
    }
    struct timespec ts, *tsp = NULL;
    int64_t rel = w->n ? w->heap[0].due - now : INT64_MAX;
    if (k == 0 && rel > 10 * LK_NS_PER_MS)
      rel = 10 * LK_NS_PER_MS; /* no poll set, not even the eventfd: look again soon */
    if (rel != INT64_MAX) {
      ts = (struct timespec){(time_t)(rel / LK_NS_PER_S), (long)(rel % LK_NS_PER_S)};
      tsp = &ts;
    }
    w->polling = true;
    pthread_mutex_unlock(&w->mu);
    int rc = ppoll(k ? pfd : NULL, k, tsp, NULL);
    pthread_mutex_lock(&w->mu);
    w->polling = false;
    if (rc <= 0)
      continue; /* timeout, or EINTR */
    if (pfd[0].revents) {
      uint64_t v;
      ssize_t n = read(w->efd, &v, sizeof v);
      (void)n;
    }
    for (nfds_t j = 1; j < k; j++) {
      if (!pfd[j].revents)
        continue;
      size_t i = find(w, seqs[j]);
      if (i == SIZE_MAX)
        continue;
      if (pfd[j].revents & POLLNVAL) { /* not a socket of ours any more: keep the timer only */
        w->heap[i].fd = -1;
        w->n_fd--;
        continue;
      }
      if (!(pfd[j].revents & HUP_EVENTS))
        continue;
      item it = take(w, i);
      pthread_mutex_unlock(&w->mu);
      call(&it, true);
      pthread_mutex_lock(&w->mu);
    }
  }
  pthread_mutex_unlock(&w->mu);
  free(pfd);
  free(seqs);
  return NULL;
}

lk_waker *lk_waker_new(void) {
  lk_waker *w = calloc(1, sizeof *w);
  if (!w)
    return NULL;
  w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (w->efd < 0) {
    free(w);
    return NULL;
  }
  pthread_mutex_init(&w->mu, NULL);
  if (pthread_create(&w->thread, NULL, run, w) != 0) {
    pthread_mutex_destroy(&w->mu);
    close(w->efd);
    free(w);
    return NULL;
  }
  return w;
}

static int add(lk_waker *w, item it) {
  pthread_mutex_lock(&w->mu);
  if (w->n == w->cap) {
    size_t cap = w->cap ? 2 * w->cap : 64;
    item *h = realloc(w->heap, cap * sizeof *h);
    if (!h) {
      pthread_mutex_unlock(&w->mu);
      call(&it, false);
      return LK_ENOMEM;
    }
    w->heap = h;
    w->cap = cap;
  }
  it.seq = ++w->seq;
  w->heap[w->n] = it;
  sift_up(w->heap, w->n++);
  if (it.fd >= 0)
    w->n_fd++;
  if (it.fd >= 0 || w->heap[0].seq == it.seq) /* a new socket to watch, or an earlier due */
    kick(w);
  pthread_mutex_unlock(&w->mu);
  return LK_OK;
}

int lk_waker_at(lk_waker *w, int64_t due, lk_waker_fn fn, void *arg) {
  return add(w, (item){.due = due, .fd = -1, .fn = fn, .arg = arg});
}

int lk_waker_at_fd(lk_waker *w, int64_t due, int fd, lk_waker_hup_fn fn, void *arg) {
  return add(w, (item){.due = due, .fd = fd < 0 ? -1 : fd, .hfn = fn, .arg = arg});
}

void lk_waker_flush(lk_waker *w) {
  pthread_mutex_lock(&w->mu);
  w->flushing = true;
  kick(w);
  pthread_mutex_unlock(&w->mu);
}

void lk_waker_free(lk_waker *w) {
  if (!w)
    return;
  pthread_mutex_lock(&w->mu);
  w->flushing = true;
  w->stop = true;
  kick(w);
  pthread_mutex_unlock(&w->mu);
  pthread_join(w->thread, NULL);
  pthread_mutex_destroy(&w->mu);
  close(w->efd);
  free(w->heap);
  free(w);
}
