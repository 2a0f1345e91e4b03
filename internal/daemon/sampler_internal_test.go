package daemon

import (
	"math/rand/v2"
	"testing"
	"time"
)

// drive reads n samples through p, each way costing what cost gives for
// the sample's index, and returns the ways used and how many switches
// there were.
func drive(p *samplerPick, n int, cost func(i, way int) time.Duration) (ways []int, switches int) {
	for i := range n {
		w := p.next()
		ways = append(ways, w)
		if p.record(w, cost(i, w)) {
			switches++
		}
	}
	return ways, switches
}

// The costs measured by `mpsteer bench observe` on this machine's 6.18
// kernel: at ten subflows the iterator takes about 2.2 ms a read and a
// dump 0.43 ms; at 10 000 the iterator 10.5 ms and a dump 35 ms.
const (
	iterFew, diagFew   = 2200 * time.Microsecond, 430 * time.Microsecond
	iterMany, diagMany = 10500 * time.Microsecond, 35 * time.Millisecond
)

// Both ways are timed at the start and the faster kept; the other is
// timed again by a probe of pickProbe reads after every pickRetry samples,
// and never taken while it is slower.
func TestSamplerPickKeepsTheFaster(t *testing.T) {
	p := &samplerPick{}
	ways, switches := drive(p, 300, func(_, w int) time.Duration {
		if w == wayIterator {
			return iterFew
		}
		return diagFew
	})
	if ways[0] != wayIterator {
		t.Fatalf("the first sample is the iterator's, got %v", ways[:1])
	}
	for i := 1; i <= pickProbe; i++ {
		if ways[i] != wayDiag {
			t.Fatalf("samples 1 to %d must time sock_diag, got %v", pickProbe, ways[:pickProbe+1])
		}
	}
	if switches != 1 || p.using != wayDiag {
		t.Fatalf("at ten subflows sock_diag is faster: using %s after %d switches", wayName(p.using), switches)
	}
	// After the start: pickRetry reads with sock_diag, then a probe of
	// pickProbe with the iterator, over and over.
	probes, run := 0, 0
	for i := pickProbe + 1; i < len(ways); {
		if ways[i] == wayDiag {
			run++
			i++
			continue
		}
		if run != pickRetry {
			t.Fatalf("sample %d: a probe after %d reads with the way in use, want %d", i, run, pickRetry)
		}
		n := 0
		for ; i < len(ways) && ways[i] == wayIterator; i++ {
			n++
		}
		if n != pickProbe && i < len(ways) {
			t.Fatalf("sample %d: a probe of %d reads, want %d", i, n, pickProbe)
		}
		probes, run = probes+1, 0
	}
	if probes < 4 {
		t.Errorf("%d probes in %d samples", probes, len(ways))
	}
}

// When the host's subflows grow the dump's cost passes the iterator's;
// the daemon takes the iterator at its next retry, and back when they
// shrink again.
func TestSamplerPickFollowsTheHost(t *testing.T) {
	p := &samplerPick{}
	many := false
	cost := func(_, w int) time.Duration {
		switch {
		case w == wayIterator && many:
			return iterMany
		case w == wayIterator:
			return iterFew
		case many:
			return diagMany
		}
		return diagFew
	}
	drive(p, 10, cost)
	if p.using != wayDiag {
		t.Fatalf("few subflows: using %s", wayName(p.using))
	}
	many = true
	ways, switches := drive(p, 2*pickRetry, cost)
	if p.using != wayIterator || switches != 1 {
		t.Fatalf("many subflows: using %s after %d switches", wayName(p.using), switches)
	}
	took := 0
	for i, w := range ways {
		if w == wayIterator {
			took = i
			break
		}
	}
	if took > pickRetry {
		t.Errorf("the iterator was first tried %d samples after the growth, want within %d", took, pickRetry)
	}
	if p.cost[wayIterator] > 2*iterMany {
		t.Errorf("the iterator's cost %v is not what its reads took (%v)", p.cost[wayIterator], iterMany)
	}
	many = false
	drive(p, 2*pickRetry, cost)
	if p.using != wayDiag {
		t.Errorf("few subflows again: using %s", wayName(p.using))
	}
}

// Two ways that cost about the same (within pickMargin, with noise) do
// not take turns.
func TestSamplerPickDoesNotFlap(t *testing.T) {
	p := &samplerPick{}
	_, switches := drive(p, 5000, func(i, w int) time.Duration {
		noise := time.Duration(i%7) * 20 * time.Microsecond // ±~6%
		if w == wayIterator {
			return time.Millisecond + noise
		}
		return 1100*time.Microsecond - noise
	})
	if switches > 1 {
		t.Errorf("%d switches between two ways within 10%% of each other", switches)
	}
}

// Two ways that cost the same on average, each read off by up to a third
// either way (the lab, where both take about 300 µs): a probe's mean
// rarely passes the margin, so the daemon switches on few of its probes.
func TestSamplerPickHoldsThroughNoise(t *testing.T) {
	p := &samplerPick{}
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 20000
	_, switches := drive(p, n, func(_, _ int) time.Duration {
		return time.Duration(float64(300*time.Microsecond) * (1 + (rng.Float64()*2-1)/3))
	})
	if probes := n / (pickRetry + pickProbe); switches > probes/10 {
		t.Errorf("%d switches in %d probes of two ways that cost the same", switches, probes)
	}
}

// While a policy reads BBR's state (ecf's probe_rtt_rest)
// every read is the iterator's, the only way that has it, even where a
// dump costs a fifth; the reads are not timed meanwhile, and after it the
// pick goes back to the faster way.
func TestSamplerPickReadsBBRStateWithTheIterator(t *testing.T) {
	p := &samplerPick{}
	cost := func(_, w int) time.Duration {
		if w == wayIterator {
			return iterFew
		}
		return diagFew
	}
	if ways, _ := drive(p, 20, cost); ways[len(ways)-1] != wayDiag {
		t.Fatalf("ways %v: want sock_diag, the faster, before", ways)
	}
	before := p.cost
	p.bbr.Store(true)
	// (Cheaper meanwhile: timed, the iterator would take over.)
	ways, switches := drive(p, 200, func(i, w int) time.Duration { return cost(i, w) / 10 })
	for i, w := range ways {
		if w != wayIterator {
			t.Fatalf("read %d with sock_diag while BBR's state is needed: %v", i, ways)
		}
	}
	if switches != 0 || p.cost != before {
		t.Errorf("%d switches, costs %v (before %v): the forced reads were timed", switches, p.cost, before)
	}
	p.bbr.Store(false)
	if ways, _ := drive(p, 10, cost); ways[len(ways)-1] != wayDiag {
		t.Errorf("ways %v after: want sock_diag again", ways)
	}
}
