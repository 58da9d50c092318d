/* SPDX-License-Identifier: MIT */
#include "lk_sqlite.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void lk__sqlite_err(char *errbuf, size_t errcap, const char *what, sqlite3 *db) {
  if (!errbuf || !errcap)
    return;
  int sys = db ? sqlite3_system_errno(db) : 0;
  if (sys) /* SQLite's own text ("unable to open database file") hides the OS's reason */
    snprintf(errbuf, errcap, "%s: %s (%s)", what, sqlite3_errmsg(db), strerror(sys));
  else
    snprintf(errbuf, errcap, "%s: %s", what, db ? sqlite3_errmsg(db) : "out of memory");
}

int lk__sqlite_check_location(const char *path, const char *noun, char *errbuf, size_t errcap) {
  char scratch[8];
  if (!errbuf || !errcap) {
    errbuf = scratch;
    errcap = sizeof scratch;
  }
  char dir[4096];
  const char *slash = strrchr(path, '/');
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else if (slash == path)
    snprintf(dir, sizeof dir, "/");
  else
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  struct stat st;
  if (stat(dir, &st) != 0) {
    snprintf(errbuf, errcap, "the %s directory '%s' %s", noun, dir,
             errno == ENOENT ? "does not exist" : strerror(errno));
    return -1;
  }
  if (!S_ISDIR(st.st_mode)) {
    snprintf(errbuf, errcap, "'%s' (the %s's directory) is not a directory", dir, noun);
    return -1;
  }
  if (access(dir, W_OK | X_OK) != 0) {
    snprintf(errbuf, errcap,
             "the %s directory '%s' is not writable (%s); WAL mode creates the -wal and -shm "
             "files there",
             noun, dir, strerror(errno));
    return -1;
  }
  if (access(path, F_OK) == 0 && access(path, R_OK | W_OK) != 0) {
    snprintf(errbuf, errcap, "the %s file is read-only (%s); it must be writable", noun,
             strerror(errno));
    return -1;
  }
  return 0;
}
