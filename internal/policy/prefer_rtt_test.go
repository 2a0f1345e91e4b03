package policy

import (
	"math/rand"
	"testing"
	"time"
)

// The window's minimum is the smallest sample within the window (the
// latest always counts), as a plain list of every sample gives it.
func TestRTTWindowIsTheMinimumOverTheWindow(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	const window = 500 * time.Millisecond
	type sample struct {
		at   time.Time
		srtt time.Duration
	}
	var all []sample
	var w rttWindow
	now := time.Unix(1000, 0)
	for i := 0; i < 5000; i++ {
		now = now.Add(time.Duration(1+rng.Intn(60)) * time.Millisecond) // each sample later
		srtt := time.Duration(rng.Intn(40)) * time.Millisecond          // 0: no sample
		if i%500 < 100 {
			srtt = time.Duration(i%500+1) * time.Millisecond // rising: the worst case
		}
		got := w.add(now, now, srtt, window)
		if srtt > 0 {
			all = append(all, sample{now, srtt})
		}
		want := time.Duration(0)
		for j, s := range all {
			if now.Sub(s.at) > window && j < len(all)-1 {
				continue
			}
			if want == 0 || s.srtt < want {
				want = s.srtt
			}
		}
		if got != want {
			t.Fatalf("step %d: min %v, want %v", i, got, want)
		}
		if len(w.e.v) > maxRTTSamples {
			t.Fatalf("step %d: %d samples kept", i, len(w.e.v))
		}
	}
}

// Deciding again between samples (the same figures) adds no sample; a new
// sample does.
func TestRTTWindowOneSamplePerSample(t *testing.T) {
	var w rttWindow
	t0 := time.Unix(1000, 0)
	ms := time.Millisecond
	w.add(t0, t0, 30*ms, 5*time.Second)
	for i := 1; i <= 100; i++ {
		// Events after the sample: decided at their time, on its figures.
		w.add(t0.Add(time.Duration(i)*ms), t0, 10*ms, 5*time.Second)
	}
	if len(w.e.v) != 1 || w.e.v[0] != 30*ms {
		t.Fatalf("after decisions on one sample: %+v", w.e.v)
	}
	t1 := t0.Add(100 * ms)
	if got := w.add(t1, t1, 20*ms, 5*time.Second); got != 20*ms || len(w.e.v) != 1 {
		t.Fatalf("a new, smaller sample: min %v, %d kept", got, len(w.e.v))
	}
	// Without a sample time every decision is a sample (as before).
	var v rttWindow
	v.add(t0, time.Time{}, 30*ms, 5*time.Second)
	if got := v.add(t0.Add(ms), time.Time{}, 10*ms, 5*time.Second); got != 10*ms {
		t.Fatalf("unsampled decision: min %v", got)
	}
}

// A window of a rising SRTT is capped.
func TestRTTWindowIsBounded(t *testing.T) {
	var w rttWindow
	t0 := time.Unix(1000, 0)
	for i := 1; i <= 1000; i++ {
		at := t0.Add(time.Duration(i) * time.Millisecond)
		w.add(at, at, time.Duration(i)*time.Microsecond, time.Hour)
	}
	if len(w.e.v) != maxRTTSamples {
		t.Fatalf("%d samples kept, want %d", len(w.e.v), maxRTTSamples)
	}
}
