package results

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/stats"
)

// Name is the file's name in a run's output directory.
const Name = "results.json"

// Read loads DIR/results.json. A file from before repeated runs (a list
// of the variants' summaries, one run each) is read as one round.
func Read(dir string) (*File, error) {
	file := filepath.Join(dir, Name)
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	f, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return f, nil
}

// Parse reads a results file's contents (either layout). A run whose
// round is not counted from 1, or a variant that is null, is refused.
func Parse(data []byte) (*File, error) {
	var f *File
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '[' {
		var runs []Run
		if err := json.Unmarshal(t, &runs); err != nil {
			return nil, err
		}
		var err error
		if f, err = fromSummaries(runs); err != nil {
			return nil, err
		}
	} else {
		f = &File{}
		if err := json.Unmarshal(data, f); err != nil {
			return nil, err
		}
		if f.Schema != Schema {
			return nil, fmt.Errorf("results schema %d; this mpsteer reads %d (and the older list of summaries)", f.Schema, Schema)
		}
	}
	if len(f.Variants) == 0 {
		return nil, fmt.Errorf("no variants")
	}
	for _, name := range slices.Sorted(maps.Keys(f.Variants)) {
		v := f.Variants[name]
		if v == nil {
			return nil, fmt.Errorf("variants.%s is null", name)
		}
		for i, r := range v.Runs {
			if r.Round < 1 {
				return nil, fmt.Errorf("variants.%s.runs[%d]: round %d (rounds count from 1)", name, i, r.Round)
			}
		}
	}
	return f, nil
}

// fromSummaries makes one round of the summaries of an older file (a
// list of the variants' summaries, one run each).
func fromSummaries(runs []Run) (*File, error) {
	in := Input{RunsRequested: 1, Complete: true, Kinds: map[string]string{}, Runs: map[string][]Run{}}
	for i, r := range runs {
		name, _ := r.Fields["variant"].(string)
		if name == "" {
			return nil, fmt.Errorf("[%d]: a run summary without a variant", i)
		}
		if in.Runs[name] != nil {
			return nil, fmt.Errorf("[%d]: variant %s twice", i, name)
		}
		if in.Scenario == "" {
			in.Scenario, _ = r.Fields["scenario"].(string)
		}
		in.Order = append(in.Order, name)
		in.Kinds[name], _ = r.Fields["kind"].(string)
		r.Round, r.Attempt, r.Dir = 1, 1, name
		in.Runs[name] = []Run{r}
	}
	f := Build(in)
	f.Schema = 1
	return f, nil
}

// VariantNames lists the variants in the file's order (Order), then any
// others by name.
func (f *File) VariantNames() []string {
	var out []string
	for _, n := range f.Order {
		if _, ok := f.Variants[n]; ok && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(f.Variants)) {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// Representative is, per variant in round order, the summary of its
// median run (MedianRun) — a whole run's figures, for tables and plots
// that show one run per variant. Variants without a run that counts, or
// whose summary is of an older shape, are left out.
func (f *File) Representative() []*report.Summary {
	var out []*report.Summary
	for _, name := range f.Order {
		v := f.Variants[name]
		if v == nil {
			continue
		}
		for _, r := range v.Runs {
			if r.Dir == v.MedianRun && !r.Failed && r.Summary != nil {
				out = append(out, r.Summary)
				break
			}
		}
	}
	return out
}

func (f *File) runs(variant string) []Run {
	if v := f.Variants[variant]; v != nil {
		return v.Runs
	}
	return nil
}

// Values are a variant's metric over its runs that count, in round order
// (none when the file has no such variant).
func (f *File) Values(variant, metric string) []float64 {
	vals := RoundValues(f.runs(variant), metric)
	var out []float64
	for _, r := range sortedRounds(vals) {
		out = append(out, vals[r])
	}
	return out
}

// Failed counts a variant's failed runs.
func (f *File) Failed(variant string) int { return failedRuns(f.runs(variant)) }

// Estimate is a variant's median and interval of a figure over its runs
// that count (n = 0 when it has none), computed from the runs as Build
// computes the stored ones.
func (f *File) Estimate(variant, metric string) stats.Estimate {
	return stats.MedianCI(f.Values(variant, metric))
}

// metric is how a figure compares: the file's primary metric as the
// scenario declares it, else as its name says (known is false when the
// name does not say; then higher counts as better).
func (f *File) metric(name string) (m scenario.Primary, known bool) {
	if name == f.Primary.Name && f.Primary.Better != "" {
		return scenario.Primary{Metric: name, Higher: f.Primary.Better == "higher"}, true
	}
	higher, known := scenario.MetricHigherIsBetter(name)
	return scenario.Primary{Metric: name, Higher: higher || !known}, known
}

// Paired compares variant a with b on any figure, as Comparisons do.
func (f *File) Paired(a, b, metric string) *Comparison {
	m, known := f.metric(metric)
	c := Compare(RoundValues(f.runs(a), metric), RoundValues(f.runs(b), metric), m)
	if !known {
		c.Better = "" // the name does not say
	}
	return c
}

// AgainstBest compares variant a, round by round, with the best of alts
// that round on any figure, as VsBestAlternative does.
func (f *File) AgainstBest(a string, alts []string, metric string) *BestAlternative {
	m, known := f.metric(metric)
	values := map[string]map[int]float64{}
	for _, b := range alts {
		values[b] = RoundValues(f.runs(b), metric)
	}
	ba := VsBest(RoundValues(f.runs(a), metric), alts, values, m)
	if !known {
		ba.Better = ""
	}
	return ba
}
