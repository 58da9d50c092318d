/* SPDX-License-Identifier: MIT */
/* `linkd outbox enqueue|run|list|retry|purge|stats`: the durable outbox on a file. */
#ifndef LINKD_CLI_OUTBOX_H
#define LINKD_CLI_OUTBOX_H

#include <stdio.h>

/* argv[0] is "outbox". Returns the exit code. */
int cli_outbox_main(int argc, char **argv);
/* The subcommand's help text. */
void cli_outbox_help(FILE *f);

#endif
