// Package kernelmatrix turns what `make test-kernels` ran on each kernel
// (go test's JSON stream per package, and `mpsteer doctor --json`) into
// one result per kernel, results/kernels/VERSION.json, and renders
// docs/kernels.md from those results: features × kernels and tests ×
// kernels, measured, never typed in.
package kernelmatrix

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"mpsteer/internal/kernelfeat"
	"mpsteer/internal/provenance"
)

// Outcomes of a test.
const (
	Pass = "pass"
	Fail = "fail"
	Skip = "skip"
)

// Test is one top-level test's outcome on one kernel.
type Test struct {
	Name    string `json:"name"`
	Package string `json:"package"`
	Outcome string `json:"outcome"`
	// Reason: why it was skipped or failed (the test's own last words).
	Reason string `json:"reason"`
	// Seconds it took.
	Seconds float64 `json:"seconds"`
}

// Result is one kernel's run.
type Result struct {
	Kernel string `json:"kernel"`
	// Matrix names the kernel in the matrix ("debian12", "host", …) and
	// Where says how it ran ("vm": virtme-ng under qemu, software
	// emulation; "host": natively).
	Matrix   string               `json:"matrix"`
	Where    string               `json:"where"`
	Tests    []Test               `json:"tests"`
	Features []kernelfeat.Feature `json:"features"`
	// WallSeconds is the whole run's time, the boot included.
	WallSeconds float64 `json:"wall_seconds"`
	// Provenance: the commit the tests were built from, the command that
	// ran the matrix, the kernel they ran on (Kernel), when the kernel's
	// run started and ended, and the machine that ran it.
	Provenance provenance.Provenance `json:"provenance"`
}

// Counts returns how many tests passed, failed and were skipped.
func (r *Result) Counts() (passed, failed, skipped int) {
	for _, t := range r.Tests {
		switch t.Outcome {
		case Pass:
			passed++
		case Fail:
			failed++
		case Skip:
			skipped++
		}
	}
	return
}

// Summary is the one line `make test-kernels` prints per kernel.
func (r *Result) Summary() string {
	p, f, s := r.Counts()
	return fmt.Sprintf("kernel %s: %d passed, %d failed, %d skipped", r.Kernel, p, f, s)
}

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

// ParseStream reads one package's go test JSON stream (test2json) and
// returns its top-level tests, in the package the stream names (pkg until
// it names one: a file's name cannot say whether an _ was a /). A package whose binary died (a panic, a
// time-out, a missing binary) before its tests ended gets a failed test
// named "(package)" saying so, and every test it had started and not
// finished fails with the same reason.
func ParseStream(r io.Reader, pkg string) ([]Test, error) {
	out := map[string][]string{}
	var order []string
	done := map[string]Test{}
	var pkgOut []string
	pkgAction := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			// Not JSON: what the binary printed outside the stream.
			pkgOut = append(pkgOut, string(line))
			continue
		}
		if e.Package != "" {
			pkg = e.Package
		}
		top, _, sub := strings.Cut(e.Test, "/")
		switch {
		case e.Test == "":
			if e.Action == "output" {
				pkgOut = append(pkgOut, strings.TrimRight(e.Output, "\n"))
			} else if e.Action == Pass || e.Action == Fail || e.Action == Skip {
				pkgAction = e.Action
			}
		case e.Action == "run" && !sub:
			order = append(order, top)
		case e.Action == "output":
			out[top] = append(out[top], strings.TrimRight(e.Output, "\n"))
		case !sub && (e.Action == Pass || e.Action == Fail || e.Action == Skip):
			done[top] = Test{Name: top, Package: pkg, Outcome: e.Action, Seconds: e.Elapsed}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var tests []Test
	died := ""
	if pkgAction != Pass && pkgAction != Skip {
		died = lastWords(pkgOut, 6)
		if died == "" {
			died = "the test binary produced no result"
		}
	}
	for _, name := range order {
		t, ok := done[name]
		if !ok {
			t = Test{Name: name, Package: pkg, Outcome: Fail, Reason: "did not finish: " + died}
		} else if t.Outcome != Pass {
			t.Reason = reason(out[name], t.Outcome)
		}
		tests = append(tests, t)
	}
	if pkgAction == Fail || pkgAction == "" {
		failedOne := false
		for _, t := range tests {
			failedOne = failedOne || t.Outcome == Fail
		}
		if !failedOne {
			tests = append(tests, Test{Name: "(package)", Package: pkg, Outcome: Fail, Reason: died})
		}
	}
	return tests, nil
}

// reason picks a test's own explanation out of its output: the skip
// message, or the failure lines (file:line: ...), without the framing.
func reason(lines []string, outcome string) string {
	var keep []string
	for _, l := range lines {
		s := strings.TrimSpace(l)
		if s == "" || strings.HasPrefix(s, "=== ") || strings.HasPrefix(s, "--- ") {
			continue
		}
		keep = append(keep, s)
	}
	if outcome == Skip && len(keep) > 0 {
		return keep[len(keep)-1]
	}
	// A failure: the test's own lines (file_test.go:N: …), then the last
	// words of what it printed after them (a verifier log's verdict),
	// without the daemon's time-stamped log lines.
	var mine, tail []string
	for _, l := range keep {
		switch {
		case testLine.MatchString(l):
			if len(mine) < 2 {
				mine = append(mine, l)
			}
		case !daemonLine.MatchString(l):
			tail = append(tail, l)
		}
	}
	if len(mine) == 0 {
		return lastWords(keep, 4)
	}
	if len(tail) > 2 {
		tail = tail[len(tail)-2:]
	}
	return lastWords(append(mine, tail...), 4)
}

var (
	testLine   = regexp.MustCompile(`^[A-Za-z0-9_]+_test\.go:\d+: `)
	daemonLine = regexp.MustCompile(`^mpsteer: \d{4}/\d\d/\d\d `)
)

func lastWords(lines []string, n int) string {
	var keep []string
	for _, l := range lines {
		if s := strings.TrimSpace(l); s != "" && s != "FAIL" && !strings.HasPrefix(s, "FAIL\t") && s != "PASS" {
			keep = append(keep, s)
		}
	}
	if len(keep) > n {
		keep = keep[len(keep)-n:]
	}
	s := strings.Join(keep, " / ")
	if len(s) > 600 {
		s = s[:600] + "…"
	}
	return s
}

// Collect reads a run's directory (one PKG.json per package, with / in
// the package's path as _, and doctor.json) into a Result. The package is
// the one the stream names; the file's name stands in for a stream that
// names none.
func Collect(dir, matrix, where string) (*Result, error) {
	r := &Result{Matrix: matrix, Where: where}
	if b, err := os.ReadFile(filepath.Join(dir, "doctor.json")); err == nil {
		var rep kernelfeat.Report
		if err := json.Unmarshal(b, &rep); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "doctor.json"), err)
		}
		r.Kernel, r.Features = rep.Kernel, rep.Features
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	for _, f := range files {
		if filepath.Base(f) == "doctor.json" {
			continue
		}
		pkg := "mpsteer/" + strings.ReplaceAll(strings.TrimSuffix(filepath.Base(f), ".json"), "_", "/")
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		ts, err := ParseStream(fh, pkg)
		fh.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		r.Tests = append(r.Tests, ts...)
	}
	if r.Kernel == "" {
		return r, fmt.Errorf("%s: no doctor.json: the run did not start (see guest.log there)", dir)
	}
	return r, nil
}

// Load reads every result in a directory (VERSION.json files).
func Load(dir string) ([]*Result, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var rs []*Result
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var r Result
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		rs = append(rs, &r)
	}
	sort.Slice(rs, func(i, j int) bool { return versionLess(rs[i].Kernel, rs[j].Kernel) })
	return rs, nil
}

// versionLess orders kernel releases by their numbers (6.1 < 6.12).
func versionLess(a, b string) bool {
	na, nb := numbers(a), numbers(b)
	for i := 0; i < len(na) && i < len(nb); i++ {
		if na[i] != nb[i] {
			return na[i] < nb[i]
		}
	}
	if len(na) != len(nb) {
		return len(na) < len(nb)
	}
	return a < b
}

func numbers(s string) []int {
	var out []int
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r < '0' || r > '9' }) {
		n := 0
		for _, c := range f {
			n = n*10 + int(c-'0')
		}
		out = append(out, n)
		if len(out) == 3 {
			break
		}
	}
	return out
}
