// SPDX-License-Identifier: GPL-2.0
//
// A user's own actor for mpsteer chains: a template.
//
// An actor is one SEC("tc") program. The chain has already parsed
// the packet; mpsteer_this() gives the step's descriptor (its arguments:
// up to six 64-bit numbers, as written in --act 'stamp(7, 0x10)') and the
// packet's offsets. Do the work, then return mpsteer_next(skb) to run the
// rest of the chain, or TCX_DROP to drop the packet. Never return
// TCX_PASS: it would stop every later chain on the hook.
//
// Build (mpsteer's `make generate` writes vmlinux.h next to the header):
//   clang -O2 -g -target bpf -I internal/datapath/bpf -c stamp.bpf.c -o stamp.o
// Load and use (the daemon checks it with the verifier like its own):
//   mpsteer chain load stamp.o --name stamp
//   mpsteer chain add --dev eth0 --hook egress --select 'type(data)' --act 'stamp(7)'
#include "mpsteer_chain.h"

SEC("tc")
int stamp(struct __sk_buff *skb)
{
	struct pkt p;
	struct mpsteer_chain *c;
	struct mpsteer_step *s = mpsteer_this(skb, &p, &c);
	if (!s)
		return TCX_NEXT;
	__u64 mark = *(__u64 *)&s->args[0]; /* first argument */
	skb->mark = (__u32)mark;
	mpsteer_count(c, 0); /* counted as modified in `chain list` */
	return mpsteer_next(skb);
}

char LICENSE[] SEC("license") = "GPL";
