/* SPDX-License-Identifier: MIT */
/* conf_size.c: sizes in bytes (conf_size.h). */
#include "conf_size.h"

#include <errno.h>
#include <stdlib.h>
#include <strings.h>

int conf_parse_size(const char *v, uint64_t max, uint64_t *out) {
  if (!v || *v < '0' || *v > '9')
    return -1;
  errno = 0;
  char *end;
  unsigned long long n = strtoull(v, &end, 10);
  if (errno == ERANGE)
    return 1;
  static const struct {
    const char *s;
    unsigned shift;
  } units[] = {{"", 0},    {"b", 0},   {"k", 10},  {"kb", 10},  {"kib", 10},
               {"m", 20},  {"mb", 20}, {"mib", 20}, {"g", 30},  {"gb", 30},
               {"gib", 30}, {"t", 40}, {"tb", 40},  {"tib", 40}};
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (strcasecmp(end, units[i].s) != 0)
      continue;
    if (n > max >> units[i].shift)
      return 1;
    *out = (uint64_t)n << units[i].shift;
    return 0;
  }
  return -1;
}
