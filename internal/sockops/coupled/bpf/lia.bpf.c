// SPDX-License-Identifier: GPL-2.0
// LIA, the Linked Increases Algorithm of RFC 6356, for the subflows of an
// MPTCP connection: Reno's slow start and halving on loss per subflow, and
// in congestion avoidance, per packet acknowledged on subflow i, an
// increase of min(alpha / cwnd_total, 1 / cwnd_i) packets, with
//
//	alpha = cwnd_total × max_k(cwnd_k / rtt_k²) / (Σ_k cwnd_k / rtt_k)²
//
// (windows in packets: the subflows of one connection share its MSS).
// cwnd_total cancels: one packet more per X = (Σ_k cwnd_k/rtt_k)² /
// max_k(cwnd_k/rtt_k²) packets acknowledged, or per cwnd_i when that is
// larger, which tcp_cong_avoid_ai does with w = max(X, cwnd_i).
// Registered as a tcp_congestion_ops struct_ops under a name the loader
// chooses; the state the subflows share is coupled.h's.
#include "coupled.h"

static __u32 coupled_window(struct coupled_conn *c, __u32 self, struct tcp_sock *tp, struct coupled_priv *p)
{
	struct coupled_sums z;
	__u32 cwnd = clamp_cwnd(tp->snd_cwnd);
	coupled_sum(c, self, tp->tcp_mstamp, &z);
	/* S = 2^FRAC Σ w_k R/r_k and M = 2^FRAC max_k w_k (R/r_k)², so
	 * X = S² / M / 2^FRAC (R cancels). */
	if (!z.m)
		return cwnd;
	__u64 x = muldiv(z.s, z.s, z.m) >> FRAC;
	return to_window(x > cwnd ? x : cwnd);
}

SEC("struct_ops")
void BPF_PROG(lia_init, struct sock *sk)
{
	coupled_join(sk);
}

SEC("struct_ops")
void BPF_PROG(lia_release, struct sock *sk)
{
	coupled_leave(sk);
}

SEC("struct_ops")
__u32 BPF_PROG(lia_ssthresh, struct sock *sk)
{
	return tcp_reno_ssthresh(sk);
}

SEC("struct_ops")
void BPF_PROG(lia_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	coupled_cong_avoid(sk, acked);
}

SEC("struct_ops")
__u32 BPF_PROG(lia_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops mpsteer_lia = {
	.init = (void *)lia_init,
	.release = (void *)lia_release,
	.ssthresh = (void *)lia_ssthresh,
	.cong_avoid = (void *)lia_cong_avoid,
	.undo_cwnd = (void *)lia_undo_cwnd,
	.name = "mpsteer_lia",
};

char LICENSE[] SEC("license") = "GPL";
