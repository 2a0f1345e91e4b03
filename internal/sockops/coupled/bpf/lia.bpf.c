// SPDX-License-Identifier: GPL-2.0
// LIA, the Linked Increases Algorithm of RFC 6356, for the subflows of an
// MPTCP connection: Reno's slow start and halving on loss per subflow, and
// in congestion avoidance the coupled increase of window.h's lia_window.
// Registered as a tcp_congestion_ops struct_ops under a name the loader
// chooses; the state the subflows share is coupled.h's.
#include "coupled.h"

static __u32 coupled_window(struct coupled_conn *c, __u32 self, struct tcp_sock *tp, struct coupled_priv *p)
{
	return lia_window(c, self, clamp_cwnd(tp->snd_cwnd), tp->tcp_mstamp);
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
