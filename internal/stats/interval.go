package stats

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
)

// Resamples is how many bootstrap resamples an interval is drawn from.
const Resamples = 10000

// Method says, in words, how every Estimate is computed (results files
// carry it beside their figures).
const Method = "median by the nearest-rank rule (the lower middle value of an even count); " +
	"95% interval: percentile bootstrap of that median, 10000 resamples, seeded from the values themselves " +
	"(the same values always give the same interval); fewer than 2 values: no interval"

// Estimate is a median over runs with its 95% interval. With fewer than
// two values there is no interval: Low and High are the value itself and
// NoInterval says so. With no values at all the numbers are absent (JSON
// null), never a zero that could pass for a measurement.
type Estimate struct {
	Median     float64
	Low, High  float64
	N          int
	NoInterval bool
}

type estimateJSON struct {
	Median     *float64 `json:"median"`
	Low        *float64 `json:"ci95_low"`
	High       *float64 `json:"ci95_high"`
	N          int      `json:"n"`
	NoInterval bool     `json:"no_interval,omitempty"`
}

// MarshalJSON writes {median, ci95_low, ci95_high, n}, with nulls when n
// is 0 and no_interval when n < 2.
func (e Estimate) MarshalJSON() ([]byte, error) {
	j := estimateJSON{N: e.N, NoInterval: e.NoInterval}
	if e.N > 0 {
		j.Median, j.Low, j.High = &e.Median, &e.Low, &e.High
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (e *Estimate) UnmarshalJSON(data []byte) error {
	var j estimateJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	*e = Estimate{N: j.N, NoInterval: j.NoInterval}
	if j.Median != nil {
		e.Median = *j.Median
	}
	if j.Low != nil {
		e.Low = *j.Low
	}
	if j.High != nil {
		e.High = *j.High
	}
	return nil
}

// MedianCI is the median of xs (Quantile's rule) and a 95% percentile
// bootstrap interval of it: Resamples resamples of len(xs) values drawn
// with replacement, the median of each, and the 2.5% and 97.5% quantiles
// of those medians (Quantile's rule again, so both ends are values of
// xs). The random draws are seeded from the sorted values, so the result
// depends on the values only, not on their order or on when it is run.
// NaN and infinite values are a programming error and panic.
func MedianCI(xs []float64) Estimate {
	s := slices.Clone(xs)
	for _, x := range s {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			panic("stats.MedianCI: a value is not a finite number")
		}
	}
	slices.Sort(s)
	n := len(s)
	switch n {
	case 0:
		return Estimate{NoInterval: true}
	case 1:
		return Estimate{Median: s[0], Low: s[0], High: s[0], N: 1, NoInterval: true}
	}
	e := Estimate{Median: Quantile(s, 0.5), N: n}
	if s[0] == s[n-1] {
		e.Low, e.High = s[0], s[0]
		return e
	}
	rng := rand.New(rand.NewPCG(seedOf(s)))
	meds := make([]float64, Resamples)
	// A resample's median is its k-th smallest value; drawing indices and
	// counting how many fall at or below each rank finds it without
	// sorting: the median is s[j] for the smallest j with more than k
	// draws at indices ≤ j.
	k := int(math.Ceil(0.5*float64(n))) - 1
	counts := make([]int, n)
	for r := range meds {
		clear(counts)
		for range n {
			counts[index(rng.Uint64(), n)]++
		}
		seen := 0
		for j, c := range counts {
			seen += c
			if seen > k {
				meds[r] = s[j]
				break
			}
		}
	}
	slices.Sort(meds)
	e.Low, e.High = Quantile(meds, 0.025), Quantile(meds, 0.975)
	return e
}

// index maps a uniform 64-bit number onto 0..n-1 (the high half of the
// 128-bit product: a bias of at most n/2^64, and no dependence on how a
// library picks integers).
func index(u uint64, n int) int {
	hi, _ := bits.Mul64(u, uint64(n))
	return int(hi)
}

// seedOf derives the bootstrap's seed from the sorted values.
func seedOf(sorted []float64) (uint64, uint64) {
	h := sha256.New()
	var b [8]byte
	for _, x := range sorted {
		binary.LittleEndian.PutUint64(b[:], math.Float64bits(x))
		h.Write(b[:])
	}
	sum := h.Sum(nil)
	return binary.LittleEndian.Uint64(sum[:8]), binary.LittleEndian.Uint64(sum[8:16])
}

// Ratios are the paired ratios a[i]/b[i]; a pair whose b is 0 has no
// ratio and is left out.
func Ratios(a, b []float64) []float64 {
	if len(a) != len(b) {
		panic("stats.Ratios: the two lists are not paired (different lengths)")
	}
	var out []float64
	for i := range a {
		if b[i] != 0 {
			out = append(out, a[i]/b[i])
		}
	}
	return out
}

// PairedRatio is the median and interval of the paired ratios a[i]/b[i]
// (pairs with b = 0 left out): a comparison of two variants measured in
// the same rounds.
func PairedRatio(a, b []float64) Estimate { return MedianCI(Ratios(a, b)) }

// Verdict is what an interval says about a target.
type Verdict string

const (
	Met          Verdict = "met"
	NotMet       Verdict = "not met"
	InsideNoise  Verdict = "inside the noise"
	TooFewValues Verdict = "too few runs"
)

// Decide judges an estimate against a target: for atLeast (the figure
// must be ≥ target) it is met when the whole interval is at or above the
// target, not met when the whole interval is below it, and inside the
// noise when the interval straddles it; for !atLeast (≤ target) the
// mirror. An estimate without an interval (fewer than 2 values) decides
// nothing: too few runs.
func Decide(e Estimate, target float64, atLeast bool) Verdict {
	if e.N < 2 || e.NoInterval {
		return TooFewValues
	}
	if atLeast {
		switch {
		case e.Low >= target:
			return Met
		case e.High < target:
			return NotMet
		}
		return InsideNoise
	}
	switch {
	case e.High <= target:
		return Met
	case e.Low > target:
		return NotMet
	}
	return InsideNoise
}
