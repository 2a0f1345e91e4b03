// SPDX-License-Identifier: GPL-2.0
/* seq and dseq: subflow and data sequence number ranges (README.md). */
#ifndef MPSTEER_BPF_SEL_SEQ
#define MPSTEER_BPF_SEL_SEQ

#include "../../chain.h"

/* seq: subflow sequence number (kind 0) or DSS data sequence number
 * (kind 1) in [lo, hi), with wrap-around; span = the range's size on the
 * 32-bit circle, wide = hi - lo (both from the loader). */
struct seq_args {
	__u32 kind;
	__u32 lo32;
	__u64 lo, hi;
	__u64 span; /* 2^32 or more: every number */
	__u64 wide;
};

/* mpsteer_dsn finds the data sequence number of a DSS mapping: -1 none,
 * 0 a 32-bit DSN, 1 a 64-bit one. */
__noinline int mpsteer_dsn(struct __sk_buff *skb, struct cx *x, __u64 *dsn)
{
	if (!x || !dsn)
		return -1;
	__u32 at = x->locs & 0xff;
	__u64 n = (x->locs >> 8) & 0x1f;
	if (at == 0xff || !at_least(n, 4))
		return -1;
	__u8 d[32] = {};
	if (bpf_skb_load_bytes(skb, x->l4 + 20 + (at & 0x3f), d, n))
		return -1;
	__u8 f = d[3];
	if (!(f & 0x04))
		return -1;
	__u32 off = 4;
	if (f & 0x01)
		off += (f & 0x02) ? 8 : 4;
	int wide = (f & 0x08) != 0;
	__u32 bytes = wide ? 8 : 4;
	if (off + bytes > n)
		return -1;
	__u64 v = 0;
	for (int k = 0; k < 8; k++) {
		if (k >= bytes)
			break;
		v = (v << 8) | d[(off + k) & 0x1f];
	}
	*dsn = v;
	return wide;
}

static __always_inline int sel_seq(struct __sk_buff *skb, struct cx *x, const volatile struct seq_args *t)
{
	if (t->kind == 0)
		return (__u64)(__u32)(x->seq - t->lo32) < t->span;
	__u64 dsn = 0;
	int wide = mpsteer_dsn(skb, x, &dsn);
	if (wide < 0)
		return 0;
	if (wide)
		return (dsn - t->lo) < t->wide;
	return (__u64)(__u32)((__u32)dsn - t->lo32) < t->span;
}

#endif
