/* SPDX-License-Identifier: MIT */
/* report.c: the self-contained HTML report of `linkd demo`, with hand-made SVG charts. */
#include "report.h"

#include "demo_table.h"

#include <linkd/common.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const colors[DEMO_NCLIENTS] = {"#d62728", "#ff7f0e", "#1f77b4", "#2ca02c"};

void demo_html_escape(FILE *f, const char *s) {
  for (; s && *s; s++) {
    switch (*s) {
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '&': fputs("&amp;", f); break;
    case '"': fputs("&quot;", f); break;
    case '\'': fputs("&#39;", f); break; /* safe in a single-quoted attribute too */
    default: fputc(*s, f);
    }
  }
}

/* --- latency CDF -------------------------------------------------------------------------- */

enum { CDF_W = 720, CDF_H = 360, CDF_L = 70, CDF_R = 20, CDF_T = 20, CDF_B = 50 };
#define CDF_POINTS 240
/* The y axis stretches the tail: y = -log10(1 - F), so 90 %, 99 %, 99.9 % and 99.99 % are
 * evenly spaced; F = 1 sits at the top. */
#define CDF_NINES 4.0

static double nines(double frac) {
  double rest = 1.0 - frac;
  if (rest < 1e-4)
    rest = 1e-4;
  return -log10(rest);
}

static void cdf_range(const demo_summary *s, double *lo, double *hi) {
  int64_t mn = INT64_MAX, mx = 0;
  for (int i = 0; i < DEMO_NCLIENTS; i++) {
    if (!s->c[i].latency || lk_hist_count(s->c[i].latency) == 0)
      continue;
    int64_t a = lk_hist_min(s->c[i].latency), b = lk_hist_max(s->c[i].latency);
    mn = a < mn ? a : mn;
    mx = b > mx ? b : mx;
  }
  if (mn == INT64_MAX) {
    mn = LK_MS(1);
    mx = LK_SEC(1);
  }
  int64_t dl = s->deadline + s->overrun_margin;
  mx = mx > dl ? mx : dl; /* keep the deadline line in view */
  *lo = floor(log10((double)(mn > LK_NS_PER_US * 100 ? mn : LK_NS_PER_US * 100)));
  *hi = ceil(log10((double)mx * 1.0001));
  if (*hi <= *lo)
    *hi = *lo + 1;
}

static double cdf_x(double log_ns, double lo, double hi) {
  return CDF_L + (log_ns - lo) / (hi - lo) * (CDF_W - CDF_L - CDF_R);
}

static double cdf_y(double n) { return CDF_T + (1.0 - n / CDF_NINES) * (CDF_H - CDF_T - CDF_B); }

static const char *decade_label(int e) {
  static const char *const names[] = {"1ns",  "10ns",  "100ns", "1us", "10us", "100us", "1ms",
                                      "10ms", "100ms", "1s",    "10s", "100s", "1000s", "1e4s"};
  return e >= 0 && e < (int)(sizeof names / sizeof names[0]) ? names[e] : "";
}

void demo_report_svg_cdf(FILE *f, const demo_summary *s) {
  double lo, hi;
  cdf_range(s, &lo, &hi);
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %d %d\" width=\"%d\" "
          "height=\"%d\" role=\"img\" aria-label=\"latency CDF\" font-family=\"sans-serif\" "
          "font-size=\"12\">\n",
          CDF_W, CDF_H, CDF_W, CDF_H);
  fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n", CDF_W, CDF_H);
  /* grid: decades on x, nines on y */
  for (int e = (int)lo; e <= (int)hi; e++) {
    double x = cdf_x(e, lo, hi);
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>"
            "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
            x, CDF_T, x, CDF_H - CDF_B, x, CDF_H - CDF_B + 16, decade_label(e));
  }
  static const char *const ylab[] = {"0%", "90%", "99%", "99.9%", "99.99%"};
  for (int k = 0; k <= (int)CDF_NINES; k++) {
    double y = cdf_y(k);
    fprintf(f,
            "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>"
            "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
            CDF_L, y, CDF_W - CDF_R, y, CDF_L - 6, y + 4, ylab[k]);
  }
  /* the deadline (+ margin) */
  double dx = cdf_x(log10((double)(s->deadline + s->overrun_margin)), lo, hi);
  fprintf(f,
          "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#555\" "
          "stroke-dasharray=\"5,4\"/><text x=\"%.1f\" y=\"%d\" text-anchor=\"end\" "
          "fill=\"#555\">deadline + 50ms</text>\n",
          dx, CDF_T, dx, CDF_H - CDF_B, dx - 4, CDF_H - CDF_B - 8); /* bottom right stays free */
  /* one curve per client, sampled at log-spaced bounds */
  for (int i = 0; i < DEMO_NCLIENTS; i++) {
    const lk_hist *h = s->c[i].latency;
    if (!h || lk_hist_count(h) == 0)
      continue;
    int64_t bounds[CDF_POINTS];
    uint64_t counts[CDF_POINTS], total = 0;
    for (int k = 0; k < CDF_POINTS; k++) {
      double e = lo + (hi - lo) * k / (CDF_POINTS - 1);
      bounds[k] = (int64_t)pow(10.0, e);
      if (k > 0 && bounds[k] <= bounds[k - 1])
        bounds[k] = bounds[k - 1] + 1;
    }
    if (lk_hist_cumulative(h, bounds, CDF_POINTS, counts, &total) != 0 || total == 0)
      continue;
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", colors[i]);
    for (int k = 0; k < CDF_POINTS; k++) {
      double frac = (double)counts[k] / (double)total;
      fprintf(f, "%.1f,%.1f ", cdf_x(log10((double)bounds[k]), lo, hi), cdf_y(nines(frac)));
    }
    fputs("\"/>\n", f);
    /* legend */
    int ly = CDF_T + 10 + 18 * i;
    fprintf(f,
            "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"3\"/>"
            "<text x=\"%d\" y=\"%d\">",
            CDF_L + 10, ly, CDF_L + 34, ly, colors[i], CDF_L + 40, ly + 4);
    demo_html_escape(f, s->c[i].title);
    fprintf(f, " (%llu failed, not plotted)</text>\n",
            (unsigned long long)(s->c[i].ops - s->c[i].successes));
  }
  fprintf(f,
          "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">latency of one successful "
          "operation (log scale)</text>\n",
          (CDF_L + CDF_W - CDF_R) / 2, CDF_H - 12);
  fprintf(f,
          "<text transform=\"translate(16,%d) rotate(-90)\" text-anchor=\"middle\">successes "
          "at or below</text>\n",
          (CDF_T + CDF_H - CDF_B) / 2);
  fputs("</svg>\n", f);
}

/* --- attempts per operation ----------------------------------------------------------------- */

enum { AT_W = 720, AT_H = 320, AT_L = 60, AT_R = 20, AT_T = 30, AT_B = 50 };

void demo_report_svg_attempts(FILE *f, const demo_summary *s) {
  static const char *const xlab[DEMO_ATTEMPT_BUCKETS] = {"0 (refused)", "1", "2", "3", "4+"};
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %d %d\" width=\"%d\" "
          "height=\"%d\" role=\"img\" aria-label=\"attempts per operation\" "
          "font-family=\"sans-serif\" font-size=\"12\">\n",
          AT_W, AT_H, AT_W, AT_H);
  fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n", AT_W, AT_H);
  double ph = AT_H - AT_T - AT_B, pw = AT_W - AT_L - AT_R;
  for (int k = 0; k <= 4; k++) {
    double y = AT_T + ph * (1.0 - k / 4.0);
    fprintf(f,
            "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>"
            "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%d%%</text>\n",
            AT_L, y, AT_W - AT_R, y, AT_L - 6, y + 4, k * 25);
  }
  double group = pw / DEMO_ATTEMPT_BUCKETS, bar = group * 0.8 / DEMO_NCLIENTS;
  for (int b = 0; b < DEMO_ATTEMPT_BUCKETS; b++) {
    double gx = AT_L + group * b + group * 0.1;
    for (int i = 0; i < DEMO_NCLIENTS; i++) {
      const demo_client_stats *c = &s->c[i];
      double frac = c->ops ? (double)c->by_attempts[b] / (double)c->ops : 0.0;
      double h = ph * frac, x = gx + bar * i, y = AT_T + ph - h;
      fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">", x, y,
              bar - 2, h, colors[i]);
      fprintf(f, "<title>");
      demo_html_escape(f, c->title);
      fprintf(f, ": %llu operations (%.1f%%)</title></rect>\n",
              (unsigned long long)c->by_attempts[b], 100.0 * frac);
      if (c->by_attempts[b])
        fprintf(f,
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"10\">%.1f</text>\n",
                x + (bar - 2) / 2, y - 3, 100.0 * frac);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", gx + group * 0.4,
            AT_H - AT_B + 16, xlab[b]);
  }
  for (int i = 0; i < DEMO_NCLIENTS; i++) {
    int lx = AT_W - AT_R - 500 + 125 * i;
    fprintf(f,
            "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>"
            "<text x=\"%d\" y=\"%d\">",
            lx, AT_T - 22, colors[i], lx + 16, AT_T - 12);
    demo_html_escape(f, s->c[i].title);
    fputs("</text>\n", f);
  }
  fprintf(f,
          "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">requests sent for one logical "
          "operation (bars: %% of operations)</text>\n",
          (AT_L + AT_W - AT_R) / 2, AT_H - 12);
  fputs("</svg>\n", f);
}

/* --- time series ---------------------------------------------------------------------------- */

enum { TS_W = 900, TS_H = 190, TS_L = 60, TS_R = 20, TS_T = 24, TS_B = 34 };

static double ts_y(double v, double vmax) { return TS_T + (TS_H - TS_T - TS_B) * (1.0 - v / vmax); }

static void polyline(FILE *f, const uint32_t *v, int n, double x0, double dx, double vmax,
                     const char *color, const char *dash) {
  fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\"%s%s%s points=\"", color,
          dash ? " stroke-dasharray=\"" : "", dash ? dash : "", dash ? "\"" : "");
  for (int w = 0; w < n; w++)
    fprintf(f, "%.1f,%.1f ", x0 + dx * (w + 0.5), ts_y(v[w], vmax));
  fputs("\"/>\n", f);
}

void demo_report_svg_series(FILE *f, const demo_summary *s, int which) {
  const demo_client_stats *c = &s->c[which];
  const demo_series *se = c->series;
  if (!se || se->n <= 0)
    return;
  const uint32_t *load = se->have_server ? se->server : se->sent;
  double vmax = 10;
  for (int i = 0; i < DEMO_NCLIENTS; i++) { /* one scale for every client of the scenario */
    const demo_series *o = s->c[i].series;
    for (int w = 0; o && w < o->n; w++) {
      const uint32_t *l = o->have_server ? o->server : o->sent;
      double m = l[w] > o->ok[w] ? l[w] : o->ok[w];
      m = m > o->failed[w] ? m : o->failed[w];
      vmax = m > vmax ? m : vmax;
    }
  }
  vmax = ceil(vmax / 10) * 10;
  double pw = TS_W - TS_L - TS_R, dx = pw / se->n;
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %d %d\" width=\"%d\" "
          "height=\"%d\" role=\"img\" aria-label=\"time series\" font-family=\"sans-serif\" "
          "font-size=\"11\">\n<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n",
          TS_W, TS_H, TS_W, TS_H, TS_W, TS_H);
  /* the trigger window, within the chart (a schedule longer than the series has it later) */
  double w0 = (double)s->trigger_from / DEMO_WINDOW, w1 = (double)s->trigger_to / DEMO_WINDOW;
  w0 = w0 < se->n ? w0 : se->n;
  w1 = w1 < se->n ? w1 : se->n;
  double tx0 = TS_L + pw * w0 / se->n, tx1 = TS_L + pw * w1 / se->n;
  fprintf(f,
          "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"#f3e3c3\"/>"
          "<text x=\"%.1f\" y=\"%d\" fill=\"#8a6d3b\">%s</text>\n",
          tx0, TS_T, tx1 - tx0, TS_H - TS_T - TS_B, tx0 + 3, TS_T + 12,
          s->scenario == DEMO_SC_STORM ? "slowdown x4" : "outage");
  for (int k = 0; k <= 4; k++) {
    double v = vmax * k / 4, y = ts_y(v, vmax);
    fprintf(f,
            "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>"
            "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.0f</text>\n",
            TS_L, y, TS_W - TS_R, y, TS_L - 5, y + 4, v);
  }
  for (int sec = 0; sec * 10 <= se->n; sec++) {
    double x = TS_L + dx * sec * 10;
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%ds</text>\n", x,
            TS_H - TS_B + 14, sec);
  }
  polyline(f, load, se->n, TS_L, dx, vmax, "#777", "4,3");
  polyline(f, se->failed, se->n, TS_L, dx, vmax, "#d62728", NULL);
  polyline(f, se->ok, se->n, TS_L, dx, vmax, "#2ca02c", NULL);
  fprintf(f, "<text x=\"%d\" y=\"14\" font-weight=\"bold\">", TS_L);
  demo_html_escape(f, c->title);
  fprintf(f,
          "</text><text x=\"%d\" y=\"14\" text-anchor=\"end\"><tspan fill=\"#2ca02c\">successes"
          "</tspan> · <tspan fill=\"#d62728\">failures</tspan> · <tspan fill=\"#777\">%s</tspan> "
          "per 100 ms</text>\n",
          TS_W - TS_R, se->have_server ? "requests reaching libraryd" : "requests sent");
  fputs("</svg>\n", f);
}

/* --- the page ------------------------------------------------------------------------------- */

static const char css[] =
    "body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;"
    "color:#222;line-height:1.45}"
    "h1{font-size:1.6em}h2{font-size:1.3em;margin-top:2em}h3{font-size:1.05em}"
    "table{border-collapse:collapse;margin:1em 0}"
    "th,td{padding:.35em .7em;border-bottom:1px solid #ddd;text-align:right}"
    "th:first-child,td:first-child{text-align:left}"
    "td.hint{color:#666;font-size:.85em;text-align:left}"
    "code,pre{background:#f4f4f4;padding:.1em .3em;border-radius:3px}"
    "pre{padding:.6em;overflow-x:auto}"
    ".sw{display:inline-block;width:.8em;height:.8em;margin-right:.3em;border-radius:2px}";

static void table_html(FILE *f, const demo_summary *s) {
  demo_row rows[DEMO_ROWS_MAX];
  int n = demo_table_rows(s, rows, DEMO_ROWS_MAX);
  fputs("<table>\n<tr><th></th>", f);
  for (int i = 0; i < DEMO_NCLIENTS; i++) {
    fprintf(f, "<th><span class=\"sw\" style=\"background:%s\"></span>", colors[i]);
    demo_html_escape(f, s->c[i].title);
    fputs("</th>", f);
  }
  fputs("<th></th></tr>\n", f);
  for (int r = 0; r < n; r++) {
    fputs("<tr><td>", f);
    demo_html_escape(f, rows[r].label);
    fputs("</td>", f);
    for (int i = 0; i < DEMO_NCLIENTS; i++) {
      fputs("<td>", f);
      demo_html_escape(f, rows[r].cell[i]);
      fputs("</td>", f);
    }
    fputs("<td class=\"hint\">", f);
    demo_html_escape(f, rows[r].hint);
    fputs("</td></tr>\n", f);
  }
  fputs("</table>\n", f);
}

static double in_time(const demo_client_stats *c) {
  return c->ops ? 100.0 * (double)c->successes_in_time / (double)c->ops : 0.0;
}

static double amplification(const demo_client_stats *c) {
  return c->ops && c->server_ok ? (double)c->server_requests / (double)c->ops : 0.0;
}

static void findings(FILE *f, const demo_summary *s) {
  const demo_client_stats *nv = &s->c[DEMO_NAIVE], *fx = &s->c[DEMO_FIXED],
                          *df = &s->c[DEMO_DEFAULTS], *lk = &s->c[DEMO_LINKD];
  fputs("<ul>\n", f);
  fprintf(f,
          "<li>Success within the deadline: %.1f%% naive, %.1f%% fixed interval, %.1f%% linkd's "
          "defaults, %.1f%% linkd's policy.</li>\n",
          in_time(nv), in_time(fx), in_time(df), in_time(lk));
  fprintf(f,
          "<li>Load on libraryd: %.2f requests per operation (naive), %.2f (fixed interval), "
          "%.2f (defaults), %.2f (linkd's policy).",
          amplification(nv), amplification(fx), amplification(df), amplification(lk));
  double w = demo_abandoned_share(nv), wl = demo_abandoned_share(lk);
  if (w >= 0 && wl >= 0)
    fprintf(f, " Of the work libraryd did, %.1f%% was for naive callers that had already given "
               "up, %.1f%% for linkd's.", 100 * w, 100 * wl);
  fputs("</li>\n", f);
  if (s->scenario == DEMO_SC_STORM) {
    char r[4][32];
    const demo_client_stats *cs[4] = {nv, fx, df, lk};
    for (int i = 0; i < 4; i++) {
      if (cs[i]->recovery == DEMO_RECOVERY_TOO_SHORT)
        snprintf(r[i], sizeof r[i], "n/a (the run ended too soon)");
      else if (cs[i]->recovery < 0)
        snprintf(r[i], sizeof r[i], "never (within the run)");
      else
        demo_fmt_duration(cs[i]->recovery, r[i], sizeof r[i]);
    }
    fprintf(f,
            "<li>Recovery after the slowdown ended: naive %s, fixed interval %s, defaults %s, "
            "linkd's policy %s. A client that retries on every timeout multiplies the load while "
            "the server is slow; the server's queue then holds more work than it can finish "
            "before its callers time out, so every answer comes too late, every caller retries, "
            "and the overload sustains itself after its cause is gone (a metastable failure). "
            "A client that propagates its deadline lets libraryd drop work nobody waits for, "
            "and its retry budget and breaker keep retries from adding load.</li>\n",
            r[0], r[1], r[2], r[3]);
  } else if (nv->server_ok && lk->server_ok) {
    fprintf(f,
            "<li>Duplicates: libraryd applied %lld loans twice for the naive client, %lld for the "
            "fixed-interval one, %lld for linkd's policy. A loan whose connection was reset "
            "<em>after</em> it was committed looks like a failure to the client; retried "
            "without a key, it is applied again. With an Idempotency-Key, libraryd answers the "
            "retry from its stored result.</li>\n",
            (long long)nv->duplicate_loans, (long long)fx->duplicate_loans,
            (long long)lk->duplicate_loans);
  }
  fprintf(f,
          "<li>Deadline overruns: %llu naive, %llu fixed interval, %llu defaults, %llu linkd's "
          "policy.</li>\n",
          (unsigned long long)nv->overruns, (unsigned long long)fx->overruns,
          (unsigned long long)df->overruns, (unsigned long long)lk->overruns);
  for (int i = 0; i < DEMO_NCLIENTS; i++) {
    const demo_client_stats *c = &s->c[i];
    if (!demo_driver_saturated(c))
      continue;
    char d[32];
    demo_fmt_duration(c->held_max, d, sizeof d);
    fputs("<li><strong>The schedule was more than the driver could carry</strong> for ", f);
    demo_html_escape(f, c->title ? c->title : c->name);
    fprintf(
        f,
        ": %llu of %llu operations waited for one of its %d slots (<code>--concurrency</code>), "
        "for up to %s. Their latencies and deadlines count that wait, so this client's rows "
        "describe the queue in front of it: lower <code>--rate</code> or raise "
        "<code>--concurrency</code>.</li>\n",
        (unsigned long long)c->held, (unsigned long long)c->ops, s->concurrency, d);
  }
  fputs("</ul>\n", f);
}

static void settings(FILE *f, const demo_summary *s) {
  char d[32];
  demo_fmt_duration(s->deadline, d, sizeof d);
  fprintf(f,
          "<p>%llu logical operations per client (65%% <code>GET /books/{id}</code>, 5%% "
          "<code>GET</code> of a book that does not exist, 30%% <code>POST "
          "/books/{id}/loans</code>), started at %d per second (open loop, at most %d in "
          "flight), seed %llu, deadline %s. Each client ran against its own fresh libraryd "
          "(new SQLite file, fault generator re-seeded with the same seed).",
          (unsigned long long)s->ops, s->rate, s->concurrency, (unsigned long long)s->seed, d);
  if (s->scenario == DEMO_SC_STORM) {
    /* Why escaped: the only string of the report that went out raw */
    fputs(" libraryd ran with <code>", f);
    demo_html_escape(f, s->server_args);
    fprintf(f,
            "</code>; its capacity for this workload, measured just before (closed loop, no "
            "faults), was %.0f requests/s, so the load was %.0f%% of it.",
            s->capacity, s->capacity > 0 ? 100.0 * s->rate / s->capacity : 0);
  }
  fputs("</p>\n", f);
  if (s->n_fault_rules) {
    fputs("<p>libraryd's fault rules, in order (the first rule that fires decides; latency adds "
          "up):</p>\n<pre>",
          f);
    for (size_t i = 0; i < s->n_fault_rules; i++) {
      demo_html_escape(f, s->fault_rules[i]);
      fputc('\n', f);
    }
    fputs("</pre>\n", f);
  }
  fprintf(f, "<p>From %.2fs to %.2fs of the schedule (the shaded band), one more rule is active: "
             "<code>", (double)s->trigger_from / 1e9, (double)s->trigger_to / 1e9);
  demo_html_escape(f, s->trigger_rule);
  fputs("</code>.</p>\n", f);
}

static void clients(FILE *f, const demo_summary *s) {
  fputs("<h2>The clients</h2>\n<ul>\n", f);
  for (int i = 0; i < DEMO_NCLIENTS; i++) {
    fprintf(f, "<li><span class=\"sw\" style=\"background:%s\"></span><strong>", colors[i]);
    demo_html_escape(f, s->c[i].title);
    fputs("</strong>: ", f);
    demo_html_escape(f, s->c[i].how);
    fputs(".<br><small>", f);
    demo_html_escape(f, s->c[i].impl);
    fputs("</small></li>\n", f);
  }
  fputs("</ul>\n<p>All four use the same lk_http layer (no raw libcurl); the naive and "
        "fixed-interval ones with a policy configured to behave as such clients do.</p>\n",
        f);
}

static void scenario_html(FILE *f, const demo_summary *s) {
  fputs("<h2>Scenario: ", f);
  demo_html_escape(f, s->name); /* every interpolated string is escaped, static or not */
  fputs("</h2>\n", f);
  if (s->scenario == DEMO_SC_STORM)
    fputs("<p>libraryd with a fixed number of workers and a FIFO queue, loaded at 70% of its "
          "capacity; for a few seconds its service time is multiplied by 4 (the seeds' "
          "\"libraryd gets slow\"). What happens after the slowdown ends is the point.</p>\n",
          f);
  else
    fputs("<p>libraryd with injected faults (5xx, 429 with Retry-After, stalls, connections "
          "reset after a loan was committed) and a short outage.</p>\n",
          f);
  table_html(f, s);
  findings(f, s);
  fputs("<h3>Over time</h3>\n", f);
  for (int i = 0; i < DEMO_NCLIENTS; i++)
    demo_report_svg_series(f, s, i);
  fputs("<h3>Latency of successes</h3>\n", f);
  demo_report_svg_cdf(f, s);
  fputs("<p>Share of successful operations that finished within a given time (failures, "
        "counted in the legend, are not plotted: a fast refusal is not a fast success). The "
        "vertical axis is stretched toward the tail.</p>\n<h3>Attempts per operation</h3>\n",
        f);
  demo_report_svg_attempts(f, s);
  fputs("<p>\"0\" are operations a circuit breaker refused without touching the server.</p>\n",
        f);
  settings(f, s);
}

/* The directory part of `path` ("." when it has none). */
static void dir_of(const char *path, char *out, size_t cap) {
  const char *slash = strrchr(path, '/');
  if (!slash)
    snprintf(out, cap, ".");
  else if (slash == path)
    snprintf(out, cap, "/");
  else
    snprintf(out, cap, "%.*s", (int)(slash - path), path);
}

int demo_report_check(const char *path, char *err, size_t errcap) {
  struct stat st;
  if (stat(path, &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      snprintf(err, errcap, "--report %s: is a directory", path);
      return -1;
    }
    if (faccessat(AT_FDCWD, path, W_OK, AT_EACCESS) != 0) {
      snprintf(err, errcap, "--report %s: cannot write it: %s", path, strerror(errno));
      return -1;
    }
    return 0;
  }
  if (errno != ENOENT) {
    snprintf(err, errcap, "--report %s: %s", path, strerror(errno));
    return -1;
  }
  char dir[4096];
  dir_of(path, dir, sizeof dir);
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) ||
      faccessat(AT_FDCWD, dir, W_OK | X_OK, AT_EACCESS) != 0) {
    snprintf(err, errcap, "--report %s: cannot create a file in %s: %s", path, dir,
             errno ? strerror(errno) : "not a directory");
    return -1;
  }
  return 0;
}

static int write_page(FILE *f, const demo_summary *const *s, int n) {
  fprintf(f,
          "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<title>linkd demo: why retry policies matter</title>\n<style>%s</style>\n"
          "</head>\n<body>\n",
          css);
  fputs("<h1>linkd demo: why retry policies matter</h1>\n"
        "<p>The same workload ran against libraryd with four clients. Retries are not free: "
        "each one is more load on a server that is already struggling, and a retried write that "
        "had already been applied is applied twice.</p>\n",
        f);
  for (int i = 0; i < n; i++)
    scenario_html(f, s[i]);
  if (n > 0)
    clients(f, s[0]);
  fputs("<h2>What to try next</h2>\n<pre>"
        "libraryd --port 8080 --db /tmp/lib.db --fault 'kind=status,code=503,p=0.3' &amp;\n"
        "linkd get -v http://127.0.0.1:8080/books/1    # each attempt, phase, decision\n"
        "linkd post -v --idempotency-key auto http://127.0.0.1:8080/books/1/loans\n"
        "linkd demo --scenario storm --seed 7           # other draws\n"
        "</pre>\n<p>docs/demo.md explains every number.</p>\n</body>\n</html>\n",
        f);
  return ferror(f) ? -1 : 0;
}

int demo_report_write(const char *path, const demo_summary *const *s, int n, char *err,
                      size_t errcap) {
  /* Why a temporary file and rename() for a regular file: a failed write (a full disk) left an
   * empty or cut report behind, in place of the previous one, and two demos writing the same
   * report could interleave. A device or pipe (/dev/stdout, /dev/full) is written directly. */
  char target[4096], tmp[4096 + 16];
  struct stat st;
  bool exists = stat(path, &st) == 0;
  bool atomic = !exists || S_ISREG(st.st_mode);
  if (atomic && exists && realpath(path, target)) {
    /* through a symlink: replace the file it points to, not the link */
  } else if ((size_t)snprintf(target, sizeof target, "%s", path) >= sizeof target) {
    snprintf(err, errcap, "cannot write %s: %s", path, strerror(ENAMETOOLONG));
    return -1;
  }
  FILE *f = NULL;
  if (atomic) {
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", target);
    int fd = mkstemp(tmp);
    int mkstemp_errno = errno;
    mode_t mask = umask(0);
    umask(mask);
    if (fd >= 0 && fchmod(fd, exists ? (st.st_mode & 07777) : (0666 & ~mask)) == 0)
      f = fdopen(fd, "w");
    if (!f && fd >= 0) {
      close(fd);
      unlink(tmp);
    }
    if (!f && fd < 0 && mkstemp_errno != EACCES && mkstemp_errno != EPERM) {
      snprintf(err, errcap, "cannot write %s: %s", path, strerror(mkstemp_errno));
      return -1;
    }
    atomic = f != NULL; /* no file beside it (a writable file in a read-only directory): direct */
  }
  if (!f && !(f = fopen(path, "w"))) {
    snprintf(err, errcap, "cannot write %s: %s", path, strerror(errno));
    return -1;
  }
  errno = 0;
  bool failed = write_page(f, s, n) != 0 || fflush(f) != 0;
  int e = errno;
  if (fclose(f) != 0 && !failed) {
    failed = true;
    e = errno;
  }
  if (!failed && atomic && rename(tmp, target) != 0) {
    failed = true;
    e = errno;
  }
  if (failed) {
    if (atomic)
      unlink(tmp);
    snprintf(err, errcap, "cannot write %s: %s", path, strerror(e ? e : EIO));
    return -1;
  }
  return 0;
}
