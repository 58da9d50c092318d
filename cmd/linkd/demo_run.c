/* SPDX-License-Identifier: MIT */
/* demo_run.c: the workload, the event loop that runs it for one client, and what is computed
 * from the time series afterwards. */
#include "demo_run.h"

#include "demo_policy.h"

#include <linkd/error.h>
#include <linkd/rand.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void demo_workload_make(demo_op *ops, size_t n, uint64_t seed, int nbooks) {
  lk_rand_fast r;
  lk_rand_fast_seeded(&r, seed);
  for (size_t i = 0; i < n; i++) {
    uint64_t x = lk_rand_below(&r.base, 100);
    ops[i].kind = x < 65 ? DEMO_OP_GET : x < 70 ? DEMO_OP_GET_MISSING : DEMO_OP_LOAN;
    ops[i].book = (uint8_t)lk_rand_below(&r.base, (uint64_t)nbooks);
  }
}

typedef struct run_state run_state;

typedef struct op_slot {
  run_state *rs;
  uint32_t index;
  /* The operation's start: its latency and its deadline count from here. Its submit time, unless
   * the driver was at its --concurrency cap when the operation was due: then its time on the
   * schedule, because a caller whose request waits for a free slot waits all the same. Timed
   * from the submit, that wait was hidden (wrk2's "coordinated omission"), and with it most of
   * what a client whose calls wait for the breaker's probe costs the operations behind them.
   * (Not the schedule time always: the driver's own wake-ups are up to a millisecond late, and
   * that is the harness's, not the client's.) */
  int64_t t0;
  int64_t submitted; /* attempt offsets (lk_http_attempt_info.start) count from here */
} op_slot;

struct run_state {
  const demo_run_cfg *cfg;
  demo_client_stats *st;
  int64_t start;   /* the schedule's start */
  int64_t held_to; /* operations due at or before this schedule time found the driver at its cap */
  int in_flight;
};

static void count_error(demo_client_stats *st, int err) {
  int slot = err <= 0 && -err < DEMO_ERR_SLOTS ? -err : DEMO_ERR_SLOTS - 1;
  st->errors[slot]++;
}

/* Counts one event at time t in its window of `a`. Why not clamped to the last window: a
 * schedule longer than the series (DEMO_WINDOWS) piled everything after it into that window, a
 * spike in the chart; the series covers its first DEMO_WINDOWS windows, the counts all of it. */
static void tally(uint32_t *a, const run_state *rs, int64_t t) {
  int64_t w = (t - rs->start) / DEMO_WINDOW;
  if (w < DEMO_WINDOWS)
    a[w < 0 ? 0 : w]++;
}

static void on_done(void *ud, lk_http_result *res) {
  op_slot *slot = ud;
  run_state *rs = slot->rs;
  demo_client_stats *st = rs->st;
  demo_series *se = st->series;
  const demo_op *op = &rs->cfg->ops[slot->index];
  int64_t now = lk_now_ns();
  int64_t elapsed = now - slot->t0;
  bool overrun = elapsed > rs->cfg->deadline + rs->cfg->overrun_margin;
  if (overrun)
    st->overruns++;

  size_t n = 0;
  const lk_http_attempt_info *a = lk_http_result_attempts(res, &n);
  uint64_t sent = 0;
  for (size_t i = 0; i < n; i++) {
    if (a[i].phase == LK_PHASE_QUEUED) {
      st->refused++; /* refused by the breaker: nothing went on the wire */
    } else {
      sent++;
      tally(se->sent, rs, slot->submitted + a[i].start);
    }
  }
  st->attempts += sent;
  st->by_attempts[sent < DEMO_ATTEMPT_BUCKETS ? sent : DEMO_ATTEMPT_BUCKETS - 1]++;
  st->resends += (uint64_t)lk_http_result_resends(res);

  int status = lk_http_result_status(res);
  bool ok = (status >= 200 && status < 300) || (op->kind == DEMO_OP_GET_MISSING && status == 404);
  if (ok) {
    st->successes++;
    lk_hist_record(st->latency, elapsed);
  }
  if (ok && !overrun) {
    st->successes_in_time++;
    tally(se->ok, rs, now);
  } else {
    tally(se->failed, rs, now);
  }
  if (op->kind == DEMO_OP_LOAN && status >= 200 && status < 300)
    st->loans_confirmed++;
  count_error(st, lk_http_result_err(res));
  st->done++;
  rs->in_flight--;
  lk_http_result_free(res);
}

static int64_t due_at(const demo_run_cfg *cfg, uint64_t i) {
  return (int64_t)(i * (uint64_t)LK_NS_PER_S / (uint64_t)cfg->rate);
}

/* Builds operation i's request. NULL on no memory. */
static lk_http_request *build(const demo_run_cfg *cfg, const char *base, const char *tenant,
                              uint32_t i) {
  const demo_op *op = &cfg->ops[i];
  char url[128], rid[32], body[64];
  int64_t book = op->kind == DEMO_OP_GET_MISSING ? cfg->missing_book_id : cfg->book_ids[op->book];
  bool loan = op->kind == DEMO_OP_LOAN;
  snprintf(url, sizeof url, "%s/books/%lld%s", base, (long long)book, loan ? "/loans" : "");
  snprintf(rid, sizeof rid, "op-%u", i);
  lk_http_request *req = lk_http_request_new(loan ? "POST" : "GET", url);
  if (!req)
    return NULL;
  int rc = lk_http_request_add_header(req, "X-Tenant", tenant);
  if (rc == LK_OK)
    rc = lk_http_request_add_header(req, "X-Request-Id", rid);
  if (rc == LK_OK && loan) {
    snprintf(body, sizeof body, "{\"borrower\":\"reader-%u\"}", i);
    rc = lk_http_request_add_header(req, "Content-Type", "application/json");
    if (rc == LK_OK)
      rc = lk_http_request_set_body(req, body, strlen(body));
  }
  if (rc != LK_OK) {
    lk_http_request_free(req);
    return NULL;
  }
  return req;
}

/* Submits operation i. 0, or an lk_err (the operation is then counted as failed). */
static int submit(run_state *rs, lk_http_client *c, const lk_http_policy *pol,
                  lk_http_cancel *cancel, const demo_server *srv, op_slot *slot, uint32_t i) {
  lk_http_request *req = build(rs->cfg, srv->url, rs->st->name, i);
  slot->rs = rs;
  slot->index = i;
  int64_t due = due_at(rs->cfg, i);
  slot->submitted = lk_now_ns();
  slot->t0 = slot->submitted;
  if (due <= rs->held_to) {
    slot->t0 = rs->start + due;
    rs->st->held++;
    if (slot->submitted - slot->t0 > rs->st->held_max)
      rs->st->held_max = slot->submitted - slot->t0;
  }
  lk_http_policy p = *pol; /* copied by the call too: only a held operation's deadline differs */
  lk_deadline at = lk_deadline_after(slot->t0, pol->deadline);
  if (at.at < p.deadline_at.at)
    p.deadline_at = at;
  int rc = req ? lk_http_submit(c, req, &p, cancel, on_done, slot) : LK_ENOMEM;
  lk_http_request_free(req);
  if (rs->cfg->ops[i].kind == DEMO_OP_LOAN)
    rs->st->loan_ops++;
  if (rc == LK_OK) {
    rs->in_flight++;
  } else {
    rs->st->done++;
    rs->st->by_attempts[0]++;
    tally(rs->st->series->failed, rs, slot->submitted);
    count_error(rs->st, rc);
  }
  return rc;
}

static void sleep_ns(int64_t ns) {
  if (ns <= 0)
    return;
  struct timespec ts = {(time_t)(ns / LK_NS_PER_S), (long)(ns % LK_NS_PER_S)};
  nanosleep(&ts, NULL); /* a signal cuts it short: the loop checks the flag */
}

static void progress(demo_progress *p, const demo_client_stats *st, bool trigger) {
  demo_progress_state s = {st->title, st->done, st->ops, st->successes, st->attempts, trigger};
  demo_progress_update(p, &s, false);
}

/* The trigger: added at `trigger_from` on the schedule's clock, removed at `trigger_to`. A
 * failure to reach the admin endpoint stops the run (the comparison would be meaningless). */
static int trigger_step(const demo_run_cfg *cfg, const demo_server *srv, lk_http_client *c,
                        int64_t t, int *rule_id, bool *done, char *err, size_t errcap) {
  if (*done || cfg->trigger_from >= cfg->trigger_to)
    return 0;
  if (*rule_id == 0 && t >= cfg->trigger_from)
    return demo_server_add_fault(srv, c, cfg->trigger_rule, rule_id, err, errcap);
  if (*rule_id > 0 && t >= cfg->trigger_to) {
    int rc = demo_server_remove_fault(srv, c, *rule_id, err, errcap);
    *rule_id = -1;
    *done = true;
    return rc;
  }
  return 0;
}

int demo_run_client(int which, const demo_run_cfg *cfg, const demo_server *srv,
                    demo_cancel_publish_fn publish, demo_client_stats *st, int64_t *start_out,
                    char *err, size_t errcap) {
  demo_client_describe(which, st);
  st->ops = cfg->n;
  st->latency = lk_hist_new(1000, LK_SEC(3600)); /* 1 us .. 1 h, within 1 % */
  st->series = calloc(1, sizeof *st->series);
  demo_protect prot;
  lk_http_policy pol;
  int rc = demo_policy_make(which, cfg->deadline, cfg->seed, &prot, &pol, err, errcap);
  op_slot *slots = calloc(cfg->n ? cfg->n : 1, sizeof *slots);
  lk_http_client_config cc;
  lk_http_client_config_init_default(&cc);
  lk_http_client *c = lk_http_client_new(&cc);
  lk_http_cancel *cancel = lk_http_cancel_new();
  if (rc == 0 && (!st->latency || !st->series || !slots || !c || !cancel)) {
    snprintf(err, errcap, "out of memory");
    rc = -1;
  }
  if (rc != 0) {
    lk_http_cancel_free(cancel);
    lk_http_client_free(c);
    free(slots);
    demo_protect_free(&prot);
    return -1;
  }
  publish(cancel, c);
  const int64_t start = lk_now_ns();
  run_state rs = {cfg, st, start, -1, 0};
  *start_out = start;
  demo_progress_begin(cfg->progress, st->title);

  uint64_t next = 0;
  int trigger_id = 0;
  bool trigger_done = false, stopping = false;
  while (st->done < cfg->n) {
    int64_t now = lk_now_ns();
    if (!stopping && (*cfg->interrupted || now - start > cfg->time_limit)) {
      stopping = true; /* submit nothing more; the calls in flight end at once */
      st->cut_short = true;
      lk_http_cancel_fire(cancel);
    }
    if (stopping && rs.in_flight == 0)
      break;
    if (!stopping &&
        trigger_step(cfg, srv, c, now - start, &trigger_id, &trigger_done, err, errcap) != 0) {
      rc = -1;
      stopping = true;
      st->cut_short = true;
      lk_http_cancel_fire(cancel);
      continue;
    }
    while (!stopping && next < cfg->n && rs.in_flight < cfg->concurrency &&
           now - start >= due_at(cfg, next)) {
      submit(&rs, c, &pol, cancel, srv, &slots[next], (uint32_t)next);
      next++;
    }
    if (!stopping && next < cfg->n && rs.in_flight >= cfg->concurrency &&
        now - start >= due_at(cfg, next))
      rs.held_to = now - start; /* what is due now waits for a slot */
    /* at the concurrency cap, come back soon: a completion frees a slot but does not end the
     * driver's wait */
    int64_t wait = rs.in_flight >= cfg->concurrency ? LK_MS(1) : LK_MS(50);
    int64_t t = lk_now_ns() - start;
    if (!stopping && next < cfg->n && rs.in_flight < cfg->concurrency) {
      int64_t due = due_at(cfg, next) - t;
      wait = due < wait ? (due > 0 ? due : 0) : wait;
    }
    if (!stopping && !trigger_done && cfg->trigger_from < cfg->trigger_to) {
      int64_t edge = (trigger_id == 0 ? cfg->trigger_from : cfg->trigger_to) - t;
      wait = edge < wait ? (edge > 0 ? edge : 0) : wait;
    }
    if (rs.in_flight > 0) {
      int left = lk_http_client_run(c, wait);
      if (left < 0) {
        snprintf(err, errcap, "the HTTP driver failed: %s", lk_strerror(left));
        rc = -1;
        break;
      }
    } else {
      sleep_ns(wait);
    }
    progress(cfg->progress, st, trigger_id > 0);
  }
  /* A trigger still on (interrupted run) is not left behind: the server goes away anyway. */
  st->wall_s = (double)(lk_now_ns() - start) / 1e9;
  demo_progress_state fin = {st->title, st->done, st->ops, st->successes, st->attempts, false};
  demo_progress_end(cfg->progress, &fin, st->wall_s);
  publish(NULL, NULL);
  lk_http_client_free(c); /* cancels and completes anything left (rc < 0 paths) */
  lk_http_cancel_free(cancel);
  free(slots);
  demo_protect_free(&prot);
  st->p50 = lk_hist_percentile(st->latency, 50);
  st->p99 = lk_hist_percentile(st->latency, 99);
  st->p999 = lk_hist_percentile(st->latency, 99.9);
  st->max = lk_hist_max(st->latency);
  return rc;
}

void demo_client_finish(const demo_run_cfg *cfg, demo_client_stats *st) {
  demo_series *se = st->series;
  int64_t span = due_at(cfg, cfg->n) + cfg->deadline; /* the last operation's time to answer */
  st->goodput = span > 0 ? (double)st->successes_in_time * 1e9 / (double)span : 0;
  int nw = (int)((span + DEMO_WINDOW - 1) / DEMO_WINDOW);
  se->n = nw < DEMO_WINDOWS ? nw : DEMO_WINDOWS;
  st->baseline = 0;
  st->recovery = -1;
  if (cfg->trigger_from >= cfg->trigger_to)
    return;
  /* the baseline: the steady state before the trigger, its first second left out (warm-up) */
  int b0 = (int)(LK_SEC(1) / DEMO_WINDOW), b1 = (int)(cfg->trigger_from / DEMO_WINDOW);
  if (b1 - b0 < 3)
    b0 = b1 > 3 ? b1 - 3 : 0;
  /* Why bounded by the series: a schedule longer than it (--rate 10 --ops 1000) read the
   * baseline and the recovery far past the arrays' end. */
  if (b1 > se->n) {
    st->recovery = DEMO_RECOVERY_TOO_SHORT; /* the trigger is past the series: cannot tell */
    return;
  }
  double sum = 0;
  for (int w = b0; w < b1; w++)
    sum += se->ok[w];
  st->baseline = b1 > b0 ? sum / (b1 - b0) : 0;
  /* recovered: the first 500 ms from the trigger's end on whose mean is >= 90 % of it; the
   * schedule's last windows are not judged (no operations start there), nor what lies past the
   * series */
  int64_t end64 = due_at(cfg, cfg->n) / DEMO_WINDOW;
  int end = end64 < se->n ? (int)end64 : se->n;
  int w0 = (int)(cfg->trigger_to / DEMO_WINDOW);
  if (w0 + 5 > end) {
    st->recovery = DEMO_RECOVERY_TOO_SHORT; /* not one 500 ms span to judge: not "never" */
    return;
  }
  for (int w = w0; w + 5 <= end; w++) {
    double m = 0;
    for (int k = 0; k < 5; k++)
      m += se->ok[w + k];
    if (m / 5 >= 0.9 * st->baseline) {
      int64_t r = (int64_t)w * DEMO_WINDOW - cfg->trigger_to;
      st->recovery = r > 0 ? r : 0;
      return;
    }
  }
  if (end64 > se->n)
    st->recovery = DEMO_RECOVERY_TOO_SHORT; /* not within the series, but the run went on */
}

void demo_client_stats_free(demo_client_stats *st) {
  lk_hist_free(st->latency);
  free(st->series);
  st->latency = NULL;
  st->series = NULL;
}

/* --- capacity -------------------------------------------------------------------------------- */

typedef struct cap_state {
  int in_flight;
  uint64_t ok;
} cap_state;

static void cap_done(void *ud, lk_http_result *res) {
  cap_state *cs = ud;
  int st = lk_http_result_status(res);
  cs->ok += (st >= 200 && st < 300) || st == 404;
  cs->in_flight--;
  lk_http_result_free(res);
}

double demo_measure_capacity(const demo_server *srv, const demo_op *ops, size_t n,
                             const int64_t *book_ids, int64_t missing_book_id, int concurrency,
                             int64_t duration) {
  demo_run_cfg cfg = {.ops = ops, .n = n, .book_ids = book_ids, .missing_book_id = missing_book_id};
  lk_http_client *c = lk_http_client_new(NULL);
  if (!c)
    return LK_ENOMEM;
  lk_http_policy pol;
  lk_http_policy_init_default(&pol);
  pol.default_protection = false;
  pol.deadline = LK_SEC(10);
  pol.attempt_timeout = LK_SEC(10);
  lk_retry_config rc;
  lk_retry_config_init_default(&rc);
  rc.max_attempts = 1;
  lk_retry_policy_init(&pol.retry, &rc, NULL);
  cap_state cs = {0, 0};
  int64_t start = lk_now_ns(), warm = start + duration / 4, end = start + duration;
  uint64_t ok_at_warm = 0;
  bool warmed = false;
  size_t i = 0;
  int err = 0;
  for (;;) {
    int64_t now = lk_now_ns();
    if (!warmed && now >= warm) {
      ok_at_warm = cs.ok;
      warmed = true;
    }
    /* Why the stop token: a Ctrl-C during the probe went unnoticed until its 1.6 s were up */
    if (now >= end || lk_http_cancel_fired(srv->stop))
      break;
    while (cs.in_flight < concurrency && !err) {
      lk_http_request *req = build(&cfg, srv->url, "capacity", (uint32_t)(i++ % n));
      err = req ? lk_http_submit(c, req, &pol, srv->stop, cap_done, &cs) : LK_ENOMEM;
      lk_http_request_free(req);
      if (!err)
        cs.in_flight++;
    }
    if (err || lk_http_client_run(c, LK_MS(5)) < 0)
      break;
  }
  uint64_t ok = cs.ok - ok_at_warm;
  int64_t took = lk_now_ns() - warm;
  lk_http_client_free(c); /* cancels what is left */
  if (err)
    return err;
  return took > 0 ? (double)ok * 1e9 / (double)took : 0;
}
