package bench

import (
	"strings"
	"testing"

	"mpsteer/internal/lab/scenario"
)

// Every case of both twopath benches is a scenario the lab accepts, with
// the paths, sizes and TCP baseline it names.
func TestTwoPathCasesAreValidScenarios(t *testing.T) {
	short := ShortTwoPathCases()
	if len(short) != 30 {
		t.Fatalf("%d short cases, want 30 (3 rate pairs × 5 delay pairs × 2 sizes)", len(short))
	}
	names := map[string]bool{}
	for _, c := range append(append([]TwoPathCase{}, TwoPathCases...), short...) {
		if names[c.Name] {
			t.Fatalf("case %s twice", c.Name)
		}
		names[c.Name] = true
		s, err := scenario.Parse("twopath-"+c.Name+".yaml", []byte(c.scenario()))
		if err != nil {
			t.Fatalf("case %s: %v", c.Name, err)
		}
		if len(s.Paths) != 2 || len(s.Variants) != 3 {
			t.Fatalf("case %s: %d paths, %d variants; want 2 and 3", c.Name, len(s.Paths), len(s.Variants))
		}
		if best := strings.Contains(c.scenario(), "path: best, among: [a, b]"); best != c.TCPBest {
			t.Fatalf("case %s: TCP over the better path %v, want %v", c.Name, best, c.TCPBest)
		}
	}
	c := short[len(short)-1]
	if c.Name != "r5-15-d25-25-16mib" || c.RateA != "5mbit" || c.DelayB != "25ms" || c.Size != "16MiB" {
		t.Fatalf("last short case %+v", c)
	}
}
