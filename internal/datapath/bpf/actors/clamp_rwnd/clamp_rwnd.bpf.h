// SPDX-License-Identifier: GPL-2.0
/* clamp_rwnd: the receive window a subflow's sender may fill (README.md). */
#ifndef MPSTEER_BPF_ACT_CLAMP_RWND
#define MPSTEER_BPF_ACT_CLAMP_RWND

#include "../../packet/parse.h"
#include "../../packet/socket.h"

/* clamp_rwnd: lower the receive window advertised in the packet so that
 * the sender of the packet's subflow can have at most `window` bytes (or
 * rate × SRTT) in flight. Aware of window scaling; never on SYNs. */
struct clamp_args {
	__u64 rate;   /* bytes per second; 0: use window */
	__u32 window; /* bytes */
	__u32 egress;
};

/* Weak: see bpf_rdonly_cast (packet/socket.h). */
extern void *bpf_cast_to_kern_ctx(void *obj) __ksym __weak;

#define CHECKSUM_PARTIAL 3

/* no_kfuncs (a constant): the kernel has neither bpf_cast_to_kern_ctx nor
 * bpf_rdonly_cast (before 6.2). */
static __always_inline int clamp_rwnd(struct __sk_buff *skb, struct cx *x, __u64 rate, __u32 window, __u32 egress,
				      const int no_kfuncs)
{
	/* flags, window and checksum, read from the packet (an earlier step
	 * may have changed them) */
	__u8 *th = header(skb, (x->l4 & 0xff) + 12, 6);
	if (!th)
		return A_SKIPPED;
	if (th[1] & TCP_SYN)
		return 0; /* SYN windows are not scaled: never touched */
	__u16 old = (__u16)th[2] << 8 | th[3];
	__u16 oldw = *(__u16 *)(th + 2), oldc = *(__u16 *)(th + 4); /* as in the packet */
	const struct sock_info *si = sock_info(skb, x, egress, no_kfuncs);
	if (!si || !si->tcp)
		return A_SKIPPED;
	__u32 wscale = si->wscale & 0xf;
	__u64 want = window;
	if (rate) {
		if (!si->srtt_us)
			return A_SKIPPED;
		want = rate * si->srtt_us / 1000000;
		if (want < 1448)
			want = 1448;
	}
	__u64 scaled = (want + (1u << wscale) - 1) >> wscale;
	if (scaled == 0)
		scaled = 1;
	if (scaled >= old)
		return 0; /* only ever lower it */
	if (no_kfuncs) {
		/* Without the kernel's skb: the window, then its checksum by
		 * the kernel's helper (right for every skb->ip_summed). */
		__u16 nw = bpf_htons((__u16)scaled);
		if (bpf_skb_store_bytes(skb, x->l4 + 14, &nw, 2, 0))
			return A_SKIPPED;
		if (bpf_l4_csum_replace(skb, x->l4 + 16, oldw, nw, 2))
			return A_ERROR | A_DROPPED | A_DROP; /* half-rewritten: never let it go */
		return A_MODIFIED;
	}
	/* The window and its checksum in one store (one helper call, which
	 * makes only these bytes writable; a write in place would make the
	 * verifier unclone every packet the chain sees). The checksum as the
	 * kernel's bpf_l4_csum_replace would leave it: with CHECKSUM_PARTIAL
	 * the field holds only the pseudo-header's sum and the window is
	 * summed later, so it stays; otherwise RFC 1624's update, which also
	 * keeps the segment's sum (a CHECKSUM_COMPLETE skb->csum) as it was. */
	struct sk_buff *kskb = bpf_cast_to_kern_ctx(skb);
	__u16 w[2];
	w[0] = bpf_htons((__u16)scaled);
	w[1] = oldc;
	__u32 n = 2;
	if (BPF_CORE_READ_BITFIELD(kskb, ip_summed) != CHECKSUM_PARTIAL) {
		__u32 sum = (__u16)~oldc + (__u16)~oldw + w[0];
		sum = (sum & 0xffff) + (sum >> 16);
		sum = (sum & 0xffff) + (sum >> 16);
		w[1] = ~sum;
		n = 4;
	}
	if (bpf_skb_store_bytes(skb, x->l4 + 14, w, n, 0))
		return A_SKIPPED;
	return A_MODIFIED;
}

/* The big actors are global functions: the verifier checks each once per
 * chain that uses it, whatever the number of steps that call it. They
 * count what they did; nonzero: drop the packet. */
__noinline int mpsteer_clamp(struct __sk_buff *skb, struct cx *x, struct mpsteer_stats *st, __u64 rate, __u32 window)
{
	if (!x)
		return 0;
	return account(st, clamp_rwnd(skb, x, rate, window & ~CLAMP_EGRESS, (window & CLAMP_EGRESS) != 0, 0));
}

/* mpsteer_clamp for a kernel without the kfuncs of 6.2. */
__noinline int mpsteer_clamp_no_kfuncs(struct __sk_buff *skb, struct cx *x, struct mpsteer_stats *st, __u64 rate, __u32 window)
{
	if (!x)
		return 0;
	return account(st, clamp_rwnd(skb, x, rate, window & ~CLAMP_EGRESS, (window & CLAMP_EGRESS) != 0, 1));
}

#endif
