// SPDX-License-Identifier: GPL-2.0
// Asks the kernel which socket options a sockops program may set, on a
// real connection: when a socket of the probe's network namespace
// connects, it tries SO_MAX_PACING_RATE (the rate caps) and
// TCP_RTO_MAX_MS (rto_max), and keeps each call's return value.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#define SOL_SOCKET 1
#define SOL_TCP 6
#define SO_MAX_PACING_RATE 47
#define TCP_RTO_MAX_MS 44

enum { R_RAN, R_PACING, R_RTO_MAX, R_MAX };

// What each call returned (R_RAN: 1 once the program ran).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, R_MAX);
	__type(key, __u32);
	__type(value, __s64);
} results SEC(".maps");

// Set by the loader: only sockets made in this network namespace.
volatile const __u64 netns_cookie = 0;

static __always_inline void put(__u32 k, __s64 v)
{
	bpf_map_update_elem(&results, &k, &v, BPF_ANY);
}

SEC("sockops")
int mpsteer_sockopt_probe(struct bpf_sock_ops *skops)
{
	if (skops->op != BPF_SOCK_OPS_TCP_CONNECT_CB)
		return 1;
	if (bpf_get_netns_cookie(skops) != netns_cookie)
		return 1;
	int rate = 1000000;
	put(R_PACING, bpf_setsockopt(skops, SOL_SOCKET, SO_MAX_PACING_RATE, &rate, sizeof(rate)));
	int ms = 5000;
	put(R_RTO_MAX, bpf_setsockopt(skops, SOL_TCP, TCP_RTO_MAX_MS, &ms, sizeof(ms)));
	put(R_RAN, 1);
	return 1;
}

char _license[] SEC("license") = "GPL";
