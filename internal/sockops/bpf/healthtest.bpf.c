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

// The packet's options, where the verifier bounds a variable index, and
// where ht_find says it found ours.
struct ht_scratch {
	__u8 opts[HL_SCRATCH];
	__u8 buf[HL_SCRATCH];
	__u32 at;  // its offset in the options
	__u32 len; // its length byte (at most what the options hold)
};

/* size_upto(v, mask) is v for v in 1..mask+1 (0 wraps to mask + 1), at
 * least 1 by arithmetic: verifiers before 6.8 take no lower bound from a
 * `v > 0` compared before masking, nor from `!= 0`, and a helper's length
 * must be at least 1. In 64 bits: a 32-bit value behind the barrier would
 * be compared as a zero-extended copy, which bounds the copy only. */
#define size_upto(v, mask) ({ __u64 __s = ((((__u64)(v)) - 1) & (mask)) + 1; barrier_var(__s); __s; })

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

// The option walk's state, for bpf_loop.
struct ht_walk {
	struct ht_scratch *sc;
	__u32 i, optlen;
	int res;
};

// ht_walk_one handles the option at w->i; nonzero: the walk is over, with
// its result in w->res.
static long ht_walk_one(__u32 it, void *ctx)
{
	struct ht_walk *w = ctx;
	struct ht_scratch *sc = w->sc;
	__u32 i = w->i, optlen = w->optlen;
	if (!sc || i >= optlen || i >= HL_BUF)
		return 1; // HT_NONE
	__u8 kind = sc->opts[i & HL_MASK];
	if (kind == TCPOPT_EOL)
		return 1;
	if (kind == TCPOPT_NOP) {
		w->i = i + 1;
		return 0;
	}
	w->res = HT_MALFORMED;
	if (i + 1 >= optlen)
		return 1;
	__u32 len = sc->opts[(i + 1) & HL_MASK];
	if (len < 2 || i + len > optlen)
		return 1;
	if (kind == HL_KIND && len >= HL_HDR && sc->opts[(i + 2) & HL_MASK] == HL_EXID_HI &&
	    sc->opts[(i + 3) & HL_MASK] == HL_EXID_LO) {
		sc->at = i;
		sc->len = len;
		w->res = HT_FOUND;
		return 1;
	}
	w->res = HT_NONE;
	w->i = i + len;
	return 0;
}

// ht_find walks the options (sc->opts holds optlen bytes) as the kernel
// does; when ours is there it says where (sc->at, sc->len). A global
// function, and its loop a bpf_loop: the verifier checks one step of the
// walk, once, not every option layout's path through it.
__noinline int ht_find(struct ht_scratch *sc, __u32 optlen)
{
	if (!sc)
		return HT_NONE;
	struct ht_walk w = {.sc = sc, .i = 0, .optlen = optlen, .res = HT_NONE};
	bpf_loop(HL_BUF, ht_walk_one, &w, 0);
	return w.res;
}

// copy_found copies the option ht_find found into buf (HL_SCRATCH bytes of
// map memory) and returns its length.
static __always_inline int copy_found(const struct ht_scratch *sc, __u8 *buf)
{
	__u32 at = sc->at, len = sc->len;
	for (__u32 j = 0; j < HL_BUF; j++) {
		if (j >= len)
			break;
		buf[j & HL_MASK] = sc->opts[(at + j) & HL_MASK];
	}
	return len > HL_BUF ? HL_BUF : len;
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
	if (l == 0)
		return 0;
	__u64 n = size_upto(l, HL_MASK);
	if (n > HL_BUF || bpf_skb_load_bytes(skb, *tcp_off + 20, opts, n))
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
	o->walk = ht_find(sc, optlen);
	if (o->walk != HT_FOUND)
		return TC_ACT_OK;
	int n = copy_found(sc, o->buf);
	o->off = sc->at;
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

// ht_strip_one blanks the first option of ours with one store of NOPs
// and one checksum update; 1 if it did, 0 if there was none, -1 if there
// was one it leaves alone. A global function: checked once, though
// ht_strip calls it four times.
__noinline int ht_strip_one(struct __sk_buff *skb, struct ht_scratch *sc)
{
	if (!sc)
		return 0;
	__builtin_memset(sc, 0, sizeof(*sc));
	__u32 tcp_off, optlen;
	if (load_opts(skb, sc->opts, &tcp_off, &optlen))
		return 0;
	if (ht_find(sc, optlen) != HT_FOUND)
		return 0;
	int got = copy_found(sc, sc->buf);
	// Ours start 4-aligned and are 4·k bytes long; anything else is left.
	__u32 at = sc->at;
	if ((at & 3) || (got & 3) || got < HL_HDR || at + got > HL_BUF)
		return -1;
	__u64 n = size_upto(got, HL_MASK);
	if (n > HL_BUF)
		return -1;
	__u8 nops[HL_BUF];
	__builtin_memset(nops, TCPOPT_NOP, sizeof(nops));
	__s64 diff = bpf_csum_diff((__be32 *)sc->buf, n, (__be32 *)nops, n, 0);
	if (diff < 0)
		return -1;
	if (bpf_skb_store_bytes(skb, tcp_off + 20 + at, nops, n, 0))
		return -1;
	bpf_l4_csum_replace(skb, tcp_off + 16, 0, diff, 0);
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
		int r = ht_strip_one(skb, sc);
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
