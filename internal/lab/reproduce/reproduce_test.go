package reproduce_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/reproduce"
	"mpsteer/internal/lab/results"
	"mpsteer/internal/lab/scenario"
)

const repo = "../../.."

// The shipped list: it parses, and every scenario a paper stands behind
// is in it, with variants the scenario has.
func TestShippedPapersList(t *testing.T) {
	p, err := reproduce.Load(filepath.Join(repo, "docs/papers.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, e := range p.Experiments {
		listed[e.Scenario] = true
		s, err := scenario.Parse(e.Scenario, mustRead(t, filepath.Join(repo, "scenarios", e.Scenario+".yaml")))
		if err != nil {
			t.Errorf("%s: %v", e.Scenario, err)
			continue
		}
		for _, r := range e.Rows {
			for _, v := range []string{r.Variant, r.Baseline} {
				if v != "" && s.Variant(v) == nil {
					t.Errorf("%s: row %q: the scenario has no variant %q", e.Scenario, r.What, v)
				}
			}
		}
	}
	files, _ := filepath.Glob(filepath.Join(repo, "scenarios", "*.yaml"))
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		for _, prefix := range []string{"asym-", "prefer-", "fullmesh-", "incremental-", "tenants-", "ramptcp-", "ecf-"} {
			if strings.HasPrefix(name, prefix) && !listed[name] {
				t.Errorf("scenarios/%s.yaml is a paper's experiment but docs/papers.yaml does not list it", name)
			}
		}
	}
}

func mustRead(t *testing.T, f string) []byte {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPapersErrorsNameTheKey(t *testing.T) {
	head := "papers: {a: \"A paper\"}\nexperiments:\n"
	cases := map[string]string{
		"  - {scenario: x, paper: b, figure: f, rows: [{what: w, paper: p, metric: goodput_mbit, variant: v}]}":               `p.yaml:3: experiments[0].paper: unknown paper "b" (valid: a)`,
		"  - {scenario: ../x, paper: a, figure: f, rows: [{what: w, paper: p, metric: goodput_mbit, variant: v}]}":            `experiments[0].scenario: "../x" is not a scenario name`,
		"  - {scenario: x, paper: a, figure: f, rows: [{what: w, paper: p, metric: Goodput!, variant: v}]}":                   `experiments[0].rows[0].metric: "Goodput!" is not a metric`,
		"  - {scenario: x, paper: a, figure: f, rows: [{what: w, paper: p, metric: goodput_mbit, variant: v, as: ratio}]}":    `experiments[0].rows[0].as: ratio needs a baseline variant`,
		"  - {scenario: x, paper: a, figure: f, rows: [{what: w, paper: p, metric: goodput_mbit, variant: v, as: percent}]}":  `experiments[0].rows[0].as: "percent" is not valid (valid: value, ratio, change)`,
		"  - {scenario: x, paper: a, figure: f, rows: [{what: w, metric: goodput_mbit, variant: v}]}":                         `experiments[0].rows[0].paper: missing`,
		"  - {scenario: x, paper: a, figure: f, rows: [{what: w, paper: p, metric: goodput_mbit, variant: v, colour: blue}]}": `experiments[0].rows[0].colour: unknown key "colour"`,
		"  - {scenario: x, paper: a, figure: f, rows: []}":                                                                    `experiments[0].rows: an experiment needs at least one row`,
	}
	for src, want := range cases {
		_, err := reproduce.Parse("p.yaml", []byte(head+src))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s\nerr = %v\nwant %q", src, err, want)
		}
	}
}

// The index over two short runs (testdata/runs: results.json of a
// shortened asym-2-bandwidth and incremental-short run, with a figure),
// one experiment not run, and one failed.
func TestIndexOverRuns(t *testing.T) {
	src := `papers:
  asym: "An Evaluation of Multipath TCP with Highly Asymmetric Subflows"
  emptcp: "eMPTCP"
experiments:
  - scenario: asym-2-bandwidth
    paper: asym
    figure: Table 1, scenario 2
    rows:
      - {what: default MPTCP against TCP, paper: "below TCP", metric: goodput_mbit, variant: mptcp, baseline: tcp, as: ratio}
      - {what: dynthresh against default MPTCP, paper: "+70%", metric: goodput_mbit, variant: mptcp+dynthresh, baseline: mptcp}
      - {what: bytes on path good, paper: "most", metric: "share:good", variant: mptcp+dynthresh}
      - {what: a metric the run lacks, paper: "1 s", metric: recovery_after_flood_s, variant: mptcp}
  - scenario: incremental-short
    paper: emptcp
    figure: Fig. 8a
    rows:
      - {what: median FCT against default MPTCP, paper: "−32.1%", metric: fct_median_ms, variant: mptcp+incremental, baseline: mptcp}
  - scenario: ecf-50-10-1m
    paper: emptcp
    figure: Fig. 9a
    rows:
      - {what: ecf against default MPTCP, paper: "+30.9%", metric: goodput_mbit, variant: mptcp+ecf, baseline: mptcp}
  - scenario: tenants-bg0
    paper: emptcp
    figure: Fig. 7
    rows:
      - {what: spread against default MPTCP, paper: "+23.03%", metric: goodput_mbit, variant: mptcp+spread, baseline: mptcp}
`
	p, err := reproduce.Parse("papers.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/runs")); err != nil {
		t.Fatal(err)
	}
	out, err := reproduce.WriteIndex(p, reproduce.Options{Dir: dir, Failed: map[string]string{"tenants-bg0": "exit status 1"},
		Now: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	html := string(mustRead(t, out))
	for _, want := range []string{
		"2 of 4 experiments have results here",
		`<code>mpsteer lab run scenarios/asym-2-bandwidth.yaml --runs 1 --out ` + filepath.Join(dir, "asym-2-bandwidth") + `</code>`,
		// 210.6 / 383.8 = 55%; 358.4 against 210.6 = +70.2%
		`<td class="num">below TCP</td><td class="num"><strong>55%</strong></td><td>mptcp 210.6 Mbit/s against tcp 383.8 Mbit/s</td>`,
		`<strong>&#43;70.2%</strong>`,
		`<strong>99.9%</strong>`,
		`no recovery_after_flood_s for variant mptcp`,
		// 111.9 against 111.9 ms
		`<td class="num">−32.1%</td><td class="num"><strong>&#43;0.0%</strong></td>`,
		`<img class="fig" src="asym-2-bandwidth/compare.png"`,
		`<img src="asym-2-bandwidth/mptcp/goodput.png" alt="mptcp"`,
		`<a href="asym-2-bandwidth/report.md">`,
		`<a href="#ecf-50-10-1m">ecf-50-10-1m</a> — Fig. 9a <span class="missing">(not run)</span>`,
		`The run failed: exit status 1`,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("index.html lacks %q", want)
		}
	}
	if strings.Contains(html, "fct_cdf.png") && !strings.Contains(html, "incremental-short/fct_cdf.png") {
		t.Error("a figure from the wrong run")
	}
	if t.Failed() {
		t.Logf("index.html:\n%s", html)
	}
}

// Over repeated runs: a value is the median, a change the median of the
// paired ratios, each with its interval; --keep counts a run as done only
// when it is complete with enough rounds.
func TestOursOverRepeatedRuns(t *testing.T) {
	run := func(round int, variant string, g float64) results.Run {
		return results.Run{Round: round, Attempt: 1, Dir: fmt.Sprintf("%s/run-%d", variant, round), GoodputMbit: &g,
			Summary: &report.Summary{Scenario: "x", Variant: variant, GoodputMbit: g}}
	}
	in := results.Input{Scenario: "x", RunsRequested: 3, Complete: true, Order: []string{"mptcp", "mptcp+ecf"},
		Runs: map[string][]results.Run{
			"mptcp":     {run(1, "mptcp", 40), run(2, "mptcp", 50), run(3, "mptcp", 44)},
			"mptcp+ecf": {run(1, "mptcp+ecf", 44), run(2, "mptcp+ecf", 60), run(3, "mptcp+ecf", 44)},
		}}
	f := results.Build(in)
	value := reproduce.Row{Metric: "goodput_mbit", Variant: "mptcp+ecf", As: "value"}
	ours, detail, ok := value.Ours(f)
	if !ok || ours != "44.0 Mbit/s" || detail != "mptcp+ecf, median of 3 runs [44.0 Mbit/s, 60.0 Mbit/s]" {
		t.Errorf("value: %q, %q, %v", ours, detail, ok)
	}
	// Paired ratios 1.1, 1.2, 1.0: the median is 1.1 (not the ratio of
	// the medians, 44/44).
	change := reproduce.Row{Metric: "goodput_mbit", Variant: "mptcp+ecf", Baseline: "mptcp", As: "change"}
	ours, detail, ok = change.Ours(f)
	if !ok || ours != "+10.0% [+0.0%, +20.0%]" || !strings.Contains(detail, "paired ratio 1.100 [1.000, 1.200] over 3 rounds") {
		t.Errorf("change: %q, %q, %v", ours, detail, ok)
	}
	dir := t.TempDir()
	write := func(f *results.File) {
		if err := report.WriteJSON(filepath.Join(dir, "results.json"), f); err != nil {
			t.Fatal(err)
		}
	}
	write(f)
	if !reproduce.Done(dir, 3) || reproduce.Done(dir, 5) {
		t.Error("Done: complete with 3 rounds is done for 3, not for 5")
	}
	in.Complete = false
	write(results.Build(in))
	if reproduce.Done(dir, 1) {
		t.Error("Done: an incomplete run is done")
	}
	if reproduce.Done(t.TempDir(), 1) {
		t.Error("Done: no run at all is done")
	}
}
