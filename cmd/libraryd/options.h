/* SPDX-License-Identifier: MIT */
/* options.h: libraryd's flags and its INI config file (the same names), read into one struct.
 * main.c runs the daemon from it; fuzz/fuzz_libraryd_config.c reads hostile files through it.
 * Messages go to stderr, naming the flag or the file and line. Not thread-safe (one reader). */
#ifndef LIBRARYD_OPTIONS_H
#define LIBRARYD_OPTIONS_H

#include "server.h"
#include "store.h"

#include <stdbool.h>
#include <stdio.h>

#define LD_MAX_LIST 64
#define LD_MAX_OPTS 48 /* more than there are options */

typedef struct ld_opts {
  lk_server_config srv;
  lk_store_config store;
  bool db_given; /* --db was set (it and --store exclude each other) */
  const char *port_file, *admin_port_file;
  const char *log_file;
  /* The config file being read: where its current line is, for error messages. */
  const char *cfg_path;
  int cfg_lines, cfg_err_line;
  int cfg_key_line[LD_MAX_OPTS]; /* per option, the line that set it in this file, 0 if none */
  const char *faults[LD_MAX_LIST];
  const char *require_key[LD_MAX_LIST];
  char *owned[2 * LD_MAX_LIST + 64]; /* strings copied from the config file */
  size_t n_owned;
} ld_opts;

/* The defaults of every setting, nothing owned. */
void ld_opts_init(ld_opts *o);
/* Frees the strings copied from config files (o's pointers into them go stale). */
void ld_opts_free(ld_opts *o);
/* Every --config file first (in order), then the flags over them. 0; 1 when --help or --version
 * printed what was asked; -1 after a message. */
int ld_opts_parse_args(int argc, char **argv, ld_opts *o);
/* Applies one config file's text from f; `name` is what messages call it. 0, or -1 after a
 * message naming the file, line and problem. */
int ld_opts_read_config_stream(FILE *f, const char *name, ld_opts *o);
/* Writes the names of the settings that differ between cur and next and take effect only at
 * start (all but the fault rules and the seed), ", "-separated, into buf; returns how many. */
int ld_opts_restart_changes(const ld_opts *cur, const ld_opts *next, char *buf, size_t cap);

#endif
