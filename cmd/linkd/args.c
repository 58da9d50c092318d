/* SPDX-License-Identifier: MIT */
#include "args.h"

#include "writeout.h"

#include <linkd/http.h>
#include <linkd/idem.h>

#include <curl/curl.h>

#include <ctype.h>
#include <errno.h>

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const struct {
  const char *cmd, *method;
} commands[] = {
    {"get", "GET"},   {"head", "HEAD"},   {"put", "PUT"},
    {"post", "POST"}, {"patch", "PATCH"}, {"delete", "DELETE"},
};

const char *cli_command_method(const char *cmd) {
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (strcmp(commands[i].cmd, cmd) == 0)
      return commands[i].method;
  return NULL;
}

enum {
  O_JSON = 256,
  O_CONFIG,
  O_NO_CONFIG,
  O_MAX_REDIRS,
  O_FAIL_WITH_BODY,
  O_DATA_BINARY,
  O_DATA_RAW,
  O_DATA_URLENCODE,
  O_COMPRESSED,
  O_RESOLVE,
  O_CONNECT_TO,
  O_POLICY /* O_POLICY + cli_field: a policy setting */
};

static const struct option long_opts[] = {
    {"header", required_argument, NULL, 'H'},
    {"data", required_argument, NULL, 'd'},
    {"data-binary", required_argument, NULL, O_DATA_BINARY},
    {"data-raw", required_argument, NULL, O_DATA_RAW},
    {"data-urlencode", required_argument, NULL, O_DATA_URLENCODE},
    {"get", no_argument, NULL, 'G'},
    {"user", required_argument, NULL, 'u'},
    {"user-agent", required_argument, NULL, 'A'},
    {"request", required_argument, NULL, 'X'},
    {"head", no_argument, NULL, 'I'},
    {"output", required_argument, NULL, 'o'},
    {"remote-name", no_argument, NULL, 'O'},
    {"dump-header", required_argument, NULL, 'D'},
    {"include", no_argument, NULL, 'i'},
    {"silent", no_argument, NULL, 's'},
    {"show-error", no_argument, NULL, 'S'},
    {"fail", no_argument, NULL, 'f'},
    {"fail-with-body", no_argument, NULL, O_FAIL_WITH_BODY},
    {"write-out", required_argument, NULL, 'w'},
    {"verbose", no_argument, NULL, 'v'},
    {"location", no_argument, NULL, 'L'},
    {"max-redirs", required_argument, NULL, O_MAX_REDIRS},
    {"insecure", no_argument, NULL, 'k'},
    {"max-time", required_argument, NULL, 'm'},
    {"help", no_argument, NULL, 'h'},
    {"json", no_argument, NULL, O_JSON},
    {"config", required_argument, NULL, O_CONFIG},
    {"no-config", no_argument, NULL, O_NO_CONFIG},
    {"compressed", no_argument, NULL, O_COMPRESSED},
    {"resolve", required_argument, NULL, O_RESOLVE},
    {"connect-to", required_argument, NULL, O_CONNECT_TO},
    {"deadline", required_argument, NULL, O_POLICY + CLI_F_DEADLINE},
    {"attempt-timeout", required_argument, NULL, O_POLICY + CLI_F_ATTEMPT_TIMEOUT},
    {"connect-timeout", required_argument, NULL, O_POLICY + CLI_F_CONNECT_TIMEOUT},
    {"dns-timeout", required_argument, NULL, O_POLICY + CLI_F_DNS_TIMEOUT},
    {"tls-timeout", required_argument, NULL, O_POLICY + CLI_F_TLS_TIMEOUT},
    {"write-timeout", required_argument, NULL, O_POLICY + CLI_F_WRITE_TIMEOUT},
    {"first-byte-timeout", required_argument, NULL, O_POLICY + CLI_F_FIRST_BYTE_TIMEOUT},
    {"idle-timeout", required_argument, NULL, O_POLICY + CLI_F_IDLE_TIMEOUT},
    {"max-attempts", required_argument, NULL, O_POLICY + CLI_F_MAX_ATTEMPTS},
    {"backoff", required_argument, NULL, O_POLICY + CLI_F_BACKOFF},
    {"base", required_argument, NULL, O_POLICY + CLI_F_BASE},
    {"max-delay", required_argument, NULL, O_POLICY + CLI_F_MAX_DELAY},
    {"jitter", required_argument, NULL, O_POLICY + CLI_F_JITTER},
    {"idempotency-key", required_argument, NULL, O_POLICY + CLI_F_IDEMPOTENCY_KEY},
    {"retry-on", required_argument, NULL, O_POLICY + CLI_F_RETRY_ON},
    {"budget", required_argument, NULL, O_POLICY + CLI_F_BUDGET},
    {"cacert", required_argument, NULL, O_POLICY + CLI_F_CACERT},
    {"cert", required_argument, NULL, O_POLICY + CLI_F_CERT},
    {"key", required_argument, NULL, O_POLICY + CLI_F_KEY},
    {"pass", required_argument, NULL, O_POLICY + CLI_F_PASS},
    {NULL, 0, NULL, 0},
};

static const char short_opts[] = ":H:d:X:IGu:A:o:OD:isSfw:vLkE:m:h";

/* The option getopt just complained about, for the message. */
static const char *bad_option(char **argv, int c) {
  static char buf[64];
  const char *arg = argv[optind - 1];
  if (strncmp(arg, "--", 2) == 0 && (c == ':' || optopt == 0)) {
    snprintf(buf, sizeof buf, "%.*s", (int)strcspn(arg, "="), arg);
    return buf;
  }
  snprintf(buf, sizeof buf, "-%c", optopt > 0 && optopt < 128 ? optopt : '?');
  return buf;
}

/* getopt_long takes any unambiguous prefix of a long option ("--retry 5xx" as --retry-on), and
 * a prefix means something else in curl or in a later linkd. The option just returned is the
 * argv element before optind, or before its separate argument: it must be the name in full. */
static bool abbreviated(char **argv, int idx, char *err, size_t cap) {
  const struct option *lo = &long_opts[idx];
  int at = optind - 1;
  if (lo->has_arg == required_argument && at > 0 && optarg == argv[at])
    at--; /* "--name value" */
  const char *arg = argv[at];
  if (strncmp(arg, "--", 2) != 0)
    return false;
  size_t n = strcspn(arg + 2, "=");
  if (n == strlen(lo->name) && strncmp(arg + 2, lo->name, n) == 0)
    return false;
  snprintf(err, cap, "unknown option '%.*s' (did you mean --%s? long options are not abbreviated)",
           (int)n + 2, arg, lo->name);
  return true;
}

bool cli_args_implicit(const char *a) {
  if (a[0] == '-')
    return strcmp(a, "-h") != 0 && strcmp(a, "--help") != 0 && strcmp(a, "--version") != 0;
  return strstr(a, "://") || strpbrk(a, ".:/") || strcasecmp(a, "localhost") == 0;
}

/* An RFC 9110 method token. */
static bool is_token(const char *s) {
  if (!*s)
    return false;
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && !strchr("!#$%&'*+-.^_`|~", *s))
      return false;
  return true;
}

int cli_header_check(const char *name, const char *value, char *err, size_t cap) {
  if (strcasecmp(name, "Content-Length") == 0 || strcasecmp(name, "Transfer-Encoding") == 0) {
    snprintf(err, cap, "%s is set by linkd: a body (-d) is sent with a Content-Length of its size",
             name);
    return -1;
  }
  size_t n = strlen(value);
  if (strcasecmp(name, "Idempotency-Key") != 0 || lk_idem_key_valid(value, n))
    return 0;
  /* lk_idem_key_valid()'s rule, said the way the control-character message says its own. */
  const char *rule = "a key is 1 to 255 visible ASCII characters: no spaces or controls";
  if (n == 0) {
    snprintf(err, cap, "header 'Idempotency-Key': the key is empty (%s)", rule);
  } else if (n >= LK_IDEM_KEY_MAX) {
    snprintf(err, cap, "header 'Idempotency-Key': the key is %zu characters long (%s)", n, rule);
  } else {
    size_t i = 0;
    while ((unsigned char)value[i] >= 0x21 && (unsigned char)value[i] <= 0x7e)
      i++;
    unsigned char c = (unsigned char)value[i];
    char what[32];
    if (c == ' ')
      snprintf(what, sizeof what, "a space");
    else
      snprintf(what, sizeof what, "the byte 0x%02x", c);
    snprintf(err, cap, "header 'Idempotency-Key': the key holds %s at byte %zu (%s)", what, i + 1,
             rule);
  }
  return -1;
}

/* The first header of a layer with that name and a value (not a removal); NULL if none. */
static const cli_header *header_named(const cli_settings *s, const char *name) {
  for (size_t i = 0; i < s->nheaders; i++)
    if (s->headers[i].value && strcasecmp(s->headers[i].name, name) == 0)
      return &s->headers[i];
  return NULL;
}

/* The policy refuses a timeout above LK_HTTP_DURATION_MAX (lk_http_policy_validate()), but only
 * after parsing and without naming the flag: refuse it here, with the flag. */
static bool too_long(const cli_settings *s, cli_field f) {
  int64_t v;
  switch (f) {
  case CLI_F_DEADLINE: v = s->deadline; break;
  case CLI_F_ATTEMPT_TIMEOUT: v = s->attempt_timeout; break;
  case CLI_F_CONNECT_TIMEOUT: v = s->connect_timeout; break;
  case CLI_F_DNS_TIMEOUT: v = s->dns_timeout; break;
  case CLI_F_TLS_TIMEOUT: v = s->tls_timeout; break;
  case CLI_F_WRITE_TIMEOUT: v = s->write_timeout; break;
  case CLI_F_FIRST_BYTE_TIMEOUT: v = s->first_byte_timeout; break;
  case CLI_F_IDLE_TIMEOUT: v = s->idle_timeout; break;
  default: return false;
  }
  return v > LK_HTTP_DURATION_MAX;
}

/* A scheme is a prefix: RFC 3986's ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ), then "://". A
 * "://" further on (a query's "?r=http://y") is no scheme. */
static bool has_scheme(const char *url) {
  if (!isalpha((unsigned char)url[0]))
    return false;
  size_t n = 1;
  while (isalnum((unsigned char)url[n]) || url[n] == '+' || url[n] == '-' || url[n] == '.')
    n++;
  return strncmp(url + n, "://", 3) == 0;
}

/* Whether the layer has a header of that name, a removal ("Name:") included. */
static bool header_given(const cli_settings *s, const char *name) {
  for (size_t i = 0; i < s->nheaders; i++)
    if (strcasecmp(s->headers[i].name, name) == 0)
      return true;
  return false;
}

/* "Basic " and the base64 (RFC 4648, padded) of `user`, malloc'd: -u's Authorization value. */
static char *basic_auth(const char *user) {
  static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t n = strlen(user), cap = sizeof "Basic " + (n + 2) / 3 * 4;
  char *out = malloc(cap), *p;
  if (!out)
    return NULL;
  p = out + snprintf(out, cap, "Basic ");
  const unsigned char *u = (const unsigned char *)user;
  for (size_t i = 0; i < n; i += 3) {
    unsigned v = (unsigned)u[i] << 16 | (i + 1 < n ? (unsigned)u[i + 1] << 8 : 0) |
                 (i + 2 < n ? u[i + 2] : 0);
    *p++ = b64[v >> 18 & 63];
    *p++ = b64[v >> 12 & 63];
    *p++ = i + 1 < n ? b64[v >> 6 & 63] : '=';
    *p++ = i + 2 < n ? b64[v & 63] : '=';
  }
  *p = '\0';
  return out;
}

/* The file a data part reads ("-": stdin), or NULL for text. --data-urlencode's rule is curl's:
 * the first '=' makes the rest text; without one, an '@' makes the rest a file name. */
const char *cli_data_file(const cli_data_part *d) {
  if (d->kind == CLI_DATA)
    return d->arg[0] == '@' ? d->arg + 1 : NULL;
  if (d->kind == CLI_DATA_URLENCODE && !strchr(d->arg, '=')) {
    const char *at = strchr(d->arg, '@');
    return at ? at + 1 : NULL;
  }
  return NULL;
}

static int add_data(cli_opts *o, cli_data_kind kind, const char *flag, const char *arg, char *err,
                    size_t cap) {
  cli_data_part *n = realloc(o->data, (o->ndata + 1) * sizeof *n);
  if (!n)
    return CLI_ARGS_NOMEM;
  o->data = n;
  cli_data_part *d = &o->data[o->ndata++];
  d->kind = kind;
  d->flag = flag;
  d->arg = arg;
  const char *file = cli_data_file(d);
  if (file && !*file) {
    snprintf(err, cap, "%s %s: a file name must follow '@' (or '@-' for stdin)", flag, arg);
    return CLI_ARGS_USAGE;
  }
  return CLI_ARGS_OK;
}

int cli_remote_name(const char *url, char *name, size_t cap, char *err, size_t ecap) {
  CURLU *u = curl_url();
  char *path = NULL;
  int ret = -1;
  if (!u) {
    snprintf(err, ecap, "out of memory");
    return -1;
  }
  CURLUcode rc = curl_url_set(u, CURLUPART_URL, url, 0);
  if (rc == CURLUE_OK)
    rc = curl_url_get(u, CURLUPART_PATH, &path, 0);
  if (rc != CURLUE_OK) {
    snprintf(err, ecap, "'%s' is not a valid URL: %s", url, curl_url_strerror(rc));
  } else {
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
      snprintf(err, ecap,
               "-O/--remote-name: '%s' has no file name at the end of its path (name one with "
               "-o FILE)",
               url);
    else if (strlen(base) >= cap)
      snprintf(err, ecap, "-O/--remote-name: the file name in '%s' is too long", url);
    else {
      memcpy(name, base, strlen(base) + 1);
      ret = 0;
    }
  }
  curl_free(path);
  curl_url_cleanup(u);
  return ret;
}

int cli_entries_add(cli_entries *e, const char *value, const char *origin) {
  if (e->n == e->cap) {
    size_t nc = e->cap ? 2 * e->cap : 4;
    const char **v = realloc(e->v, nc * sizeof *v);
    if (!v)
      return -1;
    e->v = v;
    const char **o = realloc(e->origin, nc * sizeof *o);
    if (!o)
      return -1;
    e->origin = o;
    e->cap = nc;
  }
  e->v[e->n] = value;
  e->origin[e->n++] = origin;
  return 0;
}

void cli_entries_free(cli_entries *e) {
  free(e->v);
  free(e->origin);
  memset(e, 0, sizeof *e);
}

/* -m takes seconds as curl does ("-m 2.5"), or a linkd duration ("-m 250ms"). */
static int set_max_time(cli_opts *o, const char *v, char *m, size_t cap) {
  char buf[64];
  size_t n = strlen(v);
  if (n > 0 && n < sizeof buf - 1 && strspn(v, "0123456789.") == n) {
    snprintf(buf, sizeof buf, "%ss", v);
    v = buf;
  }
  return cli_settings_set(&o->flags, "deadline", v, cli_origin_flag, false, m, cap);
}

int cli_args_parse(int argc, char **argv, cli_opts *o, char *err, size_t cap) {
  memset(o, 0, sizeof *o);
  o->max_redirs = 50;
  cli_settings_init(&o->flags);
  int sub_argc;
  char **sub_argv;
  if (argc >= 2 && (o->method = cli_command_method(argv[1]))) {
    o->command = argv[1];
    sub_argc = argc - 1;
    sub_argv = argv + 1;
  } else if (argc >= 2 && cli_args_implicit(argv[1])) {
    /* `linkd [flags] URL`: argv[0] stands where the command would be. */
    o->implicit = true;
    sub_argc = argc;
    sub_argv = argv;
  } else {
    snprintf(err, cap, "unknown command '%s'", argc < 2 ? "" : argv[1]);
    return CLI_ARGS_USAGE;
  }
  optind = 0; /* GNU: full re-initialisation, so tests may parse many times */
  opterr = 0;
  bool help = false, head = false;
  const char *x_method = NULL, *user_agent = NULL;
  int c, idx;
  while ((c = getopt_long(sub_argc, sub_argv, short_opts, long_opts, (idx = -1, &idx))) != -1) {
    if (idx >= 0 && abbreviated(sub_argv, idx, err, cap))
      return CLI_ARGS_USAGE;
    char m[384];
    int rc = CLI_SET_OK;
    if (c == 'E') /* curl's -E, --cert */
      c = O_POLICY + CLI_F_CERT;
    switch (c) {
    case 'H': {
      if (optarg[0] == '@') { /* curl 7.55's headers from a file */
        snprintf(err, cap, "-H %s: headers are not read from a file; give each as -H 'Name: value'",
                 optarg);
        return CLI_ARGS_USAGE;
      }
      rc = cli_settings_set(&o->flags, "header", optarg, cli_origin_flag, false, m, sizeof m);
      if (rc != CLI_SET_OK && rc != CLI_SET_NOMEM) {
        snprintf(err, cap, "-H: %s", m);
        return CLI_ARGS_USAGE;
      }
      if (rc != CLI_SET_OK)
        break;
      /* What lk_http_request_add_header() would refuse with a bare "invalid argument". */
      const cli_header *h = &o->flags.headers[o->flags.nheaders - 1];
      if (h->value && cli_header_check(h->name, h->value, m, sizeof m) != 0) {
        snprintf(err, cap, "-H: %s", m);
        return CLI_ARGS_USAGE;
      }
      if (h->value && strcasecmp(h->name, "Idempotency-Key") == 0 &&
          header_named(&o->flags, "Idempotency-Key") != h) {
        snprintf(err, cap, "-H: Idempotency-Key given twice (a call has one key)");
        return CLI_ARGS_USAGE;
      }
      break;
    }
    /* curl's data options: each one a part of the body (or, with -G, of the query). */
    case 'd':
    case O_DATA_BINARY:
    case O_DATA_RAW:
    case O_DATA_URLENCODE: {
      int ar = c == 'd'             ? add_data(o, CLI_DATA, "-d", optarg, err, cap)
               : c == O_DATA_BINARY ? add_data(o, CLI_DATA, "--data-binary", optarg, err, cap)
               : c == O_DATA_RAW
                   ? add_data(o, CLI_DATA_RAW, "--data-raw", optarg, err, cap)
                   : add_data(o, CLI_DATA_URLENCODE, "--data-urlencode", optarg, err, cap);
      if (ar != CLI_ARGS_OK)
        return ar;
      break;
    }
    case 'G': o->get = true; break;
    case 'u':
      if (!strchr(optarg, ':')) {
        snprintf(err, cap,
                 "-u/--user '%s' has no password: give 'USER:PASSWORD' ('USER:' for an empty "
                 "one); linkd does not prompt for it",
                 optarg);
        return CLI_ARGS_USAGE;
      }
      free(o->auth_buf);
      if (!(o->auth_buf = basic_auth(optarg)))
        return CLI_ARGS_NOMEM;
      /* As curl does: the password does not stay in the process's arguments (ps, /proc). */
      memset(optarg, '*', strlen(optarg));
      break;
    case 'A': user_agent = optarg; break;
    case 'X':
      if (!is_token(optarg)) {
        snprintf(err, cap, "-X: '%s' is not an HTTP method (an RFC 9110 token)", optarg);
        return CLI_ARGS_USAGE;
      }
      x_method = optarg;
      break;
    case 'I': head = true; break;
    case 'o': o->output = optarg; break;
    case 'O': o->remote_name = true; break;
    case 'D': o->dump_header = optarg; break;
    case 'i': o->include = true; break;
    case 's': o->silent = true; break;
    case 'S': o->show_error = true; break;
    case 'f': o->fail = true; break;
    case O_FAIL_WITH_BODY: o->fail_with_body = true; break;
    case 'w':
      if (strcmp(optarg, "@") == 0) {
        snprintf(err, cap, "-w @: a file name must follow '@' (or '@-' for stdin)");
        return CLI_ARGS_USAGE;
      }
      /* curl's -w @FILE and @-: the format is read before the call (cli_write_out_load()). */
      if (optarg[0] != '@' && cli_write_out_check(optarg, m, sizeof m) != 0) {
        snprintf(err, cap, "-w: %s", m);
        return CLI_ARGS_USAGE;
      }
      o->write_out = optarg;
      break;
    case 'v': o->verbose = true; break;
    case 'L': o->follow = true; break;
    case 'k': o->insecure = true; break;
    case 'm':
      rc = set_max_time(o, optarg, m, sizeof m);
      if (rc != CLI_SET_OK && rc != CLI_SET_NOMEM) {
        snprintf(err, cap, "-m/--max-time: %s", m);
        return CLI_ARGS_USAGE;
      }
      if (rc == CLI_SET_OK && too_long(&o->flags, CLI_F_DEADLINE)) {
        snprintf(err, cap, "-m/--max-time: '%s' is too long: at most 100 days (2400h)", optarg);
        return CLI_ARGS_USAGE;
      }
      break;
    case O_MAX_REDIRS: {
      char *end;
      errno = 0;
      long n = strtol(optarg, &end, 10);
      if (!*optarg || *end || errno || n < -1 || n > 1000) {
        snprintf(err, cap, "--max-redirs: '%s' is not a number from -1 (no limit) to 1000", optarg);
        return CLI_ARGS_USAGE;
      }
      o->max_redirs = (int)n;
      break;
    }
    case 'h': help = true; break;
    case O_JSON: o->json = true; break;
    case O_CONFIG: o->config = optarg; break;
    case O_NO_CONFIG: o->no_config = true; break;
    case O_COMPRESSED: o->compressed = true; break;
    case O_RESOLVE:
    case O_CONNECT_TO: {
      /* curl's syntax, checked by the library's own rule, so that nothing is refused later */
      const char *why = NULL;
      bool res = c == O_RESOLVE;
      if ((res ? lk_http_resolve_check(optarg, &why) : lk_http_connect_to_check(optarg, &why)) !=
          LK_OK) {
        snprintf(err, cap, "--%s '%s': %s", res ? "resolve" : "connect-to", optarg, why);
        return CLI_ARGS_USAGE;
      }
      if (cli_entries_add(res ? &o->resolve : &o->connect_to, optarg, cli_origin_flag) != 0)
        return CLI_ARGS_NOMEM;
      break;
    }
    case ':':
      snprintf(err, cap, "%s needs a value", bad_option(sub_argv, c));
      return CLI_ARGS_USAGE;
    case '?':
      snprintf(err, cap, "unknown option '%s'", bad_option(sub_argv, c));
      return CLI_ARGS_USAGE;
    default: {
      cli_field f = (cli_field)(c - O_POLICY);
      const char *key = cli_settings_key(f);
      rc = cli_settings_set(&o->flags, key, optarg, cli_origin_flag, false, m, sizeof m);
      if (rc != CLI_SET_OK && rc != CLI_SET_NOMEM) {
        snprintf(err, cap, "--%s: %s", key, m);
        return CLI_ARGS_USAGE;
      }
      if (rc == CLI_SET_OK && too_long(&o->flags, f)) {
        snprintf(err, cap, "--%s: '%s' is too long: at most 100 days (2400h)", key, optarg);
        return CLI_ARGS_USAGE;
      }
      break;
    }
    }
    if (rc == CLI_SET_NOMEM)
      return CLI_ARGS_NOMEM;
  }
  if (o->implicit) {
    if (x_method && head) {
      snprintf(err, cap, "-X and -I/--head do not mix: -I sends HEAD");
      return CLI_ARGS_USAGE;
    }
    /* curl's choice: -X's method, HEAD for -I, POST with a body (not with -G), GET otherwise. */
    o->method = x_method ? x_method : head ? "HEAD" : o->ndata && !o->get ? "POST" : "GET";
    o->command = "request";
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
      if (strcmp(commands[i].method, o->method) == 0)
        o->command = commands[i].cmd;
    if (head)
      o->include = true;
  } else {
    if (x_method) {
      snprintf(err, cap, "-X is for 'linkd [options] URL'; '%s' already sends %s", o->command,
               o->method);
      return CLI_ARGS_USAGE;
    }
    if (head && strcmp(o->method, "HEAD") != 0) {
      snprintf(err, cap, "-I/--head sends HEAD; '%s' sends %s", o->command, o->method);
      return CLI_ARGS_USAGE;
    }
    if (head)
      o->include = true;
    if (o->get && strcmp(o->method, "GET") != 0 && strcmp(o->method, "HEAD") != 0) {
      snprintf(err, cap, "-G/--get sends GET (HEAD with -I); '%s' sends %s", o->command, o->method);
      return CLI_ARGS_USAGE;
    }
  }
  /* -A and -u are headers, as in curl: an -H of the same name (or its removal) wins. */
  char m[384];
  int rc = CLI_SET_OK;
  if (user_agent && !header_given(&o->flags, "User-Agent")) {
    size_t n = strlen(user_agent) + sizeof "User-Agent: ";
    char *h = malloc(n);
    if (!h)
      return CLI_ARGS_NOMEM;
    snprintf(h, n, "User-Agent: %s", user_agent); /* "User-Agent: " removes it: -A '' sends none */
    rc = cli_settings_set(&o->flags, "header", h, cli_origin_flag, false, m, sizeof m);
    free(h);
    if (rc != CLI_SET_OK && rc != CLI_SET_NOMEM) {
      snprintf(err, cap, "-A/--user-agent: %s", m);
      return CLI_ARGS_USAGE;
    }
  }
  if (rc == CLI_SET_OK && o->auth_buf && !header_given(&o->flags, "Authorization")) {
    char h[sizeof "Authorization: " + 8192];
    if ((size_t)snprintf(h, sizeof h, "Authorization: %s", o->auth_buf) >= sizeof h) {
      snprintf(err, cap, "-u/--user: the user name and password are too long");
      return CLI_ARGS_USAGE;
    }
    rc = cli_settings_set(&o->flags, "header", h, cli_origin_flag, false, m, sizeof m);
  }
  if (rc == CLI_SET_NOMEM)
    return CLI_ARGS_NOMEM;
  if (help)
    return CLI_ARGS_HELP;
  if (optind >= sub_argc) {
    snprintf(err, cap, "%s needs a URL", o->implicit ? "linkd" : o->command);
    return CLI_ARGS_USAGE;
  }
  if (sub_argc - optind > 1) {
    snprintf(err, cap, "one URL per call; unexpected '%s'", sub_argv[optind + 1]);
    return CLI_ARGS_USAGE;
  }
  o->url = sub_argv[optind];
  if (!has_scheme(o->url)) {
    /* As curl: a URL without a scheme is http://. */
    size_t n = strlen(o->url) + sizeof "http://";
    if (!(o->url_buf = malloc(n)))
      return CLI_ARGS_NOMEM;
    snprintf(o->url_buf, n, "http://%s", o->url);
    o->url = o->url_buf;
  }
  if (strncasecmp(o->url, "http://", 7) != 0 && strncasecmp(o->url, "https://", 8) != 0) {
    snprintf(err, cap, "'%s' is not an http:// or https:// URL", o->url);
    return CLI_ARGS_USAGE;
  }
  if (o->ndata && !o->get && (strcmp(o->method, "GET") == 0 || strcmp(o->method, "HEAD") == 0)) {
    snprintf(err, cap,
             "%s sends no body: -d/--data is for put, post, patch and delete (-G/--get puts "
             "the data in the URL's query)",
             o->implicit ? o->method : o->command);
    return CLI_ARGS_USAGE;
  }
  if (o->fail && o->fail_with_body) {
    snprintf(err, cap, "-f/--fail and --fail-with-body do not mix: the body is printed or not");
    return CLI_ARGS_USAGE;
  }
  if (o->remote_name && o->output) {
    snprintf(err, cap, "-o/--output and -O/--remote-name do not mix: one body, one file");
    return CLI_ARGS_USAGE;
  }
  if (o->json && o->dump_header && strcmp(o->dump_header, "-") == 0) {
    snprintf(err, cap, "--json and -D - do not mix: the JSON result goes to stdout");
    return CLI_ARGS_USAGE;
  }
  if (o->json && o->output && strcmp(o->output, "-") == 0) {
    snprintf(err, cap, "--json and -o - do not mix: the JSON result goes to stdout");
    return CLI_ARGS_USAGE;
  }
  if (o->json && o->include) {
    snprintf(err, cap, "--json and -i/--include do not mix: the JSON result goes to stdout");
    return CLI_ARGS_USAGE;
  }
  if (o->json && o->write_out) {
    snprintf(err, cap, "--json and -w/--write-out do not mix: the JSON result goes to stdout");
    return CLI_ARGS_USAGE;
  }
  /* stdin is read once: by one data part or by -w @-. */
  const cli_data_part *std_in = NULL;
  for (size_t i = 0; i < o->ndata; i++) {
    const char *f = cli_data_file(&o->data[i]);
    if (!f || strcmp(f, "-") != 0)
      continue;
    if (std_in) {
      snprintf(err, cap, "%s %s and %s %s do not mix: stdin is read once", std_in->flag,
               std_in->arg, o->data[i].flag, o->data[i].arg);
      return CLI_ARGS_USAGE;
    }
    std_in = &o->data[i];
  }
  if (std_in && o->write_out && strcmp(o->write_out, "@-") == 0) {
    snprintf(err, cap, "%s %s and -w @- do not mix: stdin is read once", std_in->flag, std_in->arg);
    return CLI_ARGS_USAGE;
  }
  /* The header's key would win and the flag be ignored: one key, given one way. */
  const cli_header *ik = header_named(&o->flags, "Idempotency-Key");
  if (ik && (o->flags.set & CLI_BIT(CLI_F_IDEMPOTENCY_KEY))) {
    const cli_settings *s = &o->flags;
    snprintf(err, cap,
             "-H 'Idempotency-Key: %s' and --idempotency-key %s do not mix: give the call's key "
             "one way",
             ik->value,
             s->idem_mode == LK_IDEM_KEY ? s->idem_key : lk_idem_mode_name(s->idem_mode));
    return CLI_ARGS_USAGE;
  }
  return CLI_ARGS_OK;
}

void cli_opts_free(cli_opts *o) {
  cli_settings_free(&o->flags);
  cli_entries_free(&o->resolve);
  cli_entries_free(&o->connect_to);
  free(o->data);
  o->data = NULL;
  o->ndata = 0;
  free(o->auth_buf);
  o->auth_buf = NULL;
  free(o->url_buf);
  o->url_buf = NULL;
  free(o->write_out_buf);
  o->write_out_buf = NULL;
}
