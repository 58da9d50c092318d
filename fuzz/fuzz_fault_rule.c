/* SPDX-License-Identifier: MIT */
/* libFuzzer: libraryd's fault rule parser (--fault and the admin endpoint). Accepted rules are in
 * range and parse again, from the text they keep, to the same rule; refused ones carry a message.
 */
#include "fault.h"

#include <linkd/error.h>

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s)
    return 0;
  memcpy(s, data, size);
  s[size] = '\0';
  static lk_fault_rule r, again;
  char err[256] = "";
  int rc = lk_fault_rule_parse(s, &r, err, sizeof err);
  if (rc == LK_OK) {
    if (!(r.p >= 0.0 && r.p <= 1.0) || r.count < -1 || r.skip < 0 ||
        r.act.kind < LK_FAULT_NONE || r.act.kind >= LK_FAULT__COUNT ||
        !memchr(r.route, '\0', sizeof r.route) || strcmp(r.spec, s) != 0)
      abort();
    if (r.act.kind == LK_FAULT_STATUS && r.act.status != 0 &&
        (r.act.status < 400 || r.act.status > 599))
      abort();
    if (r.act.kind == LK_FAULT_SLOWDOWN && !(r.act.factor >= 1.0))
      abort();
    if (lk_fault_rule_parse(r.spec, &again, NULL, 0) != LK_OK || memcmp(&r, &again, sizeof r))
      abort();
  } else if (rc != LK_EPARSE || err[0] == '\0') {
    abort();
  }
  free(s);
  return 0;
}
