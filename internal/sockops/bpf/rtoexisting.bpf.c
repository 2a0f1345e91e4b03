// SPDX-License-Identifier: GPL-2.0
// An iterator over the TCP sockets of the namespace that reads it: on each
// MPTCP subflow it sets what rto.bpf.c's sockops program sets when a
// subflow is established (TCP_RTO_MAX_MS for a local address in rto_max,
// the loader handing it that program's map) and TCP_NOTSENT_LOWAT from
// existing_conf: for subflows that were established before the daemon
// wanted it (a policy given at run time, a daemon started after its
// connections). The iterator holds each socket's lock, as bpf_setsockopt
// needs.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "ccname.h"

#define SOL_TCP 6
#define TCP_RTO_MAX_MS 44
#define TCP_NOTSENT_LOWAT 25
#define TCP_LISTEN 10
#define TCP_CLOSE 7
#define AF_INET 2
#define AF_INET6 10

struct addr_key {
	__u32 family;
	__u32 addr[4]; // network byte order, IPv4 in addr[0]
};

// rto.bpf.c's map (replaced by the loader).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct addr_key);
	__type(value, __u32); // RTO max in milliseconds
} rto_max SEC(".maps");

struct existing_conf {
	__u32 notsent_lowat; // 0: left alone
	// ... and left alone on subflows of these congestion controls
	// (health.bpf.c's lowat_except).
	char lowat_except[CC_LIST_MAX][CC_NAME_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct existing_conf);
} existing_conf SEC(".maps");

enum { EX_SET, EX_FAILED, EX_LOWAT_EXCEPT, EX_MAX };

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, EX_MAX);
	__type(key, __u32);
	__type(value, __u64);
} existing_stats SEC(".maps");

static __always_inline void count(__u32 i)
{
	__u64 *v = bpf_map_lookup_elem(&existing_stats, &i);
	if (v)
		__sync_fetch_and_add(v, 1);
}

static __always_inline void set(struct tcp_sock *tp, int opt, int val)
{
	if (bpf_setsockopt(tp, SOL_TCP, opt, &val, sizeof(val)) == 0)
		count(EX_SET);
	else
		count(EX_FAILED);
}

SEC("iter/tcp")
int mpsteer_rto_existing(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	if (!skc)
		return 0;
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(skc); // full sockets only
	if (!tp)
		return 0;
	__u8 state = skc->skc_state;
	if (state == TCP_LISTEN || state == TCP_CLOSE)
		return 0;
	if (!BPF_CORE_READ_BITFIELD(tp, is_mptcp) || !tp->inet_conn.icsk_ulp_data)
		return 0; // subflows only
	struct addr_key key = {.family = skc->skc_family};
	if (key.family == AF_INET) {
		key.addr[0] = skc->skc_rcv_saddr;
	} else if (key.family == AF_INET6) {
		key.addr[0] = skc->skc_v6_rcv_saddr.in6_u.u6_addr32[0];
		key.addr[1] = skc->skc_v6_rcv_saddr.in6_u.u6_addr32[1];
		key.addr[2] = skc->skc_v6_rcv_saddr.in6_u.u6_addr32[2];
		key.addr[3] = skc->skc_v6_rcv_saddr.in6_u.u6_addr32[3];
	} else {
		return 0;
	}
	__u32 *ms = bpf_map_lookup_elem(&rto_max, &key);
	if (ms)
		set(tp, TCP_RTO_MAX_MS, *ms);
	__u32 zero = 0;
	struct existing_conf *c = bpf_map_lookup_elem(&existing_conf, &zero);
	if (c && c->notsent_lowat) {
		if (cc_listed(tp, c->lowat_except))
			count(EX_LOWAT_EXCEPT);
		else
			set(tp, TCP_NOTSENT_LOWAT, c->notsent_lowat);
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
