package bench

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"mpsteer/internal/lab/runner"
	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/stats"
)

// TwoPathCase is a two-path case where using both paths helps: dynthresh
// must not cost it more than 2% against default MPTCP (issue 11).
type TwoPathCase struct {
	Name           string
	RateA, RateB   string // e.g. 100mbit
	DelayA, DelayB string // one-way
	Size           string // a transfer of this size, or
	Duration       string // a long transfer of this length
	Repeats        int    // runs; the median counts
	About          string
	// TCPPath: the path the tcp variant runs over, the better one (a when
	// empty).
	TCPPath string
	// CC: the congestion control of both hosts (empty: the lab's, BBR).
	CC string
}

// TwoPathCases are the cases `mpsteer bench twopath` runs: equal and
// unequal rates, equal and unequal delays, long transfers and 8 MiB ones.
var TwoPathCases = []TwoPathCase{
	{"equal-long", "100mbit", "100mbit", "10ms", "10ms", "", "10s", 1, "equal paths, 10 s", "", ""},
	{"rates-long", "100mbit", "30mbit", "10ms", "10ms", "", "10s", 1, "100 and 30 Mbit/s, equal delays, 10 s", "", ""},
	{"delays-long", "100mbit", "100mbit", "5ms", "25ms", "", "10s", 1, "equal rates, 5 and 25 ms, 10 s", "", ""},
	{"both-long", "100mbit", "40mbit", "5ms", "25ms", "", "10s", 1, "100 and 40 Mbit/s, 5 and 25 ms, 10 s", "", ""},
	{"equal-8mib", "100mbit", "100mbit", "10ms", "10ms", "8MiB", "", 5, "equal paths, 8 MiB", "", ""},
	{"rates-8mib", "100mbit", "30mbit", "10ms", "10ms", "8MiB", "", 5, "100 and 30 Mbit/s, equal delays, 8 MiB", "", ""},
	{"delays-8mib", "100mbit", "100mbit", "5ms", "25ms", "8MiB", "", 5, "equal rates, 5 and 25 ms, 8 MiB", "", ""},
}

// ShortTwoPathCases are the cases `mpsteer bench twopath-short` runs
// (issue 24): transfers of 8 and 16 MiB over two paths at 10/10, 15/5 and
// 5/15 Mbit/s, with one-way delays of 0 and 25 ms: where joining as backup
// and a far path's wait for its trial cost most, against default MPTCP,
// which uses both paths from their handshakes. One transfer per case and
// run; the runs give the interval. TCP runs over the better path: the
// faster one, or at equal rates the nearer one.
func ShortTwoPathCases() []TwoPathCase {
	return shortCases([][2]int{{0, 0}, {0, 25}, {25, 0}, {25, 25}})
}

// MidTwoPathCases are the cases `mpsteer bench twopath-short-10ms` runs:
// the same rates and sizes with a path at 10 ms one way, between
// twopath-short's 0 and 25 ms (every pair of 0, 10 and 25 ms that has a
// 10 ms path).
func MidTwoPathCases() []TwoPathCase {
	return shortCases([][2]int{{0, 10}, {10, 0}, {10, 10}, {10, 25}, {25, 10}})
}

// WithCC is the cases with both hosts on the congestion control cc (the
// CUBIC twins of the benches: many hosts run it).
func WithCC(cases []TwoPathCase, cc string) []TwoPathCase {
	out := make([]TwoPathCase, len(cases))
	for i, c := range cases {
		c.CC, c.About = cc, c.About+", "+cc
		out[i] = c
	}
	return out
}

// shortCases is the grid of short transfers over the given one-way delay
// pairs (ms): every rate pair, 8 and 16 MiB.
func shortCases(delays [][2]int) []TwoPathCase {
	var cases []TwoPathCase
	for _, r := range [][2]int{{10, 10}, {15, 5}, {5, 15}} {
		for _, d := range delays {
			tcp := "a"
			if r[1] > r[0] || (r[1] == r[0] && d[1] < d[0]) {
				tcp = "b"
			}
			for _, mib := range []int{8, 16} {
				cases = append(cases, TwoPathCase{
					Name:  fmt.Sprintf("r%d-%d-d%d-%d-%dmib", r[0], r[1], d[0], d[1], mib),
					RateA: fmt.Sprintf("%dmbit", r[0]), RateB: fmt.Sprintf("%dmbit", r[1]),
					DelayA: fmt.Sprintf("%dms", d[0]), DelayB: fmt.Sprintf("%dms", d[1]),
					Size: fmt.Sprintf("%dMiB", mib), Repeats: 1, TCPPath: tcp,
					About: fmt.Sprintf("%d and %d Mbit/s, %d and %d ms one way, %d MiB", r[0], r[1], d[0], d[1], mib),
				})
			}
		}
	}
	return cases
}

// TwoPathResult is one case's figures (medians over its repeats).
type TwoPathResult struct {
	Case          string  `json:"case"`
	About         string  `json:"about"`
	Repeats       int     `json:"repeats"`
	TCPMbit       float64 `json:"tcp_mbit"`
	MPTCPMbit     float64 `json:"mptcp_mbit"`
	DynThreshMbit float64 `json:"dynthresh_mbit"`
	// MPTCPHelps: default MPTCP beats TCP over the better path by 5%.
	MPTCPHelps   bool    `json:"mptcp_helps"`
	RatioToMPTCP float64 `json:"ratio_to_mptcp"`
	// OK: dynthresh reaches 98% of default MPTCP where that helps.
	OK bool `json:"ok"`
}

// TwoPathResults is the whole bench.
type TwoPathResults struct {
	Cases []TwoPathResult `json:"cases"`
	// WorstRatio is the lowest dynthresh/MPTCP ratio where MPTCP helps.
	WorstRatio float64 `json:"worst_ratio_where_mptcp_helps"`
	Target     float64 `json:"target_ratio"`
	Command    string  `json:"command"`
}

func (c TwoPathCase) scenario() string {
	traffic := fmt.Sprintf("{type: bulk, duration: %s}", c.Duration)
	if c.Size != "" {
		traffic = fmt.Sprintf("{type: bulk, size: %s, duration: 20s}", c.Size)
	}
	tcp := c.TCPPath
	if tcp == "" {
		tcp = "a"
	}
	hosts := ""
	if c.CC != "" {
		hosts = fmt.Sprintf("hosts:\n  client: {cc: %s}\n  server: {cc: %s}\n", c.CC, c.CC)
	}
	return fmt.Sprintf(`name: twopath-%s
description: "dynthresh against default MPTCP: %s"
%spaths:
  - {name: a, rate: %s, delay: %s, queue: 200pkt}
  - {name: b, rate: %s, delay: %s, queue: 200pkt}
traffic:
  - %s
variants:
  - {name: tcp, kind: tcp, path: %s}
  - {name: mptcp, kind: mptcp}
  - name: mptcp+dynthresh
    kind: mptcp
    daemon:
      client: {policies: [{name: dynthresh}]}
`, c.Name, c.About, hosts, c.RateA, c.DelayA, c.RateB, c.DelayB, traffic, tcp)
}

// TwoPath runs the cases (each variant in a fresh lab world) and writes
// every run's results under out; command names the bench in the results.
func TwoPath(ctx context.Context, binary, out, command string, cases []TwoPathCase, progress func(string)) (*TwoPathResults, error) {
	res := &TwoPathResults{WorstRatio: 0, Target: 0.98, Command: command}
	for i, c := range cases {
		s, err := scenario.Parse("twopath-"+c.Name+".yaml", []byte(c.scenario()))
		if err != nil {
			return nil, fmt.Errorf("case %s: %w", c.Name, err)
		}
		got := map[string][]float64{}
		for r := 0; r < max(c.Repeats, 1); r++ {
			progress(fmt.Sprintf("%s: case %d of %d, %s (%s), transfer %d of %d", command, i+1, len(cases), c.Name, c.About, r+1, max(c.Repeats, 1)))
			run, err := runner.Run(ctx, s, runner.Options{Out: filepath.Join(out, c.Name, fmt.Sprint(r+1)), Binary: binary,
				Name: fmt.Sprintf("twopath-%d", r), Progress: io.Discard})
			if err != nil {
				return nil, fmt.Errorf("case %s: %w", c.Name, err)
			}
			for _, sum := range run.Summaries {
				got[sum.Variant] = append(got[sum.Variant], sum.GoodputMbit)
			}
		}
		tr := TwoPathResult{Case: c.Name, About: c.About, Repeats: max(c.Repeats, 1),
			TCPMbit: median(got["tcp"]), MPTCPMbit: median(got["mptcp"]), DynThreshMbit: median(got["mptcp+dynthresh"])}
		tr.MPTCPHelps = tr.MPTCPMbit > 1.05*tr.TCPMbit
		if tr.MPTCPMbit > 0 {
			tr.RatioToMPTCP = tr.DynThreshMbit / tr.MPTCPMbit
		}
		tr.OK = !tr.MPTCPHelps || tr.RatioToMPTCP >= res.Target
		if tr.MPTCPHelps && (res.WorstRatio == 0 || tr.RatioToMPTCP < res.WorstRatio) {
			res.WorstRatio = tr.RatioToMPTCP
		}
		progress(fmt.Sprintf("%s %s: tcp %.1f, mptcp %.1f, dynthresh %.1f Mbit/s (%.1f%% of mptcp)",
			command, c.Name, tr.TCPMbit, tr.MPTCPMbit, tr.DynThreshMbit, 100*tr.RatioToMPTCP))
		res.Cases = append(res.Cases, tr)
	}
	return res, nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return stats.Float64s(xs, 0.5)[0]
}
