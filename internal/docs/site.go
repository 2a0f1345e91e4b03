package docs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"mpsteer/internal/docs/legacy"
	"mpsteer/internal/lab/reproduce"
)

// Site is where the documents, their definitions and their data are,
// relative to the repository (Root).
type Site struct {
	Root      string
	Docs      []string // README.md, docs/results.md
	Data      string   // docs/data
	Defs      string   // docs/figures.yaml
	Papers    string   // docs/papers.yaml
	Legacy    string   // docs/data/legacy.yaml
	Scenarios string   // scenarios
}

// Default is the repository's layout.
func Default(root string) Site {
	return Site{Root: root, Docs: []string{"README.md", "docs/results.md"}, Data: "docs/data", Defs: "docs/figures.yaml",
		Papers: "docs/papers.yaml", Legacy: "docs/data/legacy.yaml", Scenarios: "scenarios"}
}

// Result is what a render found.
type Result struct {
	// Docs holds each document as rendered from the data.
	Docs map[string]string
	// Differ names each figure whose text is not what the data give:
	// "docs/results.md:12: fig `…` reads "…"; the data give "…"".
	Differ []string
	// Problems is everything else the check refuses: a data file missing
	// or without provenance, a figure that cannot be rendered, a number
	// typed into the text, a definition nobody uses.
	Problems []string
}

// OK reports whether the documents say what the data give.
func (r *Result) OK() bool { return len(r.Differ) == 0 && len(r.Problems) == 0 }

type site struct {
	Site
	defs   *Defs
	papers *reproduce.Papers
	data   *data
}

// Render renders every figure of the documents from the data and checks
// everything the documents draw on. The error is for what stops it before
// any document (a definitions file that does not parse).
func (s Site) Render() (*Result, error) {
	st := &site{Site: s, data: newData(s.Root, s.Data, s.Scenarios)}
	b, err := os.ReadFile(filepath.Join(s.Root, s.Defs))
	if err != nil {
		return nil, err
	}
	if st.defs, err = ParseDefs(s.Defs, b); err != nil {
		return nil, err
	}
	if b, err = os.ReadFile(filepath.Join(s.Root, s.Papers)); err != nil {
		return nil, err
	}
	if st.papers, err = reproduce.Parse(s.Papers, b); err != nil {
		return nil, err
	}
	res := &Result{Docs: map[string]string{}}
	usedTables := map[string]bool{}
	usedAllow := map[int]int{}
	for _, file := range s.Docs {
		b, err := os.ReadFile(filepath.Join(s.Root, file))
		if err != nil {
			res.Problems = append(res.Problems, err.Error())
			continue
		}
		doc := string(b)
		ms, err := Parse(file, doc)
		if err != nil {
			res.Problems = append(res.Problems, err.Error())
		}
		bodies := make([]string, len(ms))
		for i, m := range ms {
			body, err := st.renderMarker(m, filepath.Dir(file), usedTables)
			if err != nil {
				res.Problems = append(res.Problems, fmt.Sprintf("%s:%d: %s: %v", file, m.Line, m.Name(), err))
				body = m.Body(doc) // left as it is: the problem says why
			}
			bodies[i] = body
			if old := m.Body(doc); old != body {
				res.Differ = append(res.Differ, differ(file, m, old, body)...)
			}
		}
		res.Docs[file] = Replace(doc, ms, bodies)
		res.Problems = append(res.Problems, lint(file, doc, ms, st.defs.Allow, usedAllow)...)
	}
	for _, name := range slices.Sorted(maps.Keys(st.defs.Tables)) {
		if !usedTables[name] {
			res.Problems = append(res.Problems, fmt.Sprintf("%s:%d: table %s is defined but no document shows it", s.Defs, st.defs.Tables[name].Line, name))
		}
	}
	for i, a := range st.defs.Allow {
		if usedAllow[i] == 0 {
			res.Problems = append(res.Problems, fmt.Sprintf("%s:%d: the allowed phrase %q is not in %s: take it out", s.Defs, a.Line, a.Text, a.File))
		}
	}
	res.Problems = append(res.Problems, st.data.checkFiles()...)
	res.Problems = append(res.Problems, st.checkLegacy()...)
	return res, nil
}

// differ names a figure whose text is not what the data give: an inline
// figure whole, a table by each line that differs (its line in the
// document), or whole when its shape changed.
func differ(file string, m Marker, old, body string) []string {
	if m.Kind == KindTable {
		ol, nl := strings.Split(old, "\n"), strings.Split(body, "\n")
		if len(ol) == len(nl) {
			var out []string
			for i := range ol {
				if ol[i] != nl[i] {
					out = append(out, fmt.Sprintf("%s:%d: %s reads %q; the data give %q", file, m.Line+i, m.Name(), ol[i], nl[i]))
				}
			}
			return out
		}
	}
	return []string{fmt.Sprintf("%s:%d: %s reads %q; the data give %q", file, m.Line, m.Name(), old, body)}
}

func (st *site) renderMarker(m Marker, docDir string, usedTables map[string]bool) (string, error) {
	switch m.Kind {
	case KindPaper:
		toks := strings.Fields(m.Spec)
		q, ok := st.papers.Quotes[toks[0]]
		if !ok {
			return "", fmt.Errorf("%s has no quote %q", st.Papers, toks[0])
		}
		switch {
		case len(toks) == 1:
			return q.Short(), nil
		case len(toks) == 2 && toks[1] == "full":
			return "“" + q.Text + "” (" + q.Where + ")", nil
		}
		return "", fmt.Errorf("give a quote id, and full for the whole sentence")
	case KindTable:
		t, ok := st.defs.Tables[m.Spec]
		if !ok {
			return "", fmt.Errorf("%s defines no table %q", st.Defs, m.Spec)
		}
		usedTables[m.Spec] = true
		body, err := st.renderTable(t, docDir)
		if err != nil {
			return "", err
		}
		return "\n" + body, nil
	}
	f, err := parseFig(m.Spec)
	if err != nil {
		return "", err
	}
	if f.bare {
		return "", fmt.Errorf("bare is for tables, whose caption gives the n")
	}
	text, _, err := st.data.render(f)
	return text, err
}

// checkLegacy checks that each file converted from the archive is what its
// sources give today, and that the archive holds nothing the manifest does
// not account for.
func (st *site) checkLegacy() []string {
	b, err := os.ReadFile(filepath.Join(st.Root, st.Legacy))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return []string{err.Error()}
	}
	mf, err := legacy.ParseManifest(st.Legacy, b)
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	conv, err := mf.Convert(filepath.Join(st.Root, st.Data), filepath.Join(st.Root, st.Scenarios))
	if err != nil {
		return []string{err.Error()}
	}
	for _, rel := range slices.Sorted(maps.Keys(conv)) {
		name := filepath.Join(st.Data, rel)
		have, err := os.ReadFile(filepath.Join(st.Root, name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			out = append(out, fmt.Sprintf("%s is missing: `mpsteer docs legacy` makes it from its sources in %s", name, st.Legacy))
		case err != nil:
			out = append(out, err.Error())
		case !bytes.Equal(have, conv[rel]):
			out = append(out, fmt.Sprintf("%s is not what `mpsteer docs legacy` makes of its sources in %s (edited by hand? measured again? then take it out of %s and archive its sources there)", name, st.Legacy, st.Legacy))
		}
	}
	acc := mf.Accounted()
	archive := filepath.Join(st.Root, st.Data, "archive")
	filepath.WalkDir(archive, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(filepath.Join(st.Root, st.Data), p)
		if acc[filepath.ToSlash(rel)] == "" {
			out = append(out, fmt.Sprintf("%s is not accounted for in %s: name it as a source, or under archived: with why it is not used", filepath.Join(st.Data, rel), st.Legacy))
		}
		return nil
	})
	for _, f := range slices.Sorted(maps.Keys(acc)) {
		if _, err := os.Stat(filepath.Join(st.Root, st.Data, f)); err != nil {
			out = append(out, fmt.Sprintf("%s names %s, which is not there (nothing is deleted from %s: superseded data moves to %s/archive/)", st.Legacy, filepath.Join(st.Data, f), st.Data, st.Data))
		}
	}
	return out
}

// Write writes the rendered documents that changed.
func (s Site) Write(res *Result) ([]string, error) {
	var written []string
	for _, file := range s.Docs {
		doc, ok := res.Docs[file]
		if !ok {
			continue
		}
		path := filepath.Join(s.Root, file)
		old, err := os.ReadFile(path)
		if err != nil {
			return written, err
		}
		if string(old) == doc {
			continue
		}
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			return written, err
		}
		written = append(written, file)
	}
	return written, nil
}
