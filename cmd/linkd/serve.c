/* SPDX-License-Identifier: MIT */
/* `linkd serve -c FILE`: the resilient HTTP/1.1 gateway (docs/gateway.md, linkd-serve(1)). */
#include "serve.h"

#include "exitcodes.h"
#include "gw_proxy.h"

#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: linkd serve -c FILE [--check] [--port-file FILE]\n"
    "\n"
    "Runs the gateway described by the configuration FILE: an HTTP/1.1 reverse proxy whose\n"
    "routes call their upstream clusters under linkd's policies (deadline, retries on another\n"
    "endpoint, budget, breaker, ...). SIGHUP reloads FILE (validated first; the running\n"
    "configuration stays on an error); SIGTERM drains and exits.\n"
    "\n"
    "  -c, --config FILE   the configuration (INI; docs/gateway.md)\n"
    "      --check         validate FILE, print it with every default spelled out, exit\n"
    "      --port-file F   once listening, write \"PORT ADMIN_PORT\" to F (for port = 0)\n"
    "  -h, --help          this text\n";

int linkd_serve_main(int argc, char **argv) {
  lk_gw_serve_opts o = {0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(usage, stdout);
      return CLI_EXIT_OK;
    }
    if (!strcmp(a, "--check")) {
      o.check_only = true;
      continue;
    }
    bool cfg = !strcmp(a, "-c") || !strcmp(a, "--config");
    bool pf = !strcmp(a, "--port-file");
    if ((cfg || pf) && i + 1 < argc) {
      if (cfg)
        o.config_path = argv[++i];
      else
        o.port_file = argv[++i];
      continue;
    }
    fprintf(stderr, "linkd serve: %s: %s\n", a,
            cfg || pf ? "needs an argument" : "unknown option");
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
