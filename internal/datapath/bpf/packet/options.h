// SPDX-License-Identifier: GPL-2.0
/* The TCP option walk: packet types and where the first DSS and ADD_ADDR
 * are, for the chains that need them. */
#ifndef MPSTEER_BPF_PACKET_OPTIONS_H
#define MPSTEER_BPF_PACKET_OPTIONS_H

#include "parse.h"

/* byte_at reads buf[i] for a 64-byte stack buffer; the barrier keeps the
 * compiler from dropping the mask the verifier needs to bound the read. */
static __always_inline __u8 byte_at(const __u8 *buf, __u32 i)
{
	barrier_var(i);
	i &= 0x3f;
	return buf[i];
}

struct walk {
	__u8 opt[64];
	__u32 i, olen, types, locs;
	__u8 syn, ack;
};

/* walk_step handles the option at w->i; nonzero: the walk is over. */
static __always_inline long walk_step(struct walk *w)
{
	__u32 i = w->i;
	if (i >= w->olen || i >= 40)
		return 1;
	__u8 kind = byte_at(w->opt, i);
	if (kind == TCPOPT_EOL)
		return 1;
	if (kind == TCPOPT_NOP) {
		w->i = i + 1;
		return 0;
	}
	if (i + 1 >= w->olen)
		return 1;
	__u8 len = byte_at(w->opt, i + 1);
	if (len < 2 || i + len > w->olen)
		return 1;
	w->i = i + len;
	if (kind != TCPOPT_MPTCP || len < 3)
		return 0;
	__u8 sub = byte_at(w->opt, i + 2) >> 4;
	w->types |= T_MPTCP;
	switch (sub) {
	case MPTCP_SUB_CAPABLE:
		if (w->syn && !w->ack)
			w->types |= T_MPC_SYN;
		break;
	case MPTCP_SUB_JOIN:
		if (w->syn && !w->ack)
			w->types |= T_JOIN_SYN;
		else if (w->syn && w->ack)
			w->types |= T_JOIN_SYNACK;
		else if (w->ack)
			w->types |= T_JOIN_ACK;
		break;
	case MPTCP_SUB_DSS:
		if ((w->locs & 0xff) == 0xff)
			w->locs = (w->locs & 0xffff0000) | i | ((__u32)len << 8);
		if (len >= 4) {
			__u8 f = byte_at(w->opt, i + 3);
			if (f & 0x04)
				w->types |= T_DATA;
			else if (f & 0x01)
				w->types |= T_DATA_ACK;
		}
		break;
	case MPTCP_SUB_ADD_ADDR:
		w->types |= T_ADD_ADDR;
		if (((w->locs >> 16) & 0xff) == 0xff)
			w->locs = (w->locs & 0xffff) | (i << 16) | ((__u32)len << 24);
		break;
	case MPTCP_SUB_REMOVE_ADDR:
		w->types |= T_REMOVE_ADDR;
		break;
	case MPTCP_SUB_PRIO:
		w->types |= T_MP_PRIO;
		break;
	case MPTCP_SUB_FAIL:
		w->types |= T_MP_FAIL;
		break;
	case MPTCP_SUB_FASTCLOSE:
		w->types |= T_FASTCLOSE;
		break;
	}
	return 0;
}

/* walk_one: walk_step as a bpf_loop callback (the verifier checks it once
 * instead of once per iteration and path). */
static long walk_one(__u32 n, void *ctx)
{
	return walk_step(ctx);
}

/* mpsteer_classify walks the TCP options once, sets the packet type bits
 * and records where the first DSS and ADD_ADDR options are (offset from
 * the options' start and length, a byte each; 0xff: none), so that steps
 * need no loops of their own. Only chains that need it pay for it. */
__noinline int mpsteer_classify(struct __sk_buff *skb, struct cx *x)
{
	if (!x)
		return 0;
	struct walk w; /* opt is read only up to olen */
	/* zeroed: before 6.8 a helper that fills a variable length of stack
	 * wants all of it initialized first */
	__builtin_memset(w.opt, 0, 40);
	__u8 flags = x->flags;
	w.i = w.olen = w.types = 0;
	w.locs = 0xffffffff;
	w.syn = (flags & TCP_SYN) != 0;
	w.ack = (flags & TCP_ACK) != 0;
	if (flags & TCP_FIN)
		w.types |= T_FIN;
	if (flags & TCP_RST)
		w.types |= T_RST;
	/* thlen 20 (no options) wraps to 64, refused with the lengths over 40 */
	__u64 olen = size_upto(x->thlen - 20, 0x3f);
	if (olen <= 40 && bpf_skb_load_bytes(skb, x->l4 + 20, w.opt, olen) == 0) {
		w.olen = olen;
		/* Linux's own layout starts with NOP NOP timestamps: skip it;
		 * the next option (often the only MPTCP one, a DSS) without a
		 * loop, then the rest in one. */
		if (olen >= 12 && w.opt[0] == TCPOPT_NOP && w.opt[1] == TCPOPT_NOP && w.opt[2] == 8 && w.opt[3] == 10)
			w.i = 12;
		if (!walk_step(&w) && w.i < olen)
			bpf_loop(40, walk_one, &w, 0);
	}
	x->types = w.types;
	x->locs = w.locs;
	return 0;
}

/* classify_fast handles, in place and without a loop, the layout nearly
 * every MPTCP segment has: an optional NOP NOP timestamps, then one DSS
 * that ends the options. 0: done; -1: walk (mpsteer_classify). */
static __always_inline int classify_fast(struct __sk_buff *skb, struct cx *x)
{
	__u8 flags = x->flags;
	__u32 olen = x->thlen - 20;
	if (flags & (TCP_SYN | TCP_FIN | TCP_RST))
		return -1;
	if (olen == 0) {
		x->types = 0;
		x->locs = 0xffffffff;
		return 0;
	}
	__u8 *p = ctx_data(skb) + (x->l4 & 0xff) + 20, *end = ctx_data_end(skb);
	if ((void *)(p + 16) > (void *)end)
		return -1;
	__u32 i = 0;
	if (p[0] == TCPOPT_NOP && p[1] == TCPOPT_NOP && p[2] == 8 && p[3] == 10)
		i = 12;
	__u8 *o = p + i;
	__u32 len = o[1];
	if (o[0] != TCPOPT_MPTCP || (o[2] >> 4) != MPTCP_SUB_DSS || len < 4 || i + len != olen)
		return -1;
	__u8 f = o[3];
	x->types = T_MPTCP | ((f & 0x04) ? T_DATA : (f & 0x01) ? T_DATA_ACK : 0);
	x->locs = 0xffff0000 | i | (len << 8);
	return 0;
}

#endif
