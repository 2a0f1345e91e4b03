package runner

import (
	"strings"
	"testing"

	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/results"
	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/observe"
	"mpsteer/internal/provenance"
	"mpsteer/internal/stats"
)

func TestReportTables(t *testing.T) {
	run := func(round, attempt int, v string, g, fct float64) results.Run {
		s := &report.Summary{Variant: v, GoodputMbit: g, Retransmits: 3, FCT: &report.FCTSummary{Median: fct, P99: 2 * fct, Count: 10}}
		return results.Run{Round: round, Attempt: attempt, Dir: runDir(v, round, attempt), GoodputMbit: &g, Summary: s}
	}
	fail := func(round, attempt int, v string) results.Run {
		return results.Run{Round: round, Attempt: attempt, Dir: runDir(v, round, attempt), Failed: true, Reason: "daemon in client exited during the run (exit status 2)"}
	}
	f := results.Build(results.Input{Scenario: "s", File: "s.yaml", RunsRequested: 3, Complete: true,
		Provenance: provenance.Provenance{Commit: "abc1234", Dirty: true, Kernel: "6.18", Command: "mpsteer lab run s.yaml --runs 3", Date: "d0", Finished: "d1", Host: provenance.Host{CPUs: 2}},
		Order:      []string{"tcp-best", "mptcp", "mptcp+inc"}, Primary: scenario.Primary{Metric: "fct_median_ms"},
		Runs: map[string][]results.Run{
			"tcp-best":  {run(1, 1, "tcp-best", 40, 50), run(2, 1, "tcp-best", 40, 50), run(3, 1, "tcp-best", 40, 50)},
			"mptcp":     {run(1, 1, "mptcp", 50, 40), run(2, 1, "mptcp", 52, 44), run(3, 1, "mptcp", 51, 42)},
			"mptcp+inc": {run(1, 1, "mptcp+inc", 50, 20), fail(2, 1, "mptcp+inc"), run(2, 2, "mptcp+inc", 53, 22), run(3, 1, "mptcp+inc", 49, 21)},
		}})
	h := Header(f)
	for _, want := range []string{"3 round(s)", "in the order tcp-best, mptcp, mptcp+inc", "1 run(s) failed", "Commit abc1234 (with uncommitted changes), kernel 6.18, 2 CPUs, d0 to d1; `mpsteer lab run s.yaml --runs 3`"} {
		if !strings.Contains(h, want) {
			t.Errorf("header lacks %q:\n%s", want, h)
		}
	}
	et := EstimatesTable(f)
	for _, want := range []string{
		"| variant | goodput (Mbit/s) | retransmits (segments) | fct_median_ms (lower is better) | fct p99 (ms) | runs (n) | failed runs |",
		"| mptcp | 51.0 [50.0, 52.0] | 3 [3, 3] | 42.0 [40.0, 44.0] | 84.0 [80.0, 88.0] | 3 | 0 |",
		"| mptcp+inc | 50.0 [49.0, 53.0] | 3 [3, 3] | 21.0 [20.0, 22.0] |",
		" | 3 | 1 |",
	} {
		if !strings.Contains(et, want) {
			t.Errorf("estimates table lacks %q:\n%s", want, et)
		}
	}
	ct := ComparisonTables(f)
	for _, want := range []string{
		"the best of mptcp, tcp-best.",
		"### goodput_mbit (higher is better)",
		"| tcp-best | ×0.784 [0.769, 0.800], n 3: worse | – (an alternative itself) |",
		// 50/50, 53/52, 49/51: 0.961, 1, 1.019.
		"| mptcp+inc | ×1.000 [0.961, 1.019], n 3: inside the noise | ×1.000 [0.961, 1.019], n 3: inside the noise (best: mptcp ×3) |",
		"### fct_median_ms (lower is better)",
		// 20/40, 22/44, 21/42: all 0.5; the best alternative is mptcp's lower FCT.
		"| mptcp+inc | ×0.500 [0.500, 0.500], n 3: better | ×0.500 [0.500, 0.500], n 3: better (best: mptcp ×3) |",
	} {
		if !strings.Contains(ct, want) {
			t.Errorf("comparisons lack %q:\n%s", want, ct)
		}
	}
	if fr := FailedRuns(f); fr != "- mptcp+inc, round 2, attempt 1 (`mptcp+inc/run-2`): daemon in client exited during the run (exit status 2)\n" {
		t.Errorf("failed runs: %q", fr)
	}
	if kr := KernelResets(f); kr != "" {
		t.Errorf("kernel resets with none counted: %q", kr)
	}
	f.Variants["mptcp"].Runs[1].MPTCPCounters = map[string]observe.MPTCPCounters{"client": {"MPJoinSynTx": 1}, "server": {"DSSNotMatching": 1, "MPRstTx": 1}}
	f.Variants["mptcp"].Runs[2].MPTCPCounters = map[string]observe.MPTCPCounters{"client": {"DSSNotMatching": 2}}
	if kr := KernelResets(f); kr != "- `mptcp/run-2`: 1 subflow(s)\n- `mptcp/run-3`: 2 subflow(s)\n" {
		t.Errorf("kernel resets: %q", kr)
	}
	if got := Est(stats.Estimate{Median: 7, Low: 7, High: 7, N: 1, NoInterval: true}, "%.1f"); got != "7.0 (1 run)" {
		t.Errorf("one run: %q", got)
	}
	if got := Est(stats.Estimate{}, "%.1f"); got != "–" {
		t.Errorf("no run: %q", got)
	}
}
