/* SPDX-License-Identifier: MIT */
/* The simulator's invariants: the event heap's order, determinism (same seed, same bytes),
 * conservation (every call and every attempt ends exactly once), 3^n amplification over n tiers,
 * and memory that follows the requests in flight rather than the length of the run. */
#include "allocfail.h"
#include "sim/exp.h"
#include "sim/heap.h"
#include "sim/sim.h"
#include "testutil.h"

#include <linkd/error.h>
#include <linkd/rand.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>

static void parse_or_fail(const char *text, sim_scenario *s) {
  char err[300] = "";
  if (sim_scenario_parse(text, strlen(text), s, err, sizeof err) != LK_OK)
    fail_msg("%s", err);
}

static void run_or_fail(const sim_scenario *s, sim_result *r) {
  const char *why = NULL;
  int rc = sim_run(s, r, &why);
  if (rc != LK_OK)
    fail_msg("sim_run: %d %s", rc, why ? why : "");
}

/* Summary + CSV of a run, as one string. */
static char *outputs(const sim_result *r, size_t *len) {
  char *buf = NULL;
  FILE *m = open_memstream(&buf, len);
  assert_non_null(m);
  sim_write_summary(m, r);
  sim_write_csv(m, r);
  fclose(m);
  return buf;
}

static void test_heap_order(void **state) {
  (void)state;
  sim_heap h = {0};
  lk_rand_fast g;
  lk_rand_fast_seeded(&g, 7);
  int64_t last = INT64_MIN;
  size_t popped = 0;
  /* Interleaved pushes and pops, as the simulator does them: every pop is the minimum. */
  for (int round = 0; round < 20000; round++) {
    for (int k = 0; k < 3; k++) {
      sim_ev e = {(int64_t)lk_rand_below(&g.base, 1000000) + (last > 0 ? last : 0), (uint32_t)round,
                  0};
      assert_int_equal(sim_heap_push(&h, e), 0);
    }
    for (int k = 0; k < 2; k++) {
      sim_ev e;
      sim_heap_pop(&h, &e);
      assert_true(e.t >= last);
      last = e.t;
      popped++;
    }
  }
  while (h.n) {
    sim_ev e;
    sim_heap_pop(&h, &e);
    assert_true(e.t >= last);
    last = e.t;
    popped++;
  }
  assert_int_equal(popped, 60000);
  free(h.a);
}

/* The calendar queue pops in time order across the current bucket, the ring and beyond it
 * (events 40 s ahead, a jump over an empty stretch), in both modes. */
static void test_calendar_order(void **state) {
  (void)state;
  for (int heap_only = 0; heap_only <= 1; heap_only++) {
    sim_queue q;
    assert_int_equal(sim_queue_init(&q), 0);
    q.heap_only = heap_only;
    lk_rand_fast g;
    lk_rand_fast_seeded(&g, 11);
    int64_t now = 0;
    uint64_t pushed = 0, popped = 0;
    static const int64_t spans[] = {1000, 100000, 10000000, 2000000000, 40000000000};
    for (int round = 0; round < 30000; round++) {
      int k = (int)lk_rand_below(&g.base, 3);
      for (int i = 0; i < k; i++) {
        int64_t span = spans[lk_rand_below(&g.base, 5)];
        sim_ev e = {now + (int64_t)lk_rand_below(&g.base, (uint64_t)span), (uint32_t)round, 0};
        assert_int_equal(sim_queue_push(&q, e), 0);
        pushed++;
      }
      sim_ev e;
      int got = sim_queue_pop(&q, &e);
      if (got == 1) {
        assert_true(e.t >= now);
        now = e.t;
        popped++;
      } else {
        assert_int_equal(got, 0);
        assert_int_equal(q.n, 0);
      }
    }
    sim_ev e;
    while (sim_queue_pop(&q, &e) == 1) {
      assert_true(e.t >= now);
      now = e.t;
      popped++;
    }
    assert_int_equal(popped, pushed);
    assert_int_equal(q.n, 0);
    assert_true(now > 20000000000); /* it did reach beyond the ring */
    sim_queue_free(&q);
  }
}

/* The calendar as one list per bucket over the whole ring, each event put at its bucket's head
 * when it comes: the order a bucket's events enter the heap, and so the order of simultaneous
 * events, that the two-level ring (heap.h) must keep. */
typedef struct ref_queue {
  sim_heap front, far;
  uint32_t *ring, *next;
  sim_ev *node;
  uint32_t n_node;
  int64_t cur;
  uint64_t in_ring;
} ref_queue;

static void ref_add(ref_queue *q, sim_ev e) {
  uint32_t i = q->n_node++; /* never reused: the test is short */
  q->node = realloc(q->node, q->n_node * sizeof *q->node);
  q->next = realloc(q->next, q->n_node * sizeof *q->next);
  assert_non_null(q->node);
  assert_non_null(q->next);
  uint32_t *head = &q->ring[(e.t >> SIM_CAL_SHIFT) & (SIM_CAL_BUCKETS - 1)];
  q->node[i] = e;
  q->next[i] = *head;
  *head = i;
  q->in_ring++;
}

static void ref_push(ref_queue *q, sim_ev e) {
  int64_t b = e.t >> SIM_CAL_SHIFT;
  if (b <= q->cur)
    assert_int_equal(sim_heap_push(&q->front, e), 0);
  else if (b < q->cur + SIM_CAL_BUCKETS)
    ref_add(q, e);
  else
    assert_int_equal(sim_heap_push(&q->far, e), 0);
}

static int ref_pop(ref_queue *q, sim_ev *out) {
  while (q->front.n == 0) {
    if (q->in_ring == 0) {
      if (q->far.n == 0)
        return 0;
      q->cur = q->far.a[0].t >> SIM_CAL_SHIFT;
    } else {
      q->cur++;
    }
    while (q->far.n && (q->far.a[0].t >> SIM_CAL_SHIFT) < q->cur + SIM_CAL_BUCKETS) {
      sim_ev e;
      sim_heap_pop(&q->far, &e);
      ref_add(q, e);
    }
    uint32_t *head = &q->ring[q->cur & (SIM_CAL_BUCKETS - 1)];
    for (uint32_t i = *head; i != SIM_NIL_EV; i = q->next[i]) {
      assert_int_equal(sim_heap_push(&q->front, q->node[i]), 0);
      q->in_ring--;
    }
    *head = SIM_NIL_EV;
  }
  sim_heap_pop(&q->front, out);
  return 1;
}

/* Simultaneous events pop in the same order from the two-level ring as from one list per bucket:
 * times on a coarse grid make ties common, in the current bucket, the current page, later pages,
 * beyond the ring and after jumps over empty stretches. */
static void test_calendar_ties(void **state) {
  (void)state;
  ref_queue r = {0};
  r.ring = malloc(SIM_CAL_BUCKETS * sizeof *r.ring);
  assert_non_null(r.ring);
  memset(r.ring, 0xff, SIM_CAL_BUCKETS * sizeof *r.ring);
  sim_queue q;
  assert_int_equal(sim_queue_init(&q), 0);
  lk_rand_fast g;
  lk_rand_fast_seeded(&g, 5);
  static const int64_t grid[] = {1, 4096, 100000, 1048576, 50000000};
  int64_t now = 0, last = 0; /* last: the latest event popped */
  uint64_t popped = 0;
  for (uint32_t id = 0, round = 0; round < 20000; round++) {
    int k = (int)lk_rand_below(&g.base, round % 5000 < 4000 ? 4 : 2);
    for (int i = 0; i < k; i++) {
      int64_t step = grid[lk_rand_below(&g.base, 5)];
      uint64_t u = lk_rand_below(&g.base, 1000); /* mostly near, a few beyond the ring */
      int64_t span = u < 400 ? 20000 : u < 800 ? 3000000 : u < 995 ? 200000000 : 18000000000;
      int64_t t = now + (int64_t)lk_rand_below(&g.base, (uint64_t)span);
      t = t / step * step;
      if (t < now)
        t = now;
      sim_ev e = {t, id++, 0};
      ref_push(&r, e);
      assert_int_equal(sim_queue_push(&q, e), 0);
    }
    for (int j = 0; j < 2; j++) {
      sim_ev a, b;
      int got = ref_pop(&r, &a);
      assert_int_equal(sim_queue_pop(&q, &b), got);
      if (!got)
        break;
      assert_int_equal(a.t, b.t);
      assert_int_equal(a.idx, b.idx);
      now = last = a.t;
      popped++;
    }
  }
  /* The rounds may have emptied the queue: `last`, not this loop's event, is the latest (this
   * read an uninitialised event when nothing was left, and failed at -O0). */
  sim_ev a, b;
  while (ref_pop(&r, &a)) {
    assert_int_equal(sim_queue_pop(&q, &b), 1);
    assert_int_equal(a.t, b.t);
    assert_int_equal(a.idx, b.idx);
    last = a.t;
    popped++;
  }
  assert_int_equal(sim_queue_pop(&q, &b), 0);
  assert_int_equal(q.n, 0);
  printf("# %llu events in the same order, up to %.1f s\n", (unsigned long long)popped,
         (double)last / 1e9);
  assert_true(last > 17200000000); /* beyond the ring */
  sim_queue_free(&q);
  free(r.ring);
  free(r.node);
  free(r.next);
  free(r.front.a);
  free(r.far.a);
}

/* Two tiers, retries, a budget and a breaker, a deadline, a trigger: most of the engine. */
static const char busy[] =
    "seed 5\nduration 3s\ndrain 5s\nwindow 100ms\nnetwork delay=uniform:100us:900us\n"
    "policy front attempts=4 backoff=exponential base=20ms max=200ms jitter=full timeout=150ms "
    "deadline=600ms propagate=yes budget=ratio breaker=yes breaker.window=50 breaker.min=20 "
    "breaker.open=50ms breaker.wait=yes limiter=2000:50\n"
    "policy inner attempts=3 backoff=exponential base=5ms max=50ms jitter=decorrelated "
    "timeout=60ms propagate=yes budget=token\n"
    "policy naive attempts=4 backoff=none timeout=100ms retry_on=all\n"
    "tier api servers=2 workers=4 service=exp:2ms queue=100 discipline=lifo drop_expired=yes "
    "calls=db policy=inner\n"
    "tier db servers=1 workers=6 service=choice:2ms/3,6ms/1 queue=200 drop_expired=yes\n"
    "client users rate=1200/s target=api policy=front\n"
    "client loopers loop=closed count=40 think=exp:20ms target=db policy=naive\n"
    "trigger slowdown tier=db from=1s to=1.6s factor=5\n"
    "trigger outage tier=api from=2s to=2.2s fail=none\n"
    "trigger capacity tier=db from=2.4s to=2.6s workers=1\n"
    "trigger burst client=users from=0.5s to=0.8s factor=3\n";

static void test_determinism(void **state) {
  (void)state;
  sim_scenario s;
  parse_or_fail(busy, &s);
  sim_result a, b;
  run_or_fail(&s, &a);
  run_or_fail(&s, &b);
  size_t la, lb;
  char *oa = outputs(&a, &la), *ob = outputs(&b, &lb);
  assert_true(la > 1000);
  assert_int_equal(la, lb);
  assert_memory_equal(oa, ob, la);
  assert_int_equal(a.events, b.events);
  /* Another seed is another run. */
  s.seed = 6;
  sim_result c;
  run_or_fail(&s, &c);
  size_t lc;
  char *oc = outputs(&c, &lc);
  assert_true(lc != la || memcmp(oa, oc, la) != 0);
  free(oa);
  free(ob);
  free(oc);
  sim_result_free(&a);
  sim_result_free(&b);
  sim_result_free(&c);
}

static void test_conservation(void **state) {
  (void)state;
  sim_scenario s;
  parse_or_fail(busy, &s);
  sim_result r;
  run_or_fail(&s, &r);
  /* The run must exercise what it claims to check. */
  assert_true(r.calls_started > 3000);
  assert_true(r.tier[1].dropped > 0);
  assert_true(r.tier[0].rejected > 0);
  assert_true(r.tier[0].wasted + r.tier[1].wasted > 0);
  assert_true(r.group[0].by_reason[LK_REASON_BUDGET] + r.group[0].ends[LK_F_BREAKER_OPEN] +
                  r.group[0].ends[LK_F_RATE_LIMITED] >
              0);
  /* Every call ended exactly once, every attempt too. */
  assert_int_equal(r.double_ends, 0);
  assert_int_equal(r.calls_unfinished, 0);
  assert_int_equal(r.calls_started, r.calls_ended);
  assert_int_equal(r.jobs_started, r.jobs_ended);
  uint64_t calls = 0, ends = 0, attempts = 0, fates = 0, group_calls = 0;
  for (int t = 0; t < s.n_tiers; t++) {
    const sim_tier_stats *ts = &r.tier[t];
    calls += ts->calls;
    ends += ts->ok + ts->failed;
    attempts += ts->attempts;
    fates += ts->done + ts->dropped + ts->rejected;
    assert_int_equal(ts->calls, ts->ok + ts->failed);
  }
  for (int g = 0; g < s.n_groups; g++) {
    const sim_group_stats *gs = &r.group[g];
    assert_int_equal(gs->calls, gs->ok + gs->failed);
    group_calls += gs->calls;
  }
  assert_int_equal(calls, r.calls_started);
  assert_int_equal(ends, r.calls_ended);
  /* An attempt that reached a tier was served, dropped or rejected; the ones lost in the black
   * hole (the outage with no answer) were rejected too. Attempts made = attempts that arrived. */
  assert_int_equal(attempts, fates);
  assert_int_equal(attempts, r.jobs_started);
  assert_int_equal(r.attempts, r.jobs_started);
  /* The calls of the tier below are those its jobs made: one per served api attempt at most. */
  assert_int_equal(r.tier[1].calls - r.group[1].calls, r.tier[0].done);
  (void)group_calls;
  /* The windows add up to the totals. */
  uint64_t wa = 0, wok = 0;
  for (int w = 0; w < r.n_windows; w++) {
    wa += sim_win_at(&r, w, 0)->attempts;
    wok += sim_win_at(&r, w, 1)->ok;
  }
  assert_int_equal(wa, r.tier[0].attempts);
  assert_int_equal(wok, r.tier[1].ok);
  sim_result_free(&r);
}

/* n tiers, each retrying its call to the next 3 times, the last one down: 3^k attempts at the
 * k-th tier per client call, exactly. */
static void test_amplification_3_pow_n(void **state) {
  (void)state;
  for (int n = 1; n <= 4; n++) {
    char text[2048];
    int len = snprintf(text, sizeof text,
                       "seed 1\nduration 1s\ndrain 30s\nwindow 100ms\nnetwork delay=const:100us\n"
                       "policy three attempts=3 backoff=none timeout=20s\n");
    for (int t = 0; t < n; t++) {
      if (t + 1 < n)
        len +=
            snprintf(text + len, sizeof text - (size_t)len,
                     "tier t%d workers=10000 service=const:1ms calls=t%d policy=three\n", t, t + 1);
      else
        len += snprintf(text + len, sizeof text - (size_t)len,
                        "tier t%d workers=10000 service=const:1ms\n", t);
    }
    snprintf(text + len, sizeof text - (size_t)len,
             "client c rate=20/s arrivals=uniform target=t0 policy=three\n"
             "trigger outage tier=t%d from=0s to=1h\n",
             n - 1);
    sim_scenario s;
    parse_or_fail(text, &s);
    sim_result r;
    run_or_fail(&s, &r);
    uint64_t calls = r.group[0].calls;
    assert_int_equal(calls, 20);
    assert_int_equal(r.group[0].failed, calls);
    uint64_t expect = calls;
    for (int t = 0; t < n; t++) {
      expect *= 3;
      if (r.tier[t].attempts != expect)
        fail_msg("%d tiers: tier %d got %llu attempts, expected %llu", n, t,
                 (unsigned long long)r.tier[t].attempts, (unsigned long long)expect);
    }
    assert_int_equal(r.calls_unfinished, 0);
    sim_result_free(&r);
  }
}

/* drop_expired=short answers 504 without working when the caller's time left is shorter than
 * the work; =yes only drops what has expired, so that work is done for nobody. */
static void test_drop_short(void **state) {
  (void)state;
  static const char text[] = "seed 1\nduration 1s\ndrain 2s\nnetwork delay=const:1ms\n"
                             "policy p attempts=1 timeout=50ms propagate=yes\n"
                             "tier a workers=100 service=const:100ms drop_expired=short\n"
                             "client c rate=100/s arrivals=uniform target=a policy=p\n";
  sim_scenario s;
  parse_or_fail(text, &s);
  sim_result r;
  run_or_fail(&s, &r);
  assert_int_equal(r.group[0].calls, 100);
  assert_int_equal(r.tier[0].dropped, 100);
  assert_int_equal(r.tier[0].done, 0);
  assert_int_equal(r.group[0].ends[LK_F_HTTP_504], 100); /* answered, not timed out */
  sim_result_free(&r);
  s.tiers[0].drop_short = false;
  run_or_fail(&s, &r);
  assert_int_equal(r.tier[0].dropped, 0);
  assert_int_equal(r.tier[0].done, 100);
  assert_int_equal(r.tier[0].wasted, 100);
  assert_int_equal(r.group[0].ends[LK_F_READ_TIMEOUT], 100);
  sim_result_free(&r);
}

/* Zero delays everywhere and a breaker that refuses at once: time still advances and the run
 * ends (a closed-loop client whose call took no time would otherwise call again at the same
 * instant forever). */
static void test_zero_delays_terminate(void **state) {
  (void)state;
  static const char text[] =
      "seed 1\nduration 2ms\ndrain 0s\nwindow 100us\nnetwork delay=0s\n"
      "policy p attempts=1000000 backoff=exponential base=1ms max=1ms jitter=full timeout=1s "
      "breaker=yes breaker.window=10 breaker.min=5 breaker.open=500us\n"
      "tier a workers=1 service=0s\n"
      "client c loop=closed count=3 think=0s target=a policy=p\n"
      "trigger outage tier=a from=0s to=1h\n";
  sim_scenario s;
  parse_or_fail(text, &s);
  sim_result r;
  run_or_fail(&s, &r);
  assert_true(r.group[0].ends[LK_F_BREAKER_OPEN] > 0);
  assert_true(r.events < 20000000); /* about one per client and ns while refused */
  assert_int_equal(r.double_ends, 0);
  sim_result_free(&r);
}

/* A run ten times longer in a steady state needs no more pool or heap memory: memory follows
 * the requests in flight. */
static void test_memory_follows_in_flight(void **state) {
  (void)state;
  static const char steady[] =
      "seed 3\ndrain 2s\nwindow 1s\nnetwork delay=uniform:100us:300us\n"
      "policy p attempts=3 backoff=exponential base=10ms max=100ms jitter=full timeout=50ms "
      "deadline=200ms propagate=yes budget=ratio\n"
      "tier a servers=4 workers=8 service=exp:1ms queue=500 drop_expired=yes\n"
      "client c rate=20000/s target=a policy=p\n";
  sim_scenario s;
  parse_or_fail(steady, &s);
  s.duration = 2000000000;
  sim_result shortr, longr;
  lk_test_alloc_count_start();
  run_or_fail(&s, &shortr);
  uint64_t allocs_short = lk_test_alloc_count_stop();
  s.duration = 20000000000;
  lk_test_alloc_count_start();
  run_or_fail(&s, &longr);
  uint64_t allocs_long = lk_test_alloc_count_stop();
  /* The loop allocates nothing per event: ten times the events, the same allocations give or
   * take a pool doubling (the setup's are the same for both). */
  printf("# allocations: %llu for %llu attempts, %llu for %llu\n", (unsigned long long)allocs_short,
         (unsigned long long)shortr.attempts, (unsigned long long)allocs_long,
         (unsigned long long)longr.attempts);
  assert_true(allocs_long <= allocs_short + 8);
  assert_true(longr.attempts > 9 * shortr.attempts);
  assert_true(longr.peak_bytes <= 2 * shortr.peak_bytes);
  assert_true(longr.peak_calls < 2 * shortr.peak_calls + 64);
  sim_result_free(&shortr);
  sim_result_free(&longr);
}

/* A trigger after the arrivals stop (or ending less than the 500 ms window before) cannot show a
 * recovery: n/a, not "never", which would say the fleet stayed down. */
static void test_recovery_trigger_too_late(void **state) {
  (void)state;
  static const char text[] = "seed 1\nduration 2s\ndrain 1s\nwindow 100ms\n"
                             "policy q attempts=2 timeout=50ms\n"
                             "tier t service=const:1ms workers=10 queue=10\n"
                             "client c rate=1000/s target=t policy=q\n"
                             "trigger outage tier=t from=100s to=200s\n"
                             "trigger outage tier=t from=1.7s to=1.8s\n"
                             "trigger outage tier=t from=1s to=1.2s\n";
  sim_scenario s;
  sim_result r;
  parse_or_fail(text, &s);
  run_or_fail(&s, &r);
  assert_true(sim_recovery(&r, 0) == SIM_RECOVERY_TOO_LATE);
  assert_true(sim_recovery(&r, 1) == SIM_RECOVERY_TOO_LATE);
  assert_true(sim_recovery(&r, 2) >= 0); /* 800 ms of arrivals after it */
  size_t len;
  char *out = outputs(&r, &len);
  assert_non_null(strstr(out, "100s..200s: recovery n/a (the arrivals stop too soon after it)"));
  assert_null(strstr(out, "recovery never"));
  free(out);
  sim_result_free(&r);
}

/* A timeout far longer than the attempts: the timeouts of attempts that ended are not kept for
 * the timeout's length (they were: memory grew with rate x timeout, 272 MB at 200 000/s under
 * 1 h), and the outputs are those of the same run with a short timeout that never fires. */
static void test_memory_long_timeout(void **state) {
  (void)state;
  static const char fmt[] = "seed 5\nduration 2s\ndrain 0s\nwindow 1s\n"
                            "policy q attempts=1 timeout=%s\n"
                            "tier t service=const:1ms workers=100 queue=0\n"
                            "client c rate=200000/s target=t policy=q\n";
  char text[512];
  sim_scenario s;
  sim_result longr, shortr;
  snprintf(text, sizeof text, fmt, "1h");
  parse_or_fail(text, &s);
  run_or_fail(&s, &longr);
  snprintf(text, sizeof text, fmt, "1s");
  parse_or_fail(text, &s);
  run_or_fail(&s, &shortr);
  printf("# peak bytes: %zu with a 1 h timeout, %zu with 1 s; %llu attempts\n", longr.peak_bytes,
         shortr.peak_bytes, (unsigned long long)longr.attempts);
  assert_true(longr.attempts > 390000);
  assert_int_equal(longr.attempts, shortr.attempts);
  assert_int_equal(longr.group[0].ok, shortr.group[0].ok);
  /* about 200 calls in flight: under 1 MB of pools and queues (400 000 kept timeouts were 9 MB) */
  assert_true(longr.peak_bytes < (size_t)2 << 20);
  assert_true(shortr.peak_bytes < (size_t)2 << 20);
  sim_result_free(&shortr);
  sim_result_free(&longr);
}

/* An idle leaf server costs two events per call: the arrival at the client and the end of the
 * work. The attempt reaches the server when it is sent (the server runs one inbound delay ahead)
 * and a success that surely beats its timeout ends the call without a reply event; latencies are
 * still both delays plus the work, and the last end is the reply's time, not the last event's. */
static void test_events_per_attempt(void **state) {
  (void)state;
  static const char idle[] = "seed 1\nduration 1s\ndrain 1s\nwindow 100ms\n"
                             "network delay=const:200us\n"
                             "policy p attempts=1 timeout=50ms\n"
                             "tier a servers=2 workers=64 service=const:1ms queue=100\n"
                             "client c rate=10000/s arrivals=uniform target=a policy=p\n";
  sim_scenario s;
  parse_or_fail(idle, &s);
  sim_result r;
  run_or_fail(&s, &r);
  assert_int_equal(r.group[0].calls, 10000);
  assert_int_equal(r.group[0].ok, 10000);
  assert_int_equal(r.attempts, 10000);
  /* Two per call, plus the timeout FIFO's wake-ups (one per timeout length, about 40 here). */
  if (r.events > 2 * r.attempts + 100)
    fail_msg("%llu events for %llu attempts", (unsigned long long)r.events,
             (unsigned long long)r.attempts);
  int64_t p50 = lk_hist_percentile(r.group[0].latency, 50);
  assert_true(p50 >= 1390000 && p50 <= 1410000);
  /* The last call starts at 999.9 ms and ends 1.4 ms later. */
  assert_int_equal(r.group[0].last_end, 999900000 + 1400000);
  sim_result_free(&r);
}

/* Open-loop arrivals are not events in the queue: the loop takes each group's next arrival when
 * it is no later than the queue's first event. Two groups whose arrivals are half a second or
 * more apart (the queue empty between them), one of them doubled by a burst for a while: every
 * arrival is made, at its time, and the queue never holds one. */
static void test_open_arrivals(void **state) {
  (void)state;
  static const char text[] = "seed 1\nduration 10s\ndrain 1s\nwindow 1s\n"
                             "network delay=const:1ms\n"
                             "policy p attempts=1 timeout=50ms\n"
                             "tier a workers=4 service=const:1ms\n"
                             "client slow rate=1/s arrivals=uniform target=a policy=p\n"
                             "client fast rate=2/s arrivals=uniform target=a policy=p\n"
                             "trigger burst client=fast from=4.1s to=6.1s factor=2\n";
  sim_scenario s;
  parse_or_fail(text, &s);
  sim_result r;
  run_or_fail(&s, &r);
  assert_int_equal(r.group[0].calls, 10); /* 0 s, 1 s, ..., 9 s */
  /* Each gap is drawn at the arrival before it, at that moment's rate: 0, 0.5, ..., 4 s (9);
   * 4.5, 4.75, ..., 6.25 s (8); 6.75, ..., 9.75 s (7). */
  assert_int_equal(r.group[1].calls, 24);
  assert_int_equal(r.group[0].ok + r.group[1].ok, 34);
  int64_t rtt = 3000000; /* 1 ms there, 1 ms of work, 1 ms back */
  assert_int_equal(r.group[0].last_end, 9000000000 + rtt);
  assert_int_equal(r.group[1].last_end, 9750000000 + rtt);
  /* per call: its arrival, its job's end (the reply folded) and a wake-up of the timeout FIFO
   * (its only entry each time); and the burst's two */
  if (r.events > 3 * 34 + 2)
    fail_msg("%llu events", (unsigned long long)r.events);
  assert_true(r.peak_events <= 6); /* never the 34 arrivals */
  sim_result_free(&r);
}

/* The ziggurat's draws are exponential: 2 M draws in 64 bins of equal probability (chi-square,
 * 63 degrees of freedom: 110 is beyond its 99.98th percentile), the mean, and the far tail that
 * only layer 0's fallback reaches (P(X > 7.7) = 4.5e-4). */
static void test_exp_draws(void **state) {
  (void)state;
  sim_exp_table zt;
  sim_exp_init(&zt);
  lk_rand_fast g;
  lk_rand_fast_seeded(&g, 42);
  enum { N = 2000000, BINS = 64 };
  uint64_t bin[BINS] = {0}, tail = 0;
  double sum = 0;
  for (int i = 0; i < N; i++) {
    double x = sim_exp_draw(&zt, &g);
    assert_true(x >= 0);
    sum += x;
    tail += x > 7.7;
    int b = (int)((1.0 - exp(-x)) * BINS); /* the CDF maps an exponential to a uniform */
    bin[b < BINS ? b : BINS - 1]++;
  }
  double chi = 0, e = (double)N / BINS;
  for (int b = 0; b < BINS; b++)
    chi += ((double)bin[b] - e) * ((double)bin[b] - e) / e;
  printf("# exponential: mean %.5f chi-square %.1f tail %llu\n", sum / N, chi,
         (unsigned long long)tail);
  assert_true(chi < 110);
  assert_true(fabs(sum / N - 1.0) < 0.003);
  double want = N * exp(-7.7);
  assert_true(fabs((double)tail - want) < 0.2 * want);
}

/* Calls the breaker refused wait in one queue its probes' outcomes wake, instead of asking every
 * 5 ms: here ~90 calls wait through a 300 ms probe and 6 fail at once with the breaker open
 * (polling cost 19 000 events; now two per call and a few wakes), and every call still ends. */
static void test_breaker_waiters_woken(void **state) {
  (void)state;
  static const char text[] =
      "seed 1\nduration 1s\ndrain 3s\nwindow 100ms\nnetwork delay=const:100us\n"
      "policy p attempts=1 timeout=1s deadline=2s breaker=yes breaker.window=10 breaker.min=5 "
      "breaker.open=50ms breaker.probes=1 breaker.wait=yes\n"
      "tier a workers=1000 service=const:300ms queue=100\n"
      "client c rate=1000/s arrivals=uniform target=a policy=p\n"
      "trigger outage tier=a from=0s to=100ms fail=refused\n";
  sim_scenario s;
  parse_or_fail(text, &s);
  sim_result r;
  run_or_fail(&s, &r);
  assert_int_equal(r.group[0].calls, 1000);
  assert_int_equal(r.calls_ended, 1000);
  assert_int_equal(r.double_ends, 0);
  assert_int_equal(r.group[0].ok, 994);
  if (r.events > 3 * r.group[0].calls)
    fail_msg("%llu events for %llu calls", (unsigned long long)r.events,
             (unsigned long long)r.group[0].calls);
  sim_result_free(&r);
}

/* A wake in which the breaker admits only its probes lets the calls ask until one is refused, and
 * settles the rest without touching them: each of them would be refused the same way (a cold call
 * each, most of the overload row's time in bench_sim). Here the calls that wait through the
 * outage's rounds of failing probes ask 205 times, where asking them all at each wake took 681,
 * with the same outcome (989 successes in 2009 events either way). */
static void test_breaker_wake_asks_few(void **state) {
  (void)state;
  static const char text[] =
      "seed 1\nduration 1s\ndrain 2s\nwindow 100ms\nnetwork delay=const:100us\n"
      "policy p attempts=1 timeout=1s deadline=2s breaker=yes breaker.window=10 breaker.min=5 "
      "breaker.open=50ms breaker.probes=2 breaker.wait=yes\n"
      "tier a workers=1000 service=const:1ms queue=100\n"
      "client c rate=1000/s arrivals=uniform target=a policy=p\n"
      "trigger outage tier=a from=0s to=200ms fail=refused\n";
  sim_scenario s;
  parse_or_fail(text, &s);
  sim_result r;
  run_or_fail(&s, &r);
  assert_int_equal(r.calls_ended, 1000);
  assert_int_equal(r.calls_unfinished, 0);
  assert_int_equal(r.group[0].ok, 989);
  assert_int_equal(r.events, 2009);
  if (r.waiter_asks > 250)
    fail_msg("%llu asks of the breaker by woken calls", (unsigned long long)r.waiter_asks);
  sim_result_free(&r);
}

/* A call the breaker makes wait gives up with BREAKER_OPEN 1 ms before its deadline, also when its
 * slot held a call that ended while waiting (here: woken, then refused by the limiter; the slot's
 * flag that a give-up was queued then outlived it, the next call waited past its deadline and
 * failed DEADLINE_EXCEEDED at a later wake, 63 of them). */
static void test_breaker_waiter_gives_up(void **state) {
  (void)state;
  static const char text[] =
      "seed 7\nduration 1s\ndrain 1s\nwindow 100ms\nnetwork delay=const:100us\n"
      "policy p attempts=1 timeout=100ms deadline=300ms breaker=yes breaker.window=10 "
      "breaker.min=5 breaker.open=50ms breaker.probes=1 breaker.wait=yes limiter=2000:20\n"
      "tier a workers=100 service=const:200ms queue=100\n"
      "client c loop=closed count=200 think=const:5ms target=a policy=p\n"
      "trigger outage tier=a from=0s to=200ms fail=refused\n";
  sim_scenario s;
  parse_or_fail(text, &s);
  sim_result r;
  run_or_fail(&s, &r);
  assert_int_equal(r.calls_unfinished, 0);
  assert_int_equal(r.double_ends, 0);
  assert_int_equal(r.group[0].ends[LK_F_DEADLINE_EXCEEDED], 0);
  assert_int_equal(r.group[0].ends[LK_F_BREAKER_OPEN], 63);
  assert_true(r.group[0].ends[LK_F_RATE_LIMITED] > 10000);
  sim_result_free(&r);
}

/* The busy % of a tier is the worker time within the run, whether or not the work ended in it:
 * work still in service when the run stops (a job longer than the run, a worker waiting for its
 * call below) counts up to the end of the drain; it used to count only work that had ended. */
static const char *busy_of(const char *summary, const char *tier, char *out, size_t cap) {
  char key[64];
  snprintf(key, sizeof key, "\n%s ", tier);
  const char *line = strstr(summary, key);
  assert_non_null(line);
  const char *end = strchr(line + 1, '\n');
  assert_non_null(end);
  const char *field = end;
  while (field > line && field[-1] != ' ')
    field--;
  snprintf(out, cap, "%.*s", (int)(end - field), field);
  return out;
}

static void test_busy_counts_work_in_progress(void **state) {
  (void)state;
  sim_scenario s;
  parse_or_fail("duration 1s\ndrain 2s\nwindow 100ms\nnetwork delay=const:1ms\n"
                "policy p attempts=1 timeout=1h\n"
                "tier a service=1ms calls=b policy=p\n"
                "tier b workers=2 service=10s\n"
                "client c loop=closed count=1 ops=1 target=a policy=p\n",
                &s);
  sim_result r;
  run_or_fail(&s, &r);
  assert_int_equal(r.calls_unfinished, 2); /* the client's call and a's call to b */
  assert_int_equal(r.tier[1].done, 0);
  assert_int_equal(r.busy_end, 3000000000); /* duration + drain: the run watched them till then */
  /* a's worker from its arrival (1 ms) on, holding it for the call below; b's from 2 ms on */
  assert_int_equal(r.tier[0].busy_ns, 2999000000);
  assert_int_equal(r.tier[1].busy_ns, 2998000000);
  size_t len;
  char *text = outputs(&r, &len), f[32];
  assert_string_equal(busy_of(text, "a", f, sizeof f), "100.0%");
  assert_string_equal(busy_of(text, "b", f, sizeof f), "50.0%"); /* one of its two workers */
  free(text);
  sim_result_free(&r);
  /* Work that ends within the run counts as before, over the run up to its last event. */
  parse_or_fail("duration 1s\ndrain 1s\nwindow 30ms\nnetwork delay=const:1ms\n"
                "policy p attempts=1 timeout=1h\n"
                "tier t workers=2 service=100ms\n"
                "client c loop=closed count=1 ops=3 target=t policy=p\n",
                &s);
  run_or_fail(&s, &r);
  assert_int_equal(r.calls_unfinished, 0);
  assert_int_equal(r.tier[0].done, 3);
  assert_int_equal(r.tier[0].busy_ns, 300000000);
  assert_int_equal(r.busy_end, r.end_time);
  sim_result_free(&r);
}

/* Every allocation of a run fails in turn (the event queue, the call and job pools, the timeout
 * FIFOs, the breaker waiters' queue, the histograms and series): sim_run says LK_ENOMEM with a
 * reason and frees what it took (ASan in CI), and a run that got all its memory gives the same
 * bytes as one never armed. Two tiers, a breaker whose calls wait through an outage. */
static void test_every_allocation_fails_in_turn(void **state) {
  (void)state;
  sim_scenario sc;
  parse_or_fail("seed 3\nduration 3s\ndrain 2s\nwindow 100ms\nnetwork delay=uniform:50us:150us\n"
                "policy p attempts=3 timeout=200ms deadline=1s propagate=yes budget=ratio "
                "breaker=yes breaker.window=20 breaker.min=10 breaker.open=50ms breaker.wait=yes\n"
                "policy q attempts=2 timeout=100ms propagate=yes\n"
                "tier front workers=8 service=exp:2ms queue=32 calls=back policy=q\n"
                "tier back workers=4 service=exp:4ms queue=16 drop_expired=short\n"
                "client users rate=400/s target=front policy=p\n"
                "trigger outage tier=back from=1s to=1.6s fail=503\n",
                &sc);
  sim_result want;
  run_or_fail(&sc, &want);
  size_t want_len = 0;
  char *want_out = outputs(&want, &want_len);
  sim_result_free(&want);
  long n = 1;
  for (;; n++) {
    assert_true(n < 100000);
    sim_result r;
    const char *why = NULL;
    allocfail_nth(n);
    int rc = sim_run(&sc, &r, &why);
    bool hit = allocfail_end();
    if (!hit) {
      assert_int_equal(rc, LK_OK);
      size_t len = 0;
      char *out = outputs(&r, &len);
      assert_int_equal(len, want_len);
      assert_memory_equal(out, want_out, len);
      free(out);
      sim_result_free(&r);
      break;
    }
    if (rc == LK_OK) { /* a failure the run could do without */
      sim_result_free(&r);
      continue;
    }
    assert_int_equal(rc, LK_ENOMEM);
    assert_non_null(why);
  }
  assert_true(n > 10);
  free(want_out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_heap_order),
      cmocka_unit_test(test_calendar_order),
      cmocka_unit_test(test_calendar_ties),
      cmocka_unit_test(test_determinism),
      cmocka_unit_test(test_conservation),
      cmocka_unit_test(test_amplification_3_pow_n),
      cmocka_unit_test(test_drop_short),
      cmocka_unit_test(test_zero_delays_terminate),
      cmocka_unit_test(test_memory_follows_in_flight),
      cmocka_unit_test(test_memory_long_timeout),
      cmocka_unit_test(test_recovery_trigger_too_late),
      cmocka_unit_test(test_events_per_attempt),
      cmocka_unit_test(test_open_arrivals),
      cmocka_unit_test(test_exp_draws),
      cmocka_unit_test(test_breaker_waiters_woken),
      cmocka_unit_test(test_breaker_waiter_gives_up),
      cmocka_unit_test(test_breaker_wake_asks_few),
      cmocka_unit_test(test_busy_counts_work_in_progress),
      cmocka_unit_test(test_every_allocation_fails_in_turn),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
