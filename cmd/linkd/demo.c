/* SPDX-License-Identifier: MIT */
/* demo.c: `linkd demo`: options, the scenarios and their runs, the tables, the report, the
 * clean-up. */
#include "demo.h"

#include "demo_policy.h"
#include "demo_run.h"
#include "demo_server.h"
#include "demo_table.h"
#include "exitcodes.h"
#include "report.h"

#include <linkd/error.h>
#include <linkd/http.h>

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define DEMO_BOOKS 8
#define DEMO_STOCK 1000000 /* never runs out: a 409 out_of_stock would blur the comparison */
#define DEMO_MISSING_BOOK 999999
#define DEMO_DEADLINE LK_SEC(2)
#define DEMO_MARGIN LK_MS(50)

/* The baseline fault profile, in libraryd's rule syntax (fault.h). The first rule that fires
 * decides; latency rules add up. The first rule is a script, not a probability: the 3rd, 4th and
 * 5th loan requests are committed and then answered with a TCP reset. Whatever the interleaving,
 * every client therefore meets at least three "applied but unanswered" writes early in its run,
 * so a client that retries writes without a key must create duplicates (docs/demo.md). */
static const char *const fault_rules[] = {
    "route=POST /books/*/loans,kind=reset_after_processing,skip=2,count=3",
    "route=POST /books/*/loans,kind=reset_after_processing,p=0.04",
    "route=POST /books/*/loans,kind=status,code=500,when=after,p=0.02",
    "route=/books/**,kind=status,code=503,p=0.05",
    "route=/books/**,kind=status,code=429,retry_after=1,p=0.03",
    "route=/books/**,kind=latency,delay=2500ms,p=0.02",
};
/* faults: libraryd down (every request 503), between 40 % and 55 % of the schedule. */
static const char outage_rule[] = "route=/books/**,kind=status,code=503";

/* storm: libraryd with a fixed capacity, a FIFO queue deep enough to hold more than a client's
 * timeout of work (so work can outlive its caller, as in an ordinary thread-pool server), and a
 * slowdown that multiplies its service time by 4 between 20 % and 50 % of the schedule. The load
 * is 70 % of the capacity measured just before. libraryd's own overload protection (its default
 * queue discipline) is switched off: the scenario is about what the clients do. */
#define STORM_WORKERS "4"
static const char *const storm_server_args[] = {
    "--workers", STORM_WORKERS, "--queue", "1024", "--work", "GET /books/*=8ms,POST /books/*/loans=16ms",
    "--queue-discipline", "fifo", "--connection-limit", "8192",
};
static const char storm_rule[] = "route=/books/**,kind=slowdown,factor=4";
#define STORM_LOAD 0.70

static const char usage[] =
    "usage: linkd demo [options]\n"
    "\n"
    "Runs the same workload with four clients (naive retries, fixed-interval retries, linkd's\n"
    "library defaults, linkd's policy), each against its own libraryd on a free loopback port,\n"
    "in two scenarios, and shows side by side what each did to the service:\n"
    "  faults  injected 5xx, 429 with Retry-After, stalls, connections reset after a loan was\n"
    "          committed, and an outage\n"
    "  storm   libraryd with a fixed capacity at 70 % load; a slowdown (service time x4) pushes\n"
    "          it over: retries that multiply the load keep it saturated after the slowdown\n"
    "          ends (the seeds' retry storm), a policy that does not recovers at once\n"
    "Prints a table per scenario and writes an HTML report with time-series charts.\n"
    "\n"
    "Options:\n"
    "  --scenario S       faults, storm or all (default all)\n"
    "  --ops N            logical operations per client in the faults scenario (default 1200)\n"
    "  --rate N           faults: operations started per second (default 250)\n"
    "  --concurrency N    faults: operations in flight at most (default 64)\n"
    "  --storm-seconds N  seconds of the storm schedule (default 8, at least 5)\n"
    "  --seed N           seed of the workload, the faults and the jitter (default 1,\n"
    "                     at most 2^63-1)\n"
    "  --report PATH      where to write the HTML report (default ./linkd-demo-report.html)\n"
    "  --json             print the results as JSON on stdout instead of the tables\n"
    "  --libraryd PATH    the libraryd program (default: $LINKD_LIBRARYD, next to linkd, PATH)\n"
    "  -h, --help         this text\n"
    "\n"
    "Exit status: 0 done, 1 failure, 64 usage error, 130 interrupted. See docs/demo.md.\n";

void linkd_demo_help(FILE *f) { fputs(usage, f); }

typedef struct demo_opts {
  uint64_t ops, seed;
  uint64_t concurrency, rate, storm_seconds;
  bool run[DEMO_NSCENARIOS];
  const char *report;
  const char *libraryd;
  bool json;
} demo_opts;

static int parse_uint(const char *name, const char *v, uint64_t lo, uint64_t hi, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long x = v && *v >= '0' && *v <= '9' ? strtoull(v, &end, 10) : 0;
  if (!v || !(*v >= '0' && *v <= '9') || errno || *end || x < lo || x > hi) {
    fprintf(stderr, "linkd demo: %s '%s': expected an integer in [%llu, %llu]\n", name, v ? v : "",
            (unsigned long long)lo, (unsigned long long)hi);
    return -1;
  }
  *out = x;
  return 0;
}

static int parse_scenario(const char *v, demo_opts *o) {
  bool f = !strcmp(v, "faults"), st = !strcmp(v, "storm"), all = !strcmp(v, "all");
  if (!f && !st && !all) {
    fprintf(stderr, "linkd demo: --scenario '%s': expected faults, storm or all\n", v);
    return -1;
  }
  o->run[DEMO_SC_FAULTS] = f || all;
  o->run[DEMO_SC_STORM] = st || all;
  return 0;
}

/* 0 to run, 1 when --help was printed, -1 on a usage error (message printed). */
static int parse_args(int argc, char **argv, demo_opts *o) {
  o->ops = 1200;
  o->seed = 1;
  o->concurrency = 64;
  o->rate = 250;
  o->storm_seconds = 8;
  o->run[DEMO_SC_FAULTS] = o->run[DEMO_SC_STORM] = true;
  o->report = "linkd-demo-report.html";
  o->libraryd = NULL;
  o->json = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(usage, stdout);
      return 1;
    }
    if (!strcmp(a, "--json")) {
      o->json = true;
      continue;
    }
    static const char *const valued[] = {"--ops",  "--seed",   "--concurrency", "--rate",
                                         "--report", "--libraryd", "--scenario", "--storm-seconds"};
    const char *v = NULL, *name = NULL;
    for (size_t k = 0; k < sizeof valued / sizeof valued[0] && !name; k++) {
      size_t n = strlen(valued[k]);
      if (!strncmp(a, valued[k], n) && a[n] == '=') {
        name = valued[k];
        v = a + n + 1;
      } else if (!strcmp(a, valued[k])) {
        name = valued[k];
        if (i + 1 >= argc) {
          fprintf(stderr, "linkd demo: %s needs a value (see --help)\n", name);
          return -1;
        }
        v = argv[++i];
      }
    }
    if (!name) {
      fprintf(stderr, "linkd demo: unknown option '%s' (see --help)\n", a);
      return -1;
    }
    if (!*v) {
      fprintf(stderr, "linkd demo: %s: empty value\n", name);
      return -1;
    }
    int rc = 0;
    if (!strcmp(name, "--ops"))
      rc = parse_uint(name, v, 10, 1000000, &o->ops);
    else if (!strcmp(name, "--seed"))
      /* Why INT64_MAX: libraryd's --seed (and the JSON's integers) stop there; a larger seed
       * was accepted here and then failed at the first libraryd start. */
      rc = parse_uint(name, v, 0, INT64_MAX, &o->seed);
    else if (!strcmp(name, "--concurrency"))
      rc = parse_uint(name, v, 1, 1024, &o->concurrency);
    else if (!strcmp(name, "--rate"))
      rc = parse_uint(name, v, 1, 100000, &o->rate);
    else if (!strcmp(name, "--storm-seconds"))
      rc = parse_uint(name, v, 5, 50, &o->storm_seconds);
    else if (!strcmp(name, "--scenario"))
      rc = parse_scenario(v, o);
    else if (!strcmp(name, "--report"))
      o->report = v;
    else
      o->libraryd = v;
    if (rc)
      return -1;
  }
  return 0;
}

/* --- signals: Ctrl-C cancels the calls in flight, then everything is cleaned up -------------- */

static volatile sig_atomic_t g_interrupted;
/* After a Ctrl-C, how long libraryd may take to exit before it is killed: its drain would wait
 * up to 2 s for requests whose callers were just cancelled. */
#define INTERRUPTED_GRACE_MS 200
static lk_http_cancel *volatile g_cancel;
static lk_http_client *volatile g_client;
/* Fired with the run's token: ends the admin calls, the capacity probe and the wait for a
 * starting libraryd, which run with no client token published. */
static lk_http_cancel *volatile g_stop;

static void on_signal(int sig) {
  g_interrupted = sig;
  lk_http_cancel *t = g_cancel;
  lk_http_client *c = g_client;
  lk_http_cancel *stop = g_stop;
  if (stop)
    lk_http_cancel_fire(stop);
  if (t)
    lk_http_cancel_fire(t);
  if (c)
    lk_http_client_wakeup(c);
}

static void publish(lk_http_cancel *token, lk_http_client *client) {
  g_cancel = token;
  g_client = client;
}

/* --- one client against its own libraryd ----------------------------------------------------- */

/* Waits until libraryd has no request in flight (a stalled request whose client gave up may
 * still commit a loan), then reads its statistics. */
static int final_stats(const demo_server *srv, lk_http_client *admin, demo_server_stats *out,
                       char *err, size_t errcap) {
  for (int waited = 0;; waited += 20) {
    if (demo_server_stats_get(srv, admin, out, err, errcap) != 0)
      return -1;
    if (out->in_flight == 0 || waited >= 6000 || g_interrupted)
      return 0;
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
  }
}

typedef struct scenario_env {
  const char *bin, *dir;
  const char *scenario; /* prefixes the files of its servers: each gets fresh ones */
  const char *const *server_args;
  size_t n_server_args;
  const char *const *rules;
  size_t n_rules;
} scenario_env;

/* A fresh libraryd with its books; the caller stops it. */
static int server_up(const scenario_env *env, const char *name, uint64_t seed, demo_server *srv,
                     lk_http_client *admin, int64_t *ids, char *err, size_t errcap) {
  char file[96];
  snprintf(file, sizeof file, "%s-%s", env->scenario, name);
  if (demo_server_start(srv, env->bin, env->dir, file, seed, env->server_args, env->n_server_args,
                        g_stop, err, errcap) != 0)
    return -1;
  return demo_server_create_books(srv, admin, DEMO_BOOKS, DEMO_STOCK, ids, err, errcap);
}

static int run_one(int which, const scenario_env *env, demo_run_cfg *cfg, demo_client_stats *st,
                   char *err, size_t errcap) {
  demo_client_describe(which, st);
  demo_server srv;
  memset(&srv, 0, sizeof srv);
  lk_http_client *admin = lk_http_client_new(NULL);
  int64_t ids[DEMO_BOOKS];
  demo_server_stats before, after;
  int rc = admin ? 0 : -1;
  if (!admin)
    snprintf(err, errcap, "out of memory");
  if (rc == 0)
    rc = server_up(env, st->name, cfg->seed, &srv, admin, ids, err, errcap);
  if (rc == 0)
    rc = demo_server_stats_get(&srv, admin, &before, err, errcap);
  if (rc == 0)
    rc = demo_server_set_faults(&srv, admin, cfg->seed, env->rules, env->n_rules, err, errcap);
  int64_t start = 0;
  if (rc == 0) {
    cfg->book_ids = ids;
    rc = demo_run_client(which, cfg, &srv, publish, st, &start, err, errcap);
    cfg->book_ids = NULL;
    if (rc == 0 && st->cut_short && !g_interrupted)
      fprintf(stderr,
              "linkd demo: the %s client was stopped by the time limit; operations it "
              "cancelled or never started count as failures\n",
              st->title);
  }
  if (rc == 0 && final_stats(&srv, admin, &after, err, errcap) == 0) {
    st->server_ok = true;
    st->server_requests = after.requests - before.requests;
    st->loans_applied = after.loans;
    st->duplicate_loans = after.duplicate_loans;
    st->replays = after.replays;
    st->faults_injected = after.faults_injected;
    st->work_done = after.work_done >= 0 ? after.work_done - before.work_done : -1;
    st->work_abandoned =
        after.work_abandoned >= 0 ? after.work_abandoned - before.work_abandoned : -1;
    char serr[256]; /* an older libraryd without /admin/series: the client's counts stand */
    if (demo_server_series_get(&srv, admin, start, st->series, serr, sizeof serr) != 0)
      st->series->have_server = false;
    demo_client_finish(cfg, st);
  } else if (rc == 0) {
    rc = -1;
  }
  /* Why: a libraryd that died during the run was reported as whatever admin call failed next
   * ("POST .../admin/faults: attempts exhausted"); say that it exited, and how. */
  char why[480];
  if (rc != 0 && !g_interrupted && demo_server_exited(&srv, why, sizeof why)) {
    char first[1024];
    size_t n = strnlen(err, sizeof first - 1);
    memcpy(first, err, n);
    first[n] = '\0';
    int w = snprintf(err, errcap, "libraryd exited during the run (%s); then: %s", why, first);
    if (errcap > 0 && (w < 0 || (size_t)w >= errcap))
      err[errcap - 1] = '\0'; /* cut: the start says what happened */
  }
  lk_http_client_free(admin);
  demo_server_stop_within(&srv, g_interrupted ? INTERRUPTED_GRACE_MS : 5000);
  return rc;
}

/* --- the scenarios --------------------------------------------------------------------------- */

/* storm: libraryd's capacity for the workload, measured on a server of its own. */
static int storm_capacity(const scenario_env *env, const demo_op *ops, size_t n, uint64_t seed,
                          double *cap, char *err, size_t errcap) {
  demo_server srv;
  memset(&srv, 0, sizeof srv);
  lk_http_client *admin = lk_http_client_new(NULL);
  int64_t ids[DEMO_BOOKS];
  int rc = admin ? server_up(env, "capacity", seed, &srv, admin, ids, err, errcap) : -1;
  if (rc == 0) {
    int workers = atoi(STORM_WORKERS);
    *cap = demo_measure_capacity(&srv, ops, n, ids, DEMO_MISSING_BOOK, workers * 4, LK_MS(1600));
    if (*cap <= 0) {
      snprintf(err, errcap, "could not measure libraryd's capacity");
      rc = -1;
    }
  }
  lk_http_client_free(admin);
  demo_server_stop_within(&srv, g_interrupted ? INTERRUPTED_GRACE_MS : 5000);
  return rc;
}

static void intro(const demo_summary *s) {
  if (s->scenario == DEMO_SC_FAULTS)
    fprintf(stderr,
            "linkd demo: scenario faults: %llu operations per client (65%% GET, 5%% GET of a "
            "missing book,\n            30%% POST loans), %d/s, up to %d in flight, seed %llu, "
            "deadline 2s\n"
            "linkd demo: faults: 503 5%%, 429 + Retry-After 3%%, 2.5s stalls 2%%, 500 after commit "
            "2%%,\n            loans reset after commit 4%% (+3 scripted), outage (all 503) from "
            "%.2fs to %.2fs\n",
            (unsigned long long)s->ops, s->rate, s->concurrency, (unsigned long long)s->seed,
            (double)s->trigger_from / 1e9, (double)s->trigger_to / 1e9);
  else
    fprintf(stderr,
            "linkd demo: scenario storm: libraryd %s\n"
            "linkd demo: measured capacity %.0f requests/s; load %d operations/s (%.0f%%) for "
            "%.0fs,\n            service time x4 from %.1fs to %.1fs, deadline 2s\n",
            s->server_args, s->capacity, s->rate, STORM_LOAD * 100,
            (double)s->ops / s->rate, (double)s->trigger_from / 1e9,
            (double)s->trigger_to / 1e9);
}

static char storm_args_text[256];

static int run_scenario(demo_scenario sc, const demo_opts *o, const char *bin, const char *dir,
                        demo_progress *prog, demo_summary *sum, char *err, size_t errcap) {
  int64_t t0 = lk_now_ns();
  memset(sum, 0, sizeof *sum);
  sum->scenario = sc;
  sum->name = sc == DEMO_SC_FAULTS ? "faults" : "storm";
  sum->seed = o->seed;
  sum->deadline = DEMO_DEADLINE;
  sum->overrun_margin = DEMO_MARGIN;
  sum->libraryd = bin;
  scenario_env env = {bin, dir, sum->name, NULL, 0, NULL, 0};
  if (sc == DEMO_SC_FAULTS) {
    env.rules = fault_rules;
    env.n_rules = sizeof fault_rules / sizeof fault_rules[0];
    sum->fault_rules = fault_rules;
    sum->n_fault_rules = env.n_rules;
    sum->ops = o->ops;
    sum->rate = (int)o->rate;
    sum->concurrency = (int)o->concurrency;
    sum->trigger_rule = outage_rule;
    sum->server_args = "default capacity";
  } else {
    env.server_args = storm_server_args;
    env.n_server_args = sizeof storm_server_args / sizeof storm_server_args[0];
    size_t off = 0;
    for (size_t i = 0; i < env.n_server_args && off < sizeof storm_args_text; i++)
      off += (size_t)snprintf(storm_args_text + off, sizeof storm_args_text - off,
                              strchr(storm_server_args[i], ' ') ? "%s'%s'" : "%s%s",
                              i ? " " : "", storm_server_args[i]);
    sum->server_args = storm_args_text;
    sum->trigger_rule = storm_rule;
    sum->concurrency = 4096; /* open loop: the cap is only a safety net */
  }
  /* a capacity probe uses the same workload list, so build a generous one first */
  size_t max_ops = sc == DEMO_SC_FAULTS ? o->ops : 50000;
  demo_op *ops = calloc(max_ops, sizeof *ops);
  if (!ops) {
    snprintf(err, errcap, "out of memory");
    return -1;
  }
  demo_workload_make(ops, max_ops, o->seed, DEMO_BOOKS);
  int rc = 0;
  if (sc == DEMO_SC_STORM) {
    rc = storm_capacity(&env, ops, max_ops, o->seed, &sum->capacity, err, errcap);
    double rate = sum->capacity * STORM_LOAD;
    sum->rate = rate < 1 ? 1 : (int)rate;
    sum->ops = (uint64_t)sum->rate * o->storm_seconds;
    if (sum->ops > max_ops)
      sum->ops = max_ops;
  }
  int64_t span = (int64_t)(sum->ops * (uint64_t)LK_NS_PER_S / (uint64_t)sum->rate);
  if (sc == DEMO_SC_FAULTS) {
    sum->trigger_from = span * 40 / 100;
    sum->trigger_to = span * 55 / 100;
  } else {
    sum->trigger_from = span * 20 / 100;
    sum->trigger_to = span * 50 / 100;
  }
  demo_run_cfg cfg = {
      .ops = ops,
      .n = sum->ops,
      .rate = sum->rate,
      .concurrency = sum->concurrency,
      .deadline = DEMO_DEADLINE,
      .overrun_margin = DEMO_MARGIN,
      .seed = o->seed,
      .trigger_from = sum->trigger_from,
      .trigger_to = sum->trigger_to,
      .trigger_rule = sum->trigger_rule,
      .missing_book_id = DEMO_MISSING_BOOK,
      /* a safety net only: the schedule plus generous room for the slowest client's tail */
      .time_limit = span + LK_SEC(30),
      .interrupted = &g_interrupted,
      .progress = prog,
  };
  if (rc == 0)
    intro(sum);
  for (int which = 0; which < DEMO_NCLIENTS && rc == 0 && !g_interrupted; which++) {
    rc = run_one(which, &env, &cfg, &sum->c[which], err, errcap);
    if (rc != 0 && !g_interrupted) {
      char msg[1200];
      snprintf(msg, sizeof msg, "%s client: %.1000s", sum->c[which].title, err);
      snprintf(err, errcap, "%.*s", (int)(errcap > 0 ? errcap - 1 : 0), msg);
    }
  }
  free(ops);
  sum->total_s = (double)(lk_now_ns() - t0) / 1e9;
  return rc;
}

static void next_steps(FILE *f) {
  fputs("\nWhat to try next:\n"
        "  libraryd --port 8080 --db /tmp/lib.db --fault 'kind=status,code=503,p=0.3' &\n"
        "  linkd get -v http://127.0.0.1:8080/books/1    # each attempt, phase, decision\n"
        "  linkd post -v --idempotency-key auto http://127.0.0.1:8080/books/1/loans\n"
        "  linkd demo --scenario storm --seed 7           # docs/demo.md explains the numbers\n",
        f);
}

/* The storm opens a few thousand connections: raise the descriptor limit to what is allowed
 * (libraryd, started after, inherits it). */
static void raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

/* Prints what was measured: the tables, or one JSON document. `error`: why the run is
 * incomplete or the report is missing (NULL: neither). 0, or -1 when stdout could not be
 * written. */
static int print_results(const demo_opts *o, const demo_summary *const *done, int ndone,
                         bool complete, const char *report, const char *error, double total_s) {
  if (o->json) {
    if (demo_table_json(stdout, done, ndone, report, complete, error) != 0)
      return -1;
  } else {
    for (int i = 0; i < ndone; i++) {
      printf("\nscenario %s\n", done[i]->name);
      demo_table_print(stdout, done[i]);
    }
    if (complete) {
      printf("\nAll four clients run on linkd's lk_http layer (no raw libcurl); the naive and\n"
             "fixed-interval ones with policies configured to behave naively. Took %.1fs.\n",
             total_s);
      if (report)
        printf("Report: %s\n", report);
      next_steps(stdout);
    }
  }
  /* Why: a full or closed stdout (`linkd demo > /dev/full`) exited 0 with nothing written */
  return fflush(stdout) != 0 || ferror(stdout) ? -1 : 0;
}

int linkd_demo_main(int argc, char **argv) {
  demo_opts o;
  int prc = parse_args(argc, argv, &o);
  if (prc != 0)
    return prc > 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;

  static demo_summary sums[DEMO_NSCENARIOS];
  memset(sums, 0, sizeof sums);
  char bin[DEMO_PATH_MAX], err[1024] = "";
  const demo_summary *done[DEMO_NSCENARIOS];
  int ndone = 0;
  int rc = 0;
  int fail_code = CLI_EXIT_FAILURE;
  /* Why checked first: an unusable --report (a directory, a read-only or missing directory,
   * the default one in a read-only working directory) failed only after the whole run. */
  if (demo_find_libraryd(o.libraryd, bin, sizeof bin, err, sizeof err) != 0) {
    fprintf(stderr, "linkd demo: %s\n", err);
    rc = -1;
  } else if (demo_report_check(o.report, err, sizeof err) != 0) {
    fprintf(stderr, "linkd demo: %s\n", err);
    rc = -1;
    fail_code = CLI_EXIT_CANTCREAT; /* as the rest of the CLI says of an -o it cannot write */
  }
  if (rc == 0)
    raise_nofile();

  /* From here on a signal cancels the run, which then cleans up. */
  struct sigaction sa, old_int, old_term, old_hup, old_pipe;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  g_interrupted = 0;
  lk_http_cancel *stop = rc == 0 ? lk_http_cancel_new() : NULL;
  if (rc == 0 && !stop) {
    snprintf(err, sizeof err, "out of memory");
    fprintf(stderr, "linkd demo: %s\n", err);
    rc = -1;
  }
  g_stop = stop;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  /* Why SIGHUP too: closing the terminal (or an ssh session) killed linkd outright and left the
   * temporary directory, its databases and logs, behind */
  sigaction(SIGHUP, &sa, &old_hup);
  sa.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &sa, &old_pipe);

  char dir[DEMO_PATH_MAX];
  bool have_dir = false;
  if (rc == 0) {
    have_dir = demo_tmpdir_create(dir, sizeof dir) == 0;
    if (!have_dir) {
      snprintf(err, sizeof err,
               "cannot create a temporary directory in %s (set TMPDIR to a "
               "writable directory): %s",
               demo_tmpdir_base(), strerror(errno));
      fprintf(stderr, "linkd demo: %s\n", err);
      rc = -1;
    }
  }
  demo_progress prog;
  demo_progress_init(&prog, stderr);
  int64_t t0 = lk_now_ns();
  for (int sc = 0; sc < DEMO_NSCENARIOS && rc == 0 && !g_interrupted; sc++) {
    if (!o.run[sc])
      continue;
    char serr[1024];
    rc = run_scenario((demo_scenario)sc, &o, bin, dir, &prog, &sums[sc], serr, sizeof serr);
    if (rc != 0 && !g_interrupted) {
      snprintf(err, sizeof err, "%s scenario: %.1000s", sc == DEMO_SC_FAULTS ? "faults" : "storm",
               serr);
      fprintf(stderr, "linkd demo: %s\n", err);
    }
    if (rc == 0 && !g_interrupted)
      done[ndone++] = &sums[sc];
  }
  double total_s = (double)(lk_now_ns() - t0) / 1e9;

  if (have_dir)
    demo_tmpdir_remove(dir);
  g_stop = NULL;
  lk_http_cancel_free(stop);
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  sigaction(SIGHUP, &old_hup, NULL);
  sigaction(SIGPIPE, &old_pipe, NULL);

  int exit_code = CLI_EXIT_OK;
  bool complete = false;
  if (g_interrupted) {
    fprintf(stderr, "linkd demo: interrupted; libraryd stopped and temporary files removed\n");
    snprintf(err, sizeof err, "interrupted");
    exit_code = CLI_EXIT_CANCELLED;
  } else if (rc != 0) {
    exit_code = fail_code;
  } else {
    complete = true;
    err[0] = '\0';
  }
  /* The report only for a complete run; what was measured is printed in any case (a failed or
   * interrupted run: the scenarios that finished; --json: always one valid document). */
  char path[DEMO_PATH_MAX];
  const char *shown = NULL;
  if (complete) {
    /* Why blocked: a Ctrl-C while the report is written would leave its temporary file beside
     * it; the signal is delivered (and ends linkd) once the report is in place */
    sigset_t block, old_mask;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    sigprocmask(SIG_BLOCK, &block, &old_mask);
    int wrc = demo_report_write(o.report, done, ndone, err, sizeof err);
    sigprocmask(SIG_SETMASK, &old_mask, NULL);
    if (wrc != 0) {
      fprintf(stderr, "linkd demo: %s\n", err);
      exit_code = CLI_EXIT_CANTCREAT;
    } else {
      shown = realpath(o.report, path) ? path : o.report;
    }
  }
  if (print_results(&o, done, ndone, complete, shown, *err ? err : NULL, total_s) != 0) {
    fprintf(stderr, "linkd demo: cannot write the results to stdout: %s\n", strerror(errno));
    if (exit_code == CLI_EXIT_OK)
      exit_code = CLI_EXIT_CANTCREAT;
  } else if (o.json && shown) {
    fprintf(stderr, "linkd demo: report written to %s\n", shown);
  }
  for (int sc = 0; sc < DEMO_NSCENARIOS; sc++)
    for (int i = 0; i < DEMO_NCLIENTS; i++)
      demo_client_stats_free(&sums[sc].c[i]);
  return exit_code;
}
