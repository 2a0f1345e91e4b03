// SPDX-License-Identifier: GPL-2.0
/* Reading IPv4/IPv6 and TCP headers in place. */
#ifndef MPSTEER_BPF_PACKET_PARSE_H
#define MPSTEER_BPF_PACKET_PARSE_H

#include "../chain.h"

/* skb->data and skb->data_end, each read with one load from the context
 * (the compiler must not derive context pointers the verifier refuses). */
static __always_inline void *ctx_data(struct __sk_buff *skb)
{
	void *p;
	asm volatile("%0 = *(u32 *)(%1 + %2)" : "=r"(p) : "r"(skb), "i"(__builtin_offsetof(struct __sk_buff, data)));
	return p;
}

static __always_inline void *ctx_data_end(struct __sk_buff *skb)
{
	void *p;
	asm volatile("%0 = *(u32 *)(%1 + %2)" : "=r"(p) : "r"(skb), "i"(__builtin_offsetof(struct __sk_buff, data_end)));
	return p;
}

/* header points at n bytes (a constant) at offset off, read in place:
 * headers are in the skb's linear part nearly always at TC; when not,
 * the packet is pulled into it (contents unchanged). 0: too short. */
static __always_inline __u8 *header(struct __sk_buff *skb, __u32 off, __u32 n)
{
	__u8 *p = ctx_data(skb) + off;
	if ((void *)(p + n) <= ctx_data_end(skb))
		return p;
	if (off + n > skb->len || bpf_skb_pull_data(skb, off + n))
		return 0;
	p = ctx_data(skb) + off;
	if ((void *)(p + n) > ctx_data_end(skb))
		return 0;
	return p;
}

/* parse reads IPv4/IPv6 and TCP; anything that is not a well-formed TCP
 * segment is left alone (-1). Packet types and option places are left to
 * the classifiers (NEED_OPTS). */
static __always_inline int parse(struct __sk_buff *skb, struct cx *x)
{
	__u32 l3 = l2len & 0x3f, l4;
	x->l3 = l3;
	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		__u8 *ip = header(skb, l3, 20);
		if (!ip)
			return -1;
		__u32 ihl = (ip[0] & 0xf) * 4;
		if ((ip[0] >> 4) != 4 || ihl < 20 || ip[9] != IPPROTO_TCP)
			return -1;
		if (*(__u16 *)(ip + 6) & bpf_htons(IP_MF | IP_OFFMASK))
			return -1;
		x->iplen = bpf_ntohs(*(__u16 *)(ip + 2));
		if (needs & NEED_ADDRS) {
			x->src[0] = *(__u32 *)(ip + 12);
			x->dst[0] = *(__u32 *)(ip + 16);
			x->src[1] = x->src[2] = x->src[3] = 0;
			x->dst[1] = x->dst[2] = x->dst[3] = 0;
		}
		l4 = l3 + ihl;
		x->v6 = 0;
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		__u8 *ip = header(skb, l3, 40);
		if (!ip)
			return -1;
		if ((ip[0] >> 4) != 6 || ip[6] != IPPROTO_TCP)
			return -1; /* extension headers are not followed */
		x->iplen = bpf_ntohs(*(__u16 *)(ip + 4));
		if (needs & NEED_ADDRS) {
#pragma unroll
			for (int k = 0; k < 4; k++) {
				x->src[k] = *(__u32 *)(ip + 8 + 4 * k);
				x->dst[k] = *(__u32 *)(ip + 24 + 4 * k);
			}
		}
		l4 = l3 + 40;
		x->v6 = 1;
	} else {
		return -1;
	}
	__u8 *th = header(skb, l4, 20);
	if (!th)
		return -1;
	__u32 thlen = (th[12] >> 4) * 4;
	if (thlen < 20 || l4 + thlen > skb->len)
		return -1;
	/* The IP length must cover the TCP header and lie within the frame
	 * (a frame may be longer: Ethernet padding). 0 is BIG TCP's: the
	 * frame's length is the packet's. A packet whose IP header lies about
	 * its length is not a well-formed segment: left alone. */
	if (x->iplen) {
		__u32 end = l3 + x->iplen + (x->v6 ? 40 : 0);
		if (end > skb->len || l4 + thlen > end)
			return -1;
	}
	x->l4 = l4;
	x->thlen = thlen;
	x->flags = th[13];
	x->sport = *(__u16 *)th;
	x->dport = *(__u16 *)(th + 2);
	x->seq = bpf_ntohl(*(__u32 *)(th + 4));
	return 0;
}

#endif
