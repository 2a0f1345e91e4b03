// Package labdata reads the lab's results.json (schema 2: every run of
// every variant of a scenario, failed ones included, with their provenance;
// docs/notes: the contract between `mpsteer lab run --runs N` and the
// documents), computes the figures the documents quote from its runs by
// internal/stats, checks that what a file says of its runs is what its runs
// give, and converts the summaries recorded before that schema existed
// (legacy.go).
package labdata

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"mpsteer/internal/stats"
)

// Schema is the results.json schema this package reads.
const Schema = 2

// LegacyNote marks the provenance of data recorded before provenance was
// kept (converted by Convert).
const LegacyNote = "recorded before provenance was kept"

// Provenance says where a data file's numbers come from: the build, the
// command, the kernel and when. Every data file the documents quote
// carries one.
type Provenance struct {
	Commit   string `json:"commit"`
	Dirty    bool   `json:"dirty"`
	Command  string `json:"command"`
	Kernel   string `json:"kernel"`
	Date     string `json:"date"`
	Finished string `json:"finished,omitempty"`
	Host     *Host  `json:"host,omitempty"`
	// Legacy is set (to LegacyNote) on data converted from files recorded
	// before provenance was kept; what is not known then says "unknown".
	Legacy string `json:"legacy,omitempty"`
	// Sources are the files legacy data was converted from.
	Sources []string `json:"sources,omitempty"`
}

// Host is the machine a run was measured on.
type Host struct {
	CPUs     int    `json:"cpus"`
	Hostname string `json:"hostname"`
}

// Check reports what a provenance lacks ("" when it is complete): the
// commit, the command, the kernel and the date are required; legacy data
// may say "unknown" for what was not recorded, and must say it is legacy.
func (p *Provenance) Check() string {
	if p == nil {
		return "no provenance (commit, command, kernel, date)"
	}
	var missing []string
	for _, f := range []struct{ name, v string }{{"commit", p.Commit}, {"command", p.Command}, {"kernel", p.Kernel}, {"date", p.Date}} {
		if strings.TrimSpace(f.v) == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return "provenance without " + strings.Join(missing, ", ")
	}
	if p.Legacy == "" {
		for _, v := range []string{p.Commit, p.Kernel, p.Date} {
			if v == "unknown" {
				return "provenance says \"unknown\" but is not marked legacy"
			}
		}
	}
	return ""
}

// Summary says in a few words where the numbers come from, for the
// documents: "commit 803c952, kernel 6.18.44, 2026-11-26", or for legacy
// data "legacy (recorded before provenance was kept): commit 4593a5c,
// 2026-11-23".
func (p *Provenance) Summary() string {
	var parts []string
	if p.Commit != "" && p.Commit != "unknown" {
		c := "commit " + p.Commit
		if p.Dirty {
			c += " (with uncommitted changes)"
		}
		parts = append(parts, c)
	}
	if p.Kernel != "" && p.Kernel != "unknown" {
		parts = append(parts, "kernel "+p.Kernel)
	}
	if p.Date != "" && p.Date != "unknown" {
		d := p.Date
		if len(d) > 10 && d[4] == '-' && d[10] == 'T' {
			d = d[:10]
		}
		parts = append(parts, d)
	}
	s := strings.Join(parts, ", ")
	if p.Legacy != "" {
		if s == "" {
			return "legacy (" + p.Legacy + ")"
		}
		return "legacy (" + p.Legacy + "): " + s
	}
	return s
}

// Results is one scenario's results.json.
type Results struct {
	Schema        int                    `json:"schema"`
	Scenario      string                 `json:"scenario"`
	File          string                 `json:"file"`
	Description   string                 `json:"description"`
	Provenance    *Provenance            `json:"provenance"`
	RunsRequested int                    `json:"runs_requested"`
	Order         []string               `json:"order"`
	Variants      map[string]*Variant    `json:"variants"`
	Comparisons   map[string]*Comparison `json:"comparisons"`
	VsBest        map[string]*VsBest     `json:"vs_best_alternative"`

	path string
}

// Variant is every run of one variant and what they sum up to.
type Variant struct {
	Runs       []Run                     `json:"runs"`
	FailedRuns int                       `json:"failed_runs"`
	Goodput    stats.Estimate            `json:"goodput_mbit"`
	Metrics    map[string]stats.Estimate `json:"metrics,omitempty"`
}

// Comparison is the median of the paired ratios A_r / B_r of a metric over
// the rounds where both succeeded.
type Comparison struct {
	Metric string         `json:"metric"`
	Ratio  stats.Estimate `json:"ratio"`
	Pairs  [][2]float64   `json:"pairs"`
}

// VsBest is a variant against the best of its alternatives in each round.
type VsBest struct {
	Alternatives []string `json:"alternatives"`
	Metric       string   `json:"metric"`
	// Better is "lower" when a lower value of Metric is better (the best
	// alternative is then the lowest); "higher" or absent otherwise.
	Better string         `json:"better,omitempty"`
	Ratio  stats.Estimate `json:"ratio"`
}

// Run is one run of a variant: where it sits in the order of runs, whether
// it failed and why, and every field of its summary (Fields, as decoded).
type Run struct {
	Round   int
	Attempt int
	Dir     string
	Failed  bool
	Reason  string
	Variant string
	Fields  map[string]any
}

// UnmarshalJSON keeps every field of the run's summary.
func (r *Run) UnmarshalJSON(b []byte) error {
	var head struct {
		Round   int    `json:"round"`
		Attempt int    `json:"attempt"`
		Dir     string `json:"dir"`
		Failed  bool   `json:"failed"`
		Reason  string `json:"reason"`
		Variant string `json:"variant"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return err
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		return err
	}
	*r = Run{Round: head.Round, Attempt: head.Attempt, Dir: head.Dir, Failed: head.Failed, Reason: head.Reason, Variant: head.Variant, Fields: fields}
	return nil
}

// MarshalJSON writes the run's fields with its place and outcome.
func (r Run) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(r.Fields)+5)
	for k, v := range r.Fields {
		m[k] = v
	}
	m["round"], m["attempt"], m["dir"], m["failed"], m["reason"] = r.Round, r.Attempt, r.Dir, r.Failed, r.Reason
	if r.Variant != "" {
		m["variant"] = r.Variant
	}
	return json.Marshal(m)
}

// Load reads a results.json.
func Load(path string) (*Results, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse reads a results.json's contents; path names it in errors.
func Parse(path string, data []byte) (*Results, error) {
	var r Results
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r.path = path
	if r.Schema != Schema {
		return nil, fmt.Errorf("%s: schema %d, this build reads schema %d (results.json of `mpsteer lab run`)", path, r.Schema, Schema)
	}
	if len(r.Variants) == 0 {
		return nil, fmt.Errorf("%s: no variants", path)
	}
	for name, v := range r.Variants {
		if v == nil {
			return nil, fmt.Errorf("%s: variants.%s is null", path, name)
		}
		for i := range v.Runs {
			if v.Runs[i].Variant == "" {
				v.Runs[i].Variant = name
			}
			if v.Runs[i].Round < 1 {
				return nil, fmt.Errorf("%s: variants.%s.runs[%d]: round %d (rounds count from 1)", path, name, i, v.Runs[i].Round)
			}
		}
	}
	return &r, nil
}

// Path is the file the results were read from.
func (r *Results) Path() string { return r.path }

// VariantNames lists the variants in the file's order (Order), then any
// others by name.
func (r *Results) VariantNames() []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range r.Order {
		if _, ok := r.Variants[n]; ok && !seen[n] {
			out, seen[n] = append(out, n), true
		}
	}
	var rest []string
	for n := range r.Variants {
		if !seen[n] {
			rest = append(rest, n)
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

// LoadRun reads a lab run's results.json: schema 2, or the list of run
// summaries `lab run` wrote before it (taken as one round of every variant
// listed, without provenance, for pages over old run directories).
func LoadRun(path string) (*Results, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '[' {
		var sums []map[string]any
		if err := json.Unmarshal(data, &sums); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		r := &Results{Schema: Schema, Variants: map[string]*Variant{}, path: path}
		for _, s := range sums {
			name, _ := s["variant"].(string)
			if name == "" {
				return nil, fmt.Errorf("%s: a run summary without a variant", path)
			}
			if r.Variants[name] != nil {
				return nil, fmt.Errorf("%s: variant %s twice", path, name)
			}
			r.Scenario, _ = s["scenario"].(string)
			r.Order = append(r.Order, name)
			r.Variants[name] = &Variant{Runs: []Run{{Round: 1, Attempt: 1, Variant: name, Fields: s}}}
		}
		return r, nil
	}
	return Parse(path, data)
}
