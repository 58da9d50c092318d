/* SPDX-License-Identifier: MIT */
/* A temporary directory holding one SQLite database file, as a cmocka setup / teardown pair:
 * the store tests open their own store on `path` and the teardown removes the file, its WAL
 * and shared-memory files, and the directory. */
#ifndef LINKD_TEST_DBDIR_H
#define LINKD_TEST_DBDIR_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct fixture {
  char dir[128];
  char path[192];
} fixture;

static inline int dbdir_setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (!f)
    return -1;
  snprintf(f->dir, sizeof f->dir, "/tmp/libraryd-store-XXXXXX");
  if (!mkdtemp(f->dir)) {
    free(f);
    return -1;
  }
  snprintf(f->path, sizeof f->path, "%s/t.db", f->dir);
  *state = f;
  return 0;
}

static inline int dbdir_teardown(void **state) {
  fixture *f = *state;
  const char *sfx[] = {"", "-wal", "-shm"};
  for (int i = 0; i < 3; i++) {
    char p[220];
    snprintf(p, sizeof p, "%s%s", f->path, sfx[i]);
    unlink(p);
  }
  rmdir(f->dir);
  free(f);
  return 0;
}

#endif
