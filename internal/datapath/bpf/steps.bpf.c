// SPDX-License-Identifier: GPL-2.0
// mpsteer's chain entry and built-in selectors and actors. Each is its
// own small program; a chain links them with tail calls (see
// mpsteer_chain.h). Checksums are fixed with the kernel's helpers, which
// do the right thing for every skb->ip_summed state.
#include "mpsteer_chain.h"
#include <bpf/bpf_core_read.h>

#define AF_INET 2
#define AF_INET6 10
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_ACK 0x10
#define TCP_FIN 0x01
#define IP_MF 0x2000
#define IP_OFFMASK 0x1fff
#define BPF_F_CURRENT_NETNS (-1L)
#ifndef BPF_F_IPV6
#define BPF_F_IPV6 (1ULL << 7)
#endif


/* chain id -> descriptor slot + 1 (0: no chain) */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MPSTEER_MAX_CHAINS);
	__type(key, __u32);
	__type(value, __u32);
} mpsteer_active SEC(".maps");

/* ADD_ADDR options withheld by strip_add_addr. */
struct withheld_key {
	__u32 chain;
	__u32 addr_id;
	__u32 saddr[4], daddr[4];
	__u16 sport, dport;
	__u32 v6;
};

struct withheld_val {
	__u64 ns;
	__u32 len;
	__u32 release; /* set by userspace: put it back into the next packet */
	__u8 opt[32];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct withheld_key);
	__type(value, struct withheld_val);
} mpsteer_withheld SEC(".maps");

/* Chains with ADD_ADDR options marked for release: only their packets
 * pay for looking the options up. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MPSTEER_MAX_CHAINS);
	__type(key, __u32);
	__type(value, __u32);
} mpsteer_release_pending SEC(".maps");

volatile const __u32 chain_id = 0;

/* ---- parsing ---------------------------------------------------------- */

/* byte_at reads buf[i] for a 64-byte stack buffer; the barrier keeps the
 * compiler from dropping the mask the verifier needs to bound the read. */
static __always_inline __u8 byte_at(const __u8 *buf, __u32 i)
{
	barrier_var(i);
	i &= 0x3f;
	return buf[i];
}

struct walk {
	__u8 opt[64];
	__u32 i, olen, types, locs;
	__u8 syn, ack;
};

/* walk_one handles the option at w->i (a bpf_loop callback: the verifier
 * checks it once instead of once per iteration and path). */
static long walk_one(__u32 n, void *ctx)
{
	struct walk *w = ctx;
	__u32 i = w->i;
	if (i >= w->olen || i >= 40)
		return 1;
	__u8 kind = byte_at(w->opt, i);
	if (kind == TCPOPT_EOL)
		return 1;
	if (kind == TCPOPT_NOP) {
		w->i = i + 1;
		return 0;
	}
	if (i + 1 >= w->olen)
		return 1;
	__u8 len = byte_at(w->opt, i + 1);
	if (len < 2 || i + len > w->olen)
		return 1;
	w->i = i + len;
	if (kind != TCPOPT_MPTCP || len < 3)
		return 0;
	__u8 sub = byte_at(w->opt, i + 2) >> 4;
	w->types |= T_MPTCP;
	switch (sub) {
	case MPTCP_SUB_CAPABLE:
		if (w->syn && !w->ack)
			w->types |= T_MPC_SYN;
		break;
	case MPTCP_SUB_JOIN:
		if (w->syn && !w->ack)
			w->types |= T_JOIN_SYN;
		else if (w->syn && w->ack)
			w->types |= T_JOIN_SYNACK;
		else if (w->ack)
			w->types |= T_JOIN_ACK;
		break;
	case MPTCP_SUB_DSS:
		if ((w->locs & 0xff) == 0xff)
			w->locs = (w->locs & 0xffff0000) | i | ((__u32)len << 8);
		if (len >= 4) {
			__u8 f = byte_at(w->opt, i + 3);
			if (f & 0x04)
				w->types |= T_DATA;
			else if (f & 0x01)
				w->types |= T_DATA_ACK;
		}
		break;
	case MPTCP_SUB_ADD_ADDR:
		w->types |= T_ADD_ADDR;
		if (((w->locs >> 16) & 0xff) == 0xff)
			w->locs = (w->locs & 0xffff) | (i << 16) | ((__u32)len << 24);
		break;
	case MPTCP_SUB_REMOVE_ADDR:
		w->types |= T_REMOVE_ADDR;
		break;
	case MPTCP_SUB_PRIO:
		w->types |= T_MP_PRIO;
		break;
	case MPTCP_SUB_FAIL:
		w->types |= T_MP_FAIL;
		break;
	case MPTCP_SUB_FASTCLOSE:
		w->types |= T_FASTCLOSE;
		break;
	}
	return 0;
}

/* classify walks the TCP options once, sets the packet type bits and
 * records where the first DSS and ADD_ADDR options are (offset from the
 * options' start and length, a byte each; 0xff: none), so that steps need
 * no loops of their own. */
static __always_inline __u32 classify(struct __sk_buff *skb, __u32 l4, __u32 thlen, __u8 flags, __u32 *locs)
{
	struct walk w = {};
	w.locs = 0xffffffff;
	w.syn = (flags & TCP_SYN) != 0;
	w.ack = (flags & TCP_ACK) != 0;
	if (flags & TCP_FIN)
		w.types |= T_FIN;
	if (flags & TCP_RST)
		w.types |= T_RST;
	__u32 olen = (thlen - 20) & 0x3f;
	if (olen > 0 && olen <= 40 && bpf_skb_load_bytes(skb, l4 + 20, w.opt, olen) == 0) {
		w.olen = olen;
		bpf_loop(40, walk_one, &w, 0);
	}
	*locs = w.locs;
	return w.types;
}

/* The chain's entry: parse IPv4/IPv6 + TCP once, record offsets and the
 * packet type in skb->cb, and start the chain. Anything that is not a
 * well-formed TCP segment leaves untouched. */
SEC("tc")
int mpsteer_entry(struct __sk_buff *skb)
{
	__u32 id = chain_id;
	__u32 *active = bpf_map_lookup_elem(&mpsteer_active, &id);
	if (!active || *active == 0)
		return TCX_NEXT;
	__u32 slot = *active - 1;
	struct mpsteer_chain *c = chain_of(slot);
	if (!c || c->n == 0)
		return TCX_NEXT;
	struct mpsteer_stats *st = stats_of(id);
	if (st) {
		st->seen++;
		if (!st->first_ns)
			st->first_ns = bpf_ktime_get_ns();
	}
	__u32 l3 = c->l2len & 0x3f, l4, v6 = 0;
	__u8 ip[40];
	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		if (bpf_skb_load_bytes(skb, l3, ip, 20))
			return TCX_NEXT;
		__u32 ihl = (ip[0] & 0xf) * 4;
		if ((ip[0] >> 4) != 4 || ihl < 20 || ip[9] != IPPROTO_TCP)
			return TCX_NEXT;
		__u16 frag = ((__u16)ip[6] << 8 | ip[7]) & (IP_MF | IP_OFFMASK);
		if (frag)
			return TCX_NEXT;
		l4 = l3 + ihl;
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		if (bpf_skb_load_bytes(skb, l3, ip, 40))
			return TCX_NEXT;
		if ((ip[0] >> 4) != 6 || ip[6] != IPPROTO_TCP)
			return TCX_NEXT; /* extension headers are not followed */
		l4 = l3 + 40;
		v6 = 1;
	} else {
		return TCX_NEXT;
	}
	__u8 th[20];
	if (bpf_skb_load_bytes(skb, l4, th, 20))
		return TCX_NEXT;
	__u32 thlen = (th[12] >> 4) * 4;
	if (thlen < 20 || l4 + thlen > skb->len)
		return TCX_NEXT;
	__u32 locs;
	__u32 types = classify(skb, l4, thlen, th[13], &locs);
	skb->cb[1] = l3 | (l4 << 8) | (v6 << 16) | ((thlen / 4) << 24);
	skb->cb[2] = types;
	skb->cb[3] = locs;
	skb->cb[4] = 0;
	return mpsteer_goto(skb, c, slot, 0);
}

/* ---- selectors -------------------------------------------------------- */

/* Addresses and ports of the packet, network order. */
struct addrs {
	__u32 src[4], dst[4];
	__u16 sport, dport;
};

static __always_inline int load_addrs(struct __sk_buff *skb, struct pkt *p, struct addrs *a)
{
	__builtin_memset(a, 0, sizeof(*a));
	if (p->v6) {
		if (bpf_skb_load_bytes(skb, p->l3 + 8, a->src, 16) || bpf_skb_load_bytes(skb, p->l3 + 24, a->dst, 16))
			return -1;
	} else {
		if (bpf_skb_load_bytes(skb, p->l3 + 12, &a->src[0], 4) || bpf_skb_load_bytes(skb, p->l3 + 16, &a->dst[0], 4))
			return -1;
	}
	__u16 ports[2];
	if (bpf_skb_load_bytes(skb, p->l4, ports, 4))
		return -1;
	a->sport = ports[0];
	a->dport = ports[1];
	return 0;
}

/* tuple: exact addresses and ports, each optional (zero = any). */
struct tuple_args {
	__u8 v6;
	__u8 has_src, has_dst;
	__u8 pad;
	__u16 sport, dport; /* network order; 0 = any */
	__u32 src[4], dst[4];
};

static __always_inline int eq_addr(const __u32 *a, const __u32 *b, int v6)
{
	if (a[0] != b[0])
		return 0;
	if (!v6)
		return 1;
	return a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
}

SEC("tc")
int sel_tuple(struct __sk_buff *skb)
{
	struct pkt p;
	struct mpsteer_chain *c;
	struct mpsteer_step *s = mpsteer_this(skb, &p, &c);
	if (!s)
		return TCX_NEXT;
	struct tuple_args *t = (void *)s->args;
	struct addrs a;
	int m = 0;
	if (t->v6 == p.v6 && load_addrs(skb, &p, &a) == 0) {
		m = (!t->has_src || eq_addr(a.src, t->src, p.v6)) &&
		    (!t->has_dst || eq_addr(a.dst, t->dst, p.v6)) &&
		    (!t->sport || a.sport == t->sport) && (!t->dport || a.dport == t->dport);
	}
	return mpsteer_selected(skb, &p, c, m);
}

/* prefix: source or destination within a prefix. */
struct prefix_args {
	__u8 v6;
	__u8 dst; /* 0: source, 1: destination */
	__u8 bits;
	__u8 pad;
	__u32 addr[4];
};

static __always_inline int in_prefix(const __u32 *a, const __u32 *net, __u32 bits, int words)
{
	for (int i = 0; i < 4; i++) {
		if (i >= words)
			break;
		__u32 take = bits > 32 ? 32 : bits;
		if (take == 0)
			return 1;
		__u32 mask = bpf_htonl(take == 32 ? 0xffffffff : ~(0xffffffffu >> take));
		if ((a[i] & mask) != (net[i] & mask))
			return 0;
		bits -= take;
	}
	return 1;
}

SEC("tc")
int sel_prefix(struct __sk_buff *skb)
{
	struct pkt p;
	struct mpsteer_chain *c;
	struct mpsteer_step *s = mpsteer_this(skb, &p, &c);
	if (!s)
		return TCX_NEXT;
	struct prefix_args *t = (void *)s->args;
	struct addrs a;
	int m = 0;
	if (t->v6 == p.v6 && load_addrs(skb, &p, &a) == 0)
		m = in_prefix(t->dst ? a.dst : a.src, t->addr, t->bits, p.v6 ? 4 : 1);
	return mpsteer_selected(skb, &p, c, m);
}

/* seq: subflow sequence number (kind 0) or DSS data sequence number
 * (kind 1) in [lo, hi), with wrap-around. */
struct seq_args {
	__u32 kind;
	__u32 pad;
	__u64 lo, hi;
};

/* dss_dsn finds the data sequence number of a DSS mapping. */
static __always_inline int dss_dsn(struct __sk_buff *skb, struct pkt *p, __u64 *dsn, int *wide)
{
	__u32 at = skb->cb[3] & 0xff, n = (skb->cb[3] >> 8) & 0x1f;
	if (at == 0xff || n < 4)
		return -1;
	__u8 d[32] = {};
	if (bpf_skb_load_bytes(skb, p->l4 + 20 + (at & 0x3f), d, n))
		return -1;
	__u8 f = d[3];
	if (!(f & 0x04))
		return -1;
	__u32 off = 4;
	if (f & 0x01)
		off += (f & 0x02) ? 8 : 4;
	*wide = (f & 0x08) != 0;
	__u32 bytes = *wide ? 8 : 4;
	if (off + bytes > n)
		return -1;
	__u64 v = 0;
	for (int k = 0; k < 8; k++) {
		if (k >= bytes)
			break;
		v = (v << 8) | d[(off + k) & 0x1f];
	}
	*dsn = v;
	return 0;
}

/* v in [lo, hi) on the 32-bit circle; lo > hi wraps, and a range of
 * 2^32 or more holds every number. */
static __always_inline int in_range32(__u32 v, __u64 lo, __u64 hi)
{
	__u64 span = hi >= lo ? hi - lo : hi + (1ULL << 32) - lo;
	return (__u64)(__u32)(v - (__u32)lo) < span;
}

SEC("tc")
int sel_seq(struct __sk_buff *skb)
{
	struct pkt p;
	struct mpsteer_chain *c;
	struct mpsteer_step *s = mpsteer_this(skb, &p, &c);
	if (!s)
		return TCX_NEXT;
	struct seq_args *t = (void *)s->args;
	int m = 0;
	if (t->kind == 0) {
		__u32 seq;
		if (bpf_skb_load_bytes(skb, p.l4 + 4, &seq, 4) == 0) {
			m = in_range32(bpf_ntohl(seq), t->lo, t->hi);
		}
	} else {
		__u64 dsn;
		int wide = 0;
		if (dss_dsn(skb, &p, &dsn, &wide) == 0) {
			if (wide)
				m = (dsn - t->lo) < (t->hi - t->lo);
			else
				m = in_range32((__u32)dsn, t->lo, t->hi);
		}
	}
	return mpsteer_selected(skb, &p, c, m);
}

/* type: any of the packet types in the mask. */
SEC("tc")
int sel_type(struct __sk_buff *skb)
{
	struct pkt p;
	struct mpsteer_chain *c;
	struct mpsteer_step *s = mpsteer_this(skb, &p, &c);
	if (!s)
		return TCX_NEXT;
	__u32 mask = *(__u32 *)s->args;
	return mpsteer_selected(skb, &p, c, (p.types & mask) != 0);
}

/* ---- actors ----------------------------------------------------------- */

SEC("tc")
int act_drop(struct __sk_buff *skb)
{
	struct pkt p;
	struct mpsteer_chain *c;
	if (mpsteer_this(skb, &p, &c))
		mpsteer_count(c, 1);
	return TCX_DROP;
}

struct mark_args {
	__u32 mark, priority;
	__u8 set_mark, set_priority;
};

SEC("tc")
int act_mark(struct __sk_buff *skb)
{
	struct pkt p;
	struct mpsteer_chain *c;
	struct mpsteer_step *s = mpsteer_this(skb, &p, &c);
	if (!s)
		return TCX_NEXT;
	struct mark_args *a = (void *)s->args;
	if (a->set_mark)
		skb->mark = a->mark;
	if (a->set_priority)
		skb->priority = a->priority; /* a tc classid: HTB classifies by it */
	return mpsteer_goto(skb, c, p.slot, p.step + 1);
}

SEC("tc")
int act_count(struct __sk_buff *skb)
{
	struct pkt p;
	struct mpsteer_chain *c;
	if (!mpsteer_this(skb, &p, &c))
		return TCX_NEXT;
	__u32 key = p.slot * MPSTEER_MAX_STEPS + p.step;
	__u64 *v = bpf_map_lookup_elem(&mpsteer_step_count, &key);
	if (v) {
		v[0]++;
		v[1] += skb->len;
	}
	return mpsteer_goto(skb, c, p.slot, p.step + 1);
}

/* The local TCP socket this packet belongs to (ingress: the packet is for
 * it; egress: it comes from it). The caller releases it. */
static __always_inline struct bpf_sock *local_sock(struct __sk_buff *skb, struct pkt *p, int egress)
{
	struct addrs a;
	if (load_addrs(skb, p, &a))
		return 0;
	struct bpf_sock_tuple t = {};
	__u32 size;
	if (p->v6) {
		__builtin_memcpy(t.ipv6.saddr, egress ? a.dst : a.src, 16);
		__builtin_memcpy(t.ipv6.daddr, egress ? a.src : a.dst, 16);
		t.ipv6.sport = egress ? a.dport : a.sport;
		t.ipv6.dport = egress ? a.sport : a.dport;
		size = sizeof(t.ipv6);
	} else {
		t.ipv4.saddr = egress ? a.dst[0] : a.src[0];
		t.ipv4.daddr = egress ? a.src[0] : a.dst[0];
		t.ipv4.sport = egress ? a.dport : a.sport;
		t.ipv4.dport = egress ? a.sport : a.dport;
		size = sizeof(t.ipv4);
	}
	return bpf_sk_lookup_tcp(skb, &t, size, BPF_F_CURRENT_NETNS, 0);
}

/* Rewrite a 16-bit word of the TCP header, keeping the checksum right. */
static __always_inline int tcp_store16(struct __sk_buff *skb, struct pkt *p, __u32 off, __u16 oldv, __u16 newv)
{
	if (bpf_l4_csum_replace(skb, p->l4 + 16, oldv, newv, 2))
		return -1;
	return bpf_skb_store_bytes(skb, p->l4 + off, &newv, 2, 0);
}

/* clamp_rwnd: lower the receive window advertised in the packet so that
 * the sender of the packet's subflow can have at most `window` bytes (or
 * rate × SRTT) in flight. Aware of window scaling; never on SYNs. */
struct clamp_args {
	__u64 rate;   /* bytes per second; 0: use window */
	__u32 window; /* bytes */
	__u32 egress;
};

SEC("tc")
int act_clamp_rwnd(struct __sk_buff *skb)
{
	struct pkt p;
	struct mpsteer_chain *c;
	struct mpsteer_step *s = mpsteer_this(skb, &p, &c);
	if (!s)
		return TCX_NEXT;
	struct clamp_args *a = (void *)s->args;
	__u8 th[16];
	if (bpf_skb_load_bytes(skb, p.l4, th, 16))
		goto skip;
	if (th[13] & TCP_SYN)
		goto next; /* SYN windows are not scaled: never touched */
	struct bpf_sock *sk = local_sock(skb, &p, a->egress);
	if (!sk)
		goto skip;
	__u32 wscale = 0, srtt = 0;
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (tp) {
		/* Ingress: the peer's window, scaled by its shift (our
		 * snd_wscale). Egress: ours, scaled by rcv_wscale. */
		if (a->egress)
			wscale = BPF_CORE_READ_BITFIELD(tp, rx_opt.rcv_wscale);
		else
			wscale = BPF_CORE_READ_BITFIELD(tp, rx_opt.snd_wscale);
		srtt = tp->srtt_us >> 3;
	}
	bpf_sk_release(sk);
	if (!tp)
		goto skip;
	__u64 want = a->window;
	if (a->rate) {
		if (!srtt)
			goto skip;
		want = a->rate * srtt / 1000000;
		if (want < 1448)
			want = 1448;
	}
	__u16 old = (__u16)th[14] << 8 | th[15];
	__u64 scaled = (want + (1u << wscale) - 1) >> wscale;
	if (scaled == 0)
		scaled = 1;
	if (scaled >= old)
		goto next; /* only ever lower it */
	if (tcp_store16(skb, &p, 14, bpf_htons(old), bpf_htons((__u16)scaled)))
		goto skip;
	mpsteer_count(c, 0);
	goto next;
skip:
	mpsteer_count(c, 2);
next:
	return mpsteer_goto(skb, c, p.slot, p.step + 1);
}

/* insert_opt grows the TCP header by len (a multiple of 4, at most 32)
 * and writes opt at its end.
 *
 * A segment without payload (a pure ACK) grows at its tail with
 * bpf_skb_change_tail: the new bytes are exactly where the options end,
 * so no header moves and an offloaded checksum (CHECKSUM_PARTIAL) stays
 * consistent. A segment with payload grows with bpf_skb_adjust_room
 * between IP and TCP and the TCP header moves back to the front; that is
 * only right on ingress (the stack resets the transport header of a
 * packet it receives), so egress data segments are not touched.
 *
 * Then the lengths and checksums: IP total length (and IPv4 header
 * checksum) or IPv6 payload length, and the TCP checksum for the
 * pseudo-header length, the data-offset word and the new bytes, all with
 * the kernel's helpers, which handle every skb->ip_summed state. */
static __always_inline int insert_opt(struct __sk_buff *skb, struct pkt *p, __u8 *opt, __u32 len, int egress)
{
	__u32 thlen = p->thlen & 0x3c;
	len &= 0x3c;
	if (len == 0 || len > 32 || thlen + len > 60 || thlen < 20)
		return -1;
	__u8 hdr[60];
	if (bpf_skb_load_bytes(skb, p->l4, hdr, thlen))
		return -1;
	__u16 iplen; /* IPv4 total length, IPv6 payload length */
	if (bpf_skb_load_bytes(skb, p->l3 + (p->v6 ? 4 : 2), &iplen, 2))
		return -1;
	__u32 l4len = bpf_ntohs(iplen) - (p->v6 ? 0 : (p->l4 - p->l3));
	__u32 payload = l4len - thlen;
	if (payload > 0xffff)
		return -1;
	if (payload == 0) {
		__u32 end = p->l4 + thlen;
		if (bpf_skb_change_tail(skb, end + len, 0))
			return -1;
	} else {
		if (egress || (!p->v6 && p->l4 - p->l3 != 20))
			return -1; /* see above; and IPv4 options would be split */
		if (bpf_skb_adjust_room(skb, len, BPF_ADJ_ROOM_NET, 0))
			return -1;
		if (bpf_skb_store_bytes(skb, p->l4, hdr, thlen, 0))
			return -3;
	}
	if (bpf_skb_store_bytes(skb, p->l4 + thlen, opt, len, 0))
		return -4;
	__u16 oldw = bpf_htons((__u16)hdr[12] << 8 | hdr[13]);
	__u16 neww = bpf_htons((((thlen + len) / 4) << 12) | ((__u16)(hdr[12] & 0x0f) << 8) | hdr[13]);
	if (bpf_skb_store_bytes(skb, p->l4 + 12, &neww, 2, 0))
		return -5;
	__u16 niplen = bpf_htons(bpf_ntohs(iplen) + len);
	if (bpf_skb_store_bytes(skb, p->l3 + (p->v6 ? 4 : 2), &niplen, 2, 0))
		return -6;
	if (p->v6) {
		__be32 from = bpf_htonl(l4len), to = bpf_htonl(l4len + len);
		__s64 d = bpf_csum_diff(&from, 4, &to, 4, 0);
		if (d < 0 || bpf_l4_csum_replace(skb, p->l4 + 16, 0, d, BPF_F_PSEUDO_HDR | BPF_F_IPV6))
			return -7;
	} else {
		if (bpf_l3_csum_replace(skb, p->l3 + 10, iplen, niplen, 2))
			return -8;
		if (bpf_l4_csum_replace(skb, p->l4 + 16, bpf_htons(l4len), bpf_htons(l4len + len), 2 | BPF_F_PSEUDO_HDR))
			return -9;
	}
	if (bpf_l4_csum_replace(skb, p->l4 + 16, oldw, neww, 2))
		return -10;
	__s64 diff = bpf_csum_diff(0, 0, (__be32 *)opt, len, 0);
	if (diff < 0 || bpf_l4_csum_replace(skb, p->l4 + 16, 0, diff, 0))
		return -11;
	return 0;
}

/* The MPTCP subflow context of a TCP socket (CO-RE: its ULP data). */
static __always_inline struct mptcp_subflow_context *subflow_ctx(struct tcp_sock *tp)
{
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)tp;
	return (struct mptcp_subflow_context *)BPF_CORE_READ(icsk, icsk_ulp_data);
}

/* set_backup / clear_backup: add MP_PRIO to an incoming ACK of the
 * subflow, so that the local stack marks it backup (or not), as if the
 * peer had asked (the eMPTCP paper's set_flow_prio). The packet is only
 * touched while the subflow's flag differs from the wanted one. */
SEC("tc")
int act_set_backup(struct __sk_buff *skb)
{
	struct pkt p;
	struct mpsteer_chain *c;
	struct mpsteer_step *s = mpsteer_this(skb, &p, &c);
	if (!s)
		return TCX_NEXT;
	__u8 want = s->args[0] ? 1 : 0, force = s->args[1];
	__u8 th[14];
	if (bpf_skb_load_bytes(skb, p.l4, th, 14) || (th[13] & (TCP_SYN | TCP_RST)) || !(th[13] & TCP_ACK))
		goto next;
	int have = -1;
	struct bpf_sock *sk = local_sock(skb, &p, 0);
	if (sk) {
		struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
		if (tp && tp->is_mptcp) {
			struct mptcp_subflow_context *sf = subflow_ctx(tp);
			if (sf)
				have = BPF_CORE_READ_BITFIELD_PROBED(sf, backup);
		}
		bpf_sk_release(sk);
	}
	if (have == want)
		goto next;
	if (have < 0 && !force)
		goto skip; /* no local MPTCP subflow to tell */
	__u8 opt[4] = {TCPOPT_NOP, TCPOPT_MPTCP, 3, (MPTCP_SUB_PRIO << 4) | want};
	int err = insert_opt(skb, &p, opt, 4, 0);
	if (err == -1)
		goto skip;
	if (err)
		return TCX_DROP; /* half-rewritten: never let a broken packet go */
	mpsteer_count(c, 0);
	goto next;
skip:
	mpsteer_count(c, 2);
next:
	return mpsteer_goto(skb, c, p.slot, p.step + 1);
}

/* strip_add_addr: withhold ADD_ADDR options and keep them, so they can
 * be put back later (`mpsteer chain release`). A kept
 * option marked for release goes back into the next packet of its
 * subflow (its HMAC does not depend on the packet). */
static __always_inline int release_one(struct __sk_buff *skb, struct pkt *p, struct withheld_key *k)
{
	struct withheld_val *w = 0;
	__u32 id;
	for (id = 0; id < 8; id++) {
		k->addr_id = id;
		w = bpf_map_lookup_elem(&mpsteer_withheld, k);
		if (w && w->release == 1)
			break;
		w = 0;
	}
	if (!w)
		return 0;
	__u8 buf[32];
	__builtin_memcpy(buf, w->opt, 32);
	__u32 n = w->len;
	if (n > 30 || n < 8)
		return 0;
	__u32 padded = (n + 3) & 0x3c;
	for (__u32 q = 0; q < 32; q++)
		if (q >= n && q < padded)
			buf[q & 0x1f] = TCPOPT_NOP;
	int err = insert_opt(skb, p, buf, padded, 0);
	if (err == -1)
		return -1; /* no room in this one: the next packet */
	if (err)
		return err;
	w->release = 2;
	return 1;
}

SEC("tc")
int act_strip_add_addr(struct __sk_buff *skb)
{
	struct pkt p;
	struct mpsteer_chain *c;
	struct mpsteer_step *s = mpsteer_this(skb, &p, &c);
	if (!s)
		return TCX_NEXT;
	if (!(p.types & T_ADD_ADDR)) {
		__u32 cid = c->id;
		__u32 *pending = bpf_map_lookup_elem(&mpsteer_release_pending, &cid);
		if (!pending || !*pending)
			goto next; /* nothing to put back: the common case */
	}
	struct addrs ad;
	if (load_addrs(skb, &p, &ad))
		goto next;
	struct withheld_key k = {};
	k.chain = c->id;
	k.v6 = p.v6;
	__builtin_memcpy(k.saddr, ad.src, 16);
	__builtin_memcpy(k.daddr, ad.dst, 16);
	k.sport = ad.sport;
	k.dport = ad.dport;

	if (!(p.types & T_ADD_ADDR)) {
		/* Any segment of the subflow can carry it back: the stack parses
		 * MPTCP options on every one (pure ACKs often carry none). */
		if (!(p.types & (T_FIN | T_RST))) {
			int r = release_one(skb, &p, &k);
			if (r <= -2) {
				mpsteer_count(c, 3); /* errors */
				mpsteer_count(c, 1);
				return TCX_DROP; /* half-rewritten: never let it go */
			}
			if (r > 0)
				mpsteer_count(c, 0);
			if (r == -1)
				mpsteer_count(c, 2); /* no room: the next packet */
		}
		goto next;
	}
	__u32 at = (skb->cb[3] >> 16) & 0xff, len = (skb->cb[3] >> 24) & 0x1f;
	if (at == 0xff || len < 8 || len > 30)
		goto next;
	__u32 i = at & 0x3f;
	__u8 opt[32] = {};
	if (bpf_skb_load_bytes(skb, p.l4 + 20 + i, opt, len))
		goto skip;
	k.addr_id = opt[3];
	struct withheld_val *old = bpf_map_lookup_elem(&mpsteer_withheld, &k);
	if (old && old->release)
		goto next; /* released: it may pass */
	struct withheld_val w = {};
	w.ns = bpf_ktime_get_ns();
	w.len = len;
	__builtin_memcpy(w.opt, opt, 32);
	bpf_map_update_elem(&mpsteer_withheld, &k, &w, BPF_ANY);
	/* A packet with no DSS is the kernel's pure ACK made for the
	 * announcement (it leaves the DSS out to make room). Dropping it is
	 * harmless, the next ACK says the same, while a copy with the option
	 * blanked would be a packet without any MPTCP option: on a connection
	 * that is not yet fully established the peer then falls back to plain
	 * TCP. */
	if (!(p.types & (T_DATA | T_DATA_ACK))) {
		mpsteer_count(c, 0);
		return TCX_DROP;
	}
	/* Otherwise NOPs over a 4-byte aligned span of the header (checksum
	 * words start at even offsets); the checksum is fixed by the
	 * difference. */
	__u32 start = (20 + i) & ~3u, end = (20 + i + len + 3) & ~3u;
	__u32 span = (end - start) & 0x3c;
	if (span == 0 || span > 40 || start < 20 || end > p.thlen)
		goto skip;
	__u8 before[40] = {}, after[40] = {};
	if (bpf_skb_load_bytes(skb, p.l4 + start, before, span))
		goto skip;
	__u32 from = i + 20 - start; /* option start within the span */
	for (__u32 q = 0; q < 40; q++) {
		if (q >= span)
			break;
		__u32 o = q - from;
		after[q] = (q < from || o >= len) ? before[q] : TCPOPT_NOP;
	}
	__s64 diff = bpf_csum_diff((__be32 *)before, span, (__be32 *)after, span, 0);
	if (diff < 0)
		goto skip;
	if (bpf_skb_store_bytes(skb, p.l4 + start, after, span, 0) || bpf_l4_csum_replace(skb, p.l4 + 16, 0, diff, 0))
		return TCX_DROP;
	skb->cb[3] |= 0xffff0000; /* the ADD_ADDR is gone */
	mpsteer_count(c, 0);
	goto next;
skip:
	mpsteer_count(c, 2);
next:
	return mpsteer_goto(skb, c, p.slot, p.step + 1);
}

char LICENSE[] SEC("license") = "GPL";
