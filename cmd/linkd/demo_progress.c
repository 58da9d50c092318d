/* SPDX-License-Identifier: MIT */
/* demo_progress.c: the progress bar (terminal) or progress lines (anything else). */
#include "demo_progress.h"

#include <linkd/clock.h>
#include <linkd/common.h>

#include <unistd.h>

#define BAR_WIDTH 20

void demo_progress_init(demo_progress *p, FILE *out) {
  p->out = out;
  p->tty = isatty(fileno(out)) == 1;
  p->last_draw = 0;
  p->quarter = 0;
}

void demo_progress_begin(demo_progress *p, const char *title) {
  p->last_draw = 0;
  p->quarter = 0;
  if (!p->tty)
    fprintf(p->out, "linkd demo: running the %s client\n", title);
}

static double pct(uint64_t a, uint64_t b) { return b ? 100.0 * (double)a / (double)b : 0.0; }

void demo_progress_update(demo_progress *p, const demo_progress_state *s, bool force) {
  int64_t now = lk_now_ns();
  if (p->tty) {
    if (!force && now - p->last_draw < LK_MS(100))
      return;
    p->last_draw = now;
    char bar[BAR_WIDTH + 1];
    int fill = s->total ? (int)(s->done * BAR_WIDTH / s->total) : 0;
    for (int i = 0; i < BAR_WIDTH; i++)
      bar[i] = i < fill ? '#' : '.';
    bar[BAR_WIDTH] = '\0';
    /* under 80 columns, so a narrow terminal never wraps the line that \r redraws */
    fprintf(p->out, "\r\033[K  %-14s [%s] %5llu/%-5llu ok %5.1f%%  %4.2f/op%s", s->title, bar,
            (unsigned long long)s->done, (unsigned long long)s->total, pct(s->ok, s->done),
            s->done ? (double)s->attempts / (double)s->done : 0.0, s->outage ? "  OUTAGE" : "");
    fflush(p->out);
    return;
  }
  int q = s->total ? (int)(s->done * 4 / s->total) : 0;
  if (q <= p->quarter || q >= 4)
    return; /* the last quarter is reported by demo_progress_end */
  p->quarter = q;
  fprintf(p->out, "linkd demo:   %s: %llu/%llu operations done, ok %.1f%%\n", s->title,
          (unsigned long long)s->done, (unsigned long long)s->total, pct(s->ok, s->done));
}

void demo_progress_end(demo_progress *p, const demo_progress_state *s, double seconds) {
  if (p->tty) {
    demo_progress_update(p, s, true);
    fprintf(p->out, "  %.1fs\n", seconds);
  } else {
    fprintf(p->out, "linkd demo:   %s: %llu/%llu operations done, ok %.1f%%, %.1fs\n", s->title,
            (unsigned long long)s->done, (unsigned long long)s->total, pct(s->ok, s->done),
            seconds);
  }
  fflush(p->out);
}
