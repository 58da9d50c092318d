/* SPDX-License-Identifier: MIT */
#include <linkd/error.h>
#include <linkd/failure.h>

#include <ctype.h>

static const char *const names[] = {
#define N_(name, seed, cls) #name,
    LK_FAILURE_MAP(N_)
#undef N_
};

static const unsigned char seed_kinds[] = {
#define S_(name, seed, cls) LK_F_##seed,
    LK_FAILURE_MAP(S_)
#undef S_
};

static const unsigned char classes[] = {
#define C_(name, seed, cls) LK_FC_##cls,
    LK_FAILURE_MAP(C_)
#undef C_
};

_Static_assert(LK_F__COUNT <= 64, "failure kinds must fit a 64-bit mask");

const char *lk_failure_name(lk_failure kind) {
  return (unsigned)kind < LK_F__COUNT ? names[kind] : "UNKNOWN";
}

lk_failure lk_failure_seed_kind(lk_failure kind) {
  return (unsigned)kind < LK_F__COUNT ? (lk_failure)seed_kinds[kind] : LK_F_NONE;
}

lk_failure_class lk_failure_class_of(lk_failure kind) {
  return (unsigned)kind < LK_F__COUNT ? (lk_failure_class)classes[kind] : LK_FC_TERMINAL;
}

int lk_failure_from_name(const char *name, lk_failure *out) {
  if (!name || !out)
    return LK_EINVAL;
  for (int k = 0; k < LK_F__COUNT; k++) {
    const char *a = names[k], *b = name;
    while (*a && *b) {
      char c = *b == '-' ? '_' : (char)toupper((unsigned char)*b);
      if (c != *a)
        break;
      a++, b++;
    }
    if (!*a && !*b) {
      *out = (lk_failure)k;
      return LK_OK;
    }
  }
  return LK_EINVAL;
}

lk_failure lk_failure_from_status(int status) {
  if (status < 100 || status > 599)
    return LK_F_JUNK_RESPONSE;
  switch (status) {
  case 408: return LK_F_HTTP_408;
  case 425: return LK_F_HTTP_425;
  case 429: return LK_F_TOO_MANY_REQUESTS;
  case 500: return LK_F_HTTP_500;
  case 502: return LK_F_HTTP_502;
  case 503: return LK_F_HTTP_503;
  case 504: return LK_F_HTTP_504;
  default: break;
  }
  if (status >= 500)
    return LK_F_SERVER_5XX;
  if (status >= 400)
    return LK_F_CLIENT_4XX;
  return LK_F_NONE;
}

/* ASCII case-insensitive equality against an upper-case literal, no locale. */
static bool eq_upper(const char *s, const char *upper) {
  for (; *upper; s++, upper++) {
    char c = *s;
    if (c >= 'a' && c <= 'z')
      c = (char)(c - 'a' + 'A');
    if (c != *upper)
      return false;
  }
  return *s == '\0';
}

bool lk_method_is_safe(const char *m) {
  if (!m)
    return false;
  switch (*m | 0x20) {
  case 'g': return eq_upper(m, "GET");
  case 'h': return eq_upper(m, "HEAD");
  case 'o': return eq_upper(m, "OPTIONS");
  case 't': return eq_upper(m, "TRACE");
  default: return false;
  }
}

bool lk_method_is_idempotent(const char *m) {
  if (!m)
    return false;
  switch (*m | 0x20) {
  case 'p': return eq_upper(m, "PUT");
  case 'd': return eq_upper(m, "DELETE");
  default: return lk_method_is_safe(m);
  }
}
