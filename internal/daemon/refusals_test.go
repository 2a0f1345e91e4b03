package daemon

import (
	"errors"
	"testing"
	"time"

	"mpsteer/internal/api"
)

// A change the kernel refused is not asked again every round: it waits 1 s,
// then 2 s, 4 s … (found by internal/reliability's TestKernelSaysNo, where
// a refused per-subflow flag was asked for and logged every 100 ms).
func TestRetryGateBacksOff(t *testing.T) {
	var g retryGate
	now := time.Unix(100, 0)
	tries := 0
	for at := now; at.Before(now.Add(10 * time.Second)); at = at.Add(100 * time.Millisecond) {
		if g.ready("k", at) {
			tries++
			g.done("k", errors.New("invalid argument"), at)
		}
		g.sweep()
	}
	// At 0, 1, 3, 7 s.
	if tries != 4 {
		t.Fatalf("%d tries in 10 s, want 4 (backoff 1 s doubling)", tries)
	}
	g.done("k", nil, now)
	if !g.ready("k", now) {
		t.Fatal("a change that worked is still held back")
	}
	// Forgotten when no round asks about it any more.
	g.done("gone", errors.New("x"), now)
	g.sweep()
	g.sweep()
	if len(g.m) != 0 {
		t.Fatalf("entries left: %v", g.m)
	}
}

// A refusal is logged once per target and reason, not every time.
func TestRefusalsAreLoggedOnce(t *testing.T) {
	d := &Daemon{}
	r := api.ActionRecord{Policy: "prefer", Kind: "backup", Target: "a→b", Result: "refused", Error: "invalid argument"}
	logged := 0
	for i := 0; i < 50; i++ {
		if d.logOnce(r) {
			logged++
		}
	}
	if logged != 1 {
		t.Fatalf("the same refusal logged %d times, want once", logged)
	}
	r2 := r
	r2.Error = "no such file or directory"
	if !d.logOnce(r2) {
		t.Fatal("a new reason was not logged")
	}
	ok := r
	ok.Result, ok.Error = "applied", ""
	if !d.logOnce(ok) || !d.logOnce(r) {
		t.Fatal("after the change worked, a new refusal must be logged again")
	}
}
