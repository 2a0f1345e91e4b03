package daemon

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"time"

	vnl "github.com/vishvananda/netlink"

	"mpsteer/internal/api"
	"mpsteer/internal/lasthop"
	"mpsteer/internal/observe"
	"mpsteer/internal/policy"
	"mpsteer/internal/sockops"
	"mpsteer/internal/yamlcfg"
)

// Receiver-assisted path health (RAMPTCP). A daemon whose config has a
// report_health section reports, as the data's receiver, what it sees of
// each path to its peers: the sockops health program counts the loss
// indications on each subflow and writes the report on its ACKs, and the
// daemon adds its last hops' health from a source (the lab's emulator,
// Wi-Fi station information). A daemon whose policies read reports
// (ramptcp) has the same program parse the peers' reports; it reads them
// every healthPoll and decides again at once when one changed, not only
// every interval.

// Last-hop sources of report_health.
const (
	SourceTransport = "transport" // transport-level reports alone
	SourceLab       = "lab"
	SourceWifi      = "wifi"
)

// healthPoll is how often the daemon reads the reports and samples its
// last hops (at the source's own interval).
const healthPoll = 5 * time.Millisecond

// ReportHealthConfig is the report_health section.
type ReportHealthConfig struct {
	// Source of the last hops' health: transport (none: transport-level
	// reports alone), lab or wifi.
	Source string
	// Window and MinSegments: the loss indications are counted over
	// Window; a path with fewer segments in it reports its loss as not
	// known.
	Window      time.Duration
	MinSegments int
	// Ports selects the connections to report on (none: all).
	Ports []uint16
	// LastHopWindow and MinPackets tune the source; Interfaces limits it.
	LastHopWindow time.Duration
	MinPackets    int
	Interfaces    []string
	// LabDir is the lab's state directory (default: found by the
	// namespace's name).
	LabDir string
}

// parseReportHealth reads report_health (nil when absent).
func parseReportHealth(m *yamlcfg.Map) *ReportHealthConfig {
	r := m.Map("report_health")
	if r == nil {
		return nil
	}
	c := &ReportHealthConfig{}
	c.Source = r.Enum("source", SourceTransport, SourceTransport, SourceLab, SourceWifi)
	c.Window = r.Duration("window", 100*time.Millisecond)
	if c.Window < 10*time.Millisecond || c.Window > 10*time.Second {
		r.Errorf("window", "%v is outside 10ms to 10s", c.Window)
	}
	c.MinSegments = r.Int("min_segments", 16, 1, 100000)
	for _, p := range r.Strings("ports") {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			r.Errorf("ports", "%q is not a port (1 to 65535)", p)
			continue
		}
		c.Ports = append(c.Ports, uint16(n))
	}
	if len(c.Ports) > 64 {
		r.Errorf("ports", "at most 64 ports")
	}
	c.LastHopWindow = r.Duration("last_hop_window", 0)
	if c.LastHopWindow < 0 || c.LastHopWindow > 2*time.Second {
		r.Errorf("last_hop_window", "%v is outside 0s (the source's default) to 2s", c.LastHopWindow)
	}
	c.MinPackets = r.Int("min_packets", 5, 1, 100000)
	c.Interfaces = r.Strings("interfaces")
	c.LabDir = r.String("lab_dir", "")
	r.Done()
	return c
}

func (c *ReportHealthConfig) key() string {
	if c == nil {
		return ""
	}
	return fmt.Sprintf("%+v", *c)
}

// healthState is the daemon's side of the path-health reports.
type healthState struct {
	prog    *sockops.Health
	progErr string
	conf    sockops.HealthConfig

	// The receiver's last-hop source.
	src     lasthop.Source
	srcKey  string
	srcErr  string
	srcAt   time.Time
	hops    map[string]lasthop.Sample // by interface
	devs    map[[2]netip.Addr]devEntry
	sent    map[policy.SubflowID]sentHop // what each subflow's reports carry
	samples int

	// The sender's reports, by connection (local token).
	reports   map[uint32][]policy.PathHealth
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
	h := d.health
	if !parse && rep == nil {
		if h != nil {
			d.closeHealth()
		}
		return
	}
	if h == nil {
		h = &healthState{hops: map[string]lasthop.Sample{}, devs: map[[2]netip.Addr]devEntry{}, sent: map[policy.SubflowID]sentHop{},
			reports: map[uint32][]policy.PathHealth{}, lastBytes: map[sockops.PathKey][2]uint8{}}
		d.health = h
	}
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
	want := sockops.HealthConfig{Parse: parse, Report: rep != nil, NotSentLowat: uint32(req.NotSentLowat)}
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
	key := rep.key()
	if key != h.srcKey {
		if h.src != nil {
			h.src.Close()
			h.src = nil
		}
		h.srcKey, h.srcErr = key, ""
		h.hops = map[string]lasthop.Sample{}
		if rep != nil && rep.Source != SourceTransport {
			src, err := lasthop.Open(rep.Source, lasthop.Options{Window: rep.LastHopWindow, MinPackets: rep.MinPackets,
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

// closeHealth unloads the program and closes the source (under d.mu).
func (d *Daemon) closeHealth() {
	h := d.health
	if h == nil {
		return
	}
	if h.src != nil {
		h.src.Close()
	}
	if h.prog != nil {
		h.prog.Close()
	}
	d.health = nil
}

// healthLoop reads the reports and samples the last hops until ctx ends.
func (d *Daemon) healthLoop(ctx context.Context) {
	t := time.NewTicker(healthPoll)
	defer t.Stop()
	idle := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d.mu.Lock()
		h := d.health
		// Without the program, look again now and then only.
		if (h == nil || h.prog == nil) != idle {
			idle = !idle
			if idle {
				t.Reset(250 * time.Millisecond)
			} else {
				t.Reset(healthPoll)
			}
		}
		var src lasthop.Source
		if h != nil && h.prog != nil && h.src != nil && time.Since(h.srcAt) >= h.src.Interval() {
			src = h.src
			h.srcAt = time.Now()
		}
		d.mu.Unlock()
		var hops map[string]lasthop.Sample
		var srcErr error
		if src != nil {
			hops, srcErr = src.Sample() // outside the lock: it may ask another process
		}
		d.mu.Lock()
		if h = d.health; h != nil && h.prog != nil {
			if src != nil && h.src == src {
				d.updateLastHops(h, hops, srcErr)
			}
			if h.conf.Parse {
				d.readReports(h)
			}
			if time.Since(h.forgotAt) > time.Second {
				h.forgotAt = time.Now()
				live := map[uint32]bool{}
				for _, sf := range d.lastSubflows {
					live[sf.Token] = true
				}
				for tok := range d.lastConns {
					live[tok] = true
				}
				h.prog.Forget(func(tok uint32) bool { return live[tok] })
			}
		}
		d.mu.Unlock()
	}
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
// reports of the subflows that arrive over it.
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
	for _, sf := range established(d.lastSubflows) {
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

// readReports takes in the peers' reports; when one changed, the policies
// decide again for its connection at once.
func (d *Daemon) readReports(h *healthState) {
	reps, err := h.prog.Reports()
	if err != nil {
		return
	}
	by := map[uint32][]policy.PathHealth{}
	changed := map[uint32]bool{}
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
			changed[k.Token] = true
			h.lastBytes[k] = b
		}
	}
	for k := range h.lastBytes {
		if !seen[k] {
			delete(h.lastBytes, k)
		}
	}
	for _, l := range by {
		sort.Slice(l, func(i, j int) bool {
			return l[i].LocalID < l[j].LocalID || l[i].LocalID == l[j].LocalID && l[i].RemoteID < l[j].RemoteID
		})
	}
	h.reports = by
	if len(changed) > 0 && d.engine.Requirements().HealthReports {
		h.reactions++
		d.reactHealth(changed, time.Now())
	}
}

// healthOf is what snapshots carry for a connection.
func (d *Daemon) healthOf(token uint32) []policy.PathHealth {
	if d.health == nil {
		return nil
	}
	return d.health.reports[token]
}

// reactHealth decides again for the connections whose reports changed,
// between samples, as react does for events.
func (d *Daemon) reactHealth(tokens map[uint32]bool, now time.Time) {
	snap := d.snapshot(now, d.lastSubflows, d.lastConns, nil)
	snap.Sampled = d.lastSampled // the figures are the last sample's
	full := d.engine.Decide(snap)
	if d.lastPlan.Backup == nil {
		d.lastPlan.Backup = map[policy.SubflowID]policy.Action{}
	}
	if d.lastPlan.Limits == nil {
		d.lastPlan.Limits = map[policy.SubflowID]policy.Action{}
	}
	var acts []api.ActionRecord
	for tok := range tokens {
		plan := full.ForToken(tok)
		var conn []observe.Subflow
		for _, o := range established(d.lastSubflows) {
			if _, ok := plan.Backup[policy.ID(o)]; ok && o.Token == tok {
				conn = append(conn, o)
			}
		}
		for sid, a := range plan.Backup {
			d.lastPlan.Backup[sid] = a
		}
		for sid, a := range plan.Limits {
			d.lastPlan.Limits[sid] = a
		}
		acts = append(acts, d.act.Apply(plan.Backup, conn, false)...)
		acts = append(acts, d.rates.Apply(plan.Limits, conn, false)...)
	}
	d.record(acts...)
	d.applyLifecycle(full.Lifecycle, snap, now)
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
	for _, r := range h.reports[sf.Token] {
		if r.LocalID == sf.LocalID && r.RemoteID == sf.RemoteID {
			return &api.PathReport{Direction: "received", LossPct: pct(r.Loss, r.LossKnown), LastHopPct: pct(r.LastHop, r.LastHopKnown),
				At: r.Received, AgeMs: float64(now.Sub(r.Received)) / 1e6, Reports: r.Reports,
				Via: fmt.Sprintf("%d→%d", r.ViaLocalID, r.ViaRemoteID)}
		}
	}
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
