// SPDX-License-Identifier: GPL-2.0
// The smallest congestion control mpsteer's capping one is made of: Reno
// through the kernel's own functions (kfuncs), registered as a struct_ops
// link. The probe registers it under a name of its process and takes it
// away again; where this loads, bpf/capcc.bpf.c of internal/sockops does.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

extern __u32 tcp_reno_ssthresh(struct sock *sk) __ksym;
extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;

SEC("struct_ops")
__u32 BPF_PROG(probecc_ssthresh, struct sock *sk)
{
	return tcp_reno_ssthresh(sk);
}

SEC("struct_ops")
void BPF_PROG(probecc_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	tcp_reno_cong_avoid(sk, ack, acked);
}

SEC("struct_ops")
__u32 BPF_PROG(probecc_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops mpsteer_probecc = {
	.ssthresh = (void *)probecc_ssthresh,
	.cong_avoid = (void *)probecc_cong_avoid,
	.undo_cwnd = (void *)probecc_undo_cwnd,
	.name = "mpsteer_probe",
};

char LICENSE[] SEC("license") = "GPL";
