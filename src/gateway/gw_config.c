/* SPDX-License-Identifier: MIT */
/* Loading `linkd serve`'s configuration: INI through libinih into raw sections, then every
 * section interpreted and validated (routes last, so they may name a cluster defined below). */
#include "gw_config.h"
#include "gw_internal.h"

#include "conf_size.h"
#include "conf_text.h"
#include "policy.h"
#include "settings.h"

#include <linkd/duration.h>
#include <linkd/error.h>

#include <ini.h>

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ============================================================================================
 * Raw sections
 * ========================================================================================== */

typedef struct raw_entry {
  char *key;
  char *value;
  int line;
} raw_entry;

typedef struct raw_section {
  char *name; /* as written between the brackets */
  int line;
  raw_entry *e;
  size_t n, cap;
} raw_section;

typedef struct load_ctx {
  const char *name; /* the file's name in messages */
  conf_text t;      /* the text and the line inih is at (t.line) */
  raw_section *s;
  size_t ns, cap;
  int err_line;
  char msg[512];
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

static int grow(void **arr, size_t *cap, size_t n, size_t size) {
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

/* The longest line inih reads: INI_MAX_LINE holds the newline and the NUL too. */
#define LINE_MAX_CHARS (INI_MAX_LINE - 2)

/* inih's line reader (conf_text.h, as the CLI's and libraryd's), which also records every
 * section header with its line, since inih reports a section only through its entries and an
 * empty [admin] must still count. */
static char *read_line(char *str, int num, void *stream) {
  load_ctx *x = stream;
  if (!conf_text_line(str, num, &x->t))
    return NULL;
  if (str[0] == '[') {
    char *end = strchr(str, ']');
    if (end) {
      if (grow((void **)&x->s, &x->cap, x->ns, sizeof *x->s) != 0) {
        x->nomem = true;
        return NULL;
      }
      raw_section *s = &x->s[x->ns];
      memset(s, 0, sizeof *s);
      s->name = strndup(str + 1, (size_t)(end - str - 1));
      s->line = x->t.line;
      if (!s->name) {
        x->nomem = true;
        return NULL;
      }
      x->ns++;
    }
  }
  return str;
}

static int on_entry(void *user, const char *section, const char *name, const char *value) {
  load_ctx *x = user;
  if (x->nomem)
    return 0;
  if (!x->ns || !*section) {
    fail(x, "%s: settings must follow a section header such as [listen] or [route NAME]", name);
    return 0;
  }
  if (value[0] == ';') {
    /* "key =;x" reads as ";x" but "key = ;x" as a comment: refused, so that the file means the
     * same however it is spaced, and what --check prints loads again to the same settings. */
    fail(x, "%s: '%.40s': a value may not start with ';' (after a space it starts a comment)",
         name, value);
    return 0;
  }
  /* --check and GET /config write each setting as "key = value", and what they write must
   * load again: a line that fits only written tighter ("key=value") is refused here, at its
   * line. A header is written as "Name: value" and checked where it is parsed (builder_set). */
  size_t written = strlen(name) + 3 + strlen(value);
  if (written > LINE_MAX_CHARS && strcmp(name, "header") != 0 && strcmp(name, "next.header") != 0) {
    fail(x,
         "%s: written out as '%s = VALUE' (as --check and GET /config write it) the line is "
         "%zu characters, more than a line holds (%d)",
         name, name, written, LINE_MAX_CHARS);
    return 0;
  }
  raw_section *s = &x->s[x->ns - 1];
  if (grow((void **)&s->e, &s->cap, s->n, sizeof *s->e) != 0) {
    x->nomem = true;
    return 0;
  }
  raw_entry *e = &s->e[s->n];
  e->key = strdup(name);
  e->value = strdup(value);
  e->line = x->t.line;
  if (!e->key || !e->value) {
    free(e->key);
    free(e->value);
    x->nomem = true;
    return 0;
  }
  s->n++;
  return 1;
}

static void raw_free(load_ctx *x) {
  for (size_t i = 0; i < x->ns; i++) {
    for (size_t j = 0; j < x->s[i].n; j++) {
      free(x->s[i].e[j].key);
      free(x->s[i].e[j].value);
    }
    free(x->s[i].e);
    free(x->s[i].name);
  }
  free(x->s);
}

/* ============================================================================================
 * Value parsers (messages: no key, no trailing period)
 * ========================================================================================== */

typedef struct perr {
  char msg[400];
  int line;
  const char *key;     /* NULL: a section-level message */
  const char *section; /* the section being read, for section-level messages */
} perr;

__attribute__((format(printf, 4, 5))) static int bad(perr *e, int line, const char *key,
                                                     const char *fmt, ...) {
  e->line = line;
  e->key = key;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  return -1;
}

static bool is_name_char(char c) {
  return isalnum((unsigned char)c) || c == '_' || c == '-' || c == '.';
}

/* host:port, [v6]:port. `literal`: the host must be an IPv4 address or a bracketed IPv6 one (a
 * listener binds it: a name is not resolved, and would only fail at start). */
static int parse_addr(const char *v, int min_port, bool literal, lk_gw_addr *a, char *m,
                      size_t cap) {
  const char *host = v, *colon;
  size_t hlen;
  if (*v == '[') {
    const char *close = strchr(v, ']');
    if (!close || close[1] != ':')
      goto bad;
    host = v + 1;
    hlen = (size_t)(close - host);
    colon = close + 1;
  } else {
    colon = strrchr(v, ':');
    if (!colon || memchr(v, ':', (size_t)(colon - v)))
      goto bad; /* no port, or an IPv6 address without brackets */
    hlen = (size_t)(colon - v);
  }
  if (hlen == 0 || hlen >= LK_GW_HOST_MAX)
    goto bad;
  for (size_t i = 0; i < hlen; i++) {
    char c = host[i];
    if (!(isalnum((unsigned char)c) || c == '.' || c == '-' || c == '_' || (*v == '[' && c == ':')))
      goto bad;
  }
  const char *ps = colon + 1;
  size_t plen = strlen(ps);
  if (plen == 0 || plen > 5)
    goto bad;
  long port = 0;
  for (size_t i = 0; i < plen; i++) {
    if (!isdigit((unsigned char)ps[i]))
      goto bad;
    port = port * 10 + (ps[i] - '0');
  }
  if (port < min_port || port > 65535) {
    snprintf(m, cap, "'%s': the port must be %d to 65535", v, min_port);
    return -1;
  }
  memcpy(a->host, host, hlen);
  a->host[hlen] = '\0';
  unsigned char bin[sizeof(struct in6_addr)];
  if (literal && inet_pton(*v == '[' ? AF_INET6 : AF_INET, a->host, bin) != 1) {
    snprintf(m, cap,
             "'%s': the host must be an IP address, A.B.C.D:PORT or [IPV6]:PORT (a listener "
             "binds an address; a name is not resolved)",
             v);
    return -1;
  }
  /* A name's last label is never all digits (RFC 3696 section 2), so such a host is meant as an
   * IPv4 address: one that is not a valid A.B.C.D (256.1.1.1, or 1.2.3, which the resolver's
   * inet_aton would read as 1.2.0.3) is refused here, not sent to DNS at every connect. */
  const char *last = strrchr(a->host, '.');
  last = last ? last + 1 : a->host;
  if (!literal && *v != '[' && *last && strspn(last, "0123456789") == strlen(last) &&
      inet_pton(AF_INET, a->host, bin) != 1) {
    snprintf(m, cap,
             "'%s': the host ends in a number but is not an IPv4 address (A.B.C.D, each 0 to "
             "255)",
             v);
    return -1;
  }
  a->port = (int)port;
  return 0;
bad:
  snprintf(m, cap, "'%s' is not an address: use HOST:PORT or [IPV6]:PORT", v);
  return -1;
}

static int parse_int(const char *v, long long lo, long long hi, long long *out) {
  if (!isdigit((unsigned char)*v))
    return -1;
  errno = 0;
  char *end;
  long long n = strtoll(v, &end, 10);
  if (errno || *end || n < lo || n > hi)
    return -1;
  *out = n;
  return 0;
}

/* A percentage, "12.5" or "12.5%", in [lo, hi]. */
static int parse_percent(const char *v, double lo, double hi, double *out) {
  char buf[64];
  size_t n = strlen(v);
  if (n == 0 || n >= sizeof buf)
    return -1;
  memcpy(buf, v, n + 1);
  if (buf[n - 1] == '%')
    buf[--n] = '\0';
  if (!n || !(isdigit((unsigned char)buf[0]) || buf[0] == '.'))
    return -1;
  errno = 0;
  char *end;
  double d = strtod(buf, &end);
  if (errno || *end || !isfinite(d) || d < lo || d > hi)
    return -1;
  *out = d;
  return 0;
}

static int parse_bool(const char *v, bool *out) {
  static const char *const t[] = {"true", "yes", "on", "1"}, *const f[] = {"false", "no", "off",
                                                                          "0"};
  for (size_t i = 0; i < 4; i++) {
    if (strcasecmp(v, t[i]) == 0) {
      *out = true;
      return 0;
    }
    if (strcasecmp(v, f[i]) == 0) {
      *out = false;
      return 0;
    }
  }
  return -1;
}

static int parse_dur(const char *v, int64_t min, int64_t *out, char *m, size_t cap) {
  int64_t d;
  if (lk_duration_parse(v, &d, m, cap) != 0)
    return -1;
  if (d < min || d > LK_HTTP_DURATION_MAX) {
    char a[32];
    snprintf(m, cap, "'%s' is out of range: %s to 100 days", v,
             min == 0 ? "0" : min == 1 ? "more than 0" : lk_gw_dur_exact(min, a, sizeof a));
    return -1;
  }
  *out = d;
  return 0;
}

char *lk_gw_dur_exact(int64_t ns, char *buf, size_t cap) {
  static const struct {
    int64_t n;
    const char *u;
  } units[] = {{INT64_C(3600000000000), "h"}, {INT64_C(60000000000), "m"}, {1000000000, "s"},
               {1000000, "ms"},               {1000, "us"}};
  if (ns == 0) {
    snprintf(buf, cap, "0s");
    return buf;
  }
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (ns % units[i].n == 0) {
      snprintf(buf, cap, "%" PRId64 "%s", ns / units[i].n, units[i].u);
      return buf;
    }
  snprintf(buf, cap, "%" PRId64 "ns", ns);
  return buf;
}

/* ============================================================================================
 * Protection specs: breaker, limiter, bulkhead
 * ========================================================================================== */

/* breaker = default | none | ITEM[:ITEM...], items over the default:
 *   window=N (the last N calls) | window=DUR (the calls of the last DUR, whole seconds)
 *   min-calls=N  failure-rate=P%  slow-rate=P%  slow=DUR  wait=DUR | wait=MIN..MAX  probes=N */
int lk_gw_breaker_parse(const char *v, bool *on, lk_breaker_config *c, char *m, size_t cap) {
  lk_http_origin_breaker_default(c);
  if (strcasecmp(v, "none") == 0) {
    *on = false;
    return 0;
  }
  *on = true;
  if (strcasecmp(v, "default") == 0)
    return 0;
  char buf[256];
  if (strlen(v) >= sizeof buf)
    goto bad;
  strcpy(buf, v);
  char *save = NULL;
  for (char *it = strtok_r(buf, ":", &save); it; it = strtok_r(NULL, ":", &save)) {
    char *eq = strchr(it, '=');
    if (!eq)
      goto bad;
    *eq = '\0';
    const char *k = it, *val = eq + 1;
    long long n;
    double d;
    int64_t t;
    char dm[128];
    if (strcmp(k, "window") == 0) {
      if (parse_int(val, 1, 1000000, &n) == 0) {
        c->window = LK_BREAKER_WINDOW_COUNT;
        c->window_size = (int)n;
      } else if (lk_duration_parse(val, &t, dm, sizeof dm) == 0 && t % 1000000000 == 0 &&
                 t >= 1000000000 && t <= INT64_C(86400000000000)) {
        c->window = LK_BREAKER_WINDOW_TIME;
        c->window_size = (int)(t / 1000000000);
      } else {
        snprintf(m, cap,
                 "'window=%s': a number of calls (1 to 1000000) or whole seconds (1s to 24h)", val);
        return -1;
      }
    } else if (strcmp(k, "min-calls") == 0 && parse_int(val, 1, 1000000, &n) == 0) {
      c->minimum_calls = (int)n;
    } else if (strcmp(k, "failure-rate") == 0 && parse_percent(val, 0.001, 100, &d) == 0) {
      c->failure_rate_threshold = d;
    } else if (strcmp(k, "slow-rate") == 0 && parse_percent(val, 0.001, 100, &d) == 0) {
      c->slow_call_rate_threshold = d;
    } else if (strcmp(k, "slow") == 0 && parse_dur(val, 1, &t, dm, sizeof dm) == 0) {
      c->slow_call_duration = t;
    } else if (strcmp(k, "probes") == 0 && parse_int(val, 1, 1000000, &n) == 0) {
      c->permitted_half_open = (int)n;
    } else if (strcmp(k, "wait") == 0) {
      const char *dots = strstr(val, "..");
      if (dots) {
        char lo[64];
        size_t ln = (size_t)(dots - val);
        int64_t a, b;
        if (ln >= sizeof lo)
          goto bad;
        memcpy(lo, val, ln);
        lo[ln] = '\0';
        if (parse_dur(lo, 1000000, &a, dm, sizeof dm) != 0 ||
            parse_dur(dots + 2, 1000000, &b, dm, sizeof dm) != 0 || b < a) {
          snprintf(m, cap, "'wait=%s': MIN..MAX, both at least 1ms, MAX >= MIN", val);
          return -1;
        }
        c->wait_backoff = true;
        c->backoff.base = a;
        c->backoff.max = b;
      } else {
        if (parse_dur(val, 1, &t, dm, sizeof dm) != 0) {
          snprintf(m, cap, "'wait=%s': a duration or MIN..MAX", val);
          return -1;
        }
        c->wait_backoff = false;
        c->wait_open = t;
      }
    } else {
      goto bad;
    }
  }
  lk_rand_fast probe;
  lk_rand_fast_seeded(&probe, 1);
  c->rng = &probe.base; /* the runtime gives each breaker its own; validate with a stand-in */
  const char *why = NULL;
  int rc = lk_breaker_config_validate(c, &why);
  c->rng = NULL;
  if (rc != LK_OK) {
    snprintf(m, cap, "'%s': %s", v, why ? why : "invalid");
    return -1;
  }
  return 0;
bad:
  snprintf(m, cap,
           "'%.100s' is not a breaker: use default, none, or items such as "
           "window=50:min-calls=20:failure-rate=50%%:slow-rate=100%%:slow=60s:wait=100ms..500ms:"
           "probes=5",
           v);
  return -1;
}

char *lk_gw_breaker_format(bool on, const lk_breaker_config *c, char *buf, size_t cap) {
  if (!on) {
    snprintf(buf, cap, "none");
    return buf;
  }
  char w[32], s[32], a[32], b[32];
  if (c->window == LK_BREAKER_WINDOW_TIME)
    lk_gw_dur_exact((int64_t)c->window_size * 1000000000, w, sizeof w);
  else
    snprintf(w, sizeof w, "%d", c->window_size);
  if (c->wait_backoff)
    snprintf(buf, cap,
             "window=%s:min-calls=%d:failure-rate=%g%%:slow-rate=%g%%:slow=%s:wait=%s..%s:"
             "probes=%d",
             w, c->minimum_calls, c->failure_rate_threshold, c->slow_call_rate_threshold,
             lk_gw_dur_exact(c->slow_call_duration, s, sizeof s),
             lk_gw_dur_exact(c->backoff.base, a, sizeof a),
             lk_gw_dur_exact(c->backoff.max, b, sizeof b), c->permitted_half_open);
  else
    snprintf(buf, cap,
             "window=%s:min-calls=%d:failure-rate=%g%%:slow-rate=%g%%:slow=%s:wait=%s:probes=%d",
             w, c->minimum_calls, c->failure_rate_threshold, c->slow_call_rate_threshold,
             lk_gw_dur_exact(c->slow_call_duration, s, sizeof s),
             lk_gw_dur_exact(c->wait_open, a, sizeof a), c->permitted_half_open);
  return buf;
}

/* shared = none | redis://HOST:PORT[,fleet=N][,timeout=DUR] */
int lk_gw_shared_parse(const char *v, lk_gw_shared *out, char *m, size_t cap) {
  lk_gw_shared s = {.fleet = 1, .timeout = LK_MS(2)};
  if (strcasecmp(v, "none") == 0) {
    *out = s;
    return 0;
  }
  char buf[300];
  if (strlen(v) >= sizeof buf || strncmp(v, "redis://", 8) != 0)
    goto bad;
  strcpy(buf, v);
  char *opt = strchr(buf, ',');
  if (opt)
    *opt++ = '\0';
  const char *hp = buf + 8, *colon = strrchr(hp, ':');
  long long port;
  if (!*hp || !colon || colon == hp || strlen(buf) >= sizeof s.url ||
      parse_int(colon + 1, 1, 65535, &port) != 0)
    goto bad;
  strcpy(s.url, buf);
  while (opt && *opt) {
    char *next = strchr(opt, ',');
    if (next)
      *next++ = '\0';
    long long n;
    if (strncmp(opt, "fleet=", 6) == 0 && parse_int(opt + 6, 1, 100000, &n) == 0) {
      s.fleet = (int)n;
    } else if (strncmp(opt, "timeout=", 8) == 0) {
      int64_t d;
      if (lk_duration_parse(opt + 8, &d, m, cap) != 0 || d < LK_NS_PER_US || d > LK_SEC(10)) {
        snprintf(m, cap, "'%.100s': timeout= takes 1us to 10s", v);
        return -1;
      }
      s.timeout = d;
    } else {
      goto bad;
    }
    opt = next;
  }
  *out = s;
  return 0;
bad:
  snprintf(m, cap,
           "'%.100s' is not a shared store: use none or redis://HOST:PORT[,fleet=N][,timeout=DUR]"
           " (e.g. redis://127.0.0.1:6379,fleet=3)",
           v);
  return -1;
}

char *lk_gw_shared_format(const lk_gw_shared *s, char *buf, size_t cap) {
  char a[64];
  if (!s->url[0])
    snprintf(buf, cap, "none");
  else
    snprintf(buf, cap, "%s,fleet=%d,timeout=%s", s->url, s->fleet,
             lk_gw_dur_exact(s->timeout, a, sizeof a));
  return buf;
}

/* limiter = none | RATE[/s][:burst=N] */
int lk_gw_limiter_parse(const char *v, bool *on, lk_limiter_config *c, char *m, size_t cap) {
  lk_limiter_config_init_default(c);
  if (strcasecmp(v, "none") == 0) {
    *on = false;
    return 0;
  }
  char buf[128];
  if (strlen(v) >= sizeof buf)
    goto bad;
  strcpy(buf, v);
  char *burst = strchr(buf, ':');
  if (burst) {
    *burst++ = '\0';
    long long n;
    if (strncmp(burst, "burst=", 6) != 0 || parse_int(burst + 6, 1, INT64_C(1000000000), &n) != 0)
      goto bad;
    c->burst = n;
  }
  size_t n = strlen(buf);
  if (n > 2 && strcmp(buf + n - 2, "/s") == 0)
    buf[n - 2] = '\0';
  if (!isdigit((unsigned char)buf[0]) && buf[0] != '.')
    goto bad;
  errno = 0;
  char *end;
  double r = strtod(buf, &end);
  if (errno || *end || !isfinite(r))
    goto bad;
  c->rate = r;
  const char *why = NULL;
  if (lk_limiter_config_validate(c, &why) != LK_OK) {
    snprintf(m, cap, "'%s': %s", v, why ? why : "invalid");
    return -1;
  }
  *on = true;
  return 0;
bad:
  snprintf(m, cap, "'%.100s' is not a limiter: use none or RATE/s[:burst=N] (e.g. 200/s:burst=20)",
           v);
  return -1;
}

/* The shortest %g text that reads back as v: "33.3", not %.17g's "33.299999999999997", and still
 * the same double when --check's output is loaded again. */
static const char *num(double v, char buf[32]) {
  for (int prec = 1; prec < 17; prec++) {
    snprintf(buf, 32, "%.*g", prec, v);
    if (strtod(buf, NULL) == v)
      return buf;
  }
  snprintf(buf, 32, "%.17g", v);
  return buf;
}

char *lk_gw_limiter_format(bool on, const lk_limiter_config *c, char *buf, size_t cap) {
  if (!on)
    snprintf(buf, cap, "none");
  else
    snprintf(buf, cap, "%s/s:burst=%" PRId64, num(c->rate, (char[32]){0}), c->burst);
  return buf;
}

/* bulkhead = none | MAX[:queue=N] */
int lk_gw_bulkhead_parse(const char *v, bool *on, lk_bulkhead_config *c, char *m, size_t cap) {
  lk_bulkhead_config_init_default(c);
  if (strcasecmp(v, "none") == 0) {
    *on = false;
    return 0;
  }
  char buf[128];
  if (strlen(v) >= sizeof buf)
    goto bad;
  strcpy(buf, v);
  char *q = strchr(buf, ':');
  long long n;
  if (q) {
    *q++ = '\0';
    if (strncmp(q, "queue=", 6) != 0 || parse_int(q + 6, 0, LK_BULKHEAD_LIMIT_MAX, &n) != 0)
      goto bad;
    c->max_queue = n;
  }
  if (parse_int(buf, 1, LK_BULKHEAD_LIMIT_MAX, &n) != 0)
    goto bad;
  c->max_concurrent = n;
  const char *why = NULL;
  if (lk_bulkhead_config_validate(c, &why) != LK_OK) {
    snprintf(m, cap, "'%s': %s", v, why ? why : "invalid");
    return -1;
  }
  *on = true;
  return 0;
bad:
  snprintf(m, cap,
           "'%.100s' is not a bulkhead: use none or MAX[:queue=N], MAX 1 to %" PRId64
           ", N 0 to %" PRId64 " (e.g. 100:queue=50)",
           v, (int64_t)LK_BULKHEAD_LIMIT_MAX, (int64_t)LK_BULKHEAD_LIMIT_MAX);
  return -1;
}

char *lk_gw_bulkhead_format(bool on, const lk_bulkhead_config *c, char *buf, size_t cap) {
  if (!on)
    snprintf(buf, cap, "none");
  else
    snprintf(buf, cap, "%" PRId64 ":queue=%" PRId64, c->max_concurrent, c->max_queue);
  return buf;
}

/* ============================================================================================
 * Policies
 * ========================================================================================== */

/* The route keys that are not the CLI's. */
typedef struct pol_builder {
  cli_settings s;
  int key_line[CLI_F__COUNT];
  bool breaker_on;
  lk_breaker_config breaker;
  bool limiter_on;
  lk_limiter_config limiter;
  bool bulkhead_on;
  lk_bulkhead_config bulkhead;
  lk_gw_shared shared;
  lk_gw_idem idem;
  bool cap_set;
  int64_t deadline_cap;
  int64_t reserve;
  bool honor_retried;
  size_t max_response_body;
  int cap_line, reserve_line, shared_line; /* where the gateway's keys are, 0 if not set */
} pol_builder;

static void builder_init(pol_builder *b) {
  memset(b, 0, sizeof *b);
  cli_settings_init(&b->s);
  lk_http_origin_breaker_default(&b->breaker);
  b->breaker_on = true;
  lk_limiter_config_init_default(&b->limiter);
  lk_bulkhead_config_init_default(&b->bulkhead);
  b->shared = (lk_gw_shared){.fleet = 1, .timeout = LK_MS(2)};
  lk_http_policy d;
  lk_http_policy_init_default(&d);
  b->honor_retried = d.honor_retried;
  b->max_response_body = d.max_response_body;
}

/* The gateway's own policy keys (also valid as next.KEY). */
static const char *const gw_policy_keys[] = {"breaker",       "limiter",      "bulkhead",
                                             "idempotency",   "deadline-cap", "deadline-reserve",
                                             "honor-retried", "shared",       "max-response-body"};

static bool is_policy_key(const char *k) {
  if (cli_settings_field(k) >= 0)
    return true;
  for (size_t i = 0; i < sizeof gw_policy_keys / sizeof gw_policy_keys[0]; i++)
    if (strcmp(k, gw_policy_keys[i]) == 0)
      return true;
  return false;
}

/* Applies one policy key. 0, -1 (bad value, *e filled) or -2 (no memory). */
static int builder_set(pol_builder *b, const char *key, const char *shown, const char *value,
                       int line, perr *e) {
  char m[384];
  if (strcmp(key, "idempotency-key") == 0)
    return bad(e, line, shown, "a gateway route says idempotency = pass or inject instead");
  if (strcmp(key, "header") == 0) {
    const char *colon = strchr(value, ':');
    if (colon && (size_t)(colon - value) == strlen("Idempotency-Key") &&
        strncasecmp(value, "Idempotency-Key", strlen("Idempotency-Key")) == 0)
      return bad(e, line, shown,
                 "a fixed Idempotency-Key would be sent by every request; use idempotency = "
                 "inject");
    /* Framing, hop-by-hop and per-attempt headers: the gateway never forwards the caller's and
     * sets what is needed itself. A route's would be dropped unsaid (the HTTP layer drops a
     * Content-Length or Transfer-Encoding given as a header), or change how the upstream frames
     * its answer (TE, Trailer, Upgrade): refused. Connection is not: `Connection: close` is
     * sent as is and makes the upstream close after each answer (test_gw_proxy.c uses it). */
    static const char *const own[] = {
        "Content-Length", "Transfer-Encoding", "Keep-Alive",    "TE",
        "Trailer",        "Upgrade",           "Expect",        "Proxy-Connection",
        "Linkd-Deadline", "grpc-timeout",      "Linkd-Attempt", LK_HTTP_RETRIED_HEADER};
    size_t sep = strcspn(value, ":;"), nl = sep; /* the name, as the CLI's -H parser reads it */
    /* as for any value (after a space, ';' starts a comment): 'Name:;1' would be written out as
     * 'Name: ;1', which reads back as a removal of Name */
    if (value[sep] == ':' && value[sep + 1 + strspn(value + sep + 1, " \t")] == ';')
      return bad(e, line, shown,
                 "'%.40s': a header value may not start with ';' (after a space it starts a "
                 "comment)",
                 value);
    while (nl > 0 && (value[nl - 1] == ' ' || value[nl - 1] == '\t'))
      nl--;
    for (size_t i = 0; value[sep] && i < sizeof own / sizeof own[0]; i++)
      if (strlen(own[i]) == nl && strncasecmp(value, own[i], nl) == 0)
        return bad(e, line, shown,
                   "%s is a framing, hop-by-hop or per-attempt header: the gateway never "
                   "forwards the caller's and sets what each attempt needs itself, so a route "
                   "may neither set nor remove it",
                   own[i]);
  }
  int f = cli_settings_field(key);
  if (f >= 0) {
    int rc = cli_settings_set(&b->s, key, value, "config", true, m, sizeof m);
    if (rc == CLI_SET_NOMEM)
      return -2;
    if (rc != CLI_SET_OK)
      return bad(e, line, shown, "%s", m);
    b->key_line[f] = line;
    if (f == CLI_F_HEADER) { /* written out as "Name: value", "Name;" or "Name:" (on_entry) */
      const cli_header *h = &b->s.headers[b->s.nheaders - 1];
      size_t w = strlen(shown) + 3 + strlen(h->name) + 1 +
                 (h->value && *h->value ? 1 + strlen(h->value) : 0);
      if (w > LINE_MAX_CHARS)
        return bad(e, line, shown,
                   "written out as '%s = %s: VALUE' (as --check and GET /config write it) the "
                   "line is %zu characters, more than a line holds (%d)",
                   shown, h->name, w, LINE_MAX_CHARS);
    }
    /* lk_http_policy_validate bounds these at 100 days, in a message that names no key: said
     * here, at the key's line, as for the gateway's own durations */
    int64_t d = 0;
    switch ((cli_field)f) {
    case CLI_F_DEADLINE: d = b->s.deadline; break;
    case CLI_F_ATTEMPT_TIMEOUT: d = b->s.attempt_timeout; break;
    case CLI_F_CONNECT_TIMEOUT: d = b->s.connect_timeout; break;
    case CLI_F_DNS_TIMEOUT: d = b->s.dns_timeout; break;
    case CLI_F_TLS_TIMEOUT: d = b->s.tls_timeout; break;
    case CLI_F_WRITE_TIMEOUT: d = b->s.write_timeout; break;
    case CLI_F_FIRST_BYTE_TIMEOUT: d = b->s.first_byte_timeout; break;
    case CLI_F_IDLE_TIMEOUT: d = b->s.idle_timeout; break;
    default: break;
    }
    if (d > LK_HTTP_DURATION_MAX)
      return bad(e, line, shown, "'%s' is out of range: at most 100 days", value);
    return 0;
  }
  if (strcmp(key, "breaker") == 0) {
    if (lk_gw_breaker_parse(value, &b->breaker_on, &b->breaker, m, sizeof m) != 0)
      return bad(e, line, shown, "%s", m);
  } else if (strcmp(key, "limiter") == 0) {
    if (lk_gw_limiter_parse(value, &b->limiter_on, &b->limiter, m, sizeof m) != 0)
      return bad(e, line, shown, "%s", m);
  } else if (strcmp(key, "bulkhead") == 0) {
    if (lk_gw_bulkhead_parse(value, &b->bulkhead_on, &b->bulkhead, m, sizeof m) != 0)
      return bad(e, line, shown, "%s", m);
  } else if (strcmp(key, "shared") == 0) {
    if (lk_gw_shared_parse(value, &b->shared, m, sizeof m) != 0)
      return bad(e, line, shown, "%s", m);
    b->shared_line = line;
  } else if (strcmp(key, "idempotency") == 0) {
    if (strcasecmp(value, "pass") == 0)
      b->idem = LK_GW_IDEM_PASS;
    else if (strcasecmp(value, "inject") == 0)
      b->idem = LK_GW_IDEM_INJECT;
    else
      return bad(e, line, shown, "'%s': use pass or inject", value);
  } else if (strcmp(key, "deadline-cap") == 0) {
    if (parse_dur(value, 1, &b->deadline_cap, m, sizeof m) != 0)
      return bad(e, line, shown, "%s", m);
    b->cap_set = true;
    b->cap_line = line;
  } else if (strcmp(key, "deadline-reserve") == 0) {
    if (parse_dur(value, 0, &b->reserve, m, sizeof m) != 0)
      return bad(e, line, shown, "%s", m);
    b->reserve_line = line;
  } else if (strcmp(key, "honor-retried") == 0) {
    if (parse_bool(value, &b->honor_retried) != 0)
      return bad(e, line, shown, "'%s': use true or false", value);
  } else if (strcmp(key, "max-response-body") == 0) {
    /* the HTTP layer's max_response_body: the upstream's answer is held whole before it is
     * forwarded, so this bounds the memory one request may take; a larger body is no answer
     * (502) */
    uint64_t z;
    if (conf_parse_size(value, UINT64_C(1) << 30, &z) != 0 || z < 1)
      return bad(e, line, shown, "'%s': a size from 1 byte to 1GiB (e.g. 64MiB)", value);
    b->max_response_body = (size_t)z;
  } else {
    return bad(e, line, shown, "unknown key");
  }
  return 0;
}

static void policy_free(lk_gw_policy *p) {
  if (!p)
    return;
  free(p->canonical);
  free((char *)p->http.ca_file);
  for (size_t i = 0; i < p->n_headers; i++) {
    free(p->headers[i].name);
    free(p->headers[i].value);
  }
  free(p->headers);
  memset(p, 0, sizeof *p);
}

static uint32_t fnv1a32(const char *s, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)s[i]) * 16777619u;
  return h;
}

/* The canonical text of a policy, one "key = value" per line, in reference order. */
static char *policy_canonical(const lk_gw_policy *p) {
  char *out = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&out, &len);
  if (!f)
    return NULL;
  char a[64], big[512];
  const lk_http_policy *h = &p->http;
  const lk_retry_config *rc = &h->retry.cfg;
  fprintf(f, "deadline = %s\n", lk_gw_dur_exact(p->deadline, a, sizeof a));
  fprintf(f, "deadline-cap = %s\n", lk_gw_dur_exact(p->deadline_cap, a, sizeof a));
  fprintf(f, "deadline-reserve = %s\n", lk_gw_dur_exact(h->deadline_reserve, a, sizeof a));
  fprintf(f, "attempt-timeout = %s\n", lk_gw_dur_exact(h->attempt_timeout, a, sizeof a));
  fprintf(f, "connect-timeout = %s\n", lk_gw_dur_exact(h->connect_timeout, a, sizeof a));
  fprintf(f, "dns-timeout = %s\n", lk_gw_dur_exact(h->dns_timeout, a, sizeof a));
  fprintf(f, "tls-timeout = %s\n", lk_gw_dur_exact(h->tls_timeout, a, sizeof a));
  fprintf(f, "write-timeout = %s\n", lk_gw_dur_exact(h->write_timeout, a, sizeof a));
  fprintf(f, "first-byte-timeout = %s\n", lk_gw_dur_exact(h->first_byte_timeout, a, sizeof a));
  fprintf(f, "idle-timeout = %s\n", lk_gw_dur_exact(h->idle_timeout, a, sizeof a));
  fprintf(f, "max-attempts = %d\n", rc->max_attempts);
  if (rc->backoff.kind == LK_BACKOFF_EXPONENTIAL)
    fprintf(f, "backoff = %s:%s\n", lk_backoff_kind_name(rc->backoff.kind),
            num(rc->backoff.multiplier, (char[32]){0}));
  else
    fprintf(f, "backoff = %s\n", lk_backoff_kind_name(rc->backoff.kind));
  fprintf(f, "base = %s\n", lk_gw_dur_exact(rc->backoff.base, a, sizeof a));
  fprintf(f, "max-delay = %s\n", lk_gw_dur_exact(rc->backoff.max, a, sizeof a));
  if (rc->backoff.jitter == LK_JITTER_SYMMETRIC)
    fprintf(f, "jitter = %s:%s\n", lk_jitter_kind_name(rc->backoff.jitter),
            num(rc->backoff.ratio, (char[32]){0}));
  else
    fprintf(f, "jitter = %s\n", lk_jitter_kind_name(rc->backoff.jitter));
  fprintf(f, "retry-on = %s\n", cli_retry_on_format(rc->retry_on, big, sizeof big));
  fprintf(f, "budget = %s\n", cli_budget_format(&p->budget, big, sizeof big));
  fprintf(f, "breaker = %s\n", lk_gw_breaker_format(p->breaker_on, &p->breaker, big, sizeof big));
  fprintf(f, "limiter = %s\n", lk_gw_limiter_format(p->limiter_on, &p->limiter, big, sizeof big));
  fprintf(f, "bulkhead = %s\n",
          lk_gw_bulkhead_format(p->bulkhead_on, &p->bulkhead, big, sizeof big));
  fprintf(f, "shared = %s\n", lk_gw_shared_format(&p->shared, big, sizeof big));
  fprintf(f, "idempotency = %s\n", p->idem == LK_GW_IDEM_INJECT ? "inject" : "pass");
  fprintf(f, "honor-retried = %s\n", h->honor_retried ? "true" : "false");
  fprintf(f, "max-response-body = %zu\n", h->max_response_body);
  for (size_t i = 0; i < p->n_headers; i++) {
    /* as the CLI's -H reads them: "Name;" an empty header, "Name:" a removal */
    const char *v = p->headers[i].value;
    fprintf(f, "header = %s%s%s\n", p->headers[i].name, !v ? ":" : !*v ? ";" : ": ", v ? v : "");
  }
  if (fclose(f) != 0) {
    free(out);
    return NULL;
  }
  return out;
}

/* The line of the key among `lines` set last, for an error about how keys combine; `dflt` (the
 * section's) when none is set. */
static int last_line(const int *lines, size_t n, int dflt) {
  int l = 0;
  for (size_t i = 0; i < n; i++)
    if (lines[i] > l)
      l = lines[i];
  return l > 0 ? l : dflt;
}

/* Where an error of cli_settings_to_policy belongs: the keys of the check that failed (its
 * message says which, src/spec/policy.c), else `dflt`. */
static int policy_error_line(const pol_builder *b, const char *msg, int dflt) {
  const int *k = b->key_line;
  if (strncmp(msg, "connect-timeout ", 16) == 0)
    return last_line((int[]){k[CLI_F_CONNECT_TIMEOUT], k[CLI_F_ATTEMPT_TIMEOUT]}, 2, dflt);
  if (strncmp(msg, "max-delay ", 10) == 0)
    return last_line((int[]){k[CLI_F_BASE], k[CLI_F_MAX_DELAY]}, 2, dflt);
  if (strncmp(msg, "invalid retry policy", 20) == 0)
    return last_line((int[]){k[CLI_F_MAX_ATTEMPTS], k[CLI_F_BACKOFF], k[CLI_F_BASE],
                             k[CLI_F_MAX_DELAY], k[CLI_F_JITTER], k[CLI_F_RETRY_ON]},
                     6, dflt);
  return dflt;
}

/* Turns a builder into a policy. 0, -1 (*e) or -2. `what` names the version in messages; an
 * error about how keys combine names the line of the one set last (`line`, the section's, when
 * they are all defaults). */
static int builder_finish(pol_builder *b, lk_gw_policy *p, int line, const char *what,
                          size_t key_prefix, perr *e) {
  memset(p, 0, sizeof *p);
  cli_policy_error pe;
  if (cli_settings_to_policy(&b->s, &p->http, &pe) != 0)
    return bad(e, policy_error_line(b, pe.msg, line), NULL, "%s: %s", what, pe.msg);
  p->http.default_protection = false; /* the route's own objects, or none: never the client's */
  /* The default connect timeout under a shorter attempt timeout is cut to it by the driver; say
   * so in the policy, so that its canonical text (which spells every value out) loads again. */
  if (p->http.connect_timeout > p->http.attempt_timeout)
    p->http.connect_timeout = p->http.attempt_timeout;
  p->http.idem_mode = b->idem == LK_GW_IDEM_INJECT ? LK_IDEM_AUTO : LK_IDEM_NONE;
  p->http.idem_key = NULL;
  p->http.deadline_reserve = b->reserve;
  p->http.honor_retried = b->honor_retried;
  p->http.max_response_body = b->max_response_body;
  p->http.ca_file = NULL; /* cli_settings_to_policy lent it the builder's string */
  /* Cluster endpoints are HOST:PORT over plain http: a CA file would check no certificate, and
   * one taken silently would pass for TLS that is not there. */
  if (b->s.cacert)
    return bad(e, b->key_line[CLI_F_CACERT] ? b->key_line[CLI_F_CACERT] : line,
               key_prefix ? "next.cacert" : "cacert",
               "upstreams are plain http (a cluster endpoint is HOST:PORT): there is no "
               "certificate to check");
  /* nor one to present: cli_settings_to_policy refused a key or pass phrase without one */
  p->http.client_cert = p->http.client_key = p->http.key_password = NULL;
  if (b->s.cert)
    return bad(e, b->key_line[CLI_F_CERT] ? b->key_line[CLI_F_CERT] : line,
               key_prefix ? "next.cert" : "cert",
               "upstreams are plain http (a cluster endpoint is HOST:PORT): there is no TLS "
               "to present a client certificate in");
  p->deadline = p->http.deadline;
  p->deadline_cap = b->cap_set ? b->deadline_cap : p->deadline;
  int cap_line = b->cap_set ? b->cap_line : b->key_line[CLI_F_DEADLINE];
  /* a caller who asks for more time than the default would get less than one who asks nothing */
  if (p->deadline_cap < p->deadline) {
    char c1[32], c2[32];
    return bad(e, last_line((int[]){b->cap_line, b->key_line[CLI_F_DEADLINE]}, 2, line), NULL,
               "%s: deadline-cap %s is shorter than deadline %s (a caller's Linkd-Deadline would "
               "get less time than no header)",
               what, lk_gw_dur_exact(p->deadline_cap, c1, sizeof c1),
               lk_gw_dur_exact(p->deadline, c2, sizeof c2));
  }
  if (p->http.deadline_reserve >= p->deadline_cap)
    return bad(e, last_line((int[]){b->reserve_line, cap_line}, 2, line), NULL,
               "%s: deadline-reserve must be shorter than deadline-cap", what);
  if (b->s.set & CLI_BIT(CLI_F_BUDGET)) {
    p->budget = b->s.budget;
  } else {
    memset(&p->budget, 0, sizeof p->budget);
    lk_budget_ratio_config_init_default(&p->budget.ratio);
    lk_budget_token_config_init_default(&p->budget.token);
    lk_budget_quota_config_init_default(&p->budget.quota);
    /* The HTTP layer's per-origin budget (Finagle's: 20 % of requests over 10 s) with a floor
     * of 1 retry a second instead of 10. A floor suits a client making few calls; a route of a
     * gateway carries many callers, and behind a chain of gateways the floors add up: measured
     * in bench/serve/chain.sh with 120 calls, the 10/s floor let a failing libraryd receive 1.55
     * requests per logical call, 1/s 1.07 (the ratio only bites when a route's rate is well
     * above floor / 20 %; docs/BENCHMARKS.md). */
    lk_http_origin_budget_default(&p->budget.ratio);
    p->budget.ratio.min_retries_per_sec = 1;
    p->budget.enabled = true;
    p->budget.kind = LK_BUDGET_RATIO;
  }
  p->breaker_on = b->breaker_on;
  p->breaker = b->breaker;
  p->limiter_on = b->limiter_on;
  p->limiter = b->limiter;
  p->bulkhead_on = b->bulkhead_on;
  p->bulkhead = b->bulkhead;
  p->shared = b->shared;
  if (p->shared.url[0] && p->budget.enabled && p->budget.kind != LK_BUDGET_RATIO)
    return bad(e, last_line((int[]){b->shared_line, b->key_line[CLI_F_BUDGET]}, 2, line), NULL,
               "%s: a shared budget is a ratio budget (budget = ratio:...)", what);
  p->idem = b->idem;
  if (b->s.nheaders) {
    p->headers = calloc(b->s.nheaders, sizeof *p->headers);
    if (!p->headers)
      return -2;
    for (size_t i = 0; i < b->s.nheaders; i++) {
      p->n_headers++;
      p->headers[i].name = strdup(b->s.headers[i].name);
      p->headers[i].value = b->s.headers[i].value ? strdup(b->s.headers[i].value) : NULL;
      if (!p->headers[i].name || (b->s.headers[i].value && !p->headers[i].value))
        return -2;
    }
  }
  const char *why = NULL;
  lk_http_policy probe = p->http;
  probe.deadline = p->deadline_cap > p->deadline ? p->deadline_cap : p->deadline;
  if (lk_http_policy_validate(&probe, &why) != LK_OK)
    return bad(e, line, NULL, "%s: invalid policy: %s", what, why ? why : "?");
  p->canonical = policy_canonical(p);
  if (!p->canonical)
    return -2;
  /* Each line must load again (on_entry), also a value spelled out longer than it was given
   * (breaker = on). A candidate's lines are written with key_prefix ("next.") in front. */
  for (const char *q = p->canonical; *q;) {
    size_t n = strcspn(q, "\n");
    if (key_prefix + n > LINE_MAX_CHARS)
      return bad(e, line, NULL,
                 "%s: written out (as --check and GET /config write it), '%.*s...' is %zu "
                 "characters, more than a line holds (%d)",
                 what, (int)strcspn(q, "="), q, key_prefix + n, LINE_MAX_CHARS);
    q += n + (q[n] == '\n');
  }
  snprintf(p->version, sizeof p->version, "p%08x", fnv1a32(p->canonical, strlen(p->canonical)));
  return 0;
}

/* ============================================================================================
 * Sections
 * ========================================================================================== */

static const raw_entry *dup_key(const raw_section *s, size_t j) {
  for (size_t i = 0; i < j; i++)
    if (strcmp(s->e[i].key, s->e[j].key) == 0)
      return &s->e[i];
  return NULL;
}

/* Refuses a key given twice (except the repeatable ones). */
static int check_dups(const raw_section *s, perr *e) {
  for (size_t j = 0; j < s->n; j++) {
    const char *k = s->e[j].key;
    if (strcmp(k, "endpoint") == 0 || strcmp(k, "header") == 0 || strcmp(k, "next.header") == 0 ||
        strcmp(k, "retry-on") == 0 || strcmp(k, "next.retry-on") == 0)
      continue;
    const raw_entry *d = dup_key(s, j);
    if (d)
      return bad(e, s->e[j].line, k, "already set in this section on line %d", d->line);
  }
  return 0;
}

static int section_listen(const raw_section *s, lk_gw_listen *l, perr *e) {
  l->line = s->line;
  int buffer_line = 0, max_body_line = 0;
  for (size_t j = 0; j < s->n; j++) {
    const raw_entry *r = &s->e[j];
    const char *k = r->key, *v = r->value;
    char m[256];
    long long n;
    uint64_t z;
    if (strcmp(k, "address") == 0) {
      if (parse_addr(v, 0, true, &l->addr, m, sizeof m) != 0)
        return bad(e, r->line, k, "%s", m);
      l->addr_line = r->line;
    } else if (strcmp(k, "backlog") == 0) {
      if (parse_int(v, 1, 65535, &n) != 0)
        return bad(e, r->line, k, "'%s': a number from 1 to 65535", v);
      l->backlog = (int)n;
    } else if (strcmp(k, "max-connections") == 0) {
      if (parse_int(v, 1, 1000000, &n) != 0)
        return bad(e, r->line, k, "'%s': a number from 1 to 1000000", v);
      l->max_connections = (int)n;
    } else if (strcmp(k, "max-header-bytes") == 0) {
      if (conf_parse_size(v, 1024 * 1024, &z) != 0 || z < 1024)
        return bad(e, r->line, k, "'%s': a size from 1KiB to 1MiB (e.g. 16KiB)", v);
      l->max_header_bytes = (size_t)z;
    } else if (strcmp(k, "max-headers") == 0) {
      if (parse_int(v, 1, 10000, &n) != 0)
        return bad(e, r->line, k, "'%s': a number from 1 to 10000", v);
      l->max_headers = (int)n;
    } else if (strcmp(k, "body-buffer") == 0) {
      if (conf_parse_size(v, UINT64_C(1) << 30, &z) != 0)
        return bad(e, r->line, k, "'%s': a size from 0 to 1GiB (e.g. 64KiB)", v);
      l->body_buffer = (size_t)z;
      buffer_line = r->line;
    } else if (strcmp(k, "max-body") == 0) {
      if (conf_parse_size(v, UINT64_C(1) << 40, &z) != 0)
        return bad(e, r->line, k, "'%s': a size from 0 (no limit) to 1024GiB (e.g. 16MiB)", v);
      l->max_body = (size_t)z;
      max_body_line = r->line;
    } else if (strcmp(k, "header-timeout") == 0) {
      if (parse_dur(v, 1, &l->header_timeout, m, sizeof m) != 0)
        return bad(e, r->line, k, "%s", m);
    } else if (strcmp(k, "idle-timeout") == 0) {
      if (parse_dur(v, 1, &l->idle_timeout, m, sizeof m) != 0)
        return bad(e, r->line, k, "%s", m);
    } else if (strcmp(k, "drain-timeout") == 0) {
      if (parse_dur(v, 0, &l->drain_timeout, m, sizeof m) != 0)
        return bad(e, r->line, k, "%s", m);
    } else if (strcmp(k, "upstream-client") == 0) {
      if (strcmp(v, "native") == 0)
        l->upstream_client = LK_HTTP_TRANSPORT_NATIVE;
      else if (strcmp(v, "curl") == 0)
        l->upstream_client = LK_HTTP_TRANSPORT_CURL;
      else
        return bad(e, r->line, k, "'%s': native or curl", v);
    } else if (strcmp(k, "generation-header") == 0) {
      if (parse_bool(v, &l->generation_header) != 0)
        return bad(e, r->line, k, "'%s': on or off", v);
    } else {
      return bad(e, r->line, k,
                 "unknown key in [listen] (known: address, backlog, max-connections, "
                 "max-header-bytes, max-headers, body-buffer, max-body, header-timeout, "
                 "idle-timeout, drain-timeout, upstream-client, generation-header)");
    }
  }
  if (l->max_body && l->body_buffer > l->max_body)
    return bad(e, last_line((int[]){buffer_line, max_body_line}, 2, s->line), NULL,
               "body-buffer (%zu bytes) is larger than max-body (%zu bytes)", l->body_buffer,
               l->max_body);
  return 0;
}

static int section_admin(const raw_section *s, lk_gw_admin *a, perr *e) {
  a->line = s->line;
  a->enabled = true;
  for (size_t j = 0; j < s->n; j++) {
    const raw_entry *r = &s->e[j];
    char m[256];
    if (strcmp(r->key, "address") == 0) {
      if (parse_addr(r->value, 0, true, &a->addr, m, sizeof m) != 0)
        return bad(e, r->line, r->key, "%s", m);
      a->addr_line = r->line;
    } else if (strcmp(r->key, "enabled") == 0) {
      if (parse_bool(r->value, &a->enabled) != 0)
        return bad(e, r->line, r->key, "'%s': use true or false", r->value);
    } else {
      return bad(e, r->line, r->key, "unknown key in [admin] (known: address, enabled)");
    }
  }
  return 0;
}

static int section_log(const raw_section *s, lk_gw_log *l, perr *e) {
  l->line = s->line;
  for (size_t j = 0; j < s->n; j++) {
    const raw_entry *r = &s->e[j];
    if (strcmp(r->key, "access") == 0) {
      free(l->access);
      l->access = NULL;
      if (!*r->value)
        return bad(e, r->line, r->key, "empty: use off, - (standard output) or a file path");
      if (strcasecmp(r->value, "off") != 0 && !(l->access = strdup(r->value)))
        return -2;
      l->access_line = r->line;
    } else if (strcmp(r->key, "level") == 0) {
      static const char *const names[] = {"error", "warn", "info", "debug"};
      size_t i = 0;
      for (; i < 4; i++)
        if (strcasecmp(r->value, names[i]) == 0)
          break;
      if (i == 4)
        return bad(e, r->line, r->key, "'%s': use error, warn, info or debug", r->value);
      l->level = (lk_gw_log_level)i;
    } else {
      return bad(e, r->line, r->key, "unknown key in [log] (known: access, level)");
    }
  }
  return 0;
}

static void endpoint_strings(lk_gw_endpoint *ep, char *key, size_t kcap, char *url, size_t ucap) {
  bool v6 = strchr(ep->addr.host, ':') != NULL;
  snprintf(key, kcap, "%s%s%s:%d", v6 ? "[" : "", ep->addr.host, v6 ? "]" : "", ep->addr.port);
  snprintf(url, ucap, "http://%s", key);
}

static int section_cluster(const raw_section *s, const char *name, lk_gw_cluster *c, perr *e) {
  c->line = s->line;
  if (!(c->name = strdup(name)))
    return -2;
  lk_gw_outlier *o = &c->outlier;
  o->consecutive_5xx = 5;
  o->consecutive_connect_failures = 3;
  o->base_time = LK_MS(5000);
  o->max_time = LK_MS(300000);
  o->max_percent = 50;
  lk_gw_health *h = &c->health;
  h->interval = LK_MS(5000);
  h->timeout = LK_MS(1000);
  h->healthy_threshold = 2;
  h->unhealthy_threshold = 3;
  int health_key_line = 0, base_line = 0, max_line = 0, interval_line = 0, timeout_line = 0;
  const char *health_key = NULL;
  size_t n_ep = 0;
  for (size_t j = 0; j < s->n; j++)
    n_ep += strcmp(s->e[j].key, "endpoint") == 0;
  if (n_ep > LK_GW_MAX_ENDPOINTS) {
    for (size_t j = 0, seen = 0; j < s->n; j++)
      if (strcmp(s->e[j].key, "endpoint") == 0 && ++seen > LK_GW_MAX_ENDPOINTS)
        return bad(e, s->e[j].line, "endpoint", "more than %d endpoints in one cluster",
                   LK_GW_MAX_ENDPOINTS);
  }
  if (n_ep && !(c->endpoints = calloc(n_ep, sizeof *c->endpoints)))
    return -2;
  for (size_t j = 0; j < s->n; j++) {
    const raw_entry *r = &s->e[j];
    const char *k = r->key, *v = r->value;
    char m[256];
    long long n;
    if (strcmp(k, "endpoint") == 0) {
      lk_gw_endpoint *ep = &c->endpoints[c->n_endpoints];
      if (parse_addr(v, 1, false, &ep->addr, m, sizeof m) != 0)
        return bad(e, r->line, k, "%s", m);
      char key[LK_GW_HOST_MAX + 16], url[LK_GW_HOST_MAX + 32];
      endpoint_strings(ep, key, sizeof key, url, sizeof url);
      for (size_t i = 0; i < c->n_endpoints; i++)
        if (strcasecmp(c->endpoints[i].key, key) == 0)
          return bad(e, r->line, k, "'%s' is already listed on line %d", v, c->endpoints[i].line);
      ep->line = r->line;
      c->n_endpoints++;
      if (!(ep->key = strdup(key)) || !(ep->base_url = strdup(url)))
        return -2;
    } else if (strcmp(k, "eject-5xx") == 0) {
      if (parse_int(v, 0, 1000000, &n) != 0)
        return bad(e, r->line, k, "'%s': a number of answers, 0 (off) to 1000000", v);
      o->consecutive_5xx = (int)n;
    } else if (strcmp(k, "eject-connect-failures") == 0) {
      if (parse_int(v, 0, 1000000, &n) != 0)
        return bad(e, r->line, k, "'%s': a number of failures, 0 (off) to 1000000", v);
      o->consecutive_connect_failures = (int)n;
    } else if (strcmp(k, "eject-base-time") == 0) {
      if (parse_dur(v, 1, &o->base_time, m, sizeof m) != 0)
        return bad(e, r->line, k, "%s", m);
      base_line = r->line;
    } else if (strcmp(k, "eject-max-time") == 0) {
      if (parse_dur(v, 1, &o->max_time, m, sizeof m) != 0)
        return bad(e, r->line, k, "%s", m);
      max_line = r->line;
    } else if (strcmp(k, "eject-max-percent") == 0) {
      if (parse_percent(v, 0, 100, &o->max_percent) != 0)
        return bad(e, r->line, k, "'%s': a percentage from 0 to 100", v);
    } else if (strcmp(k, "health-path") == 0) {
      if (v[0] != '/' || strpbrk(v, " \t\"<>\\^`{|}") || strlen(v) > 1024)
        return bad(e, r->line, k, "'%s': a path starting with '/', no blanks", v);
      free(h->path);
      if (!(h->path = strdup(v)))
        return -2;
      h->enabled = true;
    } else if (strncmp(k, "health-", 7) == 0) {
      health_key = k;
      health_key_line = r->line;
      if (strcmp(k, "health-interval") == 0) {
        if (parse_dur(v, LK_MS(1), &h->interval, m, sizeof m) != 0)
          return bad(e, r->line, k, "%s", m);
        interval_line = r->line;
      } else if (strcmp(k, "health-timeout") == 0) {
        if (parse_dur(v, LK_MS(1), &h->timeout, m, sizeof m) != 0)
          return bad(e, r->line, k, "%s", m);
        timeout_line = r->line;
      } else if (strcmp(k, "health-healthy") == 0) {
        if (parse_int(v, 1, 1000, &n) != 0)
          return bad(e, r->line, k, "'%s': a number of probes from 1 to 1000", v);
        h->healthy_threshold = (int)n;
      } else if (strcmp(k, "health-unhealthy") == 0) {
        if (parse_int(v, 1, 1000, &n) != 0)
          return bad(e, r->line, k, "'%s': a number of probes from 1 to 1000", v);
        h->unhealthy_threshold = (int)n;
      } else {
        goto unknown;
      }
    } else {
    unknown:
      return bad(e, r->line, k,
                 "unknown key in [cluster] (known: endpoint, eject-5xx, eject-connect-failures, "
                 "eject-base-time, eject-max-time, eject-max-percent, health-path, "
                 "health-interval, health-timeout, health-healthy, health-unhealthy)");
    }
  }
  if (!c->n_endpoints)
    return bad(e, s->line, NULL, "a cluster needs at least one endpoint = HOST:PORT");
  if (o->max_time < o->base_time)
    return bad(e, last_line((int[]){base_line, max_line}, 2, s->line), NULL,
               "eject-max-time is shorter than eject-base-time");
  if (health_key && !h->enabled)
    return bad(e, health_key_line, health_key, "set health-path to enable health checks");
  if (h->enabled && h->timeout >= h->interval)
    return bad(e, last_line((int[]){interval_line, timeout_line}, 2, s->line), NULL,
               "health-timeout must be shorter than health-interval");
  return 0;
}

static bool valid_host(const char *v) {
  if (!*v || strlen(v) >= LK_GW_HOST_MAX)
    return false;
  if (v[0] == '[') { /* [v6] */
    size_t n = strlen(v);
    if (n < 3 || v[n - 1] != ']')
      return false;
    for (size_t i = 1; i < n - 1; i++)
      if (!isxdigit((unsigned char)v[i]) && v[i] != ':' && v[i] != '.')
        return false;
    return true;
  }
  for (const char *p = v; *p; p++)
    if (!isalnum((unsigned char)*p) && *p != '.' && *p != '-' && *p != '_')
      return false;
  return true;
}

/* Applies the policy keys of section `s` to `b`: the stable ones (next = false) or the next.*
 * ones. 0, -1, -2. */
static int apply_policy_keys(const raw_section *s, pol_builder *b, bool next, perr *e) {
  for (size_t j = 0; j < s->n; j++) {
    const raw_entry *r = &s->e[j];
    bool is_next = strncmp(r->key, "next.", 5) == 0;
    if (is_next != next)
      continue;
    const char *k = next ? r->key + 5 : r->key;
    if (!is_policy_key(k)) {
      if (next)
        return bad(e, r->line, r->key, "not a policy key (next.KEY takes the route policy keys)");
      continue; /* route-level key, handled by the caller */
    }
    int rc = builder_set(b, k, r->key, r->value, r->line, e);
    if (rc != 0)
      return rc;
  }
  return 0;
}

static int section_route(const raw_section *s, const char *name, lk_gw_config *c, lk_gw_route *rt,
                         perr *e) {
  rt->line = s->line;
  if (!(rt->name = strdup(name)))
    return -2;
  rt->rollout.percent = 10;
  rt->rollout.margin = 5;
  rt->rollout.min_sample = 100;
  const raw_entry *rollout_key = NULL, *cluster_key = NULL;
  bool has_next = false;
  for (size_t j = 0; j < s->n; j++) {
    const raw_entry *r = &s->e[j];
    const char *k = r->key, *v = r->value;
    long long n;
    if (strncmp(k, "next.", 5) == 0) {
      has_next = true;
    } else if (is_policy_key(k)) {
      /* below */
    } else if (strcmp(k, "host") == 0) {
      free(rt->host);
      rt->host = NULL;
      if (strcmp(v, "*") == 0)
        continue;
      if (!valid_host(v))
        return bad(e, r->line, k, "'%s': a host name or address without a port, or * (any)", v);
      if (!(rt->host = strdup(v)))
        return -2;
      for (char *p = rt->host; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    } else if (strcmp(k, "prefix") == 0) {
      if (v[0] != '/' || strpbrk(v, " \t") || strlen(v) > 1024)
        return bad(e, r->line, k, "'%s': a path prefix starting with '/', no blanks", v);
      free(rt->prefix);
      if (!(rt->prefix = strdup(v)))
        return -2;
    } else if (strcmp(k, "cluster") == 0) {
      cluster_key = r;
    } else if (strcmp(k, "rollout-percent") == 0) {
      rollout_key = r;
      if (parse_percent(v, 0, 100, &rt->rollout.percent) != 0)
        return bad(e, r->line, k, "'%s': a percentage from 0 to 100", v);
    } else if (strcmp(k, "rollout-margin") == 0) {
      rollout_key = r;
      if (parse_percent(v, 0, 100, &rt->rollout.margin) != 0)
        return bad(e, r->line, k, "'%s': percentage points from 0 to 100", v);
    } else if (strcmp(k, "rollout-min-sample") == 0) {
      rollout_key = r;
      if (parse_int(v, 1, INT64_C(1000000000000), &n) != 0)
        return bad(e, r->line, k, "'%s': a number of requests from 1 to 10^12", v);
      rt->rollout.min_sample = (uint64_t)n;
    } else {
      return bad(e, r->line, k,
                 "unknown key in [route] (route keys: host, prefix, cluster, rollout-percent, "
                 "rollout-margin, rollout-min-sample; policy keys: see docs/gateway.md)");
    }
  }
  if (!rt->prefix && !(rt->prefix = strdup("/")))
    return -2;
  if (!cluster_key)
    return bad(e, s->line, NULL, "a route needs cluster = NAME");
  for (size_t i = 0; i < c->n_clusters; i++)
    if (strcmp(c->clusters[i].name, cluster_key->value) == 0)
      rt->cluster = &c->clusters[i];
  if (!rt->cluster)
    return bad(e, cluster_key->line, "cluster", "no [cluster %s] is defined", cluster_key->value);
  if (rollout_key && !has_next)
    return bad(e, rollout_key->line, rollout_key->key,
               "a rollout needs the candidate policy's next.KEY = value keys");

  pol_builder b;
  builder_init(&b);
  int rc = apply_policy_keys(s, &b, false, e);
  if (rc == 0)
    rc = builder_finish(&b, &rt->policy, s->line, "policy", 0, e);
  if (rc == 0 && has_next) {
    /* The candidate: the stable keys, then the next.* keys over them (a retry-on edit builds on
     * the stable set, a header adds to the stable ones). */
    pol_builder nb;
    builder_init(&nb);
    rc = apply_policy_keys(s, &nb, false, e);
    if (rc == 0)
      rc = apply_policy_keys(s, &nb, true, e);
    if (rc == 0 && !(rt->next = calloc(1, sizeof *rt->next)))
      rc = -2;
    if (rc == 0)
      rc = builder_finish(&nb, rt->next, s->line, "candidate (next.*) policy", strlen("next."), e);
    if (rc == 0 && strcmp(rt->next->canonical, rt->policy.canonical) == 0)
      rc = bad(e, s->line, NULL, "the next.* keys give the same policy as the stable one");
    cli_settings_free(&nb.s);
  }
  cli_settings_free(&b.s);
  return rc;
}

/* "cluster NAME" / "route NAME": the name, or NULL (with *e) if the section is not of that kind
 * or the name is bad. */
static const char *named(const raw_section *s, const char *kind, perr *e) {
  size_t kl = strlen(kind);
  if (strncmp(s->name, kind, kl) != 0 || (s->name[kl] != ' ' && s->name[kl] != '\t'))
    return NULL;
  const char *n = s->name + kl;
  while (*n == ' ' || *n == '\t')
    n++;
  size_t len = strlen(n);
  bool ok = len > 0 && len < 64;
  for (size_t i = 0; ok && i < len; i++)
    ok = is_name_char(n[i]);
  if (!ok) {
    bad(e, s->line, NULL, "bad section [%s]: a %s name is 1 to 63 of A-Z a-z 0-9 _ - .", s->name,
        kind);
    return "";
  }
  return n;
}

static void config_free(lk_gw_config *c) {
  if (!c)
    return;
  for (size_t i = 0; i < c->n_routes; i++) {
    lk_gw_route *r = &c->routes[i];
    free(r->name);
    free(r->host);
    free(r->prefix);
    policy_free(&r->policy);
    policy_free(r->next);
    free(r->next);
  }
  free(c->routes);
  for (size_t i = 0; i < c->n_clusters; i++) {
    lk_gw_cluster *k = &c->clusters[i];
    for (size_t j = 0; j < k->n_endpoints; j++) {
      free(k->endpoints[j].key);
      free(k->endpoints[j].base_url);
    }
    free(k->endpoints);
    free(k->name);
    free(k->health.path);
  }
  free(c->clusters);
  free(c->log.access);
  free(c->path);
  free(c);
}

static void config_defaults(lk_gw_config *c) {
  lk_gw_listen *l = &c->listen;
  snprintf(l->addr.host, sizeof l->addr.host, "127.0.0.1");
  l->addr.port = 8080;
  l->backlog = 511;
  l->max_connections = 10000;
  l->max_header_bytes = 16 * 1024;
  l->max_headers = 100;
  l->body_buffer = 64 * 1024;
  l->max_body = 16 * 1024 * 1024;
  l->header_timeout = LK_MS(10000);
  l->idle_timeout = LK_MS(60000);
  l->drain_timeout = LK_MS(10000);
  l->upstream_client = LK_HTTP_TRANSPORT_NATIVE; /* measured faster: docs/BENCHMARKS.md */
  l->generation_header = true;
  snprintf(c->admin.addr.host, sizeof c->admin.addr.host, "127.0.0.1");
  c->admin.addr.port = 9901;
  c->log.level = LK_GW_LOG_INFO;
}

/* Interprets the raw sections. 0, -1 (*e) or -2. */
static int interpret(load_ctx *x, lk_gw_config *c, perr *e) {
  size_t n_clusters = 0, n_routes = 0;
  for (size_t i = 0; i < x->ns; i++) {
    const raw_section *s = &x->s[i];
    e->section = NULL;
    for (size_t j = 0; j < i; j++)
      if (strcmp(x->s[j].name, s->name) == 0)
        return bad(e, s->line, NULL, "section [%s] is already defined on line %d", s->name,
                   x->s[j].line);
    int rc = check_dups(s, e);
    if (rc)
      return rc;
    const char *n;
    if (strcmp(s->name, "listen") == 0 || strcmp(s->name, "admin") == 0 ||
        strcmp(s->name, "log") == 0)
      continue;
    if ((n = named(s, "cluster", e))) {
      if (!*n)
        return -1;
      n_clusters++;
    } else if ((n = named(s, "route", e))) {
      if (!*n)
        return -1;
      n_routes++;
    } else {
      return bad(e, s->line, NULL,
                 "unknown section [%s]: use [listen], [admin], [log], [cluster NAME] or "
                 "[route NAME]",
                 s->name);
    }
  }
  if (n_clusters && !(c->clusters = calloc(n_clusters, sizeof *c->clusters)))
    return -2;
  if (n_routes && !(c->routes = calloc(n_routes, sizeof *c->routes)))
    return -2;
  for (size_t i = 0; i < x->ns; i++) {
    const raw_section *s = &x->s[i];
    int rc = 0;
    const char *n;
    e->section = s->name;
    if (strcmp(s->name, "listen") == 0)
      rc = section_listen(s, &c->listen, e);
    else if (strcmp(s->name, "admin") == 0)
      rc = section_admin(s, &c->admin, e);
    else if (strcmp(s->name, "log") == 0)
      rc = section_log(s, &c->log, e);
    else if ((n = named(s, "cluster", e)))
      rc = section_cluster(s, n, &c->clusters[c->n_clusters++], e);
    if (rc)
      return rc;
  }
  for (size_t i = 0; i < x->ns; i++) {
    const raw_section *s = &x->s[i];
    const char *n = named(s, "route", e);
    if (!n)
      continue;
    e->section = s->name;
    lk_gw_route *r = &c->routes[c->n_routes++];
    int rc = section_route(s, n, c, r, e);
    if (rc)
      return rc;
    for (size_t j = 0; j + 1 < c->n_routes; j++) {
      const lk_gw_route *o = &c->routes[j];
      bool same_host = (!o->host && !r->host) || (o->host && r->host && !strcmp(o->host, r->host));
      if (same_host && strcmp(o->prefix, r->prefix) == 0)
        return bad(e, s->line, NULL, "route '%s' (line %d) has the same host and prefix", o->name,
                   o->line);
    }
  }
  e->section = NULL;
  if (!c->n_routes)
    return bad(e, 0, NULL, "no [route NAME] section: nothing to serve");
  if (c->admin.enabled && c->admin.addr.port != 0 && c->admin.addr.port == c->listen.addr.port &&
      strcasecmp(c->admin.addr.host, c->listen.addr.host) == 0) {
    /* at the address key set last (the other may be its default) */
    bool in_listen = c->listen.addr_line > c->admin.addr_line;
    e->section = in_listen ? "listen" : "admin";
    return bad(e, last_line((int[]){c->admin.addr_line, c->listen.addr_line}, 2, c->admin.line),
               NULL, "the admin address is the listen address");
  }
  return 0;
}

static uint64_t fnv1a64(const char *s, size_t n) {
  uint64_t h = 14695981039346656037u;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)s[i]) * 1099511628211u;
  return h;
}

lk_gw_config *lk_gw_config_load_mem(const char *text, size_t len, const char *name, char *err,
                                    size_t cap) {
  char dummy[1];
  if (!err || !cap) {
    err = dummy;
    cap = sizeof dummy;
  }
  err[0] = '\0';
  if (!name)
    name = "(config)";
  if (!text) {
    snprintf(err, cap, "%s: no text", name);
    return NULL;
  }
  if (len > LK_GW_CONFIG_MAX_BYTES) {
    snprintf(err, cap, "%s: larger than %d bytes: not a config file", name,
             LK_GW_CONFIG_MAX_BYTES);
    return NULL;
  }
  lk_gw_config *c = calloc(1, sizeof *c);
  if (!c || !(c->path = strdup(name))) {
    free(c);
    snprintf(err, cap, "%s: out of memory", name);
    return NULL;
  }
  config_defaults(c);
  c->digest = fnv1a64(text, len);
  atomic_init(&c->refs, 1);
  load_ctx x = {.name = name};
  conf_text_init(&x.t, text, len, false);
  int rc = ini_parse_stream(read_line, &x, on_entry, &x);
  perr e = {.line = 0};
  int irc = 0;
  if (conf_text_result(&x.t, x.nomem ? -2 : rc, x.err_line, x.msg, name, err, cap))
    goto fail;
  irc = interpret(&x, c, &e);
  if (irc == -2) {
    snprintf(err, cap, "%s: out of memory", name);
    goto fail;
  }
  if (irc != 0) {
    char where[32] = "";
    if (e.line > 0)
      snprintf(where, sizeof where, ":%d", e.line);
    if (e.key)
      snprintf(err, cap, "%s%s: %s: %s", name, where, e.key, e.msg);
    else if (e.section)
      snprintf(err, cap, "%s%s: [%s]: %s", name, where, e.section, e.msg);
    else
      snprintf(err, cap, "%s%s: %s", name, where, e.msg);
    goto fail;
  }
  raw_free(&x);
  return c;
fail:
  raw_free(&x);
  config_free(c);
  return NULL;
}

lk_gw_config *lk_gw_config_load(const char *path, char *err, size_t cap) {
  char dummy[1];
  if (!err || !cap) {
    err = dummy;
    cap = sizeof dummy;
  }
  if (!path) {
    snprintf(err, cap, "no configuration file given");
    return NULL;
  }
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, cap, "%s: cannot open: %s", path, strerror(errno));
    return NULL;
  }
  char *buf;
  size_t n;
  int rrc = conf_text_slurp(f, LK_GW_CONFIG_MAX_BYTES, &buf, &n);
  int read_errno = errno;
  fclose(f);
  if (rrc == -2) {
    snprintf(err, cap, "%s: out of memory", path);
    return NULL;
  }
  if (rrc == -1) { /* fopen takes a directory: its read fails (EISDIR), and the message says so */
    snprintf(err, cap, "%s: cannot read: %s", path,
             read_errno ? strerror(read_errno) : "read error");
    return NULL;
  }
  if (rrc == 1) {
    snprintf(err, cap, "%s: larger than %d bytes: not a config file", path, LK_GW_CONFIG_MAX_BYTES);
    return NULL;
  }
  lk_gw_config *c = lk_gw_config_load_mem(buf, n, path, err, cap);
  free(buf);
  if (c && lk_gw_config_check_files(c, err, cap) != LK_OK) {
    config_free(c);
    return NULL;
  }
  return c;
}

int lk_gw_config_check_files(const lk_gw_config *c, char *err, size_t cap) {
  char dummy[1];
  if (!err || !cap) {
    err = dummy;
    cap = sizeof dummy;
  }
  if (!c)
    return LK_EINVAL;
  const char *a = c->log.access;
  if (!a || strcmp(a, "-") == 0)
    return LK_OK;
  FILE *f = fopen(a, "a"); /* as gwp_access_open will: appends, creates, never truncates */
  if (!f) {
    snprintf(err, cap, "%s:%d: access: cannot open %s for append: %s", c->path, c->log.access_line,
             a, strerror(errno));
    return LK_ESYS;
  }
  fclose(f);
  return LK_OK;
}

lk_gw_config *lk_gw_config_ref(lk_gw_config *c) {
  if (c)
    atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
  return c;
}

void lk_gw_config_unref(lk_gw_config *c) {
  if (!c || atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1)
    return;
  lk_gw_runtime_detach(c);
  config_free(c);
}

/* ============================================================================================
 * Matching and dumping
 * ========================================================================================== */

static bool host_eq(const char *route_host, const char *host) {
  /* The request's Host without its port: "a.com:80" -> "a.com", "[::1]:80" -> "[::1]". */
  size_t n = strlen(host);
  if (host[0] == '[') {
    const char *close = strchr(host, ']');
    if (close)
      n = (size_t)(close - host) + 1;
  } else {
    const char *colon = strchr(host, ':');
    if (colon)
      n = (size_t)(colon - host);
  }
  return strlen(route_host) == n && strncasecmp(route_host, host, n) == 0;
}

const lk_gw_route *lk_gw_config_match(const lk_gw_config *c, const char *host, const char *path) {
  if (!c || !path)
    return NULL;
  const lk_gw_route *best = NULL, *best_any = NULL;
  size_t best_len = 0, best_any_len = 0;
  for (size_t i = 0; i < c->n_routes; i++) {
    const lk_gw_route *r = &c->routes[i];
    size_t pl = strlen(r->prefix);
    if (strncmp(path, r->prefix, pl) != 0)
      continue;
    if (r->host) {
      if (host && *host && host_eq(r->host, host) && (!best || pl > best_len)) {
        best = r;
        best_len = pl;
      }
    } else if (!best_any || pl > best_any_len) {
      best_any = r;
      best_any_len = pl;
    }
  }
  return best ? best : best_any;
}

const lk_gw_cluster *lk_gw_config_cluster(const lk_gw_config *c, const char *name) {
  if (!c || !name)
    return NULL;
  for (size_t i = 0; i < c->n_clusters; i++)
    if (strcmp(c->clusters[i].name, name) == 0)
      return &c->clusters[i];
  return NULL;
}

static void dump_addr(FILE *f, const lk_gw_addr *a) {
  bool v6 = strchr(a->host, ':') != NULL;
  fprintf(f, "address = %s%s%s:%d\n", v6 ? "[" : "", a->host, v6 ? "]" : "", a->port);
}

/* Writes the lines of `next` that differ from `stable` as next.KEY = value. */
static void dump_next(FILE *f, const char *stable, const char *next, size_t stable_headers) {
  size_t header_no = 0;
  for (const char *p = next; *p;) {
    const char *eol = strchr(p, '\n');
    size_t n = eol ? (size_t)(eol - p) + 1 : strlen(p);
    bool is_header = strncmp(p, "header = ", 9) == 0;
    bool same = false;
    if (is_header) {
      same = header_no++ < stable_headers; /* the stable headers come first, unchanged */
    } else {
      for (const char *q = stable; *q && !same;) {
        const char *qe = strchr(q, '\n');
        size_t qn = qe ? (size_t)(qe - q) + 1 : strlen(q);
        same = qn == n && memcmp(p, q, n) == 0;
        q += qn;
      }
    }
    if (!same)
      fprintf(f, "next.%.*s", (int)n, p);
    p += n;
  }
}

int lk_gw_config_dump(const lk_gw_config *c, char **out, size_t *len) {
  if (!c || !out)
    return LK_EINVAL;
  *out = NULL;
  size_t l = 0;
  FILE *f = open_memstream(out, &l);
  if (!f)
    return LK_ENOMEM;
  char a[64];
  fprintf(f, "# generation %" PRIu64 ", digest %016" PRIx64 ", from %s\n", c->generation,
          c->digest, c->path);
  const lk_gw_listen *ls = &c->listen;
  fprintf(f, "[listen]\n");
  dump_addr(f, &ls->addr);
  fprintf(f, "backlog = %d\nmax-connections = %d\nmax-header-bytes = %zu\nmax-headers = %d\n",
          ls->backlog, ls->max_connections, ls->max_header_bytes, ls->max_headers);
  fprintf(f, "body-buffer = %zu\nmax-body = %zu\n", ls->body_buffer, ls->max_body);
  fprintf(f, "header-timeout = %s\n", lk_gw_dur_exact(ls->header_timeout, a, sizeof a));
  fprintf(f, "idle-timeout = %s\n", lk_gw_dur_exact(ls->idle_timeout, a, sizeof a));
  fprintf(f, "drain-timeout = %s\n", lk_gw_dur_exact(ls->drain_timeout, a, sizeof a));
  fprintf(f, "upstream-client = %s\n",
          ls->upstream_client == LK_HTTP_TRANSPORT_NATIVE ? "native" : "curl");
  fprintf(f, "generation-header = %s\n", ls->generation_header ? "on" : "off");
  fprintf(f, "\n[admin]\nenabled = %s\n", c->admin.enabled ? "true" : "false");
  dump_addr(f, &c->admin.addr);
  static const char *const levels[] = {"error", "warn", "info", "debug"};
  fprintf(f, "\n[log]\naccess = %s\nlevel = %s\n", c->log.access ? c->log.access : "off",
          levels[c->log.level]);
  for (size_t i = 0; i < c->n_clusters; i++) {
    const lk_gw_cluster *k = &c->clusters[i];
    fprintf(f, "\n[cluster %s]\n", k->name);
    for (size_t j = 0; j < k->n_endpoints; j++)
      fprintf(f, "endpoint = %s\n", k->endpoints[j].key);
    const lk_gw_outlier *o = &k->outlier;
    fprintf(f, "eject-5xx = %d\neject-connect-failures = %d\n", o->consecutive_5xx,
            o->consecutive_connect_failures);
    fprintf(f, "eject-base-time = %s\n", lk_gw_dur_exact(o->base_time, a, sizeof a));
    fprintf(f, "eject-max-time = %s\n", lk_gw_dur_exact(o->max_time, a, sizeof a));
    fprintf(f, "eject-max-percent = %s\n", num(o->max_percent, (char[32]){0}));
    const lk_gw_health *h = &k->health;
    if (h->enabled) {
      fprintf(f, "health-path = %s\n", h->path);
      fprintf(f, "health-interval = %s\n", lk_gw_dur_exact(h->interval, a, sizeof a));
      fprintf(f, "health-timeout = %s\n", lk_gw_dur_exact(h->timeout, a, sizeof a));
      fprintf(f, "health-healthy = %d\nhealth-unhealthy = %d\n", h->healthy_threshold,
              h->unhealthy_threshold);
    }
  }
  for (size_t i = 0; i < c->n_routes; i++) {
    const lk_gw_route *r = &c->routes[i];
    fprintf(f, "\n[route %s]\n# policy %s", r->name, r->policy.version);
    if (r->next)
      fprintf(f, ", candidate %s", r->next->version);
    fprintf(f, "\nhost = %s\nprefix = %s\ncluster = %s\n", r->host ? r->host : "*", r->prefix,
            r->cluster->name);
    fputs(r->policy.canonical, f);
    if (r->next) {
      fprintf(f, "rollout-percent = %s\nrollout-margin = %s\nrollout-min-sample = %" PRIu64 "\n",
              num(r->rollout.percent, (char[32]){0}), num(r->rollout.margin, (char[32]){0}),
              r->rollout.min_sample);
      dump_next(f, r->policy.canonical, r->next->canonical, r->policy.n_headers);
    }
  }
  if (fclose(f) != 0) {
    free(*out);
    *out = NULL;
    return LK_ENOMEM;
  }
  if (len)
    *len = l;
  return LK_OK;
}
