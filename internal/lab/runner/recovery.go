package runner

import (
	"net/netip"
	"time"

	"mpsteer/internal/lab/recorder"
	"mpsteer/internal/lab/report"
	"mpsteer/internal/observe"
)

// Return to a path after an outage, beyond the first data segment: which
// share of the traffic the path carries again soon after it came back.
const (
	// shareAfterUp: the share is measured from this long after link-up ...
	shareAfterUp = 200 * time.Millisecond
	// shareWindow: ... for this long.
	shareWindow = time.Second
)

// shareAfter is the share of the bytes acknowledged on all paths between
// from and to (times into the transfer) that path carried, from the
// sender's subflows in the samples (a subflow's bytes acknowledged grow
// between samples; one that appears counts from zero). ok is false when
// nothing was acknowledged in the window.
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
		for _, sf := range side(s) {
			k := key{sf.Token, sf.Local, sf.Remote}
			cur[k] = sf.BytesAcked
			if i == 0 || s.T <= from || s.T > to {
				continue
			}
			p := pmap.Of(host, sf)
			if p == "?" || sf.BytesAcked < prev[k] {
				continue
			}
			d := float64(sf.BytesAcked - prev[k])
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
