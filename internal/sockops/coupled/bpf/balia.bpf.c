// SPDX-License-Identifier: GPL-2.0
// BALIA, the Balanced Linked Adaptation of Peng, Walid, Hwang and Low
// ("Multipath TCP: Analysis, Design, and Implementation", IEEE/ACM ToN
// 2016), for the subflows of an MPTCP connection. With x_k = w_k / τ_k the
// rate of subflow k and α_r = max_k x_k / x_r:
//
//	per ACK on r:  w_r += x_r / (τ_r (Σ_k x_k)²) × (1 + α_r)/2 × (4 + α_r)/5
//	per loss on r: w_r -= w_r / 2 × min(α_r, 1.5)
//
// Slow start is Reno's. The increase is one packet per
// W = (Σ_k w_k τ_r/τ_k)² / (w_r f(α_r)) acknowledged, f(α) = (1+α)(4+α)/10,
// which tcp_cong_avoid_ai does with w = W. The state the subflows share
// is coupled.h's; α_r is kept per subflow for the decrease.
#include "coupled.h"

/* W and α_r (scaled by 2^FRAC, into p->alpha) for subflow self. */
static __u32 coupled_window(struct coupled_conn *c, __u32 self, struct tcp_sock *tp, struct coupled_priv *p)
{
	struct coupled_sums z;
	__u32 cwnd = clamp_cwnd(tp->snd_cwnd);
	coupled_sum(c, self, tp->tcp_mstamp, &z);
	if (!z.yself || !z.qself) {
		p->alpha = 1 << FRAC;
		return cwnd;
	}
	__u64 a = (z.ymax << FRAC) / z.yself;
	if (a > RATIO_MAX)
		a = RATIO_MAX;
	if (a < (1 << FRAC))
		a = 1 << FRAC;
	p->alpha = (__u32)a;
	/* f(α) × 2^(2 FRAC): (1 + α)(4 + α) / 10 with α scaled by 2^FRAC. */
	__u64 f = ((1ULL << FRAC) + a) * ((4ULL << FRAC) + a) / 10;
	/* A = 2^FRAC Σ_k w_k τ_self/τ_k; W = A² / (w_self f), the scales
	 * cancel (w_self is the slot's, as in S). */
	__u64 A = (z.s << FRAC) / z.qself;
	__u64 wself = z.yself / z.qself;
	return to_window(muldiv(A, A, (wself ? wself : 1) * f));
}

SEC("struct_ops")
void BPF_PROG(balia_init, struct sock *sk)
{
	coupled_join(sk);
}

SEC("struct_ops")
void BPF_PROG(balia_release, struct sock *sk)
{
	coupled_leave(sk);
}

/* w - w/2 × min(α, 1.5), at least 2 packets; α as of this loss. */
SEC("struct_ops")
__u32 BPF_PROG(balia_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	struct coupled_priv *p = priv(sk);
	__u32 cwnd = clamp_cwnd(tp->snd_cwnd);
	struct coupled_conn *c = coupled_touch(sk, cwnd, srtt_of(tp));
	if (!c)
		return tcp_reno_ssthresh(sk);
	p->gen = c->gen;
	p->weff = coupled_window(c, p->slot & (MAX_SUBFLOWS - 1), tp, p);
	__u64 a = p->alpha;
	if (a > (3 << FRAC) / 2)
		a = (3 << FRAC) / 2;
	__u64 cut = ((__u64)cwnd * a) >> (FRAC + 1);
	__u64 next = cwnd > cut ? cwnd - cut : 0;
	return next < 2 ? 2 : (__u32)next;
}

SEC("struct_ops")
void BPF_PROG(balia_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	coupled_cong_avoid(sk, acked);
}

SEC("struct_ops")
__u32 BPF_PROG(balia_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops mpsteer_balia = {
	.init = (void *)balia_init,
	.release = (void *)balia_release,
	.ssthresh = (void *)balia_ssthresh,
	.cong_avoid = (void *)balia_cong_avoid,
	.undo_cwnd = (void *)balia_undo_cwnd,
	.name = "mpsteer_balia",
};

char LICENSE[] SEC("license") = "GPL";
