package runner

import (
	"fmt"
	"slices"
	"time"

	"mpsteer/internal/lab/recorder"
	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/lab/world"
	"mpsteer/internal/observe"
	"mpsteer/internal/stats"
)

// A run's summary (summary.json): what the measured pair's traffic got,
// from the recorder's samples, the generators' results and the emulator's
// counters.

func (r *variantRun) pathMapper() report.PathMapper {
	pmap := report.PathMapper{}
	for _, p := range r.w.Paths {
		pmap[p.Client.Addr] = p.Name
	}
	return pmap
}

func (r *variantRun) summarize(samples []recorder.Sample) *report.Summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	sum := &report.Summary{
		Scenario: r.s.Name, Variant: r.v.Name, Kind: string(r.v.Kind), CC: r.w.CC, Upload: r.upload,
		Events: r.events, Errors: r.errs, Metrics: map[string]float64{},
	}
	pmap := r.pathMapper()
	sum.Subflows, sum.Paths = report.SummarizeSubflows(samples, pmap, r.upload)
	sum.PathShare = map[string]float64{}
	for name, p := range sum.Paths {
		sum.PathShare[name] = p.Share
	}
	for _, sf := range sum.Subflows {
		sum.Retransmits += uint64(sf.Retransmits)
		sum.BytesRetrans += sf.BytesRetrans
	}
	if r.bulk != nil {
		b := r.bulk
		sum.MPTCPUsed = b.MPTCP
		sum.Bytes = b.Bytes
		if b.LastByte > b.Start {
			sum.DurationS = (b.LastByte - b.Start).Seconds()
			sum.GoodputMbit = float64(b.Bytes) * 8 / 1e6 / sum.DurationS
		}
	}
	if r.bulk != nil {
		// Until the sender's planned end (a connection that died stalls
		// to the end) or the last byte, whichever is later.
		end := r.bulk.LastByte - r.t0
		for _, t := range r.s.Traffic {
			if t.Kind == scenario.Bulk && t.Duration > 0 {
				end = max(end, t.Start+t.Duration)
			}
		}
		if st, ok := longestStall(samples, r.bulk.Start-r.t0, end, 0); ok {
			sum.Metrics["longest_stall_ms"] = float64(st) / 1e6
		}
		if med, ok := medianGoodput(samples, r.bulk.Start-r.t0+time.Second, end); ok {
			if st, ok := longestStall(samples, r.bulk.Start-r.t0+time.Second, end, med/10); ok {
				sum.Metrics["longest_below_tenth_of_median_ms"] = float64(st) / 1e6
			}
		}
	}
	if n := len(r.events); n > 0 && r.bulk != nil {
		// What the transfer achieved once the last event had settled (1 s).
		from := time.Duration((r.events[n-1].AtS + 1) * float64(time.Second))
		if g, ok := report.GoodputBetween(samples, from, r.bulk.LastByte-r.t0); ok {
			sum.Metrics["goodput_after_last_event_mbit"] = g
		}
		if g, ok := report.GoodputBetween(samples, 0, time.Duration(r.events[0].AtS*float64(time.Second))); ok {
			sum.Metrics["goodput_before_first_event_mbit"] = g
		}
	}
	r.competitorFigures(sum)
	if len(r.flows) > 0 {
		fs := &report.FlowsSummary{Count: len(r.flows), BySize: map[string]report.Percentiles{}}
		var all []time.Duration
		bySize := map[int64][]time.Duration{}
		for _, f := range r.flows {
			if f.Err != "" {
				fs.Failed++
				continue
			}
			all = append(all, f.FCT)
			bySize[f.Size] = append(bySize[f.Size], f.FCT)
			sum.Bytes += f.Size
		}
		fs.FCTms = report.FCTStats(all)
		for sz, d := range bySize {
			fs.BySize[fmt.Sprintf("%dB", sz)] = report.FCTStats(d)
		}
		sum.Flows = fs
		if len(all) > 0 {
			q := stats.Durations(all, 0.5, 0.99)
			sum.FCT = &report.FCTSummary{Median: float64(q[0]) / 1e6, P99: float64(q[1]) / 1e6, Count: len(all)}
		}
	}
	return sum
}

// longestStall is the longest time, between from and to, in which the
// receiving application got no more than floor bits per second (0:
// nothing): from one sample interval with more progress to the next one,
// or to the last sample (so its resolution is the sampling interval).
func longestStall(samples []recorder.Sample, from, to time.Duration, floor float64) (time.Duration, bool) {
	var longest time.Duration
	var prev *recorder.Sample
	var lastProgress time.Duration
	for i := range samples {
		s := &samples[i]
		if s.T < from || s.T > to {
			continue
		}
		if prev == nil {
			prev, lastProgress = s, s.T
			continue
		}
		if float64(s.AppBytes-prev.AppBytes)*8 > floor*(s.T-prev.T).Seconds() {
			longest = max(longest, s.T-lastProgress)
			lastProgress = s.T
		}
		prev = s
	}
	if prev == nil {
		return 0, false
	}
	return max(longest, prev.T-lastProgress), true
}

// medianGoodput is the median of the sample-to-sample goodput (bit/s).
func medianGoodput(samples []recorder.Sample, from, to time.Duration) (float64, bool) {
	var g []float64
	for i := 1; i < len(samples); i++ {
		a, b := samples[i-1], samples[i]
		if a.T < from || b.T > to || b.T <= a.T {
			continue
		}
		g = append(g, float64(b.AppBytes-a.AppBytes)*8/(b.T-a.T).Seconds())
	}
	if len(g) == 0 {
		return 0, false
	}
	return stats.Float64s(g, 0.5)[0], true
}

// linkShares, in a tenants world: the share of the bytes each physical
// link carried from the first hypervisor to the second and back (every
// tenant's traffic), as metrics <link>_up_share and <link>_down_share.
func (r *variantRun) linkShares(sum *report.Summary, links map[string]world.LinkState) {
	if r.w.Tenants == nil {
		return
	}
	var up, down float64
	for _, l := range r.w.Tenants.Links {
		up += float64(links[l.Name].Up.Stats.Bytes)
		down += float64(links[l.Name].Down.Stats.Bytes)
	}
	for _, l := range r.w.Tenants.Links {
		if up > 0 {
			sum.Metrics[l.Name+"_up_share"] = float64(links[l.Name].Up.Stats.Bytes) / up
		}
		if down > 0 {
			sum.Metrics[l.Name+"_down_share"] = float64(links[l.Name].Down.Stats.Bytes) / down
		}
	}
}

// floodMetrics measures a UDP flood's effect: goodput before and during
// it, and how long after it ends the goodput (0.5 s average) takes to reach
// 95% of its pre-flood level again.
func (r *variantRun) floodMetrics(sum *report.Summary, samples []recorder.Sample) {
	for _, t := range r.s.Traffic {
		if t.Kind != scenario.UDPFlood || r.w.Path(t.Path) == nil {
			continue
		}
		before, ok1 := report.GoodputBetween(samples, t.Start-2*time.Second, t.Start)
		during, ok2 := report.GoodputBetween(samples, t.Start+500*time.Millisecond, t.Stop)
		if !ok1 || !ok2 {
			return
		}
		sum.Metrics["goodput_before_flood_mbit"] = before
		sum.Metrics["goodput_during_flood_mbit"] = during
		for i := range samples {
			if samples[i].T < t.Stop {
				continue
			}
			if g, ok := report.GoodputBetween(samples, samples[i].T, samples[i].T+500*time.Millisecond); ok && g >= 0.95*before {
				sum.Metrics["recovery_after_flood_s"] = (samples[i].T - t.Stop).Seconds()
				break
			}
		}
		return
	}
}

// competitorFigures: the competitors' goodput (each over its own span),
// and ratio_to_competitor_flow, the measured traffic's goodput against
// one competing stream's (the competitors' goodput over their streams): 1
// is an equal share of a shared bottleneck.
func (r *variantRun) competitorFigures(sum *report.Summary) {
	if len(r.competitors) == 0 {
		return
	}
	var g float64
	for _, c := range r.competitors {
		if c.res.LastByte > c.res.Start {
			g += float64(c.res.Bytes) * 8 / 1e6 / (c.res.LastByte - c.res.Start).Seconds()
		}
		sum.CompetitorFlows += c.streams
	}
	sum.CompetitorGoodputMbit = &g
	if g > 0 {
		sum.Metrics["ratio_to_competitor_flow"] = sum.GoodputMbit / (g / float64(sum.CompetitorFlows))
	}
}

// withoutCompetitors leaves the competitors' sockets out of the samples:
// the subflows, per-path shares and time series are the measured
// traffic's (the competitors' goodput is counted apart).
func (r *variantRun) withoutCompetitors(samples []recorder.Sample) []recorder.Sample {
	ports := r.competitorPorts()
	if len(ports) == 0 {
		return samples
	}
	out := make([]recorder.Sample, len(samples))
	for i, s := range samples {
		s.Client = slices.DeleteFunc(slices.Clone(s.Client), func(sf observe.Subflow) bool { return ports[sf.Remote.Port()] })
		s.Server = slices.DeleteFunc(slices.Clone(s.Server), func(sf observe.Subflow) bool { return ports[sf.Local.Port()] })
		out[i] = s
	}
	return out
}
