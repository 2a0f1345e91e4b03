package scenario_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/testutil"
)

// TestMain: the fuzz targets here run without minimization by default
// (testutil.FuzzMain says why).
func TestMain(m *testing.M) { os.Exit(testutil.FuzzMain(m)) }

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
