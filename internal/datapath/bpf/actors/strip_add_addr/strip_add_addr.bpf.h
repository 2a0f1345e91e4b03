// SPDX-License-Identifier: GPL-2.0
/* strip_add_addr: ADD_ADDR options withheld, and put back when released
 * (README.md). */
#ifndef MPSTEER_BPF_ACT_STRIP_ADD_ADDR
#define MPSTEER_BPF_ACT_STRIP_ADD_ADDR

#include "../../packet/insert.h"

/* ADD_ADDR options withheld by strip_add_addr. */
struct withheld_key {
	__u32 chain;
	__u32 addr_id;
	__u32 saddr[4], daddr[4];
	__u16 sport, dport;
	__u32 v6;
};

struct withheld_val {
	/* When it was kept: CLOCK_MONOTONIC to the jiffy (the coarse clock
	 * costs 2 ns, the exact one 24: `mpsteer bench datapath`, helpers). */
	__u64 ns;
	__u32 len;
	__u32 release; /* set by userspace: put it back into the next packet */
	__u8 opt[32];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct withheld_key);
	__type(value, struct withheld_val);
} mpsteer_withheld SEC(".maps");

/* Chains with ADD_ADDR options marked for release: only their packets
 * pay for looking the options up. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MPSTEER_MAX_CHAINS);
	__type(key, __u32);
	__type(value, __u32);
} mpsteer_release_pending SEC(".maps");

/* strip_add_addr: withhold ADD_ADDR options and keep them, so they can
 * be put back later (`mpsteer chain release`). A kept option marked for
 * release goes back into the next packet of its subflow (its HMAC does
 * not depend on the packet). */
static __always_inline int release_one(struct __sk_buff *skb, struct cx *x, struct withheld_key *k)
{
	struct withheld_val *w = 0;
	__u32 id;
	for (id = 0; id < 8; id++) {
		k->addr_id = id;
		w = bpf_map_lookup_elem(&mpsteer_withheld, k);
		if (w && w->release == 1)
			break;
		w = 0;
	}
	if (!w)
		return 0;
	__u8 buf[32];
	__builtin_memcpy(buf, w->opt, 32);
	__u32 n = w->len;
	if (n > 30 || n < 8)
		return 0;
	/* NOPs up to a multiple of 4 (at most 3); zeros after */
	__u32 padded = (n + 3) & 0x3c;
	if (n < padded)
		buf[n & 0x1f] = TCPOPT_NOP;
	if (n + 1 < padded)
		buf[(n + 1) & 0x1f] = TCPOPT_NOP;
	if (n + 2 < padded)
		buf[(n + 2) & 0x1f] = TCPOPT_NOP;
	int err = insert_opt(skb, x, buf, padded, 0);
	if (err == -1)
		return -1; /* no room in this one: the next packet */
	if (err)
		return err;
	w->release = 2;
	return 1;
}

/* The withheld options' key for this packet's subflow. */
static __always_inline void withheld_key_of(struct cx *x, struct withheld_key *k)
{
	__builtin_memset(k, 0, sizeof(*k));
	k->chain = chain_id;
	k->v6 = x->v6;
	__builtin_memcpy(k->saddr, x->src, 16);
	__builtin_memcpy(k->daddr, x->dst, 16);
	k->sport = x->sport;
	k->dport = x->dport;
}

/* A packet without ADD_ADDR of a chain with options marked for release. */
static __always_inline int release_add_addr(struct __sk_buff *skb, struct cx *x)
{
	/* Any segment of the subflow can carry it back: the stack parses
	 * MPTCP options on every one (pure ACKs often carry none). */
	if (x->types & (T_FIN | T_RST))
		return 0;
	struct withheld_key k;
	withheld_key_of(x, &k);
	int r = release_one(skb, x, &k);
	if (r <= -2)
		return A_ERROR | A_DROPPED | A_DROP; /* half-rewritten: never let it go */
	if (r > 0)
		return A_MODIFIED;
	if (r == -1)
		return A_SKIPPED; /* no room: the next packet */
	return 0;
}

/* A packet with ADD_ADDR: withhold it. */
static __always_inline int strip_add_addr(struct __sk_buff *skb, struct cx *x)
{
	struct withheld_key k;
	withheld_key_of(x, &k);
	__u32 at = (x->locs >> 16) & 0xff, len = (x->locs >> 24) & 0x1f;
	if (at == 0xff || len < 8 || len > 30)
		return 0;
	__u32 i = at & 0x3f;
	__u8 opt[32] = {};
	if (bpf_skb_load_bytes(skb, x->l4 + 20 + i, opt, len))
		return A_SKIPPED;
	k.addr_id = opt[3];
	struct withheld_val *old = bpf_map_lookup_elem(&mpsteer_withheld, &k);
	if (old && old->release)
		return 0; /* released: it may pass */
	if (old) {
		/* withheld before (the peer repeats an ADD_ADDR until it is
		 * echoed): the latest copy, in place */
		old->ns = bpf_ktime_get_coarse_ns();
		old->len = len;
		__builtin_memcpy(old->opt, opt, 32);
	} else {
		struct withheld_val w = {};
		w.ns = bpf_ktime_get_coarse_ns();
		w.len = len;
		__builtin_memcpy(w.opt, opt, 32);
		bpf_map_update_elem(&mpsteer_withheld, &k, &w, BPF_ANY);
	}
	/* A packet with no DSS is the kernel's pure ACK made for the
	 * announcement (it leaves the DSS out to make room). Dropping it is
	 * harmless, the next ACK says the same, while a copy with the option
	 * blanked would be a packet without any MPTCP option: on a connection
	 * that is not yet fully established the peer then falls back to plain
	 * TCP. */
	if (!(x->types & (T_DATA | T_DATA_ACK)))
		return A_MODIFIED | A_DROP;
	/* Otherwise NOPs over a 4-byte aligned span of the header (checksum
	 * words start at even offsets); the checksum is fixed by the
	 * difference. */
	__u32 start = (20 + i) & ~3u, end = (20 + i + len + 3) & ~3u;
	__u32 span = (end - start) & 0x3c;
	if (span == 0 || span > 40 || start < 20 || end > x->thlen)
		return A_SKIPPED;
	__u8 before[72] = {}, after[72];
	if (bpf_skb_load_bytes(skb, x->l4 + start, before, span))
		return A_SKIPPED;
	__u32 from = (i + 20 - start) & 3; /* option start within the span */
	barrier_var(from); /* an addition below, not an OR the verifier refuses */
	__u32 past = from + len; /* at most 33 */
	if (past > 40)
		return A_SKIPPED;
	/* after: before with NOPs over [from, from + len), without a branch
	 * per byte: 32 NOPs from `from`, then before again from the end of
	 * the option */
	__builtin_memcpy(after, before, 72);
	__builtin_memset(after + from, TCPOPT_NOP, 32);
	__builtin_memcpy(after + past, before + past, 32);
	__s64 diff = bpf_csum_diff((__be32 *)before, span, (__be32 *)after, span, 0);
	if (diff < 0)
		return A_SKIPPED;
	if (bpf_skb_store_bytes(skb, x->l4 + start, after, span, 0) || bpf_l4_csum_replace(skb, x->l4 + 16, 0, diff, 0))
		return A_DROP;
	x->locs |= 0xffff0000; /* the ADD_ADDR is gone */
	return A_MODIFIED;
}

__noinline int mpsteer_strip(struct __sk_buff *skb, struct cx *x, struct mpsteer_stats *st)
{
	if (!x)
		return 0;
	return account(st, strip_add_addr(skb, x));
}

__noinline int mpsteer_release(struct __sk_buff *skb, struct cx *x, struct mpsteer_stats *st)
{
	if (!x)
		return 0;
	return account(st, release_add_addr(skb, x));
}

#endif
