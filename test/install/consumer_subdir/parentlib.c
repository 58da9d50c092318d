/* SPDX-License-Identifier: MIT */
/* A library of the parent's own on liblinkd-core, installed and exported by the parent. */
#include <linkd/deadline.h>

long long linkd_parent_remaining(void);
long long linkd_parent_remaining(void) {
  return (long long)lk_deadline_remaining(lk_deadline_after(0, 5), 2);
}
