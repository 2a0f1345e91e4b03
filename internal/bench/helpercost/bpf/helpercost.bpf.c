// SPDX-License-Identifier: GPL-2.0
// What single kernel helpers cost, for the datapath benchmark: each
// program calls one helper the way a chain's actor does, on the bench's
// packet (Ethernet, IPv4 without options, TCP with 20 bytes of options),
// and does nothing else. Timed beside a program that only returns, the
// difference is the helper's cost: the floor under an actor that needs
// it, whatever the actor's own code does.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define TCX_NEXT -1
#define L4 34 /* Ethernet (14) + IPv4 without options (20) */

/* The flow the lookups look for (as in an incoming packet: its source is
 * the peer), network byte order; set by the loader. */
volatile const __u32 saddr, daddr;
volatile const __u16 sport, dport;

/* Lookups that found a socket (the benchmark checks every one did). */
__u64 found;

/* bpf_sk_lookup_tcp and bpf_sk_release: finding the packet's socket. */
SEC("tc")
int sk_lookup(struct __sk_buff *skb)
{
	struct bpf_sock_tuple t = {};
	t.ipv4.saddr = saddr;
	t.ipv4.daddr = daddr;
	t.ipv4.sport = sport;
	t.ipv4.dport = dport;
	struct bpf_sock *sk = bpf_sk_lookup_tcp(skb, &t, sizeof(t.ipv4), BPF_F_CURRENT_NETNS, 0);
	if (sk) {
		__sync_fetch_and_add(&found, 1);
		bpf_sk_release(sk);
	}
	return TCX_NEXT;
}

/* bpf_skb_load_bytes of the TCP header (40 bytes). */
SEC("tc")
int load_bytes(struct __sk_buff *skb)
{
	__u8 b[40];
	if (bpf_skb_load_bytes(skb, L4, b, sizeof(b)))
		return 0;
	return TCX_NEXT;
}

/* bpf_skb_store_bytes of 4 bytes (the window and its checksum). */
SEC("tc")
int store_bytes(struct __sk_buff *skb)
{
	__u32 w = 0;
	bpf_skb_store_bytes(skb, L4 + 14, &w, sizeof(w), 0);
	return TCX_NEXT;
}

/* bpf_l4_csum_replace of the TCP checksum by a difference. */
SEC("tc")
int l4_csum_replace(struct __sk_buff *skb)
{
	bpf_l4_csum_replace(skb, L4 + 16, 0, 0x1234, 0);
	return TCX_NEXT;
}

/* bpf_csum_diff of 20 bytes against 20 others. */
SEC("tc")
int csum_diff(struct __sk_buff *skb)
{
	__u32 a[5] = {skb->len, 2, 3, 4, 5}, b[5] = {5, 4, 3, 2, skb->len};
	__s64 d = bpf_csum_diff(a, sizeof(a), b, sizeof(b), 0);
	return d < 0 ? 0 : TCX_NEXT;
}

/* bpf_skb_change_tail by 4 bytes: how a pure ACK grows for an option
 * (one run per packet: the kernel's repeat loop would grow it again). */
SEC("tc")
int change_tail(struct __sk_buff *skb)
{
	if (bpf_skb_change_tail(skb, skb->len + 4, 0))
		return 0;
	return TCX_NEXT;
}

/* bpf_ktime_get_ns. */
SEC("tc")
int ktime(struct __sk_buff *skb)
{
	volatile __u64 t = bpf_ktime_get_ns();
	(void)t;
	return TCX_NEXT;
}

/* A hash map keyed like the kept ADD_ADDR options (48 bytes). */
struct key48 {
	__u32 w[12];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct key48);
	__type(value, struct key48);
} kept SEC(".maps");

/* bpf_map_lookup_elem of a 48-byte key that is there (the first run
 * puts it there). */
SEC("tc")
int hash_lookup(struct __sk_buff *skb)
{
	struct key48 k = {};
	k.w[0] = saddr;
	k.w[4] = daddr;
	if (!bpf_map_lookup_elem(&kept, &k))
		bpf_map_update_elem(&kept, &k, &k, BPF_ANY);
	return TCX_NEXT;
}

/* bpf_ktime_get_coarse_ns. */
SEC("tc")
int ktime_coarse(struct __sk_buff *skb)
{
	volatile __u64 t = bpf_ktime_get_coarse_ns();
	(void)t;
	return TCX_NEXT;
}

char LICENSE[] SEC("license") = "GPL";
