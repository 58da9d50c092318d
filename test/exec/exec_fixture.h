/* SPDX-License-Identifier: MIT */
/* The fixture shared by the executor's tests (test_exec.c, test_exec_contract.c): a scripted
 * operation on a fake clock, a fake sleep that can fire a cancel instead of waiting, an event
 * log, and a default policy without jitter (backoffs of exactly 200, 400, 800 ms). Include after
 * <cmocka.h>. Everything is static inline: each test uses its own part. */
#ifndef LINKD_TEST_EXEC_FIXTURE_H
#define LINKD_TEST_EXEC_FIXTURE_H

#include <linkd/linkd.h>

#include "fake_clock.h"

#include <string.h>

#define T0 LK_SEC(1000) /* the fake clock's start */

/* One attempt's scripted outcome. */
typedef struct step {
  lk_failure failure;
  bool sent;
  int64_t retry_after; /* ns; -1 none */
  int64_t takes;       /* ns the attempt takes on the fake clock */
} step;

typedef struct script {
  lk_fake_clock *clock;
  const step *steps;
  int n, calls;
  bool repeat_last;     /* attempts past the script repeat its last step (else: a test failure) */
  bool fill_nothing;    /* the operation returns without touching its outcome */
  lk_exec_attempt last; /* what the last attempt was given */
  lk_exec_attempt seen[8];
  lk_traceparent spans[8];
  bool had_span[8];
  lk_cancel *fire_on_call; /* fired during the attempt numbered cancel_at */
  int cancel_at;
} script;

static inline void scripted(void *ctx, const lk_exec_attempt *a, lk_exec_outcome *out) {
  script *s = ctx;
  /* a call's attempts are numbered 1, 2, 3, ... (a script may serve several calls) */
  assert_int_equal(a->number, a->number == 1 ? 1 : s->last.number + 1);
  assert_true(s->repeat_last || s->calls < s->n);
  const step *st = &s->steps[s->calls < s->n ? s->calls : s->n - 1];
  s->last = *a;
  if (s->calls < 8) {
    s->seen[s->calls] = *a;
    s->had_span[s->calls] = a->traceparent != NULL;
    if (a->traceparent)
      s->spans[s->calls] = *a->traceparent;
  }
  s->calls++;
  lk_fake_clock_advance(s->clock, st->takes);
  if (s->fire_on_call && s->calls == s->cancel_at)
    lk_cancel_fire(s->fire_on_call);
  if (s->fill_nothing)
    return;
  out->failure = st->failure;
  out->sent = st->sent;
  out->retry_after = st->retry_after;
}

/* The fake sleep: moves the clock to `until`, or, on its fire_on-th call, fires a token instead
 * (a wait woken early by a cancel: the clock does not move). */
typedef struct sleeper {
  lk_fake_clock *fc;
  int calls;
  lk_cancel *fire;
  int fire_on;
} sleeper;

static inline void fake_sleep(void *ctx, int64_t until) {
  sleeper *s = ctx;
  s->calls++;
  if (s->fire && s->calls == s->fire_on) {
    lk_cancel_fire(s->fire);
    return;
  }
  if (until > s->fc->base.now(&s->fc->base))
    lk_fake_clock_set(s->fc, until);
}

typedef struct evlog {
  lk_event ev[256];
  int n;
} evlog;

static inline void on_event(void *ctx, const lk_event *ev) {
  evlog *l = ctx;
  assert_int_equal(ev->size, sizeof(lk_event));
  assert_true(l->n < 256);
  l->ev[l->n++] = *ev;
}

static inline const lk_event *find_ev(const evlog *l, lk_event_type t, int nth) {
  for (int i = 0; i < l->n; i++)
    if (l->ev[i].type == t && nth-- == 0)
      return &l->ev[i];
  return NULL;
}

static inline int count_ev(const evlog *l, lk_event_type t) {
  int c = 0;
  for (int i = 0; i < l->n; i++)
    c += l->ev[i].type == t;
  return c;
}

typedef struct fix {
  lk_fake_clock fc;
  sleeper sl;
  lk_exec_policy pol;
  evlog log;
  lk_exec_attempt_info tl[8];
  lk_exec_result res;
  script sc;
} fix;

static inline void fix_init(fix *f, const step *steps, int n) {
  memset(f, 0, sizeof *f);
  lk_fake_clock_init(&f->fc, T0);
  f->sl.fc = &f->fc;
  lk_exec_policy_init_default(&f->pol);
  lk_retry_config rc;
  lk_retry_config_init_default(&rc);
  rc.backoff.jitter = LK_JITTER_NONE; /* 200, 400, 800 ms */
  assert_int_equal(lk_retry_policy_init(&f->pol.retry, &rc, NULL), LK_OK);
  f->pol.clock = &f->fc.base;
  f->pol.sleep = fake_sleep;
  f->pol.sleep_ctx = &f->sl;
  f->pol.on_event = on_event;
  f->pol.event_ctx = &f->log;
  f->res.timeline = f->tl;
  f->res.timeline_cap = 8;
  f->sc.clock = &f->fc;
  f->sc.steps = steps;
  f->sc.n = n;
}

static inline int fix_run_cancel(fix *f, lk_cancel *c) {
  return lk_exec_run(&f->pol, scripted, &f->sc, c, &f->res);
}

static inline int fix_run(fix *f) { return fix_run_cancel(f, NULL); }

#endif
