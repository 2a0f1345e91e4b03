package reproduce_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/lab/reproduce"
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
		for _, prefix := range []string{"asym-", "prefer-", "fullmesh-", "incremental-", "tenants-", "ramptcp-", "ecf-", "atsss-"} {
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
	head := "papers: {a: \"A paper\", b: \"B paper\"}\nquotes:\n  qa: {paper: a, where: \"Fig. 1\", says: \"by up to 5%\", quote: \"It helps by up to 5% here.\"}\n  qb: {paper: b, where: \"§2\", says: \"twice\", quote: \"It is twice as fast.\"}\nexperiments:\n"
	cases := map[string]string{
		"  - {scenario: x, paper: c, figure: f, rows: [{what: w, quote: qa, metric: goodput_mbit, variant: v}]}":                                                                                                  `p.yaml:6: experiments[0].paper: unknown paper "c" (valid: a, b)`,
		"  - {scenario: ../x, paper: a, figure: f, rows: [{what: w, quote: qa, metric: goodput_mbit, variant: v}]}":                                                                                               `experiments[0].scenario: "../x" is not a scenario name`,
		"  - {scenario: x, paper: a, figure: f, rows: [{what: w, quote: qa, metric: Goodput!, variant: v}]}":                                                                                                      `experiments[0].rows[0].metric: "Goodput!" is not a metric`,
		"  - {scenario: x, paper: a, figure: f, rows: [{what: w, quote: qa, metric: goodput_mbit, variant: v, as: ratio}]}":                                                                                       `experiments[0].rows[0].as: ratio needs a baseline variant`,
		"  - {scenario: x, paper: a, figure: f, rows: [{what: w, quote: qa, metric: goodput_mbit, variant: v, as: percent}]}":                                                                                     `experiments[0].rows[0].as: "percent" is not valid (valid: value, ratio, change)`,
		"  - {scenario: x, paper: a, figure: f, rows: [{what: w, metric: goodput_mbit, variant: v}]}":                                                                                                             `experiments[0].rows[0].quote: missing: the id of the paper's quote beside this number, or a note`,
		"  - {scenario: x, paper: a, figure: f, rows: [{what: w, quote: qz, metric: goodput_mbit, variant: v}]}":                                                                                                  `experiments[0].rows[0].quote: unknown quote "qz"`,
		"  - {scenario: x, paper: a, figure: f, rows: [{what: w, quote: qb, metric: goodput_mbit, variant: v}]}":                                                                                                  `experiments[0].rows[0].quote: qb is a quote of b, not of this experiment's paper a`,
		"  - {scenario: x, paper: a, figure: f, rows: [{what: w, quote: qa, metric: goodput_mbit, variant: v, colour: blue}]}":                                                                                    `experiments[0].rows[0].colour: unknown key "colour"`,
		"  - {scenario: x, paper: a, figure: f, rows: []}":                                                                                                                                                        `experiments[0].rows: an experiment needs at least one row`,
		"  - {scenario: x, paper: a, rows: [{what: w, note: n, metric: goodput_mbit, variant: v}]}":                                                                                                               `experiments[0].figure: missing`,
		"  - {scenario: x, paper: a, figure: f, rows: [{what: w, quote: qa, metric: goodput_mbit, variant: v}]}\nbenches:\n  - {bench: Over head, paper: a, figure: f, rows: [{what: w, quote: qa, value: a.b}]}": `benches[0].bench: "Over head" is not a benchmark's name`,
		"  - {scenario: x, paper: a, figure: f, rows: [{what: w, quote: qa, metric: goodput_mbit, variant: v}]}\nbenches:\n  - {bench: o, paper: a, figure: f, rows: [{what: w, quote: qb, value: a.b}]}":         `benches[0].rows[0].quote: qb is a quote of b, not of this bench's paper a`,
		"  - {scenario: x, paper: a, figure: f, rows: [{what: w, quote: qa, metric: goodput_mbit, variant: v}]}\nbenches:\n  - {bench: o, paper: a, figure: f, rows: [{what: w, quote: qa, value: \"a[0]\"}]}":    `benches[0].rows[0].value: "a[0]" is not a path in the benchmark's JSON`,
		"  - {scenario: x, paper: a, figure: f, rows: [{what: w, quote: qa, metric: goodput_mbit, variant: v}]}\nbenches:\n  - {bench: o, paper: a, figure: f, rows: []}":                                         `benches[0].rows: a bench needs at least one row`,
		"  - {scenario: x, paper: a, figure: f, rows: [{what: w, quote: qa, metric: goodput_mbit, variant: v}]}\nbenches:\n  - {bench: o, paper: a, figure: f, rows: [{what: w, value: a}]}":                      `benches[0].rows[0].quote: missing`,
	}
	for src, want := range cases {
		_, err := reproduce.Parse("p.yaml", []byte(head+src))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s\nerr = %v\nwant %q", src, err, want)
		}
	}
	// A quote's says must be the paper's own words, part of the quote.
	bad := "papers: {a: \"A\"}\nquotes:\n  qa: {paper: a, where: \"Fig. 1\", says: \"on average 5%\", quote: \"It helps by up to 5% here.\"}\nexperiments:\n  - {scenario: x, paper: a, figure: f, rows: [{what: w, quote: qa, metric: goodput_mbit, variant: v}]}\n"
	_, err := reproduce.Parse("p.yaml", []byte(bad))
	if err == nil || !strings.Contains(err.Error(), `p.yaml:3: quotes.qa.says: "on average 5%" is not part of the quote`) {
		t.Errorf("says outside the quote: err = %v", err)
	}
}

// Every row of the shipped list stands beside a quote with its section or
// figure, or says why the paper gives none; the numbers issue 21 found
// misattributed stand where the papers put them.
func TestShippedQuotes(t *testing.T) {
	p, err := reproduce.Load(filepath.Join(repo, "docs/papers.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	quoteOf := map[string]map[string]bool{} // scenario → quote ids
	for _, e := range p.Experiments {
		quoteOf[e.Scenario] = map[string]bool{}
		for _, r := range e.Rows {
			if r.Quote != "" {
				quoteOf[e.Scenario][r.Quote] = true
			}
			if e.Paper == "emptcp" && strings.HasPrefix(e.Scenario, "ecf-") && strings.Contains(e.Figure, "Mbit/s") {
				t.Errorf("%s: the figure %q gives rates the paper does not (they belong in setting)", e.Scenario, e.Figure)
			}
		}
	}
	for _, c := range []struct {
		quote, where, says string
		in, notIn          []string
	}{
		{"emptcp-pm-fct", "§I", "by up to 32.1%", []string{"incremental-short"}, nil},
		{"fullmesh-8-paths", "8 paths per address pair", "83% improvement", []string{"fullmesh-8"}, []string{"fullmesh-2", "fullmesh-4"}},
		{"ramptcp-fig3-retransmits", "Fig. 3", "≈ 58% reduction in retransmissions", []string{"ramptcp-interference"}, []string{"ramptcp-loss", "ramptcp-loss-bbr"}},
		{"ramptcp-fig3-goodput", "Fig. 3", "≈ 19% increase in application goodput", []string{"ramptcp-interference"}, []string{"ramptcp-loss", "ramptcp-loss-bbr"}},
		{"prefer-recovery-modified", "§IV.E", "around 90ms", []string{"prefer-outage", "prefer-ifdown"}, nil},
		{"prefer-recovery-standard", "§IV.E", "around 140ms", []string{"prefer-outage-rtt40"}, nil},
		{"emptcp-fig7a", "Fig. 7a", "by 23.03%", []string{"tenants-bg0"}, []string{"tenants-bg10", "tenants-bg20", "tenants-bg30"}},
		{"emptcp-fig7b-3g", "Fig. 7b", "as large as 32.3%", []string{"tenants-bg30"}, nil},
		{"emptcp-fig9a-avg", "rates and buffers not given", "on average 30.9%", []string{"ecf-50-10-1m"}, nil},
	} {
		q, ok := p.Quotes[c.quote]
		if !ok {
			t.Errorf("no quote %s", c.quote)
			continue
		}
		if !strings.Contains(q.Where, c.where) || !strings.Contains(q.Says, c.says) {
			t.Errorf("%s: where %q, says %q; want %q in where and %q in says", c.quote, q.Where, q.Says, c.where, c.says)
		}
		for _, s := range c.in {
			if !quoteOf[s][c.quote] {
				t.Errorf("%s does not stand beside %s", c.quote, s)
			}
		}
		for _, s := range c.notIn {
			if quoteOf[s][c.quote] {
				t.Errorf("%s stands beside %s, which is not the set-up it comes from", c.quote, s)
			}
		}
	}
	for _, q := range p.Quotes {
		if strings.Contains(q.Text, "2 RTTs") || strings.Contains(q.Text, "2 RTT") {
			t.Errorf("%s: the RAMPTCP poster says nothing of a reaction within 2 RTTs", q.ID)
		}
	}
}

// The index over two short runs (testdata/runs: a results.json of schema 2
// for a shortened asym-2-bandwidth, three rounds, one failed run re-run;
// and the list of summaries an older incremental-short run wrote), one
// experiment not run, and one failed.
func TestIndexOverRuns(t *testing.T) {
	src := `papers:
  asym: "An Evaluation of Multipath TCP with Highly Asymmetric Subflows"
  emptcp: "eMPTCP"
quotes:
  below: {paper: asym, where: "§V.F, Fig. 7b", says: "less than the TCP throughput", quote: "MPTCP is underperforming as its throughput is less than the TCP throughput."}
  fct: {paper: emptcp, where: "§I", says: "by up to 32.1%", quote: "The path-manager can reduce the flow completion time of small flows by up to 32.1%."}
  avg: {paper: emptcp, where: "Fig. 9a", says: "on average 30.9%", quote: "by at most 41.6% and on average 30.9%."}
  bg0: {paper: emptcp, where: "Fig. 7a", says: "by 23.03%", quote: "by 23.03% when there is no background traffic."}
experiments:
  - scenario: asym-2-bandwidth
    paper: asym
    figure: Table 1, scenario 2
    setting: a shortened run
    rows:
      - {what: default MPTCP against TCP, quote: below, metric: goodput_mbit, variant: mptcp, baseline: tcp, as: ratio}
      - {what: dynthresh against default MPTCP, note: "the paper gives no number", metric: goodput_mbit, variant: mptcp+dynthresh, baseline: mptcp}
      - {what: bytes on path good, note: "none", metric: "share:good", variant: mptcp+dynthresh}
      - {what: a metric the run lacks, note: "none", metric: recovery_after_flood_s, variant: mptcp}
  - scenario: incremental-short
    paper: emptcp
    figure: Fig. 8a
    rows:
      - {what: median FCT against default MPTCP, quote: fct, metric: fct_median_ms, variant: mptcp+incremental, baseline: mptcp}
  - scenario: ecf-50-10-1m
    paper: emptcp
    figure: Fig. 9a
    rows:
      - {what: ecf against default MPTCP, quote: avg, metric: goodput_mbit, variant: mptcp+ecf, baseline: mptcp}
  - scenario: tenants-bg0
    paper: emptcp
    figure: Fig. 7a
    rows:
      - {what: spread against default MPTCP, quote: bg0, metric: goodput_mbit, variant: mptcp+spread, baseline: mptcp}
benches:
  - bench: overhead
    paper: emptcp
    figure: Figs. 5b and 5c
    setting: veth links
    rows:
      - {what: the largest share, quote: fct, value: summary.length_share_pct_max, unit: "%"}
      - {what: a figure the file lacks, note: "none", value: summary.nothing}
  - bench: rate
    paper: emptcp
    figure: nowhere
    rows:
      - {what: never run, note: "none", value: x}
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
		"3 of 6 experiments have results here",
		// A benchmark's figures, provenance and plots (the one that exists).
		`<code>mpsteer bench overhead --out ` + filepath.Join(dir, "bench") + `</code>`,
		`<a href="#bench-overhead">bench overhead</a> — Figs. 5b and 5c</li>`,
		`<a href="#bench-rate">bench rate</a> — nowhere <span class="missing">(not run)</span>`,
		`<strong>1.23%</strong></td><td>overhead.json summary.length_share_pct_max</td>`,
		`summary.nothing: no &#34;nothing&#34;`,
		`Measured: commit abc1234, kernel 6.18.44, 2026-11-27.`,
		`<img class="fig" src="bench/overhead-length.png"`,
		`<a href="bench/overhead.json">overhead.json</a>`,
		`<code>mpsteer lab run scenarios/asym-2-bandwidth.yaml --out ` + filepath.Join(dir, "asym-2-bandwidth") + `</code>`,
		`Our set-up: a shortened run.`,
		`Measured: commit abc1234, kernel 6.18.44, 2026-11-26.`,
		// The paper's words, with where they come from, beside ours.
		`<td class="says">“less than the TCP throughput” (§V.F, Fig. 7b)<blockquote>“MPTCP is underperforming as its throughput is less than the TCP throughput.”</blockquote></td>`,
		// mptcp/tcp per round: 210.6/383.8, 200.0/380.0 (round 2's re-run;
		// its failed first attempt is left out), 220.0/385.0.
		`<strong>54.9% (95% CI 52.6–57.1%, n = 3)</strong>`,
		`mptcp 210.6 Mbit/s (95% CI 200.0–220.0, n = 3) (1 failed run(s) left out) against tcp 383.8 Mbit/s (95% CI 380.0–385.0, n = 3)`,
		// dynthresh against mptcp: 358.4/210.6, 360/200, 350/220.
		`<strong>&#43;70.2% (95% CI &#43;59.1 to &#43;80.0%, n = 3)</strong>`,
		`<td class="says"><em>the paper gives no number</em></td>`,
		`<strong>99.8% (95% CI 99.7–99.9%, n = 3)</strong>`,
		`no recovery_after_flood_s for variant mptcp`,
		// The older run's list of summaries: one round, 111.9 against 111.9 ms.
		`<td class="says">“by up to 32.1%” (§I)`,
		`<strong>0.0% (n = 1)</strong>`,
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
	if strings.Contains(html, "overhead-missing.png") {
		t.Error("a plot the benchmark lists but did not write")
	}
	if strings.Contains(html, "fct_cdf.png") && !strings.Contains(html, "incremental-short/fct_cdf.png") {
		t.Error("a figure from the wrong run")
	}
	if t.Failed() {
		t.Logf("index.html:\n%s", html)
	}
}
