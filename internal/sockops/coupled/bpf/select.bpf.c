// SPDX-License-Identifier: GPL-2.0
// Puts MPTCP subflows on a coupled congestion control: on a subflow's
// establishment (either side), in the daemon's network namespace, the
// program sets its TCP_CONGESTION to cc_name. Plain TCP sockets keep the
// host's default. Attached to the cgroup of each scope that wants the
// algorithm (the hierarchy's root for every connection); subflows are in
// their connection's cgroup. Programs of a cgroup run before those of
// its ancestors, so a subflow a deeper scope's program has already put on
// a coupled congestion control is left as it is: the innermost scope
// decides.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#define SOL_TCP 6
#define TCP_CONGESTION 13
#define CC_NAME_MAX 16

volatile const __u64 netns_cookie = 0;
volatile const char cc_name[CC_NAME_MAX] = {};

enum { SST_SUBFLOWS, SST_SET, SST_KEPT, SST_FAILED, SST_MAX };

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SST_MAX);
	__type(key, __u32);
	__type(value, __u64);
} select_stats SEC(".maps");

/* Coupled congestion controls are named mpslia_PID and mpsbal_PID (the
 * loader's names; mpscap_PID is the rate cap's, which is not one). */
static __always_inline int is_coupled(const char *n)
{
	if (n[0] != 'm' || n[1] != 'p' || n[2] != 's' || n[6] != '_')
		return 0;
	return (n[3] == 'l' && n[4] == 'i' && n[5] == 'a') || (n[3] == 'b' && n[4] == 'a' && n[5] == 'l');
}

static __always_inline void scount(__u32 i)
{
	__u64 *v = bpf_map_lookup_elem(&select_stats, &i);
	if (v)
		__sync_fetch_and_add(v, 1);
}

SEC("sockops")
int mpsteer_coupled(struct bpf_sock_ops *skops)
{
	if (skops->op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB && skops->op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		return 1;
	if (netns_cookie && bpf_get_netns_cookie(skops) != netns_cookie)
		return 1;
	struct bpf_sock *sk = skops->sk;
	if (!sk || !bpf_skc_to_mptcp_sock(sk))
		return 1; /* subflows only */
	scount(SST_SUBFLOWS);
	char cur[CC_NAME_MAX] = {};
	if (bpf_getsockopt(skops, SOL_TCP, TCP_CONGESTION, cur, sizeof(cur))) {
		scount(SST_FAILED);
		return 1;
	}
	if (is_coupled(cur)) {
		scount(SST_KEPT); /* a deeper scope's algorithm */
		return 1;
	}
	char want[CC_NAME_MAX];
#pragma unroll
	for (int i = 0; i < CC_NAME_MAX; i++)
		want[i] = cc_name[i];
	if (bpf_setsockopt(skops, SOL_TCP, TCP_CONGESTION, want, sizeof(want)))
		scount(SST_FAILED);
	else
		scount(SST_SET);
	return 1;
}

char LICENSE[] SEC("license") = "GPL";
