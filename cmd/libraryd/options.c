/* SPDX-License-Identifier: MIT */
/* options.c: libraryd's flags and config file (options.h). */
#include "options.h"

#include "admq.h"
#include "conf_size.h"
#include "conf_text.h"
#include "fault.h"
#include "util.h"
#include "work.h"

#include <linkd/duration.h>
#include <linkd/error.h>
#include <linkd/version.h>

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: libraryd [options]\n"
    "\n"
    "The reference book service: a JSON API over HTTP/1.1 on SQLite or PostgreSQL,\n"
    "Idempotency-Key support, deadline honouring and seeded fault injection. See\n"
    "docs/libraryd.md.\n"
    "\n"
    "Listening:\n"
    "  --addr ADDR              address to listen on (default 127.0.0.1)\n"
    "  --port N                 port; 0 picks a free one (default 8080)\n"
    "  --port-file FILE         write the bound port and a newline to FILE once listening\n"
    "  --admin-port N           start the admin listener on N (0: a free port); default: off\n"
    "  --admin-addr ADDR        admin listener address (default: --addr)\n"
    "  --admin-port-file FILE   write the admin port to FILE once listening\n"
    "  --threads N              server threads (default: number of CPUs)\n"
    "  --connection-limit N     concurrent connections (default 4096; keep it above --queue +\n"
    "                           --workers, since a queued request holds its connection)\n"
    "  --per-client-limit N     concurrent connections per client IP (default 64; 0: none)\n"
    "  --idle-timeout DUR       close idle keep-alive connections after DUR, whole seconds\n"
    "                           rounded up, 0 never (default 60s)\n"
    "  --head-timeout DUR       close a connection whose request head takes longer (10s; 0s: off)\n"
    "  --body-timeout DUR       close a connection whose body takes longer after its head\n"
    "                           (default 30s; 0s: off)\n"
    "  --max-body SIZE          largest accepted request body, e.g. 64k (default 64k)\n"
    "  --drain-timeout DUR      on SIGTERM/SIGINT, time left to in-flight requests (default 10s)\n"
    "\n"
    "Storage:\n"
    "  --db PATH                SQLite database file, created when missing (default libraryd.db)\n"
    "  --store URL              PostgreSQL instead: postgres://user[:password]@host[:port]/db\n"
    "                           (libpq URL); several libraryd processes may share one database\n"
    "  --pool-size N            PostgreSQL connections per process (default 16)\n"
    "  --store-timeout DUR      PostgreSQL: a request without a deadline waits this long for a\n"
    "                           statement's answer, then 503 (default 5s; 0s: no bound)\n"
    "  --sync full|normal       full: fsync the WAL at every commit (survives power loss);\n"
    "                           normal: survives a process crash only (default full)\n"
    "  --group-commit on|off    on: writes arriving together share one transaction and one\n"
    "                           fsync, each acknowledged after it; off: one each (default on)\n"
    "  --no-seed-data           do not insert the sample books into a new database\n"
    "\n"
    "Idempotency-Key:\n"
    "  --idem-retention DUR     how long a key's result is kept and replayed (default 24h)\n"
    "  --purge-interval DUR     how often expired keys are deleted (default retention/4, <= 1m)\n"
    "  --require-key ROUTE      requests matching ROUTE ('POST /books/*/loans') must carry a key\n"
    "                           (400 otherwise); repeatable\n"
    "\n"
    "Capacity (see docs/libraryd.md, \"Capacity, queueing and overload\"):\n"
    "  --workers N              threads that run the handlers (default 8)\n"
    "  --queue N                admission queue in front of them; when full, 503 at once with\n"
    "                           Retry-After: 1 (default 1024)\n"
    "  --work SPEC              service cost per route, first match wins: ROUTE=DURATION (slept,\n"
    "                           like I/O) or ROUTE=cpu:DURATION (busy CPU), comma-separated;\n"
    "                           'none' for no cost (default '" LK_WORK_DEFAULT "')\n"
    "  --queue-discipline D     fifo | lifo | adaptive-lifo | codel (default %s)\n"
    "  --queue-target DUR       adaptive-lifo / codel target queue delay (default 5ms)\n"
    "  --queue-interval DUR     codel interval (default 100ms)\n"
    "\n"
    "Fault injection:\n"
    "  --fault RULE             e.g. 'route=POST "
    "/books/*/loans,kind=reset_after_processing,p=0.1'\n"
    "                           or 'route=GET "
    "/books/1,kind=status,code=503,retry_after=2,count=3';\n"
    "                           repeatable; kinds: latency status reset_before_read\n"
    "                           reset_after_read reset_after_processing close\n"
    "                           close_after_processing partial_stall slow_body\n"
    "                           slowdown (factor=F[,for=DUR]: service cost x F)\n"
    "  --seed N                 seed of the fault generator (default 1)\n"
    "\n"
    "Other:\n"
    "  --log text|json|off      access log on stderr, one line per request (default text)\n"
    "  --log-file FILE          append stderr (access log, messages) to FILE; SIGHUP reopens it\n"
    "  --config FILE            INI file with the same option names (key = value, no dashes);\n"
    "                           command-line flags override it\n"
    "  --help                   this text\n"
    "  --version                print the version\n"
    "\n"
    "Signals: SIGTERM/SIGINT drain and stop; SIGHUP reopens --log-file and reloads the fault\n"
    "rules and seed from --config (a bad file keeps the running rules).\n"
    "\n"
    "Durations take units: 250ms, 3s, 1m, 24h. Exit status: 0 after a clean shutdown, 1 on a\n"
    "runtime failure, 2 on a usage error. See libraryd(8).\n";

enum {
  O_ADDR = 256,
  O_PORT,
  O_PORT_FILE,
  O_ADMIN_PORT,
  O_ADMIN_ADDR,
  O_ADMIN_PORT_FILE,
  O_THREADS,
  O_CONN_LIMIT,
  O_IDLE,
  O_PER_CLIENT,
  O_HEAD_TIMEOUT,
  O_BODY_TIMEOUT,
  O_MAX_BODY,
  O_DRAIN,
  O_DB,
  O_STORE,
  O_POOL_SIZE,
  O_STORE_TIMEOUT,
  O_SYNC_MODE,
  O_NO_SEED,
  O_GROUP_COMMIT,
  O_RETENTION,
  O_PURGE,
  O_REQUIRE_KEY,
  O_FAULT,
  O_SEED,
  O_WORKERS,
  O_QUEUE,
  O_WORK,
  O_QDISC,
  O_QTARGET,
  O_QINTERVAL,
  O_LOG,
  O_LOG_FILE,
  O_CONFIG,
  O_HELP,
  O_VERSION
};

_Static_assert(O_VERSION - O_ADDR < LD_MAX_OPTS, "ld_opts.cfg_key_line is too small");
_Static_assert(LD_MAX_LIST == LK_FAULT_RULES_MAX, "the messages say 64 fault rules");

static const struct option long_opts[] = {
    {"addr", required_argument, NULL, O_ADDR},
    {"port", required_argument, NULL, O_PORT},
    {"port-file", required_argument, NULL, O_PORT_FILE},
    {"admin-port", required_argument, NULL, O_ADMIN_PORT},
    {"admin-addr", required_argument, NULL, O_ADMIN_ADDR},
    {"admin-port-file", required_argument, NULL, O_ADMIN_PORT_FILE},
    {"threads", required_argument, NULL, O_THREADS},
    {"connection-limit", required_argument, NULL, O_CONN_LIMIT},
    {"idle-timeout", required_argument, NULL, O_IDLE},
    {"per-client-limit", required_argument, NULL, O_PER_CLIENT},
    {"head-timeout", required_argument, NULL, O_HEAD_TIMEOUT},
    {"body-timeout", required_argument, NULL, O_BODY_TIMEOUT},
    {"max-body", required_argument, NULL, O_MAX_BODY},
    {"drain-timeout", required_argument, NULL, O_DRAIN},
    {"db", required_argument, NULL, O_DB},
    {"store", required_argument, NULL, O_STORE},
    {"pool-size", required_argument, NULL, O_POOL_SIZE},
    {"store-timeout", required_argument, NULL, O_STORE_TIMEOUT},
    {"sync", required_argument, NULL, O_SYNC_MODE},
    {"no-seed-data", no_argument, NULL, O_NO_SEED},
    {"group-commit", required_argument, NULL, O_GROUP_COMMIT},
    {"idem-retention", required_argument, NULL, O_RETENTION},
    {"purge-interval", required_argument, NULL, O_PURGE},
    {"require-key", required_argument, NULL, O_REQUIRE_KEY},
    {"fault", required_argument, NULL, O_FAULT},
    {"seed", required_argument, NULL, O_SEED},
    {"workers", required_argument, NULL, O_WORKERS},
    {"queue", required_argument, NULL, O_QUEUE},
    {"work", required_argument, NULL, O_WORK},
    {"queue-discipline", required_argument, NULL, O_QDISC},
    {"queue-target", required_argument, NULL, O_QTARGET},
    {"queue-interval", required_argument, NULL, O_QINTERVAL},
    {"log", required_argument, NULL, O_LOG},
    {"log-file", required_argument, NULL, O_LOG_FILE},
    {"config", required_argument, NULL, O_CONFIG},
    {"help", no_argument, NULL, O_HELP},
    {"version", no_argument, NULL, O_VERSION},
    {NULL, 0, NULL, 0},
};

/* "file:line" while a config file is applied, NULL for command-line flags. */
static const char *cfg_where;

static int bad(const char *name, const char *value, const char *why) {
  if (cfg_where)
    fprintf(stderr, "libraryd: %s: %s = '%s': %s\n", cfg_where, name, value ? value : "", why);
  else
    fprintf(stderr, "libraryd: --%s '%s': %s\n", name, value ? value : "", why);
  return -1;
}

static int int_in(const char *name, const char *v, int64_t lo, int64_t hi, int64_t *out) {
  if (lk_parse_i64(v, strlen(v), false, out) != LK_OK || *out < lo || *out > hi) {
    char why[96];
    snprintf(why, sizeof why, "expected an integer in [%lld, %lld]", (long long)lo, (long long)hi);
    return bad(name, v, why);
  }
  return 0;
}

/* The server binds literals only (inet_pton); a host name or a bad literal is a usage error here,
 * not a failed system call at start. */
static int ip_literal(const char *name, const char *v) {
  unsigned char a[16];
  if (inet_pton(AF_INET, v, a) == 1 || inet_pton(AF_INET6, v, a) == 1)
    return 0;
  return bad(name, v, "expected an IPv4 or IPv6 address such as 127.0.0.1 or ::1 (no names)");
}

static int dur(const char *name, const char *v, int64_t *out) {
  char why[160];
  if (lk_duration_parse(v, out, why, sizeof why) != LK_OK)
    return bad(name, v, why);
  return 0;
}

/* Applies one option (by its long name). 0, 1 for --help / --version handled, -1 on error. */
static int apply(ld_opts *o, int id, const char *name, const char *v) {
  int64_t n;
  uint64_t u;
  switch (id) {
  case O_ADDR:
    if (ip_literal(name, v))
      return -1;
    o->srv.addr = v;
    return 0;
  case O_ADMIN_ADDR:
    if (ip_literal(name, v))
      return -1;
    o->srv.admin_addr = v;
    return 0;
  case O_PORT:
    if (int_in(name, v, 0, 65535, &n))
      return -1;
    o->srv.port = (int)n;
    return 0;
  case O_ADMIN_PORT:
    if (int_in(name, v, 0, 65535, &n))
      return -1;
    o->srv.admin_port = (int)n;
    return 0;
  case O_PORT_FILE: o->port_file = v; return 0;
  case O_ADMIN_PORT_FILE: o->admin_port_file = v; return 0;
  case O_THREADS:
    if (int_in(name, v, 1, 1024, &n))
      return -1;
    o->srv.threads = (unsigned)n;
    return 0;
  case O_CONN_LIMIT:
    if (int_in(name, v, 1, 1000000, &n))
      return -1;
    o->srv.connection_limit = (unsigned)n;
    return 0;
  case O_IDLE:
    if (dur(name, v, &n))
      return -1;
    o->srv.idle_timeout_s = lk_whole_seconds_up(n, 86400);
    return 0;
  case O_PER_CLIENT:
    if (int_in(name, v, 0, 1000000, &n))
      return -1;
    o->srv.per_client_limit = (unsigned)n;
    return 0;
  case O_HEAD_TIMEOUT: return dur(name, v, &o->srv.head_timeout_ns);
  case O_BODY_TIMEOUT: return dur(name, v, &o->srv.body_timeout_ns);
  case O_MAX_BODY:
    if (conf_parse_size(v, 64 * 1024 * 1024, &u) != 0 || u == 0)
      return bad(name, v, "expected a size in (0, 64m], e.g. 65536 or 64k");
    o->srv.max_body = (size_t)u;
    return 0;
  case O_DRAIN: return dur(name, v, &o->srv.drain_timeout_ns);
  case O_STORE_TIMEOUT: return dur(name, v, &o->store.statement_timeout_ns);
  case O_DB:
    if (o->store.url)
      return bad(name, v, "--db (SQLite) and --store (PostgreSQL) exclude each other");
    o->store.path = v;
    o->db_given = true;
    return 0;
  case O_STORE:
    if (o->db_given)
      return bad(name, v, "--db (SQLite) and --store (PostgreSQL) exclude each other");
    if (strncmp(v, "postgres://", 11) && strncmp(v, "postgresql://", 13))
      return bad(name, v, "expected a PostgreSQL URL, postgres://... (for SQLite use --db)");
    o->store.url = v;
    return 0;
  case O_POOL_SIZE:
    if (int_in(name, v, 1, 1024, &n))
      return -1;
    o->store.pool_size = (unsigned)n;
    return 0;
  case O_SYNC_MODE:
    if (!strcmp(v, "full"))
      o->store.sync = LK_STORE_SYNC_FULL;
    else if (!strcmp(v, "normal"))
      o->store.sync = LK_STORE_SYNC_NORMAL;
    else
      return bad(name, v, "expected full or normal");
    return 0;
  case O_NO_SEED: o->store.seed = false; return 0;
  case O_GROUP_COMMIT:
    if (!strcmp(v, "on"))
      o->store.group_commit = true;
    else if (!strcmp(v, "off"))
      o->store.group_commit = false;
    else
      return bad(name, v, "expected on or off");
    return 0;
  case O_RETENTION:
    if (dur(name, v, &o->srv.idem_retention_ns) || o->srv.idem_retention_ns == 0)
      return o->srv.idem_retention_ns == 0 ? bad(name, v, "must be positive") : -1;
    return 0;
  case O_PURGE: return dur(name, v, &o->srv.purge_interval_ns);
  case O_REQUIRE_KEY:
    if (o->srv.n_require_key >= LD_MAX_LIST)
      return bad(name, v, "too many: at most 64 require-key patterns");
    if (lk_route_pattern_check(v) != LK_OK)
      return bad(name, v, "expected a route pattern such as 'POST /books/*/loans'");
    o->require_key[o->srv.n_require_key++] = v;
    return 0;
  case O_FAULT:
    if (o->srv.n_faults >= LD_MAX_LIST)
      return bad(name, v, "too many: at most 64 fault rules");
    {
      lk_fault_rule rule;
      char why[200];
      if (lk_fault_rule_parse(v, &rule, why, sizeof why) != LK_OK)
        return bad(name, v, why);
    }
    o->faults[o->srv.n_faults++] = v;
    return 0;
  case O_SEED:
    if (lk_parse_i64(v, strlen(v), false, &n) != LK_OK)
      return bad(name, v, "expected a non-negative integer");
    o->srv.seed = (uint64_t)n;
    return 0;
  case O_WORKERS:
    if (int_in(name, v, 1, 4096, &n))
      return -1;
    o->srv.workers = (unsigned)n;
    return 0;
  case O_QUEUE:
    if (int_in(name, v, 1, 1000000, &n))
      return -1;
    o->srv.queue_limit = (size_t)n;
    return 0;
  case O_WORK: {
    static lk_work_spec w; /* only checked here; the server parses its own copy */
    char why[300];
    if (lk_work_parse(v, &w, why, sizeof why) != LK_OK)
      return bad(name, v, why);
    o->srv.work = v;
    return 0;
  }
  case O_QDISC:
    if (lk_qdisc_parse(v, &o->srv.queue_discipline) != LK_OK)
      return bad(name, v, "expected fifo, lifo, adaptive-lifo or codel");
    return 0;
  case O_QTARGET:
  case O_QINTERVAL: {
    int64_t *dst = id == O_QTARGET ? &o->srv.queue_target_ns : &o->srv.queue_interval_ns;
    if (dur(name, v, dst))
      return -1;
    return *dst > 0 ? 0 : bad(name, v, "must be positive");
  }
  case O_LOG:
    if (!strcmp(v, "text"))
      o->srv.log = LK_LOG_TEXT;
    else if (!strcmp(v, "json"))
      o->srv.log = LK_LOG_JSON;
    else if (!strcmp(v, "off"))
      o->srv.log = LK_LOG_OFF;
    else
      return bad(name, v, "expected text, json or off");
    return 0;
  case O_LOG_FILE: o->log_file = v; return 0;
  case O_CONFIG: return 0; /* read before the flags */
  case O_HELP: printf(usage, lk_qdisc_name(LK_QDISC_DEFAULT)); return 1;
  case O_VERSION: printf("libraryd %s\n", LK_VERSION_STRING); return 1;
  default: return -1;
  }
}

static int ini_apply(ld_opts *o, const char *section, const char *key, const char *value) {
  if (section && *section && strcmp(section, "libraryd"))
    return 1; /* other programs' sections */
  /* "key =;x" would be ";x" and "key = ;x" a comment: refused, whatever the spacing */
  if (value[0] == ';' || value[0] == '#')
    return bad(key, value,
               "a value may not start with ';' or '#' (after a space they start a comment)") == 0;
  /* queue_discipline and queue-discipline are the same key: INI files often use underscores. */
  char name[64];
  snprintf(name, sizeof name, "%s", key);
  for (char *p = name; *p; p++)
    if (*p == '_')
      *p = '-';
  for (const struct option *lo = long_opts; lo->name; lo++) {
    if (strcmp(lo->name, name))
      continue;
    if (lo->val == O_CONFIG || lo->val == O_HELP || lo->val == O_VERSION)
      break;
    /* A second value would silently replace the first: only the lists may repeat. */
    int *first = &o->cfg_key_line[lo->val - O_ADDR];
    if (*first && lo->val != O_FAULT && lo->val != O_REQUIRE_KEY) {
      char why[120];
      snprintf(why, sizeof why, "set twice (first on line %d; only fault and require-key repeat)",
               *first);
      return bad(name, value, why) == 0;
    }
    if (!*first)
      *first = o->cfg_lines;
    if (lo->has_arg == no_argument) {
      if (!strcmp(value, "true") || !strcmp(value, "1") || !strcmp(value, "yes"))
        return apply(o, lo->val, name, value) == 0;
      if (!strcmp(value, "false") || !strcmp(value, "0") || !strcmp(value, "no"))
        return 1;
      return bad(name, value, "expected true/yes/1 or false/no/0") == 0;
    }
    if (o->n_owned >= sizeof o->owned / sizeof o->owned[0])
      return bad(name, value, "too many values in the config file") == 0;
    char *copy = strdup(value);
    if (!copy)
      return bad(name, value, "out of memory") == 0;
    o->owned[o->n_owned++] = copy;
    return apply(o, lo->val, name, copy) == 0;
  }
  fprintf(stderr,
          "libraryd: %s: unknown key '%s' (the keys are the long flags without '--'; "
          "see --help)\n",
          cfg_where, name);
  return 0;
}

static int ini_cb(void *user, const char *section, const char *name, const char *value) {
  ld_opts *o = user;
  char where[4200];
  int line = o->cfg_lines;
  snprintf(where, sizeof where, "%s:%d", o->cfg_path, line);
  cfg_where = where;
  int ok = ini_apply(o, section, name, value);
  cfg_where = NULL;
  if (!ok && !o->cfg_err_line)
    o->cfg_err_line = line;
  return ok;
}

/* The whole file is read first, at most this much: /dev/zero or a FIFO then ends. */
#define LD_CONFIG_MAX_BYTES (1024 * 1024)

typedef struct cfg_buf {
  conf_text t;
  ld_opts *o;
} cfg_buf;

/* inih's line reader (conf_text.h, as the CLI's and the gateway's), with '#' comments after a
 * blank as well as ';' ones; keeps o->cfg_lines at the line the handler sees. */
static char *cfg_read(char *str, int num, void *arg) {
  cfg_buf *b = arg;
  char *line = conf_text_line(str, num, &b->t);
  b->o->cfg_lines = b->t.line;
  return line;
}

int ld_opts_read_config_stream(FILE *f, const char *name, ld_opts *o) {
  o->cfg_path = name;
  o->cfg_lines = o->cfg_err_line = 0;
  memset(o->cfg_key_line, 0, sizeof o->cfg_key_line);
  char *text;
  size_t len;
  int rc = conf_text_slurp(f, LD_CONFIG_MAX_BYTES, &text, &len);
  if (rc == -1) { /* a directory: EISDIR */
    fprintf(stderr, "libraryd: cannot read config file %s: %s\n", name,
            errno ? strerror(errno) : "read error");
    return -1;
  }
  if (rc == 1) {
    fprintf(stderr, "libraryd: cannot read config file %s: larger than 1 MiB\n", name);
    return -1;
  }
  cfg_buf cb = {.o = o};
  if (rc == 0) {
    conf_text_init(&cb.t, text, len, true);
    rc = ini_parse_stream(cfg_read, &cb, ini_cb, o);
  }
  free(text);
  char msg[512];
  if (rc != -2 && conf_text_error(&cb.t, name, msg, sizeof msg)) {
    fprintf(stderr, "libraryd: %s\n", msg);
    return -1;
  }
  if (rc == 0)
    return 0;
  if (rc == -2)
    fprintf(stderr, "libraryd: cannot read config file %s: out of memory\n", name);
  else if (rc > 0 && rc != o->cfg_err_line) /* not a value already reported by ini_cb */
    fprintf(stderr,
            "libraryd: %s:%d: expected 'name = value', a [section] header, or a comment "
            "starting with ';' or '#'\n",
            name, rc);
  return -1;
}

/* Reads one config file into o. 0, or -1 after a message naming the file, line and problem. */
static int read_config(const char *path, ld_opts *o) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "libraryd: cannot read config file %s: %s\n", path, strerror(errno));
    return -1;
  }
  int rc = ld_opts_read_config_stream(f, path, o);
  fclose(f);
  return rc;
}

void ld_opts_init(ld_opts *o) {
  memset(o, 0, sizeof *o);
  lk_server_config_init_default(&o->srv);
  lk_store_config_init_default(&o->store);
}

void ld_opts_free(ld_opts *o) {
  for (size_t i = 0; i < o->n_owned; i++)
    free(o->owned[i]);
  o->n_owned = 0;
}

int ld_opts_parse_args(int argc, char **argv, ld_opts *o) {
  for (int i = 1; i < argc; i++) {
    const char *path = NULL;
    if (!strcmp(argv[i], "--config") && i + 1 < argc)
      path = argv[i + 1];
    else if (!strncmp(argv[i], "--config=", 9))
      path = argv[i] + 9;
    if (!path)
      continue;
    if (read_config(path, o) != 0)
      return -1;
  }
  int c;
  opterr = 0;
  optind = 0; /* glibc: a full re-initialisation, so a reload can parse again */
  while ((c = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
    if (c == 'h')
      c = O_HELP;
    if (c == '?' || c == ':') {
      fprintf(stderr, "libraryd: unknown or incomplete option '%s' (see --help)\n",
              argv[optind - 1]);
      return -1;
    }
    const char *name = "";
    for (const struct option *lo = long_opts; lo->name; lo++)
      if (lo->val == c)
        name = lo->name;
    int rc = apply(o, c, name, optarg);
    if (rc)
      return rc;
  }
  if (optind < argc) {
    fprintf(stderr, "libraryd: unexpected argument '%s' (see --help)\n", argv[optind]);
    return -1;
  }
  /* Without an admin listener the file would never be written, and a script waiting for it
   * would wait for ever. */
  if (o->admin_port_file && o->srv.admin_port < 0) {
    fprintf(stderr, "libraryd: --admin-port-file '%s' needs --admin-port (no admin listener)\n",
            o->admin_port_file);
    return -1;
  }
  return 0;
}

static bool str_ne(const char *a, const char *b) { return a != b && (!a || !b || strcmp(a, b)); }

static void add_name(char *buf, size_t cap, int *n, const char *name) {
  size_t at = strlen(buf);
  snprintf(buf + at, cap - at, "%s%s", *n ? ", " : "", name);
  (*n)++;
}

int ld_opts_restart_changes(const ld_opts *cur, const ld_opts *next, char *buf, size_t cap) {
  const lk_server_config *a = &cur->srv, *b = &next->srv;
  const lk_store_config *sa = &cur->store, *sb = &next->store;
  bool keys = a->n_require_key != b->n_require_key;
  for (size_t i = 0; !keys && i < a->n_require_key; i++)
    keys = str_ne(cur->require_key[i], next->require_key[i]);
  const struct {
    bool differs;
    const char *name;
  } t[] = {
      {str_ne(a->addr, b->addr), "addr"},
      {a->port != b->port, "port"},
      {str_ne(cur->port_file, next->port_file), "port-file"},
      {a->admin_port != b->admin_port, "admin-port"},
      {str_ne(a->admin_addr, b->admin_addr), "admin-addr"},
      {str_ne(cur->admin_port_file, next->admin_port_file), "admin-port-file"},
      {a->threads != b->threads, "threads"},
      {a->connection_limit != b->connection_limit, "connection-limit"},
      {a->per_client_limit != b->per_client_limit, "per-client-limit"},
      {a->idle_timeout_s != b->idle_timeout_s, "idle-timeout"},
      {a->head_timeout_ns != b->head_timeout_ns, "head-timeout"},
      {a->body_timeout_ns != b->body_timeout_ns, "body-timeout"},
      {a->max_body != b->max_body, "max-body"},
      {a->drain_timeout_ns != b->drain_timeout_ns, "drain-timeout"},
      {str_ne(sa->path, sb->path), "db"},
      {str_ne(sa->url, sb->url), "store"},
      {sa->pool_size != sb->pool_size, "pool-size"},
      {sa->statement_timeout_ns != sb->statement_timeout_ns, "store-timeout"},
      {sa->sync != sb->sync, "sync"},
      {sa->group_commit != sb->group_commit, "group-commit"},
      {sa->seed != sb->seed, "no-seed-data"},
      {a->idem_retention_ns != b->idem_retention_ns, "idem-retention"},
      {a->purge_interval_ns != b->purge_interval_ns, "purge-interval"},
      {keys, "require-key"},
      {a->workers != b->workers, "workers"},
      {a->queue_limit != b->queue_limit, "queue"},
      {str_ne(a->work, b->work), "work"},
      {a->queue_discipline != b->queue_discipline, "queue-discipline"},
      {a->queue_target_ns != b->queue_target_ns, "queue-target"},
      {a->queue_interval_ns != b->queue_interval_ns, "queue-interval"},
      {a->log != b->log, "log"},
      {str_ne(cur->log_file, next->log_file), "log-file"},
  };
  int n = 0;
  if (cap)
    buf[0] = '\0';
  for (size_t i = 0; i < sizeof t / sizeof t[0] && cap; i++)
    if (t[i].differs)
      add_name(buf, cap, &n, t[i].name);
  return n;
}
