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
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"mpsteer/internal/lab/report"
	"mpsteer/internal/yamlcfg"
)

// Papers is the list of paper experiments.
type Papers struct {
	File        string
	Titles      map[string]string // paper id → title
	Experiments []Experiment
}

// Experiment is one scenario a paper stands behind.
type Experiment struct {
	Scenario string // scenarios/<Scenario>.yaml
	Paper    string // an id of Papers.Titles
	Figure   string
	Rows     []Row
}

// Row is one number of the paper and the one of ours it is set beside.
type Row struct {
	What     string
	Paper    string // as the paper gives it
	Metric   string
	Variant  string
	Baseline string // "": the variant's own number
	As       string // value, ratio, change
}

var scenarioName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

var metricRe = regexp.MustCompile(`^(goodput_mbit|retransmits|bytes|duration_s|fct_median_ms|fct_p99_ms|share:[A-Za-z0-9._-]+|[a-z0-9_]+)$`)

// Load reads a papers file; every problem names the file, line and key.
func Load(file string) (*Papers, error) {
	data, err := yamlcfg.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return Parse(file, data)
}

// Parse reads a papers file's contents.
func Parse(file string, data []byte) (*Papers, error) {
	m, err := yamlcfg.Parse(file, data)
	if err != nil {
		return nil, err
	}
	p := &Papers{File: file, Titles: map[string]string{}}
	if pm := m.Map("papers"); pm != nil {
		for _, k := range pm.Keys() {
			p.Titles[k] = pm.String(k, "")
		}
		pm.Done()
	}
	if len(p.Titles) == 0 && !m.Failed("papers") {
		m.Errorf("papers", "name the papers: a mapping of ids to titles, e.g. {asym: \"An Evaluation of …\"}")
	}
	seen := map[string]bool{}
	for _, it := range m.List("experiments") {
		if it.Map == nil {
			m.ErrorAt(it.Node, it.Path, "an experiment is a mapping: {scenario, paper, figure, rows}")
			continue
		}
		e := Experiment{Scenario: it.Map.String("scenario", ""), Paper: it.Map.String("paper", ""), Figure: it.Map.String("figure", "")}
		switch {
		case !scenarioName.MatchString(e.Scenario):
			it.Map.Errorf("scenario", "%q is not a scenario name (the file scenarios/NAME.yaml, e.g. asym-2-bandwidth)", e.Scenario)
		case seen[e.Scenario]:
			it.Map.Errorf("scenario", "%s is listed twice (give one experiment several rows)", e.Scenario)
		}
		seen[e.Scenario] = true
		if _, ok := p.Titles[e.Paper]; !ok {
			var ids []string
			for id := range p.Titles {
				ids = append(ids, id)
			}
			sort.Strings(ids)
			it.Map.Errorf("paper", "unknown paper %q (valid: %s)", e.Paper, strings.Join(ids, ", "))
		}
		for _, r := range it.Map.List("rows") {
			if r.Map == nil {
				it.Map.ErrorAt(r.Node, r.Path, "a row is a mapping: {what, paper, metric, variant, baseline, as}")
				continue
			}
			row := Row{What: r.Map.String("what", ""), Paper: r.Map.String("paper", ""), Metric: r.Map.String("metric", ""),
				Variant: r.Map.String("variant", ""), Baseline: r.Map.String("baseline", "")}
			def := "value"
			if row.Baseline != "" {
				def = "change"
			}
			row.As = r.Map.Enum("as", def, "value", "ratio", "change")
			for key, v := range map[string]string{"what": row.What, "paper": row.Paper, "variant": row.Variant} {
				if v == "" && !r.Map.Failed(key) {
					r.Map.Errorf(key, "missing")
				}
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
	m.Done()
	if err := m.Err(); err != nil {
		return nil, err
	}
	return p, nil
}

// Value is one of a summary's numbers by its metric name.
func Value(s *report.Summary, metric string) (float64, bool) {
	switch metric {
	case "goodput_mbit":
		return s.GoodputMbit, true
	case "retransmits":
		return float64(s.Retransmits), true
	case "bytes":
		return float64(s.Bytes), true
	case "duration_s":
		return s.DurationS, true
	case "fct_median_ms", "fct_p99_ms":
		if s.FCT == nil || s.FCT.Count == 0 {
			return 0, false
		}
		if metric == "fct_median_ms" {
			return s.FCT.Median, true
		}
		return s.FCT.P99, true
	}
	if path, ok := strings.CutPrefix(metric, "share:"); ok {
		ps, ok := s.Paths[path]
		return ps.Share, ok
	}
	v, ok := s.Metrics[metric]
	return v, ok
}

// Ours is our number for a row from a run's summaries, formatted, and
// the numbers it comes from; ok is false when the run lacks them.
func (r Row) Ours(sums []*report.Summary) (ours, detail string, ok bool) {
	find := func(variant string) (float64, bool) {
		for _, s := range sums {
			if s.Variant == variant {
				return Value(s, r.Metric)
			}
		}
		return 0, false
	}
	v, ok := find(r.Variant)
	if !ok {
		return "", fmt.Sprintf("no %s for variant %s", r.Metric, r.Variant), false
	}
	if r.Baseline == "" {
		return format(r.Metric, v), r.Variant, true
	}
	b, ok := find(r.Baseline)
	if !ok {
		return "", fmt.Sprintf("no %s for variant %s", r.Metric, r.Baseline), false
	}
	detail = fmt.Sprintf("%s %s against %s %s", r.Variant, format(r.Metric, v), r.Baseline, format(r.Metric, b))
	if b == 0 {
		return "–", detail, true
	}
	switch r.As {
	case "ratio":
		return fmt.Sprintf("%.0f%%", 100*v/b), detail, true
	case "change":
		c := 100 * (v/b - 1)
		if math.Abs(c) < 0.05 {
			c = 0
		}
		return fmt.Sprintf("%+.1f%%", c), detail, true
	}
	return format(r.Metric, v), detail, true
}

func format(metric string, v float64) string {
	switch {
	case metric == "goodput_mbit" || strings.HasSuffix(metric, "_mbit"):
		return fmt.Sprintf("%.1f Mbit/s", v)
	case strings.HasPrefix(metric, "share:") || strings.HasSuffix(metric, "_share"):
		return fmt.Sprintf("%.1f%%", 100*v)
	case strings.HasSuffix(metric, "_ms") && v < 1000:
		return fmt.Sprintf("%.1f ms", v)
	case strings.HasSuffix(metric, "_ms"):
		return fmt.Sprintf("%.0f ms", v)
	case strings.HasSuffix(metric, "_s"):
		return fmt.Sprintf("%.2f s", v)
	case metric == "bytes":
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	}
	return fmt.Sprintf("%.0f", v)
}

// Command is the command line that runs an experiment into dir.
func Command(scenarioDir, scenario, dir string) string {
	return fmt.Sprintf("mpsteer lab run %s --out %s", filepath.Join(scenarioDir, scenario+".yaml"), filepath.Join(dir, scenario))
}

// readRun loads a run's results.json; nil when the run is not there.
func readRun(dir string) ([]*report.Summary, error) {
	data, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var sums []*report.Summary
	if err := json.Unmarshal(data, &sums); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "results.json"), err)
	}
	return sums, nil
}

// Options say where the index looks and what it shows.
type Options struct {
	Dir         string // the runs are Dir/<scenario>/; the page is Dir/index.html
	ScenarioDir string // where the scenario files are, for the commands (default scenarios)
	// Failed are runs that failed, with why (shown instead of the results).
	Failed map[string]string
	Now    time.Time
}

type pageRow struct {
	Row
	Ours, Detail string
	Have         bool
}

type pageImage struct{ Src, Alt string }

type pageExperiment struct {
	Experiment
	Title    string
	Command  string
	Ran      bool
	Failed   string
	Rows     []pageRow
	Images   []pageImage
	Variants []pageImage // per variant goodput plots
	Report   string
}

type page struct {
	Generated   string
	PapersFile  string
	Experiments []pageExperiment
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
	pg := page{Generated: o.Now.UTC().Format("2006-01-02 15:04 UTC"), PapersFile: p.File, Total: len(p.Experiments)}
	for _, e := range p.Experiments {
		dir := filepath.Join(o.Dir, e.Scenario)
		pe := pageExperiment{Experiment: e, Title: p.Titles[e.Paper], Command: Command(o.ScenarioDir, e.Scenario, o.Dir), Failed: o.Failed[e.Scenario]}
		sums, err := readRun(dir)
		if err != nil {
			pe.Failed = err.Error()
		}
		pe.Ran = sums != nil
		if pe.Ran {
			pg.Ran++
		}
		for _, r := range e.Rows {
			pr := pageRow{Row: r}
			if pe.Ran {
				pr.Ours, pr.Detail, pr.Have = r.Ours(sums)
			}
			pe.Rows = append(pe.Rows, pr)
		}
		for _, img := range []string{"compare.png", "fct_cdf.png"} {
			if _, err := os.Stat(filepath.Join(dir, img)); err == nil {
				pe.Images = append(pe.Images, pageImage{Src: e.Scenario + "/" + img, Alt: e.Scenario + " " + img})
			}
		}
		for _, s := range sums {
			if _, err := os.Stat(filepath.Join(dir, s.Variant, "goodput.png")); err == nil {
				pe.Variants = append(pe.Variants, pageImage{Src: e.Scenario + "/" + s.Variant + "/goodput.png", Alt: s.Variant})
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "report.md")); err == nil {
			pe.Report = e.Scenario + "/report.md"
		}
		pg.Experiments = append(pg.Experiments, pe)
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
nav li { margin: 0.1em 0; }
</style>
</head>
<body>
<h1>The papers' experiments, reproduced</h1>
<p>{{.Ran}} of {{.Total}} experiments have results here; generated {{.Generated}} by <code>mpsteer lab reproduce</code>
from the list in <code>{{.PapersFile}}</code>. Every number under "ours" is measured (the run's <code>results.json</code>);
the papers' numbers are the papers' own. Each experiment says the command that runs it alone.</p>
<nav><ul>
{{range .Experiments}}<li><a href="#{{.Scenario}}">{{.Scenario}}</a> — {{.Figure}}{{if not .Ran}} <span class="missing">(not run)</span>{{end}}</li>
{{end}}</ul></nav>
{{range .Experiments}}
<section id="{{.Scenario}}">
<h2>{{.Scenario}}</h2>
<p><em>{{.Title}}</em>, {{.Figure}}.</p>
<p><code>{{.Command}}</code></p>
{{if .Failed}}<p class="missing">The run failed: {{.Failed}}</p>{{end}}
<table>
<tr><th>what</th><th>paper</th><th>ours</th><th>from</th></tr>
{{range .Rows}}<tr><td>{{.What}}</td><td class="num">{{.Paper}}</td>{{if .Have}}<td class="num"><strong>{{.Ours}}</strong></td><td>{{.Detail}}</td>{{else}}<td class="num missing">–</td><td class="missing">{{if .Detail}}{{.Detail}}{{else}}not run{{end}}</td>{{end}}</tr>
{{end}}</table>
{{range .Images}}<p><a href="{{.Src}}"><img class="fig" src="{{.Src}}" alt="{{.Alt}}"></a></p>
{{end}}{{if .Variants}}<details class="variants"><summary>goodput over time, per variant</summary>
{{range .Variants}}<a href="{{.Src}}"><img src="{{.Src}}" alt="{{.Alt}}" title="{{.Alt}}"></a>
{{end}}</details>{{end}}
{{if .Report}}<p><a href="{{.Report}}">report.md</a> (the run's whole table)</p>{{end}}
</section>
{{end}}
</body>
</html>
`))
