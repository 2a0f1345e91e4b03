package runner

import (
	"net/netip"
	"sort"
	"time"

	"mpsteer/internal/lab/recorder"
	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/observe"
)

// What the sender does with a path while it loses packets: the RAMPTCP
// poster's Fig. 1, where default MPTCP "injected 43% new packets on flow
// 2, of which 74% had to be re-transmitted". The lossy period runs from
// the first event that sets a loss above 0 on a path, in the direction the
// data flows, to the next event on that path or the end of the transfer.
// Over it, from the sending side's subflows:
//
//	bad_share    new data sent on that path (bytes sent less bytes
//	             retransmitted) over the new data sent on all paths
//	retx_on_bad  bytes retransmitted on that path over the new data sent
//	             on it
//
// Bytes, where the poster counts packets: the kernel's per-socket figures
// are bytes (a retransmitted byte counts once per retransmission), and a
// segment is an MSS of them either way. Retransmissions are the subflow's
// own (TCP's); what MPTCP reinjects on another subflow counts there as new
// data.

// lossyPeriod is the path and period (times into the transfer) of the
// first loss event; ok is false without one.
func (r *variantRun) lossyPeriod(end time.Duration) (path string, from, to time.Duration, ok bool) {
	events := append(append([]scenario.Event(nil), r.s.Events...), r.v.Events...)
	sort.SliceStable(events, func(i, j int) bool { return events[i].At < events[j].At })
	dataDir := scenario.DirUp
	if !r.upload {
		dataDir = scenario.DirDown
	}
	for i, e := range events {
		if e.Path == "" || e.Action != scenario.ActSet || e.Patch.Loss == nil || float64(*e.Patch.Loss) <= 0 ||
			r.w.Path(e.Path) == nil || (e.Dir != scenario.DirBoth && e.Dir != "" && e.Dir != dataDir) {
			continue
		}
		to = end
		for _, next := range events[i+1:] {
			if next.Path == e.Path && next.At > e.At {
				to = next.At
				break
			}
		}
		return e.Path, e.At, to, to > e.At
	}
	return "", 0, 0, false
}

// lossMetrics adds bad_share and retx_on_bad to the summary's metrics
// when the run has a lossy period in which the sender sent new data.
func (r *variantRun) lossMetrics(sum *report.Summary, samples []recorder.Sample) {
	if len(samples) == 0 {
		return
	}
	path, from, to, ok := r.lossyPeriod(samples[len(samples)-1].T)
	if !ok {
		return
	}
	newOn, newAll, retxOn, ok := sentInPeriod(samples, r.pathMapper(), r.upload, path, from, to)
	if !ok || newAll == 0 {
		return
	}
	sum.Metrics["bad_share"] = newOn / newAll
	if newOn > 0 {
		sum.Metrics["retx_on_bad"] = retxOn / newOn
	}
}

// sentInPeriod sums, over the sending side's subflows, what each sent
// between the last sample at or before from and the last sample at or
// before to (a subflow that appears later counts from zero): the new data
// on path, on all paths, and the bytes retransmitted on path.
func sentInPeriod(samples []recorder.Sample, pmap report.PathMapper, upload bool, path string, from, to time.Duration) (newOn, newAll, retxOn float64, ok bool) {
	type key struct {
		token         uint32
		local, remote netip.AddrPort
	}
	type counts struct{ sent, retx uint64 }
	host := "client"
	side := func(s recorder.Sample) []observe.Subflow { return s.Client }
	if !upload {
		host = "server"
		side = func(s recorder.Sample) []observe.Subflow { return s.Server }
	}
	first, last := map[key]counts{}, map[key]counts{}
	pathOf := map[key]string{}
	for _, s := range samples {
		if s.T > to {
			break
		}
		for _, sf := range side(s) {
			k := key{sf.Token, sf.Local, sf.Remote}
			c := counts{sf.BytesSent, sf.BytesRetrans}
			if s.T <= from {
				first[k] = c
			}
			last[k] = c
			pathOf[k] = pmap.Of(host, sf)
		}
		ok = ok || s.T > from
	}
	for k, c := range last {
		c0 := first[k]
		if pathOf[k] == "?" || c.sent < c0.sent || c.retx < c0.retx {
			continue
		}
		sent, retx := float64(c.sent-c0.sent), float64(c.retx-c0.retx)
		fresh := max(0, sent-retx)
		newAll += fresh
		if pathOf[k] == path {
			newOn += fresh
			retxOn += retx
		}
	}
	return newOn, newAll, retxOn, ok
}
