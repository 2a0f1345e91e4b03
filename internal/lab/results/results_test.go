package results

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/provenance"
	"mpsteer/internal/stats"
)

func ok(round, attempt int, variant string, goodput float64, metrics map[string]float64) Run {
	s := &report.Summary{Scenario: "s", Variant: variant, Kind: "mptcp", GoodputMbit: goodput, Metrics: metrics}
	g := goodput
	dir := variant + "/run-" + itoa(round)
	if attempt == 2 {
		dir += "b"
	}
	return Run{Round: round, Attempt: attempt, Dir: dir, GoodputMbit: &g, Summary: s}
}

func failed(round, attempt int, variant, reason string) Run {
	dir := variant + "/run-" + itoa(round)
	if attempt == 2 {
		dir += "b"
	}
	return Run{Round: round, Attempt: attempt, Dir: dir, Failed: true, Reason: reason}
}

func itoa(i int) string { return string(rune('0' + i)) }

// Three rounds of three variants. mptcp's round 2 failed and its re-run
// counts; mptcp+x failed twice in round 3, so round 3 has no value for it
// and every pair with it in round 3 is dropped; tcp-best failed twice in
// round 2, so round 2 is dropped from the comparison with the best
// alternative (mptcp alone must not stand in for it).
func recorded() Input {
	return Input{Scenario: "s", File: "s.yaml", RunsRequested: 3, Complete: true,
		Provenance: provenance.Provenance{Commit: "abc1234", Command: "mpsteer lab run s.yaml --runs 3", Kernel: "6.18", Date: "2026-01-01T00:00:00Z"},
		Order:      []string{"tcp-best", "mptcp", "mptcp+x"},
		Kinds:      map[string]string{"tcp-best": "tcp", "mptcp": "mptcp", "mptcp+x": "mptcp"},
		Runs: map[string][]Run{
			"tcp-best": {ok(1, 1, "tcp-best", 40, nil), failed(2, 1, "tcp-best", "daemon died"), failed(2, 2, "tcp-best", "daemon died"), ok(3, 1, "tcp-best", 60, nil)},
			"mptcp": {ok(1, 1, "mptcp", 50, map[string]float64{"longest_stall_ms": 300}), failed(2, 1, "mptcp", "traffic did not finish (12.2 of 30 s)"),
				ok(2, 2, "mptcp", 55, map[string]float64{"longest_stall_ms": 100}), ok(3, 1, "mptcp", 45, map[string]float64{"longest_stall_ms": 200})},
			"mptcp+x": {ok(1, 1, "mptcp+x", 55, map[string]float64{"longest_stall_ms": 150}), ok(2, 1, "mptcp+x", 66, map[string]float64{"longest_stall_ms": 50}),
				failed(3, 1, "mptcp+x", "traffic 1 (bulk): send: connection reset"), failed(3, 2, "mptcp+x", "traffic 1 (bulk): send: connection reset")},
		}}
}

func TestFailedRunsNeverEnterAStatistic(t *testing.T) {
	f := Build(recorded())
	if f.FailedRuns != 5 || f.Variants["mptcp"].FailedRuns != 1 || f.Variants["mptcp+x"].FailedRuns != 2 || f.Variants["tcp-best"].FailedRuns != 2 {
		t.Fatalf("failed runs %d (mptcp %d, mptcp+x %d, tcp-best %d), want 5 (1, 2, 2)", f.FailedRuns,
			f.Variants["mptcp"].FailedRuns, f.Variants["mptcp+x"].FailedRuns, f.Variants["tcp-best"].FailedRuns)
	}
	// mptcp: 50, 55 (the re-run), 45: median 50.
	if g := f.Variants["mptcp"].GoodputMbit; g.N != 3 || g.Median != 50 || g.Low != 45 || g.High != 55 {
		t.Fatalf("mptcp goodput %+v, want median 50 of 3 in [45, 55]", g)
	}
	// mptcp+x: 55, 66 (lower middle 55); round 3 has none.
	if g := f.Variants["mptcp+x"].GoodputMbit; g.N != 2 || g.Median != 55 {
		t.Fatalf("mptcp+x goodput %+v", g)
	}
	if m := f.Variants["mptcp"].Metrics["longest_stall_ms"]; m.N != 3 || m.Median != 200 {
		t.Fatalf("mptcp longest stall %+v", m)
	}
	if _, ok := f.Variants["mptcp"].Metrics["goodput_mbit"]; ok {
		t.Fatal("goodput is in metrics too")
	}
	// Every run is kept, in the order run.
	if runs := f.Variants["mptcp"].Runs; len(runs) != 4 || runs[1].Reason == "" || runs[2].Dir != "mptcp/run-2b" {
		t.Fatalf("mptcp runs %+v", runs)
	}
	// The median run: mptcp's goodputs 50 (round 1), 55, 45: round 1.
	if f.Variants["mptcp"].MedianRun != "mptcp/run-1" || f.Variants["mptcp+x"].MedianRun != "mptcp+x/run-1" {
		t.Fatalf("median runs %q %q", f.Variants["mptcp"].MedianRun, f.Variants["mptcp+x"].MedianRun)
	}
}

func TestPairsAreByRound(t *testing.T) {
	f := Build(recorded())
	c := f.Comparisons["mptcp+x/mptcp"]
	if c == nil || !slices.Equal(c.Rounds, []int{1, 2}) || c.Pairs[0] != [2]float64{55, 50} || c.Pairs[1] != [2]float64{66, 55} {
		t.Fatalf("mptcp+x/mptcp %+v: want rounds 1 and 2 (round 3 has no mptcp+x)", c)
	}
	// Ratios 1.1 and 1.2: the lower middle.
	if c.Ratio.N != 2 || c.Ratio.Median != 1.1 || c.Ratio.Low != 1.1 || c.Ratio.High != 1.2 || c.Metric != "goodput_mbit" || c.Better != "higher" {
		t.Fatalf("ratio %+v", c)
	}
	// Every variant against each baseline present, baselines included.
	for _, k := range []string{"mptcp+x/tcp-best", "mptcp/tcp-best", "tcp-best/mptcp", "mptcp+x/mptcp"} {
		if f.Comparisons[k] == nil {
			t.Errorf("no comparison %s", k)
		}
	}
	if f.Comparisons["mptcp/mptcp+x"] != nil || f.Comparisons["mptcp/mptcp"] != nil {
		t.Error("a comparison against a variant that is not a baseline, or with itself")
	}
	// tcp-best has rounds 1 and 3; mptcp+x 1 and 2: one pair.
	if c := f.Comparisons["mptcp+x/tcp-best"]; !slices.Equal(c.Rounds, []int{1}) || c.Ratio.Median != 55.0/40 || !c.Ratio.NoInterval {
		t.Fatalf("mptcp+x/tcp-best %+v", c)
	}
}

func TestVsBestAlternative(t *testing.T) {
	f := Build(recorded())
	if len(f.VsBestAlternative) != 1 {
		t.Fatalf("vs best alternative for %v; want mptcp+x only (the others are alternatives)", keys(f.VsBestAlternative))
	}
	b := f.VsBestAlternative["mptcp+x"]
	if !slices.Equal(b.Alternatives, []string{"mptcp", "tcp-best"}) {
		t.Fatalf("alternatives %v", b.Alternatives)
	}
	// Round 1: max(50, 40) = 50 (mptcp). Round 2: tcp-best failed, so the
	// round is dropped. Round 3: mptcp+x failed.
	if len(b.Rounds) != 1 || b.Rounds[0] != (BestRound{Round: 1, Value: 55, Best: "mptcp", BestValue: 50}) || b.Ratio.Median != 1.1 || b.Ratio.N != 1 {
		t.Fatalf("%+v", b)
	}
	// With lower better, the best is the lowest.
	vals := map[string]map[int]float64{"mptcp": {1: 300, 2: 100}, "tcp-best": {1: 200, 2: 400}}
	lb := VsBest(map[int]float64{1: 150, 2: 50}, []string{"mptcp", "tcp-best", "tcp"}, vals, scenario.Primary{Metric: "longest_stall_ms"})
	if len(lb.Rounds) != 2 || lb.Rounds[0].Best != "tcp-best" || lb.Rounds[1].Best != "mptcp" || lb.Ratio.Median != 0.5 || lb.Better != "lower" ||
		!slices.Equal(lb.Alternatives, []string{"mptcp", "tcp-best"}) {
		t.Fatalf("lower is better: %+v (tcp, without values, is no alternative)", lb)
	}
}

func keys[T any](m map[string]T) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestPrimaryMetricComparisons(t *testing.T) {
	in := recorded()
	in.Primary = scenario.Primary{Metric: "longest_stall_ms"}
	f := Build(in)
	if f.Primary != (Metric{Name: "longest_stall_ms", Better: "lower"}) {
		t.Fatalf("primary %+v", f.Primary)
	}
	c := f.Comparisons["mptcp+x/mptcp:longest_stall_ms"]
	if c == nil || c.Ratio.Median != 0.5 || c.Better != "lower" {
		t.Fatalf("on the primary metric: %+v (ratios 150/300, 50/100)", c)
	}
	if f.Comparisons["mptcp+x/mptcp"].Metric != "goodput_mbit" {
		t.Fatal("the bare key is not goodput")
	}
	// tcp-best has no stall metric: the only alternative is mptcp.
	if b := f.VsBestAlternative["mptcp+x:longest_stall_ms"]; b == nil || !slices.Equal(b.Alternatives, []string{"mptcp"}) || b.Ratio.N != 2 {
		t.Fatalf("vs best on the primary metric: %+v", b)
	}
	// The median run by the primary metric: mptcp's stalls 300, 100, 200.
	if f.Variants["mptcp"].MedianRun != "mptcp/run-3" {
		t.Fatalf("median run %q", f.Variants["mptcp"].MedianRun)
	}
}

// The names scripts read (issue 21) are where they must be, and the file
// reads back the same.
func TestShape(t *testing.T) {
	data, err := json.MarshalIndent(Build(recorded()), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	get := func(path ...any) any {
		var cur any = raw
		for _, p := range path {
			switch k := p.(type) {
			case string:
				cur = cur.(map[string]any)[k]
			case int:
				cur = cur.([]any)[k]
			}
			if cur == nil {
				return nil
			}
		}
		return cur
	}
	checks := []struct {
		path []any
		want any
	}{
		{[]any{"schema"}, 2.0},
		{[]any{"provenance", "commit"}, "abc1234"},
		{[]any{"provenance", "kernel"}, "6.18"},
		{[]any{"variants", "mptcp", "runs", 1, "failed"}, true},
		{[]any{"variants", "mptcp", "runs", 1, "reason"}, "traffic did not finish (12.2 of 30 s)"},
		{[]any{"variants", "mptcp", "runs", 1, "goodput_mbit"}, nil},
		{[]any{"variants", "mptcp", "runs", 2, "failed"}, false},
		{[]any{"variants", "mptcp", "runs", 2, "goodput_mbit"}, 55.0},
		{[]any{"variants", "mptcp", "runs", 2, "variant"}, "mptcp"},
		{[]any{"variants", "mptcp", "goodput_mbit", "median"}, 50.0},
		{[]any{"variants", "mptcp", "goodput_mbit", "ci95_low"}, 45.0},
		{[]any{"variants", "mptcp", "goodput_mbit", "ci95_high"}, 55.0},
		{[]any{"variants", "mptcp", "goodput_mbit", "n"}, 3.0},
		{[]any{"comparisons", "mptcp+x/mptcp", "ratio", "median"}, 1.1},
		{[]any{"comparisons", "mptcp+x/mptcp", "ratio", "n"}, 2.0},
		{[]any{"vs_best_alternative", "mptcp+x", "ratio", "n"}, 1.0},
		{[]any{"order", 0}, "tcp-best"},
		{[]any{"runs_requested"}, 3.0},
		{[]any{"failed_runs"}, 5.0},
	}
	for _, c := range checks {
		if got := get(c.path...); got != c.want {
			t.Errorf("%v = %v, want %v", c.path, got, c.want)
		}
	}
	if get("variants", "mptcp", "goodput_mbit", "ci95_low") == nil || get("comparisons", "mptcp+x/mptcp", "ratio", "ci95_high") == nil {
		t.Error("interval ends missing")
	}
	back, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if s := back.Variants["mptcp"].Runs[2].Summary; s == nil || s.GoodputMbit != 55 {
		t.Fatalf("read back: the run's summary lost its goodput: %+v", s)
	}
	rep := back.Representative()
	if len(rep) != 3 || rep[1].Variant != "mptcp" || rep[1].GoodputMbit != 50 {
		t.Fatalf("representative runs %+v", rep)
	}
	if e := back.Estimate("mptcp+x", "goodput_mbit"); e.N != 2 {
		t.Fatalf("estimate %+v", e)
	}
	if c := back.Paired("mptcp+x", "mptcp", "longest_stall_ms"); c.Ratio.Median != 0.5 || c.Better != "lower" {
		t.Fatalf("paired on a metric: %+v", c)
	}
	if _, err := Parse([]byte(`{"schema": 3}`)); err == nil || !strings.Contains(err.Error(), "schema 3") {
		t.Fatalf("a newer schema: %v", err)
	}
}

func TestReadsTheOlderList(t *testing.T) {
	f, err := Parse([]byte(`[{"scenario": "a", "variant": "tcp", "kind": "tcp", "goodput_mbit": 10},
		{"scenario": "a", "variant": "mptcp", "kind": "mptcp", "goodput_mbit": 15}]`))
	if err != nil {
		t.Fatal(err)
	}
	if f.Schema != 1 || f.Scenario != "a" || !slices.Equal(f.Order, []string{"tcp", "mptcp"}) || f.Variants["mptcp"].GoodputMbit.Median != 15 {
		t.Fatalf("%+v", f)
	}
	if c := f.Comparisons["mptcp/tcp"]; c.Ratio.Median != 1.5 || c.Ratio.N != 1 {
		t.Fatalf("mptcp/tcp %+v", c)
	}
	if rep := f.Representative(); len(rep) != 2 || rep[0].GoodputMbit != 10 {
		t.Fatalf("representative %+v", rep)
	}
}

// fromFile is a file as read: runs whose summaries are fields, as the
// older summaries (congestion_control a name, subflows a count) hold
// them; each run is [round, attempt, goodput, failed (0/1)].
func fromFile(t *testing.T, runs map[string][][4]float64) *File {
	t.Helper()
	in := Input{Scenario: "s", File: "s.yaml", RunsRequested: 4, Complete: true, Runs: map[string][]Run{},
		Provenance: provenance.Provenance{Commit: "abc1234", Command: "mpsteer lab run s.yaml --runs 4", Kernel: "6.18.44", Date: "2026-11-26T10:00:00Z"}}
	for _, name := range []string{"mptcp", "ecf"} {
		for _, x := range runs[name] {
			run := Run{Round: int(x[0]), Attempt: int(x[1]), Failed: x[3] == 1, Fields: map[string]any{"variant": name, "goodput_mbit": x[2],
				"congestion_control": "bbr", "subflows": 2.0, "metrics": map[string]any{"stall_ms": 10 * x[2]},
				"paths": map[string]any{"a": map[string]any{"share": 0.25, "bytes": 100.0}}}}
			if run.Failed {
				run.Reason = "traffic did not finish (4.0 of 30 s)"
			}
			in.Runs[name] = append(in.Runs[name], run)
		}
		in.Order = append(in.Order, name)
	}
	data, err := json.Marshal(Build(in))
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestFiguresOfSummariesOfAnOlderShape(t *testing.T) {
	f := fromFile(t, map[string][][4]float64{
		"mptcp": {{1, 1, 50, 0}, {2, 1, 10, 1}, {2, 2, 52, 0}, {3, 1, 48, 0}, {4, 1, 9, 1}, {4, 2, 8, 1}},
		"ecf":   {{1, 1, 55, 0}, {2, 1, 57.2, 0}, {3, 1, 30, 1}, {4, 1, 60, 0}},
	})
	if r := f.Variants["mptcp"].Runs[0]; r.Summary != nil || r.Fields["congestion_control"] != "bbr" || *r.GoodputMbit != 50 {
		t.Fatalf("a summary report.Summary cannot hold is kept as its fields: %+v", r)
	}
	if got := f.Values("mptcp", "goodput_mbit"); !slices.Equal(got, []float64{50, 52, 48}) {
		t.Errorf("mptcp values %v: round 2's re-run stands for it, round 4 failed twice", got)
	}
	if got := f.Failed("mptcp"); got != 3 || f.Variants["mptcp"].FailedRuns != 3 {
		t.Errorf("failed %d (stored %d), want 3", got, f.Variants["mptcp"].FailedRuns)
	}
	// Pairs only where both have a value: rounds 1 and 2.
	c := f.Paired("ecf", "mptcp", "goodput_mbit")
	if c.Ratio.N != 2 || !slices.Equal(c.Rounds, []int{1, 2}) || c.Pairs[0] != [2]float64{55, 50} || c.Pairs[1] != [2]float64{57.2, 52} || c.Ratio.Median != 1.1 {
		t.Errorf("paired %+v", c)
	}
	for metric, want := range map[string]float64{"stall_ms": 500, "share:a": 0.25, "bytes:a": 100, "subflows": 2} {
		if got := f.Estimate("mptcp", metric); got.Median != want || got.N != 3 {
			t.Errorf("%s: %+v, want median %v of 3", metric, got, want)
		}
	}
	if m := f.Variants["mptcp"].Metrics; m["subflows"].N != 3 || m["share:a"].N != 3 {
		t.Errorf("stored metrics %v: a count at the top and a path's share are figures", m)
	}
	if _, ok := f.Variants["mptcp"].Metrics["bytes:a"]; ok {
		t.Error("a path's bytes are stored as a metric")
	}
	if got := f.AgainstBest("ecf", []string{"mptcp"}, "goodput_mbit"); got.Ratio.N != 2 {
		t.Errorf("against the best alternative: %+v", got)
	}
	if bad := f.Verify(); len(bad) != 0 {
		t.Errorf("a file as built: %v", bad)
	}
}

// A file whose stored figures were changed by hand, without its runs, is
// caught, naming the figure.
func TestVerifyCatchesAFigureEditedByHand(t *testing.T) {
	f := Build(recorded())
	in := recorded()
	in.Primary = scenario.Primary{Metric: "longest_stall_ms"}
	g := Build(in)
	for _, x := range []*File{f, g} {
		if bad := x.Verify(); len(bad) != 0 {
			t.Fatalf("a file as built: %v", bad)
		}
		data, err := json.Marshal(x)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		if bad := back.Verify(); len(bad) != 0 {
			t.Fatalf("the file as read back: %v", bad)
		}
	}
	f.Variants["mptcp+x"].GoodputMbit.Median = 57
	f.Comparisons["mptcp+x/mptcp"].Ratio.Low = 1.05
	f.Variants["mptcp"].FailedRuns = 0
	f.Variants["mptcp"].Metrics["longest_stall_ms"] = stats.MedianCI([]float64{1})
	f.VsBestAlternative["mptcp+x"].Ratio.Median = 2
	g.Comparisons["mptcp+x/mptcp:longest_stall_ms"].Pairs[0][0] = 1
	bad := strings.Join(append(f.Verify(), g.Verify()...), "\n")
	for _, want := range []string{
		"variants.mptcp+x.goodput_mbit: says median 57",
		"comparisons.mptcp+x/mptcp.ratio: says median 1.1 [1.05, 1.2] n = 2, its runs give median 1.1 [1.1, 1.2] n = 2",
		"variants.mptcp.failed_runs: says 0, its runs hold 1 failed",
		"variants.mptcp.metrics.longest_stall_ms: says median 1",
		"vs_best_alternative.mptcp+x.ratio: says median 2",
		"comparisons.mptcp+x/mptcp:longest_stall_ms.pairs: says [[1 300] [50 100]]",
	} {
		if !strings.Contains(bad, want) {
			t.Errorf("Verify lacks %q in:\n%s", want, bad)
		}
	}
	if n := strings.Count(bad, "\n") + 1; n != 6 {
		t.Errorf("%d discrepancies, want 6:\n%s", n, bad)
	}
}

func TestParseRefusesWhatIsNotAResultsFile(t *testing.T) {
	for data, want := range map[string]string{
		`{"schema": 1, "variants": {"a": {"runs": []}}}`:                 "results schema 1; this mpsteer reads 2",
		`{"schema": 2, "variants": {"a": {"runs": [{"round": 0}]}}}`:     "variants.a.runs[0]: round 0 (rounds count from 1)",
		`{"schema": 2, "variants": {"a": null}}`:                         "variants.a is null",
		`{"schema": 2, "variants": {}}`:                                  "no variants",
		`[{"scenario": "s", "goodput_mbit": 9}]`:                         "[0]: a run summary without a variant",
		`[{"variant": "a", "goodput_mbit": 9}, {"variant": "a"}]`:        "[1]: variant a twice",
		`{"schema": 2, "variants": {"a": {"runs": [{"round": "one"}]}}}`: "cannot unmarshal",
	} {
		if _, err := Parse([]byte(data)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", data, err, want)
		}
	}
}

// The older list of summaries, of an older shape too, is one round.
func TestReadsTheOlderListOfAnOlderShape(t *testing.T) {
	f, err := Parse([]byte(`[{"scenario": "s", "variant": "tcp", "congestion_control": "cubic", "goodput_mbit": 9},
		{"scenario": "s", "variant": "mptcp", "subflows": 2, "goodput_mbit": 18}]`))
	if err != nil {
		t.Fatal(err)
	}
	if c := f.Paired("mptcp", "tcp", "goodput_mbit"); c.Ratio.N != 1 || c.Ratio.Median != 2 {
		t.Errorf("ratio %+v", c)
	}
	if strings.Join(f.VariantNames(), ",") != "tcp,mptcp" || f.Scenario != "s" {
		t.Errorf("order %v, scenario %q", f.VariantNames(), f.Scenario)
	}
	if rep := f.Representative(); len(rep) != 0 {
		t.Errorf("summaries of an older shape are no report.Summary: %+v", rep)
	}
}

// A run that failed before its traffic ran has no summary, and reads back
// as it was written.
func TestARunWithoutSummary(t *testing.T) {
	data, err := json.Marshal(failed(1, 1, "a", "setup: no such device"))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"round":1,"attempt":1,"dir":"a/run-1","failed":true,"reason":"setup: no such device","goodput_mbit":null}`; string(data) != want {
		t.Fatalf("%s, want %s", data, want)
	}
	var r Run
	if err := json.Unmarshal(data, &r); err != nil || r.Fields != nil || r.Summary != nil || r.GoodputMbit != nil || r.Reason != "setup: no such device" {
		t.Fatalf("%+v %v", r, err)
	}
	again, _ := json.Marshal(r)
	if string(again) != string(data) {
		t.Fatalf("read back %s, want %s", again, data)
	}
}
