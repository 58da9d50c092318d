/* SPDX-License-Identifier: MIT */
/* idem.h: libraryd's Idempotency-Key protocol for writes, written once above the store interface
 * so that the SQLite and PostgreSQL stores behave alike (docs/libraryd.md):
 *
 *   lookup    a stored result for (tenant, key)? -> replay it (same fingerprint) or 422
 *   claim     none yet: take the key in this process (in-process table) and in the database
 *             (lk_store_idem_claim, seen by every instance); held elsewhere -> 409 + Retry-After
 *   complete  inside the write's transaction: the response becomes the key's record, and the
 *             claim ends, in the same COMMIT as the effect
 *   release   the claim ends without a result (the write failed or never ran)
 *
 * The libmicrohttpd callbacks only call idem_begin / idem_release; routes.c calls
 * idem_complete from its transaction and idem_replay_existing when the store reports that
 * another transaction stored the key first.
 */
#ifndef LINKD_SERVER_IDEM_H
#define LINKD_SERVER_IDEM_H

#include "server_impl.h"

typedef enum idem_verdict {
  IDEM_EXECUTE,  /* claimed, no result yet: run the write */
  IDEM_REPLAYED, /* `out` holds the stored response; r->replay is set */
  IDEM_ANSWERED, /* `out` holds an error to send (409, 422, 503, 504, 500) */
} idem_verdict;

/* Lookup and claim for a keyed write (r->fp already computed). */
idem_verdict idem_begin(req *r, lk_resp *out);
/* Stores `resp` as the key's record in the write's transaction (and ends the claim there). The
 * store's LK_ECONFLICT means another transaction stored the key first: roll back. */
int idem_complete(lk_store_tx *tx, req *r, const lk_resp *resp, int64_t now_wall);
/* The store said the key's record exists although our lookup found none (another instance or
 * process committed it between): `out` becomes its replay, or 422. */
void idem_replay_existing(req *r, lk_resp *out);
/* Ends the request's claims. After a committed idem_complete the database claim is already
 * gone; only the in-process one is dropped. Safe to call more than once. */
void idem_release(req *r);
/* How long the database claim may be held at most: the request's remaining deadline, capped. */
int64_t idem_lease_ns(const req *r, int64_t now);

#endif
