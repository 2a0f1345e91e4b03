package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/results"
	"mpsteer/internal/lab/scenario"
)

// A tcp variant with `path: best` (tcpbest.go in the scenario package):
// each run measures TCP over every candidate path in turn, each in a
// fresh world and its own directory (over-<path>), and the run's value is
// the best of them by the scenario's primary metric. The run's directory
// holds the best one's files and a summary that says which path it was
// (best_path) and what each gave (best_of).

// runBestPath runs v over each of its candidate paths into dir/over-<path>.
func runBestPath(ctx context.Context, s *scenario.Scenario, v *scenario.Variant, o Options, dir string) (*report.Summary, error) {
	var sums []*report.Summary
	var errs []string
	for i, p := range v.BestOf {
		one := *v
		one.Paths, one.BestOf = []string{p}, nil
		fmt.Fprintf(o.Progress, "      %s: over %s (%d of %d paths)\n", v.Name, p, i+1, len(v.BestOf))
		sum, err := runOnce(ctx, s, &one, o, filepath.Join(dir, "over-"+p))
		if err != nil {
			return nil, fmt.Errorf("over %s: %w", p, err)
		}
		if f := failureOf(sum); f != "" {
			errs = append(errs, fmt.Sprintf("over %s: %s", p, f))
		}
		sums = append(sums, sum)
	}
	best, by := pickBest(sums, v.BestOf, s.Primary)
	sum := *sums[best]
	sum.BestPath, sum.BestOf = v.BestOf[best], by
	// Any candidate's failure fails the run: the best of fewer paths
	// could flatter whatever is compared with it.
	sum.Errors = errs
	if err := copyFiles(filepath.Join(dir, "over-"+sum.BestPath), dir); err != nil {
		return nil, err
	}
	return &sum, report.WriteJSON(filepath.Join(dir, "summary.json"), &sum)
}

// pickBest is the index of the best summary by the primary metric (by
// goodput when no candidate has it; the first of equals), and the metric
// over each candidate path.
func pickBest(sums []*report.Summary, paths []string, p scenario.Primary) (int, map[string]float64) {
	metric := p.Metric
	higher := p.Higher
	have := false
	for _, s := range sums {
		if _, ok := (results.Run{Summary: s}).Value(metric); ok {
			have = true
		}
	}
	if !have {
		metric, higher = scenario.DefaultPrimary.Metric, scenario.DefaultPrimary.Higher
	}
	by := map[string]float64{}
	best, bestV := -1, 0.0
	for i, s := range sums {
		v, ok := results.Run{Summary: s}.Value(metric)
		if !ok {
			continue
		}
		by[paths[i]] = v
		if best < 0 || (higher && v > bestV) || (!higher && v < bestV) {
			best, bestV = i, v
		}
	}
	return max(best, 0), by
}

// copyFiles copies the regular files of from into to (not directories).
func copyFiles(from, to string) error {
	ents, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
