package runner

import (
	"net/netip"
	"sort"
	"strings"
	"time"

	"mpsteer/internal/api"
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
//	retransmits_in_period
//	             segments the sender retransmitted over the period, all
//	             paths
//	reaction_ms  from the event that starts the period to the first
//	             applied action of the sending host's daemon that set the
//	             lossy path backup (its address, or a subflow from it):
//	             when a policy set the path aside (no daemon, or no such
//	             action: no figure)
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
	in, ok := sentInPeriod(samples, r.pathMapper(), r.upload, path, from, to)
	if !ok {
		return
	}
	sum.Metrics["retransmits_in_period"] = in.segs
	if ms, ok := r.reaction(sum, path, from); ok {
		sum.Metrics["reaction_ms"] = ms
	}
	newOn, newAll, retxOn := in.newOn, in.newAll, in.retxOn
	if newAll == 0 {
		return
	}
	sum.Metrics["bad_share"] = newOn / newAll
	if newOn > 0 {
		sum.Metrics["retx_on_bad"] = retxOn / newOn
	}
}

// reaction is reaction_ms: from the event that starts the lossy period
// (its wall-clock time, as applied) to the first applied action of the
// sending host's daemon that set the lossy path backup. No figure when
// the daemon's records are full and begin after the event: the first may
// have been dropped.
func (r *variantRun) reaction(sum *report.Summary, path string, from time.Duration) (float64, bool) {
	host, addr := "client", netip.Addr{}
	if p := r.w.Path(path); p != nil {
		addr = p.Client.Addr
		if !r.upload {
			host, addr = "server", p.Server.Addr
		}
	}
	st, _ := sum.Daemon[host].(*api.Status)
	if st == nil || !addr.IsValid() {
		return 0, false
	}
	var at time.Time
	for _, e := range sum.Events {
		if e.Path == path && e.Action == string(scenario.ActSet) && e.Error == "" && !e.At.IsZero() &&
			time.Duration(e.AtS*float64(time.Second)) >= from-100*time.Millisecond {
			at = e.At
			break
		}
	}
	if at.IsZero() || len(st.Actions) >= api.RecentActions && st.Actions[0].At.After(at) {
		return 0, false
	}
	for _, a := range st.Actions {
		if a.At.Before(at) || a.Backup == nil || !*a.Backup || a.Result != "applied" || !targetFrom(a.Target, addr) {
			continue
		}
		return float64(a.At.Sub(at)) / 1e6, true
	}
	return 0, false
}

// targetFrom reports whether an action's target is the address or a
// subflow from it ("10.2.0.1", "endpoint 10.2.0.1",
// "10.2.0.1:40000→10.1.0.2:5201").
func targetFrom(target string, addr netip.Addr) bool {
	for _, f := range strings.Fields(target) {
		local, _, _ := strings.Cut(f, "→")
		if a, err := netip.ParseAddr(local); err == nil && a == addr {
			return true
		}
		if ap, err := netip.ParseAddrPort(local); err == nil && ap.Addr() == addr {
			return true
		}
	}
	return false
}

// inPeriod is what the sending side's subflows did over the lossy
// period: new data on the lossy path and on all paths, bytes
// retransmitted on the lossy path (bytes), segments retransmitted on all
// paths.
type inPeriod struct {
	newOn, newAll, retxOn, segs float64
}

// sentInPeriod sums, over the sending side's subflows, what each sent
// between the last sample at or before from and the last sample at or
// before to (a subflow that appears later counts from zero).
func sentInPeriod(samples []recorder.Sample, pmap report.PathMapper, upload bool, path string, from, to time.Duration) (in inPeriod, ok bool) {
	type key struct {
		token         uint32
		local, remote netip.AddrPort
	}
	type counts struct {
		sent, retx uint64
		segs       uint32
	}
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
			c := counts{sf.BytesSent, sf.BytesRetrans, sf.TotalRetrans}
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
		if pathOf[k] == "?" || c.sent < c0.sent || c.retx < c0.retx || c.segs < c0.segs {
			continue
		}
		sent, retx := float64(c.sent-c0.sent), float64(c.retx-c0.retx)
		fresh := max(0, sent-retx)
		in.newAll += fresh
		in.segs += float64(c.segs - c0.segs)
		if pathOf[k] == path {
			in.newOn += fresh
			in.retxOn += retx
		}
	}
	return in, ok
}
