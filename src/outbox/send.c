/* SPDX-License-Identifier: MIT */
/* send.c: the sender. Due entries are claimed in id order into a fixed set of slots, sent as
 * asynchronous calls on one lk_http_client, and their outcomes recorded in one transaction per
 * batch of calls that ended together. Nothing is written when an entry is claimed: a crash
 * leaves it PENDING, and the next sender sends it again with its stored key. */
#include "outbox_impl.h"

#include "core/sat.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

void lk_outbox_sender_config_init_default(lk_outbox_sender_config *c) {
  memset(c, 0, sizeof *c);
  lk_http_policy_init_default(&c->policy);
  c->client = NULL;
  c->concurrency = 16;
  lk_backoff_config_init_default(&c->backoff);
  c->backoff.kind = LK_BACKOFF_EXPONENTIAL;
  c->backoff.base = LK_SEC(1);
  c->backoff.max = LK_SEC(300);
  c->backoff.jitter = LK_JITTER_FULL;
  c->rng = NULL;
  c->until = LK_OUTBOX_UNTIL_IDLE;
  c->poll_interval = LK_MS(200);
  c->max_rounds = 0;
  c->cancel = NULL;
  c->on_round = NULL;
  c->on_round_ctx = NULL;
}

typedef struct slot {
  struct sender *s;
  bool busy, done;
  int64_t id, created, expires;
  int rounds, attempts; /* before this round */
  char *method, *url, *key;
  lk_http_result *res;
} slot;

typedef struct sender {
  lk_outbox *ob;
  const lk_outbox_sender_config *cfg;
  lk_http_client *client;
  const lk_clock *mono;
  lk_rand *rng;
  lk_rand_fast own_rng;
  slot *slots;
  int nslots, inflight, ndone;
  int64_t cursor; /* highest id claimed in this pass: every entry in flight is at or below it */
  lk_outbox_send_stats st;
  /* LK_OUTBOX_UNTIL_IDLE: the ids this run has claimed, an open-addressing set (0 = empty
   * slot; ids start at 1). Each entry gets at most one call per idle run, so a failed entry
   * whose next round comes due while the run goes on waits for the next run: without it, a run
   * against a server that is down went on as long as full-jitter rounds kept coming due. */
  int64_t *seen;
  size_t seen_cap, seen_n;
  int64_t horizon; /* the longest delay this sender sets between rounds (see OB_ST_DUE) */
} sender;

static size_t seen_slot(const int64_t *set, size_t cap, int64_t id) {
  size_t i = ((uint64_t)id * 0x9e3779b97f4a7c15u) & (cap - 1);
  while (set[i] != 0 && set[i] != id)
    i = (i + 1) & (cap - 1);
  return i;
}

static bool seen_has(const sender *s, int64_t id) {
  return s->seen_cap && s->seen[seen_slot(s->seen, s->seen_cap, id)] == id;
}

/* LK_OK or LK_ENOMEM. */
static int seen_add(sender *s, int64_t id) {
  if ((s->seen_n + 1) * 2 > s->seen_cap) {
    size_t cap = s->seen_cap ? s->seen_cap * 2 : 1024;
    int64_t *set = calloc(cap, sizeof *set);
    if (!set)
      return LK_ENOMEM;
    for (size_t i = 0; i < s->seen_cap; i++)
      if (s->seen[i] != 0)
        set[seen_slot(set, cap, s->seen[i])] = s->seen[i];
    free(s->seen);
    s->seen = set;
    s->seen_cap = cap;
  }
  size_t i = seen_slot(s->seen, s->seen_cap, id);
  if (s->seen[i] == 0) {
    s->seen[i] = id;
    s->seen_n++;
  }
  return LK_OK;
}

static void slot_clear(slot *sl) {
  free(sl->method);
  free(sl->url);
  free(sl->key);
  lk_http_result_free(sl->res);
  struct sender *s = sl->s;
  memset(sl, 0, sizeof *sl);
  sl->s = s;
}

static void on_done(void *ud, lk_http_result *res) {
  slot *sl = ud;
  sl->res = res;
  sl->done = true;
  sl->s->ndone++;
  /* ends the bounded lk_http_client_run() at once, so the outcome is recorded without waiting
   * for the other calls */
  lk_http_client_wakeup(sl->s->client);
}

/* --- recording outcomes ------------------------------------------------------------------- */

typedef struct outcome {
  lk_outbox_state state;
  int err, status, attempts;
  const char *failure;
  int64_t next, done;
  char *resp_headers; /* malloc'd */
  const char *resp_body;
  size_t resp_len;
  bool truncated;
} outcome;

/* The permanent 4xx rule: the server answered and said the request itself is wrong (400, 404,
 * 409, 422, ...), so sending it again cannot help. 408, 425 and 429 are refusals, retried; so is
 * any 4xx that comes with a Retry-After: the server says when to come back. That is how a server
 * that honours keys answers a resend that arrives while the first request with the key is still
 * executing (libraryd, and the IETF Idempotency-Key draft: 409 "still being processed"), which
 * is exactly what a sender restarted after a crash produces; poisoning it would lose an entry
 * the server is applying at that moment. */
static bool is_poison(int err, int status, lk_failure kind, const lk_http_response *resp) {
  if (err == LK_OK)
    return false;
  if (status >= 400 && status < 500 && lk_failure_class_of(kind) == LK_FC_PERMANENT)
    return !(resp && lk_http_response_header(resp, "Retry-After"));
  /* a body over max_response_body, or a stored request that no longer builds: a person has to
   * look at it, and resending would only repeat it */
  return err == LK_ETOOBIG || err == LK_EINVAL;
}

/* The response's Retry-After in ns, or 0. */
static int64_t retry_after_of(const lk_http_response *resp, int64_t now_wall) {
  const char *v = resp ? lk_http_response_header(resp, "Retry-After") : NULL;
  int64_t ns = 0;
  if (!v || lk_http_retry_after_parse(v, strlen(v), now_wall, &ns) != LK_OK || ns < 0)
    return 0;
  return ns;
}

static char *headers_text(const lk_http_response *resp) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f)
    return NULL;
  for (size_t i = 0; resp && i < resp->header_count; i++)
    fprintf(f, "%s: %s\n", resp->headers[i].name, resp->headers[i].value);
  if (fclose(f) != 0) {
    free(buf);
    return NULL;
  }
  return buf;
}

static void outcome_of(sender *s, const slot *sl, int64_t now, outcome *o) {
  memset(o, 0, sizeof *o);
  const lk_http_result *res = sl->res;
  o->err = res ? lk_http_result_err(res) : LK_EINVAL;
  lk_failure kind = res ? lk_http_result_failure(res) : LK_F_NONE;
  o->status = res ? lk_http_result_status(res) : 0;
  o->failure = res ? lk_failure_name(kind) : "";
  size_t n = 0;
  const lk_http_attempt_info *a = res ? lk_http_result_attempts(res, &n) : NULL;
  for (size_t i = 0; i < n; i++)
    o->attempts += a[i].phase != LK_PHASE_QUEUED; /* a refusal by a protection sent nothing */
  const lk_http_response *resp = res ? lk_http_result_response(res) : NULL;
  if (resp) {
    o->resp_headers = headers_text(resp);
    o->resp_body = resp->body;
    o->resp_len = resp->body_len;
    if (o->resp_len > s->ob->cfg.max_stored_response) {
      o->resp_len = s->ob->cfg.max_stored_response;
      o->truncated = true;
    }
  }
  if (o->err == LK_OK) {
    o->state = LK_OUTBOX_DELIVERED;
  } else if (is_poison(o->err, o->status, kind, resp)) {
    o->state = LK_OUTBOX_POISONED;
  } else if (now >= sl->expires) {
    o->state = LK_OUTBOX_EXPIRED;
  } else {
    o->state = LK_OUTBOX_PENDING;
    int64_t delay = lk_backoff_delay(&s->cfg->backoff, sl->rounds + 1, 0, s->rng);
    /* not sooner than the server asked, within the policy's rules for Retry-After (retry.h:
     * max(delay, min(retry_after, retry_after_cap))): taken raw, a hostile "Retry-After:
     * 99999999" parked the entry until its expiry, which then expired it unsent */
    const lk_retry_config *rcf = &s->cfg->policy.retry.cfg;
    int64_t after = rcf->honor_retry_after ? retry_after_of(resp, now) : 0;
    if (after > rcf->retry_after_cap)
      after = rcf->retry_after_cap;
    if (after > delay)
      delay = after;
    int64_t next = lk_sat_add(now, delay);
    /* never past the expiry: the entry is then due once more, and expires when claimed */
    o->next = next < sl->expires ? next : sl->expires;
  }
  if (o->state != LK_OUTBOX_PENDING)
    o->done = now;
}

static int record_one(lk_outbox *ob, const slot *sl, const outcome *o) {
  sqlite3_stmt *st = lk__ob_stmt(ob, OB_ST_RECORD);
  if (!st)
    return LK_EIO;
  sqlite3_bind_int64(st, 1, sl->id);
  sqlite3_bind_int(st, 2, (int)o->state);
  sqlite3_bind_int(st, 3, o->attempts);
  sqlite3_bind_int64(st, 4, o->next);
  sqlite3_bind_int64(st, 5, o->done);
  sqlite3_bind_int(st, 6, o->err);
  sqlite3_bind_text(st, 7, o->failure, -1, SQLITE_STATIC);
  sqlite3_bind_int(st, 8, o->status);
  sqlite3_bind_text(st, 9, o->resp_headers ? o->resp_headers : "", -1, SQLITE_STATIC);
  sqlite3_bind_blob64(st, 10, o->resp_body ? o->resp_body : "", o->resp_len, SQLITE_STATIC);
  sqlite3_bind_int(st, 11, o->truncated);
  int r = sqlite3_step(st);
  sqlite3_reset(st);
  return r == SQLITE_DONE ? LK_OK : lk__ob_err(r);
}

static void tally(ob_totals *t, lk_outbox_send_stats *st, const outcome *o) {
  t->rounds++;
  t->attempts += o->attempts;
  st->rounds++;
  st->attempts += o->attempts;
  switch (o->state) {
  case LK_OUTBOX_DELIVERED:
    t->delivered++;
    st->delivered++;
    break;
  case LK_OUTBOX_POISONED:
    t->poisoned++;
    st->poisoned++;
    break;
  case LK_OUTBOX_EXPIRED:
    t->expired++;
    st->expired++;
    break;
  default: st->failed++; break;
  }
}

/* Records every ended call in one transaction, then tells on_round. A cancelled call is not a
 * round: the entry stays as it was. */
static int flush(sender *s) {
  if (!s->ndone)
    return LK_OK;
  lk_outbox *ob = s->ob;
  int64_t now = lk__ob_now(ob);
  outcome *os = calloc((size_t)s->nslots, sizeof *os);
  if (!os)
    return LK_ENOMEM;
  for (int i = 0; i < s->nslots; i++)
    if (s->slots[i].done)
      outcome_of(s, &s->slots[i], now, &os[i]);
  ob_totals t = {0};
  lk_outbox_send_stats st = {0};
  pthread_mutex_lock(&ob->mu);
  int rc = lk__ob_begin(ob);
  for (int i = 0; rc == LK_OK && i < s->nslots; i++) {
    slot *sl = &s->slots[i];
    if (!sl->done || os[i].err == LK_ECANCELED)
      continue;
    rc = record_one(ob, sl, &os[i]);
    tally(&t, &st, &os[i]);
  }
  if (rc == LK_OK)
    rc = lk__ob_totals_add(ob, &t);
  if (rc == LK_OK)
    rc = lk__ob_commit(ob);
  else
    lk__ob_rollback(ob);
  pthread_mutex_unlock(&ob->mu);
  for (int i = 0; i < s->nslots; i++) {
    slot *sl = &s->slots[i];
    if (!sl->done)
      continue;
    if (rc == LK_OK && s->cfg->on_round && os[i].err != LK_ECANCELED) {
      lk_outbox_entry e = {
          .id = sl->id,
          .state = os[i].state,
          .method = sl->method,
          .url = sl->url,
          .key = sl->key,
          .headers = "",
          .created = sl->created,
          .expires = sl->expires,
          .next_round = os[i].next,
          .done = os[i].done,
          .rounds = sl->rounds + 1,
          .attempts = sl->attempts + os[i].attempts,
          .last_error = os[i].err,
          .last_failure = os[i].failure,
          .last_status = os[i].status,
          .response_headers = os[i].resp_headers ? os[i].resp_headers : "",
          .response_body = os[i].resp_body ? os[i].resp_body : "",
          .response_body_len = os[i].resp_len,
          .response_truncated = os[i].truncated,
      };
      s->cfg->on_round(s->cfg->on_round_ctx, &e, sl->res);
    }
    free(os[i].resp_headers);
    slot_clear(sl);
    s->inflight--;
  }
  free(os);
  s->ndone = 0;
  if (rc == LK_OK) {
    s->st.rounds += st.rounds;
    s->st.attempts += st.attempts;
    s->st.delivered += st.delivered;
    s->st.poisoned += st.poisoned;
    s->st.expired += st.expired;
    s->st.failed += st.failed;
  }
  return rc;
}

/* --- claiming ----------------------------------------------------------------------------- */

static int add_stored_headers(lk_http_request *req, const char *text) {
  const char *p = text;
  int rc = LK_OK;
  while (rc == LK_OK && *p) {
    const char *eol = strchr(p, '\n');
    size_t len = eol ? (size_t)(eol - p) : strlen(p);
    const char *colon = memchr(p, ':', len);
    if (!colon || colon == p)
      return LK_EINVAL;
    char *name = strndup(p, (size_t)(colon - p));
    const char *v = colon + 1;
    while (v < p + len && (*v == ' ' || *v == '\t'))
      v++;
    char *value = strndup(v, (size_t)(p + len - v));
    rc = name && value ? lk_http_request_add_header(req, name, value) : LK_ENOMEM;
    free(name);
    free(value);
    p += len + (eol ? 1 : 0);
  }
  return rc;
}

/* One claimed row, read under the lock and submitted after it. */
typedef struct claimed {
  slot *sl;
  lk_http_request *req; /* NULL: the stored request did not build (poisoned at once) */
  bool expired;
} claimed;

static int submit(sender *s, claimed *c) {
  slot *sl = c->sl;
  if (!c->req) {
    /* recorded as a round without a result: LK_EINVAL, poisoned */
    sl->done = true;
    s->ndone++;
    return LK_OK;
  }
  lk_http_policy pol = s->cfg->policy;
  pol.idem_mode = LK_IDEM_KEY;
  pol.idem_key = sl->key;
  pol.idem_tenant = NULL; /* the stored key is already composed */
  int64_t left = lk_sat_sub(sl->expires, lk__ob_now(s->ob));
  pol.deadline_at =
      lk_deadline_min(pol.deadline_at, lk_deadline_after(s->mono->now(s->mono), left));
  int rc = lk_http_submit(s->client, c->req, &pol, s->cfg->cancel, on_done, sl);
  lk_http_request_free(c->req);
  c->req = NULL;
  if (rc == LK_EINVAL || rc == LK_ECONFIG) {
    /* the policy was checked at the start, so it is this entry's key or URL: poisoned */
    sl->done = true;
    s->ndone++;
    return LK_OK;
  }
  return rc;
}

static int claim(sender *s, int *nclaimed) {
  *nclaimed = 0;
  int room = s->nslots - s->inflight;
  if (s->cfg->max_rounds > 0) {
    int64_t left = s->cfg->max_rounds - s->st.rounds - s->inflight;
    if (left < room)
      room = left < 0 ? 0 : (int)left;
  }
  if (room <= 0)
    return LK_OK;
  claimed *cs = calloc((size_t)room, sizeof *cs);
  if (!cs)
    return LK_ENOMEM;
  lk_outbox *ob = s->ob;
  int64_t now = lk__ob_now(ob);
  int n = 0, rc = LK_OK;
  pthread_mutex_lock(&ob->mu);
  sqlite3_stmt *st = lk__ob_stmt(ob, OB_ST_DUE);
  if (!st)
    rc = LK_EIO;
  int r = SQLITE_DONE;
  if (rc == LK_OK) {
    bool idle = s->cfg->until == LK_OUTBOX_UNTIL_IDLE;
    sqlite3_bind_int64(st, 1, s->cursor);
    sqlite3_bind_int64(st, 2, now);
    sqlite3_bind_int(st, 3, idle ? -1 : room); /* idle: rows already called are stepped over */
    sqlite3_bind_int64(st, 4, lk_sat_add(now, s->horizon));
    int si = 0;
    while (n < room && (r = sqlite3_step(st)) == SQLITE_ROW) {
      int64_t id = sqlite3_column_int64(st, 0);
      if (idle && seen_has(s, id)) {
        s->cursor = id;
        continue;
      }
      if (idle && (rc = seen_add(s, id)) != LK_OK)
        break;
      while (s->slots[si].busy)
        si++;
      slot *sl = &s->slots[si];
      sl->busy = true;
      s->inflight++;
      claimed *c = &cs[n++];
      c->sl = sl;
      sl->id = id;
      s->cursor = sl->id;
      sl->method = strdup((const char *)sqlite3_column_text(st, 1));
      sl->url = strdup((const char *)sqlite3_column_text(st, 2));
      sl->key = strdup((const char *)sqlite3_column_text(st, 5));
      sl->expires = sqlite3_column_int64(st, 6);
      sl->rounds = sqlite3_column_int(st, 7);
      sl->attempts = sqlite3_column_int(st, 8);
      sl->created = sqlite3_column_int64(st, 9);
      if (!sl->method || !sl->url || !sl->key) {
        rc = LK_ENOMEM;
        break;
      }
      if (now >= sl->expires) {
        c->expired = true;
        continue;
      }
      /* LK_EINVAL: the stored request no longer builds (poisoned below); LK_ENOMEM: the entry
       * stays PENDING for the next run, as for any claim not submitted */
      int brc = lk_http_request_create(sl->method, sl->url, &c->req);
      if (brc == LK_OK)
        brc = add_stored_headers(c->req, (const char *)sqlite3_column_text(st, 3));
      if (brc == LK_OK)
        brc = lk_http_request_set_body(c->req,
                                       sqlite3_column_blob(st, 4) ? sqlite3_column_blob(st, 4) : "",
                                       (size_t)sqlite3_column_bytes(st, 4));
      if (brc == LK_ENOMEM) {
        rc = brc;
        break;
      }
      if (brc != LK_OK) {
        lk_http_request_free(c->req);
        c->req = NULL;
      }
    }
    if (rc == LK_OK && r != SQLITE_ROW && r != SQLITE_DONE)
      rc = lk__ob_err(r);
    sqlite3_reset(st);
  }
  /* Entries whose expiry passed while they waited: EXPIRED, in one transaction. */
  int nexp = 0;
  for (int i = 0; i < n; i++)
    nexp += cs[i].expired;
  if (rc == LK_OK && nexp) {
    rc = lk__ob_begin(ob);
    for (int i = 0; rc == LK_OK && i < n; i++) {
      if (!cs[i].expired)
        continue;
      sqlite3_stmt *e = lk__ob_stmt(ob, OB_ST_EXPIRE);
      if (!e) {
        rc = LK_EIO;
        break;
      }
      sqlite3_bind_int64(e, 1, cs[i].sl->id);
      sqlite3_bind_int64(e, 2, now);
      int er = sqlite3_step(e);
      sqlite3_reset(e);
      if (er != SQLITE_DONE)
        rc = lk__ob_err(er);
    }
    if (rc == LK_OK)
      rc = lk__ob_totals_add(ob, &(ob_totals){.expired = nexp});
    if (rc == LK_OK)
      rc = lk__ob_commit(ob);
    else
      lk__ob_rollback(ob);
  }
  pthread_mutex_unlock(&ob->mu);
  for (int i = 0; i < n; i++) {
    if (cs[i].expired && rc == LK_OK) {
      s->st.expired++;
      slot_clear(cs[i].sl);
      s->inflight--;
      continue;
    }
    if (rc == LK_OK) {
      rc = submit(s, &cs[i]);
      if (rc == LK_OK)
        continue;
    }
    /* not submitted: forget the claim (the entry stays PENDING in the file) */
    lk_http_request_free(cs[i].req);
    if (!cs[i].sl->done) {
      slot_clear(cs[i].sl);
      s->inflight--;
    }
  }
  free(cs);
  if (rc == LK_OK)
    *nclaimed = n;
  return rc;
}

/* --- the run -------------------------------------------------------------------------------- */

/* Pending entries and the earliest next round among them. */
static int pending_info(lk_outbox *ob, int64_t *count, int64_t *next) {
  pthread_mutex_lock(&ob->mu);
  sqlite3_stmt *st;
  int rc = LK_OK;
  if (sqlite3_prepare_v2(ob->db, "SELECT count(*), min(next_ns) FROM entries WHERE state = 0", -1,
                         &st, NULL) != SQLITE_OK) {
    rc = LK_EIO;
  } else {
    int r = sqlite3_step(st);
    if (r == SQLITE_ROW) {
      *count = sqlite3_column_int64(st, 0);
      *next = sqlite3_column_int64(st, 1);
    } else {
      rc = lk__ob_err(r);
    }
    sqlite3_finalize(st);
  }
  pthread_mutex_unlock(&ob->mu);
  return rc;
}

/* Sleeps up to `ns`, in steps short enough to notice the cancellation token. */
static bool idle_wait(const sender *s, int64_t ns) {
  int64_t step = LK_MS(10);
  for (int64_t waited = 0; waited < ns; waited += step) {
    if (s->cfg->cancel && lk_http_cancel_fired(s->cfg->cancel))
      return false;
    int64_t d = ns - waited < step ? ns - waited : step;
    struct timespec ts = {(time_t)(d / LK_NS_PER_S), (long)(d % LK_NS_PER_S)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
  }
  return !(s->cfg->cancel && lk_http_cancel_fired(s->cfg->cancel));
}

/* The single-sender lock: flock on "<path>-sender", dropped by the kernel when the process dies.
 * Returns the descriptor, or LK_EAGAIN / LK_ESYS. */
static int lock_sender(const lk_outbox *ob) {
  /* Beside the file the path resolves to: a path through a symlink (or with "." / ".." in it)
   * names the same database, which SQLite resolves, but "<path>-sender" was another lock file,
   * so two senders ran on one file and delivered its entries twice. */
  char *real = realpath(ob->path, NULL);
  const char *base = real ? real : ob->path;
  size_t n = strlen(base) + sizeof "-sender";
  char *p = malloc(n);
  if (!p) {
    free(real);
    return LK_ENOMEM;
  }
  snprintf(p, n, "%s-sender", base);
  free(real);
  int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  free(p);
  if (fd < 0)
    return LK_ESYS;
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    close(fd);
    return e == EWOULDBLOCK ? LK_EAGAIN : LK_ESYS;
  }
  return fd;
}

static int check_config(const lk_outbox_sender_config *cfg) {
  if (cfg->concurrency < 1 || cfg->concurrency > 4096 || cfg->poll_interval <= 0 ||
      cfg->max_rounds < 0 || (unsigned)cfg->until > LK_OUTBOX_FOREVER)
    return LK_ECONFIG;
  if (lk_backoff_config_validate(&cfg->backoff, NULL) != LK_OK)
    return LK_ECONFIG;
  /* the per-entry fields are the sender's; the rest must be valid as it is */
  lk_http_policy p = cfg->policy;
  p.idem_mode = LK_IDEM_NONE;
  p.idem_key = NULL;
  p.idem_tenant = NULL;
  return lk_http_policy_validate(&p, NULL);
}

int lk_outbox_send(lk_outbox *ob, const lk_outbox_sender_config *cfg, lk_outbox_send_stats *out) {
  if (out)
    memset(out, 0, sizeof *out);
  if (!ob || !cfg)
    return LK_EINVAL;
  if (ob->cfg.read_only)
    return LK_ESTATE;
  if (check_config(cfg) != LK_OK)
    return LK_ECONFIG;
  int lock = lock_sender(ob);
  if (lock < 0)
    return lock;
  sender s = {.ob = ob, .cfg = cfg, .nslots = cfg->concurrency};
  s.mono = cfg->policy.clock ? cfg->policy.clock : lk_clock_system();
  const lk_retry_config *rcfg = &cfg->policy.retry.cfg;
  s.horizon = cfg->backoff.max;
  if (rcfg->honor_retry_after && rcfg->retry_after_cap > s.horizon)
    s.horizon = rcfg->retry_after_cap;
  s.rng = cfg->rng;
  if (!s.rng) {
    lk_rand_fast_init(&s.own_rng); /* LK_ESYS still leaves a usable generator for jitter */
    s.rng = &s.own_rng.base;
  }
  s.client = cfg->client ? cfg->client : lk_http_client_new(NULL);
  s.slots = calloc((size_t)s.nslots, sizeof *s.slots);
  int rc = s.client && s.slots ? LK_OK : LK_ENOMEM;
  for (int i = 0; rc == LK_OK && i < s.nslots; i++)
    s.slots[i].s = &s;
  if (rc == LK_OK)
    rc = lk__ob_purge(ob, lk_sat_sub(lk__ob_now(ob), ob->cfg.retention), false, NULL);
  while (rc == LK_OK) {
    if (cfg->cancel && lk_http_cancel_fired(cfg->cancel)) {
      rc = LK_ECANCELED;
      break;
    }
    if (cfg->max_rounds > 0 && s.st.rounds >= cfg->max_rounds)
      break;
    int n;
    int64_t from = s.cursor; /* idle: a claim may step over rows and move the cursor anyway */
    rc = claim(&s, &n);
    if (rc != LK_OK)
      break;
    if (s.ndone) { /* entries that could not be sent at all: record them now */
      rc = flush(&s);
      continue;
    }
    if (s.inflight == 0 && n == 0) {
      if (from > 0) { /* end of a pass: start again from the lowest id */
        s.cursor = 0;
        continue;
      }
      int64_t wait = cfg->poll_interval;
      if (cfg->until == LK_OUTBOX_UNTIL_IDLE)
        break;
      if (cfg->until == LK_OUTBOX_UNTIL_EMPTY) {
        int64_t count = 0, next = 0;
        rc = pending_info(ob, &count, &next);
        if (rc != LK_OK || count == 0)
          break;
        int64_t until_next = lk_sat_sub(next, lk__ob_now(ob));
        if (until_next < wait)
          wait = until_next < LK_MS(1) ? LK_MS(1) : until_next;
      }
      if (!idle_wait(&s, wait))
        rc = LK_ECANCELED;
      continue;
    }
    int r = lk_http_client_run(s.client, LK_MS(100));
    if (r < 0) {
      rc = r;
      break;
    }
    rc = flush(&s);
  }
  /* Calls still in flight (cancelled, or a failure above) end within their deadlines; wait
   * for them so their slots can be freed, and record what can still be recorded. */
  for (int guard = 0; s.inflight > 0 && guard < 1000000; guard++) {
    if (s.client && lk_http_client_run(s.client, LK_MS(100)) < 0)
      break;
    int frc = flush(&s);
    if (frc != LK_OK) {
      for (int i = 0; i < s.nslots; i++) /* the outcome cannot be written: it stays PENDING */
        if (s.slots[i].done) {
          slot_clear(&s.slots[i]);
          s.inflight--;
        }
      s.ndone = 0;
      if (rc == LK_OK || rc == LK_ECANCELED)
        rc = frc;
    }
  }
  free(s.slots);
  free(s.seen);
  if (!cfg->client)
    lk_http_client_free(s.client);
  close(lock);
  /* LK_EAGAIN means "another sender" to the caller; the database staying locked by another
   * process beyond busy_timeout_ms is an I/O failure of this run */
  if (rc == LK_EAGAIN)
    rc = LK_EIO;
  if (out)
    *out = s.st;
  return rc;
}
