package bench

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"mpsteer/internal/testutil"
)

// A short run of the overhead measurement: every configuration gets a
// figure at each number of flows, the chains are the lengths they claim,
// and the selectors pass what their granularity says (every packet; the
// data segments only; path 1's data; one subflow's data, a smaller part
// with more flows). Not a measurement: one round of half-second windows.
func TestOverheadShort(t *testing.T) {
	testutil.RequireRoot(t, "namespaces, TC programs and BPF run-time statistics")
	dir := t.TempDir()
	res, err := Overhead(context.Background(), OverheadOptions{Flows: []int{1, 20}, Rounds: 1, Window: 500 * time.Millisecond, Out: dir, Binary: testutil.Binary(t)}, func(s string) { t.Log(s) })
	if err != nil {
		t.Fatal(err)
	}
	steps := map[string]int{}
	for _, c := range res.Chains {
		steps[c.Name] = c.Steps
		switch {
		case c.Set == "length" && c.Steps != c.Selectors+c.Actors:
			t.Errorf("%s: %d steps, %d selectors and %d actors", c.Name, c.Steps, c.Selectors, c.Actors)
		case c.Set == "granularity" && (c.Steps != 4 || c.Selectors != 1):
			t.Errorf("%s: %d steps (%d selectors); Fig. 5c's chains have 4, one a selector", c.Name, c.Steps, c.Selectors)
		}
	}
	for _, want := range []int{2, 4, 8} {
		found := false
		for _, c := range res.Chains {
			found = found || (c.Set == "length" && c.Steps == want)
		}
		if !found {
			t.Errorf("no chain of %d steps (Fig. 5b has 2, 4 and 8)", want)
		}
	}
	share := map[string]map[int]float64{}
	for _, p := range res.Points {
		if share[p.Chain] == nil {
			share[p.Chain] = map[int]float64{}
		}
		share[p.Chain][p.Flows] = p.SelectedShare
		if p.SharePct <= 0 || p.NsPerPacket <= 0 || p.PacketsPerS <= 0 || p.SentMbit <= 0 {
			t.Errorf("%s, %d flows: %+v", p.Chain, p.Flows, p)
		}
	}
	if len(share) != len(res.Chains) || len(res.Points) != 2*len(res.Chains) {
		t.Fatalf("%d points for %d chains at 2 flow counts", len(res.Points), len(res.Chains))
	}
	sel := func(granularity string, n int) float64 {
		for _, c := range res.Chains {
			if c.Granularity == granularity {
				return share[c.Name][n]
			}
		}
		t.Fatalf("no chain of granularity %q", granularity)
		return 0
	}
	for _, n := range []int{1, 20} {
		every, data, pair, sub := sel("every packet", n), sel("packet type: data", n), sel("address pair", n), sel("subflow (4-tuple)", n)
		t.Logf("%d flows: selected every %.3f, data %.3f, pair %.3f, subflow %.4f", n, every, data, pair, sub)
		// With one flow its initial subflow is path 1's data: the two
		// differ only by the windows they were measured in.
		if n == 1 && (sub > 1.2*pair || sub < 0.8*pair) {
			t.Errorf("1 flow: one subflow's share %.4f, path 1's %.4f; want them alike", sub, pair)
		}
		// "Every packet" selects every TCP packet the chain sees: a
		// packet it cannot parse (too short) is skipped, not selected.
		if every < 0.999 || every > 1 || !(data < 1 && data > 0) || !(pair < data && pair > 0) || !(sub > 0) || (n > 1 && sub >= pair) {
			t.Errorf("%d flows: selected shares every %.3f, data %.3f, pair %.3f, subflow %.4f; want 1 > data > pair > 0, and one subflow a part of path 1", n, every, data, pair, sub)
		}
	}
	if a, b := sel("subflow (4-tuple)", 20), sel("subflow (4-tuple)", 1); a >= b/5 {
		t.Errorf("one subflow's share of the packets: %.4f of 20 flows against %.4f of 1; want it to shrink with the flows", a, b)
	}
	for _, f := range res.Plots {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("plot %s: %v", f, err)
		}
	}
	if len(res.Plots) != 2 || res.SubflowsJoined[20] < 40 {
		t.Errorf("plots %v, subflows joined %v", res.Plots, res.SubflowsJoined)
	}
}
