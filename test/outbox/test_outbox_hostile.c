/* SPDX-License-Identifier: MIT */
/* The outbox used and abused from outside: two senders reaching one file by different names,
 * many processes creating one new file at once, a schema from the future, a full file system,
 * a hostile Retry-After, a wall clock stepped back between runs, stored text that is not UTF-8
 * in `list --json`, a body of exactly the 64 MiB limit and bad common flags. Real processes
 * (faultd, the linkd binary, forked openers), real SQLite files, 127.0.0.1 only. */
#include <linkd/outbox.h>

#include "fake_clock.h"
#include "faultd_client.h"
#include "testutil.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <setjmp.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static char DIR_[256];
static int seq;

static void nap_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static int group_setup(void **state) {
  (void)state;
  const char *tmp = getenv("TMPDIR");
  snprintf(DIR_, sizeof DIR_, "%s/outbox-hostile-XXXXXX", tmp ? tmp : "/tmp");
  return mkdtemp(DIR_) ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", DIR_);
  return system(cmd) == 0 ? 0 : -1;
}

static void new_path(char *path, size_t cap, const char *what) {
  snprintf(path, cap, "%s/%s%d.db", DIR_, what, ++seq);
}

static lk_outbox *open_at(const char *path, const lk_clock *wall) {
  lk_outbox_config c;
  lk_outbox_config_init_default(&c);
  c.path = path;
  c.wall_clock = wall;
  lk_outbox *ob = NULL;
  char err[256];
  int rc = lk_outbox_open(&c, &ob, err, sizeof err);
  if (rc != LK_OK)
    fail_msg("open %s: %s (%s)", path, lk_err_name(rc), err);
  return ob;
}

static void enqueue_to(lk_outbox *ob, const char *url, int64_t *id) {
  lk_outbox_message m;
  lk_outbox_message_init(&m);
  m.method = "POST";
  m.url = url;
  assert_int_equal(lk_outbox_enqueue(ob, &m, id, NULL), LK_OK);
}

static void sender(lk_outbox_sender_config *sc, bool honor_retry_after) {
  lk_outbox_sender_config_init_default(sc);
  sc->concurrency = 4;
  sc->policy.deadline = LK_SEC(5);
  sc->policy.attempt_timeout = LK_SEC(4);
  sc->policy.connect_timeout = LK_SEC(2);
  sc->policy.default_protection = false;
  lk_retry_config rc;
  lk_retry_config_init_default(&rc);
  rc.max_attempts = 1; /* each round is one attempt: the outbox's own delays are measured */
  rc.honor_retry_after = honor_retry_after;
  assert_int_equal(lk_retry_policy_init(&sc->policy.retry, &rc, NULL), LK_OK);
  sc->backoff.jitter = LK_JITTER_NONE;
  sc->backoff.base = LK_SEC(1);
  sc->backoff.max = LK_SEC(10);
}

typedef struct one {
  int n;
  lk_outbox_entry e;
} one;

static int first(void *ctx, const lk_outbox_entry *e) {
  one *o = ctx;
  if (o->n++ == 0)
    o->e = *e; /* scalars only are read after the callback */
  return 0;
}

static lk_outbox_entry entry(lk_outbox *ob, int64_t id) {
  one o = {0};
  assert_int_equal(lk_outbox_list(ob, -1, id - 1, 1, first, &o), LK_OK);
  assert_int_equal(o.n, 1);
  assert_int_equal(o.e.id, id);
  return o.e;
}

/* `linkd outbox ARGS` through the shell, stdout and stderr into out; the exit status. */
__attribute__((format(printf, 3, 4))) static int cli(char *out, size_t cap, const char *fmt, ...);
static int cli(char *out, size_t cap, const char *fmt, ...) {
  char args[1200], cmd[1400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "'%s' outbox %s 2>&1", LINKD_BIN, args);
  FILE *f = popen(cmd, "r");
  assert_non_null(f);
  size_t n = fread(out, 1, cap - 1, f);
  out[n] = '\0';
  while (fgetc(f) != EOF) {
  }
  int st = pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* --- one sender per file, whatever its name ----------------------------------------------------
 */

/* A sender started through a symlink to the file took "<link>-sender" as its lock, ran beside
 * the sender of the file itself and sent the entry in flight a second time. */
static void test_symlinked_path_is_the_same_sender(void **state) {
  (void)state;
  faultd_proc fd;
  const char *slow[] = {"--delay-ms", "2000", "--max-seconds", "60", NULL};
  assert_int_equal(faultd_start(&fd, "slow", slow), 0);
  char path[300], link[300], url[128], out[4096];
  new_path(path, sizeof path, "sym");
  snprintf(link, sizeof link, "%s/link%d.db", DIR_, seq);
  faultd_url(&fd, "/x", url, sizeof url);
  lk_outbox *ob = open_at(path, NULL);
  enqueue_to(ob, url, NULL);
  lk_outbox_close(ob);
  assert_int_equal(symlink(path, link), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int nul = open("/dev/null", O_WRONLY);
    dup2(nul, 1);
    dup2(nul, 2);
    execl(LINKD_BIN, "linkd", "outbox", "run", "--db", path, "--until", "idle", "--deadline", "10s",
          "--attempt-timeout", "8s", "--max-attempts", "1", (char *)NULL);
    _exit(127);
  }
  /* the first sender has the entry in flight (faultd answers after 2 s) */
  assert_int_equal(faultd_wait_requests(&fd, 1, 10000), 1);
  int rc =
      cli(out, sizeof out,
          "run --db '%s' --until idle --deadline 10s --attempt-timeout 8s --max-attempts 1", link);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  int sent = faultd_request_count(&fd);
  faultd_stop(&fd);
  if (rc != 75 || sent != 1)
    fail_msg("the sender through the symlink exited %d and the entry was sent %d times: %s", rc,
             sent, out);
  assert_non_null(strstr(out, "another sender is running"));
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* --- many processes creating one new file ------------------------------------------------------
 */

/* Processes that open one new file at the same moment (an enqueuer and a sender started
 * together): switching the new file to WAL upgrades a read lock, SQLite answers one of them
 * SQLITE_BUSY at once without waiting (about 1 in 20 opens here), and lk_outbox_open() failed
 * with "pragmas: database is locked" long before busy_timeout_ms. */
static void test_many_processes_open_one_new_file(void **state) {
  (void)state;
  enum { ROUNDS = 20, PROCS = 12 };
  int failed = 0;
  char why[256] = "";
  for (int r = 0; r < ROUNDS; r++) {
    char path[300];
    new_path(path, sizeof path, "race");
    int gate[2], res[2];
    assert_int_equal(pipe(gate), 0);
    assert_int_equal(pipe(res), 0);
    for (int p = 0; p < PROCS; p++) {
      pid_t pid = fork();
      assert_true(pid >= 0);
      if (pid == 0) {
        close(gate[1]);
        close(res[0]);
        char c;
        (void)!read(gate[0], &c, 1); /* all start when the gate closes */
        lk_outbox_config cfg;
        lk_outbox_config_init_default(&cfg);
        cfg.path = path;
        lk_outbox *ob = NULL;
        char err[200] = "";
        int rc = lk_outbox_open(&cfg, &ob, err, sizeof err);
        if (rc == LK_OK) {
          lk_outbox_message m;
          lk_outbox_message_init(&m);
          m.method = "POST";
          m.url = "http://127.0.0.1:1/x";
          rc = lk_outbox_enqueue(ob, &m, NULL, NULL);
          lk_outbox_close(ob);
        }
        if (rc != LK_OK) {
          char msg[256];
          int n = snprintf(msg, sizeof msg, "%s: %s", lk_err_name(rc), err);
          (void)!write(res[1], msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
        }
        _exit(rc == LK_OK ? 0 : 1);
      }
    }
    close(gate[0]);
    close(res[1]);
    nap_ms(20);
    close(gate[1]);
    for (int p = 0; p < PROCS; p++) {
      int st;
      assert_true(wait(&st) > 0);
      failed += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    ssize_t n = read(res[0], why, sizeof why - 1);
    if (n > 0)
      why[n] = '\0';
    close(res[0]);
    if (failed)
      break;
    lk_outbox *ob = open_at(path, NULL);
    lk_outbox_stats st;
    assert_int_equal(lk_outbox_stats_get(ob, &st), LK_OK);
    assert_int_equal(st.enqueued_total, PROCS);
    lk_outbox_close(ob);
  }
  if (failed)
    fail_msg("%d of %d processes opening a new outbox at once failed: %s", failed, PROCS, why);
}

/* --- a schema from the future --------------------------------------------------------------------
 */

static size_t slurp(const char *path, unsigned char *buf, size_t cap) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  size_t n = fread(buf, 1, cap, f);
  fclose(f);
  return n;
}

/* Refused with LK_ESTATE, as before, but after the file had been switched to WAL mode (and
 * locked for writing): a file the library refuses is now left byte for byte as it was. */
static void test_future_schema_is_left_as_it_was(void **state) {
  (void)state;
  char path[300], wal[320];
  new_path(path, sizeof path, "future");
  lk_outbox *ob = open_at(path, NULL);
  enqueue_to(ob, "http://127.0.0.1:1/x", NULL);
  lk_outbox_close(ob);
  sqlite3 *db;
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  assert_int_equal(sqlite3_exec(db,
                                "PRAGMA journal_mode=DELETE; PRAGMA user_version=3; "
                                "ALTER TABLE entries ADD COLUMN priority INTEGER",
                                NULL, NULL, NULL),
                   SQLITE_OK);
  sqlite3_close(db);
  static unsigned char before[1 << 16], after[1 << 16];
  size_t nb = slurp(path, before, sizeof before);
  assert_int_equal(before[18], 1); /* rollback journal (2 would be WAL) */
  lk_outbox_config c;
  lk_outbox_config_init_default(&c);
  c.path = path;
  char err[256];
  assert_int_equal(lk_outbox_open(&c, &ob, err, sizeof err), LK_ESTATE);
  assert_null(ob);
  assert_non_null(strstr(err, "schema version 3 is newer than this library's 2"));
  size_t na = slurp(path, after, sizeof after);
  if (na != nb || memcmp(before, after, nb) != 0)
    fail_msg("the refused file was changed (header byte 18 is now %d)", after[18]);
  snprintf(wal, sizeof wal, "%s-wal", path);
  assert_int_equal(access(wal, F_OK), -1);
}

/* --- a full file system -------------------------------------------------------------------------
 */

static char full_mount[300];

static int unmount_full(void **state) {
  (void)state;
  if (full_mount[0])
    umount2(full_mount, MNT_DETACH);
  full_mount[0] = '\0';
  return 0;
}

/* On a tiny tmpfs: a write that does not fit was LK_EIO, which
 * the CLI reported as "input/output error (a damaged file? ...)". It is LK_ESYS, the CLI says
 * to look at the file system, what was committed stays, and once there is room again the same
 * handle stores the next entry. */
/* A tmpfs of `size` at full_mount (a new directory named after `what`), in a mount namespace of
 * the test's own (as test_http_dns does), so the tmpfs goes with the process even if the test
 * dies; root is needed, as the suite's README command runs. unmount_full removes it. */
static void mount_tmpfs(const char *what, const char *size) {
  snprintf(full_mount, sizeof full_mount, "%s/%s%d", DIR_, what, ++seq);
  assert_int_equal(mkdir(full_mount, 0755), 0);
  static bool private_ns;
  if (!private_ns) {
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
      fail_msg("a private mount namespace: %s (the test needs root)", strerror(errno));
    private_ns = true;
  }
  char opts[64];
  snprintf(opts, sizeof opts, "size=%s", size);
  if (mount("tmpfs", full_mount, "tmpfs", 0, opts) != 0) {
    full_mount[0] = '\0';
    fail_msg("mount a %s tmpfs: %s (the test needs root)", size, strerror(errno));
  }
}

static void test_full_file_system(void **state) {
  (void)state;
  mount_tmpfs("full", "512k");
  char path[400], filler[400], out[4096];
  snprintf(path, sizeof path, "%s/q.db", full_mount);
  snprintf(filler, sizeof filler, "%s/filler", full_mount);
  static char room[128 * 1024];
  memset(room, 'f', sizeof room);
  FILE *f = fopen(filler, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(room, 1, sizeof room, f), sizeof room);
  assert_int_equal(fclose(f), 0);
  lk_outbox *ob = open_at(path, NULL);
  static char body[20000];
  memset(body, 'b', sizeof body);
  lk_outbox_message m;
  lk_outbox_message_init(&m);
  m.method = "POST";
  m.url = "http://127.0.0.1:1/x";
  m.body = body;
  m.body_len = sizeof body;
  int rc = LK_OK, stored = 0;
  for (int i = 0; i < 100 && rc == LK_OK; i++) {
    rc = lk_outbox_enqueue(ob, &m, NULL, NULL);
    stored += rc == LK_OK;
  }
  if (rc != LK_ESYS)
    fail_msg("a full file system: %s, want LK_ESYS", lk_err_name(rc));
  assert_true(stored > 0);
  /* the CLI says what to do about it */
  assert_int_equal(
      cli(out, sizeof out, "enqueue --db '%s' -d @'%s' http://127.0.0.1:1/x", path, filler), 1);
  assert_non_null(strstr(out, "is its file system full?"));
  assert_non_null(strstr(out, "nothing was stored"));
  assert_null(strstr(out, "damaged"));
  /* room again: the same handle stores, and nothing committed was lost */
  assert_int_equal(unlink(filler), 0);
  assert_int_equal(lk_outbox_enqueue(ob, &m, NULL, NULL), LK_OK);
  lk_outbox_stats st;
  assert_int_equal(lk_outbox_stats_get(ob, &st), LK_OK);
  assert_int_equal(st.pending, stored + 1);
  assert_int_equal(st.enqueued_total, stored + 1);
  lk_outbox_close(ob);
}

/* --- reading an outbox that cannot be written ---------------------------------------------------
 */

static int count_entries(void *ctx, const lk_outbox_entry *e) {
  (void)e;
  ++*(int *)ctx;
  return 0;
}

static lk_outbox *open_read_only(const char *path, int want, char *err, size_t cap) {
  lk_outbox_config c;
  lk_outbox_config_init_default(&c);
  c.path = path;
  c.read_only = true;
  lk_outbox *ob = NULL;
  err[0] = '\0';
  int rc = lk_outbox_open(&c, &ob, err, cap);
  if (rc != want)
    fail_msg("read-only open of %s: %s (%s), want %s", path, lk_err_name(rc), err,
             lk_err_name(want));
  return ob;
}

/* A reader beside a running writer sees what it committed, still in the -wal; and a read-only
 * outbox refuses every call that writes. */
static void test_read_only_beside_a_writer(void **state) {
  (void)state;
  char path[300], err[512];
  new_path(path, sizeof path, "ro");
  lk_outbox *w = open_at(path, NULL);
  for (int i = 0; i < 3; i++)
    enqueue_to(w, "http://127.0.0.1:1/x", NULL);
  lk_outbox *r = open_read_only(path, LK_OK, err, sizeof err);
  int n = 0;
  assert_int_equal(lk_outbox_list(r, -1, 0, 100, count_entries, &n), LK_OK);
  assert_int_equal(n, 3);
  enqueue_to(w, "http://127.0.0.1:1/x", NULL); /* a commit after the reader opened */
  lk_outbox_stats st;
  assert_int_equal(lk_outbox_stats_get(r, &st), LK_OK);
  assert_int_equal(st.pending, 4);
  assert_int_equal(st.enqueued_total, 4);
  lk_outbox_message m;
  lk_outbox_message_init(&m);
  m.method = "POST";
  m.url = "http://127.0.0.1:1/x";
  assert_int_equal(lk_outbox_enqueue(r, &m, NULL, NULL), LK_ESTATE);
  assert_int_equal(lk_outbox_enqueue_batch(r, &m, 1, NULL), LK_ESTATE);
  assert_int_equal(lk_outbox_retry(r, 0, 0, NULL), LK_ESTATE);
  assert_int_equal(lk_outbox_purge(r, -1, true, NULL), LK_ESTATE);
  lk_outbox_sender_config sc;
  sender(&sc, false);
  assert_int_equal(lk_outbox_send(r, &sc, NULL), LK_ESTATE);
  lk_outbox_close(r);
  lk_outbox_close(w);
  /* a file that is not there is not made */
  char missing[320];
  snprintf(missing, sizeof missing, "%s/none%d.db", DIR_, ++seq);
  assert_null(open_read_only(missing, LK_ESYS, err, sizeof err));
  assert_int_equal(access(missing, F_OK), -1);
}

/* On a read-only file system (a snapshot, a backup mounted to look at), list and stats failed
 * ("the outbox directory is not writable ... WAL mode creates the -wal and -shm files there"):
 * SQLite cannot make the WAL's index there. They work now, through the library and the CLI; what
 * writes says why it cannot. A -wal left by a writer that died is read, never skipped. */
static void test_read_only_file_system(void **state) {
  (void)state;
  mount_tmpfs("rofs", "4m");
  char path[400], dead[400], other[400], out[4096], err[512];
  snprintf(path, sizeof path, "%s/q.db", full_mount);
  snprintf(dead, sizeof dead, "%s/dead.db", full_mount);
  snprintf(other, sizeof other, "%s/other.db", full_mount);
  lk_outbox *w = open_at(path, NULL);
  enqueue_to(w, "http://127.0.0.1:1/a", NULL);
  enqueue_to(w, "http://127.0.0.1:1/b", NULL);
  lk_outbox_close(w); /* checkpointed: no -wal left */
  /* a writer killed after its commit leaves its -wal (and -shm) behind */
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    lk_outbox *d = open_at(dead, NULL);
    enqueue_to(d, "http://127.0.0.1:1/lost-if-skipped", NULL);
    raise(SIGKILL);
  }
  int wst;
  assert_int_equal(waitpid(pid, &wst, 0), pid);
  assert_true(WIFSIGNALED(wst));
  /* the same file and -wal copied without the -shm index (as a copy of the files might be):
   * it cannot be read without writing an index, and is not read as if the -wal were not there */
  char bare[400];
  snprintf(bare, sizeof bare, "%s/bare.db", full_mount);
  static unsigned char copy[1 << 20];
  const char *sfx[] = {"", "-wal"};
  for (int i = 0; i < 2; i++) {
    char from[420], to[420];
    snprintf(from, sizeof from, "%s%s", dead, sfx[i]);
    snprintf(to, sizeof to, "%s%s", bare, sfx[i]);
    size_t len = slurp(from, copy, sizeof copy);
    assert_true(len < sizeof copy);
    FILE *f = fopen(to, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(copy, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
  }
  sqlite3 *db;
  assert_int_equal(sqlite3_open(other, &db), SQLITE_OK);
  assert_int_equal(sqlite3_exec(db, "CREATE TABLE t(x)", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  assert_int_equal(mount(NULL, full_mount, NULL, MS_REMOUNT | MS_RDONLY, NULL), 0);

  lk_outbox_config c;
  lk_outbox_config_init_default(&c);
  c.path = path;
  lk_outbox *ob = NULL;
  assert_int_equal(lk_outbox_open(&c, &ob, err, sizeof err), LK_ESYS); /* read-write: as before */
  lk_outbox *r = open_read_only(path, LK_OK, err, sizeof err);
  int n = 0;
  assert_int_equal(lk_outbox_list(r, -1, 0, 100, count_entries, &n), LK_OK);
  assert_int_equal(n, 2);
  lk_outbox_stats st;
  assert_int_equal(lk_outbox_stats_get(r, &st), LK_OK);
  assert_int_equal(st.pending, 2);
  lk_outbox_close(r);
  /* the dead writer's commit is in its -wal only, and is read from there */
  r = open_read_only(dead, LK_OK, err, sizeof err);
  one o = {0};
  assert_int_equal(lk_outbox_list(r, -1, 0, 100, first, &o), LK_OK);
  assert_int_equal(o.n, 1);
  lk_outbox_close(r);
  assert_null(open_read_only(bare, LK_ESYS, err, sizeof err));
  assert_non_null(strstr(err, "-wal"));
  assert_null(open_read_only(other, LK_ESYS, err, sizeof err));
  assert_non_null(strstr(err, "not an outbox"));

  assert_int_equal(cli(out, sizeof out, "list --db '%s'", path), 0);
  assert_non_null(strstr(out, "http://127.0.0.1:1/a"));
  assert_non_null(strstr(out, "http://127.0.0.1:1/b"));
  assert_int_equal(cli(out, sizeof out, "stats --db '%s'", path), 0);
  assert_non_null(strstr(out, "pending 2"));
  assert_int_equal(cli(out, sizeof out, "purge --db '%s'", path), 1);
  assert_non_null(strstr(out, "not writable"));
  assert_int_equal(cli(out, sizeof out, "list --db '%s'", dead), 0);
  assert_non_null(strstr(out, "lost-if-skipped"));
  /* nothing was written: the file system is as it was */
  char wal[420];
  snprintf(wal, sizeof wal, "%s-wal", path);
  assert_int_equal(access(wal, F_OK), -1);
}

/* --- Retry-After
 * ----------------------------------------------------------------------------------- */

/* A 503 with "Retry-After: 86400" put the next round a day away, i.e. at the entry's expiry
 * (24 h), so the entry expired without another call. The delay follows the policy's rule for
 * Retry-After: max(backoff, min(retry_after, retry_after_cap)) (60 s by default), and no
 * Retry-After at all when the policy does not honour it. */
static void test_hostile_retry_after_is_capped(void **state) {
  (void)state;
  faultd_proc fd;
  const char *args[] = {"--status", "503", "--retry-after", "86400", "--max-seconds", "60", NULL};
  assert_int_equal(faultd_start(&fd, "status", args), 0);
  char path[300], url[128];
  faultd_url(&fd, "/x", url, sizeof url);
  for (int honor = 1; honor >= 0; honor--) {
    lk_fake_clock wall;
    lk_fake_clock_init(&wall, lk_wall_ns());
    new_path(path, sizeof path, "ra");
    lk_outbox *ob = open_at(path, &wall.base);
    int64_t id;
    enqueue_to(ob, url, &id);
    lk_outbox_sender_config sc;
    sender(&sc, honor);
    int64_t t0 = wall.base.now(&wall.base);
    lk_outbox_send_stats st;
    assert_int_equal(lk_outbox_send(ob, &sc, &st), LK_OK);
    assert_int_equal(st.failed, 1);
    lk_outbox_entry e = entry(ob, id);
    assert_int_equal(e.state, LK_OUTBOX_PENDING);
    assert_int_equal(e.last_status, 503);
    int64_t want = honor ? t0 + LK_SEC(60) : t0 + LK_SEC(1);
    if (e.next_round != want)
      fail_msg("honor_retry_after %d: next round in %.3f s, want %.3f s", honor,
               (double)(e.next_round - t0) / 1e9, (double)(want - t0) / 1e9);
    lk_outbox_close(ob);
  }
  faultd_stop(&fd);
}

/* --- the wall clock stepped back ---------------------------------------------------------------
 */

/* Stored instants are wall clock. Stepped back an hour between runs, the clock held a failed
 * entry (next round a second away when stored) and one never called at all for that hour:
 * a run found nothing due. An entry never called is always due, and a next round further
 * ahead than the longest delay the sender sets (max(backoff.max, retry_after_cap)) is taken
 * as due; a next round the sender did set is still waited for. */
static void test_clock_stepped_back_between_runs(void **state) {
  (void)state;
  faultd_proc fd;
  const char *args[] = {"--status", "503", "--max-seconds", "60", NULL};
  assert_int_equal(faultd_start(&fd, "status", args), 0);
  char path[300], url[128];
  faultd_url(&fd, "/x", url, sizeof url);
  lk_fake_clock wall;
  int64_t T = lk_wall_ns();
  lk_fake_clock_init(&wall, T);
  new_path(path, sizeof path, "clock");
  lk_outbox *ob = open_at(path, &wall.base);
  int64_t failed_id, fresh_id;
  enqueue_to(ob, url, &failed_id);
  lk_outbox_sender_config sc;
  sender(&sc, true);
  lk_outbox_send_stats st;
  assert_int_equal(lk_outbox_send(ob, &sc, &st), LK_OK);
  assert_int_equal(st.rounds, 1);
  assert_int_equal(entry(ob, failed_id).next_round, T + LK_SEC(1));
  enqueue_to(ob, url, &fresh_id);
  lk_fake_clock_set(&wall, T - LK_SEC(3600)); /* e.g. NTP corrects a clock that ran ahead */
  assert_int_equal(lk_outbox_send(ob, &sc, &st), LK_OK);
  if (st.rounds != 2)
    fail_msg("after the clock went back an hour, %lld of 2 entries had their call",
             (long long)st.rounds);
  assert_int_equal(faultd_request_count(&fd), 3);
  /* the delays set now, on the new clock, are kept */
  assert_int_equal(entry(ob, failed_id).next_round, T - LK_SEC(3600) + LK_SEC(2));
  assert_int_equal(entry(ob, fresh_id).next_round, T - LK_SEC(3600) + LK_SEC(1));
  assert_int_equal(lk_outbox_send(ob, &sc, &st), LK_OK);
  assert_int_equal(st.rounds, 0);
  lk_fake_clock_advance(&wall, LK_SEC(2));
  assert_int_equal(lk_outbox_send(ob, &sc, &st), LK_OK);
  assert_int_equal(st.rounds, 2);
  lk_outbox_close(ob);
  faultd_stop(&fd);
}

/* Bytes this process has asked the kernel for through read(2) and pread(2) so far
 * (/proc/self/io's rchar). Page-cache hits count too, so the figure shows what SQLite read
 * whatever the disk had cached. */
static long long read_bytes(void) {
  FILE *f = fopen("/proc/self/io", "r");
  assert_non_null(f);
  char line[128];
  long long n = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "rchar: %lld", &n) == 1)
      break;
  fclose(f);
  assert_true(n >= 0);
  return n;
}

static void sql_on(const char *path, const char *sql) {
  sqlite3 *db;
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  char *msg = NULL;
  if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK)
    fail_msg("%s: %s", sql, msg ? msg : "?");
  sqlite3_close(db);
}

/* The sender's look for due entries, its count of pending ones and stats tested columns that
 * the table stores after the body, so each of them read every pending body from the file
 * (every look of a sender with a backlog waiting out its backoff). They read an index now. */
static void test_scans_do_not_read_bodies(void **state) {
  (void)state;
  enum { N = 120, BODY = 256 << 10 };
  lk_fake_clock wall;
  int64_t T = lk_wall_ns();
  lk_fake_clock_init(&wall, T);
  char path[300], sql[200];
  new_path(path, sizeof path, "scan");
  lk_outbox *ob = open_at(path, &wall.base);
  char *body = malloc(BODY);
  assert_non_null(body);
  memset(body, 'b', BODY);
  for (int i = 0; i < N; i++) {
    lk_outbox_message m;
    lk_outbox_message_init(&m);
    m.method = "POST";
    m.url = "http://127.0.0.1:1/x";
    m.body = body;
    m.body_len = BODY;
    assert_int_equal(lk_outbox_enqueue(ob, &m, NULL, NULL), LK_OK);
  }
  free(body);
  lk_outbox_close(ob);
  /* every entry called once and waiting 5 s for its next round */
  snprintf(sql, sizeof sql, "UPDATE entries SET rounds = 1, next_ns = %lld",
           (long long)(T + LK_SEC(5)));
  sql_on(path, sql);
  ob = open_at(path, &wall.base);
  long long before = read_bytes();
  lk_outbox_stats st;
  assert_int_equal(lk_outbox_stats_get(ob, &st), LK_OK);
  assert_int_equal(st.pending, N);
  lk_outbox_sender_config sc;
  sender(&sc, false);
  lk_outbox_send_stats ss;
  assert_int_equal(lk_outbox_send(ob, &sc, &ss), LK_OK);
  assert_int_equal(ss.rounds, 0); /* none due */
  long long read = read_bytes() - before;
  lk_outbox_close(ob);
  if (read > (long long)N * BODY / 8)
    fail_msg("a look at %d entries waiting for their round read %lld bytes (their bodies: %lld)", N,
             read, (long long)N * BODY);
}

/* A file of schema version 1 (before the scans' index) is read as it is read-only, and upgraded
 * by a read-write open, its entries kept. */
static void test_schema_1_is_read_and_upgraded(void **state) {
  (void)state;
  char path[300], err[512];
  new_path(path, sizeof path, "v1");
  lk_outbox *ob = open_at(path, NULL);
  int64_t id;
  enqueue_to(ob, "http://127.0.0.1:1/x", &id);
  lk_outbox_close(ob);
  sql_on(path, "DROP INDEX entries_state; CREATE INDEX entries_by_state ON entries(state, id);"
               "PRAGMA user_version = 1");
  ob = open_read_only(path, LK_OK, err, sizeof err);
  int n = 0;
  assert_int_equal(lk_outbox_list(ob, -1, 0, 100, count_entries, &n), LK_OK);
  assert_int_equal(n, 1);
  lk_outbox_close(ob);
  ob = open_at(path, NULL);
  assert_int_equal(entry(ob, id).state, LK_OUTBOX_PENDING);
  lk_outbox_close(ob);
  sqlite3 *db;
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  sqlite3_stmt *q;
  assert_int_equal(sqlite3_prepare_v2(db,
                                      "SELECT (SELECT user_version FROM pragma_user_version), "
                                      "(SELECT count(*) FROM sqlite_schema WHERE type = 'index' "
                                      "AND name = 'entries_state'), "
                                      "(SELECT count(*) FROM sqlite_schema WHERE name = "
                                      "'entries_by_state')",
                                      -1, &q, NULL),
                   SQLITE_OK);
  assert_int_equal(sqlite3_step(q), SQLITE_ROW);
  assert_int_equal(sqlite3_column_int(q, 0), 2);
  assert_int_equal(sqlite3_column_int(q, 1), 1);
  assert_int_equal(sqlite3_column_int(q, 2), 0);
  sqlite3_finalize(q);
  sqlite3_close(db);
}

/* --- the CLI ---------------------------------------------------------------------------------- */

static const char *const entry_keys[] = {"id",
                                         "state",
                                         "method",
                                         "url",
                                         "key",
                                         "headers",
                                         "body_bytes",
                                         "created_ns",
                                         "expires_ns",
                                         "next_round_ns",
                                         "done_ns",
                                         "rounds",
                                         "attempts",
                                         "last_error",
                                         "last_failure",
                                         "last_status",
                                         "response_headers",
                                         "response_body",
                                         "response_truncated"};

/* A stored string that is not UTF-8 (a Latin-1 header value, a URL with a raw byte, a server's
 * Latin-1 response header) made its key vanish from `list --json`: jansson refuses such text
 * and json_object_set_new() drops the NULL. Every object has every key; bad bytes are U+FFFD. */
static void test_cli_json_has_every_key(void **state) {
  (void)state;
  char db[300], out[16384];
  new_path(db, sizeof db, "json");
  assert_int_equal(cli(out, sizeof out,
                       "enqueue --db '%s' -H \"$(printf 'X-Name: caf\\351')\" "
                       "\"$(printf 'http://127.0.0.1:1/caf\\351')\"",
                       db),
                   0);
  sqlite3 *sdb;
  assert_int_equal(sqlite3_open(db, &sdb), SQLITE_OK);
  assert_int_equal(sqlite3_exec(sdb,
                                "UPDATE entries SET resp_headers = 'X-R: caf' || x'e9' || '\n'",
                                NULL, NULL, NULL),
                   SQLITE_OK);
  sqlite3_close(sdb);
  assert_int_equal(cli(out, sizeof out, "list --db '%s' --json", db), 0);
  json_error_t jerr;
  json_t *j = json_loads(out, JSON_DISABLE_EOF_CHECK, &jerr);
  if (!j)
    fail_msg("not JSON: %s: %s", jerr.text, out);
  for (size_t i = 0; i < sizeof entry_keys / sizeof entry_keys[0]; i++)
    if (!json_object_get(j, entry_keys[i]))
      fail_msg("'%s' is missing: %s", entry_keys[i], out);
  assert_int_equal(json_object_size(j), sizeof entry_keys / sizeof entry_keys[0]);
  assert_string_equal(json_string_value(json_object_get(j, "headers")),
                      "X-Name: caf\xEF\xBF\xBD\n");
  assert_string_equal(json_string_value(json_object_get(j, "url")),
                      "http://127.0.0.1:1/caf\xEF\xBF\xBD");
  assert_string_equal(json_string_value(json_object_get(j, "response_headers")),
                      "X-R: caf\xEF\xBF\xBD\n");
  json_decref(j);
}

/* The body limit is 64 MiB (lk_outbox_message.body_len), but `-d @FILE` stopped reading at a
 * full 64 MiB buffer and took it for a larger body: exactly 64 MiB was refused. */
static void test_cli_body_of_exactly_64_mib(void **state) {
  (void)state;
  char db[300], out[4096];
  new_path(db, sizeof db, "big");
  int rc = cli(out, sizeof out,
               "enqueue --db '%s' http://127.0.0.1:1/x >/dev/null && head -c 67108864 /dev/zero | "
               "'%s' outbox enqueue --db '%s' -d @- http://127.0.0.1:1/x",
               db, LINKD_BIN, db);
  if (rc != 0)
    fail_msg("a body of exactly 64 MiB: exit %d: %s", rc, out);
  assert_int_equal(cli(out, sizeof out, "list --db '%s' --json --after 1", db), 0);
  assert_non_null(strstr(out, "\"body_bytes\":67108864,"));
  assert_int_equal(
      cli(out, sizeof out, "enqueue --db '%s' -d @- http://127.0.0.1:1/x < /dev/zero", db), 66);
  assert_non_null(strstr(out, "larger than 64 MiB"));
  assert_int_equal(cli(out, sizeof out, "stats --db '%s'", db), 0);
  assert_non_null(strstr(out, "enqueued_total 2\n"));
  char rm[700];
  snprintf(rm, sizeof rm, "rm -f '%s' '%s'-*", db, db); /* 128 MiB in the WAL and the file */
  assert_int_equal(system(rm), 0);
}

/* --retention 0s was taken as "not given" (7 days) and --db '' reached lk_outbox_open() as
 * ": invalid argument": both are usage errors now. */
static void test_cli_bad_common_flags(void **state) {
  (void)state;
  char db[300], out[4096];
  new_path(db, sizeof db, "flags");
  assert_int_equal(cli(out, sizeof out, "enqueue --db '%s' http://127.0.0.1:1/x", db), 0);
  assert_int_equal(cli(out, sizeof out, "purge --db '%s' --retention 0s", db), 64);
  assert_non_null(strstr(out, "--retention 0s: the window must be more than 0"));
  assert_int_equal(cli(out, sizeof out, "run --db '%s' --retention 0s --until idle", db), 64);
  assert_int_equal(cli(out, sizeof out, "enqueue --db '' http://127.0.0.1:1/x"), 64);
  assert_non_null(strstr(out, "--db needs a file"));
  assert_int_equal(cli(out, sizeof out, "stats --db ''"), 64);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_symlinked_path_is_the_same_sender),
      cmocka_unit_test(test_many_processes_open_one_new_file),
      cmocka_unit_test(test_future_schema_is_left_as_it_was),
      cmocka_unit_test(test_scans_do_not_read_bodies),
      cmocka_unit_test(test_schema_1_is_read_and_upgraded),
      cmocka_unit_test_teardown(test_full_file_system, unmount_full),
      cmocka_unit_test(test_read_only_beside_a_writer),
      cmocka_unit_test_teardown(test_read_only_file_system, unmount_full),
      cmocka_unit_test(test_hostile_retry_after_is_capped),
      cmocka_unit_test(test_clock_stepped_back_between_runs),
      cmocka_unit_test(test_cli_json_has_every_key),
      cmocka_unit_test(test_cli_body_of_exactly_64_mib),
      cmocka_unit_test(test_cli_bad_common_flags),
  };
  int rc = cmocka_run_group_tests(tests, group_setup, group_teardown);
  curl_global_cleanup();
  return rc;
}
