// SPDX-License-Identifier: GPL-2.0
/* Growing a TCP header by an option, with every length and checksum
 * fixed: set_backup's MP_PRIO, a released ADD_ADDR. */
#ifndef MPSTEER_BPF_PACKET_INSERT_H
#define MPSTEER_BPF_PACKET_INSERT_H

#include "parse.h"

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
	__u64 thlen = x->thlen & 0x3c;
	len &= 0x3c;
	if (len == 0 || len > 32)
		return -1;
	/* Both compares on thlen itself: the helpers' lengths below count on
	 * them. (Compared as thlen + len, a copy of thlen plus a constant, the
	 * 6.12 verifier loses thlen's bounds when it carries the compare back
	 * to it.) */
	if (!at_least(thlen, 20) || thlen > 60 - len)
		return -1;
	__u32 l3 = x->l3 & 0xff, l4 = x->l4 & 0xff;
	/* zeroed: before 6.8 a helper that fills a variable length of stack
	 * wants all of it initialized first */
	__u8 hdr[96] = {};
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

#endif
