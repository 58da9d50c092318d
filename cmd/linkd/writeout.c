/* SPDX-License-Identifier: MIT */
#include "writeout.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[] = {"http_code",     "time_total", "num_attempts",
                                    "url_effective", "exitcode",   "errormsg"};

/* The index of the variable %{...} at `p` (after "%{"), its length in *len; -1 if unknown. */
static int var_at(const char *p, size_t *len) {
  const char *end = strchr(p, '}');
  if (!end)
    return -1;
  size_t n = (size_t)(end - p);
  for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
    if (strlen(names[i]) == n && strncmp(names[i], p, n) == 0) {
      *len = n;
      return i;
    }
  return -1;
}

int cli_write_out_check(const char *fmt, char *err, size_t cap) {
  for (const char *p = fmt; *p; p++) {
    if (*p == '%' && p[1] == '{') {
      size_t n;
      if (var_at(p + 2, &n) < 0) {
        const char *end = strchr(p + 2, '}');
        snprintf(err, cap,
                 "unknown variable '%.*s' (known: %%{http_code} %%{time_total} "
                 "%%{num_attempts} %%{url_effective} %%{exitcode} %%{errormsg})",
                 end ? (int)(end - p + 1) : (int)strlen(p), p);
        return -1;
      }
      p += n + 2;
    } else if (*p == '%' && p[1] == '%') {
      p++;
    } else if (*p == '\\' && p[1]) {
      p++;
    }
  }
  return 0;
}

int cli_write_out_load(const char *path, char **fmt, char *err, size_t cap) {
  *fmt = NULL;
  bool std_in = strcmp(path, "-") == 0;
  FILE *f = std_in ? stdin : fopen(path, "rb");
  /* One byte more than allowed tells "too big" from "exactly the limit". */
  char *buf = f ? malloc(CLI_WRITE_OUT_MAX + 2) : NULL;
  size_t n = 0;
  int e = errno;
  if (buf) {
    for (size_t r = 1; r > 0 && n <= CLI_WRITE_OUT_MAX;)
      n += r = fread(buf + n, 1, CLI_WRITE_OUT_MAX + 1 - n, f);
    e = ferror(f) ? (errno ? errno : EIO) : 0;
  } else if (f) {
    e = ENOMEM;
  }
  if (f && !std_in)
    fclose(f);
  if (!buf || e) {
    snprintf(err, cap, "-w @%s: cannot read: %s", path, strerror(e));
    free(buf);
    return -1;
  }
  if (n > CLI_WRITE_OUT_MAX) {
    snprintf(err, cap, "-w @%s: larger than %zu KiB, the format limit", path,
             CLI_WRITE_OUT_MAX >> 10);
    free(buf);
    return -1;
  }
  size_t len = 0;
  for (size_t i = 0; i < n; i++) {
    if (buf[i] == '\0') {
      snprintf(err, cap, "-w @%s: a NUL byte at byte %zu: a format is text", path, i + 1);
      free(buf);
      return -2;
    }
    if (buf[i] != '\r' && buf[i] != '\n')
      buf[len++] = buf[i];
  }
  buf[len] = '\0';
  char m[384];
  if (cli_write_out_check(buf, m, sizeof m) != 0) {
    snprintf(err, cap, "-w @%s: %s", path, m);
    free(buf);
    return -2;
  }
  *fmt = buf;
  return 0;
}

void cli_write_out(FILE *f, const char *fmt, const cli_write_vars *v) {
  for (const char *p = fmt; *p; p++) {
    if (*p == '%' && p[1] == '{') {
      size_t n = 0;
      switch (var_at(p + 2, &n)) {
      case 0: fprintf(f, "%03d", v->http_code); break;
      case 1:
        fprintf(f, "%" PRId64 ".%06" PRId64, v->time_total / 1000000000,
                v->time_total % 1000000000 / 1000);
        break;
      case 2: fprintf(f, "%d", v->num_attempts); break;
      case 3: fputs(v->url ? v->url : "", f); break;
      case 4: fprintf(f, "%d", v->exitcode); break;
      case 5: fputs(v->errormsg ? v->errormsg : "", f); break;
      default: fputc(*p, f); continue; /* not reached after cli_write_out_check() */
      }
      p += n + 2;
    } else if (*p == '%' && p[1] == '%') {
      fputc('%', f);
      p++;
    } else if (*p == '\\' && p[1]) {
      p++;
      fputc(*p == 'n' ? '\n' : *p == 'r' ? '\r' : *p == 't' ? '\t' : *p, f);
    } else {
      fputc(*p, f);
    }
  }
}
