package stats

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestMedianCIIsDeterministicAndOrderFree(t *testing.T) {
	xs := []float64{51.2, 52.4, 50.9, 53.8, 51.0, 52.7, 49.8}
	a := MedianCI(xs)
	rev := slices.Clone(xs)
	slices.Reverse(rev)
	b := MedianCI(rev)
	if a != b {
		t.Fatalf("same values in another order: %+v, then %+v", a, b)
	}
	if a != MedianCI(xs) {
		t.Fatal("the same values gave two intervals")
	}
	if a.N != len(xs) || a.Median != 51.2 {
		t.Errorf("median %g n %d, want 51.2 over %d", a.Median, a.N, len(xs))
	}
	if !(a.Lo <= a.Median && a.Median <= a.Hi) || a.Lo < 49.8 || a.Hi > 53.8 {
		t.Errorf("interval [%g, %g] does not hold the median %g inside the data's range", a.Lo, a.Hi, a.Median)
	}
	if a.Lo == a.Hi {
		t.Errorf("seven spread values gave a zero-width interval %+v", a)
	}
	if !slices.Equal(xs, []float64{51.2, 52.4, 50.9, 53.8, 51.0, 52.7, 49.8}) {
		t.Error("MedianCI changed its input")
	}
}

func TestMedianCISmallCounts(t *testing.T) {
	if s := MedianCI(nil); s != (Summary{}) {
		t.Errorf("no values: %+v, want zero", s)
	}
	s := MedianCI([]float64{7})
	if s != (Summary{Median: 7, Lo: 7, Hi: 7, N: 1}) || !s.Single() {
		t.Errorf("one value: %+v", s)
	}
	// Two values: every resample's median is one of them (the lower of
	// two distinct ones, or either repeated), so the interval is their range.
	s = MedianCI([]float64{3, 1})
	if s.Median != 1 || s.Lo != 1 || s.Hi != 3 || s.N != 2 || s.Single() {
		t.Errorf("two values: %+v, want median 1 in [1, 3]", s)
	}
}

func TestMedianCICoversTheTrueMedian(t *testing.T) {
	// Samples of 15 from a distribution whose median is 0: a 95% interval
	// must hold it in most of them (a broken interval, e.g. the median
	// alone, would in almost none).
	rng := rand.New(rand.NewPCG(1, 2))
	held := 0
	const trials = 200
	for range trials {
		xs := make([]float64, 15)
		for i := range xs {
			xs[i] = rng.NormFloat64()
		}
		s := MedianCI(xs)
		if s.Lo <= 0 && 0 <= s.Hi {
			held++
		}
	}
	if held < trials*85/100 {
		t.Errorf("the interval held the true median in %d of %d samples", held, trials)
	}
}

func TestVerdict(t *testing.T) {
	s := Summary{Median: 1.0, Lo: 0.99, Hi: 1.02, N: 5}
	for _, c := range []struct {
		target float64
		higher bool
		want   string
	}{
		{0.98, true, Met},
		{0.99, true, Met},
		{1.00, true, InsideNoise},
		{1.03, true, NotMet},
		{1.02, false, Met},
		{1.01, false, InsideNoise},
		{0.98, false, NotMet},
	} {
		if got := Verdict(s, c.target, c.higher); got != c.want {
			t.Errorf("Verdict(%+v, %g, higher=%v) = %q, want %q", s, c.target, c.higher, got, c.want)
		}
	}
	if got := Verdict(Summary{}, 1, true); got != NoData {
		t.Errorf("no values: %q", got)
	}
}
