// SPDX-License-Identifier: GPL-2.0
/* count: per-step packet and byte counters (README.md). */
#ifndef MPSTEER_BPF_ACT_COUNT
#define MPSTEER_BPF_ACT_COUNT

#include "../../chain.h"

/* Step `step`'s counters, in the chain's descriptor slot (each version
 * of a chain counts from zero, see Manager.Replace). */
static __always_inline void act_count(struct __sk_buff *skb, __u32 step)
{
	__u32 key = chain_slot * MPSTEER_MAX_STEPS + step;
	__u64 *v = bpf_map_lookup_elem(&mpsteer_step_count, &key);
	if (v) {
		v[0]++;
		v[1] += skb->len;
	}
}

#endif
