/* SPDX-License-Identifier: MIT */
#include "writeout.h"

#include <inttypes.h>
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
