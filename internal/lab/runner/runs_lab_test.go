package runner_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"mpsteer/internal/lab/results"
	"mpsteer/internal/lab/world"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/testutil"
)

// Two rounds of a tiny scenario with the real binary: tcp-best measures
// TCP over each path in every run and keeps the better (a), and every
// run, its statistics and the comparisons land in results.json.
const twoRounds = `
name: rounds
paths:
  - {name: a, rate: 20mbit, delay: 5ms}
  - {name: b, rate: 5mbit, delay: 5ms}
traffic:
  - {type: bulk, duration: 2s}
variants:
  - {name: tcp-best, kind: tcp, path: best}
  - mptcp
`

func TestLabRunRepeatsAndSumsUp(t *testing.T) {
	testutil.RequireLab(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	name := fmt.Sprintf("t%d-rr", os.Getpid()%100000)
	cmd := exec.Command(testutil.Binary(t), "lab", "run", writeFile(t, dir, "rounds.yaml", twoRounds), "--runs", "2", "--out", out, "--name", name)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("lab run: %v\n%s", err, b)
	}
	for _, want := range []string{"[round 1/2, run 1/4] rounds: variant tcp-best (tcp over the best of a, b)", "[round 2/2, run 4/4] rounds: variant mptcp", "elapsed, about", "tcp-best: over b (2 of 2 paths)"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("progress lacks %q:\n%s", want, b)
		}
	}
	if left, _ := netnsutil.List(world.NSPrefix + name + "-"); len(left) > 0 {
		t.Fatalf("namespaces left after the run: %v", left)
	}
	f, err := results.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	if f.Schema != 2 || f.RunsRequested != 2 || !f.Complete || f.FailedRuns != 0 || strings.Join(f.Order, ",") != "tcp-best,mptcp" {
		t.Fatalf("results: schema %d, runs %d, complete %v, failed %d, order %v", f.Schema, f.RunsRequested, f.Complete, f.FailedRuns, f.Order)
	}
	p := f.Provenance
	if p.Kernel == "" || !strings.Contains(p.Command, "--runs 2") || p.Date == "" || p.Finished == "" || p.Host.CPUs < 1 {
		t.Errorf("provenance %+v", p)
	}
	for _, v := range f.Order {
		vr := f.Variants[v]
		if len(vr.Runs) != 2 || vr.GoodputMbit.N != 2 || vr.GoodputMbit.NoInterval || vr.GoodputMbit.Low > vr.GoodputMbit.Median || vr.GoodputMbit.High < vr.GoodputMbit.Median {
			t.Errorf("%s: %d runs, goodput %+v", v, len(vr.Runs), vr.GoodputMbit)
		}
		for i, r := range vr.Runs {
			if r.Failed || r.Round != i+1 || r.GoodputMbit == nil || *r.GoodputMbit < 1 || r.Summary == nil {
				t.Errorf("%s run %d: %+v", v, i+1, r)
				continue
			}
			if _, err := os.Stat(filepath.Join(out, r.Dir, "summary.json")); err != nil {
				t.Errorf("%s run %d: %v", v, i+1, err)
			}
			if v == "tcp-best" && (r.BestPath != "a" || len(r.BestOf) != 2 || r.BestOf["a"] < 2*r.BestOf["b"]) {
				t.Errorf("tcp-best run %d: best path %q of %v; want a (20 against 5 Mbit/s)", i+1, r.BestPath, r.BestOf)
			}
		}
		// The median run's files where a single run's always were.
		if _, err := os.Stat(filepath.Join(out, v, "summary.json")); err != nil || vr.MedianRun == "" {
			t.Errorf("%s: median run %q: %v", v, vr.MedianRun, err)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "tcp-best", "run-1", "over-b", "timeseries.csv")); err != nil {
		t.Errorf("tcp-best's run over the other path: %v", err)
	}
	c := f.Comparisons["mptcp/tcp-best"]
	if c == nil || c.Ratio.N != 2 || len(c.Pairs) != 2 || c.Ratio.Median <= 0 {
		t.Fatalf("mptcp/tcp-best: %+v", c)
	}
	// The names scripts read, as the issue fixes them.
	var raw map[string]any
	data, _ := os.ReadFile(filepath.Join(out, "results.json"))
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	ratio := raw["comparisons"].(map[string]any)["mptcp/tcp-best"].(map[string]any)["ratio"].(map[string]any)
	for _, k := range []string{"median", "ci95_low", "ci95_high", "n"} {
		if _, ok := ratio[k]; !ok {
			t.Errorf("comparisons[mptcp/tcp-best].ratio lacks %s", k)
		}
	}
	rep, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil || !strings.Contains(string(rep), "## Comparisons") || !strings.Contains(string(rep), "| mptcp | ") {
		t.Fatalf("report.md: %v\n%s", err, rep)
	}
	checkPNG(t, filepath.Join(out, "rounds.png"))
	checkPNG(t, filepath.Join(out, "compare.png"))
}
