// SPDX-License-Identifier: GPL-2.0
/* mark: the skb's mark and tc classid (README.md). */
#ifndef MPSTEER_BPF_ACT_MARK
#define MPSTEER_BPF_ACT_MARK

#include "../../chain.h"


struct mark_args {
	__u32 mark, priority;
	__u8 set_mark, set_priority;
};

static __always_inline void act_mark(struct __sk_buff *skb, const volatile struct mark_args *a)
{
	if (a->set_mark)
		skb->mark = a->mark;
	if (a->set_priority)
		skb->priority = a->priority; /* a tc classid: HTB classifies by it */
}

#endif
