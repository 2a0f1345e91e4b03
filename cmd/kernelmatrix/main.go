// Command kernelmatrix is make test-kernels' bookkeeping: `collect` turns
// one kernel's run (go test JSON streams and doctor's JSON) into
// results/kernels/VERSION.json and prints the kernel's one-line summary;
// `doc` renders docs/kernels.md from a directory of those results.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"mpsteer/internal/kernelmatrix"
	"mpsteer/internal/provenance"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kernelmatrix:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: kernelmatrix collect -in DIR -matrix NAME -where vm|host -wall SECONDS -start RFC3339 -command CMD -out DIR | doc -in DIR -out FILE")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	in := fs.String("in", "", "input directory")
	out := fs.String("out", "", "output directory (collect) or file (doc)")
	matrix := fs.String("matrix", "", "the kernel's name in the matrix")
	where := fs.String("where", "vm", "vm or host")
	wall := fs.Float64("wall", 0, "the run's wall time in seconds")
	start := fs.String("start", "", "when the kernel's run started (RFC 3339, UTC; default now)")
	command := fs.String("command", "scripts/kernels/run.sh", "the command that ran the matrix")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	switch args[0] {
	case "collect":
		r, err := kernelmatrix.Collect(*in, *matrix, *where)
		if err != nil {
			return err
		}
		r.WallSeconds = *wall
		// Where the results come from: this build's commit, the command
		// that ran the matrix, the kernel the tests ran on (the guest's,
		// not this host's), the run's start and end, this machine.
		r.Provenance = provenance.Collect("", nil)
		r.Provenance.Command, r.Provenance.Kernel = *command, r.Kernel
		r.Provenance.Finished = provenance.Now()
		if *start != "" {
			r.Provenance.Date = *start
		}
		if msg := r.Provenance.Check(); msg != "" {
			return fmt.Errorf("%s: %s", r.Kernel, msg)
		}
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		if err := os.MkdirAll(*out, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(*out, r.Kernel+".json"), append(b, '\n'), 0o644); err != nil {
			return err
		}
		fmt.Println(r.Summary())
		// The failed tests under it, so that a CI log that keeps only
		// these lines still says which failed and why.
		for _, t := range r.Tests {
			if t.Outcome == kernelmatrix.Fail {
				fmt.Printf("  failed: %s (%s): %s\n", t.Name, t.Package, shorten(t.Reason, 400))
			}
		}
		return nil
	case "doc":
		rs, err := kernelmatrix.Load(*in)
		if err != nil {
			return err
		}
		if len(rs) == 0 {
			return fmt.Errorf("no results in %s (make test-kernels writes them)", *in)
		}
		return os.WriteFile(*out, []byte(kernelmatrix.Render(rs)), 0o644)
	}
	return fmt.Errorf("unknown command %q (collect or doc)", args[0])
}

// shorten keeps the first n bytes of s on one line.
func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}
