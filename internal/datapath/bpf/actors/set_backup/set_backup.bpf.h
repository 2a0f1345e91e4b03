// SPDX-License-Identifier: GPL-2.0
/* set_backup and clear_backup: MP_PRIO into an incoming ACK (README.md). */
#ifndef MPSTEER_BPF_ACT_SET_BACKUP
#define MPSTEER_BPF_ACT_SET_BACKUP

#include "../../packet/insert.h"
#include "../../packet/socket.h"

/* set_backup / clear_backup: add MP_PRIO to an incoming ACK of the
 * subflow, so that the local stack marks it backup (or not), as if the
 * peer had asked (the eMPTCP paper's set_flow_prio). The packet is only
 * touched while the subflow's flag differs from the wanted one. */
static __always_inline int set_backup(struct __sk_buff *skb, struct cx *x, __u32 want, __u32 force, const int no_kfuncs)
{
	if ((x->flags & (TCP_SYN | TCP_RST)) || !(x->flags & TCP_ACK))
		return 0;
	want = want ? 1 : 0;
	struct sock_info *si = sock_info(skb, x, 0, no_kfuncs);
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
	return account(st, set_backup(skb, x, want, force, 0));
}

/* mpsteer_backup for a kernel without bpf_rdonly_cast (before 6.2). */
__noinline int mpsteer_backup_no_kfuncs(struct __sk_buff *skb, struct cx *x, struct mpsteer_stats *st, __u32 want, __u32 force)
{
	if (!x)
		return 0;
	return account(st, set_backup(skb, x, want, force, 1));
}

#endif
