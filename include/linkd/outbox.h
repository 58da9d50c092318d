/* SPDX-License-Identifier: MIT */
/* linkd/outbox.h: a durable outbox of HTTP requests on SQLite (liblinkd-outbox).
 *
 * An application that must not lose a request it has decided to make (a loan, a payment, a
 * notification) writes it to the outbox instead of sending it, and a sender delivers it later
 * under the normal lk_http policy. The request survives a crash of either side:
 *
 *   enqueue   stores method, URL, headers, body, an expiry and an Idempotency-Key generated
 *             once, here, in one SQLite transaction with synchronous=FULL: when it returns the
 *             entry is on disk (the WAL is fsynced at COMMIT) and survives a power loss.
 *   send      delivers pending entries through an lk_http_client, each as one logical call of
 *             the given policy, always with the entry's stored key. A crash of the sender after
 *             the server applied the request but before the outbox recorded it makes the next
 *             sender send it again with the same key, so a server that honours keys (libraryd,
 *             Stripe-style APIs) applies it exactly once.
 *   outcomes  a success (2xx/3xx)            -> DELIVERED, kept for the retention window
 *             a permanent 4xx (the kind's class is LK_FC_PERMANENT: not 408/425/429)
 *             without a Retry-After          -> POISONED: set aside with its last response,
 *                                               never sent again unless lk_outbox_retry()
 *             anything else (5xx, transport failures, deadline, budget, breaker, and a 4xx
 *             with Retry-After, such as 409 "a request with this key is still being
 *             processed" after a restart)   -> stays PENDING, next round after a backoff
 *                                               (and not before the Retry-After, cut to the
 *                                               policy's retry_after_cap as in retry.h)
 *             the expiry passed before delivery -> EXPIRED, kept for the retention window
 *   purge     deletes DELIVERED and EXPIRED entries older than the retention window (and, when
 *             asked, POISONED ones).
 *
 * One sender per file. lk_outbox_send() holds an exclusive lock (flock(2) on "<path>-sender",
 * the path with symlinks resolved) while it runs; a second sender on the same file gets
 * LK_EAGAIN at once, whatever name it opened the file by. The kernel drops the
 * lock when the process dies, so a sender restarted after kill -9 resends at once instead of
 * waiting for leases to time out. Entries in flight are tracked in the sender's memory only:
 * nothing about them is written before their outcome, so a crash leaves them PENDING. (flock is
 * per host: as SQLite itself, the outbox is not for network file systems.)
 *
 * Time. Stored instants (created, expiry, next round, done) are wall-clock ns since the epoch
 * (lk_outbox_config.wall_clock), because they must mean the same after a restart; the calls
 * themselves run on the policy's monotonic clock, with each call's deadline capped at the
 * entry's expiry, so nothing is sent after it. A wall clock stepped back delays an entry by at
 * most the longest delay the sender sets, max(backoff.max, retry_after_cap): an entry never
 * called, or whose next round lies further ahead than that, is due.
 *
 * Thread-safety: an lk_outbox may be used from many threads at once (an internal mutex
 * serialises its one SQLite connection); other processes may open the same file (SQLite's WAL
 * locking; busy_timeout_ms bounds the wait). lk_outbox_send() runs on the calling thread.
 */
#ifndef LINKD_OUTBOX_H
#define LINKD_OUTBOX_H

#include <linkd/backoff.h>
#include <linkd/clock.h>
#include <linkd/common.h>
#include <linkd/error.h>
#include <linkd/http.h>
#include <linkd/idem.h>

LK_BEGIN_DECLS

typedef struct lk_outbox lk_outbox;

/* The state of an entry. Numbers are stored in the file: append only. */
typedef enum lk_outbox_state {
  LK_OUTBOX_PENDING = 0,   /* waiting for (another) round */
  LK_OUTBOX_DELIVERED = 1, /* a 2xx/3xx answer was received */
  LK_OUTBOX_EXPIRED = 2,   /* its expiry passed before delivery */
  LK_OUTBOX_POISONED = 3   /* a permanent 4xx: set aside with the response */
} lk_outbox_state;

typedef struct lk_outbox_config {
  const char *path;           /* database file (copied); created when missing */
  int64_t retention;          /* ns a DELIVERED / EXPIRED entry is kept; default 7 days */
  int64_t default_ttl;        /* expiry of an entry enqueued with ttl 0; default 24 h */
  int busy_timeout_ms;        /* waiting for other processes' locks; default 5000 */
  size_t max_stored_response; /* bytes of a response body kept with an entry; default 64 KiB */
  const lk_clock *wall_clock; /* ns since the epoch; NULL = CLOCK_REALTIME (default) */
  bool read_only; /* open an existing outbox to read it only (lk_outbox_list, lk_outbox_stats_get):
                     nothing is created or written, so a file on a read-only file system or in
                     a directory this user cannot write opens too; default false */
} lk_outbox_config;

/* Sets every field to its default (path "linkd-outbox.db"). */
LK_EXPORT void lk_outbox_config_init_default(lk_outbox_config *c);

/* Opens (creating when needed) an outbox file, in WAL mode with synchronous=FULL. Returns LK_OK,
 * LK_EINVAL (no path, retention or default_ttl <= 0), LK_ESYS (the file or its directory cannot
 * be opened or written), LK_ESTATE (a schema newer than this library: the file is left as it
 * was), LK_EAGAIN (another process held the file longer than busy_timeout_ms), LK_EIO or
 * LK_ENOMEM. Processes opening one new file at the same time all succeed.
 * With cfg->read_only the file must exist and hold an outbox of this library's schema (LK_ESYS
 * otherwise; an older schema is LK_ESTATE: open it read-write once to upgrade it). A reader sees
 * what writers committed, including what a running writer has not checkpointed yet; with nobody
 * writing and a directory it cannot write (where SQLite cannot make the WAL's index) it reads
 * the file as it is, which is then all of it. lk_outbox_enqueue, lk_outbox_enqueue_batch,
 * lk_outbox_retry, lk_outbox_purge and lk_outbox_send on a read-only outbox return LK_ESTATE.
 * On failure *out is NULL and `errbuf` (may be NULL) names the cause. */
LK_EXPORT int lk_outbox_open(const lk_outbox_config *cfg, lk_outbox **out, char *errbuf,
                             size_t errcap);
/* Closes the outbox. NULL is a no-op. No other thread may be using it. */
LK_EXPORT void lk_outbox_close(lk_outbox *ob);

/* ============================================================================================
 * Enqueueing
 * ========================================================================================== */

/* One request to store. All pointers are read during the call only. */
typedef struct lk_outbox_message {
  const char *method;         /* an RFC 9110 token, e.g. "POST" */
  const char *url;            /* absolute http:// or https:// URL */
  const char *const *headers; /* NULL-terminated "Name: value" lines, or NULL; the rules of
                                 lk_http_request_add_header(), and no Idempotency-Key (give it
                                 as `key`) */
  const void *body;           /* may be NULL when body_len is 0 */
  size_t body_len;            /* at most 64 MiB */
  int64_t ttl;                /* ns from now until the entry expires; 0 = default_ttl */
  const char *key;            /* the Idempotency-Key to send; NULL = generate a UUIDv4 */
  const char *tenant;         /* prefix of a generated key, "<tenant>:<uuid>"; NULL = none */
} lk_outbox_message;

/* Sets every field of a message to empty / default. */
LK_EXPORT void lk_outbox_message_init(lk_outbox_message *m);

/* Stores one message durably: returns only after COMMIT (and its fsync) succeeded. *id (may be
 * NULL) gets the entry's id, `key_out` (may be NULL; LK_IDEM_KEY_MAX bytes) its key.
 * LK_OK, LK_EINVAL (a bad method, URL, header, key or ttl), LK_ETOOBIG (body), LK_ECONFLICT (the
 * key is already in the outbox), LK_ESYS (the file system is full, or no entropy for a key),
 * LK_EAGAIN (another process held the file longer than busy_timeout_ms), LK_EIO or LK_ENOMEM. */
LK_EXPORT int lk_outbox_enqueue(lk_outbox *ob, const lk_outbox_message *m, int64_t *id,
                                char *key_out);

/* Stores `n` messages in one transaction (one fsync for all): all or none. ids (may be NULL)
 * gets n ids. The same returns as lk_outbox_enqueue(); on failure nothing is stored. */
LK_EXPORT int lk_outbox_enqueue_batch(lk_outbox *ob, const lk_outbox_message *m, size_t n,
                                      int64_t *ids);

/* ============================================================================================
 * Reading, retrying, purging
 * ========================================================================================== */

/* A view of one entry, valid during the callback that receives it. */
typedef struct lk_outbox_entry {
  int64_t id;
  lk_outbox_state state;
  const char *method, *url, *key;
  const char *headers; /* "Name: value\n" lines as stored */
  size_t body_len;
  int64_t created;              /* wall ns */
  int64_t expires;              /* wall ns */
  int64_t next_round;           /* wall ns: not sent before (PENDING) */
  int64_t done;                 /* wall ns the entry left PENDING; 0 while PENDING */
  int rounds;                   /* logical calls that ended (each may hold several attempts) */
  int attempts;                 /* HTTP attempts of those rounds */
  int last_error;               /* lk_http_result_err() of the last round; 0 before any */
  const char *last_failure;     /* its failure kind name ("NONE", "CLIENT_4XX", ...); "" before */
  int last_status;              /* its HTTP status; 0 if none */
  const char *response_headers; /* of the last response, "Name: value\n" lines ("" if none) */
  const void *response_body;    /* at most max_stored_response bytes of it */
  size_t response_body_len;
  bool response_truncated; /* the body was longer than what was kept */
} lk_outbox_entry;

/* Return non-zero to stop the listing. */
typedef int (*lk_outbox_entry_fn)(void *ctx, const lk_outbox_entry *e);

/* Visits up to `limit` entries with id > after_id, ascending, in state `state` (or every state
 * when state < 0). LK_OK (also when cb stopped it), LK_EIO. */
LK_EXPORT int lk_outbox_list(lk_outbox *ob, int state, int64_t after_id, int limit,
                             lk_outbox_entry_fn cb, void *ctx);

/* Puts POISONED and EXPIRED entries back to PENDING with their key unchanged and no delay: entry
 * `id`, or every POISONED one when id is 0. An EXPIRED entry needs ttl > 0 (its new expiry is
 * now + ttl); a POISONED one keeps its expiry unless ttl > 0. *count (may be NULL) gets how many
 * changed. LK_OK, LK_ENOTFOUND (no such entry), LK_ESTATE (entry `id` is PENDING or DELIVERED, or
 * EXPIRED with ttl 0), LK_ESYS (the file system is full), LK_EIO. */
LK_EXPORT int lk_outbox_retry(lk_outbox *ob, int64_t id, int64_t ttl, int64_t *count);

/* Deletes DELIVERED and EXPIRED entries that left PENDING more than the retention window ago
 * (older_than < 0), or more than `older_than` ns ago; POISONED ones as well when
 * `include_poisoned`. *deleted (may be NULL) gets the count. Runs in batches, so a sender on the
 * same file is held up only briefly. LK_OK, LK_ESYS (the file system is full) or LK_EIO. */
LK_EXPORT int lk_outbox_purge(lk_outbox *ob, int64_t older_than, bool include_poisoned,
                              int64_t *deleted);

/* What is in the file now, and what happened over its whole life (the totals are counted in
 * the same transactions as the changes they count, so a purge does not lower them). */
typedef struct lk_outbox_stats {
  int64_t pending, delivered, expired, poisoned; /* entries stored in each state now */
  int64_t enqueued_total, delivered_total, expired_total, poisoned_total, purged_total;
  int64_t rounds_total;   /* logical calls that ended and were recorded */
  int64_t attempts_total; /* HTTP attempts of those calls */
  int64_t retried_total;  /* entries put back by lk_outbox_retry() */
  int64_t oldest_pending; /* wall ns the oldest PENDING entry was created; 0 if none */
} lk_outbox_stats;

/* Fills *out from the file in one read transaction, so counts and totals describe one moment.
 * LK_OK, LK_EINVAL (a NULL argument), or the error of the read as for the other calls (*out is
 * then partly zero). Safe from any thread (under the handle's lock). */
LK_EXPORT int lk_outbox_stats_get(lk_outbox *ob, lk_outbox_stats *out);

/* Writes the stats in the Prometheus text format (linkd_outbox_entries{state="..."} gauges and
 * linkd_outbox_*_total counters) into a malloc'd NUL-terminated buffer the caller frees. */
LK_EXPORT int lk_outbox_stats_prometheus(const lk_outbox_stats *st, char **out, size_t *len);

/* ============================================================================================
 * Sending
 * ========================================================================================== */

/* When lk_outbox_send() returns. */
typedef enum lk_outbox_until {
  LK_OUTBOX_UNTIL_IDLE,  /* every due entry has had one call in this run (default); a failed
                            one waits for the next run, even if its round comes due meanwhile */
  LK_OUTBOX_UNTIL_EMPTY, /* no PENDING entry is left: waits for delayed rounds */
  LK_OUTBOX_FOREVER      /* until cancelled: also picks up entries enqueued meanwhile */
} lk_outbox_until;

/* Called after every recorded round (on the sending thread, outbox lock not held). `e` is the
 * entry as recorded (its stored request headers and body are not loaded: headers is "" and
 * body_len 0), `res` the call's result (owned by the sender; NULL when the stored request did
 * not build). Both are valid during the call only. */
typedef void (*lk_outbox_round_fn)(void *ctx, const lk_outbox_entry *e, const lk_http_result *res);

typedef struct lk_outbox_sender_config {
  lk_http_policy policy;       /* every call's policy; idem_mode, idem_key and idem_tenant are set
                                  per entry (LK_IDEM_KEY with the stored key) and deadline_at is
                                  capped at the entry's expiry; default: lk_http_policy defaults */
  lk_http_client *client;      /* NULL = a client of the sender's own (default); a caller's client
                                  must run its own loop (not external-loop mode: LK_ESTATE) and is
                                  run by the sender on this thread for the duration */
  int concurrency;             /* entries in flight at once, 1..4096; default 16 */
  lk_backoff_config backoff;   /* delay before a failed entry's next round, by its round count:
                                  default exponential 1 s .. 5 min, full jitter */
  lk_rand *rng;                /* for that jitter; NULL = a generator of the sender's own */
  lk_outbox_until until;       /* default LK_OUTBOX_UNTIL_IDLE */
  int64_t poll_interval;       /* idle wait between looks at the file (FOREVER, and EMPTY while
                                  every entry waits for its round); > 0; default 200 ms */
  int64_t max_rounds;          /* return after this many recorded rounds; 0 = no limit (default) */
  lk_http_cancel *cancel;      /* optional: firing it ends the run (calls in flight are cancelled
                                  and left PENDING); must outlive the run */
  lk_outbox_round_fn on_round; /* optional; default NULL */
  void *on_round_ctx;
} lk_outbox_sender_config;

/* Sets every field to its default. */
LK_EXPORT void lk_outbox_sender_config_init_default(lk_outbox_sender_config *c);

/* What one run did. */
typedef struct lk_outbox_send_stats {
  int64_t rounds, attempts, delivered, poisoned, expired, failed; /* failed: stays PENDING */
} lk_outbox_send_stats;

/* Sends PENDING entries that are due, up to `concurrency` at a time, until `until` says stop,
 * max_rounds is reached or `cancel` fires. Each ended call is recorded in a transaction (the
 * outcomes of calls that ended together share one); DELIVERED and EXPIRED entries past the
 * retention window are purged when the run starts. `st` (may be NULL) gets what this run did.
 * Returns LK_OK, LK_ECANCELED (cancel fired), LK_EAGAIN (another sender holds the file),
 * LK_ECONFIG (a bad sender config or policy), LK_ESTATE (a client in external-loop mode), LK_ESYS
 * (also: the file system is full), LK_EIO (also: another process held the file's write lock
 * longer than busy_timeout_ms) or LK_ENOMEM; the outcomes not recorded leave their entries
 * PENDING, to be resent with their keys. An entry whose stored request no longer builds (a file
 * edited by hand) is POISONED with LK_EINVAL, not fatal. */
LK_EXPORT int lk_outbox_send(lk_outbox *ob, const lk_outbox_sender_config *cfg,
                             lk_outbox_send_stats *st);

/* "pending", "delivered", "expired", "poisoned" ("unknown" otherwise); the parser is
 * case-insensitive: LK_OK or LK_EINVAL. */
LK_EXPORT const char *lk_outbox_state_name(lk_outbox_state s);
LK_EXPORT int lk_outbox_state_parse(const char *s, lk_outbox_state *out);

LK_END_DECLS

#endif
