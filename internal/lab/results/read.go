package results

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

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

// Parse reads a results file's contents (either layout).
func Parse(data []byte) (*File, error) {
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '[' {
		var sums []*report.Summary
		if err := json.Unmarshal(t, &sums); err != nil {
			return nil, err
		}
		return fromSummaries(sums), nil
	}
	var f File
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, err
	}
	if f.Schema != Schema {
		return nil, fmt.Errorf("results schema %d; this mpsteer reads %d (and the older list of summaries)", f.Schema, Schema)
	}
	return &f, nil
}

// fromSummaries makes one round of the summaries of an older file.
func fromSummaries(sums []*report.Summary) *File {
	in := Input{RunsRequested: 1, Complete: true, Kinds: map[string]string{}, Runs: map[string][]Run{}}
	for _, s := range sums {
		if in.Scenario == "" {
			in.Scenario = s.Scenario
		}
		in.Order = append(in.Order, s.Variant)
		in.Kinds[s.Variant] = s.Kind
		g := s.GoodputMbit
		in.Runs[s.Variant] = []Run{{Round: 1, Attempt: 1, Dir: s.Variant, GoodputMbit: &g, Summary: s}}
	}
	f := Build(in)
	f.Schema = 1
	return f
}

// Representative is, per variant in round order, the summary of its
// median run (MedianRun) — a whole run's figures, for tables and plots
// that show one run per variant. Variants without a run that counts are
// left out.
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

// Estimate is a variant's median and interval of a figure over its runs
// that count (n = 0 when it has none).
func (f *File) Estimate(variant, metric string) stats.Estimate {
	v := f.Variants[variant]
	if v == nil {
		return stats.MedianCI(nil)
	}
	if metric == "goodput_mbit" {
		return v.GoodputMbit
	}
	if e, ok := v.Metrics[metric]; ok {
		return e
	}
	var xs []float64
	acc := Accepted(v.Runs)
	for _, r := range sortedRounds(acc) {
		if x, ok := report.Value(acc[r], metric); ok {
			xs = append(xs, x)
		}
	}
	return stats.MedianCI(xs)
}

// Paired compares variant a with b on any figure, as Comparisons do.
func (f *File) Paired(a, b, metric string) *Comparison {
	var ra, rb []Run
	if v := f.Variants[a]; v != nil {
		ra = v.Runs
	}
	if v := f.Variants[b]; v != nil {
		rb = v.Runs
	}
	higher, ok := scenario.MetricHigherIsBetter(metric)
	if metric == f.Primary.Name {
		higher, ok = f.Primary.Better == "higher", true
	}
	c := Compare(RoundValues(ra, metric), RoundValues(rb, metric), scenario.Primary{Metric: metric, Higher: higher})
	if !ok {
		c.Better = "" // the name does not say
	}
	return c
}
