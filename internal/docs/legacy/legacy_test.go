package legacy

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"mpsteer/internal/lab/results"
	"mpsteer/internal/provenance"
)

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
	two, err := os.ReadFile("../testdata/two.yaml")
	if err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(scenarios, "two.yaml"), string(two))
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

// convertFixture converts the fixture's archive as fixtureManifest says,
// twice: the same sources must give the same bytes.
func convertFixture(t *testing.T) (*Manifest, map[string][]byte) {
	t.Helper()
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
	return mf, out
}

func TestLegacyConversion(t *testing.T) {
	mf, out := convertFixture(t)
	r, err := results.Parse(out["two/results.json"])
	if err != nil {
		t.Fatal(err)
	}
	if bad := r.Verify(); len(bad) > 0 {
		t.Errorf("the converted file does not verify: %v", bad)
	}
	p := r.Provenance
	if p.Legacy != Note || p.Commit != "abc1234, def5678" || p.Kernel != "unknown" || p.Date != "2026-11-23, 2026-11-24" || p.Check() != "" ||
		!strings.Contains(p.Command, "docs/data/archive/two-abc1234.json, docs/data/archive/two-paired-def5678.json") {
		t.Errorf("provenance %+v", p)
	}
	if r.Variants["mptcp+y"] != nil {
		t.Error("a variant the manifest leaves out was converted")
	}
	// Three rounds: the first file's, and the copy's two.
	if got := r.Values("mptcp", "goodput_mbit"); !slices.Equal(got, []float64{18, 17}) {
		t.Errorf("mptcp %v: the run that did not finish must be left out", got)
	}
	if got := r.Values("mptcp-a", "goodput_mbit"); !slices.Equal(got, []float64{9.4, 9}) {
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
	if got := r.Estimate("mptcp", "reaction_ms"); got.N != 1 || got.Median != 33.5 {
		t.Errorf("the script's figure for the run: %+v", got)
	}
	if c := r.Comparisons["mptcp-a/mptcp"]; c == nil || c.Ratio.N != 2 || len(c.Pairs) != 2 {
		t.Errorf("mptcp-a/mptcp: %+v", c)
	}
	if vb := r.VsBestAlternative["mptcp-a"]; vb == nil || strings.Join(vb.Alternatives, ",") != "mptcp,tcp" {
		t.Errorf("vs the best: %+v", vb)
	}
	var bench struct {
		Provenance provenance.Provenance `json:"provenance"`
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

// A converted file keeps the layout it was first written in: the keys of
// results.json in their order, less what only a run of the runner records.
func TestConvertedLayout(t *testing.T) {
	_, out := convertFixture(t)
	b := out["two/results.json"]
	var top []string
	for _, m := range regexp.MustCompile(`(?m)^  "([a-z_]+)":`).FindAllSubmatch(b, -1) {
		top = append(top, string(m[1]))
	}
	if want := "schema,scenario,file,description,provenance,runs_requested,order,variants,comparisons,vs_best_alternative"; strings.Join(top, ",") != want {
		t.Errorf("top-level keys %v, want %s", top, want)
	}
	var raw struct {
		Provenance  map[string]any
		Variants    map[string]map[string]any
		Comparisons map[string]map[string]any
		VsBest      map[string]map[string]any `json:"vs_best_alternative"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"host", "version", "finished"} {
		if _, ok := raw.Provenance[k]; ok {
			t.Errorf("provenance has %s", k)
		}
	}
	for name, v := range raw.Variants {
		for _, k := range []string{"kind", "median_run"} {
			if _, ok := v[k]; ok {
				t.Errorf("variant %s has %s", name, k)
			}
		}
	}
	for name, c := range raw.Comparisons {
		if _, ok := c["rounds"]; ok {
			t.Errorf("comparison %s has rounds", name)
		}
	}
	if !bytes.Contains(b, []byte("\"attempt\": 1,\n          \"bytes\": 1000,")) {
		t.Errorf("a run's keys are not in order:\n%s", b)
	}
	got, err := layout.apply(json.RawMessage(`{"z":1,"complete":true,"variants":{"b":{"kind":"tcp","metrics":{},"runs":[]},"a":{"metrics":{"x":1}}}}`))
	if want := `{"z":1,"variants":{"b":{"runs":[]},"a":{"metrics":{"x":1}}}}`; err != nil || string(got) != want {
		t.Errorf("layout: %s %v, want %s", got, err, want)
	}
}
