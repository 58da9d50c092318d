/* SPDX-License-Identifier: MIT */
/* The parent project's style, not linkd's: an old-style definition without a prototype. linkd's
 * flags (-Wstrict-prototypes -Wmissing-prototypes -Werror) would refuse it. */
int linkd_parent_helper();
int linkd_parent_helper() { return 0; }
