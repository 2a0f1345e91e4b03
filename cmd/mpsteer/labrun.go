package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/runner"
	"mpsteer/internal/lab/scenario"
)

func init() { extraLabCommands = append(extraLabCommands, labRunCmd) }

func labRunCmd() *cobra.Command {
	var out, name, variants string
	var asJSON bool
	c := &cobra.Command{
		Use:   "run FILE",
		Short: "Run every variant of a scenario in a fresh world and write results, plots and a report",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := scenario.Load(args[0])
			if err != nil {
				return err
			}
			o := runner.Options{Out: out, Name: name, Progress: os.Stderr}
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
			fmt.Println(report.Table(res.Summaries))
			fmt.Printf("report: %s\nplots:  %s/compare.png and %s/<variant>/goodput.png\n", res.Report, res.Out, res.Out)
			return nil
		},
	}
	c.Flags().StringVar(&out, "out", "", "output directory (default results/<scenario>)")
	c.Flags().StringVar(&name, "name", "", "lab name while it runs (default run-<pid>)")
	c.Flags().StringVar(&variants, "variants", "", "comma-separated variants to run (default: all)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the results as JSON (output directory, report, every variant's figures)")
	return c
}
