/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "args.h"
#include "conf_text.h"

#include <ini.h>

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct load_ctx {
  cli_config *c;
  conf_text t;     /* the file's text and the line inih is at: the current one in the handler */
  int err_line;    /* line of the first handler error */
  char msg[512];   /* its message */
  size_t *index;   /* open-addressing hash of section names: index + 1 into c->sections, 0 free */
  size_t index_cap; /* a power of two, at least twice c->nsections */
  size_t sections_cap;
  size_t labels_cap;
  bool nomem;
} load_ctx;

__attribute__((format(printf, 2, 3))) static void fail(load_ctx *x, const char *fmt, ...) {
  if (x->err_line)
    return; /* keep the first: inih returns the first error's line */
  x->err_line = x->t.line;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(x->msg, sizeof x->msg, fmt, ap);
  va_end(ap);
}

/* Splits a [host "NAME"] section name into host and port. An IPv6 address is written without
 * brackets (INI sections end at the first ']') and matches any port. 0, -1 with a message, or
 * -2 (no memory). */
static int parse_host_section(const char *sec, char **host, int *port, char *err, size_t cap) {
  const char *p = sec + 4; /* after "host" */
  if (*p != ' ' && *p != '\t')
    goto bad;
  while (*p == ' ' || *p == '\t')
    p++;
  if (*p != '"')
    goto bad;
  const char *name = ++p;
  if (*name == '[') {
    snprintf(err, cap, "write IPv6 addresses without brackets: [host \"::1\"] (any port)");
    return -1;
  }
  const char *q = strchr(name, '"');
  if (!q || q == name || q[1] != '\0')
    goto bad;
  size_t n = (size_t)(q - name);
  const char *colon = memchr(name, ':', n);
  /* Two colons or more: an IPv6 address, no port. */
  if (colon && memchr(colon + 1, ':', n - (size_t)(colon + 1 - name)))
    colon = NULL;
  size_t hlen = colon ? (size_t)(colon - name) : n;
  if (hlen == 0)
    goto bad;
  for (size_t i = 0; i < hlen; i++)
    if (isspace((unsigned char)name[i]) || name[i] == '/' || name[i] == '@' || name[i] == '[' ||
        name[i] == ']')
      goto bad;
  *port = -1;
  if (colon) {
    const char *ps = colon + 1;
    size_t plen = n - hlen - 1;
    long v = 0;
    if (plen == 0 || plen > 5)
      goto bad_port;
    for (size_t i = 0; i < plen; i++) {
      if (!isdigit((unsigned char)ps[i]))
        goto bad_port;
      v = v * 10 + (ps[i] - '0');
    }
    if (v < 1 || v > 65535)
      goto bad_port;
    *port = (int)v;
  }
  *host = strndup(name, hlen);
  if (!*host)
    return -2;
  for (char *h = *host; *h; h++)
    *h = (char)tolower((unsigned char)*h);
  return 0;
bad_port:
  snprintf(err, cap, "bad port in section [%s] (use 1 to 65535)", sec);
  return -1;
bad:
  snprintf(err, cap, "bad section [%s]: use [defaults] or [host \"NAME\"] / [host \"NAME:PORT\"]",
           sec);
  return -1;
}

/* Whether a section's host names the URL's host (libcurl writes IPv6 in brackets). */
static bool host_match(const char *section_host, const char *url_host) {
  size_t n = strlen(url_host);
  if (n >= 2 && url_host[0] == '[' && url_host[n - 1] == ']')
    return strlen(section_host) == n - 2 && strncasecmp(section_host, url_host + 1, n - 2) == 0;
  return strcasecmp(section_host, url_host) == 0;
}

/* FNV-1a: section names are short and chosen by the file's author, not by an attacker who
 * could aim at collisions (and a collision only costs a comparison). */
static size_t name_hash(const char *s) {
  uint64_t h = 14695981039346656037u;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211u;
  return (size_t)h;
}

/* The slot of `sec` in the index: where it is, or the free slot where it belongs. */
static size_t index_slot(const load_ctx *x, const char *sec) {
  size_t mask = x->index_cap - 1;
  for (size_t i = name_hash(sec) & mask;; i = (i + 1) & mask)
    if (!x->index[i] || strcmp(x->c->sections[x->index[i] - 1].name, sec) == 0)
      return i;
}

/* Makes room for one more section in the index (load factor at most 1/2). 0 or -1. */
static int index_grow(load_ctx *x) {
  if ((x->c->nsections + 1) * 2 <= x->index_cap)
    return 0;
  size_t cap = x->index_cap ? x->index_cap * 2 : 16;
  size_t *old = x->index, old_cap = x->index_cap;
  x->index = calloc(cap, sizeof *x->index);
  if (!x->index) {
    x->index = old;
    return -1;
  }
  x->index_cap = cap;
  for (size_t i = 0; i < old_cap; i++)
    if (old[i])
      x->index[index_slot(x, x->c->sections[old[i] - 1].name)] = old[i];
  free(old);
  return 0;
}

/* Grows *arr (of *cap elements of `size`) geometrically to hold n + 1. 0 or -1. */
static int reserve(void **arr, size_t *cap, size_t n, size_t size) {
  if (n < *cap)
    return 0;
  size_t c = *cap ? *cap * 2 : 8;
  if (c > SIZE_MAX / size)
    return -1;
  void *p = realloc(*arr, c * size);
  if (!p)
    return -1;
  *arr = p;
  *cap = c;
  return 0;
}

/* The section named `sec`, found in the index (so a file of many sections loads in linear
 * time), or a new one. */
static cli_config_section *section_for(load_ctx *x, const char *sec) {
  cli_config *c = x->c;
  /* inih hands the same section to every entry in a row: the common case needs no lookup. */
  if (c->nsections && strcmp(c->sections[c->nsections - 1].name, sec) == 0)
    return &c->sections[c->nsections - 1];
  if (x->index_cap) {
    size_t i = x->index[index_slot(x, sec)];
    if (i)
      return &c->sections[i - 1];
  }
  if (!*sec) {
    fail(x, "settings must follow a section header: [defaults] or [host \"NAME\"]");
    return NULL;
  }
  char *host = NULL;
  int port = -1;
  if (strcmp(sec, "defaults") != 0) {
    char m[256];
    int rc = -1;
    if (strncmp(sec, "host", 4) == 0)
      rc = parse_host_section(sec, &host, &port, m, sizeof m);
    else
      snprintf(m, sizeof m, "unknown section [%s]: use [defaults] or [host \"NAME\"]", sec);
    if (rc == -2)
      x->nomem = true;
    if (rc != 0) {
      fail(x, "%s", m);
      return NULL;
    }
  }
  if (index_grow(x) != 0 ||
      reserve((void **)&c->sections, &x->sections_cap, c->nsections, sizeof *c->sections) != 0) {
    free(host);
    x->nomem = true;
    return NULL;
  }
  cli_config_section *s = &c->sections[c->nsections];
  memset(s, 0, sizeof *s);
  s->name = strdup(sec);
  if (!s->name) {
    free(host);
    x->nomem = true;
    return NULL;
  }
  s->host = host;
  s->port = port;
  s->line = x->t.line;
  cli_settings_init(&s->s);
  x->index[index_slot(x, sec)] = ++c->nsections;
  return s;
}

static const char *new_label(load_ctx *x) {
  cli_config *c = x->c;
  if (reserve((void **)&c->labels, &x->labels_cap, c->nlabels, sizeof *c->labels) != 0)
    return NULL;
  char **l = c->labels;
  size_t n = strlen(c->path) + 16;
  char *s = malloc(n);
  if (!s)
    return NULL;
  snprintf(s, n, "%s:%d", c->path, x->t.line);
  l[c->nlabels++] = s;
  return s;
}

static int on_entry(void *user, const char *section, const char *name, const char *value) {
  load_ctx *x = user;
  if (x->nomem)
    return 0;
  cli_config_section *s = section_for(x, section);
  if (!s)
    return 0;
  bool res = strcmp(name, "resolve") == 0;
  if (res || strcmp(name, "connect-to") == 0) {
    /* the CLI's own keys, repeatable as header is, checked as the flags are */
    const char *why = NULL;
    if ((res ? lk_http_resolve_check(value, &why) : lk_http_connect_to_check(value, &why)) !=
        LK_OK) {
      fail(x, "%s: '%.100s': %s", name, value, why);
      return 0;
    }
    const char *label = new_label(x);
    char *copy = label ? strdup(value) : NULL;
    if (!copy || cli_entries_add(res ? &s->resolve : &s->connect_to, copy, label) != 0) {
      free(copy);
      x->nomem = true;
      return 0;
    }
    return 1;
  }
  int f = cli_settings_field(name);
  if (f < 0) {
    char known[300] = "";
    for (int k = 0; k < CLI_F__COUNT; k++) {
      size_t off = strlen(known);
      snprintf(known + off, sizeof known - off, "%s%s", k ? ", " : "",
               cli_settings_key((cli_field)k));
    }
    size_t off = strlen(known);
    snprintf(known + off, sizeof known - off, ", resolve, connect-to");
    fail(x, "unknown key '%s' (known keys: %s)", name, known);
    return 0;
  }
  if (f != CLI_F_HEADER && s->key_line[f]) {
    fail(x, "'%s' is already set in this section on line %d", name, s->key_line[f]);
    return 0;
  }
  if (value[0] == ';') { /* "key =;x" would be ";x", "key = ;x" a comment */
    fail(x, "%s: '%.40s': a value may not start with ';' (after a space it starts a comment)",
         name, value);
    return 0;
  }
  const char *label = new_label(x);
  if (!label) {
    x->nomem = true;
    return 0;
  }
  char m[384];
  int rc = cli_settings_set(&s->s, name, value, label, true, m, sizeof m);
  if (rc == CLI_SET_NOMEM) {
    x->nomem = true;
    return 0;
  }
  const cli_header *h =
      rc == CLI_SET_OK && f == CLI_F_HEADER ? &s->s.headers[s->s.nheaders - 1] : NULL;
  if (h && h->value && cli_header_check(h->name, h->value, m, sizeof m) != 0)
    rc = CLI_SET_BAD_VALUE; /* what the request would refuse, told with the line */
  if (rc != CLI_SET_OK) {
    fail(x, "%s: %s", name, m);
    return 0;
  }
  s->key_line[f] = x->t.line;
  return 1;
}

int cli_config_load_stream(cli_config *c, FILE *f, const char *name, char *err, size_t cap) {
  memset(c, 0, sizeof *c);
  c->path = strdup(name);
  if (!c->path) {
    snprintf(err, cap, "%s: out of memory", name);
    return -1;
  }
  char *text;
  size_t len;
  int rrc = conf_text_slurp(f, CLI_CONFIG_MAX_BYTES, &text, &len);
  if (rrc == -2) {
    snprintf(err, cap, "%s: out of memory", name);
    return -1;
  }
  if (rrc == -1) {
    snprintf(err, cap, "%s: cannot read: %s", name, errno ? strerror(errno) : "read error");
    return -1;
  }
  if (rrc == 1) {
    snprintf(err, cap, "%s: larger than %d bytes: not a config file", name, CLI_CONFIG_MAX_BYTES);
    return -1;
  }
  load_ctx x = {.c = c};
  conf_text_init(&x.t, text, len, false);
  int rc = ini_parse_stream(conf_text_line, &x.t, on_entry, &x);
  free(text);
  free(x.index);
  if (conf_text_result(&x.t, x.nomem ? -2 : rc, x.err_line, x.msg, name, err, cap))
    return -1;
  return 0;
}

int cli_config_load(cli_config *c, const char *path, char *err, size_t cap) {
  memset(c, 0, sizeof *c);
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(err, cap, "%s: cannot open: %s", path, strerror(errno));
    return -1;
  }
  int rc = cli_config_load_stream(c, f, path, err, cap);
  fclose(f);
  return rc;
}

/* The sections that apply to host:port, in order: [defaults], [host "HOST"], [host
 * "HOST:PORT"] (at most one of each). Returns how many. */
static size_t sections_for(const cli_config *c, const char *host, int port,
                           const cli_config_section *out[3]) {
  size_t n = 0;
  /* Three passes fix the order: defaults, host, host:port. */
  for (int pass = 0; pass < 3; pass++) {
    for (size_t i = 0; i < c->nsections; i++) {
      const cli_config_section *s = &c->sections[i];
      bool match;
      if (pass == 0)
        match = s->host == NULL;
      else
        match = s->host && host && host_match(s->host, host) &&
                (pass == 1 ? s->port < 0 : s->port >= 0 && s->port == port);
      if (!match)
        continue;
      out[n++] = s;
      break;
    }
  }
  return n;
}

int cli_config_apply(const cli_config *c, const char *host, int port, cli_settings *dst,
                     const char *matched[3], size_t *nmatched) {
  const cli_config_section *s[3];
  *nmatched = sections_for(c, host, port, s);
  for (size_t i = 0; i < *nmatched; i++) {
    if (cli_settings_merge(dst, &s[i]->s) != 0)
      return -1;
    matched[i] = s[i]->name;
  }
  return 0;
}

int cli_config_entries(const cli_config *c, const char *host, int port, cli_entries *resolve,
                       cli_entries *connect_to) {
  const cli_config_section *s[3];
  size_t n = sections_for(c, host, port, s);
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < s[i]->resolve.n; j++)
      if (cli_entries_add(resolve, s[i]->resolve.v[j], s[i]->resolve.origin[j]) != 0)
        return -1;
  for (size_t i = n; i-- > 0;)
    for (size_t j = 0; j < s[i]->connect_to.n; j++)
      if (cli_entries_add(connect_to, s[i]->connect_to.v[j], s[i]->connect_to.origin[j]) != 0)
        return -1;
  return 0;
}

void cli_config_free(cli_config *c) {
  for (size_t i = 0; i < c->nsections; i++) {
    free(c->sections[i].name);
    free(c->sections[i].host);
    cli_settings_free(&c->sections[i].s);
    for (size_t j = 0; j < c->sections[i].resolve.n; j++)
      free((char *)c->sections[i].resolve.v[j]);
    for (size_t j = 0; j < c->sections[i].connect_to.n; j++)
      free((char *)c->sections[i].connect_to.v[j]);
    cli_entries_free(&c->sections[i].resolve);
    cli_entries_free(&c->sections[i].connect_to);
  }
  free(c->sections);
  for (size_t i = 0; i < c->nlabels; i++)
    free(c->labels[i]);
  free(c->labels);
  free(c->path);
  memset(c, 0, sizeof *c);
}

int cli_config_path(const char *flag, char *buf, size_t cap, bool *required) {
  *required = true;
  const char *env = getenv("LINKD_CONFIG");
  const char *p = flag ? flag : (env && *env ? env : NULL);
  if (p) {
    if ((size_t)snprintf(buf, cap, "%s", p) >= cap)
      return -1;
    return 0;
  }
  *required = false;
  const char *xdg = getenv("XDG_CONFIG_HOME");
  const char *home = getenv("HOME");
  int n;
  if (xdg && xdg[0] == '/')
    n = snprintf(buf, cap, "%s/linkd/linkd.conf", xdg);
  else if (home && *home)
    n = snprintf(buf, cap, "%s/.config/linkd/linkd.conf", home);
  else
    return -1;
  return n > 0 && (size_t)n < cap ? 0 : -1;
}
