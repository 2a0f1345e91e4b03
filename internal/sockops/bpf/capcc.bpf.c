// SPDX-License-Identifier: GPL-2.0
// A congestion control that holds a subflow to the rate the daemon set for
// it in rate_limit: Reno (the kernel's own functions, as kfuncs), with the
// window cut to rate × SRTT on every ACK. bpf/rate.bpf.c switches a capped
// subflow to it and back; a subflow without a cap in the map runs plain
// Reno. Registered as a tcp_congestion_ops struct_ops under a name the
// loader chooses (one per daemon).
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>

#include "rate.h"

extern __u32 tcp_reno_ssthresh(struct sock *sk) __ksym;
extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;

enum { CSTAT_ACKS, CSTAT_CUT, CSTAT_MAX };

/* Per CPU: counted on every ACK of a capped subflow. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CSTAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} capcc_stats SEC(".maps");

static __always_inline void ccount(__u32 i)
{
	__u64 *v = bpf_map_lookup_elem(&capcc_stats, &i);
	if (v)
		*v += 1;
}

/* The window that carries rate bytes per second at the subflow's SRTT,
 * rounded to the nearest segment, at least 2 segments; 0: no cap. */
static __always_inline __u32 cap_window(struct sock *sk)
{
	struct flow_key k = {};
	k.family = sk->__sk_common.skc_family;
	if (k.family == AF_INET) {
		k.laddr[0] = sk->__sk_common.skc_rcv_saddr;
		k.raddr[0] = sk->__sk_common.skc_daddr;
	} else if (k.family == AF_INET6) {
#pragma unroll
		for (int i = 0; i < 4; i++) {
			k.laddr[i] = sk->__sk_common.skc_v6_rcv_saddr.in6_u.u6_addr32[i];
			k.raddr[i] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[i];
		}
	} else {
		return 0;
	}
	k.lport = sk->__sk_common.skc_num;
	k.rport = bpf_ntohs(sk->__sk_common.skc_dport);
	struct rate_val *v = bpf_map_lookup_elem(&rate_limit, &k);
	if (!v || v->rate >= RATE_UNLIMITED)
		return 0;
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	__u64 srtt = tp->srtt_us >> 3, mss = tp->mss_cache;
	if (!srtt || !mss)
		return 0;
	__u64 w = (v->rate * srtt / 1000000 + mss / 2) / mss;
	return w < 2 ? 2 : (__u32)w;
}

/* The window cap, kept between callbacks in the congestion control's
 * private area (Reno keeps nothing there): pkts_acked looks it up once
 * per ACK, cong_avoid (later on the same ACK) reuses it. 0: no cap. */
static __always_inline __u32 *kept_window(struct sock *sk)
{
	return (__u32 *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline void cap(struct sock *sk, __u32 w)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	if (w && tp->snd_cwnd > w) {
		tp->snd_cwnd = w;
		ccount(CSTAT_CUT);
	}
}

SEC("struct_ops")
void BPF_PROG(capcc_init, struct sock *sk)
{
	*kept_window(sk) = 0;
}

SEC("struct_ops")
__u32 BPF_PROG(capcc_ssthresh, struct sock *sk)
{
	return tcp_reno_ssthresh(sk);
}

/* Reno's growth, then the cap pkts_acked found on this ACK. */
SEC("struct_ops")
void BPF_PROG(capcc_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	tcp_reno_cong_avoid(sk, ack, acked);
	cap(sk, *kept_window(sk));
}

/* Every ACK that acknowledges data, before cong_avoid and also in
 * recovery (when cong_avoid is not called): the cap is looked up here, so
 * one lowered since the last ACK takes effect at once. */
SEC("struct_ops")
void BPF_PROG(capcc_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	__u32 w = cap_window(sk);
	*kept_window(sk) = w;
	ccount(CSTAT_ACKS);
	cap(sk, w);
}

SEC("struct_ops")
__u32 BPF_PROG(capcc_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops mpsteer_capcc = {
	.init = (void *)capcc_init,
	.ssthresh = (void *)capcc_ssthresh,
	.cong_avoid = (void *)capcc_cong_avoid,
	.pkts_acked = (void *)capcc_pkts_acked,
	.undo_cwnd = (void *)capcc_undo_cwnd,
	.name = "mpsteer_cap",
};

char LICENSE[] SEC("license") = "GPL";
