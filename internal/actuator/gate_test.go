package actuator

import (
	"errors"
	"testing"
	"time"
)

// A change the kernel refused is not asked again every round: it waits 1 s,
// then 2 s, 4 s … (found by internal/reliability's TestKernelSaysNo, where
// a refused per-subflow flag was asked for and logged every 100 ms).
func TestGateBacksOff(t *testing.T) {
	var g Gate
	now := time.Unix(100, 0)
	tries := 0
	for at := now; at.Before(now.Add(10 * time.Second)); at = at.Add(100 * time.Millisecond) {
		if g.Ready("k", at) {
			tries++
			g.Done("k", errors.New("invalid argument"), at)
		}
		g.sweep()
	}
	// At 0, 1, 3, 7 s.
	if tries != 4 {
		t.Fatalf("%d tries in 10 s, want 4 (backoff 1 s doubling)", tries)
	}
	g.Done("k", nil, now)
	if !g.Ready("k", now) {
		t.Fatal("a change that worked is still held back")
	}
	// Forgotten when no round asks about it any more.
	g.Done("gone", errors.New("x"), now)
	g.sweep()
	g.sweep()
	if g.Held() != 0 {
		t.Fatalf("entries left: %v", g.m)
	}
}
