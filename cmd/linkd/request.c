/* SPDX-License-Identifier: MIT */
#include "request.h"

#include "args.h"
#include "config.h"
#include "exitcodes.h"
#include "help.h"
#include "output.h"
#include "policy.h"
#include "writeout.h"

#include <curl/curl.h>
#include <linkd/clock.h>
#include <linkd/deadline.h>
#include <linkd/http.h>
#include <linkd/version.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* The token SIGINT/SIGTERM fire; lk_http_cancel_fire() is async-signal-safe. */
static lk_http_cancel *volatile g_cancel;

static void on_signal(int sig) {
  (void)sig;
  if (g_cancel)
    lk_http_cancel_fire(g_cancel);
}

/* Host (IPv6 in brackets) and port (the scheme's default if none) of the URL, for matching
 * config sections; also rejects URLs libcurl cannot parse. 0 or -1 with a message. */
static int url_host_port(const char *url, char *host, size_t cap, int *port, char *err,
                         size_t ecap) {
  CURLU *u = curl_url();
  if (!u) {
    snprintf(err, ecap, "out of memory");
    return -1;
  }
  char *h = NULL, *p = NULL;
  CURLUcode rc = curl_url_set(u, CURLUPART_URL, url, 0);
  if (rc == CURLUE_OK)
    rc = curl_url_get(u, CURLUPART_HOST, &h, 0);
  if (rc == CURLUE_OK)
    rc = curl_url_get(u, CURLUPART_PORT, &p, CURLU_DEFAULT_PORT);
  int ret = 0;
  if (rc != CURLUE_OK) {
    snprintf(err, ecap, "'%s' is not a valid URL: %s", url, curl_url_strerror(rc));
    ret = -1;
  } else if (strlen(h) >= cap) {
    snprintf(err, ecap, "the host name in '%s' is too long", url);
    ret = -1;
  } else {
    memcpy(host, h, strlen(h) + 1);
    *port = atoi(p);
  }
  curl_free(h);
  curl_free(p);
  curl_url_cleanup(u);
  return ret;
}

/* The largest -d @FILE body, the same bound as the library's default response limit: linkd
 * holds the body in memory to replay it on every attempt, and -d @/dev/zero must end. */
#define CLI_BODY_MAX ((size_t)64 << 20)

/* Reads all of `f`, at most `max` bytes, into a malloc'd buffer. 0, -1 (errno set), or -2 if
 * there is more than `max`. */
static int slurp(FILE *f, size_t max, char **out, size_t *len) {
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  if (!buf)
    return -1;
  for (;;) {
    if (n == cap) {
      if (n > max) {
        free(buf);
        return -2;
      }
      /* Up to max + 1 bytes: one more than allowed tells "too big" from "exactly max". */
      size_t ncap = cap > (max + 1) / 2 ? max + 1 : cap * 2;
      char *nb = realloc(buf, ncap);
      if (!nb) {
        free(buf);
        errno = ENOMEM;
        return -1;
      }
      buf = nb;
      cap = ncap;
    }
    size_t r = fread(buf + n, 1, cap - n, f);
    n += r;
    if (r == 0) {
      if (ferror(f)) {
        int e = errno ? errno : EIO;
        free(buf);
        errno = e;
        return -1;
      }
      break;
    }
  }
  if (n > max) {
    free(buf);
    return -2;
  }
  *out = buf;
  *len = n;
  return 0;
}

/* A growing buffer for the body (or -G's query). */
typedef struct buf {
  char *p;
  size_t len, cap;
} buf;

static int buf_add(buf *b, const char *p, size_t n) {
  if (b->cap - b->len <= n) {
    size_t ncap = b->cap ? b->cap : 256;
    while (ncap - b->len <= n)
      ncap *= 2;
    char *np = realloc(b->p, ncap);
    if (!np)
      return -1;
    b->p = np;
    b->cap = ncap;
  }
  memcpy(b->p + b->len, p, n);
  b->len += n;
  b->p[b->len] = '\0';
  return 0;
}

/* --data-urlencode's encoding, curl's (as curl 7.88 sends it): RFC 3986's unreserved characters
 * as they are, a space as '+' (the form encoding), every other byte as %XX. */
static int buf_add_escaped(buf *b, const char *p, size_t n) {
  static const char hex[] = "0123456789ABCDEF";
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)p[i];
    char e[3] = {'%', hex[c >> 4], hex[c & 15]};
    int rc = c == ' ' ? buf_add(b, "+", 1)
             : isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~'
                 ? buf_add(b, (const char *)&c, 1)
                 : buf_add(b, e, 3);
    if (rc != 0)
      return -1;
  }
  return 0;
}

/* The bytes of a part's file ("-": stdin). 0 or CLI_EXIT_NOINPUT after a message. */
static int read_part(const cli_data_part *d, const char *path, char **out, size_t *len) {
  bool std_in = strcmp(path, "-") == 0;
  FILE *f = std_in ? stdin : fopen(path, "rb");
  int rc = f ? slurp(f, CLI_BODY_MAX, out, len) : -1;
  if (rc == -2)
    fprintf(stderr, "linkd: %s %s: larger than %zu MiB, the body limit\n", d->flag, d->arg,
            CLI_BODY_MAX >> 20);
  else if (rc != 0)
    fprintf(stderr, "linkd: %s %s: cannot read: %s\n", d->flag, d->arg, strerror(errno));
  if (f && !std_in)
    fclose(f);
  return rc == 0 ? 0 : CLI_EXIT_NOINPUT;
}

/* The body of the data options, as curl makes it: the parts in order, joined with '&'; -d and
 * --data-binary: the text, or @FILE's bytes as they are; --data-raw: the text; --data-urlencode:
 * [NAME=]CONTENT with CONTENT (the text after '=', or NAME@FILE's bytes) percent-encoded. At
 * most CLI_BODY_MAX bytes in all. 0, or an exit code after a message. */
static int load_body(const cli_opts *o, char **body, size_t *len) {
  buf b = {NULL, 0, 0};
  int code = 0;
  if (buf_add(&b, "", 0) != 0)
    code = CLI_EXIT_FAILURE;
  for (size_t i = 0; i < o->ndata && !code; i++) {
    const cli_data_part *d = &o->data[i];
    const char *file = cli_data_file(d), *text = d->arg;
    char *content = NULL;
    size_t n = 0;
    if (file && (code = read_part(d, file, &content, &n)) != 0)
      break;
    if (i > 0 && buf_add(&b, "&", 1) != 0)
      code = CLI_EXIT_FAILURE;
    else if (d->kind != CLI_DATA_URLENCODE)
      code = buf_add(&b, file ? content : text, file ? n : strlen(text)) ? CLI_EXIT_FAILURE : 0;
    else {
      /* curl's forms: NAME=TEXT and =TEXT, NAME@FILE and @FILE, or TEXT. */
      const char *sep = strchr(text, '=');
      if (!sep)
        sep = file ? file - 1 : NULL;
      size_t nlen = sep ? (size_t)(sep - text) : 0;
      const char *value = file ? content : sep ? sep + 1 : text;
      size_t vlen = file ? n : strlen(value);
      if ((nlen && (buf_add(&b, text, nlen) != 0 || buf_add(&b, "=", 1) != 0)) ||
          buf_add_escaped(&b, value, vlen) != 0)
        code = CLI_EXIT_FAILURE;
    }
    free(content);
    if (code == CLI_EXIT_FAILURE)
      fprintf(stderr, "linkd: out of memory for the request body\n");
    else if (!code && b.len > CLI_BODY_MAX) {
      fprintf(stderr, "linkd: the data options make a body larger than %zu MiB, the body limit\n",
              CLI_BODY_MAX >> 20);
      code = CLI_EXIT_NOINPUT;
    }
  }
  if (code) {
    free(b.p);
    return code;
  }
  *body = b.p;
  *len = b.len;
  return 0;
}

/* -G: the URL with the data appended to its query ('?' or '&', as curl does it, through
 * libcurl's URL API). NULL with a message in err. */
static char *url_with_query(const char *url, const char *query, char *err, size_t cap) {
  CURLU *u = curl_url();
  char *out = NULL, *copy = NULL;
  if (!u) {
    snprintf(err, cap, "out of memory");
    return NULL;
  }
  CURLUcode rc = curl_url_set(u, CURLUPART_URL, url, 0);
  if (rc == CURLUE_OK && *query)
    rc = curl_url_set(u, CURLUPART_QUERY, query, CURLU_APPENDQUERY);
  if (rc == CURLUE_OK)
    rc = curl_url_get(u, CURLUPART_URL, &out, 0);
  /* A query part is taken as it is: what the URL then is must parse as one (no spaces). */
  if (rc == CURLUE_OK)
    rc = curl_url_set(u, CURLUPART_URL, out, 0);
  if (rc != CURLUE_OK)
    snprintf(err, cap,
             "-G/--get: the data '%.200s' makes no valid URL of '%s': %s (--data-urlencode "
             "encodes it)",
             query, url, curl_url_strerror(rc));
  else if (!(copy = strdup(out)))
    snprintf(err, cap, "out of memory");
  curl_free(out);
  curl_url_cleanup(u);
  return copy;
}

/* Where the response goes. Opened before the call, so an unwritable -o fails before anything
 * is sent; a file this run created is removed again if no response arrives. */
typedef struct out_file {
  FILE *f;
  const char *flag; /* "-o" (the body) or "-D" (the heads), for messages */
  const char *path; /* NULL: stdout */
  dev_t dev;        /* of a regular file: two flags must not name the same one */
  ino_t ino;
  bool created;
  bool regular;       /* a regular file: truncated to what was written (not a device or a pipe) */
  int err;            /* errno of the first write to f that failed; 0: none */
  bool stdout_failed; /* a write to stdout failed (and was told) */
  char failed[4200];  /* the first write failure, as told: "-o FILE: write failed: REASON"; "" */
} out_file;

static int out_open(out_file *o, const char *flag, const char *path) {
  o->f = stdout;
  o->flag = flag;
  o->path = NULL;
  o->created = false;
  o->regular = false;
  o->err = 0;
  o->stdout_failed = false;
  o->failed[0] = '\0';
  if (!path || strcmp(path, "-") == 0)
    return 0;
  struct stat st;
  bool existed = stat(path, &st) == 0;
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0 || !(o->f = fdopen(fd, "wb"))) {
    fprintf(stderr, "linkd: %s %s: cannot write: %s\n", flag, path, strerror(errno));
    if (fd >= 0)
      close(fd);
    return CLI_EXIT_CANTCREAT;
  }
  o->path = path;
  o->created = !existed;
  /* /dev/null, /dev/stdout on a pipe, a FIFO: there is nothing to truncate (ftruncate fails on
   * them), and the bytes written are all there is. */
  o->regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  o->dev = st.st_dev;
  o->ino = st.st_ino;
  return 0;
}

/* Whether the messages of failures after the call started are held back: -s without -S. */
static bool quiet(const cli_opts *o) { return o->silent && !o->show_error; }

/* Writes n bytes of the response, keeping the errno of the first failure: a body larger than
 * stdio's buffer fails here, not in the fflush() after it. */
static void out_write(out_file *o, const void *p, size_t n) {
  if (n && fwrite(p, 1, n, o->f) != n && !o->err)
    o->err = errno ? errno : EIO;
}

/* A failed write: told (unless `hush`) and kept for --json, -w and the summary (the first). */
static void out_failed(out_file *o, const char *what, const char *path, int e, bool hush) {
  char m[sizeof o->failed];
  snprintf(m, sizeof m, "%s%s%s: write failed: %s", what, path ? " " : "", path ? path : "",
           strerror(e ? e : EIO));
  if (!hush)
    fprintf(stderr, "linkd: %s\n", m);
  if (!o->failed[0])
    memcpy(o->failed, m, sizeof m);
}

/* stdout holds the body (without -o), the JSON or the -w text: a failed write (a full disk) is
 * an output error as a failed -o is, with the same exit code. Flushes it; a failure is told
 * once. 0 or CLI_EXIT_CANTCREAT. */
static int stdout_check(out_file *o, bool hush) {
  if (o->stdout_failed)
    return CLI_EXIT_CANTCREAT;
  int flush = fflush(stdout), e = errno;
  if (flush == 0 && !ferror(stdout))
    return 0;
  o->stdout_failed = true;
  out_failed(o, "stdout", NULL, flush ? e : !o->path ? o->err : 0, hush);
  return CLI_EXIT_CANTCREAT;
}

/* Finishes the response's output: keep (truncated to what was written) or drop the file, or,
 * without -o, flush stdout. 0, or CLI_EXIT_CANTCREAT after a failed write (out_failed()). */
static int out_close(out_file *o, bool wrote, bool hush) {
  if (!o->path)
    return wrote ? stdout_check(o, hush) : 0;
  int e = o->err;
  if (wrote) {
    int flush = fflush(o->f);
    if (!e && (flush != 0 || ferror(o->f)))
      e = flush != 0 && errno ? errno : EIO;
    /* The file is opened without O_TRUNC (an unanswered call leaves it as it was); cut off what
     * an older, longer content left behind. */
    if (o->regular) {
      off_t end = ftello(o->f);
      if ((end < 0 || ftruncate(fileno(o->f), end) != 0) && !e)
        e = errno ? errno : EIO;
    }
  }
  if (fclose(o->f) != 0 && !e)
    e = errno ? errno : EIO;
  if (!wrote && o->created)
    unlink(o->path);
  if (!e)
    return 0;
  out_failed(o, o->flag, o->path, e, hush);
  return CLI_EXIT_CANTCREAT;
}

/* A response's head (-i, -D), keeping the errno of a failed write. */
static void out_head(out_file *o, const lk_http_response *resp) {
  cli_print_head(o->f, resp);
  if (ferror(o->f) && !o->err)
    o->err = errno ? errno : EIO;
}

/* Nothing was received: the outputs are closed unwritten (a file this run created is removed). */
static void outs_drop(out_file *out, out_file *dump, bool hush) {
  out_close(out, false, hush);
  if (dump && dump != out)
    out_close(dump, false, hush);
}

/* Config + flags -> *eff. Returns 0 or an exit code after printing a message. */
static int build_settings(const cli_opts *o, const char *host, int port, cli_config *cfg,
                          bool *have_cfg, cli_settings *eff, const char *sections[3],
                          size_t *nsections) {
  char err[768];
  *have_cfg = false;
  *nsections = 0;
  if (!o->no_config) {
    char path[4096];
    bool required;
    if (cli_config_path(o->config, path, sizeof path, &required) == 0 &&
        (required || access(path, F_OK) == 0)) {
      if (cli_config_load(cfg, path, err, sizeof err) != 0) {
        fprintf(stderr, "linkd: config error: %s\n", err);
        return CLI_EXIT_CONFIG;
      }
      *have_cfg = true;
      if (cli_config_apply(cfg, host, port, eff, sections, nsections) != 0)
        return CLI_EXIT_FAILURE;
    }
  }
  if (cli_settings_merge(eff, &o->flags) != 0)
    return CLI_EXIT_FAILURE;
  return 0;
}

/* Credentials a redirect to another host must not carry (curl drops them too, unless told
 * --location-trusted, which linkd does not have). */
static bool is_credential(const char *name) {
  return strcasecmp(name, "Authorization") == 0 || strcasecmp(name, "Cookie") == 0 ||
         strcasecmp(name, "Proxy-Authorization") == 0;
}

static bool has_header(const cli_settings *s, const char *name) {
  for (size_t i = 0; i < s->nheaders; i++)
    if (s->headers[i].value && strcasecmp(s->headers[i].name, name) == 0)
      return true;
  return false;
}

/* Whether a flag removes the header: -H 'Name:'. Beyond the config's headers, curl's form also
 * removes what linkd or libcurl would add by default (User-Agent, Accept, Content-Type). */
static bool flag_removes(const cli_settings *flags, const char *name) {
  for (size_t i = 0; i < flags->nheaders; i++)
    if (!flags->headers[i].value && strcasecmp(flags->headers[i].name, name) == 0)
      return true;
  return false;
}

/* -H 'Accept:' or -H 'Content-Type:': a verbatim request gets neither of libcurl's defaults
 * (Accept: * / *, and Content-Type: application/x-www-form-urlencoded for a body), so the one
 * not removed is added back as libcurl would send it. */
static int drop_defaults(lk_http_request *req, const cli_settings *eff, const cli_settings *flags,
                         bool body) {
  bool accept = has_header(eff, "Accept"), ctype = has_header(eff, "Content-Type");
  bool no_accept = !accept && flag_removes(flags, "Accept");
  bool no_ctype = body && !ctype && flag_removes(flags, "Content-Type");
  if (!no_accept && !no_ctype)
    return LK_OK;
  int rc = lk_http_request_set_verbatim(req, true);
  if (rc == LK_OK && !accept && !no_accept)
    rc = lk_http_request_add_header(req, "Accept", "*/*");
  if (rc == LK_OK && body && !ctype && !no_ctype)
    rc = lk_http_request_add_header(req, "Content-Type", "application/x-www-form-urlencoded");
  return rc;
}

static lk_http_request *build_request(const char *method, const char *url, const cli_settings *eff,
                                      const cli_settings *flags, bool credentials, const char *body,
                                      size_t body_len, int *code) {
  lk_http_request *req = NULL;
  int made = lk_http_request_create(method, url, &req);
  if (made != LK_OK) {
    fprintf(stderr, "linkd: cannot make a request for '%s'%s\n", url,
            made == LK_ENOMEM ? ": out of memory" : "");
    *code = made == LK_ENOMEM ? CLI_EXIT_FAILURE : CLI_EXIT_USAGE;
    return NULL;
  }
  for (size_t i = 0; i < eff->nheaders; i++) {
    if (!credentials && is_credential(eff->headers[i].name))
      continue;
    int rc = lk_http_request_add_header(req, eff->headers[i].name, eff->headers[i].value);
    if (rc != LK_OK) {
      /* What the library refuses was refused with a reason already (cli_header_check()). */
      fprintf(stderr, "linkd: header '%s': %s\n", eff->headers[i].name, lk_strerror(rc));
      bool flag = eff->origin[CLI_F_HEADER] == cli_origin_flag;
      *code = rc == LK_EINVAL ? (flag ? CLI_EXIT_USAGE : CLI_EXIT_CONFIG) : CLI_EXIT_FAILURE;
      lk_http_request_free(req);
      return NULL;
    }
  }
  if ((body && lk_http_request_set_body(req, body, body_len) != LK_OK) ||
      drop_defaults(req, eff, flags, body != NULL) != LK_OK) {
    fprintf(stderr, "linkd: out of memory for the request\n");
    *code = CLI_EXIT_FAILURE;
    lk_http_request_free(req);
    return NULL;
  }
  return req;
}

static void install_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  /* A second Ctrl-C kills at once, the usual escape hatch. */
  sa.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

/* The first write failure of the body's and the heads' outputs, as told; NULL if none. */
static const char *first_failure(const out_file *out, const out_file *dump) {
  if (out->failed[0])
    return out->failed;
  return dump && dump->failed[0] ? dump->failed : NULL;
}

/* The exit code of a finished call: the library's, or 22 under -f when the last attempt got a
 * status >= 400 (curl's rule, whatever the retries made of it). */
static int exit_code_of(const cli_opts *o, const lk_http_result *res) {
  int code = cli_exit_for_error(lk_http_result_err(res));
  size_t n = 0;
  const lk_http_attempt_info *a = lk_http_result_attempts(res, &n);
  if ((o->fail || o->fail_with_body) && n > 0 && a[n - 1].status >= 400)
    code = CLI_EXIT_HTTP_FAIL;
  return code;
}

/* Writes the response (-D heads, -i heads, body) and the chosen report; returns the exit code.
 * `hops`: with -L and -i or -D, the heads of the redirects followed, written before the last
 * response's. `dump`: -D's file, `out` itself when both are stdout, or NULL. The -v timeline was
 * printed attempt by attempt, as they happened. */
static int report(const cli_opts *o, cli_call_info *ci, const lk_http_result *res, out_file *out,
                  out_file *dump, int attempts, int64_t started, const char *hops,
                  size_t hops_len) {
  /* A redirect not followed ends the command as a failure (curl's 47, linkd's 1), reported as
   * any other: JSON, summary, -w. */
  int code = ci->stop ? CLI_EXIT_FAILURE : exit_code_of(o, res);
  const lk_http_response *resp = lk_http_result_response(res);
  bool wrote = false;
  /* stdout's writes are checked through the out_file that writes to it. */
  out_file *so = !out->path || !dump || dump->path ? out : dump;
  /* -D: every head received, whatever the status (-f included) and whether or not the last hop
   * got a response, before the body as curl writes them. */
  if (dump && (resp || hops_len)) {
    out_write(dump, hops, hops_len);
    if (resp)
      out_head(dump, resp);
    if (dump == out)
      wrote = true;
    else {
      int rc = out_close(dump, true, quiet(o));
      code = rc && code == CLI_EXIT_OK ? rc : code;
    }
  } else if (dump && dump != out) {
    out_close(dump, false, quiet(o));
  }
  bool fail_body = code == CLI_EXIT_HTTP_FAIL && o->fail; /* --fail-with-body prints it */
  if (resp && (!o->json || out->path) && !fail_body) {
    if (o->include) {
      out_write(out, hops, hops_len);
      out_head(out, resp);
    }
    /* The redirect's body is not the answer; curl skips the body of a redirect it follows. */
    if (strcmp(ci->method, "HEAD") != 0 && !ci->stop)
      out_write(out, resp->body, resp->body_len);
    wrote = true;
  }
  /* Whether the response could be written is known before anything tells how the command
   * ended: --json, the summary and -w give the exit code linkd returns, and why. A failed call
   * keeps its own code; a failed write makes a successful one exit 73. */
  int rc = out_close(out, wrote, quiet(o));
  code = rc && code == CLI_EXIT_OK ? rc : code;
  ci->output_error = first_failure(out, dump);
  if (o->json) {
    if (cli_print_json(stdout, ci, res, code) != 0) {
      fprintf(stderr, "linkd: out of memory rendering the JSON result\n");
      code = CLI_EXIT_FAILURE;
    }
    /* Not printed, the JSON tells nothing; the summary and the exit code still do. */
    rc = stdout_check(so, quiet(o));
    code = rc && code == CLI_EXIT_OK ? rc : code;
    ci->output_error = first_failure(out, dump);
  }
  if (o->verbose || (code != CLI_EXIT_OK && !quiet(o)))
    cli_print_summary(stderr, ci, res, code);
  if (o->write_out) {
    cli_write_vars v = {lk_http_result_status(res),
                        lk_now_ns() - started,
                        attempts,
                        ci->url,
                        code,
                        code == CLI_EXIT_OK ? "" : lk_strerror(lk_http_result_err(res))};
    if (code == CLI_EXIT_HTTP_FAIL)
      v.errormsg =
          o->fail ? "HTTP status >= 400 (--fail)" : "HTTP status >= 400 (--fail-with-body)";
    if (ci->stop)
      v.errormsg = ci->stop;
    if (code == CLI_EXIT_CANTCREAT && ci->output_error)
      v.errormsg = ci->output_error;
    cli_write_out(stdout, o->write_out, &v);
  }
  rc = stdout_check(so, quiet(o));
  return rc && code == CLI_EXIT_OK ? rc : code;
}

/* -v: the per-attempt hook prints each attempt as soon as its decision is made. */
static void verbose_attempt(void *ctx, const lk_http_attempt_info *a) {
  cli_print_attempt(ctx, a);
  fflush(ctx);
}

/* Whether a response sends -L on: 301, 302, 303, 307 and 308 with a Location. */
static const char *redirect_target(const lk_http_result *res) {
  const lk_http_response *resp = lk_http_result_response(res);
  if (lk_http_result_err(res) != LK_OK || !resp)
    return NULL;
  int st = resp->status;
  if (st != 301 && st != 302 && st != 303 && st != 307 && st != 308)
    return NULL;
  const char *loc = lk_http_response_header(resp, "Location");
  return loc && *loc ? loc : NULL;
}

/* The Location resolved against the URL it came from (relative references included), and
 * whether it stays on the same host and port. NULL with a message if it is not http(s). */
static char *resolve_location(const char *base, const char *loc, bool *same_host, char *err,
                              size_t cap) {
  CURLU *u = curl_url();
  char *out = NULL, *h0 = NULL, *p0 = NULL, *h1 = NULL, *p1 = NULL, *scheme = NULL;
  if (!u) {
    snprintf(err, cap, "out of memory");
    return NULL;
  }
  CURLUcode rc = curl_url_set(u, CURLUPART_URL, base, 0);
  if (rc == CURLUE_OK)
    rc = curl_url_get(u, CURLUPART_HOST, &h0, 0);
  if (rc == CURLUE_OK)
    rc = curl_url_get(u, CURLUPART_PORT, &p0, CURLU_DEFAULT_PORT);
  if (rc == CURLUE_OK)
    rc = curl_url_set(u, CURLUPART_URL, loc, 0); /* relative to the URL already set */
  if (rc == CURLUE_OK)
    rc = curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
  /* The scheme first: file:///etc/passwd has no host, and that is not what is wrong with it. */
  bool http =
      rc == CURLUE_OK && (strcasecmp(scheme, "http") == 0 || strcasecmp(scheme, "https") == 0);
  if (http)
    rc = curl_url_get(u, CURLUPART_HOST, &h1, 0);
  if (http && rc == CURLUE_OK)
    rc = curl_url_get(u, CURLUPART_PORT, &p1, CURLU_DEFAULT_PORT);
  if (http && rc == CURLUE_OK)
    rc = curl_url_get(u, CURLUPART_URL, &out, 0);
  if (rc != CURLUE_OK)
    snprintf(err, cap, "redirect to '%s': %s", loc, curl_url_strerror(rc));
  else if (!http)
    snprintf(err, cap, "redirect to '%s': not an http:// or https:// URL", loc);
  else
    *same_host = strcasecmp(h0, h1) == 0 && strcmp(p0, p1) == 0;
  char *copy = out ? strdup(out) : NULL;
  if (out && !copy)
    snprintf(err, cap, "out of memory");
  curl_free(out);
  curl_free(h0);
  curl_free(p0);
  curl_free(h1);
  curl_free(p1);
  curl_free(scheme);
  curl_url_cleanup(u);
  return copy;
}

int cli_cmd_request(int argc, char **argv) {
  cli_opts o;
  char err[768];
  int rc = cli_args_parse(argc, argv, &o, err, sizeof err);
  if (rc == CLI_ARGS_HELP) {
    cli_help_command(stdout, o.implicit ? "get" : o.command);
    cli_opts_free(&o);
    return CLI_EXIT_OK;
  }
  if (rc != CLI_ARGS_OK) {
    if (rc == CLI_ARGS_NOMEM)
      fprintf(stderr, "linkd: out of memory\n");
    else
      fprintf(stderr, "linkd: %s\nTry 'linkd %s --help'.\n", err,
              o.command && !o.implicit ? o.command : "get");
    cli_opts_free(&o);
    return rc == CLI_ARGS_NOMEM ? CLI_EXIT_FAILURE : CLI_EXIT_USAGE;
  }

  char host[1024];
  int port = 0;
  if (url_host_port(o.url, host, sizeof host, &port, err, sizeof err) != 0) {
    fprintf(stderr, "linkd: %s\nTry 'linkd %s --help'.\n", err, o.implicit ? "get" : o.command);
    cli_opts_free(&o);
    return CLI_EXIT_USAGE;
  }

  /* -O: the URL's file name, as curl takes it (not the query's, not a redirect's). */
  char remote[1024];
  if (o.remote_name) {
    if (cli_remote_name(o.url, remote, sizeof remote, err, sizeof err) != 0) {
      fprintf(stderr, "linkd: %s\nTry 'linkd %s --help'.\n", err, o.implicit ? "get" : o.command);
      cli_opts_free(&o);
      return CLI_EXIT_USAGE;
    }
    o.output = remote;
  }

  /* -w @FILE and @-, read before anything else is, as -d @FILE is: an unreadable file exits 66
   * (curl's 26, a read error), a text that is no format 64. */
  if (o.write_out && o.write_out[0] == '@') {
    rc = cli_write_out_load(o.write_out + 1, &o.write_out_buf, err, sizeof err);
    if (rc != 0) {
      fprintf(stderr, "linkd: %s\n", err);
      if (rc == -2)
        fprintf(stderr, "Try 'linkd %s --help'.\n", o.implicit ? "get" : o.command);
      cli_opts_free(&o);
      return rc == -2 ? CLI_EXIT_USAGE : CLI_EXIT_NOINPUT;
    }
    o.write_out = o.write_out_buf;
  }

  cli_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cli_settings eff;
  cli_settings_init(&eff);
  bool have_cfg = false;
  const char *sections[3];
  size_t nsections = 0;
  char *body = NULL;
  size_t body_len = 0;
  char *url_buf = NULL; /* the URL of a redirect (-L) */
  lk_http_request *req = NULL;
  lk_http_result *res = NULL;
  lk_budget *budget = NULL;
  out_file out = {.f = NULL}, dump_file = {.f = NULL};
  out_file *dump = NULL; /* -D: &dump_file, or &out when both go to stdout */
  char *get_url = NULL;  /* -G: the URL with the data as its query */
  FILE *hopf = NULL; /* -L -i: the heads of the redirects followed */
  char *hops = NULL;
  size_t hops_len = 0;
  cli_entries resolve = {0}, connect_to = {0}; /* flags' and config's, in libcurl's order */
  int code = build_settings(&o, host, port, &cfg, &have_cfg, &eff, sections, &nsections);
  if (code)
    goto done;
  /* A later layer wins: resolve entries go in layer order (libcurl lets a later one for the
   * same HOST:PORT replace an earlier one), connect-to entries the other way round, the flags'
   * first (libcurl takes the first that matches). The config's sections are the first URL's,
   * and -L's redirects keep them, as they keep the config's other settings. */
  bool nomem = false;
  for (size_t i = 0; i < o.connect_to.n && !nomem; i++)
    nomem = cli_entries_add(&connect_to, o.connect_to.v[i], o.connect_to.origin[i]) != 0;
  if (!nomem && have_cfg)
    nomem = cli_config_entries(&cfg, host, port, &resolve, &connect_to) != 0;
  for (size_t i = 0; i < o.resolve.n && !nomem; i++)
    nomem = cli_entries_add(&resolve, o.resolve.v[i], o.resolve.origin[i]) != 0;
  if (nomem) {
    fprintf(stderr, "linkd: out of memory\n");
    code = CLI_EXIT_FAILURE;
    goto done;
  }

  lk_http_policy pol;
  cli_policy_error pe;
  if (cli_settings_to_policy(&eff, &pol, &pe) != 0) {
    fprintf(stderr, "linkd: %s%s\n", pe.from_flags ? "" : "config error: ", pe.msg);
    code = pe.from_flags ? CLI_EXIT_USAGE : CLI_EXIT_CONFIG;
    goto done;
  }
  cli_call_info ci = {
      &o,   &eff, &pol, have_cfg ? cfg.path : NULL, sections, nsections, o.method, o.url, 0, NULL,
      NULL, NULL, NULL};
  int brc = cli_budget_new(&eff.budget, &budget, err, sizeof err);
  if (brc != 0) {
    fprintf(stderr, "linkd: %s\n", err);
    code = brc == LK_ENOMEM                              ? CLI_EXIT_FAILURE
           : eff.origin[CLI_F_BUDGET] == cli_origin_flag ? CLI_EXIT_USAGE
                                                         : CLI_EXIT_CONFIG;
    goto done;
  }
  pol.budget = budget;
  pol.compressed = o.compressed;
  pol.resolve = resolve.v;
  pol.nresolve = resolve.n;
  pol.connect_to = connect_to.v;
  pol.nconnect_to = connect_to.n;
  ci.resolve = &resolve;
  ci.connect_to = &connect_to;
  /* Like curl, name the tool, unless a User-Agent header was given. */
  char ua[64];
  snprintf(ua, sizeof ua, "linkd/%s", lk_version());
  bool has_ua = false;
  for (size_t i = 0; i < eff.nheaders; i++)
    has_ua = has_ua || strcasecmp(eff.headers[i].name, "User-Agent") == 0;
  if (!has_ua && !flag_removes(&o.flags, "User-Agent")) /* curl: -H 'User-Agent:' sends none */
    pol.user_agent = ua;

  if (o.insecure)
    pol.verify_tls = false;
  /* One deadline for the whole command: the redirects -L follows share it. */
  int64_t started = lk_now_ns();
  pol.deadline_at = lk_deadline_after(started, pol.deadline);
  if (o.verbose) { /* each attempt as it happens, not after the call */
    pol.on_attempt = verbose_attempt;
    pol.on_attempt_ctx = stderr;
  }

  if (o.ndata && (code = load_body(&o, &body, &body_len)) != 0)
    goto done;
  if (o.get && body) {
    /* -G: the data is the query, not a body. */
    if (body_len && !(get_url = url_with_query(o.url, body, err, sizeof err))) {
      fprintf(stderr, "linkd: %s\nTry 'linkd %s --help'.\n", err, o.implicit ? "get" : o.command);
      code = CLI_EXIT_USAGE;
      goto done;
    }
    if (get_url)
      ci.url = o.url = get_url;
    free(body);
    body = NULL;
    body_len = 0;
  }
  if ((code = out_open(&out, "-o", o.output)) != 0)
    goto done;
  /* -D: its own file, or stdout, shared with the body when that goes there too. */
  if (o.dump_header && strcmp(o.dump_header, "-") == 0 && !out.path) {
    dump = &out;
  } else if (o.dump_header) {
    if ((code = out_open(&dump_file, "-D", o.dump_header)) != 0) {
      out_close(&out, false, quiet(&o));
      goto done;
    }
    dump = &dump_file;
    if (out.path && dump->path && out.regular && dump->regular && out.dev == dump->dev &&
        out.ino == dump->ino) {
      fprintf(stderr,
              "linkd: -D %s and -o %s are the same file (-i -o FILE writes heads and body "
              "to one)\nTry 'linkd %s --help'.\n",
              o.dump_header, out.path, o.implicit ? "get" : o.command);
      code = CLI_EXIT_USAGE;
      outs_drop(&out, dump, quiet(&o));
      goto done;
    }
  }
  if (!(req = build_request(ci.method, ci.url, &eff, &o.flags, true, body, body_len, &code))) {
    outs_drop(&out, dump, quiet(&o));
    goto done;
  }
  if (!(g_cancel = lk_http_cancel_new())) {
    fprintf(stderr, "linkd: out of memory\n");
    outs_drop(&out, dump, quiet(&o));
    code = CLI_EXIT_FAILURE;
    goto done;
  }
  if (o.verbose)
    cli_print_policy(stderr, &ci);
  install_signals();
  int attempts = 0;
  bool credentials = true;
  char stop[sizeof err] = ""; /* a redirect -L does not follow */
  for (;;) {
    lk_http_call(NULL, req, &pol, g_cancel, &res);
    if (!res)
      break;
    size_t n = 0;
    lk_http_result_attempts(res, &n);
    attempts += (int)n;
    if (o.verbose && n == 0)
      fprintf(stderr, "* no attempt was made\n");
    const char *loc = o.follow ? redirect_target(res) : NULL;
    if (!loc)
      break;
    if (o.max_redirs >= 0 && ci.redirects >= o.max_redirs) {
      snprintf(stop, sizeof stop, "more than %d redirects (--max-redirs)", o.max_redirs);
      break;
    }
    bool same_host = false;
    char *next = resolve_location(ci.url, loc, &same_host, stop, sizeof stop);
    if (!next)
      break;
    /* -i prints every response's head, as curl does: the redirects', then the last one's. */
    if ((o.include || dump) &&
        ((!hopf && !(hopf = open_memstream(&hops, &hops_len))) ||
         (cli_print_head(hopf, lk_http_result_response(res)), ferror(hopf)))) {
      fprintf(stderr, "linkd: out of memory\n");
      code = CLI_EXIT_FAILURE;
      free(next);
      break;
    }
    int st = lk_http_result_status(res);
    /* curl's rules: 303 makes anything but HEAD a GET, 301 and 302 make a POST a GET; 307 and
     * 308 keep the method and the body. */
    bool to_get = (st == 303 && strcmp(ci.method, "HEAD") != 0) ||
                  ((st == 301 || st == 302) && strcmp(ci.method, "POST") == 0);
    if (to_get) {
      ci.method = "GET";
      free(body);
      body = NULL;
      body_len = 0;
    }
    credentials = credentials && same_host;
    if (o.verbose)
      fprintf(stderr, "* redirect %d: %d to %s %s%s\n", ci.redirects + 1, st, ci.method, next,
              credentials ? "" : " (another host: no Authorization or Cookie)");
    free(url_buf);
    ci.url = url_buf = next;
    ci.redirects++;
    lk_http_request_free(req);
    req = build_request(ci.method, ci.url, &eff, &o.flags, credentials, body, body_len, &code);
    if (!req)
      break;
    lk_http_result_free(res);
    res = NULL;
  }
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  if (!res) {
    fprintf(stderr, "linkd: the call could not be made\n");
    outs_drop(&out, dump, quiet(&o));
    code = CLI_EXIT_FAILURE;
    goto done;
  }
  if (code) {
    outs_drop(&out, dump, quiet(&o));
    goto done;
  }
  if (hopf && fclose(hopf) != 0) {
    hopf = NULL;
    fprintf(stderr, "linkd: out of memory\n");
    outs_drop(&out, dump, quiet(&o));
    code = CLI_EXIT_FAILURE;
    goto done;
  }
  hopf = NULL;
  ci.stop = stop[0] ? stop : NULL;
  code = report(&o, &ci, res, &out, dump, attempts, started, hops, hops_len);

done:
  if (hopf)
    fclose(hopf);
  free(hops);
  lk_http_result_free(res);
  lk_http_request_free(req);
  lk_budget_free(budget);
  if (g_cancel) {
    lk_http_cancel_free(g_cancel);
    g_cancel = NULL;
  }
  free(body);
  free(url_buf);
  free(get_url);
  cli_settings_free(&eff);
  cli_entries_free(&resolve);
  cli_entries_free(&connect_to);
  cli_config_free(&cfg);
  cli_opts_free(&o);
  return code;
}
