/* SPDX-License-Identifier: MIT */
#ifndef LINKD_CLI_SERVE_H
#define LINKD_CLI_SERVE_H

/* `linkd serve ...` with argv[0] = "serve". Returns the exit code. */
int linkd_serve_main(int argc, char **argv);

#endif
