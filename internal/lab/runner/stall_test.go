package runner

import (
	"testing"
	"time"

	"mpsteer/internal/lab/recorder"
)

func TestLongestStall(t *testing.T) {
	ms := time.Millisecond
	var s []recorder.Sample
	bytes := int64(0)
	for i := 0; i <= 30; i++ {
		// No progress from 1.0 s to 1.6 s (samples at 1.1 … 1.6 s).
		if i <= 10 || i >= 17 {
			bytes += 1000
		}
		s = append(s, recorder.Sample{T: time.Duration(i) * 100 * ms, AppBytes: bytes})
	}
	got, ok := longestStall(s, 0, 3*time.Second, 0)
	if !ok || got != 700*ms {
		t.Fatalf("longest stall %v, want 700ms (progress at 1.0 s, then next at 1.7 s)", got)
	}
	if got, _ := longestStall(s, 2*time.Second, 3*time.Second, 0); got != 100*ms {
		t.Fatalf("after the stall: %v, want the sampling interval", got)
	}
	if _, ok := longestStall(s, 10*time.Second, 20*time.Second, 0); ok {
		t.Fatal("no samples in the window, yet a stall")
	}
	// A connection that dies stalls until the last sample.
	dead := append([]recorder.Sample(nil), s[:12]...)
	for i := 12; i <= 30; i++ {
		dead = append(dead, recorder.Sample{T: time.Duration(i) * 100 * ms, AppBytes: dead[11].AppBytes})
	}
	if got, _ := longestStall(dead, 0, 3*time.Second, 0); got != 2000*ms {
		t.Fatalf("dead connection: %v, want 2s (from its last progress at 1.0 s to the end)", got)
	}
	// With a floor: 1000 B per 100 ms is 80 kbit/s; below 100 kbit/s
	// counts as no progress, so the whole run is one stall.
	if got, _ := longestStall(s, 0, 3*time.Second, 100e3); got != 3000*ms {
		t.Fatalf("below the floor: %v, want the whole 3 s", got)
	}
}
