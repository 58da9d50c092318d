/* SPDX-License-Identifier: MIT */
#include "exitcodes.h"

#include <linkd/error.h>

int cli_exit_for_error(int err) {
  switch (err) {
  case LK_OK: return CLI_EXIT_OK;
  case LK_EHTTP: return CLI_EXIT_HTTP;
  case LK_ENOTRETRYABLE: return CLI_EXIT_NOT_RETRYABLE;
  case LK_EATTEMPTS: return CLI_EXIT_EXHAUSTED;
  case LK_EDEADLINE: return CLI_EXIT_DEADLINE;
  case LK_EBUDGET:
  case LK_EBREAKER_OPEN:
  case LK_ERATE_LIMITED:
  case LK_EBULKHEAD_FULL: return CLI_EXIT_REFUSED;
  case LK_ECANCELED: return CLI_EXIT_CANCELLED;
  case LK_ECONFIG: return CLI_EXIT_CONFIG;
  default: return CLI_EXIT_FAILURE;
  }
}

const char *cli_exit_name(int code) {
  switch (code) {
  case CLI_EXIT_OK: return "ok";
  case CLI_EXIT_HTTP: return "http-error";
  case CLI_EXIT_NOT_RETRYABLE: return "not-retryable";
  case CLI_EXIT_EXHAUSTED: return "retries-exhausted";
  case CLI_EXIT_DEADLINE: return "deadline-exceeded";
  case CLI_EXIT_REFUSED: return "refused";
  case CLI_EXIT_HTTP_FAIL: return "http-fail";
  case CLI_EXIT_USAGE: return "usage";
  case CLI_EXIT_NOINPUT: return "no-input";
  case CLI_EXIT_CANTCREAT: return "cannot-create";
  case CLI_EXIT_CONFIG: return "config";
  case CLI_EXIT_CANCELLED: return "cancelled";
  default: return "failure";
  }
}
