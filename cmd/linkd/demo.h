/* SPDX-License-Identifier: MIT */
/* demo.h: `linkd demo`, the one command that shows why retry policies matter.
 *
 * It starts libraryd (found as demo_server.h says) on free loopback ports with a temporary
 * SQLite store and a seeded fault profile, runs the same workload with four clients (naive,
 * fixed-interval, linkd's library defaults, linkd's policy; see demo_policy.h), each against its
 * own fresh libraryd, in two scenarios (faults, storm), prints one comparison table per scenario
 * (or JSON with --json), writes an HTML report and cleans up its processes and files. See
 * docs/demo.md.
 *
 * Thread-safety: runs on the calling thread; installs SIGINT/SIGTERM handlers for its duration
 * (restored before it returns).
 */
#ifndef LINKD_DEMO_H
#define LINKD_DEMO_H

#include <stdio.h>

/* argv[0] is the command name ("demo"), options follow (see `linkd demo --help`).
 * Returns the process exit code: 0 done, 1 failure (libraryd missing or failing, report not
 * written), 64 usage error, 130 interrupted. */
int linkd_demo_main(int argc, char **argv);

/* The text of `linkd demo --help`. */
void linkd_demo_help(FILE *f);

#endif
