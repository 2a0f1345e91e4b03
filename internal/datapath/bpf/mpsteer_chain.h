/* SPDX-License-Identifier: GPL-2.0 */
/*
 * mpsteer selector-actor chains: the maps and the interface for a user's
 * own actor.
 *
 * A chain is one program (chain.bpf.c), attached to a TC hook (TCX
 * ingress or egress): its built-in selectors and actors are compiled into
 * it. A loaded actor (a separate object) is reached by a tail call through
 * the `mpsteer_steps` program array, with the packet's metadata in
 * skb->cb; it reads its arguments from the chain's descriptor in
 * `mpsteer_chains` and goes back to the chain with mpsteer_next(), which
 * tail-calls the next step (built-in steps: mpsteer_resume, which returns
 * to the chain's program).
 *
 * To write an actor: include this header, write a SEC("tc") program that
 * does its work, then `return mpsteer_next(skb);`. See
 * internal/datapath/bpf/template/.
 */
#ifndef MPSTEER_CHAIN_H
#define MPSTEER_CHAIN_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define MPSTEER_MAX_STEPS 32	/* steps per chain */
#define MPSTEER_MAX_CHAINS 256	/* chain ids */
#define MPSTEER_SLOTS 512	/* descriptors: two per chain, for atomic swaps */
#define MPSTEER_PROGS 64	/* mpsteer_steps: 1 is mpsteer_resume, 32.. loaded actors */
#define MPSTEER_ARGS 48

#define TCX_NEXT -1
#define TCX_PASS 0
#define TCX_DROP 2

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define IPPROTO_TCP 6
#define TCPOPT_NOP 1
#define TCPOPT_EOL 0
#define TCPOPT_MPTCP 30

/* MPTCP option subtypes (RFC 8684). */
#define MPTCP_SUB_CAPABLE 0
#define MPTCP_SUB_JOIN 1
#define MPTCP_SUB_DSS 2
#define MPTCP_SUB_ADD_ADDR 3
#define MPTCP_SUB_REMOVE_ADDR 4
#define MPTCP_SUB_PRIO 5
#define MPTCP_SUB_FAIL 6
#define MPTCP_SUB_FASTCLOSE 7

/* Packet types, as bits (the `type` selector takes a mask). */
#define T_MPC_SYN (1u << 0)
#define T_JOIN_SYN (1u << 1)
#define T_JOIN_SYNACK (1u << 2)
#define T_JOIN_ACK (1u << 3)
#define T_DATA (1u << 4)	/* DSS with a mapping */
#define T_DATA_ACK (1u << 5)	/* DSS with a DATA_ACK and no mapping */
#define T_ADD_ADDR (1u << 6)
#define T_REMOVE_ADDR (1u << 7)
#define T_MP_PRIO (1u << 8)
#define T_MP_FAIL (1u << 9)
#define T_FASTCLOSE (1u << 10)
#define T_FIN (1u << 11)
#define T_RST (1u << 12)
#define T_MPTCP (1u << 13)	/* any MPTCP option */

/* One step of a chain. Selectors jump, always forward: on a match to
 * on_match, otherwise to on_miss; each is a selector further on, the
 * first actor (selected) or STEP_NONE (not selected), as the expression's
 * and, or and not evaluate from left to right. Actors continue with the
 * next step. */
#define STEP_NONE 0xff
#define STEP_NEGATE 0x1

struct mpsteer_step {
	__u16 prog;
	__u8 on_match;
	__u8 on_miss;
	__u8 flags;
	__u8 pad[3];
	__u8 args[MPSTEER_ARGS];
};

struct mpsteer_chain {
	__u32 id;
	__u32 n;
	__u32 first_actor;
	__u32 l2len;	/* bytes before the IP header on this device */
	struct mpsteer_step steps[MPSTEER_MAX_STEPS];
};

/* Counters of a chain (per CPU, summed by the loader). */
struct mpsteer_stats {
	__u64 seen;
	__u64 selected;
	__u64 bytes;
	__u64 modified;
	__u64 dropped;
	__u64 skipped;	/* an actor could not act (no room, no socket, …) */
	__u64 errors;
	__u64 first_ns;	/* ktime of the first packet seen (CLOCK_MONOTONIC) */
};

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, MPSTEER_PROGS);
	__type(key, __u32);
	__type(value, __u32);
} mpsteer_steps SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MPSTEER_SLOTS);
	__type(key, __u32);
	__type(value, struct mpsteer_chain);
} mpsteer_chains SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MPSTEER_MAX_CHAINS);
	__type(key, __u32);
	__type(value, struct mpsteer_stats);
} mpsteer_stats SEC(".maps");

/* Per-step packet counters (the count actor), by slot·steps + step. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MPSTEER_SLOTS * MPSTEER_MAX_STEPS);
	__type(key, __u32);
	__type(value, __u64[2]);
} mpsteer_step_count SEC(".maps");

/*
 * The packet's metadata in skb->cb, set by the chain before it calls a loaded actor:
 *   cb[0]: descriptor slot (bits 0-15), current step (bits 16-23)
 *   cb[1]: l3 offset (0-7), l4 offset (8-15), IPv6 (16), tcp header length (24-31, in bytes / 4)
 *   cb[2]: packet type bits (T_*)
 *   cb[3], cb[4]: free for actors (small shared data)
 */
struct pkt {
	__u32 slot, step;
	__u32 l3, l4, v6, thlen;
	__u32 types;
};

static __always_inline void pkt_load(struct __sk_buff *skb, struct pkt *p)
{
	__u32 a = skb->cb[0], b = skb->cb[1];
	p->slot = a & 0xffff;
	p->step = (a >> 16) & 0xff;
	p->l3 = b & 0xff;
	p->l4 = (b >> 8) & 0xff;
	p->v6 = (b >> 16) & 1;
	p->thlen = ((b >> 24) & 0xf) * 4;
	p->types = skb->cb[2];
}

static __always_inline struct mpsteer_chain *chain_of(__u32 slot)
{
	return bpf_map_lookup_elem(&mpsteer_chains, &slot);
}

static __always_inline struct mpsteer_stats *stats_of(__u32 id)
{
	return bpf_map_lookup_elem(&mpsteer_stats, &id);
}

/* Jump to step `next` of the chain in slot `slot` (tail call). */
static __always_inline int mpsteer_goto(struct __sk_buff *skb, struct mpsteer_chain *c, __u32 slot, __u32 next)
{
	if (next >= c->n || next >= MPSTEER_MAX_STEPS)
		return TCX_NEXT; /* end of the chain: the packet goes on */
	if (next == c->first_actor) {
		struct mpsteer_stats *st = stats_of(c->id);
		if (st) {
			st->selected++;
			st->bytes += skb->len;
		}
	}
	skb->cb[0] = (slot & 0xffff) | (next << 16);
	__u32 prog = c->steps[next].prog;
	bpf_tail_call(skb, &mpsteer_steps, prog);
	return TCX_NEXT; /* the step is not loaded: leave the packet alone */
}

/* Continue after an actor: the next step. */
static __always_inline int mpsteer_next(struct __sk_buff *skb)
{
	struct pkt p;
	pkt_load(skb, &p);
	struct mpsteer_chain *c = chain_of(p.slot);
	if (!c)
		return TCX_NEXT;
	return mpsteer_goto(skb, c, p.slot, p.step + 1);
}

/* Finish a selector with its verdict. */
static __always_inline int mpsteer_selected(struct __sk_buff *skb, struct pkt *p, struct mpsteer_chain *c, int match)
{
	if (p->step >= MPSTEER_MAX_STEPS)
		return TCX_NEXT;
	struct mpsteer_step *s = &c->steps[p->step];
	if (s->flags & STEP_NEGATE)
		match = !match;
	__u32 next = match ? s->on_match : s->on_miss;
	if (next == STEP_NONE)
		return TCX_NEXT;
	return mpsteer_goto(skb, c, p->slot, next);
}

/* The current step's descriptor and arguments. */
static __always_inline struct mpsteer_step *mpsteer_this(struct __sk_buff *skb, struct pkt *p, struct mpsteer_chain **cp)
{
	pkt_load(skb, p);
	struct mpsteer_chain *c = chain_of(p->slot);
	if (!c || p->step >= MPSTEER_MAX_STEPS)
		return 0;
	*cp = c;
	return &c->steps[p->step];
}

static __always_inline void mpsteer_count(struct mpsteer_chain *c, __u32 field)
{
	struct mpsteer_stats *st = stats_of(c->id);
	if (!st)
		return;
	switch (field) {
	case 0:
		st->modified++;
		break;
	case 1:
		st->dropped++;
		break;
	case 2:
		st->skipped++;
		break;
	default:
		st->errors++;
	}
}

#endif
