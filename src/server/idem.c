/* SPDX-License-Identifier: MIT */
/* idem.c: lookup / claim / complete / replay of Idempotency-Keys over the store interface. */
#include "idem.h"

#include <linkd/error.h>

#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

/* A claim's longest life in the database when the request brings no shorter deadline. Past it
 * another instance may take the key over; the record's primary key still keeps the effect to
 * one application, so the lease only bounds how long a dead holder can cause 409s (a holder
 * whose database connection is gone is recognised at once, see src/store/pg). */
#define CLAIM_LEASE_MAX_NS (30 * LK_NS_PER_S)

int64_t idem_lease_ns(const req *r, int64_t now) {
  int64_t left = lk_deadline_remaining(r->dl, now);
  if (left <= 0)
    left = 1;
  return left < CLAIM_LEASE_MAX_NS ? left : CLAIM_LEASE_MAX_NS;
}

/* A claim owner unique across processes and requests: the pid in the high bits, a per-process
 * counter below. Positive, so it fits the database's signed BIGINT unchanged. */
static uint64_t next_owner(void) {
  static atomic_uint_fast64_t seq;
  uint64_t n = atomic_fetch_add(&seq, 1) + 1;
  return (((uint64_t)getpid() & 0x3fffffu) << 40 | (n & ((UINT64_C(1) << 40) - 1)));
}

static void store_error(lk_resp *out, int rc) {
  resp_free(out);
  if (rc == LK_EDEADLINE) {
    resp_error(out, 504, "deadline_exceeded", "the deadline passed");
  } else if (rc == LK_EAGAIN) {
    resp_error(out, 503, "storage_unavailable", "the database is unavailable; retry shortly");
    resp_header(out, "Retry-After", "1");
  } else {
    resp_error(out, 500, "storage_error", "%s", lk_strerror(rc));
  }
}

/* Answers from a stored record: its replay, or 422 when it was for a different request. */
static idem_verdict answer_record(req *r, lk_resp *out, const lk_idem_record *rec) {
  if (memcmp(rec->fingerprint, r->fp, sizeof r->fp) != 0) {
    atomic_fetch_add(&r->srv->stats.key_mismatches, 1);
    resp_free(out);
    resp_error(out, 422, "idempotency_key_reused",
               "this Idempotency-Key was used for a different request");
    return IDEM_ANSWERED;
  }
  resp_from_record(out, rec);
  atomic_fetch_add(&r->srv->stats.replays, 1);
  r->replay = true;
  r->outcome = "replay";
  return IDEM_REPLAYED;
}

static idem_verdict in_use(req *r, lk_resp *out) {
  atomic_fetch_add(&r->srv->stats.key_conflicts, 1);
  resp_free(out);
  resp_error(out, 409, "idempotency_key_in_use",
             "a request with this Idempotency-Key is still being processed");
  resp_header(out, "Retry-After", "1");
  return IDEM_ANSWERED;
}

idem_verdict idem_begin(req *r, lk_resp *out) {
  lk_server *s = r->srv;
  /* A completed key is answered from the store without claiming it, so replays of one key
   * never conflict with each other; only a key with no result yet is claimed, in the database
   * (in the same call as the lookup: one round trip) and then in this process. If its first
   * request finishes just after the lookup, nothing is looked up again: this request's
   * transaction meets the record's primary key, rolls back, and answers with the replay
   * (idem_replay_existing), a cost paid only in that race instead of on every new key. */
  lk_idem_record rec;
  bool found;
  uint64_t owner = next_owner();
  int64_t min_created = lk_wall_ns() - s->cfg.idem_retention_ns;
  int rc = lk_store_idem_lookup_claim(s->store, r->tenant, r->key, min_created, owner,
                                      idem_lease_ns(r, lk_now_ns()), &rec, &found, r->dl);
  if (rc == LK_OK && found) {
    idem_verdict v = answer_record(r, out, &rec);
    lk_idem_record_clear(&rec);
    return v;
  }
  if (rc == LK_OK) {
    r->claim_in_store = true;
    r->claim_owner = owner;
    if (lk_inflight_claim(s->inflight, r->tenant, r->key)) {
      r->claimed = true;
      return IDEM_EXECUTE;
    }
    rc = LK_ECONFLICT; /* held by another request of this process */
  }
  idem_release(r);
  if (rc == LK_ECONFLICT)
    return in_use(r, out);
  store_error(out, rc);
  return IDEM_ANSWERED;
}

int idem_complete(lk_store_tx *tx, req *r, const lk_resp *resp, int64_t now_wall) {
  /* The outcome (success or a business error such as 404 / out_of_stock) is the key's result;
   * it commits with the effect or not at all. */
  lk_idem_record rec = {
      .status = resp->status,
      .headers = (char *)resp->headers,
      .body = (uint8_t *)resp->body,
      .body_len = resp->body_len,
      .created_wall_ns = now_wall,
  };
  memcpy(rec.fingerprint, r->fp, sizeof rec.fingerprint);
  return lk_store_tx_idem_put(tx, r->tenant, r->key, &rec,
                              now_wall - r->srv->cfg.idem_retention_ns);
}

void idem_replay_existing(req *r, lk_resp *out) {
  lk_idem_record rec;
  int64_t min_created = lk_wall_ns() - r->srv->cfg.idem_retention_ns;
  int rc = lk_store_idem_get(r->srv->store, r->tenant, r->key, min_created, &rec, r->dl);
  if (rc != LK_OK) {
    store_error(out, rc == LK_ENOTFOUND ? LK_EIO : rc);
    return;
  }
  answer_record(r, out, &rec);
  lk_idem_record_clear(&rec);
}

void idem_release(req *r) {
  if (r->claim_in_store) {
    /* Best effort: a claim that cannot be removed now ends with its lease. */
    if (!r->completed)
      lk_store_idem_release(r->srv->store, r->tenant, r->key, r->claim_owner);
    r->claim_in_store = false;
  }
  if (r->claimed) {
    lk_inflight_release(r->srv->inflight, r->tenant, r->key);
    r->claimed = false;
  }
}
