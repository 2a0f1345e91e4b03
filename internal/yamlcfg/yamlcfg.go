// Package yamlcfg decodes YAML strictly, so that every mistake in a scenario
// or config file is reported with its file, line and key path, and with what
// would have been valid. Unknown keys are errors, never silently ignored.
//
// A caller walks the document with Map accessors; each accessor records the
// key as known. Done reports the keys nobody asked for. A key given twice in
// one mapping is an error of Parse itself, so no caller can miss it.
package yamlcfg

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"mpsteer/internal/units"
)

// Errors collects every problem found in one document.
type Errors struct {
	list []error
	// more counts the problems beyond the first MaxErrors, which are not
	// kept: a file with a mistake on every line gets a bounded report.
	more int
}

func (e *Errors) add(err error) {
	if len(e.list) < MaxErrors {
		e.list = append(e.list, err)
		return
	}
	e.more++
}

// Count is how many problems have been recorded so far.
func (e *Errors) Count() int { return len(e.list) + e.more }

// Err returns nil or all problems joined, one per line.
func (e *Errors) Err() error {
	if len(e.list) == 0 {
		return nil
	}
	if e.more > 0 {
		return errors.Join(append(e.list[:len(e.list):len(e.list)], fmt.Errorf("(%d more problems not shown)", e.more))...)
	}
	return errors.Join(e.list...)
}

// Map is one YAML mapping, with the path that leads to it.
type Map struct {
	file  string
	path  string
	node  *yaml.Node
	known map[string]bool
	errs  *Errors
	// failed holds the keys a problem was recorded for, so that callers can
	// leave out follow-up complaints about a value already reported bad.
	failed map[string]bool
}

func newMap(file, path string, node *yaml.Node, errs *Errors) *Map {
	return &Map{file: file, path: path, node: node, known: map[string]bool{}, errs: errs, failed: map[string]bool{}}
}

// ParseFile reads and parses a YAML file. The returned Map is the document's
// top-level mapping; an empty file gives an empty mapping.
func ParseFile(file string) (*Map, error) {
	data, err := ReadFile(file)
	if err != nil {
		return nil, err
	}
	return Parse(file, data)
}

// Parse parses YAML text that came from file (used in messages only). A
// document beyond the bounds of limits.go is refused whole, before any
// caller walks it.
func Parse(file string, data []byte) (*Map, error) {
	if err := checkSize(file, data); err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %v", file, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	errs := &Errors{}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		empty := &yaml.Node{Kind: yaml.MappingNode, Line: 1}
		return newMap(file, "", empty, errs), nil
	}
	if err := checkCost(file, doc.Content[0]); err != nil {
		return nil, err
	}
	root := resolve(doc.Content[0])
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: the document must be a mapping of keys to values", file, root.Line)
	}
	dups := &Errors{}
	findDuplicates(file, "", doc.Content[0], dups)
	if err := dups.Err(); err != nil {
		return nil, err
	}
	return newMap(file, "", root, errs), nil
}

// findDuplicates reports every key given more than once in one mapping,
// anywhere under n, once per repeated occurrence. Aliases are not followed:
// the mapping an alias points to is checked where it is defined, so each
// duplicate is reported once.
func findDuplicates(file, path string, n *yaml.Node, errs *Errors) {
	join := func(key string) string {
		if path == "" {
			return key
		}
		return path + "." + key
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			findDuplicates(file, path, c, errs)
		}
	case yaml.MappingNode:
		first := map[string]int{}
		times := map[string]int{}
		c := n.Content
		for i := 0; i+1 < len(c); i += 2 {
			k := c[i]
			if k.Kind == yaml.ScalarNode {
				times[k.Value]++
				if line, seen := first[k.Value]; seen {
					count := "twice"
					if times[k.Value] > 2 {
						count = fmt.Sprintf("%d times", times[k.Value])
					}
					errs.add(fmt.Errorf("%s:%d: %s: key %q is given %s (first on line %d)", file, k.Line, join(k.Value), k.Value, count, line))
				} else {
					first[k.Value] = k.Line
				}
			}
			findDuplicates(file, join(k.Value), c[i+1], errs)
		}
	case yaml.SequenceNode:
		for i, e := range n.Content {
			findDuplicates(file, fmt.Sprintf("%s[%d]", path, i), e, errs)
		}
	}
}

func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// File is the file name the map came from.
func (m *Map) File() string { return m.file }

// Path is the key path of this map ("" at the top).
func (m *Map) Path() string { return m.path }

// Line is the line where the mapping starts.
func (m *Map) Line() int { return m.node.Line }

// Where is "file:line: path" of a key of the map (its value's line), or
// of the map itself for "": where a problem found later, away from the
// document, is said to be.
func (m *Map) Where(key string) string {
	line, where := m.node.Line, m.path
	if key != "" {
		if _, v := m.lookup(key); v != nil {
			line = v.Line
		}
		where = m.keyPath(key)
	}
	if where == "" {
		where = "(top level)"
	}
	return fmt.Sprintf("%s:%d: %s", m.file, line, where)
}

// Errs gives access to the shared error list, for callers that validate
// relations between keys.
func (m *Map) Errs() *Errors { return m.errs }

// Err returns every problem recorded so far in this document.
func (m *Map) Err() error { return m.errs.Err() }

func (m *Map) keyPath(key string) string {
	if m.path == "" {
		return key
	}
	return m.path + "." + key
}

// Errorf records a problem with key (which may be "" for the map itself).
func (m *Map) Errorf(key string, format string, args ...any) {
	line := m.node.Line
	if _, v := m.lookup(key); v != nil {
		line = v.Line
	}
	where := m.path
	if key != "" {
		where = m.keyPath(key)
	}
	if where == "" {
		where = "(top level)"
	}
	if key != "" {
		m.failed[key] = true
	}
	m.errs.add(fmt.Errorf("%s:%d: %s: %s", m.file, line, where, fmt.Sprintf(format, args...)))
}

// Failed reports whether a problem with key has been recorded already (by an
// accessor that could not read its value, or by Errorf). Callers use it to
// leave out a second, follow-up complaint about a value already reported.
func (m *Map) Failed(key string) bool { return m.failed[key] }

// ErrorAt records a problem at a node that is not a key of a map (a list item).
func (m *Map) ErrorAt(n *yaml.Node, path string, format string, args ...any) {
	m.errs.add(fmt.Errorf("%s:%d: %s: %s", m.file, n.Line, path, fmt.Sprintf(format, args...)))
}

func (m *Map) lookup(key string) (*yaml.Node, *yaml.Node) {
	c := m.node.Content
	for i := 0; i+1 < len(c); i += 2 {
		if c[i].Value == key {
			return c[i], resolve(c[i+1])
		}
	}
	return nil, nil
}

// Has reports whether key is present (and marks it known).
func (m *Map) Has(key string) bool {
	m.known[key] = true
	_, v := m.lookup(key)
	return v != nil
}

// Keys lists the keys present, in file order.
func (m *Map) Keys() []string {
	var ks []string
	c := m.node.Content
	for i := 0; i+1 < len(c); i += 2 {
		ks = append(ks, c[i].Value)
	}
	return ks
}

func (m *Map) scalar(key string) (string, bool) {
	m.known[key] = true
	_, v := m.lookup(key)
	if v == nil {
		return "", false
	}
	if v.Kind != yaml.ScalarNode {
		m.Errorf(key, "must be a single value, not a %s", kindName(v))
		return "", false
	}
	return v.Value, true
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	default:
		return "value"
	}
}

// String returns the value of key, or def when absent.
func (m *Map) String(key, def string) string {
	if s, ok := m.scalar(key); ok {
		return s
	}
	return def
}

// Enum returns key's value, which must be one of valid; def when absent.
func (m *Map) Enum(key, def string, valid ...string) string {
	s, ok := m.scalar(key)
	if !ok {
		return def
	}
	for _, v := range valid {
		if s == v {
			return s
		}
	}
	m.Errorf(key, "%q is not valid (valid: %s)", s, strings.Join(valid, ", "))
	return def
}

// Bool reads true/false.
func (m *Map) Bool(key string, def bool) bool {
	s, ok := m.scalar(key)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		m.Errorf(key, "%q is not valid (valid: true, false)", s)
		return def
	}
	return b
}

// Int reads a whole number within [min, max].
func (m *Map) Int(key string, def, min, max int) int {
	s, ok := m.scalar(key)
	if !ok {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < min || v > max {
		m.Errorf(key, "%q is not valid (a whole number from %d to %d)", s, min, max)
		return def
	}
	return v
}

// Float reads a plain number within [min, max].
func (m *Map) Float(key string, def, min, max float64) float64 {
	s, ok := m.scalar(key)
	if !ok {
		return def
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < min || v > max {
		m.Errorf(key, "%q is not valid (a number from %g to %g)", s, min, max)
		return def
	}
	return v
}

// Duration reads a value such as 10ms.
func (m *Map) Duration(key string, def time.Duration) time.Duration {
	s, ok := m.scalar(key)
	if !ok {
		return def
	}
	d, err := units.ParseDuration(s)
	if err != nil {
		m.Errorf(key, "%v", err)
		return def
	}
	return d
}

// Rate reads a value such as 400mbit.
func (m *Map) Rate(key string, def units.Rate) units.Rate {
	s, ok := m.scalar(key)
	if !ok {
		return def
	}
	r, err := units.ParseRate(s)
	if err != nil {
		m.Errorf(key, "%v", err)
		return def
	}
	return r
}

// Size reads a value such as 256KiB.
func (m *Map) Size(key string, def units.Size) units.Size {
	s, ok := m.scalar(key)
	if !ok {
		return def
	}
	v, err := units.ParseSize(s)
	if err != nil {
		m.Errorf(key, "%v", err)
		return def
	}
	return v
}

// Fraction reads a percentage such as 1%.
func (m *Map) Fraction(key string, def units.Fraction) units.Fraction {
	s, ok := m.scalar(key)
	if !ok {
		return def
	}
	f, err := units.ParseFraction(s)
	if err != nil {
		m.Errorf(key, "%v", err)
		return def
	}
	return f
}

// Map returns the mapping under key, or nil when absent.
func (m *Map) Map(key string) *Map {
	m.known[key] = true
	_, v := m.lookup(key)
	if v == nil {
		return nil
	}
	if v.Kind != yaml.MappingNode {
		m.Errorf(key, "must be a mapping of keys to values, not a %s", kindName(v))
		return nil
	}
	return newMap(m.file, m.keyPath(key), v, m.errs)
}

// Item is one element of a list: either a scalar or a mapping.
type Item struct {
	Path   string
	Node   *yaml.Node
	Map    *Map   // set when the element is a mapping
	Scalar string // set when the element is a scalar
}

// List returns the elements of the list under key. A single mapping or
// scalar where a list is expected is accepted as a one-element list, which
// keeps short files short ("outage: {at: 5s, for: 5s}").
func (m *Map) List(key string) []Item {
	m.known[key] = true
	_, v := m.lookup(key)
	if v == nil {
		return nil
	}
	var elems []*yaml.Node
	if v.Kind == yaml.SequenceNode {
		elems = v.Content
	} else {
		elems = []*yaml.Node{v}
	}
	items := make([]Item, 0, len(elems))
	for i, e := range elems {
		e = resolve(e)
		p := fmt.Sprintf("%s[%d]", m.keyPath(key), i)
		it := Item{Path: p, Node: e}
		switch e.Kind {
		case yaml.MappingNode:
			it.Map = newMap(m.file, p, e, m.errs)
		case yaml.ScalarNode:
			it.Scalar = e.Value
		default:
			m.failed[key] = true
			m.ErrorAt(e, p, "must be a value or a mapping, not a nested list")
			continue
		}
		items = append(items, it)
	}
	return items
}

// Strings returns a list of scalars.
func (m *Map) Strings(key string) []string {
	var out []string
	for _, it := range m.List(key) {
		if it.Map != nil {
			m.failed[key] = true
			m.ErrorAt(it.Node, it.Path, "must be a single value, not a mapping")
			continue
		}
		out = append(out, it.Scalar)
	}
	return out
}

// Done reports every key of the mapping that no accessor asked for.
func (m *Map) Done() {
	if m == nil {
		return
	}
	var valid []string
	for k := range m.known {
		valid = append(valid, k)
	}
	sort.Strings(valid)
	c := m.node.Content
	for i := 0; i+1 < len(c); i += 2 {
		k := c[i].Value
		if !m.known[k] {
			where := m.keyPath(k)
			m.errs.add(fmt.Errorf("%s:%d: %s: unknown key %q (valid here: %s)", m.file, c[i].Line, where, k, strings.Join(valid, ", ")))
		}
	}
}

// RawNode returns the node under key (marking it known), for callers that
// hand a sub-document on verbatim.
func RawNode(m *Map, key string) *yaml.Node {
	m.known[key] = true
	_, v := m.lookup(key)
	return v
}
