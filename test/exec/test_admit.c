/* SPDX-License-Identifier: MIT */
/* lk__admit (src/exec/protect.h), the admission step the executor and the HTTP driver share:
 * real bulkhead, limiter and breaker objects, times given explicitly, hooks that record what
 * they were told. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "exec/protect.h"

#include <linkd/error.h>
#include <linkd/event.h>

typedef struct rec {
  int granted, released, acquires;
  int waits;
  lk_event_wait what[8];
  int64_t waited[8];
  bool ok[8];
  lk_breaker *breaker;
} rec;

static void on_granted(void *ctx) { ((rec *)ctx)->granted++; }

static void on_wait(void *ctx, int64_t now, lk_event_wait what, int64_t waited, bool granted) {
  (void)now;
  rec *r = ctx;
  if (r->waits < 8) {
    r->what[r->waits] = what;
    r->waited[r->waits] = waited;
    r->ok[r->waits] = granted;
  }
  r->waits++;
}

static void on_release(void *ctx) { ((rec *)ctx)->released++; }

static int on_acquire(void *ctx, lk_prot *ps, int64_t now) {
  rec *r = ctx;
  r->acquires++;
  return lk__breaker_acquire(r->breaker, ps, now);
}

static const lk_admit_hooks hooks = {on_granted, on_wait, on_release, on_acquire};

static lk_admit_env env_of(rec *r) {
  return (lk_admit_env){.breaker = r->breaker, .hooks = &hooks, .ctx = r};
}

typedef struct step {
  lk_admit_result res;
  int64_t timer_at;
  lk_failure kind;
  int err;
} step;

static step admit(lk_admission *a, const lk_admit_env *env, lk_prot *ps, int64_t now,
                  int64_t deadline) {
  step s = {LK_ADMIT_GO, -1, LK_F_NONE, LK_OK};
  s.res = lk__admit(a, env, ps, now, deadline, &s.timer_at, &s.kind, &s.err);
  return s;
}

static void nothing_to_ask(void **state) {
  (void)state;
  rec r = {0};
  lk_admit_env env = env_of(&r);
  lk_admission a;
  lk__admission_init(&a);
  lk_prot ps = {0};
  step s = admit(&a, &env, &ps, 0, LK_SEC(1));
  assert_int_equal(s.res, LK_ADMIT_GO);
  assert_int_equal(s.timer_at, -1); /* untouched */
  assert_int_equal(r.waits + r.released + r.acquires, 0);
}

/* A queued call is told when its slot comes, and its wait is reported once, when it ends. */
static void bulkhead_queue_then_grant(void **state) {
  (void)state;
  lk_bulkhead_config hc = {1, 1};
  lk_bulkhead *bh = NULL;
  assert_int_equal(lk_bulkhead_new(&hc, &bh, NULL), LK_OK);
  assert_int_equal(lk_bulkhead_try_acquire(bh), LK_OK); /* someone else holds the one slot */
  rec r = {0};
  lk_admit_env env = env_of(&r);
  env.bulkhead = bh;
  env.pool_timeout = LK_MS(300);
  lk_admission a;
  lk__admission_init(&a);
  lk_prot ps = {0};

  step s = admit(&a, &env, &ps, LK_MS(100), LK_SEC(1));
  assert_int_equal(s.res, LK_ADMIT_LATER);
  assert_int_equal(s.timer_at, LK_MS(400)); /* pool_timeout before the deadline */
  assert_true(a.slot.queued);
  assert_int_equal(r.waits, 0);

  lk_bulkhead_release(bh); /* hands the slot to the queued call */
  assert_int_equal(r.granted, 1);
  s = admit(&a, &env, &ps, LK_MS(150), LK_SEC(1));
  assert_int_equal(s.res, LK_ADMIT_GO);
  assert_true(a.slot.held);
  assert_int_equal(r.waits, 1);
  assert_int_equal(r.what[0], LK_EV_WAIT_BULKHEAD);
  assert_int_equal(r.waited[0], LK_MS(50));
  assert_true(r.ok[0]);

  /* A held slot is not asked for again. */
  s = admit(&a, &env, &ps, LK_MS(160), LK_SEC(1));
  assert_int_equal(s.res, LK_ADMIT_GO);
  assert_int_equal(r.waits, 1);
  lk__slot_release(&a.slot, bh);
  assert_int_equal(lk_bulkhead_in_use(bh), 0);
  lk_bulkhead_free(bh);
}

/* A full queue refuses at once: not a wait, nothing held; a wait that runs out is reported. */
static void bulkhead_refusals(void **state) {
  (void)state;
  lk_bulkhead_config hc = {1, 0};
  lk_bulkhead *bh = NULL;
  assert_int_equal(lk_bulkhead_new(&hc, &bh, NULL), LK_OK);
  assert_int_equal(lk_bulkhead_try_acquire(bh), LK_OK);
  rec r = {0};
  lk_admit_env env = env_of(&r);
  env.bulkhead = bh;
  lk_admission a;
  lk__admission_init(&a);
  lk_prot ps = {0};
  step s = admit(&a, &env, &ps, 0, LK_SEC(1));
  assert_int_equal(s.res, LK_ADMIT_REFUSED);
  assert_int_equal(s.kind, LK_F_BULKHEAD_FULL);
  assert_int_equal(s.err, LK_EBULKHEAD_FULL);
  assert_int_equal(r.waits, 0);
  assert_false(a.slot.held);

  hc.max_queue = 1;
  lk_bulkhead *bq = NULL;
  assert_int_equal(lk_bulkhead_new(&hc, &bq, NULL), LK_OK);
  assert_int_equal(lk_bulkhead_try_acquire(bq), LK_OK);
  env.bulkhead = bq;
  env.pool_timeout = LK_MS(20);
  lk__admission_init(&a);
  s = admit(&a, &env, &ps, 0, LK_SEC(1));
  assert_int_equal(s.res, LK_ADMIT_LATER);
  s = admit(&a, &env, &ps, s.timer_at, LK_SEC(1));
  assert_int_equal(s.res, LK_ADMIT_REFUSED);
  assert_int_equal(s.kind, LK_F_POOL_TIMEOUT);
  assert_int_equal(r.waits, 1);
  assert_int_equal(r.what[0], LK_EV_WAIT_BULKHEAD);
  assert_int_equal(r.waited[0], LK_MS(20));
  assert_false(r.ok[0]);
  assert_false(a.slot.queued);
  assert_int_equal(lk_bulkhead_queue_depth(bq), 0);
  lk_bulkhead_release(bh);
  lk_bulkhead_release(bq);
  lk_bulkhead_free(bh);
  lk_bulkhead_free(bq);
}

/* A token that is due later is reserved once and waited for; one that comes too late for an
 * attempt of min_attempt refuses and gives the slot back. */
static void limiter_wait_and_refusal(void **state) {
  (void)state;
  lk_limiter_config lc = {10.0, 1}; /* a token every 100 ms */
  lk_limiter *lim = NULL;
  assert_int_equal(lk_limiter_new(&lc, &lim, NULL), LK_OK);
  assert_int_equal(lk_limiter_try_acquire(lim, 0), LK_OK);
  rec r = {0};
  lk_admit_env env = env_of(&r);
  env.limiter = lim;
  env.min_attempt = LK_MS(50);
  lk_admission a;
  lk__admission_init(&a);
  lk_prot ps = {0};
  step s = admit(&a, &env, &ps, 0, LK_SEC(1));
  assert_int_equal(s.res, LK_ADMIT_LATER);
  assert_int_equal(s.timer_at, LK_MS(100));
  assert_true(a.limiter_reserved);
  s = admit(&a, &env, &ps, LK_MS(100), LK_SEC(1));
  assert_int_equal(s.res, LK_ADMIT_GO);
  assert_false(a.limiter_reserved); /* the attempt has it now */
  assert_int_equal(r.waits, 1);
  assert_int_equal(r.what[0], LK_EV_WAIT_LIMITER);
  assert_int_equal(r.waited[0], LK_MS(100));
  assert_true(r.ok[0]);

  /* The next token is due at 200 ms; with the deadline at 220 ms only 20 ms would be left. */
  s = admit(&a, &env, &ps, LK_MS(110), LK_MS(220));
  assert_int_equal(s.res, LK_ADMIT_REFUSED);
  assert_int_equal(s.kind, LK_F_RATE_LIMITED);
  assert_int_equal(s.err, LK_ERATE_LIMITED);
  assert_int_equal(r.released, 1);
  lk_limiter_free(lim);
}

/* An open breaker: a call with time to spare waits for the probe (holding nothing), and is
 * admitted as the probe; without breaker_wait, or without the time, it is refused. */
static void breaker_wait_or_refuse(void **state) {
  (void)state;
  lk_breaker_config bc;
  lk_breaker_config_init_default(&bc);
  bc.wait_open = LK_MS(200);
  lk_breaker *b = NULL;
  assert_int_equal(lk_breaker_new(&bc, &b, NULL), LK_OK);
  assert_int_equal(lk_breaker_transition(b, LK_BREAKER_OPEN, 0), LK_OK);
  rec r = {.breaker = b};
  lk_admit_env env = env_of(&r);
  env.breaker_wait = true;
  env.min_attempt = LK_MS(50);
  lk_admission a;
  lk__admission_init(&a);
  lk_prot ps = {0};
  step s = admit(&a, &env, &ps, LK_MS(10), LK_SEC(1));
  assert_int_equal(s.res, LK_ADMIT_LATER);
  assert_int_equal(s.timer_at, LK_MS(200));
  assert_int_equal(r.released, 1);
  assert_int_equal(r.waits, 0);
  s = admit(&a, &env, &ps, LK_MS(200), LK_SEC(1));
  assert_int_equal(s.res, LK_ADMIT_GO);
  assert_int_equal(lk_breaker_get_state(b), LK_BREAKER_HALF_OPEN);
  assert_int_equal(r.waits, 1);
  assert_int_equal(r.what[0], LK_EV_WAIT_BREAKER);
  assert_int_equal(r.waited[0], LK_MS(190));
  assert_true(r.ok[0]);
  lk__breaker_release(b, &ps);

  /* Open again, and the probe would come with less than min_attempt left: refused at once. */
  assert_int_equal(lk_breaker_transition(b, LK_BREAKER_OPEN, LK_MS(300)), LK_OK);
  lk__admission_init(&a);
  s = admit(&a, &env, &ps, LK_MS(310), LK_MS(520));
  assert_int_equal(s.res, LK_ADMIT_REFUSED);
  assert_int_equal(s.kind, LK_F_BREAKER_OPEN);
  assert_int_equal(s.err, LK_EBREAKER_OPEN);
  assert_int_equal(r.waits, 1); /* it never waited */

  env.breaker_wait = false;
  s = admit(&a, &env, &ps, LK_MS(310), LK_SEC(5));
  assert_int_equal(s.res, LK_ADMIT_REFUSED);
  assert_int_equal(s.kind, LK_F_BREAKER_OPEN);
  lk_breaker_free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(nothing_to_ask),         cmocka_unit_test(bulkhead_queue_then_grant),
      cmocka_unit_test(bulkhead_refusals),      cmocka_unit_test(limiter_wait_and_refusal),
      cmocka_unit_test(breaker_wait_or_refuse),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
