// SPDX-License-Identifier: GPL-2.0
/* mpsteer: one record per MPTCP subflow of the iterating namespace, the
 * values inet_diag's INET_DIAG_INFO (tcp_info), INET_DIAG_CONG,
 * INET_DIAG_CGROUP_ID and the MPTCP ULP info give, read straight from the
 * socket: no netlink attributes built and parsed per socket, and no socket
 * lock taken (the values are the same lock-free reads tcp_get_info makes
 * for a socket it does not own). Layout: struct sf_record, mirrored by
 * subflowiter.record in Go. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "GPL";

extern unsigned int CONFIG_HZ __kconfig;
/* A typed, read-only view of a kernel pointer: its fields are read by
 * plain loads (the JIT's fault-safe loads), not one helper call each. */
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;

#define AF_INET6 10
#define TCP_LISTEN 10
#define TCP_CLOSE 7

/* MPTCP_SUBFLOW_FLAG_* (uapi/linux/mptcp.h) */
#define FLAG_MCAP_REM 0x1
#define FLAG_MCAP_LOC 0x2
#define FLAG_JOIN_REM 0x4
#define FLAG_JOIN_LOC 0x8
#define FLAG_BKUP_REM 0x10
#define FLAG_BKUP_LOC 0x20
#define FLAG_FULLY_EST 0x40
#define FLAG_CONNECTED 0x80
#define FLAG_MAPVALID 0x100

struct sf_record {
	__u64 cookie;
	__u64 cgroup_id;
	__u64 pacing_rate;   /* bytes/s */
	__u64 delivery_rate; /* bytes/s */
	__u64 bytes_sent;
	__u64 bytes_acked;
	__u64 bytes_received;
	__u64 bytes_retrans;
	__u8 saddr[16];
	__u8 daddr[16];
	__u16 family;
	__u16 sport; /* host order */
	__u16 dport; /* host order */
	__u8 state;
	__u8 backoff;
	__u32 token;
	__u32 remote_token;
	__u32 mp_flags;
	__u32 srtt_us;
	__u32 rttvar_us;
	__u32 min_rtt_us;
	__u32 rto_us;
	__u32 cwnd;
	__u32 ssthresh;
	__u32 mss;
	__u32 total_retrans;
	__u32 lost;
	__u32 unacked;
	__u32 notsent;
	__u32 snd_wnd;
	__u32 last_data_sent_ms;
	__u32 last_ack_recv_ms;
	__u8 ca_state;
	__u8 local_id;
	__u8 remote_id;
	__u8 pad;
	char cc[16];
	/* BBR's state (tcp_bbr.c's struct bbr), where cc is "bbr": since when
	 * its min_rtt filter was last refreshed (ProbeRTT comes 10 s after,
	 * bbr_min_rtt_win_sec) and its mode; bbr_valid 0 elsewhere. */
	__u32 bbr_min_rtt_age_ms;
	__u8 bbr_mode;
	__u8 bbr_valid;
	__u8 pad2[2];
};

/* struct bbr's layout, unchanged since Linux 4.20 (6.1, 6.12 and 6.18 all
 * have it; subflowiter's TestBBRLayout checks it against the running
 * kernel's BTF, vmlinux's or the tcp_bbr module's). Read by offset, not
 * CO-RE: on distribution kernels tcp_bbr is a module, and its BTF is the
 * module's. */
#define BBR_MIN_RTT_STAMP_WORD 1 /* u32 min_rtt_stamp, jiffies */
#define BBR_MODE_WORD 14	 /* u32 mode:3 at bit 448 */

/* The congestion control's name, read once per ops table: sockets share
 * a handful of them, and a string read is a helper call. One reader at a
 * time (the daemon's sampler) runs this program's iterator. */
static const void *cc_ops;
static char cc_name[16];

static __always_inline __u32 jiffies_to_usecs(__u64 j)
{
	return (__u32)(j * 1000000 / CONFIG_HZ);
}

static __always_inline __u32 jiffies_to_msecs(__u32 j)
{
	return (__u32)((__u64)j * 1000 / CONFIG_HZ);
}

static __always_inline __u32 subflow_flags(const struct mptcp_subflow_context *sf)
{
	__u32 f = 0;

	if (BPF_CORE_READ_BITFIELD(sf, mp_capable))
		f |= FLAG_MCAP_REM;
	if (BPF_CORE_READ_BITFIELD(sf, request_mptcp))
		f |= FLAG_MCAP_LOC;
	if (BPF_CORE_READ_BITFIELD(sf, mp_join))
		f |= FLAG_JOIN_REM;
	if (BPF_CORE_READ_BITFIELD(sf, request_join))
		f |= FLAG_JOIN_LOC;
	if (BPF_CORE_READ_BITFIELD(sf, backup))
		f |= FLAG_BKUP_REM;
	if (BPF_CORE_READ_BITFIELD(sf, request_bkup))
		f |= FLAG_BKUP_LOC;
	if (sf->fully_established)
		f |= FLAG_FULLY_EST;
	if (BPF_CORE_READ_BITFIELD(sf, conn_finished))
		f |= FLAG_CONNECTED;
	if (BPF_CORE_READ_BITFIELD(sf, map_valid))
		f |= FLAG_MAPVALID;
	return f;
}

SEC("iter/tcp")
int sample_subflows(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct sf_record r = {};
	struct tcp_sock *tp;
	struct mptcp_subflow_context *sf;
	const struct inet_connection_sock *icsk;
	const struct sock *sk;
	__u32 now, rate, intv;
	__s16 local_id;

	if (!skc)
		return 0;
	tp = bpf_skc_to_tcp_sock(skc); /* full sockets only: no request or timewait */
	if (!tp)
		return 0;
	icsk = &tp->inet_conn;
	sk = &icsk->icsk_inet.sk;
	r.state = sk->__sk_common.skc_state;
	if (r.state == TCP_LISTEN || r.state == TCP_CLOSE)
		return 0;
	if (!BPF_CORE_READ_BITFIELD(tp, is_mptcp))
		return 0;
	if (!icsk->icsk_ulp_data)
		return 0;
	sf = bpf_rdonly_cast(icsk->icsk_ulp_data, bpf_core_type_id_kernel(struct mptcp_subflow_context));

	r.cookie = bpf_get_socket_cookie((struct sock *)sk);
	r.cgroup_id = sk->sk_cgrp_data.cgroup->kn->id;
	r.family = sk->__sk_common.skc_family;
	if (r.family == AF_INET6) {
		__builtin_memcpy(r.saddr, &sk->__sk_common.skc_v6_rcv_saddr, 16);
		__builtin_memcpy(r.daddr, &sk->__sk_common.skc_v6_daddr, 16);
	} else {
		__builtin_memcpy(r.saddr, &sk->__sk_common.skc_rcv_saddr, 4);
		__builtin_memcpy(r.daddr, &sk->__sk_common.skc_daddr, 4);
	}
	r.sport = sk->__sk_common.skc_num;
	r.dport = bpf_ntohs(sk->__sk_common.skc_dport);

	/* tcp_get_info()'s values */
	r.srtt_us = tp->srtt_us >> 3;
	r.rttvar_us = tp->mdev_us >> 2;
	r.min_rtt_us = tp->rtt_min.s[0].v;
	r.rto_us = jiffies_to_usecs(icsk->icsk_rto);
	r.backoff = icsk->icsk_backoff;
	r.ca_state = BPF_CORE_READ_BITFIELD(icsk, icsk_ca_state);
	r.cwnd = tp->snd_cwnd;
	r.ssthresh = tp->snd_ssthresh;
	r.mss = tp->mss_cache;
	r.pacing_rate = sk->sk_pacing_rate;
	rate = tp->rate_delivered;
	intv = tp->rate_interval_us;
	if (rate && intv)
		r.delivery_rate = (__u64)rate * tp->mss_cache * 1000000 / intv;
	r.bytes_sent = tp->bytes_sent;
	r.bytes_acked = tp->bytes_acked;
	r.bytes_received = tp->bytes_received;
	r.bytes_retrans = tp->bytes_retrans;
	r.total_retrans = tp->total_retrans;
	r.lost = tp->lost_out;
	r.unacked = tp->packets_out;
	if ((__s32)(tp->write_seq - tp->snd_nxt) > 0)
		r.notsent = tp->write_seq - tp->snd_nxt;
	r.snd_wnd = tp->snd_wnd;
	now = (__u32)bpf_jiffies64();
	r.last_data_sent_ms = jiffies_to_msecs(now - tp->lsndtime);
	r.last_ack_recv_ms = jiffies_to_msecs(now - tp->rcv_tstamp);
	if (icsk->icsk_ca_ops != cc_ops) {
		BPF_CORE_READ_STR_INTO(&cc_name, icsk, icsk_ca_ops, name);
		cc_ops = icsk->icsk_ca_ops;
	}
	__builtin_memcpy(r.cc, cc_name, sizeof(r.cc));
	if (r.cc[0] == 'b' && r.cc[1] == 'b' && r.cc[2] == 'r' && r.cc[3] == 0) {
		const __u32 *bbr = (const __u32 *)icsk->icsk_ca_priv;

		r.bbr_min_rtt_age_ms = jiffies_to_msecs(now - bbr[BBR_MIN_RTT_STAMP_WORD]);
		r.bbr_mode = bbr[BBR_MODE_WORD] & 7;
		r.bbr_valid = 1;
	}

	/* subflow_get_info()'s values */
	r.mp_flags = subflow_flags(sf);
	r.token = sf->token;
	r.remote_token = sf->remote_token;
	r.remote_id = sf->remote_id;
	local_id = sf->local_id;
	r.local_id = local_id < 0 ? 0 : local_id;

	bpf_seq_write(ctx->meta->seq, &r, sizeof(r));
	return 0;
}
