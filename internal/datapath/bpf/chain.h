// SPDX-License-Identifier: GPL-2.0
/* What every step of a chain sees: the constants the loader and the
 * programs share, the chain's steps as the loader bakes them into the
 * program (.rodata), what the chain knows about the packet (struct cx),
 * and how an actor's result is counted. */
#ifndef MPSTEER_BPF_CHAIN_H
#define MPSTEER_BPF_CHAIN_H

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
#define NEED_RELEASE 0x8 /* strip_add_addr: put back what was released */

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

/* Lengths given to the helpers. A helper's length must be at least 1 on
 * the register passed, and verifiers before 6.8 (Debian 12's 6.1, the
 * 6.12 of Debian 13 and of bookworm's backports) learn a lower bound only
 * from an ordered compare on that register: not from `!= 0`, and not from
 * the single range check on a copy (`v - lo > hi - lo`) that clang makes
 * of `v < lo || v > hi`. Both work in 64 bits: a 32-bit value behind a
 * barrier is compared as a zero-extended copy, which bounds the copy only.
 *
 * size_upto(v, mask) is v for v in 1..mask+1 and wraps 0 to mask + 1, by
 * arithmetic: at least 1 to any verifier, with no branch; the caller
 * compares it with its upper bound (which also refuses the wrapped 0).
 * The barrier keeps clang from folding that compare back into a check on
 * v. */
#define size_upto(v, mask) ({ __u64 __s = ((((__u64)(v)) - 1) & (mask)) + 1; barrier_var(__s); __s; })

/* at_least(v, lo): v >= lo (lo > 1; v a 64-bit variable) as a compare of
 * its own on v's register, which clang cannot fold with the compares
 * after it. */
#define at_least(v, lo) ({ _Static_assert(sizeof(v) == 8, "at_least wants a 64-bit variable"); \
	barrier_var(v); int __ok = (v) >= (lo); barrier_var(v); __ok; })

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

#endif
