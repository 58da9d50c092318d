/* SPDX-License-Identifier: MIT */
/* lk_sqlite.h: what the project's two SQLite files (libraryd's store, liblinkd-outbox) need
 * alike when they open one: an error message that names the operating system's reason, and a
 * check of the file's location before SQLite reports it as "unable to open database file" or
 * as a disk I/O error at the first write. Internal; not installed. Thread-safe (no state). */
#ifndef LINKD_SQLITE_UTIL_H
#define LINKD_SQLITE_UTIL_H

#include <sqlite3.h>
#include <stddef.h>

/* "what: SQLite's message (strerror of the system errno)" into errbuf, or "what: out of memory"
 * when db is NULL. Nothing when errbuf is NULL or errcap 0. */
void lk__sqlite_err(char *errbuf, size_t errcap, const char *what, sqlite3 *db);

/* The directory of `path` must exist, be a directory and be writable (WAL mode creates the -wal
 * and -shm files beside the file), and an existing file must be readable and writable. `noun`
 * names the file in the messages ("database", "outbox"). 0, or -1 with the reason in errbuf
 * (errbuf may be NULL). */
int lk__sqlite_check_location(const char *path, const char *noun, char *errbuf, size_t errcap);

#endif
