/* SPDX-License-Identifier: MIT */
/* What linkd prints: the response (-i, body), the -v timeline, the summary line, --json. */
#ifndef LINKD_CLI_OUTPUT_H
#define LINKD_CLI_OUTPUT_H

#include "args.h"
#include "settings.h"

#include <linkd/http.h>

#include <stdio.h>

/* Everything about one call the printers need besides its result. */
typedef struct cli_call_info {
  const cli_opts *opts;
  const cli_settings *eff;      /* merged settings: origins of the values */
  const lk_http_policy *policy; /* the policy the call ran with */
  const char *config_path;      /* NULL: no config file used */
  const char *const *sections;  /* config sections applied, in order */
  size_t nsections;
  const char *method; /* of the last call: -L may turn a POST into a GET */
  const char *url;    /* the last URL called (-L: after the redirects) */
  int redirects;      /* redirects followed (-L) */
  const char *stop;   /* why linkd stopped after the last call succeeded (a redirect -L could
                         not follow), replacing its stop reason; NULL: the result's own */
  const char *output_error; /* the response or the report could not be written ("-o FILE: write
                               failed: REASON", "stdout: ..."); NULL: no write failed */
  const cli_entries *resolve;    /* the call's --resolve entries (flags and config), or NULL */
  const cli_entries *connect_to; /* its --connect-to entries, in the order tried, or NULL */
} cli_call_info;

/* -v, before the call: the effective policy, one setting per line with where it came from. */
void cli_print_policy(FILE *f, const cli_call_info *ci);
/* -v: one attempt's timing, phase, outcome, decision, delay and reason (printed as it happens,
 * from the per-attempt hook), and the same for every attempt of a finished call. */
void cli_print_attempt(FILE *f, const lk_http_attempt_info *a);
void cli_print_timeline(FILE *f, const lk_http_result *r);
/* One line saying how the call ended ("linkd: GET URL: retries exhausted ..."). */
void cli_print_summary(FILE *f, const cli_call_info *ci, const lk_http_result *r, int code);
/* -i: the status line as received ("HTTP/1.1 200 OK", "HTTP/2 200") and the headers,
 * CRLF-terminated, then an empty line. With -L, once per response: each redirect followed, then
 * the last. */
void cli_print_head(FILE *f, const lk_http_response *resp);
/* --json: one JSON document (docs/linkd-result.schema.json) and a newline. 0, or -1 when the
 * result could not be rendered (no memory). */
int cli_print_json(FILE *f, const cli_call_info *ci, const lk_http_result *r, int code);

/* Writes `s` as a JSON string literal: escapes quotes, backslashes and control characters and
 * replaces bytes that are not valid UTF-8 with U+FFFD, so the output is always valid JSON. */
void cli_json_string(FILE *f, const char *s);

#endif
