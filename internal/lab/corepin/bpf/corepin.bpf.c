// SPDX-License-Identifier: GPL-2.0
// Pins each new TCP flow to one core link of its (client address, server
// address) pair, round-robin over the pair's live links, the way the
// M-fullmesh poster's SDN controller (a Floodlight module) does. Attached
// at TCX ingress of r1's client-facing devices (forward direction: the
// flow is assigned) and r2's server-facing devices (reverse direction: the
// flow's choice is looked up). It only sets skb->mark; policy rules
// (fwmark → table) in the router route the packet over the chosen link.
// Traffic it does not know (not TCP, no pair, no live link) is left alone
// and takes the routers' ECMP routes.
//
// Headers are read relative to the network header, so the program works
// on L2 (veth) and L3 (TUN) devices alike.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define TC_ACT_OK 0
#define ETH_P_IP 0x0800
#define IPPROTO_TCP 6
#define IP_MF 0x2000
#define IP_OFFSET 0x1fff
#define TCP_FLAG_SYN 0x02
#define TCP_FLAG_ACK 0x10

#define MAX_LINKS 256  // core links in all (their ids index the arrays)
#define MAX_PER_PAIR 16

// Addresses as they are in the packet (network byte order).
struct pair_key {
	__u32 client;
	__u32 server;
};

struct pair_val {
	__u32 n;  // links of the pair
	__u32 rr; // round-robin counter
	__u32 links[MAX_PER_PAIR];
};

// A flow in its forward orientation (client → server).
struct flow_key {
	__u32 client;
	__u32 server;
	__u16 cport;
	__u16 sport;
};

struct flow_val {
	__u32 link;
	__u32 isn; // the SYN's sequence number: a retransmitted SYN keeps its link
};

struct link_stats {
	__u64 flows;   // flows pinned to the link
	__u64 fwd;     // packets marked for it at r1
	__u64 rev;     // packets marked for it at r2
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct pair_key);
	__type(value, struct pair_val);
} pairs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct flow_key);
	__type(value, struct flow_val);
} flows SEC(".maps");

// 1 while the link is up, as the controller sees it.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_LINKS);
	__type(key, __u32);
	__type(value, __u32);
} alive SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_LINKS);
	__type(key, __u32);
	__type(value, struct link_stats);
} stats SEC(".maps");

enum { CNT_NOLIVE, CNT_UNPINNED_REV, CNT_MAX };

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

// Link id n is marked mark_base + n (set by the loader).
volatile const __u32 mark_base = 0x100;

static __always_inline void count(__u32 i)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &i);
	if (c)
		__sync_fetch_and_add(c, 1);
}

static __always_inline int is_alive(__u32 link)
{
	__u32 *a = bpf_map_lookup_elem(&alive, &link);
	return a && *a;
}

// pick returns the next live link of the pair, round-robin, or -1.
static __always_inline __s64 pick(struct pair_val *pv)
{
	__u32 n = pv->n, live = 0, i;
	if (n > MAX_PER_PAIR)
		n = MAX_PER_PAIR;
	for (i = 0; i < MAX_PER_PAIR; i++) {
		if (i >= n)
			break;
		if (is_alive(pv->links[i]))
			live++;
	}
	if (!live)
		return -1;
	__u32 t = __sync_fetch_and_add(&pv->rr, 1) % live;
	for (i = 0; i < MAX_PER_PAIR; i++) {
		if (i >= n)
			break;
		if (!is_alive(pv->links[i]))
			continue;
		if (t == 0)
			return pv->links[i];
		t--;
	}
	return -1;
}

static __always_inline void stat_add(__u32 link, int flow, int fwd)
{
	struct link_stats *st = bpf_map_lookup_elem(&stats, &link);
	if (!st)
		return;
	if (flow)
		__sync_fetch_and_add(&st->flows, 1);
	if (fwd)
		__sync_fetch_and_add(&st->fwd, 1);
	else
		__sync_fetch_and_add(&st->rev, 1);
}

struct tcp_start {
	__be16 source;
	__be16 dest;
	__be32 seq;
	__be32 ack_seq;
	__u8 doff;
	__u8 flags;
};

SEC("tc")
int corepin(struct __sk_buff *skb)
{
	struct iphdr ip;
	struct tcp_start th;

	if (skb->protocol != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	if (bpf_skb_load_bytes_relative(skb, 0, &ip, sizeof(ip), BPF_HDR_START_NET))
		return TC_ACT_OK;
	if (ip.protocol != IPPROTO_TCP || (ip.frag_off & bpf_htons(IP_OFFSET)))
		return TC_ACT_OK;
	__u32 ihl = ip.ihl * 4;
	if (ihl < sizeof(ip))
		return TC_ACT_OK;
	if (bpf_skb_load_bytes_relative(skb, ihl, &th, sizeof(th), BPF_HDR_START_NET))
		return TC_ACT_OK;

	struct pair_key pk = {.client = ip.saddr, .server = ip.daddr};
	struct pair_val *pv = bpf_map_lookup_elem(&pairs, &pk);
	if (pv) {
		// Forward: client → server, at r1.
		struct flow_key fk = {.client = ip.saddr, .server = ip.daddr, .cport = th.source, .sport = th.dest};
		int syn = (th.flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN;
		__u32 isn = syn ? th.seq : 0;
		struct flow_val *fv = bpf_map_lookup_elem(&flows, &fk);
		__u32 link;
		if (fv && (!syn || fv->isn == isn)) {
			link = fv->link;
		} else {
			// A new flow (or a new connection on a reused 5-tuple): the
			// controller picks the pair's next live link.
			__s64 l = pick(pv);
			if (l < 0) {
				count(CNT_NOLIVE);
				return TC_ACT_OK;
			}
			link = (__u32)l;
			struct flow_val nv = {.link = link, .isn = isn};
			bpf_map_update_elem(&flows, &fk, &nv, BPF_ANY);
			stat_add(link, 1, 1);
			skb->mark = mark_base + link;
			return TC_ACT_OK;
		}
		stat_add(link, 0, 1);
		skb->mark = mark_base + link;
		return TC_ACT_OK;
	}
	// Reverse: server → client, at r2: the flow's link, if it has one.
	struct pair_key rk = {.client = ip.daddr, .server = ip.saddr};
	if (!bpf_map_lookup_elem(&pairs, &rk))
		return TC_ACT_OK;
	struct flow_key fk = {.client = ip.daddr, .server = ip.saddr, .cport = th.dest, .sport = th.source};
	struct flow_val *fv = bpf_map_lookup_elem(&flows, &fk);
	if (!fv) {
		count(CNT_UNPINNED_REV);
		return TC_ACT_OK;
	}
	stat_add(fv->link, 0, 0);
	skb->mark = mark_base + fv->link;
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
