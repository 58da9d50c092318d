/* SPDX-License-Identifier: MIT */
/* Command-line flags of the request commands (linkd get|head|put|post|patch|delete URL). */
#ifndef LINKD_CLI_ARGS_H
#define LINKD_CLI_ARGS_H

#include "settings.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct cli_opts {
  const char *command;   /* "get", ... (points into argv); for `linkd URL`, the method's command
                            ("get", "post", ...) or "request" for another -X method */
  const char *method;    /* "GET", ... (static), or the -X value (argv) */
  const char *url;       /* argv, or url_buf when http:// was added to a URL without a scheme */
  const char *data;      /* -d as given: text, "@FILE" or "@-" (stdin); NULL: no body */
  const char *output;    /* -o FILE ("-" = stdout); NULL: stdout */
  const char *config;    /* --config FILE */
  const char *write_out; /* -w FORMAT (checked by cli_write_out_check()), or "@FILE" / "@-"
                            as given (read and checked by cli_write_out_load(), which the
                            caller does before the call); NULL: none */
  char *write_out_buf;   /* owned: the format -w @FILE read, if the caller stores it here */
  char *url_buf;         /* owned */
  bool implicit;         /* `linkd [flags] URL`: no command word, curl's way */
  bool no_config;
  bool include;       /* -i (or -I) */
  bool silent;        /* -s */
  bool show_error;    /* -S: the failure summary even with -s */
  bool fail;          /* -f: a final status >= 400 exits 22 and prints no body */
  bool insecure;      /* -k: no TLS peer verification */
  bool follow;        /* -L */
  int max_redirs;     /* --max-redirs (50, as curl); -1: no limit */
  bool json;          /* --json */
  bool verbose;       /* -v */
  cli_settings flags; /* policy settings given as flags (origin cli_origin_flag) */
} cli_opts;

enum { CLI_ARGS_OK = 0, CLI_ARGS_HELP = 1, CLI_ARGS_USAGE = -1, CLI_ARGS_NOMEM = -2 };

/* The HTTP method of a request command ("get" -> "GET"), or NULL if `cmd` is not one. */
const char *cli_command_method(const char *cmd);

/* Parses argv[1] (the command) and the flags and URL after it into *o (free it with
 * cli_opts_free() whatever the result). Without a command word (`linkd [flags] URL`), the
 * method is -X's, or HEAD with -I, POST with -d, GET otherwise. Long options must be spelt out
 * (getopt's abbreviations would take --retry for --retry-on). getopt_long may permute argv. Not
 * reentrant (getopt's globals). Returns CLI_ARGS_OK, CLI_ARGS_HELP (-h/--help seen), CLI_ARGS_USAGE
 * with a message in err, or CLI_ARGS_NOMEM. */
int cli_args_parse(int argc, char **argv, cli_opts *o, char *err, size_t cap);

void cli_opts_free(cli_opts *o);

/* Whether lk_http_request_add_header() takes the header `name: value` beyond what the settings
 * parser checks (which it only answers with "invalid argument"): 0, or -1 with the reason in
 * err: Content-Length and Transfer-Encoding (linkd frames the body), an Idempotency-Key that is
 * not 1 to 255 visible ASCII characters. */
int cli_header_check(const char *name, const char *value, char *err, size_t cap);

/* Whether argv[1] starts a `linkd [flags] URL` call: a flag other than the top-level ones
 * (--help, -h, --version), or a word that looks like a URL (has "://", a '.', ':' or '/', or is
 * "localhost"); a bare unknown word stays an unknown command. */
bool cli_args_implicit(const char *arg1);

#endif
