package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/results"
)

// notReporting are the commands that print no report of their own, and
// why; every other command takes --json.
var notReporting = map[string]string{
	"mpsteer daemon":      "runs the daemon; it logs, and status reports on it",
	"mpsteer lab emulate": "the lab's emulator process (hidden), started by lab up",
	"mpsteer lab exec":    "runs a command in a lab host: the output is the command's",
	"mpsteer man":         "writes man pages",
	"mpsteer bench-sink":  "the overhead bench's hidden server process, started by bench overhead",
	"mpsteer docs render": "rewrites the documents (or, with --check, exits non-zero naming each figure that differs): its result is the files and the exit status",
	"mpsteer docs legacy": "rewrites docs/data's converted files from their sources: its result is the files",
}

// Every command that reports takes --json: the whole command tree is
// walked, so a new command cannot be missed.
func TestEveryReportingCommandHasJSON(t *testing.T) {
	seen := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if !c.Runnable() {
			return // a group: its subcommands report
		}
		path := c.CommandPath()
		seen[path] = true
		f := c.Flags().Lookup("json")
		if why, ok := notReporting[path]; ok {
			if f != nil {
				t.Errorf("%s takes --json but is listed as reporting nothing (%s): drop it from notReporting", path, why)
			}
			return
		}
		switch {
		case f == nil:
			t.Errorf("%s has no --json (every command that reports takes it; one that does not goes in notReporting, with why)", path)
		case f.Value.Type() != "bool" || f.DefValue != "false":
			t.Errorf("%s --json is a %s defaulting to %q, want a switch off by default", path, f.Value.Type(), f.DefValue)
		case strings.TrimSpace(f.Usage) == "":
			t.Errorf("%s --json has no help text", path)
		}
	}
	root := newRootCmd()
	walk(root)
	for path := range notReporting {
		if !seen[path] {
			t.Errorf("notReporting lists %q, which is no command", path)
		}
	}
	// The walk reached the nested commands.
	for _, path := range []string{"mpsteer chain add", "mpsteer lab sweep", "mpsteer policy apply"} {
		if !seen[path] {
			t.Errorf("the walk did not reach %s", path)
		}
	}
}

// `lab sweep --json` prints the files it wrote and the points it plotted.
func TestLabSweepJSON(t *testing.T) {
	dir := t.TempDir()
	var runs []string
	for _, n := range []int{2, 4} {
		run := filepath.Join(dir, fmt.Sprintf("fullmesh-%d", n))
		if err := os.Mkdir(run, 0o755); err != nil {
			t.Fatal(err)
		}
		sums := []*report.Summary{
			{Scenario: fmt.Sprintf("fullmesh-%d", n), Variant: fmt.Sprintf("fullmesh-%d", n), Kind: "mptcp", GoodputMbit: float64(10 * n)},
			{Scenario: fmt.Sprintf("fullmesh-%d", n), Variant: "tcp", Kind: "tcp", GoodputMbit: 5},
		}
		b, err := json.Marshal(sums)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(run, results.Name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, run)
	}
	png := filepath.Join(dir, "sweep.png")
	out, stderr, err := runCLI(t, append([]string{"lab", "sweep", "--variants", `^fullmesh-(?P<x>[0-9]+)$`, "--out", png, "--json"}, runs...)...)
	if err != nil {
		t.Fatalf("lab sweep --json: %v\n%s", err, stderr)
	}
	var res LabSweepResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("lab sweep --json printed no JSON object: %v\n%s", err, out)
	}
	if res.Plot != png || res.Data != filepath.Join(dir, "sweep.csv") || len(res.Points) != 2 {
		t.Fatalf("lab sweep --json: %+v", res)
	}
	for _, p := range res.Points {
		if p.Est.Median != 10*p.X || p.Variant != fmt.Sprintf("fullmesh-%v", p.X) {
			t.Errorf("point %+v: want goodput 10 × x of variant fullmesh-x", p)
		}
	}
	for _, f := range []string{res.Plot, res.Data} {
		if fi, err := os.Stat(f); err != nil || fi.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
}

func TestVersionJSON(t *testing.T) {
	out, _, err := runCLI(t, "version", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var v VersionInfo
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Version == "" || !strings.HasPrefix(v.GoVersion, "go") {
		t.Fatalf("version --json: %q (%v)", out, err)
	}
	out, _, _ = runCLI(t, "version")
	if !strings.HasPrefix(out, "mpsteer "+v.Version) {
		t.Fatalf("version: %q", out)
	}
}

// The daemon's help (and so its man page) says how it reloads, what it
// needs and what it reports to systemd.
func TestDaemonHelpIsComplete(t *testing.T) {
	out, _, err := runCLI(t, "daemon", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--metrics", "--watch-config", "--state-dir", "SIGHUP", "CAP_NET_ADMIN", "CAP_BPF", "CAP_PERFMON", "Type=notify", "/etc/mpsteer/mpsteer.yaml"} {
		if !strings.Contains(out, want) {
			t.Errorf("daemon --help lacks %q", want)
		}
	}
}
