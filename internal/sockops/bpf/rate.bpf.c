// SPDX-License-Identifier: GPL-2.0
// Limits the sending rate of chosen MPTCP subflows: the daemon writes a
// rate per subflow (its 4-tuple) into rate_limit, and on the subflow's
// next ACK this sockops program sets the socket's maximum pacing rate
// (SO_MAX_PACING_RATE, which also turns TCP's internal pacing on). The
// MPTCP scheduler then sees a slow subflow and sends less there. A rate of
// 2^32 - 1 B/s or more lifts the limit (the socket option is 32 bits wide:
// caps reach 34 Gbit/s); the daemon deletes the entry once it is lifted.
// The other way (via VIA_CC): the program switches a capped subflow to
// the capping congestion control of bpf/capcc.bpf.c, and back to the one
// it had when the cap is lifted.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define SOL_TCP 6
#define TCP_CONGESTION 13

#include "rate.h"

enum { RSTAT_SUBFLOWS, RSTAT_SET, RSTAT_FAILED, RSTAT_CC_SWITCHED, RSTAT_NOTSENT, RSTAT_MAX };

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RSTAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} rate_stats SEC(".maps");

volatile const __u64 netns_cookie = 0;
/* The capping congestion control's name (set by the loader; empty: the
 * VIA_CC way is not loaded). */
volatile const char cap_cc[CC_NAME_MAX] = {};

static __always_inline void rcount(__u32 i)
{
	__u64 *v = bpf_map_lookup_elem(&rate_stats, &i);
	if (v)
		__sync_fetch_and_add(v, 1);
}

static __always_inline int same_name(const char *a, const volatile char *b)
{
#pragma unroll
	for (int i = 0; i < CC_NAME_MAX; i++) {
		if (a[i] != b[i])
			return 0;
		if (!a[i])
			return 1;
	}
	return 1;
}

/* VIA_CC: a capped subflow runs the capping congestion control (which
 * holds its window to rate × SRTT); a lifted one goes back to the one it
 * had. */
static __always_inline void apply_cc(struct bpf_sock_ops *skops, struct rate_val *v, struct rate_done *d)
{
	char cur[CC_NAME_MAX] = {};
	if (!cap_cc[0] || bpf_getsockopt(skops, SOL_TCP, TCP_CONGESTION, cur, sizeof(cur))) {
		rcount(RSTAT_FAILED);
		return;
	}
	int capping = same_name(cur, cap_cc);
	long err = 0, switched = 0;
	if (v->rate < RATE_UNLIMITED && !capping) {
		switched = 1;
		__builtin_memcpy(d->prior_cc, cur, sizeof(cur));
		char want[CC_NAME_MAX];
#pragma unroll
		for (int i = 0; i < CC_NAME_MAX; i++)
			want[i] = cap_cc[i];
		err = bpf_setsockopt(skops, SOL_TCP, TCP_CONGESTION, want, sizeof(want));
	} else if (v->rate >= RATE_UNLIMITED && capping && d->prior_cc[0]) {
		switched = 1;
		char prior[CC_NAME_MAX];
		__builtin_memcpy(prior, d->prior_cc, sizeof(prior));
		err = bpf_setsockopt(skops, SOL_TCP, TCP_CONGESTION, prior, sizeof(prior));
	}
	if (err) {
		rcount(RSTAT_FAILED);
		return;
	}
	d->applied = v->rate;
	if (switched)
		rcount(RSTAT_CC_SWITCHED);
}

static __always_inline void apply(struct bpf_sock_ops *skops)
{
	struct flow_key k = {};
	k.family = skops->family;
	if (skops->family == AF_INET) {
		k.laddr[0] = skops->local_ip4;
		k.raddr[0] = skops->remote_ip4;
	} else if (skops->family == AF_INET6) {
		k.laddr[0] = skops->local_ip6[0];
		k.laddr[1] = skops->local_ip6[1];
		k.laddr[2] = skops->local_ip6[2];
		k.laddr[3] = skops->local_ip6[3];
		k.raddr[0] = skops->remote_ip6[0];
		k.raddr[1] = skops->remote_ip6[1];
		k.raddr[2] = skops->remote_ip6[2];
		k.raddr[3] = skops->remote_ip6[3];
	} else {
		return;
	}
	k.lport = skops->local_port;
	k.rport = bpf_ntohl(skops->remote_port);
	struct rate_val *v = bpf_map_lookup_elem(&rate_limit, &k);
	if (!v)
		return;
	struct rate_done *d = done_of(&k);
	if (!d) {
		rcount(RSTAT_FAILED);
		return;
	}
	if (v->via == VIA_CC) {
		if (d->applied != v->rate)
			apply_cc(skops, v, d);
		return;
	}
	if (d->applied != v->rate) {
		if (set_pacing(skops, v, d) == 0)
			rcount(RSTAT_SET);
		else
			rcount(RSTAT_FAILED);
	}
	if (notsent_due(v, d)) {
		struct bpf_sock *sk = skops->sk;
		struct tcp_sock *tp = sk ? bpf_skc_to_tcp_sock(sk) : 0;
		if (!tp || set_notsent(skops, tp, v, d))
			rcount(RSTAT_FAILED);
		else
			rcount(RSTAT_NOTSENT);
	}
}

SEC("sockops")
int mpsteer_rate(struct bpf_sock_ops *skops)
{
	switch (skops->op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB: {
		if (netns_cookie && bpf_get_netns_cookie(skops) != netns_cookie)
			return 1;
		struct bpf_sock *sk = skops->sk;
		if (!sk || !bpf_skc_to_mptcp_sock(sk))
			return 1; /* subflows only */
		rcount(RSTAT_SUBFLOWS);
		/* Called again on every ACK that updates the RTT: the rate the
		 * daemon writes takes effect within one ACK. */
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_RTT_CB_FLAG);
		apply(skops);
		return 1;
	}
	case BPF_SOCK_OPS_RTT_CB:
		apply(skops);
		return 1;
	}
	return 1;
}

char LICENSE[] SEC("license") = "GPL";
