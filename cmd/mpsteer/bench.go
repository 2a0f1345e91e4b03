package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"mpsteer/internal/bench"
	"mpsteer/internal/lab/check"
	"mpsteer/internal/provenance"
)

// benchmark is one part of `mpsteer bench`; it returns JSON-able results.
type benchmark struct {
	name  string
	about string
	run   func(ctx context.Context, out string) (any, error)
}

var benchmarks = []benchmark{
	{"lab-check", "link emulator accuracy (mpsteer lab check)", func(ctx context.Context, _ string) (any, error) {
		return check.Run(ctx, check.Options{Progress: os.Stderr})
	}},
	{"observe", "cost of one sample of every subflow, inet_diag and the BPF iterator side by side, at 10, 1000 and 10000 subflows", func(ctx context.Context, _ string) (any, error) {
		return bench.Observe(ctx, []int{10, 1000, 10000}, progress)
	}},
	{"reaction", "daemon reaction: subflow established → backup flag applied", withSelf(func(ctx context.Context, bin, _ string) (any, error) {
		return bench.Reaction(ctx, bin, 200, progress)
	})},
	{"datapath", "chains: ns per packet per selector/actor, goodput and CPU on a transfer, chain add → first packet", withSelf(func(ctx context.Context, bin, _ string) (any, error) {
		return bench.Datapath(ctx, bin, progress)
	})},
	{"overhead", "chains' time as a share of transmission time, 1 to 10 000 concurrent MPTCP flows, by chain length and selection granularity (eMPTCP Figs. 5b and 5c; ~10 min; plots beside the JSON)", withSelf(func(ctx context.Context, bin, out string) (any, error) {
		return bench.Overhead(ctx, bench.OverheadOptions{Out: out, Binary: bin}, progress)
	})},
	twoPathBench("twopath", "dynthresh against default MPTCP in two-path cases where both paths help (lab runs, ~5 min)", bench.TwoPathCases),
	twoPathBench("twopath-cubic", "twopath with both hosts on CUBIC (lab runs, ~5 min)", bench.WithCC(bench.TwoPathCases, "cubic")),
	twoPathBench("twopath-short", "dynthresh against default MPTCP on 8 and 16 MiB transfers over two paths at 10/10, 15/5 and 5/15 Mbit/s, one-way delays 0 and 25 ms (24 cases, lab runs, ~8 min)", bench.ShortTwoPathCases()),
	twoPathBench("twopath-short-10ms", "the same with a path at 10 ms one way: delays 0/10, 10/0, 10/10, 10/25 and 25/10 ms (30 cases, lab runs, ~10 min)", bench.MidTwoPathCases()),
	twoPathBench("twopath-short-cubic", "twopath-short with both hosts on CUBIC (24 cases, lab runs, ~8 min)", bench.WithCC(bench.ShortTwoPathCases(), "cubic")),
	{"rate", "each way of holding a subflow to a rate (pacing, rwnd, cc) on one upload: accuracy, settling after a cut, queueing, lift (lab runs, ~1 min)", withSelf(func(ctx context.Context, bin, out string) (any, error) {
		return bench.Rate(ctx, bin, filepath.Join(out, "rate"), progress)
	})},
}

func progress(s string) { fmt.Fprintln(os.Stderr, "bench:", s) }

// twoPathBench is a bench of two-path cases (dynthresh against default
// MPTCP), its runs under OUT/name.
func twoPathBench(name, about string, cases []bench.TwoPathCase) benchmark {
	return benchmark{name, about, withSelf(func(ctx context.Context, bin, out string) (any, error) {
		return bench.TwoPath(ctx, bin, filepath.Join(out, name), "mpsteer bench "+name, cases, progress)
	})}
}

// withSelf is a benchmark run that starts this binary again (the daemon,
// the lab's emulator): it is handed the path of the running executable.
func withSelf(run func(ctx context.Context, bin, out string) (any, error)) func(ctx context.Context, out string) (any, error) {
	return func(ctx context.Context, out string) (any, error) {
		bin, err := os.Executable()
		if err != nil {
			return nil, err
		}
		return run(ctx, bin, out)
	}
}

func init() { extraCommands = append(extraCommands, benchCmd, benchSinkCmd) }

// benchSinkCmd is the server side of `bench overhead`, a process of its
// own (hidden: the benchmark starts it).
func benchSinkCmd() *cobra.Command {
	var ns string
	var port int
	c := &cobra.Command{
		Use:    "bench-sink --netns NS --port P",
		Short:  "Accept MPTCP connections in a namespace and read them until stdin closes (bench overhead's server)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return bench.Sink(ns, port, os.Stdin, os.Stdout)
		},
	}
	c.Flags().StringVar(&ns, "netns", "", "network namespace to listen in")
	c.Flags().IntVar(&port, "port", 5201, "TCP port")
	c.MarkFlagRequired("netns")
	return c
}

func benchCmd() *cobra.Command {
	var out, only string
	var asJSON bool
	var names []string
	for _, b := range benchmarks {
		names = append(names, b.name)
	}
	c := &cobra.Command{
		Use:   "bench [NAME...] [--json]",
		Short: "Run the benchmarks and write their results as JSON",
		Long:  "Run the benchmarks (all, or the ones named: " + strings.Join(names, ", ") + ") and write their results as JSON.",
		RunE: func(cmd *cobra.Command, args []string) error {
			if only != "" {
				args = append(args, strings.Split(only, ",")...)
			}
			for _, a := range args {
				if !slices.Contains(names, a) {
					return fmt.Errorf("no benchmark %q; there are: %s", a, strings.Join(names, ", "))
				}
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			// Every file records where its figures came from: commit,
			// command, kernel, host, start and end.
			prov := provenance.Collect(versionInfo().Version, os.Args)
			all := map[string]any{"started": time.Now().UTC().Format(time.RFC3339)}
			var last []byte
			for _, b := range benchmarks {
				if len(args) > 0 && !slices.Contains(args, b.name) {
					continue
				}
				fmt.Fprintf(os.Stderr, "bench: %s — %s\n", b.name, b.about)
				own := provenance.Collect(versionInfo().Version, os.Args)
				res, err := b.run(ctx, out)
				if err != nil {
					return fmt.Errorf("%s: %w", b.name, err)
				}
				own.Finish()
				data, err := provenance.Attach(res, own)
				if err != nil {
					return err
				}
				all[b.name], last = json.RawMessage(data), data
				if err := os.WriteFile(filepath.Join(out, b.name+".json"), data, 0o644); err != nil {
					return err
				}
			}
			prov.Finish()
			all["provenance"] = prov
			file := filepath.Join(out, "bench.json")
			if err := writeJSONFile(file, all); err != nil {
				return err
			}
			if asJSON && len(args) == 1 {
				_, err := os.Stdout.Write(last) // one benchmark: its own result, as documented
				return err
			}
			if asJSON {
				return printJSON(all)
			}
			fmt.Println("benchmark results:", file)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "also print the results as JSON on stdout (progress goes to stderr)")
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
