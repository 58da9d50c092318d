/* SPDX-License-Identifier: MIT */
/* Help texts: `linkd --help` and `linkd COMMAND --help`. */
#ifndef LINKD_CLI_HELP_H
#define LINKD_CLI_HELP_H

#include <stdbool.h>
#include <stdio.h>

/* The list of commands. */
void cli_help_main(FILE *f);
/* The help of one command (a request command, "seed-example" or "version"); falls back to the
 * main help for an unknown name. */
void cli_help_command(FILE *f, const char *command);
/* Whether `linkd help COMMAND` has a text for COMMAND ("help" itself: the main help). */
bool cli_help_knows(const char *command);

#endif
