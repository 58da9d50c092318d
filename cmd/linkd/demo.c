/* demo.c: `linkd demo`: options, the three runs, the table, the report, the clean-up. */
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
/* libraryd down (every request 503), between 40 % and 55 % of the operations. */
static const char outage_rule[] = "route=/books/**,kind=status,code=503";

static const char usage[] =
    "usage: linkd demo [options]\n"
    "\n"
    "Starts libraryd on a free loopback port with a temporary database and seeded faults (5xx,\n"
    "429 with Retry-After, stalls, connections reset after a loan was committed, and an outage),\n"
    "runs the same workload with three clients (naive retries, fixed-interval retries, linkd's\n"
    "policy) and shows side by side what each did to the service: success rate, amplification,\n"
    "loans applied twice, latency and deadline overruns. Writes an HTML report.\n"
    "\n"
    "Options:\n"
    "  --ops N            logical operations per client (default 2000)\n"
    "  --seed N           seed of the workload, the faults and the jitter (default 1)\n"
    "  --concurrency N    operations in flight at most (default 64)\n"
    "  --rate N           operations started per second (default 250)\n"
    "  --report PATH      where to write the HTML report (default ./linkd-demo-report.html)\n"
    "  --json             print the results as JSON on stdout instead of the table\n"
    "  --libraryd PATH    the libraryd program (default: $LINKD_LIBRARYD, next to linkd, PATH)\n"
    "  -h, --help         this text\n"
    "\n"
    "Exit status: 0 done, 1 failure, 64 usage error, 130 interrupted. See docs/demo.md.\n";

typedef struct demo_opts {
  uint64_t ops, seed;
  uint64_t concurrency, rate;
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

/* 0 to run, 1 when --help was printed, -1 on a usage error (message printed). */
static int parse_args(int argc, char **argv, demo_opts *o) {
  o->ops = 2000;
  o->seed = 1;
  o->concurrency = 64;
  o->rate = 250;
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
    static const char *const valued[] = {"--ops",  "--seed",   "--concurrency",
                                         "--rate", "--report", "--libraryd"};
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
    int rc = 0;
    if (!strcmp(name, "--ops"))
      rc = parse_uint(name, v, 10, 1000000, &o->ops);
    else if (!strcmp(name, "--seed"))
      rc = parse_uint(name, v, 0, UINT64_MAX, &o->seed);
    else if (!strcmp(name, "--concurrency"))
      rc = parse_uint(name, v, 1, 1024, &o->concurrency);
    else if (!strcmp(name, "--rate"))
      rc = parse_uint(name, v, 1, 100000, &o->rate);
    else if (!strcmp(name, "--report"))
      o->report = v;
    else
      o->libraryd = v;
    if (rc)
      return -1;
    if (!*v) {
      fprintf(stderr, "linkd demo: %s: empty value\n", name);
      return -1;
    }
  }
  return 0;
}

/* --- signals: Ctrl-C cancels the calls in flight, then everything is cleaned up -------------- */

static volatile sig_atomic_t g_interrupted;
static lk_http_cancel *volatile g_cancel;
static lk_http_client *volatile g_client;

static void on_signal(int sig) {
  g_interrupted = sig;
  lk_http_cancel *t = g_cancel;
  lk_http_client *c = g_client;
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

static int run_one(int which, const char *bin, const char *dir, demo_run_cfg *cfg,
                   demo_client_stats *st, char *err, size_t errcap) {
  demo_client_describe(which, st);
  demo_server srv;
  if (demo_server_start(&srv, bin, dir, st->name, cfg->seed, err, errcap) != 0)
    return -1;
  lk_http_client *admin = lk_http_client_new(NULL);
  int64_t ids[DEMO_BOOKS];
  demo_server_stats before, after;
  int rc = admin ? 0 : -1;
  if (!admin)
    snprintf(err, errcap, "out of memory");
  if (rc == 0)
    rc = demo_server_create_books(&srv, admin, DEMO_BOOKS, DEMO_STOCK, ids, err, errcap);
  if (rc == 0)
    rc = demo_server_stats_get(&srv, admin, &before, err, errcap);
  if (rc == 0)
    rc = demo_server_set_faults(&srv, admin, cfg->seed, fault_rules,
                                sizeof fault_rules / sizeof fault_rules[0], err, errcap);
  if (rc == 0) {
    cfg->book_ids = ids;
    rc = demo_run_client(which, cfg, &srv, publish, st, err, errcap);
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
  } else if (rc == 0) {
    rc = -1;
  }
  lk_http_client_free(admin);
  demo_server_stop(&srv);
  return rc;
}

/* --- output ----------------------------------------------------------------------------------- */

static void intro(const demo_opts *o, const demo_summary *s) {
  fprintf(stderr,
          "linkd demo: %llu operations per client (65%% GET, 5%% GET of a missing book, 30%% "
          "POST loans),\n            %llu/s, up to %llu in flight, seed %llu, deadline 2s\n"
          "linkd demo: libraryd %s\n"
          "linkd demo: faults: 503 5%%, 429 + Retry-After 3%%, 2.5s stalls 2%%, 500 after commit "
          "2%%,\n            loans reset after commit 4%% (+3 scripted), outage (all 503) for "
          "operations %llu-%llu\n",
          (unsigned long long)o->ops, (unsigned long long)o->rate,
          (unsigned long long)o->concurrency, (unsigned long long)o->seed, s->libraryd,
          (unsigned long long)s->outage_from, (unsigned long long)(s->outage_to - 1));
}

static void next_steps(FILE *f) {
  fputs("\nWhat to try next:\n"
        "  libraryd --port 8080 --db /tmp/lib.db --fault 'kind=status,code=503,p=0.3' &\n"
        "  linkd get -v http://127.0.0.1:8080/books/1    # each attempt, phase, decision\n"
        "  linkd post -v --idempotency-key auto http://127.0.0.1:8080/books/1/loans\n"
        "  linkd demo --ops 5000 --seed 7                 # docs/demo.md explains the numbers\n",
        f);
}

int linkd_demo_main(int argc, char **argv) {
  demo_opts o;
  int prc = parse_args(argc, argv, &o);
  if (prc != 0)
    return prc > 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;

  demo_summary sum;
  memset(&sum, 0, sizeof sum);
  char bin[DEMO_PATH_MAX], err[1024];
  if (demo_find_libraryd(o.libraryd, bin, sizeof bin, err, sizeof err) != 0) {
    fprintf(stderr, "linkd demo: %s\n", err);
    return CLI_EXIT_FAILURE;
  }

  /* From here on a signal cancels the run, which then cleans up. */
  struct sigaction sa, old_int, old_term, old_pipe;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  g_interrupted = 0;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sa.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &sa, &old_pipe);

  int rc = 0;
  char dir[DEMO_PATH_MAX];
  bool have_dir = demo_tmpdir_create(dir, sizeof dir) == 0;
  demo_op *ops = have_dir ? calloc(o.ops, sizeof *ops) : NULL;
  if (!have_dir) {
    fprintf(stderr, "linkd demo: cannot create a temporary directory: %s\n", strerror(errno));
    rc = -1;
  } else if (!ops) {
    fprintf(stderr, "linkd demo: out of memory\n");
    rc = -1;
  }

  sum.ops = o.ops;
  sum.seed = o.seed;
  sum.concurrency = (int)o.concurrency;
  sum.rate = (int)o.rate;
  sum.deadline = DEMO_DEADLINE;
  sum.overrun_margin = DEMO_MARGIN;
  sum.outage_from = o.ops * 40 / 100;
  sum.outage_to = o.ops * 55 / 100;
  sum.fault_rules = fault_rules;
  sum.n_fault_rules = sizeof fault_rules / sizeof fault_rules[0];
  sum.outage_rule = outage_rule;
  sum.libraryd = bin;
  demo_progress prog;
  demo_progress_init(&prog, stderr);
  demo_run_cfg cfg = {
      .ops = ops,
      .n = o.ops,
      .rate = (int)o.rate,
      .concurrency = (int)o.concurrency,
      .deadline = DEMO_DEADLINE,
      .overrun_margin = DEMO_MARGIN,
      .seed = o.seed,
      .outage_from = sum.outage_from,
      .outage_to = sum.outage_to,
      .outage_rule = outage_rule,
      .missing_book_id = DEMO_MISSING_BOOK,
      /* a safety net only: the schedule plus generous room for the slowest client's tail */
      .time_limit = (int64_t)(o.ops / o.rate) * LK_NS_PER_S + LK_SEC(30),
      .interrupted = &g_interrupted,
      .progress = &prog,
  };
  int64_t t0 = lk_now_ns();
  if (rc == 0) {
    demo_workload_make(ops, o.ops, o.seed, DEMO_BOOKS);
    intro(&o, &sum);
  }
  for (int which = 0; which < DEMO_NCLIENTS && rc == 0 && !g_interrupted; which++) {
    rc = run_one(which, bin, dir, &cfg, &sum.c[which], err, sizeof err);
    if (rc != 0 && !g_interrupted)
      fprintf(stderr, "linkd demo: %s client: %s\n", sum.c[which].title, err);
  }
  sum.total_s = (double)(lk_now_ns() - t0) / 1e9;

  if (have_dir)
    demo_tmpdir_remove(dir);
  free(ops);
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  sigaction(SIGPIPE, &old_pipe, NULL);

  int exit_code = CLI_EXIT_OK;
  if (g_interrupted) {
    fprintf(stderr, "linkd demo: interrupted; libraryd stopped and temporary files removed\n");
    exit_code = CLI_EXIT_CANCELLED;
  } else if (rc != 0) {
    exit_code = CLI_EXIT_FAILURE;
  } else {
    char path[DEMO_PATH_MAX];
    if (demo_report_write(o.report, &sum, err, sizeof err) != 0) {
      fprintf(stderr, "linkd demo: %s\n", err);
      exit_code = CLI_EXIT_FAILURE;
    }
    const char *shown = exit_code == 0 && realpath(o.report, path) ? path : o.report;
    if (o.json) {
      if (demo_table_json(stdout, &sum, exit_code == 0 ? shown : NULL) != 0)
        exit_code = CLI_EXIT_FAILURE;
      if (exit_code == 0)
        fprintf(stderr, "linkd demo: report written to %s\n", shown);
    } else {
      fputc('\n', stdout);
      demo_table_print(stdout, &sum);
      printf("\nAll three clients run on linkd's lk_http layer (no raw libcurl); the naive and\n"
             "fixed-interval ones with policies configured to behave naively. Took %.1fs.\n",
             sum.total_s);
      if (exit_code == 0)
        printf("Report: %s\n", shown);
      next_steps(stdout);
    }
  }
  for (int i = 0; i < DEMO_NCLIENTS; i++)
    lk_hist_free(sum.c[i].latency);
  fflush(stdout);
  return exit_code;
}
