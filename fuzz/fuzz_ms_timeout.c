/* SPDX-License-Identifier: MIT */
/* libFuzzer: the plain milliseconds parser is strict and total. */
#include <linkd/deadline.h>
#include <linkd/error.h>

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  char *s = malloc(size ? size : 1);
  if (!s)
    return 0;
  memcpy(s, data, size);
  int64_t ns = -1;
  int rc = lk_ms_timeout_parse(s, size, &ns);
  if (rc == LK_OK) {
    if (ns < 0 || ns % 1000000 != 0 || size == 0 || size > 18)
      abort();
    char buf[LK_MS_TIMEOUT_MAX];
    int n = lk_ms_timeout_format(ns, buf, sizeof buf);
    int64_t back;
    if (n < 1 || lk_ms_timeout_parse(buf, (size_t)n, &back) != LK_OK || back != ns)
      abort();
  } else if (rc != LK_EPARSE && rc != LK_ERANGE) {
    abort();
  }
  free(s);
  return 0;
}
