package daemon

import (
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
// timed again every pickRetry samples and never taken while it is slower.
func TestSamplerPickKeepsTheFaster(t *testing.T) {
	p := &samplerPick{}
	ways, switches := drive(p, 200, func(_, w int) time.Duration {
		if w == wayIterator {
			return iterFew
		}
		return diagFew
	})
	if ways[0] != wayIterator || ways[1] != wayDiag {
		t.Fatalf("the first two samples must time both ways, got %v", ways[:2])
	}
	if switches != 1 || p.using != wayDiag {
		t.Fatalf("at ten subflows sock_diag is faster: using %s after %d switches", wayName(p.using), switches)
	}
	retries := 0
	for i, w := range ways[2:] {
		if w == wayIterator {
			retries++
			if (i+1)%(pickRetry+1) != 0 {
				t.Errorf("sample %d read by the iterator off its retry", i+2)
			}
		}
	}
	if want := 198 / (pickRetry + 1); retries != want {
		t.Errorf("the iterator was timed again %d times in 198 samples, want %d", retries, want)
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
