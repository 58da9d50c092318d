/* SPDX-License-Identifier: MIT */
/* Attempt classification from evidence. libcurl's code alone is not enough: error 28 covers every
 * phase, 56 means "not sent" or "maybe processed" depending on how far the write got. */
#include "http_internal.h"

#include <errno.h>

lk_http_phase lk__phase_of(const lk_evidence *e) {
  if (e->complete)
    return LK_PHASE_DONE;
  if (e->got_bytes)
    return LK_PHASE_RECEIVE;
  if (e->fully_sent)
    return LK_PHASE_WAIT;
  if (e->prereq)
    return LK_PHASE_SEND;
  if (e->connected)
    return e->https && !e->tls_done ? LK_PHASE_TLS : LK_PHASE_SEND;
  if (e->socket_opened)
    return LK_PHASE_CONNECT;
  return LK_PHASE_DNS;
}

static lk_failure timeout_in(lk_http_phase ph) {
  switch (ph) {
  case LK_PHASE_QUEUED:
    return LK_F_POOL_TIMEOUT;
  case LK_PHASE_DNS:
    return LK_F_DNS_TIMEOUT;
  case LK_PHASE_CONNECT:
    return LK_F_CONNECT_TIMEOUT;
  case LK_PHASE_TLS:
    return LK_F_TLS_TIMEOUT;
  case LK_PHASE_SEND:
    return LK_F_WRITE_TIMEOUT;
  default:
    return LK_F_READ_TIMEOUT;
  }
}

static bool tls_code(int c) {
  switch (c) {
  case CURLE_SSL_CONNECT_ERROR:
  case CURLE_SSL_ENGINE_NOTFOUND:
  case CURLE_SSL_ENGINE_SETFAILED:
  case CURLE_SSL_CERTPROBLEM:
  case CURLE_SSL_CIPHER:
  case CURLE_PEER_FAILED_VERIFICATION:
  case CURLE_SSL_ENGINE_INITFAILED:
  case CURLE_SSL_CACERT_BADFILE:
  case CURLE_SSL_SHUTDOWN_FAILED:
  case CURLE_SSL_CRL_BADFILE:
  case CURLE_SSL_ISSUER_ERROR:
  case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
  case CURLE_SSL_INVALIDCERTSTATUS:
  case CURLE_SSL_CLIENTCERT:
    return true;
  default:
    return false;
  }
}

lk_failure lk__classify(const lk_evidence *e) {
  if (e->cancelled)
    return LK_F_CANCELLED;
  switch (e->timer) {
  case LK_TIMER_DNS:
    return LK_F_DNS_TIMEOUT;
  case LK_TIMER_CONNECT:
    return LK_F_CONNECT_TIMEOUT;
  case LK_TIMER_TLS:
    return LK_F_TLS_TIMEOUT;
  case LK_TIMER_WRITE:
    return LK_F_WRITE_TIMEOUT;
  case LK_TIMER_FIRST_BYTE:
    return LK_F_FIRST_BYTE_TIMEOUT;
  case LK_TIMER_IDLE:
    return LK_F_IDLE_TIMEOUT;
  case LK_TIMER_ATTEMPT:
    return timeout_in(lk__phase_of(e));
  case LK_TIMER_NONE:
    break;
  }
  if (e->resend_aborted)
    return LK_F_RESET_AFTER_SEND; /* the first write may have been processed */
  if (e->too_big)
    return LK_F_TRANSPORT_ERROR;
  if (e->head_too_big)
    return LK_F_JUNK_RESPONSE;
  if (e->framing != LK_F_NONE)
    return e->framing; /* the head's framing was refused (any code), or a completed body's */
  /* A fatal TLS alert before any response byte: the peer refused the session (a TLS 1.3
   * server's verdict on the client's certificate comes after the request was written), so the
   * request was never read; a protocol verdict, which a retry would repeat. */
  if (e->peer_alert && !e->got_bytes && e->curl_code != CURLE_OK)
    return LK_F_TLS_FAILED;
  switch (e->curl_code) {
  case CURLE_OK: return lk_failure_from_status(e->status);
  case CURLE_OPERATION_TIMEDOUT:
    return timeout_in(lk__phase_of(e));
  case CURLE_COULDNT_RESOLVE_HOST:
  case CURLE_COULDNT_RESOLVE_PROXY:
    return LK_F_DNS_FAILED;
  case CURLE_COULDNT_CONNECT:
    if (e->os_errno == ECONNREFUSED)
      return LK_F_CONNECT_REFUSED;
    if (e->os_errno == ETIMEDOUT)
      return LK_F_CONNECT_TIMEOUT;
    return LK_F_CONNECT_FAILED;
  case CURLE_GOT_NOTHING:
    return e->fully_sent ? LK_F_EMPTY_RESPONSE : LK_F_RESET_BEFORE_SEND;
  case CURLE_PARTIAL_FILE:
    return LK_F_PARTIAL_BODY;
  case CURLE_WEIRD_SERVER_REPLY:
  case CURLE_UNSUPPORTED_PROTOCOL:
  case CURLE_BAD_CONTENT_ENCODING:
    return e->fully_sent || e->got_bytes ? LK_F_JUNK_RESPONSE : LK_F_RESET_BEFORE_SEND;
  case CURLE_SEND_ERROR:
    /* a write failed: the request was not fully written */
    if (e->got_bytes)
      return e->status ? LK_F_PARTIAL_BODY : LK_F_JUNK_RESPONSE;
    return LK_F_RESET_BEFORE_SEND;
  case CURLE_RECV_ERROR:
    if (e->got_bytes)
      return e->status ? LK_F_PARTIAL_BODY : LK_F_JUNK_RESPONSE;
    return e->fully_sent ? LK_F_RESET_AFTER_SEND : LK_F_RESET_BEFORE_SEND;
  default:
    break;
  }
  /* (a reset mid-handshake is TLS_FAILED too: CURLINFO_OS_ERRNO is not cleared between
   * transfers of a reused handle, so it cannot tell a reset from a protocol verdict here) */
  if (tls_code(e->curl_code) && !e->prereq)
    return LK_F_TLS_FAILED;
  /* Anything else: if writing never started, the server cannot have seen the request. */
  if (!e->prereq)
    return e->socket_opened ? LK_F_CONNECT_FAILED : LK_F_RESET_BEFORE_SEND;
  if (!e->fully_sent)
    return LK_F_RESET_BEFORE_SEND;
  return LK_F_TRANSPORT_ERROR;
}
