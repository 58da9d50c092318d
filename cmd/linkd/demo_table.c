/* SPDX-License-Identifier: MIT */
/* demo_table.c: the comparison table as text, rows and JSON. */
#include "demo_table.h"

#include <linkd/common.h>
#include <linkd/error.h>

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

void demo_fmt_duration(int64_t ns, char *buf, size_t cap) {
  if (ns < LK_NS_PER_MS)
    snprintf(buf, cap, "%lldus", (long long)(ns / LK_NS_PER_US));
  else if (ns < 100 * LK_NS_PER_MS)
    snprintf(buf, cap, "%.2fms", (double)ns / 1e6);
  else if (ns < LK_NS_PER_S)
    snprintf(buf, cap, "%.0fms", (double)ns / 1e6);
  else
    snprintf(buf, cap, "%.2fs", (double)ns / 1e9);
}

double demo_success_rate(const demo_client_stats *c) {
  return c->ops ? (double)c->successes / (double)c->ops : 0.0;
}

double demo_attempts_per_op(const demo_client_stats *c) {
  return c->ops ? (double)c->attempts / (double)c->ops : 0.0;
}

static double per_op(int64_t n, uint64_t ops) { return ops ? (double)n / (double)ops : 0.0; }

double demo_span_s(const demo_summary *s) {
  return s->rate > 0 ? (double)s->ops / (double)s->rate : 0.0;
}

bool demo_driver_saturated(const demo_client_stats *c) {
  return c->ops > 0 && c->held * 2 > c->ops;
}

double demo_abandoned_share(const demo_client_stats *c) {
  if (!c->server_ok || c->work_done < 0 || c->work_abandoned < 0)
    return -1.0;
  int64_t all = c->work_done + c->work_abandoned; /* libraryd counts the two apart */
  return all > 0 ? (double)c->work_abandoned / (double)all : 0.0;
}

enum {
  M_IN_TIME, M_GOODPUT, M_OFFERED, M_AMPLIFICATION, M_WASTED, M_DUPS, M_OVERRUNS, M_P50, M_P99,
  M_P999, M_RECOVERY, M__COUNT
};

static const struct {
  const char *label, *hint;
} metrics[M__COUNT] = {
    {"success within deadline",
     "operations that got their definitive answer (2xx; 404 for the missing book) within the "
     "deadline plus 50 ms: later answers reach no caller"},
    {"goodput (ops/s)", "successes within the deadline per second of the schedule"},
    {"offered load at libraryd (req/s)",
     "requests libraryd received per second of the schedule, libcurl's silent re-sends included "
     "(its own count)"},
    {"amplification at libraryd",
     "requests libraryd received per logical operation (1.00 = no retries)"},
    {"work for callers already gone",
     "share of the requests libraryd's workers ran whose caller had already given up (deadline "
     "passed or connection closed before the answer): pure waste"},
    {"duplicate loans applied",
     "loans libraryd wrote twice for one operation (its own records: same X-Request-Id)"},
    {"deadline overruns", "operations that took longer than the deadline plus 50 ms"},
    {"success latency p50", "time of one successful operation, all its attempts and waits"},
    {"success latency p99", "time of one successful operation, all its attempts and waits"},
    {"success latency p99.9", "time of one successful operation, all its attempts and waits"},
    {"recovery time",
     "from the end of the outage or slowdown until goodput (500 ms average) is back to 90 % of "
     "what it was before; 'never' = not within the run"},
};

static void cell(const demo_summary *s, const demo_client_stats *c, int m, char *buf,
                 size_t cap) {
  double span = demo_span_s(s);
  switch (m) {
  case M_IN_TIME:
    snprintf(buf, cap, "%.1f%%", 100.0 * per_op((int64_t)c->successes_in_time, c->ops));
    return;
  case M_GOODPUT: snprintf(buf, cap, "%.0f", c->goodput); return;
  case M_OFFERED:
    if (c->server_ok && span > 0)
      snprintf(buf, cap, "%.0f", (double)c->server_requests / span);
    else
      snprintf(buf, cap, "n/a");
    return;
  case M_AMPLIFICATION:
    if (c->server_ok)
      snprintf(buf, cap, "%.2f", per_op(c->server_requests, c->ops));
    else
      snprintf(buf, cap, "n/a");
    return;
  case M_WASTED: {
    double w = demo_abandoned_share(c);
    if (w >= 0)
      snprintf(buf, cap, "%.1f%%", 100.0 * w);
    else
      snprintf(buf, cap, "n/a");
    return;
  }
  case M_DUPS:
    if (c->server_ok)
      snprintf(buf, cap, "%lld", (long long)c->duplicate_loans);
    else
      snprintf(buf, cap, "n/a");
    return;
  case M_P50: demo_fmt_duration(c->p50, buf, cap); return;
  case M_P99: demo_fmt_duration(c->p99, buf, cap); return;
  case M_P999: demo_fmt_duration(c->p999, buf, cap); return;
  case M_OVERRUNS: snprintf(buf, cap, "%llu", (unsigned long long)c->overruns); return;
  case M_RECOVERY:
    if (s->trigger_from >= s->trigger_to)
      snprintf(buf, cap, "-");
    else if (c->recovery == DEMO_RECOVERY_TOO_SHORT)
      snprintf(buf, cap, "n/a"); /* the run ended too soon after the trigger to tell */
    else if (c->recovery < 0)
      snprintf(buf, cap, "never");
    else if (c->recovery < DEMO_WINDOW)
      snprintf(buf, cap, "< 100ms"); /* the series' resolution */
    else
      demo_fmt_duration(c->recovery, buf, cap);
    return;
  default: snprintf(buf, cap, "?"); return;
  }
}

int demo_table_rows(const demo_summary *s, demo_row *rows, int max) {
  int n = 0;
  for (int m = 0; m < M__COUNT && n < max; m++, n++) {
    demo_row *r = &rows[n];
    if (m == M_OVERRUNS) {
      char d[32];
      demo_fmt_duration(s->deadline + s->overrun_margin, d, sizeof d);
      snprintf(r->label, sizeof r->label, "%s (> %s)", metrics[m].label, d);
    } else {
      snprintf(r->label, sizeof r->label, "%s", metrics[m].label);
    }
    r->hint = metrics[m].hint;
    for (int i = 0; i < DEMO_NCLIENTS; i++)
      cell(s, &s->c[i], m, r->cell[i], sizeof r->cell[i]);
  }
  return n;
}

void demo_table_print(FILE *f, const demo_summary *s) {
  demo_row rows[DEMO_ROWS_MAX];
  int n = demo_table_rows(s, rows, DEMO_ROWS_MAX);
  fprintf(f, "%-34s", "");
  for (int i = 0; i < DEMO_NCLIENTS; i++)
    fprintf(f, "%16s", s->c[i].title ? s->c[i].title : "");
  fputc('\n', f);
  for (int r = 0; r < n; r++) {
    fprintf(f, "%-34s", rows[r].label);
    for (int i = 0; i < DEMO_NCLIENTS; i++)
      fprintf(f, "%16s", rows[r].cell[i]);
    fputc('\n', f);
  }
  /* A schedule the driver cannot carry measures the queue in front of the client, not the
   * client: say so rather than print numbers that look like results. */
  int over = 0;
  for (int i = 0; i < DEMO_NCLIENTS; i++) {
    const demo_client_stats *c = &s->c[i];
    if (!demo_driver_saturated(c))
      continue;
    if (over++ == 0)
      fprintf(f,
              "note: the driver held most operations back for lack of a slot (--concurrency %d):\n",
              s->concurrency);
    char d[32];
    demo_fmt_duration(c->held_max, d, sizeof d);
    fprintf(f, "      %s: %llu of %llu, for up to %s\n", c->title ? c->title : c->name,
            (unsigned long long)c->held, (unsigned long long)c->ops, d);
  }
  if (over)
    fprintf(f, "      their latencies and deadlines count that wait, so these rows describe the\n"
               "      queue in front of the client: lower --rate or raise --concurrency\n");
}

static json_t *ms(int64_t ns) { return json_real((double)ns / 1e6); }

/* A JSON string of `s`, bytes that are not UTF-8 made '?'. Why: a path or message with such a
 * byte (a --libraryd or --report path, libraryd's log) made jansson refuse the string, and the
 * whole document was dropped. */
static json_t *text(const char *s) {
  json_t *j = json_string(s ? s : "");
  if (j)
    return j;
  char *copy = strdup(s);
  if (!copy)
    return NULL;
  for (unsigned char *p = (unsigned char *)copy; *p; p++)
    if (*p >= 0x80)
      *p = '?'; /* ASCII is always valid */
  j = json_string(copy);
  free(copy);
  return j;
}

static json_t *client_json(const demo_client_stats *c) {
  json_t *errors = json_object();
  for (int e = 0; e < DEMO_ERR_SLOTS; e++)
    if (c->errors[e])
      json_object_set_new(errors, e ? lk_err_name(-e) : "OK",
                          json_integer((json_int_t)c->errors[e]));
  json_t *hist = json_array();
  for (int b = 0; b < DEMO_ATTEMPT_BUCKETS; b++)
    json_array_append_new(hist, json_integer((json_int_t)c->by_attempts[b]));
  json_t *server = json_null();
  if (c->server_ok)
    server = json_pack("{s:I,s:f,s:I,s:I,s:I,s:I}", "requests", (json_int_t)c->server_requests,
                       "requests_per_op", per_op(c->server_requests, c->ops), "loans_applied",
                       (json_int_t)c->loans_applied, "duplicate_loans",
                       (json_int_t)c->duplicate_loans, "replays", (json_int_t)c->replays,
                       "faults_injected", (json_int_t)c->faults_injected);
  json_t *o = json_pack(
      "{s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:f,s:I,s:f,s:I,s:o,s:I,s:I,s:I,s:o}", "name", c->name, "title",
      c->title, "how", c->how, "implementation", c->impl, "ops", (json_int_t)c->ops, "completed",
      (json_int_t)c->done, "successes", (json_int_t)c->successes, "success_rate",
      demo_success_rate(c), "attempts", (json_int_t)c->attempts, "attempts_per_op",
      demo_attempts_per_op(c), "refused_by_breaker", (json_int_t)c->refused, "attempts_histogram",
      hist, "silent_resends", (json_int_t)c->resends, "loan_ops", (json_int_t)c->loan_ops,
      "loans_confirmed", (json_int_t)c->loans_confirmed, "server", server);
  if (!o) {
    json_decref(errors);
    return NULL;
  }
  json_object_set_new(o, "duplicate_loans",
                      c->server_ok ? json_integer((json_int_t)c->duplicate_loans) : json_null());
  json_object_set_new(o, "latency_ms",
                      json_pack("{s:o,s:o,s:o,s:o}", "p50", ms(c->p50), "p99", ms(c->p99), "p999",
                                ms(c->p999), "max", ms(c->max)));
  json_object_set_new(o, "deadline_overruns", json_integer((json_int_t)c->overruns));
  json_object_set_new(o, "held", json_integer((json_int_t)c->held));
  json_object_set_new(o, "held_max_ms", ms(c->held_max));
  json_object_set_new(o, "successes_in_deadline", json_integer((json_int_t)c->successes_in_time));
  json_object_set_new(o, "success_in_deadline_rate",
                      json_real(per_op((int64_t)c->successes_in_time, c->ops)));
  json_object_set_new(o, "goodput", json_real(c->goodput));
  json_object_set_new(o, "recovery_ms", c->recovery >= 0 ? ms(c->recovery) : json_null());
  json_object_set_new(o, "recovery_too_short",
                      json_boolean(c->recovery == DEMO_RECOVERY_TOO_SHORT));
  json_object_set_new(o, "work_done", c->work_done >= 0 ? json_integer(c->work_done) : json_null());
  json_object_set_new(o, "work_abandoned",
                      c->work_abandoned >= 0 ? json_integer(c->work_abandoned) : json_null());
  double w = demo_abandoned_share(c);
  json_object_set_new(o, "abandoned_work_share", w >= 0 ? json_real(w) : json_null());
  json_object_set_new(o, "wall_s", json_real(c->wall_s));
  json_object_set_new(o, "cut_short", json_boolean(c->cut_short));
  json_object_set_new(o, "errors", errors);
  return o;
}

static json_t *series_json(const demo_client_stats *c) {
  const demo_series *se = c->series;
  if (!se)
    return json_null();
  json_t *ok = json_array(), *failed = json_array(), *sent = json_array(), *srv = json_array();
  for (int w = 0; w < se->n; w++) {
    json_array_append_new(ok, json_integer(se->ok[w]));
    json_array_append_new(failed, json_integer(se->failed[w]));
    json_array_append_new(sent, json_integer(se->sent[w]));
    if (se->have_server)
      json_array_append_new(srv, json_integer(se->server[w]));
  }
  return json_pack("{s:o,s:o,s:o,s:o,s:o}", "window_ms", ms(DEMO_WINDOW), "ok", ok, "failed",
                   failed, "sent", sent, "server", se->have_server ? srv : (json_decref(srv), json_null()));
}

static json_t *scenario_json(const demo_summary *s) {
  json_t *faults = json_array();
  for (size_t i = 0; i < s->n_fault_rules; i++)
    json_array_append_new(faults, json_string(s->fault_rules[i]));
  json_t *clients = json_array();
  for (int i = 0; i < DEMO_NCLIENTS; i++) {
    json_t *c = client_json(&s->c[i]);
    if (c)
      json_object_set_new(c, "series", series_json(&s->c[i]));
    json_array_append_new(clients, c);
  }
  return json_pack("{s:s,s:I,s:I,s:i,s:i,s:o,s:o,s:{s:o,s:o,s:s},s:o,s:s,s:f,s:o,s:f,s:o}", "name",
                   s->name, "ops", (json_int_t)s->ops, "seed", (json_int_t)(s->seed & INT64_MAX),
                   "concurrency", s->concurrency, "rate", s->rate, "deadline_ms", ms(s->deadline),
                   "overrun_margin_ms", ms(s->overrun_margin), "trigger", "from_ms",
                   ms(s->trigger_from), "to_ms", ms(s->trigger_to), "rule",
                   s->trigger_rule ? s->trigger_rule : "", "faults", faults, "server_args",
                   s->server_args ? s->server_args : "", "capacity", s->capacity, "libraryd",
                   text(s->libraryd), "total_s", s->total_s, "clients", clients);
}

int demo_table_json(FILE *f, const demo_summary *const *s, int n, const char *report_path,
                    bool complete, const char *error) {
  json_t *arr = json_array();
  for (int i = 0; i < n; i++) {
    json_t *o = scenario_json(s[i]);
    if (!o) {
      json_decref(arr);
      return -1;
    }
    json_array_append_new(arr, o);
  }
  json_t *o = json_pack("{s:s,s:o}", "baseline_clients",
                        "lk_http layer with naive policies (no raw libcurl)", "scenarios", arr);
  if (!o)
    return -1;
  json_object_set_new(o, "report", report_path ? text(report_path) : json_null());
  json_object_set_new(o, "complete", json_boolean(complete));
  json_object_set_new(o, "error", error ? text(error) : json_null());
  int rc = json_dumpf(o, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER) == 0 ? 0 : -1;
  if (fputc('\n', f) == EOF)
    rc = -1;
  json_decref(o);
  return rc;
}
