/* SPDX-License-Identifier: MIT */
#include "settings.h"

#include <linkd/duration.h>

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char cli_origin_flag[] = "command line";

static const char *const keys[CLI_F__COUNT] = {
    [CLI_F_DEADLINE] = "deadline",
    [CLI_F_ATTEMPT_TIMEOUT] = "attempt-timeout",
    [CLI_F_CONNECT_TIMEOUT] = "connect-timeout",
    [CLI_F_DNS_TIMEOUT] = "dns-timeout",
    [CLI_F_TLS_TIMEOUT] = "tls-timeout",
    [CLI_F_WRITE_TIMEOUT] = "write-timeout",
    [CLI_F_FIRST_BYTE_TIMEOUT] = "first-byte-timeout",
    [CLI_F_IDLE_TIMEOUT] = "idle-timeout",
    [CLI_F_MAX_ATTEMPTS] = "max-attempts",
    [CLI_F_BACKOFF] = "backoff",
    [CLI_F_BASE] = "base",
    [CLI_F_MAX_DELAY] = "max-delay",
    [CLI_F_JITTER] = "jitter",
    [CLI_F_IDEMPOTENCY_KEY] = "idempotency-key",
    [CLI_F_RETRY_ON] = "retry-on",
    [CLI_F_BUDGET] = "budget",
    [CLI_F_CACERT] = "cacert",
    [CLI_F_CERT] = "cert",
    [CLI_F_KEY] = "key",
    [CLI_F_PASS] = "pass",
    [CLI_F_HEADER] = "header",
};

void cli_settings_init(cli_settings *s) { memset(s, 0, sizeof *s); }

/* A pass phrase is not left in freed memory. */
static void wipe_free(char *secret) {
  if (secret)
    explicit_bzero(secret, strlen(secret));
  free(secret);
}

void cli_settings_free(cli_settings *s) {
  for (size_t i = 0; i < s->nheaders; i++) {
    free(s->headers[i].name);
    free(s->headers[i].value);
  }
  free(s->headers);
  free(s->cacert);
  free(s->cert);
  free(s->key);
  wipe_free(s->pass);
  cli_settings_init(s);
}

int cli_settings_field(const char *key) {
  for (int f = 0; f < CLI_F__COUNT; f++)
    if (strcmp(keys[f], key) == 0)
      return f;
  return -1;
}

const char *cli_settings_key(cli_field f) { return (unsigned)f < CLI_F__COUNT ? keys[f] : "?"; }

static int parse_duration_min(const char *v, int64_t min, const char *min_text, int64_t *out,
                              char *err, size_t cap) {
  int64_t d;
  if (lk_duration_parse(v, &d, err, cap) != 0)
    return -1;
  if (d < min) {
    snprintf(err, cap, "'%s' is too short: must be %s", v, min_text);
    return -1;
  }
  *out = d;
  return 0;
}

/* A finite decimal number in [lo, hi]. */
static int parse_real(const char *v, double lo, double hi, double *out) {
  if (!*v || isspace((unsigned char)*v))
    return -1;
  char *end;
  errno = 0;
  double d = strtod(v, &end);
  if (errno || *end || !isfinite(d) || d < lo || d > hi)
    return -1;
  *out = d;
  return 0;
}

static int parse_backoff(cli_settings *s, const char *v, char *err, size_t cap) {
  char name[32];
  const char *colon = strchr(v, ':');
  size_t n = colon ? (size_t)(colon - v) : strlen(v);
  lk_backoff_kind k;
  if (n >= sizeof name)
    n = sizeof name - 1;
  memcpy(name, v, n);
  name[n] = '\0';
  if (lk_backoff_kind_parse(name, &k) != 0) {
    snprintf(err, cap, "'%s' is not a backoff: use fixed, linear or exponential[:MULTIPLIER]", v);
    return -1;
  }
  double mult = 2.0;
  if (colon) {
    if (k != LK_BACKOFF_EXPONENTIAL) {
      snprintf(err, cap, "'%s': only exponential takes a multiplier (e.g. exponential:1.5)", v);
      return -1;
    }
    if (parse_real(colon + 1, 1.0, 1000.0, &mult) != 0) {
      snprintf(err, cap, "'%s': the multiplier must be a number from 1 to 1000", v);
      return -1;
    }
  }
  s->backoff = k;
  s->multiplier = mult;
  return 0;
}

static int parse_jitter(cli_settings *s, const char *v, char *err, size_t cap) {
  char name[32];
  const char *colon = strchr(v, ':');
  size_t n = colon ? (size_t)(colon - v) : strlen(v);
  lk_jitter_kind k;
  if (n >= sizeof name)
    n = sizeof name - 1;
  memcpy(name, v, n);
  name[n] = '\0';
  if (lk_jitter_kind_parse(name, &k) != 0) {
    snprintf(err, cap,
             "'%s' is not a jitter: use none, symmetric[:RATIO], full, equal or decorrelated", v);
    return -1;
  }
  double ratio = 0.5;
  if (colon) {
    if (k != LK_JITTER_SYMMETRIC) {
      snprintf(err, cap, "'%s': only symmetric takes a ratio (e.g. symmetric:0.2)", v);
      return -1;
    }
    if (parse_real(colon + 1, 0.0, 1.0, &ratio) != 0) {
      snprintf(err, cap, "'%s': the ratio must be a number from 0 to 1", v);
      return -1;
    }
  }
  s->jitter = k;
  s->jitter_ratio = ratio;
  return 0;
}

static int parse_idem(cli_settings *s, const char *v, bool in_config, char *err, size_t cap) {
  lk_idem_mode m;
  if (strcasecmp(v, "key") != 0 && lk_idem_mode_parse(v, &m) == 0) {
    s->idem_mode = m;
    s->idem_key[0] = '\0';
    return 0;
  }
  if (in_config) {
    snprintf(err, cap,
             "'%s': a fixed key in a config file would be sent by every call; use auto, always or "
             "none (pass a key with --idempotency-key)",
             v);
    return -1;
  }
  size_t n = strlen(v);
  if (!lk_idem_key_valid(v, n)) {
    snprintf(err, cap,
             "'%s' is not a valid key: use auto, always, none, or 1 to %d visible ASCII "
             "characters",
             v, LK_IDEM_KEY_MAX - 1);
    return -1;
  }
  s->idem_mode = LK_IDEM_KEY;
  memcpy(s->idem_key, v, n + 1);
  return 0;
}

static bool is_tchar(unsigned char c) {
  return isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static int add_header(cli_settings *s, const char *v, bool in_config, char *err, size_t cap) {
  const char *sep = v + strcspn(v, ":;");
  const char *ne = sep;
  while (ne > v && (ne[-1] == ' ' || ne[-1] == '\t'))
    ne--;
  if (!*sep || ne == v) {
    snprintf(err, cap, "'%s' is not a header: use 'Name: value'", v);
    return -1;
  }
  for (const char *p = v; p < ne; p++)
    if (!is_tchar((unsigned char)*p)) {
      snprintf(err, cap, "'%.*s' is not a valid header name", (int)(ne - v), v);
      return -1;
    }
  const char *val = sep + 1;
  while (*val == ' ' || *val == '\t')
    val++;
  size_t vlen = strlen(val);
  while (vlen > 0 && (val[vlen - 1] == ' ' || val[vlen - 1] == '\t'))
    vlen--;
  if (*sep == ';' && vlen > 0) {
    snprintf(err, cap, "'%s': 'Name;' sends an empty header and takes no value", v);
    return -1;
  }
  /* RFC 9110 5.5: a field value is visible characters, obs-text (0x80-0xff), SP and HTAB. CR
   * and LF would inject a header; the other controls are sent raw by libcurl and left for each
   * server to interpret. */
  for (size_t i = 0; i < vlen; i++) {
    unsigned char c = (unsigned char)val[i];
    if (c == '\r' || c == '\n') {
      snprintf(err, cap, "header values may not contain CR or LF");
      return -1;
    }
    if ((c < 0x20 && c != '\t') || c == 0x7f) {
      snprintf(err, cap,
               "header '%.*s': the value holds the control character 0x%02x at byte %zu "
               "(RFC 9110 allows visible characters, spaces and tabs)",
               (int)(ne - v), v, c, i + 1);
      return -1;
    }
  }
  size_t nlen = (size_t)(ne - v);
  static const char *const owned[] = {"Linkd-Attempt", "Linkd-Deadline", "grpc-timeout"};
  for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++)
    if (strlen(owned[i]) == nlen && strncasecmp(owned[i], v, nlen) == 0) {
      snprintf(err, cap, "%s is set by linkd on every attempt", owned[i]);
      return -1;
    }
  /* An Idempotency-Key header is the call's key (lk_http_request_add_header): written in a
   * config file it would be sent by every call, and the server would take them all for one,
   * exactly what a literal idempotency-key value is refused for. Removing one ("Name:") is
   * harmless; one -H for one call is the way to pass a key. */
  bool removal = *sep == ':' && vlen == 0;
  if (in_config && !removal && nlen == strlen("Idempotency-Key") &&
      strncasecmp(v, "Idempotency-Key", nlen) == 0) {
    snprintf(err, cap,
             "a fixed Idempotency-Key in a config file would be sent by every call; use "
             "idempotency-key = auto or always (pass a key with -H or --idempotency-key)");
    return -1;
  }
  cli_header *h = realloc(s->headers, (s->nheaders + 1) * sizeof *h);
  if (!h)
    return -2;
  s->headers = h;
  h = &s->headers[s->nheaders];
  h->name = strndup(v, nlen);
  /* "Name:" with nothing after it removes an inherited header; "Name;" sends an empty one. */
  h->value = (*sep == ':' && vlen == 0) ? NULL : strndup(val, vlen);
  if (!h->name || (!h->value && !(*sep == ':' && vlen == 0))) {
    free(h->name);
    free(h->value);
    return -2;
  }
  s->nheaders++;
  return 0;
}

/* A file name (a CA bundle, a client certificate or key): a path as given (relative to the
 * working directory, as curl's). Checked here as the library checks it, so a bad one is named
 * with its flag or config line. */
static int parse_path(char **dst, const char *what, const char *v, char *err, size_t cap) {
  if (!*v || strpbrk(v, "\r\n")) {
    snprintf(err, cap, "a %s must be a non-empty path without CR or LF", what);
    return -1;
  }
  char *copy = strdup(v);
  if (!copy)
    return -2;
  free(*dst);
  *dst = copy;
  return 0;
}

/* The member holding a file-name or pass-phrase field (cacert, cert, key, pass). */
static char **string_field(cli_settings *s, cli_field f) {
  return f == CLI_F_CACERT ? &s->cacert
         : f == CLI_F_CERT ? &s->cert
         : f == CLI_F_KEY  ? &s->key
                           : &s->pass;
}

/* curl's --cert FILE[:PASSPHRASE]: the first colon not escaped by a backslash ends the file
 * name; "\:" is a colon of the name, "\\" a backslash, any other backslash is kept. A pass
 * phrase given so replaces one given before (--pass, or an earlier layer's). Returns 0, 1 when a
 * pass phrase came with the name, -1 or -2 (no memory). */
static int parse_cert(cli_settings *s, const char *v, char *err, size_t cap) {
  size_t n = strlen(v);
  char *name = malloc(n + 1);
  if (!name)
    return -2;
  size_t w = 0;
  const char *pass = NULL;
  for (size_t i = 0; i < n; i++) {
    if (v[i] == '\\' && (v[i + 1] == ':' || v[i + 1] == '\\')) {
      name[w++] = v[++i];
    } else if (v[i] == ':') {
      pass = v + i + 1;
      break;
    } else {
      name[w++] = v[i];
    }
  }
  name[w] = '\0';
  int rc = parse_path(&s->cert, "certificate file", name, err, cap);
  free(name);
  if (rc == 0 && pass) {
    char *copy = strdup(pass);
    if (!copy)
      return -2;
    wipe_free(s->pass);
    s->pass = copy;
    return 1; /* the pass phrase is given too */
  }
  return rc;
}

int cli_settings_set(cli_settings *s, const char *key, const char *value, const char *origin,
                     bool in_config, char *err, size_t cap) {
  int f = cli_settings_field(key);
  if (f < 0) {
    snprintf(err, cap, "unknown setting '%s'", key);
    return CLI_SET_UNKNOWN_KEY;
  }
  int rc = 0;
  long long n;
  char *end;
  switch ((cli_field)f) {
  case CLI_F_DEADLINE:
    rc = parse_duration_min(value, 1, "more than 0", &s->deadline, err, cap);
    break;
  case CLI_F_ATTEMPT_TIMEOUT:
    rc = parse_duration_min(value, 1, "more than 0", &s->attempt_timeout, err, cap);
    break;
  case CLI_F_CONNECT_TIMEOUT:
    rc = parse_duration_min(value, 0, "0 or more", &s->connect_timeout, err, cap);
    break;
  case CLI_F_DNS_TIMEOUT:
    rc = parse_duration_min(value, 0, "0 or more", &s->dns_timeout, err, cap);
    break;
  case CLI_F_TLS_TIMEOUT:
    rc = parse_duration_min(value, 0, "0 or more", &s->tls_timeout, err, cap);
    break;
  case CLI_F_WRITE_TIMEOUT:
    rc = parse_duration_min(value, 0, "0 or more", &s->write_timeout, err, cap);
    break;
  case CLI_F_FIRST_BYTE_TIMEOUT:
    rc = parse_duration_min(value, 0, "0 or more", &s->first_byte_timeout, err, cap);
    break;
  case CLI_F_IDLE_TIMEOUT:
    rc = parse_duration_min(value, 0, "0 or more", &s->idle_timeout, err, cap);
    break;
  case CLI_F_BASE:
    rc = parse_duration_min(value, LK_MS(1), "at least 1ms", &s->base, err, cap);
    break;
  case CLI_F_MAX_DELAY:
    rc = parse_duration_min(value, LK_MS(1), "at least 1ms", &s->max_delay, err, cap);
    break;
  case CLI_F_MAX_ATTEMPTS:
    errno = 0;
    n = strtoll(value, &end, 10);
    if (!isdigit((unsigned char)*value) || *end || errno || n < 1 || n > 1000) {
      snprintf(err, cap, "'%s' is not a number of attempts from 1 to 1000", value);
      rc = -1;
    } else {
      s->max_attempts = (int)n;
    }
    break;
  case CLI_F_BACKOFF: rc = parse_backoff(s, value, err, cap); break;
  case CLI_F_JITTER: rc = parse_jitter(s, value, err, cap); break;
  case CLI_F_IDEMPOTENCY_KEY: rc = parse_idem(s, value, in_config, err, cap); break;
  case CLI_F_RETRY_ON: {
    cli_retry_edit e;
    rc = cli_retry_on_parse(value, &e, err, cap);
    if (rc == 0) {
      /* Repeated flags build on each other: "--retry-on -408 --retry-on +404"... */
      if (s->set & CLI_BIT(CLI_F_RETRY_ON))
        cli_retry_edit_then(&s->retry_on, &e);
      else
        s->retry_on = e;
    }
    break;
  }
  case CLI_F_BUDGET: rc = cli_budget_parse(value, &s->budget, err, cap); break;
  case CLI_F_CACERT:
  case CLI_F_CERT:
  case CLI_F_KEY:
  case CLI_F_PASS:
    if (f == CLI_F_CERT) {
      rc = parse_cert(s, value, err, cap);
    } else if (f != CLI_F_PASS) {
      rc = parse_path(string_field(s, (cli_field)f), f == CLI_F_CACERT ? "CA file" : "key file",
                      value, err, cap);
    } else {
      wipe_free(s->pass);
      s->pass = strdup(value);
      rc = s->pass ? 0 : -2;
    }
    if (rc == -2) {
      snprintf(err, cap, "out of memory");
      return CLI_SET_NOMEM;
    }
    if (rc == 1) {
      s->set |= CLI_BIT(CLI_F_PASS);
      s->origin[CLI_F_PASS] = origin;
      rc = 0;
    }
    break;
  case CLI_F_HEADER:
    rc = add_header(s, value, in_config, err, cap);
    if (rc == -2) {
      snprintf(err, cap, "out of memory");
      return CLI_SET_NOMEM;
    }
    break;
  case CLI_F__COUNT: break;
  }
  if (rc != 0)
    return CLI_SET_BAD_VALUE;
  s->set |= CLI_BIT(f);
  s->origin[f] = origin;
  return CLI_SET_OK;
}

int cli_settings_merge(cli_settings *dst, const cli_settings *top) {
  for (int f = 0; f < CLI_F__COUNT; f++) {
    if (!(top->set & CLI_BIT(f)))
      continue;
    switch ((cli_field)f) {
    case CLI_F_DEADLINE: dst->deadline = top->deadline; break;
    case CLI_F_ATTEMPT_TIMEOUT: dst->attempt_timeout = top->attempt_timeout; break;
    case CLI_F_CONNECT_TIMEOUT: dst->connect_timeout = top->connect_timeout; break;
    case CLI_F_DNS_TIMEOUT: dst->dns_timeout = top->dns_timeout; break;
    case CLI_F_TLS_TIMEOUT: dst->tls_timeout = top->tls_timeout; break;
    case CLI_F_WRITE_TIMEOUT: dst->write_timeout = top->write_timeout; break;
    case CLI_F_FIRST_BYTE_TIMEOUT: dst->first_byte_timeout = top->first_byte_timeout; break;
    case CLI_F_IDLE_TIMEOUT: dst->idle_timeout = top->idle_timeout; break;
    case CLI_F_MAX_ATTEMPTS: dst->max_attempts = top->max_attempts; break;
    case CLI_F_BACKOFF:
      dst->backoff = top->backoff;
      dst->multiplier = top->multiplier;
      break;
    case CLI_F_BASE: dst->base = top->base; break;
    case CLI_F_MAX_DELAY: dst->max_delay = top->max_delay; break;
    case CLI_F_JITTER:
      dst->jitter = top->jitter;
      dst->jitter_ratio = top->jitter_ratio;
      break;
    case CLI_F_IDEMPOTENCY_KEY:
      dst->idem_mode = top->idem_mode;
      memcpy(dst->idem_key, top->idem_key, sizeof dst->idem_key);
      break;
    case CLI_F_RETRY_ON:
      if (dst->set & CLI_BIT(CLI_F_RETRY_ON))
        cli_retry_edit_then(&dst->retry_on, &top->retry_on);
      else
        dst->retry_on = top->retry_on;
      break;
    case CLI_F_BUDGET: dst->budget = top->budget; break;
    case CLI_F_CACERT:
    case CLI_F_CERT:
    case CLI_F_KEY:
    case CLI_F_PASS: {
      char *from = *string_field((cli_settings *)top, (cli_field)f); /* only read */
      char **to = string_field(dst, (cli_field)f);
      char *copy = strdup(from);
      if (!copy)
        return -1;
      if (f == CLI_F_PASS)
        wipe_free(*to);
      else
        free(*to);
      *to = copy;
      break;
    }
    case CLI_F_HEADER: {
      /* Drop every inherited header named in `top`, then append top's (removals vanish). */
      size_t w = 0;
      for (size_t i = 0; i < dst->nheaders; i++) {
        bool named = false;
        for (size_t j = 0; j < top->nheaders && !named; j++)
          named = strcasecmp(dst->headers[i].name, top->headers[j].name) == 0;
        if (named) {
          free(dst->headers[i].name);
          free(dst->headers[i].value);
        } else {
          dst->headers[w++] = dst->headers[i];
        }
      }
      dst->nheaders = w;
      for (size_t j = 0; j < top->nheaders; j++) {
        if (!top->headers[j].value)
          continue;
        cli_header *h = realloc(dst->headers, (dst->nheaders + 1) * sizeof *h);
        if (!h)
          return -1;
        dst->headers = h;
        h = &dst->headers[dst->nheaders];
        h->name = strdup(top->headers[j].name);
        h->value = strdup(top->headers[j].value);
        if (!h->name || !h->value) {
          free(h->name);
          free(h->value);
          return -1;
        }
        dst->nheaders++;
      }
      break;
    }
    case CLI_F__COUNT: break;
    }
    dst->set |= CLI_BIT(f);
    dst->origin[f] = top->origin[f];
  }
  return 0;
}
