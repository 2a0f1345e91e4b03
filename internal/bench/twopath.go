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
}

// TwoPathCases are the cases `mpsteer bench twopath` runs: equal and
// unequal rates, equal and unequal delays, long transfers and 8 MiB ones.
var TwoPathCases = []TwoPathCase{
	{"equal-long", "100mbit", "100mbit", "10ms", "10ms", "", "10s", 1, "equal paths, 10 s"},
	{"rates-long", "100mbit", "30mbit", "10ms", "10ms", "", "10s", 1, "100 and 30 Mbit/s, equal delays, 10 s"},
	{"delays-long", "100mbit", "100mbit", "5ms", "25ms", "", "10s", 1, "equal rates, 5 and 25 ms, 10 s"},
	{"both-long", "100mbit", "40mbit", "5ms", "25ms", "", "10s", 1, "100 and 40 Mbit/s, 5 and 25 ms, 10 s"},
	{"equal-8mib", "100mbit", "100mbit", "10ms", "10ms", "8MiB", "", 5, "equal paths, 8 MiB"},
	{"rates-8mib", "100mbit", "30mbit", "10ms", "10ms", "8MiB", "", 5, "100 and 30 Mbit/s, equal delays, 8 MiB"},
	{"delays-8mib", "100mbit", "100mbit", "5ms", "25ms", "8MiB", "", 5, "equal rates, 5 and 25 ms, 8 MiB"},
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
	return fmt.Sprintf(`name: twopath-%s
description: "dynthresh against default MPTCP: %s"
paths:
  - {name: a, rate: %s, delay: %s, queue: 200pkt}
  - {name: b, rate: %s, delay: %s, queue: 200pkt}
traffic:
  - %s
variants:
  - {name: tcp, kind: tcp, path: a}
  - {name: mptcp, kind: mptcp}
  - name: mptcp+dynthresh
    kind: mptcp
    daemon:
      client: {policies: [{name: dynthresh}]}
`, c.Name, c.About, c.RateA, c.DelayA, c.RateB, c.DelayB, traffic)
}

// TwoPath runs the cases (each variant in a fresh lab world) and writes
// every run's results under out.
func TwoPath(ctx context.Context, binary, out string, progress func(string)) (*TwoPathResults, error) {
	res := &TwoPathResults{WorstRatio: 0, Target: 0.98, Command: "mpsteer bench twopath"}
	for _, c := range TwoPathCases {
		s, err := scenario.Parse("twopath-"+c.Name+".yaml", []byte(c.scenario()))
		if err != nil {
			return nil, fmt.Errorf("case %s: %w", c.Name, err)
		}
		got := map[string][]float64{}
		for r := 0; r < max(c.Repeats, 1); r++ {
			progress(fmt.Sprintf("twopath %s (%s), run %d of %d", c.Name, c.About, r+1, max(c.Repeats, 1)))
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
		progress(fmt.Sprintf("twopath %s: tcp %.1f, mptcp %.1f, dynthresh %.1f Mbit/s (%.1f%% of mptcp)",
			c.Name, tr.TCPMbit, tr.MPTCPMbit, tr.DynThreshMbit, 100*tr.RatioToMPTCP))
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
