package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"mpsteer/internal/bench"
	"mpsteer/internal/lab/check"
)

// benchmark is one part of `mpsteer bench`; it returns JSON-able results.
type benchmark struct {
	name  string
	about string
	run   func(ctx context.Context) (any, error)
}

var benchmarks = []benchmark{
	{"lab-check", "link emulator accuracy (mpsteer lab check)", func(ctx context.Context) (any, error) {
		return check.Run(ctx, check.Options{Progress: os.Stderr})
	}},
	{"observe", "cost of one inet_diag sample at 10, 1000 and 10000 subflows", func(ctx context.Context) (any, error) {
		return bench.Observe(ctx, []int{10, 1000, 10000}, progress)
	}},
	{"reaction", "daemon reaction: subflow established → backup flag applied", func(ctx context.Context) (any, error) {
		bin, err := os.Executable()
		if err != nil {
			return nil, err
		}
		return bench.Reaction(ctx, bin, 200, progress)
	}},
}

func progress(s string) { fmt.Fprintln(os.Stderr, "bench:", s) }

func init() { extraCommands = append(extraCommands, benchCmd) }

func benchCmd() *cobra.Command {
	var out, only string
	c := &cobra.Command{
		Use:   "bench",
		Short: "Run the benchmarks and write their results as JSON",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(out, 0o755); err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			all := map[string]any{"started": time.Now().UTC().Format(time.RFC3339)}
			for _, b := range benchmarks {
				if only != "" && !strings.Contains(","+only+",", ","+b.name+",") {
					continue
				}
				fmt.Fprintf(os.Stderr, "bench: %s — %s\n", b.name, b.about)
				res, err := b.run(ctx)
				if err != nil {
					return fmt.Errorf("%s: %w", b.name, err)
				}
				all[b.name] = res
				if err := writeJSONFile(filepath.Join(out, b.name+".json"), res); err != nil {
					return err
				}
			}
			file := filepath.Join(out, "bench.json")
			if err := writeJSONFile(file, all); err != nil {
				return err
			}
			fmt.Println("benchmark results:", file)
			return nil
		},
	}
	var names []string
	for _, b := range benchmarks {
		names = append(names, b.name)
	}
	c.Flags().StringVar(&out, "out", "results/bench", "directory for the JSON results")
	c.Flags().StringVar(&only, "only", "", "comma-separated subset: "+strings.Join(names, ", "))
	return c
}

func writeJSONFile(file string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(data, '\n'), 0o644)
}
