// Package docs renders every measured figure of the project's documents
// (README.md, docs/results.md) from the data under docs/data, and checks
// that the text says what the data give (`mpsteer docs render [--check]`,
// make docs and make docs-check).
//
// A figure sits between two HTML comments, which GitHub does not show:
//
//	<!-- fig: ecf-50-50-1m ratio mptcp+ecf/mptcp -->+1.2% (95% CI −0.5 to +3.0%, n = 5)<!-- /fig -->
//	<!-- paper: emptcp-fig9a-avg -->“on average 30.9%” (§V.B use case 3, Fig. 9a …)<!-- /paper -->
//	<!-- table: ecf -->
//	| … the table, rendered … |
//	<!-- /table -->
//
// The opening comment says what the figure is (spec.go: an inline
// definition; a table's is in docs/figures.yaml, a quote's in
// docs/papers.yaml); what stands between the comments is rendered from the
// data and is what the check compares. Outside the markers, a number with
// a unit typed into the text is an error (lint.go).
package docs

import (
	"fmt"
	"strings"
)

// Kind of marker.
type Kind string

const (
	KindFig   Kind = "fig"
	KindPaper Kind = "paper"
	KindTable Kind = "table"
)

// Marker is one rendered place in a document.
type Marker struct {
	Kind Kind
	Spec string // what follows "fig:", "paper:" or "table:"
	Line int    // of the opening comment, from 1
	// Body is the text between the comments, which the renderer replaces:
	// [BodyStart, BodyEnd) in the document.
	BodyStart, BodyEnd int
}

// Body returns the marker's current text in doc.
func (m Marker) Body(doc string) string { return doc[m.BodyStart:m.BodyEnd] }

// Name is how problems name a marker: "fig `ecf-50-50-1m ratio mptcp+ecf/mptcp`".
func (m Marker) Name() string { return fmt.Sprintf("%s `%s`", m.Kind, m.Spec) }

// Parse finds the markers of a document. Inline markers (fig, paper) open
// and close on one line; a table's comments stand on lines of their own.
// A marker that does not close, or closes with the wrong kind, is an error
// naming its line.
func Parse(file, doc string) ([]Marker, error) {
	var out []Marker
	var errs []string
	pos := 0
	for {
		i := strings.Index(doc[pos:], "<!--")
		if i < 0 {
			break
		}
		start := pos + i
		j := strings.Index(doc[start:], "-->")
		if j < 0 {
			errs = append(errs, fmt.Sprintf("%s:%d: an HTML comment that does not close", file, lineOf(doc, start)))
			break
		}
		end := start + j + len("-->")
		inner := strings.TrimSpace(doc[start+len("<!--") : start+j])
		pos = end
		kind, spec, ok := strings.Cut(inner, ":")
		k := Kind(strings.TrimSpace(kind))
		if !ok || (k != KindFig && k != KindPaper && k != KindTable) {
			if c, isClose := strings.CutPrefix(inner, "/"); isClose && (Kind(c) == KindFig || Kind(c) == KindPaper || Kind(c) == KindTable) {
				errs = append(errs, fmt.Sprintf("%s:%d: <!-- /%s --> closes no marker", file, lineOf(doc, start), c))
			}
			continue
		}
		spec = strings.TrimSpace(spec)
		line := lineOf(doc, start)
		if spec == "" {
			errs = append(errs, fmt.Sprintf("%s:%d: <!-- %s: --> says nothing: give what it renders", file, line, k))
			continue
		}
		closing := "<!-- /" + string(k) + " -->"
		m := Marker{Kind: k, Spec: spec, Line: line, BodyStart: end}
		if k == KindTable {
			if !aloneOnLine(doc, start, end) {
				errs = append(errs, fmt.Sprintf("%s:%d: <!-- table: %s --> must stand on a line of its own", file, line, spec))
				continue
			}
			c := strings.Index(doc[end:], closing)
			if c < 0 {
				errs = append(errs, fmt.Sprintf("%s:%d: <!-- table: %s --> is not closed by %s", file, line, spec, closing))
				continue
			}
			cs := end + c
			if !aloneOnLine(doc, cs, cs+len(closing)) {
				errs = append(errs, fmt.Sprintf("%s:%d: %s must stand on a line of its own", file, lineOf(doc, cs), closing))
				continue
			}
			m.BodyEnd = cs
			pos = cs + len(closing)
		} else {
			eol := strings.IndexByte(doc[end:], '\n')
			if eol < 0 {
				eol = len(doc) - end
			}
			c := strings.Index(doc[end:end+eol], closing)
			if c < 0 {
				errs = append(errs, fmt.Sprintf("%s:%d: <!-- %s: %s --> is not closed by %s on the same line", file, line, k, spec, closing))
				continue
			}
			if strings.Contains(doc[end:end+c], "<!--") {
				errs = append(errs, fmt.Sprintf("%s:%d: <!-- %s: %s --> holds another comment before its %s", file, line, k, spec, closing))
				continue
			}
			m.BodyEnd = end + c
			pos = end + c + len(closing)
		}
		out = append(out, m)
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return out, nil
}

func lineOf(doc string, off int) int { return strings.Count(doc[:off], "\n") + 1 }

// aloneOnLine reports whether doc[start:end] is the only text on its line.
func aloneOnLine(doc string, start, end int) bool {
	ls := strings.LastIndexByte(doc[:start], '\n') + 1
	le := strings.IndexByte(doc[end:], '\n')
	if le < 0 {
		le = len(doc) - end
	}
	return strings.TrimSpace(doc[ls:start]) == "" && strings.TrimSpace(doc[end:end+le]) == ""
}

// Replace returns doc with each marker's body replaced by bodies[i].
func Replace(doc string, ms []Marker, bodies []string) string {
	var b strings.Builder
	pos := 0
	for i, m := range ms {
		b.WriteString(doc[pos:m.BodyStart])
		b.WriteString(bodies[i])
		pos = m.BodyEnd
	}
	b.WriteString(doc[pos:])
	return b.String()
}
