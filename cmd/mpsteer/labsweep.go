package main

import (
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/results"
	"mpsteer/internal/stats"
)

func init() { extraLabCommands = append(extraLabCommands, labSweepCmd) }

// sweepPoint is one variant's value at its x: its median over the runs
// (or, with --over, the median of its paired ratios to the baseline as a
// gain in %), with the 95% interval when there is one.
type sweepPoint struct {
	Scenario string         `json:"scenario"`
	Series   string         `json:"series"`
	Variant  string         `json:"variant"`
	X        float64        `json:"x"`
	Est      stats.Estimate `json:"value"`
}

// LabSweepResult is `lab sweep --json`: the files written, the figure
// plotted and the points.
type LabSweepResult struct {
	Plot   string       `json:"plot"`
	Data   string       `json:"data"`
	Value  string       `json:"value"`
	Points []sweepPoint `json:"points"`
}

func labSweepCmd() *cobra.Command {
	var pattern, scenPattern, out, title, xlabel, defSeries, over, metric string
	var logX, asJSON bool
	c := &cobra.Command{
		Use:   "sweep DIR... --variants REGEX --out FILE.png",
		Short: "Plot goodput (or another figure, or the gain over a baseline) against a number in the variants' or scenarios' names (e.g. subflows per pair, VM pairs), one line per scenario and series; also writes FILE.csv",
		Long: `Plots each matching variant's median over its runs, with its 95% interval
as an error bar, against a number in its name (--variants with a group x)
or in its scenario's name (--scenarios with a group x). With --over B it
plots instead each variant's gain over B: the median of the paired ratios
variant/B over the rounds, as a change in % (B itself is left out).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			re, err := regexp.Compile(pattern)
			if err != nil {
				return fmt.Errorf("--variants: %w", err)
			}
			// x from the scenario's name (one scenario per x, variants
			// with fixed names: the series) or from the variant's.
			var scenRE *regexp.Regexp
			if scenPattern != "" {
				if scenRE, err = regexp.Compile(scenPattern); err != nil {
					return fmt.Errorf("--scenarios: %w", err)
				}
				if scenRE.SubexpIndex("x") < 0 {
					return fmt.Errorf("--scenarios %q needs a group named x that captures the number, e.g. ^tenants-bg(?P<x>[0-9]+)$", scenPattern)
				}
			} else if re.SubexpIndex("x") < 0 {
				return fmt.Errorf("--variants %q needs a group named x that captures the number, e.g. ^fullmesh-(?P<x>[0-9]+)(?P<series>-ecmp)?$", pattern)
			}
			var pts []sweepPoint
			for _, dir := range args {
				f, err := results.Read(dir)
				if err != nil {
					if os.IsNotExist(err) {
						return fmt.Errorf("%s: %w (is it a lab run output directory?)", dir, err)
					}
					return err
				}
				if over != "" && f.Variants[over] == nil {
					return fmt.Errorf("%s: --over %s: the run has no variant %s (variants: %s)", dir, over, over, strings.Join(f.Order, ", "))
				}
				for _, v := range f.Order {
					m := re.FindStringSubmatch(v)
					if m == nil || (over != "" && v == over) {
						continue
					}
					xs := ""
					if scenRE != nil {
						sm := scenRE.FindStringSubmatch(f.Scenario)
						if sm == nil {
							continue
						}
						xs = sm[scenRE.SubexpIndex("x")]
					} else {
						xs = m[re.SubexpIndex("x")]
					}
					x, err := strconv.ParseFloat(xs, 64)
					if err != nil {
						return fmt.Errorf("%s %s: %q is not a number", f.Scenario, v, xs)
					}
					series := ""
					if i := re.SubexpIndex("series"); i >= 0 {
						series = m[i]
					} else if scenRE != nil {
						series = v
					}
					if series == "" {
						series = defSeries
					}
					est := f.Estimate(v, metric)
					if over != "" {
						est = gain(f.Paired(v, over, metric).Ratio)
					}
					if est.N == 0 {
						continue // no run of it counted
					}
					pts = append(pts, sweepPoint{Scenario: f.Scenario, Series: series, Variant: v, X: x, Est: est})
				}
			}
			if len(pts) == 0 {
				return fmt.Errorf("no variant matches %q with a %s", pattern, metric)
			}
			byLine := map[string][]sweepPoint{}
			var names []string
			for _, p := range pts {
				scen := p.Scenario
				if scenRE != nil {
					scen = "" // one line per series across the scenarios
				}
				name := strings.TrimSpace(scen + " " + strings.Trim(p.Series, "-_"))
				if _, ok := byLine[name]; !ok {
					names = append(names, name)
				}
				byLine[name] = append(byLine[name], p)
			}
			sort.Strings(names)
			var lines []report.Line
			for _, n := range names {
				ps := byLine[n]
				sort.Slice(ps, func(i, j int) bool { return ps[i].X < ps[j].X })
				l := report.Line{Name: n, Dash: defSeries == "" && strings.Contains(n, " ") || defSeries != "" && !strings.HasSuffix(n, defSeries)}
				for _, p := range ps {
					l.X, l.Y = append(l.X, p.X), append(l.Y, p.Est.Median)
					lo, hi := p.Est.Low, p.Est.High
					if p.Est.NoInterval || p.Est.N < 2 {
						lo, hi = p.Est.Median, p.Est.Median // no bar
					}
					l.Low, l.High = append(l.Low, lo), append(l.High, hi)
				}
				lines = append(lines, l)
			}
			ylabel := metric
			if metric == "goodput_mbit" {
				ylabel = "goodput (Mbit/s)"
			}
			if over != "" {
				what := metric
				if metric == "goodput_mbit" {
					what = "goodput"
				}
				ylabel = fmt.Sprintf("%s against %s (%%)", what, over)
			}
			if err := report.PlotXYWith(out, title, xlabel, ylabel, lines, report.XYOptions{LogX: logX, TicksAtData: logX}); err != nil {
				return err
			}
			csvFile := strings.TrimSuffix(out, filepath.Ext(out)) + ".csv"
			f, err := os.Create(csvFile)
			if err != nil {
				return err
			}
			w := csv.NewWriter(f)
			value := metric
			if over != "" {
				value = metric + "_gain_over_" + over + "_pct"
			}
			w.Write([]string{"scenario", "series", "variant", "x", value, "ci95_low", "ci95_high", "n"})
			num := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
			for _, p := range pts {
				lo, hi := "", ""
				if !p.Est.NoInterval && p.Est.N >= 2 {
					lo, hi = num(p.Est.Low), num(p.Est.High)
				}
				w.Write([]string{p.Scenario, p.Series, p.Variant, strconv.FormatFloat(p.X, 'f', -1, 64), num(p.Est.Median), lo, hi, strconv.Itoa(p.Est.N)})
			}
			w.Flush()
			if err := w.Error(); err != nil {
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			if asJSON {
				return printJSON(LabSweepResult{Plot: out, Data: csvFile, Value: value, Points: pts})
			}
			fmt.Printf("plot: %s\ndata: %s\n", out, csvFile)
			return nil
		},
	}
	c.Flags().StringVar(&pattern, "variants", "", "regular expression over variant names, with a group x (the number) and optionally a group series")
	c.Flags().StringVar(&scenPattern, "scenarios", "", "regular expression over scenario names with a group x: the number comes from the scenario's name instead, and each variant (or its series group) is a line")
	c.Flags().StringVar(&out, "out", "sweep.png", "PNG file to write (a CSV beside it)")
	c.Flags().StringVar(&title, "title", "goodput", "plot title")
	c.Flags().StringVar(&xlabel, "xlabel", "x", "x axis label")
	c.Flags().StringVar(&defSeries, "default-series", "", "series name of the variants whose series group is empty")
	c.Flags().StringVar(&over, "over", "", "plot each variant's gain over this variant (the median of the paired ratios, as a change in %) instead of its value")
	c.Flags().BoolVar(&logX, "log-x", false, "a logarithmic x axis, labelled at the points' x values (for 1, 2, 4, 8, 16 …)")
	c.Flags().StringVar(&metric, "metric", "goodput_mbit", "the figure plotted (goodput_mbit, or another a run's summary has: retransmits, fct_median_ms, a metrics key, …)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the files written and the points plotted (scenario, series, variant, x, value: median with its 95% interval and n) as JSON")
	c.MarkFlagRequired("variants")
	return c
}

// gain turns a ratio's estimate into a change in %: ×1.23 → +23%.
func gain(r stats.Estimate) stats.Estimate {
	pct := func(v float64) float64 { return (v - 1) * 100 }
	return stats.Estimate{Median: pct(r.Median), Low: pct(r.Low), High: pct(r.High), N: r.N, NoInterval: r.NoInterval}
}
