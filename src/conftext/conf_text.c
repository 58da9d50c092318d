/* SPDX-License-Identifier: MIT */
/* conf_text.c: a config file's text handed to inih line by line (conf_text.h). */
#include "conf_text.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void conf_text_init(conf_text *t, const char *p, size_t len, bool hash_comments) {
  memset(t, 0, sizeof *t);
  t->p = p;
  t->len = len;
  t->hash_comments = hash_comments;
  /* what some Windows editors write first: not part of the first line, so [x] on line 1 counts */
  if (len >= 3 && memcmp(p, "\xef\xbb\xbf", 3) == 0)
    t->pos = 3;
}

static char *stop(conf_text *t, conf_stop why) {
  t->stop = why;
  t->stop_line = t->line;
  return NULL;
}

char *conf_text_line(char *str, int num, void *stream) {
  conf_text *t = stream;
  if (t->stop != CONF_STOP_NONE || t->pos >= t->len || num < 3)
    return NULL;
  const char *p = t->p + t->pos;
  size_t avail = t->len - t->pos;
  const char *nl = memchr(p, '\n', avail);
  size_t n = nl ? (size_t)(nl - p) + 1 : avail; /* with its newline */
  size_t body = nl ? n - 1 : n;
  t->line++;
  if (memchr(p, '\0', body))
    return stop(t, CONF_STOP_NUL);
  if (body > 0 && p[body - 1] == '\r') /* CRLF */
    body--;
  if (memchr(p, '\r', body))
    return stop(t, CONF_STOP_CR);
  size_t lead = 0;
  while (lead < body && (p[lead] == ' ' || p[lead] == '\t'))
    lead++;
  /* the line as written, newline and NUL included, must fit: inih cuts a longer one */
  if (body + 2 > (size_t)num) {
    t->max_line = num - 2;
    return stop(t, CONF_STOP_LONG);
  }
  body -= lead;
  memcpy(str, p + lead, body);
  if (t->hash_comments)
    for (size_t i = 1; i < body; i++)
      if (str[i] == '#' && (str[i - 1] == ' ' || str[i - 1] == '\t')) {
        body = i;
        break;
      }
  str[body] = '\n';
  str[body + 1] = '\0';
  t->pos += n;
  return str;
}

int conf_text_error(const conf_text *t, const char *name, char *err, size_t cap) {
  switch (t->stop) {
  case CONF_STOP_NONE: return 0;
  case CONF_STOP_NUL:
    snprintf(err, cap, "%s:%d: a NUL byte: not a text file", name, t->stop_line);
    break;
  case CONF_STOP_CR:
    snprintf(err, cap,
             "%s:%d: a carriage return inside the line: lines end in LF or CRLF (a file with "
             "CR-only line ends reads as one line)",
             name, t->stop_line);
    break;
  case CONF_STOP_LONG:
    snprintf(err, cap, "%s:%d: line too long (at most %d characters)", name, t->stop_line,
             t->max_line);
    break;
  }
  return 1;
}

int conf_text_result(const conf_text *t, int rc, int msg_line, const char *msg, const char *name,
                     char *err, size_t cap) {
  if (rc == -2) {
    snprintf(err, cap, "%s: out of memory", name);
    return 1;
  }
  if (conf_text_error(t, name, err, cap))
    return 1;
  if (rc == 0)
    return 0;
  if (rc > 0 && rc == msg_line && msg)
    snprintf(err, cap, "%s:%d: %s", name, rc, msg);
  else if (rc > 0)
    snprintf(err, cap, "%s:%d: syntax error: expected [section], key = value or a comment", name,
             rc);
  else
    snprintf(err, cap, "%s: cannot parse", name);
  return 1;
}

int conf_text_slurp(FILE *f, size_t max, char **buf, size_t *len) {
  *buf = NULL;
  *len = 0;
  if (max >= SIZE_MAX / 2)
    return -2;
  /* grown as it fills, so a small file (every real one) costs a small buffer */
  size_t cap = max + 2 < 4096 ? max + 2 : 4096, n = 0;
  char *b = malloc(cap);
  if (!b)
    return -2;
  errno = 0;
  for (;;) {
    if (n + 1 == cap) { /* room for the NUL only */
      if (n > max)
        break;
      size_t ncap = cap * 2 < max + 2 ? cap * 2 : max + 2;
      char *nb = realloc(b, ncap);
      if (!nb) {
        free(b);
        return -2;
      }
      b = nb;
      cap = ncap;
    }
    size_t got = fread(b + n, 1, cap - 1 - n, f);
    if (got == 0)
      break;
    n += got;
  }
  if (ferror(f)) {
    int e = errno;
    free(b);
    errno = e;
    return -1;
  }
  if (n > max) {
    free(b);
    return 1;
  }
  b[n] = '\0';
  *buf = b;
  *len = n;
  return 0;
}
