#include "args.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static const struct {
  const char *cmd, *method;
} commands[] = {
    {"get", "GET"},   {"head", "HEAD"},   {"put", "PUT"},
    {"post", "POST"}, {"patch", "PATCH"}, {"delete", "DELETE"},
};

const char *cli_command_method(const char *cmd) {
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (strcmp(commands[i].cmd, cmd) == 0)
      return commands[i].method;
  return NULL;
}

enum {
  O_JSON = 256,
  O_CONFIG,
  O_NO_CONFIG,
  O_POLICY /* O_POLICY + cli_field: a policy setting */
};

static const struct option long_opts[] = {
    {"header", required_argument, NULL, 'H'},
    {"data", required_argument, NULL, 'd'},
    {"output", required_argument, NULL, 'o'},
    {"include", no_argument, NULL, 'i'},
    {"silent", no_argument, NULL, 's'},
    {"verbose", no_argument, NULL, 'v'},
    {"help", no_argument, NULL, 'h'},
    {"json", no_argument, NULL, O_JSON},
    {"config", required_argument, NULL, O_CONFIG},
    {"no-config", no_argument, NULL, O_NO_CONFIG},
    {"deadline", required_argument, NULL, O_POLICY + CLI_F_DEADLINE},
    {"attempt-timeout", required_argument, NULL, O_POLICY + CLI_F_ATTEMPT_TIMEOUT},
    {"connect-timeout", required_argument, NULL, O_POLICY + CLI_F_CONNECT_TIMEOUT},
    {"max-attempts", required_argument, NULL, O_POLICY + CLI_F_MAX_ATTEMPTS},
    {"backoff", required_argument, NULL, O_POLICY + CLI_F_BACKOFF},
    {"base", required_argument, NULL, O_POLICY + CLI_F_BASE},
    {"max-delay", required_argument, NULL, O_POLICY + CLI_F_MAX_DELAY},
    {"jitter", required_argument, NULL, O_POLICY + CLI_F_JITTER},
    {"idempotency-key", required_argument, NULL, O_POLICY + CLI_F_IDEMPOTENCY_KEY},
    {"retry-on", required_argument, NULL, O_POLICY + CLI_F_RETRY_ON},
    {"budget", required_argument, NULL, O_POLICY + CLI_F_BUDGET},
    {NULL, 0, NULL, 0},
};

/* The option getopt just complained about, for the message. */
static const char *bad_option(char **argv, int c) {
  static char buf[64];
  const char *arg = argv[optind - 1];
  if (strncmp(arg, "--", 2) == 0 && (c == ':' || optopt == 0)) {
    snprintf(buf, sizeof buf, "%.*s", (int)strcspn(arg, "="), arg);
    return buf;
  }
  snprintf(buf, sizeof buf, "-%c", optopt > 0 && optopt < 128 ? optopt : '?');
  return buf;
}

int cli_args_parse(int argc, char **argv, cli_opts *o, char *err, size_t cap) {
  memset(o, 0, sizeof *o);
  cli_settings_init(&o->flags);
  if (argc < 2 || !(o->method = cli_command_method(argv[1]))) {
    snprintf(err, cap, "unknown command '%s'", argc < 2 ? "" : argv[1]);
    return CLI_ARGS_USAGE;
  }
  o->command = argv[1];
  int sub_argc = argc - 1;
  char **sub_argv = argv + 1;
  optind = 0; /* GNU: full re-initialisation, so tests may parse many times */
  opterr = 0;
  bool help = false;
  int c;
  while ((c = getopt_long(sub_argc, sub_argv, ":H:d:o:isvh", long_opts, NULL)) != -1) {
    switch (c) {
    case 'H': {
      char m[256];
      int rc = cli_settings_set(&o->flags, "header", optarg, cli_origin_flag, false, m, sizeof m);
      if (rc == CLI_SET_NOMEM)
        return CLI_ARGS_NOMEM;
      if (rc != CLI_SET_OK) {
        snprintf(err, cap, "-H: %s", m);
        return CLI_ARGS_USAGE;
      }
      break;
    }
    case 'd':
      if (o->data) {
        snprintf(err, cap, "-d/--data given twice (one body per request)");
        return CLI_ARGS_USAGE;
      }
      if (strcmp(optarg, "@") == 0) {
        snprintf(err, cap, "-d @: a file name must follow '@' (or '@-' for stdin)");
        return CLI_ARGS_USAGE;
      }
      o->data = optarg;
      break;
    case 'o': o->output = optarg; break;
    case 'i': o->include = true; break;
    case 's': o->silent = true; break;
    case 'v': o->verbose = true; break;
    case 'h': help = true; break;
    case O_JSON: o->json = true; break;
    case O_CONFIG: o->config = optarg; break;
    case O_NO_CONFIG: o->no_config = true; break;
    case ':':
      snprintf(err, cap, "%s needs a value", bad_option(sub_argv, c));
      return CLI_ARGS_USAGE;
    case '?':
      snprintf(err, cap, "unknown option '%s'", bad_option(sub_argv, c));
      return CLI_ARGS_USAGE;
    default: {
      int f = c - O_POLICY;
      const char *key = cli_settings_key((cli_field)f);
      char m[384];
      int rc = cli_settings_set(&o->flags, key, optarg, cli_origin_flag, false, m, sizeof m);
      if (rc == CLI_SET_NOMEM)
        return CLI_ARGS_NOMEM;
      if (rc != CLI_SET_OK) {
        snprintf(err, cap, "--%s: %s", key, m);
        return CLI_ARGS_USAGE;
      }
      break;
    }
    }
  }
  if (help)
    return CLI_ARGS_HELP;
  if (optind >= sub_argc) {
    snprintf(err, cap, "%s needs a URL", o->command);
    return CLI_ARGS_USAGE;
  }
  if (sub_argc - optind > 1) {
    snprintf(err, cap, "one URL per call; unexpected '%s'", sub_argv[optind + 1]);
    return CLI_ARGS_USAGE;
  }
  o->url = sub_argv[optind];
  if (strncasecmp(o->url, "http://", 7) != 0 && strncasecmp(o->url, "https://", 8) != 0) {
    snprintf(err, cap, "'%s' is not an http:// or https:// URL", o->url);
    return CLI_ARGS_USAGE;
  }
  if (o->data && (strcmp(o->method, "GET") == 0 || strcmp(o->method, "HEAD") == 0)) {
    snprintf(err, cap, "%s sends no body: -d/--data is for put, post, patch and delete",
             o->command);
    return CLI_ARGS_USAGE;
  }
  if (o->json && o->output && strcmp(o->output, "-") == 0) {
    snprintf(err, cap, "--json and -o - do not mix: the JSON result goes to stdout");
    return CLI_ARGS_USAGE;
  }
  if (o->json && o->include) {
    snprintf(err, cap, "--json and -i/--include do not mix: the JSON result goes to stdout");
    return CLI_ARGS_USAGE;
  }
  return CLI_ARGS_OK;
}

void cli_opts_free(cli_opts *o) { cli_settings_free(&o->flags); }
