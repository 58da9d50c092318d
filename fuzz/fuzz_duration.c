/* SPDX-License-Identifier: MIT */
/* libFuzzer: lk_duration_parse is total (no crash, no overflow: UBSan aborts on signed overflow),
 * accepts only non-negative values, always leaves a NUL-terminated message on failure, and what
 * lk_duration_format prints for an accepted value parses back to at most that value, within the
 * format's three decimals. */
#include <linkd/duration.h>
#include <linkd/error.h>

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s)
    return 0;
  memcpy(s, data, size);
  s[size] = '\0';
  int64_t ns = -1;
  char err[128];
  memset(err, 'x', sizeof err);
  int rc = lk_duration_parse(s, &ns, err, sizeof err);
  if (rc == LK_OK) {
    if (ns < 0)
      abort();
    char buf[64];
    lk_duration_format(ns, buf, sizeof buf);
    int64_t back = -1;
    if (lk_duration_parse(buf, &back, NULL, 0) != LK_OK || back > ns || ns - back > ns / 1000 + 1)
      abort();
  } else if (rc == LK_EPARSE || rc == LK_ERANGE) {
    if (!memchr(err, '\0', sizeof err) || err[0] == '\0')
      abort();
  } else {
    abort();
  }
  free(s);
  return 0;
}
