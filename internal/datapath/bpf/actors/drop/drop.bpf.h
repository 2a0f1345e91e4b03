// SPDX-License-Identifier: GPL-2.0
/* drop (README.md). */
#ifndef MPSTEER_BPF_ACT_DROP
#define MPSTEER_BPF_ACT_DROP

#include "../../chain.h"

/* The packet is dropped, and counted. */
static __always_inline int act_drop(struct mpsteer_stats *st)
{
	st->dropped++;
	return TCX_DROP;
}

#endif
