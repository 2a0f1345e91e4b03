package labdata

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mpsteer/internal/stats"
)

// results builds a schema-2 file with the given runs per variant, as
// [round, attempt, goodput, failed(0/1)].
func results(t *testing.T, runs map[string][][4]float64) *Results {
	t.Helper()
	r := &Results{Schema: Schema, Scenario: "s", Variants: map[string]*Variant{}, path: "s/results.json",
		Provenance: &Provenance{Commit: "abc1234", Command: "mpsteer lab run s.yaml --runs 3", Kernel: "6.18.44", Date: "2026-11-26T10:00:00Z"}}
	for name, list := range runs {
		v := &Variant{}
		for _, x := range list {
			run := Run{Round: int(x[0]), Attempt: int(x[1]), Failed: x[3] == 1, Variant: name,
				Fields: map[string]any{"goodput_mbit": x[2], "metrics": map[string]any{"stall_ms": 10 * x[2]}, "paths": map[string]any{"a": map[string]any{"share": 0.25}}}}
			if run.Failed {
				run.Reason = "traffic did not finish (4.0 of 30 s)"
			}
			v.Runs = append(v.Runs, run)
		}
		r.Variants[name] = v
		r.Order = append(r.Order, name)
	}
	return r
}

func TestValuesLeaveFailedRunsOutAndPairByRound(t *testing.T) {
	r := results(t, map[string][][4]float64{
		"mptcp": {{1, 1, 50, 0}, {2, 1, 10, 1}, {2, 2, 52, 0}, {3, 1, 48, 0}, {4, 1, 9, 1}, {4, 2, 8, 1}},
		"ecf":   {{1, 1, 55, 0}, {2, 1, 57.2, 0}, {3, 1, 30, 1}, {4, 1, 60, 0}},
	})
	if got := r.Values("mptcp", "goodput_mbit"); !equal(got, []float64{50, 52, 48}) {
		t.Errorf("mptcp values %v: round 2's re-run stands for it, round 4 failed twice", got)
	}
	if got := r.Failed("mptcp"); got != 3 {
		t.Errorf("failed %d, want 3", got)
	}
	// Pairs only where both have a value: rounds 1 and 2.
	s, pairs := r.Ratio("ecf", "mptcp", "goodput_mbit")
	if s.N != 2 || len(pairs) != 2 || pairs[0] != [2]float64{55, 50} || pairs[1] != [2]float64{57.2, 52} {
		t.Errorf("ratio %+v pairs %v", s, pairs)
	}
	if s.Median != 1.1 {
		t.Errorf("median ratio %v, want 1.1 (the lower of 1.1 and 1.1)", s.Median)
	}
	if got := r.Summary("mptcp", "stall_ms"); got.Median != 500 || got.N != 3 {
		t.Errorf("a metric: %+v", got)
	}
	if got := r.Summary("mptcp", "share:a"); got.Median != 0.25 {
		t.Errorf("a path's share: %+v", got)
	}
	if got := r.RatioToBest("ecf", []string{"mptcp"}, "goodput_mbit"); got.N != 2 {
		t.Errorf("against the best alternative: %+v", got)
	}
}

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A file whose stored figures were changed by hand, without its runs, is
// caught, naming the figure.
func TestVerifyCatchesASummaryEditedByHand(t *testing.T) {
	r := results(t, map[string][][4]float64{"mptcp": {{1, 1, 50, 0}, {2, 1, 52, 0}, {3, 1, 48, 0}}, "ecf": {{1, 1, 55, 0}, {2, 1, 57, 0}, {3, 1, 49, 0}}})
	r.Summarize(nil)
	if bad := r.Verify(); len(bad) != 0 {
		t.Fatalf("a file as computed: %v", bad)
	}
	b, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse("s/results.json", b)
	if err != nil {
		t.Fatal(err)
	}
	if bad := back.Verify(); len(bad) != 0 {
		t.Fatalf("the file as read back: %v", bad)
	}
	back.Variants["ecf"].Goodput.Median = 57
	back.Comparisons["ecf/mptcp"].Ratio.Low = 1.05
	back.Variants["mptcp"].FailedRuns = 1
	bad := strings.Join(back.Verify(), "\n")
	for _, want := range []string{
		"s/results.json: variants.ecf.goodput_mbit: says median 57",
		"s/results.json: comparisons.ecf/mptcp.ratio: says median",
		"s/results.json: variants.mptcp.failed_runs: says 1, its runs hold 0 failed",
	} {
		if !strings.Contains(bad, want) {
			t.Errorf("Verify lacks %q in:\n%s", want, bad)
		}
	}
}

func TestParseRefusesOtherSchemas(t *testing.T) {
	if _, err := Parse("x.json", []byte(`{"schema": 1, "variants": {"a": {"runs": []}}}`)); err == nil || !strings.Contains(err.Error(), "x.json: schema 1, this build reads schema 2") {
		t.Errorf("err = %v", err)
	}
	if _, err := Parse("x.json", []byte(`{"schema": 2, "variants": {"a": {"runs": [{"round": 0}]}}}`)); err == nil || !strings.Contains(err.Error(), "variants.a.runs[0]: round 0") {
		t.Errorf("err = %v", err)
	}
}

func TestProvenanceCheck(t *testing.T) {
	full := Provenance{Commit: "803c952", Command: "mpsteer lab run x", Kernel: "6.18.44", Date: "2026-11-26T10:00:00Z"}
	if msg := full.Check(); msg != "" {
		t.Errorf("complete provenance: %s", msg)
	}
	if s := full.Summary(); s != "commit 803c952, kernel 6.18.44, 2026-11-26" {
		t.Errorf("summary %q", s)
	}
	noKernel := full
	noKernel.Kernel = ""
	if msg := noKernel.Check(); msg != "provenance without kernel" {
		t.Errorf("no kernel: %q", msg)
	}
	unknown := full
	unknown.Kernel = "unknown"
	if msg := unknown.Check(); !strings.Contains(msg, "not marked legacy") {
		t.Errorf("unknown, not legacy: %q", msg)
	}
	unknown.Legacy = LegacyNote
	if msg := unknown.Check(); msg != "" {
		t.Errorf("legacy with an unknown kernel: %q", msg)
	}
	if s := unknown.Summary(); s != "legacy (recorded before provenance was kept): commit 803c952, 2026-11-26" {
		t.Errorf("legacy summary %q", s)
	}
	var none *Provenance
	if msg := none.Check(); !strings.Contains(msg, "no provenance") {
		t.Errorf("nil: %q", msg)
	}
}

func TestFormat(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{FormatSummary(stats.Estimate{Median: 51.94, Low: 50.8, High: 53.1, N: 5}, UnitOf("goodput_mbit")), "51.9 Mbit/s (95% CI 50.8–53.1, n = 5)"},
		{FormatSummary(stats.Estimate{Median: 51.94, Low: 51.94, High: 51.94, N: 1}, UnitOf("goodput_mbit")), "51.9 Mbit/s (n = 1)"},
		{FormatSummary(stats.Estimate{}, UnitOf("goodput_mbit")), "no runs"},
		{FormatSummary(stats.Estimate{Median: 0.93, Low: 0.9, High: 0.955, N: 3}, UnitOf("adhoc_share_from_200ms_after_up_mean")), "93.0% (95% CI 90.0–95.5%, n = 3)"},
		{FormatSummary(stats.Estimate{Median: 82.5, Low: 81, High: 83, N: 3}, UnitOf("adhoc_link_up_to_first_data_ms_median")), "82.5 ms (95% CI 81.0–83.0, n = 3)"},
		{FormatSummary(stats.Estimate{Median: 469, Low: 361, High: 469, N: 2}, UnitOf("retransmits")), "469 segments (95% CI 361–469, n = 2)"},
		{FormatRatio(stats.Estimate{Median: 1.012, Low: 0.995, High: 1.03, N: 5}, "change"), "+1.2% (95% CI −0.5 to +3.0%, n = 5)"},
		{FormatRatio(stats.Estimate{Median: 0.96, Low: 0.941, High: 0.982, N: 5}, "ratio"), "96.0% (95% CI 94.1–98.2%, n = 5)"},
		{FormatRatio(stats.Estimate{Median: 2.08, Low: 2.08, High: 2.08, N: 1}, "change"), "+108.0% (n = 1)"},
		{FormatRatio(stats.Estimate{}, "change"), "no paired runs"},
		{FormatVerdict(stats.Estimate{N: 1}, string(stats.TooFewValues)), "too few runs (n = 1: no interval)"},
		{Num(-0.0001, 1), "0.0"},
		{Signed(-0.5, 1), "−0.5"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// The legacy conversion: a fixture archive of the shapes docs/data held
// (a list of one run's summaries, a list of such lists, a mapping of them,
// a script's per-variant figures) and a manifest over it.
func legacyFixture(t *testing.T) (data, scenarios string) {
	t.Helper()
	root := t.TempDir()
	data, scenarios = filepath.Join(root, "data"), filepath.Join(root, "scenarios")
	for _, d := range []string{filepath.Join(data, "archive"), scenarios} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(f, s string) {
		if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(scenarios, "two.yaml"), `name: two
description: "two paths"
paths:
  - {name: a, rate: 10mbit, delay: 10ms}
  - {name: b, rate: 10mbit, delay: 10ms}
traffic:
  - {type: bulk, duration: 30s}
variants:
  - {name: tcp, kind: tcp, path: a}
  - {name: mptcp, kind: mptcp}
  - {name: mptcp-a, kind: mptcp, paths: [a]}
`)
	sum := func(scenario, variant string, gp, dur float64, errs string) string {
		e := ""
		if errs != "" {
			e = `, "errors": ["` + errs + `"]`
		}
		return `{"scenario": "` + scenario + `", "variant": "` + variant + `", "congestion_control": "bbr", "subflows": 2, "duration_s": ` +
			jsonNum(dur) + `, "bytes": 1000, "goodput_mbit": ` + jsonNum(gp) + `, "retransmits": 3, "paths": {"a": {"bytes": 600, "share": 0.6}}` + e + `}`
	}
	// One run of every variant.
	write(filepath.Join(data, "archive", "two-abc1234.json"), "["+sum("two", "tcp", 9.5, 30, "")+", "+sum("two", "mptcp", 18, 30.2, "")+", "+sum("two", "mptcp-a", 9.4, 30, "")+"]")
	// Two runs of a copy of the scenario: one did not finish by its errors,
	// one lasted 12 of 30 s.
	write(filepath.Join(data, "archive", "two-paired-def5678.json"), "[["+sum("two-x", "mptcp", 17, 30, "")+", "+sum("two-x", "mptcp-a", 9, 30, "")+", "+sum("two-x", "mptcp+y", 1, 30, "")+"], ["+
		sum("two-x", "mptcp", 16, 31, "traffic did not finish within 1m0s; stopped")+", "+sum("two-x", "mptcp-a", 9.6, 12, "")+"]]")
	write(filepath.Join(data, "archive", "metrics.json"), `{"/tmp/r/two": [{"variant": "mptcp", "goodput_mbit": 18, "reaction_ms": 33.5}, {"variant": "tcp", "goodput_mbit": 9.5, "reaction_ms": null}]}`)
	write(filepath.Join(data, "archive", "bench.json"), `[{"subflows": 10, "median_us": 600}]`)
	write(filepath.Join(data, "archive", "old.json"), `[]`)
	return data, scenarios
}

func jsonNum(v float64) string { b, _ := json.Marshal(v); return string(b) }

const fixtureManifest = `scenarios:
  two:
    sources:
      - file: archive/two-abc1234.json
        commit: abc1234
        recorded: 2026-11-23
        metrics_from: {file: archive/metrics.json, key: /tmp/r/two, fields: [reaction_ms]}
      - file: archive/two-paired-def5678.json
        commit: def5678
        recorded: 2026-11-24
        as: two-x
        variants: [mptcp, mptcp-a]
        why: "mptcp+y is not a variant the scenario ships"
bench:
  observe: {file: archive/bench.json, commit: unknown, recorded: 2026-11-23, command: mpsteer bench observe}
archived:
  - {file: archive/old.json, why: "an older build"}
`

func TestLegacyConversion(t *testing.T) {
	data, scenarios := legacyFixture(t)
	mf, err := ParseManifest("legacy.yaml", []byte(fixtureManifest))
	if err != nil {
		t.Fatal(err)
	}
	out, err := mf.Convert(data, scenarios)
	if err != nil {
		t.Fatal(err)
	}
	again, err := mf.Convert(data, scenarios)
	if err != nil || !bytes.Equal(out["two/results.json"], again["two/results.json"]) {
		t.Fatal("two conversions of the same sources differ")
	}
	r, err := Parse("two/results.json", out["two/results.json"])
	if err != nil {
		t.Fatal(err)
	}
	if bad := r.Verify(); len(bad) > 0 {
		t.Errorf("the converted file does not verify: %v", bad)
	}
	p := r.Provenance
	if p.Legacy != LegacyNote || p.Commit != "abc1234, def5678" || p.Kernel != "unknown" || p.Date != "2026-11-23, 2026-11-24" || p.Check() != "" ||
		!strings.Contains(p.Command, "docs/data/archive/two-abc1234.json, docs/data/archive/two-paired-def5678.json") {
		t.Errorf("provenance %+v", p)
	}
	if r.Variants["mptcp+y"] != nil {
		t.Error("a variant the manifest leaves out was converted")
	}
	// Three rounds: the first file's, and the copy's two.
	if got := r.Values("mptcp", "goodput_mbit"); !equal(got, []float64{18, 17}) {
		t.Errorf("mptcp %v: the run that did not finish must be left out", got)
	}
	if got := r.Values("mptcp-a", "goodput_mbit"); !equal(got, []float64{9.4, 9}) {
		t.Errorf("mptcp-a %v: the run of 12 of 30 s must be left out", got)
	}
	reasons := map[string]string{}
	for _, v := range []string{"mptcp", "mptcp-a"} {
		for _, run := range r.Variants[v].Runs {
			if run.Failed {
				reasons[v] = run.Reason
			}
		}
	}
	if reasons["mptcp"] != "traffic did not finish within 1m0s; stopped" || reasons["mptcp-a"] != "traffic did not finish (12.0 of 30 s)" {
		t.Errorf("failed runs' reasons: %q", reasons)
	}
	if got := r.Variants["tcp"].Runs[0].Fields["congestion_control"]; got != "bbr" {
		t.Errorf("a run keeps its summary's fields: congestion_control = %v", got)
	}
	if got := r.Summary("mptcp", "reaction_ms"); got.N != 1 || got.Median != 33.5 {
		t.Errorf("the script's figure for the run: %+v", got)
	}
	if c := r.Comparisons["mptcp-a/mptcp"]; c == nil || c.Ratio.N != 2 || len(c.Pairs) != 2 {
		t.Errorf("mptcp-a/mptcp: %+v", c)
	}
	if vb := r.VsBest["mptcp-a"]; vb == nil || strings.Join(vb.Alternatives, ",") != "mptcp,tcp" {
		t.Errorf("vs the best: %+v", vb)
	}
	var bench struct {
		Provenance Provenance `json:"provenance"`
		Results    []map[string]float64
	}
	if err := json.Unmarshal(out["bench/observe.json"], &bench); err != nil || bench.Results[0]["median_us"] != 600 || bench.Provenance.Check() != "" {
		t.Errorf("bench: %s (%v)", out["bench/observe.json"], err)
	}
	acc := mf.Accounted()
	for _, f := range []string{"archive/two-abc1234.json", "archive/two-paired-def5678.json", "archive/metrics.json", "archive/bench.json", "archive/old.json"} {
		if acc[f] == "" {
			t.Errorf("%s is not accounted for", f)
		}
	}
}

func TestLegacyErrors(t *testing.T) {
	data, scenarios := legacyFixture(t)
	for _, c := range []struct{ manifest, want string }{
		{"scenarios:\n  two:\n    sources:\n      - {file: archive/two-abc1234.json, commit: abc1234, recorded: 2026-11-23, variants: [tcp]}\n",
			"legacy.yaml:4: scenarios.two.sources[0].variants: say why only these variants' runs count"},
		{"scenarios:\n  two:\n    sources:\n      - {file: archive/two-abc1234.json, commit: HEAD, recorded: 2026-11-23}\n",
			`scenarios.two.sources[0].commit: "HEAD": the commit the file's name gives`},
		{"scenarios:\n  two:\n    sources:\n      - {file: ../x.json, commit: abc1234, recorded: 2026-11-23}\n",
			`sources[0].file: "../x.json": give a path inside the data directory`},
		{"archived:\n  - {file: archive/old.json}\n", "archived[0].why: say why no converted file uses it"},
	} {
		if _, err := ParseManifest("legacy.yaml", []byte(c.manifest)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s\nerr = %v\nwant %q", c.manifest, err, c.want)
		}
	}
	for _, c := range []struct{ manifest, want string }{
		{"scenarios:\n  two:\n    sources:\n      - {file: archive/two-abc1234.json, commit: abc1234, recorded: 2026-11-23, as: other}\n",
			`legacy.yaml:4: two: archive/two-abc1234.json holds no runs of scenario "other"`},
		{"scenarios:\n  two:\n    sources:\n      - {file: archive/metrics.json, commit: abc1234, recorded: 2026-11-23}\n",
			`archive/metrics.json is a mapping: say which part with key`},
		{"scenarios:\n  two:\n    sources:\n      - file: archive/two-abc1234.json\n        commit: abc1234\n        recorded: 2026-11-23\n        metrics_from: {file: archive/metrics.json, key: /tmp/r/two, fields: [reaction_ms, goodput_mbit]}\n",
			`field goodput_mbit is already a value of the run`},
		{"scenarios:\n  nosuch:\n    sources:\n      - {file: archive/two-abc1234.json, commit: abc1234, recorded: 2026-11-23}\n",
			`nosuch.yaml`},
	} {
		mf, err := ParseManifest("legacy.yaml", []byte(c.manifest))
		if err != nil {
			t.Errorf("%s: %v", c.manifest, err)
			continue
		}
		if _, err := mf.Convert(data, scenarios); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s\nerr = %v\nwant %q", c.manifest, err, c.want)
		}
	}
}

// A run directory of an older `lab run` holds a list of summaries: read as
// one round.
func TestLoadRunReadsTheOlderList(t *testing.T) {
	f := filepath.Join(t.TempDir(), "results.json")
	if err := os.WriteFile(f, []byte(`[{"scenario": "s", "variant": "tcp", "goodput_mbit": 9}, {"scenario": "s", "variant": "mptcp", "goodput_mbit": 18}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := LoadRun(f)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := r.Ratio("mptcp", "tcp", "goodput_mbit"); s.N != 1 || s.Median != 2 {
		t.Errorf("ratio %+v", s)
	}
	if strings.Join(r.VariantNames(), ",") != "tcp,mptcp" {
		t.Errorf("order %v", r.VariantNames())
	}
}
