/* SPDX-License-Identifier: GPL-2.0 */
/* cc_listed: whether a TCP socket runs one of a short list of congestion
 * controls, named as in net.ipv4.tcp_congestion_control. The list is a
 * map value's array of CC_LIST_MAX names of CC_NAME_MAX bytes, NUL-padded;
 * an empty name ends it. Used where a setting suits loss-based congestion
 * controls only (TCP_NOTSENT_LOWAT: health.bpf.c, rtoexisting.bpf.c). */
#ifndef MPSTEER_CCNAME_H
#define MPSTEER_CCNAME_H

#define CC_NAME_MAX 16 /* TCP_CA_NAME_MAX */
#define CC_LIST_MAX 4

static __always_inline int cc_listed(struct tcp_sock *tp, const char names[CC_LIST_MAX][CC_NAME_MAX])
{
	char name[CC_NAME_MAX] = {};
	const struct tcp_congestion_ops *ops = BPF_CORE_READ(tp, inet_conn.icsk_ca_ops);
	if (!ops || bpf_core_read(name, sizeof(name), &ops->name))
		return 0;
	for (int i = 0; i < CC_LIST_MAX; i++) {
		if (!names[i][0])
			return 0;
		int same = 1;
		for (int j = 0; j < CC_NAME_MAX; j++) {
			if (names[i][j] != name[j]) {
				same = 0;
				break;
			}
			if (!name[j])
				break;
		}
		if (same)
			return 1;
	}
	return 0;
}

#endif
