/* SPDX-License-Identifier: MIT */
/* Built against an installed liblinkd: prints the seed example through the public API. */
#include <linkd/linkd.h>
#include <linkd/seed_example.h>

#include <stdio.h>
#include <string.h>

int main(void) {
  char buf[1024];
  if (lk_seed_example(buf, sizeof buf) < 0)
    return 1;
  fputs(buf, stdout);
  printf("linkd %s (header %s)\n", lk_version(), LK_VERSION_STRING);
  return strcmp(lk_version(), LK_VERSION_STRING) != 0;
}
