/* SPDX-License-Identifier: MIT */
#include <linkd/error.h>
#include <linkd/event.h>

#include <string.h>

static const char *const type_names[] = {
#define N_(name) #name,
    LK_EVENT_MAP(N_)
#undef N_
};

const char *lk_event_type_name(lk_event_type t) {
  return (unsigned)t < LK_EV__COUNT ? type_names[t] : "UNKNOWN";
}

const char *lk_event_wait_name(lk_event_wait w) {
  switch (w) {
  case LK_EV_WAIT_BULKHEAD: return "BULKHEAD";
  case LK_EV_WAIT_LIMITER: return "LIMITER";
  case LK_EV_WAIT_BREAKER: return "BREAKER";
  }
  return "UNKNOWN";
}

/* Lower-case hex only: the spec says upper case must not be accepted (it would be a different
 * trace id to a case-sensitive peer). */
static int hexval(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  return -1;
}

static bool parse_hex(const char *s, uint8_t *out, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return false;
    out[i] = (uint8_t)(hi << 4 | lo);
  }
  return true;
}

static bool all_zero(const uint8_t *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (b[i])
      return false;
  return true;
}

static bool is_blank(char c) { return c == ' ' || c == '\t'; }

int lk_traceparent_parse(const char *s, size_t len, lk_traceparent *out) {
  if (!s || !out)
    return LK_EINVAL;
  while (len && is_blank(*s))
    s++, len--;
  while (len && is_blank(s[len - 1]))
    len--;
  if (len < LK_TRACEPARENT_LEN)
    return LK_EPARSE;
  lk_traceparent tp;
  if (!parse_hex(s, &tp.version, 1) || tp.version == 0xff || s[2] != '-' ||
      !parse_hex(s + 3, tp.trace_id, 16) || s[35] != '-' || !parse_hex(s + 36, tp.parent_id, 8) ||
      s[52] != '-' || !parse_hex(s + 53, &tp.flags, 1))
    return LK_EPARSE;
  /* Version 00 has exactly this length; a later version may append "-..." fields we skip. */
  if (len > LK_TRACEPARENT_LEN && (tp.version == 0 || s[LK_TRACEPARENT_LEN] != '-'))
    return LK_EPARSE;
  if (all_zero(tp.trace_id, 16) || all_zero(tp.parent_id, 8))
    return LK_EPARSE;
  *out = tp;
  return LK_OK;
}

static char *put_hex(char *p, const uint8_t *b, size_t n) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    *p++ = digits[b[i] >> 4];
    *p++ = digits[b[i] & 15];
  }
  return p;
}

int lk_traceparent_format(const lk_traceparent *tp, char *buf, size_t cap) {
  if (!tp || !buf)
    return LK_EINVAL;
  if (cap < LK_TRACEPARENT_LEN + 1) {
    if (cap > 0)
      buf[0] = '\0';
    return LK_ERANGE;
  }
  char *p = buf;
  *p++ = '0';
  *p++ = '0';
  *p++ = '-';
  p = put_hex(p, tp->trace_id, 16);
  *p++ = '-';
  p = put_hex(p, tp->parent_id, 8);
  *p++ = '-';
  p = put_hex(p, &tp->flags, 1);
  *p = '\0';
  return LK_TRACEPARENT_LEN;
}

/* Random non-zero bytes: a zero id is invalid, so a draw of all zeros is redrawn (once in 2^64
 * for a span id; bounded so a broken generator cannot loop forever). */
static int random_id(lk_rand *rng, uint8_t *out, size_t n) {
  for (int tries = 0; tries < 8; tries++) {
    for (size_t i = 0; i < n; i += 8) {
      uint64_t v = lk_rand_next64(rng);
      for (size_t j = 0; j < 8 && i + j < n; j++)
        out[i + j] = (uint8_t)(v >> (8 * j));
    }
    if (!all_zero(out, n))
      return LK_OK;
  }
  return LK_ESYS;
}

int lk_traceparent_child(const lk_traceparent *parent, lk_rand *rng, lk_traceparent *out) {
  if (!parent || !rng || !out)
    return LK_EINVAL;
  lk_traceparent tp = *parent;
  tp.version = 0;
  int rc = random_id(rng, tp.parent_id, sizeof tp.parent_id);
  if (rc != LK_OK)
    return rc;
  *out = tp;
  return LK_OK;
}

int lk_traceparent_new(lk_rand *rng, uint8_t flags, lk_traceparent *out) {
  if (!rng || !out)
    return LK_EINVAL;
  lk_traceparent tp;
  memset(&tp, 0, sizeof tp);
  tp.flags = flags;
  int rc = random_id(rng, tp.trace_id, sizeof tp.trace_id);
  if (rc == LK_OK)
    rc = random_id(rng, tp.parent_id, sizeof tp.parent_id);
  if (rc != LK_OK)
    return rc;
  *out = tp;
  return LK_OK;
}
