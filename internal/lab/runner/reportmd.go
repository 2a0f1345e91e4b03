package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/results"
	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/stats"
)

// report.md: per variant the median and 95% interval of its figures over
// the runs that count, each variant against default MPTCP and against the
// best alternative side by side, the failed runs with their reasons, and
// the median run's own table; beside it compare.png (each variant's
// median run over time), fct_cdf.png (short flows) and, with more than
// one round, rounds.png (each run's goodput by round).

func writeReport(s *scenario.Scenario, res *Result) error {
	f := res.Results
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", s.Name)
	if s.Description != "" {
		fmt.Fprintf(&b, "%s\n\n", strings.TrimSpace(s.Description))
	}
	b.WriteString(Header(f))
	b.WriteString("\n## Each variant over its runs\n\n")
	fmt.Fprintf(&b, "Median [95%% interval] over the runs that count (n); %s. Goodput is application bytes over the whole transfer; retransmits are TCP segments summed over the sending side's subflows.\n\n", stats.Method)
	b.WriteString(EstimatesTable(f))
	b.WriteString("\n## Comparisons\n\n")
	b.WriteString(ComparisonTables(f))
	if failed := FailedRuns(f); failed != "" {
		b.WriteString("\n## Failed runs\n\nThey are kept on disk (failed.txt says why) and enter no figure above.\n\n")
		b.WriteString(failed)
	}
	if resets := KernelResets(f); resets != "" {
		b.WriteString("\n## Subflows the kernel reset\n\nRuns in which the kernel reset subflows because a data mapping did not match what it had (MPTcpExtDSSNotMatching: a kernel's doing, seen with no daemon running; its path manager does not join again, so the connection went on without that path). They count like the others; `mptcp_counters` in their `summary.json` has the kernel's counts.\n\n")
		b.WriteString(resets)
	}
	b.WriteString("\n## The median run of each variant\n\n")
	b.WriteString("One whole run per variant (the one whose " + f.Primary.Name + " is the median; its files are at `<variant>/`). Shares are bytes acknowledged per path.\n\n")
	b.WriteString(report.Table(res.Summaries))
	b.WriteString("\nPer run: `<variant>/run-<round>/` (`run-<round>b`: the run again after a failure) with `summary.json`, `timeseries.csv`, `subflows.csv`, `goodput.png`; every run and figure in `results.json`. Plots: `compare.png` (median runs), `share.png` (each path's share of the bytes over time, median runs of the multipath variants)")
	if f.RunsRequested > 1 {
		b.WriteString(", `rounds.png` (each run's goodput by round)")
	}
	b.WriteString(".\n")
	var lines, fcts, shares []report.Line
	for _, sum := range res.Summaries {
		ts, err := readSeries(filepath.Join(res.Out, sum.Variant, "timeseries.csv"))
		if err == nil {
			lines = append(lines, report.Line{Name: sum.Variant, X: ts[0], Y: report.Smooth(ts[1], report.SmoothSamples)})
		}
		if se, err := readPathSeries(filepath.Join(res.Out, sum.Variant, "timeseries.csv")); err == nil && len(se.Paths) > 1 && sum.Kind != "tcp" {
			sh := se.Shares(report.ShareSamples)
			for _, p := range se.Paths {
				y := make([]float64, len(sh[p]))
				for i, v := range sh[p] {
					y[i] = v * 100
				}
				shares = append(shares, report.Line{Name: sum.Variant + ": " + p, X: se.T, Y: y, Dash: len(shares)/len(se.Paths)%2 == 1})
			}
		}
		if sum.FCT != nil {
			if x, err := readFCTs(filepath.Join(res.Out, sum.Variant, "flows.csv")); err == nil {
				fcts = append(fcts, report.Line{Name: fmt.Sprintf("%s (median %.1f ms, p99 %.1f ms)", sum.Variant, sum.FCT.Median, sum.FCT.P99), X: x})
			}
		}
	}
	var errs []error
	if len(fcts) > 0 {
		errs = append(errs, report.PlotCDF(filepath.Join(res.Out, "fct_cdf.png"), s.Name+": flow completion times (median runs)", "flow completion time (ms)", fcts))
	}
	if len(lines) > 0 {
		errs = append(errs, report.PlotLines(filepath.Join(res.Out, "compare.png"), s.Name+": application goodput, 0.5 s average (median runs)", "goodput (Mbit/s)", clip(lines, s.Duration()), nil))
	}
	if len(shares) > 0 {
		errs = append(errs, report.PlotLines(filepath.Join(res.Out, "share.png"), s.Name+": each path's share of the bytes, 1 s window (median runs)", "share of the bytes (%)", clip(shares, s.Duration()), nil))
	}
	if f.RunsRequested > 1 {
		if rl := roundLines(f); len(rl) > 0 {
			errs = append(errs, report.PlotXY(filepath.Join(res.Out, "rounds.png"), s.Name+": goodput of each run", "round", "goodput (Mbit/s)", rl))
		}
	}
	errs = append(errs, os.WriteFile(res.Report, []byte(b.String()), 0o644))
	return errors.Join(errs...)
}

// KernelResets lists the runs whose summary counts kernel resets
// (report.Summary.KernelResets), one line each; "" when none did.
func KernelResets(f *results.File) string {
	var b strings.Builder
	for _, name := range f.Order {
		for _, r := range f.Variants[name].Runs {
			if r.Summary == nil {
				continue
			}
			if n := r.KernelResets(); n > 0 {
				fmt.Fprintf(&b, "- `%s`: %d subflow(s)\n", r.Dir, n)
			}
		}
	}
	return b.String()
}

// roundLines are each variant's goodput by round (the runs that count).
func roundLines(f *results.File) []report.Line {
	var out []report.Line
	for _, name := range f.Order {
		vals := results.RoundValues(f.Variants[name].Runs, "goodput_mbit")
		var rounds []int
		for r := range vals {
			rounds = append(rounds, r)
		}
		slices.Sort(rounds)
		l := report.Line{Name: name}
		for _, r := range rounds {
			l.X, l.Y = append(l.X, float64(r)), append(l.Y, vals[r])
		}
		if len(l.X) > 0 {
			out = append(out, l)
		}
	}
	return out
}

// Header says how the figures were made and where.
func Header(f *results.File) string {
	p := f.Provenance
	commit := p.Commit
	if commit == "" {
		commit = "unknown"
	}
	if p.Dirty {
		commit += " (with uncommitted changes)"
	}
	state := ""
	if !f.Complete {
		state = " **Incomplete: not every round ran.**"
	}
	return fmt.Sprintf("Scenario file: `%s`. %d round(s): in each, every variant ran once, in the order %s, each in a fresh world; %d run(s) failed and were run again.%s\n\nCommit %s, kernel %s, %d CPUs, %s to %s; `%s`.\n",
		f.ScenarioFile, f.RunsRequested, strings.Join(f.Order, ", "), f.FailedRuns, state, commit, p.Kernel, p.Host.CPUs, p.Date, p.Finished, p.Command)
}

// Est renders an estimate: "51.9 [50.8, 53.1]", or the value alone with
// "(1 run)" when there is no interval, or "–" without values.
func Est(e stats.Estimate, format string) string {
	switch {
	case e.N == 0:
		return "–"
	case e.N < 2:
		return fmt.Sprintf(format+" (1 run)", e.Median)
	}
	return fmt.Sprintf(format+" ["+format+", "+format+"]", e.Median, e.Low, e.High)
}

// EstimatesTable is one row per variant: goodput, retransmits, the
// primary metric and short flows' completion times, each a median and
// its interval, with the runs counted and failed.
func EstimatesTable(f *results.File) string {
	var b strings.Builder
	cols := []string{"goodput_mbit", "retransmits"}
	heads := []string{"goodput (Mbit/s)", "retransmits (segments)"}
	if m := f.Primary.Name; !slices.Contains(cols, m) {
		cols, heads = append(cols, m), append(heads, m+" ("+f.Primary.Better+" is better)")
	}
	hasFlows := false
	for _, v := range f.Variants {
		if _, ok := v.Metrics["fct_median_ms"]; ok {
			hasFlows = true
		}
	}
	if hasFlows {
		for _, m := range []string{"fct_median_ms", "fct_p99_ms"} {
			if !slices.Contains(cols, m) {
				cols, heads = append(cols, m), append(heads, strings.TrimSuffix(strings.ReplaceAll(m, "_", " "), " ms")+" (ms)")
			}
		}
	}
	b.WriteString("| variant | " + strings.Join(heads, " | ") + " | runs (n) | failed runs |\n|---|")
	b.WriteString(strings.Repeat("---:|", len(cols)+2) + "\n")
	for _, name := range f.Order {
		v := f.Variants[name]
		fmt.Fprintf(&b, "| %s |", name)
		for _, c := range cols {
			e := f.Estimate(name, c)
			format := "%.1f"
			if strings.HasPrefix(c, "share:") || strings.Contains(c, "_share") {
				format = "%.3f"
			}
			if c == "retransmits" {
				format = "%.0f"
			}
			fmt.Fprintf(&b, " %s |", Est(e, format))
		}
		fmt.Fprintf(&b, " %d | %d |\n", v.GoodputMbit.N, v.FailedRuns)
	}
	return b.String()
}

// Relative says what a ratio's interval shows: better, worse, or inside
// the noise (the interval holds 1).
func Relative(e stats.Estimate, better string) string {
	switch {
	case e.N == 0:
		return "no pairs"
	case e.N < 2:
		return "one pair: no interval"
	case e.Low > 1 && better == "higher", e.High < 1 && better == "lower":
		return "better"
	case e.High < 1 && better == "higher", e.Low > 1 && better == "lower":
		return "worse"
	case e.Low > 1 || e.High < 1:
		return "different"
	}
	return "inside the noise"
}

func ratioCell(e stats.Estimate, better string) string {
	if e.N == 0 {
		return "–"
	}
	return fmt.Sprintf("×%s, n %d: %s", Est(e, "%.3f"), e.N, Relative(e, better))
}

// ComparisonTables set each variant against default MPTCP and against
// the best alternative side by side, on goodput and, when the scenario
// declares another primary metric, on that too.
func ComparisonTables(f *results.File) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Ratios are per round (run r of the variant over run r of the other, rounds where both counted), their median [95%% interval]. The best alternative is, in each round, the best of %s.\n", strings.Join(f.Alternatives, ", "))
	metrics := []results.Metric{{Name: "goodput_mbit", Better: "higher"}}
	if f.Primary.Name != "goodput_mbit" {
		metrics = append(metrics, f.Primary)
	}
	for _, m := range metrics {
		suffix := ""
		if m.Name != "goodput_mbit" {
			suffix = ":" + m.Name
		}
		fmt.Fprintf(&b, "\n### %s (%s is better)\n\n| variant | against mptcp | against the best alternative |\n|---|---|---|\n", m.Name, m.Better)
		for _, name := range f.Order {
			if name == "mptcp" {
				continue
			}
			mp := "–"
			if c := f.Comparisons[name+"/mptcp"+suffix]; c != nil {
				mp = ratioCell(c.Ratio, c.Better)
			}
			ba := "– (an alternative itself)"
			if v := f.VsBestAlternative[name+suffix]; v != nil {
				ba = ratioCell(v.Ratio, v.Better)
				if len(v.Rounds) > 0 {
					ba += " (best: " + mostOften(v.Rounds) + ")"
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %s |\n", name, mp, ba)
		}
	}
	return b.String()
}

// mostOften names the alternatives that were best, with how often.
func mostOften(rounds []results.BestRound) string {
	count := map[string]int{}
	var names []string
	for _, r := range rounds {
		if count[r.Best] == 0 {
			names = append(names, r.Best)
		}
		count[r.Best]++
	}
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s ×%d", n, count[n]))
	}
	return strings.Join(parts, ", ")
}

// FailedRuns lists the failed runs with their reasons ("" when none).
func FailedRuns(f *results.File) string {
	var b strings.Builder
	for _, name := range f.Order {
		for _, r := range f.Variants[name].Runs {
			if r.Failed {
				fmt.Fprintf(&b, "- %s, round %d, attempt %d (`%s`): %s\n", name, r.Round, r.Attempt, r.Dir, r.Reason)
			}
		}
	}
	return b.String()
}
