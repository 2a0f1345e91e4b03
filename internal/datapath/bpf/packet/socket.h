// SPDX-License-Identifier: GPL-2.0
/* The packet's local TCP socket, and what the socket-reading actors
 * (clamp_rwnd, set_backup) need of it, kept per CPU for a jiffy. */
#ifndef MPSTEER_BPF_PACKET_SOCKET_H
#define MPSTEER_BPF_PACKET_SOCKET_H

#include "../chain.h"

/* The local TCP socket this packet belongs to (ingress: the packet is for
 * it; egress: it comes from it). The caller releases it. */
static __always_inline struct bpf_sock *local_sock(struct __sk_buff *skb, struct cx *x, int egress)
{
	struct bpf_sock_tuple t = {};
	__u32 size;
	if (x->v6) {
		__builtin_memcpy(t.ipv6.saddr, egress ? x->dst : x->src, 16);
		__builtin_memcpy(t.ipv6.daddr, egress ? x->src : x->dst, 16);
		t.ipv6.sport = egress ? x->dport : x->sport;
		t.ipv6.dport = egress ? x->sport : x->dport;
		size = sizeof(t.ipv6);
	} else {
		t.ipv4.saddr = egress ? x->dst[0] : x->src[0];
		t.ipv4.daddr = egress ? x->src[0] : x->dst[0];
		t.ipv4.sport = egress ? x->dport : x->sport;
		t.ipv4.dport = egress ? x->sport : x->dport;
		size = sizeof(t.ipv4);
	}
	return bpf_sk_lookup_tcp(skb, &t, size, BPF_F_CURRENT_NETNS, 0);
}

/* Weak: a kernel without it (before 6.2) loads chains that do not call
 * it (chain.bpf.c's *_no_kfuncs entries). */
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym __weak;

/* The MPTCP subflow context of a TCP socket (its ULP data), as a typed
 * read-only pointer: its fields are then read directly (CO-RE), without
 * a bpf_probe_read_kernel call each. */
static __always_inline struct mptcp_subflow_context *subflow_ctx(struct tcp_sock *tp)
{
	void *ulp = tp->inet_conn.icsk_ulp_data;
	if (!ulp)
		return 0;
	return bpf_rdonly_cast(ulp, bpf_core_type_id_kernel(struct mptcp_subflow_context));
}

/* The subflow's backup flag read with bpf_probe_read_kernel, on a kernel
 * without bpf_rdonly_cast. */
static __always_inline int subflow_backup_probed(struct tcp_sock *tp)
{
	struct mptcp_subflow_context *sf = tp->inet_conn.icsk_ulp_data;
	if (!sf)
		return -1;
	return BPF_CORE_READ_BITFIELD_PROBED(sf, backup);
}

/* What the socket-reading actors need of the packet's local socket, kept
 * per CPU for the flow of the last packet that asked, for the rest of the
 * jiffy it was read in (1-4 ms): the packets of a busy flow come in runs,
 * and finding a socket (a hash lookup and a reference taken and dropped)
 * costs more than the rest of such an actor. What is kept changes slowly
 * (SRTT) or not at all (window scale); a backup flag changed by someone
 * else is seen at the next jiffy. Per chain program (the map is its own),
 * so one chain's packets never evict another's. sock_cache (the loader's,
 * default on) turns it off, for the benchmark's cold figures. */
struct sock_info {
	__u64 jiffies; /* when it was read */
	__u32 w[9];    /* the packet's addresses and ports (struct cx) */
	__u32 egress;
	__s32 backup;  /* the subflow's backup flag; -1: not an MPTCP subflow */
	__u32 tcp;     /* a TCP socket was found */
	__u32 wscale;  /* the shift of the window in this direction's packets */
	__u32 srtt_us;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sock_info);
} mpsteer_sock_cache SEC(".maps");

volatile const __u32 sock_cache = 1;

static __always_inline int same_flow(const struct sock_info *c, const struct cx *x, __u32 egress)
{
	__u32 d = c->egress ^ egress;
#pragma unroll
	for (int i = 0; i < 9; i++)
		d |= c->w[i] ^ x->w[i];
	return d == 0;
}

/* no_kfuncs (a constant): the kernel has no bpf_rdonly_cast (before 6.2). */
static __always_inline struct sock_info *sock_info(struct __sk_buff *skb, struct cx *x, __u32 egress, const int no_kfuncs)
{
	__u32 zero = 0;
	struct sock_info *c = bpf_map_lookup_elem(&mpsteer_sock_cache, &zero);
	if (!c)
		return 0;
	__u64 now = bpf_jiffies64();
	if (sock_cache && c->jiffies == now && same_flow(c, x, egress))
		return c;
	c->tcp = 0;
	c->backup = -1;
	c->wscale = 0;
	c->srtt_us = 0;
	struct bpf_sock *sk = local_sock(skb, x, egress);
	if (sk) {
		struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
		if (tp) {
			c->tcp = 1;
			/* Ingress: the peer's window, scaled by its shift (our
			 * snd_wscale). Egress: ours, scaled by rcv_wscale. */
			if (egress)
				c->wscale = BPF_CORE_READ_BITFIELD(tp, rx_opt.rcv_wscale);
			else
				c->wscale = BPF_CORE_READ_BITFIELD(tp, rx_opt.snd_wscale);
			c->srtt_us = tp->srtt_us >> 3;
			if (tp->is_mptcp) {
				if (no_kfuncs) {
					c->backup = subflow_backup_probed(tp);
				} else {
					struct mptcp_subflow_context *sf = subflow_ctx(tp);
					if (sf)
						c->backup = BPF_CORE_READ_BITFIELD(sf, backup);
				}
			}
		}
		bpf_sk_release(sk);
	}
#pragma unroll
	for (int i = 0; i < 9; i++)
		c->w[i] = x->w[i];
	c->egress = egress;
	c->jiffies = now;
	return c;
}

#endif
