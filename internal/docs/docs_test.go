package docs

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mpsteer/internal/lab/results"
)

func TestParseMarkers(t *testing.T) {
	doc := "a <!-- fig: s value tcp -->1<!-- /fig --> b <!-- paper: q -->x<!-- /paper -->\n<!-- plain comment -->\n<!-- table: t -->\n| a |\n<!-- /table -->\n"
	ms, err := Parse("d.md", doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 || ms[0].Kind != KindFig || ms[0].Spec != "s value tcp" || ms[0].Body(doc) != "1" ||
		ms[1].Kind != KindPaper || ms[1].Body(doc) != "x" || ms[2].Kind != KindTable || ms[2].Body(doc) != "\n| a |\n" || ms[2].Line != 3 {
		t.Fatalf("markers %+v", ms)
	}
	out := Replace(doc, ms, []string{"2", "y", "\n| b |\n"})
	if want := "a <!-- fig: s value tcp -->2<!-- /fig --> b <!-- paper: q -->y<!-- /paper -->\n<!-- plain comment -->\n<!-- table: t -->\n| b |\n<!-- /table -->\n"; out != want {
		t.Errorf("Replace:\n%s\nwant\n%s", out, want)
	}
	for src, want := range map[string]string{
		"x\n<!-- fig: a value b -->1\n<!-- /fig -->":      "d.md:2: <!-- fig: a value b --> is not closed by <!-- /fig --> on the same line",
		"x <!-- table: t -->\n<!-- /table -->":            "d.md:1: <!-- table: t --> must stand on a line of its own",
		"<!-- table: t -->\n| a |\n":                      "d.md:1: <!-- table: t --> is not closed by <!-- /table -->",
		"<!-- fig: -->x<!-- /fig -->":                     "d.md:1: <!-- fig: --> says nothing",
		"a <!-- /paper --> b":                             "d.md:1: <!-- /paper --> closes no marker",
		"<!-- fig: a value b --><!-- x -->1<!-- /fig -->": "holds another comment",
	} {
		if _, err := Parse("d.md", src); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", src, err, want)
		}
	}
}

func TestFindNumbers(t *testing.T) {
	for s, want := range map[string][]string{
		"took 12.5 ms and +3.2%, −0.5% or 40ms":    {"12.5 ms", "+3.2%", "−0.5%", "40ms"},
		"ecf-50-10-512k v0.94 10.0.0.0/8 1:100 §4": nil,
		"a 2-core VM, Fig. 9a, scenario 5":         nil,
		"at 400 Mbit/s and 64 KiB, 1.37× a no-op":  {"400 Mbit/s", "64 KiB", "1.37×"},
		"200 segments, 3 RTTs, 5 s":                {"200 segments", "3 RTTs", "5 s"},
		"3 sessions, 5 seconds":                    {"5 seconds"},
	} {
		var got []string
		for _, n := range findNumbers(s, false) {
			got = append(got, s[n[0]:n[1]])
		}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("%q: %q, want %q", s, got, want)
		}
	}
	// In code, config glues its units: only a spaced one or a percentage counts.
	var got []string
	s := "probe_interval: 25ms, rate 10 ms, loss: 1%"
	for _, n := range findNumbers(s, true) {
		got = append(got, s[n[0]:n[1]])
	}
	if strings.Join(got, "|") != "10 ms|1%" {
		t.Errorf("in code: %q", got)
	}
}

func TestLint(t *testing.T) {
	doc := "# Title\n\nThe machine has 2 cores, 24 GiB.\nIt took 12 ms, wrapped: over 5\nMbit/s here.\n\n```\nmpsteer lab set x rate=20mbit delay=5 ms\n```\n\n`trial_rtts: 3` and `slow 10 ms` and <!-- fig: s value v -->51.9 Mbit/s (n = 1)<!-- /fig -->.\n<!-- a comment with 5 ms -->\n"
	ms, err := Parse("d.md", doc)
	if err != nil {
		t.Fatal(err)
	}
	used := map[int]int{}
	allow := []Allow{{File: "d.md", Text: "2 cores, 24 GiB", Why: "the machine"}, {File: "other.md", Text: "12 ms", Why: "x"}}
	got := strings.Join(lint("d.md", doc, ms, allow, used), "\n")
	for _, want := range []string{`d.md:4: "12 ms" is a number with a unit typed into the text`, `d.md:4: "5 Mbit/s"`, `d.md:11: "10 ms"`} {
		if !strings.Contains(got, want) {
			t.Errorf("lint lacks %q in:\n%s", want, got)
		}
	}
	for _, not := range []string{"24 GiB", "20mbit", `"5 ms"`, "51.9", `"3"`} {
		if strings.Contains(got, not) {
			t.Errorf("lint flags %q:\n%s", not, got)
		}
	}
	if strings.Count(got, "\n")+1 != 3 {
		t.Errorf("want 3 problems:\n%s", got)
	}
	if used[0] != 1 || used[1] != 0 {
		t.Errorf("allow-list use %v", used)
	}
}

func TestParseFigErrors(t *testing.T) {
	for spec, want := range map[string]string{
		"ecf-50-50-1m":                      "say what to render from ecf-50-50-1m",
		"ecf-50-50-1m mean mptcp":           `"mean" is not a kind of figure`,
		"ecf-50-50-1m value":                "value takes 1 argument(s) before its options, not 0",
		"ecf-50-50-1m ratio a/b colour=red": `option "colour" is not one of ratio's`,
		"ecf-50-50-1m verdict a/b > 1":      `verdict: ">" is not >= or <=`,
		"ecf-50-50-1m verdict a/b >= x":     `the target "x" is not a number`,
		"ecf-50-50-1m value mptcp bare":     "bare is for a benchmark's values",
		"ecf-50-50-1m ratio a/b as=percent": "as=percent: valid are change and ratio",
		"../x.json a":                       "a data file is a .json path inside the data directory",
		`bench/x.json "a b`:                 "a quote that does not close",
		"bench/x.json results.a verdict=1":  "verdict=1: give >=TARGET or <=TARGET",
		"bench/x.json results.a text bare":  "bare or text, not both",
		"two value mptcp absent=zero":       "absent=zero: valid is none",
	} {
		if _, err := parseFig(spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", spec, err, want)
		}
	}
	f, err := parseFig(`bench/a.json+bench/b.json results.ops[name=a b] unit=ns`)
	if err == nil {
		t.Errorf("a path with a space must be quoted: %+v", f)
	}
	f, err = parseFig(`bench/a.json+bench/b.json "results.ops[name=a b].ns" unit=ns digits=1`)
	if err != nil || len(f.files) != 2 || f.args[0] != "results.ops[name=a b].ns" || f.opts["unit"] != "ns" {
		t.Errorf("%+v %v", f, err)
	}
}

func TestEvalPath(t *testing.T) {
	v := map[string]any{"results": map[string]any{"ops": []any{
		map[string]any{"name": "a", "ns": 1.5, "n": 1.0}, map[string]any{"name": "b", "ns": 2.5, "n": 1.0},
		map[string]any{"name": "a", "ns": 3.5, "n": 10.0},
	}}}
	for path, want := range map[string]string{
		"results.ops[1].ns":           "[2.5]",
		"results.ops[*].ns":           "[1.5 2.5 3.5]",
		"results.ops[name=b].ns":      "[2.5]",
		"results.ops[name=a&n=10].ns": "[3.5]",
		"results.ops[n=1&name=a].ns":  "[1.5]",
	} {
		got, err := evalPath(v, path)
		if err != nil || fmt.Sprint(got) != want {
			t.Errorf("%s: %v %v", path, got, err)
		}
	}
	for path, want := range map[string]string{
		"results.opz":                     `no key "opz" (there are ops)`,
		"results.ops[7]":                  "no element 7 of 3",
		"results.ops[name=c].ns":          `0 elements have name = "c" (one must)`,
		"results.ops[name=a].ns":          `2 elements have name = "a" (one must)`,
		"results.ops[name=a&n].ns":        `"n": a condition is key=value`,
		"results.ops[n=1&name=a&n=10].ns": `0 elements have n = "1" and name = "a" and n = "10"`,
		"results.ops[0":                   "a [ that does not close",
	} {
		if _, err := evalPath(v, path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", path, err, want)
		}
	}
}

// A small site: one scenario measured with the runner's schema, one
// benchmark, one paper quote, a document with every kind of marker. What
// the renderer writes is what the data give, exactly.
func fixtureSite(t *testing.T) Site {
	t.Helper()
	root := t.TempDir()
	write := func(rel, s string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	two, err := os.ReadFile("testdata/two.yaml")
	if err != nil {
		t.Fatal(err)
	}
	write("scenarios/two.yaml", string(two))
	run := func(v string, round, attempt int, gp float64, failed bool) string {
		f := "false"
		reason := ""
		if failed {
			f, reason = "true", "traffic did not finish (4.0 of 30 s)"
		}
		return `{"round": ` + itoa(round) + `, "attempt": ` + itoa(attempt) + `, "dir": "x", "failed": ` + f + `, "reason": "` + reason + `", "variant": "` + v + `", "goodput_mbit": ` + ftoa(gp) + `, "paths": {"a": {"bytes": 1, "share": 0.5}}}`
	}
	write("docs/data/two/results.json", `{"schema": 2, "scenario": "two",
 "provenance": {"commit": "abc1234", "dirty": false, "command": "mpsteer lab run scenarios/two.yaml --runs 3", "kernel": "6.18.44", "date": "2026-11-26T10:00:00Z"},
 "order": ["tcp", "mptcp"],
 "variants": {
  "tcp": {"runs": [`+run("tcp", 1, 1, 9.5, false)+`, `+run("tcp", 2, 1, 9.4, false)+`, `+run("tcp", 3, 1, 9.6, false)+`]},
  "mptcp": {"runs": [`+run("mptcp", 1, 1, 18, false)+`, `+run("mptcp", 2, 1, 3, true)+`, `+run("mptcp", 2, 2, 18.8, false)+`, `+run("mptcp", 3, 1, 17.1, false)+`], "failed_runs": 1}
 }}
`)
	summarize(t, filepath.Join(root, "docs/data/two/results.json"))
	write("docs/data/bench/cost.json", `{"provenance": {"commit": "abc1234", "command": "mpsteer bench cost", "kernel": "6.18.44", "date": "2026-11-26T10:00:00Z"}, "ns": 14.91, "rounds": 10}
`)
	write("docs/papers.yaml", `papers: {p: "A paper"}
quotes:
  gain: {paper: p, where: "§2, Fig. 3", says: "by up to 30%", quote: "It helps by up to 30% in one case."}
experiments:
  - {scenario: two, paper: p, figure: "Fig. 3", rows: [{what: w, quote: gain, metric: goodput_mbit, variant: mptcp, baseline: tcp}]}
`)
	write("docs/figures.yaml", `tables:
  two:
    columns:
      - {head: variant, text: "{v}"}
      - {head: goodput, fig: "two value {v}"}
    rows:
      - {v: tcp}
      - {v: mptcp}
    caption: "A cost of {fig: bench/cost.json ns unit=ns digits=1 bare}."
lint:
  allow:
    - {file: doc.md, text: "30 s uploads", why: "the set-up"}
`)
	write("doc.md", `# Doc

Two paths, 30 s uploads. MPTCP against TCP: <!-- fig: two ratio mptcp/tcp --><!-- /fig -->; the paper
<!-- paper: gain --><!-- /paper -->. Runs: <!-- fig: two runs mptcp --><!-- /fig -->. At <!-- fig: two provenance --><!-- /fig -->.
A cost: <!-- fig: bench/cost.json ns unit=ns digits=1 of=rounds:rounds --><!-- /fig -->.
Against the better alternative: <!-- fig: two verdict mptcp/best >= 1.5 alts=tcp --><!-- /fig -->.

<!-- table: two -->
<!-- /table -->
`)
	return Site{Root: root, Docs: []string{"doc.md"}, Data: "docs/data", Defs: "docs/figures.yaml", Papers: "docs/papers.yaml", Legacy: "docs/data/legacy.yaml", Scenarios: "scenarios"}
}

// summarize writes what a file's runs sum up to into it, as the runner does.
func summarize(t *testing.T, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	f, err := results.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	in := results.Input{Scenario: f.Scenario, File: f.ScenarioFile, Provenance: f.Provenance, RunsRequested: 3, Complete: true,
		Order: f.Order, Runs: map[string][]results.Run{}}
	for name, v := range f.Variants {
		in.Runs[name] = v.Runs
	}
	if b, err = json.MarshalIndent(results.Build(in), "", "  "); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func itoa(i int) string     { return fmt.Sprintf("%d", i) }
func ftoa(f float64) string { return fmt.Sprintf("%g", f) }

func TestRenderFixture(t *testing.T) {
	site := fixtureSite(t)
	res, err := site.Render()
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Problems) > 0 {
		t.Fatalf("problems: %v", res.Problems)
	}
	if len(res.Differ) != 7 {
		t.Errorf("seven empty figures must differ from their data: %v", res.Differ)
	}
	// mptcp/tcp per round: 18/9.5, 18.8/9.4 (round 2's re-run), 17.1/9.6.
	want := `# Doc

Two paths, 30 s uploads. MPTCP against TCP: <!-- fig: two ratio mptcp/tcp -->+89.5% (95% CI +78.1 to +100.0%, n = 3)<!-- /fig -->; the paper
<!-- paper: gain -->“by up to 30%” (§2, Fig. 3)<!-- /paper -->. Runs: <!-- fig: two runs mptcp -->3 runs (1 failed, left out)<!-- /fig -->. At <!-- fig: two provenance -->commit abc1234, kernel 6.18.44, 2026-11-26<!-- /fig -->.
A cost: <!-- fig: bench/cost.json ns unit=ns digits=1 of=rounds:rounds -->14.9 ns (1 run, 10 rounds)<!-- /fig -->.
Against the better alternative: <!-- fig: two verdict mptcp/best >= 1.5 alts=tcp -->met (n = 3)<!-- /fig -->.

<!-- table: two -->
| variant | goodput |
|---|---:|
| tcp | 9.5 Mbit/s (95% CI 9.4–9.6, n = 3) |
| mptcp | 18.0 Mbit/s (95% CI 17.1–18.8, n = 3) |

A cost of 14.9 ns.

Data: [two](docs/data/two/results.json), [bench/cost.json](docs/data/bench/cost.json) — commit abc1234, kernel 6.18.44, 2026-11-26.
Failed runs, left out of every figure: two mptcp, 1 (traffic did not finish (4.0 of 30 s)).
<!-- /table -->
`
	if got := res.Docs["doc.md"]; got != want {
		t.Errorf("rendered:\n%s\nwant:\n%s", got, want)
	}
	if _, err := site.Write(res); err != nil {
		t.Fatal(err)
	}
	again, err := site.Render()
	if err != nil || !again.OK() {
		t.Fatalf("after writing, the check must pass: %v %v %v", err, again.Differ, again.Problems)
	}
}

// A benchmark run several times keeps one file per run in a folder; a
// figure over bench/F/*.json takes every run: its median with interval and
// n, a word or a setting they all share once, and no bare value where the
// runs differ.
func TestBenchRunsByGlob(t *testing.T) {
	site := fixtureSite(t)
	for i, ns := range []string{"10", "12", "11"} {
		p := filepath.Join(site.Root, "docs/data/bench/cost", fmt.Sprintf("run-%d.json", i+1))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		body := `{"provenance": {"commit": "abc1234", "command": "mpsteer bench cost", "kernel": "6.18.44", "date": "2026-11-26T1` + itoa(i) + `:00:00Z"}, "ns": ` + ns + `, "rounds": 10, "cc": "bbr"}`
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	doc := filepath.Join(site.Root, "doc.md")
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	lines := "Runs: <!-- fig: bench/cost/*.json ns unit=ns digits=1 --><!-- /fig -->, <!-- fig: bench/cost/*.json cc text --><!-- /fig -->.\n" +
		"Events: <!-- fig: bench/cost/*.json ns unit=ns digits=1 each=probe --><!-- /fig -->.\n" +
		"Missing: <!-- fig: bench/none/*.json ns --><!-- /fig -->.\n"
	if err := os.WriteFile(doc, append(b, lines...), 0o644); err != nil {
		t.Fatal(err)
	}
	defs := filepath.Join(site.Root, "docs/figures.yaml")
	if b, err = os.ReadFile(defs); err != nil {
		t.Fatal(err)
	}
	b = []byte(strings.Replace(string(b), "A cost of {fig: bench/cost.json ns unit=ns digits=1 bare}.",
		"A cost of {fig: bench/cost.json ns unit=ns digits=1 bare}; rounds {fig: bench/cost/*.json rounds unit= digits=0 bare}.", 1))
	if err := os.WriteFile(defs, b, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := site.Render()
	if err != nil {
		t.Fatal(err)
	}
	got := res.Docs["doc.md"]
	for _, want := range []string{
		"<!-- fig: bench/cost/*.json ns unit=ns digits=1 -->11.0 ns (95% CI 10.0–12.0, n = 3 runs)<!-- /fig -->",
		"<!-- fig: bench/cost/*.json ns unit=ns digits=1 each=probe -->11.0 ns (95% CI 10.0–12.0, n = 3 probes)<!-- /fig -->",
		"<!-- fig: bench/cost/*.json cc text -->bbr<!-- /fig -->",
		"[bench/cost/run-1.json](docs/data/bench/cost/run-1.json), [bench/cost/run-2.json](docs/data/bench/cost/run-2.json), [bench/cost/run-3.json](docs/data/bench/cost/run-3.json)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("rendered lacks %q:\n%s", want, got)
		}
	}
	problems := strings.Join(res.Problems, "\n")
	if !strings.Contains(problems, "docs/data/bench/none/*.json is missing") {
		t.Errorf("problems lack the glob that matches nothing:\n%s", problems)
	}
	if strings.Contains(problems, "rounds") {
		t.Errorf("a setting every run shares is one bare value:\n%s", problems)
	}
	if err := os.WriteFile(defs, []byte(strings.Replace(string(b), "rounds unit= digits=0 bare", "ns unit=ns bare", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err = site.Render(); err != nil {
		t.Fatal(err)
	}
	if problems := strings.Join(res.Problems, "\n"); !strings.Contains(problems, "bare shows one value; ns gives 3 different ones") {
		t.Errorf("a bare value over runs that differ must be a problem:\n%s", problems)
	}
}

// Problems a document can have beside a figure that differs.
func TestRenderProblems(t *testing.T) {
	site := fixtureSite(t)
	edit := func(rel, old, new string) {
		p := filepath.Join(site.Root, rel)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), old) {
			t.Fatalf("%s lacks %q", rel, old)
		}
		if err := os.WriteFile(p, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	edit("doc.md", "Runs: <!-- fig: two runs mptcp -->", "Runs: <!-- fig: two runs mptcp-b -->")
	edit("doc.md", "A cost:", "We measured 42 ms. A cost:")
	edit("doc.md", "<!-- fig: two provenance -->", "<!-- fig: gone provenance -->")
	edit("docs/figures.yaml", "tables:\n", "tables:\n  unused:\n    columns: [{head: a, text: x}]\n    rows: [{}]\n")
	edit("docs/data/bench/cost.json", `"commit": "abc1234", `, "")
	res, err := site.Render()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(res.Problems, "\n")
	for _, want := range []string{
		"doc.md:4: fig `two runs mptcp-b`: two has no variant \"mptcp-b\" (it has tcp, mptcp, mptcp-a)",
		"doc.md:4: fig `gone provenance`: docs/data/gone/results.json is missing",
		`doc.md:5: "42 ms" is a number with a unit typed into the text`,
		"docs/figures.yaml:3: table unused is defined but no document shows it",
		"docs/data/bench/cost.json: provenance without commit",
		"doc.md:5: fig `bench/cost.json ns unit=ns digits=1 of=rounds:rounds`: docs/data/bench/cost.json: provenance without commit",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %q:\n%s", want, got)
		}
	}
}

// A metric that no run of a variant has is a mistake (a typo, a metric
// the runner does not write), unless the figure says that is a finding
// (absent=none: what it measures never happened in any run, such as a
// return to a path after its outage).
func TestRenderAbsentMetric(t *testing.T) {
	site := fixtureSite(t)
	doc := filepath.Join(site.Root, "doc.md")
	body := `# Doc

Two paths, 30 s uploads. Back: <!-- fig: two value mptcp metric=link_up_to_first_data_ms absent=none --><!-- /fig -->,
<!-- fig: two values mptcp metric=link_up_to_first_data_ms absent=none --><!-- /fig -->,
<!-- fig: two verdict mptcp <= 90 metric=link_up_to_first_data_ms absent=none --><!-- /fig -->;
goodput <!-- fig: two value tcp absent=none --><!-- /fig -->.

<!-- table: two -->
<!-- /table -->
`
	if err := os.WriteFile(doc, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := site.Render()
	if err != nil || len(res.Problems) > 0 {
		t.Fatalf("%v %v", err, res.Problems)
	}
	got := res.Docs["doc.md"]
	for _, want := range []string{
		"metric=link_up_to_first_data_ms absent=none -->none in 3 runs<!-- /fig -->,",
		"absent=none -->not met (none in 3 runs)<!-- /fig -->;",
		"goodput <!-- fig: two value tcp absent=none -->9.5 Mbit/s (95% CI 9.4–9.6, n = 3)<!-- /fig -->",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("rendered:\n%s\nwant it to hold %q", got, want)
		}
	}
	if err := os.WriteFile(doc, []byte(strings.ReplaceAll(body, " absent=none", "")), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err = site.Render()
	if err != nil || len(res.Problems) == 0 || !strings.Contains(strings.Join(res.Problems, "\n"), "no run of mptcp in docs/data/two/results.json has link_up_to_first_data_ms (absent=none if that is a finding") {
		t.Fatalf("without absent=none: %v %v", err, res.Problems)
	}
}
