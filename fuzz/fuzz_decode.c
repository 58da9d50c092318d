/* SPDX-License-Identifier: MIT */
/* libFuzzer: what a hostile server can send to a call with lk_http_policy.compressed, fed to the
 * driver's decoder (src/http/response.c) as the transports do, and the checks of the resolve and
 * connect-to entries a user types. The first byte picks the Content-Encoding and the body limit;
 * the rest is the body, in pieces split at 0x00 0x01 marker pairs. Never a crash, a leak or a
 * body past the limit; every byte fed is counted as received; after the stream's end nothing more
 * is taken. The whole input, as a string, is also checked as a resolve and a connect-to entry: an
 * accepted one has the colons its form needs. */
#include <linkd/error.h>
#include <linkd/http.h>

#include "http/http_internal.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

static const char *const codings[] = {"gzip", "deflate", "x-gzip", "identity",
                                      "gzip, deflate", "br", "", "GZIP"};

static size_t colons(const char *s) {
  size_t n = 0;
  for (; *s; s++)
    n += *s == ':';
  return n;
}

static void entries(const unsigned char *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s)
    return;
  memcpy(s, data, size);
  s[size] = '\0';
  const char *why = NULL;
  if (lk_http_resolve_check(s, &why) == LK_OK) {
    if (colons(s) < 2)
      abort();
  } else if (!why) {
    abort();
  }
  why = NULL;
  if (lk_http_connect_to_check(s, &why) == LK_OK) {
    if (colons(s) < 3)
      abort();
  } else if (!why) {
    abort();
  }
  free(s);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  entries(data, size);
  if (size < 1)
    return 0;
  unsigned sel = data[0];
  const char *coding = codings[sel & 7];
  size_t max = (sel >> 3) & 1 ? 64 : (size_t)1 << 20; /* a small limit finds the bomb path */
  data++;
  size--;

  lk_resp r;
  memset(&r, 0, sizeof r);
  if (!lk__resp_header(&r, "Content-Encoding", strlen("Content-Encoding"), coding,
                       strlen(coding))) {
    lk__resp_free(&r);
    return 0;
  }
  lk_decoder *d = NULL;
  int rc = lk__decoder_new(&r, &d);
  if (rc != LK_OK || !d) {
    /* nothing to decode (identity, none) or a coding the driver refuses: the body is junk */
    if (d)
      abort();
    lk__resp_free(&r);
    return 0;
  }
  size_t fed = 0;
  bool too_big = false;
  int last = LK_OK;
  for (size_t i = 0; i < size && last == LK_OK;) {
    size_t n = 0;
    while (i + n < size && !(i + n + 1 < size && data[i + n] == 0 && data[i + n + 1] == 1))
      n++;
    last = lk__decoder_write(d, (const char *)data + i, n, &r, max, &too_big);
    fed += n;
    if (r.wire_len != fed)
      abort();
    if (r.body_len > max)
      abort();
    if (last != LK_OK && last != LK_EPARSE && last != LK_ETOOBIG && last != LK_ENOMEM)
      abort();
    if (last == LK_ETOOBIG && !too_big)
      abort();
    i += n + 2; /* past the marker */
  }
  /* once the stream has ended, any further byte is refused */
  if (last == LK_OK && lk__decoder_done(d) && fed > 0 &&
      lk__decoder_write(d, "x", 1, &r, max, &too_big) != LK_EPARSE)
    abort();
  lk__decoder_free(d);
  lk__resp_free(&r);
  return 0;
}
