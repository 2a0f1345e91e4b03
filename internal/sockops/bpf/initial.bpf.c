// SPDX-License-Identifier: GPL-2.0
// Keeps MPTCP connections from opening their initial subflow on a path the
// user marked volatile (the prefer policy's avoid_initial): at connect(),
// the first subflow of an MPTCP socket that is not bound to an address yet
// is bound to the address in initial_addr, so that it leaves by that
// address's path whatever the routing table would have picked. Plain TCP
// sockets, sockets the application bound, joining subflows (the kernel binds
// them) and loopback destinations are left alone.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define AF_INET 2

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32); // IPv4 address, network byte order; 0: leave alone
} initial_addr SEC(".maps");

enum { STAT_CONNECTS, STAT_MPTCP, STAT_BOUND, STAT_FAILED, STAT_MAX };

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} initial_stats SEC(".maps");

// Set by the loader: only sockets of this network namespace are touched.
volatile const __u64 netns_cookie = 0;

static __always_inline void count(__u32 i)
{
	__u64 *v = bpf_map_lookup_elem(&initial_stats, &i);
	if (v)
		__sync_fetch_and_add(v, 1);
}

SEC("cgroup/connect4")
int mpsteer_initial(struct bpf_sock_addr *ctx)
{
	if (netns_cookie && bpf_get_netns_cookie(ctx) != netns_cookie)
		return 1;
	count(STAT_CONNECTS);
	struct bpf_sock *sk = ctx->sk;
	if (!sk)
		return 1;
	// MPTCP connects through its first subflow, a TCP socket with an
	// MPTCP parent: the hook runs on it.
	if (!bpf_skc_to_mptcp_sock(sk))
		return 1;
	count(STAT_MPTCP);
	if (sk->src_ip4)
		return 1; // bound: a join, or the application's choice
	if ((bpf_ntohl(ctx->user_ip4) >> 24) == 127)
		return 1;
	__u32 zero = 0;
	__u32 *addr = bpf_map_lookup_elem(&initial_addr, &zero);
	if (!addr || !*addr)
		return 1;
	struct sockaddr_in sa = {};
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = *addr;
	if (bpf_bind(ctx, (struct sockaddr *)&sa, sizeof(sa)) == 0)
		count(STAT_BOUND);
	else
		count(STAT_FAILED);
	return 1;
}

char LICENSE[] SEC("license") = "GPL";
