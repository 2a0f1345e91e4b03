// Package reproduce sets mpsteer's measurements beside the papers' own:
// it reads the list of paper experiments (docs/papers.yaml: per scenario
// the paper, its figure and its numbers, and which of our numbers each is
// compared with) and writes one HTML page over the lab runs' output
// directories (index.html), with each run's figures, our number and the
// paper's side by side, and the command that makes each.
package reproduce

import (
	"encoding/json"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"mpsteer/internal/docs/format"
	"mpsteer/internal/lab/results"
	"mpsteer/internal/provenance"
	"mpsteer/internal/yamlcfg"
)

// Papers is the list of paper experiments, and every number or claim of
// the papers we set ours beside.
type Papers struct {
	File        string
	Titles      map[string]string // paper id → title
	Quotes      map[string]Quote  // quote id → the paper's words
	Experiments []Experiment
	// Benches are the paper measurements made by a benchmark (`mpsteer
	// bench NAME`) instead of a lab run.
	Benches []Bench
}

// Bench is one benchmark a paper stands behind: `mpsteer bench NAME`
// writes NAME.json, whose figures its rows name.
type Bench struct {
	Name    string
	Paper   string
	Figure  string
	Setting string
	Rows    []BenchRow
}

// BenchRow is one figure of a benchmark's JSON beside a quote (or a note
// saying why there is none): Value is its path in the JSON, keys joined
// by dots (summary.length_share_pct_max), Unit what follows the number.
type BenchRow struct {
	What  string
	Quote string
	Note  string
	Value string
	Unit  string
}

// Quote is what a paper says, exactly, and where: the sentence (Text), the
// part of it that carries the number or claim with its own qualifier
// ("by up to 32.1%", "on average 30.9%"; Says, a part of Text), and the
// figure or section it comes from.
type Quote struct {
	ID    string
	Paper string // an id of Papers.Titles
	Where string // "§V.B, Fig. 9a"
	Says  string
	Text  string
}

// Short is the quote as a figure cites it: “on average 30.9%” (Fig. 9a).
func (q Quote) Short() string { return "“" + q.Says + "” (" + q.Where + ")" }

// Experiment is one scenario a paper stands behind.
type Experiment struct {
	Scenario string // scenarios/<Scenario>.yaml
	Paper    string // an id of Papers.Titles
	Figure   string // the paper's figure or section whose set-up the scenario follows
	Setting  string // what the scenario sets that the paper does not give ("" if nothing)
	Rows     []Row
}

// Row is one of our numbers and what the paper says beside it: a quote, or
// a note saying why there is none (the paper gives no number there).
type Row struct {
	What     string
	Quote    string // an id of Papers.Quotes, or ""
	Note     string // with no quote: why
	Metric   string
	Variant  string
	Baseline string // "": the variant's own number
	As       string // value, ratio, change
}

var scenarioName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

var metricRe = regexp.MustCompile(`^(goodput_mbit|retransmits|bytes|duration_s|fct_median_ms|fct_p99_ms|share:[A-Za-z0-9._-]+|[a-z0-9_]+)$`)

var quoteID = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

var benchName = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

var jsonPath = regexp.MustCompile(`^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$`)

// Load reads a papers file; every problem names the file, line and key.
func Load(file string) (*Papers, error) {
	data, err := yamlcfg.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return Parse(file, data)
}

// spaces folds runs of white space, so a quote may wrap in the file.
func spaces(s string) string { return strings.Join(strings.Fields(s), " ") }

// Parse reads a papers file's contents.
func Parse(file string, data []byte) (*Papers, error) {
	m, err := yamlcfg.Parse(file, data)
	if err != nil {
		return nil, err
	}
	p := &Papers{File: file, Titles: map[string]string{}, Quotes: map[string]Quote{}}
	if pm := m.Map("papers"); pm != nil {
		for _, k := range pm.Keys() {
			p.Titles[k] = pm.String(k, "")
		}
		pm.Done()
	}
	if len(p.Titles) == 0 && !m.Failed("papers") {
		m.Errorf("papers", "name the papers: a mapping of ids to titles, e.g. {asym: \"An Evaluation of …\"}")
	}
	paperIDs := func() string {
		var ids []string
		for id := range p.Titles {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		return strings.Join(ids, ", ")
	}
	if qm := m.Map("quotes"); qm != nil {
		for _, id := range qm.Keys() {
			e := qm.Map(id)
			if e == nil {
				continue
			}
			q := Quote{ID: id, Paper: e.String("paper", ""), Where: spaces(e.String("where", "")), Says: spaces(e.String("says", "")), Text: spaces(e.String("quote", ""))}
			if !quoteID.MatchString(id) {
				qm.Errorf(id, "%q is not a quote id (lower case, digits and -)", id)
			}
			if _, ok := p.Titles[q.Paper]; !ok && !e.Failed("paper") {
				e.Errorf("paper", "unknown paper %q (valid: %s)", q.Paper, paperIDs())
			}
			for key, v := range map[string]string{"where": q.Where, "says": q.Says, "quote": q.Text} {
				if v == "" && !e.Failed(key) {
					e.Errorf(key, "missing")
				}
			}
			if q.Says != "" && q.Text != "" && !strings.Contains(q.Text, q.Says) {
				e.Errorf("says", "%q is not part of the quote: give the paper's own words, as the quote has them", q.Says)
			}
			e.Done()
			p.Quotes[id] = q
		}
		qm.Done()
	}
	seen := map[string]bool{}
	for _, it := range m.List("experiments") {
		if it.Map == nil {
			m.ErrorAt(it.Node, it.Path, "an experiment is a mapping: {scenario, paper, figure, setting, rows}")
			continue
		}
		e := Experiment{Scenario: it.Map.String("scenario", ""), Paper: it.Map.String("paper", ""), Figure: it.Map.String("figure", ""), Setting: it.Map.String("setting", "")}
		switch {
		case !scenarioName.MatchString(e.Scenario):
			it.Map.Errorf("scenario", "%q is not a scenario name (the file scenarios/NAME.yaml, e.g. asym-2-bandwidth)", e.Scenario)
		case seen[e.Scenario]:
			it.Map.Errorf("scenario", "%s is listed twice (give one experiment several rows)", e.Scenario)
		}
		seen[e.Scenario] = true
		if _, ok := p.Titles[e.Paper]; !ok {
			it.Map.Errorf("paper", "unknown paper %q (valid: %s)", e.Paper, paperIDs())
		}
		if e.Figure == "" && !it.Map.Failed("figure") {
			it.Map.Errorf("figure", "missing: the paper's figure or section whose set-up the scenario follows")
		}
		for _, r := range it.Map.List("rows") {
			if r.Map == nil {
				it.Map.ErrorAt(r.Node, r.Path, "a row is a mapping: {what, quote or note, metric, variant, baseline, as}")
				continue
			}
			row := Row{What: r.Map.String("what", ""), Quote: r.Map.String("quote", ""), Note: r.Map.String("note", ""), Metric: r.Map.String("metric", ""),
				Variant: r.Map.String("variant", ""), Baseline: r.Map.String("baseline", "")}
			def := "value"
			if row.Baseline != "" {
				def = "change"
			}
			row.As = r.Map.Enum("as", def, "value", "ratio", "change")
			for key, v := range map[string]string{"what": row.What, "variant": row.Variant} {
				if v == "" && !r.Map.Failed(key) {
					r.Map.Errorf(key, "missing")
				}
			}
			switch q, ok := p.Quotes[row.Quote]; {
			case row.Quote == "" && row.Note == "":
				r.Map.Errorf("quote", "missing: the id of the paper's quote beside this number, or a note saying why the paper gives none")
			case row.Quote != "" && !ok:
				r.Map.Errorf("quote", "unknown quote %q (quotes: lists them)", row.Quote)
			case row.Quote != "" && q.Paper != e.Paper:
				r.Map.Errorf("quote", "%s is a quote of %s, not of this experiment's paper %s", row.Quote, q.Paper, e.Paper)
			}
			if !metricRe.MatchString(row.Metric) {
				r.Map.Errorf("metric", "%q is not a metric (valid: goodput_mbit, retransmits, bytes, duration_s, fct_median_ms, fct_p99_ms, share:PATH, or a key of a summary's metrics)", row.Metric)
			}
			if row.As != "value" && row.Baseline == "" {
				r.Map.Errorf("as", "%s needs a baseline variant", row.As)
			}
			r.Map.Done()
			e.Rows = append(e.Rows, row)
		}
		if len(e.Rows) == 0 && !it.Map.Failed("rows") {
			it.Map.Errorf("rows", "an experiment needs at least one row")
		}
		it.Map.Done()
		p.Experiments = append(p.Experiments, e)
	}
	if len(p.Experiments) == 0 && !m.Failed("experiments") {
		m.Errorf("experiments", "no experiments")
	}
	p.parseBenches(m, paperIDs)
	m.Done()
	if err := m.Err(); err != nil {
		return nil, err
	}
	return p, nil
}

// parseBenches reads benches: the benchmarks a paper stands behind.
func (p *Papers) parseBenches(m *yamlcfg.Map, paperIDs func() string) {
	seen := map[string]bool{}
	for _, it := range m.List("benches") {
		if it.Map == nil {
			m.ErrorAt(it.Node, it.Path, "a bench is a mapping: {bench, paper, figure, setting, rows}")
			continue
		}
		bm := it.Map
		b := Bench{Name: bm.String("bench", ""), Paper: bm.String("paper", ""), Figure: bm.String("figure", ""), Setting: bm.String("setting", "")}
		switch {
		case !benchName.MatchString(b.Name):
			bm.Errorf("bench", "%q is not a benchmark's name (mpsteer bench NAME, e.g. overhead)", b.Name)
		case seen[b.Name]:
			bm.Errorf("bench", "%s is listed twice (give one bench several rows)", b.Name)
		}
		seen[b.Name] = true
		if _, ok := p.Titles[b.Paper]; !ok {
			bm.Errorf("paper", "unknown paper %q (valid: %s)", b.Paper, paperIDs())
		}
		if b.Figure == "" && !bm.Failed("figure") {
			bm.Errorf("figure", "missing: the paper's figure or section the benchmark measures")
		}
		for _, r := range bm.List("rows") {
			if r.Map == nil {
				bm.ErrorAt(r.Node, r.Path, "a row is a mapping: {what, quote or note, value, unit}")
				continue
			}
			row := BenchRow{What: r.Map.String("what", ""), Quote: r.Map.String("quote", ""), Note: r.Map.String("note", ""),
				Value: r.Map.String("value", ""), Unit: r.Map.String("unit", "")}
			if row.What == "" && !r.Map.Failed("what") {
				r.Map.Errorf("what", "missing")
			}
			switch q, ok := p.Quotes[row.Quote]; {
			case row.Quote == "" && row.Note == "":
				r.Map.Errorf("quote", "missing: the id of the paper's quote beside this number, or a note saying why the paper gives none")
			case row.Quote != "" && !ok:
				r.Map.Errorf("quote", "unknown quote %q (quotes: lists them)", row.Quote)
			case row.Quote != "" && q.Paper != b.Paper:
				r.Map.Errorf("quote", "%s is a quote of %s, not of this bench's paper %s", row.Quote, q.Paper, b.Paper)
			}
			if !jsonPath.MatchString(row.Value) {
				r.Map.Errorf("value", "%q is not a path in the benchmark's JSON (keys joined by dots, e.g. summary.length_share_pct_max)", row.Value)
			}
			r.Map.Done()
			b.Rows = append(b.Rows, row)
		}
		if len(b.Rows) == 0 && !bm.Failed("rows") {
			bm.Errorf("rows", "a bench needs at least one row")
		}
		bm.Done()
		p.Benches = append(p.Benches, b)
	}
}

// Lookup is the number at a dotted path of a benchmark's JSON.
func Lookup(doc map[string]any, path string) (float64, error) {
	var v any = doc
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return 0, fmt.Errorf("%s: %q is not inside an object", path, k)
		}
		if v, ok = m[k]; !ok {
			return 0, fmt.Errorf("%s: no %q", path, k)
		}
	}
	x, ok := v.(float64)
	if !ok {
		return 0, fmt.Errorf("%s is not a number", path)
	}
	return x, nil
}

// Ours is our number for a bench row from the benchmark's JSON.
func (r BenchRow) Ours(doc map[string]any) (ours string, ok bool, err error) {
	x, err := Lookup(doc, r.Value)
	if err != nil {
		return "", false, err
	}
	return strconv.FormatFloat(x, 'g', 3, 64) + r.Unit, true, nil
}

// BenchCommand is the command line that runs a benchmark into dir.
func BenchCommand(name, dir string) string {
	return fmt.Sprintf("mpsteer bench %s --out %s", name, dir)
}

// Ours is our number for a row from a run's results, formatted with its
// interval and n, and the numbers it comes from; ok is false when the run
// lacks them.
func (r Row) Ours(res *results.File) (ours, detail string, ok bool) {
	u := format.UnitOf(r.Metric)
	v := res.Estimate(r.Variant, r.Metric)
	if v.N == 0 {
		return "", fmt.Sprintf("no %s for variant %s", r.Metric, r.Variant), false
	}
	if r.Baseline == "" {
		return format.Estimate(v, u), r.Variant + failedNote(res, r.Variant), true
	}
	b := res.Estimate(r.Baseline, r.Metric)
	if b.N == 0 {
		return "", fmt.Sprintf("no %s for variant %s", r.Metric, r.Baseline), false
	}
	detail = fmt.Sprintf("%s %s%s against %s %s%s", r.Variant, format.Estimate(v, u), failedNote(res, r.Variant),
		r.Baseline, format.Estimate(b, u), failedNote(res, r.Baseline))
	if r.As == "value" {
		return format.Estimate(v, u), detail, true
	}
	ratio := res.Paired(r.Variant, r.Baseline, r.Metric).Ratio
	if ratio.N == 0 {
		return "–", detail + "; no round has both", true
	}
	return format.Ratio(ratio, r.As), detail, true
}

func failedNote(res *results.File, variant string) string {
	if n := res.Failed(variant); n > 0 {
		return fmt.Sprintf(" (%d failed run(s) left out)", n)
	}
	return ""
}

// Command is the command line that runs an experiment into dir, runs
// times (paired runs; 0 or 1: once).
func Command(scenarioDir, scenario, dir string, runs int) string {
	c := fmt.Sprintf("mpsteer lab run %s --out %s", filepath.Join(scenarioDir, scenario+".yaml"), filepath.Join(dir, scenario))
	if runs > 1 {
		c += fmt.Sprintf(" --runs %d", runs)
	}
	return c
}

// readRun loads a run's results.json; nil when the run is not there.
func readRun(dir string) (*results.File, error) {
	r, err := results.Read(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	return r, err
}

// Options say where the index looks and what it shows.
type Options struct {
	Dir         string // the runs are Dir/<scenario>/; the page is Dir/index.html
	ScenarioDir string // where the scenario files are, for the commands (default scenarios)
	Runs        int    // paired runs per scenario, for the commands
	// BenchDir is where the benchmarks' JSON is (default Dir/bench).
	BenchDir string
	// Failed are runs that failed, with why (shown instead of the
	// results); a benchmark's under "bench:NAME".
	Failed map[string]string
	Now    time.Time
}

type pageRow struct {
	Row
	Quote        *Quote
	Ours, Detail string
	Have         bool
}

type pageImage struct{ Src, Alt string }

type pageExperiment struct {
	Experiment
	Title      string
	Command    string
	Provenance string
	Ran        bool
	Failed     string
	Rows       []pageRow
	Images     []pageImage
	Variants   []pageImage // per variant goodput plots
	Report     string
}

type pageBenchRow struct {
	BenchRow
	Quote        *Quote
	Ours, Detail string
	Have         bool
}

type pageBench struct {
	Bench
	Title      string
	Command    string
	Provenance string
	Ran        bool
	Failed     string
	Rows       []pageBenchRow
	Images     []pageImage
	JSON       string
}

type page struct {
	Generated   string
	PapersFile  string
	Experiments []pageExperiment
	Benches     []pageBench
	Ran, Total  int
}

// WriteIndex writes Dir/index.html over the runs in Dir.
func WriteIndex(p *Papers, o Options) (string, error) {
	if o.ScenarioDir == "" {
		o.ScenarioDir = "scenarios"
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	if o.BenchDir == "" {
		o.BenchDir = filepath.Join(o.Dir, "bench")
	}
	pg := page{Generated: o.Now.UTC().Format("2006-01-02 15:04 UTC"), PapersFile: p.File, Total: len(p.Experiments) + len(p.Benches)}
	for _, e := range p.Experiments {
		dir := filepath.Join(o.Dir, e.Scenario)
		pe := pageExperiment{Experiment: e, Title: p.Titles[e.Paper], Command: Command(o.ScenarioDir, e.Scenario, o.Dir, o.Runs), Failed: o.Failed[e.Scenario]}
		res, err := readRun(dir)
		if err != nil {
			pe.Failed = err.Error()
		}
		pe.Ran = res != nil
		if pe.Ran {
			pg.Ran++
			pe.Provenance = res.Provenance.Summary()
		}
		for _, r := range e.Rows {
			pr := pageRow{Row: r}
			if q, ok := p.Quotes[r.Quote]; ok {
				pr.Quote = &q
			}
			if pe.Ran {
				pr.Ours, pr.Detail, pr.Have = r.Ours(res)
			}
			pe.Rows = append(pe.Rows, pr)
		}
		for _, img := range []string{"compare.png", "share.png", "fct_cdf.png"} {
			if _, err := os.Stat(filepath.Join(dir, img)); err == nil {
				pe.Images = append(pe.Images, pageImage{Src: e.Scenario + "/" + img, Alt: e.Scenario + " " + img})
			}
		}
		if res != nil {
			for _, v := range res.VariantNames() {
				if _, err := os.Stat(filepath.Join(dir, v, "goodput.png")); err == nil {
					pe.Variants = append(pe.Variants, pageImage{Src: e.Scenario + "/" + v + "/goodput.png", Alt: v})
				}
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "report.md")); err == nil {
			pe.Report = e.Scenario + "/report.md"
		}
		pg.Experiments = append(pg.Experiments, pe)
	}
	for _, b := range p.Benches {
		pb := benchPage(p, b, o)
		if pb.Ran {
			pg.Ran++
		}
		pg.Benches = append(pg.Benches, pb)
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(o.Dir, "index.html")
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return "", err
	}
	if err := indexTmpl.Execute(f, pg); err != nil {
		f.Close()
		os.Remove(tmp)
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return out, os.Rename(tmp, out)
}

// benchPage reads a benchmark's JSON (with its provenance) for the page.
func benchPage(p *Papers, b Bench, o Options) pageBench {
	file := filepath.Join(o.BenchDir, b.Name+".json")
	pb := pageBench{Bench: b, Title: p.Titles[b.Paper], Command: BenchCommand(b.Name, o.BenchDir), Failed: o.Failed["bench:"+b.Name]}
	rel := func(f string) string {
		r, err := filepath.Rel(o.Dir, filepath.Join(o.BenchDir, f))
		if err != nil {
			return filepath.Join(o.BenchDir, f)
		}
		return filepath.ToSlash(r)
	}
	var doc map[string]any
	data, err := os.ReadFile(file)
	switch {
	case os.IsNotExist(err):
	case err != nil:
		pb.Failed = err.Error()
	default:
		if err := json.Unmarshal(data, &doc); err != nil {
			pb.Failed = fmt.Sprintf("%s: %v", file, err)
			doc = nil
		}
	}
	pb.Ran = doc != nil
	if pb.Ran {
		pb.JSON = rel(b.Name + ".json")
		var prov struct {
			Provenance *provenance.Provenance `json:"provenance"`
		}
		if json.Unmarshal(data, &prov) == nil && prov.Provenance != nil {
			pb.Provenance = prov.Provenance.Summary()
		}
		if plots, ok := doc["plots"].([]any); ok {
			for _, pl := range plots {
				if f, ok := pl.(string); ok {
					if _, err := os.Stat(filepath.Join(o.BenchDir, f)); err == nil {
						pb.Images = append(pb.Images, pageImage{Src: rel(f), Alt: b.Name + " " + f})
					}
				}
			}
		}
	}
	for _, r := range b.Rows {
		pr := pageBenchRow{BenchRow: r}
		if q, ok := p.Quotes[r.Quote]; ok {
			pr.Quote = &q
		}
		if pb.Ran {
			var err error
			pr.Ours, pr.Have, err = r.Ours(doc)
			pr.Detail = b.Name + ".json " + r.Value
			if err != nil {
				pr.Detail = err.Error()
			}
		}
		pb.Rows = append(pb.Rows, pr)
	}
	return pb
}

var indexTmpl = template.Must(template.New("index").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>mpsteer: the papers' experiments, reproduced</title>
<style>
body { font-family: sans-serif; max-width: 72em; margin: 2em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
td.num { text-align: right; white-space: nowrap; }
code { background: #f4f4f4; padding: 0.1em 0.3em; }
section { border-top: 2px solid #ddd; margin-top: 2em; }
img.fig { max-width: 100%; border: 1px solid #eee; }
.variants img { width: 24em; margin: 0.2em; border: 1px solid #eee; }
.missing { color: #a00; }
.says { white-space: normal; }
blockquote { margin: 0.3em 0 0 0; color: #555; font-size: 90%; }
nav li { margin: 0.1em 0; }
</style>
</head>
<body>
<h1>The papers' experiments, reproduced</h1>
<p>{{.Ran}} of {{.Total}} experiments have results here; generated {{.Generated}} by <code>mpsteer lab reproduce</code>
from the list in <code>{{.PapersFile}}</code>. Every number under "ours" is measured (the run's <code>results.json</code>);
each is a median with its 95% interval and the number of runs (n), failed runs left out. The papers' numbers are the papers'
own words, quoted, with the figure or section they come from. Each experiment says the command that runs it alone.</p>
<nav><ul>
{{range .Experiments}}<li><a href="#{{.Scenario}}">{{.Scenario}}</a> — {{.Figure}}{{if not .Ran}} <span class="missing">(not run)</span>{{end}}</li>
{{end}}{{range .Benches}}<li><a href="#bench-{{.Name}}">bench {{.Name}}</a> — {{.Figure}}{{if not .Ran}} <span class="missing">(not run)</span>{{end}}</li>
{{end}}</ul></nav>
{{range .Experiments}}
<section id="{{.Scenario}}">
<h2>{{.Scenario}}</h2>
<p><em>{{.Title}}</em>, {{.Figure}}.{{if .Setting}} Our set-up: {{.Setting}}.{{end}}</p>
<p><code>{{.Command}}</code></p>
{{if .Failed}}<p class="missing">The run failed: {{.Failed}}</p>{{end}}
{{if .Provenance}}<p>Measured: {{.Provenance}}.</p>{{end}}
<table>
<tr><th>what</th><th>paper</th><th>ours</th><th>from</th></tr>
{{range .Rows}}<tr><td>{{.What}}</td><td class="says">{{with .Quote}}“{{.Says}}” ({{.Where}})<blockquote>“{{.Text}}”</blockquote>{{else}}<em>{{.Note}}</em>{{end}}</td>{{if .Have}}<td class="num"><strong>{{.Ours}}</strong></td><td>{{.Detail}}</td>{{else}}<td class="num missing">–</td><td class="missing">{{if .Detail}}{{.Detail}}{{else}}not run{{end}}</td>{{end}}</tr>
{{end}}</table>
{{range .Images}}<p><a href="{{.Src}}"><img class="fig" src="{{.Src}}" alt="{{.Alt}}"></a></p>
{{end}}{{if .Variants}}<details class="variants"><summary>goodput over time, per variant</summary>
{{range .Variants}}<a href="{{.Src}}"><img src="{{.Src}}" alt="{{.Alt}}" title="{{.Alt}}"></a>
{{end}}</details>{{end}}
{{if .Report}}<p><a href="{{.Report}}">report.md</a> (the run's whole table)</p>{{end}}
</section>
{{end}}
{{range .Benches}}
<section id="bench-{{.Name}}">
<h2>bench {{.Name}}</h2>
<p><em>{{.Title}}</em>, {{.Figure}}.{{if .Setting}} Our set-up: {{.Setting}}.{{end}}</p>
<p><code>{{.Command}}</code></p>
{{if .Failed}}<p class="missing">The benchmark failed: {{.Failed}}</p>{{end}}
{{if .Provenance}}<p>Measured: {{.Provenance}}.</p>{{end}}
<table>
<tr><th>what</th><th>paper</th><th>ours</th><th>from</th></tr>
{{range .Rows}}<tr><td>{{.What}}</td><td class="says">{{with .Quote}}“{{.Says}}” ({{.Where}})<blockquote>“{{.Text}}”</blockquote>{{else}}<em>{{.Note}}</em>{{end}}</td>{{if .Have}}<td class="num"><strong>{{.Ours}}</strong></td><td>{{.Detail}}</td>{{else}}<td class="num missing">–</td><td class="missing">{{if .Detail}}{{.Detail}}{{else}}not run{{end}}</td>{{end}}</tr>
{{end}}</table>
{{range .Images}}<p><a href="{{.Src}}"><img class="fig" src="{{.Src}}" alt="{{.Alt}}"></a></p>
{{end}}{{if .JSON}}<p><a href="{{.JSON}}">{{.Name}}.json</a> (every figure, with its provenance)</p>{{end}}
</section>
{{end}}
</body>
</html>
`))
