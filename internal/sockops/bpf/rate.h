// SPDX-License-Identifier: GPL-2.0
// The per-subflow rate caps the daemon writes (bpf/rate.bpf.c applies them
// on the subflow's ACKs; bpf/capcc.bpf.c, the capping congestion control,
// reads them on every ACK of a subflow that runs it).
#ifndef MPSTEER_RATE_H
#define MPSTEER_RATE_H

#define AF_INET 2
#define AF_INET6 10

#define SOL_SOCKET 1
#define SO_MAX_PACING_RATE 47

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

struct rate_val {
	__u64 rate;    /* bytes per second; ≥ RATE_UNLIMITED: no limit */
	__u64 applied; /* what the socket has (written back here) */
	__u32 via;
	__u32 pad;
	char prior_cc[CC_NAME_MAX]; /* VIA_CC: the congestion control to go back to */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct flow_key);
	__type(value, struct rate_val);
} rate_limit SEC(".maps");

/* set_pacing puts v's cap on a socket as its SO_MAX_PACING_RATE (an int
 * from BPF, ~0U meaning no limit) and records it as applied; sk is the
 * program's socket (a bpf_sock_ops in sockops, a tcp_sock in an
 * iterator). Returns 0 on success. */
static __always_inline long set_pacing(void *sk, struct rate_val *v)
{
	__u32 rate = v->rate >= RATE_UNLIMITED ? (__u32)RATE_UNLIMITED : (__u32)v->rate;
	long err = bpf_setsockopt(sk, SOL_SOCKET, SO_MAX_PACING_RATE, &rate, sizeof(rate));
	if (!err)
		v->applied = rate;
	return err;
}

#endif
