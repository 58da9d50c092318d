/* SPDX-License-Identifier: MIT */
#include "benchutil.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

volatile uint64_t lk_bench_sink;

/* The harness keeps its own clock so it depends on nothing but libc. */
static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

lk_bench_stats lk_bench_stats_of(const double *v, int n) {
  double s[LK_BENCH_MAX_ROUNDS];
  if (n < 1)
    return (lk_bench_stats){0, 0, 0};
  if (n > LK_BENCH_MAX_ROUNDS)
    n = LK_BENCH_MAX_ROUNDS;
  memcpy(s, v, sizeof s[0] * (size_t)n);
  qsort(s, (size_t)n, sizeof s[0], cmp_double);
  double med = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
  return (lk_bench_stats){med, s[0], s[n - 1]};
}

/* --- placement ------------------------------------------------------------------------------ */

/* Parses LINKD_BENCH_CPUS into cpus[2]; returns 0 when unset, exits when malformed. */
static int bench_cpus(int cpus[2]) {
  const char *e = getenv("LINKD_BENCH_CPUS");
  if (!e || !*e)
    return 0;
  char *end;
  long a = strtol(e, &end, 10), b = a;
  if (end != e && *end == ',') {
    const char *p = end + 1;
    b = strtol(p, &end, 10);
    if (end == p)
      end = (char *)"x";
  }
  if (end == e || *end != '\0' || a < 0 || b < 0 || a >= CPU_SETSIZE || b >= CPU_SETSIZE) {
    fprintf(stderr, "LINKD_BENCH_CPUS=%s: want A or A,B (CPU numbers)\n", e);
    exit(2);
  }
  cpus[0] = (int)a;
  cpus[1] = (int)b;
  return 1;
}

int lk_bench_pin(int role) {
  int cpus[2];
  if (!bench_cpus(cpus))
    return -1;
  int cpu = cpus[role == LK_BENCH_SECOND];
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  /* pid 0: the calling thread only (Linux), so each thread of a bench pins itself. */
  if (sched_setaffinity(0, sizeof set, &set) != 0) {
    perror("LINKD_BENCH_CPUS: sched_setaffinity");
    exit(2);
  }
  return cpu;
}

static _Atomic short second_cpu[2] = {-1, -1};

void lk_bench_second_mark(int end) {
  atomic_store_explicit(&second_cpu[end != 0], (short)sched_getcpu(), memory_order_relaxed);
}

int lk_bench_proc_cpu(pid_t pid) {
  char path[64], line[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f)
    return -1;
  size_t n = fread(line, 1, sizeof line - 1, f);
  fclose(f);
  line[n] = '\0';
  /* Field 2 (comm) may hold spaces; count fields after its closing parenthesis. Field 39 is
   * "processor", the CPU it last ran on. */
  char *p = strrchr(line, ')');
  if (!p)
    return -1;
  int field = 2;
  for (char *tok = strtok(p + 1, " "); tok; tok = strtok(NULL, " "))
    if (++field == 39)
      return atoi(tok);
  return -1;
}

void lk_bench_affinity(char *buf, size_t n) {
  cpu_set_t set;
  size_t used = 0;
  buf[0] = '\0';
  if (sched_getaffinity(0, sizeof set, &set) != 0) {
    snprintf(buf, n, "?");
    return;
  }
  for (int c = 0; c < CPU_SETSIZE && used + 1 < n; c++) {
    if (!CPU_ISSET(c, &set))
      continue;
    int last = c;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set))
      last++;
    int w = last > c ? snprintf(buf + used, n - used, "%s%d-%d", used ? "," : "", c, last)
                     : snprintf(buf + used, n - used, "%s%d", used ? "," : "", c);
    if (w < 0 || (size_t)w >= n - used)
      break;
    used += (size_t)w;
    c = last;
  }
}

void lk_bench_print_placement(const char *program) {
  char mask[128];
  lk_bench_affinity(mask, sizeof mask);
  const char *e = getenv("LINKD_BENCH_CPUS");
  printf("%s: LINKD_BENCH_CPUS=%s, main thread affinity %s, now on CPU %d\n", program,
         e && *e ? e : "(unset: not pinned)", mask, sched_getcpu());
}

/* --- interleaved comparison ----------------------------------------------------------------- */

/* Grows iterations until one call takes >= 20 ms (bounded: at most 24 doublings). */
static uint64_t calibrate(lk_bench_fn fn, void *ctx) {
  uint64_t iters = 1000;
  for (int i = 0; i < 24; i++) {
    int64_t t0 = now_ns();
    lk_bench_sink += fn(ctx, iters);
    if (now_ns() - t0 >= 20 * 1000000LL)
      break;
    iters *= 2;
  }
  return iters;
}

static double timed(lk_bench_fn fn, void *ctx, uint64_t iters, lk_bench_where *w) {
  atomic_store(&second_cpu[0], -1);
  atomic_store(&second_cpu[1], -1);
  w->main0 = (short)sched_getcpu();
  int64_t t0 = now_ns();
  lk_bench_sink += fn(ctx, iters);
  double per = (double)(now_ns() - t0) / (double)iters;
  w->main1 = (short)sched_getcpu();
  w->second0 = atomic_load(&second_cpu[0]);
  w->second1 = atomic_load(&second_cpu[1]);
  return per;
}

lk_bench_cmp lk_bench_compare(lk_bench_fn base, void *base_ctx, lk_bench_fn subj, void *subj_ctx,
                              int rounds) {
  if (rounds < 1)
    rounds = 1;
  if (rounds > LK_BENCH_MAX_ROUNDS)
    rounds = LK_BENCH_MAX_ROUNDS;
  lk_bench_cmp c;
  memset(&c, 0, sizeof c);
  c.rounds = rounds;
  uint64_t bi = calibrate(base, base_ctx), si = calibrate(subj, subj_ctx);
  double b[LK_BENCH_MAX_ROUNDS], s[LK_BENCH_MAX_ROUNDS], r[LK_BENCH_MAX_ROUNDS];
  lk_bench_where ignored;
  for (int k = 0; k < rounds; k++) {
    if (k % 2 == 0) {
      b[k] = timed(base, base_ctx, bi, &ignored);
      s[k] = timed(subj, subj_ctx, si, &c.where[k]);
    } else {
      s[k] = timed(subj, subj_ctx, si, &c.where[k]);
      b[k] = timed(base, base_ctx, bi, &ignored);
    }
    r[k] = b[k] > 0 ? s[k] / b[k] : 0;
  }
  c.ratio = lk_bench_stats_of(r, rounds);
  c.base_ns = lk_bench_stats_of(b, rounds);
  c.subj_ns = lk_bench_stats_of(s, rounds);
  return c;
}

void lk_bench_fmt(char *buf, size_t n, lk_bench_stats s, int decimals) {
  snprintf(buf, n, "%.*f [%.*f-%.*f]", decimals, s.median, decimals, s.min, decimals, s.max);
}

void lk_bench_header(const char *title, const char *baseline) {
  printf("\n## %s\nbaseline per row (interleaved with it, order alternating): %s\n", title,
         baseline);
  printf("%-42s %-22s %-22s %s\n", "benchmark", "ratio med [min-max]", "baseline ns/op",
         "subject ns/op");
}

static void where_str(char *buf, size_t n, short a, short b) {
  if (a == b || b < 0)
    snprintf(buf, n, "%d", a);
  else
    snprintf(buf, n, "%d>%d", a, b);
}

void lk_bench_row(const char *name, const lk_bench_cmp *c) {
  char r[48], b[48], s[48];
  lk_bench_fmt(r, sizeof r, c->ratio, 2);
  lk_bench_fmt(b, sizeof b, c->base_ns, 2);
  lk_bench_fmt(s, sizeof s, c->subj_ns, 2);
  printf("%-42s %-22s %-22s %s\n", name, r, b, s);
  printf("%-42s", "  cpus per round (main[/second])");
  for (int k = 0; k < c->rounds; k++) {
    char m[16], t[16];
    where_str(m, sizeof m, c->where[k].main0, c->where[k].main1);
    if (c->where[k].second0 >= 0) {
      where_str(t, sizeof t, c->where[k].second0, c->where[k].second1);
      printf(" %s/%s", m, t);
    } else {
      printf(" %s", m);
    }
  }
  printf("\n");
}
