package daemon

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	vnl "github.com/vishvananda/netlink"

	"mpsteer/internal/api"
	"mpsteer/internal/config"
	"mpsteer/internal/lasthop"
	"mpsteer/internal/observe"
	"mpsteer/internal/policy"
	"mpsteer/internal/sockops"
)

// Receiver-assisted path health (RAMPTCP). A daemon whose config has a
// report_health section reports, as the data's receiver, what it sees of
// each path to its peers: the sockops health program counts the loss
// indications on each subflow and writes the report on its ACKs, and the
// daemon adds its last hops' health from a source (the lab's emulator,
// Wi-Fi station information). A daemon whose policies read reports
// (ramptcp) has the same program parse the peers' reports; the health
// poller reads them every healthPoll and marks the loop when one changed,
// so the policies decide again at once, not only every interval. The
// poller runs only while a policy reads reports or a last-hop source
// feeds them: a policy that only wants the program's notsent_lowat
// (prefer) costs no polling.

// healthPoll is how often the poller reads the reports and samples the
// last hops (at the source's own interval).
const healthPoll = 5 * time.Millisecond

// healthState is the daemon's side of the path-health reports. The loop
// owns conf and the program's life (under the daemon's mu); the poller
// reads the program and the source under h.mu, never the daemon's.
type healthState struct {
	conf    sockops.HealthConfig
	progErr string
	// latest are the peers' reports by connection (local token), as the
	// poller last read them: every poll, not only when one changed, so
	// that a report the peer keeps sending unchanged stays fresh (a
	// policy takes a report older than its stale limit for none: ramptcp
	// let go of a connection whose healthy path's report had not changed
	// for a second, while the peer sent it on every ACK).
	latest atomic.Pointer[map[uint32][]policy.PathHealth]
	polls  atomic.Uint64
	// est are the established subflows of the last round (the receiver
	// maps each to the interface its packets arrive on).
	est atomic.Pointer[[]observe.Subflow]

	mu   sync.Mutex // guards the rest
	prog *sockops.Health
	// readReports: a policy reads the peers' reports.
	readReports bool
	// The receiver's last-hop source.
	src     lasthop.Source
	srcKey  string
	srcErr  string
	srcAt   time.Time
	hops    map[string]lasthop.Sample // by interface
	devs    map[[2]netip.Addr]devEntry
	sent    map[policy.SubflowID]sentHop // what each subflow's reports carry
	samples int
	// lastBytes: the reports as last read, to tell a change.
	lastBytes map[sockops.PathKey][2]uint8
	forgotAt  time.Time
	reactions int
}

type devEntry struct {
	dev string
	at  time.Time
}

type sentHop struct {
	dev    string
	sample lasthop.Sample
}

// syncHealth loads, configures or unloads the health program as the
// config and the policies want it (under d.mu).
func (d *Daemon) syncHealth(req policy.Requirements) {
	parse := req.HealthReports || req.NotSentLowat > 0
	rep := d.cfg.ReportHealth
	if !parse && rep == nil {
		d.closeHealth()
		return
	}
	h := d.health
	if h == nil {
		h = &healthState{hops: map[string]lasthop.Sample{}, devs: map[[2]netip.Addr]devEntry{},
			sent: map[policy.SubflowID]sentHop{}, lastBytes: map[sockops.PathKey][2]uint8{}}
		d.health = h
		d.healthNow.Store(h)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	defer d.pokeHealth()
	h.readReports = req.HealthReports
	if h.prog == nil {
		if h.progErr != "" {
			return // tried and failed; said so once
		}
		p, err := sockops.NewHealth(d.cookie)
		if err != nil {
			h.progErr = err.Error()
			d.log.Printf("path-health reports are off: %v", err)
			return
		}
		h.prog = p
	}
	want := sockops.HealthConfig{Parse: parse, Report: rep != nil, NotSentLowat: uint32(req.NotSentLowat),
		NotSentLowatExcept: req.NotSentLowatExcept}
	if rep != nil {
		want.Window, want.MinSegments, want.Ports = rep.Window, uint32(rep.MinSegments), rep.Ports
	}
	if fmt.Sprint(want) != fmt.Sprint(h.conf) {
		if err := h.prog.Configure(want); err != nil {
			d.log.Printf("path-health program: %v", err)
		}
		h.conf = want
	}
	// The last-hop source.
	key := rep.Key()
	if key != h.srcKey {
		if h.src != nil {
			h.src.Close()
			h.src = nil
		}
		h.srcKey, h.srcErr = key, ""
		h.hops = map[string]lasthop.Sample{}
		if rep != nil && rep.Source != config.SourceTransport {
			src, err := d.opts.LastHop.Open(rep.Source, lasthop.Options{Window: rep.LastHopWindow, MinPackets: rep.MinPackets,
				Interfaces: rep.Interfaces, NetNS: d.netns, Dir: rep.LabDir})
			if err != nil {
				h.srcErr = err.Error()
				d.log.Printf("last-hop source %s: %v (reports carry the transport's view alone)", rep.Source, err)
			} else {
				h.src = src
			}
		}
		if h.src == nil {
			_ = h.prog.SetLastHop(nil)
		}
	}
}

// pokeHealth wakes the poller (it has new work, or none).
func (d *Daemon) pokeHealth() {
	select {
	case d.in.healthWake <- struct{}{}:
	default:
	}
}

// active reports whether the poller has work: reports to read or last
// hops to sample (under h.mu).
func (h *healthState) active() bool {
	return h.prog != nil && (h.readReports || h.src != nil)
}

// closeHealth unloads the program and closes the source (under d.mu).
func (d *Daemon) closeHealth() {
	h := d.health
	if h == nil {
		return
	}
	h.mu.Lock()
	if h.src != nil {
		h.src.Close()
		h.src = nil
	}
	if h.prog != nil {
		h.prog.Close()
		h.prog = nil
	}
	h.mu.Unlock()
	d.health = nil
	d.healthNow.Store(nil)
	d.pokeHealth()
}

// publishEstablished gives the poller this round's established subflows.
func (d *Daemon) publishEstablished() {
	if h := d.health; h != nil {
		est := established(d.view.subflows)
		h.est.Store(&est)
	}
}

// healthLoop polls the reports and the last hops while there is work,
// and sleeps until told otherwise when there is none.
func (d *Daemon) healthLoop(ctx context.Context) {
	for {
		h := d.healthNow.Load()
		busy := false
		if h != nil {
			h.mu.Lock()
			busy = h.active()
			h.mu.Unlock()
		}
		if !busy {
			// Nothing to poll: wait for a reload or a requirement to give
			// it something (syncHealth and closeHealth poke).
			select {
			case <-ctx.Done():
				return
			case <-d.in.healthWake:
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(healthPoll):
		}
		if d.pollHealth(h) {
			d.in.mark(func(in *inbox) { in.reports = true })
		}
	}
}

// pollHealth samples the last hops (at the source's interval) and reads
// the reports; it tells whether one changed.
func (d *Daemon) pollHealth(h *healthState) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.active() {
		return false
	}
	h.polls.Add(1)
	if h.src != nil && time.Since(h.srcAt) >= h.src.Interval() {
		h.srcAt = time.Now()
		hops, err := h.src.Sample()
		d.updateLastHops(h, hops, err)
	}
	var est []observe.Subflow
	if p := h.est.Load(); p != nil {
		est = *p
	}
	if time.Since(h.forgotAt) > time.Second {
		h.forgotAt = time.Now()
		live := map[uint32]bool{}
		for _, sf := range est {
			live[sf.Token] = true
		}
		h.prog.Forget(func(tok uint32) bool { return live[tok] })
	}
	if !h.readReports {
		return false
	}
	return h.readChanged()
}

// devOf is the interface a subflow's packets arrive on: the one the route
// back to the peer takes (paths are symmetric), cached for a few seconds.
func (h *healthState) devOf(local, remote netip.Addr, now time.Time) string {
	k := [2]netip.Addr{local, remote}
	if e, ok := h.devs[k]; ok && now.Sub(e.at) < 5*time.Second {
		return e.dev
	}
	dev := ""
	rs, err := vnl.RouteGetWithOptions(net.IP(remote.AsSlice()), &vnl.RouteGetOptions{SrcAddr: net.IP(local.AsSlice())})
	if err == nil && len(rs) > 0 {
		if ifi, err := net.InterfaceByIndex(rs[0].LinkIndex); err == nil {
			dev = ifi.Name
		}
	}
	h.devs[k] = devEntry{dev: dev, at: now}
	return dev
}

// updateLastHops puts the source's latest health of each last hop on the
// reports of the subflows that arrive over it (under h.mu).
func (d *Daemon) updateLastHops(h *healthState, hops map[string]lasthop.Sample, err error) {
	if err != nil {
		if h.srcErr == "" {
			d.log.Printf("last-hop source: %v", err)
		}
		h.srcErr = err.Error()
		hops = nil
	} else {
		h.srcErr = ""
		h.samples++
	}
	h.hops = hops
	now := time.Now()
	want := map[sockops.PathKey]uint8{}
	sent := map[policy.SubflowID]sentHop{}
	var est []observe.Subflow
	if p := h.est.Load(); p != nil {
		est = *p
	}
	for _, sf := range est {
		dev := h.devOf(sf.Local.Addr(), sf.Remote.Addr(), now)
		s, ok := hops[dev]
		sent[policy.ID(sf)] = sentHop{dev: dev, sample: s}
		if !ok || !s.Known {
			continue
		}
		want[sockops.PathKey{Token: sf.Token, LocalID: sf.LocalID, RemoteID: sf.RemoteID}] = sockops.Byte(s.Health)
	}
	h.sent = sent
	if err := h.prog.SetLastHop(want); err != nil {
		d.log.Printf("last-hop map: %v", err)
	}
}

// readChanged reads the peers' reports into latest and tells whether one
// changed since the last read (under h.mu).
func (h *healthState) readChanged() bool {
	reps, err := h.prog.Reports()
	if err != nil {
		return false
	}
	by := map[uint32][]policy.PathHealth{}
	changed := false
	seen := map[sockops.PathKey]bool{}
	for k, r := range reps {
		ph := policy.PathHealth{LocalID: k.LocalID, RemoteID: k.RemoteID, Received: r.At, Reports: r.Count,
			ViaLocalID: r.ViaLocalID, ViaRemoteID: r.ViaRemoteID}
		ph.Loss, ph.LossKnown = sockops.Fraction(r.Loss)
		ph.LastHop, ph.LastHopKnown = sockops.Fraction(r.LastHop)
		by[k.Token] = append(by[k.Token], ph)
		seen[k] = true
		b := [2]uint8{r.Loss, r.LastHop}
		if old, ok := h.lastBytes[k]; !ok || old != b {
			changed = true
			h.lastBytes[k] = b
		}
	}
	for k := range h.lastBytes {
		if !seen[k] {
			delete(h.lastBytes, k)
			changed = true
		}
	}
	for _, l := range by {
		sort.Slice(l, func(i, j int) bool {
			return l[i].LocalID < l[j].LocalID || l[i].LocalID == l[j].LocalID && l[i].RemoteID < l[j].RemoteID
		})
	}
	h.latest.Store(&by)
	if changed {
		h.reactions++
	}
	return changed
}

// healthOf is what snapshots carry for a connection.
func (d *Daemon) healthOf(token uint32) []policy.PathHealth {
	if d.health == nil {
		return nil
	}
	return d.health.reportsOf(token)
}

// reportsOf is the latest reports of a connection.
func (h *healthState) reportsOf(token uint32) []policy.PathHealth {
	if p := h.latest.Load(); p != nil {
		return (*p)[token]
	}
	return nil
}

func pct(v float64, ok bool) *float64 {
	if !ok {
		return nil
	}
	p := 100 * v
	return &p
}

// subflowHealth is a subflow's report for status: the last the peer sent
// about its path (sender), or the last hop this host reports (receiver).
func (d *Daemon) subflowHealth(sf observe.Subflow, now time.Time) *api.PathReport {
	h := d.health
	if h == nil {
		return nil
	}
	for _, r := range h.reportsOf(sf.Token) {
		if r.LocalID == sf.LocalID && r.RemoteID == sf.RemoteID {
			return &api.PathReport{Direction: "received", LossPct: pct(r.Loss, r.LossKnown), LastHopPct: pct(r.LastHop, r.LastHopKnown),
				At: r.Received, AgeMs: float64(now.Sub(r.Received)) / 1e6, Reports: r.Reports,
				Via: fmt.Sprintf("%d→%d", r.ViaLocalID, r.ViaRemoteID)}
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.sent[policy.ID(sf)]; ok && h.conf.Report {
		return &api.PathReport{Direction: "sent", LastHopPct: pct(s.sample.Health, s.sample.Known), Iface: s.dev,
			Detail: s.sample.Detail, At: h.srcAt, AgeMs: float64(now.Sub(h.srcAt)) / 1e6}
	}
	return nil
}

// healthStatus is the program's and the source's state for status.
func (d *Daemon) healthStatus() *api.HealthStatus {
	h := d.health
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	st := &api.HealthStatus{Report: h.conf.Report, Parse: h.conf.Parse, Error: h.progErr, SourceError: h.srcErr,
		Reactions: h.reactions}
	if rep := d.cfg.ReportHealth; rep != nil {
		st.Source = rep.Source
	}
	if h.prog != nil {
		st.Program = h.prog.Stats()
		tried := st.Program["acks"] - st.Program["no_info"]
		if tried > 0 {
			f := 100 * float64(st.Program["written"]+st.Program["partial"]) / float64(tried)
			st.FitPct = &f
		}
	}
	return st
}
