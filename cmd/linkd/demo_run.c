/* demo_run.c: the workload and the event loop that runs it for one client. */
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
  int64_t t0; /* submit time */
} op_slot;

struct run_state {
  const demo_run_cfg *cfg;
  demo_client_stats *st;
  int in_flight;
};

static void count_error(demo_client_stats *st, int err) {
  int slot = err <= 0 && -err < DEMO_ERR_SLOTS ? -err : DEMO_ERR_SLOTS - 1;
  st->errors[slot]++;
}

static void on_done(void *ud, lk_http_result *res) {
  op_slot *slot = ud;
  run_state *rs = slot->rs;
  demo_client_stats *st = rs->st;
  const demo_op *op = &rs->cfg->ops[slot->index];
  int64_t elapsed = lk_now_ns() - slot->t0;
  lk_hist_record(st->latency, elapsed);
  bool overrun = elapsed > rs->cfg->deadline + rs->cfg->overrun_margin;
  if (overrun)
    st->overruns++;

  size_t n = 0;
  const lk_http_attempt_info *a = lk_http_result_attempts(res, &n);
  uint64_t sent = 0;
  for (size_t i = 0; i < n; i++) {
    if (a[i].phase == LK_PHASE_QUEUED)
      st->refused++; /* refused by the breaker: nothing went on the wire */
    else
      sent++;
  }
  st->attempts += sent;
  st->by_attempts[sent < DEMO_ATTEMPT_BUCKETS ? sent : DEMO_ATTEMPT_BUCKETS - 1]++;
  st->resends += (uint64_t)lk_http_result_resends(res);

  int status = lk_http_result_status(res);
  bool ok = (status >= 200 && status < 300) || (op->kind == DEMO_OP_GET_MISSING && status == 404);
  if (ok)
    st->successes++;
  if (ok && !overrun)
    st->successes_in_time++;
  if (op->kind == DEMO_OP_LOAN && status >= 200 && status < 300)
    st->loans_confirmed++;
  count_error(st, lk_http_result_err(res));
  st->done++;
  rs->in_flight--;
  lk_http_result_free(res);
}

/* Builds and submits operation i. 0, or an lk_err (the operation is then counted as failed). */
static int submit(run_state *rs, lk_http_client *c, const lk_http_policy *pol,
                  lk_http_cancel *cancel, const demo_server *srv, op_slot *slot, uint32_t i) {
  const demo_run_cfg *cfg = rs->cfg;
  const demo_op *op = &cfg->ops[i];
  char url[128], rid[32], body[64];
  int64_t book = op->kind == DEMO_OP_GET_MISSING ? cfg->missing_book_id : cfg->book_ids[op->book];
  bool loan = op->kind == DEMO_OP_LOAN;
  snprintf(url, sizeof url, "%s/books/%lld%s", srv->url, (long long)book, loan ? "/loans" : "");
  snprintf(rid, sizeof rid, "op-%u", i);
  lk_http_request *req = lk_http_request_new(loan ? "POST" : "GET", url);
  if (!req)
    return LK_ENOMEM;
  int rc = lk_http_request_add_header(req, "X-Tenant", rs->st->name);
  if (rc == LK_OK)
    rc = lk_http_request_add_header(req, "X-Request-Id", rid);
  if (rc == LK_OK && loan) {
    snprintf(body, sizeof body, "{\"borrower\":\"reader-%u\"}", i);
    rc = lk_http_request_add_header(req, "Content-Type", "application/json");
    if (rc == LK_OK)
      rc = lk_http_request_set_body(req, body, strlen(body));
  }
  slot->rs = rs;
  slot->index = i;
  slot->t0 = lk_now_ns();
  if (rc == LK_OK)
    rc = lk_http_submit(c, req, pol, cancel, on_done, slot);
  lk_http_request_free(req);
  if (loan)
    rs->st->loan_ops++;
  if (rc == LK_OK) {
    rs->in_flight++;
  } else {
    rs->st->done++;
    rs->st->by_attempts[0]++;
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

static void progress(demo_progress *p, const demo_client_stats *st, bool outage) {
  demo_progress_state s = {st->title, st->done, st->ops, st->successes, st->attempts, outage};
  demo_progress_update(p, &s, false);
}

/* The outage: added when operation `outage_from` is due, removed when `outage_to` is. A failure
 * to reach the admin endpoint stops the run (the comparison would be meaningless). */
static int outage_step(const demo_run_cfg *cfg, const demo_server *srv, lk_http_client *c,
                       uint64_t next, int *rule_id, bool *done, char *err, size_t errcap) {
  if (*done || cfg->outage_from >= cfg->outage_to)
    return 0;
  if (*rule_id == 0 && next >= cfg->outage_from)
    return demo_server_add_fault(srv, c, cfg->outage_rule, rule_id, err, errcap);
  if (*rule_id > 0 && next >= cfg->outage_to) {
    int rc = demo_server_remove_fault(srv, c, *rule_id, err, errcap);
    *rule_id = -1;
    *done = true;
    return rc;
  }
  return 0;
}

int demo_run_client(int which, const demo_run_cfg *cfg, const demo_server *srv,
                    demo_cancel_publish_fn publish, demo_client_stats *st, char *err,
                    size_t errcap) {
  demo_client_describe(which, st);
  st->ops = cfg->n;
  st->latency = lk_hist_new(1000, LK_SEC(3600)); /* 1 us .. 1 h, within 1 % */
  demo_protect prot;
  lk_http_policy pol;
  int rc = demo_policy_make(which, cfg->deadline, cfg->seed, &prot, &pol, err, errcap);
  op_slot *slots = calloc(cfg->n ? cfg->n : 1, sizeof *slots);
  lk_http_client_config cc;
  lk_http_client_config_init_default(&cc);
  lk_http_client *c = lk_http_client_new(&cc);
  lk_http_cancel *cancel = lk_http_cancel_new();
  if (rc == 0 && (!st->latency || !slots || !c || !cancel)) {
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
  run_state rs = {cfg, st, 0};
  demo_progress_begin(cfg->progress, st->title);

  const int64_t start = lk_now_ns();
  const int64_t period = LK_NS_PER_S / cfg->rate;
  uint64_t next = 0;
  int outage_id = 0;
  bool outage_done = false, stopping = false;
  while (st->done < cfg->n) {
    int64_t now = lk_now_ns();
    if (!stopping && (*cfg->interrupted || now - start > cfg->time_limit)) {
      stopping = true; /* submit nothing more; the calls in flight end at once */
      st->cut_short = true;
      lk_http_cancel_fire(cancel);
    }
    if (stopping && rs.in_flight == 0)
      break;
    if (!stopping && outage_step(cfg, srv, c, next, &outage_id, &outage_done, err, errcap) != 0) {
      rc = -1;
      stopping = true;
      st->cut_short = true;
      lk_http_cancel_fire(cancel);
      continue;
    }
    while (!stopping && next < cfg->n && rs.in_flight < cfg->concurrency &&
           now >= start + (int64_t)next * period) {
      submit(&rs, c, &pol, cancel, srv, &slots[next], (uint32_t)next);
      next++;
      if (next == cfg->outage_from || next == cfg->outage_to)
        break; /* let the outage switch happen on time */
    }
    /* at the concurrency cap, come back soon: a completion frees a slot but does not end the
     * driver's wait */
    int64_t wait = rs.in_flight >= cfg->concurrency ? LK_MS(1) : LK_MS(50);
    if (!stopping && next < cfg->n && rs.in_flight < cfg->concurrency) {
      int64_t due = start + (int64_t)next * period - lk_now_ns();
      wait = due < wait ? (due > 0 ? due : 0) : wait;
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
    progress(cfg->progress, st, outage_id > 0);
  }
  /* An outage still on (interrupted run) is not left behind: the server goes away anyway. */
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
