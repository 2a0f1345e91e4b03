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
)

func init() { extraLabCommands = append(extraLabCommands, labSweepCmd) }

// sweepPoint is one variant's value at its x.
type sweepPoint struct {
	Scenario string  `json:"scenario"`
	Series   string  `json:"series"`
	Variant  string  `json:"variant"`
	X        float64 `json:"x"`
	Y        float64 `json:"goodput_mbit"`
}

// LabSweepResult is `lab sweep --json`: the files written and the points
// plotted.
type LabSweepResult struct {
	Plot   string       `json:"plot"`
	Data   string       `json:"data"`
	Points []sweepPoint `json:"points"`
}

func labSweepCmd() *cobra.Command {
	var pattern, scenPattern, out, title, xlabel, defSeries string
	var asJSON bool
	c := &cobra.Command{
		Use:   "sweep DIR... --variants REGEX --out FILE.png",
		Short: "Plot goodput against a number in the variants' names (e.g. subflows per pair), one line per scenario and series; also writes FILE.csv",
		Args:  cobra.MinimumNArgs(1),
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
			rows, err := readRuns(args)
			if err != nil {
				return err
			}
			var pts []sweepPoint
			for _, sums := range rows {
				for _, s := range sums {
					m := re.FindStringSubmatch(s.Variant)
					if m == nil {
						continue
					}
					xs := ""
					if scenRE != nil {
						sm := scenRE.FindStringSubmatch(s.Scenario)
						if sm == nil {
							continue
						}
						xs = sm[scenRE.SubexpIndex("x")]
					} else {
						xs = m[re.SubexpIndex("x")]
					}
					x, err := strconv.ParseFloat(xs, 64)
					if err != nil {
						return fmt.Errorf("%s %s: %q is not a number", s.Scenario, s.Variant, xs)
					}
					series := ""
					if i := re.SubexpIndex("series"); i >= 0 {
						series = m[i]
					} else if scenRE != nil {
						series = s.Variant
					}
					if series == "" {
						series = defSeries
					}
					pts = append(pts, sweepPoint{Scenario: s.Scenario, Series: series, Variant: s.Variant, X: x, Y: s.GoodputMbit})
				}
			}
			if len(pts) == 0 {
				return fmt.Errorf("no variant matches %q", pattern)
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
					l.X, l.Y = append(l.X, p.X), append(l.Y, p.Y)
				}
				lines = append(lines, l)
			}
			if err := report.PlotXY(out, title, xlabel, "goodput (Mbit/s)", lines); err != nil {
				return err
			}
			csvFile := strings.TrimSuffix(out, filepath.Ext(out)) + ".csv"
			f, err := os.Create(csvFile)
			if err != nil {
				return err
			}
			w := csv.NewWriter(f)
			w.Write([]string{"scenario", "series", "variant", "x", "goodput_mbit"})
			for _, p := range pts {
				w.Write([]string{p.Scenario, p.Series, p.Variant, strconv.FormatFloat(p.X, 'f', -1, 64), strconv.FormatFloat(p.Y, 'f', 3, 64)})
			}
			w.Flush()
			if err := w.Error(); err != nil {
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			if asJSON {
				return printJSON(LabSweepResult{Plot: out, Data: csvFile, Points: pts})
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
	c.Flags().BoolVar(&asJSON, "json", false, "print the files written and the points plotted (scenario, series, variant, x, goodput_mbit) as JSON")
	c.MarkFlagRequired("variants")
	return c
}
