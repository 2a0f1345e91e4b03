package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"mpsteer/internal/lab/runner"
	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/provenance"
)

func init() { extraLabCommands = append(extraLabCommands, labRunCmd) }

func labRunCmd() *cobra.Command {
	var out, name, variants string
	var asJSON bool
	var runs int
	c := &cobra.Command{
		Use:   "run FILE [--runs N]",
		Short: "Run every variant of a scenario N times, interleaved, each run in a fresh world, and write results.json (medians and 95% intervals), plots and a report",
		Long: `Runs the scenario's variants in rounds: in each round every variant once, in
the scenario's order, each in a fresh world. A run whose traffic did not
finish, or whose traffic generator or daemon failed, is kept on disk with
its reason, run once more in the same round, and enters no figure.
OUT/results.json holds every run and, per variant and per compared pair
(every variant against mptcp, tcp-best, tcp and the scenario's compare
list, and against the best of them round by round), the median and its 95%
interval; OUT/report.md says the same in tables. OUT/<variant>/run-<round>/
holds each run's files; OUT/<variant>/ those of its median run.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if runs < 1 {
				return fmt.Errorf("--runs %d: at least 1", runs)
			}
			s, err := scenario.Load(args[0])
			if err != nil {
				return err
			}
			prov := provenance.Collect(versionInfo().Version, os.Args)
			o := runner.Options{Out: out, Name: name, Progress: os.Stderr, Runs: runs, Provenance: &prov}
			if variants != "" {
				o.Variants = strings.Split(variants, ",")
			}
			ctx, cancel := signalContext()
			defer cancel()
			res, err := runner.Run(ctx, s, o)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(labRunResult(res))
			}
			fmt.Println(runner.EstimatesTable(res.Results))
			fmt.Println(runner.ComparisonTables(res.Results))
			fmt.Printf("results: %s/results.json\nreport:  %s\nplots:   %s/compare.png and %s/<variant>/goodput.png\n", res.Out, res.Report, res.Out, res.Out)
			return nil
		},
	}
	c.Flags().IntVar(&runs, "runs", 1, "rounds: how many times each variant runs (interleaved, each run in a fresh world)")
	c.Flags().StringVar(&out, "out", "", "output directory (default results/<scenario>)")
	c.Flags().StringVar(&name, "name", "", "lab name while it runs (default run-<pid>)")
	c.Flags().StringVar(&variants, "variants", "", "comma-separated variants to run (default: all)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the results as JSON (output directory, report, every variant's figures)")
	return c
}
