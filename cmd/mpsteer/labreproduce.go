package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"mpsteer/internal/lab/reproduce"
)

func init() { extraLabCommands = append(extraLabCommands, labReproduceCmd) }

func labReproduceCmd() *cobra.Command {
	var papers, out, scenarios string
	var indexOnly, keep, asJSON bool
	var runs int
	c := &cobra.Command{
		Use:   "reproduce [SCENARIO...]",
		Short: "Run every paper experiment (docs/papers.yaml) with lab run and write one report to browse, OUT/index.html: each figure, our number and the paper's side by side, and the command for each",
		Long: `Runs each scenario the papers file lists (or only those named) with
"mpsteer lab run scenarios/NAME.yaml --out OUT/NAME", one after another (all
of them take hours), then each benchmark it lists (benches:, named as
bench:NAME) with "mpsteer bench NAME --out OUT/bench", and writes
OUT/index.html over the results after each run, so that the page shows what
has run so far. --index-only writes the page from the runs already in OUT;
--keep skips scenarios and benchmarks whose results are there. A run that
fails is shown as failed and the others go on; the command then exits 1.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := reproduce.Load(papers)
			if err != nil {
				return err
			}
			want, unknown := map[string]bool{}, map[string]bool{}
			for _, a := range args {
				n := strings.TrimSuffix(filepath.Base(a), ".yaml")
				want[n], unknown[n] = true, true
			}
			var todo []reproduce.Experiment
			for _, e := range p.Experiments {
				if len(want) == 0 || want[e.Scenario] {
					todo = append(todo, e)
					delete(unknown, e.Scenario)
				}
			}
			var benches []reproduce.Bench
			for _, b := range p.Benches {
				if len(want) == 0 || want["bench:"+b.Name] {
					benches = append(benches, b)
					delete(unknown, "bench:"+b.Name)
				}
			}
			want = unknown
			if len(want) > 0 {
				var names []string
				for n := range want {
					names = append(names, n)
				}
				sort.Strings(names)
				return fmt.Errorf("%s: not in %s (it lists the paper experiments)", strings.Join(names, ", "), papers)
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			o := reproduce.Options{Dir: out, ScenarioDir: scenarios, Runs: runs, Failed: map[string]string{}}
			index := filepath.Join(out, "index.html")
			for i, e := range todo {
				if indexOnly || ctx.Err() != nil {
					break
				}
				dir := filepath.Join(out, e.Scenario)
				if _, err := os.Stat(filepath.Join(dir, "results.json")); err == nil && keep {
					continue
				}
				fmt.Fprintf(os.Stderr, "reproduce: %d/%d %s\n", i+1, len(todo), e.Scenario)
				args := []string{"lab", "run", filepath.Join(scenarios, e.Scenario+".yaml"), "--out", dir}
				if runs > 1 {
					args = append(args, "--runs", strconv.Itoa(runs))
				}
				run := exec.CommandContext(ctx, self, args...)
				run.Stdout, run.Stderr = os.Stderr, os.Stderr
				// Interrupted: lab run takes its world down on SIGINT (a kill
				// would leave its namespaces behind).
				run.Cancel = func() error { return run.Process.Signal(os.Interrupt) }
				run.WaitDelay = time.Minute
				if err := run.Run(); err != nil {
					o.Failed[e.Scenario] = err.Error()
				}
				if index, err = reproduce.WriteIndex(p, o); err != nil {
					return err
				}
			}
			benchDir := filepath.Join(out, "bench")
			for i, b := range benches {
				if indexOnly || ctx.Err() != nil {
					break
				}
				if _, err := os.Stat(filepath.Join(benchDir, b.Name+".json")); err == nil && keep {
					continue
				}
				fmt.Fprintf(os.Stderr, "reproduce: bench %d/%d %s\n", i+1, len(benches), b.Name)
				run := exec.CommandContext(ctx, self, "bench", b.Name, "--out", benchDir)
				run.Stdout, run.Stderr = os.Stderr, os.Stderr
				run.Cancel = func() error { return run.Process.Signal(os.Interrupt) }
				run.WaitDelay = time.Minute
				if err := run.Run(); err != nil {
					o.Failed["bench:"+b.Name] = err.Error()
				}
				if index, err = reproduce.WriteIndex(p, o); err != nil {
					return err
				}
			}
			if index, err = reproduce.WriteIndex(p, o); err != nil {
				return err
			}
			var failed []string
			for n := range o.Failed {
				failed = append(failed, n)
			}
			sort.Strings(failed)
			if asJSON {
				if err := printJSON(map[string]any{"index": index, "failed": failed}); err != nil {
					return err
				}
			} else {
				fmt.Println(index)
			}
			if ctx.Err() != nil {
				return fmt.Errorf("interrupted; %s shows the runs done so far", index)
			}
			if len(failed) > 0 {
				return fmt.Errorf("%d run(s) failed: %s (see %s)", len(failed), strings.Join(failed, ", "), index)
			}
			return nil
		},
	}
	c.Flags().StringVar(&papers, "papers", "docs/papers.yaml", "the list of paper experiments and the papers' numbers")
	c.Flags().StringVar(&out, "out", "results/reproduce", "where the runs and index.html go")
	c.Flags().StringVar(&scenarios, "scenarios", "scenarios", "where the scenario files are")
	c.Flags().BoolVar(&indexOnly, "index-only", false, "run nothing: write index.html from the runs already in --out")
	c.Flags().BoolVar(&keep, "keep", false, "skip scenarios whose results are already in --out (to resume)")
	c.Flags().BoolVar(&asJSON, "json", false, "print {index, failed} as JSON")
	c.Flags().IntVar(&runs, "runs", 1, "paired runs of each scenario (lab run --runs): the page shows their medians with 95% intervals")
	return c
}
