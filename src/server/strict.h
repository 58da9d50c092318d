/* SPDX-License-Identifier: MIT */
/* strict.h: the request-head checks libmicrohttpd 0.9.75 leaves to the application.
 *
 * MHD accepts a field name followed by whitespace ("Idempotency-Key : k" becomes a field named
 * "Idempotency-Key "), keeps only the first of repeated fields, cuts a value or the request
 * target at a NUL byte (literal, or "%00" once decoded), keeps trailing whitespace in values,
 * serves HTTP/1.1 without Host and waits for the end of a body whose transfer coding it does not
 * know. lk_head_check refuses all of that (RFC 9110 §5, RFC 9112 §2.2, §3.2, §5, §6) and hands
 * the fields libraryd reads back once each, with surrounding whitespace removed.
 *
 * It reads MHD's copy of the request head in place: 0.9.75 keeps the head in the connection's
 * read buffer and only overwrites each line's CR LF and the colon after each field name with
 * NUL, so every byte between two parsed fields is accounted for, and a byte that is neither
 * whitespace nor one of those terminators is a NUL that cut a value short. test_strict checks
 * these assumptions against the linked library.
 *
 * Thread-safety: the callbacks and the check run on the connection's MHD thread.
 */
#ifndef LINKD_SERVER_STRICT_H
#define LINKD_SERVER_STRICT_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct lk_resp;

/* The fields libraryd reads, each at most once per request. */
typedef enum lk_hdr {
  LK_HDR_HOST,
  LK_HDR_CONTENT_LENGTH,
  LK_HDR_TRANSFER_ENCODING,
  LK_HDR_CONTENT_TYPE,
  LK_HDR_IDEMPOTENCY_KEY,
  LK_HDR_API_KEY,
  LK_HDR_TENANT,
  LK_HDR_REQUEST_ID,
  LK_HDR_LINKD_DEADLINE,
  LK_HDR_GRPC_TIMEOUT,
  LK_HDR_LINKD_ATTEMPT,
  LK_HDR_COUNT
} lk_hdr;

typedef struct lk_head {
  char *v[LK_HDR_COUNT];  /* value without leading/trailing SP/HTAB, NUL-terminated; NULL: absent */
  int64_t content_length; /* -1 when absent */
  char *arena;            /* owns the values */
} lk_head;

/* Read deadlines: a connection must deliver its request head within head_ns of its accept (or,
 * on keep-alive, of the next request line; idle_ns + head_ns after the previous response at
 * most) and its body within body_ns of the head, or it is shut down. MHD's own timeout is an
 * idle timer that every byte resets, which a client sending one byte at a time never trips.
 * 0 turns a limit off. A thread checks a few times per limit. log_fd < 0: no log lines. */
typedef struct lk_guard lk_guard;
lk_guard *lk_guard_new(int64_t head_ns, int64_t body_ns, int64_t idle_ns, int log_fd);
/* After MHD stopped (no connection left). NULL is a no-op. */
void lk_guard_free(lk_guard *g);
/* Connections shut down so far. */
uint64_t lk_guard_cut(const lk_guard *g);

/* MHD_OPTION_NOTIFY_CONNECTION (cls: the lk_guard, may be NULL): the per-connection record. */
void lk_head_notify_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                               enum MHD_ConnectionNotificationCode code);
/* MHD_OPTION_URI_LOG_CALLBACK: notes the raw request target before MHD decodes it. Returns NULL
 * (the request's con_cls stays empty). */
void *lk_head_uri_log(void *cls, const char *uri, struct MHD_Connection *c);

/* To be called from MHD_OPTION_EXTERNAL_LOGGER with every message's format, before any
 * filtering (also when logging is off). 0.9.75 refuses a Content-Length that is not 1*DIGIT
 * (400) or is 2^64 or more (413) itself, before any handler call, and then writes the header
 * block of its response twice (its caller of parse_connection_headers() overwrites the state
 * the error path set; 0.9.76 and 0.9.77 still do, 1.0.0 does not). Its log message is the only call
 * into libraryd on that path, so this answers the request there: it writes libraryd's own 400
 * (bad_header) or 413 (body_too_large) straight to the socket and shuts the socket down, so that
 * MHD's response is never sent and the client reads exactly one response before the close. true:
 * the message is about a request answered that way and is not to be logged (one line of libraryd's
 * own replaces MHD's two, on the guard's log_fd). g may be NULL (false). */
bool lk_head_mhd_log(lk_guard *g, const char *fmt);

/* Checks the head of the request on c (the arguments MHD passed to the first handler call).
 * true: h filled (free with lk_head_free). false: out holds the answer (400, or 501 for an
 * unsupported transfer coding) and h is empty. */
bool lk_head_check(struct MHD_Connection *c, const char *method, const char *url,
                   const char *version, lk_head *h, struct lk_resp *out);
void lk_head_free(lk_head *h);
/* A handler that does not call lk_head_check (the admin listener's) calls this on its first
 * call for each request: the head is past MHD's refusal point (see lk_head_mhd_log). */
void lk_head_taken(struct MHD_Connection *c);
/* The body of the current request is complete (its handler runs now). */
void lk_head_body_done(struct MHD_Connection *c);
/* MHD finished the request (NOTIFY_COMPLETED): the connection idles until the next head. */
void lk_head_request_done(struct MHD_Connection *c);

#endif
