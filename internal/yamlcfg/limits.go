package yamlcfg

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// Bounds on what one document may cost, whoever reads it (scenario files,
// the daemon's config, the papers file). Every file the project ships is far
// below them; they keep a malformed or hostile file from costing minutes of
// CPU or gigabytes of memory.
const (
	// MaxDocumentBytes is the largest file read. yaml.v3 builds its nodes
	// in time and memory linear in the text, so this bounds the parse
	// itself, before any walk.
	MaxDocumentBytes = 256 << 10
	// MaxNodes is the most values (scalars, mappings, lists) a document
	// may have with every alias expanded: callers walk an alias as a copy
	// of what it points to, so a few nested aliases ("billion laughs")
	// would otherwise cost exponential time in a tiny file.
	MaxNodes = 100_000
	// MaxDepth is the deepest nesting of mappings and lists, aliases
	// expanded (the top-level mapping is the first level).
	MaxDepth = 64
	// MaxErrors is the most problems reported for one document; the rest
	// are counted.
	MaxErrors = 100
)

// ReadFile reads at most MaxDocumentBytes+1 bytes of file, so that a
// device or a huge file is refused by Parse without being read whole
// (os.ReadFile of /dev/zero never returns). Callers that read a file
// themselves before Parse use it in place of os.ReadFile.
func ReadFile(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, MaxDocumentBytes+1))
}

// checkSize refuses a document longer than MaxDocumentBytes, naming the
// line where the limit falls.
func checkSize(file string, data []byte) error {
	if len(data) <= MaxDocumentBytes {
		return nil
	}
	line := 1 + bytes.Count(data[:MaxDocumentBytes], []byte("\n"))
	return fmt.Errorf("%s:%d: the file is longer than %d bytes (256 KiB), the most a config or scenario file may be", file, line, MaxDocumentBytes)
}

// costWalk measures a document as its readers see it: every alias stands
// for a copy of the node it names.
type costWalk struct {
	file string
	// total counts the values seen so far, aliases expanded.
	total int
	// done holds, for every anchored node already walked, its size and
	// height with aliases expanded; open the anchored nodes being walked.
	done map[*yaml.Node][2]int
	open map[*yaml.Node]bool
	path []string
	err  error
}

// checkCost refuses a document that expands to more than MaxNodes values,
// nests deeper than MaxDepth, or has an alias inside the node it names
// (which would expand forever). Each node is walked once; an alias adds
// the size its anchor was found to have, so the walk is linear in the text.
func checkCost(file string, root *yaml.Node) error {
	w := &costWalk{file: file, done: map[*yaml.Node][2]int{}, open: map[*yaml.Node]bool{}}
	w.walk(root, 0)
	return w.err
}

func (w *costWalk) where() string {
	p := strings.Join(w.path, "")
	p = strings.TrimPrefix(p, ".")
	if p == "" {
		return "(top level)"
	}
	return p
}

func (w *costWalk) fail(n *yaml.Node, format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf("%s:%d: %s: %s", w.file, n.Line, w.where(), fmt.Sprintf(format, args...))
	}
}

// walk visits n, which sits in depth mappings and lists (the top-level
// mapping is in none), and returns its size (values) and height (nested
// mappings and lists, 0 for a scalar) with aliases expanded.
func (w *costWalk) walk(n *yaml.Node, depth int) (size, height int) {
	if w.err != nil || n == nil {
		return 0, 0
	}
	if n.Kind == yaml.AliasNode {
		t := n.Alias
		if t == nil {
			return 0, 0
		}
		if w.open[t] {
			w.fail(n, "alias *%s is inside the value anchored &%s, so it would expand forever", n.Value, n.Value)
			return 0, 0
		}
		// An anchor comes before its aliases in the text, and the walk
		// follows the text, so the anchored node has been walked.
		c := w.done[t]
		size, height = c[0], c[1]
		w.total += size
		switch {
		case depth+height > MaxDepth:
			w.fail(n, "alias *%s nests mappings and lists deeper than %d levels", n.Value, MaxDepth)
		case w.total > MaxNodes:
			w.fail(n, "alias *%s makes the document more than %d values long (an alias counts as a copy of what it names)", n.Value, MaxNodes)
		}
		return size, height
	}
	w.total++
	container := n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode
	switch {
	case container && depth >= MaxDepth:
		w.fail(n, "mappings and lists are nested deeper than %d levels", MaxDepth)
		return 0, 0
	case w.total > MaxNodes:
		w.fail(n, "the document has more than %d values (an alias counts as a copy of what it names)", MaxNodes)
		return 0, 0
	}
	if n.Anchor != "" {
		w.open[n] = true
	}
	size = 1
	inner := depth
	if container {
		inner++
	}
	for i, c := range n.Content {
		value := n.Kind == yaml.SequenceNode || n.Kind == yaml.MappingNode && i%2 == 1
		switch {
		case n.Kind == yaml.SequenceNode:
			w.path = append(w.path, fmt.Sprintf("[%d]", i))
		case value:
			w.path = append(w.path, "."+n.Content[i-1].Value)
		}
		s, h := w.walk(c, inner)
		if value {
			w.path = w.path[:len(w.path)-1]
		}
		size += s
		height = max(height, h)
		if w.err != nil {
			break
		}
	}
	if container {
		height++
	}
	if n.Anchor != "" {
		delete(w.open, n)
		w.done[n] = [2]int{size, height}
	}
	return size, height
}
