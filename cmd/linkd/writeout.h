/* SPDX-License-Identifier: MIT */
/* -w/--write-out: curl's format of variables printed after the call. */
#ifndef LINKD_CLI_WRITEOUT_H
#define LINKD_CLI_WRITEOUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The values a format can name. */
typedef struct cli_write_vars {
  int http_code;        /* %{http_code}: the final status, 0 if none */
  int64_t time_total;   /* %{time_total}: ns, printed in seconds with 6 decimals, as curl */
  int num_attempts;     /* %{num_attempts}: attempts of the last call (after -L: of all hops) */
  const char *url;      /* %{url_effective}: the last URL called */
  int exitcode;         /* %{exitcode} */
  const char *errormsg; /* %{errormsg}: empty on success */
} cli_write_vars;

/* Checks a format: %{name} with a known name, %% , and the escapes \n \r \t \\ . 0, or -1 with
 * a message in err (an unknown variable is refused rather than printed as is). */
int cli_write_out_check(const char *fmt, char *err, size_t cap);
/* The largest format -w @FILE (or @-) reads: a format is text, and -w @/dev/zero must end. */
#define CLI_WRITE_OUT_MAX ((size_t)64 << 10)

/* -w @FILE, as curl's: reads the format from `path` ("-": stdin) into a malloc'd string (*fmt,
 * freed by the caller), dropping the line ends (CR and LF) as curl does, so that a file may end
 * in a newline and a newline is written with \n. Then checks it (cli_write_out_check()). 0; -1
 * when the file cannot be read or holds more than CLI_WRITE_OUT_MAX bytes; -2 when its text is
 * not a format (an unknown variable, a NUL byte); a message naming the file in err. */
int cli_write_out_load(const char *path, char **fmt, char *err, size_t cap);
/* Writes the checked format with the values. */
void cli_write_out(FILE *f, const char *fmt, const cli_write_vars *v);

#endif
