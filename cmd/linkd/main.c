/* linkd: the command-line client. Subcommands are dispatched from here; each lives in its own file. */
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

static void usage(FILE *f) {
  fprintf(f, "usage: linkd <command> [options]\n\n"
             "commands:\n"
             "  seed-example   print the seed document's RetryPolicy example (golden output)\n"
             "  version        print the library version\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 64;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "seed-example"))
    return cmd_seed_example();
  if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
    printf("linkd %s\n", lk_version());
    return 0;
  }
  if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
    usage(stdout);
    return 0;
  }
  fprintf(stderr, "linkd: unknown command '%s'\n", cmd);
  usage(stderr);
  return 64;
}
