/* SPDX-License-Identifier: MIT */
/* sim_cli.h: `linkd sim`, the fleet-scale simulator of retry policies (docs/sim.md). */
#ifndef LINKD_SIM_CLI_H
#define LINKD_SIM_CLI_H

#include "sim/sim.h"

#include <stdio.h>

/* argv[0] is "sim". Returns the process exit code. */
int linkd_sim_main(int argc, char **argv);

/* The text of `linkd sim --help`. */
void linkd_sim_help(FILE *f);

/* One row of --compare: the scenario run with every client group on one policy. */
typedef struct sim_compare_row {
  char policy[SIM_NAME_MAX];
  double success, in_deadline, goodput, amplification, wasted;
  int64_t done_at;   /* simulated time the last client call ended */
  int64_t recovery;  /* of the first trigger, as sim_recovery */
  double survives;   /* largest multiple of the first trigger's length it recovers from;
                        0 = not even the smallest tried; -1 = no trigger */
  bool survives_all; /* recovered from every length tried */
} sim_compare_row;

/* Runs `sc` once per policy in `names` (n of them) and fills rows[0..n). LK_OK or an error with a
 * message in err. */
int sim_compare(const sim_scenario *sc, const char *const *names, int n, sim_compare_row *rows,
                char *err, size_t cap);
void sim_compare_print(FILE *f, const sim_scenario *sc, const sim_compare_row *rows, int n);

/* The HTML report of a run (sim_report.c): one self-contained file, SVG charts per tier. 0, or -1
 * with a message in err. */
int sim_report_write(const char *path, const char *title, const sim_result *r, char *err,
                     size_t cap);

#endif
