/* SPDX-License-Identifier: MIT */
/* output.c: the summary table and the CSV time series of a run. Only simulated quantities are
 * printed (no wall time), so the output of a seed is the same on every machine, byte for byte. */
#include "sim/sim.h"

#include <linkd/duration.h>

#include <string.h>

static uint64_t client_calls(const sim_result *r) {
  uint64_t n = 0;
  for (int g = 0; g < r->sc.n_groups; g++)
    n += r->group[g].calls;
  return n;
}

static double pct(uint64_t a, uint64_t b) { return b ? 100.0 * (double)a / (double)b : 0.0; }

static const char *fmt_ns(int64_t ns, char *buf, size_t cap) {
  return lk_duration_format(ns, buf, cap);
}

static const char *const trig_names[] = {"outage", "slowdown", "capacity", "burst"};

void sim_write_summary(FILE *f, const sim_result *r) {
  const sim_scenario *sc = &r->sc;
  char a[32], b[32], c[32];
  fprintf(f, "seed %llu, %s of arrivals + up to %s to drain, window %s\n",
          (unsigned long long)sc->seed, fmt_ns(sc->duration, a, sizeof a),
          fmt_ns(sc->drain, b, sizeof b), fmt_ns(sc->window, c, sizeof c));
  fprintf(f, "%-14s %10s %8s %8s %10s %9s %10s %10s %10s %10s\n", "clients", "calls", "success",
          "in dline", "goodput/s", "att/call", "p50", "p99", "p99.9", "done at");
  double secs = (double)sc->duration / 1e9;
  for (int g = 0; g < sc->n_groups; g++) {
    const sim_group_stats *s = &r->group[g];
    char d[32];
    fprintf(f, "%-14s %10llu %7.1f%% %7.1f%% %10.1f %9.2f %10s %10s %10s %10s\n",
            sc->groups[g].name, (unsigned long long)s->calls, pct(s->ok, s->calls),
            pct(s->in_deadline, s->calls), (double)s->in_deadline / secs,
            s->calls ? (double)s->attempts / (double)s->calls : 0.0,
            fmt_ns(lk_hist_percentile(s->latency, 50), a, sizeof a),
            fmt_ns(lk_hist_percentile(s->latency, 99), b, sizeof b),
            fmt_ns(lk_hist_percentile(s->latency, 99.9), c, sizeof c),
            fmt_ns(s->last_end, d, sizeof d));
  }
  uint64_t cc = client_calls(r);
  fprintf(f, "%-14s %10s %9s %10s %8s %9s %9s %9s %8s\n", "tiers", "attempts", "per call",
          "work done", "wasted", "dropped", "rejected", "max queue", "busy");
  for (int t = 0; t < sc->n_tiers; t++) {
    const sim_tier_stats *s = &r->tier[t];
    /* worker time within the run over what the configured workers had (docs/sim.md) */
    double cap = (double)sc->tiers[t].servers * sc->tiers[t].workers * (double)r->busy_end;
    fprintf(f, "%-14s %10llu %9.2f %10llu %7.1f%% %9llu %9llu %9llu %7.1f%%\n", sc->tiers[t].name,
            (unsigned long long)s->attempts, cc ? (double)s->attempts / (double)cc : 0.0,
            (unsigned long long)s->done, pct(s->wasted, s->done), (unsigned long long)s->dropped,
            (unsigned long long)s->rejected, (unsigned long long)s->queue_max,
            sc->tiers[t].kind == SIM_TIER_OCC || cap <= 0 ? 0.0 : 100.0 * (double)s->busy_ns / cap);
  }
  for (int t = 0; t < sc->n_triggers; t++) {
    const sim_trigger *tr = &sc->triggers[t];
    int64_t rec = sim_recovery(r, t);
    fprintf(f, "trigger %s %s %s..%s", trig_names[tr->kind],
            tr->kind == SIM_TRIG_BURST ? sc->groups[tr->group].name : sc->tiers[tr->tier].name,
            fmt_ns(tr->from, a, sizeof a), fmt_ns(tr->to, b, sizeof b));
    if (rec == SIM_RECOVERY_NO_BASELINE)
      fputs(": recovery n/a (no goodput before it)\n", f);
    else if (rec == SIM_RECOVERY_TOO_LATE)
      fputs(": recovery n/a (the arrivals stop too soon after it)\n", f);
    else if (rec < 0)
      fputs(": recovery never (within the run)\n", f);
    else
      fprintf(f, ": recovery %s\n", fmt_ns(rec, c, sizeof c));
  }
  for (int g = 0; g < sc->n_groups; g++) {
    const sim_group_stats *s = &r->group[g];
    if (!s->failed)
      continue;
    fprintf(f, "%s failed calls:", sc->groups[g].name);
    for (int k = 0; k < LK_F__COUNT; k++)
      if (s->ends[k])
        fprintf(f, " %s %llu", lk_failure_name((lk_failure)k), (unsigned long long)s->ends[k]);
    fputs(" | stopped by:", f);
    for (int k = LK_REASON_DEADLINE; k <= LK_REASON_BUDGET; k++)
      if (s->by_reason[k])
        fprintf(f, " %s %llu", lk_reason_name((lk_reason)k), (unsigned long long)s->by_reason[k]);
    fputc('\n', f);
  }
  fprintf(f,
          "events %llu, attempts %llu, calls %llu (ended %llu, unfinished %llu), peak in "
          "flight: %u calls, %u attempts, %u events\n",
          (unsigned long long)r->events, (unsigned long long)r->attempts,
          (unsigned long long)r->calls_started, (unsigned long long)r->calls_ended,
          (unsigned long long)r->calls_unfinished, r->peak_calls, r->peak_jobs, r->peak_events);
}

void sim_write_csv(FILE *f, const sim_result *r) {
  const sim_scenario *sc = &r->sc;
  fputs("t_s,tier,attempts,calls,ok,failed,amplification,done,wasted,dropped,rejected,queue_max,"
        "client_ok_in_deadline,p50_ms,p99_ms\n",
        f);
  int last = (int)(r->end_time / sc->window);
  if (last >= r->n_windows)
    last = r->n_windows - 1;
  for (int w = 0; w <= last; w++) {
    uint32_t started = 0;
    for (int g = 0; g < sc->n_groups; g++) {
      bool seen = false;
      for (int h = 0; h < g; h++)
        seen |= sc->groups[h].target == sc->groups[g].target;
      if (!seen)
        started += sim_win_at(r, w, sc->groups[g].target)->calls;
    }
    for (int t = 0; t < sc->n_tiers; t++) {
      const sim_win *x = sim_win_at(r, w, t);
      fprintf(f, "%.3f,%s,%u,%u,%u,%u,%.3f,%u,%u,%u,%u,%u,%u,%.3f,%.3f\n",
              (double)w * (double)sc->window / 1e9, sc->tiers[t].name, x->attempts, x->calls, x->ok,
              x->failed, started ? (double)x->attempts / started : 0.0, x->done, x->wasted,
              x->dropped, x->rejected, x->queue_max, x->in_deadline,
              (double)sim_win_latency(r, w, t, 50) / 1e6,
              (double)sim_win_latency(r, w, t, 99) / 1e6);
    }
  }
}
