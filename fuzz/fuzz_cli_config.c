/* SPDX-License-Identifier: MIT */
/* libFuzzer: the linkd CLI's config file (INI through libinih, then every setting's parser)
 * through its public entry points, cli_config_load_stream() and cli_config_apply(): no crash, no
 * leak (ASan's leak check runs at exit), and an error always comes with a message. */
#include "config.h"
#include "settings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  if (size == 0)
    return 0; /* fmemopen refuses an empty buffer */
  FILE *f = fmemopen((void *)data, size, "r");
  if (!f)
    return 0;
  cli_config c;
  memset(&c, 0, sizeof c);
  char err[256] = "";
  int rc = cli_config_load_stream(&c, f, "fuzz.conf", err, sizeof err);
  fclose(f);
  if (rc == 0) {
    /* Lay the file over an empty layer for a few hosts, as a call would. */
    static const char *const hosts[] = {"api.example.com", "127.0.0.1", "[::1]", "x"};
    for (size_t i = 0; i < sizeof hosts / sizeof hosts[0]; i++) {
      cli_settings s;
      cli_settings_init(&s);
      const char *matched[3];
      size_t nmatched = 0;
      if (cli_config_apply(&c, hosts[i], 8080, &s, matched, &nmatched) == 0 && nmatched > 3)
        abort();
      cli_settings_free(&s);
    }
  } else if (rc != -1 || err[0] == '\0') {
    abort();
  }
  cli_config_free(&c);
  return 0;
}
