package results

import (
	"slices"
	"sort"

	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/provenance"
	"mpsteer/internal/stats"
)

// Input is what a results file is built from.
type Input struct {
	Scenario, File, Description string
	Provenance                  provenance.Provenance
	RunsRequested               int
	Complete                    bool
	// Order is the variants in the order of a round; Kinds their kinds.
	Order []string
	Kinds map[string]string
	// Primary and Compare as the scenario gives them (a zero Primary is
	// goodput).
	Primary scenario.Primary
	Compare []string
	// Runs per variant, in the order run.
	Runs map[string][]Run
}

func better(higher bool) string {
	if higher {
		return "higher"
	}
	return "lower"
}

// Build sums the runs up.
func Build(in Input) *File {
	if in.Primary.Metric == "" {
		in.Primary = scenario.DefaultPrimary
	}
	f := &File{Schema: Schema, Scenario: in.Scenario, ScenarioFile: in.File, Description: in.Description, Provenance: in.Provenance,
		RunsRequested: in.RunsRequested, Complete: in.Complete, Order: in.Order, Statistics: stats.Method,
		Primary:  Metric{Name: in.Primary.Metric, Better: better(in.Primary.Higher)},
		Variants: map[string]*Variant{}, Comparisons: map[string]*Comparison{}, VsBestAlternative: map[string]*BestAlternative{}}
	for _, name := range in.Order {
		runs := in.Runs[name]
		v := &Variant{Kind: in.Kinds[name], Runs: runs, FailedRuns: failedRuns(runs), Metrics: map[string]stats.Estimate{}}
		if v.Runs == nil {
			v.Runs = []Run{}
		}
		f.FailedRuns += v.FailedRuns
		// Each run's summary as the file holds it, once: every figure is
		// read from these.
		var sums []map[string]any
		acc := Accepted(runs)
		for _, r := range sortedRounds(acc) {
			sums = append(sums, acc[r].fields())
		}
		var all []string
		for _, s := range sums {
			all = append(all, names(s)...)
		}
		slices.Sort(all)
		for _, metric := range slices.Compact(all) {
			if metric != "goodput_mbit" {
				v.Metrics[metric] = stats.MedianCI(valuesOf(sums, metric))
			}
		}
		v.GoodputMbit = stats.MedianCI(valuesOf(sums, "goodput_mbit"))
		v.MedianRun = MedianRun(runs, in.Primary.Metric)
		f.Variants[name] = v
	}
	metrics := []scenario.Primary{scenario.DefaultPrimary}
	if in.Primary.Metric != scenario.DefaultPrimary.Metric {
		metrics = append(metrics, in.Primary)
	}
	alts := Alternatives(in.Order, in.Compare)
	f.Alternatives = append([]string{}, alts...)
	for _, m := range metrics {
		suffix := ""
		if m.Metric != scenario.DefaultPrimary.Metric {
			suffix = ":" + m.Metric
		}
		for _, a := range in.Order {
			va := RoundValues(in.Runs[a], m.Metric)
			for _, b := range alts {
				if a == b {
					continue
				}
				f.Comparisons[a+"/"+b+suffix] = Compare(va, RoundValues(in.Runs[b], m.Metric), m)
			}
			if slices.Contains(alts, a) || len(alts) == 0 {
				continue
			}
			altValues := map[string]map[int]float64{}
			for _, b := range alts {
				altValues[b] = RoundValues(in.Runs[b], m.Metric)
			}
			f.VsBestAlternative[a+suffix] = VsBest(va, alts, altValues, m)
		}
	}
	return f
}

// Alternatives are what a user would otherwise pick, among the variants
// run: the baselines present (mptcp, tcp-best, tcp) and those the
// scenario names under compare.
func Alternatives(order, compare []string) []string {
	var out []string
	for _, b := range append(slices.Clone(scenario.Baselines), compare...) {
		if slices.Contains(order, b) && !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	return out
}

// Accepted is, per round, the run that counts: the round's run that did
// not fail (a failed run is re-run once; when that fails too the round has
// none).
func Accepted(runs []Run) map[int]*Run {
	out := map[int]*Run{}
	for i := range runs {
		if r := &runs[i]; !r.Failed && (r.Summary != nil || r.Fields != nil) {
			out[r.Round] = r
		}
	}
	return out
}

func failedRuns(runs []Run) int {
	n := 0
	for _, r := range runs {
		if r.Failed {
			n++
		}
	}
	return n
}

func sortedRounds[T any](m map[int]T) []int {
	var rs []int
	for r := range m {
		rs = append(rs, r)
	}
	sort.Ints(rs)
	return rs
}

func valuesOf(sums []map[string]any, metric string) []float64 {
	var out []float64
	for _, s := range sums {
		if v, ok := value(s, metric); ok {
			out = append(out, v)
		}
	}
	return out
}

// RoundValues is metric per round, from the runs that count.
func RoundValues(runs []Run, metric string) map[int]float64 {
	out := map[int]float64{}
	for r, run := range Accepted(runs) {
		if v, ok := run.Value(metric); ok {
			out[r] = v
		}
	}
	return out
}

// Compare pairs a and b by round: only rounds where both have a value
// (and b's is not 0) make a pair; the rest are dropped.
func Compare(a, b map[int]float64, m scenario.Primary) *Comparison {
	c := &Comparison{Metric: m.Metric, Better: better(m.Higher), Rounds: []int{}, Pairs: [][2]float64{}}
	var xs, ys []float64
	for _, r := range sortedRounds(a) {
		y, ok := b[r]
		if !ok || y == 0 {
			continue
		}
		c.Rounds = append(c.Rounds, r)
		c.Pairs = append(c.Pairs, [2]float64{a[r], y})
		xs, ys = append(xs, a[r]), append(ys, y)
	}
	c.Ratio = stats.PairedRatio(xs, ys)
	return c
}

// VsBest compares a, round by round, with the best of the alternatives
// that round (the highest value, or the lowest where lower is better).
// An alternative without the metric in any round (a tcp variant has no
// subflow shares) is left out; a round where a, or an alternative that
// has the metric, has no value is dropped, so that a failed run of the
// strongest alternative never leaves a weaker one to compare with.
func VsBest(a map[int]float64, alts []string, values map[string]map[int]float64, m scenario.Primary) *BestAlternative {
	ba := &BestAlternative{Alternatives: []string{}, Metric: m.Metric, Better: better(m.Higher), Rounds: []BestRound{}}
	for _, b := range alts {
		if len(values[b]) > 0 {
			ba.Alternatives = append(ba.Alternatives, b)
		}
	}
	var xs, ys []float64
	if len(ba.Alternatives) == 0 {
		ba.Ratio = stats.MedianCI(nil)
		return ba
	}
rounds:
	for _, r := range sortedRounds(a) {
		br := BestRound{Round: r, Value: a[r]}
		for i, b := range ba.Alternatives {
			y, ok := values[b][r]
			if !ok {
				continue rounds
			}
			if i == 0 || (m.Higher && y > br.BestValue) || (!m.Higher && y < br.BestValue) {
				br.Best, br.BestValue = b, y
			}
		}
		if br.BestValue == 0 {
			continue
		}
		ba.Rounds = append(ba.Rounds, br)
		xs, ys = append(xs, br.Value), append(ys, br.BestValue)
	}
	ba.Ratio = stats.PairedRatio(xs, ys)
	return ba
}

// MedianRun is the directory of the run whose metric is the median of
// the runs that count (the first such round), or of the first that
// counts when none has the metric ("" when none counts).
func MedianRun(runs []Run, metric string) string {
	byRound := Accepted(runs)
	rounds := sortedRounds(byRound)
	if len(rounds) == 0 {
		return ""
	}
	vals := RoundValues(runs, metric)
	if len(vals) == 0 {
		return byRound[rounds[0]].Dir
	}
	var xs []float64
	for _, v := range vals {
		xs = append(xs, v)
	}
	med := stats.Float64s(xs, 0.5)[0]
	for _, r := range rounds {
		if v, ok := vals[r]; ok && v == med {
			return byRound[r].Dir
		}
	}
	return byRound[rounds[0]].Dir
}
