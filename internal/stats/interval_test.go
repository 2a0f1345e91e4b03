package stats

import (
	"encoding/json"
	"math"
	"slices"
	"testing"
)

func TestMedianCIOfNothingAndOne(t *testing.T) {
	e := MedianCI(nil)
	if e.N != 0 || !e.NoInterval {
		t.Fatalf("no values: %+v", e)
	}
	b, _ := json.Marshal(e)
	if string(b) != `{"median":null,"ci95_low":null,"ci95_high":null,"n":0,"no_interval":true}` {
		t.Fatalf("no values as JSON: %s (a zero would pass for a measurement)", b)
	}
	e = MedianCI([]float64{42.5})
	if e != (Estimate{Median: 42.5, Low: 42.5, High: 42.5, N: 1, NoInterval: true}) {
		t.Fatalf("one value: %+v", e)
	}
	b, _ = json.Marshal(e)
	if string(b) != `{"median":42.5,"ci95_low":42.5,"ci95_high":42.5,"n":1,"no_interval":true}` {
		t.Fatalf("one value as JSON: %s", b)
	}
}

// Two values: a resample's median (the lower of its two draws) is the
// larger value only when both draws are it, 1 time in 4; so the 2.5%
// quantile of the medians is the smaller value and the 97.5% one the
// larger. The median itself is the lower middle value.
func TestMedianCIOfTwo(t *testing.T) {
	e := MedianCI([]float64{20, 10})
	if e != (Estimate{Median: 10, Low: 10, High: 20, N: 2}) {
		t.Fatalf("10, 20: %+v, want median 10 in [10, 20]", e)
	}
}

// 1..5: a resample's median (its 3rd smallest) is 1 when at least 3 of
// the 5 draws are 1: P = 10·0.2³·0.8² + 5·0.2⁴·0.8 + 0.2⁵ = 5.8%, above
// 2.5%, so the interval's low end is 1; by symmetry its high end is 5.
// 1..10: the median is the 5th smallest. P(median ≤ 1) = P(≥ 5 of 10
// draws are 1) = 0.16% and P(median ≤ 2) = 3.3%: low end 2. P(median ≥
// 9) = P(≥ 6 draws in {9, 10}) = 0.64% and P(median ≥ 8) = 4.7%: the
// 97.5% quantile is 8. (With 10 000 resamples, each of these is several
// standard errors away from 2.5%.)
func TestMedianCIHandChecked(t *testing.T) {
	if e := MedianCI([]float64{3, 1, 4, 5, 2}); e != (Estimate{Median: 3, Low: 1, High: 5, N: 5}) {
		t.Errorf("1..5: %+v, want 3 in [1, 5]", e)
	}
	ten := []float64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}
	if e := MedianCI(ten); e != (Estimate{Median: 5, Low: 2, High: 8, N: 10}) {
		t.Errorf("1..10: %+v, want 5 in [2, 8]", e)
	}
}

func TestMedianCITies(t *testing.T) {
	if e := MedianCI([]float64{7, 7, 7, 7}); e != (Estimate{Median: 7, Low: 7, High: 7, N: 4}) {
		t.Errorf("all equal: %+v, want 7 in [7, 7] with an interval (n = 4)", e)
	}
	// Mostly ties: 9 of 10 values are 5; a resample's median is 5 unless
	// at least 6 of its 10 draws are the outlier (P ≈ 1.5e-4).
	xs := []float64{5, 5, 5, 5, 5, 5, 5, 5, 5, 100}
	if e := MedianCI(xs); e != (Estimate{Median: 5, Low: 5, High: 5, N: 10}) {
		t.Errorf("one outlier among ties: %+v, want 5 in [5, 5]", e)
	}
}

// The same values give the same interval, whatever their order and
// however often it is computed; other values give other draws.
func TestMedianCIIsDeterministic(t *testing.T) {
	xs := []float64{51.2, 49.8, 53.1, 50.4, 52.7, 48.9, 51.9}
	first := MedianCI(xs)
	rev := slices.Clone(xs)
	slices.Reverse(rev)
	for i := 0; i < 3; i++ {
		if e := MedianCI(xs); e != first {
			t.Fatalf("run %d: %+v, first %+v", i, e, first)
		}
		if e := MedianCI(rev); e != first {
			t.Fatalf("reversed: %+v, first %+v", e, first)
		}
	}
	if first.Median != 51.2 || first.Low < 48.9 || first.High > 53.1 || first.Low > first.Median || first.High < first.Median {
		t.Fatalf("%+v: the interval must hold the median and stay within the values", first)
	}
	if !slices.Contains(xs, first.Low) || !slices.Contains(xs, first.High) {
		t.Fatalf("%+v: both ends must be values (nearest rank)", first)
	}
	a1, b1 := seedOf([]float64{1, 2})
	a2, b2 := seedOf([]float64{1, 3})
	if a1 == a2 && b1 == b2 {
		t.Fatal("different values, same seed")
	}
}

func TestMedianCIRefusesNaN(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("NaN did not panic")
		}
	}()
	MedianCI([]float64{1, math.NaN()})
}

func TestEstimateJSONRoundTrip(t *testing.T) {
	for _, e := range []Estimate{{Median: 1.5, Low: 1, High: 2, N: 5}, {Median: 3, Low: 3, High: 3, N: 1, NoInterval: true}, {N: 0, NoInterval: true}} {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var back Estimate
		if err := json.Unmarshal(b, &back); err != nil || back != e {
			t.Errorf("%+v → %s → %+v (%v)", e, b, back, err)
		}
	}
}

func TestPairedRatio(t *testing.T) {
	a := []float64{110, 104, 99, 120, 105}
	b := []float64{100, 100, 100, 100, 0}
	r := Ratios(a, b)
	if !slices.Equal(r, []float64{1.1, 1.04, 0.99, 1.2}) {
		t.Fatalf("ratios %v (the pair with b = 0 has none)", r)
	}
	e := PairedRatio(a, b)
	// Ratios 0.99, 1.04, 1.1, 1.2: the lower middle is 1.04.
	if e.N != 4 || e.Median != 1.04 || e.Low != 0.99 || e.High != 1.2 {
		t.Fatalf("paired ratio %+v", e)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("unpaired lists did not panic")
		}
	}()
	Ratios([]float64{1}, []float64{1, 2})
}

func TestDecide(t *testing.T) {
	est := func(lo, hi float64) Estimate { return Estimate{Median: (lo + hi) / 2, Low: lo, High: hi, N: 5} }
	cases := []struct {
		e       Estimate
		target  float64
		atLeast bool
		want    Verdict
	}{
		{est(0.99, 1.03), 0.98, true, Met},
		{est(0.98, 1.03), 0.98, true, Met}, // the low end on the target
		{est(0.95, 0.97), 0.98, true, NotMet},
		{est(0.97, 0.99), 0.98, true, InsideNoise},
		{est(0.97, 0.98), 0.98, true, InsideNoise}, // the high end on the target: not below it
		// ≤ targets (a delay that must stay under 90 ms).
		{est(70, 88), 90, false, Met},
		{est(70, 90), 90, false, Met},
		{est(91, 120), 90, false, NotMet},
		{est(80, 100), 90, false, InsideNoise},
		{est(90, 100), 90, false, InsideNoise},
		// Fewer than two runs decide nothing.
		{Estimate{Median: 2, Low: 2, High: 2, N: 1, NoInterval: true}, 1, true, TooFewValues},
		{Estimate{N: 0, NoInterval: true}, 1, false, TooFewValues},
	}
	for _, c := range cases {
		if got := Decide(c.e, c.target, c.atLeast); got != c.want {
			t.Errorf("Decide([%g, %g], %g, atLeast=%v) = %q, want %q", c.e.Low, c.e.High, c.target, c.atLeast, got, c.want)
		}
	}
}
