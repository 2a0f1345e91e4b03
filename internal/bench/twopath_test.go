package bench

import (
	"strings"
	"testing"

	"mpsteer/internal/lab/scenario"
)

// Every case of the three twopath benches is a scenario the lab accepts, with
// the paths, sizes and TCP baseline it names.
func TestTwoPathCasesAreValidScenarios(t *testing.T) {
	short := ShortTwoPathCases()
	if len(short) != 24 {
		t.Fatalf("%d short cases, want 24 (3 rate pairs × 4 delay pairs × 2 sizes)", len(short))
	}
	mid := MidTwoPathCases()
	if len(mid) != 30 {
		t.Fatalf("%d 10 ms cases, want 30 (3 rate pairs × 5 delay pairs × 2 sizes)", len(mid))
	}
	for _, c := range mid {
		if c.DelayA != "10ms" && c.DelayB != "10ms" {
			t.Fatalf("10 ms case %s has no 10 ms path", c.Name)
		}
	}
	all := append(append(append([]TwoPathCase{}, TwoPathCases...), short...), mid...)
	names := map[string]bool{}
	for _, c := range all {
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
	}
	// TCP over the better path: the faster, at equal rates the nearer.
	for name, want := range map[string]string{"r10-10-d0-25-8mib": "a", "r10-10-d25-0-8mib": "b", "r15-5-d25-0-16mib": "a", "r5-15-d0-25-8mib": "b", "equal-8mib": "a",
		"r10-10-d10-0-8mib": "b", "r10-10-d10-25-16mib": "a", "r15-5-d25-10-8mib": "a", "r5-15-d0-10-16mib": "b"} {
		var got string
		for _, c := range all {
			if c.Name == name && strings.Contains(c.scenario(), "{name: tcp, kind: tcp, path: "+want+"}") {
				got = want
			}
		}
		if got != want {
			t.Fatalf("case %s: TCP not over path %s", name, want)
		}
	}
	// The CUBIC twins: the same cases, both hosts on CUBIC, the lab's
	// default (BBR) left alone in the originals.
	for i, c := range WithCC(short, "cubic") {
		s, err := scenario.Parse("twopath-"+c.Name+".yaml", []byte(c.scenario()))
		if err != nil {
			t.Fatalf("cubic case %s: %v", c.Name, err)
		}
		if c.Name != short[i].Name || s.Client.CC != "cubic" || s.Server.CC != "cubic" {
			t.Fatalf("cubic case %s: cc %q and %q", c.Name, s.Client.CC, s.Server.CC)
		}
		if o, _ := scenario.Parse("x.yaml", []byte(short[i].scenario())); o.Client.CC != "" {
			t.Fatalf("case %s: cc %q, want the lab's default", c.Name, o.Client.CC)
		}
	}
	c := short[len(short)-1]
	if c.Name != "r5-15-d25-25-16mib" || c.RateA != "5mbit" || c.DelayB != "25ms" || c.Size != "16MiB" {
		t.Fatalf("last short case %+v", c)
	}
}
