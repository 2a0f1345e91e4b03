// SPDX-License-Identifier: GPL-2.0
// The path-health option's C (health.h) in programs BPF_PROG_TEST_RUN can
// run: sockops programs cannot be run that way, so the tests feed packets
// to these tc programs, which find the option the way the kernel's
// bpf_load_hdr_opt does and hand it to the same parser the sockops program
// uses, or size and encode a report for the room the packet's options
// leave, as the sockops writer does. ht_strip blanks the option in passing
// packets (a middlebox that strips unknown options), for the end-to-end
// tests.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "health.h"

#define TC_ACT_OK 0
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define IPPROTO_TCP 6
#define TCPOPT_EOL 0
#define TCPOPT_NOP 1

// Bytes before the IP header: 14 on Ethernet (and BPF_PROG_TEST_RUN), 0 on
// an L3 device such as the lab's TUN links.
volatile const __u32 nh_off = 14;

// Walk results.
enum {
	HT_FOUND = 0,
	HT_NONE = 1,      // no option of ours
	HT_NOT_TCP = 2,
	HT_MALFORMED = 3, // the option list itself is broken (the kernel's -EFAULT)
};

struct ht_out {
	__s32 walk;   // HT_*
	__s32 parsed; // hl_parse: entries (> 0) or -hl_status
	__u32 valid;  // bit per valid entry
	__u32 off;    // where the option starts in the TCP options
	__u32 room;   // option space the packet leaves (writer)
	__s32 fit;    // entries that fit (writer)
	__s32 len;    // bytes encoded (writer)
	__u32 stripped;
	struct hl_entry e[HL_MAX_PATHS];
	__u8 buf[HL_SCRATCH]; // the option as copied (parse) or encoded (writer)
};

// The packet's options, where the verifier bounds a variable index.
struct ht_scratch {
	__u8 opts[HL_SCRATCH];
	__u8 buf[HL_SCRATCH];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ht_scratch);
} ht_scratch SEC(".maps");

static __always_inline struct ht_scratch *scratch(void)
{
	__u32 k = 0;
	struct ht_scratch *s = bpf_map_lookup_elem(&ht_scratch, &k);
	if (s)
		__builtin_memset(s, 0, sizeof(*s));
	return s;
}

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ht_out);
} ht_result SEC(".maps");

// The writer's input: n paths' entries.
struct ht_in {
	__u32 n;
	struct hl_entry e[HL_MAX_PATHS];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ht_in);
} ht_input SEC(".maps");

// Packets stripped by ht_strip, and packets it saw with the option where
// it could not strip it.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} ht_strip_stats SEC(".maps");

// tcp_at finds the TCP header: its offset from skb->data and the length of
// its options (0..40). -1 if the packet is not TCP.
static __always_inline int tcp_at(struct __sk_buff *skb, __u32 *tcp_off, __u32 *optlen)
{
	__u32 off = nh_off;
	__u8 vihl;
	if (bpf_skb_load_bytes(skb, off, &vihl, 1))
		return -1;
	__u32 l4;
	if ((vihl >> 4) == 4) {
		__u8 proto;
		__u16 frag;
		if (bpf_skb_load_bytes(skb, off + 9, &proto, 1) || proto != IPPROTO_TCP)
			return -1;
		if (bpf_skb_load_bytes(skb, off + 6, &frag, 2) || (bpf_ntohs(frag) & 0x1fff))
			return -1;
		__u32 ihl = (vihl & 0x0f) * 4;
		if (ihl < 20)
			return -1;
		l4 = off + ihl;
	} else if ((vihl >> 4) == 6) {
		__u8 nh;
		if (bpf_skb_load_bytes(skb, off + 6, &nh, 1) || nh != IPPROTO_TCP)
			return -1;
		l4 = off + 40;
	} else {
		return -1;
	}
	__u8 doff;
	if (bpf_skb_load_bytes(skb, l4 + 12, &doff, 1))
		return -1;
	__u32 hl = (doff >> 4) * 4;
	if (hl < 20)
		return -1;
	*tcp_off = l4;
	*optlen = hl - 20;
	return 0;
}

// find walks the options (opts holds optlen bytes) as the kernel does and
// copies ours into buf; *n is how many of its bytes the packet holds.
static __always_inline int find(const __u8 *opts, __u32 optlen, __u8 *buf, int *n, __u32 *at)
{
	__u32 i = 0;
	for (int it = 0; it < HL_BUF; it++) {
		if (i >= optlen || i >= HL_BUF)
			return HT_NONE;
		__u8 kind = opts[i & HL_MASK];
		if (kind == TCPOPT_EOL)
			return HT_NONE;
		if (kind == TCPOPT_NOP) {
			i++;
			continue;
		}
		if (i + 1 >= optlen)
			return HT_MALFORMED;
		__u32 len = opts[(i + 1) & HL_MASK];
		if (len < 2 || i + len > optlen)
			return HT_MALFORMED;
		if (kind == HL_KIND && len >= HL_HDR && opts[(i + 2) & HL_MASK] == HL_EXID_HI &&
		    opts[(i + 3) & HL_MASK] == HL_EXID_LO) {
			int c = 0;
			for (__u32 j = 0; j < HL_BUF; j++) {
				if (j >= len)
					break;
				buf[j & HL_MASK] = opts[(i + j) & HL_MASK];
				c++;
			}
			*n = c;
			*at = i;
			return HT_FOUND;
		}
		i += len;
	}
	return HT_NONE;
}

static __always_inline struct ht_out *result(void)
{
	__u32 k = 0;
	struct ht_out *o = bpf_map_lookup_elem(&ht_result, &k);
	if (o)
		__builtin_memset(o, 0, sizeof(*o));
	return o;
}

static __always_inline int load_opts(struct __sk_buff *skb, __u8 *opts, __u32 *tcp_off, __u32 *optlen)
{
	if (tcp_at(skb, tcp_off, optlen))
		return -1;
	__u32 l = *optlen;
	if (l > HL_BUF)
		return -1;
	if (l > 0 && bpf_skb_load_bytes(skb, *tcp_off + 20, opts, l & HL_MASK))
		return -1;
	return 0;
}

SEC("tc")
int ht_parse(struct __sk_buff *skb)
{
	struct ht_out *o = result();
	struct ht_scratch *sc = scratch();
	if (!o || !sc)
		return TC_ACT_OK;
	__u32 tcp_off, optlen;
	if (load_opts(skb, sc->opts, &tcp_off, &optlen)) {
		o->walk = HT_NOT_TCP;
		return TC_ACT_OK;
	}
	int n = 0;
	__u32 at = 0;
	o->walk = find(sc->opts, optlen, o->buf, &n, &at);
	if (o->walk != HT_FOUND)
		return TC_ACT_OK;
	o->off = at;
	o->parsed = hl_parse(o->buf, n, o->e, &o->valid);
	return TC_ACT_OK;
}

SEC("tc")
int ht_write(struct __sk_buff *skb)
{
	struct ht_out *o = result();
	__u32 z = 0;
	struct ht_in *in = bpf_map_lookup_elem(&ht_input, &z);
	if (!o || !in)
		return TC_ACT_OK;
	__u32 tcp_off, optlen;
	if (tcp_at(skb, &tcp_off, &optlen)) {
		o->walk = HT_NOT_TCP;
		return TC_ACT_OK;
	}
	// What the kernel leaves a sockops writer: the option space less the
	// kernel's options, which it pads to 4 bytes.
	__u32 used = (optlen + 3) & ~3u;
	o->room = used >= 40 ? 0 : 40 - used;
	o->fit = hl_fit(o->room, in->n);
	if (o->fit > 0)
		o->len = hl_encode(o->buf, in->e, o->fit);
	return TC_ACT_OK;
}

static __always_inline void strip_count(__u32 i)
{
	__u64 *v = bpf_map_lookup_elem(&ht_strip_stats, &i);
	if (v)
		__sync_fetch_and_add(v, 1);
}

// strip_one blanks the first option of ours; 1 if it did, 0 if there was
// none, -1 if there was one it leaves alone.
static __always_inline int strip_one(struct __sk_buff *skb, struct ht_scratch *sc)
{
	__builtin_memset(sc, 0, sizeof(*sc));
	__u32 tcp_off, optlen;
	if (load_opts(skb, sc->opts, &tcp_off, &optlen))
		return 0;
	int n = 0;
	__u32 at = 0;
	if (find(sc->opts, optlen, sc->buf, &n, &at) != HT_FOUND)
		return 0;
	// Ours start 4-aligned and are 4·k bytes long; anything else is left.
	if ((at & 3) || (n & 3) || n < HL_HDR || at + n > HL_BUF)
		return -1;
	__u32 csum_off = tcp_off + 16;
	__u32 nop = 0x01010101;
	for (int w = 0; w < HL_BUF / 4; w++) {
		__u32 i = w * 4;
		if (i >= (__u32)n)
			break;
		__u32 old;
		__u32 pos = at + i;
		if (pos + 4 > HL_BUF)
			break;
		__builtin_memcpy(&old, &sc->opts[pos & HL_MASK], 4);
		if (bpf_skb_store_bytes(skb, tcp_off + 20 + pos, &nop, 4, 0))
			return -1;
		bpf_l4_csum_replace(skb, csum_off, old, nop, 4);
	}
	return 1;
}

SEC("tc")
int ht_strip(struct __sk_buff *skb)
{
	struct ht_scratch *sc = scratch();
	if (!sc)
		return TC_ACT_OK;
	int stripped = 0;
	for (int i = 0; i < 4; i++) {
		int r = strip_one(skb, sc);
		if (r < 0)
			strip_count(1);
		if (r <= 0)
			break;
		stripped = 1;
	}
	if (stripped)
		strip_count(0);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
