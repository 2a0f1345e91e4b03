package runner

import (
	"net/netip"
	"slices"
	"time"

	"mpsteer/internal/lab/recorder"
	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/world"
	"mpsteer/internal/observe"
	"mpsteer/internal/stats"
)

// Return to a path after an outage, beyond the first data segment: which
// share of the traffic the path carries again soon after it came back.
const (
	// shareAfterUp: the share is measured from this long after link-up ...
	shareAfterUp = 200 * time.Millisecond
	// shareWindow: ... for this long.
	shareWindow = time.Second
	// returnWindow: preferred_share_after_return is the preferred path's
	// share of the bytes in this long from its link-up.
	returnWindow = 4 * time.Second
)

// shareAfter is the share of the bytes acknowledged on all paths between
// from and to (times into the transfer) that path carried, from the
// sender's subflows in the samples (a subflow's bytes acknowledged grow
// between samples; one that appears counts from zero). What a subflow
// acknowledged between two samples counts by the part of that interval
// inside the window (as if acknowledged evenly over it): the samples are
// 100 ms apart, and counting a whole interval that only ends inside the
// window would add up to 100 ms from before it (right after a link-up:
// the other path's bytes, at its full rate). ok is false when nothing
// was acknowledged in the window.
func shareAfter(samples []recorder.Sample, pmap report.PathMapper, upload bool, path string, from, to time.Duration) (share float64, ok bool) {
	type key struct {
		token         uint32
		local, remote netip.AddrPort
	}
	host := "client"
	side := func(s recorder.Sample) []observe.Subflow { return s.Client }
	if !upload {
		host = "server"
		side = func(s recorder.Sample) []observe.Subflow { return s.Server }
	}
	var on, all float64
	prev := map[key]uint64{}
	for i, s := range samples {
		cur := map[key]uint64{}
		inside := 0.0 // the part of the interval since the last sample inside the window
		if i > 0 && s.T > samples[i-1].T {
			lo, hi := max(samples[i-1].T, from), min(s.T, to)
			if hi > lo {
				inside = float64(hi-lo) / float64(s.T-samples[i-1].T)
			}
		}
		for _, sf := range side(s) {
			k := key{sf.Token, sf.Local, sf.Remote}
			cur[k] = sf.BytesAcked
			if inside == 0 {
				continue
			}
			p := pmap.Of(host, sf)
			if p == "?" || sf.BytesAcked < prev[k] {
				continue
			}
			d := float64(sf.BytesAcked-prev[k]) * inside
			all += d
			if p == path {
				on += d
			}
		}
		prev = cur
	}
	if all == 0 {
		return 0, false
	}
	return on / all, true
}

// recoveries turns the emulator's link-up records into times from link-up
// to the first data segment, per path, in the sending direction.
func (r *variantRun) recoveries(sum *report.Summary, links map[string]world.LinkState, samples []recorder.Sample) {
	pmap := r.pathMapper()
	for _, p := range r.w.Paths {
		st, ok := links[p.Link]
		if !ok {
			continue
		}
		dir := st.Up
		if !r.upload {
			dir = st.Down
		}
		var list, shares []float64
		for _, u := range dir.Ups {
			if u.FirstDataAt > 0 {
				list = append(list, float64(u.FirstDataAt-u.UpAt)/1e6)
			}
			// The path's share of the traffic in the second from 200 ms
			// after the link-up (times into the transfer).
			at := u.UpAt - dir.Origin
			if share, ok := shareAfter(samples, pmap, r.upload, p.Name, at+shareAfterUp, at+shareAfterUp+shareWindow); ok && dir.Origin > 0 {
				shares = append(shares, share)
			}
		}
		if len(shares) > 0 {
			sum.Metrics[p.Name+"_share_from_200ms_after_up_mean"] = mean(shares)
			sum.Metrics[p.Name+"_share_from_200ms_after_up_min"] = slices.Min(shares)
		}
		if len(list) == 0 {
			continue
		}
		if sum.Recoveries == nil {
			sum.Recoveries = map[string][]float64{}
		}
		sum.Recoveries[p.Name] = list
		sum.Metrics[p.Name+"_link_up_to_first_data_ms_mean"] = mean(list)
		sum.Metrics[p.Name+"_link_up_to_first_data_ms_median"] = stats.Float64s(list, 0.5)[0]
	}
	r.preferredReturn(sum, links, samples)
}

// preferredReturn measures the return to the scenario's preferred path
// after its first link-up: the time to the first data segment on it, and
// its share of the bytes acknowledged in the returnWindow from link-up.
// A return that never came counts as the time to the end of the samples
// (a lower bound).
func (r *variantRun) preferredReturn(sum *report.Summary, links map[string]world.LinkState, samples []recorder.Sample) {
	if r.s.Preferred == "" {
		return
	}
	for _, p := range r.w.Paths {
		if p.Name != r.s.Preferred {
			continue
		}
		st, ok := links[p.Link]
		if !ok {
			return
		}
		dir := st.Up
		if !r.upload {
			dir = st.Down
		}
		if len(dir.Ups) == 0 || dir.Origin <= 0 {
			return
		}
		u := dir.Ups[0]
		at := u.UpAt - dir.Origin // into the transfer, as the samples' T
		ms := float64(u.FirstDataAt-u.UpAt) / 1e6
		if u.FirstDataAt == 0 {
			if len(samples) == 0 {
				return
			}
			ms = float64(samples[len(samples)-1].T-at) / 1e6
		}
		sum.LinkUpToFirstDataMs = &ms
		if share, ok := shareAfter(samples, r.pathMapper(), r.upload, p.Name, at, at+returnWindow); ok {
			sum.PreferredShareAfterReturn = &share
		}
		return
	}
}

func mean(xs []float64) float64 {
	m := 0.0
	for _, v := range xs {
		m += v
	}
	return m / float64(len(xs))
}
