/* SPDX-License-Identifier: MIT */
/* sim_report.c: the HTML report of `linkd sim`, built like `linkd demo`'s (report.c): one
 * self-contained file, inline CSS and hand-made SVG, no script; per tier a time series of offered
 * load, goodput and wasted work, and one of queue depth, with the triggers shaded. */
#include "report.h"
#include "sim_cli.h"

#include <linkd/duration.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { W = 900, H = 200, L = 64, R = 20, T = 24, B = 34 };

static double y_of(double v, double vmax) { return T + (H - T - B) * (1.0 - v / vmax); }

static double nice_max(double v) {
  if (v <= 0)
    return 1;
  double p = pow(10, floor(log10(v)));
  double m = v / p;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

/* One chart: n windows of k series (values per second of simulated time). */
static void chart(FILE *f, const sim_result *r, const char *title, int n, int k,
                  const double *const *v, const char *const *labels, const char *const *colors) {
  const sim_scenario *sc = &r->sc;
  double vmax = 0;
  for (int s = 0; s < k; s++)
    for (int w = 0; w < n; w++)
      vmax = v[s][w] > vmax ? v[s][w] : vmax;
  vmax = nice_max(vmax);
  double pw = W - L - R, dx = pw / (n > 0 ? n : 1);
  double span = (double)n * (double)sc->window;
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %d %d\" width=\"%d\" "
          "height=\"%d\" role=\"img\" font-family=\"sans-serif\" font-size=\"11\">\n"
          "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n",
          W, H, W, H, W, H);
  for (int t = 0; t < sc->n_triggers; t++) {
    const sim_trigger *tr = &sc->triggers[t];
    double x0 = L + pw * (double)tr->from / span, x1 = L + pw * (double)tr->to / span;
    if (x1 > W - R)
      x1 = W - R;
    fprintf(f, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"#f3e3c3\"/>\n", x0, T,
            x1 - x0, H - T - B);
  }
  for (int g = 0; g <= 4; g++) {
    double val = vmax * g / 4, y = y_of(val, vmax);
    fprintf(f,
            "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>"
            "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
            L, y, W - R, y, L - 5, y + 4, val);
  }
  double secs = span / 1e9;
  double step = nice_max(secs / 10);
  for (double s = 0; s <= secs + 1e-9; s += step)
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%gs</text>\n", L + pw * s / secs,
            H - B + 14, s);
  for (int s = 0; s < k; s++) {
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\" points=\"", colors[s]);
    for (int w = 0; w < n; w++)
      fprintf(f, "%.1f,%.1f ", L + dx * (w + 0.5), y_of(v[s][w], vmax));
    fputs("\"/>\n", f);
  }
  fprintf(f, "<text x=\"%d\" y=\"14\" font-weight=\"bold\">", L);
  demo_html_escape(f, title);
  fprintf(f, "</text><text x=\"%d\" y=\"14\" text-anchor=\"end\">", W - R);
  for (int s = 0; s < k; s++) {
    fprintf(f, "%s<tspan fill=\"%s\">", s ? " · " : "", colors[s]);
    demo_html_escape(f, labels[s]);
    fputs("</tspan>", f);
  }
  fputs("</text>\n</svg>\n", f);
}

int sim_report_write(const char *path, const char *title, const sim_result *r, char *err,
                     size_t cap) {
  const sim_scenario *sc = &r->sc;
  FILE *f = fopen(path, "w");
  if (!f) {
    snprintf(err, cap, "cannot write %s: %s", path, strerror(errno));
    return -1;
  }
  int n = (int)(r->end_time / sc->window) + 1;
  if (n > r->n_windows)
    n = r->n_windows;
  double *buf = calloc((size_t)n * 4, sizeof *buf);
  if (!buf) {
    fclose(f);
    snprintf(err, cap, "out of memory");
    return -1;
  }
  fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>linkd sim: ",
        f);
  demo_html_escape(f, title);
  fputs("</title>\n<style>body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;"
        "padding:0 1em;color:#222}pre{background:#f4f4f4;padding:.6em;overflow-x:auto}"
        "</style>\n</head>\n<body>\n<h1>linkd sim: ",
        f);
  demo_html_escape(f, title);
  fputs("</h1>\n<p>Every retry, backoff, budget, breaker and deadline decision below was made by "
        "liblinkd's own policy code on a simulated clock. Shaded: the triggers. Rates are per "
        "second of simulated time.</p>\n<h2>Summary</h2>\n<pre>",
        f);
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  if (m) {
    sim_write_summary(m, r);
    fclose(m);
    demo_html_escape(f, text);
    free(text);
  }
  fputs("</pre>\n", f);
  double per_s = 1e9 / (double)sc->window;
  for (int t = 0; t < sc->n_tiers; t++) {
    double *att = buf, *ok = buf + n, *wasted = buf + 2 * n, *queue = buf + 3 * n;
    for (int w = 0; w < n; w++) {
      const sim_win *x = sim_win_at(r, w, t);
      att[w] = x->attempts * per_s;
      ok[w] = (t == sc->groups[0].target ? x->in_deadline : x->ok) * per_s;
      wasted[w] = x->wasted * per_s;
      queue[w] = x->queue_max;
    }
    fprintf(f, "<h2>Tier ");
    demo_html_escape(f, sc->tiers[t].name);
    fputs("</h2>\n", f);
    const double *v3[3] = {att, ok, wasted};
    const char *l3[3] = {"attempts arriving/s (offered load)",
                         t == sc->groups[0].target ? "client successes within deadline/s"
                                                   : "successful calls/s",
                         "work for callers already gone/s"};
    const char *c3[3] = {"#777", "#2ca02c", "#d62728"};
    chart(f, r, "load, goodput, wasted work", n, 3, v3, l3, c3);
    const double *v1[1] = {queue};
    const char *l1[1] = {"deepest queue in the window (all servers)"};
    const char *c1[1] = {"#1f77b4"};
    chart(f, r, "queue depth", n, 1, v1, l1, c1);
  }
  fputs("<p>docs/sim.md explains the model, every number and the limits.</p>\n</body>\n</html>\n",
        f);
  free(buf);
  bool failed = ferror(f) != 0;
  if (fclose(f) != 0)
    failed = true;
  if (failed) {
    snprintf(err, cap, "cannot write %s", path);
    return -1;
  }
  return 0;
}
