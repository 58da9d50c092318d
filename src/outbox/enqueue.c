/* SPDX-License-Identifier: MIT */
/* enqueue.c: storing messages durably. */
#include "outbox_impl.h"

#include "core/sat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void lk_outbox_message_init(lk_outbox_message *m) { memset(m, 0, sizeof *m); }

/* A message checked and in its stored form: headers normalised to "Name: value\n" lines, the
 * key composed. */
typedef struct prepared {
  char *headers; /* malloc'd */
  char key[LK_IDEM_KEY_MAX];
} prepared;

/* Splits "Name: value" into the name and the value without surrounding blanks. */
static int split_header(const char *line, char *name, size_t ncap, const char **value) {
  const char *colon = strchr(line, ':');
  if (!colon || colon == line || (size_t)(colon - line) >= ncap)
    return LK_EINVAL;
  memcpy(name, line, (size_t)(colon - line));
  name[colon - line] = '\0';
  const char *v = colon + 1;
  while (*v == ' ' || *v == '\t')
    v++;
  *value = v;
  return LK_OK;
}

/* Checks the message the way the sender will use it (the request must build), so a stored entry
 * can always be sent, and writes its stored form. */
static int prepare(const lk_outbox_message *m, prepared *p) {
  p->headers = NULL;
  if (!m || !m->method || !m->url || m->ttl < 0 || (!m->body && m->body_len))
    return LK_EINVAL;
  if (m->body_len > OB_BODY_MAX)
    return LK_ETOOBIG;
  lk_http_request *req = NULL;
  int made = lk_http_request_create(m->method, m->url, &req);
  if (made != LK_OK)
    return made; /* LK_EINVAL, or LK_ENOMEM: not a bad message */
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  int rc = f ? LK_OK : LK_ENOMEM;
  for (const char *const *h = m->headers; rc == LK_OK && h && *h; h++) {
    char name[256];
    const char *value;
    rc = split_header(*h, name, sizeof name, &value);
    if (rc == LK_OK && strcasecmp(name, "Idempotency-Key") == 0)
      rc = LK_EINVAL; /* the key is the entry's own: lk_outbox_message.key */
    if (rc == LK_OK) {
      /* a trailing blank would be cut by the server anyway; store what is sent */
      size_t vl = strlen(value);
      while (vl && (value[vl - 1] == ' ' || value[vl - 1] == '\t'))
        vl--;
      char *v = strndup(value, vl);
      rc = v ? lk_http_request_add_header(req, name, v) : LK_ENOMEM;
      if (rc == LK_OK)
        fprintf(f, "%s: %s\n", name, v);
      free(v);
    }
  }
  lk_http_request_free(req);
  if (f && fclose(f) != 0 && rc == LK_OK)
    rc = LK_ENOMEM;
  if (rc != LK_OK) {
    free(buf);
    return rc;
  }
  p->headers = buf;
  int n = m->key ? lk_idem_key_compose(m->tenant, m->key, p->key, sizeof p->key)
                 : lk_idem_key_new(m->tenant, p->key, sizeof p->key);
  if (n < 0) {
    free(buf);
    p->headers = NULL;
    return n == LK_ETOOBIG ? LK_EINVAL : n;
  }
  return LK_OK;
}

static int insert(lk_outbox *ob, const lk_outbox_message *m, const prepared *p, int64_t now,
                  int64_t *id) {
  sqlite3_stmt *st = lk__ob_stmt(ob, OB_ST_INSERT);
  if (!st)
    return LK_EIO;
  int64_t ttl = m->ttl > 0 ? m->ttl : ob->cfg.default_ttl;
  sqlite3_bind_text(st, 1, m->method, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, m->url, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 3, p->headers, -1, SQLITE_STATIC);
  sqlite3_bind_blob64(st, 4, m->body ? m->body : (const void *)"", m->body_len, SQLITE_STATIC);
  sqlite3_bind_text(st, 5, p->key, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 6, now);
  sqlite3_bind_int64(st, 7, lk_sat_add(now, ttl));
  int r = sqlite3_step(st);
  sqlite3_reset(st);
  if (r != SQLITE_DONE)
    return lk__ob_err(r); /* a UNIQUE key already there: LK_ECONFLICT */
  if (id)
    *id = sqlite3_last_insert_rowid(ob->db);
  return LK_OK;
}

static int enqueue(lk_outbox *ob, const lk_outbox_message *m, size_t n, int64_t *ids,
                   char *key_out) {
  if (!ob || (!m && n))
    return LK_EINVAL;
  if (ob->cfg.read_only)
    return LK_ESTATE;
  if (n == 0)
    return LK_OK;
  prepared *p = calloc(n, sizeof *p);
  if (!p)
    return LK_ENOMEM;
  int rc = LK_OK;
  size_t ready = 0;
  /* Everything that can fail without the file is checked before the transaction, so the
   * writer lock is held for the inserts and the COMMIT only. */
  for (; ready < n && rc == LK_OK; ready++)
    rc = prepare(&m[ready], &p[ready]);
  if (rc == LK_OK) {
    int64_t now = lk__ob_now(ob);
    pthread_mutex_lock(&ob->mu);
    rc = lk__ob_begin(ob);
    for (size_t i = 0; rc == LK_OK && i < n; i++)
      rc = insert(ob, &m[i], &p[i], now, ids ? &ids[i] : NULL);
    if (rc == LK_OK)
      rc = lk__ob_totals_add(ob, &(ob_totals){.enqueued = (int64_t)n});
    if (rc == LK_OK)
      rc = lk__ob_commit(ob); /* synchronous=FULL: returns after the WAL's fsync */
    else
      lk__ob_rollback(ob);
    pthread_mutex_unlock(&ob->mu);
  }
  if (rc == LK_OK && key_out)
    memcpy(key_out, p[0].key, strlen(p[0].key) + 1);
  for (size_t i = 0; i < n; i++)
    free(p[i].headers);
  free(p);
  return rc;
}

int lk_outbox_enqueue(lk_outbox *ob, const lk_outbox_message *m, int64_t *id, char *key_out) {
  if (!m)
    return LK_EINVAL;
  return enqueue(ob, m, 1, id, key_out);
}

int lk_outbox_enqueue_batch(lk_outbox *ob, const lk_outbox_message *m, size_t n, int64_t *ids) {
  return enqueue(ob, m, n, ids, NULL);
}
