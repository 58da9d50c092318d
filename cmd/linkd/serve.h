/* SPDX-License-Identifier: MIT */
#ifndef LINKD_CLI_SERVE_H
#define LINKD_CLI_SERVE_H

#include <stdio.h>

/* `linkd serve ...` with argv[0] = "serve". Returns the exit code. */
int linkd_serve_main(int argc, char **argv);

/* The text of `linkd serve --help`. */
void linkd_serve_help(FILE *f);

#endif
