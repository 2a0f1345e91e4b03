// SPDX-License-Identifier: GPL-2.0
// What the coupled congestion controls (lia.bpf.c, balia.bpf.c) share:
// the per-connection state every subflow of an MPTCP connection reads and
// writes, how a subflow finds its connection, and the Reno parts.
//
// A subflow finds its connection once, in init: its socket's ULP data is
// MPTCP's struct mptcp_subflow_context, whose conn is the connection's
// socket. That pointer keys the connection's entry in coupled_conns, and
// the subflow claims one of its MAX_SUBFLOWS slots, where it keeps its
// window and smoothed RTT. On an ACK a subflow looks its entry up (one
// hash lookup), refreshes its slot's time stamp, and writes its window
// and RTT only when they changed (the window: about once per RTT in
// congestion avoidance; the RTT: by more than an eighth). Each such write
// bumps the entry's generation; a subflow recomputes its coupled window
// from all slots (a bounded loop over MAX_SUBFLOWS) only when the
// generation moved since it last did. Subflows of one connection run on
// any CPU at once: each writes its own slot only, and a window computed
// from a slot being written is at most one change behind, as with the
// kernel's own coupled algorithms, which read the other subflows' windows
// without their locks.
//
// internal/sockops/coupled/model.go computes the same windows in Go, with
// the same fixed-point steps, for the unit tests.
#ifndef MPSTEER_COUPLED_H
#define MPSTEER_COUPLED_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "window.h"

extern __u32 tcp_slow_start(struct tcp_sock *tp, __u32 acked) __ksym;
extern void tcp_cong_avoid_ai(struct tcp_sock *tp, __u32 w, __u32 acked) __ksym;
extern __u32 tcp_reno_ssthresh(struct sock *sk) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;

/* Keyed by the connection's socket (struct mptcp_sock). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct coupled_conn);
} coupled_conns SEC(".maps");

enum {
	CST_ACKS,      /* cong_avoid calls */
	CST_RECOMPUTE, /* coupled windows computed */
	CST_JOINED,    /* subflows that took a slot */
	CST_RELEASED,  /* subflows that gave theirs back */
	CST_NOT_MPTCP, /* sockets that are no MPTCP subflow: uncoupled Reno */
	CST_NO_SLOT,   /* subflows beyond MAX_SUBFLOWS: uncoupled Reno */
	CST_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CST_MAX);
	__type(key, __u32);
	__type(value, __u64);
} coupled_stats SEC(".maps");

static __always_inline void cstat(__u32 i)
{
	__u64 *v = bpf_map_lookup_elem(&coupled_stats, &i);
	if (v)
		*v += 1;
}

/* What a subflow keeps in its congestion control's private area. */
struct coupled_priv {
	__u64 conn;  /* the connection's key; 0: uncoupled */
	__u32 slot;  /* NO_SLOT: uncoupled */
	__u32 gen;   /* the connection's generation when weff was computed */
	__u32 weff;  /* the coupled window (packets per 1 packet of increase) */
	__u32 alpha; /* BALIA's alpha, scaled by 2^FRAC */
};

static __always_inline struct coupled_priv *priv(struct sock *sk)
{
	return (struct coupled_priv *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline __u32 srtt_of(struct tcp_sock *tp)
{
	__u32 r = tp->srtt_us >> 3;
	return r < 1 ? 1 : (r > RTT_MAX ? RTT_MAX : r);
}

/* tcp_is_cwnd_limited (inline in the kernel, so not a kfunc). */
static __always_inline int cwnd_limited(struct tcp_sock *tp)
{
	if (tp->snd_cwnd < tp->snd_ssthresh)
		return tp->snd_cwnd < 2 * tp->max_packets_out;
	return !!BPF_CORE_READ_BITFIELD(tp, is_cwnd_limited);
}

/* Finds the subflow's connection and claims a slot in its entry (made if
 * this is its first subflow). A socket that is no MPTCP subflow, or a
 * subflow beyond MAX_SUBFLOWS, stays uncoupled: plain Reno. */
static __always_inline void coupled_join(struct sock *sk)
{
	struct coupled_priv *p = priv(sk);
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	p->conn = 0;
	p->slot = NO_SLOT;
	p->gen = 0;
	p->weff = 0;
	p->alpha = 1 << FRAC;
	if (!tp->is_mptcp) {
		cstat(CST_NOT_MPTCP);
		return;
	}
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;
	struct mptcp_subflow_context *ctx =
		bpf_rdonly_cast(icsk->icsk_ulp_data, bpf_core_type_id_kernel(struct mptcp_subflow_context));
	if (!ctx || (__u64)ctx->tcp_sock != (__u64)sk || !ctx->conn) {
		cstat(CST_NOT_MPTCP);
		return;
	}
	__u64 key = (__u64)ctx->conn;
	struct coupled_conn *c = bpf_map_lookup_elem(&coupled_conns, &key);
	if (!c) {
		struct coupled_conn fresh = {};
		bpf_map_update_elem(&coupled_conns, &key, &fresh, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&coupled_conns, &key);
		if (!c) {
			cstat(CST_NO_SLOT);
			return;
		}
	}
	__u64 me = (__u64)sk;
	for (__u32 k = 0; k < MAX_SUBFLOWS; k++) {
		struct coupled_slot *s = &c->slot[k];
		if (__sync_val_compare_and_swap(&s->owner, 0, me) != 0)
			continue;
		s->cwnd = clamp_cwnd(tp->snd_cwnd);
		s->rtt = srtt_of(tp);
		s->stamp = tp->tcp_mstamp;
		__sync_fetch_and_add(&c->gen, 1);
		p->conn = key;
		p->slot = k;
		cstat(CST_JOINED);
		return;
	}
	cstat(CST_NO_SLOT);
}

/* Gives the subflow's slot back; the last one out deletes the entry. */
static __always_inline void coupled_leave(struct sock *sk)
{
	struct coupled_priv *p = priv(sk);
	__u64 key = p->conn;
	__u32 k = p->slot;
	p->conn = 0;
	p->slot = NO_SLOT;
	if (!key || k >= MAX_SUBFLOWS)
		return;
	struct coupled_conn *c = bpf_map_lookup_elem(&coupled_conns, &key);
	if (!c)
		return;
	struct coupled_slot *s = &c->slot[k & (MAX_SUBFLOWS - 1)];
	if (s->owner != (__u64)sk)
		return;
	s->cwnd = 0;
	s->rtt = 0;
	s->stamp = 0;
	__sync_val_compare_and_swap(&s->owner, (__u64)sk, 0);
	__sync_fetch_and_add(&c->gen, 1);
	cstat(CST_RELEASED);
	int used = 0;
#pragma clang loop unroll(disable)
	for (int i = 0; i < MAX_SUBFLOWS; i++)
		used |= c->slot[i].owner != 0;
	if (!used)
		bpf_map_delete_elem(&coupled_conns, &key);
}

/* The subflow's entry and slot, refreshed with its window and RTT; NULL
 * when it is uncoupled (or its entry is gone). */
static __always_inline struct coupled_conn *coupled_touch(struct sock *sk, __u32 cwnd, __u32 rtt)
{
	struct coupled_priv *p = priv(sk);
	__u64 key = p->conn; /* map keys are read from the stack */
	if (!key || p->slot >= MAX_SUBFLOWS)
		return NULL;
	struct coupled_conn *c = bpf_map_lookup_elem(&coupled_conns, &key);
	if (!c)
		return NULL;
	struct coupled_slot *s = &c->slot[p->slot & (MAX_SUBFLOWS - 1)];
	s->stamp = ((struct tcp_sock *)sk)->tcp_mstamp;
	__u32 old = s->rtt, d = rtt > old ? rtt - old : old - rtt;
	if (s->cwnd != cwnd || d > old / 8) {
		s->cwnd = cwnd;
		s->rtt = rtt;
		__sync_fetch_and_add(&c->gen, 1);
	}
	return c;
}

/* coupled_window(c, self, tp, p) is each algorithm's: the
 * window w for tcp_cong_avoid_ai (one packet more per w acknowledged). */
static __u32 coupled_window(struct coupled_conn *c, __u32 self, struct tcp_sock *tp, struct coupled_priv *p);

/* Reno's growth with the increase coupled in congestion avoidance:
 * slow start as Reno's, then one packet more per coupled window
 * acknowledged. */
static __always_inline void coupled_cong_avoid(struct sock *sk, __u32 acked)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	struct coupled_priv *p = priv(sk);
	__u32 cwnd = clamp_cwnd(tp->snd_cwnd), rtt = srtt_of(tp);
	cstat(CST_ACKS);
	struct coupled_conn *c = coupled_touch(sk, cwnd, rtt);
	if (!cwnd_limited(tp))
		return;
	if (tp->snd_cwnd < tp->snd_ssthresh) {
		acked = tcp_slow_start(tp, acked);
		if (!acked)
			return;
	}
	__u32 w = tp->snd_cwnd;
	if (c) {
		if (p->gen != c->gen || !p->weff) {
			p->gen = c->gen;
			p->weff = coupled_window(c, p->slot & (MAX_SUBFLOWS - 1), tp, p);
			cstat(CST_RECOMPUTE);
		}
		w = p->weff;
	}
	tcp_cong_avoid_ai(tp, w, acked);
}

#endif
