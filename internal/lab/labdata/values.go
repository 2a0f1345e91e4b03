package labdata

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"mpsteer/internal/stats"
)

// Value is one number of a run's summary by its metric name:
//
//	share:PATH             the share of the bytes the path carried (0–1)
//	bytes:PATH             the bytes the path carried
//	fct_median_ms, fct_p99_ms   the short flows' completion times
//	a top-level number     goodput_mbit, retransmits, bytes, duration_s, …
//	a key of "metrics"     scenario-specific values, each named with its unit
//
// ok is false when the run has no such number (or it is null).
func (r *Run) Value(metric string) (float64, bool) {
	if path, ok := strings.CutPrefix(metric, "share:"); ok {
		return number(dig(r.Fields, "paths", path, "share"))
	}
	if path, ok := strings.CutPrefix(metric, "bytes:"); ok {
		return number(dig(r.Fields, "paths", path, "bytes"))
	}
	switch metric {
	case "fct_median_ms":
		return number(dig(r.Fields, "fct_ms", "median"))
	case "fct_p99_ms":
		return number(dig(r.Fields, "fct_ms", "p99"))
	}
	if v, ok := number(r.Fields[metric]); ok {
		return v, true
	}
	return number(dig(r.Fields, "metrics", metric))
}

func dig(m map[string]any, keys ...string) any {
	var cur any = m
	for _, k := range keys {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, !math.IsNaN(x)
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint64:
		return float64(x), true
	}
	return 0, false
}

// RoundValues returns a variant's metric per round, over the runs that did
// not fail (a round's re-run stands for it when the first attempt failed);
// rounds lists them in order.
func (r *Results) RoundValues(variant, metric string) (vals map[int]float64, rounds []int) {
	v := r.Variants[variant]
	if v == nil {
		return nil, nil
	}
	vals = map[int]float64{}
	attempt := map[int]int{}
	for i := range v.Runs {
		run := &v.Runs[i]
		if run.Failed {
			continue
		}
		x, ok := run.Value(metric)
		if !ok {
			continue
		}
		if _, seen := vals[run.Round]; !seen || run.Attempt > attempt[run.Round] {
			if !seen {
				rounds = append(rounds, run.Round)
			}
			vals[run.Round], attempt[run.Round] = x, run.Attempt
		}
	}
	sort.Ints(rounds)
	return vals, rounds
}

// Values returns a variant's metric over its runs that did not fail, in
// round order.
func (r *Results) Values(variant, metric string) []float64 {
	vals, rounds := r.RoundValues(variant, metric)
	out := make([]float64, len(rounds))
	for i, k := range rounds {
		out[i] = vals[k]
	}
	return out
}

// Summary is a variant's metric summed up by internal/stats (median and
// its 95% interval over the runs that did not fail).
func (r *Results) Summary(variant, metric string) stats.Estimate {
	return stats.MedianCI(r.Values(variant, metric))
}

// Ratio is the median of the paired ratios a_r / b_r of a metric, over the
// rounds where both variants have a value (and b's is not 0), with those
// pairs.
func (r *Results) Ratio(a, b, metric string) (stats.Estimate, [][2]float64) {
	av, rounds := r.RoundValues(a, metric)
	bv, _ := r.RoundValues(b, metric)
	var ratios []float64
	var pairs [][2]float64
	for _, k := range rounds {
		y, ok := bv[k]
		if !ok || y == 0 {
			continue
		}
		ratios = append(ratios, av[k]/y)
		pairs = append(pairs, [2]float64{av[k], y})
	}
	return stats.MedianCI(ratios), pairs
}

// RatioToBest is the median over rounds of a_r / max(alt_r): a variant
// against the best of its alternatives in the same round (rounds where any
// alternative has no value are left out).
func (r *Results) RatioToBest(a string, alts []string, metric string) stats.Estimate {
	return r.RatioToBestBy(a, alts, metric, true)
}

// RatioToBestBy is RatioToBest where the best alternative is the highest
// (higher) or the lowest value.
func (r *Results) RatioToBestBy(a string, alts []string, metric string, higher bool) stats.Estimate {
	av, rounds := r.RoundValues(a, metric)
	altv := make([]map[int]float64, len(alts))
	for i, alt := range alts {
		altv[i], _ = r.RoundValues(alt, metric)
	}
	var ratios []float64
rounds:
	for _, k := range rounds {
		best := math.Inf(-1)
		if !higher {
			best = math.Inf(1)
		}
		for _, m := range altv {
			y, ok := m[k]
			if !ok {
				continue rounds
			}
			if higher {
				best = max(best, y)
			} else {
				best = min(best, y)
			}
		}
		if len(alts) == 0 || best == 0 {
			continue
		}
		ratios = append(ratios, av[k]/best)
	}
	return stats.MedianCI(ratios)
}

// Failed counts a variant's failed runs.
func (r *Results) Failed(variant string) int {
	n := 0
	if v := r.Variants[variant]; v != nil {
		for _, run := range v.Runs {
			if run.Failed {
				n++
			}
		}
	}
	return n
}

// Verify checks that what the file says of its runs is what its runs give
// (every stored summary, failed count, comparison and ratio to the best
// alternative recomputed), so that no figure can be changed by hand in a
// summary without its runs. Stored metrics whose names Value does not know
// are not checked. It returns one line per discrepancy.
func (r *Results) Verify() []string {
	var out []string
	bad := func(where, format string, args ...any) {
		out = append(out, fmt.Sprintf("%s: %s: %s", r.path, where, fmt.Sprintf(format, args...)))
	}
	for _, name := range r.VariantNames() {
		v := r.Variants[name]
		if got := r.Failed(name); got != v.FailedRuns {
			bad("variants."+name+".failed_runs", "says %d, its runs hold %d failed", v.FailedRuns, got)
		}
		if got := r.Summary(name, "goodput_mbit"); !same(got, v.Goodput) {
			bad("variants."+name+".goodput_mbit", "says %s, its runs give %s", show(v.Goodput), show(got))
		}
		keys := make([]string, 0, len(v.Metrics))
		for k := range v.Metrics {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if !r.resolves(name, k) {
				continue
			}
			if got := r.Summary(name, k); !same(got, v.Metrics[k]) {
				bad("variants."+name+".metrics."+k, "says %s, its runs give %s", show(v.Metrics[k]), show(got))
			}
		}
	}
	keys := make([]string, 0, len(r.Comparisons))
	for k := range r.Comparisons {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		c := r.Comparisons[k]
		// "A/B" on goodput, "A/B:METRIC" on the primary metric (whose
		// name may hold a colon itself: share:PATH); variant names have
		// none.
		pair, _, _ := strings.Cut(k, ":")
		a, b, ok := strings.Cut(pair, "/")
		if !ok || r.Variants[a] == nil || r.Variants[b] == nil {
			bad("comparisons."+k, "is not A/B of two variants of the file")
			continue
		}
		got, pairs := r.Ratio(a, b, c.Metric)
		if !same(got, c.Ratio) {
			bad("comparisons."+k+".ratio", "says %s, its runs give %s", show(c.Ratio), show(got))
		}
		if !samePairs(pairs, c.Pairs) {
			bad("comparisons."+k+".pairs", "says %v, its runs give %v", c.Pairs, pairs)
		}
	}
	keys = keys[:0]
	for k := range r.VsBest {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		vb := r.VsBest[k]
		variant, _, _ := strings.Cut(k, ":") // "A", or "A:METRIC" on the primary metric
		if got := r.RatioToBestBy(variant, vb.Alternatives, vb.Metric, vb.Better != "lower"); !same(got, vb.Ratio) {
			bad("vs_best_alternative."+k+".ratio", "says %s, its runs give %s", show(vb.Ratio), show(got))
		}
	}
	return out
}

// resolves reports whether Value knows a metric in any of a variant's runs.
func (r *Results) resolves(variant, metric string) bool {
	for i := range r.Variants[variant].Runs {
		if _, ok := r.Variants[variant].Runs[i].Value(metric); ok {
			return true
		}
	}
	return false
}

func near(a, b float64) bool {
	return a == b || math.Abs(a-b) <= 1e-9*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

func same(a, b stats.Estimate) bool {
	return a.N == b.N && near(a.Median, b.Median) && near(a.Low, b.Low) && near(a.High, b.High)
}

func samePairs(a, b [][2]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !near(a[i][0], b[i][0]) || !near(a[i][1], b[i][1]) {
			return false
		}
	}
	return true
}

func show(s stats.Estimate) string {
	return fmt.Sprintf("median %g [%g, %g] n = %d", s.Median, s.Low, s.High, s.N)
}
