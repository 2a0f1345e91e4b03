package docs

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The lint: every measured figure is rendered from data, so a number with
// a unit, or a percentage, typed into a document's text outside the
// markers is an error naming its file and line. Not checked: fenced code
// blocks (commands, config, output), and in inline code spans the units
// glued to their number the way configs write them (`25ms`, `20mbit`,
// `64KiB`); a number with a spaced unit or a percentage is checked there
// too. What remains that is not a measurement (the machine's size, a
// scenario's set-up) stands in the allow-list of docs/figures.yaml, by its
// exact phrase and why; an entry that matches nothing is an error too.

// units the lint knows; the alternation is built longest first, so that
// "segments" is not read as "s" and "ms" not as "m".
var unitAlt = func() string {
	units := []string{
		`Mbit/s`, `Gbit/s`, `kbit/s`, `mbit/s`, `gbit/s`, `Mbps`, `Gbps`, `MB/s`, `kB/s`, `KB/s`,
		`Mbit`, `Gbit`, `mbit`, `gbit`, `KiB`, `MiB`, `GiB`, `kB`, `KB`, `MB`, `GB`,
		`seconds`, `second`, `ms`, `µs`, `μs`, `us`, `ns`, `min`, `s`, `h`,
		`bytes`, `segments`, `packets`, `RTTs`, `RTT`, `%`, `×`,
	}
	sort.SliceStable(units, func(i, j int) bool { return len(units[i]) > len(units[j]) })
	for i, u := range units {
		units[i] = regexp.QuoteMeta(u)
	}
	return strings.Join(units, "|")
}()

// numberUnit finds a number and its unit; the character before the number
// must not make it part of a name (ecf-50-10-512k, v0.94, 10.0.0.0/8, 1:100).
// A line break may stand between them: the text is read as a whole.
var numberUnit = regexp.MustCompile(`([+−-]?\d+(?:[.,]\d+)?)([ \n\x{00A0}\x{202F}]?)(` + unitAlt + `)`)

// findNumbers returns the spans of the numbers with units in s. In code,
// only a spaced unit or a percentage counts.
func findNumbers(s string, code bool) [][2]int {
	var out [][2]int
	for _, m := range numberUnit.FindAllStringSubmatchIndex(s, -1) {
		start, end := m[0], m[1]
		if start > 0 {
			r, _ := utf8.DecodeLastRuneInString(s[:start])
			if unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("_.-/:+−", r) {
				continue
			}
		}
		unit := s[m[6]:m[7]]
		if unit != "%" && unit != "×" && end < len(s) {
			r, _ := utf8.DecodeRuneInString(s[end:])
			if unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '/' {
				continue
			}
		}
		if code && m[4] == m[5] && unit != "%" {
			continue // glued, the way configs write it
		}
		out = append(out, [2]int{start, end})
	}
	return out
}

var (
	inlineCode  = regexp.MustCompile("`[^`\n]*`")
	htmlComment = regexp.MustCompile(`(?s)<!--.*?-->`)
)

// mask blanks what the lint does not read: the markers with what they
// render, and every other HTML comment (newlines kept, so lines still
// count).
func mask(doc string, ms []Marker) string {
	b := []byte(doc)
	blank := func(from, to int) {
		for i := from; i < to; i++ {
			if b[i] != '\n' {
				b[i] = ' '
			}
		}
	}
	for _, m := range ms {
		from := strings.LastIndex(doc[:m.BodyStart], "<!--")
		to := m.BodyEnd + strings.Index(doc[m.BodyEnd:], "-->") + len("-->")
		blank(from, to)
	}
	for _, loc := range htmlComment.FindAllStringIndex(string(b), -1) {
		blank(loc[0], loc[1])
	}
	return string(b)
}

// lint returns one problem per number with a unit typed into the text of a
// document, and counts the allow-list entries it used.
func lint(file, doc string, ms []Marker, allow []Allow, usedAllow map[int]int) []string {
	text := []byte(mask(doc, ms))
	blank := func(from, to int) {
		for i := from; i < to; i++ {
			if text[i] != '\n' {
				text[i] = ' '
			}
		}
	}
	// Fenced code blocks: commands, configs, output.
	off, fenced, from := 0, false, 0
	for _, line := range strings.SplitAfter(string(text), "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			if !fenced {
				from = off
			} else {
				blank(from, off+len(line))
			}
			fenced = !fenced
		}
		off += len(line)
	}
	// Allowed phrases, wherever the text wraps them.
	for k, a := range allow {
		if a.File != file {
			continue
		}
		re := regexp.MustCompile(strings.Join(strings.Fields(regexp.QuoteMeta(a.Text)), `\s+`))
		for _, loc := range re.FindAllIndex(text, -1) {
			usedAllow[k]++
			blank(loc[0], loc[1])
		}
	}
	var out []string
	report := func(at int, f string) {
		out = append(out, fmt.Sprintf("%s:%d: %q is a number with a unit typed into the text: render it from data (a fig marker), quote a paper (a paper marker), or, if it is no measurement, allow its phrase in docs/figures.yaml (lint: allow)", file, lineOf(doc, at), strings.Join(strings.Fields(f), " ")))
	}
	type hit struct {
		at   int
		text string
	}
	var hits []hit
	for _, loc := range inlineCode.FindAllIndex(text, -1) {
		span := string(text[loc[0]:loc[1]])
		for _, n := range findNumbers(span, true) {
			hits = append(hits, hit{loc[0] + n[0], span[n[0]:n[1]]})
		}
		blank(loc[0], loc[1])
	}
	rest := string(text)
	for _, n := range findNumbers(rest, false) {
		hits = append(hits, hit{n[0], rest[n[0]:n[1]]})
	}
	sort.Slice(hits, func(i, j int) bool { return hits[i].at < hits[j].at })
	for _, h := range hits {
		report(h.at, h.text)
	}
	return out
}
