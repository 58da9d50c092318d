/* SPDX-License-Identifier: MIT */
/* `linkd serve -c FILE`: the resilient HTTP/1.1 gateway (docs/gateway.md, linkd-serve(1)). */
#include "serve.h"

#include "exitcodes.h"
#include "gw_proxy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: linkd serve -c FILE [-t|--check] [--port-file FILE] [--pid-file FILE] [--threads N]\n"
    "\n"
    "Runs the gateway described by the configuration FILE: an HTTP/1.1 reverse proxy whose\n"
    "routes call their upstream clusters under linkd's policies (deadline, retries on another\n"
    "endpoint, budget, breaker, ...). SIGHUP reloads FILE (validated first; the running\n"
    "configuration stays on an error); SIGUSR1 reopens the access log; SIGTERM drains and\n"
    "exits (a second SIGTERM or SIGINT stops at once).\n"
    "\n"
    "  -c, --config FILE   the configuration (INI; docs/gateway.md)\n"
    "  -t, --check         validate FILE, print it with every default spelled out, exit\n"
    "      --port-file F   once listening, write \"PORT ADMIN_PORT\" to F (for port = 0)\n"
    "      --pid-file F    once listening, write the process id to F; removed at exit\n"
    "      --threads N     loop threads, each with its own listener on the port (1-64;\n"
    "                      default: one per CPU)\n"
    "  -h, --help          this text\n";

void linkd_serve_help(FILE *f) { fputs(usage, f); }

int linkd_serve_main(int argc, char **argv) {
  lk_gw_serve_opts o = {0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(usage, stdout);
      return CLI_EXIT_OK;
    }
    if (!strcmp(a, "--check") || !strcmp(a, "-t")) { /* -t: nginx's "test the configuration" */
      o.check_only = true;
      continue;
    }
    bool cfg = !strcmp(a, "-c") || !strcmp(a, "--config");
    bool pf = !strcmp(a, "--port-file");
    bool pid = !strcmp(a, "--pid-file");
    bool th = !strcmp(a, "--threads");
    if ((cfg || pf || pid || th) && i + 1 < argc) {
      const char *v = argv[++i];
      if (cfg) {
        o.config_path = v;
      } else if (pf) {
        o.port_file = v;
      } else if (pid) {
        o.pid_file = v;
      } else {
        char *end;
        long n = strtol(v, &end, 10);
        if (*v < '0' || *v > '9' || *end || n < 1 || n > 64) {
          fprintf(stderr, "linkd serve: --threads %s: a number from 1 to 64\n", v);
          return CLI_EXIT_USAGE;
        }
        o.threads = (int)n;
      }
      continue;
    }
    fprintf(stderr, "linkd serve: %s: %s\n", a,
            cfg || pf || pid || th ? "needs an argument" : "unknown option");
    fputs(usage, stderr);
    return CLI_EXIT_USAGE;
  }
  if (!o.config_path) {
    fputs("linkd serve: -c FILE is required\n", stderr);
    fputs(usage, stderr);
    return CLI_EXIT_USAGE;
  }
  return lk_gw_serve(&o);
}
