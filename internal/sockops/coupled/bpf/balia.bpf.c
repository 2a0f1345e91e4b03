// SPDX-License-Identifier: GPL-2.0
// BALIA, the Balanced Linked Adaptation of Peng, Walid, Hwang and Low
// (IEEE/ACM ToN 2016), for the subflows of an MPTCP connection: Reno's
// slow start, and window.h's balia_window (increase) and balia_decrease
// (decrease on loss), which depend on the subflow's α_r (its rate against
// the connection's fastest subflow's), kept per subflow. Registered as a
// tcp_congestion_ops struct_ops under a name the loader chooses; the
// state the subflows share is coupled.h's.
#include "coupled.h"

/* W, and α_r into p->alpha. */
static __u32 coupled_window(struct coupled_conn *c, __u32 self, struct tcp_sock *tp, struct coupled_priv *p)
{
	__u32 alpha = 1 << FRAC;
	__u32 w = balia_window(c, self, clamp_cwnd(tp->snd_cwnd), tp->tcp_mstamp, &alpha);
	p->alpha = alpha;
	return w;
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

/* α as of this loss. */
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
	return balia_decrease(cwnd, p->alpha);
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
