// SPDX-License-Identifier: GPL-2.0
// Caps the retransmission timeout of MPTCP subflows whose local address is
// in the rto_max map (the prefer policy's faster loss recovery: the paper
// stops the RTO from doubling on the preferred path; the kernel's own tool
// is TCP_RTO_MAX_MS, which a sockops program may set per socket), and sets
// the SYN timeout of joining subflows (MP_JOIN) whose local address is in
// the syn_rto map (the prefer policy's probes of a path that went silent:
// the kernel retransmits a SYN at this interval, tcp_syn_linear_timeouts
// times, before it backs off; a probe gets 127 retries and a backoff
// capped at a second, so that it probes for as long as the path is silent).
// When such a probe is answered, its window starts at the usual initial
// window again: the kernel starts a subflow whose SYN was retransmitted
// with a window of one segment (RFC 5681's guard against a congested
// path), but a probe's SYNs were lost because the path was down, not
// congested, and one segment would take five round trips to fill the path.
// rtoexisting.bpf.c gives subflows that were established before what this
// program gives new ones.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#define SOL_TCP 6
#define TCP_SYNCNT 7
#define TCP_RTO_MAX_MS 44
#define TCP_BPF_IW 1001
#define TCP_INIT_CWND 10
#define AF_INET 2
#define AF_INET6 10

struct addr_key {
	__u32 family;
	__u32 addr[4]; // network byte order, IPv4 in addr[0]
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct addr_key);
	__type(value, __u32); // RTO max in milliseconds
} rto_max SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct addr_key);
	__type(value, __u32); // SYN timeout in jiffies
} syn_rto SEC(".maps");

enum { STAT_SEEN, STAT_MPTCP, STAT_SET, STAT_FAILED, STAT_SYN, STAT_IW, STAT_MAX };

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} rto_stats SEC(".maps");

// Set by the loader: only sockets of this network namespace are touched.
volatile const __u64 netns_cookie = 0;

static __always_inline void count(__u32 i)
{
	__u64 *v = bpf_map_lookup_elem(&rto_stats, &i);
	if (v)
		__sync_fetch_and_add(v, 1);
}

static __always_inline int local_key(struct bpf_sock_ops *skops, struct addr_key *key)
{
	key->family = skops->family;
	if (skops->family == AF_INET) {
		key->addr[0] = skops->local_ip4;
	} else if (skops->family == AF_INET6) {
		key->addr[0] = skops->local_ip6[0];
		key->addr[1] = skops->local_ip6[1];
		key->addr[2] = skops->local_ip6[2];
		key->addr[3] = skops->local_ip6[3];
	} else {
		return -1;
	}
	return 0;
}

// syn_timeout answers BPF_SOCK_OPS_TIMEOUT_INIT: the SYN timeout of a
// joining subflow from an address in syn_rto (its connection is
// established: the first subflow of a connection keeps the default), or
// -1 for the kernel's default.
static __always_inline int syn_timeout(struct bpf_sock_ops *skops)
{
	struct bpf_sock *sk = skops->sk;
	if (!sk)
		return -1;
	struct mptcp_sock *msk = bpf_skc_to_mptcp_sock(sk);
	if (!msk)
		return -1;
	if (BPF_CORE_READ(msk, sk.icsk_inet.sk.__sk_common.skc_state) != 1 /* TCP_ESTABLISHED */)
		return -1;
	struct addr_key key = {};
	if (local_key(skops, &key))
		return -1;
	__u32 *j = bpf_map_lookup_elem(&syn_rto, &key);
	if (!j || !*j)
		return -1;
	// A probe keeps probing: the most SYN retries the kernel allows, and
	// its backoff capped at a second (TCP_RTO_MAX_MS cannot go lower).
	int retries = 127, rto_max_ms = 1000;
	bpf_setsockopt(skops, SOL_TCP, TCP_SYNCNT, &retries, sizeof(retries));
	bpf_setsockopt(skops, SOL_TCP, TCP_RTO_MAX_MS, &rto_max_ms, sizeof(rto_max_ms));
	count(STAT_SYN);
	return *j;
}

SEC("sockops")
int mpsteer_rto(struct bpf_sock_ops *skops)
{
	if (netns_cookie && bpf_get_netns_cookie(skops) != netns_cookie)
		return 1; // a reply of 0 keeps the kernel's SYN timeout
	if (skops->op == BPF_SOCK_OPS_TIMEOUT_INIT) {
		skops->reply = syn_timeout(skops);
		return 1;
	}
	if (skops->op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB &&
	    skops->op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		return 1;
	count(STAT_SEEN);
	struct bpf_sock *sk = skops->sk;
	if (!sk)
		return 1;
	// Subflows only: plain TCP sockets have no MPTCP parent.
	struct mptcp_sock *msk = bpf_skc_to_mptcp_sock(sk);
	if (!msk)
		return 1;
	count(STAT_MPTCP);

	struct addr_key key = {};
	if (local_key(skops, &key))
		return 1;
	// An answered probe: the window its SYN retransmissions cut to one
	// segment back to the initial window (before any data is sent: the
	// kernel allows TCP_BPF_IW only then).
	if (skops->op == BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB && skops->snd_cwnd < TCP_INIT_CWND &&
	    skops->total_retrans > 1 && bpf_map_lookup_elem(&syn_rto, &key)) {
		int iw = TCP_INIT_CWND;
		if (bpf_setsockopt(skops, SOL_TCP, TCP_BPF_IW, &iw, sizeof(iw)) == 0)
			count(STAT_IW);
	}
	__u32 *ms = bpf_map_lookup_elem(&rto_max, &key);
	if (!ms)
		return 1;
	int val = *ms;
	if (bpf_setsockopt(skops, SOL_TCP, TCP_RTO_MAX_MS, &val, sizeof(val)) == 0)
		count(STAT_SET);
	else
		count(STAT_FAILED);
	return 1;
}

char LICENSE[] SEC("license") = "GPL";
