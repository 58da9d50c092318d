/* SPDX-License-Identifier: MIT */
/* fault.h: seeded, reproducible fault injection for libraryd.
 *
 * A rule is one line of `key=value` pairs separated by commas, the same text for the --fault flag
 * and the admin endpoint:
 *
 *   route=POST /books/1/loans,kind=reset_after_processing,p=0.1
 *   route=GET /books/1,kind=status,code=503,retry_after=2,count=3
 *
 * Keys: route (a pattern, see lk_route_match; default "*"), kind (below), p (probability in
 * [0, 1], default 1), count (fire at most N times, then the rule is spent; default unlimited),
 * skip (let the first N matching requests through; with count this scripts "the 2nd and 3rd"),
 * and per-kind parameters. Each key at most once; delay, stall and interval at most 1h:
 *
 *   latency                 delay=100ms | delay=uniform:10ms:200ms | delay=exp:50ms (mean,
 *                           capped at 20x the mean)
 *   status                  code=500|502|503|504|429|408 (any 400-599; default 503),
 *                           retry_after=SECONDS | retry_after=date:SECONDS (an HTTP-date that
 *                           far ahead), when=before (default: nothing processed) | when=after
 *                           (processed, then the error replaces the real response)
 *   reset_before_read       RST once the request head is read, before the body
 *   reset_after_read        RST after the body is read, before processing
 *   reset_after_processing  processed and committed, then RST instead of the response
 *   close                   FIN without a response, before processing
 *   close_after_processing  processed and committed, then FIN without a response
 *   partial_stall           the status line, headers and half of the body, then a stall of
 *                           stall=DURATION (default 30s) and a close
 *   slow_body               the body in chunk=BYTES (default 16) pieces every interval=DURATION
 *                           (default 100ms)
 *   slowdown                factor=F (a decimal >= 1): the service cost of matching requests
 *                           (see work.h) is multiplied by F, for=DURATION from when the rule is
 *                           added (default: for as long as it exists); several active slowdowns
 *                           multiply. It applies to every matching request (p, count and skip are
 *                           refused) and is read when a worker takes the request, not decided here
 *
 * Every matching latency rule adds its delay; the first other rule that fires decides the
 * action; slowdown rules take no part in that decision and consume no draw. Draws come from one
 * xoshiro256** generator seeded with the configured seed, in request order, so a sequential client
 * sees the same faults on every run.
 *
 * Thread-safety: lk_faults is safe from many threads (one mutex; an empty rule set costs one
 * atomic load).
 */
#ifndef LINKD_SERVER_FAULT_H
#define LINKD_SERVER_FAULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum lk_fault_kind {
  LK_FAULT_NONE = 0,
  LK_FAULT_LATENCY,
  LK_FAULT_STATUS,
  LK_FAULT_RESET_BEFORE_READ,
  LK_FAULT_RESET_AFTER_READ,
  LK_FAULT_RESET_AFTER_PROCESSING,
  LK_FAULT_CLOSE,
  LK_FAULT_CLOSE_AFTER_PROCESSING,
  LK_FAULT_PARTIAL_STALL,
  LK_FAULT_SLOW_BODY,
  LK_FAULT_SLOWDOWN,
  LK_FAULT__COUNT /* not a kind: how many there are */
} lk_fault_kind;

typedef enum lk_delay_dist { LK_DELAY_FIXED, LK_DELAY_UNIFORM, LK_DELAY_EXP } lk_delay_dist;

typedef struct lk_fault_action {
  lk_fault_kind kind;
  int status;          /* status */
  bool after;          /* status: when=after */
  int64_t retry_after; /* status: seconds, -1 = no header */
  bool retry_after_date;
  int64_t stall_ns;    /* partial_stall */
  size_t chunk;        /* slow_body */
  int64_t interval_ns; /* slow_body */
  lk_delay_dist dist;  /* latency */
  int64_t delay_a, delay_b;
  double factor;  /* slowdown */
  int64_t for_ns; /* slowdown: active this long after being added; -1 = always */
} lk_fault_action;

#define LK_FAULT_SPEC_MAX 512
#define LK_FAULT_ROUTE_MAX 256
/* Rules in one lk_faults; the bound of delay, stall and interval (1h). */
#define LK_FAULT_RULES_MAX 64
#define LK_FAULT_DURATION_MAX_NS (3600 * INT64_C(1000000000))

typedef struct lk_fault_rule {
  int id; /* assigned by lk_faults_add */
  char route[LK_FAULT_ROUTE_MAX];
  lk_fault_action act;
  double p;
  int64_t count; /* -1 = unlimited */
  int64_t skip;
  uint64_t matched, fired;
  int64_t added_ns;             /* CLOCK_MONOTONIC, set by lk_faults_add */
  char spec[LK_FAULT_SPEC_MAX]; /* the text it was parsed from */
} lk_fault_rule;

/* What to do to one request. */
typedef struct lk_fault_plan {
  int64_t delay_ns;    /* total injected latency */
  lk_fault_action act; /* kind NONE: no other fault */
  int rule_id;         /* the rule that chose act, 0 for none */
} lk_fault_plan;

/* Parses one rule. 0 or LK_EPARSE with a message in err. */
int lk_fault_rule_parse(const char *spec, lk_fault_rule *out, char *err, size_t errcap);
/* The kind's name as used in specs ("none" for LK_FAULT_NONE). */
const char *lk_fault_kind_name(lk_fault_kind k);

typedef struct lk_faults lk_faults;
lk_faults *lk_faults_new(uint64_t seed);
void lk_faults_free(lk_faults *f);
/* Appends a copy of the rule; returns its id (> 0) or LK_ENOMEM / LK_ETOOBIG (64 rules). */
int lk_faults_add(lk_faults *f, const lk_fault_rule *r);
/* Replaces every rule with copies of rules[0..n) in one step (a concurrent decision sees the old
 * set or the new one, never a mix), reseeding first when `reseed`; their ids go to ids (may be
 * NULL). 0, or LK_ETOOBIG (n > LK_FAULT_RULES_MAX) with nothing changed. */
int lk_faults_replace(lk_faults *f, const lk_fault_rule *rules, size_t n, bool reseed,
                      uint64_t seed, int *ids);
/* 0 or LK_ENOTFOUND. */
int lk_faults_remove(lk_faults *f, int id);
void lk_faults_clear(lk_faults *f);
/* Restarts the generator from `seed` (and resets every rule's matched/fired counters). */
void lk_faults_reseed(lk_faults *f, uint64_t seed);
uint64_t lk_faults_seed(lk_faults *f);
/* Copies up to max rules (with live counters) into out; returns how many exist. */
int lk_faults_snapshot(lk_faults *f, lk_fault_rule *out, int max);
/* Decides the faults for one request. */
void lk_faults_decide(lk_faults *f, const char *method, const char *path, lk_fault_plan *out);
/* The product of the factors of the slowdown rules active at `now` that match method + path
 * (counted as matched and fired), or of every active slowdown rule when method is NULL (counts
 * untouched). 1.0 when none; capped at 1e9. */
double lk_faults_slowdown(lk_faults *f, const char *method, const char *path, int64_t now);

#endif
