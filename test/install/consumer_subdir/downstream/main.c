/* SPDX-License-Identifier: MIT */
/* Calls the parent's library, which calls liblinkd-core: 5 ns budget, 2 ns elapsed. */
long long linkd_parent_remaining(void);
int main(void) { return linkd_parent_remaining() != 3; }
