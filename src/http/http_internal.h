/* SPDX-License-Identifier: MIT */
/* Internal declarations shared by the files of the HTTP layer (not installed). */
#ifndef LINKD_HTTP_INTERNAL_H
#define LINKD_HTTP_INTERNAL_H

#include <linkd/http.h>

#include "core/sat.h"

#include <curl/curl.h>
#include <stdatomic.h>

/* --- requests ---------------------------------------------------------------------------------- */
struct lk_http_request {
  _Atomic int refs;       /* the caller's reference + one per call using it */
  uint64_t id;            /* unique per content version: lets a client skip re-setting options */
  char *method;
  char *url;
  char **headers;         /* "Name: value" lines */
  size_t nheaders, cap_headers;
  const char *idem_key;   /* points into a header line when the caller added Idempotency-Key */
  bool has_expect;        /* the caller set Expect (we then do not disable 100-continue) */
  bool has_accept;        /* the caller set Accept */
  bool has_ctype;         /* the caller set Content-Type */
  bool verbatim;          /* lk_http_request_set_verbatim: no default Accept / Content-Type */
  bool idempotent;        /* lk_method_is_idempotent(method), fixed at creation */
  bool head;              /* the method is "HEAD" (sent with CURLOPT_NOBODY: no body) */
  bool https;             /* the URL's scheme is https */
  unsigned char *body_own; /* copied body, or NULL */
  const unsigned char *body; /* NULL = no body */
  size_t body_len;           /* also a streamed body's declared length */
  lk_http_body_fn stream;    /* streamed body (body is then NULL) */
  void *stream_ctx;
  void *stream_easy;         /* the CURL handle of the attempt reading it */
  void *stream_try;          /* or the native attempt (lk_try) reading it */
  bool stream_paused;        /* that transfer is paused for want of bytes */
  uint64_t stream_read;      /* bytes given by `stream` */
};

void lk__request_ref(lk_http_request *r);
/* A native attempt (lk_try) paused for its streamed body may write again (h1.c). */
void lk__h1_body_ready(void *t);
void lk__request_touch(lk_http_request *r); /* new id after a change */
bool lk__request_in_use(const lk_http_request *r);

/* --- response buffers ---------------------------------------------------------------------- */
typedef struct lk_resp {
  int status;          /* from the status line; 0 = none yet */
  int version;         /* from the status line: 10, 11, 20, 30; 0 = none or unknown */
  char reason[LK_HTTP_REASON_MAX]; /* the status line's reason phrase: kept inline so it moves
                                      with the struct when responses are swapped and settled */
  bool status_seen;    /* a status line arrived during this attempt */
  bool headers_done;   /* the blank line after the final response's headers arrived */
  char *hdr;           /* "name\0value\0" pairs */
  size_t hdr_len, hdr_cap, nhdr;
  char *body;
  size_t body_len, body_cap;
  bool complete;
  bool decoded;          /* body holds the decoded bytes of a Content-Encoding (compressed) */
  size_t wire_len;       /* then: the body's bytes as received, before decoding */
  bool borrowed;         /* hdr, body and views live in the owner's space: not freed here */
  lk_http_header *views; /* built by lk__resp_view() */
  lk_http_response view;
} lk_resp;

void lk__resp_reset(lk_resp *r); /* empties, keeps buffers */
void lk__resp_free(lk_resp *r);
/* Feeds one header line as libcurl delivers it (status line, header, or blank end line).
 * Returns false on no memory. */
bool lk__resp_header_line(lk_resp *r, const char *line, size_t len);
/* A header of a parsed response (name and value without the line's syntax), and a piece of
 * the status line's reason phrase (the caller trims the whole); for transports with a parser
 * of their own. false on no memory. */
bool lk__resp_header(lk_resp *r, const char *name, size_t nl, const char *value, size_t vl);
void lk__resp_reason_add(lk_resp *r, const char *p, size_t len);
/* Appends body bytes; returns false on no memory or when `max` would be exceeded (*too_big). */
bool lk__resp_body(lk_resp *r, const char *data, size_t len, size_t max, bool *too_big);
/* Builds r->view (pointers into r's buffers). Returns false on no memory. */
bool lk__resp_view(lk_resp *r);
/* Builds r->view like lk__resp_view(), but when the response fits in `space` (`cap` bytes,
 * aligned for pointers) copies it there (r becomes borrowed) and gives its heap buffers to
 * `spare` (whose own buffers are freed), so they serve the next attempt instead of being freed
 * with the result. Returns false on no memory. */
bool lk__resp_settle(lk_resp *r, char *space, size_t cap, lk_resp *spare);
/* First header value named `name` (case-insensitive) in the raw buffer, or NULL. */
const char *lk__resp_find(const lk_resp *r, const char *name);
/* Checks the framing of a response libcurl reported complete: LK_F_NONE when it is consistent,
 * LK_F_JUNK_RESPONSE when a Content-Length does not parse, overflows or disagrees with another,
 * LK_F_PARTIAL_BODY when fewer body bytes arrived than it declares (libcurl 7.88 accepts both
 * when the server closes). `head`: the request was HEAD (a length then describes no body). */
lk_failure lk__resp_framing(const lk_resp *r, bool head);
/* Checks the final head of a response as soon as it is in, before any body byte is taken, on
 * both transports: LK_F_JUNK_RESPONSE for a 1xx that is not interim (an unrequested 101), a
 * Content-Length that does not parse, overflows or disagrees with another, or one beside a
 * Transfer-Encoding (a smuggling shape: which framing the sender meant is unknown); otherwise
 * LK_F_NONE, with *too_big set when a declared Content-Length exceeds `max_body`. `head`: the
 * request was HEAD (no body follows, whatever the lengths say). */
lk_failure lk__resp_head_check(const lk_resp *r, bool head, size_t max_body, bool *too_big);

/* --- content decoding (lk_http_policy.compressed) ----------------------------------------- */
typedef struct lk_decoder lk_decoder;
/* A decoder for the final head of `r` (its Content-Encoding): LK_OK with *out NULL when there is
 * nothing to decode (no Content-Encoding, identity), LK_OK with a decoder (r->decoded set) for
 * gzip, x-gzip or deflate, LK_EPARSE for another coding or several stacked, LK_ENOMEM. */
int lk__decoder_new(lk_resp *r, lk_decoder **out);
/* Decodes n bytes of the body as received into r's body (at most `max` bytes: *too_big) and
 * counts them in r->wire_len. LK_OK, LK_EPARSE (corrupt data, a bad checksum, bytes after the
 * stream's end), LK_ETOOBIG or LK_ENOMEM. */
int lk__decoder_write(lk_decoder *d, const char *in, size_t n, lk_resp *r, size_t max,
                      bool *too_big);
/* Whether the compressed stream reached its end (or not one byte of it came: an empty body).
 * NULL: true. */
bool lk__decoder_done(const lk_decoder *d);
void lk__decoder_free(lk_decoder *d); /* NULL is a no-op */

/* --- classification ---------------------------------------------------------------------- */
/* Which of the driver's own timers ended the attempt. */
typedef enum lk_timer_kind {
  LK_TIMER_NONE,
  LK_TIMER_ATTEMPT, /* the attempt timeout (classified by the phase it expired in) */
  LK_TIMER_DNS,
  LK_TIMER_CONNECT,
  LK_TIMER_TLS,
  LK_TIMER_WRITE,
  LK_TIMER_FIRST_BYTE,
  LK_TIMER_IDLE
} lk_timer_kind;

/* Everything known about how an attempt ended. */
typedef struct lk_evidence {
  int curl_code;       /* CURLcode; CURLE_OK when the transfer completed */
  int os_errno;        /* CURLINFO_OS_ERRNO */
  int status;          /* final status, 0 if no status line */
  bool https;
  bool socket_opened;  /* a socket was created (name resolved) */
  bool connected;      /* TCP handshake done (or a reused connection) */
  bool tls_done;       /* TLS handshake done (https) */
  bool prereq;         /* the pre-request callback ran: writing started */
  bool fully_sent;     /* every request byte was handed to the kernel */
  bool got_bytes;      /* any response byte arrived */
  bool complete;       /* the response completed (curl_code OK) */
  bool resend_aborted; /* the driver stopped libcurl's silent re-send */
  bool too_big;        /* the body exceeded the limit */
  bool head_too_big;   /* a response head beyond LK_HTTP_HEAD_MAX (or libcurl's own limit) */
  bool peer_alert;     /* the peer ended TLS with a fatal alert (lk_conn_facts.peer_alert) */
  lk_failure framing;  /* lk__resp_head_check() refused the head, or lk__resp_framing() of a
                          transfer libcurl completed, or the content decoding failed (JUNK) or
                          stopped short (PARTIAL_BODY); NONE otherwise */
  bool cancelled;
  lk_timer_kind timer; /* a driver timer ended it */
} lk_evidence;

/* The phase an attempt reached, from its evidence. */
lk_http_phase lk__phase_of(const lk_evidence *e);
/* The failure kind, from evidence (never from the CURLcode alone). */
lk_failure lk__classify(const lk_evidence *e);

/* --- cancellation ---------------------------------------------------------------------- */
struct lk_http_cancel {
  atomic_bool fired;
  int fd; /* eventfd: readable once fired (never drained, so every loop sees it) */
};

/* --- JSON writer ------------------------------------------------------------------------- */
typedef struct lk_jbuf {
  char *p;
  size_t len, cap;
  bool oom;
} lk_jbuf;
void lk__j_raw(lk_jbuf *j, const char *s, size_t n);
void lk__j_str(lk_jbuf *j, const char *s); /* quoted, escaped; NULL -> null */
void lk__j_fmt(lk_jbuf *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void lk__j_ms(lk_jbuf *j, int64_t ns);     /* ns as ms with 3 decimals */

/* --- results ----------------------------------------------------------------------------- */
struct lk_http_result {
  int err;
  lk_failure failure;
  lk_resp resp;          /* the last real response (status != 0) or empty */
  bool has_resp;
  bool fallback;     /* the fallback produced `resp` */
  lk_http_attempt_info *attempts; /* `first` until a second attempt needs the heap */
  size_t nattempts, cap_attempts;
  bool has_key;
  int original_err;  /* the error a fallback replaced (the fields fill padding: the struct's
                        size, and so malloc's path for it, stays what it was) */
  int64_t elapsed;
  int resends;
  int hedges;
  /* From here on, buffers written before they are read: lk__result_new() leaves them be. */
  lk_http_attempt_info first;
  char stop[96];
  char idem_key[LK_IDEM_KEY_MAX];
  /* a small final response is copied here (lk__resp_settle): no allocation per response; the
   * size keeps the whole struct within glibc's per-thread cache (<= 1032 bytes on LP64) */
  _Alignas(lk_http_header) char inl[256];
};

lk_http_result *lk__result_new(void);
/* Appends a zeroed timeline entry; NULL on no memory. */
lk_http_attempt_info *lk__result_add_attempt(lk_http_result *r);

/* --- policy ------------------------------------------------------------------------------ */
const lk_clock *lk__policy_clock(const lk_http_policy *p);

/* --- protection glue and the decision (src/exec/protect.c) ----------------------------- */
#include "exec/protect.h"

#endif
