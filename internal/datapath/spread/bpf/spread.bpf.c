// SPDX-License-Identifier: GPL-2.0
// The spread policy's datapath, on a hypervisor whose VMs speak MPTCP:
// every subflow of a VM's MPTCP connection leaves by a different uplink.
//
// spread_from, at TCX ingress of the VM-facing devices (a bridge, or each
// VM's tap/veth): a TCP SYN (without ACK) carrying MP_CAPABLE or MP_JOIN
// starts a subflow. When the hypervisor would route it out of one of the
// uplinks anyway (a FIB lookup, as for forwarding), it gets the next live
// uplink of its (VM address, remote address) pair, round-robin; the choice
// is kept per 5-tuple and every packet of the flow is marked mark_base +
// uplink, which the daemon's policy rules (fwmark → table with a default
// route out of that uplink) turn into the uplink. Anything else (not TCP,
// TCP without MPTCP, a destination not behind an uplink) is left alone and
// takes the hypervisor's own routes.
//
// spread_uplink, at TCX ingress of the uplinks: a SYN with MP_CAPABLE or
// MP_JOIN coming in (a subflow a remote host opens to a local VM) is
// remembered with the uplink it came in on, so that spread_from marks the
// VM's replies for that same uplink. It never marks: the packet is routed
// to the VM by the hypervisor's routes.
//
// Both return TCX_NEXT: other programs on the device still run, and with
// nothing after them the packet passes. When the daemon dies its TCX links
// go with it and traffic takes the hypervisor's routes again (fail open).
//
// Headers are read relative to the network header, so the programs work on
// L2 (bridge, veth) and L3 (TUN) devices alike.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define ETH_P_IP 0x0800
#define AF_INET 2
#define IPPROTO_TCP 6
#define IP_OFFSET 0x1fff
#define TCP_FLAG_SYN 0x02
#define TCP_FLAG_ACK 0x10
#define TCPOPT_EOL 0
#define TCPOPT_NOP 1
#define TCPOPT_MPTCP 30
#define MPTCPOPT_MP_CAPABLE 0
#define MPTCPOPT_MP_JOIN 1

#define MAX_UPLINKS 16

enum { MP_NONE, MP_CAPABLE, MP_JOIN };

struct uplink {
	__u32 ifindex;
	__u32 alive; // 1 while new flows may take it
};

// A (VM address, remote address) pair, as in the packet (network order).
struct pair_key {
	__u32 vm;
	__u32 remote;
};

struct pair_val {
	__u32 rr; // round-robin counter
};

// A flow as the VM sends it: VM → remote.
struct flow_key {
	__u32 vm;
	__u32 remote;
	__u16 vm_port;
	__u16 remote_port;
};

struct flow_val {
	__u32 uplink; // index into uplinks
	__u32 isn;    // the SYN's sequence number: a retransmitted SYN keeps its uplink
	__u32 remote_started; // learned at an uplink (the remote host opened it)
};

struct uplink_stats {
	__u64 flows;   // MP_CAPABLE SYNs from VMs assigned to it (new connections)
	__u64 joins;   // MP_JOIN SYNs from VMs assigned to it (further subflows)
	__u64 learned; // subflows opened by remote hosts that came in on it
	__u64 packets; // packets from VMs marked for it
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_UPLINKS);
	__type(key, __u32);
	__type(value, struct uplink);
} uplinks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct pair_key);
	__type(value, struct pair_val);
} pairs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct flow_key);
	__type(value, struct flow_val);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_UPLINKS);
	__type(key, __u32);
	__type(value, struct uplink_stats);
} stats SEC(".maps");

// Packets left alone, and why.
enum {
	CNT_NOT_MPTCP,      // a TCP SYN from a VM without MP_CAPABLE or MP_JOIN
	CNT_NOT_VIA_UPLINK, // an MPTCP SYN whose destination is not behind an uplink
	CNT_NO_LIVE_UPLINK, // an MPTCP SYN that found every uplink down
	CNT_MAX
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

// Set by the loader: how many uplinks there are, and the mark of uplink 0
// (uplink i is marked mark_base + i).
volatile const __u32 n_uplinks = 0;
volatile const __u32 mark_base = 0;

static __always_inline void count(__u32 i)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &i);
	if (c)
		*c += 1;
}

static __always_inline struct uplink_stats *stats_of(__u32 idx)
{
	return bpf_map_lookup_elem(&stats, &idx);
}

struct tcp_start {
	__be16 source;
	__be16 dest;
	__be32 seq;
	__be32 ack_seq;
	__u8 doff; // upper 4 bits
	__u8 flags;
};

// parse reads the IPv4 and TCP headers; 0 when the packet is not a TCP
// segment with a whole header.
static __always_inline int parse(struct __sk_buff *skb, struct iphdr *ip, struct tcp_start *th, __u32 *ihl)
{
	if (skb->protocol != bpf_htons(ETH_P_IP))
		return 0;
	if (bpf_skb_load_bytes_relative(skb, 0, ip, sizeof(*ip), BPF_HDR_START_NET))
		return 0;
	if (ip->protocol != IPPROTO_TCP || (ip->frag_off & bpf_htons(IP_OFFSET)))
		return 0;
	*ihl = ip->ihl * 4;
	if (*ihl < sizeof(*ip))
		return 0;
	if (bpf_skb_load_bytes_relative(skb, *ihl, th, sizeof(*th), BPF_HDR_START_NET))
		return 0;
	return 1;
}

static __always_inline int syn_only(const struct tcp_start *th)
{
	return (th->flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN;
}

// mptcp_kind finds the MPTCP option of a SYN: MP_CAPABLE, MP_JOIN or none.
static __always_inline int mptcp_kind(struct __sk_buff *skb, __u32 ihl, const struct tcp_start *th)
{
	__u8 opts[40] = {};
	__u32 olen = (th->doff >> 4) * 4;

	if (olen <= 20)
		return MP_NONE;
	olen -= 20;
	if (olen > 40)
		return MP_NONE;
	if (bpf_skb_load_bytes_relative(skb, ihl + 20, opts, olen, BPF_HDR_START_NET))
		return MP_NONE;
	__u32 i = 0;
	for (int k = 0; k < 40; k++) {
		if (i >= olen || i >= 39)
			break;
		__u8 kind = opts[i];
		if (kind == TCPOPT_EOL)
			break;
		if (kind == TCPOPT_NOP) {
			i++;
			continue;
		}
		__u8 len = opts[i + 1];
		if (len < 2)
			break;
		if (kind == TCPOPT_MPTCP) {
			if (i + 2 >= olen || i + 2 >= 40)
				break;
			__u8 sub = opts[i + 2] >> 4;
			if (sub == MPTCPOPT_MP_CAPABLE)
				return MP_CAPABLE;
			if (sub == MPTCPOPT_MP_JOIN)
				return MP_JOIN;
			return MP_NONE;
		}
		i += len;
	}
	return MP_NONE;
}

// uplink_index is the index of the uplink with this ifindex, or -1.
static __always_inline int uplink_index(__u32 ifindex)
{
	for (__u32 i = 0; i < MAX_UPLINKS; i++) {
		if (i >= n_uplinks)
			break;
		__u32 k = i;
		struct uplink *u = bpf_map_lookup_elem(&uplinks, &k);
		if (u && u->ifindex == ifindex)
			return i;
	}
	return -1;
}

static __always_inline int alive(__u32 i)
{
	struct uplink *u = bpf_map_lookup_elem(&uplinks, &i);
	return u && u->alive;
}

// via_uplink: would the hypervisor forward this packet out of an uplink?
static __always_inline int via_uplink(struct __sk_buff *skb, const struct iphdr *ip, const struct tcp_start *th)
{
	struct bpf_fib_lookup p = {};

	p.family = AF_INET;
	p.l4_protocol = IPPROTO_TCP;
	p.sport = th->source;
	p.dport = th->dest;
	p.tot_len = bpf_ntohs(ip->tot_len);
	p.tos = ip->tos;
	p.ipv4_src = ip->saddr;
	p.ipv4_dst = ip->daddr;
	p.ifindex = skb->ingress_ifindex;
	long r = bpf_fib_lookup(skb, &p, sizeof(p), BPF_FIB_LOOKUP_SKIP_NEIGH);
	if (r != BPF_FIB_LKUP_RET_SUCCESS && r != BPF_FIB_LKUP_RET_NO_NEIGH && r != BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return 0;
	return uplink_index(p.ifindex) >= 0;
}

// pick returns the pair's next live uplink, round-robin, or -1.
static __always_inline int pick(const struct pair_key *pk)
{
	struct pair_val *pv = bpf_map_lookup_elem(&pairs, pk);
	if (!pv) {
		struct pair_val zero = {};
		bpf_map_update_elem(&pairs, pk, &zero, BPF_NOEXIST);
		pv = bpf_map_lookup_elem(&pairs, pk);
		if (!pv)
			return -1;
	}
	__u32 live = 0;
	for (__u32 i = 0; i < MAX_UPLINKS; i++) {
		if (i >= n_uplinks)
			break;
		if (alive(i))
			live++;
	}
	if (!live)
		return -1;
	__u32 t = __sync_fetch_and_add(&pv->rr, 1) % live;
	for (__u32 i = 0; i < MAX_UPLINKS; i++) {
		if (i >= n_uplinks)
			break;
		if (!alive(i))
			continue;
		if (t == 0)
			return i;
		t--;
	}
	return -1;
}

static __always_inline void mark(struct __sk_buff *skb, __u32 idx)
{
	struct uplink_stats *st = stats_of(idx);
	if (st)
		st->packets++;
	skb->mark = mark_base + idx;
}

SEC("tc")
int spread_from(struct __sk_buff *skb)
{
	struct iphdr ip;
	struct tcp_start th;
	__u32 ihl;

	if (!parse(skb, &ip, &th, &ihl))
		return TCX_NEXT;
	struct flow_key fk = {.vm = ip.saddr, .remote = ip.daddr, .vm_port = th.source, .remote_port = th.dest};
	struct flow_val *fv = bpf_map_lookup_elem(&flows, &fk);
	if (!syn_only(&th)) {
		if (fv)
			mark(skb, fv->uplink);
		return TCX_NEXT;
	}
	// A SYN: a retransmission of a known one keeps its uplink; anything
	// else starts a flow (a reused 5-tuple included).
	if (fv && fv->isn == th.seq) {
		mark(skb, fv->uplink);
		return TCX_NEXT;
	}
	int mp = mptcp_kind(skb, ihl, &th);
	if (mp == MP_NONE) {
		if (fv)
			bpf_map_delete_elem(&flows, &fk);
		count(CNT_NOT_MPTCP);
		return TCX_NEXT;
	}
	if (!via_uplink(skb, &ip, &th)) {
		if (fv)
			bpf_map_delete_elem(&flows, &fk);
		count(CNT_NOT_VIA_UPLINK);
		return TCX_NEXT;
	}
	struct pair_key pk = {.vm = ip.saddr, .remote = ip.daddr};
	int idx = pick(&pk);
	if (idx < 0 || idx >= MAX_UPLINKS) {
		if (fv)
			bpf_map_delete_elem(&flows, &fk);
		count(CNT_NO_LIVE_UPLINK);
		return TCX_NEXT;
	}
	struct flow_val nv = {.uplink = idx, .isn = th.seq};
	bpf_map_update_elem(&flows, &fk, &nv, BPF_ANY);
	struct uplink_stats *st = stats_of(idx);
	if (st) {
		if (mp == MP_CAPABLE)
			st->flows++;
		else
			st->joins++;
	}
	mark(skb, idx);
	return TCX_NEXT;
}

SEC("tc")
int spread_uplink(struct __sk_buff *skb)
{
	struct iphdr ip;
	struct tcp_start th;
	__u32 ihl;

	if (!parse(skb, &ip, &th, &ihl) || !syn_only(&th))
		return TCX_NEXT;
	if (mptcp_kind(skb, ihl, &th) == MP_NONE)
		return TCX_NEXT;
	int idx = uplink_index(skb->ingress_ifindex);
	if (idx < 0 || idx >= MAX_UPLINKS)
		return TCX_NEXT;
	// The flow as the local VM will send its replies.
	struct flow_key fk = {.vm = ip.daddr, .remote = ip.saddr, .vm_port = th.dest, .remote_port = th.source};
	struct flow_val *fv = bpf_map_lookup_elem(&flows, &fk);
	if (fv && fv->isn == th.seq && fv->remote_started)
		return TCX_NEXT; // a retransmitted SYN
	struct flow_val nv = {.uplink = idx, .isn = th.seq, .remote_started = 1};
	bpf_map_update_elem(&flows, &fk, &nv, BPF_ANY);
	struct uplink_stats *st = stats_of(idx);
	if (st)
		st->learned++;
	return TCX_NEXT;
}

char LICENSE[] SEC("license") = "GPL";
