package scenario_test

import (
	"os"
	"path/filepath"
	"testing"

	"mpsteer/internal/lab/scenario"
)

// Any bytes as a scenario file: an error or a scenario, never a panic.
// The shipped scenarios are the seed corpus.
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
		s, err := scenario.Parse("f.yaml", b)
		if err == nil && (s == nil || len(s.Variants) == 0) {
			t.Fatalf("accepted a scenario without variants: %+v", s)
		}
	})
}
