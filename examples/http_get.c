/* SPDX-License-Identifier: MIT */
/* http_get: one logical GET through liblinkd, with a deadline, per-attempt timeouts, jittered
 * retries and the attempt timeline.
 *
 *   http_get [-v] [-j] URL
 *     -v  print the attempt timeline, one line per attempt, to stderr
 *     -j  print the whole result as JSON to stdout instead of the body
 * Exit status: 0 success, 1 the call failed (typed error on stderr), 2 usage.
 */
#include <linkd/http.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  bool verbose = false, json = false;
  const char *url = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-v") == 0)
      verbose = true;
    else if (strcmp(argv[i], "-j") == 0)
      json = true;
    else if (!url && argv[i][0] != '-')
      url = argv[i];
    else
      url = NULL, i = argc;
  }
  if (!url) {
    fprintf(stderr, "usage: http_get [-v] [-j] URL\n");
    return 2;
  }

  /* The seed's numbers: 3 s for the whole call, 800 ms per attempt, 500 ms to connect, up to 4
   * attempts with exponential backoff 200 ms..2 s and symmetric jitter. */
  lk_http_policy pol;
  lk_http_policy_init_default(&pol);
  pol.first_byte_timeout = LK_MS(600);

  lk_http_request *req = lk_http_request_new("GET", url);
  if (!req) {
    fprintf(stderr, "http_get: invalid URL: %s\n", url);
    return 2;
  }
  lk_http_request_add_header(req, "Accept", "application/json");

  lk_http_result *res = NULL;
  int err = lk_http_call(NULL, req, &pol, NULL, &res);

  if (verbose) {
    size_t n;
    const lk_http_attempt_info *a = lk_http_result_attempts(res, &n);
    for (size_t i = 0; i < n; i++)
      fprintf(stderr, "attempt %d at %.1f ms: %s in %s after %.1f ms, status %d -> %s\n",
              a[i].number, (double)a[i].start / 1e6, lk_failure_name(a[i].failure),
              lk_http_phase_name(a[i].phase), (double)a[i].duration / 1e6, a[i].status,
              a[i].reason);
  }
  if (json) {
    char *js = NULL;
    if (lk_http_result_json(res, &js, NULL) == LK_OK) {
      puts(js);
      free(js);
    }
  } else {
    const lk_http_response *resp = lk_http_result_response(res);
    if (resp)
      fwrite(resp->body, 1, resp->body_len, stdout);
  }
  if (err != LK_OK)
    fprintf(stderr, "http_get: %s (%s): %s\n", lk_strerror(err), lk_err_name(err),
            lk_http_result_stop(res));
  lk_http_result_free(res);
  lk_http_request_free(req);
  return err == LK_OK ? 0 : 1;
}
