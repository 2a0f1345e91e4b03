package runner

import (
	"fmt"
	"time"

	"mpsteer/internal/lab/recorder"
	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/scenario"
)

// Each path's share of the bytes between the moments a scenario changes
// something (its events, a bulk sender's rate steps): what steering modes
// are judged by (the active access's share while it works, where the
// traffic went after an access's RTT rose, the overflow at a higher
// application rate).
const (
	// settle: a period's share is counted from this long after its start.
	settle = time.Second
	// takeWindow and takeShare: a path has taken the traffic when it
	// carries takeShare of the bytes over takeWindow.
	takeWindow = 500 * time.Millisecond
	takeShare  = 0.9
)

// periodShares adds, with events: per path <path>_share_before_first_event
// (from the start to the first event), <path>_share_after_event<N> (from
// 1 s after event N to the next, or to the end), and
// <path>_takes_90pct_after_event<N>_ms (from event N until the path first
// carries 90% of the bytes over 500 ms, if it does before the next
// event); with a bulk sender's rate steps, <path>_share_rate_step<N> (from
// 1 s after step N to the next, or to the end). N counts from 1.
func (r *variantRun) periodShares(sum *report.Summary, samples []recorder.Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(samples) == 0 || len(r.w.Paths) < 2 {
		return
	}
	end := samples[len(samples)-1].T
	pmap := r.pathMapper()
	var at []time.Duration
	for _, e := range r.events {
		at = append(at, time.Duration(e.AtS*float64(time.Second)))
	}
	for _, p := range r.w.Paths {
		if len(at) > 0 {
			if sh, ok := shareAfter(samples, pmap, r.upload, p.Name, 0, at[0]); ok {
				sum.Metrics[p.Name+"_share_before_first_event"] = sh
			}
		}
		for i, t := range at {
			next := end
			if i+1 < len(at) {
				next = at[i+1]
			}
			if sh, ok := shareAfter(samples, pmap, r.upload, p.Name, t+settle, next); ok {
				sum.Metrics[fmt.Sprintf("%s_share_after_event%d", p.Name, i+1)] = sh
			}
			for from := t; from+takeWindow <= next; from += 100 * time.Millisecond {
				if sh, ok := shareAfter(samples, pmap, r.upload, p.Name, from, from+takeWindow); ok && sh >= takeShare {
					sum.Metrics[fmt.Sprintf("%s_takes_90pct_after_event%d_ms", p.Name, i+1)] = float64(from-t) / 1e6
					break
				}
			}
		}
	}
	if r.bulk == nil {
		return
	}
	start := r.bulk.Start - r.t0
	for _, t := range r.s.Traffic {
		if t.Kind != scenario.Bulk || t.Competitor || len(t.AppRates) < 2 {
			continue
		}
		for i, st := range t.AppRates {
			from, to := start+st.At+settle, end
			if i+1 < len(t.AppRates) {
				to = start + t.AppRates[i+1].At
			}
			for _, p := range r.w.Paths {
				if sh, ok := shareAfter(samples, pmap, r.upload, p.Name, from, to); ok {
					sum.Metrics[fmt.Sprintf("%s_share_rate_step%d", p.Name, i+1)] = sh
				}
			}
		}
		break
	}
}
