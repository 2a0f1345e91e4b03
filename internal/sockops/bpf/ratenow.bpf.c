// SPDX-License-Identifier: GPL-2.0
// Applies the pacing caps of rate.h (and the TCP_NOTSENT_LOWAT that comes
// with a cap) at once, to every TCP socket of the
// network namespace the daemon reads this iterator in, instead of on each
// subflow's next ACK (rate.bpf.c). An idle subflow (a backup one) has no
// ACK to come: a cap written before it is handed traffic would take hold
// only on the first ACK of what it sent, after its first burst went out
// at the rate of its window. The daemon reads this iterator to its end
// after every change of the caps (sockops.Pacer.Set). Caps held the
// VIA_CC way are left to rate.bpf.c.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define TCP_ESTABLISHED 1

#include "rate.h"

enum { NSTAT_SET, NSTAT_FAILED, NSTAT_NOTSENT, NSTAT_MAX };

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NSTAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} ratenow_stats SEC(".maps");

static __always_inline void ncount(__u32 i)
{
	__u64 *v = bpf_map_lookup_elem(&ratenow_stats, &i);
	if (v)
		__sync_fetch_and_add(v, 1);
}

SEC("iter/tcp")
int mpsteer_rate_now(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	if (!skc)
		return 0;
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(skc);
	if (!tp || skc->skc_state != TCP_ESTABLISHED)
		return 0;
	struct flow_key k = {};
	k.family = skc->skc_family;
	if (k.family == AF_INET) {
		k.laddr[0] = skc->skc_rcv_saddr;
		k.raddr[0] = skc->skc_daddr;
	} else if (k.family == AF_INET6) {
#pragma unroll
		for (int i = 0; i < 4; i++) {
			k.laddr[i] = skc->skc_v6_rcv_saddr.in6_u.u6_addr32[i];
			k.raddr[i] = skc->skc_v6_daddr.in6_u.u6_addr32[i];
		}
	} else {
		return 0;
	}
	k.lport = skc->skc_num;
	k.rport = bpf_ntohs(skc->skc_dport);
	struct rate_val *v = bpf_map_lookup_elem(&rate_limit, &k);
	if (!v || v->via != VIA_PACING)
		return 0;
	struct rate_done *d = done_of(&k);
	if (!d) {
		ncount(NSTAT_FAILED);
		return 0;
	}
	if (d->applied != v->rate) {
		if (set_pacing(tp, v, d) == 0)
			ncount(NSTAT_SET);
		else
			ncount(NSTAT_FAILED);
	}
	if (notsent_due(v, d)) {
		if (set_notsent(tp, tp, v, d) == 0)
			ncount(NSTAT_NOTSENT);
		else
			ncount(NSTAT_FAILED);
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
