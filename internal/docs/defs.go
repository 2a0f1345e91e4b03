package docs

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"mpsteer/internal/yamlcfg"
)

// Defs is docs/figures.yaml: the tables the documents hold, and the
// lint's allow-list.
type Defs struct {
	File   string
	Tables map[string]*Table
	Allow  []Allow
}

// Table is a table's definition: its columns, each a text or a figure
// spec with {param} holes, and its rows, each the params that fill them.
type Table struct {
	Name    string
	Line    int
	Columns []Column
	Rows    []Row
	Caption string // text under the table; {fig: SPEC} renders a figure
}

// Column of a table.
type Column struct {
	Head  string
	Text  string // a template of text, or
	Fig   string // a template of a figure spec
	Align string // left or right (default: right for figures)
}

// Row of a table: its params.
type Row struct {
	Params map[string]string
	Line   int
}

// Allow is a number with a unit the lint lets stand in a document's text:
// an exact phrase, and why it is not a measurement.
type Allow struct {
	File string // README.md or docs/results.md
	Text string
	Why  string
	Line int
}

var (
	holeRe    = regexp.MustCompile(`\{([a-z][a-z0-9_]*)\}`)
	tableName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
)

// ParseDefs reads the definitions from memory.
func ParseDefs(file string, b []byte) (*Defs, error) {
	m, err := yamlcfg.Parse(file, b)
	if err != nil {
		return nil, err
	}
	d := &Defs{File: file, Tables: map[string]*Table{}}
	if tm := m.Map("tables"); tm != nil {
		for _, name := range tm.Keys() {
			em := tm.Map(name)
			if em == nil {
				continue
			}
			if !tableName.MatchString(name) {
				tm.Errorf(name, "%q is not a table name (lower case, digits and -)", name)
			}
			t := &Table{Name: name, Line: em.Line(), Caption: em.String("caption", "")}
			for _, it := range em.List("columns") {
				if it.Map == nil {
					em.ErrorAt(it.Node, it.Path, "a column is a mapping: {head, text or fig, align}")
					continue
				}
				c := Column{Head: it.Map.String("head", ""), Text: it.Map.String("text", ""), Fig: it.Map.String("fig", ""), Align: it.Map.Enum("align", "", "left", "right")}
				if (c.Text == "") == (c.Fig == "") {
					it.Map.Errorf("", "a column renders either text: or fig:, one of them")
				}
				if !it.Map.Has("head") {
					it.Map.Errorf("head", "missing (it may be empty: head: \"\")")
				}
				it.Map.Done()
				t.Columns = append(t.Columns, c)
			}
			if len(t.Columns) == 0 && !em.Failed("columns") {
				em.Errorf("columns", "a table needs columns")
			}
			for _, it := range em.List("rows") {
				if it.Map == nil {
					em.ErrorAt(it.Node, it.Path, "a row is a mapping of the params its columns use, e.g. {s: ecf-50-10-1m, label: …}")
					continue
				}
				r := Row{Params: map[string]string{}, Line: it.Node.Line}
				for _, k := range it.Map.Keys() {
					r.Params[k] = it.Map.String(k, "")
				}
				for _, c := range t.Columns {
					missing := false
					for _, h := range holeRe.FindAllStringSubmatch(c.Text+c.Fig, -1) {
						if _, ok := r.Params[h[1]]; !ok {
							it.Map.Errorf("", "the column %q uses {%s}, which this row does not give", c.Head, h[1])
							missing = true
						}
					}
					if c.Fig != "" && !missing && !rowSkips(c.Fig, r.Params) {
						if _, err := parseFig(fill(c.Fig, r.Params)); err != nil {
							it.Map.Errorf("", "the column %q: fig `%s`: %v", c.Head, fill(c.Fig, r.Params), err)
						}
					}
				}
				it.Map.Done()
				t.Rows = append(t.Rows, r)
			}
			if len(t.Rows) == 0 && !em.Failed("rows") {
				em.Errorf("rows", "a table needs rows")
			}
			em.Done()
			d.Tables[name] = t
		}
		tm.Done()
	}
	if lm := m.Map("lint"); lm != nil {
		for _, it := range lm.List("allow") {
			if it.Map == nil {
				lm.ErrorAt(it.Node, it.Path, "an allowed phrase is a mapping: {file, text, why}")
				continue
			}
			a := Allow{File: it.Map.String("file", ""), Text: it.Map.String("text", ""), Why: it.Map.String("why", ""), Line: it.Node.Line}
			for key, v := range map[string]string{"file": a.File, "text": a.Text, "why": a.Why} {
				if v == "" && !it.Map.Failed(key) {
					it.Map.Errorf(key, "missing")
				}
			}
			if a.Text != "" && len(findNumbers(a.Text, false)) == 0 {
				it.Map.Errorf("text", "%q holds no number with a unit: the lint would not flag it", a.Text)
			}
			it.Map.Done()
			d.Allow = append(d.Allow, a)
		}
		lm.Done()
	}
	m.Done()
	if err := m.Err(); err != nil {
		return nil, err
	}
	return d, nil
}

// fill puts a row's params into a template.
func fill(tmpl string, params map[string]string) string {
	return holeRe.ReplaceAllStringFunc(tmpl, func(h string) string { return params[h[1:len(h)-1]] })
}

var captionFig = regexp.MustCompile(`\{fig: ([^}]*)\}`)

// renderTable renders a table's Markdown, with a line saying where its data
// come from (and their provenance) and which runs failed. docDir is the
// document's directory, for the links.
func (s *site) renderTable(t *Table, docDir string) (string, error) {
	var b strings.Builder
	var errs []string
	var used []usage
	b.WriteString("|")
	for _, c := range t.Columns {
		b.WriteString(" " + cell(c.Head) + " |")
	}
	b.WriteString("\n|")
	for _, c := range t.Columns {
		if c.Align == "left" || (c.Align == "" && c.Fig == "") {
			b.WriteString("---|")
		} else {
			b.WriteString("---:|")
		}
	}
	b.WriteString("\n")
	for _, r := range t.Rows {
		b.WriteString("|")
		for _, c := range t.Columns {
			var text string
			if c.Text != "" {
				text = fill(c.Text, r.Params)
			} else if rowSkips(c.Fig, r.Params) {
				text = "–"
			} else {
				spec := fill(c.Fig, r.Params)
				f, err := parseFig(spec)
				if err == nil {
					var u usage
					text, u, err = s.data.render(f)
					used = append(used, u)
				}
				if err != nil {
					errs = append(errs, fmt.Sprintf("%s:%d: table %s, column %q: fig `%s`: %v", s.defs.File, r.Line, t.Name, c.Head, spec, err))
					text = "?"
				}
			}
			b.WriteString(" " + cell(text) + " |")
		}
		b.WriteString("\n")
	}
	if t.Caption != "" {
		caption := captionFig.ReplaceAllStringFunc(t.Caption, func(m string) string {
			spec := captionFig.FindStringSubmatch(m)[1]
			f, err := parseFig(spec)
			if err == nil {
				var text string
				var u usage
				text, u, err = s.data.render(f)
				used = append(used, u)
				if err == nil {
					return text
				}
			}
			errs = append(errs, fmt.Sprintf("%s:%d: table %s, caption: fig `%s`: %v", s.defs.File, t.Line, t.Name, spec, err))
			return "?"
		})
		b.WriteString("\n" + strings.TrimSpace(caption) + "\n")
	}
	b.WriteString("\n" + s.dataLines(used, docDir))
	if len(errs) > 0 {
		return "", fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return b.String(), nil
}

// rowSkips reports whether a row leaves a figure column out: it gives "–"
// for one of the column's params.
func rowSkips(tmpl string, params map[string]string) bool {
	for _, h := range holeRe.FindAllStringSubmatch(tmpl, -1) {
		if params[h[1]] == "–" {
			return true
		}
	}
	return false
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// dataLines says where a table's figures come from, grouped by provenance,
// and which of the runs they draw on failed (and so are left out).
func (s *site) dataLines(used []usage, docDir string) string {
	groups := map[string][]string{}
	var order []string
	seen := map[string]bool{}
	variants := map[string][]string{}
	var rels []string
	for _, u := range used {
		for _, rel := range u.rels {
			if !seen[rel] {
				seen[rel] = true
				rels = append(rels, rel)
			}
			variants[rel] = append(variants[rel], u.variants...)
		}
	}
	for _, rel := range rels {
		prov := "no provenance"
		if p := s.data.Provenance(rel); p != nil {
			prov = p.Summary()
		}
		if _, ok := groups[prov]; !ok {
			order = append(order, prov)
		}
		name := strings.TrimSuffix(rel, "/results.json")
		name = strings.TrimSuffix(name, string(filepath.Separator)+"results.json")
		link, err := filepath.Rel(docDir, filepath.Join(s.data.dir, rel))
		if err != nil {
			link = filepath.Join(s.data.dir, rel)
		}
		groups[prov] = append(groups[prov], fmt.Sprintf("[%s](%s)", name, filepath.ToSlash(link)))
	}
	var b strings.Builder
	for _, prov := range order {
		fmt.Fprintf(&b, "Data: %s — %s.\n", strings.Join(groups[prov], ", "), prov)
	}
	var failed []string
	for _, rel := range rels {
		r, ok := s.data.results[rel]
		if !ok {
			continue
		}
		vs := append([]string(nil), variants[rel]...)
		sort.Strings(vs)
		done := map[string]bool{}
		for _, v := range vs {
			if done[v] || r.Variants[v] == nil {
				continue
			}
			done[v] = true
			var reasons []string
			for _, run := range r.Variants[v].Runs {
				if run.Failed && !slices.Contains(reasons, run.Reason) {
					reasons = append(reasons, run.Reason)
				}
			}
			if n := r.Failed(v); n > 0 {
				failed = append(failed, fmt.Sprintf("%s %s, %d (%s)", r.Scenario, v, n, strings.Join(reasons, "; ")))
			}
		}
	}
	if len(failed) > 0 {
		fmt.Fprintf(&b, "Failed runs, left out of every figure: %s.\n", strings.Join(failed, "; "))
	}
	return b.String()
}
