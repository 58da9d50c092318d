/* SPDX-License-Identifier: MIT */
/* sim_cli.c: `linkd sim SCENARIO`: parses the scenario, runs the simulator, prints the summary
 * and writes the CSV time series and the HTML report; --compare runs it under several policies. */
#include "sim_cli.h"

#include "exitcodes.h"

#include <linkd/duration.h>
#include <linkd/error.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void linkd_sim_help(FILE *f) {
  fputs(
      "usage: linkd sim [options] SCENARIO-FILE\n"
      "\n"
      "Simulates the clients, tiers, servers, network and triggers of SCENARIO-FILE on a\n"
      "simulated clock; every retry, backoff, budget, breaker, limiter and deadline decision is\n"
      "made by liblinkd's own policy code with seeded generators, so a seed reproduces a run bit\n"
      "for bit. The scenario language is in docs/sim.md; examples in examples/sim/.\n"
      "\n"
      "Options:\n"
      "      --seed N           override the scenario's seed\n"
      "      --duration DUR     override the scenario's duration (arrivals stop then)\n"
      "      --csv FILE         per window and tier: offered load, goodput, amplification,\n"
      "                         queue depth, wasted work, latency percentiles\n"
      "      --html FILE        a self-contained HTML report with SVG time series\n"
      "      --compare[=P,...]  run once per policy (default: every policy of the file) with\n"
      "                         every client group on it, and print which keep goodput and the\n"
      "                         largest multiple of the first trigger's length each recovers\n"
      "                         from (the metastable boundary)\n"
      "  -q, --quiet            no summary on stdout\n"
      "  -h, --help             this text\n"
      "\n"
      "Exit status: 0 done; 1 failure; 64 usage error; 73 an output could not be written\n"
      "(--csv or --html FILE, or stdout); 78 bad scenario.\n",
      f);
}

/* --- --compare ------------------------------------------------------------------------------ */

static const double scales[] = {0.25, 0.5, 1, 1.5, 2, 3, 4, 6, 8};
#define NSCALES (int)(sizeof scales / sizeof scales[0])

static void fill_row(sim_compare_row *row, const sim_result *r) {
  uint64_t calls = 0, ok = 0, in = 0, att0 = 0, done = 0, wasted = 0;
  for (int g = 0; g < r->sc.n_groups; g++) {
    calls += r->group[g].calls;
    ok += r->group[g].ok;
    in += r->group[g].in_deadline;
  }
  for (int t = 0; t < r->sc.n_tiers; t++) {
    done += r->tier[t].done;
    wasted += r->tier[t].wasted;
  }
  att0 = r->tier[r->sc.groups[0].target].attempts;
  row->done_at = 0;
  for (int g = 0; g < r->sc.n_groups; g++)
    if (r->group[g].last_end > row->done_at)
      row->done_at = r->group[g].last_end;
  row->success = calls ? 100.0 * (double)ok / (double)calls : 0;
  row->in_deadline = calls ? 100.0 * (double)in / (double)calls : 0;
  row->goodput = (double)in / ((double)r->sc.duration / 1e9);
  row->amplification = calls ? (double)att0 / (double)calls : 0;
  row->wasted = done ? 100.0 * (double)wasted / (double)done : 0;
}

int sim_compare(const sim_scenario *sc, const char *const *names, int n, sim_compare_row *rows,
                char *err, size_t cap) {
  sim_scenario *run = malloc(sizeof *run);
  if (!run) {
    snprintf(err, cap, "out of memory");
    return LK_ENOMEM;
  }
  int rc = LK_OK;
  for (int i = 0; i < n && rc == LK_OK; i++) {
    int p = sim_policy_find(sc, names[i]);
    if (p < 0) {
      snprintf(err, cap, "--compare: no policy '%s' in the scenario", names[i]);
      rc = LK_EINVAL;
      break;
    }
    sim_compare_row *row = &rows[i];
    memset(row, 0, sizeof *row);
    snprintf(row->policy, sizeof row->policy, "%s", names[i]);
    *run = *sc;
    for (int g = 0; g < run->n_groups; g++)
      run->groups[g].policy = p;
    sim_result r;
    const char *why = NULL;
    if ((rc = sim_run(run, &r, &why)) != LK_OK) {
      snprintf(err, cap, "policy %s: %s", names[i], why ? why : lk_strerror(rc));
      break;
    }
    fill_row(row, &r);
    row->recovery = sc->n_triggers ? sim_recovery(&r, 0) : INT64_MIN;
    sim_result_free(&r);
    row->survives = sc->n_triggers ? 0 : -1;
    row->survives_all = false;
    if (!sc->n_triggers)
      continue;
    /* The metastable boundary: stretch the first trigger until the fleet no longer recovers
     * within the run. A trigger that would end less than a second before the arrivals stop
     * cannot show a recovery, so the ladder stops there. */
    int64_t from = sc->triggers[0].from, len = sc->triggers[0].to - from;
    bool all = true;
    for (int k = 0; k < NSCALES; k++) {
      int64_t to = from + (int64_t)((double)len * scales[k]);
      if (to > sc->duration - LK_SEC(1) || to <= from)
        break;
      *run = *sc;
      for (int g = 0; g < run->n_groups; g++)
        run->groups[g].policy = p;
      run->triggers[0].to = to;
      if ((rc = sim_run(run, &r, &why)) != LK_OK) {
        snprintf(err, cap, "policy %s: %s", names[i], why ? why : lk_strerror(rc));
        break;
      }
      int64_t rec = sim_recovery(&r, 0);
      sim_result_free(&r);
      if (rec < 0) {
        all = false;
        break;
      }
      row->survives = scales[k];
    }
    row->survives_all = all;
  }
  free(run);
  return rc;
}

void sim_compare_print(FILE *f, const sim_scenario *sc, const sim_compare_row *rows, int n) {
  char a[32], d[32];
  fprintf(f, "%-14s %8s %9s %10s %9s %8s %12s %12s %s\n", "policy", "success", "in dline",
          "goodput/s", "att/call", "wasted", "done at", "recovery", "survives trigger x");
  for (int i = 0; i < n; i++) {
    const sim_compare_row *r = &rows[i];
    bool na = r->recovery == SIM_RECOVERY_NO_BASELINE || r->recovery == SIM_RECOVERY_TOO_LATE;
    const char *rec = na                ? "n/a"
                      : r->recovery < 0 ? "never"
                                        : lk_duration_format(r->recovery, a, sizeof a);
    fprintf(f, "%-14s %7.1f%% %8.1f%% %10.1f %9.2f %7.1f%% %12s %12s ", r->policy, r->success,
            r->in_deadline, r->goodput, r->amplification, r->wasted,
            lk_duration_format(r->done_at, d, sizeof d), rec);
    if (r->survives < 0)
      fputs("(no trigger)\n", f);
    else if (r->recovery == SIM_RECOVERY_TOO_LATE)
      fputs("n/a (the arrivals stop too soon after the trigger)\n", f);
    else if (r->survives == 0)
      fputs("< 0.25\n", f);
    else
      fprintf(f, "%s%g\n", r->survives_all ? ">= " : "", r->survives);
  }
  if (sc->n_triggers) {
    char b[32];
    fprintf(f,
            "\"survives trigger x\": the largest multiple of the first trigger's length (%s)"
            " after which client goodput returned to 90%% of its level before it; a policy"
            " that keeps goodput with a margin survives more.\n",
            lk_duration_format(sc->triggers[0].to - sc->triggers[0].from, b, sizeof b));
    /* The verdict an operator asked for: recovered from the trigger as given, and from twice
     * its length (a margin), or not. */
    fputs("keep goodput through the trigger with a 2x margin:", f);
    int kept = 0;
    for (int i = 0; i < n; i++)
      if (rows[i].recovery >= 0 && rows[i].survives >= 2) {
        fprintf(f, " %s", rows[i].policy);
        kept++;
      }
    fputs(kept ? "\n" : " none\n", f);
  }
}

/* --- main ----------------------------------------------------------------------------------- */

static int split_names(char *list, const char **names, int max) {
  int n = 0;
  for (char *tok = strtok(list, ","); tok && n < max; tok = strtok(NULL, ","))
    names[n++] = tok;
  return n;
}

/* A summary or table that did not reach stdout (a full disk) is an output that could not be
 * written, not a success. */
static int stdout_flushed(int code) {
  int flush = fflush(stdout), e = errno;
  if (flush == 0 && !ferror(stdout))
    return code;
  fprintf(stderr, "linkd sim: stdout: write failed%s%s\n", flush ? ": " : "",
          flush ? strerror(e) : "");
  return CLI_EXIT_CANTCREAT;
}

int linkd_sim_main(int argc, char **argv) {
  const char *path = NULL, *csv = NULL, *html = NULL, *seed = NULL, *duration = NULL;
  char *compare = NULL;
  bool do_compare = false, quiet = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      linkd_sim_help(stdout);
      return CLI_EXIT_OK;
    }
    if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
      quiet = true;
    } else if (!strcmp(a, "--compare")) {
      do_compare = true;
    } else if (!strncmp(a, "--compare=", 10)) {
      do_compare = true;
      compare = argv[i] + 10;
    } else if (!strcmp(a, "--seed") || !strcmp(a, "--duration") || !strcmp(a, "--csv") ||
               !strcmp(a, "--html")) {
      if (i + 1 >= argc) {
        fprintf(stderr, "linkd sim: %s needs a value\n", a);
        return CLI_EXIT_USAGE;
      }
      const char *v = argv[++i];
      if (a[2] == 's')
        seed = v;
      else if (a[2] == 'd')
        duration = v;
      else if (a[2] == 'c')
        csv = v;
      else
        html = v;
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "linkd sim: unknown option '%s'\n", a);
      linkd_sim_help(stderr);
      return CLI_EXIT_USAGE;
    } else if (path) {
      fprintf(stderr, "linkd sim: one scenario file, not '%s' too\n", a);
      return CLI_EXIT_USAGE;
    } else {
      path = a;
    }
  }
  if (!path) {
    linkd_sim_help(stderr);
    return CLI_EXIT_USAGE;
  }
  if (do_compare && (csv || html)) { /* one table of many runs: no one run's series to write */
    fprintf(stderr, "linkd sim: --compare prints a table; --csv and --html are for a single run\n");
    return CLI_EXIT_USAGE;
  }
  sim_scenario *sc = malloc(sizeof *sc);
  if (!sc) {
    fprintf(stderr, "linkd sim: out of memory\n");
    return CLI_EXIT_FAILURE;
  }
  char err[600];
  int rc = sim_scenario_load(path, sc, err, sizeof err);
  int code = CLI_EXIT_OK;
  if (rc != LK_OK) {
    fprintf(stderr, "linkd sim: %s\n", err);
    code = rc == LK_EPARSE ? CLI_EXIT_CONFIG : CLI_EXIT_FAILURE;
    goto out;
  }
  if (seed) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(seed, &end, 10);
    if (end == seed || *end || errno || seed[0] == '-') {
      fprintf(stderr, "linkd sim: --seed: '%s' is not a whole number\n", seed);
      code = CLI_EXIT_USAGE;
      goto out;
    }
    sc->seed = v;
  }
  if (duration) {
    int64_t d;
    char e[96];
    if (lk_duration_parse(duration, &d, e, sizeof e) != LK_OK || d < sc->window) {
      fprintf(stderr, "linkd sim: --duration: %s\n",
              lk_duration_parse(duration, &d, e, sizeof e) != LK_OK ? e : "shorter than a window");
      code = CLI_EXIT_USAGE;
      goto out;
    }
    if (d > LK_SEC(86400) * 365) {
      fprintf(stderr, "linkd sim: --duration: at most 1 year\n");
      code = CLI_EXIT_USAGE;
      goto out;
    }
    if ((d + sc->drain) / sc->window >= SIM_MAX_WINDOWS) {
      fprintf(stderr, "linkd sim: --duration: more than %d windows of %s; make the scenario's "
                      "window longer\n",
              SIM_MAX_WINDOWS - 1, lk_duration_format(sc->window, e, sizeof e));
      code = CLI_EXIT_USAGE;
      goto out;
    }
    sc->duration = d;
  }
  if (do_compare) {
    const char *names[SIM_MAX_POLICIES];
    int n = 0;
    if (compare) {
      n = split_names(compare, names, SIM_MAX_POLICIES);
    } else {
      for (int i = 0; i < sc->n_policies; i++)
        names[n++] = sc->policies[i].name;
    }
    if (n == 0) {
      fprintf(stderr, "linkd sim: --compare: no policy\n");
      code = CLI_EXIT_USAGE;
      goto out;
    }
    sim_compare_row rows[SIM_MAX_POLICIES];
    if ((rc = sim_compare(sc, names, n, rows, err, sizeof err)) != LK_OK) {
      fprintf(stderr, "linkd sim: %s\n", err);
      code = rc == LK_EINVAL ? CLI_EXIT_USAGE : CLI_EXIT_FAILURE;
      goto out;
    }
    sim_compare_print(stdout, sc, rows, n);
    code = stdout_flushed(code);
    goto out;
  }
  sim_result r;
  const char *why = NULL;
  if ((rc = sim_run(sc, &r, &why)) != LK_OK) {
    fprintf(stderr, "linkd sim: %s\n", why ? why : lk_strerror(rc));
    code = CLI_EXIT_FAILURE;
    goto out;
  }
  if (!quiet) {
    sim_write_summary(stdout, &r);
    code = stdout_flushed(code);
  }
  if (csv) {
    FILE *f = fopen(csv, "w");
    if (!f) {
      fprintf(stderr, "linkd sim: %s: %s\n", csv, strerror(errno));
      code = CLI_EXIT_CANTCREAT;
    } else {
      sim_write_csv(f, &r);
      if (fclose(f) != 0) {
        fprintf(stderr, "linkd sim: %s: write error\n", csv);
        code = CLI_EXIT_CANTCREAT;
      }
    }
  }
  if (html && sim_report_write(html, path, &r, err, sizeof err) != 0) {
    fprintf(stderr, "linkd sim: %s\n", err);
    code = CLI_EXIT_CANTCREAT;
  }
  sim_result_free(&r);
out:
  free(sc);
  return code;
}
