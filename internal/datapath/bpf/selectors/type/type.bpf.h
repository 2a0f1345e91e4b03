// SPDX-License-Identifier: GPL-2.0
/* type: MPTCP packet types (README.md). */
#ifndef MPSTEER_BPF_SEL_TYPE
#define MPSTEER_BPF_SEL_TYPE

#include "../../chain.h"

/* The packet's type bits (set by the option walk) against the selector's
 * mask: any in common. */
static __always_inline int sel_type(const struct cx *x, const volatile __u32 *mask)
{
	return (x->types & *mask) != 0;
}

#endif
