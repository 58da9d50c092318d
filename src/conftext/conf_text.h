/* SPDX-License-Identifier: MIT */
/* conf_text.h: a config file's text, read whole and bounded, then handed to inih line by line.
 *
 * The CLI's config, `linkd serve`'s and libraryd's are INI files parsed by libinih. inih reads
 * through a line callback; this is that callback, over bytes already in memory, with the checks
 * that keep a file from being applied in part or read in a way its author did not mean:
 *   - a NUL byte (C strings would cut the value there),
 *   - a CR anywhere but before the LF (with CR-only line ends the whole file is one line, of which
 *     inih reads the first [section] header and silently nothing else),
 *   - a line longer than inih's buffer (inih would apply the rest as the next line).
 * Each stops the reading at its line and is reported with it. Leading blanks are stripped, so an
 * indented line is a line of its own, never inih's continuation of the previous value. A UTF-8
 * byte order mark before the first line is skipped. With `hash_comments`, a '#' after a blank
 * starts a comment, as inih's ';' does.
 *
 * Not thread-safe; one conf_text per parse. */
#ifndef LINKD_CONF_TEXT_H
#define LINKD_CONF_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Why reading stopped before the end. */
typedef enum conf_stop {
  CONF_STOP_NONE,
  CONF_STOP_NUL,  /* a NUL byte in the line */
  CONF_STOP_CR,   /* a CR inside the line */
  CONF_STOP_LONG, /* longer than the reader's buffer holds */
} conf_stop;

typedef struct conf_text {
  const char *p; /* the text (not owned) and its length */
  size_t len, pos;
  bool hash_comments; /* '#' after a blank starts a comment */
  int line;           /* lines handed out so far: inside inih's handler, the current one */
  conf_stop stop;     /* what stopped the reading, and on which line (0 if none) */
  int stop_line;
  int max_line; /* with CONF_STOP_LONG: the longest line the buffer holds */
} conf_text;

/* Starts reading `len` bytes at `p` (a UTF-8 byte order mark is skipped). */
void conf_text_init(conf_text *t, const char *p, size_t len, bool hash_comments);

/* inih's reader (ini_reader): the next line into str (num bytes, its newline kept), or NULL at
 * the end or when a check stops the reading (t->stop says which). `stream` is the conf_text. */
char *conf_text_line(char *str, int num, void *stream);

/* The stop's message, "NAME:LINE: what", into err; 0 if reading did not stop, else 1. */
int conf_text_error(const conf_text *t, const char *name, char *err, size_t cap);

/* The outcome of ini_parse_stream(conf_text_line, t, ...) = rc, as one message into err: 0 when
 * the file was read and parsed, else 1 with "NAME: out of memory" (rc -2), the reader's stop
 * (conf_text_error), the handler's own message `msg` when inih's first error line `rc` is the
 * handler's first `msg_line`, or a syntax error at line rc. */
int conf_text_result(const conf_text *t, int rc, int msg_line, const char *msg, const char *name,
                     char *err, size_t cap);

/* Reads all of f, at most `max` bytes, into *buf (malloc'd, NUL-terminated, *len bytes before the
 * NUL). Reads one byte past `max`, so that /dev/zero or a FIFO ends. 0 on success; else *buf is
 * NULL and: 1 = larger than max, -1 = read error (errno as the read left it: EISDIR for a
 * directory), -2 = out of memory. */
int conf_text_slurp(FILE *f, size_t max, char **buf, size_t *len);

#endif
