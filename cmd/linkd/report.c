/* report.c: the self-contained HTML report of `linkd demo`, with hand-made SVG charts. */
#include "report.h"

#include "demo_table.h"

#include <linkd/common.h>

#include <errno.h>
#include <math.h>
#include <string.h>

static const char *const colors[DEMO_NCLIENTS] = {"#d62728", "#ff7f0e", "#2ca02c"};

void demo_html_escape(FILE *f, const char *s) {
  for (; s && *s; s++) {
    switch (*s) {
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '&': fputs("&amp;", f); break;
    case '"': fputs("&quot;", f); break;
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
    fputs("</text>\n", f);
  }
  fprintf(f,
          "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">latency of one logical operation "
          "(log scale)</text>\n",
          (CDF_L + CDF_W - CDF_R) / 2, CDF_H - 12);
  fprintf(f,
          "<text transform=\"translate(16,%d) rotate(-90)\" text-anchor=\"middle\">operations "
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
    int lx = AT_W - AT_R - 330 + 110 * i;
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

/* --- the page ------------------------------------------------------------------------------- */

static const char css[] =
    "body{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;padding:0 1em;"
    "color:#222;line-height:1.45}"
    "h1{font-size:1.6em}h2{font-size:1.2em;margin-top:2em}"
    "table{border-collapse:collapse;margin:1em 0}"
    "th,td{padding:.35em .8em;border-bottom:1px solid #ddd;text-align:right}"
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

static void findings(FILE *f, const demo_summary *s) {
  const demo_client_stats *nv = &s->c[DEMO_NAIVE], *lk = &s->c[DEMO_LINKD];
  fputs("<ul>\n", f);
  fprintf(f,
          "<li>Success: %.1f%% (naive), %.1f%% (fixed interval), %.1f%% (linkd). While libraryd "
          "is down no retry policy succeeds; what differs is what each client costs the "
          "service and its callers.</li>\n",
          100.0 * demo_success_rate(nv), 100.0 * demo_success_rate(&s->c[DEMO_FIXED]),
          100.0 * demo_success_rate(lk));
  fprintf(
      f,
      "<li>Amplification: the naive client sent %.2f requests per operation, linkd's policy "
      "%.2f. During the outage the naive client retried every failure at once, adding load "
      "to a server that was already failing; linkd's breaker and retry budget held back.</li>\n",
      demo_attempts_per_op(nv), demo_attempts_per_op(lk));
  if (nv->server_ok && lk->server_ok)
    fprintf(f,
            "<li>Duplicates: libraryd applied %lld loans twice for the naive client and %lld for "
            "linkd's policy. A loan whose connection was reset <em>after</em> it was committed "
            "looks like a failure to the client; retried without a key, it is applied again. "
            "With an Idempotency-Key, libraryd answers the retry from its stored result.</li>\n",
            (long long)nv->duplicate_loans, (long long)lk->duplicate_loans);
  char d[32];
  demo_fmt_duration(s->deadline, d, sizeof d);
  fprintf(
      f,
      "<li>Deadline: %llu naive operations and %llu under linkd's policy took longer than "
      "the %s deadline (+50 ms). Without a deadline a stalled server holds the caller for "
      "as long as it stalls; linkd cuts each attempt at 300 ms and the whole call at %s.</li>\n",
      (unsigned long long)nv->overruns, (unsigned long long)lk->overruns, d, d);
  fputs("</ul>\n", f);
}

static void settings(FILE *f, const demo_summary *s) {
  char d[32];
  demo_fmt_duration(s->deadline, d, sizeof d);
  fprintf(f,
          "<p>%llu logical operations per client (65%% <code>GET /books/{id}</code>, 5%% "
          "<code>GET</code> of a book that does not exist, 30%% <code>POST "
          "/books/{id}/loans</code>), started at %d per second with at most %d in flight, "
          "seed %llu, deadline %s. Each client ran against its own fresh libraryd (new SQLite "
          "file, fault generator re-seeded with the same seed).</p>\n",
          (unsigned long long)s->ops, s->rate, s->concurrency, (unsigned long long)s->seed, d);
  fputs("<h2>Fault profile</h2>\n<p>libraryd's fault rules, in order (the first rule that "
        "fires decides; latency adds up):</p>\n<pre>",
        f);
  for (size_t i = 0; i < s->n_fault_rules; i++) {
    demo_html_escape(f, s->fault_rules[i]);
    fputc('\n', f);
  }
  fputs("</pre>\n", f);
  fprintf(f,
          "<p>Outage: while operations %llu to %llu start, one more rule is active: "
          "<code>",
          (unsigned long long)s->outage_from, (unsigned long long)(s->outage_to - 1));
  demo_html_escape(f, s->outage_rule);
  fputs("</code>.</p>\n<h2>The clients</h2>\n<ul>\n", f);
  for (int i = 0; i < DEMO_NCLIENTS; i++) {
    fprintf(f, "<li><span class=\"sw\" style=\"background:%s\"></span><strong>", colors[i]);
    demo_html_escape(f, s->c[i].title);
    fputs("</strong>: ", f);
    demo_html_escape(f, s->c[i].how);
    fputs(".<br><small>", f);
    demo_html_escape(f, s->c[i].impl);
    fputs("</small></li>\n", f);
  }
  fputs("</ul>\n<p>The naive and fixed-interval clients use the same lk_http layer as linkd "
        "(no raw libcurl), with a policy configured to behave as such clients do.</p>\n",
        f);
}

int demo_report_write(const char *path, const demo_summary *s, char *err, size_t errcap) {
  FILE *f = fopen(path, "w");
  if (!f) {
    snprintf(err, errcap, "cannot write %s: %s", path, strerror(errno));
    return -1;
  }
  fprintf(f,
          "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<title>linkd demo: why retry policies matter</title>\n<style>%s</style>\n"
          "</head>\n<body>\n",
          css);
  fputs("<h1>linkd demo: why retry policies matter</h1>\n"
        "<p>The same workload ran three times against libraryd with the same seeded faults: "
        "once with a naive client, once with fixed-interval retries, once with linkd's policy. "
        "Retries are not free: each one is more load on a server that is already failing, and "
        "a retried write that had already been applied is applied twice.</p>\n",
        f);
  table_html(f, s);
  findings(f, s);
  fputs("<h2>Latency</h2>\n", f);
  demo_report_svg_cdf(f, s);
  fputs("<p>Share of operations that finished within a given time. The vertical axis is "
        "stretched toward the tail (each gridline is ten times closer to 100%), where stalls "
        "and retries show.</p>\n<h2>Attempts per operation</h2>\n",
        f);
  demo_report_svg_attempts(f, s);
  fputs("<p>How many requests each logical operation sent. \"0\" are operations linkd's "
        "circuit breaker refused without touching the server.</p>\n",
        f);
  settings(f, s);
  fputs("<h2>What to try next</h2>\n<pre>"
        "libraryd --port 8080 --db /tmp/lib.db --fault 'kind=status,code=503,p=0.3' &amp;\n"
        "linkd get -v http://127.0.0.1:8080/books/1    # each attempt, phase, decision\n"
        "linkd post -v --idempotency-key auto http://127.0.0.1:8080/books/1/loans\n"
        "linkd demo --ops 5000 --seed 7                 # a longer run, other draws\n"
        "</pre>\n<p>docs/demo.md explains every number.</p>\n</body>\n</html>\n",
        f);
  bool failed = ferror(f) != 0;
  if (fclose(f) != 0)
    failed = true;
  if (failed) {
    snprintf(err, errcap, "cannot write %s: %s", path, strerror(errno));
    return -1;
  }
  return 0;
}
