/* SPDX-License-Identifier: MIT */
/* linkd: the command-line client. Subcommands are dispatched from here; each lives in its own
 * file (request.c for get/head/put/post/patch/delete, and for `linkd [options] URL`). */
#include "args.h"
#include "demo.h"
#include "exitcodes.h"
#include "help.h"
#include "outbox.h"
#include "request.h"
#include "serve.h"
#include "sim_cli.h"

#include <linkd/linkd.h>
#include <linkd/seed_example.h>

#include <stdio.h>
#include <string.h>

static int cmd_seed_example(void) {
  char buf[1024];
  int n = lk_seed_example(buf, sizeof buf);
  if (n < 0) {
    fprintf(stderr, "linkd: seed-example: %s\n", lk_strerror(n));
    return 1;
  }
  fputs(buf, stdout);
  return 0;
}

static bool is_help(const char *s) { return !strcmp(s, "--help") || !strcmp(s, "-h"); }

int main(int argc, char **argv) {
  if (argc < 2) {
    cli_help_main(stderr);
    return CLI_EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (cli_command_method(cmd))
    return cli_cmd_request(argc, argv);
  if (!strcmp(cmd, "demo"))
    return linkd_demo_main(argc - 1, argv + 1);
  if (!strcmp(cmd, "outbox"))
    return cli_outbox_main(argc - 1, argv + 1);
  if (!strcmp(cmd, "serve"))
    return linkd_serve_main(argc - 1, argv + 1);
  if (!strcmp(cmd, "sim"))
    return linkd_sim_main(argc - 1, argv + 1);
  if (!strcmp(cmd, "seed-example") || !strcmp(cmd, "version")) {
    if (argc > 2 && is_help(argv[2])) {
      cli_help_command(stdout, cmd);
      return CLI_EXIT_OK;
    }
    if (argc > 2) {
      fprintf(stderr, "linkd: %s takes no arguments\n", cmd);
      return CLI_EXIT_USAGE;
    }
    if (!strcmp(cmd, "seed-example"))
      return cmd_seed_example();
    printf("linkd %s\n", lk_version());
    return CLI_EXIT_OK;
  }
  if (!strcmp(cmd, "--version")) {
    printf("linkd %s\n", lk_version());
    return CLI_EXIT_OK;
  }
  if (!strcmp(cmd, "help") || is_help(cmd)) {
    if (argc > 2 && !is_help(argv[2]) && !cli_help_knows(argv[2])) {
      fprintf(stderr, "linkd: help: unknown command '%s'\n", argv[2]);
      cli_help_main(stderr);
      return CLI_EXIT_USAGE;
    }
    if (argc > 2)
      cli_help_command(stdout, argv[2]);
    else
      cli_help_main(stdout);
    return CLI_EXIT_OK;
  }
  /* curl's form, `linkd [options] URL`: a flag or something that looks like a URL. */
  if (cli_args_implicit(cmd))
    return cli_cmd_request(argc, argv);
  fprintf(stderr, "linkd: unknown command '%s'\n", cmd);
  cli_help_main(stderr);
  return CLI_EXIT_USAGE;
}
