/* SPDX-License-Identifier: MIT */
#include <linkd/error.h>
#include <linkd/version.h>

const char *lk_strerror(int err) {
  switch (err) {
#define LK_ERR_MSG_(name, num, msg)                                                               \
  case num:                                                                                      \
    return msg;
    LK_ERRNO_MAP(LK_ERR_MSG_)
#undef LK_ERR_MSG_
  }
  return "unknown error";
}

const char *lk_err_name(int err) {
  switch (err) {
#define LK_ERR_NAME_(name, num, msg)                                                              \
  case num:                                                                                      \
    return #name;
    LK_ERRNO_MAP(LK_ERR_NAME_)
#undef LK_ERR_NAME_
  }
  return "UNKNOWN";
}

const char *lk_version(void) { return LK_VERSION_STRING; }
unsigned lk_version_hex(void) { return LK_VERSION_HEX; }
