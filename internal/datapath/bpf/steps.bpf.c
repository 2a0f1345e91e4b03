// SPDX-License-Identifier: GPL-2.0
// mpsteer's chains: one program per chain.
//
// A chain is compiled into ONE program when it is added: the loader
// writes the chain's steps (kind, arguments, where a selector goes on a
// match and on a miss) into the read-only globals below before the
// program is loaded. The verifier reads them as constants, so it checks
// only the steps the chain has and removes the rest; what is left runs
// the steps one after another with direct branches, without a tail call
// or a map lookup per step. Selectors and the cheap actors are inlined;
// the big actors (clamp_rwnd, set_backup/clear_backup, strip_add_addr)
// and the option walk are global functions, verified once per load and
// reached by direct calls.
//
// Actors loaded by users (separate objects) are reached by tail call, as
// before; they come back through mpsteer_resume, which tail-calls the
// chain's resume program (the same steps, entered at the next one).
//
// Checksums are fixed with the kernel's helpers, which do the right thing
// for every skb->ip_summed state.
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

/* Step kinds (the Go loader's kind table mirrors them). */
#define K_TUPLE 1 /* tuple and pair */
#define K_PREFIX 2 /* src and dst */
#define K_SEQ 3
#define K_TYPE 4
#define K_DROP 5
#define K_MARK 6
#define K_COUNT 7
#define K_CLAMP 8
#define K_BACKUP 9
#define K_STRIP 10
#define K_USER 11

/* What the chain needs parsed (set by the loader). */
#define NEED_ADDRS 0x1 /* addresses (selectors, socket lookups, withheld keys) */
#define NEED_OPTS 0x2  /* the option walk: packet types, DSS and ADD_ADDR places */
#define NEED_USER 0x4  /* a loaded actor: skb->cb as mpsteer_chain.h says */

/* What an actor did, for the chain's counters. */
#define A_MODIFIED 0x1
#define A_SKIPPED 0x2
#define A_ERROR 0x4
#define A_DROPPED 0x8 /* counted as dropped */
#define A_DROP 0x10   /* the packet is dropped */

#define CLAMP_EGRESS 0x80000000u
#define RESUME_MAGIC 0xa5

/* One step of the chain, as the loader bakes it in (the arguments of the
 * built-in steps in the loader's own layout, see below). */
#define STEP_ARGS 80

struct chain_step {
	__u8 kind;
	__u8 on_match;
	__u8 on_miss;
	__u8 flags;
	__u32 prog; /* a loaded actor's index in mpsteer_steps */
	__u8 args[STEP_ARGS];
};

/* The chain: constants for the verifier (.rodata, frozen). */
volatile const __u32 chain_id = 0;
volatile const __u32 chain_slot = 0; /* descriptor slot: step counters, resume */
volatile const __u32 n_steps = 0;
volatile const __u32 first_actor = 0;
volatile const __u32 l2len = 0;
volatile const __u32 needs = 0;
volatile const struct chain_step steps[MPSTEER_MAX_STEPS] = {};

/* Nonzero: this program passes every packet untouched (the chain is
 * paused while it moves). Per program (.bss), set by the loader. */
volatile __u32 paused = 0;

/* Descriptor slot -> the chain's program (chains with loaded actors come
 * back to it). */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, MPSTEER_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} mpsteer_resumes SEC(".maps");

/* ADD_ADDR options withheld by strip_add_addr. */
struct withheld_key {
	__u32 chain;
	__u32 addr_id;
	__u32 saddr[4], daddr[4];
	__u16 sport, dport;
	__u32 v6;
};

struct withheld_val {
	/* When it was kept: CLOCK_MONOTONIC to the jiffy (the coarse clock
	 * costs 2 ns, the exact one 24: `mpsteer bench datapath`, helpers). */
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

/* What the chain knows about the packet (on the stack, parsed once). */
struct cx {
	__u32 l3, l4, thlen, v6;
	__u32 types; /* T_* bits (NEED_OPTS) */
	__u32 locs;  /* first DSS (bits 0-15) and ADD_ADDR (16-31): offset from the options, length; 0xff: none */
	__u32 iplen; /* IPv4 total length, IPv6 payload length */
	__u32 seq;   /* subflow sequence number */
	union {
		struct {
			__u32 src[4], dst[4]; /* network order (NEED_ADDRS) */
			__u16 sport, dport;   /* network order */
		};
		__u32 w[9]; /* the same, as words for the match selector */
	};
	__u8 flags;           /* TCP flags */
	__u8 pad[3];
};

/* ---- parsing ---------------------------------------------------------- */

/* skb->data and skb->data_end, each read with one load from the context
 * (the compiler must not derive context pointers the verifier refuses). */
static __always_inline void *ctx_data(struct __sk_buff *skb)
{
	void *p;
	asm volatile("%0 = *(u32 *)(%1 + %2)" : "=r"(p) : "r"(skb), "i"(__builtin_offsetof(struct __sk_buff, data)));
	return p;
}

static __always_inline void *ctx_data_end(struct __sk_buff *skb)
{
	void *p;
	asm volatile("%0 = *(u32 *)(%1 + %2)" : "=r"(p) : "r"(skb), "i"(__builtin_offsetof(struct __sk_buff, data_end)));
	return p;
}

/* header points at n bytes (a constant) at offset off, read in place:
 * headers are in the skb's linear part nearly always at TC; when not,
 * the packet is pulled into it (contents unchanged). 0: too short. */
static __always_inline __u8 *header(struct __sk_buff *skb, __u32 off, __u32 n)
{
	__u8 *p = ctx_data(skb) + off;
	if ((void *)(p + n) <= ctx_data_end(skb))
		return p;
	if (off + n > skb->len || bpf_skb_pull_data(skb, off + n))
		return 0;
	p = ctx_data(skb) + off;
	if ((void *)(p + n) > ctx_data_end(skb))
		return 0;
	return p;
}

/* parse reads IPv4/IPv6 and TCP; anything that is not a well-formed TCP
 * segment is left alone (-1). Packet types and option places are left to
 * the classifiers (NEED_OPTS). */
static __always_inline int parse(struct __sk_buff *skb, struct cx *x)
{
	__u32 l3 = l2len & 0x3f, l4;
	x->l3 = l3;
	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		__u8 *ip = header(skb, l3, 20);
		if (!ip)
			return -1;
		__u32 ihl = (ip[0] & 0xf) * 4;
		if ((ip[0] >> 4) != 4 || ihl < 20 || ip[9] != IPPROTO_TCP)
			return -1;
		if (*(__u16 *)(ip + 6) & bpf_htons(IP_MF | IP_OFFMASK))
			return -1;
		x->iplen = bpf_ntohs(*(__u16 *)(ip + 2));
		if (needs & NEED_ADDRS) {
			x->src[0] = *(__u32 *)(ip + 12);
			x->dst[0] = *(__u32 *)(ip + 16);
			x->src[1] = x->src[2] = x->src[3] = 0;
			x->dst[1] = x->dst[2] = x->dst[3] = 0;
		}
		l4 = l3 + ihl;
		x->v6 = 0;
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		__u8 *ip = header(skb, l3, 40);
		if (!ip)
			return -1;
		if ((ip[0] >> 4) != 6 || ip[6] != IPPROTO_TCP)
			return -1; /* extension headers are not followed */
		x->iplen = bpf_ntohs(*(__u16 *)(ip + 4));
		if (needs & NEED_ADDRS) {
#pragma unroll
			for (int k = 0; k < 4; k++) {
				x->src[k] = *(__u32 *)(ip + 8 + 4 * k);
				x->dst[k] = *(__u32 *)(ip + 24 + 4 * k);
			}
		}
		l4 = l3 + 40;
		x->v6 = 1;
	} else {
		return -1;
	}
	__u8 *th = header(skb, l4, 20);
	if (!th)
		return -1;
	__u32 thlen = (th[12] >> 4) * 4;
	if (thlen < 20 || l4 + thlen > skb->len)
		return -1;
	/* The IP length must cover the TCP header and lie within the frame
	 * (a frame may be longer: Ethernet padding). 0 is BIG TCP's: the
	 * frame's length is the packet's. A packet whose IP header lies about
	 * its length is not a well-formed segment: left alone. */
	if (x->iplen) {
		__u32 end = l3 + x->iplen + (x->v6 ? 40 : 0);
		if (end > skb->len || l4 + thlen > end)
			return -1;
	}
	x->l4 = l4;
	x->thlen = thlen;
	x->flags = th[13];
	x->sport = *(__u16 *)th;
	x->dport = *(__u16 *)(th + 2);
	x->seq = bpf_ntohl(*(__u32 *)(th + 4));
	return 0;
}

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

/* walk_step handles the option at w->i; nonzero: the walk is over. */
static __always_inline long walk_step(struct walk *w)
{
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

/* walk_one: walk_step as a bpf_loop callback (the verifier checks it once
 * instead of once per iteration and path). */
static long walk_one(__u32 n, void *ctx)
{
	return walk_step(ctx);
}

/* mpsteer_classify walks the TCP options once, sets the packet type bits
 * and records where the first DSS and ADD_ADDR options are (offset from
 * the options' start and length, a byte each; 0xff: none), so that steps
 * need no loops of their own. Only chains that need it pay for it. */
__noinline int mpsteer_classify(struct __sk_buff *skb, struct cx *x)
{
	if (!x)
		return 0;
	struct walk w; /* opt is read only up to olen */
	__u8 flags = x->flags;
	w.i = w.olen = w.types = 0;
	w.locs = 0xffffffff;
	w.syn = (flags & TCP_SYN) != 0;
	w.ack = (flags & TCP_ACK) != 0;
	if (flags & TCP_FIN)
		w.types |= T_FIN;
	if (flags & TCP_RST)
		w.types |= T_RST;
	__u32 olen = (x->thlen - 20) & 0x3f;
	if (olen > 0 && olen <= 40 && bpf_skb_load_bytes(skb, x->l4 + 20, w.opt, olen) == 0) {
		w.olen = olen;
		/* Linux's own layout starts with NOP NOP timestamps: skip it;
		 * the next option (often the only MPTCP one, a DSS) without a
		 * loop, then the rest in one. */
		if (olen >= 12 && w.opt[0] == TCPOPT_NOP && w.opt[1] == TCPOPT_NOP && w.opt[2] == 8 && w.opt[3] == 10)
			w.i = 12;
		if (!walk_step(&w) && w.i < olen)
			bpf_loop(40, walk_one, &w, 0);
	}
	x->types = w.types;
	x->locs = w.locs;
	return 0;
}

/* classify_fast handles, in place and without a loop, the layout nearly
 * every MPTCP segment has: an optional NOP NOP timestamps, then one DSS
 * that ends the options. 0: done; -1: walk (mpsteer_classify). */
static __always_inline int classify_fast(struct __sk_buff *skb, struct cx *x)
{
	__u8 flags = x->flags;
	__u32 olen = x->thlen - 20;
	if (flags & (TCP_SYN | TCP_FIN | TCP_RST))
		return -1;
	if (olen == 0) {
		x->types = 0;
		x->locs = 0xffffffff;
		return 0;
	}
	__u8 *p = ctx_data(skb) + (x->l4 & 0xff) + 20, *end = ctx_data_end(skb);
	if ((void *)(p + 16) > (void *)end)
		return -1;
	__u32 i = 0;
	if (p[0] == TCPOPT_NOP && p[1] == TCPOPT_NOP && p[2] == 8 && p[3] == 10)
		i = 12;
	__u8 *o = p + i;
	__u32 len = o[1];
	if (o[0] != TCPOPT_MPTCP || (o[2] >> 4) != MPTCP_SUB_DSS || len < 4 || i + len != olen)
		return -1;
	__u8 f = o[3];
	x->types = T_MPTCP | ((f & 0x04) ? T_DATA : (f & 0x01) ? T_DATA_ACK : 0);
	x->locs = 0xffff0000 | i | (len << 8);
	return 0;
}

/* ---- selectors -------------------------------------------------------- */

/* tuple, pair, src and dst: the loader turns each into a mask and a value
 * for the words of the addresses and ports (in the packet's byte order);
 * words with a zero mask are not looked at (the verifier drops them). */
struct match_args {
	__u8 v6;
	__u8 pad[3];
	__u32 mask[9], val[9];
};

static __always_inline int sel_match(const struct cx *x, const volatile struct match_args *t)
{
	if (t->v6 != x->v6)
		return 0;
#pragma unroll
	for (int k = 0; k < 9; k++) {
		if (t->mask[k] && (x->w[k] & t->mask[k]) != t->val[k])
			return 0;
	}
	return 1;
}

/* seq: subflow sequence number (kind 0) or DSS data sequence number
 * (kind 1) in [lo, hi), with wrap-around; span = the range's size on the
 * 32-bit circle, wide = hi - lo (both from the loader). */
struct seq_args {
	__u32 kind;
	__u32 lo32;
	__u64 lo, hi;
	__u64 span; /* 2^32 or more: every number */
	__u64 wide;
};

/* mpsteer_dsn finds the data sequence number of a DSS mapping: -1 none,
 * 0 a 32-bit DSN, 1 a 64-bit one. */
__noinline int mpsteer_dsn(struct __sk_buff *skb, struct cx *x, __u64 *dsn)
{
	if (!x || !dsn)
		return -1;
	__u32 at = x->locs & 0xff, n = (x->locs >> 8) & 0x1f;
	if (at == 0xff || n < 4)
		return -1;
	__u8 d[32] = {};
	if (bpf_skb_load_bytes(skb, x->l4 + 20 + (at & 0x3f), d, n))
		return -1;
	__u8 f = d[3];
	if (!(f & 0x04))
		return -1;
	__u32 off = 4;
	if (f & 0x01)
		off += (f & 0x02) ? 8 : 4;
	int wide = (f & 0x08) != 0;
	__u32 bytes = wide ? 8 : 4;
	if (off + bytes > n)
		return -1;
	__u64 v = 0;
	for (int k = 0; k < 8; k++) {
		if (k >= bytes)
			break;
		v = (v << 8) | d[(off + k) & 0x1f];
	}
	*dsn = v;
	return wide;
}

static __always_inline int sel_seq(struct __sk_buff *skb, struct cx *x, const volatile struct seq_args *t)
{
	if (t->kind == 0)
		return (__u64)(__u32)(x->seq - t->lo32) < t->span;
	__u64 dsn = 0;
	int wide = mpsteer_dsn(skb, x, &dsn);
	if (wide < 0)
		return 0;
	if (wide)
		return (dsn - t->lo) < t->wide;
	return (__u64)(__u32)((__u32)dsn - t->lo32) < t->span;
}

/* ---- actors ----------------------------------------------------------- */

struct mark_args {
	__u32 mark, priority;
	__u8 set_mark, set_priority;
};

/* account counts what an actor did; nonzero: drop the packet. */
static __always_inline int account(struct mpsteer_stats *st, int r)
{
	if (!r || !st)
		return 0;
	if (r & A_MODIFIED)
		st->modified++;
	if (r & A_SKIPPED)
		st->skipped++;
	if (r & A_ERROR)
		st->errors++;
	if (r & A_DROPPED)
		st->dropped++;
	return r & A_DROP;
}

/* The local TCP socket this packet belongs to (ingress: the packet is for
 * it; egress: it comes from it). The caller releases it. */
static __always_inline struct bpf_sock *local_sock(struct __sk_buff *skb, struct cx *x, int egress)
{
	struct bpf_sock_tuple t = {};
	__u32 size;
	if (x->v6) {
		__builtin_memcpy(t.ipv6.saddr, egress ? x->dst : x->src, 16);
		__builtin_memcpy(t.ipv6.daddr, egress ? x->src : x->dst, 16);
		t.ipv6.sport = egress ? x->dport : x->sport;
		t.ipv6.dport = egress ? x->sport : x->dport;
		size = sizeof(t.ipv6);
	} else {
		t.ipv4.saddr = egress ? x->dst[0] : x->src[0];
		t.ipv4.daddr = egress ? x->src[0] : x->dst[0];
		t.ipv4.sport = egress ? x->dport : x->sport;
		t.ipv4.dport = egress ? x->sport : x->dport;
		size = sizeof(t.ipv4);
	}
	return bpf_sk_lookup_tcp(skb, &t, size, BPF_F_CURRENT_NETNS, 0);
}

extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;

/* The MPTCP subflow context of a TCP socket (its ULP data), as a typed
 * read-only pointer: its fields are then read directly (CO-RE), without
 * a bpf_probe_read_kernel call each. */
static __always_inline struct mptcp_subflow_context *subflow_ctx(struct tcp_sock *tp)
{
	void *ulp = tp->inet_conn.icsk_ulp_data;
	if (!ulp)
		return 0;
	return bpf_rdonly_cast(ulp, bpf_core_type_id_kernel(struct mptcp_subflow_context));
}

/* What the socket-reading actors need of the packet's local socket, kept
 * per CPU for the flow of the last packet that asked, for the rest of the
 * jiffy it was read in (1-4 ms): the packets of a busy flow come in runs,
 * and finding a socket (a hash lookup and a reference taken and dropped)
 * costs more than the rest of such an actor. What is kept changes slowly
 * (SRTT) or not at all (window scale); a backup flag changed by someone
 * else is seen at the next jiffy. Per chain program (the map is its own),
 * so one chain's packets never evict another's. sock_cache (the loader's,
 * default on) turns it off, for the benchmark's cold figures. */
struct sock_info {
	__u64 jiffies; /* when it was read */
	__u32 w[9];    /* the packet's addresses and ports (struct cx) */
	__u32 egress;
	__s32 backup;  /* the subflow's backup flag; -1: not an MPTCP subflow */
	__u32 tcp;     /* a TCP socket was found */
	__u32 wscale;  /* the shift of the window in this direction's packets */
	__u32 srtt_us;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sock_info);
} mpsteer_sock_cache SEC(".maps");

volatile const __u32 sock_cache = 1;

static __always_inline int same_flow(const struct sock_info *c, const struct cx *x, __u32 egress)
{
	__u32 d = c->egress ^ egress;
#pragma unroll
	for (int i = 0; i < 9; i++)
		d |= c->w[i] ^ x->w[i];
	return d == 0;
}

static __always_inline struct sock_info *sock_info(struct __sk_buff *skb, struct cx *x, __u32 egress)
{
	__u32 zero = 0;
	struct sock_info *c = bpf_map_lookup_elem(&mpsteer_sock_cache, &zero);
	if (!c)
		return 0;
	__u64 now = bpf_jiffies64();
	if (sock_cache && c->jiffies == now && same_flow(c, x, egress))
		return c;
	c->tcp = 0;
	c->backup = -1;
	c->wscale = 0;
	c->srtt_us = 0;
	struct bpf_sock *sk = local_sock(skb, x, egress);
	if (sk) {
		struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
		if (tp) {
			c->tcp = 1;
			/* Ingress: the peer's window, scaled by its shift (our
			 * snd_wscale). Egress: ours, scaled by rcv_wscale. */
			if (egress)
				c->wscale = BPF_CORE_READ_BITFIELD(tp, rx_opt.rcv_wscale);
			else
				c->wscale = BPF_CORE_READ_BITFIELD(tp, rx_opt.snd_wscale);
			c->srtt_us = tp->srtt_us >> 3;
			if (tp->is_mptcp) {
				struct mptcp_subflow_context *sf = subflow_ctx(tp);
				if (sf)
					c->backup = BPF_CORE_READ_BITFIELD(sf, backup);
			}
		}
		bpf_sk_release(sk);
	}
#pragma unroll
	for (int i = 0; i < 9; i++)
		c->w[i] = x->w[i];
	c->egress = egress;
	c->jiffies = now;
	return c;
}

/* clamp_rwnd: lower the receive window advertised in the packet so that
 * the sender of the packet's subflow can have at most `window` bytes (or
 * rate × SRTT) in flight. Aware of window scaling; never on SYNs. */
struct clamp_args {
	__u64 rate;   /* bytes per second; 0: use window */
	__u32 window; /* bytes */
	__u32 egress;
};

extern void *bpf_cast_to_kern_ctx(void *obj) __ksym;

#define CHECKSUM_PARTIAL 3

static __always_inline int clamp_rwnd(struct __sk_buff *skb, struct cx *x, __u64 rate, __u32 window, __u32 egress)
{
	/* flags, window and checksum, read from the packet (an earlier step
	 * may have changed them) */
	__u8 *th = header(skb, (x->l4 & 0xff) + 12, 6);
	if (!th)
		return A_SKIPPED;
	if (th[1] & TCP_SYN)
		return 0; /* SYN windows are not scaled: never touched */
	__u16 old = (__u16)th[2] << 8 | th[3];
	__u16 oldw = *(__u16 *)(th + 2), oldc = *(__u16 *)(th + 4); /* as in the packet */
	const struct sock_info *si = sock_info(skb, x, egress);
	if (!si || !si->tcp)
		return A_SKIPPED;
	__u32 wscale = si->wscale & 0xf;
	__u64 want = window;
	if (rate) {
		if (!si->srtt_us)
			return A_SKIPPED;
		want = rate * si->srtt_us / 1000000;
		if (want < 1448)
			want = 1448;
	}
	__u64 scaled = (want + (1u << wscale) - 1) >> wscale;
	if (scaled == 0)
		scaled = 1;
	if (scaled >= old)
		return 0; /* only ever lower it */
	/* The window and its checksum in one store (one helper call, which
	 * makes only these bytes writable; a write in place would make the
	 * verifier unclone every packet the chain sees). The checksum as the
	 * kernel's bpf_l4_csum_replace would leave it: with CHECKSUM_PARTIAL
	 * the field holds only the pseudo-header's sum and the window is
	 * summed later, so it stays; otherwise RFC 1624's update, which also
	 * keeps the segment's sum (a CHECKSUM_COMPLETE skb->csum) as it was. */
	struct sk_buff *kskb = bpf_cast_to_kern_ctx(skb);
	__u16 w[2];
	w[0] = bpf_htons((__u16)scaled);
	w[1] = oldc;
	__u32 n = 2;
	if (BPF_CORE_READ_BITFIELD(kskb, ip_summed) != CHECKSUM_PARTIAL) {
		__u32 sum = (__u16)~oldc + (__u16)~oldw + w[0];
		sum = (sum & 0xffff) + (sum >> 16);
		sum = (sum & 0xffff) + (sum >> 16);
		w[1] = ~sum;
		n = 4;
	}
	if (bpf_skb_store_bytes(skb, x->l4 + 14, w, n, 0))
		return A_SKIPPED;
	return A_MODIFIED;
}

/* The big actors are global functions: the verifier checks each once per
 * chain that uses it, whatever the number of steps that call it. They
 * count what they did; nonzero: drop the packet. */
__noinline int mpsteer_clamp(struct __sk_buff *skb, struct cx *x, struct mpsteer_stats *st, __u64 rate, __u32 window)
{
	if (!x)
		return 0;
	return account(st, clamp_rwnd(skb, x, rate, window & ~CLAMP_EGRESS, (window & CLAMP_EGRESS) != 0));
}

/* csum32 adds the 16-bit words of 32 bytes to a one's-complement sum, as
 * bpf_csum_diff would (words as loaded). Zero bytes add nothing, so an
 * option zero-padded to 32 bytes needs no length (and the verifier no
 * branch per word). */
static __always_inline __u32 csum32(__u32 sum, const __u8 *b)
{
#pragma unroll
	for (int q = 0; q < 32; q += 2)
		sum += *(const __u16 *)(b + q);
	return sum;
}

/* insert_opt grows the TCP header by len (a multiple of 4, at most 32)
 * and writes opt (32 bytes, zero after len) at its end.
 *
 * A segment without payload (a pure ACK) grows at its tail with
 * bpf_skb_change_tail: the new bytes are exactly where the options end,
 * so no header moves and an offloaded checksum (CHECKSUM_PARTIAL) stays
 * consistent. A segment with payload grows with bpf_skb_adjust_room
 * between IP and TCP and the TCP header moves back to the front; that is
 * only right on ingress (the stack resets the transport header of a
 * packet it receives), so egress data segments are not touched.
 *
 * The new header (data offset and the option) is written in one store;
 * then the lengths and checksums: IP total length (and IPv4 header
 * checksum) or IPv6 payload length, and the TCP checksum for the
 * pseudo-header length and for the data-offset word and the new bytes
 * (one difference, summed here), with the kernel's helpers, which handle
 * every skb->ip_summed state. */
static __always_inline int insert_opt(struct __sk_buff *skb, struct cx *x, __u8 *opt, __u32 len, int egress)
{
	__u32 thlen = x->thlen & 0x3c;
	len &= 0x3c;
	if (len == 0 || len > 32 || thlen + len > 60 || thlen < 20)
		return -1;
	__u32 l3 = x->l3 & 0xff, l4 = x->l4 & 0xff;
	__u8 hdr[96];
	if (bpf_skb_load_bytes(skb, l4, hdr, thlen))
		return -1;
	if ((hdr[12] >> 4) * 4 != thlen)
		return -1;
	__u32 iplen = x->iplen;
	__u32 l4len = iplen - (x->v6 ? 0 : (l4 - l3));
	__u32 payload = l4len - thlen;
	if (payload > 0xffff)
		return -1;
	__u16 oldw = *(__u16 *)(hdr + 12);
	hdr[12] = (((thlen + len) / 4) << 4) | (hdr[12] & 0x0f);
	__u16 neww = *(__u16 *)(hdr + 12);
	__builtin_memcpy(hdr + (thlen & 0x3c), opt, 32); /* the bytes past len are not stored */
	if (payload == 0) {
		if (bpf_skb_change_tail(skb, l4 + thlen + len, 0))
			return -1;
		/* the data offset up to the end of the new option */
		__u32 n = thlen + len - 12;
		if (n > 48)
			return -1;
		if (bpf_skb_store_bytes(skb, l4 + 12, hdr + 12, n, 0))
			return -4;
	} else {
		if (egress || (!x->v6 && l4 - l3 != 20))
			return -1; /* see above; and IPv4 options would be split */
		if (bpf_skb_adjust_room(skb, len, BPF_ADJ_ROOM_NET, 0))
			return -1;
		if (bpf_skb_store_bytes(skb, l4, hdr, thlen + len, 0))
			return -3;
	}
	__u16 oldl = bpf_htons(iplen), newl = bpf_htons(iplen + len);
	if (x->v6) {
		if (bpf_skb_store_bytes(skb, l3 + 4, &newl, 2, 0))
			return -6;
		/* the pseudo-header's 32-bit length */
		__u32 d = (__u16)~bpf_htons(l4len >> 16) + (__u16)~bpf_htons(l4len & 0xffff) +
			  bpf_htons((l4len + len) >> 16) + bpf_htons((l4len + len) & 0xffff);
		if (bpf_l4_csum_replace(skb, l4 + 16, 0, d, BPF_F_PSEUDO_HDR | BPF_F_IPV6))
			return -7;
	} else {
		/* total length and header checksum (RFC 1624), one store */
		__u8 *ip = header(skb, l3, 20);
		if (!ip)
			return -6;
		__u8 b[10];
		__builtin_memcpy(b, ip + 2, 10);
		__u32 c = (__u16)~*(__u16 *)(b + 8) + (__u16)~oldl + newl;
		c = (c & 0xffff) + (c >> 16);
		c = (c & 0xffff) + (c >> 16);
		*(__u16 *)b = newl;
		*(__u16 *)(b + 8) = ~c;
		if (bpf_skb_store_bytes(skb, l3 + 2, b, 10, 0))
			return -8;
		if (bpf_l4_csum_replace(skb, l4 + 16, bpf_htons(l4len), bpf_htons(l4len + len), 2 | BPF_F_PSEUDO_HDR))
			return -9;
	}
	__u32 diff = (__u16)~oldw + neww;
	diff = csum32(diff, opt);
	if (bpf_l4_csum_replace(skb, l4 + 16, 0, diff, 0))
		return -10;
	x->thlen = thlen + len;
	x->iplen = iplen + len;
	return 0;
}

/* set_backup / clear_backup: add MP_PRIO to an incoming ACK of the
 * subflow, so that the local stack marks it backup (or not), as if the
 * peer had asked (the eMPTCP paper's set_flow_prio). The packet is only
 * touched while the subflow's flag differs from the wanted one. */
static __always_inline int set_backup(struct __sk_buff *skb, struct cx *x, __u32 want, __u32 force)
{
	if ((x->flags & (TCP_SYN | TCP_RST)) || !(x->flags & TCP_ACK))
		return 0;
	want = want ? 1 : 0;
	struct sock_info *si = sock_info(skb, x, 0);
	int have = si ? si->backup : -1;
	if (have == want)
		return 0;
	if (have < 0 && !force)
		return A_SKIPPED; /* no local MPTCP subflow to tell */
	__u8 opt[32] = {TCPOPT_NOP, TCPOPT_MPTCP, 3, (MPTCP_SUB_PRIO << 4) | want};
	int err = insert_opt(skb, x, opt, 4, 0);
	if (err == -1)
		return A_SKIPPED;
	if (err)
		return A_ERROR | A_DROPPED | A_DROP; /* half-rewritten: never let a broken packet go */
	/* The stack flips the flag as it takes this packet: the flow's next
	 * packets in this jiffy need no MP_PRIO of their own. */
	if (si && have >= 0)
		si->backup = want;
	return A_MODIFIED;
}

__noinline int mpsteer_backup(struct __sk_buff *skb, struct cx *x, struct mpsteer_stats *st, __u32 want, __u32 force)
{
	if (!x)
		return 0;
	return account(st, set_backup(skb, x, want, force));
}

/* strip_add_addr: withhold ADD_ADDR options and keep them, so they can
 * be put back later (`mpsteer chain release`). A kept option marked for
 * release goes back into the next packet of its subflow (its HMAC does
 * not depend on the packet). */
static __always_inline int release_one(struct __sk_buff *skb, struct cx *x, struct withheld_key *k)
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
	/* NOPs up to a multiple of 4 (at most 3); zeros after */
	__u32 padded = (n + 3) & 0x3c;
	if (n < padded)
		buf[n & 0x1f] = TCPOPT_NOP;
	if (n + 1 < padded)
		buf[(n + 1) & 0x1f] = TCPOPT_NOP;
	if (n + 2 < padded)
		buf[(n + 2) & 0x1f] = TCPOPT_NOP;
	int err = insert_opt(skb, x, buf, padded, 0);
	if (err == -1)
		return -1; /* no room in this one: the next packet */
	if (err)
		return err;
	w->release = 2;
	return 1;
}

/* The withheld options' key for this packet's subflow. */
static __always_inline void withheld_key_of(struct cx *x, struct withheld_key *k)
{
	__builtin_memset(k, 0, sizeof(*k));
	k->chain = chain_id;
	k->v6 = x->v6;
	__builtin_memcpy(k->saddr, x->src, 16);
	__builtin_memcpy(k->daddr, x->dst, 16);
	k->sport = x->sport;
	k->dport = x->dport;
}

/* A packet without ADD_ADDR of a chain with options marked for release. */
static __always_inline int release_add_addr(struct __sk_buff *skb, struct cx *x)
{
	/* Any segment of the subflow can carry it back: the stack parses
	 * MPTCP options on every one (pure ACKs often carry none). */
	if (x->types & (T_FIN | T_RST))
		return 0;
	struct withheld_key k;
	withheld_key_of(x, &k);
	int r = release_one(skb, x, &k);
	if (r <= -2)
		return A_ERROR | A_DROPPED | A_DROP; /* half-rewritten: never let it go */
	if (r > 0)
		return A_MODIFIED;
	if (r == -1)
		return A_SKIPPED; /* no room: the next packet */
	return 0;
}

/* A packet with ADD_ADDR: withhold it. */
static __always_inline int strip_add_addr(struct __sk_buff *skb, struct cx *x)
{
	struct withheld_key k;
	withheld_key_of(x, &k);
	__u32 at = (x->locs >> 16) & 0xff, len = (x->locs >> 24) & 0x1f;
	if (at == 0xff || len < 8 || len > 30)
		return 0;
	__u32 i = at & 0x3f;
	__u8 opt[32] = {};
	if (bpf_skb_load_bytes(skb, x->l4 + 20 + i, opt, len))
		return A_SKIPPED;
	k.addr_id = opt[3];
	struct withheld_val *old = bpf_map_lookup_elem(&mpsteer_withheld, &k);
	if (old && old->release)
		return 0; /* released: it may pass */
	if (old) {
		/* withheld before (the peer repeats an ADD_ADDR until it is
		 * echoed): the latest copy, in place */
		old->ns = bpf_ktime_get_coarse_ns();
		old->len = len;
		__builtin_memcpy(old->opt, opt, 32);
	} else {
		struct withheld_val w = {};
		w.ns = bpf_ktime_get_coarse_ns();
		w.len = len;
		__builtin_memcpy(w.opt, opt, 32);
		bpf_map_update_elem(&mpsteer_withheld, &k, &w, BPF_ANY);
	}
	/* A packet with no DSS is the kernel's pure ACK made for the
	 * announcement (it leaves the DSS out to make room). Dropping it is
	 * harmless, the next ACK says the same, while a copy with the option
	 * blanked would be a packet without any MPTCP option: on a connection
	 * that is not yet fully established the peer then falls back to plain
	 * TCP. */
	if (!(x->types & (T_DATA | T_DATA_ACK)))
		return A_MODIFIED | A_DROP;
	/* Otherwise NOPs over a 4-byte aligned span of the header (checksum
	 * words start at even offsets); the checksum is fixed by the
	 * difference. */
	__u32 start = (20 + i) & ~3u, end = (20 + i + len + 3) & ~3u;
	__u32 span = (end - start) & 0x3c;
	if (span == 0 || span > 40 || start < 20 || end > x->thlen)
		return A_SKIPPED;
	__u8 before[72] = {}, after[72];
	if (bpf_skb_load_bytes(skb, x->l4 + start, before, span))
		return A_SKIPPED;
	__u32 from = (i + 20 - start) & 3; /* option start within the span */
	barrier_var(from); /* an addition below, not an OR the verifier refuses */
	__u32 past = from + len; /* at most 33 */
	if (past > 40)
		return A_SKIPPED;
	/* after: before with NOPs over [from, from + len), without a branch
	 * per byte: 32 NOPs from `from`, then before again from the end of
	 * the option */
	__builtin_memcpy(after, before, 72);
	__builtin_memset(after + from, TCPOPT_NOP, 32);
	__builtin_memcpy(after + past, before + past, 32);
	__s64 diff = bpf_csum_diff((__be32 *)before, span, (__be32 *)after, span, 0);
	if (diff < 0)
		return A_SKIPPED;
	if (bpf_skb_store_bytes(skb, x->l4 + start, after, span, 0) || bpf_l4_csum_replace(skb, x->l4 + 16, 0, diff, 0))
		return A_DROP;
	x->locs |= 0xffff0000; /* the ADD_ADDR is gone */
	return A_MODIFIED;
}

__noinline int mpsteer_strip(struct __sk_buff *skb, struct cx *x, struct mpsteer_stats *st)
{
	if (!x)
		return 0;
	return account(st, strip_add_addr(skb, x));
}

__noinline int mpsteer_release(struct __sk_buff *skb, struct cx *x, struct mpsteer_stats *st)
{
	if (!x)
		return 0;
	return account(st, release_add_addr(skb, x));
}

/* ---- the chain -------------------------------------------------------- */

/* run_steps runs the chain from step `start`. Both loops are unrolled:
 * step i's kind and arguments are constants, so each iteration keeps only
 * its own step's code (or none), and jumps between selectors are plain
 * branches. Selectors come first (steps before first_actor), then the
 * actors, one after another. */
static __always_inline int run_steps(struct __sk_buff *skb, struct cx *x, struct mpsteer_stats *st, __u32 start)
{
	__u32 cur = start;
#pragma clang loop unroll(full)
	for (__u32 i = 0; i < MPSTEER_MAX_STEPS; i++) {
		if (i >= first_actor || i >= n_steps)
			break;
		if (cur != i)
			continue;
		const volatile struct chain_step *s = &steps[i];
		int m = 0;
		__u8 kind = s->kind;
		if (kind == K_TUPLE || kind == K_PREFIX)
			m = sel_match(x, (const volatile void *)s->args);
		else if (kind == K_SEQ)
			m = sel_seq(skb, x, (const volatile void *)s->args);
		else if (kind == K_TYPE)
			m = (x->types & *(const volatile __u32 *)s->args) != 0;
		if (s->flags & STEP_NEGATE)
			m = !m;
		__u32 next = m ? s->on_match : s->on_miss;
		if (next == STEP_NONE)
			return TCX_NEXT;
		cur = next;
	}
	if (cur == first_actor) {
		st->selected++;
		st->bytes += skb->len;
	}
#pragma clang loop unroll(full)
	for (__u32 i = 0; i < MPSTEER_MAX_STEPS; i++) {
		if (i >= n_steps)
			break;
		if (i < first_actor || i < cur)
			continue;
		const volatile struct chain_step *s = &steps[i];
		__u8 kind = s->kind;
		int r = 0;
		if (kind == K_DROP) {
			st->dropped++;
			return TCX_DROP;
		} else if (kind == K_MARK) {
			const volatile struct mark_args *a = (const volatile void *)s->args;
			if (a->set_mark)
				skb->mark = a->mark;
			if (a->set_priority)
				skb->priority = a->priority; /* a tc classid: HTB classifies by it */
		} else if (kind == K_COUNT) {
			__u32 key = chain_slot * MPSTEER_MAX_STEPS + i;
			__u64 *v = bpf_map_lookup_elem(&mpsteer_step_count, &key);
			if (v) {
				v[0]++;
				v[1] += skb->len;
			}
		} else if (kind == K_CLAMP) {
			const volatile struct clamp_args *a = (const volatile void *)s->args;
			r = mpsteer_clamp(skb, x, st, a->rate, a->window | (a->egress ? CLAMP_EGRESS : 0));
		} else if (kind == K_BACKUP) {
			r = mpsteer_backup(skb, x, st, s->args[0], s->args[1]);
		} else if (kind == K_STRIP) {
			if (x->types & T_ADD_ADDR) {
				r = mpsteer_strip(skb, x, st);
			} else {
				__u32 cid = chain_id;
				__u32 *pending = bpf_map_lookup_elem(&mpsteer_release_pending, &cid);
				if (!pending || !*pending)
					continue; /* nothing to put back: the common case */
				r = mpsteer_release(skb, x, st);
			}
		} else if (kind == K_USER) {
			/* A loaded actor: the packet's metadata in skb->cb as
			 * mpsteer_chain.h says, then a tail call; it comes back
			 * through mpsteer_resume. */
			skb->cb[0] = (chain_slot & 0xffff) | (i << 16);
			skb->cb[1] = x->l3 | (x->l4 << 8) | (x->v6 << 16) | ((x->thlen / 4) << 24);
			skb->cb[2] = x->types;
			skb->cb[3] = x->locs;
			bpf_tail_call(skb, &mpsteer_steps, s->prog);
			return TCX_NEXT; /* not loaded: leave the packet alone */
		}
		if (r)
			return TCX_DROP;
	}
	return TCX_NEXT;
}

/* The chain, attached to its hook: parse IPv4/IPv6 + TCP once and run the
 * steps. Anything that is not a well-formed TCP segment leaves untouched.
 *
 * In a chain with loaded actors the program is also where such an actor
 * comes back to (through mpsteer_resume, which marks skb->cb[0]): then it
 * parses again (the actor may have changed the packet), takes the packet
 * types and option places as the chain had them, and goes on at the
 * step in skb->cb[0]. */
SEC("tc")
int mpsteer_chain(struct __sk_buff *skb)
{
	__u32 start = 0, resumed = 0;
	if (needs & NEED_USER) {
		__u32 a = skb->cb[0];
		if ((a >> 24) == RESUME_MAGIC && (a & 0xffff) == chain_slot) {
			a &= 0xffffff;
			barrier_var(a); /* a whole-word store */
			skb->cb[0] = a;
			start = (a >> 16) & 0xff;
			resumed = 1;
		}
	}
	if (paused)
		return TCX_NEXT;
	__u32 id = chain_id;
	struct mpsteer_stats *st = bpf_map_lookup_elem(&mpsteer_stats, &id);
	if (!st)
		return TCX_NEXT;
	if (!resumed) {
		st->seen++;
		if (!st->first_ns)
			st->first_ns = bpf_ktime_get_ns();
	}
	struct cx x;
	if (parse(skb, &x))
		return TCX_NEXT;
	if (resumed) {
		x.types = skb->cb[2];
		x.locs = skb->cb[3];
	} else {
		if ((needs & NEED_OPTS) && classify_fast(skb, &x))
			mpsteer_classify(skb, &x);
		if (needs & NEED_USER)
			skb->cb[4] = 0;
	}
	return run_steps(skb, &x, st, start);
}

/* Where a loaded actor's mpsteer_next() goes when the next step is a
 * built-in one (mpsteer_steps[1]): the chain whose descriptor slot is in
 * skb->cb[0], marked as a return. */
SEC("tc")
int mpsteer_resume(struct __sk_buff *skb)
{
	__u32 a = skb->cb[0] & 0xffffff, marked = a | (RESUME_MAGIC << 24);
	barrier_var(marked); /* whole-word stores: the context takes no others */
	skb->cb[0] = marked;
	bpf_tail_call(skb, &mpsteer_resumes, a & 0xffff);
	barrier_var(a);
	skb->cb[0] = a;
	return TCX_NEXT;
}

char LICENSE[] SEC("license") = "GPL";
