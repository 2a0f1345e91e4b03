package yamlcfg

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/units"
)

// nested is depth levels of "k:" mappings, one per line, ending in a value.
func nested(depth int) string {
	var b strings.Builder
	for i := 0; i < depth-1; i++ {
		fmt.Fprintf(&b, "%sk:\n", strings.Repeat(" ", i))
	}
	fmt.Fprintf(&b, "%sk: v\n", strings.Repeat(" ", depth-1))
	return b.String()
}

// laughs is the alias bomb: each level a list of ten aliases of the one
// before, levels deep.
func laughs(levels int) string {
	var b strings.Builder
	b.WriteString("l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i <= levels; i++ {
		fmt.Fprintf(&b, "l%d: &l%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 10), ", "))
	}
	return b.String()
}

func TestParseRefusesWhatCostsTooMuch(t *testing.T) {
	for _, c := range []struct {
		name, src, want string
	}{
		// 4096 lines of 64 bytes fill MaxDocumentBytes: the bound falls
		// at the start of line 4097.
		{"longer than MaxDocumentBytes", strings.Repeat("# a comment line of 64 bytes"+strings.Repeat(".", 35)+"\n", MaxDocumentBytes/64+1),
			"f.yaml:4097: the file is longer than 262144 bytes (256 KiB)"},
		// l3 is 11 111 values with its aliases expanded, l4 would be
		// 111 111: the walk stops inside l4's list, on line 5.
		{"alias bomb", laughs(9), "f.yaml:5: l4[7]: alias *l3 makes the document more than 100000 values long"},
		{"alias inside its anchor", "a: &a\n  b: [1, 2]\n  c: *a\n", "f.yaml:3: a.c: alias *a is inside the value anchored &a, so it would expand forever"},
		// Mapping i starts on line i: the 65th is one too deep.
		{"deep block nesting", nested(MaxDepth + 5), "f.yaml:65: " + strings.TrimSuffix(strings.Repeat("k.", MaxDepth), ".") + ": mappings and lists are nested deeper than 64 levels"},
		// a's mapping is level 2, b's list 3, the 65th level is 62 lists in.
		{"deep flow nesting", "a:\n  b: " + strings.Repeat("[", 100) + strings.Repeat("]", 100), "f.yaml:2: a.b" + strings.Repeat("[0]", MaxDepth-2) + ": mappings and lists are nested deeper than 64 levels"},
		{"deep through an alias", "deep: &d " + strings.Repeat("[", 40) + strings.Repeat("]", 40) + "\nuse:\n  x: " + strings.Repeat("[", 30) + "*d" + strings.Repeat("]", 30),
			"f.yaml:3: use.x" + strings.Repeat("[0]", 30) + ": alias *d nests mappings and lists deeper than 64 levels"},
		{"too many values", "a: [" + strings.Repeat("1,", MaxNodes) + "]", "f.yaml:1: a[99997]: the document has more than 100000 values"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(c.src))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v\nwant an error containing %q", err, c.want)
			}
		})
	}
}

func TestParseAcceptsUpToTheBounds(t *testing.T) {
	for _, c := range []struct{ name, src string }{
		{"MaxDepth levels", nested(MaxDepth)},
		// The top-level mapping, the key, the list and its items.
		{"MaxNodes values", "a: [" + strings.Repeat("1,", MaxNodes-3) + "]"},
		{"aliases within MaxNodes", laughs(3)},
		{"an alias of an anchor beside it", "a: &a {x: 1}\nb: {y: *a}\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := Parse("f.yaml", []byte(c.src)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// ParseFile reads at most MaxDocumentBytes+1 bytes: a device that never
// ends is refused, not read forever.
func TestParseFileReadsABoundedAmount(t *testing.T) {
	done := make(chan error, 1)
	go func() { _, err := ParseFile("/dev/zero"); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "/dev/zero") {
			t.Fatalf("got %v, want an error naming /dev/zero", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("ParseFile(/dev/zero) did not return")
	}
}

// A file with a mistake on every line gets MaxErrors of them and a count
// of the rest.
func TestErrorsAreBounded(t *testing.T) {
	var b strings.Builder
	for i := 0; i < MaxErrors+50; i++ {
		fmt.Fprintf(&b, "k%d: v\n", i)
	}
	m, err := Parse("f.yaml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	m.Done()
	if got := m.Errs().Count(); got != MaxErrors+50 {
		t.Errorf("Count() = %d, want %d", got, MaxErrors+50)
	}
	lines := strings.Split(m.Err().Error(), "\n")
	if len(lines) != MaxErrors+1 || lines[MaxErrors] != "(50 more problems not shown)" {
		t.Errorf("%d lines, last %q", len(lines), lines[len(lines)-1])
	}
}

// The largest document of the worst shapes found parses (or is refused)
// in well under 3 s, on a loaded machine too; a walk that grew quadratic
// would not.
func TestParseCostIsBounded(t *testing.T) {
	n := MaxDocumentBytes - 16
	for name, src := range map[string]string{
		"flow list":   "a: [" + strings.Repeat("a,", n/2) + "]",
		"block list":  "a:\n" + strings.Repeat("- a\n", n/4),
		"keys":        strings.Repeat("k: v\n", n/5),
		"complex key": strings.Repeat("? a\n", n/4),
		"anchors":     "a: [" + strings.Repeat("&a x, *a, ", n/10) + "]",
		"alias bomb":  laughs(9) + strings.Repeat("#\n", (n-len(laughs(9)))/2),
		"nesting":     "a: " + strings.Repeat("{a: ", n/8) + strings.Repeat("}", n/8),
	} {
		start := time.Now()
		Parse("f.yaml", []byte(src))
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("%s (%d bytes): %v", name, len(src), d)
		}
	}
}

func TestBoundedAccessors(t *testing.T) {
	m, err := Parse("f.yaml", []byte("a: 2h\nb: 5s\nc: 1GiB\nd: 1MiB\ne: 20gbit\nf: 1gbit\ng: soon\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.DurationIn("a", 7, 0, time.Hour); got != 7 {
		t.Errorf("a = %v, want the default", got)
	}
	if got := m.DurationIn("b", 0, 0, time.Hour); got != 5*time.Second {
		t.Errorf("b = %v", got)
	}
	if got := m.SizeIn("c", 0, 1500, 256<<20); got != 0 {
		t.Errorf("c = %v, want the default", got)
	}
	if got := m.SizeIn("d", 0, 1500, 256<<20); got != 1<<20 {
		t.Errorf("d = %v", got)
	}
	if got := m.RateIn("e", 0, 0, 10*units.Gbit); got != 0 {
		t.Errorf("e = %v, want the default", got)
	}
	if got := m.RateIn("f", 0, 0, 10*units.Gbit); got != units.Gbit {
		t.Errorf("f = %v", got)
	}
	m.DurationIn("g", 0, 0, time.Hour)
	if got := m.DurationIn("absent", 3, 0, time.Hour); got != 3 {
		t.Errorf("absent = %v, want the default", got)
	}
	m.Done()
	want := []string{
		"f.yaml:1: a: 2h is out of range (valid: 0s to 1h)",
		"f.yaml:3: c: 1GiB is out of range (valid: 1500B to 256MiB)",
		"f.yaml:5: e: 20gbit is out of range (valid: 0bit to 10gbit)",
		`f.yaml:7: g: duration "soon" is not valid`,
	}
	got := m.Err().Error()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("missing %q in:\n%s", w, got)
		}
	}
	if n := m.Errs().Count(); n != len(want) {
		t.Errorf("%d problems, want %d:\n%s", n, len(want), got)
	}
	for d, s := range map[time.Duration]string{time.Hour: "1h", 90 * time.Minute: "1h30m", 10 * time.Second: "10s", time.Millisecond: "1ms", 0: "0s", time.Hour + time.Second: "1h0m1s"} {
		if got := FormatDuration(d); got != s {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, s)
		}
	}
}
