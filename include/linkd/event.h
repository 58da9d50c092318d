/* SPDX-License-Identifier: MIT */
/* linkd/event.h: what happens inside one logical call, as a stream of events, and W3C trace
 * context for its attempts.
 *
 * A call run by the executor (exec.h) or the HTTP driver (http.h) reports each step of the fixed
 * order to an optional per-call callback, like Resilience4j's event publishers: the call starts,
 * an attempt waits for a bulkhead slot or limiter token or the breaker's next probe, starts,
 * ends (with its kind, whether the request was sent, its duration), a retry is scheduled (with
 * its delay) or refused by the retry budget, the shared breaker changes state because of this
 * call's outcome, a hedge starts, the fallback is used, the call ends. Applications log or trace
 * from it; the timeline of the result holds the same facts after the call.
 *
 * Events of one call are delivered in order on the thread that runs the call, never with a
 * library lock held. The event and everything it points to are valid during the callback only.
 * The callback must not call into the call's client; an executor's asynchronous call may be
 * aborted or stepped from it (exec.h, "Re-entrancy"). It may be slow (the call waits).
 *
 * ABI. lk_event is read-only for applications and is only ever produced by the library, so it
 * may grow: `size` is sizeof(lk_event) as the library was built, the union has reserved room,
 * new types and new fields are appended, numbers never change. A callback compiled against an
 * older header ignores types it does not know (type >= the LK_EV__COUNT it saw).
 *
 * Trace context. lk_traceparent parses, formats and derives W3C Trace Context `traceparent`
 * values (https://www.w3.org/TR/trace-context/, version 00): a call given a parent sends, on
 * every attempt, the parent's trace id with a new span id drawn from the call's generator.
 *
 * Thread-safety: the functions here are pure (the generator passed in belongs to the caller).
 */
#ifndef LINKD_EVENT_H
#define LINKD_EVENT_H

#include <linkd/breaker.h>
#include <linkd/common.h>
#include <linkd/failure.h>
#include <linkd/rand.h>

LK_BEGIN_DECLS

/* X(name). Append only. */
#define LK_EVENT_MAP(X)                                                                          \
  X(CALL_START)       /* the call's deadline is fixed; nothing else has happened */              \
  X(WAIT)             /* an attempt waited for a protection (u.wait); reported when it ends */  \
  X(ATTEMPT_START)    /* an attempt is handed to the operation (u.attempt_start) */              \
  X(ATTEMPT_END)      /* an attempt ended, refusals by a protection included (u.attempt_end) */  \
  X(RETRY_SCHEDULED)  /* the next attempt starts after u.retry.delay */                          \
  X(BUDGET_REFUSED)   /* the retry budget refused the retry the policy allowed (u.budget) */     \
  X(BREAKER_TRANSITION) /* recording this call's outcome moved the breaker (u.breaker) */        \
  X(HEDGE_STARTED)    /* a further attempt started while others are in flight (u.hedge) */       \
  X(FALLBACK)         /* the fallback produced the call's result (u.fallback) */                 \
  X(CALL_END)         /* the call is over; the last event of every call (u.end) */

typedef enum lk_event_type {
#define LK_EVENT_ENUM_(name) LK_EV_##name,
  LK_EVENT_MAP(LK_EVENT_ENUM_)
#undef LK_EVENT_ENUM_
  LK_EV__COUNT
} lk_event_type;

/* What an attempt waited for (u.wait.what). Append only. */
typedef enum lk_event_wait {
  LK_EV_WAIT_BULKHEAD, /* a bulkhead slot */
  LK_EV_WAIT_LIMITER,  /* a rate limiter token */
  LK_EV_WAIT_BREAKER   /* the open breaker's next probe (breaker_wait) */
} lk_event_wait;

typedef struct lk_event {
  uint32_t size;      /* sizeof(lk_event) in the library that produced it */
  lk_event_type type;
  int64_t at;         /* ns from the start of the call, on the call's clock */
  int attempt;        /* the attempt this is about (1-based); 0 for CALL_START / CALL_END /
                         FALLBACK */
  union {
    struct {
      lk_event_wait what;
      int64_t waited;   /* ns */
      bool granted;     /* false: the wait ended in a refusal (the attempt ends refused) */
    } wait;
    struct {
      int64_t timeout;  /* the attempt's timeout: min(attempt cap, remaining), ns */
      int64_t remaining; /* ns left before the call's deadline */
    } attempt_start;
    struct {
      lk_failure failure; /* LK_F_NONE = success; a TERMINAL kind for a refusal */
      bool sent;          /* the request was (fully) sent */
      int64_t duration;   /* ns */
      int64_t retry_after; /* ns, < 0 if none */
    } attempt_end;
    struct {
      int64_t delay;         /* ns before the next attempt */
      lk_failure failure;    /* the kind being retried */
      bool from_retry_after; /* the delay came from Retry-After */
    } retry;
    struct {
      lk_failure failure; /* the kind the refused retry was for */
    } budget;
    struct {
      lk_breaker_state from, to;
    } breaker;
    struct {
      int in_flight;  /* attempts in flight, the new one included */
      int64_t delay;  /* ns after the previous attempt's start */
    } hedge;
    struct {
      int err;            /* the call's error before the fallback (LK_E*) */
      lk_failure failure; /* the final attempt's kind before the fallback */
    } fallback;
    struct {
      int err;            /* the call's final error (LK_OK when a fallback produced the result) */
      lk_failure failure; /* the final attempt's kind */
      int attempts;       /* attempts in the timeline */
      int64_t elapsed;    /* ns */
      bool fallback;      /* the result came from the fallback */
    } end;
    uint8_t reserved_[64]; /* room for fields appended later; keeps the size fixed */
  } u;
} lk_event;

/* The per-call callback. `ev` is valid during the call only. */
typedef void (*lk_event_fn)(void *ctx, const lk_event *ev);

/* "CALL_START", ... ("UNKNOWN" out of range). */
LK_EXPORT const char *lk_event_type_name(lk_event_type t);
/* "BULKHEAD", "LIMITER", "BREAKER" ("UNKNOWN" out of range). */
LK_EXPORT const char *lk_event_wait_name(lk_event_wait w);

/* ============================================================================================
 * W3C traceparent
 * ========================================================================================== */

/* "00-" 32 hex "-" 16 hex "-" 2 hex: 55 characters. */
#define LK_TRACEPARENT_LEN 55
#define LK_TRACEPARENT_SAMPLED 0x01

typedef struct lk_traceparent {
  uint8_t version;      /* 0 for what this library writes; a later version parsed is kept */
  uint8_t trace_id[16]; /* never all zero */
  uint8_t parent_id[8]; /* the span id of the sender; never all zero */
  uint8_t flags;        /* bit 0: sampled */
} lk_traceparent;

/* Parses a traceparent header value (`len` bytes, no NUL needed; blanks around it allowed).
 * Lower-case hex only, as the spec requires. Version ff, an all-zero trace or parent id, a
 * version 00 value of any other length, and a later version without '-' after the flags are
 * refused. LK_OK, LK_EPARSE or LK_EINVAL (NULL). */
LK_EXPORT int lk_traceparent_parse(const char *s, size_t len, lk_traceparent *out);
/* Writes the version 00 form (55 characters and a NUL, so cap >= 56) whatever version was
 * parsed, as the spec asks of a participant that forwards a later version; the flags are written
 * as they are (bits this library does not know are passed on). Returns the length
 * (55), or LK_ERANGE (cap too small; buf gets "" when cap > 0) or LK_EINVAL. */
LK_EXPORT int lk_traceparent_format(const lk_traceparent *tp, char *buf, size_t cap);
/* A child of `parent`: same trace id and flags, version 0, a new non-zero parent id from `rng`
 * (two 64-bit draws at most for a span id in practice). LK_OK, LK_EINVAL, or LK_ESYS when the
 * generator gave only zeros eight times in a row. */
LK_EXPORT int lk_traceparent_child(const lk_traceparent *parent, lk_rand *rng,
                                   lk_traceparent *out);
/* A new trace (root): random non-zero trace and parent ids from `rng`, flags as given. Same
 * returns. */
LK_EXPORT int lk_traceparent_new(lk_rand *rng, uint8_t flags, lk_traceparent *out);

LK_END_DECLS

#endif
