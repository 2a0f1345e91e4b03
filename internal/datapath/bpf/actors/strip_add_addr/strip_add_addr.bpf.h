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
	__u32 release; /* 0 withheld; 1 released (by userspace): put it back
			* into the next packet of its subflow; 2 put back */
	__u8 opt[32];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct withheld_key);
	__type(value, struct withheld_val);
} mpsteer_withheld SEC(".maps");

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

/* Release. Userspace (Manager.Release) marks what to put back: each
 * option's `release` goes from 0 to 1, its address id is set in its
 * subflow's bitmap in mpsteer_release_ids, and the chain's count of released
 * options grows. Each of these is written by userspace alone. The chain
 * puts the options back from its entry, before its selectors (the
 * packets that carry them back need not be selected): while the count of
 * options it put back is behind, a packet looks its subflow up, takes the
 * lowest id released and not yet put back (mpsteer_released_ids: the same
 * bitmap, written here alone, under its lock), inserts that option and
 * counts it. A subflow has as many options as address ids (256); a chain
 * as many subflows as the maps hold. */
struct release_ids {
	__u64 w[4]; /* bit i: address id i */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct withheld_key); /* addr_id 0: the subflow */
	__type(value, struct release_ids);
} mpsteer_release_ids SEC(".maps");

struct released {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 w[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct withheld_key);
	__type(value, struct released);
} mpsteer_released_ids SEC(".maps");

/* Per chain: [2·id] options released (userspace), [2·id + 1] options put
 * back (here, atomically). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * MPSTEER_MAX_CHAINS);
	__type(key, __u32);
	__type(value, __u64);
} mpsteer_release_count SEC(".maps");

/* Whether the chain has options released and not yet put back: two
 * array reads, the only cost of release for a chain that has nothing to
 * put back. */
static __always_inline int release_pending(void)
{
	__u32 asked = chain_id * 2, done = asked + 1;
	__u64 *a = bpf_map_lookup_elem(&mpsteer_release_count, &asked);
	__u64 *d = bpf_map_lookup_elem(&mpsteer_release_count, &done);
	return a && d && *a != *d;
}

/* The index of the lowest bit set in p (not 0): the number of bits below
 * it, counted without a branch (each branch would double what the
 * verifier walks). */
static __always_inline __u32 lowest_bit(__u64 p)
{
	__u64 v = (p & -p) - 1;
	v = v - ((v >> 1) & 0x5555555555555555ULL);
	v = (v & 0x3333333333333333ULL) + ((v >> 2) & 0x3333333333333333ULL);
	v = (v + (v >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
	return (v * 0x0101010101010101ULL) >> 56;
}

/* mpsteer_put_back puts the released option with address id `id` of the
 * packet's subflow back into the packet (padded with NOPs to a multiple
 * of 4): 1 done, 0 nothing to put back (not released, or gone), -1 no
 * room in this packet, less: the packet is half-rewritten. A global
 * function: the verifier checks the insertion once, not once for each way
 * its caller found the id. */
__noinline int mpsteer_put_back(struct __sk_buff *skb, struct cx *x, __u32 id)
{
	if (!x)
		return 0;
	struct withheld_key k;
	withheld_key_of(x, &k);
	k.addr_id = id & 0xff;
	struct withheld_val *w = bpf_map_lookup_elem(&mpsteer_withheld, &k);
	if (!w || w->release != 1)
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
	if (err)
		return err;
	w->release = 2;
	return 1;
}

/* A packet of a chain with options released and not yet put back: if its
 * subflow has one, it carries it. */
static __always_inline int release_add_addr(struct __sk_buff *skb, struct cx *x)
{
	/* Any segment of the subflow can carry it back: the stack parses
	 * MPTCP options on every one (pure ACKs often carry none); not one
	 * that has an ADD_ADDR of its own (the stack reads one per packet),
	 * nor a SYN, FIN or RST. */
	if ((x->types & (T_FIN | T_RST | T_ADD_ADDR)) || (x->flags & TCP_SYN))
		return 0;
	struct withheld_key k;
	withheld_key_of(x, &k);
	struct release_ids *want = bpf_map_lookup_elem(&mpsteer_release_ids, &k);
	if (!want)
		return 0;
	struct released *done = bpf_map_lookup_elem(&mpsteer_released_ids, &k);
	if (!done)
		return 0;
	/* The first word with an id released and not put back, read without
	 * the lock: a stale bit costs at most a second copy of an option,
	 * which the count below does not count twice. */
	__u32 base = 0;
	__u64 p = want->w[0] & ~done->w[0];
	if (!p) {
		p = want->w[1] & ~done->w[1];
		base = 64;
	}
	if (!p) {
		p = want->w[2] & ~done->w[2];
		base = 128;
	}
	if (!p) {
		p = want->w[3] & ~done->w[3];
		base = 192;
	}
	if (!p)
		return 0;
	__u32 id = (base + lowest_bit(p)) & 0xff;
	int r = mpsteer_put_back(skb, x, id);
	if (r == -1)
		return A_SKIPPED; /* no room: the next packet */
	if (r < -1)
		return A_ERROR | A_DROPPED | A_DROP; /* half-rewritten: never let it go */
	/* Counted once, by whichever packet put it back first (another CPU
	 * may have put back a copy meanwhile: the peer takes it as a repeat;
	 * an option gone meanwhile is counted as done). */
	__u32 word = (id >> 6) & 3;
	__u64 bit = 1ULL << (id & 63);
	int first;
	bpf_spin_lock(&done->lock);
	first = !(done->w[word] & bit);
	done->w[word] |= bit;
	bpf_spin_unlock(&done->lock);
	if (first) {
		__u32 key = chain_id * 2 + 1;
		__u64 *n = bpf_map_lookup_elem(&mpsteer_release_count, &key);
		if (n)
			__sync_fetch_and_add(n, 1);
	}
	return r > 0 ? A_MODIFIED : 0;
}

/* strip_add_addr: withhold ADD_ADDR options and keep them, so they can
 * be put back later (`mpsteer chain release`). A packet with ADD_ADDR:
 * withhold it. */
static __always_inline int strip_add_addr(struct __sk_buff *skb, struct cx *x)
{
	struct withheld_key k;
	withheld_key_of(x, &k);
	__u32 at = (x->locs >> 16) & 0xff;
	__u64 len = (x->locs >> 24) & 0x1f;
	if (at == 0xff || !at_least(len, 8) || len > 30)
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
	__u64 span = size_upto(end - start, 0x3f); /* a multiple of 4: start and end are */
	if (span > 40 || start < 20 || end > x->thlen)
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

/* mpsteer_release: a packet of a chain with options released and not yet
 * put back. */
__noinline int mpsteer_release(struct __sk_buff *skb, struct cx *x, struct mpsteer_stats *st)
{
	if (!x)
		return 0;
	return account(st, release_add_addr(skb, x));
}

#endif
