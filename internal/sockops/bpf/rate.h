// SPDX-License-Identifier: GPL-2.0
// The per-subflow rate caps the daemon writes (bpf/rate.bpf.c applies them
// on the subflow's ACKs; bpf/capcc.bpf.c, the capping congestion control,
// reads them on every ACK of a subflow that runs it).
#ifndef MPSTEER_RATE_H
#define MPSTEER_RATE_H

#include <bpf/bpf_core_read.h>

#define AF_INET 2
#define AF_INET6 10

#define SOL_SOCKET 1
#define SO_MAX_PACING_RATE 47
#ifndef SOL_TCP
#define SOL_TCP 6
#endif
#define TCP_NOTSENT_LOWAT 25

#define RATE_UNLIMITED 0xffffffffULL /* bytes per second: no cap */

/* How a cap is held (rate_val.via). */
#define VIA_PACING 0 /* SO_MAX_PACING_RATE */
#define VIA_CC 1     /* the subflow runs the capping congestion control */

#define CC_NAME_MAX 16 /* TCP_CA_NAME_MAX */

struct flow_key {
	__u32 family;
	__u32 laddr[4]; /* network byte order, IPv4 in [0] */
	__u32 raddr[4];
	__u16 lport;    /* host byte order */
	__u16 rport;
};

/* A subflow's cap, as the daemon writes it (whole values, in rate_limit);
 * the programs only read it. */
struct rate_val {
	__u64 rate; /* bytes per second; ≥ RATE_UNLIMITED: no limit */
	__u32 via;
	/* VIA_PACING: TCP_NOTSENT_LOWAT while the cap holds (0: left as it
	 * is), so that little waits unsent on a held subflow; the socket's
	 * own value is kept in rate_done and put back when the cap is lifted
	 * or notsent goes to 0. */
	__u32 notsent;
};

/* What the programs did with a subflow's cap (rate_done, under the same
 * key); the daemon only reads it, and deletes it after the subflow's
 * rate_limit entry. A map of its own: the daemon writes rate_limit's
 * values whole, and what a program wrote meanwhile (the socket's own
 * TCP_NOTSENT_LOWAT, its congestion control) would be lost under a
 * read-modify-write. */
struct rate_done {
	__u64 applied;              /* what the socket has of rate */
	char prior_cc[CC_NAME_MAX]; /* VIA_CC: the congestion control to go back to */
	__u32 notsent_applied;      /* what the socket has of notsent */
	__u32 notsent_prior;        /* the socket's own TCP_NOTSENT_LOWAT, */
	__u32 notsent_saved;        /* kept there (1) */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct flow_key);
	__type(value, struct rate_val);
} rate_limit SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct flow_key);
	__type(value, struct rate_done);
} rate_done SEC(".maps");

/* done_of returns the subflow's rate_done entry, made (zero: nothing
 * applied) if it has none; NULL if the map is full. */
static __always_inline struct rate_done *done_of(struct flow_key *k)
{
	struct rate_done *d = bpf_map_lookup_elem(&rate_done, k);
	if (d)
		return d;
	struct rate_done zero = {};
	bpf_map_update_elem(&rate_done, k, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&rate_done, k);
}

/* set_pacing puts v's cap on a socket as its SO_MAX_PACING_RATE (an int
 * from BPF, ~0U meaning no limit) and records it in d as applied; sk is
 * the program's socket (a bpf_sock_ops in sockops, a tcp_sock in an
 * iterator). Returns 0 on success. */
static __always_inline long set_pacing(void *sk, struct rate_val *v, struct rate_done *d)
{
	__u32 rate = v->rate >= RATE_UNLIMITED ? (__u32)RATE_UNLIMITED : (__u32)v->rate;
	long err = bpf_setsockopt(sk, SOL_SOCKET, SO_MAX_PACING_RATE, &rate, sizeof(rate));
	if (!err)
		d->applied = rate;
	return err;
}

/* notsent_due says whether the socket's TCP_NOTSENT_LOWAT is not yet
 * what v wants: v's notsent while the cap holds, the socket's own value
 * back once it is lifted. */
static __always_inline int notsent_due(struct rate_val *v, struct rate_done *d)
{
	if (v->notsent && v->rate < RATE_UNLIMITED)
		return !d->notsent_saved || d->notsent_applied != v->notsent;
	return d->notsent_saved;
}

/* set_notsent gives a socket the TCP_NOTSENT_LOWAT v wants, once
 * notsent_due says it is due; sk is the program's socket, tp its tcp_sock
 * (to read the value it had). Returns 0 on success. */
static __always_inline long set_notsent(void *sk, struct tcp_sock *tp, struct rate_val *v, struct rate_done *d)
{
	int holds = v->notsent && v->rate < RATE_UNLIMITED;
	int want;
	if (holds) {
		if (!d->notsent_saved) {
			d->notsent_prior = BPF_CORE_READ(tp, notsent_lowat);
			d->notsent_saved = 1;
		}
		want = v->notsent;
	} else {
		want = d->notsent_prior;
	}
	long err = bpf_setsockopt(sk, SOL_TCP, TCP_NOTSENT_LOWAT, &want, sizeof(want));
	if (err)
		return err;
	if (holds) {
		d->notsent_applied = want;
	} else {
		d->notsent_saved = 0;
		d->notsent_applied = 0;
	}
	return 0;
}

#endif
