// Package reliability holds the pieces of mpsteer's fault, load and
// hostile-input suite (its tests are in this package's _test files): the
// record every case writes, the daemon's process counters read from /proc,
// and the table docs/reliability.md shows.
//
// Short cases run in `make test`; `make soak` sets SoakEnv and runs the long
// ones, each writing one JSON record to OutEnv's directory; `mpsteer`'s
// docs/reliability.md table is rendered from those records (Table), never
// typed in.
package reliability

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/procfs"
)

// SoakEnv selects the long versions of the cases (make soak sets it).
const SoakEnv = "MPSTEER_SOAK"

// OutEnv names the directory records are written to (results/soak); unset,
// nothing is written.
const OutEnv = "MPSTEER_SOAK_OUT"

// Soak reports whether the long versions run.
func Soak() bool { return os.Getenv(SoakEnv) != "" }

// Record is what one case found: how often the fault or input was tried,
// how many of those the daemon and the traffic survived, and what was lost.
type Record struct {
	Case     string `json:"case"`
	Fault    string `json:"fault"`    // the fault or input, in words
	Tried    int    `json:"tried"`    // times the fault or input was applied
	Survived int    `json:"survived"` // tries after which everything checked held
	// Lost says what was lost, in words ("nothing" when nothing was).
	Lost string `json:"lost"`
	// Measured holds the case's own numbers (bytes, mismatches, log
	// lines, goroutines before and after, latencies…).
	Measured map[string]any `json:"measured,omitempty"`
	Soak     bool           `json:"soak"`
	Command  string         `json:"command"`
	At       time.Time      `json:"at"`
	Seconds  float64        `json:"seconds"`
}

// Write stores r as OutEnv/<case>.json (when OutEnv is set).
func Write(r Record) error {
	dir := os.Getenv(OutEnv)
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if r.At.IsZero() {
		r.At = time.Now().UTC()
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, sanitize(r.Case)+".json"), append(b, '\n'), 0o644)
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, s)
}

// Load reads every record in dir, sorted by case.
func Load(dir string) ([]Record, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var out []Record
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var r Record
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Case < out[j].Case })
	return out, nil
}

// Table renders records as the Markdown table of docs/reliability.md.
func Table(rs []Record) string {
	var b strings.Builder
	b.WriteString("| case | fault or input | tried | survived | lost | measured |\n|---|---|---:|---:|---|---|\n")
	for _, r := range rs {
		m := measured(r.Measured)
		if levels(r.Measured) {
			m = "per part, below"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %d | %d | %s | %s |\n", r.Case, esc(r.Fault), r.Tried, r.Survived, esc(r.Lost), esc(m))
	}
	// A record whose figures are all per level (a map per level) gets a
	// table of its own: a row per level, a column per figure.
	for _, r := range rs {
		if !levels(r.Measured) {
			continue
		}
		var rows, cols []string
		seen := map[string]bool{}
		for k, v := range r.Measured {
			rows = append(rows, k)
			for c := range v.(map[string]any) {
				if !seen[c] {
					seen[c] = true
					cols = append(cols, c)
				}
			}
		}
		sort.Strings(rows)
		sort.Strings(cols)
		fmt.Fprintf(&b, "\n`%s`:\n\n| part | %s |\n|---|%s\n", r.Case, strings.Join(cols, " | "), strings.Repeat("---:|", len(cols)))
		for _, k := range rows {
			row := r.Measured[k].(map[string]any)
			var cells []string
			for _, c := range cols {
				cells = append(cells, esc(format(row[c])))
			}
			fmt.Fprintf(&b, "| %s | %s |\n", k, strings.Join(cells, " | "))
		}
	}
	return b.String()
}

// levels: every figure of m is a map (one per level).
func levels(m map[string]any) bool {
	for _, v := range m {
		if _, ok := v.(map[string]any); !ok {
			return false
		}
	}
	return len(m) > 1
}

func esc(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func measured(m map[string]any) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, k+" "+format(m[k]))
	}
	return strings.Join(parts, ", ")
}

func format(v any) string {
	switch x := v.(type) {
	case float64:
		if x == float64(int64(x)) {
			return strconv.FormatInt(int64(x), 10)
		}
		return strconv.FormatFloat(x, 'g', 4, 64)
	case []any:
		var s []string
		for _, e := range x {
			s = append(s, format(e))
		}
		return strings.Join(s, "/")
	case map[string]any:
		return "{" + measured(x) + "}"
	case nil:
		return ""
	default:
		b, _ := json.Marshal(x)
		return strings.Trim(string(b), `"`)
	}
}

// Render is the generated part of docs/reliability.md: the table and
// where its numbers come from.
func Render(rs []Record) string {
	var first, last time.Time
	var secs float64
	soak := true
	for _, r := range rs {
		if first.IsZero() || r.At.Before(first) {
			first = r.At
		}
		if r.At.After(last) {
			last = r.At
		}
		secs += r.Seconds
		soak = soak && r.Soak
	}
	var b strings.Builder
	b.WriteString(Table(rs))
	how := "`make soak`"
	if !soak {
		how = "the short cases of `make test` (some records), not `make soak`"
	}
	fmt.Fprintf(&b, "\nProduced by %s: %d records (results/soak/*.json) written between %s and %s UTC, %.0f s of cases. Kernel %s.\n",
		how, len(rs), first.UTC().Format("2006-01-02 15:04"), last.UTC().Format("15:04"), secs, kernelRelease())
	return b.String()
}

func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

// Between markers in a document, the generated table.
const (
	BeginMarker = "<!-- soak table: generated by `make soak`, do not edit -->"
	EndMarker   = "<!-- end of soak table -->"
)

// Splice replaces what lies between the markers in doc with table.
func Splice(doc, table string) (string, error) {
	i := strings.Index(doc, BeginMarker)
	j := strings.Index(doc, EndMarker)
	if i < 0 || j < i {
		return "", fmt.Errorf("the document has no %q … %q block", BeginMarker, EndMarker)
	}
	return doc[:i+len(BeginMarker)] + "\n" + table + doc[j:], nil
}

// Proc are a process's counters from /proc.
type Proc struct {
	CPUTicks uint64 // utime + stime, in clock ticks (USER_HZ)
	RSSKiB   uint64
	FDs      int
	BPFLinks int // file descriptors of BPF links
	BPFProgs int
	Threads  int
}

// ReadProc reads pid's counters (prometheus/procfs).
func ReadProc(pid int) (Proc, error) {
	var p Proc
	proc, err := procfs.NewProc(pid)
	if err != nil {
		return p, err
	}
	st, err := proc.Stat()
	if err != nil {
		return p, err
	}
	p.CPUTicks = uint64(st.UTime) + uint64(st.STime)
	p.Threads = st.NumThreads
	status, err := proc.NewStatus()
	if err != nil {
		return p, err
	}
	p.RSSKiB = status.VmRSS >> 10
	targets, err := proc.FileDescriptorTargets()
	if err != nil {
		return p, err
	}
	p.FDs = len(targets)
	for _, l := range targets {
		switch l {
		case "anon_inode:bpf_link":
			p.BPFLinks++
		case "anon_inode:bpf-prog":
			p.BPFProgs++
		}
	}
	return p, nil
}

// ClockTick is USER_HZ, the unit of CPUTicks (100 on every Linux
// architecture Go supports).
const ClockTick = 100

// Metric sums the samples of metric name in Prometheus text (parsed by
// prometheus/common/expfmt) whose labels include every "label=value" of
// labels; found is false when no sample matches.
func Metric(text, name string, labels ...string) (sum float64, found bool) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return 0, false
	}
	// A histogram's or a summary's _count and _sum are samples of its
	// family.
	part := ""
	f := fams[name]
	for _, suf := range []string{"_count", "_sum"} {
		if base, ok := strings.CutSuffix(name, suf); f == nil && ok && fams[base] != nil {
			f, part = fams[base], suf
		}
	}
	if f == nil {
		return 0, false
	}
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for _, kv := range labels {
			k, v, _ := strings.Cut(kv, "=")
			if have[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case part == "_count" && m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		case part == "_sum" && m.Histogram != nil:
			sum += m.Histogram.GetSampleSum()
		case part == "_count" && m.Summary != nil:
			sum += float64(m.Summary.GetSampleCount())
		case part == "_sum" && m.Summary != nil:
			sum += m.Summary.GetSampleSum()
		case part != "":
			continue
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Untyped != nil:
			sum += m.Untyped.GetValue()
		default:
			continue
		}
		found = true
	}
	return sum, found
}
