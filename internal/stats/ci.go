package stats

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
)

// Summary is a median with its 95% interval over N values. With N < 2 the
// interval is [Median, Median]: one value has no spread to show (Single
// says so).
type Summary struct {
	Median float64 `json:"median"`
	Lo     float64 `json:"ci95_low"`
	Hi     float64 `json:"ci95_high"`
	N      int     `json:"n"`
}

// Single reports a summary of fewer than two values, whose interval is the
// value itself and says nothing about the spread.
func (s Summary) Single() bool { return s.N < 2 }

// Resamples is how many bootstrap resamples MedianCI draws.
const Resamples = 10000

// MedianCI returns the median of xs (by Quantile's rule: one of the
// values, the lower middle one of an even count) and a 95%
// percentile-bootstrap interval of it: Resamples resamples of len(xs)
// values drawn with replacement, the 2.5% and 97.5% quantiles of their
// medians. The generator is seeded from the values themselves (their
// sorted bits), so the same data always give the same interval, in any
// order: documents rendered from data render to the same text every time.
// No values give a zero Summary; one gives [x, x].
func MedianCI(xs []float64) Summary {
	n := len(xs)
	if n == 0 {
		return Summary{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	med := Quantile(s, 0.5)
	if n == 1 {
		return Summary{Median: med, Lo: med, Hi: med, N: 1}
	}
	h := fnv.New64a()
	var b [8]byte
	for _, x := range s {
		binary.LittleEndian.PutUint64(b[:], math.Float64bits(x))
		h.Write(b[:])
	}
	seed := h.Sum64()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	meds := make([]float64, Resamples)
	draw := make([]float64, n)
	for i := range meds {
		for j := range draw {
			draw[j] = s[rng.IntN(n)]
		}
		slices.Sort(draw)
		meds[i] = Quantile(draw, 0.5)
	}
	slices.Sort(meds)
	return Summary{Median: med, Lo: Quantile(meds, 0.025), Hi: Quantile(meds, 0.975), N: n}
}

// The verdicts of a summary against a target.
const (
	Met         = "met"
	NotMet      = "not met"
	InsideNoise = "inside the noise"
	NoData      = "no data"
)

// Verdict decides a summary against a target by its interval, never by
// its median alone: where higher is better, Met when the whole interval is
// at or above the target (Lo ≥ target), NotMet when it is all below
// (Hi < target), and InsideNoise when the interval straddles it; where
// lower is better, the mirror (Met when Hi ≤ target, NotMet when
// Lo > target). A summary of no values gives NoData. A single value's
// interval is the value, so its verdict is the value's: callers show N
// beside it.
func Verdict(s Summary, target float64, higherIsBetter bool) string {
	if s.N == 0 {
		return NoData
	}
	if higherIsBetter {
		switch {
		case s.Lo >= target:
			return Met
		case s.Hi < target:
			return NotMet
		}
		return InsideNoise
	}
	switch {
	case s.Hi <= target:
		return Met
	case s.Lo > target:
		return NotMet
	}
	return InsideNoise
}
