/* SPDX-License-Identifier: MIT */
/* Command-line flags of the request commands (linkd get|head|put|post|patch|delete URL). */
#ifndef LINKD_CLI_ARGS_H
#define LINKD_CLI_ARGS_H

#include "settings.h"

#include <stdbool.h>
#include <stddef.h>

/* One of curl's data options, in the order given; the parts are joined with '&' (curl's rule). */
typedef enum cli_data_kind {
  CLI_DATA,          /* -d/--data, --data-binary: text, @FILE or @- (bytes as they are) */
  CLI_DATA_RAW,      /* --data-raw: text; a leading '@' is text too */
  CLI_DATA_URLENCODE /* --data-urlencode: [NAME]=TEXT, NAME@FILE, @FILE or TEXT, the content
                        percent-encoded (curl_easy_escape()'s set) */
} cli_data_kind;

typedef struct cli_data_part {
  cli_data_kind kind;
  const char *flag; /* as named in messages: "-d", "--data-binary", ... (static) */
  const char *arg;  /* argv */
} cli_data_part;

/* The values of a repeatable option or config key of linkd's own (--resolve, --connect-to), in
 * the order given, each with where it was given (cli_origin_flag or a config "PATH:LINE"). The
 * strings are borrowed (argv, or a config's own copies) unless the owner says otherwise. */
typedef struct cli_entries {
  const char **v;
  const char **origin;
  size_t n, cap;
} cli_entries;

/* Appends `value` from `origin` (neither copied). 0 or -1 (no memory). */
int cli_entries_add(cli_entries *e, const char *value, const char *origin);
/* Frees the arrays (not the strings); the list is empty again. */
void cli_entries_free(cli_entries *e);

typedef struct cli_opts {
  const char *command;   /* "get", ... (points into argv); for `linkd URL`, the method's command
                            ("get", "post", ...) or "request" for another -X method */
  const char *method;    /* "GET", ... (static), or the -X value (argv) */
  const char *url;       /* argv, or url_buf when http:// was added to a URL without a scheme */
  cli_data_part *data;   /* owned array: -d, --data-binary, --data-raw, --data-urlencode */
  size_t ndata;          /* 0: no body */
  const char *output;    /* -o FILE ("-" = stdout); NULL: stdout (see remote_name) */
  const char *dump_header; /* -D FILE ("-" = stdout): the response heads; NULL: none */
  const char *config;    /* --config FILE */
  const char *write_out; /* -w FORMAT (checked by cli_write_out_check()), or "@FILE" / "@-"
                            as given (read and checked by cli_write_out_load(), which the
                            caller does before the call); NULL: none */
  char *write_out_buf;   /* owned: the format -w @FILE read, if the caller stores it here */
  char *url_buf;         /* owned */
  char *auth_buf;        /* owned: -u's "Basic BASE64" (made a header after the flags) */
  bool implicit;         /* `linkd [flags] URL`: no command word, curl's way */
  bool no_config;
  bool include;       /* -i (or -I) */
  bool silent;        /* -s */
  bool show_error;    /* -S: the failure summary even with -s */
  bool fail;          /* -f: a final status >= 400 exits 22 and prints no body */
  bool fail_with_body; /* --fail-with-body: exits 22 as -f, and prints the body */
  bool remote_name;    /* -O: the body goes to the URL's last path segment, in the working
                          directory (the caller derives the name: cli_remote_name()) */
  bool get;            /* -G: the data goes into the URL's query, and the method is GET (HEAD
                          with -I, -X's if given) */
  bool insecure;      /* -k: no TLS peer verification */
  bool follow;        /* -L */
  int max_redirs;     /* --max-redirs (50, as curl); -1: no limit */
  bool json;          /* --json */
  bool compressed;    /* --compressed: ask for gzip or deflate and print the decoded body */
  cli_entries resolve;    /* --resolve HOST:PORT:ADDR[,ADDR...] (checked), repeatable */
  cli_entries connect_to; /* --connect-to HOST1:PORT1:HOST2:PORT2 (checked), repeatable */
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

/* The file a data part reads ("-": stdin), or NULL when it is text. --data-urlencode's rule is
 * curl's: the first '=' makes the rest text (NAME=TEXT); without one, an '@' makes the rest a
 * file name (NAME@FILE, @FILE). */
const char *cli_data_file(const cli_data_part *d);

/* -O: the file name of `url`: its path's last segment, as it is (not percent-decoded; the
 * query and fragment are not part of it). 0, or -1 with the reason in err when there is none
 * to use (an empty segment, "." or ".."). */
int cli_remote_name(const char *url, char *name, size_t cap, char *err, size_t ecap);

/* Whether argv[1] starts a `linkd [flags] URL` call: a flag other than the top-level ones
 * (--help, -h, --version), or a word that looks like a URL (has "://", a '.', ':' or '/', or is
 * "localhost"); a bare unknown word stays an unknown command. */
bool cli_args_implicit(const char *arg1);

#endif
