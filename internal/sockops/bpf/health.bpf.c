// SPDX-License-Identifier: GPL-2.0
// Receiver-assisted path health (RAMPTCP) on an unpatched kernel.
//
// Receiver (conf flag HL_F_REPORT): on every data segment of a selected
// MPTCP subflow it counts, per path of the connection, the loss
// indications it sees (a sequence hole opening, a duplicate segment) over
// a recent window; on every pure ACK of every subflow of the connection it
// writes the path-health option (health.h) with an entry per path: the
// window's loss and the last hop's health that the daemon puts in
// hl_lasthop. Only pure ACKs carry it (data segments keep their MSS), and
// only when it fits beside the kernel's own options (timestamps, MPTCP's
// DSS, SACK): with less room it carries the paths that fit, in turns; with
// no room it is left out. Counters say how often each happened.
//
// Sender (conf flag HL_F_PARSE): the kernel hands it the ACKs that carry an
// option it does not know; it reads ours into hl_reports, one entry per
// (connection, path), which the daemon reads. A peer without this program
// ignores the option (unknown options are ignored), and a path whose
// reports stop only loses the feature.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_core_read.h>

#include "health.h"
#include "ccname.h"

#define ENOMSG 42
#define ENOSPC 28
#define SOL_TCP 6
#define TCP_NOTSENT_LOWAT 25
#define TCP_FLAG_FIN 0x01
#define TCP_FLAG_SYN 0x02
#define TCP_FLAG_RST 0x04
#define TCP_FLAG_ACK 0x10

enum {
	HL_F_REPORT = 1, // write reports, count what arrives
	HL_F_PARSE = 2,  // read the peer's reports
	HL_F_PORTS = 4,  // only connections with a port in hl_ports
};

struct hl_conf {
	__u32 flags;
	__u32 min_segs;  // fewer segments in the window: loss unknown
	__u64 bucket_ns; // half the loss window
	// Sender: TCP_NOTSENT_LOWAT for its subflows (0: left alone), so that
	// little data waits in a subflow's own queue, where a path set
	// inactive would still have to carry it.
	__u32 notsent_lowat;
	__u32 pad;
	// ... except on subflows whose congestion control is one of these
	// (rate-based ones keep their rate through loss: what a path set
	// aside holds drains in a few round trips, and the bound cost
	// goodput there).
	char lowat_except[CC_LIST_MAX][CC_NAME_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hl_conf);
} hl_config SEC(".maps");

// Local or remote ports of the selected connections (HL_F_PORTS).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u16);
	__type(value, __u8);
} hl_ports SEC(".maps");

// Per subflow.
struct hl_sk {
	__u32 hi;   // highest sequence number received, + 1
	__u8 hi_set;
	__u8 slot;  // its path's slot in the connection, + 1 (0: none yet)
	__u16 pad;
	__u32 rot;  // where the next partial report starts
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct hl_sk);
} hl_sk_state SEC(".maps");

// One path of a connection as the receiver sees it: loss indications in
// two buckets of bucket_ns (the window is the current one and the one
// before).
struct hl_slot {
	__u32 used;
	__u8 local_id; // the reporter's address id on the path
	__u8 remote_id;
	__u16 pad;
	__u32 cur_segs;
	__u32 cur_bad;
	__u32 prev_segs;
	__u32 prev_bad;
	__u64 cur_start;
	__u64 last; // the last data segment
};

struct hl_conn {
	struct hl_slot s[HL_MAX_PATHS];
};

// By the receiver's local MPTCP token.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct hl_conn);
} hl_conns SEC(".maps");

// A path of a connection: (token, local id, remote id) of the host that
// holds the map.
struct hl_path_key {
	__u32 token;
	__u8 local_id;
	__u8 remote_id;
	__u16 pad;
};

// The last hop's health per path, written by the receiver's daemon
// (0..200, HL_UNKNOWN).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct hl_path_key);
	__type(value, __u8);
} hl_lasthop SEC(".maps");

// What the sender heard about each of its paths.
struct hl_rx {
	__u64 at;      // bpf_ktime_get_ns() of the last report about the path
	__u32 count;   // reports about it
	__u8 loss;
	__u8 lasthop;
	__u8 via_local; // the subflow it arrived on (address ids)
	__u8 via_remote;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct hl_path_key);
	__type(value, struct hl_rx);
} hl_reports SEC(".maps");

enum {
	HS_SUBFLOWS,     // subflows armed
	HS_ACKS,         // pure ACKs of reporting subflows: chances to report
	HS_WRITTEN,      // reports written with every path
	HS_PARTIAL,      // reports written with some paths (no room for all)
	HS_NO_ROOM,      // no room for even one path: left out
	HS_NO_INFO,      // nothing to report yet
	HS_STORE_FAILED, // the kernel refused the option
	HS_SEGS,         // data segments counted
	HS_HOLES,        // sequence holes opened
	HS_DUPS,         // duplicate segments
	HS_NO_SLOT,      // a ninth path: not tracked
	HS_PARSED,       // reports read
	HS_ENTRIES,      // path entries read
	HS_BAD_ENTRIES,  // entries with values out of range (ignored)
	HS_MALFORMED,    // options refused (truncated, bad length, …)
	HS_LOWAT_FAILED, // TCP_NOTSENT_LOWAT refused
	HS_LOWAT_SET,    // TCP_NOTSENT_LOWAT set
	HS_LOWAT_EXCEPT, // left alone: the subflow's congestion control is excepted
	HS_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, HS_MAX);
	__type(key, __u32);
	__type(value, __u64);
} hl_stats SEC(".maps");

// A zeroed connection, to create entries without 300 bytes of stack.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hl_conn);
} hl_zero SEC(".maps");

// Per-CPU room for the option and its entries: the verifier bounds a
// variable index in map memory, not on the stack. (A program nested on the
// same CPU, softirq over process context, could scribble over it: the
// option is then refused by the kernel or carries checked values, never a
// broken packet.)
struct hl_scratch {
	__u8 buf[HL_SCRATCH];
	struct hl_entry all[HL_MAX_PATHS];
	struct hl_entry e[HL_MAX_PATHS];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hl_scratch);
} hl_scratch SEC(".maps");

volatile const __u64 netns_cookie = 0;

static __always_inline struct hl_scratch *scratch(void)
{
	__u32 k = 0;
	return bpf_map_lookup_elem(&hl_scratch, &k);
}

static __always_inline void hcount(__u32 i)
{
	__u64 *v = bpf_map_lookup_elem(&hl_stats, &i);
	if (v)
		*v += 1; // per CPU
}

static __always_inline struct hl_conf *conf(void)
{
	__u32 k = 0;
	return bpf_map_lookup_elem(&hl_config, &k);
}

static __always_inline __u32 token_of(struct bpf_sock *sk)
{
	struct mptcp_sock *msk = bpf_skc_to_mptcp_sock(sk);
	if (!msk)
		return 0;
	return BPF_CORE_READ(msk, token);
}

// The subflow's MPTCP address ids (local, remote); -1 when unknown.
static __always_inline int subflow_ids(struct bpf_sock *sk, __u8 *local, __u8 *remote)
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return -1;
	struct mptcp_subflow_context *ctx = BPF_CORE_READ(tp, inet_conn.icsk_ulp_data);
	if (!ctx)
		return -1;
	__s16 lid = BPF_CORE_READ(ctx, local_id);
	if (lid < 0 || lid > 255)
		return -1;
	*local = (__u8)lid;
	*remote = BPF_CORE_READ(ctx, remote_id);
	return 0;
}

static __always_inline int selected(struct bpf_sock_ops *skops, struct hl_conf *c)
{
	if (!(c->flags & HL_F_PORTS))
		return 1;
	__u16 lp = skops->local_port, rp = bpf_ntohl(skops->remote_port);
	return bpf_map_lookup_elem(&hl_ports, &lp) || bpf_map_lookup_elem(&hl_ports, &rp);
}

static __always_inline void arm(struct bpf_sock_ops *skops, struct hl_conf *c)
{
	struct bpf_sock *sk = skops->sk;
	if (!sk || !bpf_skc_to_mptcp_sock(sk))
		return; // subflows only
	if (!selected(skops, c))
		return;
	if (!bpf_sk_storage_get(&hl_sk_state, sk, 0, BPF_SK_STORAGE_GET_F_CREATE))
		return;
	int flags = skops->bpf_sock_ops_cb_flags;
	if (c->flags & HL_F_REPORT)
		flags |= BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG | BPF_SOCK_OPS_PARSE_ALL_HDR_OPT_CB_FLAG;
	if (c->flags & HL_F_PARSE)
		flags |= BPF_SOCK_OPS_PARSE_UNKNOWN_HDR_OPT_CB_FLAG;
	bpf_sock_ops_cb_flags_set(skops, flags);
	if ((c->flags & HL_F_PARSE) && c->notsent_lowat) {
		struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
		int v = c->notsent_lowat;
		if (tp && cc_listed(tp, c->lowat_except))
			hcount(HS_LOWAT_EXCEPT);
		else if (bpf_setsockopt(skops, SOL_TCP, TCP_NOTSENT_LOWAT, &v, sizeof(v)))
			hcount(HS_LOWAT_FAILED);
		else
			hcount(HS_LOWAT_SET);
	}
	hcount(HS_SUBFLOWS);
}

static __always_inline struct hl_conn *conn_of(__u32 token, int create)
{
	struct hl_conn *c = bpf_map_lookup_elem(&hl_conns, &token);
	if (c || !create)
		return c;
	__u32 z = 0;
	struct hl_conn *zero = bpf_map_lookup_elem(&hl_zero, &z);
	if (!zero)
		return 0;
	bpf_map_update_elem(&hl_conns, &token, zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&hl_conns, &token);
}

// The slot of the subflow's path, taken on first use.
static __always_inline struct hl_slot *slot_of(struct hl_conn *c, struct hl_sk *st, struct bpf_sock *sk)
{
	__u8 lid, rid;
	if (subflow_ids(sk, &lid, &rid))
		return 0;
	if (st->slot) {
		struct hl_slot *s = &c->s[(st->slot - 1) & (HL_MAX_PATHS - 1)];
		if (s->used && s->local_id == lid && s->remote_id == rid)
			return s;
	}
	for (int i = 0; i < HL_MAX_PATHS; i++) {
		struct hl_slot *s = &c->s[i];
		if (s->used && s->local_id == lid && s->remote_id == rid) {
			st->slot = i + 1;
			return s;
		}
	}
	for (int i = 0; i < HL_MAX_PATHS; i++) {
		struct hl_slot *s = &c->s[i];
		if (__sync_val_compare_and_swap(&s->used, 0, 1) == 0) {
			s->local_id = lid;
			s->remote_id = rid;
			st->slot = i + 1;
			return s;
		}
	}
	hcount(HS_NO_SLOT);
	return 0;
}

static __always_inline void rotate(struct hl_slot *s, __u64 now, __u64 bucket)
{
	if (now - s->cur_start < bucket)
		return;
	if (now - s->cur_start < 2 * bucket) {
		s->prev_segs = s->cur_segs;
		s->prev_bad = s->cur_bad;
	} else {
		s->prev_segs = 0;
		s->prev_bad = 0;
	}
	s->cur_segs = 0;
	s->cur_bad = 0;
	s->cur_start = now;
}

// count_data runs on every segment the receiver gets on a reporting
// subflow, before TCP processes it (rcv_nxt is what came before).
static __always_inline void count_data(struct bpf_sock_ops *skops, struct hl_conf *cf)
{
	struct bpf_sock *sk = skops->sk;
	if (!sk)
		return;
	struct hl_sk *st = bpf_sk_storage_get(&hl_sk_state, sk, 0, 0);
	if (!st)
		return;
	void *data = (void *)(long)skops->skb_data;
	void *end = (void *)(long)skops->skb_data_end;
	struct tcphdr *th = data;
	if ((void *)(th + 1) > end)
		return;
	__u32 hlen = th->doff * 4;
	__u32 len = skops->skb_len;
	if (len <= hlen)
		return; // no payload
	__u32 plen = len - hlen;
	__u32 seq = bpf_ntohl(th->seq);
	__u32 endseq = seq + plen;
	__u32 rnxt = skops->rcv_nxt;
	if (!st->hi_set || (__s32)(rnxt - st->hi) > 0) {
		st->hi = rnxt;
		st->hi_set = 1;
	}
	__u32 bad = 0;
	if ((__s32)(seq - st->hi) > 0) {
		bad = 1; // a hole opens: what lies between was lost (or reordered)
		hcount(HS_HOLES);
	} else if ((__s32)(endseq - rnxt) <= 0) {
		bad = 1; // all of it had arrived already
		hcount(HS_DUPS);
	}
	if ((__s32)(endseq - st->hi) > 0)
		st->hi = endseq;
	__u32 mss = skops->mss_cache;
	if (mss < 256)
		mss = 1448;
	__u32 segs = (plen + mss - 1) / mss;
	hcount(HS_SEGS);

	__u32 token = token_of(sk);
	if (!token)
		return;
	struct hl_conn *c = conn_of(token, 1);
	if (!c)
		return;
	struct hl_slot *s = slot_of(c, st, sk);
	if (!s)
		return;
	__u64 now = bpf_ktime_get_ns();
	rotate(s, now, cf->bucket_ns);
	s->cur_segs += segs;
	s->cur_bad += bad;
	s->last = now;
}

// hl_entry_of says what the receiver has to report about one path: its
// entry packed as peer id, own id, loss and last hop (a byte each, from
// the lowest), with bit 32 set; 0 when nothing is known of it. A global
// function: the verifier checks its branches once, not once for each path
// and each way the paths before it went.
__noinline long hl_entry_of(struct hl_slot *s, __u32 token, __u32 min_segs, __u64 bucket, __u64 now)
{
	if (!s || !s->used)
		return 0;
	__u32 segs = 0, bad = 0;
	__u64 age = now - s->cur_start;
	if (age < bucket) {
		segs = s->cur_segs + s->prev_segs;
		bad = s->cur_bad + s->prev_bad;
	} else if (age < 2 * bucket) {
		segs = s->cur_segs;
		bad = s->cur_bad;
	}
	struct hl_path_key k = {.token = token, .local_id = s->local_id, .remote_id = s->remote_id};
	__u8 *lh = bpf_map_lookup_elem(&hl_lasthop, &k);
	__u8 loss = hl_loss(segs, bad, min_segs);
	__u8 last = lh ? *lh : HL_UNKNOWN;
	if (loss == HL_UNKNOWN && last == HL_UNKNOWN)
		return 0; // nothing to say about it
	// The recipient's local id is our remote id.
	return (1L << 32) | s->remote_id | ((__u32)s->local_id << 8) | ((__u32)loss << 16) | ((__u32)last << 24);
}

// hl_collect builds the entries worth sending for a connection (paths with
// something known) in sc->e, rotated by rot; it returns how many (0..8).
// A global function: verified once, though both the length and the
// writing callbacks use it.
__noinline int hl_collect(struct hl_conn *c, __u32 token, struct hl_conf *cf, __u32 rot, struct hl_scratch *sc)
{
	if (!c || !cf || !sc)
		return 0;
	__u32 n = 0;
	__u64 now = bpf_ktime_get_ns();
	__u64 b = cf->bucket_ns;
	__u32 min_segs = cf->min_segs;
	for (int i = 0; i < HL_MAX_PATHS; i++) {
		long v = hl_entry_of(&c->s[i], token, min_segs, b, now);
		if (!v)
			continue;
		struct hl_entry *e = &sc->all[n & (HL_MAX_PATHS - 1)];
		e->peer_id = v;
		e->own_id = v >> 8;
		e->loss = v >> 16;
		e->lasthop = v >> 24;
		n++;
	}
	if (n == 0)
		return 0;
	__u32 start = rot % n;
	for (__u32 i = 0; i < HL_MAX_PATHS; i++) {
		if (i >= n)
			break;
		sc->e[i & (HL_MAX_PATHS - 1)] = sc->all[((start + i) % n) & (HL_MAX_PATHS - 1)];
	}
	return n;
}

// A pure ACK (not SYN, FIN or RST; no payload). The kernel also asks for
// the length with no packet at all to size the MSS: nothing then, so data
// segments keep their size.
static __always_inline int pure_ack(struct bpf_sock_ops *skops)
{
	__u32 f = skops->skb_tcp_flags;
	return (f & TCP_FLAG_ACK) && !(f & (TCP_FLAG_SYN | TCP_FLAG_FIN | TCP_FLAG_RST)) && skops->skb_len == 0;
}

// report_len reserves room for as many paths as fit: the kernel says
// -ENOSPC when the room its own options leave (timestamps, MPTCP's DSS,
// SACK blocks) is too small, and the program tries one path fewer.
static __always_inline void report_len(struct bpf_sock_ops *skops, struct hl_conf *cf)
{
	struct bpf_sock *sk = skops->sk;
	if (!sk || !pure_ack(skops))
		return;
	struct hl_sk *st = bpf_sk_storage_get(&hl_sk_state, sk, 0, 0);
	if (!st)
		return;
	hcount(HS_ACKS);
	__u32 token = token_of(sk);
	struct hl_conn *c = conn_of(token, 0);
	struct hl_scratch *sc = scratch();
	int n = c && sc ? hl_collect(c, token, cf, st->rot, sc) : 0;
	if (n <= 0 || n > HL_MAX_PATHS) {
		hcount(HS_NO_INFO);
		return;
	}
	for (int k = HL_MAX_PATHS; k >= 1; k--) {
		if (k > n)
			continue;
		if (bpf_reserve_hdr_opt(skops, HL_HDR + k * HL_ENTRY, 0) == 0)
			return;
	}
	hcount(HS_NO_ROOM);
}

// report_write writes as many paths as the reserved room takes (the
// kernel refuses a longer option with -ENOSPC and writes nothing).
// written_pure_ack: in WRITE_HDR_OPT_CB the header is written and
// skb_len counts it.
static __always_inline int written_pure_ack(struct bpf_sock_ops *skops)
{
	__u32 f = skops->skb_tcp_flags;
	if (!(f & TCP_FLAG_ACK) || (f & (TCP_FLAG_SYN | TCP_FLAG_FIN | TCP_FLAG_RST)))
		return 0;
	void *data = (void *)(long)skops->skb_data;
	void *end = (void *)(long)skops->skb_data_end;
	struct tcphdr *th = data;
	if ((void *)(th + 1) > end)
		return 0;
	return skops->skb_len <= (__u32)th->doff * 4;
}

static __always_inline void report_write(struct bpf_sock_ops *skops, struct hl_conf *cf)
{
	struct bpf_sock *sk = skops->sk;
	if (!sk || !written_pure_ack(skops))
		return;
	struct hl_sk *st = bpf_sk_storage_get(&hl_sk_state, sk, 0, 0);
	if (!st)
		return;
	__u32 token = token_of(sk);
	struct hl_conn *c = conn_of(token, 0);
	struct hl_scratch *sc = scratch();
	if (!c || !sc)
		return;
	int n = hl_collect(c, token, cf, st->rot, sc);
	if (n <= 0 || n > HL_MAX_PATHS)
		return;
	// Encoded once with every path; fewer paths are the same bytes with a
	// shorter length.
	if (hl_encode(sc->buf, sc->e, n) <= 0)
		return;
	for (int k = HL_MAX_PATHS; k >= 1; k--) {
		if (k > n)
			continue;
		int len = HL_HDR + k * HL_ENTRY;
		sc->buf[1] = len;
		long err = bpf_store_hdr_opt(skops, sc->buf, len, 0);
		if (err == 0) {
			if (k < n) {
				st->rot += k; // the others go first next time
				hcount(HS_PARTIAL);
			} else {
				hcount(HS_WRITTEN);
			}
			return;
		}
		if (err != -ENOSPC) {
			hcount(HS_STORE_FAILED);
			return;
		}
	}
}

// hl_keep_reports keeps the k entries parsed into sc->e in hl_reports:
// those whose bit is set in valid, which arrived on the subflow with
// address ids via (local, then remote, a byte each). A global function:
// inline, every combination of valid and invalid entries would be checked
// apart (the verifier knows valid's bits on each path).
__noinline int hl_keep_reports(struct hl_scratch *sc, int k, __u32 valid, __u32 token, __u32 via)
{
	if (!sc)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	for (int i = 0; i < HL_MAX_PATHS; i++) {
		if (i >= k)
			break;
		if (!(valid & (1u << i))) {
			hcount(HS_BAD_ENTRIES);
			continue;
		}
		hcount(HS_ENTRIES);
		struct hl_entry *e = &sc->e[i & (HL_MAX_PATHS - 1)];
		struct hl_path_key key = {.token = token, .local_id = e->peer_id, .remote_id = e->own_id};
		struct hl_rx *rx = bpf_map_lookup_elem(&hl_reports, &key);
		if (rx) {
			rx->at = now;
			rx->count += 1;
			rx->loss = e->loss;
			rx->lasthop = e->lasthop;
			rx->via_local = via;
			rx->via_remote = via >> 8;
		} else {
			struct hl_rx v = {.at = now, .count = 1, .loss = e->loss, .lasthop = e->lasthop,
					  .via_local = via, .via_remote = via >> 8};
			bpf_map_update_elem(&hl_reports, &key, &v, BPF_ANY);
		}
	}
	return 0;
}

static __always_inline void parse_report(struct bpf_sock_ops *skops)
{
	struct bpf_sock *sk = skops->sk;
	if (!sk || !bpf_sk_storage_get(&hl_sk_state, sk, 0, 0))
		return;
	struct hl_scratch *sc = scratch();
	if (!sc)
		return;
	__builtin_memset(sc->buf, 0, sizeof(sc->buf));
	sc->buf[0] = HL_KIND;
	sc->buf[1] = HL_HDR;
	sc->buf[2] = HL_EXID_HI;
	sc->buf[3] = HL_EXID_LO;
	long r = bpf_load_hdr_opt(skops, sc->buf, HL_BUF, 0);
	if (r == -ENOMSG)
		return;
	if (r < 0) {
		hcount(HS_MALFORMED);
		return;
	}
	__u32 valid = 0;
	int k = hl_parse(sc->buf, r, sc->e, &valid);
	if (k < 0) {
		hcount(HS_MALFORMED);
		return;
	}
	hcount(HS_PARSED);
	__u32 token = token_of(sk);
	if (!token)
		return;
	__u8 vl = 0, vr = 0;
	subflow_ids(sk, &vl, &vr);
	hl_keep_reports(sc, k, valid, token, vl | ((__u32)vr << 8));
}

SEC("sockops")
int mpsteer_health(struct bpf_sock_ops *skops)
{
	if (netns_cookie && bpf_get_netns_cookie(skops) != netns_cookie)
		return 1;
	struct hl_conf *cf = conf();
	if (!cf || !cf->flags)
		return 1;
	switch (skops->op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		arm(skops, cf);
		break;
	case BPF_SOCK_OPS_PARSE_HDR_OPT_CB:
		if (cf->flags & HL_F_PARSE)
			parse_report(skops);
		if (cf->flags & HL_F_REPORT)
			count_data(skops, cf);
		break;
	case BPF_SOCK_OPS_HDR_OPT_LEN_CB:
		if (cf->flags & HL_F_REPORT)
			report_len(skops, cf);
		break;
	case BPF_SOCK_OPS_WRITE_HDR_OPT_CB:
		if (cf->flags & HL_F_REPORT)
			report_write(skops, cf);
		break;
	}
	return 1;
}

char LICENSE[] SEC("license") = "GPL";
