// SPDX-License-Identifier: GPL-2.0
/* tuple, pair, src and dst: address and port selectors (README.md). */
#ifndef MPSTEER_BPF_SEL_MATCH
#define MPSTEER_BPF_SEL_MATCH

#include "../../chain.h"

/* tuple, pair, src and dst: the loader turns each into a mask and a value
 * for the words of the addresses and ports (in the packet's byte order);
 * words with a zero mask are not looked at (the verifier drops them). */
struct match_args {
	__u8 v6;
	__u8 pad[3];
	__u32 mask[9], val[9];
};

static __always_inline int sel_match(const struct cx *x, const volatile struct match_args *t)
{
	if (t->v6 != x->v6)
		return 0;
#pragma unroll
	for (int k = 0; k < 9; k++) {
		if (t->mask[k] && (x->w[k] & t->mask[k]) != t->val[k])
			return 0;
	}
	return 1;
}

#endif
