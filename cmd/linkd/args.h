/* Command-line flags of the request commands (linkd get|head|put|post|patch|delete URL). */
#ifndef LINKD_CLI_ARGS_H
#define LINKD_CLI_ARGS_H

#include "settings.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct cli_opts {
  const char *command; /* "get", ... (points into argv) */
  const char *method;  /* "GET", ... (static) */
  const char *url;     /* argv */
  const char *data;    /* -d as given: text, "@FILE" or "@-" (stdin); NULL: no body */
  const char *output;  /* -o FILE ("-" = stdout); NULL: stdout */
  const char *config;  /* --config FILE */
  bool no_config;
  bool include;       /* -i */
  bool silent;        /* -s */
  bool json;          /* --json */
  bool verbose;       /* -v */
  cli_settings flags; /* policy settings given as flags (origin cli_origin_flag) */
} cli_opts;

enum { CLI_ARGS_OK = 0, CLI_ARGS_HELP = 1, CLI_ARGS_USAGE = -1, CLI_ARGS_NOMEM = -2 };

/* The HTTP method of a request command ("get" -> "GET"), or NULL if `cmd` is not one. */
const char *cli_command_method(const char *cmd);

/* Parses argv[1] (the command) and the flags and URL after it into *o (free it with
 * cli_opts_free() whatever the result). getopt_long may permute argv. Not reentrant (getopt's
 * globals). Returns CLI_ARGS_OK, CLI_ARGS_HELP (-h/--help seen), CLI_ARGS_USAGE with a message
 * in err, or CLI_ARGS_NOMEM. */
int cli_args_parse(int argc, char **argv, cli_opts *o, char *err, size_t cap);

void cli_opts_free(cli_opts *o);

#endif
