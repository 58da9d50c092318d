/* SPDX-License-Identifier: MIT */
/* pool.c: the worker threads and the admission queue in front of them.
 *
 * run() (server.c) takes a queue slot, suspends the connection and pushes the request; a worker
 * takes it by the queue discipline, decides whether it is still worth running (codel's sojourn
 * limit, the propagated deadline, the deadline against the expected service time), spends the
 * service cost, runs handle(), stores the response in the request and resumes the connection;
 * the MHD thread then sends it. Nothing here touches a request after resuming it: from then on
 * it belongs to the MHD thread again and may be freed at any moment.
 */
#include "server_impl.h"

#include <linkd/clock.h>
#include <linkd/error.h>

#include <errno.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

static int64_t sat_add(int64_t a, int64_t b) { return a > INT64_MAX - b ? INT64_MAX : a + b; }

static void add_ns(atomic_uint_fast64_t *c, int64_t ns) {
  if (ns > 0)
    atomic_fetch_add(c, (uint_fast64_t)ns);
}

/* An I/O-like cost: the worker sleeps, in slices so that a hard stop cuts it short. */
static bool spend_sleep(lk_server *s, int64_t ns) {
  int64_t due = sat_add(lk_now_ns(), ns);
  for (;;) {
    if (atomic_load(&s->hard_stop))
      return false;
    int64_t now = lk_now_ns();
    if (now >= due)
      return true;
    int64_t until = due - now > 10 * LK_NS_PER_MS ? now + 10 * LK_NS_PER_MS : due;
    struct timespec ts = {(time_t)(until / LK_NS_PER_S), (long)(until % LK_NS_PER_S)};
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
  }
}

static int64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * LK_NS_PER_S + ts.tv_nsec;
}

/* A CPU cost: busy work until this thread has used ns of CPU time (so two cores shared by eight
 * workers stretch it in wall time, as real computation would be). */
static bool spend_cpu(lk_server *s, int64_t ns) {
  int64_t start = thread_cpu_ns();
  volatile uint64_t x = 1;
  for (;;) {
    for (int i = 0; i < 4096; i++)
      x = x * UINT64_C(6364136223846793005) + 1;
    if (atomic_load(&s->hard_stop))
      return false;
    if (thread_cpu_ns() - start >= ns)
      return true;
  }
}

/* Has the caller gone? A closed socket reads as EOF (or a reset) without consuming anything. */
static bool peer_gone(const req *r) {
  if (r->fd < 0)
    return false;
  char c;
  ssize_t n = recv(r->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && (errno == ECONNRESET || errno == EPIPE));
}

static void drop(req *r, int status, const char *code, const char *outcome, const char *msg) {
  resp_free(&r->resp);
  resp_error(&r->resp, status, code, "%s", msg);
  if (status == 503)
    resp_header(&r->resp, "Retry-After", "1");
  r->dropped = true;
  r->outcome = outcome;
}

/* The end of a request's stay with the workers: from here r is the MHD thread's again. */
static void end(lk_server *s, req *r) {
  add_ns(&s->stats.busy_ns, lk_now_ns() - r->t_pop);
  r->ph = PH_WORKED;
  MHD_resume_connection(r->conn); /* r is the MHD thread's again */
}

/* After the handler: on the worker, or on the thread that committed the request's write. */
static void worked(req *r) {
  lk_server *s = r->srv;
  int64_t t_end = lk_now_ns();
  add_ns(&s->stats.work_ns, t_end - r->t_pop);
  if (lk_deadline_expired(r->dl, t_end) || peer_gone(r)) {
    atomic_fetch_add(&s->stats.work_abandoned, 1);
    add_ns(&s->stats.work_abandoned_ns, t_end - r->t_pop);
    lk_series_add(&s->series, LK_SERIES_ABANDONED, t_end);
  } else {
    atomic_fetch_add(&s->stats.work_done, 1);
    lk_series_add(&s->series, LK_SERIES_COMPLETED, t_end);
  }
  end(s, r);
}

static void process(lk_server *s, req *r, lk_admq_verdict v, int64_t queued_at, int64_t t_pop) {
  server_metrics_queue_wait(s, t_pop - queued_at);
  r->t_pop = t_pop;
  if (atomic_load(&s->hard_stop)) {
    drop(r, 503, "shutting_down", "shutting_down", "the server is shutting down");
  } else if (v == LK_ADMQ_DROP) {
    atomic_fetch_add(&s->stats.dropped_codel, 1);
    lk_series_add(&s->series, LK_SERIES_DROPPED, t_pop);
    drop(r, 503, "overloaded", "codel", "the request waited in the queue longer than its limit");
  } else {
    const lk_work_entry *e = lk_work_find(&s->pool.work, r->method, r->path);
    double factor = lk_faults_slowdown(s->faults, r->method, r->path, t_pop);
    int64_t expected = lk_work_scaled(e ? e->ns : 0, factor);
    if (lk_deadline_expired(r->dl, t_pop)) {
      atomic_fetch_add(&s->stats.dropped_deadline_expired, 1);
      lk_series_add(&s->series, LK_SERIES_DROPPED, t_pop);
      drop(r, 504, "deadline_exceeded", "expired",
           "the request's deadline passed while it was queued");
    } else if (lk_deadline_remaining(r->dl, t_pop) < expected) {
      atomic_fetch_add(&s->stats.dropped_deadline_too_short, 1);
      lk_series_add(&s->series, LK_SERIES_DROPPED, t_pop);
      drop(r, 504, "deadline_too_short", "too_short",
           "the time left before the request's deadline is shorter than its service time");
    } else {
      bool ok = expected <= 0 || (e->cpu ? spend_cpu(s, expected) : spend_sleep(s, expected));
      if (!ok) {
        drop(r, 503, "shutting_down", "shutting_down", "the server is shutting down");
        worked(r);
      } else {
        resp_init(&r->resp, 500);
        handle_then(r, worked);
      }
      return;
    }
  }
  end(s, r);
}

typedef struct worker_arg {
  lk_server *s;
  unsigned id;
} worker_arg;

static void *worker_main(void *arg) {
  lk_server *s = ((worker_arg *)arg)->s;
  unsigned id = ((worker_arg *)arg)->id;
  free(arg);
  lk_pool *p = &s->pool;
  lk_pool_slot *slot = &p->slots[id];
  pthread_mutex_lock(&p->mu);
  for (;;) {
    void *item;
    int64_t queued_at, now = lk_now_ns();
    lk_admq_verdict v = lk_admq_pop(&p->q, now, &item, &queued_at);
    if (v == LK_ADMQ_EMPTY) {
      /* Exit only when no slot is even reserved: a reserved slot is a push on its way. */
      if (p->stop && lk_admq_depth(&p->q) == 0)
        break;
      p->parked[p->idle++] = id;
      pthread_mutex_unlock(&p->mu);
      while (sem_wait(&slot->sem) != 0) {
      }
      /* The push filled the slot before posting: no lock needed to read it. */
      if (!slot->item) { /* stop: look at the queue again */
        pthread_mutex_lock(&p->mu);
        continue;
      }
      item = slot->item;
      queued_at = slot->queued_at;
      v = slot->v;
      slot->item = NULL;
      now = lk_now_ns();
    } else {
      pthread_mutex_unlock(&p->mu);
    }
    process(s, item, v, queued_at, now);
    pthread_mutex_lock(&p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

int pool_start(lk_server *s, const char *work, char *err, size_t errcap) {
  lk_pool *p = &s->pool;
  char why[300];
  if (!work)
    work = LK_WORK_DEFAULT;
  if (lk_work_parse(work, &p->work, why, sizeof why) != LK_OK) {
    snprintf(err, errcap, "work '%.200s': %s", work, why);
    return LK_ECONFIG;
  }
  if (s->cfg.workers == 0 || s->cfg.workers > 4096 || s->cfg.queue_limit == 0 ||
      s->cfg.queue_target_ns <= 0 || s->cfg.queue_interval_ns <= 0) {
    snprintf(err, errcap, "workers (1-4096), queue, queue target and interval must be positive");
    return LK_ECONFIG;
  }
  int rc = lk_admq_init(&p->q, s->cfg.queue_limit, s->cfg.queue_discipline, s->cfg.queue_target_ns,
                        s->cfg.queue_interval_ns, lk_now_ns());
  if (rc != LK_OK) {
    snprintf(err, errcap, "cannot allocate a queue of %zu", s->cfg.queue_limit);
    return rc == LK_ENOMEM ? LK_ENOMEM : LK_ECONFIG;
  }
  p->q_ready = true;
  p->threads = calloc(s->cfg.workers, sizeof *p->threads);
  p->slots = calloc(s->cfg.workers, sizeof *p->slots);
  p->parked = calloc(s->cfg.workers, sizeof *p->parked);
  if (!p->threads || !p->slots || !p->parked)
    return LK_ENOMEM;
  for (unsigned i = 0; i < s->cfg.workers; i++) {
    worker_arg *a = malloc(sizeof *a);
    if (!a)
      return LK_ENOMEM;
    *a = (worker_arg){s, i};
    sem_init(&p->slots[i].sem, 0, 0);
    if (pthread_create(&p->threads[i], NULL, worker_main, a) != 0) {
      free(a);
      sem_destroy(&p->slots[i].sem);
      snprintf(err, errcap, "cannot start worker thread %u", i);
      return LK_ESYS;
    }
    /* Named, as MHD names its threads: unnamed threads show as "libraryd", the main thread's
     * name, in top and perf, which made the workers' CPU look like the main thread's. Named here,
     * not by the thread itself, so the name is set before the daemon reports its port. */
    pthread_setname_np(p->threads[i], "lk-worker");
    p->n_started = i + 1;
  }
  return LK_OK;
}

void pool_stop(lk_server *s) {
  lk_pool *p = &s->pool;
  pthread_mutex_lock(&p->mu);
  p->stop = true;
  /* Every parked worker looks at the queue once more: it exits, or answers what is left. */
  while (p->idle > 0)
    sem_post(&p->slots[p->parked[--p->idle]].sem);
  pthread_mutex_unlock(&p->mu);
  for (unsigned i = 0; i < p->n_started; i++)
    pthread_join(p->threads[i], NULL);
  for (unsigned i = 0; i < p->n_started; i++)
    sem_destroy(&p->slots[i].sem);
  p->n_started = 0;
  free(p->threads);
  free(p->slots);
  free(p->parked);
  p->threads = NULL;
  p->slots = NULL;
  p->parked = NULL;
  if (p->q_ready)
    lk_admq_destroy(&p->q);
  p->q_ready = false;
}

int pool_reserve(lk_server *s, bool *idle) {
  lk_pool *p = &s->pool;
  pthread_mutex_lock(&p->mu);
  *idle = lk_admq_depth(&p->q) == 0;
  int rc = p->stop ? -1 : lk_admq_reserve(&p->q) ? 1 : 0;
  pthread_mutex_unlock(&p->mu);
  return rc;
}

/* What a worker popping r now would do before handle_then: nothing (no service cost, no queue
 * wait to judge, the deadline checked by run() a moment ago). */
static bool passes_through(lk_server *s, const req *r, int64_t now) {
  const lk_work_entry *e = lk_work_find(&s->pool.work, r->method, r->path);
  if (e && lk_work_scaled(e->ns, lk_faults_slowdown(s->faults, r->method, r->path, now)) > 0)
    return false;
  return !lk_deadline_expired(r->dl, now);
}

void pool_push(lk_server *s, req *r, bool idle) {
  lk_pool *p = &s->pool;
  int64_t now = lk_now_ns();
  if (idle && passes_through(s, r, now)) {
    r->t_pop = now;
    resp_init(&r->resp, 500);
    if (handle_join(r, worked)) { /* r may be answered and gone already */
      server_metrics_queue_wait(s, 0);
      atomic_fetch_add(&s->stats.joined_group, 1);
      pthread_mutex_lock(&p->mu);
      lk_admq_unreserve(&p->q);
      pthread_mutex_unlock(&p->mu);
      return;
    }
  }
  pthread_mutex_lock(&p->mu);
  int64_t t = lk_now_ns();
  lk_admq_push(&p->q, r, t);
  /* A parked worker gets an item at once (an item never waits while a worker sleeps): the pop
   * is the one that worker would make, by the queue discipline, handed over in its slot, so it
   * starts without the lock and without a condition variable's extra wake-ups. */
  lk_pool_slot *slot = NULL;
  if (p->idle > 0) {
    slot = &p->slots[p->parked[p->idle - 1]];
    slot->v = lk_admq_pop(&p->q, t, &slot->item, &slot->queued_at);
    if (slot->v == LK_ADMQ_EMPTY)
      slot = NULL;
    else
      p->idle--;
  }
  pthread_mutex_unlock(&p->mu);
  if (slot)
    sem_post(&slot->sem);
}

void pool_depth(lk_server *s, size_t *depth, size_t *max) {
  lk_pool *p = &s->pool;
  pthread_mutex_lock(&p->mu);
  *depth = p->q_ready ? lk_admq_depth(&p->q) : 0;
  *max = p->q_ready ? p->q.depth_max : 0;
  pthread_mutex_unlock(&p->mu);
}
