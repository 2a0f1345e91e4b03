package policy

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestPeakIsTheWindowsLargest(t *testing.T) {
	// Against a brute-force maximum over the same window (the newest value
	// always counts).
	rng := rand.New(rand.NewPCG(1, 2))
	var p peak
	type seen struct {
		at time.Time
		v  float64
	}
	var all []seen
	now := time.Unix(100, 0)
	for i := 0; i < 2000; i++ {
		now = now.Add(time.Duration(rng.IntN(300)) * time.Millisecond)
		v := float64(rng.IntN(50))
		all = append(all, seen{now, v})
		got := p.add(now, v, 3*time.Second)
		want := v
		for _, s := range all {
			if now.Sub(s.at) <= 3*time.Second && s.v > want {
				want = s.v
			}
		}
		if got != want || p.max() != want {
			t.Fatalf("step %d: max %v (%v), want %v", i, got, p.max(), want)
		}
	}
	var empty peak
	if v, ok := empty.get(); ok || v != 0 || empty.max() != 0 {
		t.Fatalf("nothing seen: %v, %v", v, ok)
	}
}
