/* SPDX-License-Identifier: MIT */
/* linkd/http.h: logical HTTP calls on libcurl, every attempt classified, all under one deadline.
 *
 * A *logical call* is one request (method, URL, headers, replayable body) run under one policy
 * bundle (lk_http_policy) until it succeeds, fails for good, or its deadline passes. Each try is an
 * *attempt*. The order of wrappers around every attempt is fixed (DESIGN.md section 2):
 *
 *   deadline = now + policy.deadline (or policy.deadline_at if earlier), fixed once
 *   for each attempt:
 *     no attempt starts once the deadline has passed                 -> LK_EDEADLINE
 *     bulkhead slot  (wait <= min(pool_timeout, remaining))          -> LK_EBULKHEAD_FULL, final
 *     rate limiter   (token; wait <= remaining - retry min_attempt)  -> LK_ERATE_LIMITED, final
 *     breaker allow?                                                 -> LK_EBREAKER_OPEN, final
 *     attempt timeout = min(attempt_timeout, remaining); connect timeout <= that
 *     send with headers Idempotency-Key (same on every attempt), Linkd-Deadline (this attempt's
 *       timeout minus deadline_reserve, ms), optional grpc-timeout, Linkd-Attempt (1-based)
 *     classify the attempt from evidence (phase reached, bytes written, response) -> lk_failure;
 *       then the classification hook may override it
 *     record into breaker, budget, call metrics and the timeline; release the bulkhead slot
 *     decide with lk_retry_decide (Retry-After honoured, capped); a retry also needs a budget
 *       token (lk_budget_acquire_retry); the delay must end before the deadline
 *     wait the delay (a timer; cancellable)
 *
 * Phases and their timeouts. libcurl reports every timeout as error 28 without saying which phase
 * expired, and has no time-to-first-byte option, so the driver keeps its own timers and classifies
 * from evidence: the open-socket callback (DNS done), CURLINFO_CONNECT_TIME_T / APPCONNECT_TIME_T
 * (TCP / TLS done; 0 on a reused connection), CURLOPT_PREREQFUNCTION (runs just before the request
 * is written; never called = never sent), bytes uploaded vs the body size (fully written), header
 * and body callbacks (first byte, last byte). Every phase timeout ends the attempt with its own
 * lk_failure kind:
 *
 *   pool_timeout       waiting for a bulkhead slot          LK_F_POOL_TIMEOUT   (not sent)
 *   dns_timeout        resolving the host name              LK_F_DNS_TIMEOUT    (not sent)
 *   connect_timeout    TCP handshake                        LK_F_CONNECT_TIMEOUT (not sent)
 *   tls_timeout        TLS handshake                        LK_F_TLS_TIMEOUT    (not sent)
 *   write_timeout      writing the request, headers + body  LK_F_WRITE_TIMEOUT  (not fully sent)
 *   first_byte_timeout request written -> first reply byte  LK_F_FIRST_BYTE_TIMEOUT (maybe processed)
 *   idle_timeout       gap between two reply bytes          LK_F_IDLE_TIMEOUT   (maybe processed)
 *   attempt timeout    the whole attempt: the kind of the phase it expired in (DNS_TIMEOUT,
 *                      CONNECT_TIMEOUT, TLS_TIMEOUT, WRITE_TIMEOUT, or READ_TIMEOUT after the
 *                      request was written)
 *
 * Other kinds come from evidence as well: DNS_FAILED, CONNECT_REFUSED, TLS_FAILED,
 * RESET_BEFORE_SEND (reset/error while the request was not fully written), RESET_AFTER_SEND,
 * EMPTY_RESPONSE (closed after the request, no reply byte but interim 1xx heads), JUNK_RESPONSE
 * (also a status line that is not HTTP/1.0 or 1.1 on plain http, a Content-Length that does not
 * parse, overflows or conflicts with another or with Transfer-Encoding, an unrequested 101, and
 * a head beyond LK_HTTP_HEAD_MAX; the framing faults are found when the head ends),
 * PARTIAL_BODY (reply started, connection lost before its end, or a body shorter than its
 * Content-Length even when libcurl calls the transfer complete), the status kinds of
 * lk_failure_from_status(), and CANCELLED / DEADLINE_EXCEEDED / BREAKER_OPEN / RATE_LIMITED /
 * BULKHEAD_FULL.
 *
 * libcurl's silent re-send. When a reused keep-alive connection dies before any reply byte,
 * libcurl 7.88 opens a new connection and writes the request again inside the same transfer: a
 * POST can reach the server twice while the caller sees one success. The driver detects it (the
 * pre-request callback runs twice in one attempt), counts it (lk_http_attempt_info.resends,
 * lk_call_metrics_resend_detected) and, for a non-idempotent request without an Idempotency-Key,
 * prevents it as lk_http_policy.resend_guard says.
 *
 * Threading. An lk_http_client and everything submitted to it belong to one thread at a time;
 * the only calls allowed from other threads are lk_http_cancel_fire() and lk_http_client_wakeup().
 * Policy objects referenced from a policy (budget, breaker, limiter, bulkhead, call metrics) are
 * thread-safe and may be shared by many clients. Requests are immutable once submitted.
 *
 * Ownership. Strings passed in are copied before the function returns, except where a comment
 * says otherwise. A result belongs to whoever receives it and is freed with lk_http_result_free().
 *
 * Time. The driver measures deadlines, phase timers, attempt offsets and retry delays on
 * policy.clock (CLOCK_MONOTONIC by default); libcurl's socket waits run in real time, so a fake
 * clock is only meaningful against a server that answers at once. The client's own loop
 * (lk_http_client_run) wakes for a timer due within 100 ms at its nanosecond, not at the next
 * whole millisecond that curl_multi_poll waits in (a timerfd joins the poll); an external loop
 * fires timers as precisely as it does.
 */
#ifndef LINKD_HTTP_H
#define LINKD_HTTP_H

#include <linkd/breaker.h>
#include <linkd/budget.h>
#include <linkd/bulkhead.h>
#include <linkd/adaptive.h>
#include <linkd/callmetrics.h>
#include <linkd/clock.h>
#include <linkd/common.h>
#include <linkd/deadline.h>
#include <linkd/error.h>
#include <linkd/event.h>
#include <linkd/failure.h>
#include <linkd/hedge.h>
#include <linkd/idem.h>
#include <linkd/limiter.h>
#include <linkd/rand.h>
#include <linkd/retry.h>

LK_BEGIN_DECLS

/* ============================================================================================
 * Requests
 * ========================================================================================== */

/* An HTTP request: method, URL, headers and a body that is replayed on every attempt.
 * Opaque and reference-counted: submitting it takes a reference, so the caller may free it at
 * once. It must not be modified while a call uses it (setters then return LK_ESTATE).
 * Thread-safety: one thread may modify it; once complete it may be submitted from any thread. */
typedef struct lk_http_request lk_http_request;

/* Creates a request. `method` is any HTTP token ("GET", "post", "PROPFIND": sent as given);
 * `url` is an absolute http:// or https:// URL. Both are copied.
 * Returns NULL on a NULL/blank argument, a method that is not an RFC 9110 token, or no memory. */
LK_EXPORT lk_http_request *lk_http_request_new(const char *method, const char *url);
/* The same, saying why not: LK_OK with *out set (the caller's: lk_http_request_free), LK_EINVAL
 * (the arguments above, or a NULL out) or LK_ENOMEM, with *out NULL. For a caller that must tell
 * a request that can never be made from a moment without memory (a stored request is set aside
 * for the first, retried after the second). Any thread; the request is then as above. */
LK_EXPORT int lk_http_request_create(const char *method, const char *url, lk_http_request **out);

/* Adds a header "Name: value". `name` must be an RFC 9110 token and `value` must hold no CR, LF
 * or NUL (header injection is refused). Names the driver owns are refused with LK_EINVAL:
 * Linkd-Attempt, Linkd-Deadline, grpc-timeout (set per attempt) and Content-Length,
 * Transfer-Encoding (framing). Adding an "Idempotency-Key" header (a valid key, see idem.h) makes
 * it the call's key, sent as given whatever idem_mode says.
 * Returns LK_OK, LK_EINVAL, LK_ESTATE (in use by a call) or LK_ENOMEM. */
LK_EXPORT int lk_http_request_add_header(lk_http_request *r, const char *name, const char *value);

/* Sets the body, copied. `len` 0 with a non-NULL pointer sends an empty body with
 * Content-Length: 0. Replaces any previous body. LK_OK, LK_EINVAL, LK_ESTATE or LK_ENOMEM. */
LK_EXPORT int lk_http_request_set_body(lk_http_request *r, const void *data, size_t len);

/* Sets the body without copying: `data` must stay valid and unchanged until every call using
 * this request has completed (its result delivered). For large uploads. */
LK_EXPORT int lk_http_request_set_body_ref(lk_http_request *r, const void *data, size_t len);

/* A streamed body: `len` bytes (declared as Content-Length) that the driver pulls from `fn` as
 * it writes them, for bodies too large to hold for a replay (`linkd serve`). `fn(ctx, buf, cap)`
 * returns the bytes it put in buf (> 0), LK_HTTP_BODY_WAIT when none are available yet (the
 * transfer pauses until lk_http_request_body_ready()), or LK_HTTP_BODY_ABORT (the attempt
 * fails). It runs on the driver's thread, inside a driver function. Such a body cannot be
 * replayed: once `fn` has given a byte, the call makes no further attempt (reason "streamed body
 * not replayable"); an attempt that failed before (refused, DNS, ...) may be retried. Streamed
 * requests always get a fresh connection (libcurl's silent re-send on a reused one would need
 * the body again). The request may be used by one call at a time. Replaces any body. */
typedef long (*lk_http_body_fn)(void *ctx, char *buf, size_t cap);
#define LK_HTTP_BODY_WAIT (-1L)
#define LK_HTTP_BODY_ABORT (-2L)
LK_EXPORT int lk_http_request_set_body_stream(lk_http_request *r, size_t len, lk_http_body_fn fn,
                                              void *ctx);
/* More of a streamed body is available: resumes the paused transfer. On the driver's thread,
 * outside driver callbacks. No-op when not paused. */
LK_EXPORT void lk_http_request_body_ready(lk_http_request *r);
/* Bytes of a streamed body `fn` has given so far. */
LK_EXPORT uint64_t lk_http_request_body_streamed(const lk_http_request *r);

/* Verbatim headers: the request goes with the caller's headers only, plus what framing and
 * the policy need (Host, Content-Length, the Linkd-* / Idempotency-Key / traceparent headers the
 * policy asks for). Without it, a request without an Accept header gets "Accept: * / *" and, on
 * libcurl, a body without a Content-Type gets "application/x-www-form-urlencoded", as curl
 * sends them. For a proxy, which must forward what its client sent (`linkd serve` sets it).
 * LK_OK, LK_EINVAL or LK_ESTATE (in use by a call). */
LK_EXPORT int lk_http_request_set_verbatim(lk_http_request *r, bool on);

/* The method and URL as given (owned by the request). */
LK_EXPORT const char *lk_http_request_method(const lk_http_request *r);
LK_EXPORT const char *lk_http_request_url(const lk_http_request *r);

/* Drops the caller's reference; the request is destroyed when no call uses it. NULL is a no-op. */
LK_EXPORT void lk_http_request_free(lk_http_request *r);

/* ============================================================================================
 * Responses
 * ========================================================================================== */

typedef struct lk_http_header {
  const char *name;  /* as received, NUL-terminated */
  const char *value; /* leading/trailing blanks removed, NUL-terminated */
} lk_http_header;

/* One HTTP response as received (read-only view; owned by the result it came from). */
typedef struct lk_http_response {
  int status;                   /* final status code (1xx interim responses are skipped) */
  const lk_http_header *headers; /* of the final response, in order received */
  size_t header_count;
  const char *body;             /* body bytes, followed by a NUL not counted in body_len */
  size_t body_len;
  bool complete;                /* the whole body arrived (false: partial body kept) */
  int version;                  /* from the final status line: 10 (HTTP/1.0), 11 (HTTP/1.1),
                                   20 (HTTP/2), 30 (HTTP/3); 0 if it did not parse */
  const char *reason;           /* the final status line's reason phrase, NUL-terminated, ""
                                   if none (always for HTTP/2 and 3); at most
                                   LK_HTTP_REASON_MAX - 1 bytes, longer ones are cut */
} lk_http_response;

/* Room for a reason phrase, its NUL included (RFC 9112 sets no limit; real ones are short). */
#define LK_HTTP_REASON_MAX 64

/* The longest response head read, in bytes: status line, header lines and the blank line, CRLFs
 * included, counted per head (each interim 1xx head on its own; trailers of a chunked body
 * likewise). The same on both transports: libhttp-parser's default limit, which the native
 * transport uses, and counted by the driver on libcurl's (whose own limits are 100 KiB per line
 * and, in Debian's 7.88, 300 KiB in all). A longer head fails the attempt as
 * LK_F_JUNK_RESPONSE, not retried (LK_ETOOBIG). */
#define LK_HTTP_HEAD_MAX (80 * 1024)

/* The first header named `name` (ASCII case-insensitive) or NULL. */
LK_EXPORT const char *lk_http_response_header(const lk_http_response *resp, const char *name);

/* ============================================================================================
 * Policy bundle
 * ========================================================================================== */

/* Classification hook: called once per attempt that received a status line, after the driver
 * classified it as `kind` (LK_F_NONE for success). Return `kind` to keep it, or another kind to
 * override it (e.g. LK_F_RESULT_RETRYABLE for a 200 whose body says "busy", or LK_F_NONE to accept
 * a 404). `resp->complete` is false if the body was cut short. Runs on the driver's thread;
 * must not call into the same client. An out-of-range return value is ignored. */
typedef lk_failure (*lk_http_classify_fn)(void *ctx, const lk_http_response *resp,
                                          lk_failure kind);

/* One attempt of a call's timeline (defined with the results below). */
typedef struct lk_http_attempt_info lk_http_attempt_info;

/* Per-attempt hook: called once for every attempt of a call, refusals by a protection included,
 * as soon as the attempt's outcome and the decision after it are known (before any retry delay),
 * with the same entry the result's timeline will hold. For progress output (`linkd -v`) and
 * logs. Runs on the driver's thread; must not call into the same client; `a` is valid during the
 * call only. */
typedef void (*lk_http_attempt_fn)(void *ctx, const lk_http_attempt_info *a);

/* Per-attempt URL hook: called just before attempt `attempt` (1-based) is sent; returns the URL
 * that attempt goes to (absolute http:// or https://; must stay valid until the attempt ends), or
 * NULL for the request's own URL. For a caller that picks an endpoint per attempt, so a retry goes
 * to another replica (`linkd serve`). The request's Host header, if the caller added one, is sent
 * unchanged. Default protection (a NULL budget or breaker) stays that of the request's URL's
 * origin. Runs on the driver's thread; must not call into the same client. */
typedef const char *(*lk_http_url_fn)(void *ctx, int attempt);

/* The response header by which a tier says it has already retried (or decided not to) for this
 * request, with the number of attempts it made: "Linkd-Retried: 3". A caller that honours it does
 * not retry that response (lk_http_policy.honor_retried): retries happen at one layer only, the
 * one just above the failure (Google SRE book, "Addressing Cascading Failures": retry at one
 * layer of the stack, and let a layer that has given up say so, as gRPC's negative
 * grpc-retry-pushback-ms does), so three tiers of three attempts cost 3, not 27. */
#define LK_HTTP_RETRIED_HEADER "Linkd-Retried"

/* The outcome of one logical call. Opaque; owned by its receiver; not thread-safe. */
typedef struct lk_http_result lk_http_result;

/* The substitute response a fallback produces (see lk_http_fallback_fn). */
typedef struct lk_http_fallback_response {
  int status;                 /* 100..999; default 200 */
  const char *const *headers; /* "Name: value" lines (no CR or LF), or NULL */
  size_t nheaders;
  const void *body; /* NULL = no body */
  size_t body_len;
} lk_http_fallback_response;

/* Fallback hook: called once when a call has failed for good (any error but LK_OK, cancellation
 * included), after the timeline is complete, with the failed result (error, failure, stop,
 * timeline and the last real response, if any, all readable through the lk_http_result_*
 * accessors) and `out` set to an empty 200. Return LK_OK to substitute `out` (a stale cached
 * copy, a default value): the result then says LK_OK, lk_http_result_response() is the
 * substitute, lk_http_result_fallback() is true and lk_http_result_original_err() the error it
 * replaced; the timeline is left as it was (the failed attempts stay visible), the stop text
 * becomes "fallback after: <stop>", and lk_call_metrics_fallback(metrics, error) counts it by
 * cause. `out` and what it points to are copied as soon as the hook returns. Any other return
 * keeps the failure (as does no memory for the copy). Runs on the driver's thread; must not call
 * into the same client. */
typedef int (*lk_http_fallback_fn)(void *ctx, const lk_http_result *failed,
                                   lk_http_fallback_response *out);

/* How a non-idempotent request without an Idempotency-Key is protected from libcurl's silent
 * re-send on a reused connection (see the top of this file). Idempotent or keyed requests may
 * always be re-sent by libcurl; every re-send is counted. */
typedef enum lk_http_resend_guard {
  LK_RESEND_ABORT,            /* default: stop the second write in the pre-request callback; the
                                 attempt ends as LK_F_RESET_AFTER_SEND (it may have been
                                 processed), so the retry rules apply as to any reset */
  LK_RESEND_FRESH_CONNECTION, /* never reuse a connection for such a request (costs a handshake) */
  LK_RESEND_ALLOW             /* libcurl's behaviour: only count it (for comparisons and demos) */
} lk_http_resend_guard;

/* The longest duration a policy accepts (deadline, attempt and phase timeouts, deadline_reserve,
 * pool_idle_lifetime): 100 days. Longer values are refused by lk_http_policy_validate() rather
 * than silently cut (a phase timeout of 0 means "no phase limit"). */
#define LK_HTTP_DURATION_MAX (INT64_C(100) * 86400 * 1000000000)

/* Everything that governs one logical call. Plain value: fill with lk_http_policy_init_default()
 * and change fields. Durations are ns, at most LK_HTTP_DURATION_MAX; 0 for a phase timeout means
 * "bounded only by the attempt timeout". All time arithmetic saturates, so an absolute deadline_at
 * anywhere on the time line (an expired inherited one near INT64_MIN included) is honoured.
 * The struct is copied when a call starts; pointed-to objects are not copied and must outlive
 * every call that uses them. One policy may serve any number of calls and threads, except
 * `rng` (one thread at a time). */
typedef struct lk_http_policy {
  /* --- time ------------------------------------------------------------------------------- */
  int64_t deadline;        /* budget for the whole logical call, from its start; > 0;
                              default 3 s (seed 000) */
  lk_deadline deadline_at; /* optional absolute deadline on `clock` (e.g. inherited from an
                              incoming request); the earlier of the two wins; default none */
  int64_t attempt_timeout; /* per-attempt cap; each attempt gets min(cap, remaining); > 0;
                              default 800 ms (seed 000) */
  int64_t connect_timeout; /* TCP handshake, <= the attempt's timeout; default 500 ms (seed 000);
                              0 = bounded by the attempt timeout only */
  int64_t dns_timeout;        /* name resolution; default 0 */
  int64_t pool_timeout;       /* waiting for a bulkhead slot; default 0 (= up to the deadline) */
  int64_t tls_timeout;        /* TLS handshake; default 0 */
  int64_t write_timeout;      /* writing the request (headers and body); default 0 */
  int64_t first_byte_timeout; /* request fully written -> first response byte; default 0 */
  int64_t idle_timeout;       /* longest gap between two response bytes; default 0 */
  int64_t pool_idle_lifetime; /* pooled connections idle longer than this are not reused
                                 (>= 1 s; libcurl counts whole idle seconds, so a connection
                                 idle up to 1 s longer may still be reused); default 30 s */

  /* --- retries ---------------------------------------------------------------------------- */
  lk_retry_policy retry; /* initialised from lk_retry_config_init_default(): 4 attempts,
                            exponential 200 ms..2 s, symmetric jitter 0.5, Retry-After honoured
                            and capped at 60 s. Re-init with lk_retry_policy_init() to change. */
  bool assume_idempotent; /* treat every request as idempotent for retry decisions. Unsafe;
                             for comparisons (the demo's naive clients). Default false */

  /* --- shared protection (optional, not owned; NULL budget / breaker: see default_protection) */
  lk_budget *budget;     /* one request recorded per call; every success recorded, a failure
                            only when the policy would retry it; every retry asks for a token */
  lk_breaker *breaker;   /* asked before every attempt; every attempt's outcome recorded */
  bool default_protection; /* a NULL budget or breaker means the client's own for the request's
                              origin (scheme, host, port), created on first use from
                              lk_http_client_config's origin_budget / origin_breaker: a retry
                              budget of 20 % of requests (+ 10/s) and a breaker that opens at
                              50 % failures of the last 50 attempts. false: NULL means none.
                              Default true: a client whose author set nothing must not turn a
                              slow server into a retry storm (docs/demo.md, storm scenario) */
  bool breaker_wait;     /* a call the breaker refuses waits for lk_breaker_retry_at() (the next
                            probe) if that leaves min_attempt (retry config) before the deadline,
                            holding no bulkhead slot and sending nothing meanwhile; otherwise it
                            fails at once with LK_EBREAKER_OPEN. Default true */
  lk_limiter *limiter;   /* one token reserved before every attempt */
  lk_bulkhead *bulkhead; /* one slot held for the duration of every attempt; a call without one
                            waits in the bulkhead's FIFO queue (with blocking acquirers) */
  lk_call_metrics *metrics; /* seed 001's per-call observations recorded here */
  lk_adaptive *adaptive; /* fed every attempt's outcome (lk_adaptive_outcome_of its kind) and
                            duration when it ends, while its bulkhead slot still counts as in
                            use; cancelled attempts and local failures are not fed. Attached to
                            `bulkhead` (lk_adaptive_attach) it is that bulkhead's limit: the
                            concurrency of these calls follows the server's latency and errors.
                            Default NULL */

  /* --- hedging ----------------------------------------------------------------------------- */
  lk_hedge_policy hedge; /* hedged attempts (hedge.h) for requests that may be sent twice:
                            idempotent methods, keyed requests, or assume_idempotent; others are
                            never hedged. Once an attempt the driver started itself has run for
                            the hedge delay (fixed, or a percentile, e.g. of
                            lk_call_metrics_attempt_hist() through lk_http_hist_percentile), one
                            more attempt starts alongside it on another easy handle (another
                            pooled connection, or a new one; on HTTP/2 libcurl may multiplex it
                            onto the same one) and, when attempt_url picks one per attempt
                            number, at another endpoint; up to max_hedges per round. A hedge needs, at
                            once and without waiting: a bulkhead slot (lk_bulkhead_try_acquire),
                            a breaker permit, a retry-budget token (as a retry does), the hook
                            `spend` if set, and a limiter token; any refusal ends hedging until
                            the next retry. Hedges count towards retry.max_attempts. The first
                            acceptable answer (a success, or an HTTP answer that is not retried,
                            such as a 404) wins and the other attempts are cancelled (in the
                            timeline as CANCELLED, "attempt N answered first"); a failure while
                            another attempt is in flight waits for that one. Default: max_hedges
                            0 (no hedging), otherwise lk_hedge_policy_init_default() */

  /* --- idempotency ------------------------------------------------------------------------- */
  lk_idem_mode idem_mode; /* default LK_IDEM_NONE */
  const char *idem_key;    /* LK_IDEM_KEY: the caller's key (copied at call start) */
  const char *idem_tenant; /* optional prefix for generated and supplied keys: "<tenant>:<key>" */
  lk_http_resend_guard resend_guard; /* default LK_RESEND_ABORT */

  /* --- classification ---------------------------------------------------------------------- */
  lk_http_classify_fn classify; /* optional hook; default NULL */
  void *classify_ctx;
  lk_http_attempt_fn on_attempt; /* optional per-attempt hook (above); default NULL */
  void *on_attempt_ctx;
  lk_http_url_fn attempt_url; /* optional per-attempt URL hook (above); default NULL */
  void *attempt_url_ctx;
  bool honor_retried; /* a response carrying LK_HTTP_RETRIED_HEADER is not retried (the tier
                         below already did): the call stops with it, reason "upstream already
                         retried" (LK_REASON_NOT_RETRYABLE). Default true */

  /* --- fallback, events, trace context ----------------------------------------------------- */
  lk_http_fallback_fn fallback; /* optional last stage (above); default NULL */
  void *fallback_ctx;
  lk_event_fn on_event; /* optional per-call events (event.h): CALL_START; WAIT (bulkhead,
                           limiter, breaker, reported when the wait ends); ATTEMPT_START;
                           ATTEMPT_END (refusals and cancelled hedges included); RETRY_SCHEDULED;
                           BUDGET_REFUSED; BREAKER_TRANSITION (this call's acquire or record
                           moved the breaker); HEDGE_STARTED; FALLBACK; CALL_END, always last.
                           Runs on the driver's thread; must not call into the same client.
                           Default NULL */
  void *event_ctx;
  const lk_traceparent *traceparent; /* optional W3C trace context of the caller (e.g. parsed
                                        from an incoming request with lk_traceparent_parse):
                                        every attempt sends "traceparent" with the same trace
                                        id and flags and a span id of its own
                                        (lk_traceparent_child, drawn from `rng`). Copied at
                                        submit; the request should not carry its own
                                        traceparent header then. Default NULL */

  /* --- deadline propagation ---------------------------------------------------------------- */
  bool send_deadline;       /* send "Linkd-Deadline: <ms>": this attempt's timeout (which is
                               min(cap, remaining): the client abandons the attempt after it, so
                               the server gets no more) minus deadline_reserve, rounded down,
                               >= 0; default true */
  bool send_grpc_timeout;   /* also send "grpc-timeout" (rounded up, gRPC's form); default false */
  int64_t deadline_reserve; /* ns kept for local work after the reply; default 0 */
  bool send_attempt;        /* send "Linkd-Attempt: <n>"; default true */

  /* --- limits and plumbing ----------------------------------------------------------------- */
  size_t max_response_body; /* a bigger body ends the call with LK_ETOOBIG (a Content-Length
                               above it as soon as the head is in); default 64 MiB */
  const lk_clock *clock;    /* NULL = lk_clock_system(); default NULL */
  lk_rand *rng;             /* jitter; NULL = the client's own generator, seeded from getrandom
                               when the client is created */
  const char *user_agent;   /* sent as User-Agent when non-empty (no CR or LF: LK_ECONFIG);
                               NULL or "" sends none (libcurl's default); default NULL */
  bool verify_tls;          /* verify the peer's certificate and host name; default true */
  const char *ca_file;      /* a PEM file of CA certificates to verify the peer with, instead of
                               libcurl's default bundle (CURLOPT_CAINFO; libcurl's default CA
                               directory, if built with one, still applies); copied at submit;
                               not empty, no CR or LF (LK_ECONFIG); the file is read when a
                               connection is made. NULL = libcurl's default; default NULL */
  /* A client certificate, for servers that ask for one (mutual TLS; curl's --cert, --key,
   * --pass). The strings are checked as ca_file's and copied at submit; the files are read
   * when a connection is made, and one that cannot be read, a key that does not match the
   * certificate or does not decrypt is LK_F_TLS_FAILED (not retried by default). A call with
   * any of them runs on libcurl, and libcurl's pool gives it only connections made with the
   * same certificate. */
  const char *client_cert;  /* a PEM file with the certificate (CURLOPT_SSLCERT), and its key
                               when client_key is NULL; NULL = none; default NULL */
  const char *client_key;   /* a PEM file with the private key (CURLOPT_SSLKEY); only with
                               client_cert (LK_ECONFIG otherwise); default NULL */
  const char *key_password; /* the pass phrase of an encrypted key (CURLOPT_KEYPASSWD); only
                               with client_cert. NULL: the key is not encrypted; an encrypted
                               one then fails the handshake rather than prompting on a
                               terminal, as OpenSSL would; default NULL */

  /* --- content coding and where connections go (curl's --compressed, --resolve, --connect-to)
   * Calls with any of these run on libcurl: the native transport (lk_http_client_config.transport)
   * neither decodes nor redirects connections, so it leaves such a call to libcurl, as it does a
   * call with a ca_file; nothing of them is ignored. */
  bool compressed; /* ask for a compressed response ("Accept-Encoding: gzip, deflate", libcurl's
                      CURLOPT_ACCEPT_ENCODING, unless the request has its own Accept-Encoding
                      header) and decode a gzip, x-gzip or deflate body (with zlib).
                      The response's body is
                      then the decoded bytes, and max_response_body counts them (a small gzip
                      bomb ends LK_ETOOBIG when its decoded size passes the limit; a declared
                      Content-Length, which counts encoded bytes, is not held against it); its
                      headers stay as received (Content-Encoding, Content-Length). A body that
                      does not decode (corrupt data, a bad checksum, bytes after the end, a
                      coding other than those, or several stacked) is LK_F_JUNK_RESPONSE, one
                      whose compressed stream ends early (its transfer complete) LK_F_PARTIAL_BODY,
                      phase RECEIVE, retried like any broken response. Default false: a body is
                      never decoded, whatever Accept-Encoding header the request carries (a proxy
                      forwards it as received) */
  const char *const *resolve; /* nresolve entries "HOST:PORT:ADDR[,ADDR...]", curl's --resolve
                                 (CURLOPT_RESOLVE): a connection to HOST:PORT goes to ADDR
                                 (IPv4 or IPv6, optionally in brackets; several are tried in
                                 turn) instead of what DNS says; HOST "*" stands for any host.
                                 Checked by lk_http_resolve_check() (LK_ECONFIG otherwise) and
                                 copied at submit. Applied on every attempt, in a DNS cache of the
                                 call's own (other calls on the client never see these
                                 addresses), and such a call never shares a pooled connection
                                 with another call (each attempt opens its own and closes it).
                                 Default NULL */
  size_t nresolve;
  const char *const *connect_to; /* nconnect_to entries "HOST1:PORT1:HOST2:PORT2", curl's
                                    --connect-to (CURLOPT_CONNECT_TO): a request to HOST1:PORT1
                                    connects to HOST2:PORT2 instead, with the URL's host still
                                    in the Host header and TLS name checks; an empty HOST1 or
                                    PORT1 matches any, an empty HOST2 or PORT2 keeps the URL's.
                                    The first entry that matches is used. Checked by
                                    lk_http_connect_to_check() (LK_ECONFIG otherwise), copied at
                                    submit, applied on every attempt. Default NULL */
  size_t nconnect_to;
} lk_http_policy;

/* Sets every field to its default (see the struct). Never fails. */
LK_EXPORT void lk_http_policy_init_default(lk_http_policy *p);

/* Whether `entry` is a valid lk_http_policy.resolve entry: HOST:PORT:ADDR[,ADDR...] with HOST a
 * name (letters, digits, '-', '.', '_'; at most 255 characters) or "*", PORT 1 to 65535, and
 * each ADDR an IPv4 or IPv6 address, optionally in brackets ("[::1]"). libcurl's "+" and "-"
 * prefixes (cache lifetime, removal) are refused. LK_OK, or LK_EINVAL with *why (if non-NULL) a
 * static message saying what is wrong. Thread-safe. */
LK_EXPORT int lk_http_resolve_check(const char *entry, const char **why);
/* Whether `entry` is a valid lk_http_policy.connect_to entry: HOST1:PORT1:HOST2:PORT2, each
 * HOST empty, a name (as above) or an IPv6 address in brackets, each PORT empty or 1 to 65535.
 * LK_OK, or LK_EINVAL with *why (if non-NULL) a static message. Thread-safe. */
LK_EXPORT int lk_http_connect_to_check(const char *entry, const char **why);

/* Checks a policy. LK_OK or LK_ECONFIG with *why (if non-NULL) a static message naming the bad
 * field: deadline <= 0, attempt_timeout <= 0, a negative phase timeout, a duration above
 * LK_HTTP_DURATION_MAX, idem_mode LK_IDEM_KEY
 * without a valid key, an invalid tenant, pool_idle_lifetime < 1 s, a resolve or connect_to
 * entry that does not check (or a count without its array), ... Calls validate too. */
LK_EXPORT int lk_http_policy_validate(const lk_http_policy *p, const char **why);

/* ============================================================================================
 * Cancellation
 * ========================================================================================== */

/* A cancellation token, shareable by many calls (like a context): firing it ends every call
 * that uses it at once (the driver's wait is woken through an eventfd), with LK_ECANCELED and
 * the last attempt recorded as LK_F_CANCELLED. A call started with a token already fired ends
 * before its first attempt. Thread-safety: lk_http_cancel_fire() and lk_http_cancel_fired() are
 * safe from any thread and fire is async-signal-safe; free only when no call uses the token. */
typedef struct lk_http_cancel lk_http_cancel;

/* A new, unfired token, or NULL on no memory. */
LK_EXPORT lk_http_cancel *lk_http_cancel_new(void);
/* Fires the token (idempotent). */
LK_EXPORT void lk_http_cancel_fire(lk_http_cancel *c);
/* Whether the token has fired. */
LK_EXPORT bool lk_http_cancel_fired(const lk_http_cancel *c);
/* Frees the token. NULL is a no-op. */
LK_EXPORT void lk_http_cancel_free(lk_http_cancel *c);

/* ============================================================================================
 * Results and the attempt timeline
 * ========================================================================================== */

/* How far an attempt got. */
typedef enum lk_http_phase {
  LK_PHASE_QUEUED,   /* waiting for bulkhead / limiter / breaker; no I/O yet */
  LK_PHASE_DNS,      /* resolving */
  LK_PHASE_CONNECT,  /* TCP handshake */
  LK_PHASE_TLS,      /* TLS handshake */
  LK_PHASE_SEND,     /* writing the request (pre-request callback ran) */
  LK_PHASE_WAIT,     /* request fully written, no reply byte yet */
  LK_PHASE_RECEIVE,  /* reply started (status line / headers / body) */
  LK_PHASE_DONE      /* complete response received */
} lk_http_phase;

/* One attempt of the timeline. */
struct lk_http_attempt_info {
  int number;              /* 1-based */
  int64_t start;           /* ns from the start of the logical call */
  int64_t duration;        /* ns */
  lk_http_phase phase;     /* furthest phase reached */
  bool hedge;              /* started as a hedge, alongside another attempt in flight (compare
                              start and duration to see the overlap) */
  lk_failure failure;      /* final kind (after the hook); LK_F_NONE = success */
  lk_failure classified;   /* kind before the hook */
  int status;              /* HTTP status; 0 if no status line */
  int curl_code;           /* CURLcode the transfer ended with; 0 if ended by the driver/OK
                              (the native transport reports the code libcurl gives for the
                              same evidence) */
  uint64_t bytes_sent;     /* request bytes written (headers + body) */
  uint64_t bytes_received; /* response bytes received (headers + body) */
  bool request_sent;       /* every request byte was written */
  bool reused_connection;  /* ran on a pooled connection */
  bool native;             /* ran on the native transport (lk_http_client_config.transport),
                              not on libcurl */
  int resends;             /* libcurl silent re-sends detected within this attempt */
  int64_t timeout;         /* the attempt timeout used: min(cap, remaining) */
  int64_t connect_timeout; /* the connect timeout used (<= timeout) */
  int64_t retry_after;     /* ns from the reply's Retry-After, -1 if none, unparseable, or
                              given more than once with different values */
  lk_decision decision;    /* what happened next: retry + delay, or why the call stopped */
  char reason[80];         /* lk_decision_format() text (or "success", "cancelled", ...) */
};

/* The outcome of one logical call (declared with the policy, whose fallback hook reads it). */

/* The call's typed error:
 *   LK_OK            the final attempt succeeded (2xx/3xx, or the hook said LK_F_NONE)
 *   LK_EHTTP         the final attempt got an HTTP status that is not retried (e.g. 404, or a
 *                    503 to a POST without a key) -> the response is available
 *   LK_ENOTRETRYABLE a transport failure that may not be retried (e.g. read timeout on a POST
 *                    without a key)
 *   LK_EATTEMPTS     retryable, but max_attempts were used
 *   LK_EDEADLINE     the deadline ended the call (during an attempt, or no time for the delay)
 *   LK_EBUDGET       the retry budget refused a retry
 *   LK_EBREAKER_OPEN, LK_ERATE_LIMITED, LK_EBULKHEAD_FULL  the protection refused an attempt
 *   LK_ECANCELED     cancelled
 *   LK_ETOOBIG       the response body exceeded max_response_body (a declared Content-Length
 *                    above it fails when the head ends), or its head exceeded
 *                    LK_HTTP_HEAD_MAX; not retried
 *   LK_ENOMEM        no memory for the response (also when the classification hook's view of
 *                    it could not be built: the attempt fails rather than skip the hook)
 *   LK_EINVAL / LK_ECONFIG / LK_ENOMEM / LK_ESYS  the call could not be started */
LK_EXPORT int lk_http_result_err(const lk_http_result *r);
/* The kind of the final attempt (LK_F_NONE on success; a TERMINAL kind when the call was stopped
 * before or between attempts). */
LK_EXPORT lk_failure lk_http_result_failure(const lk_http_result *r);
/* The final response: the last attempt that received a status line (on exhaustion the last real
 * response, never a synthetic one), or NULL if no attempt got one. Owned by the result. */
LK_EXPORT const lk_http_response *lk_http_result_response(const lk_http_result *r);
/* The final status (0 if no response). */
LK_EXPORT int lk_http_result_status(const lk_http_result *r);
/* The timeline: `*n` attempts in order. An attempt refused by a protection (bulkhead, limiter,
 * breaker) appears with phase LK_PHASE_QUEUED and its terminal kind; `*n` is 0 only when the call
 * ended before any attempt (cancelled or invalid). Owned by the result. */
LK_EXPORT const lk_http_attempt_info *lk_http_result_attempts(const lk_http_result *r, size_t *n);
/* Why the call ended, as text (static or owned by the result), e.g. "attempts exhausted". */
LK_EXPORT const char *lk_http_result_stop(const lk_http_result *r);
/* The Idempotency-Key sent on every attempt, or NULL if none. Owned by the result. */
LK_EXPORT const char *lk_http_result_idempotency_key(const lk_http_result *r);
/* Wall time of the logical call in ns (start to result). */
LK_EXPORT int64_t lk_http_result_elapsed(const lk_http_result *r);
/* libcurl re-sends detected over all attempts. */
LK_EXPORT int lk_http_result_resends(const lk_http_result *r);
/* Hedged attempts started (lk_http_policy.hedge); 0 without hedging. */
LK_EXPORT int lk_http_result_hedges(const lk_http_result *r);
/* Whether the fallback (lk_http_policy.fallback) produced the result, and the error the call had
 * failed with before it (LK_OK when no fallback was used). */
LK_EXPORT bool lk_http_result_fallback(const lk_http_result *r);
LK_EXPORT int lk_http_result_original_err(const lk_http_result *r);

/* The timeline as a JSON array, one object per attempt:
 *   {"attempt":1,"start_ms":0.000,"duration_ms":12.345,"phase":"WAIT",
 *    "failure":"READ_TIMEOUT","classified":"READ_TIMEOUT","status":0,"curl_code":28,
 *    "bytes_sent":87,"bytes_received":0,"request_sent":true,"reused_connection":false,
 *    "resends":0,"timeout_ms":800.000,"connect_timeout_ms":500.000,"retry_after_ms":null,
 *    "decision":"RETRY","retry":true,"delay_ms":250.000,"reason":"retry READ_TIMEOUT"}
 * Written to a malloc'd NUL-terminated buffer the caller frees with free(). *len (if non-NULL)
 * gets the length. LK_OK, LK_EINVAL or LK_ENOMEM. The schema is in docs/http.md. */
LK_EXPORT int lk_http_result_timeline_json(const lk_http_result *r, char **out, size_t *len);
/* The whole result as one JSON object: {"ok","error","error_message","failure","status",
 * "attempts","elapsed_ms","stop","idempotency_key","resends","body_bytes","timeline":[...]},
 * with "hedges":N after "resends" when the call hedged and "fallback":true,
 * "original_error":"E..." after "error_message" when a fallback produced it.
 * Same conventions as above. */
LK_EXPORT int lk_http_result_json(const lk_http_result *r, char **out, size_t *len);

/* Frees a result. NULL is a no-op. */
LK_EXPORT void lk_http_result_free(lk_http_result *r);

/* ============================================================================================
 * The driver: synchronous and asynchronous calls on curl's multi interface
 * ========================================================================================== */

/* A client owns a libcurl multi handle, its connection pool (keep-alive) and the timers of the
 * calls it runs. Many calls run concurrently on one thread; retry delays are timers, never sleeps.
 * Thread-safety: one thread at a time, except lk_http_client_wakeup(). */
typedef struct lk_http_client lk_http_client;

/* Event bits for the embedding callbacks. */
#define LK_HTTP_POLL_IN 1
#define LK_HTTP_POLL_OUT 2

/* Embedding into an external event loop (libuv, libevent, epoll): the client reports the file
 * descriptors it needs watched and the single timer it needs, and the loop reports readiness back
 * with lk_http_client_socket_action() / lk_http_client_timer_action(). Same model as curl's
 * CURLMOPT_SOCKETFUNCTION / CURLMOPT_TIMERFUNCTION.
 *   socket_fn: watch `fd` for `events` (LK_HTTP_POLL_IN|OUT), replacing any previous interest;
 *              events == 0 means stop watching it.
 *   timer_fn:  (re)arm the one timer to fire `delay` ns from now (0 = as soon as possible);
 *              delay < 0 disarms it.
 * Callbacks run inside lk_http_* calls on the client's thread and must not call back into the
 * client. The client's own wake-up eventfd (cancellation, lk_http_client_wakeup) is reported
 * through socket_fn like any other descriptor.
 *   close_fn:  optional; `fd`, a connection's socket, is about to be closed (if it was
 *              watched, socket_fn has said events == 0 for it). A loop that keeps its watcher
 *              registered between a pooled connection's transfers (to spare an epoll_ctl pair
 *              per request) must drop it here: the number may be reused at once. The client
 *              closes `fd` after it. */
typedef void (*lk_http_socket_fn)(void *ud, int fd, int events);
typedef void (*lk_http_timer_fn)(void *ud, int64_t delay);
typedef void (*lk_http_close_fn)(void *ud, int fd);

/* How a client's attempts do their I/O (lk_http_client_config.transport). */
typedef enum lk_http_transport {
  LK_HTTP_TRANSPORT_CURL,  /* default: libcurl's multi interface, for every attempt */
  LK_HTTP_TRANSPORT_NATIVE /* external loop mode only: an HTTP/1.1 client on the loop itself
                              (libhttp-parser, keep-alive pool per origin) for attempts to plain
                              http:// URLs whose host is an IP literal or localhost; every other
                              attempt (https, names to resolve, a caller's Expect, a CA
                              file, a policy with compressed, resolve or connect_to) still runs
                              on libcurl. Classified like libcurl's (docs/DESIGN.md section 8) */
} lk_http_transport;

typedef struct lk_http_client_config {
  long max_connections;      /* total open connections; 0 = unlimited (default) */
  long max_host_connections; /* per host; 0 = unlimited (default) */
  long max_pool;             /* connections kept in the pool; 0 = libcurl's default */
  /* External loop mode when both are set; otherwise the client runs its own poll loop in
   * lk_http_call() / lk_http_client_run(). */
  lk_http_socket_fn socket_fn;
  lk_http_timer_fn timer_fn;
  void *loop_ud;
  /* Default protection per origin (lk_http_policy.default_protection): copied at creation; NULL
   * (default) = lk_http_origin_budget_default() / lk_http_origin_breaker_default(). The breaker
   * config's rng is replaced by a generator of each origin's own. At most 1024 origins per client
   * get one; calls to further origins run without. */
  const lk_budget_ratio_config *origin_budget;
  const lk_breaker_config *origin_breaker;
  lk_http_close_fn close_fn; /* external loop mode only; NULL (default): not told */
  lk_http_transport transport; /* default LK_HTTP_TRANSPORT_CURL; NATIVE needs socket_fn and
                                  timer_fn and no max_connections / max_host_connections (it
                                  is ignored otherwise) */
  /* External loop mode: the loop calls lk_http_client_start_submitted() after the calls it
   * submits (outside the client's callbacks) before it waits for events again, so
   * lk_http_submit() does not arm the timer for them (two timer updates per call saved).
   * Default false: submit arms the timer for now and the loop's timer starts them. */
  bool start_submitted;
} lk_http_client_config;

/* The per-origin defaults: Finagle's RetryBudget (20 % of requests over 10 s, plus 10 retries
 * a second), and a breaker on the last 50 attempts (20 at least) that opens at 50 % failures,
 * waits 100 ms doubling to 500 ms (symmetric jitter) before 5 probes, and decides as soon as the
 * probes settle it. 429s count as nothing (lk_breaker_ignore_default). */
LK_EXPORT void lk_http_origin_budget_default(lk_budget_ratio_config *c);
LK_EXPORT void lk_http_origin_breaker_default(lk_breaker_config *c);

/* The client's default budget / breaker for the origin of `url`, or NULL if no call to that
 * origin has created one (or `c` is NULL). Owned by the client; valid until it is freed. For
 * metrics and tests (lk_budget_stats_get, lk_breaker_metrics_get). */
LK_EXPORT lk_budget *lk_http_client_origin_budget(lk_http_client *c, const char *url);
LK_EXPORT lk_breaker *lk_http_client_origin_breaker(lk_http_client *c, const char *url);

/* Sets every field to its default (see the struct). */
LK_EXPORT void lk_http_client_config_init_default(lk_http_client_config *c);

/* Creates a client (cfg NULL = defaults). Initialises libcurl globally on first use (thread-safe).
 * Returns NULL on no memory, an invalid origin_budget / origin_breaker, or a libcurl failure. */
LK_EXPORT lk_http_client *lk_http_client_new(const lk_http_client_config *cfg);

/* Frees a client. Calls still in flight are cancelled and their callbacks run with LK_ECANCELED
 * before this returns. NULL is a no-op. Must not be called from a callback. */
LK_EXPORT void lk_http_client_free(lk_http_client *c);

/* Completion callback of an asynchronous call: the receiver owns `res` (free it with
 * lk_http_result_free()). Runs on the client's thread, inside a driver function; it may submit
 * new calls but must not free the client or run it. */
typedef void (*lk_http_done_fn)(void *ud, lk_http_result *res);

/* Starts a logical call asynchronously on `c`. The request gets a reference, the policy is
 * copied (strings included), `cancel` (optional) must outlive the call. Returns LK_OK (the
 * callback will run exactly once, from a later driver function, never from inside this one),
 * or LK_EINVAL / LK_ECONFIG (policy invalid) / LK_ENOMEM / LK_ESYS (no entropy for a key)
 * without calling the callback. */
LK_EXPORT int lk_http_submit(lk_http_client *c, lk_http_request *req, const lk_http_policy *pol,
                             lk_http_cancel *cancel, lk_http_done_fn done, void *ud);

/* Runs the client's own loop (not in external mode): performs I/O, fires timers and completes
 * calls, waiting at most `max_wait` ns for events (< 0: until no call is in flight; 0: do what is
 * ready without waiting). With max_wait > 0 it also returns early when lk_http_client_wakeup()
 * is called, and at once when no call is in flight. Returns the number of calls still in flight
 * (>= 0), LK_ESTATE in external mode or from a callback, LK_ENOMEM (no memory for the poll set:
 * the calls stay in flight, and a later run goes on with them) or LK_ESYS. */
LK_EXPORT int lk_http_client_run(lk_http_client *c, int64_t max_wait);

/* External loop mode: `fd` is ready for `events` (LK_HTTP_POLL_IN|OUT; 0 if unknown). Performs
 * the I/O, completes calls, re-arms timers. LK_OK, LK_ESTATE (not external mode) or LK_ESYS. */
LK_EXPORT int lk_http_client_socket_action(lk_http_client *c, int fd, int events);
/* External loop mode: the timer armed through timer_fn fired. Same returns. */
LK_EXPORT int lk_http_client_timer_action(lk_http_client *c);

/* External loop mode: starts the calls submitted since the last driver function now, instead of
 * from the timer lk_http_submit() armed for them, so that their requests leave in the loop pass
 * that submitted them (an event loop runs that timer only after the pass's other events). Costs
 * the calls it starts, not the calls in flight. Optional unless the client was created with
 * lk_http_client_config.start_submitted (then submit arms no timer and nothing else starts a
 * call submitted outside the client's callbacks until some other event comes). Call
 * it from the loop, outside the client's callbacks; a completion callback of a call that ends at
 * once (breaker open, deadline passed) may run inside it. LK_OK, LK_EINVAL, or LK_ESTATE (not
 * external mode, or from a callback). */
LK_EXPORT int lk_http_client_start_submitted(lk_http_client *c);

/* Calls in flight (submitted, result not yet delivered). */
LK_EXPORT int lk_http_client_active(const lk_http_client *c);

/* Wakes a wait inside lk_http_client_run() / lk_http_call() (or, in external mode, makes the
 * wake-up descriptor readable). Safe from any thread and from signal handlers. */
LK_EXPORT void lk_http_client_wakeup(lk_http_client *c);

/* Runs one logical call to completion on the calling thread and stores its result in *out
 * (always set on return when out is non-NULL, even on failure, except LK_EINVAL for NULL
 * arguments). `c` NULL uses the calling thread's default client, created on first use and freed
 * when the thread exits (pthread key destructor; the main thread's lives until the process
 * exits), so connections are kept alive across calls (inside a callback of that client, a
 * temporary one is used). Otherwise `c`'s pool is reused and other calls submitted to it
 * progress meanwhile. Not allowed in
 * external mode or from a callback (LK_ESTATE). Returns lk_http_result_err(*out). */
LK_EXPORT int lk_http_call(lk_http_client *c, lk_http_request *req, const lk_http_policy *pol,
                           lk_http_cancel *cancel, lk_http_result **out);

/* ============================================================================================
 * Helpers (exposed for tests and other transports)
 * ========================================================================================== */

/* Parses a Retry-After value (RFC 9110 10.2.3): delay-seconds (1*DIGIT, saturating at INT64_MAX
 * ns) or an HTTP-date (IMF-fixdate, or the obsolete RFC 850 and asctime forms), given the current
 * wall time `now_wall` (ns since the epoch). A date in the past gives 0. Hostile values are not
 * capped here; the retry policy caps them (retry_after_cap). `len` bytes, no NUL needed; optional
 * surrounding blanks allowed. Returns LK_OK with *out in ns, or LK_EPARSE / LK_EINVAL. */
LK_EXPORT int lk_http_retry_after_parse(const char *value, size_t len, int64_t now_wall,
                                        int64_t *out);

/* Parses an HTTP-date into seconds since the epoch (the three forms above). An RFC 850 two-digit
 * year is read relative to the wall time `now_wall` (ns since the epoch), as RFC 9110 5.6.7 says:
 * a date that would be more than 50 years ahead is in the most recent past year with those
 * digits (in 2026, "70" is 2070 and "77" is 1977). The weekday name is checked for form, not for
 * agreement with the date. LK_OK, LK_EPARSE or LK_EINVAL. */
LK_EXPORT int lk_http_date_parse(const char *value, size_t len, int64_t now_wall,
                                 int64_t *epoch_seconds);

/* An lk_hedge_percentile_fn over an lk_hist (`hist`), e.g. the call metrics' attempt histogram
 * (lk_call_metrics_attempt_hist()): lk_hist_percentile(hist, q). For lk_http_policy.hedge. */
LK_EXPORT int64_t lk_http_hist_percentile(void *hist, double q);

/* "QUEUED", "DNS", "CONNECT", "TLS", "SEND", "WAIT", "RECEIVE", "DONE" ("UNKNOWN" otherwise). */
LK_EXPORT const char *lk_http_phase_name(lk_http_phase p);

LK_END_DECLS

#endif
