package coupled

// The coupled windows of bpf/lia.bpf.c and bpf/balia.bpf.c, computed in
// Go with the same fixed-point steps (bpf/coupled.h), so that the tests
// can hold the arithmetic to RFC 6356's and BALIA's formulas: BPF
// congestion controls cannot run under BPF_PROG_TEST_RUN.

// The constants of bpf/coupled.h.
const (
	MaxSubflows = 8
	cwndMax     = 1 << 24
	rttMax      = 1 << 26
	frac        = 10
	ratioMax    = 1 << 20
	staleMinUS  = 200000
)

// ModelSlot is one subflow's slot in its connection's state.
type ModelSlot struct {
	Used     bool   // a subflow holds it
	CwndPkts uint32 // its window
	RTTus    uint32 // its smoothed RTT
	StampUS  uint64 // its clock at its last ACK
}

func clampCwnd(w uint32) uint64 {
	return uint64(min(max(w, 1), cwndMax))
}

func clampRTT(r uint32) uint64 {
	return uint64(min(max(r, 1), rttMax))
}

func bits64(x uint64) uint32 {
	var n uint32
	for _, s := range []uint32{32, 16, 8, 4, 2, 1} {
		if x>>s != 0 {
			n += s
			x >>= s
		}
	}
	return n + uint32(x)
}

// muldiv is a × b / c as coupled.h computes it: a product of more than 64
// bits first drops the larger factor's low bits, then both factors', and
// c as many; a c that becomes 0 saturates.
func muldiv(a, b, c uint64) uint64 {
	ba, bb := bits64(a), bits64(b)
	if ba+bb > 64 {
		sh := ba + bb - 64
		total := sh
		switch {
		case ba > bb:
			d := min(ba-bb, sh)
			a >>= d
			sh -= d
		case bb > ba:
			d := min(bb-ba, sh)
			b >>= d
			sh -= d
		}
		a >>= sh / 2
		b >>= sh - sh/2
		c >>= total
	}
	if c == 0 {
		return ^uint64(0)
	}
	return a * b / c
}

func (s ModelSlot) counts(now uint64) bool {
	if !s.Used {
		return false
	}
	stale := max(uint64(s.RTTus)*4, staleMinUS)
	return now <= s.StampUS || now-s.StampUS <= stale
}

func ratio(rmax, r uint64) uint64 {
	return min((rmax<<frac)/r, ratioMax)
}

type sums struct {
	s, ymax, m, yself, qself uint64
}

// sum is coupled_sum: the subflow's own slot always counts.
func sum(slots []ModelSlot, self int, now uint64) sums {
	var z sums
	rmax := uint64(1)
	in := func(k int) bool { return k == self || slots[k].counts(now) }
	for k := range slots {
		if in(k) {
			rmax = max(rmax, clampRTT(slots[k].RTTus))
		}
	}
	for k, s := range slots {
		if !in(k) {
			continue
		}
		q, w := ratio(rmax, clampRTT(s.RTTus)), clampCwnd(s.CwndPkts)
		y, t := w*q, w*((q*q)>>frac)
		z.s += y
		z.ymax = max(z.ymax, y)
		z.m = max(z.m, t)
		if k == self {
			z.yself, z.qself = y, q
		}
	}
	return z
}

func toWindow(w uint64) uint32 {
	return uint32(min(max(w, 1), 0xffffffff))
}

// LIAWindow is the window lia.bpf.c hands tcp_cong_avoid_ai for subflow
// self (one packet more per that many acknowledged) at time now (µs).
func LIAWindow(slots []ModelSlot, self int, now uint64) uint32 {
	cwnd := clampCwnd(slots[self].CwndPkts)
	z := sum(slots, self, now)
	if z.m == 0 {
		return uint32(cwnd)
	}
	x := muldiv(z.s, z.s, z.m) >> frac
	return toWindow(max(x, cwnd))
}

// BALIAWindow is balia.bpf.c's window for subflow self, and its alpha
// scaled by 2^10.
func BALIAWindow(slots []ModelSlot, self int, now uint64) (w uint32, alpha uint32) {
	cwnd := clampCwnd(slots[self].CwndPkts)
	z := sum(slots, self, now)
	if z.yself == 0 || z.qself == 0 {
		return uint32(cwnd), 1 << frac
	}
	a := min(max((z.ymax<<frac)/z.yself, 1<<frac), ratioMax)
	f := ((1 << frac) + a) * ((4 << frac) + a) / 10
	A := (z.s << frac) / z.qself
	wself := max(z.yself/z.qself, 1)
	return toWindow(muldiv(A, A, wself*f)), uint32(a)
}

// BALIADecrease is window.h's balia_decrease, the window after a loss: w − w/2 × min(α, 1.5),
// at least 2 packets (alpha scaled by 2^10).
func BALIADecrease(cwnd, alpha uint32) uint32 {
	w := clampCwnd(cwnd)
	a := min(uint64(alpha), (3<<frac)/2)
	cut := (w * a) >> (frac + 1)
	next := uint64(0)
	if w > cut {
		next = w - cut
	}
	return uint32(max(next, 2))
}
