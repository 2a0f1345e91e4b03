package runner

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/results"
	"mpsteer/internal/lab/scenario"
)

// fakeRuns replays recorded outcomes: fails[variant][round] is how many
// attempts of that round fail (0, 1 or 2).
func fakeRuns(fails map[string]map[int]int, calls *[]string) attemptFunc {
	return func(ctx context.Context, round, attempt int, v string) (results.Run, error) {
		*calls = append(*calls, runDir(v, round, attempt))
		r := results.Run{Round: round, Attempt: attempt, Dir: runDir(v, round, attempt)}
		if attempt <= fails[v][round] {
			r.Failed, r.Reason = true, "traffic did not finish within 1m6s (planned: 33s); stopped"
			return r, nil
		}
		g := float64(10*round + attempt)
		r.GoodputMbit = &g
		r.Summary = &report.Summary{Variant: v, GoodputMbit: g}
		return r, nil
	}
}

func TestRoundsInterleaveAndRerunOnce(t *testing.T) {
	var calls []string
	var snapshots int
	runs, err := runRounds(context.Background(), 3, []string{"a", "b"},
		fakeRuns(map[string]map[int]int{"b": {2: 1, 3: 2}}, &calls),
		func(map[string][]results.Run) { snapshots++ })
	if err != nil {
		t.Fatal(err)
	}
	want := "a/run-1 b/run-1 a/run-2 b/run-2 b/run-2b a/run-3 b/run-3 b/run-3b"
	if got := strings.Join(calls, " "); got != want {
		t.Fatalf("order %s\nwant  %s (A B A B …, a failed run again right after, once)", got, want)
	}
	if snapshots != len(calls) {
		t.Fatalf("after was called %d times for %d runs", snapshots, len(calls))
	}
	// b's round 2 counts by its second attempt; round 3 has no value.
	acc := results.Accepted(runs["b"])
	if len(acc) != 2 || acc[2].Summary.GoodputMbit != 22 || acc[3] != nil {
		t.Fatalf("b's runs that count: %v", acc)
	}
	f := results.Build(results.Input{Order: []string{"a", "b"}, Runs: runs, RunsRequested: 3, Complete: true})
	if f.Variants["b"].FailedRuns != 3 || f.FailedRuns != 3 || f.Variants["b"].GoodputMbit.N != 2 {
		t.Fatalf("failed runs %d, b: %+v", f.FailedRuns, f.Variants["b"])
	}
}

// A variant that fails both attempts of the first round runs no more
// rounds; the others go on, and the whole reports it.
func TestRoundsDropAVariantThatFailsTheFirstRoundTwice(t *testing.T) {
	var calls []string
	runs, err := runRounds(context.Background(), 3, []string{"a", "b", "c"},
		fakeRuns(map[string]map[int]int{"b": {1: 2}}, &calls), func(map[string][]results.Run) {})
	var broken errBroken
	if !errors.As(err, &broken) || len(broken.variants) != 1 || broken.variants[0] != "b" ||
		!strings.Contains(err.Error(), "variant b failed twice in the first round (traffic did not finish") {
		t.Fatalf("err = %v", err)
	}
	want := "a/run-1 b/run-1 b/run-1b c/run-1 a/run-2 c/run-2 a/run-3 c/run-3"
	if got := strings.Join(calls, " "); got != want {
		t.Fatalf("order %s\nwant  %s", got, want)
	}
	if len(runs["a"]) != 3 || len(runs["b"]) != 2 || len(runs["c"]) != 3 {
		t.Fatalf("runs kept: %v", runs)
	}
	// Failing twice in a later round is noise: the round has no value.
	calls = nil
	if _, err := runRounds(context.Background(), 3, []string{"a"}, fakeRuns(map[string]map[int]int{"a": {2: 2}}, &calls), func(map[string][]results.Run) {}); err != nil || len(calls) != 4 {
		t.Fatalf("a later double failure: %v, runs %v", err, calls)
	}
}

func TestRoundsStopWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var calls []string
	inner := fakeRuns(nil, &calls)
	runs, err := runRounds(ctx, 5, []string{"a", "b"}, func(ctx context.Context, round, attempt int, v string) (results.Run, error) {
		if round == 2 {
			cancel()
		}
		return inner(ctx, round, attempt, v)
	}, func(map[string][]results.Run) {})
	if !errors.Is(err, context.Canceled) || len(runs["a"]) != 2 || len(runs["b"]) != 1 {
		t.Fatalf("err %v, runs %v", err, runs)
	}
}

// A run that did not finish, whose generator, event or daemon failed, or
// whose short flows did not all complete does not count; one whose
// errors are none does.
func TestFailureOf(t *testing.T) {
	good := &report.Summary{GoodputMbit: 50, Flows: &report.FlowsSummary{Count: 10}}
	if why := failureOf(good); why != "" {
		t.Fatalf("a clean run failed: %s", why)
	}
	cases := map[string]*report.Summary{
		"traffic did not finish within 1m6s (planned: 33s); stopped":                     {Errors: []string{"traffic did not finish within 1m6s (planned: 33s); stopped"}},
		"traffic 1 (bulk): did not finish (12.2 of 30 s): send: connection reset":        {Errors: []string{"traffic 1 (bulk): did not finish (12.2 of 30 s): send: connection reset"}},
		"daemon in client exited during the run (exit status 1): panic":                  {Errors: []string{"daemon in client exited during the run (exit status 1): panic"}},
		"event at 5s on wifi: no such device; recorder: netlink: EBUSY":                  {Errors: []string{"event at 5s on wifi: no such device", "recorder: netlink: EBUSY"}},
		"3 of 300 short flows did not complete":                                          {Flows: &report.FlowsSummary{Count: 300, Failed: 3}},
		"over good: 3 of 300 short flows did not complete":                               {Errors: []string{"over good: 3 of 300 short flows did not complete"}, Flows: &report.FlowsSummary{Count: 300, Failed: 3}},
		"traffic 2 (flows): listen: address in use; 1 of 5 short flows did not complete": {Errors: []string{"traffic 2 (flows): listen: address in use"}, Flows: &report.FlowsSummary{Count: 5, Failed: 1}},
	}
	for want, sum := range cases {
		if got := failureOf(sum); got != want {
			t.Errorf("failureOf = %q\nwant       %q", got, want)
		}
	}
}

func TestPickBest(t *testing.T) {
	sums := []*report.Summary{
		{GoodputMbit: 3.9, FCT: &report.FCTSummary{Median: 90, Count: 10}},
		{GoodputMbit: 380, FCT: &report.FCTSummary{Median: 40, Count: 10}},
		{GoodputMbit: 380},
	}
	paths := []string{"bad", "good", "ref"}
	i, by := pickBest(sums, paths, scenario.DefaultPrimary)
	if i != 1 || len(by) != 3 || by["bad"] != 3.9 {
		t.Fatalf("goodput: best %d (%v), want good, the first of equals", i, by)
	}
	i, by = pickBest(sums, paths, scenario.Primary{Metric: "fct_median_ms"})
	if i != 1 || len(by) != 2 {
		t.Fatalf("FCT, lower is better: best %d (%v)", i, by)
	}
	// No candidate has the metric: goodput decides.
	if i, _ := pickBest(sums, paths, scenario.Primary{Metric: "recovery_after_flood_s"}); i != 1 {
		t.Fatalf("without the metric: best %d", i)
	}
}

func TestProgressSaysWhereAndHowLong(t *testing.T) {
	var out bytes.Buffer
	p := newProgress(&out, "s", 3, []string{"a", "b"})
	now := p.start
	p.now = func() time.Time { return now }
	p.begin(1, 1, "a", "mptcp over x")
	if !strings.Contains(out.String(), "[round 1/3, run 1/6] s: variant a (mptcp over x); 0s elapsed\n") {
		t.Fatalf("first line: %q", out.String())
	}
	g := 10.0
	p.end(results.Run{Round: 1, Attempt: 1, GoodputMbit: &g, Summary: &report.Summary{GoodputMbit: 10}}, "a", 10*time.Second)
	now = now.Add(10 * time.Second)
	out.Reset()
	p.begin(1, 1, "b", "tcp over x")
	// a: 2 rounds left at 10 s, b: 3 at the mean so far (10 s).
	if !strings.Contains(out.String(), "run 2/6] s: variant b (tcp over x); 10s elapsed, about 50s left") {
		t.Fatalf("second line: %q", out.String())
	}
	p.end(results.Run{Round: 1, Attempt: 1, Failed: true, Reason: "why", Dir: "b/run-1"}, "b", 30*time.Second)
	if !strings.Contains(out.String(), "b FAILED (b/run-1): why; running it once more") {
		t.Fatalf("failure line: %q", out.String())
	}
}
