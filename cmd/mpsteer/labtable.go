package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/results"
)

func init() { extraLabCommands = append(extraLabCommands, labTableCmd) }

func labTableCmd() *cobra.Command {
	var metric string
	var asJSON bool
	c := &cobra.Command{
		Use:   "table DIR... [--json]",
		Short: "Print one Markdown table of a value (default goodput_mbit; the median over the runs) per scenario and variant from lab run outputs (--json: every variant's figures, compact)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rows, err := readRuns(args)
			if err != nil {
				return err
			}
			var variants []string
			seen := map[string]bool{}
			for _, sums := range rows {
				for _, s := range sums {
					if !seen[s.Variant] {
						seen[s.Variant] = true
						variants = append(variants, s.Variant)
					}
				}
			}
			if asJSON {
				var out [][]report.Compact
				for _, sums := range rows {
					var row []report.Compact
					for _, s := range sums {
						row = append(row, s.Compacted())
					}
					out = append(out, row)
				}
				return printJSON(out)
			}
			fmt.Printf("Values: %s\n\n", metric)
			fmt.Print(report.CrossTable(rows, variants, metric))
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print every scenario's variants as compact JSON (the figures docs/results.md quotes)")
	c.Flags().StringVar(&metric, "metric", "goodput_mbit", "goodput_mbit or a key of a summary's metrics (e.g. goodput_after_last_event_mbit)")
	return c
}

// readRuns loads the results.json of lab run output directories: per
// variant its median run's summary, with goodput and the metrics replaced
// by their medians over all the runs that count (one run: its own).
func readRuns(dirs []string) ([][]*report.Summary, error) {
	var rows [][]*report.Summary
	for _, dir := range dirs {
		f, err := results.Read(dir)
		if err != nil {
			if os.IsNotExist(err) {
				return nil, fmt.Errorf("%s: %w (is it a lab run output directory?)", dir, err)
			}
			return nil, err
		}
		var sums []*report.Summary
		for _, rep := range f.Representative() {
			s := *rep
			s.GoodputMbit = f.Estimate(s.Variant, "goodput_mbit").Median
			s.Metrics = map[string]float64{}
			for k := range rep.Metrics {
				if e := f.Estimate(s.Variant, k); e.N > 0 {
					s.Metrics[k] = e.Median
				}
			}
			if rep.CompetitorGoodputMbit != nil {
				v := f.Estimate(s.Variant, "competitor_goodput_mbit").Median
				s.CompetitorGoodputMbit = &v
			}
			sums = append(sums, &s)
		}
		rows = append(rows, sums)
	}
	return rows, nil
}
