// SPDX-License-Identifier: GPL-2.0
// mpsteer's chains: one program per chain; this file is the chain itself
// (its step loop and its entry points) and the one object every chain is
// loaded from. Each selector and actor is in a folder of its own
// (selectors/NAME, actors/NAME: its code, README.md and a fixture test),
// included here, so that the compiler sees one program.
//
// A chain is compiled into ONE program when it is added: the loader
// writes the chain's steps (kind, arguments, where a selector goes on a
// match and on a miss) into the read-only globals below before the
// program is loaded. The verifier reads them as constants, so it checks
// only the steps the chain has and removes the rest; what is left runs
// the steps one after another with direct branches, without a tail call
// or a map lookup per step. Selectors and the cheap actors are inlined;
// the big actors (clamp_rwnd, set_backup/clear_backup, strip_add_addr)
// and the option walk are global functions, verified once per load and
// reached by direct calls.
//
// Actors loaded by users (separate objects) are reached by tail call, as
// before; they come back through mpsteer_resume, which tail-calls the
// chain's resume program (the same steps, entered at the next one).
//
// Checksums are fixed with the kernel's helpers, which do the right thing
// for every skb->ip_summed state.
#include "chain.h"
#include "packet/parse.h"
#include "packet/options.h"
#include "packet/socket.h"
#include "packet/insert.h"

#include "selectors/match/match.bpf.h"
#include "selectors/seq/seq.bpf.h"
#include "selectors/type/type.bpf.h"

#include "actors/drop/drop.bpf.h"
#include "actors/mark/mark.bpf.h"
#include "actors/count/count.bpf.h"
#include "actors/clamp_rwnd/clamp_rwnd.bpf.h"
#include "actors/set_backup/set_backup.bpf.h"
#include "actors/strip_add_addr/strip_add_addr.bpf.h"

/* Nonzero: this program passes every packet untouched (the chain is
 * paused while it moves). Per program (.bss), set by the loader. */
volatile __u32 paused = 0;

/* The lease of chains on a tc clsact qdisc (fail open). A tc filter,
 * unlike a TCX link, outlives the process that attached it; so where
 * chains sit on clsact the manager keeps entry 0 at a deadline
 * (CLOCK_MONOTONIC ns, bpf_ktime_get_ns's clock) a few seconds ahead and
 * moves it on while it lives. Past the deadline every chain passes every
 * packet untouched: a killed daemon's chains stop acting within the
 * lease. 0 (TCX, whose links go with the process): no lease. One map per
 * manager, never pinned: a dead manager's chains keep the map nobody
 * moves on. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} mpsteer_alive SEC(".maps");

static __always_inline int lease_expired(void)
{
	__u32 zero = 0;
	__u64 *until = bpf_map_lookup_elem(&mpsteer_alive, &zero);
	return until && *until && bpf_ktime_get_ns() > *until;
}

/* Descriptor slot -> the chain's program (chains with loaded actors come
 * back to it). */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, MPSTEER_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} mpsteer_resumes SEC(".maps");

/* ---- the chain -------------------------------------------------------- */

/* run_steps runs the chain from step `start`. Both loops are unrolled:
 * step i's kind and arguments are constants, so each iteration keeps only
 * its own step's code (or none), and jumps between selectors are plain
 * branches. Selectors come first (steps before first_actor), then the
 * actors, one after another. */
static __always_inline int run_steps(struct __sk_buff *skb, struct cx *x, struct mpsteer_stats *st, __u32 start,
				     const int no_kfuncs)
{
	__u32 cur = start;
#pragma clang loop unroll(full)
	for (__u32 i = 0; i < MPSTEER_MAX_STEPS; i++) {
		if (i >= first_actor || i >= n_steps)
			break;
		if (cur != i)
			continue;
		const volatile struct chain_step *s = &steps[i];
		int m = 0;
		__u8 kind = s->kind;
		if (kind == K_TUPLE || kind == K_PREFIX)
			m = sel_match(x, (const volatile void *)s->args);
		else if (kind == K_SEQ)
			m = sel_seq(skb, x, (const volatile void *)s->args);
		else if (kind == K_TYPE)
			m = sel_type(x, (const volatile void *)s->args);
		if (s->flags & STEP_NEGATE)
			m = !m;
		__u32 next = m ? s->on_match : s->on_miss;
		if (next == STEP_NONE)
			return TCX_NEXT;
		cur = next;
	}
	if (cur == first_actor) {
		st->selected++;
		st->bytes += skb->len;
	}
#pragma clang loop unroll(full)
	for (__u32 i = 0; i < MPSTEER_MAX_STEPS; i++) {
		if (i >= n_steps)
			break;
		if (i < first_actor || i < cur)
			continue;
		const volatile struct chain_step *s = &steps[i];
		__u8 kind = s->kind;
		int r = 0;
		if (kind == K_DROP) {
			return act_drop(st);
		} else if (kind == K_MARK) {
			act_mark(skb, (const volatile void *)s->args);
		} else if (kind == K_COUNT) {
			act_count(skb, i);
		} else if (kind == K_CLAMP) {
			const volatile struct clamp_args *a = (const volatile void *)s->args;
			if (no_kfuncs)
				r = mpsteer_clamp_no_kfuncs(skb, x, st, a->rate, a->window | (a->egress ? CLAMP_EGRESS : 0));
			else
				r = mpsteer_clamp(skb, x, st, a->rate, a->window | (a->egress ? CLAMP_EGRESS : 0));
		} else if (kind == K_BACKUP) {
			if (no_kfuncs)
				r = mpsteer_backup_no_kfuncs(skb, x, st, s->args[0], s->args[1]);
			else
				r = mpsteer_backup(skb, x, st, s->args[0], s->args[1]);
		} else if (kind == K_STRIP) {
			if (x->types & T_ADD_ADDR)
				r = mpsteer_strip(skb, x, st);
		} else if (kind == K_USER) {
			/* A loaded actor: the packet's metadata in skb->cb as
			 * mpsteer_chain.h says, then a tail call; it comes back
			 * through mpsteer_resume. */
			skb->cb[0] = (chain_slot & 0xffff) | (i << 16);
			skb->cb[1] = x->l3 | (x->l4 << 8) | (x->v6 << 16) | ((x->thlen / 4) << 24);
			skb->cb[2] = x->types;
			skb->cb[3] = x->locs;
			bpf_tail_call(skb, &mpsteer_steps, s->prog);
			return TCX_NEXT; /* not loaded: leave the packet alone */
		}
		if (r)
			return TCX_DROP;
	}
	return TCX_NEXT;
}

/* The chain, attached to its hook: parse IPv4/IPv6 + TCP once and run the
 * steps. Anything that is not a well-formed TCP segment leaves untouched.
 *
 * In a chain with loaded actors the program is also where such an actor
 * comes back to (through mpsteer_resume, which marks skb->cb[0]): then it
 * parses again (the actor may have changed the packet), takes the packet
 * types and option places as the chain had them, and goes on at the
 * step in skb->cb[0]. */
static __always_inline int chain(struct __sk_buff *skb, const int release, const int no_kfuncs)
{
	__u32 start = 0, resumed = 0;
	if (needs & NEED_USER) {
		__u32 a = skb->cb[0];
		if ((a >> 24) == RESUME_MAGIC && (a & 0xffff) == chain_slot) {
			a &= 0xffffff;
			barrier_var(a); /* a whole-word store */
			skb->cb[0] = a;
			start = (a >> 16) & 0xff;
			resumed = 1;
		}
	}
	if (paused || lease_expired())
		return TCX_NEXT;
	__u32 id = chain_id;
	struct mpsteer_stats *st = bpf_map_lookup_elem(&mpsteer_stats, &id);
	if (!st)
		return TCX_NEXT;
	if (!resumed) {
		st->seen++;
		if (!st->first_ns)
			st->first_ns = bpf_ktime_get_ns();
	}
	struct cx x;
	if (parse(skb, &x))
		return TCX_NEXT;
	if (resumed) {
		x.types = skb->cb[2];
		x.locs = skb->cb[3];
	} else {
		if ((needs & NEED_OPTS) && classify_fast(skb, &x))
			mpsteer_classify(skb, &x);
		if (needs & NEED_USER)
			skb->cb[4] = 0;
		/* ADD_ADDR options the chain withheld and was told to release
		 * go back into any packet of their subflow, selected or not
		 * (the steps then see the packet as it leaves). */
		if (release && release_pending() && mpsteer_release(skb, &x, st))
			return TCX_DROP;
	}
	return run_steps(skb, &x, st, start, no_kfuncs);
}

/* The chain's program. Chains with strip_add_addr are loaded from
 * mpsteer_chain_release instead, the same with release's check at the
 * entry: a separate program, so that the code of every other chain is
 * compiled as if release were not there. On a kernel without the kfuncs
 * of 6.2 (bpf_cast_to_kern_ctx, bpf_rdonly_cast: Debian 12's 6.1) the
 * *_no_kfuncs ones, whose clamp_rwnd and set_backup read what those read
 * otherwise: before 6.8 the verifier checks every global function a
 * program holds, called or not, so these hold none that calls them. */
SEC("tc")
int mpsteer_chain(struct __sk_buff *skb)
{
	return chain(skb, 0, 0);
}

SEC("tc")
int mpsteer_chain_release(struct __sk_buff *skb)
{
	return chain(skb, 1, 0);
}

SEC("tc")
int mpsteer_chain_no_kfuncs(struct __sk_buff *skb)
{
	return chain(skb, 0, 1);
}

SEC("tc")
int mpsteer_chain_release_no_kfuncs(struct __sk_buff *skb)
{
	return chain(skb, 1, 1);
}

/* Where a loaded actor's mpsteer_next() goes when the next step is a
 * built-in one (mpsteer_steps[1]): the chain whose descriptor slot is in
 * skb->cb[0], marked as a return. */
SEC("tc")
int mpsteer_resume(struct __sk_buff *skb)
{
	__u32 a = skb->cb[0] & 0xffffff, marked = a | (RESUME_MAGIC << 24);
	barrier_var(marked); /* whole-word stores: the context takes no others */
	skb->cb[0] = marked;
	bpf_tail_call(skb, &mpsteer_resumes, a & 0xffff);
	barrier_var(a);
	skb->cb[0] = a;
	return TCX_NEXT;
}

char LICENSE[] SEC("license") = "GPL";
