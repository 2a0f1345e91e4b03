// Package stats holds the one quantile rule every mpsteer measurement uses
// (medians, p90, p99 of latencies, flow completion times, costs), so that
// two numbers called "p99" are always computed the same way, and the one
// way figures over repeated runs are summed up (interval.go): the median
// with a 95% bootstrap interval, paired ratios, and the verdict of an
// interval against a target.
package stats

import (
	"slices"
	"time"

	"gonum.org/v1/gonum/stat"
)

// Quantile returns the q-quantile (q in [0, 1]) of sorted, which must be in
// increasing order, by the empirical rule (gonum's stat.Empirical, also
// called nearest rank): the smallest sample x such that at least a fraction
// q of the n samples are ≤ x, that is sorted[⌈q·n⌉−1], and sorted[0] for
// q = 0 (q·n is computed in float64, which for the q mpsteer uses, 0.5, 0.9
// and 0.99, gives the exact ceiling). The result is always one of the
// samples, never an interpolation: the median of an even count is the lower
// of the two middle samples, and Quantile(sorted, 1) is the maximum. An
// empty slice gives 0. q outside [0, 1] is a programming error and panics.
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return stat.Quantile(q, stat.Empirical, sorted, nil)
}

// Float64s returns the quantiles qs of xs by Quantile's rule. It sorts a
// copy: xs is left as it was.
func Float64s(xs []float64, qs ...float64) []float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	out := make([]float64, len(qs))
	for i, q := range qs {
		out[i] = Quantile(s, q)
	}
	return out
}

// Durations returns the quantiles qs of ds by Quantile's rule. It sorts a
// copy: ds is left as it was. Each result is one of the samples, exactly
// for durations up to 2^53 ns (104 days), which a float64 holds exactly.
func Durations(ds []time.Duration, qs ...float64) []time.Duration {
	s := make([]float64, len(ds))
	for i, d := range ds {
		s[i] = float64(d)
	}
	slices.Sort(s)
	out := make([]time.Duration, len(qs))
	for i, q := range qs {
		out[i] = time.Duration(Quantile(s, q))
	}
	return out
}
