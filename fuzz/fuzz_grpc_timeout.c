/* SPDX-License-Identifier: MIT */
/* libFuzzer: the grpc-timeout parser never reads past len, never crashes, and whatever it accepts
 * is well formed and re-encodes to a value at least as large. */
#include <linkd/deadline.h>
#include <linkd/error.h>

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  /* A private copy of exactly `size` bytes so ASan catches any read past the end. */
  char *s = malloc(size ? size : 1);
  if (!s)
    return 0;
  memcpy(s, data, size);
  int64_t ns = -1;
  int rc = lk_grpc_timeout_parse(s, size, &ns);
  if (rc == LK_OK) {
    if (ns < 0 || size < 2 || size > 9)
      abort();
    for (size_t i = 0; i + 1 < size; i++)
      if (s[i] < '0' || s[i] > '9')
        abort();
    char buf[LK_GRPC_TIMEOUT_MAX];
    int n = lk_grpc_timeout_format(ns, buf, sizeof buf);
    int64_t back;
    if (n < 2 || lk_grpc_timeout_parse(buf, (size_t)n, &back) != LK_OK || back < ns)
      abort();
  } else if (rc != LK_EPARSE && rc != LK_ERANGE) {
    abort();
  }
  free(s);
  return 0;
}
