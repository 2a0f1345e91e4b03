// Package results is results.json, the file `mpsteer lab run --runs N`
// writes (docs/results-schema in notes: the contract with the docs
// renderer): every run of every variant, failed ones included with their
// reason, and per variant the median and 95% interval of each figure over
// the runs that count; per compared pair the median of the paired ratios
// (run r of one variant against run r of the other) with its interval;
// and each variant against the best of the alternatives a user would
// otherwise pick, round by round. All statistics come from
// internal/stats; nothing here measures.
//
// It is the one reader of the file, for the runner (Build, then lab table
// and the report) and for the documents (docs/data holds results.json
// files, some converted from data recorded before this layout: their
// runs' summaries keep their older shape, see Run); Verify computes every
// stored figure again from the runs.
package results

import (
	"encoding/json"
	"maps"

	"mpsteer/internal/lab/report"
	"mpsteer/internal/provenance"
	"mpsteer/internal/stats"
)

// Schema is the version of the layout.
const Schema = 2

// File is results.json.
type File struct {
	Schema       int                   `json:"schema"`
	Scenario     string                `json:"scenario"`
	ScenarioFile string                `json:"file"`
	Description  string                `json:"description"`
	Provenance   provenance.Provenance `json:"provenance"`
	// RunsRequested is N; Complete says every round ran (false while a
	// run is under way, or when it was interrupted or stopped).
	RunsRequested int  `json:"runs_requested"`
	Complete      bool `json:"complete"`
	// Order is the order of the variants within a round.
	Order      []string `json:"order"`
	Statistics string   `json:"statistics"`
	// Primary is the figure the scenario's claim is about (goodput_mbit
	// unless the scenario declares another).
	Primary    Metric              `json:"primary_metric"`
	FailedRuns int                 `json:"failed_runs"`
	Variants   map[string]*Variant `json:"variants"`
	// Alternatives are what a user would otherwise pick, among the
	// variants run (the baselines mptcp, tcp-best, tcp present, and those
	// the scenario names under compare): every variant is compared with
	// each.
	Alternatives []string `json:"alternatives"`
	// Comparisons, keyed "A/B", compare A with B on goodput_mbit; when the
	// scenario's primary metric is another, "A/B:METRIC" on that too.
	Comparisons map[string]*Comparison `json:"comparisons"`
	// VsBestAlternative, keyed by variant (and "VARIANT:METRIC" for the
	// primary metric), compares a variant with the best alternative in
	// each round.
	VsBestAlternative map[string]*BestAlternative `json:"vs_best_alternative"`
}

// Metric names a figure and which way it is better ("higher", "lower").
type Metric struct {
	Name   string `json:"name"`
	Better string `json:"better"`
}

// Variant is one variant's runs and figures.
type Variant struct {
	Kind string `json:"kind"`
	// Runs are every run in the order run, failed ones included.
	Runs       []Run `json:"runs"`
	FailedRuns int   `json:"failed_runs"`
	// MedianRun is the directory of the run whose primary figure is the
	// median (by the nearest-rank rule it is one of the runs); its files
	// are also at <variant>/, for plots and older readers.
	MedianRun   string                    `json:"median_run,omitempty"`
	GoodputMbit stats.Estimate            `json:"goodput_mbit"`
	Metrics     map[string]stats.Estimate `json:"metrics"`
}

// Run is one run: where it is, whether it counts, and its summary.
type Run struct {
	Round   int    `json:"round"`
	Attempt int    `json:"attempt"`
	Dir     string `json:"dir"`
	Failed  bool   `json:"failed"`
	Reason  string `json:"reason"`
	// GoodputMbit is the summary's (null when the run has no summary: it
	// failed before its traffic ran).
	GoodputMbit *float64 `json:"goodput_mbit"`
	*report.Summary
	// Fields is the run's summary as a file holds it, every field (nil
	// for a run the runner has just made: its Summary is all there is).
	// A summary recorded before schema 2 may have an older shape than
	// report.Summary (congestion_control a name, subflows a count): then
	// Summary is nil, and Fields is the summary, kept as it was.
	Fields map[string]any `json:"-"`
}

// runKeys are a run's own keys in the file; every other key of a run is
// its summary's.
var runKeys = []string{"round", "attempt", "dir", "failed", "reason"}

// UnmarshalJSON reads a run: its place and outcome, every field of its
// summary (Fields), and the summary as report.Summary where it has that
// shape.
func (r *Run) UnmarshalJSON(data []byte) error {
	var place struct {
		Round   int    `json:"round"`
		Attempt int    `json:"attempt"`
		Dir     string `json:"dir"`
		Failed  bool   `json:"failed"`
		Reason  string `json:"reason"`
	}
	if err := json.Unmarshal(data, &place); err != nil {
		return err
	}
	var fields map[string]any
	if err := json.Unmarshal(data, &fields); err != nil {
		return err
	}
	for _, k := range runKeys {
		delete(fields, k)
	}
	*r = Run{Round: place.Round, Attempt: place.Attempt, Dir: place.Dir, Failed: place.Failed, Reason: place.Reason}
	if g, ok := number(fields["goodput_mbit"]); ok {
		r.GoodputMbit = &g
	}
	if g, ok := fields["goodput_mbit"]; len(fields) == 0 || (len(fields) == 1 && ok && g == nil) {
		return nil // no summary: the run failed before its traffic ran
	}
	r.Fields = fields
	var s report.Summary
	if json.Unmarshal(data, &s) == nil {
		if r.GoodputMbit != nil {
			s.GoodputMbit = *r.GoodputMbit
		}
		r.Summary = &s
	}
	return nil
}

// MarshalJSON writes a run: a summary read from a file (Fields) as it was
// read, keys in order; one the runner made, as report.Summary writes it.
func (r Run) MarshalJSON() ([]byte, error) {
	if r.Fields == nil {
		type plain Run
		return json.Marshal(plain(r))
	}
	m := make(map[string]any, len(r.Fields)+len(runKeys))
	maps.Copy(m, r.Fields)
	m["round"], m["attempt"], m["dir"], m["failed"], m["reason"] = r.Round, r.Attempt, r.Dir, r.Failed, r.Reason
	return json.Marshal(m)
}

// Comparison is A against B over the rounds where both have a value.
type Comparison struct {
	Metric string `json:"metric"`
	Better string `json:"better"`
	// Ratio is the median of the paired ratios A_r / B_r.
	Ratio  stats.Estimate `json:"ratio"`
	Rounds []int          `json:"rounds"`
	// Pairs are (A_r, B_r) of those rounds.
	Pairs [][2]float64 `json:"pairs"`
}

// BestAlternative is a variant against, in each round, the best of the
// alternatives that round.
type BestAlternative struct {
	Alternatives []string       `json:"alternatives"`
	Metric       string         `json:"metric"`
	Better       string         `json:"better"`
	Ratio        stats.Estimate `json:"ratio"`
	Rounds       []BestRound    `json:"rounds"`
}

// BestRound is one round of a BestAlternative.
type BestRound struct {
	Round     int     `json:"round"`
	Value     float64 `json:"value"`
	Best      string  `json:"best"`
	BestValue float64 `json:"best_value"`
}
