/* SPDX-License-Identifier: MIT */
/* admin.c: listing, retrying and purging entries, and the stats. */
#include "outbox_impl.h"

#include "core/sat.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int lk_outbox_list(lk_outbox *ob, int state, int64_t after_id, int limit, lk_outbox_entry_fn cb,
                   void *ctx) {
  if (!ob || !cb || limit < 0)
    return LK_EINVAL;
  pthread_mutex_lock(&ob->mu);
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(ob->db,
                              "SELECT " OB_ENTRY_COLUMNS " FROM entries WHERE id > ?1 "
                              "AND (?2 < 0 OR state = ?2) ORDER BY id LIMIT ?3",
                              -1, &st, NULL);
  if (rc != SQLITE_OK) {
    pthread_mutex_unlock(&ob->mu);
    return lk__ob_err(rc);
  }
  sqlite3_bind_int64(st, 1, after_id);
  sqlite3_bind_int(st, 2, state);
  sqlite3_bind_int(st, 3, limit);
  int err = LK_OK;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    lk_outbox_entry e;
    lk__ob_entry_from_row(st, &e);
    if (cb(ctx, &e) != 0)
      break;
  }
  if (rc != SQLITE_ROW && rc != SQLITE_DONE)
    err = lk__ob_err(rc);
  sqlite3_finalize(st);
  pthread_mutex_unlock(&ob->mu);
  return err;
}

int lk_outbox_retry(lk_outbox *ob, int64_t id, int64_t ttl, int64_t *count) {
  if (count)
    *count = 0;
  if (!ob || id < 0 || ttl < 0)
    return LK_EINVAL;
  if (ob->cfg.read_only)
    return LK_ESTATE;
  int64_t now = lk__ob_now(ob);
  int64_t expires = ttl > 0 ? lk_sat_add(now, ttl) : 0;
  pthread_mutex_lock(&ob->mu);
  int rc = lk__ob_begin(ob);
  if (rc != LK_OK) {
    pthread_mutex_unlock(&ob->mu);
    return rc;
  }
  if (id > 0) {
    sqlite3_stmt *g = lk__ob_stmt(ob, OB_ST_GET);
    if (!g) {
      rc = LK_EIO;
    } else {
      sqlite3_bind_int64(g, 1, id);
      int r = sqlite3_step(g);
      if (r == SQLITE_ROW) {
        int s = sqlite3_column_int(g, 1);
        if (s == LK_OUTBOX_PENDING || s == LK_OUTBOX_DELIVERED || (s == LK_OUTBOX_EXPIRED && !ttl))
          rc = LK_ESTATE;
      } else {
        rc = r == SQLITE_DONE ? LK_ENOTFOUND : lk__ob_err(r);
      }
      sqlite3_reset(g);
    }
  }
  sqlite3_stmt *st = NULL;
  if (rc == LK_OK &&
      sqlite3_prepare_v2(ob->db,
                         "UPDATE entries SET state = 0, next_ns = ?1, done_ns = 0, "
                         "expires_ns = CASE WHEN ?2 > 0 THEN ?2 ELSE expires_ns END "
                         "WHERE (?3 > 0 AND id = ?3 AND state IN (2, 3)) OR (?3 = 0 AND state = 3)",
                         -1, &st, NULL) != SQLITE_OK)
    rc = LK_EIO;
  int64_t n = 0;
  if (rc == LK_OK) {
    sqlite3_bind_int64(st, 1, now);
    sqlite3_bind_int64(st, 2, expires);
    sqlite3_bind_int64(st, 3, id);
    int r = sqlite3_step(st);
    if (r == SQLITE_DONE)
      n = sqlite3_changes(ob->db);
    else
      rc = lk__ob_err(r);
  }
  sqlite3_finalize(st);
  if (rc == LK_OK && n > 0)
    rc = lk__ob_totals_add(ob, &(ob_totals){.retried = n});
  if (rc == LK_OK)
    rc = lk__ob_commit(ob);
  else
    lk__ob_rollback(ob);
  pthread_mutex_unlock(&ob->mu);
  if (rc == LK_OK && count)
    *count = n;
  return rc;
}

/* Batches of 500 rows, each its own transaction: a sender recording outcomes on the same file
 * waits for one batch at most. */
int lk__ob_purge(lk_outbox *ob, int64_t before, bool include_poisoned, int64_t *deleted) {
  int64_t total = 0;
  int rc = LK_OK;
  for (int round = 0; round < 1000000; round++) {
    pthread_mutex_lock(&ob->mu);
    sqlite3_stmt *st = NULL;
    rc = lk__ob_begin(ob);
    if (rc == LK_OK && sqlite3_prepare_v2(ob->db,
                                          "DELETE FROM entries WHERE id IN (SELECT id FROM entries "
                                          "WHERE state IN (1, 2, ?2) AND done_ns < ?1 LIMIT 500)",
                                          -1, &st, NULL) != SQLITE_OK)
      rc = LK_EIO;
    int64_t n = 0;
    if (rc == LK_OK) {
      sqlite3_bind_int64(st, 1, before);
      sqlite3_bind_int(st, 2, include_poisoned ? LK_OUTBOX_POISONED : LK_OUTBOX_DELIVERED);
      int r = sqlite3_step(st);
      if (r == SQLITE_DONE)
        n = sqlite3_changes(ob->db);
      else
        rc = lk__ob_err(r);
    }
    sqlite3_finalize(st);
    if (rc == LK_OK && n > 0)
      rc = lk__ob_totals_add(ob, &(ob_totals){.purged = n});
    if (rc == LK_OK)
      rc = lk__ob_commit(ob);
    else
      lk__ob_rollback(ob);
    pthread_mutex_unlock(&ob->mu);
    if (rc != LK_OK)
      break;
    total += n;
    if (n < 500)
      break;
  }
  if (deleted)
    *deleted = total;
  return rc;
}

int lk_outbox_purge(lk_outbox *ob, int64_t older_than, bool include_poisoned, int64_t *deleted) {
  if (deleted)
    *deleted = 0;
  if (!ob)
    return LK_EINVAL;
  if (ob->cfg.read_only)
    return LK_ESTATE;
  int64_t window = older_than < 0 ? ob->cfg.retention : older_than;
  return lk__ob_purge(ob, lk_sat_sub(lk__ob_now(ob), window), include_poisoned, deleted);
}

int lk_outbox_stats_get(lk_outbox *ob, lk_outbox_stats *out) {
  if (!ob || !out)
    return LK_EINVAL;
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&ob->mu);
  /* One read transaction: the counts and the totals describe the same moment. */
  int rc = lk__ob_exec(ob, "BEGIN");
  sqlite3_stmt *st = NULL;
  if (rc == LK_OK && sqlite3_prepare_v2(ob->db,
                                        "SELECT state, count(*), min(created_ns) FROM entries "
                                        "GROUP BY state",
                                        -1, &st, NULL) != SQLITE_OK)
    rc = LK_EIO;
  int r;
  while (rc == LK_OK && (r = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t n = sqlite3_column_int64(st, 1);
    switch (sqlite3_column_int(st, 0)) {
    case LK_OUTBOX_PENDING:
      out->pending = n;
      out->oldest_pending = sqlite3_column_int64(st, 2);
      break;
    case LK_OUTBOX_DELIVERED: out->delivered = n; break;
    case LK_OUTBOX_EXPIRED: out->expired = n; break;
    case LK_OUTBOX_POISONED: out->poisoned = n; break;
    default: break;
    }
  }
  if (rc == LK_OK && r != SQLITE_DONE)
    rc = lk__ob_err(r);
  sqlite3_finalize(st);
  st = NULL;
  if (rc == LK_OK && sqlite3_prepare_v2(ob->db,
                                        "SELECT enqueued, delivered, expired, poisoned, purged, "
                                        "rounds, attempts, retried FROM totals",
                                        -1, &st, NULL) != SQLITE_OK)
    rc = LK_EIO;
  if (rc == LK_OK) {
    r = sqlite3_step(st);
    if (r == SQLITE_ROW) {
      int64_t *dst[] = {&out->enqueued_total, &out->delivered_total, &out->expired_total,
                        &out->poisoned_total, &out->purged_total,    &out->rounds_total,
                        &out->attempts_total, &out->retried_total};
      for (int i = 0; i < 8; i++)
        *dst[i] = sqlite3_column_int64(st, i);
    } else {
      rc = r == SQLITE_DONE ? LK_EIO : lk__ob_err(r);
    }
  }
  sqlite3_finalize(st);
  sqlite3_exec(ob->db, "COMMIT", NULL, NULL, NULL);
  pthread_mutex_unlock(&ob->mu);
  return rc;
}

int lk_outbox_stats_prometheus(const lk_outbox_stats *s, char **out, size_t *len) {
  if (!s || !out)
    return LK_EINVAL;
  *out = NULL;
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  if (!f)
    return LK_ENOMEM;
  fputs("# HELP linkd_outbox_entries Entries stored in the outbox, by state.\n"
        "# TYPE linkd_outbox_entries gauge\n",
        f);
  fprintf(f, "linkd_outbox_entries{state=\"pending\"} %" PRId64 "\n", s->pending);
  fprintf(f, "linkd_outbox_entries{state=\"delivered\"} %" PRId64 "\n", s->delivered);
  fprintf(f, "linkd_outbox_entries{state=\"expired\"} %" PRId64 "\n", s->expired);
  fprintf(f, "linkd_outbox_entries{state=\"poisoned\"} %" PRId64 "\n", s->poisoned);
  const struct {
    const char *name, *help;
    int64_t v;
  } totals[] = {
      {"enqueued", "Entries ever enqueued.", s->enqueued_total},
      {"delivered", "Entries ever delivered.", s->delivered_total},
      {"expired", "Entries ever expired before delivery.", s->expired_total},
      {"poisoned", "Entries ever set aside after a permanent 4xx.", s->poisoned_total},
      {"purged", "Entries deleted after their retention window.", s->purged_total},
      {"rounds", "Logical calls recorded.", s->rounds_total},
      {"attempts", "HTTP attempts of the recorded calls.", s->attempts_total},
      {"retried", "Entries put back to pending by hand.", s->retried_total},
  };
  for (size_t i = 0; i < sizeof totals / sizeof totals[0]; i++)
    fprintf(f,
            "# HELP linkd_outbox_%s_total %s\n# TYPE linkd_outbox_%s_total counter\n"
            "linkd_outbox_%s_total %" PRId64 "\n",
            totals[i].name, totals[i].help, totals[i].name, totals[i].name, totals[i].v);
  fputs("# HELP linkd_outbox_oldest_pending_seconds Creation time of the oldest pending entry "
        "(0: none).\n# TYPE linkd_outbox_oldest_pending_seconds gauge\n",
        f);
  fprintf(f, "linkd_outbox_oldest_pending_seconds %.3f\n", (double)s->oldest_pending / 1e9);
  if (fclose(f) != 0) {
    free(buf);
    return LK_ENOMEM;
  }
  *out = buf;
  if (len)
    *len = n;
  return LK_OK;
}
