package scenario_test

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"mpsteer/internal/lab/scenario"
)

// TestMain turns the fuzzer's minimization off unless -fuzzminimizetime
// is given (give it, e.g. 60s, to have new and failing inputs minimized as
// go test does by default). When fuzzing finds an input that reaches new
// code, a worker minimizes it before it fuzzes on: go test's minimizer
// tries removing every span of the input, a number of parses quadratic in
// its length, for up to -fuzzminimizetime (60 s by default), and reports
// the parses it made only when it is done. The seed scenarios are 0.5 to
// 3 KB, so every new input held a worker for the whole minute: with both
// workers minimizing, `go test -fuzz` logged 0 execs a second to the end
// of the run (and passed). Capped at 1 s, minimizing still took most of
// the run: in 30 s on a busy machine about 50 000 inputs ran and 80 new
// ones were kept, against 170 000 and 590 without it.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.fuzzminimizetime" })
	if !given {
		flag.Set("test.fuzzminimizetime", "0s")
	}
	os.Exit(m.Run())
}

// parseDeadline is how long one parse may take before the fuzz target
// fails with the input: parsing a scenario within yamlcfg's bounds takes
// milliseconds, so only an input that stalls the parser gets near it.
const parseDeadline = 5 * time.Second

// Any bytes as a scenario file: an error or a scenario, never a panic, and
// never a parse that does not return. The shipped scenarios are the seed
// corpus; testdata/fuzz/FuzzParseScenario holds inputs found before.
func FuzzParseScenario(f *testing.F) {
	files, _ := filepath.Glob("../../../scenarios/*.yaml")
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("paths: [{name: a, rate: 1e30GB}]"))
	f.Add([]byte("paths: [{name: a, outage: {at: 1s, for: 0s, every: 1s}}]\ntraffic: [{type: flows, sizes: [], count: 0}]"))
	f.Fuzz(func(t *testing.T, b []byte) {
		type result struct {
			s   *scenario.Scenario
			err error
		}
		done := make(chan result, 1)
		go func() {
			s, err := scenario.Parse("f.yaml", b)
			done <- result{s, err}
		}()
		var r result
		select {
		case r = <-done:
		case <-time.After(parseDeadline):
			t.Fatalf("Parse did not return within %v on %q", parseDeadline, b)
		}
		if r.err == nil && (r.s == nil || len(r.s.Variants) == 0) {
			t.Fatalf("accepted a scenario without variants: %+v", r.s)
		}
	})
}
