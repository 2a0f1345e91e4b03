// SPDX-License-Identifier: GPL-2.0
// The arithmetic of the coupled congestion controls, apart from the
// sockets: from a connection's slots (each subflow's window and smoothed
// RTT), the window per packet of increase of LIA and BALIA, and BALIA's
// decrease. bpf/mathtest.bpf.c runs these very functions under
// BPF_PROG_TEST_RUN so that the tests hold them to model.go, whose
// fixed-point steps are the same.
#ifndef MPSTEER_WINDOW_H
#define MPSTEER_WINDOW_H

#define MAX_SUBFLOWS 8 /* a power of two: slot indices are masked */
#define NO_SLOT MAX_SUBFLOWS

/* Inputs are clamped so that the fixed-point products below fit 64 bits. */
#define CWND_MAX (1U << 24)     /* packets */
#define RTT_MAX (1U << 26)      /* microseconds (67 s) */
#define FRAC 10                 /* fixed-point fraction bits */
#define RATIO_MAX (1ULL << 20)  /* RTT ratios and BALIA's alpha, scaled by 2^FRAC: at most 1024 */

/* A slot unchanged for this long (and 4 of its RTTs) no longer counts:
 * its subflow sends nothing (a backup, an idle or a dead path). */
#define STALE_MIN_US 200000

struct coupled_slot {
	__u64 owner; /* the subflow's socket; 0: free */
	__u32 cwnd;  /* packets */
	__u32 rtt;   /* smoothed, microseconds */
	__u64 stamp; /* the subflow's tcp_mstamp (µs) at its last ACK */
};

struct coupled_conn {
	__u32 gen; /* bumped on every change of a slot's window or RTT */
	__u32 pad;
	struct coupled_slot slot[MAX_SUBFLOWS];
};

static __always_inline __u32 clamp_cwnd(__u32 w)
{
	return w < 1 ? 1 : (w > CWND_MAX ? CWND_MAX : w);
}

/* Number of significant bits of x (0 for 0). */
static __always_inline __u32 bits64(__u64 x)
{
	__u32 n = 0;
	if (x >> 32) { n += 32; x >>= 32; }
	if (x >> 16) { n += 16; x >>= 16; }
	if (x >> 8) { n += 8; x >>= 8; }
	if (x >> 4) { n += 4; x >>= 4; }
	if (x >> 2) { n += 2; x >>= 2; }
	if (x >> 1) { n += 1; x >>= 1; }
	return n + (__u32)x;
}

/* a × b / c without overflowing: when the product needs more than 64
 * bits, the larger factor gives up its low bits first, then both, and c
 * as many; a c that would be 0 then saturates the result. */
static __always_inline __u64 muldiv(__u64 a, __u64 b, __u64 c)
{
	__u32 ba = bits64(a), bb = bits64(b);
	if (ba + bb > 64) {
		__u32 sh = ba + bb - 64, total = sh, d;
		if (ba > bb) {
			d = ba - bb < sh ? ba - bb : sh;
			a >>= d;
			sh -= d;
		} else if (bb > ba) {
			d = bb - ba < sh ? bb - ba : sh;
			b >>= d;
			sh -= d;
		}
		a >>= sh / 2;
		b >>= sh - sh / 2;
		c >>= total;
	}
	if (c == 0)
		return ~0ULL;
	return a * b / c;
}

static __always_inline int slot_counts(struct coupled_slot *s, __u64 now)
{
	if (!s->owner)
		return 0;
	__u64 stale = (__u64)s->rtt * 4;
	if (stale < STALE_MIN_US)
		stale = STALE_MIN_US;
	return now <= s->stamp || now - s->stamp <= stale;
}

/* What every algorithm computes from the slots that count: with R the
 * largest of their RTTs and q_k = 2^FRAC × R / r_k (so q_k ≥ 2^FRAC, at
 * most RATIO_MAX), y_k = w_k q_k (subflow k's rate up to a common
 * factor): S = Σ y_k, Ymax = max y_k, M = max_k w_k q_k² / 2^FRAC, and
 * the subflow's own y and q. The subflow's slot holds its window and RTT
 * (coupled_touch wrote them on this ACK, the RTT within an eighth). The
 * loops read map memory only, whose values the verifier does not track,
 * so their paths merge at each iteration. */
struct coupled_sums {
	__u64 rmax;
	__u64 s, ymax, m;
	__u64 yself, qself;
};

static __always_inline __u32 slot_cwnd(struct coupled_slot *s)
{
	return clamp_cwnd(s->cwnd);
}

static __always_inline __u64 slot_rtt(struct coupled_slot *s)
{
	__u32 r = s->rtt;
	return r < 1 ? 1 : (r > RTT_MAX ? RTT_MAX : r);
}

static __always_inline __u64 ratio(__u64 rmax, __u64 r)
{
	__u64 v = (rmax << FRAC) / r;
	return v > RATIO_MAX ? RATIO_MAX : v;
}

/* One slot's part of the sums. The two steps are global functions: the
 * verifier checks each once, on its own, and the loops that call them
 * have no branches of their own, so their paths never multiply. */
__attribute__((noinline)) __u64 coupled_rmax_step(struct coupled_slot *s, __u32 k, __u32 self, __u64 now, __u64 rmax)
{
	if (!s || (k != self && !slot_counts(s, now)))
		return rmax;
	__u64 r = slot_rtt(s);
	return r > rmax ? r : rmax;
}

__attribute__((noinline)) int coupled_sum_step(struct coupled_slot *s, __u32 k, __u32 self, __u64 now,
					      struct coupled_sums *out)
{
	if (!s || !out || (k != self && !slot_counts(s, now)))
		return 0;
	__u64 rmax = out->rmax ? out->rmax : 1;
	__u64 q = ratio(rmax, slot_rtt(s)), w = slot_cwnd(s);
	__u64 y = w * q;
	__u64 t = w * ((q * q) >> FRAC);
	out->s += y;
	if (y > out->ymax)
		out->ymax = y;
	if (t > out->m)
		out->m = t;
	if (k == self) {
		out->yself = y;
		out->qself = q;
	}
	return 0;
}

static __always_inline void coupled_sum(struct coupled_conn *c, __u32 self, __u64 now, struct coupled_sums *out)
{
	__u64 rmax = 1;
	self &= MAX_SUBFLOWS - 1;
#pragma clang loop unroll(disable)
	for (__u32 k = 0; k < MAX_SUBFLOWS; k++)
		rmax = coupled_rmax_step(&c->slot[k], k, self, now, rmax);
	out->rmax = rmax;
	out->s = 0;
	out->ymax = 0;
	out->m = 0;
	out->yself = 0;
	out->qself = 0;
#pragma clang loop unroll(disable)
	for (__u32 k = 0; k < MAX_SUBFLOWS; k++)
		coupled_sum_step(&c->slot[k], k, self, now, out);
}

static __always_inline __u32 to_window(__u64 w)
{
	return w < 1 ? 1 : (w > 0xffffffffULL ? 0xffffffffU : (__u32)w);
}


/* LIA (RFC 6356): per packet acknowledged on subflow i, an increase of
 * min(alpha / cwnd_total, 1 / cwnd_i) packets with
 *
 *	alpha = cwnd_total × max_k(cwnd_k / rtt_k²) / (Σ_k cwnd_k / rtt_k)²
 *
 * (windows in packets: the subflows of one connection share its MSS).
 * cwnd_total cancels: one packet more per X = (Σ_k cwnd_k/rtt_k)² /
 * max_k(cwnd_k/rtt_k²) packets acknowledged, or per cwnd_i when that is
 * larger, which tcp_cong_avoid_ai does with w = max(X, cwnd_i). With
 * q_k = 2^FRAC R/r_k, S = 2^FRAC Σ w_k R/r_k and M = 2^FRAC max_k w_k
 * (R/r_k)², so X = S² / M / 2^FRAC (R cancels). */
static __always_inline __u32 lia_window(struct coupled_conn *c, __u32 self, __u32 cwnd, __u64 now)
{
	struct coupled_sums z;
	coupled_sum(c, self, now, &z);
	if (!z.m)
		return cwnd;
	__u64 x = muldiv(z.s, z.s, z.m) >> FRAC;
	return to_window(x > cwnd ? x : cwnd);
}

/* BALIA (Peng, Walid, Hwang and Low, "Multipath TCP: Analysis, Design,
 * and Implementation", IEEE/ACM ToN 2016): with x_k = w_k / τ_k and
 * α_r = max_k x_k / x_r, per ACK on subflow r
 *
 *	w_r += x_r / (τ_r (Σ_k x_k)²) × (1 + α_r)/2 × (4 + α_r)/5,
 *
 * one packet per W = (Σ_k w_k τ_r/τ_k)² / (w_r f(α_r)) acknowledged,
 * f(α) = (1+α)(4+α)/10. Returns W; α_r, scaled by 2^FRAC, into *alpha. */
static __always_inline __u32 balia_window(struct coupled_conn *c, __u32 self, __u32 cwnd, __u64 now, __u32 *alpha)
{
	struct coupled_sums z;
	coupled_sum(c, self, now, &z);
	if (!z.yself || !z.qself) {
		*alpha = 1 << FRAC;
		return cwnd;
	}
	__u64 a = (z.ymax << FRAC) / z.yself;
	if (a > RATIO_MAX)
		a = RATIO_MAX;
	if (a < (1 << FRAC))
		a = 1 << FRAC;
	*alpha = (__u32)a;
	/* f(α) × 2^(2 FRAC): (1 + α)(4 + α) / 10 with α scaled by 2^FRAC. */
	__u64 f = ((1ULL << FRAC) + a) * ((4ULL << FRAC) + a) / 10;
	/* A = 2^FRAC Σ_k w_k τ_self/τ_k; W = A² / (w_self f), the scales
	 * cancel (w_self is the slot's, as in S). */
	__u64 A = (z.s << FRAC) / z.qself;
	__u64 wself = z.yself / z.qself;
	return to_window(muldiv(A, A, (wself ? wself : 1) * f));
}

/* BALIA per loss on subflow r: w_r − w_r/2 × min(α_r, 1.5), at least 2
 * packets (α scaled by 2^FRAC). */
static __always_inline __u32 balia_decrease(__u32 cwnd, __u32 alpha)
{
	__u64 w = clamp_cwnd(cwnd), a = alpha;
	if (a > (3 << FRAC) / 2)
		a = (3 << FRAC) / 2;
	__u64 cut = (w * a) >> (FRAC + 1);
	__u64 next = w > cut ? w - cut : 0;
	return next < 2 ? 2 : (__u32)next;
}

#endif
