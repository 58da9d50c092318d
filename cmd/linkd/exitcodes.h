/* SPDX-License-Identifier: MIT */
/* The exit codes of the linkd command line (documented in docs/cli.md and docs/linkd.1). */
#ifndef LINKD_CLI_EXITCODES_H
#define LINKD_CLI_EXITCODES_H

enum cli_exit {
  CLI_EXIT_OK = 0,            /* the call succeeded (2xx/3xx) */
  CLI_EXIT_FAILURE = 1,       /* anything else: a redirect -L did not follow, response too large,
                                 no memory, system error */
  CLI_EXIT_HTTP = 2,          /* an HTTP error status that is not retried (404, 503 to a POST) */
  CLI_EXIT_NOT_RETRYABLE = 3, /* a transport failure the policy does not retry (LK_ENOTRETRYABLE):
                                 its kind is not in retry-on (DNS_FAILED, TLS_FAILED by default),
                                 or the request may have been processed and is not idempotent */
  CLI_EXIT_EXHAUSTED = 4,     /* retryable failures until --max-attempts ran out */
  CLI_EXIT_DEADLINE = 5,      /* the deadline ended the call */
  CLI_EXIT_REFUSED = 6,       /* the retry budget or a protection refused to go on */
  CLI_EXIT_HTTP_FAIL = 22,    /* -f/--fail: the call ended on a status >= 400 (curl's 22) */
  CLI_EXIT_USAGE = 64,        /* EX_USAGE: bad flag, value or argument */
  CLI_EXIT_NOINPUT = 66,      /* EX_NOINPUT: the -d @FILE cannot be read */
  CLI_EXIT_CANTCREAT = 73,    /* EX_CANTCREAT: the -o FILE cannot be written, or writing it or
                                 stdout failed */
  CLI_EXIT_CONFIG = 78,       /* EX_CONFIG: bad config file */
  CLI_EXIT_CANCELLED = 130,   /* SIGINT or SIGTERM cancelled the call (128 + SIGINT) */
};

/* The exit code for a call's lk_http_result_err(). */
int cli_exit_for_error(int err);
/* A stable name for an exit code: "ok", "http-error", "not-retryable", "retries-exhausted",
 * "deadline-exceeded", "refused", "http-fail", "cancelled", "usage", "no-input", "cannot-create",
 * "config", "failure". */
const char *cli_exit_name(int code);

#endif
