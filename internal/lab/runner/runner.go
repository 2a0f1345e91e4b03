// Package runner runs the variants of a scenario: N rounds, in each every
// variant once in the scenario's order, each run in a fresh world. Every
// run writes its files (timeseries.csv, subflows.csv, summary.json,
// plots) to <out>/<variant>/run-<round>; the whole writes results.json
// (every run, and per variant and compared pair the median with its 95%
// interval: internal/lab/results) and report.md. The median run of each
// variant is also copied to <out>/<variant>/, where a single run's files
// always were.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/results"
	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/lab/world"
	"mpsteer/internal/provenance"
)

// Options tune a run.
type Options struct {
	Out      string   // output directory
	Variants []string // run only these (default: all)
	Binary   string   // mpsteer executable for the emulator and daemons
	Name     string   // lab name (default: run-<pid>)
	Progress io.Writer
	Interval time.Duration // sampling interval (default 100 ms)
	// Runs is how many rounds (default 1).
	Runs int
	// Provenance is where the results come from; nil: collected here
	// (without the binary's version string).
	Provenance *provenance.Provenance
	// round is the round a run belongs to (set per run: the world draws
	// its outages' jitter from it).
	round int
}

// Result lists what a run produced.
type Result struct {
	Out string
	// Summaries are each variant's median run (its files are at
	// <out>/<variant>/).
	Summaries []*report.Summary
	Results   *results.File
	Report    string
}

// Run runs the selected variants, o.Runs rounds of them.
func Run(ctx context.Context, s *scenario.Scenario, o Options) (*Result, error) {
	if o.Interval <= 0 {
		o.Interval = 100 * time.Millisecond
	}
	if o.Name == "" {
		o.Name = fmt.Sprintf("run-%d", os.Getpid())
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Out == "" {
		o.Out = filepath.Join("results", s.Name)
	}
	o.Runs = max(o.Runs, 1)
	var variants []*scenario.Variant
	for _, v := range s.Variants {
		if len(o.Variants) == 0 || contains(o.Variants, v.Name) {
			variants = append(variants, v)
		}
	}
	for _, want := range o.Variants {
		if s.Variant(want) == nil {
			var names []string
			for _, v := range s.Variants {
				names = append(names, v.Name)
			}
			return nil, fmt.Errorf("scenario %s has no variant %q (variants: %s)", s.Name, want, strings.Join(names, ", "))
		}
	}
	if len(s.Traffic) == 0 {
		return nil, fmt.Errorf("%s: the scenario has no traffic to run", s.File)
	}
	if err := world.Preflight(); err != nil {
		return nil, err
	}
	prov := provenance.Collect("", os.Args)
	if o.Provenance != nil {
		prov = *o.Provenance
	}
	in := results.Input{Scenario: s.Name, File: s.File, Description: strings.TrimSpace(s.Description), Provenance: prov,
		RunsRequested: o.Runs, Kinds: map[string]string{}, Primary: s.Primary, Compare: s.Compare}
	byName := map[string]*scenario.Variant{}
	for _, v := range variants {
		in.Order = append(in.Order, v.Name)
		in.Kinds[v.Name] = string(v.Kind)
		byName[v.Name] = v
		// A variant's directory holds this run's files only: runs of an
		// earlier, longer run must not pass for this one's.
		if err := os.RemoveAll(report.VariantDir(o.Out, v.Name)); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	writeResults := func(runs map[string][]results.Run, complete bool) (*results.File, error) {
		in.Runs, in.Complete = runs, complete
		f := results.Build(in)
		return f, report.WriteJSON(filepath.Join(o.Out, results.Name), f)
	}
	pr := newProgress(o.Progress, s.Name, o.Runs, in.Order)
	attempt := func(ctx context.Context, round, try int, name string) (results.Run, error) {
		return runAttempt(ctx, s, byName[name], o, pr, round, try)
	}
	// results.json is rewritten after every run, so that a long run shows
	// what it has so far (complete: false until the end).
	runs, err := runRounds(ctx, o.Runs, in.Order, attempt, func(runs map[string][]results.Run) { writeResults(runs, false) })
	in.Provenance.Finish()
	f, werr := writeResults(runs, err == nil)
	res := &Result{Out: o.Out, Results: f, Report: filepath.Join(o.Out, "report.md")}
	if ctx.Err() != nil {
		return res, errors.Join(ctx.Err(), werr)
	}
	for name, v := range f.Variants {
		if v.MedianRun != "" {
			werr = errors.Join(werr, copyFiles(filepath.Join(o.Out, v.MedianRun), report.VariantDir(o.Out, name)))
		}
	}
	res.Summaries = f.Representative()
	werr = errors.Join(werr, writeReport(s, res))
	if err != nil {
		return res, errors.Join(err, werr)
	}
	return res, werr
}

// runAttempt runs one attempt of a variant into its directory and judges
// it: a run that did not get to its traffic, or whose summary has errors,
// is failed, with the reason (also in failed.txt beside its files).
func runAttempt(ctx context.Context, s *scenario.Scenario, v *scenario.Variant, o Options, pr *progress, round, try int) (results.Run, error) {
	rel := runDir(v.Name, round, try)
	dir := filepath.Join(o.Out, rel)
	pr.begin(round, try, v.Name, describe(s, v))
	start := time.Now()
	var sum *report.Summary
	var err error
	o.round = round
	if len(v.BestOf) > 0 {
		sum, err = runBestPath(ctx, s, v, o, dir)
	} else {
		sum, err = runOnce(ctx, s, v, o, dir)
	}
	run := results.Run{Round: round, Attempt: try, Dir: filepath.ToSlash(rel)}
	var cerr configError
	switch {
	case ctx.Err() != nil:
		return run, ctx.Err()
	case errors.As(err, &cerr):
		return run, fmt.Errorf("variant %s: %w", v.Name, err)
	case err != nil:
		run.Failed, run.Reason = true, "setup: "+err.Error()
	default:
		g := sum.GoodputMbit
		run.Summary, run.GoodputMbit = sum, &g
		if why := failureOf(sum); why != "" {
			run.Failed, run.Reason = true, why
		}
	}
	if run.Failed {
		if err := os.MkdirAll(dir, 0o755); err == nil {
			os.WriteFile(filepath.Join(dir, "failed.txt"), []byte(run.Reason+"\n"), 0o644)
		}
	}
	pr.end(run, v.Name, time.Since(start))
	return run, nil
}

// describe is what a variant runs over, for progress lines.
func describe(s *scenario.Scenario, v *scenario.Variant) string {
	over := strings.Join(v.Paths, ", ")
	switch {
	case s.Tenants != nil && len(s.Tenants.Pairs) > 1:
		over = fmt.Sprintf("%d VM pairs (%s to %s, …)", len(s.Tenants.Pairs), s.Tenants.Client, s.Tenants.Server)
	case s.Tenants != nil:
		over = fmt.Sprintf("VM %s to VM %s", s.Tenants.Client, s.Tenants.Server)
	case len(v.BestOf) > 0:
		over = "the best of " + strings.Join(v.BestOf, ", ")
	}
	return fmt.Sprintf("%s over %s", v.Kind, over)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
