package results

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"mpsteer/internal/stats"
)

// Verify checks that what the file says of its runs is what its runs
// give: every variant's failed runs, goodput and metrics, every comparison
// and every comparison with the best alternative, computed again from the
// runs as Build computes them; so that no figure can be changed by hand
// without its runs. Stored metrics whose names Value does not know are
// not checked. It returns one line per discrepancy, naming the figure
// ("variants.mptcp.goodput_mbit: says …, its runs give …").
func (f *File) Verify() []string {
	var out []string
	bad := func(where, format string, args ...any) {
		out = append(out, where+": "+fmt.Sprintf(format, args...))
	}
	for _, name := range f.VariantNames() {
		v := f.Variants[name]
		if got := f.Failed(name); got != v.FailedRuns {
			bad("variants."+name+".failed_runs", "says %d, its runs hold %d failed", v.FailedRuns, got)
		}
		if got := f.Estimate(name, "goodput_mbit"); !same(got, v.GoodputMbit) {
			bad("variants."+name+".goodput_mbit", "says %s, its runs give %s", show(v.GoodputMbit), show(got))
		}
		for _, k := range slices.Sorted(maps.Keys(v.Metrics)) {
			if !f.resolves(name, k) {
				continue
			}
			if got := f.Estimate(name, k); !same(got, v.Metrics[k]) {
				bad("variants."+name+".metrics."+k, "says %s, its runs give %s", show(v.Metrics[k]), show(got))
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(f.Comparisons)) {
		c := f.Comparisons[k]
		a, b, ok := strings.Cut(strings.TrimSuffix(k, ":"+c.Metric), "/")
		if !ok || f.Variants[a] == nil || f.Variants[b] == nil {
			bad("comparisons."+k, "is not A/B of two variants of the file")
			continue
		}
		got := f.Paired(a, b, c.Metric)
		if !same(got.Ratio, c.Ratio) {
			bad("comparisons."+k+".ratio", "says %s, its runs give %s", show(c.Ratio), show(got.Ratio))
		}
		if !samePairs(got.Pairs, c.Pairs) {
			bad("comparisons."+k+".pairs", "says %v, its runs give %v", c.Pairs, got.Pairs)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(f.VsBestAlternative)) {
		vb := f.VsBestAlternative[k]
		a := strings.TrimSuffix(k, ":"+vb.Metric)
		if f.Variants[a] == nil {
			bad("vs_best_alternative."+k, "is not a variant of the file")
			continue
		}
		if got := f.AgainstBest(a, vb.Alternatives, vb.Metric); !same(got.Ratio, vb.Ratio) {
			bad("vs_best_alternative."+k+".ratio", "says %s, its runs give %s", show(vb.Ratio), show(got.Ratio))
		}
	}
	return out
}

// resolves reports whether Value knows a metric in any of a variant's
// runs, failed ones included.
func (f *File) resolves(variant, metric string) bool {
	for _, r := range f.runs(variant) {
		if _, ok := r.Value(metric); ok {
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
