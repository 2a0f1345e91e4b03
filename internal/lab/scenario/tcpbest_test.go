package scenario

import (
	"slices"
	"strings"
	"testing"
)

const twoPaths = `
paths:
  - {name: good, rate: 400mbit, delay: 2ms}
  - {name: bad, rate: 4mbit, delay: 2ms}
traffic: [{type: bulk, duration: 10s}]
`

func TestTCPBestOverADominatingPath(t *testing.T) {
	s, err := Parse("s.yaml", []byte(twoPaths+"variants: [{name: tcp-best, path: good}, mptcp]\n"))
	if err != nil {
		t.Fatal(err)
	}
	v := s.Variant(TCPBest)
	if v.Kind != KindTCP || !slices.Equal(v.Paths, []string{"good"}) || v.BestOf != nil {
		t.Fatalf("tcp-best %+v: want TCP over good (kind tcp by default for this name)", v)
	}
	// Equal paths: either one is at least as good as the other.
	eq := "paths: [{name: a, rate: 10mbit, delay: 5ms}, {name: b, rate: 10mbit, delay: 5ms}]\ntraffic: [{type: bulk, duration: 5s}]\n"
	if _, err := Parse("s.yaml", []byte(eq+"variants: [{name: tcp-best, kind: tcp, path: b}]\n")); err != nil {
		t.Fatal(err)
	}
}

func TestTCPBestClaimIsChecked(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"lower rate", twoPaths + "variants:\n  - {name: tcp-best, kind: tcp, path: bad}\n",
			"s.yaml:7: variants[0].path: bad is not at least as good as good: up bad has a lower rate (4 Mbit/s against 400 Mbit/s); name a path that is, or write path: best"},
		// bad is faster up (1 ms) but good must be no slower both ways.
		{"longer delay one way", `
paths:
  - {name: good, rate: 400mbit, delay: 2ms}
  - {name: bad, rate: 4mbit, delay: 2ms, up: {delay: 1ms}}
traffic: [{type: bulk, duration: 10s}]
variants: [{name: tcp-best, kind: tcp, path: good}]
`, "variants[0].path: good is not at least as good as bad: up good has a longer one-way delay (2ms against 1ms)"},
		{"loss", "paths: [{name: a, rate: 10mbit, loss: 1%}, {name: b, rate: 1mbit}]\ntraffic: [{type: bulk, duration: 5s}]\nvariants: [{name: tcp-best, path: a}]\n",
			"variants[0].path: a is not at least as good as b: it loses packets (1%)"},
		{"outage", "paths: [{name: a, rate: 10mbit, outage: {at: 1s, for: 1s}}, {name: b, rate: 1mbit}]\ntraffic: [{type: bulk, duration: 5s}]\nvariants: [{name: tcp-best, path: a}]\n",
			"a is not at least as good as b: it has outages"},
		{"event", "paths: [{name: a, rate: 10mbit}, {name: b, rate: 1mbit}]\ntraffic: [{type: bulk, duration: 5s}]\nevents: [{at: 2s, path: a, action: down}]\nvariants: [{name: tcp-best, path: a}]\n",
			"a is not at least as good as b: the event at 2s (line 3) changes it"},
		{"variant's own event", "paths: [{name: a, rate: 10mbit}, {name: b, rate: 1mbit}]\ntraffic: [{type: bulk, duration: 5s}]\nvariants: [{name: tcp-best, path: a, events: [{at: 2s, path: a, set: {rate: 1mbit}}]}]\n",
			"the event at 2s (line 3) changes it"},
		{"flood", "paths: [{name: a, rate: 10mbit}, {name: b, rate: 1mbit}]\ntraffic: [{type: bulk, duration: 5s}, {type: udp-flood, path: a, from: 1s, to: 2s, rate: 1mbit}]\nvariants: [{name: tcp-best, path: a}]\n",
			"the UDP flood of line 2 runs on it"},
		{"trace on the other", "paths: [{name: a, rate: 10mbit}, {name: b, trace: t.trace}]\ntraffic: [{type: bulk, duration: 5s}]\nvariants: [{name: tcp-best, path: a}]\n",
			"b's rate follows a trace"},
		{"unlimited beats any rate, not the reverse", "paths: [{name: a, rate: 10mbit}, {name: b}]\ntraffic: [{type: bulk, duration: 5s}]\nvariants: [{name: tcp-best, path: a}]\n",
			"up a has a lower rate (10 Mbit/s against unlimited)"},
		{"no path", twoPaths + "variants: [{name: tcp-best}]\n", "variants[0].path: tcp-best needs its path"},
		{"mptcp", twoPaths + "variants: [{name: tcp-best, kind: mptcp}]\n", "variants[0].kind: tcp-best is single-path TCP over the best path: it needs kind: tcp"},
		{"best for mptcp", twoPaths + "variants: [{name: m, kind: mptcp, path: best}]\n", `variants[0].path: "best" is not a path of this scenario`},
		{"a path named best", "paths: [{name: best}, {name: b}]\ntraffic: [{type: bulk, duration: 5s}]\nvariants: [{name: tcp-best, path: best, among: [b]}]\n", `variants[0].path: a path of this scenario is named "best", so path: best is ambiguous`},
		{"among a stranger", twoPaths + "variants: [{name: tcp-best, path: best, among: [good, ugly]}]\n", `variants[0].among: "ugly" is not a path of this scenario`},
		{"among without path", twoPaths + "variants: [{name: tcp-x, kind: tcp, among: [good]}]\n", "variants[0].among: among lists the candidates"},
		{"path outside among", twoPaths + "variants: [{name: tcp-best, path: good, among: [bad]}]\n", `variants[0].path: "good" is not among the candidates (among: bad)`},
	}
	for _, c := range cases {
		f := writeScenario(t, c.src, map[string]string{"t.trace": "1\n2\n"})
		_, err := Load(f)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v\nwant %q", c.name, err, c.want)
		}
	}
}

func TestTCPBestOverTheBestOfEachRun(t *testing.T) {
	s, err := Parse("s.yaml", []byte(`
paths:
  - {name: good, rate: 400mbit, delay: 200ms}
  - {name: bad, rate: 4mbit, delay: 2ms}
  - {name: ref, rate: 400mbit, delay: 2ms}
traffic: [{type: bulk, duration: 10s}]
variants:
  - {name: tcp-best, kind: tcp, path: best, among: [good, bad]}
  - {name: tcp-all, kind: tcp, path: best}
  - {name: tcp, kind: tcp, path: bad}
`))
	if err != nil {
		t.Fatal(err)
	}
	v := s.Variant(TCPBest)
	if !slices.Equal(v.BestOf, []string{"good", "bad"}) || !slices.Equal(v.Paths, []string{"good"}) {
		t.Fatalf("tcp-best %+v: want the candidates good and bad (paths: the first)", v)
	}
	if v := s.Variant("tcp-all"); !slices.Equal(v.BestOf, []string{"good", "bad", "ref"}) {
		t.Fatalf("tcp-all: best of %v, want every path", v.BestOf)
	}
	// An ordinary tcp variant claims nothing (bad is the worst path).
	if v := s.Variant("tcp"); v.BestOf != nil || v.Paths[0] != "bad" {
		t.Fatalf("tcp %+v", v)
	}
}

// Via-core paths count the core links they may cross: wifi (40 Mbit/s,
// 10 ms) is at least as good as lte (100 Mbit/s access, then a 40 Mbit/s
// 2 ms core link: 40 Mbit/s, 17 ms); an event on the core link touches
// the paths through it.
func TestTCPBestThroughACore(t *testing.T) {
	src := `
paths:
  - {name: wifi, rate: 40mbit, delay: 10ms}
  - {name: lte, via: core, rate: 100mbit, delay: 15ms}
core: {links: 1, rate: 40mbit, delay: 2ms}
traffic: [{type: bulk, duration: 10s}]
`
	if _, err := Parse("s.yaml", []byte(src+"variants: [{name: tcp-best, path: wifi}]\n")); err != nil {
		t.Fatalf("wifi over lte: %v", err)
	}
	_, err := Parse("s.yaml", []byte(src+"variants: [{name: tcp-best, path: lte}]\n"))
	if err == nil || !strings.Contains(err.Error(), "up lte has a longer one-way delay (17ms against 10ms)") {
		t.Fatalf("lte over wifi: %v", err)
	}
	_, err = Parse("s.yaml", []byte(`
paths:
  - {name: a1, via: core}
  - {name: a2, via: core}
core: {links_per_pair: 2, rate: 40mbit, delay: 5ms}
traffic: [{type: bulk, duration: 10s}]
events: [{at: 5s, link: c1x1-0, action: down}]
variants: [{name: tcp-best, path: a1}, {name: tcp-b, kind: tcp, path: a2, among: [a1, a2]}]
`))
	if err == nil || !strings.Contains(err.Error(), "variants[0].path: a1 is not at least as good as a2: the event at 5s (line 7) changes core link c1x1-0, which it may cross") {
		t.Fatalf("core link event: %v", err)
	}
	if strings.Contains(err.Error(), "variants[1]") {
		t.Fatalf("a2 crosses its own pair's links only, which no event touches: %v", err)
	}
}

func TestTCPBestInATenantsWorld(t *testing.T) {
	src := strings.Replace(tenantsSrc, "variants:\n  - mptcp\n", "variants:\n  - mptcp\n  - {name: tcp-best, kind: tcp}\n", 1)
	s, err := Parse("s.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if v := s.Variant(TCPBest); v.Kind != KindTCP || len(v.Paths) != 0 {
		t.Fatalf("tenants tcp-best %+v", v)
	}
	src = strings.Replace(tenantsSrc, "variants:\n  - mptcp\n", "variants:\n  - mptcp\n  - {name: tcp-best, kind: tcp, among: [phy1]}\n", 1)
	if _, err := Parse("s.yaml", []byte(src)); err == nil || !strings.Contains(err.Error(), "variants[1].among: a tenants world has no paths") {
		t.Fatalf("tenants among: %v", err)
	}
}

func TestPrimaryAndCompare(t *testing.T) {
	s, err := Parse("s.yaml", []byte(twoPaths+"variants: [mptcp, tcp]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Primary != DefaultPrimary || s.Compare != nil {
		t.Fatalf("defaults: %+v %v", s.Primary, s.Compare)
	}
	s, err = Parse("s.yaml", []byte(twoPaths+"primary: fct_median_ms\ncompare: [tcp]\nvariants: [mptcp, tcp]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Primary != (Primary{Metric: "fct_median_ms", Higher: false}) || !slices.Equal(s.Compare, []string{"tcp"}) {
		t.Fatalf("%+v %v", s.Primary, s.Compare)
	}
	s, err = Parse("s.yaml", []byte(twoPaths+"primary: {metric: flows_done, better: higher}\nvariants: [mptcp]\n"))
	if err != nil || s.Primary != (Primary{Metric: "flows_done", Higher: true}) {
		t.Fatalf("%+v %v", s.Primary, err)
	}
	if s, err := Parse("s.yaml", []byte(twoPaths+"primary: share:good\nvariants: [mptcp]\n")); err != nil || !s.Primary.Higher {
		t.Fatalf("share: %+v %v", s, err)
	}
	for src, want := range map[string]string{
		"primary: flows_done\nvariants: [mptcp]\n":              "s.yaml:6: primary: which way flows_done is better does not follow from its name; say it: primary: {metric: flows_done, better: higher}",
		"primary: Goodput!\nvariants: [mptcp]\n":                `primary: "Goodput!" is not a metric`,
		"primary: share:ugly\nvariants: [mptcp]\n":              `primary: share:ugly: "ugly" is not a path of this scenario`,
		"primary: {metric: x, better: up}\nvariants: [mptcp]\n": `primary.better: "up" is not valid (valid: higher, lower)`,
		"compare: [ecmp]\nvariants: [mptcp, tcp]\n":             `compare: "ecmp" is not a variant of this scenario (variants: mptcp, tcp)`,
	} {
		if _, err := Parse("s.yaml", []byte(twoPaths+src)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v\nwant %q", src, err, want)
		}
	}
}

func TestMetricHigherIsBetter(t *testing.T) {
	for metric, want := range map[string]bool{
		"goodput_mbit": true, "goodput_after_last_event_mbit": true, "share:wifi": true, "adhoc_share_from_200ms_after_up_mean": true,
		"fct_median_ms": false, "adhoc_link_up_to_first_data_ms_mean": false, "recovery_after_flood_s": false, "retransmits": false,
	} {
		if got, ok := MetricHigherIsBetter(metric); !ok || got != want {
			t.Errorf("%s: higher is better %v (%v), want %v", metric, got, ok, want)
		}
	}
	if _, ok := MetricHigherIsBetter("subflows"); ok {
		t.Error("subflows: a direction from a name that gives none")
	}
}
