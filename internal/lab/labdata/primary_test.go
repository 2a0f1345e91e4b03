package labdata

import (
	"strings"
	"testing"
)

// Comparisons and ratios to the best alternative on a scenario's primary
// metric (keys "A/B:METRIC" and "A:METRIC", the metric's name perhaps
// with a colon of its own) are verified like those on goodput, the best
// alternative being the lowest when lower is better.
func TestVerifyChecksPrimaryMetricKeys(t *testing.T) {
	r := results(t, map[string][][4]float64{
		"mptcp": {{1, 1, 50, 0}, {2, 1, 40, 0}},
		"tcp":   {{1, 1, 20, 0}, {2, 1, 30, 0}},
		"lia":   {{1, 1, 10, 0}, {2, 1, 20, 0}},
	})
	for name, v := range r.Variants {
		v.Goodput = r.Summary(name, "goodput_mbit")
	}
	ratio, pairs := r.Ratio("lia", "mptcp", "stall_ms")
	r.Comparisons = map[string]*Comparison{"lia/mptcp:stall_ms": {Metric: "stall_ms", Ratio: ratio, Pairs: pairs}}
	share, sharePairs := r.Ratio("lia", "mptcp", "share:a")
	r.Comparisons["lia/mptcp:share:a"] = &Comparison{Metric: "share:a", Ratio: share, Pairs: sharePairs}
	// stall_ms: lower is better, so the best alternative is the lower.
	low := r.RatioToBestBy("lia", []string{"mptcp", "tcp"}, "stall_ms", false)
	if low.N != 2 || low.Median != 0.5 {
		t.Fatalf("ratio to the lowest alternative %+v, want 0.5 (10/20 and 20/30)", low)
	}
	r.VsBest = map[string]*VsBest{"lia:stall_ms": {Alternatives: []string{"mptcp", "tcp"}, Metric: "stall_ms", Better: "lower", Ratio: low}}
	if problems := r.Verify(); len(problems) != 0 {
		t.Fatalf("a consistent file: %s", strings.Join(problems, "\n"))
	}
	r.VsBest["lia:stall_ms"].Better = "higher"
	if problems := r.Verify(); len(problems) != 1 || !strings.Contains(problems[0], "vs_best_alternative.lia:stall_ms.ratio") {
		t.Errorf("the best alternative taken the wrong way: %q", problems)
	}
}
