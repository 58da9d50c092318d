/* SPDX-License-Identifier: MIT */
#include "help.h"

#include "args.h"
#include "demo.h"
#include "outbox.h"
#include "serve.h"
#include "sim_cli.h"

#include <string.h>

void cli_help_main(FILE *f) {
  fputs(
      "usage: linkd <command> [options]\n"
      "\n"
      "Request commands (one logical call, retried under a deadline):\n"
      "  get URL        GET    (idempotent: retried on any retryable failure)\n"
      "  head URL       HEAD   (idempotent; prints no body)\n"
      "  put URL        PUT    (idempotent)\n"
      "  post URL       POST   (not idempotent: retried after it may have been processed\n"
      "                         only with an Idempotency-Key)\n"
      "  patch URL      PATCH  (not idempotent, like POST)\n"
      "  delete URL     DELETE (idempotent)\n"
      "\n"
      "Other commands:\n"
      "  demo           run libraryd with faults and compare naive retries with linkd's policy\n"
      "  outbox         a durable outbox of requests in a file: enqueue, run, list, retry, purge\n"
      "  serve -c FILE  run the gateway: an HTTP/1.1 reverse proxy with linkd's policies\n"
      "  sim FILE       simulate a fleet's retry policies on a simulated clock (docs/sim.md)\n"
      "  seed-example   print the seed document's RetryPolicy example (golden output)\n"
      "  version        print the library version\n"
      "  help [COMMAND] this text, or the options of COMMAND\n"
      "\n"
      "curl's form works too: 'linkd [options] URL' is a GET (-X METHOD, -I for HEAD, -d for\n"
      "POST, -G for -d in the query), and a URL without a scheme is http://. curl's -D, -O,\n"
      "-u, -A, --fail-with-body and data options work as in curl (docs/cli.md: Differences\n"
      "from curl).\n"
      "\n"
      "Run 'linkd COMMAND --help' for a command's options; 'man linkd' for the whole manual.\n",
      f);
}

static const char request_options[] =
    "Request:\n"
    "  -H, --header 'Name: value'  add a header (repeatable); 'Name:' removes one set by the\n"
    "                              config file or by default (User-Agent, Accept,\n"
    "                              Content-Type), 'Name;' sends it empty\n"
    "  -d, --data DATA             request body: text, @FILE, or @- for stdin (sent as is,\n"
    "                              at most 64 MiB; Content-Type:\n"
    "                              application/x-www-form-urlencoded unless -H gives one);\n"
    "                              repeatable, as the three below: joined with '&'\n"
    "      --data-binary DATA      the same as -d\n"
    "      --data-raw DATA         as -d, but a leading '@' is text\n"
    "      --data-urlencode DATA   as -d, percent-encoded: NAME=TEXT, =TEXT, NAME@FILE,\n"
    "                              @FILE or TEXT (the name is not encoded)\n"
    "  -G, --get                   put the data in the URL's query and send GET (HEAD with -I)\n"
    "  -u, --user USER:PASSWORD    HTTP Basic authentication (no prompt for a password)\n"
    "  -A, --user-agent NAME       the User-Agent header; '' sends none (linkd/VERSION)\n"
    "  -X, --request METHOD        the method, for 'linkd [options] URL' (GET; POST with -d)\n"
    "  -I, --head                  HEAD, and print the headers (like -i)\n"
    "  -L, --location              follow redirects (301 302 303 307 308) under the same\n"
    "                              deadline; credentials stay with their host\n"
    "      --max-redirs N          at most N redirects with -L; -1 = no limit (50)\n"
    "  -k, --insecure              do not verify the server's TLS certificate\n"
    "      --cacert FILE           verify it with the CA certificates in FILE (PEM)\n"
    "  -E, --cert FILE[:PASS]      a client certificate (PEM) for a server that asks for\n"
    "                              one, and its key's pass phrase ('\\:' is a colon of FILE)\n"
    "      --key FILE              the certificate's private key (PEM; default: in --cert's\n"
    "                              file)\n"
    "      --pass PHRASE           the key's pass phrase (never asked for on the terminal)\n"
    "      --compressed            ask for a gzip or deflate body and print it decoded (the\n"
    "                              64 MiB limit counts decoded bytes; -i shows the head\n"
    "                              as received)\n"
    "      --resolve HOST:PORT:ADDR[,ADDR...]  connect to ADDR for HOST:PORT instead of what\n"
    "                              DNS says (repeatable; also a config key)\n"
    "      --connect-to HOST1:PORT1:HOST2:PORT2  send requests for HOST1:PORT1 to HOST2:PORT2,\n"
    "                              Host unchanged; empty parts match any / keep the URL's\n"
    "                              (repeatable; also a config key)\n"
    "\n"
    "Output:\n"
    "  -o, --output FILE           write the response body to FILE instead of stdout; a\n"
    "                              failed write exits 73, as --json and -w then say\n"
    "  -O, --remote-name           write the body to the file the URL's path ends in, in the\n"
    "                              working directory\n"
    "  -D, --dump-header FILE      write the response's status line and headers to FILE (- is\n"
    "                              stdout); with -L every response's; also on HTTP errors\n"
    "  -i, --include               print the status line and headers before the body; with\n"
    "                              -L, every response's, in order, an empty line after each\n"
    "  -f, --fail                  a final status >= 400 exits 22 and prints no body\n"
    "      --fail-with-body        a final status >= 400 exits 22; the body is printed\n"
    "  -s, --silent                no failure message on stderr (the exit code still tells)\n"
    "  -S, --show-error            the failure message even with -s\n"
    "  -w, --write-out FORMAT      print FORMAT on stdout after the call: %{http_code}\n"
    "                              %{time_total} %{num_attempts} %{url_effective}\n"
    "                              %{exitcode} %{errormsg}; \\n is a newline; @FILE reads\n"
    "                              FORMAT from FILE (@- stdin; line ends dropped, 64 KiB)\n"
    "  -v, --verbose               print the policy and every attempt on stderr: phase, outcome,\n"
    "                              decision, delay and reason\n"
    "      --json                  print the result and attempt timeline as one JSON object on\n"
    "                              stdout (schema: linkd-result.schema.json); the body goes only\n"
    "                              to -o\n"
    "\n"
    "Policy (these are also config file keys, without the dashes):\n"
    "      --deadline DUR          budget for the whole call, all attempts and waits (3s)\n"
    "      --attempt-timeout DUR   cap for one attempt; each gets min(cap, time left) (800ms)\n"
    "  -m, --max-time SECONDS      --deadline in curl's terms: seconds or a duration (2.5,\n"
    "                              250ms); not a config key\n"
    "      --connect-timeout DUR   cap for the TCP handshake, <= the attempt's; 0s = the\n"
    "                              attempt's (500ms)\n"
    "      --dns-timeout DUR       cap for name resolution (0s = the attempt's)\n"
    "      --tls-timeout DUR       cap for the TLS handshake (0s)\n"
    "      --write-timeout DUR     cap for writing the request (0s)\n"
    "      --first-byte-timeout DUR  request written to first reply byte (0s)\n"
    "      --idle-timeout DUR      longest gap between two reply bytes (0s)\n"
    "      --max-attempts N        attempts in all, the first included, 1..1000 (4)\n"
    "      --backoff KIND          fixed | linear | exponential[:MULTIPLIER] (exponential)\n"
    "      --base DUR              first backoff delay, >= 1ms (200ms)\n"
    "      --max-delay DUR         cap for any backoff delay (2s)\n"
    "      --jitter KIND           none | symmetric[:RATIO] | full | equal | decorrelated\n"
    "                              (symmetric:0.5)\n"
    "      --idempotency-key K     auto (a new key for POST and PATCH) | always | none | KEY\n"
    "                              (none); one key is sent unchanged on every attempt\n"
    "      --retry-on LIST         failure kinds that may be retried: '503,429,read-timeout'\n"
    "                              sets the list, '-408' or '+4xx' edits it (default)\n"
    "      --budget SPEC           retry budget: none | ratio:PERCENT%[:min=N][:ttl=DUR] |\n"
    "                              tokens:MAX[:RATIO] | quota:CAPACITY[:COST[:TIMEOUT_COST]]\n"
    "                              (none)\n"
    "\n"
    "Config:\n"
    "      --config FILE           read FILE ($LINKD_CONFIG, else ~/.config/linkd/linkd.conf)\n"
    "      --no-config             read no config file\n"
    "  -h, --help                  this text\n"
    "\n"
    "Durations take a unit: 1500us, 250ms, 3s, 1m, 1h, also 1.5s and 1m30s.\n"
    "\n"
    "Exit codes: 0 success; 1 other failure (a redirect not followed, ...); 2 HTTP error status\n"
    "not retried; 3 failure the policy does not retry (not in --retry-on, as DNS and TLS\n"
    "failures by default, or may have been processed and not idempotent); 4 retries exhausted;\n"
    "5 deadline exceeded; 6 refused by the retry budget or a protection; 22 status >= 400 with\n"
    "-f or --fail-with-body; 64 usage error; 66 -d @FILE (or another data option's) or\n"
    "-w @FILE unreadable; 73 -o FILE, -D FILE or stdout not writable; 78 config error;\n"
    "130 cancelled (SIGINT/SIGTERM).\n";

bool cli_help_knows(const char *command) {
  static const char *const others[] = {"outbox", "demo",         "serve",  "sim",
                                       "help",   "seed-example", "version"};
  if (cli_command_method(command))
    return true;
  for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
    if (strcmp(command, others[i]) == 0)
      return true;
  return false;
}

void cli_help_command(FILE *f, const char *command) {
  const char *method = command ? cli_command_method(command) : NULL;
  if (method) {
    fprintf(f, "usage: linkd %s URL [options]\n\n", command);
    if (strcmp(method, "POST") == 0 || strcmp(method, "PATCH") == 0)
      fprintf(f,
              "Sends one %s under the policy below. %s is not idempotent: a failure after the\n"
              "request may have been processed (read timeout, reset after sending, 5xx) is\n"
              "retried only with an Idempotency-Key (--idempotency-key auto or KEY); failures\n"
              "before sending and 429/408/425 are always retryable.\n\n",
              method, method);
    else if (strcmp(method, "HEAD") == 0)
      fprintf(f, "Sends one HEAD under the policy below and prints no body (-i shows the\n"
                 "headers). HEAD is idempotent: every retryable failure is retried.\n\n");
    else
      fprintf(f,
              "Sends one %s under the policy below. %s is idempotent: every retryable failure is\n"
              "retried while attempts and the deadline allow.%s\n\n",
              method, method, strcmp(method, "GET") == 0 ? " GET sends no body." : "");
    fputs(request_options, f);
    return;
  }
  if (command && strcmp(command, "outbox") == 0) {
    cli_outbox_help(f);
    return;
  }
  if (command && strcmp(command, "demo") == 0) {
    linkd_demo_help(f);
    return;
  }
  if (command && strcmp(command, "serve") == 0) {
    linkd_serve_help(f);
    return;
  }
  if (command && strcmp(command, "sim") == 0) {
    linkd_sim_help(f);
    return;
  }
  if (command && strcmp(command, "seed-example") == 0) {
    fputs("usage: linkd seed-example\n\n"
          "Prints the seed document's RetryPolicy example, computed by this library: the same\n"
          "delays and decisions as the Java original (seeded L64X128MixRandom).\n",
          f);
    return;
  }
  if (command && strcmp(command, "version") == 0) {
    fputs("usage: linkd version\n\nPrints the version of the linked library.\n", f);
    return;
  }
  cli_help_main(f);
}
