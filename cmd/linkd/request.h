/* SPDX-License-Identifier: MIT */
/* The request commands: linkd get|head|put|post|patch|delete URL [flags]. */
#ifndef LINKD_CLI_REQUEST_H
#define LINKD_CLI_REQUEST_H

/* Runs the command in argv[1] with its flags; returns the exit code (exitcodes.h). */
int cli_cmd_request(int argc, char **argv);

#endif
