// Package report turns a variant's recorded samples into its summary,
// time series, plots, and a report comparing the variants of a run.
package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"mpsteer/internal/lab/recorder"
	"mpsteer/internal/observe"
	"mpsteer/internal/stats"
)

// SubflowSummary is one connection-level socket on the sending side.
type SubflowSummary struct {
	Path         string  `json:"path"`
	Local        string  `json:"local"`
	Remote       string  `json:"remote"`
	MPTCP        bool    `json:"mptcp"`
	Token        string  `json:"token,omitempty"`
	LocalID      uint8   `json:"local_id"`
	RemoteID     uint8   `json:"remote_id"`
	BytesAcked   uint64  `json:"bytes_acked"`
	BytesRetrans uint64  `json:"bytes_retrans"`
	Retransmits  uint32  `json:"retransmits"`
	BackupSeen   bool    `json:"backup_seen"`
	FirstSeenS   float64 `json:"first_seen_s"`
	LastSeenS    float64 `json:"last_seen_s"`
}

// PathSummary is what one path carried.
type PathSummary struct {
	Bytes uint64  `json:"bytes"`
	Share float64 `json:"share"`
}

// Percentiles of a distribution, in milliseconds.
type Percentiles struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Mean float64 `json:"mean"`
}

// FlowsSummary describes the short flows.
type FlowsSummary struct {
	Count  int                    `json:"count"`
	Failed int                    `json:"failed"`
	FCTms  Percentiles            `json:"fct_ms"`
	BySize map[string]Percentiles `json:"fct_ms_by_size"`
}

// FCTSummary is the flow completion time distribution in milliseconds:
// median and p99 by the project's one quantile rule (internal/stats), over
// Count completed flows.
type FCTSummary struct {
	Median float64 `json:"median"`
	P99    float64 `json:"p99"`
	Count  int     `json:"count"`
}

// EventRecord is an event as it was applied.
type EventRecord struct {
	AtS    float64 `json:"at_s"`
	Path   string  `json:"path"`
	Action string  `json:"action"`
	Detail string  `json:"detail,omitempty"`
	Error  string  `json:"error,omitempty"`
	// At is when it was applied, by the wall clock (to line it up with
	// the daemons' action records).
	At time.Time `json:"at,omitzero"`
}

// Summary is summary.json of one variant.
type Summary struct {
	Scenario     string                 `json:"scenario"`
	Variant      string                 `json:"variant"`
	Kind         string                 `json:"kind"`
	CC           map[string]string      `json:"congestion_control"`
	MPTCPUsed    bool                   `json:"mptcp_used"`
	Upload       bool                   `json:"upload"`
	DurationS    float64                `json:"duration_s"`
	Bytes        int64                  `json:"bytes"`
	GoodputMbit  float64                `json:"goodput_mbit"`
	Retransmits  uint64                 `json:"retransmits"`
	BytesRetrans uint64                 `json:"bytes_retrans"`
	Subflows     []SubflowSummary       `json:"subflows"`
	Paths        map[string]PathSummary `json:"paths"`
	// PathShare is each path's bytes over all paths' bytes (the same as
	// Paths' shares), keyed by path name: what scripts read.
	PathShare map[string]float64 `json:"path_share"`
	Flows     *FlowsSummary      `json:"flows,omitempty"`
	// FCT sums up the short flows' completion times (scripts read it).
	FCT      *FCTSummary    `json:"fct_ms,omitempty"`
	Events   []EventRecord  `json:"events,omitempty"`
	Errors   []string       `json:"errors,omitempty"`
	Emulator any            `json:"emulator,omitempty"`
	Daemon   map[string]any `json:"daemon,omitempty"`
	// Metrics holds measurements specific to a scenario (recovery times,
	// post-event goodput, …), each key with its unit.
	Metrics map[string]float64 `json:"metrics,omitempty"`
	// Recoveries lists, per path, the time from each link-up to the first
	// TCP data segment that crossed the link in the sending direction
	// (measured by the link emulator). Summaries written before
	// LinkUpToFirstDataMs kept it under that key; they are read as such.
	Recoveries map[string][]float64 `json:"link_up_to_first_data_ms_by_path,omitempty"`
	// LinkUpToFirstDataMs: on a scenario that names its preferred path,
	// from that path's first link-up to the first data segment on it
	// (a lower bound, the time to the end of the transfer, when none
	// came); PreferredShareAfterReturn: its share of the bytes
	// acknowledged on all paths in the 4 s after that link-up (0–1).
	LinkUpToFirstDataMs       *float64 `json:"link_up_to_first_data_ms,omitempty"`
	PreferredShareAfterReturn *float64 `json:"preferred_share_after_return,omitempty"`
	// BestPath: a tcp variant with `path: best` measures TCP over each of
	// its candidate paths in turn and keeps the best; this is the path it
	// kept, and BestOf the primary metric over each candidate.
	BestPath string             `json:"best_path,omitempty"`
	BestOf   map[string]float64 `json:"best_of,omitempty"`
	// CompetitorGoodputMbit is the goodput of the single-path TCP beside
	// the measured traffic (competitors: all their streams together, each
	// over its own span), CompetitorFlows how many streams; nil and 0
	// without competitors.
	CompetitorGoodputMbit *float64 `json:"competitor_goodput_mbit,omitempty"`
	CompetitorFlows       int      `json:"competitor_flows,omitempty"`
	// MPTCPCounters: how the kernel's MPTCP MIB counters (nstat's
	// MPTcpExt*, without the prefix) moved in the client's and the
	// server's namespace over the run, those that moved; what the kernel
	// did that the samples do not show (joins, resets, reinjections).
	MPTCPCounters map[string]observe.MPTCPCounters `json:"mptcp_counters,omitempty"`
}

// KernelResets is how many subflows the kernel reset over the run because
// a data mapping did not match what it had (MPTcpExtDSSNotMatching, in
// either namespace): Linux 6.18 does so to about one join in a hundred at
// veth speed, with no daemon running, and its path manager does not join
// again, so the connection goes on without that path.
func (s *Summary) KernelResets() uint64 {
	var n uint64
	for _, c := range s.MPTCPCounters {
		n += c["DSSNotMatching"]
	}
	return n
}

// PathMapper names the path of a socket from its client-side address.
type PathMapper map[netip.Addr]string

// Of returns the path of a socket seen at host.
func (pm PathMapper) Of(host string, sf observe.Subflow) string {
	a := sf.Local.Addr()
	if host == "server" {
		a = sf.Remote.Addr()
	}
	if p, ok := pm[a]; ok {
		return p
	}
	return "?"
}

// Series is the per-interval view of a run.
type Series struct {
	Paths   []string
	T       []float64            // seconds
	App     []float64            // application goodput, Mbit/s
	PerPath map[string][]float64 // sending-side acked bytes per path, Mbit/s
	SRTT    map[string][]float64 // ms, largest subflow SRTT on the path (NaN = none)
	Cwnd    map[string][]float64 // packets, summed over the path's subflows
}

// Sender returns the sending side's sockets of a sample.
func Sender(s recorder.Sample, upload bool) ([]observe.Subflow, string) {
	if upload {
		return s.Client, "client"
	}
	return s.Server, "server"
}

// BuildSeries differentiates the cumulative counters of the samples.
func BuildSeries(samples []recorder.Sample, paths []string, pm PathMapper, upload bool) *Series {
	se := &Series{Paths: paths, PerPath: map[string][]float64{}, SRTT: map[string][]float64{}, Cwnd: map[string][]float64{}}
	prevAcked := map[uint64]uint64{}
	var prevApp int64
	var prevT time.Duration
	for i, s := range samples {
		dt := (s.T - prevT).Seconds()
		if i > 0 && dt < 0.02 {
			// A sample right after the previous one (the final one, taken
			// when the traffic ends) would turn a few bytes into a spike.
			continue
		}
		if i == 0 || dt <= 0 {
			dt = math.NaN()
		}
		se.T = append(se.T, s.T.Seconds())
		se.App = append(se.App, float64(s.AppBytes-prevApp)*8/1e6/dt)
		socks, host := Sender(s, upload)
		bytes := map[string]uint64{}
		srtt := map[string]float64{}
		cwnd := map[string]float64{}
		for _, sf := range socks {
			p := pm.Of(host, sf)
			id := sf.Cookie
			d := sf.BytesAcked - min(prevAcked[id], sf.BytesAcked)
			prevAcked[id] = sf.BytesAcked
			bytes[p] += d
			srtt[p] = math.Max(srtt[p], float64(sf.SRTT)/1e6)
			cwnd[p] += float64(sf.Cwnd)
		}
		for _, p := range paths {
			se.PerPath[p] = append(se.PerPath[p], float64(bytes[p])*8/1e6/dt)
			v, ok := srtt[p]
			if !ok {
				v = math.NaN()
			}
			se.SRTT[p] = append(se.SRTT[p], v)
			se.Cwnd[p] = append(se.Cwnd[p], cwnd[p])
		}
		prevApp, prevT = s.AppBytes, s.T
	}
	return se
}

// WriteCSV writes timeseries.csv.
func (se *Series) WriteCSV(file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer f.Close()
	w := csv.NewWriter(f)
	head := []string{"time_s", "app_goodput_mbit"}
	for _, p := range se.Paths {
		head = append(head, p+"_goodput_mbit", p+"_srtt_ms", p+"_cwnd_pkts")
	}
	w.Write(head)
	num := func(v float64) string {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return ""
		}
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	for i := range se.T {
		row := []string{num(se.T[i]), num(se.App[i])}
		for _, p := range se.Paths {
			row = append(row, num(se.PerPath[p][i]), num(se.SRTT[p][i]), num(se.Cwnd[p][i]))
		}
		w.Write(row)
	}
	w.Flush()
	return w.Error()
}

// SummarizeSubflows collects, per sending-side socket, its final counters.
func SummarizeSubflows(samples []recorder.Sample, pm PathMapper, upload bool) ([]SubflowSummary, map[string]PathSummary) {
	by := map[uint64]*SubflowSummary{}
	var order []uint64
	for _, s := range samples {
		socks, host := Sender(s, upload)
		for _, sf := range socks {
			ss, ok := by[sf.Cookie]
			if !ok {
				ss = &SubflowSummary{Path: pm.Of(host, sf), Local: sf.Local.String(), Remote: sf.Remote.String(),
					MPTCP: sf.MPTCP, LocalID: sf.LocalID, RemoteID: sf.RemoteID, FirstSeenS: s.T.Seconds()}
				if sf.MPTCP {
					ss.Token = fmt.Sprintf("%08x", sf.Token)
				}
				by[sf.Cookie] = ss
				order = append(order, sf.Cookie)
			}
			ss.BytesAcked = max(ss.BytesAcked, sf.BytesAcked)
			ss.BytesRetrans = max(ss.BytesRetrans, sf.BytesRetrans)
			ss.Retransmits = max(ss.Retransmits, sf.TotalRetrans)
			ss.BackupSeen = ss.BackupSeen || sf.Backup()
			ss.LastSeenS = s.T.Seconds()
		}
	}
	var out []SubflowSummary
	paths := map[string]PathSummary{}
	var total uint64
	for _, id := range order {
		ss := by[id]
		// Sockets that never carried data (the flows' tiny control
		// connections, a subflow that failed to join) still count.
		out = append(out, *ss)
		p := paths[ss.Path]
		p.Bytes += ss.BytesAcked
		paths[ss.Path] = p
		total += ss.BytesAcked
	}
	for k, p := range paths {
		if total > 0 {
			p.Share = float64(p.Bytes) / float64(total)
		}
		paths[k] = p
	}
	return out, paths
}

// FCTStats summarises flow completion times.
func FCTStats(fcts []time.Duration) Percentiles {
	if len(fcts) == 0 {
		return Percentiles{}
	}
	q := stats.Durations(fcts, 0.5, 0.9, 0.99)
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	var sum time.Duration
	for _, d := range fcts {
		sum += d
	}
	return Percentiles{P50: ms(q[0]), P90: ms(q[1]), P99: ms(q[2]), Mean: float64(sum) / float64(len(fcts)) / 1e6}
}

// WriteJSON writes v as indented JSON.
func WriteJSON(file string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(data, '\n'), 0o644)
}

// UnmarshalJSON reads a summary, those of older files too: before the
// preferred path's figure took the name link_up_to_first_data_ms, that
// key held the per-path lists (Recoveries).
func (s *Summary) UnmarshalJSON(data []byte) error {
	type plain Summary
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	if old, ok := raw["link_up_to_first_data_ms"]; ok && len(bytes.TrimSpace(old)) > 0 && bytes.TrimSpace(old)[0] == '{' {
		if _, both := raw["link_up_to_first_data_ms_by_path"]; !both {
			raw["link_up_to_first_data_ms_by_path"] = old
		}
		delete(raw, "link_up_to_first_data_ms")
		var err error
		if data, err = json.Marshal(raw); err != nil {
			return err
		}
	}
	return json.Unmarshal(data, (*plain)(s))
}

// ReadSummary loads a summary.json.
func ReadSummary(file string) (*Summary, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var s Summary
	return &s, json.Unmarshal(data, &s)
}

// Table renders the comparison of variants as a Markdown table.
func Table(sums []*Summary) string {
	var b strings.Builder
	pathSet := map[string]bool{}
	var paths []string
	hasFlows := false
	for _, s := range sums {
		for p := range s.Paths {
			if !pathSet[p] && p != "?" {
				pathSet[p] = true
				paths = append(paths, p)
			}
		}
		hasFlows = hasFlows || s.Flows != nil
	}
	sort.Strings(paths)
	b.WriteString("| variant | goodput (Mbit/s) | bytes | retransmits (segments) |")
	for _, p := range paths {
		fmt.Fprintf(&b, " %s share |", p)
	}
	if hasFlows {
		b.WriteString(" FCT p50 (ms) | FCT p99 (ms) |")
	}
	b.WriteString(" congestion control |\n|---|---:|---:|---:|")
	for range paths {
		b.WriteString("---:|")
	}
	if hasFlows {
		b.WriteString("---:|---:|")
	}
	b.WriteString("---|\n")
	for _, s := range sums {
		fmt.Fprintf(&b, "| %s | %.1f | %s | %d |", s.Variant, s.GoodputMbit, humanBytes(s.Bytes), s.Retransmits)
		for _, p := range paths {
			if ps, ok := s.Paths[p]; ok {
				fmt.Fprintf(&b, " %.1f%% |", ps.Share*100)
			} else {
				b.WriteString(" – |")
			}
		}
		if hasFlows {
			if s.Flows != nil {
				fmt.Fprintf(&b, " %.1f | %.1f |", s.Flows.FCTms.P50, s.Flows.FCTms.P99)
			} else {
				b.WriteString(" – | – |")
			}
		}
		fmt.Fprintf(&b, " %s |\n", s.CC["client"])
	}
	return b.String()
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%d B", n)
	}
}

// VariantDir is where a variant's files go.
func VariantDir(out, variant string) string { return filepath.Join(out, variant) }

// Compact is a summary without its per-subflow detail, emulator counters
// and daemon status: the figures a document quotes, small enough to keep
// beside it (docs/data).
type Compact struct {
	Scenario    string                 `json:"scenario"`
	Variant     string                 `json:"variant"`
	Kind        string                 `json:"kind"`
	CC          string                 `json:"congestion_control"`
	MPTCPUsed   bool                   `json:"mptcp_used"`
	DurationS   float64                `json:"duration_s"`
	Bytes       int64                  `json:"bytes"`
	GoodputMbit float64                `json:"goodput_mbit"`
	Retransmits uint64                 `json:"retransmits"`
	Subflows    int                    `json:"subflows"`
	Paths       map[string]PathSummary `json:"paths"`
	FCT         *FCTSummary            `json:"fct_ms,omitempty"`
	Metrics     map[string]float64     `json:"metrics,omitempty"`
	Recoveries  map[string][]float64   `json:"link_up_to_first_data_ms_by_path,omitempty"`
	// The return to the preferred path (Summary's fields of these names).
	LinkUpToFirstDataMs       *float64 `json:"link_up_to_first_data_ms,omitempty"`
	PreferredShareAfterReturn *float64 `json:"preferred_share_after_return,omitempty"`
	Errors                    []string `json:"errors,omitempty"`
}

// Compacted drops what a document does not quote.
func (s *Summary) Compacted() Compact {
	return Compact{Scenario: s.Scenario, Variant: s.Variant, Kind: s.Kind, CC: s.CC["client"], MPTCPUsed: s.MPTCPUsed,
		DurationS: s.DurationS, Bytes: s.Bytes, GoodputMbit: s.GoodputMbit, Retransmits: s.Retransmits,
		Subflows: len(s.Subflows), Paths: s.Paths, FCT: s.FCT, Metrics: s.Metrics, Recoveries: s.Recoveries,
		LinkUpToFirstDataMs: s.LinkUpToFirstDataMs, PreferredShareAfterReturn: s.PreferredShareAfterReturn, Errors: s.Errors}
}

// CrossTable renders one value per scenario (rows) and variant (columns):
// goodput_mbit, or a metric of the summaries (its name carries its unit).
func CrossTable(rows [][]*Summary, variants []string, metric string) string {
	var b strings.Builder
	b.WriteString("| scenario |")
	for _, v := range variants {
		fmt.Fprintf(&b, " %s |", v)
	}
	b.WriteString("\n|---|")
	for range variants {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, sums := range rows {
		if len(sums) == 0 {
			continue
		}
		fmt.Fprintf(&b, "| %s |", sums[0].Scenario)
		for _, v := range variants {
			cell := " – |"
			for _, s := range sums {
				if s.Variant != v {
					continue
				}
				if metric == "" || metric == "goodput_mbit" {
					cell = fmt.Sprintf(" %.1f |", s.GoodputMbit)
				} else if val, ok := s.Metrics[metric]; ok {
					cell = fmt.Sprintf(" %.1f |", val)
				}
			}
			b.WriteString(cell)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// GoodputBetween is the application goodput (Mbit/s) between two times,
// from the samples nearest to them.
func GoodputBetween(samples []recorder.Sample, from, to time.Duration) (float64, bool) {
	var a, b *recorder.Sample
	for i := range samples {
		s := &samples[i]
		if a == nil && s.T >= from {
			a = s
		}
		if s.T <= to {
			b = s
		}
	}
	if a == nil || b == nil || b.T-a.T < 200*time.Millisecond {
		return 0, false
	}
	return float64(b.AppBytes-a.AppBytes) * 8 / 1e6 / (b.T - a.T).Seconds(), true
}
