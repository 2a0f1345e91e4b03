package stats

import (
	"math"
	"slices"
	"testing"
	"time"
)

func TestQuantileIsNearestRank(t *testing.T) {
	// 1..10: the q-quantile is the ⌈10q⌉-th smallest.
	x := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for q, want := range map[float64]float64{0: 1, 0.05: 1, 0.1: 1, 0.11: 2, 0.5: 5, 0.51: 6, 0.9: 9, 0.99: 10, 1: 10} {
		if got := Quantile(x, q); got != want {
			t.Errorf("Quantile(1..10, %g) = %g, want %g", q, got, want)
		}
	}
	// Odd count: the median is the middle sample.
	if got := Quantile([]float64{1, 2, 3}, 0.5); got != 2 {
		t.Errorf("median of 1,2,3 = %g", got)
	}
	// Even count: the lower middle sample, never an average.
	if got := Quantile([]float64{1, 2, 3, 4}, 0.5); got != 2 {
		t.Errorf("median of 1,2,3,4 = %g, want 2", got)
	}
	if got := Quantile(nil, 0.5); got != 0 {
		t.Errorf("Quantile(empty) = %g, want 0", got)
	}
	if got := Quantile([]float64{7}, 0.99); got != 7 {
		t.Errorf("Quantile of one sample = %g", got)
	}
}

func TestP99Of100And1000(t *testing.T) {
	for _, n := range []int{100, 1000, 101} {
		x := make([]float64, n)
		for i := range x {
			x[i] = float64(i + 1)
		}
		want := math.Ceil(0.99 * float64(n))
		if got := Quantile(x, 0.99); got != want {
			t.Errorf("p99 of 1..%d = %g, want %g", n, got, want)
		}
	}
}

func TestQuantileOutOfRangePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("q = 1.5 did not panic")
		}
	}()
	Quantile([]float64{1}, 1.5)
}

func TestHelpersSortACopy(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	orig := slices.Clone(xs)
	got := Float64s(xs, 0, 0.5, 1)
	if !slices.Equal(got, []float64{1, 3, 5}) {
		t.Errorf("Float64s = %v, want [1 3 5]", got)
	}
	if !slices.Equal(xs, orig) {
		t.Errorf("Float64s changed its input: %v", xs)
	}

	ds := []time.Duration{40 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond, 20 * time.Millisecond, 1234567891 * time.Nanosecond}
	dorig := slices.Clone(ds)
	gotD := Durations(ds, 0.5, 0.9, 1)
	wantD := []time.Duration{30 * time.Millisecond, 1234567891, 1234567891}
	if !slices.Equal(gotD, wantD) {
		t.Errorf("Durations = %v, want %v", gotD, wantD)
	}
	if !slices.Equal(ds, dorig) {
		t.Errorf("Durations changed its input: %v", ds)
	}
	if got := Durations(nil, 0.5, 0.99); !slices.Equal(got, []time.Duration{0, 0}) {
		t.Errorf("Durations(empty) = %v", got)
	}
	if got := Float64s(nil, 0.5); !slices.Equal(got, []float64{0}) {
		t.Errorf("Float64s(empty) = %v", got)
	}
}
