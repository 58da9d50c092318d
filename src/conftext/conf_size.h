/* SPDX-License-Identifier: MIT */
/* conf_size.h: a size in bytes, as the gateway's config and libraryd's flags and config write it.
 *
 * Digits with an optional unit, case-insensitive: b = 1; k, kb, kib = 1024; m, mb, mib = 1024^2;
 * g, gb, gib = 1024^3; t, tb, tib = 1024^4 (binary, as nginx reads its sizes: a "KB" here is
 * 1024 bytes, not 1000). No sign, no blanks, no fraction. */
#ifndef LINKD_CONF_SIZE_H
#define LINKD_CONF_SIZE_H

#include <stdint.h>

/* 0 with *out set; -1 if `v` is not a size; 1 if it is one larger than `max`. */
int conf_parse_size(const char *v, uint64_t max, uint64_t *out);

#endif
