/* SPDX-License-Identifier: MIT */
/* The config file: default policies and per-host overrides, in INI syntax parsed by libinih.
 *
 *   [defaults]                  ; applies to every call
 *   deadline = 3s
 *   retry-on = default,-408
 *
 *   [host "api.example.com"]    ; calls to this host (any port) override [defaults]
 *   max-attempts = 2
 *
 *   [host "127.0.0.1:8080"]     ; host and port: applied after the host-only section
 *   header = Authorization: Bearer abc
 *
 * Keys are the long flag names without "--" (cli_settings_key()); flags override the file.
 * Host names compare case-insensitively. An IPv6 address is written without brackets
 * ([host "::1"], since an INI section ends at the first ']') and matches any port.
 * Comments start with ';' or '#' at the start of a line, or " ;" after a value. Leading blanks
 * are ignored (no continuation lines). A line holds at most 198 characters (inih's buffer), the
 * file at most CLI_CONFIG_MAX_BYTES. Errors name the file and the line (inih reports it):
 * unknown sections and keys, a key given twice in a section, bad values, syntax errors, NUL bytes
 * and over-long lines are all refused. */
#ifndef LINKD_CLI_CONFIG_H
#define LINKD_CLI_CONFIG_H

/* The largest config file read (1 MiB): a bound for --config /dev/zero or a FIFO, and far
 * above any real file. */
#define CLI_CONFIG_MAX_BYTES (1 << 20)

#include "args.h"
#include "settings.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct cli_config_section {
  char *name; /* as written between the brackets */
  char *host; /* lower-case host for [host "..."]; NULL for [defaults] */
  int port;   /* -1: any port */
  int line;   /* where the section first appears */
  int key_line[CLI_F__COUNT];
  cli_settings s; /* origins point at labels owned by the config */
  /* resolve = HOST:PORT:ADDR[,ADDR...] and connect-to = HOST1:PORT1:HOST2:PORT2 lines (keys of
   * the CLI's own, repeatable, checked as the flags are): strings owned by the config */
  cli_entries resolve, connect_to;
} cli_config_section;

typedef struct cli_config {
  char *path;
  cli_config_section *sections;
  size_t nsections;
  char **labels; /* "PATH:LINE" origin labels */
  size_t nlabels;
} cli_config;

/* Parses the file at `path` into *c (freed with cli_config_free() whatever the result).
 * 0; -1 with "PATH:LINE: message" or "PATH: message" in err. */
int cli_config_load(cli_config *c, const char *path, char *err, size_t cap);
/* The same from an open stream; `name` stands for the path in messages and origins. */
int cli_config_load_stream(cli_config *c, FILE *f, const char *name, char *err, size_t cap);

/* Lays the file's settings for a call to host:port over *dst: [defaults], then a matching
 * [host "HOST"], then a matching [host "HOST:PORT"]. `host` is as libcurl reports it (IPv6 in
 * brackets, which are ignored for matching). The names of the sections applied are stored in
 * matched[0..*nmatched) (at most 3, owned by the config). 0, or -1 (no memory). */
int cli_config_apply(const cli_config *c, const char *host, int port, cli_settings *dst,
                     const char *matched[3], size_t *nmatched);

/* Appends the resolve and connect-to entries of the sections that apply to host:port (as
 * cli_config_apply() picks them) in the order libcurl needs for later layers to win: resolve
 * entries [defaults] first (a later entry for the same HOST:PORT replaces an earlier one),
 * connect-to entries [host "HOST:PORT"] first (the first entry that matches is used; the caller
 * puts the flags' before them). The strings are the config's. 0, or -1 (no memory). */
int cli_config_entries(const cli_config *c, const char *host, int port, cli_entries *resolve,
                       cli_entries *connect_to);

void cli_config_free(cli_config *c);

/* Picks the config file: `flag` (--config) if non-NULL, else $LINKD_CONFIG if set and non-empty
 * (both *required: a missing file is an error), else $XDG_CONFIG_HOME/linkd/linkd.conf or
 * ~/.config/linkd/linkd.conf (optional). 0 with the path in buf; -1 if there is none (no HOME). */
int cli_config_path(const char *flag, char *buf, size_t cap, bool *required);

#endif
