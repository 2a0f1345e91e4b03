/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The path-health option (RAMPTCP's receiver reports), shared by the
 * sockops program that writes and parses it (health.bpf.c) and the tc
 * program the tests run it in through BPF_PROG_TEST_RUN (healthtest.bpf.c,
 * since sockops programs cannot be run that way).
 *
 * Layout (RFC 6994 experimental option, 4 + 4·n bytes, n = 1..8):
 *
 *   kind 253 | length | ExID 0x5241 ("RA", 16 bits)
 *   then per path:  peer id | own id | loss | last hop
 *
 *   peer id   the MPTCP address id of the path's end at the report's
 *             recipient (the data sender): its local id for the subflow
 *   own id    the address id of the path's end at the reporter (the data
 *             receiver)
 *   loss      loss indications the reporter saw on the path over its recent
 *             window (sequence holes opened + duplicate segments, per data
 *             segment received), 0..200 in steps of 0.5%; 255: no data in
 *             the window
 *   last hop  the health of the reporter's last hop on the path (1 - the
 *             loss it sees there, radio or emulated), 0..200 in steps of
 *             0.5% (200: healthy); 255: not known
 *
 * Every length and offset below is a constant or bounded by one, so the
 * helpers verify in any program type.
 */
#ifndef MPSTEER_HEALTH_H
#define MPSTEER_HEALTH_H

#define HL_KIND 253
#define HL_EXID 0x5241
#define HL_EXID_HI 0x52
#define HL_EXID_LO 0x41
#define HL_HDR 4
#define HL_ENTRY 4
#define HL_MAX_PATHS 8
#define HL_MAX_LEN (HL_HDR + HL_MAX_PATHS * HL_ENTRY) /* 36 */
#define HL_BUF 40                                     /* TCP's whole option space */
/* Buffers the helpers index are this big and live in map memory (the
 * verifier bounds a variable index there; on the stack it refuses it):
 * every index is masked with HL_MASK, and 8 bytes more cover an entry's
 * last byte. */
#define HL_MASK 63
#define HL_SCRATCH 72
#define HL_SCALE 200
#define HL_UNKNOWN 255

struct hl_entry {
	__u8 peer_id;
	__u8 own_id;
	__u8 loss;
	__u8 lasthop;
};

/* Why an option was refused (hl_parse returns the negative value). */
enum hl_status {
	HL_OK = 0,
	HL_ERR_SHORT = 1,     /* fewer bytes than a header and one entry */
	HL_ERR_KIND = 2,      /* not kind 253 */
	HL_ERR_TRUNCATED = 3, /* its length says more than the packet holds */
	HL_ERR_LENGTH = 4,    /* length not 4 + 4·n with n in 1..8 */
	HL_ERR_EXID = 5,      /* someone else's experiment */
};

/* hl_value_ok: a loss or last-hop byte is a fraction in 0..200 or 255. */
static __always_inline int hl_value_ok(__u8 v)
{
	return v <= HL_SCALE || v == HL_UNKNOWN;
}

/*
 * hl_parse reads the option in buf (n bytes of it are valid, as copied from
 * the packet; buf is HL_SCRATCH bytes of map memory, out 8 entries). It returns the number of entries the
 * option carries (1..8) and sets bit i of *valid for each entry i whose
 * values are in range (entries out of range are ignored, not trusted), or
 * -hl_status when the option as a whole is refused.
 */
static __always_inline int hl_parse(const __u8 *buf, int n, struct hl_entry *out, __u32 *valid)
{
	*valid = 0;
	if (n < HL_HDR + HL_ENTRY || n > HL_BUF)
		return -HL_ERR_SHORT;
	if (buf[0] != HL_KIND)
		return -HL_ERR_KIND;
	__u32 len = buf[1];
	if (len > (__u32)n)
		return -HL_ERR_TRUNCATED;
	if (len < HL_HDR + HL_ENTRY || len > HL_MAX_LEN || (len - HL_HDR) % HL_ENTRY)
		return -HL_ERR_LENGTH;
	if (buf[2] != HL_EXID_HI || buf[3] != HL_EXID_LO)
		return -HL_ERR_EXID;
	__u32 k = (len - HL_HDR) / HL_ENTRY;
	for (__u32 i = 0; i < HL_MAX_PATHS; i++) {
		if (i >= k)
			break;
		const __u8 *e = buf + ((HL_HDR + i * HL_ENTRY) & HL_MASK);
		struct hl_entry *o = &out[i & (HL_MAX_PATHS - 1)];
		o->peer_id = e[0];
		o->own_id = e[1];
		o->loss = e[2];
		o->lasthop = e[3];
		if (hl_value_ok(e[2]) && hl_value_ok(e[3]))
			*valid |= 1u << i;
	}
	return (int)k;
}

/*
 * hl_fit is how many of n entries fit in room bytes of option space (0:
 * not even one; the option is then left out).
 */
static __always_inline int hl_fit(__u32 room, __u32 n)
{
	if (room < HL_HDR + HL_ENTRY || n == 0)
		return 0;
	__u32 k = (room - HL_HDR) / HL_ENTRY;
	if (k > n)
		k = n;
	if (k > HL_MAX_PATHS)
		k = HL_MAX_PATHS;
	return k;
}

/*
 * hl_encode writes the option with entries e[0..k) into buf (HL_SCRATCH
 * bytes of map memory) and returns its length (0 when k is out of range).
 */
static __always_inline int hl_encode(__u8 *buf, const struct hl_entry *e, int k)
{
	if (k < 1 || k > HL_MAX_PATHS)
		return 0;
	buf[0] = HL_KIND;
	buf[1] = HL_HDR + k * HL_ENTRY;
	buf[2] = HL_EXID_HI;
	buf[3] = HL_EXID_LO;
	for (__u32 i = 0; i < HL_MAX_PATHS; i++) {
		if (i >= (__u32)k)
			break;
		__u8 *o = buf + ((HL_HDR + i * HL_ENTRY) & HL_MASK);
		const struct hl_entry *x = &e[i & (HL_MAX_PATHS - 1)];
		o[0] = x->peer_id;
		o[1] = x->own_id;
		o[2] = x->loss;
		o[3] = x->lasthop;
	}
	return HL_HDR + k * HL_ENTRY;
}

/*
 * hl_loss turns a window's counts into the loss byte: indications per
 * segment, 0..200; HL_UNKNOWN below min_segs segments.
 */
static __always_inline __u8 hl_loss(__u32 segs, __u32 bad, __u32 min_segs)
{
	if (segs == 0 || segs < min_segs)
		return HL_UNKNOWN;
	if (bad >= segs)
		return HL_SCALE;
	return (__u8)((__u64)bad * HL_SCALE / segs);
}

#endif
