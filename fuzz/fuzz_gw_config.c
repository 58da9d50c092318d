/* SPDX-License-Identifier: MIT */
/* libFuzzer: `linkd serve`'s configuration file through lk_gw_config_load_mem(): no crash, no
 * leak, an error always names the file; a configuration that loads matches requests, attaches
 * to a runtime, and dumps to text that loads again to the same dump (the first line aside). */
#include "gw_config.h"

#include <linkd/error.h>

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

/* The dump without its first line (generation, digest and path differ between the two). */
static const char *body(const char *d) {
  const char *nl = strchr(d, '\n');
  return nl ? nl : d;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  char err[512] = "";
  lk_gw_config *c = lk_gw_config_load_mem((const char *)data, size, "fuzz.conf", err, sizeof err);
  if (!c) {
    if (strncmp(err, "fuzz.conf", 9) != 0)
      abort();
    return 0;
  }
  static const char *const hosts[] = {"api.example.com", "127.0.0.1:8080", "[::1]", "", NULL};
  static const char *const paths[] = {"/", "/api/v1/loans", "/x", ""};
  for (size_t h = 0; h < sizeof hosts / sizeof hosts[0]; h++)
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
      const lk_gw_route *r = lk_gw_config_match(c, hosts[h], paths[p]);
      if (r && (strncmp(paths[p], r->prefix, strlen(r->prefix)) != 0 || !r->cluster))
        abort();
    }
  char *d1 = NULL, *d2 = NULL;
  size_t l1 = 0, l2 = 0;
  if (lk_gw_config_dump(c, &d1, &l1) != LK_OK)
    abort();
  lk_gw_config *again = lk_gw_config_load_mem(d1, l1, "dump", err, sizeof err);
  if (!again || lk_gw_config_dump(again, &d2, &l2) != LK_OK || strcmp(body(d1), body(d2)) != 0)
    abort();
  lk_rand_fast seed;
  lk_rand_fast_seeded(&seed, 1);
  lk_gw_runtime *rt = lk_gw_runtime_new(&seed.base);
  if (!rt || lk_gw_runtime_attach(rt, c, 0, err, sizeof err) != LK_OK)
    abort();
  for (size_t i = 0; i < c->n_clusters; i++) {
    int idx = -1;
    if (lk_gw_cluster_pick(&c->clusters[i], 0, &seed.base, 0, &idx) != LK_OK || idx < 0 ||
        (size_t)idx >= c->clusters[i].n_endpoints)
      abort();
  }
  free(d1);
  free(d2);
  lk_gw_config_unref(again);
  lk_gw_config_unref(c);
  if (lk_gw_runtime_free(rt) != LK_OK)
    abort();
  return 0;
}
