/* SPDX-License-Identifier: MIT */
/* outbox.c: `linkd outbox SUBCOMMAND --db FILE ...`, a thin layer over <linkd/outbox.h>. The
 * policy flags of `run` are the request commands' (settings.c), so a value means the same here. */
#include "outbox.h"

#include "args.h"
#include "exitcodes.h"
#include "policy.h"
#include "settings.h"

#include <linkd/clock.h>
#include <linkd/duration.h>
#include <linkd/idem.h>
#include <linkd/outbox.h>

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

void cli_outbox_help(FILE *f) {
  fputs(
      "usage: linkd outbox COMMAND --db FILE [options]\n"
      "\n"
      "A durable outbox of HTTP requests in the SQLite file FILE: 'enqueue' stores a request\n"
      "(fsynced before it returns) with an Idempotency-Key made once; 'run' delivers what is due\n"
      "under the request policy, the stored key on every attempt and after every restart.\n"
      "\n"
      "Commands:\n"
      "  enqueue URL   store one request; prints 'ID KEY' per entry\n"
      "      -X, --request METHOD  the method (POST)\n"
      "      -H, --header 'N: v'   a header (repeatable; not Idempotency-Key: use --key)\n"
      "      -d, --data DATA       the body: text, @FILE or @- for stdin\n"
      "      --ttl DUR             expire if not delivered within DUR, more than 0 (24h)\n"
      "      --key KEY             the Idempotency-Key (default: a new UUID)\n"
      "      --tenant T            prefix of a generated key, 'T:<uuid>'\n"
      "      --repeat N            store N such requests, each with its own key, in one\n"
      "                            transaction (one fsync)\n"
      "  run           deliver due entries\n"
      "      --until idle|empty|forever  stop when every due entry had one call in this run\n"
      "                            (idle: a failed one waits for the next run), when nothing\n"
      "                            is pending (empty: waits for delayed rounds, at most until\n"
      "                            the entries expire), or on SIGTERM (forever)\n"
      "      --concurrency N       entries in flight at once (16)\n"
      "      --max-rounds N        stop after N recorded calls (0: no limit)\n"
      "      --round-base DUR, --round-max DUR  backoff between a failed entry's calls\n"
      "                            (1s .. 5m, full jitter)\n"
      "      --deadline, --attempt-timeout, --max-attempts, --backoff, --base, --retry-on,\n"
      "      --budget, ... the policy of each call, as for 'linkd post' (see 'linkd post\n"
      "                            --help'); --idempotency-key and -H are not allowed\n"
      "      -v, --verbose         a line per recorded call on stderr\n"
      "  list          print entries: ID STATE ROUNDS ATTEMPTS STATUS METHOD URL KEY\n"
      "      --state S             pending | delivered | expired | poisoned (all)\n"
      "      --after ID, --limit N  paging (0, 100)\n"
      "      --json                one JSON object per line, with the last response\n"
      "  retry ID | --poisoned  put entry ID (poisoned or expired), or every poisoned one, back\n"
      "                        to pending with the same key\n"
      "      --ttl DUR             a new expiry, more than 0 (needed for an expired entry)\n"
      "  purge         delete delivered and expired entries older than the retention window\n"
      "      --older-than DUR      instead of the retention window (7 days)\n"
      "      --poisoned            poisoned entries as well\n"
      "  stats         counts and totals\n"
      "      --prometheus          in the Prometheus text format\n"
      "\n"
      "Common: --db FILE (required), --retention DUR (7d as 168h). Only 'enqueue' and 'run'\n"
      "create FILE; no command adds an outbox to another application's SQLite file.\n"
      "Exit codes: 0 done (run: nothing is left pending and this run poisoned or expired\n"
      "nothing); 1 failure (a message names FILE and the error; for enqueue it says whether\n"
      "the entries were stored); 2 run: entries are still pending (it says how many and when\n"
      "the next is due); 3 run: entries were poisoned or expired by this run; 64 usage, or\n"
      "--key names an entry already there; 66 -d @FILE unreadable, or no outbox at FILE (list,\n"
      "retry, purge, stats); 75 another sender runs on FILE; 130 SIGINT/SIGTERM.\n",
      f);
}

enum {
  EXIT_PENDING = 2,   /* run: ended with entries still PENDING (waiting for their next round) */
  EXIT_SET_ASIDE = 3, /* run: this run poisoned or expired entries (not sent again by itself) */
  EXIT_TEMPFAIL = 75, /* EX_TEMPFAIL: another sender holds the file */
};

static lk_http_cancel *run_cancel;
static void on_signal(int sig) {
  (void)sig;
  if (run_cancel)
    lk_http_cancel_fire(run_cancel); /* async-signal-safe */
}

typedef struct common {
  const char *db;
  int64_t retention;
} common;

__attribute__((format(printf, 1, 2))) static int usage(const char *fmt, ...);
static int usage(const char *fmt, ...) {
  fputs("linkd outbox: ", stderr);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\n(see 'linkd outbox --help')\n", stderr);
  return CLI_EXIT_USAGE;
}

static int parse_dur(const char *flag, const char *v, int64_t *out) {
  char err[128];
  if (!v || lk_duration_parse(v, out, err, sizeof err) != LK_OK || *out < 0)
    return usage("bad duration for %s", flag);
  return 0;
}

static int parse_i64(const char *flag, const char *v, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long n = v ? strtoll(v, &end, 10) : 0;
  if (!v || !*v || *end || errno || n < lo || n > hi)
    return usage("bad number for %s", flag);
  *out = n;
  return 0;
}

/* A call on the file failed: the command, the file and why. Returns CLI_EXIT_FAILURE. */
static int db_failed(const common *c, const char *cmd, int err, const char *after) {
  /* LK_ESYS from a call on an open outbox: SQLITE_FULL (or no entropy for a key); a full disk
   * was "input/output error (a damaged file? ...)", which sends an operator to the wrong fix */
  const char *hint = err == LK_EIO      ? " (a damaged file? sqlite3 FILE 'PRAGMA integrity_check')"
                     : err == LK_EAGAIN ? " (another process held the file's lock too long)"
                     : err == LK_ESYS   ? " (is its file system full? free space and run again)"
                                        : "";
  fprintf(stderr, "linkd outbox: %s: %s: %s%s%s\n", cmd, c->db, lk_strerror(err), hint,
          after ? after : "");
  return CLI_EXIT_FAILURE;
}

/* Looks at c->db before lk_outbox_open(), which creates a missing file and adds the outbox's
 * tables to any SQLite file it is given (it has no open-existing-only mode): a command that
 * works on stored entries (`create` false: list, retry, purge, stats) must not leave an empty
 * outbox behind a mistyped --db and report zeros, and no command adopts another application's
 * database. 0, or the exit code after the message. A file SQLite cannot read is left to
 * lk_outbox_open() to report. */
static int check_db(const common *c, bool create) {
  struct stat sb;
  if (stat(c->db, &sb) != 0) {
    if (errno != ENOENT || create)
      return 0; /* created, or lk_outbox_open() says why not */
    fprintf(stderr, "linkd outbox: no outbox at %s ('enqueue' creates one)\n", c->db);
    return CLI_EXIT_NOINPUT;
  }
  sqlite3 *db = NULL;
  sqlite3_stmt *st = NULL;
  int tables = -1, ours = 0;
  if (sqlite3_open_v2(c->db, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK &&
      sqlite3_busy_timeout(db, 5000) == SQLITE_OK &&
      sqlite3_prepare_v2(db,
                         "SELECT count(*), coalesce(sum(name IN ('entries', 'totals')), 0) "
                         "FROM sqlite_master WHERE type = 'table'",
                         -1, &st, NULL) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW) {
    tables = sqlite3_column_int(st, 0);
    ours = sqlite3_column_int(st, 1);
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  if (tables == 0 && !create) {
    fprintf(stderr, "linkd outbox: no outbox at %s (an empty file; 'enqueue' creates one)\n",
            c->db);
    return CLI_EXIT_NOINPUT;
  }
  if (tables > 0 && ours < 2) {
    fprintf(stderr,
            "linkd outbox: %s is not an outbox: an SQLite database with other tables (not "
            "adding the outbox's to it)\n",
            c->db);
    return CLI_EXIT_FAILURE;
  }
  return 0;
}

/* Whether this process may write the file and its directory (where SQLite puts the -wal and
 * -shm files): false on a read-only file system, a snapshot, another user's outbox. */
static bool may_write(const char *path) {
  const char *slash = strrchr(path, '/');
  char dir[4096];
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else if (slash == path)
    snprintf(dir, sizeof dir, "/");
  else
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  return access(dir, W_OK | X_OK) == 0 && access(path, W_OK) == 0;
}

typedef enum open_mode {
  OPEN_CREATE,   /* enqueue, run: a missing file is made */
  OPEN_EXISTING, /* retry, purge: they write */
  OPEN_READ      /* list, stats: read-only where the file cannot be written */
} open_mode;

static int open_outbox(const common *c, open_mode mode, lk_outbox **ob) {
  int rc = check_db(c, mode == OPEN_CREATE);
  if (rc != 0)
    return rc;
  lk_outbox_config cfg;
  lk_outbox_config_init_default(&cfg);
  cfg.path = c->db;
  cfg.read_only = mode == OPEN_READ && !may_write(c->db);
  if (c->retention > 0)
    cfg.retention = c->retention;
  char err[512];
  rc = lk_outbox_open(&cfg, ob, err, sizeof err);
  if (rc != LK_OK) {
    fprintf(stderr, "linkd outbox: %s: %s\n", c->db, err[0] ? err : lk_strerror(rc));
    return CLI_EXIT_FAILURE;
  }
  return 0;
}

/* Reads -d's argument: text, @FILE or @- (stdin). */
static int read_data(const char *arg, char **buf, size_t *len) {
  if (arg[0] != '@') {
    *buf = strdup(arg);
    *len = strlen(arg);
    return *buf ? 0 : CLI_EXIT_FAILURE;
  }
  FILE *f = strcmp(arg + 1, "-") == 0 ? stdin : fopen(arg + 1, "rb");
  if (!f) {
    fprintf(stderr, "linkd outbox: cannot read %s: %s\n", arg + 1, strerror(errno));
    return CLI_EXIT_NOINPUT;
  }
  const size_t max = (size_t)64 << 20; /* lk_outbox_message.body_len: at most 64 MiB */
  size_t cap = 4096, n = 0;
  char *b = malloc(cap);
  while (b) {
    if (n == cap) {
      /* up to one byte over the limit, so a body of exactly 64 MiB (allowed) is read to its
       * end: the buffer stopped at 64 MiB, and a full buffer was taken for a larger body */
      size_t ncap = cap * 2 > max + 1 ? max + 1 : cap * 2;
      char *nb = cap <= max ? realloc(b, ncap) : NULL;
      if (!nb) {
        free(b);
        b = NULL;
        break;
      }
      b = nb;
      cap = ncap;
    }
    /* b is not NULL here: the loop ends where it becomes NULL */
    /* cppcheck-suppress nullPointerArithmeticRedundantCheck */
    size_t r = fread(b + n, 1, cap - n, f);
    n += r;
    if (r == 0)
      break;
  }
  bool bad = ferror(f);
  if (f != stdin)
    fclose(f);
  if (!b || bad) {
    free(b);
    fprintf(stderr, "linkd outbox: cannot read %s (or larger than 64 MiB)\n", arg + 1);
    return CLI_EXIT_NOINPUT;
  }
  *buf = b;
  *len = n;
  return 0;
}

/* Takes the common flags; returns 1 when argv[*i] was one, 0 when not, or an exit code < 0. */
static int common_flag(int argc, char **argv, int *i, common *c) {
  const char *a = argv[*i];
  const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
  if (strcmp(a, "--db") == 0) {
    if (!v || !*v)
      return -usage("%s needs a file", a);
    c->db = v;
  } else if (strcmp(a, "--retention") == 0) {
    if (parse_dur(a, v, &c->retention))
      return -CLI_EXIT_USAGE;
    /* the library takes no window of 0: --retention 0s silently became the default 7 days */
    if (c->retention <= 0)
      return -usage("--retention %s: the window must be more than 0 (purge --older-than 0s "
                    "deletes at once)",
                    v);
  } else {
    return 0;
  }
  (*i)++;
  return 1;
}

static int print_id_key(void *ctx, const lk_outbox_entry *e) {
  (void)ctx;
  printf("%" PRId64 " %s\n", e->id, e->key);
  return 0;
}

/* An RFC 9110 token of n bytes: a method, a header name. */
static bool is_token(const char *s, size_t n) {
  if (n == 0)
    return false;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)s[i]) && !strchr("!#$%&'*+-.^_`|~", s[i]))
      return false;
  return true;
}

/* lk_idem_key_valid()'s rule for `flag`'s value: 0, or usage()'s exit code with the reason. */
static int check_key(const char *flag, const char *k) {
  const char *rule = "a key is 1 to 255 visible ASCII characters: no spaces or controls";
  size_t n = strlen(k), i = 0;
  if (n == 0)
    return usage("%s: the key is empty (%s)", flag, rule);
  if (n >= LK_IDEM_KEY_MAX)
    return usage("%s: the key is %zu characters long (%s)", flag, n, rule);
  while (i < n && (unsigned char)k[i] >= 0x21 && (unsigned char)k[i] <= 0x7e)
    i++;
  if (i == n)
    return 0;
  if (k[i] == ' ')
    return usage("%s: the key holds a space at byte %zu (%s)", flag, i + 1, rule);
  return usage("%s: the key holds the byte 0x%02x at byte %zu (%s)", flag, (unsigned char)k[i],
               i + 1, rule);
}

/* One -H line as lk_outbox_enqueue() takes it ("Name: value", the rules of
 * lk_http_request_add_header()): 0, or usage()'s exit code with the reason. */
static int check_header(const char *h) {
  const char *colon = strchr(h, ':');
  if (!colon || colon == h)
    return usage("-H: '%s' is not a header: use 'Name: value'", h);
  size_t nl = (size_t)(colon - h);
  if (nl >= 256 || !is_token(h, nl))
    return usage("-H: '%.*s' is not a valid header name (an RFC 9110 token)", (int)nl, h);
  if (strcspn(colon, "\r\n") != strlen(colon))
    return usage("-H: header '%.*s': values may not contain CR or LF", (int)nl, h);
  char name[256], m[384];
  snprintf(name, sizeof name, "%.*s", (int)nl, h);
  if (strcasecmp(name, "Idempotency-Key") == 0)
    return usage("%s", "-H: Idempotency-Key: an entry's key is stored with it: give it with "
                       "--key KEY (without it, enqueue makes one)");
  static const char *const owned[] = {"Linkd-Attempt", "Linkd-Deadline", "grpc-timeout"};
  for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++)
    if (strcasecmp(name, owned[i]) == 0)
      return usage("-H: %s is set by linkd on every attempt", owned[i]);
  if (cli_header_check(name, "", m, sizeof m) != 0)
    return usage("-H: %s", m);
  return 0;
}

/* What lk_outbox_enqueue() would refuse with a bare LK_EINVAL, said before the file is opened:
 * 0, or usage()'s exit code. */
static int check_message(const char *method, const char *url, const char *const *headers,
                         const char *key, const char *tenant) {
  if (!is_token(method, strlen(method)))
    return usage("-X: '%s' is not an HTTP method (an RFC 9110 token)", method);
  if (!strstr(url, "://"))
    return usage("enqueue: '%s' is not a URL: an entry needs an absolute http:// or https:// URL",
                 url);
  if (strncasecmp(url, "http://", 7) != 0 && strncasecmp(url, "https://", 8) != 0)
    return usage("enqueue: '%s' is not an http:// or https:// URL", url);
  lk_http_request *req = lk_http_request_new(method, url);
  if (!req)
    return usage("enqueue: '%s' is not a valid URL (scheme://host[:port][/path][?query])", url);
  lk_http_request_free(req);
  for (const char *const *h = headers; *h; h++) {
    int rc = check_header(*h);
    if (rc != 0)
      return rc;
  }
  size_t tl = tenant ? strlen(tenant) : 0;
  if (tl && check_key("--tenant", tenant) != 0)
    return CLI_EXIT_USAGE;
  if (key && check_key("--key", key) != 0)
    return CLI_EXIT_USAGE;
  size_t total = (tl ? tl + 1 : 0) + (key ? strlen(key) : LK_UUID_STR_LEN - 1);
  if (tl && total >= LK_IDEM_KEY_MAX)
    return usage("--tenant: the key '%s:%s' would be %zu characters long (at most %d)", tenant,
                 key ? key : "<uuid>", total, LK_IDEM_KEY_MAX - 1);
  return 0;
}

static int cmd_enqueue(int argc, char **argv) {
  common c = {0};
  const char *url = NULL, *method = "POST", *data = NULL, *key = NULL, *tenant = NULL;
  const char *ttl_arg = NULL;
  const char **headers = calloc((size_t)argc + 1, sizeof *headers);
  size_t nh = 0;
  int64_t ttl = 0, repeat = 1;
  int rc = headers ? 0 : CLI_EXIT_FAILURE;
  for (int i = 1; rc == 0 && i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int cf = common_flag(argc, argv, &i, &c);
    if (cf < 0) {
      rc = -cf;
    } else if (cf) {
      continue;
    } else if ((!strcmp(a, "-X") || !strcmp(a, "--request")) && v) {
      method = v;
      i++;
    } else if ((!strcmp(a, "-H") || !strcmp(a, "--header")) && v) {
      headers[nh++] = v;
      i++;
    } else if ((!strcmp(a, "-d") || !strcmp(a, "--data")) && v) {
      data = v;
      i++;
    } else if (!strcmp(a, "--ttl")) {
      rc = parse_dur(a, v, &ttl);
      ttl_arg = v;
      i++;
    } else if (!strcmp(a, "--key") && v) {
      key = v;
      i++;
    } else if (!strcmp(a, "--tenant") && v) {
      tenant = v;
      i++;
    } else if (!strcmp(a, "--repeat")) {
      rc = parse_i64(a, v, 1, 1000000, &repeat);
      i++;
    } else if (a[0] == '-' || url) {
      rc = usage("enqueue: unexpected '%s'", a);
    } else {
      url = a;
    }
  }
  if (rc == 0 && (!c.db || !url))
    rc = usage("%s", "enqueue needs --db FILE and a URL");
  if (rc == 0 && key && repeat > 1)
    rc = usage("%s", "--key names one entry: not with --repeat");
  /* The library reads a ttl of 0 as its default (24 h): an explicit 0s must not become that. */
  if (rc == 0 && ttl_arg && ttl <= 0)
    rc = usage("--ttl %s: an entry needs time to be delivered: more than 0 (without --ttl: 24h)",
               ttl_arg);
  if (rc == 0)
    rc = check_message(method, url, headers, key, tenant);
  char *body = NULL;
  size_t blen = 0;
  if (rc == 0 && data)
    rc = read_data(data, &body, &blen);
  lk_outbox *ob = NULL;
  if (rc == 0)
    rc = open_outbox(&c, OPEN_CREATE, &ob);
  lk_outbox_message *m = rc == 0 ? calloc((size_t)repeat, sizeof *m) : NULL;
  int64_t *ids = rc == 0 ? calloc((size_t)repeat, sizeof *ids) : NULL;
  if (rc == 0 && (!m || !ids))
    rc = CLI_EXIT_FAILURE;
  if (rc == 0) {
    for (int64_t i = 0; i < repeat; i++) {
      lk_outbox_message_init(&m[i]);
      m[i].method = method;
      m[i].url = url;
      m[i].headers = headers;
      m[i].body = body;
      m[i].body_len = blen;
      m[i].ttl = ttl;
      m[i].key = key;
      m[i].tenant = tenant;
    }
    int err = lk_outbox_enqueue_batch(ob, m, (size_t)repeat, ids);
    if (err == LK_ECONFLICT) {
      fprintf(stderr,
              "linkd outbox: enqueue: an entry with this key exists in %s (key '%s%s%s'): "
              "nothing was stored\n",
              c.db, tenant ? tenant : "", tenant ? ":" : "", key ? key : "");
      rc = CLI_EXIT_USAGE;
    } else if (err == LK_EINVAL) { /* what check_message() did not foresee */
      fprintf(stderr, "linkd outbox: enqueue: %s: nothing was stored\n", lk_strerror(err));
      rc = CLI_EXIT_USAGE;
    } else if (err != LK_OK) {
      rc = db_failed(&c, "enqueue", err, "; nothing was stored");
    }
  }
  /* The keys as stored, so a caller can match the server's records to them. The entries are
   * committed by now: a failure here must not read as "not enqueued", or a retrying script
   * would store them twice. */
  int lerr = rc == 0 ? lk_outbox_list(ob, -1, ids[0] - 1, (int)repeat, print_id_key, NULL) : 0;
  if (lerr != LK_OK) {
    fprintf(stderr,
            "linkd outbox: enqueue: %" PRId64 " %s stored in %s (ids %" PRId64 " to %" PRId64
            "), but could not read %s back: %s; do not enqueue %s again\n",
            repeat, repeat == 1 ? "entry" : "entries", c.db, ids[0], ids[repeat - 1],
            repeat == 1 ? "it" : "them", lk_strerror(lerr), repeat == 1 ? "it" : "them");
    rc = CLI_EXIT_FAILURE;
  }
  free(m);
  free(ids);
  free(body);
  free(headers);
  lk_outbox_close(ob);
  return rc;
}

static void on_round_verbose(void *ctx, const lk_outbox_entry *e, const lk_http_result *res) {
  (void)ctx;
  fprintf(stderr, "linkd outbox: %" PRId64 " %s round %d: %s, status %d, %s\n", e->id,
          lk_outbox_state_name(e->state), e->rounds, lk_err_name(e->last_error), e->last_status,
          res ? lk_http_result_stop(res) : "request did not build");
}

/* The PENDING entries left after a run: how many, and the earliest next round (wall ns). */
typedef struct pending_left {
  int64_t count, next, after;
} pending_left;

static int count_pending(void *ctx, const lk_outbox_entry *e) {
  pending_left *p = ctx;
  if (p->count++ == 0 || e->next_round < p->next)
    p->next = e->next_round;
  p->after = e->id;
  return 0;
}

/* Says what is left pending after a run that ended by itself. Returns the run's exit code:
 * EXIT_SET_ASIDE when it poisoned or expired entries, else EXIT_PENDING when entries are left,
 * else 0; CLI_EXIT_FAILURE when the file cannot be read. */
static int run_outcome(const common *c, lk_outbox *ob, const lk_outbox_send_stats *st) {
  pending_left p = {0};
  for (;;) {
    int64_t before = p.count;
    int err = lk_outbox_list(ob, LK_OUTBOX_PENDING, p.after, 1000, count_pending, &p);
    if (err != LK_OK)
      return db_failed(c, "run", err, " (after the run, reading what is left)");
    if (p.count - before < 1000)
      break;
  }
  if (p.count > 0) {
    char dbuf[32];
    int64_t in = p.next - lk_wall_ns(); /* both >= 0: no overflow */
    fprintf(stderr,
            "linkd outbox: %" PRId64 " %s still pending; the next is due %s%s (run again%s, or "
            "use --until empty)\n",
            p.count, p.count == 1 ? "entry" : "entries", in > 0 ? "in " : "now",
            in > 0 ? lk_duration_format(in, dbuf, sizeof dbuf) : "", in > 0 ? " then" : "");
  }
  if (st->poisoned > 0 || st->expired > 0)
    return EXIT_SET_ASIDE;
  return p.count > 0 ? EXIT_PENDING : CLI_EXIT_OK;
}

static int cmd_run(int argc, char **argv) {
  common c = {0};
  lk_outbox_sender_config sc;
  lk_outbox_sender_config_init_default(&sc);
  cli_settings layer;
  cli_settings_init(&layer);
  bool verbose = false, round_max = false;
  char dbuf[32];
  int rc = 0;
  for (int i = 1; rc == 0 && i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int64_t n = 0;
    int cf = common_flag(argc, argv, &i, &c);
    if (cf < 0) {
      rc = -cf;
    } else if (cf) {
      continue;
    } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
      verbose = true;
    } else if (!strcmp(a, "--until")) {
      if (v && !strcmp(v, "idle"))
        sc.until = LK_OUTBOX_UNTIL_IDLE;
      else if (v && !strcmp(v, "empty"))
        sc.until = LK_OUTBOX_UNTIL_EMPTY;
      else if (v && !strcmp(v, "forever"))
        sc.until = LK_OUTBOX_FOREVER;
      else
        rc = usage("%s takes idle, empty or forever", a);
      i++;
    } else if (!strcmp(a, "--concurrency")) {
      rc = parse_i64(a, v, 1, 4096, &n);
      sc.concurrency = (int)n;
      i++;
    } else if (!strcmp(a, "--max-rounds")) {
      rc = parse_i64(a, v, 0, INT64_MAX, &sc.max_rounds);
      i++;
    } else if (!strcmp(a, "--round-base")) {
      rc = parse_dur(a, v, &sc.backoff.base);
      i++;
    } else if (!strcmp(a, "--round-max")) {
      rc = parse_dur(a, v, &sc.backoff.max);
      round_max = true;
      i++;
    } else if (!strncmp(a, "--", 2) && cli_settings_field(a + 2) >= 0) {
      int f = cli_settings_field(a + 2);
      if (f == CLI_F_IDEMPOTENCY_KEY || f == CLI_F_HEADER) {
        rc = usage("%s: each entry brings its own (key and headers are stored with it)", a);
      } else if (!v) {
        rc = usage("%s needs a value", a);
      } else {
        char err[256];
        if (cli_settings_set(&layer, a + 2, v, cli_origin_flag, false, err, sizeof err) !=
            CLI_SET_OK) {
          fprintf(stderr, "linkd outbox: %s: %s\n", a, err);
          rc = CLI_EXIT_USAGE;
        }
        i++;
      }
    } else {
      rc = usage("run: unexpected '%s'", a);
    }
  }
  if (rc == 0 && !c.db)
    rc = usage("%s", "run needs --db FILE");
  /* a --round-base above the default cap raises it; above a --round-max given, it is an error */
  if (rc == 0 && sc.backoff.max < sc.backoff.base) {
    if (round_max)
      rc = usage("--round-max %s is shorter than --round-base",
                 lk_duration_format(sc.backoff.max, dbuf, sizeof dbuf));
    else
      sc.backoff.max = sc.backoff.base;
  }
  const char *why = NULL;
  if (rc == 0 && lk_backoff_config_validate(&sc.backoff, &why) != LK_OK)
    rc = usage("--round-base/--round-max: %s", why); /* before anything runs or is printed */
  cli_policy_error pe;
  if (rc == 0 && cli_settings_to_policy(&layer, &sc.policy, &pe) != 0) {
    fprintf(stderr, "linkd outbox: %s\n", pe.msg);
    rc = CLI_EXIT_USAGE;
  }
  lk_outbox *ob = NULL;
  if (rc == 0)
    rc = open_outbox(&c, OPEN_CREATE, &ob); /* a sender may start before the first enqueue */
  if (rc == 0) {
    run_cancel = lk_http_cancel_new();
    sc.cancel = run_cancel;
    if (verbose)
      sc.on_round = on_round_verbose;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    lk_outbox_send_stats st = {0}; /* printed even when no send ran (no memory) */
    int err = run_cancel ? lk_outbox_send(ob, &sc, &st) : LK_ENOMEM;
    fprintf(stderr,
            "linkd outbox: %" PRId64 " calls (%" PRId64 " attempts): %" PRId64
            " delivered, %" PRId64 " poisoned, %" PRId64 " expired, %" PRId64 " to retry\n",
            st.rounds, st.attempts, st.delivered, st.poisoned, st.expired, st.failed);
    if (err == LK_ECANCELED) {
      rc = CLI_EXIT_CANCELLED;
    } else if (err == LK_EAGAIN) {
      fprintf(stderr, "linkd outbox: another sender is running on %s\n", c.db);
      rc = EXIT_TEMPFAIL;
    } else if (err == LK_ECONFIG) {
      fprintf(stderr, "linkd outbox: run: %s\n", lk_strerror(err));
      rc = CLI_EXIT_USAGE;
    } else if (err != LK_OK) {
      rc = db_failed(&c, "run", err, NULL);
    } else {
      rc = run_outcome(&c, ob, &st);
    }
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    lk_http_cancel_free(run_cancel);
    run_cancel = NULL;
  }
  lk_outbox_close(ob);
  cli_settings_free(&layer);
  return rc;
}

/* The length of the valid UTF-8 sequence at p (1 to 4), or 0: jansson's rules (no overlong
 * forms, no surrogates, nothing above U+10FFFF). */
static size_t utf8_seq(const unsigned char *p, size_t left) {
  unsigned c = p[0], cp;
  size_t n;
  if (c < 0x80)
    return 1;
  if (c >= 0xc2 && c <= 0xdf)
    n = 2, cp = c & 0x1f;
  else if (c >= 0xe0 && c <= 0xef)
    n = 3, cp = c & 0x0f;
  else if (c >= 0xf0 && c <= 0xf4)
    n = 4, cp = c & 0x07;
  else
    return 0;
  if (left < n)
    return 0;
  for (size_t i = 1; i < n; i++) {
    if ((p[i] & 0xc0) != 0x80)
      return 0;
    cp = cp << 6 | (p[i] & 0x3f);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
      (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return n;
}

/* A stored string as a JSON string, always. jansson refuses invalid UTF-8 (NULL), and
 * json_object_set_new() then leaves the key out: a header value or URL with a Latin-1 byte
 * made "headers" or "url" vanish from the object. A byte that is not valid UTF-8 becomes
 * U+FFFD. */
static json_t *json_text(const char *s) {
  size_t n = strlen(s);
  json_t *j = json_stringn(s, n);
  char *buf = j ? NULL : malloc(n * 3 + 1);
  if (!buf)
    return j;
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    size_t k = utf8_seq((const unsigned char *)s + i, n - i);
    if (k) {
      memcpy(buf + o, s + i, k);
      o += k;
      i += k;
    } else {
      memcpy(buf + o, "\xEF\xBF\xBD", 3);
      o += 3;
      i++;
    }
  }
  j = json_stringn(buf, o);
  free(buf);
  return j;
}

static json_t *entry_json(const lk_outbox_entry *e) {
  json_t *j = json_object();
  json_object_set_new(j, "id", json_integer(e->id));
  json_object_set_new(j, "state", json_string(lk_outbox_state_name(e->state)));
  json_object_set_new(j, "method", json_text(e->method));
  json_object_set_new(j, "url", json_text(e->url));
  json_object_set_new(j, "key", json_text(e->key));
  json_object_set_new(j, "headers", json_text(e->headers));
  json_object_set_new(j, "body_bytes", json_integer((json_int_t)e->body_len));
  json_object_set_new(j, "created_ns", json_integer(e->created));
  json_object_set_new(j, "expires_ns", json_integer(e->expires));
  json_object_set_new(j, "next_round_ns", json_integer(e->next_round));
  json_object_set_new(j, "done_ns", json_integer(e->done));
  json_object_set_new(j, "rounds", json_integer(e->rounds));
  json_object_set_new(j, "attempts", json_integer(e->attempts));
  json_object_set_new(j, "last_error", json_string(e->rounds ? lk_err_name(e->last_error) : ""));
  json_object_set_new(j, "last_failure", json_text(e->last_failure));
  json_object_set_new(j, "last_status", json_integer(e->last_status));
  json_object_set_new(j, "response_headers", json_text(e->response_headers));
  json_t *body = json_stringn(e->response_body, e->response_body_len);
  json_object_set_new(j, "response_body", body ? body : json_string("(not UTF-8)"));
  json_object_set_new(j, "response_truncated", json_boolean(e->response_truncated));
  return j;
}

static int print_entry(void *ctx, const lk_outbox_entry *e) {
  if (*(bool *)ctx) {
    json_t *j = entry_json(e);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    if (s)
      puts(s);
    free(s);
    json_decref(j);
    return 0;
  }
  printf("%" PRId64 " %s %d %d %d %s %s %s\n", e->id, lk_outbox_state_name(e->state), e->rounds,
         e->attempts, e->last_status, e->method, e->url, e->key);
  return 0;
}

static int cmd_list(int argc, char **argv) {
  common c = {0};
  int64_t after = 0, limit = 100;
  int state = -1;
  bool json = false;
  int rc = 0;
  for (int i = 1; rc == 0 && i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int cf = common_flag(argc, argv, &i, &c);
    if (cf < 0) {
      rc = -cf;
    } else if (cf) {
      continue;
    } else if (!strcmp(a, "--state")) {
      lk_outbox_state s;
      if (lk_outbox_state_parse(v, &s) != LK_OK)
        rc = usage("%s takes pending, delivered, expired or poisoned", a);
      state = (int)s;
      i++;
    } else if (!strcmp(a, "--after")) {
      rc = parse_i64(a, v, 0, INT64_MAX, &after);
      i++;
    } else if (!strcmp(a, "--limit")) {
      rc = parse_i64(a, v, 1, 1000000, &limit);
      i++;
    } else if (!strcmp(a, "--json")) {
      json = true;
    } else {
      rc = usage("list: unexpected '%s'", a);
    }
  }
  if (rc == 0 && !c.db)
    rc = usage("%s", "list needs --db FILE");
  lk_outbox *ob = NULL;
  if (rc == 0)
    rc = open_outbox(&c, OPEN_READ, &ob);
  int err = rc == 0 ? lk_outbox_list(ob, state, after, (int)limit, print_entry, &json) : LK_OK;
  if (err != LK_OK) /* after the entries read before it, if any */
    rc = db_failed(&c, "list", err, NULL);
  lk_outbox_close(ob);
  return rc;
}

static int cmd_retry(int argc, char **argv) {
  common c = {0};
  int64_t id = -1, ttl = 0;
  const char *ttl_arg = NULL;
  bool all = false;
  int rc = 0;
  for (int i = 1; rc == 0 && i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int cf = common_flag(argc, argv, &i, &c);
    if (cf < 0) {
      rc = -cf;
    } else if (cf) {
      continue;
    } else if (!strcmp(a, "--poisoned")) {
      all = true;
    } else if (!strcmp(a, "--ttl")) {
      rc = parse_dur(a, v, &ttl);
      ttl_arg = v;
      i++;
    } else if (a[0] != '-' && id < 0) {
      rc = parse_i64("ID", a, 1, INT64_MAX, &id);
    } else {
      rc = usage("retry: unexpected '%s'", a);
    }
  }
  if (rc == 0 && (!c.db || all == (id > 0)))
    rc = usage("%s", "retry needs --db FILE and either ID or --poisoned");
  /* lk_outbox_retry() reads a ttl of 0 as "no new expiry" */
  if (rc == 0 && ttl_arg && ttl <= 0)
    rc = usage("--ttl %s: a new expiry must be more than 0 from now", ttl_arg);
  lk_outbox *ob = NULL;
  if (rc == 0)
    rc = open_outbox(&c, OPEN_EXISTING, &ob);
  if (rc == 0) {
    int64_t n = 0;
    int err = lk_outbox_retry(ob, all ? 0 : id, ttl, &n);
    if (err == LK_ESTATE || err == LK_ENOTFOUND) {
      fprintf(stderr, "linkd outbox: retry: %s%s\n", lk_strerror(err),
              err == LK_ESTATE ? " (pending or delivered, or expired without --ttl)" : "");
      rc = CLI_EXIT_FAILURE;
    } else if (err != LK_OK) {
      rc = db_failed(&c, "retry", err, NULL);
    } else {
      printf("%" PRId64 " entries back to pending\n", n);
    }
  }
  lk_outbox_close(ob);
  return rc;
}

static int cmd_purge(int argc, char **argv) {
  common c = {0};
  int64_t older = -1;
  bool poisoned = false;
  int rc = 0;
  for (int i = 1; rc == 0 && i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int cf = common_flag(argc, argv, &i, &c);
    if (cf < 0) {
      rc = -cf;
    } else if (cf) {
      continue;
    } else if (!strcmp(a, "--older-than")) {
      rc = parse_dur(a, v, &older);
      i++;
    } else if (!strcmp(a, "--poisoned")) {
      poisoned = true;
    } else {
      rc = usage("purge: unexpected '%s'", a);
    }
  }
  if (rc == 0 && !c.db)
    rc = usage("%s", "purge needs --db FILE");
  lk_outbox *ob = NULL;
  if (rc == 0)
    rc = open_outbox(&c, OPEN_EXISTING, &ob);
  if (rc == 0) {
    int64_t n = 0;
    int err = lk_outbox_purge(ob, older, poisoned, &n);
    if (err != LK_OK) {
      rc = db_failed(&c, "purge", err, NULL);
    } else {
      printf("%" PRId64 " entries purged\n", n);
    }
  }
  lk_outbox_close(ob);
  return rc;
}

static int cmd_stats(int argc, char **argv) {
  common c = {0};
  bool prom = false;
  int rc = 0;
  for (int i = 1; rc == 0 && i < argc; i++) {
    int cf = common_flag(argc, argv, &i, &c);
    if (cf < 0)
      rc = -cf;
    else if (!cf && !strcmp(argv[i], "--prometheus"))
      prom = true;
    else if (!cf)
      rc = usage("stats: unexpected '%s'", argv[i]);
  }
  if (rc == 0 && !c.db)
    rc = usage("%s", "stats needs --db FILE");
  lk_outbox *ob = NULL;
  if (rc == 0)
    rc = open_outbox(&c, OPEN_READ, &ob);
  lk_outbox_stats st;
  int err = rc == 0 ? lk_outbox_stats_get(ob, &st) : LK_OK;
  if (err != LK_OK)
    rc = db_failed(&c, "stats", err, NULL);
  if (rc == 0 && prom) {
    char *text = NULL;
    if ((err = lk_outbox_stats_prometheus(&st, &text, NULL)) != LK_OK)
      rc = db_failed(&c, "stats --prometheus", err, NULL);
    else
      fputs(text, stdout);
    free(text);
  } else if (rc == 0) {
    printf("pending %" PRId64 "\ndelivered %" PRId64 "\nexpired %" PRId64 "\npoisoned %" PRId64
           "\nenqueued_total %" PRId64 "\ndelivered_total %" PRId64 "\nexpired_total %" PRId64
           "\npoisoned_total %" PRId64 "\npurged_total %" PRId64 "\nrounds_total %" PRId64
           "\nattempts_total %" PRId64 "\nretried_total %" PRId64 "\n",
           st.pending, st.delivered, st.expired, st.poisoned, st.enqueued_total, st.delivered_total,
           st.expired_total, st.poisoned_total, st.purged_total, st.rounds_total, st.attempts_total,
           st.retried_total);
  }
  lk_outbox_close(ob);
  return rc;
}

int cli_outbox_main(int argc, char **argv) {
  if (argc < 2) {
    cli_outbox_help(stderr);
    return CLI_EXIT_USAGE;
  }
  const char *sub = argv[1];
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      cli_outbox_help(stdout);
      return CLI_EXIT_OK;
    }
  }
  if (!strcmp(sub, "enqueue"))
    return cmd_enqueue(argc - 1, argv + 1);
  if (!strcmp(sub, "run"))
    return cmd_run(argc - 1, argv + 1);
  if (!strcmp(sub, "list"))
    return cmd_list(argc - 1, argv + 1);
  if (!strcmp(sub, "retry"))
    return cmd_retry(argc - 1, argv + 1);
  if (!strcmp(sub, "purge"))
    return cmd_purge(argc - 1, argv + 1);
  if (!strcmp(sub, "stats"))
    return cmd_stats(argc - 1, argv + 1);
  return usage("unknown command '%s'", sub);
}
